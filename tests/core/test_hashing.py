"""Tests for pipelines.core.hashing (reference §1 Hashing, §3.7 worked example)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import mmh3
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.core import hashing
from pipelines.core.hashing import (
    NONE_KEY,
    ConsistentHashRing,
    bucket_hash,
    bucket_hash_array,
    classic_hash,
    hash32,
    hash32_array,
    hash_b,
    hash_b_array,
    resolve_sticky_key,
    segment_hash,
    segment_hash_array,
    sticky_hash,
    sticky_hash_from_hash,
)

U32 = 0xFFFFFFFF


def murmur3_x86_32_reference(data: bytes, seed: int = 0) -> int:
    """Independent textbook MurmurHash3 x86_32 (oracle for the known vectors)."""

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & U32

    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed
    nblocks = len(data) // 4
    for i in range(nblocks):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = rotl((k * c1) & U32, 15) * c2 & U32
        h = (rotl(h ^ k, 13) * 5 + 0xE6546B64) & U32
    tail = data[4 * nblocks :]
    k = int.from_bytes(tail, "little") if tail else 0
    k = rotl((k * c1) & U32, 15) * c2 & U32
    h ^= k
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & U32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & U32
    h ^= h >> 16
    return h


def expected_hashes(keys: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(data, mask) that hash32_array must return, from the scalar hash32."""
    data = np.array([0 if k is None else hash32(k) for k in keys], dtype=np.uint32)
    mask = np.array([k is None for k in keys], dtype=bool)
    return data, mask


def assert_hashes(result: np.ma.MaskedArray, keys: Sequence[Any]) -> None:
    data, mask = expected_hashes(keys)
    assert isinstance(result, np.ma.MaskedArray)
    assert result.dtype == np.uint32
    assert result.shape == (len(keys),)
    np.testing.assert_array_equal(np.ma.getmaskarray(result), mask)
    np.testing.assert_array_equal(np.ma.getdata(result), data)


# --------------------------------------------------------------------------------------------
# Scalar hashes: known vectors (§1.1, §1.2, §3.7)
# --------------------------------------------------------------------------------------------

KNOWN_RAW = [
    ("", 0x00000000),
    ("a", 0x3C2569B2),
    ("k", 0xCFBDA5D1),
    ("key-1", 0x98B115A0),
    ("hello", 0x248BFA47),
    ("The quick brown fox jumps over the lazy dog", 0x2E4FF723),
    ("aaaa", 0x7EEED987),
    ("abc", 0xB3DD93FA),
    ("é", 0x10110787),
    ("😀", 0xBEB42EFA),
]


@pytest.mark.parametrize(("key", "raw"), KNOWN_RAW)
def test_hash32_matches_known_vectors(key: str, raw: int) -> None:
    assert hash32(key) == raw
    assert murmur3_x86_32_reference(key.encode()) == raw


@pytest.mark.parametrize(
    ("key", "seg", "b"),
    [
        ("a", 0x3C25, 0x69B2),  # §3.7 worked example: "a" hashB 0x69b2
        ("k", 0xCFBD, 0xA5D1),  # "k" hashB 0xa5d1
        ("key-1", 0x98B1, 0x15A0),  # "key-1" hashB 0x15a0
    ],
)
def test_segment_hash_and_hash_b_match_worked_example(key: str, seg: int, b: int) -> None:
    raw = hash32(key)
    assert raw is not None
    assert segment_hash(raw) == seg
    assert hash_b(raw) == b


@given(st.integers(min_value=0, max_value=U32))
def test_segment_hash_and_hash_b_recompose_raw(raw: int) -> None:
    assert (segment_hash(raw) << 16) | hash_b(raw) == raw
    assert 0 <= segment_hash(raw) <= 0xFFFF
    assert 0 <= hash_b(raw) <= 0xFFFF


@given(st.integers(min_value=0, max_value=U32))
def test_segment_hash_and_hash_b_accept_java_signed_hash(raw: int) -> None:
    signed = raw - (1 << 32) if raw >= 1 << 31 else raw
    assert segment_hash(signed) == segment_hash(raw)
    assert hash_b(signed) == hash_b(raw)


def test_hash32_of_none_is_none() -> None:
    assert hash32(None) is None


