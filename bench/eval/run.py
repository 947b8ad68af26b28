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
from teleo_server.index.precision import half_floats
from teleo_server.pipeline import PipelineSettings, make_retriever
from teleo_server.pipeline.types import Hit, Overrides, Query

from bench.eval.corpora import Prepared, load_all
from bench.eval.metrics import ndcg_at, recall_at

log = structlog.get_logger(__name__)
REPO = Path(__file__).resolve().parents[2]
PRINCIPAL = Principal("eval", "eval", frozenset({"*"}), frozenset({"*"}), AccessLevel.RESTRICTED, "eval")
SINGLE = ("E1_semantic", "E6_lexical", "E13_splade", "E9_hdc", "E12_late", "E2_recency", "E3_periodicity", "E4_sequence", "E8_graph")
PROFILES = ("teleological", "hybrid", "entry_point", "openclaw", "hipporag", "teleological_graph")

ABLATE = ("sparse_recall", "dense", "fusion", "alignment", "late_interaction")
# the code set (bench/eval/code): every profile, the spaces that can read code, the code_focused strategy
CODE_RUNS = ([(p, p, None) for p in PROFILES if p != "entry_point"]
             + [(f"single_space:{s}", f"single_space:{s}", None) for s in ("E1_semantic", "E6_lexical", "E7_code", "E13_splade")]
             + [("teleological search_matrix=code_focused", "teleological", "code_focused"),
                ("teleological search_matrix=hybrid_lexical", "teleological", "hybrid_lexical")])


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
        r.add(m, half_floats(e))  # the values the server stores and indexes (MemoryCore.stored_forms)
    r.maintain()  # goals and calibration, as the server's background upkeep does after a load
    return r


def evaluate(r, p: Prepared, split: str, run: Run, k: int = 100) -> dict[str, Any]:
    """Per-query metrics and latency of one run over one split."""
    per_cat: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    times = []
    finders: list[list[tuple[str, ...]]] = []  # per query: the spaces that rank each of the top 10 in their own top 10
    scored: list[list[dict[str, float]]] = []  # per query: each result's score in every space
    for q, emb in p.queries[split]:
        query = Query(text=q.text, embedding=emb, principal=PRINCIPAL, top_k=k, profile=run.profile,
                      overrides=run.overrides, now=2.0e9)
        t0 = time.perf_counter()
        hits = [e for e in r.retrieve(query) if isinstance(e, Hit)]
        times.append(time.perf_counter() - t0)
        ranked = [e.memory.id for e in hits]
        finders.append([tuple(n for n, rank in e.breakdown.space_ranks.items() if rank <= TOP) for e in hits[:10]])
        scored.append([e.breakdown.spaces for e in hits])
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
    out["perspectives"] = perspective_metrics(finders)
    out["perspectives"]["correlation"] = space_correlation(scored)
    return out


def space_correlation(scored: list[list[dict[str, float]]], least: int = 5) -> dict[str, dict[str, Any]]:
    """Cross-space correlation (analysis only, never used for ranking): per pair of spaces, the
    mean over queries of the Spearman correlation of their scores across the query's results
    (where both scored at least ``least`` of them), and in how many queries it could be taken."""
    sums: dict[tuple[str, str], list[float]] = defaultdict(list)
    for results in scored:
        names = sorted({n for r in results for n in r})
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                pairs = np.array([(r[a], r[b]) for r in results if a in r and b in r], dtype=np.float64)
                if len(pairs) < least or np.ptp(pairs[:, 0]) == 0 or np.ptp(pairs[:, 1]) == 0:
                    continue
                ra, rb = (np.argsort(np.argsort(pairs[:, j], kind="stable"), kind="stable") for j in (0, 1))
                sums[(a, b)].append(float(np.corrcoef(ra, rb)[0, 1]))
    return {f"{a}~{b}": {"spearman": float(np.mean(v)), "queries": len(v)} for (a, b), v in sorted(sums.items())}


TOP = 10  # a space "finds" a result it ranks in its own top 10 (among the pool)


