"""Where a score floor belongs: on the ``openclaw`` profile's own merged score, or on the calibrated
relevance (``python -m bench.eval.floors``, ``make floors``).

The ``openclaw`` profile ranks by 0.7 · cosine + 0.3 · BM25/(1 + BM25): an absolute score (it is
not rescaled to the best result of each query), which OpenClaw cuts at 0.35. ``relevance`` is the
calibrated probability of relevance that every profile carries. For each floor this measures, over
the profile's first 6 results (OpenClaw's default count) with no floor applied, how many of the
relevant results each floor keeps and how many of the kept results are relevant, and what a
nonsense query keeps. Tuning sets (SciFact train, LoCoMo dev) and SciFact test (held out) are
reported apart. Written to ``bench/results/floors.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from bench.eval.corpora import Prepared, load_all
from bench.eval.run import PRINCIPAL, REPO, build, environment
from teleo_server.pipeline import PipelineSettings
from teleo_server.pipeline.types import Hit, Overrides, Query

TOP = 6
FLOORS = {"score": (0.2, 0.3, 0.35, 0.4, 0.5), "relevance": (0.01, 0.02, 0.05, 0.1, 0.2, 0.35)}
NONSENSE = ("bicycles kayaks tea", "purple elephant trombone", "quantum lasagna forecast")


def collect(p: Prepared, split: str, r: Any) -> list[tuple[float, float, int]]:
    """(score, relevance, is relevant) of the first ``TOP`` openclaw results of every query."""
    rows = []
    for q, emb in p.queries[split]:
        query = Query(text=q.text, embedding=emb, principal=PRINCIPAL, top_k=TOP, profile="openclaw",
                      overrides=Overrides(min_score=0.0, min_relevance=0.0), now=2.0e9)
        for h in (e for e in r.retrieve(query) if isinstance(e, Hit)):
            rows.append((float(h.score), float(h.relevance), int(h.memory.id in q.relevant)))
    return rows


def table(rows: list[tuple[float, float, int]]) -> dict[str, Any]:
    a = np.array(rows, dtype=np.float64).reshape(-1, 3)
    relevant = max(int(a[:, 2].sum()), 1)
    out: dict[str, Any] = {"results": len(a), "relevant_results": int(a[:, 2].sum())}
    for kind, col in (("score", 0), ("relevance", 1)):
        for floor in FLOORS[kind]:
            kept = a[:, col] >= floor
            out[f"{kind}>={floor}"] = {
                "kept": int(kept.sum()),
                "relevant_kept": round(float(a[kept, 2].sum()) / relevant, 4),
                "precision_of_kept": round(float(a[kept, 2].mean()), 4) if kept.any() else None,
            }
    return out


def nonsense(p: Prepared, r: Any) -> dict[str, Any]:
    """The best result of queries that match nothing (embedded with the corpus's own engine)."""
    from bench.eval.corpora import engine_factory

    engine = engine_factory(1)()
    best = {}
    for text, emb in zip(NONSENSE, engine.embed(list(NONSENSE), [True] * len(NONSENSE))):
        query = Query(text=text, embedding=emb, principal=PRINCIPAL, top_k=1, profile="openclaw",
                      overrides=Overrides(min_score=0.0, min_relevance=0.0), now=2.0e9)
        hits = [e for e in r.retrieve(query) if isinstance(e, Hit)]
        best[text] = {"score": round(float(hits[0].score), 4), "relevance": round(float(hits[0].relevance), 4)} if hits else None
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.eval.floors", description=__doc__)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "floors.json")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    if not args.data.is_dir():
        ap.error(f"--data {args.data} does not exist")
    data = load_all(args.data, args.cache, args.threads)
    scifact = data["scifact"][0]
    r = build(scifact, PipelineSettings())
    tuning = collect(scifact, "train", r)
    for conv in data["locomo"]:
        tuning += collect(conv, "dev", build(conv, PipelineSettings()))
    doc = {"environment": environment(), "profile": "openclaw", "top": TOP,
           "tuning (SciFact train + LoCoMo dev)": table(tuning),
           "SciFact test (held out)": table(collect(scifact, "test", r)),
           "nonsense queries on SciFact": nonsense(scifact, r)}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "environment"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
