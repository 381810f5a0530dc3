"""The one table-commit path of a replay: each run's rows or files committed to a table,
idempotently, by plain runs and sweeps alike.

Every commit is keyed by the app transaction ``(run, table)`` and a version: a micro-batch's
id, or from :data:`FINAL_VERSION` on, an end-of-input finalization's
(``pipelines.storage.delta``, "Idempotent micro-batch commits"), so a re-run skips what the
table holds. A plain replay writes one run; a sweep writes each scenario's run from one ingest:
every method takes one entry per run (run_id → rows or folder), so both go through the same
loop, one commit per run and table.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import pandas as pd

from pipelines.contract.schemas import arrow_schema
from pipelines.storage import fs as storage
from pipelines.storage.delta import DeltaStore, table_app_id
from pipelines.storage.faults import fault

FINAL_VERSION = 1 << 40
"""Versions from here on are end-of-input finalizations (above any micro-batch id), named
``final`` in fault points; the local engine commits with this version too."""


def version_name(version: int) -> str:
    """A commit version as fault points name it: the micro-batch id, or ``final``."""
    return "final" if int(version) >= FINAL_VERSION else str(int(version))


def _no_timer(_stage: str) -> AbstractContextManager[None]:
    return nullcontext()


@dataclass
class TableCommits:
    """Commits to the configured ``tables`` of ``store`` (other tables are skipped), each timed
    as the ``delta_write`` stage by ``timed`` (``Stopwatch.timed``)."""

    store: DeltaStore
    tables: Collection[str]
    timed: Callable[[str], AbstractContextManager[None]] = field(default=_no_timer)

    def rows(self, table: str, frames: Mapping[str, pd.DataFrame], version: int,
             replace: bool = False) -> None:
        """Append each run's driver-side rows (``frames``: run_id → rows; the control plane's
        small tables, ``runs``) to ``table``, or replace each run's rows (``replace``: snapshot
        tables, ``segments``, ``runs``); columns that are not the table's are dropped, an empty
        frame commits nothing."""
        if table not in self.tables:
            return
        keep = arrow_schema(table).names
        for run_id, data in frames.items():
            if data.empty:
                continue
            data = data[[c for c in keep if c in data.columns]].assign(run_id=run_id)
            app_id = table_app_id(run_id, table)
            with self.timed("delta_write"):
                if replace:
                    self.store.replace_run(table, data, run_id, app_id=app_id, version=version)
                else:
                    self.store.append(table, data, app_id=app_id, version=version)
            fault(f"after_write:{table}:{version_name(version)}")

    def files(self, table: str, folders: Mapping[str, str], version: int) -> None:
        """Append each run's Parquet files (``folders``: run_id → folder; a missing folder
        commits nothing) to ``table``, the files adopted as they are
        (:meth:`DeltaStore.append_parquet`: they are moved into the table)."""
        if table not in self.tables:
            return
        for run_id, path in folders.items():
            if not storage.is_dir(path):
                continue
            with self.timed("delta_write"):
                self.store.append_parquet(table, path, app_id=table_app_id(run_id, table),
                                          version=version, constants={"run_id": run_id})
            fault(f"after_write:{table}:{version_name(version)}")

    def shared_files(self, table: str, path: str, run_ids: Collection[str],
                     version: int) -> None:
        """Commit the one folder ``path`` (a micro-batch's quarantine, the same for every run
        of a sweep) to each run's rows of ``table``: committing moves the files, so every run
        but the last gets a copy (removed after its commit)."""
        if table not in self.tables:
            return
        *others, last = run_ids
        copies = {r: f"{path}.{r}" for r in others}
        for copy in copies.values():
            storage.copy_dir(path, copy)
        self.files(table, {**copies, last: path}, version)
        for copy in copies.values():
            storage.delete_dir(copy)