def perspective_metrics(finders: list[list[tuple[str, ...]]]) -> dict[str, Any]:
    """The seed's success metrics over each query's top 10 results, a space counting as having
    found a result when it ranks it in its own top 10: the share of results found only by spaces
    other than the semantic one (E1), per space the share of queries in which it alone found at
    least one result (its unique contribution), and coverage (spaces finding something in a
    query's top 10, on average)."""
    results = [f for q in finders for f in q if f]
    unique: dict[str, int] = defaultdict(int)
    contributing = []
    for q in finders:
        alone = {f[0] for f in q if len(f) == 1}
        for name in alone:
            unique[name] += 1
        contributing.append(len({n for f in q for n in f}))
    n = max(len(finders), 1)
    return {"non_semantic_only": sum("E1_semantic" not in f for f in results) / max(len(results), 1),
            "unique_contribution_rate": {k: v / n for k, v in sorted(unique.items())},
            "coverage_spaces": float(np.mean(contributing)) if contributing else 0.0}


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
    persp: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for p in convs:
        r = build(p, base)
        for run in selected:
            res = evaluate(r, p, "dev", run)
            persp[run.name].append((res["all"]["n"], res.pop("perspectives")))
            for cat, v in res.items():
                if isinstance(v, dict):
                    sums[run.name][cat].append(v)
    out: dict[str, Any] = {}
    for name, cats in sums.items():
        out[name] = {}
        for cat, vals in cats.items():
            n = sum(v["n"] for v in vals)
            out[name][cat] = {"n": n, **{m: sum(v[m] * v["n"] for v in vals) / n for m in ("recall@5", "recall@10", "ndcg@10")}}
        total = sum(n for n, _ in persp[name]) or 1
        spaces = sorted({k for _, d in persp[name] for k in d["unique_contribution_rate"]})
        out[name]["perspectives"] = {
            "non_semantic_only": sum(n * d["non_semantic_only"] for n, d in persp[name]) / total,
            "coverage_spaces": sum(n * d["coverage_spaces"] for n, d in persp[name]) / total,
            "unique_contribution_rate": {k: sum(n * d["unique_contribution_rate"].get(k, 0.0) for n, d in persp[name]) / total
                                         for k in spaces},
            "correlation": _merge_correlation([d["correlation"] for _, d in persp[name]])}
        log.info("eval_run", dataset="locomo", run=name, recall10=round(out[name]["all"]["recall@10"], 4))
    return out


