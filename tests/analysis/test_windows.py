"""Sparse windowed tables (issue #30): ``consumer_load`` and ``subscription_stats`` keep only the
windows where something happened or changed, and ``pipelines.analysis.windows`` fills the idle
ones back to the dense tables the replay wrote before, row for row."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipelines.analysis.figures import fig_consumers, window_cells
from pipelines.analysis.run_tables import RunTables, consumer_shares
from pipelines.analysis.windows import WindowSettings, fill_idle_windows, window_settings
from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.contract.schemas import IDLE_WINDOWS_DOC
from pipelines.core.dispatch import SubscriptionDispatcher
from pipelines.engine.local import run_local
from pipelines.storage.delta import DeltaStore
from pipelines.workload.generator import WorkloadSpec, generate

T0 = pd.Timestamp("2025-01-15T09:00:00Z")


def _ts(ms: int) -> pd.Timestamp:
    return T0 + pd.Timedelta(milliseconds=ms)


def _load(consumer: str, ws: int, msgs: int, busy: int, idle: int, backlog: int,
          topic: str = "t", we: int | None = None) -> dict[str, object]:
    return {"run_id": "r", "topic": topic, "subscription": "s", "consumer_name": consumer,
            "window_start": _ts(ws), "window_end": _ts(ws + 1000 if we is None else we),
            "messages": msgs, "bytes": 10 * msgs, "busy_ms": busy, "idle_ms": idle,
            "backlog_messages": backlog}


def _stats(ws: int, backlog: int, withheld: int, most: int, cleared: int,
           we: int | None = None) -> dict[str, object]:
    return {"run_id": "r", "topic": "t", "subscription": "s", "window_start": _ts(ws),
            "window_end": _ts(ws + 1000 if we is None else we), "backlog_messages": backlog,
            "unacked_messages": 1, "draining_hashes_count": withheld,
            "draining_hashes_max": most, "draining_hashes_pending_messages": 2,
            "draining_hashes_cleared": cleared, "reassignments": cleared, "redeliveries": 0,
            "shared_segments": 1, "drain_mode_segments": 0, "sealed_segments_undrained": 0}


# Windows of 1000 emulated ms at speed 1 (T0 is a multiple of 1000 ms since the epoch).
GRID = WindowSettings(1000, 1.0)


@pytest.mark.parametrize(
    ("table", "sparse", "dense"),
    [
        pytest.param(  # a gap of two windows: zero traffic, idle all window, backlog carried
            "consumer_load",
            [_load("a", 0, 3, 400, 600, 5), _load("a", 3000, 1, 0, 1000, 0)],
            [_load("a", 0, 3, 400, 600, 5), _load("a", 1000, 0, 0, 1000, 5),
             _load("a", 2000, 0, 0, 1000, 5), _load("a", 3000, 1, 0, 1000, 0)],
            id="gap-carries-the-backlog"),
        pytest.param(  # two consumers and two topics interleaved: each series filled alone
            "consumer_load",
            [_load("b", 2000, 0, 0, 500, 0, we=2500), _load("a", 0, 1, 0, 1000, 0),
             _load("a", 2000, 0, 0, 500, 0, we=2500), _load("b", 0, 2, 0, 1000, 0, topic="u"),
             _load("b", 1000, 0, 0, 1000, 0)],
            [_load("a", 0, 1, 0, 1000, 0), _load("a", 1000, 0, 0, 1000, 0),
             _load("a", 2000, 0, 0, 500, 0, we=2500), _load("b", 1000, 0, 0, 1000, 0),
             _load("b", 2000, 0, 0, 500, 0, we=2500), _load("b", 0, 2, 0, 1000, 0, topic="u")],
            id="series-by-topic-subscription-consumer"),
        pytest.param(  # nothing missing: the rows as they are, sorted
            "consumer_load",
            [_load("a", 1000, 0, 0, 1000, 0), _load("a", 0, 1, 0, 1000, 0)],
            [_load("a", 0, 1, 0, 1000, 0), _load("a", 1000, 0, 0, 1000, 0)],
            id="no-gap"),
        pytest.param(  # gauges carried, counts 0, the most withheld = the withheld count
            "subscription_stats",
            [_stats(0, 4, 2, 3, 1), _stats(3000, 0, 0, 2, 2, we=3200)],
            [_stats(0, 4, 2, 3, 1), _stats(1000, 4, 2, 2, 0), _stats(2000, 4, 2, 2, 0),
             _stats(3000, 0, 0, 2, 2, we=3200)],
            id="stats-gauges-carried-counts-zero"),
    ],
)
def test_fill_idle_windows_carries_the_previous_row_forward(
        table: str, sparse: list[dict[str, object]], dense: list[dict[str, object]]) -> None:
    got = fill_idle_windows(pd.DataFrame(sparse), table, GRID)
    pd.testing.assert_frame_equal(got, pd.DataFrame(dense))


@pytest.mark.parametrize(("config", "expected"), [
    ({"replay": {"speed": 1.0, "consumer_window_s": 60}}, (60_000, 1.0)),
    ('{"replay": {"speed": 3600, "consumer_window_s": 60}}', (16, 3600.0)),
    ({"replay": {"speed": 0.7, "consumer_window_s": 2}}, (2857, 0.7)),
])
def test_window_settings_are_the_replays_emulated_window(config: object,
                                                         expected: tuple[int, float]) -> None:
    assert tuple(window_settings(config)) == expected  # type: ignore[arg-type]


def test_window_cells_leave_idle_stretches_empty() -> None:
    edges, cells = window_cells(np.array([0.0, 1.0, 5.0]), 1.0, np.array([[1.0, 2.0, 3.0]]))
    assert edges.tolist() == [0.0, 1.0, 2.0, 5.0, 6.0]
    assert np.array_equal(cells, np.array([[1.0, 2.0, np.nan, 3.0]]), equal_nan=True)


# ---- a whole replay: sparse tables filled back == the dense tables ------------------------------
CONF = """
replay: {speed: 0.7, consumer_window_s: 2}
policy: {split_msg_rate_in: 20, merge_msg_rate_in: 3, split_msg_rate_out: 1000,
         merge_msg_rate_out: 100, merge_window_s: 60, merge_cooldown_s: 60}
