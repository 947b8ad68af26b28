"""One test body, every backend: a fixture parametrised over ``numpy``, ``emulated`` and ``cupy``.

``emulated`` is the device code with every kernel of ``kernels/`` compiled for the host and run
by the CPU emulation (``teleo_server.gpu.emulator``): it runs wherever a C++ compiler does, so the
kernels are checked against their references in every CI run. The ``cupy`` case carries the
``gpu`` marker and skips, saying why, when CuPy or a device is missing, so the CPU suite never
needs CuPy.
"""

from __future__ import annotations

import pytest

from teleo_server.compute.backend import Ops, cupy_status, ops
from teleo_server.gpu import emulator, runtime

BACKEND_PARAMS = [
    pytest.param("numpy", id="numpy"),
    pytest.param("emulated", id="emulated"),
    pytest.param("cupy", id="cupy", marks=pytest.mark.gpu),
]
# Where the device wrappers run: the CPU emulation everywhere, a CUDA device when there is one.
RUNTIME_PARAMS = [
    pytest.param("emulated", id="emulated"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.gpu),
]


# the backend the pipeline tests run the device code on: a GPU when there is one, else every kernel
# under the CPU emulation
DEVICE = "cupy" if cupy_status()[0] else "emulated"


def require_device() -> None:
    """Skip the calling test unless ``DEVICE`` can run here (no GPU, and no C++ compiler for the
    emulation)."""
    if DEVICE == "emulated":
        ok, why = emulator.status()
        if not ok:
            pytest.skip(f"no device and no kernel emulation: {why}")


def backend_ops(name: str) -> Ops:
    if name == "cupy":
        ok, why = cupy_status()
        if not ok:
            pytest.skip(f"cupy backend unavailable: {why}")
    if name == "emulated":
        ok, why = emulator.status()
        if not ok:
            pytest.skip(f"kernel emulation unavailable: {why}")
    return ops(name)


@pytest.fixture(params=RUNTIME_PARAMS)
def device(request):
    """The device runtime under test, current for the test's thread; skips when it cannot run."""
    rt = runtime.get(request.param)
    ok, why = rt.status()
    if not ok:
        pytest.skip(f"{request.param} runtime unavailable: {why}")
    with runtime.use(request.param):
        yield rt


def require_cupy():
    """Import CuPy or skip the calling test (for the device-only wrapper tests)."""
    ok, why = cupy_status()
    if not ok:
        pytest.skip(f"needs CuPy and a CUDA device: {why}")
    import cupy

    return cupy
