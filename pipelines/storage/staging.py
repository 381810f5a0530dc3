"""The staged messages: a replay's accepted messages as Parquet files under
``<staging>/batch_id=<k>/topic_sha1=<sha1 of the topic>/``, with their key hashes, so that the
emulation reads one topic's window alone (:func:`read_staged`, :func:`read_topic`). A task
writes its files with :class:`StagingWriter`; :func:`stage_partition` is one task of the staging
pass (the input rules of :mod:`pipelines.ingest.rules`, then the staging), which the Spark
replay runs in ``mapInArrow`` (:mod:`pipelines.spark.staging_pass`). The footers' statistics
(:func:`staged_batch_stats`, :func:`staged_histogram`) plan the windows without reading data.
No Spark."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.ingest.privacy import Pseudonymizer
from pipelines.ingest.rules import (
    ingest_batches,
    key_hashes_arrow,
    late_rows,
    minutes_misplaced,
    verdict_rows,
)
from pipelines.storage.fs import arrow_filesystem

STAGE_INPUT_COLUMNS = ["topic", "key", "producer_name", "sequence_id", "publish_time",
                       "payload_size", "event_ms", "hash32", "segment_hash", "hash_b"]
"""Accepted-message columns the emulation reads (``source_file`` is not shipped)."""


STAGING_TOPIC_COLUMN = "topic_sha1"
"""Partition column of the staged messages (``<staging>/batch_id=<k>/topic_sha1=<hex>/``): the
SHA-1 hex of the topic name, a folder name for any topic, so a task reads only its topic."""


STAGING_ROW_GROUP_ROWS = 65_536
"""Rows per row group of the staged messages (about 4 MiB). Input is roughly in time order, so
small row groups let :func:`read_staged` skip, by their ``event_ms`` statistics, the part of a
micro-batch outside the window (one row group per file would make every window overlapping a
micro-batch read all of it)."""

KEY_HASH_COLUMNS = ("hash32", "segment_hash", "hash_b")
"""Staged columns the staging writer adds (``pipelines.ingest.rules.key_hashes_arrow`` of
``key``)."""

STAGING_SOURCE_COLUMNS = [c for c in STAGE_INPUT_COLUMNS if c not in KEY_HASH_COLUMNS]
"""Accepted-message columns :class:`StagingWriter` takes (the columns of
``pipelines.ingest.rules.ACCEPTED_FIELDS``; the hashes are added as the files are written)."""


def topic_digest(topic: str) -> str:
    """SHA-1 hex of ``topic``'s UTF-8 bytes (Spark's ``sha1(topic)``)."""
    return hashlib.sha1(topic.encode("utf-8")).hexdigest()


def read_staged(staging: str, topic: str, lo_ms: int | None, hi_ms: int | None) -> pd.DataFrame:
    """One topic's staged messages with ``lo_ms <= event_ms < hi_ms`` (``None``: unbounded).

    ``staging``: the folder the replay stages accepted messages to, partitioned by
    ``batch_id`` and :data:`STAGING_TOPIC_COLUMN`. Read with pyarrow (the topic's folders only;
    row groups outside the window are skipped by their ``event_ms`` statistics). Returns the
    :data:`STAGE_INPUT_COLUMNS` in file order (the stages sort; strings as
    ``pd.ArrowDtype(pa.string())``, which the stages take as they take object strings); no
    rows when none match."""
    return read_topic(staged_dataset(staging), topic, lo_ms, hi_ms)


class StagingWriter:
    """One task's staged Parquet files of a micro-batch: :meth:`add` accepted messages (any
    topics, any order), then :meth:`close`.

    Each added batch gets the key hashes (:data:`KEY_HASH_COLUMNS`, from
    ``pipelines.ingest.rules.key_hashes_arrow``, the one hashing function) and goes, split by
    topic, to ``<folder>/<STAGING_TOPIC_COLUMN>=<topic_digest>/part-<part:05d>.parquet`` in row
    groups of :data:`STAGING_ROW_GROUP_ROWS` (a file's last one smaller). Each file is written
    under a hidden temporary name and moved into place by :meth:`close`, so a retried task
    replaces it whole (readers skip hidden files). ``pseudonymize`` (``input.pseudonymize``):
    its columns are replaced by their pseudonyms once the key hashes are computed (routing is
    unchanged; no raw value is staged). pyarrow's C++ writer, on the Python worker that hashes
    the keys: about half the time of Spark's Parquet writer here."""

    def __init__(self, folder: str, part: int, pseudonymize: Pseudonymizer | None = None) -> None:
        self.fs, self.root = arrow_filesystem(folder)
        self.part = part
        self.pseudonymize = pseudonymize
        self.pending: dict[str, list[Any]] = {}
        self.counts: dict[str, int] = {}
        self.writers: dict[str, tuple[Any, str]] = {}

    def add(self, records: Any) -> None:
        """Stage a pyarrow ``RecordBatch`` of :data:`STAGING_SOURCE_COLUMNS`."""
        if not records.num_rows:
            return
        hashes = key_hashes_arrow(records.column("key"))
        records = pa.RecordBatch.from_arrays(
            [*records.columns, *[hashes.field(c) for c in KEY_HASH_COLUMNS]],
            names=[*records.schema.names, *KEY_HASH_COLUMNS])
        if self.pseudonymize is not None:  # after hashing: the emulation's answers do not change
            records = self.pseudonymize.batch(records)
        codes = records.column("topic").dictionary_encode()
        order = np.argsort(codes.indices.to_numpy(zero_copy_only=False), kind="stable")
        cuts = np.cumsum(np.bincount(codes.indices.to_numpy(zero_copy_only=False)))
        by_topic = records.take(pa.array(order))
        for topic, hi, lo in zip(codes.dictionary.to_pylist(), cuts, [0, *cuts[:-1]],
                                 strict=True):
            self.pending.setdefault(topic, []).append(by_topic.slice(lo, hi - lo))
            self.counts[topic] = self.counts.get(topic, 0) + int(hi - lo)
            if sum(b.num_rows for b in self.pending[topic]) >= STAGING_ROW_GROUP_ROWS:
                self._flush(topic, last=False)

    def close(self) -> dict[str, int]:
        """Write what is pending, move every file into place; returns topic → messages."""
        for topic in list(self.pending):
            self._flush(topic, last=True)
        for writer, target in self.writers.values():
            writer.close()
            self.fs.move(_hidden(target), target)
        return self.counts

    def _flush(self, topic: str, last: bool) -> None:
        """Write the topic's pending rows as whole row groups (all of them when ``last``)."""
        size = STAGING_ROW_GROUP_ROWS
        table = pa.Table.from_batches(self.pending.pop(topic))
        rows = table.num_rows if last else table.num_rows // size * size
        if rows < table.num_rows:
            self.pending[topic] = table.slice(rows).to_batches()
        if topic not in self.writers:
            target = (f"{self.root}/{STAGING_TOPIC_COLUMN}={topic_digest(topic)}/"
                      f"part-{self.part:05d}.parquet")
            self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            # dictionaries only where they pay (a topic and its producers: few values); for
            # keys, times and hashes they cost 40 % of the write and save no space here
            self.writers[topic] = (pq.ParquetWriter(_hidden(target), table.schema,
                                                    filesystem=self.fs,
                                                    use_dictionary=["topic", "producer_name"]),
                                   target)
        self.writers[topic][0].write_table(table.slice(0, rows), row_group_size=size)


def _hidden(target: str) -> str:
    """The temporary name a staged file is written under (hidden: readers skip it)."""
    return target.replace("/part-", "/.part-") + ".tmp"


def write_staging(batches: Iterable[Any], folder: str, part: int,
                  pseudonymize: Pseudonymizer | None = None) -> dict[str, int]:
    """Write one task's accepted messages (pyarrow ``RecordBatch``es of
    :data:`STAGING_SOURCE_COLUMNS`) as staged Parquet under ``folder`` with a
    :class:`StagingWriter`; returns topic → messages written."""
    writer = StagingWriter(folder, part, pseudonymize)
    for records in batches:
        writer.add(records)
    return writer.close()


def staged_files(folder: str) -> Iterator[Any]:
    """Open pyarrow ``ParquetFile``s of the staged files under ``folder`` (recursively, path
    order; hidden and temporary files skipped), one at a time."""

    fs, path = arrow_filesystem(folder)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    for info in sorted(infos, key=lambda i: i.path):
        name = info.base_name
        if (info.type != pafs.FileType.File or not name.endswith(".parquet")
                or name.startswith((".", "_"))):
            continue
        with fs.open_input_file(info.path) as f:
            yield pq.ParquetFile(f)


def _event_ms_ranges(pf: Any) -> Iterator[tuple[int, int, int]]:
    """``(row group, min event_ms, max event_ms)`` of each non-empty row group of a staged
    file, from its footer statistics (the column is read when a writer left none)."""

    col = pf.schema_arrow.get_field_index("event_ms")
    for i in range(pf.metadata.num_row_groups):
        group = pf.metadata.row_group(i)
        if not group.num_rows:
            continue
        st = group.column(col).statistics
        if st is not None and st.has_min_max:
            yield i, int(st.min), int(st.max)
        else:
            mm = pc.min_max(pf.read_row_group(i, columns=["event_ms"]).column(0))
            yield i, mm["min"].as_py(), mm["max"].as_py()


def staged_batch_stats(staging: str, batch_id: int) -> dict[str, tuple[int, int, int]]:
    """Micro-batch ``batch_id``'s staged messages per topic: ``(messages, min event_ms, max
    event_ms)``, from the Parquet footers of its files under ``staging`` (row counts and
    ``event_ms`` statistics; the topic's name from one value of its ``topic`` column), so no
    data is read. Topics without messages are absent; ``{}`` when nothing was staged."""
    out: dict[str, tuple[int, int, int]] = {}
    for pf in staged_files(f"{staging.rstrip('/')}/batch_id={batch_id}"):
        topic = None  # one topic per file (its folder): read one value of it
        for i, lo, hi in _event_ms_ranges(pf):
            if topic is None:
                topic = pf.read_row_group(i, columns=["topic"]).column(0)[0].as_py()
            n, lo0, hi0 = out.get(topic, (0, lo, hi))
            out[topic] = (n + pf.metadata.row_group(i).num_rows, min(lo, lo0), max(hi, hi0))
    return out


def staged_histogram(staging: str, bins: int) -> tuple[int, int, npt.NDArray[Any]] | None:
    """Every staged message's ``event_ms`` (all batches under ``staging``) counted in ``bins``
    equal bins: ``(lo, width, counts)`` — bin ``i`` holds ``lo + i * width <= event_ms <
    lo + (i + 1) * width`` (``lo`` the smallest ``event_ms``, ``width = (max - lo) // bins +
    1``); ``counts``: int64 array of length ``bins``. ``None`` when nothing is staged. The
    range comes from the footers' statistics, the counts from one row group's ``event_ms``
    at a time, read on this thread: memory does not grow with the messages (a dataset scan's
    read-ahead left the driver 95 MB larger at 10 M messages)."""
    ranges = [(lo, hi) for pf in staged_files(staging) for _, lo, hi in _event_ms_ranges(pf)]
    if not ranges:
        return None
    lo = min(r[0] for r in ranges)
    width = (max(r[1] for r in ranges) - lo) // bins + 1
    counts = np.zeros(bins, dtype=np.int64)
    for pf in staged_files(staging):
        for i, _, _ in _event_ms_ranges(pf):
            values = pf.read_row_group(i, columns=["event_ms"], use_threads=False).column(0)
            counts += np.bincount((values.to_numpy() - lo) // width, minlength=bins)
    return lo, width, counts


def staged_dataset(staging: str) -> Any:
    """The staging folder as a pyarrow dataset (its files listed once)."""

    fs, path = arrow_filesystem(staging)
    partitioning = ds.partitioning(
        pa.schema([("batch_id", pa.int64()), (STAGING_TOPIC_COLUMN, pa.string())]),
        flavor="hive")
    return ds.dataset(path, filesystem=fs, format="parquet", partitioning=partitioning)


def read_topic(dataset: Any, topic: str, lo_ms: int | None, hi_ms: int | None) -> pd.DataFrame:
    where = pc.field(STAGING_TOPIC_COLUMN) == topic_digest(topic)
    if lo_ms is not None:
        where = where & (pc.field("event_ms") >= lo_ms)
    if hi_ms is not None:
        where = where & (pc.field("event_ms") < hi_ms)
    # Strings stay Arrow arrays (pandas ArrowDtype): the stages only take, sort and factorize
    # them, and the output files are Arrow again, so no Python object per key and producer
    # is made and converted back (a fifth of a busy topic's read and write time). One chunk
    # per column: taking rows across a chunk per row group is several times slower.
    return dataset.to_table(columns=STAGE_INPUT_COLUMNS, filter=where).combine_chunks().to_pandas(
        types_mapper=arrow_strings)


def arrow_strings(t: Any) -> Any:
    """``to_pandas`` types mapper: Arrow strings → ``pd.ArrowDtype`` (others as pyarrow does)."""

    return pd.ArrowDtype(t) if pa.types.is_string(t) else None


MISPLACED_MARK = "_minutes_misplaced"
"""File a task of the staging pass (:func:`stage_partition`) leaves in the micro-batch's staging
folder when a record's minute hint was not its publish-time minute (the spreading must be redone
in one task)."""


@dataclass(frozen=True)
class StagingPlan:
    """What a micro-batch's staging pass applies (picklable: it travels to the tasks).

    ``spec``: the ``InputSpec`` (the rules' settings); ``horizon_ms`` (emulated ms) /
    ``finalized``: which accepted records are late (``pipelines.ingest.rules.late_rows``);
    ``pseudonymize``: see :class:`StagingWriter`."""

    spec: Any
    horizon_ms: int | None = None
    finalized: bool = False
    pseudonymize: Pseudonymizer | None = None


def stage_partition(batches: Iterable[pa.RecordBatch], plan: StagingPlan, folder: str, part: int,
                    check_minutes: bool = False) -> Iterator[pa.RecordBatch]:
    """One task of the staging pass: the rules (``pipelines.ingest.rules.ingest_batches``) on
    ``batches`` (mapped records), the accepted messages that are not late staged under
    ``folder`` as ``part`` (:class:`StagingWriter`); yields the rejected and the late records
    (``pipelines.ingest.rules.verdict_rows``). ``check_minutes``: the records were spread over
    the tasks by their minute hint; a hint that is not its record's minute
    (``pipelines.ingest.rules.minutes_misplaced``) leaves the :data:`MISPLACED_MARK` file and
    stages and yields nothing."""
    writer = StagingWriter(folder, part, plan.pseudonymize)
    for records, verdict in ingest_batches(batches, plan.spec):
        if check_minutes and minutes_misplaced(records, verdict):
            _mark_misplaced(folder)
            return
        late = late_rows(verdict, plan.horizon_ms, plan.finalized)
        staged = verdict.accepted.filter(pa.array(~late)) if late.any() else verdict.accepted
        for accepted in staged.to_batches():
            writer.add(accepted)
        if late.any() or len(verdict.rejected_rows):
            yield verdict_rows(records, verdict, late)
    writer.close()


def _mark_misplaced(folder: str) -> None:
    fs, path = arrow_filesystem(folder)
    fs.create_dir(path, recursive=True)
    fs.open_output_stream(f"{path}/{MISPLACED_MARK}").close()
