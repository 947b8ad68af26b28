"""Late-interaction rerank: MaxSim over the best candidates, blended with the running score."""

from __future__ import annotations

import numpy as np

from teleo_server.pipeline.stages import stage
from teleo_server.pipeline.state import State


def _minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = float(x.min(initial=0.0)), float(x.max(initial=0.0))
    return (x - lo) / (hi - lo) if hi > lo else np.ones_like(x)


@stage("late_interaction", needs_score=True)
def late_interaction(state: State) -> str:
    """The top ``max(rerank_depth, top_k)`` candidates are rescored; the rest are dropped (they could
    only rank below the window anyway once the blend is normalised)."""
    c, cfg = state.cands, state.cfg
    name = state.role("late_interaction")
    feats = state.feature(name)
    if name is None or feats is None:
        state.notes.append("late interaction unavailable")
        return "skipped: no query tokens"
    assert c.score is not None
    depth = max(cfg.rerank_depth, state.top_k)
    order = np.argsort(-c.score, kind="stable")[:depth]
    c = c.take(order)
    li, _ = state.spaces[name].score_with_chunks(state.ctx.ops, feats, c.rows)
    li = np.nan_to_num(li, nan=0.0)
    c.late = li
    c.spaces[name] = li
    c.found[name] = np.zeros(c.size, dtype=bool)
    w = cfg.late_interaction_weight
    assert c.score is not None
    lo, hi = float(c.score.min(initial=0.0)), float(c.score.max(initial=0.0))
    # blend on min-max normalised scales, then map back onto the window's score range so the
    # result stays an absolute (thresholdable) score rather than a within-window rank
    blended = (1.0 - w) * _minmax(c.score) + w * _minmax(li)
    c.score = (lo + blended * (hi - lo)).astype(np.float32) if hi > lo else c.score
    state.cands = c
    dim = feats.shape[1]
    return f"weight={w:g} depth={depth} token_dim={dim}"


__all__ = ["late_interaction"]
