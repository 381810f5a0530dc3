"""Replay benchmark against its own floor (issue #6): ``make bench``.

Run from the project root::

    .venv/bin/python bench/bench_replay.py [--sizes 1000000,10000000] [--data bench/.data]
                                           [--profile] [--results bench/results]

For each size (messages; ``--sizes`` or env ``BENCH_SIZES``, ``k``/``M`` suffixes allowed) it
generates the input with the workload generator (``bench/workload.yaml``: 3 topics, 50
producers, Zipf keys, Parquet; ``duration_s`` = size / 2,780 msg/s) and runs, one after the
other, each as a subprocess whose process tree (driver JVM, Python driver, Python workers) is
sampled with ``psutil`` every 0.5 s:

1. the floor — ``bench/floor_job.py``: read, Spark's ``hash(key)``, group by topic, count,
   write Parquet; run :data:`FLOOR_RUNS` times, the run of median wall time is the anchor (a
   job of a few seconds moves by a large share with the machine);
2. the full Spark replay — ``topic-replay run`` under ``bench/replay.yaml`` (all tables); its
   per-stage seconds (ingest+hash, control plane, batching, dispatch, Delta writes) are read back
   from the ``runs`` table's ``timings``;
3. the same Spark replay with delta-rs (``--set output.engine=delta-rs``) when the default
   engine (``output.engine: auto``: delta-spark when ``make setup`` fetched the Delta jars) is
   delta-spark: the default engine is the one users get, delta-rs the yardstick of its commits;
4. at the smallest size only, the default engine's replay without the answer tables
   (``output.tables`` without ``topic_profile`` and ``findings``: no key statistics, no
   profile or findings, issue #34), alternating with the full one (:data:`ANSWERS_PAIRS`):
   what the answers add to a replay's wall time;
5. the in-process reference replay — ``topic-replay run --engine local`` when the CLI has it
   (else ``n/a``); a failure (e.g. out of memory at 10 M) is recorded, not fatal.

Before the sizes, a replay of :data:`FIXED_COST_SIZE` messages with the default engine gives
the fixed cost of a run: its process wall time minus the seconds of ingest, emulation and
commits (JVM and session start, pre-flight, the emulation query's planning, stop).

It prints one table per size plus the ratios (replay / floor, Spark / in-process, throughput and
driver RSS of the largest size over the smallest), checks them against the issue's targets, and
writes everything to ``bench/results/<YYYY-MM-DD>.json`` (UTC date of the run). The CPU other
processes used during each job (machine busy cores minus the job's own) is recorded as
``other_cpu_cores``: concurrent load distorts the timings, so read them with it.

``--profile`` additionally replays the smallest size once under ``py-spy record
--subprocesses`` (driver and Python workers) and stores the top functions by own and total
samples in the results (py-spy slows the replay, so that run is not timed); ``--profile-only``
does only that and adds the profile to the day's results file.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyspark
from deltalake import DeltaTable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.contract.config import OUTPUT_TABLES  # noqa: E402 - on sys.path from above
from pipelines.workload.generator import generate, load_spec  # noqa: E402 - as above

TOTAL_RATE = 2780.0
"""msg/s of ``bench/workload.yaml`` (1500 + 1000 + 280): the generated duration is size / rate."""
DEFAULT_SIZES = (1_000_000, 10_000_000)
SMALL_SPAN_S = 60
"""Event-time span (s) of a generated log smaller than a minute of the workload's rate: its
topics' rates are scaled down to give the size over this span."""
STAGES = ("ingest_hash", "control_plane", "batching", "dispatch", "delta_write")
STAGE_LABELS = {"ingest_hash": "ingest+hash", "control_plane": "control plane",
                "batching": "batching", "dispatch": "dispatch", "delta_write": "Delta writes"}
TARGETS = {
    # issue #31: the default engine's replay of 10 M messages ≤ 3 × the floor (was 4 ×, #16)
    "replay_over_floor": 3.0,        # full Spark replay ≤ 3 × floor at the largest size
    "spark_over_local": 1.0,         # Spark replay at least as fast as in-process
    # issue #31 ("kept"): fixed costs amortise, so 10 M runs at ≥ 3 × the msg/s of 1 M
    "throughput_ratio": 3.0,         # throughput at largest ≥ 3 × smallest
    "driver_rss_ratio": 1.2,         # driver RSS at largest ≤ 120 % of smallest
}
ENGINE_TARGETS = {
    "default_over_delta_rs": 1.25,   # default engine's replay wall ≤ 1.25 × delta-rs's (each size)
    "delta_write_share": 0.15,       # Delta writes ≤ 15 % of the default engine's replay wall
    "fixed_cost_s": 10.0,            # a 1,000-message replay: ≤ 10 s outside its stages
}
ANSWERS_TARGET = 0.10
"""Issue #34: ``topic_profile`` and ``findings`` add ≤ 10 % to the default engine's replay wall
(:func:`answers_cost`)."""
ANSWERS_PAIRS = 2
"""Replays with and without the answers at the answers' size, alternating (with, without, with,
without: the first "with" is step 2's replay); the fastest of each side is compared
(:func:`answers_cost`). One pair could not judge 10 %: at 1 M the same replay's wall moved by
9.7-12.2 s in runs minutes apart (2026-11-29), and the single pair said 15-17 % where
alternating pairs said 0 %."""
NO_ANSWERS_TABLES = tuple(t for t in OUTPUT_TABLES if t not in ("topic_profile", "findings"))
"""``output.tables`` of the replay without the answers."""
FIXED_COST_SIZE = 1000
"""Messages of the replay that measures a run's fixed cost (:func:`fixed_cost_s`)."""
DEFAULT_ENGINE_ENV = {"TOPIC_REPLAY_AUTO_ENGINE": ""}
"""Environment of the default-engine replays: ``output.engine: auto`` as a user gets it, even
when the caller's environment says ``TOPIC_REPLAY_AUTO_ENGINE=delta-rs`` (the test suite's)."""
MB = 1024 * 1024
FLOOR_RUNS = 3
"""Runs of the floor job per size; its median is the anchor (:func:`median_run`)."""
LOCAL_MEMORY_SHARE = 0.9
"""Largest share of the available memory the in-process replay may be expected to need. The
linear extrapolation overestimates (10 M peaked at 11.9 GB, 7× the 1.7 GB of 1 M), and a run
killed for memory is recorded as failed, not fatal."""


