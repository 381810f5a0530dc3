# topic-replay — run `make` for the list of targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OUT ?= out/sample

.DEFAULT_GOAL := help
.PHONY: help setup run test test-slow lint bench clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

setup: $(STAMP) ## Create .venv and install the project (editable, with dev extras); idempotent

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP) ## Replay data/sample under conf/sample.yaml into $(OUT) and print the summary
	$(VENV)/bin/topic-replay run --input data/sample --conf conf/sample.yaml --output $(OUT) --run-id sample

test: $(STAMP) ## Run the test suite (fast tests; no slow marker)
	$(PY) -m pytest -m "not slow" -q

test-slow: $(STAMP) ## Run the long tests only
	$(PY) -m pytest -m slow -q

lint: $(STAMP) ## ruff on everything, mypy on the emulation core
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy pipelines/core

bench: $(STAMP) ## Benchmarks that print ratios from one run
	$(PY) bench/bench_hashing.py

clean: ## Remove outputs, checkpoints and caches (keeps .venv)
	rm -rf out spark-warehouse metastore_db .pytest_cache .mypy_cache .ruff_cache
