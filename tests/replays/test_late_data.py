"""Late data in a streaming replay (issue #4; docs/design.md, "Event-time model").

Micro-batches are fed one file at a time, in a chosen arrival order, to the replay's
``foreachBatch`` handler (``Replay._process_batch``: the same code a streaming query calls),
then the run is finalized. Records within ``allowed_lateness_s`` of the newest one are processed
in event-time order, so out-of-order arrival changes nothing; records older than the finalized
horizon go to ``quarantine`` as ``late`` and are counted in the run summary.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.analysis.diff import diff_runs
from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.engine.local import run_local
from pipelines.engine.summary import run_summary
from pipelines.spark.ingest import read_raw_batch
from pipelines.spark.replay import Replay
from pipelines.storage.delta import DeltaStore

pytestmark = pytest.mark.spark

T0 = 1_736_931_600_000  # 2025-01-15T09:00:00Z, epoch ms
SETS = ["replay.allowed_lateness_s=60", "policy.split_msg_rate_in=3",
        "policy.merge_msg_rate_in=0.5", "policy.split_msg_rate_out=1000",
        "policy.merge_msg_rate_out=10", "batching.max_publish_delay_ms=500"]
# file → (first second, last second) of its records, 4 msg/s
FILES = {"f1": (0, 120), "f2a": (125, 150), "f2b": (150, 180), "f3": (180, 240),
         "late": (10, 20)}
TABLES = ["messages", "entries", "segments", "segment_load", "autoscale_decisions",
          "dispatch", "consumer_load", "bucket_handoffs"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("late_logs")
    for name, (lo, hi) in FILES.items():
        lines = []
        for i in range(lo * 4, hi * 4):
            lines.append(json.dumps({"topic": "orders", "key": f"k{(i * 7919) % 53}",
                                     "producer_name": f"p{i % 2}", "payload_size": 200,
                                     "publish_time": T0 + i * 250 + (17 if name == "late"
                                                                     else 0)}))
        (d / f"{name}.json").write_text("\n".join(lines) + "\n")
    return d


def replay_in_order(spark, logs: Path, out: Path, run_id: str, order: list[str]) -> DeltaStore:
    cfg = load_config(None, SETS)
    spec = get_preset("contract").replace(format="json")
    r = Replay(spark, cfg, spec, [str(logs)], str(out), run_id, progress=lambda _: None)
    r.streaming = True
    for batch_id, name in enumerate(order):
        r._process_batch(read_raw_batch(spark, [str(logs / f"{name}.json")], "json"), batch_id)
    r.finalize()
    return DeltaStore(str(out), engine="delta-rs")


@pytest.fixture(scope="module")
def out(spark, logs, tmp_path_factory) -> DeltaStore:
    """Run ``in_order``: every file but ``late`` read at once by the local engine (the tables of
    the log as it should be, which the differential test ``tests/replays/test_local_engine.py``
    holds equal to a Spark replay's, and the determinism tests whatever the micro-batches); and
    run ``shuffled`` through the streaming replay's handler: f2b before f2a (within the lateness
    bound), then a file of records older than the finalized horizon."""
    out = tmp_path_factory.mktemp("late_out")
    run_local(load_config(None, SETS), get_preset("contract").replace(format="json"),
              [str(logs / f"{name}.json") for name in ("f1", "f2a", "f2b", "f3")], str(out),
              "in_order", progress=lambda _: None)
    return replay_in_order(spark, logs, out, "shuffled", ["f1", "f2b", "f2a", "f3", "late"])


@pytest.mark.slow
def test_records_within_lateness_arriving_out_of_order_change_nothing(out):
    diffs = diff_runs(out, "in_order", "shuffled", tables=TABLES)
    assert {d.table: (d.only_a, d.only_b) for d in diffs if not d.identical} == {}
    assert len(out.read("messages", "shuffled")) == 4 * (120 + 25 + 30 + 60)


@pytest.mark.slow
def test_records_older_than_the_finalized_horizon_are_quarantined_as_late(out):
    q = out.read("quarantine", "shuffled")
    assert q["reason"].tolist() == ["late"] * (4 * 10)
    assert all(s.endswith("/late.json") for s in q["source_file"])


@pytest.mark.slow
def test_late_records_are_counted_in_the_run_summary(out):
    summary = run_summary(out, "shuffled")
    assert (summary["late"], summary["quarantined"], summary["accepted"]) == (40, 40, 4 * 235)


def test_records_after_end_of_input_finalization_are_late(spark, logs, tmp_path):
    cfg = load_config(None, SETS)
    spec = get_preset("contract").replace(format="json")
    r = Replay(spark, cfg, spec, [str(logs)], str(tmp_path), "again", progress=lambda _: None)
    r._process_batch(read_raw_batch(spark, [str(logs / "f2a.json")], "json"), 0)
    r.finalize()
    r._process_batch(read_raw_batch(spark, [str(logs / "f2b.json")], "json"), 1)
    r.finalize()
    store = DeltaStore(str(tmp_path), engine="delta-rs")
    counts = json.loads(store.read("runs", "again")["counts"].iloc[0])
    assert (counts["accepted"], counts["late"]) == (4 * 25, 4 * 30)
    assert len(store.read("messages", "again")) == 4 * 25
