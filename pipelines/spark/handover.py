"""What the emulation operators hand each other, and where (docs/architecture.md, "Emulation
query").

Everything of one finalization (one feed file, one micro-batch of the emulation query) lives
under ``<emulation>/v=<version>/``:

- ``routed/<run>/bin-<b>/w-<window>/shard-<s>.arrow`` — the control plane's routed messages of
  topic bin ``b`` and producer shard ``s`` (every topic of the bin with messages in the window,
  each in replay order), ``layouts.pkl`` beside them (topic → layout DAG after the window, for
  the topics the control plane advanced in it);
- ``handover/<run>/bin-<b>/w-<window>/shard-<s>.arrow`` — a shard's entries of the window
  with what dispatch needs (:data:`ENTRY_HANDOVER`, with their topic);
- ``out/<run>/<kind>/part-<sha1>.parquet`` — table rows
  (:class:`pipelines.storage.frames.FrameWriter`), committed to Delta by the driver.

Hand-over files are Arrow IPC files (uncompressed on a filesystem, lz4 on an object store:
:func:`handover_compression`): each is written once and read once, soon after, by the next
operator; Parquet's encoding cost five times as much to write (a hot topic's control
plane writes every message of it on one core). File names depend only on (run, topic, shard or
dispatcher, window) — never per topic: the files grow with bins, not topics — and a re-run of
a micro-batch rewrites the same files whole. Operator state is one ``(format, blob)`` value per
topic in a ``MapState`` keyed by topic (:data:`pipelines.spark.window_loop.STATE_KEY_DDL`,
:data:`pipelines.spark.window_loop.STATE_DDL`), read only
for the topics a window touches (:class:`TopicStates`) and not written back after the final
window (the end of input: nothing reads it after); a format it does not know is refused.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from pipelines.core.layout import SegmentLayout
from pipelines.core.sorting import stable_argsort
from pipelines.storage import fs as storage
from pipelines.storage.frames import FrameWriter, WriterThread
from pipelines.storage.fs import arrow_filesystem
from pipelines.storage.staging import arrow_strings

STATE_FORMAT = 5
"""Version of the operators' state blobs (pickled ``pipelines.core`` / ``pipelines.engine.stages``
objects). Bumped whenever those classes change shape or module (pickles name a class by its
module path): a checkpoint of another format is refused (:class:`TopicStates`) instead of
unpickling old objects into new classes. 2: ``pipelines.stages`` moved to
``pipelines.engine.stages`` (its ``BatchingState``). 3: keys are topic bins, a ``MapState``
entry per topic; the controller's TopicStats rates per stats period (``TopicStatsRates``) and
consumers' ``leave_how`` (issue #29); a dispatcher keeps its last emitted window rows (sparse
``consumer_load`` / ``subscription_stats``, issue #30). 4: a topic's ``KeyStats`` makes its
HyperLogLog registers only once its distinct keys outgrow the exact set (``None`` before). 5: a
``SubscriptionDispatcher`` pickles its consumers, counters and last window rows as plain values
(its ``__getstate__``); a ``TopicController``'s subscription step functions are not pickled
(rebuilt, shared, on load); a ``KeyStats`` pickles its int64 arrays as one buffer and its key
names as lists."""


CODED_STRINGS = pa.dictionary(pa.int32(), pa.string())
"""A string column handed over as codes and their values (an entry's topic and producer)."""

ENTRY_HANDOVER = pa.schema([("topic", CODED_STRINGS), ("producer_name", CODED_STRINGS),
                            ("segment_id", pa.int64()),
                            ("entry_id", pa.int64()), ("entry_hash_min", pa.int64()),
                            ("num_messages", pa.int64()), ("payload_bytes", pa.int64()),
                            ("emu_publish_ms", pa.int64())])
"""Columns of the entries batching hands to dispatch
(``pipelines.engine.stages.dispatch_group``); the strings coded (``pd.Categorical`` both ways,
``pipelines.engine.stages.categorical``)."""


class StateFormatError(RuntimeError):
    """A checkpoint holds operator state of another :data:`STATE_FORMAT`, or the replay's state
    files one of another ``pipelines.spark.replay_state.REPLAY_STATE_FORMAT``."""


class TopicStates:
    """The per-topic state blobs of one operator key, over a ``MapState`` (topic →
    :data:`pipelines.spark.window_loop.STATE_DDL`): read lazily, one round trip per topic a
    window touches (:meth:`get`), or all at once with the map's batched iterator
    (:meth:`all_topics`, the final window); :meth:`save` writes back only the topics given a
    new blob. A value of another :data:`STATE_FORMAT` raises :class:`StateFormatError`."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.blobs: dict[str, bytes | None] = {}
        self.dirty: set[str] = set()
        self.complete = False

    def get(self, topic: str) -> bytes | None:
        """The topic's blob (``None``: the topic has no state yet)."""
        if topic not in self.blobs:
            self.blobs[topic] = (None if self.complete
                                 else _checked(self.state.getValue((topic,))))
        return self.blobs[topic]

    def put(self, topic: str, blob: bytes) -> None:
        self.blobs[topic] = blob
        self.dirty.add(topic)

    def all_topics(self) -> list[str]:
        """Every topic with state (read with the map's iterator) or given one, sorted."""
        if not self.complete:
            for (topic,), value in self.state.iterator():
                if topic not in self.blobs:
                    self.blobs[str(topic)] = _checked(value)
            self.complete = True
        return sorted(t for t, b in self.blobs.items() if b is not None)

    def save(self) -> None:
        """Write back every topic given a new blob."""
        for topic in sorted(self.dirty):
            blob = self.blobs[topic]
            if blob is not None:
                self.state.updateValue((topic,), (STATE_FORMAT, blob))
        self.dirty.clear()


def _checked(value: Any) -> bytes | None:
    """A state value's blob (``None`` for no value); :class:`StateFormatError` for another
    format."""
    if value is None:
        return None
    fmt, blob = value
    if int(fmt) != STATE_FORMAT:
        raise StateFormatError(f"the emulation checkpoint holds state of format {fmt}, this "
                               f"version reads format {STATE_FORMAT}: replay into a new --output "
                               f"or --run-id")
    return bytes(blob)


def digest(name: str) -> str:
    """SHA-1 hex of ``name`` (a folder name for any topic)."""
    return hashlib.sha1(name.encode("utf-8")).hexdigest()


def version_dir(emulation: str, version: int) -> str:
    """Everything of finalization ``version``: ``<emulation>/v=<version>``."""
    return storage.join(emulation, f"v={version}")


def window_dir(emulation: str, version: int, part: str, run_id: str, b: int,
               window: int) -> str:
    """``<version dir>/<part>/<run>/bin-<b>/w-<window>`` (``part``: routed, handover)."""
    return storage.join(version_dir(emulation, version), part, run_id, f"bin-{b:05d}",
                        f"w-{window:06d}")


def out_dir(emulation: str, version: int, run_id: str) -> str:
    """Where a run's table rows of finalization ``version`` go: ``<version dir>/out/<run>``."""
    return storage.join(version_dir(emulation, version), "out", run_id)


HANDOVER_SUFFIX = ".arrow"
"""File name suffix of the hand-over files (Arrow IPC)."""


def shard_file(folder: str, shard: int) -> str:
    """A producer shard's file in a window folder: ``<folder>/shard-<shard>.arrow``."""
    return f"{folder.rstrip('/')}/shard-{shard:04d}{HANDOVER_SUFFIX}"


def producer_shard(producers: pd.Series, shards: int, topics: pd.Series | None = None,
                   kept: Mapping[str, Mapping[str, int]] | None = None) -> npt.NDArray[np.int64]:
    """Producer shard (int64, ``0 <= s < shards``) of each row's producer: its topic's kept
    shard (``kept``: topic → producer name → shard, the placement's,
    :func:`~pipelines.spark.placement.balanced_producers`; ``topics``: each row's topic),
    else pandas' stable SipHash of the name (the same in every process, unlike ``hash()``)
    modulo ``shards``. Computed once per distinct name, and per distinct (topic, producer)
    where a topic has kept shards (:func:`~pipelines.engine.stages.factorized`)."""
    from pipelines.engine.stages import factorized  # noqa: PLC0415

    codes, names = factorized(producers)
    if not len(names):
        return np.zeros(len(producers), dtype=np.int64)
    hashed = pd.util.hash_array(np.asarray(names, dtype=object))
    by_name: npt.NDArray[np.int64] = (hashed % np.uint64(shards)).astype(np.int64)
    shard: npt.NDArray[np.int64] = by_name[np.asarray(codes)]
    if kept and topics is not None:
        t_codes, t_names = factorized(topics)
        pair = (np.asarray(t_codes, dtype=np.int64) * len(names)
                + np.asarray(codes, dtype=np.int64))
        inverse, pairs = pd.factorize(pair)
        placed = np.array([kept.get(str(t_names[p // len(names)]), {})
                           .get(str(names[p % len(names)]), -1) for p in pairs.tolist()],
                          dtype=np.int64)[inverse]
        shard = np.where(placed >= 0, placed % shards, shard)
    return shard


def split_by_shard(table: pa.Table, shard: npt.NDArray[np.int64],
                   shards: int) -> list[pa.Table]:
    """``table``'s rows per shard (``shard``: each row's shard, ``0 <= s < shards``), each in
    the rows' order: one stable sort, then zero-copy slices."""
    order = stable_argsort(shard)
    bounds = np.searchsorted(shard[order], np.arange(shards + 1))
    grouped = table.take(pa.array(order))
    return [grouped.slice(int(bounds[s]), int(bounds[s + 1] - bounds[s])) for s in range(shards)]


def by_topic(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``frame``'s rows per value of its ``topic`` column (each in the rows' order): one stable
    sort by the topic's code, then a slice per topic (a pandas ``groupby`` makes a frame per
    group the slow way: thousands of topics in a bin)."""
    if not len(frame):
        return {}
    codes, topics = pd.factorize(frame["topic"])
    order = stable_argsort(codes)
    bounds = np.searchsorted(codes[order], np.arange(len(topics) + 1))
    grouped = frame.take(order)
    return {str(t): grouped.iloc[int(bounds[i]):int(bounds[i + 1])]
            for i, t in enumerate(topics)}


def handover_compression(path: str) -> str | None:
    """The compression of a hand-over file at ``path``: none on a filesystem, lz4 on an object
    store. A hand-over file lives for one finalization and is read once, from the page cache:
    the 10 M bench's (15.6 M messages and entries, 242 files) took 1.6-2.2 CPU s to write and
    0.8-1.5 s to read with lz4, 0.5 s and 0.2 s without, for 1.47 GB instead of 0.5 GB
    (deleted once the finalization is committed). On an object store the bytes cost upload
    and download time instead."""
    return "lz4" if storage.is_remote(path) else None


HANDOVER_BUFFER = 1 << 20
"""Bytes of the buffer a hand-over file is streamed through (at most; a small table's file
gets a buffer of its size)."""


def write_frame(path: str, table: pa.Table) -> None:
    """Write ``table`` to the Arrow IPC file ``path`` whole (compressed as
    :func:`handover_compression` says; :func:`pipelines.storage.fs.output_stream`: a re-run
    replaces it), streamed into the file through a buffer of at most :data:`HANDOVER_BUFFER`
    bytes. Made whole in memory first (a ``BufferOutputStream``), the 10 M bench's routed
    messages (1.2 GB) took 3-4 CPU s more, nearly all of it the kernel giving the growing
    buffer fresh pages: 0.7 s against 0.07 s per 230 MB. An unbuffered stream (a write per
    Arrow buffer) or a 1 MiB buffer for every file, however small, cost the 10,000-topic
    bench's control plane 1.8 s."""
    options = pa.ipc.IpcWriteOptions(compression=handover_compression(path))
    buffer_size = min(HANDOVER_BUFFER, table.get_total_buffer_size() + 64 * 1024)
    with (storage.output_stream(path, buffer_size) as sink,
          pa.ipc.new_file(sink, table.schema, options=options) as writer):
        writer.write_table(table)


def read_frame(path: str) -> pa.Table | None:
    """The Arrow IPC file ``path`` as a table, ``None`` when it does not exist. A local file
    is memory-mapped: the table's columns are the page cache's pages, not copies of them
    (a hand-over file is never changed in place: a re-run writes a new file and renames it
    over the old one)."""
    if not storage.is_file(path):
        return None
    if not storage.is_remote(path):
        with pa.memory_map(os.path.abspath(path)) as source:
            return pa.ipc.open_file(source).read_all()
    fs, p = arrow_filesystem(path)
    with fs.open_input_file(p) as source:
        return pa.ipc.open_file(source).read_all()


def write_layouts(folder: str, layouts: dict[str, SegmentLayout]) -> None:
    """The layouts after a window of the topics the control plane advanced in it (topic →
    layout; ``layouts.pkl`` in the window's routed folder)."""
    storage.write_bytes(storage.join(folder, "layouts.pkl"), pickle.dumps(layouts))


def read_layouts(folder: str) -> dict[str, SegmentLayout]:
    """What :func:`write_layouts` wrote (``{}`` when the window has none)."""
    path = storage.join(folder, "layouts.pkl")
    if not storage.is_file(path):
        return {}
    layouts: dict[str, SegmentLayout] = pickle.loads(storage.read_bytes(path))
    return layouts


ROUTED_SCHEMA = pa.schema([
    ("topic", CODED_STRINGS), ("key", pa.string()), ("producer_name", CODED_STRINGS),
    ("sequence_id", pa.int64()), ("publish_time", pa.timestamp("us", tz="UTC")),
    ("payload_size", pa.int64()), ("event_ms", pa.int64()), ("hash32", pa.int64()),
    ("segment_hash", pa.int32()), ("hash_b", pa.int32()), ("segment_id", pa.int64()),
    ("bucket_index", pa.int32()), ("layout_epoch", pa.int64())])
"""The routed messages the control plane hands to batching: the staged columns
(``pipelines.storage.staging.STAGE_INPUT_COLUMNS``) with ``segment_id``, ``bucket_index`` and
``layout_epoch`` (replay order within each topic); the topic and producer coded as the staged
files are read (``pipelines.storage.staging.CODED_COLUMNS``: ``pd.Categorical`` both ways,
a dictionary of any index width in the file)."""

ROUTED_COLUMNS = ROUTED_SCHEMA.names
"""Columns of :data:`ROUTED_SCHEMA`, in order."""


class WindowFiles:
    """The hand-over files of one window of a topic bin (``version``'s finalization, run
    ``run_id``): what the control plane hands batching (each producer shard's routed messages,
    the window's layouts) and what batching hands dispatch (each shard's entries). Paths as the
    module says; each file is written whole (a re-run replaces it) and read by the next
    operator of the same micro-batch. ``thread``: the task's
    :class:`~pipelines.storage.frames.WriterThread` (:attr:`Outputs.thread`, drained before the
    task ends, so before the next operator reads), which writes the routed messages and the
    entries; without it they are written at once."""

    def __init__(self, emulation: str, version: int, run_id: str, b: int, window: int,
                 thread: WriterThread | None = None) -> None:
        self.routed_dir = window_dir(emulation, version, "routed", run_id, b, window)
        self.entries_dir = window_dir(emulation, version, "handover", run_id, b, window)
        self.thread = thread

    def _write(self, path: str, table: pa.Table) -> None:
        """:func:`write_frame`, on :attr:`thread` when there is one."""
        if self.thread is None:
            write_frame(path, table)
        else:
            self.thread.submit(write_frame, path, table)

    def write_routed(self, routed: pd.DataFrame, shards: int,
                     kept: Mapping[str, Mapping[str, int]] | None = None) -> set[int]:
        """Write each producer shard's rows of ``routed`` (:data:`ROUTED_COLUMNS`; shard by
        :func:`producer_shard`, ``shards`` per topic, ``kept``: the placement's producer
        shards), a file per shard with rows; returns
        those shards. The split and the writes go to :attr:`thread` whole when there is one
        (a busy topic's control-plane task bounds its stage: a tenth of it was this split)."""
        shard = producer_shard(routed["producer_name"], shards, routed["topic"], kept)
        if self.thread is None:
            self._write_routed(routed, shard, shards)
        else:
            self.thread.submit(self._write_routed, routed, shard, shards)
        return {int(s) for s in np.unique(shard)}

    def _write_routed(self, routed: pd.DataFrame, shard: npt.NDArray[np.int64],
                      shards: int) -> None:
        """:meth:`write_routed`'s files (``shard``: each row's producer shard)."""
        # the columns selected as Arrow converts (a pandas selection copies the frame)
        table = pa.Table.from_pandas(routed, columns=ROUTED_COLUMNS, preserve_index=False)
        for s, part in enumerate(split_by_shard(table, shard, shards)):
            if part.num_rows:
                write_frame(shard_file(self.routed_dir, s), part)

    def read_routed(self, shard: int) -> pd.DataFrame:
        """Producer shard ``shard``'s routed messages (as the staged messages the stages take:
        keys as ``pd.ArrowDtype`` strings, topics and producers as they were handed over,
        ``pd.Categorical`` when coded); no rows (of :data:`ROUTED_SCHEMA`) when it got none."""
        table = read_frame(shard_file(self.routed_dir, shard))
        if table is None:
            table = ROUTED_SCHEMA.empty_table()
        return table.select(ROUTED_COLUMNS).to_pandas(types_mapper=arrow_strings,
                                                      split_blocks=True)

    def write_layouts(self, layouts: dict[str, SegmentLayout]) -> None:
        """:func:`write_layouts` of the window."""
        write_layouts(self.routed_dir, layouts)

    def read_layouts(self) -> dict[str, SegmentLayout]:
        """:func:`read_layouts` of the window."""
        return read_layouts(self.routed_dir)

    def write_entries(self, shard: int, entries: pd.DataFrame) -> None:
        """Producer shard ``shard``'s entries of the window (:data:`ENTRY_HANDOVER`'s columns
        of ``entries``)."""
        self._write(shard_file(self.entries_dir, shard),
                    pa.Table.from_pandas(entries, schema=ENTRY_HANDOVER, preserve_index=False))

    def read_entries(self) -> pd.DataFrame:
        """Every shard's entries of the window (:data:`ENTRY_HANDOVER`), in shard order; no
        rows when no shard sent any."""
        tables = [t for n in storage.list_files(self.entries_dir, HANDOVER_SUFFIX)
                  if not n.startswith((".", "_"))
                  and (t := read_frame(storage.join(self.entries_dir, n))) is not None]
        table = pa.concat_tables(tables) if tables else ENTRY_HANDOVER.empty_table()
        return table.to_pandas(types_mapper=arrow_strings, split_blocks=True)


class Outputs:
    """An operator key's table rows of a micro-batch: a
    :class:`~pipelines.storage.frames.FrameWriter` per finalization ``version`` (made when
    first written to, in :func:`out_dir`), ``withheld``: the run's withheld columns
    (``output.keys``). Its :attr:`thread` (:class:`~pipelines.storage.frames.WriterThread`)
    writes their row groups and the key's hand-over files (:class:`WindowFiles`), all done
    by :meth:`close`."""

    def __init__(self, emulation: str, run_id: str, withheld: Any) -> None:
        self.emulation, self.run_id, self.withheld = emulation, run_id, withheld
        self.writers: dict[int, FrameWriter] = {}
        self.thread = WriterThread()

    def writer(self, version: int) -> FrameWriter:
        """The :class:`~pipelines.storage.frames.FrameWriter` of ``version``."""
        if version not in self.writers:
            self.writers[version] = FrameWriter(out_dir(self.emulation, version, self.run_id),
                                                self.withheld, self.thread)
        return self.writers[version]

    def close(self) -> None:
        """Wait for the writer thread (the hand-over files too), finish every file written."""
        self.thread.drain()
        for writer in self.writers.values():
            writer.close()
