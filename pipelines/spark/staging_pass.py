"""The replay's staging pass on Spark (:func:`stage_batch`): each task of a ``mapInArrow`` over
a micro-batch's mapped records runs :func:`pipelines.storage.staging.stage_partition` — the input
rules, the key hashes and the staged files — and returns the records the rules reject and the
late ones. For a Parquet input whose mapping Spark SQL has nothing to evaluate,
:func:`stage_files` gives the tasks the micro-batch's files instead of its rows: each reads
its own with pyarrow (``pipelines.storage.parquet_input``), the same records without the JVM's
row-to-Arrow conversion."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark import TaskContext
from pyspark.sql.pandas.types import to_arrow_schema

from pipelines.ingest.rules import MINUTE_HINT
from pipelines.spark.session import is_connect
from pipelines.spark.udfs import verdict_type
from pipelines.storage.fs import arrow_filesystem
from pipelines.storage.parquet_input import (
    SPLIT_BYTES,
    DirectColumns,
    DirectReadRefused,
    FilePart,
    direct_columns,
    file_groups,
    file_parts,
    input_file,
    read_records,
)
from pipelines.storage.staging import (
    MISPLACED_MARK,
    StagingPlan,
    has_mark,
    leave_mark,
    stage_partition,
)


def _staging_task(plan: StagingPlan, folder: str, check_minutes: bool
                  ) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: :func:`stage_partition` of the task's partition."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        context = TaskContext.get()
        assert context is not None  # a Spark task's function
        yield from stage_partition(batches, plan, folder, context.partitionId(), check_minutes)

    return run


def _files_task(plan: StagingPlan, folder: str, columns: DirectColumns,
                groups: list[list[FilePart]]
                ) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of :func:`stage_files`: each input row (``id``) is a group
    of file parts this task reads and stages; a file it does not read leaves :data:`REFUSED_MARK`
    (the driver then gives the micro-batch to Spark's reader)."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for g in batch.column(0).to_pylist():  # the group's files are part-<g>
                records = (r for part in groups[g] for r in read_records(part, columns))
                try:
                    yield from stage_partition(records, plan, folder, g)
                except DirectReadRefused as exc:
                    leave_mark(folder, REFUSED_MARK, str(exc))
                    return

    return run


REFUSED_MARK = "_direct_read_refused"
"""File a task of :func:`stage_files` leaves in the micro-batch's staging folder when it does
not read one of its files itself (its text: why)."""


def stage_files(records: Any, files: Sequence[str], names: Sequence[str], staging: str,
                batch_id: int, plan: StagingPlan, take_verdicts: Callable[[Any], None],
                split_bytes: int = SPLIT_BYTES) -> bool:
    """:func:`stage_batch` of a Parquet micro-batch from its ``files`` (paths as
    ``_metadata.file_path`` spells them), read by the tasks themselves: ``records`` is the
    micro-batch's mapped-records DataFrame (only its schema is used), ``names`` the Parquet
    row's fields. A task per group of files (:func:`file_groups`: as many as Spark runs at
    once, by bytes), a file larger than ``split_bytes`` split between tasks by row groups
    (:func:`file_parts`). Returns ``False``, having staged nothing that stays, when the files
    cannot be read this way (``direct_columns`` or a task refused: the caller runs
    :func:`stage_batch`); ``take_verdicts`` then got a DataFrame whose rows must be
    replaced."""
    columns = direct_columns(to_arrow_schema(records.schema), plan.spec, names)
    if columns is None or not files:
        return False
    spark = records.sparkSession
    tasks = (int(spark.conf.get("spark.sql.shuffle.partitions")) if is_connect(spark)
             else spark.sparkContext.defaultParallelism)
    parts: list[FilePart] = []
    sizes: list[int] = []
    for path, size in zip(files, _sizes(files), strict=True):
        split = file_parts(path, size, split_bytes)
        parts += split
        sizes += [size // len(split)] * len(split)  # a part's share of its file's bytes
    groups = file_groups(parts, sizes, tasks)
    folder = f"{staging.rstrip('/')}/batch_id={batch_id}"
    _fresh_folder(folder)
    ids = spark.range(0, len(groups), 1, len(groups))
    take_verdicts(ids.mapInArrow(_files_task(plan, folder, columns, groups),
                                 verdict_type(records)))
    return not has_mark(folder, REFUSED_MARK)


def _sizes(files: Sequence[str]) -> list[int]:
    """Each file's size in bytes (0 when it cannot be listed: its task finds out why)."""
    out = []
    for path in files:
        try:
            fs, local = input_file(path)
            out.append(max(0, int(fs.get_file_info(local).size or 0)))
        except (OSError, pa.ArrowException, ValueError):
            out.append(0)
    return out


def _fresh_folder(folder: str) -> None:
    fs, path = arrow_filesystem(folder)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_dir(path)
    fs.create_dir(path, recursive=True)


def stage_batch(records: Any, staging: str, batch_id: int, plan: StagingPlan,
                take_verdicts: Callable[[Any], None]) -> None:
    """Spark: the rules and the staging of micro-batch ``batch_id`` in ONE Python pass.

    ``records``: a DataFrame of mapped records (``pipelines.spark.ingest.map_records``). Each task
    runs :func:`~pipelines.storage.staging.stage_partition` under ``plan`` in ``mapInArrow``: it
    stages the accepted messages under ``<staging>/batch_id=<batch_id>`` (replaced whole, so a
    re-run restages it) and returns the rejected and late records as rows
    (``pipelines.ingest.rules.verdict_rows``; Spark types: ``pipelines.spark.udfs.verdict_type``).
    ``take_verdicts`` gets that DataFrame and must run it exactly once (e.g. write it): that
    action is the pass.

    A spec that spreads minutes needs a minute's records in one task: they are partitioned by
    their minute hint first; when a task finds a hint that is not its record's minute, the pass
    runs again with every record in one task, and ``take_verdicts`` gets its rows (replacing
    the first ones)."""
    folder = f"{staging.rstrip('/')}/batch_id={batch_id}"
    attempts = ([(records.repartition(MINUTE_HINT), True), (records.repartition(1), False)]
                if plan.spec.spread_within_minute else [(records, False)])
    for parts, check in attempts:
        _fresh_folder(folder)
        take_verdicts(parts.mapInArrow(_staging_task(plan, folder, check),
                                       verdict_type(records)))
        if not has_mark(folder, MISPLACED_MARK):
            return
