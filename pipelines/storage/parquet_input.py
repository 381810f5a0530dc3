"""A micro-batch's Parquet input files read by the staging pass itself, with pyarrow, as the
mapped records Spark SQL would have shipped to it (``pipelines.spark.ingest.map_records``).

Why: shipping rows from Spark's Parquet reader to the Python pass (``mapInArrow``) converts every
value from Spark's rows to Arrow in the JVM. At 10 M messages that conversion was 12–14 s of
the 24–26 s ingest (a ``mapInArrow`` that only counts the rows of the bench's 10 M input:
12.1–13.7 s; Spark's own count 1.2 s), where pyarrow reads the same files in about a second.
So, for a Parquet input whose mapping Spark SQL has nothing to evaluate (:func:`direct_columns`),
the staging pass is given the files, not the rows: Spark still schedules the tasks (a task per
group of files, :func:`file_groups`; a large file split by row groups, :func:`file_parts`), and
each task reads its parts here (:func:`read_records`).

What the records must equal, column by column (the Arrow schema of Spark's mapped records,
computed on the driver): ``source_file`` the file's path as Spark's ``_metadata.file_path``
spells it, ``invalid_utf8`` / ``malformed`` false, ``record:<field>`` the file's column of that
name and type (null where the file lacks it, as Spark reads a file without a column of the
query's schema), ``m_<column>`` null (a contract column mapped to nothing, or to a field no
file has). Anything else — a field of another type or name case, invalid UTF-8 in a string
column, a file pyarrow cannot read — is not judged here: :class:`DirectReadRefused` is raised
and the caller gives the micro-batch to Spark's reader, whose rules (and whose salvage of a
broken file) are the reference. No Spark."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.contract.presets import is_identifier
from pipelines.ingest.rules import (
    INVALID_UTF8_FLAG,
    MALFORMED_FLAG,
    SOURCE_FILE,
    mapped_name,
    row_field,
)
from pipelines.storage.fs import S3_SCHEMES, arrow_filesystem, scheme

READ_BATCH_ROWS = 65_536
"""Rows per record batch read (what the rules take at a time: ``ingest.rules.RULE_CHUNK_ROWS``)."""


class DirectReadRefused(Exception):
    """A file the staging pass does not read itself (why, in one line): Spark's reader must."""


@dataclass(frozen=True)
class DirectColumns:
    """How each column of the mapped records is made from a file (:func:`direct_columns`):
    ``schema`` the records' Arrow schema (every field nullable), ``fields`` the Parquet row's
    fields (``record:<field>`` columns, in order), ``file_path`` the ``m_<column>`` columns
    that hold the file's path (a contract column mapped to ``source_file``)."""

    schema: pa.Schema
    fields: tuple[str, ...]
    file_path: tuple[str, ...] = ()


def direct_columns(schema: pa.Schema, spec: Any, names: Sequence[str]) -> DirectColumns | None:
    """The plan of :func:`read_records` for mapped records of Arrow ``schema`` (Spark's
    ``map_records`` of a Parquet input whose row has fields ``names``) under ``spec`` (an
    ``InputSpec``), or ``None`` when Spark SQL has work in them: an expression or
    ``raw_record`` in the mapping, minute spreading, a column this reader does not make."""
    if spec.format != "parquet" or spec.spread_within_minute:
        return None
    fields = [f for f in names if row_field(f) in schema.names]
    made = {SOURCE_FILE, INVALID_UTF8_FLAG, MALFORMED_FLAG, *(row_field(f) for f in fields)}
    file_path = []
    folded = {n.lower() for n in names}
    for column in schema.names:
        if column in made:
            continue
        contract = column.removeprefix("m_")
        if column != mapped_name(contract):
            return None  # raw_record, o_<i>, minute_hint: Spark's work
        value = spec.columns.get(contract)
        if value is None or (is_identifier(value) and value.lower() not in folded
                             and value not in ("source_file", "raw_record")):
            continue  # null: mapped to nothing, or to a field no file has in any case
        if value == "source_file" and "source_file" not in names:
            file_path.append(column)
            continue
        return None
    nullable = pa.schema([f.with_nullable(True) for f in schema])
    return DirectColumns(nullable, tuple(fields), tuple(file_path))


SPLIT_BYTES = 128 * 1024 * 1024
"""A file larger than this is read by several tasks, a run of whole row groups of about this
many bytes each (:func:`file_parts`), as Spark's reader splits it
(``spark.sql.files.maxPartitionBytes``' default)."""


@dataclass(frozen=True, order=True)
class FilePart:
    """What one task reads of an input file: ``path`` as Spark spells it, and its
    ``row_groups`` (indices, ascending; empty: the whole file)."""

    path: str
    row_groups: tuple[int, ...] = ()


def file_parts(path: str, size: int, split_bytes: int = SPLIT_BYTES) -> list[FilePart]:
    """``path`` (of ``size`` bytes) as the parts tasks read: the whole file when it is not
    larger than ``split_bytes``, else runs of consecutive row groups of at least
    ``split_bytes`` compressed bytes each (the last one smaller), from its footer. A footer
    that cannot be read leaves the file whole (its task finds out why)."""
    if size <= split_bytes:
        return [FilePart(path)]
    try:
        fs, local = input_file(path)
        with fs.open_input_file(local) as f:
            meta = pq.ParquetFile(f).metadata
    except (OSError, pa.ArrowException):
        return [FilePart(path)]
    parts, run, run_bytes = [], [], 0
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        run.append(i)
        run_bytes += sum(group.column(c).total_compressed_size for c in range(group.num_columns))
        if run_bytes >= split_bytes:
            parts.append(FilePart(path, tuple(run)))
            run, run_bytes = [], 0
    if run or not parts:
        parts.append(FilePart(path, tuple(run)))
    return parts if len(parts) > 1 else [FilePart(path)]


