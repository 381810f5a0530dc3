"""The output tables' Delta format, shared by every writer
(:class:`pipelines.storage.delta.DeltaWriter`): partitioning by ``run_id`` (why: the
:mod:`pipelines.storage.delta` docstring), table properties, the contract's Arrow schema a write
is cast to, and the ``add``-action statistics of a Parquet file committed as it is.

Both writers (delta-rs's, :mod:`pipelines.storage.delta_rs`; delta-spark's,
:mod:`pipelines.spark.delta_spark`) write exactly this, so a table written by one is read and
appended to by the other (docs/delta.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.contract.schemas import arrow_schema

PARTITION_COLUMNS: tuple[str, ...] = ("run_id",)
"""Partition columns of every output table (:mod:`pipelines.storage.delta`, "Partitioning")."""

TABLE_PROPERTIES: dict[str, str] = {
    # time travel reaches back this far (older log entries are cleaned up at checkpoints)
    "delta.logRetentionDuration": "interval 30 days",
    # VACUUM keeps files removed (by OPTIMIZE, replace_run, delete_run) for this long, so a
    # reader of an older version, or time travel within a week, still finds them
    "delta.deletedFileRetentionDuration": "interval 7 days",
}
"""Properties every output table is created with (docs/delta.md, "Tables that live long")."""


def sql_string(value: str) -> str:
    """A SQL string literal for ``value`` (single quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


def conform_arrow(table: str, data: pa.Table | pd.DataFrame,  # noqa: C901
                  columns: Sequence[str] | None = None, dictionaries: bool = False) -> pa.Table:
    """Cast ``data`` to ``table``'s schema: same column order and types (only ``columns`` of
    it, in the schema's order, when given — e.g. all but ``run_id``).

    Missing nullable columns are filled with nulls; a missing non-nullable column, an extra
    column, a failed cast or a null in a non-nullable column raises ``ValueError``. Timestamps
    are truncated to microseconds; naive timestamps are taken as UTC. ``dictionaries``: a
    dictionary-encoded column of a string field stays so (its field then a dictionary of
    strings), for a Parquet writer that writes it as it is (:func:`parquet_options`); else it
    is cast to strings like any other.
    """
    schema = arrow_schema(table)
    if columns is not None:
        schema = pa.schema([f for f in schema if f.name in set(columns)])
    if isinstance(data, pd.DataFrame):
        # one thread: pyarrow's per-call thread pool costs more than it saves on frames of a
        # window (a topic stage task converts several per window while the other cores work)
        data = pa.Table.from_pandas(data, preserve_index=False, nthreads=1)
    elif not isinstance(data, pa.Table):
        data = pa.table(data)
    extra = [c for c in data.column_names if c not in schema.names]
    if extra:
        raise ValueError(f"{table}: columns not in the table schema: {', '.join(extra)}")
    arrays = []
    fields = []
    for field in schema:
        if field.name not in data.column_names:
            if not field.nullable:
                raise ValueError(f"{table}: required column {field.name!r} is missing")
            arrays.append(pa.nulls(data.num_rows, field.type))
            fields.append(field)
            continue
        column = data[field.name]
        kept = dictionaries and _strings_coded(column.type, field.type)
        if kept and column.type.index_type != pa.int32():  # one type for every frame of a file
            column = column.cast(pa.dictionary(pa.int32(), field.type))
        if column.type != field.type and not kept:
            options = pc.CastOptions(field.type, allow_time_truncate=True)
            try:
                column = pc.cast(column, options=options)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise ValueError(
                    f"{table}: column {field.name!r} of type {data[field.name].type} cannot be "
                    f"cast to {field.type}: {exc}"
                ) from exc
        if not field.nullable and column.null_count:
            raise ValueError(
                f"{table}: column {field.name!r} must not be null "
                f"({column.null_count} null value(s))"
            )
        arrays.append(column)
        fields.append(field.with_type(column.type) if kept else field)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=schema.metadata))


def _strings_coded(kind: pa.DataType, field: pa.DataType) -> bool:
    """Whether ``kind`` is a dictionary of ``field``'s values and ``field`` a string."""
    return bool(pa.types.is_string(field) and pa.types.is_dictionary(kind)
                and kind.value_type == field)


