"""``topic-replay`` command line (also ``spark-submit jobs/replay.py …``).

Parses arguments, loads the config, builds the session and wires the stages; nothing else.
A user mistake (bad argument, missing input, invalid config) exits with code 2 and one sentence
before any Spark work starts.

The ``pipelines`` modules are imported inside the command that uses them (``# noqa: PLC0415``):
most pull in pyspark, pandas, Delta or matplotlib (1–5 s each), which ``--help`` and a usage
error must not pay.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.analysis.compare import PreparedScenario, Scenario
    from pipelines.contract.config import ReplayConfig
    from pipelines.contract.kafka import KafkaInput
    from pipelines.contract.presets import InputSpec
    from pipelines.spark.progress import ReplayProgress
    from pipelines.spark.replay import Replay
    from pipelines.storage.delta import DeltaStore

if __package__ in (None, ""):  # spark-submit jobs/replay.py: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class UsageError(Exception):
    """A user mistake: reported as one sentence, exit code 2."""


PRIVACY_HELP = """\
personal data (config keys; set with --set KEY=VALUE or in --conf; see docs/privacy.md):
  input.pseudonymize=[producer_name,key]
                        replace these columns by a keyed pseudonym (HMAC-SHA256) as
                        they are read; the key is hashed for routing first, so the
                        emulation's answers do not change (default: [])
  input.pseudonymize_secret_env=NAME
                        environment variable holding the HMAC secret (default
                        TOPIC_REPLAY_SECRET); required when pseudonymize is set
  output.keys=raw|hashed|none
                        messages.key as read (raw, default); no key but its hashes
                        (hashed); neither key nor hash32/segment_hash/hash_b (none)
  output.quarantine_raw=true|false
                        keep quarantined records' raw text (true, default) or only
                        "sha256:<hex>" of it (false)
"""


def _add_replay_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str,
                        help_: str) -> None:
    """The subcommand ``name`` (run, stream, compare or sweep): input, output, config and Spark
    options, and the command's own."""
    r = sub.add_parser(name, help=help_, epilog=PRIVACY_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("--input", action="append", required=True, metavar="PATH",
                   help="message log file or directory (repeatable)")
    r.add_argument("--output", required=True, metavar="DIR", help="output directory")
    r.add_argument("--preset", default=None, help="input column mapping preset")
    r.add_argument("--conf", default=None, metavar="FILE", help="YAML config file")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   dest="sets", help="override a config key (dotted path), repeatable")
    if name == "sweep":
        r.add_argument("--grid", action="append", default=[], dest="grids",
                       metavar="KEY=V1,V2,…",
                       help="a swept config key and its values (repeatable: the scenarios "
                            "are the Cartesian product), e.g. "
                            "policy.split_msg_rate_in=500,1000,2000")
        r.add_argument("--scenario", action="append", default=[], dest="scenarios",
                       metavar="NAME=FILE_OR_SETS",
                       help="a named scenario besides the grid (as in compare; repeatable)")
        r.add_argument("--sweep-id", default="sweep", metavar="NAME",
                       help="the sweep's name (sweeps.sweep_id; its work folder "
                            "DIR/_work/sweep.NAME; default: sweep)")
        r.add_argument("--flap-window-s", type=int, default=None, metavar="S",
                       help="a split undone by a merge of the same range (or the reverse) "
                            "within S seconds is a flap (default 600)")
        r.add_argument("--html", default=None, metavar="FILE",
                       help="also write the sweep's interactive page to FILE")
    if name == "compare":
        r.add_argument("--scenario", action="append", required=True, dest="scenarios",
                       metavar="NAME=FILE_OR_SETS",
                       help="a scenario: its run_id, then a YAML config file or "
                            "key=value overrides separated by ',' or ';' (repeatable)")
        r.add_argument("--html", default=None, metavar="FILE",
                       help="also write the report of the scenarios to FILE")
    elif name != "sweep":
        r.add_argument("--run-id", default=None, help="run id (default: from the config)")
    if name == "run":
        r.add_argument("--engine", choices=("spark", "local"), default="spark",
                       help="spark (default) or local: the in-process reference replay "
                            "without Spark, for inputs that fit in memory")
        r.add_argument("--allow-empty", action="store_true",
                       help="exit 0 even when no record is accepted (default: exit 1 with "
                            "the main quarantine reason)")
    r.add_argument("--master", default=None, help="Spark master (default: local[*])")
    r.add_argument("--remote", default=None, metavar="sc://HOST:PORT",
                   help="run on a Spark Connect server (also SPARK_REMOTE; not with "
                        "--master); Delta writes with delta-rs (docs/cluster.md)")
    r.add_argument("--shuffle-partitions", type=int, default=8,
                   help="spark.sql.shuffle.partitions (default 8)")
    r.add_argument("--verbose", action="store_true",
                   help="also show Spark's own log on the console (default: only "
                        "topic-replay's lines; Spark's log goes to DIR/_work/spark.log; "
                        "config key console.spark_log)")


CAPTURE_TOKEN_ENV = "TOPIC_REPLAY_PULSAR_TOKEN"

CAPTURE_HELP = """\
then: topic-replay run --input DIR --preset pulsar --output OUT (docs/capture.md)
"""


