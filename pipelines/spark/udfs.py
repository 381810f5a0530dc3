"""Spark's side of the Python pass over mapped records (run on the executors, never on the
driver).

The rules themselves are plain Arrow functions in :mod:`pipelines.ingest.rules` (the local
engine calls them directly); the replay runs them in its staging pass
(``pipelines.spark.staging_pass.stage_batch``). This module gives that pass, and :func:`parse_task`,
the Spark types of what they return:

- :func:`verdict_type`: the Spark schema of :func:`pipelines.ingest.rules.verdict_rows`;
- :func:`parse_task`: a ``mapInArrow`` function returning every record's verdict, accepted
  ones as messages with their key hashes (``pipelines.spark.ingest.parse_records``: tests and ad-hoc
  reads; the replay stages instead).

The functions are built per call (cheap) rather than at import: workers import this module to
unpickle them, and must not need a SparkContext to do so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from pipelines.ingest.rules import (
    SOURCE_ROW,
    VERDICT_FIELDS,
    ingest_batches,
    row_field,
    row_fields,
    verdict_rows,
)

__all__ = ["parse_task", "verdict_type"]


def verdict_type(records: DataFrame) -> T.StructType:
    """Spark schema of the verdict rows of ``records`` (mapped records,
    ``pipelines.spark.ingest.map_records``): :data:`pipelines.ingest.rules.VERDICT_FIELDS`, then the
    Parquet ``record`` struct of the row's fields when the records have them."""
    schema = from_arrow_schema(VERDICT_FIELDS)
    fields = row_fields(records.columns)
    if fields:  # null in the rows of accepted and late records
        row = T.StructType([T.StructField(f, records.schema[row_field(f)].dataType)
                            for f in fields])
        schema = schema.add(SOURCE_ROW, row, nullable=True)
    return schema


def parse_task(spec: Any) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``mapInArrow`` function: the rules (:func:`pipelines.ingest.rules.ingest_batches` under
    ``spec``, an ``InputSpec``) on a task's mapped records; yields every record's verdict row
    (:func:`pipelines.ingest.rules.verdict_rows` with the accepted messages). A spec that
    spreads minutes needs every record of a minute in the task."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for records, verdict in ingest_batches(batches, spec):
            yield verdict_rows(records, verdict, accepted=True)

    return run
