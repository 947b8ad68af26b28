"""Scale: how index build and query latency grow with corpus size (synthetic corpora, in-process).

For each size: generate a synthetic corpus (not timed as Teleo's cost), index it in a fresh Teleo
retriever with precomputed vectors, run the same queries under each profile, then build and
query each peer on the same vectors. A size is skipped, with a record saying so, when the last
size's cost grown linearly predicts more than ``max_seconds_per_size``.
"""

from __future__ import annotations

import gc
import resource
import time

import numpy as np
import structlog

from bench.harness import synthetic, teleo_inproc
from bench.harness.env import rss_bytes
from bench.harness.results import percentiles
from bench.harness.workloads import Context
from bench.harness.workloads.peers_run import build as build_peer
from bench.harness.workloads.peers_run import latency_fields, open_peer, query_all
from bench.peers import PeerCorpus, PeerQueries
from teleo_server.domain import Memory, MemoryType, content_hash

log = structlog.get_logger(__name__)
W = "scale"
_TYPES = (MemoryType.EPISODIC, MemoryType.SEMANTIC, MemoryType.PROCEDURAL, MemoryType.REFLECTIVE)


def memory_of(corpus: synthetic.SyntheticCorpus, i: int) -> Memory:
    """Memory ``i`` with plausible bookkeeping: sessions of 20 turns, a year of event times."""
    text = corpus.texts[i]
    t = 1.7e9 + (i * 7919 % 31_536_000)
    return Memory(id=f"m{i}", namespace="bench", content=text, content_hash=content_hash(text),
                  memory_type=_TYPES[i % len(_TYPES)], event_time=t, ingestion_time=t,
                  session_id=f"s{i // 20}", session_position=i % 20, model_version="synthetic")


def _rss_mb() -> float:
    rss = rss_bytes()
    return rss / 2**20 if rss else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def hit_rate(ranked: list[list[str]] | list[list[int]], targets: np.ndarray, k: int, as_str: bool) -> float:
    want = [f"m{t}" if as_str else int(t) for t in targets]
    return float(np.mean([w in list(r)[:k] for r, w in zip(ranked, want)]))


def _teleo(ctx: Context, corpus, queries, profiles: list[str], k: int) -> None:
    n = len(corpus)
    rss0 = _rss_mb()
    retriever = teleo_inproc.make(backend=ctx.backend)
    count, build_s = teleo_inproc.build(retriever, ((memory_of(corpus, i), corpus.embedding(i)) for i in range(n)))
    rss1 = _rss_mb()
    ctx.rec.add(W, "teleo", metric="build", n=n, seconds=build_s, memories_per_s=count / max(build_s, 1e-9),
                rss_growth_mb=rss1 - rss0, backend=ctx.backend)
    warm_ms = teleo_inproc.warm_up(retriever, queries.texts[0], queries.embedding(0), profiles)
    ctx.rec.add(W, "teleo", metric="warmup", n=n, ms=warm_ms,
                note="first queries after indexing pay lazy goal clustering and Matryoshka calibration")
    for profile in profiles:
        runs = [teleo_inproc.run_query(retriever, queries.texts[j], queries.embedding(j), profile, k)
                for j in range(len(queries))]
        stage_p50 = {s: percentiles(v)["p50"] for s, v in _stage_lists(runs).items()}
        ctx.rec.add(W, "teleo", metric="query", n=n, profile=profile, mode=profile, backend=ctx.backend,
                    **latency_fields([r.wall_ms for r in runs]), stage_p50_ms=stage_p50,
                    hit_at_k=hit_rate([r.ids for r in runs], queries.targets, k, True), k=k)
        log.info("scale.teleo", n=n, profile=profile, p50=round(percentiles([r.wall_ms for r in runs])["p50"], 2))
    del retriever
    gc.collect()


