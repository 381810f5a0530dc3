"""Message-key hashing: murmur3, the two 16-bit rings, sticky hashes and the classic hash ring.

Everything here follows reference §1 (Hashing) of ``pulsar-behavior.md``:

* ``hash32``: MurmurHash3 x86 32-bit, seed 0, unsigned ("raw" hash, §1.1) of the key's UTF-8
  bytes (a ``str`` key) or of the bytes as they are (an ordering key, ``bytes``).
* ``segment_hash``: the high 16 bits of the raw hash, routing messages to segments (§1.2).
* ``hash_b``: the low 16 bits, routing messages to entry buckets (§1.2, §3).
* ``classic_hash`` / ``sticky_hash``: the classic Key_Shared hashes (§1.1, §1.4).
* ``ConsistentHashRing``: the classic Key_Shared consistent-hashing consumer selector (§1.4).

The ``*_array`` functions are the vectorized forms used on whole columns. ``hash32_array`` runs
MurmurHash3 in NumPy directly over Arrow's offsets and data buffers (no Python object per key),
several times faster than calling ``mmh3`` once per key, and is bit-for-bit equal to ``mmh3``.

Pure Python + NumPy; ``pyarrow`` is used when installed (fast path) and is otherwise optional.
"""

from __future__ import annotations

import bisect
import math
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import mmh3
import numpy as np
import numpy.typing as npt

try:
    import pyarrow as pa

    _HAVE_ARROW = True
except ImportError:  # pragma: no cover - pyarrow is a project dependency
    _HAVE_ARROW = False

__all__ = [
    "NONE_KEY",
    "ConsistentHashRing",
    "bucket_hash",
    "bucket_hash_array",
    "classic_hash",
    "hash32",
    "hash32_array",
    "hash_b",
    "hash_b_array",
    "resolve_sticky_key",
    "segment_hash",
    "segment_hash_array",
    "sticky_hash",
    "sticky_hash_from_hash",
]

Key = str | bytes | bytearray | memoryview | None
"""A message key: ``str`` (hashed as UTF-8), bytes-like (hashed as is) or ``None`` (keyless)."""

NONE_KEY = b"NONE_KEY"
"""Broker's last-resort sticky key when an entry has no key and no producer/sequence (§1.3)."""

CLASSIC_HASH_MASK = 0x7FFFFFFF
"""Classic ``makeHash`` clears the sign bit of the raw hash (§1.1)."""

STICKY_RANGE_START = 1
STICKY_RANGE_END = 65535
"""Default sticky-hash range of the consistent-hashing selector, inclusive (§1.4)."""

DEFAULT_REPLICA_POINTS = 100
"""Broker default ``subscriptionKeySharedConsistentHashingReplicaPoints`` (§1.4)."""

# Keys longer than this (bytes) are hashed one by one with mmh3 instead of in the vectorized
# kernel, so one huge outlier key cannot make the block loop or its index matrices explode.
_LONG_KEY_BYTES = 256
# Arrow arrays are hashed in slices of at most this many keys, bounding temporary memory
# (about 50 bytes per key plus the key bytes) whatever the input size.
_MAX_KEYS_PER_PASS = 1 << 20

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_M5 = np.uint32(5)
_N1 = np.uint32(0xE6546B64)
_F1 = np.uint32(0x85EBCA6B)
_F2 = np.uint32(0xC2B2AE35)
_S13 = np.uint32(13)
_S16 = np.uint32(16)
_TAIL_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF], dtype=np.uint32)
_LE_U32 = np.dtype("<u4")

U32Array = npt.NDArray[np.uint32]
I32Array = npt.NDArray[np.int32]


# --------------------------------------------------------------------------------------------
# Scalars
# --------------------------------------------------------------------------------------------


def _key_bytes(key: str | bytes | bytearray | memoryview) -> bytes:
    if isinstance(key, str):
        # Always encode explicitly: mmh3 must never see a str (lone surrogates crash it).
        return key.encode("utf-8")
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    raise TypeError(f"key must be str, bytes or None, not {type(key).__name__}")