def _add_capture_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``capture`` subcommand: live Pulsar topics into a message log (docs/capture.md)."""
    c = sub.add_parser("capture", help="read live Pulsar topics into a message log folder "
                                       "(Parquet; preset pulsar)", epilog=CAPTURE_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--service-url", required=True, metavar="URL",
                   help="pulsar://HOST:6650 or pulsar+ssl://HOST:6651")
    c.add_argument("--output", required=True, metavar="DIR",
                   help="folder of the capture files (a restart resumes in it)")
    c.add_argument("--topic", action="append", default=[], dest="topics", metavar="NAME",
                   help="a topic (a partitioned topic: all its partitions); repeatable")
    c.add_argument("--topics-pattern", default=None, metavar="REGEX",
                   help="every topic of one namespace whose name matches, e.g. "
                        "'persistent://public/default/orders-.*'")
    c.add_argument("--namespace", default=None, metavar="TENANT/NS",
                   help="every topic of the namespace")
    c.add_argument("--admin-url", default=None, metavar="URL",
                   help="admin REST API that lists a namespace's topics (default: the "
                        "service URL's host, port 8080, or 8443 with TLS)")
    c.add_argument("--start", default="earliest", metavar="WHERE",
                   help="earliest (default), latest, or a publish time (ISO-8601 or epoch "
                        "ms); a topic already captured in DIR resumes instead")
    c.add_argument("--stop-at", default=None, metavar="TIME",
                   help="stop each topic at this publish time (ISO-8601 or epoch ms)")
    c.add_argument("--max-messages", type=int, default=None, metavar="N",
                   help="stop after writing N messages")
    c.add_argument("--until-end", action="store_true",
                   help="stop when the topics hold nothing more to read")
    c.add_argument("--roll-mb", type=float, default=32.0, metavar="MB",
                   help="start a new file when the rows reach MB in memory (default 32)")
    c.add_argument("--roll-seconds", type=float, default=60.0, metavar="S",
                   help="start a new file S seconds after its first row (default 60)")
    a = c.add_argument_group("authentication (as Pulsar clients take it; never printed nor "
                             "written)")
    a.add_argument("--token-file", default=None, metavar="FILE",
                   help=f"a JWT token in a file, or the environment variable "
                        f"{CAPTURE_TOKEN_ENV} (never a command-line value: ps shows those)")
    a.add_argument("--tls-trust-certs", default=None, metavar="FILE",
                   help="CA certificates to trust (pulsar+ssl:// and the admin API)")
    a.add_argument("--tls-cert", default=None, metavar="FILE",
                   help="client certificate for mutual TLS (with --tls-key)")
    a.add_argument("--tls-key", default=None, metavar="FILE", help="its private key")
    a.add_argument("--tls-allow-insecure", action="store_true",
                   help="accept an untrusted broker certificate")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="topic-replay",
        description="Replay message logs through an emulation of Pulsar scalable topics.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_ in (("run", "batch replay: read all inputs, finalize, print the summary"),
                        ("stream", "continuous replay: watch the inputs until stopped"),
                        ("compare", "replay one log under several scenarios (one run_id each) "
                                    "and print their metrics side by side"),
                        ("sweep", "replay one log under a grid of settings from one ingest, "
                                  "the scenarios side by side (one run_id each; the sweeps "
                                  "table)")):
        _add_replay_command(sub, name, help_)
    s = sub.add_parser("summary", help="print the run summary from the tables")
    s.add_argument("--output", required=True, metavar="DIR")
    s.add_argument("--run-id", default=None)
    d = sub.add_parser("diff", help="rows that differ between two runs, per table "
                                    "(exit 0 identical, 1 different)")
    d.add_argument("--output", required=True, metavar="DIR")
    d.add_argument("--run-id", action="append", default=[], dest="run_ids", metavar="ID",
                   help="a run to compare; give it twice (A, then B)")
    d.add_argument("--table", action="append", default=None, dest="tables", metavar="T",
                   help="compare only this table (repeatable; default: every table)")
    d.add_argument("--sample", type=int, default=3, help="differing rows shown per table")
    v = sub.add_parser("validate", help="Great Expectations checks of a run's tables "
                                         "(exit 0 all pass, 1 any failed)")
    v.add_argument("--output", required=True, metavar="DIR")
    v.add_argument("--run-id", default=None, help="run to check (default: the last run)")
    v.add_argument("--allow-unreadable-files", action="store_true",
                   help="pass although input files could not be read, or not whole "
                        "(quarantine reasons unreadable_file, truncated_file; default: fail)")
    rp = sub.add_parser("report", help="write an HTML report (figures and summary) of runs")
    rp.add_argument("--output", required=True, metavar="DIR")
    rp.add_argument("--run-id", action="append", default=[], dest="run_ids", metavar="ID",
                    help="run to report (repeatable: several runs side by side; "
                         "default: the last run)")
    rp.add_argument("--html", required=True, metavar="FILE", help="HTML file to write")
    rp.add_argument("--png-dir", default=None, metavar="DIR",
                    help="also save every figure as a PNG in DIR")
    q = sub.add_parser("sql", help="run a Spark SQL query over an output's tables (each "
                                   "table by its name; docs/delta.md)")
    q.add_argument("--output", required=True, metavar="DIR")
    q.add_argument("query", metavar="QUERY", help='e.g. "SELECT * FROM runs"')
    q.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   dest="fmt", help="table (default), csv or json (one object per line)")
    q.add_argument("--limit", type=int, default=100,
                   help="rows printed at most (default 100; 0 = all)")
    q.add_argument("--master", default=None, help="Spark master (default: local[*])")
    q.add_argument("--remote", default=None, metavar="sc://HOST:PORT",
                   help="query through a Spark Connect server (also SPARK_REMOTE; not with "
                        "--master)")
    m = sub.add_parser("maintain", help="compact small files (OPTIMIZE) and delete removed "
                                        "ones (VACUUM) in an output's tables")
    m.add_argument("--output", required=True, metavar="DIR")
    m.add_argument("--table", action="append", default=None, dest="tables", metavar="T",
                   help="only this table (repeatable; default: every table)")
    m.add_argument("--retain-hours", type=int, default=None, metavar="H",
                   help="VACUUM deletes files removed more than H hours ago (default: the "
                        "tables' delta.deletedFileRetentionDuration, 7 days)")
    m.add_argument("--engine", choices=("auto", "delta-spark", "delta-rs"), default="auto",
                   help="auto (default: delta-spark when the Delta jars are installed), "
                        "delta-spark, or delta-rs (no Spark started)")
    m.add_argument("--master", default=None, help="Spark master (default: local[*])")
    _add_capture_command(sub)
    g = sub.add_parser("generate", help="write message logs from a workload spec")
    g.add_argument("--spec", required=True, metavar="FILE",
                   help="workload spec YAML, or an OpenMessaging Benchmark workload YAML "
                        "(detected by its keys, or forced with --omb)")
    g.add_argument("--output", required=True, metavar="PATH")
    g.add_argument("--omb", action="store_true", help="SPEC is an OMB workload")
    g.add_argument("--producer-rate", type=float, default=None, metavar="MSG_S",
                   help="OMB only: total msg/s to use when the workload's producerRate is 0")
    g.add_argument("--seed", type=int, default=None, help="OMB only: random seed (default 0)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "run": lambda a: _replay(a, stream=False),
        "stream": lambda a: _replay(a, stream=True),
        "summary": _summary, "compare": _compare, "sweep": _sweep, "report": _report,
        "diff": _diff, "validate": _validate, "sql": _sql, "maintain": _maintain,
        "generate": _generate, "capture": _capture,
    }
    try:
        return commands[args.command](args)
    except UsageError as exc:
        print(f"topic-replay: error: {exc}", file=sys.stderr)
        return 2


def _check_remote(args: argparse.Namespace) -> None:
    """Spark Connect (``--remote`` or ``SPARK_REMOTE``) checks before any Spark work:
    ``UsageError`` when it is combined with ``--master`` (Spark Connect's server has its
    own), or ``--remote`` with ``run --engine local`` (which uses no Spark; ``SPARK_REMOTE``
    does not concern it)."""
    remote = getattr(args, "remote", None)
    env = os.environ.get("SPARK_REMOTE") or None
    local = getattr(args, "engine", "spark") == "local"
    if remote is None and (env is None or local):
        return
    where = f"--remote {remote}" if remote is not None else f"SPARK_REMOTE={env}"
    if getattr(args, "master", None) is not None:
        raise UsageError(f"--master {args.master} cannot be combined with {where} (Spark "
                         f"Connect chooses its own master); give only one of them")
    if local:
        raise UsageError(f"--engine local runs without Spark; drop {where} or use --engine "
                         "spark")


def _config_and_spec(args: argparse.Namespace, extra_sets: Sequence[str] = (),
                     what: str = "", kafka_ok: bool = False) -> tuple[ReplayConfig, InputSpec]:
    """Check inputs and config file, load the config (``--conf``, ``--set``, then
    ``extra_sets``) and the input spec of the preset, and check its mapped columns against the
    CSV header or Parquet schema (``pipelines.ingest.input_check``); ``UsageError`` (prefixed by
    ``what``) on any problem. A Kafka input (``kafka_ok``: run and stream only) gets the
    ``kafka`` preset's spec (:func:`_kafka_input`). No Spark."""
    from pipelines.contract.config import ConfigError, load_config  # noqa: PLC0415
    from pipelines.contract.kafka import is_kafka_url  # noqa: PLC0415

    for path in args.input:
        if is_kafka_url(path):
            continue
        if not Path(path).exists() and not (glob.has_magic(path) and glob.glob(path)):
            raise UsageError(f"input path {path} does not exist"
                             + (" (no file matches the pattern)" if glob.has_magic(path) else ""))
    if args.conf and not Path(args.conf).is_file():
        raise UsageError(f"config file {args.conf} does not exist")
    try:
        cfg = load_config(args.conf, [*args.sets, *extra_sets])
    except ConfigError as exc:
        raise UsageError(what + str(exc)) from None
    from pipelines.ingest.privacy import PrivacyError, pseudonymizer  # noqa: PLC0415

    try:  # input.pseudonymize needs its secret: a missing one is a user mistake
        pseudonymizer(cfg)
    except PrivacyError as exc:
        raise UsageError(what + str(exc)) from None
    kafka_spec = _kafka_spec(args, cfg, kafka_ok)
    if kafka_spec is not None:
        return cfg, kafka_spec
    return cfg, _file_spec(args, cfg, what)


