"""``sql`` and ``maintain``: Spark SQL over an output's tables, and their upkeep (OPTIMIZE,
VACUUM) — ``pipelines.spark.sql``. Spark's own console output goes to the output's
``_work/spark.log``, as a replay's does (docs/architecture.md, "Console")."""

from __future__ import annotations

import argparse
import sys

from pipelines.app.errors import UsageError
from pipelines.app.outputs import require_output, require_tables
from pipelines.app.spark_options import check_spark_options, spark_log
from pipelines.spark.command_session import quiet_session
from pipelines.spark.delta_spark import open_store
from pipelines.spark.sql import QueryError, format_rows, maintain_tables, register_tables, run_query


def sql(args: argparse.Namespace) -> int:
    """``topic-replay sql``: one query, its rows printed (``--limit`` at most)."""
    check_spark_options(args)
    require_output(args.output)
    if args.limit < 0:
        raise UsageError(f"--limit must be >= 0, got {args.limit}")
    spark = quiet_session(args.master, args.remote, spark_log(args, shown=False))
    store = open_store(args.output, spark=spark)
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


def maintain(args: argparse.Namespace) -> int:
    """``topic-replay maintain``: OPTIMIZE and VACUUM of the tables, one line per table."""
    require_output(args.output)
    require_tables(args.tables)
    if args.retain_hours is not None and args.retain_hours < 0:
        raise UsageError(f"--retain-hours must be >= 0, got {args.retain_hours}")
    spark = (None if args.engine == "delta-rs"
             else quiet_session(args.master, spark_log=spark_log(args, shown=False)))
    try:
        store = open_store(args.output, engine=args.engine, spark=spark)
    except ValueError as exc:
        raise UsageError(str(exc).split(". ")[0]) from None
    result = maintain_tables(store, args.tables, args.retain_hours)
    print(format_rows(result, "table"))
    print(f"maintained {len(result)} table(s) under {args.output} with {store.engine}")
    return 0
