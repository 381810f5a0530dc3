"""Producer-side batching in event time, for every producer of a topic at once (reference §7,
§7.1, §7.2; PIP-486).

A scalable-topic producer (the v5 ``ScalableTopicProducer``) keeps one v4 producer per active
segment; each of those has one batch *container* and one flush task. A container is therefore
keyed by ``(producer, segment_id)``, and all containers of a topic run here together as columns:
messages sorted by container and send order, container state as one row per container. Cost
follows messages and batches, not producers. Times are ``int64`` ms on the emulated clock; sizes
are payload bytes.

Three modules are named after batching, one per layer, each calling the one below: this one is
the rule (NumPy, every container of a topic; the walk along each container's chain of batches,
sequential by nature, compiled with numba); :func:`pipelines.engine.stages.batch_topic` feeds
it a topic's producers as pandas columns and carries its state between windows (both engines);
:mod:`pipelines.spark.batching` is the Spark operator that calls that per producer shard and
window.

Modes (:class:`BatchingMode`): ``bucketed`` = PIP-486 ``EntryBucketBatchContainer`` (one inner
batch per bucket index ``bucket_of(splits, hash_b)``, keyless → bucket 0); ``key_based`` = one
inner batch per key (keyless messages share one); ``default`` = one batch for all messages (may
straddle buckets); ``disabled`` = every message is its own entry (``close_reason = disabled``).

Container rules (every batching mode; reference §7, §7.1):

* Fullness is evaluated on the container's aggregate: after a message is added, total messages
  ``>= max_messages`` (reason ``max_messages``, checked first) or total payload ``>= max_bytes``
  (``max_bytes``) sends the container at that message's time. Pre-add check: a message that would
  take a non-empty container past ``max_bytes`` first sends the container (``max_bytes``).
* **The flush task** (v4 ``ProducerImpl``, §7.1): one task per container measuring time since
  the container's *last send*. Adding a message schedules the task ``delay`` later if none is
  pending (a message that fills the container at once schedules nothing). When the task fires:
  less than ``delay`` since the last send → it re-arms for the remainder; otherwise it sends what
  the container holds (``max_delay``) and re-arms for ``delay``, or, finding the container empty,
  ends. Every send sets the last send time. So a batch that opens while a task is pending goes
  out when that task fires, and after a count- or size-triggered send the next batch waits until
  ``delay`` has passed since that send. A container the replay has not seen yet is idle: its
  ready task ran long before (the replay cannot know when the application created it).
* **No end-of-input flush** (§7.1): a recording has no end event; a batch still open at the end
  of the input is sent when its task fires (``max_delay``).
* **Layout changes** (§7.2): when a segment is sealed (split, merge, rebucket rollover) at ``T``,
  its containers send nothing more: the messages of their open batches are parked and re-sent at
  ``T``, in the order the application sent them, to the successor segments by the layout in force
  after ``T`` (segment, bucket and per-segment sequence id are the successor's), ahead of the
  producer's newer messages. A keyed message goes to the active segment whose range holds its
  ``segment_hash``; the k-th parked keyless message of a producer at one seal goes round-robin,
  to active segment ``k mod n`` (by range start). Emulator choice: Pulsar re-routes keyless
  messages with the producer's one round-robin counter, which also shifts its later keyless
  messages by the number parked; the replay keeps the control plane's routing of later messages
  independent of batching state.
* **Per-segment sequence ids** (§7.2): each container numbers the messages it sends from 0
  (``segment_sequence_id``); a re-sent message is numbered by its successor.
* At one instant ``T`` the order is: seals at ``T`` (and the re-sends), flush tasks due at
  ``T`` (by segment id), then messages published at ``T`` (in send order).
* On every send all non-empty inner batches go out together, one entry each, ordered by their
  highest per-segment sequence id (§7). Every entry carries ``entry_hash_min`` /
  ``entry_hash_max`` (min / max ``hash_b``) and ``bucket_index = bucket_of(splits,
  entry_hash_min)`` (§3.4: a straddling ``default`` entry is routed whole to its minimum's
  bucket). ``entry_seq`` numbers a producer's entries in send order, across its containers.

Streaming: :func:`batch` takes a window of messages (every message with ``time_ms <`` the
horizon) and the state carried from the previous window, and returns what was sent before the
horizon plus the new state. A container's state is its state *when its open batch opened* and
the caller feeds the open batch's messages (``BatchResult.entry_seq == -1``) back with the next
window, so the outputs do not depend on how the input is cut into windows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from pipelines.core.buckets import MAX_HASH, bucket_of_array
from pipelines.core.layout import SegmentLayout, change_times, layout_as_of
from pipelines.core.sorting import lexsort

I64 = npt.NDArray[np.int64]
Column = npt.NDArray[np.generic]
"""One column of the entries table (int32, int64 or object, by column; ENTRY_COLUMNS)."""


class BatchingMode(StrEnum):
    """Producer batching mode (reference §7; seeds: default and key-based batching)."""

    BUCKETED = "bucketed"
    KEY_BASED = "key_based"
    DEFAULT = "default"
    DISABLED = "disabled"


CLOSE_REASONS: tuple[str, ...] = ("max_messages", "max_bytes", "max_delay", "disabled")
"""Every ``close_reason`` value an entry can carry; an entry's ``close_reason`` code
(:attr:`BatchResult.entries`) is its index here."""
_R_MAX_MESSAGES, _R_MAX_BYTES, _R_MAX_DELAY, _R_DISABLED = range(4)
_KIND_REASON = (_R_MAX_DELAY, _R_MAX_BYTES, _R_MAX_MESSAGES, _R_MAX_BYTES)
"""Close reason of each cut kind: 0 task, 1 pre-add byte check, 2 full by count, 3 by bytes."""

NO_TASK = np.iinfo(np.int64).min
"""``task_ms`` of a container with no flush task pending."""
_NEVER_SENT = -(2**62)  # last send of an idle container: long before any event
_PHASE_RESENT, _PHASE_TASK, _PHASE_MESSAGE = 0, 1, 2  # order of events at one instant


@dataclass(frozen=True)
class BatchingConfig:
    """Producer batching limits; defaults are the Pulsar v4 producer defaults (reference §7).

    ``max_messages`` (``batchingMaxMessages``, 1000), ``max_bytes`` (``batchingMaxBytes``,
    128 KiB = 131072 bytes), ``max_publish_delay_ms`` (``batchingMaxPublishDelay``, 1 ms; the
    emulated clock has ms resolution, so 1 is the smallest delay).
    """

    mode: BatchingMode | str = BatchingMode.BUCKETED
    max_messages: int = 1000
    max_bytes: int = 131072
    max_publish_delay_ms: int = 1

    def problems(self) -> list[str]:
        """One sentence per invalid value (empty list = valid)."""
        out: list[str] = []
        if self.mode not in {m.value for m in BatchingMode}:
            allowed = ", ".join(m.value for m in BatchingMode)
            out.append(f"mode {self.mode!r} is not one of {allowed}")
        for name, low in (("max_messages", 1), ("max_bytes", 1), ("max_publish_delay_ms", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                out.append(f"{name} must be an integer, got {value!r}")
            elif value < low:
                out.append(f"{name} must be >= {low}, got {value}")
        return out


@dataclass(frozen=True)
class Reroute:
    """A layout change as producers see it (§7.2): at ``time_ms`` the segments ``sealed`` close,
    and ``range_start`` / ``segment_ids`` (int64, by range start), ``splits`` (bucket splits per
    active segment) and ``epoch`` describe the layout in force right after.

    ``producers``: the producer codes (int64) whose containers the change closes, ``None`` =
    every producer. Segment ids are a topic's own, so when one :func:`batch` call runs several
    topics (producer codes made unique per topic), each topic's changes name its producers
    (:meth:`for_producers`) and leave the other topics' containers of the same segment ids
    alone."""

    time_ms: int
    sealed: frozenset[int]
    range_start: I64
    segment_ids: I64
    splits: Mapping[int, Sequence[int]]
    epoch: int
    producers: I64 | None = None

    @classmethod
    def of(cls, layout: SegmentLayout, time_ms: int) -> Reroute:
        """The change at ``time_ms`` of a topic's (later) ``layout``."""
        now = layout_as_of(layout, time_ms)
        sealed = frozenset(s.segment_id for s in layout.segments.values()
                           if not s.is_active and s.sealed_at_ms == time_ms)
        starts, ids = now.routing_table()
        return cls(time_ms, sealed, starts, ids,
                   {int(i): list(now.segments[int(i)].bucket_splits) for i in ids}, now.epoch)

    def for_producers(self, producers: I64) -> Reroute:
        """This change, closing only the containers of ``producers`` (codes, int64)."""
        return replace(self, producers=np.asarray(producers, dtype=np.int64))

    def applies(self, producer: I64) -> npt.NDArray[np.bool_]:
        """Whether the change concerns each row's ``producer`` code."""
        if self.producers is None:
            return np.ones(len(producer), dtype=bool)
        return np.isin(producer, self.producers)

    def route(self, segment_hash: I64) -> I64:
        """Successor segment of each parked message, in send order (``segment_hash`` ``-1`` =
        keyless: the k-th keyless one goes to active segment ``k mod n`` by range start)."""
        out = self.segment_ids[np.searchsorted(self.range_start, np.maximum(segment_hash, 0),
                                               side="right") - 1]
        keyless = segment_hash < 0
        out[keyless] = self.segment_ids[np.arange(int(keyless.sum())) % len(self.segment_ids)]
        return out