def _file_spec(args: argparse.Namespace, cfg: ReplayConfig, what: str) -> InputSpec:
    """The input spec of files: the preset with the config's input section, the files surveyed
    (empty ones skipped with a line, mixed ones refused) and their mapped columns checked, and
    under ``timestamp_format`` auto the unit of epoch numbers guessed (one line);
    ``UsageError`` (prefixed by ``what``) on any problem."""
    from pipelines.contract.presets import get_preset  # noqa: PLC0415
    from pipelines.ingest.input_check import (  # noqa: PLC0415
        InputColumnError,
        InputFilesError,
        check_columns,
        check_files,
        survey_inputs,
    )
    from pipelines.ingest.time_unit import guess_epoch_unit  # noqa: PLC0415

    preset = args.preset or cfg.input.preset
    try:
        spec = get_preset(preset)
    except ValueError as exc:
        raise UsageError(what + str(exc)) from None
    try:
        spec = _input_spec(spec, cfg, args.input)
    except ValueError as exc:  # a preset's own pattern the replay cannot parse
        raise UsageError(what + str(exc)) from None
    survey = survey_inputs(spec, args.input)  # empty files, formats, headers (issue #32)
    try:  # no content, mixed files, a mapped column the header / schema lacks: before Spark
        check_files(spec, survey, need_content=args.command != "stream")
        check_columns(spec, args.input, survey)
    except (InputColumnError, InputFilesError) as exc:
        raise UsageError(what + str(exc)) from None
    if survey.empty and not what:  # once per command (not per scenario)
        names = ", ".join(f.name for f in survey.empty[:3])
        print(f"input: skipping {len(survey.empty)} empty file(s) ({names}"
              f"{', …' if len(survey.empty) > 3 else ''})")
    guess = guess_epoch_unit(spec, args.input)
    if guess is not None:  # timestamp_format auto and numbers: one unit for the whole run
        spec = spec.replace(epoch_unit=guess.unit, epoch_unit_guessed=True)
        if not what:  # once per command (not per scenario)
            print(f"input: {guess.note}")
    return spec


