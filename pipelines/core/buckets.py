"""Entry buckets (PIP-486): boundary formulas, bucket lookup, budget and canonical bucket hash.

Every segment's buckets tile the full 16-bit ``hash_b`` ring ``[0, 65535]``, independent of the
segment's own ``segment_hash`` range (reference §3.3). A bucket layout is described by its
*splits*: the ascending list of bucket start hashes after bucket 0 (``N - 1`` values for ``N``
buckets; an empty list means one bucket). Ranges are inclusive (reference §3.2, §9.2).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

HASH_RING_SIZE = 65536
"""Size of each 16-bit ring (``segment_hash`` and ``hash_b``)."""
MAX_HASH = HASH_RING_SIZE - 1


def equal_width_splits(n: int) -> list[int]:
    """Splits for ``n`` equal-width buckets: ``s_i = floor(i * 65536 / n)`` for ``i = 1..n-1``.

    ``n <= 1`` gives ``[]`` (one bucket covering ``[0, 65535]``). Reference §3.2
    (``EntryBucketSplits``). Example: ``equal_width_splits(3) == [21845, 43690]``.
    """
    if n <= 1:
        return []
    return [(i * HASH_RING_SIZE) // n for i in range(1, n)]


def bucket_of(splits: Sequence[int], h: int) -> int:
    """Bucket index of ``hash_b`` value ``h``: the number of splits ``<= h`` (reference §3.2)."""
    return int(np.searchsorted(np.asarray(splits, dtype=np.int64), h, side="right"))


def bucket_of_array(splits: Sequence[int], hashes: npt.ArrayLike) -> npt.NDArray[np.int32]:
    """Vectorized :func:`bucket_of`: ``hashes`` (any integer array of ``hash_b`` values) →
    ``int32`` bucket indexes, same shape."""
    idx = np.searchsorted(np.asarray(splits, dtype=np.int64), np.asarray(hashes, dtype=np.int64),
                          side="right")
    return idx.astype(np.int32)


def bucket_ranges(splits: Sequence[int]) -> list[tuple[int, int]]:
    """Inclusive ``(start, end)`` ``hash_b`` range of every bucket, in bucket order (§3.2).

    ``bucket_ranges([32768]) == [(0, 32767), (32768, 65535)]``.
    """
    starts = [0, *splits]
    ends = [s - 1 for s in splits] + [MAX_HASH]
    return list(zip(starts, ends, strict=True))


def buckets_for_budget(budget: int, segments: int) -> int:
    """Per-segment bucket count at topic creation: ``max(1, budget // segments)`` (§3.1, §2.2).

    Raises ``ValueError`` when ``segments < 1``.
    """
    if segments < 1:
        raise ValueError(f"segments must be >= 1 to share a bucket budget, got {segments}")
    return max(1, budget // segments)


def canonical_bucket_hash(splits: Sequence[int], h: int) -> int:
    """Canonical hash of the bucket holding ``h``: ``max(bucket_start, 1)`` (reference §3.5).

    Hash 0 is PIP-379's "not set" sentinel, so bucket 0 canonicalises to 1; every per-hash
    draining structure therefore works at bucket granularity.
    """
    start = 0 if not splits else ([0, *splits])[bucket_of(splits, h)]
    return max(start, 1)


def validate_bucket_ranges(ranges: Sequence[tuple[int, int]]) -> list[str]:
    """Problems with a bucket boundary list declared at subscribe (reference §3.6).

    The list must be non-empty, ascending, contiguous from 0, tile to 65535, and bucket 0 must
    end at ``>= 1``. Returns one sentence per violated rule (empty list = valid).
    """
    if not ranges:
        return ["bucket ranges are empty"]
    problems: list[str] = []
    if ranges[0][0] != 0:
        problems.append(f"bucket 0 starts at {ranges[0][0]}, not 0")
    if ranges[0][1] < 1:
        problems.append("bucket 0 must end at hash >= 1 (hash 0 is the 'not set' sentinel)")
    for i, (start, end) in enumerate(ranges):
        if end < start:
            problems.append(f"bucket {i} range [{start}, {end}] ends before it starts")
        if i > 0 and start != ranges[i - 1][1] + 1:
            problems.append(f"bucket {i} starts at {start}, not right after bucket {i - 1}")
    if ranges[-1][1] != MAX_HASH:
        problems.append(f"last bucket ends at {ranges[-1][1]}, not {MAX_HASH}")
    return problems
