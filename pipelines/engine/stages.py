"""What both engines run on a topic's window: the emulation stages around ``pipelines.core``,
plain pandas in, pandas out, plus the group's carried state (pickled blobs) —
:func:`control_group` (a topic's routing and controller), :func:`batch_topic` (its producers'
bucketed batching), :func:`dispatch_group` (a topic's subscriptions), composed per topic by
:func:`topic_group`. No Spark here: the local engine (:mod:`pipelines.engine.local`) calls
:func:`topic_group` on pandas groups, the Spark runtime (:mod:`pipelines.spark`: the group
functions as grouped stateful operators) in its tasks. Every emulation rule lives in
``pipelines.core``; these only sort, slice and convert (emulated ms → UTC timestamps in log
time). Each is the middle of three modules of its concept: the rule in ``pipelines.core``
(e.g. :mod:`pipelines.core.batching`), this pandas stage, the Spark operator in
:mod:`pipelines.spark` (e.g. :mod:`pipelines.spark.batching`). The staged messages they read
and the output files the Spark runtime writes are :mod:`pipelines.storage.staging` and
:mod:`pipelines.storage.frames`.

Window contract: a call finalizes the messages with ``event_ms < horizon_ms`` (``None`` = no
horizon: everything given), in event-time order after earlier windows; ``final`` = end of input.
Outputs do not depend on how the input is cut into windows (the core is chunking-invariant).
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.contract.config import ConfigError, ReplayConfig, consumer_window_ms
from pipelines.contract.schemas import table_columns
from pipelines.core.assignment import CONSUMER_SESSION_GRACE_MS, LeaveHow, SubscriptionType
from pipelines.core.batching import (
    CLOSE_REASONS,
    BatchingConfig,
    BatchingMode,
    ContainerState,
    Messages,
    batch,
    reroutes,
)
from pipelines.core.controller import (
    SAMPLE_COLUMNS,
    SAMPLE_DTYPE,
    ConsumerSpec,
    ControllerSettings,
    SubscriptionSpec,
    TopicController,
    segment_rows,
)
from pipelines.core.dispatch import ROW_TYPES as DISPATCH_ROW_TYPES
from pipelines.core.dispatch import ConsumerSpec as DConsumer
from pipelines.core.dispatch import SubscriptionDispatcher, reader_subscription
from pipelines.core.heavy_hitters import KeyStats, close_many, update_many
from pipelines.core.layout import SegmentLayout, change_times, layout_as_of
from pipelines.core.sorting import lexsort, packed_words, stable_argsort
from pipelines.storage.delta import conform_arrow
from pipelines.storage.frames import DISPATCH_TABLES

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

NAME_COLUMNS = ("topic", "producer_name")
"""Routed message columns batching knows by a message's producer code (its topic's and its
producer's names): taken from the codes, as Arrow dictionaries, for the ``messages`` rows
and as ``Categorical`` columns for the rows left pending, not carried in batching's rows."""

ENTRY_COLUMNS = [*table_columns("entries"), "emu_publish_ms"]
"""Columns of the entries frames the data plane emits: the ``entries`` table's plus
``emu_publish_ms`` (int64, the emulated-clock publish time dispatch works on)."""


@dataclass(frozen=True)
class StageSettings:
    """What the stages need from the config, in emulated-clock ms (picklable, small)."""

    config: ReplayConfig
    speed: float
    subscriptions: tuple[SubscriptionSpec, ...]
    capacities: Mapping[tuple[str, str], tuple[float | None, int]] = field(default_factory=dict)
    first_event_ms: int | None = None
    """Emulated time of the replay's first message: the emulated broker start, from which
    the stats updates are timed (reference §5.1); ``None`` = each topic's first message."""

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
                                  if e > e_join and (e_leave is None or e < e_leave)})),
                    LeaveHow(c.leave_how)))
                caps[(sub.name, str(c.name))] = (
                    None if c.capacity_msg_per_s is None else c.capacity_msg_per_s * speed,
                    int(c.ack_delay_ms / speed))
            subs.append(SubscriptionSpec(sub.name, SubscriptionType(str(sub.type).lower()),
                                         tuple(consumers), sub.grouped))
        return cls(cfg, speed, tuple(subs), caps, first_event_ms)

    def controller_settings(self, topic: str) -> ControllerSettings:
        r, t = self.config.replay, self.config.topic
        return ControllerSettings(
            policy=self.config.policy_for(topic), initial_segments=t.initial_segments,
            bucket_budget=t.bucket_budget, auto_scale_interval_ms=r.auto_scale_interval_s * 1000,
            load_report_interval_ms=r.load_report_interval_s * 1000,
            stats_update_frequency_ms=r.stats_update_frequency_s * 1000,
            stats_update_initial_delay_ms=r.stats_update_initial_delay_s * 1000,
            stats_anchor_ms=self.first_event_ms,
            rate_change_threshold=r.load_report_rate_change_threshold,
            consumer_grace_ms=CONSUMER_SESSION_GRACE_MS)

    def controller_settings_for(self, topics: Iterable[str]) -> dict[str, ControllerSettings]:
        """:meth:`controller_settings` of each of ``topics`` (topic → settings), one object per
        distinct policy (``ReplayConfig.policies_for``): thousands of topics share a few."""
        made: dict[int, ControllerSettings] = {}
        out = {}
        for topic, policy in self.config.policies_for(topics).items():
            if id(policy) not in made:
                made[id(policy)] = self.controller_settings(topic)
            out[topic] = made[id(policy)]
        return out

    def batching(self) -> BatchingConfig:
        b = self.config.batching_config()
        # Batch delay is producer wall time: on the emulated clock it shrinks with speed.
        return BatchingConfig(b.mode, b.max_messages, b.max_bytes,
                              max(1, int(b.max_publish_delay_ms / self.speed)))

    @property
    def answers(self) -> bool:
        """Whether the run writes ``topic_profile`` or ``findings`` (``output.tables``): the
        key statistics they come from are kept only then."""
        return bool({"topic_profile", "findings"} & set(self.config.output.tables))

    @property
    def consumer_window_ms(self) -> int:
        """Length of a ``consumer_load`` window on the emulated clock (ms)."""
        return consumer_window_ms(self.config.replay.consumer_window_s, self.speed)


