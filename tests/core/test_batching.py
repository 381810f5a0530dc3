"""Producer batch containers in event time (reference §7 bucketed batching, §3.4 entry routing)."""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.core.batching import (
    CLOSE_REASONS,
    BatchingConfig,
    BatchingMode,
    Entries,
    ProducerBatcher,
)
from pipelines.core.buckets import bucket_of, equal_width_splits

N4 = equal_width_splits(4)  # [16384, 32768, 49152]
SPLITS = {0: N4, 1: N4, 2: []}  # segment 2 has one bucket
B0, B1, B2, B3 = 0x0100, 0x4100, 0x8100, 0xC100  # one hash_b in each N=4 bucket


@dataclass(frozen=True)
class M:
    """One test message; ``seq`` defaults to its position in the list."""

    t: int
    h: int = B0
    size: int = 10
    seg: int = 0
    key: int = -1
    seq: int | None = None


def cfg(mode: str = "bucketed", max_messages: int = 1000, max_bytes: int = 131072,
        delay: int = 1) -> BatchingConfig:
    return BatchingConfig(mode=mode, max_messages=max_messages, max_bytes=max_bytes,
                          max_publish_delay_ms=delay)


def add(b: ProducerBatcher, msgs: list[M], first_seq: int = 0) -> Entries:
    seqs = [m.seq if m.seq is not None else first_seq + i for i, m in enumerate(msgs)]
    return b.add_messages([m.t for m in msgs], seqs, [m.seg for m in msgs], [m.h for m in msgs],
                          [m.size for m in msgs], [m.key for m in msgs], SPLITS)


def rows(e: Entries) -> list[tuple[int, int, int, str, int, int]]:
    """(segment, bucket, num_messages, close_reason, publish_time, last_sequence_id) per entry."""
    return [(int(s), int(b), int(n), str(r), int(p), int(q)) for s, b, n, r, p, q in zip(
        e.segment_id, e.bucket_index, e.num_messages, e.close_reason, e.publish_time_ms,
        e.last_sequence_id, strict=True)]


def run_all(msgs: list[M], config: BatchingConfig, end: int | None = None) -> Entries:
    """One chunk, then an end_of_input flush at ``end`` (default: last message time)."""
    b = ProducerBatcher(config)
    out = add(b, msgs)
    tail = b.flush(msgs[-1].t if end is None else end, "end_of_input")
    return Entries.concat([out, tail])


# ---------------------------------------------------------------------------------- config
def test_defaults_are_pulsar_v4_producer_defaults() -> None:
    c = BatchingConfig()
    assert (c.mode, c.max_messages, c.max_bytes, c.max_publish_delay_ms) == (
        "bucketed", 1000, 131072, 1)
    assert c.problems() == []


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"max_messages": 0}, "max_messages must be >= 1"),
    ({"max_bytes": 0}, "max_bytes must be >= 1"),
    ({"max_publish_delay_ms": 0}, "max_publish_delay_ms must be >= 1"),
    ({"mode": "per_key"}, "mode 'per_key' is not one of"),
    ({"max_messages": 2.5}, "max_messages must be an integer"),
])
def test_invalid_config_is_reported_and_rejected(kwargs: dict[str, object], fragment: str) -> None:
    c = BatchingConfig(**kwargs)  # type: ignore[arg-type]
    assert any(fragment in p for p in c.problems())
    with pytest.raises(ValueError, match="invalid batching config"):
        ProducerBatcher(c)


# ---------------------------------------------------------------------------------- bucketed
def test_fullness_is_aggregate_across_buckets() -> None:
    # 4 messages in 4 different buckets fill a max_messages=4 container although no bucket
    # holds more than one message.
    e = run_all([M(0, B0), M(0, B1), M(0, B2), M(0, B3)], cfg(max_messages=4))
    assert rows(e) == [(0, 0, 1, "max_messages", 0, 0), (0, 1, 1, "max_messages", 0, 1),
                       (0, 2, 1, "max_messages", 0, 2), (0, 3, 1, "max_messages", 0, 3)]


def test_aggregate_byte_fullness_across_buckets() -> None:
    e = run_all([M(0, B0, 40), M(0, B1, 60)], cfg(max_bytes=100))
    assert rows(e) == [(0, 0, 1, "max_bytes", 0, 0), (0, 1, 1, "max_bytes", 0, 1)]


