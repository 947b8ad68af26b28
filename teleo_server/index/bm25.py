"""One Okapi BM25 field: term statistics and an inverted index over one kind of text of each memory.

The lexical space has one field (a memory's analysed terms); other spaces keep fields of their own
(the causal space its cause and effect spans, the code space its code tokens, the intent space its
intent clauses). Doc-side values are BM25's term-frequency part; the query side carries the IDF.

``sparse=True`` is for a field most memories leave empty (only some memories hold code or state an
intent): N and the average length are then taken over the memories that have the field at all, so
a code token's rarity is judged among code, not among every memory.

The field keeps no row-major copy of its postings: a memory's terms are re-derived from its text
by the owner's ``row_terms`` when one row's vector is needed (similarity, for Compare and a
memory's purpose), as they are on removal. A row-major copy would cost about 1.3 KB a SciFact
memory for reads that touch a few hundred memories at most.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from teleo_server.compute.sets import group_sum
from teleo_server.index.catalog import Catalog, Column
from teleo_server.index.sparse import SparseIndex, rows_sized
from teleo_server.index.terms import TermTable


class Bm25Field:
    """Term ids, document frequencies, document lengths and the SpMV index of one field.

    Term frequencies may be fractional (a term weighed down counts as less than one occurrence).
    ``row_terms(row)`` gives a stored memory's term frequencies again (what ``add`` was given).
    """

    def __init__(self, catalog: Catalog, row_terms: Callable[[int], Mapping[str, float]], k1: float = 0.9,
                 b: float = 0.4, merge_fraction: float = 0.1, sparse: bool = False, values: str = "float16",
                 weighed_values: str = "float16") -> None:
        self.catalog = catalog
        self.row_terms = row_terms
        self.k1, self.b, self.sparse = k1, b, sparse
        self.vocab = TermTable()  # term -> id, in a few arrays (about 24 bytes a term)
        self.df = Column(np.int32)  # documents per term id (a corpus of under 2^31 rows)
        self.doc_len = Column(np.float32)
        self._len_sum = 0.0
        self._n_docs = 0  # live rows with at least one term
        # raw values are term frequencies: float16 holds whole ones exactly below 2,048
        # the scored values (the term-frequency part, below k1 + 1) in float16 too: three significant
        # digits, 2 bytes a posting instead of 4
        self.index = SparseIndex(weigh=self._tf_part, merge_fraction=merge_fraction, weigh_key=self._avgdl,
                                 values=values, row_major=False, weighed_values=weighed_values)

    # ---- statistics ------------------------------------------------------------------------------
    def n_docs(self) -> int:
        return max(self._n_docs if self.sparse else len(self.catalog), 1)

    def _avgdl(self) -> float:
        return max(self._len_sum / self.n_docs(), 1e-6)

    def _tf_part(self, tf: np.ndarray, rows: np.ndarray) -> np.ndarray:
        k1, b = self.k1, self.b
        norm = k1 * (1.0 - b + b * self.doc_len.view[rows] / self._avgdl())
        return (tf * (k1 + 1.0) / (tf + norm)).astype(np.float32)

    def idf(self, ids: np.ndarray) -> np.ndarray:
        n = self.n_docs()
        df = self.df.view[ids].astype(np.float64)
        return np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)

    # ---- writes ----------------------------------------------------------------------------------
    @property
    def terms(self) -> Sequence[str]:
        """Every term in id order."""
        return self.vocab.terms

    def add(self, row: int, counts: Mapping[str, float]) -> np.ndarray:
        """Index memory ``row`` with its term frequencies (rows arrive in increasing order); returns
        the term ids int64 of ``counts``, in its order."""
        known = len(self.vocab)
        ids = np.array(self.vocab.add_all(list(counts)), dtype=np.int64)
        if len(self.vocab) > known:  # new terms
            self.df.extend(np.zeros(len(self.vocab) - known, dtype=np.int32))
        tf = np.fromiter(counts.values(), dtype=np.float32, count=len(counts))
        while self.doc_len.n < row:
            self.doc_len.append(0.0)
        length = float(tf.sum())
        self.doc_len.append(length)
        self._len_sum += length
        if ids.size:
            self.df.view[ids] += 1
            self._n_docs += 1
        self.index.add(row, ids, tf)
        self.index.grow_rows(row + 1)
        return ids

    def settle(self) -> None:
        """Fold the write buffers (postings and the newest terms) into the arrays (after a bulk load)."""
        if self.index.pending:
            self.index.merge()
        self.vocab.settle()

    def remove(self, row: int, terms: set[str]) -> None:
        """Forget one row's statistics (its postings stay, masked, until compaction); ``terms`` are
        the row's distinct terms, re-derived by the owner from the memory's text."""
        length = float(self.doc_len.view[row]) if row < self.doc_len.n else 0.0
        self._len_sum -= length
        ids = [t for t in self.vocab.ids_of(list(terms)) if t is not None]
        if ids:
            self.df.view[np.array(ids, dtype=np.int64)] -= 1
            self._n_docs -= 1

    def compact(self, keep_rows: np.ndarray) -> None:
        while self.doc_len.n < self.index.n_rows:
            self.doc_len.append(0.0)
        self.doc_len.keep(keep_rows[keep_rows < self.doc_len.n])
        self.index.compact(keep_rows)
        counts = np.diff(self.index.indptr)
        df = np.zeros(len(self.vocab), dtype=np.int32)
        df[: counts.size] = counts
        self.df = Column(np.int32)
        self.df.extend(df)
        self._len_sum = float(self.doc_len.view.sum())
        self._n_docs = int(np.count_nonzero(self.doc_len.view))

    # ---- reads -----------------------------------------------------------------------------------
    def term_weights(self, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids int32 (unique) and IDF weights float32 of those ``terms`` the field knows."""
        ids = sorted({t for t in self.vocab.ids_of(terms) if t is not None})
        arr = np.array(ids, dtype=np.int64)
        return arr.astype(np.int32), self.idf(arr)

    def scores(self, ops, ids: np.ndarray, w: np.ndarray, n_rows: int, readable: np.ndarray | None = None) -> np.ndarray:
        """BM25 float32 (n_rows,) of every memory row; 0 where no query term occurs. With
        ``readable`` (a caller who may not read every row) N, df and avgdl are taken over it."""
        if readable is not None:
            rows, part = self._within(ids, readable)
            return np.bincount(rows, weights=part, minlength=n_rows)[:n_rows].astype(np.float32)
        return rows_sized(self.index.scores(ops, ids, w), n_rows)

    def reached(self, ids: np.ndarray, w: np.ndarray, readable: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The memory rows the query terms occur in (ascending) and their BM25 float32: the
        nonzero entries of :meth:`scores`, read from the terms' postings alone."""
        if readable is None:
            return self.index.reached(ids, w)
        rows, part = self._within(ids, readable)
        rows, sums = group_sum(rows, part, readable.size)
        return rows, sums.astype(np.float32)

    def _within(self, ids: np.ndarray, readable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """BM25 with N, df and avgdl over the caller's readable rows only (NumPy reference), as
        each posting's row int64 and share float64 of its score.

        The precomputed index values carry the whole corpus's avgdl and the query weights its df;
        here both come from the query terms' postings restricted to ``readable``, so a tenant's
        scores do not move when another tenant writes. Costs one pass over those postings.
        """
        which, rows, tf = self.index.postings(ids)  # index rows are catalog rows: all < readable.size
        keep = readable[rows]
        which, rows, tf = which[keep], rows[keep], tf[keep]
        lengths = self.doc_len.view[: readable.size]
        mine = readable[: lengths.size]
        n = max(int(np.count_nonzero(lengths[mine])) if self.sparse else int(readable.sum()), 1)
        avgdl = max(float(lengths[mine].sum()) / n, 1e-6)
        df = np.bincount(which, minlength=ids.size).astype(np.float64)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        k1, b = self.k1, self.b
        norm = k1 * (1.0 - b + b * self.doc_len.view[rows] / avgdl)
        part = tf * (k1 + 1.0) / (tf + norm)
        return rows, idf[which] * part

    def doc_vector(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """Unit-norm BM25-weighted term vector of one memory (term ids int64, weights float32)."""
        counts = [(t, float(c)) for t, c in self.row_terms(row).items() if c > 0]
        known = [(tid, c) for tid, (_, c) in zip(self.vocab.ids_of([t for t, _ in counts]), counts) if tid is not None]
        terms = np.fromiter((t for t, _ in known), dtype=np.int64, count=len(known))
        tf = np.fromiter((c for _, c in known), dtype=np.float32, count=len(known))
        w = self._tf_part(tf, np.full(terms.size, row, dtype=np.int64)) * self.idf(terms)
        return terms, (w / max(float(np.linalg.norm(w)), 1e-12)).astype(np.float32)

    def cosine(self, a: int, rows: np.ndarray) -> np.ndarray:
        """Cosine float32 (len(rows),) of row ``a``'s BM25 vector to each of ``rows``' (0 where
        either is empty)."""
        ta, wa = self.doc_vector(a)
        lookup = dict(zip(ta.tolist(), wa.tolist()))
        out = np.zeros(rows.size, dtype=np.float32)
        for i, r in enumerate(rows.tolist()):
            tb, wb = self.doc_vector(int(r))
            out[i] = sum(lookup.get(t, 0.0) * w for t, w in zip(tb.tolist(), wb.tolist()))
        return np.clip(out, 0.0, 1.0)


__all__ = ["Bm25Field"]
