"""Tests of pipelines.contract.config: defaults, user YAML, --set overrides, validation, helpers."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import write_deltalake

import pipelines.spark.command_session
import pipelines.spark.session
from jobs.replay import main
from pipelines.contract.config import (
    DEFAULT_CONF_ENV,
    OUTPUT_TABLES,
    ConfigError,
    ReplayConfig,
    load_config,
    parse_config,
)
from pipelines.contract.schemas import TABLES
from pipelines.core.batching import BatchingConfig
from pipelines.core.policy import AutoScaleConfig
from pipelines.storage.delta import DeltaStore
from pipelines.storage.output_identity import (
    OutputConflictError,
    check_output,
    write_manifest,
)

FIRST_EVENT_MS = 1_291_190_400_000  # 2010-12-01T08:00:00Z


def _conf(tmp_path: Path, text: str, name: str = "conf.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


def _problems(conf_file: str | None = None, sets: list[str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(conf_file, sets or [])
    return info.value.problems


# ---- defaults ----------------------------------------------------------------------------------


def test_default_policy_equals_pulsar_broker_defaults() -> None:
    cfg = load_config(None, [])
    assert cfg.broker_policy() == AutoScaleConfig()
    assert cfg.policy_for("persistent://public/default/orders") == AutoScaleConfig()


def test_default_batching_equals_pulsar_producer_defaults() -> None:
    assert load_config(None, []).batching_config() == BatchingConfig()


@pytest.mark.parametrize(
    ("getter", "expected"),
    [
        (lambda c: c.replay.speed, 1.0),
        (lambda c: c.replay.allowed_lateness_s, 60),
        (lambda c: c.replay.auto_scale_interval_s, 60),
        (lambda c: c.replay.load_report_interval_s, 10),
        (lambda c: c.replay.stats_update_frequency_s, 60),
        (lambda c: c.replay.stats_update_initial_delay_s, 60),
        (lambda c: c.replay.load_report_rate_change_threshold, 0.25),
        (lambda c: c.replay.max_files_per_trigger, 1000),
        (lambda c: c.replay.consumer_window_s, 60),
        (lambda c: c.topic.initial_segments, 1),
        (lambda c: c.topic.bucket_budget, 4),
        (lambda c: c.topic.name, None),
        (lambda c: c.topic.namespace, "public/default"),
        (lambda c: c.batching.mode, "bucketed"),
        (lambda c: [s.name for s in c.subscriptions], ["sub-stream"]),
        (lambda c: c.subscriptions[0].type, "stream"),
        (lambda c: c.subscriptions[0].consumer_names(), ["consumer-0", "consumer-1"]),
        (lambda c: [x.join for x in c.subscriptions[0].consumers], [0.0, 0.0]),
        (lambda c: c.subscriptions[0].consumers[0].capacity_msg_per_s, None),
        (lambda c: c.input.format, "auto"),
        (lambda c: c.input.preset, "contract"),
        (lambda c: c.input.time_zone, "UTC"),
        (lambda c: c.input.timestamp_format, None),
        (lambda c: c.output.engine, "auto"),
        (lambda c: c.output.tables, list(OUTPUT_TABLES)),
        (lambda c: c.output.validate_tables, False),
    ],
)
def test_default_values(getter: Callable[[ReplayConfig], Any], expected: Any) -> None:
    assert getter(load_config(None, [])) == expected


# ---- --set -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("assignment", "getter", "expected", "expected_type"),
    [
        ("policy.max_segments=8", lambda c: c.policy.max_segments, 8, int),
        ("replay.speed=100", lambda c: c.replay.speed, 100.0, float),
        ("replay.speed=2.5", lambda c: c.replay.speed, 2.5, float),
        ("policy.split_msg_rate_in=2e4", lambda c: c.policy.split_msg_rate_in, 20000.0, float),
        ("policy.enabled=false", lambda c: c.policy.enabled, False, bool),
        ("batching.mode=key_based", lambda c: c.batching.mode, "key_based", str),
        ("topic.name=orders", lambda c: c.topic.name, "orders", str),
        ("output.tables=[runs, messages]", lambda c: c.output.tables, ["messages", "runs"], list),
        ("subscriptions.0.consumers.1.capacity_msg_per_s=500",
         lambda c: c.subscriptions[0].consumers[1].capacity_msg_per_s, 500.0, float),
        ("subscriptions.0.type=queue", lambda c: c.subscriptions[0].type, "queue", str),
    ],
)
def test_set_overrides_value_with_its_yaml_type(
    assignment: str, getter: Callable[[ReplayConfig], Any], expected: Any, expected_type: type
) -> None:
    value = getter(load_config(None, [assignment]))
    assert value == expected
    assert type(value) is expected_type


def test_set_applies_over_conf_file(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "policy:\n  max_segments: 8\n")
    assert load_config(conf, ["policy.max_segments=16"]).policy.max_segments == 16


def test_later_set_wins_over_earlier_set() -> None:
    cfg = load_config(None, ["policy.max_segments=8", "policy.max_segments=4"])
    assert cfg.policy.max_segments == 4


def test_set_bracketed_key_may_contain_dots() -> None:
    topic = "persistent://public/default/a.b"
    cfg = load_config(None, [f"policy.topic_overrides[{topic}].max_segments=4"])
    assert cfg.policy_for(topic).max_segments == 4


def test_set_index_equal_to_list_length_appends() -> None:
    cfg = load_config(None, ["subscriptions.1={name: sub-queue, type: queue}"])
    assert [(s.name, s.type) for s in cfg.subscriptions] == [
        ("sub-stream", "stream"), ("sub-queue", "queue")]


def test_set_index_past_list_end_is_error() -> None:
    assert _problems(sets=["subscriptions.0.consumers.5.ack_delay_ms=3"]) == [
        "--set 'subscriptions.0.consumers.5.ack_delay_ms=3': subscriptions.0.consumers.5: "
        "index out of range (the list has 2 items)"]


def test_set_without_equals_is_error() -> None:
    assert _problems(sets=["policy.max_segments"]) == [
        "--set 'policy.max_segments': expected dotted.key=value"]


def test_set_below_a_scalar_is_error() -> None:
    assert _problems(sets=["replay.speed.x=1"]) == [
        "--set 'replay.speed.x=1': replay.speed is a float, not a mapping or list"]


# ---- unknown keys, types, ranges -------------------------------------------------------------


@pytest.mark.parametrize(
    ("conf_text", "sets", "expected"),
    [
        ("bogus: 1\n", [], "bogus: unknown key"),
        ("policy:\n  max_segmentz: 3\n", [],
         "policy.max_segmentz: unknown key (did you mean 'max_segments'?)"),
        ("subscriptions:\n  - name: s\n    consumers:\n      - {name: c, capcity: 3}\n", [],
         "subscriptions.0.consumers.0.capcity: unknown key"),
        (None, ["batching.max_msgs=5"],
         "batching.max_msgs: unknown key (did you mean 'max_messages'?)"),
        (None, ["policy.topic_overrides.orders.bogus=1"],
         "policy.topic_overrides.orders.bogus: unknown key"),
    ],
)
def test_unknown_key_is_error_naming_its_dotted_path(
    tmp_path: Path, conf_text: str | None, sets: list[str], expected: str
) -> None:
    conf = _conf(tmp_path, conf_text) if conf_text is not None else None
    assert _problems(conf, sets) == [expected]


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        ("policy.max_segments=lots",
         "policy.max_segments: must be a valid integer, got 'lots'"),
        ("policy.max_segments=8.5",
         "policy.max_segments: must be a valid integer, got 8.5"),
        ("replay.speed=fast", "replay.speed: must be a valid number, got 'fast'"),
        ("policy.enabled='yes'", "policy.enabled: must be a valid boolean, got 'yes'"),
        ("topic.initial_segments='2'",
         "topic.initial_segments: must be a valid integer, got '2'"),
        ("batching.mode=fast",
         "batching.mode: must be 'bucketed', 'key_based', 'default' or 'disabled', got 'fast'"),
    ],
)
def test_wrong_value_type_is_error(assignment: str, expected: str) -> None:
    assert _problems(sets=[assignment]) == [expected]


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        ("replay.speed=0", "replay.speed: must be greater than 0, got 0"),
        ("topic.initial_segments=0",
         "topic.initial_segments: must be greater than or equal to 1, got 0"),
        ("subscriptions.0.consumers.0.ack_delay_ms=-1",
         "subscriptions.0.consumers.0.ack_delay_ms: must be greater than or equal to 0, got -1"),
        ("batching.max_bytes=0", "batching: max_bytes must be >= 1, got 0"),
        ("policy.max_buckets_per_segment=70000",
         "policy: max_buckets_per_segment must be in [1, 65536], got 70000"),
    ],
)
def test_out_of_range_value_is_error(assignment: str, expected: str) -> None:
    assert _problems(sets=[assignment]) == [expected]


def test_every_problem_is_listed_one_per_line_after_a_summary() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, ["policy.split_msg_rate_in=500", "bogus=1"])
    assert str(info.value).splitlines() == [
        "Invalid configuration: 2 problems:",
        "  - bogus: unknown key",
        "  - policy: split_msg_rate_in (500.0) must be greater than merge_msg_rate_in (1000.0)",
    ]


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"^Invalid configuration: 1 problem:"):
        load_config(None, ["bogus=1"])


def test_invalid_policy_lists_all_its_problems() -> None:
    problems = _problems(sets=["policy.split_msg_rate_in=500", "policy.split_bytes_rate_out=1",
                               "policy.min_segments=0"])
    assert problems == [
        "policy: min_segments must be >= 1, got 0",
        "policy: split_msg_rate_in (500.0) must be greater than merge_msg_rate_in (1000.0)",
        "policy: split_bytes_rate_out (1.0) must be greater than merge_bytes_rate_out "
        "(25000000.0)",
    ]


def test_policy_problem_is_reported_alongside_unknown_key_in_same_section() -> None:
    assert _problems(sets=["policy.split_msg_rate_in=500", "policy.bogus=1"]) == [
        "policy.bogus: unknown key",
        "policy: split_msg_rate_in (500.0) must be greater than merge_msg_rate_in (1000.0)",
    ]


def test_override_layers_are_validated_as_resolved() -> None:
    problems = _problems(sets=["policy.namespace_overrides.min_segments=0",
                               "policy.topic_overrides.orders.merge_msg_rate_in=20000"])
    assert problems == [
        "policy.namespace_overrides: min_segments must be >= 1, got 0",
        "policy.topic_overrides.orders: split_msg_rate_in (10000.0) must be greater than "
        "merge_msg_rate_in (20000.0)",
    ]


def test_broker_only_field_cannot_be_overridden() -> None:
    assert _problems(sets=["policy.topic_overrides.orders.max_buckets_per_segment=8"]) == [
        "policy.topic_overrides.orders.max_buckets_per_segment: broker-only "
        "(scalableTopicEntryBucketMaxPerSegment); it cannot be overridden per namespace or topic"]


# ---- policy layering ---------------------------------------------------------------------------


LAYERED = """
policy:
  max_segments: 32
  namespace_overrides: {max_segments: 16, split_cooldown_s: 120}
  topic_overrides:
    orders: {max_segments: 4}
    persistent://public/default/orders: {max_segments: 8}
    payments: {split_cooldown_s: null}
