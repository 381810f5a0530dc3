"""The replay benchmark's pure helpers (bench/bench_replay.py): sizes, ratios, targets, the
results JSON and the py-spy summary. No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from hypothesis import given
from hypothesis import strategies as st

_PATH = Path(__file__).resolve().parents[2] / "bench" / "bench_replay.py"
_spec = importlib.util.spec_from_file_location("bench_replay", _PATH)
assert _spec is not None and _spec.loader is not None
bench: Any = importlib.util.module_from_spec(_spec)
sys.modules["bench_replay"] = bench
_spec.loader.exec_module(bench)


def _job(wall: float | None, driver_mb: float = 1000.0, status: str = "ok") -> dict[str, Any]:
    return {"status": status, "wall_s": wall,
            "rss_mb": {"driver_jvm": driver_mb - 100, "driver_python": 100.0,
                       "driver": driver_mb, "workers": 300.0, "total": driver_mb + 300}}


def _size(n: int, floor: float, spark: float, local: float | None,
          driver_mb: float = 1000.0) -> dict[str, Any]:
    loc = _job(local) if local is not None else {"status": "n/a (engine local not available)"}
    return {"size": n, "messages": n, "floor": _job(floor), "spark": _job(spark, driver_mb),
            "local": loc}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1000000,10000000", [1_000_000, 10_000_000]),
        ("1M,10M", [1_000_000, 10_000_000]),
        ("100k", [100_000]),
        ("1.5M", [1_500_000]),
        (" 200k , 200000 ", [200_000]),
        ("1_000_000", [1_000_000]),
    ],
)
def test_parse_sizes_reads_counts_with_suffixes(text: str, expected: list[int]) -> None:
    assert bench.parse_sizes(text) == expected


@pytest.mark.parametrize("text", ["ten", "1G", "", "1M,,10M", "0", "-5"])
def test_parse_sizes_rejects_what_is_not_a_count(text: str) -> None:
    with pytest.raises(ValueError, match="benchmark size"):
        bench.parse_sizes(text)


@given(st.lists(st.integers(min_value=1, max_value=10**9), min_size=1, max_size=5, unique=True))
def test_parse_sizes_round_trips_plain_integers(sizes: list[int]) -> None:
    assert bench.parse_sizes(",".join(map(str, sizes))) == sizes


@pytest.mark.parametrize(("n", "text"), [(1_000_000, "1M"), (10_000_000, "10M"),
                                         (100_000, "100k"), (1_500_000, "1.5M"), (999, "999")])
def test_label_names_sizes_like_the_issue(n: int, text: str) -> None:
    assert bench.label(n) == text


def test_size_ratios_divide_spark_wall_by_floor_and_in_process() -> None:
    r = bench.size_ratios(_size(1_000_000, floor=20.0, spark=100.0, local=50.0))
    assert r == {"replay_over_floor": 5.0, "spark_over_local": 2.0, "throughput_msg_s": 10000.0,
                 "default_over_delta_rs": None, "delta_write_share": None,
                 "answers_cost": None}


def test_size_ratios_are_none_without_an_in_process_run() -> None:
    r = bench.size_ratios(_size(1_000_000, floor=20.0, spark=100.0, local=None))
    assert r["spark_over_local"] is None
    assert r["replay_over_floor"] == 5.0


def test_size_ratios_ignore_a_failed_job() -> None:
    s = _size(1_000_000, floor=20.0, spark=100.0, local=50.0)
    s["local"]["status"] = "failed (exit 137): Killed"
    assert bench.size_ratios(s)["spark_over_local"] is None


def test_scale_ratios_compare_largest_with_smallest_size() -> None:
    sizes = [_size(10_000_000, 60.0, 1250.0, None, driver_mb=1320.0),
             _size(1_000_000, 30.0, 100.0, None, driver_mb=1200.0)]
    assert bench.scale_ratios(sizes) == {"from": 1_000_000, "to": 10_000_000,
                                         "throughput_ratio": 0.8, "driver_rss_ratio": 1.1}


def test_scale_ratios_need_two_finished_sizes() -> None:
    sizes = [_size(1_000_000, 30.0, 100.0, None), _size(10_000_000, 60.0, 100.0, None)]
    sizes[1]["spark"]["status"] = "failed (exit 1): boom"
    assert bench.scale_ratios(sizes)["throughput_ratio"] is None


@pytest.mark.parametrize(
    ("spark", "local", "met"),
    [
        (60.0, 90.0, [True, True]),     # 3x floor exactly, faster than in-process
        (61.0, 60.0, [False, False]),   # above 3x floor, slower than in-process
    ],
)
def test_evaluate_targets_judges_the_largest_size(spark: float, local: float,
                                                  met: list[bool]) -> None:
    sizes = [_size(1_000_000, 5.0, 1000.0, 1.0), _size(10_000_000, 20.0, spark, local)]
    targets = bench.evaluate_targets(sizes, bench.scale_ratios(sizes))
    assert [t["met"] for t in targets[:2]] == met
    assert {t["measured_at"] for t in targets[:2]} == {"10M"}


@pytest.mark.parametrize(
    ("spark_10m", "met"),
    [
        (330.0, True),    # 10x the messages in 3.3x the time: 3.03x the msg/s
        (340.0, False),   # 10x the messages in 3.4x the time: 2.94x the msg/s
    ],
)
def test_throughput_target_asks_10m_for_3x_the_msg_per_s_of_1m(spark_10m: float,
                                                              met: bool) -> None:
    sizes = [_size(1_000_000, 5.0, 100.0, None), _size(10_000_000, 50.0, spark_10m, None)]
    targets = bench.evaluate_targets(sizes, bench.scale_ratios(sizes))
    throughput = next(t for t in targets if t["target"].startswith("throughput"))
    assert (throughput["limit"], throughput["met"]) == (3.0, met)


def test_evaluate_targets_reports_unmeasured_targets_as_none() -> None:
    sizes = [_size(1_000_000, 5.0, 10.0, None)]
    targets = bench.evaluate_targets(sizes, bench.scale_ratios(sizes))
    assert [t["met"] for t in targets] == [True, None, None, None, None, None, None]


def test_results_document_is_json_with_sizes_scale_targets() -> None:
    sizes = [_size(1_000_000, 20.0, 60.0, 30.0), _size(10_000_000, 100.0, 500.0, 400.0)]
    doc = json.loads(json.dumps(bench.results_document(sizes, {"cpus": 2})))
    assert set(doc) == {"benchmark", "machine", "sizes", "scale", "fixed", "targets", "profile"}
    assert doc["sizes"][1]["ratios"] == {"replay_over_floor": 5.0, "spark_over_local": 1.25,
                                         "throughput_msg_s": 20000.0,
                                         "default_over_delta_rs": None,
                                         "delta_write_share": None, "answers_cost": None}
    assert doc["scale"]["throughput_ratio"] == 1.2
    assert len(doc["targets"]) == 7


def test_format_report_prints_na_for_a_missing_engine() -> None:
    doc = bench.results_document([_size(1_000_000, 20.0, 60.0, None)], {})
    text = bench.format_report(doc)
    assert "n/a (engin" in text
    assert "3.00x" in text


def test_summarize_pyspy_raw_counts_own_and_total_samples() -> None:
    raw = ("process 1:\"python\";main (jobs/replay.py:10);add (pipelines/core/batching.py:5) 3\n"
           "process 1:\"python\";main (jobs/replay.py:12);hash (pipelines/core/hashing.py:9) 1\n")
    out = bench.summarize_pyspy_raw(raw)
    assert out["samples"] == 4
    assert out["self"][0] == ["add (pipelines/core/batching.py)", 0.75]
    assert ["main (jobs/replay.py)", 1.0] in out["total"]


def test_local_memory_estimate_scales_the_largest_smaller_finished_size() -> None:
    done = [_size(100_000, 5.0, 10.0, 2.0), _size(1_000_000, 5.0, 10.0, 20.0)]
    done[1]["local"]["rss_mb"]["total"] = 2000.0
    assert bench.local_memory_estimate_mb(10_000_000, done) == 20000.0


def test_local_memory_estimate_is_none_without_a_smaller_in_process_run() -> None:
    done = [_size(1_000_000, 5.0, 10.0, None)]
    assert bench.local_memory_estimate_mb(10_000_000, done) is None


def test_evaluate_targets_judges_in_process_where_both_engines_finished() -> None:
    sizes = [_size(1_000_000, 5.0, 30.0, 10.0), _size(10_000_000, 20.0, 60.0, None)]
    targets = bench.evaluate_targets(sizes, bench.scale_ratios(sizes))
    assert (targets[1]["measured_at"], targets[1]["value"], targets[1]["met"]) == ("1M", 3.0,
                                                                                    False)
    assert targets[0]["measured_at"] == "10M"


def test_read_stage_timings_reads_the_runs_table_and_computes_other(tmp_path: Path) -> None:
    timings = {"wall_s": 100.0, "ingest_hash_s": 10.0, "control_plane_s": 20.0,
               "batching_s": 30.0, "dispatch_s": 5.0, "delta_write_s": 15.0}
    write_deltalake(str(tmp_path / "runs"), pa.table({
        "run_id": ["other", "bench-1M"],
        "timings": [json.dumps({"wall_s": 1.0}), json.dumps(timings)],
        "counts": ["{}", json.dumps({"accepted": 7})]}))
    assert bench.read_stage_timings(tmp_path, "bench-1M") == {
        "ingest_hash": 10.0, "control_plane": 20.0, "batching": 30.0, "dispatch": 5.0,
        "delta_write": 15.0, "wall": 100.0, "other": 20.0}
    assert bench.read_counts(tmp_path, "bench-1M") == {"accepted": 7}


@pytest.mark.parametrize(("walls", "statuses", "picked"), [
    ([9.0, 7.0, 8.0], ["ok", "ok", "ok"], 8.0),            # the middle one
    ([7.0, 8.0], ["ok", "ok"], 7.0),                       # even count: the lower middle
    ([7.0, 8.0, 6.0], ["ok", "failed (exit 1): x", "ok"], 8.0),  # a failure is reported
])
def test_median_run_picks_the_median_wall_and_keeps_every_wall(
        walls: list[float], statuses: list[str], picked: float) -> None:
    runs = [{"status": st, "wall_s": w} for w, st in zip(walls, statuses, strict=True)]
    r = bench.median_run(runs)
    assert (r["wall_s"], r["wall_s_runs"]) == (picked, walls)


class _Proc:
    """The two things :func:`peak_rss` asks of a ``psutil.Process``."""

    def __init__(self, pid: int, rss: int) -> None:
        self.pid, self._rss = pid, rss

    def memory_info(self) -> Any:
        return type("MemInfo", (), {"rss": self._rss})()


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="no /proc (not Linux)")
def test_peak_rss_reads_the_kernel_high_water_mark() -> None:
    vm = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    current = int(vm["VmRSS"].split()[0]) * 1024
    assert bench.peak_rss(_Proc(os.getpid(), rss=1)) >= current


def test_peak_rss_falls_back_to_the_current_rss_without_a_status_file() -> None:
    assert bench.peak_rss(_Proc(pid=2**31 - 1, rss=12345)) == 12345


def _with_engines(size: dict[str, Any], default_wall: float, writes: float,
                  rs_wall: float | None) -> dict[str, Any]:
    """``size`` whose default Spark replay (delta-spark) took ``default_wall`` replay seconds
    with ``writes`` of Delta writes, next to a delta-rs replay of ``rs_wall`` (None: not run)."""
    stages = dict.fromkeys(bench.STAGES, 1.0)
    size["spark"].update(engine="delta-spark",
                         stages_s={**stages, "delta_write": writes, "wall": default_wall})
    size["spark_delta_rs"] = ({"status": "n/a (the default engine is delta-rs)"}
                              if rs_wall is None else
                              {**_job(rs_wall + 10), "engine": "delta-rs",
                               "stages_s": {**stages, "wall": rs_wall}})
    return size


def test_size_ratios_compare_the_default_engines_replay_wall_with_delta_rs() -> None:
    size = _with_engines(_size(1_000_000, 20.0, 100.0, None), 90.0, 9.0, 60.0)
    r = bench.size_ratios(size)
    assert (r["default_over_delta_rs"], r["delta_write_share"]) == (1.5, 0.1)


@pytest.mark.parametrize(("default_wall", "rs_wall", "met"),
                         [(75.0, 60.0, True), (76.0, 60.0, False)])
def test_engine_targets_judge_the_default_engine_at_every_size(default_wall: float,
                                                               rs_wall: float,
                                                               met: bool) -> None:
    sizes = [_with_engines(_size(n, 20.0, 100.0, None), default_wall, 1.0, rs_wall)
             for n in (10_000_000, 1_000_000)]
    targets = bench.evaluate_targets(sizes, bench.scale_ratios(sizes))
    rows = [t for t in targets if "delta-rs" in t["target"]]
    assert [(t["measured_at"], t["met"]) for t in rows] == [("1M", met), ("10M", met)]


def test_engine_targets_judge_the_write_share_at_the_smallest_size() -> None:
    sizes = [_with_engines(_size(10_000_000, 20.0, 100.0, None), 100.0, 30.0, 90.0),
             _with_engines(_size(1_000_000, 20.0, 100.0, None), 100.0, 15.0, 90.0)]
    target = next(t for t in bench.evaluate_targets(sizes, bench.scale_ratios(sizes))
                  if "Delta writes" in t["target"])
    assert (target["measured_at"], target["value"], target["met"]) == ("1M", 0.15, True)


def test_fixed_cost_is_the_process_wall_minus_the_stages() -> None:
    job = {**_job(30.0), "stages_s": {**dict.fromkeys(bench.STAGES, 4.0), "wall": 22.0}}
    assert bench.fixed_cost_s(job) == 10.0
    target = bench.evaluate_targets([], bench.scale_ratios([]), job)[-1]
    assert (target["value"], target["met"]) == (10.0, True)


def test_format_report_shows_the_default_engine_next_to_delta_rs() -> None:
    doc = bench.results_document(
        [_with_engines(_size(1_000_000, 20.0, 100.0, None), 90.0, 9.0, 60.0)], {})
    line = next(ln for ln in bench.format_report(doc).splitlines() if "delta-spark" in ln)
    assert line.split()[1:4] == ["delta-spark", "90.0", "9.0"]
    assert "1.50x" in line


def _without_answers(size: dict[str, Any], wall: float | None,
                     status: str = "ok") -> dict[str, Any]:
    """``size`` with the replay without topic_profile and findings of ``wall`` replay s."""
    size["spark_no_answers"] = {**_job(wall, status=status),
                                "stages_s": {**dict.fromkeys(bench.STAGES, 1.0), "wall": wall}}
    return size


@pytest.mark.parametrize(
    ("with_answers", "without", "status", "cost", "met"),
    [
        (110.0, 100.0, "ok", 0.1, True),
        (111.0, 100.0, "ok", 0.11, False),
        (95.0, 100.0, "ok", -0.05, True),
        (110.0, 100.0, "timeout", None, None),
    ],
    ids=["at-the-limit", "over", "noise-below-zero", "failed-side"],
)
def test_answers_cost_is_the_replay_wall_over_the_one_without_answers(
        with_answers: float, without: float, status: str, cost: float | None,
        met: bool | None) -> None:
    size = _without_answers(_with_engines(_size(1_000_000, 20.0, 100.0, None), with_answers,
                                          1.0, None), without, status)
    assert bench.answers_cost(size) == cost
    target = next(t for t in bench.evaluate_targets([size], bench.scale_ratios([size]))
                  if t["target"].startswith("answers"))
    assert (target["value"], target["met"]) == (cost, met)


def test_replay_without_answers_leaves_out_only_the_two_answer_tables() -> None:
    assert set(bench.OUTPUT_TABLES) - set(bench.NO_ANSWERS_TABLES) == {"topic_profile",
                                                                      "findings"}


def test_format_report_prints_what_the_answers_add() -> None:
    size = _without_answers(_with_engines(_size(1_000_000, 20.0, 100.0, None), 104.0, 1.0,
                                          None), 100.0)
    text = bench.format_report(bench.results_document([size], {}))
    assert ("1M without topic_profile and findings: replay 100.0 s, with them 104.0 s; the "
            "answers add 4.0% (fastest of each)") in text


@pytest.mark.parametrize(
    ("with_answers", "without", "cost"),
    [
        ([11.5, 10.0], [9.7, 10.9], 0.031),
        ([10.0, None], [None, 9.5], 0.053),
        ([12.0, 10.5], [None, None], None),
    ],
    ids=["fastest-of-each", "failed-runs-left-out", "no-finished-run-without"],
)
def test_answers_cost_in_pairs_compares_the_fastest_replay_of_each_side(
        with_answers: list[float | None], without: list[float | None],
        cost: float | None) -> None:
    size = _with_engines(_size(1_000_000, 20.0, 100.0, None), 99.0, 1.0, None)
    size["answers_runs"] = {"with": with_answers, "without": without}
    assert bench.answers_cost(size) == cost


def test_answers_pairs_alternate_the_replays_with_and_without_the_answers(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    order: list[str] = []
    walls = iter([9.0, 8.5, 9.5])

    def replay(setup: Any, folder: Path, size: int, engine: str | None, messages: int,
               sets: Any = (), name: str | None = None) -> dict[str, Any]:
        order.append("without" if sets else "with")
        wall = next(walls)
        return {**_job(wall), "stages_s": {"wall": wall}}

    monkeypatch.setattr(bench, "spark_replay", replay)
    setup = bench.BenchSetup(tmp_path, tmp_path / "cli", False, "python", log=lambda _: None)
    first = {**_job(10.0), "stages_s": {"wall": 10.0}}
    result = bench.answers_pairs(setup, tmp_path, 1_000_000, 10, first)
    assert order == ["without", "with", "without"]
    assert result["answers_runs"] == {"with": [10.0, 8.5], "without": [9.0, 9.5]}
    assert result["spark_no_answers"]["stages_s"]["wall"] == 9.0
    assert bench.answers_cost(result) == -0.056
