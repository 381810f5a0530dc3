"""Dispatch as a grouped stateful operator, keyed by ``(run_id, bin, dispatcher)``.

A dispatcher (one subscription, or one consumer's cursor of an ungrouped checkpoint
subscription: :func:`pipelines.engine.stages.new_dispatchers`) sees every entry of its topic; a
key holds that dispatcher of every topic of its bin, each topic's state in a ``MapState`` entry
(:class:`pipelines.spark.handover.TopicStates`). Per window in order it reads the entries all
producer shards of the bin handed over (the batching stage of the same micro-batch has
finished: a shuffle lies between) and the window's layouts, and feeds each topic with entries
(every topic of the bin in the final window) to :func:`pipelines.engine.stages.dispatch_group`
(drains on seals, bucket handoffs, consumers; a topic skipped in a window catches up in its next
call). Its tables (``dispatch``, ``consumer_load``, ``bucket_handoffs``, ``subscription_stats``,
``segment_drains``) go to one file per kind. State: per topic the pickled dispatcher and the
last layout change it has seen.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from pipelines.engine import stages
from pipelines.ingest.privacy import withheld_columns
from pipelines.spark import handover
from pipelines.storage import fs as storage
from pipelines.storage.frames import FrameWriter
from pipelines.storage.staging import arrow_strings

DISPATCH_OUT_DDL = ("run_id string, bin int, dispatcher int, window int, version long, "
                    "control_s double, batching_s double, dispatch_s double")
"""One row per (run, bin, dispatcher, window) it got: the window is dispatched; the stages'
seconds (the driver's timings)."""


class DispatchProcessor(StatefulProcessor):
    """``transformWithStateInPandas`` processor of dispatch (see the module); arguments as
    :class:`~pipelines.spark.control.ControlProcessor`'s."""

    def __init__(self, settings: Mapping[str, stages.StageSettings], emulation: str) -> None:
        self.settings = dict(settings)
        self.emulation = emulation

    def init(self, handle: Any) -> None:
        self.dispatchers = handle.getMapState("dispatchers", handover.STATE_KEY_DDL,
                                              handover.STATE_DDL)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        run_id, b, d = str(key[0]), int(key[1]), int(key[2])
        tokens = pd.concat(list(rows), ignore_index=True)
        # one row per shard and window: the window's seconds summed, its bounds from any row
        windows = tokens.groupby("window", sort=True).agg(
            hi_ms=("hi_ms", "first"), final=("final", "first"), version=("version", "first"),
            control_s=("control_s", "sum"), batching_s=("batching_s", "sum"))
        states = handover.TopicStates(self.dispatchers)
        writers: dict[int, FrameWriter] = {}
        out: list[tuple[Any, ...]] = []
        for window, w in windows.iterrows():
            t0 = time.perf_counter()
            version = int(w["version"])
            if d >= 0:
                if version not in writers:
                    writers[version] = FrameWriter(
                        handover.out_dir(self.emulation, version, run_id),
                        withheld_columns(self.settings[run_id].config))
                self._window(run_id, b, d, int(window), w, states, writers[version])
            out.append((run_id, b, d, int(window), version, float(w["control_s"]),
                        float(w["batching_s"]), time.perf_counter() - t0))
        for writer in writers.values():
            writer.close()
        states.save()
        yield pd.DataFrame(out, columns=["run_id", "bin", "dispatcher", "window", "version",
                                         "control_s", "batching_s", "dispatch_s"])

    def _window(self, run_id: str, b: int, d: int, window: int, w: Any,
                states: handover.TopicStates, writer: FrameWriter) -> None:
        """One window of the key: each topic with entries (every topic with a layout in the
        final window) through its dispatcher, the rows written."""
        settings = self.settings[run_id]
        version, final = int(w["version"]), bool(w["final"])
        hi = None if pd.isna(w["hi_ms"]) else int(w["hi_ms"])
        entries = _read_entries(handover.window_dir(self.emulation, version, "handover",
                                                    run_id, b, window))
        if not len(entries) and not final:
            return
        layouts = handover.read_layouts(handover.window_dir(
            self.emulation, version, "routed", run_id, b, window))
        active = set(pd.unique(entries["topic"].to_numpy(object))) if len(entries) else set()
        topics = [t for t in sorted(active | (set(layouts) if final else set()))
                  if t in layouts]
        blobs = {}
        for topic in topics:
            blob = states.get(topic)
            if blob is None:  # this dispatcher alone, as dispatch_group carries a topic's
                blob = pickle.dumps(([stages.new_dispatchers(settings)[d]], -1))
            blobs[topic] = blob
        frames, blobs = stages.dispatch_topics(entries[entries["topic"].isin(topics)]
                                               if len(topics) < len(active) else entries,
                                               blobs, settings,
                                               {t: layouts[t] for t in topics}, hi, final)
        for topic, blob in blobs.items():
            states.put(topic, blob)
        writer.write(f"bin-{b}\x00{d}", frames)

    def close(self) -> None:
        pass


def _read_entries(folder: str) -> pd.DataFrame:
    """Every shard's handed-over entries of a window (:data:`handover.ENTRY_HANDOVER`), in
    shard order; no rows when no shard sent any."""
    tables = [t for n in storage.list_files(folder, handover.HANDOVER_SUFFIX)
              if not n.startswith((".", "_"))
              and (t := handover.read_frame(storage.join(folder, n))) is not None]
    table = pa.concat_tables(tables) if tables else handover.ENTRY_HANDOVER.empty_table()
    return table.to_pandas(types_mapper=arrow_strings)
