"""Interactive pages (Plotly): one run's report and a policy sweep's trade-offs (issue #20).

Figure builders return ``list[(title, plotly.graph_objects.Figure)]``; zoom and pan are Plotly's
defaults and every mark has a hover label.

- :func:`run_figures` — one run (:class:`pipelines.analysis.run_tables.RunTables`): segments
  over time (each segment's hash range ``[range_start, range_end]`` as a bar from ``created_at`` to
  ``sealed_at``), the segment DAG (parents → children), auto-scale decisions over time (hover:
  Pulsar's reason, the thresholds of the topic's resolved policy and the rates of the segments
  at ``eval_time``), and per-segment ``msg_rate_in`` against the split / merge thresholds.
- :func:`sweep_figures` — a ``sweeps`` frame (one row per scenario): heat maps of a metric per
  pair of swept parameters (metric chosen with a dropdown) and Pareto views of
  ``entries_per_message`` against ``withheld_bucket_s`` and ``drain_max_s``.
- :func:`write_run_page` (``topic-replay report --html``) and :func:`write_sweep_page`: ONE
  self-contained HTML file each. plotly.js is inlined once in the page's ``<head>``; nothing is
  fetched (no CDN, fonts or images from elsewhere), so the file works offline from ``file://``.
  Every run has a section ``#run-<run_id>``; a click on a point of a sweep figure (its
  ``customdata`` holds the run_id) jumps there.

The figures the Plotly views do not cover (consumers, handoffs, drain, batching) stay the
matplotlib figures of :mod:`pipelines.analysis.figures`, embedded as PNG.
:func:`write_report` is ``topic-replay report``.
"""

from __future__ import annotations

import base64
import html
import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import plotly.graph_objects as go
from deltalake import DeltaTable
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from pipelines.analysis.figure_data import (
    CREATED_BY_COLOR,
    dag_edges,
    naive_utc,
    rate_topics,
    topic_policy,
    topics_by_segments,
)
from pipelines.analysis.figures import (
    _CSS,
    ReportFigure,
    build_figures,
    fig_batching,
    fig_consumers,
    fig_drain,
    fig_handoffs,
    png_bytes,
    table_html,
    topic_table,
)
from pipelines.analysis.run_tables import METRICS, RunTables, metrics_frame, run_metrics
from pipelines.analysis.whatif.recommend import RUN_SCOPE, Recommendation, recommend
from pipelines.engine.findings import ordered_findings
from pipelines.storage.delta import DeltaStore

Figures = list[tuple[str, go.Figure]]

SWEEP_METRICS: tuple[str, ...] = ("entries_per_message", "withheld_bucket_s", "drain_max_s",
                                  "flaps", "splits", "merges", "at_max_segments_s")
"""Metrics of a ``sweeps`` row the heat maps offer in their dropdown (first = shown first)."""

PARETO_VIEWS: tuple[tuple[str, str], ...] = (("entries_per_message", "withheld_bucket_s"),
                                             ("entries_per_message", "drain_max_s"))
"""(x, y) metric pairs of the Pareto views; both are minimized."""

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
"""Plotly config of every figure (no link to plotly's site in the mode bar)."""

ACTION_MARKERS = {"split": ("triangle-up", "#d62728"), "merge": ("triangle-down", "#1f77b4"),
                  "rebucket": ("square", "#2ca02c"), "none": ("x", "#7f7f7f")}
"""Marker symbol and colour per ``autoscale_decisions.action`` (none = suppressed)."""

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


class PageError(ValueError):
    """A page cannot be written from what the tables hold (e.g. an unknown sweep_id); the
    message is one sentence naming the problem."""


# ---- helpers ---------------------------------------------------------------------------------

def _iso(ts: Any) -> Any:
    """UTC timestamps (Series or scalar) as naive ISO strings Plotly reads as dates."""
    if isinstance(ts, pd.Series):
        return [None if pd.isna(t) else pd.Timestamp(t).isoformat() for t in naive_utc(ts)]
    return None if ts is None or pd.isna(ts) else pd.Timestamp(naive_utc(ts)).isoformat()


def _num(v: Any) -> str:
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


