"""``topic-replay sql`` (Spark SQL over an output's tables) and ``topic-replay maintain``."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import pipelines.spark.delta_spark as delta_io
import pipelines.spark.session as spark_session
from jobs.replay import main
from pipelines.spark.sql import format_rows
from pipelines.storage.delta import DeltaStore
from tests.conftest import ENGINES, NO_DELTA_JARS


def _quarantine(run_id: str, reasons: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"run_id": run_id, "source_file": "file:/in/a.json",
                         "raw_record": [f"line {i}" for i in range(len(reasons))],
                         "reason": reasons, "batch_id": 0})


@pytest.fixture
def output(tmp_path):
    """An output with two runs' quarantine rows (two commits) and an empty ``segments``."""
    store = DeltaStore(str(tmp_path), engine="delta-rs")
    store.append("quarantine", _quarantine("r1", ["malformed_record", "missing_topic"]), "a", 0)
    store.append("quarantine", _quarantine("r2", ["malformed_record"]), "b", 0)
    store.ensure_table("segments")
    return str(tmp_path)


@pytest.fixture
def on_engine(request, monkeypatch):
    """Run the command with the given engine: delta-rs by hiding the Delta classes."""
    engine = request.param
    monkeypatch.setattr(delta_io, "AUTO_PICKS_DELTA_SPARK", True)
    monkeypatch.delenv(delta_io.AUTO_ENGINE_ENV, raising=False)
    if engine == "delta-rs":
        monkeypatch.setattr(spark_session, "delta_spark_available", lambda _spark: False)
    return engine


@pytest.mark.spark
@pytest.mark.parametrize("on_engine", ENGINES, indirect=True)
def test_sql_queries_each_table_by_its_name(spark, output, on_engine, capsys):
    code = main(["sql", "--output", output, "SELECT run_id, count(*) AS n FROM quarantine "
                 "GROUP BY run_id ORDER BY run_id"])

    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert [line.split() for line in lines] == [["run_id", "n"], ["r1", "2"], ["r2", "1"],
                                                ["(2", "rows)"]]


@pytest.mark.spark
@pytest.mark.parametrize("on_engine", ENGINES, indirect=True)
def test_sql_on_a_table_without_rows_answers_none(spark, output, on_engine, capsys):
    assert main(["sql", "--output", output, "SELECT count(*) AS n FROM segments"]) == 0
    assert capsys.readouterr().out.split() == ["n", "0", "(1", "row)"]


@pytest.mark.spark
def test_sql_bad_query_exits_2_with_sparks_message(spark, output, capsys):
    assert main(["sql", "--output", output, "SELECT nope FROM quarantine"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("topic-replay: error: query failed: [UNRESOLVED_COLUMN")
    assert "`nope`" in err and len(err.strip().splitlines()) == 1


@pytest.mark.spark
def test_sql_time_travel_reads_an_earlier_version(spark, output, capsys, monkeypatch):
    if not spark_session.delta_jars():
        pytest.skip(NO_DELTA_JARS)
    monkeypatch.setattr(delta_io, "AUTO_PICKS_DELTA_SPARK", True)
    monkeypatch.delenv(delta_io.AUTO_ENGINE_ENV, raising=False)
    assert main(["sql", "--output", output, "--format", "csv",
                 "SELECT count(*) AS n FROM quarantine VERSION AS OF 0"]) == 0
    assert capsys.readouterr().out.splitlines() == ["n", "2"]


@pytest.mark.spark
def test_sql_json_format_and_limit(spark, output, capsys):
    assert main(["sql", "--output", output, "--format", "json", "--limit", "1",
                 "SELECT run_id, raw_record FROM quarantine ORDER BY raw_record, run_id"]) == 0
    captured = capsys.readouterr()
    assert [json.loads(line) for line in captured.out.splitlines()] == [
        {"run_id": "r1", "raw_record": "line 0"}]
    assert "first 1 rows" in captured.err


@pytest.mark.parametrize(("argv", "message"), [
    (["sql", "--output", "/no/such/dir", "SELECT 1"], "output directory /no/such/dir"),
    (["maintain", "--output", "/no/such/dir"], "output directory /no/such/dir"),
])
def test_sql_and_maintain_refuse_a_missing_output(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_maintain_refuses_an_unknown_table(output, capsys):
    assert main(["maintain", "--output", output, "--table", "nope"]) == 2
    assert "unknown table nope" in capsys.readouterr().err


def test_maintain_with_delta_rs_compacts_each_run_and_prints_the_counts(output, capsys):
    assert main(["maintain", "--output", output, "--engine", "delta-rs",
                 "--retain-hours", "0"]) == 0

    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["table", "files_removed", "files_added", "files_vacuumed"]
    # one file per run already: OPTIMIZE has nothing to bin-pack
    assert rows[1:3] == [["segments", "0", "0", "0"], ["quarantine", "0", "0", "0"]]
    assert len(DeltaStore(output, engine="delta-rs").read("quarantine")) == 3


@pytest.mark.parametrize(("fmt", "expected"), [
    ("table", " a      b\n 1 [1, 2]\n(1 row)"),
    ("csv", 'a,b\n1,"[1, 2]"'),
    ("json", '{"a": 1, "b": [1, 2]}'),
])
def test_format_rows(fmt, expected):
    rows = pd.DataFrame({"a": [1], "b": [[1, 2]]})
    assert format_rows(rows, fmt) == expected


def test_format_rows_of_an_empty_result_names_the_columns():
    assert format_rows(pd.DataFrame({"a": [], "b": []}), "table") == "a | b\n(0 rows)"
