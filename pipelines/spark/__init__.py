"""The Spark runtime of the emulation: grouped stateful operators over event-time windows.

- :mod:`pipelines.spark.handover` — where the operators put what they hand each other (routed
  messages by producer shard, layouts, entries) and their output files; the state format.
- :mod:`pipelines.spark.control` — the control plane, keyed by ``(run_id, topic)``.
- :mod:`pipelines.spark.batching` — bucketed batching, keyed by ``(run_id, topic, shard)``.
- :mod:`pipelines.spark.dispatch` — dispatch, keyed by ``(run_id, topic, dispatcher)``.
- :mod:`pipelines.spark.emulation` — the streaming query chaining the three
  (``transformWithStateInPandas``, RocksDB state store) and its window feed and receipts.

docs/architecture.md, "Emulation query", has the data flow.
"""
