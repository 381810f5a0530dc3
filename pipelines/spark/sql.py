"""Spark SQL over a run's output tables (``topic-replay sql``) and their upkeep
(``topic-replay maintain``). Thin: Spark and Delta do the work.

Each existing output table under the output directory is made queryable by its name
(``segments``, ``entries``, ...):

- delta-spark: an external table of the session catalog (``CREATE TABLE <name> USING delta
  LOCATION '<path>'``), so Delta's time travel works (``SELECT ... FROM segments VERSION AS OF
  3`` / ``TIMESTAMP AS OF '...'``) and so do ``DESCRIBE HISTORY segments`` and ``delta.`<path>```;
- delta-rs (no Delta jars): a temporary view of the table's current files
  (:meth:`pipelines.storage.delta.DeltaStore.read_spark`); no time travel.

Usage examples are in docs/delta.md.
"""

from __future__ import annotations

import json
import logging
from typing import Any, cast

import pandas as pd
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from pipelines.contract.schemas import table_names
from pipelines.storage.delta import DeltaStore
from pipelines.storage.fs import absolute

FORMATS = ("table", "csv", "json")


class QueryError(ValueError):
    """A query Spark rejected (parse or analysis error); the message is Spark's first line."""


def register_tables(store: DeltaStore) -> list[str]:
    """Make every existing table of ``store`` queryable by its name in ``store.spark``.

    Returns the registered names (canonical order). A name already registered in the session
    (e.g. by an earlier call for another output) is replaced; dropping an external table or a
    view never deletes data.
    """
    spark = store.spark
    names = []
    for table in table_names():
        if not store.exists(table):
            continue
        if store.engine == "delta-spark":
            # absolute: Spark resolves a relative LOCATION against its warehouse folder, where
            # `--output out/sample` holds no table (DELTA_TABLE_NOT_FOUND)
            location = absolute(store.path(table)).replace("'", "\\'")
            spark.sql(f"DROP VIEW IF EXISTS {table}")
            spark.sql(f"DROP TABLE IF EXISTS {table}")
            spark.sql(f"CREATE TABLE {table} USING delta LOCATION '{location}'")
        else:
            store.read_spark(table).createOrReplaceTempView(table)
        names.append(table)
    return names


def run_query(spark: SparkSession, query: str, limit: int | None) -> tuple[pd.DataFrame, bool]:
    """Run ``query`` and bring at most ``limit`` rows (None or 0: all) to the driver.

    Returns ``(rows, truncated)``: ``truncated`` is True when the result had more rows than
    ``limit``. Raises :class:`QueryError` with Spark's message when Spark rejects the query.
    """

    # pyspark logs a failed query's context as an ERROR line of JSON; the message suffices
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    try:
        df = spark.sql(query)
        if limit:
            # toPandas() is a pandas DataFrame (pyspark types it as a protocol)
            rows = cast(pd.DataFrame, df.limit(int(limit) + 1).toPandas())
            return rows.head(int(limit)), len(rows) > int(limit)
        return cast(pd.DataFrame, df.toPandas()), False
    except PySparkException as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise QueryError(message) from None


def _cell(value: Any) -> Any:
    """A JSON-friendly cell: arrays as lists, timestamps ISO-8601, NaN/NaT as null."""
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, float) and value != value:
        return None
    if value is pd.NaT:
        return None
    return value


def format_rows(rows: pd.DataFrame, fmt: str) -> str:
    """``rows`` as text: ``table`` (aligned columns and a row count), ``csv`` (header line) or
    ``json`` (one JSON object per line). ``ValueError`` for another format."""
    if fmt == "table":
        if rows.empty:
            body = " | ".join(rows.columns) if len(rows.columns) else "(no columns)"
            return f"{body}\n(0 rows)"
        text = rows.to_string(index=False, na_rep="NULL", max_colwidth=60)
        return f"{text}\n({len(rows)} row{'s' if len(rows) != 1 else ''})"
    if fmt == "csv":
        return str(rows.to_csv(index=False)).rstrip("\n")
    if fmt == "json":
        return "\n".join(json.dumps({c: _cell(v) for c, v in zip(rows.columns, r, strict=True)},
                                    default=str)
                         for r in rows.itertuples(index=False, name=None))
    raise ValueError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")


def maintain_tables(store: DeltaStore, tables: list[str] | None = None,
                    retain_hours: int | None = None) -> pd.DataFrame:
    """``OPTIMIZE`` and ``VACUUM`` each existing table of ``store`` (all tables by default;
    :meth:`pipelines.storage.delta.DeltaStore.maintain`). One row per table: ``table``,
    ``files_removed``, ``files_added``, ``files_vacuumed``."""
    rows = []
    for table in tables or table_names():
        if store.exists(table):
            rows.append({"table": table, **store.maintain(table, retain_hours=retain_hours)})
    return pd.DataFrame(rows, columns=["table", "files_removed", "files_added",
                                       "files_vacuumed"])
