"""Stable orders of integer codes (pipelines.core.sorting)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core.sorting import RADIX_SPAN, WORD_BITS, lexsort, packed_words, stable_argsort
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


KEY_VALUES = (st.integers(0, 1) | st.integers(-3, 3) | st.integers(-(2**20), 2**20)
              | st.integers(-(2**40), 2**40) | st.integers(-(2**62), 2**62))
"""A key's values: from one bit wide to 63 bits (keys then pack into one word or several)."""


@settings(max_examples=examples(300), deadline=None)
@given(st.integers(0, 40).flatmap(
    lambda n: st.lists(st.lists(KEY_VALUES, min_size=n, max_size=n), min_size=1, max_size=6)))
def test_lexsort_equals_numpys_lexsort(keys: list[list[int]]) -> None:
    arrays = [np.array(k, dtype=np.int64) for k in keys]
    assert lexsort(arrays).tolist() == np.lexsort(arrays).tolist()


@pytest.mark.parametrize("keys", [
    [np.array([], dtype=np.int64)],
    [np.array([5], dtype=np.int64), np.array([1], dtype=np.int64)],
    [np.array([4, 4, 4]), np.array([9, 9, 9])],  # one value each: no word at all
    [np.array([2, 1, 2, 1]), np.array([0, 2**62, 0, 2**62])],  # two words
    [np.array([1, 0, 1], dtype=np.uint8), np.array([True, False, True])],
    [np.array([3, 1, 3], dtype=np.uint64), np.array([2**63 + 1, 2**63, 2**63 + 1],
                                                    dtype=np.uint64)],  # beyond int64
    [np.array([-(2**62), 2**62, 0]), np.array([1, 1, 0])],  # a key of 63 bits, as it is
    [np.array([0.5, -1.0, 0.5]), np.array([1, 0, 1])],  # not integers: as they are
], ids=["empty", "one-row", "constant", "two-words", "uint8-bool", "uint64-high", "63-bits",
        "float"])
def test_lexsort_orders_every_dtype_and_width_as_numpy(keys) -> None:
    assert lexsort(keys).tolist() == np.lexsort(keys).tolist()


def test_lexsort_packs_keys_that_fit_one_word_into_one_sort(monkeypatch) -> None:
    # 1 + 20 + 40 bits: one word, so no np.lexsort
    keys = [np.array([1, 0, 1, 0]), np.array([7, 2**20, 7, 0]), np.array([2**40, 0, 0, 2**40])]
    assert sum(k.max().item().bit_length() for k in keys) <= WORD_BITS
    monkeypatch.setattr(np, "lexsort", None)
    assert lexsort(keys).tolist() == [2, 1, 3, 0]


def test_lexsort_refuses_keys_of_different_lengths() -> None:
    with pytest.raises(ValueError):
        lexsort([np.array([1, 2]), np.array([1])])


@pytest.mark.parametrize(("keys", "words"), [
    ([np.array([3, 3]), np.array([-1, -1])], []),  # one value each: no bits
    ([np.array([1, 0]), np.array([5, 7])], [[0b100, 0b010]]),  # 1 + 2 bits, first key high
    ([np.array([0, 2**40]), np.array([0, 2**30])], [[0, 2**40], [0, 2**30]]),  # 41 + 31 bits
    ([np.array([0.5, 1.0])], None),  # not integers
    ([np.array([1, 2]), np.array([1])], None),  # of different lengths
], ids=["constant", "one-word", "two-words", "float", "lengths"])
def test_packed_words_fill_each_word_from_the_first_key(keys, words) -> None:
    got = packed_words(keys)
    assert (None if got is None else [w.tolist() for w in got]) == words
