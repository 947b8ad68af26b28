"""Building and querying peers with the same timing rules as Teleo (warm-up, percentiles)."""

from __future__ import annotations

import time
from pathlib import Path

import structlog

from bench.harness.results import percentiles
from bench.harness.workloads import Context
from bench.peers import Peer, PeerCorpus, PeerQueries, PeerUnavailable, load_peer

log = structlog.get_logger(__name__)


def open_peer(ctx: Context, name: str, workload: str) -> Peer | None:
    """The peer, or None after writing a skip record (missing package, failed start)."""
    try:
        return load_peer(name)
    except PeerUnavailable as exc:
        ctx.rec.skip(workload, str(exc), system=name)
        return None


def build(ctx: Context, peer: Peer, corpus: PeerCorpus, workdir: Path, workload: str, **params) -> float | None:
    try:
        seconds = peer.build(corpus, workdir)
    except Exception as exc:  # a peer failing must not sink the run; the record says why
        log.warning("peer.build_failed", peer=peer.name, error=repr(exc))
        ctx.rec.skip(workload, f"build failed: {exc!r}", system=peer.name)
        return None
    ctx.rec.add(workload, peer.name, metric="build", version=peer.version(), seconds=seconds,
                memories=len(corpus), chunks=corpus.n_chunks, memories_per_s=len(corpus) / max(seconds, 1e-9), **params)
    return seconds


def query_all(peer: Peer, mode: str, queries: PeerQueries, k: int, warmup: int = 3) -> tuple[list[list[int]], list[float]]:
    """Every query's memory indices and latency (ms), after ``warmup`` untimed queries."""
    for j in range(min(warmup, len(queries))):
        peer.search(mode, queries, j, k)
    ranked, times = [], []
    for j in range(len(queries)):
        t0 = time.perf_counter()
        ranked.append(peer.search(mode, queries, j, k))
        times.append((time.perf_counter() - t0) * 1e3)
    return ranked, times


def latency_fields(times: list[float]) -> dict:
    p = percentiles(times)
    return {"p50_ms": p["p50"], "p95_ms": p["p95"], "p99_ms": p["p99"], "queries": p["n"]}
