"""Bucket-level dispatch with PIP-379 draining (pipelines.core.dispatch)."""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.core.assignment import LeaveHow, SubscriptionCoordinator, bucket_owners
from pipelines.core.dispatch import (
    ConsumerLoadRow,
    ConsumerSpec,
    DispatchOutputs,
    DispatchRow,
    HandoffRow,
    SegmentDrainRow,
    SubscriptionDispatcher,
    WindowStatsRow,
    _assigned_owners,
    fill_idle_rows,
)
from pipelines.core.layout import SegmentLayout
from tests.conftest import examples

SUB = "sub"


@dataclass(frozen=True)
class E:
    """One input entry: publish time, segment, entry_hash_min, messages; ``eid`` = its index in
    the scenario's entry list (publish order), set by :func:`_events`."""

    t: int
    seg: int
    h: int = 0
    n: int = 1
    eid: int = -1


Event = tuple[int, SegmentLayout | E]


def _events(layouts: list[tuple[int, SegmentLayout]], entries: list[E]) -> list[Event]:
    evs: list[tuple[int, int, int, SegmentLayout | E]] = (
        [(t, 0, i, lay) for i, (t, lay) in enumerate(layouts)]
        + [(e.t, 1, i, replace(e, eid=i)) for i, e in enumerate(entries)])
    return [(t, x) for t, _, _, x in sorted(evs, key=lambda v: v[:3])]


def _feed(d: SubscriptionDispatcher, events: list[Event], next_ms: int | None = -1) -> None:
    """Feed events in order; consecutive entries go in one on_entries call. ``next_ms``: the
    time of the next input after ``events`` (``-1``: it may share their last instant, so no
    call is ``complete``; ``None``: no next input): a call is ``complete`` when the next input
    is later than its last entry."""
    batch: list[E] = []

    def flush(following: int | None) -> None:
        if batch:
            complete = next_ms != -1 and (following is None or following > batch[-1].t)
            d.on_entries([e.t for e in batch], [e.seg for e in batch], [e.h for e in batch],
                         [e.n for e in batch], [10 * e.n for e in batch], ["p"] * len(batch),
                         [e.eid for e in batch], complete=complete)
            batch.clear()

    for t, x in events:
        if isinstance(x, SegmentLayout):
            flush(t)
            d.on_layout(t, x)
        else:
            batch.append(x)
    flush(next_ms)


def _run(sub_type: str, consumers: list[ConsumerSpec], layouts: list[tuple[int, SegmentLayout]],
         entries: list[E], end_ms: int | None = None,
         window_ms: int = 60_000) -> tuple[SubscriptionDispatcher, DispatchOutputs]:
    d = SubscriptionDispatcher(SUB, sub_type, consumers, window_ms=window_ms)
    _feed(d, _events(layouts, entries))
    d.finish(end_ms)
    return d, d.take_outputs()


def _by_entry(out: DispatchOutputs) -> dict[int, tuple[str | None, int | None, int | None]]:
    return {r.entry_id: (r.consumer_name, r.dispatch_time_ms, r.ack_time_ms)
            for r in out.dispatch}


ONE_N1 = SegmentLayout.initial(1, bucket_budget=1)
ONE_N2 = SegmentLayout.initial(1, bucket_budget=2)  # buckets [0, 0x7fff] [0x8000, 0xffff]
ONE_N4 = SegmentLayout.initial(1, bucket_budget=4)
SPLIT_N2 = ONE_N2.split(0, now_ms=100)  # 0 sealed; children 1 [0, 0x7fff], 2; N=1 each


# ---- routing ------------------------------------------------------------------------------------
def test_sole_owner_gets_every_bucket_at_publish_time() -> None:
    entries = [E(10, 0, 0x0000), E(20, 0, 0x4000), E(30, 0, 0x8000), E(40, 0, 0xFFFF)]
    _, out = _run("stream", [ConsumerSpec("a")], [(0, ONE_N4)], entries)
    assert _by_entry(out) == {0: ("a", 10, 10), 1: ("a", 20, 20), 2: ("a", 30, 30),
                              3: ("a", 40, 40)}
    assert [r.bucket_index for r in out.dispatch] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("hash_min", "bucket", "consumer"),
    [(0x15A0, 0, "c1"), (0x0000, 0, "c1"), (0x69B2, 1, "c1"), (0xA5D1, 2, "c2"),
     (0xFFFF, 3, "c2")],
)
def test_two_sharers_split_the_buckets_of_one_segment(hash_min: int, bucket: int,
                                                      consumer: str) -> None:
    _, out = _run("stream", [ConsumerSpec("c2"), ConsumerSpec("c1")], [(0, ONE_N4)],
                  [E(5, 0, hash_min)])
    assert [(r.bucket_index, r.consumer_name) for r in out.dispatch] == [(bucket, consumer)]


# ---- consumer timing model ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "entries", "expected"),
    [
        # 2 msg/s, ack 50 ms after processing; a back-to-back run keeps its start (no drift).
        (ConsumerSpec("a", capacity_msgs_per_s=2, ack_delay_ms=50),
         [E(0, 0, n=3), E(100, 0, n=1), E(5000, 0, n=2)],
         {0: ("a", 0, 1550), 1: ("a", 1500, 2050), 2: ("a", 5000, 6050)}),
        # 3 msg/s: ceil(1000/3)=334, ceil(2000/3)=667, 1000 — rounding does not accumulate.
        (ConsumerSpec("a", capacity_msgs_per_s=3),
         [E(0, 0), E(0, 0), E(0, 0)],
         {0: ("a", 0, 334), 1: ("a", 334, 667), 2: ("a", 667, 1000)}),
        # Unlimited capacity: the consumer is free at once; the ack still waits ack_delay_ms.
        (ConsumerSpec("a", ack_delay_ms=30),
         [E(0, 0), E(10, 0)],
         {0: ("a", 0, 30), 1: ("a", 10, 40)}),
        # Entries before the consumer joins wait for it.
        (ConsumerSpec("a", join_ms=700), [E(0, 0), E(10, 0)],
         {0: ("a", 700, 700), 1: ("a", 700, 700)}),
    ],
)
def test_capacity_and_ack_delay_set_dispatch_and_ack_times(
        spec: ConsumerSpec, entries: list[E],
        expected: dict[int, tuple[str, int, int]]) -> None:
    _, out = _run("stream", [spec], [(0, ONE_N1)], entries)
    assert _by_entry(out) == expected


