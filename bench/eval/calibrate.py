"""Fit the calibrated ``relevance`` of results (``make calibrate``).

Runs the default profile over SciFact train and LoCoMo dev (the tuning sets), takes each query's
top 10 with their per-space signals, and fits a logistic regression of "is this result relevant"
(from the qrels) on absolute signals: the dense cosine (E1), the late-interaction MaxSim (E12) and
log(1 + BM25) (E6). Three models are fitted, for the signals a result may have: all three, the dense
cosine alone (no per-token query vectors), and BM25 alone (no embedding at all). The coefficients go
to ``teleo_server/pipeline/relevance.json``; the reliability of the predictions on SciFact test
(held out) and on the fitting sets goes to ``bench/results/calibration.json``.

    python -m bench.eval.calibrate --data ../shared/data
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench.eval.corpora import load_all
from bench.eval.run import PRINCIPAL, REPO, build, environment
from teleo_server.pipeline import PipelineSettings
from teleo_server.pipeline.relevance import MODELS_PATH, signals
from teleo_server.pipeline.types import Hit, Query

MODELS = {"dense_late_lexical": ("E1_semantic", "E12_late", "E6_lexical"),
          "dense": ("E1_semantic",), "lexical": ("E6_lexical",)}


def collect(p, split: str, top_k: int = 10) -> list[tuple[dict[str, float], int]]:
    r = build(p, PipelineSettings())
    out = []
    for q, emb in p.queries[split]:
        query = Query(text=q.text, embedding=emb, principal=PRINCIPAL, top_k=top_k, include_breakdown=True, now=2.0e9)
        for h in (e for e in r.retrieve(query) if isinstance(e, Hit)):
            out.append((dict(h.breakdown.spaces), int(h.memory.id in q.relevant)))
    return out


def matrix(rows: list[tuple[dict[str, float], int]], names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    x = np.array([signals(s, names) for s, _ in rows], dtype=np.float64).reshape(len(rows), len(names))
    return x, np.array([y for _, y in rows], dtype=np.float64)


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1e-3, iterations: int = 50) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression by Newton's method on standardised features."""
    mu, sd = x.mean(0), x.std(0) + 1e-9
    z = np.c_[(x - mu) / sd, np.ones(len(x))]
    w = np.zeros(z.shape[1])
    reg = l2 * np.r_[np.ones(z.shape[1] - 1), 0.0]
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-z @ w))
        grad = z.T @ (p - y) / len(y) + reg * w
        hess = (z * (p * (1 - p))[:, None]).T @ z / len(y) + np.diag(reg)
        w -= np.linalg.solve(hess, grad)
    coef = w[:-1] / sd
    return coef, float(w[-1] - coef @ mu)


def reliability(p: np.ndarray, y: np.ndarray, bins: int = 5) -> dict:
    edges = np.linspace(0.0, 1.0, bins + 1)
    table = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (p >= lo) & ((p < hi) if hi < 1 else (p <= hi))
        table.append({"bin": f"{lo:.1f}-{hi:.1f}", "n": int(m.sum()),
                      "predicted": round(float(p[m].mean()), 3) if m.any() else None,
                      "observed": round(float(y[m].mean()), 3) if m.any() else None})
    order = np.argsort(p)
    ranks = np.empty(len(p))
    ranks[order] = np.arange(1, len(p) + 1)
    pos = y.sum()
    auc = (ranks[y == 1].sum() - pos * (pos + 1) / 2) / max(pos * (len(y) - pos), 1)
    return {"n": int(len(y)), "brier": round(float(((p - y) ** 2).mean()), 4), "auc": round(float(auc), 3), "bins": table}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "calibration.json")
    args = ap.parse_args(argv)
    data = load_all(args.data, args.cache, 2)
    train = collect(data["scifact"][0], "train") + [row for p in data["locomo"] for row in collect(p, "dev")]
    test = collect(data["scifact"][0], "test")
    models, report = {}, {"environment": environment(), "fitted_on": "SciFact train + LoCoMo dev (top 10 of the default profile)",
                          "held_out": "SciFact test", "models": {}}
    for name, names in MODELS.items():
        usable = [row for row in train if all(n in row[0] for n in names)]
        coef, bias = fit(*matrix(usable, names))
        models[name] = {"signals": list(names), "weights": [round(float(c), 6) for c in coef], "bias": round(bias, 6)}
        entry = {"fit_rows": len(usable)}
        for label, rows in (("held_out", test), ("fitting_sets", train)):
            rows = [row for row in rows if all(n in row[0] for n in names)]
            x, y = matrix(rows, names)
            entry[label] = reliability(1.0 / (1.0 + np.exp(-(x @ coef + bias))), y)
        report["models"][name] = {**models[name], **entry}
    MODELS_PATH.write_text(json.dumps({"models": models, "fitted_on": report["fitted_on"]}, indent=2) + "\n")
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for name, entry in report["models"].items():
        print(name, "held-out AUC", entry["held_out"]["auc"], "Brier", entry["held_out"]["brier"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["fit", "main", "reliability"]
