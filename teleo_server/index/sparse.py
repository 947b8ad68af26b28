"""Incremental inverted index: a term-major CSC plus an append-only delta.

Scoring a query is an SpMV: ``scores[row] = sum_t q[t] * value[t, row]`` over the query's terms.
The CSC part goes through the backend's ``spmv_scores``. The delta (rows added since the last
merge) is itself kept as a term-sorted snapshot, whose postings are sliced per query term like the
CSC's, plus a short unsorted tail of the newest entries that is scanned. The snapshot is re-sorted
once the tail outgrows an eighth of it, and the delta is merged into the CSC once it holds more
than ``merge_fraction`` of the stored entries: adds stay cheap (no CSC rebuild per write) and a
query never scans more than a small tail.

Values can be re-derived through ``weigh(raw, rows)`` (BM25's length normalisation depends on the
average document length, which drifts as documents arrive and leave). The delta is weighed at query
time; the CSC's values are re-derived at merge time and whenever ``weigh_key()`` (the input they
depend on, e.g. avgdl) has moved by more than ``reweigh_tolerance`` since they were derived.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from teleo_server.compute.backend import ops as backend_ops
from teleo_server.compute.sets import group_sum
from teleo_server.heads import SparseCodes, SparseVector
from teleo_server.index.catalog import Column, value_dtype
from teleo_server.index.chunks import ranges, slices

Weigh = Callable[[np.ndarray, np.ndarray], np.ndarray]

# the host path of :meth:`SparseIndex.reached` scores every row once the query's postings reach
# 1/MANY_POSTINGS of the rows (as the grouping it replaces would then count over every row anyway)
MANY_POSTINGS = 8
HOST_OPS = backend_ops("numpy")


def rows_sized(scores: np.ndarray, n: int) -> np.ndarray:
    """float32 (n,): a per-row score vector cut or zero-padded to ``n`` rows (an index can hold
    fewer rows than the catalog, whose newest memories may carry no terms); the array itself when
    it already has ``n``."""
    if scores.size == n:
        return scores
    out = np.zeros(n, dtype=np.float32)
    m = min(n, scores.size)
    out[:m] = scores[:m]
    return out


def _offsets_dtype(entries: int) -> np.dtype:
    """int32 offsets while they fit (half the bytes of a vocabulary-sized indptr), int64 past that."""
    return np.dtype(np.int32 if entries < 2**31 else np.int64)


def rows_dtype(n_rows: int) -> np.dtype:
    """The CSC's row ids: two bytes while every row id fits in them (an index of up to 65,536 rows,
    where the row ids are most of the postings' bytes), four past that."""
    return np.dtype(np.uint16 if n_rows <= 1 << 16 else np.int32)


