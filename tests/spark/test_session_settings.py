"""Session settings a replay depends on for its speed: the default ``spark.sql.shuffle.partitions``
(twice the cores its master gives, ``pipelines.spark.command_session.default_partitions``; the
emulation's state keeps them for the run; the value a cluster replay takes is checked in
``tests/guarantees/test_cluster.py``), one Python worker daemon for every query, and streaming
checkpoints written without a process per rename."""

from __future__ import annotations

import pytest

from pipelines.spark.command_session import PARTITIONS_PER_CORE, default_partitions

pytestmark = pytest.mark.spark


def test_default_partitions_are_twice_the_cores_of_the_master(spark):
    # the tests' session: spark.default.parallelism = 2
    assert spark.sparkContext.defaultParallelism == 2
    assert PARTITIONS_PER_CORE == 2
    assert default_partitions(spark) == 4


def test_session_asks_for_worker_environments_that_share_one_python_daemon(spark):
    # SQL UDF runners add SPARK_SIMPLIFIED_TRACEBACK to their workers' environment unless this
    # is off, and transformWithStateInPandas's never does: two environments, two daemons
    assert spark.conf.get("spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled") == "false"


def test_python_workers_are_started_by_a_job_of_their_own_on_a_local_master(spark):
    from pipelines.spark.command_session import (  # noqa: PLC0415
        WORKERS_JOB_GROUP,
        start_python_workers,
    )

    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(WORKERS_JOB_GROUP))
    thread = start_python_workers(spark)
    assert thread is not None
    thread.join(timeout=120)
    assert not thread.is_alive()
    (job,) = set(tracker.getJobIdsForGroup(WORKERS_JOB_GROUP)) - before
    assert tracker.getJobInfo(job).status == "SUCCEEDED"


def test_default_topic_bins_are_four_per_state_partition(spark):
    from pipelines.spark.emulation import default_bins  # noqa: PLC0415

    # the tests' session: 2 shuffle partitions
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert default_bins(spark) == 8


def test_streaming_checkpoints_use_hadoop_filesystem_renames(spark):
    # FileContext renames ask each path's link status: a `readlink` process per call without
    # Hadoop's native library; the class must exist in this Spark (its package moved in 4.1)
    from pipelines.spark.session import (  # noqa: PLC0415
        CHECKPOINT_FILE_MANAGER,
        CHECKPOINT_FILE_MANAGER_KEY,
    )

    assert spark.conf.get(CHECKPOINT_FILE_MANAGER_KEY) == CHECKPOINT_FILE_MANAGER
    loaded = spark.sparkContext._jvm.java.lang.Class.forName(CHECKPOINT_FILE_MANAGER)
    assert loaded.getName() == CHECKPOINT_FILE_MANAGER


class _AccumulatorServer:
    server_shutdown = False

    def shutdown(self) -> None:  # PySpark's: waits for its handler's next 1 s poll
        raise AssertionError("the command's stop waited for the accumulator server")


class _Context:
    def __init__(self) -> None:
        self._accumulatorServer = _AccumulatorServer()
        self.stopped = False


class _Session:
    def __init__(self) -> None:
        self.sparkContext = _Context()

    def stop(self) -> None:  # as SparkContext.stop: the server's shutdown when it has one
        server = self.sparkContext._accumulatorServer
        if server is not None:
            server.shutdown()
        self.sparkContext.stopped = True


def test_a_commands_session_stops_without_waiting_for_the_accumulator_server():
    from pipelines.spark.command_session import stop_command_session  # noqa: PLC0415

    session = _Session()
    server = session.sparkContext._accumulatorServer
    stop_command_session(session)
    assert session.sparkContext.stopped
    assert server.server_shutdown  # its handler thread ends at its next poll
