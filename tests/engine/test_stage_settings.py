"""Consumers from config to the core specs (``StageSettings.from_config``) and to the dispatchers
(``new_dispatchers``, ``dispatch_group``): reconnects and ungrouped checkpoint consumers
(reference §7.3, §6.1). No Spark session needed."""

import pandas as pd
import pytest

from pipelines.contract.config import ConfigError, load_config
from pipelines.core.assignment import LeaveHow
from pipelines.core.layout import SegmentLayout
from pipelines.engine.stages import StageSettings, control_group, dispatch_group, new_dispatchers

FIRST_MS = 1_000_000


def _settings(subscriptions: str, speed: float = 1.0) -> StageSettings:
    cfg = load_config(None, [f"subscriptions={subscriptions}", f"replay.speed={speed}"])
    return StageSettings.from_config(cfg, int(FIRST_MS / speed))


@pytest.mark.parametrize(
    ("consumer", "speed", "expected"),
    [
        ("{name: a, reconnects: [10, 20]}", 1.0, (FIRST_MS, None, (FIRST_MS + 10_000,
                                                                    FIRST_MS + 20_000))),
        ("{name: a, reconnects: [20, 10, 10]}", 1.0, (FIRST_MS, None, (FIRST_MS + 10_000,
                                                                        FIRST_MS + 20_000))),
        ("{name: a, join: 5, leave: 30, reconnects: [10]}", 10.0,
         (100_500, 103_000, (101_000,))),
        # 0.005 s after join at speed 10 is the join's emulated millisecond: merged into it
        ("{name: a, join: 5, reconnects: [5.005]}", 10.0, (100_500, None, ())),
    ],
    ids=["offsets", "sorted-unique", "speed-compressed", "collapses-onto-join"],
)
def test_reconnects_reach_the_controller_spec_on_the_emulated_clock(consumer, speed, expected):
    c = _settings(f"[{{name: s, consumers: [{consumer}]}}]", speed).subscriptions[0].consumers[0]
    assert (c.join_ms, c.leave_ms, c.reconnects_ms) == expected


@pytest.mark.parametrize(
    ("leave", "how"),
    [("30", LeaveHow.CLOSE), ("{at: 30, how: crash}", LeaveHow.CRASH), ("null", LeaveHow.CLOSE)],
    ids=["close", "crash", "never"],
)
def test_leave_how_reaches_the_controller_and_dispatch_specs(leave, how):
    settings = _settings(f"[{{name: s, consumers: [{{name: a, leave: {leave}}}]}}]")
    assert settings.subscriptions[0].consumers[0].leave_how is how
    dispatcher = new_dispatchers(settings)[0]
    assert dispatcher._consumers["a"].spec.leave_how is how


def test_stats_updates_are_anchored_at_the_replays_first_event():
    ctl = _settings("[]").controller_settings("t")
    assert (ctl.stats_anchor_ms, ctl.stats_update_frequency_ms,
            ctl.stats_update_initial_delay_ms) == (FIRST_MS, 60_000, 60_000)


def test_reconnect_timestamp_before_offset_join_is_config_error():
    with pytest.raises(ConfigError) as info:
        _settings("[{name: s, consumers: [{name: a, join: 60, "
                  "reconnects: ['1970-01-01T00:16:50Z']}]}]")  # 10 s after the first event
    assert info.value.problems == [
        "subscriptions.0.consumers.0: every reconnect must lie after join and before leave (a "
        "reconnect at 10000 ms after the first event does not)"]


@pytest.mark.parametrize(
    ("sub", "grouped", "registers"),
    [("{name: s, type: checkpoint, grouped: false, consumers: [{name: a}]}", False, False),
     ("{name: s, type: checkpoint, consumers: [{name: a}]}", True, True),
     ("{name: s, type: stream, consumers: [{name: a}]}", True, True)],
    ids=["ungrouped-checkpoint", "grouped-checkpoint", "stream"],
)
def test_grouped_reaches_the_controller_spec(sub, grouped, registers):
    spec = _settings(f"[{sub}]").subscriptions[0]
    assert (spec.grouped, spec.registers) == (grouped, registers)


def _dispatch(subscriptions: str) -> pd.DataFrame:
    settings = _settings(subscriptions)
    layout = SegmentLayout.initial(2, 4, now_ms=FIRST_MS)
    entries = pd.DataFrame({
        "producer_name": ["p"] * 4, "segment_id": [0, 1, 0, 1], "entry_id": [0, 1, 2, 3],
        "entry_hash_min": [0, 0x4000, 0x8000, 0xC000], "num_messages": [1, 2, 3, 4],
        "payload_bytes": [10, 20, 30, 40],
        "emu_publish_ms": [FIRST_MS + 1, FIRST_MS + 2, FIRST_MS + 3, FIRST_MS + 4]})
    frames, _ = dispatch_group("t", entries, None, settings, layout, None, True)
    d = frames["dispatch"]
    return sorted(zip(d["subscription"], d["entry_id"], d["consumer_name"], strict=True))


@pytest.mark.parametrize(
    ("sub", "expected"),
    [
        # ungrouped: every consumer reads every entry of every segment, under its own name
        ("{name: cp, type: checkpoint, grouped: false, consumers: [{name: a}, {name: b}]}",
         [("cp/a", e, "a") for e in range(4)] + [("cp/b", e, "b") for e in range(4)]),
        # grouped: the coordinator gives each consumer one segment; each entry once
        ("{name: cp, type: checkpoint, consumers: [{name: a}, {name: b}]}",
         [("cp", 0, "a"), ("cp", 1, "b"), ("cp", 2, "a"), ("cp", 3, "b")]),
        # a reconnect is not a dispatch event: same rows as without it
        ("{name: cp, type: checkpoint, consumers: [{name: a, reconnects: [0.002]}, {name: b}]}",
         [("cp", 0, "a"), ("cp", 1, "b"), ("cp", 2, "a"), ("cp", 3, "b")]),
    ],
    ids=["ungrouped-readers", "grouped", "reconnect"],
)
def test_dispatch_of_checkpoint_consumers(sub, expected):
    assert _dispatch(f"[{sub}]") == expected


@pytest.mark.parametrize(
    ("tables", "counted"),
    [
        ("[messages, entries, topic_profile, findings]", True),
        ("[messages, findings]", True),
        ("[messages, topic_profile]", True),
        ("[messages, entries, segments]", False),
    ],
    ids=["both", "findings-only", "profile-only", "neither"],
)
def test_key_statistics_are_kept_only_for_the_answer_tables(tables, counted):
    cfg = load_config(None, [f"output.tables={tables}"])
    settings = StageSettings.from_config(cfg, FIRST_MS)
    routed = pd.DataFrame({"event_ms": [FIRST_MS, FIRST_MS + 5], "hash32": [7, 9],
                           "segment_hash": [7, 9], "hash_b": [1, 2], "payload_size": [10, 20],
                           "producer_name": ["p", "p"], "key": ["a", "b"],
                           "sequence_id": [0, 1]})
    _, ctl = control_group("t", routed, None, settings, FIRST_MS + 10, final=True)
    assert settings.answers is counted
    assert (ctl.key_stats is not None and ctl.key_stats.closed) is counted