"""


@pytest.mark.parametrize(
    ("topic", "max_segments", "split_cooldown_s"),
    [
        ("clicks", 16, 120),  # broker -> namespace
        ("orders", 4, 120),  # topic override by exact local name
        ("persistent://public/default/orders", 8, 120),  # exact full name wins
        ("persistent://other/ns/orders", 4, 60),  # local-name match; not in topic.namespace
        ("payments", 16, 120),  # null inherits
    ],
)
def test_policy_for_layers_broker_namespace_topic(
    tmp_path: Path, topic: str, max_segments: int, split_cooldown_s: int
) -> None:
    cfg = load_config(_conf(tmp_path, LAYERED), [])
    policy = cfg.policy_for(topic)
    assert (policy.max_segments, policy.split_cooldown_s) == (max_segments, split_cooldown_s)
    assert policy.merge_cooldown_s == AutoScaleConfig().merge_cooldown_s


def test_policies_for_resolves_each_topic_as_policy_for(tmp_path: Path) -> None:
    cfg = load_config(_conf(tmp_path, LAYERED), [])
    topics = ["clicks", "orders", "persistent://public/default/orders",
              "persistent://other/ns/orders", "payments", "views", "other/ns/clicks"]
    assert cfg.policies_for(topics) == {t: cfg.policy_for(t) for t in topics}


def test_policy_overrides_serialize_without_inherited_fields(tmp_path: Path) -> None:
    policy = load_config(_conf(tmp_path, LAYERED), []).to_dict()["policy"]
    assert policy["namespace_overrides"] == {"max_segments": 16, "split_cooldown_s": 120}
    assert policy["topic_overrides"]["payments"] == {}


# ---- canonical form ----------------------------------------------------------------------------


def test_fingerprint_is_stable_across_key_order(tmp_path: Path) -> None:
    a = _conf(tmp_path, "replay: {speed: 10}\npolicy: {max_segments: 8, min_segments: 2}\n",
              "a.yaml")
    b = _conf(tmp_path, "policy: {min_segments: 2, max_segments: 8}\nreplay: {speed: 10.0}\n",
              "b.yaml")
    ca, cb = load_config(a, []), load_config(b, [])
    assert ca.to_json() == cb.to_json()
    assert ca.fingerprint() == cb.fingerprint()


def test_fingerprint_changes_with_any_value() -> None:
    assert (load_config(None, []).fingerprint()
            != load_config(None, ["replay.max_files_per_trigger=2"]).fingerprint())


def test_fingerprint_is_sha256_hex() -> None:
    fp = load_config(None, []).fingerprint()
    assert len(fp) == 64 and int(fp, 16) >= 0


def test_to_dict_round_trips_through_parse_config() -> None:
    cfg = load_config(None, ["subscriptions.0.consumers.0.join=2010-12-01T08:00:00Z",
                             "policy.topic_overrides.orders.max_segments=4"])
    assert parse_config(cfg.to_dict()) == cfg


def test_to_json_has_sorted_keys() -> None:
    text = load_config(None, []).to_json()
    assert text.startswith('{"batching":{"max_bytes":131072,')


# ---- subscriptions and consumers -----------------------------------------------------------


def test_consumer_count_expands_to_prefixed_names(tmp_path: Path) -> None:
    conf = _conf(tmp_path, """
        subscriptions:
          - name: s
            consumers:
              - {count: 3, name_prefix: w-, capacity_msg_per_s: 250, join: 10}
              - {name: solo}
        """)
    consumers = load_config(conf, []).subscriptions[0].consumers
    assert [(c.name, c.capacity_msg_per_s, c.join) for c in consumers] == [
        ("w-0", 250.0, 10.0), ("w-1", 250.0, 10.0), ("w-2", 250.0, 10.0), ("solo", None, 0.0)]


def test_consumer_count_without_prefix_uses_consumer_prefix() -> None:
    cfg = load_config(None, ["subscriptions.0.consumers=[{count: 2}]"])
    assert cfg.subscriptions[0].consumer_names() == ["consumer-0", "consumer-1"]


def test_expanded_consumers_serialize_without_count() -> None:
    cfg = load_config(None, ["subscriptions.0.consumers=[{count: 1, name_prefix: x}]"])
    assert cfg.to_dict()["subscriptions"][0]["consumers"] == [
        {"name": "x0", "join": 0.0, "leave": None, "capacity_msg_per_s": None,
         "ack_delay_ms": 0}]


@pytest.mark.parametrize(
    ("consumers", "expected"),
    [
        ("[{name: a, count: 2}]", "subscriptions.0.consumers.0: name and count are mutually "
         "exclusive (count declares <name_prefix>0 .. <name_prefix>N-1)"),
        ("[{join: 5}]", "subscriptions.0.consumers.0: a consumer needs a name, or a count "
         "(with an optional name_prefix)"),
        ("[{name: a, name_prefix: b}]",
         "subscriptions.0.consumers.0: name_prefix is only valid together with count"),
        ("[{count: 2, name_prefix: c-}, {name: c-1}]",
         "subscriptions.0: duplicate consumer name(s): c-1"),
        ("[{count: 0}]",
         "subscriptions.0.consumers.0.count: must be greater than or equal to 1, got 0"),
    ],
)
def test_invalid_consumer_declaration_is_error(consumers: str, expected: str) -> None:
    assert _problems(sets=[f"subscriptions.0.consumers={consumers}"]) == [expected]


def test_duplicate_subscription_name_is_error() -> None:
    assert _problems(sets=["subscriptions.1={name: sub-stream}"]) == [
        "subscriptions: duplicate subscription name(s): sub-stream"]


def test_subscription_type_is_case_insensitive() -> None:
    assert load_config(None, ["subscriptions.0.type=CHECKPOINT"]).subscriptions[0].type == (
        "checkpoint")


@pytest.mark.parametrize(
    ("join", "time_zone", "expected_ms"),
    [
        ("0", "UTC", FIRST_EVENT_MS),
        ("90", "UTC", FIRST_EVENT_MS + 90_000),
        ("1.5", "UTC", FIRST_EVENT_MS + 1_500),
        ("2010-12-01T09:00:00Z", "UTC", FIRST_EVENT_MS + 3_600_000),
        ("'2010-12-01T09:00:00Z'", "UTC", FIRST_EVENT_MS + 3_600_000),
        ("2010-12-01T09:00:00+01:00", "UTC", FIRST_EVENT_MS),
        ("'2010-12-01T09:00:00'", "Europe/Paris", FIRST_EVENT_MS),  # no offset: input.time_zone
        ("2010-12-01T09:00:00", "UTC", FIRST_EVENT_MS + 3_600_000),
        ("2010-12-02", "UTC", FIRST_EVENT_MS + 16 * 3_600_000),
    ],
)
def test_join_is_seconds_offset_or_timestamp(join: str, time_zone: str, expected_ms: int) -> None:
    cfg = load_config(None, [f"subscriptions.0.consumers.0.join={join}",
                             f"input.time_zone={time_zone}"])
    assert cfg.subscriptions[0].consumers[0].join_ms(FIRST_EVENT_MS) == expected_ms


def test_timestamp_join_is_stored_as_utc() -> None:
    cfg = load_config(None, ["subscriptions.0.consumers.0.join=2010-12-01T09:00:00+01:00"])
    assert cfg.subscriptions[0].consumers[0].join == datetime(2010, 12, 1, 8, tzinfo=UTC)
    assert cfg.to_dict()["subscriptions"][0]["consumers"][0]["join"] == "2010-12-01T08:00:00Z"


def test_leave_offset_and_never() -> None:
    cfg = load_config(None, ["subscriptions.0.consumers.0.leave=30"])
    first, second = cfg.subscriptions[0].consumers
    assert (first.leave_ms(FIRST_EVENT_MS), second.leave_ms(FIRST_EVENT_MS)) == (
        FIRST_EVENT_MS + 30_000, None)


@pytest.mark.parametrize(
    ("leave", "how", "serialized"),
    [
        ("30", "close", 30.0),  # the short form is a clean close
        ("{at: 30}", "close", 30.0),  # close is the default, serialized in the short form
        ("{at: 30, how: close}", "close", 30.0),
        ("{at: 30, how: CRASH}", "crash", {"at": 30.0, "how": "crash"}),
        ("{at: '2010-12-01T08:00:30Z', how: crash}", "crash",
         {"at": "2010-12-01T08:00:30Z", "how": "crash"}),
    ],
    ids=["short-form", "at-only", "close", "crash-any-case", "crash-timestamp"],
)
def test_leave_says_when_and_how_a_consumer_leaves(leave: str, how: str,
                                                   serialized: object) -> None:
    cfg = load_config(None, [f"subscriptions.0.consumers.0.leave={leave}"])
    consumer = cfg.subscriptions[0].consumers[0]
    assert (consumer.leave_ms(FIRST_EVENT_MS), consumer.leave_how) == (
        FIRST_EVENT_MS + 30_000, how)
    assert cfg.to_dict()["subscriptions"][0]["consumers"][0]["leave"] == serialized
    assert parse_config(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    ("leave", "expected"),
    [
        ("{at: 30, how: vanish}", "subscriptions.0.consumers.0.leave.how: must be 'close' or "
         "'crash', got 'vanish'"),
        ("{how: crash}", "subscriptions.0.consumers.0.leave.at: required key is missing"),
        ("{at: 30, when: 40}", "subscriptions.0.consumers.0.leave.when: unknown key"),
        ("{at: -1, how: crash}", "subscriptions.0.consumers.0.leave.at: seconds offset must be "
         ">= 0, got -1"),
    ],
    ids=["unknown-how", "no-time", "unknown-key", "negative-time"],
)
def test_invalid_leave_is_error(leave: str, expected: str) -> None:
    assert _problems(sets=[f"subscriptions.0.consumers.0.leave={leave}"]) == [expected]


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["subscriptions.0.consumers.0.join=60", "subscriptions.0.consumers.0.leave=30"],
         "subscriptions.0.consumers.0: leave (30 s) must be after join (60 s)"),
        (["subscriptions.0.consumers.0.join=-5"],
         "subscriptions.0.consumers.0.join: seconds offset must be >= 0, got -5"),
        (["subscriptions.0.consumers.0.join=soon"],
         "subscriptions.0.consumers.0.join: expected a seconds offset (number) or an ISO-8601 "
         "timestamp such as '2010-12-01T08:00:00Z', got 'soon'"),
    ],
)
def test_invalid_join_or_leave_is_error(sets: list[str], expected: str) -> None:
    assert _problems(sets=sets) == [expected]


@pytest.mark.parametrize(
    ("reconnects", "expected_ms"),
    [
        ("[]", []),
        ("[10, 2.5]", [FIRST_EVENT_MS + 2_500, FIRST_EVENT_MS + 10_000]),
        ("['2010-12-01T08:00:30Z']", [FIRST_EVENT_MS + 30_000]),
    ],
    ids=["none", "offsets-sorted", "timestamp"],
)
def test_reconnects_are_seconds_offsets_or_timestamps(reconnects: str,
                                                      expected_ms: list[int]) -> None:
    cfg = load_config(None, [f"subscriptions.0.consumers.0.reconnects={reconnects}"])
    assert cfg.subscriptions[0].consumers[0].reconnects_ms(FIRST_EVENT_MS) == expected_ms


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["subscriptions.0.consumers.0.join=10", "subscriptions.0.consumers.0.reconnects=[10]"],
         "subscriptions.0.consumers.0: reconnect (10 s) must be after join (10 s)"),
        (["subscriptions.0.consumers.0.leave=30",
          "subscriptions.0.consumers.0.reconnects=[5, 31]"],
         "subscriptions.0.consumers.0: reconnect (31 s) must be before leave (30 s)"),
        (["subscriptions.0.consumers.0.reconnects=[-1]"],
         "subscriptions.0.consumers.0.reconnects.0: seconds offset must be >= 0, got -1"),
        (["subscriptions.0.consumers.0.reconnects=5"],
         "subscriptions.0.consumers.0.reconnects: must be a valid list, got 5"),
    ],
    ids=["at-join", "after-leave", "negative", "not-a-list"],
)
def test_invalid_reconnect_is_error(sets: list[str], expected: str) -> None:
    assert _problems(sets=sets) == [expected]


def test_reconnects_and_grouped_serialize_only_when_set() -> None:
    plain = load_config(None, [])
    cfg = load_config(None, ["subscriptions.0.type=checkpoint", "subscriptions.0.grouped=false",
                             "subscriptions.0.consumers.0.reconnects=[5]"])
    sub = cfg.to_dict()["subscriptions"][0]
    assert (sub["grouped"], sub["consumers"][0]["reconnects"]) == (False, [5.0])
    assert "grouped" not in plain.to_dict()["subscriptions"][0]
    assert "reconnects" not in plain.to_dict()["subscriptions"][0]["consumers"][0]
    assert parse_config(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    ("sub_type", "problems"),
    [
        ("checkpoint", []),
        ("stream", ["subscriptions.0: grouped: false is only valid for a checkpoint "
                    "subscription, not a stream one"]),
        ("queue", ["subscriptions.0: grouped: false is only valid for a checkpoint "
                   "subscription, not a queue one"]),
    ],
)
def test_ungrouped_is_checkpoint_only(sub_type: str, problems: list[str]) -> None:
    sets = [f"subscriptions.0.type={sub_type}", "subscriptions.0.grouped=false"]
    if problems:
        assert _problems(sets=sets) == problems
    else:
        assert load_config(None, sets).subscriptions[0].grouped is False


# ---- input / output / files --------------------------------------------------------------------


def test_input_column_must_be_a_contract_column() -> None:
    assert _problems(sets=["input.columns.kee=__key__"]) == [
        "input.columns.kee: key must be 'topic', 'key', 'publish_time', 'payload_size', "
        "'producer_name' or 'sequence_id', got 'kee'"]


def test_unknown_time_zone_is_error() -> None:
    assert _problems(sets=["input.time_zone=Mars/Olympus"]) == [
        "input.time_zone: unknown IANA time zone 'Mars/Olympus'"]


def test_output_table_listed_twice_is_error() -> None:
    assert _problems(sets=["output.tables=[runs, runs]"]) == [
        "output.tables: listed more than once: runs"]


def test_missing_conf_file_is_config_error(tmp_path: Path) -> None:
    problems = _problems(str(tmp_path / "nope.yaml"))
    assert len(problems) == 1 and problems[0].startswith(f"config file {tmp_path}/nope.yaml: ")


def test_duplicate_yaml_key_is_error(tmp_path: Path) -> None:
    problems = _problems(_conf(tmp_path, "replay:\n  speed: 2\n  speed: 3\n"))
    assert len(problems) == 1 and "found duplicate key 'speed'" in problems[0]


def test_defaults_file_can_be_replaced_by_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundled = Path(__file__).resolve().parents[2] / "conf" / "default.yaml"
    text = bundled.read_text(encoding="utf-8").replace("  speed: 1.0\n", "  speed: 7.0\n")
    monkeypatch.setenv(DEFAULT_CONF_ENV, _conf(tmp_path, text, "defaults.yaml"))
    assert load_config(None, []).replay.speed == 7.0


def test_conf_file_lists_replace_default_lists(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "subscriptions:\n  - {name: q, type: queue}\n")
    assert [(s.name, s.consumers) for s in load_config(conf, []).subscriptions] == [("q", [])]


# ---- safety at start-up: invalid policy, incompatible output (issue #4) -------------------------


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the command starts Spark (errors must come before it)."""
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("Spark was started")

    # where it is defined and where the commands call it (imported there by name: patching
    # only the first left command_session bound to the refusal for the rest of the run when
    # a test here imported it first)
    monkeypatch.setattr(pipelines.spark.session, "build_session", refuse)
    monkeypatch.setattr(pipelines.spark.command_session, "build_session", refuse)


