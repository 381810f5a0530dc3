"""Where the replay's data lives: locations and filesystems (:mod:`~pipelines.storage.fs`), the
Delta tables (:mod:`~pipelines.storage.delta`: the store and its writer interface;
:mod:`~pipelines.storage.delta_format`: the table format every writer writes;
:mod:`~pipelines.storage.delta_rs`: delta-rs's writer), the staged input
(:mod:`~pipelines.storage.staging`), the emulation's output files
(:mod:`~pipelines.storage.frames`) and the crash-test fault hook
(:mod:`~pipelines.storage.faults`). Imports only core, contract and ingest, and never Spark:
delta-spark's writer is :mod:`pipelines.spark.delta_spark`."""
