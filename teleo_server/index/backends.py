"""The in-process index backends behind :class:`teleo_server.index.base.VectorIndex`: the exact
dense scan (the reference), the HNSW graph, the SpMV inverted index, BM25 over raw term
frequencies and the MaxSim token store."""

from __future__ import annotations

from typing import Any

import numpy as np

from teleo_server.compute.sparse import bm25_part
from teleo_server.heads import SparseVector
from teleo_server.index.columns import Column
from teleo_server.index.base import DenseQuery, RowFilter, SparseQuery, TokenQuery, register_backend
from teleo_server.index.dense import DenseIndex
from teleo_server.index.sparse import SparseIndex, rows_sized
from teleo_server.index.tokens import TokenStore


def _live_bits(alive: np.ndarray, filter: RowFilter | None, n: int) -> np.ndarray:
    live = np.asarray(alive[:n], dtype=bool)
    return live if filter is None else live & filter.bits(n)


class DenseBackend:
    """:class:`DenseIndex` (exact scan; HNSW once ``exact_threshold`` live rows are searched)."""

    kind = "dense"

    def __init__(self, dim: int, ops: Any, truncations: tuple[int, ...] = (), exact_threshold: int = 50_000,
                 index: DenseIndex | None = None, **hnsw: Any) -> None:
        self.index = index if index is not None else DenseIndex(dim, truncations, exact_threshold, **hnsw)
        self.ops = ops

    @property
    def exact(self) -> bool:
        return not self.index.uses_hnsw

    @property
    def n(self) -> int:
        return self.index.n

    def add(self, vectors: list[Any]) -> np.ndarray:
        return self.index.add(np.asarray(vectors, dtype=np.float32).reshape(-1, self.index.dim))

    def remove(self, rows: np.ndarray) -> None:
        self.index.remove(np.asarray(rows, dtype=np.int64))

    def search(self, query: DenseQuery, k: int, filter: RowFilter | None = None) -> tuple[np.ndarray, np.ndarray]:
        mask = None if filter is None else filter.bits(self.index.n)
        return self.index.search(self.ops, query.vector, k, mask, dim=query.dim)

    def runs_beside(self, filter: RowFilter | None = None) -> bool:
        """A search that goes through the HNSW graph runs outside the interpreter lock; an exact
        scan does not (``index.base.runs_beside``)."""
        return self.index.searches_graph(None if filter is None else filter.bits(self.index.n))

    def score(self, ids: np.ndarray, query: DenseQuery) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        out = self.index.score(ids, query.vector).astype(np.float32)
        out[~self.index.alive[ids]] = np.nan
        return out


class Removed:
    """Rows tombstoned by ``remove``, for an index that keeps no alive mask of its own."""

    def __init__(self) -> None:
        self._dead = np.zeros(0, dtype=bool)

    def remove(self, rows: np.ndarray, n: int) -> None:
        if self._dead.size < n:
            self._dead = np.concatenate([self._dead, np.zeros(n - self._dead.size, dtype=bool)])
        self._dead[np.asarray(rows, dtype=np.int64)] = True

    def kept(self, ids: np.ndarray) -> np.ndarray:
        """bool (len(ids),): which of ``ids`` were not removed (no allocation of the whole index)."""
        out = np.ones(ids.size, dtype=bool)
        if self._dead.size:
            inside = ids < self._dead.size
            out[inside] = ~self._dead[ids[inside]]
        return out

    def clear(self, per_row: np.ndarray) -> None:
        """Set the removed rows of a per-row array (rows 0..len-1) to 0, in place."""
        dead = self._dead[: per_row.size]
        if dead.any():
            per_row[: dead.size][dead] = 0

    def alive(self, n: int) -> np.ndarray:
        """bool (n,): rows not removed."""
        alive = np.ones(n, dtype=bool)
        alive[: min(self._dead.size, n)] = ~self._dead[:n]
        return alive


