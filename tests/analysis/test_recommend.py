"""Tests for the sweep's recommended policy (pipelines/analysis/whatif/recommend.py): the rule on
hand-made candidates, then on three replays of a burst-then-quiet log, and on the sweep page."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from pipelines.analysis.page import write_sweep_page
from pipelines.analysis.whatif.recommend import (
    RUN_SCOPE,
    _choose,
    format_recommendations,
    recommend,
)
from pipelines.analysis.whatif.scenarios import Scenario
from pipelines.analysis.whatif.sweep import sweep_rows, write_sweep_rows
from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.engine.findings import DEFAULT_FLAP_WINDOW_S
from pipelines.engine.local import run_local
from pipelines.storage.delta import DeltaStore
from pipelines.workload.generator import WorkloadSpec, generate


def cand(*rows: tuple[str, float, int, int, int, float]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["scenario", "overload_s", "flaps", "changes",
                                       "idle_consumers", "entries_per_message"])


@pytest.mark.parametrize(("candidates", "picked", "acceptable"), [
    # fewest flaps among those as little over capacity as any
    (cand(("a", 0, 2, 4, 0, 1.0), ("b", 0, 0, 6, 0, 1.0)), "b", ["a", "b"]),
    # no flaps but far over capacity: not acceptable
    (cand(("a", 0, 2, 4, 0, 1.0), ("b", 600, 0, 0, 0, 1.0)), "a", ["a"]),
    # within one auto-scale interval (60 s) of the least overload: acceptable
    (cand(("a", 0, 2, 4, 0, 1.0), ("b", 60, 0, 0, 0, 1.0)), "b", ["a", "b"]),
    # ties: changes, then idle consumers, then entries per message, then name
    (cand(("a", 0, 0, 3, 0, 1.0), ("b", 0, 0, 2, 1, 1.0)), "b", ["a", "b"]),
    (cand(("a", 0, 0, 2, 1, 1.0), ("b", 0, 0, 2, 0, 1.0)), "b", ["a", "b"]),
    (cand(("a", 0, 0, 2, 0, 0.9), ("b", 0, 0, 2, 0, 0.5)), "b", ["a", "b"]),
    (cand(("b", 0, 0, 2, 0, 0.5), ("a", 0, 0, 2, 0, 0.5)), "a", ["a", "b"]),
])
def test_rule_picks_the_fewest_flaps_then_changes_among_acceptable_scenarios(
        candidates, picked, acceptable) -> None:
    rec = _choose("t", candidates, 60.0)
    assert rec.scenario == picked
    assert sorted(rec.candidates.loc[rec.candidates["acceptable"], "scenario"]) == acceptable
    assert rec.candidates.set_index("scenario").loc[picked, "pareto"]


SPEC = {"seed": 11, "start_time": "2025-01-15T09:00:00Z", "duration_s": 900, "format": "json",
        "gzip": False, "file_span_s": 900,
        "topics": [{"name": "t", "producers": 2,
                    "rate": {"kind": "steps", "steps": [{"at_s": 0, "msg_rate": 25},
                                                        {"at_s": 420, "msg_rate": 5}]},
                    "keys": {"distribution": "uniform", "n_keys": 500},
                    "payload": {"kind": "fixed", "size": 100}}]}
BASE = ["policy.merge_window_s=60", "policy.merge_cooldown_s=60", "policy.max_segments=2"]
SCENARIOS: dict[str, dict[str, Any]] = {
    "flappy": {"policy.split_msg_rate_in": 15, "policy.merge_msg_rate_in": 8},
    "steady": {"policy.split_msg_rate_in": 15, "policy.merge_msg_rate_in": 0},
    "lazy": {"policy.split_msg_rate_in": 100, "policy.merge_msg_rate_in": 8},
}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> DeltaStore:
    log = tmp_path_factory.mktemp("log")
    generate(WorkloadSpec.model_validate(SPEC), log)
    out = tmp_path_factory.mktemp("out")
    for run_id, settings in SCENARIOS.items():
        cfg = load_config(None, BASE + [f"{k}={v}" for k, v in settings.items()])
        run_local(cfg, get_preset("contract").replace(format="json"), [str(log)], str(out),
                  run_id, progress=lambda _: None)
    store = DeltaStore(str(out), engine="delta-rs")
    grid = [Scenario(r, tuple(f"{k}={v}" for k, v in s.items()), "")
            for r, s in SCENARIOS.items()]
    write_sweep_rows(store, "grid", sweep_rows(store, "grid", grid, DEFAULT_FLAP_WINDOW_S))
    return store


def test_sweep_recommends_the_scenario_that_splits_without_flapping(sweep) -> None:
    recs = {r.scope: r for r in recommend(sweep, list(SCENARIOS))}
    assert list(recs) == ["t", RUN_SCOPE]
    for rec in recs.values():
        c = rec.candidates.set_index("scenario")
        assert rec.scenario == "steady"
        assert c.loc["flappy", "flaps"] >= 1 and c.loc["steady", "flaps"] == 0
        # the lazy policy never splits: its one segment is over 15 msg/s for the burst
        assert not c.loc["lazy", "acceptable"]
        assert c.loc["lazy", "overload_s"] > c.loc["steady", "overload_s"] + 60
        assert "steady has the fewest flaps (0)" in rec.reason


def test_recommendation_lines_name_the_scope_and_scenario(sweep) -> None:
    lines = format_recommendations(recommend(sweep, list(SCENARIOS)))
    assert lines[0].startswith("recommended for topic t: steady — ")
    assert lines[1].startswith("recommended for the run: steady — ")


def test_sweep_page_shows_the_recommendation(sweep, tmp_path) -> None:
    page = write_sweep_page(sweep, "grid", tmp_path / "sweep.html")
    text = (tmp_path / "sweep.html").read_text()
    assert page["scenarios"] == 3
    assert "<h2>Recommended</h2>" in text
    assert "<b>the run</b>: <a href='#run-steady'>steady</a>" in text
    assert "<table class='findings'>" in text  # each scenario's findings


def test_runs_without_a_runs_row_are_left_out(sweep) -> None:
    assert recommend(sweep, ["missing"]) == []
