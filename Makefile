# topic-replay — run `make` for the list of targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OUT ?= out/sample
# Python's bytecode cache on (some shells and CI images set PYTHONDONTWRITEBYTECODE): without it
# every interpreter compiles the project's and the tests' modules anew — each pytest worker,
# each replay subprocess, each Spark Python worker daemon. Collecting make test-unit's tests took
# 10.0 s of process time without the cache and 5.9 s with it (docs/development.md).
unexport PYTHONDONTWRITEBYTECODE

.DEFAULT_GOAL := help
.PHONY: help setup class-archive delta-jars s3a-jars kafka-jars kafka-broker pulsar-standalone run test-unit test test-replays test-slow airflow-venv test-dags airflow-demo lint docs bench clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

setup: $(STAMP) delta-jars s3a-jars kafka-jars class-archive ## Create .venv, install the project (editable, dev and pulsar extras), fetch the Delta, s3a and Kafka-source jars, archive the driver JVM's classes; idempotent

# The driver JVM's class-data archive (JDK AppCDS; pipelines/spark/class_archive.py): one replay
# of data/sample whose JVM dumps the classes it loaded, into ~/.cache/topic-replay/jvm/ (about
# 180 MB), once per Java, pyspark and jars. A replay's driver then starts from it (about 40 % less
# JVM CPU for the session and first job); without it replays only start slower.
class-archive: $(STAMP) delta-jars s3a-jars kafka-jars ## Archive the driver JVM's classes for faster starts (once; TOPIC_REPLAY_CLASS_ARCHIVE=off to run without)
	@$(PY) tools/build_class_archive.py

# The Delta Lake jars matching the pinned delta-spark (its pom's runtime dependencies: delta-spark
# and delta-storage; Scala and Spark come with pyspark), copied from Maven Central by `mvn` into
# the git-ignored $(DELTA_JARS). pipelines/spark/session.py puts them on spark.jars; without them
# (no mvn, no Maven access) the replay writes with delta-rs. docs/delta.md.
DELTA_VERSION := $(shell grep -o '"delta-spark==[^"]*' pyproject.toml | cut -d= -f3)
DELTA_JARS := .jars/delta-$(DELTA_VERSION)
DELTA_ARTIFACTS := io.delta:delta-spark_2.13:$(DELTA_VERSION) io.delta:delta-storage:$(DELTA_VERSION)

delta-jars: $(DELTA_JARS)/.fetched ## Fetch the Delta Lake jars from Maven Central into .jars/ (needs mvn; skipped with a note otherwise)

$(DELTA_JARS)/.fetched: pyproject.toml
	@if ! command -v mvn >/dev/null; then \
	  echo "delta-jars: no mvn on PATH; the replay will write with delta-rs (docs/delta.md)"; exit 0; fi; \
	mkdir -p $(DELTA_JARS) && \
	for a in $(DELTA_ARTIFACTS); do \
	  tools/mvn_quiet.sh dependency:copy -Dartifact=$$a -DoutputDirectory=$(DELTA_JARS) || \
	  { echo "delta-jars: could not fetch $$a from Maven; the replay will write with delta-rs"; \
	    rm -rf $(DELTA_JARS); exit 0; }; \
	done && touch $@

# The jars Spark needs to read and write s3a:// (hadoop-aws matching pyspark's Hadoop and the AWS
# SDK modules it uses, not the SDK's 641 MB bundle: tools/s3a-jars/pom.xml), copied by `mvn`
# into the git-ignored $(S3A_JARS), about 10 MB. pipelines/spark/session.py puts them on
# spark.jars; without them an s3a:// output is refused with one sentence (docs/storage.md).
HADOOP_VERSION := $(shell grep -o '<hadoop\.version>[0-9.]*' tools/s3a-jars/pom.xml | cut -d'>' -f2)
S3A_JARS := .jars/s3a-$(HADOOP_VERSION)
# pyspark ships these (other versions on spark.jars would only shadow or clash)
S3A_SHIPPED := io.netty,commons-codec,commons-logging,org.slf4j,org.apache.httpcomponents

