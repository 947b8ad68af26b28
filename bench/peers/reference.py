"""NumPy references (float64) for the peers' exact modes: what each must return on the same data."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from bench.peers.base import PeerCorpus


def _top(scores: np.ndarray, k: int) -> list[int]:
    k = min(k, scores.size)
    part = np.argpartition(-scores, k - 1)[:k]
    return part[np.lexsort((part, -scores[part]))].tolist()


def dense_scores(corpus: PeerCorpus, q: np.ndarray) -> np.ndarray:
    """Inner product of every chunk row with ``q`` (float64)."""
    return corpus.dense.astype(np.float64) @ q.astype(np.float64)


def sparse_scores(corpus: PeerCorpus, ids: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Sparse dot product of every chunk row with the query (ids, weights)."""
    qw = dict(zip(ids.tolist(), w.astype(np.float64).tolist()))
    out = np.zeros(corpus.n_chunks)
    for c in range(corpus.n_chunks):
        cid, cw = corpus.sparse(c)
        out[c] = sum(qw.get(i, 0.0) * x for i, x in zip(cid.tolist(), cw.astype(np.float64).tolist()))
    return out


def bm25_scores(texts: list[str], query: str, k1: float, b: float, tokenize: Callable[[str], list[str]]) -> np.ndarray:
    """Okapi BM25 of every text, IDF ln(1 + (N - n + 0.5) / (n + 0.5)), each distinct query term once."""
    counts = [Counter(tokenize(t)) for t in texts]
    dl = np.array([sum(c.values()) for c in counts], dtype=np.float64)
    avgdl = max(dl.mean(), 1e-6)
    n = len(texts)
    out = np.zeros(n)
    for term in dict.fromkeys(tokenize(query)):
        tf = np.array([c.get(term, 0) for c in counts], dtype=np.float64)
        df = float((tf > 0).sum())
        if not df:
            continue
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        out += idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl / avgdl))
    return out


def maxsim(query_tokens: np.ndarray, doc_tokens: np.ndarray) -> float:
    """Sum over query tokens of the best dot product with any document token (float64)."""
    if not doc_tokens.shape[0] or not query_tokens.shape[0]:
        return 0.0
    return float((query_tokens.astype(np.float64) @ doc_tokens.astype(np.float64).T).max(axis=1).sum())


def rrf(lists: list[list[int]], k: int = 60) -> dict[int, float]:
    """Reciprocal rank fusion (ranks from 1)."""
    out: dict[int, float] = {}
    for ranked in lists:
        for r, x in enumerate(ranked):
            out[x] = out.get(x, 0.0) + 1.0 / (k + r + 1)
    return out


def topk(scores: np.ndarray, k: int, positive: bool = False) -> list[int]:
    """Indices of the ``k`` highest scores (ties by index); ``positive`` drops scores <= 0."""
    ranked = _top(scores, k)
    return [i for i in ranked if scores[i] > 0] if positive else ranked


__all__ = ["bm25_scores", "dense_scores", "maxsim", "rrf", "sparse_scores", "topk"]
