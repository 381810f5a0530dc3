"""Reading finished runs back from the tables, no Spark: a run's tables and metrics
(:mod:`~pipelines.analysis.run_tables`), row diffs (:mod:`~pipelines.analysis.diff`), the
report (:mod:`~pipelines.analysis.figure_data`: what the figures show, computed;
:mod:`~pipelines.analysis.figures`: one run's Plotly figures, drawn on the page or rendered as
PNG; :mod:`~pipelines.analysis.sweep_figures`: a sweep's; :mod:`~pipelines.analysis.page`: the
report and sweep pages), the what-if scenarios
(:mod:`~pipelines.analysis.whatif`: scenarios and their comparison, a sweep's grid and rows,
the recommendation; their replays are :mod:`pipelines.spark.whatif`'s), idle windows filled
back in (:mod:`~pipelines.analysis.windows`) and the Great Expectations checks
(:mod:`~pipelines.analysis.validation`)."""