def reroutes(layout: SegmentLayout | None, from_ms: int, to_ms: int | None) -> list[Reroute]:
    """Every seal of ``layout`` with ``from_ms <= time <= to_ms`` (``None`` = no bound), in
    time order (empty for no layout)."""
    if layout is None:
        return []
    return [Reroute.of(layout, t) for t in change_times(layout)
            if t >= from_ms and (to_ms is None or t <= to_ms)
            and any(not s.is_active and s.sealed_at_ms == t for s in layout.segments.values())]


@dataclass
class Messages:
    """Messages given to :func:`batch`, aligned int64 columns (any order), ``N`` rows.

    ``producer`` code (``0..P-1``); ``ordinal``: the producer's send order (unique per producer);
    ``time_ms``: when the message enters its container (its publish time, or the seal time for a
    parked message being re-sent); ``resent``: 1 for a re-sent message, else 0; ``publish_ms``:
    the application's publish time; ``segment_id`` / ``bucket_index``: its container's segment
    and its bucket there; ``segment_hash`` (``-1`` keyless); ``hash_b`` (0 keyless);
    ``payload_size`` bytes; ``key_id``: a key identity for ``key_based`` batching (``-1``
    keyless); ``epoch``: layout epoch of its routing."""

    producer: I64
    ordinal: I64
    time_ms: I64
    resent: I64
    publish_ms: I64
    segment_id: I64
    bucket_index: I64
    segment_hash: I64
    hash_b: I64
    payload_size: I64
    key_id: I64
    epoch: I64

    def __len__(self) -> int:
        return int(self.producer.shape[0])

    def take(self, idx: npt.NDArray[np.intp]) -> Messages:
        """Rows ``idx``."""
        return Messages(**{f: getattr(self, f)[idx] for f in _MESSAGE_FIELDS})


