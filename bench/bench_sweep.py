"""Benchmark: a 3 × 3 policy sweep over data/sample against one replay of it (issue #20).

Run from the project root (``make bench`` runs it)::

    .venv/bin/python bench/bench_sweep.py [--input data/sample] [--conf conf/sample.yaml]
        [--grid KEY=V1,V2,V3 ...] [--work DIR]

Times, in one run and as a new user runs them (``topic-replay`` as a subprocess, a fresh
output each, the default engine): ``topic-replay run`` of the input, then ``topic-replay
sweep`` of the grid (default: ``policy.split_msg_rate_in=20,40,80`` ×
``topic.bucket_budget=2,4,8``, nine scenarios). Prints both wall times, the ratio and the
target (≤ 3×), and the machine's load average before and after (a busy machine skews both).
Exits 1 when a command fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GRID = ["policy.split_msg_rate_in=20,40,80", "topic.bucket_budget=2,4,8"]
TARGET = 3.0


def timed(argv: list[str]) -> float:
    """Wall seconds of ``topic-replay ARGV`` (its output discarded; exit 1 on failure)."""
    exe = str(Path(sys.executable).with_name("topic-replay"))
    t0 = time.perf_counter()
    done = subprocess.run([exe, *argv], cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-3000:], sep="\n", file=sys.stderr)
        raise SystemExit(1)
    return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", default=str(REPO / "data" / "sample"))
    p.add_argument("--conf", default=str(REPO / "conf" / "sample.yaml"))
    p.add_argument("--grid", action="append", default=None, metavar="KEY=V1,V2,…")
    p.add_argument("--work", default=None, metavar="DIR",
                   help="where the outputs go (default: a temporary folder, removed)")
    args = p.parse_args()
    grid = args.grid or GRID
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-sweep-"))
    common = ["--input", args.input, "--conf", args.conf]
    try:
        load0 = os.getloadavg()[0]
        one = timed(["run", *common, "--output", str(work / "one")])
        sweep = timed(["sweep", *common, "--output", str(work / "sweep"),
                       *[a for g in grid for a in ("--grid", g)]])
        load1 = os.getloadavg()[0]
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    n = 1
    for g in grid:
        n *= len(g.partition("=")[2].split(","))
    ratio = sweep / one
    print(f"one replay           {one:7.1f} s")
    print(f"sweep, {n} scenarios  {sweep:7.1f} s  ({ratio:.2f}× one replay; target ≤ "
          f"{TARGET:.0f}×: {'met' if ratio <= TARGET else 'missed'})")
    print(f"load average {load0:.1f} before, {load1:.1f} after (2 cores)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
