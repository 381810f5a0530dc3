"""Dispatch as a grouped stateful operator, keyed by ``(run_id, bin, dispatcher)`` (grouped by
the key's slot, :mod:`pipelines.spark.placement`).

A dispatcher (one subscription, or one consumer's cursor of an ungrouped checkpoint
subscription: :func:`pipelines.engine.stages.new_dispatchers`) sees every entry of its topic; a
key holds that dispatcher of every topic of its bin, each topic's state in a ``MapState`` entry
(:class:`pipelines.spark.handover.TopicStates`). Per window in order it reads the entries all
producer shards of the bin handed over (the batching stage of the same micro-batch has
finished: a shuffle lies between) and the window's layouts, and feeds each topic with entries
(every topic of the bin in the final window) to :func:`pipelines.engine.stages.dispatch_topics`
(drains on seals, bucket handoffs, consumers; a topic skipped in a window catches up in its next
call). Its tables (``dispatch``, ``consumer_load``, ``bucket_handoffs``, ``subscription_stats``,
``segment_drains``) go to one file per kind. State: per topic the pickled dispatcher and the
last layout change it has seen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipelines.spark.window_loop import WindowLoop, bound

if TYPE_CHECKING:
    import pandas as pd

    from pipelines.spark.handover import Outputs, TopicStates

DISPATCH_OUT_DDL = ("run_id string, bin int, dispatcher int, window int, version long, "
                    "control_s double, batching_s double, dispatch_s double")
"""One row per (run, bin, dispatcher, window) it got: the window is dispatched; the stages'
seconds (the driver's timings)."""


class DispatchProcessor(WindowLoop):
    """``transformWithStateInPandas`` processor of dispatch (see the module), over
    :class:`~pipelines.spark.window_loop.WindowLoop`; arguments as its."""

    STATE = "dispatchers"
    KEY = ("run_id", "bin", "dispatcher")
    OUT_COLUMNS = ("run_id", "bin", "dispatcher", "window", "version", "control_s",
                   "batching_s", "dispatch_s")

    def windows(self, rows: pd.DataFrame) -> pd.DataFrame:
        """One row per window (a row came from each shard): its seconds summed, its bounds
        from any row."""
        return rows.groupby("window", sort=True).agg(
            hi_ms=("hi_ms", "first"), final=("final", "first"), version=("version", "first"),
            control_s=("control_s", "sum"), batching_s=("batching_s", "sum")).reset_index()

    def window(self, key: tuple[Any, ...], w: Any, states: TopicStates,
               outputs: Outputs) -> None:
        """One window of the key: its topics with entries (every topic with a layout in the
        final window) through their dispatchers in one pass
        (:func:`pipelines.engine.stages.dispatch_topics`), the rows written. A run without
        subscriptions (dispatcher ``-1``) dispatches nothing."""
        from pipelines.engine import stages  # noqa: PLC0415
        from pipelines.spark.handover import WindowFiles  # noqa: PLC0415

        run_id, b, d = str(key[0]), int(key[1]), int(key[2])
        if d < 0:
            return
        settings = self.settings[run_id]
        version, final, hi = int(w.version), bool(w.final), bound(w.hi_ms)
        files = WindowFiles(self.emulation, version, run_id, b, int(w.window))
        entries = files.read_entries()
        if not len(entries) and not final:
            return
        layouts = files.read_layouts()
        active = set(entries["topic"].unique()) if len(entries) else set()
        topics = [t for t in sorted(active | (set(layouts) if final else set()))
                  if t in layouts]
        if not topics:
            return
        if final:  # every topic's state is read: the map's batched iterator, not a call each
            states.all_topics()
        # a topic without state gets this dispatcher alone, new (dispatcher=d)
        blobs = {topic: states.get(topic) for topic in topics}
        if len(topics) < len(active):  # entries of a topic without a layout: not dispatched
            entries = entries[entries["topic"].isin(topics)]
        frames, new_blobs = stages.dispatch_topics(entries, blobs, settings,
                                                   {t: layouts[t] for t in topics}, hi, final,
                                                   keep_state=not final, dispatcher=d)
        for topic, blob in new_blobs.items():
            states.put(topic, blob)
        outputs.writer(version).write(f"bin-{b}\x00{d}", frames)

    def out_rows(self, key: tuple[Any, ...], w: Any, result: None,
                 seconds: float) -> list[tuple[Any, ...]]:
        """The window's row: the stages' seconds."""
        return [(str(key[0]), int(key[1]), int(key[2]), int(w.window), int(w.version),
                 float(w.control_s), float(w.batching_s), seconds)]
