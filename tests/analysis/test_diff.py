"""``pipelines.analysis.diff``: per-table multiset row differences between two runs (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from jobs.replay import main
from pipelines.analysis.diff import diff_frames, diff_runs, format_diff, run_ids
from pipelines.storage.delta import DeltaStore


def seg(run: str, rows: list[tuple[int, list[int], str]]) -> pd.DataFrame:
    return pd.DataFrame({"run_id": run, "segment_id": [r[0] for r in rows],
                         "bucket_splits": [r[1] for r in rows], "state": [r[2] for r in rows]})


@pytest.mark.parametrize(
    ("a", "b", "only_a", "only_b"),
    [
        ([(1, [0, 5], "ACTIVE")], [(1, [0, 5], "ACTIVE")], 0, 0),
        ([(1, [0, 5], "ACTIVE")], [(1, [0, 5], "SEALED")], 1, 1),
        ([(1, [0, 5], "ACTIVE")], [(1, [0, 6], "ACTIVE")], 1, 1),
        ([(1, [0], "ACTIVE"), (1, [0], "ACTIVE")], [(1, [0], "ACTIVE")], 1, 0),
        ([], [(2, [0], "ACTIVE")], 0, 1),
        ([(2, [0], "ACTIVE"), (1, [0], "ACTIVE")], [(1, [0], "ACTIVE"), (2, [0], "ACTIVE")], 0, 0),
    ],
    ids=["equal", "changed_value", "changed_list_element", "duplicate_row", "missing_row",
         "row_order_ignored"],
)
def test_rows_only_in_one_run_are_counted_with_multiplicity(a, b, only_a, only_b):
    d = diff_frames("segments", seg("A", a), seg("B", b))
    assert (d.only_a, d.only_b, d.identical) == (only_a, only_b, only_a == only_b == 0)


def test_run_id_is_not_compared():
    d = diff_frames("segments", seg("A", [(1, [0], "ACTIVE")]), seg("B", [(1, [0], "ACTIVE")]))
    assert d.identical


def test_runs_wall_clock_columns_are_not_compared():
    def runs(run: str, start: str, wall: float) -> pd.DataFrame:
        return pd.DataFrame({"run_id": [run], "status": ["finished"], "counts": ['{"a": 1}'],
                             "started_at": [pd.Timestamp(start, tz="UTC")],
                             "ended_at": [pd.Timestamp(start, tz="UTC")],
                             "timings": [f'{{"wall_s": {wall}}}']})
    d = diff_frames("runs", runs("A", "2026-01-01", 1.0), runs("B", "2026-02-01", 9.0))
    assert d.identical


def test_quarantine_batch_id_is_not_compared():
    def q(run: str, batch: int) -> pd.DataFrame:
        return pd.DataFrame({"run_id": [run], "source_file": ["f"], "raw_record": ["x"],
                             "reason": ["malformed_record"], "batch_id": [batch]})
    assert diff_frames("quarantine", q("A", 0), q("B", 3)).identical


def test_null_equals_null():
    a = pd.DataFrame({"run_id": ["A"], "key": [None], "x": [float("nan")]})
    b = pd.DataFrame({"run_id": ["B"], "key": [None], "x": [float("nan")]})
    assert diff_frames("messages", a, b).identical


def test_sample_holds_the_differing_rows_without_run_id():
    d = diff_frames("segments", seg("A", [(1, [0], "ACTIVE"), (2, [0], "ACTIVE")]),
                    seg("B", [(1, [0], "ACTIVE")]))
    assert d.sample_a.to_dict("records") == [{"segment_id": 2, "bucket_splits": (0,),
                                              "state": "ACTIVE"}]
    assert d.sample_b.empty


def _store(tmp_path: Path) -> DeltaStore:
    store = DeltaStore(str(tmp_path / "out"), engine="delta-rs")
    q = pd.DataFrame({"source_file": ["f", "f"], "raw_record": ["x", "y"],
                      "reason": ["malformed_record", "late"], "batch_id": [0, 0]})
    store.append("quarantine", q.assign(run_id="a"), app_id="t:a", version=0)
    store.append("quarantine", q.assign(run_id="b"), app_id="t:b", version=0)
    store.append("quarantine", q.head(1).assign(run_id="c"), app_id="t:c", version=0)
    return store


def test_diff_runs_reads_each_table_of_both_runs(tmp_path):
    store = _store(tmp_path)
    diffs = {d.table: d for d in diff_runs(store, "a", "c", tables=["quarantine", "segments"])}
    assert (diffs["quarantine"].rows_a, diffs["quarantine"].rows_b,
            diffs["quarantine"].only_a, diffs["quarantine"].only_b) == (2, 1, 1, 0)
    assert diffs["segments"].identical  # absent table: empty in both runs


def test_run_ids_lists_runs_from_the_delta_log(tmp_path):
    assert run_ids(_store(tmp_path)) == {"a", "b", "c"}


def test_format_diff_lists_every_table_and_the_verdict(tmp_path):
    store = _store(tmp_path)
    text = format_diff(diff_runs(store, "a", "c", tables=["quarantine"]), "a", "c")
    lines = text.splitlines()
    assert lines[2].split() == ["quarantine", "2", "1", "1", "0", "differs"]
    assert lines[-1] == "1 table(s) differ"
    assert "raw_record=y" in text


@pytest.mark.parametrize(("run_b", "code"), [("b", 0), ("c", 1)],
                         ids=["identical_exit_0", "different_exit_1"])
def test_diff_command_exit_code_says_whether_runs_differ(tmp_path, capsys, run_b, code):
    _store(tmp_path)
    assert main(["diff", "--output", str(tmp_path / "out"), "--run-id", "a", "--run-id", run_b,
                 "--table", "quarantine"]) == code
    assert capsys.readouterr().out.splitlines()[-1] == ("identical" if code == 0
                                                       else "1 table(s) differ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--run-id", "a"], "diff needs exactly two --run-id"),
        (["--run-id", "a", "--run-id", "zz"], "run zz has no rows in"),
        (["--run-id", "a", "--run-id", "b", "--table", "nope"], "unknown table nope"),
    ],
    ids=["one_run", "unknown_run", "unknown_table"],
)
def test_diff_command_usage_error_is_one_sentence_exit_2(tmp_path, capsys, args, message):
    _store(tmp_path)
    assert main(["diff", "--output", str(tmp_path / "out"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
