"""In-process reference replay (``topic-replay run --engine local``): the same replay without
Spark, for inputs that fit in memory — one process, pandas / NumPy / pyarrow.

It is the correctness oracle for the Spark orchestration: its tables must equal the Spark
replay's on the same input and config (``tests/replays/test_local_engine.py``), and the first
performance anchor (``bench/``). Entry point: :func:`run_local`.

- **Emulation**: the very group function the Spark stage runs in its tasks
  (:func:`pipelines.engine.stages.topic_group`: control plane, batching, dispatch), called on each
  topic's pandas group — no rule is duplicated.
  The whole input is one finalized window (horizon = +∞), as a Spark batch replay under
  ``FINALIZE_WINDOW_MESSAGES``; outputs do not depend on the windows anyway.
- **Ingest**: :func:`read_local` reads the files in Python (lines split as Spark's ``text``
  source, CSV / JSON / regex parsing, Parquet with pyarrow) and maps them to the contract;
  the input rules after the mapping — validation and quarantine reasons in their order,
  timestamp and integer parsing, ``event_ms``, minute spreading, key hashes — are
  :func:`pipelines.ingest.rules.ingest_records`, the function the Spark replay's staging pass
  runs in its ``mapInArrow``; the differential test proves the engines agree on the sample
  and on the online-retail trace.
  Mapping *expressions* (Spark SQL in ``InputSpec.columns``) are evaluated by a small
  interpreter that knows :data:`LOCAL_FUNCTIONS`; any other expression is refused up front
  by :func:`check_spec` (use ``--engine spark``). Known gaps of the reader to Spark's, all on
  malformed or exotic input: CSV quoting corner cases, Parquet ``raw_record`` JSON for
  non-scalar types.
- **Output**: the same Delta tables (schemas, app-transaction versions) through
  :class:`pipelines.storage.delta.DeltaStore` with delta-rs.
"""

from __future__ import annotations

import csv
import decimal
import json
import re
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.contract.config import ReplayConfig
from pipelines.contract.presets import InputSpec, is_identifier
from pipelines.contract.schemas import table_columns
from pipelines.engine import stages
from pipelines.engine.findings import write_answers
from pipelines.engine.summary import run_summary, runs_row
from pipelines.ingest.input_check import is_empty, is_listed
from pipelines.ingest.privacy import conceal_quarantine, pseudonymizer, withheld_columns, withhold
from pipelines.ingest.rules import (
    ACCEPTED_COLUMNS,
    FILE_REASONS,
    INVALID_UTF8_FLAG,
    MALFORMED_FLAG,
    MAPPED_COLUMNS,
    RAW_RECORD,
    SOURCE_FILE,
    TRUNCATED_FILE,
    UNREADABLE_FILE,
    Ingested,
    bad_file_line,
    ingest_records,
    key_hashes_arrow,
    mapped_name,
    order_name,
)
from pipelines.ingest.rules import as_str as _as_str
from pipelines.storage.commits import FINAL_VERSION
from pipelines.storage.delta import DeltaStore, table_app_id, use_system_arrow_pool
from pipelines.storage.frames import STAGE_KINDS

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


def _parse(expr: str) -> Any:  # noqa: C901
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


def _eval(tree: Any, scope: dict[str, pd.Series], n: int) -> pd.Series:  # noqa: PLR0911
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
    """Files read from ``inputs`` (files, or folders: their files
    ``pipelines.ingest.input_check.is_listed`` keeps — not hidden, matching ``spec.file_glob``
    or, without one, not still being written), in Spark's file-stream order: modification
    time, then path. A file that vanishes while they are listed sorts last (it is reported
    when read)."""
    files: list[Path] = []
    for i in inputs:
        p = Path(i)
        if p.is_file():
            files.append(p)
            continue
        for f in sorted(p.iterdir()):
            if f.is_file() and is_listed(f.name, spec.file_glob):
                files.append(f)
    return sorted(dict.fromkeys(f.resolve() for f in files), key=_stream_order)


def _stream_order(f: Path) -> tuple[float, str]:
    try:
        return f.stat().st_mtime, str(f)
    except OSError:  # vanished since it was listed
        return float("inf"), str(f)


_READ_ERRORS = (OSError, EOFError, zlib.error, pa.ArrowException)
"""What reading one input file may raise: a vanished or unreadable file, a broken gzip stream,
a corrupt Parquet file."""


