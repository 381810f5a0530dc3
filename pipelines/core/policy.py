"""Auto split/merge/rebucket policy: config, load samples and the pure evaluator (reference §4).

Model: Pulsar's ``AutoScalePolicyEvaluator`` — a pure function of (layout, load, consumer counts,
config, clock, cooldown history) that returns exactly one decision with a reason. Cooldown clocks
are owned by the caller (the controller) and set only when an action is applied.

Deterministic refinement (reference §4.6): active segments are iterated by ascending id, so
load-split and merge ties resolve to the lowest id / first pair in ascending id order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any

from pipelines.core.layout import SegmentInfo, SegmentLayout

RATE_NAMES = ("msg_rate_in", "bytes_rate_in", "msg_rate_out", "bytes_rate_out")
"""The four ``SegmentLoadStats`` rates, in Pulsar's evaluation order (msg/s, B/s, msg/s, B/s)."""

RATE_REASONS = ("msgRateIn", "bytesRateIn", "msgRateOut", "bytesRateOut")
"""Pulsar's split reason string for each rate in :data:`RATE_NAMES` (reference §9.14)."""

# Reason strings of actions (Pulsar's, reference §9.14).
REASON_CONSUMER_COUNT = "consumer-count"
REASON_COLD = "cold"
REASON_AT_MAX_SEGMENTS = "at-max-segments"
REASON_BELOW_SPLIT_RATE_FLOOR = "below-split-rate-floor"
# NoAction reasons (the emulator's; Pulsar returns NoAction without a stable string).
REASON_DISABLED = "disabled"
REASON_INVALID_CONFIG = "invalid-config"
REASON_NOTHING_TO_DO = "no-candidate"

# What held back an action that the policy would otherwise have taken (``suppressed_by``).
SUPPRESSED_SPLIT_COOLDOWN = "split-cooldown"
SUPPRESSED_REBUCKET_COOLDOWN = "rebucket-cooldown"
SUPPRESSED_MERGE_COOLDOWN = "merge-cooldown"
SUPPRESSED_MAX_SEGMENTS = "max-segments"
SUPPRESSED_MIN_SEGMENTS = "min-segments"
SUPPRESSED_MAX_DAG_DEPTH = "max-dag-depth"
SUPPRESSED_MERGE_CAPACITY = "merge-capacity"
SUPPRESSED_BUCKET_CAPACITY = "max-buckets-per-segment"

DECISION_REASONS: tuple[str, ...] = (
    *RATE_REASONS, REASON_CONSUMER_COUNT, REASON_COLD, REASON_AT_MAX_SEGMENTS,
    REASON_BELOW_SPLIT_RATE_FLOOR, REASON_DISABLED, REASON_INVALID_CONFIG, REASON_NOTHING_TO_DO)
"""Every ``reason`` a decision can carry (``autoscale_decisions.reason``)."""
SUPPRESSED_REASONS: tuple[str, ...] = (
    SUPPRESSED_SPLIT_COOLDOWN, SUPPRESSED_REBUCKET_COOLDOWN, SUPPRESSED_MERGE_COOLDOWN,
    SUPPRESSED_MAX_SEGMENTS, SUPPRESSED_MIN_SEGMENTS, SUPPRESSED_MAX_DAG_DEPTH,
    SUPPRESSED_MERGE_CAPACITY, SUPPRESSED_BUCKET_CAPACITY)
"""Every rule a ``NoAction`` can name in ``suppressed_by``."""


