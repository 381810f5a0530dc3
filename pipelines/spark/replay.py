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

import json
import logging
import pickle
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from pipelines.contract.config import ReplayConfig, run_identity
from pipelines.contract.kafka import KafkaInput
from pipelines.contract.presets import InputSpec
from pipelines.contract.schemas import arrow_schema
from pipelines.engine import stages
from pipelines.engine.findings import write_answers
from pipelines.engine.summary import run_summary, runs_row
from pipelines.ingest.privacy import DIGEST_PREFIX, Pseudonymizer, pseudonymizer
from pipelines.spark import handover
from pipelines.spark.delta_spark import open_store
from pipelines.spark.emulation import (
    FINAL_VERSION,
    Receipt,
    default_bins,
    emulation_dir,
    read_receipt,
    remove_versions,
    run_emulation,
    write_feed,
)
from pipelines.spark.ingest import (
    FILE_REASONS,
    LATE,
    PRESENT_PREFIX,
    map_records,
    micro_batch_files,
    quarantine_rows,
    read_raw_stream,
    salvage_files,
)
from pipelines.spark.kafka import read_kafka_stream
from pipelines.spark.progress import BatchProgress
from pipelines.spark.session import is_connect, require_kafka
from pipelines.spark.staging_pass import stage_batch
from pipelines.storage import fs as storage
from pipelines.storage.delta import DeltaStore, table_app_id
from pipelines.storage.faults import fault
from pipelines.storage.frames import CONTROL_KINDS, KEY_PROFILE_KIND, STAGE_KINDS
from pipelines.storage.staging import (
    StagingPlan,
    staged_batch_stats,
    staged_files,
    staged_histogram,
)

STAGES = ("ingest_hash", "control_plane", "batching", "dispatch", "delta_write")
"""Stages timed into the ``runs`` table's ``timings`` as ``<stage>_s`` (exclusive seconds)."""

FINAL_VERSION_OFFSET = FINAL_VERSION
"""Version of the end-of-input finalization commit (above any micro-batch id)."""

def _after_write(table: str, version: int) -> None:
    fault(f"after_write:{table}:{'final' if version >= FINAL_VERSION_OFFSET else version}")


class ReplayStopped(RuntimeError):
    """Raised by a micro-batch that begins after :meth:`Replay.request_stop` (nothing written)."""


class OutputConflictError(ValueError):
    """The output already holds tables or a run this replay must not be mixed with."""


MANIFEST = "run.json"
"""File under ``_work/<run_id>/`` recording the configuration a run was started with."""


def _config_diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Dotted keys whose values differ between two config dicts."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            out += _config_diff(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
        return out
    return [] if a == b else [path or "(top level)"]


def check_output_path(output: str) -> None:
    """Raise :class:`OutputConflictError` when ``output`` is neither a filesystem path nor an
    object-store URL the replay supports (``s3a://``, ``s3://``, ``gs://``, ``abfs(s)://``:
    :func:`pipelines.storage.fs.check_location`, docs/storage.md). The work folder (``_work``:
    manifest, state, staging, checkpoint) lives under the output too, so executors reach it:
    on a cluster the output is an object store or a shared mount (docs/cluster.md)."""
    try:
        storage.check_location(output)
    except storage.StorageError as exc:
        raise OutputConflictError(str(exc)) from None


def check_output(output: str, run_id: str, config: ReplayConfig,
                 preset: str | None = None,
                 lanes: Mapping[str, ReplayConfig] | None = None, new: bool = False) -> None:
    """Refuse to write into ``output`` when that would mix incompatible data.

    Raises :class:`OutputConflictError` listing every problem: an existing table whose schema
    or partitioning differs from :mod:`pipelines.contract.schemas` (written by another version),
    or a ``run_id`` already started (``_work/<run_id>/run.json``) or finished (``runs`` row) with a
    different configuration or input preset (``lanes``: a sweep's runs by run_id, part of its
    manifest; ``new``: the run must not exist at all — a sweep's scenario starting afresh).
    Reads only Delta logs and small files (delta-rs),
    so it runs before Spark starts. A fresh output or a restart of the same run passes.
    An output URL of an unsupported scheme is refused too (:func:`check_output_path`).
    """
    check_output_path(output)
    store = DeltaStore(output, engine="delta-rs", spark=None)
    problems = [f"table {p}" for p in store.schema_problems()]
    want: dict[str, Any] = {"config": run_identity(config.to_dict()), "preset": preset}
    if lanes:
        want["lanes"] = {k: run_identity(v.to_dict()) for k, v in lanes.items()}
    manifest = storage.join(output, "_work", run_id, MANIFEST)
    if storage.is_file(manifest):
        have = json.loads(storage.read_bytes(manifest).decode("utf-8"))
        have.pop("topic_bins", None)  # resolved when the run started: not part of its identity
        have["config"] = run_identity(have.get("config", {}))
        if "lanes" in have:
            have["lanes"] = {k: run_identity(v) for k, v in have["lanes"].items()}
        changed = _config_diff(have, want)
        if changed:
            problems.append(f"run {run_id} was started with a different configuration "
                            f"(differs in {', '.join(changed[:6])}"
                            f"{', …' if len(changed) > 6 else ''})")
    if not problems:  # the runs table (if any) is readable
        runs = store.read("runs", run_id=run_id)
        configs = [run_identity(json.loads(c)) for c in set(runs["config"])] if len(runs) else []
        if new and configs:  # a sweep's run must not be another sweep's or replay's
            problems.append(f"run {run_id} already exists")
        elif any(c != want["config"] for c in configs):
            changed = _config_diff(configs[0], want["config"])
            problems.append(f"run {run_id} already finished with a different configuration "
                            f"(differs in {', '.join(changed[:6]) or 'config'})")
    if problems:
        raise OutputConflictError(
            f"output {output} cannot take run {run_id}: {'; '.join(problems)}; use another "
            f"--run-id or --output (or delete the run's rows and "
            f"{storage.join(output, '_work', run_id)})")

