"""Spark options of the commands, checked before Spark starts: Spark Connect against
``--master`` and the local engine, the shuffle partitions, and where Spark's own log goes."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from pipelines.app.errors import UsageError
from pipelines.storage.fs import is_remote


def check_spark_options(args: argparse.Namespace) -> None:
    """Every Spark option's check before any Spark work: :func:`check_remote`, and
    ``--shuffle-partitions`` at least 1 (``UsageError``: Spark itself fails the first query
    with 0, and pyspark 4.1.1 then loops converting the error instead of raising it)."""
    check_remote(args)
    partitions = getattr(args, "shuffle_partitions", None)
    if partitions is not None and partitions < 1:
        raise UsageError(f"--shuffle-partitions must be >= 1, got {partitions}")


def check_remote(args: argparse.Namespace) -> None:
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


def spark_log(args: argparse.Namespace, shown: bool) -> str | None:
    """Where Spark's own log goes: ``None`` (the console) with ``--verbose`` or
    ``console.spark_log: true`` (``shown``), else ``<output>/_work/spark.log`` (for an
    object-store output, which log4j cannot write to: ``topic-replay-spark.log`` in the
    temporary folder). Commands without ``--verbose`` (``sql``, ``maintain``) log to the
    file."""
    if getattr(args, "verbose", False) or shown:
        return None
    if is_remote(args.output):
        return str(Path(tempfile.gettempdir()) / "topic-replay-spark.log")
    return str(Path(args.output) / "_work" / "spark.log")
