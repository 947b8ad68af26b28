"""Teleo and the peers queried in alternation, so that a shared machine's load falls on all alike.

With ``interleave = true`` in a group's ``[quality]`` or ``[scale]`` section, Teleo's retriever and
every peer are built first and kept open together; then, query by query, each (system, mode) runs
that query once, in an order rotated by one per query (no system always runs first, after another's
cache misses). Ratios Teleo ÷ peer are then taken from samples drawn over the same minutes.

Also measured here, per system: RSS growth over its build (this process; every peer here runs
in-process) and its on-disk bytes, divided by the number of memories ("bytes per memory").
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import structlog

from bench.harness import teleo_inproc
from bench.harness.workloads import Context
from bench.harness.workloads.peers_run import build as build_peer
from bench.harness.workloads.peers_run import open_peer
from bench.peers import Peer, PeerCorpus, PeerQueries
from bench.harness.env import rss_bytes
from bench.peers.base import dir_bytes

log = structlog.get_logger(__name__)


@dataclass
class Runner:
    """One (system, mode): ``fn(j)`` answers query ``j`` with (memory ids, ms, per-stage ms)."""

    system: str
    mode: str
    fn: Callable[[int], tuple[list[str], float, dict[str, float]]]
    cap: int | None = None  # time only the first ``cap`` queries (a slow full scan at a large size)


@dataclass
class Samples:
    ranked: list[list[str]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)
    query_index: list[int] = field(default_factory=list)


def run(runners: list[Runner], n_queries: int, warmup: int = 3) -> dict[tuple[str, str], Samples]:
    """Every runner over queries 0..n-1, interleaved and rotated; ``warmup`` untimed queries first."""
    for j in range(min(warmup, n_queries)):
        for r in runners:
            r.fn(j)
    out = {(r.system, r.mode): Samples() for r in runners}
    for j in range(n_queries):
        s = j % max(len(runners), 1)
        for r in runners[s:] + runners[:s]:
            if r.cap is not None and j >= r.cap:
                continue
            ids, ms, stages = r.fn(j)
            acc = out[(r.system, r.mode)]
            acc.ranked.append(ids)
            acc.times.append(ms)
            acc.query_index.append(j)
            for st, v in stages.items():
                acc.stages.setdefault(st, []).append(v)
    return out


def teleo_runner(retriever, texts: list[str], embeddings: list, profile: str, k: int) -> Runner:
    def fn(j: int):
        r = teleo_inproc.run_query(retriever, texts[j], embeddings[j], profile, k)
        return r.ids, r.wall_ms, r.stages

    return Runner("teleo", profile, fn)


def peer_runner(peer: Peer, mode: str, queries: PeerQueries, doc_ids: list[str], k: int, cap: int | None) -> Runner:
    def fn(j: int):
        t0 = time.perf_counter()
        rows = peer.search(mode, queries, j, k)
        ms = (time.perf_counter() - t0) * 1e3
        return [doc_ids[d] for d in rows], ms, {}

    return Runner(peer.name, mode, fn, cap)


@dataclass
class Footprint:
    """Accumulated build cost of one system over the parts of a dataset (LoCoMo has several)."""

    build_s: float = 0.0
    rss_growth: int = 0
    disk: int = 0
    memories: int = 0
    chunks: int = 0
    breakdown: dict[str, int] = field(default_factory=dict)
    version: str = ""

    def add(self, build_s: float, rss_growth: int, disk: int, memories: int, chunks: int,
            breakdown: dict[str, int] | None = None, version: str = "") -> None:
        self.build_s += build_s
        self.rss_growth += max(rss_growth, 0)
        self.disk += disk
        self.memories += memories
        self.chunks += chunks
        for key, v in (breakdown or {}).items():
            self.breakdown[key] = self.breakdown.get(key, 0) + v
        self.version = version or self.version

    def record(self) -> dict:
        n = max(self.memories, 1)
        return {"metric": "memory", "memories": self.memories, "chunks": self.chunks, "build_s": self.build_s,
                "rss_growth_bytes": self.rss_growth, "disk_bytes": self.disk,
                "rss_bytes_per_memory": self.rss_growth / n, "disk_bytes_per_memory": self.disk / n,
                "disk_breakdown_bytes_per_memory": {key: v / n for key, v in sorted(self.breakdown.items())},
                "version": self.version or None}


def build_teleo(ctx: Context, items, foot: Footprint):
    """A Teleo retriever over ``items`` (an iterable of (Memory, EmbeddingSet)) and its footprint."""
    gc.collect()
    rss0 = rss_bytes()
    retriever = teleo_inproc.make(backend=ctx.backend)
    count, build_s = teleo_inproc.build(retriever, items)
    gc.collect()
    foot.add(build_s, rss_bytes() - rss0, 0, count, 0, version=f"teleo ({ctx.backend})")
    return retriever, build_s


def build_peers(ctx: Context, workload: str, names: list[str], corpus: PeerCorpus, workdir: Path,
                feet: dict[str, Footprint], **params) -> list[Peer]:
    """Open and build each named peer (skips recorded by ``open_peer`` / ``build``), measuring its footprint."""
    peers = []
    for name in names:
        peer = open_peer(ctx, name, workload)
        if peer is None:
            continue
        where = workdir / name
        gc.collect()
        rss0 = rss_bytes()
        seconds = build_peer(ctx, peer, corpus, where, workload, **params)
        if seconds is None:
            peer.close()
            continue
        gc.collect()
        breakdown = peer.disk_breakdown() if hasattr(peer, "disk_breakdown") else None
        feet.setdefault(name, Footprint()).add(seconds, rss_bytes() - rss0, dir_bytes(where), len(corpus),
                                               corpus.n_chunks, breakdown, peer.version())
        peers.append(peer)
    return peers


def peer_runners(ctx: Context, workload: str, peers: list[Peer], modes: dict, queries: PeerQueries,
                 doc_ids: list[str], k: int, caps: dict[str, int] | None = None, skipped: set | None = None) -> list[Runner]:
    """Runners for each peer's configured modes; modes the peer cannot serve are recorded as skips (once)."""
    runners = []
    for peer in peers:
        wanted = modes.get(peer.name, [])
        for mode in [wanted] if isinstance(wanted, str) else list(wanted):
            why = getattr(peer, "unavailable_modes", {}).get(mode)
            if why is None and mode not in peer.modes:
                why = f"{peer.name} has no mode {mode!r} (its modes: {', '.join(peer.modes)})"
            if why is not None:
                if skipped is None or (peer.name, mode) not in skipped:
                    ctx.rec.skip(workload, f"{mode}: {why}", system=peer.name)
                    if skipped is not None:
                        skipped.add((peer.name, mode))
                continue
            runners.append(peer_runner(peer, mode, queries, doc_ids, k, (caps or {}).get(peer.name)))
    return runners


