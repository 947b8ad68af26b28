"""A space over one dense embedding head, the base of every dense space (E1 semantic and the
heads a plugin adds)."""

from __future__ import annotations

import threading
from typing import Any, Literal

import numpy as np
from pydantic import Field

from teleo_server.compute.sets import distinct_first
from teleo_server.domain import EmbeddingSet, Memory
from teleo_server.index.catalog import Catalog
from teleo_server.index.chunks import fold_rows
from teleo_server.compute.backend import ops as compute_ops
from teleo_server.index.backends import DenseBackend
from teleo_server.index.base import Bitmask, DenseQuery, VectorIndex, batches, runs_beside, search_many
from teleo_server.index.dense import DenseIndex
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.spaces.base import IndexName, NamedBackend, QueryContext, Space, SpaceSettings


DenseIndexName = IndexName("dense")  # the ``index`` setting

class DenseHeadSettings(SpaceSettings):
    exact_threshold: int = Field(50_000, ge=1)   # HNSW above this many live chunks searched, exact below
    # HNSW from this many chunks for a search that may return every stored chunk (no filter, a
    # caller who reads everything), on the host backend; a filtered search keeps exact_threshold
    unfiltered_threshold: int = Field(10_000, ge=1)
    hnsw_m: int = Field(16, ge=2)
    hnsw_ef_construction: int = Field(200, ge=8)
    hnsw_ef_search: int = Field(256, ge=8)
    matryoshka_oversample: int = Field(4, ge=1)  # truncated search fetches k * this, rescored at full dim
    # how the full-dimension vectors are held: float32; float16 halves them (scores move by ~1e-3)
    # but the host widens every row it scans (~10x the float32 product's cost); int8 with a scale
    # per row takes a quarter and scans at float32's speed (scores move by ~1e-3), on the host
    # whatever the backend; "auto" is int8 on the host backend and float32 on a device backend
    values: Literal["auto", "float32", "float16", "int8"] = "float32"
    # the registered dense backend (index/base.py) that searches this space, by name: "" is the
    # built-in index above (exact scan, HNSW past the thresholds); "dense.resident" keeps the rows in
    # device memory and scans them with the CUDA kernel, "dense.cagra" searches a cuVS graph. The
    # built-in index is kept beside a named one: the scores of given rows, the memories' vectors
    # (Compare, purposes, the graph space, implied updates) and snapshots read it
    index: DenseIndexName = ""


