"""``timestamp_format: auto`` guesses the unit of epoch numbers once a run, from the magnitude
of the first input file's publish times (pipelines/ingest/time_unit.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.contract.presets import get_preset
from pipelines.ingest.time_unit import EpochGuess, guess_epoch_unit, unit_of


@pytest.mark.parametrize(("magnitude", "unit", "relative"), [
    (1.7e18, "epoch_ns", False),
    (1e17, "epoch_ns", False),
    (1.7e15, "epoch_us", False),
    (1e14, "epoch_us", False),
    (1.7e12, "epoch_ms", False),
    (1e11, "epoch_ms", False),
    (1.7e9, "epoch_s", False),
    (1e9, "epoch_s", False),
    (5_633_898, "epoch_ms", True),
    (100, "epoch_ms", True),
    (0, "epoch_ms", True),
])
def test_unit_follows_the_magnitude_bands(magnitude, unit, relative):
    assert unit_of(magnitude) == (unit, relative)


def _csv(path: Path, times: list[object]) -> Path:
    rows = ["topic,key,publish_time,payload_size"] + [f"t,k{i},{v},10"
                                                      for i, v in enumerate(times)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _spec(fmt: str, **kw: object):
    return get_preset("contract").replace(format=fmt, **kw)


@pytest.mark.parametrize(("times", "unit"), [
    ([1_700_000_000, 1_700_000_060], "epoch_s"),
    ([1_700_000_000_000, 1_700_000_060_000], "epoch_ms"),
    ([1_700_000_000_000_000, 1_700_000_060_000_000], "epoch_us"),
    (["1700000000.5", "1700000001.25"], "epoch_s"),
    ([100, 5_633_898], "epoch_ms"),
])
def test_csv_publish_times_guess_their_unit(tmp_path, times, unit):
    _csv(tmp_path / "a.csv", times)
    guess = guess_epoch_unit(_spec("csv"), [str(tmp_path)])
    assert guess is not None and guess.unit == unit


def test_json_lines_gzipped_guess_their_unit(tmp_path):
    with gzip.open(tmp_path / "a.json.gz", "wt") as fh:
        for i in range(3):
            fh.write(json.dumps({"topic": "t", "publish_time": 1_700_000_000_000_000 + i,
                                 "payload_size": 1}) + "\n")
    guess = guess_epoch_unit(_spec("json"), [str(tmp_path)])
    assert guess == EpochGuess("epoch_us", 1_700_000_000_000_001.0, 1.7e15, 1_700_000_000_000_002.0,
                               3, False)


def test_parquet_integers_guess_their_unit(tmp_path):
    pq.write_table(pa.table({"topic": ["t", "t"], "publish_time": [1_700_000_000, 1_700_000_001],
                             "payload_size": [1, 1]}), tmp_path / "a.parquet")
    guess = guess_epoch_unit(_spec("parquet"), [str(tmp_path)])
    assert guess is not None and (guess.unit, guess.records) == ("epoch_s", 2)


@pytest.mark.parametrize(("spec_changes", "times"), [
    ({"publish_time_format": "epoch_s"}, [1_700_000_000]),       # the user chose the unit
    ({}, ["2025-01-15T09:00:00Z", "2025-01-15T09:00:01Z"]),     # ISO strings: nothing to guess
    ({"columns": {"topic": "topic", "publish_time": "publish_time * 1000",
                  "payload_size": "payload_size"}}, [1_700_000_000]),  # an expression
])
def test_nothing_is_guessed_when_there_is_no_epoch_number_to_read(tmp_path, spec_changes,
                                                                  times):
    _csv(tmp_path / "a.csv", times)
    assert guess_epoch_unit(_spec("csv", **spec_changes), [str(tmp_path)]) is None


def test_the_first_non_empty_file_decides(tmp_path):
    (tmp_path / "a.csv").write_text("")
    _csv(tmp_path / "b.csv", [1_700_000_000])
    _csv(tmp_path / "c.csv", [1_700_000_000_000])
    guess = guess_epoch_unit(_spec("csv"), [str(tmp_path)])
    assert guess is not None and guess.unit == "epoch_s"


def test_note_names_the_unit_and_the_key_to_set():
    note = EpochGuess("epoch_s", 1.7e9, 1.7e9, 1.7e9 + 3600, 500, False).note
    assert note == ("publish_time numbers read as epoch seconds (timestamp_format auto: values "
                    "such as 1,700,000,000 have that magnitude); set input.timestamp_format to "
                    "choose the unit")


def test_note_on_a_relative_clock_suggests_seconds():
    note = EpochGuess("epoch_ms", 3_000_000, 100, 5_633_898, 50, True).note
    assert note.startswith("publish_time numbers (up to 5,633,898) are too small for epoch "
                           "times of a recent year, so they are read as milliseconds of a "
                           "relative clock (the first file spans 1 h 33 min)")
    assert note.endswith("if they are seconds, set input.timestamp_format=epoch_s")


def test_note_flags_a_first_file_squeezed_into_seconds():
    note = EpochGuess("epoch_ms", 3600, 0, 7200, 10_000, True).note
    assert note.endswith("; note: the first file's 10,000 records then span only 7.2 s, "
                         "check the unit")


def test_a_cut_short_gzip_file_is_passed_over_for_the_next(tmp_path):
    body = "".join(json.dumps({"topic": "t", "publish_time": 1_700_000_000 + i,
                               "payload_size": 1}) + "\n" for i in range(200)).encode()
    packed = gzip.compress(body)
    (tmp_path / "a.json.gz").write_bytes(packed[: len(packed) // 2])
    (tmp_path / "b.json").write_bytes(body)
    guess = guess_epoch_unit(_spec("json"), [str(tmp_path)])
    assert guess is not None and guess.unit == "epoch_s"
