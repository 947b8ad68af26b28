"""``make eval``: retrieval quality of every single space, profile and stage ablation.

SciFact (BEIR test split: nDCG@10, Recall@100; train split for tuning) and LoCoMo (dev
conversations: Recall@5, Recall@10, nDCG@10 per question category). Results go to
``bench/results/eval.json`` and ``bench/results/eval.md``.

    python -m bench.eval.run --data ../shared/data [--only scifact] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from teleo_server.domain import AccessLevel, Principal
from teleo_server.pipeline import PipelineSettings, make_retriever
from teleo_server.pipeline.types import Hit, Overrides, Query

from bench.eval.corpora import Prepared, load_all
from bench.eval.metrics import ndcg_at, recall_at

log = structlog.get_logger(__name__)
REPO = Path(__file__).resolve().parents[2]
PRINCIPAL = Principal("eval", "eval", frozenset({"*"}), frozenset({"*"}), AccessLevel.RESTRICTED, "eval")
SINGLE = ("E1_semantic", "E6_lexical", "E13_splade", "E9_hdc", "E12_late", "E2_recency", "E4_sequence")
PROFILES = ("teleological", "hybrid", "entry_point", "openclaw", "hipporag", "teleological_graph")

ABLATE = ("sparse_recall", "dense", "fusion", "alignment", "late_interaction")


@dataclass(slots=True)
class Run:
    name: str
    profile: str
    overrides: Overrides = field(default_factory=Overrides)
    settings: dict[str, Any] = field(default_factory=dict)  # needs its own index build


def runs(quick: bool, only: list[str] | None = None) -> list[Run]:
    return [r for r in _runs(quick) if not only or r.name in only]


def _runs(quick: bool) -> list[Run]:
    out = [Run(f"single_space:{s}", f"single_space:{s}") for s in SINGLE]
    out += [Run(p, p) for p in PROFILES]
    out += [Run(f"teleological -{st}", "teleological", Overrides(disable_stages=(st,))) for st in ABLATE]
    if not quick:
        out.append(Run("teleological late_interaction_dim=128", "teleological", settings={"late_interaction_dim": 128}))
        out.append(Run("teleological dense_dimension=128", "teleological", Overrides(dense_dimension=128)))
        out.append(Run("teleological dense_dimension=256", "teleological", Overrides(dense_dimension=256)))
    return out


def build(p: Prepared, settings: PipelineSettings):
    r = make_retriever(settings, "numpy")
    for m, e in p.items:
        r.add(m, e)
    r.maintain()  # goals and calibration, as the server's background upkeep does after a load
    return r


def evaluate(r, p: Prepared, split: str, run: Run, k: int = 100) -> dict[str, Any]:
    """Per-query metrics and latency of one run over one split."""
    per_cat: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    times = []
    for q, emb in p.queries[split]:
        query = Query(text=q.text, embedding=emb, principal=PRINCIPAL, top_k=k, profile=run.profile,
                      overrides=run.overrides, now=2.0e9)
        t0 = time.perf_counter()
        ranked = [e.memory.id for e in r.retrieve(query) if isinstance(e, Hit)]
        times.append(time.perf_counter() - t0)
        m = (ndcg_at(ranked, q.relevant, 10), recall_at(ranked, q.relevant, 100),
             recall_at(ranked, q.relevant, 5), recall_at(ranked, q.relevant, 10))
        per_cat[q.category or "all"].append(m)
        if q.category:
            per_cat["all"].append(m)
    out: dict[str, Any] = {}
    for cat, vals in per_cat.items():
        a = np.array(vals)
        out[cat] = {"n": len(vals), "ndcg@10": float(a[:, 0].mean()), "recall@100": float(a[:, 1].mean()),
                    "recall@5": float(a[:, 2].mean()), "recall@10": float(a[:, 3].mean())}
    out["latency_ms_p50"] = float(np.percentile(np.array(times) * 1e3, 50))
    return out


def scifact_eval(p: Prepared, base: PipelineSettings, quick: bool, split: str,
                 only: list[str] | None = None) -> dict[str, Any]:
    results = {}
    shared = build(p, base)
    for run in runs(quick, only):
        r = build(p, base.updated(run.settings)) if run.settings else shared
        res = evaluate(r, p, split, run)
        results[run.name] = res
        log.info("eval_run", dataset="scifact", split=split, run=run.name, ndcg10=round(res["all"]["ndcg@10"], 4),
                 recall100=round(res["all"]["recall@100"], 4), p50_ms=round(res["latency_ms_p50"], 1))
    return results


def locomo_eval(convs: list[Prepared], base: PipelineSettings, quick: bool,
                only: list[str] | None = None) -> dict[str, Any]:
    selected = [r for r in runs(quick, only) if not r.settings]
    sums: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for p in convs:
        r = build(p, base)
        for run in selected:
            res = evaluate(r, p, "dev", run)
            for cat, v in res.items():
                if isinstance(v, dict):
                    sums[run.name][cat].append(v)
    out: dict[str, Any] = {}
    for name, cats in sums.items():
        out[name] = {}
        for cat, vals in cats.items():
            n = sum(v["n"] for v in vals)
            out[name][cat] = {"n": n, **{m: sum(v[m] * v["n"] for v in vals) / n for m in ("recall@5", "recall@10", "ndcg@10")}}
        log.info("eval_run", dataset="locomo", run=name, recall10=round(out[name]["all"]["recall@10"], 4))
    return out


def environment() -> dict[str, Any]:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        sha = ""
    import os
    return {"git": sha, "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__, "backend": "numpy"}


def markdown(res: dict[str, Any]) -> str:
    lines = []
    if "scifact" in res:
        lines += ["### SciFact test (300 queries)", "", "| run | nDCG@10 | Recall@100 | p50 ms |", "| --- | --- | --- | --- |"]
        for name, v in res["scifact"].items():
            lines.append(f"| {name} | {v['all']['ndcg@10']:.3f} | {v['all']['recall@100']:.3f} | {v['latency_ms_p50']:.1f} |")
        lines.append("")
    if "locomo" in res:
        cats = ["single-hop", "multi-hop", "temporal", "open-domain", "adversarial", "all"]
        lines += ["### LoCoMo dev (6 conversations), Recall@5 / Recall@10 / nDCG@10", "",
                  "| run | " + " | ".join(cats) + " |", "| --- |" + " --- |" * len(cats)]
        for name, v in res["locomo"].items():
            cells = [f"{v[c]['recall@5']:.2f} / {v[c]['recall@10']:.2f} / {v[c]['ndcg@10']:.2f}" if c in v else "-" for c in cats]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data", help="dataset root (default ../shared/data)")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache", help="embedding cache directory")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--only", choices=("scifact", "locomo"), action="append")
    ap.add_argument("--runs", nargs="*", help="only the runs with these names (e.g. hipporag teleological)")
    ap.add_argument("--tag", default="", help="name the result files eval-<tag>.{json,md}")
    ap.add_argument("--split", default="test", help="SciFact split to report (train for tuning)")
    ap.add_argument("--quick", action="store_true", help="skip the variants that need their own index")
    ap.add_argument("--threads", type=int, default=2, help="embedding threads when the cache is cold")
    ap.add_argument("--settings", type=json.loads, default={}, help="PipelineSettings overrides as JSON")
    args = ap.parse_args(argv)
    which = tuple(args.only or ("scifact", "locomo"))
    if not args.data.is_dir():
        ap.error(f"--data {args.data} does not exist")
    base = PipelineSettings(**args.settings)
    data = load_all(args.data, args.cache, args.threads, which)
    res: dict[str, Any] = {"environment": environment(), "settings": base.model_dump(mode="json")}
    if "scifact" in data:
        res["scifact"] = scifact_eval(data["scifact"][0], base, args.quick, args.split, args.runs)
    if "locomo" in data:
        res["locomo"] = locomo_eval(data["locomo"], base, args.quick, args.runs)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = f"-{args.tag}" if args.tag else "" if args.split == "test" and not args.settings and not args.runs else f"-{args.split}"
    (args.out / f"eval{suffix}.json").write_text(json.dumps(res, indent=2))
    (args.out / f"eval{suffix}.md").write_text(markdown(res))
    print(markdown(res))  # noqa: T201 - the command's report
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
