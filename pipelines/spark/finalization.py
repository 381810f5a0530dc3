"""Finalization: staged messages run through the emulation query in event-time windows, and
their tables committed.

A window is the staged messages from the finalized horizon up to a bound (emulated ms,
exclusive; ``None`` = +∞, the end of input). A streaming replay finalizes a window each time
the horizon advances; a batch replay finalizes everything at end of input, cut into windows of
at most :data:`FINALIZE_WINDOW_MESSAGES` messages of any one topic bin (:func:`final_windows`) run
:data:`FINALIZE_WINDOWS_PER_JOB` at a time (:meth:`Finalizer.run`: one Spark job, one commit
per table and run). Memory is bounded by the window, not the input; the tables do not depend
on the windows (the core is chunking-invariant).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow.dataset as ds
from pyspark.sql import SparkSession

from pipelines.contract.config import ReplayConfig
from pipelines.engine import stages
from pipelines.spark import handover
from pipelines.spark.batching import dispatcher_count
from pipelines.spark.emulation import (
    Receipt,
    emulation_dir,
    read_receipt,
    remove_versions,
    run_emulation,
    write_feed,
)
from pipelines.spark.placement import (
    Slots,
    balanced_producers,
    placement_order,
    read_placement,
    write_placement,
)
from pipelines.spark.replay_state import ReplayState
from pipelines.spark.stopwatch import Stopwatch
from pipelines.storage import fs as storage
from pipelines.storage.commits import TableCommits
from pipelines.storage.frames import APPENDED_KINDS, KEY_PROFILE_KIND, SNAPSHOT_KINDS
from pipelines.storage.staging import staged_histogram, staged_producers, topic_bin

FINALIZE_WINDOWS_PER_JOB = 64
"""End-of-input windows run per micro-batch of the emulation query and committed together
(:meth:`Finalizer.run`): a micro-batch of the three stateful operators costs about
4.5 s on these machines whatever it does (planning, state store loads and commits); memory
is bounded by one window whatever the count, since each operator reads its windows' input
itself. A crash recomputes at most this many windows (about 32 M messages)."""

FINALIZE_WINDOW_MESSAGES = 500_000
"""A batch replay finalizes at most about this many staged messages of one topic bin per
window. Memory bound: a Python worker holds one key's window at a time, i.e. one bin's
messages of the window (as pandas, about 0.5 KB a message); the driver and the JVM hold only
per-topic states (the stage's rows go to files). Counted per bin, not over all bins: every
window touches each of its topics' states in each operator (issue #30: with 10,000 topics the
per-topic work of a window, not its messages, set the cost), so windows are only as many as
the largest bin needs."""


def final_windows(staging: str) -> list[int | None]:
    """Upper bounds (emulated ms, exclusive) of the end-of-input windows, ``None`` (= +∞)
    last. Computed from ALL staged messages (so the same on a restart): event time is cut
    into at most 4096 equal bins (:func:`pipelines.storage.staging.staged_histogram`, per topic
    bin, read by the driver a column chunk at a time) and consecutive time bins are packed
    greedily into windows holding at most :data:`FINALIZE_WINDOW_MESSAGES` messages of any one
    topic bin (a time bin holding more is one window)."""
    histogram = staged_histogram(staging, 4096)
    if histogram is None:
        return [None]
    return [*window_cuts(*histogram, FINALIZE_WINDOW_MESSAGES), None]


def window_cuts(lo: int, width: int, counts: npt.NDArray[np.int64], limit: int) -> list[int]:
    """Where to cut event time (emulated ms) so that no window holds more than ``limit``
    messages of any one row of ``counts`` (int64, shape ``(topic bins, time bins)``: time bin
    ``i`` starts at ``lo + i * width``): time bins packed greedily in order, a cut before the
    first time bin that would take a topic bin past ``limit`` (a time bin holding more than
    ``limit`` of one topic bin is a window of its own). Ascending; ``[]`` for one window."""
    cuts: list[int] = []
    total = np.zeros(counts.shape[0], dtype=np.int64)
    for i in np.flatnonzero(counts.sum(axis=0)).tolist():
        column = counts[:, i]
        if total.any() and (total + column > limit).any():
            cuts.append(lo + i * width)
            total[:] = 0
        total += column
    return cuts


@dataclass(frozen=True)
class Placement:
    """What :func:`kept_placement` keeps: ``order`` (the bins, busiest first), ``loads`` (each
    bin's staged messages, by bin number; ``None`` when kept without them) and ``producers``
    (each topic's producer shards, :func:`~pipelines.spark.placement.balanced_producers`;
    ``{}`` when kept without them: producers are hashed)."""

    order: tuple[int, ...]
    loads: tuple[int, ...] | None
    producers: dict[str, dict[str, int]]


def kept_placement(emulation: str, bins: int, staged: Mapping[str, int], staging: str,
                   shards: int) -> Placement:
    """The replay's placement of its operator keys (:mod:`pipelines.spark.placement`): at its
    first finalization, the messages staged per bin (``staged``: topic → messages,
    :attr:`ReplayState.staged`) and their :func:`~pipelines.spark.placement.placement_order`,
    and the producers of each bin whose staged files counted them (under ``staging``, their
    footers) over its ``shards`` by their messages, kept in
    :data:`~pipelines.spark.placement.PLACEMENT_FILE` beside the emulation's checkpoint before
    the query first runs; read back from it at every later finalization and restart (the
    operators' state is keyed by slots and shards that follow from it)."""
    kept = read_placement(emulation)
    if kept is not None:
        loads = kept.get("bin_loads")
        return Placement(tuple(kept["bin_order"]), None if loads is None else tuple(loads),
                         kept.get("producer_shards", {}))
    counts = [0] * bins
    for topic, n in staged.items():
        counts[topic_bin(topic, bins)] += int(n)
    placement = Placement(placement_order(dict(enumerate(counts)), bins), tuple(counts),
                          balanced_producers(staged_producers(staging), shards))
    write_placement(emulation, {"bin_order": list(placement.order), "bin_loads": counts,
                                "producer_shards": placement.producers})
    return placement


def key_profiles_dir(work_dir: str, run_id: str) -> str:
    """Where the end of input's key-profile files of ``run_id`` are kept until the answers
    are written (``<work_dir>/key_profile/<run_id>``; rewritten whole by a re-run)."""
    return storage.join(work_dir, KEY_PROFILE_KIND, run_id)


def read_rows(folder: str) -> pd.DataFrame:
    """The rows of the Parquet files under ``folder`` (none when it does not exist)."""
    if not storage.is_dir(folder):
        return pd.DataFrame()
    fs, path = storage.arrow_filesystem(folder)
    return ds.dataset(path, filesystem=fs, format="parquet").to_table().to_pandas()


@dataclass(frozen=True)
class Finalizer:
    """Runs a replay's windows through the emulation query and commits their tables:
    ``configs`` are its runs (run_id → config), ``staging`` / ``work_dir`` its folders;
    ``topic_bins``, ``producer_shards`` and ``state_partitions`` (the emulation state's
    partitions) are run constants, from its manifest: the operators' keys' slots follow from
    them (:class:`~pipelines.spark.placement.Slots`)."""

    spark: SparkSession
    configs: Mapping[str, ReplayConfig]
    staging: str
    work_dir: str
    topic_bins: int
    producer_shards: int
    state_partitions: int
    commits: TableCommits
    stopwatch: Stopwatch

    def run(self, bounds: Sequence[int | None], version: int, final: bool,
            state: ReplayState, snapshot: bool) -> None:
        """Run consecutive windows of staged messages through the emulation query
        (:mod:`pipelines.spark.emulation`: control plane per topic bin, batching per producer
        shard, dispatch per dispatcher, grouped stateful operators whose state lives in Spark's
        state store), then commit their tables, each in ONE commit per run with ``version``,
        and advance ``state``'s horizon past the last window.

        ``bounds``: the windows' upper bounds (emulated ms, exclusive; ``None`` = +∞), in order;
        the first window starts at the finalized horizon, each next one where the previous
        ended. ``final``: the last window is the end of input; ``snapshot``: write the
        ``segments`` snapshot (streaming). The windows go to the query as one feed file (one
        micro-batch); its operators write the tables' rows as Parquet files under
        ``_work/<run_id>/emulation/v=<version>/out/``, which are committed
        (:class:`TableCommits`) and then removed. The micro-batch's receipt (row counts,
        seconds) is written before any commit, so a restart after a crash finds the counts,
        re-runs an unfinished micro-batch from the state before it, and the commits skip what
        they hold (idempotent by version)."""
        settings = {r: stages.StageSettings.from_config(c, state.first_event_ms)
                    for r, c in self.configs.items()}
        windows, lo = [], state.horizon_ms
        for w, hi in enumerate(bounds):
            last = final and w == len(bounds) - 1
            # the end of input is the log's last message + 1 for every topic (not each topic's
            # own last message: a topic's end must not depend on where the windows were cut)
            end = (state.max_event_ms + 1 if last and hi is None
                   and state.max_event_ms is not None else hi)
            windows.append(stages.StageWindow(lo, end, last))
            lo = hi
        emulation = emulation_dir(self.work_dir)
        t0 = time.perf_counter()
        self.stopwatch.tick()
        # every topic with a controller has staged messages: state.staged lists them all
        # (the placement is kept once there are some: it orders the bins by them)
        if state.staged:
            placement = kept_placement(emulation, self.topic_bins, state.staged, self.staging,
                                       self.producer_shards)
            slots = Slots.of(settings, self.topic_bins, self.producer_shards,
                             max(dispatcher_count(s) for s in settings.values()),
                             self.state_partitions, placement.order, placement.loads)
            write_feed(emulation, version, windows, slots, len(state.staged), snapshot=snapshot)
            run_emulation(self.spark, emulation, self.staging, settings, slots)
            receipt = read_receipt(emulation, version)
        else:
            receipt = Receipt({}, {})
        self.stopwatch.attribute(time.perf_counter() - t0, receipt.seconds)
        out = {r: handover.out_dir(emulation, version, r) for r in settings}
        for r, counts in receipt.counts.items():
            for name, n in counts.items():
                state.lane(r).add(name, n)
        # a snapshot table replaces each run's rows (a row per segment: read back as rows)
        for kind, table in SNAPSHOT_KINDS.items():
            self.commits.rows(table, {r: read_rows(storage.join(f, kind))
                                      for r, f in out.items()}, version, replace=True)
        for kind, table in APPENDED_KINDS.items():
            self.commits.files(table, {r: storage.join(f, kind) for r, f in out.items()},
                               version)
        for r, f in out.items():  # kept for the answers at the end (the files, no commit)
            if storage.is_dir(storage.join(f, KEY_PROFILE_KIND)):
                storage.copy_dir(storage.join(f, KEY_PROFILE_KIND),
                                 key_profiles_dir(self.work_dir, r))
        remove_versions(emulation, version)
        state.horizon_ms = windows[-1].hi_ms
