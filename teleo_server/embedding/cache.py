"""An on-disk embedding cache, so re-ingesting a text or re-running a benchmark never re-embeds
(documents; recent queries are kept in memory, see :class:`CachedEmbedder`).

One SQLite file (``<cache_dir>/embeddings.sqlite3``, WAL mode, safe across processes), keyed by
``(model_version, role, sha256(text))``. The model version names the weights, pooling code,
chunking and query cap (see ``engine.version_string``), so a changed model never serves stale
vectors. Values are uncompressed ``.npz`` blobs of one EmbeddingSet.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from teleo_server.domain import ChunkEmbedding, EmbeddingSet
from teleo_server.embedding.base import Embedder, TextRole, check_texts
from teleo_server.heads import SPLADE, SparseVector, Vector
from teleo_server.workers import DEFAULT_NICE, worker_pool

log = structlog.get_logger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    model_version TEXT NOT NULL,
    role TEXT NOT NULL,
    text_sha256 TEXT NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (model_version, role, text_sha256)
) WITHOUT ROWID
"""


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def dumps(s: EmbeddingSet) -> bytes:
    """One set as an ``.npz`` blob: ``spans`` and, per chunk i and head h, ``h.i`` (a dense or
    per-token head) or ``h.i.ids`` / ``h.i.weights`` (a sparse head)."""
    arrays: dict[str, np.ndarray] = {
        "spans": np.array([(c.start, c.end) for c in s.chunks], np.int64).reshape(-1, 2)}
    for i, c in enumerate(s.chunks):
        for name, v in c.vectors.items():
            if isinstance(v, SparseVector):
                arrays[f"{name}.{i}.ids"], arrays[f"{name}.{i}.weights"] = v.ids, v.weights
            else:
                arrays[f"{name}.{i}"] = v
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


# The layout before named heads (per chunk: dense{i}, tokens{i}, ids{i}, weights{i}).
_LEGACY = {"dense": "dense", "tokens": "tokens"}


def loads(blob: bytes, model_version: str) -> EmbeddingSet:
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        spans = z["spans"]
        vectors: list[dict[str, Vector]] = [{} for _ in range(len(spans))]
        for key in z.files:
            if key == "spans":
                continue
            if "." not in key:  # legacy layout
                stem = key.rstrip("0123456789")
                i = int(key[len(stem):])
                if stem in _LEGACY:
                    vectors[i][_LEGACY[stem]] = z[key]
                elif stem == "ids":
                    vectors[i][SPLADE.name] = SparseVector.of(z[key], z[f"weights{i}"])
                continue
            name, i, *part = key.split(".")
            if not part:
                vectors[int(i)][name] = z[key]
            elif part == ["ids"]:
                vectors[int(i)][name] = SparseVector.of(z[key], z[f"{name}.{i}.weights"])
        chunks = [ChunkEmbedding(v, start=int(spans[i, 0]), end=int(spans[i, 1]))
                  for i, v in enumerate(vectors)]
    return EmbeddingSet(model_version, chunks)


