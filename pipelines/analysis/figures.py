"""The static figure set of ``topic-replay report``: matplotlib figures (Agg backend) of one or
more runs read back from their tables (:class:`pipelines.analysis.run_tables.RunTables`; no Spark),
and the report's HTML tables.

The report page (:func:`pipelines.analysis.page.write_report`) shows the Plotly figures
of :mod:`pipelines.analysis.page` for the layout, DAG, decisions and rates, and those of
these figures that have no Plotly view (consumers, handoffs, drain, batching) as embedded PNG;
``--png-dir`` saves every figure below as PNG. This module imports no page code. Figures (each
a function returning a ``matplotlib.figure.Figure``):

- :func:`fig_layout` — active segments and entry buckets over time, with auto-scale decisions
  (split / merge / rebucket markers, suppressed evaluations, reasons);
- :func:`fig_rates` — per-segment ``msg_rate_in`` (msg/s) against the split and merge thresholds;
- :func:`fig_dag` — the segment DAG: each segment a box over its lifetime × hash range, arrows
  from parents to children, coloured by ``created_by``;
- :func:`fig_batching` — batch-size distribution and entries per message per batching mode (one
  series per run);
- :func:`fig_consumers` — consumer load share, busy / idle time, messages per window;
- :func:`fig_handoffs` — bucket withheld time during handoffs (draining, PIP-379);
- :func:`fig_drain` — sealed-segment drain times (PIP-486 use case 1).

The summary table is :func:`pipelines.analysis.run_tables.run_metrics` (the same numbers as
``topic-replay compare``), side by side when several runs are given.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

from pipelines.analysis.run_tables import format_cell

matplotlib.use("Agg")

import matplotlib.dates as mdates
import matplotlib.ticker as mticker
import numpy as np
import numpy.typing as npt
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from pipelines.analysis.figure_data import (
    CREATED_BY_COLOR,
    busiest_topics,
    dag_edges,
    naive_utc,
    rate_thresholds,
    rate_topics,
    topics_by_segments,
)
from pipelines.analysis.run_tables import (
    RunTables,
    consumer_shares,
    drain_times,
    layout_timeline,
    withheld_intervals,
)

ACTION_STYLE = {"split": ("^", "tab:red"), "merge": ("v", "tab:blue"),
                "rebucket": ("s", "tab:green")}


@dataclass
class ReportFigure:
    """One figure of the report: a title, a one-line caption and the matplotlib figure."""

    key: str
    title: str
    caption: str
    figure: Figure


def _subplots(*args: Any, figsize: tuple[float, float], **kwargs: Any) -> tuple[Figure, Any]:
    """``(figure, axes)`` like ``pyplot.subplots`` but a bare ``Figure`` (Agg canvas): not kept
    by pyplot, so nothing to close and no global state."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(*args, **kwargs)


def _time_axis(ax: Any) -> None:
    locator = mdates.AutoDateLocator(minticks=3, maxticks=8)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.set_xlabel("publish time (UTC)")


def _zero_based(ax: Any, top: float) -> None:
    """y from 0 with headroom; a flat-zero series still gets a readable 0..1 axis."""
    top = top if top > 0 else 1.0
    ax.set_ylim(-0.05 * top, top * 1.2)


def _run_span(ax: Any, tables: RunTables) -> None:
    """x axis over the run's time span (first segment creation to the end of the run)."""
    start = tables.segments["created_at"].min() if len(tables.segments) else None
    end = tables.end_time
    if start is not None and end is not None and pd.notna(start) and end > start:
        pad = (end - start) * 0.02
        ax.set_xlim(naive_utc(start - pad), naive_utc(end + pad))


