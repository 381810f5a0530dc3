"""The input rules, written once: validation, quarantine reasons, timestamp and integer parsing,
``event_ms``, minute spreading and key hashing of mapped records — pure pyarrow / pandas / NumPy
(no pyspark), used by both engines.

Each engine reads its files its own way (Spark: ``text`` / Parquet sources, ``from_csv`` /
``from_json``, mapping expressions as Spark SQL; the local engine: Python readers and a small
interpreter for mapping expressions) and hands the records, already mapped to the contract's
six source columns (:data:`MAPPED_COLUMNS`, values as the source gives them: strings, numbers,
timestamps), plus a per-record ``invalid_utf8`` / ``malformed`` flag, to
:func:`ingest_records` as one Arrow batch (the columns :data:`SOURCE_FILE` lists):

- ``pipelines.engine.local.parse_local`` calls it directly;
- the Spark replay calls it in its staging pass (``pipelines.spark.staging_pass.stage_batch``: one
  ``mapInArrow`` per micro-batch that also hashes the keys and writes the staged files), over
  :func:`ingest_batches`; :func:`verdict_rows` returns the rejected (and late) records to
  Spark for the ``quarantine`` table; ``pipelines.spark.ingest.parse_records`` (tests, ad-hoc reads)
  runs the same in a ``mapInArrow`` of its own (``pipelines.spark.udfs.parse_task``).

:func:`key_hashes_arrow` is the one key-hashing function (the staging writer, the verdict rows,
the local engine).

Every record is either accepted or quarantined with exactly one reason: the first failing rule
in :data:`QUARANTINE_REASONS` order.
"""

from __future__ import annotations

import decimal
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any
from urllib.parse import quote, unquote

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.contract.timeformat import to_strptime
from pipelines.core.hashing import hash32_array, hash_b_array, segment_hash_array

INVALID_UTF8 = "invalid_utf8"
MALFORMED_RECORD = "malformed_record"
MISSING_TOPIC = "missing_topic"
MISSING_PUBLISH_TIME = "missing_publish_time"
BAD_PUBLISH_TIME = "bad_publish_time"
PUBLISH_TIME_OUT_OF_RANGE = "publish_time_out_of_range"
MISSING_PAYLOAD_SIZE = "missing_payload_size"
BAD_PAYLOAD_SIZE = "bad_payload_size"
NEGATIVE_PAYLOAD_SIZE = "negative_payload_size"
BAD_SEQUENCE_ID = "bad_sequence_id"
KEY_TOO_LONG = "key_too_long"
UNREADABLE_FILE = "unreadable_file"
TRUNCATED_FILE = "truncated_file"

QUARANTINE_REASONS: tuple[str, ...] = (
    INVALID_UTF8,
    MALFORMED_RECORD,
    MISSING_TOPIC,
    MISSING_PUBLISH_TIME,
    BAD_PUBLISH_TIME,
    PUBLISH_TIME_OUT_OF_RANGE,
    MISSING_PAYLOAD_SIZE,
    BAD_PAYLOAD_SIZE,
    NEGATIVE_PAYLOAD_SIZE,
    BAD_SEQUENCE_ID,
    KEY_TOO_LONG,
)
"""Quarantine reasons assigned at ingest, in the order the rules are checked (a record gets the
first that applies):

- ``invalid_utf8``: the line (or a string column of a Parquet row) is not valid UTF-8; its
  ``raw_record`` is stored with each invalid byte sequence replaced by U+FFFD.
- ``malformed_record``: the line is not a record of the format: wrong CSV field count, invalid
  or non-object JSON, a blank line, a ``text`` line not matching ``record_regex``.
- ``missing_topic``: no topic (null or blank) and the spec has no constant ``topic``.
- ``missing_publish_time``: publish time null or blank.
- ``bad_publish_time``: publish time not parseable in the spec's ``publish_time_format``.
- ``publish_time_out_of_range``: before 1970-01-01T00:00:00Z or after
  2262-04-11T23:47:16.854775Z (the int64-nanosecond limit).
- ``missing_payload_size``: payload size null or blank.
- ``bad_payload_size``: payload size not an integer (``12``, ``12.0`` and ``1.2e3`` are) or
  beyond int64.
- ``negative_payload_size``: payload size < 0.
- ``bad_sequence_id``: sequence id present but not an integer, beyond int64, or negative.
- ``key_too_long``: the key's UTF-8 encoding is longer than :data:`MAX_KEY_BYTES` (Pulsar's
  default ``maxMessageSize``: no broker would accept the message).

File-level reasons (:data:`FILE_REASONS`, one quarantine row per file, ``raw_record`` = the read
error): ``unreadable_file`` (nothing could be read: permissions, a corrupt Parquet footer, a
gzip stream that is broken from the start) and ``truncated_file`` (the file broke part-way,
e.g. a truncated gzip: the records before the break are processed, the rest is this row).

(Later stages add :data:`LATE`: a record older than what the watermark already finalized.)
"""

LATE = "late"
"""Quarantine reason added by the replay (not at ingest): the record is older than the horizon
the watermark already finalized."""

FILE_REASONS: tuple[str, ...] = (UNREADABLE_FILE, TRUNCATED_FILE)
"""Quarantine reasons of a whole input file (``pipelines.spark.ingest.salvage_files``)."""

PRESENT_PREFIX = "present_"
"""Prefix of ingest's observation metrics counting, per checked contract column of a JSON spec,
the records whose mapped field has a value."""

MAX_KEY_BYTES = 5 * 1024 * 1024
"""Longest accepted key, bytes (UTF-8): Pulsar's ``maxMessageSize`` default, 5 MiB."""

