"""Ingest: read message logs, map them to the input contract, validate, quarantine, hash.

Two readers produce the same *raw* DataFrame (columns ``source_file`` and ``raw_record``; for
Parquet ``source_file`` and ``record``, the row as a struct):

- :func:`read_raw_stream`: a streaming DataFrame (``spark.readStream``, ``maxFilesPerTrigger``),
  meant to be fed to ``foreachBatch``;
- :func:`read_raw_batch`: the same as a static DataFrame (tests, ad-hoc runs).

CSV, JSON lines and ``text`` logs are read with Spark's ``text`` source, one raw line per record
(``.gz`` files are decompressed transparently), so a rejected record keeps its exact text;
``source_file`` is ``_metadata.file_path`` (available for streaming text sources too). Parquet
uses the Parquet source (schema from a static read of the inputs); its ``raw_record`` is
``to_json(record)``, made by :func:`parse_records` only where it is used (quarantined records,
mappings that name it): a ``foreachBatch`` micro-batch is materialised as read, so a JSON form
made by the reader would be computed for every record (1.3 s per million here). A consequence
of line-based reading: a CSV field with an embedded line break is not supported (each physical
line is one record).

:func:`parse_records` turns a *static* raw DataFrame (a micro-batch inside ``foreachBatch``, or
a batch read) into ``(accepted, quarantine)``: the format is parsed (``from_csv``,
``from_json``, ``record_regex``) and the mapping evaluated in Spark SQL; the input rules after
the mapping are those of :mod:`pipelines.ingest_rules`, the functions the local engine calls.
``shared_rules=True`` runs those very functions on the executors (:mod:`pipelines.udfs`: an
Arrow UDF; minute spreading in ``applyInArrow`` per minute). By default (the replay) they run
as their Spark SQL translation (:func:`_checked_sql`, :func:`_spread_sql`), because the Arrow
UDF is one more Python pass over every record: parsing and staging the 1 M-message bench
input took 5.9 s with the translation and 10.6 s with the UDF (2 cores, load 2-3).
``tests/spark/test_ingest.py`` checks the two paths give the same tables, and the local
engine's differential test checks the replay against the shared functions. Minute spreading
groups by minute, which streams do not allow, so a stream is accepted only for specs without
spreading. Both outputs derive from the same input: cache the micro-batch when writing both.

Every input line is either a header line (CSV only: a line equal to the spec's header row; not a
record, neither accepted nor quarantined), accepted, or quarantined with exactly one reason:
the first failing rule in :data:`QUARANTINE_REASONS` order (constants re-exported from
:mod:`pipelines.ingest_rules`).
"""

from __future__ import annotations

import csv
import decimal
import json
import re
from collections.abc import Sequence
from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipelines.ingest_rules import (  # the rules' constants, re-exported for callers
    ACCEPTED_COLUMNS,
    BAD_PAYLOAD_SIZE,
    BAD_PUBLISH_TIME,
    BAD_SEQUENCE_ID,
    CHECKED_FIELDS,
    FILE_REASONS,
    INVALID_UTF8,
    KEY_TOO_LONG,
    LATE,
    MALFORMED_RECORD,
    MAPPED_COLUMNS,
    MAX_KEY_BYTES,
    MAX_PUBLISH_MICROS,
    MIN_PUBLISH_MICROS,
    MINUTE_US,
    MISSING_PAYLOAD_SIZE,
    MISSING_PUBLISH_TIME,
    MISSING_TOPIC,
    NEGATIVE_PAYLOAD_SIZE,
    PRESENT_PREFIX,
    PUBLISH_TIME_OUT_OF_RANGE,
    QUARANTINE_COLUMNS,
    QUARANTINE_REASONS,
    TRUNCATED_FILE,
    UNREADABLE_FILE,
    UTC_ZONES,
)
from pipelines.presets import CSV_DEFAULT_OPTIONS, InputSpec, is_identifier, normalize_format
from pipelines.udfs import check_records_udf, key_hashes, spread_minutes_fn

