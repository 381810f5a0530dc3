"""Per-topic scalable-topic controller in event time (reference §4.7, §5, §5.1, §6.1, §1.3).

One :class:`TopicController` owns a topic's :class:`SegmentLayout` and replays, in event time,
what Pulsar's controller, load reporter and producers' segment routers do:

- **Routing** (§1.3): a keyed message goes to the active segment whose range holds its
  ``segment_hash``; a keyless message goes round-robin over the active segments (sorted by range)
  with one counter per producer. Its bucket is ``bucket_of(splits, hash_b)`` (keyless → 0).
- **Stats updates** (§5.1) at ``stats_anchor_ms + stats_update_initial_delay_ms + k *
  stats_update_frequency_ms``: every loaded segment's TopicStats rates become "messages (bytes)
  since the previous update / elapsed seconds" (:class:`~pipelines.core.load.TopicStatsRates`)
  and stay constant until the next update; a segment created in between reads 0 until then.
- **Load sweeps** every ``load_report_interval_ms`` over every loaded segment — the active ones
  and the sealed ones still loaded — writing what they read through the 25 % material-change
  gate (§5). A sealed segment's producers are closed at its seal (§7.2), so its in-rates fall
  to 0 at the next stats update and that record is written; the evaluator reads the active
  segments' records only.
- **Evaluations** at every ``auto_scale_interval_ms`` tick, at each consumer registration (a
  join or a reconnect of a STREAM / grouped CHECKPOINT consumer; a leave does not evaluate,
  reference §7.3) and at follow-ups after a split (``split_cooldown + 1 ms``) or rebucket
  (``rebucket_cooldown + 1 ms``); triggers at the same instant coalesce into one evaluation
  (§4.7).
- **Consumer count** (§4.1, §6.1): a registered session counts until it is unregistered — at
  once for a clean close, ``consumer_grace_ms`` after a lost connection.
- **Cooldown clocks** are set to the evaluation time only when an operation succeeds.

Event-time model (docs/design.md): an evaluation at ``T`` uses data with ``event_ms < T``;
the new layout applies to messages with ``event_ms >= T``. At one instant the order is: stats
update, load sweep, then evaluation. Sweeps and ticks are aligned to multiples of their interval
on the event clock; stats updates to the anchor (the emulated broker start: the replay's first
event, given by the caller as ``stats_anchor_ms``, else the topic's first event), carried in the
controller's state.

Emulator refinements, documented here because Pulsar has no equivalent:
- ``msg_rate_out``/``bytes_rate_out``: every message is dispatched at its publish time once per
  subscription with a connected consumer then (consumers assumed to keep up; dispatch runs
  later), counted per stats period like the in-rates. A sealed segment's subscriptions stay, so
  its first update after the seal still counts what was dispatched before the seal.
- A stats period's elapsed time starts at the previous update, or at the segment's creation if
  later (Pulsar's ``Rate`` starts with its producer / consumer; the replay does not model when
  they connect).
- A sealed segment stays loaded (swept) until a sweep reads all-zero rates with nothing left to
  count, then it is unloaded: Pulsar keeps it until retention prunes it (not emulated), and
  every later sweep would read the same zeros and write nothing.
- ``segment_load`` rows are kept for samples that read a non-zero rate or wrote a record;
  idle samples (zero rates, nothing written) produce no row.
- A suppressed evaluation (``NoAction`` with ``suppressed_by``) is recorded when its suppression
  differs from the previous evaluation's, so a standing block is one row, not one per tick.
- Idle stretches are skipped: while no segment has traffic in its window and every written rate is
  zero, samples and ticks are evaluated only where their outcome can change (cooldown expiry,
  merge-window eligibility, consumer-count change), which gives the same rows as ticking through.
  Likewise a run of sweeps with no other control event at their instants is taken in one step
  (between two of them nothing a sweep reads changes: rates move at stats updates, the layout
  at evaluations), and messages are counted only before the events that read the counts
  (stats updates, evaluations): the same rows as running every sweep (a test compares).
- Sealed segments are never pruned (retention GC is not emulated).
"""

from __future__ import annotations

import bisect
import functools
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from pipelines.core.assignment import (
    CONSUMER_SESSION_GRACE_MS,
    LeaveHow,
    SubscriptionType,
    session_end_ms,
)
from pipelines.core.buckets import bucket_of_array
from pipelines.core.heavy_hitters import KeyStats
from pipelines.core.layout import SegmentLayout
from pipelines.core.load import (
    DEFAULT_RATE_CHANGE_THRESHOLD,
    DEFAULT_STATS_UPDATE_FREQUENCY_MS,
    DEFAULT_STATS_UPDATE_INITIAL_DELAY_MS,
    Rates,
    SegmentLoadReporter,
    TopicStatsRates,
)
from pipelines.core.policy import (
    AutoScaleConfig,
    Decision,
    Merge,
    NoAction,
    Rebucket,
    Split,
    decide,
)
from pipelines.core.sorting import stable_argsort

DECISION_ACTIONS: tuple[str, ...] = ("split", "merge", "rebucket", "none")
"""Every ``action`` of a decision row (``autoscale_decisions.action``)."""
ACTION_SPLIT, ACTION_MERGE, ACTION_REBUCKET, ACTION_NONE = DECISION_ACTIONS
CREATED_BY: tuple[str, ...] = ("initial", "split", "merge", "rebucket")
"""Every ``created_by`` of a segment row (``segments.created_by``)."""
OPERATION_FAILED_PREFIX = "operation-failed: "
"""Prefix of the ``suppressed_by`` item recorded when applying a decision failed."""
SAMPLE_COLUMNS: tuple[str, ...] = ("sample_time_ms", "segment_id", "msg_rate_in", "bytes_rate_in",
                                   "msg_rate_out", "bytes_rate_out", "written", "modified_at_ms")