def _read_error(exc: BaseException) -> str:
    """A read error as one line (``EOFError: Compressed file ended before …``)."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _gunzip(path: Path) -> tuple[bytes, str | None]:
    """The decompressed bytes of the gzip file ``path`` (every member) and, when its stream
    breaks (cut short, corrupt, not gzip at all), the error, the bytes being all that was
    decompressed before the break. ``zlib`` directly rather than ``gzip.open``, which returns
    nothing of a read call that hits the break."""
    out: list[bytes] = []
    d = zlib.decompressobj(wbits=31)
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            try:
                out.append(d.decompress(chunk))
                while d.eof and d.unused_data:  # another gzip member follows
                    rest, d = d.unused_data, zlib.decompressobj(wbits=31)
                    out.append(d.decompress(rest))
            except zlib.error as exc:
                return b"".join(out), f"zlib.error: {exc}"
    if not d.eof:
        return b"".join(out), ("EOFError: compressed file ended before the end-of-stream "
                               "marker was reached")
    return b"".join(out), None


def _file_bytes(path: Path) -> tuple[bytes, str | None]:
    """The file's bytes (a ``.gz`` decompressed) and, when the file breaks part-way (a
    truncated or corrupt gzip stream), the read error: then the bytes are those decompressed
    before the break, cut after their last line end (a cut-short line is not a record).
    Raises the ``_READ_ERRORS`` of a file that cannot be opened at all."""
    if not path.name.endswith(".gz"):
        return path.read_bytes(), None
    data, error = _gunzip(path)
    if error is None:
        return data, None
    return data[:max(data.rfind(b"\n"), data.rfind(b"\r")) + 1], error


def _lines(path: Path) -> tuple[list[str], npt.NDArray[Any], str | None]:
    """The file's lines (split like Spark's text source), which were not valid UTF-8 (those
    decoded with U+FFFD replacements, as ``ingest`` stores them) and the read error when the
    file broke part-way (:func:`_file_bytes`: the lines before the break)."""
    data, error = _file_bytes(path)
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
    return lines, invalid, error


def _json_value(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v, separators=(",", ":"))


def _uri(path: Path) -> str:
    """``path`` as Spark's ``_metadata.file_path`` spells it (``file:/…``)."""
    return "file:" + path.as_uri().removeprefix("file://")


def _source_frame(path: Path,  # noqa: PLR0915, PLR0912, C901
                  spec: InputSpec
                  ) -> tuple[pd.DataFrame, list[str], ParquetRaw | None, str | None]:
    """One file → frame with ``source_file``, ``raw_record``, ``_malformed``, ``_header`` and the
    source columns (strings; Parquet keeps its column types, and its ``raw_record`` is the
    returned :class:`ParquetRaw` instead), the source column names, that ``ParquetRaw``
    (``None`` for text formats) and the read error of a file that broke part-way (``None``:
    read whole; the frame holds the records before the break). Raises ``_READ_ERRORS`` for a
    file that cannot be read at all."""
    uri = _uri(path)
    if spec.format == "parquet":
        table, invalid = _valid_utf8(pq.read_table(path))
        pdf = table.to_pandas(timestamp_as_object=False)
        names = list(pdf.columns)
        return (pdf.assign(source_file=uri, _malformed=False, _header=False,
                           _invalid_utf8=invalid), names, ParquetRaw([table]), None)
    lines, invalid_utf8, error = _lines(path)
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
                      _invalid_utf8=invalid_utf8), names, None, error


def _valid_utf8(table: pa.Table) -> tuple[pa.Table, npt.NDArray[Any]]:
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

    def rows(self, positions: npt.NDArray[Any]) -> npt.NDArray[Any]:
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


