"""AutoScaleConfig and the pure evaluator (reference §4), after Pulsar's
AutoScalePolicyEvaluatorTest: each test asserts the variant, ids and reason."""

import pytest

from pipelines.core.layout import SegmentLayout
from pipelines.core.policy import (
    AutoScaleConfig,
    Merge,
    NoAction,
    Rebucket,
    SegmentLoadSample,
    Split,
    decide,
    next_pow2,
)

NOW = 10_000_000
HOT = SegmentLoadSample(msg_rate_in=20_000)
COLD = SegmentLoadSample(msg_rate_in=10, modified_at_ms=0)


def load(**rates):
    return SegmentLoadSample(**rates)


# ---- config --------------------------------------------------------------------------------


def test_defaults_are_pulsar_broker_defaults():
    c = AutoScaleConfig()
    assert (c.enabled, c.max_segments, c.min_segments, c.max_dag_depth) == (True, 64, 1, 10)
    assert (c.split_cooldown_s, c.merge_cooldown_s, c.merge_window_s, c.rebucket_cooldown_s) == (
        60, 300, 300, 60)
    assert (c.split_vs_rebucket_min_msg_rate_in, c.max_buckets_per_segment) == (1000, 1024)
    assert c.split_thresholds == (10_000, 50_000_000, 50_000, 250_000_000)
    assert c.merge_thresholds == (1000, 5_000_000, 5000, 25_000_000)


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"min_segments": 0}, "min_segments must be >= 1"),
        ({"max_segments": 1, "min_segments": 2}, "max_segments (1) must be >= min_segments (2)"),
        ({"max_dag_depth": -1}, "max_dag_depth must be >= 0"),
        ({"merge_window_s": -1}, "merge_window_s must be >= 0"),
        ({"split_cooldown_s": -5}, "split_cooldown_s must be >= 0"),
        ({"max_buckets_per_segment": 0}, "max_buckets_per_segment must be in [1, 65536]"),
        ({"max_buckets_per_segment": 65537}, "max_buckets_per_segment must be in [1, 65536]"),
        ({"split_msg_rate_in": 0}, "split_msg_rate_in must be > 0"),
        ({"merge_bytes_rate_out": -1}, "merge_bytes_rate_out must be >= 0"),
        ({"split_msg_rate_in": 100, "merge_msg_rate_in": 100},
         "split_msg_rate_in (100) must be greater than merge_msg_rate_in (100)"),
    ],
)
def test_problems_names_each_violated_rule(overrides, problem):
    assert any(p.startswith(problem) for p in AutoScaleConfig(**overrides).problems())


def test_problems_lists_every_violation_at_once():
    c = AutoScaleConfig(min_segments=0, max_dag_depth=-1, split_msg_rate_in=1)
    assert len(c.problems()) == 3


def test_merge_threshold_zero_is_a_legal_never_merge():
    assert AutoScaleConfig(merge_msg_rate_in=0).problems() == []


def test_resolve_layers_broker_namespace_topic_field_by_field():
    broker = AutoScaleConfig(max_segments=32)
    resolved = AutoScaleConfig.resolve(broker, {"max_segments": 16, "split_cooldown_s": 5},
                                       {"max_segments": None, "split_cooldown_s": 7})
    assert (resolved.max_segments, resolved.split_cooldown_s) == (16, 7)


def test_resolve_rejects_unknown_field():
    with pytest.raises(ValueError, match=r"unknown auto-scale policy field.*max_segmnts"):
        AutoScaleConfig.resolve(None, {"max_segmnts": 3})


@pytest.mark.parametrize(("v", "p"), [(1, 1), (2, 2), (3, 4), (5, 8), (8, 8), (9, 16)])
def test_next_pow2(v, p):
    assert next_pow2(v) == p


# ---- evaluator -----------------------------------------------------------------------------


def test_disabled_policy_returns_no_action():
    layout = SegmentLayout.initial(1)
    assert decide(layout, {0: HOT}, {}, AutoScaleConfig(enabled=False), NOW) == NoAction(
        "disabled")


def test_invalid_policy_returns_no_action_instead_of_raising():
    layout = SegmentLayout.initial(1)
    cfg = AutoScaleConfig(split_msg_rate_in=1, merge_msg_rate_in=5)
    assert decide(layout, {0: HOT}, {}, cfg, NOW) == NoAction("invalid-config")


@pytest.mark.parametrize(
    ("sample", "reason"),
    [
        (load(msg_rate_in=10_001), "msgRateIn"),
        (load(bytes_rate_in=60_000_000), "bytesRateIn"),
        (load(msg_rate_out=50_001), "msgRateOut"),
        (load(bytes_rate_out=300_000_000), "bytesRateOut"),
        (load(msg_rate_in=20_000, bytes_rate_in=100_000_000), "msgRateIn"),  # equal ratios: first
        (load(msg_rate_in=15_000, msg_rate_out=100_000), "msgRateOut"),  # highest ratio names it
    ],
)
def test_load_split_names_the_metric_with_the_highest_ratio(sample, reason):
    layout = SegmentLayout.initial(1)
    assert decide(layout, {0: sample}, {}, AutoScaleConfig(), NOW) == Split(0, reason)


