"""The emulation stages around ``pipelines.core``, in two layers:

- **group functions** — plain pandas in, pandas out, plus the group's carried state (pickled
  blobs): :func:`control_group` (a topic's routing and controller), :func:`batch_topic` (its
  producers' bucketed batching), :func:`dispatch_group` (a topic's subscriptions), composed per
  topic by :func:`topic_group`. No Spark in them; the local engine (:mod:`pipelines.local`)
  calls :func:`topic_group` on pandas groups, the Spark wrapper below in its tasks. Every
  emulation rule lives in ``pipelines.core``; these only sort, slice and convert (emulated ms →
  UTC timestamps in log time).
- **staging and output files** — the staged messages partitioned by topic
  (:class:`StagingWriter`, :func:`read_topic`), written by the replay's staging pass
  (:func:`stage_batch`: the input rules of ``pipelines.ingest.rules`` and the staging in one
  ``mapInArrow``), and the typed Parquet files of output rows (:class:`FrameWriter`) that the
  Spark runtime (:mod:`pipelines.spark`: the group functions as grouped stateful operators)
  writes and the driver commits to Delta.

Window contract: a call finalizes the messages with ``event_ms < horizon_ms`` (``None`` = no
horizon: everything given), in event-time order after earlier windows; ``final`` = end of input.
Outputs do not depend on how the input is cut into windows (the core is chunking-invariant).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.contract.config import ConfigError, ReplayConfig
from pipelines.contract.schemas import arrow_schema
from pipelines.core.assignment import SubscriptionType
from pipelines.core.batching import (
    BatchingConfig,
    BatchingMode,
    ContainerState,
    Messages,
    batch,
    reroutes,
)
from pipelines.core.controller import (
    ConsumerSpec,
    ControllerSettings,
    SubscriptionSpec,
    TopicController,
    segment_rows,
)
from pipelines.core.dispatch import ConsumerSpec as DConsumer
from pipelines.core.dispatch import SubscriptionDispatcher, reader_subscription
from pipelines.core.layout import SegmentLayout, change_times, layout_as_of
from pipelines.delta_io import conform_arrow
from pipelines.ingest.privacy import Pseudonymizer
from pipelines.ingest.rules import (
    MINUTE_HINT,
    ingest_batches,
    key_hashes_arrow,
    late_rows,
    minutes_misplaced,
    verdict_rows,
)
from pipelines.storage import arrow_filesystem

SORT_KEYS = ["event_ms", "producer_name", "_seq_sort"]
"""Replay order of a topic's messages (``_seq_sort``: ``sequence_id``, null as -1)."""

TIE_KEYS = ["publish_time", "key", "payload_size"]
"""Replay order among messages equal in :data:`SORT_KEYS` (e.g. a producer's messages of one
ms without sequence ids): sub-ms publish time, key, size. Messages equal in these too are equal
in every column the emulation and the tables use, so their order cannot change a table, and the
order never depends on how the input was chunked into files or micro-batches."""

MESSAGE_COLUMNS = ["topic", "key", "producer_name", "sequence_id", "publish_time",
                   "payload_size", "hash32", "segment_hash", "hash_b", "segment_id",
                   "bucket_index", "layout_epoch"]
"""Routed message columns carried into the ``messages`` table (``entry_id`` is added)."""


def table_columns(table: str) -> list[str]:
    """Columns of output ``table`` without ``run_id`` (what the stages produce)."""
    return [n for n in arrow_schema(table).names if n != "run_id"]


ENTRY_COLUMNS = [*table_columns("entries"), "emu_publish_ms"]
"""Columns of the entries frames the data plane emits: the ``entries`` table's plus
``emu_publish_ms`` (int64, the emulated-clock publish time dispatch works on)."""

DISPATCH_TABLES = {"dispatch": "dispatch", "consumer_load": "consumer_load",
                   "handoff": "bucket_handoffs", "window_stats": "subscription_stats",
                   "segment_drain": "segment_drains"}
"""``_kind`` of a dispatch-stage row → its output table."""


@dataclass(frozen=True)
class StageSettings:
    """What the stages need from the config, in emulated-clock ms (picklable, small)."""

    config: ReplayConfig
    speed: float
    subscriptions: tuple[SubscriptionSpec, ...]
    capacities: Mapping[tuple[str, str], tuple[float | None, int]] = field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: ReplayConfig, first_event_ms: int | None) -> StageSettings:
        """``first_event_ms`` is the emulated time of the first message (consumer join offsets
        count from it, in log time).

        A consumer's reconnects must lie after its join and before its leave in log time (a
        seconds offset against a timestamp is checked here, once the first event is known:
        :class:`~pipelines.contract.config.ConfigError` otherwise). A reconnect that lands on the
        join or leave millisecond of the emulated clock (``speed`` compression) merges into it."""
        speed = cfg.replay.speed
        first_log_ms = int((first_event_ms or 0) * speed)
        subs, caps = [], {}
        for i, sub in enumerate(cfg.subscriptions):
            consumers = []
            for j, c in enumerate(sub.consumers):
                join, leave = c.join_ms(first_log_ms), c.leave_ms(first_log_ms)
                reconnects = c.reconnects_ms(first_log_ms)
                bad = [r for r in reconnects if r <= join or (leave is not None and r >= leave)]
                if bad:
                    raise ConfigError([f"subscriptions.{i}.consumers.{j}: every reconnect must "
                                       f"lie after join and before leave (a reconnect at "
                                       f"{bad[0] - first_log_ms} ms after the first event "
                                       f"does not)"])
                e_join = int(join / speed)
                e_leave = None if leave is None else int(leave / speed)
                consumers.append(ConsumerSpec(
                    str(c.name), e_join, e_leave,
                    tuple(sorted({e for e in (int(r / speed) for r in reconnects)
                                  if e > e_join and (e_leave is None or e < e_leave)}))))
                caps[(sub.name, str(c.name))] = (
                    None if c.capacity_msg_per_s is None else c.capacity_msg_per_s * speed,
                    int(c.ack_delay_ms / speed))
            subs.append(SubscriptionSpec(sub.name, SubscriptionType(str(sub.type).lower()),
                                         tuple(consumers), sub.grouped))
        return cls(cfg, speed, tuple(subs), caps)

    def controller_settings(self, topic: str) -> ControllerSettings:
        r, t = self.config.replay, self.config.topic
        return ControllerSettings(
            policy=self.config.policy_for(topic), initial_segments=t.initial_segments,
            bucket_budget=t.bucket_budget, auto_scale_interval_ms=r.auto_scale_interval_s * 1000,
            load_report_interval_ms=r.load_report_interval_s * 1000,
            rate_window_ms=r.rate_window_s * 1000,
            rate_change_threshold=r.load_report_rate_change_threshold)

    def batching(self) -> BatchingConfig:
        b = self.config.batching_config()
        # Batch delay is producer wall time: on the emulated clock it shrinks with speed.
        return BatchingConfig(b.mode, b.max_messages, b.max_bytes,
                              max(1, int(b.max_publish_delay_ms / self.speed)))

    @property
    def consumer_window_ms(self) -> int:
        """Length of a ``consumer_load`` window on the emulated clock (ms)."""
        return int(self.config.replay.consumer_window_s * 1000 / self.speed)