@pytest.mark.parametrize(
    ("text", "raw_bytes"),
    [("é", b"\xc3\xa9"), ("key-1", b"key-1"), ("😀", "😀".encode()), ("", b"")],
)
def test_hash32_hashes_str_as_utf8_bytes(text: str, raw_bytes: bytes) -> None:
    assert hash32(text) == hash32(raw_bytes) == hash32(bytearray(raw_bytes))
    assert hash32(memoryview(raw_bytes)) == hash32(raw_bytes)


@pytest.mark.parametrize("bad", [1, 1.5, ["a"], object()])
def test_hash32_rejects_non_key_types(bad: object) -> None:
    with pytest.raises(TypeError):
        hash32(bad)  # type: ignore[arg-type]


def test_hash32_rejects_lone_surrogate() -> None:
    with pytest.raises(UnicodeEncodeError):
        hash32("\ud800")


@pytest.mark.parametrize(
    ("key", "expected"), [("a", 0x3C2569B2), ("k", 0x4FBDA5D1), ("key-1", 0x18B115A0)]
)
def test_classic_hash_clears_sign_bit(key: str, expected: int) -> None:
    assert classic_hash(key) == expected


def test_classic_hash_rejects_keyless() -> None:
    with pytest.raises(TypeError):
        classic_hash(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "expected"), [("a", 0x69B2), ("k", 0xA5D1), ("key-1", 0x15A0), (None, 0), ("", 0)]
)
def test_bucket_hash_is_hash_b_and_zero_when_keyless(key: str | None, expected: int) -> None:
    assert bucket_hash(key) == expected


# --------------------------------------------------------------------------------------------
# Sticky hash (§1.4)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("a", 0x3C2569B2 % 65535 + 1),
        ("k", 0x4FBDA5D1 % 65535 + 1),
        ("key-1", 0x18B115A0 % 65535 + 1),
    ],
)
def test_sticky_hash_default_range_is_classic_mod_65535_plus_1(key: str, expected: int) -> None:
    assert sticky_hash(key) == expected
    assert sticky_hash(key, 1, 65535) == expected


@given(st.binary(max_size=64))
def test_sticky_hash_default_range_is_never_zero(key: bytes) -> None:
    assert 1 <= sticky_hash(key) <= 65535


@given(st.integers(min_value=0, max_value=U32))
def test_sticky_hash_full_range_equals_hash_b_with_zero_to_one(raw: int) -> None:
    expected = hash_b(raw) or 1
    assert sticky_hash_from_hash(raw, 0, 65535) == expected


@pytest.mark.parametrize(("raw", "expected"), [(0, 1), (0x10000, 1), (0xFFFF0000, 1), (1, 1)])
def test_sticky_hash_zero_result_becomes_one(raw: int, expected: int) -> None:
    assert sticky_hash_from_hash(raw, 0, 65535) == expected


@given(st.integers(min_value=0, max_value=U32))
def test_sticky_hash_from_hash_same_for_raw_classic_and_signed(raw: int) -> None:
    signed = raw - (1 << 32) if raw >= 1 << 31 else raw
    expected = (raw & 0x7FFFFFFF) % 65535 + 1
    assert sticky_hash_from_hash(raw) == expected
    assert sticky_hash_from_hash(raw & 0x7FFFFFFF) == expected
    assert sticky_hash_from_hash(signed) == expected


@pytest.mark.parametrize(
    ("start", "end", "raw", "expected"), [(10, 19, 0x7FFFFFFF, 17), (5, 5, 9, 5)]
)
def test_sticky_hash_custom_range_offsets_by_start(
    start: int, end: int, raw: int, expected: int
) -> None:
    assert sticky_hash_from_hash(raw, start, end) == expected


@pytest.mark.parametrize(("start", "end"), [(-1, 10), (10, 9)])
def test_sticky_hash_rejects_invalid_range(start: int, end: int) -> None:
    with pytest.raises(ValueError):
        sticky_hash_from_hash(1, start, end)


def test_sticky_hash_of_key_equals_sticky_hash_from_hash() -> None:
    raw = hash32("key-1")
    assert raw is not None
    assert sticky_hash("key-1", 0, 65535) == sticky_hash_from_hash(raw, 0, 65535) == 0x15A0


