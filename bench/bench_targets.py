"""Scale-out target benchmarks (issue #16), part of ``make bench``.

Run from the project root::

    .venv/bin/python bench/bench_targets.py [--targets-scale 1] [--data bench/.data]
                                            [--no-local] [--profile] [--results bench/results]

Two pairs of workloads, each pair generated from ``bench/workload.yaml``'s ``orders`` topic
(Zipf keys, lognormal payloads) and replayed under ``bench/replay.yaml`` like ``make bench``:

* **many producers** — ``1 M × scale`` messages of one topic at 1,500 msg/s, from
  ``100,000 × scale`` producers (about 10 messages each, IoT-style) vs from 50 producers.
  Targets: Spark replay wall ≤ 1.5× (the in-process engine too), driver peak RSS (JVM + Python)
  ≤ 1.2×.
* **hot topic** — ``6 M × scale`` messages at 2,780 msg/s (the bench's total rate) in one topic
  vs the same rate spread evenly over 3 topics; the same 50 producer names (split 17/17/16 over
  the three topics) and the same key space. Target: one topic ≤ 1.15× three topics.
* **many topics** (issue #30) — ``1.02 M × scale`` messages at 1,700 msg/s for ``600 × scale``
  s over 3, 1,000 and 10,000 topics (2 producers each, the same Zipf keys), replayed with
  ``replay.consumer_window_s=600``. Targets: 1,000 topics ≤ 1.3×, 10,000 topics ≤ 1.5× the
  3 topics' Spark replay wall; driver peak RSS of 10,000 topics ≤ 1.3× of 3.
* **scale-out** (issue #30) — the 1,000-topic input replayed on a standalone cluster (the
  cluster test's setup, ``tests/guarantees/conftest.StandaloneCluster``: a master and one-core
  workers on 127.0.0.1) of one worker and of two. Target: two workers ≥ 1.6× the throughput
  of one (the one-worker wall / the two-worker wall).

Each replay runs as a subprocess sampled like ``bench/bench_replay.py`` (wall seconds, peak RSS
of the driver JVM + Python driver, CPU the other processes of the machine used:
``other_cpu_cores``). It prints one table and the target ratios, and writes them to
``bench/results/<YYYY-MM-DD>-targets.json``. ``--profile`` also replays the two slow sides
(many producers, one hot topic) once under ``py-spy`` and prints the top functions
(not timed). Numbers are not asserted anywhere: the targets are read, not tested.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_replay as br  # noqa: E402 - found through the sys.path entry above

from pipelines.workload.generator import generate, load_spec  # noqa: E402 - as above

MANY_MESSAGES = 1_000_000
MANY_PRODUCERS = 100_000
FEW_PRODUCERS = 50
MANY_RATE = 1500.0
"""msg/s of the many-producers topic (``orders`` in ``bench/workload.yaml``)."""
HOT_MESSAGES = 6_000_000
HOT_RATE = br.TOTAL_RATE
HOT_TOPICS = 3
TOPICS_MESSAGES = 1_020_000
TOPICS_RATE = 1700.0
"""msg/s of the many-topics workloads, spread evenly over their topics."""
TOPIC_COUNTS = (3, 1000, 10_000)
TOPICS_SETS = ("replay.consumer_window_s=600",)
"""Replay overrides of the many-topics and scale-out workloads (issue #30's runs)."""
CLUSTER_WORKLOADS = {"cluster-1-worker": 1, "cluster-2-workers": 2}
"""Scale-out workloads: the ``topics-1000`` input on a standalone cluster of this many
one-core workers."""

LIMITS = {
    "many_producers_spark": 1.5,
    "many_producers_local": 1.5,
    "many_producers_driver_rss": 1.2,
    "hot_topic_spark": 1.15,
    "topics_1000_spark": 1.3,
    "topics_10000_spark": 1.5,
    "topics_driver_rss": 1.3,
    "scale_out_2_workers": 1 / 1.6,
}
PAIRS = (
    # (target key, label, slow workload, reference workload, measure)
    ("many_producers_spark", "many producers: Spark replay wall", "producers-many",
     "producers-50", "spark_wall"),
    ("many_producers_local", "many producers: in-process wall", "producers-many",
     "producers-50", "local_wall"),
    ("many_producers_driver_rss", "many producers: Spark driver peak RSS", "producers-many",
     "producers-50", "spark_driver"),
    ("hot_topic_spark", "hot topic: Spark replay wall (1 topic / 3 topics)", "hot-1-topic",
     "hot-3-topics", "spark_wall"),
    ("topics_1000_spark", "many topics: Spark replay wall (1,000 topics / 3)", "topics-1000",
     "topics-3", "spark_wall"),
    ("topics_10000_spark", "many topics: Spark replay wall (10,000 topics / 3)",
     "topics-10000", "topics-3", "spark_wall"),
    ("topics_driver_rss", "many topics: Spark driver peak RSS (10,000 topics / 3)",
     "topics-10000", "topics-3", "spark_driver"),
    ("scale_out_2_workers", "scale-out: wall on 2 one-core workers / on 1 (<= 1/1.6)",
     "cluster-2-workers", "cluster-1-worker", "spark_wall"),
)
TOPIC_WORKLOADS = tuple(f"topics-{n}" for n in TOPIC_COUNTS)
WORKLOADS = ("producers-50", "producers-many", "hot-1-topic", "hot-3-topics",
             *TOPIC_WORKLOADS, *CLUSTER_WORKLOADS)


def parse_scale(text: str) -> float:
    """``"0.1"`` → ``0.1``. Raises ``ValueError`` (one sentence) unless ``0 < scale <= 10``."""
    try:
        scale = float(text)
    except ValueError:
        raise ValueError(f"--targets-scale {text!r} is not a number like 0.1 or 1") from None
    if not 0 < scale <= 10:
        raise ValueError(f"--targets-scale {text!r} must be in (0, 10]")
    return scale


def target_specs(scale: float, base: Any) -> dict[str, Any]:
    """The four target workloads at ``scale`` as generator ``WorkloadSpec`` objects, keyed by
    :data:`WORKLOADS` name, derived from ``base`` (the ``bench/workload.yaml`` spec; its first
    topic, ``orders``, gives keys and payloads).

    ``producers-50`` / ``producers-many``: one topic ``orders`` at :data:`MANY_RATE` msg/s for
    ``round(1 M × scale / rate)`` s, from 50 / ``max(50, round(100,000 × scale))`` producers.
    ``hot-1-topic`` / ``hot-3-topics``: :data:`HOT_RATE` msg/s for ``round(6 M × scale / rate)``
    s in topic ``hot`` / in ``hot-0..2`` at a third each; producers ``producer-0..49`` (split
    17/17/16). ``topics-<n>`` (:data:`TOPIC_COUNTS`): :data:`TOPICS_RATE` msg/s for
    ``round(1.02 M × scale / rate)`` s spread evenly over ``t00000..`` topics, 2 producers
    each (the scale-out workloads replay ``topics-1000``'s input). Raises ``ValueError`` for
    a scale outside ``(0, 10]``.
    """
    if not 0 < scale <= 10:
        raise ValueError(f"targets scale {scale!r} must be in (0, 10]")
    orders = base.topics[0]
    many_s = max(1, round(MANY_MESSAGES * scale / MANY_RATE))
    hot_s = max(1, round(HOT_MESSAGES * scale / HOT_RATE))

    def topic(name: str, rate: float, producers: int | list[str]) -> Any:
        return orders.model_copy(update={
            "name": name, "producers": producers,
            "rate": orders.rate.model_copy(update={"msg_rate": rate})})

    names = [f"producer-{i}" for i in range(FEW_PRODUCERS)]
    share = [names[i::HOT_TOPICS] for i in range(HOT_TOPICS)]
    many = max(FEW_PRODUCERS, round(MANY_PRODUCERS * scale))
    topics_s = max(1, round(TOPICS_MESSAGES * scale / TOPICS_RATE))
    spread = {f"topics-{n}": base.model_copy(update={
        "duration_s": topics_s,
        "topics": [topic(f"t{i:05d}", TOPICS_RATE / n, 2) for i in range(n)]})
        for n in TOPIC_COUNTS}
    return {
        **spread,
        "producers-50": base.model_copy(update={
            "duration_s": many_s, "topics": [topic("orders", MANY_RATE, FEW_PRODUCERS)]}),
        "producers-many": base.model_copy(update={
            "duration_s": many_s, "topics": [topic("orders", MANY_RATE, many)]}),
        "hot-1-topic": base.model_copy(update={
            "duration_s": hot_s, "topics": [topic("hot", HOT_RATE, names)]}),
        "hot-3-topics": base.model_copy(update={
            "duration_s": hot_s,
            "topics": [topic(f"hot-{i}", HOT_RATE / HOT_TOPICS, share[i])
                       for i in range(HOT_TOPICS)]}),
    }


def measures(run: Mapping[str, Any]) -> dict[str, float | None]:
    """``{spark_wall, local_wall, spark_driver}`` of one workload's result (seconds, MB);
    ``None`` for a side that is missing or failed."""
    spark = run.get("spark") or {}
    ok = br.ok_wall_s(spark) is not None
    return {"spark_wall": br.ok_wall_s(spark), "local_wall": br.ok_wall_s(run.get("local")),
            "spark_driver": (spark.get("rss_mb") or {}).get("driver") if ok else None}


def evaluate(runs: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The issue's scale-out targets over ``runs`` (workload name → result): each
    ``{target, label, value, limit, met}``, value = slow side / reference side (rounded to
    3 places), ``met`` ``None`` when either side is missing."""
    out = []
    for key, text, slow, ref, what in PAIRS:
        a = measures(runs.get(slow) or {})[what]
        b = measures(runs.get(ref) or {})[what]
        value = br.ratio_of(a, b)
        out.append({"target": key, "label": text, "value": value, "limit": LIMITS[key],
                    "met": None if value is None else value <= LIMITS[key]})
    return out


def format_targets(doc: Mapping[str, Any]) -> str:
    """Readable table and target lines of a results document (see :func:`main`)."""
    head = (f"{'workload':>15} {'messages':>10} {'producers':>9} {'topics':>6} {'spark s':>8} "
            f"{'in-proc s':>9} {'driver MB':>9} {'workers MB':>10} {'in-proc MB':>10} "
            f"{'other cores':>11} {'out files':>9}")
    sets = "".join(f", --set {o}" for o in doc.get("overrides") or [])
    lines = [f"scale-out targets (issues #16, #30), scale {doc['scale']:g}{sets}", head,
             "-" * len(head)]
    for name in WORKLOADS:
        r = doc["runs"].get(name)
        if not r:
            continue
        sp, loc = r.get("spark") or {}, r.get("local") or {}
        loc_txt = (br.fmt_value(loc.get("wall_s")) if loc.get("status") == "ok"
                   else str(loc.get("status", "n/a"))[:9])
        lines.append(
            f"{name:>15} {r['messages']:>10,} {r['producers']:>9,} {r['topics']:>6} "
            f"{br.fmt_value(br.ok_wall_s(sp)):>8} {loc_txt:>9} "
            f"{br.fmt_value((sp.get('rss_mb') or {}).get('driver'), '.0f'):>9} "
            f"{br.fmt_value((sp.get('rss_mb') or {}).get('workers'), '.0f'):>10} "
            f"{br.fmt_value((loc.get('rss_mb') or {}).get('total'), '.0f'):>10} "
            f"{br.fmt_value(sp.get('other_cpu_cores'), '.2f'):>11} "
            f"{br.fmt_value(sp.get('output_files'), '.0f'):>9}")
    lines.append("")
    head2 = f"{'workload':>15} " + " ".join(f"{br.STAGE_LABELS[k]:>13}" for k in br.STAGES) + \
        f" {'other':>8} {'replay wall':>11}   (Spark replay, seconds)"
    lines += [head2, "-" * len(head2)]
    for name in WORKLOADS:
        st = ((doc["runs"].get(name) or {}).get("spark") or {}).get("stages_s") or {}
        if name in doc["runs"]:
            lines.append(f"{name:>15} " + " ".join(f"{br.fmt_value(st.get(k)):>13}"
                                                   for k in br.STAGES)
                         + f" {br.fmt_value(st.get('other')):>8}"
                         + f" {br.fmt_value(st.get('wall')):>11}")
    lines.append("")
    for t in doc["targets"]:
        mark = {True: "MET   ", False: "MISSED", None: "n/a   "}[t["met"]]
        lines.append(f"  [{mark}] {t['label']}: {br.fmt_value(t['value'], '.2f', 'x')} "
                     f"(limit <= {t['limit']:g}x)")
    return "\n".join(lines)


def run_workload(name: str, spec: Any, data_dir: Path, cli: Path, local: bool,  # noqa: PLR0913
                 log: Callable[[str], None], timeout_s: float | None,
                 overrides: Sequence[str] = (), cluster: Any = None) -> dict[str, Any]:
    """Generate ``spec`` into ``<data_dir>/target-<name>`` and replay it with Spark (and the
    in-process engine when ``local``); returns ``{messages, producers, topics, input, spark,
    local}`` (jobs as :func:`bench_replay.run_measured` results, the Spark one with
    ``stages_s`` and ``counts``). ``overrides``: extra ``--set KEY=VALUE`` of both replays.
    ``cluster``: a started ``StandaloneCluster`` to replay on (``--master``; the input is
    generated only when not there yet: the scale-out pair shares one)."""

    folder = data_dir / f"target-{name}"
    producers = sum(len(t.producer_names) for t in spec.topics)
    out: dict[str, Any] = {"producers": producers, "topics": len(spec.topics),
                           "duration_s": spec.duration_s}
    if cluster is None or not (folder / ".generated").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        log(f"[{name}] generating input ...")
        res = generate(spec, folder)
        (folder / ".generated").write_text(str(res.messages))
        out["input"] = {"files": len(res.files), "bytes": res.bytes}
    out["messages"] = int((folder / ".generated").read_text())
    log(f"[{name}]   {out['messages']:,} messages, {producers:,} producers, "
        f"{len(spec.topics)} topic(s)")
    logs = data_dir / "logs"
    run_id = f"target-{name}"
    for engine in ("spark", "local"):
        if engine == "local" and not local:
            out["local"] = {"status": "skipped (--no-local)"}
            continue
        dest = data_dir / f"target-{name}-{engine}"
        shutil.rmtree(dest, ignore_errors=True)
        log(f"[{name}] {engine} replay ...")
        cmd = br.replay_cmd(cli, folder, dest, run_id, None if engine == "spark" else "local")
        for item in overrides:
            cmd += ["--set", item]
        if cluster is not None:
            cmd += ["--master", cluster.master_url]
        job = br.run_measured(cmd, logs / f"target-{name}-{engine}.log",
                              env=None if cluster is None else cluster.env(),
                              timeout_s=timeout_s)
        if job["status"] == "ok":
            try:
                job["counts"] = br.read_counts(dest, run_id)
                if engine == "spark":
                    job["stages_s"] = br.read_stage_timings(dest, run_id)
                    job["output_files"] = sum(1 for p in dest.rglob("*.parquet")
                                              if "_work" not in p.parts)
            except Exception as exc:
                job["counts"] = {"error": str(exc)[:200]}
            accepted = job["counts"].get("accepted")
            if accepted is not None and accepted != out["messages"]:
                job["status"] = f"wrong count: accepted {accepted} of {out['messages']}"
        log(f"[{name}]   {job['status']} in {job['wall_s']} s "
            f"(driver {job['rss_mb']['driver']:.0f} MB, other cores {job['other_cpu_cores']})")
        out[engine] = job
        shutil.rmtree(dest, ignore_errors=True)
    return out


def run_on_cluster(name: str, workers: int, spec: Any, data_dir: Path, cli: Path,
                   log: Callable[[str], None], timeout_s: float | None,
                   overrides: Sequence[str]) -> dict[str, Any]:
    """:func:`run_workload` of ``spec`` (the ``topics-1000`` input) on a standalone cluster of
    ``workers`` one-core workers (the cluster test's ``StandaloneCluster``), started for it and
    stopped after."""
    from tests.guarantees.conftest import StandaloneCluster  # noqa: PLC0415 - pytest's, bench only

    root = data_dir / f"cluster-{name}"
    shutil.rmtree(root, ignore_errors=True)
    with StandaloneCluster(root, workers=workers, cores=1, memory="2g") as cluster:
        result = run_workload(name, spec, data_dir, cli, False, log, timeout_s,
                              overrides, cluster=cluster)
    shutil.rmtree(root, ignore_errors=True)
    return result


def profile_workload(name: str, data_dir: Path, cli: Path,
                     log: Callable[[str], None]) -> dict[str, Any]:
    """Replay the already generated ``target-<name>`` input once under ``py-spy record
    --subprocesses`` (driver and Python workers; not timed) and summarize it with
    :func:`bench_replay.summarize_pyspy_raw`."""
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        return {"status": "n/a (py-spy not installed: pip install -e '.[bench]')"}
    folder = data_dir / f"target-{name}"
    dest = data_dir / f"target-{name}-profile"
    raw = data_dir / f"target-{name}-profile.txt"
    shutil.rmtree(dest, ignore_errors=True)
    log(f"[{name}] profiling the Spark replay with py-spy ...")
    cmd = [spy, "record", "--subprocesses", "--nonblocking", "--rate", "25", "--format", "raw",
           "--output", str(raw), "--",
           *br.replay_cmd(cli, folder, dest, f"target-{name}-profile", None)]
    job = br.run_measured(cmd, data_dir / "logs" / f"target-{name}-profile.log")
    shutil.rmtree(dest, ignore_errors=True)
    if job["status"] != "ok" or not raw.is_file():
        return {"status": job["status"]}
    return {"status": "ok", "wall_s_under_pyspy": job["wall_s"],
            **br.summarize_pyspy_raw(raw.read_text(errors="replace"))}


def _print_profile(name: str, prof: Mapping[str, Any]) -> None:
    """A workload's py-spy profile: the top functions by own time, then this project's by total
    time (or why there is none)."""
    if prof.get("status") != "ok":
        print(f"\nprofile of {name}: {prof.get('status')}")
        return
    print(f"\nprofile of {name} (py-spy, {prof['samples']} samples), top by own time:")
    for fn, share in prof["self"][:10]:
        print(f"  {share * 100:5.1f}%  {fn}")
    print("  this project's functions, by total time:")
    for fn, share in prof["project_total"][:8]:
        print(f"  {share * 100:5.1f}%  {fn}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets-scale", default=os.environ.get("BENCH_TARGETS_SCALE", "1"),
                        help="size factor of the workloads (1 = the issue's 1 M / 6 M "
                        "messages; env BENCH_TARGETS_SCALE)")
    parser.add_argument("--data", type=Path, default=Path(os.environ.get(
        "BENCH_DATA", ROOT / "bench" / ".data")), help="scratch folder for inputs and outputs")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results",
                        help="folder of the <YYYY-MM-DD>-targets.json results")
    parser.add_argument("--only", default="", help="comma-separated workloads to run "
                        f"(default all: {', '.join(WORKLOADS)})")
    parser.add_argument("--no-local", action="store_true",
                        help="skip the in-process reference replays")
    parser.add_argument("--profile", action="store_true",
                        help="also profile producers-many and hot-1-topic with py-spy")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="extra replay config override, e.g. "
                        "output.engine=delta-rs (repeatable)")
    parser.add_argument("--timeout", type=float, default=float(os.environ.get(
        "BENCH_TIMEOUT_S", 0)) or None, help="kill a job after this many seconds")
    return parser


def _run_named(name: str, specs: Mapping[str, Any], args: argparse.Namespace, cli: Path,
               local: bool, say: Callable[[str], None]) -> dict[str, Any]:
    """Workload ``name`` run as its kind wants: on a standalone cluster (scale-out), with the
    many-topics settings and no in-process replay (many topics), or as it is."""
    if name in CLUSTER_WORKLOADS:
        return run_on_cluster(name, CLUSTER_WORKLOADS[name], specs["topics-1000"], args.data,
                              cli, say, args.timeout, [*TOPICS_SETS, *args.overrides])
    if name in TOPIC_WORKLOADS:
        return run_workload(name, specs[name], args.data, cli, False, say, args.timeout,
                            [*TOPICS_SETS, *args.overrides])
    return run_workload(name, specs[name], args.data, cli, local, say, args.timeout,
                        args.overrides)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        scale = parse_scale(str(args.targets_scale))
        only = [w.strip() for w in args.only.split(",") if w.strip()] or list(WORKLOADS)
        unknown = sorted(set(only) - set(WORKLOADS))
        if unknown:
            raise ValueError(f"--only names unknown workloads {unknown} "
                             f"(known: {', '.join(WORKLOADS)})")
    except ValueError as exc:
        print(f"bench-targets: error: {exc}", file=sys.stderr)
        return 2

    cli = Path(sys.executable).parent / "topic-replay"
    local = not args.no_local and br.local_engine_available(cli)
    specs = target_specs(scale, load_spec(ROOT / "bench" / "workload.yaml"))
    machine = br.machine_info()

    def say(msg: str) -> None:
        print(msg, flush=True)

    say(f"scale-out targets: scale {scale:g}, workloads {', '.join(only)}; in-process engine "
        f"{'yes' if local else 'no'}")
    args.results.mkdir(parents=True, exist_ok=True)
    path = args.results / f"{datetime.now(UTC):%Y-%m-%d}-targets.json"
    runs: dict[str, Any] = {}
    doc: dict[str, Any] = {}
    profiles: dict[str, Any] = {}
    for name in only:
        runs[name] = _run_named(name, specs, args, cli, local, say)
        machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        doc = {"benchmark": "scale-out targets (issues #16, #30)", "scale": scale,
               "overrides": list(args.overrides),
               "machine": machine, "runs": runs, "targets": evaluate(runs),
               "profiles": profiles}
        br.write_results(path, doc)
    if args.profile:
        for name in ("producers-many", "hot-1-topic"):
            if name in runs:
                profiles[name] = profile_workload(name, args.data, cli, say)
        br.write_results(path, doc)
    print()
    print(format_targets(doc))
    for name, prof in profiles.items():
        _print_profile(name, prof)
    print(f"\nresults: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0 if all(br.ok_wall_s(r.get("spark")) is not None for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
