"""One test body, every backend: a fixture parametrised over ``numpy`` and ``cupy``.

The ``cupy`` case carries the ``gpu`` marker and skips, saying why, when CuPy or a device is
missing, so the CPU suite never needs CuPy.
"""

from __future__ import annotations

import pytest

from teleo_server.compute.backend import Ops, cupy_status, ops

BACKEND_PARAMS = [
    pytest.param("numpy", id="numpy"),
    pytest.param("cupy", id="cupy", marks=pytest.mark.gpu),
]


def backend_ops(name: str) -> Ops:
    if name == "cupy":
        ok, why = cupy_status()
        if not ok:
            pytest.skip(f"cupy backend unavailable: {why}")
    return ops(name)


def require_cupy():
    """Import CuPy or skip the calling test (for the device-only wrapper tests)."""
    ok, why = cupy_status()
    if not ok:
        pytest.skip(f"needs CuPy and a CUDA device: {why}")
    import cupy

    return cupy