# --------------------------------------------------------------------------------------------
# Sticky key resolution (§1.3 broker side)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "producer", "seq", "expected"),
    [
        ("k1", "p", 5, b"k1"),
        ("é", None, None, "é".encode()),
        (b"\x00\xff", "p", 5, b"\x00\xff"),
        ("", "p", 5, b""),
        (None, "prod-a", 42, b"prod-a-42"),
        (None, "p", -1, b"p--1"),
        (None, "p", 0, b"p-0"),
        (None, None, 42, NONE_KEY),
        (None, "p", None, NONE_KEY),
        (None, None, None, b"NONE_KEY"),
    ],
)
def test_resolve_sticky_key_order(
    key: str | bytes | None, producer: str | None, seq: int | None, expected: bytes
) -> None:
    assert resolve_sticky_key(key, producer, seq) == expected


# --------------------------------------------------------------------------------------------
# Classic consistent-hashing ring (§1.4)
# --------------------------------------------------------------------------------------------


def ring_point(name: str, name_index: int, i: int) -> int:
    return sticky_hash(f"{name}\0{name_index}\0{i}".encode())


def test_ring_without_consumers_selects_none() -> None:
    ring = ConsistentHashRing([])
    assert ring.select(1) is None
    assert ring.select_index(1) is None
    assert ring.points == []


@pytest.mark.parametrize("h", [1, 2, 1000, 32768, 65535])
def test_ring_with_one_consumer_always_selects_it(h: int) -> None:
    assert ConsistentHashRing(["only"]).select(h) == "only"


def test_ring_points_are_sticky_hash_of_name_index_and_replica() -> None:
    ring = ConsistentHashRing(["c1", "c2"], replica_points=10)
    expected = {ring_point("c1", 0, i): "c1" for i in range(10)}
    for i in range(10):
        expected.setdefault(ring_point("c2", 0, i), "c2")
    assert ring.points == sorted(expected.items())


def test_ring_default_has_100_points_per_consumer() -> None:
    ring = ConsistentHashRing(["c1"])
    assert ring.replica_points == 100
    assert [p for p, _ in ring.points] == sorted({ring_point("c1", 0, i) for i in range(100)})


def test_ring_duplicate_names_get_increasing_name_index() -> None:
    ring = ConsistentHashRing(["c1", "c1"], replica_points=5)
    second = {ring_point("c1", 1, i) for i in range(5)} - {ring_point("c1", 0, i) for i in range(5)}
    owners = {p: ring.select_index(p) for p in second}
    assert owners and set(owners.values()) == {1}


def test_ring_collision_keeps_first_inserted_consumer() -> None:
    # consumer-80 and consumer-334 share ring point 64051 with replica_points=1.
    assert ring_point("consumer-80", 0, 0) == ring_point("consumer-334", 0, 0) == 64051
    assert ConsistentHashRing(["consumer-80", "consumer-334"], 1).points == [(64051, "consumer-80")]
    assert ConsistentHashRing(["consumer-334", "consumer-80"], 1).points == [
        (64051, "consumer-334")
    ]


def test_ring_select_takes_smallest_point_at_or_above_hash_and_wraps() -> None:
    ring = ConsistentHashRing(["c1", "c2", "c3"], replica_points=3)
    points = ring.points
    for (p, owner), (_, next_owner) in zip(points, points[1:] + points[:1], strict=True):
        assert ring.select(p) == owner
        if p + 1 <= 65535:
            assert ring.select(p + 1) == next_owner
    assert ring.select(points[0][0] - 1 if points[0][0] > 1 else 1) == points[0][1]
    assert ring.select(points[-1][0] + 1) == points[0][1]


def test_ring_rejects_zero_replica_points() -> None:
    with pytest.raises(ValueError):
        ConsistentHashRing(["c1"], replica_points=0)


# --------------------------------------------------------------------------------------------
# hash32_array: values, mask, containers
# --------------------------------------------------------------------------------------------

SAMPLE = ["a", None, "k", "key-1", "", "é😀", None, "x" * 37, "hello world"]


def test_hash32_array_returns_uint32_masked_array_with_full_mask() -> None:
    result = hash32_array(["a", None])
    assert isinstance(result, np.ma.MaskedArray)
    assert result.dtype == np.uint32
    assert isinstance(result.mask, np.ndarray) and result.mask.dtype == bool
    assert result.mask.tolist() == [False, True]
    assert np.ma.getdata(result).tolist() == [0x3C2569B2, 0]


