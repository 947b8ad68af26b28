"""Latency through the real gRPC server: N concurrent clients, end to end and per stage.

The server is ``python -m teleo_server serve`` on a free port with the in-process embedder, so
every request pays query embedding (reported apart as ``embed_ms``). With SciFact the store is
written beforehand from the cached embeddings (the server loads it at start-up, exactly as after
a restart); with the synthetic corpus the texts go in through ``StoreBatch``.
"""

from __future__ import annotations

import time

import numpy as np
import structlog
from teleo.v1 import memory_pb2 as pb

from bench.harness import synthetic
from bench.harness.results import percentiles
from bench.harness.server import ServerProcess, retrieve_load, store_batch
from bench.harness.workloads import Context

log = structlog.get_logger(__name__)
W = "latency"


def _prebuilt_store(ctx: Context, data_dir) -> tuple[list[str], int, str]:
    """SciFact written to a fresh store from cached embeddings; returns (query texts, memories, corpus)."""
    from bench.eval.corpora import load_all
    from teleo_server.store import SQLiteStore

    cfg = ctx.section("quality")
    prepared = load_all(ctx.data, ctx.cache, int(cfg.get("embed_threads", 1)), ("scifact",))["scifact"][0]
    data_dir.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(data_dir / "teleo.db")
    try:
        store.put_many(prepared.items)
    finally:
        store.close()
    return [q.text for q, _ in prepared.queries["test"]], len(prepared.items), "scifact"


def synthetic_inputs(n: int, seed: int) -> tuple[list[pb.MemoryInput], list[str]]:
    corpus = synthetic.make_corpus(synthetic.CorpusSpec(n=n, seed=seed, median_words=20, max_words=120, max_tokens=1))
    queries = synthetic.make_queries(corpus, max(8, n // 4), seed=seed + 1)
    inputs = [pb.MemoryInput(content=t, namespace="bench", session_id=f"s{i // 10}", session_position=i % 10)
              for i, t in enumerate(corpus.texts)]
    return inputs, queries.texts


def run(ctx: Context) -> None:
    cfg = ctx.section("latency")
    data_dir = ctx.workdir / W / "server-data"
    corpus = cfg.get("corpus", "synthetic")
    if corpus == "scifact" and not (ctx.data / "beir" / "scifact" / "corpus.jsonl.gz").is_file():
        ctx.rec.skip(W, f"SciFact not found under {ctx.data}; using the synthetic corpus", system="teleo")
        corpus = "synthetic"
    if corpus == "scifact":
        query_texts, n, corpus = _prebuilt_store(ctx, data_dir)
        inputs = []
    else:
        inputs, query_texts = synthetic_inputs(int(cfg.get("synthetic_n", 200)), ctx.seed)
        n = len(inputs)
    server = ServerProcess(data_dir, ctx.backend)
    t0 = time.perf_counter()
    with server.start():
        start_s = time.perf_counter() - t0
        if inputs:
            resp = store_batch(server.address, server.metadata, inputs)
            if resp.failed:
                raise RuntimeError(f"StoreBatch failed for {resp.failed} items: {resp.items[0].error}")
        ctx.rec.add(W, "teleo", metric="server", corpus=corpus, memories=n, start_to_serving_s=start_s,
                    rss_mb=server.rss_mb())
        batched = bool(cfg.get("batched", False))  # results in one message, stages in the summary
        for profile in cfg.get("profiles", ["hybrid", "teleological"]):
            requests = [pb.RetrieveRequest(text=t, top_k=10, profile=profile, batched=batched) for t in query_texts]
            retrieve_load(server.address, server.metadata, requests[:4], 1, 4)  # warm-up, untimed
            for clients in [int(c) for c in cfg.get("clients", [1, 4])]:
                per_client = int(cfg.get("requests_per_client", 20))
                timings, wall = retrieve_load(server.address, server.metadata, requests, clients, per_client)
                ok = [t for t in timings if not t.error]
                errors = sorted({t.error for t in timings if t.error})
                stages: dict[str, list[float]] = {}
                for t in ok:
                    for s, ms in t.stages.items():
                        stages.setdefault(s, []).append(ms)
                e2e = percentiles([t.e2e_ms for t in ok])
                ctx.rec.add(W, "teleo", metric="grpc", corpus=corpus, memories=n, profile=profile, clients=clients,
                            batched=batched,
                            requests=len(timings), errors=len(timings) - len(ok), error_codes=errors,
                            p50_ms=e2e["p50"], p95_ms=e2e["p95"], p99_ms=e2e["p99"],
                            first_result_p50_ms=percentiles([t.first_result_ms for t in ok])["p50"],
                            server_total_p50_ms=percentiles([t.total_ms for t in ok])["p50"],
                            embed_p50_ms=percentiles([t.embed_ms for t in ok])["p50"],
                            stage_p50_ms={s: percentiles(v)["p50"] for s, v in stages.items()},
                            stage_p95_ms={s: percentiles(v)["p95"] for s, v in stages.items()},
                            stage_p99_ms={s: percentiles(v)["p99"] for s, v in stages.items()},
                            throughput_qps=len(ok) / max(wall, 1e-9),
                            returned_mean=float(np.mean([len(t.ids) for t in ok])) if ok else 0.0)
                log.info("latency.grpc", profile=profile, clients=clients, p50=round(e2e["p50"], 1),
                         qps=round(len(ok) / max(wall, 1e-9), 1))
