"""In-process reference replay (``topic-replay run --engine local``): the same replay without
Spark, for inputs that fit in memory — one process, pandas / NumPy / pyarrow.

It is the correctness oracle for the Spark orchestration: its tables must equal the Spark
replay's on the same input and config (``tests/spark/test_local_engine.py``), and the first
performance anchor (``bench/``). Entry point: :func:`run_local`.

- **Emulation**: the very group function the Spark stage runs in its tasks
  (:func:`pipelines.stages.topic_group`: control plane, batching, dispatch), called on each
  topic's pandas group — no rule is duplicated.
  The whole input is one finalized window (horizon = +∞), as a Spark batch replay under
  ``FINALIZE_WINDOW_MESSAGES``; outputs do not depend on the windows anyway.
- **Ingest**: :func:`read_local` re-implements ``pipelines.ingest.parse_records`` in pandas
  (same contract, same quarantine reasons in the same order, same spreading,
  ``event_ms`` and hashes); the differential test proves equality on the sample and on the
  online-retail trace. Mapping *expressions* (Spark SQL in ``InputSpec.columns``) are evaluated
  by a small interpreter that knows :data:`LOCAL_FUNCTIONS`; any other expression is refused
  up front by :func:`check_spec` (use ``--engine spark``). Known gaps to Spark's parser, all
  on malformed or exotic input: Java-pattern field widths, Parquet ``raw_record`` JSON for
  non-scalar types, ISO strings with a region-id zone.
- **Output**: the same Delta tables (schemas, app-transaction versions) through
  :class:`pipelines.delta_io.DeltaStore` with delta-rs.
"""

from __future__ import annotations

import csv
import decimal
import gzip
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import stages
from pipelines.config import ReplayConfig
from pipelines.core.hashing import hash32_array, hash_b_array, segment_hash_array
from pipelines.ingest import (
    ACCEPTED_COLUMNS,
    BAD_PAYLOAD_SIZE,
    BAD_PUBLISH_TIME,
    BAD_SEQUENCE_ID,
    INVALID_UTF8,
    KEY_TOO_LONG,
    MALFORMED_RECORD,
    MAX_KEY_BYTES,
    MAX_PUBLISH_MICROS,
    MIN_PUBLISH_MICROS,
    MISSING_PAYLOAD_SIZE,
    MISSING_PUBLISH_TIME,
    MISSING_TOPIC,
    NEGATIVE_PAYLOAD_SIZE,
    PUBLISH_TIME_OUT_OF_RANGE,
    UTC_ZONES,
)
from pipelines.presets import InputSpec, is_identifier

FINAL_VERSION_OFFSET = 1 << 40  # same commit versions as pipelines.replay

LOCAL_FUNCTIONS = ("octet_length", "length", "regexp_replace", "coalesce", "lower", "upper",
                   "trim", "concat")
"""Spark SQL functions the local engine evaluates in mapping expressions."""

# ---------------------------------------------------------------------------------- expressions

_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^'\\]|\\.|'')*')|(?P<num>-?\d+(?:\.\d+)?)|"
                    r"(?P<id>[A-Za-z_][A-Za-z0-9_]*|`[^`]+`)|(?P<sym>[(),]))")


def _tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    expr = expr.strip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            raise ValueError(f"cannot parse {expr!r} at {expr[pos:]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(expr) and expr[pos].isspace():
            pos += 1
    return out


def _parse(expr: str) -> Any:
    """Expression → tree: ('col', name) | ('lit', value) | ('call', fn, [args])."""
    toks = _tokens(expr)
    i = 0

    def node() -> Any:
        nonlocal i
        kind, text = toks[i]
        i += 1
        if kind == "str":
            body = text[1:-1].replace("''", "'")
            return ("lit", re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1),
                                                                               m.group(1)), body))
        if kind == "num":
            return ("lit", text)
        if kind == "id":
            name = text.strip("`")
            if i < len(toks) and toks[i] == ("sym", "("):
                if name.lower() not in LOCAL_FUNCTIONS:
                    raise ValueError(f"function {name} is not supported by the local engine")
                i += 1
                args = []
                if toks[i] != ("sym", ")"):
                    while True:
                        args.append(node())
                        if toks[i] == ("sym", ","):
                            i += 1
                            continue
                        break
                if toks[i] != ("sym", ")"):
                    raise ValueError(f"expected ')' in {expr!r}")
                i += 1
                return ("call", name.lower(), args)
            return ("col", name)
        raise ValueError(f"unexpected {text!r} in {expr!r}")

    tree = node()
    if i != len(toks):
        raise ValueError(f"unexpected trailing text in {expr!r}")
    return tree


