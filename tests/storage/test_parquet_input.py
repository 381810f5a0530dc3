"""A Parquet input file read by the staging pass itself (``pipelines.storage.parquet_input``):
the mapped records Spark would ship, or a refusal that hands the file to Spark's reader."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.contract.presets import get_preset
from pipelines.storage.parquet_input import (
    DirectReadRefused,
    FilePart,
    direct_columns,
    file_groups,
    file_parts,
    read_records,
)

TS = pa.timestamp("us", tz="UTC")
FIELDS = ("topic", "key", "publish_time", "payload_size")
RECORDS = pa.schema([("source_file", pa.string()), ("invalid_utf8", pa.bool_()),
                     ("malformed", pa.bool_()), ("record:topic", pa.string()),
                     ("record:key", pa.string()), ("record:publish_time", TS),
                     ("record:payload_size", pa.int64()), ("m_producer_name", pa.string()),
                     ("m_sequence_id", pa.string())])
"""The mapped records Spark ships for a contract Parquet file with these four fields."""

SPEC = get_preset("contract", format="parquet")


def _file(tmp_path: Path, table: pa.Table, name: str = "a.parquet") -> str:
    path = tmp_path / name
    pq.write_table(table, path)
    return "file:" + quote(str(path))


def _table(**columns) -> pa.Table:
    base = {"topic": pa.array(["t", "u"]), "key": pa.array(["k", None]),
            "publish_time": pa.array([1_000, 2_000], TS),
            "payload_size": pa.array([10, 20], pa.int64())}
    base.update(columns)
    return pa.table({k: v for k, v in base.items() if v is not None})


def _read(path: str) -> pa.Table:
    plan = direct_columns(RECORDS, SPEC, FIELDS)
    assert plan is not None
    return pa.Table.from_batches(list(read_records(FilePart(path), plan)), plan.schema)


def test_records_carry_the_file_path_the_flags_and_the_row_fields(tmp_path):
    path = _file(tmp_path, _table())

    got = _read(path).to_pydict()

    assert got["source_file"] == [path, path]
    assert got["invalid_utf8"] == [False, False] and got["malformed"] == [False, False]
    assert got["record:topic"] == ["t", "u"] and got["record:key"] == ["k", None]
    assert got["record:payload_size"] == [10, 20]
    assert got["m_producer_name"] == [None, None] and got["m_sequence_id"] == [None, None]


def test_a_field_the_file_lacks_is_null_as_spark_reads_it(tmp_path):
    path = _file(tmp_path, _table(key=None))

    assert _read(path).column("record:key").to_pylist() == [None, None]


def test_a_percent_encoded_file_url_is_read(tmp_path):
    path = _file(tmp_path, _table(), name="a b%.parquet")

    assert "%20" in path and _read(path).num_rows == 2


def test_a_zero_byte_file_has_no_records_as_spark_makes_no_split_of_it(tmp_path):
    (tmp_path / "empty.parquet").write_bytes(b"")

    assert _read("file:" + str(tmp_path / "empty.parquet")).num_rows == 0


@pytest.mark.parametrize("columns, why", [
    ({"payload_size": pa.array([10, 20], pa.int32())}, "is int32 in the file"),
    ({"topic": None, "Topic": pa.array(["t", "u"])}, "is spelled 'Topic'"),
    ({"key": pa.array([b"k\xff", b"ok"], pa.binary()).cast(pa.string(), safe=False)},
     "invalid UTF-8"),
])
def test_a_file_spark_would_read_otherwise_is_refused(tmp_path, columns, why):
    path = _file(tmp_path, _table(**columns))

    with pytest.raises(DirectReadRefused, match=why):
        _read(path)


def test_a_cut_short_file_is_refused(tmp_path):
    path = tmp_path / "cut.parquet"
    pq.write_table(_table(), path)
    path.write_bytes(path.read_bytes()[:-20])

    with pytest.raises(DirectReadRefused):
        _read("file:" + str(path))


@pytest.mark.parametrize("changes, direct", [
    ({}, True),
    ({"columns": {**SPEC.columns, "producer_name": "source_file"}}, True),
    ({"columns": {**SPEC.columns, "producer_name": "concat(topic, '-p')"}}, False),
    ({"columns": {**SPEC.columns, "producer_name": "raw_record"}}, False),
    ({"columns": {**SPEC.columns, "producer_name": "no_such_field"}}, True),
    ({"columns": {**SPEC.columns, "producer_name": "TOPIC"}}, False),  # Spark's case rules
])
def test_only_a_mapping_spark_sql_has_nothing_to_evaluate_is_read_directly(changes, direct):
    plan = direct_columns(RECORDS, SPEC.replace(**changes), FIELDS)

    assert (plan is not None) is direct


def test_a_contract_column_mapped_to_source_file_holds_the_path(tmp_path):
    path = _file(tmp_path, _table())
    spec = SPEC.replace(columns={**SPEC.columns, "producer_name": "source_file"})
    plan = direct_columns(RECORDS, spec, FIELDS)
    assert plan is not None

    got = pa.Table.from_batches(list(read_records(FilePart(path), plan)), plan.schema)

    assert got.column("m_producer_name").to_pylist() == [path, path]


def test_text_formats_and_minute_spreading_are_spark_sql_work():
    assert direct_columns(RECORDS, SPEC.replace(format="json"), FIELDS) is None
    spread = RECORDS.append(pa.field("minute_hint", pa.int64()))
    assert direct_columns(spread, SPEC, FIELDS) is None


@pytest.mark.parametrize("files, sizes, tasks, groups", [
    (["a", "b", "c", "d"], [10, 10, 10, 10], 2, [["a", "c"], ["b", "d"]]),
    (["a", "b", "c"], [100, 1, 1], 2, [["a"], ["b", "c"]]),
    (["a", "b"], [5, 5], 8, [["a"], ["b"]]),
    (["c", "b", "a", "d"], [10, 10, 10, 10], 2, [["a", "c"], ["b", "d"]]),
    ([], [], 2, []),
])
def test_files_are_spread_over_the_tasks_by_bytes_whatever_their_order(files, sizes, tasks,
                                                                         groups):
    got = file_groups([FilePart(f) for f in files], sizes, tasks)

    assert [[p.path for p in g] for g in got] == groups


def _row_groups_file(tmp_path: Path, groups: int) -> tuple[str, int]:
    path = tmp_path / "big.parquet"
    table = _table(publish_time=pa.array([1_000 * i for i in range(2)], TS))
    pq.write_table(pa.concat_tables([table] * groups), path, row_group_size=2)
    return "file:" + str(path), path.stat().st_size


def test_a_file_larger_than_the_split_is_read_in_runs_of_row_groups(tmp_path):
    path, size = _row_groups_file(tmp_path, 5)

    parts = file_parts(path, size, split_bytes=1)

    assert parts == [FilePart(path, (i,)) for i in range(5)]
    plan = direct_columns(RECORDS, SPEC, FIELDS)
    assert plan is not None
    pieces = [b for p in parts for b in read_records(p, plan)]
    assert pa.Table.from_batches(pieces, plan.schema).equals(_read(path))


def test_a_file_within_the_split_is_read_whole(tmp_path):
    path, size = _row_groups_file(tmp_path, 5)

    assert file_parts(path, size) == [FilePart(path)]
