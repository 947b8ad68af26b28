"""Qdrant Edge (``qdrant-edge-py``): Qdrant's Rust engine in-process, one shard of chunk points.

Every point is one chunk and carries, as named vectors:

* ``dense`` (Dot, HNSW M 16 / efConstruction 200, searched with ef 256: Teleo's settings), and two
  copies of it with quantization: ``dense_sq`` (int8 scalar, quantile 0.99) and ``dense_bq`` (1-bit
  binary); quantized searches rescore with the original vectors after oversampling ``oversampling``;
* ``splade`` (sparse, the same SPLADE vectors Teleo indexes);
* ``bm25`` (sparse with Qdrant's IDF modifier): the whole memory's BM25 term-frequency part,
  ``tf (k1 + 1) / (tf + k1 (1 - b + b dl / avgdl))`` over Teleo's analyser terms with Teleo's k1 and
  b, on the memory's first chunk only (Teleo's lexical space scores memories, not chunks); Qdrant
  multiplies in ``ln(1 + (N - n + 0.5) / (n + 0.5))`` at query time, so the scores are Teleo's;
* ``tokens`` (float16 multivector, MaxSim comparator, no HNSW graph): the chunk's per-token vectors.

Modes:

* ``dense`` (HNSW), ``dense_exact`` (``SearchParams(exact=True)``), ``dense_sq``, ``dense_bq``;
* ``sparse`` (SPLADE), ``bm25``;
* ``hybrid``: prefetch BM25 + SPLADE + dense, fused by RRF (k = 60), as Teleo's ``hybrid`` profile fuses
  the same three lists; ``hybrid_sq`` / ``hybrid_bq`` prefetch the quantized dense vector instead;
* ``teleological``: the teleological-equivalent query: the hybrid prefetch, RRF to ``rerank_depth``
  candidates (Teleo's default 150), then MaxSim over the ``tokens`` multivector, top k;
  ``teleological_sq`` / ``teleological_bq`` with the quantized dense prefetch.
"""

from __future__ import annotations

import importlib.metadata as md
import time
from collections import Counter
from pathlib import Path

import numpy as np

from bench.peers.base import PeerCorpus, PeerQueries, PeerUnavailable, dedupe_chunks, dir_bytes

QUANTIZED = ("sq", "bq")


def bm25_documents(texts: list[str], k1: float, b: float, tokenize) -> tuple[dict[str, int], list[tuple[list[int], list[float]]]]:
    """(vocabulary, per-text (term ids, BM25 tf parts)) with Teleo's k1, b and analyser."""
    counts = [Counter(tokenize(t)) for t in texts]
    lengths = np.array([sum(c.values()) for c in counts], dtype=np.float64)
    avgdl = max(float(lengths.mean()) if lengths.size else 0.0, 1e-6)
    vocab: dict[str, int] = {}
    rows = []
    for c, dl in zip(counts, lengths):
        ids = [vocab.setdefault(t, len(vocab)) for t in c]
        tf = np.fromiter(c.values(), dtype=np.float64, count=len(c))
        part = tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl / avgdl))
        rows.append((ids, part.tolist()))
    return vocab, rows


