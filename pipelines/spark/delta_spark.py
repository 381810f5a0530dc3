"""delta-spark's writer of the output tables (:class:`SparkDeltaWriter`, a
:class:`~pipelines.storage.delta.DeltaWriter`), the engine choice for a session
(:func:`open_store`), and the tables read as Spark DataFrames (:func:`read_spark`).

delta-spark writes where delta-rs cannot reach the location (object-store credentials only in
Spark's Hadoop settings); everywhere else it commits through delta-rs's writer
(:class:`~pipelines.storage.delta_rs.RsDeltaWriter`), which costs milliseconds where a Spark
write job costs seconds (docs/architecture.md, "Delta commits"). Its own paths: driver-side
rows and files adopted as they are are committed through the driver JVM's Delta API
(``DeltaLog.forTable(...).startTransaction()``: ``txnVersion`` checked in the transaction,
then ``commit`` of the ``add`` actions with ``SetTransaction``; :func:`_jvm_commit`), other
rows with ``format("delta")`` and the ``txnAppId`` / ``txnVersion`` writer options.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from delta.tables import DeltaTable as SparkDeltaTable
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pipelines.contract.schemas import arrow_schema
from pipelines.spark import session
from pipelines.spark.schemas import spark_schema
from pipelines.storage.delta import ENGINES, DeltaStore
from pipelines.storage.delta_format import (
    PARTITION_COLUMNS,
    PLAIN_VALUE,
    TABLE_PROPERTIES,
    add_stats,
    parquet_options,
    run_predicate,
)
from pipelines.storage.delta_rs import RsDeltaWriter
from pipelines.storage.fs import arrow_filesystem, delta_storage_options

AUTO_PICKS_DELTA_SPARK = True
"""Whether ``engine="auto"`` picks delta-spark when it is available. The test suite turns it off
(tests/conftest.py) for the tests that are not about engines; those that are name the engine."""

AUTO_ENGINE_ENV = "TOPIC_REPLAY_AUTO_ENGINE"
"""Environment variable: ``delta-rs`` makes ``engine="auto"`` write with delta-rs even when the
Delta jars are there (the test suite sets it, so that the replays it starts as subprocesses
commit fast too)."""

FALLBACK_NOTE = ("topic-replay: the Delta Lake jars are not on this Spark session's classpath; "
                 "writing the tables with delta-rs (`make setup` fetches the jars from Maven "
                 "Central; docs/delta.md)")
_fallback_noted = False


def _note_fallback() -> None:
    """Print :data:`FALLBACK_NOTE` to stderr, once per process."""
    global _fallback_noted
    if not _fallback_noted:
        print(FALLBACK_NOTE, file=sys.stderr)
        _fallback_noted = True


def open_store(root: str, engine: str = "auto", spark: SparkSession | None = None,
               storage_options: Mapping[str, str] | None = None) -> DeltaStore:
    """The :class:`~pipelines.storage.delta.DeltaStore` of ``root`` writing with ``engine``:
    ``"auto"`` (delta-spark when its classes are on ``spark``'s classpath, else delta-rs, said
    once on stderr: :data:`FALLBACK_NOTE`), ``"delta-spark"`` or ``"delta-rs"`` to force one.
    ``spark`` defaults to the active session (needed for delta-spark and :func:`read_spark`);
    ``storage_options`` as :class:`~pipelines.storage.delta.DeltaStore`.

    ``ValueError``: an unknown engine, or ``"delta-spark"`` without the jars in the session.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    spark = spark if spark is not None else SparkSession.getActiveSession()
    available = spark is not None and session.delta_spark_available(spark)
    if engine == "delta-spark" and not available:
        raise ValueError(
            "engine='delta-spark' needs a SparkSession whose classpath holds the Delta Lake "
            "jars (io.delta:delta-spark_2.13, e.g. spark-submit --packages); "
            + ("none was given" if spark is None else "this session has none")
            + ". Use engine='delta-rs' or 'auto'."
        )
    if engine == "auto":
        picks = AUTO_PICKS_DELTA_SPARK and os.environ.get(AUTO_ENGINE_ENV) != "delta-rs"
        engine = "delta-spark" if available and picks else "delta-rs"
        if spark is not None and not available:
            _note_fallback()
    if storage_options is None:
        storage_options = delta_storage_options(str(root))
    if engine == "delta-rs":
        return DeltaStore(root, spark=spark, storage_options=storage_options)
    assert spark is not None  # available
    return DeltaStore(root, spark=spark, storage_options=storage_options,
                      writer=SparkDeltaWriter(spark, storage_options))