def overlap_at(a: list[list[str]], b: list[list[str]], k: int = 10) -> float:
    """Mean top-``k`` overlap of two systems' rankings of the same queries."""
    vals = [len(set(x[:k]) & set(y[:k])) / max(min(len(x[:k]), k), 1) for x, y in zip(a, b) if x or y]
    return float(np.mean(vals)) if vals else float("nan")


# Peer modes that must return what one Teleo single space returns (same vectors, exact search).
AGREEMENT = [
    ("single_space:E1_semantic", "qdrant_edge", "dense_exact"),
    ("single_space:E1_semantic", "openclaw_sqlite", "dense"),
    ("single_space:E1_semantic", "openclaw_sqlite", "dense_knn"),
    ("single_space:E13_splade", "qdrant_edge", "sparse"),
    ("single_space:E6_lexical", "qdrant_edge", "bm25"),
    ("single_space:E6_lexical", "bm25s", "bm25"),
]


def agreement_checks(ctx: Context, workload: str, samples: dict[tuple[str, str], Samples], **key) -> None:
    """Top-10 overlap of each exact peer mode with the Teleo space it reproduces, as ``check`` records."""
    for profile, peer, mode in AGREEMENT:
        t, p = samples.get(("teleo", profile)), samples.get((peer, mode))
        if t is None or p is None:
            continue
        by_j = dict(zip(t.query_index, t.ranked))
        pairs = [(by_j[j], r) for j, r in zip(p.query_index, p.ranked) if j in by_j]
        value = overlap_at([a for a, _ in pairs], [b for _, b in pairs])
        ctx.rec.add(workload, peer, metric="check", mode=mode,
                    check=f"{peer} {mode} top-10 equals Teleo {profile} (same vectors, exact)",
                    value=value, passed=bool(value >= 0.99), **key)


__all__ = ["AGREEMENT", "Footprint", "Runner", "Samples", "agreement_checks", "build_peers", "build_teleo",
           "overlap_at", "peer_runners", "rss_bytes", "run", "teleo_runner"]