def _run_cli(tmp_path: Path, *extra: str) -> int:
    log = tmp_path / "log.json"
    log.write_text('{"topic": "t", "publish_time": 0, "payload_size": 1}\n')
    return main(["run", "--input", str(log), "--output", str(tmp_path / "out"),
                 "--run-id", "r1", *extra])


def test_invalid_policy_is_refused_at_start_with_every_problem_listed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_spark: None) -> None:
    code = _run_cli(tmp_path, "--set", "policy.split_msg_rate_in=500",
                    "--set", "policy.min_segments=0")
    err = capsys.readouterr().err
    assert code == 2
    assert "min_segments must be >= 1, got 0" in err
    assert "split_msg_rate_in (500.0) must be greater than merge_msg_rate_in (1000.0)" in err


def _started(out: Path, run_id: str, sets: list[str]) -> None:
    """Leave the manifest a replay writes when it starts ``run_id`` under ``sets`` (with the
    run constants it resolved: topic bins, the emulation state's partitions)."""
    manifest = out / "_work" / run_id / "run.json"
    manifest.parent.mkdir(parents=True)
    write_manifest(str(manifest), load_config(None, sets), "contract", topic_bins=16,
                   state_partitions=8)


@pytest.mark.parametrize(
    ("sets", "preset", "message"),
    [
        (["policy.max_segments=8"], "contract",
         "run r1 was started with a different configuration (differs in "
         "config.policy.max_segments)"),
        ([], "pulsar-export", "run r1 was started with a different configuration (differs in "
                              "preset)"),
    ],
    ids=["other_policy", "other_preset"],
)
def test_run_id_started_with_another_config_is_refused(tmp_path: Path, sets: list[str],
                                                       preset: str, message: str) -> None:
    _started(tmp_path, "r1", [])
    with pytest.raises(OutputConflictError) as info:
        check_output(str(tmp_path), "r1", load_config(None, sets), preset)
    assert message in str(info.value)