def hash32(key: Key) -> int | None:
    """Raw murmur3 hash of one message key (reference §1.1, "raw" / ``makeRawHash``).

    Args:
        key: ``str`` → hashed over its UTF-8 bytes; ``bytes``/``bytearray``/``memoryview`` (an
            ordering key) → hashed as is; ``None`` → keyless message.

    Returns:
        The unsigned MurmurHash3 x86 32-bit hash, seed 0, in ``[0, 2**32 - 1]``; ``None`` for a
        keyless message. ``hash32("a") == 0x3C2569B2``.

    Raises:
        TypeError: ``key`` is of another type.
        UnicodeEncodeError: ``key`` is a ``str`` with lone surrogates (not UTF-8 encodable).
    """
    if key is None:
        return None
    return int(mmh3.hash(_key_bytes(key), 0, signed=False))


def segment_hash(h: int) -> int:
    """Segment-routing hash: the high 16 bits of a raw hash, ``(h >>> 16) & 0xFFFF`` (§1.2).

    ``h`` is a raw 32-bit hash, unsigned (``hash32``) or Java-signed; result in ``[0, 65535]``.
    Invariant: ``(segment_hash(h) << 16) | hash_b(h) == h`` for unsigned ``h``.
    """
    return (h >> 16) & 0xFFFF


def hash_b(h: int) -> int:
    """Entry-bucket hash ``hashB``: the low 16 bits of a raw hash, ``h & 0xFFFF`` (§1.2, §3).

    ``h`` is a raw 32-bit hash, unsigned or Java-signed; result in ``[0, 65535]``.
    """
    return h & 0xFFFF


def bucket_hash(key: Key) -> int:
    """Client batcher's bucket hash of one message: ``hash_b`` of the key, ``0`` when keyless.

    Reference §1.3 "Bucket hash in the batcher": keyless messages always land at ``hashB`` 0.
    Result in ``[0, 65535]``. Raises like :func:`hash32`.
    """
    h = hash32(key)
    return 0 if h is None else hash_b(h)


def classic_hash(key: str | bytes | bytearray | memoryview) -> int:
    """Pulsar's classic ``makeHash``: ``raw & 0x7FFFFFFF`` (sign bit cleared), §1.1.

    Returns an int in ``[0, 2**31 - 1]``.

    Raises:
        TypeError: ``key`` is ``None`` (resolve the sticky key first, see
            :func:`resolve_sticky_key`) or not str/bytes-like.
        UnicodeEncodeError: as :func:`hash32`.
    """
    if key is None:
        raise TypeError("classic_hash needs a key; resolve keyless messages first")
    return int(mmh3.hash(_key_bytes(key), 0, signed=False)) & CLASSIC_HASH_MASK


def _check_range(range_start: int, range_end: int) -> None:
    if range_start < 0 or range_end < range_start:
        raise ValueError(f"invalid sticky hash range [{range_start}, {range_end}]")


def sticky_hash_from_hash(
    h: int, range_start: int = STICKY_RANGE_START, range_end: int = STICKY_RANGE_END
) -> int:
    """Classic Key_Shared sticky hash from an already computed hash (reference §1.4).

    ``(classic % size) + range_start`` with ``classic = h & 0x7FFFFFFF`` and
    ``size = range_end - range_start + 1``; a result of 0 (the "not set" value) becomes 1.

    Args:
        h: the raw hash (unsigned or Java-signed) or the classic hash; both give the same result.
        range_start, range_end: inclusive range. ``[1, 65535]`` is the consistent-hashing
            selector (result always in ``[1, 65535]``); ``[0, 65535]`` is the entry-bucket
            selector (result = ``hash_b`` with 0 → 1).

    Raises:
        ValueError: ``range_start < 0`` or ``range_end < range_start``.
    """
    _check_range(range_start, range_end)
    size = range_end - range_start + 1
    result = (h & CLASSIC_HASH_MASK) % size + range_start
    return 1 if result == 0 else result


def sticky_hash(
    key: str | bytes | bytearray | memoryview,
    range_start: int = STICKY_RANGE_START,
    range_end: int = STICKY_RANGE_END,
) -> int:
    """Classic Key_Shared sticky hash of a key (reference §1.4, ``StickyKeyConsumerSelectorUtils``).

    ``(classic_hash(key) % size) + range_start``, 0 → 1; see :func:`sticky_hash_from_hash`.
    Raises like :func:`classic_hash` and :func:`sticky_hash_from_hash`.
    """
    return sticky_hash_from_hash(classic_hash(key), range_start, range_end)


