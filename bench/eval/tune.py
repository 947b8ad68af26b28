"""Coordinate-descent tuning of query-time settings on SciFact train and LoCoMo dev.

The objective is the mean nDCG@10 over both (LoCoMo averaged over its conversations). Test
queries are never looked at. Prints the best settings as JSON, ready for ``--settings``.

``--recall-sweep`` instead scores a few settings for deep recall: SciFact train nDCG@10 and
Recall@100 over every train query, with LoCoMo dev nDCG@10 and Recall@10 beside them so a recall
gain is never bought with precision, for each profile named by ``--profiles`` (the default
profile when none is); written to ``bench/results/tuning_recall.json``.

    python -m bench.eval.tune --data ../shared/data
    python -m bench.eval.tune --recall-sweep '{}' '{"rerank_depth": 150}'
    python -m bench.eval.tune --recall-sweep '{}' '{"max_candidates": 1000}' --profiles teleological hybrid
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from teleo_server.pipeline import PipelineSettings

from bench.eval.corpora import load_all
from bench.eval.run import REPO, Run, build, evaluate

log = structlog.get_logger(__name__)

GRID: dict[str, list[Any]] = {
    "late_interaction_weight": [0.3, 0.7],
    "sparse_weight": [0.3, 0.7],
    "w_E1_semantic": [0.5, 1.5],
    "w_E9_hdc": [0.0, 0.3],
    "fusion": ["rrf_relative_mean", "additive_rrf", "relative"],
    "alignment_weight": [0.0, 0.1],
    "rerank_depth": [50],
}


def apply(base: PipelineSettings, params: dict[str, Any]) -> PipelineSettings:
    update = {k: v for k, v in params.items() if not k.startswith("w_")}
    weights = dict(base.space_weights)
    weights.update({k[2:]: v for k, v in params.items() if k.startswith("w_")})
    update["space_weights"] = weights
    return base.updated(update)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache")
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--max-train", type=int, default=400, help="SciFact train queries used (seeded sample)")
    ap.add_argument("--out", type=Path, default=None, help="default bench/results/tuning.json (tuning_recall.json for a sweep)")
    ap.add_argument("--recall-sweep", nargs="+", metavar="JSON", help="settings to score for Recall@100 instead of tuning")
    ap.add_argument("--profiles", nargs="+", default=["teleological"], help="profiles the recall sweep scores")
    args = ap.parse_args(argv)
    base = PipelineSettings()
    data = load_all(args.data, args.cache, 2)
    if args.recall_sweep:
        return recall_sweep(data, base, [json.loads(a) for a in args.recall_sweep],
                            args.out or REPO / "bench" / "results" / "tuning_recall.json", args.profiles)
    args.out = args.out or REPO / "bench" / "results" / "tuning.json"
    sci = data["scifact"][0]
    train = sci.queries["train"]
    if len(train) > args.max_train:
        pick = np.random.default_rng(0).choice(len(train), size=args.max_train, replace=False)
        sci.queries["train"] = [train[i] for i in sorted(pick)]
    r_sci = build(sci, base)
    r_loc = [(p, build(p, base)) for p in data["locomo"]]
    run = Run("teleological", "teleological")
    history = []

    def score(params: dict[str, Any]) -> float:
        sci_res, locomo = measure(apply(base, params), r_sci, sci, r_loc, run)
        value = (sci_res["ndcg@10"] + locomo) / 2
        history.append({"params": dict(params), "scifact_train_ndcg10": sci_res["ndcg@10"], "locomo_dev_ndcg10": locomo, "objective": value})
        log.info("tune_step", params=params, scifact=round(sci_res["ndcg@10"], 4), locomo=round(locomo, 4), objective=round(value, 4))
        return value

    best: dict[str, Any] = {}
    best_value = score(best)
    for _ in range(args.passes):
        for name, values in GRID.items():
            for v in values:
                trial = {**best, name: v}
                if trial == best:
                    continue
                value = score(trial)
                if value > best_value + 1e-4:
                    best, best_value = trial, value
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"best": best, "objective": best_value, "history": history}, indent=2))
    print(json.dumps({"best": best, "objective": best_value}))  # noqa: T201 - the command's report
    return 0


def measure(settings: PipelineSettings, r_sci: Any, sci: Any, r_loc: list[tuple[Any, Any]], run: Run) -> tuple[dict[str, Any], float]:
    """SciFact train results ("all") and LoCoMo dev nDCG@10 (query-weighted over conversations) under ``settings``."""
    sci_res, locomo = measure_all(settings, r_sci, sci, r_loc, run)
    return sci_res, locomo["ndcg@10"]


def measure_all(settings: PipelineSettings, r_sci: Any, sci: Any, r_loc: list[tuple[Any, Any]],
                run: Run) -> tuple[dict[str, Any], dict[str, float]]:
    """SciFact train results ("all") and LoCoMo dev nDCG@10 and Recall@10, each query-weighted over
    the conversations, under ``settings``."""
    r_sci.settings = settings
    sci_res = evaluate(r_sci, sci, "train", run)["all"]
    totals = {"ndcg@10": 0.0, "recall@10": 0.0}
    n = 0.0
    for p, r in r_loc:
        r.settings = settings
        res = evaluate(r, p, "dev", run)["all"]
        for key in totals:
            totals[key] += res[key] * res["n"]
        n += res["n"]
    return sci_res, {key: v / n for key, v in totals.items()}


def recall_sweep(data: dict[str, Any], base: PipelineSettings, trials: list[dict[str, Any]], out: Path,
                 profiles: list[str]) -> int:
    sci = data["scifact"][0]
    r_sci = build(sci, base)
    r_loc = [(p, build(p, base)) for p in data["locomo"]]
    rows = []
    for profile in profiles:
        run = Run(profile, profile)
        for params in trials:
            res, locomo = measure_all(apply(base, params), r_sci, sci, r_loc, run)
            rows.append({"profile": profile, "params": params, "scifact_train_queries": res["n"],
                         "scifact_train_ndcg10": res["ndcg@10"], "scifact_train_recall100": res["recall@100"],
                         "locomo_dev_ndcg10": locomo["ndcg@10"], "locomo_dev_recall10": locomo["recall@10"]})
            log.info("recall_sweep", profile=profile, params=params, ndcg10=round(res["ndcg@10"], 4),
                     recall100=round(res["recall@100"], 4), locomo_ndcg10=round(locomo["ndcg@10"], 4),
                     locomo_recall10=round(locomo["recall@10"], 4))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"split": "scifact train (all queries), locomo dev", "trials": rows}, indent=2))
    print(json.dumps(rows, indent=2))  # noqa: T201 - the command's report
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
