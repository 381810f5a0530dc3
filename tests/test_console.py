"""A quiet console (issue #19): Spark's own log goes to DIR/_work/spark.log unless --verbose or
``console.spark_log: true``; the console key is not part of a run's identity."""

from __future__ import annotations

import argparse

import pytest

from jobs.replay import _parser
from pipelines.app.spark_options import spark_log as _spark_log
from pipelines.contract.config import load_config, run_identity


@pytest.mark.parametrize("argv, sets, expected", [
    ([], [], "out/x/_work/spark.log"),
    (["--verbose"], [], None),
    ([], ["console.spark_log=true"], None),
    (["--verbose"], ["console.spark_log=false"], None),
])
def test_spark_log_goes_to_a_file_unless_asked_for(argv, sets, expected):
    args: argparse.Namespace = _parser().parse_args(
        ["run", "--input", "in", "--output", "out/x", *argv])
    cfg = load_config(None, sets)
    assert _spark_log(args, cfg.console.spark_log) == expected


def test_console_section_is_not_part_of_a_runs_identity():
    quiet, loud = (load_config(None, [f"console.spark_log={v}"]).to_dict()
                   for v in ("false", "true"))
    assert quiet != loud
    assert run_identity(quiet) == run_identity(loud)
