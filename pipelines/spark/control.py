"""The control plane as a grouped stateful operator, keyed by ``(run_id, bin)`` (grouped by
the key's slot, :mod:`pipelines.spark.placement`): a topic bin
(:func:`pipelines.storage.staging.topic_bin`) holds many topics, each with its controller in a
``MapState`` entry (:class:`pipelines.spark.handover.TopicStates`).

Per key and micro-batch it takes the feed's window rows (:data:`FEED_DDL`), and for each window
in order reads the bin's staged messages of the window and, for each topic with messages in it
(every topic of the bin in the final window, and in a window that writes the ``segments``
snapshot), routes them and advances the controller (:func:`pipelines.engine.stages.control_group`:
load reporter, autoscale policy, layout DAG); a topic without messages is not touched (the
core is chunking-invariant: its next call catches up its ticks). The routed messages of all
the bin's topics go to the batching operator as one file per producer shard
(:func:`pipelines.spark.handover.producer_shard`), with the advanced topics' layouts. Its own
tables (``segment_load``, ``autoscale_decisions``, ``segments``) go to one file per kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from pipelines.spark.window_loop import WindowLoop, bound

if TYPE_CHECKING:
    from pipelines.engine.stages import StageSettings
    from pipelines.spark.handover import Outputs, TopicStates
    from pipelines.spark.placement import Slots

FEED_DDL = ("slot long, run_id string, bin int, window int, lo_ms long, hi_ms long, "
            "final boolean, snapshot boolean, version long")
"""One row per (run, topic bin, window) of a finalization (``slot``: the control plane's key's,
:meth:`pipelines.spark.placement.Slots.control`): the staged messages with
``lo_ms <= event_ms < hi_ms`` (null = unbounded), ``final`` = end of input, ``snapshot`` = write
the ``segments`` snapshot after it, ``version`` = the finalization's commit version."""

CONTROL_OUT_DDL = ("slot long, run_id string, bin int, shard int, window int, hi_ms long, "
                   "final boolean, version long, control_s double")
"""One row per (run, bin, producer shard, window) where the shard has routed messages (every
shard in the final window; shard 0 always): the shard's routed messages are ready. ``slot``:
batching's key's (:meth:`pipelines.spark.placement.Slots.batching`).
``control_s``: the control plane's seconds for the window (on shard 0's row only)."""