def _raw_records(frame: pd.DataFrame, raw: ParquetRaw | None,
                  rows: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``raw_record`` of ``frame``'s rows where the bool mask ``rows`` is set (object array):
    from ``raw`` for Parquet, else the frame's column."""
    if raw is None:
        return np.asarray(frame["raw_record"][rows].to_numpy())
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
    """``spec`` with ``csv_columns`` read from the header of the first input file with a line
    (path order; empty and unreadable files skipped), as
    ``pipelines.spark.ingest.resolve_input_spec`` does with Spark; ``ValueError`` when no file
    has one."""
    if spec.format != "csv" or spec.csv_columns is not None:
        return spec
    files = sorted(input_files(inputs, spec), key=str)
    sep = spec.csv_options.get("sep", spec.csv_options.get("delimiter", ","))
    for f in files:
        try:
            first = _lines(f)[0]
        except _READ_ERRORS:
            continue  # reported when it is read
        if first:
            return spec.replace(csv_columns=tuple(next(csv.reader([first[0].lstrip("\ufeff")],
                                                                  delimiter=sep))))
    raise ValueError(f"no input file has a line to read a CSV header from "
                     f"({len(files)} file(s) under {', '.join(inputs)})")


# ------------------------------------------------------------------------------------ parsing


def _arrow(s: pd.Series) -> pa.Array:
    """A mapped column as Arrow (the input of the shared rules)."""
    if s.dtype == object:
        s = s.where(s.notna(), None)
    return pa.Array.from_pandas(s)


def _mapped_records(frame: pd.DataFrame, names: list[str], spec: InputSpec,
                    parquet_raw: ParquetRaw | None) -> pa.RecordBatch:
    """The frame's records as :func:`pipelines.ingest.rules.ingest_records` takes them: every
    mapping evaluated here (``m_<column>``, ``o_<i>``), the reader's flags, ``source_file`` and,
    when spreading needs it, ``raw_record``."""
    n = len(frame)
    scope: dict[str, pd.Series] = {c: frame[c] for c in names}
    named = any("raw_record" in (v or "") for v in (*spec.columns.values(), *spec.spread_order))
    if "raw_record" not in scope and (parquet_raw is None or named or spec.spread_within_minute):
        scope["raw_record"] = pd.Series(_raw_records(frame, parquet_raw, np.ones(n, dtype=bool)),
                                        dtype=object)
    scope.setdefault("source_file", frame["source_file"])

    def mapped(value: str | None) -> pa.Array:
        if value is None:
            return pa.nulls(n, pa.string())
        if is_identifier(value):
            return _arrow(scope[value]) if value in scope else pa.nulls(n, pa.string())
        return _arrow(_eval(_parse(value), scope, n))

    columns = {mapped_name(c): mapped(spec.columns.get(c)) for c in MAPPED_COLUMNS}
    if spec.spread_within_minute:
        columns |= {order_name(i): mapped(v) for i, v in enumerate(spec.spread_order)}
        columns[RAW_RECORD] = pa.array(scope["raw_record"].tolist(), pa.string())
    return pa.RecordBatch.from_pydict({
        SOURCE_FILE: pa.array(frame["source_file"].tolist(), pa.string()),
        INVALID_UTF8_FLAG: pa.array(frame["_invalid_utf8"].to_numpy(bool)),
        MALFORMED_FLAG: pa.array(frame["_malformed"].to_numpy(bool)), **columns})


def _accepted_frame(verdict: Ingested, files: npt.NDArray[Any]) -> pd.DataFrame:
    """The accepted messages of ``verdict`` as ``parse_local`` returns them (``files``: each
    one's ``source_file``)."""
    acc = verdict.accepted
    keys = acc.column("key").combine_chunks()
    hashes = key_hashes_arrow(keys)
    return pd.DataFrame({
        "topic": acc.column("topic").to_numpy(),
        "key": keys.to_numpy(zero_copy_only=False),
        "producer_name": acc.column("producer_name").to_numpy(),
        "sequence_id": acc.column("sequence_id").to_pandas(types_mapper={
            pa.int64(): pd.Int64Dtype()}.get),
        "publish_time": pd.to_datetime(acc.column("publish_time").cast(pa.int64()).to_numpy(),
                                       unit="us", utc=True),
        "payload_size": acc.column("payload_size").to_numpy().astype(np.int64),
        "source_file": files,
        "event_ms": acc.column("event_ms").to_numpy().astype(np.int64),
        "hash32": hashes.field("hash32").to_pandas(types_mapper={
            pa.int64(): pd.Int64Dtype()}.get),
        "segment_hash": hashes.field("segment_hash").to_pandas(types_mapper={
            pa.int32(): pd.Int32Dtype()}.get),
        "hash_b": hashes.field("hash_b").to_pandas(types_mapper={
            pa.int32(): pd.Int32Dtype()}.get),
    })[list(ACCEPTED_COLUMNS)]


def parse_local(frame: pd.DataFrame, names: list[str], spec: InputSpec,
                parquet_raw: ParquetRaw | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Map :func:`_source_frame` output to the input contract and apply the input rules:
    :func:`pipelines.ingest.rules.ingest_records`, the function Spark's staging pass calls.
    Returns ``(accepted, quarantine)`` as ``pipelines.spark.ingest.parse_records`` makes them.
    ``parquet_raw``: the Parquet rows' ``raw_record`` (``None``: the frame's column)."""
    header = frame["_header"].to_numpy(bool)
    if header.any():  # CSV only (Parquet frames have no header rows to drop)
        frame = frame[~header].reset_index(drop=True)
    verdict = ingest_records(_mapped_records(frame, names, spec, parquet_raw), spec)
    files = frame["source_file"].to_numpy()
    bad = np.zeros(len(frame), dtype=bool)
    bad[verdict.rejected_rows] = True
    quarantine = pd.DataFrame({"source_file": files[bad],
                               "raw_record": _raw_records(frame, parquet_raw, bad),
                               "reason": verdict.reasons.to_numpy(zero_copy_only=False)})
    return _accepted_frame(verdict, files[verdict.accepted_rows]), quarantine


def _read_source(path: Path, spec: InputSpec
                 ) -> tuple[tuple[pd.DataFrame, list[str], ParquetRaw | None] | None,
                            tuple[str, str, str] | None]:
    """One input file: its :func:`_source_frame` (``None``: empty, or unreadable) and, for a
    file that could not be read whole, its ``quarantine`` row (``source_file``, the read
    error, ``unreadable_file`` when no record was read, else ``truncated_file``) — the rows
    ``pipelines.spark.ingest.salvage_files`` makes (the error's text is Python's here)."""
    if is_empty(path):
        return None, None
    try:
        frame, names, raw, error = _source_frame(path, spec)
    except _READ_ERRORS as exc:  # vanished, no permission, not gzip, corrupt Parquet
        return None, (_uri(path), _read_error(exc), UNREADABLE_FILE)
    if error is None:
        return (frame, names, raw), None
    row = (_uri(path), error, TRUNCATED_FILE if len(frame) else UNREADABLE_FILE)
    return ((frame, names, raw) if len(frame) else None), row


def _read_batch(paths: Sequence[Path], spec: InputSpec
                ) -> tuple[pd.DataFrame | None, pd.DataFrame]:
    """One micro-batch's files read and parsed together: ``(accepted, quarantine)``, the
    file-level rows (:func:`_read_source`) after the records'; ``accepted`` is ``None`` when
    no file had a record to parse."""
    frames, bad = [], []
    for f in paths:
        read, row = _read_source(f, spec)
        frames += [read] if read is not None else []
        bad += [row] if row is not None else []
    bad_rows = pd.DataFrame(bad, columns=["source_file", "raw_record", "reason"])
    if not frames:
        return None, bad_rows
    names = list(dict.fromkeys(n for _, ns, _ in frames for n in ns))
    raws = [r for _, _, r in frames if r is not None]  # Parquet: tables in frame order
    raw = ParquetRaw([t for r in raws for t in r.tables]) if raws else None
    frame = pd.concat([f for f, _, _ in frames], ignore_index=True)
    for c in names:
        if c not in frame.columns:
            frame[c] = None
    a, q = parse_local(frame, names, spec, raw)
    return a, (pd.concat([q, bad_rows], ignore_index=True) if bad else q)


def read_local(spec: InputSpec, inputs: Sequence[str],
               max_files_per_trigger: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read and parse every input file without Spark: ``(accepted, quarantine)``.

    ``accepted``: ``pipelines.ingest.rules.ACCEPTED_COLUMNS`` (pandas dtypes: ``sequence_id`` /
    ``hash32`` Int64, ``segment_hash`` / ``hash_b`` Int32, ``publish_time`` datetime64[ns, UTC],
    ``event_ms`` int64 ms). ``quarantine``: ``source_file``, ``raw_record``, ``reason`` and
    ``batch_id`` (the micro-batch the Spark replay would read the file in: files in
    modification-time order, ``max_files_per_trigger`` per batch). Files of one micro-batch
    are parsed together (minute spreading spans a micro-batch, as in Spark). Empty files give
    no row; a file that cannot be read whole gives the records read before the break and one
    quarantine row (:func:`_read_source`)."""
    spec = resolve_local_spec(spec, inputs)
    check_spec(spec)
    files = input_files(inputs, spec)
    acc, qua = [], []
    for b in range(0, len(files), max_files_per_trigger):
        a, q = _read_batch(files[b:b + max_files_per_trigger], spec)
        acc += [a] if a is not None else []
        qua.append(q.assign(batch_id=b // max_files_per_trigger))
    accepted = (pd.concat(acc, ignore_index=True) if acc
                else pd.DataFrame({c: [] for c in ACCEPTED_COLUMNS}))
    if not qua:
        return accepted, pd.DataFrame({c: [] for c in ("source_file", "raw_record", "reason",
                                                       "batch_id")})
    return accepted, pd.concat(qua, ignore_index=True)


# ------------------------------------------------------------------------------------- replay


def _groups(pdf: pd.DataFrame, keys: list[str]) -> Iterable[tuple[Any, pd.DataFrame]]:
    if not len(pdf):
        return []
    groups: Iterable[tuple[Any, pd.DataFrame]] = pdf.groupby(keys, sort=True, dropna=False)
    return groups


def run_local(config: ReplayConfig, input_spec: InputSpec, inputs: Sequence[str], output: str,  # noqa: PLR0915, C901
              run_id: str, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Replay ``inputs`` in this process and write the run's tables under ``output``.

    Same arguments and tables as ``pipelines.spark.replay.Replay(...).run()`` (batch mode), without
    a SparkSession; returns the run summary (``pipelines.engine.summary.run_summary``). Raises
    ``ValueError`` when the spec needs Spark (:func:`check_spec`), and
    ``pipelines.ingest.privacy.PrivacyError`` when ``input.pseudonymize``'s secret is not set. The
    privacy options (``input.pseudonymize``, ``output.keys``, ``output.quarantine_raw``) act as
    in the Spark replay. Re-running the same
    ``run_id`` into the same output is a no-op per table (idempotent app-transaction
    versions)."""
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
    counts: dict[str, Any] = {}

    def write(table: str, data: pd.DataFrame | pa.Table, version: int) -> None:
        if table not in tables or data is None or not len(data):
            return
        if isinstance(data, pa.Table):  # the messages: already the table's columns
            data = withhold(data, withheld.get(table, ()))  # output.keys
            data = data.append_column("run_id", pa.array([run_id] * len(data), pa.string()))
        else:
            keep = [c for c in table_columns(table) if c in data.columns]
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
    bad_files = quarantine[quarantine["reason"].isin(FILE_REASONS)]
    for r in bad_files.itertuples(index=False):
        progress(f"local: {bad_file_line(r.source_file, r.reason, r.raw_record)}")
    if len(bad_files):  # as the Spark replay's state counts them
        counts["bad_files"] = len(bad_files)
    lap("ingest_hash")
    progress(f"local: accepted {len(accepted):,}, quarantined {len(quarantine):,}")

    version = FINAL_VERSION
    first = int(accepted["event_ms"].min()) if len(accepted) else None
    settings = stages.StageSettings.from_config(config, first)
    controllers: dict[str, Any] = {}
    frames: dict[str, list[Any]] = {kind: [] for kind in STAGE_KINDS}
    # end of input for every topic: the log's last message + 1 (as the Spark replay's final
    # window), whatever the topic's own last message
    end = int(accepted["event_ms"].max()) + 1 if len(accepted) else None
    for (topic,), g in _groups(accepted, ["topic"]):
        r = stages.topic_group(topic, g.reset_index(drop=True), None, None, None, settings,
                               end, True)
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
    for kind, staged in STAGE_KINDS.items():
        parts = [f for f in frames[kind] if len(f)]
        write(staged, (pa.concat_tables(parts) if isinstance(parts[0], pa.Table)
                      else pd.concat(parts, ignore_index=True)) if parts else None, version)
    counts["entries"] = sum(len(f) for f in frames["entry"])
    counts["dispatched"] = sum(len(f) for f in frames["dispatch"])
    counts["publish_time"] = input_spec.publish_time_facts()
    lap("delta_write")
    write_answers(store, run_id, config, version, keys=ctl.key_profiles)
    lap("findings")

    row = runs_row(config, inputs, counts, store.engine, started, {"engine": "local", **timings})
    write("runs", pd.DataFrame([row]), version)
    return run_summary(store, run_id)