@dataclass(frozen=True)
class AutoScaleConfig:
    """Resolved auto-scale policy of one topic, with Pulsar's broker defaults (reference §4.2).

    Durations are seconds; rates msg/s or bytes/s. Constructing an invalid config does not raise:
    Pulsar treats an invalid resolved policy as auto-scale disabled (see :meth:`problems`).
    """

    enabled: bool = True
    max_segments: int = 64
    min_segments: int = 1
    max_dag_depth: int = 10
    split_cooldown_s: int = 60
    merge_cooldown_s: int = 300
    merge_window_s: int = 300
    rebucket_cooldown_s: int = 60
    split_vs_rebucket_min_msg_rate_in: float = 1000.0
    max_buckets_per_segment: int = 1024
    split_msg_rate_in: float = 10_000.0
    split_bytes_rate_in: float = 50_000_000.0
    split_msg_rate_out: float = 50_000.0
    split_bytes_rate_out: float = 250_000_000.0
    merge_msg_rate_in: float = 1000.0
    merge_bytes_rate_in: float = 5_000_000.0
    merge_msg_rate_out: float = 5000.0
    merge_bytes_rate_out: float = 25_000_000.0

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @property
    def split_thresholds(self) -> tuple[float, float, float, float]:
        """Split thresholds in :data:`RATE_NAMES` order."""
        return (self.split_msg_rate_in, self.split_bytes_rate_in, self.split_msg_rate_out,
                self.split_bytes_rate_out)

    @property
    def merge_thresholds(self) -> tuple[float, float, float, float]:
        """Merge thresholds in :data:`RATE_NAMES` order."""
        return (self.merge_msg_rate_in, self.merge_bytes_rate_in, self.merge_msg_rate_out,
                self.merge_bytes_rate_out)

    def problems(self) -> list[str]:
        """Every violated validation rule, one sentence each (reference §4.2); empty = valid."""
        return self._count_problems() + self._rate_problems()

    def _count_problems(self) -> list[str]:
        """The rules on segment counts, depth, cooldowns and buckets."""
        out: list[str] = []
        if self.min_segments < 1:
            out.append(f"min_segments must be >= 1, got {self.min_segments}")
        if self.max_segments < self.min_segments:
            out.append(f"max_segments ({self.max_segments}) must be >= min_segments "
                       f"({self.min_segments})")
        if self.max_dag_depth < 0:
            out.append(f"max_dag_depth must be >= 0, got {self.max_dag_depth}")
        for name in ("split_cooldown_s", "merge_cooldown_s", "merge_window_s",
                     "rebucket_cooldown_s"):
            if getattr(self, name) < 0:
                out.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.split_vs_rebucket_min_msg_rate_in < 0:
            out.append("split_vs_rebucket_min_msg_rate_in must be >= 0, got "
                       f"{self.split_vs_rebucket_min_msg_rate_in}")
        if not 1 <= self.max_buckets_per_segment <= 65536:
            out.append("max_buckets_per_segment must be in [1, 65536], got "
                       f"{self.max_buckets_per_segment}")
        return out

    def _rate_problems(self) -> list[str]:
        """The rules on each rate's split and merge thresholds."""
        out: list[str] = []
        for rate in RATE_NAMES:
            split, merge = getattr(self, f"split_{rate}"), getattr(self, f"merge_{rate}")
            if not split > 0:
                out.append(f"split_{rate} must be > 0, got {split}")
            if not merge >= 0:
                out.append(f"merge_{rate} must be >= 0, got {merge}")
            if not split > merge:
                out.append(f"split_{rate} ({split}) must be greater than merge_{rate} ({merge})")
        return out

    def is_valid(self) -> bool:
        return not self.problems()

    @cached_property
    def valid(self) -> bool:
        """:meth:`is_valid`, computed once per (frozen) config: every evaluation asks."""
        return self.is_valid()

    @classmethod
    def resolve(cls, broker: AutoScaleConfig | None = None,
                *overrides: Mapping[str, Any] | None) -> AutoScaleConfig:
        """Field-by-field layering broker → namespace → topic (reference §4.2).

        ``overrides`` are mappings of field name → value applied in order; a ``None`` value (or
        a missing key) inherits. ``ValueError`` names an unknown field.
        """
        cfg = broker if broker is not None else cls()
        known = set(cls.field_names())
        for layer in overrides:
            if not layer:
                continue
            unknown = sorted(set(layer) - known)
            if unknown:
                raise ValueError(f"unknown auto-scale policy field(s): {', '.join(unknown)}")
            cfg = replace(cfg, **{k: v for k, v in layer.items() if v is not None})
        return cfg


@dataclass(frozen=True)
class SegmentLoadSample:
    """Last written load record of a segment and its store modification time (reference §5).

    Rates are TopicStats values of one stats period (msg/s, bytes/s; reference §5.1);
    ``modified_at_ms`` is event-time ms.
    """

    msg_rate_in: float = 0.0
    bytes_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    bytes_rate_out: float = 0.0
    modified_at_ms: int = 0

    @property
    def rates(self) -> tuple[float, float, float, float]:
        return (self.msg_rate_in, self.bytes_rate_in, self.msg_rate_out, self.bytes_rate_out)


# ---- decisions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Split:
    segment_id: int
    reason: str


@dataclass(frozen=True)
class Merge:
    segment_id_1: int
    segment_id_2: int
    reason: str


@dataclass(frozen=True)
class Rebucket:
    segment_ids: tuple[int, ...]
    bucket_count: int
    reason: str


@dataclass(frozen=True)
class NoAction:
    """No operation. ``suppressed_by`` lists what held back an action the policy wanted
    (cooldowns, caps, guards), in the order the procedure met them; empty when nothing did."""

    reason: str
    suppressed_by: tuple[str, ...] = ()