# ---- PIP-379 handoffs ---------------------------------------------------------------------------
def test_moving_bucket_is_withheld_until_old_owner_acks() -> None:
    # a (1 msg/s) takes bucket 1's entry at 0 (ack 1000); b joins at 500 and owns bucket 1.
    entries = [E(0, 0, 0x9000), E(0, 0, 0x0100), E(600, 0, 0x9000)]
    d, out = _run("stream", [ConsumerSpec("a", capacity_msgs_per_s=1),
                             ConsumerSpec("b", join_ms=500)], [(0, ONE_N2)], entries)
    assert out.handoffs == [HandoffRow(SUB, 0, 1, "a", "b", 500, 1000, 1, 0)]
    assert _by_entry(out) == {0: ("a", 0, 1000), 1: ("a", 1000, 2000), 2: ("b", 1000, 1000)}
    assert (d.stats.reassignments, d.stats.handoffs_withheld,
            d.stats.draining_hashes_cleared_total) == (1, 1, 1)


@pytest.mark.parametrize(
    ("capacity", "withheld_until"),
    [(None, 500),  # nothing unacked at the move: not withheld
     (2.0, 500)],  # the ack lands exactly at the move instant: acks apply first
)
def test_bucket_move_without_unacked_entries_is_not_withheld(capacity: float | None,
                                                            withheld_until: int) -> None:
    _, out = _run("stream", [ConsumerSpec("a", capacity_msgs_per_s=capacity),
                             ConsumerSpec("b", join_ms=500)], [(0, ONE_N2)],
                  [E(0, 0, 0x9000)], end_ms=600)
    assert out.handoffs == [HandoffRow(SUB, 0, 1, "a", "b", 500, withheld_until, 0, 0)]


def test_consumer_leave_redelivers_its_unacked_entries_to_the_new_owner() -> None:
    # a owns bucket 0 and is processing the entry (0 -> 1000) when it leaves at 500.
    d, out = _run("stream", [ConsumerSpec("a", capacity_msgs_per_s=1, leave_ms=500),
                             ConsumerSpec("b")], [(0, ONE_N2)], [E(0, 0, 0x0100)])
    assert out.dispatch == [DispatchRow(SUB, 0, 0, "p", 0, 0, 1, 10, "b", 500, 500, 1)]
    assert out.handoffs == [HandoffRow(SUB, 0, 0, "a", "b", 500, 500, 0, 1)]
    assert d.stats.redeliveries == 1
    load = {r.consumer_name: (r.messages, r.busy_ms, r.idle_ms) for r in out.consumer_load}
    assert load == {"a": (1, 500, 0), "b": (1, 0, 501)}


def test_delivery_acked_exactly_at_leave_is_not_redelivered() -> None:
    d, out = _run("stream", [ConsumerSpec("a", capacity_msgs_per_s=2, leave_ms=500),
                             ConsumerSpec("b")], [(0, ONE_N1)], [E(0, 0)])
    assert _by_entry(out) == {0: ("a", 0, 500)}
    assert d.stats.redeliveries == 0


def test_no_consumers_leaves_entries_in_the_backlog() -> None:
    d, out = _run("stream", [], [(0, ONE_N2)], [E(10, 0, 0x0100), E(20, 0, 0x9000, n=3)])
    assert [(r.consumer_name, r.dispatch_time_ms, r.ack_time_ms) for r in out.dispatch] == [
        (None, None, None), (None, None, None)]
    assert out.consumer_load == []
    assert [w.backlog_messages for w in out.window_stats] == [4]
    assert d.backlog_messages == 4


def test_entries_after_last_consumer_left_stay_in_the_backlog() -> None:
    _, out = _run("stream", [ConsumerSpec("a", leave_ms=100)], [(0, ONE_N1)],
                  [E(50, 0), E(150, 0)])
    assert _by_entry(out) == {0: ("a", 50, 50), 1: (None, None, None)}


