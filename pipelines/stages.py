"""Thin Spark stages around ``pipelines.core``: each is one ``groupBy(...).applyInPandas`` over a
finalized event-time window, with the per-group emulation state passed in and handed back.

A stage's pandas function returns the group's message rows plus one extra row
(``_kind = "state"``) whose ``_blob`` holds the pickled new state and the group's side outputs
(decisions, samples, entries, dispatch rows). The driver collects only those rows — one per
group, bounded by groups, never by messages — and the message rows stay distributed.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipelines.config import ReplayConfig
from pipelines.core.batching import BatchingConfig, Entries, ProducerBatcher
from pipelines.core.controller import (
    ConsumerSpec,
    ControllerSettings,
    SubscriptionSpec,
    SubscriptionType,
    TopicController,
    segment_rows,
)
from pipelines.core.layout import SegmentLayout, change_times, layout_as_of

KIND, BLOB = "_kind", "_blob"
SORT_KEYS = ["event_ms", "producer_name", "_seq_sort", "order_key"]


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
        count from it, in log time)."""
        speed = cfg.replay.speed
        first_log_ms = int((first_event_ms or 0) * speed)
        subs, caps = [], {}
        for sub in cfg.subscriptions:
            consumers = []
            for c in sub.consumers:
                leave = c.leave_ms(first_log_ms)
                consumers.append(ConsumerSpec(
                    str(c.name), int(c.join_ms(first_log_ms) / speed),
                    None if leave is None else int(leave / speed)))
                caps[(sub.name, str(c.name))] = (
                    None if c.capacity_msg_per_s is None else c.capacity_msg_per_s * speed,
                    int(c.ack_delay_ms / speed))
            subs.append(SubscriptionSpec(sub.name, SubscriptionType(str(sub.type).lower()),
                                         tuple(consumers)))
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


def _with_state_columns(schema: T.StructType, extra: list[T.StructField]) -> T.StructType:
    fields = [*schema.fields, *extra, T.StructField(KIND, T.StringType()),
              T.StructField(BLOB, T.BinaryType())]
    return T.StructType(fields)


def _with_state_row(rows: pd.DataFrame, columns: list[str], key: Mapping[str, Any],
                    blob: bytes) -> pd.DataFrame:
    """``rows`` (reindexed to ``columns``) followed by the group's state row."""
    rows = rows.reindex(columns=columns).astype(object)
    state = {c: None for c in columns}
    state.update(key)
    state[KIND], state[BLOB] = "state", blob
    rows.loc[len(rows)] = state
    return rows


def _collect_states(out: DataFrame) -> list[Any]:
    rows = out.where(F.col(KIND) == "state").select(BLOB).collect()
    return [pickle.loads(r[BLOB]) for r in rows]


def _sorted(pdf: pd.DataFrame) -> pd.DataFrame:
    pdf = pdf.assign(_seq_sort=pdf["sequence_id"].fillna(-1))
    return pdf.sort_values(SORT_KEYS, kind="stable").drop(columns="_seq_sort").reset_index(
        drop=True)


# ---- control plane -----------------------------------------------------------------------------


@dataclass
class ControlResult:
    states: dict[str, bytes]
    layouts: dict[str, SegmentLayout]
    decisions: pd.DataFrame
    samples: pd.DataFrame
    segments: pd.DataFrame


