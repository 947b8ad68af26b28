"""Device late-interaction MaxSim over a packed token store (``kernels/maxsim.cu``): float16 rows,
or the compact scalar codes the host store keeps (decoded in the kernel, candidates only)."""

from __future__ import annotations

from typing import Any

import numpy as np

from teleo_server.compute.errors import InternalTypeError, InternalValueError
from teleo_server.compute.maxsim import CODE_BITS
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

def maxsim_codes_device(query_tokens: Any, doc_offsets: Any, codes: Any, bits: int, levels: Any,
                        candidates: Any) -> Any:
    """MaxSim of each candidate row over tokens stored as ``bits``-bit codes, without synchronising.

    Parameters
    ----------
    query_tokens : device array float32, shape (Q, D), already in the codes' space
    doc_offsets : device array int64, shape (N+1,)
    codes : device array uint8, shape (T, D * bits // 8), C-contiguous
    bits : int, one of 1, 2, 4, 8
    levels : device array float32, shape (2**bits,)
    candidates : device array int32, shape (C,); an id outside [0, N) scores NaN

    Returns
    -------
    device array float32, shape (C,): what :func:`teleo_server.compute.maxsim.maxsim_codes` returns.
    """
    rt = runtime.current()
    xp = rt.xp
    if bits not in CODE_BITS:
        raise InternalValueError(f"code bits must be one of {CODE_BITS}, got {bits}")
    _checks.device_array("query_tokens", query_tokens, np.float32, 2)
    n_q, dim = (int(s) for s in query_tokens.shape)
    width = dim * bits // 8
    if width * 8 != dim * bits or not 1 <= dim <= MAX_DIM:
        raise InternalValueError(f"a query of width {dim} cannot match {bits}-bit codes (width must fill whole bytes, "
                                 f"at most {MAX_DIM})")
    _checks.device_array("doc_offsets", doc_offsets, np.int64, 1)
    _checks.device_array("codes", codes, np.uint8, 2, (None, width))
    _checks.device_array("levels", levels, np.float32, 1, (1 << bits,))
    _checks.device_array("candidates", candidates, np.int32, 1)
    n_cand = int(candidates.shape[0])
    if n_cand == 0 or n_q == 0:
        return xp.zeros(n_cand, dtype=xp.float32)
    out = xp.empty(n_cand, dtype=xp.float32)
    n_rows = np.int64(doc_offsets.shape[0] - 1)
    kernel = rt.function("maxsim", "maxsim_codes")
    kernel((n_cand,), (_THREADS,), (query_tokens, np.int32(n_q), np.int32(dim), doc_offsets, n_rows, codes,
                                    np.int32(width), np.int32(bits), levels, candidates, out))
    return out


__all__ = ["MAX_DIM", "maxsim_codes_device", "maxsim_device"]
