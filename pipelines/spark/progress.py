"""Replay progress: a ``tqdm`` bar on a terminal, plain lines otherwise.

:class:`pipelines.spark.replay.Replay` reports each micro-batch by calling its ``progress`` callable
with a :class:`BatchProgress` (whose ``str()`` is the plain progress line) and other milestones
with a plain ``str``. :class:`ReplayProgress` is that callable for the command line:

- on a terminal (``stream.isatty()``): one bar, drawn from the start, counting records read
  (accepted + quarantined) with their rate (records/s, wall clock, averaged over the run) and,
  as postfix, the quarantined count and the latest ``publish_time`` reached (event-time
  progress). The total is unknown (a stream has no end), so the bar shows counts and rate, not
  a percentage. Other messages are written above the bar.
- otherwise (a log file, a pipe, Airflow): the plain line of every event, as ``print`` would.

Only wall-clock display: nothing here reaches the output tables.
"""

from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TextIO

from tqdm import tqdm

DEFAULT_COLUMNS, DEFAULT_ROWS = 100, 24
"""Bar width and screen height used when the terminal does not report its size."""


def _size(stream: TextIO) -> tuple[int, int]:
    """(columns, lines) of the terminal behind ``stream``; (0, 0) when unknown."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return 0, 0
    return size.columns, size.lines


@dataclass(frozen=True)
class BatchProgress:
    """One processed micro-batch.

    ``line``: the plain progress line (``str()`` of the event); ``records``: records this
    micro-batch read (accepted + quarantined, ``late`` included); ``total_accepted`` /
    ``total_quarantined``: so far in the run; ``latest_publish_time``: the latest publish time
    read so far (formatted UTC timestamp, ``-`` when none).
    """

    line: str
    records: int
    total_accepted: int
    total_quarantined: int
    latest_publish_time: str

    def __str__(self) -> str:
        return self.line


class ReplayProgress:
    """``progress`` callable for :class:`pipelines.spark.replay.Replay` (see the module docstring).

    ``stream``: where to write (default ``sys.stdout``); ``bar``: force the bar on or off
    (default: on when ``stream`` is a terminal). Use as a context manager, or call
    :meth:`close` before printing anything else, so the bar is finished first.
    """

    def __init__(self, stream: TextIO | None = None, bar: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        isatty = getattr(self.stream, "isatty", None)
        self.use_bar = bool(isatty and isatty()) if bar is None else bar
        self._bar: tqdm[Any] | None = None
        if self.use_bar:  # drawn from the start, so the rate averages over the whole run
            # Follow the terminal's size; a pty reporting 0 x 0 would hide the bar.
            size: dict[str, Any] = ({"dynamic_ncols": True} if min(_size(self.stream)) > 0
                                    else {"ncols": DEFAULT_COLUMNS, "nrows": DEFAULT_ROWS})
            self._bar = tqdm(desc="replay", unit=" records", unit_scale=True, file=self.stream,
                             leave=True, mininterval=0.5, smoothing=0, **size)

    def __call__(self, event: object) -> None:
        if self._bar is None:
            print(str(event), file=self.stream, flush=True)
            return
        if not isinstance(event, BatchProgress):
            self._bar.write(str(event), file=self.stream)
            return
        self._bar.update(event.records)
        self._bar.set_postfix_str(f"quarantined {event.total_quarantined:,}, "
                                  f"event time {event.latest_publish_time}")

    def close(self) -> None:
        """Finish the bar (if one was drawn)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> ReplayProgress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
