"""The Python worker daemon's path fix (pipelines.spark.worker_daemon)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipelines.spark import worker_daemon
from pipelines.spark.session import local_worker_conf, worker_python


@pytest.mark.parametrize(("path", "home", "dropped"), [
    (["/s/python/lib/pyspark.zip", "/s/python/lib/py4j-0.10.9.9-src.zip", "/s/jars/core.jar",
      "/venv/site-packages"], "/s",
     ["/s/python/lib/pyspark.zip", "/s/python/lib/py4j-0.10.9.9-src.zip", "/s/jars/core.jar"]),
    (["/s/python/lib/pyspark.zip", "/user/deps.zip"], "/s/", ["/s/python/lib/pyspark.zip"]),
    (["/spark2/lib/pyspark.zip"], "/s", []),            # a sibling folder is not under /s
    (["/s/python/lib/pyspark.zip"], None, []),          # no SPARK_HOME: nothing is Spark's
    (["/s/python/lib"], "/s", []),                      # folders stay
])
def test_spark_archives_are_the_zips_and_jars_under_spark_home(
        path: list[str], home: str | None, dropped: list[str]) -> None:
    assert worker_daemon.spark_archives(path, home) == dropped


def test_archives_stay_when_pyspark_would_not_be_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_HOME", "/s")
    monkeypatch.setattr(sys, "path", ["/s/python/lib/pyspark.zip"])  # nothing else to import from
    assert worker_daemon.drop_spark_archives() == []
    assert sys.path == ["/s/python/lib/pyspark.zip"]


def test_archives_go_when_pyspark_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_HOME", "/s")
    monkeypatch.setattr(sys, "path", ["/s/python/lib/pyspark.zip", *sys.path])
    assert worker_daemon.drop_spark_archives() == ["/s/python/lib/pyspark.zip"]
    assert "/s/python/lib/pyspark.zip" not in sys.path


@pytest.mark.parametrize(("master", "daemon"), [
    ("local[*]", "pipelines.spark.worker_daemon"),
    ("local[2]", "pipelines.spark.worker_daemon"),
    ("local", "pipelines.spark.worker_daemon"),
    ("spark://host:7077", None),        # a cluster's executors may lack the package at start
    ("yarn", None),
    (None, None),                       # set elsewhere (spark-submit): not known here
])
def test_the_daemon_is_ours_only_on_a_local_master(master: str | None, daemon: str | None) -> None:
    assert local_worker_conf(master).get("spark.python.daemon.module") == daemon


@pytest.mark.parametrize(("conf", "submitted", "python"), [
    ({}, None, sys.executable),                                       # the driver's own
    ({"spark.pyspark.python": "./env/bin/python"}, None, "./env/bin/python"),   # the caller's
    ({}, "./environment/bin/python", "./environment/bin/python"),     # spark-submit --conf
    ({"spark.pyspark.python": "/a/python"}, "/b/python", "/a/python"),  # the caller's first
])
def test_worker_python_is_the_driver_interpreter_unless_one_is_configured(
        conf: dict[str, str], submitted: str | None, python: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")  # an environment's: not a choice
    assert worker_python(conf, submitted) == python


def test_daemon_imports_the_worker_modules_before_it_starts_forking() -> None:
    # a fresh interpreter: the manager (which forks the workers) replaced by a probe that
    # reports which of the preloaded modules are imported when it starts
    code = ("import sys, pyspark.daemon\n"
            "from pipelines.spark import worker_daemon as d\n"
            "before = [m for m in d.PRELOADED if m in sys.modules]\n"
            "pyspark.daemon.manager = lambda: print(before, [m for m in d.PRELOADED "
            "if m in sys.modules])\n"
            "d.main()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == str([]) + " " + str(list(worker_daemon.PRELOADED))
    assert worker_daemon.PRELOADED == ("pipelines.spark.staging_pass",
                                       "pipelines.spark.emulation")