# Internal column names (prefixed so they cannot shadow source columns).
_RAW = "__tr_raw"
_FILE = "__tr_file"
_MALFORMED = "__tr_malformed"
_HEADER = "__tr_header"
_CORRUPT = "__tr_corrupt"
_BAD_UTF8 = "__tr_bad_utf8"

_NUMBER_DECIMAL = "decimal(38,9)"
_EPOCH_FACTORS = {"epoch_s": 1_000_000, "epoch_ms": 1000, "epoch_us": 1, "epoch_ns": 0.001}
_ZONE_AT_END = (
    r"[0-9]{2}:[0-9]{2}(:[0-9]{2}([.,][0-9]*)?)?\s*(Z|z|UTC|GMT|[+-][0-9]{1,2}(:?[0-9]{2})?)$"
)


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
    static read of the inputs that skips corrupt files (they are reported when the micro-batch
    reads them, see :func:`salvage_files`). ``path_glob_filter`` as in :func:`read_raw_batch`.
    """
    fmt = normalize_format(fmt)
    paths = _as_list(paths)
    if not paths:
        raise ValueError("read_raw_stream needs at least one path")
    schema = T.StructType()
    if fmt == "parquet":
        record = read_raw_batch(spark, paths, fmt, path_glob_filter,
                                ignore_corrupt_files=True).schema["record"].dataType
        assert isinstance(record, T.StructType)
        schema = record
    frames = []
    for path in map(_stream_path, paths):
        reader = spark.readStream
        if max_bytes_per_trigger is not None:
            reader = reader.option("maxBytesPerTrigger", int(max_bytes_per_trigger))
        elif max_files_per_trigger is not None:
            reader = reader.option("maxFilesPerTrigger", int(max_files_per_trigger))
        if path_glob_filter:
            reader = reader.option("pathGlobFilter", path_glob_filter)
        if fmt == "parquet":
            frames.append(_parquet_raw(reader.schema(schema).parquet(path)))
        else:
            frames.append(_text_raw(reader.format("text").load(path)))
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


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
    else ``unreadable_file``. ``raw`` has ``raw_schema`` (the micro-batch's schema).
    """
    fmt = normalize_format(fmt)
    record = raw_schema["record"].dataType if fmt == "parquet" else None
    assert record is None or isinstance(record, T.StructType)
    errors: dict[str, str] = {}
    for f in files:
        try:
            read_raw_batch(spark, [f], fmt, record_schema=record).count()
        except Exception as exc:  # any read failure of this one file
            errors[f] = _read_error(exc)
    good = [f for f in files if f not in errors]
    frames = [read_raw_batch(spark, good, fmt, record_schema=record)] if good else []
    rows = []
    for f in sorted(errors):
        salvaged = read_raw_batch(spark, [f], fmt, record_schema=record,
                                  ignore_corrupt_files=True)
        n = salvaged.count()
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
    """``spec`` with ``csv_columns`` filled from the header of the first input file (in path
    order) when it is a CSV spec without them (e.g. the ``contract`` preset); otherwise ``spec``
    unchanged."""
    if spec.format != "csv" or spec.csv_columns is not None:
        return spec
    reader = spark.read
    if spec.file_glob:
        reader = reader.option("pathGlobFilter", spec.file_glob)
    files = sorted(reader.text(_as_list(paths)).inputFiles())
    if not files:
        raise ValueError(f"{paths}: no input files to read a CSV header from")
    sep = spec.csv_options.get("sep", spec.csv_options.get("delimiter", ","))
    return spec.replace(csv_columns=read_csv_header(spark, files[0], sep))


# ----------------------------------------------------------------------------------- parsing


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _ddl(names: Sequence[str]) -> str:
    return ", ".join(f"{_quote(n)} STRING" for n in names)


def _blank(c: Column) -> Column:
    return c.isNull() | (F.trim(c) == "")


def _parse_source(raw: DataFrame, spec: InputSpec) -> tuple[DataFrame, list[str]]:
    """Raw DataFrame → one row per line with the source columns, ``_MALFORMED``, ``_HEADER``
    and ``_BAD_UTF8``.

    Returns the frame and the names of its source columns.
    """
    raw_col = F.to_json(F.col("record")) if spec.format == "parquet" else F.col("raw_record")
    base = [F.col("source_file").alias(_FILE), raw_col.alias(_RAW)]
    blank = _blank(raw_col)
    if spec.format == "parquet":
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