def test_load_split_needs_strictly_more_than_threshold():
    layout = SegmentLayout.initial(1)
    result = decide(layout, {0: load(msg_rate_in=10_000)}, {}, AutoScaleConfig(), NOW)
    assert result == NoAction("no-candidate")


def test_load_split_picks_highest_score_and_lowest_id_on_ties():
    layout = SegmentLayout.initial(3)
    samples = {0: load(msg_rate_in=20_000), 1: load(msg_rate_in=30_000),
               2: load(msg_rate_in=30_000)}
    assert decide(layout, samples, {}, AutoScaleConfig(), NOW) == Split(1, "msgRateIn")


def test_load_split_suppressed_within_split_cooldown():
    layout = SegmentLayout.initial(1)
    result = decide(layout, {0: HOT}, {}, AutoScaleConfig(), NOW, last_split_ms=NOW - 59_999)
    assert result == NoAction("no-candidate", ("split-cooldown",))


def test_split_cooldown_boundary_equality_is_outside_cooldown():
    layout = SegmentLayout.initial(1)
    result = decide(layout, {0: HOT}, {}, AutoScaleConfig(), NOW, last_split_ms=NOW - 60_000)
    assert result == Split(0, "msgRateIn")


def test_load_split_suppressed_at_max_segments():
    layout = SegmentLayout.initial(2)
    result = decide(layout, {0: HOT}, {}, AutoScaleConfig(max_segments=2), NOW)
    assert result == NoAction("no-candidate", ("max-segments",))


def test_consumer_count_splits_busiest_segment_when_above_rate_floor():
    layout = SegmentLayout.initial(2)
    samples = {0: load(msg_rate_in=1500), 1: load(msg_rate_in=2000)}
    assert decide(layout, samples, {"sub": 3}, AutoScaleConfig(), NOW) == Split(1,
                                                                                "consumer-count")


def test_consumer_count_busiest_tie_goes_to_lowest_id():
    layout = SegmentLayout.initial(2)
    samples = {0: load(msg_rate_in=2000), 1: load(msg_rate_in=2000)}
    assert decide(layout, samples, {"a": 1, "b": 3}, AutoScaleConfig(), NOW) == Split(
        0, "consumer-count")


def test_consumer_count_lane_skipped_when_consumers_not_above_segments():
    layout = SegmentLayout.initial(2)
    samples = {0: load(msg_rate_in=2000), 1: load(msg_rate_in=2000)}
    assert decide(layout, samples, {"sub": 2}, AutoScaleConfig(), NOW) == NoAction(
        "no-candidate")


def test_consumer_count_below_rate_floor_rebuckets_to_power_of_two():
    layout = SegmentLayout.initial(1, bucket_budget=4)
    result = decide(layout, {0: load(msg_rate_in=10)}, {"sub": 5}, AutoScaleConfig(), NOW)
    assert result == Rebucket((0,), 8, "below-split-rate-floor")


def test_consumer_count_at_max_segments_rebuckets_with_at_max_reason():
    layout = SegmentLayout.initial(2, bucket_budget=4)
    samples = {0: load(msg_rate_in=5000), 1: load(msg_rate_in=5000)}
    result = decide(layout, samples, {"sub": 6}, AutoScaleConfig(max_segments=2), NOW)
    assert result == Rebucket((0, 1), 4, "at-max-segments")


def test_rebucket_lists_only_segments_below_target_in_ascending_id():
    layout = SegmentLayout.initial(3, bucket_budget=4).rebucket(1, 4)  # ids 0, 2 (N=1), 3 (N=4)
    result = decide(layout, {}, {"sub": 9}, AutoScaleConfig(), NOW)
    assert result == Rebucket((0, 2), 4, "below-split-rate-floor")


def test_rebucket_target_is_clamped_to_max_buckets_per_segment():
    layout = SegmentLayout.initial(1, bucket_budget=1)
    result = decide(layout, {}, {"sub": 100}, AutoScaleConfig(max_buckets_per_segment=16), NOW)
    assert result == Rebucket((0,), 16, "below-split-rate-floor")


def test_rebucket_lane_skipped_when_consumers_fit_bucket_capacity():
    layout = SegmentLayout.initial(1, bucket_budget=4)
    assert decide(layout, {}, {"sub": 4}, AutoScaleConfig(), NOW) == NoAction("no-candidate")


def test_rebucket_suppressed_within_rebucket_cooldown_falls_through_to_load_split():
    layout = SegmentLayout.initial(2, bucket_budget=2)
    samples = {0: load(bytes_rate_in=60_000_000), 1: load()}
    result = decide(layout, samples, {"sub": 5}, AutoScaleConfig(max_segments=3), NOW,
                    last_rebucket_ms=NOW - 1)
    assert result == Split(0, "bytesRateIn")


