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
    """A segment container's open batch at the end of a call: its cb (index in the call's
    :class:`_CutArrays`), timer, aggregate counters and inner batches (``live``: group →
    call-local batch id, in arrival order)."""

    __slots__ = ("cb", "fire", "count", "nbytes", "live")

    def __init__(self, cb: int, fire: int, count: int, nbytes: int,
                 live: dict[int, int]) -> None:
        self.cb = cb
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

    def _cut_containers(self, chunk: _Chunk | None, horizon: int,
                        close: tuple[int, int, set[int] | None] | None) -> _Cuts:
        """Every segment container's batches of one call (cbs; :func:`_cut_segment`), in
        segment order, with the timers due by ``horizon`` fired and the ``close`` applied.
        Each closed cb is one flush event, keyed (position, phase, fire time, segment) in
        the order the container rules give: a timer fires before the first message at or after
        its time (phase 0), a pre-add byte flush comes before its message (1), a full
        container after it (2), closes last (3)."""
        cfg = self.config
        n = 0 if chunk is None else chunk.times.shape[0]
        positions = dict(chunk.segments) if chunk is not None else {}
        none = np.zeros(0, dtype=np.intp)
        cb = _CutTable()
        msg_cb = np.empty(n, dtype=np.int64)
        carried_cb: dict[int, int] = {}  # segment → its carried cb
        open_cb: dict[int, _SegRun] = {}  # segment → its open cb (live: filled by the caller)
        for s in sorted(set(self._containers) | set(positions)):
            cont = self._containers.get(s)
            pos = positions.get(s, none)
            t = chunk.times[pos] if chunk is not None else _i64()
            sizes = chunk.sizes[pos] if chunk is not None else _i64()
            carry = None if cont is None else (cont.count, cont.payload_bytes, cont.fire_time)
            cut = _cut_segment(t, sizes, carry, cfg.max_messages, cfg.max_bytes,
                               cfg.max_publish_delay_ms)
            base = cb.size
            if carry is not None:
                carried_cb[s] = base
            length = t.shape[0]
            if length:
                msg_cb[pos] = base + np.searchsorted(cut.start, np.arange(length),
                                                     side="right") - 1
            at = np.minimum(cut.step, max(length - 1, 0))  # the closing message (if closed)
            step_pos = pos[at] if length else np.zeros(len(cut.start), dtype=np.int64)
            timer = cut.kind == 0
            k0 = np.where(timer, _positions(chunk, cut.fire), step_pos)
            k1 = np.where(timer, 0, np.where(cut.kind == 1, 1, 2))
            when = np.where(timer, cut.fire, t[at] if length else cut.fire)
            closed = cut.step < length
            cb.add(s, carry is not None, k0, k1, np.where(timer, cut.fire, 0),
                   np.where(timer, s, 0), when, _KIND_CODES[cut.kind], closed)
            last = len(cut.start) - 1
            if not closed[last]:
                start = int(cut.start[last])
                held, held_bytes = length - start, int(sizes[start:].sum())
                if last == 0 and carry is not None:
                    held, held_bytes = held + carry[0], held_bytes + carry[1]
                open_cb[s] = _SegRun(base + last, int(cut.fire[last]), held, held_bytes, {})
        ev = cb.arrays()

        # --- timers still armed and due by the horizon, then the closes
        for s in sorted(open_cb):
            run = open_cb[s]
            if run.fire <= horizon:
                ev.set(run.cb, int(_positions(chunk, np.asarray([run.fire]))[0]), 0, run.fire,
                       s, run.fire, _R_MAX_DELAY)
                del open_cb[s]
        if close is not None:
            now, close_code, wanted = close
            for s in sorted(open_cb):
                if wanted is None or s in wanted:
                    ev.set(open_cb.pop(s).cb, n, 3, 0, s, now, close_code)

        return _Cuts(ev, msg_cb, carried_cb, open_cb)

    def _run(self, chunk: _Chunk | None, horizon: int,
             close: tuple[int, int, set[int] | None] | None) -> Entries:
        """One state-machine step: cut ``chunk`` into container batches per segment
        (:func:`_cut_segment`), fire the timers due by ``horizon``, close (``close``: time,
        reason code, segments or ``None`` = all); emit the closed batches' inner batches."""
        # --- call-local inner-batch ids (bids): carried open batches first (0..C-1)
        carried: list[_OpenBatch] = []
        bid_seg: list[int] = []
        carried_live: dict[int, dict[int, int]] = {}  # segment → group → bid
        for s in sorted(self._containers):
            carried_live[s] = {}
            for b in self._containers[s].batches:
                carried_live[s][b.group] = len(carried)
                carried.append(b)
                bid_seg.append(s)
        n_carried = len(carried)
        n = 0 if chunk is None else chunk.times.shape[0]

        cuts = self._cut_containers(chunk, horizon, close)
        ev, msg_cb, carried_cb, runs = cuts.ev, cuts.msg_cb, cuts.carried_cb, cuts.open_cb
        positions = dict(chunk.segments) if chunk is not None else {}
        none = np.zeros(0, dtype=np.intp)

        # --- inner batches: one per (cb, group); a carried cb keeps its carried bids
        next_bid = n_carried
        bid_arr = np.zeros(0, dtype=np.int64)
        if chunk is not None and n:
            order = np.lexsort((chunk.groups, msg_cb))
            sc, sg = msg_cb[order], chunk.groups[order]
            first = np.flatnonzero(np.r_[True, (sc[1:] != sc[:-1]) | (sg[1:] != sg[:-1])])
            run_cb, run_g = sc[first], sg[first]
            run_bid = np.full(first.shape[0], -1, dtype=np.int64)
            for r in np.flatnonzero(ev.carried[run_cb]).tolist():
                run_bid[r] = carried_live[int(ev.seg[run_cb[r]])].get(int(run_g[r]), -1)
            new = run_bid < 0
            run_bid[new] = n_carried + np.arange(int(new.sum()), dtype=np.int64)
            next_bid = n_carried + int(new.sum())
            bid_seg.extend(ev.seg[run_cb[new]].tolist())
            bid_arr = np.empty(n, dtype=np.int64)
            bid_arr[order] = np.repeat(run_bid, np.diff(np.r_[first, n]))
            bid_cb = np.concatenate([[carried_cb[s] for s in bid_seg[:n_carried]],
                                     run_cb[new]]).astype(np.int64)
        else:
            bid_cb = np.asarray([carried_cb[s] for s in bid_seg], dtype=np.int64)
        # the open cbs' inner batches, in the order their groups arrived (the carried ones first)
        for s, run in runs.items():
            live = dict(carried_live[s]) if carried_cb.get(s) == run.cb else {}
            if chunk is not None and n:
                mine = positions.get(s, none)
                mine = mine[msg_cb[mine] == run.cb]
                bids, at = np.unique(bid_arr[mine], return_index=True)
                for bid, g in zip(bids[np.argsort(at)].tolist(),
                                  chunk.groups[mine][np.sort(at)].tolist(), strict=True):
                    live.setdefault(g, bid)
            run.live = live

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

        # --- entries: the closed cbs' inner batches, by event, then highest sequence id
        closed_bids = np.flatnonzero(ev.closed[bid_cb])
        rank = np.empty(ev.size, dtype=np.int64)
        rank[np.lexsort((ev.k3, ev.k2, ev.k1, ev.k0))] = np.arange(ev.size, dtype=np.int64)
        bids_a = closed_bids[np.lexsort((omax[closed_bids], smax[closed_bids],
                                         rank[bid_cb[closed_bids]]))]
        cb_a = bid_cb[bids_a]
        e = bids_a.shape[0]
        entry_seq = self._entries_emitted + np.arange(e, dtype=np.int64)
        lut = np.full(m, -1, dtype=np.int64)
        lut[bids_a] = entry_seq
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
            segment_id=np.asarray(bid_seg, dtype=np.int64)[bids_a],
            bucket_index=bmin[bids_a].astype(np.int32),
            entry_seq=entry_seq,
            entry_hash_min=hmin[bids_a].astype(np.int32),
            entry_hash_max=hmax[bids_a].astype(np.int32),
            num_messages=cnt[bids_a],
            payload_bytes=nbytes[bids_a],
            open_time_ms=topen[bids_a],
            publish_time_ms=ev.time[cb_a],
            close_reason=reasons[ev.code[cb_a]],
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
        for s in sorted(runs):  # every open cb holds messages
            run = runs[s]
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


