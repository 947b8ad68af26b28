"""Exact dense inner-product scan; the oracle for ``kernels/dense_scan.cu``."""

from __future__ import annotations

import numpy as np

from teleo_server.compute.errors import InternalValueError, InvalidValue
from teleo_server.compute.sets import distinct
from teleo_server.compute.topk import topk

# Rows widened from float16 to float32 per step, bounding the temporary at ~64 MiB.
_CHUNK_ELEMENTS = 1 << 24


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


__all__ = ["check_query", "dense_scores", "dense_topk"]