MIN_PUBLISH_MICROS = 0
"""1970-01-01T00:00:00Z in epoch microseconds (inclusive lower bound)."""
MAX_PUBLISH_MICROS = (2**63 - 1) // 1000
"""2262-04-11T23:47:16.854775Z in epoch microseconds (inclusive upper bound): the last
microsecond representable as int64 nanoseconds (pandas ``datetime64[ns]``)."""

ACCEPTED_COLUMNS: tuple[str, ...] = (
    "topic",
    "key",
    "producer_name",
    "sequence_id",
    "publish_time",
    "payload_size",
    "source_file",
    "event_ms",
    "hash32",
    "segment_hash",
    "hash_b",
)
"""Columns of an engine's accepted messages, in order."""

QUARANTINE_COLUMNS: tuple[str, ...] = ("source_file", "raw_record", "reason")
"""Columns of the quarantine rows made at ingest (the replay adds ``run_id`` and ``batch_id``)."""

MAPPED_COLUMNS: tuple[str, ...] = ("topic", "key", "producer_name", "sequence_id",
                                   "publish_time", "payload_size")
"""The contract columns a spec maps source columns to: the input of :func:`check_records`."""

CHECKED_FIELDS = pa.schema([
    ("topic", pa.string()),
    ("producer_name", pa.string()),
    ("sequence_id", pa.int64()),
    ("publish_us", pa.int64()),
    ("payload_size", pa.int64()),
    ("event_ms", pa.int64()),
    ("reason", pa.string()),
])
"""Columns :func:`check_records` returns (besides the key, which passes unchanged)."""

