"""The input format a folder's file names tell (``input.format: auto``): what the files with
content say, most of them; an empty file says nothing of the log."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from pipelines.app.errors import UsageError
from pipelines.app.inputs import guess_format

FOLDERS = {  # case → ({file: content}, the format told)
    "an_empty_file_of_another_format_first": (
        {"a-empty.csv": b"", "b.json.gz": gzip.compress(b'{"topic": "t"}\n')}, "json"),
    "an_empty_gz_of_another_format_first": (
        {"a.csv.gz": gzip.compress(b""), "b.json": b"{}\n"}, "json"),
    "most_files_with_content": (
        {"a.csv": b"topic\nt\n", "b.json": b"{}\n", "c.jsonl": b"{}\n"}, "json"),
    "a_tie_the_first_file": ({"a.csv": b"topic\nt\n", "b.json": b"{}\n"}, "csv"),
    "every_file_empty_the_first": ({"a.csv": b"", "b.json": b""}, "csv"),
    "hidden_and_underscore_files_skipped": (
        {".a.csv": b"x\n", "_b.csv": b"x\n", "c.parquet": b"PAR1"}, "parquet"),
    "unnamed_files_skipped": ({"README.txt": b"notes\n", "d.ndjson.gz": b"\x1f\x8b..."}, "json"),
}


@pytest.mark.parametrize("case", sorted(FOLDERS))
def test_input_format_is_told_by_the_files_with_content(tmp_path: Path, case: str) -> None:
    files, told = FOLDERS[case]
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    assert guess_format([str(tmp_path)]) == told


def test_a_folder_whose_file_names_tell_no_format_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "README.txt").write_bytes(b"notes\n")
    with pytest.raises(UsageError, match="cannot tell the input format from the file names"):
        guess_format([str(tmp_path)])


def test_an_input_with_files_only_in_sub_folders_is_a_usage_error_naming_them(
        tmp_path: Path) -> None:
    (tmp_path / "d1").mkdir()
    (tmp_path / "d1" / "a.json").write_bytes(b"{}\n")
    with pytest.raises(UsageError, match=r"only sub-folders \(d1\), whose files are not read; "
                                         r"give it as --input, or a pattern such as --input "):
        guess_format([str(tmp_path)])