def _integer(c: Column, dtype: T.DataType) -> tuple[Column, Column]:
    """(value as bigint, is-bad) for an integer-valued field of any type; null → not bad."""
    if isinstance(dtype, T.IntegralType):
        return c.cast("bigint"), F.lit(False)
    d = F.trim(c.cast("string")).try_cast(_NUMBER_DECIMAL)
    value = F.when(d == F.floor(d), F.floor(d).try_cast("bigint"))
    present = ~_blank(c.cast("string"))
    return value, present & value.isNull()


def _epoch_micros(number: Column, unit: str) -> Column:
    """Epoch number (decimal) in ``unit`` → epoch microseconds (decimal, floored), null on
    overflow."""
    factor = F.lit(decimal.Decimal(str(_EPOCH_FACTORS[unit])))
    return F.floor(F.try_multiply(number, factor))


def _pattern_has_zone(pattern: str) -> bool:
    unquoted = re.sub(r"'[^']*'", "", pattern)
    return re.search(r"[XxZzOV]", unquoted) is not None


def _publish_micros(c: Column, dtype: T.DataType, spec: InputSpec) -> tuple[Column, Column]:
    """(epoch microseconds as decimal or bigint, is-missing) of the mapped publish time.

    Null microseconds with not-missing means unparseable (``bad_publish_time``).
    """
    fmt = spec.publish_time_format
    tz = spec.time_zone
    local = tz not in UTC_ZONES

    def from_local(ts: Column, has_zone: Column | bool) -> Column:
        if not local:
            return ts
        if isinstance(has_zone, bool):
            return ts if has_zone else F.to_utc_timestamp(ts, tz)
        return F.when(has_zone, ts).otherwise(F.to_utc_timestamp(ts, tz))

    if isinstance(dtype, T.TimestampType):
        return F.unix_micros(c), c.isNull()
    if isinstance(dtype, T.TimestampNTZType | T.DateType):
        return F.unix_micros(from_local(c.cast("timestamp"), False)), c.isNull()
    unit = fmt if fmt in _EPOCH_FACTORS else "epoch_ms"
    if isinstance(dtype, T.NumericType):
        return _epoch_micros(c.try_cast(_NUMBER_DECIMAL), unit), c.isNull()
    s = F.trim(c.cast("string"))
    missing = _blank(s)
    number = s.try_cast(_NUMBER_DECIMAL)
    if fmt in _EPOCH_FACTORS:
        return _epoch_micros(number, fmt), missing
    if fmt in ("auto", "iso"):
        ts = from_local(F.try_to_timestamp(s), s.rlike(_ZONE_AT_END))
        micros = F.unix_micros(ts)
        if fmt == "auto":
            micros = F.when(number.isNotNull(), _epoch_micros(number, "epoch_ms")).otherwise(
                micros.cast("decimal(38,0)")
            )
        return micros, missing
    ts = from_local(F.try_to_timestamp(s, F.lit(fmt)), _pattern_has_zone(fmt))
    return F.unix_micros(ts), missing


def _check_session_time_zone(df: DataFrame) -> None:
    try:
        tz = df.sparkSession.conf.get("spark.sql.session.timeZone")
    except Exception:  # pragma: no cover - Spark Connect without conf access
        return
    if tz not in UTC_ZONES:
        raise ValueError(
            f"parse_records needs the Spark session time zone to be UTC (got {tz!r}); "
            "pipelines.spark_session.build_session sets it"
        )


_CHECKED = ("__topic", "__producer_name", "__sequence_id", "__publish_us", "__payload_size")


