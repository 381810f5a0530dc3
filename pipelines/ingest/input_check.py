"""Input mistakes and untidy input folders caught before Spark starts (plain Python, no JVM).

A column mapping that names a source column the input lacks does not fail at ingest: the
column reads as null (an optional column may be absent), so a typo (``input.columns.key:
lbnn`` for a column ``lbn``) would silently make every message keyless. This module checks, in
plain Python (no Spark, no JVM), the mappings that must resolve (:meth:`InputSpec.
checked_sources`: the required contract columns and every column the user mapped) against the
columns the files have:

- CSV: the spec's ``csv_columns`` or, without them, the header row of the first non-empty
  input file;
- Parquet: the schema of the first non-empty input file whose footer reads (pyarrow);
- JSON lines and ``text``: nothing here (JSON has no schema up front; the replay reports a
  mapped field absent from every record of the first micro-batch, see ``pipelines.spark.replay``).

It also surveys the input files (:func:`survey_inputs`, issue #32): which are empty (skipped:
no record, no quarantine row), which is the first with content, and whether the folder mixes
files of another format (by name: ``.parquet``, ``.csv``, ``.json``/``.jsonl``/``.ndjson``,
each with an optional ``.gz``) or CSV files with another header, or Parquet files lacking a
mapped column the first one has — one sentence (:class:`InputFilesError`) before Spark starts
instead of wrong columns or a failure mid-run. A file that cannot be opened or decoded here is
left to ingest, which records it (``unreadable_file`` / ``truncated_file`` quarantine rows).

Names a replay never reads (:func:`is_listed`), as Spark's file source: hidden ones (``.`` or
``_`` first) and, without a ``file_glob``, files still being written under a temporary name
(:data:`IN_PROGRESS_SUFFIXES`: ``*.tmp``, Hadoop's ``*._COPYING_``; Spark is given
:data:`NOT_IN_PROGRESS_GLOB` as ``pathGlobFilter``). docs/guarantees.md, "Files still being
written".

Only local paths are checked (a URI with a scheme other than ``file:`` is skipped). Cost: one
``stat`` per file, the first line of each CSV file, the footer of each Parquet file and the
first decompressed byte of each ``.gz`` file — small beside reading them.
See docs/design.md, "Input contract".
"""

from __future__ import annotations

import csv
import glob
import gzip
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import pyarrow.parquet as pq

from pipelines.contract.presets import InputSpec

IN_PROGRESS_SUFFIXES: tuple[str, ...] = (".tmp", "._COPYING_")
"""Name endings of files still being written (the writer renames them when complete): never
read from a folder without a ``file_glob`` (``._COPYING_`` is ``hadoop fs -put``'s, which Spark
skips itself)."""

NOT_IN_PROGRESS_GLOB = "{*[!p],*[!m]p,*[!t]mp,*[!.]tmp,p,mp,tmp}"
"""Hadoop glob (Spark's ``pathGlobFilter``, matched against a file's name) of every name that
does not end in ``.tmp``: the file source's filter when the spec has no ``file_glob``."""

_FORMAT_SUFFIXES = ((".parquet", "parquet"), (".csv", "csv"), (".json", "json"),
                    (".jsonl", "json"), (".ndjson", "json"))


class InputColumnError(ValueError):
    """A mapped source column is missing from the input files (a user mistake: exit 2)."""


class InputFilesError(ValueError):
    """The input files cannot make one replay: every file empty, files of another format or
    with another header in one input (a user mistake: exit 2, one sentence)."""


@dataclass(frozen=True)
class InputSurvey:
    """What :func:`survey_inputs` found: ``files`` (every listed file, path order), ``empty``
    (those with no content: zero bytes, or a ``.gz`` that decompresses to nothing), ``local``
    (False: a remote input, nothing surveyed), ``columns`` (each readable file's header or
    schema) and ``unread_folders``."""

    files: tuple[Path, ...] = ()
    empty: tuple[Path, ...] = ()
    local: bool = True
    columns: dict[Path, tuple[str, ...]] = field(default_factory=dict)
    unread_folders: tuple[Path, ...] = ()
    """:func:`unread_folders` of the inputs."""

    @property
    def with_content(self) -> tuple[Path, ...]:
        """The listed files that are not empty, path order."""
        skipped = set(self.empty)
        return tuple(f for f in self.files if f not in skipped)


