"""The ingest of one micro-batch: its raw records through the input rules in ONE Python pass
that stages the accepted messages, its quarantine committed, a file that cannot be read
salvaged.

Per micro-batch ``k`` (:meth:`MicroBatchIngest.ingest`): the records are parsed and mapped in
Spark SQL (``pipelines.spark.ingest.map_records``), then ``pipelines.spark.staging_pass
.stage_batch`` applies the rules (``pipelines.ingest.rules``), hashes the keys and stages the
accepted records under ``staging/batch_id=k/topic_bin=<bin>`` (rewritten whole on a re-run);
rejected records, and accepted ones older than the finalized horizon (``late``), come out of
the pass as ``quarantine`` rows, written by the executors and committed by the driver to each
run's rows (``pipelines.storage.commits``). When an input file cannot be read (fully), the
readable files go through again and the file is quarantined (:meth:`MicroBatchIngest._salvage`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from pipelines.contract.config import ReplayConfig
from pipelines.contract.presets import InputSpec
from pipelines.ingest.privacy import DIGEST_PREFIX, Pseudonymizer
from pipelines.ingest.rules import bad_file_line
from pipelines.spark.ingest import (
    FILE_REASONS,
    LATE,
    PRESENT_PREFIX,
    map_records,
    micro_batch_files,
    quarantine_rows,
    salvage_files,
)
from pipelines.spark.replay_state import ReplayState
from pipelines.spark.staging_pass import stage_batch, stage_files
from pipelines.storage import fs as storage
from pipelines.storage.commits import TableCommits
from pipelines.storage.faults import fault
from pipelines.storage.staging import StagingPlan, staged_batch_stats, staged_files


@dataclass(frozen=True)
class StagedBatch:
    """What micro-batch ``k`` staged and quarantined: ``accepted`` messages, their event-time
    bounds (emulated ms; ``None`` when none), and ``quarantined`` records."""

    accepted: int
    min_event_ms: int | None
    max_event_ms: int | None
    quarantined: int


@dataclass(frozen=True)
class MicroBatchIngest:
    """The ingest of a replay's micro-batches: ``staging`` and ``work_dir`` are the replay's
    folders, ``run_ids`` the runs whose ``quarantine`` rows it commits (a sweep's all)."""

    spark: SparkSession
    config: ReplayConfig
    input_spec: InputSpec
    work_dir: str
    staging: str
    checkpoint: str
    topic_bins: int
    pseudonymize: Pseudonymizer | None
    commits: TableCommits
    run_ids: Sequence[str]
    progress: Callable[[Any], None]

    def ingest(self, raw: DataFrame, batch_id: int, state: ReplayState) -> StagedBatch:
        """Micro-batch ``batch_id``'s records staged and quarantined, counted into ``state``
        (``accepted`` is left to the caller, which moves the horizon with it; ``keyless``,
        ``quarantined``, ``late``, ``bad_files``; ``state.staged`` per topic)."""
        fields = Observation()  # records and present fields, counted by the staging pass
        try:
            self._stage(raw, batch_id, state, fields)
            salvaged = False
        except Exception as exc:  # an input file that cannot be read (fully): salvage the rest
            raw, bad_files = self._salvage(raw, batch_id, state, exc)
            self._stage(raw, batch_id, state, None, bad_files)
            salvaged = True
        fault(f"after_staging:{batch_id}")
        stats = staged_batch_stats(self.staging, batch_id)
        for topic, (n, _, _) in stats.items():
            state.staged[topic] = state.staged.get(topic, 0) + n
        state.add("keyless", _staged_keyless(self.staging, batch_id))
        if not salvaged and not state.fields_checked:  # a salvaged batch has no metrics
            self._check_fields(fields, batch_id, state)
        n_quarantined, n_late = self._commit_quarantine(batch_id)
        fault(f"after_quarantine:{batch_id}")
        state.add("quarantined", n_quarantined)
        state.add("late", n_late)
        accepted = sum(int(n) for n, _, _ in stats.values())
        return StagedBatch(accepted,
                           int(min(lo for _, lo, _ in stats.values())) if accepted else None,
                           int(max(hi for _, _, hi in stats.values())) if accepted else None,
                           n_quarantined)

    def _stage(self, raw: DataFrame, batch_id: int, state: ReplayState,
               fields: Observation | None, bad_files: DataFrame | None = None) -> None:
        """The staging pass of a micro-batch's raw records
        (``pipelines.spark.staging_pass.stage_batch``: the rules, key hashes and
        ``input.pseudonymize`` in the one Python pass that writes the staged files, partitioned
        by topic bin so the control plane reads a bin alone). The records it rejects or finds
        late are written with ``bad_files`` (salvage's rows) by :meth:`_write_quarantine`.
        ``fields``: the mapped records' metrics (``pipelines.spark.ingest.map_records``)."""
        plan = StagingPlan(self.input_spec, state.horizon_ms, state.finalized,
                           self.pseudonymize, self.topic_bins)
        records = map_records(raw, self.input_spec, fields)

        def take(verdicts: DataFrame) -> None:
            self._write_quarantine(verdicts, batch_id, bad_files)

        if bad_files is None and self._stage_files(raw, records, batch_id, plan, take):
            return
        stage_batch(records, self.staging, batch_id, plan, take)

    def _stage_files(self, raw: DataFrame, records: DataFrame, batch_id: int,
                     plan: StagingPlan, take: Callable[[DataFrame], None]) -> bool:
        """A Parquet micro-batch staged from its files, read by the tasks themselves
        (``pipelines.spark.staging_pass.stage_files``; its files from the query's source log);
        ``False`` when it was not (another format, a mapping Spark SQL evaluates, a file it
        does not read): then Spark's reader ships the rows."""
        if self.input_spec.format != "parquet" or "record" not in raw.columns:
            return False
        files = micro_batch_files(self.spark, self.checkpoint, batch_id)
        names = list(raw.schema["record"].dataType.names)  # type: ignore[attr-defined]
        return stage_files(records, files, names, self.staging, batch_id, plan, take)

    def _check_fields(self, parsed: Observation, batch_id: int, state: ReplayState) -> None:
        """JSON only, on the first micro-batch with records: each mapped field of
        ``input_spec.checked_sources()`` that no record has (absent or null in all of them:
        ``map_records``' ``present_<column>`` metrics) is reported on the console and kept in
        ``state.missing_fields`` (the ``runs`` counts, the run summary). Such a field reads as
        null: a typo in ``input.columns`` would otherwise make, e.g., every message keyless."""
        sources = self.input_spec.checked_sources()
        if self.input_spec.format != "json" or not sources:
            state.fields_checked = True
            return
        try:
            seen = parsed.get
        except Exception:  # py4j: no metrics row (the plan lost the node); try the next batch
            return
        if not seen.get("records"):
            return
        state.fields_checked = True
        missing = tuple((c, s) for c, s in sources.items()
                        if seen.get(f"{PRESENT_PREFIX}{c}") == 0)
        state.missing_fields = missing
        for c, s in missing:
            self.progress(f"batch {batch_id}: warning: no record has field {s!r} (mapped to "
                          f"{c}); {c} is null for every message — check input.columns")

    def _quarantine_dir(self, batch_id: int) -> str:
        """Where micro-batch ``batch_id``'s quarantined records wait for their commit."""
        return storage.join(self.work_dir, "quarantine", str(batch_id))

    def _write_quarantine(self, verdicts: DataFrame, batch_id: int,
                          bad_files: DataFrame | None) -> None:
        """Run the staging pass of micro-batch ``batch_id`` (``verdicts``: its rows of rejected
        and late records, kept on the executors: one job, and the pass runs once) and write
        those records, with ``bad_files``, as ``quarantine`` rows (``source_file``,
        ``raw_record``, ``reason``; ``pipelines.spark.ingest.quarantine_rows``) in Parquet under
        :meth:`_quarantine_dir`, by the executors (the driver never holds the rows), replacing
        what is there; nothing to quarantine: no folder (a crashed run's is removed), no second
        job. ``output.quarantine_raw: false``: a record's ``raw_record`` is ``sha256:<hex>`` of
        its text (:func:`pipelines.ingest.privacy.record_digest`); a file's keeps its read error."""
        counted = Observation()
        kept = verdicts.observe(counted, F.count(F.lit(1)).alias("rows")).localCheckpoint()
        if bad_files is None and _observed(counted, "rows") == 0:
            storage.delete_dir(self._quarantine_dir(batch_id))
            return
        q = quarantine_rows(kept, self.input_spec)
        q = q if bad_files is None else q.unionByName(bad_files)
        if not self.config.output.quarantine_raw:  # only a digest of each record's text
            raw = F.col("raw_record")
            q = q.withColumn("raw_record", F.when(F.col("reason").isin(*FILE_REASONS), raw)
                             .otherwise(F.concat(F.lit(DIGEST_PREFIX), F.sha2(raw, 256))))
        q.withColumn("batch_id", F.lit(batch_id).cast("long")).write.mode("overwrite").parquet(
            self._quarantine_dir(batch_id))

    def _commit_quarantine(self, batch_id: int) -> tuple[int, int]:
        """Commit the files :meth:`_write_quarantine` wrote for micro-batch ``batch_id`` to the
        ``quarantine`` table (each run's), then remove them. Returns ``(records, late
        records)``."""
        path = self._quarantine_dir(batch_id)
        n = storage.count_rows(path)  # counted first: committing moves the files
        late = storage.count_rows(path, pc.field("reason") == LATE) if n else 0
        if n:
            self.commits.shared_files("quarantine", path, self.run_ids, batch_id)
        storage.delete_dir(path)
        return n, late

    def _salvage(self, raw: DataFrame, batch_id: int, state: ReplayState,
                 exc: Exception) -> tuple[DataFrame, DataFrame]:
        """After micro-batch ``batch_id`` failed: re-read its files one by one
        (:func:`pipelines.spark.ingest.salvage_files`); re-raises ``exc`` when every file reads
        (the failure was not a file's). Reports each bad file with its path."""
        files = micro_batch_files(self.spark, self.checkpoint, batch_id)
        if not files:
            raise exc
        salvaged, bad = salvage_files(self.spark, files, self.input_spec.format, raw.schema)
        rows = bad.collect()
        if not rows:
            raise exc
        for r in rows:
            self.progress(f"batch {batch_id}: "
                          + bad_file_line(r["source_file"], r["reason"], r["raw_record"]))
        state.add("bad_files", len(rows))
        return salvaged, bad


def _observed(observation: Observation, name: str) -> int | None:
    """Metric ``name`` of an ``observation`` whose action has run; ``None`` when the plan lost
    it (AQE drops the node when it prunes an empty stage: py4j finds no metrics row)."""
    try:
        value = observation.get.get(name)
    except Exception:  # py4j: no metrics row for this observation
        return None
    return None if value is None else int(value)


def _staged_keyless(staging: str, batch_id: int) -> int:
    """Keyless messages (null ``key``) staged by micro-batch ``batch_id``, from the staged
    files' footer statistics (the column is read when a writer left none)."""
    n = 0
    for pf in staged_files(f"{staging.rstrip('/')}/batch_id={batch_id}"):
        col = pf.schema_arrow.get_field_index("key")
        for i in range(pf.metadata.num_row_groups):
            st = pf.metadata.row_group(i).column(col).statistics
            if st is not None and st.has_null_count:
                n += int(st.null_count)
            else:
                n += pf.read_row_group(i, columns=["key"]).column(0).null_count
    return n
