"""The in-process embedder, its settings and the factory, on the real models."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pydantic
import pytest

from teleo_server import errors
from teleo_server.embedding import EmbeddingSettings, TextRole, make_embedder
from teleo_server.embedding.cache import CachedEmbedder
from teleo_server.embedding.chunking import ChunkPlan
from teleo_server.embedding.inprocess import InProcessEmbedder
from teleo_server.embedding.repository import ModelFiles, default_model_dir

MODEL_DIR = default_model_dir()
pytestmark = pytest.mark.skipif(
    bool(ModelFiles.in_dir(MODEL_DIR).missing()),
    reason="model repository not materialised: run `make models`")


async def _embed(embedder, texts, role):
    await embedder.start()
    try:
        return await embedder.embed(texts, role)
    finally:
        await embedder.close()


def test_embedding_set_shapes_dtypes_and_norms():
    text = "The agent remembers that the user prefers short answers."
    [s] = asyncio.run(_embed(InProcessEmbedder(MODEL_DIR, threads=1), [text], TextRole.DOCUMENT))
    assert s.model_version.startswith("minilm-l6-v2-int8.") and "+c254o32q64" in s.model_version
    [c] = s.chunks
    assert (c.start, c.end) == (0, len(text))
    assert c.vectors["dense"].dtype == np.float32 and c.vectors["dense"].shape == (384,)
    assert np.isclose(np.linalg.norm(c.vectors["dense"]), 1.0, atol=1e-5)
    assert c.vectors["tokens"].dtype == np.float16 and c.vectors["tokens"].shape[1] == 384
    assert 8 <= len(c.vectors["tokens"]) <= 16
    np.testing.assert_allclose(np.linalg.norm(c.vectors["tokens"].astype(np.float32), axis=1), 1.0, atol=2e-3)
    assert c.vectors["splade"].ids.dtype == np.int32 and c.vectors["splade"].weights.dtype == np.float32
    assert len(c.vectors["splade"].ids) == len(c.vectors["splade"].weights) > 5 and (c.vectors["splade"].weights > 0).all()


def test_long_memory_is_chunked_with_spans_not_truncated():
    rng = np.random.default_rng(11)
    words = "agents store episodic memories and retrieve them by goal and purpose".split()
    text = " ".join(rng.choice(words, 900))
    embedder = InProcessEmbedder(MODEL_DIR, threads=1, plan=ChunkPlan(128, 16))
    [s] = asyncio.run(_embed(embedder, [text], TextRole.DOCUMENT))
    assert len(s.chunks) >= 7
    assert s.chunks[0].start == 0 and s.chunks[-1].end == len(text)
    assert all(a.end > b.start for a, b in zip(s.chunks, s.chunks[1:]))  # overlapping
    assert sum(len(c.vectors["tokens"]) for c in s.chunks) >= 900
    assert "+c128o16q64" in s.model_version


def test_query_role_caps_sparse_terms_documents_keep_all():
    text = ("Retrieval for agents combines sparse lexical recall, dense approximate search, "
            "late interaction reranking and temporal decay of old memories.")
    embedder = InProcessEmbedder(MODEL_DIR, threads=1, query_max_terms=10)

    async def both():
        await embedder.start()
        try:
            return (await embedder.embed([text], TextRole.QUERY),
                    await embedder.embed([text], TextRole.DOCUMENT))
        finally:
            await embedder.close()

    [q], [d] = asyncio.run(both())
    assert len(q.chunks[0].vectors["splade"].ids) == 10 < len(d.chunks[0].vectors["splade"].ids)
    np.testing.assert_array_equal(q.chunks[0].vectors["dense"], d.chunks[0].vectors["dense"])


def test_concurrent_calls_do_not_mix_results():
    texts = [f"memory number {i} is about topic {i % 3}" for i in range(12)]
    embedder = InProcessEmbedder(MODEL_DIR, threads=1)

    async def run():
        await embedder.start()
        try:
            together = await embedder.embed(texts, TextRole.DOCUMENT)
            alone = await asyncio.gather(*[embedder.embed([t], TextRole.DOCUMENT) for t in texts])
            return together, [a[0] for a in alone]
        finally:
            await embedder.close()

    together, alone = asyncio.run(run())
    for a, b in zip(together, alone):
        np.testing.assert_array_equal(a.chunks[0].vectors["dense"], b.chunks[0].vectors["dense"])


def test_errors_before_start_bad_input_and_missing_models(tmp_path: Path):
    embedder = InProcessEmbedder(MODEL_DIR, threads=1)
    with pytest.raises(errors.Unavailable):
        asyncio.run(embedder.embed(["x"], TextRole.QUERY))
    with pytest.raises(errors.InvalidArgument):
        asyncio.run(_embed(InProcessEmbedder(MODEL_DIR, threads=1), ["ok", "\ud800"],
                           TextRole.QUERY))
    with pytest.raises(errors.Unavailable, match="make models"):
        asyncio.run(InProcessEmbedder(tmp_path, threads=1).start())
    assert asyncio.run(_embed(InProcessEmbedder(MODEL_DIR, threads=1), [], TextRole.QUERY)) == []


def test_factory_defaults_to_in_process_with_cache(tmp_path: Path):
    settings = EmbeddingSettings(cache_dir=tmp_path / "cache", threads=1)
    embedder = make_embedder(settings)
    assert isinstance(embedder, CachedEmbedder)
    assert isinstance(embedder.inner, InProcessEmbedder)
    assert embedder.description == "in-process (cached)"
    [s] = asyncio.run(_embed(embedder, ["hello"], TextRole.QUERY))
    assert len(s.chunks) == 1
    plain = make_embedder(EmbeddingSettings(cache_dir=None, triton_url="127.0.0.1:1"))
    assert plain.description == "triton://127.0.0.1:1"


@pytest.mark.parametrize("kwargs", [
    pytest.param({"chunk_tokens": 300}, id="chunk-over-window"),
    pytest.param({"chunk_tokens": 64, "chunk_overlap": 40}, id="overlap-over-half"),
    pytest.param({"timeout_s": 0}, id="zero-timeout"),
    pytest.param({"max_batch": 65}, id="batch-over-model-limit"),
])
def test_settings_reject_bad_values(kwargs):
    with pytest.raises(pydantic.ValidationError):
        EmbeddingSettings(**kwargs)


def test_settings_defaults_are_relative_to_project_or_user(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    s = EmbeddingSettings()
    assert s.triton_url is None and s.model_dir is None
    assert s.cache_dir == tmp_path / "teleo" / "embeddings"
    assert default_model_dir() == Path(__file__).resolve().parents[1] / "triton_models"
    assert EmbeddingSettings(cache_dir="", triton_url="").cache_dir is None
    assert EmbeddingSettings(cache_dir="", triton_url="").triton_url is None


def test_queries_and_a_single_chunk_run_both_models_side_by_side_with_the_same_vectors():
    """Queries and a single chunk: splade-tiny on the helper thread while MiniLM runs; other
    batches of documents: one model after the other on the caller's thread. The vectors are those
    of the sequential run either way."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from teleo_server.embedding.engine import Engine

    with ThreadPoolExecutor(1, thread_name_prefix="sparse-helper") as helper:
        engine = Engine(MODEL_DIR, threads=1, helper=helper)
        plain = Engine(MODEL_DIR, threads=1)
        where: list[str] = []
        encode = engine.sparse.encode

        def recorded(*args, **kwargs):
            where.append(threading.current_thread().name)
            return encode(*args, **kwargs)

        engine.sparse.encode = recorded
        queries = ["which region is staging in", "who owns the invoices service?"]
        got, want = engine.embed(queries, [True, True]), plain.embed(queries, [True, True])
        assert where == ["sparse-helper_0"]
        docs = ["The staging cluster moved to us-east-2 in March.", "Invoices are due on the 5th."]
        got_docs, want_docs = engine.embed(docs, [False, False]), plain.embed(docs, [False, False])
        assert where[1] == threading.current_thread().name  # two documents: one model after the other
        one = engine.embed(docs[:1], [False])  # a single chunk: side by side
        assert where[2] == "sparse-helper_0"
        got_docs.append(one[0])
        want_docs.append(want_docs[0])
    for a, b in zip(got + got_docs, want + want_docs):
        assert a.model_version == b.model_version
        for ca, cb in zip(a.chunks, b.chunks):
            assert ca.vectors.keys() == cb.vectors.keys()
            for head, u in ca.vectors.items():
                v = cb.vectors[head]
                for p, q in ([(u.ids, v.ids), (u.weights, v.weights)] if hasattr(u, "ids") else [(u, v)]):
                    np.testing.assert_array_equal(p, q, err_msg=head)
