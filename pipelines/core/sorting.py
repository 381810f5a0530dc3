"""Stable orders of integer codes (producer codes, shards, topic bins, segment ids): the same
order as ``np.argsort(values, kind="stable")``, by NumPy's radix sort when the values span
fewer than 2^16 integers. Pure NumPy.

Why: NumPy sorts 64-bit integers stably with a merge sort (timsort) and 16-bit ones with a
radix sort. A window's producer codes or shards span a few values over hundreds of thousands
of messages: 1 M codes of 50 producers took 38 ms as int64 and 6 ms as uint16 (4 shards: 35
against 4 ms)."""

from __future__ import annotations

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
