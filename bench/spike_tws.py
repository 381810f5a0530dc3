"""Spike (issue #16, not product code): what ``transformWithStateInPandas`` costs here.

Run from the project root::

    .venv/bin/python bench/spike_tws.py [--rows 1000000] [--keys 50,10000,100000]
                                        [--files 4] [--partitions 2] [--data bench/.data/spike]

A stand-in for the planned batching operator: a streaming query over a Parquet file source
(``maxFilesPerTrigger=1``, ``trigger(availableNow=True)``) of ``rows`` messages (``key``,
``event_time`` ms, ``size`` bytes; ``files`` files in event-time order), grouped by ``key`` into
``transformWithStateInPandas`` with the RocksDB state store provider (changelog checkpointing
on), ``TimeMode.EventTime`` (watermark 0 s on ``event_time``). Per key it keeps one
``ValueState``: the open batch as a small columnar record (count, bytes, first/last ms and an
Arrow IPC blob of the open batch's (event ms, size) rows). A batch closes at
:data:`MAX_MESSAGES` messages or :data:`DELAY_MS` after its first message: inside a
micro-batch the processor finds the closes itself (vectorised); a batch still open at the end
of a micro-batch gets an event-time timer at first + delay, fired by Spark once the watermark
passes it (``handleExpiredTimer`` emits the entry). Output: one row per entry, to a Parquet
file sink (exactly-once with its own log).

Measurements, each printed and written to ``bench/results/<date>-spike-tws.json``:

1. fixed cost per micro-batch: 20 files of 200 rows, 50 keys; median ``triggerExecution``;
2. cost per key: the same ``rows`` over 50 / 10k / 100k keys, ``files`` micro-batches: wall,
   sum of batch durations, state rows and memory, the state store's commit time;
3. restart: a second query on the finished checkpoint with one more file (1 row per key):
   wall from ``start()`` to its end, per key count;
4. kill -9 between micro-batches: a child process runs the query (100k keys), is killed
   (SIGKILL to its process group) as soon as micro-batch 1 is committed, and is restarted; the
   entries must equal an uninterrupted run's, row for row;
5. end-of-input flush: (a) ``none``: open batches stay in the state store (messages missing);
   (b) ``watermark``: a last file with one row far in the future (key ``__flush__``, ignored by
   the processor) moves the watermark past every timer, and the no-data micro-batch that
   ``availableNow`` runs after it fires them all; (c) ``sentinel``: a last file with one
   ``size = -1`` row per key, on which the processor closes the key's open batch;
6. chaining (``--only chain``): a TWS operator's output unioned with the source feeds a second
   TWS operator in the same query (the control plane → batching hand-over of the design).

On a busy 2-core machine the defaults take hours (100,000 keys cost minutes a micro-batch):
``--rows 300000 --files 3`` and ``--only`` keep a run short.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor
from pyspark.sql.types import StructType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.spark.session import build_session  # noqa: E402 - on sys.path from above

MAX_MESSAGES = 100
DELAY_MS = 100
T0_MS = 1_736_899_200_000  # 2025-01-15T00:00:00Z
FLUSH_KEY = "__flush__"
FAR_FUTURE_MS = T0_MS + 10 * 365 * 86_400_000
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
OUTPUT_DDL = ("key string, n long, bytes long, first_ms long, last_ms long, reason string")
STATE_DDL = "count long, bytes long, first_ms long, last_ms long, rows binary"


# ----------------------------------------------------------------------------- input


def write_input(folder: Path, rows: int, keys: int, files: int, flush: str = "none",
                seed: int = 7) -> dict[str, Any]:
    """``rows`` messages over ``keys`` keys in ``files`` Parquet files (file ``i`` holds event
    times ``[i, i + 1)`` minutes after :data:`T0_MS`), plus a last flush file for ``flush`` =
    ``watermark`` (one far-future ``__flush__`` row) or ``sentinel`` (one ``size = -1`` row per
    key at the end of input)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    per = np.full(files, rows // files)
    per[: rows % files] += 1
    for i, n in enumerate(per):
        t = np.sort(rng.integers(0, 60_000, int(n))) + T0_MS + i * 60_000
        k = rng.integers(0, keys, int(n))
        _write(folder / f"part-{i:05d}.parquet", [f"k-{j}" for j in k], t,
               rng.integers(100, 2000, int(n)))
    end = T0_MS + files * 60_000
    if flush == "watermark":
        _write(folder / f"part-{files:05d}.parquet", [FLUSH_KEY], np.array([FAR_FUTURE_MS]),
               np.array([0]))
    elif flush == "sentinel":
        _write(folder / f"part-{files:05d}.parquet", [f"k-{j}" for j in range(keys)],
               np.full(keys, end), np.full(keys, -1))
    return {"rows": rows, "keys": keys, "files": files, "flush": flush}


def _write(path: Path, key: list[str], t_ms: np.ndarray, size: np.ndarray) -> None:
    pq.write_table(pa.table({
        "key": pa.array(key, pa.string()),
        "event_time": pa.array(t_ms.astype("int64") * 1000, pa.timestamp("us", tz="UTC")),
        "size": pa.array(size.astype("int64"))}), path)


# ----------------------------------------------------------------------------- processor


def _closed_batches(k: Any, t: np.ndarray, s: np.ndarray,
                    flush: bool) -> tuple[list[tuple[Any, ...]], int]:
    """The batches of key ``k`` closed among its messages (times ``t`` ms ascending, sizes
    ``s``): rows (key, n, bytes, first_ms, last_ms, reason), and the first message of the batch
    left open (``len(t)`` when none; ``flush`` closes the last one)."""
    out = []
    i = 0
    cs = np.concatenate([[0], np.cumsum(s)])
    while i < len(t):
        by_time = int(np.searchsorted(t, t[i] + DELAY_MS, side="left"))
        j = min(i + MAX_MESSAGES, by_time)
        full = j - i == MAX_MESSAGES
        if j == len(t) and not full and not flush:
            break  # still open: its deadline is after the last message seen
        out.append((k, j - i, int(cs[j] - cs[i]), int(t[i]), int(t[j - 1]),
                    "max_messages" if full else ("flush" if j == len(t) and by_time
                                                 == len(t) and flush else "delay")))
        i = j
    return out, i


def _processor_class() -> Any:  # noqa: C901 - one class, shipped to workers by value

    class OpenBatchProcessor(StatefulProcessor):
        """Per key: close batches at MAX_MESSAGES or first + DELAY_MS; the open batch in a
        ValueState, an event-time timer at its deadline."""

        def init(self, handle: Any) -> None:
            self.handle = handle
            self.open = handle.getValueState("open", STATE_DDL)

        def _load(self) -> tuple[np.ndarray, np.ndarray]:
            if not self.open.exists():
                return np.empty(0, np.int64), np.empty(0, np.int64)
            blob = self.open.get()[4]
            tab = pa.ipc.open_stream(io.BytesIO(blob)).read_all()
            return (tab.column("t").to_numpy().astype(np.int64),
                    tab.column("s").to_numpy().astype(np.int64))

        def _save(self, t: np.ndarray, s: np.ndarray) -> None:
            for old in self.handle.listTimers():
                self.handle.deleteTimer(old)
            if len(t) == 0:
                self.open.clear()
                return
            sink = io.BytesIO()
            tab = pa.table({"t": t, "s": s})
            with pa.ipc.new_stream(sink, tab.schema) as w:
                w.write_table(tab)
            self.open.update((len(t), int(s.sum()), int(t[0]), int(t[-1]), sink.getvalue()))
            self.handle.registerTimer(int(t[0]) + DELAY_MS)

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                            timerValues: Any) -> Iterator[pd.DataFrame]:
            k = key[0]
            if k == FLUSH_KEY:
                for _ in rows:
                    pass
                return
            frames = list(rows)
            df = pd.concat(frames) if len(frames) > 1 else frames[0]
            t_new = (df["event_time"].astype("int64") // 1_000_000).to_numpy()
            s_new = df["size"].to_numpy().astype(np.int64)
            flush = bool((s_new < 0).any())
            keep = s_new >= 0
            t_old, s_old = self._load()
            t = np.concatenate([t_old, t_new[keep]])
            s = np.concatenate([s_old, s_new[keep]])
            order = np.argsort(t, kind="stable")
            t, s = t[order], s[order]
            out, i = _closed_batches(k, t, s, flush)
            self._save(t[i:], s[i:])
            if out:
                yield pd.DataFrame(out, columns=["key", "n", "bytes", "first_ms", "last_ms",
                                                 "reason"])

        def handleExpiredTimer(self, key: Any, timerValues: Any,
                               expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
            t, s = self._load()
            if len(t):
                self.open.clear()
                yield pd.DataFrame([(key[0], len(t), int(s.sum()), int(t[0]), int(t[-1]),
                                     "timer")],
                                   columns=["key", "n", "bytes", "first_ms", "last_ms",
                                            "reason"])

        def close(self) -> None:
            pass

    return OpenBatchProcessor


# ----------------------------------------------------------------------------- query


def session(partitions: int, log: Path) -> Any:

    return build_session("spike-tws", "local[2]", partitions, {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.streaming.metricsEnabled": "false",
    }, spark_log=str(log))


def run_query(spark: Any, inp: Path, out: Path, ckpt: Path, name: str) -> dict[str, Any]:
    """Run the spike query once with ``availableNow`` to its end; returns wall seconds (from
    building the query to its end), per-batch ``triggerExecution`` ms, rows and the last
    progress's state operator metrics."""

    schema = StructType.fromDDL("key string, event_time timestamp, size long")
    t0 = time.perf_counter()
    src = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(inp))
           .withWatermark("event_time", "0 seconds"))
    res = (src.groupBy("key").transformWithStateInPandas(
        statefulProcessor=_processor_class()(), outputStructType=OUTPUT_DDL,
        outputMode="Append", timeMode="EventTime"))
    q = (res.writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(ckpt)).queryName(name)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    wall = time.perf_counter() - t0
    prog = q.recentProgress
    batches = [{"batch": p.batchId, "rows": p.numInputRows,
                "ms": p.durationMs.get("triggerExecution"),
                "state": _state_metrics(p)} for p in prog]
    return {"wall_s": round(wall, 2), "batches": batches,
            "input_rows": sum(b["rows"] for b in batches)}