def _decision_hover(tables: RunTables) -> list[str]:
    d = tables.decisions
    rates = decision_rates(tables)
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
            lines.append("rates: " + " · ".join(f"{c} {_num(v)}" for c, v in
                                                zip(RATE_COLUMNS, rate, strict=True)))
        shown = [f for f in ACTION_THRESHOLDS.get(action, ()) if f in policy]
        if shown:
            lines.append("policy: " + " · ".join(f"{f} {_num(policy[f])}" for f in shown))
        out.append("<br>".join(lines))
    return out


def fig_decisions(tables: RunTables) -> go.Figure:
    """Auto-scale decisions over time: one marker per evaluation that acted or was suppressed,
    x = ``eval_time``, y = topic, symbol per action (▲ split, ▼ merge, ■ rebucket, × suppressed).
    Hover: reason, ``suppressed_by``, trigger, segments, counts at ``eval_time``, the rates of
    the segments it named (:func:`decision_rates`) and the thresholds of the topic's resolved
    policy that the action uses (:data:`ACTION_THRESHOLDS`). One trace per action, named with
    its counts by reason (suppressed ones: by ``suppressed_by``); ``customdata`` = the row's
    index in ``autoscale_decisions``. Source: ``autoscale_decisions``, ``segment_load``,
    ``runs.config``."""
    title = f"{tables.run_id}: auto-scale decisions (hover: reason, rates, thresholds)"
    d = tables.decisions
    if d.empty:
        return _empty(title, "no auto-scale decisions")
    hover = pd.Series(_decision_hover(tables), index=d.index)
    topics = sorted(map(str, d["topic"].unique()))
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
            x=_iso(a["eval_time"]), y=a["topic"].astype(str).tolist(), mode="markers",
            name=f"{label} ({reasons})",
            marker={"symbol": symbol, "size": 13, "color": color,
                    "line": {"color": "black", "width": 1}},
            customdata=a.index.tolist(), hovertext=hover[a.index].tolist(), hoverinfo="text"))
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=topics,
                     title_text="topic")
    fig.update_xaxes(type="date", title_text="eval_time (UTC)")
    fig.update_layout(title=title, height=max(280, 40 * len(topics) + 200),
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


def run_figures(tables: RunTables) -> Figures:
    """The interactive figures of one run, in page order: segments over time, segment DAG,
    auto-scale decisions, rates against thresholds (see each ``fig_*``). Returns ``[(title,
    Figure)]``; a figure whose table is empty shows a "no …" note."""
    return [("Segments over time", fig_segments(tables)),
            ("Segment DAG", fig_dag(tables)),
            ("Auto-scale decisions", fig_decisions(tables)),
            ("Segment load against thresholds", fig_rates(tables))]


# ---- a sweep ---------------------------------------------------------------------------------

def _settings_value(v: Any) -> Any:
    return json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v


def sweep_settings(sweeps: pd.DataFrame) -> pd.DataFrame:
    """The ``settings`` JSON of each scenario as columns: index = ``run_id`` (sweep order), one
    column per dotted key (first seen first), a key a scenario does not set = None. Raises
    :class:`PageError` when a ``settings`` value is not a JSON object."""
    rows = []
    for run_id, text in zip(sweeps["run_id"], sweeps["settings"], strict=True):
        try:
            value = json.loads(text) if text else {}
        except (TypeError, json.JSONDecodeError):
            value = None
        if not isinstance(value, dict):
            raise PageError(f"sweeps row {run_id}: settings {text!r} is not a JSON object")
        rows.append({k: _settings_value(v) for k, v in value.items()})
    frame = pd.DataFrame(rows, index=pd.Index(list(sweeps["run_id"]), name="run_id"),
                         dtype=object)
    return frame.where(frame.notna(), None)


def sweep_parameters(sweeps: pd.DataFrame) -> list[str]:
    """The swept parameters: ``settings`` keys that take more than one value (a scenario not
    setting a key counts as its own value), in the order first seen."""
    s = sweep_settings(sweeps)
    return [c for c in s.columns if s[c].map(repr).nunique() > 1]


def _sort_key(v: Any) -> tuple[int, float, str]:
    if v is None:
        return (2, 0.0, "")
    if isinstance(v, bool):
        return (1, 0.0, str(v))
    if isinstance(v, int | float):
        return (0, float(v), "")
    return (1, 0.0, str(v))


def _label(v: Any) -> str:
    return "(unset)" if v is None else (f"{v:g}" if isinstance(v, float) else str(v))


def heatmap_grid(sweeps: pd.DataFrame, x_param: str, y_param: str,
                 metric: str) -> tuple[list[str], list[str], npt.NDArray[np.float64],
                                       list[list[Any]], npt.NDArray[np.int_]]:
    """One metric over a pair of parameters.

    Returns ``(x_labels, y_labels, z, run_ids, counts)``: labels are the parameters' values
    (numbers ascending, then strings, then "(unset)"); ``z[i][j]`` (shape ``len(y) × len(x)``)
    is the mean of ``metric`` over the scenarios with ``y_param = y[i]`` and ``x_param = x[j]``
    (NaN when none, or none has a value); ``run_ids[i][j]`` the first such scenario in sweep
    order (None when none); ``counts[i][j]`` how many scenarios the cell averages.
    """
    settings = sweep_settings(sweeps)
    for p in (x_param, y_param):
        if p not in settings.columns:
            raise PageError(f"parameter {p} is in no scenario's settings")
    values = pd.to_numeric(sweeps[metric], errors="coerce").to_numpy(dtype=float) if (
        metric in sweeps.columns) else np.full(len(sweeps), np.nan)
    xs = sorted({repr(v): v for v in settings[x_param]}.values(), key=_sort_key)
    ys = sorted({repr(v): v for v in settings[y_param]}.values(), key=_sort_key)
    xi = {repr(v): j for j, v in enumerate(xs)}
    yi = {repr(v): i for i, v in enumerate(ys)}
    total = np.zeros((len(ys), len(xs)))
    valued = np.zeros((len(ys), len(xs)), dtype=int)
    counts = np.zeros((len(ys), len(xs)), dtype=int)
    run_ids: list[list[Any]] = [[None] * len(xs) for _ in ys]
    for k, (run_id, xv, yv) in enumerate(zip(settings.index, settings[x_param],
                                             settings[y_param], strict=True)):
        i, j = yi[repr(yv)], xi[repr(xv)]
        counts[i, j] += 1
        if run_ids[i][j] is None:
            run_ids[i][j] = run_id
        if not np.isnan(values[k]):
            total[i, j] += values[k]
            valued[i, j] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(valued > 0, total / np.maximum(valued, 1), np.nan)
    return [_label(v) for v in xs], [_label(v) for v in ys], z, run_ids, counts


def _metric_label(metric: str) -> str:
    labels = dict(METRICS) | {"flaps": "flaps (split then merge of a range, or reverse)",
                              "at_max_segments_s": "longest time a topic spent at max_segments (s)"}
    return labels.get(metric, metric)


def fig_heatmap(sweeps: pd.DataFrame, x_param: str, y_param: str,
                metrics: Sequence[str] = SWEEP_METRICS) -> go.Figure:
    """Heat map of each of ``metrics`` over ``x_param`` × ``y_param`` (:func:`heatmap_grid`), one
    heatmap trace per metric, a dropdown showing one at a time (the first at load). With more
    than two swept parameters the others are averaged (the title says so). ``customdata`` of a
    cell = the run_id of its first scenario (click-through); hover: both values, the metric and
    how many scenarios the cell averages."""
    others = [p for p in sweep_parameters(sweeps) if p not in (x_param, y_param)]
    title = f"{y_param} × {x_param}"
    if others:
        title += f" (mean over {', '.join(others)})"
    fig = go.Figure()
    for k, metric in enumerate(metrics):
        xs, ys, z, run_ids, counts = heatmap_grid(sweeps, x_param, y_param, metric)
        text = [[("no scenario" if n == 0 else f"run {rid}" if n == 1
                  else f"mean of {n} scenarios (click: {rid})")
                 for rid, n in zip(rid_row, n_row, strict=True)]
                for rid_row, n_row in zip(run_ids, counts, strict=True)]
        fig.add_trace(go.Heatmap(
            x=xs, y=ys, z=z.tolist(), customdata=run_ids, text=text, name=metric,
            visible=k == 0, colorscale="Viridis", colorbar={"title": {"text": metric}},
            texttemplate="%{z:,.4g}", hoverongaps=False,
            hovertemplate=(f"{x_param} = %{{x}}<br>{y_param} = %{{y}}<br>{metric} = "
                           "%{z:,.4g}<br>%{text}<extra></extra>")))
    buttons = [{"label": m, "method": "update",
                "args": [{"visible": [i == k for i in range(len(metrics))]},
                         {"title.text": f"{_metric_label(m)}: {title}"}]}
               for k, m in enumerate(metrics)]
    fig.update_layout(
        title=f"{_metric_label(metrics[0])}: {title}", height=460,
        xaxis={"type": "category", "title": {"text": x_param}},
        yaxis={"type": "category", "title": {"text": y_param}},
        updatemenus=[{"buttons": buttons, "direction": "down", "x": 1.0, "xanchor": "right",
                      "y": 1.18, "yanchor": "top", "showactive": True}],
        margin={"t": 110})
    return fig


def pareto_front(x: Sequence[float], y: Sequence[float]) -> npt.NDArray[np.bool_]:
    """Boolean mask of the Pareto-optimal points when both ``x`` and ``y`` are minimized: a point
    is on the front when no other point is ≤ in both and < in one. Points with a NaN in either
    are never on the front; equal points are all on it. Shape: ``(len(x),)``."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = ~(np.isnan(xa) | np.isnan(ya))
    front = np.zeros(len(xa), dtype=bool)
    for i in np.flatnonzero(ok):
        dominated = ok & (xa <= xa[i]) & (ya <= ya[i]) & ((xa < xa[i]) | (ya < ya[i]))
        front[i] = not dominated.any()
    return front


def _settings_text(settings: pd.DataFrame, run_id: str) -> str:
    row = settings.loc[run_id]
    return "<br>".join(f"{k} = {_label(v)}" for k, v in row.items() if v is not None)


def fig_pareto(sweeps: pd.DataFrame, x_metric: str, y_metric: str) -> go.Figure:
    """Scatter of ``y_metric`` against ``x_metric``, one point per scenario (both minimized);
    the Pareto front (:func:`pareto_front`) highlighted and joined by a line. ``customdata`` per
    point = ``[run_id, settings text]``; hover: scenario, settings, both metrics. Scenarios
    missing either metric are left out (the title counts them)."""
    settings = sweep_settings(sweeps)
    xs = pd.to_numeric(sweeps[x_metric], errors="coerce").to_numpy(dtype=float)
    ys = pd.to_numeric(sweeps[y_metric], errors="coerce").to_numpy(dtype=float)
    front = pareto_front(xs, ys)
    ok = ~(np.isnan(xs) | np.isnan(ys))
    run_ids = [str(r) for r in sweeps["run_id"]]
    fig = go.Figure()
    hover = (f"<b>%{{customdata[0]}}</b><br>%{{customdata[1]}}<br>{x_metric} = %{{x:,.4g}}<br>"
             f"{y_metric} = %{{y:,.4g}}<extra></extra>")
    for name, mask, marker in (
            ("scenario", ok & ~front, {"size": 10, "color": "#9aa5b1"}),
            ("Pareto front", front, {"size": 14, "color": "#d62728",
                                     "line": {"color": "black", "width": 1}})):
        idx = np.flatnonzero(mask)
        if name == "Pareto front":
            idx = idx[np.lexsort((ys[idx], xs[idx]))]
        fig.add_trace(go.Scatter(
            x=xs[idx].tolist(), y=ys[idx].tolist(), name=name,
            mode="lines+markers" if name == "Pareto front" else "markers",
            line={"color": "#d62728", "width": 1, "shape": "hv"}, marker=marker,
            customdata=[[run_ids[i], _settings_text(settings, run_ids[i])] for i in idx],
            hovertemplate=hover))
    missing = int((~ok).sum())
    note = "both lower is better; the front in red"
    if missing:
        note += f"; {missing} scenario(s) without a value left out"
    fig.update_layout(title=f"{y_metric} against {x_metric}<br><sup>{note}</sup>", height=420,
                      xaxis_title=_metric_label(x_metric), yaxis_title=_metric_label(y_metric),
                      hovermode="closest", legend={"orientation": "h", "yanchor": "bottom",
                                                   "y": 1.0, "x": 1.0, "xanchor": "right"},
                      margin={"t": 90})
    return fig


def sweep_figures(sweeps: pd.DataFrame) -> Figures:
    """The figures of a sweep page: a heat map per pair of swept parameters
    (:func:`fig_heatmap`; with one parameter, one heat map of it against the single row "all"),
    then the :data:`PARETO_VIEWS` (:func:`fig_pareto`). ``sweeps``: the ``sweeps`` table's rows
    of one sweep (``run_id``, ``settings`` JSON, metrics). Returns ``[(title, Figure)]``.
    Raises :class:`PageError` when ``sweeps`` is empty."""
    if sweeps.empty:
        raise PageError("the sweep has no scenarios")
    params = sweep_parameters(sweeps)
    out: Figures = []
    if len(params) == 1:
        one = sweeps.assign(settings=[json.dumps({**json.loads(s or "{}"), "(all)": "all"})
                                      for s in sweeps["settings"]])
        out.append((f"Heat map: {params[0]}", fig_heatmap(one, params[0], "(all)")))
    for x_param, y_param in itertools.combinations(params, 2):
        out.append((f"Heat map: {y_param} × {x_param}", fig_heatmap(sweeps, x_param, y_param)))
    for x_metric, y_metric in PARETO_VIEWS:
        out.append((f"Pareto: {y_metric} vs {x_metric}", fig_pareto(sweeps, x_metric, y_metric)))
    return out


# ---- HTML ------------------------------------------------------------------------------------

_PAGE_CSS = _CSS + """
nav a{margin-right:1em}section.run{border-top:3px solid #888;margin-top:2.5em}
.plot{margin:.5em 0 1.5em}h3{font-size:1.02em;margin-top:1.4em}
.wide{overflow-x:auto}.pair{display:grid;grid-template-columns:1fr 1fr;gap:16px}
.pair>div{min-width:0}table.scenarios td:first-child{white-space:nowrap}
"""

_JUMP_JS = """
function topicReplayJump(ev){
  if(!ev||!ev.points||!ev.points.length){return;}
  var c=ev.points[0].customdata; var id=Array.isArray(c)?c[0]:c;
  if(id===null||id===undefined||id===''){return;}
  var target=document.getElementById('run-'+id);
  if(target){window.location.hash='run-'+id; target.scrollIntoView();}
}
"""


def _anchor(run_id: str) -> str:
    return f"run-{run_id}"


def figure_div(fig: go.Figure, div_id: str, clickthrough: bool = False) -> str:
    """``fig`` as an HTML ``<div>`` plus the inline script that draws it (plotly.js must already
    be on the page); ``clickthrough``: a click on a point jumps to ``#run-<customdata>``."""
    post = ("document.getElementById('{plot_id}').on('plotly_click', topicReplayJump);"
            if clickthrough else None)
    return str(fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                           config=PLOTLY_CONFIG, post_script=post))


def _png(fig: ReportFigure) -> str:
    data = base64.b64encode(png_bytes(fig.figure)).decode("ascii")
    return (f"<h3>{html.escape(fig.title)}</h3><figure><img src=\"data:image/png;base64,"
            f"{data}\" alt=\"{html.escape(fig.title)}\"><figcaption>"
            f"{html.escape(fig.caption)}</figcaption></figure>")


def static_figures(tables: RunTables) -> list[ReportFigure]:
    """The matplotlib figures of one run that have no Plotly counterpart: consumers, bucket
    handoffs, sealed-segment drain, batching (keys as in
    :func:`pipelines.analysis.figures.build_figures`, batching keyed
    ``batching-<run_id>``)."""
    r = tables
    return [
        ReportFigure(f"consumers-{r.run_id}", "Consumers",
                     "Load share, busy/idle time and messages per window of every consumer.",
                     fig_consumers(r)),
        ReportFigure(f"handoffs-{r.run_id}", "Bucket handoffs",
                     "How long buckets were withheld while draining to a new consumer.",
                     fig_handoffs(r)),
        ReportFigure(f"drain-{r.run_id}", "Sealed-segment drain",
                     "Seconds from a segment's seal to the last acknowledgment of its entries.",
                     fig_drain(r)),
        ReportFigure(f"batching-{r.run_id}", "Batching",
                     "Batch-size distribution and entries per message.", fig_batching([r])),
    ]


class _Counter:
    """Counts what a page embeds (for the writers' result)."""

    def __init__(self) -> None:
        self.interactive = 0
        self.images = 0


def run_section(tables: RunTables, metrics: dict[str, Any], counter: _Counter | None = None,
                settings: str | None = None) -> str:
    """One run's report as an HTML ``<section id="run-<run_id>">``: run line (status, inputs,
    speed, batching; ``settings`` when given), summary metrics, per-topic table, the interactive
    :func:`run_figures` and the :func:`static_figures` as PNG."""
    counter = counter or _Counter()
    r = tables
    inputs = ", ".join(map(str, r.runs["inputs"].iloc[-1])) if len(r.runs) else "?"
    status = str(r.runs["status"].iloc[-1]) if len(r.runs) else "unknown"
    cfg = r.config
    parts = [f"<section class='run' id='{html.escape(_anchor(r.run_id))}'>",
             f"<h2>Run {html.escape(r.run_id)}</h2>",
             f"<p class='meta'>{html.escape(status)} — inputs {html.escape(inputs)}; speed "
             f"{html.escape(str(cfg.get('replay', {}).get('speed', '?')))}; batching "
             f"{html.escape(str(cfg.get('batching', {}).get('mode', '?')))}</p>"]
    if settings:
        parts.append(f"<p class='meta'>settings {html.escape(settings)}</p>")
    parts.append("<h3>Summary</h3>")
    parts.append(table_html(metrics_frame({r.run_id: metrics}), cls="summary"))
    parts.append("<h3>Findings</h3>")
    parts.append(findings_html(r.store.read("findings", run_id=r.run_id)))
    tt = topic_table(r)
    parts.append("<h3>Topics</h3>")
    parts.append(table_html(tt.head(40), cls="topics"))
    if len(tt) > 40:
        parts.append(f"<p class='meta'>… and {len(tt) - 40} more topics.</p>")
    for k, (title, fig) in enumerate(run_figures(r)):
        parts.append(f"<h3>{html.escape(title)}</h3><div class='plot'>"
                     + figure_div(fig, f"{_anchor(r.run_id)}-fig{k}") + "</div>")
        counter.interactive += 1
    for f in static_figures(r):
        parts.append(_png(f))
        counter.images += 1
    parts.append("</section>")
    return "\n".join(parts)


FINDING_COLUMNS = ("severity", "topic", "finding", "at", "subject", "message", "rule",
                   "reference")
"""Columns of the findings table on the report page (the ``evidence`` JSON is the hover)."""


def _cell(v: Any) -> str:
    """A table cell's text: empty for a null, a timestamp as ``YYYY-mm-dd HH:MM:SS``."""
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return ""
    if isinstance(v, pd.Timestamp):
        return str(v.strftime("%Y-%m-%d %H:%M:%S"))
    return str(v)


def findings_html(findings: pd.DataFrame) -> str:
    """A run's ``findings`` rows as an HTML table, most severe first and the largest of a kind
    first (:func:`~pipelines.engine.findings.ordered_findings`: every finding; its
    ``evidence`` as the row's tooltip), or a line saying there are none."""
    if findings.empty:
        return "<p class='meta'>No findings (or a run written before findings existed).</p>"
    order = ordered_findings(findings)
    head = "".join(f"<th>{c}</th>" for c in FINDING_COLUMNS)
    rows = []
    for f in order.to_dict("records"):
        cells = "".join(f"<td>{html.escape(_cell(f[c]))}</td>" for c in FINDING_COLUMNS)
        rows.append(f"<tr class='finding {html.escape(str(f['severity']))}' "
                    f"title='{html.escape(str(f['evidence']))}'>{cells}</tr>")
    return (f"<div class='wide'><table class='findings'><thead><tr>{head}</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div>")


def render_page(title: str, body: Sequence[str]) -> str:
    """A whole HTML page: ``title``, plotly.js inlined once in ``<head>`` with the click-through
    handler, then ``body`` (HTML fragments). No external resources."""
    return "\n".join([
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_PAGE_CSS}</style>",
        f"<script type='text/javascript'>{get_plotlyjs()}</script>",
        f"<script type='text/javascript'>{_JUMP_JS}</script>",
        f"</head><body><h1>{html.escape(title)}</h1>",
        *body,
        "</body></html>"])


