"""The staged messages: a replay's accepted messages as Parquet files under
``<staging>/batch_id=<k>/topic_bin=<bin of the topic>/``, with their key hashes, so that the
emulation reads one topic bin's window alone (:func:`read_bin`; :func:`read_staged` for one
topic). A task writes one file per bin with :class:`StagingWriter` (per-topic counts and
event-time ranges in its footer's metadata, :data:`TOPIC_STATS_KEY`): the files grow with bins
and tasks, not with topics; :func:`stage_partition` is one task of the staging
pass (the input rules of :mod:`pipelines.ingest.rules`, then the staging), which the Spark
replay runs in ``mapInArrow`` (:mod:`pipelines.spark.staging_pass`). The footers' statistics
(:func:`staged_batch_stats`, :func:`staged_histogram`) plan the windows without reading data.
No Spark."""

from __future__ import annotations

import hashlib
import json
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

from pipelines.core.sorting import stable_argsort
from pipelines.ingest.privacy import Pseudonymizer
from pipelines.ingest.rules import (
    ingest_batches,
    key_hashes_arrow,
    late_rows,
    minutes_misplaced,
    verdict_rows,
)
from pipelines.storage.delta_format import delta_packed
from pipelines.storage.fs import arrow_filesystem

STAGE_INPUT_COLUMNS = ["topic", "key", "producer_name", "sequence_id", "publish_time",
                       "payload_size", "event_ms", "hash32", "segment_hash", "hash_b"]
"""Accepted-message columns the emulation reads (``source_file`` is not shipped)."""


STAGING_TOPIC_COLUMN = "topic_bin"
"""Partition column of the staged messages (``<staging>/batch_id=<k>/topic_bin=<b>/``): the
topic's bin (:func:`topic_bin`), so an emulation task reads only its bin's topics."""

TOPIC_STATS_KEY = b"topic_replay.topics"
"""Key of a staged file's footer metadata: JSON ``{topic: [messages, min event_ms, max
event_ms]}`` of the file's topics (:func:`staged_batch_stats` reads it, no data)."""

PRODUCER_STATS_KEY = b"topic_replay.producers"
"""Key of a staged file's footer metadata: JSON ``{topic: {producer_name: messages}}`` of the
file's messages, ``null`` when its bin has more than :data:`PRODUCERS_COUNTED_MAX` (topic,
producer) pairs (:func:`staged_producers` reads it, no data)."""

PRODUCERS_COUNTED_MAX = 256
"""(topic, producer) pairs counted per topic bin at most. The counts place a bin's producers
on its shards (``pipelines.spark.placement.balanced_producers``): few producers hash to
shards unevenly (the 10 M bench's 20 producers of a topic fell 3, 4, 7 and 6 to 4 shards),
many evenly enough, and counting them would cost what they cost (10,000 topics: 20,000
pairs)."""


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


def topic_bin(topic: str, bins: int) -> int:
    """The topic's bin, ``0 <= b < bins``: the first 60 bits of its SHA-1 modulo ``bins`` (the
    same in every process and on every machine)."""
    return int(topic_digest(topic)[:15], 16) % bins


def read_staged(staging: str, topic: str, lo_ms: int | None, hi_ms: int | None) -> pd.DataFrame:
    """One topic's staged messages with ``lo_ms <= event_ms < hi_ms`` (``None``: unbounded).

    ``staging``: the folder the replay stages accepted messages to, partitioned by
    ``batch_id`` and :data:`STAGING_TOPIC_COLUMN`. Read with pyarrow (row groups outside the
    window are skipped by their ``event_ms`` statistics). Returns the
    :data:`STAGE_INPUT_COLUMNS` in file order (the stages sort): ``topic`` and
    ``producer_name`` as ``pd.Categorical`` (:data:`CODED_COLUMNS`), the keys as
    ``pd.ArrowDtype(pa.string())``, which the stages take as they take object strings; no
    rows when none match."""
    return _read(staged_dataset(staging), pc.field("topic") == topic, lo_ms, hi_ms)


