"""Reading finished runs back from the tables: comparisons (:mod:`~pipelines.analysis.compare`),
row diffs (:mod:`~pipelines.analysis.diff`), the report's figures
(:mod:`~pipelines.analysis.static_figures`: matplotlib; :mod:`~pipelines.analysis.interactive`:
Plotly, and the report and sweep pages, which embed both) and the Great
Expectations checks (:mod:`~pipelines.analysis.validation`). No Spark: running replays for a
comparison is :mod:`pipelines.spark.sweep`'s."""