def _java_replacement(rep: str) -> str:
    return re.sub(r"\$(\d+)", r"\\g<\1>", rep.replace("\\", "\\\\"))


def _eval(tree: Any, scope: dict[str, pd.Series], n: int) -> pd.Series:
    kind = tree[0]
    if kind == "col":
        return scope.get(tree[1], pd.Series([None] * n, dtype=object))
    if kind == "lit":
        return pd.Series([tree[1]] * n, dtype=object)
    fn, args = tree[1], [_eval(a, scope, n) for a in tree[2]]
    if fn in ("octet_length", "length"):
        s = _as_str(args[0])
        lens = (s.str.encode("utf-8").str.len() if fn == "octet_length" else s.str.len())
        return lens.astype("Int64").astype(object).where(s.notna(), None)
    if fn == "regexp_replace":
        s, pat, rep = _as_str(args[0]), args[1].iloc[0], args[2].iloc[0]
        return s.str.replace(pat, _java_replacement(rep), regex=True).where(s.notna(), None)
    if fn == "coalesce":
        out = args[0].astype(object)
        for a in args[1:]:
            out = out.where(out.notna(), a)
        return out
    if fn in ("lower", "upper", "trim"):
        s = _as_str(args[0])
        return getattr(s.str, {"trim": "strip"}.get(fn, fn))().where(s.notna(), None)
    if fn == "concat":
        out = _as_str(args[0])
        for a in args[1:]:
            out = out + _as_str(a)
        return out.where(out.notna(), None)
    raise ValueError(fn)  # pragma: no cover - _parse refuses unknown functions


def check_spec(spec: InputSpec) -> None:
    """``ValueError`` (one sentence) when the local engine cannot evaluate a mapping of
    ``spec``: an expression using a function outside :data:`LOCAL_FUNCTIONS`, or the ``text``
    format's Java ``record_regex`` that Python cannot compile."""
    for value in [*spec.columns.values(), *spec.spread_order]:
        if value is not None and not is_identifier(value):
            try:
                _parse(value)
            except (ValueError, IndexError) as exc:
                raise ValueError(f"the local engine cannot evaluate the mapping {value!r} "
                                 f"({exc}); use --engine spark") from None
    if spec.format == "text":
        try:
            re.compile(spec.record_regex or "")
        except re.error:
            raise ValueError("the local engine cannot compile record_regex "
                             f"{spec.record_regex!r}; use --engine spark") from None


# ------------------------------------------------------------------------------------ reading


def input_files(inputs: Sequence[str], spec: InputSpec) -> list[Path]:
    """Files read from ``inputs`` (files, or folders: their non-hidden files whose name matches
    ``spec.file_glob``), in Spark's file-stream order: modification time, then path."""
    files: list[Path] = []
    for i in inputs:
        p = Path(i)
        if p.is_file():
            files.append(p)
            continue
        for f in sorted(p.iterdir()):
            if f.is_file() and not f.name.startswith((".", "_")) and (
                    spec.file_glob is None or fnmatch(f.name, spec.file_glob)):
                files.append(f)
    return sorted(dict.fromkeys(f.resolve() for f in files),
                  key=lambda f: (f.stat().st_mtime, str(f)))


def _lines(path: Path) -> tuple[list[str], np.ndarray]:
    """The file's lines (split like Spark's text source) and which were not valid UTF-8 (those
    decoded with U+FFFD replacements, as ``ingest`` stores them)."""
    opener: Callable[..., Any] = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        data = fh.read()
    parts = re.split(rb"\r\n|\r|\n", data)
    if parts and parts[-1] == b"":
        parts.pop()
    lines, invalid = [], np.zeros(len(parts), dtype=bool)
    for i, b in enumerate(parts):
        try:
            lines.append(b.decode("utf-8"))
        except UnicodeDecodeError:
            lines.append(b.decode("utf-8", errors="replace"))
            invalid[i] = True
    return lines, invalid


def _json_value(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v, separators=(",", ":"))


