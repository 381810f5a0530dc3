"""Entry-bucket formulas (reference §3.1–3.6)."""

import numpy as np
import pytest

from pipelines.core.buckets import (
    bucket_of,
    bucket_of_array,
    bucket_ranges,
    buckets_for_budget,
    canonical_bucket_hash,
    equal_width_splits,
    validate_bucket_ranges,
)


@pytest.mark.parametrize(
    ("n", "splits"),
    [
        (0, []),
        (1, []),
        (2, [32768]),
        (3, [21845, 43690]),
        (4, [16384, 32768, 49152]),
        (5, [13107, 26214, 39321, 52428]),
        (6, [10922, 21845, 32768, 43690, 54613]),
        (7, [9362, 18724, 28086, 37449, 46811, 56173]),
        (8, [8192 * i for i in range(1, 8)]),
        (16, [4096 * i for i in range(1, 16)]),
    ],
)
def test_equal_width_splits_match_entry_bucket_splits_table(n, splits):
    assert equal_width_splits(n) == splits


@pytest.mark.parametrize(
    ("n", "ranges"),
    [
        (1, [(0x0000, 0xFFFF)]),
        (2, [(0x0000, 0x7FFF), (0x8000, 0xFFFF)]),
        (3, [(0x0000, 0x5554), (0x5555, 0xAAA9), (0xAAAA, 0xFFFF)]),
        (5, [(0, 0x3332), (0x3333, 0x6665), (0x6666, 0x9998), (0x9999, 0xCCCB), (0xCCCC, 0xFFFF)]),
        (6, [(0, 0x2AA9), (0x2AAA, 0x5554), (0x5555, 0x7FFF), (0x8000, 0xAAA9), (0xAAAA, 0xD554),
             (0xD555, 0xFFFF)]),
    ],
)
def test_bucket_ranges_are_inclusive_and_tile_the_ring(n, ranges):
    assert bucket_ranges(equal_width_splits(n)) == ranges


@pytest.mark.parametrize(
    ("n", "h", "bucket"),
    [(1, 0, 0), (1, 65535, 0), (4, 0, 0), (4, 16383, 0), (4, 16384, 1), (4, 65535, 3),
     (3, 21844, 0), (3, 21845, 1), (3, 43690, 2)],
)
def test_bucket_of_counts_splits_at_or_below_hash(n, h, bucket):
    assert bucket_of(equal_width_splits(n), h) == bucket


def test_bucket_of_array_matches_scalar_bucket_of():
    splits = equal_width_splits(7)
    hashes = np.arange(0, 65536, 97)
    assert bucket_of_array(splits, hashes).tolist() == [bucket_of(splits, int(h)) for h in hashes]


@pytest.mark.parametrize(
    ("budget", "segments", "n"), [(4, 1, 4), (4, 2, 2), (4, 4, 1), (4, 8, 1), (4, 3, 1), (16, 3, 5)]
)
def test_buckets_for_budget_floors_with_minimum_one(budget, segments, n):
    assert buckets_for_budget(budget, segments) == n


def test_buckets_for_budget_rejects_zero_segments():
    with pytest.raises(ValueError, match="segments must be >= 1"):
        buckets_for_budget(4, 0)


@pytest.mark.parametrize(
    ("n", "h", "canonical"),
    [(4, 0, 1), (4, 1, 1), (4, 0x3FFF, 1), (4, 0x4000, 16384), (4, 21844, 16384),
     (4, 21845, 16384), (4, 43690, 32768), (4, 65535, 49152),
     (3, 0, 1), (3, 21844, 1), (3, 21845, 21845), (3, 43690, 43690), (3, 65535, 43690),
     (1, 0, 1), (1, 40000, 1)],
)
def test_canonical_bucket_hash_is_bucket_start_with_zero_as_one(n, h, canonical):
    assert canonical_bucket_hash(equal_width_splits(n), h) == canonical


@pytest.mark.parametrize(
    ("ranges", "problem"),
    [
        ([], "empty"),
        ([(1, 65535)], "starts at 1"),
        ([(0, 0), (1, 65535)], "end at hash >= 1"),
        ([(0, 100), (102, 65535)], "not right after"),
        ([(0, 100), (101, 60000)], "not 65535"),
    ],
)
def test_validate_bucket_ranges_names_each_violation(ranges, problem):
    assert any(problem in p for p in validate_bucket_ranges(ranges))


def test_validate_bucket_ranges_accepts_equal_width_tiling():
    assert validate_bucket_ranges(bucket_ranges(equal_width_splits(5))) == []
