"""Per-topic controller in event time (reference §4.7, §5, §1.3)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core.assignment import LeaveHow
from pipelines.core.controller import (
    ConsumerSpec,
    ControllerSettings,
    SubscriptionSpec,
    SubscriptionType,
    TopicController,
    segment_rows,
)
from pipelines.core.layout import SegmentLayout, change_times, layout_as_of
from pipelines.core.policy import AutoScaleConfig

RATES = ("msg_rate_in", "bytes_rate_in", "msg_rate_out", "bytes_rate_out")
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


def test_keyless_round_robin_continues_each_producers_counter_over_a_new_layout():
    """Within one chunk, splits (the first at 60 s) re-route the later keyless messages: each
    producer's n-th message goes to ``n % segments`` over the layout in force at its time
    (segments by range start), its counter counting every earlier message, under any layout."""
    c = TopicController("t", ControllerSettings(policy=POLICY))
    ev, sh, hb = traffic(100, 0, 130_000, keyless=True)
    producers = np.random.default_rng(1).choice(np.array(["a", "b"]), len(ev))
    # an odd count before the split: a counter not carried over would pick the other segment
    assert (producers[ev < 60_000] == "a").sum() % 2 == 1
    routed = run(c, ev, sh, hb, producers)
    assert c.layout is not None and change_times(c.layout)[0] == 60_000
    seen: dict[str, int] = {}
    expected = []
    for t, p in zip(ev.tolist(), producers.tolist(), strict=True):
        _, ids = layout_as_of(c.layout, t).routing_table()
        expected.append(int(ids[seen.get(p, 0) % len(ids)]))
        seen[p] = seen.get(p, 0) + 1
    assert routed.segment_id.tolist() == expected


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


# ---- load rates per stats period (reference §5.1) ---------------------------------------------

DISABLED = AutoScaleConfig(enabled=False)


def _written(samples, segment_id=0):
    return [(s["sample_time_ms"], s["msg_rate_in"]) for s in samples
            if s["written"] and s["segment_id"] == segment_id]


@pytest.mark.parametrize(
    ("burst", "expected"),
    [
        # 60 msgs in the first 6 s of every 10 s: 360 per period, 6 msg/s at every update. The
        # old 60 s rolling average ramped 1, 2, 3, 4, 6 at the 10 s sweeps.
        (6_000, [(0, 0.0), (60_000, 6.0)]),
        # evenly spread: 100 msgs per 10 s, 10 msg/s
        (10_000, [(0, 0.0), (60_000, 10.0)]),
    ],
    ids=["bursty", "even"],
)
def test_steady_stream_writes_at_most_one_record_per_stats_period(burst, expected):
    """The sweep reads TopicStats values that change only at the 60 s stats updates: a steady
    stream's record is written at its first sweep (nothing stored) and at the first update,
    never at the 10 s sweeps in between."""
    c = TopicController("t", ControllerSettings(policy=DISABLED))
    ev = np.concatenate([np.arange(b * 10_000, b * 10_000 + burst, 100)
                         for b in range(30)]).astype(np.int64)
    run(c, ev, ev % 65536, ev % 65536, horizon=300_001)
    _, samples = c.take_outputs()
    assert _written(samples) == expected
    assert [s["msg_rate_in"] for s in samples if s["sample_time_ms"] % 60_000] == [
        expected[-1][1]] * 20  # every sweep between updates reads the last update's value


@pytest.mark.parametrize(
    ("step_ms", "expected"),
    [
        # 10 msg/s, then 100 msg/s from step_ms; stats updates at 60, 120, 180 s
        (110_000, [(60_000, 10.0), (120_000, 25.0), (180_000, 100.0)]),
        # 1 s before the 120 s update: (59·10 + 100)/60 = 11.5, within 25 % of 10: not written
        (119_000, [(60_000, 10.0), (180_000, 100.0)]),
        # at the update: messages at 120 s count in the next period
        (120_000, [(60_000, 10.0), (180_000, 100.0)]),
        # 1 s after: (10 + 59·100)/60 = 98.5, read from the 180 s update on
        (121_000, [(60_000, 10.0), (180_000, 98.5)]),
    ],
    ids=["10s-before-update", "1s-before-update", "at-update", "1s-after-update"],
)
def test_rate_step_is_read_at_the_next_stats_update(step_ms, expected):
    c = TopicController("t", ControllerSettings(policy=DISABLED))
    slow = np.arange(0, step_ms, 100, dtype=np.int64)
    fast = np.arange(step_ms, 240_000, 10, dtype=np.int64)
    ev = np.concatenate([slow, fast])
    run(c, ev, ev % 65536, ev % 65536, horizon=240_000)
    _, samples = c.take_outputs()
    assert [(t, pytest.approx(r)) for t, r in _written(samples)[1:]] == expected


@pytest.mark.parametrize(
    ("anchor_ms", "first_message_ms", "expected"),
    [
        (None, 0, 60_000),  # the topic's first event is the broker start: first update at 60 s
        (0, 30_000, 60_000),  # the replay's first event (another topic's) anchors it
        (0, 90_000, 120_000),  # a topic created after the first update waits for the next
    ],
    ids=["topic-first-event", "replay-first-event", "created-after-first-update"],
)
def test_stats_updates_are_anchored_at_the_first_event(anchor_ms, first_message_ms, expected):
    c = TopicController("t", ControllerSettings(policy=DISABLED, stats_anchor_ms=anchor_ms))
    ev = np.arange(first_message_ms, 200_000, 100, dtype=np.int64)
    run(c, ev, ev % 65536, ev % 65536, horizon=200_000)
    _, samples = c.take_outputs()
    assert next(t for t, r in _written(samples) if r > 0) == expected


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


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), rates=st.lists(st.sampled_from([0, 0.05, 0.5, 8, 40, 120]),
                                                  min_size=1, max_size=4),
       cuts=st.lists(st.integers(1, 599_999), max_size=5),
       joins=st.lists(st.integers(0, 600_000), max_size=3), keyless=st.booleans())
def test_repeated_sweeps_and_lazy_counts_equal_running_every_event(seed, rates, cuts, joins,
                                                                   keyless):
    """The fast path (a run of sweeps alone taken at once, messages counted only before the
    events that read them) gives the routing, rows and layout of running every control event
    one by one, over stretches of changing rates (quiet, idle, splitting, merging), consumer
    joins and any window cuts."""
    from pipelines.core import controller as core_controller  # noqa: PLC0415

    stretch = 600_000 // len(rates)
    parts = [traffic(r, i * stretch, (i + 1) * stretch, seed=seed + i, keyless=keyless)
             for i, r in enumerate(rates) if r]
    ev, sh, hb = (np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, np.int64)
                  for k in range(3))
    rng = np.random.default_rng(seed)
    ev = np.sort(ev + rng.integers(0, 997, len(ev)))
    producers = np.array(["a", "b"])[rng.integers(0, 2, len(ev))]
    sizes = rng.integers(10, 500, len(ev))
    bounds = sorted({0, *cuts, 700_000})

    def replay(fast):
        core_controller._REPEAT_SWEEPS = fast
        ctl = TopicController("t", ControllerSettings(policy=POLICY, stats_anchor_ms=1_234),
                              stream_sub(*joins) if joins else ())
        routed, rows = [], []
        for lo, hi in itertools.pairwise(bounds):
            m = (ev >= lo) & (ev < hi)
            r = ctl.advance(ev[m], sh[m], hb[m], sizes[m], producers[m], hi)
            routed.append((r.segment_id.tolist(), r.bucket_index.tolist(),
                           r.layout_epoch.tolist()))
            rows.append(ctl.take_outputs())
        ctl.finish()
        rows.append(ctl.take_outputs())
        return routed, rows, None if ctl.layout is None else segment_rows(ctl.layout)

    try:
        general = replay(False)
    finally:
        core_controller._REPEAT_SWEEPS = True
    assert replay(True) == general


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
    """100 msg/s (split threshold 50): from the 60 s stats update on a split is due; the tick
    is every 300 s, so only a registration can evaluate before 300 s."""
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
        ((SubscriptionSpec("s", ST, (ConsumerSpec("c0", 0, reconnects_ms=(75_000,)),)),),
         (75_000, "consumer-registration", "split", "msgRateIn")),
        ((SubscriptionSpec("s", CP, (ConsumerSpec("c0", 0, reconnects_ms=(75_000,)),)),),
         (75_000, "consumer-registration", "split", "msgRateIn")),
        ((SubscriptionSpec("s", ST, (ConsumerSpec("c0", 0, 75_000),)),),
         (300_000, "tick", "split", "msgRateIn")),
        ((SubscriptionSpec("s", ST, (ConsumerSpec("c0", 0), ConsumerSpec("c1", 75_000))),),
         (75_000, "consumer-registration", "split", "consumer-count")),
        ((SubscriptionSpec("s", CP, (ConsumerSpec("c0", 75_000),)),),
         (75_000, "consumer-registration", "split", "msgRateIn")),
        ((SubscriptionSpec("s", CP, (ConsumerSpec("c0", 75_000),), grouped=False),),
         (300_000, "tick", "split", "msgRateIn")),
        ((SubscriptionSpec("s", CP, (ConsumerSpec("c0", 10_000, reconnects_ms=(75_000,)),),
                           grouped=False),),
         (300_000, "tick", "split", "msgRateIn")),
        ((SubscriptionSpec("s", QU, (ConsumerSpec("c0", 75_000),)),),
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


# ---- a clean close unregisters at once (reference §6.1, PR #26433) -----------------------------
CLOSE, CRASH = LeaveHow.CLOSE, LeaveHow.CRASH


@pytest.mark.parametrize(
    ("how", "now_ms", "expected"),
    [
        (CLOSE, 99_999, 2),
        (CLOSE, 100_000, 1),  # unregistered at the close
        (CRASH, 100_000, 2),  # a lost connection: the session stays for the grace period
        (CRASH, 159_999, 2),
        (CRASH, 160_000, 1),  # expired 60 s after the disconnect
    ],
    ids=["close-before", "close-at-leave", "crash-at-leave", "crash-in-grace",
         "crash-expired"],
)
def test_consumer_count_drops_at_a_close_and_after_the_grace_at_a_crash(how, now_ms, expected):
    sub = SubscriptionSpec("s", ST, (ConsumerSpec("c0", 0),
                                     ConsumerSpec("c1", 0, 100_000, leave_how=how)))
    assert TopicController("t", ControllerSettings(), (sub,)).consumers_by_subscription(
        now_ms) == {"s": expected}


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        (CLOSE, []),  # c0, c2: 2 consumers fit the 2 buckets
        # c0, c1 (lost, within the grace), c2: 3 > 2 buckets, below the split-rate floor
        (CRASH, [(130_000, "consumer-registration", "rebucket", 4, 3)]),
    ],
    ids=["close", "crash"],
)
def test_registration_within_the_grace_counts_a_crashed_consumer_not_a_closed_one(how,
                                                                                 expected):
    sub = SubscriptionSpec("s", ST, (ConsumerSpec("c0", 0),
                                     ConsumerSpec("c1", 0, 100_000, leave_how=how),
                                     ConsumerSpec("c2", 130_000)))
    c = TopicController("t", ControllerSettings(policy=POLICY, bucket_budget=2), (sub,))
    ev, sh, hb = traffic(1, 0, 131_000)
    run(c, ev, sh, hb)
    decisions, _ = c.take_outputs()
    assert [(d["eval_time_ms"], d["trigger"], d["action"], d["new_bucket_count"],
             d["consumers"]) for d in decisions] == expected


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


# ---- sealed segments stay swept while they drain (reference §5.1) -----------------------------


@pytest.mark.parametrize(
    ("initial_delay_ms", "expected"),
    [
        # updates at 60, 120 s: split at the 60 s tick, right after an update; the next update
        # has no producer and nothing dispatched since: one zero record
        (60_000, [(0, (0, 0, 0, 0)), (60_000, (100, 10_000, 100, 10_000)),
                  (120_000, (0, 0, 0, 0))]),
        # updates at 30, 90, 150 s: the split at 60 s falls mid-period; at 90 s the producers
        # are gone (in-rates 0) but the subscription still counts what it was dispatched from
        # 30 to 60 s (3000 msgs / 60 s); at 150 s everything is 0
        (30_000, [(0, (0, 0, 0, 0)), (30_000, (100, 10_000, 100, 10_000)),
                  (90_000, (0, 0, 50, 5_000)), (150_000, (0, 0, 0, 0))]),
    ],
    ids=["split-at-update", "split-mid-period"],
)
def test_sealed_parent_is_swept_until_its_zero_record(initial_delay_ms, expected):
    settings = ControllerSettings(policy=POLICY, stats_update_initial_delay_ms=initial_delay_ms)
    c = TopicController("t", settings, stream_sub(0))
    ev, sh, hb = traffic(100, 0, 200_000)
    run(c, ev, sh, hb)
    decisions, samples = c.take_outputs()
    assert (decisions[0]["eval_time_ms"], decisions[0]["action"]) == (60_000, "split")
    parent = [(s["sample_time_ms"], tuple(s[k] for k in RATES)) for s in samples
              if s["segment_id"] == 0 and s["written"]]
    assert parent == [(t, tuple(pytest.approx(x) for x in r)) for t, r in expected]
    assert max(s["sample_time_ms"] for s in samples if s["segment_id"] == 0) == expected[-1][0]
    assert 0 not in c.stats.loaded and c.reporter.baseline(0) is None  # unloaded after it
    assert c.reporter.samples[0].rates == (0, 0, 0, 0)  # the record stays (no prune)