def _write(path: str | Path, page: str) -> str:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(page, encoding="utf-8")
    return str(p)


def write_run_page(store: DeltaStore, run_ids: Sequence[str], path: str | Path,
                   png_dir: str | Path | None = None) -> dict[str, Any]:
    """The report page of ``run_ids`` (``topic-replay report --html``), one self-contained HTML
    file at ``path``: the side-by-side summary (rows that differ highlighted), then a
    :func:`run_section` per run, then (several runs) the batching figure of all runs.

    ``png_dir``: also save every matplotlib figure of
    :func:`pipelines.analysis.figures.build_figures` there as ``<key>.png``. Returns
    ``{"html": path, "figures": figures on the page, "interactive": Plotly figures, "images":
    PNG figures, "metrics": {run_id: run_metrics}}``. Raises :class:`PageError` when
    ``run_ids`` is empty.
    """
    if not run_ids:
        raise PageError("no run to report")
    runs = [RunTables.load(store, run_id) for run_id in run_ids]
    metrics = {r.run_id: run_metrics(r) for r in runs}
    counter = _Counter()
    body = ["<nav>" + "".join(f"<a href='#{html.escape(_anchor(r))}'>{html.escape(r)}</a>"
                              for r in run_ids) + "</nav>"]
    if len(runs) > 1:  # side by side; each run's section has its own column too
        body += ["<h2>Summary</h2>",
                 table_html(metrics_frame(metrics), highlight_diff=True, cls="summary")]
    body += [run_section(r, metrics[r.run_id], counter) for r in runs]
    if len(runs) > 1:
        body.append(_png(ReportFigure("batching", "Batching of all runs",
                                      "Batch-size distribution and entries per message per "
                                      "run.", fig_batching(runs))))
        counter.images += 1
    page = render_page("topic-replay report: " + ", ".join(run_ids), body)
    out = _write(path, page)
    if png_dir is not None:
        Path(png_dir).mkdir(parents=True, exist_ok=True)
        for f in build_figures(runs):
            f.figure.savefig(Path(png_dir) / f"{f.key}.png", dpi=96)
    return {"html": out, "figures": counter.interactive + counter.images,
            "interactive": counter.interactive, "images": counter.images, "metrics": metrics}


