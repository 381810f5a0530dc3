"""Bucketed batching as a grouped stateful operator, keyed by ``(run_id, bin, shard)``.

A producer shard (:func:`pipelines.spark.handover.producer_shard`) holds some of a topic's
producers; their (producer, segment) containers are independent of other producers' (reference
§7: a container is one producer's), so a hot topic's batching spreads over as many tasks as it
has shards; a topic bin (:func:`pipelines.storage.staging.topic_bin`) groups topics, so a key
holds a shard of each of its topics, each topic's state in a ``MapState`` entry
(:class:`pipelines.spark.handover.TopicStates`). Per window in order, the operator reads the
shard's routed messages of the bin and the layouts the control plane handed over, and runs each
topic with messages in it (every topic it holds in the final window) through its containers
(:func:`pipelines.engine.stages.batch_topic`: all the shard's producers of the topic at once, as
columns; seals re-send open batches, flush tasks fire up to the window's end; a topic skipped in
a window catches up in its next call) and writes the ``messages`` and ``entries`` rows, plus the
entries dispatch needs (:data:`~pipelines.spark.handover.ENTRY_HANDOVER`), one file each.
State: per topic the shard's :class:`~pipelines.engine.stages.BatchingState` (open batches,
containers, counters).
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

BATCHING_OUT_DDL = ("run_id string, bin int, dispatcher int, window int, hi_ms long, "
                    "final boolean, version long, control_s double, batching_s double")
"""One row per (run, bin, dispatcher, window) from each shard that handed entries over (every
shard in the final window; dispatcher 0's row always): the shard's entries of the window are
handed over. Seconds travel on dispatcher 0's rows only. A run without subscriptions has the
one dispatcher ``-1`` (no dispatch; the row carries the seconds)."""


def dispatcher_count(settings: stages.StageSettings) -> int:
    """Dispatchers of a run (:func:`pipelines.engine.stages.new_dispatchers`: one per grouped
    subscription, one per consumer of an ungrouped one)."""
    return sum(1 if s.grouped else len(s.consumers) for s in settings.subscriptions)


ROUTED_SCHEMA = pa.schema([
    ("topic", pa.string()), ("key", pa.string()), ("producer_name", pa.string()),
    ("sequence_id", pa.int64()), ("publish_time", pa.timestamp("us", tz="UTC")),
    ("payload_size", pa.int64()), ("event_ms", pa.int64()), ("hash32", pa.int64()),
    ("segment_hash", pa.int32()), ("hash_b", pa.int32()), ("segment_id", pa.int64()),
    ("bucket_index", pa.int32()), ("layout_epoch", pa.int64())])
"""The routed columns' types (:data:`pipelines.spark.control.ROUTED_COLUMNS`): a topic of the
shard without messages in the final window runs on no rows of these."""


class BatchingProcessor(StatefulProcessor):
    """``transformWithStateInPandas`` processor of batching (see the module); arguments as
    :class:`~pipelines.spark.control.ControlProcessor`'s."""

    def __init__(self, settings: Mapping[str, stages.StageSettings], emulation: str) -> None:
        self.settings = dict(settings)
        self.emulation = emulation

    def init(self, handle: Any) -> None:
        self.batching = handle.getMapState("batching", handover.STATE_KEY_DDL,
                                           handover.STATE_DDL)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        run_id, b, shard = str(key[0]), int(key[1]), int(key[2])
        tokens = pd.concat(list(rows), ignore_index=True).sort_values("window", kind="stable")
        settings = self.settings[run_id]
        states = handover.TopicStates(self.batching)
        dispatchers = list(range(dispatcher_count(settings))) or [-1]
        writers: dict[int, FrameWriter] = {}
        out: list[tuple[Any, ...]] = []
        for w in tokens.itertuples(index=False):
            t0 = time.perf_counter()
            version, window, final = int(w.version), int(w.window), bool(w.final)
            if version not in writers:
                writers[version] = FrameWriter(
                    handover.out_dir(self.emulation, version, run_id),
                    withheld_columns(settings.config))
            handed = self._window(run_id, b, shard, states, w, writers[version])
            seconds = time.perf_counter() - t0
            out += [(run_id, b, d, window, _bound(w.hi_ms), final, version,
                     float(w.control_s) if d == dispatchers[0] else 0.0,
                     seconds if d == dispatchers[0] else 0.0)
                    for d in (dispatchers if handed or final else dispatchers[:1])]
        for writer in writers.values():
            writer.close()
        states.save()
        yield pd.DataFrame(out, columns=["run_id", "bin", "dispatcher", "window", "hi_ms",
                                         "final", "version", "control_s", "batching_s"]
                           ).astype({"hi_ms": "Int64"})

    def _window(self, run_id: str, b: int, shard: int, states: handover.TopicStates, w: Any,
                writer: FrameWriter) -> bool:
        """One window of the shard: each active topic through its containers, the rows written,
        the entries handed over. Returns whether entries were handed over."""
        settings = self.settings[run_id]
        version, window, final = int(w.version), int(w.window), bool(w.final)
        hi = _bound(w.hi_ms)
        folder = handover.window_dir(self.emulation, version, "routed", run_id, b, window)
        routed = _read_routed(handover.shard_file(folder, shard))
        active = set(pd.unique(routed["topic"].to_numpy(object))) if len(routed) else set()
        topics = sorted(active | (set(states.all_topics()) if final else set()))
        if not topics:
            return False
        layouts = handover.read_layouts(folder)
        msg, entries, blobs = stages.batch_topics(
            routed, {t: states.get(t) for t in topics}, settings.batching(),
            {t: layouts.get(t) for t in topics}, hi, final)
        for topic, blob in blobs.items():
            states.put(topic, blob)
        frame = stages.entry_frame(None, entries, settings.speed)
        writer.write(f"bin-{b}\x00{shard}",
                     {"msg": msg, "entry": frame})
        if not len(frame):
            return False
        handover.write_frame(
            handover.shard_file(handover.window_dir(self.emulation, version, "handover", run_id,
                                                    b, window), shard),
            pa.Table.from_pandas(frame[ENTRY_HANDOVER_COLUMNS], preserve_index=False,
                                 schema=handover.ENTRY_HANDOVER))
        return True

    def close(self) -> None:
        pass


ENTRY_HANDOVER_COLUMNS = handover.ENTRY_HANDOVER.names


def _bound(value: Any) -> int | None:
    """A nullable ms bound of a row as an int (``None`` = unbounded)."""
    return None if value is None or pd.isna(value) else int(value)


def _read_routed(path: str) -> pd.DataFrame:
    """A shard's routed messages of a window (strings as ``pd.ArrowDtype``, as the staged
    messages the stages take); no rows (of :data:`ROUTED_SCHEMA`) when the shard got none."""
    table = handover.read_frame(path)
    if table is None:
        table = ROUTED_SCHEMA.empty_table()
    return table.select(ROUTED_COLUMNS).to_pandas(types_mapper=arrow_strings)