class SparseBackend:
    """:class:`SparseIndex` scored as one SpMV over every row; a row with no overlap (score <= 0) is
    not found."""

    kind = "sparse"
    exact = True

    def __init__(self, ops: Any, index: SparseIndex | None = None, **options: Any) -> None:
        self.index = index if index is not None else SparseIndex(**options)
        self.ops = ops
        self.removed = Removed()

    @property
    def n(self) -> int:
        return self.index.n_rows

    def add(self, vectors: list[SparseVector]) -> np.ndarray:
        start = self.index.n_rows
        for i, v in enumerate(vectors):
            self.index.add(start + i, np.asarray(v.ids, dtype=np.int64), np.asarray(v.weights, dtype=np.float32))
        self.index.grow_rows(start + len(vectors))
        return np.arange(start, start + len(vectors), dtype=np.int64)

    def remove(self, rows: np.ndarray) -> None:
        self.removed.remove(rows, self.n)

    def all_scores(self, query: SparseQuery) -> np.ndarray:
        return rows_sized(self.index.scores(self.ops, np.asarray(query.ids, np.int32),
                                            np.asarray(query.weights, np.float32)), self.n)

    def search(self, query: SparseQuery, k: int, filter: RowFilter | None = None) -> tuple[np.ndarray, np.ndarray]:
        scores = self.all_scores(query)
        ids, top = self.ops.topk(scores, k, mask=_live_bits(self.removed.alive(self.n), filter, self.n) & (scores > 0))
        return np.asarray(ids, dtype=np.int64), np.asarray(top, dtype=np.float32)

    def reached(self, query: SparseQuery) -> tuple[np.ndarray, np.ndarray]:
        """Every row ``query`` scores (> 0) that was not removed: rows int64 ascending, scores
        float32, read from the query terms' postings without scoring every row."""
        rows, s = self.index.reached(np.asarray(query.ids, np.int64), np.asarray(query.weights, np.float32))
        keep = (s > 0) & self.removed.kept(rows)
        return rows[keep], s[keep]

    def every_score(self, query: SparseQuery) -> np.ndarray:
        """float32 (n,): every row's score, 0 where ``score`` would give NaN (no overlap, removed);
        see :func:`teleo_server.index.base.every_score`."""
        out = self.all_scores(query)
        np.maximum(out, 0.0, out=out)
        self.removed.clear(out)
        return out

    def reach(self, query: SparseQuery) -> int:
        """The entries of the query terms' postings: an upper bound of the rows it reaches."""
        return self.index.postings_count(np.asarray(query.ids, np.int64))

    def score(self, ids: np.ndarray, query: SparseQuery) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        s = self.all_scores(query)[ids]
        return np.where((s > 0) & self.removed.kept(ids), s, np.nan).astype(np.float32)


class RowLengths:
    """Each row's length (the sum of its term frequencies) and their average over the live rows
    (``sparse``: over the live rows with a term): what a BM25 index that weighs its postings at
    query time keeps beside them."""

    def __init__(self, sparse: bool = False) -> None:
        self.sparse = sparse
        self.of = Column(np.float32)  # by row, removed rows included
        self._sum, self._counted = 0.0, 0

    def extend(self, vectors: list[SparseVector]) -> np.ndarray:
        """Append the lengths of the next rows; returns them float32."""
        lengths = np.array([float(np.asarray(v.weights, np.float32).sum()) for v in vectors], dtype=np.float32)
        self.of.extend(lengths)
        self._sum += float(lengths.astype(np.float64).sum())
        self._counted += int((lengths > 0).sum()) if self.sparse else lengths.size
        return lengths

    def forget(self, rows: np.ndarray) -> None:
        """Leave removed rows (distinct, each live until now) out of the average."""
        lengths = self.of.view[rows].astype(np.float64)
        self._sum -= float(lengths.sum())
        self._counted -= int((lengths > 0).sum()) if self.sparse else rows.size

    def average(self) -> float:
        return max(self._sum / max(self._counted, 1), 1e-6)