@pytest.mark.parametrize(("trigger", "config", "msgs", "expected"), [
    ("full", cfg(max_messages=3), [M(0, B0), M(0, B1), M(0, B0), M(0, B2)],
     [(0, 1, 1, "max_messages", 0, 1), (0, 0, 2, "max_messages", 0, 2),
      (0, 2, 1, "end_of_input", 0, 3)]),
    ("timer", cfg(delay=5), [M(0, B0), M(1, B1), M(2, B0), M(5, B2)],
     [(0, 1, 1, "max_delay", 5, 1), (0, 0, 2, "max_delay", 5, 2),
      (0, 2, 1, "end_of_input", 5, 3)]),
])
def test_all_non_empty_buckets_are_emitted_together(trigger: str, config: BatchingConfig,
                                                    msgs: list[M], expected: list) -> None:
    assert rows(run_all(msgs, config)) == expected, trigger


def test_emission_order_is_by_highest_sequence_id() -> None:
    # bucket 2 holds seqs 0, 2; bucket 0 holds 1; bucket 1 holds 3 → order b0 (1), b2 (2), b1 (3)
    e = run_all([M(0, B2), M(0, B0), M(0, B2), M(0, B1)], cfg(max_messages=4))
    assert [int(b) for b in e.bucket_index] == [0, 2, 1]
    assert [int(s) for s in e.last_sequence_id] == [1, 2, 3]
    assert [int(s) for s in e.entry_seq] == [0, 1, 2]


def test_pre_add_byte_check_flushes_before_adding() -> None:
    # 60 + 50 > 100: the container is flushed at t=3 before the second message is added.
    e = run_all([M(0, B0, 60), M(0, B1, 30), M(3, B0, 50)], cfg(max_bytes=100, delay=10))
    assert rows(e) == [(0, 0, 1, "max_bytes", 3, 0), (0, 1, 1, "max_bytes", 3, 1),
                       (0, 0, 1, "end_of_input", 3, 2)]
    assert [int(x) for x in e.payload_bytes] == [60, 30, 50]


@pytest.mark.parametrize(("sizes", "expected"), [
    ([250], [(1, 250, "max_bytes")]),
    ([10, 250, 10], [(1, 10, "max_bytes"), (1, 250, "max_bytes"), (1, 10, "end_of_input")]),
])
def test_oversize_single_message_forms_its_own_entry(sizes: list[int], expected: list) -> None:
    e = run_all([M(0, B0, s) for s in sizes], cfg(max_bytes=100, delay=10))
    assert [(int(n), int(p), str(r)) for n, p, r in
            zip(e.num_messages, e.payload_bytes, e.close_reason, strict=True)] == expected


def test_keyless_message_hash_0_goes_to_bucket_0() -> None:
    e = run_all([M(0, 0), M(0, B3)], cfg())
    assert [(int(b), int(lo), int(hi)) for b, lo, hi in
            zip(e.bucket_index, e.entry_hash_min, e.entry_hash_max, strict=True)] == [
        (0, 0, 0), (3, B3, B3)]


def test_single_bucket_segment_gives_one_entry_per_flush() -> None:
    msgs = [M(0, h, seg=2) for h in (B0, B1, B2, B3, B0)] + [M(1, B3, seg=2)]
    e = run_all(msgs, cfg(max_messages=5))
    assert rows(e) == [(2, 0, 5, "max_messages", 0, 4), (2, 0, 1, "end_of_input", 1, 5)]
    assert (int(e.entry_hash_min[0]), int(e.entry_hash_max[0])) == (B0, B3)


def test_entry_hash_range_is_tightest_bound_of_its_messages() -> None:
    e = run_all([M(0, B1 + 7), M(0, B1 + 2), M(0, B1 + 30)], cfg())
    assert (int(e.entry_hash_min[0]), int(e.entry_hash_max[0])) == (B1 + 2, B1 + 30)


# ---------------------------------------------------------------------------------- other modes
def test_default_mode_entry_straddles_buckets_and_routes_by_min() -> None:
    e = run_all([M(0, B2), M(0, B0), M(0, B3)], cfg(mode="default"))
    assert rows(e) == [(0, 0, 3, "end_of_input", 0, 2)]
    assert (int(e.entry_hash_min[0]), int(e.entry_hash_max[0])) == (B0, B3)
    assert bucket_of(N4, int(e.entry_hash_min[0])) != bucket_of(N4, int(e.entry_hash_max[0]))