def _empty_note(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


# ---- figures ---------------------------------------------------------------------------------

def fig_layout(tables: RunTables) -> Figure:
    """Active segments (top) and entry buckets (bottom) per topic over time, step lines, plus
    the total over all topics; auto-scale decisions as markers on the top panel (▲ split,
    ▼ merge, ■ rebucket at the topic's new segment count; × suppressed evaluations, at 0),
    labelled with Pulsar's reason when there are few. Source: ``segments``,
    ``autoscale_decisions``."""
    fig, (ax_s, ax_b) = _subplots(2, 1, figsize=(11, 6.5), sharex=True,
                                     gridspec_kw={"height_ratios": [3, 2]})
    timeline = layout_timeline(tables.segments)
    end = tables.end_time
    if timeline.empty:
        _empty_note(ax_s, "no segments")
        return fig
    topics = busiest_topics(tables)
    all_topics = sorted(set(timeline["topic"]))

    def stepped(g: pd.DataFrame, col: str) -> tuple[Any, Any]:
        x = list(naive_utc(g["time"]))
        y = list(g[col])
        if end is not None:
            x.append(naive_utc(end))
            y.append(y[-1])
        return x, y

    for i, topic in enumerate(topics):  # earlier topics drawn thicker: equal lines stay visible
        g = timeline[timeline["topic"] == topic]
        for ax, col in ((ax_s, "active_segments"), (ax_b, "buckets")):
            ax.step(*stepped(g, col), where="post", label=topic,
                    lw=1.4 + 1.2 * (len(topics) - 1 - i))
    if len(all_topics) > 1:
        wide = timeline.pivot_table(index="time", columns="topic",
                                    values=["active_segments", "buckets"], aggfunc="last")
        wide = wide.sort_index().ffill().fillna(0)
        total = pd.DataFrame({"time": wide.index,
                              "active_segments": wide["active_segments"].sum(axis=1).values,
                              "buckets": wide["buckets"].sum(axis=1).values})
        label = f"all {len(all_topics)} topics"
        for ax, col in ((ax_s, "active_segments"), (ax_b, "buckets")):
            ax.step(*stepped(total, col), where="post", color="black", lw=2.2, alpha=0.6,
                    label=label)
    if len(tables.decisions):
        _draw_decisions(ax_s, tables.decisions, timeline)
    ax_s.set_ylabel("active segments")
    ax_b.set_ylabel("entry buckets")
    ax_s.set_ylim(bottom=-0.3)
    ax_b.set_ylim(bottom=0)
    ax_s.legend(fontsize=7, loc="upper left", ncol=2)
    ax_s.set_title(f"{tables.run_id}: segments and buckets over time, with auto-scale decisions")
    _time_axis(ax_b)
    fig.tight_layout()
    return fig


def _draw_decisions(ax: Axes, decisions: pd.DataFrame, timeline: pd.DataFrame) -> None:
    """:func:`fig_layout`'s decision markers on ``ax``: one series per action at the topic's
    segment count (each point labelled when there are few), suppressed evaluations at 0."""
    acted = decisions[decisions["action"] != "none"]
    for action, (marker, color) in ACTION_STYLE.items():
        d = acted[acted["action"] == action]
        if d.empty:
            continue
        ys = [_count_at(timeline, r.topic, r.eval_time) for r in d.itertuples()]
        reasons = ", ".join(f"{r} ×{n}" for r, n in d["reason"].value_counts().items())
        ax.scatter(naive_utc(d["eval_time"]), ys, marker=marker, s=70, color=color,
                   edgecolor="black", zorder=5, label=f"{action} ({reasons})")
        if len(acted) <= 12:
            _label_decisions(ax, d, ys, color)
    sup = decisions[decisions["action"] == "none"]
    if len(sup):
        by = ", ".join(f"{r} ×{n}" for r, n in
                       sup["suppressed_by"].fillna("none").value_counts().items())
        ax.scatter(naive_utc(sup["eval_time"]), np.zeros(len(sup)), marker="x", s=25,
                   color="0.45", zorder=4, label=f"suppressed ({by})")


def _label_decisions(ax: Axes, d: pd.DataFrame, ys: Sequence[int], color: str) -> None:
    """One label per decision point ``(eval_time, ys[i])``: its topics (topics acting together
    share it) and reason."""
    labels: dict[tuple[Any, int, str], list[str]] = {}
    for r, y in zip(d.itertuples(), ys, strict=True):
        labels.setdefault((r.eval_time, y, r.reason), []).append(str(r.topic))
    for (when, y, reason), names in labels.items():
        ax.annotate(f"{', '.join(names)}: {reason}", (naive_utc(when), y),
                    xytext=(4, 6), textcoords="offset points", fontsize=7,
                    rotation=20, color=color)


def _count_at(timeline: pd.DataFrame, topic: str, when: Any) -> int:
    g = timeline[(timeline["topic"] == topic) & (timeline["time"] <= when)]
    return int(g["active_segments"].iloc[-1]) if len(g) else 0


def fig_rates(tables: RunTables, max_topics: int = 4) -> Figure:
    """Per-segment ``msg_rate_in`` (msg/s, per stats period, every load sample) of the busiest
    topics, one panel per topic, with the topic's split threshold (red) and merge threshold
    (blue) of its resolved policy. Source: ``segment_load``, ``runs.config``."""
    load = tables.segment_load
    topics = rate_topics(tables, max_topics)
    n = max(1, len(topics))
    fig, axes = _subplots(n, 1, figsize=(11, 2.6 * n + 0.6), sharex=True, squeeze=False)
    if not topics:
        _empty_note(axes[0][0], "no load samples")
        return fig
    config = tables.config
    for ax, topic in zip(axes[:, 0], topics, strict=True):
        g = load[load["topic"] == topic].sort_values("sample_time")
        segs = sorted(g["segment_id"].unique())
        for sid in segs:
            s = g[g["segment_id"] == sid]
            ax.plot(naive_utc(s["sample_time"]), s["msg_rate_in"], lw=1.1, label=f"segment {sid}")
        split, merge = rate_thresholds(config, topic)
        if split is not None:
            ax.axhline(split, color="tab:red", ls="--", lw=1.2, label=f"split > {split:g}")
        if merge is not None:
            ax.axhline(merge, color="tab:blue", ls=":", lw=1.2, label=f"merge < {merge:g}")
        top = float(g["msg_rate_in"].max()) if len(g) else 1.0
        if split is not None and split > 3 * top:
            ax.set_ylim(0, top * 1.3)  # keep the curves readable; the split line is off-scale
            ax.text(0.01, 0.95, f"split threshold {split:g} msg/s (off scale)", ha="left",
                    va="top", transform=ax.transAxes, fontsize=7, color="tab:red")
        ax.set_ylabel("msg_rate_in (msg/s)")
        ax.set_title(f"topic {topic}", fontsize=9, loc="left")
        ax.legend(fontsize=7, loc="upper right", ncol=min(4, len(segs) + 2)
                  ) if len(segs) <= 12 else None
    fig.suptitle(f"{tables.run_id}: per-segment msg_rate_in against the split / merge thresholds")
    _time_axis(axes[-1][0])
    fig.tight_layout()
    return fig


def fig_dag(tables: RunTables, max_topics: int = 3) -> Figure:
    """The segment DAG of the topics with the most segments: each segment a box spanning its
    lifetime (created_at → sealed_at, or the end) × its hash range (``range_start`` ..
    ``range_end``), coloured by ``created_by``, labelled ``id`` and bucket count ``N``; arrows
    join parents to children (split: one to two, merge: two to one, rebucket: one to one).
    Source: ``segments``."""
    segments = tables.segments
    topics = topics_by_segments(tables, max_topics)
    n = max(1, len(topics))
    fig, axes = _subplots(1, n, figsize=(4.2 * n + 1.5, 4.4), squeeze=False)
    if not topics:
        _empty_note(axes[0][0], "no segments")
        return fig
    end = tables.end_time
    for ax, topic in zip(axes[0], topics, strict=True):
        g = segments[segments["topic"] == topic].set_index("segment_id")
        x0 = mdates.date2num(naive_utc(g["created_at"]))
        stop = g["sealed_at"].fillna(end) if end is not None else g["sealed_at"]
        x1 = mdates.date2num(naive_utc(stop))
        span = max(float(np.nanmax(x1) - np.nanmin(x0)), 1e-9)
        for (sid, row), a, b in zip(g.iterrows(), x0, x1, strict=True):
            ax.add_patch(Rectangle((a, row["range_start"]), max(b - a, span * 0.004),
                                   row["range_end"] + 1 - row["range_start"],
                                   facecolor=CREATED_BY_COLOR.get(row["created_by"], "#dddddd"),
                                   edgecolor="black", lw=0.8))
            if (b - a) > span * 0.06:
                ax.text((a + b) / 2, (row["range_start"] + row["range_end"]) / 2,
                        f"{sid}\nN={row['bucket_count']}", ha="center", va="center",
                        fontsize=7)
        mid = {sid: (row["range_start"] + row["range_end"]) / 2 for sid, row in g.iterrows()}
        start = dict(zip(g.index, x0, strict=True))
        for parent, sid in dag_edges(g.reset_index()):
            t = start[sid]
            ax.annotate("", xy=(t + span * 0.01, mid[sid]), xytext=(t - span * 0.01, mid[parent]),
                        arrowprops={"arrowstyle": "->", "color": "0.2", "lw": 0.9})
        ax.set_xlim(np.nanmin(x0) - span * 0.02, np.nanmax(x1) + span * 0.02)
        ax.set_ylim(0, 65536)
        ax.set_yticks([0, 16384, 32768, 49152, 65536])
        ax.set_ylabel("segment_hash range")
        ax.set_title(f"topic {topic}: {len(g)} segments", fontsize=9, loc="left")
        ax.xaxis_date()
        _time_axis(ax)
    handles = [Rectangle((0, 0), 1, 1, facecolor=c, edgecolor="black", label=k)
               for k, c in CREATED_BY_COLOR.items()]
    fig.legend(handles=handles, loc="upper right", fontsize=7, ncol=4, title="created_by",
               title_fontsize=7)
    fig.suptitle(f"{tables.run_id}: segment DAG (time × hash range)", x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def fig_batching(runs: Sequence[RunTables]) -> Figure:
    """Left: distribution of entry sizes (``num_messages`` per entry, log-spaced bins, share of
    entries) per run and batching mode. Right: entries per message per topic (busiest topics)
    per run. Source: ``entries``, ``runs.config``."""
    fig, (ax_h, ax_e) = _subplots(1, 2, figsize=(11, 4.2))
    top = max((int(r.entries["num_messages"].max()) for r in runs if len(r.entries)), default=1)
    bins = np.unique(np.round(np.logspace(0, np.log10(max(top, 2)) + 0.05, 25)).astype(int))
    bins = np.append(bins, bins[-1] + 1)
    topics = busiest_topics(runs[0], 8) if runs else []
    width = 0.8 / max(1, len(runs))
    drawn = False
    for i, r in enumerate(runs):
        e = r.entries
        if e.empty:
            continue
        mode = r.config.get("batching", {}).get("mode", "?")
        epm = len(e) / e["num_messages"].sum()
        weights = np.full(len(e), 1.0 / len(e))
        ax_h.hist(e["num_messages"], bins=bins, weights=weights, histtype="step", lw=1.8,
                  label=f"{r.run_id} ({mode}): {epm:.4f} entries/msg, "
                        f"mean batch {e['num_messages'].mean():.2f} msgs")
        per_topic = e.groupby("topic").agg(n=("num_messages", "size"),
                                           m=("num_messages", "sum"))
        vals = [per_topic.loc[t, "n"] / per_topic.loc[t, "m"] if t in per_topic.index
                else np.nan for t in topics]
        ax_e.bar(np.arange(len(topics)) + i * width, vals, width=width,
                 label=f"{r.run_id} ({mode})")
        drawn = True
    if not drawn:
        _empty_note(ax_h, "no entries")
        return fig
    if top > 20:  # wide range: log-spaced bins on a log axis
        ax_h.set_xscale("log")
        ax_h.xaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax_h.xaxis.set_minor_formatter(mticker.NullFormatter())
    else:
        ax_h.xaxis.set_major_locator(mticker.MaxNLocator(integer=True))
    ax_h.set_xlabel("messages per entry (batch size)")
    ax_h.set_ylabel("share of entries")
    ax_h.legend(fontsize=7, loc="center right")
    ax_h.set_title("batch-size distribution per batching mode", fontsize=9)
    ax_e.set_xticks(np.arange(len(topics)) + width * (len(runs) - 1) / 2)
    ax_e.set_xticklabels(topics, rotation=30, ha="right", fontsize=8)
    ax_e.axhline(1.0, color="0.5", ls=":", lw=1)
    ax_e.set_ylabel("entries per message")
    ax_e.set_title("entries per message per topic (1 = no batching)", fontsize=9)
    ax_e.legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_consumers(tables: RunTables) -> Figure:
    """Left: each consumer's share of its subscription's messages (the dotted line is the fair
    share 1/consumers). Middle: busy and idle time per consumer (minutes, over the windows it
    was connected). Right: messages per consumer per ``consumer_load`` window (white = none).
    Source: ``consumer_load``."""
    fig, (ax_s, ax_i, ax_m) = _subplots(1, 3, figsize=(12, 4.2),
                                           gridspec_kw={"width_ratios": [1, 1, 1.6]})
    shares = consumer_shares(tables)
    if shares.empty:
        _empty_note(ax_s, "no consumer load")
        return fig
    multi = shares["subscription"].nunique() > 1
    labels = [f"{s}/{c}" if multi else c for s, c in
              zip(shares["subscription"], shares["consumer_name"], strict=True)]
    y = np.arange(len(shares))
    ax_s.barh(y, shares["share"], color="tab:purple")
    for sub, g in shares.groupby("subscription"):
        fair = 1 / len(g)
        idx = [i for i, s in enumerate(shares["subscription"]) if s == sub]
        ax_s.vlines(fair, min(idx) - 0.4, max(idx) + 0.4, color="black", ls=":", lw=1.2)
    ax_s.set_yticks(y, labels, fontsize=7)
    ax_s.invert_yaxis()
    ax_s.set_xlabel("share of subscription messages")
    ax_s.set_title("load share (dotted: fair share)", fontsize=9)
    busy = shares["busy_ms"] / 60000
    idle = shares["idle_ms"] / 60000
    ax_i.barh(y, busy, color="tab:orange", label="busy")
    ax_i.barh(y, idle, left=busy, color="0.75", label="idle")
    for yi, (ew, w) in enumerate(zip(shares["empty_windows"], shares["windows"], strict=True)):
        ax_i.text(0, yi, f" {ew}/{w} windows empty", va="center", fontsize=6)
    ax_i.set_yticks(y, [])
    ax_i.invert_yaxis()
    ax_i.set_xlabel("minutes")
    ax_i.legend(fontsize=7, loc="lower right")
    ax_i.set_title("busy / idle time", fontsize=9)
    cl = tables.consumer_load
    grid = cl.pivot_table(index=["subscription", "consumer_name"], columns="window_start",
                          values="messages", aggfunc="sum")
    grid = grid.reindex(pd.MultiIndex.from_frame(shares[["subscription", "consumer_name"]]))
    times = mdates.date2num(naive_utc(pd.Series(grid.columns)))
    windows = tables.windows
    step = (windows.window_ms * windows.speed / 86_400_000 if windows is not None
            else float(np.median(np.diff(times))) if len(times) > 1 else 1 / 1440)
    edges, values = _window_cells(times, step, grid.to_numpy(dtype=float))
    masked = np.ma.masked_where(~(values > 0), values)
    mesh = ax_m.pcolormesh(edges, np.arange(len(grid) + 1), masked, cmap="viridis",
                           shading="flat")
    ax_m.set_ylim(len(grid), 0)
    ax_m.set_yticks(y + 0.5, [])
    ax_m.xaxis_date()
    _time_axis(ax_m)
    fig.colorbar(mesh, ax=ax_m, label="messages per window")
    ax_m.set_title("messages per consumer per window", fontsize=9)
    fig.suptitle(f"{tables.run_id}: consumer load share and idle time", x=0.02, ha="left")
    fig.tight_layout()
    return fig


def _window_cells(starts: npt.NDArray[np.float64], step: float,
                  values: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64],
                                                            npt.NDArray[np.float64]]:
    """Cell edges (``len + 1``, matplotlib date numbers) and values (rows × cells) for windows
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


def fig_handoffs(tables: RunTables) -> Figure:
    """Bucket handoffs (draining, PIP-379): left, each handoff at its ``withheld_from`` time with
    the seconds the bucket was withheld (open at end of input: counted to the end, red ring);
    right, cumulative withheld bucket-seconds per topic. Source: ``bucket_handoffs``."""
    fig, (ax_t, ax_c) = _subplots(1, 2, figsize=(11, 3.8))
    h = withheld_intervals(tables)
    if h.empty:
        _empty_note(ax_t, "no bucket handoffs")
        _empty_note(ax_c, "no bucket handoffs")
        return fig
    for topic, g in h.groupby("topic"):
        ax_t.scatter(naive_utc(g["withheld_from"]), g["withheld_s"], s=22, alpha=0.8,
                     label=f"{topic} ({len(g)})")
        g = g.sort_values("withheld_from")
        ax_c.step(naive_utc(g["withheld_from"]), g["withheld_s"].cumsum(), where="post",
                  label=topic, marker="o", ms=3)
    still = h[h["open"]]
    if len(still):
        ax_t.scatter(naive_utc(still["withheld_from"]), still["withheld_s"], s=70,
                     facecolor="none", edgecolor="red", label="still withheld at end")
    ax_t.set_ylabel("withheld (s)")
    ax_t.set_title(f"{len(h)} handoffs, {h['withheld_s'].sum():,.1f} bucket-seconds withheld",
                   fontsize=9)
    ax_t.legend(fontsize=7)
    ax_c.set_ylabel("cumulative withheld bucket-seconds")
    ax_c.legend(fontsize=7)
    _zero_based(ax_t, float(h["withheld_s"].max()))
    _zero_based(ax_c, float(h.groupby("topic")["withheld_s"].sum().max()))
    for ax in (ax_t, ax_c):
        _run_span(ax, tables)
        _time_axis(ax)
    fig.suptitle(f"{tables.run_id}: withheld-bucket time during handoffs", x=0.02, ha="left")
    fig.tight_layout()
    return fig


def fig_drain(tables: RunTables) -> Figure:
    """Sealed-segment drain time: seconds from ``sealed_at`` to the last acknowledgment of the
    segment's entries, per sealed segment and subscription, at its seal time (segments still
    holding unacknowledged entries at end of input: red ×, drawn at the top). Source:
    ``segments``, ``dispatch``."""
    fig, ax = _subplots(figsize=(11, 3.6))
    d = drain_times(tables)
    if d.empty:
        _empty_note(ax, "no sealed segments")
        return fig
    done = d[d["drained"]]
    top = float(done["drain_s"].max()) if len(done) else 0.0
    for topic, g in done.groupby("topic"):
        ax.scatter(naive_utc(g["sealed_at"]), g["drain_s"], s=30, label=f"{topic} ({len(g)})")
    if len(done) <= 24:  # label points; segments sealed together share one label
        labels: dict[tuple[Any, float], list[str]] = {}
        for r in done.itertuples():
            labels.setdefault((r.sealed_at, r.drain_s), []).append(f"{r.topic}/{r.segment_id}")
        for (when, y), names in labels.items():
            ax.annotate(", ".join(names), (naive_utc(when), y), xytext=(3, 4),
                        textcoords="offset points", fontsize=6, rotation=30)
    pending = d[~d["drained"]]
    if len(pending):
        ax.scatter(naive_utc(pending["sealed_at"]), np.full(len(pending), top * 1.1 + 1),
                   marker="x", color="red", s=50, label="not drained at end")
    ax.set_ylabel("drain time (s)")
    _zero_based(ax, top * 1.1 + 1 if len(pending) else top)
    _run_span(ax, tables)
    ax.legend(fontsize=7, ncol=3)
    ax.set_title(f"{tables.run_id}: sealed-segment drain time ({len(d)} segment × subscription; "
                 f"max {top:,.1f} s)", fontsize=10)
    _time_axis(ax)
    fig.tight_layout()
    return fig


def figure_has_data(fig: Figure) -> bool:
    """True when some axes of ``fig`` holds lines, collections, patches or images (i.e. the
    figure was drawn from data, not only a "no data" note)."""
    return any(ax.lines or ax.collections or ax.patches or ax.images for ax in fig.axes)


def build_figures(runs: Sequence[RunTables]) -> list[ReportFigure]:
    """Every figure of the report: the per-run figures for each run, then the batching figure
    with all runs."""
    out: list[ReportFigure] = []
    for r in runs:
        p = f"{r.run_id}: " if len(runs) > 1 else ""
        out += [
            ReportFigure(f"layout-{r.run_id}", f"{p}Segments and buckets over time",
                         "Active segments and total entry buckets per topic (step lines), "
                         "auto-scale decisions as markers with Pulsar's reason.", fig_layout(r)),
            ReportFigure(f"rates-{r.run_id}", f"{p}Segment load against thresholds",
                         "msg_rate_in of every segment (msg/s, per stats period) with the split "
                         "and merge thresholds of the topic's policy.", fig_rates(r)),
            ReportFigure(f"dag-{r.run_id}", f"{p}Segment DAG",
                         "Each segment spans its lifetime (x) and hash range (y); arrows lead "
                         "from parents to children.", fig_dag(r)),
            ReportFigure(f"consumers-{r.run_id}", f"{p}Consumers",
                         "Load share, busy/idle time and messages per window of every "
                         "consumer.", fig_consumers(r)),
            ReportFigure(f"handoffs-{r.run_id}", f"{p}Bucket handoffs",
                         "How long buckets were withheld while draining to a new consumer.",
                         fig_handoffs(r)),
            ReportFigure(f"drain-{r.run_id}", f"{p}Sealed-segment drain",
                         "Seconds from a segment's seal to the last acknowledgment of its "
                         "entries.", fig_drain(r)),
        ]
    out.append(ReportFigure("batching", "Batching",
                            "Batch-size distribution and entries per message per batching "
                            "mode.", fig_batching(runs)))
    return out


def png_bytes(fig: Figure, dpi: int = 96) -> bytes:
    """``fig`` as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


