"""Retrieval latency of the whole pipeline, in-process, on the numpy and cupy backends.

The same synthetic corpus (precomputed vectors: no query embedding is timed) is indexed once per
backend; every query runs on each, and the answers are compared (same top-10 ids in the same
order, and as sets) before any time is reported. Complements ``bench_kernels.py``, which times the
kernels alone.

    python bench/gpu/pipeline_latency.py --sizes 10000 --backends numpy,cupy --out DIR

On ``cupy`` every space an index backend can serve keeps its rows on the device (the device
defaults: ``dense.resident``, ``sparse.resident``, ``bm25.resident``, ``tokens.resident``); only
the query and each space's top k cross the bus. A backend written ``compute:name`` also names an
index backend for the space of its kind (``[pipeline.spaces.<space>] index``; several joined by
``+``): ``cupy:dense.cagra`` searches the semantic space with CAGRA, ``numpy:bm25.numpy`` weighs
BM25 exactly at query time on the host, as ``bm25.resident`` does on the device (the built-in BM25
field keeps float16 values weighed with an average length up to 0.5% old, so near ties may come
out in another order). The first backend listed is the reference every other is compared with; a
device backend that names no index must agree with it on 99% of the top-10 sets or the run fails
(one that names one is reported, not held to it).

Writes ``pipeline.jsonl`` (one object per size, backend and profile, plus the agreement) and
``pipeline.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.harness import teleo_inproc as inproc  # noqa: E402
from bench.harness.synthetic import CorpusSpec, make_corpus, make_queries  # noqa: E402
from bench.harness.workloads.scale import memory_of  # noqa: E402


def split(backend: str) -> tuple[str, str]:
    """(compute backend, the index backends it names, ``+``-joined, or "") of a ``--backends`` entry."""
    compute, _, index = backend.partition(":")
    return compute, index


# the space a named backend of each kind serves
SPACE_OF_KIND = {"dense": "E1_semantic", "sparse": "E13_splade", "bm25": "E6_lexical", "tokens": "E12_late"}


def with_index(settings: dict, index: str) -> dict:
    """``settings`` with each backend named in ``index`` (``+``-joined; unchanged for "") serving
    the space of its kind (the part of its name before the dot)."""
    spaces = dict(settings.get("spaces", {}))
    for name in filter(None, index.split("+")):
        space = SPACE_OF_KIND[name.partition(".")[0]]
        spaces[space] = {**spaces.get(space, {}), "index": name}
    return {**settings, "spaces": spaces} if index else settings


def device_name(backend: str) -> str:
    if split(backend)[0] != "cupy":
        return platform.processor() or platform.machine()
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def group_throughput(retriever, queries, profile: str, group: int) -> tuple[float, list[list[str]]]:
    """Queries a second when the retrievals come ``group`` at a time, as the index thread takes
    those waiting together (``retrieve_together``), and every query's answer."""
    from teleo_server.pipeline.types import Hit, Query

    asked = [Query(text=queries.texts[j], embedding=queries.embedding(j), principal=inproc.PRINCIPAL, top_k=10,
                   profile=profile, now=inproc.NOW) for j in range(len(queries))]
    answers: list[list[str]] = []
    t0 = time.perf_counter()
    for lo in range(0, len(asked), group):
        for events in retriever.retrieve_together(asked[lo:lo + group]):
            answers.append([e.memory.id for e in events if isinstance(e, Hit)][:10])
    return len(asked) / (time.perf_counter() - t0), answers


def measure(size: int, backend: str, profiles: list[str], n_queries: int, repeat: int, settings: dict,
            group: int = 1) -> dict:
    corpus = make_corpus(CorpusSpec(n=size))
    queries = make_queries(corpus, n_queries)
    compute, index = split(backend)
    retriever = inproc.make(with_index(settings, index), backend=compute)
    _, build_s = inproc.build(retriever, ((memory_of(corpus, i), corpus.embedding(i)) for i in range(size)))
    inproc.warm_up(retriever, queries.texts[0], queries.embedding(0), profiles)
    out: dict = {"build_s": build_s, "profiles": {}, "device_bytes_per_memory": device_bytes(retriever, size)}
    rt = None
    if getattr(retriever, "runtime", None):
        from teleo_server.gpu import runtime

        rt = runtime.get(retriever.runtime)
    for profile in profiles:
        sent = rt.downloaded if rt is not None else 0
        walls: list[float] = []
        answers: list[list[str]] = []
        stages: dict[str, list[float]] = {}
        for rep in range(repeat):
            for j in range(len(queries)):
                run = inproc.run_query(retriever, queries.texts[j], queries.embedding(j), profile, 10)
                walls.append(run.wall_ms)
                for name, ms in run.stages.items():
                    stages.setdefault(name, []).append(ms)
                if rep == 0:
                    answers.append(run.ids)
        out["profiles"][profile] = {
            "p50_ms": float(np.percentile(walls, 50)), "p95_ms": float(np.percentile(walls, 95)),
            "p99_ms": float(np.percentile(walls, 99)), "queries": len(walls),
            "stage_p50_ms": {k: float(np.percentile(v, 50)) for k, v in stages.items()},
            "queries_per_s": len(walls) / (sum(walls) / 1e3),
            # device-to-host bytes a query sent (to_host copies; None on the host backend)
            "bytes_to_host_per_query": None if rt is None else (rt.downloaded - sent) / len(walls),
            "answers": answers,
        }
        if group > 1:
            qps, grouped = group_throughput(retriever, queries, profile, group)
            out["profiles"][profile].update({"group": group, "queries_per_s_grouped": qps,
                                             "grouped_same_order": float(np.mean([a == b for a, b in zip(answers, grouped)]))})
    return out


