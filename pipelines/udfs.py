"""Spark wrappers of :mod:`pipelines.ingest_rules` (run on the executors, never on the driver).

The rules themselves are plain Arrow functions in :mod:`pipelines.ingest_rules` (the local
engine calls them directly); this module only makes Spark call them on Arrow batches:

- :func:`check_records_udf`: an Arrow UDF (Spark 4.1 ``arrow_udf``) over the mapped columns
  → struct :data:`CHECKED_STRUCT` (:func:`~pipelines.ingest_rules.check_records`);
- :func:`spread_minutes_fn`: an ``applyInArrow`` function spreading one minute's records
  (:func:`~pipelines.ingest_rules.spread_minutes`);
- :func:`key_hashes`: an Arrow UDF of :func:`~pipelines.ingest_rules.key_hashes_arrow` — the key
  column arrives as a ``pyarrow.Array`` and is hashed from its Arrow string buffers without one
  Python object per key. It returns the struct ``hash32 bigint, segment_hash int, hash_b int``
  — all three null for a keyless (null) key.

The UDFs are built per call (cheap) rather than at import: workers import this module to
unpickle the functions, and must not need a SparkContext to do so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import types as T
from pyspark.sql.functions import arrow_udf  # type: ignore[attr-defined]  # not in the stubs

from pipelines.ingest_rules import (
    CHECKED_FIELDS,
    MAPPED_COLUMNS,
    check_records,
    key_hashes_arrow,
    spread_minutes,
)

KEY_HASHES_TYPE = "hash32 bigint, segment_hash int, hash_b int"
"""Spark DDL of the struct returned by :func:`key_hashes`."""
KEY_HASHES_STRUCT = T.StructType([
    T.StructField("hash32", T.LongType()),
    T.StructField("segment_hash", T.IntegerType()),
    T.StructField("hash_b", T.IntegerType()),
])
"""The same struct as a ``StructType`` (parsing DDL would need an active SparkContext)."""

_SPARK_TYPES = {pa.string(): T.StringType(), pa.int64(): T.LongType()}
CHECKED_STRUCT = T.StructType([T.StructField(f.name, _SPARK_TYPES[f.type])
                               for f in CHECKED_FIELDS])
""":data:`pipelines.ingest_rules.CHECKED_FIELDS` as a Spark struct (the rules UDF's type)."""

__all__ = ["KEY_HASHES_STRUCT", "check_records_udf", "key_hashes", "key_hashes_arrow",
           "spread_minutes_fn"]


def _flags(a: pa.Array) -> npt.NDArray[np.bool_]:
    return np.asarray(a.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def check_records_udf(spec: Any) -> Callable[..., Column]:
    """Arrow UDF applying :func:`pipelines.ingest_rules.check_records` under ``spec`` (an
    ``InputSpec``): call it with the columns of :data:`~pipelines.ingest_rules.MAPPED_COLUMNS`
    in order, then the ``invalid_utf8`` and ``malformed`` boolean columns; returns a struct
    column of :data:`CHECKED_STRUCT`."""

    def check(topic: pa.Array, key: pa.Array, producer_name: pa.Array, sequence_id: pa.Array,
              publish_time: pa.Array, payload_size: pa.Array, invalid_utf8: pa.Array,
              malformed: pa.Array) -> pa.Array:
        values = (topic, key, producer_name, sequence_id, publish_time, payload_size)
        batch = check_records(dict(zip(MAPPED_COLUMNS, values, strict=True)),
                              _flags(invalid_utf8), _flags(malformed), spec)
        return pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema))

    return arrow_udf(check, CHECKED_STRUCT)  # type: ignore[no-any-return]


def spread_minutes_fn(order: Sequence[str], speed: float) -> Callable[[pa.Table], pa.Table]:
    """``applyInArrow`` function spreading a group of accepted records (all of one minute, or
    several whole minutes) with :func:`pipelines.ingest_rules.spread_minutes`: it replaces the
    group's ``__publish_us`` and ``__event_ms`` columns; the ``order`` columns and ``__tr_raw``
    (the record text) give the order within a minute. Other columns pass unchanged."""
    order = list(order)

    def spread(table: pa.Table) -> pa.Table:
        us = table.column("__publish_us").to_numpy()
        us, ms = spread_minutes(us, [table.column(c).combine_chunks() for c in order],
                                table.column("__tr_raw").combine_chunks(), speed)
        table = table.set_column(table.schema.get_field_index("__publish_us"), "__publish_us",
                                 pa.array(us, pa.int64()))
        return table.set_column(table.schema.get_field_index("__event_ms"), "__event_ms",
                                pa.array(ms, pa.int64()))

    return spread


def _key_hashes_batch(keys: pa.Array) -> pa.Array:
    """Arrow UDF body (type hints exactly ``pa.Array -> pa.Array``, as ``arrow_udf`` requires)."""
    return key_hashes_arrow(keys)


def key_hashes(key: Column | str) -> Column:
    """Spark column: struct ``hash32, segment_hash, hash_b`` of the string column ``key``."""
    udf = arrow_udf(_key_hashes_batch, KEY_HASHES_STRUCT)
    return udf(key)  # type: ignore[no-any-return]
