"""The Spark side of the what-if scenarios (:mod:`pipelines.analysis.whatif`): replaying them.

- :func:`run_sweep` (``topic-replay sweep``): every scenario of a sweep from ONE ingest, the
  scenario's ``run_id`` part of every operator's grouping key, then the ``sweeps`` rows
  (:func:`pipelines.analysis.whatif.sweep.sweep_rows`);
- :func:`replay_scenarios` (``topic-replay compare``): one replay per scenario, then the
  side-by-side comparison (:func:`pipelines.analysis.whatif.scenarios.comparison_table`).

The scenarios, the sweep's grid and rows, and the recommendation are in
:mod:`pipelines.analysis.whatif` (no Spark); only the replays are here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from pipelines.analysis.whatif.scenarios import PreparedScenario, check_reuse, comparison_table
from pipelines.analysis.whatif.sweep import sweep_rows, write_sweep_rows
from pipelines.engine.findings import DEFAULT_FLAP_WINDOW_S
from pipelines.spark.delta_spark import open_store
from pipelines.spark.ingest import resolve_input_spec
from pipelines.spark.replay import Replay, RunSpec
from pipelines.storage.delta import DeltaStore


def run_sweep(spark: SparkSession, sweep_id: str, base: PreparedScenario,
              prepared: Sequence[PreparedScenario], inputs: Sequence[str], output: str,
              flap_window_s: int = DEFAULT_FLAP_WINDOW_S,
              progress: Callable[[Any], None] = print) -> pd.DataFrame:
    """Spark: replay ``inputs`` once for every scenario of ``prepared`` (one ingest under
    ``base``'s config and input spec; one run per scenario, run_id = its name) into
    ``output``, write the ``sweeps`` rows and return them.

    The replay's work folder is ``_work/sweep.<sweep_id>`` (a restart of the same sweep
    resumes there). Raises ``pipelines.storage.output_identity.OutputConflictError`` as
    ``topic-replay run`` does, for the sweep or any of its runs."""
    replay = Replay(spark, base.config, base.input_spec, list(inputs), output,
                    f"sweep.{sweep_id}", progress=progress,
                    runs=[RunSpec(p.scenario.name, p.config) for p in prepared])
    replay.run()
    if not replay.state.finalized:  # stopped (request_stop): a restart resumes the sweep
        return pd.DataFrame()
    store = DeltaStore(output, engine="delta-rs")
    rows = sweep_rows(store, sweep_id, [p.scenario for p in prepared], flap_window_s)
    write_sweep_rows(open_store(output, engine=replay.store.engine, spark=spark), sweep_id, rows)
    return rows


# ---- compare: one replay per scenario ------------------------------------------------------

def _prefixed(name: str) -> Callable[[object], None]:
    return lambda event: print(f"[{name}] {event}", flush=True)


def replay_scenarios(spark: SparkSession, prepared: Sequence[PreparedScenario],
                     inputs: Sequence[str], output: str, say: Callable[[str], None] = print,
                     progress_for: Callable[[str], Any] = _prefixed) -> pd.DataFrame:
    """Replay ``inputs`` once per scenario (run_id = scenario name) into ``output`` and return
    :func:`~pipelines.analysis.whatif.scenarios.comparison_table` over the scenarios, in the
    given order.

    ``say`` gets one line per scenario; ``progress_for(name)`` gives the ``progress`` callable
    of that scenario's :class:`pipelines.spark.replay.Replay` (closed after the run when it has
    ``close()``). A scenario whose finished run already exists with the same config and inputs
    is not replayed again (:func:`~pipelines.analysis.whatif.scenarios.check_reuse`).
    Everything is written under ``output`` (tables and each run's ``_work`` folder); nothing
    else is touched.
    """
    store = DeltaStore(output, engine="delta-rs")
    for p in prepared:
        name = p.scenario.name
        if check_reuse(store, p, inputs):
            say(f"scenario {name}: already in {output} with the same config and inputs; reused")
            continue
        say(f"scenario {name}: replaying with {', '.join(p.scenario.sets) or 'the base config'}")
        spec = resolve_input_spec(p.input_spec, spark, list(inputs))
        progress = progress_for(name)
        try:
            Replay(spark, p.config, spec, list(inputs), output, name, progress=progress).run()
        finally:
            if hasattr(progress, "close"):
                progress.close()
    return comparison_table(store, [p.scenario.name for p in prepared])
