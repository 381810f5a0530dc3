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

from collections.abc import Sequence
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


_EMPTY_IDS = np.zeros(0, dtype=np.int64)
_EMPTY_OBJ = np.zeros(0, dtype=object)
_EMPTY_IDS.flags.writeable = _EMPTY_OBJ.flags.writeable = False


def _empty_ids() -> I64:
    """An empty int64 array, shared (read-only: state arrays are replaced, never written)."""
    return _EMPTY_IDS


def _empty_obj() -> OBJ:
    """An empty object array, shared (read-only)."""
    return _EMPTY_OBJ


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
    windows). Feed messages in event-time order with :meth:`update` (or many topics at once
    with :func:`update_many`); :meth:`close` (:func:`close_many`) at end of input; read with
    :meth:`top`."""

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
    # HyperLogLog registers (uint8, 2^HLL_BITS), made when ``distinct`` outgrows
    # DISTINCT_EXACT_MAX (from the distinct hashes so far: a register is a maximum over a set,
    # so folding the set once equals folding every period): 16 KiB a topic only where needed
    registers: npt.NDArray[np.uint8] | None = None
    closed: bool = False

    def __getstate__(self) -> dict[str, Any]:
        """The state with its int64 arrays in one buffer and its name arrays as lists (a
        pickled NumPy array costs more than its few hundred bytes: thousands of topics' states
        are pickled every window)."""
        state = dict(self.__dict__)
        ints = [state[a] for a in _INT_ARRAYS]
        if not all(x is None or x.dtype == np.int64 for x in ints):
            return state  # not packed (never made so by this module)
        for a in _INT_ARRAYS:
            del state[a]
        state["_packed"] = (tuple(-1 if x is None else len(x) for x in ints),
                            b"".join(x.tobytes() for x in ints if x is not None))
        for a in _OBJ_ARRAYS:
            state[a] = state[a].tolist()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        packed = state.pop("_packed", None)
        if packed is not None:
            lens, buf = packed
            flat = np.frombuffer(buf, dtype=np.int64)  # read-only: state arrays are replaced
            at = 0
            for a, n in zip(_INT_ARRAYS, lens, strict=True):
                state[a] = None if n < 0 else flat[at:at + n]
                at += max(n, 0)
            for a in _OBJ_ARRAYS:
                names = np.empty(len(state[a]), dtype=object)
                names[:] = state[a]
                state[a] = names
        self.__dict__.update(state)

    def update(self, event_ms: I64, hash32: I64, payload_size: I64, keys: OBJ) -> None:
        """Add a chunk of messages in event-time order (after every earlier chunk):
        ``event_ms`` int64 emulated ms, ``hash32`` int64 (-1 = keyless), ``payload_size``
        int64 bytes, ``keys`` object (strings; ignored where keyless)."""
        update_many([self], np.array([0, len(event_ms)], dtype=np.int64), event_ms, hash32,
                    payload_size, keys)

    def close(self) -> None:
        """End of input: fold the open period in."""
        close_many([self])

    @property
    def distinct_keys(self) -> int:
        """Distinct key hashes of the closed periods: exact up to :data:`DISTINCT_EXACT_MAX`,
        a HyperLogLog estimate (rounded) beyond."""
        if self.distinct is not None:
            return len(self.distinct)
        assert self.registers is not None  # made when distinct was dropped
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


_INT_ARRAYS = ("ids", "counts", "p_ids", "p_counts", "peak_ids", "peak_counts", "peak_at",
               "distinct")
""":class:`KeyStats`' int64 arrays (``distinct`` may be ``None``), packed when pickled."""
_OBJ_ARRAYS = ("names", "p_names", "peak_names")
""":class:`KeyStats`' object (key name) arrays, pickled as lists."""


