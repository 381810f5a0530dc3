"""The dispatch operator (``pipelines.spark.dispatch.DispatchProcessor``) alone, in a small
streaming query with a temporary checkpoint: per window (one row from each producer shard) it
feeds the entries batching handed over to each topic's dispatcher, writes the dispatch tables,
and carries each topic's dispatcher in its ``MapState`` to the next micro-batch."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.contract.config import load_config
from pipelines.engine.stages import StageSettings
from pipelines.spark.batching import BATCHING_OUT_DDL
from pipelines.spark.dispatch import DISPATCH_OUT_DDL, DispatchProcessor
from pipelines.spark.handover import out_dir
from tests.spark.operator_query import OperatorQuery, hand_over_entries, read_kind

pytestmark = pytest.mark.spark

RUN = "r"
SETS = ["batching.max_publish_delay_ms=10"]
WINDOWS = [(1, 1000, False, [("a", "p", 0), ("a", "p", 500), ("b", "q", 20)]),
           (2, None, True, [("b", "q", 1500)])]
"""``a``: entries in window 0 only; ``b``: in both windows."""


def _tokens(window: int, hi: int | None, final: bool, version: int) -> pa.Table:
    """The window's rows from two producer shards (their seconds add up)."""
    schema = pa.schema([("slot", pa.int64()), ("run_id", pa.string()), ("bin", pa.int32()),
                        ("dispatcher", pa.int32()), ("window", pa.int32()),
                        ("hi_ms", pa.int64()), ("final", pa.bool_()), ("version", pa.int64()),
                        ("control_s", pa.float64()), ("batching_s", pa.float64())])
    return pa.Table.from_pylist([
        {"slot": 0, "run_id": RUN, "bin": 0, "dispatcher": 0, "window": window, "hi_ms": hi,
         "final": final, "version": version, "control_s": c, "batching_s": b}
        for c, b in ((0.5, 0.25), (0.0, 0.125))], schema=schema)


@pytest.fixture(scope="module")
def dispatch(spark, tmp_path_factory):
    """Two micro-batches (window 0, then the final window 1); returns (the emulation folder,
    the entries handed over per window, each micro-batch's output rows)."""
    folder = tmp_path_factory.mktemp("dispatch")
    emulation = str(folder / "emulation")
    settings = StageSettings.from_config(load_config(None, SETS), 0)
    entries = hand_over_entries(emulation, RUN, settings, WINDOWS)
    query = OperatorQuery(spark, folder, DispatchProcessor({RUN: settings}, emulation),
                          BATCHING_OUT_DDL, ["slot"], DISPATCH_OUT_DDL)
    return (emulation, entries, query.run(_tokens(0, 1000, False, 1)),
            query.run(_tokens(1, None, True, 2)))


def test_every_entry_handed_over_is_dispatched_once_in_its_window(dispatch):
    emulation, entries, _, _ = dispatch
    for i, version in enumerate((1, 2)):
        rows = read_kind(out_dir(emulation, version, RUN), "dispatch")
        want = sorted(zip(entries[i]["topic"], entries[i]["entry_id"], strict=True))
        assert want  # both windows hand entries over
        assert sorted(zip(rows["topic"], rows["entry_id"], strict=True)) == want
        assert set(rows["subscription"]) == {"sub-stream"}


def test_the_final_window_finishes_every_topic_from_the_carried_state(dispatch):
    emulation, _, _, _ = dispatch
    # a has no entry in window 1: its dispatcher comes from the previous micro-batch's
    # MapState and is finished (its last consumer_load window written) with b's
    load = read_kind(out_dir(emulation, 2, RUN), "consumer_load")
    assert sorted(load["topic"].unique()) == ["a", "b"]


def test_a_window_row_sums_the_shards_seconds(dispatch):
    _, _, first, second = dispatch
    for out, window in ((first, 0), (second, 1)):
        assert out["window"].tolist() == [window]
        assert out["control_s"].tolist() == [0.5]
        assert out["batching_s"].tolist() == [0.375]
        assert (out["dispatch_s"] > 0).all()
