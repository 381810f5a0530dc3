"""The Spark options' command-line checks: ``--master`` combined with ``--remote`` /
``SPARK_REMOTE``, and ``--remote`` with ``run --engine local`` (Spark Connect, issue #21), and
``--shuffle-partitions`` below 1 are refused with one sentence and exit 2 before Spark starts.
The replay through a Spark Connect server is tested in
``tests/guarantees/test_spark_connect.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import pipelines.spark.command_session
import pipelines.spark.session
from jobs.replay import main


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the command starts Spark (errors must come before it)."""
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("Spark was started")

    # where the commands call it (command_session imports it by name: patching only the
    # session module would leave it bound there, or bind the refusal for good when
    # command_session is first imported under the patch)
    monkeypatch.setattr(pipelines.spark.session, "build_session", refuse)
    monkeypatch.setattr(pipelines.spark.command_session, "build_session", refuse)


def _cli(tmp_path: Path, command: str, *extra: str) -> int:
    log = tmp_path / "log.json"
    log.write_text('{"topic": "t", "publish_time": 0, "payload_size": 1}\n')
    args = ([command, "--output", str(tmp_path / "out"), "SELECT 1"] if command == "sql" else
            [command, "--input", str(log), "--output", str(tmp_path / "out")])
    if command == "compare":
        args += ["--scenario", "a=batching.mode=key_based"]
    return main([*args, *extra])


@pytest.mark.parametrize(
    ("command", "extra", "env", "expected"),
    [
        ("run", ["--master", "local[1]", "--remote", "sc://h:15002"], None,
         "--master local[1] cannot be combined with --remote sc://h:15002"),
        ("stream", ["--master", "local[1]"], "sc://h:15002",
         "--master local[1] cannot be combined with SPARK_REMOTE=sc://h:15002"),
        ("compare", ["--master", "local[1]", "--remote", "sc://h:1"], None,
         "--master local[1] cannot be combined with --remote sc://h:1"),
        ("sql", ["--master", "local[1]", "--remote", "sc://h:1"], None,
         "--master local[1] cannot be combined with --remote sc://h:1"),
        ("run", ["--engine", "local", "--remote", "sc://h:1"], None,
         "--engine local runs without Spark; drop --remote sc://h:1 or use --engine spark"),
    ],
    ids=["run_master_remote", "stream_master_env", "compare_master_remote", "sql_master_remote",
         "local_engine_remote"],
)
def test_spark_connect_misuse_is_refused_in_one_sentence_before_spark(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        no_spark: None, command: str, extra: list[str], env: str | None,
        expected: str) -> None:
    if env is None:
        monkeypatch.delenv("SPARK_REMOTE", raising=False)
    else:
        monkeypatch.setenv("SPARK_REMOTE", env)
    code = _cli(tmp_path, command, *extra)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"topic-replay: error: {expected}")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_spark_remote_does_not_concern_the_local_engine(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, no_spark: None) -> None:
    monkeypatch.setenv("SPARK_REMOTE", "sc://h:15002")
    assert _cli(tmp_path, "run", "--engine", "local", "--run-id", "r1") == 0
    assert "run r1: finished" in capsys.readouterr().out


@pytest.mark.parametrize(("command", "partitions"),
                         [("run", "0"), ("stream", "-3"), ("compare", "0")])
def test_shuffle_partitions_below_one_are_refused_in_one_sentence_before_spark(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        no_spark: None, command: str, partitions: str) -> None:
    # Spark fails the first query with 0 partitions, and pyspark 4.1.1 then loops while
    # converting the error: the run hung instead of failing.
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    code = _cli(tmp_path, command, "--shuffle-partitions", partitions)
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"topic-replay: error: --shuffle-partitions must be >= 1, got {partitions}\n"