def control_plane(msgs: DataFrame, states: Mapping[str, bytes], settings: StageSettings,
                  horizon_ms: int | None, final: bool) -> tuple[DataFrame, ControlResult]:
    """Per topic: route the window's messages and run the controller (``pipelines.core.
    controller``). Returns the routed messages (input columns + ``segment_id``,
    ``bucket_index``, ``layout_epoch``) and the driver-side results."""
    extra = [T.StructField("segment_id", T.LongType()), T.StructField("bucket_index",
                                                                       T.IntegerType()),
             T.StructField("layout_epoch", T.LongType())]
    schema = _with_state_columns(msgs.schema, extra)
    columns = schema.fieldNames()
    frozen = dict(states)

    def fn(key: tuple[Any, ...], pdf: pd.DataFrame) -> pd.DataFrame:
        topic = key[0]
        ctl = _controller(topic, frozen.get(topic), settings)
        pdf = _sorted(pdf)
        hi = horizon_ms if horizon_ms is not None else int(pdf["event_ms"].max()) + 1
        routed = ctl.advance(pdf["event_ms"].to_numpy(np.int64),
                             pdf["segment_hash"].fillna(-1).to_numpy(np.int64),
                             pdf["hash_b"].fillna(-1).to_numpy(np.int64),
                             pdf["payload_size"].to_numpy(np.int64),
                             pdf["producer_name"].tolist(), hi)
        if final:
            ctl.finish()
        pdf = pdf.assign(segment_id=routed.segment_id, bucket_index=routed.bucket_index,
                         layout_epoch=routed.layout_epoch, **{KIND: "msg", BLOB: None})
        return _with_state_row(pdf, columns, {"topic": topic}, pickle.dumps((topic, ctl)))

    out = msgs.groupBy("topic").applyInPandas(fn, schema).persist()
    controllers = {t: c for t, c in _collect_states(out)}
    # Topics without messages in this window still move through time (ticks, merges).
    for topic, blob in frozen.items():
        if topic not in controllers:
            ctl = pickle.loads(blob)
            if horizon_ms is not None:
                ctl.advance(np.empty(0, np.int64), np.empty(0, np.int64),
                            np.empty(0, np.int64), np.empty(0, np.int64), [], horizon_ms)
            if final:
                ctl.finish()
            controllers[topic] = ctl
    decisions, samples, segments = [], [], []
    for topic, ctl in sorted(controllers.items()):
        d, s = ctl.take_outputs()
        decisions += [{"topic": topic, **r} for r in d]
        samples += [{"topic": topic, **r} for r in s]
        if ctl.layout is not None:
            segments += [{"topic": topic, **r} for r in segment_rows(ctl.layout)]
    result = ControlResult(
        states={t: pickle.dumps(c) for t, c in controllers.items()},
        layouts={t: c.layout for t, c in controllers.items() if c.layout is not None},
        decisions=_times(pd.DataFrame(decisions), settings.speed,
                         {"eval_time_ms": "eval_time"}),
        samples=_times(pd.DataFrame(samples), settings.speed,
                       {"sample_time_ms": "sample_time", "modified_at_ms": "modified_at"}),
        segments=_times(pd.DataFrame(segments), settings.speed,
                        {"created_at_ms": "created_at", "sealed_at_ms": "sealed_at"}),
    )
    routed = out.where(F.col(KIND) == "msg").drop(KIND, BLOB)
    return routed, result


def _controller(topic: str, blob: bytes | None, settings: StageSettings) -> TopicController:
    if blob is not None:
        ctl: TopicController = pickle.loads(blob)
        return ctl
    return TopicController(topic, settings.controller_settings(topic), settings.subscriptions)


def _times(df: pd.DataFrame, speed: float, renames: Mapping[str, str]) -> pd.DataFrame:
    """Emulated-clock ms columns → UTC timestamps in log time (× speed)."""
    for src, dst in renames.items():
        if src in df.columns:
            ms = pd.to_numeric(df[src], errors="coerce") * speed
            df[dst] = pd.to_datetime(ms.round(), unit="ms", utc=True)
            df = df.drop(columns=src)
    return df


# ---- data plane: bucketed batching per (topic, producer) -----------------------------------


@dataclass
class ProducerState:
    batcher: ProducerBatcher
    next_sequence_id: int = 0
    pending: pd.DataFrame | None = None  # messages whose entry is still open, by ordinal


@dataclass
class DataResult:
    states: dict[tuple[str, str], bytes]
    entries: pd.DataFrame


MESSAGE_COLUMNS = ["topic", "key", "producer_name", "sequence_id", "publish_time",
                   "payload_size", "hash32", "segment_hash", "hash_b", "segment_id",
                   "bucket_index", "layout_epoch"]