Decision = Split | Merge | Rebucket | NoAction


def within_cooldown(last_ms: int | None, cooldown_s: float, now_ms: int) -> bool:
    """``last ≠ never and now − last < cooldown`` (equality is outside, reference §4.3)."""
    return last_ms is not None and now_ms - last_ms < cooldown_s * 1000


def next_pow2(v: int) -> int:
    """Smallest power of two ``>= v`` for ``v >= 1`` (reference §4.3 helpers)."""
    return 1 if v <= 1 else 1 << (v - 1).bit_length()


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def decide(
    layout: SegmentLayout,
    load_by_segment: Mapping[int, SegmentLoadSample],
    consumers_by_subscription: Mapping[str, int],
    config: AutoScaleConfig,
    now_ms: int,
    last_split_ms: int | None = None,
    last_merge_ms: int | None = None,
    last_rebucket_ms: int | None = None,
) -> Decision:
    """One auto-scale evaluation: exactly the procedure of reference §4.3.

    - ``load_by_segment``: active segment id → last written :class:`SegmentLoadSample` (missing
      ⇒ zero rates, never merge-eligible).
    - ``consumers_by_subscription``: STREAM/CHECKPOINT subscription → registered consumers
      (QUEUE subscriptions are excluded by the caller).
    - ``last_*_ms``: event-time ms of the last applied action of that kind, ``None`` = never.

    Order: disabled/invalid → consumer-scale lane (split or rebucket) → load split → merge.
    Never raises for an invalid config: returns ``NoAction("invalid-config")``.
    """
    if not config.enabled:
        return NoAction(REASON_DISABLED)
    if not config.valid:
        return NoAction(REASON_INVALID_CONFIG)

    active = layout.active_segments  # ascending id
    s_count = len(active)
    consumers = max(consumers_by_subscription.values(), default=0)
    suppressed: list[str] = []

    def rates(sid: int) -> tuple[float, float, float, float]:
        sample = load_by_segment.get(sid)
        return sample.rates if sample is not None else (0.0, 0.0, 0.0, 0.0)

    # 1. Consumer-scale lane.
    if consumers > s_count:
        lane = _consumer_lane(layout, rates, consumers, config, now_ms, last_split_ms,
                              last_rebucket_ms, suppressed)
        if lane is not None:
            return lane

    # 2. Load split.
    split = _load_split(active.values(), rates, config)
    if split is not None:
        blocked = _split_blocked(s_count, config, now_ms, last_split_ms)
        if blocked is None:
            return split
        suppressed.append(blocked)

    # 3. Merge.
    merge, merge_suppressed = _merge_candidate(layout, load_by_segment, consumers, config, now_ms)
    if merge is not None:
        blocked = _merge_blocked(s_count, config, now_ms, last_merge_ms)
        if blocked is None:
            return merge
        suppressed.append(blocked)
    suppressed.extend(merge_suppressed)
    return NoAction(REASON_NOTHING_TO_DO, tuple(dict.fromkeys(suppressed)))


def _split_blocked(s_count: int, config: AutoScaleConfig, now_ms: int,
                   last_split_ms: int | None) -> str | None:
    """The step-level guard that suppresses a load split (max segments, then the split
    cooldown), ``None`` when the split goes ahead."""
    if s_count >= config.max_segments:
        return SUPPRESSED_MAX_SEGMENTS
    if within_cooldown(last_split_ms, config.split_cooldown_s, now_ms):
        return SUPPRESSED_SPLIT_COOLDOWN
    return None


def _merge_blocked(s_count: int, config: AutoScaleConfig, now_ms: int,
                   last_merge_ms: int | None) -> str | None:
    """The step-level guard that suppresses a merge (min segments, then the merge cooldown),
    ``None`` when the merge goes ahead."""
    if s_count <= config.min_segments:
        return SUPPRESSED_MIN_SEGMENTS
    if within_cooldown(last_merge_ms, config.merge_cooldown_s, now_ms):
        return SUPPRESSED_MERGE_COOLDOWN
    return None


