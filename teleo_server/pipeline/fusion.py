"""Multi-space fusion of per-space candidate scores into one normalised content score.

Methods (weights w_s per space; spaces without a weight or without scores are left out):
- ``rrf``: sum_s w_s / (k + rank_s), ranks within the candidate pool, 1-based.
- ``weighted``: sum_s w_s * score_s / max_s (scores over their max).
- ``relative``: sum_s w_s * (score_s - min_s) / (max_s - min_s) (relative-score fusion).
- ``rrf_relative_mean``: the mean of normalised RRF and relative-score fusion: RRF's robustness
  to score scales (it keeps deep recall) plus the magnitudes' precision at the top.
- ``vector_text`` (OpenClaw's merge): ``vector_weight`` x the dense cosine (clipped to [0, 1]) +
  ``text_weight`` x BM25 / (1 + BM25), the weights normalised to sum to 1. Absolute, not
  rank-based, so a score floor keeps its meaning across queries.
- ``additive_rrf`` (the seed's algorithm): RRF, with a candidate that exactly one space's own
  candidate list found boosted by ``unique_boost`` (10%): the blind-spot discoveries a single
  perspective makes are kept rather than outvoted. The space is recorded per result
  (``unique_contribution``).
Every method is divided by its best possible value (sum of weights, or sum_s w_s / (k + 1), times
1 + boost), so ``content`` lies in [0, 1]; thresholds never see raw RRF.
"""

from __future__ import annotations

import numpy as np

from teleo_server.pipeline.stages import stage
from teleo_server.pipeline.state import State


def ranks(scores: np.ndarray) -> np.ndarray:
    """1-based rank float64 (C,) by descending score, ties by position; NaN scores rank +inf.

    float32 scores are sorted as unique 64-bit keys (the score's order bits, then the position),
    which an unstable sort orders exactly as a stable sort of the scores would, in about half the
    time; other dtypes take the stable sort.
    """
    valid = ~np.isnan(scores)
    out = np.full(scores.size, np.inf)
    idx = np.flatnonzero(valid)
    if scores.dtype == np.float32:
        bits = (scores[idx] + np.float32(0.0)).view(np.uint32)  # + 0.0 folds -0.0 into +0.0
        desc = np.where(bits & np.uint32(0x80000000), bits, ~bits & np.uint32(0x7FFFFFFF))  # big score -> small key
        order = idx[np.argsort((desc.astype(np.uint64) << np.uint64(32)) | idx.astype(np.uint64))]
    else:
        order = idx[np.argsort(-scores[idx], kind="stable")]
    out[order] = np.arange(1, order.size + 1)
    return out


def _relative(scores: np.ndarray) -> np.ndarray:
    valid = ~np.isnan(scores)
    if not valid.any():
        return np.zeros(scores.size)
    lo, hi = float(np.nanmin(scores)), float(np.nanmax(scores))
    out = np.where(valid, (scores - lo) / (hi - lo) if hi > lo else 1.0, 0.0)
    return out


def fuse(spaces: dict[str, np.ndarray], weights: dict[str, float], method: str, k: float,
         rank_cols: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, list[str]]:
    """Fused content float32 (C,) in [0, 1] and the spaces that took part.

    ``rank_cols``: each space's ``ranks`` when the caller already has them (saves a sort per space).
    """
    if method == "rrf_relative_mean":
        rrf, used = fuse(spaces, weights, "rrf", k, rank_cols)
        rel, _ = fuse(spaces, weights, "relative", k)
        return ((rrf + rel) / 2.0).astype(np.float32), used
    if method == "vector_text":
        raise ValueError("vector_text needs the roles' spaces: use vector_text()")
    if method == "additive_rrf":
        raise ValueError("additive_rrf needs each space's own candidate list: use additive_rrf()")
    used = [n for n, s in spaces.items() if weights.get(n, 0.0) > 0 and not np.all(np.isnan(s))]
    if not used:
        return np.zeros(next(iter(spaces.values())).size if spaces else 0, dtype=np.float32), []
    n = spaces[used[0]].size
    total = np.zeros(n)
    best = 0.0
    for name in used:
        s, w = spaces[name].astype(np.float64), weights[name]
        if method == "rrf":
            total += w / (k + (rank_cols[name] if rank_cols and name in rank_cols else ranks(s)))
            best += w / (k + 1.0)
        elif method == "weighted":
            m = float(np.nanmax(s))
            total += w * np.where(np.isnan(s), 0.0, s / m if m > 0 else 0.0)
            best += w
        elif method == "relative":
            total += w * _relative(s)
            best += w
        else:
            raise ValueError(f"unknown fusion method {method!r}")
    return (total / best).astype(np.float32), used