def resolve_sticky_key(
    key: str | bytes | bytearray | memoryview | None,
    producer_name: str | None,
    sequence_id: int | None,
) -> bytes:
    """Sticky key the broker uses for an unstamped entry (reference §1.3, broker side).

    Order: the key if present (``bytes`` = ordering key, as is; ``str`` = partition key, UTF-8;
    an empty key counts as present) → ``"<producer_name>-<sequence_id>"`` UTF-8 when both are
    known → the literal ``b"NONE_KEY"``.

    Raises:
        TypeError: ``key`` is not str/bytes-like/None.
    """
    if key is not None:
        return _key_bytes(key)
    if producer_name is not None and sequence_id is not None:
        return f"{producer_name}-{int(sequence_id)}".encode()
    return NONE_KEY


class ConsistentHashRing:
    """Classic Key_Shared consistent-hashing consumer selector (reference §1.4).

    Consumers are inserted in the given order (connection order). Consumer ``name`` gets
    ``replica_points`` ring points; point ``i`` is
    ``sticky_hash(UTF8(name + "\\0" + name_index + "\\0" + i))`` over ``[1, 65535]``, where
    ``name_index`` is the lowest index not yet used by an earlier consumer with the same name
    (0 for a unique name). When two points collide, the consumer inserted first keeps the point.
    ``select(h)`` returns the consumer owning the smallest point ``>= h``, wrapping to the
    smallest point. Immutable: build a new ring when the consumer set changes.

    Args:
        consumer_names: consumer names in insertion order (duplicates allowed).
        replica_points: points per consumer, ``>= 1`` (broker default 100).

    Raises:
        ValueError: ``replica_points < 1``.
    """

    def __init__(
        self, consumer_names: Sequence[str], replica_points: int = DEFAULT_REPLICA_POINTS
    ) -> None:
        if replica_points < 1:
            raise ValueError(f"replica_points must be >= 1, got {replica_points}")
        self.consumer_names: tuple[str, ...] = tuple(consumer_names)
        self.replica_points = replica_points
        owner: dict[int, int] = {}
        seen: dict[str, int] = {}
        for pos, name in enumerate(self.consumer_names):
            # No removals in an immutable ring, so the lowest free index is the count so far.
            name_index = seen.get(name, 0)
            seen[name] = name_index + 1
            for i in range(replica_points):
                point = sticky_hash(f"{name}\0{name_index}\0{i}".encode())
                owner.setdefault(point, pos)
        self._points: list[int] = sorted(owner)
        self._owners: list[int] = [owner[p] for p in self._points]

    @property
    def points(self) -> list[tuple[int, str]]:
        """Ring points ascending, as ``(point, consumer name)``."""
        names = self.consumer_names
        return [(p, names[o]) for p, o in zip(self._points, self._owners, strict=True)]

    def select_index(self, h: int) -> int | None:
        """Position in ``consumer_names`` of the consumer for sticky hash ``h`` (``None`` if the
        ring is empty). Use this to tell apart consumers that share a name."""
        if not self._points:
            return None
        i = bisect.bisect_left(self._points, h)
        return self._owners[i if i < len(self._points) else 0]

    def select(self, h: int) -> str | None:
        """Consumer name for sticky hash ``h`` (``sticky_hash`` over ``[1, 65535]``): the owner of
        the smallest ring point ``>= h``, wrapping around; ``None`` when there are no consumers."""
        pos = self.select_index(h)
        return None if pos is None else self.consumer_names[pos]

    def __repr__(self) -> str:
        return (
            f"ConsistentHashRing({list(self.consumer_names)!r}, "
            f"replica_points={self.replica_points})"
        )


# --------------------------------------------------------------------------------------------
# Vectorized MurmurHash3 x86_32 over (offsets, data) buffers
# --------------------------------------------------------------------------------------------


def _mix_k(k: U32Array, tmp: U32Array) -> None:
    """In place: k *= c1; k = rotl(k, 15); k *= c2 (uint32 wraparound)."""
    k *= _C1
    np.left_shift(k, 15, out=tmp)
    k >>= 17
    k |= tmp
    k *= _C2


