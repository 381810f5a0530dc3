"""The replay: a Structured Streaming query whose micro-batches drive the emulation stages.

Shape (docs/architecture.md, "Data flow"), per micro-batch ``k``:

1. ingest: the new raw records are parsed and mapped in Spark SQL (``pipelines.spark.ingest``), then
   ONE Python pass (``pipelines.spark.staging_pass.stage_batch``) applies the input rules
   (``pipelines.ingest.rules``), hashes the keys and stages the accepted records as Parquet
   under ``staging/batch_id=k/topic_bin=<the topic's bin>`` (rewritten whole on a re-run, so
   staging is idempotent); the records it rejects, and accepted ones older than the horizon
   already finalized (``late``), come out of the pass → ``quarantine``.
2. the event-time horizon advances to ``max(event_ms) - allowed_lateness``.
3. the window ``[previous horizon, new horizon)`` of staged messages is finalized by the
   emulation query (:mod:`pipelines.spark.emulation`: chained grouped stateful operators whose
   state lives in Spark's state store): control plane per topic → routing + ``segment_load`` +
   ``autoscale_decisions`` + ``segments``; batching per producer shard → ``entries`` +
   ``messages``; dispatch per subscription → ``dispatch``, ``consumer_load``,
   ``bucket_handoffs``, ``subscription_stats``, ``segment_drains``.
4. every table write is an idempotent Delta append keyed by (run_id, table) and version ``k``;
   the state of batch ``k`` is stored last, so a restart re-runs batch ``k`` from the state of
   ``k-1`` and the tables skip what they already hold (exactly-once).

A batch replay is this query with ``trigger(availableNow=True)`` followed by end-of-input
finalization (horizon = +∞, open batches flushed, last ticks evaluated, dispatch drained).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession

from pipelines.contract.config import ReplayConfig
from pipelines.contract.kafka import KafkaInput
from pipelines.contract.presets import InputSpec
from pipelines.engine.findings import write_answers
from pipelines.engine.summary import run_summary, runs_row
from pipelines.ingest.privacy import Pseudonymizer, pseudonymizer
from pipelines.spark import finalization
from pipelines.spark.delta_spark import open_store
from pipelines.spark.emulation import default_bins, state_partitions
from pipelines.spark.finalization import Finalizer, key_profiles_dir, read_rows
from pipelines.spark.ingest import read_raw_stream
from pipelines.spark.kafka import read_kafka_stream
from pipelines.spark.micro_batch import MicroBatchIngest, StagedBatch
from pipelines.spark.progress import BatchProgress
from pipelines.spark.remote_batch import RemoteBatch
from pipelines.spark.replay_state import ReplayState, StateFiles, state_blob
from pipelines.spark.session import is_connect, require_kafka, require_s3a
from pipelines.spark.stopwatch import Stopwatch
from pipelines.storage import fs as storage
from pipelines.storage.commits import FINAL_VERSION, TableCommits
from pipelines.storage.delta import DeltaStore
from pipelines.storage.faults import fault
from pipelines.storage.output_identity import (
    check_output,
    check_sweep_output,
    manifest_path,
    read_manifest,
    write_manifest,
)


class ReplayStopped(RuntimeError):
    """Raised by a micro-batch that begins after :meth:`Replay.request_stop` (nothing written)."""


@dataclass(frozen=True)
class RunSpec:
    """One run a replay writes: its ``run_id`` and config. A replay writes one; a sweep
    (``topic-replay sweep``) one per scenario from a single ingest: the scenarios share the
    ingest settings (``input``, ``output``, ``replay`` speed, lateness and trigger sizes) and
    differ in what the emulation does (``pipelines.analysis.whatif.sweep.INGEST_KEYS``)."""

    run_id: str
    config: ReplayConfig


@dataclass
class Replay:
    """One replay: inputs, config, output store and the state. It writes the run ``run_id``
    under ``config``, or, given ``runs`` (a sweep), each of those runs from one ingest under
    ``config``'s ingest settings; ``run_id`` then names the sweep's work folder only."""

    spark: SparkSession
    config: ReplayConfig
    input_spec: InputSpec
    inputs: Sequence[str]
    output: str
    run_id: str
    progress: Callable[[Any], None] = print  # str or BatchProgress (pipelines.spark.progress)
    streaming: bool = False
    runs: Sequence[RunSpec] = ()
    kafka: KafkaInput | None = None  # Kafka topics instead of files (pipelines.spark.kafka)
    store: DeltaStore = field(init=False)
    state: ReplayState = field(init=False)
    started: float = field(default_factory=time.time)
    stopwatch: Stopwatch = field(init=False, default_factory=Stopwatch, repr=False)
    commits: TableCommits = field(init=False, repr=False)  # the one commit path
    state_files: StateFiles = field(init=False, repr=False)
    ingest: MicroBatchIngest = field(init=False, repr=False)
    finalizer: Finalizer = field(init=False, repr=False)
    pseudonymize: Pseudonymizer | None = field(init=False, default=None, repr=False)
    topic_bins: int = field(init=False, default=1)  # the run's (its manifest's)
    state_partitions: int = field(init=False, default=1)  # the run's (its manifest's)
    stop_requested: threading.Event = field(init=False, default_factory=threading.Event,
                                            repr=False)
    _batch_lock: threading.Lock = field(init=False, default_factory=threading.Lock, repr=False)
    _in_batch: bool = field(init=False, default=False, repr=False)

    def __post_init__(self) -> None:
        sweep = bool(self.runs)
        self.runs = tuple(self.runs) or (RunSpec(self.run_id, self.config),)
        lanes = {r.run_id: r.config for r in self.runs} if sweep else None
        if lanes:  # each scenario's run must be new or this sweep's own
            check_sweep_output(self.output, self.run_id, self.config, self.input_spec.preset,
                               lanes)
        else:
            check_output(self.output, self.run_id, self.config, self.input_spec.preset)
        # Absolute: executors resolve the staging and window folders themselves, and on a
        # cluster their working folder is not the driver's (a URL stays as it is).
        self.output = storage.absolute(self.output)
        if storage.scheme(self.output) in storage.S3_SCHEMES:
            require_s3a(self.spark, self.output)
        if self.kafka is not None and not is_connect(self.spark):
            require_kafka(self.spark)  # StorageError: one sentence, before anything is written
        # input.pseudonymize: its secret is read now (PrivacyError when it is missing)
        self.pseudonymize = pseudonymizer(self.config)
        self.store = open_store(self.output, engine=self.config.output.engine, spark=self.spark)
        self.commits = TableCommits(self.store, self.config.output.tables, self.stopwatch.timed)
        manifest = manifest_path(self.output, self.run_id)
        if not storage.is_file(manifest):
            # topic bins and the state's partitions: run constants (the emulation's state is
            # keyed by the bins, its keys' slots follow from both), kept here
            self.topic_bins = self.config.replay.topic_bins or default_bins(self.spark)
            self.state_partitions = state_partitions(self.spark)
            write_manifest(manifest, self.config, self.input_spec.preset, self.topic_bins,
                           lanes, state_partitions=self.state_partitions)
        else:
            kept = read_manifest(manifest)
            self.topic_bins = int(kept.get("topic_bins") or self.config.replay.topic_bins
                                  or default_bins(self.spark))
            self.state_partitions = int(kept.get("state_partitions")
                                        or state_partitions(self.spark))
        self.state_files = StateFiles(self.work_dir)
        self.state = self.state_files.latest()
        self.ingest = MicroBatchIngest(
            self.spark, self.config, self.input_spec, self.work_dir, self.staging,
            self.checkpoint, self.topic_bins, self.pseudonymize, self.commits,
            [r.run_id for r in self.runs], self.progress)
        self.finalizer = Finalizer(
            self.spark, {r.run_id: r.config for r in self.runs}, self.staging, self.work_dir,
            self.topic_bins, self.config.replay.producer_shards, self.state_partitions,
            self.commits, self.stopwatch)

    # ---- paths --------------------------------------------------------------------------------
    @property
    def work_dir(self) -> str:
        """``<output>/_work/<run_id>`` (a path or a URL, as the output)."""
        return storage.join(self.output, "_work", self.run_id)

    @property
    def checkpoint(self) -> str:
        return storage.join(self.work_dir, "checkpoint")

    @property
    def staging(self) -> str:
        return storage.join(self.work_dir, "staging")

    @property
    def stage_s(self) -> dict[str, float]:
        """Exclusive wall-clock seconds per stage so far (:class:`Stopwatch`)."""
        return self.stopwatch.stage_s

    # ---- the streaming query ---------------------------------------------------------------------
    def run(self, stream: bool = False, trigger_seconds: float = 5.0) -> dict[str, Any]:
        """Run the query; batch mode (``stream=False``) ends with finalization and returns the
        run summary, or ``{}`` when :meth:`request_stop` stopped it first (the tables are then
        current up to ``state.batch_id``; a restart resumes). Streaming mode starts the query
        and returns ``{}`` at once: wait with :meth:`await_query` (after
        :meth:`request_stop`, it stops the query cleanly)."""
        self.streaming = stream
        self.ensure_tables()
        raw = self._raw_stream()
        batch_fn: Callable[[DataFrame, int], None] = self._process_batch
        if is_connect(self.spark):
            batch_fn = RemoteBatch.of(self)
            self.progress("micro-batches run on the Spark Connect server; their progress lines "
                          "are in its log")
        writer = (raw.writeStream.foreachBatch(batch_fn)
                  .option("checkpointLocation", self.checkpoint))
        if stream:
            self.query = writer.trigger(processingTime=f"{trigger_seconds} seconds").start()
            return {}
        self.query = writer.trigger(availableNow=True).start()
        if not self.await_query():
            return {}  # stopped (request_stop): resumed by a restart
        self.finalize()
        if not self.state.finalized:  # stopped between finalization windows
            return {}
        if self.config.output.validate_tables:
            self.validate()
        return self.summary()

    def _raw_stream(self) -> DataFrame:
        """The query's source: the input files (Spark's file source), or Kafka topics
        (Spark's Kafka source, :attr:`kafka`); the same raw frame either way."""
        if self.kafka is not None:
            return read_kafka_stream(self.spark, self.kafka)
        return read_raw_stream(self.spark, list(self.inputs), self.input_spec.format,
                               self.config.replay.max_files_per_trigger,
                               path_glob_filter=self.input_spec.file_glob,
                               max_bytes_per_trigger=self.config.replay.max_bytes_per_trigger)
    # ---- stopping ------------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Ask the replay to stop (safe from a signal handler or any thread): a micro-batch in
        progress completes, none starts after it, finalization stops between windows; the caller
        waiting in :meth:`await_query` then stops the query. Every committed table and state is
        whole, so a restart resumes with nothing lost or doubled."""
        self.stop_requested.set()

    @property
    def stopped(self) -> bool:
        """Whether :meth:`request_stop` was called."""
        return self.stop_requested.is_set()

    def await_query(self) -> bool:
        """Wait until the query ends (batch mode: input read) or a stop is requested; then, on a
        stop, wait for the micro-batch in progress and stop the query (:meth:`stop_query`).
        Returns ``True`` when the query ended by itself. A query failure is raised, unless a
        stop was requested (a micro-batch refused after the request ends the query)."""
        from pyspark.errors import StreamingQueryException  # noqa: PLC0415

        try:
            while not self.stopped and self.query.isActive:
                self.query.awaitTermination(1)
        except StreamingQueryException:
            if not self.stopped:
                raise
        if not self.stopped:
            self._reload_remote_state()
            return True
        self.stop_query()
        self._reload_remote_state()
        return False

    def _reload_remote_state(self) -> None:
        """Under Spark Connect the micro-batches ran in the server's Python process
        (:class:`RemoteBatch`), which saved the state after each: read it back."""
        if is_connect(self.spark):
            self.state = self.state_files.latest()

    def stop_query(self) -> None:
        """Stop the query once no micro-batch is in progress (one that starts now refuses to
        run, see :meth:`_process_batch`). Spark's and py4j's error logs are silenced first:
        a micro-batch refused or cancelled by the stop is expected, not an error."""
        self._silence_logs()
        while True:
            with self._batch_lock:
                if not self._in_batch:
                    break
            time.sleep(0.1)
        try:
            self.query.stop()
        except Exception:  # pragma: no cover - the query ended in the meantime
            pass

    def ensure_tables(self) -> None:
        """Create every configured table that does not exist yet, empty with its schema, so
        that a query of a table this run writes no rows to (no ``quarantine`` on clean input,
        no ``autoscale_decisions`` without a split) answers "none" instead of "not found"."""
        with self.stopwatch.timed("delta_write"):
            for table in self.config.output.tables:
                self.store.ensure_table(table)

    def validate(self) -> Any:
        """End-of-run Great Expectations checks (``output.validate``): validation pass
        :data:`pipelines.analysis.validation.END_OF_RUN_VALIDATION_ID`, written to ``validations``
        when that table is enabled (idempotent on a re-run). A failed check does not fail the
        run."""
        from pipelines.analysis.validation import (  # noqa: PLC0415
            END_OF_RUN_VALIDATION_ID,
            validate_run,
        )

        return [validate_run(self.store, r.run_id, END_OF_RUN_VALIDATION_ID,
                             write="validations" in self.config.output.tables)
                for r in self.runs]

    def _silence_logs(self) -> None:
        """Turn off Spark's log (and py4j's): after a stop request, the micro-batch refused or
        cancelled by the stop is expected, and its stack traces would only alarm."""

        logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)
        try:
            self.spark.sparkContext.setLogLevel("OFF")
        except Exception:  # pragma: no cover - a JVM already gone: nothing left to silence
            pass

    def _process_batch(self, raw: DataFrame, batch_id: int) -> None:
        """``foreachBatch`` function: one micro-batch, unless a stop was requested before it
        began (it then raises :class:`ReplayStopped` having written nothing, so Spark does not
        commit it and a restart runs it)."""
        with self._batch_lock:
            if self.stopped:
                self._silence_logs()  # before Spark logs the query's end as an error
                raise ReplayStopped(f"stop requested before micro-batch {batch_id}")
            self._in_batch = True
        try:
            self._run_batch(raw, batch_id)
        finally:
            with self._batch_lock:
                self._in_batch = False

    def _run_batch(self, raw: DataFrame, batch_id: int) -> None:
        """One micro-batch: its records staged and quarantined (:class:`MicroBatchIngest`), the
        counts, the horizon (finalizing what it passed when streaming), the state saved."""
        t0 = time.time()
        if batch_id <= self.state.batch_id:  # re-delivered batch already committed
            return
        self.state = self.state_files.before(batch_id)
        self.stopwatch.tick()  # ingest_hash: everything below but the stages timed inside
        horizon = self.state.horizon_ms
        staged = self.ingest.ingest(raw, batch_id, self.state)
        self._advance(staged, horizon, batch_id)
        self.state.batch_id = batch_id
        state_bytes = self.state_files.save(self.state)
        fault(f"after_state:{batch_id}")
        self.stopwatch.tock("ingest_hash")
        self.progress(BatchProgress(
            line=f"batch {batch_id}: accepted {staged.accepted}, quarantined "
                 f"{staged.quarantined}, horizon {self._fmt_time(self.state.horizon_ms)}, "
                 f"state {state_bytes:,} bytes ({time.time() - t0:.1f}s)",
            records=staged.accepted + staged.quarantined,
            total_accepted=self.state.counts.get("accepted", 0),
            total_quarantined=self.state.counts.get("quarantined", 0),
            latest_publish_time=self._fmt_time(self.state.max_event_ms)[:19]))  # to the second

    def _advance(self, staged: StagedBatch, horizon: int | None, batch_id: int) -> None:
        """Count micro-batch ``batch_id``'s staged messages (``staged``), move the event-time
        bounds and, streaming, finalize the window up to the new horizon (``max(event_ms) -
        allowed_lateness``, never below ``horizon``, the one before it). A batch replay
        finalizes once, at end of input, so file order never matters."""
        self.state.add("accepted", staged.accepted)
        if staged.max_event_ms is not None and staged.min_event_ms is not None:
            mx = staged.max_event_ms
            self.state.max_event_ms = max(self.state.max_event_ms or mx, mx)
            mn = staged.min_event_ms
            if self.state.first_event_ms is None or mn < self.state.first_event_ms:
                self.state.first_event_ms = mn
        new_horizon = None
        if self.state.max_event_ms is not None:
            new_horizon = self.state.max_event_ms - self.lateness_ms + 1
            if horizon is not None:
                new_horizon = max(new_horizon, horizon)
        if (self.streaming and not self.state.finalized and new_horizon is not None
                and (horizon is None or new_horizon > horizon)):
            self.finalizer.run([new_horizon], batch_id, False, self.state, snapshot=True)

    @property
    def lateness_ms(self) -> int:
        return int(self.config.replay.allowed_lateness_s * 1000 / self.config.replay.speed)

    # ---- end of input ----------------------------------------------------------------------
    def finalize(self) -> None:
        """End of input: finalize everything left, in bounded event-time windows.

        The staged messages are cut into windows of at most about
        ``finalization.FINALIZE_WINDOW_MESSAGES`` messages of any one topic bin
        (``finalization.final_windows``),
        finalized ``finalization.FINALIZE_WINDOWS_PER_JOB`` at a time (:meth:`Finalizer.run`:
        one Spark job and one commit per table, with the version ``FINAL_VERSION + i`` of the
        group's last window ``i``); the state is saved after each group, so a restart
        recomputes at most one group, cut the same way (it resumes at the first window past
        the saved horizon). The last window (horizon = +∞) is the end of input. After
        :meth:`request_stop` it returns between two groups (``state.finalized`` stays false; a
        restart finalizes the rest).
        """
        version = FINAL_VERSION + max(self.state.batch_id, 0)
        if self.state.finalized:  # records read after finalization were late: recount
            self._write_runs(version)
            self.state_files.save(self.state)
            return
        windows = finalization.final_windows(self.staging)
        done = self.state.horizon_ms
        todo = [(i, hi) for i, hi in enumerate(windows)  # not finalized before a restart
                if hi is None or done is None or hi > done]
        t0 = time.time()
        per_job = finalization.FINALIZE_WINDOWS_PER_JOB
        for start in range(0, len(todo), per_job):
            if self.stopped:  # the groups before are committed and their state saved
                return
            group = todo[start:start + per_job]
            last, final = group[-1][0], group[-1][1] is None
            self.finalizer.run([hi for _, hi in group], FINAL_VERSION + last, final,
                               self.state, snapshot=self.streaming)
            # the last group's state is saved once the run is marked finalized, below
            state_bytes = (self.state_files.save(self.state) if not final
                           else len(state_blob(self.state)))
            for i, hi in group:
                self.progress(f"window {i + 1}/{len(windows)}: finalized up to "
                              f"{self._fmt_time(hi) if hi is not None else 'end of input'}"
                              + (f", state {state_bytes:,} bytes ({time.time() - t0:.1f}s)"
                                 if i == last else ""))
            t0 = time.time()
        with self.stopwatch.timed("findings"):  # from the committed tables (restart-safe)
            for r in self.runs:
                write_answers(self.store, r.run_id, r.config, version,
                              keys=read_rows(key_profiles_dir(self.work_dir, r.run_id)))
        self.state.finalized = True
        # The batch id stays that of the last micro-batch: a later micro-batch (new files on
        # a re-run) is then processed, as late, instead of being mistaken for a re-delivery.
        self._write_runs(version)
        fault("before_final_state")
        self.state_files.save(self.state)

    # ---- runs & summary ------------------------------------------------------------------------
    def _write_runs(self, version: int) -> None:
        """Each run's ``runs`` row: the ingest's counts and the run's own (entries, ...)."""
        timings = self.stopwatch.timings()
        rows = {}
        for r in self.runs:
            counts: dict[str, Any] = {**self.state.counts, **self.state.lane(r.run_id).counts}
            if self.state.missing_fields:
                counts["missing_fields"] = dict(self.state.missing_fields)
            counts["publish_time"] = self.input_spec.publish_time_facts()
            rows[r.run_id] = pd.DataFrame([runs_row(r.config, self.inputs, counts,
                                                    self.store.engine, self.started, timings)])
        self.commits.rows("runs", rows, version, replace=True)

    def summary(self) -> dict[str, Any]:
        """The summary of the replay's first (for a plain replay: only) run."""
        return run_summary(self.store, self.runs[0].run_id)

    def _fmt_time(self, emu_ms: int | None) -> str:
        if emu_ms is None:
            return "-"
        return str(pd.Timestamp(int(emu_ms * self.config.replay.speed), unit="ms", tz="UTC"))