_KIND_CODES = np.asarray([_R_MAX_DELAY, _R_MAX_BYTES, _R_MAX_MESSAGES, _R_MAX_BYTES],
                         dtype=np.int64)
"""Close reason code of each :class:`_Cut` kind."""


@dataclass(frozen=True)
class _Cut:
    """One segment container's batches of one call, in order (the carried one first, if any).

    ``start``: local index of each batch's first message (0 for the carried batch); ``step``:
    local index of the message at which it closed (``>= L`` = still open); ``kind``: 0 timer
    (before that message), 1 pre-add byte check (before it), 2 full by messages (after it),
    3 full by bytes (after it); ``fire``: its timer's fire time (ms)."""

    start: npt.NDArray[np.int64]
    step: npt.NDArray[np.int64]
    kind: npt.NDArray[np.int64]
    fire: npt.NDArray[np.int64]


def _cut_segment(times: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64],
                 carry: tuple[int, int, int] | None, max_messages: int, max_bytes: int,
                 delay: int) -> _Cut:
    """Cut one segment container's messages (``times`` ms non-decreasing, ``sizes`` bytes) into
    batches, as the container rules of the module doc do message by message: a batch that
    starts at message ``i`` (container empty) closes at the first of — its timer
    (``times[i] + delay``) reached by a message, before it; the message that would take the
    payload past ``max_bytes``, before it (not for the batch's first message); the message
    making it full (``max_messages``, then ``max_bytes``), after it. Ties go to the earlier
    check (timer, pre-add, messages, bytes). Each batch's end is found for every ``i`` at once
    (``searchsorted`` on times and cumulative sizes); only the chain of batch starts is a loop,
    one step per batch. ``carry``: ``(count, payload bytes, fire time)`` of the container's
    open batch from an earlier call, which continues first."""
    length = times.shape[0]
    cum = np.zeros(length + 1, dtype=np.int64)
    np.cumsum(sizes, out=cum[1:])
    idx = np.arange(length, dtype=np.int64)
    fire = times + delay
    by_bytes = np.searchsorted(cum, cum[:-1] + max_bytes, side="left") - 1
    over = cum[np.minimum(by_bytes, length - 1) + 1] - cum[:-1] > max_bytes
    bytes_kind = np.where(over & (by_bytes > idx) & (by_bytes < length), 1, 3)
    key = np.minimum(np.minimum(np.searchsorted(times, fire, side="left") * 4,
                                (idx + max_messages - 1) * 4 + 2),
                     by_bytes * 4 + bytes_kind)
    step, kind = key >> 2, key & 3
    following = np.where(kind <= 1, step, step + 1).tolist()
    starts: list[int] = []
    steps: list[int] = []
    kinds: list[int] = []
    fires: list[int] = []
    at = 0
    if carry is not None:
        count, nbytes, fire0 = carry
        b = int(np.searchsorted(cum, max_bytes - nbytes, side="left")) - 1
        b_kind = 1 if b < length and nbytes + int(cum[b + 1]) > max_bytes else 3
        key0 = min(int(np.searchsorted(times, fire0, side="left")) * 4,
                   (max_messages - count - 1) * 4 + 2, b * 4 + b_kind)
        starts.append(0)
        steps.append(key0 >> 2)
        kinds.append(key0 & 3)
        fires.append(fire0)
        at = (key0 >> 2) + (0 if key0 & 3 <= 1 else 1)
    first = len(starts)
    while at < length:
        starts.append(at)
        at = following[at]
    fresh = np.asarray(starts[first:], dtype=np.int64)
    return _Cut(np.asarray(starts, dtype=np.int64),
                np.concatenate([np.asarray(steps, dtype=np.int64), step[fresh]]),
                np.concatenate([np.asarray(kinds, dtype=np.int64), kind[fresh]]),
                np.concatenate([np.asarray(fires, dtype=np.int64), fire[fresh]]))