def factorized(s: pd.Series) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """A string column as codes: each row's code (int64, -1 = null) and the values the codes
    index (object; distinct): a ``Categorical``'s own codes and categories (the staged and
    handed-over topics and producers; a category may have no row), else ``pd.factorize``'s,
    in first-seen order. Without a Python string per row: an Arrow-backed column (the keys)
    is dictionary-encoded by Arrow, and only its distinct values become Python strings (a
    string per row cost the control plane a sixth of its time at 10 M messages)."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        return (s.cat.codes.to_numpy().astype(np.int64),
                np.asarray(s.cat.categories, dtype=object))
    codes, uniques = pd.factorize(s)
    return np.asarray(codes, dtype=np.int64), np.asarray(uniques, dtype=object)


def arrow_strings_of(s: pd.Series) -> pa.ChunkedArray | None:
    """The Arrow string array behind ``s`` (no copy) when its dtype is
    ``pd.ArrowDtype(pa.string())`` (the staged and handed-over messages' strings), else
    ``None``."""
    if isinstance(s.dtype, pd.ArrowDtype) and pa.types.is_string(s.dtype.pyarrow_dtype):
        arrow = pa.array(s.array)  # __arrow_array__: its own array(s), no copy
        return arrow if isinstance(arrow, pa.ChunkedArray) else pa.chunked_array([arrow])
    return None


def codes_in(s: pd.Series, labels: Sequence[Any] | npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """Each row's index (int64) in ``labels`` (distinct values), -1 where the row's value is
    null or not among them. Arrow-backed strings are looked up in Arrow's hash table of the
    labels (``pc.index_in``: 40 % less time than a factorize of the rows); others are
    :func:`factorized`, so a string per distinct value only."""
    arrow = arrow_strings_of(s)
    if arrow is not None and all(isinstance(v, str) for v in labels):
        # each row looked up in a table of the labels (a third of a factorize's time)
        found = pc.index_in(arrow, value_set=pa.array(list(labels), pa.string()))
        return np.asarray(found.fill_null(-1).to_numpy(), dtype=np.int64)
    codes, uniques = factorized(s)
    if not len(uniques):
        return np.full(len(codes), -1, dtype=np.int64)
    where = pd.Index(list(labels)).get_indexer(uniques).astype(np.int64)
    return np.where(codes >= 0, where[codes], -1)


def distinct_codes(labels: Sequence[str] | npt.NDArray[Any], codes: npt.NDArray[Any]
                   ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int32]]:
    """``labels[codes]`` as distinct labels (object, sorted) and each row's index in them
    (int32): a producer's name is a label of each topic it publishes to, but a dictionary
    holds each value once."""
    distinct, where = np.unique(np.asarray(labels, dtype=object), return_inverse=True)
    return distinct, where[np.asarray(codes, dtype=np.int64)].astype(np.int32)


def coded(labels: Sequence[str] | npt.NDArray[Any], codes: npt.NDArray[Any]) -> pa.Array:
    """``labels[codes]`` as an Arrow dictionary of strings (int32 codes, no string per row):
    for an output table's column, which its Parquet file takes as it is
    (``pipelines.storage.delta_format.parquet_options``; the 10 M bench's messages: about
    0.2 CPU s less than taking their topic and producer as strings for the writer to hash)."""
    distinct, rows = distinct_codes(labels, codes)
    return pa.DictionaryArray.from_arrays(pa.array(rows), pa.array(list(distinct), pa.string()))


def categorical(labels: Sequence[str] | npt.NDArray[Any], codes: npt.NDArray[Any]
                ) -> pd.Categorical:
    """``labels[codes]`` as a pandas ``Categorical`` (sorted categories): an entry's topic and
    producer, which travel to dispatch as Arrow dictionaries (``ENTRY_HANDOVER``) and to the
    entries table's file as its Parquet dictionary, never as a string per row (5.6 M entries
    at 10 M messages)."""
    distinct, rows = distinct_codes(labels, codes)
    return pd.Categorical.from_codes(rows, categories=pd.Index(distinct, dtype=object))


class RowsTaken:
    """A string column turned into Python strings only for the rows asked for:
    ``rows[idx]`` (``idx`` int64 positions) is those rows' values as an object array. The key
    statistics name the first message of each (period, key), a small share of the rows."""

    def __init__(self, column: pd.Series) -> None:
        self.column = column

    def __getitem__(self, idx: npt.NDArray[Any]) -> npt.NDArray[Any]:
        taken: npt.NDArray[Any] = self.column.take(np.asarray(idx, dtype=np.int64)).to_numpy(
            object)
        return taken


def keyless_producers(pdf: pd.DataFrame) -> npt.NDArray[Any]:
    """``producer_name`` (object) where the message is keyless (``segment_hash`` null or
    negative: -1 to the controller), None elsewhere: the controller reads a message's producer
    only to route it round-robin, which only keyless messages are
    (:meth:`pipelines.core.controller.TopicController.advance`)."""
    producers = np.full(len(pdf), None, dtype=object)
    keyless = np.flatnonzero(pdf["segment_hash"].fillna(-1).to_numpy(np.int64) < 0)
    if len(keyless):
        producers[keyless] = pdf["producer_name"].take(keyless).to_numpy(object)
    return producers


def _sort_codes(s: pd.Series) -> npt.NDArray[Any]:
    """A column as sortable numbers: strings by rank (``pd.factorize(sort=True)``), nulls last
    (as ``sort_values``)."""
    if pd.api.types.is_numeric_dtype(s.dtype):
        return np.asarray(s.to_numpy())  # NaN sorts last in NumPy
    if pd.api.types.is_datetime64_any_dtype(s.dtype):  # as integers, NaT last
        return np.where(s.isna().to_numpy(), np.iinfo(np.int64).max, s.array.asi8)
    if isinstance(s.dtype, pd.CategoricalDtype):  # by value, not by the categories' order
        rank = np.empty(len(s.cat.categories), dtype=np.int64)
        rank[np.argsort(s.cat.categories.to_numpy(object), kind="stable")] = np.arange(len(rank))
        codes = s.cat.codes.to_numpy(np.int64)
        return np.where(codes < 0, np.iinfo(np.int64).max, rank[np.maximum(codes, 0)])
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


def _times(df: pd.DataFrame, speed: float, renames: Mapping[str, str],
           drop: bool = True) -> pd.DataFrame:
    """Emulated-clock ms columns → UTC timestamps in log time (× speed). ``drop=False`` keeps
    the ms columns (a caller that selects its columns drops them: each ``drop`` copies the
    frame, three times for the 5.6 M ``dispatch`` rows of a 10 M-message window set)."""
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
            else:  # nulls, or scaled: whole ms as int64 (pandas' float path rounds in ns and,
                # in a Python worker of the 10,000-topic replay, raised FloatingPointError)
                ms = (pd.to_numeric(df[src], errors="coerce") * speed).to_numpy(np.float64)
                valid = ~np.isnan(ms)
                out = np.full(len(ms), np.datetime64("NaT"), dtype="datetime64[ns]")
                if valid.any():
                    out[valid] = pd.to_datetime(np.round(ms[valid]).astype(np.int64),
                                                unit="ms").to_numpy()
                df[dst] = pd.Series(out, index=df.index).dt.tz_localize("UTC")
            if drop:
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
    key_profiles: pd.DataFrame = field(default_factory=pd.DataFrame)


def new_controller(topic: str, blob: bytes | None, settings: StageSettings,
                   controller_settings: ControllerSettings | None = None) -> TopicController:
    """The topic's controller: unpickled from ``blob``, or a fresh one (with
    ``controller_settings``, else ``settings.controller_settings(topic)``)."""
    if blob is not None:
        ctl: TopicController = pickle.loads(blob)
        return ctl
    return TopicController(topic, controller_settings or settings.controller_settings(topic),
                           settings.subscriptions)


def control_group(topic: str, pdf: pd.DataFrame, blob: bytes | None, settings: StageSettings,
                  horizon_ms: int | None, final: bool) -> tuple[pd.DataFrame, TopicController]:
    """Route one topic's window of messages and run its controller up to ``horizon_ms``.

    ``pdf``: accepted messages (``pipelines.ingest.rules.ACCEPTED_COLUMNS``; ``event_ms`` int64 ms,
    ``segment_hash`` / ``hash_b`` null for keyless), any order. Returns the messages sorted by
    :data:`SORT_KEYS` and :data:`TIE_KEYS` with ``segment_id`` (int64),
    ``bucket_index`` (int32) and ``layout_epoch`` (int64) added, and the advanced controller
    (its decisions / samples are taken by :func:`control_outputs`). An empty ``pdf`` just moves
    the controller through time (ticks, merges). ``final``: end of input, at ``horizon_ms`` =
    the log's last message + 1 for every topic (``None``: this topic's last message + 1), so a
    topic's end does not depend on how the input was cut into windows. ``ValueError`` (from
    the core) when messages are older than the previous horizon.
    """
    ctl = new_controller(topic, blob, settings)
    pdf = _sorted(pdf)
    if len(pdf) or horizon_ms is not None:
        hi = horizon_ms if horizon_ms is not None else int(pdf["event_ms"].max()) + 1
        routed = ctl.advance(pdf["event_ms"].to_numpy(np.int64),
                             pdf["segment_hash"].fillna(-1).to_numpy(np.int64),
                             pdf["hash_b"].fillna(-1).to_numpy(np.int64),
                             pdf["payload_size"].to_numpy(np.int64),
                             keyless_producers(pdf), hi)
        pdf = pdf.assign(segment_id=routed.segment_id, bucket_index=routed.bucket_index,
                         layout_epoch=routed.layout_epoch)
    else:
        pdf = pdf.assign(segment_id=pd.Series(dtype="int64"),
                         bucket_index=pd.Series(dtype="int32"),
                         layout_epoch=pd.Series(dtype="int64"))
    _count_keys(ctl, pdf, settings)
    if final:
        ctl.finish(horizon_ms)
        if ctl.key_stats is not None:
            ctl.key_stats.close()
    return pdf, ctl


def control_topics(pdf: pd.DataFrame, blobs: Mapping[str, bytes | None],
                   settings: StageSettings, horizon_ms: int | None,
                   final: bool) -> tuple[pd.DataFrame, dict[str, TopicController]]:
    """:func:`control_group` of several topics at once: the window's messages sorted once (by
    topic, then in replay order), each topic's controller advanced on its slice as arrays, the
    routed columns added to the whole window in one pass (a pandas pass per topic costs more
    than routing a quiet topic's messages).

    ``pdf``: :func:`control_group`'s messages, of topics in ``blobs`` (any order); ``blobs``:
    topic → its controller blob (``None`` = new) for every topic to advance (one without
    messages just moves through time). Returns the routed messages of every topic, topic by
    topic (name order), each in replay order, and topic → advanced controller.
    ``ValueError`` for messages of a topic not in ``blobs`` (or from the core, as
    :func:`control_group`)."""
    topics = sorted(blobs)
    code = codes_in(pdf["topic"], topics)
    if (code < 0).any():
        raise ValueError("messages of a topic not given a controller state")
    # the sort's own columns only, and the rows taken column by column into a frame that is
    # not consolidated: an assign, a take and a reset_index each copied every column
    keyed = pd.DataFrame({"_topic": code, "_seq_sort": pdf["sequence_id"].fillna(-1),
                          **{c: pdf[c] for c in (*SORT_KEYS, *TIE_KEYS) if c != "_seq_sort"}},
                         copy=False)
    order = ties_ranked_apart(keyed, ["_topic", *SORT_KEYS], TIE_KEYS)
    pdf = taken(pdf, order)
    bounds = np.searchsorted(code[order], np.arange(len(topics) + 1))
    event = pdf["event_ms"].to_numpy(np.int64)
    segment_hash = pdf["segment_hash"].fillna(-1).to_numpy(np.int64)
    hash_b = pdf["hash_b"].fillna(-1).to_numpy(np.int64)
    size = pdf["payload_size"].to_numpy(np.int64)
    producer = keyless_producers(pdf)
    counted = _key_columns(pdf, settings)
    n = len(pdf)
    segment_id = np.zeros(n, dtype=np.int64)
    bucket_index = np.zeros(n, dtype=np.int32)
    layout_epoch = np.zeros(n, dtype=np.int64)
    fresh = settings.controller_settings_for([t for t in topics if blobs[t] is None])
    controllers = {t: new_controller(t, blobs[t], settings, fresh.get(t)) for t in topics}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="key-stats") as pool:
        # every topic's key statistics in one pass (not a call per topic), on a thread of
        # their own while the topics are routed (the controllers never read them): NumPy's
        # sorts let go of the GIL, and a lone hot topic's control plane left a core idle
        counting = None if counted is None else pool.submit(
            update_many, [_key_stats(controllers[t], settings) for t in topics], bounds,
            *counted)
        for i, topic in enumerate(topics):
            ctl = controllers[topic]
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            if hi > lo or horizon_ms is not None:
                until = horizon_ms if horizon_ms is not None else int(event[lo:hi].max()) + 1
                routed = ctl.advance(event[lo:hi], segment_hash[lo:hi], hash_b[lo:hi],
                                     size[lo:hi], producer[lo:hi], until)
                segment_id[lo:hi] = routed.segment_id
                bucket_index[lo:hi] = routed.bucket_index
                layout_epoch[lo:hi] = routed.layout_epoch
            if final:
                ctl.finish(horizon_ms)
        if counting is not None:
            counting.result()  # its error, if any, raised here
    if final:
        close_many([ks for ctl in controllers.values() if (ks := ctl.key_stats) is not None])
    pdf["segment_id"] = segment_id  # pdf is this call's own frame (taken): no copy
    pdf["bucket_index"] = bucket_index
    pdf["layout_epoch"] = layout_epoch
    return pdf, controllers


def taken(pdf: pd.DataFrame, order: npt.NDArray[Any]) -> pd.DataFrame:
    """Rows ``order`` (int64 positions) of ``pdf``, every column kept with its dtype, in a new
    frame with a fresh range index whose columns are not consolidated (``DataFrame.take`` and
    ``reset_index`` each copy the whole frame; NumPy columns are indexed as arrays, others by
    their array's ``take``)."""
    return pd.DataFrame({c: column_rows(col, order) for c, col in pdf.items()}, copy=False)


def column_rows(col: pd.Series, pos: npt.NDArray[Any]) -> Any:
    """Rows ``pos`` (int64 positions) of ``col`` as an array of its dtype: a NumPy column
    indexed as an array (pandas' ``take`` checks each object string for a null), others
    (Arrow strings, timestamps) by their array's ``take``."""
    return col.to_numpy()[pos] if isinstance(col.dtype, np.dtype) else col.array.take(pos)


def packed_key(cols: Sequence[npt.NDArray[Any]]) -> npt.NDArray[np.int64] | None:
    """Integer sort keys (equal lengths) packed into one int64 per row
    (:func:`pipelines.core.sorting.packed_words`: the first key in the highest bits, each
    offset by its minimum): a stable argsort of it is ``np.lexsort`` of the keys (first key
    first), and equal packed values are rows equal on every key. ``None`` when a key is not
    integer, there are no rows, or the keys' value ranges need more than 63 bits. A window's
    replay order (topic, event ms, producer rank, sequence id: about 42 bits at the 10 M
    bench) sorts in one pass over rows mostly in time order already: 2 ms instead of
    ``lexsort``'s 14 ms per 500,000 messages."""
    words = packed_words(cols)
    if words is None or len(words) > 1:
        return None
    return words[0] if words else np.zeros(len(cols[0]), dtype=np.int64)


def ties_ranked_apart(pdf: pd.DataFrame, keys: list[str], then: Sequence[str]) -> npt.NDArray[Any]:
    """:func:`stable_order` ``(pdf, keys, then)`` with the ``then`` keys ranked and sorted only
    among the rows that tie on ``keys``, run by run (a window of thousands of quiet topics has
    a few such rows: sorting all of them again on every key cost a tenth of the control
    plane). The rows of a run are in input order after the sort on ``keys`` (a stable sort),
    and ranking a subset orders its values as ranking them all does, so the order is
    :func:`stable_order`'s (a test compares)."""
    if not keys:  # every row ties
        return stable_order(pdf, keys, then)
    cols = [_sort_codes(pdf[k]) for k in keys]
    packed = packed_key(cols)
    order: npt.NDArray[Any] = (np.lexsort(cols[::-1]) if packed is None
                               else np.argsort(packed, kind="stable"))
    if not then or len(order) < 2:
        return order
    if packed is None:
        ranked = [c[order] for c in cols]
        same = np.logical_and.reduce([_equal(c[1:], c[:-1]) for c in ranked])  # ties the previous
    else:
        ranked_key = packed[order]
        same = ranked_key[1:] == ranked_key[:-1]
    if not same.any():
        return order
    tied = np.flatnonzero(np.r_[same, False] | np.r_[False, same])  # sorted positions
    run = np.cumsum(np.r_[True, ~same])[tied]
    sub = pdf.take(order[tied])
    inner = np.lexsort([*[_sort_codes(sub[k]) for k in then][::-1], run])
    order[tied] = order[tied][inner]
    return order


TOP_KEYS = 10
"""Keys listed per topic in ``topic_profile`` (the hottest by peak period rate)."""


def _count_keys(ctl: TopicController, pdf: pd.DataFrame, settings: StageSettings) -> None:
    """Feed the window's messages (replay order) to the topic's key statistics
    (:class:`~pipelines.core.heavy_hitters.KeyStats`, carried in the controller; one per
    ``replay.stats_update_frequency_s`` stats period on the emulated clock, as the load
    samples). Nothing is counted when the run writes neither answer table."""
    columns = _key_columns(pdf, settings)
    if columns is not None:
        _count_key_arrays(ctl, settings, *columns)


def _key_columns(pdf: pd.DataFrame, settings: StageSettings) -> tuple[Any, ...] | None:
    """The columns the key statistics take (event ms, hash32, payload size, key names), as
    arrays (the names as :class:`RowsTaken`: only the rows the statistics name become
    strings); ``None`` when the run writes neither answer table."""
    if not settings.answers:
        return None
    # output.keys hashed / none: the key names are never kept (nor written, even
    # transiently); the hashes identify the keys
    names = (RowsTaken(pdf["key"]) if settings.config.output.keys == "raw"
             else np.full(len(pdf), None, dtype=object))
    return (pdf["event_ms"].to_numpy(np.int64), pdf["hash32"].fillna(-1).to_numpy(np.int64),
            pdf["payload_size"].to_numpy(np.int64), names)


def _count_key_arrays(ctl: TopicController, settings: StageSettings, event: npt.NDArray[Any],
                      hash32: npt.NDArray[Any], size: npt.NDArray[Any],
                      names: npt.NDArray[Any]) -> None:
    """:func:`_count_keys` on arrays (:func:`_key_columns`' slice of the topic)."""
    if len(event):
        _key_stats(ctl, settings).update(event, hash32, size, names)


def _key_stats(ctl: TopicController, settings: StageSettings) -> KeyStats:
    """The topic's key statistics, made when first needed."""
    if ctl.key_stats is None:
        ctl.key_stats = KeyStats(settings.config.replay.stats_update_frequency_s * 1000,
                                 report_hashes=settings.config.output.keys != "none")
    return ctl.key_stats


def key_profile_row(topic: str, ks: KeyStats, speed: float) -> dict[str, Any]:
    """The ``topic_profile`` columns the key statistics give (one topic, after
    :meth:`KeyStats.close`): traffic counts and the :data:`TOP_KEYS` hottest keys (names null
    under ``output.keys`` hashed / none, hashes null under none). Rates in msg/s on the
    emulated clock, times in log time."""
    top = ks.top(TOP_KEYS)
    period_s = ks.period_ms / 1000
    n = ks.messages
    return {
        "topic": topic, "messages": n, "bytes": ks.bytes,
        "distinct_keys": ks.distinct_keys, "distinct_keys_exact": ks.distinct_exact,
        "keyless_messages": ks.keyless, "keyless_share": ks.keyless / n if n else 0.0,
        "top_keys": [t["key"] for t in top],
        "top_key_hashes": [t["hash32"] if ks.report_hashes else None for t in top],
        "top_key_messages": [t["messages"] for t in top],
        "top_key_shares": [t["messages"] / n if n else 0.0 for t in top],
        "top_key_peak_rates": [t["peak_messages"] / period_s for t in top],
        "key_count_error": ks.error,
        "hot_key_peak_at": (pd.Timestamp(round(top[0]["peak_at_ms"] * speed), unit="ms",
                                         tz="UTC") if top else None),
    }


def control_outputs(controllers: Mapping[str, TopicController],
                    speed: float, keep_state: bool = True) -> ControlResult:
    """Take every controller's pending decisions and samples and snapshot its layout.
    ``keep_state=False`` (the end of input: nothing reads the state after it) makes no state
    blobs (``states`` empty; pickling was a fifth of the control plane's Python time at 10,000
    topics, py-spy).

    Frames: ``decisions`` / ``samples`` / ``segments`` with the columns of
    ``autoscale_decisions`` / ``segment_load`` / ``segments`` (times as UTC timestamps in log
    time, i.e. emulated ms × ``speed``), ``key_profiles``: a :func:`key_profile_row` per topic
    whose input has ended (its key statistics closed); topics in name order."""
    decisions, samples, segments, profiles = [], [], [], []
    sample_topics: list[str] = []
    for topic, ctl in sorted(controllers.items()):
        ks = ctl.key_stats
        if ks is not None and ks.closed:
            profiles.append(key_profile_row(topic, ks, speed))
        d, s = ctl.take_rows()
        decisions += [{"topic": topic, **r} for r in d]
        if s:  # tuples, the topic as a column of its own (a dict per row cost more)
            samples += s
            sample_topics += [topic] * len(s)
        if ctl.layout is not None:
            segments += [{"topic": topic, **r} for r in segment_rows(ctl.layout)]
    sample_frame = pd.DataFrame()
    if samples:  # by a structured array: a third of pandas' inference from tuples
        rows = np.array(samples, dtype=SAMPLE_DTYPE)
        sample_frame = pd.DataFrame({"topic": sample_topics,
                                     **{c: rows[c] for c in SAMPLE_COLUMNS}})
    return ControlResult(
        states={t: pickle.dumps(c) for t, c in controllers.items()} if keep_state else {},
        layouts={t: c.layout for t, c in controllers.items() if c.layout is not None},
        decisions=_times(pd.DataFrame(decisions), speed, {"eval_time_ms": "eval_time"}),
        samples=_times(sample_frame, speed,
                       {"sample_time_ms": "sample_time", "modified_at_ms": "modified_at"}),
        segments=_times(pd.DataFrame(segments), speed,
                        {"created_at_ms": "created_at", "sealed_at_ms": "sealed_at"}),
        key_profiles=pd.DataFrame(profiles),
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
    all producers and segments at once, as columns): :func:`batch_topics` of the one topic.

    ``routed``: :func:`control_group`'s output (replay order); ``blob``: the carried
    :class:`BatchingState` (``None`` = new). Default sequence ids (null) are the order within
    the producer. Seals of ``layout`` in the window re-send the open batches of the sealed
    segments (reference §7.2); ``final`` (end of input) lets every flush task fire (§7.1: no
    end-of-input flush). Returns ``(messages, entries, new_blob)``: ``messages`` = the
    ``messages`` rows whose entry was sent, as a ``pyarrow.Table`` of the table's columns and
    types (by producer and send order; a re-sent message carries its successor's segment,
    bucket, layout epoch and ``segment_sequence_id``), ``entries`` = the sent entries (the
    core's columns, ``producer_name`` for the producer code, ``entry_seq``)."""
    topic = str(routed["topic"].iloc[0]) if len(routed) else ""
    messages, entries, blobs = batch_topics(routed, {topic: blob}, bcfg, {topic: layout},
                                            horizon_ms, final)
    return messages, entries.drop(columns="topic"), blobs[topic]


def batch_topics(routed: pd.DataFrame, blobs: Mapping[str, bytes | None], bcfg: BatchingConfig,
                 layouts: Mapping[str, SegmentLayout | None], horizon_ms: int | None,
                 final: bool,
                 keep_state: bool = True) -> tuple[Any, pd.DataFrame, dict[str, bytes]]:
    """Several topics' window through their producers' batch containers in ONE core call
    (:func:`pipelines.core.batching.batch`; a pandas pass per topic costs more than the
    batching of a quiet topic): producer codes run over the (topic, producer) pairs, topic by
    topic in name order, so no container mixes topics, and each topic's seals close only its
    own producers' containers (:meth:`~pipelines.core.batching.Reroute.for_producers`).
    Equal, topic by topic, to :func:`batch_topic` of each (the core is per container).

    ``routed``: :func:`control_group`'s output of some of ``blobs``' topics (its ``topic``
    column; replay order within each topic); ``blobs``: topic → carried :class:`BatchingState`
    (``None`` = new) of every topic to run (one without rows lets its flush tasks fire, re-sends
    at its seals); ``layouts``: topic → its layout (missing = none). Returns ``(messages,
    entries, new_blobs)``: :func:`batch_topic`'s messages and entries of every topic, by topic
    (name order), ``entries`` with a ``topic`` column first; ``new_blobs``: topic → new blob for
    every topic of ``blobs`` (none with ``keep_state=False``, the end of input: nothing reads
    the state after it). ``ValueError`` for rows of a topic not in ``blobs``."""
    topics = sorted(blobs)
    cast = {c: t for c, t in _MESSAGE_DTYPES.items() if routed[c].dtype != t}
    routed = routed.astype(cast) if cast else routed
    states = [pickle.loads(b) if (b := blobs[t]) is not None else BatchingState()
              for t in topics]
    merged, offsets, codes, pending = _merge_states(states, topics, routed)
    names = merged.producers
    new = _new_rows(merged, routed, codes, names)
    # a row's topic and producer are its code's (NAME_COLUMNS): not carried in the rows (a
    # concat of Categoricals of different categories makes a Python string per row)
    rows = (pd.concat([*(f.drop(columns=list(NAME_COLUMNS), errors="ignore")
                         for f, _ in pending), new], ignore_index=True) if pending else new)
    codes_all = np.concatenate([*(c for _, c in pending), codes]) if pending else codes
    to = None if final else horizon_ms
    changes = []
    for i, (t, st) in enumerate(zip(topics, states, strict=True)):
        mine = np.arange(offsets[i], offsets[i + 1], dtype=np.int64)
        changes += [c if len(topics) == 1 else c.for_producers(mine)
                    for c in reroutes(layouts.get(t), st.done_ms, to)]
    changes.sort(key=lambda c: c.time_ms)  # stable: a topic's own changes keep their order
    r = batch(_core_messages(rows, codes_all, bcfg.mode is BatchingMode.KEY_BASED),
              merged.containers, changes, bcfg, len(names), merged.next_entry, to)
    # the core's columns beside the rows (an assign would copy every column of the window)
    routed_by_core: dict[str, npt.NDArray[Any]] = {
        "segment_id": r.segment_id, "bucket_index": r.bucket_index.astype(np.int32),
        "layout_epoch": r.epoch, "_time_ms": r.time_ms, "_resent": r.resent}
    sent = np.flatnonzero(r.entry_seq >= 0)
    sent = sent[lexsort((rows["_ordinal"].to_numpy(np.int64)[sent], codes_all[sent]))]
    topic_of = np.repeat(np.arange(len(topics)), np.diff(offsets))  # of each producer code
    # the topic and producer of a row are its code's: coded, not taken as strings
    messages = _message_table(rows, sent, **{c: routed_by_core[c][sent] for c in
                                             ("segment_id", "bucket_index", "layout_epoch")},
                              segment_sequence_id=r.segment_sequence_id[sent],
                              entry_id=r.entry_seq[sent],
                              topic=coded(topics, topic_of[codes_all[sent]]),
                              producer_name=coded(names, codes_all[sent]))
    entries = pd.DataFrame({c: v for c, v in r.entries.items() if c != "producer"}, copy=False)
    entries.insert(0, "producer_name", categorical(names, r.entries["producer"]))
    entries.insert(0, "topic", categorical(topics, topic_of[r.entries["producer"]]))
    if not keep_state:  # the open containers and counters only matter to a next window
        return conform_messages(messages), entries, {}
    merged.next_entry = merged.next_entry + r.entries_per_producer
    still = np.flatnonzero(r.entry_seq < 0)
    open_rows = rows.iloc[still].reset_index(drop=True)
    for c, v in routed_by_core.items():
        open_rows[c] = v[still]
    open_code = codes_all[still]
    open_topic = topic_of[open_code]
    out = {}
    for i, (t, st) in enumerate(zip(topics, states, strict=True)):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        st.producers = names[lo:hi]
        st.next_ordinal = merged.next_ordinal[lo:hi]
        st.next_entry = merged.next_entry[lo:hi]
        st.next_sequence_id = merged.next_sequence_id[lo:hi]
        a, b = np.searchsorted(r.state.producer, [lo, hi])
        st.containers = r.state.take(np.arange(a, b))
        st.containers.producer = (st.containers.producer - lo).astype(np.int64)
        still_open = np.flatnonzero(open_topic == i)
        st.pending = (_pending_rows(open_rows.iloc[still_open], t, st.producers,
                                    open_code[still_open] - lo) if len(still_open) else None)
        if horizon_ms is not None and not final:
            st.done_ms = max(st.done_ms, horizon_ms + 1)
        out[t] = pickle.dumps(st)
    return conform_messages(messages), entries, out


def _pending_rows(rows: pd.DataFrame, topic: str, producers: npt.NDArray[Any],
                  codes: npt.NDArray[np.int64]) -> pd.DataFrame:
    """A topic's rows left in open batches, as its :class:`BatchingState` keeps them: with
    their :data:`NAME_COLUMNS` (``Categorical`` of the topic's own names; ``codes``: each
    row's producer, an index in ``producers``) and a fresh index."""
    pending = rows.reset_index(drop=True)
    pending["topic"] = categorical([topic], np.zeros(len(codes), dtype=np.int64))
    pending["producer_name"] = categorical(producers, codes)
    return pending


def _merge_states(states: Sequence[BatchingState], topics: Sequence[str], routed: pd.DataFrame
                  ) -> tuple[BatchingState, npt.NDArray[np.int64], npt.NDArray[np.int64],
                             list[tuple[pd.DataFrame, npt.NDArray[np.int64]]]]:
    """The topics' batching states as one over (topic, producer) codes: each topic's producers
    grown by its window's (:func:`_grow_producers`), then numbered after the previous topics'
    (``offsets[i]``: topic ``i``'s first code; ``offsets[-1]``: all of them). Returns the
    merged state (no pending rows), the offsets, the window rows' codes (int64) and each
    pending frame with its rows' codes."""
    t_code = codes_in(routed["topic"], topics)
    if (t_code < 0).any():
        raise ValueError("routed messages of a topic not given a state")
    p_code, p_names = factorized(routed["producer_name"])
    width = max(len(p_names), 1)
    pairs, inverse = dense_unique(t_code.astype(np.int64) * width + p_code, len(topics) * width)
    pair_topic, pair_name = pairs // width, np.asarray(p_names, dtype=object)[pairs % width]
    bounds = np.searchsorted(pair_topic, np.arange(len(topics) + 1))
    pair_code = np.zeros(len(pairs), dtype=np.int64)
    offsets = np.zeros(len(topics) + 1, dtype=np.int64)
    pending: list[tuple[pd.DataFrame, npt.NDArray[np.int64]]] = []
    containers = []
    for i, st in enumerate(states):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        names = _grow_producers(st, pair_name[lo:hi])
        pair_code[lo:hi] = offsets[i] + np.searchsorted(names, pair_name[lo:hi])
        c = st.containers
        containers.append(ContainerState(c.producer + offsets[i], c.segment_id, c.last_send_ms,
                                         c.task_ms, c.next_sequence_id))
        if st.pending is not None and len(st.pending):
            pending.append((st.pending, offsets[i] + codes_in(st.pending["producer_name"], names)))
        offsets[i + 1] = offsets[i] + len(names)

    def joined(attr: str) -> npt.NDArray[Any]:
        return (np.concatenate([getattr(st, attr) for st in states]) if states
                else np.zeros(0, dtype=np.int64))

    merged = BatchingState(joined("producers").astype(object), joined("next_ordinal"),
                           joined("next_entry"), joined("next_sequence_id"),
                           ContainerState.concat(containers) if containers else ContainerState())
    codes = pair_code[inverse] if len(routed) else np.zeros(0, dtype=np.int64)
    return merged, offsets, codes.astype(np.int64), pending


def dense_unique(values: npt.NDArray[np.int64], bound: int
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``np.unique(values, return_inverse=True)`` of values below ``bound``: by a table of
    ``bound`` flags instead of a sort when every value is ``>= 0`` and ``bound`` is at most a
    few times the values' count (a window's (topic, producer) pairs: the sort of every
    message's pair was a tenth of batching's pandas and NumPy glue). Returns the distinct
    values (sorted, int64) and each value's index in them (int64)."""
    if bound > 4 * len(values) + 1024 or (len(values) and int(values.min()) < 0):
        pairs, inverse = np.unique(values, return_inverse=True)
        return pairs.astype(np.int64), inverse.reshape(-1).astype(np.int64)
    seen = np.zeros(bound, dtype=bool)
    seen[values] = True
    pairs = np.flatnonzero(seen).astype(np.int64)
    index = np.cumsum(seen, dtype=np.int64) - 1
    return pairs, index[values]


def _grow_producers(st: BatchingState, seen: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Extend ``st``'s producers with ``seen`` names (names stay sorted, codes are re-mapped in
    its containers and counters); returns the names."""
    names = np.union1d(st.producers, np.asarray(seen, dtype=object)).astype(object)
    if len(names) != len(st.producers):
        old = np.searchsorted(names, st.producers)
        for attr in ("next_ordinal", "next_entry", "next_sequence_id"):
            grown = np.zeros(len(names), dtype=np.int64)
            grown[old] = getattr(st, attr)
            setattr(st, attr, grown)
        st.containers.producer = old[st.containers.producer].astype(np.int64)
        st.producers = names
    return names


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
    # one frame from arrays (a fresh range index; pandas copies them): no index alignment,
    # no assign or reset_index copying every column again
    columns: dict[str, Any] = {
        c: routed[c].to_numpy() if isinstance(routed[c].dtype, np.dtype) else routed[c].array
        for c in MESSAGE_COLUMNS if c not in NAME_COLUMNS}
    columns["sequence_id"] = seq_ids
    event_ms = routed["event_ms"].to_numpy(np.int64)
    columns.update(event_ms=event_ms, _ordinal=ordinal, _time_ms=event_ms,
                   _resent=np.zeros(n, dtype=np.int64))
    return pd.DataFrame(columns, copy=False)


def _rank_within(codes: npt.NDArray[Any], counts: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Each row's rank (int64, from 0, in row order) among the rows of its code; ``counts``:
    rows per code."""
    by_code = stable_argsort(codes)
    rank = np.empty(len(codes), dtype=np.int64)
    rank[by_code] = (np.arange(len(codes), dtype=np.int64)
                     - np.repeat(np.cumsum(counts) - counts, counts))
    return rank


def _key_ids(keys: pd.Series) -> npt.NDArray[np.int64]:
    """Each key's identity for the core (int64 >= 0, -1 = keyless): pandas' stable hash of the
    key, halved, computed once per distinct key (:func:`factorized`)."""
    codes, uniques = factorized(keys)
    if not len(uniques):
        return np.full(len(codes), -1, dtype=np.int64)
    ids = (pd.util.hash_array(uniques) >> np.uint64(1)).astype(np.int64)
    return np.where(codes >= 0, ids[codes], -1)


def _core_messages(rows: pd.DataFrame, codes: npt.NDArray[Any], key_based: bool) -> Messages:
    """Pending rows → the core's :class:`~pipelines.core.batching.Messages` columns."""
    key_id = _key_ids(rows["key"]) if key_based else np.full(len(rows), -1, dtype=np.int64)
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
    """``messages`` rows (a ``pyarrow.Table``) cast to the table's columns and types, strings
    coded as dictionaries kept so (:func:`coded`)."""

    return conform_arrow("messages", table, columns=table_columns("messages"), dictionaries=True)


def _message_columns(routed: pd.DataFrame, pos: npt.NDArray[Any],
                     extra: Mapping[str, npt.NDArray[Any]]) -> dict[str, Any]:
    """Rows ``pos`` of ``routed``'s :data:`MESSAGE_COLUMNS` (one take per column: no copy of the
    whole frame, :func:`column_rows`), with ``extra`` columns (aligned with ``pos``) replacing
    or following them."""
    columns: dict[str, Any] = {c: extra[c] if c in extra else column_rows(routed[c], pos)
                               for c in MESSAGE_COLUMNS}
    columns.update(extra)
    return columns


def _message_rows(routed: pd.DataFrame, pos: npt.NDArray[Any],
                  **extra: npt.NDArray[Any]) -> pd.DataFrame:
    """:func:`_message_columns` as a pandas frame."""
    return pd.DataFrame(_message_columns(routed, pos, extra))


def _message_table(routed: pd.DataFrame, pos: npt.NDArray[Any], **extra: Any) -> Any:
    """:func:`_message_columns` as a ``pyarrow.Table`` (no pandas frame is made: its
    consolidation copies every column, and object strings would be converted back)."""

    return pa.table({c: pa.array(v, from_pandas=True)
                     for c, v in _message_columns(routed, pos, extra).items()})


def entry_frame(topic: str | None, entries: pd.DataFrame, speed: float) -> pd.DataFrame:
    """:func:`batch_topic` entries (of any producers of ``topic``; ``None``: of the topics in
    their ``topic`` column, :func:`batch_topics`') → ``entries`` table rows
    (:data:`ENTRY_COLUMNS`: times as UTC timestamps in log time, ``emu_publish_ms`` kept for
    dispatch)."""
    # one frame from the columns it keeps (same index): no rename, assign or drop copying
    # every column of the entries again
    renames = {"open_time_ms": "open_time", "publish_time_ms": "publish_time"}
    times = _times(entries[list(renames)].copy(), speed, renames)  # two columns copied
    columns = {"entry_id": entries["entry_seq"],
               "topic": (entries["topic"] if topic is None else
                         categorical([topic], np.zeros(len(entries), dtype=np.int32))),
               # the core's reason codes as a categorical of the names (no string per entry)
               "close_reason": categorical(CLOSE_REASONS, entries["close_reason"].to_numpy()),
               "emu_publish_ms": entries["publish_time_ms"],
               "open_time": times["open_time"], "publish_time": times["publish_time"]}
    return pd.DataFrame({c: columns[c] if c in columns else entries[c] for c in ENTRY_COLUMNS},
                        copy=False)


# ---- dispatch per topic ---------------------------------------------------------------------


def new_dispatchers(settings: StageSettings, only: int | None = None) -> list[Any]:
    """One ``SubscriptionDispatcher`` per configured subscription; an ungrouped CHECKPOINT
    subscription gets one per consumer instead (each reads every segment through a cursor of
    its own, reference §7.3), named :func:`~pipelines.core.dispatch.reader_subscription`.
    Reconnects are not dispatch events (the session never left, see ``ConsumerSpec``); a
    leave is a clean close or a crash for dispatch as for the controller (§6.1), with the
    same grace period. ``only``: the list of just the ``only``-th of them."""

    out = []
    for sub in settings.subscriptions:
        consumers = []
        for c in sub.consumers:
            cap, ack = settings.capacities.get((sub.name, c.name), (None, 0))
            consumers.append(DConsumer(c.name, c.join_ms, c.leave_ms, cap, ack, c.leave_how))
        if sub.grouped:
            out.append(SubscriptionDispatcher(sub.name, sub.type.value, consumers,
                                              settings.consumer_window_ms,
                                              CONSUMER_SESSION_GRACE_MS))
        else:
            out.extend(SubscriptionDispatcher(reader_subscription(sub.name, c.name),
                                              sub.type.value, [c], settings.consumer_window_ms,
                                              CONSUMER_SESSION_GRACE_MS)
                       for c in consumers)
    return out if only is None else [out[only]]


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
    ``final``: end of input at ``horizon_ms`` (the log's last message + 1, the same for every
    topic: the last consumer window ends there; ``None``: at the topic's own last instant).
    """
    disp, seen = (pickle.loads(blob) if blob is not None else (new_dispatchers(settings), -1))
    cols = _entry_arrays(entries.take(stable_order(entries, _DISPATCH_ORDER)))
    outs, new_seen = _run_dispatchers(disp, seen, layout, cols, horizon_ms, final)
    frames = {t: pd.concat([pd.DataFrame(part) for o in outs for part in o.column_parts(t)],
                           ignore_index=True).assign(topic=topic) for t in _DISPATCH_OUTPUTS}
    return _dispatch_tables(frames, settings.speed), pickle.dumps((disp, new_seen))


def dispatch_topics(entries: pd.DataFrame, blobs: Mapping[str, bytes | None],
                    settings: StageSettings, layouts: Mapping[str, SegmentLayout],
                    horizon_ms: int | None, final: bool, keep_state: bool = True,
                    dispatcher: int | None = None,
                    ) -> tuple[dict[str, pd.DataFrame], dict[str, bytes]]:
    """:func:`dispatch_group` of several topics at once: the window's entries sorted once (by
    topic, then as :func:`dispatch_group` sorts them), each topic's dispatchers fed its slice
    as arrays, and every topic's output rows converted to tables in one pass (a pandas pass
    per topic and table costs more than dispatching a quiet topic's entries).

    ``entries``: :func:`dispatch_group`'s columns plus ``topic``, of topics in ``blobs``;
    ``blobs``: topic → its dispatchers' blob (what :func:`dispatch_group` returns; ``None``: a
    topic without state, given :func:`new_dispatchers`, or only the ``dispatcher``-th of them,
    as the operator keyed by dispatcher holds) for every topic to run; ``layouts``: topic → its
    layout (every topic of ``blobs``). Returns the frames of every topic by ``_kind``
    (:func:`dispatch_group`'s; none for no topics) and topic → new blob (none with
    ``keep_state=False``, the end of input: nothing reads the state after it).
    ``ValueError`` for entries of a topic not in ``blobs``."""
    topics = sorted(blobs)
    code = codes_in(entries["topic"], topics)
    if (code < 0).any():
        raise ValueError("entries of a topic not given a dispatcher state")
    if not topics:
        return {}, {}
    # the order from the sort keys alone, then only the columns the dispatchers take (not a
    # take of every column of the entries)
    order = stable_order(pd.DataFrame({"_topic": code, **{c: entries[c] for c in
                                                           _DISPATCH_ORDER}}, copy=False),
                         ["_topic", *_DISPATCH_ORDER])
    cols = {c: v[order] for c, v in _entry_arrays(entries).items()}
    bounds = np.searchsorted(np.sort(code), np.arange(len(topics) + 1))
    collected = _Collected()
    out = {}
    for i, topic in enumerate(topics):
        blob = blobs[topic]
        disp, seen = (pickle.loads(blob) if blob is not None
                      else (new_dispatchers(settings, dispatcher), -1))
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        outs, new_seen = _run_dispatchers(disp, seen, layouts[topic],
                                          {c: v[lo:hi] for c, v in cols.items()},
                                          horizon_ms, final)
        for o in outs:
            collected.add(i, o)
        if keep_state:
            out[topic] = pickle.dumps((disp, new_seen))
    return _dispatch_tables(collected.frames(topics), settings.speed), out


class _Collected:
    """The dispatchers' outputs of many topics, gathered for one frame per output: the
    ``dispatch`` parts (:meth:`~pipelines.core.dispatch.DispatchOutputs.column_parts`) and the
    other outputs' rows as they come (one list of row tuples per output, no columns per topic),
    each with its topic (index) and row count."""

    def __init__(self) -> None:
        self.parts: list[Mapping[str, Any]] = []
        self.part_topic: list[int] = []
        self.rows: dict[str, list[tuple[Any, ...]]] = {t: [] for t in _DISPATCH_OUTPUTS[1:]}
        self.row_topic: dict[str, list[int]] = {t: [] for t in _DISPATCH_OUTPUTS[1:]}

    def add(self, topic: int, outputs: Any) -> None:
        """One dispatcher's outputs (``DispatchOutputs``) of the topic with index ``topic``."""
        for part in outputs.column_parts("dispatch"):
            self.parts.append(part)
            self.part_topic.append(topic)
        for t, rows in self.rows.items():
            new = getattr(outputs, t)
            if new:
                rows.extend(new)
                self.row_topic[t].append(topic)
                self.row_topic[t].append(len(new))

    def frames(self, topics: Sequence[str]) -> dict[str, pd.DataFrame]:
        """Every output as one frame with a ``topic`` column (``topics``: names by index), typed
        as :func:`dispatch_group`'s (lists inferred once per column; no rows: the row type's
        columns, empty, and ``topic``)."""
        names = np.asarray(topics, dtype=object)
        frames = {}
        counts = [_rows(p) for p in self.parts]
        frames["dispatch"] = _joined(self.parts) if sum(counts) else _joined(
            [{**self.parts[0], "topic": []}])
        if sum(counts):  # coded (:func:`strings_coded`), from the parts' topic indexes
            frames["dispatch"]["topic"] = pd.arrays.ArrowExtensionArray(
                coded(topics, np.repeat(self.part_topic, counts)))
            # a part is one dispatcher's, of one subscription: coded from each part's first
            # row (a factorize of 5.6 M repeated strings took 0.2 s at the 10 M bench)
            subs = [p["subscription"][0] if n else None for p, n in zip(self.parts, counts,
                                                                         strict=True)]
            distinct = {s: i for i, s in enumerate(sorted({s for s in subs if s is not None}))}
            frames["dispatch"]["subscription"] = pd.arrays.ArrowExtensionArray(coded(
                list(distinct), np.repeat([distinct.get(s, 0) for s in subs], counts)))
        for t, rows in self.rows.items():
            fields = DISPATCH_ROW_TYPES[t]._fields
            if rows:  # (from the row tuples: each column inferred as from a list of its values)
                frame = pd.DataFrame.from_records(rows, columns=fields)
                tags = np.asarray(self.row_topic[t], dtype=np.int64).reshape(-1, 2)
                frame["topic"] = np.repeat(names[tags[:, 0]], tags[:, 1])
            else:
                frame = pd.DataFrame({f: [] for f in fields})
                frame["topic"] = []
            frames[t] = frame
        return frames


_DISPATCH_ORDER = ["emu_publish_ms", "producer_name", "entry_id"]
"""Order in which a topic's entries reach its dispatchers."""

_DISPATCH_OUTPUTS = ("dispatch", "consumer_load", "handoffs", "window_stats", "segment_drains")
"""The dispatchers' outputs (``pipelines.core.dispatch.DispatchOutputs``' tables)."""

_ENTRY_ARRAYS = {"emu_publish_ms": np.int64, "segment_id": np.int64, "entry_hash_min": np.int64,
                 "num_messages": np.int64, "payload_bytes": np.int64, "producer_name": object,
                 "entry_id": np.int64}
"""Entry columns the dispatchers take, with their NumPy types."""


def _entry_arrays(g: pd.DataFrame) -> dict[str, npt.NDArray[Any]]:
    """Entries (in feeding order) as the dispatchers' arrays (:data:`_ENTRY_ARRAYS`; strings as
    an object array: tolist() of Arrow strings costs ten times as much)."""
    return {c: g[c].to_numpy(dtype=t) for c, t in _ENTRY_ARRAYS.items()}


def _run_dispatchers(disp: Sequence[Any], seen: int, layout: SegmentLayout,
                     cols: Mapping[str, npt.NDArray[Any]], horizon_ms: int | None,
                     final: bool) -> tuple[list[Any], int]:
    """Feed a topic's window (``cols``: :func:`_entry_arrays`, in feeding order) and its layout
    changes after ``seen`` to each of its dispatchers, then move them to the horizon (or
    finish them). Returns their outputs and the new ``seen``."""
    times = cols["emu_publish_ms"]
    changes = [t for t in [layout.segments[min(layout.segments)].created_at_ms,
                           *change_times(layout)] if t > seen]
    # a window takes the layout changes before its horizon; the last one takes them all (the
    # controller's last ticks may change the layout at or after the log's end)
    taken = (changes if final or horizon_ms is None
             else [c for c in changes if c < horizon_ms])
    until = (horizon_ms - 1 if horizon_ms is not None  # not final: advanced up to it
             else max([seen, *changes, *times[-1:].tolist()]))  # (times do not decrease)
    bound = horizon_ms if final else until
    complete = not len(times) or bound is None or int(times[-1]) <= bound
    outs = []
    for d in disp:
        start = 0
        for t in taken:
            stop = int(np.searchsorted(times, t, side="left"))
            _feed(d, cols, start, stop)
            d.on_layout(t, layout_as_of(layout, t))
            start = stop
        # the last entries: nothing later at their instant when the dispatcher is advanced
        # (or finished) past it next, so it may take that instant in bulk too. An entry
        # published after the horizon (a batch flushed after it) is not: a later window may
        # hold entries at its instant.
        _feed(d, cols, start, len(times), complete=complete)
        if final:
            d.finish(horizon_ms)
        else:
            d.advance_to(until)
        outs.append(d.take_outputs())
    return outs, max([seen, *taken])


def _joined(parts: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Column parts (lists or arrays, every part with the same columns, at least one) as one
    frame, rows in part order: the parts of arrays concatenated as arrays, the parts of lists
    chained as one list per column (each column's type inferred once: a frame per part costs
    more than a quiet topic's dispatch, and an array in a list makes pandas infer it value by
    value)."""
    parts = [p for p in parts if _rows(p)] or list(parts[:1])
    columns = list(parts[0])
    arrays = [all(isinstance(v, np.ndarray) for v in p.values()) for p in parts]
    listed = [p for p, a in zip(parts, arrays, strict=True) if not a]
    inferred = pd.DataFrame({c: list(chain.from_iterable(_values(p[c]) for p in listed))
                             for c in columns})
    if all(arrays) or not any(arrays):
        return (inferred if listed else
                pd.DataFrame({c: np.concatenate([p[c] for p in parts]) for c in columns},
                             copy=False))
    # both kinds: the array parts' rows, then the list parts', put back in part order
    position = np.concatenate([np.repeat([i for i, a in enumerate(arrays) if a is kind],
                                         [_rows(p) for p, a in zip(parts, arrays, strict=True)
                                          if a is kind]) for kind in (True, False)])
    order = np.argsort(position, kind="stable")
    return pd.DataFrame({c: np.concatenate([*(p[c] for p, a in zip(parts, arrays, strict=True)
                                              if a), inferred[c].to_numpy()])[order]
                         for c in columns}, copy=False)


def _rows(part: Mapping[str, Any]) -> int:
    return len(next(iter(part.values()))) if part else 0


def _values(column: Any) -> Any:
    """A column part's values as Python objects (an array's NumPy scalars would make pandas'
    type inference slow)."""
    return column.tolist() if isinstance(column, np.ndarray) else column


def _dispatch_tables(frames: Mapping[str, pd.DataFrame],
                     speed: float) -> dict[str, pd.DataFrame]:
    """The dispatchers' outputs (:data:`_DISPATCH_OUTPUTS`, with ``topic``) as the tables'
    frames by ``_kind`` (:data:`DISPATCH_TABLES`): times as UTC timestamps and durations as ms,
    both in log time."""
    window = {"window_start_ms": "window_start", "window_end_ms": "window_end"}
    drains = frames["segment_drains"]
    drains["drain_ms"] = (drains["drain_ms"].astype("float64") * speed).round()
    # the ms columns stay: the reindex to the tables' columns drops them, in its one copy
    result = {
        "dispatch": _times(frames["dispatch"], speed, {"publish_time_ms": "publish_time",
                                                      "dispatch_time_ms": "dispatch_time",
                                                      "ack_time_ms": "ack_time"}, drop=False),
        "consumer_load": _times(frames["consumer_load"], speed, window, drop=False),
        "handoff": _times(frames["handoffs"], speed, {"withheld_from_ms": "withheld_from",
                                                      "withheld_until_ms": "withheld_until"},
                          drop=False),
        "window_stats": _times(frames["window_stats"], speed, window, drop=False),
        "segment_drain": _times(drains, speed, {"sealed_at_ms": "sealed_at",
                                                "drained_at_ms": "drained_at"}, drop=False),
    }
    dispatch = result["dispatch"]
    for c in _DISPATCH_STRINGS:  # the dispatchers' object strings: coded for the table's file
        if c in dispatch.columns and dispatch[c].dtype == object:
            dispatch[c] = strings_coded(dispatch[c].to_numpy())
    return {k: selected(df, table_columns(DISPATCH_TABLES[k])) for k, df in result.items()}


_DISPATCH_STRINGS = ("subscription", "producer_name", "consumer_name")
"""``dispatch`` columns of a few distinct strings (a row's topic is coded as it is made)."""


def strings_coded(values: npt.NDArray[Any]) -> pd.api.extensions.ExtensionArray:
    """An object array of strings (``None`` / NaN = null) as an Arrow-backed column of
    :func:`coded` strings (``pd.ArrowDtype`` of a dictionary): ``pd.factorize`` of the
    objects (fast when they repeat: each string's hash is cached) instead of converting each
    to Arrow and hashing it again in the Parquet writer (with the coded topic, the 10 M
    bench's dispatch with its file writes: 7.2 → 6.1-6.6 CPU s)."""
    codes, uniques = pd.factorize(values)
    return pd.arrays.ArrowExtensionArray(pa.DictionaryArray.from_arrays(
        pa.array(codes.astype(np.int32), mask=codes < 0), pa.array(list(uniques), pa.string())))


def selected(df: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``df.reindex(columns=columns)`` (a column ``df`` lacks is all nulls) without copying
    the columns it has: a new frame over the same arrays, not consolidated (a reindex copies
    every column the dispatch tables keep)."""
    if not set(columns) <= set(df.columns):
        return df.reindex(columns=columns)
    return pd.DataFrame({c: df[c] for c in columns}, copy=False)


def _feed(d: Any, cols: Mapping[str, npt.NDArray[Any]], start: int, stop: int,
          complete: bool = False) -> None:
    """Entries ``[start, stop)`` of ``cols`` to dispatcher ``d`` (nothing for none);
    ``complete``: ``on_entries``' (no later input at the last entries' instant)."""
    if stop > start:
        d.on_entries(*(cols[c][start:stop] for c in ("emu_publish_ms", "segment_id",
                                                     "entry_hash_min", "num_messages",
                                                     "payload_bytes", "producer_name",
                                                     "entry_id")), complete=complete)


# ---- one topic's window: control plane → batching → dispatch -------------------------------


@dataclass
class TopicResult:
    """One topic's window through all three stages (:func:`topic_group`).

    ``controller``: the advanced controller, its decisions and samples not yet taken (the driver
    takes them with :func:`control_outputs`); ``batching``: the new batching state blob
    (:class:`BatchingState`); ``dispatch``: the new dispatch state blob (``None`` while
    the topic has no layout); ``frames``: output rows by ``_kind``
    (:data:`pipelines.storage.frames.STAGE_KINDS`)."""

    controller: TopicController
    batching: bytes
    dispatch: bytes | None
    frames: dict[str, Any]  # pandas frames; ``msg`` a pyarrow Table (:func:`batch_topic`)
    seconds: dict[str, float] = field(default_factory=dict)  # per stage (wall, this task)


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


@dataclass(frozen=True)
class StageWindow:
    """One window of a finalization (:mod:`pipelines.spark.emulation`): staged messages with
    ``lo_ms <= event_ms < hi_ms`` (emulated ms; ``None`` = unbounded), ``final`` = end of
    input (its ``hi_ms``: the log's last message + 1, where every topic ends)."""

    lo_ms: int | None
    hi_ms: int | None
    final: bool

