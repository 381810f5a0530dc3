"""The replay: a Structured Streaming query whose micro-batches drive the emulation stages.

Shape (DESIGN "Shape of the pipeline"), per micro-batch ``k``:

1. ingest: parse, validate and hash the new raw records (``pipelines.ingest``); rejected records
   → ``quarantine``; accepted ones are staged as Parquet under ``_staging/batch_id=k`` (rewritten
   whole on a re-run, so staging is idempotent).
2. the event-time horizon advances to ``max(event_ms) - allowed_lateness``; a staged record older
   than the horizon that was already finalized is quarantined as ``late``.
3. the window ``[previous horizon, new horizon)`` of staged messages is finalized by three grouped
   stages (``pipelines.stages``), each a ``groupBy(...).applyInPandas`` whose per-group state
   (controller, producer batchers, subscription dispatchers) is carried between micro-batches in
   :class:`ReplayState`:
   control plane per topic → routing + ``segment_load`` + ``autoscale_decisions``;
   data plane per (topic, producer) → ``entries`` + ``messages``;
   dispatch per topic → ``dispatch``, ``consumer_load``, ``bucket_handoffs``.
4. every table write is an idempotent Delta append keyed by (run_id, table) and version ``k``;
   the state of batch ``k`` is stored last, so a restart re-runs batch ``k`` from the state of
   ``k-1`` and the tables skip what they already hold (exactly-once).

A batch replay is this query with ``trigger(availableNow=True)`` followed by end-of-input
finalization (horizon = +∞, open batches flushed, last ticks evaluated, dispatch drained).
"""

from __future__ import annotations

import json
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines import stages
from pipelines.config import ReplayConfig
from pipelines.delta_io import DeltaStore
from pipelines.ingest import parse_records, read_raw_stream
from pipelines.presets import InputSpec
from pipelines.schemas import arrow_schema

FINAL_VERSION_OFFSET = 1 << 40
"""Version of the end-of-input finalization commit (above any micro-batch id)."""

OUTPUT_TABLES = ("messages", "entries", "segments", "segment_load", "autoscale_decisions",
                 "dispatch", "consumer_load", "bucket_handoffs", "quarantine", "runs")


@dataclass
class ReplayState:
    """Everything the replay carries between micro-batches (pickled into ``_state``)."""

    batch_id: int = -1
    horizon_ms: int | None = None  # emulated-clock ms; messages < horizon are finalized
    max_event_ms: int | None = None
    first_event_ms: int | None = None
    finalized: bool = False
    controllers: dict[str, bytes] = field(default_factory=dict)
    batchers: dict[tuple[str, str], bytes] = field(default_factory=dict)
    dispatchers: dict[str, bytes] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, n: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + int(n)