def _source_frame(path: Path,
                  spec: InputSpec) -> tuple[pd.DataFrame, list[str], ParquetRaw | None]:
    """One file → frame with ``source_file``, ``raw_record``, ``_malformed``, ``_header`` and the
    source columns (strings; Parquet keeps its column types, and its ``raw_record`` is the
    returned :class:`ParquetRaw` instead), the source column names and that ``ParquetRaw``
    (``None`` for text formats)."""
    uri = "file:" + path.as_uri().removeprefix("file://")  # as Spark's _metadata.file_path
    if spec.format == "parquet":
        table, invalid = _valid_utf8(pq.read_table(path))
        pdf = table.to_pandas(timestamp_as_object=False)
        names = list(pdf.columns)
        return (pdf.assign(source_file=uri, _malformed=False, _header=False,
                           _invalid_utf8=invalid), names, ParquetRaw([table]))
    lines, invalid_utf8 = _lines(path)
    n = len(lines)
    blank = np.array([not ln.strip() for ln in lines], dtype=bool)
    if spec.format == "json":
        names = list(spec.source_fields())
        cols: dict[str, list[Any]] = {c: [None] * n for c in names}
        bad = blank.copy()
        for i, ln in enumerate(lines):
            if bad[i]:
                continue
            try:
                rec = json.loads(ln, parse_float=str, parse_int=str)
            except ValueError:
                bad[i] = True
                continue
            if not isinstance(rec, dict):
                bad[i] = True
                continue
            for c in names:
                if c in rec:
                    cols[c][i] = _json_value(rec[c])
        header = np.zeros(n, dtype=bool)
    elif spec.format == "csv":
        if spec.csv_columns is None:
            raise ValueError("CSV spec without csv_columns: call resolve_local_spec first")
        names = list(spec.csv_columns)
        sep = spec.csv_options.get("sep", spec.csv_options.get("delimiter", ","))
        cols = {c: [None] * n for c in names}
        bad = blank.copy()
        header = np.zeros(n, dtype=bool)
        for i, ln in enumerate(lines):
            if bad[i]:
                continue
            fields = next(csv.reader([ln.removeprefix("\ufeff")], delimiter=sep,
                                     quotechar='"', doublequote=True), [])
            if len(fields) != len(names):
                bad[i] = True
                continue
            header[i] = fields == names
            for c, v in zip(names, fields, strict=True):
                cols[c][i] = v if v != "" else None
    else:  # text
        names = list(spec.fields)
        regex = re.compile(spec.record_regex or "")
        cols = {c: [None] * n for c in names}
        bad = blank.copy()
        for i, ln in enumerate(lines):
            m = regex.search(ln)
            if m is None:
                bad[i] = True
                continue
            for j, c in enumerate(names):
                cols[c][i] = m.group(j + 1) or ""
        header = np.zeros(n, dtype=bool)
    pdf = pd.DataFrame({c: pd.Series(v, dtype=object) for c, v in cols.items()})
    return pdf.assign(source_file=uri, raw_record=lines, _malformed=bad, _header=header,
                      _invalid_utf8=invalid_utf8), names, None


