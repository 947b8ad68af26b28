"""The SPLADE space's comparison of memories, read back from its postings (it keeps no row-major
copy), against the cosine of the vectors it was given."""

from __future__ import annotations

import numpy as np

from bench.harness import teleo_inproc as inproc
from teleo_server.domain import ChunkEmbedding, EmbeddingSet, Memory, content_hash

DIM = 384
FLOOR = 0.3  # the space's min_doc_weight: lighter terms are not indexed


def _chunk(rng: np.random.Generator, terms: int) -> tuple[np.ndarray, np.ndarray]:
    ids = rng.choice(3000, size=terms, replace=False).astype(np.int64)
    return ids, (rng.random(terms) * 2.5).astype(np.float32)


def _cosine(a: dict[int, float], b: dict[int, float]) -> float:
    na, nb = np.sqrt(sum(v * v for v in a.values())), np.sqrt(sum(v * v for v in b.values()))
    if not na or not nb:
        return 0.0
    return sum(v * b.get(t, 0.0) for t, v in a.items()) / (na * nb)


def test_splade_similarity_is_the_cosine_of_each_memorys_best_chunk_weights():
    rng = np.random.default_rng(21)
    retriever = inproc.make()
    vectors: list[dict[int, float]] = []
    for i in range(60):
        n_chunks = 0 if i == 7 else 1 + i % 3  # one memory with no vector at all
        chunks, vector = [], {}
        shared = _chunk(rng, 5)  # terms several chunks of a memory repeat, with other weights
        for c in range(n_chunks):
            ids, w = _chunk(rng, int(rng.integers(3, 40)))
            ids = np.concatenate([ids[~np.isin(ids, shared[0])], shared[0]])
            w = np.concatenate([w[: ids.size - shared[0].size], (rng.random(5) * 2.5).astype(np.float32)])
            for t, v in zip(ids.tolist(), w.tolist()):
                if v >= FLOOR:
                    vector[t] = max(vector.get(t, 0.0), v)
            dense = rng.normal(size=DIM).astype(np.float32)
            chunks.append(ChunkEmbedding.from_models(dense / np.linalg.norm(dense), np.zeros((0, DIM), np.float16),
                                                     ids, w, start=c * 10, end=c * 10 + 10))
        text = f"memory {i} " + "word " * (10 * max(n_chunks, 1))
        memory = Memory(id=f"m{i}", namespace="n", content=text, content_hash=content_hash(text))
        retriever.add(memory, EmbeddingSet("synthetic", chunks))
        vectors.append(vector)
    space = retriever.spaces["E13_splade"]
    rows = np.array([3, 0, 59, 7, 3, 12, 44], np.int64)  # a repeat, the memory without a vector
    for a in (0, 3, 7, 58):
        got = space.similarity(a, rows)
        want = [_cosine(vectors[a], vectors[r]) for r in rows.tolist()]
        np.testing.assert_allclose(got, want, atol=0.02)  # int8 codes: within their steps
        assert got.dtype == np.float32
    assert space.similarity(0, np.array([0]))[0] > 0.999
    assert not space.similarity(0, np.array([7])).any()  # no vector, no similarity
    assert space.similarity(0, np.zeros(0, np.int64)).size == 0
