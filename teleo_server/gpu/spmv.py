"""Device SpMV recall over a term-major CSC index (``kernels/spmv_recall.cu``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from teleo_server.compute.errors import InternalValueError
from teleo_server.gpu import _checks, runtime
from teleo_server.gpu.topk import topk_device

_THREADS = 256
MAX_TERMS_PER_LAUNCH = 1024  # SPMV_MAX_TERMS in the kernel


def _check_index(indptr: Any, indices: Any, data: Any, dtype: Any = np.float32) -> None:
    _checks.device_array("indptr", indptr, np.int64, 1)
    _checks.device_array("indices", indices, np.int32, 1)
    _checks.device_array("data", data, dtype, 1, (indices.shape[0],))
    if indptr.shape[0] < 1:
        raise InternalValueError("indptr must hold V+1 >= 1 entries")


def spmv_accumulate(indptr: Any, indices: Any, data: Any, q_ids: Any, q_weights: Any, scores: Any) -> None:
    """Add one index segment's sparse scores into ``scores`` (no synchronisation).

    Parameters
    ----------
    indptr : device array int64, shape (V+1,), device
    indices : device array int32, shape (nnz,), device; every id < len(scores) (not re-checked)
    data : device array float32, shape (nnz,), device; or int8 codes (a coded index's: the caller
        multiplies each row's rounded score by the row's step afterwards)
    q_ids : device array int32, shape (Q,), device; ids outside [0, V) are ignored
    q_weights : device array float32, shape (Q,), device
    scores : device array float64, shape (N,), device; accumulated into with float64 atomics
        (rounded to float32 by the caller once every segment is in: the reference's bits)
    """
    rt = runtime.current()
    coded = getattr(data, "dtype", None) == np.int8
    _check_index(indptr, indices, data, np.int8 if coded else np.float32)
    _checks.device_array("q_ids", q_ids, np.int32, 1)
    _checks.device_array("q_weights", q_weights, np.float32, 1, (q_ids.shape[0],))
    _checks.device_array("scores", scores, np.float64, 1)
    _launch(rt, "spmv_coded_scatter" if coded else "spmv_scatter", (indices, data), indptr, q_ids, q_weights, scores)


def _launch(rt: Any, scatter_name: str, head: tuple, indptr: Any, q_ids: Any, q_weights: Any, scores: Any) -> None:
    """Plan and scatter one segment, a launch per ``MAX_TERMS_PER_LAUNCH`` query terms: the
    scatter kernel ``scatter_name`` takes ``head`` (its postings' arrays and constants), then the
    plan, the weights, their count and the scores (checked arguments; nothing to do when empty)."""
    xp = rt.xp
    n_terms = int(q_ids.shape[0])
    if n_terms == 0 or head[0].shape[0] == 0 or scores.shape[0] == 0:
        return
    vocab = np.int64(indptr.shape[0] - 1)
    plan = rt.function("spmv_recall", "spmv_plan")
    scatter = rt.function("spmv_recall", scatter_name)
    grid = (rt.sm_count() * 8,)
    for lo in range(0, n_terms, MAX_TERMS_PER_LAUNCH):
        ids = q_ids[lo : lo + MAX_TERMS_PER_LAUNCH]
        w = q_weights[lo : lo + MAX_TERMS_PER_LAUNCH]
        q = np.int32(ids.shape[0])
        plan_start = xp.empty(int(q), dtype=xp.int64)
        plan_off = xp.empty(int(q) + 1, dtype=xp.int64)
        plan((1,), (_THREADS,), (indptr, vocab, ids, q, plan_start, plan_off))
        scatter(grid, (_THREADS,), (*head, plan_start, plan_off, w, q, scores))


def bm25_accumulate(indptr: Any, indices: Any, tf: Any, doc_len: Any, k1: float, b: float, avgdl: float,
                    q_ids: Any, q_weights: Any, scores: Any) -> None:
    """Add one segment's BM25 into ``scores`` (no synchronisation): ``tf`` holds raw term
    frequencies, weighed per posting in the kernel with ``doc_len`` (device float32 (>= N,), each
    row's length) and ``avgdl``; otherwise as :func:`spmv_accumulate`. Reference:
    :func:`teleo_server.compute.sparse.bm25_scores`."""
    rt = runtime.current()
    _check_index(indptr, indices, tf)
    _checks.device_array("doc_len", doc_len, np.float32, 1)
    _checks.device_array("q_ids", q_ids, np.int32, 1)
    _checks.device_array("q_weights", q_weights, np.float32, 1, (q_ids.shape[0],))
    _checks.device_array("scores", scores, np.float64, 1)
    if doc_len.shape[0] < scores.shape[0]:
        raise InternalValueError(f"doc_len holds {doc_len.shape[0]} rows, the scores {scores.shape[0]}")
    if not avgdl > 0:
        raise InternalValueError(f"avgdl must be > 0, got {avgdl}")
    head = (indices, tf, doc_len, np.float64(k1), np.float64(b), np.float64(avgdl))
    _launch(rt, "spmv_bm25_scatter", head, indptr, q_ids, q_weights, scores)


def spmv_scores_device(indptr: Any, indices: Any, data: Any, n_rows: int, q_ids: Any, q_weights: Any) -> Any:
    """Sparse score of every row: device array float32 (n_rows,), device (see spmv_accumulate)."""
    rt = runtime.current()
    xp = rt.xp

    scores = xp.zeros(int(n_rows), dtype=xp.float64)
    spmv_accumulate(indptr, indices, data, q_ids, q_weights, scores)
    return scores.astype(xp.float32)


def spmv_topk_device(
    indptr: Any,
    indices: Any,
    data: Any,
    n_rows: int,
    q_ids: Any,
    q_weights: Any,
    k: int,
    *,
    mask: Any | None = None,
) -> tuple[Any, Any, Any]:
    """Best ``k`` rows by sparse score, rows scoring <= 0 excluded; ``(ids, scores, count)`` as
    :func:`teleo_server.gpu.topk.topk_device` returns them. ``mask`` is a uint32 row bitset."""
    scores = spmv_scores_device(indptr, indices, data, n_rows, q_ids, q_weights)
    return topk_device(scores, k, mask=mask, floor=0.0)


__all__ = ["MAX_TERMS_PER_LAUNCH", "bm25_accumulate", "spmv_accumulate", "spmv_scores_device", "spmv_topk_device"]