class Bm25Backend:
    """Okapi BM25 over rows of raw term frequencies, weighed at query time (the ``bm25`` kind of
    :mod:`teleo_server.index.base`) with the live rows' average length (:class:`RowLengths`), so a
    write that moves it re-weighs nothing. The reference of ``bm25.resident``."""

    kind = "bm25"
    exact = True

    def __init__(self, ops: Any = None, k1: float = 0.9, b: float = 0.4, sparse: bool = False, **_: Any) -> None:
        self.k1, self.b = float(k1), float(b)
        self.index = SparseIndex(values="float32", row_major=False)
        self.lengths = RowLengths(bool(sparse))
        self.removed = Removed()

    @property
    def n(self) -> int:
        return self.lengths.of.n

    def add(self, vectors: list[SparseVector]) -> np.ndarray:
        start = self.n
        for i, v in enumerate(vectors):
            self.index.add(start + i, np.asarray(v.ids, dtype=np.int64), np.asarray(v.weights, dtype=np.float32))
        self.lengths.extend(vectors)
        self.index.grow_rows(self.n)
        return np.arange(start, self.n, dtype=np.int64)

    def remove(self, rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        rows = np.unique(rows[self.removed.kept(rows)])
        self.lengths.forget(rows)
        self.removed.remove(rows, self.n)

    def _reached(self, query: SparseQuery) -> tuple[np.ndarray, np.ndarray]:
        """Rows (ascending, live) the query's terms occur in and their BM25 float32."""
        which, rows, tf = self.index.postings(np.asarray(query.ids, np.int64))
        part = bm25_part(tf, self.lengths.of.view[rows], self.k1, self.b, self.lengths.average())
        part *= np.asarray(query.weights, np.float32).astype(np.float64)[which]
        rows, at = np.unique(rows, return_inverse=True)
        sums = np.bincount(at, weights=part, minlength=rows.size).astype(np.float32)
        keep = self.removed.kept(rows) & (sums > 0)
        return rows[keep], sums[keep]

    def reached(self, query: SparseQuery) -> tuple[np.ndarray, np.ndarray]:
        return self._reached(query)

    def every_score(self, query: SparseQuery) -> np.ndarray:
        out = np.zeros(self.n, dtype=np.float32)
        rows, s = self._reached(query)
        out[rows] = s
        return out

    def reach(self, query: SparseQuery) -> int:
        return self.index.postings_count(np.asarray(query.ids, np.int64))

    def score(self, ids: np.ndarray, query: SparseQuery) -> np.ndarray:
        s = self.every_score(query)[np.asarray(ids, dtype=np.int64)]
        return np.where(s > 0, s, np.nan).astype(np.float32)

    def search(self, query: SparseQuery, k: int, filter: RowFilter | None = None) -> tuple[np.ndarray, np.ndarray]:
        rows, s = self._reached(query)
        if filter is not None:
            keep = filter.bits(self.n)[rows]
            rows, s = rows[keep], s[keep]
        order = np.lexsort((rows, -s))[:k]
        return rows[order], s[order]


class TokenBackend:
    """:class:`TokenStore` scored by MaxSim (the mean over query tokens of the best document token);
    search scores every admitted row, so it is exact and meant for reranking-sized pools."""

    kind = "tokens"
    exact = True

    def __init__(self, ops: Any, store: TokenStore | None = None, dim_out: int | None = None) -> None:
        self.store = store if store is not None else TokenStore(dim_out)
        self.ops = ops
        self.removed = Removed()

    @property
    def n(self) -> int:
        return self.store.n

    def add(self, vectors: list[np.ndarray]) -> np.ndarray:
        start = self.store.n
        for i, t in enumerate(vectors):
            self.store.add(start + i, t)
        return np.arange(start, start + len(vectors), dtype=np.int64)

    def remove(self, rows: np.ndarray) -> None:
        self.removed.remove(rows, self.n)

    def score(self, ids: np.ndarray, query: TokenQuery) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        out = np.full(ids.size, np.nan, dtype=np.float32)
        if self.store.n_tokens == 0 or ids.size == 0:
            return out
        q = self.store.transform(query.tokens)
        has = self.store.count(ids) > 0
        has &= self.removed.kept(ids)
        if has.any() and q.shape[0]:
            out[has] = self.store.maxsim(self.ops, q, ids[has]) / q.shape[0]
        return out

    def search(self, query: TokenQuery, k: int, filter: RowFilter | None = None) -> tuple[np.ndarray, np.ndarray]:
        rows = np.flatnonzero(_live_bits(self.removed.alive(self.n), filter, self.n))
        scores = self.score(rows, query)
        ok = ~np.isnan(scores)
        ids, top = self.ops.topk(np.where(ok, scores, -np.inf).astype(np.float32), k, mask=ok)
        return rows[np.asarray(ids, dtype=np.int64)], np.asarray(top, dtype=np.float32)


register_backend("dense.numpy", "dense", True,
                 lambda dim, ops, **kw: DenseBackend(dim, ops, exact_threshold=10**12, **kw),
                 "exact scan over the dense matrix (the reference)")
register_backend("dense.hnsw", "dense", False,
                 lambda dim, ops, **kw: DenseBackend(dim, ops, exact_threshold=1, **kw),
                 "hnswlib graph, filtered in-graph (DenseIndex past exact_threshold; here from the first row)")
register_backend("sparse.numpy", "sparse", True,
                 lambda ops, **kw: SparseBackend(ops, min_merge=kw.pop("min_merge", 64), **kw),
                 "inverted index: CSC plus an append-only delta, SpMV")
register_backend("bm25.numpy", "bm25", True, lambda ops=None, **kw: Bm25Backend(ops, **kw),
                 "Okapi BM25 over raw term frequencies, weighed at query time")
register_backend("tokens.numpy", "tokens", True, lambda ops, dim=None, **kw: TokenBackend(ops, **kw),
                 "packed per-token vectors, MaxSim")


__all__ = ["Bm25Backend", "DenseBackend", "Removed", "RowLengths", "SparseBackend", "TokenBackend"]
