"""Bad input never stops a run and is never lost (issue #4; docs/design.md invariant 2).

A replay over a folder holding junk (malformed lines, wrong types, missing fields, negative sizes,
bad or out-of-range timestamps, non-UTF-8 bytes, a 10 MB key, an empty file, a truncated gzip,
a corrupt Parquet footer) finishes; each bad record or file is in ``quarantine`` with its own
reason, the rest is processed, and ``input = accepted + quarantined``. A hypothesis fuzz test
checks the same per record at ingest.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.engine.local import read_local
from pipelines.spark.ingest import ingest_batch, salvage_files
from pipelines.spark.replay import Replay
from pipelines.storage.delta import DeltaStore

pytestmark = pytest.mark.spark

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z, epoch ms
TEN_MB = 10 * 1024 * 1024


def good(prefix: str, i: int) -> str:
    return json.dumps({"topic": "t", "key": f"{prefix}{i}", "publish_time": T0 + 1000 * i,
                       "payload_size": 100, "producer_name": "p"})


BAD_LINES = {  # line → reason
    '{"topic": "t", "publish_time": ': "malformed_record",
    "": "malformed_record",
    '{"publish_time": 1704067200000, "payload_size": 1}': "missing_topic",
    '{"topic": "t", "payload_size": 1}': "missing_publish_time",
    '{"topic": "t", "publish_time": "yesterday", "payload_size": 1}': "bad_publish_time",
    '{"topic": "t", "publish_time": "1969-12-31T23:59:59Z", "payload_size": 1}':
        "publish_time_out_of_range",
    '{"topic": "t", "publish_time": "9999-12-31T00:00:00Z", "payload_size": 1}':
        "publish_time_out_of_range",
    '{"topic": "t", "publish_time": 1704067200000}': "missing_payload_size",
    '{"topic": "t", "publish_time": 1704067200000, "payload_size": "big"}': "bad_payload_size",
    '{"topic": "t", "publish_time": 1704067200000, "payload_size": 1.5}': "bad_payload_size",
    '{"topic": "t", "publish_time": 1704067200000, "payload_size": -1}': "negative_payload_size",
    '{"topic": "t", "publish_time": 1704067200000, "payload_size": 1, "sequence_id": "x"}':
        "bad_sequence_id",
    '{"topic": "t\udcff", "publish_time": 1704067200000, "payload_size": 1}': "invalid_utf8",
    '{"topic": "t", "key": "' + "k" * TEN_MB + '", "publish_time": 1704067200000, '
    '"payload_size": 1}': "key_too_long",
}
N_GOOD = 12
N_GZ = 4000


def _bytes(lines: list[str]) -> bytes:
    # surrogateescape: "\udcff" is written as the raw (invalid UTF-8) byte 0xFF
    return "".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape")


def _replay(spark, inputs: Path, out: Path, fmt: str) -> DeltaStore:
    cfg = load_config(None, ["replay.max_files_per_trigger=2"])
    spec = get_preset("contract").replace(format=fmt)
    Replay(spark, cfg, spec, [str(inputs)], str(out), "bad", progress=lambda _: None).run()
    return DeltaStore(str(out), engine="delta-rs")


@pytest.fixture(scope="module")
def json_run(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("junk")
    bad = list(BAD_LINES)
    mixed = [good("m", 0), *bad[:7], good("m", 1), *bad[7:], good("m", 2)]
    (d / "a_mixed.json").write_bytes(_bytes(mixed))
    (d / "b_good.json").write_bytes(_bytes([good("g", i) for i in range(N_GOOD)]))
    (d / "c_empty.json").write_bytes(b"")
    gz = gzip.compress(_bytes([good("z", i) for i in range(N_GZ)]))
    (d / "d_truncated.json.gz").write_bytes(gz[: len(gz) // 2])
    return d, _replay(spark, d, tmp_path_factory.mktemp("out"), "json")


def test_every_bad_record_is_quarantined_with_its_reason(json_run):
    _d, store = json_run
    q = store.read("quarantine", "bad")
    rows = q[q["source_file"].str.endswith("a_mixed.json")]
    assert sorted(rows["reason"]) == sorted(BAD_LINES.values())


def test_quarantined_record_keeps_its_raw_text(json_run):
    _, store = json_run
    q = store.read("quarantine", "bad")
    assert '{"topic": "t", "publish_time": 1704067200000, "payload_size": -1}' in set(
        q.loc[q["reason"] == "negative_payload_size", "raw_record"])
    assert q.loc[q["reason"] == "invalid_utf8", "raw_record"].tolist() == [
        '{"topic": "t\ufffd", "publish_time": 1704067200000, "payload_size": 1}']
    long_line = next(line for line, r in BAD_LINES.items() if r == "key_too_long")
    assert q.loc[q["reason"] == "key_too_long", "raw_record"].tolist() == [long_line]


def test_records_around_bad_lines_are_processed(json_run):
    _, store = json_run
    keys = set(store.read("messages", "bad")["key"])
    assert {"m0", "m1", "m2"} | {f"g{i}" for i in range(N_GOOD)} <= keys


def test_truncated_gzip_keeps_the_records_before_the_break_and_is_reported(json_run):
    d, store = json_run
    keys = store.read("messages", "bad")["key"]
    n = int(keys.str.startswith("z").sum())
    assert 0 < n < N_GZ
    assert set(keys[keys.str.startswith("z")]) == {f"z{i}" for i in range(n)}  # a prefix
    q = store.read("quarantine", "bad")
    row = q[q["reason"] == "truncated_file"]
    assert row["source_file"].tolist() == [f"file:{d / 'd_truncated.json.gz'}"]
    assert "EOFException" in row["raw_record"].iloc[0]


def test_input_equals_accepted_plus_quarantined(json_run):
    _, store = json_run
    counts = json.loads(store.read("runs", "bad")["counts"].iloc[0])
    messages = store.read("messages", "bad")
    quarantine = store.read("quarantine", "bad")
    n_gz = int(messages["key"].str.startswith("z").sum())
    # every line of the plain files, the readable gzip lines, one row for the broken gzip
    n_input = (3 + len(BAD_LINES)) + N_GOOD + 0 + (n_gz + 1)
    assert (counts["accepted"], counts["quarantined"]) == (len(messages), len(quarantine))
    assert counts["accepted"] + counts["quarantined"] == n_input


def test_empty_file_gives_no_rows(json_run):
    _, store = json_run
    q = store.read("quarantine", "bad")
    assert not q["source_file"].str.endswith("c_empty.json").any()


# ------------------------------------------------------------------------------ Parquet


@pytest.fixture(scope="module")
def parquet_run(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("pq")
    table = pa.table({"topic": ["t"] * 3, "key": ["a", "b", "c"],
                      "publish_time": [T0, T0 + 1, T0 + 2], "payload_size": [1, 2, 3]})
    pq.write_table(table, d / "a_good.parquet")
    data = (d / "a_good.parquet").read_bytes()
    (d / "b_corrupt.parquet").write_bytes(data[: len(data) - 12] + b"\0" * 4 + b"PAR1")
    (d / "c_garbage.parquet").write_bytes(b"not a parquet file at all")
    return d, _replay(spark, d, tmp_path_factory.mktemp("out"), "parquet")


@pytest.mark.slow
def test_unreadable_parquet_files_are_reported_with_their_path(parquet_run):
    d, store = parquet_run
    q = store.read("quarantine", "bad").sort_values("source_file")
    assert list(zip(q["source_file"], q["reason"], strict=True)) == [
        (f"file:{d / 'b_corrupt.parquet'}", "unreadable_file"),
        (f"file:{d / 'c_garbage.parquet'}", "unreadable_file"),
    ]


@pytest.mark.slow
def test_run_continues_with_the_readable_parquet_file(parquet_run):
    _, store = parquet_run
    assert sorted(store.read("messages", "bad")["key"]) == ["a", "b", "c"]


def _parquet_with_invalid_utf8(path: Path) -> None:
    """Two rows; the first one's ``key`` holds the byte 0xFF (pyarrow refuses to build such a
    string column, so its buffers are taken from a binary one)."""
    raw = pa.array([b"k\xff", b"ok"], pa.binary())
    key = pa.Array.from_buffers(pa.string(), 2, raw.buffers())
    pq.write_table(pa.table({"topic": ["t", "t"], "key": key,
                             "publish_time": pa.array([T0, T0], pa.timestamp("ms", tz="UTC")),
                             "payload_size": [1, 2]}), path)


def test_parquet_string_with_invalid_utf8_is_quarantined_by_both_engines(spark, tmp_path):
    path = tmp_path / "bad.parquet"
    _parquet_with_invalid_utf8(path)
    spec = get_preset("contract", format="parquet")
    expected = [(f"file:{path}", '{"topic":"t","key":"k\ufffd","publish_time":'
                 '"2024-01-01T00:00:00.000Z","payload_size":1}', "invalid_utf8")]

    accepted, quarantine = ingest_batch(spark, str(path), spec)
    local_accepted, local_quarantine = read_local(spec, [str(path)])

    assert [tuple(r) for r in quarantine.collect()] == expected
    assert list(local_quarantine[["source_file", "raw_record", "reason"]].itertuples(
        index=False, name=None)) == expected
    assert [r.key for r in accepted.collect()] == local_accepted["key"].tolist() == ["ok"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_file_without_read_permission_is_unreadable(spark, tmp_path):
    (tmp_path / "a.json").write_text(good("a", 0) + "\n")
    secret = tmp_path / "b.json"
    secret.write_text(good("b", 0) + "\n")
    secret.chmod(0)
    _raw, bad = salvage_files(spark, [f"file:{tmp_path / 'a.json'}", f"file:{secret}"],
                             "json", spark.read.text(str(tmp_path / "a.json")).schema)
    assert [(r.source_file, r.reason) for r in bad.collect()] == [
        (f"file:{secret}", "unreadable_file")]


# ------------------------------------------------------------------------------ fuzz

_FIELD_BREAKERS = {  # (field, value) → reason
    ("topic", None): "missing_topic",
    ("topic", "  "): "missing_topic",
    ("publish_time", None): "missing_publish_time",
    ("publish_time", "not a time"): "bad_publish_time",
    ("publish_time", -5): "publish_time_out_of_range",
    ("payload_size", None): "missing_payload_size",
    ("payload_size", "12kB"): "bad_payload_size",
    ("payload_size", 2**70): "bad_payload_size",
    ("payload_size", -3): "negative_payload_size",
    ("sequence_id", -1): "bad_sequence_id",
    ("sequence_id", "seven"): "bad_sequence_id",
}

valid_record = st.fixed_dictionaries({
    "topic": st.sampled_from(["orders", "clicks", "t/ü"]),
    "key": st.one_of(st.none(), st.text(min_size=1, max_size=8)),
    "publish_time": st.integers(min_value=0, max_value=4_102_444_800_000),
    "payload_size": st.integers(min_value=0, max_value=10_000_000),
    "producer_name": st.text(max_size=6),
    "sequence_id": st.one_of(st.none(), st.integers(min_value=0, max_value=2**40)),
})


@st.composite
def line_and_reason(draw) -> tuple[str, str | None]:
    record = draw(valid_record)
    kind = draw(st.sampled_from(["valid", "field", "truncate", "not_object", "bad_byte"]))
    if kind == "valid":
        return json.dumps(record), None
    if kind == "field":
        (field, value), reason = draw(st.sampled_from(sorted(_FIELD_BREAKERS.items(),
                                                             key=repr)))
        return json.dumps({**record, field: value}), reason
    text = json.dumps(record)
    if kind == "truncate":
        return text[: draw(st.integers(min_value=0, max_value=len(text) - 1))], \
            "malformed_record"
    if kind == "not_object":
        return json.dumps(draw(st.lists(st.integers(), max_size=3))), "malformed_record"
    return text[:-1] + "\udcfe}", "invalid_utf8"


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(st.lists(line_and_reason(), min_size=1, max_size=40))
def test_fuzzed_records_are_accepted_or_quarantined_with_the_expected_reason(
        spark, tmp_path, cases):
    path = tmp_path / "fuzz.json"
    path.write_bytes(_bytes([line for line, _ in cases]))
    accepted, quarantine = ingest_batch(spark, str(path), get_preset("contract"))
    got = sorted(r.reason for r in quarantine.collect())
    assert got == sorted(r for _, r in cases if r is not None)
    assert accepted.count() == sum(r is None for _, r in cases)
