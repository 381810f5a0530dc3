"""The replay on a real cluster (issue #16): a Spark standalone master and two one-core
workers, each a JVM of its own with its own Python workers (``standalone_cluster``), run
``topic-replay run --master spark://127.0.0.1:<port>`` on the sample; every table must equal
that of the same replay in process (``run --engine local``, the reference the differential test
``tests/replays/test_local_engine.py`` holds equal to a ``local[*]`` Spark replay, table by
table: a seventh of a Spark replay's CPU).

Both replays run as ``topic-replay`` subprocesses from the same scratch folder with a relative
``--input`` (a copy of ``data/sample``) and ``--output`` (as ``make run`` gives them): executors
resolve nothing against their own working folder. Compared with
:func:`pipelines.analysis.diff.diff_runs`: every column of every table but the ``run_id`` and the
wall-clock columns of ``runs`` (``started_at``, ``ended_at``, ``timings``: when the run
happened and how long its stages took, which no two runs share); the master is recorded
nowhere in the tables, so nothing else may differ.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.spark.replay import Replay
from pipelines.storage.delta import DeltaStore
from pipelines.storage.output_identity import (
    OutputConflictError,
    check_output_path,
    read_manifest,
)
from tests.guarantees.conftest import assert_replays_equal

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample"
SAMPLE_MESSAGES = 195_705  # data/README.md: every record of the sample is accepted


def topic_replay() -> list[str]:
    """The ``topic-replay`` console script of this interpreter's environment."""
    script = shutil.which("topic-replay", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "jobs.replay"]


def replay(where: list[str], cwd: Path, output: str, env: dict[str, str] | None = None) -> str:
    """``topic-replay run`` of ``cwd/sample`` under ``conf/sample.yaml`` into ``cwd/output``
    (both relative), run id ``sample``, with the options ``where`` (``--master …`` or ``--engine
    local``); returns its output, fails the test when it fails."""
    done = subprocess.run(
        [*topic_replay(), "run", "--input", "sample", "--conf",
         str(REPO / "conf" / "sample.yaml"), "--output", output, "--run-id", "sample", *where],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, f"replay {where} failed:\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def runs(standalone_cluster, tmp_path_factory) -> tuple[Path, str]:
    """The sample replayed by the local engine into ``<dir>/local`` and on the cluster into
    ``<dir>/cluster``; returns ``(dir, the cluster run's console output)``."""
    cwd = tmp_path_factory.mktemp("cluster_runs")
    shutil.copytree(SAMPLE, cwd / "sample")
    replay(["--engine", "local"], cwd, "local")
    printed = replay(["--master", standalone_cluster.master_url], cwd, "cluster",
                     standalone_cluster.env())
    return cwd, printed


@pytest.mark.spark
@pytest.mark.slow
def test_cluster_replay_ran_executors_on_both_workers(standalone_cluster, runs):
    executor_logs = sorted((standalone_cluster.root / "work").glob("worker-*/app-*/*/stderr"))
    assert {p.relative_to(standalone_cluster.root / "work").parts[0]
            for p in executor_logs} == {"worker-0", "worker-1"}
    assert "topic-replay" in [a["name"] for a in standalone_cluster.status()["completedapps"]]


@pytest.mark.spark
@pytest.mark.slow
def test_cluster_replay_accepts_every_sample_message(runs):
    cwd, printed = runs
    assert f"accepted {SAMPLE_MESSAGES:,}  quarantined 0" in printed
    assert len(DeltaStore(str(cwd / "cluster"), engine="delta-rs").read(
        "messages", "sample")) == SAMPLE_MESSAGES


@pytest.mark.spark
@pytest.mark.slow
def test_cluster_replay_without_shuffle_partitions_keeps_twice_the_cluster_cores(runs):
    # two one-core workers, no --shuffle-partitions: 2 × 2 state partitions, in the manifest
    cwd, _ = runs
    assert read_manifest(str(cwd / "cluster" / "_work" / "sample" / "run.json"))[
        "state_partitions"] == 4


@pytest.mark.spark
@pytest.mark.slow
def test_cluster_replay_tables_equal_the_local_replay_tables(runs):
    cwd, _ = runs
    assert_replays_equal(cwd / "local", cwd / "cluster")


# ---- what the cluster run needed (fast) ---------------------------------------------------------


@pytest.mark.spark
def test_replay_output_given_relative_is_made_absolute(spark, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = Replay(spark, load_config(None), get_preset("contract").replace(format="json"),
               [str(tmp_path)], "out", "rel", progress=lambda _: None)
    assert (r.output, r.staging) == (str(tmp_path / "out"),
                                     str(tmp_path / "out" / "_work" / "rel" / "staging"))


@pytest.mark.parametrize("output, problem", [
    ("hdfs://nn:8020/replay", "scheme hdfs:// , which is not supported"),
    ("file:///tmp/replay", "is a file: URL"),
    ("file:/tmp/replay", "is a file: URL")])
def test_output_url_of_an_unsupported_scheme_is_refused(output, problem):
    with pytest.raises(OutputConflictError, match=problem.replace(" ,", ",")):
        check_output_path(output)


@pytest.mark.parametrize("output", ["out/sample", "/mnt/shared/replay", "./x:y",
                                    "s3a://bucket/replay", "s3://bucket/replay",
                                    "gs://bucket/replay", "abfss://c@a.dfs.core.windows.net/r"])
def test_output_path_or_object_store_url_is_accepted(output):
    check_output_path(output)
