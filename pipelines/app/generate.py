"""``generate``: synthetic message logs from a workload spec (``pipelines.workload``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pipelines.app.errors import UsageError
from pipelines.app.targets import check_local_output
from pipelines.workload.generator import generate as generate_logs
from pipelines.workload.generator import load_any_spec, result_summary


def generate(args: argparse.Namespace) -> int:
    """Write the logs of ``--spec`` (ours or an OMB workload) under ``--output`` and print
    what was written (JSON)."""
    if not Path(args.spec).is_file():
        raise UsageError(f"workload spec {args.spec} does not exist")
    try:
        options = {k: v for k, v in (("seed", args.seed), ("producer_rate", args.producer_rate))
                   if v is not None}
        spec = load_any_spec(args.spec, omb=True if args.omb else None, **options)
    except ValueError as exc:
        raise UsageError(f"workload spec {args.spec}: {first_problem(exc)}") from None
    check_local_output(args.output)
    result = generate_logs(spec, args.output)
    print(json.dumps(result_summary(result, spec), indent=2))
    return 0


def first_problem(exc: ValueError) -> str:
    """One sentence for a spec error (the first pydantic error, with its location)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        errs = errors()
        if errs:
            loc = ".".join(str(x) for x in errs[0].get("loc", ()))
            more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
            return f"{loc + ': ' if loc else ''}{errs[0].get('msg', exc)}{more}"
    return str(exc).splitlines()[0]
