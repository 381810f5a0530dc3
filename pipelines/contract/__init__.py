"""The input and output contract: the run configuration (:mod:`~pipelines.contract.config`),
the input presets and mappings (:mod:`~pipelines.contract.presets`) and the output tables'
schemas (:mod:`~pipelines.contract.schemas`). Imports only :mod:`pipelines.core`; no Spark."""