def update_many(stats: Sequence[KeyStats], bounds: I64, event_ms: I64, hash32: I64,
                payload_size: I64, keys: OBJ) -> None:
    """:meth:`KeyStats.update` of several topics in one vectorized pass: ``stats[i]`` takes
    rows ``bounds[i]:bounds[i + 1]`` (``bounds`` int64, ``len(stats) + 1`` ascending offsets;
    each topic's rows in event-time order, after its earlier chunks). Columns as
    :meth:`KeyStats.update`. Equal, topic by topic, to one :meth:`KeyStats.update` each: the
    messages are counted by (topic, stats period, key hash) with one sort, and every closed
    period of every topic is folded in at once (:func:`_fold`), so the cost follows
    messages, not topics."""
    if not len(stats):
        return
    bounds = np.asarray(bounds, dtype=np.int64)
    keyed = _add_traffic(stats, bounds, hash32, payload_size)
    if not len(keyed):
        return
    topic = np.repeat(np.arange(len(stats), dtype=np.int64), np.diff(bounds))[keyed]
    period_ms = {st.period_ms for st in stats}
    period = event_ms[keyed] // (period_ms.pop() if len(period_ms) == 1 else
                                 np.array([st.period_ms for st in stats])[topic])
    u_topic, u_period, u_ids, u_counts, u_names = _period_counts(
        stats, topic, period, hash32[keyed], keys, keyed)
    g_start = _first_of_runs((u_topic << 32) | (u_period - int(u_period.min())))
    g_end = np.r_[g_start[1:], len(u_topic)]
    g_topic = u_topic[g_start]
    last = np.r_[g_topic[1:] != g_topic[:-1], True]  # a topic's last period stays open
    for g in np.flatnonzero(last).tolist():
        st, lo, hi = stats[int(g_topic[g])], int(g_start[g]), int(g_end[g])
        st.period = int(u_period[lo])
        st.p_ids, st.p_counts = u_ids[lo:hi].copy(), u_counts[lo:hi].copy()
        st.p_names = u_names[lo:hi].copy()
    closed = np.repeat(~last, g_end - g_start)
    if closed.any():
        _fold(stats, u_topic[closed], u_period[closed], u_ids[closed], u_counts[closed],
              u_names[closed])


def _add_traffic(stats: Sequence[KeyStats], bounds: I64, hash32: I64,
                 payload_size: I64) -> I64:
    """Add each topic's messages, bytes and keyless messages; returns the keyed rows."""
    keyed = np.flatnonzero(hash32 >= 0)
    sizes = np.r_[0, np.cumsum(payload_size, dtype=np.int64)]
    nbytes = sizes[bounds[1:]] - sizes[bounds[:-1]]
    nkeyed = np.diff(np.searchsorted(keyed, bounds))
    for st, n, b, k in zip(stats, np.diff(bounds).tolist(), nbytes.tolist(), nkeyed.tolist(),
                           strict=True):
        if n:
            st.messages += n
            st.bytes += b
            st.keyless += n - k
    return keyed


def _period_counts(stats: Sequence[KeyStats], topic: I64, period: I64, hash32: I64,
                   keys: OBJ, rows: I64) -> tuple[I64, I64, I64, I64, OBJ]:
    """The keyed messages (``topic``, ``period``, ``hash32`` of ``keys[rows]``, by topic and
    time) counted per (topic, period, hash) together with each topic's open period, as
    columns ``(topic, period, hash, count, name)`` sorted by those three; the name is the
    first one seen (the open period's, then in replay order). The topics' open periods are
    taken (``period = None``)."""
    # (topic, period) groups numbered in order; a topic's open period is a group of its own
    # just before the topic's first one (code 2g) or part of it (same period: 2g + 1)
    change = np.r_[True, (topic[1:] != topic[:-1]) | (period[1:] != period[:-1])]
    group = np.cumsum(change) - 1
    g_period = period[change]
    first_row = np.flatnonzero(np.r_[True, topic[1:] != topic[:-1]])
    opened = [(i, r) for i, r in zip(topic[first_row].tolist(), first_row.tolist(), strict=True)
              if stats[i].period is not None]
    o_stats = [stats[i] for i, _ in opened]
    o_len = np.array([len(st.p_ids) for st in o_stats], dtype=np.int64)
    o_row = np.array([r for _, r in opened], dtype=np.int64)
    o_period = np.zeros(len(stats), dtype=np.int64)
    o_period[[i for i, _ in opened]] = [st.period for st in o_stats]
    n_open = int(o_len.sum())
    key = (2 * group + 1) << 32 | hash32  # hash32 < 2^32: (code, hash) as one int64
    if n_open:
        o_code = 2 * group[o_row] + (g_period[group[o_row]] == o_period[topic[o_row]])
        key = np.concatenate([np.repeat(o_code << 32, o_len)
                              | np.concatenate([st.p_ids for st in o_stats]), key])
    for st in o_stats:
        st.period = None
    order = np.argsort(key, kind="stable")  # stable: the open period's first, then by time
    key = key[order]
    first = _first_of_runs(key)
    src = order[first]
    if n_open:
        counts = np.add.reduceat(np.concatenate(
            [*(st.p_counts for st in o_stats), np.ones(len(topic), dtype=np.int64)])[order],
            first).astype(np.int64)
    else:
        counts = np.diff(np.r_[first, len(key)]).astype(np.int64)
    code = key[first] >> 32
    g = code >> 1
    u_topic = topic[np.flatnonzero(change)][g]
    u_period = np.where(code & 1, g_period[g], o_period[u_topic])
    names = np.empty(len(src), dtype=object)
    is_open = src < n_open
    if n_open:
        names[is_open] = np.concatenate([st.p_names for st in o_stats])[src[is_open]]
    names[~is_open] = keys[rows[src[~is_open] - n_open]]
    return u_topic, u_period, key[first] & 0xFFFFFFFF, counts, names


