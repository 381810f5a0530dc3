"""DAG integrity of dags/topic_replay_daily.py (runs where Airflow is installed, else skips).

Airflow is not in the project's venv (its pins conflict); run with an Airflow environment that
has the ``airflow`` extra, e.g. ``/tmp/airflow-venv/bin/python -m pytest tests/dags/test_dags.py``.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("airflow") is not None:  # a throwaway AIRFLOW_HOME, no examples
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
airflow = pytest.importorskip("airflow", reason="Airflow is not installed in this environment")
pytest.importorskip("airflow.providers.apache.spark",
                    reason="apache-airflow-providers-apache-spark is not installed")

DAGS = Path(__file__).resolve().parents[2] / "dags"
DAG_ID = "topic_replay_daily"


@pytest.fixture(scope="module")
def dagbag() -> Any:
    try:  # Airflow 3.1+ (examples are off through AIRFLOW__CORE__LOAD_EXAMPLES)
        from airflow.dag_processing.dagbag import DagBag  # noqa: PLC0415 - Airflow >= 3.1

        return DagBag(dag_folder=str(DAGS))
    except ImportError:  # Airflow 2.x
        from airflow.models import DagBag  # noqa: PLC0415 - older Airflow

        return DagBag(dag_folder=str(DAGS), include_examples=False)


@pytest.fixture(scope="module")
def dag(dagbag: Any) -> Any:
    return dagbag.dags[DAG_ID]


def test_dags_import_without_errors(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    assert sorted(dagbag.dags) == [DAG_ID]


def test_dag_has_tags(dag: Any) -> None:
    assert {"topic-replay", "pulsar", "spark", "delta"} <= set(dag.tags)


def test_dag_catches_up_daily_one_run_at_a_time(dag: Any) -> None:
    assert dag.catchup is True
    assert dag.max_active_runs == 1


def test_replay_task_retries_at_least_twice(dag: Any) -> None:
    assert dag.get_task("replay").retries >= 2


def test_tasks_run_replay_then_validate(dag: Any) -> None:
    assert sorted(dag.task_ids) == ["replay", "validate"]
    assert dag.get_task("replay").downstream_task_ids == {"validate"}
    assert dag.get_task("validate").upstream_task_ids == {"replay"}


def _render(dag: Any, template: str, variables: dict[str, str] | None = None) -> str:
    """``template`` rendered for 2025-03-04 with the DAG's params and ``variables``."""
    # jinja2 comes with Airflow, not with the project: import it once Airflow is known present
    from jinja2 import Environment  # noqa: PLC0415

    class Vars:
        def get(self, name: str, default: Any = None) -> Any:
            return (variables or {}).get(name, default)

    params = {name: p.value if hasattr(p, "value") else p for name, p in dag.params.items()}
    context = {"ds": "2025-03-04", "params": params, "var": {"value": Vars()}}
    return Environment().from_string(template).render(**context)


def test_replay_submits_the_job_with_delta(dag: Any) -> None:
    task = dag.get_task("replay")
    assert task.application.endswith("/jobs/replay.py")
    assert task.conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert task.conf["spark.sql.catalog.spark_catalog"] == (
        "org.apache.spark.sql.delta.catalog.DeltaCatalog")


@pytest.mark.parametrize(
    ("variables", "packages", "jars"),
    [
        ({}, "io.delta:delta-spark_2.13:4.1.0", ""),
        ({"topic_replay_delta_jars": "/j/delta-spark.jar,/j/delta-storage.jar"}, "",
         "/j/delta-spark.jar,/j/delta-storage.jar"),
    ],
)
def test_replay_takes_delta_from_maven_or_from_local_jars(dag: Any, variables: dict[str, str],
                                                          packages: str, jars: str) -> None:
    task = dag.get_task("replay")
    assert {"packages", "jars"} <= set(type(task).template_fields)
    assert (_render(dag, task.packages, variables), _render(dag, task.jars, variables)) == (
        packages, jars)


@pytest.mark.parametrize(
    ("task_id", "expected_args"),
    [
        ("replay", ["run", "--input", "/data/pulsar-logs/dt=2025-03-04/", "--output",
                    "/data/topic-replay", "--run-id", "2025-03-04", "--conf",
                    "/opt/topic-replay/conf/default.yaml"]),
        ("validate", ["validate", "--output", "/data/topic-replay", "--run-id", "2025-03-04"]),
    ],
)
def test_arguments_render_for_the_days_partition(dag: Any, task_id: str,
                                                 expected_args: list[str]) -> None:
    task = dag.get_task(task_id)  # no Variables set: every setting falls back to its param
    assert [_render(dag, a) for a in task.application_args] == expected_args
