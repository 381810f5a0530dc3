"""The replay's staging pass on Spark (``pipelines.spark.staging_pass.stage_batch``): the input
rules, the staged files and the quarantined records in one ``mapInArrow``; minute spreading
across its tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.contract.presets import InputSpec, get_preset
from pipelines.engine.local import read_local
from pipelines.spark.ingest import map_records, quarantine_rows, read_raw_batch, resolve_input_spec
from pipelines.spark.staging_pass import stage_batch, stage_files
from pipelines.storage.parquet_input import SPLIT_BYTES
from pipelines.storage.staging import (
    MISPLACED_MARK,
    StagingPlan,
    read_staged,
    staged_batch_stats,
)

pytestmark = pytest.mark.spark

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z, epoch ms
TS = pa.timestamp("us", tz="UTC")
RETAIL_HEADER = "InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country"


def _json(topic: str | None, ms: int, size: object = 1) -> str:
    return json.dumps({"topic": topic, "key": f"k{ms}", "publish_time": ms,
                       "payload_size": size})


def _retail(invoice: int, stock: str, minute: int) -> str:
    return f"{invoice},{stock},MUG,1,2010-12-01 08:{minute:02d}:00,1.25,17850.0,United Kingdom"


def _stage(spark, path: Path, spec: InputSpec, staging: Path,
           plan: StagingPlan | None = None) -> tuple[list[tuple], int]:
    """Stage ``path``'s records as batch 0; the quarantined rows and how many times the pass
    ran (its verdicts taken)."""
    spec = resolve_input_spec(spec, spark, str(path))
    raw = read_raw_batch(spark, str(path), spec.format, spec.file_glob)
    taken: list[list[tuple]] = []

    def take(verdicts) -> None:
        taken.append(sorted(tuple(r) for r in quarantine_rows(verdicts, spec).collect()))

    stage_batch(map_records(raw, spec), str(staging), 0, plan or StagingPlan(spec), take)
    return taken[-1], len(taken)


def _messages(pdf) -> list[tuple]:
    """(topic, key, publish_time, event_ms) of each message, sorted."""
    times = [pd.Timestamp(t) for t in pdf["publish_time"].tolist()]
    return sorted(zip(pdf["topic"].tolist(), pdf["key"].tolist(), times,
                      pdf["event_ms"].tolist(), strict=True))


def _staged(staging: Path) -> list[tuple]:
    """Every staged message of batch 0 (:func:`_messages`)."""
    return sorted(m for topic in staged_batch_stats(str(staging), 0)
                  for m in _messages(read_staged(str(staging), topic, None, None)))


def _local(path: Path, spec: InputSpec) -> list[tuple]:
    """The messages the local engine accepts from ``path`` (:func:`_messages`)."""
    return _messages(read_local(spec, [str(path)])[0])


def test_rejected_records_come_out_of_the_staging_pass_with_their_text(spark, tmp_path):
    lines = [_json("t", T0), _json(None, T0), _json("t", T0, size="big")]
    path = tmp_path / "a.json"
    path.write_text("\n".join(lines) + "\n")

    quarantined, _ = _stage(spark, path, get_preset("contract"), tmp_path / "staging")

    assert quarantined == [(f"file:{path}", lines[2], "bad_payload_size"),
                           (f"file:{path}", lines[1], "missing_topic")]
    assert [m[:2] for m in _staged(tmp_path / "staging")] == [("t", f"k{T0}")]


def test_late_records_come_out_of_the_staging_pass_as_their_message_json(spark, tmp_path):
    path = tmp_path / "a.json"
    path.write_text(f"{_json('t', T0)}\n{_json('t', T0 + 10)}\n")
    spec = get_preset("contract")

    quarantined, _ = _stage(spark, path, spec, tmp_path / "staging",
                            StagingPlan(spec, horizon_ms=T0 + 5))

    assert [(json.loads(raw), reason) for _, raw, reason in quarantined] == [
        ({"topic": "t", "key": f"k{T0}", "producer_name": "default-producer",
          "publish_time": "2024-01-01T00:00:00.000Z", "payload_size": 1}, "late")]
    assert [m[3] for m in _staged(tmp_path / "staging")] == [T0 + 10]


def test_minutes_spread_over_several_tasks_as_the_local_engine_spreads_them(spark, tmp_path):
    lines = [_retail(536365 + i % 7, f"S{i:03d}", i % 5) for i in range(60)]
    path = tmp_path / "2010-12-01.csv"
    path.write_text("\n".join([RETAIL_HEADER, *lines]) + "\n")
    spec = get_preset("online-retail")
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")  # 2 tasks
    try:
        _, passes = _stage(spark, path, spec, tmp_path / "staging")
    finally:
        spark.conf.unset("spark.sql.adaptive.coalescePartitions.enabled")

    assert passes == 1  # every minute hint was right: no second pass in one task
    assert len(list((tmp_path / "staging" / "batch_id=0").rglob("part-*.parquet"))) > 1
    assert _staged(tmp_path / "staging") == _local(path, spec)


def test_a_wrong_minute_hint_makes_the_pass_spread_again_in_one_task(spark, tmp_path):
    # epoch numbers: Spark has no minute hint for them, the rules read them all the same
    lines = [_json("t", T0 + 7_000 * i) for i in range(12)]
    path = tmp_path / "a.json"
    path.write_text("\n".join(lines) + "\n")
    spec = get_preset("contract", spread_within_minute=True)

    _, passes = _stage(spark, path, spec, tmp_path / "staging")

    assert passes == 2
    assert not (tmp_path / "staging" / "batch_id=0" / MISPLACED_MARK).exists()
    assert _staged(tmp_path / "staging") == _local(path, spec)


def _parquet(tmp_path: Path, name: str, **columns) -> Path:
    base = {"topic": ["t", None, "u", "t"], "key": ["k1", "k2", None, "k4"],
            "publish_time": pa.array([T0 * 1000 + i for i in range(4)], TS),
            "payload_size": pa.array([1, 2, 3, -4], pa.int64())}
    path = tmp_path / "in" / name
    path.parent.mkdir(exist_ok=True)
    pq.write_table(pa.table({**base, **columns}), path)
    return path


def _stage_both(spark, tmp_path: Path, split_bytes: int = SPLIT_BYTES
                ) -> tuple[bool, list[tuple], list[tuple]]:
    """The input folder staged from its files by the tasks (``stage_files``) and, apart, from
    the rows Spark ships (``stage_batch``): whether the tasks read the files, and each
    way's quarantined rows and staged messages."""
    spec = get_preset("contract", format="parquet")
    raw = read_raw_batch(spark, str(tmp_path / "in"), "parquet")
    files = sorted(r[0] for r in raw.select("source_file").distinct().collect())
    names = list(raw.schema["record"].dataType.names)
    out = []
    taken: list[list[tuple]] = []

    def take(verdicts) -> None:
        taken.append(sorted(tuple(r) for r in quarantine_rows(verdicts, spec).collect()))

    for way in ("files", "rows"):
        staging = tmp_path / way
        if way == "files":
            direct = stage_files(map_records(raw, spec), files, names, str(staging), 0,
                                 StagingPlan(spec), take, split_bytes)
        else:
            stage_batch(map_records(raw, spec), str(staging), 0, StagingPlan(spec), take)
        staged = [tuple(str(v) for v in row) for topic in staged_batch_stats(str(staging), 0)
                  for row in read_staged(str(staging), topic, None, None).itertuples(index=False)]
        out.append((taken[-1], sorted(staged)))
    return direct, out[0], out[1]


