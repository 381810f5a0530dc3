"""Output checks of the commands, before any Spark work: the output exists, holds the runs
asked for, may take a run (its identity, ``pipelines.storage.output_identity``), the table
names are the contract's, an ``--html`` target is a file and ``--png-dir`` a folder, both
writable. Each a :class:`UsageError` in one
sentence."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from pipelines.app.errors import UsageError
from pipelines.contract.config import ReplayConfig
from pipelines.contract.schemas import table_names
from pipelines.storage.delta import DeltaStore
from pipelines.storage.fs import StorageError, is_dir, is_remote
from pipelines.storage.output_identity import (
    OutputConflictError,
    check_output,
    check_output_path,
    check_sweep_output,
)


def require_output(output: str) -> None:
    """``UsageError`` when the output directory (or object-store prefix) does not exist."""
    try:
        found = is_dir(output)
    except (StorageError, OSError) as exc:  # an unsupported scheme, an unreachable store
        raise UsageError(f"output {output} cannot be read: {exc}") from None
    if not found:
        raise UsageError(f"output directory {output} does not exist")


def require_tables(tables: Sequence[str] | None) -> None:
    """``UsageError`` naming any of ``tables`` that is not an output table."""
    unknown = [t for t in tables or [] if t not in table_names()]
    if unknown:
        raise UsageError(f"unknown table {', '.join(unknown)}; tables: "
                         f"{', '.join(table_names())}")


def finished_runs(output: str, wanted: Sequence[str]) -> tuple[DeltaStore, list[str]]:
    """The output's store (delta-rs) and the ``wanted`` run ids, each once (default: the last
    finished run), checked against its ``runs`` table; ``UsageError`` when the output, or a run
    in it, does not exist."""
    require_output(output)
    store = DeltaStore(output, engine="delta-rs")
    runs = store.read("runs")
    if runs.empty:
        raise UsageError(f"{output} holds no finished run")
    present = set(runs["run_id"])
    chosen = list(dict.fromkeys(w for w in wanted if w)) or [str(runs["run_id"].iloc[-1])]
    for run_id in chosen:
        if run_id not in present:
            raise UsageError(f"run {run_id} is not in {output}; runs: "
                             f"{', '.join(sorted(present))}")
    return store, chosen


def check_html_target(html: str | None) -> None:
    """``UsageError`` when ``--html`` names a directory, or a file that cannot be created
    (:func:`check_creatable`)."""
    if html and Path(html).is_dir():
        raise UsageError(f"--html {html} is a directory; give a file name")
    if html:
        check_creatable(html, "--html")


def check_png_dir(png_dir: str | None) -> None:
    """``UsageError`` when ``--png-dir`` names a file, or a folder that cannot be created or
    written (:func:`check_creatable`)."""
    if png_dir and Path(png_dir).exists() and not Path(png_dir).is_dir():
        raise UsageError(f"--png-dir {png_dir} is a file, not a folder")
    if png_dir:
        check_creatable(png_dir, "--png-dir")


def check_creatable(path: str, flag: str) -> None:
    """``UsageError`` when ``path`` (a local file or folder a command will write, its missing
    parents created) cannot be: its nearest existing ancestor is not a writable folder. Checks
    only, creates nothing."""
    p = Path(path).absolute()
    if p.exists():
        ok = os.access(p if p.is_dir() else p.parent, os.W_OK)
    else:
        ancestor = next(a for a in p.parents if a.exists())
        ok = ancestor.is_dir() and os.access(ancestor, os.W_OK | os.X_OK)
    if not ok:
        raise UsageError(f"{flag} {path} cannot be written (no writable folder on its path)")


def check_output_location(output: str) -> None:
    """``UsageError`` when ``output`` is no location the replay can write
    (``check_output_path``)."""
    try:
        check_output_path(output)
    except OutputConflictError as exc:
        raise UsageError(str(exc)) from None
    check_local_output(output)


def check_local_output(output: str) -> None:
    """``UsageError`` when a local ``output`` is a file, or a folder that cannot be created or
    written (:func:`check_creatable`); an object store's location is checked by reading it."""
    if is_remote(output):
        return
    if Path(output).is_file():
        raise UsageError(f"--output {output} is a file, not a folder")
    check_creatable(output, "--output")


def check_run_output(output: str, run_id: str, cfg: ReplayConfig, preset: str) -> None:
    """``UsageError`` when ``output`` holds run ``run_id`` written by another version or
    config, cannot be read (an unreachable object store), or is a local path that cannot be
    written (:func:`check_local_output`)."""
    check_local_output(output)
    try:
        check_output(output, run_id, cfg, preset)
    except OutputConflictError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # an object store that cannot be reached or read
        raise UsageError(f"output {output} cannot be read: {exc}") from None


def check_sweep_run_output(output: str, sweep_id: str, cfg: ReplayConfig, preset: str,
                           scenarios: Mapping[str, ReplayConfig]) -> None:
    """``UsageError`` when the output holds the sweep's work folder (``sweep.<sweep_id>``) or
    any scenario's run (``scenarios``: run_id → config) under another config or inputs, or is
    a local path that cannot be written (:func:`check_local_output`)."""
    check_local_output(output)
    try:
        check_sweep_output(output, f"sweep.{sweep_id}", cfg, preset, scenarios)
    except OutputConflictError as exc:
        raise UsageError(str(exc)) from None
