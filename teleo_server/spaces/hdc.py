"""E9 hyperdimensional: character n-grams hashed into a 2^bits-dimensional bipolar vector.

Each n-gram of each word (with boundary marks, "#typo#") maps to one signed coordinate of a very
high-dimensional space; a text is the bundle (sum) of its n-grams, L2-normalised. Two spellings
of a word share most of their n-grams, so a typo still lands near the right memory. Vectors are
stored sparsely (only touched coordinates), which is the same vector as a dense hypervector.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from typing import Any, Literal

import numpy as np
from pydantic import Field

from teleo_server.domain import EmbeddingSet, Memory
from teleo_server.index.catalog import Catalog
from teleo_server.index.sparse import SparseIndex, rows_sized
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.spaces.base import QueryContext, SpaceSettings, SparseScoredSpace
from teleo_server.spaces.registry import register


class HdcSettings(SpaceSettings):
    dim_bits: int = Field(18, ge=8, le=24)       # the hypervector has 2^dim_bits coordinates
    ngram: int = Field(3, ge=2, le=5)
    query_grams: int = Field(48, ge=1)           # rarest query n-grams scored (bounds posting work)
    max_df: int = Field(5000, ge=1)              # n-grams in more documents than this (and than
    max_df_fraction: float = Field(0.05, gt=0, le=1)  # this share of them) are not scored
    # postings a query reads at most, rarest n-grams first: query_grams n-grams of max_df documents
    # each, so a corpus past max_df / max_df_fraction memories costs no more than one that size
    max_postings: int = Field(240_000, ge=1)
    merge_fraction: float = Field(0.1, gt=0)
    # how the postings keep their values: int8 codes with a step per memory (the default; a byte
    # a posting), float16 or float32
    values: Literal["float32", "float16", "int8"] = "int8"


# n-grams whose coordinate is remembered rather than hashed again: the first ones met, which are the
# common ones. 4,096 keep 98% of an unbounded cache's speed on SciFact (0.70 ms an abstract against
# 0.69; 0.93 with none) in 0.8 MB, where remembering every n-gram grew with the corpus (2.3 MB at
# 5,183 abstracts)
CACHED_GRAMS = 4096


@register
class HyperdimensionalSpace(SparseScoredSpace):
    name = "E9_hdc"
    recall = True
    description = "hashed character n-gram hypervectors (typo-robust)"
    Settings = HdcSettings

    def __init__(self, settings: PipelineSettings, catalog: Catalog) -> None:
        super().__init__(settings, catalog)
        self.dim = 1 << self.config.dim_bits
        self.n = self.config.ngram
        self._cache: dict[str, tuple[int, float]] = {}
        self.df = np.zeros(self.dim, dtype=np.int32)
        # similarity re-encodes the text, so no row-major copy; values are normalised counts
        self.index = SparseIndex(merge_fraction=self.config.merge_fraction, values=self.config.values, row_major=False)
        self.terms_of = settings.analyzer.build().terms

    def _coord(self, gram: str) -> tuple[int, float]:
        hit = self._cache.get(gram)
        if hit is None:
            h = zlib.crc32(gram.encode("utf-8"))
            hit = (h & (self.dim - 1), 1.0 if (h >> 31) & 1 else -1.0)
            if len(self._cache) < CACHED_GRAMS:
                self._cache[gram] = hit
        return hit

    def encode(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Coordinates int64 (S,) and signed L2-normalised values float32 (S,) of a text."""
        grams: Counter[str] = Counter()
        for word in self.terms_of(text):
            w = f"#{word}#"
            grams.update(w[i : i + self.n] for i in range(max(len(w) - self.n + 1, 1)))
        acc: dict[int, float] = {}
        coord = self._coord
        for gram, count in grams.items():
            c, sign = coord(gram)
            acc[c] = acc.get(c, 0.0) + sign * (1.0 + math.log(count))
        ids = np.fromiter(acc.keys(), dtype=np.int64, count=len(acc))
        vals = np.fromiter(acc.values(), dtype=np.float32, count=len(acc))
        norm = float(np.linalg.norm(vals))
        return ids, (vals / norm if norm > 0 else vals).astype(np.float32)

    def add(self, row: int, chunk_rows: np.ndarray, memory: Memory, embeddings: EmbeddingSet) -> None:
        ids, vals = self.encode(memory.content)
        self.df[ids] += 1
        self.index.add(row, ids, vals)
        self.index.grow_rows(row + 1)

    def remove(self, rows: np.ndarray, chunk_rows: np.ndarray) -> None:
        # document frequencies pick the query's rare n-grams; they follow the live corpus at once
        for row in rows.tolist():
            self.df[self.encode(self.catalog.content(row))[0]] -= 1

    def compact(self, keep_rows: np.ndarray, keep_chunks: np.ndarray) -> None:
        self.index.compact(keep_rows)

    def prepare(self, ctx: QueryContext) -> Any | None:
        if not ctx.query.text:
            return None
        ids, vals = self.encode(ctx.query.text)
        if ids.size == 0:
            return None
        # Rare n-grams discriminate; common ones cost posting work and add little, so keep the
        # rarest, and drop those in more than hdc_max_df documents (their idf is near zero anyway)
        if ctx.sees_all or ctx.readable is None:
            n_docs, df = max(len(self.catalog), 1), self.df[ids]
        else:  # rarity among what this caller may read: other tenants' text must not pick its n-grams
            which, rows, _ = self.index.postings(ids)  # index rows are catalog rows: all < readable.size
            n_docs, df = max(int(ctx.readable.sum()), 1), np.bincount(which[ctx.readable[rows]], minlength=ids.size)
        idf = np.log1p(n_docs / (1.0 + df))
        order = np.argsort(-idf, kind="stable")
        order = order[df[order] <= max(self.config.max_df_fraction * n_docs, self.config.max_df)]
        keep = order[: self.config.query_grams]
        keep = keep[np.cumsum(df[keep]) <= self.config.max_postings]
        if keep.size == 0:
            return None
        w = vals[keep] * idf[keep]
        return ids[keep].astype(np.int32), (w / max(float(np.linalg.norm(w)), 1e-12)).astype(np.float32)

    def all_scores(self, ctx: QueryContext, feats: Any) -> np.ndarray:
        return rows_sized(self.index.scores(ctx.ops, feats[0], feats[1]), self.catalog.n_rows)

    def reached_scores(self, ctx: QueryContext, feats: Any) -> tuple[np.ndarray, np.ndarray]:
        rows, s = self.index.reached(feats[0], feats[1])
        keep = (s > 0) & (rows < self.catalog.n_rows)
        return rows[keep], s[keep]

    def unit_score(self, scores: np.ndarray) -> np.ndarray:
        """Cosines, clipped into [0, 1]."""
        return np.clip(np.nan_to_num(scores.astype(np.float32), nan=0.0), 0.0, 1.0)

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        ma = self.catalog.content(a)
        ia, va = self.encode(ma)
        lookup = dict(zip(ia.tolist(), va.tolist()))
        out = np.zeros(rows.size, dtype=np.float32)
        for i, r in enumerate(rows):
            ib, vb = self.encode(self.catalog.content(int(r)))
            out[i] = sum(lookup.get(t, 0.0) * v for t, v in zip(ib.tolist(), vb.tolist()))
        return np.clip(out, 0.0, 1.0)


__all__ = ["HdcSettings", "HyperdimensionalSpace"]