def _kafka_input(args: argparse.Namespace, cfg: ReplayConfig) -> KafkaInput | None:
    """The Kafka input of ``run`` / ``stream`` (a ``kafka://`` URL, or ``input.format:
    kafka``), ``None`` for files; ``UsageError`` when it is incomplete."""
    from pipelines.contract.kafka import KafkaInputError, kafka_input  # noqa: PLC0415

    try:
        return kafka_input(cfg, args.input)
    except KafkaInputError as exc:
        raise UsageError(str(exc)) from None


def _kafka_spec(args: argparse.Namespace, cfg: ReplayConfig,
                kafka_ok: bool) -> InputSpec | None:
    """The ``kafka`` preset's spec when the input is Kafka (``None`` for files);
    ``UsageError`` when the command does not read Kafka (``kafka_ok`` false) or the input is
    incomplete."""
    from pipelines.contract.kafka import KafkaInputError, kafka_spec  # noqa: PLC0415

    if _kafka_input(args, cfg) is None:
        return None
    if not kafka_ok:
        raise UsageError(f"{args.command} reads files; a Kafka input is read by run and "
                         "stream only")
    try:
        return kafka_spec(cfg, args.preset)
    except KafkaInputError as exc:
        raise UsageError(str(exc)) from None


def _replay_local(args: argparse.Namespace, cfg: ReplayConfig, spec: InputSpec,
                  run_id: str) -> int:
    """``run --engine local``: the in-process reference replay (no Spark)."""
    from pipelines.engine.local import check_spec, resolve_local_spec, run_local  # noqa: PLC0415
    from pipelines.engine.summary import format_summary  # noqa: PLC0415

    try:
        spec = resolve_local_spec(spec, args.input)
        check_spec(spec)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    summary = run_local(cfg, spec, args.input, args.output, run_id)
    if cfg.output.validate_tables:  # output.validate: the same end-of-run checks as Spark's
        from pipelines.analysis.validation import (  # noqa: PLC0415
            END_OF_RUN_VALIDATION_ID,
            validate_run,
        )
        from pipelines.engine.summary import run_summary  # noqa: PLC0415
        from pipelines.storage.delta import DeltaStore  # noqa: PLC0415

        store = DeltaStore(args.output, engine="delta-rs")
        validate_run(store, run_id, END_OF_RUN_VALIDATION_ID,
                     write="validations" in cfg.output.tables)
        summary = run_summary(store, run_id)
    print(format_summary(summary))
    return _exit_code(args, summary)


def _exit_code(args: argparse.Namespace, summary: dict[str, Any]) -> int:
    """0, or 1 with one sentence on stderr when the run accepted no record and ``--allow-empty``
    was not given."""
    from pipelines.engine.summary import nothing_accepted  # noqa: PLC0415
    from pipelines.storage.delta import DeltaStore  # noqa: PLC0415

    if getattr(args, "allow_empty", True):
        return 0
    problem = nothing_accepted(summary, DeltaStore(args.output, engine="delta-rs"))
    if problem is None:
        return 0
    print(f"topic-replay: error: {problem}", file=sys.stderr)
    return 1


def _replay(args: argparse.Namespace, stream: bool) -> int:
    _check_remote(args)
    cfg, spec = _config_and_spec(args, kafka_ok=True)
    kafka = _kafka_input(args, cfg)
    run_id = args.run_id or "default"
    _check_run_output(args.output, run_id, cfg, spec.preset)
    if getattr(args, "engine", "spark") == "local":
        if kafka is not None:
            raise UsageError("the local engine reads files only; read Kafka topics with "
                             "--engine spark")
        return _replay_local(args, cfg, spec, run_id)

    from pipelines.spark.ingest import resolve_input_spec  # noqa: PLC0415
    from pipelines.spark.progress import ReplayProgress  # noqa: PLC0415
    from pipelines.spark.replay import Replay  # noqa: PLC0415
    from pipelines.spark.session import build_session  # noqa: PLC0415
    from pipelines.storage.fs import StorageError  # noqa: PLC0415

    # SIGTERM (systemd, Airflow, kill) or SIGINT (Ctrl-C), to the driver or its whole process
    # group: the replay stops after the micro-batch in progress (the JVM, started in a session
    # of its own with both signals ignored, keeps serving it), prints one status line and
    # exits 0; a restart resumes. A signal before the replay exists stops it as it starts.
    stop = threading.Event()

    def _stop(*_: Any) -> None:
        stop.set()
        if replay is not None:
            replay.request_stop()

    replay: Replay | None = None
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    progress = ReplayProgress()  # a bar on a terminal, plain lines otherwise
    # Our bar / lines replace Spark's console progress bar (on a terminal they would overwrite
    # each other; in a log its carriage-return updates are noise).
    from pyspark.sql import SparkSession  # noqa: PLC0415

    owned = SparkSession.getActiveSession() is None  # else a caller's (tests): leave it running
    spark = build_session(master=args.master, shuffle_partitions=args.shuffle_partitions,
                          extra_conf={"spark.ui.showConsoleProgress": "false"},
                          spark_log=_spark_log(args, cfg.console.spark_log),
                          remote=args.remote)
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
            spark.stop()                  # master records it as completed


