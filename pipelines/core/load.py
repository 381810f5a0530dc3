"""Segment load: TopicStats rates per stats period, the 25 % material-change gate and the load
reporter (reference §5, §5.1).

The rates a load sweep reads are the broker's TopicStats values (:class:`TopicStatsRates`):
recomputed once per stats period as "messages (bytes) since the previous update / elapsed
seconds" and constant in between, not rolling averages.

The reporter writes a segment's ``SegmentLoadStats`` only when any of the four rates changed
materially against the **last value written** (not the previous sample); the store's
modification time of that write is the sample's ``modified_at_ms``, which the evaluator's merge
window measures from. The reporter's baseline is a cache in front of the metadata store: after a
cache miss (a new reporter, or :meth:`SegmentLoadReporter.forget`) it is re-seeded from the
stored record, so a lost cache does not force a write (Pulsar's newest reporter; the PIP text
said "always write first", reference §9.10).
"""

from __future__ import annotations

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


DEFAULT_STATS_UPDATE_FREQUENCY_MS = 60_000
"""``statsUpdateFrequencyInSecs`` (60 s): period of the broker's stats updater (§5.1)."""

DEFAULT_STATS_UPDATE_INITIAL_DELAY_MS = 60_000
"""``statsUpdateInitialDelayInSecs`` (60 s): its first run after broker start (§5.1)."""


@dataclass
class _SegmentStats:
    """One loaded segment topic's counters since the last stats update and its current rates."""

    loaded_at_ms: int
    counts: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    rates: Rates = (0.0, 0.0, 0.0, 0.0)
    producers_open: bool = True


@dataclass
class TopicStatsRates:
    """The TopicStats rates of one topic's loaded segment topics, per stats period (§5.1).

    The broker's stats updater runs at ``anchor_ms + initial_delay_ms + k * frequency_ms``
    (event-time ms, ``k >= 0``; ``anchor_ms`` is the emulated broker start). Each update sets
    every loaded segment's four rates to "messages (bytes) since the previous update / elapsed
    seconds" — ``(msg_rate_in, bytes_rate_in, msg_rate_out, bytes_rate_out)`` in msg/s and B/s —
    where the previous update is the grid point one period earlier (the broker start for the
    first update), or the segment's load time if later (a producer's or consumer's ``Rate``
    starts when it is created). Between updates the rates are constant: a segment loaded
    between two updates reads 0 until the next one. A segment whose producers are closed (its
    seal, §7.2) reads ``msg_rate_in = bytes_rate_in = 0`` from the next update on; its
    subscriptions stay, so its out rates still count what was dispatched in that period.
    ``ValueError`` for ``frequency_ms <= 0`` or ``initial_delay_ms < 0``.
    """

    anchor_ms: int
    frequency_ms: int = DEFAULT_STATS_UPDATE_FREQUENCY_MS
    initial_delay_ms: int = DEFAULT_STATS_UPDATE_INITIAL_DELAY_MS
    _segments: dict[int, _SegmentStats] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.frequency_ms <= 0 or self.initial_delay_ms < 0:
            raise ValueError(f"stats updates need frequency_ms > 0 and initial_delay_ms >= 0, "
                             f"got {self.frequency_ms} and {self.initial_delay_ms}")

    @property
    def first_update_ms(self) -> int:
        """Time of the first stats update (event-time ms)."""
        return self.anchor_ms + self.initial_delay_ms

    def next_update_ms(self, at_or_after_ms: int) -> int:
        """The first stats update at or after ``at_or_after_ms`` (event-time ms)."""
        first = self.first_update_ms
        if at_or_after_ms <= first:
            return first
        return first - ((first - at_or_after_ms) // self.frequency_ms) * self.frequency_ms

    def load(self, segment_id: int, now_ms: int) -> None:
        """A segment topic is loaded at ``now_ms`` (its creation): it reads 0 until the next
        update, whose rates count from ``now_ms``."""
        self._segments[segment_id] = _SegmentStats(now_ms)

    def add(self, segment_id: int, messages: int, nbytes: int, messages_out: int,
            bytes_out: int) -> None:
        """Count traffic of a loaded segment since the last update: ``messages`` / ``nbytes``
        published, ``messages_out`` / ``bytes_out`` dispatched (summed over subscriptions).
        ``KeyError`` for a segment not loaded."""
        c = self._segments[segment_id].counts
        c[0] += messages
        c[1] += nbytes
        c[2] += messages_out
        c[3] += bytes_out

    def close_producers(self, segment_id: int) -> None:
        """The segment's producers are closed (its seal): its in-rates fall to 0 at the next
        update; the traffic they published since the last update is no longer counted."""
        s = self._segments.get(segment_id)
        if s is not None:
            s.producers_open = False

    def update(self, now_ms: int) -> None:
        """Run the stats update at ``now_ms``, which must be an update time (``ValueError``
        otherwise): recompute every loaded segment's rates and reset its counters."""
        if now_ms != self.next_update_ms(now_ms):
            raise ValueError(f"{now_ms} is not a stats update time")
        previous = (now_ms - self.frequency_ms if now_ms > self.first_update_ms
                    else self.anchor_ms)
        for s in self._segments.values():
            elapsed_ms = now_ms - max(previous, s.loaded_at_ms)
            a, b, c, d = s.counts
            if elapsed_ms <= 0:
                s.rates = (0.0, 0.0, 0.0, 0.0)
            else:
                if not s.producers_open:
                    a = b = 0
                s.rates = (a * 1000 / elapsed_ms, b * 1000 / elapsed_ms, c * 1000 / elapsed_ms,
                           d * 1000 / elapsed_ms)
            s.counts = [0, 0, 0, 0]

    def rates(self, segment_id: int) -> Rates:
        """The rates a sweep reads now (msg/s, B/s, msg/s, B/s); zeros for a segment not
        loaded."""
        s = self._segments.get(segment_id)
        return s.rates if s is not None else (0.0, 0.0, 0.0, 0.0)

    def has_data(self, segment_id: int) -> bool:
        """The segment has uncounted traffic or a non-zero rate (a later update or sweep can
        still change what is read)."""
        s = self._segments.get(segment_id)
        return s is not None and (any(s.counts) or any(s.rates))

    def unload(self, segment_id: int) -> None:
        """Forget a segment topic (unknown ids are ignored)."""
        self._segments.pop(segment_id, None)

    @property
    def loaded(self) -> list[int]:
        """Ids of the loaded segment topics, ascending."""
        return sorted(self._segments)