def data_plane(routed: DataFrame, states: Mapping[tuple[str, str], bytes],
               settings: StageSettings, layouts: Mapping[str, SegmentLayout],
               horizon_ms: int | None, final: bool) -> tuple[DataFrame, DataResult]:
    """Per (topic, producer): assign default sequence ids, batch with the producer's per-segment
    containers (``pipelines.core.batching``), flush a segment's container when it is sealed.
    Returns the ``messages`` rows whose entry closed (with ``entry_id``) and the entries."""
    base = T.StructType([routed.schema[c] for c in MESSAGE_COLUMNS])
    schema = _with_state_columns(base, [T.StructField("entry_id", T.LongType())])
    columns = schema.fieldNames()
    frozen = dict(states)
    bcfg = settings.batching()
    routed_dtypes = {"event_ms": "int64", "sequence_id": "Int64", "payload_size": "int64",
                     "segment_id": "int64", "hash_b": "float64"}
    seal_times = {t: _seal_times(layout) for t, layout in layouts.items()}
    splits = {t: {sid: list(s.bucket_splits) for sid, s in layout.segments.items()}
              for t, layout in layouts.items()}

    def fn(key: tuple[Any, ...], pdf: pd.DataFrame) -> pd.DataFrame:
        topic, producer = key
        blob = frozen.get((topic, producer))
        st = pickle.loads(blob) if blob is not None else ProducerState(ProducerBatcher(bcfg))
        pdf = _sorted(pdf)
        missing = pdf["sequence_id"].isna()
        pdf.loc[missing, "sequence_id"] = st.next_sequence_id + np.arange(int(missing.sum()))
        pdf["sequence_id"] = pdf["sequence_id"].astype("int64")
        st.next_sequence_id = max(st.next_sequence_id, int(pdf["sequence_id"].max()) + 1)
        emitted, closed = _batch(st, pdf, bcfg, seal_times.get(topic, []), splits[topic],
                                 horizon_ms, final)
        rows = closed.assign(**{KIND: "msg", BLOB: None})
        ent = emitted.columns() if len(emitted) else {}
        return _with_state_row(rows, columns, {"topic": topic, "producer_name": producer},
                               pickle.dumps(((topic, producer), st, ent)))

    out = routed.groupBy("topic", "producer_name").applyInPandas(fn, schema).persist()
    new_states = dict(frozen)
    entries, seen = [], set()
    for key, st, ent in _collect_states(out):
        seen.add(key)
        new_states[key] = pickle.dumps(st)
        if ent:
            entries.append(pd.DataFrame(ent).assign(topic=key[0], producer_name=key[1]))
    # Producers without messages in this window: fire their due timers (or flush at the end)
    # on the driver, so entries reach dispatch in publish-time order. Only producers with open
    # batches need it, and those are bounded by open batches.
    leftovers = []
    empty = pd.DataFrame({c: pd.Series(dtype=routed_dtypes.get(c, "object"))
                          for c in [*MESSAGE_COLUMNS, "event_ms", "order_key"]})
    for key, blob in frozen.items():
        if key in seen:
            continue
        st = pickle.loads(blob)
        if st.batcher.open_messages == 0:
            continue
        emitted, closed = _batch(st, empty, bcfg, seal_times.get(key[0], []), splits[key[0]],
                                 horizon_ms, final)
        new_states[key] = pickle.dumps(st)
        if len(emitted):
            entries.append(pd.DataFrame(emitted.columns()).assign(topic=key[0],
                                                                   producer_name=key[1]))
        leftovers.append(closed)
    messages = out.where(F.col(KIND) == "msg").drop(KIND, BLOB)
    if leftovers and sum(len(x) for x in leftovers):
        extra = pd.concat(leftovers, ignore_index=True)[[*MESSAGE_COLUMNS, "entry_id"]]
        messages = messages.unionByName(
            routed.sparkSession.createDataFrame(extra, schema=messages.schema))
    return messages, DataResult(new_states, _entries_frame(entries, settings.speed))


def _seal_times(layout: SegmentLayout) -> list[tuple[int, list[int]]]:
    by_time: dict[int, list[int]] = {}
    for sid, s in layout.segments.items():
        if not s.is_active:
            by_time.setdefault(s.sealed_at_ms, []).append(sid)
    return sorted(by_time.items())