def is_listed(name: str, file_glob: str | None = None) -> bool:
    """Whether a folder's file called ``name`` is read: not hidden (``.`` or ``_`` first, as
    Spark's file source), and matching ``file_glob`` or, without one, not a name of a file
    still being written (:data:`IN_PROGRESS_SUFFIXES`)."""
    if name.startswith((".", "_")):
        return False
    if file_glob is not None:
        return fnmatch(name, file_glob)
    return not name.endswith(IN_PROGRESS_SUFFIXES)


def input_files(inputs: Sequence[str], file_glob: str | None = None) -> list[Path]:
    """Local files read from ``inputs`` (files, folders: their files :func:`is_listed` keeps,
    or glob patterns: what they match), sorted by path; ``[]`` when an input is not a local
    path."""
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
                files += [f for f in p.iterdir() if f.is_file() and is_listed(f.name, file_glob)]
    return sorted(dict.fromkeys(f.resolve() for f in files), key=str)


def unread_folders(inputs: Sequence[str]) -> list[Path]:
    """Sub-folders of the local input folders (given as folders, not patterns) that hold
    files, hidden ones (``.`` or ``_`` first) aside, path order: the file source reads a
    folder's own files, not its sub-folders' (:func:`input_files`), so the console names them
    rather than let their files go unread unsaid."""
    found: list[Path] = []
    for i in inputs:
        local = i.removeprefix("file:")
        if ("://" in i and not i.startswith("file:")) or glob.has_magic(local):
            continue
        folder = Path(local)
        if folder.is_dir():
            found += [d for d in sorted(folder.iterdir())
                      if d.is_dir() and not d.name.startswith((".", "_"))
                      and any(f.is_file() for f in d.rglob("*"))]
    return found


def sub_folders_hint(folders: Sequence[Path]) -> str:
    """How to read the sub-folders ``folders`` (:func:`unread_folders`, at least one):
    ``"give them as --input, or a pattern such as --input 'logs/*/*'"``."""
    return (f"give {'it' if len(folders) == 1 else 'them'} as --input, or a pattern such "
            f"as --input '{folders[0].parent}/*/*'")


def only_sub_folders(folders: Sequence[Path]) -> str:
    """The sentence for an input with no file of its own but the sub-folders ``folders``."""
    return (f"the input has no file of its own, only sub-folders ({_names(folders)}), whose "
            f"files are not read; {sub_folders_hint(folders)}")


def is_empty(path: Path) -> bool:
    """Whether the file ``path`` holds no content: zero bytes, or a ``.gz`` whose first member
    decompresses to nothing. ``False`` for a file that cannot be read or decompressed (ingest
    records it) or that vanished (ingest records that too)."""
    try:
        if path.stat().st_size == 0:
            return True
        if not path.name.endswith(".gz"):
            return False
        with gzip.open(path, "rb") as fh:
            return fh.read(1) == b""
    except (OSError, EOFError, zlib.error):
        return False


def format_of(name: str) -> str | None:
    """The format a file name says (``x.csv.gz`` → ``csv``); ``None`` when it says none."""
    base = name.lower().removesuffix(".gz")
    return next((fmt for ext, fmt in _FORMAT_SUFFIXES if base.endswith(ext)), None)


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


def _columns(spec: InputSpec, path: Path) -> tuple[str, ...] | None:
    """The CSV header / Parquet columns of one non-empty file; ``None`` when the format has
    none up front or the file cannot be read here (ingest records it)."""
    try:
        if spec.format == "parquet":
            return parquet_columns(path)
        if spec.format == "csv" and spec.csv_columns is None:
            sep = spec.csv_options.get("sep", spec.csv_options.get("delimiter", ","))
            return csv_header(path, sep) or None
    except (OSError, ValueError, UnicodeError, EOFError, zlib.error):
        return None
    return None


def survey_inputs(spec: InputSpec, inputs: Sequence[str]) -> InputSurvey:
    """The local input files of ``inputs`` (:func:`input_files` with ``spec.file_glob``), which
    are empty, and the header / schema of each non-empty CSV or Parquet file. Nothing is
    surveyed (``local=False``) when an input is not a local path."""
    if any("://" in i and not i.startswith("file:") for i in inputs):
        return InputSurvey(local=False)
    files = tuple(input_files(inputs, spec.file_glob))
    empty = tuple(f for f in files if is_empty(f))
    skipped = set(empty)
    columns = {f: c for f in files if f not in skipped and (c := _columns(spec, f)) is not None}
    return InputSurvey(files, empty, True, columns, tuple(unread_folders(inputs)))