# ----------------------------------------------------------------------------- pure helpers


def parse_sizes(text: str) -> list[int]:
    """``"1000000,10M,100k"`` → ``[1000000, 10000000, 100000]`` (order kept, duplicates dropped).

    Raises ``ValueError`` naming the bad item for anything not a positive integer with an
    optional ``k``/``M`` suffix.
    """
    sizes: list[int] = []
    for item in (s.strip() for s in text.split(",")):
        m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)", item.replace("_", ""))
        if not m:
            raise ValueError(f"benchmark size {item!r} is not a message count like 1000000 or 1M")
        n = int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6}[m.group(2).lower()])
        if n <= 0:
            raise ValueError(f"benchmark size {item!r} must be positive")
        if n not in sizes:
            sizes.append(n)
    return sizes


def label(n: int) -> str:
    """``1000000`` → ``"1M"``, ``100000`` → ``"100k"``, ``1500000`` → ``"1.5M"``."""
    if n >= 1_000_000:
        return f"{n / 1e6:g}M"
    if n >= 1_000:
        return f"{n / 1e3:g}k"
    return str(n)


def ratio_of(a: float | None, b: float | None) -> float | None:
    """``a / b`` rounded to 3 decimals; ``None`` when either is missing or ``b`` is 0."""
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 3)


def size_ratios(size: Mapping[str, Any]) -> dict[str, float | None]:
    """Ratios of one size's result (see :func:`results_document` for the shape).

    ``replay_over_floor`` = Spark replay wall s / floor wall s; ``spark_over_local`` = Spark
    replay wall s / in-process wall s (≤ 1: Spark at least as fast); ``throughput_msg_s`` =
    messages / Spark replay wall s. ``None`` when a side is missing or failed.
    """
    floor = ok_wall_s(size.get("floor"))
    spark = ok_wall_s(size.get("spark"))
    local = ok_wall_s(size.get("local"))
    msgs = size.get("messages")
    default, rs = replay_wall_s(size.get("spark")), replay_wall_s(size.get("spark_delta_rs"))
    writes = ((size.get("spark") or {}).get("stages_s") or {}).get("delta_write")
    return {
        "replay_over_floor": ratio_of(spark, floor),
        "spark_over_local": ratio_of(spark, local),
        "throughput_msg_s": round(msgs / spark, 1) if msgs and spark else None,
        "default_over_delta_rs": ratio_of(default, rs),
        "delta_write_share": ratio_of(writes, default),
        "answers_cost": answers_cost(size),
    }


def answers_cost(size: Mapping[str, Any]) -> float | None:
    """What the answers (``topic_profile``, ``findings``) add to the default engine's replay
    wall: its fastest replay wall over the fastest of the same replay's without them, minus 1
    (0.05 = 5 % more). The replay walls are ``answers_runs`` (``{"with": [...], "without":
    [...]}``, seconds, ``None`` for a failed run) when measured in pairs, else the ``spark``
    and ``spark_no_answers`` jobs'; ``None`` when a side has no finished run."""
    runs = size.get("answers_runs") or {
        "with": [replay_wall_s(size.get("spark"))],
        "without": [replay_wall_s(size.get("spark_no_answers"))]}
    with_, without = ([w for w in runs[side] if w is not None] for side in ("with", "without"))
    r = ratio_of(min(with_), min(without)) if with_ and without else None
    return None if r is None else round(r - 1.0, 4)


def replay_wall_s(job: Mapping[str, Any] | None) -> float | None:
    """The replay wall seconds (the ``runs`` row's ``wall_s``: from the replay's start to its
    last commit, without the process's start and stop) of a finished Spark replay, else
    ``None``."""
    if ok_wall_s(job) is None:
        return None
    wall = ((job or {}).get("stages_s") or {}).get("wall")
    return float(wall) if wall is not None else None


def fixed_cost_s(job: Mapping[str, Any] | None) -> float | None:
    """What a finished Spark replay spent outside ingest, emulation and commits: its process
    wall seconds minus the stages' seconds (``stages_s``), i.e. JVM and session start,
    pre-flight, the emulation query's planning and start, summary and stop (``None`` when not
    measured)."""
    wall = ok_wall_s(job)
    stages = (job or {}).get("stages_s") or {}
    if wall is None or any(stages.get(k) is None for k in STAGES):
        return None
    return round(wall - sum(float(stages[k]) for k in STAGES), 2)


def ok_wall_s(job: Mapping[str, Any] | None) -> float | None:
    """A measured job's wall time (s) when it finished ``ok``, else ``None``."""
    if not job or job.get("status") != "ok":
        return None
    wall = job.get("wall_s")
    return float(wall) if wall is not None else None


