# Benchmarks. Included by the main Makefile, which defines PYTHON, BIN, STAMP and DATA
# (MODELS_STAMP comes from mk/models.mk).
#
#   make bench-venv    .venv-bench: the project (same constraints.txt pins) plus the peers
#                      (Qdrant Edge, Tantivy, SQLite FTS5 + sqlite-vec, Chroma, Milvus Lite,
#                      LanceDB, bm25s) and matplotlib, kept out of the runtime venv
#   make bench         the cpu group into bench/results/cpu/ (BENCH_GROUP=gpu on a CUDA machine,
#                      BENCH_GROUP=peers for the strongest peers into bench/results/peers/)
#   make bench-smoke   the tiny group; `make test` runs it too, through tests/test_bench_smoke.py

BENCH_VENV ?= .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.teleo-installed
BENCH_GROUP ?= cpu
BENCH_OUT ?= bench/results/$(BENCH_GROUP)
BENCH_ARGS ?=
# Benchmarks share the machine politely; set BENCH_NICE= for a dedicated one. One BLAS thread is
# what the committed bench/results/cpu numbers were measured with (see threads_env in results.jsonl).
BENCH_NICE ?= nice -n 10
BENCH_ENV ?= OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

.PHONY: bench-venv

bench-venv: $(BENCH_STAMP)

$(BENCH_STAMP): pyproject.toml setup.py constraints.txt bench/peers/requirements.txt mk/bench.mk
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q --disable-pip-version-check --upgrade pip
	$(BENCH_VENV)/bin/pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev]' -r bench/peers/requirements.txt
	touch $@

bench: $(BENCH_STAMP) $(MODELS_STAMP)
	$(BENCH_ENV) $(BENCH_NICE) $(BENCH_VENV)/bin/python -m bench.harness --group $(BENCH_GROUP) --out $(BENCH_OUT) --data $(DATA) $(BENCH_ARGS)

bench-smoke: $(BENCH_STAMP) $(MODELS_STAMP)
	$(BENCH_ENV) $(BENCH_NICE) $(BENCH_VENV)/bin/python -m bench.harness --group smoke --out bench/results/tmp/smoke $(BENCH_ARGS)
