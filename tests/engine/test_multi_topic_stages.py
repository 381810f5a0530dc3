"""The multi-topic stages (``control_topics``, ``batch_topics``, ``dispatch_topics``: one pass over
a topic bin's window, as the Spark operators call them) give, topic by topic, exactly what the
per-topic stages give (``control_group``, ``batch_topic``, ``dispatch_group``: the local engine's),
window after window with the state carried, seals and re-sends included."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipelines.contract.config import load_config
from pipelines.engine import stages
from pipelines.storage.staging import arrow_strings

TOPICS = {"a-hot": 40, "b-quiet": 1, "c-mid": 8, "d-keyless": 5}
"""Topic → messages per second (emulated clock, speed 1)."""
SETS = ["policy.split_msg_rate_in=10", "policy.merge_msg_rate_in=2",
        "policy.merge_window_s=20", "policy.merge_cooldown_s=20",
        "batching.max_publish_delay_ms=300", "batching.max_messages=7"]
START_MS = 1_700_000_000_000
SPAN_MS = 180_000


def _messages(seed: int = 5) -> pd.DataFrame:
    """Accepted messages of :data:`TOPICS` (2-3 producers each, Zipf-ish keys, some keyless;
    ``d-keyless`` all keyless, without sequence ids), as the staged input reads them."""
    rng = np.random.default_rng(seed)
    parts = []
    for i, (topic, rate) in enumerate(TOPICS.items()):
        n = rate * SPAN_MS // 1000
        event = np.sort(START_MS + rng.integers(0, SPAN_MS, n))
        keyed = rng.random(n) > (1.0 if topic == "d-keyless" else 0.1)
        key_no = rng.zipf(1.3, n) % 50
        producer = rng.integers(0, 2 + i % 2, n)
        seg = rng.integers(0, 1 << 16, 50)[key_no]
        parts.append(pa.table({
            "topic": [topic] * n,
            "key": pa.array([f"k{k}" if kd else None
                             for k, kd in zip(key_no, keyed, strict=True)], pa.string()),
            "producer_name": [f"p{p}" for p in producer],
            "sequence_id": (pa.nulls(n, pa.int64()) if topic == "d-keyless"
                            else pa.array(np.arange(n), pa.int64())),
            "publish_time": pa.array(event * 1000, pa.timestamp("us", tz="UTC")),
            "payload_size": rng.integers(10, 3000, n),
            "event_ms": event,
            "hash32": pa.array(np.where(keyed, seg * 7, 0), pa.int64()).to_pylist(),
            "segment_hash": pa.array(np.where(keyed, seg, -1)).cast(pa.int32()),
            "hash_b": pa.array(np.where(keyed, (seg * 31) % (1 << 16), -1)).cast(pa.int32()),
        }))
    table = pa.concat_tables(parts)
    df = table.to_pandas(types_mapper=arrow_strings)
    for c in ("segment_hash", "hash_b", "hash32"):  # null for keyless, as staged
        df[c] = df[c].astype("Int64").mask(df["key"].isna())
    return df.sample(frac=1.0, random_state=seed).reset_index(drop=True)  # any order


def _windows(cuts: list[int]) -> list[tuple[int | None, int | None, bool]]:
    bounds = [None, *(START_MS + c for c in cuts), None]
    return [(bounds[i], bounds[i + 1], i == len(bounds) - 2) for i in range(len(bounds) - 1)]


def _window_rows(msgs: pd.DataFrame, lo: int | None, hi: int | None) -> pd.DataFrame:
    keep = np.ones(len(msgs), dtype=bool)
    if lo is not None:
        keep &= msgs["event_ms"].to_numpy() >= lo
    if hi is not None:
        keep &= msgs["event_ms"].to_numpy() < hi
    return msgs[keep].reset_index(drop=True)


def _per_topic(msgs: pd.DataFrame, settings: stages.StageSettings,
               windows: list[tuple[int | None, int | None, bool]]) -> list[dict[str, object]]:
    """Each window through the per-topic stages, topic by topic (name order): the topics with
    messages in it, every topic in the final one."""
    ctl_s: dict[str, bytes | None] = {}
    bat_s: dict[str, bytes | None] = {}
    dis_s: dict[str, bytes | None] = {}
    out = []
    for lo, hi, final in windows:
        rows = _window_rows(msgs, lo, hi)
        active = set(rows["topic"].astype(object))
        topics = sorted(active | (set(ctl_s) if final else set()))
        routed, msg, ent, disp = [], [], [], {}
        for t in topics:
            part = rows[rows["topic"] == t]
            r, ctl = stages.control_group(t, part, ctl_s.get(t), settings, hi, final)
            ctl_s[t] = pickle.dumps(ctl)
            routed.append(r)
            m, e, bat_s[t] = stages.batch_topic(r, bat_s.get(t), settings.batching(),
                                                ctl.layout, hi, final)
            msg.append(m)
            e = stages.entry_frame(t, e, settings.speed)
            ent.append(e)
            if ctl.layout is not None and (len(e) or final):
                frames, dis_s[t] = stages.dispatch_group(t, e, dis_s.get(t), settings,
                                                         ctl.layout, hi, final)
                for k, f in frames.items():
                    disp.setdefault(k, []).append(f)
        out.append({"routed": pd.concat(routed, ignore_index=True),
                    "messages": pa.concat_tables(msg), "entries": pd.concat(ent, ignore_index=True),
                    **{k: pd.concat(v, ignore_index=True) for k, v in disp.items()}})
    return out


def _multi_topic(msgs: pd.DataFrame, settings: stages.StageSettings,
                 windows: list[tuple[int | None, int | None, bool]]) -> list[dict[str, object]]:
    """Each window through the multi-topic stages, all its topics in one call each, as the
    Spark operators call them (no state kept after the final window)."""
    ctl_s: dict[str, bytes | None] = {}
    bat_s: dict[str, bytes | None] = {}
    dis_s: dict[str, bytes | None] = {}
    out = []
    for lo, hi, final in windows:
        rows = _window_rows(msgs, lo, hi)
        active = set(rows["topic"].astype(object))
        topics = sorted(active | (set(ctl_s) if final else set()))
        routed, controllers = stages.control_topics(rows, {t: ctl_s.get(t) for t in topics},
                                                    settings, hi, final)
        ctl_s.update(stages.control_outputs(controllers, settings.speed, not final).states)
        layouts = {t: c.layout for t, c in controllers.items()}
        msg, ent, blobs = stages.batch_topics(routed, {t: bat_s.get(t) for t in topics},
                                              settings.batching(), layouts, hi, final,
                                              keep_state=not final)
        bat_s.update(blobs)
        ent = stages.entry_frame(None, ent, settings.speed)
        fed = [t for t in topics if layouts[t] is not None
               and (final or (ent["topic"] == t).any())]
        frames, blobs = stages.dispatch_topics(  # a topic without state: None, new
            ent, {t: dis_s.get(t) for t in fed}, settings, {t: layouts[t] for t in fed}, hi,
            final, keep_state=not final)
        dis_s.update(blobs)
        out.append({"routed": routed, "messages": msg, "entries": ent, **frames})
    return out


def _decoded(table: pa.Table) -> pa.Table:
    """``table`` with its coded strings (dictionaries, ``stages.coded``) as plain strings: the
    per-topic stages code each topic's rows apart, the multi-topic ones all at once."""
    return table.cast(pa.schema([f.with_type(f.type.value_type)
                                 if pa.types.is_dictionary(f.type) else f for f in table.schema]))


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its categorical strings (``stages.categorical``) as object strings: the
    per-topic entries are concatenated from topics with categories of their own."""
    return frame.apply(lambda c: c.astype(object) if isinstance(c.dtype, pd.CategoricalDtype)
                       else c)


@pytest.mark.parametrize("cuts", [[], [60_000, 61_000, 150_000], list(range(10_000, 180_000,
                                                                          25_000))],
                         ids=["one-window", "uneven-windows", "many-windows"])
def test_multi_topic_stages_equal_the_per_topic_stages(cuts: list[int]) -> None:
    settings = stages.StageSettings.from_config(load_config(None, SETS), START_MS)
    msgs = _messages()
    windows = _windows(cuts)
    want, got = _per_topic(msgs, settings, windows), _multi_topic(msgs, settings, windows)
    for w, g in zip(want, got, strict=True):
        assert set(w) <= set(g)
        pd.testing.assert_frame_equal(g["routed"], w["routed"])  # type: ignore[arg-type]
        assert _decoded(g["messages"]).equals(_decoded(w["messages"]))  # type: ignore[arg-type]
        pd.testing.assert_frame_equal(_plain(g["entries"]),  # type: ignore[arg-type]
                                      _plain(w["entries"]))  # type: ignore[arg-type]
        for kind in set(w) - {"routed", "messages", "entries"}:
            pd.testing.assert_frame_equal(g[kind], w[kind], check_dtype=False)  # type: ignore


def test_topics_and_producers_coded_as_staged_give_the_tables_of_strings() -> None:
    # the staged files are read with them as Categoricals (staging.CODED_COLUMNS), the local
    # engine hands them over as strings; open batches carried over many windows either way
    settings = stages.StageSettings.from_config(load_config(None, SETS), START_MS)
    msgs = _messages()
    coded = msgs.astype({"topic": "category", "producer_name": "category"})
    windows = _windows(list(range(10_000, 180_000, 25_000)))
    want, got = _multi_topic(msgs, settings, windows), _multi_topic(coded, settings, windows)
    for w, g in zip(want, got, strict=True):
        pd.testing.assert_frame_equal(_plain(g["routed"]),  # type: ignore[arg-type]
                                      w["routed"].astype(  # type: ignore[union-attr]
                                          {"topic": object, "producer_name": object}))
        assert _decoded(g["messages"]).equals(_decoded(w["messages"]))  # type: ignore[arg-type]
        for kind in set(w) - {"routed", "messages"}:
            pd.testing.assert_frame_equal(_plain(g[kind]), _plain(w[kind]))  # type: ignore


def test_the_workload_has_seals_resends_and_dispatch_in_several_topics() -> None:
    """The equality above covers layout changes and dispatch (not only quiet topics)."""
    settings = stages.StageSettings.from_config(load_config(None, SETS), START_MS)
    got = _multi_topic(_messages(), settings, _windows([60_000, 61_000, 150_000]))
    entries = pd.concat([g["entries"] for g in got])  # type: ignore[misc]
    messages = pa.concat_tables([g["messages"] for g in got])  # type: ignore[misc]
    assert entries["topic"].nunique() == len(TOPICS)
    assert messages.column("layout_epoch").to_pandas().max() > 0  # a layout changed
    dispatched = pd.concat([g["dispatch"] for g in got if "dispatch" in g])  # type: ignore
    assert dispatched["topic"].nunique() == len(TOPICS)


def test_no_topics_dispatch_nothing() -> None:
    settings = stages.StageSettings.from_config(load_config(None, SETS), START_MS)
    entries = pd.DataFrame({c: pd.Series(dtype=t) for c, t in [
        ("topic", object), ("producer_name", object), ("segment_id", "int64"),
        ("entry_id", "int64"), ("entry_hash_min", "int64"), ("num_messages", "int64"),
        ("payload_bytes", "int64"), ("emu_publish_ms", "int64")]})
    assert stages.dispatch_topics(entries, {}, settings, {}, None, True) == ({}, {})


def _two_subscriptions_entries() -> tuple[stages.StageSettings, list[str], dict, pd.DataFrame]:
    """Settings with two subscriptions (sub-stream: consumers a, b; sub-b: x), and the
    workload's topics, layouts and entries (one window, end of input)."""
    settings = stages.StageSettings.from_config(load_config(None, [
        *SETS, "subscriptions=[{name: sub-stream, consumers: [{name: a}, {name: b}]}, "
        "{name: sub-b, type: checkpoint, consumers: [{name: x}]}]"]), START_MS)
    msgs = _messages()
    topics = sorted(set(msgs["topic"].astype(object)))
    routed, ctls = stages.control_topics(msgs, dict.fromkeys(topics), settings, None, True)
    layouts = {t: c.layout for t, c in ctls.items()}
    _, ent, _ = stages.batch_topics(routed, dict.fromkeys(topics), settings.batching(),
                                    layouts, None, True)
    ent = stages.entry_frame(None, ent, settings.speed)
    return settings, topics, layouts, ent