# ---- clean close vs lost connection (reference §6.1, PR #26433) ---------------------------------
TWO_N1 = SegmentLayout.initial(2, bucket_budget=2)  # segments 0 [0, 0x7fff], 1; N=1 each


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        # a clean close unregisters b at 100: a takes both segments at once
        ("close", {0: ("a", 200, 200), 1: ("a", 40_000, 40_000)}),
        # b's connection is lost at 100: its session and assignment (segment 1) stay until
        # 100 + 60 s, so segment 1 waits; then a takes it
        ("crash", {0: ("a", 60_100, 60_100), 1: ("a", 60_100, 60_100)}),
    ],
)
def test_close_reassigns_at_once_and_crash_keeps_the_assignment_for_the_grace_period(
        how: str, expected: dict[int, tuple[str, int, int]]) -> None:
    consumers = [ConsumerSpec("a"), ConsumerSpec("b", leave_ms=100, leave_how=LeaveHow(how))]
    d, out = _run("stream", consumers, [(0, TWO_N1)], [E(200, 1), E(40_000, 1)])
    assert _by_entry(out) == expected
    assert d.stats.rebalances == 3  # two joins, one removal (at the close or the expiry)


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        # closed: a holds both segments from 100; c joins at 30 s and takes segment 1
        ("close", {0: ("a", 200, 200), 1: ("c", 40_000, 40_000)}),
        # crashed: sessions a, b (lost), c: segment 1 stays b's (c idle) until b expires
        ("crash", {0: ("c", 60_100, 60_100), 1: ("c", 60_100, 60_100)}),
    ],
)
def test_registration_within_the_grace_period_after_a_close_and_a_crash(
        how: str, expected: dict[int, tuple[str, int, int]]) -> None:
    consumers = [ConsumerSpec("a"), ConsumerSpec("b", leave_ms=100, leave_how=LeaveHow(how)),
                 ConsumerSpec("c", join_ms=30_000)]
    _, out = _run("stream", consumers, [(0, TWO_N1)], [E(200, 1), E(40_000, 1)])
    assert _by_entry(out) == expected


@pytest.mark.parametrize("how", ["close", "crash"])
def test_lost_sharer_buckets_are_spread_over_the_connected_sharers_at_once(how: str) -> None:
    """A shared segment's buckets are spread by the broker over its connected consumers: a
    crashed sharer's buckets move at the disconnect, as a closed one's (§3.7)."""
    consumers = [ConsumerSpec("a"), ConsumerSpec("b", leave_ms=100, leave_how=LeaveHow(how))]
    _, out = _run("stream", consumers, [(0, ONE_N2)], [E(50, 0, 0x9000), E(200, 0, 0x9000)])
    assert _by_entry(out) == {0: ("b", 50, 50), 1: ("a", 200, 200)}


@pytest.mark.parametrize(
    ("names", "owner_of_bucket_0"),
    [(["w", "w-2"], "w-2"), (["w", "wz"], "w")],
    ids=["prefix-related", "unrelated"],
)
def test_shared_segment_buckets_follow_the_per_segment_consumer_names(
        names: list[str], owner_of_bucket_0: str) -> None:
    """§3.7: sharers sorted by ``<name>-seg-<segmentId>``: "w-2-seg-0" < "w-seg-0"."""
    _, out = _run("stream", [ConsumerSpec(n) for n in names], [(0, ONE_N2)], [E(5, 0, 0x0100)])
    assert [r.consumer_name for r in out.dispatch] == [owner_of_bucket_0]


# ---- QUEUE --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("consumers", "expected"),
    [
        ([ConsumerSpec("c"), ConsumerSpec("a"), ConsumerSpec("b")],
         ["a", "b", "c", "a", "b", "c"]),
        ([ConsumerSpec("a"), ConsumerSpec("b", leave_ms=25), ConsumerSpec("c")],
         ["a", "b", "c", "a", "c", "a"]),
        # A busy consumer is skipped: a takes 1 s per message.
        ([ConsumerSpec("a", capacity_msgs_per_s=1), ConsumerSpec("b")],
         ["a", "b", "b", "b", "b", "b"]),
    ],
)
def test_queue_round_robins_entries_over_free_connected_consumers(
        consumers: list[ConsumerSpec], expected: list[str]) -> None:
    # Entries of different buckets and segments: no ownership in a queue subscription.
    entries = [E(10 * i, 0, h) for i, h in enumerate([0, 0x9000, 0, 0x9000, 0, 0x9000])]
    d, out = _run("queue", consumers, [(0, ONE_N2)], entries)
    assert [r.consumer_name for r in out.dispatch] == expected
    assert d.stats.reassignments == 0


# ---- ordering across segments (STREAM drain checker) ---------------------------------------------
_GATING = ([ConsumerSpec("a", capacity_msgs_per_s=1), ConsumerSpec("b", ack_delay_ms=500)],
           [(0, ONE_N2), (100, SPLIT_N2)], [E(0, 0, 0x0100), E(50, 0, 0x0100), E(150, 1)])


def test_stream_child_waits_until_its_parent_is_drained() -> None:
    _, out = _run("stream", *_GATING)
    assert _by_entry(out) == {0: ("a", 0, 1000), 1: ("a", 1000, 2000), 2: ("a", 2000, 3000)}
    assert out.segment_drains == [SegmentDrainRow(SUB, 0, 100, 2000, 1900)]


def test_checkpoint_dispatches_children_before_parent_drains() -> None:
    # No drain checker: the whole DAG is assignable; seg 0 moves to b at the split (withheld
    # until a acks at 1000) while a gets child 1 at once.
    _, out = _run("checkpoint", *_GATING)
    assert _by_entry(out) == {0: ("a", 0, 1000), 1: ("b", 1000, 1500), 2: ("a", 1000, 2000)}
    assert out.segment_drains == [SegmentDrainRow(SUB, 0, 100, 1500, 1400)]
    assert out.handoffs == [HandoffRow(SUB, 0, 0, "a", "b", 100, 1000, 1, 0)]


def test_sealed_segment_with_nothing_outstanding_drains_at_seal_time() -> None:
    _, out = _run("stream", [ConsumerSpec("a")], [(0, ONE_N2), (100, SPLIT_N2)],
                  [E(10, 0), E(150, 2, 0x9000)])
    assert out.segment_drains == [SegmentDrainRow(SUB, 0, 100, 100, 0)]
    assert _by_entry(out)[1] == ("a", 150, 150)


