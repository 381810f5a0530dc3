"""pipelines.storage.fs: an output URL given to each library the way it takes it, and the work
folder's file operations on an S3-compatible store (moto's server mode; no Spark)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import boto3
import pyarrow.fs as pafs
import pytest

from pipelines.spark.session import pyspark_hadoop_version
from pipelines.storage import fs as storage

LOCAL_S3 = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1"}


@pytest.mark.parametrize("env, expected", [
    ({}, {}),
    (LOCAL_S3, {"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
                "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
                "spark.hadoop.fs.s3a.optimized.copy.from.local.enabled": "false",
                "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
                "spark.executorEnv.AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
                "spark.executorEnv.AWS_REGION": "eu-west-1"}),
    ({"AWS_ENDPOINT_URL_S3": "https://s3.example.com", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"},
     {"spark.hadoop.fs.s3a.endpoint": "https://s3.example.com",
      "spark.hadoop.fs.s3a.path.style.access": "false",
      "spark.hadoop.fs.s3a.connection.ssl.enabled": "true",
      "spark.hadoop.fs.s3a.optimized.copy.from.local.enabled": "false",
      "spark.executorEnv.AWS_ENDPOINT_URL_S3": "https://s3.example.com",
      "spark.executorEnv.AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"}),
    ({"AWS_DEFAULT_REGION": "us-east-2", "AWS_SECRET_ACCESS_KEY": "never copied"},
     {"spark.hadoop.fs.s3a.endpoint.region": "us-east-2",
      "spark.executorEnv.AWS_DEFAULT_REGION": "us-east-2"}),
])
def test_spark_s3a_settings_come_from_the_aws_variables_without_credentials(env, expected):
    assert storage.spark_s3a_conf(env) == expected


@pytest.mark.parametrize("location, env, expected", [
    ("out/sample", LOCAL_S3, None),
    ("gs://bucket/out", LOCAL_S3, None),
    ("s3a://bucket/out", LOCAL_S3, {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
                                    "AWS_ALLOW_HTTP": "true", "AWS_REGION": "eu-west-1",
                                    "conditional_put": "etag"}),
    ("s3://bucket/out", {"AWS_S3_LOCKING_PROVIDER": "dynamodb"}, {}),
])
def test_delta_rs_options_allow_an_http_endpoint_and_make_commits_safe(location, env, expected):
    assert storage.delta_storage_options(location, env) == expected


@pytest.mark.parametrize("location", ["hdfs://nn:8020/out", "file:/tmp/out", "ftp://h/out"])
def test_unsupported_location_is_refused_in_one_sentence(location):
    with pytest.raises(storage.StorageError, match=r"^output .*[^.]$"):
        storage.check_location(location)


def test_a_local_path_maps_to_the_local_filesystem_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fs, path = storage.arrow_filesystem("out/x")
    assert isinstance(fs, pafs.LocalFileSystem)
    assert path == str(tmp_path / "out" / "x")
    assert storage.absolute("out/x") == str(tmp_path / "out" / "x")
    assert storage.absolute("s3a://b/out/") == "s3a://b/out"


@pytest.mark.parametrize("location", ["s3a://bucket/out/x", "s3://bucket/out/x"])
def test_s3a_and_s3_map_to_one_s3_filesystem_at_the_endpoint(location, monkeypatch):
    for k, v in LOCAL_S3.items():
        monkeypatch.setenv(k, v)
    fs, path = storage.arrow_filesystem(location)
    assert isinstance(fs, pafs.S3FileSystem)
    assert path == "bucket/out/x"
    assert fs.region == "eu-west-1"


def test_s3a_jars_pom_matches_the_hadoop_pyspark_bundles():
    pom = (Path(__file__).parents[2] / "tools" / "s3a-jars" / "pom.xml").read_text()
    match = re.search(r"<hadoop\.version>([0-9.]+)<", pom)
    assert match is not None
    assert match.group(1) == pyspark_hadoop_version()


@pytest.fixture
def bucket(s3_endpoint, monkeypatch) -> str:
    for k, v in {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "testing",
                 "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    name = f"t-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def test_work_folder_files_round_trip_on_an_s3_store(bucket):
    work = f"s3a://{bucket}/out/_work/r"
    storage.write_bytes(f"{work}/state/{1:020d}.pkl", b"one")
    storage.write_bytes(f"{work}/state/{2:020d}.pkl", b"two")
    assert storage.is_file(f"{work}/state/{2:020d}.pkl")
    assert storage.is_dir(f"{work}/state")
    assert storage.list_files(f"{work}/state", ".pkl") == [f"{1:020d}.pkl", f"{2:020d}.pkl"]
    assert storage.read_bytes(f"{work}/state/{2:020d}.pkl") == b"two"


def test_folders_copy_and_delete_on_an_s3_store(bucket):
    work = f"s3a://{bucket}/out/_work/r"
    storage.write_bytes(f"{work}/quarantine/0/part-0.parquet", b"x")
    storage.copy_dir(f"{work}/quarantine/0", f"{work}/quarantine/0.b")
    assert storage.list_files(f"{work}/quarantine/0.b") == ["part-0.parquet"]
    storage.delete_dir(f"{work}/quarantine/0")
    storage.delete_dir(f"{work}/quarantine/missing")
    assert not storage.is_dir(f"{work}/quarantine/0")
    assert storage.is_dir(f"{work}/quarantine/0.b")


def test_a_local_folder_copies_into_a_new_folder_hidden_files_included(tmp_path):
    storage.write_bytes(str(tmp_path / "quarantine" / "0" / "part-0.parquet"), b"x")
    storage.write_bytes(str(tmp_path / "quarantine" / "0" / "._SUCCESS.crc"), b"c")
    storage.copy_dir(str(tmp_path / "quarantine" / "0"), str(tmp_path / "quarantine" / "0.b"))
    assert sorted(p.name for p in (tmp_path / "quarantine" / "0.b").iterdir()) == [
        "._SUCCESS.crc", "part-0.parquet"]


def test_a_missing_folder_lists_nothing_and_counts_no_rows(bucket):
    assert storage.list_files(f"s3a://{bucket}/nothing") == []
    assert storage.count_rows(f"s3a://{bucket}/nothing") == 0


def test_an_output_stream_appears_whole_when_its_block_ends(tmp_path):
    target = tmp_path / "w" / "shard-0000.arrow"
    with storage.output_stream(str(target), buffer_size=2) as f:
        f.write(b"abc")
        assert not target.exists()

    assert target.read_bytes() == b"abc"
    assert sorted(p.name for p in target.parent.iterdir()) == ["shard-0000.arrow"]


def test_an_output_stream_that_raises_leaves_neither_file_nor_temporary(tmp_path):
    target = tmp_path / "w" / "shard-0000.arrow"
    with pytest.raises(RuntimeError, match="cut short"), storage.output_stream(str(target)) as f:
        f.write(b"abc")
        raise RuntimeError("cut short")

    assert list(target.parent.iterdir()) == []
