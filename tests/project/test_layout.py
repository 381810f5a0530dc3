"""The package layout shows the architecture (issue #19): only ``pipelines.spark`` needs pyspark,
and each layer imports only the layers below it. No Spark is started: modules are imported in
subprocesses where pyspark cannot be imported, and imports are read with ``ast``."""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

import jobs.replay

ROOT = Path(__file__).resolve().parents[2]
PIPELINES = ROOT / "pipelines"

BLOCKED = ("pyspark", "py4j", "delta")
"""Top-level packages of Spark (pyspark, its py4j bridge) and of delta-spark (``delta``; not
``deltalake``, which is delta-rs and no Spark)."""

BLOCKER = """
import importlib, json, sys, traceback
class NoSpark:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"no Spark here: {{name}}")
        return None
sys.meta_path.insert(0, NoSpark())
"""
"""Installs, in a fresh interpreter, an import hook that fails every import of a
:data:`BLOCKED` package."""

NO_SPARK = BLOCKER + "importlib.import_module({module!r})\n"
"""A fresh interpreter where every import of a :data:`BLOCKED` package fails, importing
``module``."""

EACH_WITHOUT_SPARK = BLOCKER + """
failed = {{}}
for module in {modules!r}:
    try:
        importlib.import_module(module)
    except Exception:
        failed[module] = traceback.format_exc().strip().splitlines()[-1]
print(json.dumps(failed))
"""
"""One fresh interpreter where every import of a :data:`BLOCKED` package fails, importing each
of ``modules`` in turn and printing ``{module: last line of its error}`` of those that failed
as JSON. A failed import leaves nothing in ``sys.modules``, so a module that imports a failed
one fails too (and is named): the verdicts are those of an interpreter per module, at the cost
of one."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PIPELINES.rglob("*.py"))}
"""Every module of the package (packages as their ``__init__``) → its file."""

SPARK_MODULES = sorted(m for m in MODULES if m.startswith("pipelines.spark."))
APP_SPARK_COMMANDS = {"pipelines.app.replay", "pipelines.app.whatif", "pipelines.app.sql"}
"""The application layer's modules of the commands that run Spark: they import the Spark
runtime (``pipelines.spark``), never pyspark itself."""
OTHER_MODULES = sorted(m for m in MODULES if m != "pipelines.spark"
                       and not m.startswith("pipelines.spark.") and m not in APP_SPARK_COMMANDS)


def _import_without_spark(module: str) -> subprocess.CompletedProcess[str]:
    code = NO_SPARK.format(blocked=BLOCKED, module=module)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def failed_without_spark() -> dict[str, str]:
    """The modules outside ``pipelines.spark`` that fail to import without Spark (all imported
    in one interpreter, :data:`EACH_WITHOUT_SPARK`) → the last line of their error."""
    code = EACH_WITHOUT_SPARK.format(blocked=BLOCKED, modules=OTHER_MODULES)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    failed: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return failed


def test_modules_checked_without_spark_are_every_layer_but_spark() -> None:
    assert {"pipelines.core.dispatch", "pipelines.contract.schemas", "pipelines.ingest.rules",
            "pipelines.storage.delta", "pipelines.storage.staging", "pipelines.engine.stages",
            "pipelines.engine.local", "pipelines.analysis.whatif.scenarios",
            "pipelines.workload.generator"} <= set(OTHER_MODULES)
    assert not [m for m in OTHER_MODULES if m.startswith("pipelines.spark")]
    assert {"pipelines.app.errors", "pipelines.app.inputs", "pipelines.app.outputs",
            "pipelines.app.tables"} <= set(OTHER_MODULES)


@pytest.mark.parametrize("module", OTHER_MODULES)
def test_module_outside_spark_imports_without_pyspark(
        module: str, failed_without_spark: dict[str, str]) -> None:
    assert module not in failed_without_spark, f"{module}: {failed_without_spark[module]}"


def test_the_one_interpreter_check_names_each_module_that_imports_pyspark() -> None:
    modules = ["pipelines.core.dispatch", "pipelines.spark.udfs", "pipelines.contract.schemas",
               "pipelines.spark.session"]
    code = EACH_WITHOUT_SPARK.format(blocked=BLOCKED, modules=modules)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(failed) == ["pipelines.spark.session", "pipelines.spark.udfs"]
    assert all(line.startswith("ImportError: no Spark here: pyspark") for line in failed.values())


@pytest.mark.parametrize("module", ["pipelines.spark.session", "pipelines.spark.udfs"])
def test_the_spark_blocker_makes_a_spark_module_fail_to_import(module: str) -> None:
    done = _import_without_spark(module)
    assert done.returncode != 0
    assert "ImportError: no Spark here: pyspark" in done.stderr


# ---- imports read with ast ---------------------------------------------------------------------


@cache
def _imports(module: str) -> tuple[tuple[str, bool], ...]:
    """Every module ``module`` imports (``from pipelines import x`` as ``pipelines.x``), with
    whether the import is lazy (inside a function); ``TYPE_CHECKING`` imports included."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((a.name, lazy) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module:
                found.extend((f"{child.module}.{a.name}", lazy) for a in child.names)
            visit(child, lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    visit(ast.parse(MODULES[module].read_text(encoding="utf-8")), False)
    return tuple(found)


def _layer(name: str) -> str | None:
    """The layer (``pipelines`` subpackage) ``name`` belongs to; ``None`` outside the package
    (a ``from pipelines.core.layout import SegmentLayout`` reads as ``...layout.SegmentLayout``:
    the layer is its second part either way)."""
    parts = name.split(".")
    return parts[1] if parts[0] == "pipelines" and len(parts) > 1 else None


def _uses_spark(module: str) -> bool:
    return any(name.split(".")[0] in ("pyspark", "py4j") or _layer(name) == "spark"
               for name, _ in _imports(module))


PURE_SPARK_SIDE = {"pipelines.spark.handover", "pipelines.spark.placement",
                   "pipelines.spark.progress", "pipelines.spark.stopwatch"}
"""Modules of ``pipelines.spark`` that import neither pyspark nor another Spark module: what
the emulation operators hand each other (handover), where Spark's hash partitioning puts
their keys (placement), the replay's progress display (progress) and its stage timers
(stopwatch). They live there because only the Spark runtime and the commands that run it use
them."""


@pytest.mark.parametrize("module", sorted(set(SPARK_MODULES) - PURE_SPARK_SIDE))
def test_spark_module_imports_pyspark_or_another_spark_module(module: str) -> None:
    assert _uses_spark(module), f"{module} needs no Spark: move it to the layer it belongs to"


def test_pure_spark_side_modules_are_exactly_those_and_only_spark_modules_import_them() -> None:
    assert {m for m in SPARK_MODULES if not _uses_spark(m)} == PURE_SPARK_SIDE
    users = {m for m in MODULES for name, _ in _imports(m)
             if any(name == p or name.startswith(f"{p}.") for p in PURE_SPARK_SIDE)}
    assert users and all(m.startswith("pipelines.spark.") or m in APP_SPARK_COMMANDS
                         for m in users), sorted(users)


ALLOWED = {
    "core": {"core"},
    "contract": {"core", "contract"},
    "ingest": {"core", "contract", "ingest"},
    "storage": {"core", "contract", "ingest", "storage"},
}
"""The lower layers and what each may import (itself included)."""

FORBIDDEN = {"engine": {"spark", "analysis", "app"}, "analysis": {"spark", "app"},
             "workload": {"spark", "analysis", "app"}, "spark": {"app"}, "app": set()}
"""What the upper layers must not import: ``app`` (the commands) is the top one, below only
``jobs/``, and may import every layer."""

@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m) in ALLOWED | FORBIDDEN))
def test_layer_imports_only_lower_layers(module: str) -> None:
    layer = _layer(module)
    assert layer is not None

    def refused(name: str) -> bool:
        other = _layer(name)
        if other is None:
            return False
        if layer in ALLOWED:
            return other not in ALLOWED[layer]
        return other in FORBIDDEN[layer]

    wrong = [name for name, _ in _imports(module) if refused(name)]
    assert wrong == []


