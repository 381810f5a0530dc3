"""Where the replay's data lives: locations and filesystems (:mod:`~pipelines.storage.fs`), the
Delta tables (:mod:`~pipelines.storage.delta`), the staged input
(:mod:`~pipelines.storage.staging`), the emulation's output files
(:mod:`~pipelines.storage.frames`) and the crash-test fault hook
(:mod:`~pipelines.storage.faults`). Imports only core, contract and ingest; Spark only lazily, on
the delta-spark paths of :mod:`~pipelines.storage.delta`."""