def _mix_blocks(buf: npt.NDArray[np.uint8], pos: npt.NDArray[np.int64],
                lengths: npt.NDArray[np.int64]) -> U32Array:
    """MurmurHash3's body: the hash state after mixing every whole 4-byte block of each key
    (``lengths[i]`` bytes at ``buf[pos[i]:]``; ``buf`` is padded with 4 zero bytes). Returns
    ``uint32`` of length ``len(pos)``."""
    n = len(pos)
    size = len(buf) - 4
    # Group keys by whole-block count (<= 64 here); within a group, gather each key's blocks as
    # one row of a (keys, blocks) matrix via a strided little-endian uint32 view at byte stride 1.
    nblocks = (lengths >> 2).astype(np.uint8)
    order = np.argsort(nblocks, kind="stable")
    counts = np.bincount(nblocks)
    ends = np.cumsum(counts)
    h = np.zeros(n, dtype=np.uint32)
    for b in range(1, len(counts)):
        m = int(counts[b])
        if m == 0:
            continue
        idx = order[ends[b] - m : ends[b]]
        view: U32Array = np.ndarray(
            shape=(size - 4 * b + 1, b), dtype=_LE_U32, buffer=buf, strides=(1, 4)
        )
        k = view[pos[idx]].astype(np.uint32, copy=False)  # (m, b), rows in key order
        tmp = np.empty_like(k)
        _mix_k(k, tmp)
        cols = np.ascontiguousarray(k.T)  # (b, m)
        hh = np.zeros(m, dtype=np.uint32)
        t = tmp.reshape(-1)[:m]
        for c in range(b):
            hh ^= cols[c]
            np.left_shift(hh, 13, out=t)
            hh >>= 19
            hh |= t
            hh *= _M5
            hh += _N1
        h[idx] = hh
    return h


def _murmur3_buffers(
    data: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], valid: npt.NDArray[np.bool_]
) -> U32Array:
    """MurmurHash3 x86_32 (seed 0) of every key ``data[offsets[i]:offsets[i + 1]]``.

    ``offsets`` is non-decreasing, length ``n + 1``; ``valid`` (length ``n``) is False for null
    keys, whose result is 0. Returns ``uint32`` of length ``n``.
    """
    n = len(offsets) - 1
    out = np.zeros(n, dtype=np.uint32)
    if n <= 0:
        return out
    lengths = np.diff(offsets)
    lengths[~valid] = 0
    long_keys = np.flatnonzero(lengths > _LONG_KEY_BYTES)
    for i in long_keys:
        s = int(offsets[i])
        out[i] = mmh3.hash(data[s : s + int(lengths[i])].tobytes(), 0, signed=False)
    lengths[long_keys] = 0

    start, end = int(offsets[0]), int(offsets[-1])
    size = end - start
    # Private copy padded with 4 zero bytes, so a 4-byte read at any key start is in bounds.
    buf = np.zeros(size + 4, dtype=np.uint8)
    buf[:size] = data[start:end]
    pos = offsets[:-1] - start

    h = _mix_blocks(buf, pos, lengths)

    # Tail (0-3 bytes, little-endian), length, fmix - for all keys at once.
    words: U32Array = np.ndarray(shape=(size + 1,), dtype=_LE_U32, buffer=buf, strides=(1,))
    k = words[pos + (lengths & ~3)].astype(np.uint32, copy=False)
    k &= _TAIL_MASKS[lengths & 3]
    _mix_k(k, np.empty_like(k))
    h ^= k
    h ^= lengths.astype(np.uint32)
    h ^= np.right_shift(h, _S16)
    h *= _F1
    h ^= np.right_shift(h, _S13)
    h *= _F2
    h ^= np.right_shift(h, _S16)

    short = np.ones(n, dtype=bool)
    short[long_keys] = False
    short &= valid
    out[short] = h[short]
    return out


# --------------------------------------------------------------------------------------------
# Input containers → (hashes, valid)
# --------------------------------------------------------------------------------------------


def _is_null_scalar(k: object) -> bool:
    if k is None or (isinstance(k, float) and math.isnan(k)):
        return True
    pd = sys.modules.get("pandas")
    return pd is not None and k is pd.NA


