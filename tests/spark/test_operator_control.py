"""The control-plane operator (``pipelines.spark.control.ControlProcessor``) alone, in a small
streaming query with a temporary checkpoint: per window it reads its bin's staged messages,
hands each producer shard its routed messages and the advanced topics' layouts over, writes its
tables, and carries each topic's controller in its ``MapState`` from one micro-batch to the
next."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.contract.config import load_config
from pipelines.engine.stages import StageSettings
from pipelines.spark.control import CONTROL_OUT_DDL, FEED_DDL, ControlProcessor
from pipelines.spark.emulation import FEED_SCHEMA
from pipelines.spark.handover import WindowFiles, out_dir
from pipelines.spark.placement import Slots
from pipelines.storage.staging import StagingWriter
from tests.spark.operator_query import OperatorQuery, keyless, read_kind

pytestmark = pytest.mark.spark

RUN = "r"
SHARDS = 2
SLOTS = Slots.of([RUN], bins=1, shards=SHARDS, dispatchers=1, partitions=2)
MESSAGES = [*(("a", f"p{i % 2}", 1000 + i) for i in range(10)), ("b", "q", 1000),
            ("b", "q", 5000)]
"""Topic ``a``: 10 messages in window 0 only; ``b``: one in each window."""


def _feed(window: int, lo: int | None, hi: int | None, final: bool, version: int) -> pa.Table:
    return pa.Table.from_pylist([{"slot": SLOTS.control(RUN, 0), "run_id": RUN, "bin": 0,
                                  "window": window, "lo_ms": lo, "hi_ms": hi, "final": final,
                                  "snapshot": False, "version": version}], schema=FEED_SCHEMA)


@pytest.fixture(scope="module")
def control(spark, tmp_path_factory):
    """The operator's two micro-batches: window 0 (``event_ms < 3000``), then the final
    window 1; returns (the folder, each micro-batch's output rows)."""
    folder = tmp_path_factory.mktemp("control")
    staging = folder / "staging"
    writer = StagingWriter(str(staging / "batch_id=0"), 0, bins=1)
    writer.add(keyless(MESSAGES).to_batches()[0])
    writer.close()
    settings = StageSettings.from_config(load_config(None, []), 1000)
    query = OperatorQuery(spark, folder, ControlProcessor({RUN: settings}, str(staging),
                                                          str(folder / "emulation"), SLOTS),
                          FEED_DDL, ["slot"], CONTROL_OUT_DDL)
    first = query.run(_feed(0, None, 3000, False, 1))
    second = query.run(_feed(1, 3000, None, True, 2))
    return folder / "emulation", first, second


def _routed(emulation, version: int, window: int):
    files = WindowFiles(str(emulation), version, RUN, 0, window)
    return [files.read_routed(s) for s in range(SHARDS)], files.read_layouts()


def test_a_window_hands_each_shard_its_routed_messages_in_replay_order(control):
    emulation, first, _ = control
    shards, _ = _routed(emulation, 1, 0)
    got = sorted((r.topic, r.producer_name, r.event_ms) for s in shards
                 for r in s.itertuples())
    assert got == sorted(m for m in MESSAGES if m[2] < 3000)
    for s in shards:  # each topic's messages in event order, routed to segment 0
        for _, part in s.groupby("topic", observed=True):
            assert part["event_ms"].is_monotonic_increasing
        assert set(s["segment_id"]) <= {0}
    # a row per shard with routed messages, shard 0 always; the seconds on shard 0's only
    with_rows = {i for i, s in enumerate(shards) if len(s)}
    assert sorted(first["shard"]) == sorted({0} | with_rows)
    assert (first.loc[first["shard"] != 0, "control_s"] == 0).all()
    assert first["hi_ms"].tolist() == [3000] * len(first)


def test_the_final_window_advances_every_topic_from_the_carried_state(control):
    emulation, _, second = control
    shards, layouts = _routed(emulation, 2, 1)
    # only b has messages in window 1, yet a's controller (from the MapState of the previous
    # micro-batch) is advanced too: both layouts are handed over
    assert [(r.topic, r.event_ms) for s in shards for r in s.itertuples()] == [("b", 5000)]
    assert sorted(layouts) == ["a", "b"]
    assert sorted(second["shard"]) == list(range(SHARDS))  # every shard in the final window
    assert second["final"].all()


def test_each_row_names_the_slot_of_its_batching_key(control):
    _, first, second = control
    for out in (first, second):
        assert out["slot"].tolist() == [SLOTS.batching(RUN, 0, s) for s in out["shard"]]


def test_the_final_window_writes_the_segments_of_every_topic(control):
    emulation, _, _ = control
    segments = read_kind(out_dir(str(emulation), 2, RUN), "segment")
    assert sorted(segments["topic"].unique()) == ["a", "b"]
    assert read_kind(out_dir(str(emulation), 1, RUN), "segment").empty  # not a snapshot


def test_each_window_reads_its_own_messages_the_next_read_ahead(tmp_path):
    staging = tmp_path / "staging"
    writer = StagingWriter(str(staging / "batch_id=0"), 0, bins=1)
    writer.add(keyless(MESSAGES).to_batches()[0])
    writer.close()
    processor = ControlProcessor({}, str(staging), str(tmp_path / "emulation"), SLOTS)
    processor.windows(pa.Table.from_pylist([
        {"window": i, "lo_ms": lo, "hi_ms": hi} for i, (lo, hi) in
        enumerate([(None, 1005), (1005, 3000), (3000, None)])]).to_pandas())
    first = processor.read(0, None, 1005)
    assert list(processor.ahead) == [(1005, 3000)]  # the next window's read has started
    got = [first, processor.read(0, 1005, 3000), processor.read(0, 3000, None)]
    assert [sorted(g["event_ms"]) for g in got] == [
        [1000, 1000, 1001, 1002, 1003, 1004], [1005, 1006, 1007, 1008, 1009], [5000]]
    assert processor.ahead == {}  # each read ahead was taken by its window