def _jvm_commit(spark: Any, path: str, adds: Sequence[Mapping[str, Any]], app_id: str,
                version: int, replace_runs: Sequence[str] | None) -> bool:
    """delta-spark: ONE commit to the Delta table at ``path`` through the driver JVM's Delta
    API (``DeltaLog.forTable(...).startTransaction().commit(...)``, no Spark job): the ``add``
    actions ``adds`` (Delta JSON fields of files already in the table's folder), the app
    transaction ``SetTransaction(app_id, version)`` and, for ``replace_runs``, a ``remove`` of
    every file of those runs (operation ``WRITE`` in ``Overwrite`` mode with the runs'
    predicate; else ``Append``). The transaction's own ``txnVersion(app_id)`` is checked
    first: False (nothing committed) when it is already ``>= version``. Delta's conflict
    checks apply as for any writer."""
    jvm = spark._jvm
    delta = jvm.org.apache.spark.sql.delta
    txn = delta.DeltaLog.forTable(spark._jsparkSession, path).startTransaction()
    if txn.txnVersion(app_id) >= version:
        return False
    actions = jvm.java.util.ArrayList()
    if replace_runs is not None:
        runs = set(replace_runs)
        for f in jvm.scala.jdk.javaapi.CollectionConverters.asJava(txn.filterFiles()):
            if f.partitionValues().apply("run_id") in runs:
                actions.add(f.remove())
    now = int(time.time() * 1000)
    for add in adds:
        actions.add(delta.actions.Action.fromJson(json.dumps({"add": dict(add)})))
    actions.add(delta.actions.Action.fromJson(json.dumps(
        {"txn": {"appId": app_id, "version": int(version), "lastUpdated": now}})))
    scala = jvm.scala
    none = scala.Option.empty()
    columns = jvm.java.util.ArrayList()
    for c in PARTITION_COLUMNS:
        columns.add(c)
    parts = scala.Option.apply(scala.jdk.javaapi.CollectionConverters.asScala(columns).toList())
    mode = jvm.org.apache.spark.sql.SaveMode
    if replace_runs is None:
        op = delta.DeltaOperations.Write(mode.Append, parts, none, none, none, none, none)
    else:
        op = delta.DeltaOperations.Write(mode.Overwrite, parts,
                                         scala.Option.apply(run_predicate(sorted(runs))),
                                         none, none, none, none)
    txn.commit(scala.jdk.javaapi.CollectionConverters.asScala(actions).toList(), op)
    return True


