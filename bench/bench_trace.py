"""A real trace with default settings (issue #30), part of ``make bench``.

Run from the project root::

    .venv/bin/python bench/bench_trace.py [--traces ../shared/traces] [--data bench/.data]
                                          [--results bench/results]

Replays the online-retail trace (541,909 lines, 38 topics, a year; ``SOURCE.md`` in its folder)
as the README's first real example does, with nothing but the preset and the speed::

    topic-replay run --input ../shared/traces/online-retail --preset online-retail \\
        --output DIR --set replay.speed=3600

as a subprocess sampled like ``bench/bench_replay.py`` (default engine), and prints its process
wall, the stage split from its ``runs`` row, and the rows it wrote against the input's lines.
Targets: process wall ≤ :data:`WALL_LIMIT_S` on this machine (2 cores, idle), output rows
≤ :data:`ROWS_LIMIT` × input lines. Writes ``bench/results/<YYYY-MM-DD>-trace.json``. Skipped,
with the reason, when the traces folder is missing (it is not part of the repository).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_replay as br  # noqa: E402 - found through the sys.path entry above

from pipelines.contract.config import OUTPUT_TABLES  # noqa: E402 - as above

TRACE = "online-retail"
RUN_ID = "trace-online-retail"
SETS = ("replay.speed=3600",)
"""The README's example: the preset, a year in about 2.4 emulated hours, nothing else."""
WALL_LIMIT_S = 120.0
ROWS_LIMIT = 3.0
ROW_TABLES = tuple(t for t in OUTPUT_TABLES if t not in ("runs", "validations", "sweeps"))
"""Tables whose rows are counted against the input's lines (not the run's bookkeeping)."""


def trace_cmd(cli: Path, trace: Path, out: Path) -> list[str]:
    """The replay command of the trace (see the module)."""
    cmd = [str(cli), "run", "--input", str(trace), "--preset", TRACE, "--output", str(out),
           "--run-id", RUN_ID]
    for kv in SETS:
        cmd += ["--set", kv]
    return cmd


def table_rows(output: Path, tables: Sequence[str] = ROW_TABLES) -> dict[str, int]:
    """Rows of each of ``tables`` under ``output`` (delta-rs; a missing table counts 0)."""
    rows = {}
    for t in tables:
        path = output / t
        rows[t] = (int(pc.sum(pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
                              ["num_records"]).as_py() or 0)
                   if (path / "_delta_log").is_dir() else 0)
    return rows


def evaluate(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The two targets of the trace: ``{target, value, limit, met}`` (``met`` ``None`` when
    the replay did not finish)."""
    wall = br.ok_wall_s(job)
    counts = job.get("counts") or {}
    lines = (counts.get("accepted") or 0) + (counts.get("quarantined") or 0)
    rows = sum((job.get("rows") or {}).values())
    ratio = round(rows / lines, 3) if wall is not None and lines else None
    return [
        {"target": f"{TRACE}, default settings: process wall <= {WALL_LIMIT_S:g} s",
         "value": wall, "limit": WALL_LIMIT_S,
         "met": None if wall is None else wall <= WALL_LIMIT_S},
        {"target": f"{TRACE}: output rows <= {ROWS_LIMIT:g}x input lines", "value": ratio,
         "limit": ROWS_LIMIT, "met": None if ratio is None else ratio <= ROWS_LIMIT},
    ]


def format_trace(doc: Mapping[str, Any]) -> str:
    """Readable lines of a results document (see :func:`main`)."""
    job = doc["job"]
    if job.get("status") != "ok":
        return f"{TRACE}: {job.get('status')}"
    st = job.get("stages_s") or {}
    lines = [f"{TRACE} with default settings ({job.get('engine', 'n/a')}): process "
             f"{br.fmt_value(br.ok_wall_s(job))} s, replay {br.fmt_value(st.get('wall'))} s, "
             f"other cores {br.fmt_value(job.get('other_cpu_cores'), '.2f')}",
             "  " + ", ".join(f"{br.STAGE_LABELS[k]} {br.fmt_value(st.get(k))} s"
                              for k in br.STAGES)
             + f", other {br.fmt_value(st.get('other'))} s",
             "  rows: " + ", ".join(f"{t} {n:,}" for t, n in (job.get("rows") or {}).items()
                                    if n)]
    for t in doc["targets"]:
        mark = {True: "MET   ", False: "MISSED", None: "n/a   "}[t["met"]]
        lines.append(f"  [{mark}] {t['target']}: {br.fmt_value(t['value'], '.2f')}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces",
                        help="folder of the shared traces (default ../shared/traces)")
    parser.add_argument("--data", type=Path, default=Path(os.environ.get(
        "BENCH_DATA", ROOT / "bench" / ".data")), help="scratch folder for the output")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    trace = args.traces / TRACE
    if not trace.is_dir():
        print(f"{TRACE}: skipped ({trace} is missing; the traces sit beside the repository "
              f"in ../shared/traces)")
        return 0
    cli = Path(sys.executable).parent / "topic-replay"
    out = args.data / f"trace-{TRACE}"
    shutil.rmtree(out, ignore_errors=True)
    print(f"[{TRACE}] Spark replay, default settings ...", flush=True)
    job = br.run_measured(trace_cmd(cli, trace, out), args.data / "logs" / f"trace-{TRACE}.log",
                          env=br.DEFAULT_ENGINE_ENV)
    if job["status"] == "ok":
        job["engine"] = br.read_engine(out, RUN_ID)
        job["stages_s"] = br.read_stage_timings(out, RUN_ID)
        job["counts"] = br.read_counts(out, RUN_ID)
        job["rows"] = table_rows(out)
    doc = {"benchmark": f"{TRACE} with default settings (issue #30)",
           "machine": {**br.machine_info(),
                       "loadavg_end": [round(x, 2) for x in os.getloadavg()]},
           "command": " ".join(trace_cmd(Path("topic-replay"), trace, Path("DIR"))),
           "job": job, "targets": evaluate(job)}
    args.results.mkdir(parents=True, exist_ok=True)
    path = args.results / f"{datetime.now(UTC):%Y-%m-%d}-trace.json"
    br.write_results(path, doc)
    print(format_trace(doc))
    print(f"results: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0 if job["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