def test_sealed_backlog_fans_out_to_new_consumers_after_scale_up() -> None:
    # PIP-486 use case 1: one slow consumer, backlog in seg 0 (N=4); the topic splits at 1000
    # and three consumers join: the sealed segment is shared 4 ways until it drains.
    layout = ONE_N4
    split = layout.split(0, now_ms=1000)
    consumers = [ConsumerSpec("a", capacity_msgs_per_s=1)] + [
        ConsumerSpec(n, join_ms=1000, capacity_msgs_per_s=1) for n in "bcd"]
    entries = [E(0, 0, h) for h in (0x0000, 0x4000, 0x8000, 0xC000) * 2]
    d, out = _run("stream", consumers, [(0, layout), (1000, split)], entries, window_ms=1000)
    assert {r.consumer_name for r in out.dispatch} == {"a", "b", "c", "d"}
    assert out.segment_drains == [SegmentDrainRow(SUB, 0, 1000, 3000, 2000)]
    by_window = {w.window_start_ms: w for w in out.window_stats}
    assert (by_window[1000].shared_segments, by_window[1000].drain_mode_segments) == (1, 1)
    assert by_window[3000].sealed_segments_undrained == 0
    assert d.stats.segments_drained == 1


# ---- windows and stats --------------------------------------------------------------------------
def _windows(sub_type: str, consumers: list[ConsumerSpec],
             layouts: list[tuple[int, SegmentLayout]], entries: list[E], window_ms: int,
             end_ms: int | None = None) -> tuple[DispatchOutputs, DispatchOutputs]:
    """The outputs with sparse windows (the default) and with every window
    (``dense_windows``, the tables before issue #30)."""
    _, sparse = _run(sub_type, consumers, layouts, entries, end_ms, window_ms)
    d = SubscriptionDispatcher(SUB, sub_type, consumers, window_ms=window_ms)
    d.dense_windows = True
    _feed(d, _events(layouts, entries))
    d.finish(end_ms)
    return sparse, d.take_outputs()


def _load(ws: int, we: int, msgs: int, busy: int, idle: int, backlog: int,
          name: str = "a") -> ConsumerLoadRow:
    return ConsumerLoadRow(SUB, name, ws, we, msgs, 10 * msgs, busy, idle, backlog)


_SLOW_A = [ConsumerSpec("a", capacity_msgs_per_s=1)]


# (consumers, entries, window_ms, end_ms, dense rows worked by hand, the rows kept)
@pytest.mark.parametrize(
    ("consumers", "entries", "window_ms", "end_ms", "dense", "kept"),
    [
        pytest.param(  # busy 0-1000 and 2500-4500 (2 msgs at 1 msg/s); the last window ends
            # at the last instant + 1
            _SLOW_A, [E(0, 0), E(2500, 0, n=2)], 1000, None,
            [_load(0, 1000, 1, 1000, 0, 0), _load(1000, 2000, 0, 0, 1000, 0),
             _load(2000, 3000, 2, 500, 500, 0), _load(3000, 4000, 0, 1000, 0, 0),
             _load(4000, 4501, 0, 500, 1, 0)],
            [0, 2, 3, 4], id="busy-time-split-at-window-ends"),
        pytest.param(  # runs 0-1000, 1000-3000, 3000-6000: the consumer is busy in every
            # window
            _SLOW_A, [E(0, 0), E(0, 0, n=2), E(0, 0, n=3)], 1000, None,
            [_load(0, 1000, 1, 1000, 0, 5), _load(1000, 2000, 2, 1000, 0, 3),
             _load(2000, 3000, 0, 1000, 0, 3), _load(3000, 4000, 3, 1000, 0, 0),
             _load(4000, 5000, 0, 1000, 0, 0), _load(5000, 6000, 0, 1000, 0, 0),
             _load(6000, 6001, 0, 0, 1, 0)],
            [0, 1, 2, 3, 4, 5, 6], id="backlog-waiting-for-the-owner"),
        pytest.param(  # an instant consumer, two messages 50 windows apart, end at 7000
            [ConsumerSpec("a")], [E(5, 0), E(5005, 0)], 100, 7000,
            [_load(0, 100, 1, 0, 100, 0),
             *[_load(ws, ws + 100, 0, 0, 100, 0) for ws in range(100, 5000, 100)],
             _load(5000, 5100, 1, 0, 100, 0),
             *[_load(ws, ws + 100, 0, 0, 100, 0) for ws in range(5100, 7000, 100)]],
            [0, 50, 69], id="idle-windows-between-and-after-messages"),
        pytest.param(  # b leaves at 300, a window end: its quiet last window is kept
            [ConsumerSpec("a"), ConsumerSpec("b", leave_ms=300)], [E(5, 0), E(450, 0)], 100,
            None,
            [_load(0, 100, 1, 0, 100, 0), _load(0, 100, 0, 0, 100, 0, "b"),
             _load(100, 200, 0, 0, 100, 0), _load(100, 200, 0, 0, 100, 0, "b"),
             _load(200, 300, 0, 0, 100, 0), _load(200, 300, 0, 0, 100, 0, "b"),
             _load(300, 400, 0, 0, 100, 0), _load(400, 451, 1, 0, 51, 0)],
            [0, 1, 5, 7], id="a-leave-at-a-window-end-keeps-its-last-window"),
        pytest.param(  # b joins inside window 200: its first window is kept
            [ConsumerSpec("a"), ConsumerSpec("b", join_ms=250)], [E(5, 0), E(450, 0)], 100,
            None,
            [_load(0, 100, 1, 0, 100, 0), _load(100, 200, 0, 0, 100, 0),
             _load(200, 300, 0, 0, 100, 0), _load(200, 300, 0, 0, 50, 0, "b"),
             _load(300, 400, 0, 0, 100, 0), _load(300, 400, 0, 0, 100, 0, "b"),
             _load(400, 451, 1, 0, 51, 0), _load(400, 451, 0, 0, 51, 0, "b")],
            [0, 3, 6, 7], id="a-join-keeps-its-first-window"),
    ],
)
def test_consumer_load_keeps_only_windows_that_differ_from_the_previous_row_carried(
        consumers: list[ConsumerSpec], entries: list[E], window_ms: int, end_ms: int | None,
        dense: list[ConsumerLoadRow], kept: list[int]) -> None:
    sparse, every = _windows("stream", consumers, [(0, ONE_N1)], entries, window_ms, end_ms)
    assert every.consumer_load == dense
    assert sparse.consumer_load == [dense[i] for i in kept]
    assert fill_idle_rows(sparse.consumer_load, window_ms) == dense


