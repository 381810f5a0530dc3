"""SegmentLayout DAG (reference §2)."""

import pickle

import numpy as np
import pytest

from pipelines.core.layout import SegmentLayout, SegmentState


def ranges(layout):
    return [(s.range_start, s.range_end) for s in layout.active_segments.values()]


@pytest.mark.parametrize(
    ("n", "expected_ranges", "bucket_count"),
    [
        (1, [(0, 65535)], 4),
        (2, [(0, 32767), (32768, 65535)], 2),
        (3, [(0, 21844), (21845, 43689), (43690, 65535)], 1),
        (4, [(0, 16383), (16384, 32767), (32768, 49151), (49152, 65535)], 1),
        (5, [(0, 13106), (13107, 26213), (26214, 39320), (39321, 52427), (52428, 65535)], 1),
        (6, [(0, 10921), (10922, 21843), (21844, 32765), (32766, 43687), (43688, 54609),
             (54610, 65535)], 1),
    ],
)
def test_initial_layout_tiles_ring_with_budget_share(n, expected_ranges, bucket_count):
    layout = SegmentLayout.initial(n, bucket_budget=4)
    assert ranges(layout) == expected_ranges
    assert {s.bucket_count for s in layout.active_segments.values()} == {bucket_count}
    assert (layout.epoch, layout.next_segment_id) == (0, n)


def test_initial_layout_of_seven_segments_ends_last_at_max_hash():
    layout = SegmentLayout.initial(7)
    assert ranges(layout)[0] == (0, 9361)
    assert ranges(layout)[-1] == (56172, 65535)


def test_initial_layout_rejects_zero_segments():
    with pytest.raises(ValueError, match="at least 1 segment"):
        SegmentLayout.initial(0)


def test_split_halves_range_and_buckets_and_seals_parent():
    layout = SegmentLayout.initial(1, bucket_budget=4).split(0, now_ms=500)
    parent, c1, c2 = layout.segments[0], layout.segments[1], layout.segments[2]
    assert (c1.range_start, c1.range_end, c2.range_start, c2.range_end) == (0, 32767, 32768, 65535)
    assert (c1.bucket_count, c2.bucket_count) == (2, 2)
    assert parent.state is SegmentState.SEALED
    assert (parent.child_ids, parent.sealed_at_epoch, parent.sealed_at_ms) == ((1, 2), 1, 500)
    assert (c1.parent_ids, c1.created_at_epoch, c1.created_at_ms) == ((0,), 1, 500)
    assert (layout.epoch, layout.next_segment_id) == (1, 3)


@pytest.mark.parametrize(("parent_n", "child_n"), [(4, 2), (2, 1), (1, 1), (3, 1), (5, 2), (8, 4)])
def test_split_children_get_half_the_parent_buckets(parent_n, child_n):
    layout = SegmentLayout.initial(1, bucket_budget=4)
    if parent_n != 4:
        layout = layout.rebucket(0, parent_n)
    sid = max(layout.active_segments)
    split = layout.split(sid)
    assert [s.bucket_count for s in split.active_segments.values()] == [child_n, child_n]


def test_split_of_single_hash_segment_is_rejected():
    layout = SegmentLayout.initial(1)
    sid = 0
    while layout.segments[sid].range_size > 1:
        layout = layout.split(sid)
        sid = layout.next_segment_id - 2  # the lower child
    with pytest.raises(ValueError, match=f"segment {sid} covers a single hash"):
        layout.split(sid)


def test_split_of_sealed_segment_is_rejected():
    layout = SegmentLayout.initial(1).split(0)
    with pytest.raises(ValueError, match="segment 0 is SEALED"):
        layout.split(0)


def test_merge_of_adjacent_segments_unions_range_and_sums_buckets():
    layout = SegmentLayout.initial(2, bucket_budget=4).merge(1, 0, now_ms=9)
    merged = layout.segments[2]
    assert (merged.range_start, merged.range_end, merged.bucket_count) == (0, 65535, 4)
    assert merged.parent_ids == (1, 0)  # call order
    assert layout.segments[0].child_ids == layout.segments[1].child_ids == (2,)
    assert (layout.epoch, layout.next_segment_id) == (1, 3)


def test_merge_clamps_bucket_count_to_max_buckets_per_segment():
    layout = SegmentLayout.initial(2).rebucket(0, 8).rebucket(1, 8)
    merged = layout.merge(2, 3, max_buckets_per_segment=10)
    assert merged.segments[4].bucket_count == 10


def test_merge_of_non_adjacent_segments_is_rejected():
    layout = SegmentLayout.initial(3)
    with pytest.raises(ValueError, match=r"segments 0 .* and 2 .* are not adjacent"):
        layout.merge(0, 2)


def test_rebucket_creates_same_range_successor_with_new_bucket_count():
    layout = SegmentLayout.initial(1, bucket_budget=4).rebucket(0, 16, now_ms=3)
    succ = layout.segments[1]
    assert (succ.range_start, succ.range_end, succ.bucket_count, succ.parent_ids) == (
        0, 65535, 16, (0,))
    assert layout.segments[0].child_ids == (1,)
    assert (layout.epoch, layout.next_segment_id) == (1, 2)


def test_rebucket_to_same_bucket_count_is_rejected():
    with pytest.raises(ValueError, match="segment 0 already has 4 buckets"):
        SegmentLayout.initial(1, bucket_budget=4).rebucket(0, 4)


def test_prune_removes_sealed_segment_and_its_links_without_touching_next_id():
    layout = SegmentLayout.initial(1).split(0).prune(0)
    assert 0 not in layout.segments
    assert layout.segments[1].parent_ids == ()
    assert (layout.epoch, layout.next_segment_id) == (2, 3)


def test_prune_of_active_segment_is_rejected():
    with pytest.raises(ValueError, match="segment 0 is ACTIVE"):
        SegmentLayout.initial(1).prune(0)


def test_merge_depth_counts_merge_nodes_in_lineage_and_ignores_splits():
    layout = SegmentLayout.initial(2).merge(0, 1)  # 2 = merge(0, 1)
    layout = layout.split(2)  # 3, 4
    layout = layout.merge(3, 4)  # 5
    assert layout.merge_depth(3) == 1
    assert layout.merge_depth(5) == 2
    assert layout.lineage(5) == [0, 1, 2, 3, 4, 5]


def test_find_active_segment_returns_the_covering_segment():
    layout = SegmentLayout.initial(4)
    assert layout.find_active_segment(16384).segment_id == 1


def test_route_array_matches_find_active_segment():
    layout = SegmentLayout.initial(3).split(1).merge(0, 3)
    hashes = np.arange(0, 65536, 113)
    expected = [layout.find_active_segment(int(h)).segment_id for h in hashes]
    assert layout.route_array(hashes).tolist() == expected


def test_segment_topic_name_uses_hex_range_and_id():
    layout = SegmentLayout.initial(2)
    assert layout.segments[0].topic_name("orders") == "segment://public/default/orders/0000-7fff-0"


def test_layout_round_trips_through_pickle():
    layout = SegmentLayout.initial(2).split(0)
    _ = layout.active_segments  # populate the cached view
    assert pickle.loads(pickle.dumps(layout)) == layout
