"""The on-disk embedding cache: exact round trips, keys, persistence, and skipped re-embedding."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

from teleo_server.domain import ChunkEmbedding, EmbeddingSet
from teleo_server.embedding.base import TextRole
from teleo_server.embedding.cache import CachedEmbedder, EmbeddingCache, dumps, loads
from teleo_server.embedding.inprocess import InProcessEmbedder
from teleo_server.embedding.repository import ModelFiles, default_model_dir

MODEL_DIR = default_model_dir()
needs_models = pytest.mark.skipif(
    bool(ModelFiles.in_dir(MODEL_DIR).missing()),
    reason="model repository not materialised: run `make models`")


def _random_set(rng: np.random.Generator, chunks: int, version: str = "v1") -> EmbeddingSet:
    out = []
    for i in range(chunks):
        t, s = int(rng.integers(0, 20)), int(rng.integers(0, 30))
        out.append(ChunkEmbedding.from_models(
            dense=rng.standard_normal(384).astype(np.float32),
            tokens=rng.standard_normal((t, 384)).astype(np.float16),
            sparse_ids=np.sort(rng.choice(30522, s, replace=False)).astype(np.int32),
            sparse_weights=rng.random(s).astype(np.float32),
            start=i * 10, end=i * 10 + 15))
    return EmbeddingSet(version, out)


def _assert_same(a: EmbeddingSet, b: EmbeddingSet) -> None:
    assert a.model_version == b.model_version and len(a.chunks) == len(b.chunks)
    for x, y in zip(a.chunks, b.chunks):
        assert x.vectors.keys() == y.vectors.keys()
        for head in x.vectors:
            xs, ys = x.vectors[head], y.vectors[head]
            pairs = [(xs.ids, ys.ids), (xs.weights, ys.weights)] if head == "splade" else [(xs, ys)]
            for u, v in pairs:
                assert u.dtype == v.dtype and u.shape == v.shape
                np.testing.assert_array_equal(u, v)
        assert (x.start, x.end) == (y.start, y.end)


def test_blobs_written_before_named_heads_still_load():
    """A cache filled by an older server (fixed dense/tokens/ids/weights arrays) is still served."""
    import io

    s = _random_set(np.random.default_rng(3), 2)
    arrays = {"spans": np.array([(c.start, c.end) for c in s.chunks], np.int64)}
    for i, c in enumerate(s.chunks):
        arrays[f"dense{i}"], arrays[f"tokens{i}"] = c.vectors["dense"], c.vectors["tokens"]
        arrays[f"ids{i}"], arrays[f"weights{i}"] = c.vectors["splade"].ids, c.vectors["splade"].weights
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    _assert_same(loads(buf.getvalue(), "v1"), s)


@pytest.mark.parametrize("chunks", [0, 1, 4])
def test_blob_round_trip_is_exact(chunks):
    s = _random_set(np.random.default_rng(chunks), chunks)
    _assert_same(loads(dumps(s), "v1"), s)


def test_keys_separate_versions_roles_and_texts_and_persist(tmp_path: Path):
    rng = np.random.default_rng(0)
    a, b = _random_set(rng, 2, "v1"), _random_set(rng, 1, "v2")
    cache = EmbeddingCache(tmp_path)
    cache.put_many(TextRole.DOCUMENT, ["alpha"], [a])
    cache.put_many(TextRole.DOCUMENT, ["alpha"], [b])
    assert cache.get_many("v1", TextRole.QUERY, ["alpha"]) == [None]
    assert cache.get_many("v3", TextRole.DOCUMENT, ["alpha"]) == [None]
    [hit, miss] = cache.get_many("v1", TextRole.DOCUMENT, ["alpha", "beta"])
    assert miss is None and hit is not None
    _assert_same(hit, a)
    cache.close()
    reopened = EmbeddingCache(tmp_path)
    assert len(reopened) == 2
    _assert_same(reopened.get_many("v2", TextRole.DOCUMENT, ["alpha"])[0], b)
    reopened.close()


def test_many_keys_in_one_lookup(tmp_path: Path):
    rng = np.random.default_rng(1)
    texts = [f"text {i}" for i in range(1200)]
    cache = EmbeddingCache(tmp_path)
    cache.put_many(TextRole.DOCUMENT, texts[::2], [_random_set(rng, 1) for _ in texts[::2]])
    got = cache.get_many("v1", TextRole.DOCUMENT, texts)
    assert [g is not None for g in got] == [i % 2 == 0 for i in range(len(texts))]
    cache.close()


class _Counting:
    """Wraps a real embedder and records which texts reached it."""

    def __init__(self, inner):
        self.inner = inner
        self.seen: list[str] = []

    model_version = property(lambda self: self.inner.model_version)
    description = property(lambda self: self.inner.description)

    async def start(self):
        await self.inner.start()

    async def ready(self):
        return await self.inner.ready()

    async def embed(self, texts, role):
        self.seen.extend(texts)
        return await self.inner.embed(texts, role)

    async def close(self):
        await self.inner.close()


@needs_models
def test_cached_embedder_embeds_each_text_once(tmp_path: Path):
    counting = _Counting(InProcessEmbedder(MODEL_DIR, threads=1))
    embedder = CachedEmbedder(counting, EmbeddingCache(tmp_path))

    async def run():
        await embedder.start()
        try:
            first = await embedder.embed(["a memory", "another", "a memory"], TextRole.DOCUMENT)
            second = await embedder.embed(["another", "new one", "a memory"], TextRole.DOCUMENT)
            query = await embedder.embed(["a memory"], TextRole.QUERY)
            return first, second, query
        finally:
            await embedder.close()

    first, second, query = asyncio.run(run())
    assert counting.seen == ["a memory", "another", "new one", "a memory"]
    _assert_same(first[0], second[2])
    _assert_same(first[1], second[0])
    _assert_same(first[0], first[2])
    assert len(query[0].chunks[0].vectors["splade"].ids) <= 64
    assert embedder.hits == 2 and embedder.misses == 4   # a duplicate within a call is no hit


@needs_models
def test_a_cache_that_cannot_be_written_never_fails_embedding(tmp_path: Path):
    """A full disk under the cache (here SQLite's own size cap): embedding goes on without it."""
    cache = EmbeddingCache(tmp_path)
    pages = cache._db.execute("PRAGMA page_count").fetchone()[0]
    cache._db.execute(f"PRAGMA max_page_count = {pages}")
    embedder = CachedEmbedder(InProcessEmbedder(MODEL_DIR, threads=1), cache)

    async def run():
        await embedder.start()
        try:
            (got,) = await embedder.embed(["kept out of a full cache"], TextRole.DOCUMENT)
            return got, cache.put_many(TextRole.DOCUMENT, ["x"], [got])
        finally:
            await embedder.close()

    got, stored = asyncio.run(run())
    assert got.chunks and got.chunks[0].vectors["dense"].shape == (384,) and stored is False
    assert EmbeddingCache(tmp_path).get_many(got.model_version, TextRole.DOCUMENT, ["kept out of a full cache"]) == [None]


class _GatedCache(EmbeddingCache):
    """A real cache whose writes wait until ``gate`` is set."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.gate = threading.Event()

    def put_many(self, role, texts, sets):
        self.gate.wait(30)
        return super().put_many(role, texts, sets)


@needs_models
def test_a_call_returns_before_its_vectors_reach_the_cache_and_lookups_stay_in_order(tmp_path: Path):
    cache = _GatedCache(tmp_path)
    embedder = CachedEmbedder(InProcessEmbedder(MODEL_DIR, threads=1), cache)

    async def run():
        await embedder.start()
        try:
            (got,) = await asyncio.wait_for(embedder.embed(["staging runs in eu-west-1"], TextRole.DOCUMENT), 20)
            pending = embedder.pending_writes
            on_disk = EmbeddingCache(tmp_path).get_many(got.model_version, TextRole.DOCUMENT, ["staging runs in eu-west-1"])
            cache.gate.set()
            # queued behind the write, so the lookup finds it: no second embedding
            (again,) = await embedder.embed(["staging runs in eu-west-1"], TextRole.DOCUMENT)
            last = await embedder.embed(["written by the time close returns"], TextRole.DOCUMENT)
            return got, again, last[0], pending, on_disk
        finally:
            await embedder.close()

    got, again, last, pending, on_disk = asyncio.run(run())
    assert pending == 1 and on_disk == [None]
    _assert_same(got, again)
    assert (embedder.hits, embedder.misses, embedder.pending_writes) == (1, 2, 0)
    (stored,) = EmbeddingCache(tmp_path).get_many(got.model_version, TextRole.DOCUMENT, ["written by the time close returns"])
    assert stored is not None
    _assert_same(stored, last)


@needs_models
def test_past_the_pending_limit_a_call_waits_for_its_write(tmp_path: Path):
    embedder = CachedEmbedder(InProcessEmbedder(MODEL_DIR, threads=1), EmbeddingCache(tmp_path), max_pending_writes=0)

    async def run():
        await embedder.start()
        try:
            (got,) = await embedder.embed(["a bulk load's text"], TextRole.DOCUMENT)
            return got, embedder.pending_writes, embedder.cache.get_many(got.model_version, TextRole.DOCUMENT,
                                                                         ["a bulk load's text"])
        finally:
            await embedder.close()

    got, pending, (stored,) = asyncio.run(run())
    assert pending == 0 and stored is not None
    _assert_same(stored, got)


@needs_models
def test_queries_are_kept_in_memory_only_and_the_oldest_leave_first(tmp_path: Path):
    counting = _Counting(InProcessEmbedder(MODEL_DIR, threads=1))
    embedder = CachedEmbedder(counting, EmbeddingCache(tmp_path), query_entries=2)

    async def run():
        await embedder.start()
        try:
            first = await embedder.embed(["which region is staging in", "who owns billing"], TextRole.QUERY)
            again = await embedder.embed(["which region is staging in"], TextRole.QUERY)  # now the newest
            await embedder.embed(["when is the launch"], TextRole.QUERY)  # "who owns billing" leaves
            last = await embedder.embed(["who owns billing", "which region is staging in"], TextRole.QUERY)
            return first, again, last, embedder.pending_writes
        finally:
            await embedder.close()

    first, again, last, pending = asyncio.run(run())
    assert counting.seen == ["which region is staging in", "who owns billing", "when is the launch", "who owns billing"]
    _assert_same(first[0], again[0])
    _assert_same(first[0], last[1])
    _assert_same(first[1], last[0])  # embedded again: the same vectors
    assert (embedder.hits, embedder.misses, pending) == (2, 4, 0)
    # nothing went to disk: a restart embeds queries afresh, and the file holds documents only
    version = first[0].model_version
    assert EmbeddingCache(tmp_path).get_many(version, TextRole.QUERY, ["which region is staging in"]) == [None]
    assert len(EmbeddingCache(tmp_path)) == 0


def test_the_query_cache_size_setting_reaches_the_cache(tmp_path: Path):
    from teleo_server.embedding.factory import make_embedder
    from teleo_server.embedding.settings import EmbeddingSettings

    embedder = make_embedder(EmbeddingSettings(cache_dir=tmp_path, query_cache_entries=5))
    assert isinstance(embedder, CachedEmbedder) and embedder.query_entries == 5
    embedder.cache.close()
    assert not isinstance(make_embedder(EmbeddingSettings(cache_dir=None)), CachedEmbedder)
