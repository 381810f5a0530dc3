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
from typing import Any

import numpy as np
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


@dataclass
class RunData:
    """The tables of one run the profile reads (pandas, log-time timestamps)."""

    config: ReplayConfig
    keys: pd.DataFrame
    samples: pd.DataFrame
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
        return cls(config, keys.reset_index(drop=True), read("segment_load"),
                   read("autoscale_decisions"), read("segments"), read("consumer_load"),
                   read("bucket_handoffs"), read("segment_drains"),
                   store.group_totals("entries", "topic", "num_messages", "producer_name",
                                      run_id))


def _seconds(td: Any) -> float:
    return float(pd.Timedelta(td).total_seconds())


def by_topic(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``df``'s rows per topic, in one pass (a mask per topic scans the whole frame once per
    topic: thousands of topics made the profile quadratic). A topic without rows is missing:
    read with :func:`_rows_of`."""
    if not len(df):
        return {}
    return {str(t): g for t, g in df.groupby("topic", sort=False)}


def _rows_of(parts: Mapping[str, pd.DataFrame], topic: str, df: pd.DataFrame) -> pd.DataFrame:
    """``topic``'s rows of :func:`by_topic` ``parts`` of ``df`` (no rows: ``df``'s columns)."""
    got = parts.get(topic)
    return got if got is not None else df.iloc[0:0]


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
    """Per topic: ``peak_msg_rate_in`` (highest sum over its active segments at one sample
    time), ``peak_at``, ``mean_msg_rate_in`` (mean of those sums over sample times)."""
    if samples.empty:
        return pd.DataFrame(columns=["topic", "peak_msg_rate_in", "peak_at",
                                     "mean_msg_rate_in"])
    total = samples.groupby(["topic", "sample_time"], sort=True)["msg_rate_in"].sum() \
        .reset_index()
    rows = []
    for topic, g in total.groupby("topic", sort=True):
        i = int(np.argmax(g["msg_rate_in"].to_numpy()))  # earliest of equal peaks
        rows.append({"topic": topic, "peak_msg_rate_in": float(g["msg_rate_in"].iloc[i]),
                     "peak_at": g["sample_time"].iloc[i],
                     "mean_msg_rate_in": float(g["msg_rate_in"].mean())})
    return pd.DataFrame(rows)


def _decision_counts(d: pd.DataFrame) -> dict[str, int]:
    """Splits, merges, rebuckets and suppressed decisions among one topic's decisions ``d``."""
    actions = d["action"].value_counts().to_dict() if len(d) else {}
    return {"splits": int(actions.get("split", 0)), "merges": int(actions.get("merge", 0)),
            "rebuckets": int(actions.get("rebucket", 0)),
            "suppressed": int(actions.get("none", 0))}


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


def _withheld_max_s(h: pd.DataFrame, end: pd.Timestamp | None) -> float:
    """Longest withholding (s) among one topic's ``bucket_handoffs`` rows ``h`` (one still
    withheld counts until ``end``)."""
    if not len(h):
        return 0.0
    until = h["withheld_until"].fillna(end if end is not None else h["withheld_from"].max())
    return max(0.0, _seconds((until - h["withheld_from"]).max()))


def profile_rows(data: RunData, flap_window_s: float = DEFAULT_FLAP_WINDOW_S) -> pd.DataFrame:
    """The run's ``topic_profile`` rows (without ``run_id``), topics in name order. Under
    ``output.keys`` ``hashed`` the key names are withheld (nulls), under ``none`` their
    hashes too (as the ``messages`` table's)."""
    if data.keys.empty:
        return pd.DataFrame(columns=table_columns("topic_profile"))
    load = _topic_load(active_samples(data.samples, data.segments))
    timeline = active_timeline(data.segments)
    fl = flap_events(data.segments, flap_window_s)
    consumers = consumer_activity(data)
    end = _end_time(data)
    # every table split by topic once: the loop below reads each topic's rows
    loads, timelines, segments = by_topic(load), by_topic(timeline), by_topic(data.segments)
    decisions, flap_counts = by_topic(data.decisions), fl["topic"].value_counts().to_dict()
    users, drains, handoffs = by_topic(consumers), by_topic(data.drains), by_topic(data.handoffs)
    rows = []
    for k in data.keys.sort_values("topic", kind="stable").to_dict("records"):
        topic = k["topic"]
        row: dict[str, Any] = dict(k)
        lt = _rows_of(loads, topic, load)
        peak = float(lt["peak_msg_rate_in"].iloc[0]) if len(lt) else None
        row.update(peak_msg_rate_in=peak, peak_at=lt["peak_at"].iloc[0] if len(lt) else None,
                   mean_msg_rate_in=float(lt["mean_msg_rate_in"].iloc[0]) if len(lt) else None)
        threshold = float(data.config.policy_for(topic).split_msg_rate_in)
        rates = list(k["top_key_peak_rates"])
        hot = float(rates[0]) if rates else 0.0
        row.update(split_msg_rate_in=threshold, hot_key_peak_rate=hot,
                   hot_key_vs_split=hot / threshold,
                   unrelievable_share=(max(0.0, hot - threshold) / peak) if peak else 0.0)
        tl = _rows_of(timelines, topic, timeline)
        seg = _rows_of(segments, topic, data.segments)
        row.update(segments_end=int((seg["state"] == "ACTIVE").sum()) if len(seg) else 0,
                   segments_peak=int(tl["active"].max()) if len(tl) else 0,
                   **_decision_counts(_rows_of(decisions, topic, data.decisions)),
                   flaps=int(flap_counts.get(topic, 0)))
        n_entries, n_msgs, producers = data.entries.get(topic, (0, 0, 0))
        row.update(entries=n_entries, producers=producers,
                   entries_per_message=round(n_entries / n_msgs, 6) if n_msgs else None)
        c = _rows_of(users, topic, consumers)
        d = _rows_of(drains, topic, data.drains)
        sealed = int(seg["sealed_at"].notna().sum()) if len(seg) else 0
        subs = int(c["subscription"].nunique()) if len(c) else 0
        row.update(consumers=len(c), idle_consumers=int((c["messages"] == 0).sum()),
                   withheld_max_s=_withheld_max_s(_rows_of(handoffs, topic, data.handoffs),
                                                  end),
                   drain_max_s=float(d["drain_ms"].max()) / 1000 if len(d) else None,
                   undrained_segments=max(0, sealed * subs - len(d)))
        rows.append(_withhold_keys(row, data.config.output.keys))
    return pd.DataFrame(rows)[table_columns("topic_profile")]


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