def read_records(part: FilePart, plan: DirectColumns) -> Iterator[pa.RecordBatch]:
    """A part of a Parquet input file (its path as Spark's ``_metadata.file_path`` spells it:
    ``file:/…`` percent-encoded, or an object-store URL; its row groups, or all) as mapped
    records of ``plan.schema`` in batches of at most :data:`READ_BATCH_ROWS` rows, in file
    order.

    A zero-byte file has no records (Spark's scan makes no split of it). Raises
    :class:`DirectReadRefused` when the file cannot be read by pyarrow or is not what Spark
    would read the same way (a field of another type, a field only in another case, invalid
    UTF-8)."""
    path = part.path
    try:
        fs, local = input_file(path)
        if fs.get_file_info(local).size == 0:
            return  # as Spark's file scan: a zero-byte file has no split, so no records
        with fs.open_input_file(local) as f:
            pf = pq.ParquetFile(f)
            file_schema = pf.schema_arrow
            _check_fields(file_schema, plan)
            present = [n for n in plan.fields if n in file_schema.names]
            for batch in pf.iter_batches(batch_size=READ_BATCH_ROWS, columns=present,
                                         row_groups=list(part.row_groups) or None,
                                         use_threads=False):
                yield _records(batch, path, plan)
    except DirectReadRefused:
        raise
    except (OSError, pa.ArrowException) as exc:  # unreadable, cut short, not Parquet
        raise DirectReadRefused(f"{path}: {exc}") from exc


def input_file(path: str) -> tuple[Any, str]:
    """``(pyarrow filesystem, path in it)`` of an input file as Spark spells its path
    (``_metadata.file_path``, the file-source log): a percent-encoded URL, ``file:/…`` for a
    local file."""
    if path.startswith("file:"):
        return pafs.LocalFileSystem(), unquote(urlsplit(path).path)
    fs, local = arrow_filesystem(path)
    return fs, (unquote(local) if scheme(path) in S3_SCHEMES else local)


def _check_fields(file_schema: pa.Schema, plan: DirectColumns) -> None:
    """Every field the records take has the query's type in the file, or is absent from it
    in every case spelling (Spark matches Parquet columns case-insensitively)."""
    by_lower: Mapping[str, str] = {n.lower(): n for n in file_schema.names}
    for name in plan.fields:
        want = plan.schema.field(row_field(name)).type
        if name in file_schema.names:
            got = file_schema.field(name).type
            if got != want:
                raise DirectReadRefused(f"field {name!r} is {got} in the file, {want} in the "
                                        "query")
        elif name.lower() in by_lower:
            raise DirectReadRefused(f"field {name!r} is spelled {by_lower[name.lower()]!r}")


def _records(batch: pa.RecordBatch, path: str, plan: DirectColumns) -> pa.RecordBatch:
    n = batch.num_rows
    columns: dict[str, pa.Array] = {
        # constants filled by Arrow: a Python list of n items cost 135 ns a row (about 1.3
        # CPU s of a 10 M-message ingest), pa.repeat about 5
        SOURCE_FILE: pa.repeat(pa.scalar(path, pa.string()), n),
        INVALID_UTF8_FLAG: pa.repeat(pa.scalar(False, pa.bool_()), n),
        MALFORMED_FLAG: pa.repeat(pa.scalar(False, pa.bool_()), n),
    }
    for name in plan.fields:
        column = row_field(name)
        i = batch.schema.get_field_index(name)
        if i < 0:
            columns[column] = pa.nulls(n, plan.schema.field(column).type)
            continue
        values = batch.column(i)
        if pa.types.is_string(values.type):
            try:
                values.validate(full=True)
            except pa.ArrowInvalid as exc:  # Spark flags the row; its reader decides
                raise DirectReadRefused(f"{path}: field {name!r} holds invalid UTF-8") from exc
        columns[column] = values
    for column in plan.file_path:
        columns[column] = columns[SOURCE_FILE]
    return pa.RecordBatch.from_arrays(
        [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in plan.schema],
        schema=plan.schema)


def file_groups(parts: Sequence[FilePart], sizes: Sequence[int],
                tasks: int) -> list[list[FilePart]]:
    """``parts`` (with their ``sizes`` in bytes) spread over at most ``tasks`` groups, largest
    first to the group with the fewest bytes (ties: the lower group), each group in path and
    row-group order; the same groups for the same parts, whatever order they are given in.
    Empty groups are dropped."""
    groups: list[list[FilePart]] = [[] for _ in range(max(1, min(tasks, len(parts))))]
    load = [0] * len(groups)
    for size, part in sorted(zip(sizes, parts, strict=True), key=lambda p: (-p[0], p[1])):
        g = min(range(len(groups)), key=lambda i: (load[i], i))
        groups[g].append(part)
        load[g] += size
    return [sorted(g) for g in groups if g]
