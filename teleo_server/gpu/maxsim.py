"""Device late-interaction MaxSim over a packed token store (``kernels/maxsim.cu``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from teleo_server.compute.errors import InternalTypeError, InternalValueError
from teleo_server.gpu import _checks, runtime

_THREADS = 128
MAX_DIM = 8192  # a sanity bound on the width; the kernel itself tiles any D


def maxsim_device(query_tokens: Any, doc_offsets: Any, doc_tokens: Any, candidates: Any) -> Any:
    """MaxSim score of each candidate row, without synchronising.

    Parameters
    ----------
    query_tokens : device array float32 or float16, shape (Q, D), device
    doc_offsets : device array int64, shape (N+1,), device
    doc_tokens : device array float16, shape (T, D), device, C-contiguous
    candidates : device array int32, shape (C,), device
        Row ids; an id outside [0, N) scores NaN (the kernel cannot raise).

    Returns
    -------
    device array float32, shape (C,), device
        ``sum_q max_t <q, t>``; 0.0 for a row with no tokens.

    Raises
    ------
    teleo_server.compute.errors.InternalTypeError, InternalValueError
        A device array not as described, or D above ``MAX_DIM``.

    The kernel tiles the query, the document and the vector width, so any query length fits in
    the same 9.5 KB of shared memory.
    """
    rt = runtime.current()
    xp = rt.xp

    if not rt.is_array(query_tokens) or query_tokens.ndim != 2:
        raise InternalTypeError("query_tokens must be a 2-D device array")
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
        return xp.zeros(n_cand, dtype=xp.float32)
    q = xp.ascontiguousarray(query_tokens, dtype=xp.float32)
    vec8 = dim % 8 == 0 and rt.address(doc_tokens) % 16 == 0
    kernel = rt.function("maxsim", "maxsim_vec8" if vec8 else "maxsim_scalar")
    out = xp.empty(n_cand, dtype=xp.float32)
    n_rows = np.int64(doc_offsets.shape[0] - 1)
    kernel((n_cand,), (_THREADS,), (q, np.int32(n_q), np.int32(dim), doc_offsets, n_rows, doc_tokens, candidates, out))
    return out

__all__ = ["MAX_DIM", "maxsim_device"]
