"""The unit of epoch-number publish times under ``timestamp_format: auto``, guessed once a run.

A log's publish times may be epoch seconds, milliseconds, microseconds or nanoseconds, and
``auto`` cannot read the unit off one number. The run guesses it once, before it starts, from
the magnitude of the first input file's publish times (up to :data:`SAMPLE_RECORDS` of them,
read with pyarrow or the standard library: no Spark), so every record of the run is read in
the same unit, whatever the micro-batches, on both engines. The bands, by the median absolute
value ``m`` of the sampled numbers (epoch times since 2001-09-09 in each unit):

========================  ==========  ========================================
``m``                     unit        a value of that size, read in the unit
========================  ==========  ========================================
≥ 1e17                    epoch_ns    1e17 ns = 1973-03-03
≥ 1e14                    epoch_us    1e14 µs = 1973-03-03
≥ 1e11                    epoch_ms    1e11 ms = 1973-03-03
≥ 1e9                     epoch_s     1e9 s = 2001-09-09
< 1e9                     epoch_ms    not an epoch time of any recent year: a clock
                                      relative to some start; milliseconds, as the input
                                      contract says, and the run warns
========================  ==========  ========================================

The guess (:class:`EpochGuess`) is printed once on the console and recorded in the ``runs``
row's ``counts`` (``publish_time_unit``). Setting ``input.timestamp_format`` (``epoch_s``,
...) skips it.
"""

from __future__ import annotations

import gzip
import itertools
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pipelines.contract.presets import InputSpec, is_identifier
from pipelines.ingest.input_check import input_files

SAMPLE_RECORDS = 10_000
"""Publish times sampled from the first input file."""

BANDS: tuple[tuple[float, str], ...] = (
    (1e17, "epoch_ns"), (1e14, "epoch_us"), (1e11, "epoch_ms"), (1e9, "epoch_s"))
"""(lowest median magnitude, unit), from the largest unit down (see the module docstring)."""

MS_PER_UNIT = {"epoch_s": 1000.0, "epoch_ms": 1.0, "epoch_us": 1e-3, "epoch_ns": 1e-6}
UNIT_WORDS = {"epoch_s": "seconds", "epoch_ms": "milliseconds", "epoch_us": "microseconds",
              "epoch_ns": "nanoseconds"}
SHORT_SPAN_MS = 10_000
"""A sample of at least :data:`SHORT_SPAN_RECORDS` records inside this span (ms) is flagged:
the whole first file within a few seconds is more often a unit read too small."""
SHORT_SPAN_RECORDS = 100


@dataclass(frozen=True)
class EpochGuess:
    """The unit ``auto`` reads publish-time numbers in, and why.

    ``unit``: one of ``epoch_s|ms|us|ns``; ``median`` / ``low`` / ``high``: the sampled
    numbers' median absolute value, minimum and maximum; ``records``: how many were sampled;
    ``relative``: the numbers are too small for a recent epoch time (``unit`` is then the
    contract's milliseconds); ``note``: the sentence the run prints and records."""

    unit: str
    median: float
    low: float
    high: float
    records: int
    relative: bool

    @property
    def span_ms(self) -> float:
        """The sample's span read in :attr:`unit`, ms."""
        return (self.high - self.low) * MS_PER_UNIT[self.unit]

    @property
    def note(self) -> str:
        """One sentence: the unit chosen, from what, and what to set to choose another."""
        word = UNIT_WORDS[self.unit]
        if self.relative:
            text = (f"publish_time numbers (up to {self.high:,.0f}) are too small for epoch "
                    f"times of a recent year, so they are read as {word} of a relative clock "
                    f"(the first file spans {_span(self.span_ms)}); if they are seconds, set "
                    f"input.timestamp_format=epoch_s")
        else:
            text = (f"publish_time numbers read as epoch {word} (timestamp_format auto: "
                    f"values such as {self.median:,.0f} have that magnitude); set "
                    f"input.timestamp_format to choose the unit")
        if self.records >= SHORT_SPAN_RECORDS and self.span_ms < SHORT_SPAN_MS:
            text += (f"; note: the first file's {self.records:,} records then span only "
                     f"{_span(self.span_ms)}, check the unit")
        return text


