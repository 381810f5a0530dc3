"""Coordinator assignment (reference §6) and bucket spread (reference §3.7)."""

from __future__ import annotations

import pytest

from pipelines.core.assignment import (
    SegmentAssignment,
    SubscriptionCoordinator,
    SubscriptionType,
    assign_segments,
    assignable_segments,
    bucket_owners,
    bucket_spread,
)
from pipelines.core.buckets import bucket_of, bucket_ranges, equal_width_splits
from pipelines.core.layout import SegmentInfo, SegmentLayout, SegmentState


def _seg(sid: int, start: int, end: int, n: int = 1) -> SegmentInfo:
    return SegmentInfo(sid, start, end, bucket_splits=tuple(equal_width_splits(n)))


def _names(k: int) -> list[str]:
    # Deliberately passed in reverse order: the functions must sort by name.
    return [f"c{j}" for j in reversed(range(k))]


# ---- bucket_spread: every [calc] vector of reference §3.7 ---------------------------------------
@pytest.mark.parametrize(
    ("n", "k", "expected"),
    [
        (4, 1, [[0, 1, 2, 3]]),
        (4, 2, [[0, 1], [2, 3]]),
        (4, 3, [[0], [1], [2, 3]]),
        (4, 4, [[0], [1], [2], [3]]),
        (4, 5, [[], [0], [1], [2], [3]]),
        (8, 3, [[0, 1], [2, 3, 4], [5, 6, 7]]),
        (8, 5, [[0], [1, 2], [3], [4, 5], [6, 7]]),
        (16, 3, [list(range(0, 5)), list(range(5, 10)), list(range(10, 16))]),
        (3, 2, [[0], [1, 2]]),
        (5, 3, [[0], [1, 2], [3, 4]]),
    ],
)
def test_bucket_spread_matches_reference_vectors(n: int, k: int,
                                                 expected: list[list[int]]) -> None:
    assert bucket_spread(n, _names(k), 0) == {f"c{j}": expected[j] for j in range(k)}


def test_bucket_spread_with_more_consumers_than_buckets_leaves_first_consumer_empty() -> None:
    assert bucket_spread(4, ["e", "d", "c", "b", "a"], 0)["a"] == []


def test_bucket_spread_without_consumers_is_empty() -> None:
    assert bucket_spread(4, [], 0) == {}


def test_bucket_spread_sorts_consumers_by_name() -> None:
    assert bucket_spread(2, ["zeta", "alpha"], 0) == {"alpha": [0], "zeta": [1]}


@pytest.mark.parametrize(
    ("names", "segment_id", "first"),
    [
        (["w", "w-2"], 0, "w-2"),  # "w-2-seg-0" < "w-seg-0" although "w" < "w-2"
        (["a", "a-b"], 3, "a-b"),  # '-' (0x2d) after the shorter name sorts before 's'
        (["w", "w+2"], 0, "w+2"),  # '+' (0x2b) < '-' (0x2d)
        (["w", "w.2"], 0, "w"),  # '.' (0x2e) > '-': the bare-name order holds
        (["w", "wz"], 0, "w"),  # "w-seg-0" < "wz-seg-0": '-' < 'z'
        (["c1", "c10"], 7, "c1"),  # "c1-seg-7" < "c10-seg-7": '-' < '0'
        (["\uffff", "\U00010000"], 0, "\U00010000"),  # Java order: UTF-16 code units
    ],
    ids=["dash-suffix", "other-segment", "plus-suffix", "dot-suffix", "letter-suffix",
         "digit-suffix",
         "utf16-order"],
)
def test_bucket_spread_sorts_by_per_segment_consumer_name(names: list[str], segment_id: int,
                                                          first: str) -> None:
    """Reference §3.7: the broker sorts a shared segment's consumers by the per-segment v4
    consumer's name, ``<consumerName>-seg-<segmentId>``."""
    spread = bucket_spread(2, names, segment_id)
    assert spread[first] == [0]
    assert sorted(spread) == sorted(names)


