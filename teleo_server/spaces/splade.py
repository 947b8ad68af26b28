"""E13 learned sparse: SPLADE term weights from the EmbeddingSet, scored as SpMV."""

from __future__ import annotations

import threading
from typing import Any, Literal

import numpy as np
from pydantic import Field

from teleo_server.compute.sets import distinct_inverse, group_max
from teleo_server.domain import EmbeddingSet, Memory
from teleo_server.heads import SparseCodes, SparseVector, get_head
from teleo_server.index.catalog import Catalog
from teleo_server.index.chunks import expand, fold_rows
from teleo_server.index.backends import SparseBackend
from teleo_server.index.base import SparseQuery, VectorIndex, every_score, reach, reached
from teleo_server.index.sparse import SparseIndex
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.spaces.base import IndexName, NamedBackend, QueryContext, SpaceSettings, SparseScoredSpace
from teleo_server.spaces.registry import register


SparseIndexName = IndexName("sparse")  # the ``index`` setting

class SpladeSettings(SpaceSettings):
    merge_fraction: float = Field(0.1, gt=0)  # delta merged into the CSC past this share of entries
    # a memory's terms weighing less than this are left out of the index (static pruning: the
    # stored vector keeps them; the query side is never pruned). 0.3 leaves out 31% of SciFact's
    # entries (1.1% of their squared weight) within 0.005 of the unpruned index on SciFact train
    # and LoCoMo dev, alone and in every profile (bench/results/splade_pruning.json)
    min_doc_weight: float = Field(0.3, ge=0)
    # how the postings and the row-major copy keep the weights: int8 codes with a step per chunk
    # (the default; a byte each), float16 or float32
    values: Literal["float32", "float16", "int8"] = "int8"
    # the registered sparse backend (index/base.py) that scores this space, by name: "" is the
    # built-in index above; "sparse.resident" keeps the postings in device memory and scores them
    # with the SpMV kernel. The built-in index is kept beside a named one (similarity, snapshots,
    # and the rows a named one is made again from); a named one is given the weights as the
    # built-in index keeps them (int8 codes decoded, by default), so the two score alike
    index: SparseIndexName = ""