def _check_run_output(output: str, run_id: str, cfg: ReplayConfig, preset: str) -> None:
    """Before Spark starts: ``UsageError`` when ``output`` holds run ``run_id`` written by
    another version or config, or cannot be read (an unreachable object store)."""
    from pipelines.storage.output_identity import OutputConflictError, check_output  # noqa: PLC0415,E501

    try:
        check_output(output, run_id, cfg, preset)
    except OutputConflictError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # an object store that cannot be reached or read
        raise UsageError(f"output {output} cannot be read: {exc}") from None


def _drive(replay: Replay, progress: ReplayProgress, stream: bool,
           args: argparse.Namespace) -> int:
    """Run ``replay`` (batch: to its summary; ``stream``: until stopped) and print the summary
    or, when a stop request ended it, one status line; returns the exit code (0; 1 when a
    finished batch replay accepted nothing, see :func:`_exit_code`)."""
    output = args.output
    from pipelines.engine.summary import format_summary  # noqa: PLC0415

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
    print(f"stopped; tables under {output} are current up to batch {replay.state.batch_id}"
          + ("" if stream else "; run again to finish"))
    return 0


def _spark_log(args: argparse.Namespace, shown: bool) -> str | None:
    """Where Spark's own log goes: ``None`` (the console) with ``--verbose`` or
    ``console.spark_log: true`` (``shown``), else ``<output>/_work/spark.log`` (for an
    object-store output, which log4j cannot write to: ``topic-replay-spark.log`` in the
    temporary folder)."""
    if args.verbose or shown:
        return None
    from pipelines.storage.fs import is_remote  # noqa: PLC0415

    if is_remote(args.output):
        return str(Path(tempfile.gettempdir()) / "topic-replay-spark.log")
    return str(Path(args.output) / "_work" / "spark.log")


def _input_spec(spec: InputSpec, cfg: ReplayConfig, inputs: list[str]) -> InputSpec:
    """Apply the config's input section (format, columns, defaults, timestamp format) and speed
    to a preset. ``ValueError`` when the result is not a valid spec."""
    changes: dict[str, Any] = {"speed": cfg.replay.speed}
    fmt: str = cfg.input.format
    if fmt == "auto" and spec.preset == "contract":
        fmt = _guess_format(inputs)
    if fmt != "auto":
        changes["format"] = fmt
    if cfg.input.columns:
        changes["columns"] = {**spec.columns, **cfg.input.columns}
        changes["strict_columns"] = tuple(cfg.input.columns)
    if cfg.input.defaults.topic is not None:
        changes["topic"] = cfg.input.defaults.topic
    if spec.preset == "contract":
        changes["producer_name"] = cfg.input.defaults.producer_name
        if cfg.input.time_zone:
            changes["time_zone"] = cfg.input.time_zone
    if cfg.topic.name is not None:
        changes["topic"] = cfg.topic.name
    if cfg.input.timestamp_format is not None:  # over the preset's own format
        changes["publish_time_format"] = cfg.input.timestamp_format
    return spec.replace(**changes)


def _guess_format(inputs: list[str]) -> str:
    paths = [Path(m) for i in inputs
             for m in (sorted(glob.glob(i)) if glob.has_magic(i) else [i])]
    files = [p for i in paths for p in ([i] if i.is_file() else sorted(i.rglob("*")))
             if p.is_file() and not p.name.startswith((".", "_"))]
    for f in files:
        name = f.name.lower().removesuffix(".gz")
        for ext, fmt in ((".parquet", "parquet"), (".csv", "csv"), (".json", "json"),
                         (".jsonl", "json"), (".ndjson", "json")):
            if name.endswith(ext):
                return fmt
    raise UsageError("cannot tell the input format from the file names; set input.format "
                     "(--set input.format=json|csv|parquet)")


def _summary(args: argparse.Namespace) -> int:
    from pipelines.engine.summary import format_summary, run_summary  # noqa: PLC0415

    store, run_id = _finished_run(args.output, args.run_id)
    print(format_summary(run_summary(store, run_id)))
    return 0


def _require_output(output: str) -> None:
    """``UsageError`` when the output directory (or object-store prefix) does not exist."""
    from pipelines.storage.fs import StorageError, is_dir  # noqa: PLC0415

    try:
        found = is_dir(output)
    except (StorageError, OSError) as exc:  # an unsupported scheme, an unreachable store
        raise UsageError(f"output {output} cannot be read: {exc}") from None
    if not found:
        raise UsageError(f"output directory {output} does not exist")


def _require_tables(tables: Sequence[str] | None) -> None:
    """``UsageError`` naming any of ``tables`` that is not an output table."""
    from pipelines.contract.schemas import table_names  # noqa: PLC0415

    unknown = [t for t in tables or [] if t not in table_names()]
    if unknown:
        raise UsageError(f"unknown table {', '.join(unknown)}; tables: "
                         f"{', '.join(table_names())}")


