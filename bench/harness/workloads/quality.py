"""Quality and in-process latency on SciFact and LoCoMo, Teleo beside the peers on the same vectors.

Data loading, the embedding cache and the metrics are ``bench.eval``'s (the ones ``make eval``
uses), so both report the same numbers for the same run. Records carry ``metric="quality"`` with
nDCG@10, Recall@10 and Recall@100 (means over queries) and p50/p95/p99 query latency. LoCoMo is
searched per conversation (one index each), as an agent's memory would be.
"""

from __future__ import annotations

import gc
from collections import defaultdict

import numpy as np
import structlog

from bench.harness import teleo_inproc
from bench.harness.results import percentiles
from bench.harness.workloads import Context
from bench.harness.workloads.peers_run import build as build_peer
from bench.harness.workloads.peers_run import open_peer, query_all
from bench.peers import PeerCorpus, PeerQueries

log = structlog.get_logger(__name__)
W = "quality"
SPLIT = {"scifact": "test", "locomo": "dev"}


def _metrics(ranked: list[list[str]], relevant: list[dict[str, float]]) -> dict[str, float]:
    from bench.eval.metrics import ndcg_at, recall_at

    return {
        "ndcg@10": float(np.mean([ndcg_at(r, rel, 10) for r, rel in zip(ranked, relevant)])),
        "recall@10": float(np.mean([recall_at(r, rel, 10) for r, rel in zip(ranked, relevant)])),
        "recall@100": float(np.mean([recall_at(r, rel, 100) for r, rel in zip(ranked, relevant)])),
    }


class _Acc:
    """Accumulates ranked lists and latencies of one (system, mode) across LoCoMo conversations."""

    def __init__(self) -> None:
        self.ranked: list[list[str]] = []
        self.relevant: list[dict[str, float]] = []
        self.times: list[float] = []
        self.stages: dict[str, list[float]] = defaultdict(list)
        self.build_s = 0.0
        self.version = ""


def _teleo(ctx: Context, prepared, split: str, profiles: list[str], k: int, acc: dict) -> None:
    retriever = teleo_inproc.make(backend=ctx.backend)
    _, build_s = teleo_inproc.build(retriever, prepared.items)
    qs = prepared.queries[split]
    teleo_inproc.warm_up(retriever, qs[0][0].text, qs[0][1], profiles)
    for profile in profiles:
        a = acc[("teleo", profile)]
        a.build_s += build_s
        for q, emb in qs:
            r = teleo_inproc.run_query(retriever, q.text, emb, profile, k)
            a.ranked.append(r.ids)
            a.relevant.append(q.relevant)
            a.times.append(r.wall_ms)
            for s, ms in r.stages.items():
                a.stages[s].append(ms)
    del retriever
    gc.collect()


def _peers(ctx: Context, prepared, split: str, modes: dict, k: int, acc: dict, dataset: str) -> None:
    docs = [m for m, _ in prepared.items]
    corpus = PeerCorpus.from_sets([m.id for m in docs], [m.content for m in docs], [e for _, e in prepared.items])
    qs = prepared.queries[split]
    queries = PeerQueries.from_sets([q.text for q, _ in qs], [e for _, e in qs])
    for name in ctx.peers(list(modes)):
        peer = open_peer(ctx, name, W)
        if peer is None:
            continue
        try:
            seconds = build_peer(ctx, peer, corpus, ctx.workdir / W / f"{dataset}-{prepared.name}-{name}", W,
                                 dataset=dataset, part=prepared.name)
            if seconds is None:
                continue
            wanted = modes[name]
            for mode in ([wanted] if isinstance(wanted, str) else list(wanted)):
                ranked, times = query_all(peer, mode, queries, k)
                a = acc[(name, mode)]
                a.build_s += seconds
                a.version = peer.version()
                a.ranked += [[corpus.doc_ids[d] for d in r] for r in ranked]
                a.relevant += [q.relevant for q, _ in qs]
                a.times += times
        finally:
            peer.close()


def _interleaved(ctx: Context, prepared, split: str, profiles: list[str], modes: dict, k: int, acc: dict,
                 feet: dict, dataset: str, skipped: set) -> dict:
    """Teleo and every peer built side by side, then queried in alternation (``interleave = true``)."""
    from bench.harness.workloads import interleaved as il

    docs = [m for m, _ in prepared.items]
    corpus = PeerCorpus.from_sets([m.id for m in docs], [m.content for m in docs], [e for _, e in prepared.items])
    qs = prepared.queries[split]
    queries = PeerQueries.from_sets([q.text for q, _ in qs], [e for _, e in qs])
    retriever, build_s = il.build_teleo(ctx, prepared.items, feet.setdefault("teleo", il.Footprint()))
    teleo_inproc.warm_up(retriever, qs[0][0].text, qs[0][1], profiles)
    peers = il.build_peers(ctx, W, ctx.peers(list(modes)), corpus, ctx.workdir / W / f"{dataset}-{prepared.name}", feet,
                           dataset=dataset, part=prepared.name)
    try:
        texts, embs = [q.text for q, _ in qs], [e for _, e in qs]
        runners = [il.teleo_runner(retriever, texts, embs, p, k) for p in profiles]
        runners += il.peer_runners(ctx, W, peers, modes, queries, corpus.doc_ids, k, skipped=skipped)
        samples = il.run(runners, len(qs))
    finally:
        for peer in peers:
            peer.close()
    for (system, mode), smp in samples.items():
        a = acc[(system, mode)]
        if system == "teleo":
            a.build_s += build_s
        else:
            a.build_s = feet[system].build_s
        a.version = "" if system == "teleo" else feet[system].version
        a.ranked += smp.ranked
        a.relevant += [qs[j][0].relevant for j in smp.query_index]
        a.times += smp.times
        for st, v in smp.stages.items():
            a.stages[st] += v
    del retriever
    gc.collect()
    return samples


