"""The one module that owns Delta Lake I/O for the output tables.

Two engines, same paths, same schemas (:mod:`pipelines.contract.schemas`), same idempotency:

- ``delta-spark``: the native engine (``format("delta")``), used when the Delta Lake classes are
  on the session's classpath (a cluster, or ``--packages io.delta:delta-spark_2.13:4.1.0``).
- ``delta-rs``: the ``deltalake`` Python package, writing from the driver. The default on
  machines without the Delta jars (docs/design.md, "Environment"). A Spark DataFrame is brought
  to the driver as Arrow (``DataFrame.toArrow()``) before it is written.

Idempotent micro-batch commits
------------------------------
``append(table, data, app_id, version)`` records a Delta *app transaction* ``(app_id, version)``
in the same commit as the data. A later append with the same ``app_id`` and a version ``<=`` the
recorded one is skipped (returns ``False``), so replaying a micro-batch after a crash never
duplicates rows. delta-rs: ``CommitProperties(app_transactions=[Transaction(app_id, version)])``
and ``DeltaTable.transaction_version(app_id)``; delta-spark: the ``txnAppId`` / ``txnVersion``
writer options (Delta skips the write itself as well) for Spark DataFrames, and for
driver-side rows and files adopted as they are, ``SetTransaction`` in a commit made through the
driver JVM's Delta API (``DeltaLog.forTable(...).startTransaction()``: ``txnVersion`` checked in
the transaction, then ``commit`` of the ``add`` actions; :func:`_jvm_commit`), which costs
milliseconds where a Spark write job cost seconds (docs/architecture.md, "Delta commits").
Use one ``app_id`` per (run, writer), e.g. ``f"{run_id}:{query_name}"``, with the micro-batch
id as ``version``. A single writer per ``app_id`` at a time is assumed (as with a streaming
query). :meth:`DeltaStore.delete_run` removes rows but not app transactions: re-running a
deleted run needs a new ``app_id``.

Partitioning and table properties
---------------------------------
Every table is partitioned by ``run_id`` only (users append many runs to one output; a run's
rows are then one folder, which :meth:`DeltaStore.replace_run`, :meth:`DeltaStore.delete_run`
and per-run queries prune to, and ``OPTIMIZE`` compacts per run). Tables are created, by either
engine, with :data:`TABLE_PROPERTIES` (log and removed-file retention, which ``VACUUM`` and log
clean-up honour). :meth:`DeltaStore.maintain` compacts and vacuums (``topic-replay
maintain``). ``topic`` is deliberately *not* a partition column: its cardinality is
unbounded (the online-retail trace alone has 38 countries, Pulsar exports can hold thousands of
topics), and partitioning by it would write one small file per topic per micro-batch.
Per-topic queries are served by Delta's per-file min/max statistics.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Schema, Transaction, write_deltalake
from deltalake.transaction import (
    AddAction,
    RemoveAction,
    create_table_with_add_actions,
)

from pipelines.contract.schemas import arrow_schema, table_names
from pipelines.storage.faults import fault
from pipelines.storage.fs import arrow_filesystem, delta_storage_options, read_bytes, write_bytes

PARTITION_COLUMNS: tuple[str, ...] = ("run_id",)
"""Partition columns of every output table (see the module docstring)."""

ENGINES = ("auto", "delta-spark", "delta-rs")

TABLE_PROPERTIES: dict[str, str] = {
    # time travel reaches back this far (older log entries are cleaned up at checkpoints)
    "delta.logRetentionDuration": "interval 30 days",
    # VACUUM keeps files removed (by OPTIMIZE, replace_run, delete_run) for this long, so a
    # reader of an older version, or time travel within a week, still finds them
    "delta.deletedFileRetentionDuration": "interval 7 days",
}
"""Properties every output table is created with (docs/delta.md, "Tables that live long")."""

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


def _is_spark_dataframe(data: Any) -> bool:
    try:
        from pyspark.sql import DataFrame  # noqa: PLC0415
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return False
    return isinstance(data, DataFrame)


def _sql_string(value: str) -> str:
    """A SQL string literal for ``value`` (single quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


def _describe(field: Mapping[str, Any]) -> str:
    """``long not null`` / ``array<integer> null``: a Delta schema field's type, for messages."""
    t = field["type"]
    if isinstance(t, dict):
        t = f"{t.get('type')}<{t.get('elementType', '?')}>" if t.get("type") == "array" else \
            json.dumps(t, sort_keys=True)
    return f"{t} {'null' if field['nullable'] else 'not null'}"


def conform_arrow(table: str, data: pa.Table | pd.DataFrame,  # noqa: C901
                  columns: Sequence[str] | None = None) -> pa.Table:
    """Cast ``data`` to ``table``'s schema: same column order and types (only ``columns`` of
    it, in the schema's order, when given — e.g. all but ``run_id``).

    Missing nullable columns are filled with nulls; a missing non-nullable column, an extra
    column, a failed cast or a null in a non-nullable column raises ``ValueError``. Timestamps
    are truncated to microseconds; naive timestamps are taken as UTC.
    """
    schema = arrow_schema(table)
    if columns is not None:
        schema = pa.schema([f for f in schema if f.name in set(columns)])
    if isinstance(data, pd.DataFrame):
        # one thread: pyarrow's per-call thread pool costs more than it saves on frames of a
        # window (a topic stage task converts several per window while the other cores work)
        data = pa.Table.from_pandas(data, preserve_index=False, nthreads=1)
    elif not isinstance(data, pa.Table):
        data = pa.table(data)
    extra = [c for c in data.column_names if c not in schema.names]
    if extra:
        raise ValueError(f"{table}: columns not in the table schema: {', '.join(extra)}")
    arrays = []
    for field in schema:
        if field.name not in data.column_names:
            if not field.nullable:
                raise ValueError(f"{table}: required column {field.name!r} is missing")
            arrays.append(pa.nulls(data.num_rows, field.type))
            continue
        column = data[field.name]
        if column.type != field.type:
            options = pc.CastOptions(field.type, allow_time_truncate=True)
            try:
                column = pc.cast(column, options=options)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise ValueError(
                    f"{table}: column {field.name!r} of type {data[field.name].type} cannot be "
                    f"cast to {field.type}: {exc}"
                ) from exc
        if not field.nullable and column.null_count:
            raise ValueError(
                f"{table}: column {field.name!r} must not be null "
                f"({column.null_count} null value(s))"
            )
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=schema)


