"""Producer-side batch container emulation, in event time (reference §7, §3.4; PIP-486).

One :class:`ProducerBatcher` emulates the batching of ONE producer. A scalable-topic producer is
a set of per-segment producers, so the batcher keeps one *container* per segment, each bucketing
with that segment's splits. Everything runs on the emulated clock: times are ``int64``
milliseconds (``publish_time``), sizes are payload bytes.

Modes (:class:`BatchingMode`):

``bucketed``
    PIP-486 ``EntryBucketBatchContainer`` (§7): one inner batch per bucket index
    ``bucket_of(splits, hash_b)`` (keyless messages carry ``hash_b = 0`` → bucket 0).
``key_based``
    ``BatchMessageKeyBasedContainer``: one inner batch per key; keyless messages share one batch.
``default``
    ``BatchMessageContainerImpl``: one batch for all messages, which may straddle buckets.
``disabled``
    every message is its own entry (``close_reason = "disabled"``).

Container rules (all batching modes):

* Fullness is evaluated on the **aggregate** of the container (all inner batches): total
  messages ``>= max_messages`` (reason ``max_messages``, checked first) or total payload bytes
  ``>= max_bytes`` (reason ``max_bytes``) right after a message is added → every non-empty
  inner batch is emitted, ``publish_time`` = that message's time.
* Standard v4 pre-add check: if adding a message would make the payload exceed ``max_bytes`` and
  the container is not empty, the container is flushed first (reason ``max_bytes``,
  ``publish_time`` = the arriving message's time), then the message is added. A message that
  alone exceeds ``max_bytes`` therefore forms its own entry.
* Timer: when a message enters an EMPTY container the timer is set to fire at
  ``open_time + max_publish_delay_ms``. Before any message with ``publish_time >= fire time``
  (of any segment) is processed, every due timer fires, in ``(fire time, segment_id)`` order:
  reason ``max_delay``, ``publish_time`` = the fire time. :meth:`ProducerBatcher.advance_to`
  fires the timers due at or before a given time without a message.
* Explicit flushes (:meth:`ProducerBatcher.flush`, reasons ``end_of_input`` /
  ``segment_sealed``) first fire the timers due by the flush time, then close the remaining
  containers at the flush time (``publish_time`` = the given time).
* On every flush all non-empty inner batches of the container are emitted together, one entry
  each, ordered by each inner batch's highest sequence id ascending (as in key-based batching,
  §7; on equal ids, the batch whose last message came first).
* Emulator choices (documented, not Pulsar facts): Pulsar's timer is a periodic producer task;
  here it is armed by the first message of an empty container, which makes the state machine a
  pure function of the message sequence (and needs a delay of at least 1 ms so that a timer
  always fires after the message that armed it). The pre-add byte check is [infer] in the
  reference (§7). An entry's ``open_time`` is the time of its own first
  message (the inner batch's), not the container's.

Stamping and routing (§7, §3.4): every entry carries ``entry_hash_min`` / ``entry_hash_max`` (min
/ max ``hash_b`` of its messages) and ``bucket_index = bucket_of(splits, entry_hash_min)``, the
bucket the broker routes it to, in every mode (a straddling ``default`` entry is routed whole to
the bucket of its minimum).

Streaming: messages of one producer are given sorted by ``(publish_time, sequence_id)`` in
chunks of any size; the output (entries, entry ids, message → entry mapping) does not depend on
where the chunks are cut, nor on :meth:`~ProducerBatcher.advance_to` calls made with a time not
after the next message's time. The state between calls is the open batches only; the batcher
object pickles.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from pipelines.core.buckets import MAX_HASH, bucket_of_array


class BatchingMode(StrEnum):
    """Producer batching mode (reference §7; seeds: default and key-based batching)."""

    BUCKETED = "bucketed"
    KEY_BASED = "key_based"
    DEFAULT = "default"
    DISABLED = "disabled"


CLOSE_REASONS: tuple[str, ...] = (
    "max_messages",
    "max_bytes",
    "max_delay",
    "end_of_input",
    "segment_sealed",
    "disabled",
)
"""Every ``close_reason`` value an entry can carry; the index is the internal reason code."""
_R_MAX_MESSAGES, _R_MAX_BYTES, _R_MAX_DELAY, _R_END, _R_SEALED, _R_DISABLED = range(6)
FLUSH_REASONS: tuple[str, ...] = ("end_of_input", "segment_sealed")
"""Reasons accepted by :meth:`ProducerBatcher.flush`."""

_NEVER = 2**63 - 1  # "timer not armed" sentinel: compares greater than any int64 time
_REASON_DTYPE = "U14"


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


def _i64(values: Iterable[int] = ()) -> npt.NDArray[np.int64]:
    return np.asarray(list(values) if not isinstance(values, np.ndarray) else values,
                      dtype=np.int64)


@dataclass(frozen=True)
class Entries:
    """Entries emitted by one :class:`ProducerBatcher` call, sorted by ``entry_seq``.

    Entry columns (one row per emitted entry, length ``E``; reference §7 stamping, §3.4 routing):

    ========================  ========  ===========================================================
    ``segment_id``            int64     segment (per-segment container) the entry was written to
    ``bucket_index``          int32     ``bucket_of(segment splits, entry_hash_min)`` (§3.4)
    ``entry_seq``             int64     per-producer running count of emitted entries, from 0
                                        (the ``entry_id``)
    ``entry_hash_min/max``    int32     min / max ``hash_b`` of the entry's messages, inclusive
    ``num_messages``          int64     messages in the entry (>= 1)
    ``payload_bytes``         int64     sum of the messages' payload sizes, bytes
    ``open_time_ms``          int64     publish time of the entry's first message, ms
    ``publish_time_ms``       int64     time the entry was closed (sent), ms
    ``close_reason``          str U14   one of :data:`CLOSE_REASONS`
    ``first_sequence_id``     int64     lowest sequence id in the entry
    ``last_sequence_id``      int64     highest sequence id in the entry
    ========================  ========  ===========================================================

    Message mapping:

    * ``message_entry_seq`` (int64, aligned with the messages passed to this call; empty for
      :meth:`~ProducerBatcher.advance_to` / :meth:`~ProducerBatcher.flush`): the ``entry_seq``
      of the entry holding the message, or ``-1`` while that entry is still open.
    * ``first_ordinal`` (int): producer-wide 0-based ordinal of this call's first message
      (ordinal = position in the producer's whole message sequence).
    * ``carried_ordinal`` / ``carried_sequence_id`` / ``carried_entry_seq`` (int64, same
      length): messages added in EARLIER calls whose entry was emitted in this call.
    """

    segment_id: npt.NDArray[np.int64] = field(default_factory=_i64)
    bucket_index: npt.NDArray[np.int32] = field(
        default_factory=lambda: np.zeros(0, dtype=np.int32))
    entry_seq: npt.NDArray[np.int64] = field(default_factory=_i64)
    entry_hash_min: npt.NDArray[np.int32] = field(
        default_factory=lambda: np.zeros(0, dtype=np.int32))
    entry_hash_max: npt.NDArray[np.int32] = field(
        default_factory=lambda: np.zeros(0, dtype=np.int32))
    num_messages: npt.NDArray[np.int64] = field(default_factory=_i64)
    payload_bytes: npt.NDArray[np.int64] = field(default_factory=_i64)
    open_time_ms: npt.NDArray[np.int64] = field(default_factory=_i64)
    publish_time_ms: npt.NDArray[np.int64] = field(default_factory=_i64)
    close_reason: npt.NDArray[np.str_] = field(
        default_factory=lambda: np.zeros(0, dtype=_REASON_DTYPE))
    first_sequence_id: npt.NDArray[np.int64] = field(default_factory=_i64)
    last_sequence_id: npt.NDArray[np.int64] = field(default_factory=_i64)
    message_entry_seq: npt.NDArray[np.int64] = field(default_factory=_i64)
    first_ordinal: int = 0
    carried_ordinal: npt.NDArray[np.int64] = field(default_factory=_i64)
    carried_sequence_id: npt.NDArray[np.int64] = field(default_factory=_i64)
    carried_entry_seq: npt.NDArray[np.int64] = field(default_factory=_i64)

    ENTRY_COLUMNS = (
        "segment_id", "bucket_index", "entry_seq", "entry_hash_min", "entry_hash_max",
        "num_messages", "payload_bytes", "open_time_ms", "publish_time_ms", "close_reason",
        "first_sequence_id", "last_sequence_id",
    )

    def __len__(self) -> int:
        """Number of entries ``E``."""
        return int(self.entry_seq.shape[0])

    def columns(self) -> dict[str, np.ndarray]:
        """The entry columns only (``ENTRY_COLUMNS`` order), e.g. for ``pandas.DataFrame``."""
        return {name: getattr(self, name) for name in self.ENTRY_COLUMNS}

    @staticmethod
    def concat(parts: Sequence[Entries]) -> Entries:
        """Concatenate results of consecutive calls (columns appended in order).

        ``first_ordinal`` is taken from the first part; ``message_entry_seq`` is concatenated
        as-is (it keeps ``-1`` for messages resolved only by a later part's ``carried_*``).
        """
        if not parts:
            return Entries()
        kwargs: dict[str, Any] = {}
        for f in fields(Entries):
            if f.name == "first_ordinal":
                kwargs[f.name] = parts[0].first_ordinal
            else:
                kwargs[f.name] = np.concatenate([getattr(p, f.name) for p in parts])
        return Entries(**kwargs)


@dataclass
class _OpenBatch:
    """One open inner batch (per bucket / key / the single default batch) of a container."""

    group: int
    count: int
    payload_bytes: int
    hash_min: int
    hash_max: int
    seq_min: int
    seq_max: int
    bucket_min: int
    open_time: int
    max_ordinal: int
    ordinals: list[int]
    sequence_ids: list[int]


@dataclass
class _Container:
    """Open state of one segment's container: aggregate counters, timer, inner batches."""

    fire_time: int
    count: int
    payload_bytes: int
    batches: list[_OpenBatch]


@dataclass
class _Chunk:
    times: npt.NDArray[np.int64]
    seqs: npt.NDArray[np.int64]
    hashes: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    buckets: npt.NDArray[np.int64]
    groups: npt.NDArray[np.int64]
    segments: list[tuple[int, npt.NDArray[np.intp]]]  # (segment id, positions) ascending


class _SegRun:
    """Mutable per-segment scan state within one call (bids are call-local batch ids)."""

    __slots__ = ("fire", "count", "nbytes", "live")

    def __init__(self, fire: int, count: int, nbytes: int, live: dict[int, int]) -> None:
        self.fire = fire
        self.count = count
        self.nbytes = nbytes
        self.live = live


class ProducerBatcher:
    """Event-time batch containers of one producer, one per segment (reference §7, §3.4).

    Feed the producer's messages sorted by ``(publish_time, sequence_id)`` through
    :meth:`add_messages` in chunks of any size; call :meth:`advance_to` when event time moves
    without messages (e.g. at a watermark) and :meth:`flush` when a segment is sealed or input
    ends. Each call returns the :class:`Entries` it emitted. State between calls holds only open
    batches (bounded by ``max_messages`` per open segment container); the object pickles.

    Raises ``ValueError`` at construction when ``config.problems()`` is not empty.
    """

    def __init__(self, config: BatchingConfig | None = None) -> None:
        self.config = config if config is not None else BatchingConfig()
        problems = self.config.problems()
        if problems:
            raise ValueError("invalid batching config: " + "; ".join(problems))
        self.mode = BatchingMode(self.config.mode)
        self._containers: dict[int, _Container] = {}
        self._clock = -_NEVER
        self._messages_added = 0
        self._entries_emitted = 0

    # ------------------------------------------------------------------ introspection
    @property
    def clock_ms(self) -> int:
        """Latest event time seen (message, ``advance_to`` or ``flush``); ms."""
        return self._clock

    @property
    def messages_added(self) -> int:
        """Messages added so far (= ordinal of the next message)."""
        return self._messages_added

    @property
    def entries_emitted(self) -> int:
        """Entries emitted so far (= ``entry_seq`` of the next entry)."""
        return self._entries_emitted

    @property
    def open_messages(self) -> int:
        """Messages currently held in open batches (all segments)."""
        return sum(c.count for c in self._containers.values())

    @property
    def open_segments(self) -> list[int]:
        """Segment ids whose container holds messages, ascending."""
        return sorted(self._containers)

    def next_fire_time(self) -> int | None:
        """Earliest armed timer (ms), or ``None`` when every container is empty."""
        return min((c.fire_time for c in self._containers.values()), default=None)

    # ------------------------------------------------------------------ public calls
    def add_messages(
        self,
        publish_time_ms: npt.ArrayLike,
        sequence_id: npt.ArrayLike,
        segment_id: npt.ArrayLike,
        hash_b: npt.ArrayLike,
        payload_size: npt.ArrayLike,
        key_id: npt.ArrayLike | None,
        splits_by_segment: Mapping[int, Sequence[int]],
    ) -> Entries:
        """Add a chunk of this producer's messages; return the entries emitted meanwhile.

        All arrays are 1-D of the same length ``n``, in the producer's order (sorted by
        ``(publish_time, sequence_id)``): ``publish_time_ms`` int64 ms, non-decreasing and
        ``>= clock_ms``; ``sequence_id`` int64; ``segment_id`` int64; ``hash_b`` ints in
        ``[0, 65535]`` (0 for keyless messages, §1.3); ``payload_size`` int64 bytes ``>= 0``;
        ``key_id`` int64 stable key identity across calls (e.g. a 63-bit key hash), any negative
        value = keyless — required in ``key_based`` mode, ignored (may be ``None``) otherwise.
        ``splits_by_segment`` maps each segment id present to its bucket splits (§3.2).

        Timers due before a message fire first (see module doc). Returns :class:`Entries`
        with ``message_entry_seq`` aligned to the input. Raises ``ValueError`` on length
        mismatch, unsorted or late times, out-of-range ``hash_b``, negative sizes, a segment
        missing from ``splits_by_segment``, or a missing ``key_id`` in ``key_based`` mode.
        """
        times = np.asarray(publish_time_ms, dtype=np.int64).reshape(-1)
        seqs = np.asarray(sequence_id, dtype=np.int64).reshape(-1)
        segs = np.asarray(segment_id, dtype=np.int64).reshape(-1)
        hashes = np.asarray(hash_b, dtype=np.int64).reshape(-1)
        sizes = np.asarray(payload_size, dtype=np.int64).reshape(-1)
        n = times.shape[0]
        arrays = {"sequence_id": seqs, "segment_id": segs, "hash_b": hashes,
                  "payload_size": sizes}
        keys: npt.NDArray[np.int64] | None = None
        if self.mode is BatchingMode.KEY_BASED:
            if key_id is None:
                raise ValueError("key_based batching needs key_id")
            keys = np.asarray(key_id, dtype=np.int64).reshape(-1)
            arrays["key_id"] = keys
        for name, arr in arrays.items():
            if arr.shape[0] != n:
                raise ValueError(f"{name} has {arr.shape[0]} values, publish_time_ms has {n}")
        if n == 0:
            return Entries(first_ordinal=self._messages_added)
        if n > 1 and bool(np.any(times[1:] < times[:-1])):
            raise ValueError("publish_time_ms must be non-decreasing within a producer")
        if int(times[0]) < self._clock:
            raise ValueError(f"message at {int(times[0])} ms is before the batcher clock "
                             f"{self._clock} ms (late message)")
        if bool(np.any((hashes < 0) | (hashes > MAX_HASH))):
            raise ValueError(f"hash_b values must be in [0, {MAX_HASH}]")
        if bool(np.any(sizes < 0)):
            raise ValueError("payload_size must be >= 0")

        buckets = np.empty(n, dtype=np.int64)
        uniq_segs, seg_inv = np.unique(segs, return_inverse=True)
        single = uniq_segs.shape[0] == 1
        seg_positions: list[npt.NDArray[np.intp]] = []
        if single:
            seg_positions.append(np.arange(n))
        else:
            order = np.argsort(seg_inv, kind="stable")
            cuts = np.searchsorted(seg_inv[order], np.arange(1, uniq_segs.shape[0]))
            seg_positions.extend(np.split(order, cuts))
        for s, pos in zip(uniq_segs.tolist(), seg_positions, strict=True):
            if s not in splits_by_segment:
                raise ValueError(f"no bucket splits given for segment {s}")
            buckets[pos] = bucket_of_array(splits_by_segment[s], hashes[pos])

        if self.mode is BatchingMode.DISABLED:
            return self._emit_disabled(times, seqs, segs, hashes, sizes, buckets)
        groups: npt.NDArray[np.int64]
        if self.mode is BatchingMode.BUCKETED:
            groups = buckets
        elif self.mode is BatchingMode.KEY_BASED:
            assert keys is not None
            groups = np.where(keys < 0, -1, keys)
        else:
            groups = np.zeros(n, dtype=np.int64)
        chunk = _Chunk(times, seqs, hashes, sizes, buckets, groups,
                       list(zip(uniq_segs.tolist(), seg_positions, strict=True)))
        return self._run(chunk, horizon=int(times[-1]), close=None)

    def advance_to(self, now_ms: int) -> Entries:
        """Fire every timer due at or before ``now_ms`` (reason ``max_delay``).

        Call it only with a time not after the next message's publish time (a later message
        before ``now_ms`` would be rejected as late). Times before ``clock_ms`` are a no-op.
        """
        now = int(now_ms)
        if self.mode is BatchingMode.DISABLED or now < self._clock:
            self._clock = max(self._clock, now)
            return Entries(first_ordinal=self._messages_added)
        return self._run(None, horizon=now, close=None)

    def flush(self, now_ms: int, reason: str = "end_of_input",
              segment_ids: Iterable[int] | None = None) -> Entries:
        """Close containers at ``now_ms`` with ``reason`` (``end_of_input`` / ``segment_sealed``).

        First fires every timer due at or before ``now_ms`` (those entries keep reason
        ``max_delay`` and their fire time), then closes the still non-empty containers of
        ``segment_ids`` (all segments when ``None``) in ascending segment order, each entry
        with ``publish_time = now_ms``. Raises ``ValueError`` for another reason or for
        ``now_ms < clock_ms``.
        """
        if reason not in FLUSH_REASONS:
            raise ValueError(f"flush reason must be one of {FLUSH_REASONS}, got {reason!r}")
        now = int(now_ms)
        if now < self._clock:
            raise ValueError(f"flush at {now} ms is before the batcher clock {self._clock} ms")
        if self.mode is BatchingMode.DISABLED:
            self._clock = now
            return Entries(first_ordinal=self._messages_added)
        code = CLOSE_REASONS.index(reason)
        segs = None if segment_ids is None else {int(s) for s in segment_ids}
        return self._run(None, horizon=now, close=(now, code, segs))

    # ------------------------------------------------------------------ internals
    def _emit_disabled(self, times: np.ndarray, seqs: np.ndarray, segs: np.ndarray,
                       hashes: np.ndarray, sizes: np.ndarray, buckets: np.ndarray) -> Entries:
        n = times.shape[0]
        first = self._messages_added
        entry_seq = self._entries_emitted + np.arange(n, dtype=np.int64)
        self._messages_added += n
        self._entries_emitted += n
        self._clock = int(times[-1])
        h32 = hashes.astype(np.int32)
        return Entries(
            segment_id=segs.copy(), bucket_index=buckets.astype(np.int32), entry_seq=entry_seq,
            entry_hash_min=h32, entry_hash_max=h32.copy(),
            num_messages=np.ones(n, dtype=np.int64), payload_bytes=sizes.copy(),
            open_time_ms=times.copy(), publish_time_ms=times.copy(),
            close_reason=np.full(n, "disabled", dtype=_REASON_DTYPE),
            first_sequence_id=seqs.copy(), last_sequence_id=seqs.copy(),
            message_entry_seq=entry_seq.copy(), first_ordinal=first,
        )

    def _run(self, chunk: _Chunk | None, horizon: int,
             close: tuple[int, int, set[int] | None] | None) -> Entries:
        """One state-machine step: scan ``chunk``, fire timers due by ``horizon``, close."""
        cfg = self.config
        # --- call-local batch ids: carried open batches first (0..C-1), new ones after.
        carried: list[_OpenBatch] = []
        bid_seg: list[int] = []
        runs: dict[int, _SegRun] = {}
        for s in sorted(self._containers):
            cont = self._containers[s]
            live: dict[int, int] = {}
            for b in cont.batches:
                live[b.group] = len(carried)
                carried.append(b)
                bid_seg.append(s)
            runs[s] = _SegRun(cont.fire_time, cont.count, cont.payload_bytes, live)
        n_carried = len(carried)
        next_bid = n_carried

        timer_events: list[tuple[int, int, list[int]]] = []  # (fire time, segment, bids)
        msg_events: list[tuple[int, int, int, int, list[int]]] = []  # (pos, phase, t, code, bids)
        n = 0
        bid_arr = np.zeros(0, dtype=np.int64)
        if chunk is not None:
            n = chunk.times.shape[0]
            bid_arr = np.empty(n, dtype=np.int64)
            for s, pos in chunk.segments:
                run = runs.get(s)
                if run is None:
                    run = runs[s] = _SegRun(_NEVER, 0, 0, {})
                out: list[int] = []
                start_bid = next_bid
                next_bid = _scan_segment(
                    s, chunk.times[pos].tolist(), chunk.sizes[pos].tolist(),
                    chunk.groups[pos].tolist(), pos.tolist(), run, cfg.max_messages,
                    cfg.max_bytes, cfg.max_publish_delay_ms, next_bid, out,
                    timer_events, msg_events)
                bid_seg.extend([s] * (next_bid - start_bid))
                bid_arr[pos] = out

        # --- timers still armed and due by the horizon
        for s in sorted(runs):
            run = runs[s]
            if run.count and run.fire <= horizon:
                timer_events.append((run.fire, s, list(run.live.values())))
                run.fire, run.count, run.nbytes, run.live = _NEVER, 0, 0, {}

        # --- global event order: (position of the message it precedes/follows, phase, ...)
        events: list[tuple[int, int, int, int, int, int, list[int]]] = []
        if timer_events:
            fires = np.asarray([e[0] for e in timer_events], dtype=np.int64)
            if chunk is not None:
                js = np.searchsorted(chunk.times, fires, side="left").tolist()
            else:
                js = [0] * len(timer_events)
            for j, (f, s, bids) in zip(js, timer_events, strict=True):
                events.append((j, 0, f, s, f, _R_MAX_DELAY, bids))
        for p, phase, t, code, bids in msg_events:
            events.append((p, phase, 0, 0, t, code, bids))
        if close is not None:
            now, code, wanted = close
            for s in sorted(runs):
                run = runs[s]
                if run.count and (wanted is None or s in wanted):
                    events.append((n, 3, 0, s, now, code, list(run.live.values())))
                    run.fire, run.count, run.nbytes, run.live = _NEVER, 0, 0, {}
        events.sort(key=lambda e: (e[0], e[1], e[2], e[3]))

        # --- per-batch statistics (carried part + this chunk)
        m = next_bid
        cnt = np.zeros(m, dtype=np.int64)
        nbytes = np.zeros(m, dtype=np.int64)
        hmin = np.full(m, MAX_HASH + 1, dtype=np.int64)
        hmax = np.full(m, -1, dtype=np.int64)
        smin = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
        smax = np.full(m, np.iinfo(np.int64).min, dtype=np.int64)
        bmin = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
        topen = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
        omax = np.full(m, -1, dtype=np.int64)
        for i, b in enumerate(carried):
            cnt[i], nbytes[i], hmin[i], hmax[i] = b.count, b.payload_bytes, b.hash_min, b.hash_max
            smin[i], smax[i], bmin[i], topen[i] = b.seq_min, b.seq_max, b.bucket_min, b.open_time
            omax[i] = b.max_ordinal
        first_ordinal = self._messages_added
        sorted_pos: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)
        ub: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        starts: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)
        counts: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)
        if chunk is not None and n:
            sorted_pos = np.argsort(bid_arr, kind="stable")
            sb = bid_arr[sorted_pos]
            starts = np.flatnonzero(np.r_[True, sb[1:] != sb[:-1]])
            ub = sb[starts]
            counts = np.diff(np.r_[starts, n])
            cnt[ub] += counts
            nbytes[ub] += np.add.reduceat(chunk.sizes[sorted_pos], starts)
            hs = chunk.hashes[sorted_pos]
            hmin[ub] = np.minimum(hmin[ub], np.minimum.reduceat(hs, starts))
            hmax[ub] = np.maximum(hmax[ub], np.maximum.reduceat(hs, starts))
            ss = chunk.seqs[sorted_pos]
            smin[ub] = np.minimum(smin[ub], np.minimum.reduceat(ss, starts))
            smax[ub] = np.maximum(smax[ub], np.maximum.reduceat(ss, starts))
            bmin[ub] = np.minimum(bmin[ub], np.minimum.reduceat(chunk.buckets[sorted_pos], starts))
            topen[ub] = np.minimum(topen[ub], np.minimum.reduceat(chunk.times[sorted_pos], starts))
            omax[ub] = np.maximum(omax[ub], first_ordinal + np.maximum.reduceat(sorted_pos, starts))

        # --- entries: flatten events, order each flush's batches by highest sequence id
        ev_rank: list[int] = []
        ev_bids: list[int] = []
        ev_time: list[int] = []
        ev_code: list[int] = []
        for r, ev in enumerate(events):
            bids = ev[6]
            ev_rank.extend([r] * len(bids))
            ev_bids.extend(bids)
            ev_time.append(ev[4])
            ev_code.append(ev[5])
        rank_a = np.asarray(ev_rank, dtype=np.int64)
        bids_a = np.asarray(ev_bids, dtype=np.int64)
        order = np.lexsort((omax[bids_a], smax[bids_a], rank_a))
        rank_a, bids_a = rank_a[order], bids_a[order]
        e = bids_a.shape[0]
        entry_seq = self._entries_emitted + np.arange(e, dtype=np.int64)
        lut = np.full(m, -1, dtype=np.int64)
        lut[bids_a] = entry_seq
        time_a = np.asarray(ev_time, dtype=np.int64)
        code_a = np.asarray(ev_code, dtype=np.int64)
        reasons = np.asarray(CLOSE_REASONS, dtype=_REASON_DTYPE)

        carried_ord: list[int] = []
        carried_seq: list[int] = []
        carried_ent: list[int] = []
        for i, b in enumerate(carried):
            es = int(lut[i])
            if es >= 0:
                carried_ord.extend(b.ordinals)
                carried_seq.extend(b.sequence_ids)
                carried_ent.extend([es] * len(b.ordinals))

        result = Entries(
            segment_id=np.asarray(bid_seg, dtype=np.int64)[bids_a] if e else _i64(),
            bucket_index=bmin[bids_a].astype(np.int32),
            entry_seq=entry_seq,
            entry_hash_min=hmin[bids_a].astype(np.int32),
            entry_hash_max=hmax[bids_a].astype(np.int32),
            num_messages=cnt[bids_a],
            payload_bytes=nbytes[bids_a],
            open_time_ms=topen[bids_a],
            publish_time_ms=time_a[rank_a] if e else _i64(),
            close_reason=reasons[code_a[rank_a]] if e else np.zeros(0, dtype=_REASON_DTYPE),
            first_sequence_id=smin[bids_a],
            last_sequence_id=smax[bids_a],
            message_entry_seq=lut[bid_arr],
            first_ordinal=first_ordinal,
            carried_ordinal=_i64(carried_ord),
            carried_sequence_id=_i64(carried_seq),
            carried_entry_seq=_i64(carried_ent),
        )

        # --- new state: open batches only
        containers: dict[int, _Container] = {}
        for s in sorted(runs):
            run = runs[s]
            if not run.count:
                continue
            batches: list[_OpenBatch] = []
            for g, bid in run.live.items():
                if bid < n_carried:
                    ordinals = list(carried[bid].ordinals)
                    seq_ids = list(carried[bid].sequence_ids)
                else:
                    ordinals, seq_ids = [], []
                k = int(np.searchsorted(ub, bid))
                if k < ub.shape[0] and ub[k] == bid:
                    pos = sorted_pos[starts[k]:starts[k] + counts[k]]
                    assert chunk is not None
                    ordinals.extend((first_ordinal + pos).tolist())
                    seq_ids.extend(chunk.seqs[pos].tolist())
                batches.append(_OpenBatch(
                    group=g, count=int(cnt[bid]), payload_bytes=int(nbytes[bid]),
                    hash_min=int(hmin[bid]), hash_max=int(hmax[bid]), seq_min=int(smin[bid]),
                    seq_max=int(smax[bid]), bucket_min=int(bmin[bid]),
                    open_time=int(topen[bid]), max_ordinal=int(omax[bid]),
                    ordinals=ordinals, sequence_ids=seq_ids))
            containers[s] = _Container(run.fire, run.count, run.nbytes, batches)
        self._containers = containers
        self._messages_added += n
        self._entries_emitted += e
        self._clock = max(self._clock, horizon)
        return result


