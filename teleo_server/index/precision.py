"""Half precision for what is stored: a memory's sentence vectors and sparse weights as float16.

The database and the index keep the same values: the index widens them to float32 as it takes them,
so a memory scores the same before and after a restart. A float16 keeps 11 significant bits (a
relative error of at most 2^-11), below what moves a ranking (SciFact and LoCoMo nDCG/Recall the
same to three places; the README's "Bytes per memory"). Per-token heads are kept as codes
(:func:`teleo_server.index.tokens.to_codes`); other vectors pass through.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from teleo_server.domain import ChunkEmbedding, EmbeddingSet
from teleo_server.heads import HeadKind, SparseVector, heads
from teleo_server.index.tokens import TokenCodec, to_codes


def _fits(values: np.ndarray) -> np.ndarray | None:
    """``values`` as float16, or None when a value would not survive it (beyond float16's range:
    a plugin head's unnormalised vector keeps float32)."""
    if values.size and float(np.abs(values).max()) > float(np.finfo(np.float16).max):
        return None
    return values.astype(np.float16)


def _half(head: str, v):
    if isinstance(v, SparseVector):
        half = _fits(v.weights) if v.weights.dtype == np.float32 else None
        return v if half is None else SparseVector(v.ids, half)
    spec = heads().get(head)
    if spec is not None and spec.kind is HeadKind.DENSE and isinstance(v, np.ndarray) and v.ndim == 1 \
            and v.dtype == np.float32:
        half = _fits(v)
        return v if half is None else half
    return v


def half_floats(emb: EmbeddingSet) -> EmbeddingSet:
    """``emb`` with every dense head's vector and every sparse head's weights as float16."""
    return EmbeddingSet(emb.model_version, [ChunkEmbedding({h: _half(h, v) for h, v in ch.vectors.items()}, ch.start, ch.end)
                                            for ch in emb.chunks])


def stored_form(emb: EmbeddingSet, codecs: Mapping[str, TokenCodec]) -> EmbeddingSet:
    """``emb`` as the database stores it and the index takes it: the per-token heads of ``codecs``
    as their codes, sentence vectors and sparse weights as float16."""
    return half_floats(to_codes(emb, codecs))


__all__ = ["half_floats", "stored_form"]
