"""``topic-replay stream``: the continuous replay picks up new files, finalizes what the watermark
has passed (``replay.allowed_lateness_s``), and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.spark.replay import Replay
from pipelines.storage.delta import DeltaStore

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
T0 = pd.Timestamp("2025-03-01T00:00:00Z")
LATENESS_S = 30


def write_log(path: Path, start_s: int, stop_s: int, step_s: int = 1) -> None:
    """One message per ``step_s`` seconds of log time in ``[start_s, stop_s)``, topic ``t``."""
    with path.open("w") as fh:
        for s in range(start_s, stop_s, step_s):
            fh.write(json.dumps({"topic": "t", "key": f"k{s % 7}", "producer_name": "p",
                                 "publish_time": (T0 + pd.Timedelta(seconds=s)).isoformat(),
                                 "payload_size": 100}) + "\n")


def start_stream(spark, folder: Path) -> tuple[Path, Replay, DeltaStore]:
    """A streaming replay (trigger 0.2 s) over the empty folder ``folder / "logs"``, writing
    under ``folder / "out"``, run id ``live``."""
    logs = folder / "logs"
    logs.mkdir()
    cfg = load_config(None, [f"replay.allowed_lateness_s={LATENESS_S}"])
    spec = get_preset("contract").replace(format="json", speed=1.0)
    replay = Replay(spark, cfg, spec, [str(logs)], str(folder / "out"), "live",
                    progress=lambda _: None)
    replay.run(stream=True, trigger_seconds=0.2)
    return logs, replay, DeltaStore(str(folder / "out"), engine="delta-rs")


@pytest.fixture
def streaming(spark, tmp_path):
    logs, replay, store = start_stream(spark, tmp_path)
    yield logs, replay, store
    replay.query.stop()


def finalized_messages(store: DeltaStore) -> pd.DataFrame:
    return store.read("messages", "live")


@pytest.fixture(scope="class")
def first_file(spark, tmp_path_factory):
    """One stream for :class:`TestFirstFile`'s tests (stopped after them, before any other
    stream starts): ``a.json`` (0..119 s) processed, and the tables as they were then
    (``messages``, ``entries``, ``dispatch``), which a test that feeds the stream more leaves
    as they were."""
    logs, replay, store = start_stream(spark, tmp_path_factory.mktemp("stream"))
    write_log(logs / "a.json", 0, 120)
    replay.query.processAllAvailable()
    tables = {t: store.read(t, "live") for t in ("messages", "entries", "dispatch")}
    yield logs, replay, store, tables
    replay.query.stop()


class TestFirstFile:
    """The tests of one stream's first file and of the file after it."""

    def test_stream_finalizes_only_what_the_watermark_has_passed(self, first_file):
        *_, tables = first_file
        published = tables["messages"]["publish_time"]
        # horizon = last publish time - lateness: messages at 0..90 s are final, 91..119 s wait
        assert published.max() < T0 + pd.Timedelta(seconds=120 - LATENESS_S)
        assert len(published) == 120 - LATENESS_S

    def test_stream_picks_up_a_new_file_and_advances_the_tables(self, first_file):
        logs, replay, store, tables = first_file
        before = len(tables["messages"])
        write_log(logs / "b.json", 120, 240)
        replay.query.processAllAvailable()
        assert before == 120 - LATENESS_S
        assert len(finalized_messages(store)) == 240 - LATENESS_S

    def test_stream_messages_arrive_in_entries_and_dispatch(self, first_file):
        *_, tables = first_file
        messages, entries = tables["messages"], tables["entries"]
        carried = int(entries["num_messages"].sum())
        # each finalized message is in a closed entry, except those still in an open batch
        assert carried == len(messages) == 120 - LATENESS_S
        # horizon = last publish time (119 s) - lateness + 1 ms = 89.001 s. An entry is dispatched
        # once the watermark is past its publish time; the last entry, closed by its max-delay timer
        # exactly at the horizon (89 s + 1 ms), waits in the dispatcher for the next window.
        horizon = T0 + pd.Timedelta(milliseconds=(119 - LATENESS_S) * 1000 + 1)
        dispatched = tables["dispatch"]
        assert entries["publish_time"].max() == horizon
        assert len(dispatched) == (entries["publish_time"] < horizon).sum() == len(entries) - 1


def _log_lines(start_s: int, stop_s: int) -> str:
    return "".join(json.dumps({"topic": "t", "key": f"k{s % 7}", "producer_name": "p",
                               "publish_time": (T0 + pd.Timedelta(seconds=s)).isoformat(),
                               "payload_size": 100}) + "\n" for s in range(start_s, stop_s))


WRITING_NAMES = ["c.json.tmp", "_c.json", ".c.json", "c.json._COPYING_"]
"""Names a file has while it is written (docs/guarantees.md): each is one the replay never
reads (a temporary suffix, Hadoop's hidden prefixes, ``hdfs dfs -put``'s ``._COPYING_``)."""


def test_files_written_in_steps_then_renamed_arrive_exactly_once(streaming):
    """The contract for files still being written (docs/guarantees.md): a name the replay
    never reads, then a rename. The stream processes everything available between each step
    of the writing; no record may be read early (part-way) or twice. One stream watches a file
    being written under each of :data:`WRITING_NAMES`, side by side in three steps (a name read
    early shows in the counts at the step it is read), then every file renamed (one micro-batch
    for all four; a file read twice shows in the counts then, or at the next file)."""
    logs, replay, store = streaming
    seconds = 120  # each file: 120 s of log time, one message a second
    for start in range(0, seconds, 40):  # three steps, the stream looking after each
        for n, writing in enumerate(WRITING_NAMES):
            with (logs / writing).open("a") as fh:
                fh.write(_log_lines(n * seconds + start, n * seconds + start + 40))
        replay.query.processAllAvailable()
        # nothing of a file being written is read
        assert replay.state.counts.get("accepted", 0) == 0, start
    for n, writing in enumerate(WRITING_NAMES):
        (logs / writing).rename(logs / f"c{n}.json")
    replay.query.processAllAvailable()
    end = len(WRITING_NAMES) * seconds
    assert replay.state.counts.get("accepted", 0) == end  # every renamed record, once
    write_log(logs / "d.json", end, end + 120)  # moves the watermark past every renamed record
    replay.query.processAllAvailable()

    published = finalized_messages(store)["publish_time"]
    assert replay.state.counts["accepted"] == end + 120
    assert replay.state.counts.get("quarantined", 0) == 0
    assert sorted(published) == [T0 + pd.Timedelta(seconds=s)
                                 for s in range(end + 120 - LATENESS_S)]


def test_stream_command_stops_cleanly_on_sigterm(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    write_log(logs / "a.json", 0, 60)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.replay", "stream", "--input", str(logs), "--output",
         str(tmp_path / "out"), "--run-id", "live", "--master", "local[1]",
         "--shuffle-partitions", "1"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # wait for the first micro-batch's progress line
            line = proc.stdout.readline() if proc.stdout else ""
            lines.append(line)
            if line.startswith("batch 0:") or (not line and proc.poll() is not None):
                break
        assert any(x.startswith("batch 0:") for x in lines), "".join(lines)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "stopped; tables under" in out
    assert len(DeltaStore(str(tmp_path / "out"), engine="delta-rs").read("quarantine",
                                                                         "live")) == 0