def additive_rrf(spaces: dict[str, np.ndarray], found: dict[str, np.ndarray], weights: dict[str, float], k: float,
                 boost: float, rank_cols: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, list[str], np.ndarray]:
    """The seed's additive RRF: RRF, times 1 + ``boost`` for a candidate exactly one fused space
    found (its own candidate list held it); normalised into [0, 1].

    Returns the fused content float32 (C,), the spaces used, and per candidate the index into
    ``used`` of the only space that found it (-1 when none or several did).
    """
    rrf, used = fuse(spaces, weights, "rrf", k, rank_cols)
    if not used:
        return rrf, used, np.full(rrf.size, -1, dtype=np.int64)
    hits = np.stack([found[n] if n in found else ~np.isnan(spaces[n]) for n in used])
    only = hits.sum(axis=0) == 1
    unique = np.where(only, hits.argmax(axis=0), -1)
    return (rrf * np.where(only, 1.0 + boost, 1.0) / (1.0 + boost)).astype(np.float32), used, unique


def vector_text(vector: np.ndarray | None, text: np.ndarray | None, wv: float, wt: float, n: int) -> np.ndarray:
    """OpenClaw's merge: float32 (n,) = (wv * clip(cos) + wt * bm25 / (1 + bm25)) / (wv + wt)."""
    total = wv + wt
    if total <= 0:
        return np.zeros(n, dtype=np.float32)
    v = np.zeros(n) if vector is None else np.clip(np.nan_to_num(vector.astype(np.float64), nan=0.0), 0.0, 1.0)
    t = np.zeros(n) if text is None else np.maximum(np.nan_to_num(text.astype(np.float64), nan=0.0), 0.0)
    return ((wv * v + wt * t / (1.0 + t)) / total).astype(np.float32)


def no_fusion(state: State) -> None:
    """When fusion is disabled, the content score is the first available space's relative score
    (dense, learned sparse, lexical, n-gram: the roles in that order)."""
    c = state.cands
    for name in (state.role(r) for r in ("dense", "learned_sparse", "lexical", "ngram")):
        if name is not None and name in c.spaces and not np.all(np.isnan(c.spaces[name])):
            c.content = _relative(c.spaces[name].astype(np.float64)).astype(np.float32)
            break
    else:
        c.content = np.zeros(c.size, dtype=np.float32)
    c.score = c.content.copy()


@stage("fusion", on_disabled=no_fusion)
def fusion(state: State) -> str:
    c, cfg = state.cands, state.cfg
    weights = dict(cfg.space_weights)
    late = state.role("late_interaction")
    # context spaces (recency, periodicity, sequence...) join only when given a weight
    for name, space in state.spaces.items():
        if name not in c.spaces and weights.get(name, 0.0) > 0 and not space.recall and name != late:
            feats = state.feature(name)
            if feats is not None:
                c.set_space(name, space.score(state.ctx, feats, c.rows), np.zeros(c.size, dtype=bool))
    c.ranks = {name: ranks(s) for name, s in c.spaces.items()}
    if cfg.fusion == "vector_text":
        dense, lexical = state.role("dense"), state.role("lexical")
        content = vector_text(c.spaces.get(dense or ""), c.spaces.get(lexical or ""), cfg.vector_weight,
                              cfg.text_weight, c.size)
        used = [n for n in (dense, lexical) if n is not None and n in c.spaces]
    elif cfg.fusion == "additive_rrf":
        content, used, unique = additive_rrf(c.spaces, c.found, weights, cfg.rrf_k, cfg.unique_boost, c.ranks)
        names = np.array(used + [""], dtype=object)
        c.columns["unique_contribution"] = names[unique]  # -1 picks the trailing ""
    else:
        content, used = fuse(c.spaces, weights, cfg.fusion, cfg.rrf_k, c.ranks)
    if cfg.purpose_weighting > 0 and state.purpose.n_goals:
        p = state.purpose.purpose_alignment(c.rows)
        content = content * ((1.0 - cfg.purpose_weighting) + cfg.purpose_weighting * p)
    boosted = []
    for name, b in cfg.space_boosts.items():
        if b > 0 and name in c.spaces and not np.all(np.isnan(c.spaces[name])):
            content = (content * (1.0 + b * _relative(c.spaces[name].astype(np.float64))) / (1.0 + b)).astype(np.float32)
            boosted.append(f"{name.split('_')[0]}x{b:g}")
    c.content = content
    c.score = content.copy()
    if boosted:
        return f"method={cfg.fusion} k={cfg.rrf_k:g} spaces=" + "+".join(u.split("_")[0] for u in used) + " boosts=" + ",".join(boosted)
    return f"method={cfg.fusion} k={cfg.rrf_k:g} spaces=" + "+".join(u.split("_")[0] for u in used)


__all__ = ["additive_rrf", "fuse", "fusion", "no_fusion", "ranks", "vector_text"]
