"""Per-topic key statistics in one pass over a topic's messages: the hottest keys' counts
(a mergeable Misra-Gries summary), their peak rates per stats period (exact), distinct keys
(exact up to :data:`DISTINCT_EXACT_MAX`, then HyperLogLog) and keyless messages.

Pure NumPy. What it answers (issue #34): a key always maps to one segment (its ``segment_hash``,
reference §1.2), so a key whose own rate exceeds the split threshold keeps its segment hot
however often the segment splits (§2.3: a split halves the range, never a key).

A key is identified by its ``hash32`` (keys with equal murmur3-32 hashes route together
anyway); its name is the first key string seen with that hash in replay order.

Error bounds (tested against exact counts, ``tests/core/test_heavy_hitters.py``):

- ``count`` of a tracked key: ``true − error ≤ count ≤ true`` where ``error`` (the summary's
  total decrement, :attr:`KeyStats.error`) ``≤ keyed_messages / (capacity + 1)``
  (Misra-Gries; merging summaries keeps the bound: Agarwal et al., "Mergeable summaries", 2012).
  Every key with ``true > error`` is tracked.
- peak rates: exact. Each stats period's key counts are exact (``np.unique`` over the period's
  messages, carried across windows while the period is open); the top :data:`PEAKS` keys by
  peak are kept, which is exact for the top (a maximum only grows).
- distinct keys: exact up to :data:`DISTINCT_EXACT_MAX` key hashes, then HyperLogLog with
  2^14 registers (standard error 1.04/√16384 ≈ 0.8 %).

Chunking: the summary is updated once per closed stats period (periods are multiples of
``period_ms`` on the emulated clock), so the results do not depend on how the messages are cut
into windows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

CAPACITY = 1024
"""Misra-Gries counters per topic (the count error is at most keyed messages / 1025)."""

PEAKS = 64
"""Keys whose peak period rate is kept per topic (the top ones by peak)."""

DISTINCT_EXACT_MAX = 16384
"""Distinct key hashes counted exactly; beyond, HyperLogLog."""

HLL_BITS = 14
"""HyperLogLog register index bits (2^14 registers)."""

I64 = npt.NDArray[np.int64]
OBJ = npt.NDArray[Any]


def _empty_ids() -> I64:
    return np.zeros(0, dtype=np.int64)


def _empty_obj() -> OBJ:
    return np.zeros(0, dtype=object)


def misra_gries_merge(ids: I64, counts: I64, names: OBJ, more_ids: I64, more_counts: I64,
                      more_names: OBJ, capacity: int) -> tuple[I64, I64, OBJ, int]:
    """Merge two Misra-Gries summaries (``ids`` unique int64, ``counts`` int64 > 0, ``names``
    object, aligned; same for ``more_*``) into one of at most ``capacity`` counters.

    Counts of equal ids add (the name kept is the first summary's); when more than
    ``capacity`` ids remain, the (capacity+1)-th largest count ``d`` is subtracted from every
    counter and those ≤ 0 are dropped. Returns ``(ids, counts, names, d)``, ids ascending; ``d``
    (0 when nothing was dropped) adds to the summary's error. Order-independent: ties at ``d``
    all go."""
    all_ids = np.concatenate([ids, more_ids])
    all_counts = np.concatenate([counts, more_counts])
    all_names = np.concatenate([names, more_names])
    uniq, first, inverse = np.unique(all_ids, return_index=True, return_inverse=True)
    summed = np.bincount(inverse, weights=all_counts, minlength=len(uniq)).astype(np.int64)
    kept_names = all_names[first]
    d = 0
    if len(uniq) > capacity:
        d = int(np.partition(summed, len(summed) - capacity - 1)[len(summed) - capacity - 1])
        summed = summed - d
        keep = summed > 0
        uniq, summed, kept_names = uniq[keep], summed[keep], kept_names[keep]
    return uniq.astype(np.int64), summed, kept_names, d


def hll_update(registers: npt.NDArray[np.uint8], hashes: I64) -> None:
    """Fold 32-bit hashes (int64 holding unsigned values) into HyperLogLog ``registers``
    (uint8, 2^:data:`HLL_BITS`), in place."""
    if not len(hashes):
        return
    h = hashes.astype(np.uint64)
    rest_bits = 32 - HLL_BITS
    idx = (h >> np.uint64(rest_bits)).astype(np.int64)
    rest = (h & np.uint64((1 << rest_bits) - 1)).astype(np.int64)
    # rank = leading zeros of ``rest`` in rest_bits bits + 1 (rest_bits + 1 when rest == 0)
    bit_length = np.where(rest > 0, np.floor(np.log2(np.maximum(rest, 1))) + 1, 0)
    rank = (rest_bits - bit_length + 1).astype(np.uint8)
    np.maximum.at(registers, idx, rank)


def hll_estimate(registers: npt.NDArray[np.uint8]) -> float:
    """HyperLogLog cardinality (Flajolet et al. 2007, with the small- and large-range
    corrections for 32-bit hashes)."""
    m = len(registers)
    alpha = 0.7213 / (1 + 1.079 / m)
    e = alpha * m * m / float(np.sum(np.power(2.0, -registers.astype(np.float64))))
    zeros = int(np.count_nonzero(registers == 0))
    if e <= 2.5 * m and zeros:
        return float(m * np.log(m / zeros))
    if e > 2**32 / 30:
        return float(-(2**32) * np.log(1 - e / 2**32))
    return e


@dataclass
class KeyStats:
    """One topic's key statistics (picklable: carried in the topic's controller between
    windows). Feed messages in event-time order with :meth:`update`; :meth:`close` at end of
    input; read with :meth:`top`."""

    period_ms: int
    capacity: int = CAPACITY
    report_hashes: bool = True  # False: the caller must not report key hashes (privacy)
    messages: int = 0
    bytes: int = 0
    keyless: int = 0
    # Misra-Gries summary of the closed periods' keyed messages
    ids: I64 = field(default_factory=_empty_ids)
    counts: I64 = field(default_factory=_empty_ids)
    names: OBJ = field(default_factory=_empty_obj)
    error: int = 0
    keyed_closed: int = 0
    # the open period's exact counts
    period: int | None = None
    p_ids: I64 = field(default_factory=_empty_ids)
    p_counts: I64 = field(default_factory=_empty_ids)
    p_names: OBJ = field(default_factory=_empty_obj)
    # top keys by their highest count in one period, and that period's start (ms)
    peak_ids: I64 = field(default_factory=_empty_ids)
    peak_counts: I64 = field(default_factory=_empty_ids)
    peak_at: I64 = field(default_factory=_empty_ids)
    peak_names: OBJ = field(default_factory=_empty_obj)
    distinct: I64 | None = field(default_factory=_empty_ids)
    registers: npt.NDArray[np.uint8] = field(
        default_factory=lambda: np.zeros(1 << HLL_BITS, dtype=np.uint8))
    closed: bool = False

    def update(self, event_ms: I64, hash32: I64, payload_size: I64, keys: OBJ) -> None:
        """Add a chunk of messages in event-time order (after every earlier chunk):
        ``event_ms`` int64 emulated ms, ``hash32`` int64 (-1 = keyless), ``payload_size``
        int64 bytes, ``keys`` object (strings; ignored where keyless)."""
        n = len(event_ms)
        if not n:
            return
        self.messages += n
        self.bytes += int(payload_size.sum())
        keyed = hash32 >= 0
        self.keyless += int(n - keyed.sum())
        ev, h, k = event_ms[keyed], hash32[keyed], keys[keyed]
        periods = ev // self.period_ms
        cuts = np.flatnonzero(np.diff(periods)) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(ev)], strict=True):
            if hi > lo:
                self._add_period_slice(int(periods[lo]), h[lo:hi], k[lo:hi])

    def _add_period_slice(self, period: int, h: I64, k: OBJ) -> None:
        if self.period is not None and period != self.period:
            self._close_period()
        self.period = period
        uniq, first, counts = np.unique(h, return_index=True, return_counts=True)
        if not len(self.p_ids):  # the period starts in this chunk: nothing to merge
            self.p_ids, self.p_counts = uniq.astype(np.int64), counts.astype(np.int64)
            self.p_names = k[first].astype(object)
            return
        self.p_ids, self.p_counts, self.p_names, _ = misra_gries_merge(
            self.p_ids, self.p_counts, self.p_names, uniq, counts.astype(np.int64),
            k[first].astype(object), capacity=1 << 62)

    def _close_period(self) -> None:
        """Fold the open period into the summary, the peaks and the distinct keys."""
        if self.period is None:
            return
        self.keyed_closed += int(self.p_counts.sum())
        self.ids, self.counts, self.names, d = misra_gries_merge(
            self.ids, self.counts, self.names, self.p_ids, self.p_counts, self.p_names,
            self.capacity)
        self.error += d
        self._update_peaks()
        self._update_distinct()
        self.period = None
        self.p_ids, self.p_counts, self.p_names = _empty_ids(), _empty_ids(), _empty_obj()

    def _update_peaks(self) -> None:
        p_ids, p_counts, p_names = self.p_ids, self.p_counts, self.p_names
        if len(p_counts) > PEAKS:  # only the period's top (ties included) can enter the top
            keep = p_counts >= np.partition(p_counts, -PEAKS)[-PEAKS]
            p_ids, p_counts, p_names = p_ids[keep], p_counts[keep], p_names[keep]
        start = np.full(len(p_ids), int(self.period or 0) * self.period_ms, dtype=np.int64)
        ids = np.concatenate([self.peak_ids, p_ids])
        counts = np.concatenate([self.peak_counts, p_counts])
        at = np.concatenate([self.peak_at, start])
        names = np.concatenate([self.peak_names, p_names])
        # per id its highest count, the earliest period reaching it: by id, count desc, time
        order = np.lexsort((at, -counts, ids))
        ids, counts, at, names = ids[order], counts[order], at[order], names[order]
        first = np.r_[True, ids[1:] != ids[:-1]]
        ids, counts, at, names = ids[first], counts[first], at[first], names[first]
        top = np.lexsort((ids, -counts))[:PEAKS]  # highest peak first, then lowest id
        self.peak_ids, self.peak_counts = ids[top], counts[top]
        self.peak_at, self.peak_names = at[top], names[top]

    def _update_distinct(self) -> None:
        hll_update(self.registers, self.p_ids)
        if self.distinct is not None:
            self.distinct = np.union1d(self.distinct, self.p_ids).astype(np.int64)
            if len(self.distinct) > DISTINCT_EXACT_MAX:
                self.distinct = None

    def close(self) -> None:
        """End of input: fold the open period in."""
        self._close_period()
        self.closed = True

    @property
    def distinct_keys(self) -> int:
        """Distinct key hashes of the closed periods: exact up to :data:`DISTINCT_EXACT_MAX`,
        a HyperLogLog estimate (rounded) beyond."""
        if self.distinct is not None:
            return len(self.distinct)
        return round(hll_estimate(self.registers))

    @property
    def distinct_exact(self) -> bool:
        """Whether :attr:`distinct_keys` is exact."""
        return self.distinct is not None

    def top(self, n: int) -> list[dict[str, Any]]:
        """The ``n`` keys with the highest peak period count (ties: lowest hash), each
        ``{"key", "hash32", "messages", "peak_messages", "peak_at_ms"}``: ``messages`` the
        summary's count (a lower bound, within :attr:`error`; 0 if no longer tracked),
        ``peak_messages`` the key's most messages in one period (exact), ``peak_at_ms`` that
        period's start. Call after :meth:`close`."""
        pos = np.searchsorted(self.ids, self.peak_ids)
        pos = np.minimum(pos, max(len(self.ids) - 1, 0))
        found = (len(self.ids) > 0) & (self.ids[pos] == self.peak_ids) if len(self.ids) else \
            np.zeros(len(self.peak_ids), dtype=bool)
        counts = np.where(found, self.counts[pos] if len(self.ids) else 0, 0)
        return [{"key": self.peak_names[i], "hash32": int(self.peak_ids[i]),
                 "messages": int(counts[i]), "peak_messages": int(self.peak_counts[i]),
                 "peak_at_ms": int(self.peak_at[i])} for i in range(min(n, len(self.peak_ids)))]
