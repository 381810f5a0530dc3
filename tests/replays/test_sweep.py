"""``topic-replay sweep``: a grid of scenarios from one ingest, each scenario's tables equal to a
``topic-replay run`` of it alone, under both Delta engines; the ``sweeps`` table holds a row per
scenario. Input: the kill-and-restart tests' orders log (splits and merges, batches open at
splits, one bad line per file)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from jobs.replay import main
from pipelines.analysis.diff import diff_runs
from pipelines.storage.delta import DeltaStore
from tests.conftest import ENGINES
from tests.guarantees.conftest import ORDERS_LOG_SETS, write_orders_log

pytestmark = pytest.mark.spark

GRID = ["--grid", "policy.split_msg_rate_in=2,3", "--grid", "topic.bucket_budget=2,8"]
NAMED = "nomerge=policy.merge_msg_rate_in=0.1"
SCENARIOS = {  # run_id → its overrides
    "split_msg_rate_in-2.bucket_budget-2": ["policy.split_msg_rate_in=2", "topic.bucket_budget=2"],
    "split_msg_rate_in-2.bucket_budget-8": ["policy.split_msg_rate_in=2", "topic.bucket_budget=8"],
    "split_msg_rate_in-3.bucket_budget-2": ["policy.split_msg_rate_in=3", "topic.bucket_budget=2"],
    "split_msg_rate_in-3.bucket_budget-8": ["policy.split_msg_rate_in=3", "topic.bucket_budget=8"],
    "nomerge": ["policy.merge_msg_rate_in=0.1"],
}


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def _base(logs: Path, out: Path, engine: str) -> list[str]:
    return ["--input", str(logs), "--output", str(out), "--master", "local[2]",
            "--shuffle-partitions", "2",
            *[a for s in [*ORDERS_LOG_SETS, f"output.engine={engine}"] for a in ("--set", s)]]


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    return write_orders_log(tmp_path_factory.mktemp("sweep_logs"), 3)


@pytest.fixture(scope="module")
def alone(logs, tmp_path_factory) -> DeltaStore:
    """Every scenario replayed alone with ``topic-replay run --engine local`` (delta-rs): the
    reference engine, whose tables equal a Spark run's (tests/replays/test_local_engine.py),
    without a Spark replay per scenario; the sweep is what runs Spark here."""
    out = tmp_path_factory.mktemp("sweep_alone")
    for run_id, sets in SCENARIOS.items():
        code, _ = _cli("run", "--engine", "local", *_base(logs, out, "delta-rs"),
                       "--run-id", run_id, *[a for s in sets for a in ("--set", s)])
        assert code == 0
    return DeltaStore(str(out), engine="delta-rs")


SWEEP_ENGINES = ["delta-rs", pytest.param("delta-spark", marks=[*ENGINES[1].marks,
                                                                 pytest.mark.slow])]
"""delta-rs in the fast suite; delta-spark (a commit per table for all runs) in the slow one."""


@pytest.fixture(scope="module", params=SWEEP_ENGINES)
def swept(request, spark, logs, tmp_path_factory) -> tuple[DeltaStore, str]:
    out = tmp_path_factory.mktemp(f"sweep_{request.param}")
    code, printed = _cli("sweep", *_base(logs, out, request.param), *GRID,
                         "--scenario", NAMED, "--sweep-id", "t")
    assert code == 0, printed
    return DeltaStore(str(out), engine="delta-rs"), printed


@pytest.mark.parametrize("run_id", list(SCENARIOS))
def test_every_scenario_of_a_sweep_equals_its_run_alone(swept, alone, run_id):
    store, _ = swept
    diffs = [d for d in diff_runs(alone, run_id, run_id, store_b=store)
             if d.table not in ("runs", "sweeps") and not d.identical]
    assert [d.table for d in diffs] == []
    assert len(store.read("messages", run_id=run_id)) == 900  # 3 files × 300


def test_sweep_prints_the_scenario_it_recommends_and_why(swept):
    _, printed = swept
    line = next(x for x in printed.splitlines() if x.startswith("recommended for the run: "))
    scenario = line.removeprefix("recommended for the run: ").split(" — ")[0]
    assert scenario in SCENARIOS
    assert "fewest flaps" in line


def test_sweep_runs_rows_count_like_runs_alone(swept, alone):
    store, _ = swept
    for run_id in SCENARIOS:
        counts = json.loads(store.read("runs", run_id=run_id)["counts"].iloc[0])
        assert counts == json.loads(alone.read("runs", run_id=run_id)["counts"].iloc[0])


def test_sweeps_table_has_a_row_per_scenario_with_its_settings(swept, alone):
    store, printed = swept
    rows = store.read("sweeps").sort_values("run_id")
    assert rows["run_id"].tolist() == sorted(SCENARIOS)
    assert set(rows["sweep_id"]) == {"t"}
    settings = dict(zip(rows["run_id"], rows["settings"].map(json.loads), strict=True))
    assert settings["split_msg_rate_in-3.bucket_budget-8"] == {"policy.split_msg_rate_in": 3,
                                                                "topic.bucket_budget": 8}
    assert settings["nomerge"] == {"policy.merge_msg_rate_in": 0.1}
    entries = dict(zip(rows["run_id"], rows["entries"], strict=True))
    assert entries == {r: len(alone.read("entries", run_id=r)) for r in SCENARIOS}
    assert "entries per message" in printed


def test_sweep_again_with_the_same_settings_changes_nothing(swept, logs):
    store, _ = swept
    before = len(store.read("messages"))
    engine = json.loads(store.read("runs")["versions"].iloc[0])["engine"]
    code, _ = _cli("sweep", *_base(logs, Path(store.root), engine), *GRID,
                   "--scenario", NAMED, "--sweep-id", "t")
    assert code == 0
    assert len(store.read("messages")) == before
    assert len(store.read("sweeps")) == len(SCENARIOS)


def test_sweep_refuses_a_scenario_run_that_already_exists(alone, logs, capsys):
    code = main(["sweep", *_base(logs, Path(alone.root), "delta-rs"), *GRID,
                 "--sweep-id", "other"])
    assert code == 2
    assert "run split_msg_rate_in-2.bucket_budget-2 already exists" in capsys.readouterr().err