def _state_metrics(p: Any) -> dict[str, Any]:
    ops = p.stateOperators
    if not ops:
        return {}
    o = ops[0]
    cm = dict(o.customMetrics or {})
    return {"rows_total": o.numRowsTotal, "rows_updated": o.numRowsUpdated,
            "memory_bytes": o.memoryUsedBytes, "commit_ms": o.commitTimeMs,
            "updates_ms": o.allUpdatesTimeMs,
            "timers": cm.get("numRegisteredTimers"),
            "rocksdb_commit_ms": sum(v for k, v in cm.items() if k.startswith("rocksdbCommit")
                                     and k.endswith("Latency")),
            "rocksdb_load_ms": cm.get("rocksdbLoadLatency") or cm.get("rocksdbLoadedFromLatency")}


def read_entries(spark: Any, out: Path) -> pd.DataFrame:
    """The file sink's committed rows (through its ``_spark_metadata`` log), sorted."""
    df = spark.read.parquet(str(out)).toPandas()
    return df.sort_values(["key", "first_ms", "n"]).reset_index(drop=True)


# ----------------------------------------------------------------------------- measurements


def fixed_cost(spark: Any, data: Path, partitions: int) -> dict[str, Any]:
    inp, out, ck = data / "fixed-in", data / "fixed-out", data / "fixed-ck"
    for p in (out, ck):
        shutil.rmtree(p, ignore_errors=True)
    write_input(inp, 4000, 50, 20)
    r = run_query(spark, inp, out, ck, "fixed")
    ms = [b["ms"] for b in r["batches"][1:] if b["rows"]]
    return {"batches": len(r["batches"]), "median_batch_ms": statistics.median(ms),
            "first_batch_ms": r["batches"][0]["ms"], "wall_s": r["wall_s"],
            "partitions": partitions}


