"""From texts to chunk texts, and from model outputs back to one EmbeddingSet per text.

Both serving paths run these two steps around the models: Triton's ``teleo_embed`` model (with
the models behind BLS calls) and the in-process embedder (with the models called directly).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from teleo_server.domain import ChunkEmbedding, EmbeddingSet
from teleo_server.embedding.chunking import Chunker
from teleo_server.embedding.models import DenseBatch, SparseBatch
from teleo_server.heads import DENSE, SPLADE, TOKENS, SparseVector, Vector, python_heads


@dataclass(slots=True)
class ChunkedBatch:
    """The chunks of B texts, flattened: chunk c belongs to text ``owners[c]``."""

    texts: list[str]                   # C chunk texts
    owners: list[int]                  # C
    spans: list[tuple[int, int]]       # C character spans within the owner's text
    is_query: list[bool]               # C

    def __len__(self) -> int:
        return len(self.texts)


def split(chunker: Chunker, texts: list[str], is_query: list[bool]) -> ChunkedBatch:
    out = ChunkedBatch([], [], [], [])
    for i, (text, q) in enumerate(zip(texts, is_query)):
        for start, end in chunker.spans(text):
            out.texts.append(text[start:end])
            out.owners.append(i)
            out.spans.append((start, end))
            out.is_query.append(q)
    return out


def model_vectors(dense: DenseBatch, sparse: SparseBatch) -> dict[str, list[Vector]]:
    """The model repository's heads, one vector per chunk (row c = chunk c)."""
    n = len(dense.dense)
    return {
        DENSE.name: [np.ascontiguousarray(dense.dense[c], dtype=DENSE.dtype) for c in range(n)],
        TOKENS.name: [np.ascontiguousarray(dense.tokens[c, :int(dense.token_counts[c])],
                                           dtype=TOKENS.dtype) for c in range(n)],
        SPLADE.name: [SparseVector.of(sparse.ids[c, :int(sparse.counts[c])],
                                      sparse.weights[c, :int(sparse.counts[c])]) for c in range(n)],
    }


def python_vectors(chunks: ChunkedBatch) -> dict[str, list[Vector]]:
    """Every registered Python head over the chunk texts, checked against its declaration."""
    out: dict[str, list[Vector]] = {}
    for head in python_heads():
        assert head.encode is not None
        values = head.encode(chunks.texts, chunks.is_query)
        if len(values) != len(chunks):
            raise RuntimeError(f"head {head.name!r} returned {len(values)} vectors for "
                               f"{len(chunks)} chunks")
        out[head.name] = [head.coerce(v, f"head {head.name}") for v in values]
    return out


def assemble(n_texts: int, chunks: ChunkedBatch, vectors: dict[str, list[Vector]],
             model_version: str) -> list[EmbeddingSet]:
    """One EmbeddingSet per text from per-chunk head outputs (``vectors[head][c]`` = chunk c)."""
    sets = [EmbeddingSet(model_version, []) for _ in range(n_texts)]
    for c, owner in enumerate(chunks.owners):
        start, end = chunks.spans[c]
        sets[owner].chunks.append(ChunkEmbedding(
            {name: values[c] for name, values in vectors.items()}, start=start, end=end))
    return sets


def _pad_cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    """Concatenate (B_i, W_i, ...) arrays along axis 0, zero-padding axis 1 to the widest."""
    width = max(p.shape[1] for p in parts)
    rows = sum(p.shape[0] for p in parts)
    out = np.zeros((rows, width, *parts[0].shape[2:]), dtype)
    at = 0
    for p in parts:
        out[at:at + p.shape[0], :p.shape[1]] = p
        at += p.shape[0]
    return out


def concat_dense(parts: list[DenseBatch]) -> DenseBatch:
    """Sub-batch outputs (in order) as one batch."""
    return DenseBatch(np.concatenate([p.dense for p in parts]),
                      _pad_cat([p.tokens for p in parts], np.float16),
                      np.concatenate([p.token_counts for p in parts]))


def concat_sparse(parts: list[SparseBatch]) -> SparseBatch:
    return SparseBatch(_pad_cat([p.ids for p in parts], np.int32),
                       _pad_cat([p.weights for p in parts], np.float32),
                       np.concatenate([p.counts for p in parts]))


__all__ = ["ChunkedBatch", "assemble", "concat_dense", "concat_sparse", "model_vectors",
           "python_vectors", "split"]
