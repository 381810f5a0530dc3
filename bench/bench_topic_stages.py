"""The emulation operators' per-window work over many topics, in one process (issue #30).

Run from the project root::

    .venv/bin/python bench/bench_topic_stages.py [--messages 204000] [--topics 3,1000] \
        [--span-s 120]

The same messages (Zipf keys, 2 producers per topic, ``--span-s`` of event time: 120 s by
default; the replay bench's workload spans 600 s, so 5x more control events per topic) over each
topic count, one window (end of input), ``bins`` topic bins and ``shards`` producer shards as
the Spark operators key them, through the control plane, batching and dispatch twice: as the
operators did before issue #30's columnar pass (a loop of per-topic calls: ``control_group``,
``batch_topic``, ``dispatch_group``, the local engine's functions) and as they do now (one call
per key and window: ``control_topics``, ``batch_topics``, ``dispatch_topics``); after the one
pass, the run's answers (``topic_profile`` and ``findings`` from those stages' rows, as the
driver computes them after the last window). ``--one-pass-only`` skips the per-topic calls (slow
at 10,000 topics). Prints CPU seconds (``time.process_time``: unlike wall time, not inflated by
other processes on a shared machine) per stage. No Spark, no files: the operators' state-store
round trips and hand-over files are not counted.
"""

from __future__ import annotations

import argparse
import pickle
import time

import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines.contract.config import load_config
from pipelines.engine import findings, stages
from pipelines.ingest.rules import key_hashes_arrow
from pipelines.spark.handover import producer_shard
from pipelines.storage.staging import arrow_strings, topic_bin

SPAN_MS = 120_000
START_MS = 1_700_000_000_000


def messages(n: int, topics: int, seed: int = 1, span_ms: int = SPAN_MS) -> pd.DataFrame:
    """``n`` staged messages over ``topics`` topics (as the stages read them), spread uniformly
    over ``span_ms`` of event time."""
    rng = np.random.default_rng(seed)
    t = np.sort(START_MS + rng.integers(0, span_ms, n))
    topic = rng.integers(0, topics, n)
    keys = pa.array([f"k{k}" for k in rng.zipf(1.2, n) % 5000])
    h = key_hashes_arrow(keys)
    names = [f"t{x:05d}" for x in topic]
    return pa.table({
        "topic": names, "key": keys,
        "producer_name": [f"{x}-p{p}" for x, p in zip(names, rng.integers(0, 2, n), strict=True)],
        "sequence_id": pa.nulls(n, pa.int64()),
        "publish_time": pa.array(t * 1000, pa.timestamp("us", tz="UTC")),
        "payload_size": rng.integers(50, 2000, n), "event_ms": t,
        "hash32": h.field("hash32"), "segment_hash": h.field("segment_hash"),
        "hash_b": h.field("hash_b")}).to_pandas(types_mapper=arrow_strings)


