"""The compute backend's operations, resolved once per retriever."""

from __future__ import annotations

from typing import Any

from teleo_server.errors import InvalidArgument


def resolve_ops(backend: str) -> Any:
    """Ops namespace (``spmv_topk``, ``spmv_scores``, ``maxsim``, ``dense_topk``, ``topk``) of a backend."""
    if backend not in ("numpy", "cupy", "emulated"):  # emulated: the device code on the CPU, for tests
        raise InvalidArgument(f"unknown backend {backend!r}; expected 'numpy' or 'cupy'", field="backend")
    from teleo_server.compute import backend as compute_backend

    return compute_backend.ops(backend)


__all__ = ["resolve_ops"]
