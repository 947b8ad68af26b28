"""Device exact dense scan (``kernels/dense_scan.cu``) and its top-k."""

from __future__ import annotations

from typing import Any

import numpy as np

from teleo_server.compute.dense import check_query
from teleo_server.compute.errors import InternalTypeError, InternalValueError
from teleo_server.gpu import _checks, runtime
from teleo_server.gpu.topk import topk_device

_THREADS = 256
MAX_DIM = 8192  # DENSE_MAX_DIM in the kernel
_REGISTER_QUERY = (256, 512, 1024)  # prefixes whose query slice fits a lane's registers


def _prefix_query(query: Any, width: int, dim: int) -> tuple[Any, bool]:
    """The first ``dim`` dims of a checked query as float32 on the device, unit length when cut."""
    xp = runtime.current().xp
    q = xp.asarray(query, dtype=xp.float32).ravel()
    q = xp.ascontiguousarray(q[:dim])
    renorm = dim < width
    if renorm:
        norm = xp.linalg.norm(q)
        q = xp.where(norm > 0, q / xp.maximum(norm, 1e-30), 0).astype(xp.float32)
    return q, renorm


def dense_scores_device(
    matrix: Any,
    query: Any,
    *,
    rows: Any | None = None,
    mask: Any | None = None,
    dim: int | None = None,
) -> Any:
    """Inner products of ``query`` with matrix rows, without synchronising.

    Parameters
    ----------
    matrix : device array float16 (or float32), shape (N, D), device, C-contiguous
    query : array-like float, shape (D,), host or device
    rows : device array int32, shape (C,), device, optional
        Rows to score, strictly ascending (not re-checked); all N when omitted.
    mask : device array uint32, shape (ceil(N / 32),), device, optional
        Row bitset; a clear bit scores NaN, which top-k never selects.
    dim : int, optional
        Matryoshka prefix; ``dim < D`` re-normalises both sides over the prefix.

    Returns
    -------
    device array float32, shape (C,) or (N,), device

    Raises
    ------
    teleo_server.compute.errors.InvalidValue
        What :func:`teleo_server.compute.dense.dense_scores` rejects: a query not D long, or
        ``dim`` outside ``[1, D]``.
    teleo_server.compute.errors.InternalTypeError, InternalValueError
        A device array not as described, or ``dim`` above the kernel's ``MAX_DIM``.
    """
    rt = runtime.current()
    xp = rt.xp

    if not rt.is_array(matrix) or matrix.dtype not in (np.float16, np.float32):
        raise InternalTypeError("matrix must be a float16 or float32 device array")
    _checks.device_array("matrix", matrix, matrix.dtype, 2)
    n, width = (int(s) for s in matrix.shape)
    check_query(int(np.size(query)), width, dim)
    d = width if dim is None else int(dim)
    if d > MAX_DIM:
        raise InternalValueError(f"device dense scan reads at most {MAX_DIM} dims, got {d}; use the numpy backend")
    if rows is not None:
        _checks.device_array("rows", rows, np.int32, 1)
    if mask is not None:
        _checks.mask_words(mask, n)
    q, renorm = _prefix_query(query, width, d)
    n_out = n if rows is None else int(rows.shape[0])
    out = xp.empty(n_out, dtype=xp.float32)
    if n_out == 0:
        return out
    shared = d * 4
    if matrix.dtype == np.float32:
        name = "dense_scan_f32"
    elif d % 8 == 0 and width % 8 == 0 and rt.address(matrix) % 16 == 0:
        name = next((f"dense_scan_reg{limit}" for limit in _REGISTER_QUERY if d <= limit), "dense_scan_vec8")
        if name != "dense_scan_vec8":
            shared = 0  # the query lives in registers
    else:
        name = "dense_scan_scalar"
    kernel = rt.function("dense_scan", name)
    dummy = xp.zeros(1, dtype=xp.int32)
    warps_per_block = _THREADS // 32
    grid = (max(1, min((n_out + warps_per_block - 1) // warps_per_block, rt.sm_count() * 8)),)
    args = (
        matrix,
        np.int64(n_out),
        np.int32(width),
        np.int32(d),
        q,
        rows if rows is not None else dummy,
        np.int32(rows is not None),
        mask if mask is not None else dummy.view(xp.uint32),
        np.int32(mask is not None),
        np.int32(renorm),
        out,
    )
    kernel(grid, (_THREADS,), args, shared_mem=shared)
    return out


def dense_topk_device(
    matrix: Any,
    query: Any,
    k: int,
    *,
    rows: Any | None = None,
    mask: Any | None = None,
    dim: int | None = None,
) -> tuple[Any, Any, Any]:
    """Best ``k`` rows by inner product; ``(ids, scores, count)`` as ``topk_device`` returns
    them, with ids mapped back to matrix rows when ``rows`` is given (padding stays -1)."""
    rt = runtime.current()
    xp = rt.xp

    scores = dense_scores_device(matrix, query, rows=rows, mask=mask, dim=dim)
    pos, vals, count = topk_device(scores, k)
    if rows is None or pos.shape[0] == 0:
        return pos, vals, count
    ids = xp.where(pos >= 0, rows[xp.maximum(pos, 0)], -1).astype(xp.int32)
    return ids, vals, count


__all__ = ["MAX_DIM", "dense_scores_device", "dense_topk_device"]
