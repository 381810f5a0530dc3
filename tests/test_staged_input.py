"""The emulation's input side: messages staged by topic, a topic's window read from staging."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import stages
from pipelines.stages import (
    KEY_HASH_COLUMNS,
    STAGE_INPUT_COLUMNS,
    STAGING_TOPIC_COLUMN,
    read_staged,
    staged_batch_stats,
    staged_histogram,
    topic_digest,
    write_staging,
)
from pipelines.udfs import key_hashes_arrow


@pytest.mark.parametrize("topic", ["orders", "persistent://t/ns/a b", "Ünïcode/=%"])
def test_topic_digest_is_sha1_hex_of_the_utf8_name(topic: str) -> None:
    assert topic_digest(topic) == hashlib.sha1(topic.encode("utf-8")).hexdigest()


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


def _stage(root: Path, batch: int, rows: list[tuple[str, int]], part: int = 0) -> dict[str, int]:
    """Stage messages (topic, event_ms) as the replay does (:func:`write_staging`)."""
    return write_staging([_batch(rows)], f"{root}/batch_id={batch}", part)


def _topic_files(root: Path, batch: int, topic: str) -> list[Path]:
    folder = root / f"batch_id={batch}" / f"{STAGING_TOPIC_COLUMN}={topic_digest(topic)}"
    return sorted(folder.iterdir())


def test_write_staging_puts_each_topic_in_its_folder_and_counts_it(tmp_path: Path) -> None:
    counts = _stage(tmp_path, 4, [("a/b", 1), ("other", 2), ("a/b", 3)], part=7)
    assert counts == {"a/b": 2, "other": 1}
    files = _topic_files(tmp_path, 4, "a/b")
    assert [f.name for f in files] == ["part-00007.parquet"]
    table = pq.ParquetFile(files[0]).read()
    assert table.column_names == STAGE_INPUT_COLUMNS
    assert table.column("event_ms").to_pylist() == [1, 3]


def test_write_staging_adds_the_key_hashes_of_ingest(tmp_path: Path) -> None:
    keys = ["k1", None, "ключ", ""]
    write_staging([_batch([("t", i) for i in range(4)], keys)], f"{tmp_path}/batch_id=0", 0)
    table = pq.ParquetFile(_topic_files(tmp_path, 0, "t")[0]).read()
    expected = key_hashes_arrow(pa.array(keys, pa.string()))
    for column in KEY_HASH_COLUMNS:
        assert table.column(column).to_pylist() == expected.field(column).to_pylist()


def test_write_staging_cuts_row_groups_of_the_configured_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stages, "STAGING_ROW_GROUP_ROWS", 3)
    batches = [_batch([("t", 2 * i), ("u", i), ("t", 2 * i + 1)]) for i in range(4)]
    write_staging(batches, f"{tmp_path}/batch_id=0", 0)
    meta = pq.ParquetFile(_topic_files(tmp_path, 0, "t")[0]).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [3, 3, 2]


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


def test_staged_batch_stats_merges_row_groups_and_files_of_a_topic(tmp_path: Path) -> None:
    _stage(tmp_path, 0, [("t", 5), ("t", 1), ("t", 9)])
    folder = tmp_path / "batch_id=0" / f"{STAGING_TOPIC_COLUMN}={topic_digest('t')}"
    table = pq.read_table(folder / "part-00000.parquet")
    # one-row groups without statistics (read instead)
    pq.write_table(table, folder / "part-1.parquet", row_group_size=1, write_statistics=False)
    assert pq.ParquetFile(folder / "part-1.parquet").metadata.row_group(0).column(6).statistics \
        is None
    assert staged_batch_stats(str(tmp_path), 0) == {"t": (6, 1, 9)}


def test_staged_batch_stats_of_a_batch_without_files_is_empty(tmp_path: Path) -> None:
    assert staged_batch_stats(str(tmp_path), 3) == {}


def test_staged_histogram_counts_every_batch_in_equal_bins(tmp_path: Path) -> None:
    _stage(tmp_path, 0, [("a", 100), ("b", 107), ("a", 103)])
    _stage(tmp_path, 1, [("a", 110), ("b", 100)])
    lo, width, counts = staged_histogram(str(tmp_path), 4)
    assert (lo, width) == (100, 3)  # (110 - 100) // 4 + 1
    assert counts.tolist() == [2, 1, 1, 1]  # [100, 103), [103, 106), [106, 109), [109, 112)


def test_staged_histogram_of_nothing_staged_is_none(tmp_path: Path) -> None:
    assert staged_histogram(str(tmp_path / "missing"), 4) is None
    (tmp_path / "batch_id=0").mkdir()
    assert staged_histogram(str(tmp_path), 4) is None
