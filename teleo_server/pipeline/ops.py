"""What a retriever's ``backend`` means: where its index rows live and which scorers the host runs.

``numpy``: every index on the host, scored by the NumPy references. ``cupy``: the spaces whose
index a backend can serve keep their rows on the CUDA device (the device default of each kind,
``index.base.serving``: ``dense.resident``, ``sparse.resident``, ``bm25.resident``,
``tokens.resident``) unless their ``index`` setting names another, and only a query and its top k
cross the bus; what stays on the host (the fields of the causal, code, entity and intent spaces, a
tenant's BM25, the top k of the pipeline's host arrays) is scored by the NumPy references, so no
host array is copied to the device per call. ``emulated``: as ``cupy``, with the device rows and
kernels on the CPU emulation of :mod:`teleo_server.gpu.emulator` (a test instrument).
"""

from __future__ import annotations

from typing import Any

from teleo_server.errors import InvalidArgument

# backend -> the runtime its device rows live on (None: no device rows)
RUNTIMES: dict[str, str | None] = {"numpy": None, "cupy": "cuda", "emulated": "emulated"}


def device_runtime(backend: str) -> str | None:
    """The runtime a retriever on ``backend`` keeps its device rows on (None for ``numpy``)."""
    if backend not in RUNTIMES:  # emulated: the device code on the CPU, for tests
        raise InvalidArgument(f"unknown backend {backend!r}; expected 'numpy' or 'cupy'", field="backend")
    return RUNTIMES[backend]


def resolve_ops(backend: str) -> Any:
    """The host scorers (``spmv_topk``, ``spmv_scores``, ``maxsim``, ``dense_topk``, ``topk``) of a
    retriever on ``backend``: the NumPy ones on every backend (a device backend's work is done by
    the index backends that keep their rows there). Unavailable, saying what to install, when
    ``backend`` is ``cupy`` and CuPy or a device is missing (the device backends check their own
    runtime when the spaces are built)."""
    device_runtime(backend)
    from teleo_server.compute import backend as compute_backend

    if backend == "cupy":
        compute_backend.resolve(backend)
    return compute_backend.ops("numpy")


__all__ = ["RUNTIMES", "device_runtime", "resolve_ops"]
