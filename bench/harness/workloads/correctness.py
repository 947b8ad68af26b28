"""Correctness before timing: ANN recall against exact search, and GPU-vs-CPU agreement.

Records ``metric="ann_recall"`` per (system, ef_search) with recall@k against an exact float64
scan and the query latency, plus ``metric="check"`` records with ``passed``. Teleo's HNSW is its
``DenseIndex`` with the exact/HNSW threshold lowered so the graph path is the one measured.
"""

from __future__ import annotations

import time

import numpy as np
import structlog

from bench.harness import synthetic, teleo_inproc
from bench.harness.results import percentiles
from bench.harness.workloads import Context
from bench.harness.workloads.peers_run import build as build_peer
from bench.harness.workloads.peers_run import open_peer, query_all
from bench.peers import PeerCorpus, PeerQueries

log = structlog.get_logger(__name__)
W = "correctness"


def exact_topk(matrix: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """int64 (Q, k): exact inner-product top-k, accumulated in float64 (the oracle)."""
    scores = queries.astype(np.float64) @ matrix.astype(np.float64).T
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.take_along_axis(scores, part, 1).argsort(axis=1)[:, ::-1]
    return np.take_along_axis(part, order, 1)


def recall_at_k(found: list[list[int]] | np.ndarray, truth: np.ndarray, k: int) -> float:
    return float(np.mean([len(set(list(f)[:k]) & set(t[:k].tolist())) / k for f, t in zip(found, truth)]))


def _timed_search(index, ops, queries: np.ndarray, k: int) -> tuple[list[list[int]], list[float]]:
    """Each query's top-``k`` rows and its search time in ms."""
    found, times = [], []
    for q in queries:
        t0 = time.perf_counter()
        rows, _ = index.search(ops, q, k)
        times.append((time.perf_counter() - t0) * 1e3)
        found.append(rows.tolist())
    return found, times


def _teleo_ann(ctx: Context, corpus: synthetic.SyntheticCorpus, queries: synthetic.SyntheticQueries,
               truth: np.ndarray, k: int, ef_values: list[int], min_recall: float) -> None:
    from teleo_server.compute.backend import ops as backend_ops
    from teleo_server.index.dense import DenseIndex

    ops = backend_ops(ctx.backend)
    n = len(corpus)
    exact = DenseIndex(corpus.spec.dim, exact_threshold=n + 1)
    exact.add(corpus.dense)
    found, times = _timed_search(exact, ops, queries.dense, k)
    r = recall_at_k(found, truth, k)
    ctx.rec.add(W, "teleo", metric="ann_recall", index="exact", ef_search=None, k=k, n=n, recall=r,
                p50_ms=percentiles(times)["p50"], backend=ctx.backend)
    ctx.rec.add(W, "teleo", metric="check", check="exact dense search equals the float64 oracle",
                passed=r >= 0.999, value=r)
    for ef in ef_values:
        t0 = time.perf_counter()
        idx = DenseIndex(corpus.spec.dim, exact_threshold=1, hnsw_ef_search=ef)
        idx.add(corpus.dense)
        build_s = time.perf_counter() - t0
        if not idx.uses_hnsw:
            ctx.rec.skip(W, "DenseIndex did not build HNSW with exact_threshold=1", system="teleo")
            return
        found, times = _timed_search(idx, ops, queries.dense, k)
        r = recall_at_k(found, truth, k)
        ctx.rec.add(W, "teleo", metric="ann_recall", index="hnsw", ef_search=ef, k=k, n=n, recall=r,
                    p50_ms=percentiles(times)["p50"], build_s=build_s, backend=ctx.backend)
        log.info("correctness.hnsw", ef=ef, recall=round(r, 4))
    best = [rec for rec in ctx.rec.records if rec.get("metric") == "ann_recall" and rec.get("ef_search") == max(ef_values)]
    if best:
        ctx.rec.add(W, "teleo", metric="check", check=f"HNSW recall@{k} at ef_search={max(ef_values)} >= {min_recall}",
                    passed=best[-1]["recall"] >= min_recall, value=best[-1]["recall"])


def _gpu_agreement(ctx: Context, corpus: synthetic.SyntheticCorpus, queries: synthetic.SyntheticQueries, k: int) -> None:
    from teleo_server.compute.backend import cupy_status

    ok, why = cupy_status()
    if not ok:
        ctx.rec.skip(W, f"GPU vs CPU agreement not measured: {why}", system="teleo")
        return
    n = min(len(corpus), 20000)
    items = [(_memory(corpus, i), corpus.embedding(i)) for i in range(n)]
    cpu, gpu = teleo_inproc.make(backend="numpy"), teleo_inproc.make(backend="cupy")
    teleo_inproc.build(cpu, items)
    teleo_inproc.build(gpu, items)
    for profile in ("hybrid", "teleological"):
        overlaps = []
        for j in range(min(len(queries), 50)):
            emb = queries.embedding(j)
            a = teleo_inproc.run_query(cpu, queries.texts[j], emb, profile, k).ids
            b = teleo_inproc.run_query(gpu, queries.texts[j], emb, profile, k).ids
            overlaps.append(len(set(a) & set(b)) / max(len(a), 1))
        value = float(np.mean(overlaps))
        ctx.rec.add(W, "teleo", metric="check", check=f"{profile}: cupy top-{k} equals numpy top-{k}",
                    passed=value >= 0.99, value=value, profile=profile)


def _memory(corpus: synthetic.SyntheticCorpus, i: int):
    from bench.harness.workloads.scale import memory_of

    return memory_of(corpus, i)


def run(ctx: Context) -> None:
    cfg = ctx.section("correctness")
    n, m, k = int(cfg.get("n", 20000)), int(cfg.get("queries", 200)), int(cfg.get("k", 10))
    corpus = synthetic.make_corpus(synthetic.CorpusSpec(n=n, seed=ctx.seed, max_tokens=8))
    queries = synthetic.make_queries(corpus, m, seed=ctx.seed + 1)
    truth = exact_topk(corpus.dense, queries.dense, k)
    _teleo_ann(ctx, corpus, queries, truth, k, [int(e) for e in cfg.get("ef_search", [64, 256])],
               float(cfg.get("min_recall", 0.95)))
    pc = PeerCorpus(doc_ids=[str(i) for i in range(n)], texts=corpus.texts, chunk_doc=np.arange(n),
                    chunk_texts=corpus.texts, dense=corpus.dense, sp_ptr=corpus.sp_ptr, sp_ids=corpus.sp_ids,
                    sp_w=corpus.sp_w)
    pq = PeerQueries(queries.texts, queries.dense, queries.sparse)
    for name in ctx.peers(["milvus_lite", "milvus_lite_hnsw", "lancedb"]):
        peer = open_peer(ctx, name, W)
        if peer is None:
            continue
        try:
            if build_peer(ctx, peer, pc, ctx.workdir / W / name, W, n=n) is None:
                continue
            ranked, times = query_all(peer, "dense", pq, k)
            ctx.rec.add(W, name, metric="ann_recall", index="default", ef_search=None, k=k, n=n,
                        recall=recall_at_k(ranked, truth, k), p50_ms=percentiles(times)["p50"], version=peer.version())
        finally:
            peer.close()
    pc.tok_ptr, pc.tokens = corpus.tok_ptr, corpus.tokens
    pq.tokens = queries.tokens
    _stronger_peers(ctx, pc, pq, truth, k)
    if cfg.get("gpu_agreement", True):
        _gpu_agreement(ctx, corpus, queries, k)


def _bm25_matrix(texts: list[str], k1: float, b: float):
    """(vocabulary, CSR (n, V) of BM25 term-frequency parts, IDF (V,)) over Teleo's analyser terms."""
    from collections import Counter

    from scipy import sparse as sp

    from teleo_server.analysis import tokenize

    vocab: dict[str, int] = {}
    rows, cols, tfs, lengths = [], [], [], []
    for i, t in enumerate(texts):
        c = Counter(tokenize(t))
        lengths.append(sum(c.values()))
        for term, tf in c.items():
            rows.append(i)
            cols.append(vocab.setdefault(term, len(vocab)))
            tfs.append(tf)
    dl = np.asarray(lengths, np.float64)
    tf = np.asarray(tfs, np.float64)
    part = tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl[rows] / max(dl.mean(), 1e-6)))
    m = sp.csr_matrix((part, (rows, cols)), shape=(len(texts), len(vocab)))
    df = np.bincount(cols, minlength=len(vocab)).astype(np.float64)
    return vocab, m, np.log1p((len(texts) - df + 0.5) / (df + 0.5))


