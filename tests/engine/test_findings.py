"""Tests for the run's answers (pipelines/engine/findings.py): each finding on a small generated
log built to trigger it and on one built not to, with its numbers and evidence checked against
the log and the tables; the topic profile against the log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.engine.findings import (
    DEFAULT_FLAP_WINDOW_S,
    _last_written,
    flap_events,
    format_findings,
    summary_lines,
    top_findings,
)
from pipelines.engine.local import run_local
from pipelines.storage.delta import DeltaStore
from pipelines.workload.generator import WorkloadSpec, generate


def spec(duration_s: int, rate: dict[str, Any], keys: dict[str, Any]) -> dict[str, Any]:
    return {"seed": 11, "start_time": "2025-01-15T09:00:00Z", "duration_s": duration_s,
            "format": "json", "gzip": False, "file_span_s": duration_s,
            "topics": [{"name": "t", "producers": 2, "rate": rate, "keys": keys,
                        "payload": {"kind": "fixed", "size": 100}}]}


CONSTANT_50_HOT = spec(300, {"kind": "constant", "msg_rate": 50},
                       {"distribution": "hot_set", "n_keys": 20, "hot_fraction": 0.05,
                        "hot_share": 0.8})
BURST_THEN_QUIET = spec(900, {"kind": "steps", "steps": [{"at_s": 0, "msg_rate": 40},
                                                         {"at_s": 120, "msg_rate": 5}]},
                        {"distribution": "uniform", "n_keys": 500})
CONSTANT_20 = spec(180, {"kind": "constant", "msg_rate": 20},
                   {"distribution": "uniform", "n_keys": 200})
TEN_THEN_TWELVE = spec(900, {"kind": "steps", "steps": [{"at_s": 0, "msg_rate": 10},
                                                        {"at_s": 300, "msg_rate": 12}]},
                       {"distribution": "uniform", "n_keys": 300})
FLAPPY = ["policy.split_msg_rate_in=15", "policy.merge_window_s=60",
          "policy.merge_cooldown_s=60", "policy.max_segments=2"]
SIX_CONSUMERS = {"subscriptions": [{"name": "s", "type": "stream", "consumers": [
    {"name": f"c{i}"} for i in range(6)]}]}

RUNS: dict[str, tuple[dict[str, Any], list[str], dict[str, Any] | None]] = {
    "hot": (CONSTANT_50_HOT, ["policy.split_msg_rate_in=20", "policy.merge_msg_rate_in=2"],
            None),
    "hot-hashed": (CONSTANT_50_HOT, ["policy.split_msg_rate_in=20", "policy.merge_msg_rate_in=2",
                                     "output.keys=hashed"], None),
    "hot-none": (CONSTANT_50_HOT, ["policy.split_msg_rate_in=20", "policy.merge_msg_rate_in=2",
                                   "output.keys=none"], None),
    "hot-below": (CONSTANT_50_HOT, ["policy.split_msg_rate_in=100",
                                    "policy.merge_msg_rate_in=2"], None),
    "flap": (BURST_THEN_QUIET, [*FLAPPY, "policy.merge_msg_rate_in=8"], None),
    "no-flap": (BURST_THEN_QUIET, [*FLAPPY, "policy.merge_msg_rate_in=0"], None),
    "idle": (CONSTANT_20, ["policy.max_segments=1", "policy.max_buckets_per_segment=4"],
             SIX_CONSUMERS),
    "busy": (CONSTANT_20, ["policy.max_segments=1", "policy.max_buckets_per_segment=4"],
             None),
    "blind": (TEN_THEN_TWELVE, ["policy.split_msg_rate_in=11", "policy.merge_msg_rate_in=1"],
              None),
    "clear": (TEN_THEN_TWELVE, ["policy.split_msg_rate_in=20", "policy.merge_msg_rate_in=1"],
              None),
}
"""run_id → (workload spec, --set overrides, config file content or None)."""


class Run:
    """One finished local run: its log and tables."""

    def __init__(self, root: Path, run_id: str) -> None:
        workload, sets, conf = RUNS[run_id]
        self.log_dir = root / f"log-{run_id}"
        generate(WorkloadSpec.model_validate(workload), self.log_dir)
        conf_file = None
        if conf is not None:
            conf_file = root / f"{run_id}.yaml"
            conf_file.write_text(yaml.safe_dump(conf))
        self.config = load_config(conf_file, sets)
        self.store = DeltaStore(str(root / "out"), engine="delta-rs")
        self.summary = run_local(self.config, get_preset("contract").replace(format="json"),
                                 [str(self.log_dir)], str(root / "out"), run_id,
                                 progress=lambda _: None)
        self.run_id = run_id

    def read(self, table: str) -> pd.DataFrame:
        return self.store.read(table, run_id=self.run_id)

    def log(self) -> pd.DataFrame:
        frames = [pd.read_json(f, lines=True) for f in sorted(self.log_dir.rglob("*.json*"))]
        log = pd.concat(frames, ignore_index=True)
        log["ms"] = pd.to_datetime(log["publish_time"], utc=True).astype("int64") // 1_000_000
        return log

    def findings(self, kind: str) -> list[dict[str, Any]]:
        f = self.read("findings")
        rows = f[f["finding"] == kind].to_dict("records")
        for r in rows:
            r["evidence"] = json.loads(r["evidence"])
        return rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    root = tmp_path_factory.mktemp("findings")
    cache: dict[str, Run] = {}

    class Lazy(dict):  # each scenario replayed once, when first asked for
        def __missing__(self, run_id: str) -> Run:
            cache[run_id] = Run(root, run_id)
            return cache[run_id]
    return Lazy()


@pytest.mark.parametrize(("run_id", "kind", "found"), [
    ("hot", "hot_key", True), ("hot-below", "hot_key", False),
    ("flap", "flapping", True), ("no-flap", "flapping", False),
    ("idle", "idle_consumers", True), ("busy", "idle_consumers", False),
    ("busy", "single_segment", True), ("hot", "single_segment", False),
    ("blind", "blind_spot", True), ("clear", "blind_spot", False),
])
def test_finding_is_raised_only_on_the_log_built_for_it(runs, run_id, kind, found) -> None:
    assert bool(runs[run_id].findings(kind)) is found


def test_hot_key_names_the_key_its_exact_peak_rate_and_what_no_split_relieves(runs) -> None:
    run = runs["hot"]
    (f,) = run.findings("hot_key")
    log = run.log()
    per_period = log.groupby([log["ms"] // 60_000, "key"]).size()
    peak = per_period.max()
    key = per_period.idxmax()[1]
    ev = f["evidence"]
    assert (f["severity"], f["subject"], ev["key"]) == ("high", key, key)
    assert ev["key_peak_rate"] == round(peak / 60, 3)
    assert ev["split_msg_rate_in"] == 20.0
    assert ev["unrelievable_rate"] == round(peak / 60 - 20, 3)
    decisions = run.read("autoscale_decisions")
    assert ev["splits"] == int((decisions["action"] == "split").sum()) > 0
    assert f["at"] == pd.Timestamp(per_period.xs(key, level="key").idxmax() * 60_000,
                                   unit="ms", tz="UTC")
    assert f["reference"] == "§1.2, §2.3, §4.3 step 2, §5.1"
    assert f"{peak / 60:,.1f} msg/s" in f["message"]


def test_flapping_counts_the_flaps_and_times_the_first(runs) -> None:
    run = runs["flap"]
    (f,) = run.findings("flapping")
    events = flap_events(run.read("segments"), DEFAULT_FLAP_WINDOW_S)
    decisions = run.read("autoscale_decisions")
    first_split = decisions.loc[decisions["action"] == "split", "eval_time"].min()
    first_merge = decisions.loc[decisions["action"] == "merge", "eval_time"].min()
    ev = f["evidence"]
    assert (f["severity"], ev["flaps"], ev["first_kind"]) == ("medium", len(events),
                                                             "split-merge")
    assert f["at"] == first_split
    assert ev["seconds_between"] == (first_merge - first_split).total_seconds()
    assert run.read("topic_profile")["flaps"].tolist() == [len(events)]


def test_idle_consumers_are_those_beyond_the_bucket_capacity(runs) -> None:
    run = runs["idle"]
    (f,) = run.findings("idle_consumers")
    ev = f["evidence"]
    assert (ev["consumers"], ev["idle"], ev["bucket_capacity"], ev["active_segments"]) == \
        (6, 2, 4, 1)
    assert ev["idle_consumers"] == ["c4", "c5"]  # §6.3: the sorted consumers after the owners
    assert ev["cause"] == "bucket budget"
    delivered = run.read("consumer_load").groupby("consumer_name")["messages"].sum()
    assert set(delivered[delivered > 0].index) == {"c0", "c1", "c2", "c3"}
    assert run.read("topic_profile")["idle_consumers"].tolist() == [2]


def test_single_segment_reports_the_peak_against_the_split_threshold(runs) -> None:
    run = runs["busy"]
    (f,) = run.findings("single_segment")
    peak = run.read("segment_load")["msg_rate_in"].max()
    assert f["severity"] == "info"
    assert f["evidence"]["peak_msg_rate_in"] == pytest.approx(peak)
    assert f["evidence"]["split_msg_rate_in"] == 10_000.0


def test_blind_spot_shows_a_rate_over_the_threshold_the_reporter_did_not_write(runs) -> None:
    run = runs["blind"]
    (f,) = run.findings("blind_spot")
    ev = f["evidence"]
    assert (f["severity"], ev["side"], ev["threshold"]) == ("low", "split", 11.0)
    assert ev["stored_rate"] <= 11.0 < ev["current_rate"]
    assert ev["current_rate"] <= ev["stored_rate"] * 1.25  # inside the material-change gate
    samples = run.read("segment_load").sort_values("sample_time")
    stored = samples["msg_rate_in"].where(samples["written"]).ffill()
    hidden = samples[(samples["msg_rate_in"] > 11.0) & (stored <= 11.0)]
    assert ev["samples"] == len(hidden) > 0
    assert f["at"] == hidden["sample_time"].min()


def test_topic_profile_counts_match_the_log(runs) -> None:
    run = runs["hot"]
    log = run.log()
    (p,) = run.read("topic_profile").to_dict("records")
    assert (p["messages"], p["bytes"], p["producers"]) == \
        (len(log), int(log["payload_size"].sum()), log["producer_name"].nunique())
    assert (p["distinct_keys"], p["distinct_keys_exact"]) == (log["key"].nunique(), True)
    counts = log["key"].value_counts()
    assert p["top_key_messages"][0] == counts.iloc[0]  # 20 keys: counted exactly
    assert p["key_count_error"] == 0
    entries = run.read("entries")
    assert p["entries_per_message"] == round(len(entries) / len(log), 6)
    assert p["hot_key_vs_split"] == pytest.approx(p["hot_key_peak_rate"] / 20)


def test_summary_prints_the_top_findings_most_severe_first(runs) -> None:
    run = runs["idle"]
    lines, total = top_findings(run.store, "idle")
    assert total == len(run.read("findings")) == 2
    assert lines[0].startswith("[medium] t: ")  # idle_consumers
    assert lines[1].startswith("[info] t: ")  # single_segment
    assert format_findings(lines, total)[:2] == ["  findings (2 in the findings table):",
                                                 f"    {lines[0]}"]


def finding(topic: str, kind: str, severity: str, **evidence: Any) -> dict[str, Any]:
    return {"topic": topic, "finding": kind, "severity": severity, "at": None,
            "subject": None, "message": f"{kind} on {topic}",
            "evidence": json.dumps(evidence), "rule": "r", "reference": "§"}


def test_summary_groups_a_kind_found_on_many_topics_largest_first() -> None:
    rows = pd.DataFrame([finding(t, "single_segment", "info", peak_msg_rate_in=p)
                         for t, p in [("a", 1.0), ("b", 9.0), ("c", 5.0), ("d", 2.0)]]
                        + [finding("z", "hot_key", "high", key_peak_rate=3.0)])
    assert summary_lines(rows) == [
        "[high] z: hot_key on z",
        "[info] never left one segment: 4 topics, largest b — single_segment on b "
        "(then c, d)"]


@pytest.mark.parametrize(("run_id", "subject", "hashes_kept"), [
    ("hot-hashed", "hash 0x", True), ("hot-none", "(withheld)", False)])
def test_withheld_keys_are_in_neither_the_profile_nor_the_findings(runs, run_id, subject,
                                                                   hashes_kept) -> None:
    run = runs[run_id]
    (p,) = run.read("topic_profile").to_dict("records")
    assert all(k is None for k in p["top_keys"]) and len(p["top_keys"]) == 10
    assert all(bool(pd.notna(h)) is hashes_kept for h in p["top_key_hashes"])
    (f,) = run.findings("hot_key")
    assert f["subject"].startswith(subject)
    names = set(run.log()["key"].dropna())
    text = run.read("findings").to_json()
    assert not any(f'"{k}"' in text or f"'{k}'" in text for k in names)


def test_the_stored_rate_is_the_last_written_sample_of_the_same_segment():
    s = pd.DataFrame({
        "topic": ["a", "a", "a", "a", "b", "b"], "segment_id": [1, 1, 1, 2, 1, 1],
        "msg_rate_in": [10.0, 20.0, 30.0, 40.0, 50.0, 60.0],
        "written": [True, False, True, False, False, True]})
    stored = _last_written(s).tolist()
    assert stored[:3] == [10.0, 10.0, 30.0]
    assert pd.isna(stored[3]) and pd.isna(stored[4])  # nothing written before, in its segment
    assert stored[5] == 60.0