def _hash_python_keys(keys: Iterable[object]) -> tuple[U32Array, npt.NDArray[np.bool_]]:
    """Slow-but-general path: encode keys in Python, then run the vectorized kernel."""
    parts: list[bytes] = []
    lengths: list[int] = []
    valid: list[bool] = []
    for k in keys:
        if _is_null_scalar(k):
            lengths.append(0)
            valid.append(False)
            continue
        if not isinstance(k, str | bytes | bytearray | memoryview):
            raise TypeError(f"keys must be str, bytes or null, got {type(k).__name__}")
        b = _key_bytes(k)
        parts.append(b)
        lengths.append(len(b))
        valid.append(True)
    data = np.frombuffer(b"".join(parts), dtype=np.uint8)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64), out=offsets[1:])
    v = np.asarray(valid, dtype=bool)
    return _murmur3_buffers(data, offsets, v), v


def _hash_arrow_array(arr: Any) -> tuple[U32Array, npt.NDArray[np.bool_]]:
    """Hash one pyarrow Array of a string/binary type straight from its buffers."""
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    n = len(arr)
    if pa.types.is_null(t) or (n > 0 and arr.null_count == n):
        return np.zeros(n, dtype=np.uint32), np.zeros(n, dtype=bool)
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        arr = arr.cast(pa.large_binary())
        t = arr.type
    if pa.types.is_string(t) or pa.types.is_binary(t):
        off_dtype: type[np.signedinteger[Any]] = np.int32
    elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        off_dtype = np.int64
    else:
        raise TypeError(f"keys must be an Arrow string or binary array, got type {t}")
    if n == 0:
        return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=bool)
    bufs = arr.buffers()
    itemsize = np.dtype(off_dtype).itemsize
    offsets = np.frombuffer(
        bufs[1], dtype=off_dtype, count=n + 1, offset=arr.offset * itemsize
    ).astype(np.int64)
    data_buf = bufs[2]
    data: npt.NDArray[np.uint8]
    if data_buf is None or data_buf.size == 0:
        data = np.zeros(0, dtype=np.uint8)
    else:
        data = np.frombuffer(data_buf, dtype=np.uint8)
    if arr.null_count:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    else:
        valid = np.ones(n, dtype=bool)
    return _murmur3_buffers(data, offsets, valid), valid


def _hash_arrow(obj: Any) -> tuple[U32Array, npt.NDArray[np.bool_]]:
    all_null = len(obj) > 0 and obj.null_count == len(obj)
    if not (_is_string_like_arrow(obj.type) or all_null):
        raise TypeError(f"keys must be an Arrow string or binary array, got type {obj.type}")
    chunks = obj.chunks if isinstance(obj, pa.ChunkedArray) else [obj]
    results = [
        _hash_arrow_array(chunk.slice(i, _MAX_KEYS_PER_PASS))
        for chunk in chunks
        for i in range(0, len(chunk), _MAX_KEYS_PER_PASS)
    ]
    if not results:
        return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=bool)
    if len(results) == 1:
        return results[0]
    return np.concatenate([r[0] for r in results]), np.concatenate([r[1] for r in results])


