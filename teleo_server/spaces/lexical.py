"""E6 lexical: Okapi BM25 over the analyser's terms (k1, b configurable)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from teleo_server.domain import EmbeddingSet, Memory
from teleo_server.index.bm25 import Bm25Field
from teleo_server.index.catalog import Catalog, Column
from teleo_server.index.terms import TermTable
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.spaces.base import QueryContext, SpaceSettings, SparseScoredSpace
from teleo_server.spaces.registry import register
from teleo_server.spaces.text import STOPWORDS


class LexicalSettings(SpaceSettings):
    k1: float = Field(0.9, gt=0)             # BM25 term-frequency saturation
    b: float = Field(0.4, ge=0, le=1)        # BM25 length normalisation
    merge_fraction: float = Field(0.1, gt=0)  # delta merged into the CSC past this share of entries
    values: Literal["float32", "float16"] = "float16"  # how the postings keep the scored BM25 values


@register
class LexicalSpace(SparseScoredSpace):
    """Doc-side values are BM25's term-frequency part; the query side carries the IDF."""

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
        self.field.add(row, Counter(self.terms_of(memory.content)))

    def remove(self, rows: np.ndarray, chunk_rows: np.ndarray) -> None:
        # IDF and avgdl follow the live corpus at once; the postings stay (masked) until compaction
        for row in rows.tolist():
            self.field.remove(row, set(self.terms_of(self.catalog.content(row))))

    def compact(self, keep_rows: np.ndarray, keep_chunks: np.ndarray) -> None:
        self.field.compact(keep_rows)

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
        readable = None if ctx.sees_all else ctx.readable
        return self.field.scores(ctx.ops, ids, w, self.catalog.n_rows, readable)

    def reach(self, ctx: QueryContext, feats: Any) -> int:
        return self.field.index.postings_count(feats[0])

    def reached_scores(self, ctx: QueryContext, feats: Any) -> tuple[np.ndarray, np.ndarray]:
        ids, w = feats
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
