"""Vectorized Spark UDFs over :mod:`pipelines.core` (run on the executors, never on the driver).

``key_hashes(key)`` is an Arrow UDF (Spark 4.1 ``arrow_udf``): the key column arrives as a
``pyarrow.Array`` and goes straight to :func:`pipelines.core.hashing.hash32_array`, which hashes
Arrow string buffers without one Python object per key. It returns the struct
``hash32 bigint, segment_hash int, hash_b int`` — all three null for a keyless (null) key.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import types as T
from pyspark.sql.functions import arrow_udf

from pipelines.core.hashing import hash32_array, hash_b_array, segment_hash_array

KEY_HASHES_TYPE = "hash32 bigint, segment_hash int, hash_b int"
"""Spark DDL of the struct returned by :func:`key_hashes`."""
KEY_HASHES_STRUCT = T.StructType([
    T.StructField("hash32", T.LongType()),
    T.StructField("segment_hash", T.IntegerType()),
    T.StructField("hash_b", T.IntegerType()),
])
"""The same struct as a ``StructType`` (parsing DDL would need an active SparkContext)."""


def key_hashes_arrow(keys: pa.Array | pa.ChunkedArray) -> pa.StructArray:
    """``hash32`` (unsigned murmur3-32 as int64), ``segment_hash`` and ``hash_b`` (int32) of
    each key; nulls where the key is null. Plain function behind :func:`key_hashes`."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    h32 = hash32_array(keys)
    mask = np.ma.getmaskarray(h32)
    seg = segment_hash_array(h32)
    hb = hash_b_array(h32)
    return pa.StructArray.from_arrays(
        [
            pa.array(np.ma.getdata(h32).astype(np.int64), mask=mask, type=pa.int64()),
            pa.array(np.ma.getdata(seg).astype(np.int32), mask=mask, type=pa.int32()),
            pa.array(np.ma.getdata(hb).astype(np.int32), mask=mask, type=pa.int32()),
        ],
        names=["hash32", "segment_hash", "hash_b"],
    )


def _key_hashes_batch(keys: pa.Array) -> pa.Array:
    """Arrow UDF body (type hints exactly ``pa.Array -> pa.Array``, as ``arrow_udf`` requires)."""
    return key_hashes_arrow(keys)


def key_hashes(key: Column | str) -> Column:
    """Spark column: struct ``hash32, segment_hash, hash_b`` of the string column ``key``.

    The UDF is built per call (cheap) rather than at import: workers import this module to
    unpickle :func:`key_hashes_arrow`, and must not need a SparkContext to do so.
    """
    udf = arrow_udf(_key_hashes_batch, KEY_HASHES_STRUCT)  # type: ignore[call-overload]
    return udf(key)
