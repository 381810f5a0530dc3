"""Segment load: rolling rates, the 25 % material-change gate and the load reporter (reference §5).

The reporter writes a segment's ``SegmentLoadStats`` only when any of the four rates changed
materially against the **last value written** (not the previous sample); the store's
modification time of that write is the sample's ``modified_at_ms``, which the evaluator's merge
window measures from. The reporter's baseline is a cache in front of the metadata store: after a
cache miss (a new reporter, or :meth:`SegmentLoadReporter.forget`) it is re-seeded from the
stored record, so a lost cache does not force a write (Pulsar's newest reporter; the PIP text
said "always write first", reference §9.10).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from pipelines.core.policy import SegmentLoadSample

Rates = tuple[float, float, float, float]
"""``(msg_rate_in, bytes_rate_in, msg_rate_out, bytes_rate_out)`` in msg/s and bytes/s."""

DEFAULT_RATE_CHANGE_THRESHOLD = 0.25
"""``scalableTopicLoadReportRateChangeThreshold`` (reference §5)."""


def _as_rates(x: Sequence[float] | SegmentLoadSample) -> Rates:
    if isinstance(x, SegmentLoadSample):
        return x.rates
    a, b, c, d = x
    return (float(a), float(b), float(c), float(d))


def is_material_change(last: Sequence[float] | SegmentLoadSample,
                       current: Sequence[float] | SegmentLoadSample,
                       threshold: float = DEFAULT_RATE_CHANGE_THRESHOLD) -> bool:
    """True when any of the four rates changed materially vs the last written value (§5).

    Per rate: ``last == 0`` → material iff ``current != 0``; otherwise material iff
    ``|current - last| / last > threshold`` (strict). ``last``/``current`` are 4-tuples of
    rates or :class:`SegmentLoadSample`.
    """
    for old, new in zip(_as_rates(last), _as_rates(current), strict=True):
        if old == 0:
            if new != 0:
                return True
        elif abs(new - old) / old > threshold:
            return True
    return False


@dataclass
class LoadRecordStore:
    """The metadata store's load records of one topic's segments (reference §5).

    One record per segment (the four rates, no timestamp inside); a record's ``modified_at_ms``
    is the store's modification time of its last write. Writing a bit-identical value is a
    no-op (the modification time does not move). Records outlive a reporter's cache: they are
    deleted only with the segment (prune, not emulated), so a sealed segment's last record stays.
    """

    _records: dict[int, SegmentLoadSample] = field(default_factory=dict)

    def put(self, segment_id: int, rates: Sequence[float], now_ms: int) -> bool:
        """Write ``rates`` (msg/s, B/s, msg/s, B/s) at ``now_ms``; ``False`` when the stored
        value is already identical (no-op: modification time unchanged)."""
        current = _as_rates(rates)
        stored = self._records.get(segment_id)
        if stored is not None and stored.rates == current:
            return False
        self._records[segment_id] = SegmentLoadSample(*current, modified_at_ms=now_ms)
        return True

    def get(self, segment_id: int) -> SegmentLoadSample | None:
        """The stored record of ``segment_id`` (``None``: nothing stored)."""
        return self._records.get(segment_id)

    def delete(self, segment_id: int) -> None:
        """Delete a segment's record (what a prune does; unknown ids are ignored)."""
        self._records.pop(segment_id, None)

    @property
    def records(self) -> Mapping[int, SegmentLoadSample]:
        """Every stored record by segment id (read-only view)."""
        return MappingProxyType(self._records)