def _groups(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {str(t): g for t, g in frame.groupby("topic", sort=True, observed=True)}


def control(pdf: pd.DataFrame, topics: list[str], settings: stages.StageSettings,
            one_pass: bool) -> tuple[pd.DataFrame, stages.ControlResult]:
    if one_pass:
        routed, ctls = stages.control_topics(pdf, dict.fromkeys(topics), settings, None, True)
    else:
        groups, parts, ctls = _groups(pdf), [], {}
        for t in topics:
            r, ctls[t] = stages.control_group(t, groups[t], None, settings, None, True)
            parts.append(r)
        routed = pd.concat(parts, ignore_index=True)
    return routed, stages.control_outputs(ctls, settings.speed)


def batching(part: pd.DataFrame, topics: list[str], settings: stages.StageSettings,
             layouts: dict, one_pass: bool) -> pd.DataFrame:
    if one_pass:
        _, e, _ = stages.batch_topics(part, dict.fromkeys(topics), settings.batching(),
                                      {t: layouts.get(t) for t in topics}, None, True)
        return stages.entry_frame(None, e, settings.speed)
    groups, es = _groups(part), []
    for t in topics:  # as the operator did: a call per topic, the entries converted once
        _, e, _ = stages.batch_topic(groups[t], None, settings.batching(), layouts.get(t),
                                     None, True)
        es.append(e.assign(topic=t))
    return stages.entry_frame(None, pd.concat(es, ignore_index=True), settings.speed)


def dispatch(entries: pd.DataFrame, topics: list[str], settings: stages.StageSettings,
             layouts: dict, one_pass: bool) -> list[dict[str, pd.DataFrame]]:
    out = []
    for d in range(len(stages.new_dispatchers(settings))):
        blob = pickle.dumps(([stages.new_dispatchers(settings)[d]], -1))
        if one_pass:  # as the operator: topics without state get a new dispatcher
            frames, _ = stages.dispatch_topics(entries, dict.fromkeys(topics), settings,
                                               {t: layouts[t] for t in topics}, None, True,
                                               dispatcher=d)
            out.append(frames)
        else:
            groups = _groups(entries)
            for t in topics:
                stages.dispatch_group(t, groups[t], blob, settings, layouts[t], None, True)
    return out


def answers(settings: stages.StageSettings, results: list[stages.ControlResult],
            entries: list[pd.DataFrame], frames: list[dict[str, pd.DataFrame]]) -> float:
    """CPU seconds of the run's answers (``topic_profile`` and ``findings``, computed on the
    driver after the last window) from the stages' rows, as the replay reads them back."""
    def joined(parts: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat([p for p in parts if len(p)], ignore_index=True) \
            if any(len(p) for p in parts) else pd.DataFrame(columns=["topic"])

    e = joined(entries)
    totals = e.groupby("topic").agg(n=("topic", "size"), m=("num_messages", "sum"),
                                    p=("producer_name", "nunique"))
    data = findings.RunData(
        settings.config, joined([r.key_profiles for r in results]),
        joined([r.samples for r in results]), joined([r.decisions for r in results]),
        joined([r.segments for r in results]), joined([f["consumer_load"] for f in frames]),
        joined([f["handoff"] for f in frames]), joined([f["segment_drain"] for f in frames]),
        {str(t): (int(r.n), int(r.m), int(r.p)) for t, r in totals.iterrows()})
    c0 = time.process_time()
    findings.finding_rows(data, findings.profile_rows(data))
    return time.process_time() - c0


def run(df: pd.DataFrame, settings: stages.StageSettings, bins: int, shards: int,
        one_pass: bool) -> dict[str, float]:
    """CPU seconds per stage of every key's one window."""
    sec = {"control": 0.0, "batching": 0.0, "dispatch": 0.0}
    results, entries, frames = [], [], []
    of_bin = np.array([topic_bin(t, bins) for t in df["topic"].astype(object)])
    for b in range(bins):
        pdf = df[of_bin == b].reset_index(drop=True)
        topics = sorted(set(pdf["topic"].astype(object)))
        if not topics:
            continue
        c0 = time.process_time()
        routed, result = control(pdf, topics, settings, one_pass)
        sec["control"] += time.process_time() - c0
        results.append(result)
        shard = producer_shard(routed["producer_name"], shards)
        parts = []
        for s in range(shards):
            part = routed[shard == s].reset_index(drop=True)
            mine = sorted(set(part["topic"].astype(object)))
            if mine:
                c0 = time.process_time()
                parts.append(batching(part, mine, settings, result.layouts, one_pass))
                sec["batching"] += time.process_time() - c0
        c0 = time.process_time()
        entries += parts
        frames += dispatch(pd.concat(parts, ignore_index=True), topics, settings,
                           result.layouts, one_pass)
        sec["dispatch"] += time.process_time() - c0
    if one_pass:  # the answers are the same function after either
        sec["answers"] = answers(settings, results, entries, frames)
    return sec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=204_000)
    parser.add_argument("--topics", default="3,1000")
    parser.add_argument("--bins", type=int, default=4)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--span-s", type=int, default=SPAN_MS // 1000,
                        help="event-time span of the messages (s)")
    parser.add_argument("--one-pass-only", action="store_true")
    args = parser.parse_args()
    settings = stages.StageSettings.from_config(
        load_config(None, ["replay.consumer_window_s=600"]), None)
    for topics in (int(t) for t in args.topics.split(",")):
        df = messages(args.messages, topics, span_ms=args.span_s * 1000)
        for one_pass in (True,) if args.one_pass_only else (False, True):
            sec = run(df, settings, args.bins, args.shards, one_pass)
            label = "one pass per key" if one_pass else "per-topic calls"
            print(f"{topics:>6} topics  {label:<17} "
                  + "  ".join(f"{k} {v:6.2f}" for k, v in sec.items())
                  + f"  total {sum(sec.values()):6.2f} CPU s", flush=True)


if __name__ == "__main__":
    main()
