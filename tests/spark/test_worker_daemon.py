"""The Python worker daemon's path fix (pipelines.spark.worker_daemon)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
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


SPARK_HOME = Path(pyspark.__file__).parent
ZIPS = [str(p) for p in sorted((SPARK_HOME / "python" / "lib").glob("*.zip"))]
ROOT = Path(__file__).resolve().parents[2]


def worker_imports(site_dir: Path | None, zips: list[str]) -> list[str]:
    """Where a fresh interpreter imports pyspark and py4j from, started as Spark starts a worker
    without the daemon (``zips`` first on PYTHONPATH), with site-packages on its path but none of
    its ``.pth`` files (``-S``: this venv's own hook stays out), then ``site_dir``'s."""
    code = (f"import site, sys; sys.path += [{str(SPARK_HOME.parent)!r}, {str(ROOT)!r}]; "
            + (f"site.addsitedir({str(site_dir)!r}); " if site_dir else "")
            + "import pyspark, py4j; print(pyspark.__file__, py4j.__file__)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(zips), "SPARK_HOME": str(SPARK_HOME)}
    return subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True,
                          text=True, check=True).stdout.split()


@pytest.mark.skipif(not ZIPS, reason="this pyspark ships no python/lib zips")
@pytest.mark.parametrize(("with_hook", "from_zip"), [(False, True), (True, False)])
def test_the_startup_hook_makes_a_worker_spark_starts_import_pyspark_from_site_packages(
        tmp_path: Path, with_hook: bool, from_zip: bool) -> None:
    if with_hook:
        hook = worker_daemon.install_startup_hook(tmp_path)
        assert hook.read_text() == worker_daemon.STARTUP_LINE
    got = worker_imports(tmp_path if with_hook else None, ZIPS)
    assert [".zip" in f for f in got] == [from_zip] * 2


def test_the_startup_hook_loads_nothing_without_spark_archives(tmp_path: Path) -> None:
    worker_daemon.install_startup_hook(tmp_path)
    code = (f"import site, sys; site.addsitedir({str(tmp_path)!r}); "
            "print('pipelines.spark.worker_daemon' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "False"
