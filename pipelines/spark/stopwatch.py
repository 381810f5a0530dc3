"""The replay's stage stopwatch: wall-clock seconds per stage, exclusive of the stages timed
inside it, reported only in the ``runs`` table's ``timings`` (``<stage>_s``)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

STAGES = ("ingest_hash", "control_plane", "batching", "dispatch", "delta_write")
"""Stages timed into the ``runs`` table's ``timings`` as ``<stage>_s`` (exclusive seconds)."""

OPERATOR_STAGES = ("control_plane", "batching", "dispatch")
"""The emulation query's stages: one wall-clock span split by the operators' own seconds."""


@dataclass
class Stopwatch:
    """Nested stage timers: ``stage_s`` holds each stage's exclusive seconds (a stage timed
    inside another is subtracted from it)."""

    stage_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    _clock: list[list[float]] = field(default_factory=list, repr=False)

    def tick(self) -> None:
        """Start timing a stage; a stage timed inside it is excluded from it."""
        self._clock.append([time.perf_counter(), 0.0])

    def tock(self, stage: str) -> None:
        """Stop the innermost timer and add its exclusive seconds to ``stage_s[stage]``."""
        t0, inner = self._clock.pop()
        dt = time.perf_counter() - t0
        self.stage_s[stage] = self.stage_s.get(stage, 0.0) + dt - inner
        if self._clock:
            self._clock[-1][1] += dt

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Time the ``with`` block as ``stage``."""
        self.tick()
        try:
            yield
        finally:
            self.tock(stage)

    def attribute(self, wall_s: float, task_s: Mapping[str, float]) -> None:
        """Close the timer opened (:meth:`tick`) for a finalization: its ``wall_s`` (the
        emulation query and its operators) is split over :data:`OPERATOR_STAGES` in proportion
        to the seconds the operators spent in each (``task_s``, the receipt's)."""
        self._clock.pop()
        total = sum(task_s.values())
        for stage in OPERATOR_STAGES:
            share = task_s.get(stage, 0.0) / total if total else 1 / 3
            self.stage_s[stage] = self.stage_s.get(stage, 0.0) + wall_s * share
        if self._clock:
            self._clock[-1][1] += wall_s

    def timings(self) -> dict[str, float]:
        """``{<stage>_s: seconds}``, rounded to the millisecond, for the ``runs`` row."""
        return {f"{k}_s": round(v, 3) for k, v in self.stage_s.items()}
