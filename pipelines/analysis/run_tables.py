"""A finished run read back from its output tables (:class:`RunTables`, delta-rs, no Spark),
the frames derived from them (layout timeline, drain times, withheld intervals, consumer
shares) and its metrics (:func:`run_metrics`, :data:`METRICS`): what the report, the
comparison of what-if scenarios (:mod:`pipelines.analysis.whatif`) and a sweep's rows all read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from pipelines.analysis.windows import WindowSettings, window_index, window_settings
from pipelines.core.dispatch import reader_subscription
from pipelines.engine.summary import run_summary
from pipelines.storage.delta import DeltaStore

METRICS: tuple[tuple[str, str], ...] = (
    ("accepted", "messages accepted"),
    ("quarantined", "records quarantined"),
    ("topics", "topics"),
    ("segments_max", "active segments, max (all topics)"),
    ("segments_final", "active segments, final"),
    ("segments_created", "segments created"),
    ("buckets_max", "entry buckets, max (all topics)"),
    ("buckets_final", "entry buckets, final"),
    ("splits", "splits"),
    ("merges", "merges"),
    ("rebuckets", "rebuckets"),
    ("suppressed", "suppressed evaluations"),
    ("batching_mode", "batching mode"),
    ("bucket_budget", "bucket budget T"),
    ("entries", "entries"),
    ("entries_per_message", "entries per message"),
    ("mean_batch_size", "mean batch size (messages/entry)"),
    ("mean_batch_bytes", "mean batch size (bytes/entry)"),
    ("consumers", "consumers (all subscriptions)"),
    ("max_consumer_share", "max consumer share of its subscription"),
    ("idle_consumers", "idle consumers (no message in the run)"),
    ("handoffs", "bucket handoffs"),
    ("withheld_bucket_s", "withheld bucket-seconds (handoffs)"),
    ("sealed_segments", "sealed segments"),
    ("drain_max_s", "sealed-segment drain time, max (s)"),
    ("undrained_segments", "sealed segments not drained at end"),
)
"""Metric key → label, in the order of the side-by-side table."""


@dataclass
class RunTables:
    """The output tables of one run as pandas frames (columns of
    :mod:`pipelines.contract.schemas`)."""

    run_id: str
    store: DeltaStore
    runs: pd.DataFrame
    segments: pd.DataFrame
    decisions: pd.DataFrame
    segment_load: pd.DataFrame
    entries: pd.DataFrame
    dispatch: pd.DataFrame
    consumer_load: pd.DataFrame
    handoffs: pd.DataFrame
    drains: pd.DataFrame = field(default_factory=pd.DataFrame)

    @classmethod
    def load(cls, store: DeltaStore, run_id: str) -> RunTables:
        """Read every table but ``messages`` and ``quarantine`` for ``run_id``."""
        def read(table: str) -> pd.DataFrame:
            return store.read(table, run_id=run_id)

        return cls(run_id, store, read("runs"), read("segments"), read("autoscale_decisions"),
                   read("segment_load"), read("entries"), read("dispatch"),
                   read("consumer_load"), read("bucket_handoffs"), read("segment_drains"))

    @property
    def config(self) -> dict[str, Any]:
        """The run's config (``runs.config``, JSON) as a dict; ``{}`` when unknown."""
        if self.runs.empty:
            return {}
        return dict(json.loads(self.runs["config"].iloc[-1]))

    @property
    def windows(self) -> WindowSettings | None:
        """The run's ``consumer_load`` window grid (:func:`window_settings`); ``None`` when the
        config is unknown (the windowed tables are then read as they are, without idle
        windows)."""
        try:
            return window_settings(self.config)
        except (KeyError, TypeError):
            return None

    @property
    def end_time(self) -> pd.Timestamp | None:
        """Last event time of the run (latest entry publish, ack or load sample), UTC."""
        times = [self.entries["publish_time"].max(), self.dispatch["ack_time"].max(),
                 self.segment_load["sample_time"].max(), self.segments["created_at"].max()]
        times = [t for t in times if pd.notna(t)]
        return max(times) if times else None