def test_a_topic_without_state_gets_new_dispatchers_or_the_one_asked_for() -> None:
    """A ``None`` blob is :func:`stages.new_dispatchers` (or only its ``dispatcher``-th, as
    the operator keyed by dispatcher asks): the rows of their pickled blobs."""
    settings, topics, layouts, ent = _two_subscriptions_entries()
    assert len(stages.new_dispatchers(settings)) == 2
    for d in (None, 0, 1):
        fresh = (stages.new_dispatchers(settings) if d is None
                 else [stages.new_dispatchers(settings)[d]])
        want, _ = stages.dispatch_topics(ent, dict.fromkeys(topics, pickle.dumps((fresh, -1))),
                                         settings, layouts, None, True)
        got, _ = stages.dispatch_topics(ent, dict.fromkeys(topics), settings, layouts, None,
                                        True, dispatcher=d)
        assert set(got) == set(want)
        for kind, frame in want.items():
            pd.testing.assert_frame_equal(got[kind], frame)
        assert set(got["dispatch"]["subscription"]) == (
            {"sub-stream", "sub-b"} if d is None else {["sub-stream", "sub-b"][d]})


def test_the_final_window_makes_no_state_and_the_same_rows() -> None:
    """``keep_state=False`` (the operators' end of input) pickles nothing, rows unchanged."""
    settings = stages.StageSettings.from_config(load_config(None, SETS), START_MS)
    msgs = _messages()
    topics = sorted(set(msgs["topic"].astype(object)))
    routed, ctls = stages.control_topics(msgs, dict.fromkeys(topics), settings, None, True)
    layouts = {t: c.layout for t, c in ctls.items()}
    kept = stages.control_outputs(ctls, settings.speed)
    assert set(kept.states) == set(topics)
    assert stages.control_outputs(ctls, settings.speed, keep_state=False).states == {}
    batched = [stages.batch_topics(routed, dict.fromkeys(topics), settings.batching(), layouts,
                                   None, True, keep_state=keep) for keep in (True, False)]
    assert set(batched[0][2]) == set(topics) and batched[1][2] == {}
    assert batched[0][0].equals(batched[1][0])
    pd.testing.assert_frame_equal(batched[0][1], batched[1][1])
    ent = stages.entry_frame(None, batched[0][1], settings.speed)
    blob = pickle.dumps((stages.new_dispatchers(settings), -1))
    dispatched = [stages.dispatch_topics(ent, dict.fromkeys(topics, blob), settings, layouts,
                                         None, True, keep_state=keep) for keep in (True, False)]
    assert set(dispatched[0][1]) == set(topics) and dispatched[1][1] == {}
    for kind, frame in dispatched[0][0].items():
        pd.testing.assert_frame_equal(dispatched[1][0][kind], frame)


