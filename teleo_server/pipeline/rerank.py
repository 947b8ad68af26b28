"""Late-interaction rerank: MaxSim over the best candidates, blended with the running score."""

from __future__ import annotations

import numpy as np

from teleo_server.pipeline.stages import stage
from teleo_server.pipeline.state import State
from teleo_server.workers import side_by_side


def _minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = float(x.min(initial=0.0)), float(x.max(initial=0.0))
    return (x - lo) / (hi - lo) if hi > lo else np.ones_like(x)


# from this many token rows in the window, MaxSim scores its two halves side by side: below it the
# hand-off costs more than the second core saves (2-core AMD EPYC, SciFact's pooled codes: 5,500
# token rows 1.19 ms one after the other, 1.16 side by side; 11,000 2.34 -> 1.80 ms; 20,700
# 4.12 -> 2.83 ms; synthetic memories of at most 32 tokens, 3,600 rows: 0.66 -> 0.85 ms)
PARALLEL_RERANK_TOKENS = 8_000


def maxsim_scores(state: State, name: str, feats: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """MaxSim float32 (len(rows),) of memory ``rows`` in the late-interaction space ``name`` (best
    chunk): a window of ``PARALLEL_RERANK_TOKENS`` token rows or more in two halves side by side
    where ``state.parallel`` allows and the space scores on the host (MaxSim's products release the
    interpreter lock; BLAS may round a score in its last bit otherwise than over the whole window),
    else in one piece."""
    space, ops = state.spaces[name], state.ctx.ops
    half = rows.size // 2
    if state.parallel and space.parallel_rerank and half > 0 and space.token_rows(rows) >= PARALLEL_RERANK_TOKENS:
        return np.concatenate(side_by_side([lambda: space.score_with_chunks(ops, feats, rows[:half])[0],
                                            lambda: space.score_with_chunks(ops, feats, rows[half:])[0]]))
    return space.score_with_chunks(ops, feats, rows)[0]


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
    li = np.nan_to_num(maxsim_scores(state, name, feats, c.rows), nan=0.0)
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
    named = getattr(state.spaces[name], "named", "")
    return f"weight={w:g} depth={depth} token_dim={dim}" + (f" index={named}" if named else "")


__all__ = ["PARALLEL_RERANK_TOKENS", "late_interaction", "maxsim_scores"]
