"""Stable orders of integer codes (pipelines.core.sorting)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core.sorting import RADIX_SPAN, stable_argsort
from tests.conftest import examples


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.integers(-5, 5) | st.integers(-(2**30), 2**30), max_size=60),
       st.integers(-(2**40), 2**40))
def test_stable_argsort_equals_numpys_stable_argsort(values: list[int], offset: int) -> None:
    # small spans (the radix sort) and wide ones, around any offset
    array = np.array(values, dtype=np.int64) + offset
    assert stable_argsort(array).tolist() == np.argsort(array, kind="stable").tolist()


@pytest.mark.parametrize("values", [
    np.array([], dtype=np.int64),
    np.array([7], dtype=np.int64),
    np.array([3, 1, 3, 1, 2], dtype=np.uint8),
    np.array([2**63 + 5, 2**63 + 1, 2**63 + 5], dtype=np.uint64),  # beyond int64, small span
    np.array([0, RADIX_SPAN - 1, 0, RADIX_SPAN - 1], dtype=np.int64),  # the widest radix span
    np.array([0, RADIX_SPAN, 0], dtype=np.int64),  # one wider: as it is
    np.array([0.5, -1.0, 0.5]),  # not integers: as they are
], ids=["empty", "one", "uint8", "uint64-high", "radix-edge", "past-radix", "float"])
def test_stable_argsort_keeps_equal_values_in_order_for_every_dtype(values) -> None:
    assert stable_argsort(values).tolist() == np.argsort(values, kind="stable").tolist()
