"""Ranking metrics (trec_eval conventions: linear gain nDCG, recall over all judged relevant)."""

from __future__ import annotations

import math


def ndcg_at(ranked: list[str], relevant: dict[str, float], k: int) -> float:
    dcg = sum(relevant.get(d, 0.0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: list[str], relevant: dict[str, float], k: int) -> float:
    rel = {d for d, g in relevant.items() if g > 0}
    return len(rel & set(ranked[:k])) / len(rel) if rel else 0.0


__all__ = ["ndcg_at", "recall_at"]