def test_window_stats_track_withheld_buckets() -> None:
    entries = [E(0, 0, 0x9000), E(600, 0, 0x9000)]
    sparse, dense = _windows("stream", [ConsumerSpec("a", capacity_msgs_per_s=1),
                                        ConsumerSpec("b", join_ms=500)], [(0, ONE_N2)], entries,
                             window_ms=250)

    def got(rows: list[WindowStatsRow]) -> list[tuple[int, ...]]:
        return [(w.window_start_ms, w.backlog_messages, w.draining_hashes_count,
                 w.draining_hashes_max, w.draining_hashes_pending_messages,
                 w.draining_hashes_cleared, w.reassignments) for w in rows]

    # a holds the 0x9000 bucket (busy 0-1000) when b joins at 500 and gets it: withheld till
    # 1000; the entry of 600 waits for b. Windows 250 and 750 are the previous ones carried
    # forward.
    assert got(dense.window_stats) == [
        (0, 0, 0, 0, 0, 0, 0), (250, 0, 0, 0, 0, 0, 0), (500, 1, 1, 1, 1, 0, 1),
        (750, 1, 1, 1, 1, 0, 0), (1000, 0, 0, 1, 0, 1, 0)]
    assert got(sparse.window_stats) == [got(dense.window_stats)[i] for i in (0, 2, 4)]
    assert fill_idle_rows(sparse.window_stats, 250) == dense.window_stats


def test_window_stats_keep_the_first_and_last_windows_of_a_quiet_subscription() -> None:
    sparse, dense = _windows("stream", [], [(0, ONE_N1)], [], 100, end_ms=1000)
    assert [w.window_start_ms for w in dense.window_stats] == list(range(0, 1000, 100))
    assert [w.window_start_ms for w in sparse.window_stats] == [0, 900]
    assert fill_idle_rows(sparse.window_stats, 100) == dense.window_stats


def test_idle_windows_are_jumped_over_not_visited(monkeypatch: pytest.MonkeyPatch) -> None:
    visited: list[int] = []
    emit = SubscriptionDispatcher._emit_window

    def spy(self: SubscriptionDispatcher, ws: int, we: int, final: bool = False) -> None:
        visited.append(ws)
        emit(self, ws, we, final)

    monkeypatch.setattr(SubscriptionDispatcher, "_emit_window", spy)
    # a year of 1 ms windows between two messages, an instant and a slow consumer
    _run("stream", [ConsumerSpec("a"), ConsumerSpec("b", capacity_msgs_per_s=1)],
         [(0, ONE_N2)], [E(0, 0, 0x100), E(0, 0, 0x9000), E(YEAR_MS, 0, 0x100)], window_ms=1)
    # b is busy 0-1000: each of those windows is visited (busy time is activity)
    assert len(visited) <= 1000 + 3
    assert visited[-1] == YEAR_MS


YEAR_MS = 365 * 86_400_000


def test_current_assignment_carries_the_layout_epoch_and_drain_state() -> None:
    d = SubscriptionDispatcher(SUB, "stream", [ConsumerSpec("a"), ConsumerSpec("b")])
    assert d.current_assignment() is None
    d.on_layout(0, ONE_N2)
    d.on_layout(100, SPLIT_N2)
    d.advance_to(100)  # seg 0 sealed with nothing outstanding: drained at once
    asg = d.current_assignment()
    assert asg is not None and asg.layout_epoch == 1
    assert {n: [a.segment_id for a in lst] for n, lst in asg.by_consumer.items()} == {
        "a": [1], "b": [2]}
    assert d.bucket_owners == {(1, 0): "a", (2, 0): "b"}
    assert d.drained_segments == {0}


def test_output_columns_exist_without_rows() -> None:
    _, out = _run("stream", [], [(0, ONE_N1)], [])
    assert out.columns("handoffs") == {name: [] for name in HandoffRow._fields}
    assert out.columns("segment_drains")["drain_ms"] == []
    assert out.column_parts("dispatch") == [{name: [] for name in DispatchRow._fields}]


def test_fast_path_dispatch_rows_come_as_columns_in_event_loop_order() -> None:
    consumers = [ConsumerSpec("b"), ConsumerSpec("a")]
    _, out = _run("stream", consumers, [(0, SegmentLayout.initial(2))],
                  [E(1, 1), E(1, 0), E(1, 1), E(5, 0)], end_ms=10)
    block, rows = out.column_parts("dispatch")  # the last instant waited for finish()
    assert rows["entry_id"] == [3]
    # instant 1: consumer a (segment 0) before b (segment 1), each in publish order
    assert block["consumer_name"].tolist() == ["a", "b", "b"]
    assert block["entry_id"].tolist() == [1, 0, 2]
    assert [r.entry_id for r in out.dispatch] == [1, 0, 2, 3]


