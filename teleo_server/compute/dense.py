"""Exact dense inner-product scan; the oracle for ``kernels/dense_scan.cu``."""

from __future__ import annotations

import numpy as np

from teleo_server.compute.errors import InternalValueError, InvalidValue
from teleo_server.compute.sets import distinct
from teleo_server.compute.topk import topk

# Rows widened from float16 to float32 per step, bounding the temporary at ~64 MiB.
_CHUNK_ELEMENTS = 1 << 24
# int8 rows widened per step: 256 x 384 float32 is 384 KB, so each block is widened and multiplied
# while it is still in the cache, and the scan reads a quarter of float32's bytes at its speed
_CODE_BLOCK = 256


def check_query(length: int, width: int, dim: int | None) -> None:
    """Raise InvalidValue unless a query ``length`` long and a prefix ``dim`` fit rows ``width`` wide."""
    if length != width:
        raise InvalidValue(f"query vector has {length} dimensions; the index holds {width}-dimensional vectors")
    d = width if dim is None else int(dim)
    if not 1 <= d <= width:
        raise InvalidValue(f"prefix dim must be in [1, {width}] (the full vector width), got {d}")


def dense_scores(
    matrix: np.ndarray,
    query: np.ndarray,
    rows: np.ndarray | None = None,
    *,
    dim: int | None = None,
) -> np.ndarray:
    """Inner products ``matrix[rows, :dim] @ query[:dim]``, re-normalised when ``dim < D``.

    Parameters
    ----------
    matrix : np.ndarray float16 or float32, shape (N, D), host; rows L2-normalised
    query : np.ndarray float, shape (D,), host
    rows : np.ndarray int, shape (C,), optional
        Rows to score; all N when omitted.
    dim : int, optional
        Matryoshka prefix length. When ``dim < D`` both sides are cut to their first ``dim``
        columns and re-normalised (cosine on the prefix); a zero-norm prefix scores 0.

    Returns
    -------
    np.ndarray float32, shape (C,) or (N,)

    Raises
    ------
    teleo_server.compute.errors.InvalidValue
        ``query`` is not ``D`` long, or ``dim`` is outside ``[1, D]``.
    teleo_server.compute.errors.InternalValueError
        ``matrix`` is not 2-D.
    """
    if matrix.ndim != 2:
        raise InternalValueError(f"matrix must be 2-D, got shape {matrix.shape}")
    width = matrix.shape[1]
    q = np.asarray(query, dtype=np.float32).ravel()
    check_query(q.shape[0], width, dim)
    d = width if dim is None else int(dim)
    renorm = d < width
    q = q[:d]
    if renorm:
        qn = float(np.linalg.norm(q))
        q = q / qn if qn > 0 else np.zeros_like(q)
    n = matrix.shape[0] if rows is None else rows.shape[0]
    out = np.empty(n, dtype=np.float32)
    step = max(1, _CHUNK_ELEMENTS // d)
    for lo in range(0, n, step):
        part = matrix[lo : lo + step, :d] if rows is None else matrix[rows[lo : lo + step], :d]
        part = part.astype(np.float32, copy=False)
        s = part @ q
        if renorm:
            norms = np.sqrt(np.einsum("ij,ij->i", part, part))
            s = np.divide(s, norms, out=np.zeros_like(s), where=norms > 0)
        out[lo : lo + step] = s
    return out


def quantized_scores(codes: np.ndarray, scales: np.ndarray, query: np.ndarray, *, dim: int | None = None,
                     out: np.ndarray | None = None) -> np.ndarray:
    """Inner products of int8 rows with a float query: ``(codes[:, :dim] @ query[:dim]) * scales``.

    A row ``x`` is held as ``codes ≈ x / scale`` (symmetric, per row); the product is taken over
    the widened codes in cache-sized blocks and scaled back. No re-normalisation: a prefix's
    cosine divides by the prefix's norm, which the caller keeps.

    Parameters
    ----------
    codes : np.ndarray int8, shape (N, D), host
    scales : np.ndarray float32, shape (N,)
    query : np.ndarray float, shape (D,) or (dim,)
    dim : int, optional
        Columns used (the first ``dim``); all D when omitted.
    out : np.ndarray float32, shape (N,), optional

    Returns
    -------
    np.ndarray float32, shape (N,)

    Raises
    ------
    teleo_server.compute.errors.InternalValueError
        ``codes`` is not 2-D int8, or ``scales`` is not (N,).
    teleo_server.compute.errors.InvalidValue
        ``dim`` is outside ``[1, D]`` or the query is shorter than it.
    """
    if codes.ndim != 2 or codes.dtype != np.int8:
        raise InternalValueError(f"codes must be 2-D int8, got {codes.dtype} {codes.shape}")
    n, width = codes.shape
    if scales.shape != (n,):
        raise InternalValueError(f"scales shape {scales.shape} != ({n},)")
    d = width if dim is None else int(dim)
    q = np.asarray(query, dtype=np.float32).ravel()
    if not 1 <= d <= width or q.shape[0] < d:
        raise InvalidValue(f"prefix dim must be in [1, {width}] and within the query's {q.shape[0]} values, got {d}")
    q = q[:d]
    out = np.empty(n, dtype=np.float32) if out is None else out
    buf = np.empty((min(_CODE_BLOCK, max(n, 1)), d), dtype=np.float32)
    for lo in range(0, n, _CODE_BLOCK):
        m = min(_CODE_BLOCK, n - lo)
        np.copyto(buf[:m], codes[lo : lo + m, :d], casting="unsafe")
        np.matmul(buf[:m], q, out=out[lo : lo + m])
    np.multiply(out, scales, out=out)
    return out


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 codes (B, D) and float32 scales (B,) of float rows (B, D): ``scale = max|x| / 127``, so
    each row's largest value is exact and every value is within ``scale / 2`` of its own."""
    x = np.asarray(x, dtype=np.float32)
    scales = (np.abs(x).max(axis=1, initial=0.0) / 127.0).astype(np.float32)
    safe = np.where(scales > 0, scales, 1.0).astype(np.float32)
    codes = np.rint(x / safe[:, None]).clip(-127, 127).astype(np.int8)
    return codes, scales


def dense_topk(
    matrix: np.ndarray,
    query: np.ndarray,
    k: int,
    candidates: np.ndarray | None = None,
    mask: np.ndarray | None = None,
    *,
    dim: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` rows with the largest inner product with ``query``.

    Parameters
    ----------
    matrix : np.ndarray float16 or float32, shape (N, D), host; rows L2-normalised
    query : np.ndarray float, shape (D,), host
    k : int
    candidates : np.ndarray int32, shape (C,), optional
        Restrict the scan to these rows (repeats are collapsed).
    mask : np.ndarray of bool, shape (N,), optional
        ``False`` rows never come back.
    dim : int, optional
        Matryoshka prefix, see :func:`dense_scores`.

    Returns
    -------
    ids : np.ndarray int32, shape (<= k,)
        Best first, ties by ascending row id.
    scores : np.ndarray float32, same shape

    Raises
    ------
    teleo_server.compute.errors.InvalidValue
        ``k < 0``, or a ``query`` / ``dim`` that :func:`dense_scores` rejects.
    teleo_server.compute.errors.InternalValueError
        ``matrix`` is not 2-D, ``mask`` is not (N,), or a candidate is outside ``[0, N)``.
    """
    if k < 0:
        raise InvalidValue(f"k must be >= 0, got {k}")
    n = matrix.shape[0]
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (n,):
            raise InternalValueError(f"mask shape {mask.shape} != ({n},)")
    if candidates is None:
        return topk(dense_scores(matrix, query, dim=dim), k, mask=mask)
    rows = distinct(np.asarray(candidates, dtype=np.int64))
    if rows.size and (rows[0] < 0 or rows[-1] >= n):
        raise InternalValueError(f"candidate row id outside [0, {n})")
    if mask is not None:
        rows = rows[mask[rows]]
    pos, scores = topk(dense_scores(matrix, query, rows, dim=dim), k)
    # ``rows`` ascends, so position order within equal scores is row-id order.
    return rows[pos].astype(np.int32), scores


__all__ = ["check_query", "dense_scores", "dense_topk", "quantize_rows", "quantized_scores"]
