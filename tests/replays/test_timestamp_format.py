"""``input.timestamp_format`` end to end through ``topic-replay run``, on both engines: each
format gives the publish times it documents (worked values), over the preset's own format,
and a run that accepts nothing exits 1 with its main reason (issue #28)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from jobs.replay import main

ENGINES = ["local", "spark"]


def _csv(path: Path, times: list[str]) -> None:
    path.write_text("topic,key,ts,payload_size\n"
                    + "".join(f"t,k{i},{v},10\n" for i, v in enumerate(times)))


def _json(path: Path, times: list[object]) -> None:
    path.write_text("".join(json.dumps({"topic": "t", "key": f"k{i}", "ts": v,
                                        "payload_size": 10}) + "\n"
                            for i, v in enumerate(times)))


def _parquet(path: Path, times: list[int]) -> None:
    pq.write_table(pa.table({"topic": ["t"] * len(times),
                             "key": [f"k{i}" for i in range(len(times))],
                             "ts": pa.array(times, pa.int64()),
                             "payload_size": [10] * len(times)}), path)


# (case, writer, file name, raw publish times, --set options, publish times in `messages`)
CASES = [
    ("seconds", _csv, "log.csv", ["100", "5633898"], ["input.timestamp_format=epoch_s"],
     ["1970-01-01 00:01:40", "1970-03-07 04:58:18"]),
    ("milliseconds", _json, "log.json", [1_700_000_000_123, 1_700_000_060_456],
     ["input.timestamp_format=epoch_ms"],
     ["2023-11-14 22:13:20.123", "2023-11-14 22:14:20.456"]),
    ("microseconds", _parquet, "log.parquet", [1_700_000_000_123_456, 1_700_000_001_000_999],
     ["input.timestamp_format=epoch_us"],
     ["2023-11-14 22:13:20.123456", "2023-11-14 22:13:21.000999"]),
    ("pattern with a zone", _csv, "log.csv",
     ["15/01/2025 10:00:00 +0100", "15/01/2025 10:00:30 -0500"],
     ["input.timestamp_format=dd/MM/yyyy HH:mm:ss Z"],
     ["2025-01-15 09:00:00", "2025-01-15 15:00:30"]),
]
LOCAL_ONLY_CASES = [
    ("pattern in the input's time zone", _json, "log.json",
     ["15/07/2025 10:00:00", "15/07/2025 10:00:01"],
     ["input.timestamp_format=dd/MM/yyyy HH:mm:ss", "input.time_zone=Europe/London"],
     ["2025-07-15 09:00:00", "2025-07-15 09:00:01"]),
    ("nanoseconds", _json, "log.json", [1_700_000_000_123_456_789],
     ["input.timestamp_format=epoch_ns"], ["2023-11-14 22:13:20.123456"]),
    ("auto guesses seconds", _csv, "log.csv", ["1700000000", "1700000060"], [],
     ["2023-11-14 22:13:20", "2023-11-14 22:14:20"]),
    ("iso", _json, "log.json", ["2025-01-15T09:00:00.250+02:00"],
     ["input.timestamp_format=iso"], ["2025-01-15 07:00:00.250"]),
]


def _run(tmp_path: Path, engine: str, writer, name: str, times: list, sets: list[str],
         extra: tuple[str, ...] = ()) -> tuple[int, Path]:
    logs = tmp_path / "logs"
    logs.mkdir()
    writer(logs / name, times)
    out = tmp_path / "out"
    args = ["run", "--input", str(logs), "--output", str(out), "--engine", engine,
            "--set", "input.columns.publish_time=ts", "--run-id", "r", *extra]
    for s in sets:
        args += ["--set", s]
    return main(args), out


def _publish_times(out: Path) -> list[pd.Timestamp]:
    df = DeltaTable(str(out / "messages")).to_pandas()
    return sorted(pd.Timestamp(t).tz_convert("UTC") for t in df["publish_time"])


def _utc(times: list[str]) -> list[pd.Timestamp]:
    return [pd.Timestamp(t, tz="UTC") for t in times]


@pytest.mark.spark
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("case", "writer", "name", "times", "sets", "expected"), CASES,
                         ids=[c[0] for c in CASES])
def test_timestamp_format_gives_the_documented_publish_times(spark, tmp_path, engine, case,
                                                             writer, name, times, sets,
                                                             expected):
    code, out = _run(tmp_path, engine, writer, name, times, sets)
    assert code == 0
    assert _publish_times(out) == _utc(expected)


@pytest.mark.parametrize(("case", "writer", "name", "times", "sets", "expected"),
                         LOCAL_ONLY_CASES, ids=[c[0] for c in LOCAL_ONLY_CASES])
def test_timestamp_format_locally(tmp_path, case, writer, name, times, sets, expected):
    code, out = _run(tmp_path, "local", writer, name, times, sets)
    assert code == 0
    assert _publish_times(out) == _utc(expected)


def test_auto_says_which_unit_it_guessed_on_the_console_and_in_the_runs_row(tmp_path, capsys):
    code, out = _run(tmp_path, "local", _csv, "log.csv", ["1700000000", "1700000060"], [])
    assert code == 0
    assert ("input: publish_time numbers read as epoch seconds (timestamp_format auto: values "
            "such as 1,700,000,030 have that magnitude)") in capsys.readouterr().out
    counts = json.loads(DeltaTable(str(out / "runs")).to_pandas()["counts"].iloc[0])
    assert counts["publish_time"] == {"timestamp_format": "auto", "epoch_unit": "epoch_s",
                                      "guessed": True}


def test_timestamp_format_replaces_the_presets_own(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "day.csv").write_text(
        "InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country\n"
        "1,A,x,1,15/01/2025 10:00,1.0,7,UK\n")
    code = main(["run", "--input", str(logs), "--output", str(tmp_path / "out"), "--engine",
                 "local", "--preset", "online-retail", "--set",
                 "input.timestamp_format=dd/MM/yyyy HH:mm"])
    assert code == 0
    assert _publish_times(tmp_path / "out") == _utc(["2025-01-15 10:00:00"])


@pytest.mark.spark
@pytest.mark.parametrize("engine", ENGINES)
def test_run_accepting_nothing_exits_1_naming_the_main_reason(spark, tmp_path, capsys, engine):
    code, _ = _run(tmp_path, engine, _csv, "log.csv", ["15/01/2025 10:00:00", "x"],
                   ["input.timestamp_format=epoch_s"])
    assert code == 1
    assert capsys.readouterr().err == (
        "topic-replay: error: no record was accepted: all 2 records were quarantined, 2 of "
        "them as bad_publish_time (see the quarantine table; pass --allow-empty when that is "
        "expected)\n")


def test_allow_empty_makes_a_run_accepting_nothing_succeed(tmp_path):
    code, _ = _run(tmp_path, "local", _csv, "log.csv", ["x"], [], ("--allow-empty",))
    assert code == 0