_MESSAGE_FIELDS = tuple(Messages.__dataclass_fields__)


def _i64(n: int = 0) -> I64:
    return np.zeros(n, dtype=np.int64)


@dataclass
class ContainerState:
    """Carried state of a topic's containers, one row per ``(producer, segment_id)`` seen and not
    sealed (int64 columns): ``last_send_ms`` and ``task_ms`` (:data:`NO_TASK` = none) of its
    flush task, ``next_sequence_id`` its per-segment sequence counter — all as of the opening of
    its open batch, if it has one (the open batch's messages are fed again with the next
    window)."""

    producer: I64 = field(default_factory=_i64)
    segment_id: I64 = field(default_factory=_i64)
    last_send_ms: I64 = field(default_factory=_i64)
    task_ms: I64 = field(default_factory=_i64)
    next_sequence_id: I64 = field(default_factory=_i64)

    def __len__(self) -> int:
        return int(self.producer.shape[0])

    def take(self, idx: npt.NDArray[np.intp]) -> ContainerState:
        return ContainerState(*(getattr(self, f)[idx] for f in _STATE_FIELDS))

    @staticmethod
    def concat(parts: Sequence[ContainerState]) -> ContainerState:
        return ContainerState(*(np.concatenate([getattr(p, f) for p in parts]).astype(np.int64)
                                for f in _STATE_FIELDS))


_STATE_FIELDS = tuple(ContainerState.__dataclass_fields__)


@dataclass
class BatchResult:
    """What :func:`batch` sent before the horizon.

    Per message, aligned with the input (``N``): ``entry_seq`` (the producer's entry number,
    ``-1`` = still in an open batch), and where it was last added — ``segment_id``,
    ``bucket_index``, ``segment_sequence_id``, ``time_ms``, ``resent``, ``epoch`` (re-sent
    messages take the successor's).

    Entries (``E`` rows, by producer then ``entry_seq``; int64 unless said): ``producer``,
    ``segment_id``, ``bucket_index`` (int32), ``entry_seq``, ``entry_hash_min`` /
    ``entry_hash_max`` (int32), ``num_messages``, ``payload_bytes``, ``open_time_ms`` (publish
    time of its earliest message), ``publish_time_ms`` (when it was sent), ``close_reason``
    (int8: the reason's index in :data:`CLOSE_REASONS`; a code, not a string per entry: 5.6 M
    Python strings cost about 1 CPU s more to make and convert than a categorical of the four
    names at the 10 M bench), ``first_sequence_id`` / ``last_sequence_id`` (per-segment
    sequence ids).

    ``state``: the new :class:`ContainerState`; ``entries_per_producer``: entries sent per
    producer code (length ``P``)."""

    entry_seq: I64
    segment_id: I64
    bucket_index: I64
    segment_sequence_id: I64
    time_ms: I64
    resent: I64
    epoch: I64
    entries: dict[str, Column]
    state: ContainerState
    entries_per_producer: I64


ENTRY_COLUMNS = ("producer", "segment_id", "bucket_index", "entry_seq", "entry_hash_min",
                 "entry_hash_max", "num_messages", "payload_bytes", "open_time_ms",
                 "publish_time_ms", "close_reason", "first_sequence_id", "last_sequence_id")