def table_app_id(run_id: str, table: str) -> str:
    """App-transaction id of one run's writes to one table (every writer of the replay uses it,
    so a re-run of the same batch is recognised whatever wrote it first)."""
    return f"topic-replay:{run_id}:{table}"


def use_system_arrow_pool() -> None:
    """Make pyarrow allocate with the system allocator in this process and the Python workers
    it starts (``ARROW_DEFAULT_MEMORY_POOL=system``). Arrow's default jemalloc pool keeps
    freed pages: measured here, a driver streaming one 500k-row window after another into
    delta-rs grew by 30–40 MB a window with it and stayed flat with the system pool."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    if os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "system":
        pa.set_memory_pool(pa.system_memory_pool())


_PLAIN_VALUE = re.compile(r"[A-Za-z0-9._-]+")
"""Partition values that need no escaping in a folder name or an add-action path."""


def _add_stats(meta: Any) -> str:
    """Delta ``add`` statistics of one Parquet file from its footer: ``numRecords``,
    ``nullCount`` per column, and ``minValues`` / ``maxValues`` for integer and string columns
    whose every row group has them (timestamps are left out: Delta wants them at millisecond
    precision, rounded outwards, so a copied microsecond value could exclude rows; list
    columns too)."""
    out: dict[str, Any] = {"numRecords": meta.num_rows, "minValues": {}, "maxValues": {},
                           "nullCount": {}}
    arrow = meta.schema.to_arrow_schema()
    for j in range(meta.num_columns):
        name = meta.schema.column(j).path
        if "." in name:  # a list's elements: no statistics of the column itself
            continue
        cols = [meta.row_group(r).column(j) for r in range(meta.num_row_groups)]
        st = [c.statistics for c in cols]
        if all(x is not None and x.has_null_count for x in st):
            out["nullCount"][name] = sum(x.null_count for x in st)
        kind = arrow.field(name).type
        if not (pa.types.is_integer(kind) or pa.types.is_string(kind)):
            continue
        if any(x is None or (not x.has_min_max and x.num_values) for x in st):
            continue  # a row group with values but no min/max: no bounds for the file
        with_values = [x for x in st if x.has_min_max]
        if with_values:
            out["minValues"][name] = min(x.min for x in with_values)
            out["maxValues"][name] = max(x.max for x in with_values)
    return json.dumps(out)


ADOPT_MANIFEST = "_adopted.json"
"""File written into a folder of Parquet files before they are adopted into a table
(:meth:`DeltaStore._adopt`): the add actions, so a retry after a crash finds the files it
moved. Readers of the folder skip it (a leading ``_``)."""


def _run_predicate(runs: Sequence[str]) -> str:
    """SQL predicate selecting the rows of ``runs``."""
    return (f"run_id = {_sql_string(runs[0])}" if len(runs) == 1 else
            f"run_id IN ({', '.join(_sql_string(r) for r in runs)})")


def _read_manifest(location: str, app_id: str, version: int) -> list[dict[str, Any]] | None:
    """The add actions an earlier attempt of ``(app_id, version)`` recorded at ``location``
    (:data:`ADOPT_MANIFEST`); None when there is none, or it is another commit's."""
    try:
        doc = json.loads(read_bytes(location).decode("utf-8"))
    except FileNotFoundError:
        return None
    if doc.get("app_id") != app_id or doc.get("version") != version:
        return None
    return list(doc["adds"])


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
                                         scala.Option.apply(_run_predicate(sorted(runs))),
                                         none, none, none, none)
    txn.commit(scala.jdk.javaapi.CollectionConverters.asScala(actions).toList(), op)
    return True


