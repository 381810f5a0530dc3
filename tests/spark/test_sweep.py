"""The sweep's pure parts: ``--grid`` parsing, scenario names, flapping and time at
``max_segments`` from ``segments`` rows, and the CLI's refusals (exit 2, before Spark)."""

from __future__ import annotations

import pandas as pd
import pytest

from jobs.replay import main
from pipelines.analysis.whatif.sweep import (
    GridAxis,
    SweepError,
    check_shared_ingest,
    flaps,
    grid_scenarios,
    parse_grid,
    settings_of,
    time_at_max_segments,
)

T0 = pd.Timestamp("2025-01-15T09:00:00Z")

ONE_RECORD = '{"topic": "t", "publish_time": 0, "payload_size": 1}\n'
"""A log of one valid record: the argument checks run on an input with content (an empty
one is refused before them)."""


def _t(s: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=s)


@pytest.mark.parametrize(("spec", "axis"), [
    ("policy.split_msg_rate_in=500,1000", GridAxis("policy.split_msg_rate_in", ("500", "1000"))),
    (" topic.bucket_budget = 4 , 8 ", GridAxis("topic.bucket_budget", ("4", "8"))),
    ("batching.mode=bucketed", GridAxis("batching.mode", ("bucketed",))),
])
def test_parse_grid_reads_key_and_values(spec, axis):
    assert parse_grid(spec) == axis


@pytest.mark.parametrize(("spec", "message"), [
    ("policy.split_msg_rate_in", "is not dotted.key=value1,value2"),
    ("=1,2", "is not dotted.key=value1,value2"),
    ("topic.bucket_budget=", "is not dotted.key=value1,value2"),
    ("topic.bucket_budget=4,,8", "empty value"),
    ("topic.bucket_budget=4,4", "a value is given twice"),
    ("input.format=json,csv", "input is read once for every scenario"),
    ("replay.speed=1,10", "replay.speed is read once for every scenario"),
    ("output.keys=raw,hashed", "output is read once for every scenario"),
])
def test_parse_grid_refuses_with_one_sentence(spec, message):
    with pytest.raises(SweepError, match=message):
        parse_grid(spec)


def test_grid_scenarios_are_the_cartesian_product_first_axis_slowest():
    scenarios = grid_scenarios([GridAxis("policy.split_msg_rate_in", ("500", "1000")),
                                GridAxis("topic.bucket_budget", ("4", "8"))])
    assert [s.name for s in scenarios] == [
        "split_msg_rate_in-500.bucket_budget-4", "split_msg_rate_in-500.bucket_budget-8",
        "split_msg_rate_in-1000.bucket_budget-4", "split_msg_rate_in-1000.bucket_budget-8"]
    assert scenarios[1].sets == ("policy.split_msg_rate_in=500", "topic.bucket_budget=8")
    assert settings_of(scenarios[1]) == {"policy.split_msg_rate_in": 500,
                                         "topic.bucket_budget": 8}


def test_grid_scenario_names_keep_axes_with_the_same_last_part_apart():
    scenarios = grid_scenarios([GridAxis("policy.max_segments", ("8",)),
                                GridAxis("policy.namespace_overrides.max_segments", ("4",))])
    assert [s.name for s in scenarios] == [
        "policy_max_segments-8.namespace_overrides_max_segments-4"]


def test_grid_scenario_names_replace_characters_a_run_id_cannot_hold():
    [s] = grid_scenarios([GridAxis("subscriptions.0.consumers.1.join", ("09:10",))])
    assert s.name == "join-09_10"


def test_grid_refuses_an_axis_given_twice():
    with pytest.raises(SweepError, match="given twice"):
        grid_scenarios([GridAxis("topic.bucket_budget", ("4",)),
                        GridAxis("topic.bucket_budget", ("8",))])


def test_check_shared_ingest_names_the_scenario_changing_an_ingest_setting():
    base = {"input": {"format": "json"}, "replay": {"speed": 1.0}}
    check_shared_ingest(base, {"a": {"input": {"format": "json"}, "replay": {"speed": 1.0}}})
    with pytest.raises(SweepError, match=r"scenario b changes replay\.speed"):
        check_shared_ingest(base, {"b": {"input": {"format": "json"},
                                         "replay": {"speed": 10.0}}})


