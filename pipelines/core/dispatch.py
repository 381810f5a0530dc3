"""Event-time emulation of how the entries of one topic reach the consumers of ONE subscription.

Bucket-granularity dispatch (PIP-486) with PIP-379 draining, driven by the coordinator
assignment (PIP-468, :mod:`pipelines.core.assignment`). Reference: §3.4 (entry → bucket by
``entry_hash_min`` only), §3.7 (bucket spread), §6 (coordinator), §8 (draining hashes).

Usage (one dispatcher per topic × subscription)::

    d = SubscriptionDispatcher("sub", "stream", [ConsumerSpec("c1"), ConsumerSpec("c2", 5000)])
    d.on_layout(t0, layout)                   # layout in force from t0 (before entries at t0)
    d.on_entries(publish_time_ms=..., segment_id=..., entry_hash_min=..., num_messages=...,
                 payload_bytes=..., producer_name=..., entry_id=...)   # publish-time order
    d.advance_to(watermark)                   # optional: nothing later will be <= watermark
    out = d.take_outputs()                    # rows produced so far (then cleared)
    d.finish(end_ms); out = d.take_outputs()  # end of input: drain, report the backlog

Inputs (entries and layout changes) must come in non-decreasing time order, possibly in many
calls (micro-batches). The dispatcher's state is picklable between calls, and its outputs are
identical (same rows, same order) however the input is split into calls and whatever
``advance_to`` horizons are used (a horizon past the final ``end_ms`` extends the end of input
like a later ``end_ms`` would): an instant ``t`` is simulated only once every input at ``t`` is
known (an input with a later time arrived, or ``advance_to(>= t)``, or ``finish``). After
``advance_to(h)`` inputs must be later than ``h``.

The model
---------
- Time is event time, int64 milliseconds. An entry is available at its publish time.
- Consumers (:class:`ConsumerSpec`) connect at ``join_ms`` and disconnect at ``leave_ms``, by a
  clean close (``leave_how`` ``close``: the session is unregistered at once) or a lost
  connection (``crash``: the session, and its assignment, stay registered for ``grace_ms``, then
  expire; §6.1). A consumer processes one entry at a time, in dispatch order:
  ``dispatch_time = max(entry available, consumer free, bucket not withheld, segment
  assignable)``, it is busy for ``num_messages / capacity`` seconds and acks at the end of
  processing + ``ack_delay_ms``.
- STREAM / CHECKPOINT: the coordinator assigns segments (§6.3) over the registered sessions; a sole
  owner gets every bucket of its segment, the connected sharers of a segment split its buckets by
  :func:`~pipelines.core.assignment.bucket_spread` (broker side, in the order of the per-segment
  consumer names, §3.7). A session within its grace period keeps its assignment but has no
  connection: its sole-owned segments wait, its shared buckets go to the other sharers. An entry's
  bucket is ``bucket_of(segment splits, entry_hash_min)``. A free consumer takes the oldest (publish
  order) dispatchable entry among the buckets it owns. STREAM uses the drain checker (§6.2): a child
  ACTIVE segment is not assigned (its entries wait) until every parent still in the layout is
  drained; a SEALED segment is drained when all its entries are acked, and then retires. As in the
  reference, sealed segments are not parent-checked (a sealed child of an undrained parent is
  assignable). CHECKPOINT has no drain checker: every segment of the DAG stays assignable (drained
  sealed segments keep their consumer, as in the reference).
- PIP-379 at bucket granularity (§8): a bucket's entries are unacked at one consumer at a time.
  When an assignment change (consumer join/leave, layout change, segment drained) moves a bucket
  while the old owner still holds unacked entries of it, the bucket is withheld from the new
  owner until the holder's last ack of that bucket (a :class:`HandoffRow`); a bucket moved back
  to its holder is not withheld. A disconnecting consumer's unacked entries go back to the front
  of their bucket (redeliveries, dispatched before newer entries of the bucket, as the replay
  queue is) and do not withhold.
- QUEUE: no ownership, no draining, no gating: entries in publish order go round-robin to the
  free connected consumers (sorted by name, continuing after the last one served).
- No connected owner → entries stay in the backlog; at :meth:`~SubscriptionDispatcher.finish`
  they are reported with null consumer / dispatch / ack times.

Order of what happens at one instant ``t``: acks due at ``t``, consumers becoming free, consumer
leaves/joins/session expiries (by name), layout changes (in input order), entry arrivals,
sealed-segment drain detection, one reassignment (if anything changed), then dispatch (consumers by
name); repeated while zero-duration processing produces more acks at ``t``. So an ack at ``t``
happens before a membership change at ``t`` (no withholding), and an entry published at a layout
change's time sees the new layout.

Instant consumers (no capacity limit, no ack delay: the configuration defaults) take every entry
at its publish time and ack it then, so while nothing else happens (no join/leave, layout change,
backlog, unacked or withheld entry) the event loop only maps entries to their bucket's owner.
:meth:`~SubscriptionDispatcher.on_entries` takes such spans in bulk with NumPy and gives the
same rows, counters, windows and state as the event loop (a property test compares the two);
everything else runs through the event loop.

Modelling simplifications (deliberate; each keeps the model deterministic and O(entries log))
-------------------------------------------------------------------------------------------
1. No receiver queue / permits / prefetch: the broker hands a consumer its next entry only when
   the consumer is free, so a consumer's unacked entries are the one it is processing plus
   those waiting for their delayed ack. Broker read batches, read-ahead and the replay
   look-ahead caps (§8 rule 5) are not modelled; the backlog waits in the broker.
2. Acks are individual, exactly ``ack_delay_ms`` after processing ends, in processing order; no
   negative acks, ack timeouts or cumulative-ack effects. Processing never fails.
3. Processing time is integer ms without drift: within a back-to-back busy run that started at
   ``s0`` the run's k-th entry ends at ``s0 + ceil(1000 * messages_so_far / capacity)``.
4. Drain detection is immediate at the last ack (Pulsar polls: 2 s after progress, backoff).
   "Drained" means every entry given to this dispatcher for the segment is acked (a segment
   sealed with none outstanding drains at its seal instant).
5. A consumer that left does not come back under its name: a lost connection followed by a
   re-registration within the grace period is not modelled in dispatch (the controller's
   ``reconnects`` are instantaneous and no dispatch event).
6. Every owner change, including a whole-segment move between sole owners and the exclusive ↔
   shared mode flips of §6.5, is modelled as per-bucket PIP-379 handoffs; client close /
   re-subscribe latency and ``keySharedUnblockingIntervalMs`` (10 ms) are not added.
7. QUEUE uses one topic-wide rotation instead of one rotation per segment broker.
8. A consumer's load row counts the messages dispatched to it in the window (also those that
   are later redelivered because it left) and its busy time up to a leave.

Outputs (:meth:`SubscriptionDispatcher.take_outputs` → :class:`DispatchOutputs`, lists of
NamedTuples; :meth:`DispatchOutputs.column_parts` gives columns, also for 0 rows)
- ``dispatch``: :class:`DispatchRow`, one per entry: emitted when its final delivery is
  dispatched (its ack time is then known), or at ``finish`` for the backlog (nulls).
- ``handoffs``: :class:`HandoffRow`, one per bucket move between two consumers, emitted when
  the withholding ends (``withheld_until_ms == withheld_from_ms`` = not withheld; null = still
  withheld at the end).
- ``consumer_load``: :class:`ConsumerLoadRow`, one per consumer × window it was connected in
  where something happened or changed (sparse windows, below).
- ``window_stats``: :class:`WindowStatsRow`, one per window where a statistic changed:
  PIP-379 / PIP-486 gauges & counts.
- ``segment_drains``: :class:`SegmentDrainRow`, one per sealed segment when it drains.
Cumulative counters: :attr:`SubscriptionDispatcher.stats` (:class:`DispatchStats`).

Sparse windows (issue #30): a window's row is left out when it equals the previous row of its
series carried forward (:func:`idle_consumer_load`, :func:`idle_window_stats`: nothing
delivered, not busy, connected all window, the same gauges); a series' first and last windows
(and a consumer's window of leaving) are always kept, so :func:`fill_idle_rows` gives the dense
windows back exactly. Idle stretches are jumped over (from the window of the last instant to
the next window with booked busy time, a leave or the next instant), so a long quiet log costs
its instants, not its windows.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from pipelines.core.assignment import (
    CONSUMER_SESSION_GRACE_MS,
    BucketKey,
    CoordinatorAssignment,
    LeaveHow,
    SubscriptionCoordinator,
    SubscriptionType,
    bucket_owners,
    session_end_ms,
)
from pipelines.core.buckets import MAX_HASH, bucket_of_array
from pipelines.core.layout import SegmentLayout
from pipelines.core.sorting import lexsort

DEFAULT_WINDOW_MS = 60_000
"""Default length of a ``consumer_load`` / ``window_stats`` window (ms)."""

READER_SEPARATOR = "/"
"""Joins an ungrouped CHECKPOINT subscription's name and a consumer's
(:func:`reader_subscription`)."""


def reader_subscription(subscription: str, consumer_name: str) -> str:
    """Name under which one consumer of an ungrouped CHECKPOINT subscription is dispatched:
    ``"<subscription>/<consumer>"``. Such a consumer has no consumer group (reference §7.3): it
    reads every entry of every segment through its own cursor, so it is dispatched as a
    single-consumer CHECKPOINT subscription of its own (sole owner of every segment, active and
    sealed, no drain checker)."""
    return f"{subscription}{READER_SEPARATOR}{consumer_name}"


_PH_ACK = 0
_PH_FREE = 1

_CFG_LEAVE, _CFG_JOIN, _CFG_EXPIRE = 0, 1, 2
"""Kinds of consumer events: a disconnect, a registration, a crashed session's expiry."""