def close_many(stats: Sequence[KeyStats]) -> None:
    """:meth:`KeyStats.close` of several topics at once (their open periods folded in one
    pass)."""
    opened = [i for i, st in enumerate(stats) if st.period is not None]
    if opened:
        sts = [stats[i] for i in opened]
        lens = [len(st.p_ids) for st in sts]
        _fold(stats, np.repeat(np.asarray(opened, dtype=np.int64), lens),
              np.repeat(np.array([st.period for st in sts], dtype=np.int64), lens),
              np.concatenate([st.p_ids for st in sts]),
              np.concatenate([st.p_counts for st in sts]),
              np.concatenate([st.p_names for st in sts]))
        for st in sts:
            st.period = None
            st.p_ids, st.p_counts, st.p_names = _empty_ids(), _empty_ids(), _empty_obj()
    for st in stats:
        st.closed = True


def _fold(stats: Sequence[KeyStats], topic: I64, period: I64, ids: I64, counts: I64,
          names: OBJ) -> None:
    """Fold closed periods' exact counts into the topics' summaries, peaks and distinct keys.

    Rows: one per (topic, period, key hash), by topic, period and hash (``topic``: index in
    ``stats``; ``names``: the key's first name in the period). Each topic's periods are folded
    as :meth:`KeyStats.update` folds them one after another: the peaks (a maximum, the earliest
    period reaching it) and distinct keys (a union) do not depend on the order, and neither
    does the Misra-Gries summary while a topic's keys fit its capacity (a plain sum); a topic
    whose keys overflow it merges its periods in order (:func:`misra_gries_merge`)."""
    touched, local = np.unique(topic, return_inverse=True)
    sts = [stats[i] for i in touched.tolist()]
    local = local.reshape(-1).astype(np.int64)
    keyed = np.bincount(local, weights=counts, minlength=len(sts)).astype(np.int64)
    for st, k in zip(sts, keyed.tolist(), strict=True):
        st.keyed_closed += k
    _fold_summaries(sts, local, period, ids, counts, names)
    _fold_peaks(sts, local, period, ids, counts, names)
    _fold_distinct(sts, local, ids)


def _own(sts: Sequence[KeyStats], *attrs: str) -> tuple[I64, list[npt.NDArray[Any]]]:
    """The topics' arrays ``attrs`` concatenated, with each row's topic (index in ``sts``)."""
    lens = [len(getattr(st, attrs[0])) for st in sts]
    topic = np.repeat(np.arange(len(sts), dtype=np.int64), lens)
    return topic, [np.concatenate([getattr(st, a) for st in sts]) for a in attrs]


def _split(sts: Sequence[KeyStats], topic: I64, columns: dict[str, npt.NDArray[Any]]) -> None:
    """Rows of ``columns`` (grouped by ``topic``, ascending) back into each topic's attrs."""
    cuts = np.searchsorted(topic, np.arange(len(sts) + 1)).tolist()
    for i, st in enumerate(sts):
        lo, hi = cuts[i], cuts[i + 1]
        for attr, col in columns.items():
            # a copy: a view would keep the whole window's array alive in the state
            setattr(st, attr, col[lo:hi].copy())


def _first_of_runs(key: I64) -> I64:
    """Positions where a sorted ``key`` starts a run of equal values."""
    return np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else _empty_ids()


def _fold_summaries(sts: Sequence[KeyStats], topic: I64, period: I64, ids: I64, counts: I64,
                    names: OBJ) -> None:
    """Each topic's Misra-Gries summary merged with its closed periods."""
    s_topic, (s_ids, s_counts, s_names) = _own(sts, "ids", "counts", "names")
    old = [(st.ids, st.counts, st.names) for st in sts]
    t = np.concatenate([s_topic, topic])
    key = (t << 32) | np.concatenate([s_ids, ids])
    order = np.argsort(key, kind="stable")  # stable: the summary's name, then the earliest
    key = key[order]
    first = _first_of_runs(key)
    u_counts = np.add.reduceat(np.concatenate([s_counts, counts])[order], first) \
        if len(first) else _empty_ids()
    u_names = np.concatenate([s_names, names])[order[first]]
    t, u_ids = key[first] >> 32, key[first] & 0xFFFFFFFF
    _split(sts, t, {"ids": u_ids, "counts": u_counts.astype(np.int64), "names": u_names})
    over = np.flatnonzero(np.bincount(t, minlength=len(sts))
                          > np.array([st.capacity for st in sts], dtype=np.int64))
    for i in over.tolist():  # beyond capacity: the periods merged in order (a hot topic)
        st, (m_ids, m_counts, m_names) = sts[i], old[i]
        mine = np.flatnonzero(topic == i)
        for lo, hi in _runs(period[mine]):
            rows = mine[lo:hi]
            m_ids, m_counts, m_names, d = misra_gries_merge(
                m_ids, m_counts, m_names, ids[rows], counts[rows], names[rows], st.capacity)
            st.error += d
        st.ids, st.counts, st.names = m_ids, m_counts, m_names


