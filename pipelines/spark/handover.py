"""What the emulation operators hand each other, and where (docs/architecture.md, "Emulation
query").

Everything of one finalization (one feed file, one micro-batch of the emulation query) lives
under ``<emulation>/v=<version>/``:

- ``routed/<run>/<topic sha1>/w-<window>/shard-<s>.arrow`` — the control plane's routed
  messages of producer shard ``s`` (replay order), ``layout.pkl`` beside them (the topic's
  layout DAG after the window);
- ``handover/<run>/<topic sha1>/w-<window>/shard-<s>.arrow`` — a shard's entries of the window
  with what dispatch needs (:data:`ENTRY_HANDOVER`);
- ``out/<run>/<kind>/part-<sha1>.parquet`` — table rows
  (:class:`pipelines.storage.frames.FrameWriter`), committed to Delta by the driver.

Hand-over files are Arrow IPC files (lz4): each is written once and read once, soon after, by
the next operator; Parquet's encoding cost five times as much to write (a hot topic's control
plane writes every message of it on one core). File names depend only on (run, topic, shard or
dispatcher, window): a re-run of a micro-batch rewrites the same files whole. Operator state
is one ``(format, blob)`` row per key in a ``ValueState`` (:data:`STATE_DDL`);
:func:`load_state` refuses a format it does not know.
"""

from __future__ import annotations

import hashlib
import pickle
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from pipelines.core.layout import SegmentLayout
from pipelines.storage import fs as storage
from pipelines.storage.fs import arrow_filesystem

STATE_FORMAT = 3
"""Version of the operators' state blobs (pickled ``pipelines.core`` / ``pipelines.engine.stages``
objects). Bumped whenever those classes change shape or module (pickles name a class by its
module path): a checkpoint of another format is refused (:func:`load_state`) instead of
unpickling old objects into new classes. 2: ``pipelines.stages`` moved to
``pipelines.engine.stages`` (its ``BatchingState``). 3: the controller's TopicStats rates per
stats period (``TopicStatsRates``) and consumers' ``leave_how`` (issue #29); a dispatcher
keeps its last emitted window rows (sparse ``consumer_load`` / ``subscription_stats``, issue
#30)."""

STATE_DDL = "format int, blob binary"
"""Schema of every operator's ``ValueState``: the blob's format and the blob."""

ENTRY_HANDOVER = pa.schema([("producer_name", pa.string()), ("segment_id", pa.int64()),
                            ("entry_id", pa.int64()), ("entry_hash_min", pa.int64()),
                            ("num_messages", pa.int64()), ("payload_bytes", pa.int64()),
                            ("emu_publish_ms", pa.int64())])
"""Columns of the entries batching hands to dispatch
(``pipelines.engine.stages.dispatch_group``)."""


class StateFormatError(RuntimeError):
    """A checkpoint holds operator state of another :data:`STATE_FORMAT`, or the replay's state
    files one of another ``pipelines.spark.replay.REPLAY_STATE_FORMAT``."""


def load_state(state: Any) -> bytes | None:
    """The blob of a ``ValueState`` of :data:`STATE_DDL` (``None`` when it has none).
    :class:`StateFormatError` when it was written in another format."""
    if not state.exists():
        return None
    fmt, blob = state.get()
    if int(fmt) != STATE_FORMAT:
        raise StateFormatError(f"the emulation checkpoint holds state of format {fmt}, this "
                               f"version reads format {STATE_FORMAT}: replay into a new --output "
                               f"or --run-id")
    return bytes(blob)


def save_state(state: Any, blob: bytes) -> None:
    """Store ``blob`` in the ``ValueState`` ``state`` (format :data:`STATE_FORMAT`)."""
    state.update((STATE_FORMAT, blob))


def digest(name: str) -> str:
    """SHA-1 hex of ``name`` (a folder name for any topic)."""
    return hashlib.sha1(name.encode("utf-8")).hexdigest()


def version_dir(emulation: str, version: int) -> str:
    """Everything of finalization ``version``: ``<emulation>/v=<version>``."""
    return storage.join(emulation, f"v={version}")


def window_dir(emulation: str, version: int, part: str, run_id: str, topic: str,
               window: int) -> str:
    """``<version dir>/<part>/<run>/<topic sha1>/w-<window>`` (``part``: routed, handover)."""
    return storage.join(version_dir(emulation, version), part, run_id, digest(topic),
                        f"w-{window:06d}")


def out_dir(emulation: str, version: int, run_id: str) -> str:
    """Where a run's table rows of finalization ``version`` go: ``<version dir>/out/<run>``."""
    return storage.join(version_dir(emulation, version), "out", run_id)


HANDOVER_SUFFIX = ".arrow"
"""File name suffix of the hand-over files (Arrow IPC)."""


def shard_file(folder: str, shard: int) -> str:
    """A producer shard's file in a window folder: ``<folder>/shard-<shard>.arrow``."""
    return f"{folder.rstrip('/')}/shard-{shard:04d}{HANDOVER_SUFFIX}"


def producer_shard(producers: pd.Series, shards: int) -> npt.NDArray[np.int64]:
    """Producer shard (int64, ``0 <= s < shards``) of each producer name: pandas' stable
    SipHash of the name (the same in every process, unlike ``hash()``) modulo ``shards``,
    computed once per distinct name."""
    codes, names = pd.factorize(producers)
    if not len(names):
        return np.zeros(len(producers), dtype=np.int64)
    hashed = pd.util.hash_array(np.asarray(names, dtype=object))
    by_name: npt.NDArray[np.int64] = (hashed % np.uint64(shards)).astype(np.int64)
    shard: npt.NDArray[np.int64] = by_name[np.asarray(codes)]
    return shard


def split_by_shard(table: pa.Table, shard: npt.NDArray[np.int64],
                   shards: int) -> list[pa.Table]:
    """``table``'s rows per shard (``shard``: each row's shard, ``0 <= s < shards``), each in
    the rows' order: one stable sort, then zero-copy slices."""
    order = np.argsort(shard, kind="stable")
    bounds = np.searchsorted(shard[order], np.arange(shards + 1))
    grouped = table.take(pa.array(order))
    return [grouped.slice(int(bounds[s]), int(bounds[s + 1] - bounds[s])) for s in range(shards)]


def write_frame(path: str, table: pa.Table) -> None:
    """Write ``table`` to the Arrow IPC file ``path`` (lz4) whole
    (:func:`pipelines.storage.fs.write_bytes`: a re-run replaces it)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema,
                         options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    storage.write_bytes(path, sink.getvalue().to_pybytes())


def read_frame(path: str) -> pa.Table | None:
    """The Arrow IPC file ``path`` as a table, ``None`` when it does not exist."""
    fs, p = arrow_filesystem(path)
    if not storage.is_file(path):
        return None
    with fs.open_input_file(p) as source:
        return pa.ipc.open_file(source).read_all()


def write_layout(folder: str, layout: SegmentLayout | None) -> None:
    """The topic's layout after a window (``layout.pkl`` in the window's routed folder)."""
    if layout is not None:
        storage.write_bytes(storage.join(folder, "layout.pkl"), pickle.dumps(layout))


def read_layout(folder: str) -> SegmentLayout | None:
    """What :func:`write_layout` wrote, ``None`` when the topic has no layout yet."""
    path = storage.join(folder, "layout.pkl")
    if not storage.is_file(path):
        return None
    layout: SegmentLayout = pickle.loads(storage.read_bytes(path))
    return layout
