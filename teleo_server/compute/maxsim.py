"""Late-interaction MaxSim over a packed (CSR) token store; the oracle for ``kernels/maxsim.cu``."""

from __future__ import annotations

import numpy as np

from teleo_server.compute.errors import InternalValueError

# Bounds the float32 elements of one block: its gathered doc tokens (tokens x D) and its similarity
# matrix (Q x tokens). Blocks that stay in cache (~4 MiB) ran 1.7x faster on long documents than
# one 16 MiB block, whose fresh pages and cache misses cost more than the arithmetic.
_BLOCK_ELEMENTS = 1 << 20


def maxsim(
    query_tokens: np.ndarray,
    doc_offsets: np.ndarray,
    doc_tokens: np.ndarray,
    candidates: np.ndarray,
) -> np.ndarray:
    """``score[c] = sum_q max_{t in doc c} <query_tokens[q], doc_tokens[t]>``.

    Parameters
    ----------
    query_tokens : np.ndarray float32 or float16, shape (Q, D), host
    doc_offsets : np.ndarray int64, shape (N+1,), host
        Tokens of row ``r`` are ``doc_tokens[doc_offsets[r]:doc_offsets[r + 1]]``.
    doc_tokens : np.ndarray float16 (float32 accepted), shape (T, D), host
    candidates : np.ndarray int32, shape (C,), host
        Row ids in ``[0, N)``; repeats allowed.

    Returns
    -------
    np.ndarray float32, shape (C,)
        Dot products in float32 (fp16 values widened first). A row with no tokens, or a query with
        no tokens, scores 0.0; the full token x token matrix of one row is formed, never of all.

    Raises
    ------
    teleo_server.compute.errors.InternalValueError
        Query and document tokens are not (*, D) alike, or a candidate is outside ``[0, N)``;
        the server builds every argument, so either is a broken invariant.
    """
    q = np.asarray(query_tokens, dtype=np.float32)
    offsets = np.asarray(doc_offsets, dtype=np.int64)
    cand = np.asarray(candidates, dtype=np.int64).ravel()
    if q.ndim != 2 or doc_tokens.ndim != 2 or q.shape[1] != doc_tokens.shape[1]:
        raise InternalValueError(f"query {q.shape} and doc_tokens {doc_tokens.shape} must be (*, D) alike")
    n_rows = offsets.shape[0] - 1
    if cand.size and (cand.min() < 0 or cand.max() >= n_rows):
        raise InternalValueError(f"candidate row id outside [0, {n_rows})")
    out = np.zeros(cand.shape[0], dtype=np.float32)
    if q.shape[0] == 0 or cand.size == 0:
        return out
    starts = offsets[cand]
    lengths = offsets[cand + 1] - starts
    nonempty = np.flatnonzero(lengths > 0)
    per_block = max(1, _BLOCK_ELEMENTS // (max(q.shape[0], q.shape[1], 1) * int(max(1, lengths.max()))))
    for lo in range(0, nonempty.shape[0], per_block):
        sel = nonempty[lo : lo + per_block]
        lens = lengths[sel]
        first = np.cumsum(lens) - lens
        pos = np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(first - starts[sel], lens)
        sims = q @ doc_tokens[pos].astype(np.float32).T          # (Q, sum(lens))
        best = np.maximum.reduceat(sims, first, axis=1)          # (Q, len(sel)); no empty segment
        out[sel] = best.sum(axis=0, dtype=np.float32)
    return out


__all__ = ["maxsim"]