def scale_ratios(sizes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Largest size over smallest: ``throughput_ratio`` (msg/s) and ``driver_rss_ratio`` (peak
    RSS of driver JVM + Python driver of the Spark replay); ``None`` with fewer than 2 sizes."""
    ok = [s for s in sizes if ok_wall_s(s.get("spark")) is not None]
    if len(ok) < 2:
        return {"from": None, "to": None, "throughput_ratio": None, "driver_rss_ratio": None}
    lo, hi = min(ok, key=lambda s: s["messages"]), max(ok, key=lambda s: s["messages"])
    return {
        "from": lo["size"], "to": hi["size"],
        "throughput_ratio": ratio_of(size_ratios(hi)["throughput_msg_s"],
                                   size_ratios(lo)["throughput_msg_s"]),
        "driver_rss_ratio": ratio_of(hi["spark"]["rss_mb"]["driver"],
                                   lo["spark"]["rss_mb"]["driver"]),
    }


def evaluate_targets(sizes: Sequence[Mapping[str, Any]], scale: Mapping[str, Any],
                     fixed: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The targets, each ``{target, measured_at, value, limit, met}`` where ``met`` is
    ``None`` when the value could not be measured. Replay / floor is judged at the largest
    size whose Spark replay finished; Spark / in-process at the largest size where both
    finished (the in-process replay is skipped where it does not fit in memory); then the
    engines' (:func:`engine_targets`)."""
    ok = [s for s in sizes if ok_wall_s(s.get("spark")) is not None]
    top = max(ok, key=lambda s: s["messages"]) if ok else None
    r = size_ratios(top) if top else {}
    at = label(top["size"]) if top else None
    both = [s for s in ok if ok_wall_s(s.get("local")) is not None]
    top_both = max(both, key=lambda s: s["messages"]) if both else None
    r_both = size_ratios(top_both) if top_both else {}
    at_both = label(top_both["size"]) if top_both else None
    span = f"{label(scale['to'])} vs {label(scale['from'])}" if scale.get("to") else None
    rows = [
        ("Spark replay <= 3x floor", at, r.get("replay_over_floor"), "<=",
         TARGETS["replay_over_floor"]),
        ("Spark replay at least as fast as in-process", at_both,
         r_both.get("spark_over_local"), "<=", TARGETS["spark_over_local"]),
        ("throughput at the largest size >= 3x the smallest's", span,
         scale.get("throughput_ratio"), ">=", TARGETS["throughput_ratio"]),
        ("driver RSS within 20 % (largest <= 1.2x smallest)", span,
         scale.get("driver_rss_ratio"), "<=", TARGETS["driver_rss_ratio"]),
    ]
    out = []
    for name, where, value, op, limit in [*rows, *engine_targets(sizes, fixed)]:
        met = None if value is None else (value <= limit if op == "<=" else value >= limit)
        out.append({"target": name, "measured_at": where, "value": value, "op": op,
                    "limit": limit, "met": met})
    return out


def engine_targets(sizes: Sequence[Mapping[str, Any]],
                   fixed: Mapping[str, Any] | None) -> list[tuple[Any, ...]]:
    """Issue #31's rows ``(target, measured_at, value, op, limit)``: the default engine's replay
    wall over delta-rs's at every size where both ran; its Delta writes' share of its replay
    wall at the smallest size; the fixed cost of the :data:`FIXED_COST_SIZE`-message replay
    (``fixed``)."""
    rows: list[tuple[Any, ...]] = []
    for s in sorted(sizes, key=lambda s: s["messages"]):
        r = size_ratios(s)
        if r["default_over_delta_rs"] is not None:
            engine = (s.get("spark") or {}).get("engine", "default")
            rows.append((f"{engine} replay <= 1.25x delta-rs", label(s["size"]),
                         r["default_over_delta_rs"], "<=",
                         ENGINE_TARGETS["default_over_delta_rs"]))
    shares = [s for s in sizes if size_ratios(s)["delta_write_share"] is not None]
    low = min(shares, key=lambda s: s["messages"]) if shares else None
    rows.append(("Delta writes <= 15 % of the default engine's replay wall",
                 label(low["size"]) if low else None,
                 size_ratios(low)["delta_write_share"] if low else None, "<=",
                 ENGINE_TARGETS["delta_write_share"]))
    costed = [s for s in sizes if answers_cost(s) is not None]
    low_a = min(costed, key=lambda s: s["messages"]) if costed else None
    rows.append(("answers (topic_profile, findings) add <= 10 % to the replay wall",
                 label(low_a["size"]) if low_a else None,
                 answers_cost(low_a) if low_a else None, "<=", ANSWERS_TARGET))
    rows.append((f"{label(FIXED_COST_SIZE)} messages: <= 10 s outside ingest, emulation and "
                 f"commits", label(FIXED_COST_SIZE) if fixed else None, fixed_cost_s(fixed),
                 "<=", ENGINE_TARGETS["fixed_cost_s"]))
    return rows


def results_document(sizes: Sequence[Mapping[str, Any]], machine: Mapping[str, Any],
                     profile: Mapping[str, Any] | None = None,
                     fixed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON written to ``bench/results/<date>.json``: ``{"benchmark", "machine",
    "sizes": [{size, messages, input, floor, spark, spark_delta_rs, local, ratios}], "scale",
    "fixed", "targets", "profile"}``; each job is ``{status, wall_s, rss_mb: {driver_jvm,
    driver_python, driver, workers, total}, other_cpu_cores, ...}`` (a Spark replay's also
    ``engine``, ``stages_s``, ``counts``); ``fixed`` is the :data:`FIXED_COST_SIZE`-message
    replay's job with its ``fixed_cost_s``."""
    sized = [{**s, "ratios": size_ratios(s)} for s in sizes]
    scale = scale_ratios(sized)
    return {
        "benchmark": "replay-vs-floor (issue #6), default engine vs delta-rs (issue #31)",
        "machine": dict(machine),
        "sizes": sized,
        "scale": scale,
        "fixed": {**fixed, "fixed_cost_s": fixed_cost_s(fixed)} if fixed else None,
        "targets": evaluate_targets(sized, scale, fixed),
        "profile": dict(profile) if profile else None,
    }


def fmt_value(v: Any, spec: str = ".1f", suffix: str = "") -> str:
    """``v`` formatted by ``spec`` plus ``suffix``; ``"n/a"`` for ``None``."""
    if v is None:
        return "n/a"
    return f"{v:{spec}}{suffix}"


def format_report(doc: Mapping[str, Any]) -> str:
    """Readable tables of a :func:`results_document`."""
    lines = []
    head = (f"{'size':>6} {'messages':>11} {'floor s':>8} {'spark s':>8} {'in-proc s':>10} "
            f"{'replay/floor':>12} {'spark/in-proc':>13} {'msg/s':>9} {'driver MB':>10} "
            f"{'workers MB':>10} {'other cores':>11}")
    lines += [head, "-" * len(head)]
    for s in doc["sizes"]:
        sp, r = s.get("spark") or {}, s["ratios"]
        loc = s.get("local") or {}
        loc_txt = (fmt_value(loc.get("wall_s")) if loc.get("status") == "ok"
                   else str(loc.get("status", "n/a"))[:10])
        lines.append(
            f"{label(s['size']):>6} {s['messages']:>11,} "
            f"{fmt_value(ok_wall_s(s.get('floor'))):>8} {fmt_value(ok_wall_s(sp)):>8} "
            f"{loc_txt:>10} {fmt_value(r['replay_over_floor'], '.2f', 'x'):>12} "
            f"{fmt_value(r['spark_over_local'], '.2f', 'x'):>13} "
            f"{fmt_value(r['throughput_msg_s'], ',.0f'):>9} "
            f"{fmt_value((sp.get('rss_mb') or {}).get('driver'), '.0f'):>10} "
            f"{fmt_value((sp.get('rss_mb') or {}).get('workers'), '.0f'):>10} "
            f"{fmt_value(sp.get('other_cpu_cores'), '.2f'):>11}")
    lines.append("")
    head2 = f"{'size':>6} " + " ".join(f"{STAGE_LABELS[k]:>13}" for k in STAGES) + \
        f" {'other':>8} {'replay wall':>11}   (Spark replay, seconds)"
    lines += [head2, "-" * len(head2)]
    for s in doc["sizes"]:
        st = (s.get("spark") or {}).get("stages_s") or {}
        lines.append(f"{label(s['size']):>6} " + " ".join(f"{fmt_value(st.get(k)):>13}"
                                                           for k in STAGES)
                     + f" {fmt_value(st.get('other')):>8} {fmt_value(st.get('wall')):>11}")
    lines += ["", *format_engines(doc)]
    sc = doc["scale"]
    lines.append("")
    if sc.get("to"):
        lines.append(f"scale {label(sc['to'])} / {label(sc['from'])}: throughput "
                     f"{fmt_value(sc['throughput_ratio'], '.2f', 'x')}, driver RSS "
                     f"{fmt_value(sc['driver_rss_ratio'], '.2f', 'x')}")
    for t in doc["targets"]:
        mark = {True: "MET   ", False: "MISSED", None: "n/a   "}[t["met"]]
        lines.append(f"  [{mark}] {t['target']}: {fmt_value(t['value'], '.2f')} "
                     f"(limit {t['op']} {t['limit']:g}; at {t['measured_at'] or 'n/a'})")
    return "\n".join(lines)


def format_engines(doc: Mapping[str, Any]) -> list[str]:
    """The default engine next to delta-rs, per size (replay walls, Delta writes), and the fixed
    cost of a small replay: lines of :func:`format_report`."""
    head = (f"{'size':>6} {'default engine':>14} {'replay s':>9} {'writes s':>9} "
            f"{'delta-rs replay s':>17} {'writes s':>9} {'default/rs':>10} {'writes share':>12}")
    lines = [head, "-" * len(head)]
    for s in doc["sizes"]:
        d, rs, r = s.get("spark") or {}, s.get("spark_delta_rs") or {}, s["ratios"]
        rs_wall = (fmt_value(replay_wall_s(rs)) if rs.get("status") == "ok"
                   else str(rs.get("status", "n/a"))[:17])
        lines.append(
            f"{label(s['size']):>6} {d.get('engine', 'n/a'):>14} "
            f"{fmt_value(replay_wall_s(d)):>9} "
            f"{fmt_value((d.get('stages_s') or {}).get('delta_write')):>9} {rs_wall:>17} "
            f"{fmt_value((rs.get('stages_s') or {}).get('delta_write')):>9} "
            f"{fmt_value(r.get('default_over_delta_rs'), '.2f', 'x'):>10} "
            f"{fmt_value(r.get('delta_write_share'), '.1%'):>12}")
    for s in doc["sizes"]:
        na = s.get("spark_no_answers")
        if na:
            runs = s.get("answers_runs") or {}
            lines.append(f"{label(s['size'])} without topic_profile and findings: replay "
                         f"{fmt_walls(runs.get('without') or [replay_wall_s(na)])} s, with "
                         f"them {fmt_walls(runs.get('with') or [replay_wall_s(s.get('spark'))])}"
                         f" s; the answers add "
                         f"{fmt_value(s['ratios'].get('answers_cost'), '.1%')} (fastest of each)")
    fixed = doc.get("fixed")
    if fixed:
        st = fixed.get("stages_s") or {}
        lines.append(f"{label(FIXED_COST_SIZE)} messages ({fixed.get('engine', 'n/a')}): process "
                     f"{fmt_value(ok_wall_s(fixed))} s, of which stages "
                     f"{fmt_value(sum(st.get(k) or 0.0 for k in STAGES) if st else None)} s, "
                     f"fixed cost {fmt_value(fixed.get('fixed_cost_s'))} s")
    return lines


def summarize_pyspy_raw(text: str, top: int = 15) -> dict[str, Any]:
    """Top functions of a ``py-spy record --format raw`` file (collapsed stacks, one
    ``frame;frame;... count`` per line): ``{"samples", "self": [[function, share]],
    "total": [[function, share]], "project_total": [[function, share]]}``, shares of all
    samples (0..1), largest first; ``project_total`` keeps this repository's functions
    (``pipelines/``, ``jobs/``) only."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    project: Counter[str] = Counter()
    samples = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        samples += n
        frames = [_frame_name(f) for f in stack.split(";")]
        frames = [f for f in frames if f]
        if not frames:
            continue
        own[frames[-1]] += n
        for f in set(frames):
            total[f] += n
            if "(pipelines/" in f or "(jobs/" in f:
                project[f] += n
    def share(c: Counter[str]) -> list[list[Any]]:
        return [[f, round(n / samples, 4)] for f, n in c.most_common(top)] if samples else []
    return {"samples": samples, "self": share(own), "total": share(total),
            "project_total": share(project)}


def _frame_name(frame: str) -> str:
    """``"add_messages (pipelines/core/batching.py:120)"`` → ``"add_messages
    (pipelines/core/batching.py)"``; process/thread pseudo-frames are dropped."""
    frame = frame.strip()
    if frame.startswith(("process ", "thread ")):
        return ""
    frame = re.sub(r":\d+\)$", ")", frame)
    frame = re.sub(r"\(/.*?/site-packages/", "(", frame)
    return frame.replace(str(ROOT) + "/", "")


# ----------------------------------------------------------------------------- measuring


@dataclass
class TreeSample:
    """Peaks of one process tree (bytes) and its CPU use, sampled every ``interval`` s."""

    driver_jvm: int = 0
    driver_python: int = 0
    driver: int = 0
    workers: int = 0
    total: int = 0
    samples: int = 0
    system_cores: list[float] = field(default_factory=list)
    tree_cores: list[float] = field(default_factory=list)


def peak_rss(p: Any) -> int:
    """Peak RSS of process ``p`` (a ``psutil.Process``) since it started, in bytes: the kernel's
    high-water mark (``VmHWM`` of ``/proc/<pid>/status``), so a peak between two samples is not
    missed; its current RSS where the kernel does not keep one (not Linux)."""
    try:
        with open(f"/proc/{p.pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(p.memory_info().rss)


class TreeSampler(threading.Thread):
    """Samples RSS of ``pid`` and its descendants: the root is the Python driver, ``java`` the
    driver JVM, every other Python descendant a Python worker (``pyspark.daemon`` and its
    forks; their RSS is summed, shared copy-on-write pages counted in each). The driver's two
    processes are long-lived, so their peaks are the kernel's high-water marks
    (:func:`peak_rss`) and ``driver`` is their sum; the workers come and go, so theirs are
    the largest sampled sum."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        import psutil  # noqa: PLC0415 - optional (the bench extra); main() checks it first

        self.psutil = psutil
        self.root = psutil.Process(pid)
        self.interval = interval
        self.peak = TreeSample()
        self.stop_event = threading.Event()
        self.procs: dict[int, Any] = {}
        psutil.cpu_percent(None)

    def run(self) -> None:
        while not self.stop_event.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        ps = self.psutil
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except ps.Error:
            return
        jvm = py_driver = workers = 0
        cores = 0.0
        for p in procs:
            try:
                p = self.procs.setdefault(p.pid, p)
                cores += p.cpu_percent(None) / 100.0
                name = p.name()
                if p.pid == self.root.pid:
                    py_driver += peak_rss(p)
                elif name.startswith("java"):
                    jvm += peak_rss(p)
                else:
                    workers += p.memory_info().rss
            except ps.Error:
                continue
        pk = self.peak
        pk.driver_jvm = max(pk.driver_jvm, jvm)
        pk.driver_python = max(pk.driver_python, py_driver)
        pk.driver = max(pk.driver, jvm + py_driver)
        pk.workers = max(pk.workers, workers)
        pk.total = max(pk.total, jvm + py_driver + workers)
        pk.samples += 1
        pk.system_cores.append(ps.cpu_percent(None) / 100.0 * (os.cpu_count() or 1))
        pk.tree_cores.append(cores)


def run_measured(cmd: Sequence[str], log: Path, env: Mapping[str, str] | None = None,
                 timeout_s: float | None = None) -> dict[str, Any]:
    """Run ``cmd`` (stdout+stderr → ``log``), sampling its process tree. Returns ``{status
    ("ok" | "failed (exit N): <last log line>" | "timeout after N s"), wall_s, rss_mb:
    {driver_jvm, driver_python, driver, workers, total}, cpu_cores, other_cpu_cores, log}``.
    After ``timeout_s`` seconds the job's process tree is killed."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, **(env or {})})
        sampler = TreeSampler(proc.pid)
        sampler.start()
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_tree(proc.pid)
            rc = proc.wait()
        wall = time.perf_counter() - t0
        sampler.stop_event.set()
        sampler.join()
    pk = sampler.peak
    status = "ok"
    if timed_out:
        status = f"timeout after {timeout_s:g} s"
    elif rc != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        status = f"failed (exit {rc}): {tail[-1][:200] if tail else ''}"
    busy = sum(pk.system_cores) / len(pk.system_cores) if pk.system_cores else None
    own = sum(pk.tree_cores) / len(pk.tree_cores) if pk.tree_cores else None
    return {
        "status": status,
        "wall_s": round(wall, 2),
        "rss_mb": {k: round(getattr(pk, k) / MB, 1)
                   for k in ("driver_jvm", "driver_python", "driver", "workers", "total")},
        "cpu_cores": round(own, 2) if own is not None else None,
        "other_cpu_cores": round(max(busy - own, 0.0), 2) if busy is not None and own is not None
        else None,
        "log": str(log.relative_to(ROOT) if log.is_relative_to(ROOT) else log),
    }


def _kill_tree(pid: int) -> None:
    """Kill the job ``pid`` and its descendants (processes this benchmark started)."""
    import psutil  # noqa: PLC0415 - optional (the bench extra); main() checks it first

    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


def generate_input(size: int, folder: Path) -> dict[str, Any]:
    """Generate ``size`` (about: Poisson arrivals) messages of ``bench/workload.yaml`` into
    ``folder``; returns ``{messages, files, bytes, duration_s, generate_s}``."""

    spec = load_spec(ROOT / "bench" / "workload.yaml")
    duration = max(1, round(size / TOTAL_RATE))
    spec = spec.model_copy(update={"duration_s": duration})
    if size < TOTAL_RATE * SMALL_SPAN_S:  # a small log: the same topics, slower, over a minute
        factor = size / (TOTAL_RATE * SMALL_SPAN_S)
        duration = SMALL_SPAN_S
        topics = [t.model_copy(update={"rate": t.rate.model_copy(
            update={"msg_rate": t.rate.msg_rate * factor})}) for t in spec.topics]
        spec = spec.model_copy(update={"duration_s": duration, "topics": topics})
    shutil.rmtree(folder, ignore_errors=True)
    t0 = time.perf_counter()
    res = generate(spec, folder)
    return {"messages": res.messages, "files": len(res.files), "bytes": res.bytes,
            "duration_s": duration, "generate_s": round(time.perf_counter() - t0, 2)}


def read_stage_timings(output: Path, run_id: str) -> dict[str, float | None]:
    """Per-stage seconds of a finished Spark replay from its ``runs`` table (``timings`` JSON:
    ``wall_s`` and ``<stage>_s``); ``other`` = wall minus the stages (query start, listing,
    state files). Missing stages are ``None``."""

    runs = DeltaTable(str(output / "runs")).to_pandas()
    runs = runs[runs["run_id"] == run_id]
    timings = json.loads(runs["timings"].iloc[-1]) if len(runs) else {}
    out: dict[str, float | None] = {k: timings.get(f"{k}_s") for k in STAGES}
    wall = timings.get("wall_s")
    out["wall"] = wall
    known = [v for v in out.values() if v is not None]
    out["other"] = (round(wall - sum(v for k, v in out.items() if k in STAGES and v is not None),
                          3) if wall is not None and len(known) > 1 else None)
    return out


def read_engine(output: Path, run_id: str) -> str | None:
    """The Delta engine that wrote the run (the ``runs`` row's ``versions``)."""

    runs = DeltaTable(str(output / "runs")).to_pandas()
    runs = runs[runs["run_id"] == run_id]
    return json.loads(runs["versions"].iloc[-1]).get("engine") if len(runs) else None


def spark_replay(setup: BenchSetup, folder: Path, size: int, engine: str | None,
                 messages: int | None = None, sets: Sequence[str] = (),
                 name: str | None = None) -> dict[str, Any]:
    """One measured Spark replay of ``folder`` (``engine``: ``output.engine`` forced, or
    ``None`` for the default a user gets; ``sets``: more ``--set KEY=VALUE``; ``name``: of its
    output folder and log) with its ``engine``, ``stages_s`` and ``counts``; its status says
    ``wrong count`` when it did not accept ``messages``."""
    name = name or ("spark" if engine is None else f"spark-{engine}")
    out = setup.data_dir / f"{name}-{label(size)}"
    shutil.rmtree(out, ignore_errors=True)
    run_id = f"bench-{label(size)}"
    cmd = replay_cmd(setup.cli, folder, out, run_id, None)
    if engine is not None:
        cmd += ["--set", f"output.engine={engine}"]
    for kv in sets:
        cmd += ["--set", kv]
    job = run_measured(cmd, setup.data_dir / "logs" / f"{label(size)}-{name}.log",
                       env=DEFAULT_ENGINE_ENV, timeout_s=setup.timeout_s)
    if job["status"] == "ok":
        job["engine"] = read_engine(out, run_id)
        job["stages_s"] = read_stage_timings(out, run_id)
        job["counts"] = read_counts(out, run_id)
        accepted = job["counts"].get("accepted")
        if messages is not None and accepted != messages:
            job["status"] = f"wrong count: accepted {accepted} of {messages}"
    return job


def measure_fixed_cost(setup: BenchSetup) -> dict[str, Any]:
    """The default engine's replay of :data:`FIXED_COST_SIZE` generated messages (see
    :func:`fixed_cost_s`)."""
    folder = setup.data_dir / f"input-{label(FIXED_COST_SIZE)}"
    inp = generate_input(FIXED_COST_SIZE, folder)
    setup.log(f"[{label(FIXED_COST_SIZE)}] fixed cost: Spark replay of {inp['messages']} "
              f"messages ...")
    job = spark_replay(setup, folder, FIXED_COST_SIZE, None, inp["messages"])
    setup.log(f"[{label(FIXED_COST_SIZE)}]   {job['status']} in {job['wall_s']} s, fixed cost "
              f"{fmt_value(fixed_cost_s(job))} s")
    return job


def read_counts(output: Path, run_id: str) -> dict[str, int]:
    """``counts`` JSON of the run's ``runs`` row (accepted, quarantined, entries, …)."""

    runs = DeltaTable(str(output / "runs")).to_pandas()
    runs = runs[runs["run_id"] == run_id]
    return dict(json.loads(runs["counts"].iloc[-1])) if len(runs) else {}


def local_engine_available(cli: Path) -> bool:
    """True when ``pipelines/engine/local.py`` exists and ``topic-replay run`` accepts
    ``--engine``."""
    if not (ROOT / "pipelines" / "engine" / "local.py").is_file():
        return False
    helptext = subprocess.run([str(cli), "run", "--help"], capture_output=True, text=True,
                              cwd=ROOT).stdout
    return "--engine" in helptext


def replay_cmd(cli: Path, data: Path, out: Path, run_id: str, engine: str | None) -> list[str]:
    cmd = [str(cli), "run", "--input", str(data), "--output", str(out),
           "--conf", str(ROOT / "bench" / "replay.yaml"), "--run-id", run_id,
           "--set", "input.format=parquet"]
    if engine:
        cmd += ["--engine", engine]
    return cmd


def median_run(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The run of median wall time among ``runs`` (:func:`run_measured` results; the first
    failed one if any failed), with every run's wall seconds as ``wall_s_runs``. The floor job
    is short, so a machine's hiccup moves it by a large share: its median is the anchor."""
    failed = [r for r in runs if ok_wall_s(r) is None]
    ok = sorted((r for r in runs if ok_wall_s(r) is not None), key=lambda r: r["wall_s"])
    pick = failed[0] if failed else ok[(len(ok) - 1) // 2]
    return {**pick, "wall_s_runs": [r.get("wall_s") for r in runs]}


def local_memory_estimate_mb(size: int, done: Sequence[Mapping[str, Any]]) -> float | None:
    """Peak RSS (MB) the in-process replay of ``size`` messages would need, extrapolated
    linearly from the largest smaller size it finished (``None`` when there is none)."""
    ok = [s for s in done if s["size"] < size and ok_wall_s(s.get("local")) is not None]
    if not ok:
        return None
    ref = max(ok, key=lambda s: s["size"])
    return round(ref["local"]["rss_mb"]["total"] * size / ref["size"], 1)


@dataclass
class BenchSetup:
    """What the measurements of every size share: the work folder (inputs, outputs, logs), the
    ``topic-replay`` CLI, whether the in-process engine runs (else its status is ``no_local``),
    the Python of the floor job, the progress logger, ``save`` (called with the partial result
    after the Spark replay) and each command's timeout."""

    data_dir: Path
    cli: Path
    local: bool
    py: str
    log: Any = print
    save: Any = None
    timeout_s: float | None = None
    no_local: str = "n/a (engine local not available)"
    answers_size: int | None = None
    """The size whose default-engine replay is run again without the answer tables."""


def bench_size(size: int, setup: BenchSetup,
               done: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """All measurements of one size (floor, Spark replay, in-process replay). The in-process
    replay is skipped when its extrapolated peak RSS exceeds :data:`LOCAL_MEMORY_SHARE` of the
    available memory (estimated from the sizes ``done``)."""
    data_dir, py = setup.data_dir, setup.py
    log, save, timeout_s = setup.log, setup.save, setup.timeout_s
    folder = data_dir / f"input-{label(size)}"
    log(f"[{label(size)}] generating input into {folder} ...")
    inp = generate_input(size, folder)
    log(f"[{label(size)}]   {inp['messages']:,} messages, {inp['files']} files, "
        f"{inp['bytes'] / MB:.0f} MB in {inp['generate_s']} s")
    result: dict[str, Any] = {"size": size, "messages": inp["messages"], "input": inp}
    logs = data_dir / "logs"

    out = data_dir / f"floor-{label(size)}"
    log(f"[{label(size)}] floor job ({FLOOR_RUNS} runs) ...")
    runs = []
    for _ in range(FLOOR_RUNS):
        shutil.rmtree(out, ignore_errors=True)
        runs.append(run_measured([py, str(ROOT / "bench" / "floor_job.py"), "--input",
                                  str(folder), "--output", str(out)],
                                 logs / f"{label(size)}-floor.log", timeout_s=timeout_s))
    result["floor"] = median_run(runs)
    log(f"[{label(size)}]   {result['floor']['status']} in {result['floor']['wall_s']} s "
        f"(median of {', '.join(str(r['wall_s']) for r in runs)})")

    log(f"[{label(size)}] Spark replay, default engine ...")
    spark = spark_replay(setup, folder, size, None, inp["messages"])
    result["spark"] = spark
    log(f"[{label(size)}]   {spark['status']} in {spark['wall_s']} s "
        f"({spark.get('engine', 'engine n/a')})")
    if save is not None:
        save(result)
    if spark.get("engine") not in (None, "delta-rs"):
        log(f"[{label(size)}] Spark replay, delta-rs ...")
        rs = spark_replay(setup, folder, size, "delta-rs", inp["messages"])
        log(f"[{label(size)}]   {rs['status']} in {rs['wall_s']} s")
    else:
        rs = {"status": "n/a (the default engine is delta-rs)"}
    result["spark_delta_rs"] = rs
    if save is not None:
        save(result)
    if setup.answers_size == size:
        result.update(answers_pairs(setup, folder, size, inp["messages"], spark))
        if save is not None:
            save(result)

    result["local"] = _local_replay(size, setup, folder, f"bench-{label(size)}", done)
    return result


def answers_pairs(setup: BenchSetup, folder: Path, size: int, messages: int,
                  first: Mapping[str, Any]) -> dict[str, Any]:
    """The replays without the answer tables alternating with full ones after ``first`` (the
    size's default-engine replay): :data:`ANSWERS_PAIRS` of each, with, without, with, …
    Returns ``spark_no_answers`` (the fastest finished one without, else the last) and
    ``answers_runs`` (every replay wall of each side, :func:`answers_cost`)."""
    walls: dict[str, list[float | None]] = {"with": [replay_wall_s(first)], "without": []}
    without: list[dict[str, Any]] = []
    for i in range(ANSWERS_PAIRS):
        if i:
            setup.log(f"[{label(size)}] Spark replay, default engine, again ({i + 1} of "
                      f"{ANSWERS_PAIRS}) ...")
            again = spark_replay(setup, folder, size, None, messages, name="spark-again")
            walls["with"].append(replay_wall_s(again))
        setup.log(f"[{label(size)}] Spark replay, default engine, without topic_profile and "
                  f"findings ({i + 1} of {ANSWERS_PAIRS}) ...")
        na = spark_replay(setup, folder, size, None, messages,
                          [f"output.tables=[{','.join(NO_ANSWERS_TABLES)}]"], "spark-no-answers")
        without.append(na)
        walls["without"].append(replay_wall_s(na))
    done = [j for j in without if replay_wall_s(j) is not None]
    best = min(done, key=lambda j: replay_wall_s(j) or 0.0) if done else without[-1]
    result = {"spark_no_answers": best, "answers_runs": walls}
    setup.log(f"[{label(size)}]   replay walls with the answers {fmt_walls(walls['with'])} s, "
              f"without {fmt_walls(walls['without'])} s; the answers add "
              f"{fmt_value(answers_cost(result), '.1%')} to the replay wall (fastest of each)")
    return result


def fmt_walls(walls: Sequence[float | None]) -> str:
    """Replay walls as ``9.7 / 10.1`` (``failed`` for a run that did not finish)."""
    return " / ".join("failed" if w is None else f"{w:.1f}" for w in walls)


def _local_replay(size: int, setup: BenchSetup, folder: Path, run_id: str,
                  done: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The in-process replay's measurement of ``folder`` (or why it was skipped)."""
    import psutil  # noqa: PLC0415 - optional (the bench extra); main() checks it first

    log = setup.log
    need = local_memory_estimate_mb(size, done)
    avail = psutil.virtual_memory().available / MB
    if not setup.local:
        return {"status": setup.no_local}
    if need is not None and need > LOCAL_MEMORY_SHARE * avail:
        loc: dict[str, Any] = {"status": f"skipped (does not fit: needs ~{need / 1024:.1f} GB, "
                                         f"{avail / 1024:.1f} GB available)"}
        log(f"[{label(size)}] in-process replay {loc['status']}")
        return loc
    out = setup.data_dir / f"local-{label(size)}"
    shutil.rmtree(out, ignore_errors=True)
    log(f"[{label(size)}] in-process replay ...")
    loc = run_measured(replay_cmd(setup.cli, folder, out, run_id, "local"),
                       setup.data_dir / "logs" / f"{label(size)}-local.log",
                       timeout_s=setup.timeout_s)
    if loc["status"] == "ok":
        try:
            loc["counts"] = read_counts(out, run_id)
        except Exception as exc:  # the table shape is the other engine's
            loc["counts"] = {"error": str(exc)[:200]}
    log(f"[{label(size)}]   {loc['status']} in {loc['wall_s']} s")
    return loc


def profile_replay(size: int, data_dir: Path, cli: Path, log: Any = print) -> dict[str, Any]:
    """Replay ``size`` once under ``py-spy record --subprocesses`` and summarize it."""
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        return {"status": "n/a (py-spy not installed: pip install -e '.[bench]')"}
    folder = data_dir / f"input-{label(size)}"
    if not folder.is_dir():
        generate_input(size, folder)
    out = data_dir / f"profile-{label(size)}"
    shutil.rmtree(out, ignore_errors=True)
    raw = data_dir / f"profile-{label(size)}.txt"
    log(f"[{label(size)}] profiling the Spark replay with py-spy ...")
    cmd = [spy, "record", "--subprocesses", "--nonblocking", "--rate", "25", "--format", "raw",
           "--output", str(raw), "--", *replay_cmd(cli, folder, out, "bench-profile", None)]
    job = run_measured(cmd, data_dir / "logs" / f"{label(size)}-profile.log")
    if job["status"] != "ok" or not raw.is_file():
        return {"status": job["status"], "size": size}
    summary = summarize_pyspy_raw(raw.read_text(errors="replace"))
    return {"status": "ok", "size": size, "wall_s_under_pyspy": job["wall_s"],
            "rate_hz": 25, **summary}


def write_results(path: Path, doc: Mapping[str, Any]) -> None:
    """Write ``doc`` as indented JSON to ``path`` atomically (via ``<path>.tmp``)."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)


def machine_info() -> dict[str, Any]:
    import psutil  # noqa: PLC0415 - optional (the bench extra); main() checks it first

    return {
        "date_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 1024**3, 1),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "note": ("other processes (other Spark jobs) may share the CPU: see each job's "
                 "other_cpu_cores (mean cores busy outside the job while it ran)"),
    }


def _profile_only(size: int, data_dir: Path, results: Path, cli: Path) -> int:
    """``--profile-only``: profile ``size`` and store it as ``profile`` in today's results."""
    profile = profile_replay(size, data_dir, cli, lambda m: print(m, flush=True))
    path = results / f"{datetime.now(UTC):%Y-%m-%d}.json"
    doc: dict[str, Any] = {"profile": profile}
    if path.is_file():
        old = json.loads(path.read_text())
        doc = results_document(old["sizes"], old["machine"], profile, old.get("fixed"))
    results.mkdir(parents=True, exist_ok=True)
    write_results(path, doc)
    if profile.get("status") == "ok":
        for name, share in profile["project_total"][:15]:
            print(f"  {share * 100:5.1f}%  {name}")
    print(f"profile: {profile.get('status')}; written to {path}")
    return 0 if profile.get("status") == "ok" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=os.environ.get("BENCH_SIZES", ""),
                        help="comma-separated message counts (default 1M,10M; env BENCH_SIZES)")
    parser.add_argument("--data", type=Path, default=Path(os.environ.get(
        "BENCH_DATA", ROOT / "bench" / ".data")), help="scratch folder for inputs and outputs")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results",
                        help="folder of the <YYYY-MM-DD>.json results")
    parser.add_argument("--profile", action="store_true",
                        default=os.environ.get("BENCH_PROFILE", "") not in ("", "0"),
                        help="also profile the smallest size with py-spy (env BENCH_PROFILE=1)")
    parser.add_argument("--timeout", type=float, default=float(os.environ.get(
        "BENCH_TIMEOUT_S", 0)) or None, help="kill a job after this many seconds (env "
        "BENCH_TIMEOUT_S; default none)")
    parser.add_argument("--profile-only", action="store_true",
                        help="only profile the smallest size and add the profile to today's "
                        "results file")
    parser.add_argument("--no-local", action="store_true",
                        help="skip the in-process reference replay")
    parser.add_argument("--no-answers-cost", action="store_true",
                        help="skip the replay without topic_profile and findings that measures "
                        "what the answers cost (smallest size)")
    parser.add_argument("--no-fixed-cost", action="store_true",
                        help=f"skip the {label(FIXED_COST_SIZE)}-message replay that measures "
                        "a run's fixed cost")
    args = parser.parse_args(argv)
    try:
        sizes = parse_sizes(args.sizes) if args.sizes.strip() else list(DEFAULT_SIZES)
    except ValueError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 2
    if importlib.util.find_spec("psutil") is None:
        print("bench: error: psutil is missing; install the bench extra: "
              ".venv/bin/pip install -e '.[bench]'", file=sys.stderr)
        return 2

    cli = Path(sys.executable).parent / "topic-replay"
    if args.profile_only:
        return _profile_only(min(sizes), args.data, args.results, cli)
    local = not args.no_local and local_engine_available(cli)
    no_local = "skipped (--no-local)" if args.no_local else "n/a (engine local not available)"
    machine = machine_info()
    print(f"replay benchmark: sizes {', '.join(label(s) for s in sizes)}; in-process engine "
          f"{'yes' if local else no_local}; data in {args.data}",
          flush=True)

    def say(msg: str) -> None:
        print(msg, flush=True)

    args.results.mkdir(parents=True, exist_ok=True)
    path = args.results / f"{datetime.now(UTC):%Y-%m-%d}.json"
    results: list[dict[str, Any]] = []
    fixed: dict[str, Any] | None = None

    def save(partial: dict[str, Any]) -> None:  # after each size and each Spark replay
        machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        write_results(path, results_document([*results, partial], machine, fixed=fixed))

    setup = BenchSetup(args.data, cli, local, sys.executable, say, save, args.timeout, no_local,
                       None if args.no_answers_cost else min(sizes))
    fixed = None if args.no_fixed_cost else measure_fixed_cost(setup)
    for s in sizes:
        res = bench_size(s, setup, results)
        save(res)
        results.append(res)
    profile = profile_replay(min(sizes), args.data, cli, say) if args.profile else None
    machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    doc = results_document(results, machine, profile, fixed)
    write_results(path, doc)
    print()
    print(format_report(doc))
    if profile and profile.get("status") == "ok":
        print(f"\nprofile of the {label(profile['size'])} Spark replay (py-spy, driver + "
              f"workers, {profile['samples']} samples), top by own time:")
        for name, share in profile["self"][:10]:
            print(f"  {share * 100:5.1f}%  {name}")
    print(f"\nresults: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    failed = [s for s in results if ok_wall_s(s.get("spark")) is None]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

