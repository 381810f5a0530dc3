"""End-to-end replay on a small generated log: docs/design.md invariants 2 (conservation),
3 (routing, no straddling entries), 4 (one consumer per bucket at a time) and 5 (chunking
determinism), under both Delta engines (every test runs on each engine's tables, read with
delta-rs: a table delta-spark wrote is readable by delta-rs), and every table equal between the
two engines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from deltalake import DeltaTable

import pipelines.spark.finalization as finalization
from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.contract.schemas import table_names
from pipelines.core.buckets import bucket_of
from pipelines.spark.replay import Replay
from pipelines.spark.session import delta_jars
from pipelines.storage.delta import DeltaStore
from pipelines.workload.generator import WorkloadSpec, generate
from tests.conftest import ENGINES, NO_DELTA_JARS

SPEC = {
    "seed": 7, "start_time": "2025-01-15T09:00:00Z", "duration_s": 900, "format": "json",
    "gzip": False, "file_span_s": 120,
    "topics": [
        {"name": "orders", "producers": 3, "rate": {"kind": "steps", "steps": [
            {"at_s": 0, "msg_rate": 5}, {"at_s": 120, "msg_rate": 60}, {"at_s": 360,
                                                                         "msg_rate": 1}]},
         "keys": {"distribution": "zipf", "n_keys": 300, "exponent": 1.1,
                  "keyless_share": 0.1},
         "payload": {"kind": "fixed", "size": 300}},
        {"name": "clicks", "producers": 2, "rate": {"kind": "constant", "msg_rate": 4},
         "payload": {"kind": "uniform", "min": 100, "max": 900}},
    ],
}
SETS = ["policy.split_msg_rate_in=20", "policy.merge_msg_rate_in=3",
        "policy.split_msg_rate_out=1000", "policy.merge_msg_rate_out=100",
        "policy.merge_window_s=60", "policy.merge_cooldown_s=60",
        "batching.max_publish_delay_ms=200",
        "subscriptions.0.consumers.1.join=200"]


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("log")
    generate(WorkloadSpec.model_validate(SPEC), out)
    return out


def replay(spark, log_dir: Path, out: Path, max_files: int, run_id: str,
           engine: str = "delta-rs") -> DeltaStore:
    cfg = load_config(None, [*SETS, f"replay.max_files_per_trigger={max_files}",
                             f"output.engine={engine}"])
    spec = get_preset("contract").replace(format="json", speed=1.0)
    Replay(spark, cfg, spec, [str(log_dir)], str(out), run_id, progress=lambda _: None).run()
    return DeltaStore(str(out), engine="delta-rs")


@pytest.fixture(scope="module")
def outputs(spark, log_dir, tmp_path_factory) -> dict[str, DeltaStore]:
    """Each engine's replay of the log (``one``, 10 files a micro-batch), made on first use."""
    made: dict[str, DeltaStore] = {}

    class Outputs(dict):
        def __missing__(self, engine: str) -> DeltaStore:
            made[engine] = replay(spark, log_dir, tmp_path_factory.mktemp(f"out-{engine}"), 10,
                                  "one", engine)
            self[engine] = made[engine]
            return made[engine]

    return Outputs()


