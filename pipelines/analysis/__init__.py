"""Reading finished runs back from the tables: comparisons (:mod:`~pipelines.analysis.compare`),
row diffs (:mod:`~pipelines.analysis.diff`), the static and interactive reports
(:mod:`~pipelines.analysis.report`, :mod:`~pipelines.analysis.interactive`) and the Great
Expectations checks (:mod:`~pipelines.analysis.validation`). No Spark: running replays for a
comparison is :mod:`pipelines.spark.sweep`'s."""
