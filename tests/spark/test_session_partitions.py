"""A replay's default ``spark.sql.shuffle.partitions``: twice the cores its master gives
(``pipelines.spark.command_session.default_partitions``; the emulation's state keeps them for
the run). The value taken when no one configured it is checked on a cluster replay too
(``tests/guarantees/test_cluster.py``)."""

from __future__ import annotations

import pytest

from pipelines.spark.command_session import CORES_PER_PARTITION, default_partitions

pytestmark = pytest.mark.spark


def test_default_partitions_are_twice_the_cores_of_the_master(spark):
    # the tests' session: spark.default.parallelism = 2
    assert spark.sparkContext.defaultParallelism == 2
    assert CORES_PER_PARTITION == 2
    assert default_partitions(spark) == 4
