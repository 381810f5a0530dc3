"""The Spark SQL example of docs/tables.md ("Idle windows") fills a sparse ``consumer_load``
back to the dense table (issue #30)."""

from __future__ import annotations

import pandas as pd
import pytest

from pipelines.spark.delta_spark import read_spark
from pipelines.storage.delta import DeltaStore
from tests.analysis.test_windows import doc_example

pytestmark = pytest.mark.spark


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(list(df.columns)).reset_index(drop=True)


def test_spark_sql_example_of_the_docs_fills_the_gaps(spark, window_replays) -> None:
    sparse, dense = window_replays
    # the two tables the example reads, registered as `topic-replay sql` registers a delta-rs
    # output's tables (register_tables does every table, seconds more; tests/spark/test_sql.py)
    for table in ("runs", "consumer_load"):
        read_spark(DeltaStore(sparse.root, engine="delta-rs", spark=spark),
                   table).createOrReplaceTempView(table)
    got = spark.sql(doc_example("sql")).toPandas()
    want = dense.read("consumer_load", "w")
    assert len(sparse.read("consumer_load", "w")) < len(want)
    got = got.astype({c: want[c].dtype for c in got.columns if c not in ("window_start",
                                                                         "window_end")})
    for c in ("window_start", "window_end"):
        got[c] = pd.to_datetime(got[c], utc=True).astype(want[c].dtype)
    pd.testing.assert_frame_equal(_sorted(got), _sorted(want))
