"""The topic stage's output files (pipelines.storage.frames.FrameWriter)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from pipelines.storage.frames import WRITES_AHEAD, FrameWriter, staged_file


def _drains(segment_ids: list[int], subscription: str | None = "s") -> pd.DataFrame:
    t = pd.Timestamp("2025-01-15", tz="UTC")
    return pd.DataFrame({"topic": "orders", "subscription": subscription,
                         "segment_id": segment_ids, "sealed_at": t, "drained_at": t,
                         "drain_ms": 0})


def test_a_jobs_windows_go_to_one_file_per_topic_and_kind_in_window_order(tmp_path: Path) -> None:
    files = FrameWriter(str(tmp_path))
    files.write("orders", {"segment_drain": _drains([1, 2])})
    files.write("orders", {"segment_drain": _drains([]), "msg": pd.DataFrame()})  # empty: no file
    files.write("orders", {"segment_drain": _drains([3])})
    files.close()
    path = staged_file(str(tmp_path), "segment_drain", "orders")
    assert [p.name for p in (tmp_path / "segment_drain").iterdir()] == [Path(path).name]
    assert pq.read_table(path).column("segment_id").to_pylist() == [1, 2, 3]
    assert not (tmp_path / "msg").exists()


def test_files_are_hidden_from_readers_until_closed(tmp_path: Path) -> None:
    files = FrameWriter(str(tmp_path))
    files.write("orders", {"segment_drain": _drains([1])})
    assert ds.dataset(str(tmp_path / "segment_drain"), format="parquet").count_rows() == 0
    files.close()
    assert ds.dataset(str(tmp_path / "segment_drain"), format="parquet").count_rows() == 1


def test_a_null_in_a_required_column_fails_the_write(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="subscription"):
        FrameWriter(str(tmp_path)).write("orders", {"segment_drain": _drains([1], None)})


def test_writes_queued_past_the_writer_threads_lead_keep_their_order(tmp_path: Path) -> None:
    files = FrameWriter(str(tmp_path))
    for i in range(3 * WRITES_AHEAD + 1):
        files.write("orders", {"segment_drain": _drains([i])})
    files.close()
    path = staged_file(str(tmp_path), "segment_drain", "orders")
    assert pq.read_table(path).column("segment_id").to_pylist() == list(range(3 * WRITES_AHEAD
                                                                                + 1))


def test_a_write_failed_on_the_writer_thread_fails_the_close(tmp_path: Path,
                                                             monkeypatch) -> None:
    def broken(self, table, row_group_size=None):
        raise OSError("disk full")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", broken)
    files = FrameWriter(str(tmp_path))
    files.write("orders", {"segment_drain": _drains([1])})
    with pytest.raises(OSError, match="disk full"):
        files.close()
