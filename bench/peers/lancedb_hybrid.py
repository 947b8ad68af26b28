"""LanceDB (embedded): exact vector search, its native full-text search (BM25), and RRF hybrid."""

from __future__ import annotations

import importlib.metadata as md
import os
import time
import warnings
from pathlib import Path

import numpy as np

from bench.peers.base import PeerCorpus, PeerQueries, dedupe_chunks

# Lance logs a deprecation warning per search from Rust unless told otherwise.
os.environ.setdefault("LANCE_LOG", "error")
os.environ.setdefault("LANCEDB_LOG", "error")


class LanceDBPeer:
    """One table of chunk rows (``chunk``, ``text``, ``vector``); no ANN index, so vector search is exact.

    Parameters
    ----------
    oversample : chunk rows fetched per wanted memory, for de-duplication by memory.
    """

    name = "lancedb"
    modes = ("dense", "fts", "hybrid")

    def __init__(self, oversample: int = 2, rrf_k: int = 60) -> None:
        import lancedb  # noqa: F401

        self.oversample = oversample
        self.rrf_k = rrf_k
        self.table = None
        self.corpus: PeerCorpus | None = None

    def version(self) -> str:
        return f"lancedb {md.version('lancedb')}"

    def build(self, corpus: PeerCorpus, workdir: Path) -> float:
        import lancedb
        import pyarrow as pa

        self.corpus = corpus
        workdir.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        db = lancedb.connect(str(workdir / "lancedb"))
        dim = int(corpus.dense.shape[1])
        table = pa.table({
            "chunk": pa.array(np.arange(corpus.n_chunks, dtype=np.int64)),
            "text": pa.array(corpus.chunk_texts, pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(corpus.dense.ravel(), pa.float32()), dim),
        })
        self.table = db.create_table("bench", table, mode="overwrite")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            self.table.create_fts_index("text", replace=True)
        return time.perf_counter() - t0

    def search(self, mode: str, queries: PeerQueries, j: int, k: int) -> list[int]:
        from lancedb.rerankers import RRFReranker

        assert self.table is not None and self.corpus is not None
        limit = min(k * self.oversample, self.corpus.n_chunks)
        if mode == "dense":
            q = self.table.search(queries.dense[j]).metric("dot")
        elif mode == "fts":
            q = self.table.search(queries.texts[j], query_type="fts")
        elif mode == "hybrid":
            q = (self.table.search(query_type="hybrid").vector(queries.dense[j]).text(queries.texts[j])
                 .rerank(RRFReranker(K=self.rrf_k)))
        else:
            raise ValueError(f"lancedb has no mode {mode!r}")
        rows = q.limit(limit).select(["chunk"]).to_arrow()["chunk"].to_pylist()
        return dedupe_chunks(rows, self.corpus.chunk_doc, k)

    def close(self) -> None:
        self.table = None