def test_an_entry_published_after_the_window_horizon_is_dispatched_as_in_one_window() -> None:
    """A batch flushed after its window's horizon (within max_publish_delay) is an entry
    published after it: the window's dispatchers are advanced to the horizon only (taking its
    instant in bulk raised "advance_to goes back before the horizon" when they were advanced to
    the horizon next), and the two windows dispatch every entry as one window does."""
    settings = stages.StageSettings.from_config(load_config(None, SETS), START_MS)
    hi = START_MS + 60_000
    rows = _window_rows(_messages(), None, hi)
    topics = sorted(set(rows["topic"].astype(object)))
    routed, controllers = stages.control_topics(rows, dict.fromkeys(topics), settings, hi, False)
    layouts = {t: c.layout for t, c in controllers.items()}
    _, ent, _ = stages.batch_topics(routed, dict.fromkeys(topics), settings.batching(), layouts,
                                    hi, False)
    ent = stages.entry_frame(None, ent, settings.speed)
    quiet = ent[ent["topic"] == "b-quiet"].reset_index(drop=True)
    assert quiet["emu_publish_ms"].iloc[-1] < hi
    quiet.loc[len(quiet) - 1, "emu_publish_ms"] = hi + 100  # flushed after the horizon
    layout = {"b-quiet": layouts["b-quiet"]}
    first, blobs = stages.dispatch_topics(quiet, {"b-quiet": None}, settings, layout, hi, False)
    last, _ = stages.dispatch_topics(quiet.iloc[:0], blobs, settings, layout, None, True)
    whole, _ = stages.dispatch_topics(quiet, {"b-quiet": None}, settings, layout, None, True)
    two = pd.concat([first["dispatch"], last["dispatch"]], ignore_index=True)
    pd.testing.assert_frame_equal(two, whole["dispatch"], check_dtype=False)