"""Columns of :attr:`BatchResult.entries`, in order."""


def batch(messages: Messages, state: ContainerState, changes: Sequence[Reroute],
          config: BatchingConfig, producers: int, entry_base: I64 | None = None,
          horizon_ms: int | None = None) -> BatchResult:
    """Run a topic's containers over one window (see the module doc for the rules).

    ``messages``: every message of the window (``time_ms < horizon_ms``) plus the open batches
    fed back from the previous window. ``state``: the previous window's
    :attr:`BatchResult.state`. ``changes``: the seals of this window (after the previous
    horizon, up to and including ``horizon_ms``: the layout is known up to the horizon, and a
    seal at an instant comes before the tasks due then), in time order. ``producers``: number
    of producer codes ``P``; ``entry_base``: each producer's next ``entry_seq`` (length ``P``,
    default zeros). ``horizon_ms``: the window's end; ``None`` = end of input (every flush task
    fires). Tasks due at or before the horizon run (before any message published at the
    horizon, which belongs to the next window); later ones stay in the state.

    Raises ``ValueError`` for an invalid ``config``.
    """
    problems = config.problems()
    if problems:
        raise ValueError("invalid batching config: " + "; ".join(problems))
    run = _Run(config, messages, state, producers)
    for change in changes:
        run.phase(change.time_ms)
        run.seal(change)
    run.phase(None if horizon_ms is None else horizon_ms + 1)
    base = _i64(producers) if entry_base is None else np.asarray(entry_base, dtype=np.int64)
    return run.result(base)