class SparkDeltaWriter:
    """delta-spark's writer: delta-rs's commits (:class:`RsDeltaWriter`) wherever delta-rs
    reaches the location, else Spark's own Delta (the driver JVM's Delta API, or
    ``format("delta")``). ``spark``: a session with the Delta jars; ``storage_options``:
    delta-rs's settings of the location."""

    engine = "delta-spark"

    def __init__(self, spark: SparkSession,
                 storage_options: Mapping[str, str] | None = None) -> None:
        self.spark = spark
        self.rs = RsDeltaWriter(storage_options)

    def exists(self, path: str) -> bool:
        """delta-rs reads the log; Spark when delta-rs cannot read the location."""
        try:
            return self.rs.exists(path)
        except Exception:  # delta-rs cannot read the location: Spark can
            return bool(SparkDeltaTable.isDeltaTable(self.spark, path))

    def transaction_version(self, path: str, app_id: str) -> int | None:
        """delta-rs reads the log; None where it cannot (Delta's own ``txnVersion`` check of
        the commit then keeps it idempotent)."""
        try:
            return self.rs.transaction_version(path, app_id)
        except Exception:
            return None

    def create_table(self, path: str, table: str) -> None:
        """Created with delta-rs (a Delta log entry, no Spark job: a Spark ``CREATE TABLE``
        took seconds a table); with Spark where delta-rs cannot write the location."""
        try:
            self.rs.create_table(path, table)
        except Exception:
            builder = (SparkDeltaTable.createIfNotExists(self.spark).location(path)
                       .addColumns(spark_schema(table)).partitionedBy(*PARTITION_COLUMNS))
            for key, value in TABLE_PROPERTIES.items():
                builder = builder.property(key, value)
            builder.execute()

    def write_rows(self, path: str, table: str, rows: pa.Table, app_id: str, version: int,
                   replace_runs: Sequence[str] | None = None) -> None:
        """delta-rs where it can write the location; else written as Parquet by the driver
        and committed through the JVM's Delta API (:func:`_jvm_commit`); a ``run_id`` that is
        not a plain folder name goes through Spark's writer."""
        try:
            self.rs.write_rows(path, table, rows, app_id, version, replace_runs)
            return
        except Exception:  # delta-rs cannot write here: the JVM commits
            pass
        adds = _write_files(path, rows, app_id, version)
        if adds is not None:
            if not self.exists(path):
                self.create_table(path, table)
            _jvm_commit(self.spark, path, adds, app_id, version, replace_runs)
            return
        predicate = None if replace_runs is None else run_predicate(replace_runs)
        self._write_spark(path, table, self.spark.createDataFrame(rows), app_id, version,
                          replace_where=predicate)

    def write_files(self, path: str, table: str, source: str, constants: Mapping[str, Any],
                    app_id: str, version: int) -> None:
        """delta-rs streams the files (the quarantine's, written by Spark); where it cannot
        write the location, Spark reads and rewrites them."""
        try:
            self.rs.write_files(path, table, source, constants, app_id, version)
            return
        except Exception:  # delta-rs cannot write the location: Spark rewrites the files
            pass
        df = self.spark.read.parquet(source)
        keep = [c for c in arrow_schema(table).names if c in df.columns and c not in constants]
        df = df.select(*keep, *[F.lit(v).alias(k) for k, v in constants.items()])
        self._write_spark(path, table, df, app_id, version)

    def commit_adds(self, path: str, table: str, adds: Sequence[Mapping[str, Any]],
                    app_id: str, version: int) -> None:
        """delta-rs's write transaction (milliseconds); where delta-rs cannot write the
        location, the driver JVM's Delta API (:func:`_jvm_commit`), which costs a Spark job or
        more (state reconstruction for ``txnVersion``), 10 to 15 s a commit on a loaded
        machine (docs/architecture.md, "Delta commits")."""
        try:
            self.rs.commit_adds(path, table, adds, app_id, version)
            return
        except Exception:
            pass
        if not self.exists(path):
            self.create_table(path, table)
        _jvm_commit(self.spark, path, adds, app_id, version, None)

    def read_arrow(self, path: str, table: str, run_id: str | None) -> pa.Table:
        """delta-rs (no Spark job: a run's summary reads every table); Spark where delta-rs
        cannot read the location."""
        try:
            return self.rs.read_arrow(path, table, run_id)
        except Exception:  # delta-rs cannot read the location: Spark does
            pass
        df = self.spark.read.format("delta").load(path)
        if run_id is not None:
            df = df.where(df["run_id"] == run_id)
        return df.toArrow()

    def delete_rows(self, path: str, predicate: str) -> None:
        """Spark's ``DELETE``."""
        SparkDeltaTable.forPath(self.spark, path).delete(predicate)

    def maintain(self, path: str, retain_hours: int | None, enforce: bool) -> dict[str, int]:
        """Spark's ``OPTIMIZE`` then ``VACUUM`` (its retention check off when ``enforce`` is
        False, for this call only; ``files_vacuumed`` from a dry run first)."""
        metrics = (SparkDeltaTable.forPath(self.spark, path).optimize().executeCompaction()
                   .collect()[0]["metrics"])
        out = {"files_removed": int(metrics["numFilesRemoved"]),
               "files_added": int(metrics["numFilesAdded"])}
        key = "spark.databricks.delta.retentionDurationCheck.enabled"
        # VACUUM lists the table's files with this many tasks: Spark's default, 10,000, is
        # 10,000 tasks per VACUUM whatever the table (about 50 s each on 2 cores); the session's
        # shuffle partitions are plenty for one table's folders
        listing = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
        before = {k: self.spark.conf.get(k, None) for k in (key, listing)}
        self.spark.conf.set(key, "true" if enforce else "false")
        self.spark.conf.set(listing, self.spark.conf.get("spark.sql.shuffle.partitions") or "2")
        try:
            target = f"delta.`{path}`"
            retain = "" if retain_hours is None else f" RETAIN {int(retain_hours)} HOURS"
            dry = self.spark.sql(f"VACUUM {target}{retain} DRY RUN").count()
            self.spark.sql(f"VACUUM {target}{retain}").collect()
        finally:
            for k, v in before.items():
                if v is None:
                    self.spark.conf.unset(k)
                else:
                    self.spark.conf.set(k, v)
        out["files_vacuumed"] = int(dry)
        return out

    def _write_spark(self, path: str, table: str, data: DataFrame, app_id: str, version: int,
                     replace_where: str | None = None) -> None:
        """Append the Spark DataFrame ``data`` (or replace the rows matching
        ``replace_where``) with ``format("delta")`` in one commit carrying the app
        transaction ``(app_id, version)`` (Delta skips a committed one itself)."""
        if not self.exists(path):
            self.create_table(path, table)
        writer = (conform_spark(table, data).write.format("delta")
                  .option("txnAppId", app_id).option("txnVersion", version))
        if replace_where is None:
            writer.mode("append").save(path)
        else:
            writer.mode("overwrite").option("replaceWhere", replace_where).save(path)


