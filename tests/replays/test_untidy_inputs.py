"""Untidy input folders never stop a replay nor vanish silently (issue #32; docs/guarantees.md,
"Untidy input folders").

Each case is a small folder run through the command line (``jobs.replay.main``) with each
engine where the engine matters: empty files beside a good one are skipped with one console
line; cut-short, corrupt and vanished files give what can be read and one ``quarantine`` row
each (``unreadable_file`` / ``truncated_file``), counted in the summary; folders that cannot
make one replay (every file empty, mixed formats or headers) exit 2 with one sentence before
Spark starts; a sub-folder's files are not read, and the folder is named in one console line.
No case prints a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import io
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.replay import main
from pipelines.engine import local
from pipelines.spark.micro_batch import MicroBatchIngest
from pipelines.storage.delta import DeltaStore

pytestmark = pytest.mark.spark

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z, epoch ms
N_GZ = 4000  # records in a gzip file cut in half: more than one decompression buffer


def _record(i: int) -> dict[str, object]:
    return {"topic": "t", "key": f"k{i}", "publish_time": T0 + 1000 * i, "payload_size": 10}


def _json(n: int, start: int = 0) -> bytes:
    return "".join(json.dumps(_record(i)) + "\n" for i in range(start, start + n)).encode()


def _csv(n: int, start: int = 0, header: str = "topic,key,publish_time,payload_size") -> bytes:
    rows = [",".join(str(v) for v in _record(i).values()) for i in range(start, start + n)]
    return (header + "\n" + "".join(r + "\n" for r in rows)).encode()


def _parquet(path: Path, n: int) -> None:
    rows = [_record(i) for i in range(n)]
    pq.write_table(pa.table({c: [r[c] for r in rows] for c in rows[0]}), path)


def _cut_gzip(data: bytes) -> bytes:
    gz = gzip.compress(data)
    return gz[: len(gz) // 2]


def _corrupt_footer(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 12] + b"\0" * 4 + b"PAR1")


# ------------------------------------------------------------------------- readable folders

def _empty_csv(d: Path) -> None:
    (d / "a_empty.csv").write_bytes(b"")
    (d / "b_empty.csv.gz").write_bytes(b"")
    (d / "c_good.csv").write_bytes(_csv(3))


def _empty_json(d: Path) -> None:
    (d / "a_empty.json").write_bytes(b"")
    (d / "b_empty.json.gz").write_bytes(b"")
    (d / "c_nothing.json.gz").write_bytes(gzip.compress(b""))
    (d / "d_good.json").write_bytes(_json(3))


def _empty_parquet(d: Path) -> None:
    (d / "a_empty.parquet").write_bytes(b"")
    _parquet(d / "b_good.parquet", 3)


def _truncated_json_gz(d: Path) -> None:
    (d / "a_good.json").write_bytes(_json(3, start=N_GZ))
    (d / "b_cut.json.gz").write_bytes(_cut_gzip(_json(N_GZ)))


def _truncated_csv_gz(d: Path) -> None:
    (d / "a_good.csv").write_bytes(_csv(3, start=N_GZ))
    (d / "b_cut.csv.gz").write_bytes(_cut_gzip(_csv(N_GZ)))


def _corrupt_parquet(d: Path) -> None:
    _parquet(d / "a_good.parquet", 3)
    _parquet(d / "b_corrupt.parquet", 3)
    _corrupt_footer(d / "b_corrupt.parquet")
    (d / "c_garbage.parquet").write_bytes(b"not a parquet file at all")
    (d / "d_empty.parquet").write_bytes(b"")


def _corrupt_parquet_beside_a_spaced_name(d: Path) -> None:
    # the salvage reads each file again by the path the query logged (%20 for a space)
    _parquet(d / "a good.parquet", 3)
    (d / "c_garbage.parquet").write_bytes(b"not a parquet file at all")


def _not_gzip(d: Path) -> None:
    (d / "a_good.json").write_bytes(_json(3))
    (d / "b_plain.json.gz").write_bytes(_json(2, start=10))  # named .gz, not compressed


def _sub_folder(d: Path) -> None:
    (d / "a_good.json").write_bytes(_json(3))
    (d / "2025-01-15").mkdir()
    (d / "2025-01-15" / "b.json").write_bytes(_json(2, start=10))  # not read: named instead


READABLE = {  # case → (make the folder, format, accepted (exact, or (low, high)), files, skipped)
    "empty_csv_files": (_empty_csv, "csv", 3, {}, 2),
    "empty_json_files": (_empty_json, "json", 3, {}, 3),
    "empty_parquet_file": (_empty_parquet, "parquet", 3, {}, 1),
    "truncated_json_gz": (_truncated_json_gz, "json", (4, 3 + N_GZ - 1),
                          {"b_cut.json.gz": "truncated_file"}, 0),
    "truncated_csv_gz": (_truncated_csv_gz, "csv", (4, 3 + N_GZ - 1),
                         {"b_cut.csv.gz": "truncated_file"}, 0),
    "corrupt_parquet": (_corrupt_parquet, "parquet", 3,
                        {"b_corrupt.parquet": "unreadable_file",
                         "c_garbage.parquet": "unreadable_file"}, 1),
    "file_named_gz_not_gzip": (_not_gzip, "json", 3, {"b_plain.json.gz": "unreadable_file"}, 0),
    "corrupt_parquet_beside_a_spaced_name": (_corrupt_parquet_beside_a_spaced_name, "parquet",
                                             3, {"c_garbage.parquet": "unreadable_file"}, 0),
    "a_sub_folder_not_read": (_sub_folder, "json", 3, {}, 0),
}
ENGINES = ["local", "spark"]


def _run(tmp_path: Path, fmt: str, engine: str, *extra: str) -> int:
    return main(["run", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                 "--run-id", "untidy", "--engine", engine, "--set", f"input.format={fmt}",
                 "--set", "replay.max_files_per_trigger=2", *extra])


def _files(store: DeltaStore) -> dict[str, str]:
    """The run's file-level quarantine rows: file name → reason."""
    q = store.read("quarantine", "untidy")
    q = q[q["reason"].isin(["unreadable_file", "truncated_file"])]
    return {s.rsplit("/", 1)[-1]: r for s, r in zip(q["source_file"], q["reason"], strict=True)}


