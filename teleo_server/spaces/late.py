"""E12 late interaction: per-token vectors compared by MaxSim (optionally projected to fewer dims)."""

from __future__ import annotations

import threading
from typing import Any, Literal

import numpy as np
from pydantic import Field

from teleo_server.domain import EmbeddingSet, Memory
from teleo_server.index.base import TokenQuery, VectorIndex
from teleo_server.index.catalog import Catalog
from teleo_server.heads import MAX_POOL, MAX_POOL_KEEP, TokenCodes, get_head
from teleo_server.index.tokens import TokenCodec, TokenStore
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.spaces.base import IndexName, NamedBackend, QueryContext, Space, SpaceSettings
from teleo_server.spaces.registry import register


TokensIndexName = IndexName("tokens")  # the ``index`` setting

class LateSettings(SpaceSettings):
    # seeded orthogonal rotation of the tokens to this width (None: the model's width)
    dim: int | None = Field(128, ge=8)
    # bits per stored coordinate: 1, 2, 4 or 8 (Gaussian codes), 16 (float16, no codes)
    bits: Literal[1, 2, 4, 8, 16] = 2
    # a text's tokens pooled into max(ceil(T / pool), min(T, pool_keep)) means of similar tokens
    # before the codes (pool 1: none); chosen on SciFact train and LoCoMo dev (README, "Compact storage")
    pool: int = Field(3, ge=1, le=MAX_POOL)
    pool_keep: int = Field(64, ge=0, le=MAX_POOL_KEEP)
    # the registered tokens backend (index/base.py) that scores this space, by name: "" is the
    # built-in store above; "tokens.resident" keeps the same codes in device memory and scores them
    # with the MaxSim code kernel. The built-in store is kept beside a named one (similarity,
    # snapshots, and the rows a named one is made again from), and the named one is given the
    # store's codes as they are, so the two score alike
    index: TokensIndexName = ""


@register
class LateInteractionSpace(NamedBackend, Space):
    """Scores are MaxSim divided by the query's token count (mean best-token cosine, about [0, 1]).

    Not a recall space: MaxSim over a whole corpus is too slow for the hot path, so it reranks.
    """

    index_kind = "tokens"  # the kind of backend that serves it (the ``index`` setting)

    name = "E12_late"
    needs_embedding = True
    description = "late interaction (MaxSim over per-token vectors)"
    head = "tokens"
    Settings = LateSettings

    def __init__(self, settings: PipelineSettings, catalog: Catalog) -> None:
        super().__init__(settings, catalog)
        self.store = TokenStore(self.config.dim, bits=self.config.bits, pool=self.config.pool,
                                keep=self.config.pool_keep)
        self.backend: VectorIndex | None = None  # a named backend, made on first use
        self._sync = threading.Lock()  # a named backend is (re)made while no write adds to either

    def storage_codec(self) -> TokenCodec:
        """The codec of this space's tokens, which the database stores them in too (as codes), so
        a start-up appends them without decoding; see ``index.tokens.to_codes``."""
        return self.store.codec_for(get_head(self.head).dim)

    def add(self, row: int, chunk_rows: np.ndarray, memory: Memory, embeddings: EmbeddingSet) -> None:
        with self._sync:
            for chunk_row, v in self.chunk_vectors(chunk_rows, embeddings):
                self.store.add(chunk_row, v)
            self._extend_named(self.store.n, lambda n: self._stored(n, self.store.n))

    def _stored(self, lo: int, hi: int) -> list[Any]:
        """Chunk rows [lo, hi) as the built-in store keeps them: each row's codes (``TokenCodes``
        of its codec), or an empty array before the store holds any token."""
        store = self.store
        if store.codec is None:
            return [np.zeros((0, get_head(self.head).dim or 1), np.float32)] * (hi - lo)
        spec, offsets, codes = store.codec.spec, store.offsets, store.codes
        return [TokenCodes(codes[offsets[r]:offsets[r + 1]], spec) for r in range(lo, hi)]

    def _resync(self) -> VectorIndex:
        """A named backend made again from every chunk row of the built-in store, as its codes:
        after a compaction, a write the named one failed, or a snapshot read (which holds no device
        memory). Called with ``_sync`` held."""
        named = self._make_named(dim=get_head(self.head).dim, codec=self.storage_codec().spec)
        if self.store.n:
            named.add(self._stored(0, self.store.n))
        self.backend = named
        return named

    def compact(self, keep_rows: np.ndarray, keep_chunks: np.ndarray) -> None:
        with self._sync:
            self.store.compact(keep_chunks)
            self.backend = None

    @property
    def parallel_rerank(self) -> bool:
        """Whether scoring two halves of a rerank window side by side can pay: on the host, where
        MaxSim's products release the interpreter lock; not through a named backend (one kernel
        launch on a device scores the whole window)."""
        return not self.named

    def settle(self) -> None:
        self.store.fit()

    def prepare(self, ctx: QueryContext) -> Any | None:
        v = self.query_vector(ctx)
        if v is None or v.size == 0 or self.store.n_tokens == 0:
            return None
        # a named backend is given the model's tokens and rotates them as its codec does
        return np.asarray(v, np.float32) if self.named else self.store.transform(v)

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
        named = self._serving(self._resync) if self.named else None

        def chunk_scores(chunks: np.ndarray) -> np.ndarray:
            inside = chunks < store.n
            out = np.zeros(chunks.size, dtype=np.float32)
            if not inside.any():
                return out
            if named is None:
                out[inside] = store.maxsim(ops, feats, chunks[inside]) / n_q
            else:  # NaN for a chunk without tokens: it scores 0, as in the built-in store
                out[inside] = np.nan_to_num(named.score(chunks[inside], TokenQuery(feats)), nan=0.0)
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