class ControlProcessor(WindowLoop):
    """``transformWithStateInPandas`` processor of the control plane (see the module), over
    :class:`~pipelines.spark.window_loop.WindowLoop`.

    ``settings``: run_id → :class:`~pipelines.engine.stages.StageSettings`; ``staging``: the
    replay's staging folder; ``emulation``: the emulation folder (:mod:`pipelines.spark.handover`);
    ``slots``: the replay's :class:`~pipelines.spark.placement.Slots` (its producer shards
    per topic, ``replay.producer_shards``; batching's keys' slots go on the rows)."""

    STATE = "controllers"
    KEY = ("run_id", "bin")
    OUT_COLUMNS = ("slot", "run_id", "bin", "shard", "window", "hi_ms", "final", "version",
                   "control_s")

    def __init__(self, settings: Mapping[str, StageSettings], staging: str,
                 emulation: str, slots: Slots) -> None:
        super().__init__(settings, emulation)
        self.staging = staging
        self.slots = slots
        self.dataset: Any = None
        self.reader: Any = None  # the task's reader thread (ThreadPoolExecutor), made in a task
        self.next_bounds: dict[tuple[int | None, int | None], tuple[int | None, int | None]] = {}
        self.ahead: dict[tuple[int | None, int | None], Any] = {}  # bounds → Future of its read
        self.producer_shards: dict[str, dict[str, int]] | None = None  # read in a task

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without a task's listing, reader thread, reads or producer shards."""
        return {**super().__getstate__(), "dataset": None, "reader": None, "ahead": {},
                "producer_shards": None}

    def kept_shards(self) -> dict[str, dict[str, int]]:
        """The placement's producer shards
        (:func:`~pipelines.spark.placement.kept_producer_shards`), read once per task: kept
        beside the checkpoint, not pickled with the processor (a plan carries it to every
        task, and Spark's planner cannot load a large one)."""
        from pipelines.spark.placement import kept_producer_shards  # noqa: PLC0415

        if self.producer_shards is None:
            self.producer_shards = kept_producer_shards(self.emulation)
        return self.producer_shards

    def windows(self, rows: Any) -> Any:
        """:meth:`WindowLoop.windows`, each window's bounds noted with the next one's (its
        read starts as the window before it is handed its messages)."""
        ordered = super().windows(rows)
        bounds = [(bound(r.lo_ms), bound(r.hi_ms)) for r in ordered.itertuples(index=False)]
        self.next_bounds = dict(pairwise(bounds))
        return ordered

    def read(self, b: int, lo: int | None, hi: int | None) -> Any:
        """Bin ``b``'s staged messages with ``lo <= event_ms < hi``
        (:func:`pipelines.storage.staging.read_bin`), read one window ahead: the next window's
        read starts on the task's reader thread as this one's is returned (Arrow reads without
        the GIL; a busy topic's control-plane task bounds its stage, and a seventh of it was
        reading)."""
        from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

        from pipelines.storage.staging import read_bin, staged_dataset  # noqa: PLC0415

        if self.dataset is None:  # the staging folder listed once per key and micro-batch
            self.dataset = staged_dataset(self.staging)
        future = self.ahead.pop((lo, hi), None)
        pdf = future.result() if future is not None else read_bin(self.dataset, b, lo, hi)
        following = self.next_bounds.get((lo, hi))
        if following is not None:
            if self.reader is None:
                self.reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reader")
            self.ahead[following] = self.reader.submit(read_bin, self.dataset, b, *following)
        return pdf

    def window(self, key: tuple[Any, ...], w: Any, states: TopicStates,
               outputs: Outputs) -> set[int]:
        """One window of the bin: its staged messages read, its active topics advanced
        (:func:`pipelines.engine.stages.control_topics`), their routed messages and layouts
        handed over, their rows written. Returns the shards that got routed messages."""
        from pipelines.engine import stages  # noqa: PLC0415
        from pipelines.spark.handover import WindowFiles  # noqa: PLC0415

        run_id, b = str(key[0]), int(key[1])
        settings = self.settings[run_id]
        final, snapshot, hi = bool(w.final), bool(w.snapshot), bound(w.hi_ms)
        pdf = self.read(b, bound(w.lo_ms), hi)
        active = set(pdf["topic"].unique()) if len(pdf) else set()
        topics = sorted(active | (set(states.all_topics()) if final or snapshot else set()))
        if not topics:
            return set()
        routed, controllers = stages.control_topics(pdf, {t: states.get(t) for t in topics},
                                                    settings, hi, final)
        result = stages.control_outputs(controllers, settings.speed, keep_state=not final)
        for topic, blob in result.states.items():
            states.put(topic, blob)
        files = WindowFiles(self.emulation, int(w.version), run_id, b, int(w.window),
                            outputs.thread)
        shards = (files.write_routed(routed, self.slots.shards, self.kept_shards())
                  if len(routed) else set())
        files.write_layouts(result.layouts)
        frames = {"sample": result.samples, "decision": result.decisions}
        if final or snapshot:
            frames["segment"] = result.segments
        frames["key_profile"] = result.key_profiles  # at end of input only
        outputs.writer(int(w.version)).write(f"bin-{b}", frames)
        return shards

    def out_rows(self, key: tuple[Any, ...], w: Any, result: set[int],
                 seconds: float) -> list[tuple[Any, ...]]:
        """A row per shard with routed messages (every shard in the final window; shard 0
        always, with the seconds)."""
        final = bool(w.final)
        run_id, b = str(key[0]), int(key[1])
        return [(self.slots.batching(run_id, b, s), run_id, b, s, int(w.window), bound(w.hi_ms),
                 final, int(w.version), seconds if s == 0 else 0.0)
                for s in (range(self.slots.shards) if final else sorted({0, *result}))]

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
        self.dataset = None  # staged files of this micro-batch: listed anew
        try:
            yield from super().handleInputRows(key, rows, timerValues)
        finally:  # the key's reads: none left running into the next key
            if self.reader is not None:
                self.reader.shutdown(wait=True, cancel_futures=True)
            self.reader, self.ahead, self.next_bounds = None, {}, {}
