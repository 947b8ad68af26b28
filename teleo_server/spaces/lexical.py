"""E6 lexical: Okapi BM25 over the analyser's terms (k1, b configurable)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from pydantic import Field

from teleo_server.domain import EmbeddingSet, Memory
from teleo_server.index.catalog import Catalog, Column
from teleo_server.index.sparse import SparseIndex
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.spaces.base import QueryContext, SpaceSettings, SparseScoredSpace
from teleo_server.spaces.registry import register
from teleo_server.spaces.text import STOPWORDS


class LexicalSettings(SpaceSettings):
    k1: float = Field(0.9, gt=0)             # BM25 term-frequency saturation
    b: float = Field(0.4, ge=0, le=1)        # BM25 length normalisation
    merge_fraction: float = Field(0.1, gt=0)  # delta merged into the CSC past this share of entries


@register
class LexicalSpace(SparseScoredSpace):
    """Doc-side values are BM25's term-frequency part; the query side carries the IDF."""

    name = "E6_lexical"
    recall = True
    description = "BM25 over analysed terms (every language; CJK as character bigrams)"
    Settings = LexicalSettings

    def __init__(self, settings: PipelineSettings, catalog: Catalog) -> None:
        super().__init__(settings, catalog)
        self.vocab: dict[str, int] = {}
        self.terms: list[str] = []
        self.df = Column(np.int64)
        self.doc_len = Column(np.float32)
        self._len_sum = 0.0
        # raw values are term frequencies: float16 holds them exactly below 2,048
        self.index = SparseIndex(weigh=self._tf_part, merge_fraction=self.config.merge_fraction, weigh_key=self._avgdl,
                                 values="float16")
        self.terms_of = settings.analyzer.build().terms

    def _avgdl(self) -> float:
        live = len(self.catalog)
        return max(self._len_sum / max(live, 1), 1e-6)

    def _tf_part(self, tf: np.ndarray, rows: np.ndarray) -> np.ndarray:
        k1, b = self.config.k1, self.config.b
        norm = k1 * (1.0 - b + b * self.doc_len.view[rows] / self._avgdl())
        return (tf * (k1 + 1.0) / (tf + norm)).astype(np.float32)

    def add(self, row: int, chunk_rows: np.ndarray, memory: Memory, embeddings: EmbeddingSet) -> None:
        counts = Counter(self.terms_of(memory.content))
        ids = np.fromiter((self._term_id(t) for t in counts), dtype=np.int64, count=len(counts))
        tf = np.fromiter(counts.values(), dtype=np.float32, count=len(counts))
        while self.doc_len.n < row:
            self.doc_len.append(0.0)
        length = float(tf.sum())
        self.doc_len.append(length)
        self._len_sum += length
        if ids.size:
            self.df.view[ids] += 1
        self.index.add(row, ids, tf)
        self.index.grow_rows(row + 1)

    def _term_id(self, term: str) -> int:
        tid = self.vocab.get(term)
        if tid is None:
            tid = len(self.terms)
            self.vocab[term] = tid
            self.terms.append(term)
            self.df.append(0)
        return tid

    def remove(self, rows: np.ndarray, chunk_rows: np.ndarray) -> None:
        # IDF and avgdl follow the live corpus at once; the postings stay (masked) until compaction
        self._len_sum -= float(self.doc_len.view[rows].sum())
        for row in rows.tolist():
            ids = [self.vocab[t] for t in set(self.terms_of(self.catalog.memory(row).content))]
            self.df.view[np.array(ids, dtype=np.int64)] -= 1

    def compact(self, keep_rows: np.ndarray, keep_chunks: np.ndarray) -> None:
        self.doc_len.keep(keep_rows)
        self.index.compact(keep_rows)
        counts = np.diff(self.index.indptr)
        df = np.zeros(len(self.terms), dtype=np.int64)
        df[: counts.size] = counts
        self.df = Column(np.int64)
        self.df.extend(df)
        self._len_sum = float(self.doc_len.view.sum())

    def idf(self, ids: np.ndarray) -> np.ndarray:
        n = max(len(self.catalog), 1)
        df = self.df.view[ids].astype(np.float64)
        return np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)

    def query_terms(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Known query term ids int32 (unique) and their IDF weights float32."""
        return self.term_weights(self.terms_of(text))

    def term_weights(self, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids int32 (unique) and IDF weights float32 of those ``terms`` the index knows."""
        ids = sorted({self.vocab[t] for t in terms if t in self.vocab})
        arr = np.array(ids, dtype=np.int64)
        return arr.astype(np.int32), self.idf(arr)

    def prepare(self, ctx: QueryContext) -> Any | None:
        if not ctx.query.text:
            return None
        ids, w = self.query_terms(ctx.query.text)
        return (ids, w) if ids.size else None

    def all_scores(self, ctx: QueryContext, feats: Any) -> np.ndarray:
        """BM25 of every memory row, float32 (n_rows,); 0 where no query term occurs."""
        ids, w = feats
        out = np.zeros(self.catalog.n_rows, dtype=np.float32)
        if not ctx.sees_all and ctx.readable is not None:
            return self._scores_within(ids, ctx.readable, out)
        scores = self.index.scores(ctx.ops, ids, w)
        out[: scores.size] = scores
        return out

    def _scores_within(self, ids: np.ndarray, readable: np.ndarray, out: np.ndarray) -> np.ndarray:
        """BM25 with N, df and avgdl taken over the caller's readable rows only (NumPy reference).

        The precomputed index values carry the whole corpus's avgdl and the query weights its df;
        here both come from the query terms' postings restricted to ``readable``, so a tenant's
        scores do not move when another tenant writes. Costs one pass over those postings.
        """
        which, rows, tf = self.index.postings(ids)  # index rows are catalog rows: all < readable.size
        keep = readable[rows]
        which, rows, tf = which[keep], rows[keep], tf[keep]
        n = max(int(readable.sum()), 1)
        lengths = self.doc_len.view[: readable.size]
        avgdl = max(float(lengths[readable[: lengths.size]].sum()) / n, 1e-6)
        df = np.bincount(which, minlength=ids.size).astype(np.float64)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        k1, b = self.config.k1, self.config.b
        norm = k1 * (1.0 - b + b * self.doc_len.view[rows] / avgdl)
        part = tf * (k1 + 1.0) / (tf + norm)
        out += np.bincount(rows, weights=idf[which] * part, minlength=out.size)[: out.size].astype(np.float32)
        return out

    def doc_vector(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """Unit-norm BM25-weighted term vector of one memory (term ids int64, weights float32)."""
        terms, tfp = self.index.row_values(row)
        w = tfp * self.idf(terms)
        return terms, (w / max(float(np.linalg.norm(w)), 1e-12)).astype(np.float32)

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        ta, wa = self.doc_vector(a)
        lookup = dict(zip(ta.tolist(), wa.tolist()))
        out = np.zeros(rows.size, dtype=np.float32)
        for i, r in enumerate(rows):
            tb, wb = self.doc_vector(int(r))
            out[i] = sum(lookup.get(t, 0.0) * w for t, w in zip(tb.tolist(), wb.tolist()))
        return np.clip(out, 0.0, 1.0)

    def top_terms(self, groups: np.ndarray, n_groups: int, n_terms: int) -> list[list[str]]:
        """Most distinctive terms per group of memories (class-based TF-IDF).

        groups: int64 (n_rows,) group id per memory row, -1 = none.
        """
        self.index.merge()
        counts = np.diff(self.index.indptr)
        term_of = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
        g = groups[self.index.indices]
        sel = g >= 0
        n_t = max(len(self.terms), 1)
        tf = np.bincount(g[sel] * n_t + term_of[sel], weights=self.index.raw[sel], minlength=n_groups * n_t)
        tf = tf.reshape(n_groups, n_t)
        total = tf.sum(axis=0)
        avg_words = max(float(tf.sum()) / max(n_groups, 1), 1.0)
        ctfidf = tf * np.log1p(avg_words / np.maximum(total, 1.0))
        keep = np.array([t not in STOPWORDS and not t.isdigit() and len(t) > 2 for t in self.terms] + [False] * (n_t - len(self.terms)))
        ctfidf[:, ~keep] = 0.0
        labels = []
        for gi in range(n_groups):
            best = np.argsort(-ctfidf[gi], kind="stable")[:n_terms]
            labels.append([self.terms[t] for t in best if ctfidf[gi, t] > 0])
        return labels


__all__ = ["LexicalSettings", "LexicalSpace"]
