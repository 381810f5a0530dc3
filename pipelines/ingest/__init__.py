"""The input rules both engines apply, on Arrow columns: validation, quarantine reasons, parsing
and key hashes (:mod:`~pipelines.ingest.rules`), the up-front column check
(:mod:`~pipelines.ingest.input_check`) and pseudonyms (:mod:`~pipelines.ingest.privacy`). No
Spark (the Spark reader and mapping are :mod:`pipelines.spark.ingest`)."""