def _accepted(store: DeltaStore) -> int:
    return len(store.read("messages", "untidy"))


def _counts(store: DeltaStore) -> dict[str, int]:
    return json.loads(store.read("runs", "untidy")["counts"].iloc[0])


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "in").mkdir()
    return tmp_path / "in"


@pytest.fixture(scope="module")
def readable_run(spark, tmp_path_factory) -> Callable[[str, str], tuple[int, str, str,
                                                                      DeltaStore]]:
    """Each :data:`READABLE` case run once per engine, on first use: ``(case, engine)`` →
    (exit code, what it printed, what it printed on stderr, its output). The truncated-gzip
    prefix test reads the ``truncated_json_gz`` run instead of replaying the same folder
    again."""

    @functools.cache
    def run(case: str, engine: str) -> tuple[int, str, str, DeltaStore]:
        root = tmp_path_factory.mktemp(f"untidy_{case}_{engine}")
        make, fmt, *_ = READABLE[case]
        (root / "in").mkdir()
        make(root / "in")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = _run(root, fmt, engine)
        return code, out.getvalue(), err.getvalue(), DeltaStore(str(root / "out"),
                                                                 engine="delta-rs")

    return run


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", sorted(READABLE))
def test_untidy_folder_replays_what_can_be_read_and_records_the_rest(readable_run, case,
                                                                      engine):
    _, _, accepted, files, skipped = READABLE[case]

    code, out, err, store = readable_run(case, engine)

    assert code == 0, err
    assert "Traceback" not in out + err
    n = _accepted(store)
    assert (n == accepted) if isinstance(accepted, int) else (accepted[0] <= n <= accepted[1])
    assert _files(store) == files
    assert _counts(store).get("bad_files", 0) == len(files)
    assert _counts(store)["accepted"] + _counts(store)["quarantined"] == n + len(files)
    assert (f"input: skipping {skipped} empty file(s)" in out) == bool(skipped)
    if files:
        assert f"files     unreadable {len(files)}" in out


@pytest.mark.parametrize("engine", ENGINES)
def test_truncated_gzip_keeps_a_prefix_of_its_records(readable_run, engine):
    code, _, err, store = readable_run("truncated_json_gz", engine)
    assert code == 0, err
    keys = store.read("messages", "untidy")["key"]
    cut = sorted(int(k[1:]) for k in keys if int(k[1:]) < N_GZ)
    assert cut == list(range(len(cut))) and 0 < len(cut) < N_GZ


# ------------------------------------------------------------------------- vanished files