# ---- HTML ------------------------------------------------------------------------------------

def topic_table(tables: RunTables) -> pd.DataFrame:
    """Per topic of one run: messages, entries, entries/message, segments created, active
    segments and buckets at the end, splits, merges, rebuckets."""
    e = tables.entries.groupby("topic").agg(messages=("num_messages", "sum"),
                                            entries=("num_messages", "size"))
    seg = tables.segments
    s = seg.groupby("topic").agg(segments_created=("segment_id", "size"))
    active = seg[seg["state"] == "ACTIVE"].groupby("topic").agg(
        active_segments=("segment_id", "size"), buckets=("bucket_count", "sum"))
    d = tables.decisions
    acts = (d[d["action"] != "none"].groupby(["topic", "action"]).size().unstack(fill_value=0)
            if len(d) else pd.DataFrame())
    out = e.join(s, how="outer").join(active, how="outer").join(acts, how="outer").fillna(0)
    for col in ("split", "merge", "rebucket"):
        if col not in out.columns:
            out[col] = 0
    out["entries_per_message"] = (out["entries"] / out["messages"].where(out["messages"] > 0))
    cols = ["messages", "entries", "entries_per_message", "segments_created", "active_segments",
            "buckets", "split", "merge", "rebucket"]
    out = out[cols].sort_values("messages", ascending=False, kind="stable")
    ints = [c for c in cols if c != "entries_per_message"]
    out[ints] = out[ints].astype("int64")
    out["entries_per_message"] = out["entries_per_message"].round(4)
    return out


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;
max-width:1250px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}tr.diff td{background:#fff7d6}
figure{margin:.5em 0 1.5em}figcaption{font-size:.85em;color:#555}img{max-width:100%}
.meta{font-size:.85em;color:#555}
"""


def _fmt(v: Any) -> str:
    return html.escape(format_cell(v.item() if isinstance(v, np.generic) else v))


def table_html(frame: pd.DataFrame, highlight_diff: bool = False, cls: str = "") -> str:
    """``frame`` as an HTML table (index as the first column, values formatted for reading);
    ``highlight_diff``: rows whose cells differ get ``class=diff`` (runs side by side)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>"
                   for c in [frame.index.name or "", *frame.columns])
    rows = []
    for label, row in zip(frame.index, frame.itertuples(index=False), strict=True):
        cells = [_fmt(v) for v in row]  # itertuples: each column keeps its dtype (ints stay)
        diff = highlight_diff and len(set(cells)) > 1
        rows.append(f"<tr{' class=diff' if diff else ''}><td>{html.escape(str(label))}</td>"
                    + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (f"<table class='{cls}'><thead><tr>{head}</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")