@dataclass(frozen=True)
class ConsumerSpec:
    """One consumer of the subscription.

    ``join_ms`` / ``leave_ms`` are event times (``leave_ms=None``: stays to the end; it must be
    after ``join_ms``). ``capacity_msgs_per_s=None``: processing takes no time. ``ack_delay_ms``:
    time from end of processing to the ack. ``leave_how``: a clean ``close`` unregisters at
    ``leave_ms``; a ``crash`` keeps the session for the grace period (reference §6.1).
    """

    name: str
    join_ms: int = 0
    leave_ms: int | None = None
    capacity_msgs_per_s: float | None = None
    ack_delay_ms: int = 0
    leave_how: LeaveHow = LeaveHow.CLOSE

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a consumer needs a non-empty name")
        if self.leave_ms is not None and self.leave_ms <= self.join_ms:
            raise ValueError(f"consumer {self.name}: leave_ms ({self.leave_ms}) must be after "
                             f"join_ms ({self.join_ms})")
        if self.capacity_msgs_per_s is not None and not self.capacity_msgs_per_s > 0:
            raise ValueError(f"consumer {self.name}: capacity_msgs_per_s must be > 0 or None, "
                             f"got {self.capacity_msgs_per_s}")
        if self.ack_delay_ms < 0:
            raise ValueError(f"consumer {self.name}: ack_delay_ms must be >= 0, "
                             f"got {self.ack_delay_ms}")


class DispatchRow(NamedTuple):
    """One entry × subscription (table ``dispatch``). ``consumer_name`` / ``dispatch_time_ms`` /
    ``ack_time_ms`` are ``None`` for an entry still in the backlog at the end; ``redeliveries``
    counts earlier deliveries lost because their consumer left before acking."""

    subscription: str
    segment_id: int
    bucket_index: int
    producer_name: str
    entry_id: int
    publish_time_ms: int
    num_messages: int
    payload_bytes: int
    consumer_name: str | None
    dispatch_time_ms: int | None
    ack_time_ms: int | None
    redeliveries: int


class HandoffRow(NamedTuple):
    """One bucket move between two consumers (table ``bucket_handoffs``).

    ``withheld_from_ms`` = the move; ``withheld_until_ms`` = when a consumer other than the new
    owner (normally ``from_consumer``) stopped holding unacked entries of the bucket, the bucket
    moved again, or ``== withheld_from_ms`` when nothing was held; ``None`` = still withheld at
    the end. ``pending_messages``: unacked messages held at the move (PIP-379
    draining_hashes_pending_messages of this bucket); ``redelivered_entries``: entries of the
    bucket redelivered because ``from_consumer`` left at this instant.
    """

    subscription: str
    segment_id: int
    bucket_index: int
    from_consumer: str
    to_consumer: str
    withheld_from_ms: int
    withheld_until_ms: int | None
    pending_messages: int
    redelivered_entries: int


class ConsumerLoadRow(NamedTuple):
    """One consumer × window ``[window_start_ms, window_end_ms)`` (table ``consumer_load``).

    ``messages`` / ``bytes``: dispatched to it in the window; ``busy_ms``: processing time in
    the window; ``idle_ms``: connected time in the window minus ``busy_ms``;
    ``backlog_messages``: undispatched messages it could take at the window end (STREAM /
    CHECKPOINT: of the buckets it owns, withheld ones included; QUEUE: the whole subscription
    backlog, shared by every connected consumer).
    """

    subscription: str
    consumer_name: str
    window_start_ms: int
    window_end_ms: int
    messages: int
    bytes: int
    busy_ms: int
    idle_ms: int
    backlog_messages: int


class WindowStatsRow(NamedTuple):
    """Subscription gauges at the window end and counts during the window.

    PIP-379 names: ``draining_hashes_count`` (= PIP-486 "buckets withheld" gauge, at the end),
    ``draining_hashes_max`` (most withheld at once in the window),
    ``draining_hashes_pending_messages`` (unacked messages holding them),
    ``draining_hashes_cleared`` (withholdings ended in the window). PIP-486: ``reassignments``
    (bucket → consumer moves), ``shared_segments`` (segments with more than one consumer),
    ``drain_mode_segments`` (sealed, undrained segments fanned out to several consumers);
    ``sealed_segments_undrained``; ``redeliveries`` (entries redelivered in the window).
    """

    subscription: str
    window_start_ms: int
    window_end_ms: int
    backlog_messages: int
    unacked_messages: int
    draining_hashes_count: int
    draining_hashes_max: int
    draining_hashes_pending_messages: int
    draining_hashes_cleared: int
    reassignments: int
    redeliveries: int
    shared_segments: int
    drain_mode_segments: int
    sealed_segments_undrained: int


IDLE_CONSUMER_LOAD_ZEROS = ("messages", "bytes", "busy_ms")
"""``consumer_load`` columns that are 0 in an idle window (:func:`idle_consumer_load`)."""

IDLE_WINDOW_STATS_ZEROS = ("draining_hashes_cleared", "reassignments", "redeliveries")
"""``window_stats`` counts that are 0 in an idle window (:func:`idle_window_stats`)."""


def idle_consumer_load(prev: ConsumerLoadRow, window_start_ms: int,
                       window_end_ms: int) -> ConsumerLoadRow:
    """The consumer's row of a window in which nothing happened to it: ``prev`` (its previous
    row) carried forward — nothing dispatched, not busy (:data:`IDLE_CONSUMER_LOAD_ZEROS`),
    connected the whole window (``idle_ms = window_end_ms - window_start_ms``), the same
    ``backlog_messages``. A window whose row equals this is not emitted (sparse windows, see
    :meth:`SubscriptionDispatcher.take_outputs`)."""
    zeros: dict[str, Any] = dict.fromkeys(IDLE_CONSUMER_LOAD_ZEROS, 0)
    return prev._replace(window_start_ms=window_start_ms, window_end_ms=window_end_ms,
                         idle_ms=window_end_ms - window_start_ms, **zeros)


def idle_window_stats(prev: WindowStatsRow, window_start_ms: int,
                      window_end_ms: int) -> WindowStatsRow:
    """The subscription's row of a window in which no statistic changed: ``prev`` (its previous
    row) carried forward — every gauge as at ``prev``'s end, ``draining_hashes_max`` equal to
    the withheld count that held all window, the counts
    (:data:`IDLE_WINDOW_STATS_ZEROS`) 0. A window whose row equals this is not emitted."""
    zeros: dict[str, Any] = dict.fromkeys(IDLE_WINDOW_STATS_ZEROS, 0)
    return prev._replace(window_start_ms=window_start_ms, window_end_ms=window_end_ms,
                         draining_hashes_max=prev.draining_hashes_count, **zeros)


WindowRow = ConsumerLoadRow | WindowStatsRow


def fill_idle_rows(rows: Sequence[WindowRow], window_ms: int) -> list[WindowRow]:
    """The dense windows back from one dispatcher's sparse ``consumer_load`` or
    ``window_stats`` rows (emulated ms, any order): between two consecutive rows of the same
    series (subscription, and consumer for ``consumer_load``), every missing window of
    ``window_ms`` is :func:`idle_consumer_load` / :func:`idle_window_stats` of the earlier row.
    Returns the rows sorted by window start, then subscription and consumer (the dispatcher's
    emission order)."""
    series: dict[tuple[str, ...], list[WindowRow]] = {}
    for r in rows:
        key = ((r.subscription, r.consumer_name) if isinstance(r, ConsumerLoadRow)
               else (r.subscription,))
        series.setdefault(key, []).append(r)
    out: list[WindowRow] = []
    for group in series.values():
        group.sort(key=lambda r: r.window_start_ms)
        for prev, nxt in zip(group, [*group[1:], None], strict=True):
            out.append(prev)
            if nxt is None:
                continue
            for ws in range(prev.window_start_ms + window_ms, nxt.window_start_ms, window_ms):
                out.append(idle_consumer_load(prev, ws, ws + window_ms)
                           if isinstance(prev, ConsumerLoadRow)
                           else idle_window_stats(prev, ws, ws + window_ms))
    return sorted(out, key=lambda r: (r.window_start_ms, r.subscription,
                                      getattr(r, "consumer_name", "")))


class SegmentDrainRow(NamedTuple):
    """A sealed segment drained for this subscription: its last entry acked (or it was sealed
    with nothing outstanding). ``drain_ms = drained_at_ms - sealed_at_ms`` (PIP-486 use case 1).
    ``sealed_at_ms`` is the time of the layout change that sealed it."""

    subscription: str
    segment_id: int
    sealed_at_ms: int
    drained_at_ms: int
    drain_ms: int


DispatchBlock = dict[str, npt.NDArray[Any]]
"""``dispatch`` rows as columns (one array per :class:`DispatchRow` field, same length): what
the instant-consumer fast path emits instead of one tuple per entry."""

OUTPUT_TABLES = ("dispatch", "handoffs", "consumer_load", "window_stats", "segment_drains")
"""The outputs of :class:`DispatchOutputs`, in this order."""