def test_hash32_array_mask_is_full_even_without_nulls() -> None:
    result = hash32_array(["a", "b"])
    assert np.ma.getmaskarray(result).tolist() == [False, False]
    assert isinstance(result.mask, np.ndarray)


CONTAINERS = [
    ("list", lambda ks: list(ks)),
    ("tuple", lambda ks: tuple(ks)),
    ("generator", lambda ks: (k for k in ks)),
    ("numpy_object", lambda ks: np.array(ks, dtype=object)),
    ("pandas_object", lambda ks: pd.Series(ks, dtype=object)),
    ("pandas_string_python", lambda ks: pd.Series(ks, dtype="string[python]")),
    ("pandas_string_pyarrow", lambda ks: pd.Series(ks, dtype="string[pyarrow]")),
    ("pandas_category", lambda ks: pd.Series(ks, dtype="category")),
    ("pandas_index", lambda ks: pd.Index(ks, dtype=object)),
    ("arrow_string", lambda ks: pa.array(ks, type=pa.string())),
    ("arrow_large_string", lambda ks: pa.array(ks, type=pa.large_string())),
    ("arrow_binary", lambda ks: pa.array(_enc(ks), type=pa.binary())),
    ("arrow_large_binary", lambda ks: pa.array(_enc(ks), type=pa.large_binary())),
    ("arrow_string_view", lambda ks: pa.array(ks, type=pa.string_view())),
    ("arrow_dictionary", lambda ks: pa.array(ks, type=pa.string()).dictionary_encode()),
    (
        "arrow_chunked",
        lambda ks: pa.chunked_array([ks[:3], [], ks[3:5], ks[5:]], type=pa.string()),
    ),
    ("arrow_sliced", lambda ks: pa.array(["zz", None, *ks, "tail"], type=pa.string())[2:-1]),
    (
        "arrow_large_sliced",
        lambda ks: pa.array(["zz", *ks, None], type=pa.large_string()).slice(1, len(ks)),
    ),
    (
        "arrow_chunked_of_slices",
        lambda ks: pa.chunked_array(
            [
                pa.array(["p", *ks[:4]], type=pa.string()).slice(1),
                pa.array([*ks[4:], "q"], type=pa.string()).slice(0, len(ks) - 4),
            ]
        ),
    ),
]


def _enc(keys: list[str | None]) -> list[bytes | None]:
    return [None if k is None else k.encode() for k in keys]


@pytest.mark.parametrize(("name", "make"), CONTAINERS, ids=[c[0] for c in CONTAINERS])
def test_hash32_array_accepts_container(name: str, make: Callable[[list[Any]], Any]) -> None:
    assert_hashes(hash32_array(make(SAMPLE)), SAMPLE)


@pytest.mark.parametrize(
    "keys",
    [
        pd.Series(["a", np.nan, "k"], dtype=object),
        pd.Series(["a", pd.NA, "k"], dtype="string[python]"),
        ["a", float("nan"), "k"],
        np.array(["a", None, "k"], dtype=object),
    ],
    ids=["pandas_nan", "pandas_na", "list_nan", "numpy_none"],
)
def test_hash32_array_treats_nan_and_na_as_null(keys: object) -> None:
    assert_hashes(hash32_array(keys), ["a", None, "k"])


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (np.array(["a", "key-1"]), ["a", "key-1"]),
        (np.array([b"a", b"key-1"]), [b"a", b"key-1"]),
        (["a", b"k", None, bytearray(b"key-1")], ["a", b"k", None, b"key-1"]),
    ],
    ids=["numpy_unicode", "numpy_bytes", "mixed_str_bytes"],
)
def test_hash32_array_accepts_fixed_width_and_mixed_keys(keys: object, expected: list[Any]) -> None:
    assert_hashes(hash32_array(keys), expected)


@pytest.mark.parametrize(
    "keys",
    [
        [],
        pa.array([], type=pa.string()),
        pa.chunked_array([], type=pa.string()),
        np.array([], dtype=object),
    ],
    ids=["list", "arrow", "chunked_no_chunks", "numpy"],
)
def test_hash32_array_of_empty_input_is_empty(keys: object) -> None:
    result = hash32_array(keys)
    assert result.shape == (0,) and result.dtype == np.uint32