class DenseHeadSpace(NamedBackend, Space):
    """A space over one dense head: a chunk-level cosine index (exact, HNSW past
    ``exact_threshold``); a memory scores as its best chunk.

    A subclass names the head and the space, and registers itself::

        @register
        class CodeSpace(DenseHeadSpace):
            name, head, description = "E7_code", "code", "code-model vectors"

    ``truncations`` (Matryoshka dims kept beside the full vectors) is () unless a subclass says so.
    """

    index_kind = "dense"  # the kind of backend that serves it (the ``index`` setting)

    recall = True
    needs_embedding = True
    Settings = DenseHeadSettings

    def truncations(self) -> tuple[int, ...]:
        return ()

    def __init__(self, settings: PipelineSettings, catalog: Catalog) -> None:
        super().__init__(settings, catalog)
        self.index: DenseIndex | None = None  # created on the first vector (dimension from the model)
        self.host: DenseBackend | None = None  # the built-in index behind the interface: scores given rows
        self.backend: VectorIndex | None = None  # what searches go through (``host`` unless ``index`` names one)
        # a named backend is (re)made from the built-in rows while no write adds to either
        self._sync = threading.Lock()

    def make_backend(self, dim: int) -> VectorIndex:
        """The index behind this space: the built-in :class:`DenseIndex` (exact below
        ``exact_threshold`` live rows and HNSW above), or the registered backend the ``index``
        setting names, made here with the runtime of the retriever's compute backend when it keeps
        its rows on a device."""
        s = self.config
        ops = self.ops or compute_ops("numpy")
        # on a device the built-in rows are what a device backend is made again from: kept exact
        values = s.values if s.values != "auto" else ("int8" if self.runtime is None else "float32")
        # a device scans every row in microseconds: the graph only past exact_threshold there
        unfiltered = s.unfiltered_threshold if self.runtime is None else s.exact_threshold
        self.index = DenseIndex(dim, self.truncations(), s.exact_threshold, s.hnsw_m,
                                s.hnsw_ef_construction, s.hnsw_ef_search, s.matryoshka_oversample, values, unfiltered)
        self.host = DenseBackend(dim, ops, index=self.index)
        return self._make_named(dim=dim) if self.named else self.host

    def _ensure(self, dim: int) -> VectorIndex:
        return self._serving(lambda: self.make_backend(dim) if self.index is None else self._resync())

    def _resync(self) -> VectorIndex:
        """A named backend made again from the built-in index's rows (dead rows removed), so that
        both number the same rows: after a compaction renumbers them, after a write the named
        backend failed, and after a snapshot is read (a device's memory is not in it). Called with
        ``_sync`` held."""
        assert self.index is not None
        named = self._make_named(dim=self.index.dim)
        if self.index.n:
            named.add(list(self.index.vectors(slice(0, self.index.n))))
            dead = np.flatnonzero(~self.index.alive[: self.index.n])
            if dead.size:
                named.remove(dead)
        self.backend = named
        return named

    def add(self, row: int, chunk_rows: np.ndarray, memory: Memory, embeddings: EmbeddingSet) -> None:
        pairs = list(self.chunk_vectors(chunk_rows, embeddings))
        if not pairs:
            return
        vecs = np.stack([v for _, v in pairs]).astype(np.float32)
        chunk_rows = np.array([r for r, _ in pairs], dtype=np.int64)
        self._ensure(vecs.shape[1])
        assert self.host is not None
        with self._sync:
            backend = self.backend
            got = self.host.add(list(vecs))
            if backend is not None and backend is not self.host:
                try:
                    named = backend.add(list(vecs))
                except BaseException:
                    # it may hold part of the rows: it is made again from the built-in rows on next use
                    self.host.remove(got)
                    self.backend = None
                    raise
                if named[0] != got[0]:
                    self.backend = None
                    raise RuntimeError(f"{self.named} rows out of step with the chunk rows ({named[0]} != {got[0]})")
        if got[0] != chunk_rows[0]:
            raise RuntimeError(f"dense rows out of step with chunk rows ({got[0]} != {chunk_rows[0]})")

    def settle(self) -> None:
        if self.index is not None:
            self.index.fit()

    def remove(self, rows: np.ndarray, chunk_rows: np.ndarray) -> None:
        if self.host is not None and chunk_rows.size:
            with self._sync:
                self.host.remove(chunk_rows)
                if self.backend is not None and self.backend is not self.host:
                    self.backend.remove(chunk_rows)

    def compact(self, keep_rows: np.ndarray, keep_chunks: np.ndarray) -> None:
        if self.index is not None:
            with self._sync:
                self.index.compact(keep_chunks)
                if self.named:
                    self.backend = None  # if the rebuild fails, the next use makes it again
                    self._resync()

    def prepare(self, ctx: QueryContext) -> Any | None:
        v = self.query_vector(ctx)
        if v is None or self.index is None or self.index.n == 0:
            return None
        q = np.asarray(v, dtype=np.float32)
        return q if q.shape[0] == self.index.dim else None

    def search_runs_beside(self, ctx: QueryContext) -> bool:
        """Whether the backend's search under this caller's mask runs outside the interpreter lock
        (``index.base.runs_beside``: HNSW does, an exact scan does not)."""
        return self.index is not None and runs_beside(self._ensure(self.index.dim), Bitmask(ctx.visible_chunks()))

    def search(self, ctx: QueryContext, feats: Any, k: int, dim: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top memory rows by best-chunk cosine; the chunk search over-fetches to cover folding."""
        assert self.index is not None
        backend = self._ensure(self.index.dim)
        chunks, scores = backend.search(DenseQuery(feats, dim), self._chunk_fetch(k), Bitmask(ctx.visible_chunks()))
        return self._memories(chunks, scores, k)

    def _memories(self, chunks: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` memory rows and scores of chunks found best first (a memory's best chunk)."""
        rows = self.catalog.chunk_mem[chunks].astype(np.int64)
        if self._several_chunks():
            # chunks arrive best first, so the first occurrence of each memory is its best chunk
            _, first = distinct_first(rows)
            first.sort()
            rows, scores = rows[first][:k], scores[first][:k]
        return rows, scores

    def searches_together(self) -> bool:
        """Whether :meth:`search_many` reads the index once for several queries (its backend
        batches: ``index.base.batches``), rather than once each."""
        return self.index is not None and batches(self._ensure(self.index.dim))

    def search_many(self, asks: list[tuple[QueryContext, Any, int, int | None]]) -> list[np.ndarray]:
        """The memory rows :meth:`search` finds for each ``(ctx, feats, k, dim)``, those that
        fetch as many chunks asked of the backend at once (``index.base.search_many``)."""
        assert self.index is not None
        backend = self._ensure(self.index.dim)
        out: list[np.ndarray] = [np.zeros(0, np.int64)] * len(asks)
        by_fetch: dict[int, list[int]] = {}
        for i, (_, _, k, _) in enumerate(asks):
            by_fetch.setdefault(self._chunk_fetch(k), []).append(i)
        for fetch, at in by_fetch.items():
            found = search_many(backend, [DenseQuery(asks[i][1], asks[i][3]) for i in at], fetch,
                                [Bitmask(asks[i][0].visible_chunks()) for i in at])
            for i, (chunks, scores) in zip(at, found):
                out[i] = self._memories(chunks, scores, asks[i][2])[0]
        return out

    def last_scan(self, dim: int | None) -> tuple[str, int]:
        """How this thread's last :meth:`search` found its rows, for the dense stage's report: the
        built-in index's ("hnsw" | "exact", the dimension it first scanned at), or the named
        backend's name and the dimension asked for."""
        assert self.index is not None
        if self.named:
            return self.named, dim or self.index.dim
        return self.index.last_scan

    def _several_chunks(self) -> bool:
        """Whether some memory has more than one chunk row."""
        return self.catalog.n_chunks != self.catalog.n_rows

    def _chunk_fetch(self, k: int) -> int:
        """Chunks a search for ``k`` memories asks for: twice as many where memories have several."""
        return k * 2 if self._several_chunks() else k

    def score(self, ctx: QueryContext, feats: Any, rows: np.ndarray) -> np.ndarray:
        return self.score_with_chunks(feats, rows)[0]

    def score_with_chunks(self, feats: Any, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Best-chunk cosine float32 (C,) and that chunk's index within the memory int64 (C,)."""
        assert self.host is not None
        backend, query = self.host, DenseQuery(feats)
        return self.fold_candidates(rows, lambda chunks: backend.score(chunks, query))

    def memory_vectors(self, rows: np.ndarray) -> np.ndarray:
        """One unit vector per memory (mean of its chunk vectors), float32 (C, D); zeros when none."""
        assert self.index is not None
        out = np.zeros((rows.size, self.index.dim), dtype=np.float32)
        single = self.catalog.chunk_count[rows] == 1
        v = self.index.vectors(self.catalog.chunk_start[rows[single]])
        out[single] = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)  # int8 rows: near 1
        for i in np.flatnonzero(~single):
            start, count = int(self.catalog.chunk_start[rows[i]]), int(self.catalog.chunk_count[rows[i]])
            if count:
                v = self.index.vectors(slice(start, start + count)).mean(axis=0)
                out[i] = v / max(float(np.linalg.norm(v)), 1e-12)
        return out

    def unit_score(self, scores: np.ndarray) -> np.ndarray:
        """Cosines, clipped into [0, 1]."""
        return np.clip(np.nan_to_num(scores.astype(np.float32), nan=0.0), 0.0, 1.0)

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        if self.index is None:
            return np.full(rows.size, np.nan, dtype=np.float32)
        va = self.memory_vectors(np.array([a]))[0]
        return ((1.0 + self.memory_vectors(rows) @ va) / 2.0).astype(np.float32)

    def all_scores(self, ctx: QueryContext, feats: Any) -> np.ndarray:
        """Best-chunk cosine of every memory row, float32 (n_rows,)."""
        assert self.index is not None
        return fold_rows(self.index.full_scores(feats), self.catalog.chunk_mem[: self.index.n], self.catalog.n_rows,
                         self.catalog.one_chunk_each)


__all__ = ["DenseHeadSettings", "DenseHeadSpace"]
