"""Incremental inverted index: a term-major CSC plus a small append-only delta.

Scoring a query is an SpMV: ``scores[row] = sum_t q[t] * value[t, row]`` over the query's terms.
The CSC part goes through the backend's ``spmv_scores``; the delta (rows added since the last
merge) is scored with a vectorised lookup. Once the delta holds more than ``merge_fraction`` of the
stored entries it is merged into the CSC, so adds stay cheap and queries stay fast.

Values can be re-derived at merge time through ``weigh(raw, rows)`` (BM25's length normalisation
depends on the average document length, which drifts as documents arrive).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

Weigh = Callable[[np.ndarray, np.ndarray], np.ndarray]


class SparseIndex:
    """Rows are documents (memory or chunk rows); columns are term ids in ``[0, n_terms)``.

    Parameters
    ----------
    weigh : callable(raw float32 (nnz,), rows int64 (nnz,)) -> float32 (nnz,), optional
        Turns stored raw values into scoring values (identity when None).
    merge_fraction : float
        Merge the delta into the CSC once it holds this share of the CSC's entries.
    """

    def __init__(self, weigh: Weigh | None = None, merge_fraction: float = 0.1, min_merge: int = 50_000) -> None:
        self._weigh = weigh
        self._merge_fraction = merge_fraction
        self._min_merge = min_merge
        self.n_rows = 0
        self.n_terms = 0
        # CSC over (n_rows_main, n_terms_main): indptr int64 (V+1,), indices int32, data float32
        self.indptr = np.zeros(1, dtype=np.int64)
        self.indices = np.zeros(0, dtype=np.int32)
        self.raw = np.zeros(0, dtype=np.float32)
        self.data = np.zeros(0, dtype=np.float32)
        self._d_rows: list[np.ndarray] = []
        self._d_terms: list[np.ndarray] = []
        self._d_raw: list[np.ndarray] = []
        self._delta_nnz = 0
        self._delta_cache: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def nnz(self) -> int:
        return int(self.indices.size) + self._delta_nnz

    def add(self, row: int, term_ids: np.ndarray, values: np.ndarray) -> None:
        """Index ``row`` (must be ``n_rows`` or later) with int term ids and float32 raw values."""
        if row < self.n_rows:
            raise ValueError(f"row {row} already indexed (rows are append-only)")
        self.n_rows = row + 1
        if term_ids.size:
            self.n_terms = max(self.n_terms, int(term_ids.max()) + 1)
            self._d_rows.append(np.full(term_ids.size, row, dtype=np.int64))
            self._d_terms.append(term_ids.astype(np.int64, copy=False))
            self._d_raw.append(values.astype(np.float32, copy=False))
            self._delta_nnz += term_ids.size
            self._delta_cache = None
        if self._delta_nnz > max(self._min_merge, self._merge_fraction * self.indices.size):
            self.merge()

    def grow_rows(self, n_rows: int) -> None:
        """Account for rows that carry no terms at all (empty documents)."""
        self.n_rows = max(self.n_rows, n_rows)

    def _delta(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._delta_cache is None:
            if self._d_rows:
                rows = np.concatenate(self._d_rows)
                terms = np.concatenate(self._d_terms)
                raw = np.concatenate(self._d_raw)
                self._d_rows, self._d_terms, self._d_raw = [rows], [terms], [raw]
            else:
                rows = terms = np.zeros(0, dtype=np.int64)
                raw = np.zeros(0, dtype=np.float32)
            self._delta_cache = (rows, terms, raw)
        return self._delta_cache

    def _coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        counts = np.diff(self.indptr)
        terms = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
        d_rows, d_terms, d_raw = self._delta()
        rows = np.concatenate([self.indices.astype(np.int64), d_rows])
        return rows, np.concatenate([terms, d_terms]), np.concatenate([self.raw, d_raw])

    def merge(self) -> None:
        """Fold the delta into the CSC and re-derive values (e.g. BM25 with the current avgdl)."""
        rows, terms, raw = self._coo()
        self._rebuild(rows, terms, raw)

    def reweigh(self) -> None:
        """Re-derive CSC values from raw values (after the weighting's inputs changed)."""
        if self._weigh is not None and self.indices.size:
            self.data = self._weigh(self.raw, self.indices.astype(np.int64)).astype(np.float32)

    def _rebuild(self, rows: np.ndarray, terms: np.ndarray, raw: np.ndarray) -> None:
        mat = sp.csc_matrix((raw, (rows, terms)), shape=(max(self.n_rows, 1), max(self.n_terms, 1)))
        mat.sort_indices()
        self.indptr = mat.indptr.astype(np.int64)
        self.indices = mat.indices.astype(np.int32)
        self.raw = mat.data.astype(np.float32)
        self.data = self.raw if self._weigh is None else self._weigh(self.raw, self.indices.astype(np.int64)).astype(np.float32)
        self._d_rows, self._d_terms, self._d_raw = [], [], []
        self._delta_nnz = 0
        self._delta_cache = None

    def compact(self, keep_rows: np.ndarray) -> None:
        """Keep only ``keep_rows`` (sorted old row ids), renumbered 0..len-1."""
        rows, terms, raw = self._coo()
        new_of_old = np.full(max(self.n_rows, 1), -1, dtype=np.int64)
        new_of_old[keep_rows] = np.arange(keep_rows.size)
        new_rows = new_of_old[rows]
        sel = new_rows >= 0
        self.n_rows = int(keep_rows.size)
        self._rebuild(new_rows[sel], terms[sel], raw[sel])

    def row_values(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """Term ids int64 and scoring values float32 of one row (for pairwise comparison; slow path)."""
        sel = self.indices == row
        counts = np.diff(self.indptr)
        terms = np.repeat(np.arange(counts.size, dtype=np.int64), counts)[sel]
        values = self.data[sel]
        d_rows, d_terms, d_raw = self._delta()
        dsel = d_rows == row
        if dsel.any():
            dv = d_raw[dsel] if self._weigh is None else self._weigh(d_raw[dsel], d_rows[dsel])
            terms = np.concatenate([terms, d_terms[dsel]])
            values = np.concatenate([values, dv.astype(np.float32)])
        return terms, values

    def scores(self, ops: Any, q_ids: np.ndarray, q_weights: np.ndarray) -> np.ndarray:
        """Scores of every row for one query.

        Parameters
        ----------
        ops : backend ops namespace (``compute.backend.ops(name)``) providing ``spmv_scores``.
        q_ids : int32 (Q,) term ids; ids outside the index are ignored.
        q_weights : float32 (Q,)

        Returns
        -------
        float32 (n_rows,), host memory.
        """
        out = np.zeros(self.n_rows, dtype=np.float32)
        n_main_terms = self.indptr.size - 1
        in_main = q_ids < n_main_terms
        if in_main.any() and self.indices.size:
            main = ops.spmv_scores(self.indptr, self.indices, self.data, self.n_rows,
                                   q_ids[in_main].astype(np.int32), q_weights[in_main].astype(np.float32))
            out += np.asarray(main, dtype=np.float32)[: self.n_rows]
        if self._delta_nnz:
            d_rows, d_terms, d_raw = self._delta()
            order = np.argsort(q_ids)
            sq, sw = q_ids[order].astype(np.int64), q_weights[order].astype(np.float32)
            pos = np.searchsorted(sq, d_terms)
            pos_c = np.minimum(pos, max(sq.size - 1, 0))
            hit = (pos < sq.size) & (sq[pos_c] == d_terms) if sq.size else np.zeros(d_terms.size, dtype=bool)
            if hit.any():
                vals = d_raw[hit] if self._weigh is None else self._weigh(d_raw[hit], d_rows[hit])
                out += np.bincount(d_rows[hit], weights=sw[pos_c[hit]] * vals, minlength=self.n_rows)[: self.n_rows].astype(np.float32)
        return out


__all__ = ["SparseIndex"]