def _consumer_lane(layout: SegmentLayout, rates: Any, consumers: int, config: AutoScaleConfig,
                   now_ms: int, last_split_ms: int | None, last_rebucket_ms: int | None,
                   suppressed: list[str]) -> Decision | None:
    """Step 1 of §4.3; ``None`` means "skip lane" (fall through to the load split)."""
    active = layout.active_segments
    s_count = len(active)
    # busiest: highest msg_rate_in, ties → lowest id (ascending iteration + strict >).
    busiest_id, busiest_rate = -1, -math.inf
    for sid in active:
        r = rates(sid)[0]
        if r > busiest_rate:
            busiest_id, busiest_rate = sid, r
    at_cap = s_count >= config.max_segments
    below_floor = busiest_rate < config.split_vs_rebucket_min_msg_rate_in
    if not at_cap and not below_floor:
        if within_cooldown(last_split_ms, config.split_cooldown_s, now_ms):
            suppressed.append(SUPPRESSED_SPLIT_COOLDOWN)
            return None
        return Split(busiest_id, REASON_CONSUMER_COUNT)
    capacity = sum(s.bucket_count for s in active.values())
    if consumers <= capacity:
        return None
    if within_cooldown(last_rebucket_ms, config.rebucket_cooldown_s, now_ms):
        suppressed.append(SUPPRESSED_REBUCKET_COOLDOWN)
        return None
    target = min(next_pow2(ceil_div(consumers, s_count)), config.max_buckets_per_segment)
    below = tuple(sid for sid, s in active.items() if s.bucket_count < target)
    if not below:
        suppressed.append(SUPPRESSED_BUCKET_CAPACITY)
        return None
    reason = REASON_AT_MAX_SEGMENTS if at_cap else REASON_BELOW_SPLIT_RATE_FLOOR
    return Rebucket(below, target, reason)


def _load_split(active: Iterable[SegmentInfo], rates: Any,
                config: AutoScaleConfig) -> Split | None:
    """Step 2 of §4.3 without its guards: the segment with the highest score > 1.0."""
    best: Split | None = None
    best_score = 1.0
    thresholds = config.split_thresholds
    for seg in active:
        r = rates(seg.segment_id)
        score, metric = -math.inf, 0
        for i in range(4):
            ratio = r[i] / thresholds[i]
            if ratio > score:  # first-in-order wins among equal ratios
                score, metric = ratio, i
        if score > best_score:
            best, best_score = Split(seg.segment_id, RATE_REASONS[metric]), score
    return best


def _pair_blocked(layout: SegmentLayout, a: SegmentInfo, b: SegmentInfo,
                  config: AutoScaleConfig, total_cap: int, used: int) -> str | None:
    """The pair-level guard that rules out merging ``a`` and ``b`` (DAG depth, then bucket
    capacity for the ``used`` consumers out of ``total_cap``), ``None`` when mergeable."""
    if (layout.merge_depth(a.segment_id) >= config.max_dag_depth
            or layout.merge_depth(b.segment_id) >= config.max_dag_depth):
        return SUPPRESSED_MAX_DAG_DEPTH
    pair = a.bucket_count + b.bucket_count
    if total_cap - pair + min(pair, config.max_buckets_per_segment) < used:
        return SUPPRESSED_MERGE_CAPACITY
    return None


def _merge_candidate(layout: SegmentLayout, load_by_segment: Mapping[int, SegmentLoadSample],
                     consumers: int, config: AutoScaleConfig,
                     now_ms: int) -> tuple[Merge | None, list[str]]:
    """Step 3 of §4.3 without its step-level guards: the cold adjacent pair with the strictly
    smallest combined rate. Also returns the pair-level guards that rejected a cold pair."""
    active = list(layout.active_segments.values())
    if len(active) < 2:  # no pair (most quiet topics): nothing to merge, nothing suppressed
        return None, []
    total_cap = sum(s.bucket_count for s in active)
    used = min(consumers, total_cap)
    thresholds = config.merge_thresholds
    window_ms = config.merge_window_s * 1000

    def cold(seg: SegmentInfo) -> bool:
        sample = load_by_segment.get(seg.segment_id)
        return (sample is not None and now_ms - sample.modified_at_ms >= window_ms
                and all(r < t for r, t in zip(sample.rates, thresholds, strict=True)))

    best: Merge | None = None
    best_combined = math.inf
    suppressed: list[str] = []
    for i, a in enumerate(active):
        for b in active[i + 1:]:
            if not a.is_adjacent(b):
                continue
            both_cold = cold(a) and cold(b)
            blocked = _pair_blocked(layout, a, b, config, total_cap, used)
            if blocked is not None:
                if both_cold:
                    suppressed.append(blocked)
                continue
            if not both_cold:
                continue
            combined = sum(load_by_segment[a.segment_id].rates) + sum(
                load_by_segment[b.segment_id].rates)
            if combined < best_combined:
                best, best_combined = Merge(a.segment_id, b.segment_id, REASON_COLD), combined
    return best, suppressed