def test_key_based_one_entry_per_key_and_keyless_share_one() -> None:
    # keys 7, 9, keyless, 7, keyless — same bucket hash for all, so only the key separates them
    msgs = [M(0, B1, key=7), M(0, B1, key=9), M(0, 0, key=-1), M(0, B1, key=7), M(0, 0, key=-5)]
    e = run_all(msgs, cfg(mode="key_based"))
    assert [(int(n), int(q)) for n, q in zip(e.num_messages, e.last_sequence_id,
                                               strict=True)] == [(1, 1), (2, 3), (2, 4)]
    assert set(e.close_reason.tolist()) == {"end_of_input"}


def test_key_based_fullness_is_aggregate_across_keys() -> None:
    e = run_all([M(0, B1, key=k) for k in (1, 2, 3)], cfg(mode="key_based", max_messages=3))
    assert [str(r) for r in e.close_reason] == ["max_messages"] * 3


def test_key_based_requires_key_id() -> None:
    b = ProducerBatcher(cfg(mode="key_based"))
    with pytest.raises(ValueError, match="needs key_id"):
        b.add_messages([0], [0], [0], [B0], [1], None, SPLITS)


def test_disabled_mode_one_message_per_entry() -> None:
    b = ProducerBatcher(cfg(mode="disabled"))
    e = add(b, [M(0, B0), M(0, B2), M(4, B3)])
    assert rows(e) == [(0, 0, 1, "disabled", 0, 0), (0, 2, 1, "disabled", 0, 1),
                       (0, 3, 1, "disabled", 4, 2)]
    assert e.message_entry_seq.tolist() == [0, 1, 2]
    assert len(b.flush(5)) == 0


# ---------------------------------------------------------------------------------- timer
@pytest.mark.parametrize(("times", "delay", "end", "expected"), [
    # timer armed at 0 fires at 5: a message at 4 joins, a message at 5 finds it fired
    ([0, 4, 5], 5, 9, [(2, "max_delay", 0, 5), (1, "end_of_input", 5, 9)]),
    ([0, 4, 6], 5, 9, [(2, "max_delay", 0, 5), (1, "end_of_input", 6, 9)]),
    # default 1 ms: same-millisecond messages batch, the next millisecond fires the timer
    ([3, 3, 3, 4], 1, 4, [(3, "max_delay", 3, 4), (1, "end_of_input", 4, 4)]),
    # the timer is re-armed by the first message after a flush (10 → fires at 15)
    ([0, 10, 12, 15], 5, 15,
     [(1, "max_delay", 0, 5), (2, "max_delay", 10, 15), (1, "end_of_input", 15, 15)]),
    # a timer due by the end-of-input time fires as max_delay at its own fire time
    ([0], 5, 7, [(1, "max_delay", 0, 5)]),
])
def test_timer_fires_in_event_time(times: list[int], delay: int, end: int,
                                   expected: list) -> None:
    e = run_all([M(t) for t in times], cfg(delay=delay), end=end)
    assert [(int(n), str(r), int(o), int(p)) for n, r, o, p in zip(
        e.num_messages, e.close_reason, e.open_time_ms, e.publish_time_ms, strict=True)
    ] == expected


def test_advance_to_fires_only_due_timers() -> None:
    b = ProducerBatcher(cfg(delay=5))
    add(b, [M(0, B0), M(2, B1, seg=1)])
    assert len(b.advance_to(4)) == 0
    e = b.advance_to(5)
    assert rows(e) == [(0, 0, 1, "max_delay", 5, 0)]
    assert b.open_segments == [1]
    assert rows(b.advance_to(100)) == [(1, 1, 1, "max_delay", 7, 1)]


def test_message_of_another_segment_fires_due_timer_first() -> None:
    b = ProducerBatcher(cfg(delay=5))
    e = add(b, [M(0, B0, seg=0), M(6, B1, seg=1, size=10**6)])
    # seg 0's timer (5) fires before seg 1's oversize message closes its own entry at 6
    assert rows(e) == [(0, 0, 1, "max_delay", 5, 0), (1, 1, 1, "max_bytes", 6, 1)]


# ---------------------------------------------------------------------------------- segments
def test_per_segment_containers_are_independent() -> None:
    b = ProducerBatcher(cfg(max_messages=2, delay=5))
    e = add(b, [M(0, B0, seg=0), M(3, B0, seg=1), M(4, B1, seg=0), M(5, B2, seg=1)])
    # seg 0 fills at t=4 (its own 2 messages); seg 1's timer is its own (armed at 3)
    assert rows(e) == [(0, 0, 1, "max_messages", 4, 0), (0, 1, 1, "max_messages", 4, 2),
                       (1, 0, 1, "max_messages", 5, 1), (1, 2, 1, "max_messages", 5, 3)]


