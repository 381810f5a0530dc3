"""The replay's state between micro-batches, and its files.

:class:`ReplayState` (the ingest's progress and counts, shared by a sweep's runs, and each
run's :class:`LaneState`) is pickled into ``_work/<run_id>/state/<batch_id>.pkl`` after each
micro-batch and finalization group; a re-run of batch ``k`` starts from the state of ``k-1``
(:meth:`StateFiles.before`). The emulation's own state lives in the emulation query's state
store (``pipelines.spark.handover``)."""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field
from typing import Any

from pipelines.spark import handover
from pipelines.storage import fs as storage


@dataclass
class LaneState:
    """What one run (lane) of a replay carries between windows: the run's own counts (entries,
    dispatched). The emulation's state lives in the emulation query's state store."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, n: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + int(n)


@dataclass
class ReplayState:
    """Everything the replay carries between micro-batches (pickled into ``state/``,
    :data:`REPLAY_STATE_FORMAT`): the ingest's progress and counts, shared by its runs, and each
    run's :class:`LaneState`."""

    batch_id: int = -1
    horizon_ms: int | None = None  # emulated-clock ms; messages < horizon are finalized
    max_event_ms: int | None = None
    first_event_ms: int | None = None
    finalized: bool = False
    lanes: dict[str, LaneState] = field(default_factory=dict)  # run_id → its state
    counts: dict[str, int] = field(default_factory=dict)
    staged: dict[str, int] = field(default_factory=dict)  # topic → messages staged so far
    # JSON: whether a micro-batch with records has been checked for absent mapped fields, and
    # the (contract column, source field) pairs no record of it had.
    fields_checked: bool = False
    missing_fields: tuple[tuple[str, str], ...] = ()

    def add(self, name: str, n: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + int(n)

    def lane(self, run_id: str) -> LaneState:
        """The state of run ``run_id`` (new when unseen)."""
        return self.lanes.setdefault(run_id, LaneState())


REPLAY_STATE_FORMAT = 2
"""Version of the replay's state files (``_work/<run_id>/state/<batch_id>.pkl``: the pickled
``(format, ReplayState)``). Pickles name a class by its module path, so reshaping
:class:`ReplayState` / :class:`LaneState` bumps it, and a state file of another format is
refused (:func:`read_state`) instead of failing to unpickle. 1: a bare ``ReplayState`` of
``pipelines.replay``; 2: the module moved to ``pipelines.spark.replay`` (issue #19's layout),
then here (issue #35, same shape: :class:`_StateUnpickler` reads the old path)."""

_MOVED_FROM = "pipelines.spark.replay"
"""Where the state classes lived until issue #35: format-2 files written then name it."""


class _StateUnpickler(pickle.Unpickler):
    """Reads the state classes under their former module path as well."""

    def find_class(self, module: str, name: str) -> Any:
        if module == _MOVED_FROM and name in ("ReplayState", "LaneState"):
            module = __name__
        return super().find_class(module, name)


def state_blob(state: ReplayState) -> bytes:
    """What a state file holds: ``state`` pickled with :data:`REPLAY_STATE_FORMAT`."""
    return pickle.dumps((REPLAY_STATE_FORMAT, state))


def read_state(blob: bytes, where: str) -> ReplayState:
    """The :class:`ReplayState` of a state file's ``blob`` (``where``: the file, for the
    message). ``handover.StateFormatError`` when it was written in another format."""
    try:
        loaded = _StateUnpickler(io.BytesIO(blob)).load()
    except (ModuleNotFoundError, AttributeError):  # format 1: a class no longer where it was
        loaded = None
    if (isinstance(loaded, tuple) and len(loaded) == 2 and loaded[0] == REPLAY_STATE_FORMAT
            and isinstance(loaded[1], ReplayState)):
        return loaded[1]
    fmt = loaded[0] if isinstance(loaded, tuple) and loaded else 1
    raise handover.StateFormatError(
        f"the replay state {where} is of format {fmt}, this version reads format "
        f"{REPLAY_STATE_FORMAT}: replay into a new --output or --run-id")


@dataclass(frozen=True)
class StateFiles:
    """The state files of one replay under ``<work_dir>/state/``, one per batch id (a file is
    whole or absent: written atomically)."""

    work_dir: str

    @property
    def folder(self) -> str:
        return storage.join(self.work_dir, "state")

    def latest(self) -> ReplayState:
        """Latest committed state (the checkpoint decides which batches re-run)."""
        return self.before(2**63)

    def before(self, batch_id: int) -> ReplayState:
        """State committed by the last batch before ``batch_id`` (a re-run starts from it)."""
        files = [f for f in storage.list_files(self.folder, ".pkl")
                 if int(f.removesuffix(".pkl")) < batch_id]
        if not files:
            return ReplayState()
        path = storage.join(self.folder, files[-1])
        return read_state(storage.read_bytes(path), path)

    def save(self, state: ReplayState) -> int:
        """Write ``state`` as its batch's file; returns its size in bytes."""
        blob = state_blob(state)
        storage.write_bytes(storage.join(self.folder, f"{state.batch_id:020d}.pkl"), blob)
        return len(blob)