SWEEPS_TABLE = "sweeps"
"""The table of sweep scenarios (one row per scenario; written by ``topic-replay sweep``)."""


def write_report(output: str, run_ids: Sequence[str], html_path: str | Path,
                 png_dir: str | Path | None = None) -> dict[str, Any]:
    """``topic-replay report``: render the report of ``run_ids`` (tables under ``output``, read
    with delta-rs) to ``html_path`` with :func:`write_run_page` (Plotly figures of the layout,
    DAG, decisions and rates; the other figures of :mod:`pipelines.analysis.figures` as
    PNG).

    ``png_dir``: also save every matplotlib figure of
    :func:`pipelines.analysis.figures.build_figures` there as ``<key>.png``. Returns
    ``{"html": path, "figures": n on the page, "interactive": n, "images": n, "metrics":
    {run_id: run_metrics}}``; :class:`PageError` as :func:`write_run_page`.
    """
    return write_run_page(DeltaStore(output, engine="delta-rs"), run_ids, html_path,
                          png_dir=png_dir)


def sweeps_location(store: DeltaStore) -> str:
    """Where ``store``'s ``sweeps`` table is (``<root>/sweeps``; read with delta-rs as it is,
    whatever columns a sweep wrote)."""
    return store.path(SWEEPS_TABLE)