def _write_files(path: str, data: pa.Table, app_id: str,
                 version: int) -> list[dict[str, Any]] | None:
    """Write the conformed rows ``data`` as one Parquet file per run into the partition folders
    of the table at ``path`` (names derived from ``app_id``, ``version`` and the run: a retry
    rewrites the same file, unreferenced until committed); their add actions. None (nothing
    written) when a ``run_id`` is not a plain folder name."""
    runs = sorted(set(data.column("run_id").to_pylist()))
    if not all(PLAIN_VALUE.fullmatch(str(r)) for r in runs):
        return None
    fs, base = arrow_filesystem(path)
    data_columns = [n for n in data.column_names if n not in PARTITION_COLUMNS]
    adds = []
    for run in runs:
        rows = data.filter(pc.equal(data.column("run_id"), run)).select(data_columns)
        tag = hashlib.sha1(f"{app_id}:{version}:{run}".encode()).hexdigest()
        rel = f"run_id={run}/part-{version:020d}-{tag[:20]}.parquet"
        fs.create_dir(f"{base}/run_id={run}", recursive=True)
        pq.write_table(rows, f"{base}/{rel}", filesystem=fs, **parquet_options(rows.schema))
        meta = pq.ParquetFile(f"{base}/{rel}", filesystem=fs).metadata
        adds.append({"path": rel, "partitionValues": {"run_id": run},
                     "size": fs.get_file_info(f"{base}/{rel}").size,
                     "modificationTime": int(time.time() * 1000), "dataChange": True,
                     "stats": add_stats(meta)})
    return adds


