"""The emulation query: control plane → batching → dispatch as chained grouped stateful
operators (``transformWithStateInPandas``, RocksDB state store) over a feed of event-time
windows (docs/architecture.md, "Emulation query").

The driver finalizes windows by appending ONE feed file per finalization (``version``: the
commit version of its tables) and running the query with ``availableNow`` (one micro-batch per
feed file). Each operator reads what the previous one handed over (files under the emulation
folder, :mod:`pipelines.spark.handover`) and keeps its state in the state store, checkpointed
with the query: no operator state passes through the driver. The sink writes a receipt (row
counts of the big tables, the stages' seconds) before the driver commits the micro-batch's
files, so a restart after any commit finds the counts without the files.

The operators are keyed by topic bins (:func:`pipelines.storage.staging.topic_bin`; ``bins``, a
run constant), never by topic: the feed has a row per (run, bin, window), and each operator
touches a topic only in the windows with its messages and in the final one. Each groups by its
keys' slots (:mod:`pipelines.spark.placement`): every row names the next operator's key's slot,
so the keys spread over the partitions in order, not where the hash puts them.

Exactly-once: a micro-batch re-run after a crash starts from the state of the one before,
rewrites the same files (names depend only on run, bin, shard or dispatcher and window) and
the driver's commits are idempotent by version.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.engine import stages
from pipelines.spark import handover
from pipelines.spark.batching import BATCHING_OUT_DDL, BatchingProcessor
from pipelines.spark.control import CONTROL_OUT_DDL, FEED_DDL, ControlProcessor
from pipelines.spark.dispatch import DISPATCH_OUT_DDL, DispatchProcessor
from pipelines.spark.placement import Slots
from pipelines.storage import fs as storage
from pipelines.storage.commits import version_name
from pipelines.storage.faults import fault

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
"""The state store provider of the emulation's operators (``transformWithStateInPandas``
requires it)."""

FEED_SCHEMA = pa.schema([("slot", pa.int64()), ("run_id", pa.string()), ("bin", pa.int32()),
                         ("window", pa.int32()), ("lo_ms", pa.int64()), ("hi_ms", pa.int64()),
                         ("final", pa.bool_()), ("snapshot", pa.bool_()),
                         ("version", pa.int64())])
"""The feed files' schema (:data:`pipelines.spark.control.FEED_DDL`)."""

COUNTED_KINDS = {"entries": "entry", "dispatched": "dispatch"}
"""Run counts taken from the output files: count name → kind."""


@dataclass(frozen=True)
class Receipt:
    """What one finalization produced: per run, the counts of :data:`COUNTED_KINDS`; the
    stages' task seconds (``control_plane``, ``batching``, ``dispatch``)."""

    counts: Mapping[str, Mapping[str, int]]
    seconds: Mapping[str, float]


BINS_PER_PARTITION = 4
"""Default topic bins per state partition (:func:`default_bins`)."""


def default_bins(spark: Any) -> int:
    """Topic bins when ``replay.topic_bins`` is not set: :data:`BINS_PER_PARTITION` times
    :func:`state_partitions` (four bins on each partition, :mod:`pipelines.spark.placement`:
    topics hash to bins unevenly, and a partition's bins even that out; each key costs a few
    ms a micro-batch, whatever its topics). With 4 partitions on 2 cores, 1 M messages over
    10,000 topics: control plane 6.3 s with 16 bins, 8.3 s with 8 (bench_targets)."""
    return BINS_PER_PARTITION * state_partitions(spark)


def state_partitions(spark: Any) -> int:
    """The partitions a new emulation query's state gets: ``spark.sql.shuffle.partitions`` (its
    checkpoint keeps them: a run constant, in its manifest)."""
    return max(1, int(spark.conf.get("spark.sql.shuffle.partitions")))


def emulation_dir(work_dir: str) -> str:
    """The emulation query's folder under a replay's work folder."""
    return storage.join(work_dir, "emulation")


