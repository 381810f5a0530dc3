"""The SparkSession a command starts: a replay's (``run``, ``stream``, ``compare``,
``sweep``) or a short command's (``sql``, ``maintain``), built once here from the command's
options (``pipelines.spark.session.build_session``)."""

from __future__ import annotations

from pyspark.sql import SparkSession

from pipelines.spark.session import build_session, is_connect

NO_CONSOLE_PROGRESS = {"spark.ui.showConsoleProgress": "false"}
"""The replay's own bar / lines replace Spark's console progress bar (on a terminal they would
overwrite each other; in a log its carriage-return updates are noise)."""


def session_active() -> bool:
    """Whether a SparkSession is already active (a caller's, e.g. the tests'): a command then
    uses it and leaves it running."""
    return SparkSession.getActiveSession() is not None


def replay_session(master: str | None, remote: str | None, shuffle_partitions: int,
                   spark_log: str | None) -> SparkSession:
    """The session of a replay command: ``--master`` or ``--remote`` (Spark Connect),
    ``spark.sql.shuffle.partitions``, Spark's log to ``spark_log`` (``None``: the console)."""
    return build_session(master=master, shuffle_partitions=shuffle_partitions,
                         extra_conf=NO_CONSOLE_PROGRESS, spark_log=spark_log, remote=remote)


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
