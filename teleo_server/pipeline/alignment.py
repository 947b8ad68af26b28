"""Teleological alignment: purpose and goal alignment of each candidate, misalignment, Johari."""

from __future__ import annotations

import numpy as np

from teleo_server.compute.sets import member
from teleo_server.index.purpose import johari
from teleo_server.pipeline.stages import stage
from teleo_server.pipeline.state import State


def annotate(state: State) -> None:
    """Fill purpose, goal and misalignment columns (also used when the stage is skipped, for Johari)."""
    c, cfg, purpose = state.cands, state.cfg, state.purpose
    if c.purpose is not None:
        return
    c.purpose = purpose.purpose_alignment(c.rows)
    targets = purpose.resolve_targets(state.ctx.query.target_goals)
    if targets:
        c.goal, c.goal_index = purpose.goal_alignment(c.rows, targets)
    else:
        # no goal named: each memory is measured against its own partition's goal nearest the query
        nearest = purpose.goals_for_query(state.feature(state.role("dense")))
        c.goal, c.goal_index = purpose.goal_alignment(c.rows, nearest, own_partition=True)
    c.misaligned = c.purpose < cfg.misalignment_threshold if purpose.n_goals else np.zeros(c.size, dtype=bool)


def johari_of(state: State) -> np.ndarray:
    c = state.cands
    annotate(state)
    assert c.misaligned is not None
    surfaced = state.ctx.catalog.used[c.rows] > 0
    return johari(~c.misaligned, surfaced)


@stage("alignment")
def alignment(state: State) -> str:
    c, cfg = state.cands, state.cfg
    annotate(state)
    assert c.score is not None and c.goal is not None and c.misaligned is not None
    n_in = c.size
    if state.purpose.n_goals:
        c.score = ((1.0 - cfg.alignment_weight) * c.score + cfg.alignment_weight * c.goal).astype(np.float32)
    if cfg.filter_misaligned:
        state.cands = c.take(np.flatnonzero(~c.misaligned))
    flagged = int(c.misaligned.sum())
    return (f"goals={state.purpose.n_goals} weight={cfg.alignment_weight:g} threshold={cfg.misalignment_threshold:g} "
            f"misaligned={flagged}{' removed' if cfg.filter_misaligned else ''} in={n_in}")


def johari_filter(state: State) -> int:
    """Keep only the requested quadrants; returns how many were removed."""
    wanted = state.ctx.query.johari
    if not wanted:
        return 0
    q = johari_of(state)
    keep = member(q, np.array([int(j) for j in wanted], dtype=np.int8))
    state.cands = state.cands.take(np.flatnonzero(keep))
    return int((~keep).sum())


__all__ = ["alignment", "annotate", "johari_filter", "johari_of"]