def per_key(spark: Any, data: Path, rows: int, keys: int, files: int) -> dict[str, Any]:
    inp, out, ck = data / f"k{keys}-in", data / f"k{keys}-out", data / f"k{keys}-ck"
    for p in (out, ck):
        shutil.rmtree(p, ignore_errors=True)
    write_input(inp, rows, keys, files, flush="watermark")
    r = run_query(spark, inp, out, ck, f"k{keys}")
    ent = read_entries(spark, out)
    data_batches = [b for b in r["batches"] if b["rows"] > 1]
    last_state = next((b["state"] for b in reversed(r["batches"]) if b["state"]), {})
    res = {"keys": keys, "rows": rows, "files": files, "wall_s": r["wall_s"],
           "batches": len(r["batches"]),
           "batch_ms": [b["ms"] for b in r["batches"]],
           "data_batch_ms_sum": sum(b["ms"] for b in data_batches),
           "state_rows_peak": max((b["state"].get("rows_total") or 0) for b in r["batches"]),
           "state_memory_mb_peak": round(max((b["state"].get("memory_bytes") or 0)
                                             for b in r["batches"]) / 2**20, 1),
           "commit_ms_sum": sum((b["state"].get("commit_ms") or 0) for b in r["batches"]),
           "last_state": last_state,
           "entries": len(ent), "messages_out": int(ent["n"].sum()),
           "entries_by_reason": ent["reason"].value_counts().to_dict()}
    # restart: one more file (one row per key) on the finished checkpoint
    t_next = T0_MS + (files + 1) * 60_000 + FAR_FUTURE_MS  # past the flush watermark
    _write(inp / f"part-{files + 1:05d}.parquet", [f"k-{j}" for j in range(keys)],
           np.full(keys, t_next), np.full(keys, 500))
    r2 = run_query(spark, inp, out, ck, f"k{keys}-restart")
    res["restart"] = {"wall_s": r2["wall_s"], "batch_ms": [b["ms"] for b in r2["batches"]],
                      "rows": r2["input_rows"]}
    return res