"""Columns of a load-sample row (:meth:`TopicController.take_outputs`), in order."""
SAMPLE_DTYPE = np.dtype(list(zip(SAMPLE_COLUMNS, ["i8", "i8", "f8", "f8", "f8", "f8", "?", "i8"],
                                 strict=True)))
"""Their types (ms and ids int64, rates float64, ``written`` bool), as a NumPy record."""
_LIST_MAX = 1 << 16
_REPEAT_SWEEPS = True
"""Take a run of sweeps alone at once and count messages only where read (the fast path of
:meth:`TopicController.advance`); ``False`` runs every event one by one (the tests compare)."""
"""Longest chunk whose event times are copied to a list for the event loop's look-ups."""


class Trigger(StrEnum):
    TICK = "tick"
    CONSUMER_REGISTRATION = "consumer-registration"
    FOLLOW_UP = "follow-up"


@dataclass(frozen=True)
class ConsumerSpec:
    """A consumer session: registers at ``join_ms``, disconnects at ``leave_ms`` (None = never)
    the way ``leave_how`` says, and re-registers (reconnects) at each of ``reconnects_ms``
    (event-time ms).

    ``leave_how`` (reference §6.1): ``close`` (a clean close) unregisters at ``leave_ms``;
    ``crash`` (a lost connection) keeps the session registered for the grace period, then it
    expires. A reconnect is a register call for an existing name (§6.1, §7.3): it triggers an
    auto-scale evaluation, but no rebalance, and the consumer count does not change. The replay
    assumes the connection dropped and came back within the grace period, so the session never
    left. Each reconnect must lie strictly between ``join_ms`` and ``leave_ms``; ``ValueError``
    otherwise.
    """

    name: str
    join_ms: int
    leave_ms: int | None = None
    reconnects_ms: tuple[int, ...] = ()
    leave_how: LeaveHow = LeaveHow.CLOSE

    def __post_init__(self) -> None:
        for r in self.reconnects_ms:
            if r <= self.join_ms or (self.leave_ms is not None and r >= self.leave_ms):
                raise ValueError(f"consumer {self.name}: reconnect at {r} ms must lie after its "
                                 f"join ({self.join_ms} ms) and before its leave "
                                 f"({self.leave_ms} ms)")


@dataclass(frozen=True)
class SubscriptionSpec:
    """A subscription and its consumers.

    ``grouped=False`` (CHECKPOINT only; ``ValueError`` otherwise): checkpoint consumers created
    without a consumer group (reference §7.3, apache/pulsar PR #25622). They do not register with
    the coordinator, are not counted for the consumer-count lane and trigger no evaluation; each
    reads every segment through its own cursor, so each connected one adds to ``msg_rate_out``.
    """

    name: str
    type: SubscriptionType
    consumers: tuple[ConsumerSpec, ...] = ()
    grouped: bool = True

    def __post_init__(self) -> None:
        if not self.grouped and self.type is not SubscriptionType.CHECKPOINT:
            raise ValueError(f"subscription {self.name}: only a checkpoint subscription can be "
                             f"ungrouped, not a {self.type.value} one")

    @property
    def registers(self) -> bool:
        """Its consumers register with the coordinator (STREAM, grouped CHECKPOINT): they count
        for the consumer-count lane and their registrations trigger evaluations."""
        return self.type is not SubscriptionType.QUEUE and self.grouped

    def registration_times(self) -> list[int]:
        """Event-time ms of every register call (joins and reconnects), ascending, with
        repeats; ``[]`` for a subscription whose consumers do not register."""
        if not self.registers:
            return []
        return sorted(t for c in self.consumers for t in (c.join_ms, *c.reconnects_ms))


@dataclass(frozen=True)
class ControllerSettings:
    """Topic-level settings of the controller (times in event-time ms)."""

    policy: AutoScaleConfig = field(default_factory=AutoScaleConfig)
    initial_segments: int = 1
    bucket_budget: int = 4
    auto_scale_interval_ms: int = 60_000
    load_report_interval_ms: int = 10_000
    stats_update_frequency_ms: int = DEFAULT_STATS_UPDATE_FREQUENCY_MS
    stats_update_initial_delay_ms: int = DEFAULT_STATS_UPDATE_INITIAL_DELAY_MS
    stats_anchor_ms: int | None = None
    """Emulated broker start, from which stats updates are timed (§5.1); ``None`` = the topic's
    first event. A later anchor than the topic's first event is taken as that event."""
    rate_change_threshold: float = DEFAULT_RATE_CHANGE_THRESHOLD
    consumer_grace_ms: int = CONSUMER_SESSION_GRACE_MS


@dataclass(frozen=True)
class RoutedMessages:
    """Routing of one chunk of messages, aligned with the input order.

    ``segment_id`` int64, ``bucket_index`` int32, ``layout_epoch`` int64."""

    segment_id: npt.NDArray[np.int64]
    bucket_index: npt.NDArray[np.int32]
    layout_epoch: npt.NDArray[np.int64]


