"""Exactly-once across crashes (docs/design.md invariant 6, issue #4).

A replay runs as a subprocess (``python -m jobs.replay run …``) that SIGKILLs itself at a named
fault point (``TOPIC_REPLAY_FAULT``, see ``pipelines.storage.faults``): during a micro-batch,
after a micro-batch's Delta commit, between the replay's state commit and Spark's checkpoint
commit, and at several points of end-of-input finalization. It is restarted with the same
arguments; every table must then equal that of an uninterrupted run (delta-rs's, whichever
engine the interrupted run writes with) (``pipelines.analysis.diff``: same
rows, no duplicates, no gaps; only the wall-clock columns of ``runs`` may differ). The
uninterrupted run is the in-process reference replay (``run --engine local``), whose tables the
differential test ``tests/replays/test_local_engine.py`` holds equal to Spark's: a few seconds
instead of a Spark replay.

Each case is two subprocess replays on ``local[1]`` (about one core each), independent of the
others: the module runs the reference and every case it collects two at a time in the
background (``tests.guarantees.background``, each in its own folder), and each test asserts
on its own case's outcome, so a 2-core machine does the cases in about half the time. Nothing
is timed: a loaded machine only makes the cases slower.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from functools import partial
from pathlib import Path

import pandas as pd
import pytest

from pipelines.analysis.diff import diff_runs
from pipelines.contract.schemas import table_names
from pipelines.storage.delta import DeltaStore
from tests.conftest import ENGINES
from tests.guarantees.background import collected, run_in_background
from tests.guarantees.conftest import ORDERS_LOG_SETS, write_orders_log

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
SETS = [*ORDERS_LOG_SETS, "subscriptions.0.consumers.1.join=60"]
FAULT_POINTS = [
    "after_staging:1",              # during a micro-batch, before its commits
    "after_quarantine:1",           # after the micro-batch's quarantine commit
    "after_state:2",                # between the replay's state and Spark's checkpoint commit
    "after_write:segments:final",   # finalization: the segments snapshot written, rest not
    "after_write:messages:final",   # finalization: half of the tables written
    "adopted:entries",              # finalization: entries' files moved in, not committed
    "before_final_state",           # finalization written, its state not saved
    "before_receipt:final",         # emulation micro-batch: operators done, nothing recorded
    "after_receipt:final",          # emulation micro-batch recorded, Spark's commit not yet
]


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    return write_orders_log(tmp_path_factory.mktemp("crash_logs"), 4)


def _run(logs: Path, out: Path, options: list[str], engine: str,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``run`` of ``logs`` into ``out`` (run id ``crash``, the module's settings, Delta engine
    ``engine``) as a subprocess, with the options ``options``."""
    args = [sys.executable, "-m", "jobs.replay", "run", "--input", str(logs), "--output",
            str(out), "--run-id", "crash", *options,
            *[a for s in [*SETS, f"output.engine={engine}"] for a in ("--set", s)]]
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900, check=False)


def run_replay(logs: Path, out: Path, fault: str | None = None, engine: str = "delta-rs") -> int:
    env = {k: v for k, v in os.environ.items() if k != "TOPIC_REPLAY_FAULT"}
    if fault is not None:
        env["TOPIC_REPLAY_FAULT"] = fault
    done = _run(logs, out, ["--master", "local[1]", "--shuffle-partitions", "2"], engine, env)
    if done.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"replay failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.returncode


def run_reference(logs: Path, out: Path) -> int:
    """The uninterrupted run of the same input and settings by the local engine (no Spark)."""
    done = _run(logs, out, ["--engine", "local"], "delta-rs")
    if done.returncode != 0:
        raise AssertionError(f"reference replay failed ({done.returncode}):\n"
                             f"{done.stderr[-3000:]}")
    return done.returncode


def kill_and_restart(logs: Path, out: Path, fault: str, engine: str) -> tuple[int, int]:
    """The exit codes of a replay killed at ``fault`` and of its restart, both into ``out``."""
    return run_replay(logs, out, fault, engine), run_replay(logs, out, engine=engine)


