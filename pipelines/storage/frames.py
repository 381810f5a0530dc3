"""The emulation's output files: one Parquet file of rows per topic and kind
(:func:`staged_file`, written by :class:`FrameWriter` in the Spark runtime's tasks and committed
to Delta by the driver), and which table each kind of row goes to (:data:`OUTPUT_KINDS`). No
Spark."""

from __future__ import annotations

import hashlib
import os
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.contract.schemas import table_columns
from pipelines.storage.delta import conform_arrow
from pipelines.storage.delta_format import parquet_options
from pipelines.storage.fs import arrow_filesystem

DISPATCH_TABLES = {"dispatch": "dispatch", "consumer_load": "consumer_load",
                   "handoff": "bucket_handoffs", "window_stats": "subscription_stats",
                   "segment_drain": "segment_drains"}
"""``_kind`` of a dispatch-stage row → its output table."""


STAGE_KINDS = {"msg": "messages", "entry": "entries", **DISPATCH_TABLES}
"""``_kind`` of a topic-stage output row → its output table (the data plane's and dispatch's
tables; the control plane's small tables come from
:func:`pipelines.engine.stages.control_outputs`)."""

CONTROL_KINDS = {"sample": "segment_load", "decision": "autoscale_decisions",
                 "segment": "segments"}
"""Kinds of the control plane's tables (:class:`pipelines.engine.stages.ControlResult`'s frames)
→ their tables."""

SNAPSHOT_KINDS = {"segment": "segments"}
"""Kinds whose table holds a snapshot: each commit replaces the run's rows (read back and
committed as rows). Every other kind is appended, its files adopted as they are."""

APPENDED_KINDS = {k: t for k, t in {**STAGE_KINDS, **CONTROL_KINDS}.items()
                  if k not in SNAPSHOT_KINDS}
"""Kinds whose files are appended to their tables as they are (the data plane's, dispatch's
and the control plane's load samples and decisions: at 10,000 topics ``segment_load`` has
about half as many rows as messages, too many to read back on the driver)."""

KEY_PROFILE_KIND = "key_profile"
"""The control plane's key statistics at end of input: one row per topic with the
``topic_profile`` columns they give (:func:`pipelines.engine.stages.key_profile_row`). Not
committed as such: the driver keeps the files and completes the rows from the committed tables
(``pipelines.engine.findings``)."""

OUTPUT_KINDS = {**STAGE_KINDS, **CONTROL_KINDS, KEY_PROFILE_KIND: "topic_profile"}
"""Every kind :class:`FrameWriter` writes → its table."""


def staged_file(out_dir: str, kind: str, topic: str) -> str:
    """Where :class:`FrameWriter` puts one topic's rows of one kind: ``<out_dir>/<kind>/
    part-<sha1(topic)>.parquet`` (topic names may hold any character; one file per topic and
    Spark job, the same on every re-run)."""
    digest = hashlib.sha1(topic.encode("utf-8")).hexdigest()
    return f"{out_dir.rstrip('/')}/{kind}/part-{digest}.parquet"


WRITES_AHEAD = 2
"""Writes a :class:`WriterThread` may have waiting: the task waits for the oldest beyond that
(memory stays about two frames)."""