@pytest.mark.parametrize(
    ("n", "names", "message"),
    [(0, ["a"], "at least 1 bucket"), (2, ["a", "a"], "duplicate consumer name")],
)
def test_bucket_spread_rejects_bad_input(n: int, names: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bucket_spread(n, names, 0)


@pytest.mark.parametrize(
    ("hash_b", "owner"),
    [(0x69B2, "c1"), (0xA5D1, "c2"), (0x15A0, "c1"), (0x0000, "c1")],  # "a", "k", "key-1", keyless
)
def test_worked_example_two_sharers_of_four_buckets(hash_b: int, owner: str) -> None:
    layout = SegmentLayout.initial(1, bucket_budget=4)
    ranges = tuple(bucket_ranges(layout.segment(0).bucket_splits))
    owners = bucket_owners({"c2": [SegmentAssignment(0, ranges)],
                            "c1": [SegmentAssignment(0, ranges)]}, layout)
    assert owners[(0, bucket_of(layout.segment(0).bucket_splits, hash_b))] == owner


@pytest.mark.parametrize(
    ("connected", "expected"),
    [
        (None, {(0, 0): "a", (0, 1): "b", (1, 0): "c", (1, 1): "c"}),
        ({"a", "b", "c"}, {(0, 0): "a", (0, 1): "b", (1, 0): "c", (1, 1): "c"}),
        # b lost its connection (within the grace period): a takes segment 0's buckets
        ({"a", "c"}, {(0, 0): "a", (0, 1): "a", (1, 0): "c", (1, 1): "c"}),
        # c, the sole owner of segment 1, lost it: segment 1 has no owner
        ({"a", "b"}, {(0, 0): "a", (0, 1): "b"}),
    ],
    ids=["all", "all-connected", "lost-sharer", "lost-sole-owner"],
)
def test_bucket_owners_spread_over_connected_consumers_only(
        connected: set[str] | None, expected: dict[tuple[int, int], str]) -> None:
    """§6.1, §3.7: a session within its grace period keeps its assignment, but only the
    consumers connected to the broker own buckets."""
    layout = SegmentLayout.initial(2, bucket_budget=4)  # N=2 each
    ranges = tuple(bucket_ranges(layout.segment(0).bucket_splits))
    assignment = {"a": [SegmentAssignment(0, ranges)], "b": [SegmentAssignment(0, ranges)],
                  "c": [SegmentAssignment(1)]}
    assert bucket_owners(assignment, layout, connected) == expected


# ---- assign_segments (reference §6.3) -----------------------------------------------------------
def test_fewer_consumers_than_segments_assigns_round_robin_as_sole_owners() -> None:
    segs = list(SegmentLayout.initial(3, bucket_budget=4).segments.values())
    assert assign_segments(segs, ["b", "a"]) == {
        "a": [SegmentAssignment(0), SegmentAssignment(2)],
        "b": [SegmentAssignment(1)],
    }


def test_equal_consumers_and_segments_gives_one_segment_each() -> None:
    segs = list(SegmentLayout.initial(2, bucket_budget=4).segments.values())
    assert assign_segments(segs, ["b", "a"]) == {"a": [SegmentAssignment(0)],
                                                 "b": [SegmentAssignment(1)]}


def test_segments_are_ordered_by_range_start_then_range_end_then_id() -> None:
    segs = [_seg(0, 0, 65535), _seg(1, 0, 32767), _seg(2, 32768, 65535), _seg(3, 0, 32767)]
    result = assign_segments(segs, ["a", "b", "c", "d"])
    assert [result[n][0].segment_id for n in "abcd"] == [1, 3, 0, 2]


def test_surplus_consumers_share_a_segment_with_its_full_boundary_list() -> None:
    layout = SegmentLayout.initial(1, bucket_budget=4)
    full = ((0, 16383), (16384, 32767), (32768, 49151), (49152, 65535))
    assert assign_segments(list(layout.segments.values()), ["c", "a", "b"]) == {
        "a": [SegmentAssignment(0, full)],
        "b": [SegmentAssignment(0, full)],
        "c": [SegmentAssignment(0, full)],
    }


@pytest.mark.parametrize(
    ("segments", "k", "expected"),
    [
        # Surplus handed out round-robin: 2 segments of N=4, 5 consumers -> owners [3, 2].
        ([_seg(0, 0, 32767, 4), _seg(1, 32768, 65535, 4)], 5,
         {"c0": (0, True), "c1": (0, True), "c2": (0, True), "c3": (1, True), "c4": (1, True)}),
        # Capacity caps: N=1 takes no sharer, N=2 takes one; the rest are idle.
        ([_seg(0, 0, 32767, 1), _seg(1, 32768, 65535, 2)], 5,
         {"c0": (0, False), "c1": (1, True), "c2": (1, True), "c3": None, "c4": None}),
        # No segment with spare capacity: every extra consumer idles.
        ([_seg(0, 0, 65535, 1)], 3, {"c0": (0, False), "c1": None, "c2": None}),
    ],
)
def test_surplus_branch_respects_bucket_capacity_and_idles_the_rest(
        segments: list[SegmentInfo], k: int,
        expected: dict[str, tuple[int, bool] | None]) -> None:
    result = assign_segments(segments, _names(k))
    got = {name: (None if not asg else (asg[0].segment_id, asg[0].is_shared))
           for name, asg in result.items()}
    assert got == expected
    assert all(len(asg) <= 1 for asg in result.values())


def test_sharers_receive_identical_full_boundary_lists() -> None:
    segs = [_seg(0, 0, 65535, 3)]
    result = assign_segments(segs, ["a", "b"])
    assert result["a"][0].bucket_ranges == result["b"][0].bucket_ranges == (
        (0, 21844), (21845, 43689), (43690, 65535))


def test_no_consumers_gives_empty_assignment() -> None:
    assert assign_segments([_seg(0, 0, 65535, 4)], []) == {}


def test_no_segments_leaves_every_consumer_idle() -> None:
    assert assign_segments([], ["b", "a"]) == {"a": [], "b": []}


# ---- assignable_segments (reference §6.2) --------------------------------------------------------
_SPLIT = SegmentLayout.initial(1, bucket_budget=4).split(0, now_ms=100)  # 0 sealed; 1, 2 active
_SPLIT_TWICE = _SPLIT.split(1, now_ms=200)  # 0, 1 sealed; 2, 3, 4 active


@pytest.mark.parametrize(
    ("layout", "drained", "expected"),
    [
        (SegmentLayout.initial(2), set(), [0, 1]),
        (_SPLIT, set(), [0]),  # sealed undrained parent; children gated
        (_SPLIT, {0}, [1, 2]),  # parent drained: sealed retires, children assignable
        (_SPLIT, None, [0, 1, 2]),  # no drain checker: the whole DAG
        (_SPLIT_TWICE, set(), [0, 1]),  # sealed segments are not parent-checked
        (_SPLIT_TWICE, {0}, [1, 2]),
        (_SPLIT_TWICE, {0, 1}, [2, 3, 4]),
        (_SPLIT_TWICE.prune(0), set(), [1, 2]),  # pruned parent counts as drained
    ],
)
def test_assignable_segments_follows_drain_checker(layout: SegmentLayout, drained: set[int] | None,
                                                   expected: list[int]) -> None:
    assert [s.segment_id for s in assignable_segments(layout, drained)] == expected


def test_parent_missing_from_layout_counts_as_drained() -> None:
    child = SegmentInfo(5, 0, 65535, parent_ids=(3,))
    sealed_parent = SegmentInfo(4, 0, 65535, state=SegmentState.SEALED, child_ids=(6,))
    gated = SegmentInfo(6, 0, 65535, parent_ids=(3, 4))
    layout = SegmentLayout(3, 7, {4: sealed_parent, 5: child, 6: gated})
    assert [s.segment_id for s in assignable_segments(layout, set())] == [4, 5]


# ---- SubscriptionCoordinator (reference §6.1) ----------------------------------------------------
def test_registering_a_new_name_triggers_a_rebalance() -> None:
    coord = SubscriptionCoordinator("sub")
    assert coord.register("a", consumer_id=1) is True
    assert coord.rebalances == 1
    assert coord.consumer_names == ["a"]


def test_reconnect_of_an_existing_name_does_not_rebalance() -> None:
    coord = SubscriptionCoordinator("sub")
    coord.register("a", consumer_id=1)
    assert coord.register("a", consumer_id=2) is False
    assert (coord.rebalances, coord.consumer_id("a")) == (1, 2)


@pytest.mark.parametrize(
    ("consumer_id", "removed", "names"),
    [(None, True, []), (2, True, []), (1, False, ["a"])],  # 1 is stale after the reconnect
)
def test_unregister_ignores_a_stale_consumer_id(consumer_id: int | None, removed: bool,
                                                names: list[str]) -> None:
    coord = SubscriptionCoordinator("sub")
    coord.register("a", consumer_id=1)
    coord.register("a", consumer_id=2)
    assert coord.unregister("a", consumer_id) is removed
    assert coord.consumer_names == names


def test_unregister_of_unknown_name_is_ignored() -> None:
    coord = SubscriptionCoordinator("sub")
    assert coord.unregister("ghost") is False
    assert coord.rebalances == 0


@pytest.mark.parametrize(
    ("sub_type", "drained", "expected"),
    [
        ("STREAM", set(), {"a": [0], "b": [0]}),  # only the sealed parent, shared
        ("stream", {0}, {"a": [1], "b": [2]}),
        ("checkpoint", set(), {"a": [1, 2], "b": [0]}),  # whole DAG, ordered by range
        ("queue", {0}, {"a": [1, 2], "b": [0]}),
    ],
)
def test_coordinator_uses_drain_checker_only_for_stream(sub_type: str, drained: set[int],
                                                        expected: dict[str, list[int]]) -> None:
    coord = SubscriptionCoordinator("sub", sub_type)
    coord.register("b")
    coord.register("a")
    asg = coord.compute_assignment(_SPLIT, drained)
    assert asg.layout_epoch == _SPLIT.epoch == 1
    assert {n: [a.segment_id for a in lst] for n, lst in asg.by_consumer.items()} == expected


def test_subscription_type_parse_is_case_insensitive_and_rejects_unknown() -> None:
    assert SubscriptionType.parse("Queue") is SubscriptionType.QUEUE
    with pytest.raises(ValueError, match="unknown subscription type"):
        SubscriptionType.parse("exclusive")


def test_bucket_owners_gives_sole_owner_every_bucket() -> None:
    layout = SegmentLayout.initial(2, bucket_budget=4)  # N=2 per segment
    owners = bucket_owners({"a": [SegmentAssignment(1)], "b": [SegmentAssignment(0)]}, layout)
    assert owners == {(0, 0): "b", (0, 1): "b", (1, 0): "a", (1, 1): "a"}