def _checked_sql(mapped: DataFrame, flags: list[Column], spec: InputSpec, n_order: int,
                 present: list[str]) -> DataFrame:
    """The input rules in Spark SQL (the replay's path: no Python pass besides staging's).
    Must agree with :func:`pipelines.ingest_rules.check_records`: the local engine's
    differential test and ``tests/spark/test_ingest.py``'s shared-rules cases compare them."""
    types = {f.name: f.dataType for f in mapped.schema.fields}
    topic_raw = F.col("__m_topic").cast("string")
    topic = F.when(_blank(topic_raw), F.lit(spec.topic).cast("string")).otherwise(topic_raw)
    producer_raw = F.col("__m_producer_name").cast("string")
    producer = F.when(_blank(producer_raw), F.lit(spec.producer_name)).otherwise(producer_raw)
    micros, time_missing = _publish_micros(
        F.col("__m_publish_time"), types["__m_publish_time"], spec
    )
    size, size_bad = _integer(F.col("__m_payload_size"), types["__m_payload_size"])
    size_type = types["__m_payload_size"]
    # a number is never blank: no string form of every record's size
    size_missing = (F.col("__m_payload_size").isNull() if isinstance(size_type, T.NumericType)
                    else _blank(F.col("__m_payload_size").cast("string")))
    seq, seq_bad = _integer(F.col("__m_sequence_id"), types["__m_sequence_id"])
    checked = mapped.select(
        *flags,
        F.col("__m_key").cast("string").alias("key"),
        *[F.col(f"__o_{i}") for i in range(n_order)],
        *[F.col(f"__m_{c}").isNotNull().alias(f"__p_{c}") for c in present],
        topic.alias("__topic"),
        producer.alias("__producer_name"),
        seq.alias("__sequence_id"),
        seq_bad.alias("__seq_bad"),
        micros.alias("__micros"),
        time_missing.alias("__time_missing"),
        size.alias("__payload_size"),
        size_bad.alias("__size_bad"),
        size_missing.alias("__size_missing"),
    )
    m = F.col("__micros")
    reason = (
        F.when(F.col(_BAD_UTF8), F.lit(INVALID_UTF8))
        .when(F.col(_MALFORMED), F.lit(MALFORMED_RECORD))
        .when(F.col("__topic").isNull(), F.lit(MISSING_TOPIC))
        .when(F.col("__time_missing"), F.lit(MISSING_PUBLISH_TIME))
        .when(m.isNull(), F.lit(BAD_PUBLISH_TIME))
        .when(
            (m < F.lit(MIN_PUBLISH_MICROS)) | (m > F.lit(MAX_PUBLISH_MICROS)),
            F.lit(PUBLISH_TIME_OUT_OF_RANGE),
        )
        .when(F.col("__size_missing"), F.lit(MISSING_PAYLOAD_SIZE))
        .when(F.col("__size_bad"), F.lit(BAD_PAYLOAD_SIZE))
        .when(F.col("__payload_size") < 0, F.lit(NEGATIVE_PAYLOAD_SIZE))
        .when(F.col("__seq_bad") | (F.col("__sequence_id") < 0), F.lit(BAD_SEQUENCE_ID))
        .when(F.octet_length(F.col("key")) > F.lit(MAX_KEY_BYTES), F.lit(KEY_TOO_LONG))
    )
    return checked.select(
        *flags, "key", *[F.col(f"__o_{i}") for i in range(n_order)],
        *[F.col(f"__p_{c}") for c in present],
        "__topic", "__producer_name", "__sequence_id",
        m.try_cast("bigint").alias("__publish_us"), "__payload_size",
        reason.alias("__reason"),
    )


def _checked_shared(mapped: DataFrame, flags: list[Column], spec: InputSpec, n_order: int,
                    present: list[str]) -> DataFrame:
    """The input rules as :func:`pipelines.ingest_rules.check_records` in an Arrow UDF (the
    functions the local engine calls; one more Python pass over the records)."""
    rules = check_records_udf(spec)(*[F.col(f"__m_{c}") for c in MAPPED_COLUMNS],
                                    F.col(_BAD_UTF8), F.col(_MALFORMED))
    return mapped.select(
        *flags,
        F.col("__m_key").cast("string").alias("key"),
        rules.alias("__c"),
        *[F.col(f"__o_{i}") for i in range(n_order)],
        *[F.col(f"__m_{c}").isNotNull().alias(f"__p_{c}") for c in present],
    ).select(
        *flags, "key", *[F.col(f"__o_{i}") for i in range(n_order)],
        *[F.col(f"__p_{c}") for c in present],
        *[F.col(f"__c.{f.name}").alias(f"__{f.name}") for f in CHECKED_FIELDS],
    )


