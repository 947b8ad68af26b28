"""Synthetic memories with known structure, for tests of mechanics and for benchmarks.

Vectors are random but controlled: each memory's dense vector is its topic's centre plus noise,
its tokens are perturbations of the dense vector, its sparse terms are the topic's term ids plus
random ones. Nothing here claims semantic realism; semantic tests use the real embedder.
"""

from __future__ import annotations

import numpy as np

from teleo_server.domain import AccessLevel, ChunkEmbedding, EmbeddingSet, Memory, MemoryType, Principal, content_hash

MODEL_VERSION = "synthetic-1"


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)).astype(np.float32)


def chunk(dense: np.ndarray, sparse: dict[int, float] | None = None, tokens: np.ndarray | None = None,
          rng: np.random.Generator | None = None, n_tokens: int = 4) -> ChunkEmbedding:
    """One chunk from a dense vector; tokens default to small perturbations of it."""
    dense = unit(np.asarray(dense, dtype=np.float32))
    if tokens is None:
        rng = rng or np.random.default_rng(0)
        tokens = unit(dense + 0.3 * rng.standard_normal((n_tokens, dense.size)).astype(np.float32))
    sparse = sparse or {}
    ids = np.array(sorted(sparse), dtype=np.int32)
    return ChunkEmbedding.from_models(dense, tokens, ids, [sparse[i] for i in ids.tolist()])


def embedding(*chunks: ChunkEmbedding) -> EmbeddingSet:
    return EmbeddingSet(MODEL_VERSION, list(chunks))


def memory(mid: str, content: str, namespace: str = "ns", **kw: object) -> Memory:
    return Memory(id=mid, namespace=namespace, content=content, content_hash=content_hash(content), **kw)  # type: ignore[arg-type]


def admin(namespaces: frozenset[str] = frozenset({"*"}), level: AccessLevel = AccessLevel.RESTRICTED) -> Principal:
    return Principal("agent", "token", namespaces, namespaces, level, "ns")


def corpus(n: int, dim: int = 384, topics: int = 50, vocab: int = 30_000, terms: int = 40, tokens: int = 24,
           seed: int = 0, words: int = 30) -> list[tuple[Memory, EmbeddingSet]]:
    """``n`` memories in ``topics`` clusters (dense, sparse and text all follow the topic).

    Text is drawn from a synthetic vocabulary ("w123") so BM25 and E9 have realistic postings.
    """
    rng = np.random.default_rng(seed)
    centres = unit(rng.standard_normal((topics, dim)).astype(np.float32))
    topic_terms = rng.integers(0, vocab, size=(topics, terms))
    topic_words = rng.integers(0, 5000, size=(topics, 50))
    topic_of = rng.integers(0, topics, size=n)
    dense = unit(centres[topic_of] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32) / np.sqrt(dim) * 8)
    out = []
    for i in range(n):
        t = int(topic_of[i])
        own = rng.choice(topic_terms[t], size=terms // 2, replace=False)
        extra = rng.integers(0, vocab, size=terms // 2)
        sparse = {int(k): float(v) for k, v in zip(np.r_[own, extra], rng.gamma(2.0, 0.5, size=terms))}
        toks = unit(dense[i] + 0.5 * rng.standard_normal((tokens, dim)).astype(np.float32) / np.sqrt(dim) * 8).astype(np.float16)
        w = np.r_[rng.choice(topic_words[t], size=words // 2), rng.integers(0, 5000, size=words - words // 2)]
        text = " ".join(f"w{x}" for x in w)
        emb = EmbeddingSet(MODEL_VERSION, [ChunkEmbedding.from_models(
            dense[i], toks, sorted(sparse), [sparse[k] for k in sorted(sparse)])])
        m = memory(f"m{i}", text, namespace=f"ns{i % 4}", memory_type=MemoryType.SEMANTIC,
                   event_time=1.7e9 + float(i), ingestion_time=1.7e9 + float(i))
        out.append((m, emb))
    return out


__all__ = ["MODEL_VERSION", "admin", "chunk", "corpus", "embedding", "memory", "unit"]
