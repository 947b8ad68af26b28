"""Milvus Lite (pymilvus + milvus-lite, embedded, offline): dense + sparse + RRF hybrid."""

from __future__ import annotations

import importlib.metadata as md
import time
from pathlib import Path

from bench.peers.base import PeerCorpus, PeerQueries, dedupe_chunks

COLLECTION = "bench"


class MilvusLitePeer:
    """One collection of chunk rows: ``dense`` FLOAT_VECTOR (IP), ``sparse`` SPARSE_FLOAT_VECTOR (IP).

    Parameters
    ----------
    index_type : dense index: "FLAT" (exact) or "HNSW" (graph with ``hnsw_m``, ``hnsw_ef_construction``,
        searched with ef = max(``hnsw_ef``, limit)).
    candidates : per-leg candidate count for hybrid (each leg's ``limit``).
    oversample : chunk rows fetched per wanted memory, for de-duplication by memory.
    """

    name = "milvus_lite"
    modes = ("dense", "sparse", "hybrid")

    def __init__(self, index_type: str = "FLAT", candidates: int = 100, oversample: int = 2, rrf_k: int = 60,
                 hnsw_m: int = 16, hnsw_ef_construction: int = 200, hnsw_ef: int = 256) -> None:
        from pymilvus import MilvusClient  # noqa: F401  (fail early with PeerUnavailable)

        self.index_type = index_type
        self.name = "milvus_lite" if index_type == "FLAT" else f"milvus_lite_{index_type.lower()}"
        self.hnsw = (hnsw_m, hnsw_ef_construction, hnsw_ef)
        self.candidates = candidates
        self.oversample = oversample
        self.rrf_k = rrf_k
        self.client = None
        self.corpus: PeerCorpus | None = None

    def version(self) -> str:
        return f"pymilvus {md.version('pymilvus')}, milvus-lite {md.version('milvus-lite')}, dense {self.index_type}"

    def _dense_params(self, limit: int) -> dict:
        if self.index_type == "HNSW":
            return {"metric_type": "IP", "params": {"ef": max(self.hnsw[2], limit)}}
        return {"metric_type": "IP"}

    def build(self, corpus: PeerCorpus, workdir: Path) -> float:
        from pymilvus import DataType, MilvusClient

        workdir.mkdir(parents=True, exist_ok=True)
        self.corpus = corpus
        t0 = time.perf_counter()
        self.client = MilvusClient(str(workdir / "milvus.db"))
        c = self.client
        if c.has_collection(COLLECTION):
            c.drop_collection(COLLECTION)
        schema = c.create_schema(auto_id=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=int(corpus.dense.shape[1]))
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        params = c.prepare_index_params()
        if self.index_type == "HNSW":
            params.add_index("dense", index_type="HNSW", metric_type="IP",
                             params={"M": self.hnsw[0], "efConstruction": self.hnsw[1]})
        else:
            params.add_index("dense", index_type=self.index_type, metric_type="IP")
        params.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
        c.create_collection(COLLECTION, schema=schema, index_params=params)
        step = 2000
        for lo in range(0, corpus.n_chunks, step):
            rows = []
            for r in range(lo, min(lo + step, corpus.n_chunks)):
                ids, w = corpus.sparse(r)
                rows.append({"id": r, "dense": corpus.dense[r].tolist(),
                             "sparse": {int(i): float(x) for i, x in zip(ids.tolist(), w.tolist())} or {0: 1e-9}})
            c.insert(COLLECTION, rows)
        # flush() seals the segments so timed searches do not pay for growing-segment scans.
        c.flush(COLLECTION)
        c.load_collection(COLLECTION)
        return time.perf_counter() - t0

    def _sparse(self, queries: PeerQueries, j: int) -> dict[int, float]:
        ids, w = queries.sparse[j]
        return {int(i): float(x) for i, x in zip(ids.tolist(), w.tolist())} or {0: 1e-9}

    def search(self, mode: str, queries: PeerQueries, j: int, k: int) -> list[int]:
        from pymilvus import AnnSearchRequest, RRFRanker

        assert self.client is not None and self.corpus is not None
        limit = min(k * self.oversample, self.corpus.n_chunks)
        if mode == "dense":
            res = self.client.search(COLLECTION, data=[queries.dense[j].tolist()], anns_field="dense", limit=limit,
                                     search_params=self._dense_params(limit), output_fields=["id"])
        elif mode == "sparse":
            res = self.client.search(COLLECTION, data=[self._sparse(queries, j)], anns_field="sparse", limit=limit,
                                     search_params={"metric_type": "IP"}, output_fields=["id"])
        elif mode == "hybrid":
            cand = max(self.candidates, limit)
            reqs = [AnnSearchRequest([queries.dense[j].tolist()], "dense", self._dense_params(cand), cand),
                    AnnSearchRequest([self._sparse(queries, j)], "sparse", {"metric_type": "IP"}, cand)]
            res = self.client.hybrid_search(COLLECTION, reqs, RRFRanker(self.rrf_k), limit=limit, output_fields=["id"])
        else:
            raise ValueError(f"milvus_lite has no mode {mode!r}")
        return dedupe_chunks([int(h["id"]) for h in res[0]], self.corpus.chunk_doc, k)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
