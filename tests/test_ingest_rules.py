"""The input rules both engines share (``pipelines.ingest_rules``), without Spark: one record per
case, the reason it gets; the parsed values of an accepted record; ``event_ms``; spreading."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from pipelines.ingest_rules import (
    MAX_KEY_BYTES,
    QUARANTINE_REASONS,
    check_records,
    event_ms,
    key_hashes_arrow,
    spread_minutes,
)
from pipelines.presets import get_preset

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
    spread, ms = spread_minutes(us, [pa.array(["b", "a", None])], ["x", "y", "z"], 1.0)
    assert spread.tolist() == [minute + 40_000_000, minute + 20_000_000, minute]
    assert ms.tolist() == [(minute + 40_000_000) // 1000, (minute + 20_000_000) // 1000,
                           minute // 1000]


def test_keyless_message_has_no_hashes():
    h = key_hashes_arrow(pa.array(["k", None])).to_pylist()
    assert h[1] == {"hash32": None, "segment_hash": None, "hash_b": None}
    assert h[0]["hash32"] is not None


def test_the_rules_module_does_not_import_pyspark():
    code = "import sys, pipelines.ingest_rules; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
