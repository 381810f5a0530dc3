"""The topic stage's input side: topics packed into tasks, a topic's window read from staging."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.stages import (
    STAGE_INPUT_COLUMNS,
    STAGING_TOPIC_COLUMN,
    read_staged,
    staged_batch_stats,
    topic_bins,
    topic_digest,
)


@pytest.mark.parametrize(("weights", "slots", "expected"), [
    ({}, 4, []),
    ({"a": 5}, 4, [["a"]]),
    ({"a": 1, "b": 9, "c": 3}, 8, [["b"], ["c"], ["a"]]),          # one per task, heaviest first
    ({"a": 1, "b": 9, "c": 3}, 2, [["b"], ["c", "a"]]),            # LPT: a joins the lighter bin
    ({"x": 2, "y": 2, "z": 2}, 2, [["x", "z"], ["y"]]),            # ties by name, then bin index
    ({"a": 4, "b": 3, "c": 3, "d": 2}, 2, [["a", "d"], ["b", "c"]]),
    ({"a": 0, "b": 0, "c": 0}, 2, [["a", "c"], ["b"]]),              # no weight: still spread
])
def test_topic_bins_packs_heaviest_first_into_the_lightest_bin(
        weights: dict[str, int], slots: int, expected: list[list[str]]) -> None:
    assert topic_bins(weights, slots) == expected


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=4), st.integers(0, 100), max_size=12),
       st.integers(1, 6))
def test_topic_bins_places_every_topic_exactly_once(weights: dict[str, int], slots: int) -> None:
    bins = topic_bins(weights, slots)
    assert sorted(t for b in bins for t in b) == sorted(weights)
    assert len(bins) == min(len(weights), slots)
    assert all(bins)


def test_topic_bins_rejects_zero_slots() -> None:
    with pytest.raises(ValueError, match="slots must be >= 1"):
        topic_bins({"a": 1}, 0)


@pytest.mark.parametrize("topic", ["orders", "persistent://t/ns/a b", "Ünïcode/=%"])
def test_topic_digest_is_sha1_hex_of_the_utf8_name(topic: str) -> None:
    assert topic_digest(topic) == hashlib.sha1(topic.encode("utf-8")).hexdigest()


def _stage(root: Path, batch: int, rows: list[tuple[str, int]]) -> None:
    """Write staged messages (topic, event_ms) the way the replay lays them out."""
    frame = pd.DataFrame(rows, columns=["topic", "event_ms"])
    for topic, g in frame.groupby("topic"):
        folder = root / f"batch_id={batch}" / f"{STAGING_TOPIC_COLUMN}={topic_digest(topic)}"
        folder.mkdir(parents=True)
        n = len(g)
        table = pa.table({
            "topic": g["topic"].tolist(), "key": [f"k{i}" for i in range(n)],
            "producer_name": ["p"] * n, "sequence_id": pa.array(range(n), pa.int64()),
            "publish_time": pa.array(g["event_ms"] * 1000, pa.timestamp("us", tz="UTC")),
            "payload_size": pa.array([10] * n, pa.int64()),
            "event_ms": pa.array(g["event_ms"], pa.int64()),
            "hash32": pa.array([1] * n, pa.int64()), "segment_hash": pa.array([1] * n, pa.int32()),
            "hash_b": pa.array([1] * n, pa.int32()), "order_key": ["0" * 64] * n})
        pq.write_table(table, folder / "part-0.parquet")
    (root / f"batch_id={batch}" / "_SUCCESS").touch()


@pytest.mark.parametrize(("lo", "hi", "expected"), [
    (None, None, [100, 150, 200, 250]),
    (150, None, [150, 200, 250]),
    (None, 200, [100, 150]),
    (150, 250, [150, 200]),
    (300, None, []),
])
def test_read_staged_returns_one_topics_window_across_batches(
        tmp_path: Path, lo: int | None, hi: int | None, expected: list[int]) -> None:
    _stage(tmp_path, 0, [("a/b", 100), ("a/b", 150), ("other", 120)])
    _stage(tmp_path, 1, [("a/b", 200), ("other", 210), ("a/b", 250)])
    pdf = read_staged(str(tmp_path), "a/b", lo, hi)
    assert list(pdf.columns) == STAGE_INPUT_COLUMNS
    assert sorted(pdf["event_ms"].tolist()) == expected
    assert set(pdf["topic"]) <= {"a/b"}


def test_staged_batch_stats_counts_each_topic_from_the_footers(tmp_path: Path) -> None:
    _stage(tmp_path, 0, [("a/b", 100), ("a/b", 150), ("other", 120)])
    _stage(tmp_path, 1, [("a/b", 250), ("other", 210), ("a/b", 200)])
    assert staged_batch_stats(str(tmp_path), 1) == {"a/b": (2, 200, 250), "other": (1, 210, 210)}


def test_staged_batch_stats_merges_row_groups_and_files_of_a_topic(tmp_path: Path) -> None:
    _stage(tmp_path, 0, [("t", 5), ("t", 1), ("t", 9)])
    folder = tmp_path / "batch_id=0" / f"{STAGING_TOPIC_COLUMN}={topic_digest('t')}"
    table = pq.read_table(folder / "part-0.parquet")
    # one-row groups without statistics (read instead)
    pq.write_table(table, folder / "part-1.parquet", row_group_size=1, write_statistics=False)
    assert pq.ParquetFile(folder / "part-1.parquet").metadata.row_group(0).column(6).statistics \
        is None
    assert staged_batch_stats(str(tmp_path), 0) == {"t": (6, 1, 9)}


def test_staged_batch_stats_of_a_batch_without_files_is_empty(tmp_path: Path) -> None:
    assert staged_batch_stats(str(tmp_path), 3) == {}