s3a-jars: $(S3A_JARS)/.fetched ## Fetch hadoop-aws and the AWS SDK's S3 modules into .jars/ (needs mvn; skipped with a note otherwise)

$(S3A_JARS)/.fetched: tools/s3a-jars/pom.xml
	@if ! command -v mvn >/dev/null; then \
	  echo "s3a-jars: no mvn on PATH; s3a:// outputs need the jars (docs/storage.md)"; exit 0; fi; \
	mkdir -p $(S3A_JARS) && \
	{ tools/mvn_quiet.sh -f tools/s3a-jars/pom.xml dependency:copy-dependencies \
	    -DincludeScope=runtime -DexcludeGroupIds=$(S3A_SHIPPED) \
	    -DoutputDirectory=$(CURDIR)/$(S3A_JARS) && touch $@; } || \
	{ echo "s3a-jars: could not fetch hadoop-aws from Maven; s3a:// outputs are unavailable"; \
	  rm -rf $(S3A_JARS); exit 0; }

# Spark's own Kafka source (`--input kafka://…`, docs/capture.md): the connector matching the
# pinned pyspark and what it needs beyond pyspark's jars (the token provider, kafka-clients,
# commons-pool2; about 10 MB), copied by `mvn` into the git-ignored $(KAFKA_JARS).
# pipelines/spark/session.py puts them on spark.jars; without them a kafka:// input is refused
# with one sentence.
SPARK_VERSION := $(shell grep -o '"pyspark\[connect\]==[^"]*' pyproject.toml | cut -d= -f3)
KAFKA_JARS := .jars/kafka-source-$(SPARK_VERSION)
KAFKA_ARTIFACTS := org.apache.spark:spark-sql-kafka-0-10_2.13:$(SPARK_VERSION) \
  org.apache.spark:spark-token-provider-kafka-0-10_2.13:$(SPARK_VERSION) \
  org.apache.kafka:kafka-clients:3.9.1 org.apache.commons:commons-pool2:2.12.1

kafka-jars: $(KAFKA_JARS)/.fetched ## Fetch Spark's Kafka source and its jars into .jars/ (needs mvn; skipped with a note otherwise)

$(KAFKA_JARS)/.fetched: pyproject.toml
	@if ! command -v mvn >/dev/null; then \
	  echo "kafka-jars: no mvn on PATH; kafka:// inputs need the jars (docs/capture.md)"; exit 0; fi; \
	mkdir -p $(KAFKA_JARS) && \
	for a in $(KAFKA_ARTIFACTS); do \
	  tools/mvn_quiet.sh dependency:copy -Dartifact=$$a -DoutputDirectory=$(KAFKA_JARS) || \
	  { echo "kafka-jars: could not fetch $$a from Maven; kafka:// inputs are unavailable"; \
	    rm -rf $(KAFKA_JARS); exit 0; }; \
	done && touch $@

# Real brokers for the tests (tests/guarantees/brokers.py), never for the product: a Kafka broker
# (KRaft, tools/kafka-broker/pom.xml, about 45 MB) for `make test-replays`, a Pulsar standalone
# (tools/pulsar-standalone/, about 235 MB; its poms resolve only with the settings file that
# mirrors every repository to Maven Central) for `make test-slow`. Without mvn or Maven access
# the tests that need them skip with the reason.
KAFKA_BROKER_JARS := .jars/kafka-broker-$(shell grep -o '<kafka\.version>[0-9.]*' tools/kafka-broker/pom.xml | cut -d'>' -f2)
PULSAR_JARS := .jars/pulsar-standalone-$(shell grep -o '<pulsar\.version>[0-9.]*' tools/pulsar-standalone/pom.xml | cut -d'>' -f2)

