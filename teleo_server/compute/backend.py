"""Backend selection: ``auto | numpy | cupy``, resolved once at start-up.

Nothing here imports CuPy at module import time; ``resolve`` probes it only when asked.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from teleo_server.compute._log import get_logger
from teleo_server.errors import Unavailable

log = get_logger(__name__)

BACKENDS = ("auto", "numpy", "cupy")
INSTALL_HINT = "install the GPU extra (pip install 'teleo[gpu]', CuPy matching the CUDA driver)"


@dataclass(frozen=True, slots=True)
class Ops:
    """One backend's scorers; every function takes and returns host NumPy arrays.

    Signatures match :mod:`teleo_server.compute.sparse`, ``.maxsim``, ``.dense`` and ``.topk``.
    """

    name: str
    spmv_scores: Callable[..., Any]
    spmv_topk: Callable[..., Any]
    maxsim: Callable[..., Any]
    dense_topk: Callable[..., Any]
    topk: Callable[..., Any]


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
    name : {"auto", "numpy", "cupy"}
        ``auto`` picks ``cupy`` only when CuPy imports and a device is present.

    Returns
    -------
    str
        ``"numpy"`` or ``"cupy"``.

    Raises
    ------
    ValueError
        An unknown name.
    teleo_server.errors.Unavailable
        ``cupy`` was asked for but CuPy or a device is missing; the message says how to install.
    """
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    if name == "numpy":
        chosen = "numpy"
    else:
        ok, why = cupy_status()
        if name == "cupy" and not ok:
            raise Unavailable(f"backend 'cupy' requested but {why}; {INSTALL_HINT}", field="backend")
        chosen = "cupy" if ok else "numpy"
        if name == "auto":
            log.info("compute.backend_resolved", requested=name, backend=chosen, reason=why)
    return chosen


def ops(name: str) -> Ops:
    """The scorers of one backend (``name`` is resolved first, so ``auto`` is accepted).

    The CuPy scorers take host arrays, keep the index arrays they are given resident on the
    device (see :mod:`teleo_server.gpu.ops`), and return host arrays.
    """
    backend = resolve(name)
    if backend == "cupy":
        from teleo_server.gpu.ops import cupy_ops

        return cupy_ops()
    from teleo_server.compute.dense import dense_topk
    from teleo_server.compute.maxsim import maxsim
    from teleo_server.compute.sparse import spmv_scores, spmv_topk
    from teleo_server.compute.topk import topk

    return Ops("numpy", spmv_scores, spmv_topk, maxsim, dense_topk, topk)


__all__ = ["BACKENDS", "Ops", "cupy_status", "ops", "resolve"]