class EmbeddingCache:
    """Get and put EmbeddingSets by (model version, role, text). Thread-safe."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "embeddings.sqlite3"
        self._lock = threading.Lock()
        # a short lock wait: a cache that is busy elsewhere is a miss, not a stall
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=1.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)
        self._db.commit()

    def get_many(self, model_version: str, role: TextRole,
                 texts: list[str]) -> list[EmbeddingSet | None]:
        """Cached sets (None for a miss). The cache is derived data: a failing read is all misses."""
        keys = [text_key(t) for t in texts]
        found: dict[str, bytes] = {}
        try:
            with self._lock:
                for start in range(0, len(keys), 500):  # SQLite's bound-parameter limit
                    part = keys[start:start + 500]
                    rows = self._db.execute(
                        "SELECT text_sha256, value FROM embeddings WHERE model_version = ? AND "
                        f"role = ? AND text_sha256 IN ({','.join('?' * len(part))})",
                        [model_version, role.value, *part]).fetchall()
                    found.update(rows)
        except sqlite3.Error as exc:
            log.warning("embed_cache.read_failed", path=str(self.path), error=str(exc))
            return [None] * len(keys)
        return [loads(found[k], model_version) if k in found else None for k in keys]

    def put_many(self, role: TextRole, texts: list[str], sets: list[EmbeddingSet]) -> bool:
        """Store sets; False when the write failed (a full disk, a lock): the cache is derived data,
        so embedding goes on without it."""
        rows = [(s.model_version, role.value, text_key(t), dumps(s)) for t, s in zip(texts, sets)]
        with self._lock:
            try:
                self._db.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?)", rows)
                self._db.commit()
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.rollback()
                log.warning("embed_cache.write_failed", path=str(self.path), error=str(exc))
                return False
        return True

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


class CachedEmbedder:
    """An Embedder that answers from an :class:`EmbeddingCache` first and embeds only misses.

    Documents: the cache is read and written on one thread of its own (``nice`` steps below the
    event loop, as the embedding worker runs), in the order of the calls, so a lookup always sees
    the writes of the calls before it. A call returns its vectors as soon as they are made; their
    write to the cache follows on that thread. Past ``max_pending_writes`` queued writes a call
    waits for its own, so a bulk load never queues more than that; :meth:`close` waits for every
    write.

    Queries never touch the disk: the last ``query_entries`` distinct queries are kept in memory
    (least recently used out first). A query is embedded in a few milliseconds and is seldom
    asked twice word for word, while a lookup and a write on disk for each took a retrieval about
    1 ms longer end to end through the server (2-core CPU: the write runs beside the pipeline).
    """

    def __init__(self, inner: Embedder, cache: EmbeddingCache, max_pending_writes: int = 32,
                 nice: int = DEFAULT_NICE, query_entries: int = 128) -> None:
        self.inner = inner
        self.nice = nice
        self.cache = cache
        self.hits = 0
        self.misses = 0
        self.max_pending_writes = max_pending_writes
        self.query_entries = query_entries
        self._queries: OrderedDict[tuple[str, str], EmbeddingSet] = OrderedDict()
        self._io: Executor | None = None
        self._writes: set[asyncio.Future] = set()

    @property
    def model_version(self) -> str:
        return self.inner.model_version

    @property
    def description(self) -> str:
        return f"{self.inner.description} (cached)"

    @property
    def pending_writes(self) -> int:
        """Cache writes queued or running."""
        return len(self._writes)

    async def start(self) -> None:
        await self.inner.start()

    async def ready(self) -> bool:
        return await self.inner.ready()

    def _on_io(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future:
        if self._io is None:
            self._io = worker_pool("teleo-embed-cache", self.nice)
        return asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    async def embed(self, texts: list[str], role: TextRole) -> list[EmbeddingSet]:
        check_texts(texts)
        if role is TextRole.QUERY:
            return await self._embed_queries(texts)
        version = self.inner.model_version
        cached = await self._on_io(self.cache.get_many, version, role, texts)
        missing = list(dict.fromkeys(t for t, c in zip(texts, cached) if c is None))
        self.hits += len(texts) - sum(c is None for c in cached)
        self.misses += len(missing)
        if missing:
            fresh = dict(zip(missing, await self.inner.embed(missing, role)))
            write = self._on_io(self.cache.put_many, role, missing, [fresh[t] for t in missing])
            self._writes.add(write)
            write.add_done_callback(self._written)
            if len(self._writes) > self.max_pending_writes:
                await asyncio.shield(write)
            cached = [c if c is not None else fresh[t] for t, c in zip(texts, cached)]
        return [c for c in cached if c is not None]

    async def _embed_queries(self, texts: list[str]) -> list[EmbeddingSet]:
        """Queries from the in-memory entries, the rest embedded and kept (nothing on disk)."""
        version = self.inner.model_version
        known = self._queries
        got: dict[str, EmbeddingSet] = {}
        missing: list[str] = []
        for t in dict.fromkeys(texts):
            hit = known.get((version, t))
            if hit is None:
                missing.append(t)
            else:
                known.move_to_end((version, t))
                got[t] = hit
        self.hits += sum(t in got for t in texts)
        self.misses += len(missing)
        if missing:
            for t, emb in zip(missing, await self.inner.embed(missing, TextRole.QUERY)):
                got[t] = known[(version, t)] = emb
            while len(known) > self.query_entries:
                known.popitem(last=False)
        return [got[t] for t in texts]

    def _written(self, write: asyncio.Future) -> None:
        self._writes.discard(write)
        if not write.cancelled() and write.exception() is not None:
            log.warning("embed_cache.write_failed", path=str(self.cache.path), error=repr(write.exception()))

    async def close(self) -> None:
        await self.inner.close()
        if self._writes:  # put_many reports its own failures; none raises
            await asyncio.gather(*list(self._writes), return_exceptions=True)
        if self._io is not None:
            self._io.shutdown(wait=True)
            self._io = None
        self.cache.close()


__all__ = ["CachedEmbedder", "EmbeddingCache", "dumps", "loads", "text_key"]
