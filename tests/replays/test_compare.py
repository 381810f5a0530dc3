"""``topic-replay compare``: scenarios over one log become run_ids in the same tables and a
side-by-side table whose values differ where the configs differ. One tiny log, two scenarios."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from jobs.replay import main
from pipelines.analysis.run_tables import METRICS
from pipelines.analysis.whatif.scenarios import (
    ScenarioError,
    comparison_table,
    parse_scenario,
    yaml_to_sets,
)
from pipelines.contract.config import load_config
from pipelines.storage.delta import DeltaStore
from pipelines.workload.generator import WorkloadSpec, generate

SPEC = {
    "seed": 5, "start_time": "2025-01-15T09:00:00Z", "duration_s": 120, "format": "json",
    "gzip": False, "file_span_s": 120,
    "topics": [{"name": "orders", "producers": 2, "rate": {"kind": "constant", "msg_rate": 10},
                "keys": {"distribution": "uniform", "n_keys": 100},
                "payload": {"kind": "fixed", "size": 100}}],
}
BASE = ["--set", "policy.enabled=false", "--set", "batching.max_publish_delay_ms=200"]

ONE_RECORD = '{"topic": "t", "publish_time": 0, "payload_size": 1}\n'
"""A log of one valid record: the argument checks run on an input with content (an empty
one is refused before them)."""


def _compare(root: Path, *scenarios: str, html: bool = False) -> tuple[int, str]:
    argv = ["compare", "--input", str(root / "log"), "--output", str(root / "out"), *BASE,
            "--master", "local[2]", "--shuffle-partitions", "2"]
    for s in scenarios:
        argv += ["--scenario", s]
    if html:
        argv += ["--html", str(root / "out" / "compare.html")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def root(spark, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("compare")
    generate(WorkloadSpec.model_validate(SPEC), root / "log")
    (root / "t16.yaml").write_text(yaml.safe_dump({"topic": {"bucket_budget": 16}}))
    return root


@pytest.fixture(scope="module")
def compared(root) -> tuple[int, str]:
    return _compare(root, "t4=topic.bucket_budget=4", f"t16={root / 't16.yaml'}", html=True)


@pytest.fixture(scope="module")
def store(root, compared) -> DeltaStore:
    return DeltaStore(str(root / "out"), engine="delta-rs")


@pytest.mark.spark
def test_each_scenario_is_a_run_named_after_it(store, compared):
    assert compared[0] == 0
    assert sorted(store.read("runs")["run_id"]) == ["t16", "t4"]
    assert sorted(set(store.read("entries")["run_id"])) == ["t16", "t4"]


@pytest.mark.spark
def test_side_by_side_table_has_one_column_per_scenario_and_every_metric(store):
    table = comparison_table(store, ["t4", "t16"])
    assert list(table.columns) == ["t4", "t16"]
    assert list(table.index) == [label for _, label in METRICS]


@pytest.mark.spark
def test_bucket_budget_changes_total_buckets(store):
    table = comparison_table(store, ["t4", "t16"])
    assert table.loc["bucket budget T"].tolist() == [4, 16]
    assert table.loc["entry buckets, final"].tolist() == [4, 16]


@pytest.mark.spark
def test_scenarios_replay_the_same_messages(store):
    table = comparison_table(store, ["t4", "t16"])
    accepted = table.loc["messages accepted"].tolist()
    assert accepted[0] == accepted[1] == len(store.read("messages", "t4")) > 0


@pytest.mark.spark
def test_printed_table_marks_rows_that_differ(compared):
    lines = compared[1].splitlines()
    assert any(line.startswith("* entry buckets, final") and line.split()[-2:] == ["4", "16"]
               for line in lines)
    assert any(line.startswith("  messages accepted") for line in lines)


@pytest.mark.spark
def test_compare_writes_only_under_its_output_directory(root, compared):
    assert sorted(p.name for p in root.iterdir()) == ["log", "out", "t16.yaml"]
    assert (root / "out" / "compare.html").is_file()
    assert all(p.name.startswith("part-") for p in (root / "log").iterdir())


@pytest.mark.spark
def test_rerunning_a_scenario_with_the_same_config_reuses_its_run(root, store, compared):
    code, out = _compare(root, "t4=topic.bucket_budget=4")
    assert code == 0
    assert "scenario t4: already in" in out and "reused" in out
    assert sorted(store.read("runs")["run_id"]) == ["t16", "t4"]


@pytest.mark.spark
def test_a_scenario_named_like_a_run_with_another_config_exits_2(root, compared, capsys):
    code, _ = _compare(root, "t4=topic.bucket_budget=8")
    assert code == 2
    assert "run t4 already exists" in capsys.readouterr().err


# ---- scenario specs (no Spark) -------------------------------------------------------------------

@pytest.mark.parametrize("spec, name, sets", [
    ("a=policy.max_segments=4", "a", ("policy.max_segments=4",)),
    ("b=policy.max_segments=4,batching.mode=key_based", "b",
     ("policy.max_segments=4", "batching.mode=key_based")),
    ("c=topic.bucket_budget=16; replay.speed=10", "c",
     ("topic.bucket_budget=16", "replay.speed=10")),
    ("d=input.columns={key: k, topic: t}", "d", ("input.columns={key: k, topic: t}",)),
    ("e.1=subscriptions.0.consumers.0.join=60", "e.1",
     ("subscriptions.0.consumers.0.join=60",)),
])
def test_parse_scenario_splits_overrides_on_comma_and_semicolon(spec, name, sets):
    scenario = parse_scenario(spec)
    assert (scenario.name, scenario.sets) == (name, sets)


@pytest.mark.parametrize("spec, message", [
    ("nothing", "is not NAME=FILE_OR_SETS"),
    ("=a.b=1", "is not NAME=FILE_OR_SETS"),
    ("x=", "has no config file or overrides"),
    ("x y=a.b=1", "must be letters, digits"),
    ("x=missing.yaml", "config file missing.yaml does not exist"),
    ("x=policy.max_segments", "is neither a config file nor a dotted.key=value override"),
])
def test_parse_scenario_rejects_malformed_specs(spec, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(spec)


def test_scenario_file_merges_like_a_config_file(tmp_path):
    doc = {"policy": {"max_segments": 8, "topic_overrides": {"a.b": {"max_segments": 4}}},
           "batching": {"mode": "key_based"},
           "subscriptions": [{"name": "s", "type": "queue",
                              "consumers": [{"count": 3, "name_prefix": "q-"}]}]}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert parse_scenario(f"x={path}").sets == tuple(yaml_to_sets(path))
    assert load_config(None, yaml_to_sets(path)) == load_config(path)


@given(st.lists(st.tuples(st.sampled_from(["policy.max_segments", "topic.bucket_budget",
                                           "replay.speed", "batching.max_messages"]),
                          st.integers(1, 10_000)), min_size=1, max_size=5),
       st.sampled_from([",", ";", ", ", " ; "]))
def test_parse_scenario_round_trips_joined_overrides(pairs, sep):
    sets = tuple(f"{k}={v}" for k, v in pairs)
    assert parse_scenario("s=" + sep.join(sets)).sets == sets


@pytest.mark.parametrize("scenario, message", [
    ("bad", "is not NAME=FILE_OR_SETS"),
    ("a=policy.max_segmentz=4", "policy.max_segmentz: unknown key"),
    ("a=topic.bucket_budget=0", "scenario a: Invalid configuration"),
])
def test_compare_cli_rejects_a_bad_scenario_with_exit_2_before_spark(tmp_path, capsys,
                                                                     scenario, message):
    (tmp_path / "log.json").write_text(ONE_RECORD)
    argv = ["compare", "--input", str(tmp_path / "log.json"), "--output",
            str(tmp_path / "out"), "--scenario", scenario]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_compare_cli_rejects_a_scenario_given_twice(tmp_path, capsys):
    (tmp_path / "log.json").write_text(ONE_RECORD)
    argv = ["compare", "--input", str(tmp_path / "log.json"), "--output", str(tmp_path / "o"),
            "--scenario", "a=topic.bucket_budget=4", "--scenario", "a=topic.bucket_budget=8"]
    assert main(argv) == 2
    assert "scenario a is given twice" in capsys.readouterr().err