subscriptions:
  - name: s-stream
    type: stream
    consumers:
      - {name: a, join: 0, capacity_msg_per_s: 40}
      - {name: b, join: 30, leave: 200, ack_delay_ms: 300}
      - {name: c, join: 121}
  - name: s-queue
    type: queue
    consumers:
      - {name: q0, capacity_msg_per_s: 5}
      - {name: q1, join: 60, leave: 400}
  - name: s-reader
    type: checkpoint
    grouped: false
    consumers:
      - {name: r0, join: 10}
"""

SPEC = {
    "seed": 5, "start_time": "2025-01-15T09:00:00Z", "duration_s": 600, "format": "json",
    "topics": [
        {"name": "busy", "producers": 2, "rate": {"kind": "steps", "steps": [
            {"at_s": 0, "msg_rate": 4}, {"at_s": 100, "msg_rate": 40}, {"at_s": 160,
                                                                        "msg_rate": 0},
            {"at_s": 500, "msg_rate": 2}]},
         "keys": {"distribution": "zipf", "n_keys": 50, "exponent": 1.1},
         "payload": {"kind": "fixed", "size": 200}},
        {"name": "quiet", "producers": 1, "rate": {"kind": "steps", "steps": [
            {"at_s": 0, "msg_rate": 0.05}, {"at_s": 300, "msg_rate": 0}]},
         "payload": {"kind": "uniform", "min": 10, "max": 90}},
    ],
}

WINDOWED = ("consumer_load", "subscription_stats")
OTHERS = ("messages", "entries", "segments", "segment_load", "autoscale_decisions", "dispatch",
          "bucket_handoffs", "segment_drains")


def replay_pair(folder: Path) -> tuple[DeltaStore, DeltaStore]:
    """The same log (:data:`SPEC`, :data:`CONF`) replayed by the local engine under ``folder``
    with sparse windows and with every window (the tables before issue #30); run id ``w``."""
    generate(WorkloadSpec.model_validate(SPEC), folder / "log")
    conf = folder / "windows.yaml"
    conf.write_text(CONF, encoding="utf-8")
    cfg = load_config(conf)
    spec = get_preset("contract").replace(format="json", speed=cfg.replay.speed)
    stores = []
    for name, dense in (("sparse", False), ("dense", True)):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(SubscriptionDispatcher, "dense_windows", dense)
            run_local(cfg, spec, [str(folder / "log")], str(folder / name), "w",
                      progress=lambda _: None)
        stores.append(DeltaStore(str(folder / name), engine="delta-rs"))
    return stores[0], stores[1]


@pytest.fixture
def replays(window_replays: tuple[DeltaStore, DeltaStore]) -> tuple[DeltaStore, DeltaStore]:
    """:func:`replay_pair`, once for the session (``window_replays``, tests/conftest.py)."""
    return window_replays


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in a canonical order (every column but list ones)."""
    keys = [c for c in df.columns
            if not df[c].map(lambda v: isinstance(v, list | np.ndarray)).any()]
    return df.sort_values(keys).reset_index(drop=True)


def _read(store: DeltaStore, table: str) -> pd.DataFrame:
    return _sorted(store.read(table, "w"))


@pytest.mark.parametrize("table", WINDOWED)
def test_filled_sparse_table_equals_the_dense_table(replays: tuple[DeltaStore, DeltaStore],
                                                    table: str) -> None:
    sparse, dense = replays
    grid = window_settings(sparse.read("runs", "w")["config"].iloc[0])
    got = _sorted(fill_idle_windows(sparse.read(table, "w"), table, grid))
    want = _read(dense, table)
    assert len(_read(sparse, table)) < len(want) / 3  # most windows are idle
    pd.testing.assert_frame_equal(got, want)


@pytest.mark.parametrize("table", OTHERS)
def test_sparse_windows_leave_the_other_tables_alone(replays: tuple[DeltaStore, DeltaStore],
                                                     table: str) -> None:
    sparse, dense = replays
    pd.testing.assert_frame_equal(_read(sparse, table), _read(dense, table))


def test_consumer_shares_count_the_idle_windows(replays: tuple[DeltaStore, DeltaStore]) -> None:
    sparse, dense = (RunTables.load(s, "w") for s in replays)
    got = consumer_shares(sparse)
    assert got["windows"].sum() > 0
    pd.testing.assert_frame_equal(got, consumer_shares(dense))


def test_consumer_figure_draws_every_message_of_the_sparse_windows(
        replays: tuple[DeltaStore, DeltaStore]) -> None:
    tables = RunTables.load(replays[0], "w")
    (heat,) = [t for t in fig_consumers(tables).data if t.type == "heatmap"]
    cells = np.array(heat.z, dtype=float)
    assert len(heat.x) == cells.shape[1] + 1  # cell edges: each window over its own time
    assert np.nansum(cells) == tables.consumer_load["messages"].sum() > 0


def test_every_configured_consumer_and_subscription_has_rows(
        replays: tuple[DeltaStore, DeltaStore]) -> None:
    sparse = replays[0].read("consumer_load", "w")
    assert set(zip(sparse["subscription"], sparse["consumer_name"], strict=True)) == {
        ("s-stream", "a"), ("s-stream", "b"), ("s-stream", "c"), ("s-queue", "q0"),
        ("s-queue", "q1"), ("s-reader/r0", "r0")}


def doc_example(language: str) -> str:
    """The ``language`` code block of docs/tables.md's "Idle windows" section."""
    blocks = re.findall(rf"```{language}\n(.*?)```", IDLE_WINDOWS_DOC, flags=re.S)
    assert len(blocks) == 1
    return str(blocks[0])


def test_pandas_example_of_the_docs_fills_the_gaps(replays: tuple[DeltaStore, DeltaStore]) -> None:
    sparse, dense = replays
    code = doc_example("python").replace('"out/sample"', repr(sparse.root))
    scope: dict[str, object] = {}
    exec(code, scope)  # the documented example, as a user runs it
    got = scope["dense"]
    assert isinstance(got, pd.DataFrame)
    pd.testing.assert_frame_equal(_sorted(got), _read(dense, "consumer_load"))
