"""Clean stops (issue #21): SIGTERM or SIGINT to the whole process group of a replay (the JVM
and its Python workers included, as systemd and Airflow send it), or to the driver alone, stops
``topic-replay stream`` / ``run`` after the micro-batch in progress: one status line, exit 0, no
traceback; a restart then ends with the tables of an uninterrupted run (nothing lost or
doubled). The replay runs as a subprocess in a session (process group) of its own.

The uninterrupted run they are compared with is the in-process reference replay (``run --engine
local``), whose tables the differential test ``tests/replays/test_local_engine.py`` holds equal to
Spark's: a few seconds instead of a Spark replay.

The cases are independent subprocess replays on ``local[1]`` (about one core each): the module
runs the reference and every collected case two at a time in the background
(``tests.guarantees.background``), and each test asserts on its own case's outcome. Nothing
is timed (the wait for ``batch 0:`` is a guard against a hang): a loaded machine only makes
the cases slower."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from pipelines.analysis.diff import diff_runs
from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.spark.replay import Replay
from pipelines.storage.delta import DeltaStore
from tests.guarantees.background import collected, run_in_background
from tests.guarantees.conftest import ORDERS_LOG_SETS, write_orders_log

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
SETS = [*ORDERS_LOG_SETS, "replay.allowed_lateness_s=30"]
TABLES = ["messages", "entries", "segments", "segment_load", "autoscale_decisions", "dispatch",
          "consumer_load", "bucket_handoffs", "subscription_stats", "segment_drains",
          "quarantine"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    """Five files of 300 messages (one micro-batch each), one bad line in each."""
    return write_orders_log(tmp_path_factory.mktemp("stop_logs"), 5)


def _args(command: str, logs: Path, out: Path, *where: str) -> list[str]:
    where = where or ("--master", "local[1]", "--shuffle-partitions", "2")
    return [sys.executable, "-m", "jobs.replay", command, "--input", str(logs), "--output",
            str(out), "--run-id", "stop", *where, *[a for s in SETS for a in ("--set", s)]]


def run_to_end(logs: Path, out: Path, *where: str) -> None:
    """``run`` to the end into ``out``: on ``local[1]``, or with the options ``where``."""
    done = subprocess.run(_args("run", logs, out, *where), cwd=REPO, capture_output=True,
                          text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def stop_after_first_batch(command: str, logs: Path, out: Path, signum: int,
                           group: bool) -> tuple[int, str, str]:
    """Start ``command`` in a session of its own, wait for its ``batch 0:`` line, send
    ``signum`` to its process group (``group``) or to the driver alone; returns ``(exit code,
    stdout, stderr)``."""
    proc = subprocess.Popen(_args(command, logs, out), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        seen = []
        deadline = time.monotonic() + 600  # a guard against a hang, not a timing assumption
        while time.monotonic() < deadline:
            line = proc.stdout.readline() if proc.stdout else ""
            seen.append(line)
            if line.startswith("batch 0:") or not line:
                break
        assert any(x.startswith("batch 0:") for x in seen), "".join(seen)
        if group:
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
        out_text, err_text = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, "".join(seen) + out_text, err_text


CASES = {"stream_group_sigterm": ("stream", signal.SIGTERM, True),
         "run_group_sigint": ("run", signal.SIGINT, True),
         "run_driver_sigterm": ("run", signal.SIGTERM, False)}
"""Case id -> (command, signal, to the whole process group?)."""


def stop_and_restart(logs: Path, out: Path, command: str, signum: int,
                     group: bool) -> tuple[int, str, str]:
    """:func:`stop_after_first_batch`'s ``(exit code, stdout, stderr)``; then, if the stop
    exited 0, the restart run to the end into the same ``out``."""
    stopped = stop_after_first_batch(command, logs, out, signum, group)
    if stopped[0] == 0:
        run_to_end(logs, out)
    return stopped


@pytest.fixture(scope="module")
def outcomes(request, logs, tmp_path_factory) -> Iterator[dict[str | None, tuple[Path, Future]]]:
    """The uninterrupted reference (key ``None``, by the local engine) and every collected case
    (by id): its output
    folder and the future of its outcome
    (:func:`~tests.guarantees.background.run_in_background`). A failed run raises its
    ``AssertionError`` in the tests that wait on it."""
    ids = [item.callspec.id for item in collected(
        request.session, test_stopped_replay_exits_cleanly_and_resumes_to_the_uninterrupted_tables)]
    with run_in_background(tmp_path_factory, "stop",
                           lambda out: run_to_end(logs, out, "--engine", "local"),
                           [(case, case, lambda out, c=CASES[case]: stop_and_restart(logs, out, *c))
                            for case in ids]) as runs:
        yield runs


@pytest.fixture(scope="module")
def reference(outcomes) -> DeltaStore:
    out, done = outcomes[None]
    done.result()
    return DeltaStore(str(out), engine="delta-rs")


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_stopped_replay_exits_cleanly_and_resumes_to_the_uninterrupted_tables(
        outcomes, reference, case):
    out_dir, done = outcomes[case]
    code, out, err = done.result()  # the stop's; the restart has run when it exited 0
    assert code == 0, err[-3000:]
    status = [x for x in out.splitlines() if x.startswith("stopped; ")]
    assert len(status) == 1 and f"tables under {out_dir} are current up to batch" in status[0]
    assert "Traceback" not in err and "Py4J" not in err and "Exception" not in err, err[-3000:]
    store = DeltaStore(str(out_dir), engine="delta-rs")
    diffs = diff_runs(reference, "stop", "stop", store_b=store, tables=TABLES)
    assert {d.table: (d.only_a, d.only_b) for d in diffs if not d.identical} == {}
    assert len(store.read("messages", "stop")) == 1500


def test_replay_stopped_before_its_first_batch_writes_nothing_and_a_restart_finishes(
        spark, logs, tmp_path):
    cfg = load_config(None, SETS)
    spec = get_preset("contract").replace(format="json", speed=1.0)

    def replay() -> Replay:
        return Replay(spark, cfg, spec, [str(logs)], str(tmp_path), "stop",
                      progress=lambda _: None)

    first = replay()
    first.request_stop()
    try:
        assert first.run() == {}
    finally:
        spark.sparkContext.setLogLevel("WARN")  # the stop silenced the shared session
    assert first.state.batch_id == -1 and not first.state.finalized
    store = DeltaStore(str(tmp_path), engine="delta-rs")
    assert len(store.read("messages", "stop")) == 0
    summary = replay().run()
    assert (summary["accepted"], summary["quarantined"]) == (1500, 5)
    assert len(store.read("messages", "stop")) == 1500
