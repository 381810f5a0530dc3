"""The application layer: one function per ``topic-replay`` command, below ``jobs/replay.py``
(which only parses arguments and dispatches here). The top layer: it may import every other.

- :mod:`pipelines.app.errors` — ``UsageError``: a user mistake, one sentence, exit code 2.
- :mod:`pipelines.app.inputs` — the config and input spec of a replay command, checked once
  (files, preset, mapped columns, format and epoch unit guesses, Kafka inputs), no Spark.
- :mod:`pipelines.app.outputs` — output checks (exists, finished runs, run identity,
  ``--html`` targets, table names), no Spark.
- :mod:`pipelines.app.spark_options` — ``--remote`` / ``--master`` checks and where Spark's log
  goes, no Spark.
- :mod:`pipelines.app.replay` — ``run`` and ``stream`` (Spark, or the local engine).
- :mod:`pipelines.app.whatif` — ``compare`` and ``sweep``.
- :mod:`pipelines.app.tables` — ``summary``, ``diff``, ``validate``, ``report`` (delta-rs).
- :mod:`pipelines.app.sql` — ``sql`` and ``maintain``.
- :mod:`pipelines.app.capture` — ``capture``; :mod:`pipelines.app.generate` — ``generate``.

Each command is ``command(args: argparse.Namespace) -> int`` (the exit code); only the modules
of Spark commands (``replay``, ``whatif``, ``sql``) import ``pipelines.spark``, and none imports
pyspark itself (``tests/project/test_layout.py``).
"""
