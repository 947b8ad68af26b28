"""Retrieve latency on a synthetic corpus (default 100,000 memories), query embedding excluded.

Queries are perturbed copies of stored memories (vectors, tokens, sparse terms and a few words of
their text), so every stage has real work. Correctness first: the source memory must rank in
the top 10 for most queries. Reports p50/p95 per profile and per stage as JSON.

    python -m bench.eval.latency [--n 100000] [--queries 200] [--tenants 8]

A profile written ``name@kind`` runs with the query analyzer's reading forced to ``kind``
(``teleological@general``: the same queries read as general questions, so the memory-graph walk,
which every synthetic query would otherwise trigger by naming entities, does not run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from teleo_server.domain import ChunkEmbedding, EmbeddingSet
from teleo_server.pipeline import PipelineSettings, make_retriever
from bench.harness import memories as syn
from teleo_server.pipeline.types import Hit, Query, StageReport
from teleo_server.spaces.base import SparseScoredSpace

from bench.eval.run import REPO, environment


def _queries(items, n: int, seed: int, tenants: int) -> list[tuple[str, Query]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in rng.choice(len(items), size=n, replace=False):
        m, e = items[int(i)]
        c = e.chunks[0]
        d, t, sp = c.vectors["dense"], c.vectors["tokens"], c.vectors["splade"]
        dense = syn.unit(d + 0.05 * rng.standard_normal(d.size).astype(np.float32))
        toks = syn.unit(t[:8].astype(np.float32) + 0.05 * rng.standard_normal((min(8, t.shape[0]), d.size)).astype(np.float32))
        keep = np.sort(rng.choice(sp.size, size=max(1, sp.size // 2), replace=False))
        emb = EmbeddingSet(e.model_version, [ChunkEmbedding.from_models(dense, toks, sp.ids[keep], sp.weights[keep])])
        words = m.content.split()
        text = " ".join(rng.choice(words, size=min(6, len(words)), replace=False))
        # with tenants, the caller reads only its own namespace (per-tenant corpus statistics)
        who = syn.admin() if tenants <= 1 else syn.admin(frozenset({m.namespace}))
        out.append((m.id, Query(text=text, embedding=emb, principal=who, top_k=10)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=24, help="per-token vectors per memory")
    ap.add_argument("--profiles", default="teleological,teleological@general,hybrid,hipporag")
    ap.add_argument("--tenants", type=int, default=1,
                    help="spread memories over this many namespaces; each query then reads only its own")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "latency.json")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    items = syn.corpus(args.n, tokens=args.tokens, topics=200)
    if args.tenants > 1:
        for i, (m, _) in enumerate(items):
            m.namespace = f"tenant{i % args.tenants}"
    t_gen = time.perf_counter() - t0
    r = make_retriever(PipelineSettings(), "numpy")
    t0 = time.perf_counter()
    for m, e in items:
        r.add(m, e)
    t_add = time.perf_counter() - t0
    queries = _queries(items, args.queries, seed=1, tenants=args.tenants)
    t0 = time.perf_counter()
    r.maintain()  # goals and calibration: the server's background upkeep, never a query's cost
    t_maintain = time.perf_counter() - t0
    # Memories arrive one add at a time, as through Store, so the sparse indexes carry a live
    # (unmerged) delta the way a server taking writes does; a freshly started server has none.
    pending = {name: space.index.pending for name, space in r.spaces.items() if isinstance(space, SparseScoredSpace)}
    result = {"environment": environment(), "n": args.n, "queries": args.queries, "tenants": args.tenants, "generate_s": t_gen,
              "index_s": t_add, "maintenance_s": t_maintain, "sparse_delta_entries": pending, "profiles": {}}
    for prof in args.profiles.split(","):
        name, _, kind = prof.partition("@")
        lat, stages, found = [], defaultdict(list), 0
        for warm in (True, False):
            for mid, q in queries[: 10 if warm else None]:
                q.profile, q.overrides = name, dataclasses.replace(q.overrides, query_type=kind)
                t = time.perf_counter()
                events = list(r.retrieve(q))
                dt = (time.perf_counter() - t) * 1e3
                if warm:
                    continue
                lat.append(dt)
                found += mid in [e.memory.id for e in events if isinstance(e, Hit)]
                for e in events:
                    if isinstance(e, StageReport):
                        stages[e.stage].append(e.elapsed_ms)
        a = np.array(lat)
        result["profiles"][prof] = {
            "p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)), "p99_ms": float(np.percentile(a, 99)),
            "source_in_top10": found / len(queries),
            "stage_p50_ms": {s: float(np.percentile(v, 50)) for s, v in stages.items()},
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))  # noqa: T201 - the command's report
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
