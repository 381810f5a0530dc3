"""The scalable-topic segment DAG (PIP-468 ``SegmentLayout`` / ``SegmentInfo``), reference §2.

A layout is an immutable value: every mutation (split, merge, rebucket, prune) returns a new
layout with ``epoch + 1``. Segments tile the 16-bit ``segment_hash`` ring with inclusive ranges;
each segment carries its immutable entry-bucket splits (PIP-486).

Deterministic refinement (reference §4.6): ``active_segments`` iterates by ascending segment id,
where Java's map order is unspecified.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from pipelines.core.buckets import MAX_HASH, equal_width_splits

NOT_SEALED = -1
"""``sealed_at_epoch`` / ``sealed_at_ms`` of a segment that is still active (reference §2.1)."""


class SegmentState(StrEnum):
    ACTIVE = "ACTIVE"
    SEALED = "SEALED"


@dataclass(frozen=True)
class SegmentInfo:
    """One segment of the DAG (reference §2.1).

    ``range_start``/``range_end`` are the inclusive ``segment_hash`` range; ``bucket_splits`` the
    entry-bucket splits over the full ``hash_b`` ring (``bucket_count == len(bucket_splits) + 1``).
    Times are event-time milliseconds; ``sealed_at_*`` are ``-1`` while ACTIVE.
    """

    segment_id: int
    range_start: int
    range_end: int
    state: SegmentState = SegmentState.ACTIVE
    parent_ids: tuple[int, ...] = ()
    child_ids: tuple[int, ...] = ()
    bucket_splits: tuple[int, ...] = ()
    created_at_epoch: int = 0
    sealed_at_epoch: int = NOT_SEALED
    created_at_ms: int = 0
    sealed_at_ms: int = NOT_SEALED

    def __post_init__(self) -> None:
        if not (0 <= self.range_start <= self.range_end <= MAX_HASH):
            raise ValueError(
                f"segment {self.segment_id}: range [{self.range_start}, {self.range_end}] must "
                f"satisfy 0 <= start <= end <= {MAX_HASH}"
            )

    @property
    def bucket_count(self) -> int:
        """``N``: number of entry buckets (splits + 1)."""
        return len(self.bucket_splits) + 1

    @property
    def is_active(self) -> bool:
        return self.state is SegmentState.ACTIVE

    @property
    def range_size(self) -> int:
        return self.range_end - self.range_start + 1

    def contains(self, segment_hash: int) -> bool:
        return self.range_start <= segment_hash <= self.range_end

    def is_adjacent(self, other: SegmentInfo) -> bool:
        """True when the two ranges share exactly one boundary (reference §2.4)."""
        return self.range_end + 1 == other.range_start or other.range_end + 1 == self.range_start

    def topic_name(self, topic: str) -> str:
        """Segment topic name, e.g. ``segment://public/default/orders/0000-7fff-1`` (§2.1).

        ``topic`` is ``tenant/namespace/name`` or a bare name (then ``public/default`` is used).
        """
        base = topic if topic.count("/") >= 2 else f"public/default/{topic}"
        return f"segment://{base}/{self.range_start:04x}-{self.range_end:04x}-{self.segment_id}"


@dataclass(frozen=True)
class SegmentLayout:
    """Immutable segment DAG of one topic (reference §2).

    ``segments`` maps every segment id (active and sealed, insertion order) to its
    :class:`SegmentInfo`; ``active_segments`` is the ACTIVE subset by ascending id.
    """

    epoch: int
    next_segment_id: int
    _segments: dict[int, SegmentInfo] = field(repr=False, hash=False)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def initial(cls, num_segments: int, bucket_budget: int = 4, now_ms: int = 0) -> SegmentLayout:
        """Initial layout of ``num_segments`` segments (reference §2.2).

        Segment ``i`` covers ``[i*rs, (i+1)*rs - 1]`` with ``rs = 65536 // num_segments``, the
        last one ending at 65535; each gets ``max(1, bucket_budget // num_segments)``
        equal-width buckets. Raises ``ValueError`` for ``num_segments < 1`` or more segments than
        hashes.
        """
        if num_segments < 1:
            raise ValueError(f"initial layout needs at least 1 segment, got {num_segments}")
        if num_segments > MAX_HASH + 1:
            raise ValueError(f"initial layout cannot have more than 65536 segments, "
                             f"got {num_segments}")
        rs = (MAX_HASH + 1) // num_segments
        splits = tuple(equal_width_splits(max(1, bucket_budget // num_segments)))
        segs = {
            i: SegmentInfo(
                segment_id=i,
                range_start=i * rs,
                range_end=MAX_HASH if i == num_segments - 1 else (i + 1) * rs - 1,
                bucket_splits=splits,
                created_at_ms=now_ms,
            )
            for i in range(num_segments)
        }
        return cls(epoch=0, next_segment_id=num_segments, _segments=segs)

    def __getstate__(self) -> dict[str, object]:
        # Drop cached views (read-only proxies do not pickle); they are rebuilt on demand.
        return {k: v for k, v in self.__dict__.items() if k != "active_segments"}

    # ---- views --------------------------------------------------------------------------------
    @property
    def segments(self) -> Mapping[int, SegmentInfo]:
        """All segments (active and sealed) by id, read-only."""
        return MappingProxyType(self._segments)

    @cached_property
    def active_segments(self) -> Mapping[int, SegmentInfo]:
        """ACTIVE segments by ascending id (deterministic refinement, reference §4.6)."""
        return MappingProxyType(
            {sid: s for sid, s in sorted(self._segments.items()) if s.is_active}
        )

    def segment(self, segment_id: int) -> SegmentInfo:
        """The segment with this id; ``ValueError`` naming it when it does not exist."""
        try:
            return self._segments[segment_id]
        except KeyError:
            raise ValueError(f"segment {segment_id} does not exist in the layout") from None

    def bucket_capacity(self) -> int:
        """Σ N over active segments: how many consumers the layout can keep busy (§4.3)."""
        return sum(s.bucket_count for s in self.active_segments.values())

    def find_active_segment(self, segment_hash: int) -> SegmentInfo:
        """The active segment whose inclusive range holds ``segment_hash`` (reference §1.3).

        Raises ``ValueError("No segment covers hash …")`` when none does.
        """
        for s in self.active_segments.values():
            if s.contains(segment_hash):
                return s
        raise ValueError(f"No segment covers hash {segment_hash}")

    def routing_table(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(range_starts, segment_ids)`` of active segments sorted by range start, int64."""
        active = sorted(self.active_segments.values(), key=lambda s: s.range_start)
        return (np.array([s.range_start for s in active], dtype=np.int64),
                np.array([s.segment_id for s in active], dtype=np.int64))

    def route_array(self, segment_hashes: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Vectorized routing: ``segment_hash`` array (any ints) → active ``segment_id`` (int64).

        Active segments always tile the ring, so every hash in ``[0, 65535]`` has a segment.
        """
        starts, ids = self.routing_table()
        idx = np.searchsorted(starts, np.asarray(segment_hashes, dtype=np.int64), side="right") - 1
        return ids[idx]

    def merge_depth(self, segment_id: int) -> int:
        """Number of merges in the lineage: nodes with ≥ 2 parents in the ancestor closure of
        ``segment_id`` including itself; pruned ids are ignored (reference §2.7)."""
        return sum(1 for sid in self.lineage(segment_id)
                   if len(self._segments[sid].parent_ids) >= 2)

    def lineage(self, segment_id: int) -> list[int]:
        """Ancestor closure of ``segment_id`` including itself, ascending ids; pruned ancestors
        are skipped. ``ValueError`` when the segment does not exist."""
        self.segment(segment_id)
        seen: set[int] = set()
        todo = [segment_id]
        while todo:
            sid = todo.pop()
            if sid in seen or sid not in self._segments:
                continue
            seen.add(sid)
            todo.extend(self._segments[sid].parent_ids)
        return sorted(seen)

    # ---- mutations (each returns a new layout, epoch + 1) ---------------------------------------
    def split(self, segment_id: int, now_ms: int = 0) -> SegmentLayout:
        """Split an active segment at ``mid = start + (end - start) // 2`` (reference §2.3).

        Children ``[start, mid]`` (id ``next_segment_id``) and ``[mid+1, end]`` (id + 1) each get
        ``max(1, N // 2)`` equal-width buckets. ``ValueError`` if the segment is missing, sealed
        or covers a single hash.
        """
        parent = self._require_active(segment_id, "split")
        if parent.range_size < 2:
            raise ValueError(f"segment {segment_id} covers a single hash and cannot be split")
        epoch = self.epoch + 1
        mid = parent.range_start + (parent.range_end - parent.range_start) // 2
        c1, c2 = self.next_segment_id, self.next_segment_id + 1
        splits = tuple(equal_width_splits(max(1, parent.bucket_count // 2)))
        children = [
            SegmentInfo(c1, parent.range_start, mid, parent_ids=(segment_id,),
                        bucket_splits=splits, created_at_epoch=epoch, created_at_ms=now_ms),
            SegmentInfo(c2, mid + 1, parent.range_end, parent_ids=(segment_id,),
                        bucket_splits=splits, created_at_epoch=epoch, created_at_ms=now_ms),
        ]
        return self._with({segment_id: self._sealed(parent, (c1, c2), epoch, now_ms)}, children,
                          epoch, self.next_segment_id + 2)

    def merge(self, segment_id_1: int, segment_id_2: int, now_ms: int = 0,
              max_buckets_per_segment: int = 1024) -> SegmentLayout:
        """Merge two adjacent active segments into one (reference §2.4).

        The merged segment (id ``next_segment_id``) covers the union, has
        ``parent_ids = (segment_id_1, segment_id_2)`` in call order and
        ``min(N1 + N2, max_buckets_per_segment)`` equal-width buckets (controller-path clamp).
        ``ValueError`` if either is missing or sealed, they are the same segment, or they are
        not adjacent.
        """
        if segment_id_1 == segment_id_2:
            raise ValueError(f"segment {segment_id_1} cannot be merged with itself")
        a = self._require_active(segment_id_1, "merge")
        b = self._require_active(segment_id_2, "merge")
        if not a.is_adjacent(b):
            raise ValueError(
                f"segments {segment_id_1} [{a.range_start}, {a.range_end}] and {segment_id_2} "
                f"[{b.range_start}, {b.range_end}] are not adjacent and cannot be merged"
            )
        epoch = self.epoch + 1
        mid = self.next_segment_id
        n = min(a.bucket_count + b.bucket_count, max_buckets_per_segment)
        merged = SegmentInfo(mid, min(a.range_start, b.range_start), max(a.range_end, b.range_end),
                             parent_ids=(segment_id_1, segment_id_2),
                             bucket_splits=tuple(equal_width_splits(n)),
                             created_at_epoch=epoch, created_at_ms=now_ms)
        sealed = {segment_id_1: self._sealed(a, (mid,), epoch, now_ms),
                  segment_id_2: self._sealed(b, (mid,), epoch, now_ms)}
        return self._with(sealed, [merged], epoch, mid + 1)

    def rebucket(self, segment_id: int, bucket_count: int, now_ms: int = 0) -> SegmentLayout:
        """Rebucket rollover ("no-op split", reference §2.5): seal the segment and create one
        successor with the same range and ``bucket_count`` equal-width buckets.

        ``ValueError`` if the segment is missing or sealed, ``bucket_count < 1``, or the new
        splits equal the current ones (same ``N``). The ``N_max`` bound is the controller's.
        """
        old = self._require_active(segment_id, "rebucket")
        if bucket_count < 1:
            raise ValueError(f"segment {segment_id} cannot be rebucketed to {bucket_count} buckets "
                             f"(at least 1)")
        splits = tuple(equal_width_splits(bucket_count))
        if splits == old.bucket_splits:
            raise ValueError(f"segment {segment_id} already has {bucket_count} buckets: a "
                             f"rebucket must change the bucket splits")
        epoch = self.epoch + 1
        sid = self.next_segment_id
        succ = SegmentInfo(sid, old.range_start, old.range_end, parent_ids=(segment_id,),
                           bucket_splits=splits, created_at_epoch=epoch, created_at_ms=now_ms)
        return self._with({segment_id: self._sealed(old, (sid,), epoch, now_ms)}, [succ], epoch,
                          sid + 1)

    def prune(self, segment_id: int) -> SegmentLayout:
        """Remove a sealed segment (GC, reference §2.6); links to it are dropped from its
        parents and children. ``next_segment_id`` is unchanged. ``ValueError`` if the segment is
        missing or active."""
        seg = self.segment(segment_id)
        if seg.is_active:
            raise ValueError(f"segment {segment_id} is ACTIVE: only sealed segments can be pruned")
        segs = dict(self._segments)
        del segs[segment_id]
        for cid in seg.child_ids:
            if cid in segs:
                c = segs[cid]
                segs[cid] = replace(c, parent_ids=tuple(p for p in c.parent_ids if p != segment_id))
        for pid in seg.parent_ids:
            if pid in segs:
                p = segs[pid]
                segs[pid] = replace(p, child_ids=tuple(c for c in p.child_ids if c != segment_id))
        return SegmentLayout(self.epoch + 1, self.next_segment_id, segs)

    # ---- internals ----------------------------------------------------------------------------
    def _require_active(self, segment_id: int, operation: str) -> SegmentInfo:
        seg = self.segment(segment_id)
        if not seg.is_active:
            raise ValueError(f"segment {segment_id} is SEALED and cannot take part in a "
                             f"{operation}")
        return seg

    @staticmethod
    def _sealed(seg: SegmentInfo, child_ids: Sequence[int], epoch: int,
                now_ms: int) -> SegmentInfo:
        return replace(seg, state=SegmentState.SEALED, child_ids=tuple(child_ids),
                       sealed_at_epoch=epoch, sealed_at_ms=now_ms)

    def _with(self, updated: Mapping[int, SegmentInfo], created: Sequence[SegmentInfo],
              epoch: int, next_id: int) -> SegmentLayout:
        segs = dict(self._segments)
        segs.update(updated)
        for s in created:
            segs[s.segment_id] = s
        return SegmentLayout(epoch, next_id, segs)


def layout_as_of(layout: SegmentLayout, time_ms: int) -> SegmentLayout:
    """The layout in force at ``time_ms`` (after every change made at ``time_ms``), rebuilt from
    a later layout of the same topic from its segments' creation and seal times. Pruned segments
    cannot be recovered (the emulator never prunes)."""
    segs: dict[int, SegmentInfo] = {}
    epoch = 0
    for sid, s in layout.segments.items():
        if s.created_at_ms > time_ms and s.created_at_epoch > 0:
            continue
        epoch = max(epoch, s.created_at_epoch)
        if not s.is_active and s.sealed_at_ms <= time_ms:
            epoch = max(epoch, s.sealed_at_epoch)
            segs[sid] = s
        else:
            segs[sid] = replace(s, state=SegmentState.ACTIVE, child_ids=(),
                                sealed_at_epoch=NOT_SEALED, sealed_at_ms=NOT_SEALED)
    for sid, s in segs.items():
        if s.child_ids:
            segs[sid] = replace(s, child_ids=tuple(c for c in s.child_ids if c in segs))
    return SegmentLayout(epoch, max(segs) + 1 if segs else 0, segs)


def change_times(layout: SegmentLayout) -> list[int]:
    """Event times (ms) at which the layout changed, ascending (creation excluded)."""
    return sorted({s.sealed_at_ms for s in layout.segments.values() if not s.is_active})