def test_entry_frame_names_the_close_reason_codes_as_a_categorical() -> None:
    entries = pd.DataFrame({
        "producer_name": ["p", "p", "q"], "segment_id": [0, 0, 1],
        "bucket_index": np.zeros(3, dtype=np.int32), "entry_seq": [0, 1, 0],
        "entry_hash_min": np.zeros(3, dtype=np.int32),
        "entry_hash_max": np.zeros(3, dtype=np.int32), "num_messages": [1, 2, 3],
        "payload_bytes": [10, 20, 30], "open_time_ms": [1000, 2000, 3000],
        "publish_time_ms": [1001, 2001, 3001],
        "close_reason": np.array([2, 0, 1], dtype=np.int8),  # core codes (CLOSE_REASONS)
        "first_sequence_id": [0, 1, 0], "last_sequence_id": [0, 2, 2]})
    frame = stages.entry_frame("t", entries, 1.0)
    assert isinstance(frame["close_reason"].dtype, pd.CategoricalDtype)
    assert frame["close_reason"].tolist() == ["max_delay", "max_messages", "max_bytes"]


def test_each_dispatch_row_names_the_subscription_of_its_consumer() -> None:
    """A ``dispatch`` row's subscription is coded from its dispatcher's part: rows of two
    subscriptions over several topics keep each consumer with its own subscription."""
    settings, topics, layouts, ent = _two_subscriptions_entries()
    got, _ = stages.dispatch_topics(ent, dict.fromkeys(topics), settings, layouts, None, True)
    pairs = got["dispatch"][["subscription", "consumer_name"]].astype(str)
    counts = pairs.value_counts().to_dict()
    assert set(counts) == {("sub-stream", "a"), ("sub-stream", "b"), ("sub-b", "x")}
    # every entry reaches each subscription once
    by_sub = pairs["subscription"].value_counts()
    assert by_sub["sub-stream"] == by_sub["sub-b"] == len(ent)


def test_an_error_of_the_key_statistics_thread_is_raised_by_control_topics(monkeypatch) -> None:
    # the key statistics run on a thread of their own while the topics are routed
    settings = stages.StageSettings.from_config(load_config(None, SETS), START_MS)
    msgs = _messages()

    def broken(*args, **kwargs):
        raise RuntimeError("key statistics failed")

    monkeypatch.setattr(stages, "update_many", broken)
    topics = sorted(msgs["topic"].unique())
    with pytest.raises(RuntimeError, match="key statistics failed"):
        stages.control_topics(msgs, dict.fromkeys(topics), settings, None, True)
