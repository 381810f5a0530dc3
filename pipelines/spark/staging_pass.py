"""The replay's staging pass on Spark (:func:`stage_batch`): each task of a ``mapInArrow`` over
a micro-batch's mapped records runs :func:`pipelines.storage.staging.stage_partition` — the input
rules, the key hashes and the staged files — and returns the records the rules reject and the
late ones."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark import TaskContext

from pipelines.ingest.rules import MINUTE_HINT
from pipelines.spark.udfs import verdict_type
from pipelines.storage.fs import arrow_filesystem
from pipelines.storage.staging import MISPLACED_MARK, StagingPlan, stage_partition


def _staging_task(plan: StagingPlan, folder: str, check_minutes: bool
                  ) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: :func:`stage_partition` of the task's partition."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        context = TaskContext.get()
        assert context is not None  # a Spark task's function
        yield from stage_partition(batches, plan, folder, context.partitionId(), check_minutes)

    return run


def _fresh_folder(folder: str) -> None:
    fs, path = arrow_filesystem(folder)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_dir(path)
    fs.create_dir(path, recursive=True)


def _misplaced(folder: str) -> bool:
    fs, path = arrow_filesystem(folder)
    return bool(fs.get_file_info(f"{path}/{MISPLACED_MARK}").type != pafs.FileType.NotFound)


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
        if not _misplaced(folder):
            return
