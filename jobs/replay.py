"""``topic-replay`` command line (also ``spark-submit jobs/replay.py …``).

Parses arguments, loads the config, builds the session and wires the stages; nothing else.
A user mistake (bad argument, missing input, invalid config) exits with code 2 and one sentence
before any Spark work starts.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # spark-submit jobs/replay.py: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class UsageError(Exception):
    """A user mistake: reported as one sentence, exit code 2."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="topic-replay",
        description="Replay message logs through an emulation of Pulsar scalable topics.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_ in (("run", "batch replay: read all inputs, finalize, print the summary"),
                        ("stream", "continuous replay: watch the inputs until stopped")):
        r = sub.add_parser(name, help=help_)
        r.add_argument("--input", action="append", required=True, metavar="PATH",
                       help="message log file or directory (repeatable)")
        r.add_argument("--output", required=True, metavar="DIR", help="output directory")
        r.add_argument("--preset", default=None, help="input column mapping preset")
        r.add_argument("--conf", default=None, metavar="FILE", help="YAML config file")
        r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       dest="sets", help="override a config key (dotted path), repeatable")
        r.add_argument("--run-id", default=None, help="run id (default: from the config)")
        r.add_argument("--master", default=None, help="Spark master (default: local[*])")
        r.add_argument("--shuffle-partitions", type=int, default=8,
                       help="spark.sql.shuffle.partitions (default 8)")
    s = sub.add_parser("summary", help="print the run summary from the tables")
    s.add_argument("--output", required=True, metavar="DIR")
    s.add_argument("--run-id", default=None)
    g = sub.add_parser("generate", help="write message logs from a workload spec")
    g.add_argument("--spec", required=True, metavar="FILE")
    g.add_argument("--output", required=True, metavar="PATH")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command in ("run", "stream"):
            return _replay(args, stream=args.command == "stream")
        if args.command == "summary":
            return _summary(args)
        return _generate(args)
    except UsageError as exc:
        print(f"topic-replay: error: {exc}", file=sys.stderr)
        return 2


def _replay(args: argparse.Namespace, stream: bool) -> int:
    from pipelines.config import ConfigError, load_config
    from pipelines.presets import get_preset

    for path in args.input:
        if not Path(path).exists():
            raise UsageError(f"input path {path} does not exist")
    if args.conf and not Path(args.conf).is_file():
        raise UsageError(f"config file {args.conf} does not exist")
    try:
        cfg = load_config(args.conf, args.sets)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    preset = args.preset or cfg.input.preset
    try:
        spec = get_preset(preset)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    spec = _input_spec(spec, cfg, args.input)
    run_id = args.run_id or "default"

    from pipelines.ingest import resolve_input_spec
    from pipelines.replay import Replay, format_summary
    from pipelines.spark_session import build_session

    spark = build_session(master=args.master, shuffle_partitions=args.shuffle_partitions)
    spec = resolve_input_spec(spec, spark, args.input)
    replay = Replay(spark, cfg, spec, args.input, args.output, run_id)
    if not stream:
        summary = replay.run()
        print(format_summary(summary))
        return 0
    replay.run(stream=True)
    stop = {"now": False}

    def _stop(*_: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    while not stop["now"] and replay.query.isActive:
        replay.query.awaitTermination(1)
    replay.query.stop()  # stops after the current micro-batch
    print(f"stopped; tables under {args.output} are current up to batch "
          f"{replay.state.batch_id}")
    return 0


def _input_spec(spec: Any, cfg: Any, inputs: list[str]) -> Any:
    """Apply the config's input section (format, columns, defaults) and speed to a preset."""
    changes: dict[str, Any] = {"speed": cfg.replay.speed}
    fmt = cfg.input.format
    if fmt == "auto" and spec.preset == "contract":
        fmt = _guess_format(inputs)
    if fmt != "auto":
        changes["format"] = fmt
    if cfg.input.columns:
        changes["columns"] = {**spec.columns, **cfg.input.columns}
    if cfg.input.defaults.topic is not None:
        changes["topic"] = cfg.input.defaults.topic
    if spec.preset == "contract":
        changes["producer_name"] = cfg.input.defaults.producer_name
        if cfg.input.time_zone:
            changes["time_zone"] = cfg.input.time_zone
    if cfg.topic.name is not None:
        changes["topic"] = cfg.topic.name
    return spec.replace(**changes)


def _guess_format(inputs: list[str]) -> str:
    files = [p for i in inputs for p in ([Path(i)] if Path(i).is_file()
                                          else sorted(Path(i).rglob("*")))
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
    if not Path(args.output).is_dir():
        raise UsageError(f"output directory {args.output} does not exist")
    from pipelines.delta_io import DeltaStore
    from pipelines.replay import format_summary, run_summary

    store = DeltaStore(args.output, engine="delta-rs")
    runs = store.read("runs")
    if runs.empty:
        raise UsageError(f"{args.output} holds no finished run")
    run_id = args.run_id or str(runs["run_id"].iloc[-1])
    if run_id not in set(runs["run_id"]):
        raise UsageError(f"run {run_id} is not in {args.output}; runs: "
                         f"{', '.join(sorted(set(runs['run_id'])))}")
    print(format_summary(run_summary(store, run_id)))
    return 0


def _generate(args: argparse.Namespace) -> int:
    from pipelines.generator import generate, load_spec

    if not Path(args.spec).is_file():
        raise UsageError(f"workload spec {args.spec} does not exist")
    try:
        spec = load_spec(args.spec)
    except ValueError as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    result = generate(spec, args.output)
    print(json.dumps(result if isinstance(result, dict) else getattr(result, "__dict__",
                                                                       str(result)),
                     default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
