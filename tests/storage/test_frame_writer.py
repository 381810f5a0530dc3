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


def _coded_drains(segment_ids: list[int], subscriptions: list[str]) -> pd.DataFrame:
    """``_drains`` with the subscription coded as a dictionary (``stages.coded``)."""
    from pipelines.engine.stages import coded  # noqa: PLC0415

    names = sorted(set(subscriptions))
    frame = _drains(segment_ids)
    frame["subscription"] = pd.arrays.ArrowExtensionArray(
        coded(names, [names.index(s) for s in subscriptions]))
    return frame


def test_coded_strings_are_written_as_plain_strings_of_their_values(tmp_path: Path) -> None:
    files = FrameWriter(str(tmp_path))
    files.write("orders", {"segment_drain": _coded_drains([1, 2], ["b", "a"])})
    files.write("orders", {"segment_drain": _drains([3])})  # plain strings into the same file
    files.write("orders", {"segment_drain": _coded_drains([4], ["c"])})  # other codes
    files.close()
    table = pq.read_table(staged_file(str(tmp_path), "segment_drain", "orders"))
    assert str(table.schema.field("subscription").type) == "string"
    assert table.column("subscription").to_pylist() == ["b", "a", "s", "c"]
    assert table.column("segment_id").to_pylist() == [1, 2, 3, 4]
