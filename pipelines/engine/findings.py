"""Answers, not only tables (issue #34): a run's ``topic_profile`` (one row per topic) and its
``findings`` (what the profile means, in words, with evidence and the rule behind it), computed
on the driver after the emulation from the tables both engines write — ``segment_load``,
``autoscale_decisions``, ``segments``, ``entries`` (per-topic totals, scanned by batches),
``consumer_load``, ``bucket_handoffs``, ``segment_drains`` — and the key statistics the control
plane gathered in the same pass (the ``key_profile`` rows,
:func:`pipelines.engine.stages.key_profile_row`). Every rule is listed in docs/findings.md.

No Spark; the same function for both engines, so the two tables are equal between them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from pipelines.contract.config import ReplayConfig
from pipelines.contract.schemas import table_columns
from pipelines.storage.delta import DeltaStore

DEFAULT_FLAP_WINDOW_S = 600
"""Default flapping window (s, log time): a split undone by a merge of the same hash range (or
a merge undone by a split) within 10 minutes — twice Pulsar's default merge cooldown and merge
window (300 s), so a policy that merges back as soon as its cooldowns allow counts as
flapping."""

SEVERITIES = ("high", "medium", "low", "info")
"""Severities, most severe first (the order findings are listed in)."""

KEY_COLUMNS = ["topic", "messages", "bytes", "distinct_keys",
               "distinct_keys_exact", "keyless_messages", "keyless_share", "top_keys",
               "top_key_hashes", "top_key_messages", "top_key_shares", "top_key_peak_rates",
               "key_count_error", "hot_key_peak_at"]
"""``topic_profile`` columns from the control plane's key statistics."""
SAMPLE_COLUMNS = ["topic", "segment_id", "sample_time", "msg_rate_in", "written"]
"""The ``segment_load`` columns the answers read: the table has a row per loaded segment and
sweep (550,000 at 10,000 quiet topics over 10 minutes), so its other columns stay unread."""


@dataclass
class RunData:
    """The tables of one run the profile reads (pandas, log-time timestamps)."""

    config: ReplayConfig
    keys: pd.DataFrame
    samples: pd.DataFrame  # segment_load's SAMPLE_COLUMNS
    decisions: pd.DataFrame
    segments: pd.DataFrame
    consumer_load: pd.DataFrame
    handoffs: pd.DataFrame
    drains: pd.DataFrame
    entries: Mapping[str, tuple[int, int, int]]

    @classmethod
    def load(cls, store: DeltaStore, run_id: str, config: ReplayConfig,
             keys: pd.DataFrame | None = None) -> RunData:
        """Read ``run_id``'s tables from ``store``; ``keys``: the key-profile rows (default:
        those already in ``topic_profile``)."""
        def read(t: str) -> pd.DataFrame:
            return store.read(t, run_id=run_id)

        if keys is None:
            keys = read("topic_profile")
        keys = keys[[c for c in KEY_COLUMNS if c in keys.columns]] if len(keys) else \
            pd.DataFrame(columns=KEY_COLUMNS)
        samples = store.read_arrow("segment_load", run_id).select(SAMPLE_COLUMNS).to_pandas()
        return cls(config, keys.reset_index(drop=True), samples,
                   read("autoscale_decisions"), read("segments"), read("consumer_load"),
                   read("bucket_handoffs"), read("segment_drains"),
                   store.group_totals("entries", "topic", "num_messages", "producer_name",
                                      run_id))

    @cached_property
    def active_samples(self) -> pd.DataFrame:
        """:func:`active_samples` of the run (computed once: the profile and the findings
        both read it)."""
        return active_samples(self.samples, self.segments)


def _seconds(td: Any) -> float:
    return float(pd.Timedelta(td).total_seconds())


def per_topic(values: pd.Series, topics: pd.Index, default: Any) -> pd.Series:
    """``values`` (indexed by topic) for each of ``topics``, ``default`` for a topic without
    one. Every per-topic number of the profile is computed for all topics at once (grouped by
    topic): a pandas pass per topic cost milliseconds each, most of the 10,000-topic run's
    answers (issue #30)."""
    out = values.reindex(topics)
    return out.where(topics.isin(values.index), default) if len(out) else out


def _optional(values: pd.Series, present: npt.NDArray[np.bool_]) -> list[Any]:
    """``values`` as Python objects, ``None`` where not ``present`` (a row dict's missing
    value: the column's type is inferred from the values, as it was from row dicts)."""
    return [v if p else None for v, p in zip(values.tolist(), present.tolist(), strict=True)]


# ---- layout history -----------------------------------------------------------------------


