"""Ingest: read message logs, map them to the input contract, validate, quarantine, hash.

The Spark half of ingest: reading and mapping in Spark SQL. The rules the mapped records then
go through (validation, quarantine reasons, parsing, key hashes) are :mod:`pipelines.ingest`,
no Spark, shared with the local engine; the Spark replay runs them in its staging pass
(:mod:`pipelines.spark.staging_pass`).

Two readers produce the same *raw* DataFrame (columns ``source_file`` and ``raw_record``; for
Parquet ``source_file`` and ``record``, the row as a struct):

- :func:`read_raw_stream`: a streaming DataFrame (``spark.readStream``, ``maxFilesPerTrigger``),
  meant to be fed to ``foreachBatch``;
- :func:`read_raw_batch`: the same as a static DataFrame (tests, ad-hoc runs).

CSV, JSON lines and ``text`` logs are read with Spark's ``text`` source, one raw line per record
(``.gz`` files are decompressed transparently), so a rejected record keeps its exact text;
``source_file`` is ``_metadata.file_path`` (available for streaming text sources too). Parquet
uses the Parquet source (schema from a static read of the inputs); its ``raw_record`` is
``to_json(record)``, made only where it is used (quarantined records, spreading, mappings that
name it): a ``foreachBatch`` micro-batch is materialised as read, so a JSON form made by the
reader would be computed for every record (1.3 s per million here). A consequence
of line-based reading: a CSV field with an embedded line break is not supported (each physical
line is one record).

:func:`map_records` turns a raw DataFrame into *mapped records*: the format is parsed
(``from_csv``, ``from_json``, ``record_regex``) and the mapping evaluated in Spark SQL, nothing
more. The input rules — validation and the quarantine reasons, integer and timestamp parsing,
``event_ms``, minute spreading, key hashing — are :mod:`pipelines.ingest.rules`' Arrow
functions, written once: the replay runs them in its one Python pass, the staging pass
(``pipelines.spark.staging_pass.stage_batch``: a ``mapInArrow`` that also hashes the keys and writes
the staged files, and returns the records the rules reject, which :func:`quarantine_rows` turns
into ``quarantine`` rows); the local engine calls them directly. A spec that spreads minutes
needs a minute's records in one task: :func:`map_records` adds Spark's guess at each record's
minute (``minute_hint``), by which the staging pass partitions them; the rules check the guess
and a wrong one sends the pass once more through a single task, so results never depend on it.
Parsing and staging the 1 M-message bench input this way took 0.88-0.93 × the time of the
former default (the rules translated to Spark SQL before the staging pass), in one Spark
session alternating the two (2 cores, load 2-6): the rules on Arrow columns cost the Python
worker about what the SQL expressions cost the JVM, and no second pass is added.

:func:`parse_records` (tests, ad-hoc reads; ``ingest_batch``) gives ``(accepted,
quarantine)`` DataFrames from the same functions in one ``mapInArrow``
(:func:`pipelines.spark.udfs.parse_task`). Spreading needs a micro-batch's minutes together, so a
stream is accepted only for specs without spreading. Both outputs derive from the same input:
cache the micro-batch when writing both.

Every input line is either a header line (CSV only: a line equal to the spec's header row; not a
record, neither accepted nor quarantined), accepted, or quarantined with exactly one reason:
the first failing rule in :data:`QUARANTINE_REASONS` order (constants re-exported from
:mod:`pipelines.ingest.rules`).
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote

import pyarrow.parquet as pq
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipelines.contract.presets import (
    CSV_DEFAULT_OPTIONS,
    InputSpec,
    is_identifier,
    normalize_format,
)
from pipelines.ingest.input_check import NOT_IN_PROGRESS_GLOB, input_files, is_empty
from pipelines.ingest.rules import (  # the rules' constants, re-exported for callers
    ACCEPTED_COLUMNS,
    BAD_PAYLOAD_SIZE,
    BAD_PUBLISH_TIME,
    BAD_SEQUENCE_ID,
    FILE_REASONS,
    INVALID_UTF8,
    INVALID_UTF8_FLAG,
    KEY_TOO_LONG,
    LATE,
    MALFORMED_FLAG,
    MALFORMED_RECORD,
    MAPPED_COLUMNS,
    MAX_KEY_BYTES,
    MAX_PUBLISH_MICROS,
    MIN_PUBLISH_MICROS,
    MINUTE_HINT,
    MINUTE_US,
    MISSING_PAYLOAD_SIZE,
    MISSING_PUBLISH_TIME,
    MISSING_TOPIC,
    NEGATIVE_PAYLOAD_SIZE,
    PRESENT_PREFIX,
    PUBLISH_TIME_OUT_OF_RANGE,
    QUARANTINE_COLUMNS,
    QUARANTINE_REASONS,
    RAW_RECORD,
    SOURCE_FILE,
    SOURCE_ROW,
    TIME_UNITS,
    TRUNCATED_FILE,
    UNREADABLE_FILE,
    UTC_ZONES,
    mapped_name,
    order_name,
    row_field,
)
from pipelines.spark.udfs import parse_task, verdict_type

# Internal column names (prefixed so they cannot shadow source columns).
_RAW = "__tr_raw"
_FILE = "__tr_file"
_ROW = "__tr_row"
_MALFORMED = "__tr_malformed"
_HEADER = "__tr_header"
_CORRUPT = "__tr_corrupt"
_BAD_UTF8 = "__tr_bad_utf8"
_TIME = "__tr_time"


# ----------------------------------------------------------------------------------- reading


def _as_list(paths: str | Sequence[str]) -> list[str]:
    return [paths] if isinstance(paths, str) else [str(p) for p in paths]


def _text_raw(df: DataFrame) -> DataFrame:
    return df.select(
        F.col("_metadata.file_path").alias("source_file"),
        F.col("value").alias("raw_record"),
    )


def _parquet_raw(df: DataFrame) -> DataFrame:
    cols = [F.col(f"`{c}`") for c in df.columns]
    return df.select(F.col("_metadata.file_path").alias("source_file"),
                     F.struct(*cols).alias("record"))


def read_raw_batch(
    spark: SparkSession,
    paths: str | Sequence[str],
    fmt: str,
    path_glob_filter: str | None = None,
    record_schema: T.StructType | None = None,
    ignore_corrupt_files: bool = False,
) -> DataFrame:
    """Static raw DataFrame of the files (or folders / globs) ``paths`` in format ``fmt``.

    Columns: ``source_file``, ``raw_record`` (Parquet: ``source_file``, ``record`` struct).
    ``path_glob_filter``: read only files whose name matches (e.g. ``spec.file_glob``).
    ``record_schema``: Parquet only, the row schema (default: inferred from the files).
    ``ignore_corrupt_files``: Spark's ``ignoreCorruptFiles`` (a file that fails part-way gives
    the records before the failure; one unreadable from the start gives none).
    """
    fmt = normalize_format(fmt)
    paths = _as_list(paths)
    reader = spark.read.option("ignoreCorruptFiles", str(ignore_corrupt_files).lower())
    if path_glob_filter:
        reader = reader.option("pathGlobFilter", path_glob_filter)
    if fmt == "parquet":
        if record_schema is not None:
            reader = reader.schema(record_schema)
        return _parquet_raw(reader.parquet(*paths))
    return _text_raw(reader.text(paths))


def read_raw_stream(
    spark: SparkSession,
    paths: str | Sequence[str],
    fmt: str,
    max_files_per_trigger: int | None = None,
    path_glob_filter: str | None = None,
    max_bytes_per_trigger: int | None = None,
) -> DataFrame:
    """Streaming raw DataFrame over ``paths`` (folders or globs; several paths are unioned).

    Same columns as :func:`read_raw_batch`. ``max_files_per_trigger`` bounds each micro-batch
    (whole files only, so a file is never split across micro-batches);
    ``max_bytes_per_trigger`` (bytes, Spark's ``maxBytesPerTrigger``; whole files too) replaces
    it when given (Spark allows only one of the two). For Parquet the schema is taken from a
    static read of the first local file that is neither empty nor corrupt
    (:func:`_schema_paths`; corrupt files are reported when the micro-batch reads them, see
    :func:`salvage_files`). ``path_glob_filter`` as in :func:`read_raw_batch`, for folders and
    globs only (a file named in ``paths`` is read whatever its name, as the local engine's
    ``input_files`` lists it); without one, a folder's files whose name ends in ``.tmp`` are
    never read (files still being written, ``pipelines.ingest.input_check.NOT_IN_PROGRESS_GLOB``;
    Spark itself skips ``.``/``_``-first names and ``*._COPYING_``).
    """
    fmt = normalize_format(fmt)
    paths = _as_list(paths)
    if not paths:
        raise ValueError("read_raw_stream needs at least one path")
    schema = T.StructType()
    if fmt == "parquet":
        schema_paths = _schema_paths(paths, path_glob_filter)
        record = read_raw_batch(spark, schema_paths, fmt,
                                _folder_glob(schema_paths, path_glob_filter),
                                ignore_corrupt_files=True).schema["record"].dataType
        assert isinstance(record, T.StructType)
        schema = record
    frames = []
    for given in paths:
        path = _stream_path(given)
        reader = spark.readStream
        if max_bytes_per_trigger is not None:
            reader = reader.option("maxBytesPerTrigger", int(max_bytes_per_trigger))
        elif max_files_per_trigger is not None:
            reader = reader.option("maxFilesPerTrigger", int(max_files_per_trigger))
        if path == given:  # a folder or glob: the files the spec names, and never a file
            # still being written; a file named as an input is read whatever its name
            reader = reader.option("pathGlobFilter", path_glob_filter or NOT_IN_PROGRESS_GLOB)
        if fmt == "parquet":
            frames.append(_parquet_raw(reader.schema(schema).parquet(path)))
        else:
            frames.append(_text_raw(reader.format("text").load(path)))
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def _schema_paths(paths: list[str], file_glob: str | None) -> list[str]:
    """What a Parquet input's schema is inferred from: the first local file (path order) that
    is not empty and whose footer reads, for Spark's inference reads only the first file's
    footer (an empty or corrupt first file would fail the replay: ``UNABLE_TO_INFER_SCHEMA``);
    ``paths`` themselves for remote inputs or when no such file exists yet."""
    for f in input_files(paths, file_glob):
        if not is_empty(f):
            try:
                pq.read_schema(f)
            except (OSError, ValueError):  # corrupt: reported when the replay reads it
                continue
            return [str(f)]
    return paths


def _folder_glob(paths: list[str], file_glob: str | None) -> str | None:
    """``file_glob`` for a read of ``paths``, or ``None`` when they are all named local files:
    the glob picks files in folders (``input_files``, the local engine), a named file is read
    whatever its name."""
    return None if all(Path(p).is_file() for p in paths) else file_glob


def _stream_path(path: str) -> str:
    """``path`` as Spark's file stream source accepts it. The source only watches folders and
    globs, so a local file becomes a glob that matches exactly that file (glob characters in the
    path escaped, one letter of the name put in a ``[x]`` class): ``/logs/a.json`` →
    ``/logs/a.jso[n]``."""
    p = Path(path)
    if not p.is_file():
        return path
    escaped = re.sub(r"([\\*?\[\]{}])", r"\\\1", str(p))
    for i in range(len(escaped) - 1, len(escaped) - len(p.name) - 1, -1):
        if escaped[i].isalnum() and (i == 0 or escaped[i - 1] != "\\"):
            return f"{escaped[:i]}[{escaped[i]}]{escaped[i + 1:]}"
    return escaped


def micro_batch_files(spark: SparkSession, checkpoint: str, batch_id: int) -> list[str]:
    """The input files of streaming micro-batch ``batch_id`` (sorted), from the file-source log
    in the query's ``checkpoint`` (``sources/<n>/<batch_id>``, or the ``.compact`` file that
    holds it), spelled as ``_metadata.file_path`` spells them (``file:/...``). Read with Spark,
    so any filesystem works; ``[]`` when the log has no entry. Used only after a micro-batch
    failed to read (a micro-batch DataFrame does not expose its files).
    """
    pattern = f"{checkpoint.rstrip('/')}/sources/*/{{{batch_id},{batch_id}.compact}}"
    try:
        lines = [r[0] for r in spark.read.text(pattern).collect()]
    except AnalysisException:  # no such log file
        return []
    files = set()
    for line in lines:
        if not line.startswith("{"):
            continue  # the "v1" version header
        entry = json.loads(line)
        if int(entry.get("batchId", -1)) == batch_id:
            files.add(re.sub(r"^file:///", "file:/", entry["path"]))
    return sorted(files)


def _read_error(exc: BaseException) -> str:
    """The root cause of a failed read, one line (``java.io.EOFException: Unexpected end of
    input stream``)."""
    text = str(exc)
    causes = re.findall(r"Caused by: ([\w.$]+(?:Exception|Error)\b[^\n]*)", text)
    if causes:
        return str(causes[-1]).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:500] if lines else type(exc).__name__


def salvage_files(
    spark: SparkSession,
    files: Sequence[str],
    fmt: str,
    raw_schema: T.StructType,
) -> tuple[DataFrame, DataFrame]:
    """Read a micro-batch that failed to read, losing no readable record: ``(raw, bad_files)``.

    Each of ``files`` is first read on its own (one Spark job per file: this runs only after a
    failure). The readable ones form ``raw`` as usual; each failing one is read again with
    ``ignoreCorruptFiles``, which keeps the records before the failure (they join ``raw``), and
    gives one ``bad_files`` row (:data:`QUARANTINE_COLUMNS`): ``source_file``, ``raw_record`` =
    the read error's root cause, ``reason`` = ``truncated_file`` when some records were read,
    else ``unreadable_file`` (also for a file that vanished after the micro-batch listed it:
    ``FileNotFoundException``). ``raw`` has ``raw_schema`` (the micro-batch's schema).
    """
    fmt = normalize_format(fmt)
    record = raw_schema["record"].dataType if fmt == "parquet" else None
    assert record is None or isinstance(record, T.StructType)
    # the log spells paths as URIs (a space is %20); Spark reads a path, so decode it to read
    paths = {f: unquote(f) for f in files}
    errors: dict[str, str] = {}
    for f in files:
        try:
            read_raw_batch(spark, [paths[f]], fmt, record_schema=record).count()
        except Exception as exc:  # any read failure of this one file
            errors[f] = _read_error(exc)
    good = [paths[f] for f in files if f not in errors]
    frames = [read_raw_batch(spark, good, fmt, record_schema=record)] if good else []
    rows = []
    for f in sorted(errors):
        try:
            salvaged = read_raw_batch(spark, [paths[f]], fmt, record_schema=record,
                                      ignore_corrupt_files=True)
            n = salvaged.count()
        except Exception:  # it vanished (PATH_NOT_FOUND): nothing to salvage
            n = 0
        rows.append((f, errors[f], TRUNCATED_FILE if n else UNREADABLE_FILE))
        if n:
            frames.append(salvaged)
    raw = frames[0] if frames else spark.createDataFrame([], raw_schema)
    for frame in frames[1:]:
        raw = raw.unionByName(frame)
    bad = spark.createDataFrame(rows, "source_file string, raw_record string, reason string")
    return raw.select(*raw_schema.names), bad


def read_csv_header(spark: SparkSession, path: str, sep: str = ",") -> tuple[str, ...]:
    """Column names from the first line of the CSV file ``path`` (gzip aware, any filesystem)."""
    first = spark.read.text(path).limit(1).collect()
    if not first:
        raise ValueError(f"{path}: empty file, cannot read a CSV header")
    line = first[0][0].lstrip("\ufeff")
    return tuple(next(csv.reader([line], delimiter=sep)))


def resolve_input_spec(
    spec: InputSpec, spark: SparkSession, paths: str | Sequence[str]
) -> InputSpec:
    """``spec`` with ``csv_columns`` filled from the header of the first input file with a
    line (in path order: empty and unreadable files skipped) when it is a CSV spec without them
    (e.g. the ``contract`` preset); otherwise ``spec`` unchanged. ``ValueError`` when no file
    has a line."""
    if spec.format != "csv" or spec.csv_columns is not None:
        return spec
    reader = spark.read
    if spec.file_glob:
        reader = reader.option("pathGlobFilter", spec.file_glob)
    files = sorted(reader.text(_as_list(paths)).inputFiles())
    sep = spec.csv_options.get("sep", spec.csv_options.get("delimiter", ","))
    for f in files:  # the first with a line: empty files are skipped, unreadable ones reported
        try:  # when the replay reads them
            return spec.replace(csv_columns=read_csv_header(spark, f, sep))
        except Exception:  # empty, or unreadable (py4j / Spark errors)
            continue
    raise ValueError(f"no input file under {', '.join(_as_list(paths))} has a line to read a "
                     "CSV header from")


# ----------------------------------------------------------------------------------- parsing


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _ddl(names: Sequence[str]) -> str:
    return ", ".join(f"{_quote(n)} STRING" for n in names)


def _blank(c: Column) -> Column:
    return c.isNull() | (F.trim(c) == "")


def _parse_source(raw: DataFrame, spec: InputSpec) -> tuple[DataFrame, list[str]]:
    """Raw DataFrame → one row per line with the source columns, ``_FILE``, ``_RAW`` (the
    record's text; a Parquet row's JSON, computed only where used), ``_ROW`` (Parquet: the row),
    ``_MALFORMED``, ``_HEADER`` and ``_BAD_UTF8``.

    Returns the frame and the names of its source columns.
    """
    raw_col = F.to_json(F.col("record")) if spec.format == "parquet" else F.col("raw_record")
    base = [F.col("source_file").alias(_FILE), raw_col.alias(_RAW)]
    blank = _blank(raw_col)
    if spec.format == "parquet":
        base.append(F.col("record").alias(_ROW))
        fields = raw.schema["record"].dataType.fields  # type: ignore[attr-defined]
        names = [f.name for f in fields]
        # Its string columns, not its JSON form (to_json has replaced invalid bytes already).
        bad = F.lit(False)
        for f in fields:
            if isinstance(f.dataType, T.StringType):
                value = F.col("record").getField(f.name)
                bad = bad | ~F.coalesce(F.is_valid_utf8(value), F.lit(True))
        parsed = raw.select(
            *base,
            *[F.col("record").getField(n).alias(n) for n in names],
            F.lit(False).alias(_MALFORMED),
            F.lit(False).alias(_HEADER),
            bad.alias(_BAD_UTF8),
        )
        return parsed, names
    base.append((~F.is_valid_utf8(raw_col)).alias(_BAD_UTF8))
    if spec.format == "csv":
        if spec.csv_columns is None:
            raise ValueError(
                "CSV spec without csv_columns: call resolve_input_spec(spec, spark, paths) "
                "first (it reads the header of the first file)"
            )
        names = list(spec.csv_columns)
        line = F.regexp_replace(raw_col, "^\ufeff", "")
        options = {
            **CSV_DEFAULT_OPTIONS,
            **spec.csv_options,
            "mode": "PERMISSIVE",
            "columnNameOfCorruptRecord": _CORRUPT,
        }
        struct = F.from_csv(line, _ddl([*names, _CORRUPT]), options)
        header = F.lit(True)
        for n in names:
            header = header & F.coalesce(struct.getField(n) == F.lit(n), F.lit(False))
        malformed = blank | struct.getField(_CORRUPT).isNotNull()
        parsed = raw.select(
            *base,
            *[struct.getField(n).alias(n) for n in names],
            malformed.alias(_MALFORMED),
            (header & ~malformed).alias(_HEADER),
        )
        return parsed, names
    if spec.format == "json":
        names = list(spec.source_fields())
        options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
        struct = F.from_json(raw_col, _ddl([*names, _CORRUPT]), options)
        malformed = blank | struct.isNull() | struct.getField(_CORRUPT).isNotNull()
        parsed = raw.select(
            *base,
            *[struct.getField(n).alias(n) for n in names],
            malformed.alias(_MALFORMED),
            F.lit(False).alias(_HEADER),
        )
        return parsed, names
    # text: capture groups of record_regex → fields
    regex = spec.record_regex or ""
    names = list(spec.fields)
    try:
        groups = re.compile(regex).groups
    except re.error:  # Java-only syntax: Spark will validate it
        groups = len(names)
    if len(names) > groups:
        raise ValueError(f"record_regex has {groups} groups but fields names {len(names)}")
    matches = raw_col.rlike(regex)
    parsed = raw.select(
        *base,
        *[
            F.when(matches, F.regexp_extract(raw_col, regex, i + 1)).alias(n)
            for i, n in enumerate(names)
        ],
        (blank | ~matches).alias(_MALFORMED),
        F.lit(False).alias(_HEADER),
    )
    return parsed, names


def _mapped(value: str | None, available: set[str]) -> Column:
    """Column for a mapping value: a source column, null for an absent one, or an expression."""
    if value is None:
        return F.lit(None).cast("string")
    if is_identifier(value):
        return F.col(_quote(value)) if value in available else F.lit(None).cast("string")
    return F.expr(value)


def _check_session_time_zone(df: DataFrame) -> None:
    try:
        tz = df.sparkSession.conf.get("spark.sql.session.timeZone")
    except Exception:  # pragma: no cover - Spark Connect without conf access
        return
    if tz not in UTC_ZONES:
        raise ValueError(
            f"map_records needs the Spark session time zone to be UTC (got {tz!r}); "
            "pipelines.spark.session.build_session sets it"
        )


def _minute_hint(c: Column, dtype: T.DataType, spec: InputSpec) -> Column:
    """Spark's guess at a record's publish-time minute (epoch µs of the minute, UTC; null when
    it has none) from the mapped publish time ``c`` of type ``dtype``: timestamps, and strings
    in an ISO or pattern ``publish_time_format`` (taken in the spec's time zone). Only the
    staging pass's partitioning reads it, to put a minute's records in one task before the
    rules spread them; the rules check it (``pipelines.ingest.rules.minutes_misplaced``), so a
    wrong or missing guess costs a second pass in one task, never a result."""
    fmt = spec.publish_time_format
    if isinstance(dtype, T.TimestampType):
        ts = c
    elif isinstance(dtype, T.StringType) and fmt not in TIME_UNITS:
        s = F.trim(c)
        ts = F.try_to_timestamp(s) if fmt in ("auto", "iso") else F.try_to_timestamp(s, F.lit(fmt))
        if spec.time_zone not in UTC_ZONES:
            ts = F.to_utc_timestamp(ts, spec.time_zone)
    else:
        return F.lit(None).cast("bigint")
    us = F.unix_micros(ts)
    return us - F.pmod(us, F.lit(MINUTE_US))


def _as_strings_when_null(df: DataFrame) -> DataFrame:
    """A column the mapping makes null (``NullType``) goes to the rules as strings."""
    return df.select(*[F.col(_quote(f.name)).cast("string").alias(f.name)
                       if isinstance(f.dataType, T.NullType) else F.col(_quote(f.name))
                       for f in df.schema.fields])


def _taken_from_row(spec: InputSpec, names: list[str]) -> set[str]:
    """Contract columns the rules take from the Parquet ``record`` itself (mapped to one of its
    fields by name): no mapped copy of them is shipped. None for other formats (empty)."""
    if spec.format != "parquet":
        return set()
    return {c for c in MAPPED_COLUMNS
            if (v := spec.columns.get(c)) is not None and is_identifier(v) and v in names}


def map_records(raw_df: DataFrame, spec: InputSpec,
                observation: Observation | None = None) -> DataFrame:
    """Raw records (:func:`read_raw_batch`, or a micro-batch of :func:`read_raw_stream`) →
    the mapped records the rules take, one row per record (CSV header lines dropped), in the
    columns :data:`pipelines.ingest.rules.SOURCE_FILE` lists: the format parsed and the mapping
    evaluated in Spark SQL, no rule applied.

    ``raw_record`` is shipped for text formats and, as the row's JSON, for a Parquet spec that
    spreads minutes; a Parquet row goes field by field (``record:<field>``: the quarantine's
    JSON of a rejected row is made from them), and a contract column mapped to one of its
    fields by name is taken from there. A spec that spreads minutes also gets ``o_<i>`` and
    ``minute_hint``.

    ``observation`` (static ``raw_df`` only): collects, during the first action on the records,
    ``records`` (records mapped) and, for JSON, per contract column ``c`` of
    ``spec.checked_sources()``, ``present_<c>``: the records whose mapped field has a value (0
    = the field is absent, or null, in every record). The Spark session time zone must be UTC
    (``ValueError`` otherwise)."""
    _check_session_time_zone(raw_df)
    parsed, names = _parse_source(raw_df, spec)
    parsed = parsed.where(~F.col(_HEADER))
    available = set(names)
    # Scope: source columns, raw_record / source_file (unless a source column has that name).
    scope_cols = [F.col(_quote(n)) for n in names]
    if "raw_record" not in available:
        scope_cols.append(F.col(_RAW).alias("raw_record"))
    if "source_file" not in available:
        scope_cols.append(F.col(_FILE).alias("source_file"))
    declared = [n for n in spec.source_fields() if n not in available]
    scope_cols += [F.lit(None).cast("string").alias(n) for n in declared]
    available |= set(declared) | {"raw_record", "source_file"}
    internal = [_FILE, _RAW, _MALFORMED, _BAD_UTF8, *([_ROW] if spec.format == "parquet" else [])]
    scope = parsed.select(*internal, *scope_cols)

    row = names if spec.format == "parquet" else []  # the Parquet row, field by field
    from_row = _taken_from_row(spec, names)
    spread = spec.spread_within_minute
    shipped = [
        F.col(_FILE).alias(SOURCE_FILE),
        F.col(_BAD_UTF8).alias(INVALID_UTF8_FLAG),
        F.col(_MALFORMED).alias(MALFORMED_FLAG),
        *([F.col(_RAW).alias(RAW_RECORD)] if spec.format != "parquet" or spread else []),
        *[F.col(_ROW).getField(n).alias(row_field(n)) for n in row],
        *[_mapped(spec.columns.get(c), available).alias(mapped_name(c)) for c in MAPPED_COLUMNS
          if c not in from_row],
        *[_mapped(v, available).alias(order_name(i)) for i, v in enumerate(spec.spread_order)],
        *([_mapped(spec.columns["publish_time"], available).alias(_TIME)] if spread else []),
    ]
    records = _as_strings_when_null(scope.select(*shipped))
    if spread:
        hint = _minute_hint(F.col(_TIME), records.schema[_TIME].dataType, spec)
        records = records.withColumn(MINUTE_HINT, hint).drop(_TIME)
    if observation is None:
        return records
    present = list(spec.checked_sources()) if spec.format == "json" else []
    return records.observe(
        observation, F.count(F.lit(1)).alias("records"),
        *[F.count_if(F.col(mapped_name(c)).isNotNull()).alias(f"{PRESENT_PREFIX}{c}")
          for c in present])


def quarantine_rows(verdicts: DataFrame, spec: InputSpec) -> DataFrame:
    """The quarantined records among the rules' ``verdicts`` (rows of
    ``pipelines.spark.udfs.verdict_type``) as :data:`QUARANTINE_COLUMNS`: a rejected record's
    ``raw_record`` is its text (invalid UTF-8 replaced by U+FFFD) or, for Parquet, its row's
    JSON (``to_json(record)``); a late one's is the JSON of its message columns."""
    text = F.to_json(F.col(SOURCE_ROW)) if spec.format == "parquet" else F.col(RAW_RECORD)
    late = F.to_json(F.struct("topic", "key", "producer_name", "sequence_id", "publish_time",
                              "payload_size"))
    raw = F.when(F.col("reason") == F.lit(LATE), late).otherwise(F.make_valid_utf8(text))
    return verdicts.where(F.col("reason").isNotNull()).select(
        F.col(SOURCE_FILE), raw.alias("raw_record"), F.col("reason"))


def parse_records(raw_df: DataFrame, spec: InputSpec, observation: Observation | None = None
                  ) -> tuple[DataFrame, DataFrame]:
    """Map a raw DataFrame to the input contract and apply the rules: ``(accepted,
    quarantine)`` (tests and ad-hoc reads; the replay stages instead:
    ``pipelines.spark.staging_pass.stage_batch``).

    ``raw_df`` comes from :func:`read_raw_batch` or is a ``foreachBatch`` micro-batch of
    :func:`read_raw_stream`. A streaming ``raw_df`` is accepted only for specs that do not
    spread minutes (spreading needs a micro-batch's records of a minute together); the pipeline
    always calls it on the static micro-batch. The Spark session time zone must be UTC.

    :func:`map_records`, then the rules of :mod:`pipelines.ingest.rules` in one Python pass
    (``mapInArrow``, :func:`pipelines.spark.udfs.parse_task`; a spec that spreads minutes runs it in
    one task).

    ``accepted`` columns (:data:`ACCEPTED_COLUMNS`): ``topic``, ``key`` (null = keyless),
    ``producer_name``, ``sequence_id`` (bigint, null = assign later), ``publish_time``
    (timestamp, UTC), ``payload_size`` (bigint bytes), ``source_file``, ``event_ms`` (the
    emulated clock: ``floor(publish_time_us / 1000 / speed)``), ``hash32`` (bigint),
    ``segment_hash`` and ``hash_b`` (int; all three null for a keyless message).

    ``quarantine`` columns (:data:`QUARANTINE_COLUMNS`): ``source_file``, ``raw_record``,
    ``reason`` (one of :data:`QUARANTINE_REASONS`). CSV header lines are in neither. Both
    derive from the same pass: cache the input when computing both.

    ``observation``: see :func:`map_records` (``ValueError`` on a streaming ``raw_df``).
    """
    if raw_df.isStreaming and observation is not None:
        raise ValueError("an observation needs a static DataFrame: call parse_records inside "
                         "foreachBatch on the micro-batch of read_raw_stream")
    if raw_df.isStreaming and spec.spread_within_minute:
        raise ValueError(
            f"preset {spec.preset!r} spreads records within a minute (a minute's records "
            "together, which streams do not allow): call parse_records inside foreachBatch on "
            "the micro-batch of read_raw_stream"
        )
    records = map_records(raw_df, spec, observation)
    if spec.spread_within_minute:
        records = records.repartition(1)
    verdicts = records.mapInArrow(parse_task(spec), verdict_type(records))
    accepted = verdicts.where(F.col("reason").isNull()).select(*ACCEPTED_COLUMNS)
    return accepted, quarantine_rows(verdicts, spec)


def ingest_batch(
    spark: SparkSession, paths: str | Sequence[str], spec: InputSpec
) -> tuple[DataFrame, DataFrame]:
    """Batch convenience: :func:`resolve_input_spec`, :func:`read_raw_batch`,
    :func:`parse_records`."""
    spec = resolve_input_spec(spec, spark, paths)
    return parse_records(read_raw_batch(spark, paths, spec.format, spec.file_glob), spec)


__all__ = [
    "ACCEPTED_COLUMNS",
    "BAD_PAYLOAD_SIZE",
    "BAD_PUBLISH_TIME",
    "BAD_SEQUENCE_ID",
    "FILE_REASONS",
    "INVALID_UTF8",
    "KEY_TOO_LONG",
    "LATE",
    "MALFORMED_RECORD",
    "MAX_KEY_BYTES",
    "MAX_PUBLISH_MICROS",
    "MIN_PUBLISH_MICROS",
    "MISSING_PAYLOAD_SIZE",
    "MISSING_PUBLISH_TIME",
    "MISSING_TOPIC",
    "NEGATIVE_PAYLOAD_SIZE",
    "PRESENT_PREFIX",
    "PUBLISH_TIME_OUT_OF_RANGE",
    "QUARANTINE_COLUMNS",
    "QUARANTINE_REASONS",
    "TRUNCATED_FILE",
    "UNREADABLE_FILE",
    "UTC_ZONES",
    "ingest_batch",
    "micro_batch_files",
    "parse_records",
    "read_csv_header",
    "read_raw_batch",
    "read_raw_stream",
    "resolve_input_spec",
    "salvage_files",
]
