"""The emulation's input side: messages staged by topic bin, a bin's (or a topic's) window read
from staging."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.contract.presets import get_preset
from pipelines.ingest.privacy import Pseudonymizer, pseudonym
from pipelines.ingest.rules import ACCEPTED_FIELDS, MINUTE_HINT, key_hashes_arrow, mapped_name
from pipelines.storage import staging
from pipelines.storage.staging import (
    CODED_COLUMNS,
    KEY_HASH_COLUMNS,
    MISPLACED_MARK,
    STAGE_INPUT_COLUMNS,
    STAGING_SOURCE_COLUMNS,
    STAGING_TOPIC_COLUMN,
    StagingPlan,
    read_bin,
    read_staged,
    stage_partition,
    staged_batch_stats,
    staged_dataset,
    staged_histogram,
    topic_bin,
    topic_digest,
    write_staging,
)


@pytest.mark.parametrize("topic", ["orders", "persistent://t/ns/a b", "Ünïcode/=%"])
def test_topic_digest_is_sha1_hex_of_the_utf8_name(topic: str) -> None:
    assert topic_digest(topic) == hashlib.sha1(topic.encode("utf-8")).hexdigest()


@pytest.mark.parametrize("topic", ["orders", "persistent://t/ns/a b", "Ünïcode/=%"])
def test_topic_bin_is_the_sha1_prefix_modulo_the_bins(topic: str) -> None:
    assert topic_bin(topic, 7) == int(topic_digest(topic)[:15], 16) % 7


def test_topic_bins_spread_many_topics_evenly() -> None:
    counts = [0] * 8
    for i in range(8000):
        counts[topic_bin(f"persistent://tenant/ns/topic-{i}", 8)] += 1
    assert min(counts) > 850  # about 1,000 each


def _batch(rows: list[tuple[str, int]], keys: list[str | None] | None = None) -> pa.RecordBatch:
    """Accepted messages (topic, event_ms) as the staging writer gets them from Spark."""
    n = len(rows)
    return pa.RecordBatch.from_pydict({
        "topic": [t for t, _ in rows],
        "key": keys if keys is not None else [f"k{i}" for i in range(n)],
        "producer_name": ["p"] * n, "sequence_id": pa.array(range(n), pa.int64()),
        "publish_time": pa.array([ms * 1000 for _, ms in rows], pa.timestamp("us", tz="UTC")),
        "payload_size": pa.array([10] * n, pa.int64()),
        "event_ms": pa.array([ms for _, ms in rows], pa.int64())})


BINS = 3
"""Topic bins of the staged test data (``a/b`` and ``other`` fall in different bins)."""


def _stage(root: Path, batch: int, rows: list[tuple[str, int]], part: int = 0) -> dict[str, int]:
    """Stage messages (topic, event_ms) as the replay does (:func:`write_staging`)."""
    return write_staging([_batch(rows)], f"{root}/batch_id={batch}", part, bins=BINS)


def _topic_files(root: Path, batch: int, topic: str) -> list[Path]:
    folder = root / f"batch_id={batch}" / f"{STAGING_TOPIC_COLUMN}={topic_bin(topic, BINS)}"
    return sorted(folder.iterdir())


def test_test_topics_fall_in_different_bins() -> None:
    assert topic_bin("a/b", BINS) != topic_bin("other", BINS)


def test_write_staging_puts_each_topic_in_its_bins_folder_and_counts_it(tmp_path: Path) -> None:
    counts = _stage(tmp_path, 4, [("a/b", 1), ("other", 2), ("a/b", 3)], part=7)
    assert counts == {"a/b": 2, "other": 1}
    files = _topic_files(tmp_path, 4, "a/b")
    assert [f.name for f in files] == ["part-00007.parquet"]
    table = pq.ParquetFile(files[0]).read()
    assert table.column_names == STAGE_INPUT_COLUMNS
    assert table.column("event_ms").to_pylist() == [1, 3]


def test_write_staging_writes_one_file_per_bin_whatever_the_topics(tmp_path: Path) -> None:
    write_staging([_batch([(f"t{i}", i) for i in range(500)])], f"{tmp_path}/batch_id=0", 0,
                  bins=4)
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.parquet"))
    assert files == [f"batch_id=0/{STAGING_TOPIC_COLUMN}={b}/part-00000.parquet"
                     for b in range(4)]


@pytest.mark.parametrize(("lo", "hi", "expected"), [
    (None, None, [("a/b", 100), ("a/b", 150), ("a/b", 200)]),
    (120, None, [("a/b", 150), ("a/b", 200)]),
])
def test_read_bin_returns_the_bins_topics_window(tmp_path: Path, lo: int | None, hi: int | None,
                                                 expected: list[tuple[str, int]]) -> None:
    _stage(tmp_path, 0, [("a/b", 100), ("a/b", 150), ("other", 120)])
    _stage(tmp_path, 1, [("a/b", 200), ("other", 210)])
    pdf = read_bin(staged_dataset(str(tmp_path)), topic_bin("a/b", BINS), lo, hi)
    assert list(pdf.columns) == STAGE_INPUT_COLUMNS
    assert sorted(zip(pdf["topic"], pdf["event_ms"], strict=True)) == expected


def test_read_bin_codes_topics_and_producers_and_keeps_keys_as_strings(tmp_path: Path) -> None:
    _stage(tmp_path, 0, [("a/b", 100), ("a/b", 150)])
    _stage(tmp_path, 1, [("a/b", 200)])  # another file: its own dictionaries, unified
    pdf = read_bin(staged_dataset(str(tmp_path)), topic_bin("a/b", BINS), None, None)
    assert [isinstance(pdf[c].dtype, pd.CategoricalDtype) for c in CODED_COLUMNS] == [True, True]
    assert pdf["key"].dtype == pd.ArrowDtype(pa.string())
    assert list(pdf["topic"].astype(object)) == ["a/b"] * 3


def test_write_staging_adds_the_key_hashes_of_ingest(tmp_path: Path) -> None:
    keys = ["k1", None, "ключ", ""]
    write_staging([_batch([("t", i) for i in range(4)], keys)], f"{tmp_path}/batch_id=0", 0,
                  bins=BINS)
    table = pq.ParquetFile(_topic_files(tmp_path, 0, "t")[0]).read()
    expected = key_hashes_arrow(pa.array(keys, pa.string()))
    for column in KEY_HASH_COLUMNS:
        assert table.column(column).to_pylist() == expected.field(column).to_pylist()


def test_write_staging_cuts_row_groups_of_the_configured_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(staging, "STAGING_ROW_GROUP_ROWS", 3)
    batches = [_batch([("t", 2 * i), ("u", i), ("t", 2 * i + 1)]) for i in range(4)]
    assert topic_bin("t", BINS) != topic_bin("u", BINS)
    write_staging(batches, f"{tmp_path}/batch_id=0", 0, bins=BINS)
    meta = pq.ParquetFile(_topic_files(tmp_path, 0, "t")[0]).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [3, 3, 2]


def test_write_staging_keeps_statistics_of_event_times_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(staging, "STAGING_ROW_GROUP_ROWS", 2)
    write_staging([_batch([("t", 5), ("t", 7), ("t", 9)])], f"{tmp_path}/batch_id=0", 0,
                  bins=BINS)
    meta = pq.ParquetFile(_topic_files(tmp_path, 0, "t")[0]).metadata
    with_stats = {meta.schema.column(c).name for c in range(meta.num_columns)
                  if meta.row_group(0).column(c).is_stats_set}
    assert with_stats == {"event_ms"}
    event_ms = meta.schema.names.index("event_ms")
    stats = [meta.row_group(i).column(event_ms).statistics for i in range(meta.num_row_groups)]
    ranges = [(s.min, s.max) for s in stats]
    assert ranges == [(5, 7), (9, 9)]


def test_write_staging_again_replaces_the_part_whole(tmp_path: Path) -> None:
    _stage(tmp_path, 0, [("t", 1), ("t", 2)])
    _stage(tmp_path, 0, [("t", 5)])  # a retried task writes the same part again
    files = _topic_files(tmp_path, 0, "t")
    assert [f.name for f in files] == ["part-00000.parquet"]  # no hidden temporary file left
    assert pq.ParquetFile(files[0]).read().column("event_ms").to_pylist() == [5]


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


def test_staged_batch_stats_merges_the_files_of_a_topic(tmp_path: Path) -> None:
    _stage(tmp_path, 0, [("t", 5), ("t", 1)], part=0)
    _stage(tmp_path, 0, [("t", 9), ("t", 3)], part=1)
    assert staged_batch_stats(str(tmp_path), 0) == {"t": (4, 1, 9)}


def test_staged_batch_stats_of_a_batch_without_files_is_empty(tmp_path: Path) -> None:
    assert staged_batch_stats(str(tmp_path), 3) == {}


def test_staged_histogram_counts_every_batch_in_equal_bins(tmp_path: Path) -> None:
    _stage(tmp_path, 0, [("a/b", 100), ("a/b", 107), ("a/b", 103)])
    _stage(tmp_path, 1, [("a/b", 110), ("a/b", 100)])
    lo, width, counts = staged_histogram(str(tmp_path), 4)
    assert (lo, width) == (100, 3)  # (110 - 100) // 4 + 1
    assert counts.tolist() == [[2, 1, 1, 1]]  # [100, 103), [103, 106), [106, 109), [109, 112)


def test_staged_histogram_counts_each_topic_bin_in_its_own_row(tmp_path: Path) -> None:
    _stage(tmp_path, 0, [("a/b", 100), ("other", 107), ("a/b", 103)])
    _stage(tmp_path, 1, [("other", 110), ("a/b", 100)])
    _, _, counts = staged_histogram(str(tmp_path), 4)
    rows = {topic_bin("a/b", BINS): [2, 1, 0, 0], topic_bin("other", BINS): [0, 0, 1, 1]}
    assert counts.tolist() == [rows[b] for b in sorted(rows)]


def test_staged_histogram_of_nothing_staged_is_none(tmp_path: Path) -> None:
    assert staged_histogram(str(tmp_path / "missing"), 4) is None
    (tmp_path / "batch_id=0").mkdir()
    assert staged_histogram(str(tmp_path), 4) is None


# ------------------------------------------------------------------------ the staging pass

CONTRACT = get_preset("contract")
T0_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z


def _mapped(times_ms: list[int], sizes: list[str] | None = None, **columns) -> pa.RecordBatch:
    """Mapped JSON records (one topic ``t``) as ``pipelines.spark.ingest.map_records`` ships
    them."""
    n = len(times_ms)
    return pa.RecordBatch.from_pydict({
        "source_file": ["file:/in/a.json"] * n, "raw_record": [f"r{i}" for i in range(n)],
        "invalid_utf8": [False] * n, "malformed": [False] * n,
        mapped_name("topic"): ["t"] * n, mapped_name("key"): [f"k{i}" for i in range(n)],
        mapped_name("publish_time"): [str(ms) for ms in times_ms],
        mapped_name("payload_size"): sizes or ["1"] * n, **columns})


def _pass(root: Path, batches: list[pa.RecordBatch], plan: StagingPlan | None = None,
          check_minutes: bool = False) -> list[dict]:
    """Run one task of the staging pass (default plan: the contract's rules); its rows."""
    out = stage_partition(iter(batches), plan or StagingPlan(CONTRACT), f"{root}/batch_id=0", 0,
                          check_minutes)
    return [r for b in out for r in b.to_pylist()]


def test_the_rules_accept_messages_in_the_columns_staging_takes() -> None:
    assert ACCEPTED_FIELDS.names == STAGING_SOURCE_COLUMNS


def test_staging_pass_stages_accepted_records_and_yields_rejected_ones(tmp_path: Path) -> None:
    rows = _pass(tmp_path, [_mapped([1000, 2000], sizes=["1", "big"])])

    assert [(r["source_file"], r["raw_record"], r["reason"]) for r in rows] == [
        ("file:/in/a.json", "r1", "bad_payload_size")]
    assert read_staged(str(tmp_path), "t", None, None)["event_ms"].tolist() == [1000]


def test_staging_pass_yields_late_records_and_does_not_stage_them(tmp_path: Path) -> None:
    rows = _pass(tmp_path, [_mapped([1000, 2000])], StagingPlan(CONTRACT, horizon_ms=1500))

    assert [(r["reason"], r["key"], r["raw_record"]) for r in rows] == [("late", "k0", None)]
    assert read_staged(str(tmp_path), "t", None, None)["event_ms"].tolist() == [2000]


def test_staging_pass_pseudonymizes_after_hashing(tmp_path: Path) -> None:
    plan = StagingPlan(CONTRACT, pseudonymize=Pseudonymizer(("key",), b"s" * 32))
    _pass(tmp_path, [_mapped([1000])], plan)

    staged = read_staged(str(tmp_path), "t", None, None)
    assert staged["key"].tolist() == [pseudonym("k0", b"s" * 32)]
    assert staged["hash32"].tolist() == key_hashes_arrow(pa.array(["k0"])).field(
        "hash32").to_pylist()


def test_staging_pass_spreads_a_minute_split_over_its_batches(tmp_path: Path) -> None:
    spec = CONTRACT.replace(spread_within_minute=True)
    minute_ms = T0_US // 1000
    batches = [_mapped([minute_ms]), _mapped([minute_ms + 5])]
    _pass(tmp_path, [pa.RecordBatch.from_pydict(
        {**b.to_pydict(), "raw_record": [f"r{i}"]}) for i, b in enumerate(batches)],
        StagingPlan(spec))

    staged = read_staged(str(tmp_path), "t", None, None)
    assert sorted(staged["event_ms"].tolist()) == [minute_ms, minute_ms + 30_000]


def test_staging_pass_marks_a_misplaced_minute_and_stages_nothing(tmp_path: Path) -> None:
    spec = CONTRACT.replace(spread_within_minute=True)
    records = _mapped([T0_US // 1000], **{MINUTE_HINT: pa.array([None], pa.int64())})

    assert _pass(tmp_path, [records], StagingPlan(spec), check_minutes=True) == []
    assert (tmp_path / "batch_id=0" / MISPLACED_MARK).exists()
    assert staged_batch_stats(str(tmp_path), 0) == {}