class WriterThread:
    """A task's file writes, run in order on one thread of its own: Arrow releases the GIL while
    it encodes, compresses and writes, so the task goes on with its next window meanwhile and
    a busy topic's task, alone on its core at a stage's end, has the idle core write its
    files (Parquet encoding was a third of the batching and dispatch tasks' time at 10 M
    messages). A failed write is raised by the next :meth:`submit` or by :meth:`drain`."""

    def __init__(self) -> None:
        self.pool: ThreadPoolExecutor | None = None
        self.pending: deque[Future[Any]] = deque()

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Queue ``fn(*args, **kwargs)`` once fewer than :data:`WRITES_AHEAD` writes wait."""
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="writer")
        while len(self.pending) >= WRITES_AHEAD:
            self.pending.popleft().result()
        self.pending.append(self.pool.submit(fn, *args, **kwargs))

    def drain(self) -> None:
        """Wait for every queued write (raising the first failure) and stop the thread (a
        later :meth:`submit` starts another)."""
        try:
            while self.pending:
                self.pending.popleft().result()
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)
                self.pool = None


class FrameWriter:
    """A task's output files under ``out_dir``: one Parquet file per topic and kind
    (:func:`staged_file`), open across the windows of a Spark job, each window's frame of a
    kind appended as its own row groups (a file per window meant creating, finishing and
    moving seven files per topic and window, and 16 times as many files in the tables).
    Frames are cast to their table's columns without ``run_id``
    (:func:`pipelines.storage.delta.conform_arrow`: a null in a required column or a wrong type
    fails here, in the task). Files are written under hidden temporary names (readers skip them,
    whatever a failed attempt left) and moved into place by :meth:`close`, so a retried or
    re-run task replaces each whole with the same rows. The row groups are written by a
    :class:`WriterThread` (the task's, shared with its other writes, or one of its own); a
    failed write is raised by a later :meth:`write` or by :meth:`close`."""

    def __init__(self, out_dir: str,
                 withheld: Mapping[str, tuple[str, ...]] | None = None,
                 thread: WriterThread | None = None) -> None:
        """``withheld``: table → nullable columns written as nulls (``output.keys``,
        :func:`pipelines.ingest.privacy.withheld_columns`); ``thread``: the task's writer
        thread (default: one of its own)."""
        self.out_dir = out_dir
        self.withheld = dict(withheld or {})
        self.files: dict[tuple[str, str], tuple[Any, Any, str, str]] = {}
        self.thread = thread or WriterThread()

    def write(self, topic: str, frames: Mapping[str, Any]) -> None:
        """Append a topic's window of output frames (``_kind`` → pandas frame or pyarrow
        table; empty ones skipped)."""

        for kind, df in frames.items():
            if not len(df):
                continue
            table = OUTPUT_KINDS[kind]
            columns = table_columns(table)
            withheld = self.withheld.get(table, ())
            # a withheld column is left out: conform_arrow fills it with nulls
            taken = [c for c in columns if c not in withheld]
            # the columns selected as Arrow converts (a pandas selection copies the frame)
            # strings coded as dictionaries stay so: Parquet takes the codes and their values
            # as its own dictionary (a string per row neither made nor hashed again)
            arrow = conform_arrow(table, df.select([c for c in taken if c in df.column_names])
                                  if isinstance(df, pa.Table)
                                  else pa.Table.from_pandas(
                                      df, columns=[c for c in taken if c in df.columns],
                                      preserve_index=False, nthreads=1),
                                  columns=columns, dictionaries=True)
            if (topic, kind) not in self.files:
                fs, path = arrow_filesystem(staged_file(self.out_dir, kind, topic))
                folder, name = path.rsplit("/", 1)
                fs.create_dir(folder, recursive=True)
                tmp = f"{folder}/.{name}.{os.getpid()}.tmp"
                writer = pq.ParquetWriter(tmp, arrow.schema, filesystem=fs,
                                          **parquet_options(arrow.schema))
                self.files[(topic, kind)] = (writer, fs, tmp, path)
            writer = self.files[(topic, kind)][0]
            if not arrow.schema.equals(writer.schema, check_metadata=False):  # coded or not
                arrow = arrow.cast(writer.schema)
            self.thread.submit(writer.write_table, arrow, row_group_size=128 * 1024)

    def close(self) -> None:
        """Wait for the writer thread (raising a failed write), finish every file and move it
        into place."""
        self.thread.drain()
        for writer, fs, tmp, path in self.files.values():
            writer.close()
            fs.move(tmp, path)
        self.files = {}
