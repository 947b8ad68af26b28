"""The tensors of the ``teleo_embed`` Triton model, packed and unpacked in one place.

The outputs follow the head registry (:mod:`teleo_server.heads`); ``output_config`` renders the
``output [...]`` block of ``triton_models/teleo_embed/config.pbtxt`` from it, and ``make models``
writes that block. For a request of B texts (C = most chunks of any text, T = most word pieces of
any chunk, S = most terms of any chunk; entries past a count are zero)::

    TEXT            BYTES  (B, 1)   utf-8
    ROLE            BYTES  (B, 1)   b"query" | b"document"
    CHUNK_COUNT     INT32  (B, 1)
    CHUNK_SPAN      INT32  (B, C, 2)       character [start, end) within the text
    MODEL_VERSION   BYTES  (B, 1)
  per head H (upper-cased name), by kind:
    dense    H                   (B, C, dim)
    tokens   H (B, C, T, dim),   H_COUNT INT32 (B, C)
    sparse   H_IDS INT32 (B, C, S), H_WEIGHTS (B, C, S), H_COUNT INT32 (B, C)
"""

from __future__ import annotations

import numpy as np

from teleo_server.domain import ChunkEmbedding, EmbeddingSet
from teleo_server.heads import Head, HeadKind, SparseVector, Vector, heads

INPUTS = ("TEXT", "ROLE")
_FIXED = (("CHUNK_COUNT", "int32", "1"), ("CHUNK_SPAN", "int32", "-1, 2"))
_TRITON_TYPES = {"int32": "TYPE_INT32", "float32": "TYPE_FP32", "float16": "TYPE_FP16"}


def head_tensors(head: Head) -> list[tuple[str, str, str]]:
    """(tensor name, numpy dtype, Triton dims without the batch axis) of one head's outputs."""
    n = head.name.upper()
    if head.kind is HeadKind.DENSE:
        return [(n, head.dtype, f"-1, {head.dim}")]
    if head.kind is HeadKind.TOKENS:
        return [(n, head.dtype, f"-1, -1, {head.dim}"), (f"{n}_COUNT", "int32", "-1")]
    return [(f"{n}_IDS", "int32", "-1, -1"), (f"{n}_WEIGHTS", head.dtype, "-1, -1"),
            (f"{n}_COUNT", "int32", "-1")]


def outputs(only: dict[str, Head] | None = None) -> list[str]:
    """Every output tensor name, for the registered heads (or ``only``)."""
    names = [name for name, _, _ in _FIXED]
    for head in (only or heads()).values():
        names += [name for name, _, _ in head_tensors(head)]
    return names + ["MODEL_VERSION"]


def output_config() -> str:
    """The ``output [...]`` block of teleo_embed's config.pbtxt for the registered heads."""
    rows = [(name, dtype, dims) for name, dtype, dims in _FIXED]
    for head in heads().values():
        rows += head_tensors(head)
    lines = [f'  {{ name: "{name}" data_type: {_TRITON_TYPES[dtype]} dims: [ {dims} ] }}'
             for name, dtype, dims in rows]
    lines.append('  { name: "MODEL_VERSION" data_type: TYPE_STRING dims: [ 1 ] }')
    return "output [\n" + ",\n".join(lines) + "\n]"


def pack(sets: list[EmbeddingSet]) -> dict[str, np.ndarray]:
    """Padded output tensors for a list of embedding sets (shapes in the module docstring)."""
    b = len(sets)
    c = max([len(s.chunks) for s in sets] + [1])
    chunks = [ch for s in sets for ch in s.chunks]
    out = {
        "CHUNK_COUNT": np.zeros((b, 1), np.int32),
        "CHUNK_SPAN": np.zeros((b, c, 2), np.int32),
        "MODEL_VERSION": np.array([[s.model_version.encode()] for s in sets], dtype=np.object_),
    }
    for head in heads().values():
        n = head.name.upper()
        width = max([_length(ch.vectors[head.name]) for ch in chunks] + [1])
        if head.kind is HeadKind.DENSE:
            out[n] = np.zeros((b, c, head.dim), head.dtype)
        elif head.kind is HeadKind.TOKENS:
            out[n] = np.zeros((b, c, width, head.dim), head.dtype)
            out[f"{n}_COUNT"] = np.zeros((b, c), np.int32)
        else:
            out[f"{n}_IDS"] = np.zeros((b, c, width), np.int32)
            out[f"{n}_WEIGHTS"] = np.zeros((b, c, width), head.dtype)
            out[f"{n}_COUNT"] = np.zeros((b, c), np.int32)
    for i, s in enumerate(sets):
        out["CHUNK_COUNT"][i, 0] = len(s.chunks)
        for j, ch in enumerate(s.chunks):
            out["CHUNK_SPAN"][i, j] = (ch.start, ch.end)
            for head in heads().values():
                n, v = head.name.upper(), ch.vectors[head.name]
                if head.kind is HeadKind.DENSE:
                    out[n][i, j] = v
                elif head.kind is HeadKind.TOKENS:
                    out[n][i, j, :len(v)] = v
                    out[f"{n}_COUNT"][i, j] = len(v)
                else:
                    out[f"{n}_IDS"][i, j, :v.size] = v.ids
                    out[f"{n}_WEIGHTS"][i, j, :v.size] = v.weights
                    out[f"{n}_COUNT"][i, j] = v.size
    return out


def _length(v: Vector) -> int:
    return v.size if isinstance(v, SparseVector) else (len(v) if v.ndim == 2 else 1)


def unpack(arrays: dict[str, np.ndarray]) -> list[EmbeddingSet]:
    """The inverse of :func:`pack` for every registered head; copies, so the sets do not pin the
    response buffers."""
    counts = arrays["CHUNK_COUNT"].reshape(-1)
    versions = arrays["MODEL_VERSION"].reshape(-1)
    sets = []
    for i, n_chunks in enumerate(counts):
        chunks = []
        for j in range(int(n_chunks)):
            vectors: dict[str, Vector] = {}
            for head in heads().values():
                n = head.name.upper()
                if head.kind is HeadKind.DENSE:
                    vectors[head.name] = np.array(arrays[n][i, j], dtype=head.dtype)
                elif head.kind is HeadKind.TOKENS:
                    t = int(arrays[f"{n}_COUNT"][i, j])
                    vectors[head.name] = np.array(arrays[n][i, j, :t], dtype=head.dtype)
                else:
                    s = int(arrays[f"{n}_COUNT"][i, j])
                    vectors[head.name] = SparseVector.of(arrays[f"{n}_IDS"][i, j, :s],
                                                         arrays[f"{n}_WEIGHTS"][i, j, :s])
            start, end = (int(v) for v in arrays["CHUNK_SPAN"][i, j])
            chunks.append(ChunkEmbedding(vectors, start=start, end=end))
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


__all__ = ["INPUTS", "decode_strings", "encode_strings", "head_tensors", "output_config",
           "outputs", "pack", "unpack"]
