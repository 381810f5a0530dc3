"""Crash-test fault points (tests only; docs/guarantees.md).

When the environment variable :data:`FAULT_ENV` equals a fault point's name, the process
SIGKILLs itself there. Points: ``after_staging:<batch>``, ``after_quarantine:<batch>``,
``after_state:<batch>`` (between the replay's state commit and Spark's checkpoint commit),
``after_write:<table>:<batch|final>`` (after that table's Delta commit),
``adopted:<table>`` (files moved into the table, their commit not yet made:
``pipelines.storage.delta.DeltaStore._adopt``; the first adoption into that table),
``before_final_state`` (finalization written, state not yet saved), and in the emulation
query's sink ``before_receipt:<batch|final>`` (operators done, nothing recorded: the
micro-batch re-runs) and ``after_receipt:<batch|final>`` (receipt written, Spark's commit of
the micro-batch not yet: it re-runs on the next start).
"""

from __future__ import annotations

import os
import signal

FAULT_ENV = "TOPIC_REPLAY_FAULT"
"""The environment variable naming the fault point to die at."""


def fault(point: str) -> None:
    """SIGKILL this process when :data:`FAULT_ENV` names ``point``."""
    if os.environ.get(FAULT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
