"""The report's one figure set: Plotly figures of one or more runs read back from their tables
(:class:`pipelines.analysis.run_tables.RunTables`; no Spark).

The report page (:mod:`pipelines.analysis.page`) draws them interactive (zoom, pan, a hover label
on every mark); ``topic-replay report --png-dir`` renders the same figures as PNG with kaleido
(:func:`write_pngs`; it drives a headless Chrome or Chromium). Each ``fig_*`` returns a
``plotly.graph_objects.Figure``; a figure whose table is empty holds no trace, only a "no …"
note (:func:`figure_has_data`). One run (:func:`run_figures`, in page order):

- :func:`fig_segments` — segments over time: each segment's hash range ``[range_start,
  range_end]`` as a bar from ``created_at`` to ``sealed_at``;
- :func:`fig_layout` — active segments and entry buckets per topic over time (step lines), with
  the auto-scale decisions at the topic's segment count;
- :func:`fig_dag` — the segment DAG (parents → children);
- :func:`fig_decisions` — auto-scale decisions over time (hover: Pulsar's reason, the thresholds
  of the topic's resolved policy and the rates of the segments at ``eval_time``);
- :func:`fig_rates` — per-segment ``msg_rate_in`` (msg/s) against the split / merge thresholds;
- :func:`fig_consumers` — consumer load share, busy / idle time, messages per window;
- :func:`fig_handoffs` — bucket withheld time during handoffs (draining, PIP-379);
- :func:`fig_drain` — sealed-segment drain times (PIP-486 use case 1);
- :func:`fig_batching` — batch-size distribution and entries per message (one series per run;
  also drawn over all runs of a page).

The figures of a policy sweep are :mod:`pipelines.analysis.sweep_figures`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from kaleido.errors import ChromeNotFoundError
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from pipelines.analysis.figure_data import (
    CREATED_BY_COLOR,
    MAX_TOPICS,
    busiest_topics,
    dag_edges,
    naive_utc,
    rate_topics,
    topic_policy,
    topics_by_segments,
)
from pipelines.analysis.run_tables import (
    RunTables,
    consumer_shares,
    drain_times,
    layout_timeline,
    total_timeline,
    withheld_intervals,
)

ACTION_MARKERS = {"split": ("triangle-up", "#d62728"), "merge": ("triangle-down", "#1f77b4"),
                  "rebucket": ("square", "#2ca02c"), "none": ("x", "#7f7f7f")}
"""Marker symbol and colour per ``autoscale_decisions.action`` (none = suppressed)."""

ACTION_LANES = {"split": 0.24, "merge": 0.08, "rebucket": -0.08, "none": -0.24}
"""Offset of each action's markers from its topic's row in :func:`fig_decisions`: one
evaluation splits a segment while another's split is suppressed at the same instant, and
markers drawn on one line hid each other."""

ACTION_THRESHOLDS = {
    "split": ("split_msg_rate_in", "split_bytes_rate_in", "split_msg_rate_out",
              "split_bytes_rate_out", "split_cooldown_s", "max_segments", "max_dag_depth"),
    "merge": ("merge_msg_rate_in", "merge_bytes_rate_in", "merge_msg_rate_out",
              "merge_bytes_rate_out", "merge_window_s", "merge_cooldown_s", "min_segments"),
    "rebucket": ("split_vs_rebucket_min_msg_rate_in", "max_buckets_per_segment",
                 "rebucket_cooldown_s"),
    "none": ("split_cooldown_s", "merge_cooldown_s", "rebucket_cooldown_s", "max_segments",
             "min_segments"),
}
"""The policy fields shown in a decision's hover, per action."""

HASH_TICKS = {"tickvals": [0, 16384, 32768, 49152, 65535],
              "ticktext": ["0", "16384", "32768", "49152", "65535"]}
"""y ticks of a segment_hash axis (quarters of the 16-bit range)."""

RATE_COLUMNS = ("msg_rate_in", "bytes_rate_in", "msg_rate_out", "bytes_rate_out")

DECISION_TOPICS = 30
"""Most topics (rows) of the decisions figure: those that acted most (a run of thousands of
topics would otherwise make a figure thousands of rows tall)."""

PALETTE = qualitative.Plotly
"""Colours of per-topic (or per-run) series, by position: the same topic keeps its colour in
every panel of a figure."""

PNG_WIDTH = 1100
"""Width (px) of a PNG of :func:`write_pngs`; each figure sets its own height."""


class PageError(ValueError):
    """A page or an image cannot be made from what the tables hold (an unknown sweep_id, no run
    to report, no browser to render PNG); the message is one sentence naming the problem."""


@dataclass
class ReportFigure:
    """One figure of the report: a key (the PNG's file name, ``<kind>-<run_id>``), a title, a
    one-line caption and the Plotly figure."""

    key: str
    title: str
    caption: str
    figure: go.Figure


# ---- helpers ---------------------------------------------------------------------------------

def _iso(ts: Any) -> Any:
    """UTC timestamps (Series or scalar) as naive ISO strings Plotly reads as dates."""
    if isinstance(ts, pd.Series):
        return [None if pd.isna(t) else pd.Timestamp(t).isoformat() for t in naive_utc(ts)]
    return None if ts is None or pd.isna(ts) else pd.Timestamp(naive_utc(ts)).isoformat()


