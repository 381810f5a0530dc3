"""A replay's ``foreachBatch`` function under Spark Connect (docs/cluster.md).

Spark Connect runs the function in a Python process of the server, pickled: it cannot hold
the client's session or replay (neither pickles). :class:`RemoteBatch` holds the replay's
arguments instead and runs each micro-batch with a replay of its own on ``df.sparkSession``,
which starts from the state the previous micro-batch saved (``_work/<run_id>/state/``), as a
restart does; the client reads the state back when the query ends
(``Replay.await_query``). The micro-batches' progress lines go to the server's log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql import DataFrame

from pipelines.contract.config import ReplayConfig
from pipelines.contract.presets import InputSpec


class _Replay(Protocol):
    """What :class:`RemoteBatch` needs of a ``pipelines.spark.replay.Replay``."""

    config: ReplayConfig
    input_spec: InputSpec
    inputs: Sequence[str]
    output: str
    run_id: str
    streaming: bool
    runs: Sequence[Any]

    def _run_batch(self, raw: DataFrame, batch_id: int) -> None: ...


@dataclass(frozen=True)
class RemoteBatch:
    """The replay's arguments, and its class (pickled by name), to run a micro-batch on the
    server."""

    replay_class: Any  # pipelines.spark.replay.Replay (a reference: no import cycle)
    config: ReplayConfig
    input_spec: InputSpec
    inputs: tuple[str, ...]
    output: str
    run_id: str
    streaming: bool
    runs: tuple[Any, ...]  # a sweep's scenarios (RunSpec); () for one run

    @classmethod
    def of(cls, replay: _Replay) -> RemoteBatch:
        sweep = len(replay.runs) > 1 or replay.runs[0].run_id != replay.run_id
        return cls(type(replay), replay.config, replay.input_spec, tuple(replay.inputs),
                   replay.output, replay.run_id, replay.streaming,
                   tuple(replay.runs) if sweep else ())

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        replay: _Replay = self.replay_class(
            df.sparkSession, self.config, self.input_spec, self.inputs, self.output,
            self.run_id, streaming=self.streaming, runs=self.runs)
        replay._run_batch(df, batch_id)