class QdrantEdgePeer:
    """Parameters
    ----------
    oversample : chunk rows fetched per wanted memory, for de-duplication by memory.
    candidates : each prefetch arm's limit (at least the final limit).
    rerank_depth : RRF candidates MaxSim reranks in ``teleological`` (Teleo's ``rerank_depth``).
    oversampling : quantized searches fetch this many times the limit, then rescore exactly.
    tokens : index the per-token multivector (``teleological`` modes); False leaves it out.
    """

    name = "qdrant_edge"
    modes = ("dense", "dense_exact", "dense_sq", "dense_bq", "sparse", "bm25", "hybrid", "hybrid_sq", "hybrid_bq",
             "teleological", "teleological_sq", "teleological_bq")
    # mode -> what it must equal exactly (checked against a NumPy oracle before timing)
    exact_modes = {"dense_exact": "dense", "sparse": "splade", "bm25": "bm25"}

    def __init__(self, oversample: int = 2, candidates: int = 100, rerank_depth: int = 150, rrf_k: int = 60,
                 hnsw_m: int = 16, hnsw_ef_construction: int = 200, hnsw_ef: int = 256, oversampling: float = 2.0,
                 k1: float = 0.9, b: float = 0.4, tokens: bool = True, batch: int = 256) -> None:
        try:
            import qdrant_edge  # noqa: F401
        except ImportError as exc:
            raise PeerUnavailable(f"qdrant-edge-py not installed ({exc}); `make bench-venv` installs the peers") from exc
        self.oversample, self.candidates, self.rerank_depth, self.rrf_k = oversample, candidates, rerank_depth, rrf_k
        self.hnsw = (hnsw_m, hnsw_ef_construction, hnsw_ef)
        self.oversampling = oversampling
        self.k1, self.b = k1, b
        self.with_tokens = tokens
        self.batch = batch
        self.shard = None
        self.path: Path | None = None
        self.corpus: PeerCorpus | None = None
        self.vocab: dict[str, int] = {}
        self.has_tokens = False

    def version(self) -> str:
        return (f"qdrant-edge-py {md.version('qdrant-edge-py')}, HNSW M {self.hnsw[0]} efC {self.hnsw[1]} ef {self.hnsw[2]}, "
                f"quantized rescore x{self.oversampling}")

    def _config(self, dim: int):
        import qdrant_edge as q

        hnsw = q.HnswIndexConfig(m=self.hnsw[0], ef_construct=self.hnsw[1], full_scan_threshold=10_000)
        vectors = {
            "dense": q.EdgeVectorParams(size=dim, distance=q.Distance.Dot, hnsw_config=hnsw),
            "dense_sq": q.EdgeVectorParams(size=dim, distance=q.Distance.Dot, hnsw_config=hnsw,
                                           quantization_config=q.ScalarQuantizationConfig(
                                               type=q.ScalarType.Int8, quantile=0.99, memory=q.Memory.Pinned)),
            "dense_bq": q.EdgeVectorParams(size=dim, distance=q.Distance.Dot, hnsw_config=hnsw,
                                           quantization_config=q.BinaryQuantizationConfig(memory=q.Memory.Pinned)),
        }
        if self.has_tokens:
            # m = 0: no graph over token vectors; the multivector is only read to rerank candidates.
            vectors["tokens"] = q.EdgeVectorParams(
                size=dim, distance=q.Distance.Dot, datatype=q.VectorStorageDatatype.Float16,
                multivector_config=q.MultiVectorConfig(q.MultiVectorComparator.MaxSim),
                hnsw_config=q.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000))
        return q.EdgeConfig(vectors=vectors,
                            sparse_vectors={"splade": q.EdgeSparseVectorParams(),
                                            "bm25": q.EdgeSparseVectorParams(modifier=q.Modifier.Idf)})

    def build(self, corpus: PeerCorpus, workdir: Path) -> float:
        import qdrant_edge as q

        from teleo_server.analysis import tokenize

        self.corpus = corpus
        self.has_tokens = self.with_tokens and corpus.tokens is not None and corpus.tokens.shape[0] > 0
        workdir.mkdir(parents=True, exist_ok=True)
        self.path = workdir / "qdrant_edge"
        t0 = time.perf_counter()
        self.vocab, bm25_rows = bm25_documents(corpus.texts, self.k1, self.b, tokenize)
        first_chunk = np.full(len(corpus), -1, np.int64)
        for c in range(corpus.n_chunks - 1, -1, -1):
            first_chunk[corpus.chunk_doc[c]] = c
        bm25_of = {int(c): d for d, c in enumerate(first_chunk.tolist()) if c >= 0}
        self.shard = q.EdgeShard.create(str(self.path), self._config(int(corpus.dense.shape[1])))
        for lo in range(0, corpus.n_chunks, self.batch):
            points = []
            for c in range(lo, min(lo + self.batch, corpus.n_chunks)):
                d = corpus.dense[c]
                vec = {"dense": d, "dense_sq": d, "dense_bq": d}
                ids, w = corpus.sparse(c)
                if ids.size:
                    vec["splade"] = q.SparseVector(ids.tolist(), w.tolist())
                if c in bm25_of and bm25_rows[bm25_of[c]][0]:
                    vec["bm25"] = q.SparseVector(*bm25_rows[bm25_of[c]])
                if self.has_tokens:
                    toks = corpus.chunk_tokens(c)
                    if toks.shape[0]:
                        vec["tokens"] = toks.astype(np.float32).tolist()
                points.append(q.Point(c, vec))
            self.shard.update(q.UpdateOperation.upsert_points(points))
        # Blocks until segments are merged and HNSW graphs (and quantized copies) are built.
        self.shard.optimize()
        self.shard.flush()
        return time.perf_counter() - t0

    def disk_breakdown(self) -> dict[str, int]:
        """On-disk bytes per named vector (storage + index), payload/id tracker and WAL."""
        out: dict[str, int] = {}
        if self.path is None:
            return out
        for seg in (self.path / "segments").glob("*"):
            for part in seg.iterdir():
                name = part.name
                key = name.split("-", 1)[1] if name.startswith(("vector_storage-", "vector_index-")) else "other"
                if part.is_dir():
                    size = dir_bytes(part)
                else:
                    st = part.stat()
                    size = min(st.st_size, st.st_blocks * 512)
                out[key] = out.get(key, 0) + size
        out["wal"] = dir_bytes(self.path / "wal")
        return out

    # --- queries -------------------------------------------------------------------------------

    def _bm25_query(self, text: str):
        import qdrant_edge as q

        from teleo_server.analysis import tokenize

        ids = sorted({self.vocab[t] for t in tokenize(text) if t in self.vocab})
        return q.SparseVector(ids, [1.0] * len(ids)) if ids else None

    def _splade_query(self, queries: PeerQueries, j: int):
        import qdrant_edge as q

        ids, w = queries.sparse[j]
        return q.SparseVector(ids.tolist(), w.tolist()) if ids.size else None

    def _dense_params(self, variant: str, limit: int):
        import qdrant_edge as q

        ef = max(self.hnsw[2], limit)
        if variant in QUANTIZED:
            return q.SearchParams(hnsw_ef=ef, quantization=q.QuantizationSearchParams(
                rescore=True, oversampling=self.oversampling))
        if variant == "exact":
            return q.SearchParams(exact=True)
        return q.SearchParams(hnsw_ef=ef)

    def _arms(self, queries: PeerQueries, j: int, variant: str, limit: int) -> list:
        import qdrant_edge as q

        using = "dense" if variant in ("", "exact") else f"dense_{variant}"
        arms = [q.Prefetch(limit=limit, query=q.Query.Nearest(queries.dense[j].tolist(), using=using),
                           params=self._dense_params(variant, limit))]
        for vec, using in ((self._bm25_query(queries.texts[j]), "bm25"), (self._splade_query(queries, j), "splade")):
            if vec is not None:
                arms.append(q.Prefetch(limit=limit, query=q.Query.Nearest(vec, using=using)))
        return arms

    def search(self, mode: str, queries: PeerQueries, j: int, k: int) -> list[int]:
        import qdrant_edge as q

        assert self.shard is not None and self.corpus is not None
        limit = min(k * self.oversample, self.corpus.n_chunks)
        kind, _, variant = mode.partition("_")
        if kind == "dense":
            req = q.QueryRequest(limit=limit, query=q.Query.Nearest(
                queries.dense[j].tolist(), using="dense" if variant in ("", "exact") else f"dense_{variant}"),
                params=self._dense_params(variant, limit))
        elif mode == "sparse":
            vec = self._splade_query(queries, j)
            if vec is None:
                return []
            req = q.QueryRequest(limit=limit, query=q.Query.Nearest(vec, using="splade"))
        elif mode == "bm25":
            vec = self._bm25_query(queries.texts[j])
            if vec is None:
                return []
            req = q.QueryRequest(limit=limit, query=q.Query.Nearest(vec, using="bm25"))
        elif kind == "hybrid":
            cand = max(self.candidates, limit)
            req = q.QueryRequest(limit=limit, query=q.Fusion.Rrf(k=self.rrf_k),
                                 prefetches=self._arms(queries, j, variant, cand))
        elif kind == "teleological":
            if not self.has_tokens or queries.tokens is None:
                raise ValueError("teleological needs per-token vectors in the corpus and the queries")
            depth = max(self.rerank_depth, limit)
            cand = max(self.candidates, depth)
            fused = q.Prefetch(limit=depth, query=q.Fusion.Rrf(k=self.rrf_k),
                               prefetches=self._arms(queries, j, variant, cand))
            req = q.QueryRequest(limit=limit, prefetches=[fused], query=q.Query.Nearest(
                queries.tokens[j].astype(np.float32).tolist(), using="tokens"))
        else:
            raise ValueError(f"qdrant_edge has no mode {mode!r}")
        points = self.shard.query(req)
        if mode == "bm25":
            return [int(self.corpus.chunk_doc[int(p.id)]) for p in points[:k]]
        return dedupe_chunks([int(p.id) for p in points], self.corpus.chunk_doc, k)

    def scores(self, mode: str, queries: PeerQueries, j: int, k: int) -> list[tuple[int, float]]:
        """(chunk row, score) of the top ``k`` chunk rows (for correctness checks)."""
        import qdrant_edge as q

        assert self.shard is not None
        if mode == "dense_exact":
            req = q.QueryRequest(limit=k, query=q.Query.Nearest(queries.dense[j].tolist(), using="dense"),
                                 params=q.SearchParams(exact=True))
        elif mode in ("sparse", "bm25"):
            vec = self._splade_query(queries, j) if mode == "sparse" else self._bm25_query(queries.texts[j])
            if vec is None:
                return []
            req = q.QueryRequest(limit=k, query=q.Query.Nearest(vec, using="splade" if mode == "sparse" else "bm25"))
        else:
            raise ValueError(mode)
        return [(int(p.id), float(p.score)) for p in self.shard.query(req)]

    def close(self) -> None:
        if self.shard is not None:
            self.shard.close()
            self.shard = None


def idf(n: int, df: np.ndarray) -> np.ndarray:
    """Qdrant's (and Teleo's) BM25 IDF: ln(1 + (N - n + 0.5) / (n + 0.5))."""
    return np.log1p((n - df + 0.5) / (df + 0.5))


__all__ = ["QdrantEdgePeer", "bm25_documents", "idf"]
