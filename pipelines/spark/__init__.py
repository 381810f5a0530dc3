"""The Spark runtime: the only package that imports pyspark (``tests/project/test_layout.py``).

- :mod:`pipelines.spark.session` / :mod:`pipelines.spark.worker_daemon` — the SparkSession and
  its Python workers; :mod:`pipelines.spark.delta_spark` — delta-spark's writer of the output
  tables, the engine a session's store writes with (``open_store``), the tables as Spark
  DataFrames.
- :mod:`pipelines.spark.ingest` / :mod:`pipelines.spark.udfs` — reading, parsing and mapping
  the input in Spark SQL; :mod:`pipelines.spark.staging_pass` — the one Python pass that
  applies the input rules and stages the accepted messages.
- :mod:`pipelines.spark.replay` — the replay (Q1: the query, stop requests, the micro-batch
  and end-of-input sequence), over :mod:`pipelines.spark.micro_batch` (one micro-batch's
  ingest, quarantine, salvage), :mod:`pipelines.spark.finalization` (windows through the
  emulation query, their tables committed by ``pipelines.storage.commits``),
  :mod:`pipelines.spark.replay_state` (the state between micro-batches),
  :mod:`pipelines.spark.stopwatch` (stage timers) and :mod:`pipelines.spark.remote_batch`
  (the micro-batch function under Spark Connect); :mod:`pipelines.spark.command_session`
  builds a command's session.
- The emulation's grouped stateful operators over event-time windows:
  :mod:`pipelines.spark.handover` (what the operators hand each other, and where; the state
  format), :mod:`pipelines.spark.control` (the control plane, keyed by ``(run_id, topic)``),
  :mod:`pipelines.spark.batching` (bucketed batching, keyed by ``(run_id, topic, shard)``),
  :mod:`pipelines.spark.dispatch` (dispatch, keyed by ``(run_id, topic, dispatcher)``),
  :mod:`pipelines.spark.emulation` (the streaming query chaining the three, with
  ``transformWithStateInPandas`` and the RocksDB state store, and its window feed and
  receipts).
- :mod:`pipelines.spark.whatif` (the what-if scenarios' replays: a sweep's from one ingest,
  ``compare``'s one per scenario; the rest of what-if is :mod:`pipelines.analysis.whatif`),
  :mod:`pipelines.spark.sql` (``topic-replay sql`` / ``maintain``),
  :mod:`pipelines.spark.schemas` (the tables' Spark schemas), :mod:`pipelines.spark.progress`
  (the console progress).

docs/architecture.md, "Emulation query", has the data flow.
"""
