"""Input mistakes caught before Spark starts: mapped source columns the files do not have.

A column mapping that names a source column the input lacks does not fail at ingest: the
column reads as null (an optional column may be absent), so a typo (``input.columns.key:
lbnn`` for a column ``lbn``) would silently make every message keyless. This module checks, in
plain Python (no Spark, no JVM), the mappings that must resolve (:meth:`InputSpec.
checked_sources`: the required contract columns and every column the user mapped) against the
columns the files have:

- CSV: the spec's ``csv_columns`` or, without them, the header row of the first input file;
- Parquet: the schema of the first input file (its footer, read with pyarrow);
- JSON lines and ``text``: nothing here (JSON has no schema up front; the replay reports a
  mapped field absent from every record of the first micro-batch, see ``pipelines.spark.replay``).

Only local paths are checked (a URI with a scheme other than ``file:`` is skipped).
See docs/design.md, "Input contract".
"""

from __future__ import annotations

import csv
import glob
import gzip
from collections.abc import Sequence
from fnmatch import fnmatch
from pathlib import Path

import pyarrow.parquet as pq

from pipelines.contract.presets import InputSpec


class InputColumnError(ValueError):
    """A mapped source column is missing from the input files (a user mistake: exit 2)."""


def input_files(inputs: Sequence[str], file_glob: str | None = None) -> list[Path]:
    """Local files read from ``inputs`` (files, folders: their non-hidden files whose name
    matches ``file_glob``, or glob patterns: what they match), sorted by path; ``[]`` when an
    input is not a local path."""
    files: list[Path] = []
    for i in inputs:
        if "://" in i and not i.startswith("file:"):
            return []
        local = i.removeprefix("file:")
        for p in ([Path(m) for m in sorted(glob.glob(local))] if glob.has_magic(local)
                  else [Path(local)]):
            if p.is_file():
                files.append(p)
            elif p.is_dir():
                files += [f for f in p.iterdir()
                          if f.is_file() and not f.name.startswith((".", "_"))
                          and (file_glob is None or fnmatch(f.name, file_glob))]
    return sorted(dict.fromkeys(f.resolve() for f in files), key=str)


def csv_header(path: Path, sep: str = ",") -> tuple[str, ...]:
    """Column names in the first line of the CSV file ``path`` (``.gz`` read transparently; a
    UTF-8 byte-order mark dropped); ``()`` for an empty file."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace", newline="") as fh:
        line = fh.readline().lstrip("\ufeff").rstrip("\r\n")
    return tuple(next(csv.reader([line], delimiter=sep))) if line else ()


def parquet_columns(path: Path) -> tuple[str, ...]:
    """Top-level column names of the Parquet file ``path`` (from its footer)."""
    return tuple(pq.read_schema(path).names)


def source_columns(spec: InputSpec, inputs: Sequence[str]) -> tuple[str, ...] | None:
    """The columns the input files have, as ingest will see them: CSV ``spec.csv_columns`` or
    the first file's header; Parquet the first file's schema. ``None`` when it cannot be known
    before reading (JSON, ``text``, no local file, an unreadable first file: ingest reports
    those)."""
    if spec.format == "csv" and spec.csv_columns is not None:
        return tuple(spec.csv_columns)
    if spec.format not in ("csv", "parquet"):
        return None
    files = input_files(inputs, spec.file_glob)
    if not files:
        return None
    try:
        if spec.format == "parquet":
            return parquet_columns(files[0])
        sep = spec.csv_options.get("sep", spec.csv_options.get("delimiter", ","))
        return csv_header(files[0], sep) or None
    except (OSError, ValueError, UnicodeError):  # unreadable: quarantined by ingest
        return None


def check_columns(spec: InputSpec, inputs: Sequence[str]) -> None:
    """Raise :class:`InputColumnError` (one sentence) when a mapping of
    :meth:`InputSpec.checked_sources` names a source column the CSV header or Parquet schema
    of the inputs lacks; the sentence names the mapping(s) and lists the files' columns."""
    have = source_columns(spec, inputs)
    if have is None:
        return
    missing = {c: s for c, s in spec.checked_sources().items() if s not in have}
    if not missing:
        return
    what = "; ".join(f"{c} is mapped to {s!r}" for c, s in missing.items())
    kind = "header" if spec.format == "csv" else "schema"
    raise InputColumnError(
        f"{what}, but the {spec.format.upper()} {kind} of the input has no such column "
        f"(its columns: {', '.join(have)})")