@register
class SpladeSpace(NamedBackend, SparseScoredSpace):
    """Chunk-level inverted index over the model's vocabulary; a memory scores as its best chunk."""

    index_kind = "sparse"  # the kind of backend that serves it (the ``index`` setting)

    name = "E13_splade"
    recall = True
    needs_embedding = True
    description = "learned sparse (SPLADE) dot product"
    head = "splade"
    Settings = SpladeSettings

    def __init__(self, settings: PipelineSettings, catalog: Catalog) -> None:
        super().__init__(settings, catalog)
        # no row-major copy: a memory's terms are read back from the postings (similarity)
        self.index = SparseIndex(merge_fraction=self.config.merge_fraction, values=self.config.values,
                                 row_major=False, term_bound=get_head(self.head).dim or 2**31)
        self.backend: VectorIndex | None = None  # scoring goes through the index interface
        self._sync = threading.Lock()  # a named backend is (re)made while no write adds to either
        # the catalog's chunk -> memory map on the device, for sparse recall there (device_scores);
        # dropped at compaction, which renumbers the chunks, and not pickled
        self._chunk_rows: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_chunk_rows"] = None
        return state

    def add(self, row: int, chunk_rows: np.ndarray, memory: Memory, embeddings: EmbeddingSet) -> None:
        floor = self.config.min_doc_weight
        added: dict[int, SparseVector | SparseCodes] = {}
        with self._sync:
            for chunk_row, v in self.chunk_vectors(chunk_rows, embeddings):
                ids, weights = np.asarray(v.ids, dtype=np.int64), np.asarray(v.weights, dtype=np.float32)
                if floor > 0:
                    keep = weights >= floor
                    ids, weights = ids[keep], weights[keep]
                self.index.add(chunk_row, ids, weights)
                if self.named:  # as the built-in index keeps them (its int8 codes and step, by default)
                    added[chunk_row] = self.index.stored(ids, weights)
            if chunk_rows.size:
                self.index.grow_rows(int(chunk_rows[-1]) + 1)
            empty = SparseVector.of(np.zeros(0), np.zeros(0))  # a chunk without SPLADE terms
            self._extend_named(self.index.n_rows,
                               lambda n: [added.get(r, empty) for r in range(n, self.index.n_rows)])

    def _named(self) -> VectorIndex:
        """A new, empty instance of the backend ``index`` names."""
        return self._make_named(vocab=get_head(self.head).dim or 2**31)

    def _resync(self) -> VectorIndex:
        """A named backend made again from every row of the built-in index, as it keeps them (its
        int8 codes and steps, by default: ``SparseIndex.stored_rows``): after a compaction, a write
        the named one failed, or a snapshot read (which holds no device memory). Called with
        ``_sync`` held."""
        named = self._named()
        n = self.index.n_rows
        if n:
            named.add(self.index.stored_rows(n))
        self.backend = named
        return named

    def compact(self, keep_rows: np.ndarray, keep_chunks: np.ndarray) -> None:
        with self._sync:
            self.index.compact(keep_chunks)
            self.backend = None
            self._chunk_rows = None

    def prepare(self, ctx: QueryContext) -> Any | None:
        v = self.query_vector(ctx)
        if v is None or v.size == 0:
            return None
        return np.asarray(v.ids, dtype=np.int32), np.asarray(v.weights, dtype=np.float32)

    def _backend(self, ctx: QueryContext) -> VectorIndex:
        """The index interface the scores go through (made on first use, with the query's ops):
        the built-in index, or the backend ``index`` names, given the built-in index's rows."""
        return self._serving(lambda: self._resync() if self.named else SparseBackend(self.ops or ctx.ops, index=self.index))

    def all_scores(self, ctx: QueryContext, feats: Any) -> np.ndarray:
        """Best-chunk SPLADE score of every memory row, float32 (n_rows,)."""
        ids, w = feats
        s = every_score(self._backend(ctx), SparseQuery(ids, w))
        n_chunks = self.catalog.n_chunks
        chunk_scores = s[:n_chunks] if s.size >= n_chunks else np.concatenate([s, np.zeros(n_chunks - s.size, np.float32)])
        out = fold_rows(chunk_scores, self.catalog.chunk_mem, self.catalog.n_rows, self.catalog.one_chunk_each)
        return np.maximum(out, 0.0)

    def device_scores(self, ctx: QueryContext, feats: Any) -> tuple[str, Any] | None:
        """Each memory's best chunk score, folded on the device from its backend's chunk scores."""
        backend = self._backend(ctx)
        own = getattr(backend, "device_scores", None)
        if own is None:
            return None
        from teleo_server.gpu.recall import DeviceColumn, fold_chunks

        ids, w = feats
        cat = self.catalog
        rows = None
        if not (cat.one_chunk_each and cat.n_chunks == cat.n_rows):  # sent once, then what writes add
            if getattr(self, "_chunk_rows", None) is None or self._chunk_rows.runtime != backend.runtime:
                self._chunk_rows = DeviceColumn(backend.runtime)
            rows = self._chunk_rows.view(cat.chunk_mem[: cat.n_chunks])
        return backend.runtime, fold_chunks(backend.runtime, own(SparseQuery(ids, w)), rows, cat.n_chunks, cat.n_rows)

    def reach(self, ctx: QueryContext, feats: Any) -> int:
        ids, w = feats
        return reach(self._backend(ctx), SparseQuery(ids, w))

    def reached_scores(self, ctx: QueryContext, feats: Any) -> tuple[np.ndarray, np.ndarray]:
        """The memories whose chunks the query reaches, each by its best chunk."""
        ids, w = feats
        chunks, s = reached(self._backend(ctx), SparseQuery(ids, w))
        chunks = chunks[chunks < self.catalog.n_chunks]
        return group_max(self.catalog.chunk_mem[chunks].astype(np.int64), s[: chunks.size])

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        """Cosine of the memories' SPLADE vectors (each term at its best chunk's weight), in one
        pass over the index's postings: the index keeps no row-major copy (0.9 KB a SciFact
        memory), and comparisons are rare."""
        rows = np.asarray(rows, dtype=np.int64).ravel()
        out = np.zeros(rows.size, dtype=np.float32)
        if not rows.size:
            return out
        members, at = distinct_inverse(np.append(rows, a))  # at[-1]: where memory a sits
        chunks, counts = expand(self.catalog.chunk_start, self.catalog.chunk_count, members)
        owner = np.repeat(np.arange(members.size), counts)
        which, terms, values = self.index.rows_entries(chunks)
        if not terms.size:
            return out
        # each memory's vector: the best chunk's weight of every term
        span = int(terms.max()) + 1
        keys, best = group_max(owner[which] * span + terms, values.astype(np.float64))
        member, term = keys // span, keys % span
        norms = np.sqrt(np.bincount(member, best * best, minlength=members.size))
        mine = member == at[-1]
        a_terms, a_values = term[mine], best[mine]  # ascending terms
        if not a_terms.size:
            return out
        pos = np.minimum(np.searchsorted(a_terms, term), a_terms.size - 1)
        shared = a_terms[pos] == term
        dots = np.bincount(member[shared], best[shared] * a_values[pos[shared]], minlength=members.size)
        denom = norms * norms[at[-1]]
        cos = np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)
        return np.clip(cos[at[:-1]], 0.0, 1.0).astype(np.float32)


__all__ = ["SpladeSettings", "SpladeSpace"]