@dataclass
class TopicController:
    """Event-time controller of one topic. Feed messages in event-time order with
    :meth:`advance`; call :meth:`finish` at end of input; collect rows with
    :meth:`take_outputs`. The whole object is picklable (it is the per-topic state)."""

    topic: str
    settings: ControllerSettings
    subscriptions: tuple[SubscriptionSpec, ...] = ()
    layout: SegmentLayout | None = None
    reporter: SegmentLoadReporter = field(init=False)
    stats: TopicStatsRates = field(init=False)
    last_split_ms: int | None = None
    last_merge_ms: int | None = None
    last_rebucket_ms: int | None = None
    _clock_ms: int = -1  # every event with time <= _clock_ms has run
    _horizon_ms: int = -(2**62)  # every message with event_ms < _horizon_ms has been seen
    _next_sample_ms: int = 0
    _next_tick_ms: int = 0
    _next_update_ms: int = 0
    _follow_ups: list[int] = field(default_factory=list)  # heap
    _registrations: list[int] = field(default_factory=list)  # sorted join times not yet run
    _rr_counters: dict[str, int] = field(default_factory=dict)
    _offered: dict[int, Rates] = field(default_factory=dict)  # rates last offered to the gate
    _last_suppressed: tuple[str, ...] = ()
    _decisions: list[dict[str, Any]] = field(default_factory=list)
    _samples: list[tuple[Any, ...]] = field(default_factory=list)  # SAMPLE_COLUMNS order
    _last_message_ms: int = -1
    _quiet_evaluated: bool = False  # an evaluation ran while idle and nothing moved since
    key_stats: KeyStats | None = None  # the topic's key statistics (issue #34), fed by the caller

    def __post_init__(self) -> None:
        s = self.settings
        self.reporter = SegmentLoadReporter(s.rate_change_threshold)
        self.stats = self._new_stats(0 if s.stats_anchor_ms is None else s.stats_anchor_ms)
        self._set_steps()
        self._registrations = list(self._steps.registrations)

    def _set_steps(self) -> None:
        """The subscriptions' step functions (:func:`_subscription_steps`: shared by every
        controller of the same subscriptions, not kept in the pickled state)."""
        try:
            self._steps = _subscription_steps(self.subscriptions, self.settings.consumer_grace_ms)
        except TypeError:  # unhashable (lists given for tuples): not shared
            self._steps = _subscription_steps.__wrapped__(self.subscriptions,
                                                          self.settings.consumer_grace_ms)
        self._fan_out_ms, self._fan_out = self._steps.fan_out_ms, self._steps.fan_out
        self._consumers_ms, self._consumers = self._steps.consumers_ms, self._steps.consumers

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in _DERIVED}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._set_steps()

    # ---- public API -----------------------------------------------------------------------
    def advance(self, event_ms: npt.NDArray[np.int64], segment_hash: npt.NDArray[np.int64],
                hash_b: npt.NDArray[np.int64], payload_size: npt.NDArray[np.int64],
                producer_name: Sequence[str | None] | npt.NDArray[Any],
                horizon_ms: int) -> RoutedMessages:
        """Route one chunk of messages and run every control event with time ``<= horizon_ms``.

        Arrays are aligned, sorted by ``event_ms`` (ms, int64), and every ``event_ms`` must be
        ``< horizon_ms`` and ``>=`` any earlier chunk's horizon. ``segment_hash``/``hash_b`` are
        ``-1`` for keyless messages; ``payload_size`` is bytes. ``producer_name`` is read only
        where the message is keyless (round-robin routing, reference §1.3): elsewhere it may
        hold anything. ``ValueError`` on unsorted or out-of-horizon input.
        """
        ev = np.asarray(event_ms, dtype=np.int64)
        n = len(ev)
        if n and (np.any(np.diff(ev) < 0) or ev[-1] >= horizon_ms
                  or ev[0] < self._horizon_ms):
            raise ValueError(f"topic {self.topic}: messages must be sorted by event time, at or "
                             f"after the last horizon ({self._horizon_ms}) and before "
                             f"{horizon_ms}")
        if self.layout is None:
            if n == 0:
                return _empty_routing()
            self._create(int(ev[0]))
        if n == 0:  # only time moves (an idle window, the end of input): nothing to route
            self._run_events(horizon_ms)
            self._horizon_ms = max(self._horizon_ms, horizon_ms)
            return _empty_routing()
        routed = RoutedMessages(np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int32),
                                np.empty(n, dtype=np.int64))
        sh = np.asarray(segment_hash, dtype=np.int64)
        hb = np.asarray(hash_b, dtype=np.int64)
        producers = np.asarray(producer_name, dtype=object)
        sizes = np.asarray(payload_size, dtype=np.int64)
        fan_out = self._fan_out_at(ev)  # does not depend on the layout
        # Scalar look-ups per control event: a list's are cheaper than NumPy's; a long chunk
        # has few events per message, and is not copied.
        times: Sequence[int] | npt.NDArray[np.int64] = ev.tolist() if n <= _LIST_MAX else ev
        # Messages are routed once per layout: from ``lo`` to the end of the chunk under the
        # current one, again from the change on when an evaluation replaces it.
        lo, span = 0, self._route(0, ev, sh, hb, producers, sizes, fan_out, routed)
        i = 0
        steady = False  # nothing a sweep reads changed since the last sweep
        while True:
            t = self._next_event_ms(int(times[i]) if i < n else None, horizon_ms)
            if t is None or t > horizon_ms:
                break
            if self._fast_sweeps(t):
                # Only stats updates and evaluations read the counts (and the idle skip, while
                # ``_quiet_evaluated``): sweeps alone leave the messages before them to be
                # counted with the next ones (the sums are the same).
                self._sweeps_alone(t, horizon_ms, steady)
                steady = True
                continue
            j = bisect.bisect_left(times, t, i)
            self._account(span, i, j)
            i = j
            layout = self.layout
            steady = self._run_events_at(t)
            if self.layout is not layout:
                self._commit_round_robin(sh[lo:i], producers[lo:i])
                lo, span = i, self._route(i, ev, sh, hb, producers, sizes, fan_out, routed)
        self._account(span, i, n)
        self._commit_round_robin(sh[lo:n], producers[lo:n])
        if n:
            self._last_message_ms = int(ev[-1])
        self._horizon_ms = max(self._horizon_ms, horizon_ms)
        return routed

    def finish(self, end_ms: int | None = None) -> None:
        """End of input at ``end_ms`` (ms, exclusive: the log's last message + 1, the same for
        every topic; default: this topic's last message + 1): run the control events up to and
        including the first auto-scale tick after the end's last millisecond (so the last
        partial interval is evaluated). A topic that went quiet earlier keeps being swept until
        then, as a broker keeps running (its rates fall to the zero record, reference §5.1):
        the end does not depend on where the input was cut into windows."""
        if self.layout is None:
            return
        iv = self.settings.auto_scale_interval_ms
        last = self._last_message_ms if end_ms is None else max(self._last_message_ms,
                                                                 int(end_ms) - 1)
        end = (last // iv + 1) * iv
        self.advance(_NO_TIMES, _NO_TIMES, _NO_TIMES, _NO_TIMES, [], end + 1)

    def _run_events(self, horizon_ms: int) -> None:
        """Every control event with time ``<= horizon_ms`` when no message comes before it:
        :meth:`advance`'s loop without routing or counting (the sweeps alone taken as there)."""
        steady = False
        while (t := self._next_event_ms(None, horizon_ms)) is not None and t <= horizon_ms:
            if self._fast_sweeps(t):
                self._sweeps_alone(t, horizon_ms, steady)
                steady = True
            else:
                steady = self._run_events_at(t)

    def take_outputs(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``(decisions, load_samples)`` rows produced since the last call (and clears them).

        decision row: eval_time_ms, trigger, action (split|merge|rebucket|none), segment_ids,
        new_bucket_count, reason, suppressed_by, active_segments, consumers, bucket_capacity,
        layout_epoch. sample row: sample_time_ms, segment_id, msg_rate_in, bytes_rate_in,
        msg_rate_out, bytes_rate_out (msg/s, bytes/s), written, modified_at_ms.
        """
        d, s = self.take_rows()
        return d, [dict(zip(SAMPLE_COLUMNS, row, strict=True)) for row in s]

    def take_rows(self) -> tuple[list[dict[str, Any]], list[tuple[Any, ...]]]:
        """:meth:`take_outputs` with each sample row a tuple in :data:`SAMPLE_COLUMNS` order
        (hundreds of thousands of rows at 10,000 topics: a dict each cost more than the
        sweep that made it)."""
        d, s = self._decisions, self._samples
        self._decisions, self._samples = [], []
        return d, s

    def consumers_by_subscription(self, now_ms: int) -> dict[str, int]:
        """Registered sessions per STREAM / grouped CHECKPOINT subscription at ``now_ms`` (incl.
        those disconnected within the grace period, reference §4.1; a reconnect changes
        nothing). QUEUE subscriptions and ungrouped CHECKPOINT ones are not keys (§4.1, §7.3)."""
        return _consumers_by_subscription(self.subscriptions, self.settings.consumer_grace_ms,
                                          now_ms)

    def _consumers_at(self, now_ms: int) -> dict[str, int]:
        """:meth:`consumers_by_subscription` at ``now_ms`` from the step function (shared: not
        to be modified)."""
        return self._consumers[bisect.bisect_right(self._consumers_ms, now_ms)]

    def _session_end_ms(self, c: ConsumerSpec) -> int | None:
        """When ``c``'s session is unregistered: at its leave for a clean close, after the
        grace period for a lost connection (§6.1)."""
        return session_end_ms(c.leave_ms, c.leave_how, self.settings.consumer_grace_ms)

    def connected_subscriptions(self, now_ms: int) -> int:
        """Subscriptions on a segment topic with a connected consumer at ``now_ms``: one per
        subscription (any type) with at least one connected consumer, except that every
        connected consumer of an ungrouped CHECKPOINT subscription reads through a subscription
        of its own and counts once (the fan-out of ``msg_rate_out``)."""
        return _connected_subscriptions(self.subscriptions, now_ms)

    def _fan_out_at(self, event_ms: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """:meth:`connected_subscriptions` at each of ``event_ms`` (vectorized)."""
        out: npt.NDArray[np.int64] = self._fan_out[
            np.searchsorted(self._fan_out_ms, event_ms, side="right")]
        return out

    # ---- creation & routing ------------------------------------------------------------------
    def _new_stats(self, anchor_ms: int) -> TopicStatsRates:
        s = self.settings
        return TopicStatsRates(anchor_ms, s.stats_update_frequency_ms,
                               s.stats_update_initial_delay_ms)

    def _create(self, t0: int) -> None:
        s = self.settings
        self.layout = SegmentLayout.initial(s.initial_segments, s.bucket_budget, now_ms=t0)
        self._clock_ms = t0 - 1
        self.stats = self._new_stats(t0 if s.stats_anchor_ms is None
                                     else min(s.stats_anchor_ms, t0))
        for sid in self.layout.active_segments:
            self.stats.load(sid, t0)
        self._next_update_ms = self.stats.next_update_ms(t0)
        self._next_sample_ms = _ceil_to(t0, s.load_report_interval_ms)
        self._next_tick_ms = _ceil_to(t0 + 1, s.auto_scale_interval_ms)
        # Consumers registered before the topic existed are evaluated at its creation.
        if self._registrations and self._registrations[0] < t0:
            self._registrations = [t0] + [t for t in self._registrations if t >= t0]

    def _route(self, lo: int, ev: npt.NDArray[np.int64], sh: npt.NDArray[np.int64],
               hb: npt.NDArray[np.int64], producers: npt.NDArray[Any], sizes: npt.NDArray[np.int64],
               fan_out: npt.NDArray[np.int64], routed: RoutedMessages) -> _SpanLoad | None:
        """Route the messages from ``lo`` to the end of the chunk under the current layout into
        ``routed`` (filled in place) and return their load, to be accounted event by event
        (``None`` when there is nothing to route). Keyless messages take the producers' current
        counters without moving them (:meth:`_commit_round_robin` does, for the messages that
        stay routed under this layout)."""
        if lo == len(ev):
            return None
        layout = self.layout
        assert layout is not None
        s_hash = sh[lo:]
        keyed = s_hash >= 0
        if keyed.all():
            out = layout.route_array(s_hash)
        else:
            out = np.empty(len(s_hash), dtype=np.int64)
            out[keyed] = layout.route_array(s_hash[keyed])
            out[~keyed] = self._round_robin(producers[lo:][~keyed])
        routed.segment_id[lo:] = out
        routed.layout_epoch[lo:] = layout.epoch
        h_b = np.where(hb[lo:] >= 0, hb[lo:], 0)
        active = layout.active_segments
        if len(active) == 1:
            routed.bucket_index[lo:] = bucket_of_array(next(iter(active.values())).bucket_splits,
                                                       h_b)
        else:
            b = np.zeros(len(out), dtype=np.int32)
            for sid in np.unique(out):
                m = out == sid
                b[m] = bucket_of_array(layout.segments[int(sid)].bucket_splits, h_b[m])
            routed.bucket_index[lo:] = b
        return _SpanLoad(lo, out, sizes[lo:], fan_out[lo:])

    def _account(self, span: _SpanLoad | None, i: int, j: int) -> None:
        """Count the load of messages ``[i, j)`` of the chunk (routed in ``span``). They lie
        within one stats period: updates are control events."""
        if span is None or i == j:
            return
        self._quiet_evaluated = False
        for sid, counts in span.between(i, j):
            self.stats.add(sid, *counts)

    def _round_robin(self, producers: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """Keyless routing: per producer ``index = counter++ % n`` over active segments sorted by
        range start (reference §1.3). Vectorized over producers: each message's counter is its
        producer's counter plus its rank among that producer's messages of the slice (cost
        follows messages, not producers). The counters do not move here."""
        assert self.layout is not None
        _, ids = self.layout.routing_table()
        names, inverse, counts = np.unique(producers.astype(str), return_inverse=True,
                                           return_counts=True)
        start = np.fromiter((self._rr_counters.get(str(name), 0) for name in names),
                            dtype=np.int64, count=len(names))
        order = stable_argsort(inverse)
        rank = np.empty(len(producers), dtype=np.int64)
        rank[order] = np.arange(len(producers), dtype=np.int64) - np.repeat(
            np.cumsum(counts) - counts, counts)
        out: npt.NDArray[np.int64] = np.asarray(ids, dtype=np.int64)[
            (start[inverse] + rank) % len(ids)]
        return out

    def _commit_round_robin(self, sh: npt.NDArray[np.int64], producers: npt.NDArray[Any]) -> None:
        """Move the producers' keyless counters past the keyless messages (``sh < 0``) of a
        span routed under one layout."""
        keyless = sh < 0
        if not keyless.any():
            return
        names, counts = np.unique(producers[keyless].astype(str), return_counts=True)
        for name, count in zip(names.tolist(), counts.tolist(), strict=True):
            self._rr_counters[name] = self._rr_counters.get(name, 0) + count

    # ---- event loop ---------------------------------------------------------------------------
    def _next_event_ms(self, next_message_ms: int | None, horizon_ms: int) -> int | None:
        """Time of the next control event, skipping idle samples/ticks (see module doc)."""
        s = self.settings
        if self._quiet_evaluated and self._idle():
            # Nothing can change before the next message, registration, follow-up or the
            # earliest time a time-dependent guard flips: jump the grids there.
            guard = self._wake_time()
            wake = min(x for x in (next_message_ms, guard, horizon_ms + 1) if x is not None)
            if wake == guard:  # a guard flips: the tick after it must evaluate
                self._quiet_evaluated = False
            self._next_sample_ms = max(self._next_sample_ms,
                                       _floor_to(wake, s.load_report_interval_ms))
            self._next_tick_ms = max(self._next_tick_ms, _ceil_to(wake, s.auto_scale_interval_ms))
            self._next_update_ms = max(self._next_update_ms, self.stats.next_update_ms(wake))
        candidates = [self._next_update_ms, self._next_sample_ms, self._next_tick_ms]
        if self._follow_ups:
            candidates.append(self._follow_ups[0])
        if self._registrations:
            candidates.append(self._registrations[0])
        return min(candidates)

    def _idle(self) -> bool:
        for sid in self.stats.loaded:
            if self.stats.has_data(sid):
                return False
            last = self.reporter.last_written(sid)
            if last is None or any(last.rates):
                return False
        return True

    def _wake_time(self) -> int | None:
        """Earliest future time an evaluation outcome could change while idle."""
        p = self.settings.policy
        times = [t for t in (
            _after(self.last_split_ms, p.split_cooldown_s),
            _after(self.last_merge_ms, p.merge_cooldown_s),
            _after(self.last_rebucket_ms, p.rebucket_cooldown_s),
        ) if t is not None]
        assert self.layout is not None
        for sid in self.layout.active_segments:
            last = self.reporter.last_written(sid)
            if last is not None:
                times.append(last.modified_at_ms + p.merge_window_s * 1000)
        times += [t for sub in self.subscriptions for c in sub.consumers
                  for t in (c.leave_ms, self._session_end_ms(c)) if t is not None]
        future = [t for t in times if t > self._clock_ms]
        return min(future) if future else None

    def _fast_sweeps(self, t: int) -> bool:
        """The events at ``t`` are sweeps alone to take at once (:meth:`_sweeps_alone`): the
        fast path is on and the idle skip is not armed (it reads the counts)."""
        return _REPEAT_SWEEPS and not self._quiet_evaluated and self._sweep_alone(t)

    def _sweep_alone(self, t: int) -> bool:
        """The control events at ``t`` are a load sweep and nothing else (no stats update, no
        evaluation)."""
        return (t == self._next_sample_ms and t != self._next_update_ms
                and t != self._next_tick_ms
                and not (self._registrations and self._registrations[0] == t)
                and not (self._follow_ups and self._follow_ups[0] == t))

    def _sweeps_alone(self, t: int, horizon_ms: int, steady: bool) -> None:
        """Run the sweeps alone from ``t`` up to the next other control event (and at most to
        ``horizon_ms``, included) at once: the first as :meth:`_sample` (unless ``steady``:
        nothing a sweep reads changed since the last one), the others as repeats of it.
        Between them nothing a sweep reads changes (rates move only at stats updates, the
        layout only at evaluations; the first sweep offered every loaded segment's rates to
        the gate and unloaded what it would), so each writes nothing and gives the first one's
        rows at its own time: what :meth:`_sample` would give, one by one."""
        iv = self.settings.load_report_interval_ms
        stop = min(self._next_update_ms, self._next_tick_ms, horizon_ms + 1,
                   *(self._registrations[:1]), *(self._follow_ups[:1]))
        if not steady:
            self._sample(t)
            t += iv
        times = range(t, stop, iv)
        if times:
            rows = []
            for sid in self.stats.loaded:
                rates = self.stats.rates(sid)
                if any(rates):
                    last = self.reporter.last_written(sid)
                    assert last is not None
                    rows.append((sid, *rates, False, last.modified_at_ms))
            if rows:
                self._samples += [(u, *row) for u in times for row in rows]
        self._next_sample_ms = t if not times else times[-1] + iv
        self._clock_ms = self._next_sample_ms - iv

    def _run_events_at(self, t: int) -> bool:
        """Run the control events at ``t`` (stats update, sweep, then one evaluation of the
        coalesced triggers). Returns whether a sweep ran and nothing changed after it (the
        layout stayed): the next sweep alone repeats it."""
        s = self.settings
        layout = self.layout
        swept = t == self._next_sample_ms
        triggers: list[Trigger] = []
        if t == self._next_update_ms:
            self.stats.update(t)
            self._next_update_ms += s.stats_update_frequency_ms
        if t == self._next_sample_ms:
            self._sample(t)
            self._next_sample_ms += s.load_report_interval_ms
        if t == self._next_tick_ms:
            triggers.append(Trigger.TICK)
            self._next_tick_ms += s.auto_scale_interval_ms
        while self._registrations and self._registrations[0] == t:
            self._registrations.pop(0)
            triggers.append(Trigger.CONSUMER_REGISTRATION)
        while self._follow_ups and self._follow_ups[0] == t:
            heapq.heappop(self._follow_ups)
            triggers.append(Trigger.FOLLOW_UP)
        if triggers:
            self._evaluate(t, "+".join(dict.fromkeys(triggers)))
        self._clock_ms = t
        return swept and self.layout is layout

    def _sample(self, t: int) -> None:
        """The load sweep at ``t`` over every loaded segment, by id (§5, §5.1). A sealed segment
        that read zeros with nothing left to count is unloaded after it."""
        assert self.layout is not None
        active = self.layout.active_segments
        for sid in self.stats.loaded:
            rates = self.stats.rates(sid)
            # Rates change only at stats updates; rates already offered to the gate cannot
            # be written again (the baseline is them, or they were not a material change).
            written = self._offered.get(sid) != rates and self.reporter.report(sid, rates, t)
            self._offered[sid] = rates
            if written or any(rates):
                last = self.reporter.last_written(sid)
                assert last is not None
                self._samples.append((t, sid, *rates, written, last.modified_at_ms))
            if sid not in active and not self.stats.has_data(sid):
                self.stats.unload(sid)
                self.reporter.forget(sid)
                del self._offered[sid]

    def _evaluate(self, t: int, trigger: str) -> None:
        layout = self.layout
        assert layout is not None
        p = self.settings.policy
        consumers = self._consumers_at(t)
        decision = decide(layout, self.reporter.samples, consumers, p, t, self.last_split_ms,
                          self.last_merge_ms, self.last_rebucket_ms)
        failure = self._apply(decision, t)
        self._quiet_evaluated = isinstance(decision, NoAction) and self._idle()
        if isinstance(decision, NoAction):
            if decision.suppressed_by == self._last_suppressed:
                return
            self._last_suppressed = decision.suppressed_by
            if not decision.suppressed_by:
                return
        else:
            self._last_suppressed = ()
        self._decisions.append(self._decision_row(decision, t, trigger, consumers, layout,
                                                  failure))

    def _apply(self, decision: Decision, t: int) -> str | None:
        """Apply a decision to the layout; returns a failure sentence or None."""
        assert self.layout is not None
        if isinstance(decision, NoAction):  # nothing to apply
            return None
        p = self.settings.policy
        before = set(self.layout.active_segments)
        try:
            if isinstance(decision, Split):
                self.layout = self.layout.split(decision.segment_id, now_ms=t)
                self.last_split_ms = t
                heapq.heappush(self._follow_ups, t + p.split_cooldown_s * 1000 + 1)
            elif isinstance(decision, Merge):
                self.layout = self.layout.merge(decision.segment_id_1, decision.segment_id_2,
                                                now_ms=t,
                                                max_buckets_per_segment=p.max_buckets_per_segment)
                self.last_merge_ms = t
            elif isinstance(decision, Rebucket):
                heapq.heappush(self._follow_ups, t + p.rebucket_cooldown_s * 1000 + 1)
                for sid in decision.segment_ids:  # sequential; a failure aborts the rest
                    self.layout = self.layout.rebucket(sid, decision.bucket_count, now_ms=t)
                self.last_rebucket_ms = t
        except ValueError as exc:
            return str(exc)
        finally:
            after = set(self.layout.active_segments)
            for sid in sorted(before - after):  # sealed: its producers are closed (§7.2)
                self.stats.close_producers(sid)
            for sid in sorted(after - before):
                self.stats.load(sid, t)
        return None

    def _decision_row(self, decision: Decision, t: int, trigger: str, consumers: dict[str, int],
                      before: SegmentLayout, failure: str | None) -> dict[str, Any]:
        assert self.layout is not None
        action, new_n = ACTION_NONE, None
        ids: tuple[int, ...] = ()
        if isinstance(decision, Split):
            action, ids = ACTION_SPLIT, (decision.segment_id,)
        elif isinstance(decision, Merge):
            action, ids = ACTION_MERGE, (decision.segment_id_1, decision.segment_id_2)
        elif isinstance(decision, Rebucket):
            action, ids, new_n = ACTION_REBUCKET, decision.segment_ids, decision.bucket_count
        suppressed = decision.suppressed_by if isinstance(decision, NoAction) else ()
        if failure:
            suppressed = (*suppressed, f"{OPERATION_FAILED_PREFIX}{failure}")
        return {
            "eval_time_ms": t, "trigger": trigger, "action": action,
            "segment_ids": list(ids), "new_bucket_count": new_n, "reason": decision.reason,
            "suppressed_by": ", ".join(suppressed) or None,
            "active_segments": len(before.active_segments),
            "consumers": max(consumers.values(), default=0),
            "bucket_capacity": before.bucket_capacity(),
            "layout_epoch": self.layout.epoch,
        }


_DERIVED = ("_steps", "_fan_out_ms", "_fan_out", "_consumers_ms", "_consumers")
"""A controller's attributes derived from its subscriptions and settings: left out of its
pickled state and rebuilt (shared) when it is loaded."""


class _SubscriptionSteps(NamedTuple):
    """What a controller needs of its subscriptions, as step functions (:func:`_subscription_
    steps`); shared between controllers, never modified.

    ``registrations``: every register call's time, ascending, once each; ``fan_out_ms`` /
    ``fan_out``: :meth:`TopicController.connected_subscriptions` (0 before the first time, then
    from each time on; read-only int64 arrays); ``consumers_ms`` / ``consumers``:
    :meth:`TopicController.consumers_by_subscription` (its value before the first time, then
    from each time on)."""

    registrations: tuple[int, ...]
    fan_out_ms: npt.NDArray[np.int64]
    fan_out: npt.NDArray[np.int64]
    consumers_ms: tuple[int, ...]
    consumers: tuple[dict[str, int], ...]


@functools.lru_cache(maxsize=64)
def _subscription_steps(subscriptions: tuple[SubscriptionSpec, ...],
                        grace_ms: int) -> _SubscriptionSteps:
    """The step functions of ``subscriptions`` (consumer sessions lost without a close count
    ``grace_ms`` longer): computed once per subscriptions and grace, not per controller (a
    run's topics share them)."""
    fan_out_ms = sorted({t for sub in subscriptions for c in sub.consumers
                         for t in (c.join_ms, c.leave_ms) if t is not None})
    consumers_ms = sorted({t for sub in subscriptions if sub.registers for c in sub.consumers
                           for t in (c.join_ms, session_end_ms(c.leave_ms, c.leave_how, grace_ms))
                           if t is not None})
    before = consumers_ms[0] - 1 if consumers_ms else 0
    steps = _SubscriptionSteps(
        tuple(sorted({t for sub in subscriptions for t in sub.registration_times()})),
        np.asarray(fan_out_ms, dtype=np.int64),
        np.asarray([0, *(_connected_subscriptions(subscriptions, t) for t in fan_out_ms)],
                   dtype=np.int64),
        tuple(consumers_ms),
        tuple(_consumers_by_subscription(subscriptions, grace_ms, t)
              for t in (before, *consumers_ms)))
    steps.fan_out_ms.flags.writeable = steps.fan_out.flags.writeable = False
    return steps


def _consumers_by_subscription(subscriptions: Sequence[SubscriptionSpec], grace_ms: int,
                               now_ms: int) -> dict[str, int]:
    """:meth:`TopicController.consumers_by_subscription` of ``subscriptions``."""
    return {
        sub.name: sum(1 for c in sub.consumers if c.join_ms <= now_ms
                      and ((end := session_end_ms(c.leave_ms, c.leave_how, grace_ms)) is None
                           or now_ms < end))
        for sub in subscriptions if sub.registers
    }


def _connected_subscriptions(subscriptions: Sequence[SubscriptionSpec], now_ms: int) -> int:
    """:meth:`TopicController.connected_subscriptions` of ``subscriptions``."""
    def connected(c: ConsumerSpec) -> bool:
        return c.join_ms <= now_ms and (c.leave_ms is None or now_ms < c.leave_ms)

    return sum(
        sum(1 for c in sub.consumers if connected(c)) if not sub.grouped
        else int(any(connected(c) for c in sub.consumers))
        for sub in subscriptions)


def segment_rows(layout: SegmentLayout) -> list[dict[str, Any]]:
    """One row per segment ever created (``segments`` table), with ``created_by`` derived from
    the DAG: no parent → initial; two parents → merge; one parent with the same range →
    rebucket; else split (the controller's failover classification, reference §4.7)."""
    rows = []
    for sid, s in sorted(layout.segments.items()):
        if not s.parent_ids:
            created_by = CREATED_BY[0]
        elif len(s.parent_ids) >= 2:
            created_by = ACTION_MERGE
        else:
            parent = layout.segments.get(s.parent_ids[0])
            same = parent is not None and (parent.range_start, parent.range_end) == (
                s.range_start, s.range_end)
            created_by = ACTION_REBUCKET if same else ACTION_SPLIT
        rows.append({
            "segment_id": sid, "range_start": s.range_start, "range_end": s.range_end,
            "bucket_count": s.bucket_count, "bucket_splits": list(s.bucket_splits),
            "state": s.state.value, "parent_ids": list(s.parent_ids),
            "child_ids": list(s.child_ids), "created_at_epoch": s.created_at_epoch,
            "sealed_at_epoch": s.sealed_at_epoch, "created_at_ms": s.created_at_ms,
            "sealed_at_ms": None if s.sealed_at_ms < 0 else s.sealed_at_ms,
            "created_by": created_by,
        })
    return rows


class _SpanLoad:
    """The load of a span of routed messages as prefix sums per segment, so that the load of
    any sub-span is a difference of two rows (one pass per span, not a grouping per control
    event).

    ``lo``: the span's first message in the chunk; ``segment_id`` int64 per message;
    ``sizes`` (bytes) and ``fan_out`` (subscriptions dispatched to) int64 per message."""

    def __init__(self, lo: int, segment_id: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64],
                 fan_out: npt.NDArray[np.int64]) -> None:
        self.lo = lo
        self.keys: npt.NDArray[np.int64] | None = None
        if (segment_id == segment_id[0]).all():  # one segment (most quiet topics)
            self.ids = [int(segment_id[0])]
        else:  # grouped by segment, in chunk order within each: key = segment × n + offset
            self.ids = np.unique(segment_id).tolist()
            self.n = len(segment_id)
            order = stable_argsort(segment_id)
            self.keys = segment_id[order] * self.n + order
            sizes, fan_out = sizes[order], fan_out[order]
        # A constant fan-out (no join or leave within the span) needs the bytes' sums only.
        self.fan_out = int(fan_out[0]) if (fan_out == fan_out[0]).all() else None
        columns = [sizes] if self.fan_out is not None else [sizes, fan_out, sizes * fan_out]
        self.cum: list[Any] = [np.concatenate([[0], np.cumsum(c)]) for c in columns]
        if self.keys is None and len(sizes) <= _LIST_MAX:  # scalar look-ups: a list's are cheaper
            self.cum = [c.tolist() for c in self.cum]

    def between(self, i: int, j: int) -> list[tuple[int, list[int]]]:
        """Per segment id (ascending) with messages in chunk positions ``[i, j)``: ``[messages,
        bytes, messages × fan-out, bytes × fan-out]``."""
        a, b = i - self.lo, j - self.lo
        if self.keys is None:  # one segment: scalars (a quiet topic has ~50 of these a window)
            if a == b:
                return []
            s = [int(c[b] - c[a]) for c in self.cum]
            f = self.fan_out
            return [(self.ids[0], [b - a, s[0], (b - a) * f, s[0] * f] if f is not None
                     else [b - a, *s])]
        bounds = np.searchsorted(self.keys, [[sid * self.n + a, sid * self.n + b]
                                             for sid in self.ids])
        starts, ends = bounds[:, 0], bounds[:, 1]
        sums = [ends - starts, *(c[ends] - c[starts] for c in self.cum)]
        if self.fan_out is not None:
            sums += [sums[0] * self.fan_out, sums[1] * self.fan_out]
        return [(sid, counts) for sid, *counts in zip(self.ids, *(x.tolist() for x in sums),
                                                      strict=True) if counts[0]]


_NO_TIMES = np.empty(0, np.int64)
_NO_TIMES.flags.writeable = False


def _empty_routing() -> RoutedMessages:
    return RoutedMessages(np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0, np.int64))


def _ceil_to(t: int, step: int) -> int:
    return -((-t) // step) * step


def _floor_to(t: int, step: int) -> int:
    return (t // step) * step


def _after(last_ms: int | None, cooldown_s: int) -> int | None:
    return None if last_ms is None else last_ms + cooldown_s * 1000