def _valid_utf8(table: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """A Parquet table whose string columns may hold invalid UTF-8 → the table with each
    invalid byte sequence replaced by U+FFFD, and which rows had one (bool array), as Spark's
    ingest flags them (``is_valid_utf8`` per string column)."""
    invalid = np.zeros(table.num_rows, dtype=bool)
    for i, f in enumerate(table.schema):
        if not pa.types.is_string(f.type):
            continue
        try:
            table.column(i).validate(full=True)
            continue
        except pa.ArrowInvalid:
            pass
        fixed: list[str | None] = []
        for j, v in enumerate(table.column(i).cast(pa.binary()).to_pylist()):
            text = None if v is None else v.decode("utf-8", errors="replace")
            invalid[j] |= text is not None and text.encode("utf-8") != v
            fixed.append(text)
        table = table.set_column(i, f, pa.array(fixed, f.type))
    return table, invalid


class ParquetRaw:
    """The ``raw_record`` of Parquet rows — each row's JSON, as Spark's ``to_json(record)`` —
    made only for the rows that need it (quarantined rows, minute spreading, a mapping that
    names it): a JSON string per row costs more than the rest of the local reader. ``tables``:
    the files' tables, their rows in frame order (not a frame's ``attrs``: pandas deep-copies
    those into every frame derived from it)."""

    def __init__(self, tables: list[pa.Table]) -> None:
        self.tables = tables

    def rows(self, positions: np.ndarray) -> np.ndarray:
        """The JSON strings (object array) of rows ``positions`` (ascending, frame order)."""
        out = np.empty(len(positions), dtype=object)
        start = 0
        for table in self.tables:
            at = np.flatnonzero((positions >= start) & (positions < start + table.num_rows))
            if len(at):
                picked = table.take(pa.array(positions[at] - start)).to_pylist()
                out[at] = [json.dumps({k: _parquet_json(v) for k, v in row.items()
                                       if _present(v)}, separators=(",", ":"),
                                      ensure_ascii=False) for row in picked]
            start += table.num_rows
        return out


def _raw_records(frame: pd.DataFrame, raw: ParquetRaw | None, rows: np.ndarray) -> np.ndarray:
    """``raw_record`` of ``frame``'s rows where the bool mask ``rows`` is set (object array):
    from ``raw`` for Parquet, else the frame's column."""
    if raw is None:
        return frame["raw_record"][rows].to_numpy()
    return raw.rows(np.flatnonzero(rows))


def _present(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and np.isnan(v))


def _parquet_json(v: Any) -> Any:
    if isinstance(v, pd.Timestamp | np.datetime64) or hasattr(v, "isoformat"):
        ts = pd.Timestamp(v)
        ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
        return ts.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if isinstance(v, decimal.Decimal):
        return float(v)
    return v


def resolve_local_spec(spec: InputSpec, inputs: Sequence[str]) -> InputSpec:
    """``spec`` with ``csv_columns`` read from the header of the first input file (path order),
    as ``pipelines.ingest.resolve_input_spec`` does with Spark."""
    if spec.format != "csv" or spec.csv_columns is not None:
        return spec
    files = sorted(input_files(inputs, spec), key=str)
    if not files:
        raise ValueError(f"{list(inputs)}: no input files to read a CSV header from")
    first, _ = _lines(files[0])
    if not first:
        raise ValueError(f"{files[0]}: empty file, cannot read a CSV header")
    sep = spec.csv_options.get("sep", spec.csv_options.get("delimiter", ","))
    return spec.replace(csv_columns=tuple(next(csv.reader([first[0].lstrip("\ufeff")],
                                                          delimiter=sep))))


# ------------------------------------------------------------------------------------ parsing

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_MAX_DEC = decimal.Decimal(10) ** 29
_EPOCH_FACTORS = {"epoch_s": decimal.Decimal(1_000_000), "epoch_ms": decimal.Decimal(1000),
                  "epoch_us": decimal.Decimal(1), "epoch_ns": decimal.Decimal("0.001")}
_ISO = re.compile(
    r"^(\d{4})(?:-(\d{1,2})(?:-(\d{1,2})(?:[T ](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:[.,](\d*))?)?"
    r"\s*(Z|z|UTC|GMT|[+-]\d{1,2}(?::?\d{2})?)?)?)?)?\s*$")
_JAVA_PATTERN = [("yyyy", "%Y"), ("MMM", "%b"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"),
                 ("mm", "%M"), ("ss", "%S"), ("SSSSSS", "%f"), ("SSS", "%f"), ("XXX", "%z"),
                 ("Z", "%z"), ("EEE", "%a")]


def _as_str(s: pd.Series) -> pd.Series:
    if s.dtype == object and pd.api.types.infer_dtype(s, skipna=True) in ("string", "empty"):
        return s.where(s.notna(), None)
    if s.dtype == object:
        return s.map(lambda v: None if v is None else (v if isinstance(v, str) else str(v)),
                     na_action="ignore").astype(object)
    return s.astype(object).where(s.notna(), None).map(
        lambda v: v if v is None else str(v), na_action="ignore")


def _decimal(v: Any) -> decimal.Decimal | None:
    """Spark ``try_cast(trim(v) as decimal(38,9))``: None when not a number."""
    if v is None:
        return None
    t = str(v).strip()
    if not _NUMBER.match(t):
        return None
    d = decimal.Decimal(t)
    if abs(d) >= _MAX_DEC:
        return None
    return d.quantize(decimal.Decimal("1e-9"), rounding=decimal.ROUND_HALF_UP)


def _mapped_unique(s: pd.Series, fn: Callable[[Any], Any]) -> pd.Series:
    """``s.map(fn)`` computed once per distinct value."""
    uniq = pd.unique(s)
    table = {u: fn(u) for u in uniq if u is not None and u == u}
    return s.map(lambda v: table.get(v) if v is not None and v == v else fn(None)).astype(object)


def _integer(s: pd.Series) -> tuple[pd.Series, np.ndarray]:
    """(values as Python ints / None, is-bad) of an integer-valued field, like ingest's."""
    if pd.api.types.is_integer_dtype(s.dtype):
        return s.astype(object), np.zeros(len(s), dtype=bool)

    def conv(v: Any) -> int | None:
        d = _decimal(v)
        if d is None or d != d.to_integral_value(rounding=decimal.ROUND_FLOOR):
            return None
        i = int(d)
        return i if -(2**63) <= i < 2**63 else None

    strs = _as_str(s)
    value = _mapped_unique(strs, conv)
    present = strs.map(lambda v: v is not None and v.strip() != "").astype(bool).to_numpy()
    return value, present & value.isna().to_numpy()


def _floor_micros(d: decimal.Decimal | None, unit: str) -> int | None:
    if d is None:
        return None
    return int((d * _EPOCH_FACTORS[unit]).to_integral_value(rounding=decimal.ROUND_FLOOR))


def _localize(naive_us: np.ndarray, ok: np.ndarray, tz: str) -> np.ndarray:
    """Wall-clock µs in ``tz`` → UTC µs (Spark ``to_utc_timestamp``: an ambiguous time takes the
    earlier offset, a time in a gap moves forward by the gap)."""
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


_ISO_UTC_FAST = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?Z"


def _iso_micros(s: pd.Series, tz: str) -> np.ndarray:
    """ISO-8601 strings → epoch µs (float, NaN when unparseable), Spark's cast rules.

    Fast path: the common ``yyyy-MM-ddTHH:mm:ss[.ffffff]Z`` shape is parsed vectorized."""
    fast = s.str.fullmatch(_ISO_UTC_FAST).to_numpy(bool)
    if fast.any():
        out = np.full(len(s), np.nan)
        parsed = pd.to_datetime(s[fast], format="ISO8601", utc=True, errors="coerce")
        good = parsed.notna().to_numpy(bool)
        vals = parsed.dt.tz_localize(None).astype("datetime64[us]").astype(np.int64).to_numpy()
        out[np.nonzero(fast)[0][good]] = vals[good]
        if (~fast).any():
            out[~fast] = _iso_micros_slow(s[~fast].reset_index(drop=True), tz)
        return out
    return _iso_micros_slow(s, tz)


def _iso_micros_slow(s: pd.Series, tz: str) -> np.ndarray:
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


def _pattern_micros(s: pd.Series, pattern: str, tz: str) -> np.ndarray:
    fmt, rest = "", re.split(r"('[^']*')", pattern)
    for piece in rest:
        if piece.startswith("'"):
            fmt += piece.strip("'").replace("%", "%%")
            continue
        for java, py in _JAVA_PATTERN:
            piece = piece.replace(java, "\0" + py[1:] + "\0")
        fmt += re.sub("\0(.)\0", r"%\1", piece)
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


def _publish_micros(s: pd.Series, spec: InputSpec) -> tuple[np.ndarray, np.ndarray]:
    """(epoch µs as float with NaN = unparseable, is-missing) of the mapped publish time."""
    fmt, tz = spec.publish_time_format, spec.time_zone
    n = len(s)
    if pd.api.types.is_datetime64_any_dtype(s.dtype):
        null = s.isna().to_numpy()
        if getattr(s.dt, "tz", None) is not None:  # Spark TIMESTAMP: an instant
            us = s.dt.tz_convert("UTC").dt.tz_localize(None).astype("datetime64[us]")
            out = us.astype(np.int64).astype(float).to_numpy()
        else:  # Spark TIMESTAMP_NTZ: a wall-clock time in the spec's zone
            naive = s.astype("datetime64[us]").astype(np.int64).to_numpy()
            out = _localize(naive, ~null, tz).astype(float)
        out[null] = np.nan
        return out, null
    unit = fmt if fmt in _EPOCH_FACTORS else "epoch_ms"
    if pd.api.types.is_numeric_dtype(s.dtype):
        vals = _mapped_unique(s.astype(object).where(s.notna(), None),
                              lambda v: _floor_micros(_decimal(v), unit))
        return vals.astype(float).to_numpy(), s.isna().to_numpy()
    strs = _as_str(s)
    strs = strs.str.strip().where(strs.notna(), None)
    missing = (strs.isna() | (strs == "")).to_numpy(bool)
    number = pd.Series(np.nan, index=strs.index)
    if fmt in _EPOCH_FACTORS or fmt == "auto":
        looks = strs.fillna("").str.fullmatch(_NUMBER.pattern).to_numpy(bool)
        if looks.any():
            number[looks] = _mapped_unique(strs[looks], lambda v: _floor_micros(_decimal(v),
                                                                                 unit)
                                           ).astype(float).to_numpy()
    if fmt in _EPOCH_FACTORS:
        return number.to_numpy(), missing
    text = strs.fillna("")
    if fmt in ("auto", "iso"):
        parsed = _iso_micros(text, tz)
        if fmt == "auto":
            isnum = number.notna().to_numpy()
            parsed = np.where(isnum, number.to_numpy(), parsed)
        return parsed, missing
    return _pattern_micros(text, fmt, tz), missing if n else missing


def _blank(s: pd.Series) -> np.ndarray:
    """Null or only whitespace (``s``: strings or None)."""
    strs = _as_str(s)
    return (strs.isna() | (strs.fillna("").str.strip() == "")).to_numpy(bool)


def parse_local(frame: pd.DataFrame, names: list[str], spec: InputSpec,
                parquet_raw: ParquetRaw | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """pandas version of ``pipelines.ingest.parse_records`` over :func:`_source_frame`
    output: ``(accepted, quarantine)`` with the same columns, reasons and values.
    ``parquet_raw``: the Parquet rows' ``raw_record`` (``None``: the frame's column)."""
    header = frame["_header"].to_numpy(bool)
    if header.any():  # CSV only (Parquet frames have no header rows to drop)
        frame = frame[~header].reset_index(drop=True)
    n = len(frame)
    scope: dict[str, pd.Series] = {c: frame[c] for c in names}
    named = any("raw_record" in (v or "") for v in (*spec.columns.values(), *spec.spread_order))
    if "raw_record" not in scope and (parquet_raw is None or named):
        scope["raw_record"] = pd.Series(_raw_records(frame, parquet_raw, np.ones(n, dtype=bool)),
                                        dtype=object)
    scope.setdefault("source_file", frame["source_file"])

    def mapped(value: str | None) -> pd.Series:
        if value is None:
            return pd.Series([None] * n, dtype=object)
        if is_identifier(value):
            return scope.get(value, pd.Series([None] * n, dtype=object))
        return _eval(_parse(value), scope, n)

    m = {c: mapped(spec.columns.get(c)) for c in ("topic", "key", "producer_name",
                                                  "sequence_id", "publish_time",
                                                  "payload_size")}
    topic_raw = _as_str(m["topic"])
    topic = topic_raw.where(~_blank(topic_raw), spec.topic)
    producer_raw = _as_str(m["producer_name"])
    producer = producer_raw.where(~_blank(producer_raw), spec.producer_name)
    micros, time_missing = _publish_micros(m["publish_time"], spec)
    size, size_bad = _integer(m["payload_size"])
    size_missing = _blank(_as_str(m["payload_size"]))
    seq, seq_bad = _integer(m["sequence_id"])

    malformed = frame["_malformed"].to_numpy(bool)
    size_f = size.astype(float).to_numpy()
    seq_f = seq.astype(float).to_numpy()
    key_bytes = _as_str(m["key"]).map(lambda k: len(k.encode("utf-8")) if isinstance(k, str)
                                      else 0).to_numpy()
    rules = [
        (frame["_invalid_utf8"].to_numpy(bool), INVALID_UTF8),
        (malformed, MALFORMED_RECORD),
        (topic.isna().to_numpy(), MISSING_TOPIC),
        (time_missing, MISSING_PUBLISH_TIME),
        (np.isnan(micros), BAD_PUBLISH_TIME),
        ((micros < MIN_PUBLISH_MICROS) | (micros > MAX_PUBLISH_MICROS),
         PUBLISH_TIME_OUT_OF_RANGE),
        (size_missing, MISSING_PAYLOAD_SIZE),
        (size_bad, BAD_PAYLOAD_SIZE),
        (size_f < 0, NEGATIVE_PAYLOAD_SIZE),
        (seq_bad | (seq_f < 0), BAD_SEQUENCE_ID),
        (key_bytes > MAX_KEY_BYTES, KEY_TOO_LONG),
    ]
    reason = np.full(n, None, dtype=object)
    for cond, name in reversed(rules):  # the first rule that applies wins
        reason[np.asarray(cond, dtype=bool)] = name
    bad = pd.notna(reason)
    quarantine = pd.DataFrame({"source_file": frame["source_file"][bad].to_numpy(),
                               "raw_record": _raw_records(frame, parquet_raw, bad),
                               "reason": reason[bad]})
    ok = ~bad
    us = micros[ok].astype(np.int64)
    if spec.spread_within_minute:
        raw_sha = [hashlib.sha256(r.encode("utf-8")).hexdigest()
                   for r in _raw_records(frame, parquet_raw, ok)]
        minute = us - us % 60_000_000
        order = pd.DataFrame({"_minute": minute})
        for i, v in enumerate(spec.spread_order):
            order[f"_o{i}"] = _as_str(mapped(v))[ok].to_numpy()
        order["_k"] = raw_sha
        keys = ["_minute", *[f"_o{i}" for i in range(len(spec.spread_order))], "_k"]
        order = order.sort_values(keys, na_position="first", kind="stable")
        i_in = order.groupby("_minute").cumcount().to_numpy()
        cnt = order.groupby("_minute")["_k"].transform("size").to_numpy()
        spread = np.empty(len(order), dtype=np.int64)
        spread[order.index.to_numpy()] = order["_minute"].to_numpy() + (
            i_in * 60_000 // cnt) * 1000
        us = spread
    if spec.speed == 1.0:
        event_ms = us // 1000
    else:
        divisor = decimal.Decimal(repr(spec.speed)) * 1000
        event_ms = np.array([int((decimal.Decimal(int(u)) / divisor).to_integral_value(
            rounding=decimal.ROUND_FLOOR)) for u in us], dtype=np.int64)
    keys_s = _as_str(m["key"])[ok]
    karr = pa.array(keys_s.tolist(), type=pa.string())
    h32 = hash32_array(karr)
    mask = np.ma.getmaskarray(h32)
    seg, hb = segment_hash_array(h32), hash_b_array(h32)
    accepted = pd.DataFrame({
        "topic": topic[ok].to_numpy(),
        "key": keys_s.to_numpy(),
        "producer_name": producer[ok].to_numpy(),
        "sequence_id": pd.array(seq[ok].tolist(), dtype="Int64"),
        "publish_time": pd.to_datetime(us, unit="us", utc=True),
        "payload_size": np.asarray(size[ok].tolist(), dtype=np.int64),
        "source_file": frame["source_file"][ok].to_numpy(),
        "event_ms": event_ms.astype(np.int64),
        "hash32": pd.array(np.where(mask, 0, np.ma.getdata(h32)).astype(np.int64),
                           dtype="Int64"),
        "segment_hash": pd.array(np.ma.getdata(seg).astype(np.int32), dtype="Int32"),
        "hash_b": pd.array(np.ma.getdata(hb).astype(np.int32), dtype="Int32"),
    })
    for c in ("hash32", "segment_hash", "hash_b"):
        accepted.loc[mask, c] = pd.NA
    return accepted[list(ACCEPTED_COLUMNS)], quarantine


def read_local(spec: InputSpec, inputs: Sequence[str],
               max_files_per_trigger: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read and parse every input file without Spark: ``(accepted, quarantine)``.

    ``accepted``: ``pipelines.ingest.ACCEPTED_COLUMNS`` (pandas dtypes: ``sequence_id`` /
    ``hash32`` Int64, ``segment_hash`` / ``hash_b`` Int32, ``publish_time`` datetime64[ns, UTC],
    ``event_ms`` int64 ms). ``quarantine``: ``source_file``, ``raw_record``, ``reason`` and
    ``batch_id`` (the micro-batch the Spark replay would read the file in: files in
    modification-time order, ``max_files_per_trigger`` per batch). Files of one micro-batch
    are parsed together (minute spreading spans a micro-batch, as in Spark)."""
    spec = resolve_local_spec(spec, inputs)
    check_spec(spec)
    files = input_files(inputs, spec)
    acc, qua = [], []
    for b in range(0, len(files), max_files_per_trigger):
        frames = [_source_frame(f, spec) for f in files[b:b + max_files_per_trigger]]
        names = list(dict.fromkeys(n for _, ns, _ in frames for n in ns))
        raws = [r for _, _, r in frames if r is not None]  # Parquet: tables in frame order
        raw = ParquetRaw([t for r in raws for t in r.tables]) if raws else None
        frame = pd.concat([f for f, _, _ in frames], ignore_index=True)
        for c in names:
            if c not in frame.columns:
                frame[c] = None
        a, q = parse_local(frame, names, spec, raw)
        acc.append(a)
        qua.append(q.assign(batch_id=b // max_files_per_trigger))
    if not acc:
        return (pd.DataFrame({c: [] for c in ACCEPTED_COLUMNS}),
                pd.DataFrame({c: [] for c in ("source_file", "raw_record", "reason",
                                              "batch_id")}))
    return pd.concat(acc, ignore_index=True), pd.concat(qua, ignore_index=True)


# ------------------------------------------------------------------------------------- replay


def _groups(pdf: pd.DataFrame, keys: list[str]) -> Iterable[tuple[Any, pd.DataFrame]]:
    if not len(pdf):
        return []
    return pdf.groupby(keys, sort=True, dropna=False)


def run_local(config: ReplayConfig, input_spec: InputSpec, inputs: Sequence[str], output: str,
              run_id: str, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Replay ``inputs`` in this process and write the run's tables under ``output``.

    Same arguments and tables as ``pipelines.replay.Replay(...).run()`` (batch mode), without a
    SparkSession; returns the run summary (``pipelines.replay.run_summary``). Raises
    ``ValueError`` when the spec needs Spark (:func:`check_spec`), and
    ``pipelines.privacy.PrivacyError`` when ``input.pseudonymize``'s secret is not set. The
    privacy options (``input.pseudonymize``, ``output.keys``, ``output.quarantine_raw``) act as
    in the Spark replay. Re-running the same
    ``run_id`` into the same output is a no-op per table (idempotent app-transaction
    versions)."""
    from pipelines.delta_io import DeltaStore, table_app_id, use_system_arrow_pool
    from pipelines.ingest import FILE_REASONS
    from pipelines.privacy import conceal_quarantine, pseudonymizer, withheld_columns, withhold
    from pipelines.replay import run_summary, runs_row

    pseudonymize = pseudonymizer(config)  # PrivacyError when its secret is missing
    withheld = withheld_columns(config)
    use_system_arrow_pool()
    started = time.time()
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[f"{name}_s"] = round(now - clock, 3)
        clock = now

    store = DeltaStore(output, engine="delta-rs")
    tables = set(config.output.tables)
    counts: dict[str, int] = {}

    def write(table: str, data: pd.DataFrame | pa.Table, version: int) -> None:
        if table not in tables or data is None or not len(data):
            return
        if isinstance(data, pa.Table):  # the messages: already the table's columns
            data = withhold(data, withheld.get(table, ()))  # output.keys
            data = data.append_column("run_id", pa.array([run_id] * len(data), pa.string()))
        else:
            keep = [c for c in stages.table_columns(table) if c in data.columns]
            data = data[keep].assign(run_id=run_id,
                                     **dict.fromkeys(
                                         [c for c in withheld.get(table, ()) if c in keep]))
        store.append(table, data, app_id=table_app_id(run_id, table), version=version)

    for table in config.output.tables:  # every configured table exists, even if empty
        store.ensure_table(table)
    accepted, quarantine = read_local(input_spec, inputs, config.replay.max_files_per_trigger)
    if pseudonymize is not None:  # after hashing, as the Spark replay's staging does
        accepted = pseudonymize.frame(accepted)
    if not config.output.quarantine_raw:
        quarantine = conceal_quarantine(quarantine, FILE_REASONS)
    for b, q in _groups(quarantine, ["batch_id"]):
        write("quarantine", q, int(b[0] if isinstance(b, tuple) else b))
    counts.update(accepted=len(accepted), quarantined=len(quarantine), late=0,
                  keyless=int(accepted["key"].isna().sum()))
    lap("ingest_hash")
    progress(f"local: accepted {len(accepted):,}, quarantined {len(quarantine):,}")

    version = FINAL_VERSION_OFFSET
    first = int(accepted["event_ms"].min()) if len(accepted) else None
    settings = stages.StageSettings.from_config(config, first)
    controllers: dict[str, Any] = {}
    frames: dict[str, list[Any]] = {kind: [] for kind in stages.STAGE_KINDS}
    for (topic,), g in _groups(accepted, ["topic"]):
        r = stages.topic_group(topic, g.reset_index(drop=True), None, None, None, settings,
                               None, True)
        controllers[topic] = r.controller
        for kind, df in r.frames.items():
            frames[kind].append(df)
        for stage, s in r.seconds.items():
            timings[f"{stage}_s"] = round(timings.get(f"{stage}_s", 0.0) + s, 3)
    clock = time.perf_counter()  # the stages' seconds are taken from topic_group
    ctl = stages.control_outputs(controllers, settings.speed)
    write("segment_load", ctl.samples, version)
    write("autoscale_decisions", ctl.decisions, version)
    write("segments", ctl.segments, version)
    for kind, table in stages.STAGE_KINDS.items():
        parts = [f for f in frames[kind] if len(f)]
        write(table, (pa.concat_tables(parts) if isinstance(parts[0], pa.Table)
                      else pd.concat(parts, ignore_index=True)) if parts else None, version)
    counts["entries"] = sum(len(f) for f in frames["entry"])
    counts["dispatched"] = sum(len(f) for f in frames["dispatch"])
    lap("delta_write")

    row = runs_row(config, inputs, counts, store.engine, started, {"engine": "local", **timings})
    write("runs", pd.DataFrame([row]), version)
    return run_summary(store, run_id)
