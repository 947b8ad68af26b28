"""The stronger peers (Qdrant Edge, Tantivy, OpenClaw's SQLite stack, Chroma) against NumPy references.

Tiny synthetic corpora only; each peer's tests skip when its package is not installed in the running
venv (``make bench-venv`` installs them into ``.venv-bench``).
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.harness import synthetic
from bench.harness.report import memory_rows, stronger_targets
from bench.harness.workloads.interleaved import Runner, overlap_at
from bench.harness.workloads.interleaved import run as run_interleaved
from bench.peers import PeerCorpus, PeerQueries, load_peer
from bench.peers import reference as ref
from bench.peers.base import dedupe_chunks, dir_bytes
from teleo_server.analysis import tokenize
from teleo_server.domain import ChunkEmbedding, EmbeddingSet

K = 10


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _corpus(n: int = 240, seed: int = 5, max_words: int = 30, two_chunks_every: int = 7) -> tuple[PeerCorpus, PeerQueries]:
    """``n`` memories; every ``two_chunks_every``-th has a second chunk (its own vectors), as long texts do."""
    syn = synthetic.make_corpus(synthetic.CorpusSpec(n=n, seed=seed, max_tokens=6, max_words=max_words, median_words=12))
    qs = synthetic.make_queries(syn, 24, seed=seed + 1, words=4)
    rng = np.random.default_rng(seed)
    sets = []
    for i in range(n):
        emb = syn.embedding(i)
        chunks = list(emb.chunks)
        if i % two_chunks_every == 0:
            d = _unit(syn.dense[i] + 0.8 * rng.standard_normal(syn.spec.dim).astype(np.float32) / 8)
            toks = _unit(d + 0.3 * rng.standard_normal((3, syn.spec.dim)).astype(np.float32) / 8).astype(np.float16)
            ids, w = syn.sparse_row((i + 1) % n)
            chunks.append(ChunkEmbedding.from_models(d, toks, ids, w, start=0, end=len(syn.texts[i])))
        sets.append(EmbeddingSet("synthetic", chunks))
    pc = PeerCorpus.from_sets([f"m{i}" for i in range(n)], syn.texts, sets)
    pq = PeerQueries(qs.texts, qs.dense, qs.sparse, qs.tokens)
    return pc, pq


def _by_memory(pc: PeerCorpus, chunk_scores: np.ndarray, k: int, positive: bool = False) -> list[int]:
    return dedupe_chunks(ref.topk(chunk_scores, pc.n_chunks, positive), pc.chunk_doc, k)


def _assert_top_k(got: list[int], scores: np.ndarray, k: int) -> None:
    """``got`` is a best-first top ``k`` of ``scores`` (positive only); ties may come in either order."""
    want = np.sort(scores[scores > 0])[::-1][:k]
    assert len(got) == want.size
    np.testing.assert_allclose(scores[got], want, rtol=1e-4)


@pytest.fixture(scope="module")
def data():
    return _corpus()


# --- shared pieces (no peer package needed) -----------------------------------------------------

def test_peer_corpus_carries_per_token_vectors(data):
    pc, pq = data
    assert pc.tok_ptr is not None and pc.tok_ptr.size == pc.n_chunks + 1 and pc.tok_ptr[-1] == pc.tokens.shape[0]
    assert pc.tokens.dtype == np.float16 and pc.chunk_tokens(0).shape[1] == pc.dense.shape[1]
    assert pc.n_chunks > len(pc) and len(pq.tokens) == len(pq)


def test_dir_bytes_counts_written_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x" * 10_000)
    assert 10_000 <= dir_bytes(tmp_path) <= 16_384
    assert dir_bytes(tmp_path / "missing") == 0


def test_interleaved_runs_every_system_on_every_query_in_rotating_order():
    calls = []

    def runner(name, cap=None):
        return Runner(name, "m", lambda j: (calls.append((name, j)) or [f"d{j}"], 1.0, {}), cap)

    out = run_interleaved([runner("a"), runner("b"), runner("c", cap=2)], 4, warmup=1)
    timed = calls[3:]  # the warm-up query ran once through each
    assert [n for n, j in timed if j == 0] == ["a", "b", "c"] and [n for n, j in timed if j == 1] == ["b", "c", "a"]
    assert out[("c", "m")].query_index == [0, 1] and out[("a", "m")].query_index == [0, 1, 2, 3]
    assert overlap_at([["x", "y"]], [["y", "x"]], 2) == 1.0


def test_report_states_the_stronger_targets_and_bytes_per_memory():
    def rec(workload, system, **kw):
        return {"workload": workload, "system": system, **kw}

    records = [
        rec("scale", "teleo", metric="query", n=10_000, mode="teleological", profile="teleological", p50_ms=10.0),
        rec("scale", "qdrant_edge", metric="query", n=10_000, mode="teleological", p50_ms=4.0),
        rec("scale", "teleo", metric="query", n=100_000, mode="hybrid", profile="hybrid", p50_ms=5.0),
        rec("scale", "qdrant_edge", metric="query", n=100_000, mode="hybrid", p50_ms=6.0),
        rec("scale", "qdrant_edge", metric="memory", n=100_000, memories=100_000, rss_bytes_per_memory=2048.0,
            disk_bytes_per_memory=4096.0, disk_bytes=1, build_s=1.0, disk_breakdown_bytes_per_memory={"dense": 1536.0}),
    ]
    rows = {r[0]: r for r in stronger_targets(records)}
    tele = rows["teleological p50 at 10,000 ≤ 0.5 × Qdrant Edge teleological (RRF → MaxSim)"]
    assert tele[1].endswith("2.500×") and tele[2] is False
    assert rows["hybrid p50 at 100,000 ≤ Qdrant Edge hybrid (target)"][2] is True
    assert rows["hybrid p50 at 10,000 ≤ Qdrant Edge hybrid"][1] == "not measured"
    (mem,) = memory_rows(records)
    assert mem[1] == "qdrant_edge" and mem[3] == 2.0 and mem[4] == 4.0 and "dense 1.5" in mem[6]


def test_reference_bm25_matches_a_hand_computation():
    texts = ["a b b", "a c", "c c c d"]
    s = ref.bm25_scores(texts, "b", 1.2, 0.75, str.split)
    idf = np.log1p((3 - 1 + 0.5) / (1 + 0.5))
    dl, avg = 3.0, 3.0
    assert s[0] == pytest.approx(idf * 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * dl / avg))) and s[1] == s[2] == 0


# --- Qdrant Edge ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def qdrant(data, tmp_path_factory):
    pytest.importorskip("qdrant_edge")
    pc, _ = data
    # Candidates and rerank depth cover the whole tiny corpus, so the RRF cut cannot hide a difference.
    peer = load_peer("qdrant_edge", candidates=pc.n_chunks, rerank_depth=pc.n_chunks)
    peer.build(pc, tmp_path_factory.mktemp("qdrant"))
    yield peer
    peer.close()


def test_qdrant_dense_exact_equals_numpy(data, qdrant):
    pc, pq = data
    for j in range(len(pq)):
        assert qdrant.search("dense_exact", pq, j, K) == _by_memory(pc, ref.dense_scores(pc, pq.dense[j]), K)


def test_qdrant_sparse_and_bm25_equal_numpy(data, qdrant):
    pc, pq = data
    first = np.array([np.flatnonzero(pc.chunk_doc == d)[0] for d in range(len(pc))])
    for j in range(len(pq)):
        ids, w = pq.sparse[j]
        chunk = ref.sparse_scores(pc, ids, w)
        memory = np.zeros(len(pc))
        np.maximum.at(memory, pc.chunk_doc, chunk)  # a memory scores by its best chunk
        _assert_top_k(qdrant.search("sparse", pq, j, K), memory, K)
        # BM25 scores whole memories with Teleo's analyser, k1 0.9 and b 0.4, as Teleo's lexical space does.
        bm = ref.bm25_scores(pc.texts, pq.texts[j], 0.9, 0.4, tokenize)
        got = qdrant.scores("bm25", pq, j, K)
        _assert_top_k([int(pc.chunk_doc[c]) for c, _ in got], bm, K)
        np.testing.assert_allclose([s for _, s in got], bm[[int(pc.chunk_doc[c]) for c, _ in got]], rtol=1e-4)
        assert all(c == first[pc.chunk_doc[c]] for c, _ in got)


def test_qdrant_hnsw_and_quantized_dense_recall(data, qdrant):
    pc, pq = data
    for mode, floor in (("dense", 0.99), ("dense_sq", 0.95), ("dense_bq", 0.6)):
        got = [qdrant.search(mode, pq, j, K) for j in range(len(pq))]
        want = [_by_memory(pc, ref.dense_scores(pc, pq.dense[j]), K) for j in range(len(pq))]
        assert np.mean([len(set(g) & set(w)) / K for g, w in zip(got, want)]) >= floor, mode


def _reference_hybrid(pc: PeerCorpus, pq: PeerQueries, j: int) -> dict[int, float]:
    ids, w = pq.sparse[j]
    first = {d: int(np.flatnonzero(pc.chunk_doc == d)[0]) for d in range(len(pc))}
    bm = ref.bm25_scores(pc.texts, pq.texts[j], 0.9, 0.4, tokenize)
    lists = [ref.topk(ref.dense_scores(pc, pq.dense[j]), pc.n_chunks),
             [first[d] for d in ref.topk(bm, len(pc), positive=True)],
             ref.topk(ref.sparse_scores(pc, ids, w), pc.n_chunks, positive=True)]
    return ref.rrf([x for x in lists if x], 60)


def test_qdrant_hybrid_is_rrf_of_the_three_exact_lists(data, qdrant):
    pc, pq = data
    overlaps = []
    for j in range(len(pq)):
        fused = _reference_hybrid(pc, pq, j)
        want = dedupe_chunks(sorted(fused, key=lambda c: (-fused[c], c)), pc.chunk_doc, K)
        overlaps.append(len(set(qdrant.search("hybrid", pq, j, K)) & set(want)) / K)
    # the dense prefetch is Qdrant's HNSW, whose ties and near-misses differ from run to run
    assert np.mean(overlaps) >= 0.9, f"mean overlap {np.mean(overlaps):.3f}"


def test_qdrant_teleological_is_maxsim_over_the_fused_candidates(data, qdrant):
    pc, pq = data
    overlaps, firsts = [], []
    for j in range(len(pq)):
        pool = _reference_hybrid(pc, pq, j)
        sims = np.full(pc.n_chunks, -np.inf)
        for c in pool:
            if pc.chunk_tokens(c).shape[0]:
                sims[c] = ref.maxsim(pq.tokens[j], pc.chunk_tokens(c))
        want = _by_memory(pc, sims, K)
        got = qdrant.search("teleological", pq, j, K)
        overlaps.append(len(set(got) & set(want)) / K)
        firsts.append(got[0] == want[0])
    # float16 storage on both sides; near-ties may swap, nothing else may differ
    assert np.mean(overlaps) >= 0.95 and np.mean(firsts) >= 0.9


# --- Tantivy -------------------------------------------------------------------------------------

def test_tantivy_bm25_on_teleo_tokens_equals_numpy(tmp_path):
    pytest.importorskip("tantivy")
    # Short texts: Tantivy stores document lengths exactly up to about 40 terms.
    pc, pq = _corpus(n=200, seed=9, max_words=24, two_chunks_every=10**9)
    peer = load_peer("tantivy")
    peer.build(pc, tmp_path)
    try:
        for j in range(len(pq)):
            want = ref.bm25_scores(pc.texts, pq.texts[j], 1.2, 0.75, tokenize)
            got = peer.scored("bm25_teleo_tokens", pq.texts[j], K)
            _assert_top_k([d for d, _ in got], want, K)
            np.testing.assert_allclose([s for _, s in got], want[[d for d, _ in got]], rtol=1e-4)
            assert peer.search("bm25", pq, j, K)  # its own analyzer keeps the "w123" words whole too
    finally:
        peer.close()


# --- OpenClaw's SQLite stack ---------------------------------------------------------------------

def test_openclaw_fts_query_and_rank_mapping():
    from bench.peers.openclaw_sqlite import bm25_rank_to_score, fts_query

    assert fts_query("hello, world_1 \"x\"") == '"hello" AND "world_1" AND "x"'
    assert fts_query("a b", " OR ") == '"a" OR "b"' and fts_query("!?") is None
    # FTS5's rank is negative for a match, so OpenClaw's mapping gives every match 1.0.
    assert bm25_rank_to_score(-3.2) == 1.0 and bm25_rank_to_score(1.0) == 0.5 and bm25_rank_to_score(float("inf")) < 0.01


def test_openclaw_sqlite_dense_exact_and_merge(data, tmp_path):
    pytest.importorskip("sqlite_vec")
    from bench.peers import PeerUnavailable

    pc, pq = data
    try:
        peer = load_peer("openclaw_sqlite")
    except PeerUnavailable as exc:
        pytest.skip(str(exc))
    peer.build(pc, tmp_path)
    try:
        for j in range(len(pq)):
            want = _by_memory(pc, ref.dense_scores(pc, pq.dense[j]), K)
            assert peer.search("dense", pq, j, K) == want
            assert peer.search("dense_knn", pq, j, K) == want
            # 0.7 x cosine + 0.3 x (1 when the chunk holds every query word), over min(200, 4k) candidates per arm
            cand = min(200, 4 * K)
            words = set(pq.texts[j].lower().split())
            vec = ref.dense_scores(pc, pq.dense[j])
            merged = {int(c): 0.7 * vec[c] for c in ref.topk(vec, cand)}
            text = [c for c in range(pc.n_chunks) if words <= set(pc.chunk_texts[c].lower().split())]
            assert len(text) <= cand
            for c in text:
                merged[c] = merged.get(c, 0.0) + 0.3
            ranked = sorted(merged, key=lambda c: (-merged[c], c))
            assert peer.search("hybrid", pq, j, K) == dedupe_chunks(ranked, pc.chunk_doc, K)
    finally:
        peer.close()


# --- Chroma --------------------------------------------------------------------------------------

def test_chroma_dense_recall_and_hybrid_reported(data, tmp_path):
    pytest.importorskip("chromadb")
    pc, pq = data
    peer = load_peer("chroma")
    peer.build(pc, tmp_path)
    try:
        got = [peer.search("dense", pq, j, K) for j in range(len(pq))]
        want = [_by_memory(pc, ref.dense_scores(pc, pq.dense[j]), K) for j in range(len(pq))]
        assert np.mean([len(set(g) & set(w)) / K for g, w in zip(got, want)]) >= 0.98
        if "hybrid" in peer.unavailable_modes:
            with pytest.raises(ValueError):
                peer.search("hybrid", pq, 0, K)
    finally:
        peer.close()
