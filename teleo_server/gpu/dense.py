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
MAX_BATCH = 64  # DENSE_MAX_BATCH: queries one batched launch scores
_BATCH_GROUP = 8  # DENSE_BATCH_GROUP: the queries a lane keeps dot products of at once
# the widest prefix a batched launch takes: one group of queries in the default shared memory
MAX_BATCH_DIM = 48 * 1024 // (4 * _BATCH_GROUP)
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


def _matrix_shape(rt: Any, matrix: Any) -> tuple[int, int]:
    """(N, D) of a checked float16 or float32 device matrix."""
    if not rt.is_array(matrix) or matrix.dtype not in (np.float16, np.float32):
        raise InternalTypeError("matrix must be a float16 or float32 device array")
    _checks.device_array("matrix", matrix, matrix.dtype, 2)
    return int(matrix.shape[0]), int(matrix.shape[1])


def _vec8(rt: Any, matrix: Any, width: int, dim: int) -> bool:
    """Whether the scan can load 8 halves (16 bytes) at a time: a float16 matrix, 16-byte aligned,
    whose width and prefix are multiples of 8."""
    return matrix.dtype == np.float16 and dim % 8 == 0 and width % 8 == 0 and rt.address(matrix) % 16 == 0


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
    n, width = _matrix_shape(rt, matrix)
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
    elif _vec8(rt, matrix, width, d):
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


def batch_size(dim: int) -> int:
    """How many queries of prefix ``dim`` one batched launch scores (its shared memory holds them
    within the default 48 KB), a multiple of 8; 0 past ``MAX_BATCH_DIM``."""
    fit = 48 * 1024 // (4 * int(dim)) // _BATCH_GROUP * _BATCH_GROUP
    return min(MAX_BATCH, fit)


def dense_scores_batch_device(matrix: Any, queries: Any, *, masks: Any | None = None, dim: int | None = None) -> Any:
    """Inner products of each of several queries with every matrix row, the matrix read once for
    all of them, without synchronising: row ``b`` of the result is what :func:`dense_scores_device`
    gives query ``b`` under mask row ``b``, bit for bit.

    Parameters
    ----------
    matrix : device array float16 (or float32), shape (N, D), device, C-contiguous
    queries : array-like float, shape (B, D), host or device; 1 <= B <= ``batch_size(dim)``
    masks : device array uint32, shape (B, ceil(N / 32)), device, optional
        One row bitset per query; a clear bit scores NaN for that query.
    dim : int, optional
        Matryoshka prefix (every query's), at most ``MAX_BATCH_DIM``.

    Returns
    -------
    device array float32, shape (B, N), device

    Raises
    ------
    teleo_server.compute.errors.InvalidValue
        A query not D long, or ``dim`` outside ``[1, D]``.
    teleo_server.compute.errors.InternalTypeError, InternalValueError
        A device array not as described, no query, more than ``batch_size(dim)`` of them, or
        ``dim`` above ``MAX_BATCH_DIM``.
    """
    rt = runtime.current()
    xp = rt.xp
    n, width = _matrix_shape(rt, matrix)
    qs = xp.asarray(queries, dtype=xp.float32)
    if qs.ndim != 2 or qs.shape[0] == 0:
        raise InternalValueError(f"queries must be (B, {width}) with B >= 1, got shape {tuple(qs.shape)}")
    check_query(int(qs.shape[1]), width, dim)
    d = width if dim is None else int(dim)
    if d > MAX_BATCH_DIM:
        raise InternalValueError(f"a batched scan reads at most {MAX_BATCH_DIM} dims, got {d}; scan each query")
    nq = int(qs.shape[0])
    if nq > batch_size(d):
        raise InternalValueError(f"at most {batch_size(d)} queries of {d} dims in one batched scan, got {nq}")
    words = (n + 31) // 32
    if masks is not None:
        _checks.device_array("masks", masks, np.uint32, 2, (nq, words))
    prepared = xp.stack([_prefix_query(qs[b], width, d)[0] for b in range(nq)])
    renorm = d < width
    out = xp.empty((nq, n), dtype=xp.float32)
    if n == 0:
        return out
    if matrix.dtype == np.float32:
        name = "dense_scan_batch_f32"
    elif _vec8(rt, matrix, width, d):
        name = "dense_scan_batch_vec8"
    else:
        name = "dense_scan_batch_scalar"
    kernel = rt.function("dense_scan", name)
    padded = (nq + _BATCH_GROUP - 1) // _BATCH_GROUP * _BATCH_GROUP
    warps_per_block = _THREADS // 32
    grid = (max(1, min((n + warps_per_block - 1) // warps_per_block, rt.sm_count() * 8)),)
    dummy = xp.zeros(1, dtype=xp.uint32)
    args = (matrix, np.int64(n), np.int32(width), np.int32(d), xp.ascontiguousarray(prepared), np.int32(nq),
            masks if masks is not None else dummy, np.int64(words), np.int32(masks is not None), np.int32(renorm), out)
    kernel(grid, (_THREADS,), args, shared_mem=padded * d * 4)
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


__all__ = ["MAX_BATCH", "MAX_BATCH_DIM", "MAX_DIM", "batch_size", "dense_scores_batch_device", "dense_scores_device",
           "dense_topk_device"]