def test_per_segment_timers_are_independent() -> None:
    b = ProducerBatcher(cfg(delay=5))
    e = add(b, [M(0, B0, seg=0), M(3, B0, seg=1), M(5, B1, seg=1)])
    assert rows(e) == [(0, 0, 1, "max_delay", 5, 0)]
    assert b.open_segments == [1] and b.open_messages == 2


def test_segment_sealed_flush_closes_only_named_segments() -> None:
    b = ProducerBatcher(cfg(delay=50))
    add(b, [M(0, B0, seg=0), M(1, B3, seg=0), M(2, B1, seg=1)])
    e = b.flush(10, "segment_sealed", segment_ids=[0])
    assert rows(e) == [(0, 0, 1, "segment_sealed", 10, 0), (0, 3, 1, "segment_sealed", 10, 1)]
    assert b.open_segments == [1]


def test_end_of_input_flush_fires_due_timers_then_closes_rest() -> None:
    b = ProducerBatcher(cfg(delay=5))
    add(b, [M(0, B0, seg=0), M(3, B1, seg=1)])
    e = b.flush(6, "end_of_input")
    assert rows(e) == [(0, 0, 1, "max_delay", 5, 0), (1, 1, 1, "end_of_input", 6, 1)]
    assert b.open_messages == 0 and b.next_fire_time() is None


def test_flush_rejects_unknown_reason_and_past_time() -> None:
    b = ProducerBatcher(cfg())
    add(b, [M(5)])
    with pytest.raises(ValueError, match="flush reason"):
        b.flush(5, "max_delay")
    with pytest.raises(ValueError, match="before the batcher clock"):
        b.flush(4)


# ---------------------------------------------------------------------------------- streaming
def test_messages_resolved_in_a_later_call_are_reported_as_carried() -> None:
    b = ProducerBatcher(cfg(delay=5))
    first = add(b, [M(0, B0, seq=100), M(1, B1, seq=101)])
    assert len(first) == 0 and first.message_entry_seq.tolist() == [-1, -1]
    second = add(b, [M(6, B0, seq=102)], first_seq=2)
    assert second.first_ordinal == 2
    assert second.message_entry_seq.tolist() == [-1]
    assert second.carried_ordinal.tolist() == [0, 1]
    assert second.carried_sequence_id.tolist() == [100, 101]
    assert second.carried_entry_seq.tolist() == [0, 1]


def test_pickled_batcher_resumes_identically() -> None:
    msgs = [M(t, h) for t, h in [(0, B0), (0, B2), (1, B1), (3, B3), (3, B0)]]
    ref = ProducerBatcher(cfg(delay=2))
    a = add(ref, msgs[:3])
    b = add(ref, msgs[3:], first_seq=3)
    fresh = ProducerBatcher(cfg(delay=2))
    add(fresh, msgs[:3])
    restored = pickle.loads(pickle.dumps(fresh))
    b2 = add(restored, msgs[3:], first_seq=3)
    assert len(a) == 0 and len(b) == 3
    assert rows(b2) == rows(b)
    assert b2.carried_entry_seq.tolist() == b.carried_entry_seq.tolist() == [0, 1, 2]
    assert rows(b)[:3] == [(0, 0, 1, "max_delay", 2, 0), (0, 2, 1, "max_delay", 2, 1),
                           (0, 1, 1, "max_delay", 2, 2)]


