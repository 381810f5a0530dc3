"""Material-change gate, load reporter and rolling rates (reference §5)."""

import pytest

from pipelines.core.load import RollingRates, SegmentLoadReporter, is_material_change
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


def test_reporter_forget_drops_baseline_so_next_report_writes():
    r = SegmentLoadReporter()
    r.report(1, (100, 0, 0, 0), 0)
    r.forget(1)
    assert r.report(1, (100, 0, 0, 0), 10_000) is True


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
