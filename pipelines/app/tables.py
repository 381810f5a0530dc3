"""``summary``, ``diff``, ``validate`` and ``report``: reading finished runs from an output's
tables (delta-rs, no Spark)."""

from __future__ import annotations

import argparse

from pipelines.analysis.diff import diff_runs, format_diff, run_ids
from pipelines.analysis.page import PageError, write_report
from pipelines.analysis.run_tables import metrics_frame
from pipelines.analysis.validation import format_validation, validate_run
from pipelines.analysis.whatif.scenarios import format_comparison
from pipelines.app.errors import UsageError
from pipelines.app.outputs import finished_runs, require_output, require_tables
from pipelines.app.targets import check_html_target, check_png_dir
from pipelines.engine.summary import format_summary, run_summary
from pipelines.storage.delta import DeltaStore


def summary(args: argparse.Namespace) -> int:
    """``topic-replay summary``: a finished run's summary (default: the last run)."""
    store, (run_id,) = finished_runs(args.output, [args.run_id] if args.run_id else [])
    print(format_summary(run_summary(store, run_id)))
    return 0


def diff(args: argparse.Namespace) -> int:
    """``topic-replay diff``: the rows that differ between two runs, per table; exit 0 when
    identical, 1 when not."""
    if len(args.run_ids) != 2:
        raise UsageError(f"diff needs exactly two --run-id (A and B), got {len(args.run_ids)}")
    require_output(args.output)
    require_tables(args.tables)
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


def validate(args: argparse.Namespace) -> int:
    """``topic-replay validate``: Great Expectations checks of a run's tables; exit 0 when
    all pass, 1 when any failed."""
    store, (run_id,) = finished_runs(args.output, [args.run_id] if args.run_id else [])
    result = validate_run(store, run_id, allow_unreadable_files=args.allow_unreadable_files)
    print(format_validation(result))
    return 0 if result.success else 1


def report(args: argparse.Namespace) -> int:
    """``topic-replay report``: the HTML report (figures, metrics side by side) of runs."""
    _, chosen = finished_runs(args.output, args.run_ids)
    check_html_target(args.html)
    check_png_dir(args.png_dir)
    try:
        result = write_report(args.output, chosen, args.html, png_dir=args.png_dir)
    except PageError as exc:
        raise UsageError(str(exc)) from None
    print(format_comparison(metrics_frame(result["metrics"])))
    print(f"report: {result['html']} ({result['figures']} figures)")
    return 0
