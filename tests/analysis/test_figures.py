"""The Plotly figure builders of ``pipelines.analysis.figures`` and ``…sweep_figures`` on small
hand-built frames (no Spark, no browser): what each figure holds — the Pareto front's scenarios, a
heat map's z matrix, a segment's bar, the DAG's edges, a decision's hover with its reason, rates and
thresholds, the layout's decision markers, the batching histogram."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from deltalake import write_deltalake

from pipelines.analysis.figures import (
    DECISION_TOPICS,
    by_topic,
    decision_rates,
    decision_topics,
    fig_dag,
    fig_decisions,
    fig_rates,
    fig_segments,
    run_figures,
)
from pipelines.analysis.page import read_sweeps, sweeps_location, write_sweep_page
from pipelines.analysis.run_tables import RunTables
from pipelines.analysis.sweep_figures import (
    SWEEP_METRICS,
    PageError,
    fig_heatmap,
    fig_pareto,
    heatmap_grid,
    pareto_front,
    sweep_figures,
    sweep_parameters,
)
from pipelines.contract.config import load_config
from pipelines.storage.delta import DeltaStore

UTC = "UTC"
SPLIT, MERGE = "policy.split_msg_rate_in", "topic.bucket_budget"


def ts(s: str) -> pd.Timestamp:
    return pd.Timestamp(f"2025-01-15T{s}", tz=UTC)


def sweeps(rows: list[tuple[str, dict, dict]]) -> pd.DataFrame:
    """A ``sweeps`` frame: (run_id, settings, metrics) per scenario; metrics not given are 0."""
    out = []
    for run_id, settings, metrics in rows:
        out.append({"run_id": run_id, "sweep_id": "s", "settings": json.dumps(settings),
                    **dict.fromkeys(SWEEP_METRICS, 0.0), **metrics})
    return pd.DataFrame(out)


GRID_2X2 = sweeps([
    ("a500-b4", {SPLIT: 500, MERGE: 4}, {"entries_per_message": 0.9, "flaps": 1}),
    ("a500-b8", {SPLIT: 500, MERGE: 8}, {"entries_per_message": 0.8, "flaps": 2}),
    ("a1000-b4", {SPLIT: 1000, MERGE: 4}, {"entries_per_message": 0.7, "flaps": 3}),
    ("a1000-b8", {SPLIT: 1000, MERGE: 8}, {"entries_per_message": 0.6, "flaps": 4}),
])
"""2 × 2 grid: x = split (500, 1000), y = budget (4, 8)."""

GRID_2X1X2 = sweeps([
    ("p-500-4-x", {SPLIT: 500, MERGE: 4, "policy.merge_window_s": 60},
     {"entries_per_message": 1.0}),
    ("p-500-4-y", {SPLIT: 500, MERGE: 4, "policy.merge_window_s": 120},
     {"entries_per_message": 0.5}),
    ("p-1000-4-x", {SPLIT: 1000, MERGE: 4, "policy.merge_window_s": 60},
     {"entries_per_message": 0.25}),
    ("p-1000-4-y", {SPLIT: 1000, MERGE: 4, "policy.merge_window_s": 120},
     {"entries_per_message": None}),
])
"""Three parameters, budget constant: a (split, window) cell is one scenario, a (split, budget)
cell averages the windows (a missing value is left out of the mean)."""


# ---- sweeps ------------------------------------------------------------------------------------

@pytest.mark.parametrize("x, y, front", [
    ([1, 2, 3], [3, 2, 1], [True, True, True]),            # a trade-off: all optimal
    ([1, 2, 3], [1, 2, 3], [True, False, False]),          # one dominates
    ([1, 1, 2], [2, 2, 1], [True, True, True]),            # equal points are both kept
    ([1, 2, 2], [2, 1, 3], [True, True, False]),           # worse in y, equal in x
    ([np.nan, 2, 3], [0, 5, 6], [False, True, False]),     # NaN never on the front
    ([], [], []),
])
def test_pareto_front_keeps_the_points_no_other_point_dominates(x, y, front):
    assert pareto_front(x, y).tolist() == front


def test_sweep_parameters_are_the_settings_that_vary():
    assert sweep_parameters(GRID_2X2) == [SPLIT, MERGE]
    assert sweep_parameters(GRID_2X1X2) == [SPLIT, "policy.merge_window_s"]


def test_a_scenario_without_a_key_counts_as_its_own_value():
    frame = sweeps([("base", {}, {}), ("low", {SPLIT: 500}, {})])
    assert sweep_parameters(frame) == [SPLIT]
    xs, _ys, _z, run_ids, _ = heatmap_grid(frame.assign(settings=[
        json.dumps({"(all)": "all"}), json.dumps({SPLIT: 500, "(all)": "all"})]),
        SPLIT, "(all)", "flaps")
    assert xs == ["500", "(unset)"]
    assert run_ids == [["low", "base"]]


@pytest.mark.parametrize("metric, z", [
    ("entries_per_message", [[0.9, 0.7], [0.8, 0.6]]),
    ("flaps", [[1, 3], [2, 4]]),
])
def test_heatmap_grid_of_a_2x2_grid_is_the_metric_per_cell(metric, z):
    xs, ys, got, run_ids, counts = heatmap_grid(GRID_2X2, SPLIT, MERGE, metric)
    assert (xs, ys) == (["500", "1000"], ["4", "8"])  # numbers in numeric order
    assert got.tolist() == z
    assert run_ids == [["a500-b4", "a1000-b4"], ["a500-b8", "a1000-b8"]]
    assert counts.tolist() == [[1, 1], [1, 1]]


def test_heatmap_grid_averages_the_other_parameters_over_scenarios_with_a_value():
    xs, ys, z, run_ids, counts = heatmap_grid(GRID_2X1X2, SPLIT, MERGE, "entries_per_message")
    assert (xs, ys) == (["500", "1000"], ["4"])
    assert z.tolist() == [[0.75, 0.25]]
    assert run_ids == [["p-500-4-x", "p-1000-4-x"]]
    assert counts.tolist() == [[2, 2]]


def test_heatmap_grid_cell_without_a_scenario_is_nan():
    partial = GRID_2X2[GRID_2X2["run_id"] != "a1000-b8"]
    _, _, z, run_ids, counts = heatmap_grid(partial, SPLIT, MERGE, "flaps")
    assert np.isnan(z[1][1]) and run_ids[1][1] is None and counts[1][1] == 0


def test_heatmap_has_one_trace_per_metric_and_a_dropdown_showing_one():
    fig = fig_heatmap(GRID_2X2, SPLIT, MERGE)
    assert [t.name for t in fig.data] == list(SWEEP_METRICS)
    assert [t.visible for t in fig.data] == [True] + [False] * (len(SWEEP_METRICS) - 1)
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == list(SWEEP_METRICS)
    assert buttons[3].args[0]["visible"] == [k == 3 for k in range(len(SWEEP_METRICS))]
    flaps = fig.data[SWEEP_METRICS.index("flaps")]
    assert [list(r) for r in flaps.z] == [[1, 3], [2, 4]]
    assert [list(r) for r in flaps.customdata] == [["a500-b4", "a1000-b4"],
                                                   ["a500-b8", "a1000-b8"]]


@pytest.mark.parametrize("frame, says_mean", [(GRID_2X2, False), (GRID_2X1X2, True)])
def test_heatmap_title_says_when_other_parameters_are_averaged(frame, says_mean):
    fig = fig_heatmap(frame, SPLIT, MERGE)
    assert ("(mean over policy.merge_window_s)" in fig.layout.title.text) == says_mean


def test_pareto_figure_highlights_the_front_scenarios_in_x_order():
    frame = sweeps([
        ("good-batching", {SPLIT: 500}, {"entries_per_message": 0.5, "withheld_bucket_s": 9.0}),
        ("balanced", {SPLIT: 1000}, {"entries_per_message": 0.7, "withheld_bucket_s": 3.0}),
        ("dominated", {SPLIT: 2000}, {"entries_per_message": 0.8, "withheld_bucket_s": 4.0}),
        ("no-handoff", {SPLIT: 4000}, {"entries_per_message": 0.9, "withheld_bucket_s": 0.0}),
    ])
    fig = fig_pareto(frame, "entries_per_message", "withheld_bucket_s")
    others, front = fig.data
    assert [c[0] for c in front.customdata] == ["good-batching", "balanced", "no-handoff"]
    assert list(front.x) == [0.5, 0.7, 0.9]
    assert [c[0] for c in others.customdata] == ["dominated"]
    assert others.customdata[0][1] == f"{SPLIT} = 2000"


def test_pareto_figure_leaves_out_scenarios_without_a_value_and_says_so():
    frame = sweeps([("a", {SPLIT: 1}, {"drain_max_s": None}), ("b", {SPLIT: 2}, {})])
    fig = fig_pareto(frame, "entries_per_message", "drain_max_s")
    assert [c[0] for t in fig.data for c in t.customdata] == ["b"]
    assert "1 scenario(s) without a value left out" in fig.layout.title.text


@pytest.mark.parametrize("frame, titles", [
    (GRID_2X2, [f"Heat map: {MERGE} × {SPLIT}"]),
    (GRID_2X1X2, [f"Heat map: policy.merge_window_s × {SPLIT}"]),
    (sweeps([("a", {SPLIT: 1}, {}), ("b", {SPLIT: 2}, {})]), [f"Heat map: {SPLIT}"]),
    (sweeps([("only", {SPLIT: 1}, {})]), []),  # nothing varies: no heat map
])
def test_sweep_figures_are_a_heat_map_per_parameter_pair_then_two_pareto_views(frame, titles):
    got = [title for title, _ in sweep_figures(frame)]
    assert got == [*titles, "Pareto: withheld_bucket_s vs entries_per_message",
                   "Pareto: drain_max_s vs entries_per_message"]


@pytest.mark.parametrize("frame, message", [
    (sweeps([]).reindex(columns=["run_id", "settings"]), "the sweep has no scenarios"),
    (pd.DataFrame({"run_id": ["x"], "settings": ["[1, 2]"], "flaps": [0]}),
     "sweeps row x: settings '[1, 2]' is not a JSON object"),
])
def test_sweep_figures_reject_unusable_rows_in_one_sentence(frame, message):
    with pytest.raises(PageError, match=f"^{message.replace('[', '.').replace(']', '.')}$"):
        sweep_figures(frame)


# ---- one run -----------------------------------------------------------------------------------

CONFIG = load_config(None, ["policy.split_msg_rate_in=15", "policy.merge_msg_rate_in=3"])


def segment(sid: int, start: int, end: int, n: int, created: str, sealed: str | None,
            by: str, parents: list[int]) -> dict:
    return {"run_id": "r", "topic": "orders", "segment_id": sid, "range_start": start,
            "range_end": end, "bucket_count": n, "bucket_splits": [], "state":
            "SEALED" if sealed else "ACTIVE", "parent_ids": parents, "child_ids": [],
            "created_at_epoch": sid, "sealed_at_epoch": -1 if sealed is None else sid + 1,
            "created_at": ts(created), "sealed_at": ts(sealed) if sealed else pd.NaT,
            "created_by": by}


def decision(when: str, action: str, segs: list[int], reason: str,
             suppressed_by: str | None = None) -> dict:
    return {"run_id": "r", "topic": "orders", "eval_time": ts(when), "trigger": "tick",
            "action": action, "segment_ids": segs, "new_bucket_count": None,
            "reason": reason, "suppressed_by": suppressed_by, "active_segments": 1,
            "consumers": 2, "bucket_capacity": 4, "layout_epoch": 1}


def load(sid: int, when: str, rate: float) -> dict:
    return {"run_id": "r", "topic": "orders", "segment_id": sid, "sample_time": ts(when),
            "msg_rate_in": rate, "bytes_rate_in": rate * 100, "msg_rate_out": rate,
            "bytes_rate_out": rate * 100, "written": True, "modified_at": ts(when)}


@pytest.fixture
def tables() -> RunTables:
    """orders: segment 0 (whole range) splits at 09:01 into 1 and 2; 1 and 2 merge into 3 at
    09:03; a suppressed evaluation at 09:04."""
    segments = pd.DataFrame([
        segment(0, 0, 65535, 4, "09:00:00", "09:01:00", "initial", []),
        segment(1, 0, 32767, 2, "09:01:00", "09:03:00", "split", [0]),
        segment(2, 32768, 65535, 2, "09:01:00", "09:03:00", "split", [0]),
        segment(3, 0, 65535, 4, "09:03:00", None, "merge", [1, 2]),
    ])
    decisions = pd.DataFrame([
        decision("09:01:00", "split", [0], "msgRateIn"),
        decision("09:03:00", "merge", [1, 2], "cold"),
        decision("09:04:00", "none", [], "no-candidate", "merge-cooldown"),
    ])
    seg_load = pd.DataFrame([load(0, "09:00:50", 20.0), load(0, "09:01:00", 30.0),
                             load(1, "09:02:50", 1.0), load(2, "09:02:50", 2.0),
                             load(2, "09:03:10", 9.0), load(3, "09:05:00", 4.0)])
    entries = pd.DataFrame({"topic": ["orders"], "num_messages": [10],
                            "publish_time": [ts("09:05:00")], "payload_bytes": [100]})
    runs = pd.DataFrame({"run_id": ["r"], "config": [json.dumps(CONFIG.to_dict())],
                         "inputs": [["log"]], "status": ["finished"]})
    empty = pd.DataFrame({"ack_time": pd.Series([], dtype="datetime64[us, UTC]")})
    return RunTables("r", None, runs, segments, decisions, seg_load,  # type: ignore[arg-type]
                     entries, empty, pd.DataFrame(), pd.DataFrame())


def test_segments_figure_draws_each_segment_over_its_range_and_lifetime(tables):
    fig = fig_segments(tables)
    bars = {sid: (t, k) for t in fig.data for k, sid in enumerate(t.customdata)}
    trace, k = bars[2]
    assert trace.name == "split"
    assert trace.base[k] == "2025-01-15T09:01:00"
    assert trace.x[k] == 120_000  # ms, 09:01 → 09:03
    assert (trace.y[k], trace.width[k]) == (49152, 32768)  # middle and height of [32768, 65535]
    active, k3 = bars[3]
    assert active.x[k3] == 120_000  # active: up to the run's end (last entry, 09:05)
    assert "range [32768, 65535]" in trace.hovertext[k]
    assert "buckets 2" in trace.hovertext[k]


def test_dag_figure_joins_every_parent_to_its_children(tables):
    fig = fig_dag(tables)
    edges = fig.data[0]
    pairs = [(edges.y[i], edges.y[i + 1]) for i in range(0, len(edges.y), 3)]
    assert sorted(pairs) == sorted([(32767.5, 16383.5), (32767.5, 49151.5),
                                    (16383.5, 32767.5), (49151.5, 32767.5)])


def test_dag_hover_says_why_a_segment_was_created(tables):
    fig = fig_dag(tables)
    hover = {sid: h for t in fig.data[1:] for sid, h in zip(t.customdata, t.hovertext,
                                                            strict=True)}
    assert "why: split: msgRateIn (tick)" in hover[1]
    assert "why: merge: cold (tick)" in hover[3]
    assert "why: initial" in hover[0]


def test_decision_rates_are_the_highest_of_its_segments_in_the_last_sample_at_eval_time(tables):
    rates = decision_rates(tables)
    assert rates["msg_rate_in"].tolist()[:2] == [30.0, 2.0]  # 09:03:10's 9.0 comes later
    assert np.isnan(rates["msg_rate_in"].iloc[2])  # names no segment


def test_decisions_figure_marks_each_action_with_reason_rates_and_thresholds(tables):
    # the legend counts actions by reason, suppressed evaluations by what held them back
    fig = fig_decisions(tables)
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == {"split (msgRateIn ×1)", "merge (cold ×1)",
                            "suppressed (merge-cooldown ×1)"}
    split = by_name["split (msgRateIn ×1)"].hovertext[0]
    assert "reason: msgRateIn" in split
    assert "msg_rate_in 30" in split
    assert "split_msg_rate_in 15" in split
    merge = by_name["merge (cold ×1)"].hovertext[0]
    assert "merge_msg_rate_in 3" in merge and "msg_rate_in 2" in merge
    assert "suppressed by merge-cooldown" in by_name["suppressed (merge-cooldown ×1)"].hovertext[0]


def test_rates_figure_draws_each_segment_and_the_topics_thresholds(tables):
    fig = fig_rates(tables)
    assert [t.name for t in fig.data] == [f"orders segment {s}" for s in (0, 1, 2, 3)]
    assert sorted(s.y0 for s in fig.layout.shapes) == [3.0, 15.0]


def test_run_figures_are_every_figure_of_a_run_in_page_order(tables):
    assert [f.title for f in run_figures(tables)] == [
        "Segments over time", "Segments and buckets over time", "Segment DAG",
        "Auto-scale decisions", "Segment load against thresholds", "Consumers",
        "Bucket handoffs", "Sealed-segment drain", "Batching"]


# ---- the sweep page's input --------------------------------------------------------------------

def test_read_sweeps_returns_the_rows_of_one_sweep(tmp_path):

    store = DeltaStore(str(tmp_path), engine="delta-rs")
    write_deltalake(sweeps_location(store), pd.concat([GRID_2X2, GRID_2X2.assign(
        sweep_id="other", run_id=lambda f: "o-" + f["run_id"])]))
    assert read_sweeps(store, "s")["run_id"].tolist() == GRID_2X2["run_id"].tolist()


def test_read_sweeps_orders_the_rows_by_their_settings_values(tmp_path):

    store = DeltaStore(str(tmp_path), engine="delta-rs")
    write_deltalake(sweeps_location(store), GRID_2X2.iloc[::-1])  # written backwards
    assert read_sweeps(store, "s")["run_id"].tolist() == [
        "a500-b4", "a500-b8", "a1000-b4", "a1000-b8"]  # 500 < 1000 as numbers


@pytest.mark.parametrize("write, sweep_id, message", [
    (False, "s", "{root}/sweeps is not a Delta table (no sweep was written there)"),
    (True, "nope", "no sweep 'nope' in {root}/sweeps (sweeps there: s)"),
])
def test_sweep_page_of_a_missing_sweep_fails_in_one_sentence(tmp_path, write, sweep_id,
                                                             message):

    store = DeltaStore(str(tmp_path), engine="delta-rs")
    if write:
        write_deltalake(sweeps_location(store), GRID_2X2)
    with pytest.raises(PageError) as err:
        write_sweep_page(store, sweep_id, tmp_path / "page.html")
    assert str(err.value) == message.format(root=tmp_path)
    assert not (tmp_path / "page.html").exists()


# ---- many topics: a figure keeps a few series --------------------------------------------------

def _decisions(rows: list[tuple[str, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["topic", "action"])


@pytest.mark.parametrize("rows, n, expected", [
    ([("b", "split"), ("a", "none"), ("a", "none"), ("c", "merge"), ("c", "split")], 3,
     ["c", "b", "a"]),                              # most actions, then most evaluations
    ([("b", "none"), ("a", "none")], 5, ["a", "b"]),  # ties by name
    ([(f"t{i:03d}", "none") for i in range(100)], 30, [f"t{i:03d}" for i in range(30)]),
])
def test_decision_topics_are_those_that_acted_most(rows, n, expected):
    assert decision_topics(_decisions(rows), n) == expected


def test_decisions_figure_of_many_topics_draws_the_busiest_and_says_so(tables):
    many = pd.concat([tables.decisions.assign(topic=f"t{i:03d}") for i in range(40)]
                     + [tables.decisions], ignore_index=True)
    tables.decisions = many
    fig = fig_decisions(tables)
    assert len(fig.layout.yaxis.ticktext) == DECISION_TOPICS
    assert f"({DECISION_TOPICS} of 41 topics)" in fig.layout.title.text


def test_by_topic_keeps_the_busiest_topics_apart_and_the_rest_together():
    rows = pd.DataFrame({"topic": ["a", "b", "b", "c", "c", "c"], "t": [5, 4, 3, 2, 1, 0]})
    got = [(name, g["t"].tolist()) for name, g in by_topic(rows, "t", n=2)]
    assert got == [("c", [0, 1, 2]), ("b", [3, 4]), ("other topics (1)", [5])]


def test_a_split_and_a_suppressed_split_at_one_instant_are_both_visible(tables):
    split = tables.decisions[tables.decisions["action"] == "split"].iloc[[0]]
    suppressed = split.assign(action="none", reason="no-candidate",
                              suppressed_by="split-cooldown")
    tables.decisions = pd.concat([split, suppressed], ignore_index=True)

    fig = fig_decisions(tables)

    points = [(x, y) for t in fig.data for x, y in zip(t.x, t.y, strict=True)]
    assert len(set(points)) == 2  # not drawn over each other
    assert [round(y) for _, y in points] == [0, 0]  # both in the topic's row
    assert list(fig.layout.yaxis.ticktext) == [str(split["topic"].iloc[0])]