def _is_string_like_arrow(t: Any) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return bool(
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string_view(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_null(t)
    )


def _hash_any(keys: Any) -> tuple[U32Array, npt.NDArray[np.bool_]]:
    if isinstance(keys, str | bytes | bytearray | memoryview):
        raise TypeError("keys must be a collection of keys; use hash32 for a single key")
    if _HAVE_ARROW and isinstance(keys, pa.Array | pa.ChunkedArray):
        return _hash_arrow(keys)
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(keys, pd.Series | pd.Index):
        pass  # pa.array takes these as they are (object, string[python|pyarrow], categorical)
    elif isinstance(keys, np.ndarray):
        if keys.ndim != 1:
            raise ValueError(f"keys must be 1-dimensional, got shape {keys.shape}")
        if keys.dtype.kind not in "OUS":
            raise TypeError(f"keys must hold str/bytes, got NumPy dtype {keys.dtype}")
    else:
        keys = list(keys)
    if not _HAVE_ARROW:  # pragma: no cover - pyarrow is a project dependency
        return _hash_python_keys(keys)
    try:
        arr = pa.array(keys, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # e.g. mixed str/bytes pyarrow will not take, or a bad element: the Python path
        # encodes what it can and raises a clear TypeError for the rest.
        return _hash_python_keys(keys)
    if not _is_string_like_arrow(arr.type) and arr.null_count != len(arr):
        return _hash_python_keys(keys)  # raises TypeError for the non-key elements
    return _hash_arrow(arr)


def hash32_array(keys: Any) -> np.ma.MaskedArray[Any, np.dtype[np.uint32]]:
    """Vectorized :func:`hash32`: raw murmur3 hashes of a column of keys (reference §1.1).

    Args:
        keys: a 1-D collection of message keys, ``str`` (hashed as UTF-8) or bytes-like (as is),
            with nulls for keyless messages. Accepted containers: a Python list/tuple/iterable
            (``None`` or float NaN = null); a NumPy array of dtype object, ``U`` or ``S``; a
            pandas Series/Index (object, ``string`` or categorical dtype; ``None``/NaN/``pd.NA``
            = null); a pyarrow ``Array`` or ``ChunkedArray`` of type string, large_string,
            binary, large_binary (also string_view, binary_view, dictionary of these, null),
            including sliced arrays.

    Returns:
        A ``numpy.ma.MaskedArray`` of dtype ``uint32`` and shape ``(n,)``, equal element-wise to
        ``mmh3.hash(key_bytes, 0, signed=False)``. Its mask is always a full boolean array,
        ``True`` where the key is null (keyless); masked data values are 0.

    Raises:
        TypeError: ``keys`` is a single str/bytes, a non-string Arrow/NumPy type, or holds an
            element that is neither str, bytes-like nor null.
        ValueError: a NumPy array that is not 1-D.
        UnicodeEncodeError: a ``str`` key with lone surrogates.

    Performance: Arrow input is hashed straight from its offsets and data buffers with NumPy
    (keys longer than 256 bytes one by one with ``mmh3``); other containers are converted to
    Arrow first (``pa.array``).
    """
    hashes, valid = _hash_any(keys)
    return np.ma.MaskedArray(hashes, mask=~valid)


def _split_input(h: Any) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_] | None]:
    mask = np.ma.getmaskarray(h) if np.ma.isMaskedArray(h) else None
    a = np.asarray(np.ma.getdata(h))
    if a.dtype.kind not in "iu":
        raise TypeError(f"hashes must be an integer array, got dtype {a.dtype}")
    a64 = a.astype(np.int64, copy=False)
    if mask is not None:
        a64 = np.where(mask, 0, a64)
    return a64, mask


def _wrap(values: I32Array, mask: npt.NDArray[np.bool_] | None) -> Any:
    return values if mask is None else np.ma.MaskedArray(values, mask=mask)


def segment_hash_array(h: Any) -> Any:
    """Vectorized :func:`segment_hash`: high 16 bits of raw hashes (reference §1.2).

    Args:
        h: integer array-like of raw hashes (e.g. the ``uint32`` result of
            :func:`hash32_array`; Java-signed ``int32`` also works), any shape.

    Returns:
        ``int32`` array of the same shape with values in ``[0, 65535]`` (``int32`` matches Spark
        ``IntegerType`` and avoids ``uint16`` wraparound in later arithmetic). A
        ``MaskedArray`` input gives a ``MaskedArray`` with the same mask and 0 under it.

    Raises:
        TypeError: ``h`` is not of an integer dtype.
    """
    a, mask = _split_input(h)
    return _wrap(((a >> 16) & 0xFFFF).astype(np.int32), mask)


def hash_b_array(h: Any) -> Any:
    """Vectorized :func:`hash_b`: low 16 bits of raw hashes (reference §1.2, §3).

    Same input, output (``int32``, values in ``[0, 65535]``, mask kept) and errors as
    :func:`segment_hash_array`.
    """
    a, mask = _split_input(h)
    return _wrap((a & 0xFFFF).astype(np.int32), mask)


def bucket_hash_array(keys: Any) -> I32Array:
    """Vectorized :func:`bucket_hash`: the client batcher's bucket hash per message (§1.3).

    ``hash_b`` of each key, and 0 for keyless (null) messages, which always land in bucket 0.

    Args:
        keys: any container accepted by :func:`hash32_array`.

    Returns:
        Plain ``int32`` ndarray of shape ``(n,)``, values in ``[0, 65535]`` (no mask).

    Raises:
        Same as :func:`hash32_array`.
    """
    hashes, valid = _hash_any(keys)
    out = (hashes & np.uint32(0xFFFF)).astype(np.int32)
    out[~valid] = 0
    return out
