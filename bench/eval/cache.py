"""Embeddings of evaluation texts, computed once with the in-process engine and kept under var/.

A cache directory holds shards of ``SHARD`` texts each, the model repository's three heads (dense,
tokens, splade) packed as flat arrays, keyed by the engine's model version, the role (query/document)
and a hash of the texts, so a changed model or text set never reuses stale vectors. Interrupted runs
resume at the first missing shard.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np
import structlog

from teleo_server.domain import ChunkEmbedding, EmbeddingSet
from teleo_server.heads import DENSE, SPLADE, TOKENS, SparseVector

log = structlog.get_logger(__name__)
SHARD = 256


def _key(texts: list[str], version: str, is_query: bool) -> str:
    h = hashlib.sha256(version.encode())
    h.update(b"q" if is_query else b"d")
    for t in texts:
        h.update(hashlib.sha256(t.encode("utf-8")).digest())
    return h.hexdigest()[:16]


def _pack(sets: list[EmbeddingSet]) -> dict[str, np.ndarray]:
    chunks = [c for s in sets for c in s.chunks]
    counts = np.array([len(s.chunks) for s in sets], dtype=np.int64)
    dense = [c.vectors[DENSE.name] for c in chunks]
    tokens = [c.vectors[TOKENS.name] for c in chunks]
    sparse = [c.vectors[SPLADE.name] for c in chunks]
    dim = DENSE.dim
    return {
        "chunk_offsets": np.r_[0, np.cumsum(counts)],
        "dense": np.stack(dense) if chunks else np.zeros((0, dim), np.float32),
        "spans": np.array([(c.start, c.end) for c in chunks], dtype=np.int64).reshape(-1, 2),
        "tok_offsets": np.r_[0, np.cumsum([t.shape[0] for t in tokens])].astype(np.int64),
        "tokens": np.concatenate(tokens).astype(np.float16) if chunks else np.zeros((0, dim), np.float16),
        "sp_offsets": np.r_[0, np.cumsum([v.size for v in sparse])].astype(np.int64),
        "sp_ids": np.concatenate([v.ids for v in sparse]).astype(np.int32) if chunks else np.zeros(0, np.int32),
        "sp_weights": np.concatenate([v.weights for v in sparse]).astype(np.float32) if chunks else np.zeros(0, np.float32),
    }


def _unpack(z: dict[str, np.ndarray], version: str) -> list[EmbeddingSet]:
    co, to, so = z["chunk_offsets"], z["tok_offsets"], z["sp_offsets"]
    out = []
    for i in range(co.size - 1):
        chunks = []
        for c in range(int(co[i]), int(co[i + 1])):
            chunks.append(ChunkEmbedding(
                {DENSE.name: z["dense"][c], TOKENS.name: z["tokens"][to[c]:to[c + 1]],
                 SPLADE.name: SparseVector.of(z["sp_ids"][so[c]:so[c + 1]], z["sp_weights"][so[c]:so[c + 1]])},
                start=int(z["spans"][c, 0]), end=int(z["spans"][c, 1])))
        out.append(EmbeddingSet(version, chunks))
    return out


def embed_cached(texts: list[str], is_query: bool, cache_dir: Path, engine_factory, label: str) -> list[EmbeddingSet]:
    """Embeddings of ``texts`` from the cache, computing missing shards with the engine."""
    engine = None
    version_file = cache_dir / "VERSION"
    version = version_file.read_text().strip() if version_file.exists() else None
    if version is None:
        engine = engine_factory()
        version = engine.version
        cache_dir.mkdir(parents=True, exist_ok=True)
        version_file.write_text(version)
    folder = cache_dir / f"{label}-{_key(texts, version, is_query)}"
    folder.mkdir(parents=True, exist_ok=True)
    out: list[EmbeddingSet] = []
    t0 = time.perf_counter()
    for lo in range(0, len(texts), SHARD):
        path = folder / f"{lo // SHARD:05d}.npz"
        if not path.exists():
            if engine is None:
                engine = engine_factory()
                if engine.version != version:
                    raise RuntimeError(f"cache {cache_dir} holds {version}, engine is {engine.version}; remove it")
            part = texts[lo : lo + SHARD]
            sets = engine.embed(part, [is_query] * len(part))
            tmp = path.with_suffix(".tmp.npz")
            np.savez(tmp, **_pack(sets))
            tmp.rename(path)
            log.info("eval_embedded", label=label, done=min(lo + SHARD, len(texts)), total=len(texts),
                     elapsed_s=round(time.perf_counter() - t0, 1))
        with np.load(path) as z:
            out.extend(_unpack({k: z[k] for k in z.files}, version))
    return out


__all__ = ["embed_cached"]
