"""``run`` and ``stream``: one replay of message logs (or Kafka topics) into an output.

Before Spark starts: the Spark options, the config and input spec, the output's run identity
(:mod:`pipelines.app.inputs`, :mod:`pipelines.app.outputs`). Then ``run --engine local``
replays in process (``pipelines.engine.local``), else a ``pipelines.spark.replay.Replay``
runs on the command's session until the end of input (``run``) or a stop (``stream``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from pipelines.analysis.validation import END_OF_RUN_VALIDATION_ID, validate_run
from pipelines.app.errors import UsageError
from pipelines.app.inputs import config_and_spec, kafka_source
from pipelines.app.outputs import check_run_output
from pipelines.app.spark_options import check_spark_options, spark_log
from pipelines.contract.config import ReplayConfig
from pipelines.contract.presets import InputSpec
from pipelines.engine.local import check_spec, resolve_local_spec, run_local
from pipelines.engine.summary import format_summary, nothing_accepted, run_summary
from pipelines.spark.command_session import replay_session, session_active, stop_command_session
from pipelines.spark.ingest import resolve_input_spec
from pipelines.spark.progress import ReplayProgress
from pipelines.spark.replay import Replay
from pipelines.storage.delta import DeltaStore
from pipelines.storage.fs import StorageError


def run(args: argparse.Namespace) -> int:
    """``topic-replay run``: a batch replay; its summary; exit 0, or 1 when it accepted
    nothing (without ``--allow-empty``)."""
    return _replay(args, stream=False)


def stream(args: argparse.Namespace) -> int:
    """``topic-replay stream``: a continuous replay until SIGINT / SIGTERM; exit 0."""
    return _replay(args, stream=True)


def _replay(args: argparse.Namespace, stream: bool) -> int:
    check_spark_options(args)
    cfg, spec = config_and_spec(args, kafka_ok=True)
    kafka = kafka_source(args, cfg)
    run_id = args.run_id or "default"
    check_run_output(args.output, run_id, cfg, spec.preset)
    if getattr(args, "engine", "spark") == "local":
        if kafka is not None:
            raise UsageError("the local engine reads files only; read Kafka topics with "
                             "--engine spark")
        return _replay_local(args, cfg, spec, run_id)

    # SIGTERM (systemd, Airflow, kill) or SIGINT (Ctrl-C), to the driver or its whole process
    # group: the replay stops after the micro-batch in progress (the JVM, started in a session
    # of its own with both signals ignored, keeps serving it), prints one status line and
    # exits 0; a restart resumes. A signal before the replay exists stops it as it starts.
    stop = threading.Event()
    replay: Replay | None = None

    def _stop(*_: Any) -> None:
        stop.set()
        if replay is not None:
            replay.request_stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    progress = ReplayProgress()  # a bar on a terminal, plain lines otherwise
    owned = not session_active()  # else a caller's (tests): leave it running
    spark = replay_session(args.master, args.remote, args.shuffle_partitions,
                           spark_log(args, cfg.console.spark_log))
    # again: pyspark's SparkContext installs its own SIGINT handler (cancel every job and
    # raise KeyboardInterrupt), which would abort the micro-batch in progress
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        try:
            spec = resolve_input_spec(spec, spark, args.input)
        except ValueError as exc:  # CSV: no input file has a line to read the header from
            raise UsageError(str(exc)) from None
        try:  # an s3a:// output without hadoop-aws on the classpath
            replay = Replay(spark, cfg, spec, [kafka.url] if kafka else args.input,
                            args.output, run_id, progress=progress, kafka=kafka)
        except StorageError as exc:
            raise UsageError(str(exc)) from None
        if stop.is_set():
            replay.request_stop()
        return _drive(replay, progress, stream, args)
    finally:
        if owned and not stop.is_set():  # the application ends with the command: a cluster's
            stop_command_session(spark)   # master records it as completed


def _replay_local(args: argparse.Namespace, cfg: ReplayConfig, spec: InputSpec,
                  run_id: str) -> int:
    """``run --engine local``: the in-process reference replay (no Spark)."""
    try:
        spec = resolve_local_spec(spec, args.input)
        check_spec(spec)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    summary = run_local(cfg, spec, args.input, args.output, run_id)
    if cfg.output.validate_tables:  # output.validate: the same end-of-run checks as Spark's
        store = DeltaStore(args.output, engine="delta-rs")
        validate_run(store, run_id, END_OF_RUN_VALIDATION_ID,
                     write="validations" in cfg.output.tables)
        summary = run_summary(store, run_id)
    print(format_summary(summary))
    return _exit_code(args, summary)


def _drive(replay: Replay, progress: ReplayProgress, stream: bool,
           args: argparse.Namespace) -> int:
    """Run ``replay`` (batch: to its summary; ``stream``: until stopped) and print the summary
    or, when a stop request ended it, one status line; returns the exit code (0; 1 when a
    finished batch replay accepted nothing, see :func:`_exit_code`)."""
    if not stream:
        with progress:
            summary = replay.run()
        if summary:
            print(format_summary(summary))
            return _exit_code(args, summary)
    else:
        replay.run(stream=True)
        replay.await_query()
        progress.close()
    print(f"stopped; tables under {args.output} are current up to batch "
          f"{replay.state.batch_id}" + ("" if stream else "; run again to finish"))
    return 0


def _exit_code(args: argparse.Namespace, summary: dict[str, Any]) -> int:
    """0, or 1 with one sentence on stderr when the run accepted no record and ``--allow-empty``
    was not given."""
    if getattr(args, "allow_empty", True):
        return 0
    problem = nothing_accepted(summary, DeltaStore(args.output, engine="delta-rs"))
    if problem is None:
        return 0
    print(f"topic-replay: error: {problem}", file=sys.stderr)
    return 1