def idle_findings(topic: str, c: pd.DataFrame, segments: pd.DataFrame) -> list[dict[str, Any]]:
    """``idle_consumers`` (medium): configured consumers of a grouped subscription that were
    delivered nothing over the run, with the cause read from the final layout. ``c``: the
    topic's :func:`consumer_activity` rows; ``segments``: its ``segments`` rows."""
    seg = segments[segments["state"] == "ACTIVE"] if len(segments) else segments
    s, capacity = len(seg), int(seg["bucket_count"].sum()) if len(seg) else 0
    out = []
    for sub, g in c.groupby("subscription", sort=True):
        idle = sorted(g.loc[g["messages"] == 0, "consumer_name"])
        if not idle:
            continue
        k = len(g)
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
        out.append(_finding(
            topic, "idle_consumers", "medium", None, str(sub), message,
            {"subscription": sub, "consumers": k, "idle": len(idle), "idle_consumers": idle,
             "active_segments": s, "bucket_capacity": capacity,
             "cause": cause.split(":")[0]},
            ("consumers with no delivery over the run; cause: consumers > Σ N of the active "
             "segments (segment count when every N is 1, else bucket budget), else key spread",
             "§3.7, §6.3")))
    return out


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


def blind_spot_findings(config: ReplayConfig, topic: str, s: pd.DataFrame,
                        profile: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``blind_spot`` (low): load samples of an active segment whose current ``msg_rate_in``
    is across a threshold from the last value the reporter wrote — above the split threshold
    while the stored value is not, or below the merge threshold while the stored value is
    not — so the controller does not see it (the 25 % material-change gate). ``s``: the
    topic's :func:`active_samples`."""
    s = s.sort_values(["segment_id", "sample_time"], kind="stable")
    if s.empty:
        return []
    policy = config.policy_for(topic)
    split_t, merge_t = float(policy.split_msg_rate_in), float(policy.merge_msg_rate_in)
    stored = s["msg_rate_in"].where(s["written"]).groupby(s["segment_id"]).ffill()
    current = s["msg_rate_in"]
    hidden_split = (current > split_t) & (stored <= split_t)
    hidden_merge = (current < merge_t) & (stored >= merge_t)
    hidden = hidden_split | hidden_merge
    if not hidden.any():
        return []
    first = s[hidden].iloc[0]
    side = "split" if bool(hidden_split[hidden].iloc[0]) else "merge"
    threshold = split_t if side == "split" else merge_t
    n = int(hidden.sum())
    interval = config.replay.load_report_interval_s
    gate = 100 * config.replay.load_report_rate_change_threshold
    st = float(stored[hidden].iloc[0])
    message = (f"segment {int(first['segment_id'])} at {_ts(first['sample_time'])}: "
               f"msg_rate_in {float(first['msg_rate_in']):,.1f} msg/s is "
               f"{'above' if side == 'split' else 'below'} the {side} threshold "
               f"{threshold:,.0f} msg/s, but the last value written is {st:,.1f} "
               f"(within the reporter's {gate:.0f} % gate): the controller does not see it; "
               f"{n} such sample(s) (one per {interval} s load report) in the run.")
    return [_finding(
        topic, "blind_spot", "low", first["sample_time"], f"segment {int(first['segment_id'])}",
        message,
        {"segment_id": int(first["segment_id"]), "side": side, "threshold": threshold,
         "current_rate": float(first["msg_rate_in"]), "stored_rate": st, "samples": n,
         "split_samples": int(hidden_split.sum()), "merge_samples": int(hidden_merge.sum()),
         "seconds": n * interval},
        ("sample's msg_rate_in across a split/merge threshold from the last written value",
         "§5, §5.1"))]


def finding_rows(data: RunData, profile: pd.DataFrame,
                 flap_window_s: float = DEFAULT_FLAP_WINDOW_S) -> pd.DataFrame:
    """The run's ``findings`` rows (without ``run_id``): by severity, topic, kind, time."""
    events = flap_events(data.segments, flap_window_s)
    consumers = consumer_activity(data)
    samples = active_samples(data.samples, data.segments)
    # every table split by topic once (see by_topic)
    flapped, users = by_topic(events), by_topic(consumers)
    segments, sampled = by_topic(data.segments), by_topic(samples)
    rows: list[dict[str, Any]] = []
    for p in profile.to_dict("records"):
        topic = p["topic"]
        rows += hot_key_findings(p, data.config)
        rows += flapping_findings(topic, _rows_of(flapped, topic, events), flap_window_s, p)
        rows += idle_findings(topic, _rows_of(users, topic, consumers),
                              _rows_of(segments, topic, data.segments))
        rows += single_segment_findings(p)
        rows += blind_spot_findings(data.config, topic, _rows_of(sampled, topic, samples), p)
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