@pytest.mark.parametrize(("msgs", "fragment"), [
    ([M(5), M(4)], "non-decreasing"),
    ([M(0, h=70000)], "hash_b values"),
    ([M(0, size=-1)], "payload_size"),
    ([M(0, seg=9)], "no bucket splits given for segment 9"),
])
def test_invalid_messages_are_rejected(msgs: list[M], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        add(ProducerBatcher(cfg()), msgs)


def test_late_message_after_advance_is_rejected() -> None:
    b = ProducerBatcher(cfg())
    b.advance_to(10)
    with pytest.raises(ValueError, match="late message"):
        add(b, [M(9)])


# ---------------------------------------------------------------------------------- properties
@st.composite
def scenarios(draw: st.DrawFn) -> tuple[BatchingConfig, list[M], list[int], list[int | None]]:
    """A config, a sorted message list, chunk cut points and per-cut advance_to times."""
    mode = draw(st.sampled_from([m.value for m in BatchingMode]))
    config = cfg(mode=mode, max_messages=draw(st.integers(1, 6)),
                 max_bytes=draw(st.integers(1, 60)), delay=draw(st.integers(1, 4)))
    n = draw(st.integers(1, 40))
    gaps = draw(st.lists(st.sampled_from([0, 0, 0, 1, 2, 5]), min_size=n, max_size=n))
    hashes = st.sampled_from([0, 1, B0, 16383, 16384, B1, 32767, B2, 49152, B3, 65535])
    msgs = []
    t = draw(st.integers(0, 3))
    for i in range(n):
        t += gaps[i]
        msgs.append(M(t, draw(hashes), draw(st.integers(0, 30)), draw(st.sampled_from([0, 1, 2])),
                      draw(st.integers(-1, 4)), seq=1000 + i))
    cuts = sorted(draw(st.sets(st.integers(1, n), max_size=5)))
    advances: list[int | None] = []
    for c in cuts:
        nxt = msgs[c].t if c < n else msgs[-1].t + 10
        advances.append(draw(st.none() | st.integers(msgs[c - 1].t, nxt)))
    return config, msgs, cuts, advances


def replay(config: BatchingConfig, msgs: list[M], cuts: list[int],
           advances: list[int | None], pickle_between: bool = False
           ) -> tuple[Entries, np.ndarray]:
    """Feed ``msgs`` in chunks ending at ``cuts`` (advance_to after each cut when given), then
    flush at end; return all entries and each message's entry_seq (by ordinal)."""
    b = ProducerBatcher(config)
    parts: list[Entries] = []
    bounds = [0, *[c for c in cuts if c < len(msgs)], len(msgs)]
    adv = dict(zip(cuts, advances, strict=True))
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        parts.append(add(b, msgs[lo:hi], first_seq=0))
        if adv.get(hi) is not None:
            parts.append(b.advance_to(adv[hi]))  # type: ignore[arg-type]
        if pickle_between:
            b = pickle.loads(pickle.dumps(b))
    parts.append(b.flush(msgs[-1].t + 11, "end_of_input"))  # after every advance_to time
    mapping = np.full(len(msgs), -1, dtype=np.int64)
    for p in parts:
        k = p.message_entry_seq.shape[0]
        seg = mapping[p.first_ordinal:p.first_ordinal + k]
        known = p.message_entry_seq >= 0
        seg[known] = p.message_entry_seq[known]
        mapping[p.carried_ordinal] = p.carried_entry_seq
    return Entries.concat(parts), mapping


PROPERTY_SETTINGS = settings(max_examples=300, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(scenarios())
def test_every_message_is_in_exactly_one_entry(sc: tuple) -> None:
    config, msgs, cuts, advances = sc
    e, mapping = replay(config, msgs, cuts, advances)
    assert (mapping >= 0).all()
    assert e.entry_seq.tolist() == list(range(len(e)))
    counts = np.bincount(mapping, minlength=len(e))
    assert counts.tolist() == e.num_messages.tolist()
    sizes = np.array([m.size for m in msgs])
    assert np.bincount(mapping, weights=sizes, minlength=len(e)).tolist() == \
        e.payload_bytes.tolist()
    for i, m in enumerate(msgs):
        k = mapping[i]
        assert e.segment_id[k] == m.seg
        assert e.entry_hash_min[k] <= m.h <= e.entry_hash_max[k]
        assert e.first_sequence_id[k] <= 1000 + i <= e.last_sequence_id[k]
        assert e.open_time_ms[k] <= m.t <= e.publish_time_ms[k]
    assert set(e.close_reason.tolist()) <= set(CLOSE_REASONS)
    assert (np.diff(e.publish_time_ms) >= 0).all()


@PROPERTY_SETTINGS
@given(scenarios())
def test_no_entry_straddles_buckets_in_bucketed_mode(sc: tuple) -> None:
    config, msgs, cuts, advances = sc
    config = cfg("bucketed", config.max_messages, config.max_bytes, config.max_publish_delay_ms)
    e, _ = replay(config, msgs, cuts, advances)
    for s, lo, hi, b in zip(e.segment_id, e.entry_hash_min, e.entry_hash_max, e.bucket_index,
                            strict=True):
        splits = SPLITS[int(s)]
        assert bucket_of(splits, int(lo)) == bucket_of(splits, int(hi)) == int(b)


@PROPERTY_SETTINGS
@given(scenarios())
def test_limits_are_respected(sc: tuple) -> None:
    config, msgs, cuts, advances = sc
    e, _ = replay(config, msgs, cuts, advances)
    assert (e.num_messages <= config.max_messages).all()
    over = e.payload_bytes > config.max_bytes
    assert (e.num_messages[over] == 1).all()
    waited = e.publish_time_ms - e.open_time_ms
    timed = e.close_reason == "max_delay"
    assert (waited[timed] <= config.max_publish_delay_ms).all()


@PROPERTY_SETTINGS
@given(scenarios(), st.booleans())
def test_output_does_not_depend_on_chunking(sc: tuple, pickle_between: bool) -> None:
    config, msgs, cuts, advances = sc
    whole, whole_map = replay(config, msgs, [], [])
    chunked, chunked_map = replay(config, msgs, cuts, advances, pickle_between)
    for name in Entries.ENTRY_COLUMNS:
        assert getattr(chunked, name).tolist() == getattr(whole, name).tolist(), name
    assert chunked_map.tolist() == whole_map.tolist()


def message_by_message(config: BatchingConfig, msgs: list[M], cuts: list[int],
                       advances: list[int | None]) -> tuple[list[tuple], list[int]]:
    """The container rules of the module doc read literally, one message at a time: before a
    message every due timer fires ((fire time, segment) order), then the pre-add byte check,
    the add, the fullness checks; ``advance_to`` after the cuts of :func:`replay`, its final
    flush. Returns the entry rows (``Entries.ENTRY_COLUMNS`` without ``entry_seq``) and each
    message's entry index: the oracle of the vectorized batcher."""
    entries: list[tuple] = []
    mapping = [-1] * len(msgs)
    open_: dict[int, dict] = {}  # segment → fire, count, bytes, batches (group → messages)

    def emit(seg: int, when: int, reason: str) -> None:
        batches = sorted(open_.pop(seg)["batches"].values(),
                         key=lambda ix: (max(msgs[i].seq for i in ix), max(ix)))  # type: ignore
        for ix in batches:
            for i in ix:
                mapping[i] = len(entries)
            hs = [msgs[i].h for i in ix]
            seqs = [msgs[i].seq for i in ix]
            entries.append((seg, bucket_of(SPLITS[seg], min(hs)), min(hs), max(hs), len(ix),
                            sum(msgs[i].size for i in ix), msgs[ix[0]].t, when, reason,
                            min(seqs), max(seqs)))  # type: ignore[type-var]

    def fire_due(now: int) -> None:
        for fire, seg in sorted((c["fire"], s) for s, c in open_.items() if c["fire"] <= now):
            emit(seg, fire, "max_delay")

    def group(m: M) -> int:
        if config.mode == "bucketed":
            return bucket_of(SPLITS[m.seg], m.h)
        return max(m.key, -1) if config.mode == "key_based" else 0

    advance = dict(zip(cuts, advances, strict=True))
    for i, m in enumerate(msgs):
        if config.mode == "disabled":
            open_[m.seg] = {"batches": {0: [i]}}
            emit(m.seg, m.t, "disabled")
            continue
        fire_due(m.t)
        if m.seg in open_ and open_[m.seg]["bytes"] + m.size > config.max_bytes:
            emit(m.seg, m.t, "max_bytes")
        c = open_.setdefault(m.seg, {"fire": m.t + config.max_publish_delay_ms, "count": 0,
                                     "bytes": 0, "batches": {}})
        c["batches"].setdefault(group(m), []).append(i)
        c["count"] += 1
        c["bytes"] += m.size
        if c["count"] >= config.max_messages:
            emit(m.seg, m.t, "max_messages")
        elif c["bytes"] >= config.max_bytes:
            emit(m.seg, m.t, "max_bytes")
        if advance.get(i + 1) is not None:
            fire_due(advance[i + 1])  # type: ignore[arg-type]
    end = msgs[-1].t + 11
    fire_due(end)
    for seg in sorted(open_):
        emit(seg, end, "end_of_input")
    return entries, mapping


@PROPERTY_SETTINGS
@given(scenarios(), st.booleans())
def test_batcher_matches_the_message_by_message_rules(sc: tuple, pickle_between: bool) -> None:
    config, msgs, cuts, advances = sc
    e, mapping = replay(config, msgs, cuts, advances, pickle_between)
    want_rows, want_mapping = message_by_message(config, msgs, cuts, advances)
    columns = [c for c in Entries.ENTRY_COLUMNS if c != "entry_seq"]
    got = list(zip(*[getattr(e, c).tolist() for c in columns], strict=True))
    assert got == want_rows
    assert mapping.tolist() == want_mapping
