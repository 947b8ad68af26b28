"""The tensors of the ``teleo_embed`` Triton model, packed and unpacked in one place.

``triton_models/teleo_embed/config.pbtxt`` declares the same names. For a request of B texts
(C = most chunks of any text, T = most word pieces of any chunk, S = most sparse terms)::

    TEXT            BYTES  (B, 1)   utf-8
    ROLE            BYTES  (B, 1)   b"query" | b"document"
    CHUNK_COUNT     INT32  (B, 1)
    CHUNK_SPAN      INT32  (B, C, 2)       character [start, end) within the text
    DENSE           FP32   (B, C, 384)
    TOKENS          FP16   (B, C, T, 384)  rows past TOKEN_COUNT are zero
    TOKEN_COUNT     INT32  (B, C)
    SPARSE_IDS      INT32  (B, C, S)       ascending ids; entries past SPARSE_COUNT are zero
    SPARSE_WEIGHTS  FP32   (B, C, S)
    SPARSE_COUNT    INT32  (B, C)
    MODEL_VERSION   BYTES  (B, 1)
"""

from __future__ import annotations

import numpy as np

from teleo_server.domain import ChunkEmbedding, EmbeddingSet
from teleo_server.embedding.models import DENSE_DIM

INPUTS = ("TEXT", "ROLE")
OUTPUTS = ("CHUNK_COUNT", "CHUNK_SPAN", "DENSE", "TOKENS", "TOKEN_COUNT", "SPARSE_IDS",
           "SPARSE_WEIGHTS", "SPARSE_COUNT", "MODEL_VERSION")


def pack(sets: list[EmbeddingSet]) -> dict[str, np.ndarray]:
    """Padded output tensors for a list of embedding sets (shapes in the module docstring)."""
    b = len(sets)
    c = max([len(s.chunks) for s in sets] + [1])
    t = max([len(ch.tokens) for s in sets for ch in s.chunks] + [1])
    n = max([len(ch.sparse_ids) for s in sets for ch in s.chunks] + [1])
    out = {
        "CHUNK_COUNT": np.zeros((b, 1), np.int32),
        "CHUNK_SPAN": np.zeros((b, c, 2), np.int32),
        "DENSE": np.zeros((b, c, DENSE_DIM), np.float32),
        "TOKENS": np.zeros((b, c, t, DENSE_DIM), np.float16),
        "TOKEN_COUNT": np.zeros((b, c), np.int32),
        "SPARSE_IDS": np.zeros((b, c, n), np.int32),
        "SPARSE_WEIGHTS": np.zeros((b, c, n), np.float32),
        "SPARSE_COUNT": np.zeros((b, c), np.int32),
        "MODEL_VERSION": np.array([[s.model_version.encode()] for s in sets], dtype=np.object_),
    }
    for i, s in enumerate(sets):
        out["CHUNK_COUNT"][i, 0] = len(s.chunks)
        for j, ch in enumerate(s.chunks):
            out["CHUNK_SPAN"][i, j] = (ch.start, ch.end)
            out["DENSE"][i, j] = ch.dense
            out["TOKENS"][i, j, :len(ch.tokens)] = ch.tokens
            out["TOKEN_COUNT"][i, j] = len(ch.tokens)
            out["SPARSE_IDS"][i, j, :len(ch.sparse_ids)] = ch.sparse_ids
            out["SPARSE_WEIGHTS"][i, j, :len(ch.sparse_weights)] = ch.sparse_weights
            out["SPARSE_COUNT"][i, j] = len(ch.sparse_ids)
    return out


def unpack(arrays: dict[str, np.ndarray]) -> list[EmbeddingSet]:
    """The inverse of :func:`pack`; copies so the sets do not pin the response buffers."""
    counts = arrays["CHUNK_COUNT"].reshape(-1)
    versions = arrays["MODEL_VERSION"].reshape(-1)
    sets = []
    for i, n_chunks in enumerate(counts):
        chunks = []
        for j in range(int(n_chunks)):
            t = int(arrays["TOKEN_COUNT"][i, j])
            s = int(arrays["SPARSE_COUNT"][i, j])
            start, end = (int(v) for v in arrays["CHUNK_SPAN"][i, j])
            chunks.append(ChunkEmbedding(
                dense=np.array(arrays["DENSE"][i, j], dtype=np.float32),
                tokens=np.array(arrays["TOKENS"][i, j, :t], dtype=np.float16),
                sparse_ids=np.array(arrays["SPARSE_IDS"][i, j, :s], dtype=np.int32),
                sparse_weights=np.array(arrays["SPARSE_WEIGHTS"][i, j, :s], dtype=np.float32),
                start=start, end=end,
            ))
        version = versions[i]
        sets.append(EmbeddingSet(version.decode() if isinstance(version, bytes) else str(version),
                                 chunks))
    return sets


def encode_strings(values: list[str]) -> np.ndarray:
    """BYTES tensor (B, 1) of utf-8 strings."""
    return np.array([[v.encode("utf-8")] for v in values], dtype=np.object_).reshape(-1, 1)


def decode_strings(tensor: np.ndarray) -> list[str]:
    """A BYTES tensor (B, 1) back to str; raises UnicodeDecodeError on bad utf-8."""
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in tensor.reshape(-1)]


__all__ = ["INPUTS", "OUTPUTS", "decode_strings", "encode_strings", "pack", "unpack"]