class DeltaStore:
    """Reads and writes the output tables under ``root`` (one folder per table).

    ``engine``: ``"auto"`` (delta-spark when its classes are on ``spark``'s classpath, else
    delta-rs), ``"delta-spark"`` or ``"delta-rs"`` to force one. ``spark`` defaults to the active
    session (needed for delta-spark and :meth:`read_spark`). ``storage_options`` are passed to
    delta-rs (object-store credentials etc.; default: those of the ``AWS_*`` variables for an
    ``s3a://`` root, :func:`pipelines.storage.fs.delta_storage_options`).
    """

    def __init__(
        self,
        root: str,
        engine: str = "auto",
        spark: Any = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
        if spark is None:
            try:
                from pyspark.sql import SparkSession  # noqa: PLC0415

                spark = SparkSession.getActiveSession()
            except ImportError:  # pragma: no cover
                spark = None
        self.root = str(root).rstrip("/")
        self.spark = spark
        if storage_options is None:  # an object store's settings from the environment
            storage_options = delta_storage_options(self.root)
        self.storage_options = dict(storage_options) if storage_options else None
        available = False
        if spark is not None:
            from pipelines.spark.session import delta_spark_available  # noqa: PLC0415

            available = delta_spark_available(spark)
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
        self.engine = engine

    # ------------------------------------------------------------------ paths and metadata
    def path(self, table: str) -> str:
        """Location of ``table``: ``<root>/<table>``."""
        arrow_schema(table)  # validates the name
        return posixpath.join(self.root, table)

    def _delta_table(self, table: str) -> DeltaTable:
        return DeltaTable(self.path(table), storage_options=self.storage_options)

    def exists(self, table: str) -> bool:
        """True when ``table`` is a Delta table (has a ``_delta_log``).

        Read with delta-rs for both engines (no Spark job); delta-spark asks Spark when delta-rs
        cannot read the location (e.g. no object-store credentials in ``storage_options``)."""
        try:
            return DeltaTable.is_deltatable(self.path(table),
                                            storage_options=self.storage_options)
        except Exception:
            if self.engine != "delta-spark":
                raise
        from delta.tables import DeltaTable as SparkDeltaTable  # noqa: PLC0415

        return bool(SparkDeltaTable.isDeltaTable(self.spark, self.path(table)))

    def transaction_version(self, table: str, app_id: str) -> int | None:
        """Latest committed app-transaction version of ``app_id`` in ``table`` (None if none).

        Read from the Delta log with delta-rs for both engines. With delta-spark, when delta-rs
        cannot read the log (e.g. no object-store credentials in ``storage_options``), this
        returns None and idempotency rests on Delta's own ``txnAppId`` / ``txnVersion`` check
        (the write is then skipped by Delta, but :meth:`append` reports True).
        """
        if not self.exists(table):
            return None
        try:
            return self._delta_table(table).transaction_version(app_id)
        except Exception:
            if self.engine == "delta-spark":
                return None
            raise

    def _new_table_properties(self, table: str) -> dict[str, str] | None:
        """:data:`TABLE_PROPERTIES` when ``table`` is about to be created, else None."""
        return None if self.exists(table) else dict(TABLE_PROPERTIES)

    def ensure_table(self, table: str) -> bool:
        """Create ``table`` empty (schema, ``run_id`` partitions, :data:`TABLE_PROPERTIES`) when
        it does not exist, so that queries of a run that produced no rows for it find an empty
        table rather than none. Returns True when it created the table."""
        if self.exists(table):
            return False
        self._create_table(table)
        return True

    def _create_table(self, table: str) -> str:
        """Create ``table`` empty if missing (one commit: schema, partitions, properties);
        its path. Written with delta-rs for both engines (a Delta log entry, no Spark job: a
        Spark ``CREATE TABLE`` took seconds a table); delta-spark falls back to Spark when
        delta-rs cannot write the location (e.g. no credentials in ``storage_options``)."""
        try:
            DeltaTable.create(self.path(table), arrow_schema(table), mode="ignore",
                              partition_by=list(PARTITION_COLUMNS),
                              configuration=dict(TABLE_PROPERTIES),
                              storage_options=self.storage_options)
        except Exception:
            if self.engine != "delta-spark":
                raise
            return self._create_spark_table(table)
        return self.path(table)

    # ------------------------------------------------------------------ writes
    def append(self, table: str, data: Any, app_id: str, version: int) -> bool:
        """Append ``data`` (pandas / pyarrow / Spark DataFrame) to ``table``, idempotently.

        Returns ``False`` (and writes nothing) when ``table`` already holds an app transaction
        for ``app_id`` with a version ``>= version``; otherwise commits the rows together with
        the transaction ``(app_id, version)`` and returns ``True``. Creates the table (schema
        from :mod:`pipelines.contract.schemas`, partitioned by ``run_id``) on first write; an empty
        ``data`` still commits the transaction. ``ValueError`` when ``data`` does not fit the
        schema (see :func:`conform_arrow`).
        """
        version = int(version)
        if self._committed(table, app_id, version):
            return False
        if self.engine == "delta-spark":
            self._write_spark_rows(table, data, app_id, version)
        else:
            self._append_rs(table, data, app_id, version)
        return True

    def _committed(self, table: str, app_id: str, version: int) -> bool:
        """Whether ``table`` already holds version ``>= version`` of ``app_id`` (the write is
        then skipped); ``ValueError`` for a negative version."""
        if version < 0:
            raise ValueError(f"version must be >= 0, got {version}")
        committed = self.transaction_version(table, app_id)
        return committed is not None and committed >= version

    def _write_rs(self, table: str, data: Any, app_id: str, version: int) -> None:
        """delta-rs: append ``data`` (a conformed Arrow table or record batch reader) to
        ``table`` in one commit carrying ``app_id``'s transaction ``version``."""
        write_deltalake(
            self.path(table),
            data,
            mode="append",
            partition_by=list(PARTITION_COLUMNS),
            configuration=self._new_table_properties(table),
            storage_options=self.storage_options,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=app_id, version=version)]
            ),
        )

    def _append_rs(self, table: str, data: Any, app_id: str, version: int) -> None:
        if _is_spark_dataframe(data):
            self._append_rs_spark(table, data, app_id, version)
            return
        self._write_rs(table, conform_arrow(table, data), app_id, version)

    def _append_rs_spark(self, table: str, data: Any, app_id: str, version: int) -> None:
        """delta-rs append of a Spark DataFrame without holding it on the driver: the executors
        stage it as Parquet under ``<root>/_tmp_writes/<uuid>``, the driver streams those files
        into ONE commit (:meth:`_append_rs_parquet`); the staging folder is removed after."""

        staging = posixpath.join(self.root, "_tmp_writes", f"{table}-{uuid.uuid4().hex}")
        data.write.mode("overwrite").parquet(staging)
        fs, base = arrow_filesystem(staging)
        try:
            self._append_rs_parquet(table, staging, app_id, version, {})
        finally:
            fs.delete_dir_contents(base, missing_dir_ok=True)
            fs.delete_dir(base)

    def _append_rs_parquet(self, table: str, path: str, app_id: str, version: int,
                           constants: Mapping[str, Any]) -> None:
        """delta-rs: commit the Parquet files under ``path`` in ONE commit carrying the app
        transaction. Files whose schema is exactly ``table``'s without its partition columns
        (given in ``constants``) are adopted as they are (:meth:`_adopt`; no rows pass through
        the driver). Other files are streamed one Arrow record batch at a time (only
        ``table``'s columns, ``constants`` added, each batch cast by :func:`conform_arrow`)
        into new files."""

        if self._adopt(table, path, constants, app_id, version):
            return
        fs, base = arrow_filesystem(path)
        dataset = ds.dataset(base, filesystem=fs, format="parquet")
        schema = arrow_schema(table)
        if dataset.count_rows() == 0:
            self._append_rs(table, schema.empty_table(), app_id, version)
            return
        columns = [n for n in schema.names if n in dataset.schema.names and n not in constants]

        def batches() -> Any:
            for batch in dataset.to_batches(columns=columns, batch_size=64 * 1024):
                if batch.num_rows:
                    t = pa.Table.from_batches([batch])
                    for name, value in constants.items():
                        t = t.append_column(name, pa.array([value] * t.num_rows))
                    yield from conform_arrow(table, t).to_batches()

        self._write_rs(table, pa.RecordBatchReader.from_batches(schema, batches()), app_id,
                       version)

    # ------------------------------------------------------------------ adopted files
    def _adoptable(self, table: str, path: str,
                   constants: Mapping[str, Any]) -> dict[str, Any] | None:
        """The footers (file → Parquet metadata) of the files under ``path`` when they can be
        committed as they are: ``constants`` are exactly the partition columns, with plain
        values (a folder name needing no escaping), and every file has exactly ``table``'s
        data columns and types; otherwise None. ``{}`` for an empty folder."""
        if not (set(constants) == set(PARTITION_COLUMNS)
                and all(_PLAIN_VALUE.fullmatch(str(v)) for v in constants.values())):
            return None
        fs, base = arrow_filesystem(path)
        dataset = ds.dataset(base, filesystem=fs, format="parquet")
        schema = arrow_schema(table)
        data_schema = pa.schema([f for f in schema if f.name not in PARTITION_COLUMNS])
        footers = {f: pq.ParquetFile(f, filesystem=fs).metadata for f in dataset.files}
        if all(m.schema.to_arrow_schema().equals(data_schema) for m in footers.values()):
            return footers
        return None

    def _adopt(self, table: str, path: str, constants: Mapping[str, Any], app_id: str,
               version: int) -> bool:
        """Commit the Parquet files under ``path`` as they are, with the app transaction
        ``(app_id, version)``: moved into ``table``'s partition folder and committed as one
        Delta commit of add actions carrying their statistics (:func:`_add_stats`), by this
        store's engine (:meth:`_commit_adds`). False (nothing done) when they cannot be
        adopted (:meth:`_adoptable`).

        Crash-safe: the add actions (new names derived from ``app_id``, ``version`` and the
        old name) are written to ``path``/:data:`ADOPT_MANIFEST` before any file moves, and a
        retry of the same ``(app_id, version)`` finds them there, moves what is still in
        ``path`` and commits; a crash between the moves and the commit thus loses no file,
        and one before the manifest leaves the folder as it was."""
        manifest = posixpath.join(path.rstrip("/"), ADOPT_MANIFEST)
        adds = _read_manifest(manifest, app_id, version)
        if adds is None:
            footers = self._adoptable(table, path, constants)
            if footers is None:
                return False
            adds = self._planned_adds(table, path, footers, constants, app_id, version)
            write_bytes(manifest, json.dumps({"app_id": app_id, "version": version,
                                              "adds": adds}).encode("utf-8"))
        fs, _ = arrow_filesystem(path)
        table_fs, table_base = arrow_filesystem(self.path(table))
        for add in adds:
            if fs.get_file_info(add["source"]).type == pafs.FileType.File:
                dest = f"{table_base}/{add['path']}"
                table_fs.create_dir(posixpath.dirname(dest), recursive=True)
                table_fs.move(add["source"], dest)
        fault(f"adopted:{table}")
        self._commit_adds(table, [{k: v for k, v in a.items() if k != "source"} for a in adds],
                          app_id, version)
        return True

    def _planned_adds(self, table: str, path: str, footers: Mapping[str, Any],
                      constants: Mapping[str, Any], app_id: str,
                      version: int) -> list[dict[str, Any]]:
        """The add actions (Delta JSON fields, plus ``source``: the file now) of adopting the
        files ``footers`` names into ``table``'s partition ``constants``."""
        fs, _ = arrow_filesystem(path)
        part = "/".join(f"{k}={constants[k]}" for k in PARTITION_COLUMNS)
        now = int(time.time() * 1000)
        adds = []
        for f, meta in sorted(footers.items()):
            tag = hashlib.sha1(f"{app_id}:{version}:{posixpath.basename(f)}".encode()).hexdigest()
            adds.append({"path": f"{part}/part-{version:020d}-{tag[:20]}.parquet",
                         "partitionValues": {k: str(v) for k, v in constants.items()},
                         "size": fs.get_file_info(f).size, "modificationTime": now,
                         "dataChange": True, "stats": _add_stats(meta), "source": f})
        return adds

    def _commit_adds(self, table: str, adds: Sequence[Mapping[str, Any]], app_id: str,
                     version: int) -> None:
        """ONE Delta commit of ``adds`` (Delta ``add`` action fields: files already in the
        table's folder) and the app transaction ``(app_id, version)``: delta-rs's write
        transaction, for both engines (milliseconds; the Delta log is engine-independent).
        delta-spark commits through the driver JVM's Delta API instead (:func:`_jvm_commit`)
        where delta-rs cannot write the location (e.g. object-store credentials only in
        Spark's Hadoop settings): that commit costs a Spark job or more (state reconstruction
        for ``txnVersion``), 10 to 15 s a commit on a loaded machine (docs/architecture.md,
        "Delta commits")."""
        try:
            self._commit_adds_rs(table, adds, app_id, version)
        except Exception:
            if self.engine != "delta-spark":
                raise
            if not self.exists(table):
                self._create_table(table)
            _jvm_commit(self.spark, self.path(table), adds, app_id, version, None)

    def _commit_adds_rs(self, table: str, adds: Sequence[Mapping[str, Any]], app_id: str,
                        version: int) -> None:
        """delta-rs: :meth:`_commit_adds`' commit, as one write transaction of add actions (a
        new table is created by it)."""
        actions = [AddAction(path=a["path"], size=a["size"],
                             partition_values=dict(a["partitionValues"]),
                             modification_time=a["modificationTime"], data_change=True,
                             stats=a["stats"]) for a in adds]
        props = CommitProperties(app_transactions=[Transaction(app_id=app_id, version=version)])
        if self.exists(table):
            changes: list[AddAction | RemoveAction] = list(actions)
            self._delta_table(table).create_write_transaction(
                changes, mode="append", schema=arrow_schema(table),
                partition_by=list(PARTITION_COLUMNS), commit_properties=props)
        else:
            create_table_with_add_actions(
                self.path(table), Schema.from_arrow(arrow_schema(table)), actions,
                mode="append", partition_by=list(PARTITION_COLUMNS),
                configuration=TABLE_PROPERTIES,
                storage_options=self.storage_options, commit_properties=props)

    def _write_files(self, table: str, data: pa.Table, app_id: str,
                     version: int) -> list[dict[str, Any]] | None:
        """Write the conformed rows ``data`` as one Parquet file per run into ``table``'s
        partition folders (names derived from ``app_id``, ``version`` and the run: a retry
        rewrites the same file, unreferenced until committed); their add actions. None
        (nothing written) when a ``run_id`` is not a plain folder name."""
        runs = sorted(set(data.column("run_id").to_pylist()))
        if not all(_PLAIN_VALUE.fullmatch(str(r)) for r in runs):
            return None
        fs, base = arrow_filesystem(self.path(table))
        data_columns = [n for n in data.column_names if n not in PARTITION_COLUMNS]
        adds = []
        for run in runs:
            rows = data.filter(pc.equal(data.column("run_id"), run)).select(data_columns)
            tag = hashlib.sha1(f"{app_id}:{version}:{run}".encode()).hexdigest()
            rel = f"run_id={run}/part-{version:020d}-{tag[:20]}.parquet"
            fs.create_dir(f"{base}/run_id={run}", recursive=True)
            strings = [f.name for f in rows.schema if f.type == "string"]
            pq.write_table(rows, f"{base}/{rel}", filesystem=fs, compression="zstd",
                           use_dictionary=strings)
            meta = pq.ParquetFile(f"{base}/{rel}", filesystem=fs).metadata
            adds.append({"path": rel, "partitionValues": {"run_id": run},
                         "size": fs.get_file_info(f"{base}/{rel}").size,
                         "modificationTime": int(time.time() * 1000), "dataChange": True,
                         "stats": _add_stats(meta)})
        return adds

    def _write_spark_rows(self, table: str, data: Any, app_id: str, version: int,
                          replace_runs: Sequence[str] | None = None) -> None:
        """delta-spark: append driver-side rows (pandas / Arrow), or replace the runs
        ``replace_runs`` by them, in one commit with the app transaction: with delta-rs
        (:meth:`_write_rows_rs`, milliseconds) where it can write the location; else written
        as Parquet by the driver and committed through the JVM's Delta API
        (:func:`_jvm_commit`). A Spark DataFrame, or with the JVM a ``run_id`` that is not a
        plain folder name, goes through Spark's writer (:meth:`_write_spark`). ``ValueError``
        when ``data`` does not fit the schema (:func:`conform_arrow`)."""
        if not _is_spark_dataframe(data):
            rows = conform_arrow(table, data)
            try:
                self._write_rows_rs(table, rows, app_id, version, replace_runs)
                return
            except Exception:  # delta-rs cannot write here: the JVM commits
                pass
            adds = self._write_files(table, rows, app_id, version)
            if adds is not None:
                if not self.exists(table):
                    self._create_table(table)
                _jvm_commit(self.spark, self.path(table), adds, app_id, version, replace_runs)
                return
        predicate = None if replace_runs is None else _run_predicate(replace_runs)
        self._write_spark(table, data, app_id, version, replace_where=predicate)

    def _write_rows_rs(self, table: str, rows: pa.Table, app_id: str, version: int,
                       replace_runs: Sequence[str] | None = None) -> None:
        """delta-rs: append the conformed ``rows`` to ``table``, or replace the runs
        ``replace_runs`` by them (``write_deltalake(mode="overwrite", predicate=...)``), in ONE
        commit carrying ``app_id``'s transaction ``version``."""
        if replace_runs is None:
            self._write_rs(table, rows, app_id, version)
            return
        write_deltalake(
            self.path(table),
            rows,
            mode="overwrite",
            predicate=_run_predicate(sorted(replace_runs)),
            partition_by=list(PARTITION_COLUMNS),
            configuration=self._new_table_properties(table),
            storage_options=self.storage_options,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=app_id, version=version)]
            ),
        )

    def append_parquet(self, table: str, path: str, app_id: str, version: int,
                       constants: Mapping[str, Any] | None = None) -> bool:
        """Append the Parquet dataset under ``path`` to ``table``, idempotently (as
        :meth:`append`): only the columns of ``table`` are taken, ``constants`` (column → value,
        e.g. ``run_id``) are added. Files that already have the table's data columns and
        types (the emulation's output) are adopted by either engine: moved into the table and
        committed as they are (:meth:`_adopt`, no Spark job). Others are rewritten: streamed
        by delta-rs into new files (:meth:`_append_rs_parquet`), or, with delta-spark where
        delta-rs cannot write the location, read with Spark and written with
        ``format("delta")``.
        ``ValueError`` as :meth:`append`."""
        version = int(version)
        constants = dict(constants or {})
        if self._committed(table, app_id, version):
            return False
        if self.engine != "delta-spark":
            self._append_rs_parquet(table, path, app_id, version, constants)
        elif not self._adopt(table, path, constants, app_id, version):
            try:  # another shape (the quarantine's, written by Spark): delta-rs streams it
                self._append_rs_parquet(table, path, app_id, version, constants)
                return True
            except Exception:  # delta-rs cannot write the location: Spark rewrites the files
                pass
            from pyspark.sql import functions as F  # noqa: PLC0415

            df = self.spark.read.parquet(path)
            keep = [c for c in arrow_schema(table).names if c in df.columns and c not in constants]
            df = df.select(*keep, *[F.lit(v).alias(k) for k, v in constants.items()])
            self._write_spark(table, df, app_id, version)
        return True

    def _conform_spark(self, table: str, data: Any) -> Any:
        """``data`` as a Spark DataFrame with exactly ``table``'s columns and types."""
        from pyspark.sql import functions as F  # noqa: PLC0415

        from pipelines.spark.schemas import spark_schema  # noqa: PLC0415 - Spark-only path

        schema = spark_schema(table)
        if not _is_spark_dataframe(data):
            return self.spark.createDataFrame(conform_arrow(table, data))
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

    def _create_spark_table(self, table: str) -> str:
        """delta-spark: create ``table`` (schema, ``run_id`` partitions) if missing; its path."""
        from delta.tables import DeltaTable as SparkDeltaTable  # noqa: PLC0415

        from pipelines.spark.schemas import spark_schema  # noqa: PLC0415 - Spark-only path

        path = self.path(table)
        builder = (
            SparkDeltaTable.createIfNotExists(self.spark)
            .location(path)
            .addColumns(spark_schema(table))
            .partitionedBy(*PARTITION_COLUMNS)
        )
        for key, value in TABLE_PROPERTIES.items():
            builder = builder.property(key, value)
        builder.execute()
        return path

    def _write_spark(self, table: str, data: Any, app_id: str, version: int,
                     replace_where: str | None = None) -> None:
        """delta-spark: append ``data`` (or replace the rows matching ``replace_where``) in one
        commit carrying the app transaction ``(app_id, version)``."""
        path = self.path(table) if self.exists(table) else self._create_table(table)
        writer = (self._conform_spark(table, data).write.format("delta")
                  .option("txnAppId", app_id).option("txnVersion", version))
        if replace_where is None:
            writer.mode("append").save(path)
        else:
            writer.mode("overwrite").option("replaceWhere", replace_where).save(path)

    def replace_run(self, table: str, data: Any, run_id: str | Sequence[str], app_id: str,
                    version: int) -> bool:
        """Replace every row of ``run_id`` (or of each run of a sequence: a sweep's runs in one
        commit) in ``table`` by ``data``, atomically and idempotently.

        One Delta commit removes the run's rows, adds ``data`` (whose ``run_id`` column must be
        ``run_id``, or one of them) and records the app transaction ``(app_id, version)``; like
        :meth:`append` it is skipped (returns ``False``) when ``app_id`` already holds a
        version ``>= version``. Use it for snapshot tables (``segments``): a crash can never
        leave the run without rows (a separate delete + append could, and the append would
        then be skipped).
        delta-rs: ``write_deltalake(mode="overwrite", predicate=...)``; delta-spark: the
        ``replaceWhere`` option with ``txnAppId`` / ``txnVersion``. ``ValueError`` as
        :meth:`append`.
        """
        version = int(version)
        if self._committed(table, app_id, version):
            return False
        runs = [run_id] if isinstance(run_id, str) else sorted(run_id)
        if self.engine == "delta-spark":
            self._write_spark_rows(table, data, app_id, version, replace_runs=runs)
            return True
        if _is_spark_dataframe(data):
            data = data.toArrow()
        self._write_rows_rs(table, conform_arrow(table, data), app_id, version, runs)
        return True

    def schema_problems(self, tables: Sequence[str] | None = None) -> list[str]:
        """One ``"<table>: <problem>"`` per existing table whose Delta schema or partitioning
        differs from the contract (:mod:`pipelines.contract.schemas`): a missing or extra column, a
        column of another type or nullability, other partition columns. Tables that do not
        exist yet are fine (they are created on first write). Read with delta-rs for both
        engines (the Delta log is engine-independent); ``[]`` when the output is compatible.
        """

        problems: list[str] = []
        for table in tables if tables is not None else table_names():
            if not DeltaTable.is_deltatable(self.path(table), storage_options=self.storage_options):
                continue
            dt = self._delta_table(table)
            have = {f["name"]: f for f in json.loads(dt.schema().to_json())["fields"]}
            want = {f["name"]: f for f in
                    json.loads(Schema.from_arrow(arrow_schema(table)).to_json())["fields"]}
            missing = [n for n in want if n not in have]
            extra = [n for n in have if n not in want]
            if missing:
                problems.append(f"{table}: missing column(s) {', '.join(missing)}")
            if extra:
                problems.append(f"{table}: column(s) not in the schema {', '.join(extra)}")
            for name in (n for n in want if n in have):
                a, b = have[name], want[name]
                if a["type"] != b["type"] or a["nullable"] != b["nullable"]:
                    problems.append(
                        f"{table}: column {name} is {_describe(a)}, expected {_describe(b)}")
            parts = list(dt.metadata().partition_columns)
            if parts != list(PARTITION_COLUMNS):
                problems.append(f"{table}: partitioned by {parts or 'nothing'}, expected "
                                f"{list(PARTITION_COLUMNS)}")
        return problems

    def maintain(self, table: str, retain_hours: int | None = None) -> dict[str, int]:
        """Compact ``table``'s small files (``OPTIMIZE``: bin-packing within each ``run_id``
        partition) and delete the files no version within the retention still references
        (``VACUUM``); a no-op returning zeros when ``table`` does not exist.

        ``retain_hours``: files removed longer ago than this are deleted (default: the table's
        ``delta.deletedFileRetentionDuration``, 7 days); a shorter retention than the table's
        is allowed (time travel to versions older than it then fails). Both commits keep the
        tables' rows and app transactions. Returns ``{"files_removed": n, "files_added": n,
        "files_vacuumed": n}`` (OPTIMIZE's removed/added data files, VACUUM's deleted files).
        """
        out = {"files_removed": 0, "files_added": 0, "files_vacuumed": 0}
        if not self.exists(table):
            return out
        if retain_hours is not None and retain_hours < 0:
            raise ValueError(f"retain_hours must be >= 0, got {retain_hours}")
        default_hours = 7 * 24
        enforce = retain_hours is None or retain_hours >= default_hours
        if self.engine == "delta-spark":
            from delta.tables import DeltaTable as SparkDeltaTable  # noqa: PLC0415

            metrics = (SparkDeltaTable.forPath(self.spark, self.path(table)).optimize()
                       .executeCompaction().collect()[0]["metrics"])
            out["files_removed"] = int(metrics["numFilesRemoved"])
            out["files_added"] = int(metrics["numFilesAdded"])
            key = "spark.databricks.delta.retentionDurationCheck.enabled"
            before = self.spark.conf.get(key, "true")
            self.spark.conf.set(key, "true" if enforce else "false")
            try:
                target = f"delta.`{self.path(table)}`"
                retain = "" if retain_hours is None else f" RETAIN {int(retain_hours)} HOURS"
                dry = self.spark.sql(f"VACUUM {target}{retain} DRY RUN").count()
                self.spark.sql(f"VACUUM {target}{retain}").collect()
            finally:
                self.spark.conf.set(key, before)
            out["files_vacuumed"] = int(dry)
            return out
        dt = self._delta_table(table)
        metrics = dt.optimize.compact()
        out["files_removed"] = int(metrics.get("numFilesRemoved", 0))
        out["files_added"] = int(metrics.get("numFilesAdded", 0))
        dt = self._delta_table(table)
        removed = dt.vacuum(retention_hours=retain_hours, dry_run=False,
                            enforce_retention_duration=enforce)
        out["files_vacuumed"] = len(removed)
        return out

    def delete_run(self, table: str, run_id: str) -> None:
        """Delete every row of ``run_id`` from ``table`` (no-op when the table doesn't exist).

        App transactions are kept (see the module docstring).
        """
        if not self.exists(table):
            return
        predicate = f"run_id = {_sql_string(run_id)}"
        if self.engine == "delta-spark":
            from delta.tables import DeltaTable as SparkDeltaTable  # noqa: PLC0415

            SparkDeltaTable.forPath(self.spark, self.path(table)).delete(predicate)
        else:
            self._delta_table(table).delete(predicate)

    # ------------------------------------------------------------------ reads
    def read_arrow(self, table: str, run_id: str | None = None) -> pa.Table:
        """``table`` (optionally one run) as a pyarrow Table with the contract schema, read
        with delta-rs for both engines (delta-spark reads with Spark where delta-rs cannot).

        An empty table with the right schema when ``table`` does not exist.
        """
        schema = arrow_schema(table)
        if not self.exists(table):
            return schema.empty_table()
        filters = [("run_id", "=", run_id)] if run_id is not None else None
        try:  # delta-rs for both engines: no Spark job (a run's summary reads every table)
            arrow = self._delta_table(table).to_pyarrow_table(filters=filters)
        except Exception:
            if self.engine != "delta-spark":
                raise
            df = self.read_spark(table)  # delta-rs cannot read the location: Spark does
            if run_id is not None:
                df = df.where(df["run_id"] == run_id)
            return conform_arrow(table, df.toArrow())
        return conform_arrow(table, arrow.select(schema.names))

    def column_totals(self, table: str, column: str, run_id: str | None = None) -> tuple[int, int]:
        """``(rows, sum of column)`` of ``table`` (optionally one run), scanned one record batch
        at a time (memory bounded by a batch, not the table); ``(0, 0)`` when it doesn't
        exist. delta-rs reads the log for both engines."""
        if not DeltaTable.is_deltatable(self.path(table), storage_options=self.storage_options):
            return 0, 0
        dataset = self._delta_table(table).to_pyarrow_dataset()
        flt = (pc.field("run_id") == run_id) if run_id is not None else None
        rows = total = 0
        for batch in dataset.to_batches(columns=[column], filter=flt):
            rows += batch.num_rows
            total += int(pc.sum(batch.column(0)).as_py() or 0)
        return rows, total

    def value_counts(self, table: str, column: str, run_id: str | None = None) -> dict[Any, int]:
        """How many rows of ``table`` (optionally one run) hold each value of ``column``, most
        frequent first; scanned one record batch at a time, only that column; ``{}`` when the
        table doesn't exist. delta-rs reads the log for both engines."""
        if not DeltaTable.is_deltatable(self.path(table), storage_options=self.storage_options):
            return {}
        dataset = self._delta_table(table).to_pyarrow_dataset()
        flt = (pc.field("run_id") == run_id) if run_id is not None else None
        counts: dict[Any, int] = {}
        for batch in dataset.to_batches(columns=[column], filter=flt):
            for row in pc.value_counts(batch.column(0)).to_pylist():
                counts[row["values"]] = counts.get(row["values"], 0) + int(row["counts"])
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0]))))

    def group_totals(self, table: str, by: str, column: str, distinct: str,
                     run_id: str | None = None) -> dict[str, tuple[int, int, int]]:
        """Per value of the string column ``by``: ``(rows, sum of column, distinct values of
        column distinct)`` of ``table`` (optionally one run), scanned one record batch at a
        time as :meth:`column_totals` (memory: a batch plus the distinct values); ``{}`` when
        the table doesn't exist."""
        if not DeltaTable.is_deltatable(self.path(table), storage_options=self.storage_options):
            return {}
        dataset = self._delta_table(table).to_pyarrow_dataset()
        flt = (pc.field("run_id") == run_id) if run_id is not None else None
        totals: dict[str, list[int]] = {}
        seen: dict[str, set[Any]] = {}
        for batch in dataset.to_batches(columns=[by, column, distinct], filter=flt):
            if not batch.num_rows:
                continue
            grouped = pa.table(batch).group_by([by, distinct]).aggregate([(column, "count"),
                                                                          (column, "sum")])
            for key, value, n, total in zip(grouped[by].to_pylist(),
                                            grouped[distinct].to_pylist(),
                                            grouped[f"{column}_count"].to_pylist(),
                                            grouped[f"{column}_sum"].to_pylist(), strict=True):
                acc = totals.setdefault(str(key), [0, 0])
                acc[0] += int(n)
                acc[1] += int(total or 0)
                seen.setdefault(str(key), set()).add(value)
        return {k: (v[0], v[1], len(seen[k])) for k, v in totals.items()}

    def read(self, table: str, run_id: str | None = None) -> pd.DataFrame:
        """``table`` (optionally one run) as a pandas DataFrame (timestamps ``datetime64[us,
        UTC]``); an empty frame with the table's columns when ``table`` does not exist."""
        return self.read_arrow(table, run_id).to_pandas()

    def read_spark(self, table: str) -> Any:
        """``table`` as a Spark DataFrame with the contract schema (empty if it doesn't exist).

        delta-spark: ``format("delta")``. delta-rs: the table's current Parquet files, read by
        the executors, one ``run_id`` partition at a time (the partition value is taken from
        the Delta log, not decoded from the folder name).
        """
        if self.spark is None:
            raise ValueError("read_spark needs a SparkSession (pass spark= to DeltaStore)")
        from pyspark.sql import functions as F  # noqa: PLC0415

        from pipelines.spark.schemas import spark_schema  # noqa: PLC0415 - Spark-only path

        schema = spark_schema(table)
        if not self.exists(table):
            return self.spark.createDataFrame([], schema)
        if self.engine == "delta-spark":
            return self.spark.read.format("delta").load(self.path(table)).select(*schema.names)
        actions = pa.table(self._delta_table(table).get_add_actions(flatten=True))
        partition_column = "partition.run_id"
        files_by_run: dict[str, list[str]] = {}
        base = self.path(table)
        for path, run in zip(
            actions.column("path").to_pylist(),
            actions.column(partition_column).to_pylist(),
            strict=True,
        ):
            path = unquote(path)  # add-action paths are percent-encoded relative URIs
            uri = path if "://" in path or path.startswith("/") else posixpath.join(base, path)
            files_by_run.setdefault(run, []).append(uri)
        if not files_by_run:
            return self.spark.createDataFrame([], schema)
        from pyspark.sql.types import StructType  # noqa: PLC0415

        data_schema = StructType([f for f in schema.fields if f.name not in PARTITION_COLUMNS])
        frames = []
        for run, files in sorted(files_by_run.items()):
            frames.append(
                self.spark.read.schema(data_schema)
                .parquet(*files)
                .withColumn("run_id", F.lit(run).cast("string"))
                .select(*schema.names)
            )
        result = frames[0]
        for frame in frames[1:]:
            result = result.unionByName(frame)
        return result