PLAIN_STRINGS = ("key",)
"""String columns of the output tables written without a Parquet dictionary: message keys have
too many values (273,000 in the 10 M bench's 10 M messages). Their dictionary pages, one per row
group, cost 0.3-0.4 of the ``messages`` file's 2.3 CPU s to write and made it 4 MB larger."""


def parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """``pyarrow.parquet`` writer options of an output table's data file with ``schema``:
    zstd; dictionaries for strings only (topics, producers, consumers: few values); integers
    and timestamps (sequences, times, sizes, ids: sorted or small within a row group)
    ``DELTA_BINARY_PACKED``, except the hash columns (uniformly random: plain is smaller).
    Measured on the 10 M bench's tables (zstd plain → this): ``messages`` 0.94 → 0.65 s and
    46 → 38 MB per 2.7 M rows, ``dispatch`` 1.74 → 1.2 s and 50 → 34 MB per 5.6 M rows. Spark
    (vectorized reader) and delta-rs read both encodings. Dictionary columns (strings coded
    by the stages, :func:`conform_arrow` ``dictionaries``) are written as their codes and
    values, and then the file stores no Arrow schema: every reader takes them as the table's
    plain strings. Message keys (:data:`PLAIN_STRINGS`) are written plain, coded or not."""
    coded = [f.name for f in schema if pa.types.is_dictionary(f.type)]
    options: dict[str, Any] = {"compression": "zstd",
                               "use_dictionary": [f.name for f in schema
                                                  if (f.type == "string"
                                                      or pa.types.is_dictionary(f.type))
                                                  and f.name not in PLAIN_STRINGS],
                               "column_encoding": delta_packed(schema)}
    if coded:  # no Arrow schema in the file: readers take those columns as plain strings
        options["store_schema"] = False
    return options


def delta_packed(schema: pa.Schema) -> dict[str, str]:
    """``column_encoding`` packing ``schema``'s integer and timestamp columns
    ``DELTA_BINARY_PACKED`` (sequences, times, sizes, ids), all but the hash columns (uniformly
    random: plain is smaller); the output tables' (:func:`parquet_options`) and the staged
    messages' rule."""
    return {f.name: "DELTA_BINARY_PACKED" for f in schema
            if (pa.types.is_integer(f.type) or pa.types.is_timestamp(f.type))
            and "hash" not in f.name}


PLAIN_VALUE = re.compile(r"[A-Za-z0-9._-]+")
"""Partition values that need no escaping in a folder name or an add-action path."""


def add_stats(meta: Any) -> str:
    """Delta ``add`` statistics of one Parquet file from its footer: ``numRecords``,
    ``nullCount`` per column, and ``minValues`` / ``maxValues`` for integer and string columns
    whose every row group has them (timestamps are left out: Delta wants them at millisecond
    precision, rounded outwards, so a copied microsecond value could exclude rows; list
    columns too)."""
    out: dict[str, Any] = {"numRecords": meta.num_rows, "minValues": {}, "maxValues": {},
                           "nullCount": {}}
    arrow = meta.schema.to_arrow_schema()
    for j in range(meta.num_columns):
        name = meta.schema.column(j).path
        if "." in name:  # a list's elements: no statistics of the column itself
            continue
        cols = [meta.row_group(r).column(j) for r in range(meta.num_row_groups)]
        st = [c.statistics for c in cols]
        if all(x is not None and x.has_null_count for x in st):
            out["nullCount"][name] = sum(x.null_count for x in st)
        kind = arrow.field(name).type
        if not (pa.types.is_integer(kind) or pa.types.is_string(kind)):
            continue
        if any(x is None or (not x.has_min_max and x.num_values) for x in st):
            continue  # a row group with values but no min/max: no bounds for the file
        with_values = [x for x in st if x.has_min_max]
        if with_values:
            out["minValues"][name] = min(x.min for x in with_values)
            out["maxValues"][name] = max(x.max for x in with_values)
    return json.dumps(out)


def run_predicate(runs: Sequence[str]) -> str:
    """SQL predicate selecting the rows of ``runs``."""
    return (f"run_id = {sql_string(runs[0])}" if len(runs) == 1 else
            f"run_id IN ({', '.join(sql_string(r) for r in runs)})")
