"""The figures of a policy sweep's page (issue #20): heat maps of a metric per pair of swept
parameters (metric chosen with a dropdown) and Pareto views of ``entries_per_message`` against
``withheld_bucket_s`` and ``drain_max_s``, from the ``sweeps`` table's rows of one sweep (one row
per scenario: ``run_id``, ``settings`` JSON, metrics). A click on a cell or point jumps to that
scenario's section of the page (its ``customdata`` holds the run_id). The page itself is
:func:`pipelines.analysis.page.write_sweep_page`; one run's figures are
:mod:`pipelines.analysis.figures`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import plotly.graph_objects as go

from pipelines.analysis.figures import PageError
from pipelines.analysis.run_tables import METRICS

Figures = list[tuple[str, go.Figure]]

SWEEP_METRICS: tuple[str, ...] = ("entries_per_message", "withheld_bucket_s", "drain_max_s",
                                  "flaps", "splits", "merges", "at_max_segments_s")
"""Metrics of a ``sweeps`` row the heat maps offer in their dropdown (first = shown first)."""

PARETO_VIEWS: tuple[tuple[str, str], ...] = (("entries_per_message", "withheld_bucket_s"),
                                             ("entries_per_message", "drain_max_s"))
"""(x, y) metric pairs of the Pareto views; both are minimized."""


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


def setting_sort_key(v: Any) -> tuple[int, float, str]:
    if v is None:
        return (2, 0.0, "")
    if isinstance(v, bool):
        return (1, 0.0, str(v))
    if isinstance(v, int | float):
        return (0, float(v), "")
    return (1, 0.0, str(v))


def setting_label(v: Any) -> str:
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
    xs = sorted({repr(v): v for v in settings[x_param]}.values(), key=setting_sort_key)
    ys = sorted({repr(v): v for v in settings[y_param]}.values(), key=setting_sort_key)
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
    return [setting_label(v) for v in xs], [setting_label(v) for v in ys], z, run_ids, counts


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
    return "<br>".join(f"{k} = {setting_label(v)}" for k, v in row.items() if v is not None)


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
