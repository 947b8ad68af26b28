"""Units of the benchmark harness: synthetic corpora, oracles, percentiles, peers' shared code, report."""

from __future__ import annotations

import numpy as np
import pytest

from bench.harness import config, synthetic
from bench.harness.report import markdown, targets
from bench.harness.results import Recorder, percentiles, read
from bench.harness.workloads.correctness import exact_topk, recall_at_k
from bench.peers.base import PeerCorpus, PeerUnavailable, dedupe_chunks, load_peer
from teleo_server.domain import ChunkEmbedding, EmbeddingSet


@pytest.fixture(scope="module")
def corpus() -> synthetic.SyntheticCorpus:
    return synthetic.make_corpus(synthetic.CorpusSpec(n=1500, seed=3, max_tokens=6))


def test_synthetic_corpus_is_deterministic_per_seed():
    a = synthetic.make_corpus(synthetic.CorpusSpec(n=50, seed=7, max_tokens=2))
    b = synthetic.make_corpus(synthetic.CorpusSpec(n=50, seed=7, max_tokens=2))
    c = synthetic.make_corpus(synthetic.CorpusSpec(n=50, seed=8, max_tokens=2))
    assert a.texts == b.texts and np.array_equal(a.dense, b.dense) and np.array_equal(a.sp_ids, b.sp_ids)
    assert a.texts != c.texts


def test_real_token_counts_stream_one_row_per_word_on_demand():
    spec = synthetic.CorpusSpec(n=300, seed=5, real_token_counts=True)
    c = synthetic.make_corpus(spec)
    assert c.tokens is None  # nothing held: rows are drawn per memory
    counts = np.diff(c.tok_ptr)
    assert counts.tolist() == [w.size for w in c.word_ids] and counts.max() > spec.max_tokens
    rows = c.token_rows(17)
    assert rows.dtype == np.float16 and rows.shape == (counts[17], 384)
    assert np.array_equal(rows, synthetic.make_corpus(spec).token_rows(17))  # deterministic
    np.testing.assert_allclose(np.linalg.norm(rows.astype(np.float32), axis=1), 1.0, atol=2e-3)
    assert float((rows.astype(np.float32) @ c.dense[17]).mean()) > 0.5  # near their sentence vector
    assert c.embedding(17).chunks[0].vectors["tokens"].shape == rows.shape


def test_synthetic_vectors_are_unit_and_clustered(corpus):
    assert corpus.dense.dtype == np.float32 and corpus.dense.shape == (1500, 384)
    np.testing.assert_allclose(np.linalg.norm(corpus.dense, axis=1), 1.0, atol=1e-5)
    same = corpus.topics[:, None] == corpus.topics[None, :]
    sims = corpus.dense @ corpus.dense.T
    off_diag = ~np.eye(len(corpus), dtype=bool)
    # Memories of one topic are far closer to each other than to the rest, as with real embeddings.
    assert sims[same & off_diag].mean() > sims[~same].mean() + 0.3


def test_synthetic_words_follow_zipf(corpus):
    words = np.concatenate(corpus.word_ids)
    counts = np.sort(np.bincount(words))[::-1]
    # Rank-frequency: the top word is far more common than the 100th, which beats the 1000th.
    assert counts[0] > 10 * counts[99] > 0 and counts[99] > counts[999]
    lengths = np.array([w.size for w in corpus.word_ids])
    assert 15 <= np.median(lengths) <= 45 and lengths.max() > 3 * np.median(lengths)


def test_synthetic_sparse_rows_are_sorted_unique_vocab_ids(corpus):
    for i in range(0, len(corpus), 97):
        ids, w = corpus.sparse_row(i)
        assert ids.dtype == np.int32 and w.dtype == np.float32
        assert np.all(np.diff(ids) > 0) and ids.min() >= 0 and ids.max() < synthetic.SPLADE_VOCAB
        assert np.all(w > 0)
    emb = corpus.embedding(5)
    assert emb.chunks[0].vectors["tokens"].dtype == np.float16 and emb.chunks[0].vectors["tokens"].shape[1] == 384


def test_synthetic_queries_point_at_their_targets(corpus):
    q = synthetic.make_queries(corpus, 40, seed=2)
    top = exact_topk(corpus.dense, q.dense, 10)
    assert np.mean([t in row for t, row in zip(q.targets, top)]) >= 0.9
    for j in range(5):
        assert set(q.texts[j].split()) <= set(corpus.texts[q.targets[j]].split())