def write_feed(emulation: str, version: int, windows: Sequence[stages.StageWindow],
               slots: Slots, topics: int, snapshot: bool) -> bool:
    """Append finalization ``version``'s feed file (a row per run, topic bin and window of
    ``slots``, with the control plane's key's slot) unless it exists (a restart re-feeds
    nothing the query has seen). ``topics``: how many topics have staged messages. Returns
    whether there is anything to finalize (some topic)."""
    if not topics:
        return False
    path = storage.join(emulation, "feed", f"v-{version:020d}.parquet")
    if storage.is_file(path):
        return True
    rows = [(slots.control(r, b), r, b, i, w.lo_ms, w.hi_ms, w.final, snapshot, version)
            for r in slots.runs for b in range(slots.bins) for i, w in enumerate(windows)]
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(
        [dict(zip(FEED_SCHEMA.names, r, strict=True)) for r in rows], schema=FEED_SCHEMA), sink)
    storage.write_bytes(path, sink.getvalue().to_pybytes())
    return True


def receipt_path(emulation: str, version: int) -> str:
    return storage.join(emulation, "receipts", f"{version:020d}.json")


def read_receipt(emulation: str, version: int) -> Receipt:
    """The receipt of finalization ``version`` (``FileNotFoundError`` when its micro-batch has
    not completed)."""
    doc = json.loads(storage.read_bytes(receipt_path(emulation, version)).decode("utf-8"))
    return Receipt(doc["counts"], doc["seconds"])


class ReceiptSink:
    """``foreachBatch`` sink of the emulation query: the micro-batch's rows (a few per bin and
    window) give the seconds; the output files give the counts; both go to the receipt of each
    version in the batch. Picklable (paths only): Spark Connect runs it on the server."""

    def __init__(self, emulation: str, runs: Sequence[str]) -> None:
        self.emulation = emulation
        self.runs = list(runs)

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.toPandas()
        for version, part in rows.groupby("version"):
            counts = {r: {name: storage.count_rows(storage.join(
                handover.out_dir(self.emulation, int(version), r), kind))
                if storage.is_dir(storage.join(handover.out_dir(self.emulation, int(version), r),
                                               kind)) else 0
                for name, kind in COUNTED_KINDS.items()} for r in self.runs}
            point = version_name(int(version))
            fault(f"before_receipt:{point}")
            seconds = {"control_plane": float(part["control_s"].sum()),
                       "batching": float(part["batching_s"].sum()),
                       "dispatch": float(part["dispatch_s"].sum())}
            storage.write_bytes(receipt_path(self.emulation, int(version)),
                                json.dumps({"counts": counts, "seconds": seconds}).encode())
            fault(f"after_receipt:{point}")


def run_emulation(spark: Any, emulation: str, staging: str,
                  settings: Mapping[str, stages.StageSettings], slots: Slots) -> None:
    """Run the emulation query over every feed file not yet processed (``availableNow``: one
    micro-batch per file) and wait for its end; a failure is raised.

    ``settings``: run_id → its :class:`~pipelines.engine.stages.StageSettings` (a sweep's
    scenarios); ``slots``: the operators' keys' :class:`~pipelines.spark.placement.Slots`
    (run constants: the state store's keys depend on them)."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                   "true")
    query = (spark.readStream.schema(FEED_DDL).option("maxFilesPerTrigger", 1)
             .parquet(storage.join(emulation, "feed"))
             .groupBy("slot")
             .transformWithStateInPandas(
                 ControlProcessor(settings, staging, emulation, slots),
                 CONTROL_OUT_DDL, "Append", "None")
             .groupBy("slot")
             .transformWithStateInPandas(BatchingProcessor(settings, emulation, slots),
                                         BATCHING_OUT_DDL, "Append", "None")
             .groupBy("slot")
             .transformWithStateInPandas(DispatchProcessor(settings, emulation),
                                         DISPATCH_OUT_DDL, "Append", "None")
             .writeStream.foreachBatch(ReceiptSink(emulation, list(settings)))
             .option("checkpointLocation", storage.join(emulation, "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()


def remove_versions(emulation: str, version: int) -> None:
    """Remove the handed-over and output files of every finalization up to ``version`` (called
    once its tables are committed; an earlier one re-run by Spark after a crash left its files
    again)."""
    fs, path = storage.arrow_filesystem(emulation)
    for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)):
        name = info.base_name
        if info.type == pafs.FileType.Directory and name.startswith("v=") and \
                int(name[2:]) <= version:
            fs.delete_dir(info.path)
