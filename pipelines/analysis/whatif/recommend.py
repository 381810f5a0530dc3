"""A recommended policy from a sweep (issue #34): for each topic, and for the run as a whole,
the scenario the sweep recommends and why, by one documented rule over the Pareto front
(docs/findings.md, "Recommended policy"):

1. **Capacity**: a topic's segment capacity is the tightest split threshold
   (``policy.split_msg_rate_in``) any scenario of the sweep gives it — the most any scenario
   asks of one segment. A scenario with a looser threshold is not let off by its own policy.
2. **Overload** (``overload_s``): how long some active segment of the topic sampled a
   ``msg_rate_in`` above that capacity (load samples × ``replay.load_report_interval_s``,
   ``segment_load``). Scenarios within one auto-scale interval (``replay.auto_scale_interval_s``)
   of the least overload keep the segments under capacity as well as any; load no split can
   relieve (a key over the capacity, see the ``hot_key`` finding) counts in every scenario.
3. Among those: fewest ``flaps``, then fewest layout changes (splits + merges + rebuckets), then
   fewest idle consumers, then fewest entries per message, then the scenario name. The pick is
   on the Pareto front of (overload, flaps, changes, idle consumers) — no scenario is at least as
   good in all four and better in one.

Per topic the numbers come from each scenario's ``topic_profile`` row; for the run, they are
summed over topics (overload: seconds in which any topic was over). No Spark.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from pipelines.contract.config import ReplayConfig, parse_config
from pipelines.engine.findings import active_samples
from pipelines.storage.delta import DeltaStore

RUN_SCOPE = "(run)"
"""The ``scope`` of the run-wide recommendation (the other scopes are topic names)."""

CRITERIA = ("overload_s", "flaps", "changes", "idle_consumers", "entries_per_message")
"""What a scenario is judged on, in the rule's order (all minimized)."""


@dataclass(frozen=True)
class Recommendation:
    """The scenario recommended for one ``scope`` (a topic or :data:`RUN_SCOPE`), the rule's
    numbers for every scenario (``candidates``: one row per scenario, :data:`CRITERIA`,
    ``acceptable`` and ``pareto``), and the reason in words."""

    scope: str
    scenario: str
    reason: str
    candidates: pd.DataFrame


def _config(store: DeltaStore, run_id: str) -> ReplayConfig | None:
    """The run's config (``runs.config``); ``None`` for a run without a ``runs`` row."""
    runs = store.read("runs", run_id=run_id)
    if runs.empty:
        return None
    return parse_config(json.loads(runs["config"].iloc[-1]))


def _overload(store: DeltaStore, run_id: str, capacity: dict[str, float],
              interval_s: float) -> pd.DataFrame:
    """Per topic: ``overload_s`` = sample times with some active segment above the topic's
    ``capacity`` × ``interval_s``, and the sample times themselves (``_over``: a set) for the
    run-wide union."""
    samples = active_samples(store.read("segment_load", run_id=run_id),
                             store.read("segments", run_id=run_id))
    rows = []
    for topic, cap in capacity.items():
        s = samples[(samples["topic"] == topic) & (samples["msg_rate_in"] > cap)]
        over = set(s["sample_time"])
        rows.append({"topic": topic, "overload_s": len(over) * interval_s, "_over": over})
    return pd.DataFrame(rows, columns=["topic", "overload_s", "_over"])


