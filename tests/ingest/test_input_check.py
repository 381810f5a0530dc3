"""Input mistakes caught before Spark starts (issue #19): a mapped source column missing from a
CSV header or a Parquet schema exits 2 with one sentence naming it and listing the columns the
files have (``pipelines.ingest.input_check``, ``topic-replay run``). No Spark in this file."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.replay import main
from pipelines.contract.presets import get_preset
from pipelines.ingest.input_check import (
    NOT_IN_PROGRESS_GLOB,
    InputColumnError,
    check_columns,
    is_empty,
    is_listed,
    unread_folders,
)

COLUMNS = ["topic", "lbn", "publish_time", "payload_size"]
ROW = ["t", "k1", "1704067200000", "10"]


def write_log(folder: Path, fmt: str, columns: list[str] = COLUMNS) -> Path:
    """One small log file of ``fmt`` (csv, csv.gz, parquet) with ``columns``."""
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        path = folder / "part-0.parquet"
        pq.write_table(pa.table({c: [v] for c, v in zip(columns, ROW, strict=True)}), path)
        return path
    text = ",".join(columns) + "\n" + ",".join(ROW) + "\n"
    path = folder / f"part-0.{fmt}"
    if fmt == "csv.gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def spec_for(fmt: str, **changes: object):
    base = "parquet" if fmt == "parquet" else "csv"
    return get_preset("contract").replace(format=base, **changes)


@pytest.mark.parametrize("fmt", ["csv", "csv.gz", "parquet"])
@pytest.mark.parametrize("columns, strict, missing", [
    ({"key": "lbnn"}, ("key",), "key is mapped to 'lbnn'"),
    ({"publish_time": "ts"}, (), "publish_time is mapped to 'ts'"),
    ({"payload_size": "size"}, (), "payload_size is mapped to 'size'"),
    ({"topic": "Topic"}, (), "topic is mapped to 'Topic'"),
])
def test_missing_mapped_column_is_named_with_the_files_columns(tmp_path, fmt, columns, strict,
                                                               missing):
    write_log(tmp_path, fmt)
    spec = spec_for(fmt, columns={**get_preset("contract").columns, **columns},
                    strict_columns=strict)
    with pytest.raises(InputColumnError) as err:
        check_columns(spec, [str(tmp_path)])
    assert missing in str(err.value)
    assert "(its columns: topic, lbn, publish_time, payload_size)" in str(err.value)


@pytest.mark.parametrize("fmt", ["csv", "csv.gz", "parquet"])
@pytest.mark.parametrize("columns, strict, topic", [
    ({"key": "lbn"}, ("key",), None),  # the user's mapping exists
    ({}, (), None),  # key, producer_name, sequence_id by default: optional, may be absent
    ({"key": "octet_length(raw_record)"}, ("key",), None),  # expressions are not checked
    ({"topic": "nope"}, (), "constant"),  # a constant topic makes the topic column optional
])
def test_mappings_that_resolve_or_may_be_absent_pass(tmp_path, fmt, columns, strict, topic):
    write_log(tmp_path, fmt)
    spec = spec_for(fmt, columns={**get_preset("contract").columns, **columns},
                    strict_columns=strict, topic=topic)
    check_columns(spec, [str(tmp_path)])  # no error


def test_json_logs_are_not_checked_before_reading(tmp_path):
    (tmp_path / "a.json").write_text('{"topic": "t"}\n')
    spec = get_preset("contract").replace(format="json", columns={
        **get_preset("contract").columns, "key": "lbnn"}, strict_columns=("key",))
    check_columns(spec, [str(tmp_path)])  # no error: reported after the first micro-batch


def test_a_preset_with_csv_columns_is_checked_against_them(tmp_path):
    write_log(tmp_path, "csv")
    spec = get_preset("online-retail").replace(
        columns={**get_preset("online-retail").columns, "key": "StockCod"},
        strict_columns=("key",))
    with pytest.raises(InputColumnError, match=r"key is mapped to 'StockCod'.*InvoiceNo"):
        check_columns(spec, [str(tmp_path)])


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_run_with_a_mapping_typo_exits_2_naming_the_column(tmp_path, capsys, fmt):
    write_log(tmp_path / "in", fmt)
    code = main(["run", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                 "--set", "input.columns.key=lbnn"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == ("topic-replay: error: key is mapped to 'lbnn', but the "
                   f"{fmt.upper()} {'header' if fmt == 'csv' else 'schema'} of the input has "
                   "no such column (its columns: topic, lbn, publish_time, payload_size)")
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_glob_input_is_checked_against_the_files_it_matches(tmp_path, capsys):
    write_log(tmp_path / "in", "csv")
    code = main(["run", "--input", str(tmp_path / "in" / "*.csv"), "--output",
                 str(tmp_path / "out"), "--set", "input.columns.key=lbnn"])
    assert code == 2
    assert "key is mapped to 'lbnn', but the CSV header" in capsys.readouterr().err


def test_a_glob_matching_no_file_is_refused(tmp_path, capsys):
    code = main(["run", "--input", str(tmp_path / "*.csv"), "--output", str(tmp_path / "out")])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"topic-replay: error: input path {tmp_path / '*.csv'} does not exist (no file matches "
        "the pattern)")


# ------------------------------------------------------------------ names never read (#32)

def _hadoop_glob_regex(pattern: str) -> re.Pattern[str]:
    """The regex Hadoop's ``GlobPattern`` makes of the few constructs
    ``NOT_IN_PROGRESS_GLOB`` uses: ``{a,b}``, ``*`` and ``[!x]``."""
    out = (pattern.replace(".", r"\.").replace("*", ".*").replace("[!", "[^")
           .replace("{", "(?:").replace("}", ")").replace(",", "|"))
    return re.compile(out, re.DOTALL)


@given(st.text(alphabet="ab.tmpjson_", min_size=1, max_size=12))  # a file name
def test_spark_glob_and_is_listed_skip_the_same_in_progress_names(name):
    visible = _hadoop_glob_regex(NOT_IN_PROGRESS_GLOB).fullmatch(name) is not None
    assert visible == (not name.endswith(".tmp"))
    assert is_listed(name) == (visible and not name.startswith((".", "_"))
                               and not name.endswith("._COPYING_"))


@pytest.mark.parametrize("name, file_glob, listed", [
    ("a.json", None, True),
    ("a.json.tmp", None, False),
    ("a.json._COPYING_", None, False),
    (".a.json", None, False),
    ("_a.json", None, False),
    ("a.json.tmp", "*", True),  # a preset's file_glob replaces the .tmp rule
    ("a.csv", "*.json", False),
])
def test_names_a_replay_reads(name, file_glob, listed):
    assert is_listed(name, file_glob) is listed


# mtime=0: the gzip header's time is part of the test's id, which must be the same in every
# pytest-xdist worker (each collects the tests itself)
@pytest.mark.parametrize("content, empty", [
    (b"", True),
    (gzip.compress(b"", mtime=0), True),
    (gzip.compress(b"x\n", mtime=0), False),
    (b"not gzip at all", False),  # unreadable, not empty: ingest records it
])
def test_empty_gz_files_are_those_without_content(tmp_path, content, empty):
    path = tmp_path / "a.json.gz"
    path.write_bytes(content)
    assert is_empty(path) is empty


FOLDER_TREES = {  # case → (files under the input folder, the sub-folders named)
    "a_sub_folder_with_logs": (["a.json", "2025-01-15/b.json"], ["2025-01-15"]),
    "logs_two_levels_down": (["x/y/c.json"], ["x"]),
    "hidden_and_underscore_folders": ([".git/d", "_spark_metadata/0", "e.json"], []),
    "an_empty_sub_folder": (["f.json"], []),
    "no_sub_folder": (["g.json"], []),
}


@pytest.mark.parametrize("case", sorted(FOLDER_TREES))
def test_unread_folders_are_the_sub_folders_holding_files(tmp_path, case):
    files, named = FOLDER_TREES[case]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}\n")
    (tmp_path / "empty-dir").mkdir()

    assert unread_folders([str(tmp_path)]) == [tmp_path / n for n in named]


def test_a_pattern_input_names_no_unread_folder(tmp_path):
    (tmp_path / "day").mkdir()
    (tmp_path / "day" / "a.json").write_text("{}\n")

    assert unread_folders([str(tmp_path / "*" / "*.json")]) == []


def test_a_run_on_a_folder_with_files_only_in_sub_folders_exits_2_naming_them(tmp_path, capsys):
    write_log(tmp_path / "in" / "2025-01-15", "csv")

    code = main(["run", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                 "--set", "input.format=csv"])

    err = capsys.readouterr().err
    assert code == 2
    assert ("the input has no file of its own, only sub-folders (2025-01-15), whose files are "
            "not read; give it as --input, or a pattern such as --input '") in err
