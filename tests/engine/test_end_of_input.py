"""End of input is the log's last message for every topic (pipelines.engine.stages): a topic
that went quiet early ends where the log ends, whatever windows the input was cut into. On the
online-retail trace the Spark replay (two finalization windows) and the local engine (one)
differed by 74 segment_load and 56 consumer_load rows before. No Spark session needed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from pipelines.contract.config import load_config
from pipelines.engine import stages

SEC = 1000
END_MS = 900 * SEC
"""The log's last message + 1 (emulated ms): the loud topic's last message is at 900 s - 1 ms."""


def _messages(topic: str, times_ms: np.ndarray) -> pd.DataFrame:
    n = len(times_ms)
    keys = [f"k{i % 7}" for i in range(n)]
    hashes = pd.util.hash_array(np.asarray(keys, dtype=object)).astype(np.int64) & 0x7FFFFFFF
    return pd.DataFrame({
        "topic": topic, "key": keys, "producer_name": "p", "sequence_id": np.arange(n),
        "publish_time": pd.to_datetime(times_ms, unit="ms", utc=True),
        "payload_size": np.full(n, 100), "source_file": "f", "event_ms": times_ms,
        "hash32": hashes, "segment_hash": (hashes & 0xFFFF).astype(np.int32),
        "hash_b": (hashes >> 16).astype(np.int32)})


LOG = {
    # quiet after 60 s: its rates must fall to the zero record and its windows run to the end
    "quiet": _messages("quiet", np.arange(0, 60 * SEC, 50, dtype=np.int64)),
    "loud": _messages("loud", np.arange(0, END_MS, 100, dtype=np.int64)),
}


def _replay(topic: str, cuts: list[int]) -> dict[str, pd.DataFrame]:
    """``topic`` through the stages in windows cut at ``cuts`` (ms), the last one final at
    :data:`END_MS`; the rows of segment_load, consumer_load and subscription_stats."""
    settings = stages.StageSettings.from_config(
        load_config(None, ["replay.consumer_window_s=60"]), 0)
    pdf = LOG[topic]
    ctl: Any = None
    batching: bytes | None = None
    dispatch: bytes | None = None
    out: dict[str, list[pd.DataFrame]] = {"sample": [], "consumer_load": [], "window_stats": []}
    bounds = [*cuts, END_MS]
    lo = 0
    for i, hi in enumerate(bounds):
        final = i == len(bounds) - 1
        part = pdf[(pdf["event_ms"] >= lo) & (pdf["event_ms"] < hi)].reset_index(drop=True)
        r = stages.topic_group(topic, part, ctl, batching, dispatch, settings, hi, final)
        result = stages.control_outputs({topic: r.controller}, settings.speed)
        ctl, batching, dispatch = result.states[topic], r.batching, r.dispatch
        out["sample"].append(result.samples)
        for kind in ("consumer_load", "window_stats"):
            out[kind].append(r.frames[kind])
        lo = hi
    return {k: pd.concat(v, ignore_index=True) for k, v in out.items()}


@pytest.mark.parametrize("topic", ["quiet", "loud"])
@pytest.mark.parametrize("cuts", [[120 * SEC], [30 * SEC, 450 * SEC], [600 * SEC]],
                         ids=["after-quiet", "twice", "late"])
def test_tables_do_not_depend_on_where_the_windows_were_cut(topic, cuts):
    whole, cut = _replay(topic, []), _replay(topic, cuts)
    for kind in whole:
        pd.testing.assert_frame_equal(cut[kind], whole[kind], check_dtype=False)


def test_a_quiet_topics_windows_run_to_the_end_of_the_log():
    rows = _replay("quiet", [])
    assert rows["consumer_load"]["window_end"].max() == pd.Timestamp(END_MS, unit="ms", tz="UTC")
    assert rows["window_stats"]["window_end"].max() == pd.Timestamp(END_MS, unit="ms", tz="UTC")


def test_a_quiet_topics_rates_fall_to_the_zero_record_before_the_end():
    samples = _replay("quiet", [])["sample"]
    last = samples.sort_values("sample_time").iloc[-1]
    assert (last["msg_rate_in"], last["bytes_rate_in"]) == (0.0, 0.0)
    assert last["sample_time"] < pd.Timestamp(END_MS, unit="ms", tz="UTC")