class StagingWriter:
    """One task's staged Parquet files of a micro-batch: :meth:`add` accepted messages (any
    topics, any order), then :meth:`close`.

    Each added batch gets the key hashes (:data:`KEY_HASH_COLUMNS`, from
    ``pipelines.ingest.rules.key_hashes_arrow``, the one hashing function) and goes, split by
    topic bin (:func:`topic_bin` of ``bins``), to ``<folder>/<STAGING_TOPIC_COLUMN>=<bin>/
    part-<part:05d>.parquet`` in row groups of :data:`STAGING_ROW_GROUP_ROWS` (a file's last one
    smaller); the file's footer holds its topics' counts and event-time ranges
    (:data:`TOPIC_STATS_KEY`) and their producers' counts (:data:`PRODUCER_STATS_KEY`). Each
    file is written under a hidden temporary name and moved into place by :meth:`close`, so a
    retried task replaces it whole (readers skip hidden files).
    ``pseudonymize`` (``input.pseudonymize``): its columns are replaced by their pseudonyms once
    the key hashes are computed (routing is unchanged; no raw value is staged). pyarrow's C++
    writer, on the Python worker that hashes the keys: about half the time of Spark's Parquet
    writer here."""

    def __init__(self, folder: str, part: int, pseudonymize: Pseudonymizer | None = None,
                 bins: int = 1) -> None:
        self.fs, self.root = arrow_filesystem(folder)
        self.part = part
        self.pseudonymize = pseudonymize
        self.bins = bins
        self.pending: dict[int, list[Any]] = {}
        self.counts: dict[str, int] = {}
        self.stats: dict[int, dict[str, list[int]]] = {}
        self.producers: dict[int, dict[str, dict[str, int]] | None] = {}
        self.pairs: dict[int, int] = {}  # (topic, producer) pairs counted per bin
        self.writers: dict[int, tuple[Any, str]] = {}

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
        topics = codes.dictionary.to_pylist()
        indices = codes.indices.to_numpy(zero_copy_only=False)
        self._count(topics, indices, records.column("event_ms").to_numpy(zero_copy_only=False))
        bin_of = np.array([topic_bin(t, self.bins) for t in topics], dtype=np.int64)
        self._count_producers(topics, bin_of, indices, records.column("producer_name"))
        row_bins = bin_of[indices]
        order = stable_argsort(row_bins)
        cuts = np.searchsorted(row_bins[order], np.arange(self.bins + 1))
        by_bin = records.take(pa.array(order))
        for b in np.flatnonzero(np.diff(cuts)).tolist():
            lo, hi = int(cuts[b]), int(cuts[b + 1])
            self.pending.setdefault(b, []).append(by_bin.slice(lo, hi - lo))
            if sum(x.num_rows for x in self.pending[b]) >= STAGING_ROW_GROUP_ROWS:
                self._flush(b, last=False)

    def _count(self, topics: list[str], indices: npt.NDArray[Any],
               event_ms: npt.NDArray[Any]) -> None:
        """Add a batch's messages to each topic's count and event-time range."""
        n = np.bincount(indices, minlength=len(topics))
        lo = np.full(len(topics), np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(len(topics), np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(lo, indices, event_ms)
        np.maximum.at(hi, indices, event_ms)
        for i, topic in enumerate(topics):
            self.counts[topic] = self.counts.get(topic, 0) + int(n[i])
            per_bin = self.stats.setdefault(topic_bin(topic, self.bins), {})
            have = per_bin.get(topic)
            per_bin[topic] = ([int(n[i]), int(lo[i]), int(hi[i])] if have is None else
                              [have[0] + int(n[i]), min(have[1], int(lo[i])),
                               max(have[2], int(hi[i]))])

    def _count_producers(self, topics: list[str], bin_of: npt.NDArray[np.int64],
                         indices: npt.NDArray[Any], producers: Any) -> None:
        """Add a batch's messages to each (topic, producer)'s count in its bin (``bin_of``:
        each topic's), one count of the pairs' codes; a bin past
        :data:`PRODUCERS_COUNTED_MAX` pairs is no longer counted (``None``)."""
        coded = producers if pa.types.is_dictionary(producers.type) else \
            producers.dictionary_encode()
        # not every bin can stay under: the names are not even read
        if len(coded.dictionary) > PRODUCERS_COUNTED_MAX * self.bins:
            for b in set(bin_of.tolist()):
                self.producers[b] = None
            return
        names = coded.dictionary.to_pylist()
        pair = indices.astype(np.int64) * len(names) + \
            coded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        seen, counts = np.unique(pair, return_counts=True)
        for p, n in zip(seen.tolist(), counts.tolist(), strict=True):
            t = p // len(names)
            b = int(bin_of[t])
            if b in self.producers and self.producers[b] is None:
                continue
            mine = self.producers.setdefault(b, {})
            assert mine is not None
            have = mine.setdefault(topics[t], {})
            name = names[p % len(names)]
            if name not in have:
                self.pairs[b] = self.pairs.get(b, 0) + 1
            have[name] = have.get(name, 0) + n
            if self.pairs[b] > PRODUCERS_COUNTED_MAX:
                self.producers[b] = None

    def close(self) -> dict[str, int]:
        """Write what is pending, move every file into place; returns topic → messages."""
        for b in list(self.pending):
            self._flush(b, last=True)
        for b, (writer, target) in self.writers.items():
            writer.add_key_value_metadata(
                {TOPIC_STATS_KEY: json.dumps(self.stats.get(b, {}), sort_keys=True),
                 PRODUCER_STATS_KEY: json.dumps(self.producers.get(b), sort_keys=True)})
            writer.close()
            self.fs.move(_hidden(target), target)
        return self.counts

    def _flush(self, b: int, last: bool) -> None:
        """Write the bin's pending rows as whole row groups (all of them when ``last``)."""
        size = STAGING_ROW_GROUP_ROWS
        table = pa.Table.from_batches(self.pending.pop(b))
        rows = table.num_rows if last else table.num_rows // size * size
        if rows < table.num_rows:
            self.pending[b] = table.slice(rows).to_batches()
        if b not in self.writers:
            target = f"{self.root}/{STAGING_TOPIC_COLUMN}={b}/part-{self.part:05d}.parquet"
            self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            # dictionaries only where they pay (a topic and its producers: few values); for
            # keys, times and hashes they cost 40 % of the write and save no space here.
            # lz4 and delta-packed sequences, times and sizes: the busiest bin of the 10 M
            # bench read in 0.84 s instead of 1.17 s (snappy, plain), written as fast,
            # 84 MB instead of 124 MB. Statistics of event_ms only, the one column windows
            # are read by: the others' (key strings, hashes) cost the 10 M bench's staging
            # 2.0 → 1.7 CPU s of writes and no reader uses them.
            self.writers[b] = (pq.ParquetWriter(
                _hidden(target), table.schema, filesystem=self.fs, compression="lz4",
                use_dictionary=["topic", "producer_name"],
                column_encoding=delta_packed(table.schema),
                write_statistics=["event_ms"]),
                target)
        self.writers[b][0].write_table(table.slice(0, rows), row_group_size=size)


def _hidden(target: str) -> str:
    """The temporary name a staged file is written under (hidden: readers skip it)."""
    return target.replace("/part-", "/.part-") + ".tmp"


def write_staging(batches: Iterable[Any], folder: str, part: int,
                  pseudonymize: Pseudonymizer | None = None, bins: int = 1) -> dict[str, int]:
    """Write one task's accepted messages (pyarrow ``RecordBatch``es of
    :data:`STAGING_SOURCE_COLUMNS`) as staged Parquet under ``folder`` with a
    :class:`StagingWriter` (``bins`` topic bins); returns topic → messages written."""
    writer = StagingWriter(folder, part, pseudonymize, bins)
    for records in batches:
        writer.add(records)
    return writer.close()


def staged_files(folder: str) -> Iterator[Any]:
    """Open pyarrow ``ParquetFile``s of the staged files under ``folder`` (recursively, path
    order; hidden and temporary files skipped), one at a time."""
    for _, pf in _staged_files_with_bins(folder):
        yield pf


def _staged_files_with_bins(folder: str) -> Iterator[tuple[int, Any]]:
    """:func:`staged_files` with each file's topic bin (its ``topic_bin=<b>`` folder; -1 for a
    file outside one)."""

    fs, path = arrow_filesystem(folder)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    for info in sorted(infos, key=lambda i: i.path):
        name = info.base_name
        if (info.type != pafs.FileType.File or not name.endswith(".parquet")
                or name.startswith((".", "_"))):
            continue
        part = f"/{STAGING_TOPIC_COLUMN}="
        b = (int(info.path.rsplit(part, 1)[1].split("/", 1)[0]) if part in info.path else -1)
        with fs.open_input_file(info.path) as f:
            yield b, pq.ParquetFile(f)


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
    event_ms)``, from the footers of its files under ``staging`` (:data:`TOPIC_STATS_KEY`), so
    no data is read. Topics without messages are absent; ``{}`` when nothing was staged."""
    out: dict[str, tuple[int, int, int]] = {}
    for pf in staged_files(f"{staging.rstrip('/')}/batch_id={batch_id}"):
        meta = pf.metadata.metadata or {}
        for topic, (n, lo, hi) in json.loads(meta.get(TOPIC_STATS_KEY, b"{}")).items():
            n0, lo0, hi0 = out.get(topic, (0, lo, hi))
            out[topic] = (n0 + n, min(lo, lo0), max(hi, hi0))
    return out


def staged_producers(staging: str) -> dict[int, dict[str, dict[str, int]] | None]:
    """Every staged message's (all batches under ``staging``) count per topic bin, topic and
    producer, ``{bin: {topic: {producer_name: messages}}}``, from the footers of the staged
    files (:data:`PRODUCER_STATS_KEY`), so no data is read; a bin is ``None`` when one of its
    files did not count them or it has more than :data:`PRODUCERS_COUNTED_MAX` pairs.
    ``{}`` when nothing was staged."""
    out: dict[int, dict[str, dict[str, int]] | None] = {}
    for b, pf in _staged_files_with_bins(staging):
        meta = pf.metadata.metadata or {}
        counted = json.loads(meta[PRODUCER_STATS_KEY]) if PRODUCER_STATS_KEY in meta else None
        mine = out.setdefault(b, {})
        if counted is None or mine is None:
            out[b] = None
            continue
        for topic, counts in counted.items():
            have = mine.setdefault(topic, {})
            for name, n in counts.items():
                have[name] = have.get(name, 0) + int(n)
        if sum(map(len, mine.values())) > PRODUCERS_COUNTED_MAX:
            out[b] = None
    return out


def staged_histogram(staging: str, bins: int) -> tuple[int, int, npt.NDArray[Any]] | None:
    """Every staged message's ``event_ms`` (all batches under ``staging``) counted in ``bins``
    equal time bins per topic bin: ``(lo, width, counts)`` — time bin ``i`` holds ``lo + i *
    width <= event_ms < lo + (i + 1) * width`` (``lo`` the smallest ``event_ms``, ``width =
    (max - lo) // bins + 1``); ``counts``: int64 array of shape ``(topic bins, bins)``, a row
    per topic bin with staged files, in bin order. ``None`` when nothing is staged. The range
    comes from the footers' statistics, the counts from one row group's ``event_ms`` at a
    time, read on this thread: memory does not grow with the messages (a dataset scan's
    read-ahead left the driver 95 MB larger at 10 M messages)."""
    ranges = [(lo, hi) for _, pf in _staged_files_with_bins(staging)
              for _, lo, hi in _event_ms_ranges(pf)]
    if not ranges:
        return None
    lo = min(r[0] for r in ranges)
    width = (max(r[1] for r in ranges) - lo) // bins + 1
    rows: dict[int, npt.NDArray[np.int64]] = {}
    for b, pf in _staged_files_with_bins(staging):
        for i, _, _ in _event_ms_ranges(pf):
            values = pf.read_row_group(i, columns=["event_ms"], use_threads=False).column(0)
            row = rows.setdefault(b, np.zeros(bins, dtype=np.int64))
            row += np.bincount((values.to_numpy() - lo) // width, minlength=bins)
    return lo, width, np.stack([rows[b] for b in sorted(rows)])


CODED_COLUMNS = ("topic", "producer_name")
"""Staged string columns read as their Parquet dictionaries (a code per row and each value
once; pandas ``Categorical``): a window's topics and producers are a few values over hundreds
of thousands of messages. Decoded into a string per row, the busiest bin of the 10 M bench
(3.6 M messages) read in 1.55 s instead of 0.21 s, and the stages then hashed the strings
again to code them (the control plane's sort and shards, batching's producers)."""


def staged_dataset(staging: str) -> Any:
    """The staging folder as a pyarrow dataset (its files listed once; :data:`CODED_COLUMNS`
    read as dictionaries)."""

    fs, path = arrow_filesystem(staging)
    partitioning = ds.partitioning(
        pa.schema([("batch_id", pa.int64()), (STAGING_TOPIC_COLUMN, pa.int64())]),
        flavor="hive")
    coded = ds.ParquetFileFormat(
        read_options=ds.ParquetReadOptions(dictionary_columns=list(CODED_COLUMNS)))
    return ds.dataset(path, filesystem=fs, format=coded, partitioning=partitioning)


def read_bin(dataset: Any, b: int, lo_ms: int | None, hi_ms: int | None) -> pd.DataFrame:
    """Topic bin ``b``'s staged messages (every topic of it) with ``lo_ms <= event_ms <
    hi_ms`` from :func:`staged_dataset` (only the bin's folders are read); columns and types as
    :func:`read_staged`'s."""
    return _read(dataset, pc.field(STAGING_TOPIC_COLUMN) == b, lo_ms, hi_ms)


def _read(dataset: Any, where: Any, lo_ms: int | None, hi_ms: int | None) -> pd.DataFrame:
    if lo_ms is not None:
        where = where & (pc.field("event_ms") >= lo_ms)
    if hi_ms is not None:
        where = where & (pc.field("event_ms") < hi_ms)
    # Strings stay Arrow arrays (pandas ArrowDtype; topics and producers coded, Categorical):
    # the stages only take, sort and factorize them, and the output files are Arrow again, so
    # no Python object per key and producer is made and converted back (a fifth of a busy
    # topic's read and write time). One chunk per column (the row groups' dictionaries
    # unified): taking rows across a chunk per row group is several times slower.
    # split_blocks: a block per column, not consolidated (a copy of every column of a kind)
    return dataset.to_table(columns=STAGE_INPUT_COLUMNS, filter=where).combine_chunks().to_pandas(
        types_mapper=arrow_strings, split_blocks=True)


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
    ``pseudonymize``, ``bins`` (topic bins): see :class:`StagingWriter`."""

    spec: Any
    horizon_ms: int | None = None
    finalized: bool = False
    pseudonymize: Pseudonymizer | None = None
    bins: int = 1


def stage_partition(batches: Iterable[pa.RecordBatch], plan: StagingPlan, folder: str, part: int,
                    check_minutes: bool = False) -> Iterator[pa.RecordBatch]:
    """One task of the staging pass: the rules (``pipelines.ingest.rules.ingest_batches``) on
    ``batches`` (mapped records), the accepted messages that are not late staged under
    ``folder`` as ``part`` (:class:`StagingWriter`); yields the rejected and the late records
    (``pipelines.ingest.rules.verdict_rows``). ``check_minutes``: the records were spread over
    the tasks by their minute hint; a hint that is not its record's minute
    (``pipelines.ingest.rules.minutes_misplaced``) leaves the :data:`MISPLACED_MARK` file and
    stages and yields nothing."""
    writer = StagingWriter(folder, part, plan.pseudonymize, plan.bins)
    for records, verdict in ingest_batches(batches, plan.spec):
        if check_minutes and minutes_misplaced(records, verdict):
            leave_mark(folder, MISPLACED_MARK)
            return
        late = late_rows(verdict, plan.horizon_ms, plan.finalized)
        staged = verdict.accepted.filter(pa.array(~late)) if late.any() else verdict.accepted
        for accepted in staged.to_batches():
            writer.add(accepted)
        if late.any() or len(verdict.rejected_rows):
            yield verdict_rows(records, verdict, late)
    writer.close()


def leave_mark(folder: str, mark: str, text: str = "") -> None:
    """Leave the file ``mark`` (holding ``text``) in a micro-batch's staging ``folder``: a task's
    word to the driver that the pass must run again another way (:data:`MISPLACED_MARK`,
    ``pipelines.spark.staging_pass.REFUSED_MARK``)."""
    fs, path = arrow_filesystem(folder)
    fs.create_dir(path, recursive=True)
    with fs.open_output_stream(f"{path}/{mark}") as out:
        out.write(text.encode("utf-8"))


def has_mark(folder: str, mark: str) -> bool:
    """Whether a task left ``mark`` in the staging ``folder`` (:func:`leave_mark`)."""
    fs, path = arrow_filesystem(folder)
    return bool(fs.get_file_info(f"{path}/{mark}").type != pafs.FileType.NotFound)