def run(ctx: Context) -> None:
    cfg = ctx.section("quality")
    if cfg.get("interleave"):
        return _run_interleaved(ctx, cfg)
    datasets = list(cfg.get("datasets", []))
    if not datasets:
        ctx.rec.skip(W, "no datasets in this config group")
        return
    from bench.eval.corpora import load_all

    profiles = list(cfg.get("profiles", ["hybrid", "teleological"]))
    modes = dict(cfg.get("peer_modes", {}))
    k = int(cfg.get("k", 100))
    for dataset in datasets:
        if dataset == "scifact" and not (ctx.data / "beir" / "scifact" / "corpus.jsonl.gz").is_file():
            ctx.rec.skip(W, f"SciFact not found under {ctx.data} (pass --data)", system=dataset)
            continue
        if dataset == "locomo" and not (ctx.data / "locomo" / "locomo_dev.json").is_file():
            ctx.rec.skip(W, f"LoCoMo not found under {ctx.data} (pass --data)", system=dataset)
            continue
        parts = load_all(ctx.data, ctx.cache, int(cfg.get("embed_threads", 1)), (dataset,))[dataset]
        split = SPLIT[dataset]
        acc: dict[tuple[str, str], _Acc] = defaultdict(_Acc)
        for prepared in parts:
            _teleo(ctx, prepared, split, profiles, k, acc)
            _peers(ctx, prepared, split, modes, k, acc, dataset)
        n_docs = sum(len(p.items) for p in parts)
        _record(ctx, acc, dataset, split, n_docs)

def _record(ctx: Context, acc: dict, dataset: str, split: str, n_docs: int, **extra) -> None:
    """One quality record per (system, mode): ranking metrics, latency percentiles, stage timings."""
    for (system, mode), a in acc.items():
        p = percentiles(a.times)
        rec = ctx.rec.add(W, system, metric="quality", dataset=dataset, split=split, mode=mode, **extra,
                          memories=n_docs, queries=len(a.times), **_metrics(a.ranked, a.relevant),
                          p50_ms=p["p50"], p95_ms=p["p95"], p99_ms=p["p99"], build_s=a.build_s,
                          stage_p50_ms={s: percentiles(v)["p50"] for s, v in a.stages.items()},
                          stage_p95_ms={s: percentiles(v)["p95"] for s, v in a.stages.items()},
                          version=a.version or None, backend=ctx.backend if system == "teleo" else None)
        log.info("quality", dataset=dataset, system=system, mode=mode, ndcg10=round(rec["ndcg@10"], 4),
                 p50_ms=round(p["p50"], 2))


def _run_interleaved(ctx: Context, cfg: dict) -> None:
    from bench.eval.corpora import load_all
    from bench.harness.workloads import interleaved as il

    profiles = list(cfg.get("profiles", ["hybrid", "teleological"]))
    modes = dict(cfg.get("peer_modes", {}))
    k = int(cfg.get("k", 100))
    for dataset in cfg.get("datasets", []):
        marker = {"scifact": ctx.data / "beir" / "scifact" / "corpus.jsonl.gz", "locomo": ctx.data / "locomo" / "locomo_dev.json"}
        if not marker[dataset].is_file():
            ctx.rec.skip(W, f"{dataset} not found under {ctx.data} (pass --data)", system=dataset)
            continue
        parts = load_all(ctx.data, ctx.cache, int(cfg.get("embed_threads", 1)), (dataset,))[dataset]
        split = SPLIT[dataset]
        acc: dict[tuple[str, str], _Acc] = defaultdict(_Acc)
        feet: dict[str, il.Footprint] = {}
        skipped: set = set()
        merged: dict[tuple[str, str], il.Samples] = defaultdict(il.Samples)
        offset = 0
        for prepared in parts:
            samples = _interleaved(ctx, prepared, split, profiles, modes, k, acc, feet, dataset, skipped)
            for key, smp in samples.items():
                m = merged[key]
                m.ranked += smp.ranked
                m.query_index += [offset + j for j in smp.query_index]
            offset += len(prepared.queries[split])
        il.agreement_checks(ctx, W, merged, dataset=dataset)
        n_docs = sum(len(p.items) for p in parts)
        for system, foot in feet.items():
            ctx.rec.add(W, system, dataset=dataset, **foot.record())
        _record(ctx, acc, dataset, split, n_docs, interleaved=True)
