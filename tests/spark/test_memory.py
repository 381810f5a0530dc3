"""Bounded memory (docs/design.md invariant 7, issue #4): the driver's memory does not grow with the
number of messages. Two batch replays — 1 M and 5 M generated messages, same rate, five times
the duration — each in a fresh process with ``spark.driver.memory=1g``; the peak driver
footprint (Python driver RSS + JVM heap used, sampled at every progress line) of the 5 M run
must stay within a small margin of the 1 M run's. Slow (minutes): ``make test-slow``.

Sizes can be lowered for a quick look with ``TOPIC_REPLAY_MEMORY_SIZES=100000,500000`` and
``TOPIC_REPLAY_MEMORY_WINDOW=50000`` (the finalization window must be below the smaller size).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipelines.workload.generator import WorkloadSpec, generate

pytestmark = [pytest.mark.slow, pytest.mark.spark]

RATE = 1000  # msg/s over 3 topics
SIZES = tuple(int(x) for x in os.environ.get("TOPIC_REPLAY_MEMORY_SIZES",
                                             "1000000,5000000").split(","))
WINDOW = int(os.environ.get("TOPIC_REPLAY_MEMORY_WINDOW", "500000"))
"""``FINALIZE_WINDOW_MESSAGES`` of both runs: the larger run must span several windows."""
MARGIN_BYTES = 150 * 2**20  # allowed growth of the peak from the small to the large run

RUNNER = textwrap.dedent("""
    import json, resource, sys
    from pipelines.contract.config import load_config
    from pipelines.contract.presets import get_preset
    from pipelines.spark.replay import Replay
    from pipelines.spark.session import build_session

    import pipelines.spark.finalization
    log, out, window = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pipelines.spark.finalization.FINALIZE_WINDOW_MESSAGES = window
    spark = build_session(app_name="memory", master="local[2]", shuffle_partitions=4,
                          extra_conf={"spark.driver.memory": "1g",
                                      "spark.ui.enabled": "false"})
    runtime = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
    heap = []

    def progress(line):
        spark.sparkContext._jvm.java.lang.System.gc()  # live heap, not uncollected garbage
        heap.append(runtime.totalMemory() - runtime.freeMemory())
        print(line, flush=True)

    cfg = load_config(None, ["replay.max_files_per_trigger=4"])
    spec = get_preset("contract").replace(format="json", speed=1.0)
    Replay(spark, cfg, spec, [log], out, "mem", progress=progress).run()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("MEMORY " + json.dumps({"python_rss": rss, "jvm_heap": max(heap)}))
""")


def _workload(messages: int) -> dict:
    return {
        "seed": 3, "start_time": "2025-01-15T00:00:00Z", "duration_s": messages // RATE,
        "format": "json", "gzip": True, "file_span_s": 600,
        "topics": [
            {"name": f"t{i}", "producers": 4, "rate": {"kind": "constant",
                                                       "msg_rate": RATE / 3},
             "keys": {"distribution": "zipf", "n_keys": 5000, "exponent": 1.0},
             "payload": {"kind": "fixed", "size": 200}}
            for i in range(3)
        ],
    }


def _peak(tmp: Path, messages: int) -> dict[str, int]:
    log = tmp / f"log-{messages}"
    generate(WorkloadSpec.model_validate(_workload(messages)), log)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", RUNNER, str(log), str(tmp / f"out-{messages}"),
                           str(WINDOW)], cwd=root, capture_output=True, text=True, check=True)
    line = [x for x in done.stdout.splitlines() if x.startswith("MEMORY ")][-1]
    return json.loads(line.removeprefix("MEMORY "))


def test_driver_memory_does_not_grow_with_message_count(tmp_path):
    small, large = (_peak(tmp_path, n) for n in SIZES)
    footprint = {k: v["python_rss"] + v["jvm_heap"] for k, v in (("small", small),
                                                                  ("large", large))}
    print(f"driver peak (python RSS + JVM heap used), bytes: {SIZES[0]:,} messages "
          f"{footprint['small']:,} {small}; {SIZES[1]:,} messages {footprint['large']:,} {large}")
    assert footprint["large"] <= footprint["small"] + MARGIN_BYTES, (small, large)