@pytest.mark.parametrize(
    "keys",
    [[None, None], pa.nulls(3), pa.array([None, None], type=pa.string()), [float("nan")]],
    ids=["list_none", "arrow_null_type", "arrow_all_null_string", "list_all_nan"],
)
def test_hash32_array_of_only_nulls_is_fully_masked(keys: object) -> None:
    result = hash32_array(keys)
    assert np.ma.getmaskarray(result).all()
    assert not np.ma.getdata(result).any()


def test_hash32_array_ignores_bytes_under_null_slots() -> None:
    # A null slot whose offsets still span bytes ("zz") must be masked with data 0.
    validity = pa.py_buffer(bytes([0b101]))
    offsets = pa.py_buffer(np.array([0, 1, 3, 4], dtype=np.int32).tobytes())
    data = pa.py_buffer(b"azzk")
    arr = pa.StringArray.from_buffers(3, offsets, data, validity, null_count=1)
    assert_hashes(hash32_array(arr), ["a", None, "k"])


@pytest.mark.parametrize("length", [*list(range(0, 70)), 255, 256, 257, 300, 1000])
def test_hash32_array_handles_every_block_and_tail_length(length: int) -> None:
    keys: list[object] = [bytes((i * 7 + length) % 256 for i in range(length)), "a", None]
    assert_hashes(hash32_array(keys), keys)


def test_hash32_array_hashes_large_arrays_in_bounded_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hashing, "_MAX_KEYS_PER_PASS", 3)
    keys: list[object] = [f"k{i}" if i % 4 else None for i in range(20)]
    assert_hashes(hash32_array(pa.array(keys, type=pa.string())), keys)
    assert_hashes(hash32_array(pa.chunked_array([keys[:7], keys[7:]], type=pa.string())), keys)


def test_hash32_array_handles_huge_outlier_key() -> None:
    huge = "Z" * 10_000_000
    keys: list[object] = ["a", huge, None, "key-1", "y" * 300]
    result = hash32_array(pa.array(keys, type=pa.string()))
    assert_hashes(result, keys)
    assert int(result[1]) == mmh3.hash(huge.encode(), 0, signed=False)


@pytest.mark.parametrize(
    ("keys", "error"),
    [
        ([1, 2], TypeError),
        (["a", 1], TypeError),
        (np.array([1, 2]), TypeError),
        (pa.array([1, 2]), TypeError),
        (pa.array([], type=pa.int64()), TypeError),
        ("abc", TypeError),
        (b"abc", TypeError),
        (np.array([["a"], ["b"]], dtype=object), ValueError),
    ],
    ids=[
        "ints",
        "str_and_int",
        "numpy_int",
        "arrow_int",
        "arrow_empty_int",
        "single_str",
        "single_bytes",
        "2d",
    ],
)
def test_hash32_array_rejects_non_key_input(keys: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        hash32_array(keys)


# Hypothesis: equality with mmh3 on random keys -----------------------------------------------

text_keys = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=st.sampled_from("😀🎉é中a\u0000"), max_size=40),
    st.text(min_size=200, max_size=600),
)
binary_keys = st.binary(max_size=300)


@settings(deadline=None, max_examples=150)
@given(st.lists(text_keys, max_size=60))
def test_hash32_array_equals_mmh3_on_text_keys(keys: list[str]) -> None:
    result = hash32_array(pa.array(keys, type=pa.string()))
    expected = [mmh3.hash(k.encode("utf-8"), 0, signed=False) for k in keys]
    assert np.ma.getdata(result).tolist() == expected
    assert not np.ma.getmaskarray(result).any()


@settings(deadline=None, max_examples=150)
@given(st.lists(binary_keys, max_size=60))
def test_hash32_array_equals_mmh3_on_binary_keys(keys: list[bytes]) -> None:
    result = hash32_array(pa.array(keys, type=pa.large_binary()))
    assert np.ma.getdata(result).tolist() == [mmh3.hash(k, 0, signed=False) for k in keys]


