"""Row differences between two runs' output tables (``topic-replay diff``).

Two replays of the same log under the same config must give identical tables
(docs/design.md invariant 5); two scenarios (different policies) give tables whose differences
are the answer. Per table, :func:`diff_runs` counts the rows only in run A and only in run B,
as *multisets*: a row present twice in A and once in B is one row only in A, so duplicates are
differences too.

Compared columns: every column of the table except those in :data:`IGNORED_COLUMNS` — the
``run_id`` itself, the wall-clock columns of ``runs`` (``started_at``, ``ended_at``,
``timings``) and the micro-batch that read a quarantined record (``quarantine.batch_id``:
processing lineage, which depends on how the input was chunked, not a result). Values compare
exactly (floats bit for bit, nulls equal nulls, lists element by element).

Pure pandas over :meth:`pipelines.storage.delta.DeltaStore.read`; no Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from deltalake import DeltaTable

from pipelines.contract.schemas import table_names
from pipelines.storage.delta import DeltaStore

IGNORED_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "*": ("run_id",),
    "runs": ("started_at", "ended_at", "timings"),
    "quarantine": ("batch_id",),
}
"""Columns left out of the comparison, per table (``"*"``: every table)."""

_COUNT = "__tr_occurrence"


@dataclass(frozen=True)
class TableDiff:
    """The difference of one table between runs A and B.

    ``rows_a`` / ``rows_b``: rows of each run; ``only_a`` / ``only_b``: rows (counted with
    multiplicity) in one run and not the other; ``sample_a`` / ``sample_b``: up to ``sample``
    of those rows (compared columns only, sorted), for display.
    """

    table: str
    rows_a: int
    rows_b: int
    only_a: int
    only_b: int
    sample_a: pd.DataFrame
    sample_b: pd.DataFrame

    @property
    def identical(self) -> bool:
        return self.only_a == 0 and self.only_b == 0


def compared_columns(table: str, columns: Sequence[str]) -> list[str]:
    """``columns`` without the :data:`IGNORED_COLUMNS` of ``table`` (order kept)."""
    ignored = set(IGNORED_COLUMNS["*"]) | set(IGNORED_COLUMNS.get(table, ()))
    return [c for c in columns if c not in ignored]


def _hashable(value: Any) -> Any:
    if isinstance(value, list | tuple | np.ndarray):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _canonical(table: str, df: pd.DataFrame) -> pd.DataFrame:
    """Compared columns, nested values as tuples, plus the occurrence number of each row among
    its identical rows (so an outer merge pairs duplicates one to one)."""
    cols = compared_columns(table, list(df.columns))
    out = df[cols].copy()
    for c in cols:
        if out[c].dtype == object:
            out[c] = out[c].map(_hashable)
    if cols and len(out):
        out[_COUNT] = out.groupby(cols, dropna=False, sort=False).cumcount()
    else:
        out[_COUNT] = np.zeros(len(out), dtype=np.int64)
    return out.reset_index(drop=True)


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    try:
        return df.sort_values(list(df.columns), na_position="first").reset_index(drop=True)
    except TypeError:  # mixed types in a column: keep the order found
        return df.reset_index(drop=True)


def diff_frames(table: str, a: pd.DataFrame, b: pd.DataFrame, sample: int = 5) -> TableDiff:
    """Multiset row difference of two frames of ``table`` (same columns, as read from Delta).

    ``ValueError`` when the compared columns differ (the tables have different schemas).
    """
    ca, cb = _canonical(table, a), _canonical(table, b)
    if list(ca.columns) != list(cb.columns):
        raise ValueError(f"{table}: the runs have different columns "
                         f"({', '.join(ca.columns)} vs {', '.join(cb.columns)})")
    if ca.empty or cb.empty:  # nothing to pair (and no dtype clash of empty vs nullable)
        only_a, only_b = ca.drop(columns=[_COUNT]), cb.drop(columns=[_COUNT])
    else:
        merged = ca.merge(cb, how="outer", on=list(ca.columns), indicator=True)
        only_a = merged[merged["_merge"] == "left_only"].drop(columns=["_merge", _COUNT])
        only_b = merged[merged["_merge"] == "right_only"].drop(columns=["_merge", _COUNT])
    return TableDiff(table, len(a), len(b), len(only_a), len(only_b),
                     _sorted(only_a).head(sample), _sorted(only_b).head(sample))


def diff_runs(store: DeltaStore, run_a: str, run_b: str, tables: Sequence[str] | None = None,
              sample: int = 5, store_b: DeltaStore | None = None) -> list[TableDiff]:
    """:func:`diff_frames` of every table (default: all of
    :func:`pipelines.contract.schemas.table_names`; a table that does not exist compares as
    empty) between ``run_a`` in ``store`` and ``run_b`` in ``store_b`` (default: the same
    store)."""
    other = store_b if store_b is not None else store
    return [diff_frames(t, store.read(t, run_id=run_a), other.read(t, run_id=run_b), sample)
            for t in (tables if tables is not None else table_names())]


def run_ids(store: DeltaStore) -> set[str]:
    """Every ``run_id`` with rows in some table of ``store`` (from the Delta logs' partition
    values; no data files are read)."""
    found: set[str] = set()
    for t in table_names():
        if not store.exists(t):
            continue
        actions = DeltaTable(store.path(t), storage_options=store.storage_options) \
            .get_add_actions(flatten=True)
        found |= {r for r in actions.column("partition.run_id").to_pylist() if r is not None}
    return found


def format_diff(diffs: Sequence[TableDiff], run_a: str, run_b: str,
                max_width: int = 160) -> str:
    """A small text table (one line per table) followed by sample rows of each differing table.
    """
    name_w = max([len("table"), *(len(d.table) for d in diffs)])
    head = (f"{'table':<{name_w}}  {'rows A':>10}  {'rows B':>10}  {'only A':>8}  "
            f"{'only B':>8}")
    lines = [f"A = {run_a}, B = {run_b}", head]
    for d in diffs:
        mark = "" if d.identical else "  differs"
        lines.append(f"{d.table:<{name_w}}  {d.rows_a:>10,}  {d.rows_b:>10,}  {d.only_a:>8,}  "
                     f"{d.only_b:>8,}{mark}")
    for d in diffs:
        for label, n, rows in (("A", d.only_a, d.sample_a), ("B", d.only_b, d.sample_b)):
            if not n:
                continue
            lines.append(f"{d.table}: {n:,} row(s) only in {label}, e.g.")
            for rec in rows.to_dict("records"):
                text = ", ".join(f"{k}={v}" for k, v in rec.items())
                lines.append("  " + (text if len(text) <= max_width
                                     else text[: max_width - 1] + "…"))
    n_diff = sum(not d.identical for d in diffs)
    lines.append("identical" if n_diff == 0 else f"{n_diff} table(s) differ")
    return "\n".join(lines)
