"""The output tables' Spark schemas: :mod:`pipelines.contract.schemas`' pyarrow schemas as
Spark ``StructType`` s (the contract itself imports no Spark)."""

from __future__ import annotations

from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from pipelines.contract.schemas import arrow_schema


def spark_schema(table: str) -> StructType:
    """The Spark ``StructType`` equivalent of :func:`~pipelines.contract.schemas.arrow_schema`
    (timestamps → ``TIMESTAMP``).

    Nullability is carried over (``nullable=False`` fields become non-nullable).
    """
    return from_arrow_schema(arrow_schema(table))
