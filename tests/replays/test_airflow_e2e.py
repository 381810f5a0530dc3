"""The Airflow DAG for real: ``airflow dags test topic_replay_daily <day>`` (tools/airflow_demo.sh,
as ``make airflow-demo`` runs it) in the Airflow venv, on a day partition made from data/sample,
with spark-submit on a local master and the Delta jars of ``make setup``. Its tables must hold
the run ``<day>`` with the same rows per table as a direct ``topic-replay run --engine local`` of
the sample (the in-process reference replay, whose tables the differential test
``tests/replays/test_local_engine.py`` holds equal to Spark's: a seventh of a Spark replay's CPU).

Needs ``.venv-airflow`` (``make test-dags`` creates it) and the Delta jars; skips otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from jobs.replay import main
from pipelines.contract.schemas import table_names
from pipelines.spark.delta_spark import AUTO_ENGINE_ENV
from pipelines.spark.session import delta_jars
from pipelines.storage.delta import DeltaStore

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
AIRFLOW = REPO / ".venv-airflow" / "bin" / "airflow"
DAY = "2025-01-15"


@pytest.fixture(scope="module")
def dag_output(tmp_path_factory) -> DeltaStore:
    if not AIRFLOW.exists():
        pytest.skip("no Airflow venv (.venv-airflow; make test-dags creates it)")
    if not delta_jars():
        pytest.skip("no Delta jars in .jars/ (make setup fetches them from Maven Central)")
    demo = tmp_path_factory.mktemp("airflow-demo")
    env = {k: v for k, v in os.environ.items() if k != AUTO_ENGINE_ENV}  # auto = delta-spark
    done = subprocess.run([str(REPO / "tools" / "airflow_demo.sh"), str(demo), DAY], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return DeltaStore(str(demo / "tables"), engine="delta-rs")


@pytest.fixture(scope="module")
def direct_output(tmp_path_factory) -> DeltaStore:
    out = tmp_path_factory.mktemp("direct")
    assert main(["run", "--engine", "local", "--input", str(REPO / "data" / "sample"), "--conf",
                 str(REPO / "conf" / "sample.yaml"), "--output", str(out),
                 "--run-id", "direct"]) == 0
    return DeltaStore(str(out), engine="delta-rs")


def test_dag_run_writes_the_run_of_its_day_with_delta_spark(dag_output):
    runs = dag_output.read("runs")
    assert runs["run_id"].tolist() == [DAY]
    assert json.loads(runs["versions"].iloc[0])["engine"] == "delta-spark"


def test_dag_run_validates_its_tables(dag_output):
    validations = dag_output.read("validations", DAY)
    assert len(validations) > 0
    assert validations["success"].all()


def test_dag_run_tables_count_as_a_direct_run(dag_output, direct_output):
    counts = {t: (len(dag_output.read(t, DAY)), len(direct_output.read(t, "direct")))
              for t in table_names() if t not in ("runs", "validations")}
    assert {t: c for t, c in counts.items() if c[0] != c[1]} == {}
    assert counts["messages"][0] > 0
    dag_counts = json.loads(dag_output.read("runs", DAY)["counts"].iloc[0])
    direct_counts = json.loads(direct_output.read("runs", "direct")["counts"].iloc[0])
    assert dag_counts == direct_counts
