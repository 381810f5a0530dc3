"""Bucketed batching as a grouped stateful operator, keyed by ``(run_id, topic, shard)``.

A producer shard (:func:`pipelines.spark.handover.producer_shard`) holds some of a topic's
producers; their (producer, segment) containers are independent of other producers' (reference
§7: a container is one producer's), so a hot topic's batching spreads over as many tasks as it
has shards. Per window in order, the operator reads the shard's routed messages and the layout
the control plane handed over, runs them through the containers
(:func:`pipelines.engine.stages.batch_topic`: all the shard's producers at once, as columns; seals
re-send open batches, flush tasks fire up to the window's end) and writes the ``messages`` and
``entries`` rows, plus the entries dispatch needs
(:data:`~pipelines.spark.handover.ENTRY_HANDOVER`).
State: the shard's :class:`~pipelines.engine.stages.BatchingState` (open batches, containers,
counters).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from pipelines.engine import stages
from pipelines.ingest.privacy import withheld_columns
from pipelines.spark import handover
from pipelines.spark.control import ROUTED_COLUMNS
from pipelines.storage.frames import FrameWriter
from pipelines.storage.staging import arrow_strings

BATCHING_OUT_DDL = ("run_id string, topic string, dispatcher int, window int, hi_ms long, "
                    "final boolean, version long, control_s double, batching_s double")
"""One row per (run, topic, dispatcher, window) from each shard: the shard's entries of the
window are handed over. Seconds travel on dispatcher 0's rows only. A run without
subscriptions has the one dispatcher ``-1`` (no dispatch; the row carries the seconds)."""


def dispatcher_count(settings: stages.StageSettings) -> int:
    """Dispatchers of a run (:func:`pipelines.engine.stages.new_dispatchers`: one per grouped
    subscription, one per consumer of an ungrouped one)."""
    return sum(1 if s.grouped else len(s.consumers) for s in settings.subscriptions)


class BatchingProcessor(StatefulProcessor):
    """``transformWithStateInPandas`` processor of batching (see the module); arguments as
    :class:`~pipelines.spark.control.ControlProcessor`'s."""

    def __init__(self, settings: Mapping[str, stages.StageSettings], emulation: str) -> None:
        self.settings = dict(settings)
        self.emulation = emulation

    def init(self, handle: Any) -> None:
        self.batching = handle.getValueState("batching", handover.STATE_DDL)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        run_id, topic, shard = str(key[0]), str(key[1]), int(key[2])
        tokens = pd.concat(list(rows), ignore_index=True).sort_values("window", kind="stable")
        settings = self.settings[run_id]
        bcfg = settings.batching()
        blob = handover.load_state(self.batching)
        dispatchers = list(range(dispatcher_count(settings))) or [-1]
        writers: dict[int, FrameWriter] = {}
        out: list[tuple[Any, ...]] = []
        for w in tokens.itertuples(index=False):
            t0 = time.perf_counter()
            version, window = int(w.version), int(w.window)
            hi = None if pd.isna(w.hi_ms) else int(w.hi_ms)
            folder = handover.window_dir(self.emulation, version, "routed", run_id, topic,
                                         window)
            routed = _read_routed(handover.shard_file(folder, shard))
            if blob is None and not len(routed):
                seconds = 0.0  # a shard no producer has used yet: nothing to carry
            else:
                messages, entries, blob = stages.batch_topic(
                    routed, blob, bcfg, handover.read_layout(folder), hi, bool(w.final))
                frame = stages.entry_frame(topic, entries, settings.speed)
                if version not in writers:
                    writers[version] = FrameWriter(
                        handover.out_dir(self.emulation, version, run_id),
                        withheld_columns(settings.config))
                writers[version].write(f"{topic}\x00{shard}", {"msg": messages, "entry": frame})
                if len(frame):
                    handover.write_frame(
                        handover.shard_file(handover.window_dir(self.emulation, version, "handover",
                                                         run_id, topic, window), shard),
                        pa.Table.from_pandas(frame[ENTRY_HANDOVER_COLUMNS], preserve_index=False,
                                             schema=handover.ENTRY_HANDOVER))
                seconds = time.perf_counter() - t0
            out += [(run_id, topic, d, window, hi, bool(w.final), version,
                     float(w.control_s) if d == dispatchers[0] else 0.0,
                     seconds if d == dispatchers[0] else 0.0) for d in dispatchers]
        for writer in writers.values():
            writer.close()
        if blob is not None:
            handover.save_state(self.batching, blob)
        yield pd.DataFrame(out, columns=["run_id", "topic", "dispatcher", "window", "hi_ms",
                                         "final", "version", "control_s", "batching_s"]
                           ).astype({"hi_ms": "Int64"})

    def close(self) -> None:
        pass


ENTRY_HANDOVER_COLUMNS = handover.ENTRY_HANDOVER.names


def _read_routed(path: str) -> pd.DataFrame:
    """A shard's routed messages of a window (strings as ``pd.ArrowDtype``, as the staged
    messages the stages take)."""
    table = handover.read_frame(path)
    if table is None:
        raise FileNotFoundError(f"routed messages missing: {path}")
    return table.select(ROUTED_COLUMNS).to_pandas(types_mapper=arrow_strings)
