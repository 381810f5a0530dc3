"""Python workers import the installed pyspark, not $SPARK_HOME's zip
(pipelines.spark.worker_daemon)."""

from __future__ import annotations

from typing import Any


def test_workers_import_the_installed_pyspark(spark: Any) -> None:
    def where_pyspark_comes_from(_: Any) -> list[str]:  # nested: shipped by value
        import pyspark  # noqa: PLC0415 - runs in the worker: shipped by value, imports there

        return [pyspark.__file__]

    files = spark.sparkContext.parallelize([0, 1], 2).flatMap(where_pyspark_comes_from).collect()
    assert files and all(".zip" not in f for f in files), files
