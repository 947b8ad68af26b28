"""Chroma (``chromadb``, embedded ``PersistentClient``, Rust core): dense search over chunk rows.

One collection of chunk rows with the chunk text as the document, inner-product HNSW with
Teleo's graph settings (M 16, efConstruction 200, ef 256). Chroma has no exact mode; its
correctness is HNSW recall against the exact oracle.

Hybrid: Chroma's ``Search`` API (``Knn`` + ``Rrf``, sparse vectors) is what Chroma offers for
hybrid search, and the local (embedded) client of the installed version answers it with
``NotImplementedError`` ("Search is not implemented for Local Chroma"): it is a Chroma Cloud
feature. ``build`` tries it once; when it fails, ``unavailable_modes`` says why and the harness
records a skip instead of a measurement.
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import os
import time
from pathlib import Path

from bench.peers.base import PeerCorpus, PeerQueries, PeerUnavailable, dedupe_chunks

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


class ChromaPeer:
    name = "chroma"
    modes = ("dense", "hybrid")

    def __init__(self, hnsw_m: int = 16, hnsw_ef_construction: int = 200, hnsw_ef: int = 256, oversample: int = 2) -> None:
        try:
            import chromadb  # noqa: F401
        except ImportError as exc:
            raise PeerUnavailable(f"chromadb not installed ({exc}); `make bench-venv` installs the peers") from exc
        logging.getLogger("chromadb").setLevel(logging.ERROR)
        self.hnsw = (hnsw_m, hnsw_ef_construction, hnsw_ef)
        self.oversample = oversample
        self.client = None
        self.collection = None
        self.corpus: PeerCorpus | None = None
        self.unavailable_modes: dict[str, str] = {}

    def version(self) -> str:
        return f"chromadb {md.version('chromadb')}, HNSW M {self.hnsw[0]} efC {self.hnsw[1]} ef {self.hnsw[2]}"

    def build(self, corpus: PeerCorpus, workdir: Path) -> float:
        import chromadb

        self.corpus = corpus
        path = workdir / "chroma"
        path.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        self.client = chromadb.PersistentClient(path=str(path), settings=chromadb.Settings(anonymized_telemetry=False))
        self.collection = self.client.create_collection(
            "bench", embedding_function=None,
            configuration={"hnsw": {"space": "ip", "max_neighbors": self.hnsw[0], "ef_construction": self.hnsw[1],
                                    "ef_search": self.hnsw[2]}})
        step = min(4096, int(self.client.get_max_batch_size()))
        for lo in range(0, corpus.n_chunks, step):
            hi = min(lo + step, corpus.n_chunks)
            self.collection.add(ids=[str(c) for c in range(lo, hi)], embeddings=corpus.dense[lo:hi],
                                documents=corpus.chunk_texts[lo:hi])
        seconds = time.perf_counter() - t0
        self._probe_hybrid(corpus)
        return seconds

    def _probe_hybrid(self, corpus: PeerCorpus) -> None:
        from chromadb import Knn, Search

        try:
            self.collection.search(Search().rank(Knn(query=corpus.dense[0].tolist())).limit(1))
        except NotImplementedError as exc:
            self.unavailable_modes["hybrid"] = (f"chromadb {md.version('chromadb')}: hybrid (the Search API with "
                                                f"Knn + Rrf) is not available in the embedded client: {exc}")
        except Exception as exc:  # any other refusal is reported the same way
            self.unavailable_modes["hybrid"] = f"chromadb Search API failed: {exc!r}"

    def search(self, mode: str, queries: PeerQueries, j: int, k: int) -> list[int]:
        assert self.collection is not None and self.corpus is not None
        if mode != "dense":
            raise ValueError(self.unavailable_modes.get(mode, f"chroma has no mode {mode!r}"))
        limit = min(k * self.oversample, self.corpus.n_chunks)
        res = self.collection.query(query_embeddings=queries.dense[j:j + 1], n_results=limit, include=[])
        return dedupe_chunks([int(i) for i in res["ids"][0]], self.corpus.chunk_doc, k)

    def close(self) -> None:
        self.collection = None
        self.client = None
