"""Device late-interaction MaxSim over a packed token store (``kernels/maxsim.cu``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from teleo_server.compute.errors import DeviceLimit, InternalTypeError, InternalValueError
from teleo_server.gpu import _checks, loader

_THREADS = 128
_WARPS = _THREADS // 32
_ENTRIES = ((128, "maxsim_d128"), (256, "maxsim_d256"), (512, "maxsim_d512"), (1024, "maxsim_d1024"))
MAX_DIM = _ENTRIES[-1][0]


def maxsim_device(query_tokens: Any, doc_offsets: Any, doc_tokens: Any, candidates: Any) -> Any:
    """MaxSim score of each candidate row, without synchronising.

    Parameters
    ----------
    query_tokens : cupy.ndarray float32 or float16, shape (Q, D), device
    doc_offsets : cupy.ndarray int64, shape (N+1,), device
    doc_tokens : cupy.ndarray float16, shape (T, D), device, C-contiguous
    candidates : cupy.ndarray int32, shape (C,), device
        Row ids; an id outside [0, N) scores NaN (the kernel cannot raise).

    Returns
    -------
    cupy.ndarray float32, shape (C,), device
        ``sum_q max_t <q, t>``; 0.0 for a row with no tokens.

    Raises
    ------
    teleo_server.compute.errors.InternalTypeError, InternalValueError
        A device array not as described, or D above ``MAX_DIM``.
    teleo_server.compute.errors.DeviceLimit
        The query has more tokens than one block's shared memory holds.
    """
    import cupy

    if not isinstance(query_tokens, cupy.ndarray) or query_tokens.ndim != 2:
        raise InternalTypeError("query_tokens must be a 2-D cupy.ndarray")
    if query_tokens.dtype not in (np.float16, np.float32):
        raise InternalTypeError(f"query_tokens must be float16 or float32, got {query_tokens.dtype}")
    n_q, dim = (int(s) for s in query_tokens.shape)
    _checks.device_array("doc_offsets", doc_offsets, np.int64, 1)
    _checks.device_array("doc_tokens", doc_tokens, np.float16, 2, (None, dim))
    _checks.device_array("candidates", candidates, np.int32, 1)
    if not 1 <= dim <= MAX_DIM:
        raise InternalValueError(f"device MaxSim reads token dims in [1, {MAX_DIM}], got {dim}; use the numpy backend")
    n_cand = int(candidates.shape[0])
    if n_cand == 0 or n_q == 0:
        return cupy.zeros(n_cand, dtype=cupy.float32)
    q = cupy.ascontiguousarray(query_tokens, dtype=cupy.float32)
    name = next(entry for limit, entry in _ENTRIES if dim <= limit)
    kernel = loader.function("maxsim", name)
    shared = (n_q * dim + _WARPS * n_q) * 4
    try:
        loader.ensure_shared(kernel, shared)
    except DeviceLimit as exc:
        raise DeviceLimit(
            f"a query of {n_q} tokens of dim {dim} does not fit the device ({exc}); shorten the query"
        ) from exc
    out = cupy.empty(n_cand, dtype=cupy.float32)
    n_rows = np.int64(doc_offsets.shape[0] - 1)
    kernel((n_cand,), (_THREADS,), (q, np.int32(n_q), np.int32(dim), doc_offsets, n_rows, doc_tokens, candidates, out), shared_mem=shared)
    return out


__all__ = ["MAX_DIM", "maxsim_device"]
