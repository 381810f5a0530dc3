"""Tests for the per-topic key statistics (pipelines/core/heavy_hitters.py): counts within the
Misra-Gries bound against exact counts on a Zipf log, exact peak rates, chunking-invariance,
distinct keys."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core import heavy_hitters
from pipelines.core.heavy_hitters import (
    DISTINCT_EXACT_MAX,
    KeyStats,
    close_many,
    hll_estimate,
    hll_update,
    misra_gries_merge,
    update_many,
)

PERIOD_MS = 60_000


def fmix32(x: np.ndarray) -> np.ndarray:
    """murmur3's 32-bit finalizer (a bijection that mixes every bit, as murmur3-32 of the key
    strings does) as int64."""
    h = x.astype(np.uint64) & np.uint64(0xFFFFFFFF)
    for shift, mult in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        h ^= h >> np.uint64(shift)
        h = (h * np.uint64(mult)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(16)
    return h.astype(np.int64)


def zipf_log(n: int, n_keys: int, exponent: float, seconds: int,
             seed: int = 3) -> pd.DataFrame:
    """``n`` messages over ``seconds``, keys ``k<i>`` with P(i) ∝ 1/(i+1)^exponent; hash32 is
    the key index mixed by :func:`fmix32` (distinct per key); 5 % keyless (hash -1)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_keys + 1) ** exponent
    idx = rng.choice(n_keys, size=n, p=p / p.sum())
    event_ms = np.sort(rng.integers(0, seconds * 1000, size=n)).astype(np.int64)
    hash32 = fmix32(idx)
    keyless = rng.random(n) < 0.05
    hash32[keyless] = -1
    return pd.DataFrame({"event_ms": event_ms, "hash32": hash32,
                         "key": np.array([f"k{i}" for i in idx], dtype=object),
                         "size": np.full(n, 10, dtype=np.int64)})


def feed(log: pd.DataFrame, chunks: int = 1, capacity: int = 1024) -> KeyStats:
    ks = KeyStats(PERIOD_MS, capacity=capacity)
    for part in np.array_split(np.arange(len(log)), chunks):
        g = log.iloc[part]
        ks.update(g["event_ms"].to_numpy(np.int64), g["hash32"].to_numpy(np.int64),
                  g["size"].to_numpy(np.int64), g["key"].to_numpy(object))
    ks.close()
    return ks


@pytest.fixture(scope="module")
def zipf() -> pd.DataFrame:
    return zipf_log(200_000, 50_000, 1.1, 1800)


def test_counts_are_lower_bounds_within_the_stated_error_on_a_zipf_log(zipf) -> None:
    ks = feed(zipf, chunks=7, capacity=256)
    keyed = zipf[zipf["hash32"] >= 0]
    exact = keyed.groupby("hash32").size()
    assert ks.error <= len(keyed) / 257  # Misra-Gries: N / (capacity + 1)
    assert ks.error > 0  # the summary did drop keys (50,000 keys, 256 counters)
    true = exact.reindex(ks.ids).to_numpy()
    assert (ks.counts <= true).all()
    assert (true - ks.counts <= ks.error).all()
    # every key above the error is tracked
    assert set(exact[exact > ks.error].index) <= set(ks.ids.tolist())


def test_peak_rates_are_exact_per_stats_period(zipf) -> None:
    ks = feed(zipf, chunks=5)
    keyed = zipf[zipf["hash32"] >= 0]
    per_period = keyed.groupby([keyed["event_ms"] // PERIOD_MS, "hash32"]).size()
    peak = per_period.groupby("hash32").max().sort_values(ascending=False, kind="stable")
    top = ks.top(10)
    assert [t["peak_messages"] for t in top] == peak.head(10).tolist()
    hottest = top[0]
    assert hottest["key"] == "k0"
    first_period = per_period.xs(hottest["hash32"], level="hash32").idxmax()
    assert hottest["peak_at_ms"] == first_period * PERIOD_MS


@pytest.mark.parametrize("chunks", [1, 2, 13, 101])
def test_results_do_not_depend_on_how_messages_are_chunked(zipf, chunks) -> None:
    whole, cut = feed(zipf, 1, capacity=128), feed(zipf, chunks, capacity=128)
    assert cut.top(20) == whole.top(20)
    assert (cut.error, cut.distinct_keys, cut.keyless, cut.messages) == \
        (whole.error, whole.distinct_keys, whole.keyless, whole.messages)
    assert np.array_equal(cut.ids, whole.ids) and np.array_equal(cut.counts, whole.counts)


def test_traffic_counts_are_exact(zipf) -> None:
    ks = feed(zipf, chunks=3)
    assert ks.messages == len(zipf)
    assert ks.bytes == int(zipf["size"].sum())
    assert ks.keyless == int((zipf["hash32"] < 0).sum())


def test_distinct_keys_are_exact_below_the_limit() -> None:
    log = zipf_log(20_000, 3_000, 0.5, 600)
    ks = feed(log, chunks=4)
    assert ks.distinct_exact
    assert ks.distinct_keys == log.loc[log["hash32"] >= 0, "hash32"].nunique()


def test_distinct_keys_beyond_the_limit_are_a_hyperloglog_estimate_within_3_percent() -> None:
    log = zipf_log(150_000, 200_000, 0.1, 600)
    true = log.loc[log["hash32"] >= 0, "hash32"].nunique()
    assert true > DISTINCT_EXACT_MAX
    ks = feed(log, chunks=2)
    assert not ks.distinct_exact
    assert abs(ks.distinct_keys - true) / true < 0.03


@pytest.mark.parametrize(("a", "b", "capacity", "want", "d"), [
    ({1: 5, 2: 3}, {2: 4, 3: 1}, 4, {1: 5, 2: 7, 3: 1}, 0),  # fits: counts add
    ({1: 5, 2: 3}, {2: 4, 3: 1}, 2, {1: 4, 2: 6}, 1),  # 3rd largest (1) subtracted
    ({1: 2, 2: 2}, {3: 2}, 2, {}, 2),  # ties at the cut all go
])
def test_misra_gries_merge(a, b, capacity, want, d) -> None:
    def arrays(m):
        return (np.array(list(m), dtype=np.int64), np.array(list(m.values()), dtype=np.int64),
                np.array([f"n{k}" for k in m], dtype=object))
    ids, counts, names, dec = misra_gries_merge(*arrays(a), *arrays(b), capacity)
    assert dict(zip(ids.tolist(), counts.tolist(), strict=True)) == want
    assert dec == d
    assert names.tolist() == [f"n{k}" for k in ids.tolist()]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=400), st.integers(1, 12))
