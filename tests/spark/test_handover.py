"""The emulation operators' hand-over: producer shards, the state formats (the operators' and
the replay's state files), feed files (pure: no Spark)."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.engine.stages import StageWindow
from pipelines.spark import handover
from pipelines.spark.emulation import FEED_SCHEMA, write_feed
from pipelines.spark.placement import Slots
from pipelines.spark.replay_state import REPLAY_STATE_FORMAT, ReplayState, read_state, state_blob
from pipelines.storage.frames import WriterThread


class FakeMapState:
    """A ``MapState`` (topic → :data:`window_loop.STATE_DDL`) in memory that counts its calls."""

    def __init__(self, values: dict[str, tuple[int, bytes]] | None = None) -> None:
        self.values = dict(values or {})
        self.calls: list[str] = []

    def getValue(self, key: tuple[str]) -> tuple[int, bytes] | None:
        self.calls.append(f"get {key[0]}")
        return self.values.get(key[0])

    def updateValue(self, key: tuple[str], value: tuple[int, bytes]) -> None:
        self.calls.append(f"update {key[0]}")
        self.values[key[0]] = value

    def iterator(self) -> list[tuple[tuple[str], tuple[int, bytes]]]:
        self.calls.append("iterator")
        return [((k,), v) for k, v in self.values.items()]


def test_producer_shard_is_the_same_in_another_process() -> None:
    names = [f"device-{i}" for i in range(200)]
    here = handover.producer_shard(pd.Series(names), 7).tolist()
    code = ("import pandas as pd; from pipelines.spark.handover import producer_shard; "
            f"print(producer_shard(pd.Series({names!r}), 7).tolist())")
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "123"}).stdout
    assert there.strip() == str(here)


@pytest.mark.parametrize("dtype", [object, pd.ArrowDtype(pa.string()), "category"])
def test_producer_shard_depends_only_on_the_name(dtype: object) -> None:
    shards = handover.producer_shard(pd.Series(["a", "b", "a", "c", "b"], dtype=dtype), 3)
    assert shards[0] == shards[2] and shards[1] == shards[4]
    assert shards.min() >= 0 and shards.max() < 3


def test_producer_shard_spreads_many_producers_over_every_shard() -> None:
    shards = handover.producer_shard(pd.Series([f"p{i}" for i in range(10_000)]), 4)
    counts = pd.Series(shards).value_counts()
    assert sorted(counts.index) == [0, 1, 2, 3]
    assert counts.min() > 2_000  # about 2,500 each


@pytest.mark.parametrize("dtype", [object, "category"])
def test_producer_shard_takes_the_kept_shard_of_a_topics_producer(dtype: object) -> None:
    # t1's p1 and p2 are kept; p3 (new since) and every producer of t2 are hashed
    producers = pd.Series(["p1", "p2", "p3", "p1", "p2"], dtype=dtype)
    topics = pd.Series(["t1", "t1", "t1", "t2", "t2"], dtype=dtype)
    hashed = handover.producer_shard(producers, 4).tolist()
    kept = {"t1": {"p1": 3, "p2": 3}}
    got = handover.producer_shard(producers, 4, topics, kept).tolist()
    assert got == [3, 3, hashed[2], hashed[3], hashed[4]]


def test_producer_shard_of_no_rows_is_empty() -> None:
    assert handover.producer_shard(pd.Series([], dtype=object), 4).tolist() == []


def test_topic_state_round_trips_with_its_format() -> None:
    state = FakeMapState()
    states = handover.TopicStates(state)
    assert states.get("t") is None
    states.put("t", b"blob")
    states.save()
    assert state.values == {"t": (handover.STATE_FORMAT, b"blob")}
    assert handover.TopicStates(state).get("t") == b"blob"


def test_topic_states_read_and_write_only_the_topics_touched() -> None:
    state = FakeMapState({t: (handover.STATE_FORMAT, b"x") for t in ["a", "b", "c"]})
    states = handover.TopicStates(state)
    states.put("b", states.get("b") + b"y")  # type: ignore[operator]
    states.save()
    assert state.calls == ["get b", "update b"]


def test_all_topics_reads_the_map_once_and_lists_topics_given_state() -> None:
    state = FakeMapState({t: (handover.STATE_FORMAT, b"x") for t in ["b", "a"]})
    states = handover.TopicStates(state)
    states.put("c", b"new")
    assert states.all_topics() == ["a", "b", "c"]
    assert states.get("d") is None
    assert state.calls == ["iterator"]


def test_state_of_another_format_is_refused_in_one_sentence() -> None:
    state = FakeMapState({"t": (handover.STATE_FORMAT + 1, b"old")})
    with pytest.raises(handover.StateFormatError, match="replay into a new --output"):
        handover.TopicStates(state).get("t")


def test_replay_state_round_trips_with_its_format() -> None:
    state = read_state(state_blob(ReplayState(batch_id=3, staged={"t": 5})), "state/3.pkl")
    assert (state.batch_id, state.staged) == (3, {"t": 5})


def test_replay_state_written_before_the_layout_is_refused_in_one_sentence() -> None:
    # format 1: a bare ReplayState of the module pipelines.replay, which no longer exists
    old = b"cpipelines.replay\nReplayState\n)\x81."
    with pytest.raises(handover.StateFormatError,
                       match=r"state/3.pkl is of format 1, this version reads format 2: replay "
                             r"into a new --output"):
        read_state(old, "state/3.pkl")


def test_replay_state_of_another_format_is_refused() -> None:
    newer = pickle.dumps((REPLAY_STATE_FORMAT + 1, ReplayState()))
    with pytest.raises(handover.StateFormatError, match=f"of format {REPLAY_STATE_FORMAT + 1},"):
        read_state(newer, "state/0.pkl")


def test_feed_has_a_row_per_run_bin_and_window(tmp_path) -> None:
    windows = [StageWindow(None, 100, False), StageWindow(100, None, True)]
    slots = Slots.of(["r2", "r1"], bins=2, shards=4, dispatchers=1, partitions=8)
    assert write_feed(str(tmp_path), 7, windows, slots, 5000, snapshot=False)
    table = pq.read_table(tmp_path / "feed" / f"v-{7:020d}.parquet")
    assert table.schema.equals(FEED_SCHEMA)
    rows = table.to_pylist()
    assert [(r["run_id"], r["bin"], r["window"]) for r in rows] == [
        ("r1", 0, 0), ("r1", 0, 1), ("r1", 1, 0), ("r1", 1, 1),
        ("r2", 0, 0), ("r2", 0, 1), ("r2", 1, 0), ("r2", 1, 1)]
    assert [(r["lo_ms"], r["hi_ms"], r["final"]) for r in rows[:2]] == [
        (None, 100, False), (100, None, True)]
    assert {r["version"] for r in rows} == {7}
    assert [r["slot"] for r in rows] == [slots.control(r["run_id"], r["bin"]) for r in rows]


ONE_RUN = Slots.of(["r"], bins=4, shards=1, dispatchers=1, partitions=2)


def test_feed_is_written_once_per_version(tmp_path) -> None:
    write_feed(str(tmp_path), 7, [StageWindow(None, None, True)], ONE_RUN, 1, snapshot=False)
    path = tmp_path / "feed" / f"v-{7:020d}.parquet"
    before = path.stat().st_mtime_ns
    write_feed(str(tmp_path), 7, [StageWindow(None, None, True)], ONE_RUN, 1, snapshot=False)
    assert path.stat().st_mtime_ns == before


def test_no_topics_means_nothing_to_feed(tmp_path) -> None:
    assert not write_feed(str(tmp_path), 7, [StageWindow(None, None, True)], ONE_RUN, 0,
                          snapshot=False)
    assert not (tmp_path / "feed").exists()


@pytest.mark.parametrize(("topics", "expected"), [
    (["b", "a", "b", "c", "a"], {"b": [0, 2], "a": [1, 4], "c": [3]}),  # rows keep their order
    ([], {}),
])
def test_by_topic_gives_each_topic_its_rows_in_order(topics: list[str],
                                                      expected: dict[str, list[int]]) -> None:
    frame = pd.DataFrame({"topic": pd.Series(topics, dtype=object),
                          "row": np.arange(len(topics))})
    parts = handover.by_topic(frame)
    assert {t: p["row"].tolist() for t, p in parts.items()} == expected


@pytest.mark.parametrize(("shard", "shards", "expected"), [
    ([1, 0, 1, 0, 2], 3, [[1, 3], [0, 2], [4]]),   # rows keep their order within a shard
    ([2, 2], 3, [[], [], [0, 1]]),                  # every shard gets a part, maybe empty
    ([], 2, [[], []]),
])
def test_split_by_shard_gives_each_shard_its_rows_in_order(
        shard: list[int], shards: int, expected: list[list[int]]) -> None:
    table = pa.table({"row": pa.array(range(len(shard)), pa.int64())})
    parts = handover.split_by_shard(table, np.asarray(shard, dtype=np.int64), shards)
    assert [p["row"].to_pylist() for p in parts] == expected


def test_frame_round_trips_through_its_file(tmp_path) -> None:
    table = pa.table({"producer_name": ["p1", None, "p2"], "entry_id": [3, 1, 2]})
    path = str(tmp_path / "w" / handover.shard_file("x", 1).split("/")[-1])
    handover.write_frame(path, table)
    assert path.endswith(handover.HANDOVER_SUFFIX)
    assert handover.read_frame(path).equals(table)
    assert handover.read_frame(str(tmp_path / "missing.arrow")) is None
    assert [p.name for p in (tmp_path / "w").iterdir()] == ["shard-0001.arrow"]  # no temp left


def test_producer_shard_of_coded_names_is_that_of_the_strings() -> None:
    names = ["a", "b", "a", "c", "b"]
    coded = pd.Series(pd.Categorical(names, categories=["z", "c", "b", "a"]))  # "z": no row
    assert (handover.producer_shard(coded, 7).tolist()
            == handover.producer_shard(pd.Series(names, dtype=object), 7).tolist())


def test_a_hand_over_file_read_stays_as_read_when_a_rerun_replaces_it(tmp_path) -> None:
    # read memory-mapped: a re-run writes a new file and renames it over the old one
    path = str(tmp_path / "w" / "shard-0000.arrow")
    first = pa.table({"entry_id": list(range(1000)), "producer_name": ["p"] * 1000})
    handover.write_frame(path, first)
    read = handover.read_frame(path)
    handover.write_frame(path, pa.table({"entry_id": [7], "producer_name": ["q"]}))
    assert read.equals(first)
    assert handover.read_frame(path).column("entry_id").to_pylist() == [7]


def test_a_large_hand_over_file_streamed_through_its_buffer_round_trips(tmp_path) -> None:
    rows = 3 * handover.HANDOVER_BUFFER // 8  # three buffers' worth of longs
    table = pa.table({"entry_id": pa.array(range(rows), pa.int64())})
    path = str(tmp_path / "w" / "shard-0000.arrow")
    handover.write_frame(path, table)
    assert handover.read_frame(path).equals(table)
    assert [p.name for p in (tmp_path / "w").iterdir()] == ["shard-0000.arrow"]


@pytest.mark.parametrize(("path", "compression"), [
    ("/tmp/out/_work/r/emulation/v=1/routed/shard-0000.arrow", None),
    ("relative/emulation/shard-0000.arrow", None),
    ("s3a://bucket/out/_work/r/emulation/v=1/routed/shard-0000.arrow", "lz4"),
])
def test_hand_over_files_are_compressed_only_on_an_object_store(path: str,
                                                                compression: str | None) -> None:
    assert handover.handover_compression(path) == compression


def test_a_local_hand_over_file_is_written_uncompressed(tmp_path) -> None:
    table = pa.table({"entry_id": list(range(1000))})
    path = str(tmp_path / "shard-0000.arrow")
    handover.write_frame(path, table)
    with pa.ipc.open_file(path) as reader:
        assert reader.read_all().equals(table)
    assert (tmp_path / "shard-0000.arrow").stat().st_size > 8000  # 1,000 longs, as they are


def _routed(n: int) -> pd.DataFrame:
    """``n`` routed messages of four producers (every column of ``ROUTED_SCHEMA``)."""
    rows = [{"topic": "t", "key": f"k{i}", "producer_name": f"p{i % 4}", "sequence_id": i,
             "publish_time": i, "payload_size": 10, "event_ms": i, "hash32": i,
             "segment_hash": i, "hash_b": i, "segment_id": 0, "bucket_index": 0,
             "layout_epoch": 0} for i in range(n)]
    return pa.Table.from_pylist(rows, schema=handover.ROUTED_SCHEMA).to_pandas(
        types_mapper=handover.arrow_strings)


def test_routed_messages_written_by_the_writer_thread_are_those_written_at_once(
        tmp_path) -> None:
    routed = _routed(40)
    at_once = handover.WindowFiles(str(tmp_path / "a"), 1, "r", 0, 0)
    thread = WriterThread()
    later = handover.WindowFiles(str(tmp_path / "b"), 1, "r", 0, 0, thread)
    shards = at_once.write_routed(routed, 3)
    assert later.write_routed(routed, 3) == shards
    thread.drain()
    assert shards == {s for s in range(3) if len(at_once.read_routed(s))}
    for s in range(3):
        assert later.read_routed(s).equals(at_once.read_routed(s))