def layout_events(segments: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(splits, merges)`` of a run's ``segments`` rows: per split, the split segment's topic,
    hash range and seal time ``t``; per merge, the merged segment's topic, range, creation time
    ``t`` and ``split_at`` (its seal time when its children came from a split, else NaT)."""
    cols = ["topic", "range_start", "range_end", "t"]
    if segments.empty:
        return pd.DataFrame(columns=cols), pd.DataFrame(columns=[*cols, "split_at"])
    by_id = segments.set_index(["topic", "segment_id"])["created_by"]
    split_parent = [
        len(c) > 0 and by_id.get((topic, int(c[0]))) == "split"
        for topic, c in zip(segments["topic"], segments["child_ids"], strict=True)]
    splits = segments[split_parent].rename(columns={"sealed_at": "t"})[cols]
    merged = segments[segments["created_by"] == "merge"]
    merged_split = [p for p, m in zip(split_parent, segments["created_by"] == "merge",
                                      strict=True) if m]
    merges = merged.rename(columns={"created_at": "t"})[cols].assign(
        split_at=merged["sealed_at"].where(merged_split, pd.NaT))
    return splits.reset_index(drop=True), merges.reset_index(drop=True)


def flap_events(segments: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """Flapping layout changes of a run (``segments`` rows of one run), one row each:
    ``topic``, ``range_start``, ``range_end``, ``kind`` (``split-merge``: a split whose hash
    range a merge re-creates within ``window_s`` seconds; ``merge-split``: a merge whose segment
    is split within ``window_s``), ``first_at`` and ``undone_at`` (log time). Each split or
    merge counts at most once; rows by topic, then time."""
    cols = ["topic", "range_start", "range_end", "kind", "first_at", "undone_at"]
    splits, merges = layout_events(segments)
    if splits.empty or merges.empty:
        return pd.DataFrame(columns=cols)
    window = pd.Timedelta(seconds=window_s)
    pairs = splits.merge(merges, on=["topic", "range_start", "range_end"],
                         suffixes=("_split", "_merge"))
    undone = pairs[(pairs["t_merge"] > pairs["t_split"])
                   & (pairs["t_merge"] <= pairs["t_split"] + window)]
    undone = (undone.sort_values("t_merge", kind="stable")
              .drop_duplicates(["topic", "range_start", "range_end", "t_split"]))
    a = pd.DataFrame({"topic": undone["topic"], "range_start": undone["range_start"],
                      "range_end": undone["range_end"], "kind": "split-merge",
                      "first_at": undone["t_split"], "undone_at": undone["t_merge"]})
    m = merges[merges["split_at"].notna() & (merges["split_at"] - merges["t"] <= window)]
    b = pd.DataFrame({"topic": m["topic"], "range_start": m["range_start"],
                      "range_end": m["range_end"], "kind": "merge-split",
                      "first_at": m["t"], "undone_at": m["split_at"]})
    out = pd.concat([x for x in (a, b) if len(x)], ignore_index=True) if len(a) or len(b) \
        else pd.DataFrame(columns=cols)
    return out.sort_values(["topic", "first_at", "range_start"], kind="stable",
                           ignore_index=True)[cols]


def flaps(segments: pd.DataFrame, window_s: float) -> int:
    """Number of :func:`flap_events` (``sweeps.flaps``)."""
    return len(flap_events(segments, window_s))


def active_timeline(segments: pd.DataFrame) -> pd.DataFrame:
    """Active segments over time per topic: ``topic``, ``time``, ``active`` (after every
    change at ``time``; a seal and a creation at one instant — split, merge, rebucket — count
    as one change)."""
    if segments.empty:
        return pd.DataFrame(columns=["topic", "time", "active"])
    up = segments[["topic", "created_at"]].rename(columns={"created_at": "time"}).assign(d=1)
    down = (segments.loc[segments["sealed_at"].notna(), ["topic", "sealed_at"]]
            .rename(columns={"sealed_at": "time"}).assign(d=-1))
    ev = pd.concat([up, down], ignore_index=True).groupby(["topic", "time"], sort=True)["d"] \
        .sum().reset_index()
    ev["active"] = ev.groupby("topic")["d"].cumsum()
    return ev[["topic", "time", "active"]]


# ---- the profile --------------------------------------------------------------------------


def active_samples(samples: pd.DataFrame, segments: pd.DataFrame) -> pd.DataFrame:
    """``segment_load`` rows of segments active at their sample time."""
    if samples.empty or segments.empty:
        return samples.iloc[0:0]
    life = segments[["topic", "segment_id", "created_at", "sealed_at"]]
    s = samples.merge(life, on=["topic", "segment_id"], how="inner")
    alive = (s["sample_time"] >= s["created_at"]) & (
        s["sealed_at"].isna() | (s["sample_time"] < s["sealed_at"]))
    return s[alive]


def _topic_load(samples: pd.DataFrame) -> pd.DataFrame:
    """Per topic (index): ``peak_msg_rate_in`` (highest sum over its active segments at one
    sample time), ``peak_at``, ``mean_msg_rate_in`` (mean of those sums over sample times)."""
    cols = ["peak_msg_rate_in", "peak_at", "mean_msg_rate_in"]
    if samples.empty:
        return pd.DataFrame(columns=cols, index=pd.Index([], name="topic"))
    total = samples.groupby(["topic", "sample_time"], sort=True)["msg_rate_in"].sum() \
        .reset_index()
    topic, rate = total["topic"].to_numpy(object), total["msg_rate_in"].to_numpy(np.float64)
    starts = np.flatnonzero(np.r_[True, topic[1:] != topic[:-1]])
    spans = list(zip(starts.tolist(), [*starts[1:].tolist(), len(topic)], strict=True))
    # the earliest of equal peaks; the mean as Series.mean takes it (NumPy's sum of the slice):
    # a NumPy call per topic, no pandas
    peak = [lo + int(np.argmax(rate[lo:hi])) for lo, hi in spans]
    return pd.DataFrame({"peak_msg_rate_in": rate[peak],
                         "peak_at": total["sample_time"].iloc[peak].array,
                         "mean_msg_rate_in": [float(rate[lo:hi].sum() / (hi - lo))
                                              for lo, hi in spans]},
                        index=pd.Index(topic[starts], name="topic"))


def _decision_counts(decisions: pd.DataFrame, topics: pd.Index) -> dict[str, pd.Series]:
    """Per topic: splits, merges, rebuckets and suppressed decisions."""
    counts = (decisions.groupby(["topic", "action"]).size().unstack(fill_value=0)
              if len(decisions) else pd.DataFrame())
    return {name: per_topic(counts[action] if action in counts else pd.Series(dtype="int64"),
                            topics, 0).astype("int64")
            for name, action in (("splits", "split"), ("merges", "merge"),
                                 ("rebuckets", "rebucket"), ("suppressed", "none"))}


def _end_time(data: RunData) -> pd.Timestamp | None:
    """The last event time the tables know of (last load sample or layout change)."""
    times = [t for t in (data.samples["sample_time"].max() if len(data.samples) else None,
                         data.segments["created_at"].max() if len(data.segments) else None)
             if t is not None and not pd.isna(t)]
    return max(times) if times else None


def consumer_activity(data: RunData) -> pd.DataFrame:
    """Every configured consumer of every topic's grouped subscriptions (ungrouped checkpoint
    readers read alone and are left out): ``topic``, ``subscription``, ``consumer_name``,
    ``messages`` delivered over the run (``consumer_load``; a consumer without rows delivered
    nothing — idle windows need not be materialized)."""
    rows = [(t, sub.name, str(c.name)) for t in data.keys["topic"]
            for sub in data.config.subscriptions if sub.grouped for c in sub.consumers]
    out = pd.DataFrame(rows, columns=["topic", "subscription", "consumer_name"])
    if len(data.consumer_load) and len(out):
        got = (data.consumer_load.groupby(["topic", "subscription", "consumer_name"])["messages"]
               .sum().reset_index())
        out = out.merge(got, on=["topic", "subscription", "consumer_name"], how="left")
    else:
        out["messages"] = 0
    out["messages"] = out["messages"].fillna(0).astype("int64")
    return out


def _withheld_max_s(handoffs: pd.DataFrame, end: pd.Timestamp | None,
                    topics: pd.Index) -> pd.Series:
    """Per topic: the longest withholding (s) among its ``bucket_handoffs`` rows (one still
    withheld counts until ``end``, else until the topic's last withholding start); 0 for
    none."""
    if not len(handoffs):
        return pd.Series(0.0, index=topics)
    h = handoffs
    until = h["withheld_until"].fillna(
        end if end is not None else h.groupby("topic")["withheld_from"].transform("max"))
    longest = (until - h["withheld_from"]).groupby(h["topic"]).max().dt.total_seconds()
    seconds = per_topic(longest, topics, 0.0).to_numpy(np.float64)
    return pd.Series(np.where(seconds > 0, seconds, 0.0), index=topics)  # NaT: 0, as max(0, ·)


def _key_rows(keys: pd.DataFrame, mode: str) -> pd.DataFrame:
    """The key-statistics columns, topics in name order, as Python values (their types
    inferred anew, as the profile's other columns), key names or hashes withheld under
    ``output.keys`` hashed / none."""
    records = keys.sort_values("topic", kind="stable").to_dict("records")
    for row in records:
        _withhold_keys(row, mode)
    return pd.DataFrame(records)


def profile_rows(data: RunData, flap_window_s: float = DEFAULT_FLAP_WINDOW_S) -> pd.DataFrame:
    """The run's ``topic_profile`` rows (without ``run_id``), topics in name order, every
    column computed for all topics at once. Under ``output.keys`` ``hashed`` the key names
    are withheld (nulls), under ``none`` their hashes too (as the ``messages`` table's)."""
    if data.keys.empty:
        return pd.DataFrame(columns=table_columns("topic_profile"))
    out = _key_rows(data.keys, data.config.output.keys)
    topics = pd.Index(out["topic"])
    load = _topic_load(data.active_samples)
    loaded = topics.isin(load.index)
    lt = load.reindex(topics)
    out["peak_msg_rate_in"] = _optional(lt["peak_msg_rate_in"], loaded)
    out["peak_at"] = _optional(lt["peak_at"], loaded)
    out["mean_msg_rate_in"] = _optional(lt["mean_msg_rate_in"], loaded)
    policies = data.config.policies_for(topics)
    threshold = np.array([float(policies[t].split_msg_rate_in) for t in topics])
    hot = np.array([float(r[0]) if len(r) else 0.0 for r in out["top_key_peak_rates"]])
    peak = lt["peak_msg_rate_in"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.maximum(0.0, hot - threshold) / peak
    out["split_msg_rate_in"] = threshold.tolist()
    out["hot_key_peak_rate"] = hot.tolist()
    out["hot_key_vs_split"] = (hot / threshold).tolist()
    out["unrelievable_share"] = np.where(loaded & (peak != 0), share, 0.0).tolist()
    seg = data.segments
    by_seg = seg.groupby("topic") if len(seg) else None
    active = ((seg["state"] == "ACTIVE").groupby(seg["topic"]).sum() if len(seg)
              else pd.Series(dtype="int64"))
    out["segments_end"] = per_topic(active, topics, 0).astype("int64").tolist()
    timeline = active_timeline(seg)
    out["segments_peak"] = per_topic(timeline.groupby("topic")["active"].max(), topics, 0) \
        .astype("int64").tolist()
    for name, counts in _decision_counts(data.decisions, topics).items():
        out[name] = counts.tolist()
    out["flaps"] = per_topic(flap_events(seg, flap_window_s)["topic"].value_counts(),
                             topics, 0).astype("int64").tolist()
    totals = [data.entries.get(t, (0, 0, 0)) for t in topics]
    out["entries"] = [e for e, _, _ in totals]
    out["producers"] = [p for _, _, p in totals]
    out["entries_per_message"] = [round(e / n, 6) if n else None for e, n, _ in totals]
    consumers = consumer_activity(data)
    by_topic = consumers.groupby("topic")
    out["consumers"] = per_topic(by_topic.size(), topics, 0).astype("int64").tolist()
    idle = (consumers["messages"] == 0).groupby(consumers["topic"]).sum()
    out["idle_consumers"] = per_topic(idle, topics, 0).astype("int64").tolist()
    out["withheld_max_s"] = _withheld_max_s(data.handoffs, _end_time(data), topics).tolist()
    drains = data.drains
    drained = topics.isin(drains["topic"]) if len(drains) else np.zeros(len(topics), bool)
    by_drain = drains.groupby("topic") if len(drains) else None
    out["drain_max_s"] = _optional(
        per_topic(by_drain["drain_ms"].max(), topics, 0.0).astype("float64") / 1000
        if by_drain is not None else pd.Series(0.0, index=topics), drained)
    sealed = (per_topic(by_seg["sealed_at"].count(), topics, 0) if by_seg is not None
              else pd.Series(0, index=topics)).to_numpy(np.int64)
    subs = per_topic(by_topic["subscription"].nunique(), topics, 0).to_numpy(np.int64)
    n_drains = (per_topic(by_drain.size(), topics, 0) if by_drain is not None
                else pd.Series(0, index=topics)).to_numpy(np.int64)
    out["undrained_segments"] = np.maximum(0, sealed * subs - n_drains).tolist()
    return out[table_columns("topic_profile")]


def _withhold_keys(row: dict[str, Any], mode: str) -> dict[str, Any]:
    if mode in ("hashed", "none"):
        row["top_keys"] = [None] * len(row["top_keys"])
    if mode == "none":
        row["top_key_hashes"] = [None] * len(row["top_key_hashes"])
    return row


# ---- findings -----------------------------------------------------------------------------


def _ts(t: Any) -> str | None:
    return None if t is None or pd.isna(t) else pd.Timestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _finding(topic: str, kind: str, severity: str, at: Any, subject: str | None,
             message: str, evidence: Mapping[str, Any],
             rule: tuple[str, str]) -> dict[str, Any]:
    """A ``findings`` row; ``rule``: (the rule in words, the reference sections)."""
    return {"topic": topic, "finding": kind, "severity": severity,
            "at": None if at is None or pd.isna(at) else at, "subject": subject,
            "message": message, "evidence": json.dumps(dict(evidence), sort_keys=True,
                                                       default=str),
            "rule": rule[0], "reference": rule[1]}


def hot_key_findings(profile: Mapping[str, Any], config: ReplayConfig) -> list[dict[str, Any]]:
    """``hot_key`` (high): the topic's hottest key alone peaks above the split threshold."""
    rates, threshold = list(profile["top_key_peak_rates"]), profile["split_msg_rate_in"]
    if not rates or not rates[0] > threshold:
        return []
    keys, hashes = list(profile["top_keys"]), list(profile["top_key_hashes"])
    policy = config.policy_for(profile["topic"])
    over = sum(1 for r in rates if r > threshold)
    name = (keys[0] if keys[0] is not None else
            f"hash {int(hashes[0]):#010x}" if hashes[0] is not None else "(withheld)")
    excess = rates[0] - threshold
    peak = profile["peak_msg_rate_in"]
    share = profile["unrelievable_share"]
    message = (f"key {name!r} alone peaks at {rates[0]:,.1f} msg/s "
               f"({rates[0] / threshold:.2f}× the split threshold {threshold:,.0f} msg/s) from "
               f"{_ts(profile['hot_key_peak_at'])}: a key always maps to one segment, so no "
               f"split can relieve it; {excess:,.1f} msg/s"
               + (f" ({100 * share:.1f} % of the topic's peak {peak:,.1f} msg/s)" if peak else "")
               + f" stays above the threshold. The controller split {profile['splits']} times "
               f"(peak {profile['segments_peak']} segments, max_segments "
               f"{policy.max_segments}).")
    return [_finding(
        profile["topic"], "hot_key", "high", profile["hot_key_peak_at"], name, message,
        {"key": keys[0], "hash32": hashes[0],
         "segment_hash": None if hashes[0] is None else int(hashes[0]) >> 16,
         "key_peak_rate": round(rates[0], 3), "split_msg_rate_in": threshold,
         "keys_over_threshold": over, "unrelievable_rate": round(excess, 3),
         "topic_peak_rate": peak, "unrelievable_share": share,
         "splits": profile["splits"], "segments_peak": profile["segments_peak"],
         "max_segments": policy.max_segments},
        ("hottest key's peak rate (most messages in one stats period / period) > "
         "policy.split_msg_rate_in", "§1.2, §2.3, §4.3 step 2, §5.1"))]


def flapping_findings(topic: str, e: pd.DataFrame, window_s: float,
                      profile: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``flapping`` (medium): splits undone by a merge of the same range (or merges undone by a
    split) within the flap window; ``e``: the topic's :func:`flap_events`."""
    if e.empty:
        return []
    first = e.iloc[0]
    gap = _seconds(first["undone_at"] - first["first_at"])
    rng = f"[{int(first['range_start']):#06x}, {int(first['range_end']):#06x}]"
    verb = ("split at {a} and merged back at {b}" if first["kind"] == "split-merge"
            else "merged at {a} and split again at {b}")
    drain = profile.get("drain_max_s")
    message = (f"{len(e)} flap(s) within {window_s:,.0f} s: hash range {rng} "
               + verb.format(a=_ts(first["first_at"]), b=_ts(first["undone_at"]))
               + f" ({gap:,.0f} s later). Each flap seals segments whose backlog must drain"
               + (f" (longest drain {drain:,.1f} s)" if drain is not None else "") + ".")
    return [_finding(
        topic, "flapping", "medium", first["first_at"], rng, message,
        {"flaps": len(e), "flap_window_s": window_s, "first_kind": first["kind"],
         "first_at": _ts(first["first_at"]), "undone_at": _ts(first["undone_at"]),
         "seconds_between": gap, "splits": profile["splits"], "merges": profile["merges"],
         "drain_max_s": drain},
        ("a split whose range a merge re-creates (or a merge whose segment is split) within "
         "the flap window", "§2.3, §2.4, §4.3 steps 2-3"))]


def idle_findings(consumers: pd.DataFrame, segments: pd.DataFrame) -> list[dict[str, Any]]:
    """``idle_consumers`` (medium): configured consumers of a grouped subscription that were
    delivered nothing over the run, with the cause read from the final layout; one finding
    per topic and subscription with idle consumers, all topics at once. ``consumers``:
    :func:`consumer_activity`; ``segments``: the run's ``segments`` rows."""
    if consumers.empty:
        return []
    size = consumers.groupby(["topic", "subscription"], sort=True).size()
    idle_rows = consumers[consumers["messages"] == 0]
    if idle_rows.empty:
        return []
    idle: dict[tuple[Any, Any], list[str]] = {}
    for key in zip(idle_rows["topic"], idle_rows["subscription"], idle_rows["consumer_name"],
                   strict=True):
        idle.setdefault(key[:2], []).append(key[2])
    seg = segments[segments["state"] == "ACTIVE"] if len(segments) else segments
    count = seg.groupby("topic").size() if len(seg) else pd.Series(dtype="int64")
    buckets = seg.groupby("topic")["bucket_count"].sum() if len(seg) else count
    out = []
    for (topic, sub), names in sorted(idle.items()):
        out.append(_idle_finding(str(topic), sub, sorted(names), int(size[(topic, sub)]),
                                 int(count.get(topic, 0)), int(buckets.get(topic, 0))))
    return out


def _idle_finding(topic: str, sub: Any, idle: list[str], k: int, s: int,
                  capacity: int) -> dict[str, Any]:
    """One topic's ``idle_consumers`` finding of subscription ``sub``: ``idle`` consumer names
    (sorted) of ``k``, ``s`` active segments with ``capacity`` buckets in all."""
    if k > capacity and capacity == s:
        cause = (f"segment count: each of the {s} active segment(s) has one bucket, so at "
                 f"most {s} of the {k} consumers get work")
    elif k > capacity:
        cause = (f"bucket budget: the {s} active segment(s) have {capacity} buckets in all, "
                 f"fewer than the {k} consumers; the rest get an empty assignment")
    else:
        cause = (f"key spread: {capacity} buckets for {k} consumers, but the buckets "
                 "these consumers own carried no messages")
    message = (f"subscription {sub!r}: {len(idle)} of {k} consumers delivered nothing "
               f"({', '.join(idle[:5])}{', …' if len(idle) > 5 else ''}) — {cause}.")
    return _finding(
        topic, "idle_consumers", "medium", None, str(sub), message,
        {"subscription": sub, "consumers": k, "idle": len(idle), "idle_consumers": idle,
         "active_segments": s, "bucket_capacity": capacity,
         "cause": cause.split(":")[0]},
        ("consumers with no delivery over the run; cause: consumers > Σ N of the active "
         "segments (segment count when every N is 1, else bucket budget), else key spread",
         "§3.7, §6.3"))


def single_segment_findings(profile: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``single_segment`` (info): the topic never had more than one active segment."""
    if profile["segments_peak"] != 1:
        return []
    peak, threshold = profile["peak_msg_rate_in"] or 0.0, profile["split_msg_rate_in"]
    message = (f"peak {peak:,.1f} msg/s is {100 * peak / threshold:.2g} % of the split "
               f"threshold {threshold:,.0f} msg/s ({profile['messages']:,} messages): the topic "
               "never left one segment and needs no scalable-topic policy.")
    return [_finding(profile["topic"], "single_segment", "info", None, None, message,
                     {"peak_msg_rate_in": peak, "split_msg_rate_in": threshold,
                      "messages": profile["messages"], "splits": profile["splits"]},
                     ("at most one active segment over the whole run", "§2.2, §4.3"))]


def _last_written(s: pd.DataFrame) -> pd.Series:
    """Per sample of ``s`` (sorted by topic, segment, time): the ``msg_rate_in`` of the last
    sample of its segment up to it that was ``written``, NaN before the first one. A forward
    fill by position (NumPy): a pandas group-by on topic and segment held a copy of its keys
    per row, 35 MB at 10,000 topics."""
    pos = np.arange(len(s))
    topic = s["topic"].to_numpy(object)
    seg = s["segment_id"].to_numpy(np.int64)
    new = np.r_[True, (topic[1:] != topic[:-1]) | (seg[1:] != seg[:-1])]
    start = np.maximum.accumulate(np.where(new, pos, 0))
    last = np.maximum.accumulate(np.where(s["written"].to_numpy(bool), pos, -1))
    rate = s["msg_rate_in"].to_numpy(np.float64)
    return pd.Series(np.where(last >= start, rate[np.maximum(last, 0)], np.nan), index=s.index)


def blind_spot_findings(config: ReplayConfig, samples: pd.DataFrame) -> list[dict[str, Any]]:
    """``blind_spot`` (low): load samples of an active segment whose current ``msg_rate_in``
    is across a threshold from the last value the reporter wrote — above the split threshold
    while the stored value is not, or below the merge threshold while the stored value is
    not — so the controller does not see it (the 25 % material-change gate). One finding per
    topic with such samples, all topics at once. ``samples``: :func:`active_samples`."""
    if samples.empty:
        return []
    s = samples.sort_values(["topic", "segment_id", "sample_time"], kind="stable",
                            ignore_index=True)
    topics = pd.unique(s["topic"].to_numpy(object))
    policies = config.policies_for(topics)
    split_of = {t: float(policies[t].split_msg_rate_in) for t in topics}
    merge_of = {t: float(policies[t].merge_msg_rate_in) for t in topics}
    split_t = s["topic"].map(split_of).to_numpy(np.float64)
    merge_t = s["topic"].map(merge_of).to_numpy(np.float64)
    stored = _last_written(s)
    current = s["msg_rate_in"]
    hidden_split = ((current > split_t) & (stored <= split_t)).to_numpy(bool)
    hidden_merge = ((current < merge_t) & (stored >= merge_t)).to_numpy(bool)
    hidden = hidden_split | hidden_merge
    if not hidden.any():
        return []
    h = s[hidden].assign(_stored=stored[hidden], _split=hidden_split[hidden],
                         _merge=hidden_merge[hidden])
    counts = h.groupby("topic", sort=False).agg(samples=("_split", "size"),
                                                split_samples=("_split", "sum"),
                                                merge_samples=("_merge", "sum"))
    interval = config.replay.load_report_interval_s
    gate = 100 * config.replay.load_report_rate_change_threshold
    out = []
    for first in h.drop_duplicates("topic").to_dict("records"):
        topic = first["topic"]
        side = "split" if bool(first["_split"]) else "merge"
        threshold = split_of[topic] if side == "split" else merge_of[topic]
        c = counts.loc[topic]
        n, st = int(c["samples"]), float(first["_stored"])
        message = (f"segment {int(first['segment_id'])} at {_ts(first['sample_time'])}: "
                   f"msg_rate_in {float(first['msg_rate_in']):,.1f} msg/s is "
                   f"{'above' if side == 'split' else 'below'} the {side} threshold "
                   f"{threshold:,.0f} msg/s, but the last value written is {st:,.1f} "
                   f"(within the reporter's {gate:.0f} % gate): the controller does not see "
                   f"it; {n} such sample(s) (one per {interval} s load report) in the run.")
        out.append(_finding(
            str(topic), "blind_spot", "low", first["sample_time"],
            f"segment {int(first['segment_id'])}", message,
            {"segment_id": int(first["segment_id"]), "side": side, "threshold": threshold,
             "current_rate": float(first["msg_rate_in"]), "stored_rate": st, "samples": n,
             "split_samples": int(c["split_samples"]), "merge_samples": int(c["merge_samples"]),
             "seconds": n * interval},
            ("sample's msg_rate_in across a split/merge threshold from the last written value",
             "§5, §5.1")))
    return out


def finding_rows(data: RunData, profile: pd.DataFrame,
                 flap_window_s: float = DEFAULT_FLAP_WINDOW_S) -> pd.DataFrame:
    """The run's ``findings`` rows (without ``run_id``): by severity, topic, kind, time. Each
    kind's rule is applied to all topics at once; only the topics it finds cost a row of
    Python (the message)."""
    profiles = profile.set_index("topic", drop=False)
    hot = [len(r) > 0 and float(r[0]) > t for r, t in
           zip(profile["top_key_peak_rates"], profile["split_msg_rate_in"], strict=True)]
    rows: list[dict[str, Any]] = []
    for p in profile[hot].to_dict("records"):
        rows += hot_key_findings(p, data.config)
    for topic, e in flap_events(data.segments, flap_window_s).groupby("topic", sort=True):
        if topic in profiles.index:
            p = profiles.loc[topic]
            rows += flapping_findings(str(topic), e, flap_window_s,
                                      {"splits": int(p["splits"]), "merges": int(p["merges"]),
                                       "drain_max_s": p["drain_max_s"]})
    rows += idle_findings(consumer_activity(data), data.segments)
    for p in profile[profile["segments_peak"] == 1].to_dict("records"):
        rows += single_segment_findings(p)
    rows += blind_spot_findings(data.config, data.active_samples)
    if not rows:
        return pd.DataFrame(columns=table_columns("findings"))
    df = pd.DataFrame(rows)
    df["_sev"] = df["severity"].map(SEVERITIES.index)
    df = df.sort_values(["_sev", "topic", "finding", "subject"], kind="stable",
                        ignore_index=True, na_position="first")
    return df[table_columns("findings")]


def answers(store: DeltaStore, run_id: str, config: ReplayConfig,
            keys: pd.DataFrame | None = None,
            flap_window_s: float = DEFAULT_FLAP_WINDOW_S) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(topic_profile, findings)`` rows of a finished run (without ``run_id``), from its
    tables in ``store`` and the key-profile rows ``keys`` (default: read back from
    ``topic_profile``)."""
    data = RunData.load(store, run_id, config, keys)
    profile = profile_rows(data, flap_window_s)
    return profile, finding_rows(data, profile, flap_window_s)


def write_answers(store: DeltaStore, run_id: str, config: ReplayConfig, version: int,
                  keys: pd.DataFrame | None = None) -> int:
    """Compute :func:`answers` and replace the run's ``topic_profile`` and ``findings`` rows
    (idempotent: app transaction ``topic-replay:<run>:<table>:answers`` at ``version``).
    Tables not in ``output.tables`` are skipped (neither: nothing is computed). Returns the
    number of findings."""
    tables = set(config.output.tables)
    if not {"topic_profile", "findings"} & tables:
        return 0
    profile, found = answers(store, run_id, config, keys)
    for table, data in (("topic_profile", profile), ("findings", found)):
        if table not in tables:
            continue
        store.replace_run(table, data.assign(run_id=run_id), run_id,
                          app_id=f"topic-replay:{run_id}:{table}:answers", version=version)
    return len(found)


MAGNITUDE = {"hot_key": "key_peak_rate", "flapping": "flaps", "idle_consumers": "idle",
             "single_segment": "peak_msg_rate_in", "blind_spot": "samples"}
"""Per finding kind, the evidence number that orders findings of one kind in the summary
(largest first)."""

LABELS = {"hot_key": "a key no split can relieve", "flapping": "flapping",
          "idle_consumers": "idle consumers", "single_segment": "never left one segment",
          "blind_spot": "a rate in the reporter's blind spot"}
"""A finding kind in words (the summary's grouped lines)."""


def ordered_findings(findings: pd.DataFrame) -> pd.DataFrame:
    """``findings`` rows by severity, kind, then the kind's :data:`MAGNITUDE` (largest first),
    then topic and subject; ``evidence`` parsed into ``_evidence`` (dict)."""
    if findings.empty:
        return findings.assign(_evidence=[])
    f = findings.assign(_evidence=[json.loads(e) for e in findings["evidence"]])
    f["_sev"] = f["severity"].map(SEVERITIES.index)
    f["_mag"] = [-float(e.get(MAGNITUDE.get(k, ""), 0) or 0)
                 for k, e in zip(f["finding"], f["_evidence"], strict=True)]
    f = f.sort_values(["_sev", "finding", "_mag", "topic", "subject"], kind="stable",
                      na_position="first", ignore_index=True)
    return f.drop(columns=["_sev", "_mag"])


def top_findings(store: DeltaStore, run_id: str,
                 n: int = 5) -> tuple[list[str], int]:
    """The run summary's finding lines (:func:`summary_lines`, at most ``n``) and how many
    findings the run has."""
    f = store.read("findings", run_id=run_id)
    return summary_lines(f, n), len(f)


def summary_lines(findings: pd.DataFrame, n: int = 5) -> list[str]:
    """At most ``n`` lines, most severe first: ``[severity] topic: message`` for a kind found
    on one or two topics; a kind found on more is one line naming how many topics and the
    three largest (by :data:`MAGNITUDE`)."""
    f = ordered_findings(findings)
    lines: list[str] = []
    for (_, kind), g in f.groupby([f["severity"].map(SEVERITIES.index), "finding"],
                                  sort=True):
        sev = str(g["severity"].iloc[0])
        if len(g) <= 2:
            lines += [f"[{sev}] {r['topic']}: {r['message']}" for r in g.to_dict("records")]
            continue
        top = g.drop_duplicates("topic").head(3)
        first = top.iloc[0]
        lines.append(f"[{sev}] {LABELS.get(str(kind), kind)}: {g['topic'].nunique()} topics, "
                     f"largest {first['topic']} — {first['message']} (then "
                     + ", ".join(map(str, top["topic"].iloc[1:])) + ")")
    return lines[:n]


def format_findings(lines: Sequence[str], total: int | None = None) -> list[str]:
    """The summary's findings block: a header, then one indented line each."""
    if not lines:
        return []
    return [f"  findings ({total} in the findings table):" if total else "  findings:",
            *[f"    {line}" for line in lines]]