@settings(deadline=None, max_examples=150)
@given(st.lists(st.one_of(st.none(), text_keys, binary_keys), max_size=60))
def test_hash32_array_equals_mmh3_with_nulls_mixed_in(keys: list[str | bytes | None]) -> None:
    result = hash32_array(keys)
    mask = [k is None for k in keys]
    expected = [
        0 if k is None else mmh3.hash(k.encode() if isinstance(k, str) else k, 0, signed=False)
        for k in keys
    ]
    assert np.ma.getmaskarray(result).tolist() == mask
    assert np.ma.getdata(result).tolist() == expected


@settings(deadline=None, max_examples=50)
@given(st.lists(st.one_of(st.none(), text_keys), min_size=1, max_size=40), st.data())
def test_hash32_array_is_independent_of_chunking_and_slicing(
    keys: list[str | None], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(min_value=0, max_value=len(keys)))
    padded = pa.array(["pre", *keys, "post"], type=pa.string()).slice(1, len(keys))
    chunked = pa.chunked_array([keys[:cut], keys[cut:]], type=pa.string())
    whole = hash32_array(keys)
    for other in (hash32_array(padded), hash32_array(chunked)):
        assert np.ma.getmaskarray(other).tolist() == np.ma.getmaskarray(whole).tolist()
        assert np.ma.getdata(other).tolist() == np.ma.getdata(whole).tolist()


# --------------------------------------------------------------------------------------------
# segment_hash_array / hash_b_array / bucket_hash_array
# --------------------------------------------------------------------------------------------


def test_segment_and_hash_b_arrays_split_worked_example() -> None:
    raw = hash32_array(["a", "k", "key-1"])
    assert segment_hash_array(raw).tolist() == [0x3C25, 0xCFBD, 0x98B1]
    assert hash_b_array(raw).tolist() == [0x69B2, 0xA5D1, 0x15A0]


@pytest.mark.parametrize("fn", [segment_hash_array, hash_b_array])
def test_ring_hash_arrays_return_int32(fn: Callable[[Any], Any]) -> None:
    out = fn(np.array([0xFFFFFFFF, 0], dtype=np.uint32))
    assert out.dtype == np.int32
    assert out.tolist() == [0xFFFF, 0]


@pytest.mark.parametrize("fn", [segment_hash_array, hash_b_array])
def test_ring_hash_arrays_keep_mask_with_zero_data(fn: Callable[[Any], Any]) -> None:
    out = fn(hash32_array(["a", None, "k"]))
    assert isinstance(out, np.ma.MaskedArray)
    assert np.ma.getmaskarray(out).tolist() == [False, True, False]
    assert np.ma.getdata(out)[1] == 0


@given(st.lists(st.integers(min_value=0, max_value=U32), max_size=50))
def test_ring_hash_arrays_recompose_raw_and_match_scalars(raws: list[int]) -> None:
    h = np.array(raws, dtype=np.uint32)
    seg = segment_hash_array(h).astype(np.int64)
    b = hash_b_array(h).astype(np.int64)
    assert ((seg << 16) | b).tolist() == raws
    assert seg.tolist() == [segment_hash(r) for r in raws]
    assert b.tolist() == [hash_b(r) for r in raws]


def test_ring_hash_arrays_accept_java_signed_int32() -> None:
    unsigned = np.array([0xCFBDA5D1, 0x3C2569B2], dtype=np.uint32)
    signed = unsigned.view(np.int32)
    assert segment_hash_array(signed).tolist() == segment_hash_array(unsigned).tolist()
    assert hash_b_array(signed).tolist() == hash_b_array(unsigned).tolist()


@pytest.mark.parametrize("fn", [segment_hash_array, hash_b_array])
def test_ring_hash_arrays_reject_float_input(fn: Callable[[Any], Any]) -> None:
    with pytest.raises(TypeError):
        fn(np.array([1.0]))


def test_bucket_hash_array_is_hash_b_with_keyless_at_zero() -> None:
    out = bucket_hash_array(["a", None, "k", "key-1", ""])
    assert isinstance(out, np.ndarray) and not isinstance(out, np.ma.MaskedArray)
    assert out.dtype == np.int32
    assert out.tolist() == [0x69B2, 0, 0xA5D1, 0x15A0, 0]


@settings(deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=30)), max_size=40))
def test_bucket_hash_array_matches_scalar_bucket_hash(keys: list[str | None]) -> None:
    assert bucket_hash_array(keys).tolist() == [bucket_hash(k) for k in keys]