def layout_timeline(segments: pd.DataFrame) -> pd.DataFrame:
    """Active segments and entry buckets per topic after each layout change.

    ``segments``: the ``segments`` table. Returns columns ``topic``, ``time`` (UTC),
    ``active_segments``, ``buckets`` — one row per (topic, time at which a segment was created or
    sealed), the counts in force from that time on (changes at the same instant are applied
    together, so a split never shows a transient extra segment).
    """
    if segments.empty:
        return pd.DataFrame(columns=["topic", "time", "active_segments", "buckets"])
    born = segments[["topic", "created_at", "bucket_count"]].rename(columns={"created_at": "time"})
    born = born.assign(d_seg=1, d_buckets=born["bucket_count"].astype("int64"))
    sealed = segments[segments["sealed_at"].notna()]
    died = sealed[["topic", "sealed_at", "bucket_count"]].rename(columns={"sealed_at": "time"})
    died = died.assign(d_seg=-1, d_buckets=-died["bucket_count"].astype("int64"))
    events = pd.concat([born, died], ignore_index=True)
    events = events.groupby(["topic", "time"], as_index=False)[["d_seg", "d_buckets"]].sum()
    events = events.sort_values(["topic", "time"])
    events["active_segments"] = events.groupby("topic")["d_seg"].cumsum()
    events["buckets"] = events.groupby("topic")["d_buckets"].cumsum()
    return events[["topic", "time", "active_segments", "buckets"]].reset_index(drop=True)


def total_timeline(timeline: pd.DataFrame) -> pd.DataFrame:
    """All topics summed: counts in force from each change time on."""
    if timeline.empty:
        return pd.DataFrame(columns=["time", "active_segments", "buckets"])
    wide = timeline.pivot_table(index="time", columns="topic",
                                values=["active_segments", "buckets"], aggfunc="last")
    wide = wide.sort_index().ffill().fillna(0)
    return pd.DataFrame({"active_segments": wide["active_segments"].sum(axis=1),
                         "buckets": wide["buckets"].sum(axis=1)}).reset_index()


def drain_times(tables: RunTables) -> pd.DataFrame:
    """Drain time of every sealed segment per subscription (PIP-486 use case 1), as the
    dispatcher recorded it (``segment_drains``, :class:`pipelines.core.dispatch.SegmentDrainRow`).

    Returns ``topic``, ``segment_id``, ``subscription``, ``sealed_at``, ``drained_at``,
    ``drain_s`` (seconds from ``sealed_at`` to ``drained_at``; NaN = not drained at end of
    input) and ``drained`` (bool): one row per sealed segment × subscription seen in
    ``dispatch`` or ``segment_drains``.
    """
    cols = ["topic", "segment_id", "subscription", "sealed_at", "drained_at", "drain_s",
            "drained"]
    sealed = tables.segments[tables.segments["sealed_at"].notna()] if len(
        tables.segments) else tables.segments
    drains = tables.drains
    subs = sorted((set(tables.dispatch["subscription"]) if len(tables.dispatch) else set())
                  | (set(drains["subscription"]) if len(drains) else set()))
    if sealed.empty or not subs:
        return pd.DataFrame(columns=cols)
    grid = sealed[["topic", "segment_id", "sealed_at"]].merge(
        pd.DataFrame({"subscription": subs}), how="cross")
    got = (drains[["topic", "segment_id", "subscription", "drained_at", "drain_ms"]]
           if len(drains) else pd.DataFrame(columns=["topic", "segment_id", "subscription",
                                                     "drained_at", "drain_ms"]))
    out = grid.merge(got, on=["topic", "segment_id", "subscription"], how="left")
    out["drained"] = out["drained_at"].notna()
    out["drain_s"] = pd.to_numeric(out["drain_ms"], errors="coerce") / 1000.0
    return out[cols].sort_values(["topic", "segment_id", "subscription"]).reset_index(drop=True)


def withheld_intervals(tables: RunTables) -> pd.DataFrame:
    """``bucket_handoffs`` with ``withheld_s`` (seconds the bucket was withheld; a handoff still
    withheld at end of input counts until :attr:`RunTables.end_time`) and ``open`` (bool)."""
    h = tables.handoffs.copy()
    if h.empty:
        return h.assign(withheld_s=pd.Series(dtype="float64"), open=pd.Series(dtype="bool"))
    end = tables.end_time
    h["open"] = h["withheld_until"].isna()
    until = h["withheld_until"].fillna(end) if end is not None else h["withheld_until"]
    h["withheld_s"] = (until - h["withheld_from"]).dt.total_seconds().clip(lower=0)
    return h


