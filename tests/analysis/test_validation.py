"""Great Expectations checks of a run's tables (pipelines/analysis/validation.py, ``topic-replay
validate``).

No Spark: small inline tables, written with delta-rs where a store is needed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from jobs.replay import main
from pipelines.analysis.validation import (
    INPUT_CONTRACT,
    KEYS,
    SUPPRESSED_BY_REGEX,
    TRIGGER_REGEX,
    ephemeral_context,
    format_validation,
    prepare,
    suites,
    validate_frame,
    validate_frames,
    validate_run,
)
from pipelines.core.batching import CLOSE_REASONS
from pipelines.core.policy import DECISION_REASONS, SUPPRESSED_REASONS
from pipelines.engine.summary import format_summary, latest_validation, run_summary
from pipelines.ingest.rules import FILE_REASONS, LATE, QUARANTINE_REASONS
from pipelines.storage.delta import DeltaStore

RUN = "r1"


def ts(seconds: float) -> pd.Timestamp:
    return pd.Timestamp("2025-01-15T09:00:00Z") + pd.Timedelta(seconds=seconds)


def good_frames() -> dict[str, pd.DataFrame]:
    """A tiny consistent run: topic t, segment 0 = [0, 32767] with 2 buckets, segment 1 =
    [32768, 65535] with 1 bucket; three messages in two entries, dispatched once each."""
    base = {"run_id": RUN, "topic": "t"}
    segments = pd.DataFrame([
        {**base, "segment_id": 0, "range_start": 0, "range_end": 32767, "bucket_count": 2,
         "bucket_splits": [32768], "state": "ACTIVE", "parent_ids": [], "child_ids": [],
         "created_at_epoch": 0, "sealed_at_epoch": -1, "created_at": ts(0), "sealed_at": None,
         "created_by": "initial"},
        {**base, "segment_id": 1, "range_start": 32768, "range_end": 65535, "bucket_count": 1,
         "bucket_splits": [], "state": "ACTIVE", "parent_ids": [], "child_ids": [],
         "created_at_epoch": 0, "sealed_at_epoch": -1, "created_at": ts(0), "sealed_at": None,
         "created_by": "initial"},
    ])
    msg = {**base, "producer_name": "p", "payload_size": 10, "layout_epoch": 0}
    messages = pd.DataFrame([
        {**msg, "key": "a", "sequence_id": 0, "segment_sequence_id": 0, "publish_time": ts(1),
         "hash32": 100,
         "segment_hash": 100, "hash_b": 5, "segment_id": 0, "bucket_index": 0, "entry_id": 0},
        {**msg, "key": "b", "sequence_id": 1, "segment_sequence_id": 0, "publish_time": ts(2),
         "hash32": 2**31,
         "segment_hash": 40000, "hash_b": 7, "segment_id": 1, "bucket_index": 0, "entry_id": 1},
        {**msg, "key": None, "sequence_id": 2, "segment_sequence_id": 1, "publish_time": ts(2),
         "hash32": None,
         "segment_hash": None, "hash_b": None, "segment_id": 1, "bucket_index": 0,
         "entry_id": 1},
    ])
    entry = {**base, "producer_name": "p", "open_time": ts(1), "publish_time": ts(3),
             "close_reason": "max_delay", "first_sequence_id": 0, "last_sequence_id": 0}
    entries = pd.DataFrame([
        {**entry, "segment_id": 0, "bucket_index": 0, "entry_id": 0, "entry_hash_min": 5,
         "entry_hash_max": 5, "num_messages": 1, "payload_bytes": 10},
        {**entry, "segment_id": 1, "bucket_index": 0, "entry_id": 1, "entry_hash_min": 7,
         "entry_hash_max": 7, "num_messages": 2, "payload_bytes": 20},
    ])
    dispatch = entries[["run_id", "topic", "producer_name", "segment_id", "bucket_index",
                        "entry_id", "publish_time", "num_messages", "payload_bytes"]].assign(
        subscription="s", consumer_name="c1", dispatch_time=ts(3), ack_time=ts(4),
        redeliveries=0)
    return {
        "messages": messages,
        "entries": entries,
        "segments": segments,
        "segment_load": pd.DataFrame([
            {**base, "segment_id": 0, "sample_time": ts(10), "msg_rate_in": 0.1,
             "bytes_rate_in": 1.0, "msg_rate_out": 0.1, "bytes_rate_out": 1.0, "written": True,
             "modified_at": ts(10)}]),
        "autoscale_decisions": pd.DataFrame([
            {**base, "eval_time": ts(60), "trigger": "tick+consumer-registration",
             "action": "none", "segment_ids": [], "new_bucket_count": None,
             "reason": "no-candidate", "suppressed_by": "split-cooldown, merge-cooldown",
             "active_segments": 2, "consumers": 1, "bucket_capacity": 3, "layout_epoch": 0}]),
        "dispatch": dispatch,
        "consumer_load": pd.DataFrame([
            {**base, "subscription": "s", "consumer_name": "c1", "window_start": ts(0),
             "window_end": ts(60), "messages": 3, "bytes": 30, "busy_ms": 5, "idle_ms": 995,
             "backlog_messages": 0}]),
        "bucket_handoffs": pd.DataFrame([
            {**base, "subscription": "s", "segment_id": 0, "bucket_index": 1,
             "from_consumer": "c1", "to_consumer": "c2", "withheld_from": ts(5),
             "withheld_until": ts(6), "pending_messages": 1, "redelivered_entries": 0}]),
        "subscription_stats": pd.DataFrame([
            {**base, "subscription": "s", "window_start": ts(0), "window_end": ts(60),
             "backlog_messages": 0, "unacked_messages": 0, "draining_hashes_count": 0,
             "draining_hashes_max": 1, "draining_hashes_pending_messages": 0,
             "draining_hashes_cleared": 1, "reassignments": 1, "redeliveries": 0,
             "shared_segments": 0, "drain_mode_segments": 0, "sealed_segments_undrained": 0}]),
        "segment_drains": pd.DataFrame([
            {**base, "subscription": "s", "segment_id": 0, "sealed_at": ts(7),
             "drained_at": ts(8), "drain_ms": 1000}]),
        "topic_profile": pd.DataFrame([
            {**base, "messages": 3, "bytes": 30, "producers": 1, "distinct_keys": 2,
             "distinct_keys_exact": True, "keyless_messages": 1, "keyless_share": 1 / 3,
             "top_keys": ["a", "b"], "top_key_hashes": [100, 2**31], "top_key_messages": [1, 1],
             "top_key_shares": [1 / 3, 1 / 3], "top_key_peak_rates": [1 / 60, 1 / 60],
             "key_count_error": 0}]),
        "findings": pd.DataFrame([
            {**base, "finding": "single_segment", "severity": "info", "at": None,
             "subject": None, "message": "never left one segment", "evidence": "{}",
             "rule": "at most one active segment", "reference": "§2.2"}]),
        "quarantine": pd.DataFrame([
            {"run_id": RUN, "source_file": "f.json", "raw_record": "{", "reason": LATE,
             "batch_id": 0}]),
        "runs": pd.DataFrame([
            {"run_id": RUN, "status": "finished", "config": "{}", "inputs": ["f.json"],
             "counts": json.dumps({"accepted": 3, "quarantined": 1}), "versions": "{}",
             "started_at": ts(0), "ended_at": ts(1), "timings": "{}"}]),
    }


@functools.cache
def context() -> Any:
    """One GE ephemeral context for the module (creating one takes about a second)."""
    return ephemeral_context()


def failures(table: str, frames: dict[str, pd.DataFrame]) -> set[tuple[str, str]]:
    """(expectation, kwargs JSON) of every failed expectation of ``table``'s suite."""
    rows = validate_frame(table, prepare(table, frames), suites()[table], context())
    return {(r["expectation"], r["kwargs"]) for r in rows if not r["success"]}