FINALIZE_WINDOWS_PER_JOB = 64
"""End-of-input windows run per micro-batch of the emulation query and committed together
(:meth:`Replay._finalize_windows`): a micro-batch of the three stateful operators costs about
4.5 s on these machines whatever it does (planning, state store loads and commits); memory
is bounded by one window whatever the count, since each operator reads its windows' input
itself. A crash recomputes at most this many windows (about 32 M messages)."""

FINALIZE_WINDOW_MESSAGES = 500_000
"""A batch replay finalizes at most about this many staged messages per window. Memory bound:
a Python worker holds its topic's messages of one window (as pandas, about 0.5 KB a message);
the driver and the JVM hold only per-topic states (the stage's rows go to files)."""



@dataclass(frozen=True)
class RunSpec:
    """One run a replay writes: its ``run_id`` and config. A replay writes one; a sweep
    (``topic-replay sweep``) one per scenario from a single ingest: the scenarios share the
    ingest settings (``input``, ``output``, ``replay`` speed, lateness and trigger sizes) and
    differ in what the emulation does (``pipelines.analysis.whatif.sweep.INGEST_KEYS``)."""

    run_id: str
    config: ReplayConfig


@dataclass
class LaneState:
    """What one run (lane) of a replay carries between windows: the run's own counts (entries,
    dispatched). The emulation's state lives in the emulation query's state store."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, n: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + int(n)


@dataclass
class ReplayState:
    """Everything the replay carries between micro-batches (pickled into ``state/``,
    :data:`REPLAY_STATE_FORMAT`): the ingest's progress and counts, shared by its runs, and each
    run's :class:`LaneState`."""

    batch_id: int = -1
    horizon_ms: int | None = None  # emulated-clock ms; messages < horizon are finalized
    max_event_ms: int | None = None
    first_event_ms: int | None = None
    finalized: bool = False
    lanes: dict[str, LaneState] = field(default_factory=dict)  # run_id → its state
    counts: dict[str, int] = field(default_factory=dict)
    staged: dict[str, int] = field(default_factory=dict)  # topic → messages staged so far
    # JSON: whether a micro-batch with records has been checked for absent mapped fields, and
    # the (contract column, source field) pairs no record of it had (plain defaults: a state
    # pickled by an older version reads them from the class).
    fields_checked: bool = False
    missing_fields: tuple[tuple[str, str], ...] = ()

    def add(self, name: str, n: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + int(n)

    def lane(self, run_id: str) -> LaneState:
        """The state of run ``run_id`` (new when unseen)."""
        return self.lanes.setdefault(run_id, LaneState())


REPLAY_STATE_FORMAT = 2
"""Version of the replay's state files (``_work/<run_id>/state/<batch_id>.pkl``: the pickled
``(format, ReplayState)``). Pickles name a class by its module path, so moving or reshaping
:class:`ReplayState` / :class:`LaneState` bumps it, and a state file of another format is
refused (:func:`read_state`) instead of failing to unpickle. 1: a bare ``ReplayState`` of
``pipelines.replay``; 2: the module moved to ``pipelines.spark.replay`` (issue #19's layout)."""


def state_blob(state: ReplayState) -> bytes:
    """What a state file holds: ``state`` pickled with :data:`REPLAY_STATE_FORMAT`."""
    return pickle.dumps((REPLAY_STATE_FORMAT, state))


def read_state(blob: bytes, where: str) -> ReplayState:
    """The :class:`ReplayState` of a state file's ``blob`` (``where``: the file, for the
    message). ``handover.StateFormatError`` when it was written in another format."""
    try:
        loaded = pickle.loads(blob)
    except (ModuleNotFoundError, AttributeError):  # format 1: a class no longer where it was
        loaded = None
    if (isinstance(loaded, tuple) and len(loaded) == 2 and loaded[0] == REPLAY_STATE_FORMAT
            and isinstance(loaded[1], ReplayState)):
        return loaded[1]
    fmt = loaded[0] if isinstance(loaded, tuple) and loaded else 1
    raise handover.StateFormatError(
        f"the replay state {where} is of format {fmt}, this version reads format "
        f"{REPLAY_STATE_FORMAT}: replay into a new --output or --run-id")


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
    stage_s: dict[str, float] = field(init=False,
                                      default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    _clock: list[list[float]] = field(init=False, default_factory=list, repr=False)
    pseudonymize: Pseudonymizer | None = field(init=False, default=None, repr=False)
    topic_bins: int = field(init=False, default=1)  # the run's (its manifest's)
    stop_requested: threading.Event = field(init=False, default_factory=threading.Event,
                                            repr=False)
    _batch_lock: threading.Lock = field(init=False, default_factory=threading.Lock, repr=False)
    _in_batch: bool = field(init=False, default=False, repr=False)

    def __post_init__(self) -> None:
        sweep = bool(self.runs)
        self.runs = tuple(self.runs) or (RunSpec(self.run_id, self.config),)
        lanes = {r.run_id: r.config for r in self.runs} if sweep else None
        check_output(self.output, self.run_id, self.config, self.input_spec.preset, lanes)
        if sweep:  # each scenario's run must be new or this sweep's own
            fresh = not storage.is_file(storage.join(self.output, "_work", self.run_id,
                                                     MANIFEST))
            for r in self.runs:
                check_output(self.output, r.run_id, r.config, self.input_spec.preset,
                             new=fresh)
        # Absolute: executors resolve the staging and window folders themselves, and on a
        # cluster their working folder is not the driver's (a URL stays as it is).
        self.output = storage.absolute(self.output)
        if storage.scheme(self.output) in storage.S3_SCHEMES:
            from pipelines.spark.session import require_s3a  # noqa: PLC0415

            require_s3a(self.spark, self.output)
        if self.kafka is not None and not is_connect(self.spark):
            require_kafka(self.spark)  # StorageError: one sentence, before anything is written
        # input.pseudonymize: its secret is read now (PrivacyError when it is missing)
        self.pseudonymize = pseudonymizer(self.config)
        self.store = open_store(self.output, engine=self.config.output.engine, spark=self.spark)
        manifest = storage.join(self.work_dir, MANIFEST)
        if not storage.is_file(manifest):
            # topic bins: a run constant (the emulation's state is keyed by them), kept here
            self.topic_bins = self.config.replay.topic_bins or default_bins(self.spark)
            storage.write_bytes(manifest, json.dumps(
                {"config": self.config.to_dict(), "preset": self.input_spec.preset,
                 "topic_bins": self.topic_bins,
                 **({"lanes": {k: v.to_dict() for k, v in lanes.items()}} if lanes else {})},
                sort_keys=True).encode("utf-8"))
        else:
            recorded = json.loads(storage.read_bytes(manifest).decode("utf-8"))
            self.topic_bins = int(recorded.get("topic_bins") or self.config.replay.topic_bins
                                  or default_bins(self.spark))
        self.state = self._load_state()

    # ---- paths --------------------------------------------------------------------------------
    def _key_profiles(self, run_id: str) -> str:
        """Where the end of input's key-profile files of ``run_id`` are kept until the answers
        are written (``<work_dir>/key_profile/<run_id>``; rewritten whole by a re-run)."""
        return storage.join(self.work_dir, KEY_PROFILE_KIND, run_id)

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

    # ---- state ------------------------------------------------------------------------------
    def _state_file(self, batch_id: int) -> str:
        return storage.join(self.work_dir, "state", f"{batch_id:020d}.pkl")

    def _load_state(self) -> ReplayState:
        """Latest committed state (the checkpoint decides which batches re-run)."""
        return self._state_before(2**63)

    def _state_before(self, batch_id: int) -> ReplayState:
        """State committed by the last batch before ``batch_id`` (a re-run starts from it)."""
        folder = storage.join(self.work_dir, "state")
        files = [f for f in storage.list_files(folder, ".pkl")
                 if int(f.removesuffix(".pkl")) < batch_id]
        if not files:
            return ReplayState()
        path = storage.join(folder, files[-1])
        return read_state(storage.read_bytes(path), path)

    def _save_state(self) -> int:
        """Write the state of the current batch; returns its size in bytes."""
        blob = state_blob(self.state)
        # atomic: a state file is whole or absent
        storage.write_bytes(self._state_file(self.state.batch_id), blob)
        return len(blob)

    # ---- stage timings (wall clock; only in the ``runs`` table's ``timings``) -----------------
    def _tick(self) -> None:
        """Start timing a stage; a stage timed inside it is excluded from it (exclusive s)."""
        self._clock.append([time.perf_counter(), 0.0])

    def _tock(self, stage: str) -> None:
        """Stop the innermost timer and add its exclusive seconds to ``stage_s[stage]``."""
        t0, inner = self._clock.pop()
        dt = time.perf_counter() - t0
        self.stage_s[stage] = self.stage_s.get(stage, 0.0) + dt - inner
        if self._clock:
            self._clock[-1][1] += dt

    @contextmanager
    def _timed(self, stage: str) -> Iterator[None]:
        self._tick()
        try:
            yield
        finally:
            self._tock(stage)

    # ---- writes -------------------------------------------------------------------------------
    def write(self, table: str, data: pd.DataFrame, version: int, replace: bool = False,
              run_id: str | None = None) -> None:
        """Idempotent append of the driver-side rows ``data`` (the control plane's small
        tables, ``runs``) to ``table`` for run ``run_id`` (default: the replay's only run; app
        transaction ``(run, table)``, ``version``); ``replace=True`` atomically replaces the
        run's rows instead (snapshot tables: ``segments``, ``runs``). Big tables go through
        :meth:`write_staged`."""
        if table not in self.config.output.tables or data.empty:
            return
        run_id = run_id or self.runs[0].run_id
        # Stage-side bookkeeping columns are not table columns.
        keep = [c for c in arrow_schema(table).names if c in data.columns]
        data = data[keep].assign(run_id=run_id)
        app_id = table_app_id(run_id, table)
        with self._timed("delta_write"):
            if replace:
                self.store.replace_run(table, data, run_id, app_id=app_id, version=version)
            else:
                self.store.append(table, data, app_id=app_id, version=version)
        _after_write(table, version)

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
            self.state = self._load_state()

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
        with self._timed("delta_write"):
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
        """One micro-batch: its records staged and quarantined (:meth:`_ingest`), the counts,
        the horizon (finalizing what it passed when streaming), the state saved."""
        t0 = time.time()
        if batch_id <= self.state.batch_id:  # re-delivered batch already committed
            return
        self.state = self._state_before(batch_id)
        self._tick()  # ingest_hash: everything below except the stages/writes timed inside
        horizon = self.state.horizon_ms
        fields = Observation()  # records and present fields, counted by the staging pass
        salvaged = self._ingest(raw, batch_id, fields)
        fault(f"after_staging:{batch_id}")
        stats = self._staged_stats(batch_id)
        self.state.add("keyless", _staged_keyless(self.staging, batch_id))
        if not salvaged and not self.state.fields_checked:
            self._check_fields(fields, batch_id)
        n_quarantined, n_late = self._quarantine(batch_id)
        fault(f"after_quarantine:{batch_id}")
        self.state.add("quarantined", n_quarantined)
        self.state.add("late", n_late)
        self._advance(stats, horizon, batch_id)
        self.state.batch_id = batch_id
        state_bytes = self._save_state()
        fault(f"after_state:{batch_id}")
        self._tock("ingest_hash")
        self.progress(BatchProgress(
            line=f"batch {batch_id}: accepted {stats['n']}, quarantined {n_quarantined}, "
                 f"horizon {self._fmt_time(self.state.horizon_ms)}, "
                 f"state {state_bytes:,} bytes ({time.time() - t0:.1f}s)",
            records=stats["n"] + n_quarantined,
            total_accepted=self.state.counts.get("accepted", 0),
            total_quarantined=self.state.counts.get("quarantined", 0),
            latest_publish_time=self._fmt_time(self.state.max_event_ms)[:19]))  # to the second

    def _advance(self, stats: Mapping[str, Any], horizon: int | None, batch_id: int) -> None:
        """Count micro-batch ``batch_id``'s staged messages (``stats``: :meth:`_staged_stats`),
        move the event-time bounds and, streaming, finalize the window up to the new horizon
        (``max(event_ms) - allowed_lateness``, never below ``horizon``, the one before it). A
        batch replay finalizes once, at end of input, so file order never matters."""
        self.state.add("accepted", stats["n"])
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
        if (self.streaming and not self.state.finalized and new_horizon is not None
                and (horizon is None or new_horizon > horizon)):
            self._finalize_window(new_horizon, batch_id, final=False)

    def _ingest(self, raw: DataFrame, batch_id: int, fields: Observation) -> bool:
        """Micro-batch ``batch_id``'s records through the rules in one pass (:meth:`_stage`):
        accepted ones staged, quarantined ones written to :meth:`_quarantine_dir`. When an
        input file cannot be read (fully), the readable records go through again and the file
        is quarantined (:meth:`_salvage`). Returns whether files were salvaged (then
        ``fields`` may hold no metrics)."""
        try:
            self._stage(raw, batch_id, fields)
            return False
        except Exception as exc:  # an input file that cannot be read (fully): salvage the rest
            raw, bad_files = self._salvage(raw, batch_id, exc)
            self._stage(raw, batch_id, None, bad_files)
            return True

    def _stage(self, raw: DataFrame, batch_id: int, fields: Observation | None,
               bad_files: DataFrame | None = None) -> None:
        """The staging pass of a micro-batch's raw records
        (``pipelines.spark.staging_pass.stage_batch``: the rules of ``pipelines.ingest.rules``,
        key hashes and ``input.pseudonymize`` in the one Python pass that writes the staged
        files, rewritten whole on a re-run, partitioned by topic
        (``pipelines.storage.staging.STAGING_TOPIC_COLUMN``) so the control plane reads a topic
        bin alone). Records
        the rules reject, and accepted ones older than the finalized horizon (``late``), come
        out of the pass and are written with ``bad_files`` (salvage's rows) by
        :meth:`_write_quarantine`. ``fields``: the mapped records' metrics
        (``pipelines.spark.ingest.map_records``)."""
        plan = StagingPlan(self.input_spec, self.state.horizon_ms, self.state.finalized,
                           self.pseudonymize, self.topic_bins)
        stage_batch(map_records(raw, self.input_spec, fields), self.staging, batch_id,
                    plan, lambda v: self._write_quarantine(v, batch_id, bad_files))

    def _check_fields(self, parsed: Observation, batch_id: int) -> None:
        """JSON only, on the first micro-batch with records: each mapped field of
        ``input_spec.checked_sources()`` that no record has (absent or null in all of them:
        ``map_records``' ``present_<column>`` metrics) is reported on the console and kept in
        ``state.missing_fields`` (the ``runs`` counts, the run summary). Such a field reads as
        null: a typo in ``input.columns`` would otherwise make, e.g., every message keyless."""
        sources = self.input_spec.checked_sources()
        if self.input_spec.format != "json" or not sources:
            self.state.fields_checked = True
            return
        try:
            seen = parsed.get
        except Exception:  # py4j: no metrics row (the plan lost the node); try the next batch
            return
        if not seen.get("records"):
            return
        self.state.fields_checked = True
        missing = tuple((c, s) for c, s in sources.items()
                        if seen.get(f"{PRESENT_PREFIX}{c}") == 0)
        self.state.missing_fields = missing
        for c, s in missing:
            self.progress(f"batch {batch_id}: warning: no record has field {s!r} (mapped to "
                          f"{c}); {c} is null for every message — check input.columns")

    def _quarantine_dir(self, batch_id: int) -> str:
        """Where micro-batch ``batch_id``'s quarantined records wait for their commit."""
        return storage.join(self.work_dir, "quarantine", str(batch_id))

    def _write_quarantine(self, verdicts: DataFrame, batch_id: int,
                          bad_files: DataFrame | None) -> None:
        """Run the staging pass of micro-batch ``batch_id`` (``verdicts``: its rows of rejected
        and late records, kept on the executors: one job, and the pass runs once) and write
        those records, with ``bad_files``, as ``quarantine`` rows (``source_file``,
        ``raw_record``, ``reason``; ``pipelines.spark.ingest.quarantine_rows``) in Parquet under
        :meth:`_quarantine_dir`, by the executors (the driver never holds the rows), replacing
        what is there; nothing to quarantine: no folder (a crashed run's is removed), no second
        job. ``output.quarantine_raw: false``: a record's ``raw_record`` is ``sha256:<hex>`` of
        its text (:func:`pipelines.ingest.privacy.record_digest`); a file's keeps its read error."""
        counted = Observation()
        kept = verdicts.observe(counted, F.count(F.lit(1)).alias("rows")).localCheckpoint()
        if bad_files is None and _observed(counted, "rows") == 0:
            storage.delete_dir(self._quarantine_dir(batch_id))
            return
        q = quarantine_rows(kept, self.input_spec)
        q = q if bad_files is None else q.unionByName(bad_files)
        if not self.config.output.quarantine_raw:  # only a digest of each record's text
            raw = F.col("raw_record")
            q = q.withColumn("raw_record", F.when(F.col("reason").isin(*FILE_REASONS), raw)
                             .otherwise(F.concat(F.lit(DIGEST_PREFIX), F.sha2(raw, 256))))
        q.withColumn("batch_id", F.lit(batch_id).cast("long")).write.mode("overwrite").parquet(
            self._quarantine_dir(batch_id))

    def _quarantine(self, batch_id: int) -> tuple[int, int]:
        """Commit the files :meth:`_write_quarantine` wrote for micro-batch ``batch_id`` to the
        ``quarantine`` table (each run's), then remove them. Returns ``(records, late
        records)``."""
        path = self._quarantine_dir(batch_id)
        n = _staged_rows(path)  # counted first: committing may move the files
        late = storage.count_rows(path, pc.field("reason") == LATE) if n else 0
        if n:
            for r in self.runs[:-1]:  # the files are moved into the table: a copy each
                copy = f"{path}.{r.run_id}"
                storage.copy_dir(path, copy)
                self.write_staged("quarantine", copy, batch_id, r.run_id)
                storage.delete_dir(copy)
            self.write_staged("quarantine", path, batch_id, self.runs[-1].run_id)
        storage.delete_dir(path)
        return n, late

    def _staged_stats(self, batch_id: int) -> dict[str, Any]:
        """Micro-batch ``batch_id``'s staged messages: ``n``, ``min`` / ``max`` event ms
        (``None`` when empty), from the staged files' footers
        (``pipelines.storage.staging.staged_batch_stats``);
        their per-topic counts are added to ``state.staged``."""
        stats = staged_batch_stats(self.staging, batch_id)
        for topic, (n, _, _) in stats.items():
            self.state.staged[topic] = self.state.staged.get(topic, 0) + n
        return {"n": sum(n for n, _, _ in stats.values()),
                "min": min((lo for _, lo, _ in stats.values()), default=None),
                "max": max((hi for _, _, hi in stats.values()), default=None)}

    def _salvage(self, raw: DataFrame, batch_id: int,
                 exc: Exception) -> tuple[DataFrame, DataFrame]:
        """After micro-batch ``batch_id`` failed: re-read its files one by one
        (:func:`pipelines.spark.ingest.salvage_files`); re-raises ``exc`` when every file reads
        (the failure was not a file's). Reports each bad file with its path."""
        files = micro_batch_files(self.spark, self.checkpoint, batch_id)
        if not files:
            raise exc
        salvaged, bad = salvage_files(self.spark, files, self.input_spec.format, raw.schema)
        rows = bad.collect()
        if not rows:
            raise exc
        for r in rows:
            self.progress(f"batch {batch_id}: input file {r['source_file']} is "
                          f"{r['reason'].replace('_', ' ')} ({r['raw_record']}); "
                          f"quarantined, continuing with the others")
        self.state.add("bad_files", len(rows))
        return salvaged, bad

    @property
    def lateness_ms(self) -> int:
        return int(self.config.replay.allowed_lateness_s * 1000 / self.config.replay.speed)

    def finalize(self) -> None:
        """End of input: finalize everything left, in bounded event-time windows.

        The staged messages are cut into windows of at most about
        :data:`FINALIZE_WINDOW_MESSAGES` messages (:meth:`_final_windows`), finalized
        :data:`FINALIZE_WINDOWS_PER_JOB` at a time (:meth:`_finalize_windows`: one Spark job and
        one commit per table, with the version ``FINAL_VERSION_OFFSET + i`` of the group's last
        window ``i``); the state is saved after each group, so a restart recomputes at most one
        group, cut the same way (it resumes at the first window past the saved horizon). The
        last window (horizon = +∞) is the end of input. Memory is bounded by the window, not the
        input; the tables do not depend on the windows (the core is chunking-invariant).
        After :meth:`request_stop` it returns between two groups (``state.finalized`` stays
        false; a restart finalizes the rest).
        """
        if self.state.finalized:  # records read after finalization were late: recount
            self._write_runs(FINAL_VERSION_OFFSET + max(self.state.batch_id, 0))
            self._save_state()
            return
        windows = self._final_windows()
        done = self.state.horizon_ms
        todo = [(i, hi) for i, hi in enumerate(windows)  # not finalized before a restart
                if hi is None or done is None or hi > done]
        t0 = time.time()
        for start in range(0, len(todo), FINALIZE_WINDOWS_PER_JOB):
            if self.stopped:  # the groups before are committed and their state saved
                return
            group = todo[start:start + FINALIZE_WINDOWS_PER_JOB]
            last, final = group[-1][0], group[-1][1] is None
            self._finalize_windows([hi for _, hi in group], FINAL_VERSION_OFFSET + last, final)
            # the last group's state is saved once the run is marked finalized, below
            state_bytes = self._save_state() if not final else len(state_blob(self.state))
            for i, hi in group:
                self.progress(f"window {i + 1}/{len(windows)}: finalized up to "
                              f"{self._fmt_time(hi) if hi is not None else 'end of input'}"
                              + (f", state {state_bytes:,} bytes ({time.time() - t0:.1f}s)"
                                 if i == last else ""))
            t0 = time.time()
        with self._timed("findings"):  # from the committed tables (restart-safe, idempotent)
            for r in self.runs:
                write_answers(self.store, r.run_id, r.config,
                              FINAL_VERSION_OFFSET + max(self.state.batch_id, 0),
                              keys=_read_rows(self._key_profiles(r.run_id)))
        self.state.finalized = True
        # The batch id stays that of the last micro-batch: a later micro-batch (new files on
        # a re-run) is then processed, as late, instead of being mistaken for a re-delivery.
        self._write_runs(FINAL_VERSION_OFFSET + max(self.state.batch_id, 0))
        fault("before_final_state")
        self._save_state()

    def _final_windows(self) -> list[int | None]:
        """Upper bounds (emulated ms, exclusive) of the end-of-input windows, ``None`` (= +∞)
        last. Computed from ALL staged messages (so the same on a restart): event time is cut
        into at most 4096 equal bins (:func:`pipelines.storage.staging.staged_histogram`, read by
        the driver a column chunk at a time) and consecutive bins are packed greedily into windows
        of at most :data:`FINALIZE_WINDOW_MESSAGES` messages (a bin holding more is one
        window)."""
        histogram = staged_histogram(self.staging, 4096)
        limit = FINALIZE_WINDOW_MESSAGES
        if histogram is None or int(histogram[2].sum()) <= limit:
            return [None]
        lo, width, counts = histogram
        bounds: list[int | None] = []
        total = 0
        for b in np.flatnonzero(counts).tolist():
            n = int(counts[b])
            if total and total + n > limit:
                bounds.append(lo + b * width)
                total = 0
            total += n
        return [*bounds, None]

    # ---- finalized windows ---------------------------------------------------------------------
    def _finalize_window(self, hi: int | None, version: int, final: bool) -> None:
        """Finalize the staged messages from the finalized horizon up to ``hi``
        (:meth:`_finalize_windows` with one window)."""
        self._finalize_windows([hi], version, final)

    def _finalize_windows(self, bounds: Sequence[int | None], version: int, final: bool) -> None:
        """Run consecutive windows of staged messages through the emulation query
        (:mod:`pipelines.spark.emulation`: control plane per topic, batching per producer shard,
        dispatch per subscription, as grouped stateful operators whose state lives in Spark's
        state store), then commit their tables, each in ONE commit with ``version``, and
        advance the horizon past the last window.

        ``bounds``: the windows' upper bounds (emulated ms, exclusive; ``None`` = +∞), in order;
        the first window starts at the finalized horizon, each next one where the previous
        ended. ``final``: the last window is the end of input. The windows go to the query as
        one feed file (one micro-batch); its operators write the tables' rows as Parquet files
        under ``_work/<run_id>/emulation/v=<version>/out/``, which the driver commits
        (:meth:`DeltaStore.append_parquet`) and then removes. The micro-batch's receipt (row
        counts, seconds) is written before any commit, so a restart after a crash finds the
        counts, re-runs an unfinished micro-batch from the state before it, and the commits skip
        what they hold (idempotent by version)."""
        settings = {r.run_id: stages.StageSettings.from_config(r.config, self.state.first_event_ms)
                    for r in self.runs}
        windows, lo = [], self.state.horizon_ms
        for w, hi in enumerate(bounds):
            windows.append(stages.StageWindow(lo, hi, final and w == len(bounds) - 1))
            lo = hi
        emulation = emulation_dir(self.work_dir)
        t0 = time.perf_counter()
        self._tick()
        # every topic with a controller has staged messages: state.staged lists them all
        if write_feed(emulation, version, windows, list(settings), self.topic_bins,
                      len(self.state.staged), snapshot=self.streaming):
            run_emulation(self.spark, emulation, self.staging, settings,
                          self.config.replay.producer_shards)
            receipt = read_receipt(emulation, version)
        else:
            receipt = Receipt({}, {})
        self._attribute(time.perf_counter() - t0, receipt.seconds)
        out = {r: handover.out_dir(emulation, version, r) for r in settings}
        for r, counts in receipt.counts.items():
            for name, n in counts.items():
                self.state.lane(r).add(name, n)
        # the control plane's tables are small (topics × samples): appended as frames
        for kind, table in CONTROL_KINDS.items():
            self._write_rows(table, {r: _read_rows(storage.join(f, kind))
                                     for r, f in out.items()}, version,
                             replace=table == "segments")
        for kind, table in STAGE_KINDS.items():
            self._append_files(table, {r: storage.join(f, kind) for r, f in out.items()},
                               version)
        for r, f in out.items():  # kept for the answers at the end (the files, no commit)
            if storage.is_dir(storage.join(f, KEY_PROFILE_KIND)):
                storage.copy_dir(storage.join(f, KEY_PROFILE_KIND), self._key_profiles(r))
        remove_versions(emulation, version)
        self.state.horizon_ms = windows[-1].hi_ms

    def _write_rows(self, table: str, frames: Mapping[str, pd.DataFrame], version: int,
                    replace: bool = False) -> None:
        """Append each run's driver-side rows (``frames``: run_id → rows) to ``table``, or
        replace each run's rows (``replace``: snapshot tables): one commit per run."""
        for r, data in frames.items():
            self.write(table, data, version, replace=replace, run_id=r)

    def _append_files(self, table: str, parts: Mapping[str, str], version: int) -> None:
        """Append each run's Parquet files (``parts``: run_id → folder; missing folders
        skipped) to ``table``: one commit per run, the files adopted as they are
        (:meth:`DeltaStore.append_parquet`)."""
        for r, path in parts.items():
            self.write_staged(table, path, version, r)

    def _attribute(self, wall_s: float, task_s: Mapping[str, float]) -> None:
        """Close the timer opened for a finalization: its ``wall_s`` (the emulation query and
        its operators) is split over ``control_plane`` / ``batching`` / ``dispatch`` in
        proportion to the seconds the operators spent in each (the receipt's)."""
        self._clock.pop()
        total = sum(task_s.values())
        for stage in ("control_plane", "batching", "dispatch"):
            share = task_s.get(stage, 0.0) / total if total else 1 / 3
            self.stage_s[stage] = self.stage_s.get(stage, 0.0) + wall_s * share
        if self._clock:
            self._clock[-1][1] += wall_s

    def write_staged(self, table: str, path: str, version: int, run_id: str) -> None:
        """Idempotent append of the Parquet files under ``path`` (one kind of the emulation's
        output, or a batch's quarantine) to ``table`` for run ``run_id``; nothing when the
        folder is missing."""
        if table not in self.config.output.tables or not storage.is_dir(path):
            return
        with self._timed("delta_write"):
            self.store.append_parquet(table, path, app_id=table_app_id(run_id, table),
                                      version=version, constants={"run_id": run_id})
        _after_write(table, version)

    # ---- runs & summary ------------------------------------------------------------------------
    def _write_runs(self, version: int) -> None:
        """Each run's ``runs`` row: the ingest's counts and the run's own (entries, ...)."""
        timings = {f"{k}_s": round(v, 3) for k, v in self.stage_s.items()}
        rows = {}
        for r in self.runs:
            counts: dict[str, Any] = {**self.state.counts, **self.state.lane(r.run_id).counts}
            if self.state.missing_fields:
                counts["missing_fields"] = dict(self.state.missing_fields)
            counts["publish_time"] = self.input_spec.publish_time_facts()
            rows[r.run_id] = pd.DataFrame([runs_row(r.config, self.inputs, counts,
                                                    self.store.engine, self.started, timings)])
        self._write_rows("runs", rows, version, replace=True)

    def summary(self) -> dict[str, Any]:
        """The summary of the replay's first (for a plain replay: only) run."""
        return run_summary(self.store, self.runs[0].run_id)

    def _fmt_time(self, emu_ms: int | None) -> str:
        if emu_ms is None:
            return "-"
        return str(pd.Timestamp(int(emu_ms * self.config.replay.speed), unit="ms", tz="UTC"))


@dataclass(frozen=True)
class RemoteBatch:
    """A replay's ``foreachBatch`` function under Spark Connect.

    Spark Connect runs the function in a Python process of the server, pickled: it cannot hold
    the client's session or replay (neither pickles). It holds the replay's arguments instead
    and runs each micro-batch with a replay of its own on ``df.sparkSession``, which starts
    from the state the previous micro-batch saved (``_work/<run_id>/state/``), as a restart
    does; the client reads the state back when the query ends
    (:meth:`Replay.await_query`). The micro-batches' progress lines go to the server's log."""

    config: ReplayConfig
    input_spec: InputSpec
    inputs: tuple[str, ...]
    output: str
    run_id: str
    streaming: bool
    runs: tuple[RunSpec, ...]  # a sweep's scenarios; () for one run

    @classmethod
    def of(cls, replay: Replay) -> RemoteBatch:
        sweep = len(replay.runs) > 1 or replay.runs[0].run_id != replay.run_id
        return cls(replay.config, replay.input_spec, tuple(replay.inputs), replay.output,
                   replay.run_id, replay.streaming, tuple(replay.runs) if sweep else ())

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        replay = Replay(df.sparkSession, self.config, self.input_spec, self.inputs, self.output,
                        self.run_id, streaming=self.streaming, runs=self.runs)
        replay._run_batch(df, batch_id)


def _observed(observation: Observation, name: str) -> int | None:
    """Metric ``name`` of an ``observation`` whose action has run; ``None`` when the plan lost
    it (AQE drops the node when it prunes an empty stage: py4j finds no metrics row)."""
    try:
        value = observation.get.get(name)
    except Exception:  # py4j: no metrics row for this observation
        return None
    return None if value is None else int(value)


def _read_rows(folder: str) -> pd.DataFrame:
    """The rows of the Parquet files under ``folder`` (none when it does not exist)."""
    if not storage.is_dir(folder):
        return pd.DataFrame()
    fs, path = storage.arrow_filesystem(folder)
    return ds.dataset(path, filesystem=fs, format="parquet").to_table().to_pandas()


def _concat(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The non-empty ``frames`` one after the other (an empty frame when none)."""
    rows = [f for f in frames if not f.empty]
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def _staged_keyless(staging: str, batch_id: int) -> int:
    """Keyless messages (null ``key``) staged by micro-batch ``batch_id``, from the staged
    files' footer statistics (the column is read when a writer left none)."""
    n = 0
    for pf in staged_files(f"{staging.rstrip('/')}/batch_id={batch_id}"):
        col = pf.schema_arrow.get_field_index("key")
        for i in range(pf.metadata.num_row_groups):
            st = pf.metadata.row_group(i).column(col).statistics
            if st is not None and st.has_null_count:
                n += int(st.null_count)
            else:
                n += pf.read_row_group(i, columns=["key"]).column(0).null_count
    return n


def _staged_rows(path: str) -> int:
    """Rows of a window's staged output of one kind (0 when the kind had none)."""
    return storage.count_rows(path)