kafka-broker: $(KAFKA_BROKER_JARS)/.fetched ## Fetch an Apache Kafka broker's jars (tests only) into .jars/

$(KAFKA_BROKER_JARS)/.fetched: tools/kafka-broker/pom.xml
	@if ! command -v mvn >/dev/null; then \
	  echo "kafka-broker: no mvn on PATH; the Kafka tests will skip"; exit 0; fi; \
	mkdir -p $(KAFKA_BROKER_JARS) && \
	{ tools/mvn_quiet.sh -f tools/kafka-broker/pom.xml dependency:copy-dependencies \
	    -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(KAFKA_BROKER_JARS) && touch $@; } || \
	{ echo "kafka-broker: could not fetch the broker from Maven; the Kafka tests will skip"; \
	  rm -rf $(KAFKA_BROKER_JARS); exit 0; }

pulsar-standalone: $(PULSAR_JARS)/.fetched ## Fetch a Pulsar standalone's jars (tests only) into .jars/

$(PULSAR_JARS)/.fetched: tools/pulsar-standalone/pom.xml tools/pulsar-standalone/settings.xml
	@if ! command -v mvn >/dev/null; then \
	  echo "pulsar-standalone: no mvn on PATH; the Pulsar tests will skip"; exit 0; fi; \
	mkdir -p $(PULSAR_JARS) && \
	{ tools/mvn_quiet.sh -s tools/pulsar-standalone/settings.xml \
	    -f tools/pulsar-standalone/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	    -DoutputDirectory=$(CURDIR)/$(PULSAR_JARS) && touch $@; } || \
	{ echo "pulsar-standalone: could not fetch Pulsar from Maven; the Pulsar tests will skip"; \
	  rm -rf $(PULSAR_JARS); exit 0; }

# Quiet: one line of ours, then only what pip reports as a problem.
$(STAMP): pyproject.toml
	@echo "setup: installing topic-replay and its dependencies into $(VENV)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[dev,pulsar]'
	@command -v java >/dev/null || [ -n "$$JAVA_HOME" ] || $(PY) -m pip install -q -e '.[java]'
	@$(PY) tools/install_worker_hook.py
	@touch $(STAMP)

run: setup ## Replay data/sample under conf/sample.yaml into $(OUT) and print the summary
	@$(VENV)/bin/topic-replay run --input data/sample --conf conf/sample.yaml --output $(OUT) --run-id sample

# The test pyramid (docs/development.md, "Tests"): the marks come from tests/conftest.py (the
# folder for replay / guarantee, the spark fixture for spark, a list for component); slow and
# heavy are marked in the tests. A heavy test (tens of seconds of Spark work in a module test)
# runs with the replays, so that make test stays the quick suite.
UNIT := not spark and not component and not replay and not guarantee and not heavy and not slow
COMPONENT := not replay and not guarantee and not heavy and not slow
REPLAYS := (replay or guarantee or heavy) and not slow

test-unit: setup ## Pure tests, no Spark, two pytest workers (the inner loop, about a minute; the costliest properties draw a quarter of their examples)
	TOPIC_REPLAY_QUICK_PROPERTIES=1 $(PY) -m pytest -m "$(UNIT)" -q --durations=5 $(XDIST)

# Two pytest workers (pytest-xdist) for make test and make test-replays: the pure tests are one
# busy core each, and a whole replay leaves much of a core idle (JVM and py4j round trips,
# micro-batch triggers, Delta commits, subprocess starts), so two overlap; each worker has its
# own local[1] session (tests/conftest.py). --dist loadfile keeps a module's tests on one worker,
# so module- and session-scoped replays and the Kafka broker start once per worker at most.
# make test-slow stays serial: its crash and clean-stop cases already run two at a time and the
# memory test measures the driver's RSS.
XDIST := -n 2 --dist loadfile

test: setup ## The test suite: unit tests and component tests with small Spark work, two pytest workers; prints the slowest
	$(PY) -m pytest -m "$(COMPONENT)" -q --durations=15 $(XDIST)