class _Run:
    """One :func:`batch` call: the current placement of every message (updated when it is
    re-sent), the containers' state and the batches sent so far."""

    def __init__(self, config: BatchingConfig, messages: Messages, state: ContainerState,
                 producers: int) -> None:
        self.mode = BatchingMode(config.mode)
        self.max_messages, self.max_bytes = config.max_messages, config.max_bytes
        self.delay = config.max_publish_delay_ms
        self.m = Messages(**{f: np.array(getattr(messages, f), dtype=np.int64)
                             for f in _MESSAGE_FIELDS})
        n = len(self.m)
        self.producers = producers
        self.pending: npt.NDArray[np.intp] = np.arange(n, dtype=np.intp)  # not yet sent
        self.seq = np.full(n, -1, dtype=np.int64)
        self.state = state.take(np.argsort(
            self._container_keys(state.producer, state.segment_id), kind="stable"))
        self.sent: list[_Sent] = []
        self.open_idx: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)  # open batches' messages

    # ---- containers ---------------------------------------------------------------------------
    def _container_keys(self, producer: I64, segment: I64) -> I64:
        return producer * np.int64(1 << 40) + segment

    def phase(self, limit_ms: int | None) -> None:
        """Run every container over its pending messages with ``time_ms < limit_ms``; tasks due
        before ``limit_ms`` fire (``None``: all messages, every task)."""
        m = self.m
        p: npt.NDArray[np.intp] = self.pending
        if limit_ms is not None:
            p = p[m.time_ms[p] < limit_ms]
        later = np.setdiff1d(self.pending, p, assume_unique=True)
        limit = np.iinfo(np.int64).max if limit_ms is None else limit_ms
        # by container (producer, then segment: its key's order), as separate keys that pack
        # into one sort word where the key's 40-bit segment field would not
        producer, segment = m.producer[p], m.segment_id[p]
        order = lexsort((m.ordinal[p], m.resent[p] * -1, m.time_ms[p], segment, producer))
        p, ckey = p[order], self._container_keys(producer[order], segment[order])
        skey = self._container_keys(self.state.producer, self.state.segment_id)
        # containers: those with messages, then the idle ones in the state (unchanged)
        starts = np.flatnonzero(np.r_[True, ckey[1:] != ckey[:-1]]) if len(p) else _i64()
        keys = ckey[starts]
        row = np.searchsorted(skey, keys) if len(skey) else np.zeros(len(keys), dtype=np.intp)
        known = row < len(skey)
        known[known] = skey[row[known]] == keys[known]
        at = np.minimum(row, max(len(skey) - 1, 0))

        def carried(column: I64, idle: int) -> I64:  # a container's state, or an idle one's
            return np.where(known, column[at] if len(skey) else idle, idle)

        last = carried(self.state.last_send_ms, _NEVER_SENT)
        task = carried(self.state.task_ms, NO_TASK)
        nseq = carried(self.state.next_sequence_id, 0)
        ends = np.r_[starts[1:], len(p)].astype(np.int64) if len(p) else _i64()
        # per-segment sequence ids: consecutive within a container, from its counter
        within = np.arange(len(p), dtype=np.int64) - np.repeat(starts, ends - starts)
        self.seq[p] = np.repeat(nseq, ends - starts) + within
        cut = self._cut(p, starts, ends, last, task, limit)
        # new state: touched containers (as of their open batch, if any), then untouched ones
        open_start = cut.open_start
        is_open = open_start >= 0
        counted = np.where(is_open, open_start - starts, ends - starts)
        touched = ContainerState(m.producer[p[starts]], m.segment_id[p[starts]], cut.last,
                                 cut.task, nseq + counted)
        untouched = np.ones(len(skey), dtype=bool)
        untouched[row[known]] = False
        merged = ContainerState.concat([touched, self.state.take(np.flatnonzero(untouched))])
        order_s = np.argsort(self._container_keys(merged.producer, merged.segment_id),
                             kind="stable")
        self.state = merged.take(order_s)
        open_msgs = [p[s:e] for s, e in zip(open_start[is_open].tolist(),
                                              ends[is_open].tolist(), strict=True)]
        self.open_idx = (np.concatenate(open_msgs).astype(np.intp) if open_msgs
                         else np.zeros(0, dtype=np.intp))
        self.pending = np.concatenate([self.open_idx, later]).astype(np.intp)

    def _cut(self, p: npt.NDArray[np.intp], starts: I64, ends: I64, last: I64, task: I64,
             limit: int) -> _Cut:
        """The chain of batches of every container (messages ``p[starts[c]:ends[c]]``, sorted
        by send order), walked by :func:`_walk_steps`; appends the sent ones to ``self.sent``."""
        m = self.m
        times = m.time_ms[p]
        # order key of a message among the events of its instant: a task due at t fires after
        # the re-sends at t (2t) and before the messages published at t (2t + 1)
        order = times * 2 + 1 - m.resent[p]
        n = len(p)
        c_last = last.astype(np.int64).copy()
        c_task = task.astype(np.int64).copy()
        if self.mode is BatchingMode.DISABLED:
            if n:
                event = np.arange(n, dtype=np.int64)
                self.sent.append(_Sent(event, event + 1, times,
                                       np.full(n, _R_DISABLED, dtype=np.int64), event, p,
                                       self._phase(event, p)))
            return _Cut(c_last, c_task, np.full(len(starts), -1, dtype=np.int64))
        ends_of = np.repeat(ends, ends - starts)
        within = _ContainerSearch(order, ends_of)
        key_default, cb_key = self._fresh_keys(times, within, m.payload_size[p], ends_of)
        bounds = np.r_[starts, n].astype(np.int64)  # the containers partition [0, n)
        b_at, b_fire, open_start = _walk()(order, key_default, cb_key, bounds, c_last, c_task,
                                           limit, self.delay)
        if len(b_at):
            self.sent.append(self._sent(b_at, b_fire, times, within, key_default, cb_key,
                                        ends_of, p))
        return _Cut(c_last, c_task, open_start)

    def _sent(self, at: I64, fire: I64, times: I64, within: _ContainerSearch, key_default: I64,
              cb_key: I64, ends_of: I64, p: npt.NDArray[np.intp]) -> _Sent:
        """The batches opened at ``at`` with their tasks due at ``fire``: where each ends, when
        and why it was sent (as the chain of :meth:`_cut` found them, vectorized)."""
        default = fire == times[at] + self.delay
        key = key_default[at].copy()
        odd = np.flatnonzero(~default)
        key[odd] = np.minimum(within.first_at_or_after(at[odd], 2 * fire[odd] + 1) * 4,
                              cb_key[at[odd]])
        step, kind = key >> 2, key & 3
        end = ends_of[at]
        tail = step >= end  # sent by its task after the container's last message
        kind = np.where(tail, 0, kind)
        stop = np.where(tail, end, np.where(kind >= 2, step + 1, step))
        msg = np.minimum(step, len(times) - 1)
        when = np.where(kind == 0, fire, times[msg])
        event = np.where(kind == 0, -1, step)
        return _Sent(at, stop, when, np.asarray(_KIND_REASON, dtype=np.int64)[kind], event, p,
                     self._phase(event, p))

    def _phase(self, event: I64, p: npt.NDArray[np.intp]) -> I64:
        """Order among an instant's events of each send: a task, or its triggering message's
        (a re-send before the messages published then)."""
        trig = p[np.maximum(event, 0)] if len(p) else np.zeros(len(event), dtype=np.intp)
        return np.where(event < 0, _PHASE_TASK,
                        np.where(self.m.resent[trig] == 1, _PHASE_RESENT, _PHASE_MESSAGE))

    def _fresh_keys(self, times: I64, within: _ContainerSearch, sizes: I64,
                    ends_of: I64) -> tuple[I64, I64]:
        """For a batch opening at each message ``i`` of an empty container: the key
        ``position * 4 + kind`` of the message that closes it by count or bytes (``cb``), and the
        same with its task due ``delay`` after ``i`` (``default``). Kinds: 0 task (before the
        message), 1 pre-add byte check (before it), 2 full by count, 3 full by bytes (after it);
        a position ``>=`` the container's end = none."""
        n = times.shape[0]
        idx = np.arange(n, dtype=np.int64)
        count_key = np.minimum(idx + self.max_messages - 1, ends_of) * 4 + 2
        cum = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(sizes, out=cum[1:])
        # first j >= i with sum(sizes[i..j]) >= max_bytes
        j = np.searchsorted(cum, cum[:-1] + self.max_bytes, side="left") - 1
        j = np.maximum(j, idx)
        inside = j < ends_of
        total = cum[np.minimum(j, n - 1) + 1] - cum[:-1]
        kind = np.where(inside & (total > self.max_bytes) & (j > idx), 1, 3)
        bytes_key = np.where(inside, j * 4 + kind, ends_of * 4 + 3)
        cb = np.minimum(count_key, bytes_key)
        # the first message its task (due at i's time + delay) fires before, in the container
        timer = within.first_at_or_after(idx, 2 * (times + self.delay) + 1)
        return np.minimum(timer * 4, cb), cb

    # ---- seals ---------------------------------------------------------------------------------
    def seal(self, change: Reroute) -> None:
        """Park the open batches of the sealed segments and re-send them at the seal time."""
        m = self.m
        ids = np.fromiter(change.sealed, dtype=np.int64)
        sealed = np.isin(self.state.segment_id, ids) & change.applies(self.state.producer)
        self.state = self.state.take(np.flatnonzero(~sealed))
        opened = self.open_idx
        parked = opened[np.isin(m.segment_id[opened], ids) & change.applies(m.producer[opened])]
        if not len(parked):
            return
        parked = parked[lexsort((m.ordinal[parked], m.producer[parked]))]
        succ = np.empty(len(parked), dtype=np.int64)
        prod = m.producer[parked]
        for code in np.unique(prod).tolist():  # round-robin counts per producer
            mine = np.flatnonzero(prod == code)
            succ[mine] = change.route(m.segment_hash[parked[mine]])
        m.segment_id[parked] = succ
        for sid in np.unique(succ).tolist():
            mine = parked[succ == sid]
            m.bucket_index[mine] = bucket_of_array(change.splits[sid], m.hash_b[mine])
        m.time_ms[parked] = change.time_ms
        m.resent[parked] = 1
        m.epoch[parked] = change.epoch

    # ---- result ----------------------------------------------------------------------------------
    def result(self, entry_base: I64) -> BatchResult:
        m = self.m
        n = len(m)
        entry_of = np.full(n, -1, dtype=np.int64)
        cols = _entries(self, entry_of)
        per_producer = np.bincount(cols["producer"], minlength=self.producers).astype(np.int64)
        # entry_seq: the producer's entries in send order, after its earlier ones
        if len(cols["producer"]):
            first = np.r_[0, np.cumsum(per_producer)[:-1]]
            rank = np.arange(len(cols["producer"]), dtype=np.int64) - first[cols["producer"]]
            cols["entry_seq"] = entry_base[cols["producer"]] + rank
            done = entry_of >= 0
            entry_of[done] = cols["entry_seq"][entry_of[done]]
        seq = np.where(entry_of >= 0, self.seq, -1)
        return BatchResult(entry_of, m.segment_id, m.bucket_index, seq, m.time_ms, m.resent,
                           m.epoch, cols, self.state, per_producer)


