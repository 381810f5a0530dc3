"""A local ``--output`` that cannot be written is refused in one sentence before any work
(``pipelines.app.targets.check_local_output``): exit 2, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.replay import main

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {
    "run (local engine)": ["run", "--input", str(ROOT / "data" / "sample"), "--engine", "local"],
    "run (Spark)": ["run", "--input", str(ROOT / "data" / "sample"), "--engine", "spark"],
    "generate": ["generate", "--spec", str(ROOT / "bench" / "workload.yaml")],
    # checked before the client connects: nothing listens on port 1
    "capture": ["capture", "--service-url", "pulsar://127.0.0.1:1", "--topic", "t"],
}


@pytest.mark.parametrize("output, message", [
    ("afile", "is a file, not a folder"),
    ("afile/out", "cannot be written (no writable folder on its path)"),
])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_refuses_an_output_it_cannot_write_with_exit_2(tmp_path, capsys, command,
                                                                 output, message):
    (tmp_path / "afile").write_text("not a folder")
    assert main([*COMMANDS[command], "--output", str(tmp_path / output)]) == 2
    err = capsys.readouterr().err
    assert f"--output {tmp_path / output} {message}" in err and "Traceback" not in err
    assert (tmp_path / "afile").read_text() == "not a folder"