def _event_ms_sql(us: Column, speed: float) -> Column:
    """``floor(us / 1000 / speed)`` as bigint (:func:`pipelines.ingest_rules.event_ms`)."""
    if speed == 1.0:
        return F.floor(us / F.lit(1000)).cast("bigint")
    divisor = decimal.Decimal(repr(speed)) * 1000
    return F.floor(us.cast("decimal(20,0)") / F.lit(divisor)).cast("bigint")


def _spread_sql(ok: DataFrame, n_order: int) -> DataFrame:
    """Minute spreading as a window (see :func:`pipelines.ingest_rules.spread_minutes`)."""
    minute_us = F.col("__publish_us") - F.pmod(F.col("__publish_us"), F.lit(MINUTE_US))
    ok = ok.withColumn("__minute", minute_us)
    order = [F.col(f"__o_{i}").asc_nulls_first() for i in range(n_order)]
    raw_sha = F.sha2(F.col(_RAW), 256)  # last: a tie-break that does not depend on chunking
    w = Window.partitionBy("__minute").orderBy(*order, raw_sha.asc())
    n = F.count(F.lit(1)).over(Window.partitionBy("__minute"))
    i = F.row_number().over(w) - 1
    offset_ms = F.floor(i * F.lit(60_000) / n).cast("bigint")
    return ok.withColumn("__publish_us", F.col("__minute") + offset_ms * 1000)


def _spread_shared(ok: DataFrame, spec: InputSpec, n_order: int) -> DataFrame:
    """Minute spreading by :func:`pipelines.ingest_rules.spread_minutes` in ``applyInArrow``
    per minute."""
    order = [f"__o_{i}" for i in range(n_order)]
    ok = ok.select(_FILE, _RAW, "key", *order, *_CHECKED, "__event_ms")
    minute = F.col("__publish_us") - F.pmod(F.col("__publish_us"), F.lit(MINUTE_US))
    return ok.groupBy(minute.alias("__minute")).applyInArrow(
        spread_minutes_fn(order, spec.speed), ok.schema)