@pytest.fixture(scope="module")
def outcomes(request, logs, tmp_path_factory) -> Iterator[dict[object, tuple[Path, Future]]]:
    """The uninterrupted reference (key ``None``, :func:`run_reference`) and every collected
    case (key ``(fault, engine)``): its output folder and the future of its exit codes
    (:func:`~tests.guarantees.background.run_in_background`). A failed run raises its
    ``AssertionError`` (with the replay's stderr) in the tests that wait on it."""
    cases = [(item.callspec.params["fault"], item.callspec.params["engine"]) for item in
             collected(request.session,
                       test_replay_killed_and_restarted_ends_with_the_uninterrupted_tables)]
    with run_in_background(
            tmp_path_factory, "crash", partial(run_reference, logs),
            [((f, e), f"{f.replace(':', '_')}_{e}",
              partial(kill_and_restart, logs, fault=f, engine=e)) for f, e in cases]) as runs:
        yield runs


@pytest.fixture(scope="module")
def reference(outcomes) -> DeltaStore:
    out, done = outcomes[None]
    assert done.result() == 0
    return DeltaStore(str(out), engine="delta-rs")


DELTA_SPARK_FAULT_POINTS = ["after_staging:1", "after_quarantine:1", "after_state:2",
                            "after_write:messages:final", "adopted:entries",
                            "after_receipt:final"]
"""The fault points also run under delta-spark (its commits are slower): a micro-batch's
commits, between the state and the checkpoint, and a half-written finalization — each a restart
that must skip what Delta's app transactions already hold."""
CASES = [pytest.param(f, "delta-rs", id=f"{f}-delta-rs") for f in FAULT_POINTS] + [
    pytest.param(f, "delta-spark", id=f"{f}-delta-spark", marks=ENGINES[1].marks)
    for f in DELTA_SPARK_FAULT_POINTS]


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "engine"), CASES)
def test_replay_killed_and_restarted_ends_with_the_uninterrupted_tables(
        outcomes, reference, fault, engine):
    # the reference is delta-rs's: a delta-spark restart must also end with the same tables
    out, done = outcomes[fault, engine]
    assert done.result() == (-signal.SIGKILL, 0)  # killed at the fault point, then finished
    store = DeltaStore(str(out), engine="delta-rs")
    # a delta-spark run's `runs` row names its engine (config, versions): its counts must match
    tables = [t for t in table_names() if engine == "delta-rs" or t != "runs"]
    diffs = diff_runs(reference, "crash", "crash", tables=tables, store_b=store)
    assert {d.table: (d.only_a, d.only_b) for d in diffs if not d.identical} == {}
    runs = store.read("runs", "crash")
    assert len(runs) == 1
    assert json.loads(runs["counts"].iloc[0]) == json.loads(
        reference.read("runs", "crash")["counts"].iloc[0])


# ---- the commits the restart relies on (delta-rs, no Spark) ----------------------------------


def _segments(run: str, ids: list[int]) -> pd.DataFrame:
    t = pd.Timestamp("2025-01-15", tz="UTC")
    return pd.DataFrame({
        "run_id": run, "topic": "t", "segment_id": ids, "range_start": 0, "range_end": 65535,
        "bucket_count": 1, "bucket_splits": [[0]] * len(ids), "state": "ACTIVE",
        "parent_ids": [[]] * len(ids), "child_ids": [[]] * len(ids), "created_at_epoch": 0,
        "sealed_at_epoch": -1, "created_at": t, "sealed_at": pd.NaT, "created_by": "initial"})


def test_replace_run_swaps_the_runs_rows_and_keeps_other_runs(tmp_path):
    store = DeltaStore(str(tmp_path), engine="delta-rs")
    store.append("segments", _segments("a", [0]), app_id="a:segments", version=0)
    store.append("segments", _segments("b", [7]), app_id="b:segments", version=0)
    assert store.replace_run("segments", _segments("a", [1, 2]), "a", "a:segments", 1)
    rows = store.read("segments")
    assert sorted(zip(rows["run_id"], rows["segment_id"], strict=True)) == [
        ("a", 1), ("a", 2), ("b", 7)]


def test_replace_run_already_committed_version_is_skipped(tmp_path):
    store = DeltaStore(str(tmp_path), engine="delta-rs")
    assert store.replace_run("segments", _segments("a", [1]), "a", "a:segments", 5)
    assert not store.replace_run("segments", _segments("a", [9]), "a", "a:segments", 5)
    assert store.read("segments", "a")["segment_id"].tolist() == [1]


def test_schema_problems_is_empty_for_tables_written_by_this_version(tmp_path):
    store = DeltaStore(str(tmp_path), engine="delta-rs")
    store.append("segments", _segments("a", [0]), app_id="a:segments", version=0)
    assert store.schema_problems() == []