@dataclass(eq=False)
class DispatchOutputs:
    """Rows produced since the last :meth:`SubscriptionDispatcher.take_outputs`.

    ``dispatch`` rows are kept in parts, in emission order (``dispatch_parts``: lists of
    :class:`DispatchRow` from the event loop, :data:`DispatchBlock` columns from the fast
    path); :attr:`dispatch` gives them as rows, :meth:`column_parts` as columns. Two outputs
    are equal when every table has the same rows in the same order."""

    handoffs: list[HandoffRow] = field(default_factory=list)
    consumer_load: list[ConsumerLoadRow] = field(default_factory=list)
    window_stats: list[WindowStatsRow] = field(default_factory=list)
    segment_drains: list[SegmentDrainRow] = field(default_factory=list)
    dispatch_parts: list[list[DispatchRow] | DispatchBlock] = field(default_factory=list)

    @property
    def dispatch(self) -> list[DispatchRow]:
        """Every ``dispatch`` row, in emission order (a new list)."""
        rows: list[DispatchRow] = []
        for part in self.dispatch_parts:
            if isinstance(part, list):
                rows.extend(part)
            else:
                rows.extend(map(DispatchRow._make, zip(
                    *(part[name].tolist() for name in DispatchRow._fields), strict=True)))
        return rows

    def is_empty(self) -> bool:
        """No row in any table."""
        return not (self.dispatch_parts or self.handoffs or self.consumer_load
                    or self.window_stats or self.segment_drains)

    def add_dispatch(self, row: DispatchRow) -> None:
        """Append one ``dispatch`` row."""
        if not self.dispatch_parts or not isinstance(self.dispatch_parts[-1], list):
            self.dispatch_parts.append([])
        last = self.dispatch_parts[-1]
        assert isinstance(last, list)
        last.append(row)

    def extend(self, other: DispatchOutputs) -> None:
        """Append ``other``'s rows of every table after this one's."""
        for table in OUTPUT_TABLES[1:]:
            getattr(self, table).extend(getattr(other, table))
        self.dispatch_parts.extend(other.dispatch_parts)

    def columns(self, table: str) -> dict[str, list[Any]]:
        """Column lists of one output (:data:`OUTPUT_TABLES`); every column is present even
        with 0 rows."""
        row_type = ROW_TYPES[table]
        rows: list[tuple[Any, ...]] = getattr(self, table)
        if not rows:
            return {name: [] for name in row_type._fields}
        return {name: list(col) for name, col in zip(row_type._fields, zip(*rows, strict=True),
                                                     strict=True)}

    def column_parts(self, table: str) -> list[dict[str, Sequence[Any] | npt.NDArray[Any]]]:
        """One output as a list of column dicts (lists or arrays), to be concatenated in order;
        at least one (possibly with 0 rows) so every column is present. ``dispatch`` keeps the
        fast path's blocks as arrays (no tuple per entry)."""
        if table != "dispatch":
            return [dict(self.columns(table))]  # typed as the dispatch parts
        parts: list[dict[str, Sequence[Any] | npt.NDArray[Any]]] = []
        for part in self.dispatch_parts:
            if isinstance(part, list):
                parts.append({name: [r[i] for r in part]
                              for i, name in enumerate(DispatchRow._fields)})
            else:
                parts.append(dict(part))
        return parts or [{name: [] for name in DispatchRow._fields}]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DispatchOutputs):
            return NotImplemented
        return self.dispatch == other.dispatch and all(
            getattr(self, t) == getattr(other, t) for t in OUTPUT_TABLES[1:])


ROW_TYPES: dict[str, Any] = {
    "dispatch": DispatchRow, "handoffs": HandoffRow, "consumer_load": ConsumerLoadRow,
    "window_stats": WindowStatsRow, "segment_drains": SegmentDrainRow,
}
"""The row type (NamedTuple) of each output (:data:`OUTPUT_TABLES`)."""


@dataclass
class DispatchStats:
    """Cumulative counters of one subscription (names after PIP-379 / PIP-486)."""

    entries_received: int = 0
    messages_received: int = 0
    deliveries: int = 0
    """Dispatches, redeliveries included."""
    entries_acked: int = 0
    messages_acked: int = 0
    redeliveries: int = 0
    """Entries put back because their consumer left before acking."""
    reassignments: int = 0
    """Bucket → consumer moves between two consumers."""
    handoffs_withheld: int = 0
    """Moves whose bucket was withheld from the new owner."""
    draining_hashes_cleared_total: int = 0
    draining_hashes_max: int = 0
    """Most buckets withheld at the same time."""
    segments_drained: int = 0
    rebalances: int = 0
    """Coordinator session changes (joins and leaves)."""


class _Entry:
    __slots__ = (
        "ack_time",
        "bucket",
        "consumer",
        "deliveries",
        "dispatch_time",
        "entry_id",
        "n",
        "nbytes",
        "producer",
        "publish",
        "segment_id",
        "seq",
    )

    def __init__(self, seq: int, publish: int, segment_id: int, bucket: int, n: int, nbytes: int,
                 producer: str, entry_id: int) -> None:
        self.seq = seq
        self.publish = publish
        self.segment_id = segment_id
        self.bucket = bucket
        self.n = n
        self.nbytes = nbytes
        self.producer = producer
        self.entry_id = entry_id
        self.consumer: str | None = None
        self.dispatch_time: int | None = None
        self.ack_time: int | None = None
        self.deliveries = 0


_OpenHandoff = tuple[str, str, int, int, int]
"""(from_consumer, to_consumer, withheld_from_ms, pending_messages, redelivered_entries)."""


class _Bucket:
    __slots__ = (
        "holder",
        "open_handoff",
        "pending",
        "pending_msgs",
        "unacked_entries",
        "unacked_msgs",
    )

    def __init__(self) -> None:
        self.pending: deque[_Entry] = deque()
        self.pending_msgs = 0
        self.holder: str | None = None
        self.unacked_entries = 0
        self.unacked_msgs = 0
        self.open_handoff: _OpenHandoff | None = None

    def is_empty(self) -> bool:
        return not self.pending and self.unacked_entries == 0 and self.open_handoff is None


