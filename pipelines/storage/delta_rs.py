"""delta-rs's writer of the output tables (:class:`~pipelines.storage.delta.DeltaWriter`): the
``deltalake`` Python package, from the driver, no Spark.

The default writer (:class:`~pipelines.storage.delta.DeltaStore` without ``writer``), and what
delta-spark's writer (:mod:`pipelines.spark.delta_spark`) tries first wherever delta-rs reaches
the storage: a commit costs milliseconds where a Spark write job costs seconds
(docs/architecture.md, "Delta commits"). Every commit carries the app transaction
``(app_id, version)``: ``CommitProperties(app_transactions=[Transaction(app_id, version)])``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import CommitProperties, DeltaTable, Schema, Transaction, write_deltalake
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from pipelines.contract.schemas import arrow_schema
from pipelines.storage.delta_format import (
    PARTITION_COLUMNS,
    TABLE_PROPERTIES,
    conform_arrow,
    run_predicate,
)
from pipelines.storage.fs import arrow_filesystem


def _commit_properties(app_id: str, version: int) -> CommitProperties:
    return CommitProperties(app_transactions=[Transaction(app_id=app_id, version=version)])


class RsDeltaWriter:
    """Writes the tables with delta-rs. ``storage_options``: delta-rs's settings of the location
    (object-store credentials, :func:`pipelines.storage.fs.delta_storage_options`), or None."""

    engine = "delta-rs"

    def __init__(self, storage_options: Mapping[str, str] | None = None) -> None:
        self.storage_options = dict(storage_options) if storage_options else None

    def _table(self, path: str) -> DeltaTable:
        return DeltaTable(path, storage_options=self.storage_options)

    def exists(self, path: str) -> bool:
        """Whether ``path`` holds a Delta table (a ``_delta_log``)."""
        return bool(DeltaTable.is_deltatable(path, storage_options=self.storage_options))

    def transaction_version(self, path: str, app_id: str) -> int | None:
        """The table's latest app-transaction version of ``app_id``, None if none."""
        version = self._table(path).transaction_version(app_id)
        return None if version is None else int(version)

    def create_table(self, path: str, table: str) -> None:
        """Create ``table`` empty at ``path`` if missing: one commit of the schema, the
        partitioning and :data:`~pipelines.storage.delta_format.TABLE_PROPERTIES`."""
        DeltaTable.create(path, arrow_schema(table), mode="ignore",
                          partition_by=list(PARTITION_COLUMNS),
                          configuration=dict(TABLE_PROPERTIES),
                          storage_options=self.storage_options)

    def write_rows(self, path: str, table: str, rows: Any, app_id: str, version: int,
                   replace_runs: Sequence[str] | None = None) -> None:
        """Append the conformed ``rows`` (an Arrow table or record batch reader with
        ``table``'s schema), or replace every row of the runs ``replace_runs`` by them
        (``mode="overwrite"`` with the runs' predicate), in ONE commit carrying the app
        transaction; a new table is created by it, with the table properties."""
        configuration = None if self.exists(path) else dict(TABLE_PROPERTIES)
        props = _commit_properties(app_id, version)
        if replace_runs is None:
            write_deltalake(path, rows, mode="append", partition_by=list(PARTITION_COLUMNS),
                            configuration=configuration, storage_options=self.storage_options,
                            commit_properties=props)
        else:
            write_deltalake(path, rows, mode="overwrite",
                            predicate=run_predicate(sorted(replace_runs)),
                            partition_by=list(PARTITION_COLUMNS), configuration=configuration,
                            storage_options=self.storage_options, commit_properties=props)

    def write_files(self, path: str, table: str, source: str, constants: Mapping[str, Any],
                    app_id: str, version: int) -> None:
        """Append the rows of the Parquet files under ``source`` in ONE commit: only
        ``table``'s columns, ``constants`` (column → value) added, streamed one Arrow record
        batch at a time (each cast by :func:`~pipelines.storage.delta_format.conform_arrow`)
        into new files, so memory is bounded by a batch."""
        fs, base = arrow_filesystem(source)
        dataset = ds.dataset(base, filesystem=fs, format="parquet")
        schema = arrow_schema(table)
        if dataset.count_rows() == 0:
            self.write_rows(path, table, schema.empty_table(), app_id, version)
            return
        columns = [n for n in schema.names if n in dataset.schema.names and n not in constants]

        def batches() -> Iterator[pa.RecordBatch]:
            for batch in dataset.to_batches(columns=columns, batch_size=64 * 1024):
                if batch.num_rows:
                    t = pa.Table.from_batches([batch])
                    for name, value in constants.items():
                        t = t.append_column(name, pa.array([value] * t.num_rows))
                    yield from conform_arrow(table, t).to_batches()

        self.write_rows(path, table, pa.RecordBatchReader.from_batches(schema, batches()),
                        app_id, version)

    def commit_adds(self, path: str, table: str, adds: Sequence[Mapping[str, Any]],
                    app_id: str, version: int) -> None:
        """ONE commit of the ``add`` actions ``adds`` (Delta JSON fields of files already in
        the table's folder) and the app transaction, as a delta-rs write transaction (a new
        table is created by it)."""
        actions = [AddAction(path=a["path"], size=a["size"],
                             partition_values=dict(a["partitionValues"]),
                             modification_time=a["modificationTime"], data_change=True,
                             stats=a["stats"]) for a in adds]
        props = _commit_properties(app_id, version)
        if self.exists(path):
            changes: list[AddAction | RemoveAction] = list(actions)
            self._table(path).create_write_transaction(
                changes, mode="append", schema=arrow_schema(table),
                partition_by=list(PARTITION_COLUMNS), commit_properties=props)
        else:
            create_table_with_add_actions(
                path, Schema.from_arrow(arrow_schema(table)), actions,
                mode="append", partition_by=list(PARTITION_COLUMNS),
                configuration=TABLE_PROPERTIES,
                storage_options=self.storage_options, commit_properties=props)

    def read_arrow(self, path: str, table: str, run_id: str | None) -> pa.Table:
        """The table's rows (only ``run_id``'s when given), as stored."""
        filters = [("run_id", "=", run_id)] if run_id is not None else None
        return self._table(path).to_pyarrow_table(filters=filters)

    def delete_rows(self, path: str, predicate: str) -> None:
        """Delete the rows matching the SQL ``predicate`` (one commit)."""
        self._table(path).delete(predicate)

    def maintain(self, path: str, retain_hours: int | None, enforce: bool) -> dict[str, int]:
        """``OPTIMIZE`` (compaction) then ``VACUUM`` of the table: ``files_removed`` /
        ``files_added`` by the compaction, ``files_vacuumed`` deleted (``retain_hours`` None:
        the table's retention; ``enforce`` False allows a shorter one)."""
        metrics = self._table(path).optimize.compact()
        removed = self._table(path).vacuum(retention_hours=retain_hours, dry_run=False,
                                           enforce_retention_duration=enforce)
        return {"files_removed": int(metrics.get("numFilesRemoved", 0)),
                "files_added": int(metrics.get("numFilesAdded", 0)),
                "files_vacuumed": len(removed)}
