"""A local ``--output`` that cannot be written is refused in one sentence before any work
(``pipelines.app.outputs.check_local_output``): exit 2, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.replay import main

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"


@pytest.mark.parametrize("output, message", [
    ("afile", "is a file, not a folder"),
    ("afile/out", "cannot be written (no writable folder on its path)"),
])
@pytest.mark.parametrize("engine", ["local", "spark"])
def test_run_refuses_an_output_it_cannot_write_with_exit_2(tmp_path, capsys, output, message,
                                                           engine):
    (tmp_path / "afile").write_text("not a folder")
    argv = ["run", "--input", str(SAMPLE), "--output", str(tmp_path / output),
            "--engine", engine]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--output {tmp_path / output} {message}" in err and "Traceback" not in err
    assert (tmp_path / "afile").read_text() == "not a folder"
