"""Ingest throughput, with embedding and without, on the same texts.

Three Teleo measurements, named by what they include:

* ``grpc_store_batch``: ``StoreBatch`` through the real server: validation, embedding (in-process
  engine), durable SQLite commit, indexing. What a client sees.
* ``embed_only``: the same texts through the embedding engine alone, in this process.
* ``store_and_index``: precomputed embeddings written with ``SQLiteStore.put_many`` and indexed with
  ``Retriever.add``: the server's ingest path with embedding excluded.

Peers ingest the same precomputed vectors (insert, flush, index build) for comparison with the
last one.
"""

from __future__ import annotations

import time

import numpy as np
import structlog
from teleo.v1 import memory_pb2 as pb

from bench.harness import teleo_inproc
from bench.harness.server import ServerProcess, store_batch
from bench.harness.workloads import Context
from bench.harness.workloads.latency import synthetic_inputs
from bench.harness.workloads.peers_run import build as build_peer
from bench.harness.workloads.peers_run import open_peer
from bench.peers import PeerCorpus
from teleo_server.domain import Memory, content_hash

log = structlog.get_logger(__name__)
W = "ingest"


def _texts(ctx: Context, corpus: str, n: int) -> tuple[list[str], str]:
    if corpus == "scifact":
        from bench.eval.datasets import scifact

        if (ctx.data / "beir" / "scifact" / "corpus.jsonl.gz").is_file():
            return [d.text for d in scifact(ctx.data).docs[:n]], "scifact"
        ctx.rec.skip(W, f"SciFact not found under {ctx.data}; using synthetic texts", system="teleo")
    inputs, _ = synthetic_inputs(n, ctx.seed)
    return [m.content for m in inputs], "synthetic"


def _precomputed(ctx: Context, cfg: dict) -> None:
    """``precomputed = true``: no server and no embedding; Teleo's SQLite commit + indexing of cached
    embeddings beside each peer's insert + flush + index build of the same vectors."""
    from bench.harness import synthetic

    n, batch = int(cfg.get("n", 2000)), int(cfg.get("batch", 64))
    if (ctx.data / "beir" / "scifact" / "corpus.jsonl.gz").is_file():
        from bench.eval.corpora import load_all

        prepared = load_all(ctx.data, ctx.cache, 1, ("scifact",))["scifact"][0]
        texts = [m.content for m, _ in prepared.items[:n]]
        sets = [e for _, e in prepared.items[:n]]
        corpus = "scifact"
    else:
        ctx.rec.skip(W, f"SciFact not found under {ctx.data}; using synthetic memories", system="teleo")
        syn = synthetic.make_corpus(synthetic.CorpusSpec(n=n, seed=ctx.seed, max_tokens=32))
        texts, sets, corpus = syn.texts, [syn.embedding(i) for i in range(n)], "synthetic"
    memories = _store_and_index(ctx, texts, sets, batch, corpus, footprint=True)
    _build_peers(ctx, memories, texts, sets, corpus)


def run(ctx: Context) -> None:
    cfg = ctx.section("ingest")
    if cfg.get("precomputed"):
        return _precomputed(ctx, cfg)
    n, batch = int(cfg.get("n", 256)), int(cfg.get("batch", 64))
    texts, corpus = _texts(ctx, cfg.get("corpus", "synthetic"), n)
    words = float(np.mean([len(t.split()) for t in texts]))

    server = ServerProcess(ctx.workdir / W / "server-data", ctx.backend)
    with server.start():
        per_call, stored = [], 0
        t0 = time.perf_counter()
        for lo in range(0, len(texts), batch):
            inputs = [pb.MemoryInput(content=t, namespace="ingest") for t in texts[lo:lo + batch]]
            t1 = time.perf_counter()
            resp = store_batch(server.address, server.metadata, inputs)
            per_call.append(time.perf_counter() - t1)
            stored += resp.stored
        wall = time.perf_counter() - t0
    ctx.rec.add(W, "teleo", metric="grpc_store_batch", corpus=corpus, memories=len(texts), stored=stored,
                batch=batch, seconds=wall, memories_per_s=stored / max(wall, 1e-9), mean_words=words,
                includes="validation, embedding, SQLite commit, indexing")

    from teleo_server.embedding.engine import Engine
    from teleo_server.embedding.repository import default_model_dir

    engine = Engine(default_model_dir(), threads=int(cfg.get("embed_threads", 1)))
    t0 = time.perf_counter()
    sets = []
    for lo in range(0, len(texts), batch):
        part = texts[lo:lo + batch]
        sets.extend(engine.embed(part, [False] * len(part)))
    embed_s = time.perf_counter() - t0
    ctx.rec.add(W, "teleo", metric="embed_only", corpus=corpus, memories=len(texts), seconds=embed_s,
                memories_per_s=len(texts) / max(embed_s, 1e-9), threads=int(cfg.get("embed_threads", 1)),
                chunks=sum(len(s.chunks) for s in sets),
                includes=f"chunking, MiniLM and splade-tiny in this process ({int(cfg.get('embed_threads', 1))} thread(s))")

    memories = _store_and_index(ctx, texts, sets, batch, corpus)
    _build_peers(ctx, memories, texts, sets, corpus)


def _build_peers(ctx: Context, memories: list, texts: list[str], sets: list, corpus: str) -> None:
    """Each peer's insert, flush and index build of the same precomputed vectors, timed."""
    pc = PeerCorpus.from_sets([m.id for m in memories], texts, sets)
    for name in ctx.peers():
        peer = open_peer(ctx, name, W)
        if peer is None:
            continue
        try:
            build_peer(ctx, peer, pc, ctx.workdir / W / name, W, dataset=corpus,
                       includes="insert of precomputed vectors, flush, index build")
        finally:
            peer.close()


def _store_and_index(ctx: Context, texts: list[str], sets: list, batch: int, corpus: str,
                     footprint: bool = False) -> list:
    """Teleo's SQLite commit and indexing of precomputed embeddings, timed and recorded (with the
    RSS growth and the database's bytes when ``footprint``); returns the memories written."""
    from bench.harness.env import rss_bytes
    from bench.peers.base import dir_bytes
    from teleo_server.store import SQLiteStore

    memories = [Memory(id=f"i{i}", namespace="ingest", content=t, content_hash=content_hash(t),
                       event_time=1.7e9 + i, ingestion_time=1.7e9 + i) for i, t in enumerate(texts)]
    store_dir = ctx.workdir / W / "direct"
    store_dir.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(store_dir / "teleo.db")
    rss0 = rss_bytes()
    retriever = teleo_inproc.make(backend=ctx.backend)
    t0 = time.perf_counter()
    try:
        for lo in range(0, len(memories), batch):
            items = list(zip(memories[lo:lo + batch], sets[lo:lo + batch], strict=True))
            for m, dup in store.put_many(items):
                if not dup:
                    retriever.add(m, sets[int(m.id[1:])])
    finally:
        store.close()
    direct_s = time.perf_counter() - t0
    extra = {"chunks": sum(len(e.chunks) for e in sets), "rss_growth_bytes": rss_bytes() - rss0,
             "disk_bytes": dir_bytes(store_dir)} if footprint else {}
    ctx.rec.add(W, "teleo", metric="store_and_index", corpus=corpus, memories=len(texts), seconds=direct_s,
                memories_per_s=len(texts) / max(direct_s, 1e-9), batch=batch, **extra,
                includes="SQLite commit and indexing of precomputed embeddings (embedding excluded)")
    del retriever
    return memories