def _positions(chunk: _Chunk | None, fires: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Chunk position of the first message at or after each timer's fire time (all segments):
    the timer fires before it."""
    if chunk is None:
        return np.zeros(fires.shape[0], dtype=np.int64)
    return np.searchsorted(chunk.times, fires, side="left").astype(np.int64)


class _CutTable:
    """The container batches (cbs) of one call, all segments: per-segment parts appended, then
    :meth:`arrays` makes one set of columns; events of cbs closed later are set by index."""

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, ...]] = []
        self.size = 0

    def add(self, seg: int, carried: bool, *columns: np.ndarray) -> None:
        """``columns``: k0, k1, k2, k3 (event sort key), time, code, closed — aligned."""
        k = columns[0].shape[0]
        flags = np.zeros(k, dtype=bool)
        flags[:1] = carried
        self.parts.append((np.full(k, seg, dtype=np.int64), flags, *columns))
        self.size += k

    def arrays(self) -> _CutArrays:
        names = ("seg", "carried", "k0", "k1", "k2", "k3", "time", "code", "closed")
        if not self.parts:
            return _CutArrays(*[np.zeros(0, dtype=bool if n in ("carried", "closed")
                                         else np.int64) for n in names])
        return _CutArrays(*[np.concatenate([p[i] for p in self.parts]).astype(
            bool if n in ("carried", "closed") else np.int64) for i, n in enumerate(names)])


@dataclass
class _CutArrays:
    """Columns of :class:`_CutTable`: segment, carried (the segment's carried batch), event
    sort key (k0..k3), publish time (ms), reason code, closed."""

    seg: np.ndarray
    carried: np.ndarray
    k0: np.ndarray
    k1: np.ndarray
    k2: np.ndarray
    k3: np.ndarray
    time: np.ndarray
    code: np.ndarray
    closed: np.ndarray

    @property
    def size(self) -> int:
        return int(self.seg.shape[0])

    def set(self, k: int, k0: int, k1: int, k2: int, k3: int, time: int, code: int) -> None:
        """Close cb ``k`` with this event."""
        self.k0[k], self.k1[k], self.k2[k], self.k3[k] = k0, k1, k2, k3
        self.time[k], self.code[k], self.closed[k] = time, code, True


@dataclass
class _Cuts:
    """:meth:`ProducerBatcher._cut_containers`'s result: the cbs (:class:`_CutArrays`), each
    message's cb, each segment's carried cb, and the segments whose cb stays open."""

    ev: _CutArrays
    msg_cb: np.ndarray
    carried_cb: dict[int, int]
    open_cb: dict[int, _SegRun]