def test_exact_topk_matches_a_full_sort():
    rng = np.random.default_rng(0)
    m = rng.standard_normal((300, 16)).astype(np.float32)
    qs = rng.standard_normal((7, 16)).astype(np.float32)
    full = np.argsort(-(qs.astype(np.float64) @ m.T.astype(np.float64)), axis=1)[:, :5]
    assert np.array_equal(exact_topk(m, qs, 5), full)


def test_recall_at_k_counts_overlap():
    truth = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    assert recall_at_k([[1, 2, 3, 4], [8, 7, 6, 5]], truth, 4) == 1.0
    assert recall_at_k([[1, 9, 9, 9], [0, 0, 0, 0]], truth, 4) == pytest.approx(0.125)


def test_percentiles_of_known_samples():
    p = percentiles(list(range(1, 101)))
    assert p["p50"] == pytest.approx(50.5) and p["p99"] == pytest.approx(99.01) and p["max"] == 100 and p["n"] == 100
    assert np.isnan(percentiles([])["p50"])


def test_recorder_writes_json_lines(tmp_path):
    rec = Recorder(tmp_path / "r.jsonl", "test machine")
    rec.add("scale", "teleo", metric="query", p50_ms=np.float32(1.5), ids=np.arange(2))
    rec.skip("quality", "no data")
    back = read(tmp_path / "r.jsonl")
    assert back[0]["p50_ms"] == 1.5 and back[0]["ids"] == [0, 1] and back[0]["machine"] == "test machine"
    assert back[1]["skipped"] is True and back[1]["reason"] == "no data"


def test_recorder_append_replaces_only_rerun_workloads(tmp_path):
    path = tmp_path / "r.jsonl"
    first = Recorder(path, "m")
    first.add("scale", "teleo", metric="query", p50_ms=1.0)
    first.add("quality", "teleo", metric="quality", p50_ms=2.0)
    again = Recorder(path, "m", append=True, replace=frozenset({"scale"}))
    again.add("scale", "teleo", metric="query", p50_ms=3.0)
    back = read(path)
    assert [(r["workload"], r["p50_ms"]) for r in back] == [("quality", 2.0), ("scale", 3.0)]


def test_dedupe_chunks_keeps_each_memory_once_in_rank_order():
    chunk_doc = np.array([0, 0, 1, 2, 2, 3])
    assert dedupe_chunks([4, 1, 0, 3, 2, 5], chunk_doc, 3) == [2, 0, 1]
    assert dedupe_chunks([1, 0], chunk_doc, 5) == [0]


def test_peer_corpus_flattens_chunks():
    def ch(v: float, ids: list[int], start: int, end: int) -> ChunkEmbedding:
        return ChunkEmbedding.from_models(dense=np.full(4, v, np.float32), tokens=np.zeros((0, 4), np.float16),
                              sparse_ids=np.array(ids, np.int32), sparse_weights=np.ones(len(ids), np.float32),
                              start=start, end=end)

    sets = [EmbeddingSet("v", [ch(1, [1, 2], 0, 5), ch(2, [3], 3, 9)]), EmbeddingSet("v", [ch(3, [], 0, 4)])]
    pc = PeerCorpus.from_sets(["a", "b"], ["hello world", "abcd"], sets)
    assert pc.n_chunks == 3 and pc.chunk_doc.tolist() == [0, 0, 1]
    assert pc.chunk_texts == ["hello", "lo wor", "abcd"]
    assert pc.sparse(0)[0].tolist() == [1, 2] and pc.sparse(1)[0].tolist() == [3] and pc.sparse(2)[0].size == 0


def test_unknown_peer_is_unavailable_not_a_crash():
    with pytest.raises(PeerUnavailable, match="unknown peer"):
        load_peer("faiss")


def test_config_groups_parse_and_name_known_workloads():
    assert {"smoke", "cpu", "gpu"} <= set(config.groups())
    for g in config.groups():
        cfg = config.load(g)
        assert cfg["workloads"] and set(cfg["workloads"]) <= set(config.WORKLOADS)
    with pytest.raises(ValueError, match="known"):
        config.load("nope")