test-replays: setup kafka-broker ## Whole replays (tests/replays/), guarantees (tests/guarantees/) and heavy module tests, no slow ones; two pytest workers
	$(PY) -m pytest -m "$(REPLAYS)" -q --durations=15 $(XDIST)

# The memory test's sizes: CI-sized by default; the issue's 1 M vs 5 M check is
# `make test-slow MEMORY_SIZES=1000000,5000000 MEMORY_WINDOW=500000` (about 8 minutes).
MEMORY_SIZES ?= 200000,1000000
MEMORY_WINDOW ?= 100000

test-slow: setup pulsar-standalone ## Run the long tests only (crash/restart, multi-run determinism, memory, real cluster, real Pulsar)
	TOPIC_REPLAY_MEMORY_SIZES=$(MEMORY_SIZES) TOPIC_REPLAY_MEMORY_WINDOW=$(MEMORY_WINDOW) \
	  $(PY) -m pytest -m slow -q --durations=15

AIRFLOW_VENV := .venv-airflow
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed

$(AIRFLOW_STAMP): pyproject.toml
	test -x $(AIRFLOW_VENV)/bin/python || $(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/python -m pip install -q --upgrade pip
	$(AIRFLOW_VENV)/bin/python -m pip install -q "$$(grep -o 'apache-airflow==[^"]*' pyproject.toml)" \
	  "$$(grep -o 'apache-airflow-providers-apache-spark==[^"]*' pyproject.toml)" \
	  "$$(grep -o 'pytest==[^"]*' pyproject.toml)"
	touch $(AIRFLOW_STAMP)

airflow-venv: $(AIRFLOW_STAMP) ## Create .venv-airflow (Airflow and its Spark provider, for test-dags and airflow-demo)

test-dags: $(AIRFLOW_STAMP) ## DAG-integrity test in its own Airflow venv (.venv-airflow; Airflow's pins clash with ours)
	$(AIRFLOW_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/dags/test_dags.py

AIRFLOW_DAY ?= 2025-01-15

airflow-demo: $(STAMP) delta-jars $(AIRFLOW_STAMP) ## Run the Airflow DAG end to end (airflow dags test) on data/sample as day $(AIRFLOW_DAY); tables in out/airflow-demo/tables
	tools/airflow_demo.sh out/airflow-demo $(AIRFLOW_DAY)

lint: $(STAMP) ## ruff on everything (complexity and import rules too), mypy --strict on pipelines/ and jobs/
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy pipelines jobs

docs: $(STAMP) ## Regenerate docs/tables.md from pipelines/contract/schemas.py (a test checks it is current)
	$(PY) docs/gen_tables.py

BENCH_STAMP := $(VENV)/.bench-installed
BENCH_SIZES ?= 1000000,10000000
# Issue #16's scale-out targets (bench/bench_targets.py): 1 = 1 M / 6 M messages; 0 skips them.
BENCH_TARGETS_SCALE ?= 1

$(BENCH_STAMP): pyproject.toml
	$(PY) -m pip install -q -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(STAMP) $(BENCH_STAMP) ## Benchmarks: hashing, replay vs floor (BENCH_SIZES), scale-out targets (BENCH_TARGETS_SCALE=1), the online-retail trace with default settings, a 3x3 sweep vs one replay
	$(PY) bench/bench_hashing.py
	BENCH_SIZES=$(BENCH_SIZES) $(PY) bench/bench_replay.py
	@if [ "$(BENCH_TARGETS_SCALE)" != "0" ]; then \
	  $(PY) bench/bench_targets.py --targets-scale $(BENCH_TARGETS_SCALE); fi
	$(PY) bench/bench_trace.py
	$(PY) bench/bench_sweep.py

clean: ## Remove outputs, checkpoints and caches (keeps .venv)
	rm -rf out spark-warehouse metastore_db .pytest_cache .mypy_cache .ruff_cache
