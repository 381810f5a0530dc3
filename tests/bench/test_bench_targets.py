"""The scale-out target benchmark's pure helpers (bench/bench_targets.py): the workloads it
generates and the target ratios it reports. No timing is asserted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from pipelines.workload.generator import load_spec

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_targets", ROOT / "bench" / "bench_targets.py")
assert _spec is not None and _spec.loader is not None
targets: Any = importlib.util.module_from_spec(_spec)
sys.modules["bench_targets"] = targets
_spec.loader.exec_module(targets)

BASE = load_spec(ROOT / "bench" / "workload.yaml")


def _run(spark: float | None, local: float | None = 1.0, driver: float = 800.0) -> dict[str, Any]:
    sp = ({"status": "ok", "wall_s": spark, "rss_mb": {"driver": driver}} if spark is not None
          else {"status": "failed (exit 1): boom", "wall_s": 3.0, "rss_mb": {"driver": driver}})
    return {"spark": sp, "local": {"status": "ok", "wall_s": local} if local else {}}


@pytest.mark.parametrize(
    ("scale", "name", "topics", "producers", "duration_s"),
    [
        (1.0, "producers-50", ["orders"], [50], 667),
        (1.0, "producers-many", ["orders"], [100_000], 667),
        (0.1, "producers-many", ["orders"], [10_000], 67),
        (0.0001, "producers-many", ["orders"], [50], 1),
        (1.0, "hot-1-topic", ["hot"], [50], 2158),
        (1.0, "hot-3-topics", ["hot-0", "hot-1", "hot-2"], [17, 17, 16], 2158),
        (0.1, "hot-3-topics", ["hot-0", "hot-1", "hot-2"], [17, 17, 16], 216),
        (1.0, "topics-3", ["t00000", "t00001", "t00002"], [2, 2, 2], 600),
    ],
)
def test_target_specs_shape_the_issue_workloads(scale: float, name: str, topics: list[str],
                                                producers: list[int], duration_s: int) -> None:
    spec = targets.target_specs(scale, BASE)[name]
    assert [t.name for t in spec.topics] == topics
    assert [len(t.producer_names) for t in spec.topics] == producers
    assert spec.duration_s == duration_s


def test_hot_topic_pair_has_the_same_total_rate_producers_and_keys() -> None:
    specs = targets.target_specs(1.0, BASE)
    one, three = specs["hot-1-topic"], specs["hot-3-topics"]
    assert sum(t.rate.msg_rate for t in three.topics) == pytest.approx(one.topics[0].rate.msg_rate)
    assert sorted(p for t in three.topics for p in t.producer_names) == \
        sorted(one.topics[0].producer_names)
    assert {t.keys for t in three.topics} == {one.topics[0].keys}


@pytest.mark.parametrize("text", ["0", "-1", "11", "abc"])
def test_parse_scale_refuses_out_of_range_or_non_numbers(text: str) -> None:
    with pytest.raises(ValueError, match="--targets-scale"):
        targets.parse_scale(text)


@pytest.mark.parametrize("topics", [3, 1000, 10_000])
def test_many_topics_workloads_carry_the_same_rate_over_their_topics(topics: int) -> None:
    spec = targets.target_specs(1.0, BASE)[f"topics-{topics}"]
    assert len(spec.topics) == topics
    assert sum(t.rate.msg_rate for t in spec.topics) == pytest.approx(1700.0)
    assert {len(t.producer_names) for t in spec.topics} == {2}


def test_evaluate_gives_each_ratio_slow_over_reference() -> None:
    runs = {"producers-50": _run(10.0, 2.0, 800.0), "producers-many": _run(20.0, 2.5, 880.0),
            "hot-1-topic": _run(11.0), "hot-3-topics": _run(10.0),
            "topics-3": _run(10.0, None, 800.0), "topics-1000": _run(12.0, None),
            "topics-10000": _run(16.0, None, 1120.0),
            "cluster-1-worker": _run(20.0, None), "cluster-2-workers": _run(12.0, None)}
    got = {t["target"]: (t["value"], t["met"]) for t in targets.evaluate(runs)}
    assert got == {"many_producers_spark": (2.0, False), "many_producers_local": (1.25, True),
                   "many_producers_driver_rss": (1.1, True), "hot_topic_spark": (1.1, True),
                   "topics_1000_spark": (1.2, True), "topics_10000_spark": (1.6, False),
                   "topics_driver_rss": (1.4, False), "scale_out_2_workers": (0.6, True)}


def test_evaluate_leaves_a_target_unmeasured_when_a_side_failed() -> None:
    runs = {"hot-1-topic": _run(None), "hot-3-topics": _run(10.0)}
    hot = next(t for t in targets.evaluate(runs) if t["target"] == "hot_topic_spark")
    assert (hot["value"], hot["met"]) == (None, None)
