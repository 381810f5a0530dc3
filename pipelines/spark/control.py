"""The control plane as a grouped stateful operator, keyed by ``(run_id, topic)``.

Per key and micro-batch it takes the feed's window rows (:data:`FEED_DDL`), and for each window
in order reads the topic's staged messages of the window, routes them and advances the
controller (:func:`pipelines.engine.stages.control_group`: load reporter, autoscale policy, layout
DAG), then hands the routed messages to the batching operator split by producer shard
(:func:`pipelines.spark.handover.producer_shard`), with the layout after the window. Its own
tables (``segment_load``, ``autoscale_decisions``, ``segments``) go to files the driver commits.
State: the pickled ``TopicController`` (:mod:`pipelines.spark.handover` format).
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
from pipelines.storage.staging import STAGE_INPUT_COLUMNS, read_topic, staged_dataset

FEED_DDL = ("run_id string, topic string, window int, lo_ms long, hi_ms long, final boolean, "
            "snapshot boolean, version long")
"""One row per (run, topic, window) of a finalization: the staged messages with
``lo_ms <= event_ms < hi_ms`` (null = unbounded), ``final`` = end of input, ``snapshot`` = write
the ``segments`` snapshot after it, ``version`` = the finalization's commit version."""

CONTROL_OUT_DDL = ("run_id string, topic string, shard int, window int, hi_ms long, "
                   "final boolean, version long, control_s double")
"""One row per (run, topic, producer shard, window): the shard's routed messages are ready.
``control_s``: the control plane's seconds for the window (on shard 0's row only)."""

ROUTED_COLUMNS = [*STAGE_INPUT_COLUMNS, "segment_id", "bucket_index", "layout_epoch"]
"""Columns of the routed messages handed to batching (replay order)."""


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
        self.controller = handle.getValueState("controller", handover.STATE_DDL)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        run_id, topic = str(key[0]), str(key[1])
        feed = pd.concat(list(rows), ignore_index=True).sort_values("window", kind="stable")
        settings = self.settings[run_id]
        blob = handover.load_state(self.controller)
        dataset = staged_dataset(self.staging)
        out: list[tuple[Any, ...]] = []
        writers: dict[int, FrameWriter] = {}
        for w in feed.itertuples(index=False):
            t0 = time.perf_counter()
            version = int(w.version)
            lo, hi = _bound(w.lo_ms), _bound(w.hi_ms)
            if version not in writers:
                writers[version] = FrameWriter(
                    handover.out_dir(self.emulation, version, run_id),
                    withheld_columns(settings.config))
            pdf = read_topic(dataset, topic, lo, hi)
            routed, ctl = stages.control_group(topic, pdf, blob, settings, hi, bool(w.final))
            result = stages.control_outputs({topic: ctl}, settings.speed)
            blob = result.states[topic]
            folder = handover.window_dir(self.emulation, version, "routed", run_id, topic,
                                         int(w.window))
            self._hand_over(routed, folder)
            handover.write_layout(folder, ctl.layout)
            frames = {"sample": result.samples, "decision": result.decisions}
            if bool(w.final) or bool(w.snapshot):
                frames["segment"] = result.segments
            frames["key_profile"] = result.key_profiles  # at end of input only
            writers[version].write(topic, frames)
            seconds = time.perf_counter() - t0
            out += [(run_id, topic, s, int(w.window), hi, bool(w.final), version,
                     seconds if s == 0 else 0.0) for s in range(self.shards)]
        for writer in writers.values():
            writer.close()
        if blob is not None:
            handover.save_state(self.controller, blob)
        yield pd.DataFrame(out, columns=["run_id", "topic", "shard", "window", "hi_ms", "final",
                                         "version", "control_s"]).astype({"hi_ms": "Int64"})

    def _hand_over(self, routed: pd.DataFrame, folder: str) -> None:
        """Write each producer shard's routed messages (every shard gets a file, maybe empty:
        batching reads one per window)."""
        table = pa.Table.from_pandas(routed[ROUTED_COLUMNS], preserve_index=False)
        shard = handover.producer_shard(routed["producer_name"], self.shards)
        for s, part in enumerate(handover.split_by_shard(table, shard, self.shards)):
            handover.write_frame(handover.shard_file(folder, s), part)

    def close(self) -> None:
        pass


def _bound(value: Any) -> int | None:
    """A nullable ms bound of a feed row as an int (``None`` = unbounded)."""
    return None if value is None or pd.isna(value) else int(value)