def test_rebucket_with_every_segment_at_target_records_bucket_cap():
    layout = SegmentLayout.initial(1, bucket_budget=4)
    result = decide(layout, {}, {"sub": 9}, AutoScaleConfig(max_buckets_per_segment=4), NOW)
    assert result == NoAction("no-candidate", ("max-buckets-per-segment",))


def test_consumer_split_suppressed_by_cooldown_falls_through():
    layout = SegmentLayout.initial(1)
    result = decide(layout, {0: load(msg_rate_in=2000)}, {"sub": 2}, AutoScaleConfig(), NOW,
                    last_split_ms=NOW - 1)
    assert result == NoAction("no-candidate", ("split-cooldown",))


def test_merge_picks_cold_adjacent_pair_with_smallest_combined_rate():
    layout = SegmentLayout.initial(3)
    samples = {0: load(msg_rate_in=10), 1: load(msg_rate_in=20), 2: load(msg_rate_in=1)}
    assert decide(layout, samples, {}, AutoScaleConfig(), NOW) == Merge(1, 2, "cold")


def test_merge_tie_goes_to_first_pair_in_ascending_id_order():
    layout = SegmentLayout.initial(3)
    samples = {0: load(msg_rate_in=5), 1: load(msg_rate_in=5), 2: load(msg_rate_in=5)}
    assert decide(layout, samples, {}, AutoScaleConfig(), NOW) == Merge(0, 1, "cold")


def test_merge_skips_non_adjacent_pairs():
    layout = SegmentLayout.initial(3)
    samples = {0: load(msg_rate_in=1), 1: load(msg_rate_in=900), 2: load(msg_rate_in=1)}
    assert decide(layout, samples, {}, AutoScaleConfig(), NOW) == Merge(0, 1, "cold")


def test_merge_requires_samples_older_than_merge_window():
    layout = SegmentLayout.initial(2)
    samples = {0: load(msg_rate_in=1, modified_at_ms=NOW - 299_999), 1: load(msg_rate_in=1)}
    assert decide(layout, samples, {}, AutoScaleConfig(), NOW) == NoAction("no-candidate")


def test_merge_requires_a_sample_for_both_segments():
    layout = SegmentLayout.initial(2)
    assert decide(layout, {0: load()}, {}, AutoScaleConfig(), NOW) == NoAction("no-candidate")


def test_merge_requires_every_rate_strictly_below_its_threshold():
    layout = SegmentLayout.initial(2)
    samples = {0: load(msg_rate_out=5000), 1: load()}
    assert decide(layout, samples, {}, AutoScaleConfig(), NOW) == NoAction("no-candidate")


def test_merge_threshold_zero_never_merges():
    layout = SegmentLayout.initial(2)
    samples = {0: load(), 1: load()}
    assert decide(layout, samples, {}, AutoScaleConfig(merge_msg_rate_in=0), NOW) == NoAction(
        "no-candidate")


def test_merge_suppressed_at_min_segments():
    layout = SegmentLayout.initial(2)
    samples = {0: load(), 1: load()}
    assert decide(layout, samples, {}, AutoScaleConfig(min_segments=2), NOW) == NoAction(
        "no-candidate", ("min-segments",))


def test_merge_suppressed_within_merge_cooldown():
    layout = SegmentLayout.initial(2)
    samples = {0: load(), 1: load()}
    assert decide(layout, samples, {}, AutoScaleConfig(), NOW, last_merge_ms=NOW - 1) == NoAction(
        "no-candidate", ("merge-cooldown",))


def test_merge_skips_pairs_at_max_dag_depth():
    layout = SegmentLayout.initial(3).merge(0, 1)  # 3 has depth 1; 2 depth 0
    samples = {2: load(), 3: load()}
    result = decide(layout, samples, {}, AutoScaleConfig(max_dag_depth=1), NOW)
    assert result == NoAction("no-candidate", ("max-dag-depth",))


def test_merge_capacity_guard_keeps_buckets_for_consumers():
    layout = SegmentLayout.initial(2, bucket_budget=8)  # N = 4 + 4
    samples = {0: load(), 1: load()}
    cfg = AutoScaleConfig(max_buckets_per_segment=4)  # merged clamps to 4 < 6 consumers
    result = decide(layout, samples, {"sub": 2, "other": 6}, cfg, NOW)
    assert result == NoAction("no-candidate", ("merge-capacity",))


def test_merge_allowed_when_clamped_capacity_still_covers_consumers():
    layout = SegmentLayout.initial(2, bucket_budget=8)
    samples = {0: load(), 1: load()}
    cfg = AutoScaleConfig(max_buckets_per_segment=8)
    assert decide(layout, samples, {"sub": 2}, cfg, NOW) == Merge(0, 1, "cold")


def test_missing_sample_counts_as_zero_for_busiest():
    layout = SegmentLayout.initial(2, bucket_budget=2)
    result = decide(layout, {1: load(msg_rate_in=1500)}, {"sub": 3}, AutoScaleConfig(), NOW)
    assert result == Split(1, "consumer-count")