def test_parquet_files_read_by_the_tasks_stage_and_quarantine_what_spark_rows_do(spark,
                                                                                  tmp_path):
    _parquet(tmp_path, "a.parquet")
    _parquet(tmp_path, "b c.parquet", key=["x", "y", "z", None])

    direct, (files_q, files_m), (rows_q, rows_m) = _stage_both(spark, tmp_path)

    assert direct
    assert files_q == rows_q and len(files_q) == 4  # a missing topic, a negative size, twice
    assert files_m == rows_m and len(files_m) == 4


def test_a_parquet_file_the_tasks_do_not_read_is_left_to_spark(spark, tmp_path):
    _parquet(tmp_path, "a.parquet")
    _parquet(tmp_path, "b.parquet", topic=pa.array([b"t\xff", b"t", b"t", b"t"],
                                                   pa.binary()).cast(pa.string(), safe=False))

    direct, _, (rows_q, rows_m) = _stage_both(spark, tmp_path)

    assert not direct  # the invalid UTF-8 in b.parquet's topic: Spark's reader flags it
    assert sorted(r[2] for r in rows_q) == ["invalid_utf8", "missing_topic",
                                            "negative_payload_size", "negative_payload_size"]
    assert len(rows_m) == 4


def test_a_parquet_file_split_between_tasks_stages_what_it_stages_whole(spark, tmp_path):
    path = tmp_path / "in" / "big.parquet"
    path.parent.mkdir()
    table = pa.table({"topic": ["t", "u", None, "t"] * 4,
                      "key": [f"k{i}" for i in range(16)],
                      "publish_time": pa.array([T0 * 1000 + i for i in range(16)], TS),
                      "payload_size": pa.array([1, 2, 3, -4] * 4, pa.int64())})
    pq.write_table(table, path, row_group_size=4)  # 4 row groups: 4 parts of split_bytes=1

    direct, (files_q, files_m), (rows_q, rows_m) = _stage_both(spark, tmp_path, split_bytes=1)

    assert direct
    assert len(list((tmp_path / "files" / "batch_id=0").rglob("part-*.parquet"))) > 1
    assert files_q == rows_q and len(files_q) == 8
    assert files_m == rows_m and len(files_m) == 8
