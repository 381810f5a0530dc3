"""Reading finished runs back from the tables, no Spark: a run's tables and metrics
(:mod:`~pipelines.analysis.run_tables`), row diffs (:mod:`~pipelines.analysis.diff`), the
report's figures (:mod:`~pipelines.analysis.figure_data`: what both figure sets show;
:mod:`~pipelines.analysis.figures`: matplotlib; :mod:`~pipelines.analysis.page`:
Plotly, and the report and sweep pages, which embed both), the what-if scenarios
(:mod:`~pipelines.analysis.whatif`: scenarios and their comparison, a sweep's grid and rows,
the recommendation; their replays are :mod:`pipelines.spark.whatif`'s), idle windows filled
back in (:mod:`~pipelines.analysis.windows`) and the Great Expectations checks
(:mod:`~pipelines.analysis.validation`)."""
