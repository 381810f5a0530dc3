"""The control plane as a grouped stateful operator, keyed by ``(run_id, bin)``: a topic bin
(:func:`pipelines.storage.staging.topic_bin`) holds many topics, each with its controller in a
``MapState`` entry (:class:`pipelines.spark.handover.TopicStates`).

Per key and micro-batch it takes the feed's window rows (:data:`FEED_DDL`), and for each window
in order reads the bin's staged messages of the window and, for each topic with messages in it
(every topic of the bin in the final window, and in a window that writes the ``segments``
snapshot), routes them and advances the controller (:func:`pipelines.engine.stages.control_group`:
load reporter, autoscale policy, layout DAG); a topic without messages is not touched (the
core is chunking-invariant: its next call catches up its ticks). The routed messages of all
the bin's topics go to the batching operator as one file per producer shard
(:func:`pipelines.spark.handover.producer_shard`), with the advanced topics' layouts. Its own
tables (``segment_load``, ``autoscale_decisions``, ``segments``) go to one file per kind.
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
from pipelines.storage.frames import FrameWriter
from pipelines.storage.staging import STAGE_INPUT_COLUMNS, read_bin, staged_dataset

FEED_DDL = ("run_id string, bin int, window int, lo_ms long, hi_ms long, final boolean, "
            "snapshot boolean, version long")
"""One row per (run, topic bin, window) of a finalization: the staged messages with
``lo_ms <= event_ms < hi_ms`` (null = unbounded), ``final`` = end of input, ``snapshot`` = write
the ``segments`` snapshot after it, ``version`` = the finalization's commit version."""

CONTROL_OUT_DDL = ("run_id string, bin int, shard int, window int, hi_ms long, "
                   "final boolean, version long, control_s double")
"""One row per (run, bin, producer shard, window) where the shard has routed messages (every
shard in the final window; shard 0 always): the shard's routed messages are ready.
``control_s``: the control plane's seconds for the window (on shard 0's row only)."""

ROUTED_COLUMNS = [*STAGE_INPUT_COLUMNS, "segment_id", "bucket_index", "layout_epoch"]
"""Columns of the routed messages handed to batching (replay order within each topic)."""


class ControlProcessor(StatefulProcessor):
    """``transformWithStateInPandas`` processor of the control plane (see the module).

    ``settings``: run_id → :class:`~pipelines.engine.stages.StageSettings`; ``staging``: the
    replay's staging folder; ``emulation``: the emulation folder (:mod:`pipelines.spark.handover`);
    ``shards``: producer shards per topic (``replay.producer_shards``)."""

    def __init__(self, settings: Mapping[str, stages.StageSettings], staging: str,
                 emulation: str, shards: int) -> None:
        self.settings = dict(settings)
        self.staging = staging
        self.emulation = emulation
        self.shards = shards

    def init(self, handle: Any) -> None:
        self.controllers = handle.getMapState("controllers", handover.STATE_KEY_DDL,
                                              handover.STATE_DDL)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        run_id, b = str(key[0]), int(key[1])
        feed = pd.concat(list(rows), ignore_index=True).sort_values("window", kind="stable")
        states = handover.TopicStates(self.controllers)
        dataset = staged_dataset(self.staging)
        out: list[tuple[Any, ...]] = []
        writers: dict[int, FrameWriter] = {}
        for w in feed.itertuples(index=False):
            t0 = time.perf_counter()
            version, window, final = int(w.version), int(w.window), bool(w.final)
            hi = _bound(w.hi_ms)
            if version not in writers:
                writers[version] = FrameWriter(
                    handover.out_dir(self.emulation, version, run_id),
                    withheld_columns(self.settings[run_id].config))
            pdf = read_bin(dataset, b, _bound(w.lo_ms), hi)
            shards = self._window(run_id, b, window, states, pdf, w, writers[version])
            seconds = time.perf_counter() - t0
            out += [(run_id, b, s, window, hi, final, version, seconds if s == 0 else 0.0)
                    for s in (range(self.shards) if final else sorted({0, *shards}))]
        for writer in writers.values():
            writer.close()
        states.save()
        yield pd.DataFrame(out, columns=["run_id", "bin", "shard", "window", "hi_ms", "final",
                                         "version", "control_s"]).astype({"hi_ms": "Int64"})

    def _window(self, run_id: str, b: int, window: int, states: handover.TopicStates,
                pdf: pd.DataFrame, w: Any, writer: FrameWriter) -> set[int]:
        """One window of the bin: its active topics advanced, their routed messages and layouts
        handed over, their rows written. Returns the shards that got routed messages."""
        settings = self.settings[run_id]
        final, hi = bool(w.final), _bound(w.hi_ms)
        active = set(pd.unique(pdf["topic"].to_numpy(object))) if len(pdf) else set()
        topics = sorted(active | (set(states.all_topics()) if final or bool(w.snapshot)
                                  else set()))
        if not topics:
            return set()
        routed, controllers = stages.control_topics(pdf, {t: states.get(t) for t in topics},
                                                    settings, hi, final)
        result = stages.control_outputs(controllers, settings.speed)
        for topic, blob in result.states.items():
            states.put(topic, blob)
        folder = handover.window_dir(self.emulation, int(w.version), "routed", run_id, b,
                                     window)
        shards = self._hand_over(routed, folder) if len(routed) else set()
        handover.write_layouts(folder, result.layouts)
        frames = {"sample": result.samples, "decision": result.decisions}
        if final or bool(w.snapshot):
            frames["segment"] = result.segments
        frames["key_profile"] = result.key_profiles  # at end of input only
        writer.write(f"bin-{b}", frames)
        return shards

    def _hand_over(self, routed: pd.DataFrame, folder: str) -> set[int]:
        """Write each producer shard's routed messages of the window (a file per shard with
        messages); returns those shards."""
        table = pa.Table.from_pandas(routed[ROUTED_COLUMNS], preserve_index=False)
        shard = handover.producer_shard(routed["producer_name"], self.shards)
        written = set()
        for s, part in enumerate(handover.split_by_shard(table, shard, self.shards)):
            if part.num_rows:
                handover.write_frame(handover.shard_file(folder, s), part)
                written.add(s)
        return written

    def close(self) -> None:
        pass


def _bound(value: Any) -> int | None:
    """A nullable ms bound of a feed row as an int (``None`` = unbounded)."""
    return None if value is None or pd.isna(value) else int(value)
