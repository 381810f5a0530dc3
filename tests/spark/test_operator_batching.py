"""The batching operator (``pipelines.spark.batching.BatchingProcessor``) alone, in a small
streaming query with a temporary checkpoint: per window it batches the routed messages the
control plane handed its shard, writes the ``messages`` and ``entries`` rows, hands the entries
to dispatch, and carries each topic's open batches in its ``MapState`` to the next micro-batch
(reference §7, §7.1: a batch open at a window's end goes out when its flush task fires)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.contract.config import load_config
from pipelines.engine.stages import StageSettings
from pipelines.spark.batching import BATCHING_OUT_DDL, BatchingProcessor
from pipelines.spark.control import CONTROL_OUT_DDL
from pipelines.spark.handover import WindowFiles, out_dir
from pipelines.spark.placement import Slots
from tests.spark.operator_query import OperatorQuery, hand_over_routed, read_kind

pytestmark = pytest.mark.spark

RUN = "r"
SLOTS = Slots.of([RUN], bins=1, shards=1, dispatchers=1, partitions=2)
SETS = ["batching.max_messages=2", "batching.max_publish_delay_ms=10"]
WINDOW_0 = [("a", "p", 0), ("a", "p", 1), ("a", "p", 2), ("b", "q", 3)]
"""Window 0 (``event_ms < 5``): ``a``'s first two messages fill a batch (sent at 1); its third
and ``b``'s message are still open at the window's end."""


def _tokens(window: int, hi: int | None, final: bool, version: int) -> pa.Table:
    return pa.Table.from_pylist([{"slot": 0, "run_id": RUN, "bin": 0, "shard": 0, "window": window,
                                  "hi_ms": hi, "final": final, "version": version,
                                  "control_s": 0.5}], schema=_schema())


def _schema() -> pa.Schema:
    return pa.schema([("slot", pa.int64()), ("run_id", pa.string()), ("bin", pa.int32()),
                      ("shard", pa.int32()),
                      ("window", pa.int32()), ("hi_ms", pa.int64()), ("final", pa.bool_()),
                      ("version", pa.int64()), ("control_s", pa.float64())])


@pytest.fixture(scope="module")
def batching(spark, tmp_path_factory):
    """Two micro-batches: window 0, then the final window 1 without new messages; returns
    (the emulation folder, each micro-batch's output rows)."""
    folder = tmp_path_factory.mktemp("batching")
    emulation = str(folder / "emulation")
    settings = StageSettings.from_config(load_config(None, SETS), 0)
    hand_over_routed(emulation, RUN, settings, [(1, 5, False, WINDOW_0), (2, None, True, [])])
    query = OperatorQuery(spark, folder, BatchingProcessor({RUN: settings}, emulation, SLOTS),
                          CONTROL_OUT_DDL, ["slot"], BATCHING_OUT_DDL)
    return emulation, query.run(_tokens(0, 5, False, 1)), query.run(_tokens(1, None, True, 2))


def _entries(emulation: str, version: int, window: int) -> list[tuple]:
    e = WindowFiles(emulation, version, RUN, 0, window).read_entries()
    return sorted(zip(e["topic"], e["num_messages"], e["emu_publish_ms"], strict=True))


def test_a_full_batch_is_sent_and_handed_to_dispatch_in_its_window(batching):
    emulation, _, _ = batching
    assert _entries(emulation, 1, 0) == [("a", 2, 1)]
    rows = read_kind(out_dir(emulation, 1, RUN), "entry")
    assert rows["close_reason"].tolist() == ["max_messages"]
    assert sorted(read_kind(out_dir(emulation, 1, RUN), "msg")["entry_id"]) == [0, 0]


def test_batches_open_at_a_window_end_go_out_when_their_tasks_fire_in_the_next(batching):
    emulation, _, _ = batching
    # a: the task armed at 0 finds only 9 ms since the send at 1, re-arms, fires at 11;
    # b: its task fires at 13. Both from the state the first micro-batch left.
    assert _entries(emulation, 2, 1) == [("a", 1, 11), ("b", 1, 13)]
    rows = read_kind(out_dir(emulation, 2, RUN), "entry")
    assert set(rows["close_reason"]) == {"max_delay"}
    assert sorted(zip(rows["topic"], rows["entry_id"], strict=True)) == [("a", 1), ("b", 0)]


def test_each_window_tells_every_dispatcher_with_the_seconds_on_the_first(batching):
    _, first, second = batching
    for out, final in ((first, False), (second, True)):
        assert out["dispatcher"].tolist() == [0]  # the default config's one subscription
        assert out["final"].tolist() == [final]
        assert out["control_s"].tolist() == [0.5]
        assert (out["batching_s"] > 0).all()