def _batch(st: ProducerState, pdf: pd.DataFrame, bcfg: BatchingConfig,
           seals: list[tuple[int, list[int]]], splits: Mapping[int, list[int]],
           horizon_ms: int | None, final: bool) -> tuple[Entries, pd.DataFrame]:
    """Run one producer's window through its batcher; returns (entries, closed message rows)."""
    b = st.batcher
    ev = pdf["event_ms"].to_numpy(np.int64)
    key_id = np.where(pdf["key"].isna(), -1,
                      pd.util.hash_array(pdf["key"].fillna("").to_numpy(object)) >> np.uint64(1)
                      ).astype(np.int64)
    parts: list[Entries] = []
    first_ordinal = b.messages_added
    start = 0
    for t, sealed in seals:
        if t < b.clock_ms or (horizon_ms is not None and t >= horizon_ms):
            continue
        stop = int(np.searchsorted(ev, t, side="left"))
        parts.append(_add(b, pdf, start, stop, key_id, splits))
        start = stop
        open_sealed = [s for s in sealed if s in b.open_segments]
        if open_sealed:
            parts.append(b.flush(t, "segment_sealed", open_sealed))
    parts.append(_add(b, pdf, start, len(pdf), key_id, splits))
    if final:
        parts.append(b.flush(max(b.clock_ms, int(ev[-1]) if len(ev) else b.clock_ms),
                             "end_of_input"))
    elif horizon_ms is not None:
        parts.append(b.advance_to(horizon_ms))
    emitted = Entries.concat(parts)
    # Message → entry mapping: this window's messages plus those carried from earlier windows.
    pdf = pdf[MESSAGE_COLUMNS].assign(_ordinal=np.arange(first_ordinal, first_ordinal + len(pdf)))
    pending = pdf if st.pending is None else pd.concat([st.pending, pdf], ignore_index=True)
    mapping = _entry_mapping(parts)
    pending = pending.assign(entry_id=pending["_ordinal"].map(mapping))
    closed = pending[pending["entry_id"].notna()]
    st.pending = pending[pending["entry_id"].isna()].drop(columns="entry_id")
    closed = closed.drop(columns="_ordinal").assign(entry_id=closed["entry_id"].astype("int64"))
    return emitted, closed


def _add(b: ProducerBatcher, pdf: pd.DataFrame, start: int, stop: int,
         key_id: np.ndarray, splits: Mapping[int, list[int]]) -> Entries:
    sl = slice(start, stop)
    seg = pdf["segment_id"].to_numpy(np.int64)[sl]
    return b.add_messages(pdf["event_ms"].to_numpy(np.int64)[sl],
                          pdf["sequence_id"].to_numpy(np.int64)[sl], seg,
                          pdf["hash_b"].fillna(0).to_numpy(np.int64)[sl],
                          pdf["payload_size"].to_numpy(np.int64)[sl], key_id[sl],
                          {int(s): splits[int(s)] for s in np.unique(seg)})


def _entry_mapping(parts: list[Entries]) -> dict[int, int]:
    mapping: dict[int, int] = {}
    for e in parts:
        seqs = np.asarray(e.message_entry_seq)
        for i in np.nonzero(seqs >= 0)[0]:
            mapping[int(e.first_ordinal + i)] = int(seqs[i])
        for o, s in zip(np.asarray(e.carried_ordinal), np.asarray(e.carried_entry_seq),
                        strict=True):
            mapping[int(o)] = int(s)
    return mapping


def _entries_frame(parts: list[pd.DataFrame], speed: float) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame()
    df = pd.concat(parts, ignore_index=True).rename(columns={"entry_seq": "entry_id"})
    df["emu_publish_ms"] = df["publish_time_ms"]  # dispatch works on the emulated clock
    df = _times(df, speed, {"open_time_ms": "open_time", "publish_time_ms": "publish_time"})
    return df.sort_values(["emu_publish_ms", "topic", "producer_name", "entry_id"],
                          kind="stable").reset_index(drop=True)


# ---- dispatch per topic ---------------------------------------------------------------------


@dataclass
class DispatchResult:
    states: dict[str, bytes]
    dispatch: pd.DataFrame
    consumer_load: pd.DataFrame
    handoffs: pd.DataFrame