def _names(paths: Sequence[Path], most: int = 3) -> str:
    shown = ", ".join(p.name for p in paths[:most])
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


def check_files(spec: InputSpec, survey: InputSurvey, need_content: bool = True) -> None:
    """Raise :class:`InputFilesError` (one sentence naming the files and what differs) when
    the surveyed files cannot make one replay: ``need_content`` (a batch ``run``) and files
    were found but every one is empty; Parquet files none of which has a readable footer (no
    schema); files whose name says another format than
    ``spec.format``; CSV files (header read from the files) whose header differs from the
    first one's; Parquet files lacking a column of :meth:`InputSpec.checked_sources` that the
    first file has; ``need_content`` and no file but in sub-folders (:func:`unread_folders`)."""
    if not survey.local:
        return
    if need_content and not survey.files and survey.unread_folders:
        raise InputFilesError(only_sub_folders(survey.unread_folders))
    if need_content and survey.files and not survey.with_content:
        raise InputFilesError(
            f"no input file has any content ({len(survey.files)} empty: "
            f"{_names(survey.files)}); nothing to replay")
    readable = [f for f in survey.with_content if f in survey.columns]
    if spec.format == "parquet" and survey.with_content and not readable:
        raise InputFilesError(
            f"no Parquet input file can be read ({_names(survey.with_content)}: no valid "
            f"footer), so there is no schema to replay with")
    if spec.format in ("csv", "json", "parquet"):
        other = [f for f in survey.with_content
                 if (fmt := format_of(f.name)) is not None and fmt != spec.format]
        if other:
            kinds = sorted({str(format_of(f.name)).upper() for f in other})
            raise InputFilesError(
                f"the input mixes formats: {_names(other)} {'is' if len(other) == 1 else 'are'} "
                f"{'/'.join(kinds)} but the input format is {spec.format.upper()}; move "
                f"{'it' if len(other) == 1 else 'them'} out of the input folder or give "
                f"--input a pattern that matches only the {spec.format.upper()} files")
    _check_same_columns(spec, survey)


def _check_same_columns(spec: InputSpec, survey: InputSurvey) -> None:
    """CSV: every header equal to the first file's; Parquet: no file lacks a checked source
    column the first file has."""
    if not survey.columns:
        return
    first, *rest = sorted(survey.columns, key=str)
    want = survey.columns[first]
    if spec.format == "csv":
        odd = [f for f in rest if survey.columns[f] != want]
        if odd:
            raise InputFilesError(
                f"the input's CSV files have different headers: {_names(odd)} "
                f"{'has' if len(odd) == 1 else 'have'} {', '.join(survey.columns[odd[0]])} "
                f"where {first.name} has {', '.join(want)}; replay them separately")
        return
    needed = [s for s in spec.checked_sources().values() if s in want]
    odd = [f for f in rest if any(s not in survey.columns[f] for s in needed)]
    if odd:
        lacking = [s for s in needed if s not in survey.columns[odd[0]]]
        raise InputFilesError(
            f"the input's Parquet files have different schemas: {_names(odd)} "
            f"{'lacks' if len(odd) == 1 else 'lack'} column(s) {', '.join(lacking)} that "
            f"{first.name} has; replay them separately")


def source_columns(spec: InputSpec, inputs: Sequence[str],
                   survey: InputSurvey | None = None) -> tuple[str, ...] | None:
    """The columns the input files have, as ingest will see them: CSV ``spec.csv_columns`` or
    the first non-empty file's header; Parquet the first non-empty readable file's schema.
    ``None`` when it cannot be known before reading (JSON, ``text``, no local file, no
    readable file: ingest reports those). ``survey``: :func:`survey_inputs`' (made here when
    not given)."""
    if spec.format == "csv" and spec.csv_columns is not None:
        return tuple(spec.csv_columns)
    if spec.format not in ("csv", "parquet"):
        return None
    survey = survey_inputs(spec, inputs) if survey is None else survey
    for f in survey.with_content:
        if f in survey.columns:
            return survey.columns[f]
    return None


def check_columns(spec: InputSpec, inputs: Sequence[str],
                  survey: InputSurvey | None = None) -> None:
    """Raise :class:`InputColumnError` (one sentence) when a mapping of
    :meth:`InputSpec.checked_sources` names a source column the CSV header or Parquet schema
    of the inputs lacks; the sentence names the mapping(s) and lists the files' columns."""
    have = source_columns(spec, inputs, survey)
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
