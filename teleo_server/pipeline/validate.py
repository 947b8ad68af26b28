"""Validation (HippoRAG stage 3): the checks a candidate must pass before it is delivered.

In order, on the ``validation_depth`` best candidates (at least ``top_k``):

1. ``access``: the caller may read it. Already a hard filter: no candidate outside the caller's
   partitions ever reaches a stage; recorded so a result says so.
2. ``temporal``: what the query's moment allows: ``as_of_event`` / ``as_of_ingestion`` are hard
   filters applied before any scoring; a memory superseded by a newer visible memory is removed by
   the ``conflicts`` stage (unless ``include_historical``); decay, when the profile sets a
   half-life, runs in ``finalize``.
3. ``confidence``: the memory's stored confidence is at least ``validation_min_confidence``.
4. ``relevance``: the stand-in for Self-RAG's cross-encoder, which cannot be installed offline:
   the calibrated relevance (``pipeline/relevance.py``), a logistic model of the dense cosine, the
   late-interaction MaxSim and BM25, fitted on SciFact train and LoCoMo dev. It estimates the
   chance a memory is relevant from similarity signals; it does not read the query and the memory
   together as a cross-encoder does, so it cannot tell a relevant passage from a topical one that
   does not answer. Candidates below ``validation_min_relevance`` are dropped.

Every kept candidate records the checks it passed (``Provenance.validation_passed``).
"""

from __future__ import annotations

import numpy as np

from teleo_server.pipeline.relevance import relevance
from teleo_server.pipeline.stages import stage
from teleo_server.pipeline.state import State

CHECKS = ("access", "temporal", "confidence", "relevance")


def signals(state: State, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Each calibrated-relevance signal (dense cosine, MaxSim, BM25) for every row, from the
    candidates' columns where a strategy found them and scored here where none did."""
    c = state.cands
    out: dict[str, np.ndarray] = {}
    for role in ("dense", "late_interaction", "lexical"):
        name = state.role(role)
        feats = state.feature(name)
        if name is None or feats is None:
            continue
        have = c.spaces.get(name)
        col = have.astype(np.float32) if have is not None else np.full(rows.size, np.nan, np.float32)
        missing = np.isnan(col)
        if missing.any():
            space = state.spaces[name]
            if role == "late_interaction":
                col[missing] = space.score_with_chunks(state.ctx.ops, feats, rows[missing])[0]
            else:
                col[missing] = space.score(state.ctx, feats, rows[missing])
        if role == "lexical":
            col = np.where(np.isnan(col), 0.0, col).astype(np.float32)  # no term in common: BM25 0
        out[name] = col
    return out


@stage("validate", needs_score=True)
def validate(state: State) -> str:
    c, cfg, cat = state.cands, state.cfg, state.ctx.catalog
    if c.size == 0:
        state.report["validation"] = list(CHECKS)
        return "no candidates"
    assert c.score is not None
    depth = max(cfg.validation_depth, state.top_k)
    order = np.argsort(-c.score, kind="stable")[:depth]
    state.cands = c = c.take(order)
    n_in = c.size
    confident = cat.confidence[c.rows] >= np.float32(cfg.validation_min_confidence)
    rel = relevance(signals(state, c.rows), c.size)
    c.columns["relevance"] = rel
    w = cfg.validation_rerank_weight
    if w > 0:
        assert c.score is not None
        top_s, top_r = float(c.score.max(initial=0.0)), float(rel.max(initial=0.0))
        fused = c.score / top_s if top_s > 0 else c.score
        c.score = ((1.0 - w) * fused + w * (rel / top_r if top_r > 0 else rel)).astype(np.float32)
    relevant = rel >= cfg.validation_min_relevance
    keep = np.flatnonzero(confident & relevant)
    state.cands = c.take(keep)
    state.report["validation"] = list(CHECKS)
    return (f"depth={depth} rerank_weight={w:g} validated={n_in} below_confidence={int((~confident).sum())} "
            f"below_relevance={int((confident & ~relevant).sum())} min_relevance={cfg.validation_min_relevance:g}")


__all__ = ["CHECKS", "signals", "validate"]