def conform_spark(table: str, data: DataFrame) -> DataFrame:
    """``data`` with exactly ``table``'s columns and types (missing nullable columns as
    nulls); ``ValueError`` for an extra or a missing required column."""
    schema = spark_schema(table)
    extra = [c for c in data.columns if c not in schema.names]
    if extra:
        raise ValueError(f"{table}: columns not in the table schema: {', '.join(extra)}")
    columns = []
    for field in schema.fields:
        if field.name in data.columns:
            columns.append(F.col(field.name).cast(field.dataType).alias(field.name))
        elif field.nullable:
            columns.append(F.lit(None).cast(field.dataType).alias(field.name))
        else:
            raise ValueError(f"{table}: required column {field.name!r} is missing")
    return data.select(*columns)


def append_dataframe(store: DeltaStore, table: str, data: DataFrame, app_id: str,
                     version: int) -> bool:
    """Append the Spark DataFrame ``data`` to ``table`` idempotently (as
    :meth:`~pipelines.storage.delta.DeltaStore.append`), with either engine, without holding it
    on the driver: the executors stage it as Parquet under ``<root>/_tmp_writes/<uuid>``,
    :meth:`~pipelines.storage.delta.DeltaStore.append_parquet` commits those files in ONE
    commit; the staging folder is removed after. ``ValueError`` as :func:`conform_spark`."""
    committed = store.transaction_version(table, app_id)
    if committed is not None and committed >= int(version):
        return False  # no Spark job for a committed version
    staging = posixpath.join(store.root, "_tmp_writes", f"{table}-{uuid.uuid4().hex}")
    conform_spark(table, data).write.mode("overwrite").parquet(staging)
    fs, base = arrow_filesystem(staging)
    try:
        return store.append_parquet(table, staging, app_id, version)
    finally:
        fs.delete_dir_contents(base, missing_dir_ok=True)
        fs.delete_dir(base)


def read_spark(store: DeltaStore, table: str) -> DataFrame:
    """``table`` of ``store`` as a Spark DataFrame with the contract schema (empty if it
    doesn't exist), in ``store.spark``.

    delta-spark: ``format("delta")``. delta-rs: the table's current Parquet files, read by
    the executors, one ``run_id`` partition at a time (the partition value is taken from
    the Delta log, not decoded from the folder name). ``ValueError`` without a session.
    """
    spark: SparkSession | None = store.spark
    if spark is None:
        raise ValueError("read_spark needs a SparkSession (pass spark= to the store)")
    schema = spark_schema(table)
    if not store.exists(table):
        return spark.createDataFrame([], schema)
    if isinstance(store.writer, SparkDeltaWriter):
        return spark.read.format("delta").load(store.path(table)).select(*schema.names)
    dt = DeltaTable(store.path(table), storage_options=store.storage_options)
    actions = pa.table(dt.get_add_actions(flatten=True))
    files_by_run: dict[str, list[str]] = {}
    base = store.path(table)
    for path, run in zip(actions.column("path").to_pylist(),
                         actions.column("partition.run_id").to_pylist(), strict=True):
        path = unquote(path)  # add-action paths are percent-encoded relative URIs
        uri = path if "://" in path or path.startswith("/") else posixpath.join(base, path)
        files_by_run.setdefault(run, []).append(uri)
    if not files_by_run:
        return spark.createDataFrame([], schema)
    data_schema = StructType([f for f in schema.fields if f.name not in PARTITION_COLUMNS])
    frames = [spark.read.schema(data_schema).parquet(*files)
              .withColumn("run_id", F.lit(run).cast("string")).select(*schema.names)
              for run, files in sorted(files_by_run.items())]
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result
