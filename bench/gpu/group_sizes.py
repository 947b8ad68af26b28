"""How large the groups of waiting retrievals get when callers query at once, and the queries a
second that gives: ``--callers`` callers each run their share of the queries one after another
through a :class:`~teleo_server.core.MemoryCore` (the server's own queue and index thread: what
waits when the thread frees up is taken as one group, ``pipeline.retrieval_group`` at most), over
a synthetic corpus with precomputed vectors (no query embedding, no gRPC).

    python bench/gpu/group_sizes.py --backend numpy|cupy|emulated --size 10000 --callers 1,4,16 [--out DIR]

On a device the group's dense searches are one batched scan; on the host each query is searched
alone, so there the figures show only how the queue groups them. Writes ``group_sizes.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.harness import teleo_inproc as inproc  # noqa: E402
from bench.harness.synthetic import CorpusSpec, make_corpus, make_queries  # noqa: E402
from bench.harness.workloads.scale import memory_of  # noqa: E402
from teleo_server.core import MemoryCore  # noqa: E402
from teleo_server.pipeline.types import Hit, Query  # noqa: E402
from teleo_server.store.sqlite import SQLiteStore  # noqa: E402


async def _load(core: MemoryCore, asked: list[Query], callers: int) -> tuple[float, list[int]]:
    """Seconds for every query of ``asked``, split among ``callers`` running at once, and the
    results each query got."""

    async def caller(mine: list[Query]) -> list[int]:
        got = []
        for q in mine:
            ticket = core.admit(q.principal)
            try:
                events = [ev async for ev in core.retrieve(q, 0.0, "", ticket)]
            finally:
                ticket.close()
            got.append(sum(isinstance(ev, Hit) for ev in events))
        return got

    t0 = time.perf_counter()
    parts = await asyncio.gather(*(caller(asked[i::callers]) for i in range(callers)))
    return time.perf_counter() - t0, [n for part in parts for n in part]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="numpy", choices=("numpy", "cupy", "emulated"))
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--callers", default="1,4,16")
    ap.add_argument("--profile", default="teleological")
    ap.add_argument("--group", type=int, default=16, help="pipeline.retrieval_group")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args()
    corpus = make_corpus(CorpusSpec(n=args.size))
    queries = make_queries(corpus, args.queries)
    retriever = inproc.make({"retrieval_group": args.group}, backend=args.backend)
    inproc.build(retriever, ((memory_of(corpus, i), corpus.embedding(i)) for i in range(args.size)))
    asked = [Query(text=queries.texts[j], embedding=queries.embedding(j), principal=inproc.PRINCIPAL, top_k=10,
                   profile=args.profile, now=inproc.NOW) for j in range(args.queries)]
    inproc.warm_up(retriever, queries.texts[0], queries.embedding(0), [args.profile])
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        core = MemoryCore(SQLiteStore(Path(tmp) / "t.db"), embedder=None, retriever=retriever)  # type: ignore[arg-type]
        try:
            for callers in (int(c) for c in args.callers.split(",")):
                core.retrieval_groups.clear()
                seconds, found = asyncio.run(_load(core, asked, callers))
                groups = Counter(core.retrieval_groups)
                taken = sum(size * n for size, n in groups.items())
                runs.append({"callers": callers, "queries": len(asked), "seconds": round(seconds, 3),
                             "queries_per_s": round(len(asked) / seconds, 1),
                             "mean_group": round(taken / max(1, sum(groups.values())), 2),
                             "groups_by_size": {str(k): v for k, v in sorted(groups.items())},
                             "every_query_answered": all(n == 10 for n in found)})
                print(json.dumps(runs[-1]), flush=True)  # noqa: T201 - the command's report
        finally:
            core._index_ex.shutdown()
            core._store_ex.shutdown()
            core.store.close()
    from bench.eval.multilingual.run import environment

    report = {"environment": environment(), "backend": args.backend, "size": args.size, "profile": args.profile,
              "retrieval_group": args.group, "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "group_sizes.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0 if all(r["every_query_answered"] for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
