"""The SparkSession a command starts: a replay's (``run``, ``stream``, ``compare``,
``sweep``) or a short command's (``sql``, ``maintain``), built once here from the command's
options (``pipelines.spark.session.build_session``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from pyspark.sql import SparkSession

from pipelines.spark.session import build_session, is_connect

NO_CONSOLE_PROGRESS = {"spark.ui.showConsoleProgress": "false"}
"""The replay's own bar / lines replace Spark's console progress bar (on a terminal they would
overwrite each other; in a log its carriage-return updates are noise)."""


def session_active() -> bool:
    """Whether a SparkSession is already active (a caller's, e.g. the tests'): a command then
    uses it and leaves it running."""
    return SparkSession.getActiveSession() is not None


PARTITIONS_PER_CORE = 2
"""Default ``spark.sql.shuffle.partitions`` of a replay: this many per core Spark has. The
emulation's state partitions are these (fixed by its checkpoint), and each one is a task per
operator and micro-batch whether it holds a key or not (a Python worker, a state store loaded
and committed: 0.4-0.6 s of a core each, Spark's event log). At 10 M messages over 3 topics on
2 cores, 4 partitions instead of 8 cut the emulation's task time from 49.8 to 41.2 s. One
partition a core, the keys balanced over them (:mod:`pipelines.spark.placement`), took 30.8
core-s against 33.7 on 4, but a topic's control plane and dispatch are one key each: one
hot topic left the other core idle through both, and it took 1.22x the same messages over 3
topics (1.01x on 4 partitions, where a core takes the next partition when it is done)."""


def replay_session(master: str | None, remote: str | None, shuffle_partitions: int | None,
                   spark_log: str | None) -> SparkSession:
    """The session of a replay command: ``--master`` or ``--remote`` (Spark Connect),
    ``spark.sql.shuffle.partitions`` (``None``: as configured for Spark, e.g. by
    ``spark-submit --conf``, else :data:`PARTITIONS_PER_CORE` per core of the master,
    :func:`default_partitions`), Spark's log to ``spark_log`` (``None``: the console)."""
    spark = build_session(master=master, shuffle_partitions=shuffle_partitions,
                          extra_conf=NO_CONSOLE_PROGRESS, spark_log=spark_log, remote=remote)
    if shuffle_partitions is None and not is_connect(spark) and \
            not spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", str(default_partitions(spark)))
    start_python_workers(spark)
    return spark


def stop_command_session(spark: SparkSession) -> None:
    """``spark.stop()`` of the session a command started, at the command's end, without waiting
    for PySpark's accumulator server: its one connection's handler polls its socket every
    second for the shutdown flag, so ``SparkContext.stop`` spent 0.4-1 s waiting for it after
    the JVM had stopped (0.43 s of a 1 M-message replay's 0.55 s stop). The flag is set and the
    server left to its daemon thread, which ends with the process; nothing reaches it once the
    JVM is stopped. Under Spark Connect, a plain ``stop()``."""
    if is_connect(spark):
        spark.stop()
        return
    context = spark.sparkContext
    server = getattr(context, "_accumulatorServer", None)
    context._accumulatorServer = None  # type: ignore[assignment]  # stop() then skips its wait
    try:
        spark.stop()
    finally:
        if server is not None:
            server.server_shutdown = True


WORKERS_JOB_GROUP = "topic-replay-python-workers"
"""Spark job group of :func:`start_python_workers`' job (thread-local: the replay's own jobs
are not in it)."""


def start_python_workers(spark: SparkSession) -> threading.Thread | None:
    """Start a local master's Python worker daemon now, on a thread of its own (a one-row
    ``mapInArrow`` job), while the driver checks the output and plans the ingest: the
    daemon's imports and the batching walk's load take about 1.1 s, which the first staging
    tasks otherwise wait for (the 10 M bench's ingest micro-batch: 4.3-5.2 s instead of
    5.4-6.2 s, three runs each). Its idle worker is then reused by the ingest (same worker
    environment). Nothing on a cluster (each executor starts its own daemon) or under Spark
    Connect. A failure is left to the ingest's own job, which would meet it too."""
    if is_connect(spark) or not str(spark.sparkContext.master).startswith("local"):
        return None

    def run() -> None:
        try:
            spark.sparkContext.setJobGroup(WORKERS_JOB_GROUP, "start the Python workers")
            spark.range(1).mapInArrow(_passed, "id long").collect()
        except Exception:  # the ingest's first job reports it
            pass

    thread = threading.Thread(target=run, name="python-workers", daemon=True)
    thread.start()
    return thread


def _passed(batches: Iterable[Any]) -> Iterable[Any]:
    """:func:`start_python_workers`' function: the rows as they are."""
    return batches


def default_partitions(spark: SparkSession) -> int:
    """:data:`PARTITIONS_PER_CORE` per core the session's master gives
    (``defaultParallelism``: a local master's threads, a cluster's executor cores when the
    session starts)."""
    return PARTITIONS_PER_CORE * max(1, int(spark.sparkContext.defaultParallelism))


def quiet_session(master: str | None, remote: str | None = None,
                  spark_log: str | None = None) -> SparkSession:
    """A SparkSession for a short command: no progress bar, no UI, only errors logged, Spark's
    console output to ``spark_log`` (``None``: the console; a Spark Connect session, ``remote``
    or ``SPARK_REMOTE``, logs on its server)."""
    spark = build_session(app_name="topic-replay-sql", master=master, shuffle_partitions=2,
                          extra_conf={**NO_CONSOLE_PROGRESS, "spark.ui.enabled": "false"},
                          spark_log=spark_log, remote=remote)
    if not is_connect(spark):
        spark.sparkContext.setLogLevel("ERROR")
    return spark