def _runs(values: I64) -> list[tuple[int, int]]:
    """``(start, stop)`` of each run of equal values."""
    starts = _first_of_runs(values).tolist()
    return list(zip(starts, [*starts[1:], len(values)], strict=True))


def _fold_peaks(sts: Sequence[KeyStats], topic: I64, period: I64, ids: I64, counts: I64,
                names: OBJ) -> None:
    """Each topic's top :data:`PEAKS` keys by their highest count in one period (the earliest
    period reaching it; ties: lowest hash), with the closed periods' counts."""
    period_ms = np.array([st.period_ms for st in sts], dtype=np.int64)
    k_topic, (k_ids, k_counts, k_at, k_names) = _own(
        sts, "peak_ids", "peak_counts", "peak_at", "peak_names")
    t = np.concatenate([k_topic, topic])
    key = (t << 32) | np.concatenate([k_ids, ids])
    # by (topic, hash), then time: the kept peaks are older than any closed period here
    order = np.argsort(key, kind="stable")
    key = key[order]
    c = np.concatenate([k_counts, counts])[order]
    first = _first_of_runs(key)
    if not len(first):
        return
    best = np.repeat(np.maximum.reduceat(c, first), np.diff(np.r_[first, len(key)]))
    top = np.flatnonzero(c == best)  # a key's highest count, the earliest first
    top = top[_first_of_runs(key[top])]
    win = order[top]
    w_topic, w_ids, w_counts = key[top] >> 32, key[top] & 0xFFFFFFFF, c[top]
    w_at = np.concatenate([k_at, period * period_ms[topic]])[win]
    w_names = np.concatenate([k_names, names])[win]
    # highest peak first, then lowest hash (rows are by hash within a topic: a stable sort)
    if len(w_counts) and int(w_counts.max()) < 1 << 31:
        rank = np.argsort((w_topic << 32) | ((1 << 31) - w_counts), kind="stable")
    else:
        rank = np.lexsort((w_ids, -w_counts, w_topic))
    start = np.searchsorted(w_topic[rank], w_topic[rank], side="left")
    rank = rank[np.arange(len(rank)) - start < PEAKS]
    _split(sts, w_topic[rank], {"peak_ids": w_ids[rank], "peak_counts": w_counts[rank],
                                "peak_at": w_at[rank], "peak_names": w_names[rank]})


def _fold_distinct(sts: Sequence[KeyStats], topic: I64, ids: I64) -> None:
    """The closed periods' key hashes into each topic's distinct set (exact up to
    :data:`DISTINCT_EXACT_MAX`, then HyperLogLog registers)."""
    exact = np.array([st.distinct is not None for st in sts], dtype=bool)
    for i in np.flatnonzero(~exact).tolist():  # already an estimate: fold into the registers
        st = sts[i]
        assert st.registers is not None
        hll_update(st.registers, ids[topic == i])
    mine = exact[topic]
    d_topic = np.repeat(np.arange(len(sts), dtype=np.int64),
                        [len(st.distinct) if st.distinct is not None else 0 for st in sts])
    t = np.concatenate([d_topic, topic[mine]])
    key = np.unique((t << 32) | np.concatenate(
        [*(st.distinct for st in sts if st.distinct is not None), ids[mine]]))
    t, u_ids = key >> 32, key & 0xFFFFFFFF
    cuts = np.searchsorted(t, np.arange(len(sts) + 1)).tolist()
    for i in np.flatnonzero(exact).tolist():
        st, union = sts[i], u_ids[cuts[i]:cuts[i + 1]]
        if len(union) > DISTINCT_EXACT_MAX:
            st.registers = np.zeros(1 << HLL_BITS, dtype=np.uint8)
            hll_update(st.registers, union)
            st.distinct = None
        else:
            st.distinct = union.copy()
