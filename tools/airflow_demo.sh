#!/usr/bin/env bash
# Run the topic_replay_daily DAG end to end with `airflow dags test` (make airflow-demo; the slow
# test tests/replays/test_airflow_e2e.py): one day partition made from data/sample, Airflow in its own
# venv (.venv-airflow) with a SQLite metadata DB under DEMO_DIR, the spark_default connection on
# a local master, spark-submit and Python from the project's .venv, Delta from the jars
# `make setup` fetched (or --packages from Maven Central when there are none).
#
#   tools/airflow_demo.sh [DEMO_DIR] [DAY]      (defaults: out/airflow-demo 2025-01-15)
#
# Leaves the Delta tables in DEMO_DIR/tables (run id = DAY) and prints where they are.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
demo="$(mkdir -p "${1:-$repo/out/airflow-demo}" && cd "${1:-$repo/out/airflow-demo}" && pwd)"
day="${2:-2025-01-15}"
airflow_bin="${AIRFLOW_VENV:-$repo/.venv-airflow}/bin/airflow"
[[ -x $airflow_bin ]] || { echo "no Airflow at $airflow_bin (make test-dags creates it)" >&2; exit 2; }
[[ -x $repo/.venv/bin/spark-submit ]] || { echo "no $repo/.venv (make setup)" >&2; exit 2; }

# the day's partition: the sample log, as a daily export would land it
logs="$demo/logs/dt=$day"
mkdir -p "$logs"
cp -u "$repo"/data/sample/* "$logs/"

delta_version="$("$repo/.venv/bin/python" -c 'from importlib.metadata import version; print(version("delta-spark"))')"
jars="$(ls "$repo/.jars/delta-$delta_version"/*.jar 2>/dev/null | paste -sd, || true)"

export AIRFLOW_HOME="$demo/airflow-home"
export AIRFLOW__CORE__DAGS_FOLDER="$repo/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AIRFLOW_HOME/airflow.db"
export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}'
# the DAG's settings, as Airflow Variables (AIRFLOW_VAR_<NAME>)
export AIRFLOW_VAR_TOPIC_REPLAY_REPO="$repo"
export AIRFLOW_VAR_TOPIC_REPLAY_LOGS_ROOT="$demo/logs"
export AIRFLOW_VAR_TOPIC_REPLAY_OUTPUT="$demo/tables"
export AIRFLOW_VAR_TOPIC_REPLAY_CONF="$repo/conf/sample.yaml"
export AIRFLOW_VAR_TOPIC_REPLAY_DELTA_JARS="$jars"
# spark-submit and the job's Python: the project's venv (pyspark, delta-spark, the package)
export PATH="$repo/.venv/bin:$PATH"
export PYSPARK_PYTHON="$repo/.venv/bin/python"
export SPARK_LOCAL_IP=127.0.0.1

mkdir -p "$AIRFLOW_HOME"
"$airflow_bin" db migrate >"$demo/airflow-db.log" 2>&1 || { cat "$demo/airflow-db.log" >&2; exit 1; }
"$airflow_bin" dags test topic_replay_daily "$day" >"$demo/dags-test.log" 2>&1 || {
  tail -n 60 "$demo/dags-test.log" >&2; echo "airflow dags test failed; log: $demo/dags-test.log" >&2
  exit 1; }
echo "topic_replay_daily ran for $day (log: $demo/dags-test.log)"
echo "Delta tables (run_id $day): $demo/tables"
echo "query them: .venv/bin/topic-replay sql --output $demo/tables \"SELECT * FROM runs\""
