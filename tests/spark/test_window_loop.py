"""What Spark's planner pays for the emulation's processors (pipelines.spark.window_loop):
it unpickles each processor and calls its ``init`` in a Python process of its own, only to
learn the state schema, once per operator and start of the emulation query."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
from pyspark import cloudpickle

from pipelines.contract.config import load_config
from pipelines.engine import stages
from pipelines.spark.batching import BatchingProcessor
from pipelines.spark.control import ControlProcessor
from pipelines.spark.dispatch import DispatchProcessor
from pipelines.spark.placement import Slots
from pipelines.spark.window_loop import STATE_DDL, STATE_KEY_DDL, WindowLoop

SETTINGS = {"run-a": stages.StageSettings.from_config(load_config(None, []), 0)}
SLOTS = Slots.of(SETTINGS, bins=2, shards=4, dispatchers=1, partitions=2)

PROCESSORS = {
    "control": ControlProcessor(SETTINGS, "/staging", "/emulation", SLOTS),
    "batching": BatchingProcessor(SETTINGS, "/emulation", SLOTS),
    "dispatch": DispatchProcessor(SETTINGS, "/emulation"),
}

PLANNER = """
import pickle, sys
processor = pickle.loads(sys.stdin.buffer.read())
class Handle:
    def getMapState(self, name, key_schema, value_schema):
        print(name, key_schema, value_schema, sep="|")
processor.init(Handle())
print(sorted(m for m in ("pandas", "pyarrow", "pipelines.engine.stages", "pydantic")
             if m in sys.modules))
"""


@pytest.mark.parametrize("name", list(PROCESSORS))
def test_the_planner_learns_the_state_schema_without_importing_pandas_or_the_stages(
        name: str) -> None:
    processor = PROCESSORS[name]
    out = subprocess.run([sys.executable, "-c", PLANNER], input=cloudpickle.dumps(processor),
                         capture_output=True, check=True).stdout.decode().splitlines()
    assert out == [f"{processor.STATE}|{STATE_KEY_DDL}|{STATE_DDL}", "[]"]


@pytest.mark.parametrize("name", list(PROCESSORS))
def test_a_processor_unpickled_in_a_task_has_its_settings(name: str) -> None:
    processor: WindowLoop = pickle.loads(cloudpickle.dumps(PROCESSORS[name]))
    assert processor.settings == SETTINGS


def test_settings_read_on_the_driver_are_not_pickled_again() -> None:
    processor = ControlProcessor(SETTINGS, "/staging", "/emulation", SLOTS)
    assert processor.settings == SETTINGS  # unpickled once, kept
    assert pickle.loads(cloudpickle.dumps(processor)).__dict__["_settings"] is None