def _finished_run(output: str, run_id: str | None) -> tuple[DeltaStore, str]:
    """The output's store and ``run_id`` (default: the last finished run); ``UsageError`` when
    the output, or the run in it, does not exist."""
    _require_output(output)
    from pipelines.storage.delta import DeltaStore  # noqa: PLC0415

    store = DeltaStore(output, engine="delta-rs")
    runs = store.read("runs")
    if runs.empty:
        raise UsageError(f"{output} holds no finished run")
    run_id = run_id or str(runs["run_id"].iloc[-1])
    if run_id not in set(runs["run_id"]):
        raise UsageError(f"run {run_id} is not in {output}; runs: "
                         f"{', '.join(sorted(set(runs['run_id'])))}")
    return store, run_id


def _diff(args: argparse.Namespace) -> int:
    if len(args.run_ids) != 2:
        raise UsageError(f"diff needs exactly two --run-id (A and B), got {len(args.run_ids)}")
    _require_output(args.output)
    from pipelines.analysis.diff import diff_runs, format_diff, run_ids  # noqa: PLC0415
    from pipelines.storage.delta import DeltaStore  # noqa: PLC0415

    _require_tables(args.tables)
    store = DeltaStore(args.output, engine="delta-rs")
    present = run_ids(store)
    for run in args.run_ids:
        if run not in present:
            raise UsageError(f"run {run} has no rows in {args.output}; runs: "
                             f"{', '.join(sorted(present)) or 'none'}")
    a, b = args.run_ids
    diffs = diff_runs(store, a, b, tables=args.tables, sample=args.sample)
    print(format_diff(diffs, a, b))
    return 0 if all(d.identical for d in diffs) else 1


def _validate(args: argparse.Namespace) -> int:
    from pipelines.analysis.validation import format_validation, validate_run  # noqa: PLC0415

    store, run_id = _finished_run(args.output, args.run_id)
    result = validate_run(store, run_id, allow_unreadable_files=args.allow_unreadable_files)
    print(format_validation(result))
    return 0 if result.success else 1


def _quiet_session(master: str | None, remote: str | None = None) -> SparkSession:
    """A SparkSession for a short command: no progress bar, only errors logged (a Spark
    Connect session, ``remote`` or ``SPARK_REMOTE``, logs on its server)."""
    from pipelines.spark.session import build_session, is_connect  # noqa: PLC0415

    spark = build_session(app_name="topic-replay-sql", master=master, shuffle_partitions=2,
                          extra_conf={"spark.ui.showConsoleProgress": "false",
                                      "spark.ui.enabled": "false"}, remote=remote)
    if not is_connect(spark):
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def _sql(args: argparse.Namespace) -> int:
    _check_remote(args)
    _require_output(args.output)
    if args.limit < 0:
        raise UsageError(f"--limit must be >= 0, got {args.limit}")
    from pipelines.spark.sql import (  # noqa: PLC0415
        QueryError,
        format_rows,
        register_tables,
        run_query,
    )
    from pipelines.storage.delta import DeltaStore  # noqa: PLC0415

    store = DeltaStore(args.output, spark=_quiet_session(args.master, args.remote))
    if not register_tables(store):
        raise UsageError(f"{args.output} holds no output table")
    try:
        rows, truncated = run_query(store.spark, args.query, args.limit)
    except QueryError as exc:
        raise UsageError(f"query failed: {exc}") from None
    print(format_rows(rows, args.fmt))
    if truncated:
        print(f"topic-replay: showing the first {args.limit} rows (--limit 0 for all)",
              file=sys.stderr)
    return 0


def _maintain(args: argparse.Namespace) -> int:
    _require_output(args.output)
    _require_tables(args.tables)
    if args.retain_hours is not None and args.retain_hours < 0:
        raise UsageError(f"--retain-hours must be >= 0, got {args.retain_hours}")
    from pipelines.spark.sql import format_rows, maintain_tables  # noqa: PLC0415
    from pipelines.storage.delta import DeltaStore  # noqa: PLC0415

    spark = None if args.engine == "delta-rs" else _quiet_session(args.master)
    try:
        store = DeltaStore(args.output, engine=args.engine, spark=spark)
    except ValueError as exc:
        raise UsageError(str(exc).split(". ")[0]) from None
    result = maintain_tables(store, args.tables, args.retain_hours)
    print(format_rows(result, "table"))
    print(f"maintained {len(result)} table(s) under {args.output} with {store.engine}")
    return 0


def _known_runs(output: str, wanted: Sequence[str]) -> list[str]:
    """``wanted`` run ids (default: the last run) checked against the ``runs`` table."""
    _require_output(output)
    from pipelines.storage.delta import DeltaStore  # noqa: PLC0415

    runs = DeltaStore(output, engine="delta-rs").read("runs")
    if runs.empty:
        raise UsageError(f"{output} holds no finished run")
    present = set(runs["run_id"])
    chosen = list(dict.fromkeys(wanted)) or [str(runs["run_id"].iloc[-1])]
    for run_id in chosen:
        if run_id not in present:
            raise UsageError(f"run {run_id} is not in {output}; runs: "
                             f"{', '.join(sorted(present))}")
    return chosen


