"""Reading the windowed tables (``consumer_load``, ``subscription_stats``): their idle windows.

A replay writes a window's row only where something happened or changed (issue #30): each
series — a (topic, subscription, consumer) of ``consumer_load``, a (topic, subscription) of
``subscription_stats`` — has a row for its first and its last window and for every window that
differs from the previous row carried forward; a window missing between two rows of a series
is that earlier row carried forward (:func:`pipelines.core.dispatch.idle_consumer_load`,
:func:`~pipelines.core.dispatch.idle_window_stats`). :func:`fill_idle_windows` puts those
windows back: the dense table a replay wrote before (one row per consumer or subscription and
window for the whole span), equal row for row (tested, and on the online-retail trace).

The windows are ``window_ms`` long on the emulated clock and aligned to its multiples; the
tables show them in log time (× ``replay.speed``, rounded to the ms) and ``busy_ms`` /
``idle_ms`` in emulated ms. :func:`window_settings` reads both from a run's config (the
``runs`` table's ``config``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd

from pipelines.contract.config import consumer_window_ms
from pipelines.core.dispatch import IDLE_CONSUMER_LOAD_ZEROS, IDLE_WINDOW_STATS_ZEROS

SERIES: dict[str, tuple[str, ...]] = {
    "consumer_load": ("topic", "subscription", "consumer_name"),
    "subscription_stats": ("topic", "subscription"),
}
"""The windowed tables and the columns naming one series of rows (with ``run_id``, when the
frame has it)."""

ZEROS: dict[str, tuple[str, ...]] = {
    "consumer_load": IDLE_CONSUMER_LOAD_ZEROS,
    "subscription_stats": IDLE_WINDOW_STATS_ZEROS,
}
"""Columns that are 0 in an idle window; every other column is carried from the previous row,
but ``consumer_load.idle_ms`` (the window's length: connected all of it) and
``subscription_stats.draining_hashes_max`` (the withheld count, which held all window)."""


class WindowSettings(NamedTuple):
    """A run's window grid: ``window_ms`` (int, emulated ms) and ``speed`` (log ms per
    emulated ms)."""

    window_ms: int
    speed: float


def window_settings(config: Mapping[str, Any] | str) -> WindowSettings:
    """The window grid of a run from its config (a dict, or the ``runs.config`` JSON):
    ``replay.consumer_window_s`` compressed by ``replay.speed``, as the replay computes it
    (:func:`pipelines.contract.config.consumer_window_ms`). ``KeyError`` when the config
    lacks them."""
    cfg = json.loads(config) if isinstance(config, str) else config
    replay = cfg["replay"]
    speed = float(replay["speed"])
    return WindowSettings(consumer_window_ms(float(replay["consumer_window_s"]), speed), speed)


def _epoch_ms(ts: pd.Series) -> npt.NDArray[np.int64]:
    """UTC timestamps → int64 ms since the epoch."""
    delta = ts - pd.Timestamp(0, tz="UTC")
    return np.asarray(delta // pd.Timedelta(milliseconds=1), dtype=np.int64)


def _log_time(emulated_ms: npt.NDArray[np.int64], speed: float) -> npt.NDArray[np.int64]:
    """Emulated-clock ms → log-time ms, rounded as the replay rounds them
    (``pipelines.engine.stages``: × speed as float64, rounded half to even)."""
    return np.asarray(np.round(emulated_ms.astype(np.float64) * speed), dtype=np.int64)


def _timestamps(ms: npt.NDArray[np.int64], like: pd.Series) -> pd.Series:
    """int64 epoch ms → a UTC timestamp column of ``like``'s dtype."""
    out = pd.Series(ms.astype("datetime64[ms]")).dt.tz_localize("UTC")
    return out.astype(like.dtype)


def window_index(frame: pd.DataFrame, settings: WindowSettings) -> npt.NDArray[np.int64]:
    """Each row's window number (int64: ``window_start`` in emulated ms / ``window_ms``)."""
    step = settings.window_ms * settings.speed  # log-time ms per window
    return np.asarray(np.rint(_epoch_ms(frame["window_start"]) / step), dtype=np.int64)


def series_columns(frame: pd.DataFrame, table: str) -> list[str]:
    """The columns naming a series of ``table`` (:data:`SERIES`), ``run_id`` first when
    ``frame`` has it. ``KeyError`` for a table that is not windowed."""
    try:
        keys = SERIES[table]
    except KeyError:
        raise KeyError(f"{table!r} is not a windowed table; windowed tables: "
                       f"{', '.join(SERIES)}") from None
    return [*(["run_id"] if "run_id" in frame.columns else []), *keys]


def fill_idle_windows(frame: pd.DataFrame, table: str, settings: WindowSettings) -> pd.DataFrame:
    """The dense ``table`` (``consumer_load`` or ``subscription_stats``) back from its sparse
    rows: every window missing between two rows of a series, as the earlier row carried
    forward (module docstring).

    ``frame``: rows of ``table`` (its columns, ``run_id`` optional; one run's grid:
    ``settings``, :func:`window_settings`), any order. Returns a new frame with the same
    columns and dtypes, sorted by series (:func:`series_columns`) then ``window_start``, index
    0..n-1. Rows after a series' last row are not made up: a finished run's series end with
    their last window (the run's last, or the one the consumer left in)."""
    keys = series_columns(frame, table)
    if frame.empty:
        return frame.reset_index(drop=True)
    f = frame.sort_values([*keys, "window_start"], kind="stable").reset_index(drop=True)
    k = window_index(f, settings)
    n = len(f)
    same = np.ones(n - 1, dtype=bool)
    for c in keys:
        v = f[c].to_numpy()
        same &= v[1:] == v[:-1]
    gaps = np.zeros(n, dtype=np.int64)
    gaps[:-1] = np.where(same, k[1:] - k[:-1] - 1, 0)
    reps = 1 + gaps
    src = np.repeat(np.arange(n), reps)
    offset = np.arange(len(src), dtype=np.int64) - np.repeat(np.cumsum(reps) - reps, reps)
    out = f.take(src).reset_index(drop=True)
    idle = offset > 0
    if not idle.any():
        return out
    start = (k[src][idle] + offset[idle]) * settings.window_ms
    for column, emulated in (("window_start", start), ("window_end", start + settings.window_ms)):
        ms = _epoch_ms(out[column])
        ms[idle] = _log_time(emulated, settings.speed)
        out[column] = _timestamps(ms, out[column])
    carried = {c: 0 for c in ZEROS[table]}
    if table == "consumer_load":
        carried["idle_ms"] = settings.window_ms
    for column, value in carried.items():
        values = out[column].to_numpy(copy=True)
        values[idle] = value
        out[column] = values
    if table == "subscription_stats":
        values = out["draining_hashes_max"].to_numpy(copy=True)
        values[idle] = out["draining_hashes_count"].to_numpy()[idle]
        out["draining_hashes_max"] = values
    return out
