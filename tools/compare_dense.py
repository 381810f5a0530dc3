"""Check that a replay's tables equal a dense replay's once the idle windows are filled back in.

Issue #30: ``consumer_load`` and ``subscription_stats`` keep only the windows where something
happened or changed (docs/tables.md, "Idle windows"). This compares one run of a new output
with the same run of an output written by the code before (every window, idle or not): every
table row for row (as ``topic-replay diff`` does: multisets, ``runs`` without its wall-clock
columns, ``quarantine`` without ``batch_id``), the windowed ones after
:func:`pipelines.analysis.windows.fill_idle_windows`, one topic at a time (a dense table of a
long log does not fit in memory whole)::

    .venv/bin/python tools/compare_dense.py --dense /tmp/dense --sparse /tmp/sparse \\
        [--run-id default]

Prints one line per table (rows of each side, rows only in one) and exits 1 if any differ.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

import pandas as pd
import pyarrow.dataset as ds
from deltalake import DeltaTable

from pipelines.analysis.diff import diff_frames
from pipelines.analysis.windows import SERIES, fill_idle_windows, window_settings
from pipelines.contract.schemas import table_names
from pipelines.storage.delta import DeltaStore


def _topics(stores: tuple[DeltaStore, DeltaStore], run_id: str) -> list[str]:
    """Every topic of the run (from ``segments``: each topic has one)."""
    found: set[str] = set()
    for store in stores:
        found |= set(store.read("segments", run_id)["topic"])
    return sorted(found)


def _per_topic(store: DeltaStore, table: str, run_id: str,
               topics: list[str]) -> Iterator[tuple[str, pd.DataFrame]]:
    """``table``'s rows of ``run_id``, one topic at a time (empty frames when it is absent)."""
    if not store.exists(table):
        for topic in topics:
            yield topic, store.read(table, run_id)
        return
    data = DeltaTable(store.path(table)).to_pyarrow_dataset()
    for topic in topics:
        rows = data.to_table(filter=(ds.field("run_id") == run_id)
                             & (ds.field("topic") == topic))
        yield topic, rows.to_pandas()


def compare(dense: DeltaStore, sparse: DeltaStore, run_id: str) -> bool:
    """Print the comparison of every table; ``True`` when all are equal."""
    topics = _topics((dense, sparse), run_id)
    grid = window_settings(sparse.read("runs", run_id)["config"].iloc[0])
    same = True
    for table in table_names():
        if table in ("validations", "sweeps"):
            continue
        rows_d = rows_s = only_d = only_s = 0
        if table in SERIES:
            for (topic, d), (_, s) in zip(_per_topic(dense, table, run_id, topics),
                                          _per_topic(sparse, table, run_id, topics),
                                          strict=True):
                diff = diff_frames(table, d, fill_idle_windows(s, table, grid))
                rows_d, rows_s = rows_d + len(d), rows_s + len(s)
                only_d, only_s = only_d + diff.only_a, only_s + diff.only_b
                if not diff.identical:
                    print(f"  {table} {topic}: e.g. dense "
                          f"{diff.sample_a.head(1).to_dict('records')} / filled "
                          f"{diff.sample_b.head(1).to_dict('records')}")
        else:
            d, s = dense.read(table, run_id), sparse.read(table, run_id)
            diff = diff_frames(table, d, s)
            rows_d, rows_s, only_d, only_s = len(d), len(s), diff.only_a, diff.only_b
        ok = only_d == 0 and only_s == 0
        same &= ok
        print(f"{table:<20} dense {rows_d:>12,}  sparse {rows_s:>10,}  only dense {only_d:>6,}  "
              f"only sparse (filled) {only_s:>6,}  {'equal' if ok else 'DIFFER'}")
    return same


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dense", required=True, metavar="DIR",
                        help="output written with every window (the code before issue #30)")
    parser.add_argument("--sparse", required=True, metavar="DIR", help="output to check")
    parser.add_argument("--run-id", default="default")
    args = parser.parse_args(argv)
    ok = compare(DeltaStore(args.dense, engine="delta-rs"),
                 DeltaStore(args.sparse, engine="delta-rs"), args.run_id)
    print("identical once filled" if ok else "tables differ")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