class SparseIndex:
    """Rows are documents (memory or chunk rows); columns are term ids in ``[0, n_terms)``.

    Parameters
    ----------
    weigh : callable(raw float32 (nnz,), rows int64 (nnz,)) -> float32 (nnz,), optional
        Turns stored raw values into scoring values (identity when None).
    merge_fraction : float
        Merge the delta into the CSC once it holds this share of the CSC's entries.
    min_merge : int
        ... and at least this many entries (small indexes stay in the delta).
    weigh_key : callable() -> float, optional
        The input the weighting depends on (BM25: avgdl); CSC values are re-derived once it has
        moved by more than ``reweigh_tolerance`` (relative) since they were last derived.
    values : numpy dtype name
        How raw values are stored: "float32" (the exact reference), "float16" (half the bytes;
        about three significant digits, which term frequencies below 2,048 keep exactly) or "int8"
        (a quarter: each row's values as codes of its largest magnitude / 127, that step kept per
        row as a float32; scores are summed over codes and multiplied by the row's step once, so
        each value is within half a step of the one given). No weighing with int8.
    row_major : bool
        Keep the row-major copy that :meth:`row_values` reads (a space that can re-derive a row's
        terms from its text turns it off and saves the bytes).
    term_bound : int
        Term ids are below this (a model's vocabulary size); up to 65,536 the row-major copy keeps
        them in two bytes instead of four.
    weighed_values : numpy dtype name
        How the CSC keeps the values ``weigh`` derives (the ones queries read): "float32" or
        "float16" (half the bytes, about three significant digits).
    """

    def __init__(self, weigh: Weigh | None = None, merge_fraction: float = 0.1, min_merge: int = 50_000,
                 weigh_key: Callable[[], float] | None = None, reweigh_tolerance: float = 0.005,
                 values: str = "float32", row_major: bool = True, term_bound: int = 2**31,
                 weighed_values: str = "float32") -> None:
        if not 0 < term_bound <= 2**31:
            raise ValueError(f"term_bound must be in (0, 2**31], got {term_bound}")
        self.term_bound = term_bound
        self._terms = np.dtype(np.uint16 if term_bound <= 1 << 16 else np.int32)
        self._weigh = weigh
        self._weigh_key = weigh_key
        self._weighed_key = weigh_key() if weigh_key is not None else 0.0
        self._reweigh_tolerance = reweigh_tolerance
        self._merge_fraction = merge_fraction
        self._min_merge = min_merge
        self.coded = values == "int8"
        if self.coded and weigh is not None:
            raise ValueError("int8 values cannot be weighed (weigh must be None)")
        self._values = np.dtype(np.int8) if self.coded else value_dtype(values)
        self._weighed_values = value_dtype(weighed_values)
        # int8 values: each row's step (its largest magnitude / 127; 0 for a row with no terms)
        self._step = Column(np.float32)
        self.row_major = row_major
        self.n_rows = 0
        self.n_terms = 0
        # CSC over (n_rows_main, n_terms_main): indptr (V+1,) int32 below 2^31 entries (int64
        # past that; 1 MB less for the n-grams' 2^18 coordinates), indices uint16 up to 65,536 rows
        # (int32 past that: ``rows_dtype``, chosen at each rebuild), data float32
        self.indptr = np.zeros(1, dtype=np.int32)
        self.indices = np.zeros(0, dtype=rows_dtype(0))
        self.raw = np.zeros(0, dtype=self._values)
        self.data = self.raw
        self._d_rows, self._d_terms, self._d_raw = self._new_delta()
        # term-sorted copy of the first _snap_n delta entries: indptr over terms, rows, raw values
        self._snap_n = 0
        self._snap: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        # row-major copy of every entry (rows append-only), so one row's terms cost O(its terms):
        # row r holds [_r_ptr[r], _r_ptr[r + 1]) of _r_terms / _r_raw
        self._r_ptr = Column(np.int64)
        self._r_ptr.append(0)
        self._r_terms = Column(self._terms)
        self._r_raw = Column(self._values)

    def _new_delta(self) -> tuple[Column, Column, Column]:
        return Column(np.int32), Column(np.int32), Column(self._values)

    @property
    def nbytes(self) -> int:
        """Bytes of the stored entries (capacity not yet written is not counted: it is not resident)."""
        csc = self.indptr.nbytes + self.indices.nbytes + self.raw.nbytes
        csc += self.data.nbytes if self.data is not self.raw else 0
        delta = self.pending * (8 + self._values.itemsize)
        rows = self._r_ptr.n * 8 + self._r_terms.n * self._terms.itemsize + self._r_raw.n * self._values.itemsize
        return csc + delta + rows + self._step.n * 4

    @property
    def pending(self) -> int:
        """Entries in the delta, not yet merged into the CSC."""
        return self._d_rows.n

    @property
    def nnz(self) -> int:
        return int(self.indices.size) + self.pending

    def add(self, row: int, term_ids: np.ndarray, values: np.ndarray) -> None:
        """Index ``row`` (must be ``n_rows`` or later) with int term ids and float32 raw values."""
        if row < self.n_rows:
            raise ValueError(f"row {row} already indexed (rows are append-only)")
        if term_ids.size and (int(term_ids.min()) < 0 or int(term_ids.max()) >= self.term_bound):
            raise ValueError(f"term ids must be in [0, {self.term_bound})")
        self._pad_rows(row)
        self.n_rows = row + 1
        if self.coded:
            values, step = self._codes(np.asarray(values, dtype=np.float32))
            self._step.append(step)
        if self.row_major:
            self._r_terms.extend(np.asarray(term_ids, dtype=self._terms))
            self._r_raw.extend(np.asarray(values, dtype=self._values))
            self._r_ptr.append(self._r_terms.n)
        if term_ids.size:
            self.n_terms = max(self.n_terms, int(term_ids.max()) + 1)
            self._d_rows.extend(np.full(term_ids.size, row, dtype=np.int32))
            self._d_terms.extend(np.asarray(term_ids, dtype=np.int32))
            self._d_raw.extend(np.asarray(values, dtype=self._values))
        if self.pending > max(self._min_merge, self._merge_fraction * self.indices.size):
            self.merge()

    @staticmethod
    def _codes(values: np.ndarray) -> tuple[np.ndarray, float]:
        """One row's int8 codes and step (values ~= codes * step)."""
        top = float(np.abs(values).max()) if values.size else 0.0
        if top <= 0.0:
            return np.zeros(values.size, np.int8), 0.0
        step = top / 127.0
        return np.clip(np.rint(values / step), -127, 127).astype(np.int8), step

    def as_stored(self, values: np.ndarray) -> np.ndarray:
        """float32: one row's raw ``values`` as :meth:`add` keeps them and reads them back (int8
        codes times the row's step, float16 rounded, float32 as they are)."""
        v = np.asarray(values, dtype=np.float32)
        if self.coded:
            codes, step = self._codes(v)
            return codes.astype(np.float32) * np.float32(step)
        return v.astype(self._values).astype(np.float32)

    def stored(self, ids: np.ndarray, values: np.ndarray) -> SparseVector | SparseCodes:
        """One row as :meth:`add` keeps it: its int8 codes and step (``SparseCodes``) for a coded
        index, else a ``SparseVector`` of the values as kept (float16 rounded, float32 as given)."""
        if self.coded:
            codes, step = self._codes(np.asarray(values, dtype=np.float32))
            return SparseCodes.of(ids, codes, step)
        return SparseVector.of(ids, self.as_stored(values))

    def stored_rows(self, n: int) -> list[SparseVector | SparseCodes]:
        """Rows ``[0, n)`` as :meth:`stored` gives them (terms ascending), read off the postings in
        one pass; a row without terms is an empty ``SparseVector``."""
        which, terms, values = self.rows_entries(np.arange(n, dtype=np.int64))
        order = np.lexsort((terms, which))
        which, terms, values = which[order], terms[order], values[order]
        cut = np.searchsorted(which, np.arange(n + 1))
        steps = self.steps(np.arange(n, dtype=np.int64)) if self.coded else None
        out: list[SparseVector | SparseCodes] = []
        for r in range(n):
            t, v = terms[cut[r]:cut[r + 1]], values[cut[r]:cut[r + 1]]
            if steps is not None and t.size and steps[r] > 0:  # the codes back from their decoded values
                out.append(SparseCodes.of(t, np.rint(v / steps[r]), steps[r]))
            else:
                out.append(SparseVector.of(t, v))
        return out

    def steps(self, rows: np.ndarray) -> np.ndarray:
        """float32 (len(rows),): each row's step (int8 values; 0 for rows never given terms). Every
        row below ``n_rows`` has one: add, grow_rows and compact keep them padded."""
        return self._step.view[np.asarray(rows, dtype=np.int64)]

    def _decoded(self, raw: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Raw stored values float32 as given to :meth:`add` (int8 codes times their row's step)."""
        got = raw.astype(np.float32, copy=False)
        return got * self.steps(rows) if self.coded else got

    def grow_rows(self, n_rows: int) -> None:
        """Account for rows that carry no terms at all (empty documents)."""
        self._pad_rows(n_rows)
        self.n_rows = max(self.n_rows, n_rows)

    def _pad_rows(self, n_rows: int) -> None:
        """Empty row-major entries (and steps) for rows before ``n_rows`` that were never added."""
        if self.coded and self._step.n < n_rows:
            self._step.extend(np.zeros(n_rows - self._step.n, dtype=np.float32))
        if not self.row_major:
            return
        missing = n_rows - (self._r_ptr.n - 1)
        if missing > 0:
            self._r_ptr.extend(np.full(missing, self._r_terms.n, dtype=np.int64))

    def _delta(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Delta entries in arrival order: rows int32, terms int32, raw values (views)."""
        return self._d_rows.view, self._d_terms.view, self._d_raw.view

    def _snapshot(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The term-sorted snapshot, re-sorted first when the unsorted tail has grown too long."""
        n = self.pending
        if self._snap is None or n - self._snap_n > max(4096, self._snap_n // 8):
            rows, terms, raw = self._delta()
            order = np.argsort(terms, kind="stable")
            indptr = np.zeros(self.n_terms + 1, dtype=_offsets_dtype(n))
            np.cumsum(np.bincount(terms, minlength=self.n_terms), out=indptr[1:])
            self._snap = (indptr, rows[order].astype(np.int64), raw[order])
            self._snap_n = n
        return self._snap

    def _coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        counts = np.diff(self.indptr)
        terms = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
        d_rows, d_terms, d_raw = self._delta()
        rows = np.concatenate([self.indices.astype(np.int64), d_rows.astype(np.int64)])
        return rows, np.concatenate([terms, d_terms.astype(np.int64)]), np.concatenate([self.raw, d_raw])

    def merge(self) -> None:
        """Fold the delta into the CSC and re-derive values (e.g. BM25 with the current avgdl)."""
        rows, terms, raw = self._coo()
        self._rebuild(rows, terms, raw)

    def reweigh(self) -> None:
        """Re-derive CSC values from raw values (after the weighting's inputs changed)."""
        if self._weigh is not None and self.indices.size:
            self._weighed_key = self._weigh_key() if self._weigh_key is not None else 0.0
            self.data = self._weighed()

    def _weighed_delta(self, raw: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The delta's scoring values float32, rounded as the CSC keeps them (``weighed_values``),
        so a row scores the same before and after its entries are merged."""
        vals = np.asarray(self._weigh(raw, rows), dtype=np.float32)
        return vals if self._weighed_values == np.float32 else vals.astype(self._weighed_values).astype(np.float32)

    def _weighed(self) -> np.ndarray:
        """Scoring values (``weighed_values``) of the CSC's raw values, with the weighting's current
        inputs."""
        assert self._weigh is not None
        return self._weigh(self.raw.astype(np.float32), self.indices.astype(np.int64)).astype(self._weighed_values)

    def _rebuild(self, rows: np.ndarray, terms: np.ndarray, raw: np.ndarray) -> None:
        # term-major order (rows ascending within a term) without a float64 COO round trip
        order = np.lexsort((rows, terms))
        rows, terms, raw = rows[order], terms[order], np.asarray(raw)[order]
        repeat = (np.diff(rows) == 0) & (np.diff(terms) == 0)
        if repeat.any():  # one entry per (row, term): repeats are summed, as a sparse matrix does
            first = np.flatnonzero(np.r_[True, ~repeat])
            rows, terms = rows[first], terms[first]
            raw = np.add.reduceat(raw.astype(np.float64), first)
        counts = np.bincount(terms, minlength=max(self.n_terms, 1))
        self.indptr = np.zeros(counts.size + 1, dtype=_offsets_dtype(rows.size))
        np.cumsum(counts, out=self.indptr[1:])
        self.indices = rows.astype(rows_dtype(self.n_rows))
        self.raw = (np.clip(raw, -127, 127) if self.coded else raw).astype(self._values)
        self._weighed_key = self._weigh_key() if self._weigh_key is not None else 0.0
        self.data = self.raw if self._weigh is None else self._weighed()
        self._d_rows, self._d_terms, self._d_raw = self._new_delta()
        self._snap, self._snap_n = None, 0

    def compact(self, keep_rows: np.ndarray) -> None:
        """Keep only ``keep_rows`` (sorted old row ids), renumbered 0..len-1."""
        rows, terms, raw = self._coo()
        new_of_old = np.full(max(self.n_rows, 1), -1, dtype=np.int64)
        new_of_old[keep_rows] = np.arange(keep_rows.size)
        new_rows = new_of_old[rows]
        sel = new_rows >= 0
        self.n_rows = int(keep_rows.size)
        self._rebuild(new_rows[sel], terms[sel], raw[sel])
        self._keep_row_major(keep_rows)
        if self.coded:
            self._pad_rows(int(keep_rows[-1]) + 1 if keep_rows.size else 0)
            self._step.keep(keep_rows)

    def _keep_row_major(self, keep_rows: np.ndarray) -> None:
        if not self.row_major:
            return
        self._pad_rows(int(keep_rows[-1]) + 1 if keep_rows.size else 0)
        ptr = self._r_ptr.view
        starts, lengths = ptr[keep_rows], ptr[keep_rows + 1] - ptr[keep_rows]
        take = np.repeat(starts - np.r_[0, np.cumsum(lengths)[:-1]], lengths) + np.arange(int(lengths.sum()))
        terms, raw = self._r_terms.view[take], self._r_raw.view[take]
        self._r_ptr, self._r_terms, self._r_raw = Column(np.int64), Column(self._terms), Column(self._values)
        self._r_ptr.extend(np.r_[0, np.cumsum(lengths)].astype(np.int64))
        self._r_terms.extend(terms)
        self._r_raw.extend(raw)

    def rows_entries(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every stored entry of the given rows (distinct), CSC and delta alike, in one pass over
        all the postings: which row (index into ``rows``) int64, term id int64 and scoring value
        float32 of each (weighed as queries read them). O(entries of the whole index), for an
        index without the row-major copy: comparisons between memories are rare, the copy's bytes
        are paid by every memory."""
        rows = np.asarray(rows, dtype=np.int64).ravel()
        if not rows.size:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
        where = np.full(max(self.n_rows, int(rows.max()) + 1), -1, dtype=np.int64)
        where[rows] = np.arange(rows.size)
        terms, raw, of = [], [], []
        if self.indices.size:
            pos = np.flatnonzero(where[self.indices] >= 0)
            of.append(self.indices[pos].astype(np.int64))
            # positions in the offsets' own type (int32 where they fit): no widened copy of the offsets
            terms.append(np.searchsorted(self.indptr, pos.astype(self.indptr.dtype), side="right").astype(np.int64) - 1)
            raw.append(self.raw[pos])
        if self.pending:
            d_rows, d_terms, d_raw = self._delta()
            pos = np.flatnonzero(where[d_rows] >= 0)
            of.append(d_rows[pos].astype(np.int64))
            terms.append(d_terms[pos].astype(np.int64))
            raw.append(d_raw[pos])
        if not of:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
        of_rows = np.concatenate(of)
        values = self._decoded(np.concatenate(raw), of_rows)
        if self._weigh is not None:
            values = self._weigh(values, of_rows).astype(np.float32)
        return where[of_rows], np.concatenate(terms).astype(np.int64), values.astype(np.float32, copy=False)

    def row_values(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """Term ids int64 and scoring values float32 of one row, in O(its terms) (pairwise
        comparison); values are weighed with the current inputs (BM25: today's avgdl). Without
        the row-major copy, through :meth:`rows_entries` (a pass over every posting)."""
        if not self.row_major:
            _, terms, values = self.rows_entries(np.array([row], dtype=np.int64))
            order = np.argsort(terms, kind="stable")
            return terms[order], values[order]
        if row + 1 >= self._r_ptr.n:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        ptr = self._r_ptr.view
        lo, hi = int(ptr[row]), int(ptr[row + 1])
        terms = self._r_terms.view[lo:hi].astype(np.int64)
        raw = self._decoded(self._r_raw.view[lo:hi], np.full(hi - lo, row, dtype=np.int64))
        if self._weigh is None:
            return terms, raw
        return terms, self._weigh(raw, np.full(raw.size, row, dtype=np.int64)).astype(np.float32)

    def postings(self, q_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every stored entry of the given terms, CSC and delta alike (tombstoned rows included).

        Returns which query term (index into ``q_ids``) int64, row int64 and raw value float32 of
        each entry, for statistics over a subset of rows (a caller's readable documents).
        """
        q_ids = np.asarray(q_ids, dtype=np.int64).ravel()
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        sel = np.flatnonzero((q_ids >= 0) & (q_ids < self.indptr.size - 1))
        lengths, pos = slices(self.indptr, q_ids[sel])
        if pos.size:
            parts.append((np.repeat(sel, lengths), self.indices[pos].astype(np.int64), self.raw[pos].astype(np.float32)))
        if self.pending:
            parts.append(self._delta_postings(q_ids))
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
        which, rows, raw = (np.concatenate(c) for c in zip(*parts))
        return which, rows, self._decoded(raw, rows)

    def postings_count(self, q_ids: np.ndarray) -> int:
        """How many stored entries the given terms hold (CSC and delta): an upper bound, known
        before scoring, of the rows a query of these terms reaches. Ids outside the index hold
        none; the delta's unsorted tail counts whole."""
        q_ids = np.asarray(q_ids, dtype=np.int64).ravel()
        main = q_ids[(q_ids >= 0) & (q_ids < self.indptr.size - 1)]
        count = int((self.indptr[main + 1] - self.indptr[main]).sum())
        if self.pending:
            indptr, _, _ = self._snapshot()
            snap = q_ids[(q_ids >= 0) & (q_ids < indptr.size - 1)]
            count += int((indptr[snap + 1] - indptr[snap]).sum()) + self.pending - self._snap_n
        return count

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
        self._fresh_weights()
        out = None
        n_main_terms = self.indptr.size - 1
        in_main = q_ids < n_main_terms
        if in_main.any() and self.indices.size:
            main = np.asarray(ops.spmv_scores(self.indptr, self.indices, self.data, self.n_rows,
                                              q_ids[in_main].astype(np.int32), q_weights[in_main].astype(np.float32)),
                              dtype=np.float32)
            # the scorer's own fresh array is the result (no second pass over every row)
            out = main if main.shape == (self.n_rows,) and main.base is None and main.flags.writeable else None
            if out is None:
                out = np.zeros(self.n_rows, dtype=np.float32)
                out += main[: self.n_rows]
        if out is None:
            out = np.zeros(self.n_rows, dtype=np.float32)
        if self.pending:
            self._score_delta(q_ids, q_weights, out)
        if self.coded:
            out *= self._step.view[: out.size]
        return out

    def _fresh_weights(self) -> None:
        """Re-derive the CSC's values when their weighting input has drifted past the tolerance."""
        if self._weigh_key is not None and self.indices.size:
            key = self._weigh_key()
            if abs(key - self._weighed_key) > self._reweigh_tolerance * abs(self._weighed_key):
                self.reweigh()

    def reached(self, q_ids: np.ndarray, q_weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows one query reaches and their scores, at a cost set by the query terms' postings
        rather than by the number of rows (the host path of sparse recall).

        Returns rows int64 (ascending) whose score is not 0 and their scores float32: the nonzero
        entries of :meth:`scores`, up to float32 rounding (the CSC and the delta are summed
        together here, once), or exactly, read off :meth:`scores`, when the postings are many
        against the rows. Ids outside the index are ignored; a repeated id counts once per
        occurrence.
        """
        self._fresh_weights()
        q_ids = np.asarray(q_ids, dtype=np.int64).ravel()
        q_w = np.asarray(q_weights, dtype=np.float64).ravel()
        rows_parts: list[np.ndarray] = []
        value_parts: list[np.ndarray] = []
        in_main = np.flatnonzero((q_ids >= 0) & (q_ids < self.indptr.size - 1))
        main_ids = q_ids[in_main]
        if MANY_POSTINGS * self.postings_count(q_ids) >= self.n_rows > 0:
            # postings many against the rows (common words, SPLADE's expansions): one score per row
            # costs less than grouping the postings by row
            out = self.scores(HOST_OPS, q_ids.astype(np.int32), np.asarray(q_weights, np.float32))
            rows = np.flatnonzero(out != 0)  # a mask's nonzero entries are found faster than a float's
            return rows, out[rows]
        if in_main.size and self.indices.size:
            lengths, pos = slices(self.indptr, main_ids)
            rows_parts.append(self.indices[pos].astype(np.int64))
            value_parts.append(self.data[pos].astype(np.float64) * np.repeat(q_w[in_main], lengths))
        if self.pending:
            which, rows, raw = self._delta_postings(q_ids)
            vals = raw if self._weigh is None else self._weighed_delta(raw, rows)
            rows_parts.append(rows)
            value_parts.append(np.asarray(vals, np.float64) * q_w[which])
        if not rows_parts:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        rows, sums = group_sum(np.concatenate(rows_parts), np.concatenate(value_parts), self.n_rows)
        if self.coded:
            sums = sums * self.steps(rows)
        return rows, sums.astype(np.float32)

    def _delta_postings(self, q_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The delta's entries of the query terms (snapshot and tail): which query term int64, row
        int64, raw value float32."""
        which_parts, rows_parts, raw_parts = [], [], []
        indptr, s_rows, s_raw = self._snapshot()
        in_snap = np.flatnonzero((q_ids >= 0) & (q_ids < indptr.size - 1))
        lengths, pos = slices(indptr, q_ids[in_snap])
        if pos.size:
            which_parts.append(np.repeat(in_snap, lengths))
            rows_parts.append(s_rows[pos])
            raw_parts.append(s_raw[pos].astype(np.float32))
        d_rows, d_terms, d_raw = self._delta()
        t_rows, t_terms, t_raw = d_rows[self._snap_n :], d_terms[self._snap_n :], d_raw[self._snap_n :]
        known = np.flatnonzero((q_ids >= 0) & (q_ids < self.n_terms))
        if t_rows.size and known.size:
            # each tail entry against every occurrence of its term in the query
            order = known[np.argsort(q_ids[known], kind="stable")]
            sorted_ids = q_ids[order]
            lo = np.searchsorted(sorted_ids, t_terms, side="left")
            hi = np.searchsorted(sorted_ids, t_terms, side="right")
            hit = np.flatnonzero(hi > lo)
            if hit.size:
                pos = ranges(lo[hit], hi[hit] - lo[hit])
                reps = hi[hit] - lo[hit]
                which_parts.append(order[pos])
                rows_parts.append(np.repeat(t_rows[hit].astype(np.int64), reps))
                raw_parts.append(np.repeat(t_raw[hit].astype(np.float32), reps))
        if not rows_parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
        return np.concatenate(which_parts), np.concatenate(rows_parts), np.concatenate(raw_parts)

    def _score_delta(self, q_ids: np.ndarray, q_weights: np.ndarray, out: np.ndarray) -> None:
        """Add the delta's scores (snapshot and tail, weighed now) to ``out`` float32 (n_rows,)."""
        which, rows, raw = self._delta_postings(np.asarray(q_ids, np.int64).ravel())
        if rows.size:
            vals = raw if self._weigh is None else self._weighed_delta(raw, rows)
            weights = np.asarray(q_weights, np.float32).ravel()[which] * vals
            out += np.bincount(rows, weights=weights, minlength=self.n_rows)[: self.n_rows].astype(np.float32)


__all__ = ["SparseIndex", "rows_dtype", "rows_sized"]
