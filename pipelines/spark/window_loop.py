"""The window loop the emulation's three operators share (docs/architecture.md, "Emulation
query"): each is a thin processor of one window of one key, this loop the rest.

Per key and micro-batch, :class:`WindowLoop` takes the key's rows (one or more per window),
puts them in window order (:meth:`WindowLoop.windows`), and for each window calls the
operator's :meth:`WindowLoop.window` with the key's per-topic states
(:class:`pipelines.spark.handover.TopicStates` over the operator's ``MapState``) and its table
output (:class:`pipelines.spark.handover.Outputs`), timing it; then it closes the output files,
writes back the states the windows changed, and yields the operator's rows
(:meth:`WindowLoop.out_rows`: what the next operator, or the receipt sink, is told).

Imports of pandas, pyarrow, the stages and the config are inside the methods, here and in the
operator modules (issue #31): Spark unpickles each processor on the driver at planning time,
in a Python process of its own, and calls its ``init`` only to learn its state schema;
importing the module must not load what only the windows use (1.7-3 s of imports per operator
module on this machine under load, ``python -X importtime``; 16 ms now beyond pyspark's own).
For the same reason the processor carries its settings pickled (unpickling a
:class:`~pipelines.engine.stages.StageSettings` imports the stages, pandas, pyarrow and the
config: about 0.5 s of CPU per operator, three times per start of the emulation query) and
the state's schema is defined here, not in :mod:`pipelines.spark.handover` (pandas, pyarrow).
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pyspark.sql.streaming.stateful_processor import StatefulProcessor

if TYPE_CHECKING:
    import pandas as pd

    from pipelines.engine.stages import StageSettings
    from pipelines.spark.handover import Outputs, TopicStates

STATE_DDL = "format int, blob binary"
"""Schema of every operator's state values: the blob's format and the blob."""

STATE_KEY_DDL = "topic string"
"""Schema of the operators' ``MapState`` keys: the topic."""


class WindowLoop(StatefulProcessor):
    """``transformWithStateInPandas`` processor running its windows in order (see the module),
    grouped by a slot (:mod:`pipelines.spark.placement`): its key is the :attr:`KEY` columns
    of its rows.

    ``settings``: run_id → :class:`~pipelines.engine.stages.StageSettings`; ``emulation``: the
    emulation folder (:mod:`pipelines.spark.handover`). Subclasses set :attr:`STATE` (their
    ``MapState``'s name), :attr:`OUT_COLUMNS` (their output rows' columns) and implement
    :meth:`window` and :meth:`out_rows`."""

    STATE: ClassVar[str]
    KEY: ClassVar[tuple[str, ...]]
    """The input columns naming the key (``run_id``, ``bin``, ...): Spark groups by the key's
    slot (:mod:`pipelines.spark.placement`), every row of a slot carries them."""
    OUT_COLUMNS: ClassVar[tuple[str, ...]]
    OUT_TYPES: ClassVar[Mapping[str, str]] = {"hi_ms": "Int64"}
    """Output columns cast before yielding (a nullable bound as a nullable long)."""

    def __init__(self, settings: Mapping[str, StageSettings], emulation: str) -> None:
        self._settings_blob = pickle.dumps(dict(settings))  # see the module: unpickled on use
        self._settings: dict[str, StageSettings] | None = None
        self.emulation = emulation

    @property
    def settings(self) -> dict[str, StageSettings]:
        """run_id → :class:`~pipelines.engine.stages.StageSettings`, unpickled on first use
        (in a task, not when Spark's planner unpickles the processor)."""
        if self._settings is None:
            self._settings = pickle.loads(self._settings_blob)
        return self._settings

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the unpickled settings (the blob carries them)."""
        return {**self.__dict__, "_settings": None}

    def init(self, handle: Any) -> None:
        self.state = handle.getMapState(self.STATE, STATE_KEY_DDL, STATE_DDL)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        import pandas as pd  # noqa: PLC0415

        from pipelines.ingest.privacy import withheld_columns  # noqa: PLC0415
        from pipelines.spark.handover import Outputs, TopicStates  # noqa: PLC0415

        given = pd.concat(list(rows), ignore_index=True)
        key = tuple(given[c].iloc[0] for c in self.KEY)
        run_id = str(key[0])
        windows = self.windows(given)
        states = TopicStates(self.state)
        outputs = Outputs(self.emulation, run_id,
                          withheld_columns(self.settings[run_id].config))
        done: list[tuple[Any, Any, float]] = []
        for w in windows.itertuples(index=False):
            t0 = time.perf_counter()
            done.append((w, self.window(key, w, states, outputs), time.perf_counter() - t0))
        t0 = time.perf_counter()
        outputs.close()  # the writes still queued: the last window's seconds
        if done:
            done[-1] = (*done[-1][:2], done[-1][2] + time.perf_counter() - t0)
        states.save()
        out = [row for w, result, seconds in done
               for row in self.out_rows(key, w, result, seconds)]
        frame = pd.DataFrame(out, columns=list(self.OUT_COLUMNS))
        yield frame.astype({c: t for c, t in self.OUT_TYPES.items() if c in frame.columns})

    def windows(self, rows: pd.DataFrame) -> pd.DataFrame:
        """The key's rows of the micro-batch as one row per window, in window order (default:
        the rows sorted by ``window``, stable)."""
        return rows.sort_values("window", kind="stable")

    def window(self, key: tuple[Any, ...], w: Any, states: TopicStates,
               outputs: Outputs) -> Any:
        """Process window ``w`` (a row of :meth:`windows`) of ``key``; the result goes to
        :meth:`out_rows`."""
        raise NotImplementedError

    def out_rows(self, key: tuple[Any, ...], w: Any, result: Any,
                 seconds: float) -> list[tuple[Any, ...]]:
        """The output rows (:attr:`OUT_COLUMNS`) of window ``w`` given :meth:`window`'s
        ``result`` and its ``seconds``."""
        raise NotImplementedError

    def close(self) -> None:
        pass


def bound(value: Any) -> int | None:
    """A nullable ms bound of a window row as an int (``None`` = unbounded)."""
    import pandas as pd  # noqa: PLC0415

    return None if value is None or pd.isna(value) else int(value)
