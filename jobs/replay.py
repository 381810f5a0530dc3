"""``topic-replay`` command line (also ``spark-submit jobs/replay.py …``).

Parses the arguments and dispatches to the command's function in :mod:`pipelines.app`; nothing
else. A user mistake (bad argument, missing input, invalid config) exits with code 2 and one
sentence (``pipelines.app.errors.UsageError``) before any Spark work starts.

Only the chosen command's module is imported (:data:`COMMANDS`): they pull in pyspark, pandas,
Delta or Plotly (1–5 s each), which ``--help`` and a usage error must not pay.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # spark-submit jobs/replay.py: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.app.errors import UsageError  # after the path above

COMMANDS: dict[str, str] = {
    "run": "pipelines.app.replay:run", "stream": "pipelines.app.replay:stream",
    "compare": "pipelines.app.whatif:compare", "sweep": "pipelines.app.whatif:sweep",
    "summary": "pipelines.app.tables:summary", "diff": "pipelines.app.tables:diff",
    "validate": "pipelines.app.tables:validate", "report": "pipelines.app.tables:report",
    "sql": "pipelines.app.sql:sql", "maintain": "pipelines.app.sql:maintain",
    "capture": "pipelines.app.capture:capture", "generate": "pipelines.app.generate:generate",
}
"""Each subcommand's function (``module:function``, taking the parsed arguments, returning
the exit code)."""

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
    r.add_argument("--shuffle-partitions", type=int, default=None,
                   help="spark.sql.shuffle.partitions (default: as configured for Spark, "
                        "else twice the cores of the master; the emulation's state keeps "
                        "them for the run)")
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
    c.set_defaults(token_env=CAPTURE_TOKEN_ENV)


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


def command(name: str) -> Callable[[argparse.Namespace], int]:
    """The function of subcommand ``name`` (:data:`COMMANDS`), its module imported now."""
    module, function = COMMANDS[name].split(":")
    found: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module),
                                                         function)
    return found


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return command(args.command)(args)
    except UsageError as exc:
        print(f"topic-replay: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