def _report(args: argparse.Namespace) -> int:
    run_ids = _known_runs(args.output, args.run_ids)
    if Path(args.html).is_dir():
        raise UsageError(f"--html {args.html} is a directory; give a file name")
    from pipelines.analysis.compare import format_comparison, metrics_frame  # noqa: PLC0415
    from pipelines.analysis.report import write_report  # noqa: PLC0415

    result = write_report(args.output, run_ids, args.html, png_dir=args.png_dir)
    print(format_comparison(metrics_frame(result["metrics"])))
    print(f"report: {result['html']} ({result['figures']} figures)")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from pipelines.analysis.compare import (  # noqa: PLC0415
        PreparedScenario,
        ScenarioError,
        check_reuse,
        format_comparison,
        parse_scenario,
    )

    _check_remote(args)
    prepared: list[PreparedScenario] = []
    for text in args.scenarios:
        try:
            scenario = parse_scenario(text)
        except ScenarioError as exc:
            raise UsageError(str(exc)) from None
        if any(p.scenario.name == scenario.name for p in prepared):
            raise UsageError(f"scenario {scenario.name} is given twice")
        cfg, spec = _config_and_spec(args, scenario.sets, what=f"scenario {scenario.name}: ")
        prepared.append(PreparedScenario(scenario, cfg, spec))
    if args.html and Path(args.html).is_dir():
        raise UsageError(f"--html {args.html} is a directory; give a file name")
    from pipelines.storage.output_identity import OutputConflictError, check_output_path  # noqa: PLC0415,E501

    try:
        check_output_path(args.output)
    except OutputConflictError as exc:
        raise UsageError(str(exc)) from None
    from pipelines.storage.fs import is_dir  # noqa: PLC0415

    if is_dir(args.output):  # a run of the same name must be this very scenario
        from pipelines.storage.delta import DeltaStore  # noqa: PLC0415

        store = DeltaStore(args.output, engine="delta-rs")
        for p in prepared:
            try:
                check_reuse(store, p, args.input)
            except ScenarioError as exc:
                raise UsageError(str(exc)) from None

    from pipelines.spark.progress import ReplayProgress  # noqa: PLC0415
    from pipelines.spark.session import build_session  # noqa: PLC0415
    from pipelines.spark.sweep import replay_scenarios  # noqa: PLC0415

    spark = build_session(master=args.master, shuffle_partitions=args.shuffle_partitions,
                          extra_conf={"spark.ui.showConsoleProgress": "false"},
                          spark_log=_spark_log(args, any(p.config.console.spark_log
                                                         for p in prepared)),
                          remote=args.remote)
    table = replay_scenarios(spark, prepared, args.input, args.output,
                             progress_for=lambda _name: ReplayProgress())
    print(format_comparison(table))
    if args.html:
        from pipelines.analysis.report import write_report  # noqa: PLC0415

        result = write_report(args.output, [p.scenario.name for p in prepared], args.html)
        print(f"report: {result['html']} ({result['figures']} figures)")
    return 0


def _sweep_scenarios(args: argparse.Namespace) -> tuple[int, list[Scenario]]:
    """The sweep's flap window (s) and scenarios (the grid's, then the named ones) from the
    arguments; ``UsageError`` on a bad sweep id, window, grid, scenario or ``--html``."""
    from pipelines.analysis.compare import (  # noqa: PLC0415
        NAME_PATTERN,
        ScenarioError,
        parse_scenario,
    )
    from pipelines.engine.findings import DEFAULT_FLAP_WINDOW_S  # noqa: PLC0415
    from pipelines.spark.sweep import (  # noqa: PLC0415
        SweepError,
        check_names,
        grid_scenarios,
        parse_grid,
    )

    if not NAME_PATTERN.match(args.sweep_id):
        raise UsageError(f"--sweep-id {args.sweep_id!r} must be letters, digits, '_', '.' or "
                         "'-'")
    window = DEFAULT_FLAP_WINDOW_S if args.flap_window_s is None else args.flap_window_s
    if window <= 0:
        raise UsageError(f"--flap-window-s must be > 0, got {window}")
    try:
        scenarios = grid_scenarios([parse_grid(g) for g in args.grids])
        scenarios = [s for s in scenarios if s.sets]  # no --grid: only named scenarios
        scenarios += [parse_scenario(text) for text in args.scenarios]
        check_names(scenarios)
    except (SweepError, ScenarioError) as exc:
        raise UsageError(str(exc)) from None
    if not scenarios:
        raise UsageError("a sweep needs at least one --grid or --scenario")
    if args.html and Path(args.html).is_dir():
        raise UsageError(f"--html {args.html} is a directory; give a file name")
    return window, scenarios


def _check_sweep_output(args: argparse.Namespace, cfg: ReplayConfig, preset: str,
                        prepared: Sequence[PreparedScenario]) -> None:
    """Before Spark starts: ``UsageError`` when the output holds the sweep's work folder or
    any scenario's run under another config or inputs (``check_output``)."""
    from pipelines.storage.output_identity import OutputConflictError, check_output  # noqa: PLC0415,E501
    from pipelines.storage.fs import is_file, join  # noqa: PLC0415

    work_id = f"sweep.{args.sweep_id}"
    fresh = not is_file(join(args.output, "_work", work_id, "run.json"))
    try:  # the sweep's work folder and every scenario's run
        check_output(args.output, work_id, cfg, preset,
                     {p.scenario.name: p.config for p in prepared})
        for p in prepared:
            check_output(args.output, p.scenario.name, p.config, preset, new=fresh)
    except OutputConflictError as exc:
        raise UsageError(str(exc)) from None


