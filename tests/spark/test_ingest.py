"""Ingest: raw reads (batch and streaming), mapping to the contract, quarantine, presets."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import math
from pathlib import Path

import mmh3
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from pyspark.sql import Observation
from pyspark.sql import types as T

from pipelines.contract.presets import PRESETS, get_preset
from pipelines.core.hashing import hash32
from pipelines.engine.local import read_local
from pipelines.ingest.rules import key_hashes_arrow
from pipelines.spark.ingest import (
    ACCEPTED_COLUMNS,
    MAX_KEY_BYTES,
    QUARANTINE_REASONS,
    _stream_path,
    ingest_batch,
    parse_records,
    read_raw_batch,
    read_raw_stream,
    resolve_input_spec,
)

pytestmark = pytest.mark.spark

UTC = dt.UTC
REPO = Path(__file__).resolve().parents[2]
ONLINE_RETAIL_DIR = REPO / ".." / "shared" / "traces" / "online-retail"
ONLINE_RETAIL_HEADER = (
    "InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country"
)

ACCEPTED_SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType()),
        T.StructField("key", T.StringType()),
        T.StructField("producer_name", T.StringType()),
        T.StructField("sequence_id", T.LongType()),
        T.StructField("publish_time", T.TimestampType()),
        T.StructField("payload_size", T.LongType()),
        T.StructField("source_file", T.StringType()),
        T.StructField("event_ms", T.LongType()),
        T.StructField("hash32", T.LongType()),
        T.StructField("segment_hash", T.IntegerType()),
        T.StructField("hash_b", T.IntegerType()),
    ]
)


def _write(tmp_path: Path, name: str, lines: list[str], gz: bool = False) -> Path:
    path = tmp_path / name
    # surrogateescape: a lone surrogate "\udcff" in a test line is written as the raw byte 0xFF
    data = "".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _uri(path: Path) -> str:
    return f"file:{path}"


def _expected(
    path: Path,
    topic: str,
    key: str | None,
    producer: str,
    seq: int | None,
    publish: dt.datetime,
    size: int,
    speed: float = 1.0,
) -> tuple:
    micros = (publish - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)
    h = hash32(key)
    return (
        topic,
        key,
        producer,
        seq,
        publish,
        size,
        _uri(path),
        math.floor(micros / 1000 / speed),
        h,
        None if h is None else h >> 16,
        None if h is None else h & 0xFFFF,
    )


def _assert_accepted(spark, accepted, rows):
    expected = spark.createDataFrame(rows, ACCEPTED_SCHEMA)
    assert_df_equality(accepted, expected, ignore_row_order=True, ignore_nullable=True)


def _quarantined(quarantine) -> list[tuple[str, str, str]]:
    return sorted((r.source_file, r.raw_record, r.reason) for r in quarantine.collect())


# ------------------------------------------------------------------------- formats


def test_contract_json_lines_are_mapped_to_accepted_columns(spark, tmp_path):
    keyed = json.dumps(
        {
            "topic": "orders",
            "key": "k1",
            "publish_time": "2024-01-01T00:00:00.250Z",
            "payload_size": 10,
            "producer_name": "p1",
            "sequence_id": 7,
        }
    )
    keyless = json.dumps(
        {"topic": "orders", "publish_time": 1704067201000, "payload_size": "0"}
    )
    path = _write(tmp_path, "a.json", [keyed, keyless])

    accepted, quarantine = ingest_batch(spark, str(path), get_preset("contract"))

    t0 = dt.datetime(2024, 1, 1, 0, 0, 0, 250000, UTC)
    t1 = dt.datetime(2024, 1, 1, 0, 0, 1, tzinfo=UTC)
    _assert_accepted(
        spark,
        accepted,
        [
            _expected(path, "orders", "k1", "p1", 7, t0, 10),
            _expected(path, "orders", None, "default-producer", None, t1, 0),
        ],
    )
    assert quarantine.count() == 0


def test_contract_csv_takes_column_order_from_the_header(spark, tmp_path):
    line = "7,2024-01-01 00:00:01,12,k,orders,p"
    header = "sequence_id,publish_time,payload_size,key,topic,producer_name"
    path = _write(tmp_path, "a.csv", [header, line])

    accepted, quarantine = ingest_batch(spark, str(path), get_preset("contract", format="csv"))

    t = dt.datetime(2024, 1, 1, 0, 0, 1, tzinfo=UTC)
    _assert_accepted(spark, accepted, [_expected(path, "orders", "k", "p", 7, t, 12)])
    assert quarantine.count() == 0


def test_contract_parquet_rows_are_accepted(spark, tmp_path):
    t = dt.datetime(2024, 1, 1, 0, 0, 2, 5, UTC)
    table = pa.table(
        {
            "topic": ["orders"],
            "key": ["k"],
            "publish_time": pa.array([t], pa.timestamp("us", tz="UTC")),
            "payload_size": pa.array([3], pa.int32()),
        }
    )
    path = tmp_path / "a.parquet"
    pq.write_table(table, path)

    accepted, quarantine = ingest_batch(spark, str(path), get_preset("contract", format="parquet"))

    _assert_accepted(
        spark, accepted, [_expected(path, "orders", "k", "default-producer", None, t, 3)]
    )
    assert quarantine.count() == 0


def test_quarantined_parquet_row_keeps_its_json_form(spark, tmp_path):
    # the reader gives the row as a struct; its JSON form is made for quarantined rows only
    t = dt.datetime(2024, 1, 1, 0, 0, 2, 5, UTC)
    table = pa.table({"topic": ["orders", "orders"], "key": ["k", "bad"],
                      "publish_time": pa.array([t, t], pa.timestamp("us", tz="UTC")),
                      "payload_size": pa.array([3, -1], pa.int64())})
    path = tmp_path / "a.parquet"
    pq.write_table(table, path)

    accepted, quarantine = ingest_batch(spark, str(path), get_preset("contract", format="parquet"))

    assert read_raw_batch(spark, str(path), "parquet").columns == ["source_file", "record"]
    assert accepted.count() == 1
    rows = quarantine.collect()
    assert [r["reason"] for r in rows] == ["negative_payload_size"]
    assert json.loads(rows[0]["raw_record"]) == {"topic": "orders", "key": "bad",
                                                 "publish_time": "2024-01-01T00:00:02.000Z",
                                                 "payload_size": -1}


def test_gzip_json_lines_are_read(spark, tmp_path):
    line = json.dumps({"topic": "t", "key": "k", "publish_time": 1000, "payload_size": 1})
    path = _write(tmp_path, "a.json.gz", [line, line], gz=True)

    accepted, quarantine = ingest_batch(spark, str(path), get_preset("contract"))

    assert [(r.key, r.event_ms, r.source_file) for r in accepted.collect()] == [
        ("k", 1000, _uri(path))
    ] * 2
    assert quarantine.count() == 0


def test_header_only_csv_gives_no_rows_and_no_quarantine(spark, tmp_path):
    path = _write(tmp_path, "a.csv", [ONLINE_RETAIL_HEADER])

    accepted, quarantine = ingest_batch(spark, str(path), get_preset("online-retail"))

    assert (accepted.count(), quarantine.count()) == (0, 0)


# ------------------------------------------------------------------------- quarantine

_T = '"publish_time": "2024-01-01T00:00:00Z"'
BAD_RECORDS = {
    "invalid_utf8": '{"topic": "t\udcff", ' + _T + ', "payload_size": 1}',
    "malformed_record": '{"topic": "t", "publish_time": ',
    "missing_topic": '{' + _T + ', "payload_size": 1}',
    "missing_publish_time": '{"topic": "t", "publish_time": " ", "payload_size": 1}',
    "bad_publish_time": '{"topic": "t", "publish_time": "yesterday", "payload_size": 1}',
    "publish_time_out_of_range": (
        '{"topic": "t", "publish_time": "1969-12-31T23:59:59Z", "payload_size": 1}'
    ),
    "missing_payload_size": '{"topic": "t", ' + _T + '}',
    "bad_payload_size": '{"topic": "t", ' + _T + ', "payload_size": "big"}',
    "negative_payload_size": '{"topic": "t", ' + _T + ', "payload_size": -1}',
    "bad_sequence_id": '{"topic": "t", ' + _T + ', "payload_size": 1, "sequence_id": "x"}',
    "key_too_long": '{"topic": "t", "key": "' + "k" * (MAX_KEY_BYTES + 1) + '", ' + _T
    + ', "payload_size": 1}',
}


def _stored(line: str) -> str:
    """A test line as quarantine stores it: invalid UTF-8 bytes become U+FFFD."""
    return line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def test_every_quarantine_reason_has_a_bad_record_case():
    assert tuple(BAD_RECORDS) == QUARANTINE_REASONS


@pytest.mark.parametrize("reason", QUARANTINE_REASONS)
def test_bad_json_record_is_quarantined_with_its_reason(spark, tmp_path, reason):
    good = json.dumps({"topic": "t", "publish_time": 0, "payload_size": 0})
    path = _write(tmp_path, "a.json", [good, BAD_RECORDS[reason]])

    accepted, quarantine = ingest_batch(spark, str(path), get_preset("contract"))

    assert _quarantined(quarantine) == [(_uri(path), _stored(BAD_RECORDS[reason]), reason)]
    assert accepted.count() == 1


def test_csv_line_with_wrong_field_count_is_malformed(spark, tmp_path):
    short = "536365,85123A,WHITE HANGING HEART"
    path = _write(tmp_path, "a.csv", [ONLINE_RETAIL_HEADER, short])

    accepted, quarantine = ingest_batch(spark, str(path), get_preset("online-retail"))

    assert _quarantined(quarantine) == [(_uri(path), short, "malformed_record")]
    assert accepted.count() == 0


def test_csv_doubled_quotes_and_commas_inside_quotes_are_one_field(spark, tmp_path):
    line = _retail("536477", "22041", "2010-12-01 12:27:00", "16210.0", '"FRAME 7"", SINGLE"')
    path = _write(tmp_path, "a.csv", [ONLINE_RETAIL_HEADER, line])

    accepted, quarantine = ingest_batch(spark, str(path), get_preset("online-retail"))

    assert [(r.key, r.producer_name) for r in accepted.collect()] == [("22041", "16210")]
    assert quarantine.count() == 0


def test_first_failing_rule_gives_the_reason(spark, tmp_path):
    line = '{"publish_time": "never", "payload_size": -5}'
    path = _write(tmp_path, "a.json", [line])

    _, quarantine = ingest_batch(spark, str(path), get_preset("contract"))

    assert [r.reason for r in quarantine.collect()] == ["missing_topic"]


def test_constant_topic_fills_records_without_topic(spark, tmp_path):
    path = _write(tmp_path, "a.json", ['{"publish_time": 5, "payload_size": 1}'])

    accepted, _ = ingest_batch(spark, str(path), get_preset("contract", topic="fallback"))

    assert [r.topic for r in accepted.collect()] == ["fallback"]


# ------------------------------------------------------------------------- time


def test_publish_time_without_offset_is_read_in_the_spec_time_zone(spark, tmp_path):
    lines = [
        '{"topic": "t", "publish_time": "2024-07-01 12:00:00", "payload_size": 1}',
        '{"topic": "t", "publish_time": "2024-07-01T12:00:00+00:00", "payload_size": 1}',
    ]
    path = _write(tmp_path, "a.json", lines)

    accepted, _ = ingest_batch(
        spark, str(path), get_preset("contract", time_zone="Europe/London")
    )

    times = sorted(r.publish_time for r in accepted.collect())
    assert times == [dt.datetime(2024, 7, 1, 11, 0), dt.datetime(2024, 7, 1, 12, 0)]


def test_speed_compresses_the_event_clock(spark, tmp_path):
    line = '{"topic": "t", "publish_time": 1704067200123, "payload_size": 1}'
    path = _write(tmp_path, "a.json", [line])

    accepted, _ = ingest_batch(spark, str(path), get_preset("contract", speed=100))

    assert [r.event_ms for r in accepted.collect()] == [17040672001]


# ------------------------------------------------------------------------- presets


def _retail(invoice: str, stock: str, date: str, customer: str, desc: str = "MUG") -> str:
    return f"{invoice},{stock},{desc},1,{date},1.25,{customer},United Kingdom"


def test_online_retail_spreads_rows_of_a_minute_evenly_in_invoice_stock_order(spark, tmp_path):
    lines = [
        _retail("536366", "B", "2010-12-01 08:26:00", "17850.0"),
        _retail("536365", "Z", "2010-12-01 08:26:00", "17850.0"),
        _retail("536365", "A", "2010-12-01 08:26:00", "17850.0"),
        _retail("536367", "A", "2010-12-01 08:27:00", "17850.0"),
    ]
    path = _write(tmp_path, "2010-12-01.csv", [ONLINE_RETAIL_HEADER, *lines])

    accepted, _ = ingest_batch(spark, str(path), get_preset("online-retail"))

    got = sorted((r.publish_time, r.key) for r in accepted.collect())
    minute = dt.datetime(2010, 12, 1, 8, 26)  # London = UTC in December
    assert got == [
        (minute, "A"),
        (minute + dt.timedelta(milliseconds=20000), "Z"),
        (minute + dt.timedelta(milliseconds=40000), "B"),
        (dt.datetime(2010, 12, 1, 8, 27), "A"),
    ]


def test_online_retail_maps_topic_key_producer_and_payload_bytes(spark, tmp_path):
    line = _retail("536365", "85123A", "2010-12-01 08:26:00", "17850.0", desc="CAFÉ MUG")
    path = _write(tmp_path, "2010-12-01.csv", [ONLINE_RETAIL_HEADER, line])

    accepted, _ = ingest_batch(spark, str(path), get_preset("online-retail"))

    t = dt.datetime(2010, 12, 1, 8, 26, tzinfo=UTC)
    size = len(line.encode("utf-8"))
    _assert_accepted(
        spark, accepted, [_expected(path, "United Kingdom", "85123A", "17850", None, t, size)]
    )


def test_online_retail_row_without_customer_has_the_anonymous_producer(spark, tmp_path):
    line = _retail("536414", "22139", "2010-12-01 11:52:00", "")
    path = _write(tmp_path, "2010-12-01.csv", [ONLINE_RETAIL_HEADER, line])

    accepted, _ = ingest_batch(spark, str(path), get_preset("online-retail"))

    assert [r.producer_name for r in accepted.collect()] == ["anonymous"]


def test_online_retail_summer_time_is_converted_from_london_to_utc(spark, tmp_path):
    line = _retail("550000", "A", "2011-06-01 10:00:00", "1.0")
    path = _write(tmp_path, "2011-06-01.csv", [ONLINE_RETAIL_HEADER, line])

    accepted, _ = ingest_batch(spark, str(path), get_preset("online-retail"))

    assert [r.publish_time for r in accepted.collect()] == [dt.datetime(2011, 6, 1, 9, 0)]


def test_online_retail_trace_first_file_conserves_records(spark):
    if not ONLINE_RETAIL_DIR.is_dir():
        pytest.skip(f"trace folder {ONLINE_RETAIL_DIR} not present")
    first = sorted(ONLINE_RETAIL_DIR.glob("*.csv"))[0]
    lines = first.read_bytes().count(b"\n")

    accepted, quarantine = ingest_batch(spark, str(first), get_preset("online-retail"))

    assert accepted.count() + quarantine.count() == lines - 1


def test_pulsar_export_maps_dunder_columns_and_sizes_the_value(spark, tmp_path):
    line = json.dumps(
        {
            "__key__": "k",
            "__publish_time__": "2024-01-01T00:00:00Z",
            "__producer_name__": "prod-1",
            "__sequence_id__": 42,
            "__message_id__": "(1,2,-1)",
            "__value__": "héllo",
        }
    )
    path = _write(tmp_path, "export.json", [line])

    accepted, _ = ingest_batch(spark, str(path), get_preset("pulsar-export", topic="events"))

    t = dt.datetime(2024, 1, 1, tzinfo=UTC)
    _assert_accepted(spark, accepted, [_expected(path, "events", "k", "prod-1", 42, t, 6)])


def test_apache_log_line_not_in_log_format_is_malformed(spark, tmp_path):
    good = (
        '83.149.9.216 - - [17/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 203023 "-" "curl"'
    )
    path = _write(tmp_path, "access.log", [good, "not a log line"])

    accepted, quarantine = ingest_batch(spark, str(path), get_preset("apache-logs"))

    assert [(r.key, r.publish_time) for r in accepted.collect()] == [
        ("83.149.9.216", dt.datetime(2015, 5, 17, 10, 5, 3))
    ]
    assert [r.reason for r in quarantine.collect()] == ["malformed_record"]


def test_every_preset_names_itself():
    assert all(spec.preset == name for name, spec in PRESETS.items())


# ------------------------------------------------------------------------- streaming, hashing


def test_stream_micro_batches_parse_like_a_batch_read(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for day, minute in (("01", "08:26"), ("02", "09:00")):
        lines = [
            _retail("1", "A", f"2010-12-{day} {minute}:00", "5.0"),
            _retail("1", "B", f"2010-12-{day} {minute}:00", "5.0"),
            "bad,line",
        ]
        _write(src, f"2010-12-{day}.csv", [ONLINE_RETAIL_HEADER, *lines])
    _write(src, "SOURCE.md", ["# not a record: the preset reads *.csv only"])
    spec = get_preset("online-retail")
    batches: list[int] = []
    rows: list[tuple] = []

    def handle(batch_df, batch_id):
        accepted, quarantine = parse_records(batch_df, spec)
        batches.append(batch_id)
        rows.extend(tuple(r) for r in accepted.collect())
        rows.extend(("Q", r.reason) for r in quarantine.collect())

    stream = read_raw_stream(
        spark, str(src), "csv", max_files_per_trigger=1, path_glob_filter=spec.file_glob
    )
    query = (
        stream.writeStream.foreachBatch(handle)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    query.awaitTermination(120)

    accepted, quarantine = ingest_batch(spark, str(src), spec)
    expected = [tuple(r) for r in accepted.collect()]
    expected += [("Q", r.reason) for r in quarantine.collect()]
    assert batches == [0, 1]
    assert sorted(rows, key=repr) == sorted(expected, key=repr)
    assert len(expected) == 6


def test_parse_records_rejects_a_stream_when_the_spec_spreads_minutes(spark, tmp_path):
    _write(tmp_path, "a.csv", [ONLINE_RETAIL_HEADER])
    stream = read_raw_stream(spark, str(tmp_path), "csv")

    with pytest.raises(ValueError, match="foreachBatch"):
        parse_records(stream, get_preset("online-retail"))


@pytest.mark.parametrize("name, lines, preset, expected", [
    ("a.json", [json.dumps({"topic": "t", "publish_time": 0, "payload_size": 0}),
                BAD_RECORDS["missing_topic"]], "contract",
     # JSON: per required mapped field, the records that have it (missing_topic has no topic)
     {"records": 2, "present_topic": 1, "present_publish_time": 2, "present_payload_size": 2}),
    ("a.csv", [ONLINE_RETAIL_HEADER,  # the header line is not a record
               _retail("536365", "85123A", "2010-12-01 08:26:00", "17850.0")],
     "online-retail", {"records": 1}),
])
def test_observation_counts_records_and_present_fields_while_accepted_is_written(
        spark, tmp_path, name, lines, preset, expected):
    path = _write(tmp_path, name, lines)
    observation = Observation()
    spec = resolve_input_spec(get_preset(preset), spark, [str(path)])
    accepted, _ = parse_records(read_raw_batch(spark, [str(path)], spec.format, spec.file_glob),
                                spec, observation=observation)

    accepted.write.parquet(str(tmp_path / "out"))  # the one action

    assert observation.get == expected


def test_parse_records_rejects_an_observation_on_a_stream(spark, tmp_path):
    _write(tmp_path, "a.json", ['{"topic": "t"}'])
    stream = read_raw_stream(spark, str(tmp_path), "json")

    with pytest.raises(ValueError, match="static DataFrame"):
        parse_records(stream, get_preset("contract"), observation=Observation())


def test_parse_records_accepts_a_stream_when_the_spec_does_not_spread(spark, tmp_path):
    _write(tmp_path, "a.json", ['{"topic": "t"}'])
    stream = read_raw_stream(spark, str(tmp_path), "json")

    accepted, quarantine = parse_records(stream, get_preset("contract"))

    assert accepted.isStreaming and quarantine.isStreaming


def test_folder_read_skips_files_not_matching_the_preset_glob(spark, tmp_path):
    line = _retail("1", "A", "2010-12-01 08:26:00", "5.0")
    _write(tmp_path, "2010-12-01.csv", [ONLINE_RETAIL_HEADER, line])
    _write(tmp_path, "SOURCE.md", ["# trace notes"])

    accepted, quarantine = ingest_batch(spark, str(tmp_path), get_preset("online-retail"))

    assert (accepted.count(), quarantine.count()) == (1, 0)


def test_key_hashes_match_murmur3_seed_0_and_keep_keyless_null():
    result = key_hashes_arrow(pa.array(["a", None, "85123A"])).to_pylist()

    h = mmh3.hash(b"85123A", 0, signed=False)
    assert result == [
        {"hash32": 0x3C2569B2, "segment_hash": 0x3C25, "hash_b": 0x69B2},
        {"hash32": None, "segment_hash": None, "hash_b": None},
        {"hash32": h, "segment_hash": h >> 16, "hash_b": h & 0xFFFF},
    ]


def test_accepted_columns_are_in_contract_order(spark, tmp_path):
    path = _write(tmp_path, "a.json", ['{"topic": "t", "publish_time": 0, "payload_size": 0}'])

    accepted, _ = ingest_batch(spark, str(path), get_preset("contract"))

    assert tuple(accepted.columns) == ACCEPTED_COLUMNS


@pytest.mark.parametrize(("name", "glob"), [
    ("a.json", "a.jso[n]"),
    ("day[1].csv", "day\\[1\\].cs[v]"),
    ("x.json.gz", "x.json.g[z]"),
])
def test_a_single_input_file_is_watched_through_a_glob_matching_only_it(tmp_path, name, glob):
    (tmp_path / name).write_text("{}\n")
    assert _stream_path(str(tmp_path / name)) == f"{tmp_path}/{glob}"
    assert _stream_path(str(tmp_path)) == str(tmp_path)  # folders stay as they are


def test_stream_reads_a_single_file_given_as_input(spark, tmp_path):
    (tmp_path / "a.json").write_text('{"n": 1}\n{"n": 2}\n')
    (tmp_path / "b.json").write_text('{"n": 3}\n')
    raw = read_raw_stream(spark, [str(tmp_path / "a.json")], "json")
    q = raw.writeStream.format("memory").queryName("single_file").trigger(
        availableNow=True).start()
    q.awaitTermination()
    rows = spark.sql("select raw_record from single_file").collect()
    assert sorted(r[0] for r in rows) == ['{"n": 1}', '{"n": 2}']


def test_stream_reads_a_named_file_whatever_the_spec_file_glob(spark, tmp_path):
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(b'{"n": 1}\n'))  # not *.json
    (tmp_path / "b.json").write_text('{"n": 2}\n')
    (tmp_path / "c.json.gz").write_bytes(gzip.compress(b'{"n": 3}\n'))
    raw = read_raw_stream(spark, [str(tmp_path / "a.json.gz"), str(tmp_path)], "json",
                          path_glob_filter="*.json")
    q = raw.writeStream.format("memory").queryName("named_file").trigger(
        availableNow=True).start()
    q.awaitTermination()
    rows = spark.sql("select raw_record from named_file").collect()
    assert sorted(r[0] for r in rows) == ['{"n": 1}', '{"n": 2}']  # c.json.gz: not *.json


# ------------------------------------------------------------ Spark's reader vs the local one


@pytest.mark.parametrize(("name", "preset", "lines"), [
    ("a.json", "contract", [
        json.dumps({"topic": "t", "key": "k", "publish_time": 1704067200000,
                    "payload_size": "1.2e2", "sequence_id": "7.0"}),
        '{"topic": "t", "publish_time": "2024-01-01 01:00:00.5+01:00", "payload_size": 3}',
        '{"topic": "t", "publish_time": "9999-12-31T00:00:00Z", "payload_size": 1}',
        *BAD_RECORDS.values()]),
    ("2010-12-01.csv", "online-retail", [
        ONLINE_RETAIL_HEADER,
        _retail("536366", "B", "2010-12-01 08:26:00", "17850.0"),
        _retail("536365", "Z", "2010-12-01 08:26:00", ""),
        _retail("536365", "A", "2010-07-01 08:26:00", "17850.0"),
        "536365,85123A,WHITE HANGING HEART"]),
])
def test_spark_ingest_gives_the_local_engine_records(spark, tmp_path, name, preset, lines):
    path = _write(tmp_path, name, lines)
    spec = get_preset(preset)

    accepted, quarantine = ingest_batch(spark, str(path), spec)
    local_accepted, local_quarantine = read_local(spec, [str(path)])

    assert sorted(map(repr, map(tuple, accepted.collect()))) == sorted(
        repr(tuple(_plain(v) for v in row))
        for row in local_accepted.itertuples(index=False, name=None))
    assert _quarantined(quarantine) == sorted(
        local_quarantine[["source_file", "raw_record", "reason"]].itertuples(index=False,
                                                                              name=None))


def _plain(value):
    """A local-engine cell as Spark's ``collect`` gives it (None, int, naive UTC datetime)."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp):
        return value.tz_convert(None).to_pydatetime()
    return value.item() if hasattr(value, "item") else value