def consumer_shares(tables: RunTables) -> pd.DataFrame:
    """Per (subscription, consumer) over all topics: ``messages``, ``share`` of the
    subscription's messages (0..1), ``busy_ms`` and ``idle_ms`` (ms of the ``consumer_load``
    time base; per window busy = the sum over topics, capped at the connected time, and idle =
    connected - busy, connected = the longest over topics), ``windows`` (windows in which it was
    connected) and ``empty_windows`` (of those, with no message). The idle windows a replay
    leaves out (:mod:`pipelines.analysis.windows`) count as the previous row carried forward:
    connected all window, nothing delivered — the numbers of the dense table."""
    cl = tables.consumer_load
    cols = ["subscription", "consumer_name", "messages", "share", "busy_ms", "idle_ms",
            "windows", "empty_windows"]
    if cl.empty:
        return pd.DataFrame(columns=cols)
    grid = tables.windows if "topic" in cl.columns else None
    # consumer_load has one row per topic: per window, a consumer is connected for the longest of
    # its topics' (busy + idle), busy for the sum of its topics' busy time, idle for the rest.
    cl = cl.assign(connected_ms=cl["busy_ms"] + cl["idle_ms"],
                   _k=(window_index(cl, grid) if grid is not None
                       else pd.factorize(cl["window_start"], sort=True)[0]))
    per_window = cl.groupby(["subscription", "consumer_name", "_k"], as_index=False).agg(
        messages=("messages", "sum"), busy_ms=("busy_ms", "sum"),
        connected_ms=("connected_ms", "max"), rows=("messages", "size"))
    idle_windows = pd.Series(0, index=pd.MultiIndex.from_frame(
        per_window[["subscription", "consumer_name"]].drop_duplicates()), dtype="int64")
    if grid is not None:
        idle_windows = _carried_windows(cl, per_window, grid)
    per_window["busy_ms"] = per_window[["busy_ms", "connected_ms"]].min(axis=1)
    per_window["idle_ms"] = per_window["connected_ms"] - per_window["busy_ms"]
    g = per_window.groupby(["subscription", "consumer_name"]).agg(
        messages=("messages", "sum"), busy_ms=("busy_ms", "sum"), idle_ms=("idle_ms", "sum"),
        windows=("_k", "size"),
        empty_windows=("messages", lambda s: int((s == 0).sum())))
    carried = idle_windows.reindex(g.index, fill_value=0).to_numpy(np.int64)
    window_ms = grid.window_ms if grid is not None else 0
    g = g.assign(idle_ms=g["idle_ms"] + carried * window_ms, windows=g["windows"] + carried,
                 empty_windows=g["empty_windows"] + carried).reset_index()
    total = g.groupby("subscription")["messages"].transform("sum")
    g["share"] = (g["messages"] / total.where(total > 0)).fillna(0.0)
    return g[cols]


def _carried_windows(cl: pd.DataFrame, per_window: pd.DataFrame,
                     grid: WindowSettings) -> pd.Series:
    """For sparse ``consumer_load`` rows (with ``_k``, the window number): sets
    ``per_window.connected_ms`` to the whole window where some topic of the consumer carries an
    earlier row through it (a topic's series spans its first to its last row), and returns,
    per (subscription, consumer), the windows of those spans that have no row at all (each
    connected all window, nothing delivered)."""
    spans = cl.groupby(["topic", "subscription", "consumer_name"], as_index=False)["_k"].agg(
        first="min", last="max")
    carried: dict[tuple[str, str], int] = {}
    connected = per_window["connected_ms"].to_numpy(copy=True)
    for (sub, name), s in spans.groupby(["subscription", "consumer_name"]):
        at = np.flatnonzero(((per_window["subscription"] == sub)
                             & (per_window["consumer_name"] == name)).to_numpy())
        k = per_window["_k"].to_numpy()[at]
        first = np.sort(s["first"].to_numpy())
        last = np.sort(s["last"].to_numpy())
        spanning = (np.searchsorted(first, k, side="right")
                    - np.searchsorted(last, k, side="left"))
        gap = spanning > per_window["rows"].to_numpy()[at]
        connected[at[gap]] = grid.window_ms
        carried[(str(sub), str(name))] = _union_size(s["first"].to_numpy(),
                                                     s["last"].to_numpy()) - len(at)
    per_window["connected_ms"] = connected
    return pd.Series(carried, dtype="int64")


def _union_size(first: npt.NDArray[np.int64], last: npt.NDArray[np.int64]) -> int:
    """Windows in the union of the closed ranges ``[first[i], last[i]]``."""
    order = np.argsort(first, kind="stable")
    lo, hi = first[order], last[order]
    reach = np.maximum.accumulate(hi)
    # a range starts a new run when it begins after everything before it ends
    new = np.r_[True, lo[1:] > reach[:-1]]
    run = np.cumsum(new) - 1
    starts = lo[new]
    ends = np.zeros(len(starts), dtype=np.int64)
    np.maximum.at(ends, run, hi)
    return int((ends - starts + 1).sum())