def _vanish_in_spark(monkeypatch: pytest.MonkeyPatch, victim: Path) -> None:
    """Delete ``victim`` after Spark listed it for the micro-batch, before it is read."""
    stage = MicroBatchIngest._stage

    def stage_after_deleting(self: MicroBatchIngest, *args: object, **kwargs: object) -> None:
        victim.unlink(missing_ok=True)
        stage(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(MicroBatchIngest, "_stage", stage_after_deleting)


def _vanish_locally(monkeypatch: pytest.MonkeyPatch, victim: Path) -> None:
    """Delete ``victim`` after the local engine listed the input files."""
    listed: Callable[..., list[Path]] = local.input_files

    def list_then_delete(*args: object, **kwargs: object) -> list[Path]:
        files = listed(*args, **kwargs)
        victim.unlink(missing_ok=True)
        return files

    monkeypatch.setattr(local, "input_files", list_then_delete)


@pytest.mark.parametrize("engine, vanish", [("local", _vanish_locally),
                                            ("spark", _vanish_in_spark)])
def test_file_deleted_between_listing_and_reading_is_unreadable(
        spark, tmp_path, folder, capsys, monkeypatch, engine, vanish):
    (folder / "a_good.json").write_bytes(_json(3))
    (folder / "b_gone.json").write_bytes(_json(2, start=10))
    vanish(monkeypatch, folder / "b_gone.json")

    code = _run(tmp_path, "json", engine)

    out = capsys.readouterr()
    store = DeltaStore(str(tmp_path / "out"), engine="delta-rs")
    assert code == 0 and "Traceback" not in out.out + out.err
    assert _accepted(store) == 3
    assert _files(store) == {"b_gone.json": "unreadable_file"}


# ------------------------------------------------------------------------- validate

@pytest.mark.parametrize("extra, code", [((), 1), (("--allow-unreadable-files",), 0)])
def test_validate_fails_on_unreadable_files_unless_allowed(tmp_path, folder, capsys, extra,
                                                           code):
    _not_gzip(folder)
    assert _run(tmp_path, "json", "local") == 0
    capsys.readouterr()

    assert main(["validate", "--output", str(tmp_path / "out"), *extra]) == code

    out = capsys.readouterr().out
    assert ("quarantine: expect_column_values_to_not_be_in_set" in out) == (code == 1)


# ------------------------------------------------------------------------- refused folders

def _all_empty(d: Path) -> None:
    (d / "a.csv").write_bytes(b"")
    (d / "b.csv.gz").write_bytes(gzip.compress(b""))


def _mixed_formats(d: Path) -> None:
    (d / "a.json").write_bytes(_json(3))
    _parquet(d / "b.parquet", 3)


def _mixed_headers(d: Path) -> None:
    (d / "a.csv").write_bytes(_csv(3))
    (d / "b.csv").write_bytes(_csv(3, header="topic,key,payload_size,publish_time"))


def _parquet_missing_column(d: Path) -> None:
    _parquet(d / "a.parquet", 3)
    pq.write_table(pa.table({"topic": ["t"], "payload_size": [1]}), d / "b.parquet")


def _only_corrupt_parquet(d: Path) -> None:
    (d / "a.parquet").write_bytes(b"garbage")


REFUSED = {  # case → (make the folder, format, the sentence's telling part)
    "every_file_empty": (_all_empty, "csv", "no input file has any content (2 empty: a.csv, "
                                            "b.csv.gz)"),
    "mixed_formats": (_mixed_formats, "json", "the input mixes formats: b.parquet is PARQUET but "
                                              "the input format is JSON"),
    "mixed_csv_headers": (_mixed_headers, "csv", "b.csv has topic, key, payload_size, "
                                                 "publish_time where a.csv has topic, key, "
                                                 "publish_time, payload_size"),
    "parquet_missing_column": (_parquet_missing_column, "parquet",
                               "b.parquet lacks column(s) publish_time that a.parquet has"),
    "no_readable_parquet": (_only_corrupt_parquet, "parquet", "no Parquet input file can be "
                                                              "read (a.parquet"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_folder_that_cannot_make_one_replay_exits_2_with_one_sentence(
        tmp_path, folder, capsys, case):
    make, fmt, sentence = REFUSED[case]
    make(folder)

    code = _run(tmp_path, fmt, "spark")

    err = capsys.readouterr().err
    assert code == 2
    assert sentence in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("engine", ENGINES)
def test_a_sub_folder_of_the_input_is_named_as_not_read(readable_run, engine):
    code, out, err, _ = readable_run("a_sub_folder_not_read", engine)

    assert code == 0, err
    assert "input: not reading 1 sub-folder(s) (2025-01-15/)" in out
