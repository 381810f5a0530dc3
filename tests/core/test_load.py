"""Material-change gate, load reporter and TopicStats rates per stats period (reference §5,
§5.1)."""

import pytest

from pipelines.core.load import (
    LoadRecordStore,
    SegmentLoadReporter,
    TopicStatsRates,
    is_material_change,
)
from pipelines.core.policy import SegmentLoadSample


@pytest.mark.parametrize(
    ("last", "current", "material"),
    [
        ((0, 0, 0, 0), (0, 0, 0, 0), False),
        ((0, 0, 0, 0), (0.001, 0, 0, 0), True),  # 0 → x is material
        ((100, 0, 0, 0), (125, 0, 0, 0), False),  # exactly 25 % is not (strict)
        ((100, 0, 0, 0), (125.0001, 0, 0, 0), True),
        ((100, 0, 0, 0), (75, 0, 0, 0), False),
        ((100, 0, 0, 0), (74.9, 0, 0, 0), True),
        ((100, 100, 100, 100), (100, 100, 100, 200), True),  # any of the four rates
        ((100, 0, 0, 0), (0, 0, 0, 0), True),  # x → 0 is a 100 % change
    ],
)
def test_is_material_change_per_rate_against_last_written(last, current, material):
    assert is_material_change(last, current) is material


def test_is_material_change_accepts_samples():
    assert is_material_change(SegmentLoadSample(100), SegmentLoadSample(200))


def test_is_material_change_uses_threshold_argument():
    assert is_material_change((100, 0, 0, 0), (111, 0, 0, 0), threshold=0.1)


def test_reporter_writes_first_sample_even_when_zero():
    r = SegmentLoadReporter()
    assert r.report(1, (0, 0, 0, 0), 10_000) is True
    assert r.last_written(1) == SegmentLoadSample(0, 0, 0, 0, modified_at_ms=10_000)


def test_reporter_compares_against_last_written_not_previous_sample():
    r = SegmentLoadReporter()
    r.report(1, (100, 0, 0, 0), 0)
    assert r.report(1, (120, 0, 0, 0), 10_000) is False
    assert r.report(1, (124, 0, 0, 0), 20_000) is False  # drift never re-baselines
    assert r.report(1, (126, 0, 0, 0), 30_000) is True
    assert r.last_written(1).modified_at_ms == 30_000


@pytest.mark.parametrize(
    ("stored", "after_forget", "written", "record"),
    [
        # forget drops only the cache: the baseline is re-seeded from the stored record (§5)
        ((100, 0, 0, 0), (100, 0, 0, 0), False, SegmentLoadSample(100, modified_at_ms=0)),
        ((100, 0, 0, 0), (125, 0, 0, 0), False, SegmentLoadSample(100, modified_at_ms=0)),
        ((100, 0, 0, 0), (75, 0, 0, 0), False, SegmentLoadSample(100, modified_at_ms=0)),
        ((100, 0, 0, 0), (126, 0, 0, 0), True, SegmentLoadSample(126, modified_at_ms=10_000)),
        ((0, 0, 0, 0), (0, 0, 0, 0), False, SegmentLoadSample(0, modified_at_ms=0)),
        ((0, 0, 0, 0), (0, 0, 0, 1), True, SegmentLoadSample(0, 0, 0, 1, modified_at_ms=10_000)),
        # nothing stored: the first report writes, zero rates included
        (None, (0, 0, 0, 0), True, SegmentLoadSample(0, modified_at_ms=10_000)),
        (None, (100, 0, 0, 0), True, SegmentLoadSample(100, modified_at_ms=10_000)),
    ],
    ids=["unchanged", "plus-25pc", "minus-25pc", "beyond-25pc", "zero-unchanged",
         "zero-to-nonzero", "nothing-stored-zero", "nothing-stored"],
)
def test_reporter_after_forget_reseeds_baseline_from_store_and_applies_gate(
        stored, after_forget, written, record):
    r = SegmentLoadReporter()
    if stored is not None:
        r.report(1, stored, 0)
    r.forget(1)
    assert r.baseline(1) is None
    assert r.report(1, after_forget, 10_000) is written
    assert r.last_written(1) == record


def test_reporter_after_forget_compares_with_stored_record_not_last_sample():
    r = SegmentLoadReporter()
    r.report(1, (100, 0, 0, 0), 0)
    r.report(1, (120, 0, 0, 0), 10_000)  # not material: the store keeps 100
    r.forget(1)
    assert r.report(1, (126, 0, 0, 0), 20_000) is True  # vs 100 stored, not vs 120


def test_new_reporter_on_same_store_seeds_baseline_from_stored_record():
    """Ownership moves to another broker: its reporter starts with an empty cache."""
    old = SegmentLoadReporter()
    old.report(1, (100, 0, 0, 0), 0)
    new = SegmentLoadReporter(store=old.store)
    assert new.report(1, (110, 0, 0, 0), 10_000) is False
    assert new.baseline(1) == (100.0, 0.0, 0.0, 0.0)
    assert new.samples[1] == SegmentLoadSample(100, modified_at_ms=0)


def test_forget_keeps_the_stored_record_the_evaluator_reads():
    r = SegmentLoadReporter()
    r.report(1, (100, 0, 0, 0), 0)
    r.forget(1)
    assert dict(r.samples) == {1: SegmentLoadSample(100, modified_at_ms=0)}