@pytest.fixture(scope="module", params=ENGINES)
def engine(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def store(outputs, engine) -> DeltaStore:
    return outputs[engine]


def input_records(log_dir: Path) -> int:
    return sum(1 for f in log_dir.glob("part-*") for line in f.open() if line.strip())


def test_every_input_record_is_accepted_or_quarantined(store, log_dir):
    counts = json.loads(store.read("runs", "one")["counts"].iloc[0])
    assert counts["accepted"] + counts["quarantined"] == input_records(log_dir)
    assert len(store.read("messages", "one")) == counts["accepted"]


def test_each_message_is_in_exactly_one_entry(store):
    messages = store.read("messages", "one")
    entries = store.read("entries", "one")
    per_entry = messages.groupby(["topic", "producer_name", "entry_id"]).size()
    declared = entries.set_index(["topic", "producer_name", "entry_id"])["num_messages"]
    assert not entries.duplicated(["topic", "producer_name", "entry_id"]).any()
    assert per_entry.sort_index().tolist() == declared.sort_index().tolist()


def test_keyed_messages_route_to_active_segment_covering_their_hash(store):
    messages = store.read("messages", "one")
    segments = store.read("segments", "one").set_index(["topic", "segment_id"])
    keyed = messages[messages["key"].notna()]
    seg = segments.loc[list(zip(keyed["topic"], keyed["segment_id"], strict=True))]
    assert ((keyed["segment_hash"].to_numpy() >= seg["range_start"].to_numpy())
            & (keyed["segment_hash"].to_numpy() <= seg["range_end"].to_numpy())).all()
    sealed = seg["sealed_at"].to_numpy()
    published = keyed["publish_time"].to_numpy()
    assert (pd.isna(sealed) | (published < sealed)).all()
    # published before its segment existed: re-sent from a sealed parent's open batch (§7.2)
    resent = published < seg["created_at"].to_numpy()
    assert (seg["created_by"].to_numpy()[resent] != "initial").all()


def test_bucket_index_is_bucket_of_hash_b_under_segment_splits(store):
    messages = store.read("messages", "one")
    segments = store.read("segments", "one").set_index(["topic", "segment_id"])
    for row in messages.sample(300, random_state=1).itertuples():
        splits = list(segments.loc[(row.topic, row.segment_id), "bucket_splits"])
        h = 0 if pd.isna(row.hash_b) else int(row.hash_b)
        assert row.bucket_index == bucket_of(splits, h)


def test_no_bucketed_entry_straddles_buckets(store):
    entries = store.read("entries", "one")
    segments = store.read("segments", "one").set_index(["topic", "segment_id"])
    for row in entries.itertuples():
        splits = list(segments.loc[(row.topic, row.segment_id), "bucket_splits"])
        assert bucket_of(splits, row.entry_hash_min) == bucket_of(splits, row.entry_hash_max)


def test_replay_shows_autoscale_actions(store):
    actions = set(store.read("autoscale_decisions", "one")["action"])
    assert {"split", "merge"} <= actions


def test_each_entry_is_dispatched_once_per_subscription(store):
    entries = store.read("entries", "one")
    dispatch = store.read("dispatch", "one")
    keys = ["topic", "producer_name", "segment_id", "entry_id"]
    assert not dispatch.duplicated([*keys, "subscription"]).any()
    assert len(dispatch) == len(entries)  # one subscription in the default config


def test_sealed_segments_drain_after_their_seal(store):
    drains = store.read("segment_drains", "one")
    segments = store.read("segments", "one").set_index(["topic", "segment_id"])
    assert len(drains) > 0
    sealed = segments.loc[list(zip(drains["topic"], drains["segment_id"], strict=True))]
    assert (drains["sealed_at"].to_numpy() == sealed["sealed_at"].to_numpy()).all()
    waited = (drains["drained_at"] - drains["sealed_at"]).dt.total_seconds() * 1000
    assert (waited.round().astype("int64") == drains["drain_ms"]).all()
    assert (drains["drain_ms"] >= 0).all()


def test_subscription_stats_count_the_bucket_handoffs(store):
    stats = store.read("subscription_stats", "one")
    handoffs = store.read("bucket_handoffs", "one")
    assert int(stats["reassignments"].sum()) == len(handoffs)


def test_a_bucket_is_unacked_at_one_consumer_at_a_time(store):
    d = store.read("dispatch", "one").dropna(subset=["consumer_name"])
    for _, g in d.groupby(["topic", "segment_id", "bucket_index"]):
        g = g.sort_values("dispatch_time")
        owner_end: dict[str, np.datetime64] = {}
        for row in g.itertuples():
            others = [end for c, end in owner_end.items() if c != row.consumer_name]
            assert all(end <= row.dispatch_time for end in others)
            owner_end[row.consumer_name] = max(owner_end.get(row.consumer_name, row.ack_time),
                                               row.ack_time)


def test_every_configured_table_exists_after_the_run_even_without_rows(store):
    assert store.read("quarantine", "one").empty  # a clean log: no quarantined record
    assert [t for t in table_names() if not DeltaTable.is_deltatable(store.path(t))] == []
    assert store.schema_problems() == []


def test_every_table_is_equal_under_both_engines(outputs):
    if not delta_jars():
        pytest.skip(NO_DELTA_JARS)
    for table in table_names():
        a = _canonical(outputs["delta-rs"].read(table, "one"))
        b = _canonical(outputs["delta-spark"].read(table, "one"))
        if table == "runs":  # wall-clock times and the engine (its name, its setting) differ
            a, b = (x.drop(columns=["timings", "versions", "started_at", "ended_at"])
                    .assign(config=x["config"].map(_without_engine)) for x in (a, b))
        pd.testing.assert_frame_equal(a, b, check_dtype=False, obj=table)


def test_tables_equal_whether_read_in_one_or_many_micro_batches(spark, store, log_dir,
                                                                 tmp_path, engine):
    other = replay(spark, log_dir, tmp_path / "out", 1, "one", engine)
    for table in ("messages", "entries", "segments", "segment_load", "autoscale_decisions",
                  "dispatch", "bucket_handoffs"):
        a = _canonical(store.read(table, "one"))
        b = _canonical(other.read(table, "one"))
        pd.testing.assert_frame_equal(a, b, check_dtype=False)


def test_tables_equal_whether_finalized_in_one_or_many_windows(spark, store, log_dir, tmp_path,
                                                              monkeypatch, engine):
    # many windows, two to a feed file: the operators' state crosses the emulation query's
    # micro-batches through the state store
    lines: list[object] = []
    monkeypatch.setattr(finalization, "FINALIZE_WINDOW_MESSAGES", 6000)
    monkeypatch.setattr(finalization, "FINALIZE_WINDOWS_PER_JOB", 2)
    cfg = load_config(None, [*SETS, "replay.max_files_per_trigger=10",
                             f"output.engine={engine}"])
    spec = get_preset("contract").replace(format="json", speed=1.0)
    Replay(spark, cfg, spec, [str(log_dir)], str(tmp_path / "out"), "one",
           progress=lines.append).run()
    other = DeltaStore(str(tmp_path / "out"), engine="delta-rs")
    assert sum(str(line).startswith("window ") for line in lines) > 2
    for table in ("messages", "entries", "segments", "segment_load", "autoscale_decisions",
                  "dispatch", "consumer_load", "bucket_handoffs"):
        a = _canonical(store.read(table, "one"))
        b = _canonical(other.read(table, "one"))
        pd.testing.assert_frame_equal(a, b, check_dtype=False)


EMULATION_TABLES = ("messages", "entries", "segments", "segment_load", "autoscale_decisions",
                    "dispatch", "consumer_load", "bucket_handoffs", "subscription_stats",
                    "segment_drains")
"""The tables the emulation writes (``runs`` names the settings, so it differs)."""


def _assert_equal_with(spark, outputs, log_dir: Path, out: Path, setting: str) -> None:
    """The log replayed with ``setting`` gives every emulation table of the reference replay."""
    cfg = load_config(None, [*SETS, "replay.max_files_per_trigger=10", setting,
                             "output.engine=delta-rs"])
    spec = get_preset("contract").replace(format="json", speed=1.0)
    Replay(spark, cfg, spec, [str(log_dir)], str(out), "one", progress=lambda _: None).run()
    other = DeltaStore(str(out), engine="delta-rs")
    for table in EMULATION_TABLES:
        a = _canonical(outputs["delta-rs"].read(table, "one"))
        b = _canonical(other.read(table, "one"))
        pd.testing.assert_frame_equal(a, b, check_dtype=False, obj=table)


@pytest.mark.parametrize("shards", [1, 7])
def test_tables_equal_whatever_the_producer_shards(spark, outputs, log_dir, tmp_path, shards):
    _assert_equal_with(spark, outputs, log_dir, tmp_path / "out",
                       f"replay.producer_shards={shards}")


@pytest.mark.parametrize("bins", [1, 5])
def test_tables_equal_whatever_the_topic_bins(spark, outputs, log_dir, tmp_path, bins):
    _assert_equal_with(spark, outputs, log_dir, tmp_path / "out", f"replay.topic_bins={bins}")


def _without_engine(config: str) -> str:
    """A ``runs.config`` JSON without ``output.engine``."""
    parsed = json.loads(config)
    parsed["output"].pop("engine")
    return json.dumps(parsed, sort_keys=True)


def _canonical(df: pd.DataFrame) -> pd.DataFrame:
    df = df.drop(columns=[c for c in ("batch_id",) if c in df.columns])
    df = df.map(lambda v: tuple(v) if isinstance(v, list | np.ndarray) else v)
    return df.sort_values(list(df.columns)).reset_index(drop=True)
