"""Final stage: temporal decay, MMR diversity, minimum score, top-K."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import numpy as np

from teleo_server.analysis import DEFAULT as DEFAULT_ANALYZER
from teleo_server.analysis import Analyzer
from teleo_server.compute.topk import topk
from teleo_server.domain import Memory, MemoryType
from teleo_server.pipeline.alignment import johari_filter
from teleo_server.query import RECENCY_SCALES
from teleo_server.pipeline.relevance import relevance
from teleo_server.pipeline.stages import stage
from teleo_server.pipeline.state import State

DAY = 86_400.0


_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")


def dated(memory: Memory) -> float:
    """POSIX seconds of the first YYYY-MM-DD date in a memory's source or metadata values (UTC
    midnight), NaN when there is none (OpenClaw: an undated note does not decay)."""
    for text in (memory.source, *memory.metadata.values()):
        for m in _DATE.finditer(text):
            try:
                return datetime(int(m[1]), int(m[2]), int(m[3]), tzinfo=timezone.utc).timestamp()
            except ValueError:
                continue
    return float("nan")


def decay(state: State) -> None:
    """score *= 0.5 ** (age / half_life); evergreen and procedural memories are exempt.

    Age runs from the event time, or with ``decay_clock = "dated"`` from a date in the memory's
    source or metadata, memories without one not decaying at all.
    """
    c, cfg, cat = state.cands, state.cfg, state.ctx.catalog
    c.temporal = np.ones(c.size, dtype=np.float32)
    if cfg.decay_half_life_days <= 0 or c.size == 0:
        return
    if cfg.decay_clock == "dated":
        when = np.array([dated(cat.memory(int(r))) for r in c.rows], dtype=np.float64)
        when = np.where(np.isnan(when), state.ctx.now, when)  # undated: age 0
    else:
        when = cat.event_time[c.rows]
    age = np.maximum(state.ctx.now - when, 0.0) / DAY
    factor = np.power(0.5, age / cfg.decay_half_life_days)
    exempt = cat.evergreen[c.rows] | (cat.mtype[c.rows] == int(MemoryType.PROCEDURAL))
    c.temporal = np.where(exempt, 1.0, factor).astype(np.float32)
    assert c.score is not None
    c.score = (c.score * c.temporal).astype(np.float32)


def jaccard_matrix(texts: list[str], analyzer: Analyzer = DEFAULT_ANALYZER) -> np.ndarray:
    """float64 (n, n): Jaccard similarity of the analysed word sets of ``texts`` (lower-cased words;
    CJK character unigrams and bigrams)."""
    sets = [analyzer.words(t) for t in texts]
    n = len(sets)
    out = np.eye(n)
    for i in range(n):
        for j in range(i + 1, n):
            union = len(sets[i] | sets[j])
            out[i, j] = out[j, i] = len(sets[i] & sets[j]) / union if union else 0.0
    return out


def mmr(state: State, k: int) -> np.ndarray:
    """Greedy maximal marginal relevance over the top ``mmr_depth``; returns positions in order.

    Similarity between candidates is the cosine of their memory vectors (E1), or with
    ``mmr_similarity = "jaccard"`` the Jaccard similarity of their lower-cased alphanumeric word sets;
    without vectors (dense) the order is relevance only. The loop runs over selected results (k),
    never over candidates.
    """
    c, cfg = state.cands, state.cfg
    assert c.score is not None
    lam = cfg.mmr_lambda
    dense = state.role("dense")
    semantic = state.spaces[dense] if dense is not None else None
    jaccard = cfg.mmr_similarity == "jaccard"
    if lam >= 1.0 or c.size <= 1 or (not jaccard and (semantic is None or getattr(semantic, "index", None) is None)):
        return _best(c.score, k)
    pool = _best(c.score, max(cfg.mmr_depth, k))
    rel = c.score[pool].astype(np.float64)
    if jaccard:
        sims = jaccard_matrix([state.ctx.catalog.content(int(r)) for r in c.rows[pool]], state.cfg.analyzer.build())
    else:
        vecs = semantic.memory_vectors(c.rows[pool])
        sims = vecs @ vecs.T
    chosen: list[int] = []
    max_sim = np.full(pool.size, -np.inf)
    available = np.ones(pool.size, dtype=bool)
    for _ in range(min(k, pool.size)):
        penalty = np.where(np.isfinite(max_sim), max_sim, 0.0)
        value = np.where(available, lam * rel - (1.0 - lam) * penalty, -np.inf)
        j = int(np.argmax(value))
        chosen.append(j)
        available[j] = False
        max_sim = np.maximum(max_sim, sims[j])
    return pool[chosen]


def _best(score: np.ndarray, k: int) -> np.ndarray:
    """Positions int64 of the ``k`` highest scores, best first, equal scores in position order and
    NaN last, as a stable descending sort orders them; selected, not sorted, when k is small."""
    if k < score.size and not np.isnan(score).any():
        return topk(score, k)[0].astype(np.int64)
    return np.argsort(-score, kind="stable")[:k]


def importance(state: State) -> None:
    """score *= 1 + w * (2 * importance - 1): the stored importance as a prior (w = importance_weight)."""
    c, w = state.cands, state.cfg.importance_weight
    if w <= 0 or c.size == 0:
        return
    assert c.score is not None
    prior = 1.0 + w * (2.0 * state.ctx.catalog.importance[c.rows] - 1.0)
    c.score = (c.score * prior).astype(np.float32)


def feedback_prior(counts: np.ndarray, w: float) -> np.ndarray:
    """Multiplier float64 (C,) from (helpful, misled, sufficient, insufficient) counts (C, 4).

    Agents' Feedback on a memory as a prior, ``1 + w * (good - bad) / (good + bad + 2)`` with
    good = helpful + sufficient / 2 and bad = misled + insufficient / 2: no feedback leaves the score
    unchanged, every helpful mark raises it and every misleading one lowers it, approaching 1 + w
    and 1 - w as marks accumulate (the + 2 keeps one mark from counting as certainty). "Sufficient"
    judges the whole retrieval the memory came with, so it counts half.
    """
    c = counts.astype(np.float64)
    good, bad = c[:, 0] + 0.5 * c[:, 2], c[:, 1] + 0.5 * c[:, 3]
    return 1.0 + w * (good - bad) / (good + bad + 2.0)


def feedback(state: State) -> None:
    """score *= the feedback prior of each candidate (``feedback_weight``; 0 = off)."""
    c, w = state.cands, state.cfg.feedback_weight
    if w <= 0 or c.size == 0:
        return
    assert c.score is not None
    c.score = (c.score * feedback_prior(state.ctx.catalog.feedback_counts(c.rows), w)).astype(np.float32)


def time_boosts(state: State) -> str:
    """The request's E2 recency, E3 periodic and E4 sequence boosts (``Query.time_boosts``)."""
    b, c, cat = state.ctx.query.time_boosts, state.cands, state.ctx.catalog
    if not b.active or c.size == 0:
        return ""
    assert c.score is not None
    factor = np.ones(c.size, dtype=np.float64)
    done = []
    when = cat.event_time[c.rows]
    if b.recency_weight > 0 and b.recency_curve:
        scale = RECENCY_SCALES[b.recency_scale]
        age = np.maximum(state.ctx.now - when, 0.0)
        close = {"linear": np.maximum(0.0, 1.0 - age / scale), "exponential": np.exp(-age / scale),
                 "step": (age <= scale).astype(np.float64)}[b.recency_curve]
        factor *= (1.0 + b.recency_weight * close) / (1.0 + b.recency_weight)
        done.append(f"recency={b.recency_curve}/{b.recency_scale}x{b.recency_weight:g}")
    if b.periodic_weight > 0 and (b.target_hour is not None or b.target_weekday is not None):
        parts = []
        if b.target_hour is not None:
            hour = (when % DAY) / 3_600.0
            parts.append((1.0 + np.cos(2 * np.pi * (hour - b.target_hour) / 24.0)) / 2.0)
        if b.target_weekday is not None:
            weekday = ((when // DAY) + 3) % 7  # 1970-01-01 was a Thursday (Monday = 0)
            parts.append((1.0 + np.cos(2 * np.pi * (weekday - b.target_weekday) / 7.0)) / 2.0)
        close = np.mean(parts, axis=0)
        factor *= (1.0 + b.periodic_weight * close) / (1.0 + b.periodic_weight)
        done.append(f"periodic x{b.periodic_weight:g}")
    if b.sequence_weight > 0 and b.session_id and b.session_position is not None:
        code = cat.session_code(b.session_id)
        same = (cat.session[c.rows] == code) if code is not None else np.zeros(c.size, dtype=bool)
        dist = np.abs(cat.position[c.rows].astype(np.float64) - b.session_position)
        close = np.where(same & (cat.position[c.rows] >= 0) & (dist <= b.sequence_window),
                         1.0 - dist / (b.sequence_window + 1), 0.0)
        factor *= (1.0 + b.sequence_weight * close) / (1.0 + b.sequence_weight)
        done.append(f"sequence={b.session_position}±{b.sequence_window}x{b.sequence_weight:g}")
    c.score = (c.score * factor).astype(np.float32)
    return " time_boosts=" + ",".join(done)


@stage("finalize", needs_score=True)
def finalize(state: State) -> str:
    removed_johari = johari_filter(state)
    boosted = time_boosts(state)
    decay(state)
    importance(state)
    feedback(state)
    c, cfg = state.cands, state.cfg
    n_in = c.size
    assert c.score is not None
    keep = c.score >= cfg.min_score
    if cfg.min_relevance > 0:  # otherwise only the results get a relevance (in the retriever)
        c.columns["relevance"] = relevance(c.spaces, c.size)
        keep &= c.columns["relevance"] >= cfg.min_relevance
    keep = np.flatnonzero(keep)
    state.cands = c = c.take(keep)
    below = n_in - c.size
    picked = mmr(state, state.top_k)
    state.cands = c.take(picked)
    return (f"half_life_days={cfg.decay_half_life_days:g} importance_weight={cfg.importance_weight:g} "
            f"feedback_weight={cfg.feedback_weight:g} mmr_lambda={cfg.mmr_lambda:g} min_score={cfg.min_score:g} min_relevance={cfg.min_relevance:g} "
            f"below_min={below} johari_removed={removed_johari}{boosted}")


__all__ = ["dated", "decay", "feedback", "feedback_prior", "finalize", "importance", "jaccard_matrix", "mmr", "time_boosts"]
