"""E6 lexical: Okapi BM25 over the analyser's terms (k1, b configurable)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from teleo_server.domain import EmbeddingSet, Memory
from teleo_server.heads import SparseVector
from teleo_server.index.base import SparseQuery, VectorIndex, every_score, reached
from teleo_server.index.bm25 import Bm25Field
from teleo_server.index.catalog import Catalog, Column
from teleo_server.index.terms import TermTable
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.spaces.base import IndexName, NamedBackend, QueryContext, SpaceSettings, SparseScoredSpace
from teleo_server.spaces.registry import register
from teleo_server.spaces.text import STOPWORDS


Bm25IndexName = IndexName("bm25")  # the ``index`` setting

class LexicalSettings(SpaceSettings):
    k1: float = Field(0.9, gt=0)             # BM25 term-frequency saturation
    b: float = Field(0.4, ge=0, le=1)        # BM25 length normalisation
    merge_fraction: float = Field(0.1, gt=0)  # delta merged into the CSC past this share of entries
    values: Literal["float32", "float16"] = "float16"  # how the postings keep the scored BM25 values
    # the registered bm25 backend (index/base.py) that scores this space for a caller who may read
    # every memory, by name: "" is the built-in field above; "bm25.resident" keeps the raw term
    # frequencies and lengths in device memory and weighs them in the SpMV kernel with the average
    # length of the moment (exact BM25, where the built-in field keeps float16 values weighed with
    # an average up to 0.5% old). The built-in field stays beside it: the statistics (IDF), the
    # scores of a caller who may read only some memories (N, df and avgdl over those), keywords
    # and similarity read it, and a named one is made again from its postings
    index: Bm25IndexName = ""


@register
class LexicalSpace(NamedBackend, SparseScoredSpace):
    """Doc-side values are BM25's term-frequency part; the query side carries the IDF."""

    index_kind = "bm25"  # the kind of backend that serves it (the ``index`` setting)

    name = "E6_lexical"
    recall = True
    description = "BM25 over analysed terms (every language; CJK as character bigrams)"
    Settings = LexicalSettings

    def __init__(self, settings: PipelineSettings, catalog: Catalog) -> None:
        super().__init__(settings, catalog)
        cfg = self.config
        analyzer = settings.analyzer.build()
        self.terms_of, self.query_terms_of, self.surfaces_of = analyzer.terms, analyzer.query_terms, analyzer.surfaces
        self.field = Bm25Field(catalog, self._row_terms, k1=cfg.k1, b=cfg.b, merge_fraction=cfg.merge_fraction,
                               weighed_values=cfg.values)
        self.index = self.field.index
        self.backend: VectorIndex | None = None  # a named backend, made on first use
        self._sync = threading.Lock()  # a named backend is (re)made while no write adds to either

    # the field's statistics, read by goal labels, the keyword stage and the tests
    @property
    def vocab(self) -> TermTable:
        return self.field.vocab

    @property
    def terms(self) -> Sequence[str]:
        return self.field.terms

    @property
    def df(self) -> Column:
        return self.field.df

    @property
    def doc_len(self) -> Column:
        return self.field.doc_len

    def settle(self) -> None:
        self.field.settle()

    def _row_terms(self, row: int) -> Counter[str]:
        return Counter(self.terms_of(self.catalog.content(row)))

    def add(self, row: int, chunk_rows: np.ndarray, memory: Memory, embeddings: EmbeddingSet) -> None:
        counts = Counter(self.terms_of(memory.content))
        with self._sync:
            ids = self.field.add(row, counts)

            def rows(n: int) -> list[SparseVector]:
                """Rows the field skipped (none of its terms) as empty ones, then this one, with the
                frequencies as the field's postings keep them (float16), as a remake reads them."""
                tf = np.fromiter(counts.values(), dtype=np.float32, count=len(counts)).astype(np.float16)
                return [SparseVector.of(np.zeros(0), np.zeros(0))] * (row - n) + [SparseVector.of(ids, tf)]

            self._extend_named(row + 1, rows)

    def _resync(self) -> VectorIndex:
        """A named backend made again from every row the field holds, read off the field's
        postings (their raw term frequencies, in one pass), removed rows empty and removed: after
        a compaction, a write the named one failed, or a snapshot read (which holds no device
        memory). Called with ``_sync`` held."""
        cfg = self.config
        named = self._make_named(k1=cfg.k1, b=cfg.b)
        n = self.field.doc_len.n
        if n:
            terms, rows, tf = self.field.index.postings(np.arange(len(self.field.vocab), dtype=np.int64))
            order = np.lexsort((terms, rows))
            terms, rows, tf = terms[order], rows[order], tf[order]
            cut = np.searchsorted(rows, np.arange(n + 1))
            alive = self.catalog.alive[:n]
            empty = SparseVector.of(np.zeros(0), np.zeros(0))
            named.add([SparseVector.of(terms[cut[r]:cut[r + 1]], tf[cut[r]:cut[r + 1]]) if alive[r] else empty
                       for r in range(n)])
            if not alive.all():
                named.remove(np.flatnonzero(~alive))
        self.backend = named
        return named

    def remove(self, rows: np.ndarray, chunk_rows: np.ndarray) -> None:
        # IDF and avgdl follow the live corpus at once; the postings stay (masked) until compaction
        with self._sync:
            for row in rows.tolist():
                self.field.remove(row, set(self.terms_of(self.catalog.content(row))))
            named = self.backend if self.named else None
            if named is not None:
                named.remove(rows[rows < named.n])

    def compact(self, keep_rows: np.ndarray, keep_chunks: np.ndarray) -> None:
        with self._sync:
            self.field.compact(keep_rows)
            self.backend = None

    def _named(self, ctx: QueryContext) -> VectorIndex | None:
        """The named backend when there is one and the caller may read every memory (its statistics
        are the whole corpus's); None: the built-in field scores."""
        if not self.named or not ctx.sees_all:
            return None
        return self._serving(self._resync)

    def idf(self, ids: np.ndarray) -> np.ndarray:
        return self.field.idf(ids)

    def query_terms(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Known query term ids int32 (unique) and their IDF weights float32 (a query whose
        language cannot be told asks for its words' stems in every language: ``Analyzer.query_terms``)."""
        return self.term_weights(self.query_terms_of(text))

    def term_weights(self, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids int32 (unique) and IDF weights float32 of those ``terms`` the index knows."""
        return self.field.term_weights(terms)

    def prepare(self, ctx: QueryContext) -> Any | None:
        if not ctx.query.text:
            return None
        ids, w = self.query_terms(ctx.query.text)
        return (ids, w) if ids.size else None

    def all_scores(self, ctx: QueryContext, feats: Any) -> np.ndarray:
        """BM25 of every memory row, float32 (n_rows,); 0 where no query term occurs."""
        ids, w = feats
        named = self._named(ctx)
        if named is not None:
            s = every_score(named, SparseQuery(ids, w))
            out = np.zeros(self.catalog.n_rows, dtype=np.float32)
            out[: min(s.size, out.size)] = s[: out.size]
            return out
        readable = None if ctx.sees_all else ctx.readable
        return self.field.scores(ctx.ops, ids, w, self.catalog.n_rows, readable)

    def device_scores(self, ctx: QueryContext, feats: Any) -> tuple[str, Any] | None:
        named = self._named(ctx)  # a caller who may read every memory, on a named backend
        own = getattr(named, "device_scores", None)
        if own is None:
            return None
        from teleo_server.gpu.recall import fit

        ids, w = feats
        return named.runtime, fit(named.runtime, own(SparseQuery(ids, w)), self.catalog.n_rows)

    def reach(self, ctx: QueryContext, feats: Any) -> int:
        return self.field.index.postings_count(feats[0])

    def reached_scores(self, ctx: QueryContext, feats: Any) -> tuple[np.ndarray, np.ndarray]:
        ids, w = feats
        named = self._named(ctx)
        if named is not None:
            return reached(named, SparseQuery(ids, w))
        return self.field.reached(ids, w, None if ctx.sees_all else ctx.readable)

    def doc_vector(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """Unit-norm BM25-weighted term vector of one memory (term ids int64, weights float32)."""
        return self.field.doc_vector(row)

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        return self.field.cosine(a, rows)

    def top_terms(self, groups: np.ndarray, n_groups: int, n_terms: int) -> list[list[str]]:
        """Most distinctive terms per group of memories (class-based TF-IDF), each as a word the
        group's memories write it (a stemmed term is shown as written: "studies", not "studi").

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
        surfaces: dict[int, dict[str, str]] = {}  # each memory's text is analysed once for all labels
        for gi in range(n_groups):
            best = np.argsort(-ctfidf[gi], kind="stable")[:n_terms]
            labels.append([self._word(int(t), gi, groups, surfaces) for t in best if ctfidf[gi, t] > 0])
        return labels

    def _word(self, term: int, group: int, groups: np.ndarray, surfaces: dict[int, dict[str, str]],
              sample: int = 3) -> str:
        """A term as written: its most common form in up to ``sample`` of the group's memories that
        hold it (the term itself when the analyser does not change words); ``surfaces`` keeps each
        memory's analysed words for the next term."""
        rows = self.index.indices[self.index.indptr[term]: self.index.indptr[term + 1]]
        forms: Counter[str | None] = Counter()
        for r in rows[groups[rows] == group][:sample].tolist():
            if r not in surfaces:
                surfaces[r] = self.surfaces_of(self.catalog.content(r))
            forms[surfaces[r].get(self.terms[term])] += 1
        forms.pop(None, None)
        return forms.most_common(1)[0][0] if forms else self.terms[term]


__all__ = ["LexicalSettings", "LexicalSpace"]