def _sweep(args: argparse.Namespace) -> int:
    from pipelines.analysis.compare import (  # noqa: PLC0415
        PreparedScenario,
        Scenario,
        format_comparison,
        metrics_frame,
    )
    from pipelines.spark.sweep import SweepError, check_shared_ingest  # noqa: PLC0415

    _check_remote(args)
    window, scenarios = _sweep_scenarios(args)
    cfg, spec = _config_and_spec(args)
    base = PreparedScenario(Scenario("base", (), ""), cfg, spec)
    prepared = [PreparedScenario(s, *_config_and_spec(args, s.sets, what=f"scenario {s.name}: "))
                for s in scenarios]
    try:
        check_shared_ingest(cfg.to_dict(), {p.scenario.name: p.config.to_dict()
                                            for p in prepared})
    except SweepError as exc:
        raise UsageError(str(exc)) from None
    _check_sweep_output(args, cfg, spec.preset, prepared)

    from pipelines.spark.ingest import resolve_input_spec  # noqa: PLC0415
    from pipelines.spark.progress import ReplayProgress  # noqa: PLC0415
    from pipelines.spark.session import build_session  # noqa: PLC0415
    from pipelines.spark.sweep import run_sweep  # noqa: PLC0415
    from pipelines.storage.fs import join  # noqa: PLC0415

    print(f"sweep {args.sweep_id}: {len(prepared)} scenarios from one ingest: "
          + ", ".join(p.scenario.name for p in prepared))
    spark = build_session(master=args.master, shuffle_partitions=args.shuffle_partitions,
                          extra_conf={"spark.ui.showConsoleProgress": "false"},
                          spark_log=_spark_log(args, cfg.console.spark_log),
                          remote=args.remote)
    base = PreparedScenario(base.scenario, cfg, resolve_input_spec(spec, spark, args.input))
    progress = ReplayProgress()
    with progress:
        rows = run_sweep(spark, args.sweep_id, base, prepared, args.input, args.output,
                         window, progress=progress)
    if rows.empty:
        print("stopped; run the same sweep again to finish")
        return 0
    metrics = {r["run_id"]: dict(r) for _, r in rows.iterrows()}
    print(format_comparison(metrics_frame(metrics)))
    from pipelines.analysis.recommend import format_recommendations, recommend  # noqa: PLC0415
    from pipelines.storage.delta import DeltaStore  # noqa: PLC0415

    for line in format_recommendations(recommend(DeltaStore(args.output, engine="delta-rs"),
                                                 [str(r) for r in rows["run_id"]])):
        print(line)
    print(f"sweep {args.sweep_id}: {len(rows)} rows in {join(args.output, 'sweeps')} "
          f"(flap window {window} s)")
    if args.html:
        _write_sweep_page(args)
    return 0


def _write_sweep_page(args: argparse.Namespace) -> None:
    """The sweep's interactive page at ``--html``; ``UsageError`` when it cannot be drawn."""
    from pipelines.analysis.interactive import PageError, write_sweep_page  # noqa: PLC0415
    from pipelines.storage.delta import DeltaStore  # noqa: PLC0415

    try:
        write_sweep_page(DeltaStore(args.output, engine="delta-rs"), args.sweep_id, args.html)
    except PageError as exc:
        raise UsageError(str(exc)) from None
    print(f"page: {args.html}")


def _capture(args: argparse.Namespace) -> int:
    """``capture``: options checked, the Pulsar client made, then
    ``pipelines.ingest.capture.Capture`` until a stop condition or SIGINT / SIGTERM (the
    buffered rows written as a last file, exit 0)."""
    from pipelines.ingest import capture as cap  # noqa: PLC0415

    try:
        problem = cap.missing_files([("--token-file", args.token_file),
                                     ("--tls-trust-certs", args.tls_trust_certs),
                                     ("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)])
        if problem:
            raise UsageError(problem)
        if bool(args.tls_cert) != bool(args.tls_key):
            raise UsageError("--tls-cert and --tls-key go together")
        options = cap.CaptureOptions(
            output=args.output, topics=tuple(args.topics), pattern=args.topics_pattern,
            namespace=args.namespace, start=cap.parse_start(args.start),
            stop_at_ms=(None if args.stop_at is None
                        else cap.parse_time_ms(args.stop_at, "--stop-at")),
            max_messages=args.max_messages, until_end=args.until_end,
            roll_bytes=max(1, int(args.roll_mb * 1024 * 1024)), roll_seconds=args.roll_seconds)
        cap.load_state(Path(args.output))  # an unreadable state file: before connecting
        auth = cap.PulsarAuth(
            token=cap.read_token(args.token_file, os.environ, CAPTURE_TOKEN_ENV),
            tls_trust_certs=args.tls_trust_certs, tls_cert=args.tls_cert, tls_key=args.tls_key,
            tls_allow_insecure=args.tls_allow_insecure)
        source = cap.PulsarSource(args.service_url, auth, args.admin_url)
        capture = cap.Capture(source, options, say=lambda line: print(line, flush=True))

        def _stop(*_: Any) -> None:
            capture.request_stop()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        capture.run()
    except cap.CaptureError as exc:
        raise UsageError(str(exc)) from None
    return 0


def _generate(args: argparse.Namespace) -> int:
    from pipelines.workload.generator import (  # noqa: PLC0415
        generate,
        load_any_spec,
        result_summary,
    )

    if not Path(args.spec).is_file():
        raise UsageError(f"workload spec {args.spec} does not exist")
    try:
        options = {k: v for k, v in (("seed", args.seed), ("producer_rate", args.producer_rate))
                   if v is not None}
        spec = load_any_spec(args.spec, omb=True if args.omb else None, **options)
    except ValueError as exc:
        raise UsageError(f"workload spec {args.spec}: {_first_problem(exc)}") from None
    result = generate(spec, args.output)
    print(json.dumps(result_summary(result, spec), indent=2))
    return 0


def _first_problem(exc: ValueError) -> str:
    """One sentence for a spec error (the first pydantic error, with its location)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        errs = errors()
        if errs:
            loc = ".".join(str(x) for x in errs[0].get("loc", ()))
            more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
            return f"{loc + ': ' if loc else ''}{errs[0].get('msg', exc)}{more}"
    return str(exc).splitlines()[0]


if __name__ == "__main__":
    sys.exit(main())
