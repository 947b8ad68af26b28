"""Half precision for what is stored: a memory's sentence vectors and sparse weights as float16.

The database and the index keep the same values: the index widens them to float32 as it takes them,
so a memory scores the same before and after a restart. A float16 keeps 11 significant bits (a
relative error of at most 2^-11), below what moves a ranking (SciFact and LoCoMo nDCG/Recall the
same to three places; the README's "Bytes per memory"). Per-token heads are kept as codes
(:func:`teleo_server.index.tokens.to_codes`); other vectors pass through.
"""

from __future__ import annotations

import numpy as np

from teleo_server.domain import ChunkEmbedding, EmbeddingSet
from teleo_server.heads import HeadKind, SparseVector, heads


def _half(head: str, v):
    spec = heads().get(head)
    kind = spec.kind if spec is not None else None
    if isinstance(v, SparseVector):
        if v.weights.dtype == np.float32:
            return SparseVector(v.ids, v.weights.astype(np.float16))
        return v
    if kind is HeadKind.DENSE and isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype == np.float32:
        return v.astype(np.float16)
    return v


def half_floats(emb: EmbeddingSet) -> EmbeddingSet:
    """``emb`` with every dense head's vector and every sparse head's weights as float16."""
    return EmbeddingSet(emb.model_version, [ChunkEmbedding({h: _half(h, v) for h, v in ch.vectors.items()}, ch.start, ch.end)
                                            for ch in emb.chunks])


__all__ = ["half_floats"]