def test_misra_gries_error_never_exceeds_n_over_capacity_plus_one(items, capacity) -> None:
    ids = np.array(items, dtype=np.int64)
    ks = KeyStats(PERIOD_MS, capacity=capacity)
    ms = np.arange(len(ids), dtype=np.int64) * 7_000  # a new period every ~9 messages
    ks.update(ms, ids, np.ones(len(ids), dtype=np.int64), ids.astype(str).astype(object))
    ks.close()
    true = pd.Series(items).value_counts()
    assert ks.error <= len(items) / (capacity + 1)
    for i, c in zip(ks.ids.tolist(), ks.counts.tolist(), strict=True):
        assert true[i] - ks.error <= c <= true[i]


def test_hyperloglog_of_nothing_is_zero() -> None:
    registers = np.zeros(1 << 14, dtype=np.uint8)
    hll_update(registers, np.zeros(0, dtype=np.int64))
    assert hll_estimate(registers) == 0.0


def state(ks: KeyStats) -> dict:
    """Every field of ``ks`` as plain values (arrays as (dtype, list))."""
    return {k: (v.dtype.str, v.tolist()) if isinstance(v, np.ndarray) else v
            for k, v in vars(ks).items()}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 30), st.integers(-1, 25)),
                min_size=1, max_size=300),
       st.integers(1, 6), st.integers(1, 4), st.integers(2, 20), st.integers(1, 3))
def test_many_topics_in_one_pass_equal_each_topic_fed_message_by_message(
        msgs, capacity, peaks, distinct_max, chunks) -> None:
    # (topic, ms step, key hash or -1 for keyless); small capacity, PEAKS and exact limit so
    # the summaries overflow, the peaks are cut and the distinct sets turn into HyperLogLog
    topic = np.array([m[0] for m in msgs], dtype=np.int64)
    order = np.argsort(topic, kind="stable")
    ms = np.cumsum([m[1] for m in msgs]).astype(np.int64)[order]  # by topic, in time
    h = np.array([m[2] for m in msgs], dtype=np.int64)[order]
    names = np.array([f"k{x}" for x in h], dtype=object)
    size = np.arange(len(msgs), dtype=np.int64)
    bounds = np.searchsorted(topic[order], np.arange(5)).astype(np.int64)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(heavy_hitters, "PEAKS", peaks)
        mp.setattr(heavy_hitters, "DISTINCT_EXACT_MAX", distinct_max)
        alone = [KeyStats(40, capacity=capacity) for _ in range(4)]
        for i, ks in enumerate(alone):
            for r in range(int(bounds[i]), int(bounds[i + 1])):
                ks.update(ms[r:r + 1], h[r:r + 1], size[r:r + 1], names[r:r + 1])
            ks.close()
        together = [KeyStats(40, capacity=capacity) for _ in range(4)]
        for part in np.array_split(np.arange(len(msgs)), chunks):  # the same cut per topic
            lo, hi = (int(part[0]), int(part[-1]) + 1) if len(part) else (0, 0)
            cut = np.clip(bounds, lo, hi) - lo
            update_many(together, cut, ms[lo:hi], h[lo:hi], size[lo:hi], names[lo:hi])
        close_many(together)
    assert [state(ks) for ks in together] == [state(ks) for ks in alone]
