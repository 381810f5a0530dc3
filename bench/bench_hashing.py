"""Benchmark: vectorized ``hash32_array`` against a per-key ``mmh3`` loop.

Run from the project root::

    .venv/bin/python bench/bench_hashing.py [--n 1000000] [--seed 7] [--repeat 3]

Builds a deterministic Arrow string array of ``--n`` message keys (Zipf-distributed over a
vocabulary of realistic keys 4-40 bytes long, about 5 % nulls), then times, best of ``--repeat``:

(a) ``[mmh3.hash(k, 0, False) for k in arr.to_pylist() if k is not None]``
(b) ``hash32_array(arr)``

It checks that both give the same hashes, prints both times and the speedup, and exits with
status 1 when the speedup is below ``--min-speedup`` (default 3).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mmh3
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.core.hashing import hash32_array


def make_vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    """``size`` distinct keys of realistic shapes, 4-40 UTF-8 bytes each."""
    vocab: list[str] = []
    seen: set[str] = set()
    hexdigits = np.array(list("0123456789abcdef"))
    while len(vocab) < size:
        kind = rng.integers(0, 6)
        n = int(rng.integers(0, 10**9))
        if kind == 0:
            key = f"user-{n % 10**7}"
        elif kind == 1:
            key = f"order:{n:09d}:{int(rng.integers(0, 100))}"
        elif kind == 2:  # UUID, 36 bytes
            h = "".join(rng.choice(hexdigits, 32))
            key = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        elif kind == 3:
            key = f"dev{n % 100000}"
        elif kind == 4:
            key = f"tenant-{n % 500}/session-{n % 10**6}"
        else:
            key = f"sku_{n % 10**5}_réf"  # non-ASCII
        key = key.encode()[:40].decode("utf-8", errors="ignore")
        if len(key.encode()) < 4:
            key = key + "-pad"
        if key not in seen:
            seen.add(key)
            vocab.append(key)
    return vocab


def make_keys(n: int, seed: int, null_fraction: float = 0.05) -> pa.Array:
    """Deterministic Arrow ``string`` array of ``n`` Zipf-ish keys with ``null_fraction`` nulls."""
    rng = np.random.default_rng(seed)
    vocab = pa.array(make_vocabulary(rng, max(1, min(200_000, n // 5))), type=pa.string())
    idx = (rng.zipf(1.3, n) - 1) % len(vocab)
    nulls = rng.random(n) < null_fraction
    return vocab.take(pa.array(idx, type=pa.int64(), mask=nulls))


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """Best wall time (s) over ``repeat`` calls, and the last result."""
    best = float("inf")
    result: Any = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="number of keys")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per method (best)")
    parser.add_argument("--min-speedup", type=float, default=3.0)
    args = parser.parse_args(argv)

    arr = make_keys(args.n, args.seed)
    lengths = np.asarray(pa.compute.binary_length(arr).drop_null())
    print(
        f"keys: {len(arr):,} ({arr.null_count:,} null), "
        f"bytes/key min {lengths.min()} mean {lengths.mean():.1f} max {lengths.max()}, "
        f"distinct non-null {len(pa.compute.unique(arr.drop_null())):,}"
    )

    def per_key() -> list[int]:
        return [mmh3.hash(k, 0, False) for k in arr.to_pylist() if k is not None]

    t_loop, expected = best_of(args.repeat, per_key)
    t_vec, got = best_of(args.repeat, lambda: hash32_array(arr))

    valid = ~np.ma.getmaskarray(got)
    assert int(valid.sum()) == len(expected), "null mask does not match"
    assert np.array_equal(np.ma.getdata(got)[valid], np.asarray(expected, dtype=np.uint32)), (
        "hash32_array differs from mmh3"
    )

    speedup = t_loop / t_vec
    print(f"(a) mmh3 per key over to_pylist(): {t_loop * 1e3:8.1f} ms  (best of {args.repeat})")
    print(f"(b) hash32_array (vectorized):     {t_vec * 1e3:8.1f} ms  (best of {args.repeat})")
    print(f"results equal: yes; speedup: {speedup:.1f}x (required >= {args.min_speedup:g}x)")
    return 0 if speedup >= args.min_speedup else 1


if __name__ == "__main__":
    sys.exit(main())