def kw(**kwargs: object) -> str:
    return json.dumps(kwargs, sort_keys=True)


def test_consistent_run_passes_every_expectation() -> None:
    result = validate_frames(good_frames(), RUN)
    assert result.success, format_validation(result)
    assert set(result.rows["table"]) == {INPUT_CONTRACT, *KEYS}
    assert (result.rows["element_count"].dropna() > 0).all()


Mutation = Callable[[dict[str, pd.DataFrame]], None]


def _set(table: str, column: str, value: object, row: int = 0) -> Mutation:
    def mutate(frames: dict[str, pd.DataFrame]) -> None:
        frames[table].loc[row, column] = value
    return mutate


def _duplicate(table: str) -> Mutation:
    def mutate(frames: dict[str, pd.DataFrame]) -> None:
        frames[table] = pd.concat([frames[table], frames[table].iloc[[0]]], ignore_index=True)
    return mutate


PAIR = "expect_column_pair_values_a_to_be_greater_than_b"
BETWEEN = "expect_column_values_to_be_between"
IN_SET = "expect_column_values_to_be_in_set"
REGEX = "expect_column_values_to_match_regex"


def _pair(a: str, b: str, strict: bool = False) -> str:
    return kw(column_A=a, column_B=b, ignore_row_if="either_value_is_missing",
              or_equal=not strict)