def test_restart_with_the_same_config_is_allowed(tmp_path: Path) -> None:
    _started(tmp_path, "r1", ["policy.max_segments=8"])
    check_output(str(tmp_path), "r1", load_config(None, ["policy.max_segments=8"]), "contract")
    check_output(str(tmp_path), "r2", load_config(None, []), "contract")  # another run id


def test_run_id_finished_with_another_config_is_refused(tmp_path: Path) -> None:

    row = {"run_id": "r1", "status": "finished",
           "config": load_config(None, ["batching.mode=key_based"]).to_json(),
           "inputs": [["x"]], "counts": "{}", "versions": "{}",
           "started_at": pd.Timestamp(0, tz="UTC"), "timings": "{}"}
    DeltaStore(str(tmp_path), engine="delta-rs").append(
        "runs", pd.DataFrame([row]).assign(inputs=[["x"]]), app_id="t", version=0)
    with pytest.raises(OutputConflictError, match=r"already finished with a different "
                                                  r"configuration \(differs in batching.mode\)"):
        check_output(str(tmp_path), "r1", load_config(None, []), "contract")


def test_output_table_with_an_incompatible_schema_is_refused(tmp_path: Path) -> None:

    write_deltalake(str(tmp_path / "segments"),
                    pa.table({"run_id": ["old"], "topic": ["t"], "segment_id": ["1"]}),
                    partition_by=["run_id"])
    with pytest.raises(OutputConflictError) as info:
        check_output(str(tmp_path), "r1", load_config(None, []), "contract")
    text = str(info.value)
    assert "table segments: missing column(s) range_start" in text
    assert "table segments: column segment_id is string null, expected long not null" in text


def test_incompatible_output_is_refused_by_the_cli_before_spark(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_spark: None) -> None:
    _started(tmp_path / "out", "r1", ["policy.max_segments=8"])
    assert _run_cli(tmp_path) == 2
    err = capsys.readouterr().err
    assert err.startswith("topic-replay: error: output ") and "use another --run-id" in err


def test_output_tables_are_the_schema_tables_in_the_same_order():
    assert OUTPUT_TABLES == tuple(TABLES)


@pytest.mark.parametrize(("namespace", "topic", "max_segments"), [
    ("public/default", "orders", 8),
    ("public/default", "persistent://public/default/orders", 8),
    ("public/default", "public/default/orders", 8),
    ("public/default", "persistent://other/ns/orders", 64),
    ("other/ns", "persistent://other/ns/orders", 8),
    ("other/ns", "orders", 8),
    ("other/ns", "persistent://public/default/orders", 64),
])
def test_namespace_overrides_apply_to_topics_of_topic_namespace(namespace, topic, max_segments):
    cfg = load_config(None, [f"topic.namespace={namespace}",
                             "policy.namespace_overrides={max_segments: 8}"])
    assert cfg.policy_for(topic).max_segments == max_segments