# ---- input contract -----------------------------------------------------------------------------
def _fresh() -> SubscriptionDispatcher:
    d = SubscriptionDispatcher(SUB, "stream", [ConsumerSpec("a")])
    d.on_layout(0, ONE_N2)
    return d


def _entry(d: SubscriptionDispatcher, t: int, seg: int = 0) -> None:
    d.on_entries([t], [seg], [0], [1], [1], ["p"], [0])


def _unsorted(d: SubscriptionDispatcher) -> None:
    d.on_entries([5, 4], [0, 0], [0, 0], [1, 1], [1, 1], ["p", "p"], [0, 1])


def _older_than_previous(d: SubscriptionDispatcher) -> None:
    _entry(d, 10)
    _entry(d, 9)


def _at_horizon(d: SubscriptionDispatcher) -> None:
    d.advance_to(10)
    _entry(d, 10)


def _unknown_segment(d: SubscriptionDispatcher) -> None:
    _entry(d, 10, seg=7)


def _after_seal(d: SubscriptionDispatcher) -> None:
    d.on_layout(100, SPLIT_N2)
    _entry(d, 101, seg=0)


def _hash_out_of_range(d: SubscriptionDispatcher) -> None:
    d.on_entries([1], [0], [70000], [1], [1], ["p"], [0])


def _after_finish(d: SubscriptionDispatcher) -> None:
    d.finish()
    _entry(d, 10)


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (_unsorted, "non-decreasing"),
        (_older_than_previous, "before the previous input"),
        (_at_horizon, "not after the horizon"),
        (_unknown_segment, "segment 7 is not in the layout"),
        (_after_seal, "after it was sealed"),
        (_hash_out_of_range, "entry_hash_min"),
        (_after_finish, "after finish"),
    ],
)
def test_input_contract_violations_raise(action: Callable[[SubscriptionDispatcher], None],
                                         message: str) -> None:
    d = _fresh()
    with pytest.raises(ValueError, match=message):
        action(d)


def test_entries_before_any_layout_raise() -> None:
    d = SubscriptionDispatcher(SUB, "stream", [])
    with pytest.raises(ValueError, match="no layout yet"):
        _entry(d, 0)


