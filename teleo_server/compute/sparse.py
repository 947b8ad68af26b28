"""Sparse recall (BM25 / SPLADE) as SpMV over a term-major CSC inverted index.

Layout shared with ``kernels/spmv_recall.cu``: postings of term ``t`` are
``indices[indptr[t]:indptr[t + 1]]`` (memory row ids) with weights ``data[...]``.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csc_matrix

from teleo_server.compute.errors import InternalValueError, InvalidValue
from teleo_server.compute.topk import topk

# postings at which a query is scored by SciPy's compiled mat-vec rather than one NumPy bincount: its
# fixed cost (about 60 us) is repaid from about this many (2-core x86: 100K rows, 60K postings 0.9 ms
# against 0.54 ms; 1M rows, 600K postings 12.8 against 6.8 ms)
COMPILED_FROM = 32_768
# query terms up to which their postings are copied slice by slice (beyond, one gather by position)
SLICED_UP_TO = 64


def check_index(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray) -> None:
    """Raise InternalValueError unless host arrays form a CSC index (shapes and nnz; row ids unchecked)."""
    if indptr.ndim != 1 or indptr.shape[0] < 1:
        raise InternalValueError(f"indptr must be 1-D with V+1 >= 1 entries, got shape {indptr.shape}")
    if indices.shape != data.shape or indices.ndim != 1:
        raise InternalValueError(f"indices {indices.shape} and data {data.shape} must be equal 1-D shapes")
    if int(indptr[-1]) != indices.shape[0]:
        raise InternalValueError(f"indptr[-1]={int(indptr[-1])} != nnz={indices.shape[0]}")


def check_query(q_ids: np.ndarray, q_weights: np.ndarray) -> None:
    """Raise InvalidValue unless a sparse query holds one weight per term id."""
    if q_ids.shape != q_weights.shape:
        raise InvalidValue(
            f"sparse query has {q_ids.size} term ids but {q_weights.size} weights; send one weight per id"
        )


def spmv_scores(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    n_rows: int,
    q_ids: np.ndarray,
    q_weights: np.ndarray,
) -> np.ndarray:
    """Score every memory row: ``scores[r] = sum_i q_weights[i] * W[q_ids[i], r]``.

    Parameters
    ----------
    indptr : np.ndarray int64 or int32, shape (V+1,), host
    indices : np.ndarray int32 or uint16, shape (nnz,), host — row ids in ``[0, n_rows)``
    data : np.ndarray float32, shape (nnz,), host
    n_rows : int
        Number of memory rows N.
    q_ids : np.ndarray int32, shape (Q,), host
        Term ids. Ids outside ``[0, V)`` (out of vocabulary) are ignored; a repeated id counts
        once per occurrence.
    q_weights : np.ndarray float32, shape (Q,), host

    Returns
    -------
    np.ndarray float32, shape (N,)
        Accumulated in float64 and rounded once, so this is the oracle the float32-atomic GPU
        kernel is compared against with a relative tolerance.

    Raises
    ------
    teleo_server.compute.errors.InvalidValue
        ``q_ids`` and ``q_weights`` differ in length.
    teleo_server.compute.errors.InternalValueError
        The arrays do not form a CSC index, or a posting names a row outside ``[0, n_rows)``.
    """
    indptr = np.asarray(indptr)  # int64, or int32 (offsets gathered below are widened)
    if indptr.dtype.kind not in "iu":
        raise InternalValueError(f"indptr must hold integers, got {indptr.dtype}")
    indices = np.asarray(indices)
    data = np.asarray(data)
    check_index(indptr, indices, data)
    q_ids = np.asarray(q_ids, dtype=np.int64).ravel()
    q_weights = np.asarray(q_weights, dtype=np.float64).ravel()
    check_query(q_ids, q_weights)
    vocab = indptr.shape[0] - 1
    keep = (q_ids >= 0) & (q_ids < vocab)
    if not keep.all():
        q_ids, q_weights = q_ids[keep], q_weights[keep]
    starts = indptr[q_ids].astype(np.int64)
    ends = indptr[q_ids + 1].astype(np.int64)
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(n_rows, dtype=np.float32)
    if total < COMPILED_FROM:
        # Few postings: gather them into one weighted bincount.
        if q_ids.size <= SLICED_UP_TO:
            # a few terms: their slices copied whole (no per-posting position array)
            spans = [(a, b) for a, b in zip(starts.tolist(), ends.tolist()) if b > a]
            rows = np.concatenate([indices[a:b] for a, b in spans])
            weights = np.concatenate([data[a:b] for a, b in spans]).astype(np.float64)
        else:
            first = np.cumsum(lengths) - lengths
            pos = np.arange(total, dtype=np.int64) - np.repeat(first - starts, lengths)
            rows = indices[pos]
            weights = data[pos].astype(np.float64)
        weights *= np.repeat(q_weights, lengths)
        try:
            out = np.bincount(rows, weights=weights, minlength=n_rows)
        except ValueError as exc:  # a negative row id
            raise InternalValueError(f"posting row id outside [0, {n_rows})") from exc
        if out.shape[0] != n_rows:  # the highest row is read off the result, not from a pass of its own
            raise InternalValueError(f"posting row id outside [0, {n_rows})")
        return out.astype(np.float32)
    # Many: the query's columns, copied slice by slice into one small CSC, multiplied by SciPy's
    # compiled CSC mat-vec. The same float64 products are added in the same order (term by term,
    # rows within a term) as by the bincount, so both give the same bits.
    spans = list(zip(starts.tolist(), ends.tolist()))
    rows = np.concatenate([indices[a:b] for a, b in spans]).astype(np.int32 if n_rows < 2**31 else np.int64, copy=False)
    _check_rows(rows, n_rows)
    values = np.concatenate([data[a:b] for a, b in spans]).astype(np.float64)
    columns = np.zeros(q_ids.size + 1, dtype=np.int32 if total < 2**31 else np.int64)
    np.cumsum(lengths, out=columns[1:])
    picked = csc_matrix((values, rows, columns), shape=(n_rows, q_ids.size))
    return (picked @ q_weights).astype(np.float32)


def _check_rows(rows: np.ndarray, n_rows: int) -> None:
    if rows.min() < 0 or rows.max() >= n_rows:
        raise InternalValueError(f"posting row id outside [0, {n_rows})")


def bm25_part(tf: np.ndarray, length: np.ndarray, k1: float, b: float, avgdl: float) -> np.ndarray:
    """BM25's term-frequency part float64: ``tf (k1 + 1) / (tf + k1 (1 - b + b length / avgdl))``,
    in the order ``kernels/spmv_recall.cu`` (``spmv_bm25_scatter``) evaluates it."""
    f = np.asarray(tf, dtype=np.float64)
    return f * (k1 + 1.0) / (f + k1 * (1.0 - b + b * np.asarray(length, dtype=np.float64) / avgdl))


def bm25_scores(indptr: np.ndarray, indices: np.ndarray, tf: np.ndarray, doc_len: np.ndarray, n_rows: int,
                q_ids: np.ndarray, q_weights: np.ndarray, k1: float, b: float, avgdl: float) -> np.ndarray:
    """Okapi BM25 of every row over an index of raw term frequencies, weighed at query time.

    ``scores[r] = sum_i q_weights[i] * bm25_part(tf[q_ids[i], r], doc_len[r])``: the query weights
    are the terms' IDF, ``doc_len`` float (>= n_rows,) each row's length, ``avgdl`` the average
    length at the query's moment. float64 sums rounded to float32 once, as :func:`spmv_scores`;
    the reference of the device's BM25 scatter. Same layout and checks as :func:`spmv_scores`.
    """
    indptr, indices, tf = np.asarray(indptr), np.asarray(indices), np.asarray(tf)
    check_index(indptr, indices, tf)
    q_ids = np.asarray(q_ids, dtype=np.int64).ravel()
    q_weights = np.asarray(q_weights, dtype=np.float32).ravel()
    check_query(q_ids, q_weights)
    keep = (q_ids >= 0) & (q_ids < indptr.shape[0] - 1)
    q_ids, q_weights = q_ids[keep], q_weights[keep]
    starts, ends = indptr[q_ids].astype(np.int64), indptr[q_ids + 1].astype(np.int64)
    lengths = ends - starts
    if int(lengths.sum()) == 0:
        return np.zeros(n_rows, dtype=np.float32)
    spans = [(a, e) for a, e in zip(starts.tolist(), ends.tolist()) if e > a]
    rows = np.concatenate([indices[a:e] for a, e in spans]).astype(np.int64)
    _check_rows(rows, n_rows)
    part = bm25_part(np.concatenate([tf[a:e] for a, e in spans]), np.asarray(doc_len)[rows], k1, b, avgdl)
    part *= np.repeat(q_weights.astype(np.float64), lengths)
    return np.bincount(rows, weights=part, minlength=n_rows).astype(np.float32)


def spmv_topk(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    n_rows: int,
    q_ids: np.ndarray,
    q_weights: np.ndarray,
    k: int,
    mask: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best rows by sparse score.

    Parameters
    ----------
    indptr, indices, data, n_rows, q_ids, q_weights
        As for :func:`spmv_scores`.
    k : int
    mask : np.ndarray of bool, shape (N,), optional
        Candidate / ACL filter; ``False`` rows never come back.

    Returns
    -------
    ids : np.ndarray int32, shape (<= k,)
        Best first, ties by ascending row id. Rows scoring ``<= 0`` are excluded, so fewer than
        ``k`` come back when fewer rows share a term with the query.
    scores : np.ndarray float32, same shape

    Raises
    ------
    teleo_server.compute.errors.InvalidValue
        ``k < 0``, or a query that :func:`spmv_scores` rejects.
    teleo_server.compute.errors.InternalValueError
        An index that :func:`spmv_scores` rejects, or ``mask`` is not (N,).
    """
    if k < 0:
        raise InvalidValue(f"k must be >= 0, got {k}")
    scores = spmv_scores(indptr, indices, data, n_rows, q_ids, q_weights)
    valid = scores > 0
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (n_rows,):
            raise InternalValueError(f"mask shape {mask.shape} != ({n_rows},)")
        valid &= mask
    return topk(scores, k, mask=valid)


__all__ = ["bm25_part", "bm25_scores", "check_index", "check_query", "spmv_scores", "spmv_topk"]