@dataclass
class SegmentLoadReporter:
    """Broker-side load reporter of one topic's segments (reference §5).

    Two levels, as in Pulsar: the metadata :class:`LoadRecordStore` (records, with their
    modification time) and the reporter's per-segment cache of the baseline (the last value
    written, or seeded from the store). :meth:`report` applies the material-change gate against
    the baseline; on a cache miss the baseline is seeded from the stored record if one exists
    (so after :meth:`forget` an unchanged or within-threshold rate writes nothing), and with
    nothing stored the sample is written.
    """

    threshold: float = DEFAULT_RATE_CHANGE_THRESHOLD
    store: LoadRecordStore = field(default_factory=LoadRecordStore)
    _baseline: dict[int, Rates] = field(default_factory=dict)

    def report(self, segment_id: int, rates: Sequence[float], now_ms: int) -> bool:
        """Offer a sample taken at ``now_ms`` (event-time ms) of ``rates`` (msg/s, B/s, msg/s,
        B/s); ``True`` when it was written to the store (its modification time is ``now_ms``)."""
        current = _as_rates(rates)
        baseline = self._baseline.get(segment_id)
        if baseline is None:
            stored = self.store.get(segment_id)
            if stored is not None:  # cache miss: seed from the stored record
                baseline = self._baseline[segment_id] = stored.rates
        if baseline is not None and (baseline == current
                                     or not is_material_change(baseline, current,
                                                               self.threshold)):
            return False
        written = self.store.put(segment_id, current, now_ms)
        self._baseline[segment_id] = current
        return written

    def last_written(self, segment_id: int) -> SegmentLoadSample | None:
        """The stored record of ``segment_id`` (``None``: nothing stored)."""
        return self.store.get(segment_id)

    def baseline(self, segment_id: int) -> Rates | None:
        """The cached baseline of ``segment_id`` (``None``: cache miss)."""
        return self._baseline.get(segment_id)

    def forget(self, segment_id: int) -> None:
        """Drop a segment's cached baseline (ownership loss; a sealed segment, which is never
        reported again). The stored record stays: the next report re-seeds from it."""
        self._baseline.pop(segment_id, None)

    @property
    def samples(self) -> Mapping[int, SegmentLoadSample]:
        """Stored record per segment: the evaluator's ``load_by_segment`` (it reads only the
        active segments' records)."""
        return self.store.records


@dataclass
class RollingRates:
    """60 s rolling rates from per-interval counts (reference §5: TopicStats rates are rolling
    averages).

    Counts are added into fixed bins of ``interval_ms`` aligned to event time 0; the rate at a
    sample time ``t`` (a bin boundary) is the sum over the bins in ``[t - window_ms, t)`` divided
    by the window in seconds. Bins older than the window are dropped, so state is bounded by
    ``window_ms / interval_ms`` bins per segment.
    """

    interval_ms: int = 10_000
    window_ms: int = 60_000
    # segment id → deque of [bin_index, messages, bytes]
    _bins: dict[int, deque[list[int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.interval_ms <= 0 or self.window_ms <= 0:
            raise ValueError("interval_ms and window_ms must be > 0")

    def add(self, segment_id: int, time_ms: int, messages: int, nbytes: int) -> None:
        """Count ``messages``/``nbytes`` that arrived at ``time_ms`` on ``segment_id``.
        Times must be non-decreasing per segment."""
        b = time_ms // self.interval_ms
        q = self._bins.setdefault(segment_id, deque())
        if q and q[-1][0] == b:
            q[-1][1] += messages
            q[-1][2] += nbytes
        else:
            q.append([b, messages, nbytes])

    def rates(self, segment_id: int, now_ms: int) -> tuple[float, float]:
        """``(msg/s, bytes/s)`` over ``[now_ms - window_ms, now_ms)``; drops expired bins."""
        q = self._bins.get(segment_id)
        if not q:
            return (0.0, 0.0)
        first = (now_ms - self.window_ms) // self.interval_ms
        while q and q[0][0] < first:
            q.popleft()
        end = now_ms // self.interval_ms  # bins < end are complete before now_ms
        msgs = sum(m for b, m, _ in q if b < end)
        nbytes = sum(n for b, _, n in q if b < end)
        secs = self.window_ms / 1000.0
        return (msgs / secs, nbytes / secs)

    def has_data(self, segment_id: int) -> bool:
        return bool(self._bins.get(segment_id))

    def drop(self, segment_id: int) -> None:
        self._bins.pop(segment_id, None)
