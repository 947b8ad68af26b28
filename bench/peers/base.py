"""The interface every peer implements, and the corpus/query arrays they all consume.

Teleo indexes memories split into chunks; peers index the same chunks as rows (dense and sparse
vectors per chunk, the chunk's text for full-text search) and return memories by their best chunk,
so both sides search exactly the same vectors.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from teleo_server.domain import EmbeddingSet

MODES = ("dense", "sparse", "hybrid", "bm25", "fts")


class PeerUnavailable(RuntimeError):
    """The peer's package is not installed (or cannot start here)."""


@dataclass(slots=True)
class PeerCorpus:
    """N memories as C chunk rows.

    doc_ids list[str] (N,); texts list[str] (N,) full memory text;
    chunk_doc int64 (C,) owning memory of each chunk; chunk_texts list[str] (C,);
    dense float32 (C, D) L2-normalised; sp_ptr int64 (C+1,), sp_ids int32, sp_w float32 (CSR);
    tok_ptr int64 (C+1,) and tokens float16 (T, D): each chunk's per-token vectors (late interaction),
    None when the caller has none.
    """

    doc_ids: list[str]
    texts: list[str]
    chunk_doc: np.ndarray
    chunk_texts: list[str]
    dense: np.ndarray
    sp_ptr: np.ndarray
    sp_ids: np.ndarray
    sp_w: np.ndarray
    tok_ptr: np.ndarray | None = None
    tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.doc_ids)

    def chunk_tokens(self, c: int) -> np.ndarray:
        """Chunk ``c``'s per-token vectors, float16 (t, D); raises when the corpus carries none."""
        if self.tok_ptr is None or self.tokens is None:
            raise ValueError("this corpus carries no per-token vectors")
        return self.tokens[self.tok_ptr[c]:self.tok_ptr[c + 1]]

    @property
    def n_chunks(self) -> int:
        return int(self.chunk_doc.size)

    def sparse(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.sp_ptr[c], self.sp_ptr[c + 1]
        return self.sp_ids[lo:hi], self.sp_w[lo:hi]

    @classmethod
    def from_sets(cls, doc_ids: list[str], texts: list[str], sets: list[EmbeddingSet]) -> PeerCorpus:
        chunk_doc, chunk_texts, dense, ids, ws, lens, toks = [], [], [], [], [], [], []
        for i, (text, emb) in enumerate(zip(texts, sets, strict=True)):
            for ch in emb.chunks:
                chunk_doc.append(i)
                chunk_texts.append(text[ch.start:ch.end] if ch.end > ch.start else text)
                sparse = ch.vectors["splade"]
                dense.append(ch.vectors["dense"])
                ids.append(sparse.ids)
                ws.append(sparse.weights)
                lens.append(sparse.size)
                toks.append(ch.vectors["tokens"])
        dim = dense[0].shape[0] if dense else 0
        return cls(doc_ids, texts, np.asarray(chunk_doc, np.int64), chunk_texts,
                   np.stack(dense).astype(np.float32), np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
                   np.concatenate(ids).astype(np.int32), np.concatenate(ws).astype(np.float32),
                   np.concatenate([[0], np.cumsum([t.shape[0] for t in toks])]).astype(np.int64),
                   np.concatenate(toks).astype(np.float16) if toks else np.zeros((0, dim), np.float16))


@dataclass(slots=True)
class PeerQueries:
    """Q queries: texts list[str]; dense float32 (Q, D); sparse list of (ids int32, w float32);
    tokens: list of float16 (t, D) per-token vectors, or None."""

    texts: list[str]
    dense: np.ndarray
    sparse: list[tuple[np.ndarray, np.ndarray]]
    tokens: list[np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.texts)

    @classmethod
    def from_sets(cls, texts: list[str], sets: list[EmbeddingSet]) -> PeerQueries:
        # Queries fit one chunk (they are far shorter than the model window).
        return cls(texts, np.stack([s.chunks[0].vectors["dense"] for s in sets]).astype(np.float32),
                   [(s.chunks[0].vectors["splade"].ids, s.chunks[0].vectors["splade"].weights)
                    for s in sets], [s.chunks[0].vectors["tokens"] for s in sets])


class Peer(Protocol):
    name: str
    modes: tuple[str, ...]

    def version(self) -> str: ...

    def build(self, corpus: PeerCorpus, workdir: Path) -> float:
        """Index the corpus (durably, ready to query); returns seconds."""
        ...

    def search(self, mode: str, queries: PeerQueries, j: int, k: int) -> list[int]:
        """Memory indices (into ``corpus.doc_ids``) of query ``j``'s top ``k``, best first."""
        ...

    def close(self) -> None: ...


_REGISTRY: dict[str, tuple[str, dict[str, object]]] = {
    "milvus_lite": ("bench.peers.milvus_lite:MilvusLitePeer", {}),
    # The same with an HNSW graph (M 16, efConstruction 200, ef 256: Teleo's settings), for scale
    # points where Teleo itself searches a graph rather than scanning.
    "milvus_lite_hnsw": ("bench.peers.milvus_lite:MilvusLitePeer", {"index_type": "HNSW"}),
    "lancedb": ("bench.peers.lancedb_hybrid:LanceDBPeer", {}),
    "bm25s": ("bench.peers.bm25s_lexical:BM25sPeer", {}),
    # Qdrant's Rust engine in-process: dense (HNSW, exact, int8 and binary quantized), SPLADE, BM25
    # with the IDF modifier, RRF hybrid and the teleological-equivalent MaxSim query.
    "qdrant_edge": ("bench.peers.qdrant_edge:QdrantEdgePeer", {}),
    # Tantivy's BM25: its own tokenizer, and Teleo's tokens through a whitespace analyzer.
    "tantivy": ("bench.peers.tantivy_bm25:TantivyPeer", {}),
    # OpenClaw's memory stack: SQLite FTS5 + sqlite-vec, merged 0.7 vector / 0.3 text.
    "openclaw_sqlite": ("bench.peers.openclaw_sqlite:OpenClawSQLitePeer", {}),
    "chroma": ("bench.peers.chroma_dense:ChromaPeer", {}),
}


def load_peer(name: str, **options: object) -> Peer:
    """Instantiate peer ``name``; raises PeerUnavailable with an install hint when it cannot."""
    if name not in _REGISTRY:
        raise PeerUnavailable(f"unknown peer {name!r}; known: {sorted(_REGISTRY)}")
    path, defaults = _REGISTRY[name]
    module, cls = path.split(":")
    try:
        # Constructors import their package, so a missing one surfaces here too.
        return getattr(importlib.import_module(module), cls)(**{**defaults, **options})
    except ImportError as exc:
        raise PeerUnavailable(f"{name} not installed ({exc}); `make bench-venv` installs the peers") from exc


def dir_bytes(path: Path) -> int:
    """Bytes allocated on disk to every regular file under ``path`` (a peer's on-disk footprint).

    Allocated blocks rather than apparent sizes: engines that preallocate sparse files (Qdrant's
    mmap storages, its WAL) would otherwise count space they never wrote.
    """
    if not path.exists():
        return 0
    total = 0
    for p in path.rglob("*"):
        if p.is_file() and not p.is_symlink():
            st = p.stat()
            total += min(st.st_size, st.st_blocks * 512) if hasattr(st, "st_blocks") else st.st_size
    return total


def dedupe_chunks(chunk_rows: list[int], chunk_doc: np.ndarray, k: int) -> list[int]:
    """Memory indices in first-seen order from ranked chunk rows (a memory scores by its best chunk)."""
    seen: dict[int, None] = {}
    for c in chunk_rows:
        d = int(chunk_doc[c])
        if d not in seen:
            seen[d] = None
            if len(seen) == k:
                break
    return list(seen)