def _configured_consumers(config: dict[str, Any]) -> list[tuple[str, str]]:
    """``(subscription, consumer)`` as the dispatch tables name them (an ungrouped checkpoint
    consumer under :func:`~pipelines.core.dispatch.reader_subscription`)."""
    return [(s["name"] if s.get("grouped", True) else reader_subscription(s["name"], c["name"]),
             c["name"])
            for s in config.get("subscriptions", []) for c in s.get("consumers", [])]


def run_metrics(tables: RunTables) -> dict[str, Any]:
    """The headline metrics of one run (keys of :data:`METRICS`), computed from its tables.

    Counts of records, actions and entries come from :func:`pipelines.engine.summary.run_summary`.
    Segments / buckets are summed over topics (max over time and at the end); batch sizes are
    ``num_messages`` / ``payload_bytes`` per entry; the consumer share is a consumer's part of
    its subscription's messages (max over consumers); an idle consumer is one configured but
    delivered no message; withheld bucket-seconds sum :func:`withheld_intervals`; drain times
    come from :func:`drain_times`. Missing data gives ``None`` (0 for counts).
    """
    summary = run_summary(tables.store, tables.run_id)
    config = tables.config
    total = total_timeline(layout_timeline(tables.segments))
    entries = tables.entries
    shares = consumer_shares(tables)
    configured = _configured_consumers(config)
    delivered = {(r.subscription, r.consumer_name) for r in shares.itertuples()
                 if r.messages > 0}
    consumers = sorted(set(configured) | {(r.subscription, r.consumer_name)
                                          for r in shares.itertuples()})
    withheld = withheld_intervals(tables)
    drains = drain_times(tables)
    per_segment = (drains.groupby(["topic", "segment_id"])
                   .agg(drain_s=("drain_s", "max"), drained=("drained", "all"))
                   if len(drains) else drains)
    n_msgs = int(entries["num_messages"].sum()) if len(entries) else 0
    return {
        "accepted": summary["accepted"],
        "quarantined": summary["quarantined"],
        "topics": summary["topics"],
        "segments_max": int(total["active_segments"].max()) if len(total) else 0,
        "segments_final": int(total["active_segments"].iloc[-1]) if len(total) else 0,
        "segments_created": len(tables.segments),
        "buckets_max": int(total["buckets"].max()) if len(total) else 0,
        "buckets_final": int(total["buckets"].iloc[-1]) if len(total) else 0,
        "splits": summary["splits"],
        "merges": summary["merges"],
        "rebuckets": summary["rebuckets"],
        "suppressed": summary["suppressed"],
        "batching_mode": config.get("batching", {}).get("mode"),
        "bucket_budget": config.get("topic", {}).get("bucket_budget"),
        "entries": summary["entries"],
        "entries_per_message": summary["entries_per_message"],
        "mean_batch_size": round(n_msgs / len(entries), 4) if len(entries) else None,
        "mean_batch_bytes": (round(float(entries["payload_bytes"].mean()), 1)
                             if len(entries) else None),
        "consumers": len(consumers),
        "max_consumer_share": round(float(shares["share"].max()), 4) if len(shares) else None,
        "idle_consumers": sum(1 for c in consumers if c not in delivered),
        "handoffs": len(withheld),
        "withheld_bucket_s": round(float(withheld["withheld_s"].sum()), 3),
        "sealed_segments": int(tables.segments["sealed_at"].notna().sum()),
        "drain_max_s": (round(float(per_segment["drain_s"].max()), 3)
                        if len(per_segment) and per_segment["drain_s"].notna().any() else None),
        "undrained_segments": int((~per_segment["drained"]).sum()) if len(per_segment) else 0,
    }


def metrics_frame(metrics: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """``{run_id: run_metrics(...)}`` → the side-by-side frame of :func:`comparison_table`."""
    frame = pd.DataFrame({run: [m.get(k) for k, _ in METRICS] for run, m in metrics.items()},
                         index=[label for _, label in METRICS], dtype=object)
    frame.index.name = "metric"
    return frame


def format_cell(value: Any) -> str:
    """A metric value as printed in the side-by-side table: ``-`` for none, thousands
    separators for integers, floats to 4 significant digits."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return str(value)
