"""Bucketed batching as a grouped stateful operator, keyed by ``(run_id, bin, shard)`` (grouped
by the key's slot, :mod:`pipelines.spark.placement`).

The Spark layer of batching: the rule is :mod:`pipelines.core.batching`, a topic's producers
through it (both engines) :func:`pipelines.engine.stages.batch_topic`; this module only keys,
reads, keeps state and writes.

A producer shard (:func:`pipelines.spark.handover.producer_shard`) holds some of a topic's
producers; their (producer, segment) containers are independent of other producers' (reference
§7: a container is one producer's), so a hot topic's batching spreads over as many tasks as it
has shards; a topic bin (:func:`pipelines.storage.staging.topic_bin`) groups topics, so a key
holds a shard of each of its topics, each topic's state in a ``MapState`` entry
(:class:`pipelines.spark.handover.TopicStates`). Per window in order, the operator reads the
shard's routed messages of the bin and the layouts the control plane handed over, and runs each
topic with messages in it (every topic it holds in the final window) through its containers
(:func:`pipelines.engine.stages.batch_topics`: all the shard's producers of its topics at once,
as columns; seals re-send open batches, flush tasks fire up to the window's end; a topic skipped in
a window catches up in its next call) and writes the ``messages`` and ``entries`` rows, plus the
entries dispatch needs (:data:`~pipelines.spark.handover.ENTRY_HANDOVER`), one file each.
State: per topic the shard's :class:`~pipelines.engine.stages.BatchingState` (open batches,
containers, counters).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipelines.spark.window_loop import WindowLoop, bound

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pipelines.engine.stages import StageSettings
    from pipelines.spark.handover import Outputs, TopicStates
    from pipelines.spark.placement import Slots

BATCHING_OUT_DDL = ("slot long, run_id string, bin int, dispatcher int, window int, "
                    "hi_ms long, final boolean, version long, control_s double, "
                    "batching_s double")
"""One row per (run, bin, dispatcher, window) from each shard that handed entries over (every
shard in the final window; dispatcher 0's row always): the shard's entries of the window are
handed over. Seconds travel on dispatcher 0's rows only. A run without subscriptions has the
one dispatcher ``-1`` (no dispatch; the row carries the seconds). ``slot``: dispatch's key's
(:meth:`pipelines.spark.placement.Slots.dispatch`)."""


def dispatcher_count(settings: StageSettings) -> int:
    """Dispatchers of a run (:func:`pipelines.engine.stages.new_dispatchers`: one per grouped
    subscription, one per consumer of an ungrouped one)."""
    return sum(1 if s.grouped else len(s.consumers) for s in settings.subscriptions)


class BatchingProcessor(WindowLoop):
    """``transformWithStateInPandas`` processor of batching (see the module), over
    :class:`~pipelines.spark.window_loop.WindowLoop`; arguments as its, and ``slots``: the
    replay's :class:`~pipelines.spark.placement.Slots` (dispatch's keys' slots go on the
    rows)."""

    STATE = "batching"
    KEY = ("run_id", "bin", "shard")
    OUT_COLUMNS = ("slot", "run_id", "bin", "dispatcher", "window", "hi_ms", "final", "version",
                   "control_s", "batching_s")

    def __init__(self, settings: Mapping[str, StageSettings], emulation: str,
                 slots: Slots) -> None:
        super().__init__(settings, emulation)
        self.slots = slots

    def window(self, key: tuple[Any, ...], w: Any, states: TopicStates,
               outputs: Outputs) -> bool:
        """One window of the shard: its topics with routed messages (every topic it holds in
        the final window) through their containers in one pass
        (:func:`pipelines.engine.stages.batch_topics`), the rows written, the entries handed
        over. Returns whether entries were handed over."""
        from pipelines.engine import stages  # noqa: PLC0415
        from pipelines.spark.handover import WindowFiles  # noqa: PLC0415

        run_id, b, shard = str(key[0]), int(key[1]), int(key[2])
        settings = self.settings[run_id]
        version, final, hi = int(w.version), bool(w.final), bound(w.hi_ms)
        files = WindowFiles(self.emulation, version, run_id, b, int(w.window), outputs.thread)
        routed = files.read_routed(shard)
        active = set(routed["topic"].unique()) if len(routed) else set()
        topics = sorted(active | (set(states.all_topics()) if final else set()))
        if not topics:
            return False
        layouts = files.read_layouts()
        msg, entries, blobs = stages.batch_topics(
            routed, {t: states.get(t) for t in topics}, settings.batching(),
            {t: layouts.get(t) for t in topics}, hi, final, keep_state=not final)
        for topic, blob in blobs.items():
            states.put(topic, blob)
        frame = stages.entry_frame(None, entries, settings.speed)
        outputs.writer(version).write(f"bin-{b}\x00{shard}", {"msg": msg, "entry": frame})
        if not len(frame):
            return False
        files.write_entries(shard, frame)
        return True

    def out_rows(self, key: tuple[Any, ...], w: Any, result: bool,
                 seconds: float) -> list[tuple[Any, ...]]:
        """A row per dispatcher when entries were handed over or in the final window, else
        dispatcher 0's only (the seconds travel on it)."""
        run_id, b = str(key[0]), int(key[1])
        dispatchers = list(range(dispatcher_count(self.settings[run_id]))) or [-1]
        final = bool(w.final)
        first = dispatchers[0]
        return [(self.slots.dispatch(run_id, b, d), run_id, b, d, int(w.window), bound(w.hi_ms),
                 final, int(w.version), float(w.control_s) if d == first else 0.0,
                 seconds if d == first else 0.0)
                for d in (dispatchers if result or final else dispatchers[:1])]
