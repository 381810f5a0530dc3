"""Material-change gate, load reporter and rolling rates (reference §5)."""

import pytest

from pipelines.core.load import (
    LoadRecordStore,
    RollingRates,
    SegmentLoadReporter,
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


def test_rolling_rates_average_over_window_in_seconds():
    rr = RollingRates(interval_ms=10_000, window_ms=60_000)
    rr.add(0, 1_000, 600, 6000)
    rr.add(0, 55_000, 600, 6000)
    assert rr.rates(0, 60_000) == (20.0, 200.0)


def test_rolling_rates_exclude_bins_outside_window():
    rr = RollingRates(interval_ms=10_000, window_ms=60_000)
    rr.add(0, 1_000, 600, 0)
    rr.add(0, 65_000, 60, 0)
    assert rr.rates(0, 70_000) == (1.0, 0.0)


def test_rolling_rates_exclude_current_incomplete_bin():
    rr = RollingRates(interval_ms=10_000, window_ms=60_000)
    rr.add(0, 60_000, 600, 0)
    assert rr.rates(0, 60_000) == (0.0, 0.0)


def test_rolling_rates_of_unknown_segment_are_zero():
    assert RollingRates().rates(7, 60_000) == (0.0, 0.0)