def _span(ms: float) -> str:
    """A duration for a sentence: ``850 ms``, ``7.2 s``, ``1 h 33 min``, ``65 days``."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes = ms / 60_000
    if minutes < 60:
        return f"{minutes:.0f} min"
    if minutes < 48 * 60:
        return f"{int(minutes // 60)} h {int(minutes % 60)} min"
    return f"{minutes / 1440:.0f} days"


def unit_of(magnitude: float) -> tuple[str, bool]:
    """``(unit, relative)`` for a median absolute epoch number ``magnitude`` (the module's
    bands)."""
    for low, unit in BANDS:
        if magnitude >= low:
            return unit, False
    return "epoch_ms", True


def guess_epoch_unit(spec: InputSpec, inputs: Sequence[str]) -> EpochGuess | None:
    """The unit ``auto`` reads the run's publish-time numbers in, from the first input file
    (local files only); ``None`` when there is nothing to guess: the format is not ``auto``,
    ``publish_time`` is mapped to an expression, there is no readable local file, or the
    sampled publish times hold no number (ISO strings, Parquet timestamps). Never raises for
    unreadable input (ingest reports it)."""
    column = spec.columns.get("publish_time")
    if (spec.publish_time_format != "auto" or column is None or not is_identifier(column)
            or spec.format not in ("csv", "json", "parquet")):
        return None
    for path in input_files(inputs, spec.file_glob):
        try:
            values = _sample(path, spec, column)
        except (OSError, EOFError, zlib.error, ValueError, UnicodeError, pa.ArrowException):
            continue  # unreadable or cut short: ingest records it; the next file may tell
        if values is None:
            continue  # an empty file
        numbers = _numbers(values)
        if not len(numbers):
            return None
        magnitude = float(np.median(np.abs(numbers)))
        unit, relative = unit_of(magnitude)
        return EpochGuess(unit, magnitude, float(numbers.min()), float(numbers.max()),
                          len(numbers), relative)
    return None


def _sample(path: Path, spec: InputSpec, column: str) -> list[Any] | None:
    """Up to :data:`SAMPLE_RECORDS` values of ``column`` in ``path`` (``None``: no record)."""
    if spec.format == "parquet":
        pf = pq.ParquetFile(path)
        if column not in pf.schema_arrow.names or pf.metadata.num_rows == 0:
            return None
        batch = next(pf.iter_batches(batch_size=SAMPLE_RECORDS, columns=[column]))
        col = batch.column(0)
        return None if pa.types.is_timestamp(col.type) else col.to_pylist()
    if spec.format == "json":
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
            lines = [ln for ln in itertools.islice(fh, SAMPLE_RECORDS) if ln.strip()]
        records = []
        for ln in lines:
            try:
                rec = json.loads(ln)
            except ValueError:
                continue  # a malformed line: quarantined by ingest
            if isinstance(rec, dict):
                records.append(rec.get(column))
        return records or None
    sep = spec.csv_options.get("sep", spec.csv_options.get("delimiter", ","))
    names = list(spec.csv_columns) if spec.csv_columns is not None else None
    reader = pacsv.open_csv(
        pa.input_stream(str(path), compression="detect"),
        read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 20),
        parse_options=pacsv.ParseOptions(delimiter=sep),
        convert_options=pacsv.ConvertOptions(
            include_columns=[column], column_types={column: pa.string()}))
    try:
        batch = reader.read_next_batch()
    except StopIteration:
        return None
    return batch.column(0).to_pylist()[:SAMPLE_RECORDS] or None


def _numbers(values: list[Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """The values that are numbers (numeric, or strings holding one), as floats."""
    out = []
    for v in values:
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, int | float):
            out.append(float(v))
            continue
        try:
            out.append(float(str(v).strip()))
        except ValueError:
            continue
    arr: np.ndarray[Any, np.dtype[np.float64]] = np.asarray(out, dtype=np.float64)
    finite: np.ndarray[Any, np.dtype[np.float64]] = arr[np.isfinite(arr)]
    return finite