@pytest.mark.parametrize(
    ("table", "mutate", "expected"),
    [
        # routing: bucket_index < bucket_count of the message's segment (join with segments)
        ("messages", _set("messages", "bucket_index", 2),
         {(PAIR, _pair("bucket_count", "bucket_index", strict=True))}),
        # routing: segment_hash within the segment's range (join with segments)
        ("messages", _set("messages", "segment_hash", 40000),
         {(PAIR, _pair("range_end", "segment_hash"))}),
        ("messages", _set("messages", "segment_id", 9),
         {(IN_SET, kw(column="segment_found", value_set=[True]))}),
        ("messages", _set("messages", "hash_b", 70000),
         {(BETWEEN, kw(column="hash_b", max_value=65535.0, min_value=0.0))}),
        ("entries", _set("entries", "bucket_index", 1, row=1),
         {(PAIR, _pair("bucket_count", "bucket_index", strict=True))}),
        ("entries", _duplicate("entries"),
         {("expect_compound_columns_to_be_unique",
           kw(column_list=["topic", "producer_name", "entry_id"]))}),
        ("entries", _set("entries", "close_reason", "full"),
         {(IN_SET, kw(column="close_reason", value_set=sorted(CLOSE_REASONS)))}),
        ("entries", _set("entries", "entry_hash_min", 9),
         {(PAIR, _pair("entry_hash_max", "entry_hash_min"))}),
        ("segments", _set("segments", "range_end", -1),
         {(BETWEEN, kw(column="range_end", max_value=65535.0, min_value=0.0)),
          (PAIR, _pair("range_end", "range_start"))}),
        ("segment_load", _set("segment_load", "bytes_rate_in", -1.0),
         {(BETWEEN, kw(column="bytes_rate_in", min_value=0.0))}),
        ("autoscale_decisions", _set("autoscale_decisions", "reason", "hot"),
         {(IN_SET, kw(column="reason", value_set=sorted(DECISION_REASONS)))}),
        ("autoscale_decisions", _set("autoscale_decisions", "trigger", "cron"),
         {(REGEX, kw(column="trigger", regex=TRIGGER_REGEX))}),
        ("autoscale_decisions", _set("autoscale_decisions", "suppressed_by", "bad-luck"),
         {(REGEX, kw(column="suppressed_by", regex=SUPPRESSED_BY_REGEX))}),
        ("dispatch", _set("dispatch", "ack_time", ts(0)),
         {(PAIR, _pair("ack_time", "dispatch_time"))}),
        ("consumer_load", _set("consumer_load", "idle_ms", -5),
         {(BETWEEN, kw(column="idle_ms", min_value=0.0))}),
        ("bucket_handoffs", _set("bucket_handoffs", "withheld_until", ts(1)),
         {(PAIR, _pair("withheld_until", "withheld_from"))}),
        ("quarantine", _set("quarantine", "reason", "looked-odd"),
         {(IN_SET, kw(column="reason",
                      value_set=sorted((*QUARANTINE_REASONS, *FILE_REASONS, LATE))))}),
        ("quarantine", _set("quarantine", "reason", "truncated_file"),
         {("expect_column_values_to_not_be_in_set",
           kw(column="reason", value_set=sorted(FILE_REASONS)))}),
        ("runs", _duplicate("runs"), {("expect_column_values_to_be_unique", kw(column="run_id"))}),
        (INPUT_CONTRACT, _set("messages", "payload_size", -1),
         {(BETWEEN, kw(column="payload_size", min_value=0.0))}),
    ],
)
def test_broken_row_fails_exactly_its_expectation(table: str, mutate: Mutation,
                                                  expected: set[tuple[str, str]]) -> None:
    frames = good_frames()
    mutate(frames)
    assert failures(table, frames) == expected


