"""Determinism (docs/design.md invariant 5, issue #4): the same input and config give identical
tables whatever the micro-batch chunking (one micro-batch, one file per micro-batch, a small
``maxBytesPerTrigger``), the shuffle partition count (1 vs 8), or a run split into two
invocations (a streaming one over the first half of the files, then the rest). Compared with
``pipelines.analysis.diff`` (what ``topic-replay diff`` prints), every run in one output folder."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pipelines.analysis.diff import diff_runs
from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.contract.schemas import table_names
from pipelines.spark.replay import Replay
from pipelines.storage.delta import DeltaStore
from pipelines.workload.generator import WorkloadSpec, generate

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPEC = {
    "seed": 11, "start_time": "2025-01-15T09:00:00Z", "duration_s": 480, "format": "json",
    "gzip": False, "file_span_s": 60,
    "topics": [
        {"name": "orders", "producers": 2, "rate": {"kind": "steps", "steps": [
            {"at_s": 0, "msg_rate": 3}, {"at_s": 90, "msg_rate": 30}, {"at_s": 300,
                                                                        "msg_rate": 1}]},
         "keys": {"distribution": "zipf", "n_keys": 200, "exponent": 1.1,
                  "keyless_share": 0.1},
         "payload": {"kind": "fixed", "size": 300}},
        {"name": "clicks", "producers": 1, "rate": {"kind": "constant", "msg_rate": 2},
         "payload": {"kind": "uniform", "min": 100, "max": 900}},
    ],
}
SETS = ["policy.split_msg_rate_in=10", "policy.merge_msg_rate_in=2",
        "policy.split_msg_rate_out=1000", "policy.merge_msg_rate_out=100",
        "policy.merge_window_s=60", "policy.merge_cooldown_s=60",
        "batching.max_publish_delay_ms=200", "subscriptions.0.consumers.1.join=200",
        "replay.allowed_lateness_s=30"]
RESULT_TABLES = [t for t in table_names() if t not in ("runs", "validations")]


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("det_log")
    generate(WorkloadSpec.model_validate(SPEC), out)
    return out


def _files(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.iterdir() if p.name.startswith("part-"))


def replay(spark, inputs: Path, out: Path, run_id: str, sets: list[str],
           partitions: int = 2, stream: bool = False) -> None:
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    try:
        r = Replay(spark, load_config(None, [*SETS, *sets]),
                   get_preset("contract").replace(format="json"), [str(inputs)], str(out),
                   run_id, progress=lambda _: None)
        if stream:
            r.run(stream=True, trigger_seconds=0.5)
            r.query.processAllAvailable()
            r.query.stop()
        else:
            r.run()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")


@pytest.fixture(scope="module")
def out(spark, log_dir, tmp_path_factory) -> DeltaStore:
    out = tmp_path_factory.mktemp("det_out")
    replay(spark, log_dir, out, "reference", ["replay.max_files_per_trigger=1000"])
    return DeltaStore(str(out), engine="delta-rs")


def assert_same_tables(store: DeltaStore, run_b: str) -> None:
    diffs = diff_runs(store, "reference", run_b, tables=RESULT_TABLES)
    assert {d.table: (d.only_a, d.only_b) for d in diffs if not d.identical} == {}
    counts = [json.loads(store.read("runs", r)["counts"].iloc[0])
              for r in ("reference", run_b)]
    keys = ("accepted", "quarantined", "late", "entries", "dispatched")
    assert [counts[1].get(k) for k in keys] == [counts[0].get(k) for k in keys]


def test_one_file_per_micro_batch_gives_the_same_tables(spark, log_dir, out):
    replay(spark, log_dir, Path(out.root), "one_file", ["replay.max_files_per_trigger=1"])
    assert_same_tables(out, "one_file")


def test_small_max_bytes_per_trigger_gives_the_same_tables(spark, log_dir, out):
    biggest = max(p.stat().st_size for p in _files(log_dir))
    replay(spark, log_dir, Path(out.root), "max_bytes",
           [f"replay.max_bytes_per_trigger={biggest + 1}"])
    assert_same_tables(out, "max_bytes")


@pytest.mark.parametrize("partitions", [1, 8])
def test_shuffle_partition_count_gives_the_same_tables(spark, log_dir, out, partitions):
    run_id = f"partitions_{partitions}"
    replay(spark, log_dir, Path(out.root), run_id, ["replay.max_files_per_trigger=3"],
           partitions=partitions)
    assert_same_tables(out, run_id)


def test_run_split_into_a_streaming_and_a_second_invocation_gives_the_same_tables(
        spark, log_dir, out, tmp_path):
    files = _files(log_dir)
    inputs = tmp_path / "inputs"
    inputs.mkdir()

    def arrive(some: list[Path]) -> None:
        # A file source reads new files oldest first: files arrive in publish-time order
        # (a file arriving more than allowed_lateness_s late would be quarantined as late).
        for f in some:
            shutil.copy(f, inputs / f.name)
            os.utime(inputs / f.name, (1e9 + files.index(f), 1e9 + files.index(f)))

    arrive(files[: len(files) // 2])
    sets = ["replay.max_files_per_trigger=2"]
    replay(spark, inputs, Path(out.root), "two_invocations", sets, stream=True)
    arrive(files[len(files) // 2:])
    replay(spark, inputs, Path(out.root), "two_invocations", sets)
    assert_same_tables(out, "two_invocations")
