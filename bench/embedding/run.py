"""Embedding throughput (texts/s) and per-request latency, through Triton and in-process.

    python -m bench.embedding [--group smoke|full] [--data ../shared/data] [--out DIR]
                              [--triton-url HOST:PORT]

Without ``--triton-url`` a tritonserver is started from ``.venv-triton`` on free loopback
ports (``make triton-env``). Both systems serve the same models from ``triton_models/`` with
the same onnxruntime thread count; the cache is not involved. Correctness is checked first
(identical EmbeddingSets on a sample), then each case warms up and is timed. Results are JSON
lines (``results.jsonl``) with the environment, percentiles rather than means, and the ratio of
Triton to in-process measured in the same run.

Cases
-----
batch_short   short sentences in batches of ``batch`` texts, one call per batch (texts/s)
batch_long    passages (SciFact abstracts with ``--data``, synthetic otherwise), same
single        one text per call, sequential (latency p50/p90/p99, ms)
concurrent    ``clients`` single-text calls in flight at once (texts/s and per-call latency);
              the Triton client coalesces them, in-process calls queue on one worker
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import time
from pathlib import Path

import numpy as np
import structlog

from bench.harness.env import REPO, environment
from teleo_server.embedding.base import TextRole
from teleo_server.embedding.inprocess import InProcessEmbedder
from teleo_server.embedding.repository import default_model_dir
from teleo_server.embedding.triton import TritonEmbedder
from teleo_server.embedding.triton_launcher import TritonInstall, TritonServer, default_triton_venv

log = structlog.get_logger(__name__)

GROUPS = {
    "smoke": {"short": 16, "long": 4, "batch": 8, "single": 5, "clients": 8, "warmup": 1},
    "full": {"short": 512, "long": 96, "batch": 32, "single": 100, "clients": 64, "warmup": 2},
}
THREADS = 2  # the Triton models' INTRA_OP_THREADS in config.pbtxt


def short_texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    subjects = ["The agent", "My manager", "The user", "Our team", "The assistant", "Alice"]
    verbs = ["prefers", "forgot", "booked", "reviewed", "asked about", "scheduled"]
    objects = ["a flight to Lisbon", "the quarterly report", "short answers", "the GPU budget",
               "a dentist appointment", "the retrieval benchmark", "vegetarian restaurants"]
    return [f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)} on day {i}."
            for i in range(n)]


def long_texts(n: int, data: Path | None) -> tuple[list[str], str]:
    corpus = data / "beir" / "scifact" / "corpus.jsonl.gz" if data else None
    if corpus is not None and corpus.is_file():
        with gzip.open(corpus, "rt") as f:
            docs = [json.loads(line) for _, line in zip(range(n), f)]
        return [f"{d['title']} {d['text']}" for d in docs], "scifact"
    base = short_texts(n * 8, seed=1)
    return [" ".join(base[i * 8:(i + 1) * 8]) for i in range(n)], "synthetic"


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1e3
    return {f"p{p}_ms": round(float(np.percentile(ms, p)), 2) for p in (50, 90, 99)}


async def check_identical(a, b, texts: list[str]) -> None:
    for role in (TextRole.DOCUMENT, TextRole.QUERY):
        ra, rb = await a.embed(texts, role), await b.embed(texts, role)
        for x, y in zip(ra, rb):
            assert len(x.chunks) == len(y.chunks)
            for cx, cy in zip(x.chunks, y.chunks):
                if cx.vectors.keys() != cy.vectors.keys():
                    raise AssertionError("the two systems make different heads")
                for head, vx in cx.vectors.items():
                    vy = cy.vectors[head]
                    pairs = [(vx.ids, vy.ids), (vx.weights, vy.weights)] if hasattr(vx, "ids") \
                        else [(vx, vy)]
                    if not all(np.array_equal(x, y) for x, y in pairs):
                        raise AssertionError(f"head {head} differs between the two systems")


async def case_batches(embedder, cfg: dict, texts: list[str]) -> dict:
    batch = cfg["batch"]
    for _ in range(cfg["warmup"]):
        await embedder.embed(texts[:batch], TextRole.DOCUMENT)
    per_call = []
    t0 = time.perf_counter()
    for lo in range(0, len(texts), batch):
        t1 = time.perf_counter()
        await embedder.embed(texts[lo:lo + batch], TextRole.DOCUMENT)
        per_call.append(time.perf_counter() - t1)
    wall = time.perf_counter() - t0
    return {"texts": len(texts), "batch": batch, "seconds": round(wall, 3),
            "texts_per_s": round(len(texts) / wall, 1), **percentiles(per_call)}


async def case_single(embedder, cfg: dict, texts: list[str]) -> dict:
    singles = texts[:cfg["single"]]
    for t in singles[:3]:
        await embedder.embed([t], TextRole.QUERY)
    lat = []
    for t in singles:
        t1 = time.perf_counter()
        await embedder.embed([t], TextRole.QUERY)
        lat.append(time.perf_counter() - t1)
    return {"texts": len(singles), **percentiles(lat)}


async def case_concurrent(embedder, cfg: dict, texts: list[str]) -> dict:
    clients = texts[:cfg["clients"]]
    lat: list[float] = []

    async def one(text: str) -> None:
        t1 = time.perf_counter()
        await embedder.embed([text], TextRole.QUERY)
        lat.append(time.perf_counter() - t1)

    await asyncio.gather(*(one(t) for t in clients[:4]))  # warm-up
    lat.clear()
    t0 = time.perf_counter()
    await asyncio.gather(*(one(t) for t in clients))
    wall = time.perf_counter() - t0
    return {"texts": len(clients), "seconds": round(wall, 3),
            "texts_per_s": round(len(clients) / wall, 1), **percentiles(lat)}


async def run_cases(systems: dict, cfg: dict, short: list[str],
                    long: list[str]) -> dict[str, dict[str, dict]]:
    """results[case][system]; the systems alternate within each case so that load changes on
    a shared machine affect both alike."""
    cases = {"batch_short": (case_batches, short), "batch_long": (case_batches, long),
             "single": (case_single, short), "concurrent": (case_concurrent, short)}
    results: dict[str, dict[str, dict]] = {}
    for case, (fn, texts) in cases.items():
        results[case] = {}
        for system, embedder in systems.items():
            log.info("bench.embedding.case", case=case, system=system)
            results[case][system] = await fn(embedder, cfg, texts)
    return results


async def bench(args: argparse.Namespace) -> list[dict]:
    cfg = GROUPS[args.group]
    short = short_texts(cfg["short"])
    long, corpus = long_texts(cfg["long"], args.data)
    server = None
    url = args.triton_url
    if url is None:
        server = TritonServer(TritonInstall.find(args.triton_venv), args.model_dir)
        log_path = REPO / "bench" / "results" / "tmp" / "embedding-triton.log"  # git-ignored
        log_path.parent.mkdir(parents=True, exist_ok=True)
        server.start(log_to=log_path)
        server.wait_ready()
        url = server.grpc_url
    local = InProcessEmbedder(args.model_dir, threads=THREADS, max_batch=cfg["batch"])
    remote = TritonEmbedder(url, timeout_s=120, max_batch=cfg["batch"])
    rows = []
    try:
        await local.start()
        await remote.start()
        await check_identical(remote, local, short[:4] + long[:2])
        results = await run_cases({"in_process": local, "triton": remote}, cfg, short, long)
        for case, by_system in results.items():
            peer = by_system["in_process"]
            for system, measured in by_system.items():
                row = {"workload": "embedding", "case": case, "system": system,
                       "corpus": corpus if case == "batch_long" else "synthetic",
                       "threads": THREADS, "correct": True, **measured}
                if "texts_per_s" in row:
                    row["throughput_vs_in_process"] = round(
                        row["texts_per_s"] / peer["texts_per_s"], 3)
                row["p50_vs_in_process"] = round(row["p50_ms"] / peer["p50_ms"], 3)
                rows.append(row)
    finally:
        await remote.close()
        await local.close()
        if server is not None:
            server.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.embedding", description=__doc__.split("\n")[0])
    ap.add_argument("--group", choices=sorted(GROUPS), default="smoke")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data",
                    help="dataset root for SciFact passages (default ../shared/data)")
    ap.add_argument("--out", type=Path, default=None,
                    help="output directory (default bench/embedding/results/<group>)")
    ap.add_argument("--triton-url", default=None, help="use a running Triton instead of starting one")
    ap.add_argument("--triton-venv", type=Path, default=default_triton_venv())
    ap.add_argument("--model-dir", type=Path, default=default_model_dir())
    args = ap.parse_args(argv)
    args.out = args.out or REPO / "bench" / "embedding" / "results" / args.group
    args.out.mkdir(parents=True, exist_ok=True)
    env = environment()
    rows = asyncio.run(bench(args))
    with (args.out / "results.jsonl").open("a") as f:
        for row in rows:
            f.write(json.dumps({**row, "group": args.group, **env}) + "\n")
    for row in rows:
        log.info("bench.embedding.result", **{k: v for k, v in row.items() if k != "workload"})
    return 0
