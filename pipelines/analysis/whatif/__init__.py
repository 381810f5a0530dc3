"""What-if: one log replayed under other settings, compared, and the best setting recommended
(docs/whatif.md). Everything here reads and writes the tables without Spark; the replays are
:mod:`pipelines.spark.whatif`.

- :mod:`~pipelines.analysis.whatif.scenarios` — ``--scenario NAME=FILE_OR_SETS`` parsed into
  config overrides, a finished run reused, ``topic-replay compare``'s side-by-side table;
- :mod:`~pipelines.analysis.whatif.sweep` — ``topic-replay sweep``'s grid (``--grid``), the
  scenario names, what the scenarios must share to be replayed from one ingest, and the
  ``sweeps`` rows;
- :mod:`~pipelines.analysis.whatif.recommend` — a sweep's recommended scenario per topic and for
  the run;
- the sweep's page (heat maps, Pareto views) is drawn with the run pages, in
  :mod:`pipelines.analysis.page`.
"""
