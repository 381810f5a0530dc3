"""The report's pages: one self-contained HTML file each, plotly.js inlined once in its
``<head>``; nothing is fetched (no CDN, fonts or images from elsewhere), so a page works offline
from ``file://``.

- :func:`write_run_page` (``topic-replay report --html``, :func:`write_report`): the summary of
  one or more runs side by side, then a :func:`run_section` per run (findings, topics, every
  figure of :func:`pipelines.analysis.figures.run_figures`); ``--png-dir`` also renders the same
  figures as PNG (:func:`pipelines.analysis.figures.write_pngs`).
- :func:`write_sweep_page` (``topic-replay sweep``'s page): the scenarios, the recommendation,
  the :mod:`pipelines.analysis.sweep_figures` (a click on a cell or point jumps to that
  scenario's section ``#run-<run_id>``), then every scenario's run section.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from deltalake import DeltaTable
from plotly.offline import get_plotlyjs

from pipelines.analysis.figures import (
    PageError,
    ReportFigure,
    number_text,
    run_figures,
    runs_batching,
    write_pngs,
)
from pipelines.analysis.run_tables import RunTables, format_cell, metrics_frame, run_metrics
from pipelines.analysis.sweep_figures import (
    SWEEP_METRICS,
    setting_label,
    setting_sort_key,
    sweep_figures,
    sweep_parameters,
    sweep_settings,
)
from pipelines.analysis.whatif.recommend import RUN_SCOPE, Recommendation, recommend
from pipelines.engine.findings import ordered_findings
from pipelines.storage.delta import DeltaStore

__all__ = ["PageError", "write_report", "write_run_page", "write_sweep_page"]

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
"""Plotly config of every figure (no link to plotly's site in the mode bar)."""


# ---- tables ----------------------------------------------------------------------------------

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


# ---- pages -----------------------------------------------------------------------------------

_PAGE_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;
max-width:1250px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}tr.diff td{background:#fff7d6}
.meta{font-size:.85em;color:#555}
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


def figure_html(fig: ReportFigure, div_id: str, clickthrough: bool = False) -> str:
    """One figure of a page: its title, caption and :func:`figure_div`."""
    return (f"<h3>{html.escape(fig.title)}</h3><p class='meta'>{html.escape(fig.caption)}</p>"
            f"<div class='plot'>{figure_div(fig.figure, div_id, clickthrough)}</div>")


def run_section(tables: RunTables, metrics: dict[str, Any],
                figures: Sequence[ReportFigure] | None = None,
                settings: str | None = None) -> str:
    """One run's report as an HTML ``<section id="run-<run_id>">``: run line (status, inputs,
    speed, batching; ``settings`` when given), summary metrics, findings, per-topic table, then
    ``figures`` (default: the run's :func:`~pipelines.analysis.figures.run_figures`)."""
    r = tables
    figures = run_figures(r) if figures is None else figures
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
    parts += [figure_html(f, f"{_anchor(r.run_id)}-fig{k}") for k, f in enumerate(figures)]
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
    """Write ``page`` to ``path`` (missing folders created); :class:`PageError` when it cannot
    be written."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise PageError(f"{path} cannot be written: {exc.strerror or exc}") from None
    return str(p)


def write_run_page(store: DeltaStore, run_ids: Sequence[str], path: str | Path,
                   png_dir: str | Path | None = None) -> dict[str, Any]:
    """The report page of ``run_ids`` (``topic-replay report --html``), one self-contained HTML
    file at ``path``: the side-by-side summary (rows that differ highlighted), then a
    :func:`run_section` per run, then (several runs) the batching figure of all runs.

    ``png_dir``: also render every figure of the page there as ``<key>.png``
    (:func:`~pipelines.analysis.figures.write_pngs`), before the page is written, so a missing
    browser fails the command without leaving half its output. Returns ``{"html": path,
    "figures": figures on the page, "pngs": PNG paths (empty without png_dir), "metrics":
    {run_id: run_metrics}}``. Raises :class:`PageError` when ``run_ids`` is empty or the PNGs
    cannot be rendered.
    """
    if not run_ids:
        raise PageError("no run to report")
    runs = [RunTables.load(store, run_id) for run_id in run_ids]
    metrics = {r.run_id: run_metrics(r) for r in runs}
    figures = {r.run_id: run_figures(r) for r in runs}
    together = [runs_batching(runs)] if len(runs) > 1 else []
    every = [f for r in runs for f in figures[r.run_id]] + together
    pngs = write_pngs(every, png_dir) if png_dir is not None else []
    body = ["<nav>" + "".join(f"<a href='#{html.escape(_anchor(r))}'>{html.escape(r)}</a>"
                              for r in run_ids) + "</nav>"]
    if len(runs) > 1:  # side by side; each run's section has its own column too
        body += ["<h2>Summary</h2>",
                 table_html(metrics_frame(metrics), highlight_diff=True, cls="summary")]
    body += [run_section(r, metrics[r.run_id], figures[r.run_id]) for r in runs]
    body += [figure_html(f, f"all-runs-fig{k}") for k, f in enumerate(together)]
    page = render_page("topic-replay report: " + ", ".join(run_ids), body)
    return {"html": _write(path, page), "figures": len(every), "pngs": pngs, "metrics": metrics}


SWEEPS_TABLE = "sweeps"
"""The table of sweep scenarios (one row per scenario; written by ``topic-replay sweep``)."""


def write_report(output: str, run_ids: Sequence[str], html_path: str | Path,
                 png_dir: str | Path | None = None) -> dict[str, Any]:
    """``topic-replay report``: :func:`write_run_page` of ``run_ids`` (tables under ``output``,
    read with delta-rs) to ``html_path``, and with ``png_dir`` every figure as PNG there.
    Returns and raises as :func:`write_run_page`."""
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
        [setting_sort_key(v) for v in settings.iloc[i]], str(rows["run_id"].iloc[i])))
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
        cells += [f"<td>{html.escape(setting_label(settings.loc[rid, p]))}</td>"
                  for p in params]
        cells += [f"<td>{html.escape(number_text(None if pd.isna(r[c]) else r[c]))}</td>"
                  for c in cols]
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
    file at ``path``: the scenario table, the recommendation, the
    :func:`~pipelines.analysis.sweep_figures.sweep_figures` (a click on a cell or point jumps to
    that scenario), then every scenario's :func:`run_section` (``#run-<run_id>``).

    Returns ``{"html": path, "scenarios": n, "figures": figures on the page}``. Raises
    :class:`PageError` for an unknown sweep or bad ``settings``.
    """
    sweeps = read_sweeps(store, sweep_id)
    figures = sweep_figures(sweeps)
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
    body.append("<div class='pair'>" + "".join(pareto) + "</div>")  # side by side
    body.append("<h2>Scenarios' reports</h2>")
    settings = dict(zip(sweeps["run_id"].astype(str), sweeps["settings"].astype(str),
                        strict=True))
    shown = len(figures)
    for run_id in sweeps["run_id"].astype(str):
        tables = RunTables.load(store, run_id)
        run_figs = run_figures(tables)
        shown += len(run_figs)
        body.append(run_section(tables, run_metrics(tables), run_figs, settings[run_id]))
    page = render_page(f"topic-replay sweep {sweep_id}", body)
    return {"html": _write(path, page), "scenarios": len(sweeps), "figures": shown}