def number_text(v: Any) -> str:
    """A number for hover text: ``-`` for none, thousands separators, 4 significant digits."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool | str):
        return str(v)
    if isinstance(v, int | np.integer):
        return f"{int(v):,}"
    return f"{float(v):,.4g}"


def _of_topics(shown: int, total: int) -> str:
    return "" if shown >= total else f" ({shown} of {total} topics)"


def _empty(title: str, note: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=note, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font={"color": "#666"})
    fig.update_layout(title=title, height=240, xaxis={"visible": False},
                      yaxis={"visible": False})
    return fig


def _segment_hover(g: pd.DataFrame) -> list[str]:
    out = []
    for r in g.itertuples():
        sealed = "active" if pd.isna(r.sealed_at) else f"sealed {_iso(r.sealed_at)}"
        out.append(f"<b>{r.topic} segment {r.segment_id}</b> ({r.created_by})<br>"
                   f"range [{r.range_start}, {r.range_end}]<br>"
                   f"buckets {r.bucket_count}<br>epoch {r.created_at_epoch}"
                   f"{'' if r.sealed_at_epoch < 0 else f' → {r.sealed_at_epoch}'}<br>"
                   f"created {_iso(r.created_at)}<br>{sealed}")
    return out


def _color(i: int) -> str:
    return str(PALETTE[i % len(PALETTE)])


def _run_range(tables: RunTables) -> list[Any] | None:
    """x range over the run's time span (first segment creation to the end of the run, 2 %
    padding) as ISO strings; None when unknown."""
    start = tables.segments["created_at"].min() if len(tables.segments) else None
    end = tables.end_time
    if start is None or end is None or pd.isna(start) or not end > start:
        return None
    pad = (end - start) * 0.02
    return [_iso(start - pad), _iso(end + pad)]


def _zero_based(top: float) -> list[float]:
    """A y range from 0 with headroom; a flat-zero series still gets a readable 0..1 axis."""
    top = top if top > 0 else 1.0
    return [-0.05 * top, top * 1.2]


# ---- one run ---------------------------------------------------------------------------------

def fig_segments(tables: RunTables) -> go.Figure:
    """Segments over time, one panel per topic (the
    :data:`~pipelines.analysis.figure_data.MAX_TOPICS` with most segments): each segment a
    horizontal bar over its lifetime (``created_at`` → ``sealed_at``, or the run's end while
    active) and its inclusive ``segment_hash`` range (y, 0..65535), coloured by
    ``created_by``. Hover: segment id, range, bucket count, layout epochs, times. One bar trace
    per (topic, created_by); ``customdata`` = segment_id. Source: ``segments``."""
    title = f"{tables.run_id}: segments over time (hash range × lifetime)"
    seg = tables.segments
    if seg.empty:
        return _empty(title, "no segments")
    topics = topics_by_segments(tables)
    end = tables.end_time
    fig = make_subplots(rows=len(topics), cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=[f"topic {t}" for t in topics])
    shown: set[str] = set()
    for row, topic in enumerate(topics, start=1):
        g = seg[seg["topic"] == topic].sort_values("segment_id")
        for created_by, h in g.groupby("created_by", sort=False):
            stop = h["sealed_at"].fillna(end) if end is not None else h["sealed_at"]
            dur_ms = ((stop - h["created_at"]).dt.total_seconds() * 1000).clip(lower=1)
            fig.add_trace(go.Bar(
                orientation="h", base=_iso(h["created_at"]), x=dur_ms.tolist(),
                y=((h["range_start"] + h["range_end"] + 1) / 2).tolist(),
                width=(h["range_end"] + 1 - h["range_start"]).tolist(),
                name=str(created_by), legendgroup=str(created_by),
                showlegend=str(created_by) not in shown,
                marker={"color": CREATED_BY_COLOR.get(str(created_by), "#dddddd"),
                        "line": {"color": "black", "width": 1}},
                text=[f"{s} · N={n}" for s, n in zip(h["segment_id"], h["bucket_count"],
                                                      strict=True)],
                textposition="inside", insidetextanchor="middle",
                customdata=h["segment_id"].tolist(),
                hovertext=_segment_hover(h), hoverinfo="text"), row=row, col=1)
            shown.add(str(created_by))
        fig.update_yaxes(range=[0, 65536], title_text="segment_hash", row=row, col=1,
                         **HASH_TICKS)
        fig.update_xaxes(type="date", row=row, col=1)
    fig.update_xaxes(title_text="publish time (UTC)", row=len(topics), col=1)
    fig.update_layout(title=title + _of_topics(len(topics), seg["topic"].nunique()),
                      barmode="overlay", bargap=0, height=190 * len(topics) + 150,
                      legend_title_text="created_by", uniformtext_minsize=8,
                      uniformtext_mode="hide")
    return fig


def _creating_decision(tables: RunTables) -> dict[tuple[str, int], str]:
    """(topic, segment_id) → the decision that created the segment, as hover text ("split:
    msgRateIn (tick)"); matched on topic, ``eval_time`` = ``created_at`` and action =
    ``created_by``."""
    d = tables.decisions
    out: dict[tuple[str, int], str] = {}
    if d.empty or tables.segments.empty:
        return out
    acted = d[d["action"] != "none"]
    key = {(str(r.topic), r.eval_time, str(r.action)): f"{r.action}: {r.reason} ({r.trigger})"
           for r in acted.itertuples()}
    for s in tables.segments.itertuples():
        why = key.get((str(s.topic), s.created_at, str(s.created_by)))
        if why is not None:
            out[(str(s.topic), int(s.segment_id))] = why
    return out


def fig_dag(tables: RunTables) -> go.Figure:
    """The segment DAG, one panel per topic: a node per segment at (``created_at``, middle of
    its hash range), an edge from each parent to each child (split: one to two, merge: two to
    one, rebucket: one to one). Node hover: segment, range, buckets, created / sealed times and
    why it was created (``created_by`` and the reason of the decision that made it).
    ``customdata`` = segment_id. Source: ``segments``, ``autoscale_decisions``."""
    title = f"{tables.run_id}: segment DAG (parents → children)"
    seg = tables.segments
    if seg.empty:
        return _empty(title, "no segments")
    topics = topics_by_segments(tables)
    why = _creating_decision(tables)
    fig = make_subplots(rows=len(topics), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[f"topic {t}" for t in topics])
    shown: set[str] = set()
    for row, topic in enumerate(topics, start=1):
        g = seg[seg["topic"] == topic].sort_values("segment_id")
        pos = {int(r.segment_id): (_iso(r.created_at), (r.range_start + r.range_end) / 2)
               for r in g.itertuples()}
        ex: list[Any] = []
        ey: list[Any] = []
        for parent, child in dag_edges(g):
            (x0, y0), (x1, y1) = pos[parent], pos[child]
            ex += [x0, x1, None]
            ey += [y0, y1, None]
        fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", line={"color": "#555", "width": 1},
                                 hoverinfo="skip", showlegend=False), row=row, col=1)
        for created_by, h in g.groupby("created_by", sort=False):
            hover = [f"{t}<br>why: {why.get((topic, int(s)), str(created_by))}"
                     for t, s in zip(_segment_hover(h), h["segment_id"], strict=True)]
            fig.add_trace(go.Scatter(
                x=_iso(h["created_at"]), y=((h["range_start"] + h["range_end"]) / 2).tolist(),
                mode="markers+text", text=h["segment_id"].astype(str).tolist(),
                textposition="middle right", name=str(created_by), legendgroup=str(created_by),
                showlegend=str(created_by) not in shown,
                marker={"size": 14, "color": CREATED_BY_COLOR.get(str(created_by), "#ddd"),
                        "line": {"color": "black", "width": 1}},
                customdata=h["segment_id"].tolist(), hovertext=hover, hoverinfo="text"),
                row=row, col=1)
            shown.add(str(created_by))
        fig.update_yaxes(range=[-2000, 67536], title_text="segment_hash", row=row, col=1,
                         **HASH_TICKS)
        fig.update_xaxes(type="date", row=row, col=1)
    fig.update_layout(title=title + _of_topics(len(topics), seg["topic"].nunique()),
                      height=200 * len(topics) + 150, legend_title_text="created_by")
    return fig


def decision_rates(tables: RunTables) -> pd.DataFrame:
    """Per decision (index aligned with ``tables.decisions``): the highest of each rate of
    :data:`RATE_COLUMNS` (msg/s, bytes/s) over its ``segment_ids`` in the latest load sample at
    or before ``eval_time``; NaN when the decision names no segment or no sample precedes it."""
    d, load = tables.decisions, tables.segment_load
    out = pd.DataFrame(np.nan, index=d.index, columns=list(RATE_COLUMNS))
    if d.empty or load.empty:
        return out
    exploded = d[["topic", "eval_time", "segment_ids"]].explode("segment_ids").dropna()
    if exploded.empty:
        return out
    left = exploded.rename(columns={"segment_ids": "segment_id"}).astype({"segment_id": "int64"})
    left = left.reset_index().sort_values("eval_time", kind="stable")
    right = load[["topic", "segment_id", "sample_time", *RATE_COLUMNS]].sort_values(
        "sample_time", kind="stable")
    m = pd.merge_asof(left, right, left_on="eval_time", right_on="sample_time",
                      by=["topic", "segment_id"], direction="backward")
    got = m.groupby("index")[list(RATE_COLUMNS)].max()
    out.loc[got.index, list(RATE_COLUMNS)] = got.to_numpy()
    return out


def _decision_hover(tables: RunTables, d: pd.DataFrame) -> list[str]:
    """Hover text of the decisions ``d`` (rows of ``tables.decisions``)."""
    rates = decision_rates(tables).loc[d.index]
    config = tables.config
    policies = {str(t): topic_policy(config, str(t)) for t in d["topic"].unique()}
    out = []
    for (_, r), rate in zip(d.iterrows(), rates.itertuples(index=False), strict=True):
        action = str(r["action"])
        policy = policies[str(r["topic"])]
        lines = [f"<b>{r['topic']}: {'suppressed' if action == 'none' else action}</b> "
                 f"at {_iso(r['eval_time'])}",
                 f"reason: {r['reason']}" + (f" · suppressed by {r['suppressed_by']}"
                                             if pd.notna(r["suppressed_by"]) else ""),
                 f"trigger: {r['trigger']} · segments {list(map(int, r['segment_ids']))}"
                 + (f" · new bucket count {int(r['new_bucket_count'])}"
                    if pd.notna(r["new_bucket_count"]) else ""),
                 f"active segments {r['active_segments']} · consumers {r['consumers']}"
                 f" · bucket capacity {r['bucket_capacity']} · epoch {r['layout_epoch']}"]
        if not all(pd.isna(v) for v in rate):
            lines.append("rates: " + " · ".join(f"{c} {number_text(v)}" for c, v in
                                                zip(RATE_COLUMNS, rate, strict=True)))
        shown = [f for f in ACTION_THRESHOLDS.get(action, ()) if f in policy]
        if shown:
            lines.append("policy: " + " · ".join(f"{f} {number_text(policy[f])}" for f in shown))
        out.append("<br>".join(lines))
    return out


def decision_topics(decisions: pd.DataFrame, n: int = DECISION_TOPICS) -> list[str]:
    """The topics :func:`fig_decisions` draws, at most ``n``: most actions first, then most
    evaluations, then by name."""
    acted = decisions.assign(acted=decisions["action"] != "none")
    by = acted.groupby(acted["topic"].astype(str)).agg(acted=("acted", "sum"),
                                                       evaluations=("acted", "size"))
    order = sorted(by.index, key=lambda t: (-int(by.loc[t, "acted"]),
                                            -int(by.loc[t, "evaluations"]), t))
    return order[:n]


def fig_decisions(tables: RunTables) -> go.Figure:
    """Auto-scale decisions over time: one marker per evaluation that acted or was suppressed,
    x = ``eval_time``, y = topic (each action in a lane of the topic's row,
    :data:`ACTION_LANES`), symbol per action (▲ split, ▼ merge, ■ rebucket, × suppressed).
    Hover: reason, ``suppressed_by``, trigger, segments, counts at ``eval_time``, the rates of
    the segments it named (:func:`decision_rates`) and the thresholds of the topic's resolved
    policy that the action uses (:data:`ACTION_THRESHOLDS`). One trace per action, named with
    its counts by reason (suppressed ones: by ``suppressed_by``); ``customdata`` = the row's
    index in ``autoscale_decisions``. At most :data:`DECISION_TOPICS` topics
    (:func:`decision_topics`; the title says how many of how many). Source:
    ``autoscale_decisions``, ``segment_load``, ``runs.config``."""
    title = f"{tables.run_id}: auto-scale decisions (hover: reason, rates, thresholds)"
    d = tables.decisions
    if d.empty:
        return _empty(title, "no auto-scale decisions")
    total = d["topic"].nunique()
    topics = decision_topics(d)
    d = d[d["topic"].astype(str).isin(topics)]
    hover = pd.Series(_decision_hover(tables, d), index=d.index)
    topics = sorted(topics)
    row = {t: i for i, t in enumerate(topics)}  # numeric rows: each action in a lane of its own
    fig = go.Figure()
    for action, (symbol, color) in ACTION_MARKERS.items():
        a = d[d["action"] == action]
        if a.empty:
            continue
        # a suppressed evaluation's reason is always no-candidate: what held it back says more
        counts = (a["suppressed_by"].fillna("none") if action == "none" else a["reason"]
                  ).value_counts()
        reasons = ", ".join(f"{k} ×{v}" for k, v in counts.items())
        label = "suppressed" if action == "none" else action
        fig.add_trace(go.Scatter(
            x=_iso(a["eval_time"]),
            y=[row[t] + ACTION_LANES[action] for t in a["topic"].astype(str)], mode="markers",
            name=f"{label} ({reasons})",
            marker={"symbol": symbol, "size": 13, "color": color,
                    "line": {"color": "black", "width": 1}},
            customdata=a.index.tolist(), hovertext=hover[a.index].tolist(), hoverinfo="text"))
    fig.update_yaxes(tickmode="array", tickvals=list(range(len(topics))), ticktext=topics,
                     range=[-0.5, len(topics) - 0.5], zeroline=False, title_text="topic")
    fig.update_xaxes(type="date", title_text="eval_time (UTC)")
    fig.update_layout(title=title + _of_topics(len(topics), total),
                      height=max(280, 40 * len(topics) + 200),
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
                      margin={"t": 110}, hoverlabel={"align": "left"})
    return fig


def fig_rates(tables: RunTables, max_topics: int = 4) -> go.Figure:
    """Per-segment ``msg_rate_in`` (msg/s, per stats period, every load sample) of the busiest
    topics, one panel per topic, with the split (red dashed) and merge (blue dotted) thresholds
    of the topic's resolved policy. Hover: segment, time, all four rates. Source:
    ``segment_load``, ``runs.config``."""
    title = f"{tables.run_id}: per-segment msg_rate_in against the split / merge thresholds"
    load = tables.segment_load
    topics = rate_topics(tables, max_topics)
    if not topics:
        return _empty(title, "no load samples")
    config = tables.config
    fig = make_subplots(rows=len(topics), cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        subplot_titles=[f"topic {t}" for t in topics])
    for row, topic in enumerate(topics, start=1):
        g = load[load["topic"] == topic].sort_values(["segment_id", "sample_time"])
        for sid, s in g.groupby("segment_id"):
            custom = s[list(RATE_COLUMNS[1:])].to_numpy().tolist()
            fig.add_trace(go.Scatter(
                x=_iso(s["sample_time"]), y=s["msg_rate_in"].tolist(), mode="lines",
                name=f"{topic} segment {sid}", customdata=custom,
                hovertemplate=(f"{topic} segment {sid}<br>%{{x}}<br>msg_rate_in %{{y:,.4g}}"
                               "<br>bytes_rate_in %{customdata[0]:,.4g}<br>msg_rate_out "
                               "%{customdata[1]:,.4g}<br>bytes_rate_out %{customdata[2]:,.4g}"
                               "<extra></extra>")), row=row, col=1)
        policy = topic_policy(config, topic)
        top = float(g["msg_rate_in"].max()) if len(g) else 1.0
        for field, color, dash in (("split_msg_rate_in", "#d62728", "dash"),
                                   ("merge_msg_rate_in", "#1f77b4", "dot")):
            value = policy.get(field)
            if value is None:
                continue
            fig.add_hline(y=float(value), line={"color": color, "dash": dash, "width": 1.5},
                          annotation_text=f"{field.split('_')[0]} threshold {float(value):g}",
                          annotation_position="top left", row=row, col=1)
        split = policy.get("split_msg_rate_in")
        if split is not None and float(split) > 3 * top:  # keep the curves readable
            fig.update_yaxes(range=[0, max(top, float(policy.get("merge_msg_rate_in") or 0))
                                    * 1.3 or 1], row=row, col=1)
        fig.update_yaxes(title_text="msg/s", row=row, col=1)
    fig.update_layout(title=title, height=230 * len(topics) + 150, showlegend=False)
    return fig


def fig_layout(tables: RunTables) -> go.Figure:
    """Active segments (top) and entry buckets (bottom) per topic over time, step lines, for the
    busiest :data:`~pipelines.analysis.figure_data.MAX_TOPICS` topics plus the total over all
    topics; auto-scale decisions as markers on the top panel (▲ split, ▼ merge, ■ rebucket at
    the topic's segment count at ``eval_time``; × suppressed evaluations at 0), each action's
    legend entry counting them by reason (suppressed: by ``suppressed_by``). Source:
    ``segments``, ``autoscale_decisions``."""
    title = f"{tables.run_id}: segments and buckets over time, with auto-scale decisions"
    timeline = layout_timeline(tables.segments)
    if timeline.empty:
        return _empty(title, "no segments")
    topics = busiest_topics(tables)
    all_topics = sorted(set(timeline["topic"]))
    end = tables.end_time
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.6, 0.4],
                        vertical_spacing=0.06)

    def stepped(g: pd.DataFrame, name: str, color: str, width: float) -> None:
        x, ys = _iso(g["time"]), {c: g[c].tolist() for c in ("active_segments", "buckets")}
        if end is not None:  # the last counts hold to the end of the run
            x = [*x, _iso(end)]
            ys = {c: [*v, v[-1]] for c, v in ys.items()}
        for row, col in ((1, "active_segments"), (2, "buckets")):
            fig.add_trace(go.Scatter(
                x=x, y=ys[col], mode="lines", name=name, legendgroup=name, showlegend=row == 1,
                line={"shape": "hv", "color": color, "width": width},
                hovertemplate=f"{name}<br>%{{x}}<br>{col} %{{y}}<extra></extra>"),
                row=row, col=1)

    for i, topic in enumerate(topics):  # earlier topics drawn thicker: equal lines stay visible
        stepped(timeline[timeline["topic"] == topic], topic, _color(i),
                1.4 + 1.2 * (len(topics) - 1 - i))
    if len(all_topics) > 1:
        stepped(total_timeline(timeline), f"all {len(all_topics)} topics",
                "rgba(0,0,0,0.6)", 2.2)
    _decision_markers(fig, tables.decisions, timeline)
    fig.update_yaxes(title_text="active segments", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="entry buckets", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(type="date", row=1, col=1)
    fig.update_xaxes(type="date", title_text="publish time (UTC)", row=2, col=1)
    fig.update_layout(title=title, height=560, hoverlabel={"align": "left"})
    return fig


def segments_at(timeline: pd.DataFrame, topics: pd.Series,
                times: pd.Series) -> npt.NDArray[np.int64]:
    """Active segments of ``topics[i]`` at ``times[i]`` (the :func:`layout_timeline` count in
    force then; 0 before the topic's first segment). Shape ``(len(topics),)``, int64."""
    if not len(topics):
        return np.zeros(0, dtype=np.int64)
    ns = "datetime64[ns, UTC]"  # the tables' timestamps come as us or ns
    left = pd.DataFrame({"topic": topics.astype(str).to_numpy(), "time": times.astype(ns),
                         "_i": np.arange(len(topics))}).sort_values("time", kind="stable")
    right = timeline.assign(topic=timeline["topic"].astype(str),
                            time=timeline["time"].astype(ns)).sort_values("time")
    m = pd.merge_asof(left, right[["topic", "time", "active_segments"]], on="time", by="topic",
                      direction="backward")
    counts: npt.NDArray[np.int64] = (m.sort_values("_i")["active_segments"].fillna(0)
                                     .to_numpy(dtype=np.int64))
    return counts


def _decision_markers(fig: go.Figure, decisions: pd.DataFrame, timeline: pd.DataFrame) -> None:
    """:func:`fig_layout`'s decision markers on its top panel: one trace per action at the
    topic's segment count, suppressed evaluations at 0."""
    for action, (symbol, color) in ACTION_MARKERS.items():
        d = decisions[decisions["action"] == action] if len(decisions) else decisions
        if d.empty:
            continue
        # a suppressed evaluation's reason is always no-candidate: what held it back says more
        counts = (d["suppressed_by"].fillna("none") if action == "none" else d["reason"]
                  ).value_counts()
        label = "suppressed" if action == "none" else action
        ys = (np.zeros(len(d), dtype=np.int64) if action == "none"
              else segments_at(timeline, d["topic"], d["eval_time"]))
        fig.add_trace(go.Scatter(
            x=_iso(d["eval_time"]), y=ys.tolist(), mode="markers",
            name=f"{label} ({', '.join(f'{k} ×{v}' for k, v in counts.items())})",
            marker={"symbol": symbol, "size": 11 if action != "none" else 7, "color": color,
                    "line": {"color": "black", "width": 1}},
            hovertext=[f"{t}: {label} ({r})" for t, r in zip(d["topic"], d["reason"],
                                                            strict=True)],
            hoverinfo="text+x"), row=1, col=1)


def window_cells(starts: npt.NDArray[np.float64], step: float,
                 values: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64],
                                                           npt.NDArray[np.float64]]:
    """Cell edges (``len + 1``, the unit of ``starts``) and values (rows × cells) for windows
    starting at ``starts`` (sorted), each ``step`` long: where windows without a row lie
    between two (idle, left out of ``consumer_load``), an empty cell (NaN) fills the gap, so
    each window is drawn over its own time only."""
    if not len(starts):
        return np.array([0.0, step]), values
    ends = starts + step
    gap = np.r_[starts[1:] > ends[:-1] + step * 1e-6, False]
    edges = np.sort(np.r_[starts, ends[gap], ends[-1]])
    cells = np.insert(values, np.flatnonzero(gap) + 1, np.nan, axis=1)
    return edges, cells


def _ms_iso(ms: npt.NDArray[np.float64]) -> list[str]:
    return [t.isoformat() for t in pd.to_datetime(np.round(ms).astype("int64"), unit="ms")]


def fig_consumers(tables: RunTables) -> go.Figure:
    """Left: each consumer's share of its subscription's messages (the dotted line is the fair
    share 1/consumers). Middle: busy and idle time per consumer (minutes, over the windows it
    was connected; the hover counts its empty windows). Right: messages per consumer per
    ``consumer_load`` window (a heat map; blank = none, idle stretches the replay left out
    included). Source: ``consumer_load``
    (:func:`~pipelines.analysis.run_tables.consumer_shares`)."""
    title = f"{tables.run_id}: consumer load share and idle time"
    shares = consumer_shares(tables)
    if shares.empty:
        return _empty(title, "no consumer load")
    multi = shares["subscription"].nunique() > 1
    labels = [f"{s}/{c}" if multi else str(c) for s, c in
              zip(shares["subscription"], shares["consumer_name"], strict=True)]
    fig = make_subplots(rows=1, cols=3, column_widths=[0.27, 0.27, 0.46], shared_yaxes=True,
                        horizontal_spacing=0.03,
                        subplot_titles=["load share (dotted: fair share)", "busy / idle time",
                                        "messages per consumer per window"])
    fig.add_trace(go.Bar(x=shares["share"].tolist(), y=labels, orientation="h",
                         marker={"color": "#9467bd"}, name="share", showlegend=False,
                         hovertemplate="%{y}<br>share %{x:.3f}<extra></extra>"), row=1, col=1)
    for sub, g in shares.groupby("subscription", sort=False):
        rows = [i for i, s in enumerate(shares["subscription"]) if s == sub]
        fig.add_shape(type="line", x0=1 / len(g), x1=1 / len(g), y0=min(rows) - 0.45,
                      y1=max(rows) + 0.45, line={"color": "black", "dash": "dot", "width": 1.5},
                      row=1, col=1)
    empty = [f"{e}/{w} windows empty" for e, w in zip(shares["empty_windows"], shares["windows"],
                                                      strict=True)]
    for name, col, color in (("busy", "busy_ms", "#ff7f0e"), ("idle", "idle_ms", "#bfbfbf")):
        fig.add_trace(go.Bar(x=(shares[col] / 60000).tolist(), y=labels, orientation="h",
                             name=name, marker={"color": color}, customdata=empty,
                             hovertemplate=f"%{{y}}<br>{name} %{{x:,.2f}} min<br>"
                                           "%{customdata}<extra></extra>"), row=1, col=2)
    cl = tables.consumer_load
    grid = cl.pivot_table(index=["subscription", "consumer_name"], columns="window_start",
                          values="messages", aggfunc="sum")
    grid = grid.reindex(pd.MultiIndex.from_frame(shares[["subscription", "consumer_name"]]))
    starts = (naive_utc(pd.Series(grid.columns)).astype("datetime64[ms]")
              .astype("int64").to_numpy(dtype=np.float64))
    windows = tables.windows
    step = (windows.window_ms * windows.speed if windows is not None
            else float(np.median(np.diff(starts))) if len(starts) > 1 else 60_000.0)
    edges, values = window_cells(starts, step, grid.to_numpy(dtype=float))
    z = np.where(values > 0, values, np.nan)
    fig.add_trace(go.Heatmap(
        x=_ms_iso(edges), y=labels, z=[[None if math.isnan(v) else v for v in row] for row in z],
        colorscale="Viridis", hoverongaps=False, colorbar={"title": {"text": "messages"}},
        hovertemplate="%{y}<br>window from %{x}<br>%{z:,} messages<extra></extra>"),
        row=1, col=3)
    fig.update_yaxes(autorange="reversed", type="category", row=1, col=1)
    fig.update_xaxes(title_text="share of subscription messages", row=1, col=1)
    fig.update_xaxes(title_text="minutes", row=1, col=2)
    fig.update_xaxes(type="date", title_text="publish time (UTC)", row=1, col=3)
    fig.update_layout(title=title, barmode="stack", height=max(320, 28 * len(labels) + 200),
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.06, "x": 0.3})
    return fig


def by_topic(rows: pd.DataFrame, time: str,
             n: int = MAX_TOPICS) -> list[tuple[str, pd.DataFrame]]:
    """``rows`` (a ``topic`` column) split into the ``n`` topics with most rows (then by name),
    each its own series, and the rest as one series named ``other topics (k)``; each sorted by
    ``time``. A run of thousands of topics keeps a figure of a few series."""
    counts = rows["topic"].astype(str).value_counts()
    top = sorted(counts.index, key=lambda t: (-int(counts[t]), t))[:n]
    out = [(t, rows[rows["topic"].astype(str) == t]) for t in top]
    rest = rows[~rows["topic"].astype(str).isin(top)]
    if len(rest):
        out.append((f"other topics ({rest['topic'].nunique()})", rest))
    return [(t, g.sort_values(time, kind="stable")) for t, g in out]


def fig_handoffs(tables: RunTables) -> go.Figure:
    """Bucket handoffs (draining, PIP-379): left, each handoff at its ``withheld_from`` time with
    the seconds the bucket was withheld (open at end of input: counted to the end, red ring);
    right, cumulative withheld bucket-seconds per topic (:func:`by_topic`: the busiest topics
    apart, the rest as one series). Source: ``bucket_handoffs``."""
    h = withheld_intervals(tables)
    title = f"{tables.run_id}: withheld-bucket time during handoffs"
    if h.empty:
        return _empty(title, "no bucket handoffs")
    fig = make_subplots(rows=1, cols=2, subplot_titles=[
        f"{len(h)} handoffs, {h['withheld_s'].sum():,.1f} bucket-seconds withheld",
        "cumulative withheld bucket-seconds per topic"])
    series = by_topic(h, "withheld_from")
    for i, (topic, g) in enumerate(series):
        hover = [f"{t} segment {s} bucket {b} → {c}<br>withheld {w:,.2f} s"
                 for t, s, b, c, w in zip(g["topic"], g["segment_id"], g["bucket_index"],
                                          g["to_consumer"], g["withheld_s"], strict=True)]
        fig.add_trace(go.Scatter(x=_iso(g["withheld_from"]), y=g["withheld_s"].tolist(),
                                 mode="markers", name=f"{topic} ({len(g)})", legendgroup=topic,
                                 marker={"color": _color(i), "size": 8, "opacity": 0.8},
                                 hovertext=hover, hoverinfo="text+x"), row=1, col=1)
        fig.add_trace(go.Scatter(x=_iso(g["withheld_from"]), y=g["withheld_s"].cumsum().tolist(),
                                 mode="lines+markers", name=topic, legendgroup=topic,
                                 showlegend=False, line={"shape": "hv", "color": _color(i)},
                                 marker={"size": 5}), row=1, col=2)
    still = h[h["open"]]
    if len(still):
        fig.add_trace(go.Scatter(x=_iso(still["withheld_from"]), y=still["withheld_s"].tolist(),
                                 mode="markers", name="still withheld at end",
                                 marker={"symbol": "circle-open", "size": 15, "color": "red",
                                         "line": {"width": 2}}), row=1, col=1)
    fig.update_yaxes(title_text="withheld (s)", range=_zero_based(float(h["withheld_s"].max())),
                     row=1, col=1)
    fig.update_yaxes(title_text="bucket-seconds", row=1, col=2, range=_zero_based(
        max(float(g["withheld_s"].sum()) for _, g in series)))
    fig.update_xaxes(type="date", range=_run_range(tables), title_text="publish time (UTC)")
    fig.update_layout(title=title, height=420)
    return fig


def fig_drain(tables: RunTables) -> go.Figure:
    """Sealed-segment drain time: seconds from ``sealed_at`` to the last acknowledgment of the
    segment's entries, per sealed segment and subscription, at its seal time (labelled
    ``topic/segment`` when there are few; segments still holding unacknowledged entries at end
    of input: red ×, drawn above the rest). Source: ``segments``, ``segment_drains``,
    ``dispatch`` (:func:`~pipelines.analysis.run_tables.drain_times`)."""
    d = drain_times(tables)
    if d.empty:
        return _empty(f"{tables.run_id}: sealed-segment drain time", "no sealed segments")
    done = d[d["drained"]]
    top = float(done["drain_s"].max()) if len(done) else 0.0
    fig = go.Figure()
    for i, (topic, g) in enumerate(by_topic(done, "sealed_at")):
        fig.add_trace(go.Scatter(
            x=_iso(g["sealed_at"]), y=g["drain_s"].tolist(),
            mode="markers+text" if len(done) <= 24 else "markers",
            text=[f"{t}/{s}" for t, s in zip(g["topic"], g["segment_id"], strict=True)],
            textposition="top right",
            textfont={"size": 9}, name=f"{topic} ({len(g)})", marker={"color": _color(i),
                                                                       "size": 9},
            hovertext=[f"{t} segment {s} ({sub})<br>drained in {v:,.2f} s"
                       for t, s, sub, v in zip(g["topic"], g["segment_id"], g["subscription"],
                                               g["drain_s"], strict=True)],
            hoverinfo="text+x"))
    pending = d[~d["drained"]]
    if len(pending):
        fig.add_trace(go.Scatter(
            x=_iso(pending["sealed_at"]), y=[top * 1.1 + 1] * len(pending), mode="markers",
            name="not drained at end", marker={"symbol": "x", "color": "red", "size": 11},
            hovertext=[f"{t} segment {s} ({sub}): not drained at end"
                       for t, s, sub in zip(pending["topic"], pending["segment_id"],
                                            pending["subscription"], strict=True)],
            hoverinfo="text+x"))
    fig.update_yaxes(title_text="drain time (s)",
                     range=_zero_based(top * 1.1 + 1 if len(pending) else top))
    fig.update_xaxes(type="date", range=_run_range(tables), title_text="sealed_at (UTC)")
    fig.update_layout(title=f"{tables.run_id}: sealed-segment drain time ({len(d)} segment × "
                            f"subscription; max {top:,.1f} s)", height=400)
    return fig


def batch_size_bins(top: int) -> npt.NDArray[np.int64]:
    """Edges of :func:`fig_batching`'s batch-size bins up to ``top`` messages per entry: about
    25 log-spaced integer edges from 1 and one past the last (each bin ``[edge, next)``)."""
    bins = np.unique(np.round(np.logspace(0, np.log10(max(top, 2)) + 0.05, 25)).astype(np.int64))
    return np.append(bins, bins[-1] + 1)


def fig_batching(runs: Sequence[RunTables]) -> go.Figure:
    """Left: distribution of entry sizes (``num_messages`` per entry, log-spaced bins of
    :func:`batch_size_bins`, share of entries) per run, a step line each. Right: entries per
    message per topic (the busiest 8 of the first run) per run; 1 = no batching. Source:
    ``entries``, ``runs.config``."""
    title = "batching: batch-size distribution and entries per message"
    drawn = [r for r in runs if len(r.entries)]
    if not drawn:
        return _empty(title, "no entries")
    top = max(int(r.entries["num_messages"].max()) for r in drawn)
    bins = batch_size_bins(top)
    topics = busiest_topics(drawn[0], 8)
    fig = make_subplots(rows=1, cols=2, subplot_titles=[
        "batch-size distribution per batching mode", "entries per message per topic"])
    for i, r in enumerate(drawn):
        e = r.entries
        mode = r.config.get("batching", {}).get("mode", "?")
        counts, _ = np.histogram(e["num_messages"], bins=bins)
        share = counts / len(e)
        epm = len(e) / e["num_messages"].sum()
        fig.add_trace(go.Scatter(
            x=bins.tolist(), y=[*share.tolist(), float(share[-1])], mode="lines",
            line={"shape": "hv", "color": _color(i), "width": 2}, legendgroup=r.run_id,
            name=f"{r.run_id} ({mode}): {epm:.4f} entries/msg, mean batch "
                 f"{e['num_messages'].mean():.2f} msgs",
            hovertemplate="%{x} messages per entry and up<br>%{y:.1%} of entries"
                          "<extra></extra>"), row=1, col=1)
        per_topic = e.groupby("topic").agg(n=("num_messages", "size"), m=("num_messages", "sum"))
        vals = [float(per_topic.loc[t, "n"] / per_topic.loc[t, "m"]) if t in per_topic.index
                else None for t in topics]
        fig.add_trace(go.Bar(x=topics, y=vals, name=f"{r.run_id} ({mode})", showlegend=False,
                             legendgroup=r.run_id, marker={"color": _color(i)},
                             hovertemplate=f"{r.run_id}<br>%{{x}}: %{{y:.4f}} entries/msg"
                                           "<extra></extra>"), row=1, col=2)
    fig.add_hline(y=1.0, line={"color": "grey", "dash": "dot", "width": 1}, row=1, col=2)
    fig.update_xaxes(type="log" if top > 20 else "linear",
                     title_text="messages per entry (batch size)", row=1, col=1)
    fig.update_yaxes(title_text="share of entries", tickformat=".0%", row=1, col=1)
    fig.update_yaxes(title_text="entries per message", row=1, col=2)
    fig.update_layout(title=title, height=440, barmode="group",
                      legend={"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0})
    return fig


# ---- the report's figures ----------------------------------------------------------------------

def run_figures(tables: RunTables) -> list[ReportFigure]:
    """Every figure of one run, in page order (see each ``fig_*``; keys ``<kind>-<run_id>``):
    segments, layout, dag, decisions, rates, consumers, handoffs, drain, batching."""
    r, k = tables, tables.run_id
    return [
        ReportFigure(f"segments-{k}", "Segments over time",
                     "Each segment's hash range over its lifetime, coloured by what created it.",
                     fig_segments(r)),
        ReportFigure(f"layout-{k}", "Segments and buckets over time",
                     "Active segments and entry buckets per topic (step lines), auto-scale "
                     "decisions as markers with Pulsar's reason.", fig_layout(r)),
        ReportFigure(f"dag-{k}", "Segment DAG",
                     "Segments at their creation; edges lead from parents to children.",
                     fig_dag(r)),
        ReportFigure(f"decisions-{k}", "Auto-scale decisions",
                     "Every evaluation that acted or was suppressed; the hover has the reason, "
                     "the rates and the thresholds.", fig_decisions(r)),
        ReportFigure(f"rates-{k}", "Segment load against thresholds",
                     "msg_rate_in of every segment (msg/s, per stats period) with the split and "
                     "merge thresholds of the topic's policy.", fig_rates(r)),
        ReportFigure(f"consumers-{k}", "Consumers",
                     "Load share, busy/idle time and messages per window of every consumer.",
                     fig_consumers(r)),
        ReportFigure(f"handoffs-{k}", "Bucket handoffs",
                     "How long buckets were withheld while draining to a new consumer.",
                     fig_handoffs(r)),
        ReportFigure(f"drain-{k}", "Sealed-segment drain",
                     "Seconds from a segment's seal to the last acknowledgment of its entries.",
                     fig_drain(r)),
        ReportFigure(f"batching-{k}", "Batching",
                     "Batch-size distribution and entries per message.", fig_batching([r])),
    ]


def runs_batching(runs: Sequence[RunTables]) -> ReportFigure:
    """The batching figure of several runs side by side (key ``batching``): the last figure of a
    report of more than one run."""
    return ReportFigure("batching", "Batching of all runs",
                        "Batch-size distribution and entries per message per run.",
                        fig_batching(runs))


def figure_has_data(fig: go.Figure) -> bool:
    """True when ``fig`` holds a trace (a figure of an empty table holds only a note)."""
    return len(fig.data) > 0


def write_pngs(figures: Sequence[ReportFigure], folder: str | Path) -> list[str]:
    """Render ``figures`` as PNG into ``folder`` (created), ``<key>.png`` each,
    :data:`PNG_WIDTH` wide and as tall as the figure's layout says, in one kaleido session (it
    drives a headless Chrome or Chromium: Debian's ``chromium``, or the one
    ``plotly_get_chrome`` downloads). Returns the paths written.
    Raises :class:`PageError` when ``folder`` cannot be created or kaleido finds no
    browser."""
    out = Path(folder)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PageError(f"--png-dir {folder} cannot be created: {exc.strerror or exc}") from None
    paths = [str(out / f"{f.key}.png") for f in figures]
    try:
        # each figure's own height (kaleido's default is 500 px whatever the layout says)
        pio.write_images([f.figure for f in figures], paths, format="png", width=PNG_WIDTH,
                         height=[int(f.figure.layout.height or 500) for f in figures])
    except ChromeNotFoundError:
        raise PageError("--png-dir needs Chrome or Chromium to render PNG (kaleido): install "
                        "Debian's chromium, or run plotly_get_chrome") from None
    return paths