def parse_records(raw_df: DataFrame, spec: InputSpec, observation: Observation | None = None,
                  shared_rules: bool = False) -> tuple[DataFrame, DataFrame]:
    """Map a static raw DataFrame to the input contract: ``(accepted, quarantine)``.

    ``raw_df`` comes from :func:`read_raw_batch` or is a ``foreachBatch`` micro-batch of
    :func:`read_raw_stream`. A streaming ``raw_df`` is accepted only for specs that do not
    spread minutes (``spread_within_minute`` groups records by minute, which streams do not
    allow); the pipeline always calls it on the static micro-batch. The Spark session time zone
    must be UTC.

    The source format is parsed and the mapping evaluated here, in Spark SQL. The input rules
    are :mod:`pipelines.ingest_rules`': with ``shared_rules`` those very functions run on the
    executors (:func:`~pipelines.ingest_rules.check_records` in an Arrow UDF,
    :func:`~pipelines.ingest_rules.spread_minutes` in ``applyInArrow`` per minute); without
    (the default, the replay's: no extra Python pass) their Spark SQL translation, which tests
    hold equal to them. Key hashes: :func:`~pipelines.ingest_rules.key_hashes_arrow` in an
    Arrow UDF.

    ``accepted`` columns (:data:`ACCEPTED_COLUMNS`): ``topic``, ``key`` (null = keyless),
    ``producer_name``, ``sequence_id`` (bigint, null = assign later), ``publish_time``
    (timestamp, UTC), ``payload_size`` (bigint bytes), ``source_file``, ``event_ms`` (the
    emulated clock: ``floor(publish_time_us / 1000 / speed)``), ``hash32`` (bigint),
    ``segment_hash`` and ``hash_b`` (int; all three null for a keyless message).

    ``quarantine`` columns (:data:`QUARANTINE_COLUMNS`): ``source_file``, ``raw_record``,
    ``reason`` (one of :data:`QUARANTINE_REASONS`). CSV header lines are in neither.

    ``observation`` (static ``raw_df`` only): collects ``records`` (records parsed, header lines
    excluded) and ``quarantined`` (those with a reason) during the first action on ``accepted``
    or ``quarantine``, so a caller that writes ``accepted`` learns whether anything needs
    quarantining without a second pass over the input; for JSON also, per contract column ``c``
    of ``spec.checked_sources()``, ``present_<c>``: the records whose mapped field has a value
    (0 = the field is absent, or null, in every record). ``ValueError`` on a streaming
    ``raw_df``.
    """
    if raw_df.isStreaming and observation is not None:
        raise ValueError("an observation needs a static DataFrame: call parse_records inside "
                         "foreachBatch on the micro-batch of read_raw_stream")
    if raw_df.isStreaming and spec.spread_within_minute:
        raise ValueError(
            f"preset {spec.preset!r} spreads records within a minute (grouped by minute, not "
            "allowed on streams): call parse_records inside foreachBatch on the micro-batch "
            "of read_raw_stream"
        )
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
    flags = [F.col(_FILE), F.col(_RAW), F.col(_MALFORMED), F.col(_BAD_UTF8)]
    scope = parsed.select(*flags, *scope_cols)

    mapping = spec.columns
    m_cols = [_mapped(mapping.get(c), available).alias(f"__m_{c}") for c in MAPPED_COLUMNS]
    spread = [_mapped(v, available).alias(f"__o_{i}") for i, v in enumerate(spec.spread_order)]
    mapped = scope.select(*flags, *m_cols, *spread)
    # a column the mapping makes null (NullType) goes to the rules as strings
    mapped = mapped.select(*[F.col(f.name).cast("string").alias(f.name)
                             if isinstance(f.dataType, T.NullType) else F.col(f.name)
                             for f in mapped.schema.fields])

    present = list(spec.checked_sources()) if spec.format == "json" else []
    checked = (_checked_shared(mapped, flags, spec, len(spread), present) if shared_rules
               else _checked_sql(mapped, flags, spec, len(spread), present))
    if observation is not None:
        checked = checked.observe(
            observation, F.count(F.lit(1)).alias("records"),
            F.count(F.col("__reason")).alias("quarantined"),
            *[F.count_if(F.col(f"__p_{c}")).alias(f"{PRESENT_PREFIX}{c}") for c in present])

    quarantine = checked.where(F.col("__reason").isNotNull()).select(
        F.col(_FILE).alias("source_file"),
        F.make_valid_utf8(F.col(_RAW)).alias("raw_record"),
        F.col("__reason").alias("reason"),
    )

    ok = checked.where(F.col("__reason").isNull())
    if shared_rules:  # check_records / spread_minutes computed __event_ms
        if spec.spread_within_minute:
            ok = _spread_shared(ok, spec, len(spread))
    else:
        if spec.spread_within_minute:
            ok = _spread_sql(ok, len(spread))
        ok = ok.withColumn("__event_ms", _event_ms_sql(F.col("__publish_us"), spec.speed))

    hashes = key_hashes(F.col("key"))
    accepted = ok.select(
        F.col("__topic").alias("topic"),
        "key",
        F.col("__producer_name").alias("producer_name"),
        F.col("__sequence_id").alias("sequence_id"),
        F.timestamp_micros(F.col("__publish_us")).alias("publish_time"),
        F.col("__payload_size").alias("payload_size"),
        F.col(_FILE).alias("source_file"),
        F.col("__event_ms").alias("event_ms"),
        hashes.alias("__h"),
    ).select(
        *ACCEPTED_COLUMNS[:-3],
        F.col("__h.hash32").alias("hash32"),
        F.col("__h.segment_hash").alias("segment_hash"),
        F.col("__h.hash_b").alias("hash_b"),
    )
    return accepted, quarantine


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