def flush_modes(spark: Any, data: Path, keys: int) -> dict[str, Any]:
    out_all: dict[str, Any] = {}
    rows = 20_000
    for mode in ("none", "watermark", "sentinel"):
        inp, out, ck = data / f"flush-{mode}-in", data / f"flush-{mode}-out", data / \
            f"flush-{mode}-ck"
        for p in (out, ck):
            shutil.rmtree(p, ignore_errors=True)
        write_input(inp, rows, keys, 2, flush=mode)
        r = run_query(spark, inp, out, ck, f"flush-{mode}")
        ent = read_entries(spark, out)
        out_all[mode] = {"messages_in": rows, "messages_out": int(ent["n"].sum()),
                         "batches": len(r["batches"]), "batch_rows": [b["rows"] for b in
                                                                      r["batches"]],
                         "batch_ms": [b["ms"] for b in r["batches"]],
                         "entries_by_reason": ent["reason"].value_counts().to_dict()}
    return out_all


def _chain_processors() -> tuple[Any, Any]:
    """:func:`chain_test`'s two operators (classes defined here: shipped to the workers by
    value): ``Control`` emits a ``layout`` row per message above 1900 bytes, ``Count`` counts
    rows by kind per shard."""

    class Control(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.seen = handle.getValueState("seen", "n long")

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                            timerValues: Any) -> Iterator[pd.DataFrame]:
            for df in rows:
                big = df[df["size"] > 1900]
                if len(big):
                    yield pd.DataFrame({"key": big["key"], "event_time": big["event_time"],
                                        "size": big["size"], "kind": "layout"})

        def close(self) -> None:
            pass

    class Count(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.n = handle.getValueState("n", "messages long, layout long")

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                            timerValues: Any) -> Iterator[pd.DataFrame]:
            m = lay = 0
            for df in rows:
                lay += int((df["kind"] == "layout").sum())
                m += int((df["kind"] == "message").sum())
            old = self.n.get() if self.n.exists() else (0, 0)
            self.n.update((old[0] + m, old[1] + lay))
            yield pd.DataFrame({"shard": [key[0]], "messages": [m], "layout": [lay]})

        def close(self) -> None:
            pass

    return Control, Count


