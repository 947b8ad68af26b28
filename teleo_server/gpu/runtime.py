"""Where the device code runs: a CUDA device through CuPy, or the kernels emulated on the CPU.

Every wrapper and resident index in this package asks :func:`current` for its runtime and uses
only what a :class:`Runtime` offers: ``xp`` (the array module: CuPy, or NumPy under emulation),
``function`` (a compiled kernel called like ``cupy.RawKernel``), the device's limits, and a few
conversions. The same Python code and the same ``kernels/*.cu`` sources therefore run on a GPU
and, in CI, on a CPU.

The runtime is chosen per thread: ``with use("emulated"):`` inside a block, else the process
default (``cuda``). A :class:`~teleo_server.gpu.resident.DeviceExecutor` binds its worker thread
to the runtime it was made with.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import threading
from typing import Any, Callable, Iterator

from teleo_server.compute.errors import DeviceLimit, InternalValueError
from teleo_server.gpu import loader


class Runtime:
    """What device code needs from where it runs. Subclasses fill in every method."""

    name = ""

    @property
    def xp(self) -> Any:
        """The array module of device arrays (``cupy`` or ``numpy``)."""
        raise NotImplementedError

    def status(self) -> tuple[bool, str]:
        """Whether this runtime can run here, and why not."""
        raise NotImplementedError

    def function(self, module: str, kernel: str) -> Any:
        """One ``extern "C"`` kernel of ``kernels/<module>.cu``: ``k(grid, block, args, shared_mem=)``."""
        raise NotImplementedError

    def sm_count(self) -> int:
        raise NotImplementedError

    def shared_optin_limit(self) -> int:
        raise NotImplementedError

    def bind_thread(self, device_id: int) -> Any:
        """Make the calling thread use this device with a stream of its own; returns the stream."""
        raise NotImplementedError

    def is_array(self, x: Any) -> bool:
        return isinstance(x, self.xp.ndarray)

    # bytes this runtime's arrays have sent to the host through to_host, since the process started
    # (what crosses the bus from the device: pipeline_latency reports it per query)
    downloaded = 0

    def to_host(self, x: Any) -> Any:
        """A host NumPy copy of a device array (counted in ``downloaded``)."""
        out = self._to_host(x)
        self.downloaded += int(out.nbytes)
        return out

    def _to_host(self, x: Any) -> Any:
        raise NotImplementedError

    def address(self, x: Any) -> int:
        """The device address of an array's first element (for alignment checks)."""
        raise NotImplementedError

    def ensure_shared(self, kernel: Any, nbytes: int) -> None:
        """Let ``kernel`` launch with ``nbytes`` of dynamic shared memory, or raise DeviceLimit."""
        if nbytes <= loader.DEFAULT_SHARED_LIMIT:
            return
        limit = self.shared_optin_limit()
        if nbytes > limit:
            raise DeviceLimit(f"needs {nbytes} bytes of shared memory per block; the device allows {limit}")
        if kernel.max_dynamic_shared_size_bytes < nbytes:
            kernel.max_dynamic_shared_size_bytes = nbytes


class CudaRuntime(Runtime):
    """A CUDA device through CuPy; kernels compiled by NVRTC."""

    name = "cuda"

    @property
    def xp(self) -> Any:
        return importlib.import_module("cupy")

    def status(self) -> tuple[bool, str]:
        from teleo_server.compute.backend import cupy_status

        return cupy_status()

    def function(self, module: str, kernel: str) -> Any:
        return loader.function(module, kernel)

    def sm_count(self) -> int:
        return loader.sm_count()

    def shared_optin_limit(self) -> int:
        return loader.shared_optin_limit()

    def bind_thread(self, device_id: int) -> Any:
        cupy = self.xp
        cupy.cuda.Device(device_id).use()
        stream = cupy.cuda.Stream(non_blocking=True)
        stream.use()  # the current stream of this thread from now on
        return stream

    def _to_host(self, x: Any) -> Any:
        return x.get()

    def address(self, x: Any) -> int:
        return int(x.data.ptr)


class EmulatedRuntime(Runtime):
    """The kernels compiled as host C++ and run on fibers (:mod:`teleo_server.gpu.emulator`);
    device arrays are NumPy arrays. For tests: the NumPy references are the CPU backend."""

    name = "emulated"

    @property
    def xp(self) -> Any:
        import numpy

        return numpy

    def status(self) -> tuple[bool, str]:
        from teleo_server.gpu import emulator

        return emulator.status()

    def function(self, module: str, kernel: str) -> Any:
        from teleo_server.gpu import emulator

        return emulator.function(module, kernel)

    def sm_count(self) -> int:
        from teleo_server.gpu import emulator

        return emulator.SM_COUNT

    def shared_optin_limit(self) -> int:
        from teleo_server.gpu import emulator

        return emulator.SHARED_OPTIN_LIMIT

    def bind_thread(self, device_id: int) -> Any:
        return None

    def _to_host(self, x: Any) -> Any:
        import numpy

        return numpy.array(x, copy=True)

    def address(self, x: Any) -> int:
        return int(x.ctypes.data)


_RUNTIMES: dict[str, Callable[[], Runtime]] = {"cuda": CudaRuntime, "emulated": EmulatedRuntime}
_default = "cuda"
_local = threading.local()


def register(name: str, factory: Callable[[], Runtime]) -> None:
    """Add a runtime under ``name`` (a later call replaces an earlier one)."""
    _RUNTIMES[name] = factory
    get.cache_clear()


@functools.cache
def get(name: str) -> Runtime:
    try:
        return _RUNTIMES[name]()
    except KeyError:
        raise InternalValueError(f"unknown device runtime {name!r}; known: {sorted(_RUNTIMES)}") from None


def names() -> list[str]:
    return sorted(_RUNTIMES)


def current() -> Runtime:
    """The calling thread's runtime: the innermost :func:`use`, else the process default."""
    return get(getattr(_local, "name", None) or _default)


@contextlib.contextmanager
def use(name: str) -> Iterator[Runtime]:
    """Run device code of the calling thread on runtime ``name`` inside the block."""
    runtime = get(name)
    before = getattr(_local, "name", None)
    _local.name = name
    try:
        yield runtime
    finally:
        _local.name = before


def bind(name: str) -> Runtime:
    """Make ``name`` the calling thread's runtime for good (a worker thread's initialiser)."""
    runtime = get(name)
    _local.name = name
    return runtime


__all__ = ["CudaRuntime", "EmulatedRuntime", "Runtime", "bind", "current", "get", "names", "register", "use"]