def dispatch(entries: pd.DataFrame, states: Mapping[str, bytes], settings: StageSettings,
             layouts: Mapping[str, SegmentLayout], horizon_ms: int | None,
             final: bool) -> DispatchResult:
    """Per topic and subscription: feed the window's entries (publish-time order) and layout
    changes to ``pipelines.core.dispatch.SubscriptionDispatcher``; rows come back through the
    per-group state row like the other stages."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    topics = sorted(set(layouts))
    cols = ["topic", "producer_name", "segment_id", "entry_id", "entry_hash_min",
            "num_messages", "payload_bytes", "emu_publish_ms"]
    pdf = entries[cols] if len(entries) else pd.DataFrame({c: [] for c in cols})
    # One marker row per topic so topics without entries in the window still advance.
    markers = pd.DataFrame({"topic": topics})
    data = pd.concat([pdf.assign(_marker=False), markers.assign(_marker=True)],
                     ignore_index=True)
    data = data.astype({"segment_id": "float64", "entry_id": "float64",
                        "entry_hash_min": "float64", "num_messages": "float64",
                        "payload_bytes": "float64", "emu_publish_ms": "float64"})
    sdf = spark.createDataFrame(data)
    frozen = dict(states)
    schema = T.StructType([T.StructField("topic", T.StringType()),
                           T.StructField(BLOB, T.BinaryType())])
    window_ms = int(settings.config.replay.consumer_window_s * 1000 / settings.speed)

    def fn(key: tuple[Any, ...], g: pd.DataFrame) -> pd.DataFrame:
        topic = key[0]
        layout = layouts[topic]
        blob = frozen.get(topic)
        disp, seen = (pickle.loads(blob) if blob is not None
                      else (_dispatchers(settings, window_ms), -1))
        g = g[~g["_marker"]].sort_values(["emu_publish_ms", "producer_name", "entry_id"],
                                         kind="stable")
        times = g["emu_publish_ms"].to_numpy(np.int64)
        changes = [t for t in [layout.segments[min(layout.segments)].created_at_ms,
                               *change_times(layout)] if t > seen]
        hi = horizon_ms if horizon_ms is not None else max([seen, *changes,
                                                            *times.tolist()]) + 1
        rows: dict[str, list[pd.DataFrame]] = {"dispatch": [], "consumer_load": [],
                                               "handoffs": []}
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
                rows[table].append(pd.DataFrame(out.columns(table)))
        new_seen = max([seen, *[c for c in changes if c < hi]])
        result = {t: pd.concat(v, ignore_index=True) for t, v in rows.items()}
        return pd.DataFrame({"topic": [topic],
                             BLOB: [pickle.dumps((topic, (disp, new_seen), result))]})

    out = sdf.groupBy("topic").applyInPandas(fn, schema).collect()
    new_states = dict(frozen)
    parts: dict[str, list[pd.DataFrame]] = {"dispatch": [], "consumer_load": [], "handoffs": []}
    for r in out:
        topic, st, result = pickle.loads(r[BLOB])
        new_states[topic] = pickle.dumps(st)
        for table, df in result.items():
            if len(df):
                parts[table].append(df.assign(topic=topic))
    frames = {t: pd.concat(v, ignore_index=True) if v else pd.DataFrame()
              for t, v in parts.items()}
    return DispatchResult(
        new_states,
        _times(frames["dispatch"], settings.speed,
               {"dispatch_time_ms": "dispatch_time", "ack_time_ms": "ack_time"}),
        _times(frames["consumer_load"], settings.speed, {"window_start_ms": "window_start"}),
        _times(frames["handoffs"], settings.speed, {"withheld_from_ms": "withheld_from",
                                                    "withheld_until_ms": "withheld_until"}),
    )


def _dispatchers(settings: StageSettings, window_ms: int) -> list[Any]:
    from pipelines.core.dispatch import ConsumerSpec as DConsumer
    from pipelines.core.dispatch import SubscriptionDispatcher

    out = []
    for sub in settings.subscriptions:
        consumers = []
        for c in sub.consumers:
            cap, ack = settings.capacities.get((sub.name, c.name), (None, 0))
            consumers.append(DConsumer(c.name, c.join_ms, c.leave_ms, cap, ack))
        out.append(SubscriptionDispatcher(sub.name, sub.type.value, consumers, window_ms))
    return out


def _feed(d: Any, g: pd.DataFrame) -> None:
    if len(g):
        d.on_entries(g["emu_publish_ms"].to_numpy(np.int64), g["segment_id"].to_numpy(np.int64),
                     g["entry_hash_min"].to_numpy(np.int64), g["num_messages"].to_numpy(np.int64),
                     g["payload_bytes"].to_numpy(np.int64), g["producer_name"].tolist(),
                     g["entry_id"].to_numpy(np.int64))