@dataclass
class Replay:
    """One replay run: inputs, config, output store and the run's state."""

    spark: SparkSession
    config: ReplayConfig
    input_spec: InputSpec
    inputs: Sequence[str]
    output: str
    run_id: str
    progress: Callable[[str], None] = print
    streaming: bool = False
    store: DeltaStore = field(init=False)
    state: ReplayState = field(init=False)
    started: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        self.store = DeltaStore(self.output, engine=self.config.output.engine, spark=self.spark)
        self.state = self._load_state()

    # ---- paths --------------------------------------------------------------------------------
    @property
    def work_dir(self) -> Path:
        return Path(self.output) / "_work" / self.run_id

    @property
    def checkpoint(self) -> str:
        return str(self.work_dir / "checkpoint")

    @property
    def staging(self) -> str:
        return str(self.work_dir / "staging")

    # ---- state ------------------------------------------------------------------------------
    def _state_file(self, batch_id: int) -> Path:
        return self.work_dir / "state" / f"{batch_id:020d}.pkl"

    def _load_state(self) -> ReplayState:
        """Latest committed state (the checkpoint decides which batches re-run)."""
        return self._state_before(2**63)

    def _state_before(self, batch_id: int) -> ReplayState:
        """State committed by the last batch before ``batch_id`` (a re-run starts from it)."""
        files = [f for f in sorted((self.work_dir / "state").glob("*.pkl"))
                 if int(f.stem) < batch_id]
        if not files:
            return ReplayState()
        with files[-1].open("rb") as fh:
            state: ReplayState = pickle.load(fh)
        return state

    def _save_state(self) -> None:
        path = self._state_file(self.state.batch_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with tmp.open("wb") as fh:
            pickle.dump(self.state, fh)
        tmp.replace(path)  # atomic: a state file is whole or absent

    # ---- writes -------------------------------------------------------------------------------
    def write(self, table: str, data: Any, version: int) -> None:
        if table not in self.config.output.tables:
            return
        if isinstance(data, list):
            data = pd.DataFrame(data)
        if isinstance(data, pd.DataFrame):
            if data.empty:
                return
            # Stage-side extras (e.g. dispatch redeliveries) are not table columns (yet).
            keep = [c for c in arrow_schema(table).names if c in data.columns]
            data = data[keep].assign(run_id=self.run_id)
        else:
            data = data.withColumn("run_id", F.lit(self.run_id))
        self.store.append(table, data, app_id=f"topic-replay:{self.run_id}:{table}",
                          version=version)

    # ---- the streaming query ---------------------------------------------------------------------
    def run(self, stream: bool = False, trigger_seconds: float = 5.0) -> dict[str, Any]:
        """Run the query; batch mode (``stream=False``) ends with finalization and returns the
        run summary. Streaming mode runs until stopped (``stop()`` on the returned query)."""
        self.streaming = stream
        raw = read_raw_stream(self.spark, list(self.inputs), self.input_spec.format,
                              self.config.replay.max_files_per_trigger)
        writer = (raw.writeStream.foreachBatch(self._process_batch)
                  .option("checkpointLocation", self.checkpoint))
        if stream:
            self.query = writer.trigger(processingTime=f"{trigger_seconds} seconds").start()
            return {}
        self.query = writer.trigger(availableNow=True).start()
        self.query.awaitTermination()
        self.finalize()
        return self.summary()

    def _process_batch(self, raw: DataFrame, batch_id: int) -> None:
        t0 = time.time()
        if batch_id <= self.state.batch_id:  # re-delivered batch already committed
            return
        self.state = self._state_before(batch_id)
        accepted, quarantine = parse_records(raw, self.input_spec)
        horizon = self.state.horizon_ms
        staged = accepted
        late = None
        if horizon is not None:
            late = accepted.where(F.col("event_ms") < F.lit(horizon))
            staged = accepted.where(F.col("event_ms") >= F.lit(horizon))
        staged.write.mode("overwrite").parquet(f"{self.staging}/batch_id={batch_id}")
        stats = self.spark.read.parquet(f"{self.staging}/batch_id={batch_id}").agg(
            F.count(F.lit(1)).alias("n"), F.max("event_ms").alias("max"),
            F.min("event_ms").alias("min")).first()
        q = quarantine.select("source_file", "raw_record", "reason")
        if late is not None:
            raw = F.to_json(F.struct("topic", "key", "producer_name", "sequence_id",
                                     "publish_time", "payload_size"))
            q = q.unionByName(late.select("source_file", raw.alias("raw_record"),
                                          F.lit("late").alias("reason")))
        q = q.withColumn("batch_id", F.lit(batch_id).cast("long"))
        q_pdf = q.toPandas()
        self.write("quarantine", q_pdf, batch_id)
        self.state.add("quarantined", len(q_pdf))
        self.state.add("late", int((q_pdf["reason"] == "late").sum()) if len(q_pdf) else 0)
        self.state.add("accepted", stats["n"] or 0)
        if stats["n"]:
            mx = int(stats["max"])
            self.state.max_event_ms = max(self.state.max_event_ms or mx, mx)
            mn = int(stats["min"])
            if self.state.first_event_ms is None or mn < self.state.first_event_ms:
                self.state.first_event_ms = mn
        new_horizon = None
        if self.state.max_event_ms is not None:
            new_horizon = self.state.max_event_ms - self.lateness_ms + 1
            if horizon is not None:
                new_horizon = max(new_horizon, horizon)
        # A batch replay finalizes once, at end of input, so file order never matters; a
        # streaming replay finalizes every window the watermark has passed.
        if self.streaming and new_horizon is not None and (horizon is None
                                                           or new_horizon > horizon):
            self._finalize_window(horizon, new_horizon, batch_id, final=False)
        self.state.batch_id = batch_id
        self._save_state()
        self.progress(f"batch {batch_id}: accepted {stats['n'] or 0}, quarantined {len(q_pdf)}, "
                      f"horizon {self._fmt_time(self.state.horizon_ms)} "
                      f"({time.time() - t0:.1f}s)")

    @property
    def lateness_ms(self) -> int:
        return int(self.config.replay.allowed_lateness_s * 1000 / self.config.replay.speed)

    def finalize(self) -> None:
        """End of input: finalize everything left (horizon = +∞) once."""
        if self.state.finalized:
            return
        version = FINAL_VERSION_OFFSET
        self._finalize_window(self.state.horizon_ms, None, version, final=True)
        self.state.finalized = True
        self.state.batch_id = max(self.state.batch_id, 0) + 1
        self._write_runs(version)
        self._save_state()

    # ---- one finalized window ------------------------------------------------------------------
    def _finalize_window(self, lo: int | None, hi: int | None, version: int, final: bool) -> None:
        msgs = self._staged_window(lo, hi)
        settings = stages.StageSettings.from_config(self.config, self.state.first_event_ms)
        routed, ctl = stages.control_plane(msgs, self.state.controllers, settings, hi, final)
        self.state.controllers = ctl.states
        self.write("segment_load", ctl.samples, version)
        self.write("autoscale_decisions", ctl.decisions, version)
        if final or self.streaming:  # a snapshot of the DAG: replace the run's rows
            self.store.delete_run("segments", self.run_id)
            self.write("segments", ctl.segments, version)
        layouts = ctl.layouts
        routed = routed.persist()
        try:
            out, batch = stages.data_plane(routed, self.state.batchers, settings, layouts, hi,
                                           final)
            self.state.batchers = batch.states
            entries = batch.entries
            self.write("entries", entries.drop(columns=["emu_publish_ms"], errors="ignore"),
                       version)
            self.write("messages", out, version)
            self.state.add("entries", len(entries))
            if hasattr(stages, "dispatch"):
                disp = stages.dispatch(entries, self.state.dispatchers, settings, layouts, hi,
                                       final)
                self.state.dispatchers = disp.states
                self.write("dispatch", disp.dispatch, version)
                self.write("consumer_load", disp.consumer_load, version)
                self.write("bucket_handoffs", disp.handoffs, version)
                self.state.add("dispatched", len(disp.dispatch))
        finally:
            routed.unpersist()
        self.state.horizon_ms = hi

    def _staged_window(self, lo: int | None, hi: int | None) -> DataFrame:
        df = self.spark.read.parquet(self.staging)
        if lo is not None:
            df = df.where(F.col("event_ms") >= F.lit(lo))
        if hi is not None:
            df = df.where(F.col("event_ms") < F.lit(hi))
        return df.drop("batch_id")

    # ---- runs & summary ------------------------------------------------------------------------
    def _write_runs(self, version: int) -> None:
        import pyspark

        row = {
            "status": "finished", "config": self.config.to_json(),
            "inputs": [str(p) for p in self.inputs],
            "counts": json.dumps(self.state.counts, sort_keys=True),
            "versions": json.dumps({"pyspark": pyspark.__version__,
                                    "engine": self.store.engine}),
            "started_at": pd.Timestamp(self.started, unit="s", tz="UTC"),
            "ended_at": pd.Timestamp(time.time(), unit="s", tz="UTC"),
            "timings": json.dumps({"wall_s": round(time.time() - self.started, 3)}),
        }
        self.write("runs", pd.DataFrame([row]), version)

    def summary(self) -> dict[str, Any]:
        return run_summary(self.store, self.run_id)

    def _fmt_time(self, emu_ms: int | None) -> str:
        if emu_ms is None:
            return "-"
        return str(pd.Timestamp(int(emu_ms * self.config.replay.speed), unit="ms", tz="UTC"))


def run_summary(store: DeltaStore, run_id: str) -> dict[str, Any]:
    """Headline numbers of one run, read back from the tables (``topic-replay summary``)."""
    def read(t: str) -> pd.DataFrame:
        return store.read(t, run_id=run_id)

    runs = read("runs")
    decisions = read("autoscale_decisions")
    segments = read("segments")
    entries = read("entries")
    counts = json.loads(runs["counts"].iloc[-1]) if len(runs) else {}
    acted = decisions[decisions["action"] != "none"] if len(decisions) else decisions
    n_msgs = int(entries["num_messages"].sum()) if len(entries) else 0
    per_topic = {}
    if len(segments):
        for topic, g in segments.groupby("topic"):
            per_topic[topic] = {"segments_created": int(len(g)),
                                "active_segments": int((g["state"] == "ACTIVE").sum()),
                                "buckets": int(g.loc[g["state"] == "ACTIVE",
                                                     "bucket_count"].sum())}
    return {
        "run_id": run_id,
        "status": runs["status"].iloc[-1] if len(runs) else "unknown",
        "accepted": counts.get("accepted", 0),
        "quarantined": counts.get("quarantined", 0),
        "late": counts.get("late", 0),
        "topics": len(per_topic),
        "splits": int((acted["action"] == "split").sum()) if len(acted) else 0,
        "merges": int((acted["action"] == "merge").sum()) if len(acted) else 0,
        "rebuckets": int((acted["action"] == "rebucket").sum()) if len(acted) else 0,
        "suppressed": int((decisions["action"] == "none").sum()) if len(decisions) else 0,
        "entries": int(len(entries)),
        "entries_per_message": round(len(entries) / n_msgs, 4) if n_msgs else None,
        "per_topic": per_topic,
    }


def format_summary(summary: dict[str, Any]) -> str:
    lines = [f"run {summary['run_id']}: {summary['status']}",
             f"  records   accepted {summary['accepted']:,}  quarantined "
             f"{summary['quarantined']:,} (late {summary['late']:,})",
             f"  autoscale splits {summary['splits']}  merges {summary['merges']}  rebuckets "
             f"{summary['rebuckets']}  suppressed {summary['suppressed']}",
             f"  entries   {summary['entries']:,}  (entries/message "
             f"{summary['entries_per_message']})"]
    for topic, t in sorted(summary["per_topic"].items()):
        lines.append(f"  topic {topic}: {t['active_segments']} active segments, {t['buckets']} "
                     f"buckets, {t['segments_created']} segments created")
    return "\n".join(lines)

