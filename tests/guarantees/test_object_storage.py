"""Output on an S3-compatible object store (docs/storage.md): a replay into ``s3a://bucket/…``
— tables, streaming checkpoint, manifest, state, staging, window and quarantine files — gives
the same tables as a replay into a local folder (the local engine's), with either Delta
engine. The store is moto's server
mode, started as its own process on 127.0.0.1 (``moto_server``); Spark reaches it through
hadoop-aws (``make s3a-jars``), delta-rs and pyarrow through the ``AWS_*`` variables."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import boto3
import pytest

from pipelines.analysis.diff import diff_frames
from pipelines.contract.config import load_config
from pipelines.contract.presets import get_preset
from pipelines.contract.schemas import table_names
from pipelines.engine.local import run_local
from pipelines.spark.replay import Replay
from pipelines.spark.session import s3a_jars
from pipelines.storage import fs as storage
from pipelines.storage.delta import DeltaStore
from pipelines.workload.generator import WorkloadSpec, generate
from tests.conftest import ENGINES

# slow: about 1 min per replay on an idle 2-core machine (moto answers every request in Python)
pytestmark = [pytest.mark.spark, pytest.mark.slow,
              pytest.mark.skipif(not s3a_jars(), reason="no s3a jars in .jars/ (make s3a-jars "
                                                        "fetches them from Maven Central)")]

SPEC = {
    "seed": 11, "start_time": "2025-01-15T09:00:00Z", "duration_s": 300, "format": "json",
    "gzip": False, "file_span_s": 60,
    "topics": [
        {"name": "orders", "producers": 2, "rate": {"kind": "constant", "msg_rate": 20},
         "keys": {"distribution": "zipf", "n_keys": 50, "exponent": 1.1},
         "payload": {"kind": "fixed", "size": 300}},
        {"name": "clicks", "producers": 1, "rate": {"kind": "constant", "msg_rate": 5},
         "payload": {"kind": "fixed", "size": 100}},
    ],
}
SETS = ["policy.split_msg_rate_in=10", "policy.merge_msg_rate_in=2",
        "replay.max_files_per_trigger=3"]


def s3_environment(endpoint: str) -> dict[str, str]:
    """The ``AWS_*`` variables a user sets for an S3-compatible store at ``endpoint``."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}


@pytest.fixture
def bucket(s3_endpoint, spark, monkeypatch) -> str:
    """A new bucket on the server, with this process's ``AWS_*`` variables and the live Spark
    session's s3a settings pointing at it (what ``build_session`` derives from the variables,
    :func:`pipelines.storage.fs.spark_s3a_conf`, applied to the running session; the keys too:
    the session's JVM, and the Python workers it starts, began before the variables were set:
    S3A gets the keys as settings, the workers the variables through the context's
    ``environment``, which every later task carries)."""
    env = s3_environment(s3_endpoint)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for k, v in storage.spark_s3a_conf(env).items():
        hadoop.set(k.removeprefix("spark.hadoop."), v)
    hadoop.set("fs.s3a.access.key", env["AWS_ACCESS_KEY_ID"])
    hadoop.set("fs.s3a.secret.key", env["AWS_SECRET_ACCESS_KEY"])
    for k, v in env.items():
        monkeypatch.setitem(spark.sparkContext.environment, k, v)
    name = f"replay-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(
        Bucket=name)
    return name


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    """A small generated log and one file of records that do not parse (quarantined)."""
    out = tmp_path_factory.mktemp("log")
    generate(WorkloadSpec.model_validate(SPEC), out)
    (out / "zz-broken.json").write_text('{"topic": "orders", "key": \n')
    return out


def replay(spark, log_dir: Path, output: str, engine: str, run_id: str = "s3") -> DeltaStore:
    cfg = load_config(None, [*SETS, f"output.engine={engine}"])
    spec = get_preset("contract").replace(format="json", speed=1.0)
    Replay(spark, cfg, spec, [str(log_dir)], output, run_id, progress=lambda _: None).run()
    return DeltaStore(output, engine="delta-rs")


@pytest.fixture(scope="module")
def local_tables(log_dir, tmp_path_factory) -> DeltaStore:
    """The reference: the same replay into a local folder (delta-rs), by the local engine (whose
    tables the differential test ``tests/replays/test_local_engine.py`` holds equal to Spark's:
    a few seconds instead of a Spark replay)."""
    output = str(tmp_path_factory.mktemp("local") / "out")
    cfg = load_config(None, [*SETS, "output.engine=delta-rs"])
    spec = get_preset("contract").replace(format="json", speed=1.0)
    run_local(cfg, spec, [str(log_dir)], output, "s3", progress=lambda _: None)
    return DeltaStore(output, engine="delta-rs")


def _objects(endpoint: str, bucket: str) -> list[str]:
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


@pytest.mark.parametrize("engine", ENGINES)
def test_replay_into_s3a_gives_the_tables_of_a_local_folder(spark, log_dir, local_tables,
                                                            bucket, engine):
    remote = replay(spark, log_dir, f"s3a://{bucket}/out", engine)
    assert json.loads(local_tables.read("runs", "s3")["counts"].iloc[0])["quarantined"] > 0
    for table in table_names():
        if table == "runs":
            continue  # its config names the engine; its counts are compared below
        diff = diff_frames(table, local_tables.read(table, "s3"), remote.read(table, "s3"))
        assert diff.identical, (table, diff.only_a, diff.only_b)
    assert (local_tables.read("runs", "s3")["counts"].tolist()
            == remote.read("runs", "s3")["counts"].tolist())


def test_the_work_folder_lives_on_the_store(spark, log_dir, s3_endpoint, bucket, tmp_path,
                                            monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may land in the working folder
    replay(spark, log_dir, f"s3a://{bucket}/out", "delta-rs")
    keys = _objects(s3_endpoint, bucket)
    work = "out/_work/s3/"
    assert f"{work}run.json" in keys
    assert any(k.startswith(f"{work}state/") and k.endswith(".pkl") for k in keys)
    assert any(k.startswith(f"{work}checkpoint/commits/") for k in keys)
    assert any(k.startswith(f"{work}staging/batch_id=0/topic_bin=") for k in keys)
    assert any(k.startswith("out/messages/_delta_log/") for k in keys)
    # window and quarantine files are committed into the tables, then removed
    assert not [k for k in keys if k.startswith((f"{work}windows/", f"{work}quarantine/"))
                and not k.endswith("/")]
    assert os.listdir(tmp_path) == []