def test_entry_published_at_the_seal_instant_is_accepted() -> None:
    d = _fresh()
    d.on_layout(100, SPLIT_N2)
    _entry(d, 100, seg=0)
    d.finish()
    assert [r.consumer_name for r in d.take_outputs().dispatch] == ["a"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"leave_ms": 0}, "must be after join_ms"), ({"capacity_msgs_per_s": 0}, "> 0"),
     ({"ack_delay_ms": -1}, ">= 0")],
)
def test_consumer_spec_validation(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ConsumerSpec("a", **kwargs)


# ---- properties: chunking invariance, single holder per bucket, per-bucket order ----------------
@st.composite
def scenarios(draw: st.DrawFn,
              instant: bool = False) -> tuple[str, list[ConsumerSpec], list[Event]]:
    """A subscription, its consumers and the input events. ``instant``: consumers without
    capacity limit or ack delay (the dispatcher's fast path), and no QUEUE."""
    sub_type = draw(st.sampled_from(["stream", "checkpoint"] if instant
                                    else ["stream", "checkpoint", "queue"]))
    budget = draw(st.sampled_from([1, 2, 4]))
    layout0 = SegmentLayout.initial(draw(st.integers(1, 2)), bucket_budget=budget)
    layouts = [(0, layout0)]
    change_t = draw(st.one_of(st.none(), st.integers(1, 1500)))
    if change_t is not None:
        sid = draw(st.sampled_from(sorted(layout0.active_segments)))
        op = draw(st.sampled_from(["split", "rebucket"]))
        seg = layout0.segment(sid)
        if op == "rebucket":
            layouts.append((change_t, layout0.rebucket(sid, seg.bucket_count * 2, change_t)))
        else:
            layouts.append((change_t, layout0.split(sid, now_ms=change_t)))
    consumers = []
    for i in range(draw(st.integers(0, 4))):
        join = draw(st.sampled_from([0, 0, 100, 700, 1200]))
        leave = draw(st.one_of(st.none(), st.integers(join + 1, join + 2000)))
        consumers.append(ConsumerSpec(
            f"c{i}", join_ms=join, leave_ms=leave,
            capacity_msgs_per_s=None if instant else draw(st.sampled_from([None, 2.0, 5.0, 30.0])),
            ack_delay_ms=0 if instant else draw(st.sampled_from([0, 0, 7, 150]))))
    times = sorted(draw(st.lists(st.integers(0, 2500), min_size=1, max_size=40)))
    entries = []
    for t in times:
        in_force = [lay for lt, lay in layouts if lt <= t][-1]
        sid = draw(st.sampled_from(sorted(in_force.active_segments)))
        entries.append(E(t, sid, draw(st.integers(0, 0xFFFF)), draw(st.integers(1, 3))))
    return sub_type, consumers, _events(layouts, entries)


def _run_chunked(sub_type: str, consumers: list[ConsumerSpec], events: list[Event],
                 cuts: list[int], advance: bool, repickle: bool, fast_forward: bool = True,
                 window_ms: int = 400, dense: bool = False,
                 complete: bool = False) -> DispatchOutputs:
    """The events in chunks cut at ``cuts``, each chunk's outputs taken; ``complete``: every
    ``on_entries`` call followed by a later input (or none) says so (:func:`_feed`)."""
    d = SubscriptionDispatcher(SUB, sub_type, consumers, window_ms=window_ms)
    d.fast_forward = fast_forward
    d.dense_windows = dense
    total = DispatchOutputs()
    bounds = [0, *sorted({c % (len(events) + 1) for c in cuts}), len(events)]
    horizon = -1
    for lo, hi in itertools.pairwise(bounds):
        if lo >= hi:
            continue
        _feed(d, events[lo:hi], (events[hi][0] if hi < len(events) else None) if complete
              else -1)
        if advance and hi < len(events):
            h = events[hi][0] - 1
            if h >= horizon:
                d.advance_to(h)
                horizon = h
        if repickle:
            d = pickle.loads(pickle.dumps(d))
        total.extend(d.take_outputs())
    d.finish(3000)
    total.extend(d.take_outputs())
    return total


_PROPS = settings(max_examples=examples(150), deadline=None,
                  suppress_health_check=[HealthCheck.too_slow])


@_PROPS
@given(scenarios(), st.lists(st.integers(0, 100), max_size=6), st.booleans(), st.booleans())
def test_outputs_do_not_depend_on_chunking_horizons_or_pickling(
        scenario: tuple[str, list[ConsumerSpec], list[Event]], cuts: list[int], advance: bool,
        repickle: bool) -> None:
    sub_type, consumers, events = scenario
    whole = _run_chunked(sub_type, consumers, events, [], False, False)
    assert _run_chunked(sub_type, consumers, events, cuts, advance, repickle) == whole


@_PROPS
@given(scenarios(instant=True), st.lists(st.integers(0, 100), max_size=6), st.booleans())
def test_instant_consumer_fast_path_equals_the_event_loop(
        scenario: tuple[str, list[ConsumerSpec], list[Event]], cuts: list[int],
        advance: bool) -> None:
    sub_type, consumers, events = scenario
    loop = _run_chunked(sub_type, consumers, events, cuts, advance, False, fast_forward=False)
    assert _run_chunked(sub_type, consumers, events, cuts, advance, False) == loop


@_PROPS
@given(scenarios(instant=True), st.lists(st.integers(0, 100), max_size=6), st.booleans())
def test_complete_entries_taken_in_bulk_equal_the_event_loop(
        scenario: tuple[str, list[ConsumerSpec], list[Event]], cuts: list[int],
        advance: bool) -> None:
    """``on_entries(complete=True)`` (the last instant taken by the fast path too, then
    advanced to) gives the event loop's rows."""
    sub_type, consumers, events = scenario
    loop = _run_chunked(sub_type, consumers, events, cuts, advance, False, fast_forward=False)
    assert _run_chunked(sub_type, consumers, events, cuts, advance, False,
                        complete=True) == loop


def test_complete_entries_take_the_last_instant_in_bulk_and_advance() -> None:
    """A complete call leaves nothing queued (its last instant dispatched at once) and is
    advanced to its last instant: a later input at that instant is refused."""
    d = SubscriptionDispatcher(SUB, "stream", [ConsumerSpec("a")])
    d.on_layout(0, ONE_N1)
    d.on_entries([5, 9], [0, 0], [0, 0], [1, 1], [1, 1], ["p", "p"], [0, 1], complete=True)
    assert [r.dispatch_time_ms for r in d.take_outputs().dispatch] == [5, 9]
    with pytest.raises(ValueError, match="horizon"):
        d.on_entries([9], [0], [0], [1], [1], ["p"], [2])


def test_a_pickled_dispatcher_mid_run_restores_every_object() -> None:
    """The compact state (``__getstate__``) gives back the same consumers (entries still
    unacked at them shared with the ack events), counters, queued input and window rows: the
    restored dispatcher pickles as its own restoration does and ends with the same rows."""
    consumers = [ConsumerSpec("a", capacity_msgs_per_s=2.0, ack_delay_ms=150),
                 ConsumerSpec("b", join_ms=300, leave_ms=2000, leave_how=LeaveHow.CRASH)]
    entries = [E(t, 0, h) for t, h in [(0, 1), (10, 0x9000), (400, 5), (900, 0xF000)]]
    d = SubscriptionDispatcher(SUB, "stream", consumers, window_ms=400)
    _feed(d, _events([(0, ONE_N2)], entries))
    d.on_layout(1000, ONE_N2)  # queued: a later input has not come
    restored = pickle.loads(pickle.dumps(d))
    again = pickle.dumps(restored)  # (the first blob's memo differs only by shared names)
    assert pickle.dumps(pickle.loads(again)) == again
    assert restored.stats == d.stats and restored.stats.deliveries > 0
    for name, c in d._consumers.items():
        r = restored._consumers[name]
        assert r.spec == c.spec
        assert (r.name, r.free_at, r.gen, r.connected, sorted(r.unacked)) == (
            c.name, c.free_at, c.gen, c.connected, sorted(c.unacked))
    acks = {id(e) for *_, e, _ in restored._heap if not isinstance(e, str)}
    assert acks >= {id(e) for c in restored._consumers.values() for e in c.unacked.values()}
    for x in (d, restored):
        x.finish(3000)
    assert restored.take_outputs() == d.take_outputs()


def test_fast_path_leaves_the_event_loops_state() -> None:
    layout = SegmentLayout.initial(2, bucket_budget=4)  # segments 0 and 1
    split = layout.split(0, now_ms=500)  # 0 → 2 and 3
    # spans cut by the split, by b's join and by window ends; the last instant waits for input
    entries = [E(0, 0, 1), E(0, 1, 0xF000), E(10, 0, 5), E(70_000, 2, 9), E(70_000, 3, 0x5000),
               E(70_000, 1, 0x9000), E(150_000, 3, 0x6000), E(200_000, 1, 3)]
    consumers = [ConsumerSpec("a"), ConsumerSpec("b", join_ms=100_000)]
    dispatchers = []
    for fast in (True, False):
        d = SubscriptionDispatcher(SUB, "stream", consumers)
        d.fast_forward = fast
        _feed(d, _events([(0, layout), (500, split)], entries))
        dispatchers.append(d)
    fast_d, loop_d = dispatchers
    assert fast_d.stats == loop_d.stats
    assert fast_d.stats.entries_acked == 7
    assert fast_d.take_outputs() == loop_d.take_outputs()
    loop_d.fast_forward = True
    assert pickle.dumps(fast_d) == pickle.dumps(loop_d)


@_PROPS
@given(scenarios())
def test_every_entry_has_exactly_one_dispatch_row(
        scenario: tuple[str, list[ConsumerSpec], list[Event]]) -> None:
    sub_type, consumers, events = scenario
    out = _run_chunked(sub_type, consumers, events, [], False, False)
    n_entries = sum(1 for _, x in events if isinstance(x, E))
    assert sorted(r.entry_id for r in out.dispatch) == list(range(n_entries))


@_PROPS
@given(scenarios().filter(lambda s: s[0] != "queue"))
def test_a_bucket_is_never_unacked_at_two_consumers_at_once(
        scenario: tuple[str, list[ConsumerSpec], list[Event]]) -> None:
    sub_type, consumers, events = scenario
    out = _run_chunked(sub_type, consumers, events, [], False, False)
    held: dict[tuple[int, int], list[tuple[str, int, int]]] = {}  # (consumer, dispatch, ack)
    for r in out.dispatch:
        if r.consumer_name is not None:
            assert r.dispatch_time_ms is not None and r.ack_time_ms is not None
            held.setdefault((r.segment_id, r.bucket_index), []).append(
                (r.consumer_name, r.dispatch_time_ms, r.ack_time_ms))
    for intervals in held.values():
        for c1, d1, _ in intervals:
            for c2, d2, a2 in intervals:
                if c2 != c1 and d2 <= d1:
                    assert a2 <= d1, ((c2, d2, a2), (c1, d1))


@_PROPS
@given(scenarios().filter(lambda s: s[0] != "queue"))
def test_entries_of_one_bucket_are_dispatched_in_publish_order(
        scenario: tuple[str, list[ConsumerSpec], list[Event]]) -> None:
    sub_type, consumers, events = scenario
    out = _run_chunked(sub_type, consumers, events, [], False, False)
    last: dict[tuple[int, int], int] = {}
    for r in sorted(out.dispatch, key=lambda x: x.entry_id):  # entry_id = publish order
        if r.dispatch_time_ms is None:
            last[(r.segment_id, r.bucket_index)] = 1 << 62  # nothing later may be dispatched
            continue
        key = (r.segment_id, r.bucket_index)
        assert r.dispatch_time_ms >= last.get(key, 0), r
        last[key] = r.dispatch_time_ms


@_PROPS
@given(scenarios().filter(lambda s: s[0] == "stream"))
def test_stream_child_entries_are_dispatched_only_after_parents_drain(
        scenario: tuple[str, list[ConsumerSpec], list[Event]]) -> None:
    sub_type, consumers, events = scenario
    out = _run_chunked(sub_type, consumers, events, [], False, False)
    layouts = [x for _, x in events if isinstance(x, SegmentLayout)]
    final = layouts[-1]
    drained = {r.segment_id: r.drained_at_ms for r in out.segment_drains}
    for r in out.dispatch:
        if r.dispatch_time_ms is None:
            continue
        for parent in final.segment(r.segment_id).parent_ids:
            assert parent in drained and drained[parent] <= r.dispatch_time_ms, (r, drained)


@_PROPS
@given(scenarios(), st.sampled_from([7, 50, 400]), st.lists(st.integers(0, 100), max_size=6),
       st.booleans())
def test_sparse_windows_filled_back_equal_every_window(
        scenario: tuple[str, list[ConsumerSpec], list[Event]], window_ms: int,
        cuts: list[int], advance: bool) -> None:
    sub_type, consumers, events = scenario
    dense = _run_chunked(sub_type, consumers, events, [], False, False, window_ms=window_ms,
                         dense=True)
    sparse = _run_chunked(sub_type, consumers, events, cuts, advance, True, window_ms=window_ms)
    assert fill_idle_rows(sparse.consumer_load, window_ms) == dense.consumer_load
    assert fill_idle_rows(sparse.window_stats, window_ms) == dense.window_stats
    assert sparse.dispatch == dense.dispatch


def test_memoized_owners_equal_the_coordinators_assignment() -> None:
    """``_assigned_owners`` (memoized by what the assignment reads) gives the coordinator's
    owners for every layout shape, drained set and connected set, also when a layout of the
    same shape created at another time hits the memo, and never one of another shape."""
    one, later = SegmentLayout.initial(1, bucket_budget=4), SegmentLayout.initial(
        1, bucket_budget=4, now_ms=5_000)
    two = SegmentLayout.initial(2, bucket_budget=4)
    split = two.split(0, now_ms=100)
    layouts = [one, later, ONE_N2, two, split, split.rebucket(1, 4, 200),
               one.rebucket(0, 8, 300)]
    for sub_type in ("stream", "checkpoint"):
        for names in (["a"], ["a", "b"], ["a", "b", "c", "d", "e"]):
            coord = SubscriptionCoordinator(SUB, sub_type)
            for n in names:
                coord.register(n)
            for layout in layouts:
                for drained in (set(), {0}):
                    for connected in (set(names), set(names[1:])):
                        want = bucket_owners(coord.compute_assignment(layout, drained)
                                             .by_consumer, layout, connected)
                        got = _assigned_owners(coord, layout, drained, connected)
                        assert got == want and list(got) == list(want)