def test_input_contract_fails_when_a_contract_column_is_missing() -> None:
    frames = good_frames()
    frames["messages"] = frames["messages"].drop(columns=["sequence_id"])
    suite = [e for e in suites()[INPUT_CONTRACT] if e.expectation_type
             == "expect_table_columns_to_match_set"]
    df = frames["messages"][["topic", "key", "publish_time", "payload_size", "producer_name"]]
    [row] = validate_frame(INPUT_CONTRACT, df, suite)
    assert row["success"] is False


@pytest.mark.parametrize("reason", DECISION_REASONS)
def test_every_reason_the_policy_produces_is_accepted(reason: str) -> None:
    frames = good_frames()
    frames["autoscale_decisions"].loc[0, "reason"] = reason
    assert failures("autoscale_decisions", frames) == set()


def test_every_suppression_rule_and_operation_failure_is_accepted() -> None:
    frames = good_frames()
    frames["autoscale_decisions"].loc[0, "suppressed_by"] = ", ".join(
        (*SUPPRESSED_REASONS, "operation-failed: segment 3 is SEALED"))
    assert failures("autoscale_decisions", frames) == set()


def test_every_close_reason_is_accepted() -> None:
    frames = good_frames()
    frames["entries"] = pd.concat(
        [frames["entries"].iloc[[0]].assign(close_reason=r, entry_id=100 + i)
         for i, r in enumerate(CLOSE_REASONS)], ignore_index=True)
    assert failures("entries", frames) == set()


def write_run(root: Path, frames: dict[str, pd.DataFrame]) -> DeltaStore:
    store = DeltaStore(str(root), engine="delta-rs")
    for table, df in frames.items():
        store.append(table, df, app_id=f"test:{table}", version=0)
    return store


def test_validate_run_numbers_passes_and_stores_identical_rows(tmp_path: Path) -> None:
    store = write_run(tmp_path, good_frames())
    first = validate_run(store, RUN)
    second = validate_run(store, RUN)
    stored = store.read("validations", run_id=RUN)
    assert (first.validation_id, second.validation_id) == (1, 2)
    assert sorted(stored["validation_id"].unique()) == [1, 2]
    cols = ["table", "expectation", "kwargs", "success", "observed", "unexpected_count"]
    pd.testing.assert_frame_equal(first.rows[cols], second.rows[cols])


def test_latest_validation_lists_failed_expectations(tmp_path: Path) -> None:
    frames = good_frames()
    frames["segment_load"].loc[0, "msg_rate_in"] = -2.0
    store = write_run(tmp_path, frames)
    validate_run(store, RUN)
    latest = latest_validation(store, RUN)
    assert latest is not None
    assert latest["validation_id"] == 1
    [failed] = latest["failed"]
    assert failed.startswith("segment_load: expect_column_values_to_be_between(column="
                             "msg_rate_in, min_value=0.0) — 1 unexpected")


def test_run_summary_reports_latest_validation(tmp_path: Path) -> None:
    store = write_run(tmp_path, good_frames())
    validate_run(store, RUN)
    text = format_summary(run_summary(store, RUN))
    n = len(store.read("validations", run_id=RUN))
    assert f"  validation 1: {n}/{n} expectations passed" in text.splitlines()


@pytest.mark.parametrize(
    ("broken", "rc", "expected_line"),
    [
        (False, 0, "(all passed)"),
        (True, 1, "  FAILED quarantine: expect_column_values_to_be_in_set(column=reason"),
    ],
)
def test_cli_validate_exit_code_says_whether_all_passed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], broken: bool, rc: int,
        expected_line: str) -> None:
    frames = good_frames()
    if broken:
        frames["quarantine"].loc[0, "reason"] = "looked-odd"
    write_run(tmp_path, frames)
    assert main(["validate", "--output", str(tmp_path), "--run-id", RUN]) == rc
    assert expected_line in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--output", "/nonexistent/out"], "output directory /nonexistent/out does not exist"),
        (["--output", "{tmp}", "--run-id", "nope"], "run nope is not in"),
    ],
)
def test_cli_validate_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          args: list[str], message: str) -> None:
    write_run(tmp_path, good_frames())
    rc = main(["validate", *[a.replace("{tmp}", str(tmp_path)) for a in args]])
    assert rc == 2
    assert message in capsys.readouterr().err