@pytest.mark.parametrize("module", OTHER_MODULES)
def test_module_outside_spark_imports_no_spark_even_inside_a_function(module: str) -> None:
    assert [name for name, _ in _imports(module) if name.split(".")[0] in BLOCKED] == []


APP_MODULES = sorted(m for m in MODULES if m.startswith("pipelines.app."))


@pytest.mark.parametrize("module", APP_MODULES)
def test_app_module_imports_no_spark_package_itself(module: str) -> None:
    assert [name for name, _ in _imports(module) if name.split(".")[0] in BLOCKED] == []


def test_only_the_spark_commands_of_the_app_layer_import_the_spark_runtime() -> None:
    assert {m for m in APP_MODULES if _uses_spark(m)} == APP_SPARK_COMMANDS


def test_app_modules_import_nothing_lazily() -> None:
    assert [(m, name) for m in APP_MODULES for name, lazy in _imports(m) if lazy] == []


ENTRY_POINT = ROOT / "jobs" / "replay.py"


def test_entry_point_imports_of_the_package_only_the_usage_error() -> None:
    tree = ast.parse(ENTRY_POINT.read_text(encoding="utf-8"))
    imported = [f"{n.module}.{a.name}" for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module for a in n.names]
    assert [name for name in imported if name.startswith("pipelines")] == [
        "pipelines.app.errors.UsageError"]


def test_entry_point_dispatches_every_command_to_a_function_of_the_app_layer() -> None:
    sub = next(a for a in jobs.replay._parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    assert set(jobs.replay.COMMANDS) == set(sub.choices)
    for target in jobs.replay.COMMANDS.values():
        module, function = target.split(":")
        assert module in APP_MODULES
        assert any(isinstance(n, ast.FunctionDef) and n.name == function
                   for n in ast.parse(MODULES[module].read_text(encoding="utf-8")).body)