@dataclass
class _Cut:
    last: I64
    task: I64
    open_start: I64


def _walk_steps(order: I64, key_default: I64, cb_key: I64, bounds: I64, last: I64, task: I64,
                limit: int, delay: int) -> tuple[I64, I64, I64]:  # pragma: no cover
    """Every container's chain of batches, one step per batch (compiled: the state of a
    container after a batch decides how the next one closes, so the chain is sequential).

    Container ``c`` holds the messages at positions ``[bounds[c], bounds[c + 1])`` (sorted by send
    order; ``order``: their order keys, ``key_default`` / ``cb_key``: :meth:`_Run._fresh_keys`),
    its last send ``last[c]`` and task due ``task[c]`` (:data:`NO_TASK` = none), updated in
    place to the container's state after its sent batches (tasks due before ``limit`` fired on
    an empty container when no batch stays open). Returns each sent batch's first message
    position and task due time (int64, by container then send order) and each container's open
    batch's first position (``-1`` = none)."""
    b_at = np.empty(len(order), dtype=np.int64)  # a batch opens at a distinct message
    b_fire = np.empty(len(order), dtype=np.int64)
    open_start = np.full(len(last), -1, dtype=np.int64)
    nb = 0
    for c in range(len(last)):
        at, e, L, P = bounds[c], bounds[c + 1], last[c], task[c]
        while at < e:
            o = order[at]
            t = o >> 1
            while P != NO_TASK and 2 * P < o:  # tasks due before it find it empty
                P = L + delay if P - L < delay else NO_TASK
            fire = t + delay if P == NO_TASK else max(P, L + delay)
            if fire == t + delay:
                key = key_default[at]
            else:  # the first message at or after the task: it closes the batch before it
                first = at + np.searchsorted(order[at:e], 2 * fire + 1)
                key = min(first * 4, cb_key[at])
            step = key >> 2
            if step >= e and fire >= limit:  # no message closes it, its task is later
                open_start[c] = at
                break
            b_at[nb], b_fire[nb] = at, fire
            nb += 1
            kind = key & 3
            if step >= e:  # its task sends it after the container's last message
                L, P, at = fire, fire + delay, e
            elif kind == 0:
                L, P, at = fire, fire + delay, step
            else:
                stop = step if kind == 1 else step + 1
                # the pending task (if any) is due in (sent, sent + delay]: re-arming from
                # the new last send gives the same; a message that filled the container by
                # itself with no task pending scheduled none
                P = NO_TASK if (stop == at + 1 and kind >= 2 and P == NO_TASK) else fire
                L, at = order[step] >> 1, stop
        if open_start[c] < 0:  # no open batch: tasks due before the limit fire on it empty
            while P != NO_TASK and P < limit:
                P = L + delay if P - L < delay else NO_TASK
        last[c], task[c] = L, P
    return b_at[:nb], b_fire[:nb], open_start


