"""Airflow DAG ``topic_replay_daily``: replay one day's message logs, then validate the tables.

Every day (``catchup=True``: back-fills from ``start_date``) the DAG runs

1. ``replay`` — ``spark-submit jobs/replay.py run --input <logs_root>/dt={{ ds }}/ --output
   <output> --run-id {{ ds }} --conf <conf>`` with the Delta Lake package (or the local jars of
   ``delta_jars``) and SQL extension configured (``SparkSubmitOperator``), so the tables are
   written with delta-spark. A retry
   resumes the same run from its checkpoint (the replay is exactly-once per run id);
2. ``validate`` — ``spark-submit jobs/replay.py validate --output <output> --run-id {{ ds }}``
   (Great Expectations suites, ``pipelines/analysis/validation.py``; no Spark job). It fails the DAG
   run when an expectation fails (exit code 1) and appends its results to the ``validations`` table.

Parameters: each has a DAG param (editable when triggering by hand) and can be overridden for
every run by an Airflow Variable of the same name prefixed ``topic_replay_`` (e.g.
``airflow variables set topic_replay_logs_root s3a://bucket/pulsar-logs``). Variables are read
in templates (at run time, not at parse time).

=========  ===============================================  ==========================
param      meaning                                          default
=========  ===============================================  ==========================
repo       checkout of this project on the workers          ``/opt/topic-replay``
logs_root  folder holding the ``dt=YYYY-MM-DD/`` folders    ``/data/pulsar-logs``
output     Delta tables root                                ``/data/topic-replay``
conf       replay config YAML (policy, preset, consumers)   ``<repo>/conf/default.yaml``
py_files   zip of ``pipelines`` + ``jobs`` for executors    none (not needed when the
           on a cluster (``--py-files``)                    package is installed there)
delta_jars comma-separated local Delta jars (``--jars``)    none: ``--packages`` resolves
           instead of resolving the package from Maven      them from Maven Central
           (e.g. the ``.jars/delta-<v>/*.jar`` of ``make
           setup``, on machines without Maven access)
=========  ===============================================  ==========================

The input preset and everything else come from the config file (``input.preset``). Spark runs
through the Airflow connection ``spark_default`` (master, deploy mode, ``spark-submit`` binary).

Only one DAG run at a time (``max_active_runs=1``): every run appends to the same Delta tables.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum

try:  # Airflow 3 (task SDK)
    from airflow.sdk import DAG, Param
except ImportError:  # Airflow 2.x
    from airflow import DAG  # type: ignore[no-redef,attr-defined]
    from airflow.models.param import Param  # type: ignore[no-redef]
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

DAG_ID = "topic_replay_daily"
DELTA_PACKAGE = "io.delta:delta-spark_2.13:4.1.0"
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
DEFAULTS = {
    "repo": "/opt/topic-replay",
    "logs_root": "/data/pulsar-logs",
    "output": "/data/topic-replay",
    "conf": "",
    "py_files": "",
    "delta_jars": "",
}
SPARK_CONN_ID = "spark_default"


def setting(name: str) -> str:
    """Jinja expression for a setting: the Variable ``topic_replay_<name>``, else the param."""
    return f"var.value.get('topic_replay_{name}', params.{name})"


def render(expression: str) -> str:
    return "{{ " + expression + " }}"


REPO = render(setting("repo"))
APPLICATION = f"{REPO}/jobs/replay.py"
INPUT = render(setting("logs_root")) + "/dt={{ ds }}/"
OUTPUT = render(setting("output"))
CONF = render(f"{setting('conf')} or ({setting('repo')} ~ '/conf/default.yaml')")
RUN_ID = "{{ ds }}"
DELTA_JARS = render(setting("delta_jars"))
PACKAGES = render(f"'' if {setting('delta_jars')} else '{DELTA_PACKAGE}'")

default_args = {
    "owner": "data-platform",
    "retries": 2,
    "retry_delay": timedelta(minutes=5),
    "retry_exponential_backoff": True,
    "execution_timeout": timedelta(hours=6),
}

with DAG(
    dag_id=DAG_ID,
    description="Replay a day of Pulsar message logs through the scalable-topics emulation "
                "into Delta tables, then validate them.",
    schedule="@daily",
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=True,
    max_active_runs=1,
    default_args=default_args,
    tags=["topic-replay", "pulsar", "spark", "delta"],
    params={name: Param(value, type="string") for name, value in DEFAULTS.items()},
    doc_md=__doc__,
) as dag:
    replay = SparkSubmitOperator(
        task_id="replay",
        conn_id=SPARK_CONN_ID,
        application=APPLICATION,
        name="topic-replay-{{ ds }}",
        packages=PACKAGES,
        jars=DELTA_JARS,
        conf=DELTA_CONF,
        py_files=render(setting("py_files")),
        application_args=["run", "--input", INPUT, "--output", OUTPUT, "--run-id", RUN_ID,
                          "--conf", CONF],
    )
    validate = SparkSubmitOperator(
        task_id="validate",
        conn_id=SPARK_CONN_ID,
        application=APPLICATION,
        name="topic-replay-validate-{{ ds }}",
        application_args=["validate", "--output", OUTPUT, "--run-id", RUN_ID],
        retries=0,  # a failed expectation is a data problem: retrying does not fix it
    )
    replay >> validate