def _bytes_needed(spec: synthetic.CorpusSpec) -> int:
    """Vectors of ``spec.n`` memories at the token cap, held by the generator and by the index; with
    real token counts the generator holds no token rows and the index keeps 32-byte codes."""
    if spec.real_token_counts:
        words = float(np.exp(np.log(spec.median_words) + spec.sigma_words**2 / 2))  # log-normal mean
        # generator: float32 sentence vectors, word ids and texts; index: codes, dense rows and
        # their Matryoshka copies, three sets of postings (a generous 4 KB)
        per_memory = spec.dim * 4 + words * 24 + words * 32 + spec.dim * 2 + 4096
        return int(spec.n * per_memory)
    per_memory = spec.max_tokens * spec.dim * 2 + spec.dim * 4
    return 2 * spec.n * per_memory


def _memory_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _stage_lists(runs) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in runs:
        for s, ms in r.stages.items():
            out.setdefault(s, []).append(ms)
    return out


def _peers(ctx: Context, corpus, queries, modes: dict[str, object], k: int) -> None:
    n = len(corpus)
    pc = PeerCorpus(doc_ids=[f"m{i}" for i in range(n)], texts=corpus.texts, chunk_doc=np.arange(n),
                    chunk_texts=corpus.texts, dense=corpus.dense, sp_ptr=corpus.sp_ptr, sp_ids=corpus.sp_ids,
                    sp_w=corpus.sp_w)
    pq = PeerQueries(queries.texts, queries.dense, queries.sparse)
    for name in ctx.peers(list(modes)):
        peer = open_peer(ctx, name, W)
        if peer is None:
            continue
        try:
            if build_peer(ctx, peer, pc, ctx.workdir / W / f"{name}-{n}", W, n=n) is None:
                continue
            wanted = modes[name]
            for mode in ([wanted] if isinstance(wanted, str) else list(wanted)):
                ranked, times = query_all(peer, mode, pq, k)
                ctx.rec.add(W, name, metric="query", n=n, mode=mode, version=peer.version(),
                            **latency_fields(times), hit_at_k=hit_rate(ranked, queries.targets, k, False), k=k)
                log.info("scale.peer", peer=name, n=n, mode=mode, p50=round(percentiles(times)["p50"], 2))
        finally:
            peer.close()
        gc.collect()


def _interleaved(ctx: Context, corpus, queries, profiles: list[str], modes: dict[str, object], k: int,
                 caps: dict[str, int]) -> None:
    """Teleo and every peer built side by side, then queried in alternation (``interleave = true``)."""
    from bench.harness.workloads import interleaved as il

    n = len(corpus)
    feet: dict[str, il.Footprint] = {}
    retriever, build_s = il.build_teleo(ctx, ((memory_of(corpus, i), corpus.embedding(i)) for i in range(n)),
                                        feet.setdefault("teleo", il.Footprint()))
    foot = feet["teleo"]
    ctx.rec.add(W, "teleo", metric="build", n=n, seconds=build_s, memories_per_s=n / max(build_s, 1e-9),
                rss_growth_mb=foot.rss_growth / 2**20, backend=ctx.backend)
    warm_ms = teleo_inproc.warm_up(retriever, queries.texts[0], queries.embedding(0), profiles)
    ctx.rec.add(W, "teleo", metric="warmup", n=n, ms=warm_ms,
                note="first queries after indexing pay lazy goal clustering and Matryoshka calibration")
    doc_ids = [f"m{i}" for i in range(n)]
    pc = PeerCorpus(doc_ids=doc_ids, texts=corpus.texts, chunk_doc=np.arange(n), chunk_texts=corpus.texts,
                    dense=corpus.dense, sp_ptr=corpus.sp_ptr, sp_ids=corpus.sp_ids, sp_w=corpus.sp_w,
                    tok_ptr=corpus.tok_ptr, tokens=corpus.tokens)
    pq = PeerQueries(queries.texts, queries.dense, queries.sparse, queries.tokens)
    peers = il.build_peers(ctx, W, ctx.peers(list(modes)), pc, ctx.workdir / W / f"n{n}", feet, n=n)
    try:
        embs = [queries.embedding(j) for j in range(len(queries))]
        runners = [il.teleo_runner(retriever, queries.texts, embs, p, k) for p in profiles]
        runners += il.peer_runners(ctx, W, peers, modes, pq, doc_ids, k, caps)
        samples = il.run(runners, len(queries))
    finally:
        for peer in peers:
            peer.close()
    il.agreement_checks(ctx, W, samples, n=n)
    for system, f in feet.items():
        ctx.rec.add(W, system, n=n, **f.record())
    for (system, mode), smp in samples.items():
        targets = queries.targets[smp.query_index]
        fields = dict(stage_p50_ms={s: percentiles(v)["p50"] for s, v in smp.stages.items()}) if system == "teleo" else {}
        ctx.rec.add(W, system, metric="query", n=n, mode=mode, interleaved=True,
                    profile=mode if system == "teleo" else None,
                    backend=ctx.backend if system == "teleo" else None,
                    version=feet[system].version if system != "teleo" else None,
                    **latency_fields(smp.times), hit_at_k=hit_rate(smp.ranked, targets, k, True), k=k, **fields)
        log.info("scale.interleaved", n=n, system=system, mode=mode, p50=round(percentiles(smp.times)["p50"], 2))
    del retriever, peers, samples
    gc.collect()


