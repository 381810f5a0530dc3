"""Output checks of the commands, before any Spark work: the output exists, holds the runs
asked for, may take a run (its identity, ``pipelines.storage.output_identity``), the table
names are the contract's. Each a :class:`UsageError` in one sentence (local files and folders a
command writes: :mod:`pipelines.app.targets`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipelines.app.errors import UsageError
from pipelines.app.targets import check_local_output
from pipelines.contract.config import ReplayConfig
from pipelines.contract.schemas import table_names
from pipelines.storage.delta import DeltaStore
from pipelines.storage.fs import StorageError, is_dir
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


def check_output_location(output: str) -> None:
    """``UsageError`` when ``output`` is no location the replay can write
    (``check_output_path``)."""
    try:
        check_output_path(output)
    except OutputConflictError as exc:
        raise UsageError(str(exc)) from None
    check_local_output(output)


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
