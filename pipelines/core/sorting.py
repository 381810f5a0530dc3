"""Stable orders of integers: of codes (producer codes, shards, topic bins, segment ids), the
same order as ``np.argsort(values, kind="stable")``, by NumPy's radix sort when the values span
fewer than 2^16 integers; of several integer keys, ``np.lexsort``'s order in fewer passes, the
keys packed into as few int64 words as their ranges allow. Pure NumPy.

Why: NumPy sorts 64-bit integers stably with a merge sort (timsort) and 16-bit ones with a
radix sort. A window's producer codes or shards span a few values over hundreds of thousands
of messages: 1 M codes of 50 producers took 38 ms as int64 and 6 ms as uint16 (4 shards: 35
against 4 ms). ``np.lexsort`` sorts once per key: batching's send order of entries (six keys)
was a third of its entries' assembly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

RADIX_SPAN = 1 << 16
"""Value spans sorted by the radix sort (as ``uint16`` offsets from the minimum)."""


def stable_argsort(values: npt.NDArray[Any]) -> npt.NDArray[np.intp]:
    """Positions that sort ``values`` (a 1-D integer array) stably: equal values keep their
    order, as ``np.argsort(values, kind="stable")``. Values spanning fewer than
    :data:`RADIX_SPAN` integers are sorted as ``uint16`` offsets from their minimum (the
    radix sort); others, and non-integer arrays, as they are."""
    if len(values) > 1 and values.dtype.kind in "iu":
        lo, hi = int(values.min()), int(values.max())
        if hi - lo < RADIX_SPAN:
            offsets = (values - lo).astype(np.uint16) if lo else values.astype(np.uint16)
            return np.argsort(offsets, kind="stable")
    return np.argsort(values, kind="stable")


WORD_BITS = 63
"""Bits of a packed sort word (an int64 that stays non-negative)."""


def packed_words(keys: Sequence[npt.NDArray[Any]]) -> list[npt.NDArray[np.int64]] | None:
    """Integer sort keys (1-D, equal lengths; the FIRST key primary) packed into as few int64
    words as fit: each key offset by its minimum takes the bits of its value range (a key of
    one value takes none), the primary key in the highest bits of the first word, a key that
    would pass :data:`WORD_BITS` starting the next word. Words compared in order are the keys
    compared in order, and rows equal on every word are equal on every key. ``None`` when
    there are no keys or no rows, or a key is not integer, not 1-D, of another length than the
    first or spans 2^63 values or more (``[]`` when every key has one value)."""
    if (not len(keys) or len({k.shape for k in keys}) > 1 or keys[0].ndim != 1
            or not len(keys[0]) or any(k.dtype.kind not in "iub" for k in keys)):
        return None
    words: list[npt.NDArray[np.int64]] = []
    used = WORD_BITS
    for key in keys:
        lo, hi = int(key.min()), int(key.max())
        bits = (hi - lo).bit_length()
        if bits > WORD_BITS or hi >= 1 << 63:
            return None
        if not bits:
            continue
        offset = key.astype(np.int64, copy=False) - lo if lo else key.astype(np.int64)
        if used + bits > WORD_BITS:
            words.append(offset)
            used = bits
        else:
            words[-1] <<= bits
            words[-1] |= offset
            used += bits
    return words


def lexsort(keys: Sequence[npt.NDArray[Any]]) -> npt.NDArray[np.intp]:
    """``np.lexsort(keys)``: positions that sort the rows by the LAST key, then the one before
    it, and so on, equal rows in their order. Integer keys are :func:`packed_words` (the last
    key primary); one word is sorted by :func:`stable_argsort`, several by ``np.lexsort`` of
    the words. Keys that do not pack (not integers, not 1-D, spanning 2^63 values or more)
    are sorted by ``np.lexsort`` as they are. Raises ``ValueError`` (NumPy's) for keys of
    different shapes."""
    words = packed_words(keys[::-1])
    if words is None:
        return _numpy_lexsort(keys)  # (NumPy's error for keys of different shapes)
    if not words:
        return np.arange(len(keys[0]), dtype=np.intp)
    if len(words) == 1:
        return stable_argsort(words[0])
    return _numpy_lexsort(words[::-1])


def _numpy_lexsort(keys: Sequence[npt.NDArray[Any]]) -> npt.NDArray[np.intp]:
    """``np.lexsort(keys)``, typed."""
    order: npt.NDArray[np.intp] = np.lexsort(keys)
    return order
