"""What the report's figures (:mod:`pipelines.analysis.figures`) show, computed apart from how
they are drawn: which topics a figure draws, the thresholds in force for a topic, the segment
DAG's edges, timestamps ready to plot, and the colours of what created a segment."""

from __future__ import annotations

from typing import Any

import pandas as pd

from pipelines.analysis.run_tables import RunTables
from pipelines.contract.config import parse_config

MAX_TOPICS = 6
"""Most topics drawn individually in per-topic figures (the busiest; the rest are summed)."""

CREATED_BY_COLOR = {"initial": "#c7c7c7", "split": "#f4a582", "merge": "#92c5de",
                    "rebucket": "#a6dba0"}
"""A segment's colour by ``created_by``."""


def naive_utc(ts: Any) -> Any:
    """UTC timestamps (Series or scalar) as naive UTC datetimes (what Plotly's
    date axes read without shifting them to a local zone)."""
    if isinstance(ts, pd.Series):
        return ts.dt.tz_convert("UTC").dt.tz_localize(None) if ts.dt.tz is not None else ts
    t = pd.Timestamp(ts)
    return t.tz_convert("UTC").tz_localize(None) if t.tzinfo is not None else t


def busiest_topics(tables: RunTables, n: int = MAX_TOPICS) -> list[str]:
    """Topics by messages (from ``entries``), busiest first; then any with segments only; at
    most ``n``."""
    by_msgs = (tables.entries.groupby("topic")["num_messages"].sum()
               .sort_values(ascending=False, kind="stable"))
    topics = [str(t) for t in by_msgs.index]
    topics += sorted(set(map(str, tables.segments["topic"])) - set(topics))
    return topics[:n]


def topics_by_segments(tables: RunTables, n: int = MAX_TOPICS) -> list[str]:
    """Topics with the most segments first (ties: busiest first, then by name), at most ``n``:
    the topics the layout and DAG figures draw."""
    seg = tables.segments
    if seg.empty:
        return []
    counts = seg.groupby("topic").size()
    busy = {t: i for i, t in enumerate(busiest_topics(tables, n=len(counts)))}
    order = sorted(counts.index, key=lambda t: (-int(counts[t]), busy.get(str(t), 0), str(t)))
    return [str(t) for t in order[:n]]


def rate_topics(tables: RunTables, max_topics: int) -> list[str]:
    """The busiest topics with load samples (``segment_load``), at most ``max_topics``: the
    topics the rates figures draw."""
    load = tables.segment_load
    present = set(map(str, load["topic"])) if len(load) else set()
    return [t for t in busiest_topics(tables, n=10 ** 6) if t in present][:max_topics]


def topic_policy(config: dict[str, Any], topic: str) -> dict[str, Any]:
    """The resolved auto-scale policy of ``topic`` (a run's config, overrides resolved) as a
    dict (field → value); the broker-level section as stored when the config cannot be parsed
    (another version's config)."""
    try:
        policy = parse_config(config).policy_for(topic)
        return {f: getattr(policy, f) for f in type(policy).field_names()}
    except Exception:
        return {k: v for k, v in config.get("policy", {}).items() if not isinstance(v, dict)}


def dag_edges(segments: pd.DataFrame) -> list[tuple[int, int]]:
    """``(parent, child)`` segment ids of one topic's segments (split: one to two, merge: two
    to one, rebucket: one to one); parents not among ``segments`` are left out."""
    ids = {int(s) for s in segments["segment_id"]}
    return [(int(p), int(s)) for s, parents in zip(segments["segment_id"],
                                                   segments["parent_ids"], strict=True)
            for p in parents if int(p) in ids]
