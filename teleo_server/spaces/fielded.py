"""Spaces that are one BM25 field over spans of a memory's text (:class:`FieldSpace`): a subclass
says which terms a memory holds (``document_terms``) and which a query asks for (``query_terms``);
indexing, tenant-scoped statistics, search and similarity follow."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import structlog
from pydantic import Field

from teleo_server.analysis import ENGLISH_STOPWORDS
from teleo_server.domain import EmbeddingSet, Memory
from teleo_server.index.bm25 import Bm25Field
from teleo_server.index.catalog import Catalog
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.spaces.base import QueryContext, SpaceSettings, SparseScoredSpace

log = structlog.get_logger(__name__)


class FieldSettings(SpaceSettings):
    k1: float = Field(1.2, gt=0)              # BM25 term-frequency saturation
    b: float = Field(0.5, ge=0, le=1)         # BM25 length normalisation
    merge_fraction: float = Field(0.1, gt=0)  # delta merged into the CSC past this share of entries
    values: Literal["float32", "float16"] = "float16"  # how the postings keep the scored BM25 values


class FieldSpace(SparseScoredSpace):
    """One sparse BM25 field (statistics over the memories that have the field at all)."""

    recall = True
    Settings = FieldSettings

    def __init__(self, settings: PipelineSettings, catalog: Catalog) -> None:
        super().__init__(settings, catalog)
        cfg = self.config
        self.field = Bm25Field(catalog, self._row_terms, k1=cfg.k1, b=cfg.b,
                               merge_fraction=cfg.merge_fraction, sparse=True, values="float32",
                               weighed_values=cfg.values)
        self.index = self.field.index
        self.terms_of = settings.analyzer.build().terms

    def settle(self) -> None:
        self.field.settle()

    # ---- what a subclass says ---------------------------------------------------------------------
    def document_terms(self, memory: Memory) -> Mapping[str, float]:
        """The field's terms of a memory with their frequencies (empty: the memory has no field)."""
        raise NotImplementedError

    def query_terms(self, ctx: QueryContext) -> Mapping[str, float] | None:
        """The field's terms a query asks for, with query-side weights; None: the space has nothing
        to say about this query."""
        raise NotImplementedError

    # ---- index -----------------------------------------------------------------------------------
    def terms(self, memory: Memory) -> Mapping[str, float]:
        """``document_terms``, or none when reading the text fails (the memory is then indexed in
        every other space and has no field here, the same on add and on remove)."""
        try:
            return self.document_terms(memory)
        except Exception as exc:  # noqa: BLE001 - a text this space cannot read must not fail the write
            log.warning("space.unreadable_text", space=self.name, memory=memory.id, error=repr(exc)[:200])
            return {}

    def _row_terms(self, row: int) -> Mapping[str, float]:
        return self.terms(self.catalog.memory(row))

    def add(self, row: int, chunk_rows: np.ndarray, memory: Memory, embeddings: EmbeddingSet) -> None:
        self.field.add(row, self.terms(memory))

    def remove(self, rows: np.ndarray, chunk_rows: np.ndarray) -> None:
        for row in rows.tolist():
            self.field.remove(row, set(self.terms(self.catalog.memory(row))))

    def compact(self, keep_rows: np.ndarray, keep_chunks: np.ndarray) -> None:
        self.field.compact(keep_rows)

    def has_field(self, rows: np.ndarray) -> np.ndarray:
        """bool (len(rows),): which memories hold this field at all."""
        lengths = self.field.doc_len.view
        out = np.zeros(rows.size, dtype=bool)
        inside = rows < lengths.size
        out[inside] = lengths[rows[inside]] > 0
        return out

    def content_words(self, text: str) -> list[str]:
        """The analysed terms of a span of text, English stop words left out."""
        return [t for t in self.terms_of(text) if t not in ENGLISH_STOPWORDS]

    # ---- reads -----------------------------------------------------------------------------------
    def prepare(self, ctx: QueryContext) -> Any | None:
        if not ctx.query.text:
            return None
        return self.features(self.query_terms(ctx))

    def features(self, asked: Mapping[str, float] | None) -> tuple[np.ndarray, np.ndarray] | None:
        """Term ids int32 and query weights float32 (IDF x the asked weight) of the asked terms the
        field knows; None when it knows none."""
        if not asked:
            return None
        terms = [t for t, w in asked.items() if w > 0]
        return self.id_features({tid: float(asked[t]) for t, tid in zip(terms, self.field.vocab.ids_of(terms))
                                 if tid is not None})

    def id_features(self, known: Mapping[int, float]) -> tuple[np.ndarray, np.ndarray] | None:
        """``features`` of terms already given by id (each with a positive weight)."""
        if not known:
            return None
        ids = np.array(sorted(known), dtype=np.int64)
        w = self.field.idf(ids) * np.array([known[i] for i in ids.tolist()], dtype=np.float32)
        return ids.astype(np.int32), w.astype(np.float32)

    def all_scores(self, ctx: QueryContext, feats: Any) -> np.ndarray:
        ids, w = feats
        readable = None if ctx.sees_all else ctx.readable
        return self.field.scores(ctx.ops, ids, w, self.catalog.n_rows, readable)

    def reached_scores(self, ctx: QueryContext, feats: Any) -> tuple[np.ndarray, np.ndarray]:
        ids, w = feats
        return self.field.reached(ids, w, None if ctx.sees_all else ctx.readable)

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        if not self.has_field(np.array([a]))[0]:
            return np.full(rows.size, np.nan, dtype=np.float32)
        out = self.field.cosine(a, rows)
        return np.where(self.has_field(rows), out, np.nan).astype(np.float32)


__all__ = ["FieldSettings", "FieldSpace"]