def pareto_mask(values: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    """Rows of ``values`` (scenarios × criteria, all minimized) on the Pareto front: no other row
    is ≤ in every criterion and < in one."""
    front = np.ones(len(values), dtype=bool)
    for i in range(len(values)):
        le = (values <= values[i]).all(axis=1)
        lt = (values < values[i]).any(axis=1)
        front[i] = not (le & lt).any()
    return front


def _choose(scope: str, cand: pd.DataFrame, tolerance_s: float) -> Recommendation:
    """Apply the rule (module doc) to ``cand`` (one row per scenario: ``scenario`` and
    :data:`CRITERIA`)."""
    cand = cand.sort_values("scenario", kind="stable").reset_index(drop=True)
    best_overload = float(cand["overload_s"].min())
    cand["acceptable"] = cand["overload_s"] <= best_overload + tolerance_s
    cand["pareto"] = pareto_mask(cand[["overload_s", "flaps", "changes",
                                       "idle_consumers"]].to_numpy(dtype=float))
    ok = cand[cand["acceptable"]].assign(
        _epm=cand["entries_per_message"].fillna(np.inf))
    ranked = ok.sort_values(["flaps", "changes", "idle_consumers", "_epm", "scenario"],
                            kind="stable")
    pick = ranked.iloc[0]
    runner = ranked.iloc[1] if len(ranked) > 1 else None
    reason = (f"{int(cand['acceptable'].sum())} of {len(cand)} scenarios keep the segments under "
              f"capacity as well as any (over capacity {pick['overload_s']:,.0f} s; least "
              f"{best_overload:,.0f} s, tolerance {tolerance_s:,.0f} s); among them "
              f"{pick['scenario']} has the fewest flaps ({int(pick['flaps'])}), then layout "
              f"changes ({int(pick['changes'])}), idle consumers "
              f"({int(pick['idle_consumers'])})")
    if runner is not None:
        reason += (f"; next: {runner['scenario']} ({int(runner['flaps'])} flaps, "
                   f"{int(runner['changes'])} changes, {int(runner['idle_consumers'])} idle)")
    return Recommendation(scope, str(pick["scenario"]), reason + ".", cand)


def recommend(store: DeltaStore, run_ids: Sequence[str]) -> list[Recommendation]:
    """The recommendations of a sweep's runs ``run_ids`` in ``store``: one per topic (topics in
    name order), then the run-wide one (:data:`RUN_SCOPE`). Runs without a ``runs`` row (not
    finished) are left out; ``[]`` when none is left."""
    found = {r: _config(store, r) for r in run_ids}
    configs = {r: c for r, c in found.items() if c is not None}
    run_ids = [r for r in run_ids if r in configs]
    if not run_ids:
        return []
    profiles = {r: store.read("topic_profile", run_id=r) for r in run_ids}
    topics = sorted({t for p in profiles.values() for t in p["topic"]})
    capacity = {t: min(float(c.policy_for(t).split_msg_rate_in) for c in configs.values())
                for t in topics}
    base = configs[run_ids[0]].replay
    tolerance = float(base.auto_scale_interval_s)
    rows, run_rows = [], []
    for r in run_ids:
        interval = float(configs[r].replay.load_report_interval_s)
        over = _overload(store, r, capacity, interval)
        prof = profiles[r].merge(over, on="topic", how="left")
        for p in prof.to_dict("records"):
            rows.append({"scope": p["topic"], "scenario": r,
                         "overload_s": float(p["overload_s"]), "flaps": int(p["flaps"]),
                         "changes": int(p["splits"] + p["merges"] + p["rebuckets"]),
                         "idle_consumers": int(p["idle_consumers"]),
                         "entries_per_message": p["entries_per_message"]})
        union: set[Any] = set().union(*over["_over"]) if len(over) else set()
        entries, messages = prof["entries"].sum(), prof["messages"].sum()
        run_rows.append({"scope": RUN_SCOPE, "scenario": r,
                         "overload_s": len(union) * interval,
                         "flaps": int(prof["flaps"].sum()),
                         "changes": int((prof["splits"] + prof["merges"]
                                         + prof["rebuckets"]).sum()),
                         "idle_consumers": int(prof["idle_consumers"].sum()),
                         "entries_per_message": entries / messages if messages else None})
    frame = pd.DataFrame(rows + run_rows)
    out = [_choose(t, frame[frame["scope"] == t].drop(columns="scope"), tolerance)
           for t in topics]
    out.append(_choose(RUN_SCOPE, frame[frame["scope"] == RUN_SCOPE].drop(columns="scope"),
                       tolerance))
    return out


def format_recommendations(recs: Sequence[Recommendation]) -> list[str]:
    """Lines for the console: ``recommended for <scope>: <scenario> — <reason>``."""
    return [f"recommended for {'the run' if r.scope == RUN_SCOPE else 'topic ' + r.scope}: "
            f"{r.scenario} — {r.reason}" for r in recs]