def _segments(rows: list[tuple]) -> pd.DataFrame:
    """``segments`` rows: (id, start, end, created_by, created_s, sealed_s or None, children)."""
    return pd.DataFrame([{"topic": "t", "segment_id": i, "range_start": a, "range_end": b,
                          "created_by": by, "created_at": _t(c),
                          "sealed_at": pd.NaT if s is None else _t(s), "child_ids": kids}
                         for i, a, b, by, c, s, kids in rows])


SPLIT_THEN_MERGE = [  # 0 splits at 100 s into 1, 2; merged back into 3 at `merge_s`
    (0, 0, 65535, "initial", 0, 100, [1, 2]),
    (1, 0, 32767, "split", 100, "merge_s", [3]),
    (2, 32768, 65535, "split", 100, "merge_s", [3]),
    (3, 0, 65535, "merge", "merge_s", None, []),
]


def _split_then_merge(merge_s: float) -> pd.DataFrame:
    return _segments([tuple(merge_s if v == "merge_s" else v for v in r)
                      for r in SPLIT_THEN_MERGE])


@pytest.mark.parametrize(("merge_s", "window_s", "expected"), [
    (400, 600, 1),    # merged back 300 s after the split: within 600 s
    (700, 600, 1),    # 600 s: the window's edge counts
    (701, 600, 0),    # 601 s: outside
    (400, 200, 0),
])
def test_flaps_counts_a_split_undone_by_a_merge_within_the_window(merge_s, window_s, expected):
    assert flaps(_split_then_merge(merge_s), window_s) == expected


def test_flaps_counts_a_merge_undone_by_a_split_within_the_window():
    segs = _segments([
        (0, 0, 32767, "initial", 0, 100, [2]),
        (1, 32768, 65535, "initial", 0, 100, [2]),
        (2, 0, 65535, "merge", 100, 250, [3, 4]),
        (3, 0, 32767, "split", 250, None, []),
        (4, 32768, 65535, "split", 250, None, []),
    ])
    assert flaps(segs, 600) == 1
    assert flaps(segs, 100) == 0


def test_flaps_ignores_a_rebucket_and_a_merge_of_another_range():
    segs = _segments([
        (0, 0, 65535, "initial", 0, 100, [1, 2]),
        (1, 0, 32767, "split", 100, 200, [3]),      # rebucketed: same range, new buckets
        (2, 32768, 65535, "split", 100, None, []),
        (3, 0, 32767, "rebucket", 200, None, []),
    ])
    assert flaps(segs, 600) == 0


def test_flaps_of_no_segments_is_zero():
    assert flaps(_segments([]).reindex(columns=["topic", "segment_id", "range_start",
                                                "range_end", "created_by", "created_at",
                                                "sealed_at", "child_ids"]), 600) == 0


def test_time_at_max_segments_sums_the_spans_at_the_maximum_up_to_the_end():
    segs = _split_then_merge(400).assign(bucket_count=4)
    # 1 segment [0, 100), 2 segments [100, 400), 1 segment from 400 on; end at 1000 s
    assert time_at_max_segments(segs, lambda t: 2, _t(1000)) == {"t": 300.0}
    assert time_at_max_segments(segs, lambda t: 1, _t(1000)) == {"t": 1000.0}
    assert time_at_max_segments(segs, lambda t: 3, _t(1000)) == {"t": 0.0}


@pytest.mark.parametrize(("args", "message"), [
    ([], "a sweep needs at least one --grid or --scenario"),
    (["--grid", "input.format=json,csv"], "input is read once for every scenario"),
    (["--grid", "topic.bucket_budget=4", "--grid", "topic.bucket_budget=8"], "given twice"),
    (["--grid", "topic.bucket_budget=4", "--scenario", "bucket_budget-4=topic.bucket_budget=4"],
     "scenario bucket_budget-4 is given twice"),
    (["--grid", "topic.bucket_budget=4", "--sweep-id", "a b"], "--sweep-id 'a b' must be"),
    (["--grid", "topic.bucket_budget=4", "--flap-window-s", "0"], "--flap-window-s must be > 0"),
    (["--grid", "topic.bucket_budget=0,4"], "scenario bucket_budget-0: "),
])
def test_sweep_cli_refuses_bad_arguments_before_spark(tmp_path, capsys, args, message):
    (tmp_path / "log.json").write_text(ONE_RECORD)
    code = main(["sweep", "--input", str(tmp_path / "log.json"), "--output",
                 str(tmp_path / "out"), *args])
    assert code == 2
    assert message in capsys.readouterr().err
