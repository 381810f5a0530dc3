"""Privacy options on the tables (issue #21): ``input.pseudonymize``, ``output.keys`` and
``output.quarantine_raw`` change only what the tables keep of keys, producers and raw records —
never the emulation's answers (entries, segments, decisions) — and the local engine honours them
as the Spark replay does."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.engine.local import run_local
from pipelines.ingest.privacy import pseudonym
from pipelines.spark.replay import Replay
from pipelines.storage.delta import DeltaStore

pytestmark = pytest.mark.spark

SECRET = "correct horse battery staple"
T0 = 1_736_931_600_000  # 2025-01-15T09:00:00Z, epoch ms
KEYS = [f"customer-{i}" for i in range(12)]
PRODUCERS = ["alice", "bob", "carol"]
BAD = '{"topic": "orders", "key": "customer-99", "publish_time": 1736931601000, ' \
      '"payload_size": -5, "producer_name": "mallory"}'
SETS = ["policy.split_msg_rate_in=3", "policy.merge_msg_rate_in=1",
        "policy.split_msg_rate_out=1000", "policy.merge_msg_rate_out=100",
        "batching.max_publish_delay_ms=200"]
PRIVATE = ["input.pseudonymize=[producer_name, key]", "output.keys=hashed",
           "output.quarantine_raw=false"]
ANSWERS = ("entries", "segments", "autoscale_decisions", "segment_load")


def _log(folder: Path) -> Path:
    """Three producers, twelve keys (and keyless messages), 8 minutes at up to 10 msg/s, one bad
    line; publish times distinct per producer (no ties for the replay order to break)."""
    folder.mkdir()
    lines = []
    rng = np.random.default_rng(5)
    for i in range(2400):
        t = T0 + i * 200 + int(rng.integers(0, 50))
        key = None if i % 9 == 0 else KEYS[int(rng.integers(0, len(KEYS)))]
        lines.append(json.dumps({"topic": "orders", "key": key, "publish_time": t,
                                 "payload_size": int(rng.integers(10, 500)),
                                 "producer_name": PRODUCERS[i % 3]}))
    lines.insert(100, BAD)
    (folder / "log.json").write_text("\n".join(lines) + "\n")
    return folder


def _spark(spark, log: Path, out: Path, sets: list[str], progress: list[str]) -> DeltaStore:
    spec = get_preset("contract").replace(format="json", speed=1.0)
    Replay(spark, load_config(None, [*SETS, *sets]), spec, [str(log)], str(out), "r",
           progress=lambda p: progress.append(str(getattr(p, "line", p)))).run()
    return DeltaStore(str(out), engine="delta-rs")


def _local(log: Path, out: Path, sets: list[str]) -> DeltaStore:
    spec = get_preset("contract").replace(format="json", speed=1.0)
    run_local(load_config(None, [*SETS, *sets]), spec, [str(log)], str(out), "r",
              progress=lambda _: None)
    return DeltaStore(str(out), engine="delta-rs")


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory) -> dict[str, object]:
    """Replays of one log: plain by the local engine (whose tables the differential test
    ``tests/replays/test_local_engine.py`` holds equal to Spark's: the answers to compare with,
    without a second Spark replay), and private (pseudonymized, hashed keys, digests) by Spark
    and by the local engine."""
    root = tmp_path_factory.mktemp("privacy")
    log = _log(root / "log")
    os.environ["TOPIC_REPLAY_SECRET"] = SECRET
    try:
        progress: list[str] = []
        plain = _local(log, root / "plain", [])
        private = _spark(spark, log, root / "private", PRIVATE, progress)
        local = _local(log, root / "local", PRIVATE)
    finally:
        del os.environ["TOPIC_REPLAY_SECRET"]
    return {"log": log, "root": root, "plain": plain, "private": private, "local": local,
            "progress": progress}


def _p(value: object) -> object:
    return None if value is None or value is pd.NA or (isinstance(value, float)
                                                        and np.isnan(value)) \
        else pseudonym(str(value), SECRET.encode())


def _canonical(df: pd.DataFrame) -> pd.DataFrame:
    df = df.drop(columns=["run_id"])
    df = df.map(lambda v: tuple(v) if isinstance(v, list | np.ndarray) else v)
    return df.sort_values(list(df.columns)).reset_index(drop=True)


@pytest.mark.parametrize("table", ANSWERS)
def test_answers_are_unchanged_by_the_privacy_options(runs, table):
    plain = runs["plain"].read(table, "r")
    if "producer_name" in plain.columns:
        plain["producer_name"] = plain["producer_name"].map(_p)
    assert len(plain)
    pd.testing.assert_frame_equal(_canonical(runs["private"].read(table, "r")),
                                  _canonical(plain), check_dtype=False)


def test_segments_split_so_the_answers_are_not_trivial(runs):
    assert len(runs["plain"].read("segments", "r")) > 1


def test_hashed_keys_keep_each_message_hashes_and_drop_the_key(runs):
    plain = runs["plain"].read("messages", "r")
    private = runs["private"].read("messages", "r")
    plain = plain.assign(producer_name=plain["producer_name"].map(_p), key=None)
    assert private["key"].isna().all()
    assert private["hash32"].notna().sum() == plain["hash32"].notna().sum() > 0
    pd.testing.assert_frame_equal(_canonical(private), _canonical(plain), check_dtype=False)


def test_pseudonymized_producers_are_hmacs_of_the_names(runs):
    producers = set(runs["private"].read("entries", "r")["producer_name"])
    assert producers == {pseudonym(p, SECRET.encode()) for p in PRODUCERS}


def test_quarantine_holds_a_digest_of_the_record_not_the_record(runs):
    q = runs["private"].read("quarantine", "r")
    assert q["raw_record"].tolist() == ["sha256:" + hashlib.sha256(BAD.encode()).hexdigest()]
    assert q["reason"].tolist() == ["negative_payload_size"]
    assert q["source_file"].str.endswith("log.json").all()


def test_no_table_holds_a_raw_key_or_producer(runs):
    out = Path(runs["root"]) / "private"
    raw = [*KEYS, "customer-99", *PRODUCERS, "mallory"]
    for table in ("messages", "entries", "dispatch", "quarantine", "segments",
                  "autoscale_decisions", "consumer_load", "bucket_handoffs"):
        df = runs["private"].read(table, "r")
        text = df.astype(str).to_csv()
        assert not [v for v in raw if v in text], table
    # nor the staged messages the replay keeps for a restart
    staged = pd.concat([pd.read_parquet(f) for f in (out / "_work" / "r" / "staging")
                        .rglob("*.parquet")])
    assert not set(staged["key"].dropna()) & set(KEYS)
    assert not set(staged["producer_name"]) & set(PRODUCERS)


def test_progress_lines_hold_no_raw_key_or_producer(runs):
    text = "\n".join(runs["progress"])
    assert "batch 0:" in text
    assert not [v for v in [*KEYS, *PRODUCERS, "customer-99", "mallory"] if v in text]


@pytest.mark.parametrize("table", [*ANSWERS, "messages", "quarantine", "dispatch"])
def test_local_engine_honours_the_privacy_options(runs, table):
    spark_rows = runs["private"].read(table, "r")
    local_rows = runs["local"].read(table, "r")
    drop = ["batch_id"] if table == "quarantine" else []
    pd.testing.assert_frame_equal(_canonical(local_rows.drop(columns=drop)),
                                  _canonical(spark_rows.drop(columns=drop)), check_dtype=False)


@pytest.mark.parametrize(("sets", "key", "hashes"), [
    (["output.keys=raw"], "raw", True),
    (["output.keys=hashed"], None, True),
    (["output.keys=none"], None, False),
    (["input.pseudonymize=[key]", "output.keys=raw"], "pseudonym", True),
], ids=["raw", "hashed", "none", "pseudonymized_raw"])
def test_keys_option_decides_the_messages_key_columns(runs, tmp_path, monkeypatch, sets, key,
                                                      hashes):
    monkeypatch.setenv("TOPIC_REPLAY_SECRET", SECRET)
    messages = _local(runs["log"], tmp_path / "out", sets).read("messages", "r")
    plain = runs["plain"].read("messages", "r")
    order = ["producer_name", "sequence_id"]
    messages = messages.sort_values(order, ignore_index=True)
    plain = plain.sort_values(order, ignore_index=True)
    expected = {"raw": plain["key"], "pseudonym": plain["key"].map(_p),
                None: pd.Series([None] * len(plain))}[key]
    assert messages["key"].tolist() == expected.tolist()
    for c in ("hash32", "segment_hash", "hash_b"):
        if hashes:
            pd.testing.assert_series_equal(messages[c], plain[c], check_dtype=False)
        else:
            assert messages[c].isna().all()
    assert messages["entry_id"].tolist() == plain["entry_id"].tolist()


def test_same_input_and_secret_give_the_same_tables(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("TOPIC_REPLAY_SECRET", SECRET)
    again = _local(runs["log"], tmp_path / "again", PRIVATE)
    for table in ("messages", "entries", "quarantine"):
        pd.testing.assert_frame_equal(_canonical(again.read(table, "r")),
                                      _canonical(runs["local"].read(table, "r")))


def test_another_secret_gives_other_pseudonyms(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("TOPIC_REPLAY_SECRET", "another secret")
    other = _local(runs["log"], tmp_path / "other", PRIVATE).read("entries", "r")
    assert not set(other["producer_name"]) & set(runs["local"].read("entries", "r")
                                                 ["producer_name"])
