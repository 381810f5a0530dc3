"""The input rules both engines share (``pipelines.ingest.rules``), without Spark: one record per
case, the reason it gets; the parsed values of an accepted record; ``event_ms``; spreading."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from pipelines.contract.presets import get_preset
from pipelines.ingest.rules import (
    MAX_KEY_BYTES,
    MINUTE_HINT,
    QUARANTINE_REASONS,
    bad_file_line,
    check_records,
    event_ms,
    ingest_records,
    key_hashes_arrow,
    late_rows,
    mapped_name,
    minutes_misplaced,
    order_name,
    row_field,
    row_fields,
    spread_minutes,
    verdict_rows,
)

SPEC = get_preset("contract")
GOOD = {"topic": "t", "key": "k", "producer_name": "p", "sequence_id": "7",
        "publish_time": "2024-01-01T00:00:00Z", "payload_size": "12"}


def _check(record: dict, spec=SPEC, invalid_utf8: bool = False, malformed: bool = False):
    mapped = {c: pa.array([v], pa.string()) for c, v in record.items()}
    return check_records(mapped, np.array([invalid_utf8]), np.array([malformed]), spec)


@pytest.mark.parametrize(("change", "flags", "reason"), [
    ({"topic": None}, {"invalid_utf8": True}, "invalid_utf8"),
    ({"topic": None}, {"malformed": True}, "malformed_record"),
    ({"topic": "  "}, {}, "missing_topic"),
    ({"topic": None, "publish_time": None}, {}, "missing_topic"),
    ({"publish_time": " "}, {}, "missing_publish_time"),
    ({"publish_time": "yesterday"}, {}, "bad_publish_time"),
    ({"publish_time": "1969-12-31T23:59:59Z"}, {}, "publish_time_out_of_range"),
    ({"publish_time": "9999-12-31T00:00:00Z"}, {}, "publish_time_out_of_range"),
    ({"payload_size": None}, {}, "missing_payload_size"),
    ({"payload_size": "1.5"}, {}, "bad_payload_size"),
    ({"payload_size": "99999999999999999999"}, {}, "bad_payload_size"),
    ({"payload_size": "-1"}, {}, "negative_payload_size"),
    ({"sequence_id": "x"}, {}, "bad_sequence_id"),
    ({"sequence_id": "-3"}, {}, "bad_sequence_id"),
    ({"key": "k" * (MAX_KEY_BYTES + 1)}, {}, "key_too_long"),
])
def test_record_gets_the_first_failing_rule_as_its_reason(change, flags, reason):
    assert reason in QUARANTINE_REASONS
    assert _check({**GOOD, **change}, **flags).column("reason").to_pylist() == [reason]


@pytest.mark.parametrize(("publish_time", "us"), [
    ("2024-01-01T00:00:00Z", 1_704_067_200_000_000),
    ("1704067200000", 1_704_067_200_000_000),  # auto: a number is epoch ms
    ("2024-01-01 01:00:00.5+01:00", 1_704_067_200_500_000),
])
def test_accepted_record_has_its_publish_time_in_epoch_micros(publish_time, us):
    out = _check({**GOOD, "publish_time": publish_time}).to_pylist()[0]
    assert out["reason"] is None
    assert (out["publish_us"], out["event_ms"]) == (us, us // 1000)


def test_accepted_record_has_integer_size_and_sequence_and_the_constant_topic():
    spec = SPEC.replace(topic="fallback")
    out = _check({**GOOD, "topic": "", "payload_size": "1.2e3", "sequence_id": "7.0"},
                 spec).to_pylist()[0]
    assert (out["topic"], out["payload_size"], out["sequence_id"], out["reason"]) == (
        "fallback", 1200, 7, None)


def test_typed_parquet_values_are_taken_as_they_are():
    mapped = {"topic": pa.array(["t"]), "key": pa.array([None], pa.string()),
              "publish_time": pa.array([1_704_067_200_000_000], pa.timestamp("us", "UTC")),
              "payload_size": pa.array([5], pa.int64()),
              "sequence_id": pa.array([None], pa.int64())}
    out = check_records(mapped, np.array([False]), np.array([False]), SPEC).to_pylist()[0]
    assert (out["publish_us"], out["payload_size"], out["sequence_id"], out["reason"]) == (
        1_704_067_200_000_000, 5, None, None)


@pytest.mark.parametrize(("us", "speed", "expected"), [
    (1_500_999, 1.0, 1500),
    (-1, 1.0, -1),
    (3_000_000, 2.0, 1500),
    (1_000_000, 0.3, 3333),
])
def test_event_ms_is_the_floor_of_publish_ms_over_speed(us, speed, expected):
    assert event_ms(np.array([us], dtype=np.int64), speed).tolist() == [expected]


def test_records_of_a_minute_are_spread_evenly_in_order_then_record_digest():
    minute = 1_704_067_200_000_000
    us = np.array([minute + 5, minute, minute + 59_000_000], dtype=np.int64)
    spread, ms = spread_minutes(us, [pa.array(["b", "a", None])], pa.array(["x", "y", "z"]), 1.0)
    assert spread.tolist() == [minute + 40_000_000, minute + 20_000_000, minute]
    assert ms.tolist() == [(minute + 40_000_000) // 1000, (minute + 20_000_000) // 1000,
                           minute // 1000]


def test_keyless_message_has_no_hashes():
    h = key_hashes_arrow(pa.array(["k", None])).to_pylist()
    assert h[1] == {"hash32": None, "segment_hash": None, "hash_b": None}
    assert h[0]["hash32"] is not None


# ------------------------------------------------------------- records in, verdict out

T0_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z


def _records(rows: list[dict], **columns) -> pa.RecordBatch:
    """Mapped records as an engine hands them over: ``rows`` of contract values (strings)."""
    n = len(rows)
    mapped = {mapped_name(c): pa.array([r.get(c) for r in rows], pa.string())
              for c in GOOD}
    return pa.RecordBatch.from_pydict({
        "source_file": [f"file:/in/{i}" for i in range(n)],
        "raw_record": [f"line {i}" for i in range(n)],
        "invalid_utf8": [False] * n, "malformed": [False] * n, **mapped, **columns})


def test_ingest_records_accepts_good_records_and_rejects_bad_ones_by_position():
    records = _records([GOOD, {**GOOD, "payload_size": "-1"}, {**GOOD, "key": None}])

    verdict = ingest_records(records, SPEC)

    assert verdict.accepted_rows.tolist() == [0, 2]
    assert verdict.rejected_rows.tolist() == [1]
    assert verdict.reasons.to_pylist() == ["negative_payload_size"]
    assert verdict.accepted.column("key").to_pylist() == ["k", None]
    assert verdict.accepted.column("event_ms").to_pylist() == [T0_US // 1000] * 2


def test_ingest_records_takes_a_parquet_column_from_the_row_field_its_mapping_names():
    row = {row_field("topic"): ["t"], row_field("key"): ["k"],
           row_field("publish_time"): pa.array([T0_US], pa.timestamp("us", "UTC")),
           row_field("payload_size"): pa.array([5], pa.int64())}
    records = pa.RecordBatch.from_pydict({"source_file": ["f"], "invalid_utf8": [False],
                                          "malformed": [False], **row})

    verdict = ingest_records(records, SPEC.replace(format="parquet"))

    assert verdict.accepted.to_pylist()[0] | {"publish_time": None} == {
        "topic": "t", "key": "k", "producer_name": "default-producer", "sequence_id": None,
        "publish_time": None, "payload_size": 5, "event_ms": T0_US // 1000}


@pytest.mark.parametrize("name", ["topic", "a.b", "x:y/`z` %"])
def test_row_field_names_round_trip_and_hold_no_dot(name):
    column = row_field(name)
    assert "." not in column
    assert row_fields(["m_key", column]) == [name]


def test_ingest_records_spreads_a_minute_over_its_records():
    spec = SPEC.replace(spread_within_minute=True, spread_order=("key",))
    rows = [{**GOOD, "key": k} for k in ("b", "a")]
    records = _records(rows, **{order_name(0): ["b", "a"]})

    verdict = ingest_records(records, spec)

    assert verdict.accepted.column("publish_time").cast(pa.int64()).to_pylist() == [
        T0_US + 30_000_000, T0_US]


@pytest.mark.parametrize(("horizon_ms", "finalized", "late"), [
    (None, False, [False, False]),
    (T0_US // 1000 + 1, False, [True, False]),
    (None, True, [True, True]),
])
def test_late_rows_are_those_before_the_horizon_or_all_after_finalization(horizon_ms,
                                                                          finalized, late):
    records = _records([GOOD, {**GOOD, "publish_time": "2024-01-01T00:00:00.001Z"}])
    verdict = ingest_records(records, SPEC)
    assert late_rows(verdict, horizon_ms, finalized).tolist() == late


def test_verdict_rows_give_a_rejected_record_its_file_text_and_reason():
    records = _records([GOOD, {**GOOD, "topic": None}])
    rows = verdict_rows(records, ingest_records(records, SPEC)).to_pylist()
    assert [(r["source_file"], r["raw_record"], r["reason"], r["topic"]) for r in rows] == [
        ("file:/in/1", "line 1", "missing_topic", None)]


def test_verdict_rows_give_a_late_record_its_message_columns_and_no_hashes():
    records = _records([GOOD])
    verdict = ingest_records(records, SPEC)
    rows = verdict_rows(records, verdict, late_rows(verdict, None, True)).to_pylist()
    assert [(r["reason"], r["topic"], r["key"], r["payload_size"], r["hash32"]) for r in rows
            ] == [("late", "t", "k", 12, None)]


def test_verdict_rows_with_accepted_give_each_message_its_key_hashes():
    records = _records([GOOD])
    rows = verdict_rows(records, ingest_records(records, SPEC), accepted=True).to_pylist()
    assert [(r["reason"], r["hash32"]) for r in rows] == [
        (None, key_hashes_arrow(pa.array(["k"])).field("hash32")[0].as_py())]


def test_verdict_rows_rebuild_a_rejected_parquet_row_from_its_fields():
    records = pa.RecordBatch.from_pydict({
        "source_file": ["f"], "invalid_utf8": [False], "malformed": [False],
        row_field("topic"): ["t"], row_field("a.b"): pa.array([-1], pa.int64()),
        row_field("publish_time"): pa.array([None], pa.string())})
    spec = SPEC.replace(format="parquet", columns={"topic": "topic", "publish_time":
                                                   "publish_time", "payload_size": "a.b"})
    rows = verdict_rows(records, ingest_records(records, spec)).to_pylist()
    assert [(r["record"], r["reason"]) for r in rows] == [
        ({"topic": "t", "a.b": -1, "publish_time": None}, "missing_publish_time")]


@pytest.mark.parametrize(("hint", "misplaced"), [
    (T0_US, False),
    (T0_US + 60_000_000, True),
    (None, True),
])
def test_a_minute_hint_other_than_the_records_minute_is_misplaced(hint, misplaced):
    records = _records([{**GOOD, "publish_time": "2024-01-01T00:00:30Z"}],
                       **{MINUTE_HINT: pa.array([hint], pa.int64())})
    assert minutes_misplaced(records, ingest_records(records, SPEC)) is misplaced


def test_the_rules_module_does_not_import_pyspark():
    code = "import sys, pipelines.ingest.rules; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("unreadable_file", "input file f.gz is unreadable (EOFError: x); quarantined as "
                            "unreadable_file, continuing with the others"),
        ("truncated_file", "input file f.gz is cut short (EOFError: x); quarantined as "
                           "truncated_file, continuing with the others"),
    ],
)
def test_bad_file_line_says_what_happened_to_the_file(reason, expected):
    assert bad_file_line("f.gz", reason, "EOFError: x") == expected