def device_bytes(retriever, size: int) -> dict[str, float]:
    """Device bytes a memory takes in each space served by a resident backend (its rows, offsets
    and live bitset, as held after the build; the capacity not yet used excluded)."""
    out = {}
    for name, space in retriever.spaces.items():
        held = getattr(getattr(space, "backend", None), "device_bytes", None)
        if getattr(space, "named", "") and held is not None:
            out[name] = held / size
    return out


def write(out: Path, rows: list[dict], lines: list[str], backends: list[str]) -> None:
    agreement = "; ".join(f"{r['size']:,} {r['profile']} {r['backend']}: same set {r['top10_same_set']:.3f}, "
                          f"same order {r['top10_same_order']:.3f}" for r in rows if r["backend"] != backends[0])
    (out / "pipeline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "pipeline.md").write_text("\n".join([*lines, "", f"Agreement (top-10 against {backends[0]}): {agreement}"]) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000")
    ap.add_argument("--backends", default="numpy:bm25.numpy,cupy,numpy")
    ap.add_argument("--profiles", default="teleological,hybrid")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--settings", type=json.loads, default={},
                    help="pipeline settings (JSON) for every backend, e.g. the same dense row values on each: "
                         "'{\"spaces\": {\"E1_semantic\": {\"values\": \"float32\"}}}' (the default, auto, "
                         "keeps int8 rows on numpy and float32 on a device)")
    ap.add_argument("--group", type=int, default=16,
                    help="also run the queries this many at a time, as the index thread takes waiting retrievals "
                         "together (retrieve_together), and report queries a second (1: not)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    profiles = args.profiles.split(",")
    backends = args.backends.split(",")
    rows, lines = [], ["| memories | profile | backend (device) | p50 ms | p95 ms | p99 ms | queries/s | "
                       f"queries/s, {args.group} at a time | build s |",
                       "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    failed = False
    for size in (int(s) for s in args.sizes.split(",")):
        results = {b: measure(size, b, profiles, args.queries, args.repeat, args.settings, args.group) for b in backends}
        for profile in profiles:
            ref = results[backends[0]]["profiles"][profile]["answers"]
            for b in backends:
                r = results[b]["profiles"][profile]
                same_order = float(np.mean([a == x for a, x in zip(ref, r["answers"])]))
                same_set = float(np.mean([set(a) == set(x) for a, x in zip(ref, r["answers"])]))
                row = {"size": size, "profile": profile, "backend": b, "device": device_name(b),
                       "build_s": results[b]["build_s"], "top10_same_order": same_order,
                       "device_bytes_per_memory": results[b]["device_bytes_per_memory"],
                       "top10_same_set": same_set, "versus": backends[0],
                       "settings": with_index(args.settings, split(b)[1]),
                       **{k: v for k, v in r.items() if k != "answers"}}
                rows.append(row)
                grouped = r.get("queries_per_s_grouped")
                lines.append(f"| {size:,} | {profile} | {b} ({row['device']}) | {r['p50_ms']:.2f} | "
                             f"{r['p95_ms']:.2f} | {r['p99_ms']:.2f} | {r['queries_per_s']:.0f} | "
                             f"{'-' if grouped is None else f'{grouped:.0f}'} | {results[b]['build_s']:.1f} |")
                failed |= r.get("grouped_same_order", 1.0) < 1.0  # a group answers as each query alone
                print(json.dumps({k: v for k, v in row.items() if k != "stage_p50_ms"}), flush=True)
                failed |= same_set < 0.99 and split(b)[0] != "numpy" and not split(b)[1]
        write(args.out, rows, lines, backends)  # after each size, so a run cut short keeps what it measured
    print((args.out / "pipeline.md").read_text())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