def test_config_override_sets_nested_json_values():
    cfg = config.load("smoke")
    config.override(cfg, "scale.sizes=[10, 20]")
    config.override(cfg, "latency.corpus=scifact")
    config.override(cfg, "seed=3")
    assert cfg["scale"]["sizes"] == [10, 20] and cfg["latency"]["corpus"] == "scifact" and cfg["seed"] == 3
    with pytest.raises(ValueError):
        config.override(cfg, "scale.sizes")


def _q(system, mode, p50, ndcg, **kw):
    return {"workload": "quality", "system": system, "metric": "quality", "dataset": "scifact", "mode": mode,
            "p50_ms": p50, "p95_ms": p50, "p99_ms": p50, "ndcg@10": ndcg, "recall@10": 0.0, "recall@100": 0.0, **kw}


def test_targets_compute_ratios_and_verdicts():
    records = [
        {"workload": "environment", "machine": "m"},
        {"workload": "scale", "system": "teleo", "metric": "query", "n": 10_000, "profile": "hybrid", "mode": "hybrid",
         "p50_ms": 2.0, "p95_ms": 3.0, "p99_ms": 4.0},
        {"workload": "scale", "system": "milvus_lite", "metric": "query", "n": 10_000, "mode": "hybrid",
         "p50_ms": 5.0, "p95_ms": 6.0, "p99_ms": 7.0},
        _q("teleo", "hybrid", 3.0, 0.70), _q("milvus_lite", "hybrid", 4.0, 0.68),
        _q("teleo", "single_space:E6_lexical", 2.0, 0.660, stage_p50_ms={"single_space": 0.9}),
        _q("bm25s", "bm25", 1.0, 0.662),
    ]
    rows = {r[0]: r for r in targets(records)}
    assert rows["hybrid p50 latency at 10,000 ≤ 0.5 × Milvus Lite hybrid"][2] is True  # 0.4×
    assert rows["hybrid p50 latency at 100,000 ≤ 0.5 × Milvus Lite hybrid"][1:] == ["not measured", None]
    assert rows["SciFact hybrid nDCG@10 ≥ Milvus Lite hybrid"][2] is True
    assert rows["SciFact (5,183 memories) hybrid p50 ≤ 0.5 × Milvus Lite hybrid"][2] is False  # 0.75×
    assert rows["BM25 query p50 ≤ 1.5 × bm25s (whole retrieve call)"][2] is False  # 2.0×
    assert rows["BM25 query p50 ≤ 1.5 × bm25s (BM25 stage alone)"][2] is True  # 0.9×
    assert rows["BM25 nDCG@10 within ±0.005 of bm25s"][2] is True
    text = markdown(records)
    assert "| teleo | hybrid | 0.700" in text.replace("scifact | ", "")


def test_bm25s_ranks_like_teleo_lexical_space():
    pytest.importorskip("bm25s")
    from bench.harness import teleo_inproc
    from bench.harness.workloads.scale import memory_of
    from bench.peers.base import PeerQueries

    c = synthetic.make_corpus(synthetic.CorpusSpec(n=400, seed=5, max_tokens=2))
    q = synthetic.make_queries(c, 15, seed=6, words=4)
    r = teleo_inproc.make()
    teleo_inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(len(c))))
    peer = load_peer("bm25s")
    pc = PeerCorpus([f"m{i}" for i in range(len(c))], c.texts, np.arange(len(c)), c.texts, c.dense, c.sp_ptr, c.sp_ids, c.sp_w)
    peer.build(pc, None)
    pq = PeerQueries(q.texts, q.dense, q.sparse)
    agree = []
    for j in range(len(q)):
        ours = teleo_inproc.run_query(r, q.texts[j], q.embedding(j), "single_space:E6_lexical", 5).ids
        theirs = [f"m{d}" for d in peer.search("bm25", pq, j, 5)]
        agree.append(ours[:3] == theirs[:3])
    assert np.mean(agree) >= 0.9


def test_space_correlation_of_known_scores():
    from bench.eval.run import space_correlation

    up = [{"A": float(i), "B": float(2 * i), "C": float(-i)} for i in range(6)]
    few = [{"A": float(i), "B": 1.0 if i % 2 else 0.0} for i in range(3)]  # too few results to count
    got = space_correlation([up, few])
    assert got["A~B"] == {"spearman": pytest.approx(1.0), "queries": 1}
    assert got["A~C"]["spearman"] == pytest.approx(-1.0) and got["B~C"]["spearman"] == pytest.approx(-1.0)