def _merge_correlation(parts: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per-conversation correlations pooled, each weighed by the queries it was taken over."""
    out: dict[str, dict[str, Any]] = {}
    for pair in sorted({k for p in parts for k in p}):
        got = [p[pair] for p in parts if pair in p]
        n = sum(g["queries"] for g in got)
        out[pair] = {"spearman": sum(g["spearman"] * g["queries"] for g in got) / n, "queries": n}
    return out


def code_eval(p: Prepared, base: PipelineSettings, only: list[str] | None = None) -> dict[str, Any]:
    """The code set: each run on the dev split (tuning) and the test split (reported)."""
    r = build(p, base)
    out: dict[str, Any] = {}
    for name, profile, matrix in CODE_RUNS:
        if only and name not in only:
            continue
        run = Run(name, profile, Overrides(search_matrix=matrix or ""))
        out[name] = {split: evaluate(r, p, split, run) for split in ("dev", "test")}
        log.info("eval_run", dataset="code", run=name, dev_ndcg10=round(out[name]["dev"]["all"]["ndcg@10"], 4),
                 test_ndcg10=round(out[name]["test"]["all"]["ndcg@10"], 4))
    return out


def environment() -> dict[str, Any]:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        sha = ""
    import os
    from bench.harness.env import cpu_model

    return {"git": sha, "cpu": cpu_model() or platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__, "backend": "numpy"}


def markdown(res: dict[str, Any], split: str = "test") -> str:
    lines = []
    if "scifact" in res:
        n = next((v["all"]["n"] for v in res["scifact"].values()), 0)
        lines += [f"### SciFact {split} ({n} queries)", "", "| run | nDCG@10 | Recall@100 | p50 ms |", "| --- | --- | --- | --- |"]
        for name, v in res["scifact"].items():
            lines.append(f"| {name} | {v['all']['ndcg@10']:.3f} | {v['all']['recall@100']:.3f} | {v['latency_ms_p50']:.1f} |")
        lines.append("")
    if "locomo" in res:
        cats = ["single-hop", "multi-hop", "temporal", "open-domain", "adversarial", "all"]
        lines += ["### LoCoMo dev (6 conversations), Recall@5 / Recall@10 / nDCG@10", "",
                  "| run | " + " | ".join(cats) + " |", "| --- |" + " --- |" * len(cats)]
        for name, v in res["locomo"].items():
            v = {c: x for c, x in v.items() if c != "perspectives"}
            cells = [f"{v[c]['recall@5']:.2f} / {v[c]['recall@10']:.2f} / {v[c]['ndcg@10']:.2f}" if c in v else "-" for c in cats]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    for dataset in ("scifact", "locomo"):
        persp = res.get(dataset, {}).get("teleological", {}).get("perspectives")
        if persp:
            rates = ", ".join(f"{k} {v:.2f}" for k, v in persp["unique_contribution_rate"].items())
            lines += [f"Perspectives ({dataset}, teleological, top 10): results no E1 list found "
                      f"{persp['non_semantic_only']:.2f}; spaces contributing per query {persp['coverage_spaces']:.1f}; "
                      f"share of queries with a result only this space found: {rates}", ""]
            corr = sorted(persp.get("correlation", {}).items(), key=lambda kv: -kv[1]["spearman"])
            if corr:
                pairs = ", ".join(f"{k} {v['spearman']:.2f}" for k, v in corr)
                lines += [f"Cross-space Spearman correlation over each query's results ({dataset}, analysis only): {pairs}", ""]
    if "code" in res:
        lines += ["### Code set (standard library functions), nDCG@10", "",
                  "| run | dev (tuning) | test | test nl_to_code | test code_to_code | test p50 ms |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for name, v in res["code"].items():
            t = v["test"]
            cells = [f"{v['dev']['all']['ndcg@10']:.3f}", f"{t['all']['ndcg@10']:.3f}",
                     *(f"{t[c]['ndcg@10']:.3f}" if c in t else "-" for c in ("nl_to_code", "code_to_code")),
                     f"{t['latency_ms_p50']:.1f}"]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data", help="dataset root (default ../shared/data)")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache", help="embedding cache directory")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--only", choices=("scifact", "locomo", "code"), action="append")
    ap.add_argument("--runs", nargs="*", help="only the runs with these names (e.g. hipporag teleological)")
    ap.add_argument("--tag", default="", help="name the result files eval-<tag>.{json,md}")
    ap.add_argument("--split", default="test", help="SciFact split to report (train for tuning)")
    ap.add_argument("--quick", action="store_true", help="skip the variants that need their own index")
    ap.add_argument("--threads", type=int, default=2, help="embedding threads when the cache is cold")
    ap.add_argument("--settings", type=json.loads, default={}, help="PipelineSettings overrides as JSON")
    args = ap.parse_args(argv)
    which = tuple(args.only or ("scifact", "locomo", "code"))
    if not args.data.is_dir():
        ap.error(f"--data {args.data} does not exist")
    base = PipelineSettings(**args.settings)
    data = load_all(args.data, args.cache, args.threads, which)
    res: dict[str, Any] = {"environment": environment(), "settings": base.model_dump(mode="json")}
    if "scifact" in data:
        res["scifact"] = scifact_eval(data["scifact"][0], base, args.quick, args.split, args.runs)
    if "locomo" in data:
        res["locomo"] = locomo_eval(data["locomo"], base, args.quick, args.runs)
    if "code" in data:
        res["code"] = code_eval(data["code"][0], base, args.runs)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = f"-{args.tag}" if args.tag else "" if args.split == "test" and not args.settings and not args.runs else f"-{args.split}"
    (args.out / f"eval{suffix}.json").write_text(json.dumps(res, indent=2))
    (args.out / f"eval{suffix}.md").write_text(markdown(res, args.split))
    print(markdown(res, args.split))  # noqa: T201 - the command's report
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