def run(ctx: Context) -> None:
    cfg = ctx.section("scale")
    sizes = [int(s) for s in cfg.get("sizes", [10000])]
    profiles = list(cfg.get("profiles", ["hybrid", "teleological"]))
    modes = dict(cfg.get("peer_modes", {}))
    m, k = int(cfg.get("queries", 100)), int(cfg.get("k", 10))
    budget = float(cfg.get("max_seconds_per_size", 600))
    last: tuple[int, float] | None = None
    for n in sizes:
        spec = synthetic.CorpusSpec(n=n, seed=ctx.seed, max_tokens=int(cfg.get("max_tokens", 32)),
                                    real_token_counts=bool(cfg.get("real_token_counts", False)))
        need, have = _bytes_needed(spec), _memory_available()
        if have is not None and need > have:
            ctx.rec.skip(W, f"{n} memories not run: their vectors need up to {need / 2**30:.1f} GiB "
                         f"(per-token vectors: {'every word, coded' if spec.real_token_counts else f'{spec.max_tokens} x {spec.dim} float16'} "
                         f"per memory), more than the {have / 2**30:.1f} GiB available on this machine", system="all")
            continue
        if last is not None:
            predicted = last[1] * n / last[0]
            if predicted > budget:
                ctx.rec.skip(W, f"{n} memories not run: {last[0]} took {last[1]:.0f} s, so {n} would take about "
                             f"{predicted:.0f} s (> {budget:.0f} s budget per size on this machine)", system="all")
                continue
        t0 = time.perf_counter()
        corpus = synthetic.make_corpus(spec)
        queries = synthetic.make_queries(corpus, m, seed=ctx.seed + 1)
        gen_s = time.perf_counter() - t0
        ctx.rec.add(W, "generator", metric="corpus", n=n, seconds=gen_s, chunks=n,
                    tokens=int(corpus.tok_ptr[-1]), real_token_counts=spec.real_token_counts,
                    sparse_nnz=int(corpus.sp_ptr[-1]),
                    median_words=float(np.median([w.size for w in corpus.word_ids])))
        if cfg.get("interleave"):
            _interleaved(ctx, corpus, queries, profiles, modes, k, {str(p): int(c) for p, c in
                                                                   dict(cfg.get("query_caps", {})).items()})
        else:
            _teleo(ctx, corpus, queries, profiles, k)
            _peers(ctx, corpus, queries, modes, k)
        last = (n, time.perf_counter() - t0)
        del corpus, queries
        gc.collect()
