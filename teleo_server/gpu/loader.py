"""Locate ``kernels/*.cu``, compile each once per process with NVRTC, hand out kernels.

Lookup order for the kernel folder: ``$TELEO_KERNEL_DIR``; ``teleo_server/kernels`` (where an
installed wheel carries them); ``<repo>/kernels`` (a source checkout or editable install).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from teleo_server.compute._log import get_logger

log = get_logger(__name__)

KERNEL_DIR_ENV = "TELEO_KERNEL_DIR"
NVRTC_OPTIONS = ("-std=c++17",)
# Above this the kernel must opt in to more dynamic shared memory per block.
DEFAULT_SHARED_LIMIT = 48 * 1024


def kernel_dir() -> Path:
    """The folder holding the ``.cu`` sources; raises FileNotFoundError naming every place tried."""
    package = Path(__file__).resolve().parents[1]
    tried = []
    env = os.environ.get(KERNEL_DIR_ENV)
    for candidate in ([Path(env)] if env else []) + [package / "kernels", package.parent / "kernels"]:
        tried.append(str(candidate))
        if (candidate / "topk.cu").is_file():
            return candidate
    raise FileNotFoundError(f"CUDA kernel sources not found; looked in {tried} (set {KERNEL_DIR_ENV})")


@functools.cache
def module(name: str) -> Any:
    """The ``cupy.RawModule`` of ``kernels/<name>.cu``; NVRTC compiles it at first launch."""
    import cupy

    path = kernel_dir() / f"{name}.cu"
    log.debug("gpu.kernel_module_loaded", module=name, path=str(path))
    return cupy.RawModule(code=path.read_text(), options=NVRTC_OPTIONS)


@functools.cache
def function(module_name: str, kernel: str) -> Any:
    """One ``extern "C"`` entry of a kernel module, as a ``cupy.RawKernel``."""
    return module(module_name).get_function(kernel)


@functools.cache
def _device_attr(device_id: int, name: str, prop: str) -> int:
    import cupy

    attributes = cupy.cuda.Device(device_id).attributes
    if name in attributes:
        return int(attributes[name])
    return int(cupy.cuda.runtime.getDeviceProperties(device_id)[prop])


def sm_count() -> int:
    """Streaming multiprocessors of the current device (sizes grid-stride launches)."""
    import cupy

    return _device_attr(cupy.cuda.Device().id, "MultiProcessorCount", "multiProcessorCount")


def shared_optin_limit() -> int:
    """Largest dynamic shared memory a block of the current device may opt in to, in bytes."""
    import cupy

    return _device_attr(cupy.cuda.Device().id, "MaxSharedMemoryPerBlockOptin", "sharedMemPerBlockOptin")


__all__ = ["DEFAULT_SHARED_LIMIT", "KERNEL_DIR_ENV", "function", "kernel_dir", "module", "shared_optin_limit", "sm_count"]
