"""Backend selection: ``auto | numpy | cupy``, resolved once at start-up; ``emulated`` for tests.

Nothing here imports CuPy at module import time; ``resolve`` probes it only when asked.

A backend other than ``numpy`` lives in its own package, which depends on this one: when
imported it calls :func:`register` with a factory of its :class:`Ops`. ``ops`` imports the
module named in :data:`PROVIDERS` for a backend nobody has registered yet, so this package
never imports the implementation and the dependency runs one way only.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from teleo_server.compute._log import get_logger
from teleo_server.compute.errors import InternalValueError, InvalidValue
from teleo_server.errors import Unavailable

log = get_logger(__name__)

BACKENDS = ("auto", "numpy", "cupy", "emulated")
INSTALL_HINT = "install the GPU extra (pip install 'teleo[gpu]', CuPy matching the CUDA driver)"
# Concrete backend -> module that registers it when imported (``numpy`` registers below).
# ``emulated`` is the device code with every kernel run by the CPU emulation: a test instrument
# (the settings offer auto, numpy and cupy only).
PROVIDERS: dict[str, str] = {"cupy": "teleo_server.gpu.ops", "emulated": "teleo_server.gpu.ops"}


@dataclass(frozen=True, slots=True)
class Ops:
    """One backend's scorers; every function takes and returns host NumPy arrays.

    Signatures match :mod:`teleo_server.compute.sparse`, ``.maxsim`` (``maxsim`` and
    ``maxsim_codes``), ``.dense`` and ``.topk``.
    """

    name: str
    spmv_scores: Callable[..., Any]
    spmv_topk: Callable[..., Any]
    maxsim: Callable[..., Any]
    dense_topk: Callable[..., Any]
    topk: Callable[..., Any]
    maxsim_codes: Callable[..., Any]
    # whether a caller may split one scoring's work over threads of the host (the CPU backend); a
    # device backend queues its work on one stream
    host_threads: bool = False


def cupy_status() -> tuple[bool, str]:
    """Whether CuPy imports and sees a CUDA device, and why not when it does not."""
    try:
        cupy = importlib.import_module("cupy")
    except ImportError as exc:
        return False, f"CuPy is not installed ({exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError when the driver is missing or broken
        return False, f"CUDA runtime unusable ({exc})"
    if count < 1:
        return False, "no CUDA device visible"
    return True, f"{count} CUDA device(s)"


def resolve(name: str) -> str:
    """The concrete backend for a configured name.

    Parameters
    ----------
    name : {"auto", "numpy", "cupy", "emulated"}
        ``auto`` picks ``cupy`` only when CuPy imports and a device is present.

    Returns
    -------
    str
        ``"numpy"``, ``"cupy"`` or ``"emulated"``.

    Raises
    ------
    teleo_server.compute.errors.InvalidValue
        An unknown name (also a ``ValueError``).
    teleo_server.errors.Unavailable
        ``cupy`` was asked for but CuPy or a device is missing; the message says how to install.
    """
    if name not in BACKENDS:
        raise InvalidValue(f"backend must be one of {BACKENDS}, got {name!r}")
    if name in ("numpy", "emulated"):
        chosen = name
    else:
        ok, why = cupy_status()
        if name == "cupy" and not ok:
            raise Unavailable(f"backend 'cupy' requested but {why}; {INSTALL_HINT}", field="backend")
        chosen = "cupy" if ok else "numpy"
        if name == "auto":
            log.info("compute.backend_resolved", requested=name, backend=chosen, reason=why)
    return chosen


_factories: dict[str, Callable[[], Ops]] = {}


def register(name: str, factory: Callable[[], Ops]) -> None:
    """Make ``ops(name)`` return ``factory()``; a backend's module calls this when imported.

    ``name`` is a concrete backend (``"numpy"`` or ``"cupy"``); a later call replaces an earlier one.
    """
    if name not in BACKENDS or name == "auto":
        raise InternalValueError(f"cannot register backend {name!r}; only a concrete one of {BACKENDS}")
    _factories[name] = factory


def _factory(backend: str) -> Callable[[], Ops]:
    if backend not in _factories and backend in PROVIDERS:
        importlib.import_module(PROVIDERS[backend])  # registers itself
    try:
        return _factories[backend]
    except KeyError:
        raise InternalValueError(f"no scorers registered for backend {backend!r}") from None


def ops(name: str) -> Ops:
    """The scorers of one backend (``name`` is resolved first, so ``auto`` is accepted).

    The CuPy scorers take host arrays, copy them to the device for the call and return host
    arrays (a retriever's indexes keep their device rows in the resident backends instead).
    """
    return _factory(resolve(name))()


def _numpy_ops() -> Ops:
    from teleo_server.compute.dense import dense_topk
    from teleo_server.compute.maxsim import maxsim, maxsim_codes
    from teleo_server.compute.sparse import spmv_scores, spmv_topk
    from teleo_server.compute.topk import topk

    return Ops("numpy", spmv_scores, spmv_topk, maxsim, dense_topk, topk, maxsim_codes, host_threads=True)


register("numpy", _numpy_ops)


__all__ = ["BACKENDS", "Ops", "PROVIDERS", "cupy_status", "ops", "register", "resolve"]