def read_sweeps(store: DeltaStore, sweep_id: str) -> pd.DataFrame:
    """The ``sweeps`` rows of ``sweep_id`` (one per scenario), ordered by their settings
    (numbers by value, keys as in ``settings``; a key a scenario does not set last), then
    ``run_id``: a Delta table does not keep the order rows were written in.
    Raises :class:`PageError` when there is no ``sweeps`` table or no row of ``sweep_id``."""
    location = sweeps_location(store)
    if not DeltaTable.is_deltatable(location, storage_options=store.storage_options):
        raise PageError(f"{location} is not a Delta table (no sweep was written there)")
    frame = DeltaTable(location, storage_options=store.storage_options).to_pandas()
    rows = frame[frame["sweep_id"] == sweep_id].reset_index(drop=True)
    if rows.empty:
        known = ", ".join(sorted(map(str, frame["sweep_id"].unique()))) or "none"
        raise PageError(f"no sweep {sweep_id!r} in {location} (sweeps there: {known})")
    settings = sweep_settings(rows)
    order = sorted(range(len(rows)), key=lambda i: (
        [_sort_key(v) for v in settings.iloc[i]], str(rows["run_id"].iloc[i])))
    return rows.iloc[order].reset_index(drop=True)


def sweep_table(sweeps: pd.DataFrame) -> str:
    """The scenarios as an HTML table: run_id (a link to its section), each swept parameter and
    the :data:`SWEEP_METRICS`."""
    settings = sweep_settings(sweeps)
    params = sweep_parameters(sweeps)
    cols = [m for m in SWEEP_METRICS if m in sweeps.columns]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ["scenario", *params, *cols])
    rows = []
    for _, r in sweeps.iterrows():
        rid = str(r["run_id"])
        cells = [f"<td><a href='#{html.escape(_anchor(rid))}'>{html.escape(rid)}</a></td>"]
        cells += [f"<td>{html.escape(_label(settings.loc[rid, p]))}</td>" for p in params]
        cells += [f"<td>{html.escape(_num(None if pd.isna(r[c]) else r[c]))}</td>" for c in cols]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<div class='wide'><table class='scenarios'><thead><tr>{head}</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div>")


