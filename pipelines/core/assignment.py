"""Consumer assignment of one subscription (PIP-468 ``SubscriptionCoordinator``), reference §6,
and the broker-side bucket → consumer spread of a shared segment (PIP-486), reference §3.7.

Two levels decide who receives an entry of an ordered (STREAM / CHECKPOINT) subscription:

1. The coordinator (:func:`assign_segments`) gives every consumer a list of segments. A
   :class:`SegmentAssignment` with empty ``bucket_ranges`` makes the consumer the segment's sole
   owner; a non-empty ``bucket_ranges`` (the segment's full boundary list, identical for every
   sharer) makes it one of several sharers.
2. The broker of a shared segment spreads the segment's buckets over its connected sharers
   (:func:`bucket_spread`): contiguous slices in the order of the per-segment consumer names,
   ``<consumerName>-seg-<segmentId>``.

:func:`bucket_owners` combines both into one ``(segment_id, bucket_index) → consumer`` map.

Sessions (§6.1, apache/pulsar PR #26433): a consumer leaves by a clean close (:data:`LeaveHow`
``close``: it unregisters at once) or by losing its connection (``crash``: the session, and its
assignment, stay for the grace period, :data:`CONSUMER_SESSION_GRACE_MS`, then expire).

Deterministic refinements: consumer names are the identity (§6.1), so the broker's secondary sort
key (consumerId) never matters; :func:`assignable_segments` returns segments by ascending id (the
assignment re-sorts them by range anyway).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from pipelines.core.buckets import bucket_ranges
from pipelines.core.layout import SegmentInfo, SegmentLayout

BucketKey = tuple[int, int]
"""``(segment_id, bucket_index)``."""

CONSUMER_SESSION_GRACE_MS = 60_000
"""``scalableTopicConsumerSessionGracePeriodSeconds`` (the coordinator's 60 s fallback,
reference §4.2, §6.1): how long a disconnected session stays registered."""


class LeaveHow(StrEnum):
    """How a consumer leaves (reference §6.1). Values match the config (lower case)."""

    CLOSE = "close"
    """A clean close: the client unregisters, the session is removed and the subscription
    rebalanced at once (apache/pulsar PR #26433)."""
    CRASH = "crash"
    """A lost connection: the session, and its assignment, stay for the grace period and then
    expire (removed, rebalanced)."""


def session_end_ms(leave_ms: int | None, how: LeaveHow,
                   grace_ms: int = CONSUMER_SESSION_GRACE_MS) -> int | None:
    """When a consumer that disconnects at ``leave_ms`` (event-time ms; ``None`` = never)
    stops being registered: at ``leave_ms`` for a clean close, ``leave_ms + grace_ms`` for a
    lost connection (reference §6.1)."""
    if leave_ms is None:
        return None
    return leave_ms + grace_ms if how is LeaveHow.CRASH else leave_ms


class SubscriptionType(StrEnum):
    """Subscription types of a scalable topic (PIP-468). Values match the config (lower case)."""

    STREAM = "stream"
    """Ordered, coordinator-assigned, with the drain checker (sealed before successors)."""
    CHECKPOINT = "checkpoint"
    """Ordered, coordinator-assigned, no drain checker (every segment of the DAG assignable)."""
    QUEUE = "queue"
    """Unordered: round-robin delivery, no coordinator-side ownership (PIP-468)."""

    @classmethod
    def parse(cls, value: str | SubscriptionType) -> SubscriptionType:
        """Case-insensitive: ``"STREAM"``, ``"stream"`` and ``SubscriptionType.STREAM`` agree."""
        if isinstance(value, SubscriptionType):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise ValueError(f"unknown subscription type {value!r}: expected one of "
                             f"{', '.join(t.value for t in cls)}") from None


@dataclass(frozen=True)
class SegmentAssignment:
    """One segment handed to one consumer (PIP-486 ``AssignedSegment`` with ``bucketRanges``).

    ``bucket_ranges`` empty = sole owner (Exclusive subscribe); otherwise the segment's full
    inclusive ``hash_b`` boundary list, and which buckets this sharer owns is decided broker-side
    (:func:`bucket_spread`).
    """

    segment_id: int
    bucket_ranges: tuple[tuple[int, int], ...] = ()

    @property
    def is_shared(self) -> bool:
        return bool(self.bucket_ranges)


@dataclass(frozen=True)
class CoordinatorAssignment:
    """The assignment of every registered consumer, computed against layout ``layout_epoch``.

    ``by_consumer`` has every registered consumer (sorted by name), idle ones with ``[]``.
    """

    layout_epoch: int
    by_consumer: dict[str, list[SegmentAssignment]] = field(default_factory=dict)


def _sorted_unique_names(consumer_names: Iterable[str]) -> list[str]:
    names = list(consumer_names)
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise ValueError(f"duplicate consumer name(s): {', '.join(dups)}")
    return sorted(names)


def segment_consumer_name(consumer_name: str, segment_id: int) -> str:
    """The per-segment v4 consumer's name the V5 stream consumer gives the broker,
    ``<consumerName>-seg-<segmentId>`` (reference §3.7)."""
    return f"{consumer_name}-seg-{segment_id}"


def _java_order(name: str) -> bytes:
    """Sort key ordering strings as Java's ``String.compareTo`` (UTF-16 code units)."""
    return name.encode("utf-16-be", "surrogatepass")


def bucket_spread(bucket_count: int, consumer_names: Sequence[str],
                  segment_id: int) -> dict[str, list[int]]:
    """Which buckets of shared segment ``segment_id`` each connected consumer owns (§3.7).

    The broker sorts the segment's consumers by their per-segment names
    (:func:`segment_consumer_name`, ``<consumerName>-seg-<segmentId>``, in Java string order),
    so ``w-2`` comes before ``w`` (``"w-2-seg-0" < "w-seg-0"``); consumer ``j`` of ``k`` owns
    buckets ``[floor(j*N/k), floor((j+1)*N/k))``. Every consumer is a key (possibly with
    ``[]``: with ``k > N`` the first consumers get nothing); no consumers → ``{}``.
    ``ValueError`` when ``bucket_count < 1`` or a name repeats.
    """
    if bucket_count < 1:
        raise ValueError(f"a segment has at least 1 bucket, got bucket_count={bucket_count}")
    names = sorted(_sorted_unique_names(consumer_names),
                   key=lambda n: _java_order(segment_consumer_name(n, segment_id)))
    k = len(names)
    return {name: list(range(j * bucket_count // k, (j + 1) * bucket_count // k))
            for j, name in enumerate(names)}


def _owner_counts(segs: Sequence[SegmentInfo], surplus: int) -> list[int]:
    """Owners per segment (in ``segs`` order) when ``surplus`` consumers beyond one per segment
    are handed out round-robin to segments with fewer owners than buckets (reference §6.3)."""
    owners = [1] * len(segs)
    while surplus > 0:
        progressed = False
        for i, seg in enumerate(segs):
            if surplus == 0:
                break
            if owners[i] < seg.bucket_count:
                owners[i] += 1
                surplus -= 1
                progressed = True
        if not progressed:
            break
    return owners


def assign_segments(segments: Sequence[SegmentInfo],
                    consumer_names: Sequence[str]) -> dict[str, list[SegmentAssignment]]:
    """The coordinator's segment → consumer assignment (reference §6.3).

    Segments are sorted by ``(range_start, range_end, segment_id)``, consumers by name.

    - ``k <= S``: segment ``i`` goes to consumer ``i mod k`` as sole owner (a consumer may get
      several segments).
    - ``k > S`` (surplus): every segment starts with one owner; the ``k - S`` extra consumers are
      handed out one at a time, round-robin over the segments in order, only to segments whose
      owner count is below their bucket count ``N``, until none is left or no segment has room.
      Walking the segments in order, consumers (in name order) take them: one owner → sole
      owner; several → each sharer gets the segment's full boundary list. Left-over consumers
      are idle (``[]``). In this branch every consumer holds at most one segment.

    Every consumer is a key of the result; no consumers → ``{}``.
    """
    names = _sorted_unique_names(consumer_names)
    segs = sorted(segments, key=lambda s: (s.range_start, s.range_end, s.segment_id))
    result: dict[str, list[SegmentAssignment]] = {name: [] for name in names}
    k, s_count = len(names), len(segs)
    if k == 0:
        return result
    if k <= s_count:
        for i, seg in enumerate(segs):
            result[names[i % k]].append(SegmentAssignment(seg.segment_id))
        return result
    owners = _owner_counts(segs, k - s_count)
    nxt = 0
    for i, seg in enumerate(segs):
        if owners[i] == 1:
            result[names[nxt]].append(SegmentAssignment(seg.segment_id))
            nxt += 1
            continue
        ranges = tuple(bucket_ranges(seg.bucket_splits))
        for _ in range(owners[i]):
            result[names[nxt]].append(SegmentAssignment(seg.segment_id, ranges))
            nxt += 1
    return result


def assignable_segments(layout: SegmentLayout, drained: set[int] | None) -> list[SegmentInfo]:
    """Segments the coordinator may assign (reference §6.2), by ascending segment id.

    ``drained`` is the drain checker of a STREAM subscription (ids of segments drained for this
    subscription): a SEALED segment is assignable iff not drained (its parents are not checked);
    an ACTIVE segment iff every parent still present in the layout is drained (pruned parents
    count as drained). ``drained=None`` (CHECKPOINT / QUEUE): every segment of the DAG, active
    and sealed, drained or not.
    """
    segs = [layout.segments[sid] for sid in sorted(layout.segments)]
    if drained is None:
        return segs
    present = layout.segments
    out: list[SegmentInfo] = []
    for seg in segs:
        if not seg.is_active:
            if seg.segment_id not in drained:
                out.append(seg)
        elif all(p not in present or p in drained for p in seg.parent_ids):
            out.append(seg)
    return out


def bucket_owners(assignment: Mapping[str, Sequence[SegmentAssignment]],
                  layout: SegmentLayout,
                  connected: Collection[str] | None = None) -> dict[BucketKey, str]:
    """``(segment_id, bucket_index) → consumer`` implied by a coordinator assignment.

    A sole owner owns every bucket of its segment; the sharers of a segment split its buckets by
    :func:`bucket_spread` (broker side, reference §3.7). ``connected``: the consumers with a
    connection (``None`` = all). A registered consumer without one (a lost connection within
    the grace period, §6.1) keeps its assignment but is not on the broker: its sole-owned
    segments have no owner, and a shared segment's buckets are spread over its connected
    sharers only. Segments missing from ``layout`` are skipped. Keys are inserted in ascending
    ``(segment_id, bucket_index)`` order.
    """
    owners: dict[BucketKey, str] = {}
    sharers: dict[int, list[str]] = {}
    for name in sorted(assignment):
        if connected is not None and name not in connected:
            continue
        for seg_asg in assignment[name]:
            seg = layout.segments.get(seg_asg.segment_id)
            if seg is None:
                continue
            if seg_asg.is_shared:
                sharers.setdefault(seg.segment_id, []).append(name)
            else:
                for b in range(seg.bucket_count):
                    owners[(seg.segment_id, b)] = name
    for sid, names in sharers.items():
        for name, buckets in bucket_spread(layout.segments[sid].bucket_count, names,
                                           sid).items():
            for b in buckets:
                owners[(sid, b)] = name
    return dict(sorted(owners.items()))


class SubscriptionCoordinator:
    """Consumer sessions of one subscription and their assignment (reference §6.1–6.3).

    Sessions are keyed by consumer name. :meth:`register` of a new name adds a session and
    counts a rebalance; registering an existing name is a reconnect (the consumer id is updated,
    no rebalance). :meth:`unregister` removes the session (rebalance) unless the given consumer
    id is stale (the name re-registered with another id) — then it is ignored. When to
    unregister is the caller's (:func:`session_end_ms`): at a clean close, or when the grace
    period after a lost connection expires.

    The assignment is a pure function of (sessions, layout, drained set):
    :meth:`compute_assignment`. STREAM subscriptions use the drain checker; CHECKPOINT and
    QUEUE do not (QUEUE consumers are not coordinated in Pulsar; the assignment is computed the
    no-checker way for completeness and is informational only).
    """

    def __init__(self, subscription: str,
                 sub_type: SubscriptionType | str = SubscriptionType.STREAM) -> None:
        self.subscription = subscription
        self.sub_type = SubscriptionType.parse(sub_type)
        self._sessions: dict[str, int] = {}
        self.rebalances = 0
        """Number of session changes that triggered a rebalance (new name or removal)."""

    @property
    def uses_drain_checker(self) -> bool:
        return self.sub_type is SubscriptionType.STREAM

    @property
    def consumer_names(self) -> list[str]:
        """Registered consumer names, sorted."""
        return sorted(self._sessions)

    def consumer_id(self, consumer_name: str) -> int | None:
        return self._sessions.get(consumer_name)

    def register(self, consumer_name: str, consumer_id: int = 0) -> bool:
        """Register (or reconnect) a consumer. ``True`` = new session (rebalance)."""
        if consumer_name in self._sessions:
            self._sessions[consumer_name] = consumer_id
            return False
        self._sessions[consumer_name] = consumer_id
        self.rebalances += 1
        return True

    def unregister(self, consumer_name: str, consumer_id: int | None = None) -> bool:
        """Remove a session. ``True`` = removed (rebalance); unknown name / stale id → ``False``."""
        if consumer_name not in self._sessions:
            return False
        if consumer_id is not None and consumer_id != self._sessions[consumer_name]:
            return False
        del self._sessions[consumer_name]
        self.rebalances += 1
        return True

    def compute_assignment(self, layout: SegmentLayout,
                           drained: Iterable[int] | None = None) -> CoordinatorAssignment:
        """Assignment of every session against ``layout``; ``drained`` = ids drained for this
        subscription (used only by STREAM; ``None`` there means nothing drained yet)."""
        checker = set(drained or ()) if self.uses_drain_checker else None
        segs = assignable_segments(layout, checker)
        return CoordinatorAssignment(layout.epoch, assign_segments(segs, self.consumer_names))
