# NVIDIA's Triton with the Python packages Teleo's python-backend models import. The models
# (config.pbtxt, model.py, weights) are mounted from triton_models/ at run time.
ARG TRITON_IMAGE=nvcr.io/nvidia/tritonserver:25.01-py3
FROM ${TRITON_IMAGE}
WORKDIR /opt/teleo
COPY pyproject.toml setup.py constraints.txt README.md ./
COPY teleo_server ./teleo_server
COPY protos ./protos
# setup.py maps the package teleo_server.kernels to kernels/, so the install needs it too.
COPY kernels ./kernels
# onnxruntime-gpu so the models can use CUDAExecutionProvider where the config asks for it;
# the package itself without its server dependencies (the stub needs only the embedding code).
RUN pip install --no-cache-dir onnxruntime-gpu==1.31.1 tokenizers==0.23.3 structlog pydantic \
 && pip install --no-cache-dir --no-deps -e .