UTC_ZONES = frozenset({"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "+00:00", "UTC+0", "Zulu"})

TIME_UNITS: dict[str, decimal.Decimal] = {
    "epoch_s": decimal.Decimal(1_000_000), "epoch_ms": decimal.Decimal(1000),
    "epoch_us": decimal.Decimal(1), "epoch_ns": decimal.Decimal("0.001")}
"""Epoch ``publish_time_format``s → microseconds per unit."""

MINUTE_US = 60_000_000

Array = npt.NDArray[Any]
"""A NumPy array (bool flags, int64 µs / ms, object values)."""


# ------------------------------------------------------------------------------------ hashing


def key_hashes_arrow(keys: pa.Array | pa.ChunkedArray) -> pa.StructArray:
    """``hash32`` (unsigned murmur3-32 of the key's UTF-8 bytes, seed 0, as int64),
    ``segment_hash`` and ``hash_b`` (int32) of each key; all three null where the key is null.
    The one key-hashing function: the staging writer, :func:`verdict_rows` and the local
    engine call it."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    h32 = hash32_array(keys)
    mask = np.ma.getmaskarray(h32)
    seg = segment_hash_array(h32)
    hb = hash_b_array(h32)
    return pa.StructArray.from_arrays(
        [
            pa.array(np.ma.getdata(h32).astype(np.int64), mask=mask, type=pa.int64()),
            pa.array(np.ma.getdata(seg).astype(np.int32), mask=mask, type=pa.int32()),
            pa.array(np.ma.getdata(hb).astype(np.int32), mask=mask, type=pa.int32()),
        ],
        names=["hash32", "segment_hash", "hash_b"],
    )


# ---------------------------------------------------------------------------- value parsing

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_MAX_DEC = decimal.Decimal(10) ** 29
_EXACT = decimal.Context(prec=60)  # enough digits for any decimal(38,9) times 10^6
_ISO = re.compile(
    r"^(\d{4})(?:-(\d{1,2})(?:-(\d{1,2})(?:[T ](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:[.,](\d*))?)?"
    r"\s*(Z|z|UTC|GMT|[+-]\d{1,2}(?::?\d{2})?)?)?)?)?\s*$")
_ISO_UTC_FAST = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?Z"
def as_str(s: pd.Series) -> pd.Series:
    """``s`` as Python strings with ``None`` for null (object Series, same index)."""
    if s.dtype == object and pd.api.types.infer_dtype(s, skipna=True) in ("string", "empty"):
        return s.where(s.notna(), None)
    if s.dtype == object:
        return s.map(lambda v: None if v is None else (v if isinstance(v, str) else str(v)),
                     na_action="ignore").astype(object)
    return s.astype(object).where(s.notna(), None).map(
        lambda v: v if v is None else str(v), na_action="ignore")


def arrow_strings(a: pa.Array) -> pa.Array:
    """An Arrow array as strings (a ``large_string`` / dictionary / number column cast)."""
    if pa.types.is_string(a.type):
        return a
    if pa.types.is_dictionary(a.type):
        return arrow_strings(a.cast(a.type.value_type))
    if (pa.types.is_null(a.type) or pa.types.is_large_string(a.type)
            or pa.types.is_integer(a.type)):
        return a.cast(pa.string())
    return pa.array(as_str(a.to_pandas()).tolist(), pa.string())


def _blank(a: pa.Array) -> Array:
    """Null, or only whitespace (bool array)."""
    s = arrow_strings(a)  # empty, or Unicode whitespace only (what utf8_trim_whitespace trims)
    out = pc.or_(pc.equal(pc.binary_length(s), 0), pc.utf8_is_space(s))
    return np.asarray(pc.fill_null(out, True).to_numpy(zero_copy_only=False), dtype=bool)


def _decimal(v: Any) -> decimal.Decimal | None:
    """``v`` as a number (``decimal(38,9)``: nine decimals, rounded half up; below 1e29): None
    when it is not one."""
    if v is None:
        return None
    t = str(v).strip()
    if not _NUMBER.match(t):
        return None
    d = decimal.Decimal(t)
    if abs(d) >= _MAX_DEC:
        return None
    return d.quantize(decimal.Decimal("1e-9"), rounding=decimal.ROUND_HALF_UP, context=_EXACT)


def _mapped_unique(s: pd.Series, fn: Callable[[Any], Any]) -> pd.Series:
    """``s.map(fn)`` computed once per distinct value."""
    uniq = pd.unique(s)
    table = {u: fn(u) for u in uniq if u is not None and u == u}
    none = fn(None)
    return pd.Series([table.get(v) if v is not None and v == v else none for v in s],
                     index=s.index, dtype=object)


def _integer(a: pa.Array) -> tuple[pa.Array, Array]:
    """(values as int64, null where absent or bad; is-bad) of an integer-valued field: an
    integer type as is; anything else read as a number that must be whole (``12``, ``12.0``,
    ``1.2e3``) and within int64. Null or blank is absent, not bad."""
    if pa.types.is_integer(a.type):
        return a.cast(pa.int64()), np.zeros(len(a), dtype=bool)

    def conv(v: Any) -> int | None:
        d = _decimal(v)
        if d is None or d != d.to_integral_value(rounding=decimal.ROUND_FLOOR):
            return None
        i = int(d)
        return i if -(2**63) <= i < 2**63 else None

    strs = as_str(a.to_pandas())
    value = pa.array(_mapped_unique(strs, conv).tolist(), pa.int64())
    present = ~_blank(a)
    return value, present & np.asarray(value.is_null().to_numpy(zero_copy_only=False))


def _floor_micros(d: decimal.Decimal | None, unit: str) -> int | None:
    if d is None:
        return None
    return int(_EXACT.multiply(d, TIME_UNITS[unit]).to_integral_value(
        rounding=decimal.ROUND_FLOOR))


def _localize(naive_us: Array, ok: Array, tz: str) -> Array:
    """Wall-clock µs in ``tz`` → UTC µs (an ambiguous time takes the earlier offset, a time in
    a gap moves forward by the gap, as Spark's ``to_utc_timestamp``)."""
    if tz in UTC_ZONES or not ok.any():
        return naive_us
    idx = pd.DatetimeIndex(pd.to_datetime(naive_us[ok], unit="us"))
    utc = idx.tz_localize(tz, ambiguous=np.ones(len(idx), dtype=bool),
                          nonexistent=pd.Timedelta(hours=1)).tz_convert("UTC")
    out = naive_us.copy()
    out[ok] = utc.as_unit("us").asi8
    return out


def _offset_us(z: str | float | None) -> int:
    if not isinstance(z, str) or z in ("Z", "z", "UTC", "GMT"):
        return 0
    sign = -1 if z[0] == "-" else 1
    digits = z[1:].replace(":", "")
    hours = int(digits[:-2]) if len(digits) > 2 else int(digits)
    minutes = int(digits[-2:]) if len(digits) > 2 else 0
    return sign * (hours * 3600 + minutes * 60) * 1_000_000


def _iso_micros(s: pd.Series, tz: str) -> Array:
    """ISO-8601 strings → epoch µs (float, NaN when unparseable); a time without an offset is
    a wall-clock time in ``tz``; a valid date beyond pandas' range (years before 1677 or after
    2261) gives ±1e19 (out of range). The common ``yyyy-MM-ddTHH:mm:ss[.ffffff]Z`` shape is
    parsed vectorized."""
    out = np.full(len(s), np.nan)
    fast = s.str.fullmatch(_ISO_UTC_FAST).to_numpy(bool)
    if fast.any():
        parsed = pd.to_datetime(s[fast], format="ISO8601", utc=True, errors="coerce")
        good = parsed.notna().to_numpy(bool)
        vals = parsed.dt.tz_localize(None).astype("datetime64[us]").astype(np.int64).to_numpy()
        out[np.nonzero(fast)[0][good]] = vals[good]
        fast[np.nonzero(fast)[0][~good]] = False  # the slow path tells bad from out of range
    if (~fast).any():
        out[~fast] = _iso_micros_slow(s[~fast].reset_index(drop=True), tz)
    return out


def _iso_micros_slow(s: pd.Series, tz: str) -> Array:
    m = s.str.extract(_ISO)
    ok = m[0].notna().to_numpy()
    num = {k: pd.to_numeric(m[k], errors="coerce") for k in range(6)}
    parts = pd.DataFrame({"year": num[0], "month": num[1].fillna(1), "day": num[2].fillna(1),
                          "hour": num[3].fillna(0), "minute": num[4].fillna(0),
                          "second": num[5].fillna(0)})
    base = pd.to_datetime(parts[ok], errors="coerce") if ok.any() else pd.Series(dtype="M8[ns]")
    frac = m[6].fillna("").str.slice(0, 6).str.ljust(6, "0")
    frac_us = pd.to_numeric(frac.where(frac != "", "0"), errors="coerce").fillna(0)
    us = np.full(len(s), np.nan)
    valid = np.zeros(len(s), dtype=bool)
    if ok.any():
        b = base.to_numpy()
        good = ~pd.isna(b)
        idx = np.nonzero(ok)[0][good]
        us[idx] = b[good].astype("datetime64[us]").astype(np.int64) + frac_us.to_numpy()[idx]
        valid[idx] = True
        p = parts[ok][~good]  # a real date pandas cannot hold: out of range
        beyond = ((p["month"].between(1, 12) & p["day"].between(1, 31) & p["hour"].lt(24)
                   & p["minute"].lt(60) & p["second"].lt(60)
                   & ~p["year"].between(1678, 2261)).to_numpy(bool))
        far = np.nonzero(ok)[0][~good][beyond]
        us[far] = np.where(p["year"].to_numpy()[beyond] > 2000, 1e19, -1e19)
    zone = m[7]
    has_zone = zone.notna().to_numpy()
    local = valid & ~has_zone
    out = us.copy()
    if local.any():
        out[local] = _localize(us[local].astype(np.int64), np.ones(int(local.sum()), bool), tz)
    zoned = valid & has_zone
    if zoned.any():
        offs = zone[zoned].map(_offset_us).to_numpy(np.int64)
        out[zoned] = us[zoned] - offs
    return out


def _pattern_micros(s: pd.Series, pattern: str, tz: str) -> Array:
    """Strings in the Spark datetime ``pattern`` → epoch µs (float, NaN when unparseable).
    The pattern language: :mod:`pipelines.contract.timeformat`."""
    fmt = to_strptime(pattern)
    has_zone = "%z" in fmt
    parsed = pd.to_datetime(s, format=fmt, errors="coerce", utc=has_zone)
    us = np.full(len(s), np.nan)
    good = parsed.notna().to_numpy()
    vals = parsed[good]
    if has_zone:
        us[good] = vals.dt.tz_convert("UTC").dt.tz_localize(None).astype("datetime64[us]") \
            .astype(np.int64).to_numpy()
    else:
        naive = vals.astype("datetime64[us]").astype(np.int64).to_numpy()
        us[good] = _localize(naive, np.ones(len(naive), bool), tz)
    return us


def _int_micros(a: pa.Array, unit: str) -> tuple[Array, Array]:
    """Epoch integers in ``unit`` → (µs int64, is-out-of-range): exact, floored for ns; a
    value whose µs overflow int64 is out of range."""
    v = np.asarray(a.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
    if unit == "epoch_ns":
        return v // 1000, np.zeros(len(v), dtype=bool)
    factor = int(TIME_UNITS[unit])
    limit = (2**63 - 1) // factor
    over = np.abs(v) > limit
    return np.where(over, 0, v) * factor, over


def publish_micros(a: pa.Array, spec: Any) -> tuple[Array, Array, Array]:
    """``(µs, missing, bad)`` of the mapped publish times ``a`` (any Arrow type):

    - ``µs``: int64 epoch microseconds (UTC), meaningful where neither flag is set; values
      outside :data:`MIN_PUBLISH_MICROS` .. :data:`MAX_PUBLISH_MICROS` are out of range (those
      too large for int64 are clamped to its maximum);
    - ``missing``: null or blank; ``bad``: not parseable in ``spec.publish_time_format``.

    Timestamps are instants (a zone-less Arrow timestamp or a date is a wall-clock time in
    ``spec.time_zone``); numbers are epoch values in the format's unit (``spec.epoch_unit``
    for ``auto`` / ``iso`` / patterns: ``epoch_ms`` unless the run guessed another from their
    magnitude); strings are numbers (epoch formats, and ``auto`` when the string is a number),
    ISO-8601 (``auto`` / ``iso``) or the Spark datetime pattern
    (:mod:`pipelines.contract.timeformat`).
    """
    fmt, tz = spec.publish_time_format, spec.time_zone
    n = len(a)
    null = np.asarray(a.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    t = a.type
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        if pa.types.is_date(t):
            a, t = a.cast(pa.timestamp("s")), pa.timestamp("s")
        per_us = {"s": 1_000_000, "ms": 1000, "us": 1}.get(t.unit)
        raw = np.asarray(a.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
        us = raw * per_us if per_us else raw // 1000
        if t.tz is None:
            us = _localize(us, ~null, tz)
        return us, null, np.zeros(n, dtype=bool)
    unit = fmt if fmt in TIME_UNITS else spec.epoch_unit
    if pa.types.is_integer(t):
        us, over = _int_micros(a, unit)
        return np.where(over, np.iinfo(np.int64).max, us), null, np.zeros(n, dtype=bool)
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        vals = _mapped_unique(as_str(a.to_pandas()), lambda v: _floor_micros(_decimal(v), unit))
        return _micros_of(vals.to_numpy(), null)
    strs = as_str(arrow_strings(a).to_pandas())
    strs = strs.str.strip().where(strs.notna(), None)
    missing = (strs.isna() | (strs == "")).to_numpy(bool)
    number = np.full(n, None, dtype=object)
    if fmt in TIME_UNITS or fmt == "auto":
        looks = strs.fillna("").str.fullmatch(_NUMBER.pattern).to_numpy(bool)
        if looks.any():
            number[looks] = _mapped_unique(strs[looks], lambda v: _floor_micros(_decimal(v),
                                                                                 unit)).to_numpy()
    if fmt in TIME_UNITS:
        return _micros_of(number, missing)
    text = strs.fillna("")
    parsed = (_iso_micros(text, tz) if fmt in ("auto", "iso")
              else _pattern_micros(text, fmt, tz)).astype(object)
    parsed[np.isnan(parsed.astype(float))] = None
    if fmt == "auto":
        isnum = pd.notna(number)
        parsed[isnum] = number[isnum]
    us, _, bad = _micros_of(parsed, missing)
    return us, missing, bad


def _micros_of(values: Array, missing: Array) -> tuple[Array, Array,
                                                                  Array]:
    """Object array of Python ints / floats / None → ``(µs int64, missing, bad)``; None where
    not missing is bad; beyond int64 is clamped (out of range)."""
    bad = ~missing & pd.isna(values)
    given = pd.notna(values)
    us = np.zeros(len(values), dtype=np.int64)
    try:
        us[given] = values[given].astype(np.int64)
    except OverflowError:
        big = np.iinfo(np.int64)
        us[given] = [max(min(int(v), big.max), big.min) for v in values[given]]
    return us, missing, bad


# ------------------------------------------------------------------------------------ the rules


def event_ms(us: Array, speed: float) -> Array:
    """The emulated clock of publish times ``us`` (epoch µs, int64): ``floor(us / 1000 /
    speed)`` ms, exact (``speed`` taken as the decimal it prints as)."""
    if speed == 1.0:
        return np.asarray(np.floor_divide(us, 1000), dtype=np.int64)
    ratio = Fraction(decimal.Decimal(repr(speed))) * 1000  # us per emulated ms
    num, den = ratio.numerator, ratio.denominator
    if np.abs(us).max(initial=0) < (2**63 - 1) // den:
        return np.asarray(np.floor_divide(us * den, num), dtype=np.int64)
    return np.array([int(u) * den // num for u in us], dtype=np.int64)


def _or_constant(values: pa.Array, constant: str | None) -> pa.Array:
    """``values`` (strings) with ``constant`` where blank (null where ``constant`` is None; as
    an array: ``if_else`` with a null scalar corrupts a sliced array's offsets, pyarrow 21)."""
    blank = _blank(values)
    if not blank.any():
        return values
    fill = (pa.nulls(len(values), pa.string()) if constant is None
            else pa.scalar(constant, pa.string()))
    return pc.if_else(blank, fill, values)


def check_records(mapped: Mapping[str, pa.Array], invalid_utf8: Array,
                  malformed: Array, spec: Any) -> pa.RecordBatch:
    """Validate ``n`` mapped records: the rules of :data:`QUARANTINE_REASONS`.

    ``mapped``: :data:`MAPPED_COLUMNS` → Arrow arrays of length ``n``, values as the source
    gives them (strings, integers, floats, decimals, timestamps; a column the spec does not map
    is all null). ``invalid_utf8`` / ``malformed``: bool arrays of length ``n``, the reader's
    verdicts. ``spec``: the ``InputSpec`` (``topic`` / ``producer_name`` constants for blank
    values, ``publish_time_format``, ``time_zone``, ``speed``).

    Returns a RecordBatch of :data:`CHECKED_FIELDS`, one row per record: ``topic`` and
    ``producer_name`` (strings, the spec's constant where blank), ``sequence_id`` and
    ``payload_size`` (int64), ``publish_us`` (epoch µs) and ``event_ms`` (see :func:`event_ms`)
    — meaningful where ``reason`` is null — and ``reason``: null (accepted) or the first
    failing rule. Raises nothing for bad values (they are reasons).
    """
    n = len(invalid_utf8)
    col = {c: mapped.get(c, pa.nulls(n)) for c in MAPPED_COLUMNS}
    topic = _or_constant(arrow_strings(col["topic"]), spec.topic)
    producer = _or_constant(arrow_strings(col["producer_name"]), spec.producer_name)
    us, time_missing, time_bad = publish_micros(col["publish_time"], spec)
    size_col = col["payload_size"]
    size, size_bad = _integer(size_col)
    size_missing = (np.asarray(size_col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
                    if pa.types.is_integer(size_col.type) or pa.types.is_floating(size_col.type)
                    or pa.types.is_decimal(size_col.type) else _blank(size_col))
    seq, seq_bad = _integer(col["sequence_id"])
    key_bytes = pc.fill_null(pc.binary_length(arrow_strings(col["key"])), 0)

    def lt0(a: pa.Array) -> Array:
        return np.asarray(pc.fill_null(pc.less(a, 0), False).to_numpy(zero_copy_only=False),
                          dtype=bool)

    rules = [
        (invalid_utf8, INVALID_UTF8),
        (malformed, MALFORMED_RECORD),
        (np.asarray(topic.is_null().to_numpy(zero_copy_only=False), dtype=bool), MISSING_TOPIC),
        (time_missing, MISSING_PUBLISH_TIME),
        (time_bad, BAD_PUBLISH_TIME),
        ((us < MIN_PUBLISH_MICROS) | (us > MAX_PUBLISH_MICROS), PUBLISH_TIME_OUT_OF_RANGE),
        (size_missing, MISSING_PAYLOAD_SIZE),
        (size_bad, BAD_PAYLOAD_SIZE),
        (lt0(size), NEGATIVE_PAYLOAD_SIZE),
        (seq_bad | lt0(seq), BAD_SEQUENCE_ID),
        (np.asarray(key_bytes.to_numpy(zero_copy_only=False)) > MAX_KEY_BYTES, KEY_TOO_LONG),
    ]
    codes = np.zeros(n, dtype=np.int8)  # 0 = accepted, i + 1 = rules[i]
    for i in range(len(rules) - 1, -1, -1):  # the first rule that applies wins
        fails = np.asarray(rules[i][0], dtype=bool)
        if fails.any():
            codes[fails] = i + 1
    if codes.any():
        names = pa.array([None, *[name for _, name in rules]], pa.string())
        reason = names.take(pa.array(codes))
        us = np.where(codes == 0, us, 0)
    else:  # every record accepted (the common case): no reason to look up
        reason = pa.nulls(n, pa.string())
    return pa.RecordBatch.from_arrays(
        [topic, producer, seq, pa.array(us, pa.int64()), size,
         pa.array(event_ms(us, spec.speed), pa.int64()), reason],
        schema=CHECKED_FIELDS)


def spread_minutes(us: Array, order: Sequence[pa.Array], raw: pa.Array,
                   speed: float) -> tuple[Array, Array]:
    """Minute spreading (``spread_within_minute``) of accepted records: ``(µs, event_ms)``.

    The ``n`` records sharing a publish-time minute (``us``: epoch µs, int64) get, in the order
    of the ``order`` columns (ascending, nulls first, compared as strings) then the SHA-256 of
    their ``raw`` record text (strings; a tie-break that does not depend on how the input was
    chunked, computed only for records equal in the other keys), ``minute + floor(i * 60000 /
    n)`` ms for the ``i``-th (0-based). Records of one minute must all be in one call."""
    n = len(us)
    if not n:
        return us, event_ms(us, speed)
    minute = us - us % MINUTE_US
    keys = {"minute": pa.array(minute, pa.int64()),
            **{f"order_{i}": arrow_strings(a) for i, a in enumerate(order)}}
    at = _sorted_positions(keys)
    tied = _tied(keys, at)
    if tied.any():  # the digest decides among them (any value does for the others)
        digests = np.full(n, "", dtype=object)
        rows = at[tied]
        digests[rows] = [hashlib.sha256(r.encode("utf-8")).hexdigest()
                         for r in raw.take(pa.array(rows)).to_pylist()]
        at = _sorted_positions({**keys, "digest": pa.array(digests, pa.string())})
    ordered = minute[at]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    counts = np.diff(np.r_[starts, n])
    i_in = np.arange(n) - np.repeat(starts, counts)
    spread = np.empty(n, dtype=np.int64)
    spread[at] = ordered + (i_in * 60_000 // np.repeat(counts, counts)) * 1000
    return spread, event_ms(spread, speed)


def _sorted_positions(keys: Mapping[str, pa.Array]) -> npt.NDArray[np.int64]:
    """Positions of the rows in the stable ascending order of ``keys`` (nulls first; strings
    by their UTF-8 bytes, i.e. by code point)."""
    table = pa.table(dict(keys))
    order = pc.sort_indices(table, sort_keys=[(k, "ascending") for k in keys],
                            null_placement="at_start")
    return np.asarray(order.to_numpy(), dtype=np.int64)


def _tied(keys: Mapping[str, pa.Array], at: npt.NDArray[np.int64]) -> Array:
    """Which rows of the order ``at`` (bool, in that order) equal a neighbour in every key."""
    n = len(at)
    same = np.ones(n - 1, dtype=bool)
    for a in keys.values():
        s = a.take(pa.array(at))
        before, after = s.slice(0, n - 1), s.slice(1)
        both_null = pc.and_(before.is_null(), after.is_null())
        equal = pc.or_(pc.fill_null(pc.equal(before, after), False), both_null)
        same &= np.asarray(equal.to_numpy(zero_copy_only=False), dtype=bool)
    tied = np.zeros(n, dtype=bool)
    tied[:-1] |= same
    tied[1:] |= same
    return tied


# ------------------------------------------------------------------- records in, verdict out

SOURCE_FILE = "source_file"
RAW_RECORD = "raw_record"
SOURCE_ROW = "record"
INVALID_UTF8_FLAG = "invalid_utf8"
MALFORMED_FLAG = "malformed"
MINUTE_HINT = "minute_hint"
"""Columns of the mapped records an engine hands to :func:`ingest_records` (one Arrow batch):

- ``source_file`` (string): the file the record was read from;
- ``raw_record`` (string): the record's text (a line; a Parquet row's JSON) — needed by text
  formats (the quarantine keeps it) and by minute spreading (its SHA-256 breaks ties);
- ``record:<field>`` (:func:`row_field`, Parquet only): each field of the source row, in the
  file's order (a quarantined row's JSON is made from them); a contract column mapped to one of
  them by name has no ``m_<column>`` and is taken from it (no second copy is shipped);
- ``invalid_utf8``, ``malformed`` (bool): the reader's verdicts;
- ``m_<column>`` (:func:`mapped_name`) for each contract column of :data:`MAPPED_COLUMNS` (any
  Arrow type; absent and not in ``record``: all null);
- ``o_<i>`` (:func:`order_name`): the ``spread_order`` values (spreading specs);
- ``minute_hint`` (int64 epoch µs of a minute, or null): the engine's guess at the record's
  publish-time minute, by which Spark puts a minute's records in one task before the rules run
  (:func:`minutes_misplaced` checks it; the rules never read it)."""

ACCEPTED_FIELDS = pa.schema([
    ("topic", pa.string()),
    ("key", pa.string()),
    ("producer_name", pa.string()),
    ("sequence_id", pa.int64()),
    ("publish_time", pa.timestamp("us", tz="UTC")),
    ("payload_size", pa.int64()),
    ("event_ms", pa.int64()),
])
"""Columns of :attr:`Ingested.accepted`: the accepted messages as the rules make them (the
staged columns before key hashing; ``publish_time`` after minute spreading)."""

VERDICT_FIELDS = pa.schema([
    ("source_file", pa.string()),
    ("reason", pa.string()),
    ("raw_record", pa.string()),
    *[(f.name, f.type) for f in ACCEPTED_FIELDS if f.name != "event_ms"],
    ("event_ms", pa.int64()),
    ("hash32", pa.int64()),
    ("segment_hash", pa.int32()),
    ("hash_b", pa.int32()),
])
"""Columns of :func:`verdict_rows` (then the ``record`` struct of the Parquet row's fields when
the records have them): a row per
record. ``reason`` null: accepted, with every message column; a rule's reason: rejected, with
``raw_record`` (text formats) or ``record`` (Parquet) and no message column; :data:`LATE`: an
accepted record older than the replay's horizon, with its message columns but no event time
or hashes (the replay quarantines it with those columns as its JSON)."""


def row_field(name: str) -> str:
    """The records' column holding field ``name`` of a Parquet source row: ``record:<name>``,
    the name percent-encoded (dots too: Spark would read a dot as a field access)."""
    return f"{SOURCE_ROW}:{quote(name, safe='').replace('.', '%2E')}"


def row_fields(names: Sequence[str]) -> list[str]:
    """The source-row fields among column ``names`` (:func:`row_field`), in order."""
    prefix = f"{SOURCE_ROW}:"
    return [unquote(n.removeprefix(prefix)) for n in names if n.startswith(prefix)]


def mapped_name(column: str) -> str:
    """The records' column holding contract column ``column`` as mapped: ``m_<column>``."""
    return f"m_{column}"


def order_name(i: int) -> str:
    """The records' column holding the ``i``-th ``spread_order`` value: ``o_<i>``."""
    return f"o_{i}"


@dataclass(frozen=True)
class Ingested:
    """The rules' verdict on ``n`` mapped records (:func:`ingest_records`).

    ``accepted``: one row per accepted record, in input order (:data:`ACCEPTED_FIELDS`);
    ``accepted_rows`` / ``rejected_rows``: int64 positions in the input of the accepted and of
    the rejected records (ascending; together every position once); ``reasons``: the string
    reason of each rejected record (the first failing rule of :data:`QUARANTINE_REASONS`)."""

    accepted: pa.Table
    accepted_rows: npt.NDArray[np.int64]
    rejected_rows: npt.NDArray[np.int64]
    reasons: pa.Array


def _column(records: pa.RecordBatch, name: str) -> pa.Array | None:
    i = records.schema.get_field_index(name)
    return None if i < 0 else records.column(i)


def mapped_array(records: pa.RecordBatch, spec: Any, column: str) -> pa.Array:
    """Contract column ``column`` of ``records``: its ``m_<column>``, else the Parquet row's
    field its mapping names, else all null (strings)."""
    a = _column(records, mapped_name(column))
    if a is None and column in spec.columns:
        a = _column(records, row_field(spec.columns[column]))
    return pa.nulls(records.num_rows, pa.string()) if a is None else a


def _flag(records: pa.RecordBatch, name: str) -> Array:
    a = _column(records, name)
    if a is None:
        return np.zeros(records.num_rows, dtype=bool)
    return np.asarray(a.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def ingest_records(records: pa.RecordBatch, spec: Any) -> Ingested:
    """The input rules on ``n`` mapped records (columns: :data:`SOURCE_FILE` and the others
    listed there), under ``spec`` (an ``InputSpec``): :func:`check_records`, then, for a spec
    that spreads minutes, :func:`spread_minutes` — so every record of a publish-time minute
    must be in this call — and the accepted messages' columns. Both engines call it: the local
    engine on a micro-batch's files, Spark's staging pass on each task's records."""
    mapped = {c: mapped_array(records, spec, c) for c in MAPPED_COLUMNS}
    checked = check_records(mapped, _flag(records, INVALID_UTF8_FLAG),
                            _flag(records, MALFORMED_FLAG), spec)
    reason = checked.column("reason")
    bad = np.asarray(reason.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    rejected = bool(bad.any())
    ok = pa.array(~bad)

    def accepted_of(a: pa.Array) -> pa.Array:
        return a.filter(ok) if rejected else a

    us, event = accepted_of(checked.column("publish_us")), accepted_of(checked.column("event_ms"))
    if spec.spread_within_minute:
        order = [accepted_of(records.column(order_name(i))) for i in range(len(spec.spread_order))]
        spread_us, spread_ms = spread_minutes(us.to_numpy(), order,
                                              accepted_of(records.column(RAW_RECORD)), spec.speed)
        us, event = pa.array(spread_us, pa.int64()), pa.array(spread_ms, pa.int64())
    accepted = pa.Table.from_arrays(
        [accepted_of(checked.column("topic")), accepted_of(arrow_strings(mapped["key"])),
         accepted_of(checked.column("producer_name")), accepted_of(checked.column("sequence_id")),
         us.cast(ACCEPTED_FIELDS.field("publish_time").type),
         accepted_of(checked.column("payload_size")), event], schema=ACCEPTED_FIELDS)
    return Ingested(accepted, np.flatnonzero(~bad), np.flatnonzero(bad),
                    reason.filter(pa.array(bad)) if rejected else pa.array([], pa.string()))


RULE_CHUNK_ROWS = 65_536
"""Records :func:`ingest_batches` gives the rules at a time (Spark's Arrow batches hold 10,000:
each call has a fixed cost, and a larger chunk halves the rules' time per record)."""


def ingest_batches(batches: Iterable[pa.RecordBatch], spec: Any
                   ) -> Iterator[tuple[pa.RecordBatch, Ingested]]:
    """:func:`ingest_records` over a stream of record batches, in chunks of consecutive batches
    of at least :data:`RULE_CHUNK_ROWS` records (the last one smaller), or, for a spec that
    spreads minutes, all of them as one (a minute's records may be in any batch). Yields
    ``(records, verdict)`` per chunk; nothing for empty input."""
    chunk: list[pa.RecordBatch] = []
    rows = 0
    for records in batches:
        if records.num_rows:
            chunk.append(records)
            rows += records.num_rows
        if rows >= RULE_CHUNK_ROWS and not spec.spread_within_minute:
            yield _ingest_chunk(chunk, spec)
            chunk, rows = [], 0
    if chunk:
        yield _ingest_chunk(chunk, spec)


def _ingest_chunk(chunk: list[pa.RecordBatch], spec: Any) -> tuple[pa.RecordBatch, Ingested]:
    records = chunk[0] if len(chunk) == 1 else pa.concat_batches(chunk)
    return records, ingest_records(records, spec)


def minutes_misplaced(records: pa.RecordBatch, verdict: Ingested) -> bool:
    """Whether an accepted record's :data:`MINUTE_HINT` is not its publish-time minute: then
    Spark may have put another record of that minute in another task, and the spreading of
    this call cannot be trusted (the caller spreads again with every record in one task)."""
    hint = records.column(MINUTE_HINT).take(pa.array(verdict.accepted_rows))
    us = verdict.accepted.column("publish_time").cast(pa.int64()).to_numpy()
    same = pc.equal(hint, pa.array(us - us % MINUTE_US, pa.int64()))
    return bool(len(us)) and not pc.all(pc.fill_null(same, False)).as_py()


def late_rows(verdict: Ingested, horizon_ms: int | None, finalized: bool) -> Array:
    """Which accepted messages are late (bool array over ``verdict.accepted``): every one after
    end-of-input finalization (``finalized``), those with ``event_ms < horizon_ms`` before it,
    none while nothing is finalized (``horizon_ms`` None)."""
    n = verdict.accepted.num_rows
    if finalized:
        return np.ones(n, dtype=bool)
    if horizon_ms is None:
        return np.zeros(n, dtype=bool)
    return np.asarray(verdict.accepted.column("event_ms").to_numpy() < horizon_ms, dtype=bool)


def verdict_rows(records: pa.RecordBatch, verdict: Ingested, late: Array | None = None,
                 accepted: bool = False) -> pa.RecordBatch:
    """The verdict on ``records`` as rows of :data:`VERDICT_FIELDS` (plus ``record``, the
    struct of the Parquet row's fields, when the records have them): each rejected record; each
    late one (``late``: bool array over ``verdict.accepted``, :func:`late_rows`); with
    ``accepted``, each other accepted one (its key hashes from :func:`key_hashes_arrow`).
    Rejected rows first, then late, then accepted, each in input order."""
    fields = row_fields(records.schema.names)
    schema = VERDICT_FIELDS if not fields else VERDICT_FIELDS.append(pa.field(
        SOURCE_ROW, pa.struct([records.schema.field(row_field(f)).with_name(f)
                               for f in fields])))
    files = records.column(SOURCE_FILE)
    late = np.zeros(verdict.accepted.num_rows, dtype=bool) if late is None else late
    parts = [_rejected(records, verdict, schema)] if len(verdict.rejected_rows) else []
    if late.any():
        rows = pa.array(verdict.accepted_rows[late])
        parts.append(_message_rows(schema, files.take(rows), verdict.accepted.filter(late),
                                   LATE))
    if accepted and not late.all():
        kept = verdict.accepted.filter(pa.array(~late)) if late.any() else verdict.accepted
        rows = pa.array(verdict.accepted_rows[~late])
        parts.append(_message_rows(schema, files.take(rows), kept, None))
    return pa.concat_batches(parts) if parts else _rows(schema, 0, {})


def _rows(schema: pa.Schema, n: int, columns: Mapping[str, Any]) -> pa.RecordBatch:
    """``n`` rows of ``schema``: ``columns`` as given, every other one null."""
    return pa.RecordBatch.from_arrays(
        [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in schema],
        schema=schema)


def _rejected(records: pa.RecordBatch, verdict: Ingested, schema: pa.Schema) -> pa.RecordBatch:
    rows = pa.array(verdict.rejected_rows, pa.int64())
    taken = {c: a.take(rows) for c in (SOURCE_FILE, RAW_RECORD)
             if (a := _column(records, c)) is not None}
    fields = row_fields(records.schema.names)
    if fields:  # the source row again, as one struct
        taken[SOURCE_ROW] = pa.StructArray.from_arrays(
            [records.column(row_field(f)).take(rows) for f in fields],
            fields=list(schema.field(SOURCE_ROW).type))
    return _rows(schema, len(rows), {**taken, "reason": verdict.reasons})


def _message_rows(schema: pa.Schema, files: pa.Array, messages: pa.Table,
                  reason: str | None) -> pa.RecordBatch:
    """Rows of ``messages`` (:data:`ACCEPTED_FIELDS`) from ``files``: late ones (``reason``
    :data:`LATE`, no hashes) or accepted ones (``reason`` None, with their key hashes)."""
    columns = {f.name: messages.column(f.name).combine_chunks() for f in ACCEPTED_FIELDS}
    if reason is None:
        hashes = key_hashes_arrow(columns["key"])
        columns.update({c: hashes.field(c) for c in ("hash32", "segment_hash", "hash_b")})
    n = messages.num_rows
    return _rows(schema, n, {**columns, "source_file": files,
                             "reason": pa.array([reason] * n, pa.string())})


def bad_file_line(source_file: str, reason: str, error: str) -> str:
    """The console line of an input file quarantined as a whole (``reason`` one of
    :data:`FILE_REASONS`; ``error``: its read error), the same for both engines."""
    what = "unreadable" if reason == UNREADABLE_FILE else "cut short"
    return (f"input file {source_file} is {what} ({error}); quarantined as {reason}, "
            f"continuing with the others")
