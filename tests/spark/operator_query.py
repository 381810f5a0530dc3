"""Run one emulation operator in a small streaming query, as Spark's own ``transformWithState``
tests do: its input rows as Parquet files of a folder (the file source; one file per
micro-batch), ``groupBy`` its key, the processor, a ``foreachBatch`` sink collecting what it
yields; a checkpoint in a temporary folder carries its state from one micro-batch to the next."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.engine import stages
from pipelines.spark.emulation import ROCKSDB
from pipelines.spark.handover import WindowFiles
from pipelines.storage.staging import arrow_strings


class OperatorQuery:
    """An operator (``processor``, grouped by ``key``) over the rows of ``in_ddl`` fed under
    ``folder`` (``feed/``; ``checkpoint/`` beside it). :meth:`run` feeds one micro-batch."""

    def __init__(self, spark: Any, folder: Path, processor: Any, in_ddl: str,
                 key: list[str], out_ddl: str) -> None:
        self.spark, self.processor = spark, processor
        self.in_ddl, self.key, self.out_ddl = in_ddl, key, out_ddl
        self.feed, self.checkpoint = folder / "feed", folder / "checkpoint"
        self.feed.mkdir(parents=True)
        self.batches = 0

    def run(self, rows: pa.Table) -> pd.DataFrame:
        """Feed ``rows`` as the next micro-batch and run the query over it (``availableNow``);
        returns the rows the operator yielded, sorted."""
        pq.write_table(rows, self.feed / f"part-{self.batches:04d}.parquet")
        self.batches += 1
        collected: list[pd.DataFrame] = []
        self.spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        query = (self.spark.readStream.schema(self.in_ddl).option("maxFilesPerTrigger", 1)
                 .parquet(str(self.feed)).groupBy(*self.key)
                 .transformWithStateInPandas(self.processor, self.out_ddl, "Append", "None")
                 .writeStream.foreachBatch(lambda df, _: collected.append(df.toPandas()))
                 .option("checkpointLocation", str(self.checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        out = pd.concat(collected, ignore_index=True) if collected else pd.DataFrame()
        return out.sort_values(list(out.columns)).reset_index(drop=True) if len(out) else out


def read_kind(out_dir: str, kind: str) -> pd.DataFrame:
    """Every row an operator wrote of output ``kind`` under ``out_dir``
    (``pipelines.spark.handover.out_dir``)."""
    folder = Path(out_dir) / kind
    files = sorted(folder.glob("*.parquet")) if folder.is_dir() else []
    return (pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)
            if files else pd.DataFrame())


MESSAGE_TYPES = pa.schema([("topic", pa.string()), ("key", pa.string()),
                           ("producer_name", pa.string()), ("sequence_id", pa.int64()),
                           ("publish_time", pa.timestamp("us", tz="UTC")),
                           ("payload_size", pa.int64()), ("event_ms", pa.int64())])
"""The staged source columns (``pipelines.storage.staging.STAGING_SOURCE_COLUMNS``)."""


def keyless(messages: list[tuple[str, str, int]]) -> pa.Table:
    """Keyless messages ``(topic, producer, event ms)`` of 100 bytes, as staged (event ms =
    publish ms)."""
    ms = [m[2] for m in messages]
    return pa.table({"topic": [m[0] for m in messages], "key": pa.nulls(len(ms), pa.string()),
                     "producer_name": [m[1] for m in messages],
                     "sequence_id": pa.nulls(len(ms), pa.int64()),
                     "publish_time": pa.array([t * 1000 for t in ms],
                                              pa.timestamp("us", tz="UTC")),
                     "payload_size": [100] * len(ms), "event_ms": ms}, schema=MESSAGE_TYPES)


def hand_over_routed(emulation: str, run_id: str, settings: Any,
                     windows: list[tuple[int, int | None, bool, list[tuple[str, str, int]]]],
                     shards: int = 1) -> None:
    """What the control plane hands batching, window by window (``(version, hi_ms, final,
    messages)``, bin 0, window ``i`` of finalization ``version``): the messages routed
    (``pipelines.engine.stages.control_topics``), each shard's file and the layouts."""
    blobs: dict[str, bytes | None] = {}
    for i, (version, hi, final, messages) in enumerate(windows):
        rows = keyless(messages).to_pandas(types_mapper=arrow_strings)
        for c in ("hash32", "segment_hash", "hash_b"):
            rows[c] = pd.array([None] * len(rows), dtype="Int64")
        topics = sorted({m[0] for m in messages} | (set(blobs) if final else set()))
        routed, controllers = stages.control_topics(rows, {t: blobs.get(t) for t in topics},
                                                    settings, hi, final)
        blobs.update({t: pickle.dumps(c) for t, c in controllers.items()})
        files = WindowFiles(emulation, version, run_id, 0, i)
        if len(routed):
            files.write_routed(routed, shards)
        files.write_layouts({t: c.layout for t, c in controllers.items()
                             if c.layout is not None})


def hand_over_entries(emulation: str, run_id: str, settings: Any,
                      windows: list[tuple[int, int | None, bool, list[tuple[str, str, int]]]]
                      ) -> list[pd.DataFrame]:
    """What batching hands dispatch, window by window (as :func:`hand_over_routed`, one
    shard): the routed messages batched (``pipelines.engine.stages.batch_topics``), the
    entries written; returns each window's entries."""
    hand_over_routed(emulation, run_id, settings, windows)
    blobs: dict[str, bytes | None] = {}
    out = []
    for i, (version, hi, final, _) in enumerate(windows):
        files = WindowFiles(emulation, version, run_id, 0, i)
        routed = files.read_routed(0)
        topics = sorted(set(routed["topic"].astype(object)) | (set(blobs) if final else set()))
        layouts = files.read_layouts()
        _, entries, new = stages.batch_topics(routed, {t: blobs.get(t) for t in topics},
                                              settings.batching(),
                                              {t: layouts.get(t) for t in topics}, hi, final)
        blobs.update(new)
        frame = stages.entry_frame(None, entries, settings.speed)
        files.write_entries(0, frame)
        out.append(frame)
    return out
