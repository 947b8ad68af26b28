"""E12 late interaction: per-token vectors compared by MaxSim (optionally projected to fewer dims)."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from teleo_server.domain import EmbeddingSet, Memory
from teleo_server.index.catalog import Catalog
from teleo_server.heads import MAX_POOL, MAX_POOL_KEEP, get_head
from teleo_server.index.tokens import TokenCodec, TokenStore
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.spaces.base import QueryContext, Space, SpaceSettings
from teleo_server.spaces.registry import register


class LateSettings(SpaceSettings):
    # seeded orthogonal rotation of the tokens to this width (None: the model's width)
    dim: int | None = Field(128, ge=8)
    # bits per stored coordinate: 1, 2, 4 or 8 (Gaussian codes), 16 (float16, no codes)
    bits: Literal[1, 2, 4, 8, 16] = 2
    # a text's tokens pooled into max(ceil(T / pool), min(T, pool_keep)) means of similar tokens
    # before the codes (pool 1: none); chosen on SciFact train and LoCoMo dev (README, "Compact storage")
    pool: int = Field(3, ge=1, le=MAX_POOL)
    pool_keep: int = Field(64, ge=0, le=MAX_POOL_KEEP)


@register
class LateInteractionSpace(Space):
    """Scores are MaxSim divided by the query's token count (mean best-token cosine, about [0, 1]).

    Not a recall space: MaxSim over a whole corpus is too slow for the hot path, so it reranks.
    """

    name = "E12_late"
    needs_embedding = True
    description = "late interaction (MaxSim over per-token vectors)"
    head = "tokens"
    Settings = LateSettings

    def __init__(self, settings: PipelineSettings, catalog: Catalog) -> None:
        super().__init__(settings, catalog)
        self.store = TokenStore(self.config.dim, bits=self.config.bits, pool=self.config.pool,
                                keep=self.config.pool_keep)

    def storage_codec(self) -> TokenCodec:
        """The codec of this space's tokens, which the database stores them in too (as codes), so
        a start-up appends them without decoding; see ``index.tokens.to_codes``."""
        return self.store.codec_for(get_head(self.head).dim)

    def add(self, row: int, chunk_rows: np.ndarray, memory: Memory, embeddings: EmbeddingSet) -> None:
        for chunk_row, v in self.chunk_vectors(chunk_rows, embeddings):
            self.store.add(chunk_row, v)

    def compact(self, keep_rows: np.ndarray, keep_chunks: np.ndarray) -> None:
        self.store.compact(keep_chunks)

    def settle(self) -> None:
        self.store.fit()

    def prepare(self, ctx: QueryContext) -> Any | None:
        v = self.query_vector(ctx)
        if v is None or v.size == 0 or self.store.n_tokens == 0:
            return None
        return self.store.transform(v)

    def score(self, ctx: QueryContext, feats: Any, rows: np.ndarray) -> np.ndarray:
        return self.score_with_chunks(ctx.ops, feats, rows)[0]

    def _token_bounds(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the token rows of memories ``rows`` start and end in the store (chunks the store
        does not hold yet hold none)."""
        n = self.store.n
        start = np.minimum(self.catalog.chunk_start[rows], n)
        end = np.minimum(start + self.catalog.chunk_count[rows], n)
        return self.store.offsets[start], self.store.offsets[end]

    def token_rows(self, rows: np.ndarray) -> int:
        """How many stored token rows the memories ``rows`` hold: what scoring them reads."""
        lo, hi = self._token_bounds(rows)
        return int((hi - lo).sum())

    def score_with_chunks(self, ops: Any, feats: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Normalised MaxSim float32 (C,) of memory rows (best chunk) and that chunk's index."""
        store = self.store
        n_q = max(feats.shape[0], 1)

        def chunk_scores(chunks: np.ndarray) -> np.ndarray:
            inside = chunks < store.n
            out = np.zeros(chunks.size, dtype=np.float32)
            if inside.any():
                out[inside] = store.maxsim(ops, feats, chunks[inside]) / n_q
            return out

        return self.fold_candidates(rows, chunk_scores)

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        """Symmetric MaxSim: mean of both directions, clipped to [0, 1]."""
        from teleo_server.compute.maxsim import maxsim

        store = self.store
        if store.n_tokens == 0:
            return np.full(rows.size, np.nan, dtype=np.float32)

        def tokens_of(r: int) -> np.ndarray:
            lo, hi = self._token_bounds(np.array([r], dtype=np.int64))
            return store.vectors(int(lo[0]), int(hi[0]))

        ta = tokens_of(a)
        out = np.zeros(rows.size, dtype=np.float32)
        for i, r in enumerate(rows):
            tb = tokens_of(int(r))
            if ta.shape[0] == 0 or tb.shape[0] == 0:
                continue
            ab = maxsim(ta, np.array([0, tb.shape[0]]), tb, np.array([0], dtype=np.int32))[0] / ta.shape[0]
            ba = maxsim(tb, np.array([0, ta.shape[0]]), ta, np.array([0], dtype=np.int32))[0] / tb.shape[0]
            out[i] = (ab + ba) / 2
        return np.clip(out, 0.0, 1.0)


__all__ = ["LateInteractionSpace", "LateSettings"]