_Walk = Callable[[I64, I64, I64, I64, I64, I64, int, int], tuple[I64, I64, I64]]
_compiled: list[_Walk] = []
"""The compiled :func:`_walk_steps`, once loaded (numba is imported only then: importing it
costs about 0.16 CPU s, which processes that never batch — Spark's schema learning — skip)."""


def _walk() -> _Walk:
    """The compiled walk (:func:`_walk_steps` through ``numba.njit(cache=True)``), loaded
    on first use and kept for the life of the process."""
    if not _compiled:
        from numba import njit  # noqa: PLC0415 -- deferred: see _compiled

        _compiled.append(njit(cache=True)(_walk_steps))
    return _compiled[0]


def compile_walk() -> None:
    """Import numba and load the batching walk's machine code from its cache (``__pycache__``
    beside this module; compiled the first time, about 2 CPU s, then about 0.4 s per process).
    The Spark worker daemon calls this before it forks workers, so each worker starts with it."""
    z = np.zeros(1, dtype=np.int64)
    _walk()(z, z + 4, z + 4, np.array([0, 1], dtype=np.int64), z.copy(), z.copy(), 0, 1)


@dataclass
class _Sent:
    """Batches sent in one phase: ``[start, end)`` positions into ``p`` (message indexes in
    container order), send time, reason code, triggering message position (``-1`` = task),
    and the order of that event among those of its instant (``phase``: a re-send, a task or a
    message, as the trigger was when sent — a pre-add trigger may be re-sent later)."""

    start: I64
    end: I64
    time: I64
    reason: I64
    event: I64
    p: npt.NDArray[np.intp]
    phase: I64 = field(default_factory=_i64)

    def __post_init__(self) -> None:
        if len(self.phase) != len(self.start):
            raise ValueError("phase must be given for every batch")


class _ContainerSearch:
    """Binary search within each container's slice of a sorted-per-container ``order`` key
    (``ends_of``: the end of each row's container): one ``searchsorted`` over a composite key
    (container rank, order), as the containers are contiguous."""

    def __init__(self, order: I64, ends_of: I64) -> None:
        self.ends_of = ends_of
        rank = np.cumsum(np.r_[0, ends_of[1:] != ends_of[:-1]]).astype(np.int64)
        self.lo = int(order.min()) if len(order) else 0
        self.width = (int(order.max()) - self.lo + 2) if len(order) else 1
        self.rank = rank
        self.flat = rank * self.width + (order - self.lo) if len(order) else order
        if len(order) and int(rank[-1] + 1) * self.width >= 2**62:  # pragma: no cover
            raise ValueError("too many containers x time span for one search key")

    def first_at_or_after(self, at: I64, value: I64) -> I64:
        """Per row: the first position ``>= at`` in ``at``'s container whose order key is
        ``>= value`` (the container's end when none)."""
        if not len(at):
            return np.zeros(0, dtype=np.int64)
        rank = self.rank[at]
        v = np.clip(value - self.lo, 0, self.width - 1)
        pos = np.searchsorted(self.flat, rank * self.width + v, side="left").astype(np.int64)
        out: I64 = np.minimum(np.maximum(pos, at), self.ends_of[at])
        return out