def _sort_codes(s: pd.Series) -> npt.NDArray[Any]:
    """A column as sortable numbers: strings by rank (``pd.factorize(sort=True)``), nulls last
    (as ``sort_values``)."""
    if pd.api.types.is_numeric_dtype(s.dtype):
        return np.asarray(s.to_numpy())  # NaN sorts last in NumPy
    if pd.api.types.is_datetime64_any_dtype(s.dtype):  # as integers, NaT last
        return np.where(s.isna().to_numpy(), np.iinfo(np.int64).max, s.array.asi8)
    codes = pd.factorize(s, sort=True)[0]
    return np.where(codes < 0, np.iinfo(np.int64).max, codes)


def _equal(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Element-wise equality where NaN equals NaN (both sort last, as a tie)."""
    eq: npt.NDArray[Any] = np.asarray(a == b)
    if a.dtype.kind == "f":
        eq |= np.isnan(a) & np.isnan(b)
    return eq


def stable_order(pdf: pd.DataFrame, keys: list[str],
                 then: Sequence[str] = ()) -> npt.NDArray[Any]:
    """Row positions of ``pdf`` stably sorted by ``[*keys, *then]`` — the order of
    ``pdf.sort_values([*keys, *then], kind="stable")`` (nulls last) — by ``np.lexsort`` on
    numbers. The ``then`` keys are ranked only when rows tie on ``keys`` (tie-breaks: ranking
    a string column is the expensive part of a sort)."""
    cols = [_sort_codes(pdf[k]) for k in keys]
    order = np.lexsort(cols[::-1]) if cols else np.arange(len(pdf))
    if then and len(order) > 1:
        ranked = [c[order] for c in cols]
        ties = np.logical_and.reduce([_equal(c[1:], c[:-1]) for c in ranked]) if ranked else None
        if ties is None or ties.any():
            order = np.lexsort([*[_sort_codes(pdf[k]) for k in then][::-1], *cols[::-1]])
    return order


def _sorted(pdf: pd.DataFrame) -> pd.DataFrame:
    """Messages in replay order: :data:`SORT_KEYS` then :data:`TIE_KEYS` (a null
    ``sequence_id`` sorts as -1)."""
    keyed = pdf.assign(_seq_sort=pdf["sequence_id"].fillna(-1))
    return pdf.take(stable_order(keyed, SORT_KEYS, TIE_KEYS)).reset_index(drop=True)


_NS_MIN_MS = pd.Timestamp.min.value // 1_000_000 + 1
_NS_MAX_MS = pd.Timestamp.max.value // 1_000_000
"""Emulated-clock ms that fit pandas' nanosecond timestamps."""


def _times(df: pd.DataFrame, speed: float, renames: Mapping[str, str]) -> pd.DataFrame:
    """Emulated-clock ms columns → UTC timestamps in log time (× speed)."""
    for src, dst in renames.items():
        if src in df.columns:
            if speed == 1.0 and df[src].dtype == np.int64:  # no nulls, no scaling: exact as is
                ms = df[src].to_numpy()
                if len(ms) and _NS_MIN_MS <= ms.min() and ms.max() <= _NS_MAX_MS:
                    # a NumPy cast: 6× faster than to_datetime, which checks what we just did
                    as_ns = ms.astype("datetime64[ms]").astype("datetime64[ns]")
                    df[dst] = pd.Series(as_ns, index=df.index).dt.tz_localize("UTC")
                else:  # out of the nanosecond range: to_datetime raises OutOfBoundsDatetime
                    df[dst] = pd.to_datetime(df[src], unit="ms", utc=True)
            else:
                ms = pd.to_numeric(df[src], errors="coerce") * speed
                df[dst] = pd.to_datetime(ms.round(), unit="ms", utc=True)
            df = df.drop(columns=src)
    return df


# ---- control plane: per topic ----------------------------------------------------------------


@dataclass
class ControlResult:
    """Driver-side control-plane results of one window (all bounded by topics × time, never by
    messages): new controller states, layouts, and the ``autoscale_decisions``,
    ``segment_load`` and ``segments`` rows (``run_id`` excluded)."""

    states: dict[str, bytes]
    layouts: dict[str, SegmentLayout]
    decisions: pd.DataFrame
    samples: pd.DataFrame
    segments: pd.DataFrame


def new_controller(topic: str, blob: bytes | None, settings: StageSettings) -> TopicController:
    """The topic's controller: unpickled from ``blob``, or a fresh one."""
    if blob is not None:
        ctl: TopicController = pickle.loads(blob)
        return ctl
    return TopicController(topic, settings.controller_settings(topic), settings.subscriptions)


def control_group(topic: str, pdf: pd.DataFrame, blob: bytes | None, settings: StageSettings,
                  horizon_ms: int | None, final: bool) -> tuple[pd.DataFrame, TopicController]:
    """Route one topic's window of messages and run its controller up to ``horizon_ms``.

    ``pdf``: accepted messages (``pipelines.ingest.rules.ACCEPTED_COLUMNS``; ``event_ms`` int64 ms,
    ``segment_hash`` / ``hash_b`` null for keyless), any order. Returns the messages sorted by
    :data:`SORT_KEYS` and :data:`TIE_KEYS` with ``segment_id`` (int64),
    ``bucket_index`` (int32) and ``layout_epoch`` (int64) added, and the advanced controller
    (its decisions / samples are taken by :func:`control_outputs`). An empty ``pdf`` just moves
    the controller through time (ticks, merges). ``ValueError`` (from the core) when messages
    are older than the previous horizon.
    """
    ctl = new_controller(topic, blob, settings)
    pdf = _sorted(pdf)
    if len(pdf) or horizon_ms is not None:
        hi = horizon_ms if horizon_ms is not None else int(pdf["event_ms"].max()) + 1
        routed = ctl.advance(pdf["event_ms"].to_numpy(np.int64),
                             pdf["segment_hash"].fillna(-1).to_numpy(np.int64),
                             pdf["hash_b"].fillna(-1).to_numpy(np.int64),
                             pdf["payload_size"].to_numpy(np.int64),
                             pdf["producer_name"].to_numpy(object), hi)
        pdf = pdf.assign(segment_id=routed.segment_id, bucket_index=routed.bucket_index,
                         layout_epoch=routed.layout_epoch)
    else:
        pdf = pdf.assign(segment_id=pd.Series(dtype="int64"),
                         bucket_index=pd.Series(dtype="int32"),
                         layout_epoch=pd.Series(dtype="int64"))
    if final:
        ctl.finish()
    return pdf, ctl


def control_outputs(controllers: Mapping[str, TopicController],
                    speed: float) -> ControlResult:
    """Take every controller's pending decisions and samples and snapshot its layout.

    Frames: ``decisions`` / ``samples`` / ``segments`` with the columns of
    ``autoscale_decisions`` / ``segment_load`` / ``segments`` (times as UTC timestamps in log
    time, i.e. emulated ms × ``speed``); topics in name order."""
    decisions, samples, segments = [], [], []
    for topic, ctl in sorted(controllers.items()):
        d, s = ctl.take_outputs()
        decisions += [{"topic": topic, **r} for r in d]
        samples += [{"topic": topic, **r} for r in s]
        if ctl.layout is not None:
            segments += [{"topic": topic, **r} for r in segment_rows(ctl.layout)]
    return ControlResult(
        states={t: pickle.dumps(c) for t, c in controllers.items()},
        layouts={t: c.layout for t, c in controllers.items() if c.layout is not None},
        decisions=_times(pd.DataFrame(decisions), speed, {"eval_time_ms": "eval_time"}),
        samples=_times(pd.DataFrame(samples), speed,
                       {"sample_time_ms": "sample_time", "modified_at_ms": "modified_at"}),
        segments=_times(pd.DataFrame(segments), speed,
                        {"created_at_ms": "created_at", "sealed_at_ms": "sealed_at"}),
    )


# ---- data plane: batching of a topic's producers --------------------------------------------


@dataclass
class BatchingState:
    """A topic's carried batching state (small, columnar; pickled between windows).

    ``producers``: producer names, sorted (index = producer code); per producer ``next_ordinal``
    (its send order), ``next_entry`` (its next ``entry_id``), ``next_sequence_id`` (the default
    ``sequence_id`` when the input has none); ``containers``: the core's per-(producer, segment)
    state (:class:`~pipelines.core.batching.ContainerState`, by producer code); ``pending``: the
    rows of the open batches (the ``messages`` columns plus :data:`_PENDING_COLUMNS`), fed again
    with the next window; ``done_ms``: the seals before it have been applied."""

    producers: npt.NDArray[Any] = field(default_factory=lambda: np.zeros(0, dtype=object))
    next_ordinal: npt.NDArray[Any] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    next_entry: npt.NDArray[Any] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    next_sequence_id: npt.NDArray[Any] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    containers: ContainerState = field(default_factory=ContainerState)
    pending: pd.DataFrame | None = None
    done_ms: int = -(2**62)


_PENDING_COLUMNS = ["event_ms", "_ordinal", "_time_ms", "_resent"]
"""Internal columns of pending rows: emulated publish time, send order within the producer, when
the message entered its current container (its publish time, or the seal that re-sent it) and
whether it was re-sent."""

_MESSAGE_DTYPES = {"event_ms": "int64", "payload_size": "int64", "segment_id": "int64",
                   "bucket_index": "int32", "layout_epoch": "int64"}
"""Routed columns cast before batching (a window's frame may come with other integer types)."""


def batch_topic(routed: pd.DataFrame, blob: bytes | None, bcfg: BatchingConfig,
                layout: SegmentLayout | None, horizon_ms: int | None,
                final: bool) -> tuple[Any, pd.DataFrame, bytes]:
    """One topic's window through its producers' batch containers (``pipelines.core.batching``:
    all producers and segments at once, as columns).

    ``routed``: :func:`control_group`'s output (replay order); ``blob``: the carried
    :class:`BatchingState` (``None`` = new). Default sequence ids (null) are the order within
    the producer. Seals of ``layout`` in the window re-send the open batches of the sealed
    segments (reference §7.2); ``final`` (end of input) lets every flush task fire (§7.1: no
    end-of-input flush). Returns ``(messages, entries, new_blob)``: ``messages`` = the
    ``messages`` rows whose entry was sent, as a ``pyarrow.Table`` of the table's columns and
    types (by producer and send order; a re-sent message carries its successor's segment,
    bucket, layout epoch and ``segment_sequence_id``), ``entries`` = the sent entries (the
    core's columns, ``producer_name`` for the producer code, ``entry_seq``)."""
    st: BatchingState = pickle.loads(blob) if blob is not None else BatchingState()
    cast = {c: t for c, t in _MESSAGE_DTYPES.items() if routed[c].dtype != t}
    routed = routed.astype(cast) if cast else routed
    names, codes = _producer_codes(st, routed["producer_name"])
    new = _new_rows(st, routed, codes, names)
    if st.pending is None or not len(st.pending):
        rows, codes_all = new, codes
    else:
        rows = pd.concat([st.pending, new], ignore_index=True)
        codes_all = np.concatenate([_codes_of(names, st.pending["producer_name"]), codes])
    r = batch(_core_messages(rows, codes_all, bcfg.mode is BatchingMode.KEY_BASED),
              st.containers, reroutes(layout, st.done_ms, None if final else horizon_ms), bcfg,
              len(names), st.next_entry, None if final else horizon_ms)
    rows = rows.assign(segment_id=r.segment_id, bucket_index=r.bucket_index.astype(np.int32),
                       layout_epoch=r.epoch, _time_ms=r.time_ms, _resent=r.resent)
    sent = np.flatnonzero(r.entry_seq >= 0)
    sent = sent[np.lexsort((rows["_ordinal"].to_numpy(np.int64)[sent], codes_all[sent]))]
    messages = _message_table(rows, sent, segment_sequence_id=r.segment_sequence_id[sent],
                              entry_id=r.entry_seq[sent])
    entries = pd.DataFrame({c: v for c, v in r.entries.items() if c != "producer"})
    entries.insert(0, "producer_name", names[r.entries["producer"]])
    open_rows = rows.iloc[np.flatnonzero(r.entry_seq < 0)].reset_index(drop=True)
    st.next_entry = st.next_entry + r.entries_per_producer
    st.containers, st.pending = r.state, open_rows if len(open_rows) else None
    if horizon_ms is not None and not final:
        st.done_ms = max(st.done_ms, horizon_ms + 1)
    return (conform_messages(messages), entries, pickle.dumps(st))


def _producer_codes(st: BatchingState,
                    producer_name: pd.Series) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Extend ``st``'s producers with the window's (names stay sorted, codes are re-mapped in
    its containers and counters); returns the names and the window rows' codes."""
    seen = pd.unique(producer_name.to_numpy(object))
    names = np.union1d(st.producers, np.asarray(seen, dtype=object)).astype(object)
    if len(names) != len(st.producers):
        old = np.searchsorted(names, st.producers)
        for attr in ("next_ordinal", "next_entry", "next_sequence_id"):
            grown = np.zeros(len(names), dtype=np.int64)
            grown[old] = getattr(st, attr)
            setattr(st, attr, grown)
        st.containers.producer = old[st.containers.producer].astype(np.int64)
        st.producers = names
    return names, _codes_of(names, producer_name)


def _codes_of(names: npt.NDArray[Any], producer_name: pd.Series) -> npt.NDArray[np.int64]:
    """Each row's producer code (int64): its name's index in ``names`` (sorted, holding every
    name). A hash lookup: a binary search compares Python strings, three times slower."""
    codes: npt.NDArray[np.int64] = pd.Index(names).get_indexer(
        producer_name.to_numpy(object)).astype(np.int64)
    return codes


def _new_rows(st: BatchingState, routed: pd.DataFrame, codes: npt.NDArray[Any],
              names: npt.NDArray[Any]) -> pd.DataFrame:
    """The window's messages as pending rows: default sequence ids and send ordinals from the
    producers' counters (replay order within each producer)."""
    n = len(routed)
    counts = np.bincount(codes, minlength=len(names))
    rank = _rank_within(codes, counts)
    seq = routed["sequence_id"]
    missing = seq.isna().to_numpy()
    miss_rank = np.zeros(n, dtype=np.int64)
    if missing.any():
        miss_rank[missing] = _rank_within(codes[missing],
                                          np.bincount(codes[missing], minlength=len(names)))
    seq_ids = np.where(missing, st.next_sequence_id[codes] + miss_rank,
                       seq.fillna(-1).to_numpy(np.int64))
    if n:
        top = np.full(len(names), -1, dtype=np.int64)
        np.maximum.at(top, codes, seq_ids)
        st.next_sequence_id = np.maximum(st.next_sequence_id, top + 1)
    ordinal = st.next_ordinal[codes] + rank
    st.next_ordinal = st.next_ordinal + counts
    columns = {c: routed[c] for c in MESSAGE_COLUMNS}
    columns["sequence_id"] = pd.Series(seq_ids, index=routed.index)
    frame = pd.DataFrame(columns)
    return frame.assign(event_ms=routed["event_ms"].to_numpy(np.int64), _ordinal=ordinal,
                        _time_ms=routed["event_ms"].to_numpy(np.int64),
                        _resent=np.zeros(n, dtype=np.int64)).reset_index(drop=True)


def _rank_within(codes: npt.NDArray[Any], counts: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Each row's rank (int64, from 0, in row order) among the rows of its code; ``counts``:
    rows per code."""
    by_code = np.argsort(codes, kind="stable")
    rank = np.empty(len(codes), dtype=np.int64)
    rank[by_code] = (np.arange(len(codes), dtype=np.int64)
                     - np.repeat(np.cumsum(counts) - counts, counts))
    return rank


def _core_messages(rows: pd.DataFrame, codes: npt.NDArray[Any], key_based: bool) -> Messages:
    """Pending rows → the core's :class:`~pipelines.core.batching.Messages` columns."""
    keys = rows["key"]
    key_id = (np.where(keys.isna(), -1, pd.util.hash_array(
        keys.fillna("").to_numpy(object)) >> np.uint64(1)).astype(np.int64)
        if key_based else np.full(len(rows), -1, dtype=np.int64))
    return Messages(
        producer=codes.astype(np.int64), ordinal=rows["_ordinal"].to_numpy(np.int64),
        time_ms=rows["_time_ms"].to_numpy(np.int64), resent=rows["_resent"].to_numpy(np.int64),
        publish_ms=rows["event_ms"].to_numpy(np.int64),
        segment_id=rows["segment_id"].to_numpy(np.int64),
        bucket_index=rows["bucket_index"].to_numpy(np.int64),
        segment_hash=rows["segment_hash"].fillna(-1).to_numpy(np.int64),
        hash_b=rows["hash_b"].fillna(0).to_numpy(np.int64),
        payload_size=rows["payload_size"].to_numpy(np.int64), key_id=key_id,
        epoch=rows["layout_epoch"].to_numpy(np.int64))


def conform_messages(table: Any) -> Any:
    """``messages`` rows (a ``pyarrow.Table``) cast to the table's columns and types."""

    return conform_arrow("messages", table, columns=table_columns("messages"))


def _message_columns(routed: pd.DataFrame, pos: npt.NDArray[Any],
                     extra: Mapping[str, npt.NDArray[Any]]) -> dict[str, Any]:
    """Rows ``pos`` of ``routed``'s :data:`MESSAGE_COLUMNS` (one take per column: no copy of the
    whole frame), with ``extra`` columns (aligned with ``pos``) replacing or following them.
    NumPy columns (strings are objects) are indexed as arrays: pandas' ``take`` would check
    each string for a null; others (Arrow strings, timestamps) by their array's ``take``."""
    columns: dict[str, Any] = {}
    for c in MESSAGE_COLUMNS:
        if c in extra:
            columns[c] = extra[c]
            continue
        col = routed[c]
        columns[c] = (col.to_numpy()[pos] if isinstance(col.dtype, np.dtype)
                      else col.array.take(pos))
    columns.update(extra)
    return columns


def _message_rows(routed: pd.DataFrame, pos: npt.NDArray[Any],
                  **extra: npt.NDArray[Any]) -> pd.DataFrame:
    """:func:`_message_columns` as a pandas frame."""
    return pd.DataFrame(_message_columns(routed, pos, extra))


def _message_table(routed: pd.DataFrame, pos: npt.NDArray[Any], **extra: npt.NDArray[Any]) -> Any:
    """:func:`_message_columns` as a ``pyarrow.Table`` (no pandas frame is made: its
    consolidation copies every column, and object strings would be converted back)."""

    return pa.table({c: pa.array(v, from_pandas=True)
                     for c, v in _message_columns(routed, pos, extra).items()})


def entry_frame(topic: str, entries: pd.DataFrame, speed: float) -> pd.DataFrame:
    """:func:`batch_topic` entries (of any producers of ``topic``) → ``entries`` table rows
    (:data:`ENTRY_COLUMNS`: times as UTC timestamps in log time, ``emu_publish_ms`` kept for
    dispatch)."""
    entries = entries.rename(columns={"entry_seq": "entry_id"})
    entries = entries.assign(topic=topic, close_reason=entries["close_reason"].astype(object),
                             emu_publish_ms=entries["publish_time_ms"])
    entries = _times(entries, speed, {"open_time_ms": "open_time",
                                      "publish_time_ms": "publish_time"})
    return entries[ENTRY_COLUMNS]


# ---- dispatch per topic ---------------------------------------------------------------------


def new_dispatchers(settings: StageSettings) -> list[Any]:
    """One ``SubscriptionDispatcher`` per configured subscription; an ungrouped CHECKPOINT
    subscription gets one per consumer instead (each reads every segment through a cursor of
    its own, reference §7.3), named :func:`~pipelines.core.dispatch.reader_subscription`.
    Reconnects are not dispatch events (the session never left, see ``ConsumerSpec``)."""

    out = []
    for sub in settings.subscriptions:
        consumers = []
        for c in sub.consumers:
            cap, ack = settings.capacities.get((sub.name, c.name), (None, 0))
            consumers.append(DConsumer(c.name, c.join_ms, c.leave_ms, cap, ack))
        if sub.grouped:
            out.append(SubscriptionDispatcher(sub.name, sub.type.value, consumers,
                                              settings.consumer_window_ms))
        else:
            out.extend(SubscriptionDispatcher(reader_subscription(sub.name, c.name),
                                              sub.type.value, [c], settings.consumer_window_ms)
                       for c in consumers)
    return out


def dispatch_group(topic: str, entries: pd.DataFrame, blob: bytes | None,
                   settings: StageSettings, layout: SegmentLayout, horizon_ms: int | None,
                   final: bool) -> tuple[dict[str, pd.DataFrame], bytes]:
    """Feed one topic's window of entries and layout changes to its subscription dispatchers
    (``pipelines.core.dispatch.SubscriptionDispatcher``).

    ``entries``: the topic's entries of the window (at least ``producer_name``, ``segment_id``,
    ``entry_id``, ``entry_hash_min``, ``num_messages``, ``payload_bytes``, ``emu_publish_ms``),
    any order (sorted here by emu_publish_ms, producer_name, entry_id). Returns frames keyed by
    ``_kind`` (:data:`DISPATCH_TABLES`) with the columns of the tables ``dispatch``,
    ``consumer_load``, ``bucket_handoffs``, ``subscription_stats`` and ``segment_drains`` (times
    as UTC timestamps and durations as ms, both in log time), and the new state blob.
    """
    disp, seen = (pickle.loads(blob) if blob is not None else (new_dispatchers(settings), -1))
    g = entries.take(stable_order(entries, ["emu_publish_ms", "producer_name", "entry_id"]))
    times = g["emu_publish_ms"].to_numpy(np.int64)
    changes = [t for t in [layout.segments[min(layout.segments)].created_at_ms,
                           *change_times(layout)] if t > seen]
    hi = horizon_ms if horizon_ms is not None else max([seen, *changes, *times.tolist()]) + 1
    rows: dict[str, list[pd.DataFrame]] = {"dispatch": [], "consumer_load": [], "handoffs": [],
                                           "window_stats": [], "segment_drains": []}
    for d in disp:
        start = 0
        for t in [c for c in changes if c < hi]:
            stop = int(np.searchsorted(times, t, side="left"))
            _feed(d, g.iloc[start:stop])
            d.on_layout(t, layout_as_of(layout, t))
            start = stop
        _feed(d, g.iloc[start:])
        if final:
            d.finish()
        else:
            d.advance_to(hi - 1)
        out = d.take_outputs()
        for table in rows:
            rows[table].extend(pd.DataFrame(part) for part in out.column_parts(table))
    new_seen = max([seen, *[c for c in changes if c < hi]])
    frames = {t: pd.concat(v, ignore_index=True).assign(topic=topic) for t, v in rows.items()}
    speed = settings.speed
    window = {"window_start_ms": "window_start", "window_end_ms": "window_end"}
    drains = frames["segment_drains"]
    drains["drain_ms"] = (drains["drain_ms"].astype("float64") * speed).round()
    result = {
        "dispatch": _times(frames["dispatch"], speed, {"publish_time_ms": "publish_time",
                                                      "dispatch_time_ms": "dispatch_time",
                                                      "ack_time_ms": "ack_time"}),
        "consumer_load": _times(frames["consumer_load"], speed, window),
        "handoff": _times(frames["handoffs"], speed, {"withheld_from_ms": "withheld_from",
                                                      "withheld_until_ms": "withheld_until"}),
        "window_stats": _times(frames["window_stats"], speed, window),
        "segment_drain": _times(drains, speed, {"sealed_at_ms": "sealed_at",
                                                "drained_at_ms": "drained_at"}),
    }
    result = {k: df.reindex(columns=table_columns(DISPATCH_TABLES[k]))
              for k, df in result.items()}
    return result, pickle.dumps((disp, new_seen))


def _feed(d: Any, g: pd.DataFrame) -> None:
    if len(g):
        d.on_entries(g["emu_publish_ms"].to_numpy(np.int64), g["segment_id"].to_numpy(np.int64),
                     g["entry_hash_min"].to_numpy(np.int64), g["num_messages"].to_numpy(np.int64),
                     g["payload_bytes"].to_numpy(np.int64),
                     # an object array: tolist() of Arrow strings costs ten times as much
                     g["producer_name"].to_numpy(dtype=object),
                     g["entry_id"].to_numpy(np.int64))


# ---- one topic's window: control plane → batching → dispatch -------------------------------


@dataclass
class TopicResult:
    """One topic's window through all three stages (:func:`topic_group`).

    ``controller``: the advanced controller, its decisions and samples not yet taken (the driver
    takes them with :func:`control_outputs`); ``batching``: the new batching state blob
    (:class:`BatchingState`); ``dispatch``: the new dispatch state blob (``None`` while
    the topic has no layout); ``frames``: output rows by ``_kind`` (:data:`STAGE_KINDS`)."""

    controller: TopicController
    batching: bytes
    dispatch: bytes | None
    frames: dict[str, Any]  # pandas frames; ``msg`` a pyarrow Table (:func:`batch_topic`)
    seconds: dict[str, float] = field(default_factory=dict)  # per stage (wall, this task)


STAGE_KINDS = {"msg": "messages", "entry": "entries", **DISPATCH_TABLES}
"""``_kind`` of a topic-stage output row → its output table (the data plane's and dispatch's
tables; the control plane's small tables come from :func:`control_outputs`)."""

CONTROL_KINDS = {"sample": "segment_load", "decision": "autoscale_decisions",
                 "segment": "segments"}
"""Kinds of the control plane's tables (:class:`ControlResult`'s frames) → their tables."""

OUTPUT_KINDS = {**STAGE_KINDS, **CONTROL_KINDS}
"""Every kind :class:`FrameWriter` writes → its table."""


def topic_group(topic: str, pdf: pd.DataFrame, controller: bytes | None,
                batching: bytes | None, dispatcher: bytes | None,
                settings: StageSettings, horizon_ms: int | None, final: bool) -> TopicResult:
    """One topic's window of messages through :func:`control_group` (routing, autoscale),
    :func:`batch_topic` (bucketed batching per producer) and :func:`dispatch_group`, in that
    order — a topic's three stages only depend on the topic, so one task runs them all (one
    shuffle per window instead of three).

    ``pdf``: the topic's accepted messages of the window
    (``pipelines.ingest.rules.ACCEPTED_COLUMNS``), any order, possibly empty (the topic then
    only moves through time). ``controller`` /
    ``producers`` (producer name → blob) / ``dispatcher``: the carried state blobs (``None`` /
    missing = new). Producers without messages run only while they hold open batches (their
    timers fire). Returns a :class:`TopicResult`; ``frames`` holds ``msg`` (messages table
    rows whose entry closed), ``entry`` (:data:`ENTRY_COLUMNS`) and the dispatch kinds
    (:data:`DISPATCH_TABLES`); ``seconds``: time spent in ``control_plane``, ``batching`` and
    ``dispatch`` (for the ``runs`` table's timings only)."""
    clock = [time.perf_counter()]
    seconds: dict[str, float] = {}

    def lap(stage: str) -> None:
        now = time.perf_counter()
        seconds[stage] = seconds.get(stage, 0.0) + now - clock[0]
        clock[0] = now

    routed, ctl = control_group(topic, pdf, controller, settings, horizon_ms, final)
    lap("control_plane")
    messages, entries, new_batching = batch_topic(routed, batching, settings.batching(),
                                                  ctl.layout, horizon_ms, final)
    frames = {"msg": messages, "entry": entry_frame(topic, entries, settings.speed)}
    lap("batching")
    if ctl.layout is not None:
        tables, dispatcher = dispatch_group(topic, frames["entry"], dispatcher, settings,
                                            ctl.layout, horizon_ms, final)
        frames.update(tables)
    lap("dispatch")
    return TopicResult(ctl, new_batching, dispatcher, frames, seconds)


# ---- staged output files ----------------------------------------------------------------------


STAGE_INPUT_COLUMNS = ["topic", "key", "producer_name", "sequence_id", "publish_time",
                       "payload_size", "event_ms", "hash32", "segment_hash", "hash_b"]
"""Accepted-message columns the emulation reads (``source_file`` is not shipped)."""


def staged_file(out_dir: str, kind: str, topic: str) -> str:
    """Where :class:`FrameWriter` puts one topic's rows of one kind: ``<out_dir>/<kind>/
    part-<sha1(topic)>.parquet`` (topic names may hold any character; one file per topic and
    Spark job, the same on every re-run)."""
    digest = hashlib.sha1(topic.encode("utf-8")).hexdigest()
    return f"{out_dir.rstrip('/')}/{kind}/part-{digest}.parquet"


class FrameWriter:
    """A task's output files under ``out_dir``: one Parquet file per topic and kind
    (:func:`staged_file`), open across the windows of a Spark job, each window's frame of a
    kind appended as its own row groups (a file per window meant creating, finishing and
    moving seven files per topic and window, and 16 times as many files in the tables).
    Frames are cast to their table's columns without ``run_id``
    (:func:`pipelines.delta_io.conform_arrow`: a null in a required column or a wrong type fails
    here, in the task). Files are written under hidden temporary names (readers skip them,
    whatever a failed attempt left) and moved into place by :meth:`close`, so a retried or
    re-run task replaces each whole with the same rows."""

    def __init__(self, out_dir: str,
                 withheld: Mapping[str, tuple[str, ...]] | None = None) -> None:
        """``withheld``: table → nullable columns written as nulls (``output.keys``,
        :func:`pipelines.ingest.privacy.withheld_columns`)."""
        self.out_dir = out_dir
        self.withheld = dict(withheld or {})
        self.files: dict[tuple[str, str], tuple[Any, Any, str, str]] = {}

    def write(self, topic: str, frames: Mapping[str, Any]) -> None:
        """Append a topic's window of output frames (``_kind`` → pandas frame or pyarrow
        table; empty ones skipped)."""

        for kind, df in frames.items():
            if not len(df):
                continue
            table = OUTPUT_KINDS[kind]
            columns = table_columns(table)
            withheld = self.withheld.get(table, ())
            # a withheld column is left out: conform_arrow fills it with nulls
            taken = [c for c in columns if c not in withheld]
            arrow = conform_arrow(table, df.select([c for c in taken if c in df.column_names])
                                  if isinstance(df, pa.Table)
                                  else df[[c for c in taken if c in df.columns]],
                                  columns=columns)
            if (topic, kind) not in self.files:
                fs, path = arrow_filesystem(staged_file(self.out_dir, kind, topic))
                folder, name = path.rsplit("/", 1)
                fs.create_dir(folder, recursive=True)
                tmp = f"{folder}/.{name}.{os.getpid()}.tmp"
                # zstd, and dictionaries only for strings (topics, producers, consumers: few
                # values): 40 % smaller than snappy with dictionaries everywhere, no slower
                strings = [f.name for f in arrow.schema if f.type == "string"]
                writer = pq.ParquetWriter(tmp, arrow.schema, filesystem=fs, compression="zstd",
                                          use_dictionary=strings)
                self.files[(topic, kind)] = (writer, fs, tmp, path)
            self.files[(topic, kind)][0].write_table(arrow, row_group_size=128 * 1024)

    def close(self) -> None:
        """Finish every file and move it into place."""
        for writer, fs, tmp, path in self.files.values():
            writer.close()
            fs.move(tmp, path)
        self.files = {}


# ---- staged input ------------------------------------------------------------------------------

STAGING_TOPIC_COLUMN = "topic_sha1"
"""Partition column of the staged messages (``<staging>/batch_id=<k>/topic_sha1=<hex>/``): the
SHA-1 hex of the topic name, a folder name for any topic, so a task reads only its topic."""


STAGING_ROW_GROUP_ROWS = 65_536
"""Rows per row group of the staged messages (about 4 MiB). Input is roughly in time order, so
small row groups let :func:`read_staged` skip, by their ``event_ms`` statistics, the part of a
micro-batch outside the window (one row group per file would make every window overlapping a
micro-batch read all of it)."""

KEY_HASH_COLUMNS = ("hash32", "segment_hash", "hash_b")
"""Staged columns the staging writer adds (``ingest_rules.key_hashes_arrow`` of ``key``)."""

STAGING_SOURCE_COLUMNS = [c for c in STAGE_INPUT_COLUMNS if c not in KEY_HASH_COLUMNS]
"""Accepted-message columns :class:`StagingWriter` takes (the columns of
``pipelines.ingest.rules.ACCEPTED_FIELDS``; the hashes are added as the files are written)."""


def topic_digest(topic: str) -> str:
    """SHA-1 hex of ``topic``'s UTF-8 bytes (Spark's ``sha1(topic)``)."""
    return hashlib.sha1(topic.encode("utf-8")).hexdigest()


def read_staged(staging: str, topic: str, lo_ms: int | None, hi_ms: int | None) -> pd.DataFrame:
    """One topic's staged messages with ``lo_ms <= event_ms < hi_ms`` (``None``: unbounded).

    ``staging``: the folder the replay stages accepted messages to, partitioned by
    ``batch_id`` and :data:`STAGING_TOPIC_COLUMN`. Read with pyarrow (the topic's folders only;
    row groups outside the window are skipped by their ``event_ms`` statistics). Returns the
    :data:`STAGE_INPUT_COLUMNS` in file order (the stages sort; strings as
    ``pd.ArrowDtype(pa.string())``, which the stages take as they take object strings); no
    rows when none match."""
    return read_topic(staged_dataset(staging), topic, lo_ms, hi_ms)


class StagingWriter:
    """One task's staged Parquet files of a micro-batch: :meth:`add` accepted messages (any
    topics, any order), then :meth:`close`.

    Each added batch gets the key hashes (:data:`KEY_HASH_COLUMNS`, from
    ``pipelines.ingest.rules.key_hashes_arrow``, the one hashing function) and goes, split by
    topic, to ``<folder>/<STAGING_TOPIC_COLUMN>=<topic_digest>/part-<part:05d>.parquet`` in row
    groups of :data:`STAGING_ROW_GROUP_ROWS` (a file's last one smaller). Each file is written
    under a hidden temporary name and moved into place by :meth:`close`, so a retried task
    replaces it whole (readers skip hidden files). ``pseudonymize`` (``input.pseudonymize``):
    its columns are replaced by their pseudonyms once the key hashes are computed (routing is
    unchanged; no raw value is staged). pyarrow's C++ writer, on the Python worker that hashes
    the keys: about half the time of Spark's Parquet writer here."""

    def __init__(self, folder: str, part: int, pseudonymize: Pseudonymizer | None = None) -> None:
        self.fs, self.root = arrow_filesystem(folder)
        self.part = part
        self.pseudonymize = pseudonymize
        self.pending: dict[str, list[Any]] = {}
        self.counts: dict[str, int] = {}
        self.writers: dict[str, tuple[Any, str]] = {}

    def add(self, records: Any) -> None:
        """Stage a pyarrow ``RecordBatch`` of :data:`STAGING_SOURCE_COLUMNS`."""
        if not records.num_rows:
            return
        hashes = key_hashes_arrow(records.column("key"))
        records = pa.RecordBatch.from_arrays(
            [*records.columns, *[hashes.field(c) for c in KEY_HASH_COLUMNS]],
            names=[*records.schema.names, *KEY_HASH_COLUMNS])
        if self.pseudonymize is not None:  # after hashing: the emulation's answers do not change
            records = self.pseudonymize.batch(records)
        codes = records.column("topic").dictionary_encode()
        order = np.argsort(codes.indices.to_numpy(zero_copy_only=False), kind="stable")
        cuts = np.cumsum(np.bincount(codes.indices.to_numpy(zero_copy_only=False)))
        by_topic = records.take(pa.array(order))
        for topic, hi, lo in zip(codes.dictionary.to_pylist(), cuts, [0, *cuts[:-1]],
                                 strict=True):
            self.pending.setdefault(topic, []).append(by_topic.slice(lo, hi - lo))
            self.counts[topic] = self.counts.get(topic, 0) + int(hi - lo)
            if sum(b.num_rows for b in self.pending[topic]) >= STAGING_ROW_GROUP_ROWS:
                self._flush(topic, last=False)

    def close(self) -> dict[str, int]:
        """Write what is pending, move every file into place; returns topic → messages."""
        for topic in list(self.pending):
            self._flush(topic, last=True)
        for writer, target in self.writers.values():
            writer.close()
            self.fs.move(_hidden(target), target)
        return self.counts

    def _flush(self, topic: str, last: bool) -> None:
        """Write the topic's pending rows as whole row groups (all of them when ``last``)."""
        size = STAGING_ROW_GROUP_ROWS
        table = pa.Table.from_batches(self.pending.pop(topic))
        rows = table.num_rows if last else table.num_rows // size * size
        if rows < table.num_rows:
            self.pending[topic] = table.slice(rows).to_batches()
        if topic not in self.writers:
            target = (f"{self.root}/{STAGING_TOPIC_COLUMN}={topic_digest(topic)}/"
                      f"part-{self.part:05d}.parquet")
            self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            # dictionaries only where they pay (a topic and its producers: few values); for
            # keys, times and hashes they cost 40 % of the write and save no space here
            self.writers[topic] = (pq.ParquetWriter(_hidden(target), table.schema,
                                                    filesystem=self.fs,
                                                    use_dictionary=["topic", "producer_name"]),
                                   target)
        self.writers[topic][0].write_table(table.slice(0, rows), row_group_size=size)


def _hidden(target: str) -> str:
    """The temporary name a staged file is written under (hidden: readers skip it)."""
    return target.replace("/part-", "/.part-") + ".tmp"


def write_staging(batches: Iterable[Any], folder: str, part: int,
                  pseudonymize: Pseudonymizer | None = None) -> dict[str, int]:
    """Write one task's accepted messages (pyarrow ``RecordBatch``es of
    :data:`STAGING_SOURCE_COLUMNS`) as staged Parquet under ``folder`` with a
    :class:`StagingWriter`; returns topic → messages written."""
    writer = StagingWriter(folder, part, pseudonymize)
    for records in batches:
        writer.add(records)
    return writer.close()


def staged_files(folder: str) -> Iterator[Any]:
    """Open pyarrow ``ParquetFile``s of the staged files under ``folder`` (recursively, path
    order; hidden and temporary files skipped), one at a time."""

    fs, path = arrow_filesystem(folder)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    for info in sorted(infos, key=lambda i: i.path):
        name = info.base_name
        if (info.type != pafs.FileType.File or not name.endswith(".parquet")
                or name.startswith((".", "_"))):
            continue
        with fs.open_input_file(info.path) as f:
            yield pq.ParquetFile(f)


def _event_ms_ranges(pf: Any) -> Iterator[tuple[int, int, int]]:
    """``(row group, min event_ms, max event_ms)`` of each non-empty row group of a staged
    file, from its footer statistics (the column is read when a writer left none)."""

    col = pf.schema_arrow.get_field_index("event_ms")
    for i in range(pf.metadata.num_row_groups):
        group = pf.metadata.row_group(i)
        if not group.num_rows:
            continue
        st = group.column(col).statistics
        if st is not None and st.has_min_max:
            yield i, int(st.min), int(st.max)
        else:
            mm = pc.min_max(pf.read_row_group(i, columns=["event_ms"]).column(0))
            yield i, mm["min"].as_py(), mm["max"].as_py()


def staged_batch_stats(staging: str, batch_id: int) -> dict[str, tuple[int, int, int]]:
    """Micro-batch ``batch_id``'s staged messages per topic: ``(messages, min event_ms, max
    event_ms)``, from the Parquet footers of its files under ``staging`` (row counts and
    ``event_ms`` statistics; the topic's name from one value of its ``topic`` column), so no
    data is read. Topics without messages are absent; ``{}`` when nothing was staged."""
    out: dict[str, tuple[int, int, int]] = {}
    for pf in staged_files(f"{staging.rstrip('/')}/batch_id={batch_id}"):
        topic = None  # one topic per file (its folder): read one value of it
        for i, lo, hi in _event_ms_ranges(pf):
            if topic is None:
                topic = pf.read_row_group(i, columns=["topic"]).column(0)[0].as_py()
            n, lo0, hi0 = out.get(topic, (0, lo, hi))
            out[topic] = (n + pf.metadata.row_group(i).num_rows, min(lo, lo0), max(hi, hi0))
    return out


def staged_histogram(staging: str, bins: int) -> tuple[int, int, npt.NDArray[Any]] | None:
    """Every staged message's ``event_ms`` (all batches under ``staging``) counted in ``bins``
    equal bins: ``(lo, width, counts)`` — bin ``i`` holds ``lo + i * width <= event_ms <
    lo + (i + 1) * width`` (``lo`` the smallest ``event_ms``, ``width = (max - lo) // bins +
    1``); ``counts``: int64 array of length ``bins``. ``None`` when nothing is staged. The
    range comes from the footers' statistics, the counts from one row group's ``event_ms``
    at a time, read on this thread: memory does not grow with the messages (a dataset scan's
    read-ahead left the driver 95 MB larger at 10 M messages)."""
    ranges = [(lo, hi) for pf in staged_files(staging) for _, lo, hi in _event_ms_ranges(pf)]
    if not ranges:
        return None
    lo = min(r[0] for r in ranges)
    width = (max(r[1] for r in ranges) - lo) // bins + 1
    counts = np.zeros(bins, dtype=np.int64)
    for pf in staged_files(staging):
        for i, _, _ in _event_ms_ranges(pf):
            values = pf.read_row_group(i, columns=["event_ms"], use_threads=False).column(0)
            counts += np.bincount((values.to_numpy() - lo) // width, minlength=bins)
    return lo, width, counts


def staged_dataset(staging: str) -> Any:
    """The staging folder as a pyarrow dataset (its files listed once)."""

    fs, path = arrow_filesystem(staging)
    partitioning = ds.partitioning(
        pa.schema([("batch_id", pa.int64()), (STAGING_TOPIC_COLUMN, pa.string())]),
        flavor="hive")
    return ds.dataset(path, filesystem=fs, format="parquet", partitioning=partitioning)


def read_topic(dataset: Any, topic: str, lo_ms: int | None, hi_ms: int | None) -> pd.DataFrame:
    where = pc.field(STAGING_TOPIC_COLUMN) == topic_digest(topic)
    if lo_ms is not None:
        where = where & (pc.field("event_ms") >= lo_ms)
    if hi_ms is not None:
        where = where & (pc.field("event_ms") < hi_ms)
    # Strings stay Arrow arrays (pandas ArrowDtype): the stages only take, sort and factorize
    # them, and the output files are Arrow again, so no Python object per key and producer
    # is made and converted back (a fifth of a busy topic's read and write time). One chunk
    # per column: taking rows across a chunk per row group is several times slower.
    return dataset.to_table(columns=STAGE_INPUT_COLUMNS, filter=where).combine_chunks().to_pandas(
        types_mapper=arrow_strings)


def arrow_strings(t: Any) -> Any:
    """``to_pandas`` types mapper: Arrow strings → ``pd.ArrowDtype`` (others as pyarrow does)."""

    return pd.ArrowDtype(t) if pa.types.is_string(t) else None


# ---- Spark wrapper ----------------------------------------------------------------------------
# pyspark is imported lazily so that the local engine runs without it.


MISPLACED_MARK = "_minutes_misplaced"
"""File a task of :func:`stage_batch` leaves in the micro-batch's staging folder when a record's
minute hint was not its publish-time minute (the spreading must be redone in one task)."""


@dataclass(frozen=True)
class StagingPlan:
    """What a micro-batch's staging pass applies (picklable: it travels to the tasks).

    ``spec``: the ``InputSpec`` (the rules' settings); ``horizon_ms`` (emulated ms) /
    ``finalized``: which accepted records are late (``pipelines.ingest.rules.late_rows``);
    ``pseudonymize``: see :class:`StagingWriter`."""

    spec: Any
    horizon_ms: int | None = None
    finalized: bool = False
    pseudonymize: Pseudonymizer | None = None


def stage_partition(batches: Iterable[pa.RecordBatch], plan: StagingPlan, folder: str, part: int,
                    check_minutes: bool = False) -> Iterator[pa.RecordBatch]:
    """One task of the staging pass: the rules (``pipelines.ingest.rules.ingest_batches``) on
    ``batches`` (mapped records), the accepted messages that are not late staged under
    ``folder`` as ``part`` (:class:`StagingWriter`); yields the rejected and the late records
    (``pipelines.ingest.rules.verdict_rows``). ``check_minutes``: the records were spread over
    the tasks by their minute hint; a hint that is not its record's minute
    (``pipelines.ingest.rules.minutes_misplaced``) leaves the :data:`MISPLACED_MARK` file and
    stages and yields nothing."""
    writer = StagingWriter(folder, part, plan.pseudonymize)
    for records, verdict in ingest_batches(batches, plan.spec):
        if check_minutes and minutes_misplaced(records, verdict):
            _mark_misplaced(folder)
            return
        late = late_rows(verdict, plan.horizon_ms, plan.finalized)
        staged = verdict.accepted.filter(pa.array(~late)) if late.any() else verdict.accepted
        for accepted in staged.to_batches():
            writer.add(accepted)
        if late.any() or len(verdict.rejected_rows):
            yield verdict_rows(records, verdict, late)
    writer.close()


def _staging_task(plan: StagingPlan, folder: str, check_minutes: bool
                  ) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: :func:`stage_partition` of the task's partition."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext  # noqa: PLC0415

        context = TaskContext.get()
        assert context is not None  # a Spark task's function
        yield from stage_partition(batches, plan, folder, context.partitionId(), check_minutes)

    return run


def _fresh_folder(folder: str) -> None:
    fs, path = arrow_filesystem(folder)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_dir(path)
    fs.create_dir(path, recursive=True)


def _mark_misplaced(folder: str) -> None:
    fs, path = arrow_filesystem(folder)
    fs.create_dir(path, recursive=True)
    fs.open_output_stream(f"{path}/{MISPLACED_MARK}").close()


def _misplaced(folder: str) -> bool:
    fs, path = arrow_filesystem(folder)
    return bool(fs.get_file_info(f"{path}/{MISPLACED_MARK}").type != pafs.FileType.NotFound)


def stage_batch(records: Any, staging: str, batch_id: int, plan: StagingPlan,
                take_verdicts: Callable[[Any], None]) -> None:
    """Spark: the rules and the staging of micro-batch ``batch_id`` in ONE Python pass.

    ``records``: a DataFrame of mapped records (``pipelines.spark.ingest.map_records``). Each task
    runs :func:`stage_partition` under ``plan`` in ``mapInArrow``: it stages the accepted
    messages under ``<staging>/batch_id=<batch_id>`` (replaced whole, so a re-run restages it)
    and returns the rejected and late records as rows (``pipelines.ingest.rules.verdict_rows``;
    Spark types: ``pipelines.udfs.verdict_type``). ``take_verdicts`` gets that DataFrame and
    must run it exactly once (e.g. write it): that action is the pass.

    A spec that spreads minutes needs a minute's records in one task: they are partitioned by
    their minute hint first; when a task finds a hint that is not its record's minute, the pass
    runs again with every record in one task, and ``take_verdicts`` gets its rows (replacing
    the first ones)."""
    from pipelines.udfs import verdict_type  # noqa: PLC0415 - Spark-only path

    folder = f"{staging.rstrip('/')}/batch_id={batch_id}"
    attempts = ([(records.repartition(MINUTE_HINT), True), (records.repartition(1), False)]
                if plan.spec.spread_within_minute else [(records, False)])
    for parts, check in attempts:
        _fresh_folder(folder)
        take_verdicts(parts.mapInArrow(_staging_task(plan, folder, check),
                                       verdict_type(records)))
        if not _misplaced(folder):
            return


@dataclass(frozen=True)
class StageWindow:
    """One window of a finalization (:mod:`pipelines.spark.emulation`): staged messages with
    ``lo_ms <= event_ms < hi_ms`` (emulated ms; ``None`` = unbounded), ``final`` = end of
    input."""

    lo_ms: int | None
    hi_ms: int | None
    final: bool
