"""bm25s: BM25 over the same tokens Teleo's lexical space uses (lowercase alphanumeric, no stemming)."""

from __future__ import annotations

import importlib.metadata as md
import time
from pathlib import Path

import numpy as np

from bench.peers.base import PeerCorpus, PeerQueries
from teleo_server.spaces.text import tokenize


class BM25sPeer:
    """Whole-memory BM25 (Lucene IDF), k1/b as Teleo's defaults so the two rank the same documents."""

    name = "bm25s"
    modes = ("bm25",)

    def __init__(self, k1: float = 0.9, b: float = 0.4, method: str = "lucene") -> None:
        import bm25s  # noqa: F401

        self.k1, self.b, self.method = k1, b, method
        self.model = None
        self.corpus: PeerCorpus | None = None

    def version(self) -> str:
        return f"bm25s {md.version('bm25s')}"

    def build(self, corpus: PeerCorpus, workdir: Path) -> float:
        import bm25s

        self.corpus = corpus
        t0 = time.perf_counter()
        self.model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        self.model.index([tokenize(t) for t in corpus.texts], show_progress=False)
        return time.perf_counter() - t0

    def search(self, mode: str, queries: PeerQueries, j: int, k: int) -> list[int]:
        assert self.model is not None and self.corpus is not None
        if mode != "bm25":
            raise ValueError(f"bm25s has no mode {mode!r}")
        tokens = [t for t in tokenize(queries.texts[j]) if t in self.model.vocab_dict]
        if not tokens:
            return []
        docs, scores = self.model.retrieve([tokens], k=min(k, len(self.corpus)), show_progress=False, n_threads=1)
        keep = scores[0] > 0
        return [int(d) for d in np.asarray(docs[0])[keep]]

    def close(self) -> None:
        self.model = None