def _scan_segment(
    seg: int, times: list[int], sizes: list[int], groups: list[int], pos: list[int],
    run: _SegRun, max_messages: int, max_bytes: int, delay: int, next_bid: int,
    out: list[int], timer_events: list[tuple[int, int, list[int]]],
    msg_events: list[tuple[int, int, int, int, list[int]]],
) -> int:
    """Hot loop: one segment container over its messages (Python lists, local variables).

    Appends each message's call-local batch id to ``out`` and flush events to the event lists;
    returns the next free batch id. Phases: 1 = pre-add flush, 2 = full after add.
    """
    fire = run.fire
    count = run.count
    nbytes = run.nbytes
    live = run.live
    append = out.append
    for k in range(len(times)):
        t = times[k]
        size = sizes[k]
        if t >= fire:
            timer_events.append((fire, seg, list(live.values())))
            live = {}
            count = 0
            nbytes = 0
        elif count and nbytes + size > max_bytes:
            msg_events.append((pos[k], 1, t, _R_MAX_BYTES, list(live.values())))
            live = {}
            count = 0
            nbytes = 0
        if not count:
            fire = t + delay
        g = groups[k]
        b = live.get(g)
        if b is None:
            b = live[g] = next_bid
            next_bid += 1
        append(b)
        count += 1
        nbytes += size
        if count >= max_messages:
            msg_events.append((pos[k], 2, t, _R_MAX_MESSAGES, list(live.values())))
        elif nbytes >= max_bytes:
            msg_events.append((pos[k], 2, t, _R_MAX_BYTES, list(live.values())))
        else:
            continue
        live = {}
        count = 0
        nbytes = 0
        fire = _NEVER
    run.fire = fire if count else _NEVER
    run.count = count
    run.nbytes = nbytes
    run.live = live
    return next_bid
