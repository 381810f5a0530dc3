"""Per-topic controller in event time (reference §4.7, §5, §1.3)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core.controller import (
    ConsumerSpec,
    ControllerSettings,
    SubscriptionSpec,
    SubscriptionType,
    TopicController,
    segment_rows,
)
from pipelines.core.layout import SegmentLayout
from pipelines.core.policy import AutoScaleConfig

POLICY = AutoScaleConfig(split_msg_rate_in=50, merge_msg_rate_in=5,
                         split_vs_rebucket_min_msg_rate_in=20, merge_window_s=60,
                         merge_cooldown_s=60)


def traffic(rate_per_s, start_ms, end_ms, seed=0, keyless=False):
    """Evenly spaced messages with random hashes: (event_ms, segment_hash, hash_b)."""
    n = int(rate_per_s * (end_ms - start_ms) / 1000)
    ev = np.linspace(start_ms, end_ms - 1, n).astype(np.int64)
    h = np.random.default_rng(seed).integers(0, 2**32, n, dtype=np.uint64)
    sh = (h >> 16).astype(np.int64)
    hb = (h & 0xFFFF).astype(np.int64)
    if keyless:
        sh[:] = -1
        hb[:] = -1
    return ev, sh, hb


def run(controller, ev, sh, hb, producers=None, horizon=None):
    producers = producers if producers is not None else ["p"] * len(ev)
    sizes = np.full(len(ev), 100, dtype=np.int64)
    horizon = horizon if horizon is not None else int(ev[-1]) + 1
    return controller.advance(ev, sh, hb, sizes, producers, horizon)


def stream_sub(*joins):
    consumers = tuple(ConsumerSpec(f"c{i}", j) for i, j in enumerate(joins))
    return (SubscriptionSpec("sub", SubscriptionType.STREAM, consumers),)


def test_keyed_messages_route_to_segment_covering_their_hash():
    c = TopicController("t", ControllerSettings(initial_segments=4))
    ev, sh, hb = traffic(1, 0, 10_000)
    routed = run(c, ev, sh, hb)
    assert routed.segment_id.tolist() == (sh // 16384).tolist()


def test_keyless_messages_round_robin_per_producer_over_segments_by_range():
    c = TopicController("t", ControllerSettings(initial_segments=3))
    ev = np.arange(7, dtype=np.int64)
    none = np.full(7, -1, dtype=np.int64)
    routed = run(c, ev, none, none, producers=["a", "b", "a", "a", "b", "a", "a"])
    assert routed.segment_id.tolist() == [0, 0, 1, 2, 1, 0, 1]
    assert routed.bucket_index.tolist() == [0] * 7  # keyless → hash_b 0 → bucket 0


@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=40),
       st.integers(1, 39))
@settings(max_examples=50, deadline=None)
def test_keyless_round_robin_counts_each_producers_messages_across_chunks(producers, cut):
    """Each producer's n-th keyless message goes to segment ``n % segments`` (by range), however
    the messages interleave and wherever a chunk boundary falls."""
    c = TopicController("t", ControllerSettings(initial_segments=3))
    n = len(producers)
    cut = min(cut, n)
    ev = np.arange(n, dtype=np.int64)
    none = np.full(n, -1, dtype=np.int64)
    first = run(c, ev[:cut], none[:cut], none[:cut], producers=producers[:cut], horizon=cut)
    got = first.segment_id.tolist()
    if cut < n:
        got += run(c, ev[cut:], none[cut:], none[cut:], producers=producers[cut:]
                   ).segment_id.tolist()
    seen: dict[str, int] = {}
    expected = []
    for p in producers:
        expected.append(seen.get(p, 0) % 3)
        seen[p] = seen.get(p, 0) + 1
    assert got == expected


def test_bucket_index_is_bucket_of_hash_b_under_segment_splits():
    c = TopicController("t", ControllerSettings(initial_segments=1, bucket_budget=4))
    ev, sh, hb = traffic(1, 0, 20_000)
    routed = run(c, ev, sh, hb)
    assert routed.bucket_index.tolist() == (hb // 16384).tolist()


def test_load_split_applies_to_messages_from_evaluation_time_on():
    c = TopicController("t", ControllerSettings(policy=POLICY))
    ev, sh, hb = traffic(100, 0, 130_000)
    routed = run(c, ev, sh, hb)
    decisions, _ = c.take_outputs()
    assert next((d["eval_time_ms"], d["action"], d["reason"]) for d in decisions) == (
        60_000, "split", "msgRateIn")
    assert set(routed.segment_id[ev < 60_000].tolist()) == {0}
    assert set(routed.segment_id[(ev >= 60_000) & (ev < 120_000)].tolist()) == {1, 2}
    assert routed.layout_epoch[ev >= 60_000].min() == 1


def test_consumer_registration_evaluates_at_join_time():
    c = TopicController("t", ControllerSettings(policy=POLICY, bucket_budget=4),
                        stream_sub(0, 0, 0, 0, 0, 30_500))
    ev, sh, hb = traffic(1, 0, 40_000)
    run(c, ev, sh, hb)
    decisions, _ = c.take_outputs()
    rows = [(d["eval_time_ms"], d["trigger"], d["action"], d["new_bucket_count"], d["reason"])
            for d in decisions]
    assert rows == [
        (0, "consumer-registration", "rebucket", 8, "below-split-rate-floor"),
    ]


def test_follow_up_evaluation_runs_after_split_cooldown():
    c = TopicController("t", ControllerSettings(policy=POLICY, auto_scale_interval_ms=300_000))
    ev, sh, hb = traffic(400, 0, 365_000)
    run(c, ev, sh, hb)
    decisions, _ = c.take_outputs()
    assert [(d["eval_time_ms"], d["trigger"], d["action"]) for d in decisions][:2] == [
        (300_000, "tick", "split"), (360_001, "follow-up", "split")]


def test_cooldown_clock_set_only_on_success():
    c = TopicController("t", ControllerSettings(policy=POLICY))
    ev, sh, hb = traffic(100, 0, 61_000)
    run(c, ev, sh, hb)
    assert c.last_split_ms == 60_000
    assert c.last_merge_ms is None and c.last_rebucket_ms is None


def test_load_samples_written_only_on_material_change():
    c = TopicController("t", ControllerSettings(policy=AutoScaleConfig(enabled=False)))
    ev = np.concatenate([np.arange(b * 10_000, b * 10_000 + 6000, 100) for b in range(12)])
    run(c, ev, ev % 65536, ev % 65536)
    _, samples = c.take_outputs()
    written = [(s["sample_time_ms"], s["msg_rate_in"]) for s in samples if s["written"]]
    # 60 msgs per 10 s: the 60 s average ramps 0, 1, 2, 3, 4, 5 (+25 %: not material), 6
    assert written == [(0, 0.0), (10_000, 1.0), (20_000, 2.0), (30_000, 3.0), (40_000, 4.0),
                       (60_000, 6.0)]


def test_msg_rate_out_counts_connected_subscriptions():
    subs = (*stream_sub(0), SubscriptionSpec("q", SubscriptionType.QUEUE, (ConsumerSpec("q1", 0),)))
    c = TopicController("t", ControllerSettings(policy=AutoScaleConfig(enabled=False)), subs)
    ev, sh, hb = traffic(10, 0, 70_000)
    run(c, ev, sh, hb)
    _, samples = c.take_outputs()
    last = samples[-1]
    assert last["msg_rate_out"] == pytest.approx(2 * last["msg_rate_in"])


def test_cold_segments_merge_after_traffic_stops():
    c = TopicController("t", ControllerSettings(policy=POLICY, initial_segments=2))
    ev, sh, hb = traffic(1, 0, 600_000)
    run(c, ev, sh, hb)
    c.finish()
    decisions, _ = c.take_outputs()
    assert [(d["action"], d["segment_ids"], d["reason"]) for d in decisions] == [
        ("merge", [0, 1], "cold")]


def test_chunked_advance_gives_same_routing_and_rows_as_one_chunk():
    ev, sh, hb = traffic(150, 0, 400_000, seed=3)
    producers = np.array(["a", "b", "c"])[np.arange(len(ev)) % 3]
    sh[::7] = -1
    hb[::7] = -1
    whole = TopicController("t", ControllerSettings(policy=POLICY), stream_sub(0, 90_000))
    r1 = run(whole, ev, sh, hb, producers, horizon=400_000)
    whole.finish()
    chunked = TopicController("t", ControllerSettings(policy=POLICY), stream_sub(0, 90_000))
    parts = []
    for lo, hi in [(0, 33_333), (33_333, 200_000), (200_000, 400_000)]:
        m = (ev >= lo) & (ev < hi)
        parts.append(chunked.advance(ev[m], sh[m], hb[m], np.full(m.sum(), 100), producers[m],
                                     hi))
    chunked.finish()
    assert np.concatenate([p.segment_id for p in parts]).tolist() == r1.segment_id.tolist()
    assert chunked.take_outputs() == whole.take_outputs()
    assert segment_rows(chunked.layout) == segment_rows(whole.layout)


def test_idle_gap_gives_same_decisions_as_dense_ticking():
    """Skipping idle ticks is an optimisation only: a long gap yields the same rows as
    processing the gap in many small chunks (each chunk forces the clock through it)."""
    ev1, sh1, hb1 = traffic(100, 0, 120_000)
    ev2, sh2, hb2 = traffic(100, 3_600_000, 3_700_000, seed=2)
    ev, sh, hb = (np.concatenate(x) for x in ((ev1, ev2), (sh1, sh2), (hb1, hb2)))
    fast = TopicController("t", ControllerSettings(policy=POLICY))
    run(fast, ev, sh, hb, horizon=3_700_000)
    dense = TopicController("t", ControllerSettings(policy=POLICY))
    for lo in range(0, 3_700_000, 10_000):
        m = (ev >= lo) & (ev < lo + 10_000)
        dense.advance(ev[m], sh[m], hb[m], np.full(m.sum(), 100), ["p"] * int(m.sum()),
                      lo + 10_000)
    assert fast.take_outputs() == dense.take_outputs()


def test_advance_rejects_messages_before_last_horizon():
    c = TopicController("t", ControllerSettings())
    ev, sh, hb = traffic(1, 0, 10_000)
    run(c, ev, sh, hb, horizon=20_000)
    with pytest.raises(ValueError, match="sorted by event time"):
        run(c, ev[:1], sh[:1], hb[:1], horizon=30_000)


@pytest.mark.parametrize(
    ("mutate", "created_by"),
    [(lambda c: c.split(0), "split"), (lambda c: c.rebucket(0, 8), "rebucket")],
)
def test_segment_rows_classify_how_each_segment_was_created(mutate, created_by):
    rows = segment_rows(mutate(SegmentLayout.initial(1)))
    assert rows[0]["created_by"] == "initial"
    assert rows[-1]["created_by"] == created_by


# ---- registrations (reference §7.3, §6.1, §4.1) -------------------------------------------

CP, ST, QU = SubscriptionType.CHECKPOINT, SubscriptionType.STREAM, SubscriptionType.QUEUE


def _first_decision(subs):
    """100 msg/s (split threshold 50): from the 40 s sample on a split is due; the tick is
    every 300 s, so only a registration can evaluate before 300 s."""
    c = TopicController("t", ControllerSettings(policy=POLICY, auto_scale_interval_ms=300_000),
                        subs)
    ev, sh, hb = traffic(100, 0, 301_000)
    run(c, ev, sh, hb)
    d = c.take_outputs()[0][0]
    return d["eval_time_ms"], d["trigger"], d["action"], d["reason"]


@pytest.mark.parametrize(
    ("subs", "expected"),
    [
        ((SubscriptionSpec("s", ST, (ConsumerSpec("c0", 0),)),),
         (300_000, "tick", "split", "msgRateIn")),
        ((SubscriptionSpec("s", ST, (ConsumerSpec("c0", 0, reconnects_ms=(45_000,)),)),),
         (45_000, "consumer-registration", "split", "msgRateIn")),
        ((SubscriptionSpec("s", CP, (ConsumerSpec("c0", 0, reconnects_ms=(45_000,)),)),),
         (45_000, "consumer-registration", "split", "msgRateIn")),
        ((SubscriptionSpec("s", ST, (ConsumerSpec("c0", 0, 45_000),)),),
         (300_000, "tick", "split", "msgRateIn")),
        ((SubscriptionSpec("s", ST, (ConsumerSpec("c0", 0), ConsumerSpec("c1", 45_000))),),
         (45_000, "consumer-registration", "split", "consumer-count")),
        ((SubscriptionSpec("s", CP, (ConsumerSpec("c0", 45_000),)),),
         (45_000, "consumer-registration", "split", "msgRateIn")),
        ((SubscriptionSpec("s", CP, (ConsumerSpec("c0", 45_000),), grouped=False),),
         (300_000, "tick", "split", "msgRateIn")),
        ((SubscriptionSpec("s", CP, (ConsumerSpec("c0", 10_000, reconnects_ms=(45_000,)),),
                           grouped=False),),
         (300_000, "tick", "split", "msgRateIn")),
        ((SubscriptionSpec("s", QU, (ConsumerSpec("c0", 45_000),)),),
         (300_000, "tick", "split", "msgRateIn")),
    ],
    ids=["no-registration", "stream-reconnect", "checkpoint-reconnect", "leave-does-not-evaluate",
         "new-stream-consumer", "grouped-checkpoint-join", "ungrouped-checkpoint-join",
         "ungrouped-checkpoint-reconnect", "queue-join"],
)
def test_every_registration_and_only_registrations_trigger_an_evaluation(subs, expected):
    assert _first_decision(subs) == expected


@pytest.mark.parametrize(
    ("subs", "now_ms", "expected"),
    [
        # a reconnect keeps the session: the count does not change around it
        ((SubscriptionSpec("s", ST, (ConsumerSpec("c0", 0, reconnects_ms=(5_000,)),
                                     ConsumerSpec("c1", 0))),), 4_999, {"s": 2}),
        ((SubscriptionSpec("s", ST, (ConsumerSpec("c0", 0, reconnects_ms=(5_000,)),
                                     ConsumerSpec("c1", 0))),), 5_000, {"s": 2}),
        ((SubscriptionSpec("s", CP, (ConsumerSpec("c0", 0), ConsumerSpec("c1", 0))),), 0,
         {"s": 2}),
        ((SubscriptionSpec("s", CP, (ConsumerSpec("c0", 0), ConsumerSpec("c1", 0)),
                           grouped=False),), 0, {}),
        ((SubscriptionSpec("s", QU, (ConsumerSpec("c0", 0),)),), 0, {}),
    ],
    ids=["before-reconnect", "at-reconnect", "grouped-checkpoint", "ungrouped-checkpoint",
         "queue"],
)
def test_consumer_count_counts_registered_sessions_only(subs, now_ms, expected):
    c = TopicController("t", ControllerSettings(), subs)
    assert c.consumers_by_subscription(now_ms) == expected


@pytest.mark.parametrize(
    ("subs", "expected"),
    [
        ((SubscriptionSpec("s", CP, (ConsumerSpec("c0", 0), ConsumerSpec("c1", 0))),), 1),
        ((SubscriptionSpec("s", CP, (ConsumerSpec("c0", 0), ConsumerSpec("c1", 0)),
                           grouped=False),), 2),
        ((SubscriptionSpec("s", CP, (ConsumerSpec("c0", 0), ConsumerSpec("c1", 0, 1)),
                           grouped=False),), 1),
    ],
    ids=["grouped-one-subscription", "ungrouped-one-per-reader", "ungrouped-connected-only"],
)
def test_fan_out_counts_each_ungrouped_checkpoint_reader(subs, expected):
    assert TopicController("t", ControllerSettings(), subs).connected_subscriptions(1) == expected


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ConsumerSpec("c0", 1_000, reconnects_ms=(1_000,)), "must lie after its join"),
        (lambda: ConsumerSpec("c0", 0, 5_000, reconnects_ms=(5_000,)), "before its leave"),
        (lambda: SubscriptionSpec("s", ST, grouped=False), "only a checkpoint subscription"),
        (lambda: SubscriptionSpec("s", QU, grouped=False), "only a checkpoint subscription"),
    ],
    ids=["reconnect-at-join", "reconnect-at-leave", "ungrouped-stream", "ungrouped-queue"],
)
def test_invalid_reconnect_or_grouping_is_rejected(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_sealed_segment_loses_its_cached_baseline_but_keeps_its_stored_record():
    c = TopicController("t", ControllerSettings(policy=POLICY))
    ev, sh, hb = traffic(100, 0, 61_000)
    run(c, ev, sh, hb)
    assert sorted(c.layout.active_segments) == [1, 2]
    assert c.reporter.baseline(0) is None  # forgotten at the seal
    # its last write (50 s: 5000 msgs / 60 s; 100 msg/s at 60 s is within 25 %) stays in the
    # store (no prune)
    record = c.reporter.samples[0]
    assert (record.modified_at_ms, record.msg_rate_in) == (50_000, pytest.approx(5000 / 60))
