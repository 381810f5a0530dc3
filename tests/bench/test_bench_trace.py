"""The real-trace benchmark's pure helpers (bench/bench_trace.py): the command, row counts,
targets and the printed lines. No timing is asserted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from deltalake import write_deltalake

_BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(_BENCH))
_spec = importlib.util.spec_from_file_location("bench_trace", _BENCH / "bench_trace.py")
assert _spec is not None and _spec.loader is not None
bt: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bt)


def _job(wall: float | None, accepted: int, rows: dict[str, int],
         status: str = "ok") -> dict[str, Any]:
    return {"status": status, "wall_s": wall, "counts": {"accepted": accepted, "quarantined": 0},
            "rows": rows, "engine": "delta-spark", "other_cpu_cores": 0.1,
            "stages_s": {**dict.fromkeys(bt.br.STAGES, 1.0), "other": 2.0, "wall": 90.0}}


def test_the_command_is_the_readmes_example_with_nothing_else() -> None:
    cmd = bt.trace_cmd(Path("topic-replay"), Path("traces/online-retail"), Path("out"))
    assert cmd == ["topic-replay", "run", "--input", "traces/online-retail", "--preset",
                   "online-retail", "--output", "out", "--run-id", "trace-online-retail",
                   "--set", "replay.speed=3600"]


@pytest.mark.parametrize(
    ("wall", "rows", "met"),
    [
        (120.0, 300, [True, True]),
        (121.0, 301, [False, False]),
        (None, 10, [None, None]),
    ],
    ids=["at-the-limits", "over", "not-finished"],
)
def test_targets_judge_the_wall_and_the_rows_per_input_line(wall, rows, met) -> None:
    job = _job(wall, 100, {"messages": rows}, "ok" if wall is not None else "timeout")
    assert [t["met"] for t in bt.evaluate(job)] == met


def test_rows_per_input_line_counts_every_table_of_the_run() -> None:
    job = _job(100.0, 100, {"messages": 100, "entries": 50, "consumer_load": 100})
    assert bt.evaluate(job)[1]["value"] == 2.5


def test_table_rows_count_each_table_and_zero_for_a_missing_one(tmp_path: Path) -> None:
    write_deltalake(str(tmp_path / "messages"), pd.DataFrame({"a": [1, 2, 3]}))
    write_deltalake(str(tmp_path / "messages"), pd.DataFrame({"a": [4]}), mode="append")
    assert bt.table_rows(tmp_path, ("messages", "entries")) == {"messages": 4, "entries": 0}


def test_bookkeeping_tables_are_not_counted_as_output_rows() -> None:
    assert {"runs", "validations", "sweeps"}.isdisjoint(bt.ROW_TABLES)
    assert {"messages", "consumer_load", "quarantine"} <= set(bt.ROW_TABLES)


def test_format_prints_the_stage_split_and_both_targets() -> None:
    doc = {"job": _job(100.0, 100, {"messages": 100, "findings": 0}), "targets": []}
    doc["targets"] = bt.evaluate(doc["job"])
    text = bt.format_trace(doc)
    assert "process 100.0 s, replay 90.0 s" in text
    assert "rows: messages 100" in text and "findings" not in text.split("rows:")[1]
    assert text.count("[MET   ]") == 2


def test_a_missing_traces_folder_is_skipped_with_its_reason(tmp_path: Path, capsys) -> None:
    assert bt.main(["--traces", str(tmp_path), "--data", str(tmp_path / "d"),
                    "--results", str(tmp_path / "r")]) == 0
    assert "online-retail: skipped" in capsys.readouterr().out