def recommendation_html(recs: Sequence[Recommendation]) -> str:
    """The sweep's recommendations (:func:`pipelines.analysis.whatif.recommend.recommend`) as an
    HTML list: per scope (a topic, or the whole run) the scenario, a link to its report, and why."""
    if not recs:
        return "<p class='meta'>No recommendation: the sweep has no finished scenario.</p>"
    items = []
    for r in recs:
        scope = "the run" if r.scope == RUN_SCOPE else f"topic {r.scope}"
        items.append(f"<li class='recommendation'><b>{html.escape(scope)}</b>: "
                     f"<a href='#{html.escape(_anchor(r.scenario))}'>"
                     f"{html.escape(r.scenario)}</a> — {html.escape(r.reason)}</li>")
    return ("<p class='meta'>Rule: among the scenarios that keep every segment under the "
            "tightest split threshold swept as well as any (within one auto-scale interval), "
            "the fewest flaps, then layout changes, idle consumers, entries per message "
            "(docs/findings.md).</p><ul>" + "".join(items) + "</ul>")


def write_sweep_page(store: DeltaStore, sweep_id: str, path: str | Path) -> dict[str, Any]:
    """The page of sweep ``sweep_id`` (``sweeps`` table under ``store``), one self-contained HTML
    file at ``path``: the scenario table, the :func:`sweep_figures` (a click on a cell or point
    jumps to that scenario), then every scenario's :func:`run_section` (``#run-<run_id>``).

    Returns ``{"html": path, "scenarios": n, "figures": figures on the page, "interactive": n,
    "images": n}``. Raises :class:`PageError` for an unknown sweep or bad ``settings``.
    """
    sweeps = read_sweeps(store, sweep_id)
    figures = sweep_figures(sweeps)
    counter = _Counter()
    params = sweep_parameters(sweeps)
    body = [f"<p class='meta'>sweep <b>{html.escape(sweep_id)}</b>: {len(sweeps)} scenarios "
            f"over {html.escape(', '.join(params) or 'no varying setting')}. Click a heat-map "
            "cell or a point to open that scenario's report below.</p>",
            "<h2>Scenarios</h2>", sweep_table(sweeps),
            "<h2>Recommended</h2>", recommendation_html(
                recommend(store, [str(r) for r in sweeps["run_id"]])),
            "<h2>Trade-offs</h2>"]
    pareto: list[str] = []
    for k, (title, fig) in enumerate(figures):
        div = (f"<div class='plot'><h3>{html.escape(title)}</h3>"
               + figure_div(fig, f"sweep-fig{k}", clickthrough=True) + "</div>")
        (pareto if title.startswith("Pareto") else body).append(div)
        counter.interactive += 1
    body.append("<div class='pair'>" + "".join(pareto) + "</div>")  # side by side
    body.append("<h2>Scenarios' reports</h2>")
    settings = dict(zip(sweeps["run_id"].astype(str), sweeps["settings"].astype(str),
                        strict=True))
    for run_id in sweeps["run_id"].astype(str):
        tables = RunTables.load(store, run_id)
        body.append(run_section(tables, run_metrics(tables), counter, settings[run_id]))
    page = render_page(f"topic-replay sweep {sweep_id}", body)
    return {"html": _write(path, page), "scenarios": len(sweeps),
            "figures": counter.interactive + counter.images,
            "interactive": counter.interactive, "images": counter.images}