def _entries(run: _Run, entry_of: I64) -> dict[str, Column]:
    """The sent batches' inner batches as entries, by producer and send order; fills
    ``entry_of`` (message → entry row)."""
    m = run.m
    if not run.sent:
        return _empty_entries()
    idx, bat, b_time, b_reason, b_sub, b_phase, b_first = [], [], [], [], [], [], []
    offset = 0
    for s in run.sent:
        lens = s.end - s.start
        k = len(s.start)
        pos = np.repeat(s.start, lens) + (np.arange(int(lens.sum()), dtype=np.int64)
                                          - np.repeat(np.cumsum(lens) - lens, lens))
        idx.append(s.p[pos])
        bat.append(np.repeat(np.arange(offset, offset + k, dtype=np.int64), lens))
        b_time.append(s.time)
        b_reason.append(s.reason)
        trig = s.p[np.maximum(s.event, 0)] if len(s.p) else np.zeros(k, dtype=np.intp)
        task = s.event < 0
        first_msg = s.p[s.start]
        b_phase.append(s.phase)
        b_sub.append(np.where(task, m.segment_id[first_msg], m.ordinal[trig]))
        b_first.append(first_msg)
        offset += k
    msg = np.concatenate(idx)
    batch_of = np.concatenate(bat)
    time_b = np.concatenate(b_time)
    reason_b = np.concatenate(b_reason)
    phase_b, sub_b = np.concatenate(b_phase), np.concatenate(b_sub)
    first_b = np.concatenate(b_first)
    if run.mode is BatchingMode.KEY_BASED:
        group = m.key_id[msg]
    elif run.mode is BatchingMode.BUCKETED:
        group = m.bucket_index[msg]
    else:
        group = np.zeros(len(msg), dtype=np.int64)
    order = _by_batch_then_group(batch_of, group)
    msg, batch_of, group = msg[order], batch_of[order], group[order]
    starts = np.flatnonzero(np.r_[True, (batch_of[1:] != batch_of[:-1])
                                  | (group[1:] != group[:-1])])
    e_batch = batch_of[starts]
    seqs = run.seq[msg]
    cols: dict[str, Column] = {
        "producer": m.producer[msg[starts]],
        "segment_id": m.segment_id[msg[starts]],
        "bucket_index": np.minimum.reduceat(m.bucket_index[msg], starts).astype(np.int32),
        "entry_seq": np.zeros(len(starts), dtype=np.int64),
        "entry_hash_min": np.minimum.reduceat(m.hash_b[msg], starts).astype(np.int32),
        "entry_hash_max": np.maximum.reduceat(m.hash_b[msg], starts).astype(np.int32),
        "num_messages": np.diff(np.r_[starts, len(msg)]).astype(np.int64),
        "payload_bytes": np.add.reduceat(m.payload_size[msg], starts),
        "open_time_ms": np.minimum.reduceat(m.publish_ms[msg], starts),
        "publish_time_ms": time_b[e_batch],
        "close_reason": reason_b[e_batch].astype(np.int8),
        "first_sequence_id": np.minimum.reduceat(seqs, starts),
        "last_sequence_id": np.maximum.reduceat(seqs, starts),
    }
    # send order per producer: time, then seal re-sends / tasks (by segment) / messages (by send
    # order), the batch opened first, then the inner batches by highest sequence id
    e_order = lexsort((cols["last_sequence_id"], m.ordinal[first_b[e_batch]],
                          sub_b[e_batch], phase_b[e_batch], cols["publish_time_ms"],
                          cols["producer"]))
    cols = {k: v[e_order] for k, v in cols.items()}
    row_of_start = np.empty(len(starts), dtype=np.int64)
    row_of_start[e_order] = np.arange(len(starts), dtype=np.int64)
    entry_of[msg] = np.repeat(row_of_start, np.diff(np.r_[starts, len(msg)]))
    return cols


def _by_batch_then_group(batch_of: I64, group: I64) -> npt.NDArray[np.intp]:
    """The order of messages by batch (``batch_of``: non-decreasing, as :func:`_entries` lists
    them), then group, then position: ``np.lexsort((group, batch_of))``, as one stable sort of
    a combined key (a quarter of the time: the batches are already in order) when the key
    fits in 63 bits."""
    if not len(group):
        return np.zeros(0, dtype=np.intp)
    lo = int(group.min())
    span = int(group.max()) - lo + 1
    order: npt.NDArray[np.intp]
    if (int(batch_of.max()) + 1) * span >= 2**62:  # pragma: no cover - key ids past 2**62 / batches
        order = np.lexsort((group, batch_of))
    else:
        order = np.argsort(batch_of * span + (group - lo), kind="stable")
    return order


def _empty_entries() -> dict[str, Column]:
    out: dict[str, Column] = {c: _i64() for c in ENTRY_COLUMNS}
    for c in ("bucket_index", "entry_hash_min", "entry_hash_max"):
        out[c] = np.zeros(0, dtype=np.int32)
    out["close_reason"] = np.zeros(0, dtype=np.int8)
    return out


__all__ = [
    "CLOSE_REASONS",
    "ENTRY_COLUMNS",
    "MAX_HASH",
    "NO_TASK",
    "BatchResult",
    "BatchingConfig",
    "BatchingMode",
    "ContainerState",
    "Messages",
    "Reroute",
    "batch",
    "compile_walk",
    "reroutes",
]