class _Consumer:
    __slots__ = (
        "cap_den",
        "cap_num",
        "connected",
        "free_at",
        "gen",
        "name",
        "period_msgs",
        "period_start",
        "ready",
        "spec",
        "unacked",
        "win_busy",
        "win_bytes",
        "win_msgs",
    )

    def __init__(self, spec: ConsumerSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.connected = False
        self.free_at = spec.join_ms
        self.period_start: int | None = None
        self.period_msgs = 0
        self.gen = 0
        self.unacked: dict[int, _Entry] = {}
        self.ready: list[tuple[int, BucketKey]] = []
        self.win_msgs: dict[int, int] = {}
        self.win_bytes: dict[int, int] = {}
        self.win_busy: dict[int, int] = {}
        if spec.capacity_msgs_per_s is None:
            self.cap_num: int | None = None
            self.cap_den = 1
        else:
            cap = Fraction(spec.capacity_msgs_per_s)
            self.cap_num = cap.numerator
            self.cap_den = cap.denominator

    def state(self) -> tuple[Any, ...]:
        """Everything but the spec and name, as a tuple (:data:`_CONSUMER_STATE` order)."""
        return tuple(getattr(self, a) for a in _CONSUMER_STATE)

    @classmethod
    def restored(cls, spec: ConsumerSpec, state: tuple[Any, ...]) -> _Consumer:
        """The consumer of ``spec`` with :meth:`state` ``state``."""
        c = cls.__new__(cls)
        c.spec = spec
        c.name = spec.name
        for a, v in zip(_CONSUMER_STATE, state, strict=True):
            setattr(c, a, v)
        return c


_CONSUMER_STATE = tuple(a for a in _Consumer.__slots__ if a not in ("spec", "name"))
"""The slots of a :class:`_Consumer`'s state tuple (:meth:`_Consumer.state`)."""

_STATS_FIELDS = tuple(f.name for f in fields(DispatchStats))
"""The :class:`DispatchStats` counters, in a dispatcher state's order."""


def _spec_state(spec: ConsumerSpec) -> tuple[Any, ...]:
    """A consumer spec as plain values (``leave_how`` by its value)."""
    return (spec.name, spec.join_ms, spec.leave_ms, spec.capacity_msgs_per_s,
            spec.ack_delay_ms, spec.leave_how.value)


class _Columns(NamedTuple):
    """One :meth:`SubscriptionDispatcher.on_entries` call's entries as columns (int64 arrays,
    ``producers`` an object array of str)."""

    times: npt.NDArray[np.int64]
    sids: npt.NDArray[np.int64]
    buckets: npt.NDArray[np.int64]
    nmsg: npt.NDArray[np.int64]
    nbytes: npt.NDArray[np.int64]
    producers: npt.NDArray[Any]
    eids: npt.NDArray[np.int64]


_KEY_RADIX = 1 << 32
"""``segment_id * _KEY_RADIX + bucket_index``: a bucket key as one int64 (buckets < 2**32)."""

_NO_OWNERS = np.zeros(0, dtype=np.int64)
"""No entry's owner (:meth:`SubscriptionDispatcher._quiet_span` of no span)."""

_Event = tuple[int, int, int, _Entry | str, int]
"""Heap event: (time, phase, tie-break counter, entry (ack) | consumer name (free), number)."""


_OWNERS_MEMO: dict[tuple[Any, ...], dict[BucketKey, str]] = {}
""":func:`_assigned_owners` by what they depend on (cleared when it outgrows
:data:`_OWNERS_MEMO_SIZE`)."""

_OWNERS_MEMO_SIZE = 4096


def _assigned_owners(coord: SubscriptionCoordinator, layout: SegmentLayout,
                     drained: set[int], connected: set[str]) -> dict[BucketKey, str]:
    """``(segment_id, bucket_index) → consumer`` of the coordinator's assignment
    (:meth:`~pipelines.core.assignment.SubscriptionCoordinator.compute_assignment`, then
    :func:`~pipelines.core.assignment.bucket_owners` over the ``connected`` consumers).

    A pure function of the subscription type, the registered names, the drained segments, the
    connected names and each segment's id, hash range, state, parents and bucket splits
    (what those two read), so it is memoized by them: the many quiet topics of a run share a
    few layout shapes, and each topic's dispatcher would compute the same assignment again.
    The dict returned is shared: read only (a dispatcher replaces its owners, never changes
    them)."""
    key = (coord.sub_type, tuple(coord.consumer_names), frozenset(drained),
           frozenset(connected),
           tuple((sid, seg.range_start, seg.range_end, seg.is_active, seg.parent_ids,
                  seg.bucket_splits) for sid, seg in layout.segments.items()))
    owners = _OWNERS_MEMO.get(key)
    if owners is None:
        if len(_OWNERS_MEMO) >= _OWNERS_MEMO_SIZE:
            _OWNERS_MEMO.clear()
        asg = coord.compute_assignment(layout, drained)
        owners = _OWNERS_MEMO[key] = bucket_owners(asg.by_consumer, layout, connected)
    return owners


_OWNER_INDEX: dict[int, tuple[dict[BucketKey, str], list[str], npt.NDArray[np.int64],
                              npt.NDArray[np.int64]]] = {}
""":func:`_owner_index` by the owners dict's id (the dict kept in the value: its id is not
reused while it is there); cleared when it outgrows :data:`_OWNERS_MEMO_SIZE`."""


def _owner_index(owners: dict[BucketKey, str],
                 ) -> tuple[list[str], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Bucket owners as arrays: the owners' names (sorted), the owned keys (``segment_id *
    _KEY_RADIX + bucket_index``, sorted) and each key's owner (a position in the names).
    Memoized by the dict's identity (owners dicts are replaced, never changed, and quiet
    topics share :func:`_assigned_owners`'); read only."""
    hit = _OWNER_INDEX.get(id(owners))
    if hit is not None and hit[0] is owners:
        return hit[1], hit[2], hit[3]
    names = sorted(set(owners.values()))
    rank = {name: i for i, name in enumerate(names)}
    keys = np.fromiter((s * _KEY_RADIX + b for s, b in owners), dtype=np.int64,
                       count=len(owners))
    owner_of = np.fromiter((rank[c] for c in owners.values()), dtype=np.int64,
                           count=len(owners))
    by_key = np.argsort(keys, kind="stable")
    keys, owner_of = keys[by_key], owner_of[by_key]
    keys.flags.writeable = owner_of.flags.writeable = False
    if len(_OWNER_INDEX) >= _OWNERS_MEMO_SIZE:
        _OWNER_INDEX.clear()
    _OWNER_INDEX[id(owners)] = (owners, names, keys, owner_of)
    return names, keys, owner_of


class SubscriptionDispatcher:
    """Dispatch of one topic's entries to the consumers of one subscription (module docstring).

    ``consumers``: every consumer with its join/leave times (unique names). ``window_ms``: length
    of the ``consumer_load`` / ``window_stats`` windows, aligned to multiples of ``window_ms``.
    ``grace_ms``: how long a crashed consumer's session stays registered (§6.1).
    """

    fast_forward: bool = True
    """Take spans of entries that instant consumers (no capacity limit, no ack delay) get at
    their publish time in bulk instead of event by event; the outputs and state are the event
    loop's (tested against it). ``False`` (on an instance) runs the event loop alone."""

    dense_windows: bool = False
    """Emit every window's ``consumer_load`` and ``window_stats`` rows, idle or not (the
    tables before issue #30; tests compare them with :func:`fill_idle_rows` of the sparse
    ones). ``False``: only the rows that differ from the previous row carried forward
    (:meth:`take_outputs`), and idle stretches are jumped over, not visited."""

    def __init__(self, subscription: str, sub_type: SubscriptionType | str,
                 consumers: Sequence[ConsumerSpec], window_ms: int = DEFAULT_WINDOW_MS,
                 grace_ms: int = CONSUMER_SESSION_GRACE_MS) -> None:
        if window_ms < 1:
            raise ValueError(f"window_ms must be >= 1, got {window_ms}")
        names = [c.name for c in consumers]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError(f"duplicate consumer name(s): {', '.join(dups)}")
        self.subscription = subscription
        self.sub_type = SubscriptionType.parse(sub_type)
        self.window_ms = window_ms
        self._queue_mode = self.sub_type is SubscriptionType.QUEUE
        self._coord = SubscriptionCoordinator(subscription, self.sub_type)
        self._consumers: dict[str, _Consumer] = {c.name: _Consumer(c) for c in consumers}
        # Config events (time, name, kind): _CFG_LEAVE, _CFG_JOIN, _CFG_EXPIRE.
        self._cfg = sorted([(c.join_ms, c.name, _CFG_JOIN) for c in consumers]
                           + [(c.leave_ms, c.name, _CFG_LEAVE) for c in consumers
                              if c.leave_ms is not None]
                           + [(end, c.name, _CFG_EXPIRE) for c in consumers
                              if c.leave_how is LeaveHow.CRASH
                              and (end := session_end_ms(c.leave_ms, c.leave_how, grace_ms))
                              is not None])
        self._cfg_i = 0
        # Input side.
        self._input_layout: SegmentLayout | None = None
        self._input_sealed_at: dict[int, int] = {}
        self._last_input_time: int | None = None
        self._horizon: int | None = None
        self._finished = False
        self._seq = 0
        self._entries_q: deque[_Entry] = deque()
        self._layouts_q: deque[tuple[int, SegmentLayout]] = deque()
        self._init_simulation()
        # Outputs.
        self._stats = DispatchStats()
        self._out = DispatchOutputs()

    def _init_simulation(self) -> None:
        """The simulation's state and the current window's counters, as before any entry."""
        # Simulation state.
        self._heap: list[_Event] = []
        self._counter = 0
        self._layout: SegmentLayout | None = None
        self._owners: dict[BucketKey, str] = {}
        self._seg_owners: tuple[dict[BucketKey, str], dict[int, set[str]]] | None = None
        self._buckets: dict[BucketKey, _Bucket] = {}
        self._queue_pending: list[tuple[int, _Entry]] = []
        self._idle: list[str] = []
        self._rr_last: str | None = None
        self._wake: set[str] = set()
        self._dirty = False
        self._seg_outstanding: dict[int, int] = {}
        self._sealed_at: dict[int, int] = {}
        self._drained: set[int] = set()
        self._drain_candidates: set[int] = set()
        self._withheld: set[BucketKey] = set()
        self._step_redelivered: dict[BucketKey, int] = {}
        self._pending_entries = 0
        self._pending_msgs = 0
        self._unacked_entries = 0
        self._unacked_msgs = 0
        self._last_step: int | None = None
        self._end_ms: int | None = None
        # Windows.
        self._win_start: int | None = None
        self._w_max = 0
        self._w_cleared = 0
        self._w_reassignments = 0
        self._w_redeliveries = 0
        self._last_load: dict[str, ConsumerLoadRow] = {}
        self._last_stats: WindowStatsRow | None = None

    # ---- state (pickling) ---------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """The state with plain values where objects cost most to pickle (a dispatcher is
        pickled per topic and window): each consumer as its spec's values and a tuple of its
        state, the counters and last window rows as tuples, the subscription type by value,
        the input queues as lists, no outputs as ``None``. :meth:`__setstate__` rebuilds the
        same objects (entries shared between queues, buckets and consumers stay shared: they
        are pickled in the one state)."""
        state = self.__dict__.copy()
        state["_seg_owners"] = None  # a cache
        state["sub_type"] = self.sub_type.value
        state["_consumers"] = [(_spec_state(c.spec), c.state())
                               for c in self._consumers.values()]
        state["_entries_q"] = list(self._entries_q)
        state["_layouts_q"] = list(self._layouts_q)
        state["_stats"] = tuple(getattr(self._stats, f) for f in _STATS_FIELDS)
        state["_out"] = None if self._out.is_empty() else self._out
        state["_last_load"] = [tuple(row) for row in self._last_load.values()]
        state["_last_stats"] = None if self._last_stats is None else tuple(self._last_stats)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """The dispatcher of :meth:`__getstate__`'s ``state``."""
        state = dict(state)
        state["sub_type"] = SubscriptionType(state["sub_type"])
        consumers = {}
        for (name, join, leave, cap, ack, how), values in state["_consumers"]:
            c = _Consumer.restored(ConsumerSpec(name, join, leave, cap, ack, LeaveHow(how)),
                                   values)
            consumers[c.name] = c
        state["_consumers"] = consumers
        state["_entries_q"] = deque(state["_entries_q"])
        state["_layouts_q"] = deque(state["_layouts_q"])
        state["_stats"] = DispatchStats(*state["_stats"])
        state["_out"] = DispatchOutputs() if state["_out"] is None else state["_out"]
        state["_last_load"] = {row[1]: ConsumerLoadRow(*row) for row in state["_last_load"]}
        last = state["_last_stats"]
        state["_last_stats"] = None if last is None else WindowStatsRow(*last)
        self.__dict__.update(state)

    # ---- public API ---------------------------------------------------------------------------
    @property
    def stats(self) -> DispatchStats:
        """Cumulative counters (a copy)."""
        return replace(self._stats, rebalances=self._coord.rebalances)

    @property
    def bucket_owners(self) -> dict[BucketKey, str]:
        """Current ``(segment_id, bucket_index) → consumer`` map (STREAM / CHECKPOINT)."""
        return dict(self._owners)

    @property
    def withheld_buckets(self) -> list[BucketKey]:
        """Buckets currently withheld from their owner (sorted)."""
        return sorted(self._withheld)

    @property
    def backlog_messages(self) -> int:
        """Messages available but not dispatched (as of the last simulated instant)."""
        return self._pending_msgs

    def current_assignment(self) -> CoordinatorAssignment | None:
        """The coordinator's assignment for the layout in force and the drained set (with the
        layout epoch); ``None`` before the first layout. Informational for QUEUE."""
        if self._layout is None:
            return None
        return self._coord.compute_assignment(self._layout, self._drained)

    @property
    def drained_segments(self) -> set[int]:
        """Sealed segments (still in the layout) drained for this subscription."""
        return set(self._drained)

    def on_layout(self, time_ms: int, layout: SegmentLayout) -> None:
        """The layout in force from ``time_ms`` on (applied before entries of ``time_ms``)."""
        if not isinstance(layout, SegmentLayout):
            raise TypeError(f"layout must be a SegmentLayout, got {type(layout).__name__}")
        t = int(time_ms)
        self._check_input_time(t, "layout change")
        for sid in sorted(layout.segments):
            if not layout.segments[sid].is_active and sid not in self._input_sealed_at:
                self._input_sealed_at[sid] = t
        self._input_sealed_at = {sid: v for sid, v in self._input_sealed_at.items()
                                 if sid in layout.segments}
        self._input_layout = layout
        self._layouts_q.append((t, layout))
        self._note_input(t)
        self._run(t, inclusive=False)

    def on_entries(self, publish_time_ms: npt.ArrayLike, segment_id: npt.ArrayLike,
                   entry_hash_min: npt.ArrayLike, num_messages: npt.ArrayLike,
                   payload_bytes: npt.ArrayLike, producer_name: Sequence[str] | npt.ArrayLike,
                   entry_id: npt.ArrayLike, complete: bool = False) -> None:
        """Entries in publish-time order (equal-length columns; one element per entry).

        ``segment_id`` must be a segment of the latest layout given; a segment sealed by a
        layout change at ``T`` accepts entries published up to ``T``. ``ValueError`` on
        out-of-order or late times, unknown segments and out-of-range values.
        ``complete``: no later input is at the last entries' instant, so the call ends with
        :meth:`advance_to` of it (later inputs must be later) and the fast path may take that
        instant in bulk too (else it waits for the next input).
        """
        times = np.asarray(publish_time_ms, dtype=np.int64).ravel()
        sids = np.asarray(segment_id, dtype=np.int64).ravel()
        hmin = np.asarray(entry_hash_min, dtype=np.int64).ravel()
        nmsg = np.asarray(num_messages, dtype=np.int64).ravel()
        nbytes = np.asarray(payload_bytes, dtype=np.int64).ravel()
        producers: npt.NDArray[Any] = np.asarray(producer_name, dtype=object).ravel()
        if not {*map(type, producers.tolist())} <= {str}:  # names as str (not NumPy's)
            producers = np.array([str(p) for p in producers.tolist()], dtype=object)
        eids = np.asarray(entry_id, dtype=np.int64).ravel()
        n = len(times)
        if any(len(a) != n for a in (sids, hmin, nmsg, nbytes, producers, eids)):
            raise ValueError("on_entries: all columns must have the same length")
        if n == 0:
            return
        # (reductions, not element-wise temporaries: a quiet topic's call has few entries)
        if n > 1 and bool((times[1:] < times[:-1]).any()):
            raise ValueError("on_entries: entries must be in non-decreasing publish_time order")
        self._check_input_time(int(times[0]), "entry")
        if int(hmin.min()) < 0 or int(hmin.max()) > MAX_HASH:
            raise ValueError(f"on_entries: entry_hash_min must be in [0, {MAX_HASH}]")
        if int(nmsg.min()) < 0 or int(nbytes.min()) < 0:
            raise ValueError("on_entries: num_messages and payload_bytes must be >= 0")
        layout = self._input_layout
        if layout is None:
            raise ValueError("on_entries: no layout yet; call on_layout first")
        buckets = self._entry_buckets(layout, times, sids, hmin)
        cols = _Columns(times, sids, buckets, nmsg, nbytes, producers, eids)
        self._note_input(int(times[0]))
        start = 0
        if self.fast_forward and self._instant_consumers():
            start = self._fast_forward(cols, complete)
        self._queue(cols, start, n)
        self._last_input_time = int(times[-1])
        if complete:
            self.advance_to(self._last_input_time)
        else:
            self._run(self._last_input_time, inclusive=False)

    def _entry_buckets(self, layout: SegmentLayout, times: npt.NDArray[np.int64],
                       sids: npt.NDArray[np.int64],
                       hmin: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Each entry's bucket index in its segment of ``layout`` (by ``entry_hash_min``);
        ``ValueError`` for a segment not in the layout or an entry after its segment's seal."""
        first, last = int(sids.min()), int(sids.max())
        if first == last:  # one segment (a quiet topic's usual call): no masks
            self._check_segment(layout, first, int(times[-1]))
            return bucket_of_array(layout.segments[first].bucket_splits,
                                   hmin).astype(np.int64)
        buckets = np.zeros(len(times), dtype=np.int64)
        for sid in np.unique(sids).tolist():
            mask = sids == sid
            self._check_segment(layout, sid, int(times[mask].max()))
            buckets[mask] = bucket_of_array(layout.segments[sid].bucket_splits, hmin[mask])
        return buckets

    def _check_segment(self, layout: SegmentLayout, sid: int, latest: int) -> None:
        """``ValueError`` unless segment ``sid`` is in ``layout`` and its entries (the latest
        published at ``latest``) are not after its seal."""
        if sid not in layout.segments:
            raise ValueError(f"on_entries: segment {sid} is not in the layout in force")
        sealed_at = self._input_sealed_at.get(sid)
        if sealed_at is not None and latest > sealed_at:
            raise ValueError(f"on_entries: entry published on segment {sid} after it was "
                             f"sealed at {sealed_at}")

    def _fast_forward(self, cols: _Columns, complete: bool) -> int:
        """Take the complete instants of ``cols`` (those before its last one: a later input
        arrived; all of them when ``complete``) in spans without events where possible, else
        one instant at a time; returns the position of the first entry left (those of the
        last instant, or ``len(times)``)."""
        times = cols.times
        n, start = len(times), 0
        last = int(times[-1]) + 1 if complete else int(times[-1])
        while start < n and times[start] < last:
            self._run(int(times[start]), inclusive=False)
            stop, owner, names = self._quiet_span(cols, start, last)
            if stop == start:
                stop = int(np.searchsorted(times, times[start], side="right"))
                self._queue(cols, start, stop)
            else:
                self._dispatch_span(cols, start, stop, owner, names)
            start = stop
        return start

    def advance_to(self, time_ms: int) -> None:
        """Simulate everything up to and including ``time_ms``; later inputs must be later."""
        if self._finished:
            raise ValueError("advance_to after finish")
        h = int(time_ms)
        if self._horizon is not None and h < self._horizon:
            raise ValueError(f"advance_to({h}) goes back before the horizon {self._horizon}")
        self._run(h, inclusive=True)
        self._horizon = h
        # The window holding h stays open even when it ends at h + 1: if nothing follows, it
        # is the last window, which finish() emits whole (sparse windows always keep it).
        self._close_windows_upto(h)

    def finish(self, end_ms: int | None = None) -> None:
        """End of input at ``end_ms`` (default: the last input time / horizon).

        Simulates every consumer join/leave up to ``end_ms`` and, past it, keeps going only while
        entries are outstanding (so the backlog drains; later joins/leaves still apply), closes
        the windows (the last one ends at ``max(end_ms, last simulated instant + 1)``), and
        reports the backlog (rows with null consumer/times) and handoffs still withheld.
        """
        if self._finished:
            raise ValueError("finish called twice")
        ends = [x for x in (end_ms, self._horizon, self._last_input_time) if x is not None]
        self._end_ms = max(ends) if ends else None
        self._run(None, inclusive=True, finishing=True)
        bounds = [x + 1 for x in (self._horizon, self._last_input_time, self._last_step)
                  if x is not None]
        if end_ms is not None:
            bounds.append(int(end_ms))
        if self._win_start is not None and bounds and self._win_start < max(bounds):
            bound = max(bounds)
            last = (bound - 1) - (bound - 1) % self.window_ms
            self._close_windows_upto(last)
            self._emit_window(last, min(last + self.window_ms, bound), final=True)
            self._win_start = last + self.window_ms
        leftover: list[_Entry] = [e for _, e in self._queue_pending]
        for b in self._buckets.values():
            leftover.extend(b.pending)
        for e in sorted(leftover, key=lambda x: x.seq):
            self._out.add_dispatch(self._row(e))
        for key in sorted(self._buckets):
            b = self._buckets[key]
            if b.open_handoff is not None:
                self._emit_handoff(key, b.open_handoff, None)
                b.open_handoff = None
        self._finished = True

    def take_outputs(self) -> DispatchOutputs:
        """Rows produced so far; the internal buffers are cleared.

        Sparse windows (unless :attr:`dense_windows`): a window's ``consumer_load`` row of a
        consumer is emitted when it differs from :func:`idle_consumer_load` of the consumer's
        previous row (it received or was busy, its backlog changed, it was not connected the
        whole window), and always for its first window, the window it leaves in and the last
        window (at :meth:`finish`); a ``window_stats`` row when it differs from
        :func:`idle_window_stats` of the previous one, and always for the first and last
        windows. So every series runs from its first to its last row, and a window missing in
        between is the previous row carried forward (:func:`fill_idle_rows`)."""
        out, self._out = self._out, DispatchOutputs()
        return out

    # ---- instant-consumer fast path ---------------------------------------------------------
    def _instant_consumers(self) -> bool:
        """Every consumer processes in no time and acks at once (unlimited capacity, no ack
        delay: the defaults), so an entry with a connected owner is dispatched and acked at its
        publish time and leaves no state behind."""
        return not self._queue_mode and all(
            c.cap_num is None and c.spec.ack_delay_ms == 0 for c in self._consumers.values())

    def _queue(self, cols: _Columns, start: int, stop: int) -> None:
        """Entries ``[start, stop)`` of ``cols`` into the event loop's input queue."""
        seq = self._seq
        for t, sid, b, nm, nb, prod, eid in zip(
                cols.times[start:stop].tolist(), cols.sids[start:stop].tolist(),
                cols.buckets[start:stop].tolist(), cols.nmsg[start:stop].tolist(),
                cols.nbytes[start:stop].tolist(), cols.producers[start:stop],
                cols.eids[start:stop].tolist(), strict=True):
            self._entries_q.append(_Entry(seq, t, sid, b, nm, nb, prod, eid))
            seq += 1
        self._seq = seq

    def _quiet_span(self, cols: _Columns, start: int,
                    bound: int) -> tuple[int, npt.NDArray[np.int64], list[str]]:
        """End (exclusive index) of the entries from ``start`` that the event loop would
        dispatch and ack at their publish time with nothing else happening: ``start`` when the
        dispatcher is not idle at ``cols.times[start]`` (anything queued, pending, unacked,
        withheld or due), and the span stops before the next consumer join/leave, layout change,
        entry without a connected owner and ``bound`` (the first instant not yet complete).
        With it, each entry's owner up to that end, as a position in the owners' names
        (sorted), and those names."""
        t = int(cols.times[start])
        none: tuple[int, npt.NDArray[np.int64], list[str]] = (start, _NO_OWNERS, [])
        if (self._heap or self._entries_q or self._pending_entries or self._unacked_entries
                or self._buckets or self._withheld or self._drain_candidates or self._dirty
                or self._wake or self._layout is None or not self._owners):
            return none
        if self._cfg_i < len(self._cfg):
            bound = min(bound, self._cfg[self._cfg_i][0])
        if self._layouts_q:
            bound = min(bound, self._layouts_q[0][0])
        if bound <= t:
            return none
        stop = int(np.searchsorted(cols.times, bound, side="left"))
        keys = cols.sids[start:stop] * _KEY_RADIX + cols.buckets[start:stop]
        # membership by binary search in the sorted owned keys (np.isin or np.unique cost more
        # on the few entries of a quiet topic)
        names, owned_keys, owner_of = _owner_index(self._owners)
        pos = np.minimum(np.searchsorted(owned_keys, keys), len(owned_keys) - 1)
        owned = owned_keys[pos] == keys
        if not owned.all():  # stop before the instant of the first entry without an owner
            first = int(cols.times[start + int(np.argmin(owned))])
            stop = max(int(np.searchsorted(cols.times, first, side="left")), start)
        return stop, owner_of[pos[:stop - start]], names

    def _dispatch_span(self, cols: _Columns, start: int, stop: int,
                       owner: npt.NDArray[np.int64], names: list[str]) -> None:
        """Entries ``[start, stop)`` (a :meth:`_quiet_span`; ``owner``: each one's owner, a
        position in ``names``) dispatched and acked at their publish time by their bucket's
        owner, with the rows, counters and windows the event loop gives: within an instant,
        rows by consumer name then publish order."""
        times = cols.times[start:stop]
        sids, buckets = cols.sids[start:stop], cols.buckets[start:stop]
        nmsg, nbytes = cols.nmsg[start:stop], cols.nbytes[start:stop]
        m = stop - start
        # rows by instant, then consumer name, then publish order: with no two entries at one
        # instant (usual in a quiet topic), the span's own order (views, no copies)
        order: slice | npt.NDArray[np.intp] = (
            slice(None) if m == 1 or bool((times[1:] != times[:-1]).all())
            else lexsort((owner, times)))
        # The event loop closes a window at the first step past its end, after the deliveries
        # of the window: every window's per-consumer totals come from one bincount over
        # (window, owner) pairs, booked window by window after closing the windows before it.
        # Closing a window reads only its own bookings and state the span does not change, and
        # each window with entries is booked, so the windows closed and their rows are those
        # of a close at each window's first instant.
        w, k = self.window_ms, len(names)
        starts = times - times % w
        if starts[0] == starts[-1]:  # one window (a quiet topic's usual span)
            slot, window_starts = owner, [int(starts[0])]
        else:
            change = starts[1:] != starts[:-1]
            slot = np.concatenate(([0], np.cumsum(change))) * k + owner
            window_starts = starts[np.concatenate(([True], change))].tolist()
        msgs = np.bincount(slot, weights=nmsg)
        size = np.bincount(slot, weights=nbytes)
        booked = None
        for j in np.flatnonzero(np.bincount(slot)).tolist():  # windows in time order
            ws = window_starts[j // k]
            if ws != booked:  # the windows before it first, as the event loop closes them:
                # a window closed reads the earliest window booked (_next_window), which must
                # not scan every later window of a long span (quadratic in its windows)
                self._close_windows_upto(ws)
                booked = ws
            c = self._consumers[names[j % k]]
            c.win_msgs[ws] = c.win_msgs.get(ws, 0) + int(msgs[j])
            c.win_bytes[ws] = c.win_bytes.get(ws, 0) + int(size[j])
        self._close_windows_upto(int(times[-1]))
        # each owner's last entry (times do not decrease: the last one seen is the latest)
        for i, last in dict(zip(owner.tolist(), times.tolist(), strict=True)).items():
            c = self._consumers[names[i]]
            c.free_at = last
            c.ready = []
        total = int(nmsg.sum())
        st = self._stats
        st.entries_received += m
        st.entries_acked += m
        st.deliveries += m
        st.messages_received += total
        st.messages_acked += total
        self._counter += m  # one ack event each in the event loop
        self._seq += m
        self._last_step = int(times[-1])
        t_sorted = times[order]
        subscription = np.empty(m, dtype=object)
        subscription.fill(self.subscription)  # one object m times (np.full makes m strings)
        self._out.dispatch_parts.append({
            "subscription": subscription,
            "segment_id": sids[order], "bucket_index": buckets[order],
            "producer_name": cols.producers[start:stop][order],
            "entry_id": cols.eids[start:stop][order], "publish_time_ms": t_sorted,
            "num_messages": nmsg[order], "payload_bytes": nbytes[order],
            "consumer_name": np.asarray(names, dtype=object)[owner[order]],
            "dispatch_time_ms": t_sorted, "ack_time_ms": t_sorted,
            "redeliveries": np.zeros(m, dtype=np.int64)})

    # ---- input bookkeeping --------------------------------------------------------------------
    def _check_input_time(self, t: int, what: str) -> None:
        if self._finished:
            raise ValueError(f"{what} after finish")
        if self._horizon is not None and t <= self._horizon:
            raise ValueError(f"{what} at {t} is not after the horizon {self._horizon} "
                             f"(advance_to)")
        last = self._last_input_time
        if last is not None and t < last:
            raise ValueError(f"{what} at {t} is before the previous input at {last}: inputs "
                             f"must come in time order")

    def _note_input(self, t: int) -> None:
        if self._win_start is None:
            self._win_start = t - t % self.window_ms
        if self._last_input_time is None or t > self._last_input_time:
            self._last_input_time = t

    # ---- event loop ---------------------------------------------------------------------------
    def _has_work(self) -> bool:
        return bool(self._pending_entries or self._unacked_entries or self._entries_q
                    or self._layouts_q)

    def _next_time(self, finishing: bool) -> int | None:
        best: int | None = None
        if self._heap:
            best = self._heap[0][0]
        for t in (self._entries_q[0].publish if self._entries_q else None,
                  self._layouts_q[0][0] if self._layouts_q else None,
                  self._cfg[self._cfg_i][0] if self._cfg_i < len(self._cfg) else None):
            if t is not None and (best is None or t < best):
                best = t
        if finishing and best is not None and not self._has_work():
            # Past the end of input only outstanding work keeps the clock running.
            end = self._end_ms
            if end is None or best > end:
                return None
        return best

    def _run(self, limit: int | None, inclusive: bool, finishing: bool = False) -> None:
        while True:
            t = self._next_time(finishing)
            if t is None:
                return
            if limit is not None and (t > limit or (t == limit and not inclusive)):
                return
            self._step(t)

    def _push(self, time: int, phase: int, obj: _Entry | str, num: int) -> None:
        self._counter += 1
        heapq.heappush(self._heap, (time, phase, self._counter, obj, num))

    def _step(self, t: int) -> None:
        self._close_windows_upto(t)
        self._last_step = t
        heap = self._heap
        first = True
        while True:
            self._pop_events(t)
            if first:
                first = False
                self._take_inputs(t)
            if self._drain_candidates:
                self._check_drains(t)
            if self._dirty:
                self._reassign(t)
            if self._queue_mode:
                self._dispatch_queue(t)
            else:
                self._dispatch_buckets(t)
            if not (heap and heap[0][0] == t):
                return

    def _pop_events(self, t: int) -> None:
        """Handle the heap's events at ``t`` (acks and consumers freed), in heap order."""
        heap = self._heap
        while heap and heap[0][0] == t:
            _, _phase, _, obj, num = heapq.heappop(heap)
            if isinstance(obj, _Entry):
                self._ack(obj, num, t)
            else:
                self._on_free(obj, num, t)

    def _take_inputs(self, t: int) -> None:
        """Apply the inputs at ``t``: consumer joins and leaves, then layouts, then entries."""
        cfg = self._cfg
        while self._cfg_i < len(cfg) and cfg[self._cfg_i][0] == t:
            _, name, kind = cfg[self._cfg_i]
            self._cfg_i += 1
            if kind == _CFG_JOIN:
                self._join(name, t)
            elif kind == _CFG_LEAVE:
                self._leave(name, t)
            else:  # a crashed consumer's session expires (§6.1)
                self._coord.unregister(name)
                self._dirty = True
        while self._layouts_q and self._layouts_q[0][0] == t:
            self._apply_layout(self._layouts_q.popleft()[1], t)
        while self._entries_q and self._entries_q[0].publish == t:
            self._ingest(self._entries_q.popleft())

    # ---- event handlers -----------------------------------------------------------------------
    def _on_free(self, name: str, gen: int, t: int) -> None:
        c = self._consumers[name]
        if not c.connected or c.gen != gen:
            return
        if self._queue_mode:
            self._idle_add(name)
        else:
            self._wake.add(name)

    def _idle_add(self, name: str) -> None:
        i = bisect_left(self._idle, name)
        if i == len(self._idle) or self._idle[i] != name:
            self._idle.insert(i, name)

    def _join(self, name: str, t: int) -> None:
        c = self._consumers[name]
        c.connected = True
        c.free_at = t
        c.period_start = None
        c.gen += 1
        c.ready = []
        self._coord.register(name)
        self._dirty = True
        if self._queue_mode:
            self._idle_add(name)
        else:
            self._wake.add(name)

    def _leave(self, name: str, t: int) -> None:
        c = self._consumers[name]
        c.connected = False
        c.gen += 1
        c.ready = []
        if c.free_at > t:
            self._add_busy(c, t, c.free_at, -1)
            c.free_at = t
        c.period_start = None
        self._wake.discard(name)
        if self._queue_mode:
            i = bisect_left(self._idle, name)
            if i < len(self._idle) and self._idle[i] == name:
                self._idle.pop(i)
        if c.unacked:
            self._redeliver(c, t)
        if c.spec.leave_how is LeaveHow.CLOSE:  # a clean close unregisters at once (§6.1)
            self._coord.unregister(name)
        self._dirty = True

    def _redeliver(self, c: _Consumer, t: int) -> None:
        """A disconnecting consumer's unacked entries go back to the front of their buckets."""
        grouped: dict[BucketKey, list[_Entry]] = {}
        for seq in sorted(c.unacked):
            e = c.unacked[seq]
            e.consumer = None
            e.dispatch_time = None
            e.ack_time = None
            self._stats.redeliveries += 1
            self._w_redeliveries += 1
            self._unacked_entries -= 1
            self._unacked_msgs -= e.n
            self._pending_entries += 1
            self._pending_msgs += e.n
            if self._queue_mode:
                heapq.heappush(self._queue_pending, (e.seq, e))
            else:
                grouped.setdefault((e.segment_id, e.bucket), []).append(e)
        c.unacked = {}
        for key in sorted(grouped):
            es = grouped[key]
            b = self._buckets[key]
            msgs = sum(e.n for e in es)
            b.unacked_entries -= len(es)
            b.unacked_msgs -= msgs
            b.pending_msgs += msgs
            if not b.pending or es[-1].seq < b.pending[0].seq:
                b.pending.extendleft(reversed(es))
            else:  # pragma: no cover - a bucket is held by one consumer at a time
                b.pending = deque(sorted([*b.pending, *es], key=lambda x: x.seq))
            self._step_redelivered[key] = self._step_redelivered.get(key, 0) + len(es)
            if b.unacked_entries == 0:
                self._release(key, b, t)

    def _apply_layout(self, layout: SegmentLayout, t: int) -> None:
        self._layout = layout
        present = layout.segments
        for sid in sorted(present):
            if not present[sid].is_active and sid not in self._sealed_at:
                self._sealed_at[sid] = t
                self._drain_candidates.add(sid)
        self._sealed_at = {sid: v for sid, v in self._sealed_at.items() if sid in present}
        self._drained = {sid for sid in self._drained if sid in present}
        self._dirty = True

    def _ingest(self, e: _Entry) -> None:
        st = self._stats
        st.entries_received += 1
        st.messages_received += e.n
        self._seg_outstanding[e.segment_id] = self._seg_outstanding.get(e.segment_id, 0) + 1
        self._pending_entries += 1
        self._pending_msgs += e.n
        if self._queue_mode:
            heapq.heappush(self._queue_pending, (e.seq, e))
            return
        key = (e.segment_id, e.bucket)
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = _Bucket()
        b.pending.append(e)
        b.pending_msgs += e.n
        if len(b.pending) == 1:
            owner = self._owners.get(key)
            if owner is not None and (b.holder is None or b.holder == owner):
                heapq.heappush(self._consumers[owner].ready, (e.seq, key))
                self._wake.add(owner)

    def _ack(self, e: _Entry, delivery: int, t: int) -> None:
        if e.deliveries != delivery or e.consumer is None:
            return  # stale: redelivered after its consumer left
        c = self._consumers[e.consumer]
        if c.unacked.pop(e.seq, None) is None:
            return
        st = self._stats
        st.entries_acked += 1
        st.messages_acked += e.n
        self._unacked_entries -= 1
        self._unacked_msgs -= e.n
        left = self._seg_outstanding[e.segment_id] - 1
        if left:
            self._seg_outstanding[e.segment_id] = left
        else:
            del self._seg_outstanding[e.segment_id]
            self._drain_candidates.add(e.segment_id)
        if self._queue_mode:
            return
        key = (e.segment_id, e.bucket)
        b = self._buckets[key]
        b.unacked_entries -= 1
        b.unacked_msgs -= e.n
        if b.unacked_entries == 0:
            self._release(key, b, t)
        if b.is_empty():
            del self._buckets[key]

    def _release(self, key: BucketKey, b: _Bucket, t: int) -> None:
        """The bucket's holder has nothing unacked left (all acked, or it left)."""
        b.holder = None
        if key in self._withheld:
            self._withheld.discard(key)
            self._stats.draining_hashes_cleared_total += 1
            self._w_cleared += 1
        if b.open_handoff is not None:
            self._emit_handoff(key, b.open_handoff, t)
            b.open_handoff = None
        owner = self._owners.get(key)
        if owner is not None and b.pending and self._consumers[owner].connected:
            heapq.heappush(self._consumers[owner].ready, (b.pending[0].seq, key))
            self._wake.add(owner)

    def _check_drains(self, t: int) -> None:
        layout = self._layout
        for sid in sorted(self._drain_candidates):
            seg = layout.segments.get(sid) if layout is not None else None
            if seg is None or seg.is_active or sid in self._drained:
                continue
            if self._seg_outstanding.get(sid, 0):
                continue
            self._drained.add(sid)
            sealed = self._sealed_at.get(sid, t)
            self._out.segment_drains.append(
                SegmentDrainRow(self.subscription, sid, sealed, t, t - sealed))
            self._stats.segments_drained += 1
            if self._coord.uses_drain_checker:
                self._dirty = True
        self._drain_candidates.clear()

    # ---- assignment ---------------------------------------------------------------------------
    def _reassign(self, t: int) -> None:
        self._dirty = False
        if self._queue_mode:
            self._step_redelivered.clear()
            return
        if self._layout is None:
            new: dict[BucketKey, str] = {}
        else:
            new = _assigned_owners(self._coord, self._layout, self._drained,
                                   {n for n, c in self._consumers.items() if c.connected})
        old = self._owners
        self._owners = new
        changed = [k for k in old.keys() | new.keys() if old.get(k) != new.get(k)]
        for key in sorted(changed):
            self._move(key, old.get(key), new.get(key), t)
        self._step_redelivered.clear()

    def _move(self, key: BucketKey, old: str | None, new: str | None, t: int) -> None:
        b = self._buckets.get(key)
        if b is not None and b.open_handoff is not None:  # moved again while withheld
            self._emit_handoff(key, b.open_handoff, t)
            b.open_handoff = None
        withheld = (new is not None and b is not None and b.holder is not None
                    and b.holder != new)
        if withheld:
            if key not in self._withheld:
                self._withheld.add(key)
                n = len(self._withheld)
                self._w_max = max(self._w_max, n)
                self._stats.draining_hashes_max = max(self._stats.draining_hashes_max, n)
        elif key in self._withheld:
            self._withheld.discard(key)
            self._stats.draining_hashes_cleared_total += 1
            self._w_cleared += 1
        if old is not None and new is not None:
            self._stats.reassignments += 1
            self._w_reassignments += 1
            redelivered = self._step_redelivered.get(key, 0)
            if withheld:
                assert b is not None
                b.open_handoff = (old, new, t, b.unacked_msgs, redelivered)
                self._stats.handoffs_withheld += 1
            else:
                self._emit_handoff(key, (old, new, t, 0, redelivered), t)
        if new is not None and not withheld and b is not None and b.pending:
            heapq.heappush(self._consumers[new].ready, (b.pending[0].seq, key))
            self._wake.add(new)
        if b is not None and b.is_empty():
            del self._buckets[key]

    def _emit_handoff(self, key: BucketKey, rec: _OpenHandoff, until: int | None) -> None:
        frm, to, since, pending, redelivered = rec
        self._out.handoffs.append(HandoffRow(self.subscription, key[0], key[1], frm, to, since,
                                             until, pending, redelivered))

    # ---- dispatch -----------------------------------------------------------------------------
    def _dispatch_buckets(self, t: int) -> None:
        if not self._wake:
            return
        names = sorted(self._wake)
        self._wake.clear()
        for name in names:
            c = self._consumers[name]
            if not c.connected:
                continue
            while c.free_at <= t:
                key = self._pop_ready(c)
                if key is None:
                    break
                b = self._buckets[key]
                e = b.pending.popleft()
                b.pending_msgs -= e.n
                if b.pending:
                    heapq.heappush(c.ready, (b.pending[0].seq, key))
                b.holder = name
                b.unacked_entries += 1
                b.unacked_msgs += e.n
                self._deliver(e, c, t)

    def _pop_ready(self, c: _Consumer) -> BucketKey | None:
        ready = c.ready
        while ready:
            seq, key = heapq.heappop(ready)
            if self._owners.get(key) != c.name:
                continue
            b = self._buckets.get(key)
            if b is None or not b.pending or b.pending[0].seq != seq:
                continue
            if b.holder is not None and b.holder != c.name:
                continue  # withheld; pushed again when released
            return key
        return None

    def _dispatch_queue(self, t: int) -> None:
        idle = self._idle
        pending = self._queue_pending
        while pending and idle:
            i = 0 if self._rr_last is None else bisect_right(idle, self._rr_last)
            if i >= len(idle):
                i = 0
            name = idle[i]
            c = self._consumers[name]
            _, e = heapq.heappop(pending)
            self._deliver(e, c, t)
            self._rr_last = name
            if c.free_at > t:
                idle.pop(i)

    def _deliver(self, e: _Entry, c: _Consumer, t: int) -> None:
        n = e.n
        if c.cap_num is None or n == 0:
            end = t
        else:
            if c.period_start is not None and c.free_at == t:
                c.period_msgs += n
            else:
                c.period_start = t
                c.period_msgs = n
            end = c.period_start - (-(c.period_msgs * 1000 * c.cap_den) // c.cap_num)
            end = max(end, t)
        ack = end + c.spec.ack_delay_ms
        e.consumer = c.name
        e.dispatch_time = t
        e.ack_time = ack
        e.deliveries += 1
        c.unacked[e.seq] = e
        c.free_at = end
        self._pending_entries -= 1
        self._pending_msgs -= n
        self._unacked_entries += 1
        self._unacked_msgs += n
        self._stats.deliveries += 1
        if end > t:
            self._push(end, _PH_FREE, c.name, c.gen)
            self._add_busy(c, t, end, 1)
        self._push(ack, _PH_ACK, e, e.deliveries)
        ws = t - t % self.window_ms
        c.win_msgs[ws] = c.win_msgs.get(ws, 0) + n
        c.win_bytes[ws] = c.win_bytes.get(ws, 0) + e.nbytes
        leave = c.spec.leave_ms
        if leave is None or ack <= leave:  # this delivery will be acked: its row is final
            self._out.add_dispatch(self._row(e))

    def _row(self, e: _Entry) -> DispatchRow:
        redeliveries = e.deliveries - 1 if e.consumer is not None else e.deliveries
        return DispatchRow(self.subscription, e.segment_id, e.bucket, e.producer, e.entry_id,
                           e.publish, e.n, e.nbytes, e.consumer, e.dispatch_time, e.ack_time,
                           redeliveries)

    # ---- windows ------------------------------------------------------------------------------
    def _add_busy(self, c: _Consumer, start: int, end: int, sign: int) -> None:
        w = self.window_ms
        ws = start - start % w
        while start < end:
            stop = min(end, ws + w)
            c.win_busy[ws] = c.win_busy.get(ws, 0) + sign * (stop - start)
            start = stop
            ws += w

    def _close_windows_upto(self, t: int) -> None:
        """Emit every window that ends at or before ``t``; with sparse windows, jump over those
        where nothing can differ from the previous rows (:meth:`_next_window`)."""
        while self._win_start is not None and self._win_start + self.window_ms <= t:
            self._emit_window(self._win_start, self._win_start + self.window_ms)
            self._win_start = self._next_window(self._win_start + self.window_ms, t)

    def _next_window(self, ws: int, t: int) -> int:
        """The first window from ``ws`` whose rows may differ from the previous rows carried
        forward, or the window holding ``t`` (which is not closed yet), whichever is first.
        Between two simulated instants nothing changes but the busy time already booked in
        later windows and a consumer's connected time, which ends at its leave; the window
        holding the last instant is the one just emitted (instants close the windows before
        them first)."""
        w = self.window_ms
        nxt = t - t % w
        if self.dense_windows or nxt <= ws:
            return ws
        for c in self._consumers.values():
            for booked in (c.win_busy, c.win_msgs, c.win_bytes):
                if booked:
                    nxt = min(nxt, min(booked))
            leave = c.spec.leave_ms
            if leave is not None and leave > ws:
                nxt = min(nxt, (leave - 1) - (leave - 1) % w)
        return max(ws, nxt)

    def _owner_backlog(self) -> tuple[dict[str, int], dict[int, set[str]]]:
        """Pending messages of the buckets each consumer owns (consumers with some), and the
        owners of each segment; both empty for a QUEUE subscription."""
        backlog: dict[str, int] = {}
        if self._queue_mode:
            return backlog, {}
        owners = self._owners
        for key, b in self._buckets.items():  # (few buckets hold entries)
            owner = owners.get(key)
            if owner is not None and b.pending_msgs:
                backlog[owner] = backlog.get(owner, 0) + b.pending_msgs
        return backlog, self._segment_owners()

    def _segment_owners(self) -> dict[int, set[str]]:
        """The owners of each segment, from :attr:`_owners` (which is replaced, never changed
        in place): kept with the owners it was made from until they are replaced (not
        pickled). Read only."""
        cached = self._seg_owners
        if cached is None or cached[0] is not self._owners:
            seg_owners: dict[int, set[str]] = {}
            for key, name in self._owners.items():
                seg_owners.setdefault(key[0], set()).add(name)
            cached = self._seg_owners = (self._owners, seg_owners)
        return cached[1]

    def _emit_window(self, ws: int, we: int, final: bool = False) -> None:
        """The rows of window ``[ws, we)`` (``final``: the last one) that differ from the
        previous rows carried forward, or all of them with :attr:`dense_windows`."""
        backlog, seg_owners = self._owner_backlog()
        self._emit_consumer_load(ws, we, final, backlog)
        self._emit_window_stats(ws, we, final, seg_owners)
        self._w_max = len(self._withheld)
        self._w_cleared = 0
        self._w_reassignments = 0
        self._w_redeliveries = 0

    def _emit_consumer_load(self, ws: int, we: int, final: bool,
                            backlog: dict[str, int]) -> None:
        for name in sorted(self._consumers):
            c = self._consumers[name]
            leave = c.spec.leave_ms
            conn = max(0, min(we, leave if leave is not None else we) - max(ws, c.spec.join_ms))
            msgs = c.win_msgs.pop(ws, 0)
            nbytes = c.win_bytes.pop(ws, 0)
            busy = c.win_busy.pop(ws, 0)
            if conn <= 0 and msgs == 0 and busy == 0:
                continue
            if self._queue_mode:
                waiting = self._pending_msgs if c.connected else 0
            else:
                waiting = backlog.get(name, 0)
            row = ConsumerLoadRow(self.subscription, name, ws, we, msgs, nbytes, busy,
                                  max(conn - busy, 0), waiting)
            prev = self._last_load.get(name)
            if (self.dense_windows or final or prev is None
                    or (leave is not None and leave <= we)
                    or msgs or nbytes or busy  # (then it differs from the idle row)
                    or row != idle_consumer_load(prev, ws, we)):
                self._out.consumer_load.append(row)
                self._last_load[name] = row

    def _emit_window_stats(self, ws: int, we: int, final: bool,
                           seg_owners: dict[int, set[str]]) -> None:
        layout = self._layout
        sealed_undrained = 0
        drain_mode = 0
        if layout is not None:
            for sid, seg in layout.segments.items():
                if not seg.is_active and sid not in self._drained:
                    sealed_undrained += 1
                    if len(seg_owners.get(sid, ())) > 1:
                        drain_mode += 1
        draining_pending = sum(self._buckets[k].unacked_msgs for k in self._withheld
                               if k in self._buckets)
        row = WindowStatsRow(
            self.subscription, ws, we, self._pending_msgs, self._unacked_msgs,
            len(self._withheld), max(self._w_max, len(self._withheld)), draining_pending,
            self._w_cleared, self._w_reassignments, self._w_redeliveries,
            sum(1 for names in seg_owners.values() if len(names) > 1), drain_mode,
            sealed_undrained)
        prev = self._last_stats
        if (self.dense_windows or final or prev is None
                or self._w_cleared or self._w_reassignments or self._w_redeliveries
                or row != idle_window_stats(prev, ws, we)):  # (counts: not the idle row)
            self._out.window_stats.append(row)
            self._last_stats = row