def chain_test(spark: Any, data: Path) -> dict[str, Any]:
    """Can a TWS operator's output, unioned with the source, feed a second TWS operator in the
    same query (the control plane → batching hand-over)? Operator 1 (by key) emits one
    ``layout`` row per input row with ``size > 1900``; the union with the messages is grouped by
    ``shard`` (key mod 4) into operator 2, which counts rows by kind."""

    Control, Count = _chain_processors()
    inp, out, ck = data / "chain-in", data / "chain-out", data / "chain-ck"
    for p in (out, ck):
        shutil.rmtree(p, ignore_errors=True)
    write_input(inp, 20_000, 50, 2)
    schema = StructType.fromDDL("key string, event_time timestamp, size long")
    src = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(inp))
           .withWatermark("event_time", "0 seconds"))
    ctl = src.groupBy("key").transformWithStateInPandas(
        statefulProcessor=Control(), outputStructType="key string, event_time timestamp, "
        "size long, kind string", outputMode="Append", timeMode="EventTime",
        eventTimeColumnName="event_time")
    both = src.withColumn("kind", F.lit("message")).unionByName(ctl)
    res = both.withColumn("shard", F.abs(F.hash("key")) % 4).groupBy("shard") \
        .transformWithStateInPandas(statefulProcessor=Count(), outputStructType="shard int, "
                                    "messages long, layout long", outputMode="Append",
                                    timeMode="EventTime")
    try:
        q = (res.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        q.awaitTermination()
    except Exception as exc:
        return {"status": "refused", "error": str(exc).splitlines()[0][:400]}
    got = spark.read.parquet(str(out)).toPandas()
    src_df = pd.read_parquet(inp)
    return {"status": "ok", "messages_in": len(src_df),
            "layout_rows_expected": int((src_df["size"] > 1900).sum()),
            "messages_out": int(got["messages"].sum()), "layout_out": int(got["layout"].sum()),
            "batches": len(q.recentProgress)}


def child_main(args: argparse.Namespace) -> int:
    """``--child``: run the query on ``--data`` folders (used by the kill test)."""
    spark = session(args.partitions, args.data / "child-spark.log")
    run_query(spark, args.data / "kill-in", args.data / args.child_out,
              args.data / args.child_ck, "kill")
    spark.stop()
    return 0


def kill_test(spark: Any, data: Path, partitions: int, keys: int) -> dict[str, Any]:
    rows = 200_000
    write_input(data / "kill-in", rows, keys, 4, flush="watermark")
    for p in ("kill-ref-out", "kill-ref-ck", "kill-out", "kill-ck"):
        shutil.rmtree(data / p, ignore_errors=True)
    ref = run_query(spark, data / "kill-in", data / "kill-ref-out", data / "kill-ref-ck", "ref")
    cmd = [sys.executable, __file__, "--child", "--data", str(data), "--partitions",
           str(partitions), "--child-out", "kill-out", "--child-ck", "kill-ck"]
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    commits = data / "kill-ck" / "commits"
    killed_after = None
    while proc.poll() is None:
        done = [int(f.name) for f in commits.glob("[0-9]*")] if commits.is_dir() else []
        if done and max(done) >= 1:
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own process group
            killed_after = max(done)
            break
        time.sleep(0.05)
    proc.wait()
    t0 = time.perf_counter()
    again = run_query(spark, data / "kill-in", data / "kill-out", data / "kill-ck", "again")
    a = read_entries(spark, data / "kill-ref-out")
    b = read_entries(spark, data / "kill-out")
    return {"keys": keys, "rows": rows, "killed_after_batch": killed_after,
            "reference_batches": len(ref["batches"]),
            "restart_wall_s": round(time.perf_counter() - t0, 2),
            "restart_batches": [b_["batch"] for b_ in again["batches"]],
            "entries_equal": bool(a.equals(b)), "entries": len(a),
            "messages_out": int(b["n"].sum())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--keys", default="50,10000,100000")
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / ".data" / "spike")
    ap.add_argument("--only", default="fixed,keys,flush,chain,kill")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default="kill-out", help=argparse.SUPPRESS)
    ap.add_argument("--child-ck", default="kill-ck", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.data.mkdir(parents=True, exist_ok=True)
    if args.child:
        return child_main(args)
    only = set(args.only.split(","))
    keys = [int(k) for k in args.keys.split(",")]
    doc: dict[str, Any] = {"spike": "transformWithStateInPandas (issue #16)",
                           "date_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                           "loadavg_start": [round(x, 2) for x in os.getloadavg()],
                           "max_messages": MAX_MESSAGES, "delay_ms": DELAY_MS,
                           "partitions": args.partitions}
    path = args.results / f"{datetime.now(UTC):%Y-%m-%d}-spike-tws.json"
    t0 = time.perf_counter()
    spark = session(args.partitions, args.data / "spark.log")
    doc["session_s"] = round(time.perf_counter() - t0, 2)

    def save(key: str, value: Any) -> None:
        doc[key] = value
        doc["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        print(f"{key}: {json.dumps(value, default=str)}", flush=True)

    if "fixed" in only:
        save("fixed_cost", fixed_cost(spark, args.data, args.partitions))
    if "keys" in only:
        save("per_key", [per_key(spark, args.data, args.rows, k, args.files) for k in keys])
    if "flush" in only:
        save("flush", flush_modes(spark, args.data, 1000))
    if "chain" in only:
        save("chain", chain_test(spark, args.data))
    if "kill" in only:
        save("kill", kill_test(spark, args.data, args.partitions, max(keys)))
    spark.stop()
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