def _stronger_peers(ctx: Context, pc: PeerCorpus, pq: PeerQueries, truth: np.ndarray, k: int) -> None:
    """Exact modes of the stronger peers against float64 oracles; their ANN modes' recall (before timing)."""
    from scipy import sparse as sp

    from teleo_server.analysis import tokenize

    names = ctx.peers(["qdrant_edge", "tantivy", "openclaw_sqlite", "chroma"])
    if not names:
        return
    m = min(len(pq), 100)
    sparse_rows = sp.csr_matrix((pc.sp_w.astype(np.float64), pc.sp_ids, pc.sp_ptr), shape=(pc.n_chunks, 30_522))
    oracle: dict[str, list[list[int]]] = {"dense": [t.tolist() for t in truth[:m]]}

    def ranked(scores: np.ndarray) -> list[int]:
        top = np.argsort(-scores, kind="stable")[:k]
        return [int(i) for i in top if scores[i] > 0]

    oracle["splade"] = []
    for j in range(m):
        ids, w = pq.sparse[j]
        qv = np.zeros(30_522)
        qv[ids] = w
        oracle["splade"].append(ranked(sparse_rows @ qv))
    for key, (k1, b) in {"bm25": (0.9, 0.4), "bm25_k1.2_b0.75": (1.2, 0.75)}.items():
        vocab, mat, idf = _bm25_matrix(pc.texts, k1, b)
        oracle[key] = []
        for j in range(m):
            qv = np.zeros(len(vocab))
            for term in dict.fromkeys(tokenize(pq.texts[j])):
                if term in vocab:
                    qv[vocab[term]] = idf[vocab[term]]
            oracle[key].append(ranked(mat @ qv))
    for name in names:
        peer = open_peer(ctx, name, W)
        if peer is None:
            continue
        try:
            if build_peer(ctx, peer, pc, ctx.workdir / W / name, W, n=len(pc)) is None:
                continue
            exact = getattr(peer, "exact_modes", {})
            for mode in peer.modes:
                if mode in getattr(peer, "unavailable_modes", {}):
                    continue
                if mode in exact:
                    want = oracle[exact[mode]]
                    got = [peer.search(mode, pq, j, k) for j in range(m)]
                    value = float(np.mean([len(set(g) & set(w)) / max(len(w), 1) for g, w in zip(got, want) if w]))
                    floor = getattr(peer, "min_agreement", {}).get(mode, 0.99)
                    ctx.rec.add(W, name, metric="check", mode=mode, check=f"{name} {mode} top-{k} overlap with the "
                                f"float64 {exact[mode]} oracle >= {floor}", value=value, passed=value >= floor)
                    continue
                if mode.startswith("dense"):
                    ranked_q, times = query_all(peer, mode, pq, k)
                    ctx.rec.add(W, name, metric="ann_recall", index=mode, ef_search=None, k=k, n=len(pc),
                                recall=recall_at_k(ranked_q, truth, k), p50_ms=percentiles(times)["p50"],
                                version=peer.version())
        finally:
            peer.close()