@pytest.mark.parametrize(
    ("first", "second", "written", "modified_at_ms"),
    [((5, 0, 0, 0), (5, 0, 0, 0), False, 0), ((5, 0, 0, 0), (6, 0, 0, 0), True, 10_000)],
    ids=["identical-is-no-op", "different-value"],
)
def test_store_put_of_identical_value_keeps_modification_time(first, second, written,
                                                              modified_at_ms):
    store = LoadRecordStore()
    assert store.put(1, first, 0) is True
    assert store.put(1, second, 10_000) is written
    assert store.get(1).modified_at_ms == modified_at_ms


# ---- TopicStats rates per stats period (reference §5.1) ----------------------------------------


@pytest.mark.parametrize(
    ("anchor", "delay", "frequency", "at", "expected"),
    [
        (5_000, 60_000, 60_000, 0, 65_000),  # before the first update: the first update
        (5_000, 60_000, 60_000, 65_000, 65_000),  # an update time is its own next update
        (5_000, 60_000, 60_000, 65_001, 125_000),
        (5_000, 60_000, 60_000, 300_000, 305_000),
        (0, 0, 30_000, 1, 30_000),  # no initial delay: the first update at the broker start
        (0, 90_000, 60_000, 100_000, 150_000),  # initial delay and frequency differ
    ],
)
def test_stats_updates_run_at_anchor_plus_initial_delay_then_every_period(anchor, delay,
                                                                          frequency, at,
                                                                          expected):
    assert TopicStatsRates(anchor, frequency, delay).next_update_ms(at) == expected


@pytest.mark.parametrize(
    ("loaded_at", "counts", "updates", "expected"),
    [
        # loaded at the broker start, 6000 msgs before the first update: 100 msg/s
        (0, (6000, 600_000, 12_000, 1_200_000), [60_000], (100.0, 10_000.0, 200.0, 20_000.0)),
        # loaded between two updates: the first rate counts from the load (30 s)
        (90_000, (300, 0, 0, 0), [60_000, 120_000], (10.0, 0.0, 0.0, 0.0)),
        # a period with no traffic after one with traffic: 0 at the next update
        (0, (600, 0, 0, 0), [60_000, 120_000], (0.0, 0.0, 0.0, 0.0)),
    ],
    ids=["first-period", "loaded-mid-period", "idle-period"],
)
def test_stats_update_sets_count_since_previous_update_over_elapsed_seconds(loaded_at, counts,
                                                                             updates, expected):
    rates = TopicStatsRates(0)
    for u in updates:
        if u > loaded_at and 0 not in rates.loaded:
            rates.load(0, loaded_at)
            rates.add(0, *counts)
        rates.update(u)
    assert rates.rates(0) == expected


@pytest.mark.parametrize(
    ("read_at", "expected"),
    [(59_999, 0.0), (60_000, 100.0), (119_999, 100.0), (120_000, 50.0)],
    ids=["before-first-update", "at-update", "constant-until-next", "next-update"],
)
def test_stats_rates_are_constant_between_updates(read_at, expected):
    """6000 msgs in the first period, 3000 in the second: a sweep reads the last update's
    value whatever the traffic since."""
    rates = TopicStatsRates(0)
    rates.load(0, 0)
    rates.add(0, 6000, 0, 0, 0)
    for u in (60_000, 120_000):
        if u > read_at:
            break
        rates.update(u)
        rates.add(0, 3000, 0, 0, 0)
    assert rates.rates(0)[0] == expected


def test_segment_loaded_between_updates_reads_zero_until_the_next_update():
    rates = TopicStatsRates(0)
    rates.load(0, 0)
    rates.update(60_000)
    rates.load(1, 75_000)
    rates.add(1, 450, 0, 0, 0)
    assert rates.rates(1) == (0.0, 0.0, 0.0, 0.0)
    rates.update(120_000)
    assert rates.rates(1)[0] == 10.0  # 450 msgs over the 45 s since its load


def test_closed_producers_give_zero_in_rates_but_out_rates_count_the_period():
    """Sealed (producers closed) mid-period: the next update has no producer rate; the
    subscriptions stay, so the out-rates count what was dispatched in the period."""
    rates = TopicStatsRates(0)
    rates.load(0, 0)
    rates.add(0, 600, 6000, 1200, 12_000)
    rates.close_producers(0)
    rates.update(60_000)
    assert rates.rates(0) == (0.0, 0.0, 20.0, 200.0)
    rates.update(120_000)
    assert rates.rates(0) == (0.0, 0.0, 0.0, 0.0)
    assert not rates.has_data(0)


@pytest.mark.parametrize(
    ("build", "message"),
    [(lambda: TopicStatsRates(0, 0), "frequency_ms > 0"),
     (lambda: TopicStatsRates(0, 60_000, -1), "initial_delay_ms >= 0"),
     (lambda: TopicStatsRates(0).update(30_000), "not a stats update time")],
    ids=["zero-frequency", "negative-delay", "update-off-the-grid"],
)
def test_stats_rates_reject_bad_periods(build, message):
    with pytest.raises(ValueError, match=message):
        build()
