"""Retrieval strategies (HippoRAG stage 2): each an independent ranked list, run under a time
limit and a circuit breaker, merged afterwards by the ``fusion`` stage (RRF, k = 60, in the
``hipporag`` profile).

A strategy is a function ``run(state, seeds) -> (rows, scores)`` over the caller's mask, registered
here by name with the space (role) whose column its scores fill. ``vector`` (dense ANN, exact
cosine), ``bm25`` and ``splade`` run concurrently; ``graph`` (personalised PageRank over the memory
graph) runs after them, seeded from the query's entities and their top hits, as HippoRAG seeds its
walk. A strategy that fails or passes its time limit is left out and its breaker counts it; a
strategy whose breaker is open is skipped; when every strategy the route chose is out, the
retrieval fails with UNAVAILABLE.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass

import numpy as np

from teleo_server.compute.sets import distinct
from teleo_server.errors import Unavailable
from teleo_server.pipeline.resilience import Breakers, run_guarded
from teleo_server.pipeline.stages import stage
from teleo_server.pipeline.state import Candidates, State

Ranked = tuple[np.ndarray, np.ndarray]  # memory rows int64, scores float32, best first


@dataclass(frozen=True, slots=True)
class Strategy:
    name: str
    role: str                                     # the space role whose column it fills
    run: Callable[[State, Ranked | None], Ranked | None]
    seeded: bool = False                          # runs after the others, from their top hits


_STRATEGIES: dict[str, Strategy] = {}


def strategy(name: str, role: str, seeded: bool = False) -> Callable:
    def register(fn: Callable[[State, Ranked | None], Ranked | None]) -> Callable:
        if name in _STRATEGIES:
            raise ValueError(f"strategy {name!r} registered twice")
        _STRATEGIES[name] = Strategy(name, role, fn, seeded)
        return fn
    return register


def strategies() -> dict[str, Strategy]:
    return dict(_STRATEGIES)


@strategy("vector", "dense")
def _vector(state: State, seeds: Ranked | None) -> Ranked | None:
    name = state.role("dense")
    q = state.feature(name)
    if name is None or q is None:
        return None
    space = state.spaces[name]
    rows, _ = space.search(state.ctx, q, state.cfg.strategy_candidates, dim=space.dimension(state.cfg.dense_dimension or None))
    scores, chunk = space.score_with_chunks(q, rows)
    order = np.argsort(-scores, kind="stable")
    state.feats["vector_chunk"] = (rows[order], chunk[order])
    return rows[order], scores[order]


def _sparse(role: str) -> Callable[[State, Ranked | None], Ranked | None]:
    def run(state: State, seeds: Ranked | None) -> Ranked | None:
        name = state.role(role)
        feats = state.feature(name)
        if name is None or feats is None:
            return None
        return state.spaces[name].search(state.ctx, feats, state.cfg.strategy_candidates)
    return run


strategy("bm25", "lexical")(_sparse("lexical"))
strategy("splade", "learned_sparse")(_sparse("learned_sparse"))


@strategy("graph", "graph", seeded=True)
def _graph(state: State, seeds: Ranked | None) -> Ranked | None:
    name = state.role("graph")
    if name is None:
        return None
    feats = state.feature(name)
    rows = seeds[0] if seeds is not None else np.zeros(0, np.int64)
    weights = seeds[1] if seeds is not None else np.zeros(0)
    if (feats is None or feats.entities is None) and not rows.size:
        return None
    walk = state.spaces[name].walk(state.ctx, feats, rows, weights, state.cfg.graph_results)
    state.report["graph_walk"] = f"iterations={walk.iterations} nodes={walk.nodes} entities={walk.entities}"
    return walk.rows, walk.scores


def _seeds(lists: dict[str, Ranked], n: int, k: float) -> Ranked | None:
    """The top ``n`` rows of the first strategies' lists by RRF, with their RRF scores as weights."""
    if n <= 0 or not lists:
        return None
    total: dict[int, float] = {}
    for rows, _ in lists.values():
        for rank, r in enumerate(rows[:n].tolist(), start=1):
            total[r] = total.get(r, 0.0) + 1.0 / (k + rank)
    if not total:
        return None
    best = sorted(total.items(), key=lambda kv: -kv[1])[:n]
    return np.array([r for r, _ in best], np.int64), np.array([w for _, w in best], np.float64)


@stage("strategies")
def run_strategies(state: State) -> str:
    """The route's strategies: independent lists joined into one candidate pool, each list's
    scores in its own space column (NaN where it did not find a memory), for RRF to merge."""
    route = state.report.get("route", "simple")
    if route == "skip":
        return "skipped: route=skip"
    names = [n for n in state.cfg.routes.get(route, ()) if n in _STRATEGIES]
    if not names:
        state.cands = Candidates.empty()
        return f"no strategies for route {route}"
    breakers = state.breakers or Breakers(state.cfg.breaker_threshold, state.cfg.breaker_reset_s)
    limits = {n: state.cfg.strategy_timeout_ms.get(n, 0.0) for n in names}
    first = {n: _STRATEGIES[n] for n in names if not _STRATEGIES[n].seeded}
    # features are computed here, once, before any thread reads them
    for st in _STRATEGIES.values():
        if st.name in names:
            state.feature(state.role(st.role))
    calls = {n: (lambda s=s: s.run(state, None)) for n, s in first.items()}
    results = run_guarded(calls, limits, breakers, state.background, parallel=len(first) > 1)
    if calls and all(o.skipped for o in results.values()):
        # every breaker is open: rather than fail without trying, the calls are the half-open trial
        results = run_guarded(calls, limits, breakers, state.background, parallel=len(first) > 1, probe=True)
    lists = {n: o.value for n, o in results.items() if o.value is not None and not o.error}
    late = [o.late for o in results.values() if o.late is not None]
    if not lists and late:
        # every strategy is past its limit (an overloaded machine): the first to answer, up to the
        # pipeline's ceiling, beats failing the query; it stays counted against its breaker
        done, _ = wait(late, timeout=state.cfg.strategy_ceiling_ms / 1e3, return_when=FIRST_COMPLETED)
        for n, o in results.items():
            if o.late in done and o.late.exception() is None and o.late.result() is not None:
                lists[n] = o.late.result()
                o.error = ""
                state.report.setdefault("late_strategies", []).append(n)
    seeds = _seeds(lists, state.cfg.graph_seeds, state.cfg.rrf_k)
    later = {n: _STRATEGIES[n] for n in names if _STRATEGIES[n].seeded}
    results.update(run_guarded({n: (lambda s=s: s.run(state, seeds)) for n, s in later.items()},
                               limits, breakers, state.background, parallel=False))
    lists = {n: o.value for n, o in results.items() if o.value is not None and not o.error}
    failed = {n: o.error for n, o in results.items() if o.error}
    if "late_strategies" in state.report:
        state.degraded = state.degraded or ("answered late, past their time limits: " + ", ".join(state.report["late_strategies"]))
    if failed:
        state.report.setdefault("failed_strategies", {}).update(failed)
        state.degraded = state.degraded or "strategies left out: " + ", ".join(f"{n} ({e})" for n, e in failed.items())
    if failed and not lists:
        raise Unavailable("every retrieval strategy failed or is switched off by its circuit breaker: "
                          + "; ".join(f"{n}: {e}" for n, e in failed.items()) + ". Retry shortly.")
    rows = distinct(np.concatenate([r for r, _ in lists.values()])) if lists else np.zeros(0, np.int64)
    c = Candidates(rows.astype(np.int64))
    pos = np.full(int(rows.max(initial=-1)) + 1, -1, np.int64)
    pos[rows] = np.arange(rows.size)
    for n, (r, s) in lists.items():
        col = np.full(rows.size, np.nan, np.float32)
        col[pos[r]] = s
        space = state.role(_STRATEGIES[n].role)
        if space is not None:
            c.set_space(space, col)
    if "vector" in lists and "vector_chunk" in state.feats:
        r, ch = state.feats["vector_chunk"]
        c.chunk = np.zeros(rows.size, np.int64)
        c.chunk[pos[r]] = ch
    state.cands = c
    state.report["strategies"] = {n: _STRATEGIES[n].role for n in lists}
    parts = [f"{n}={lists[n][0].size}" if n in lists else f"{n}=({results[n].error or 'no signal'})" for n in names]
    return " ".join(parts) + (f" graph[{state.report['graph_walk']}]" if "graph_walk" in state.report else "")




@stage("graph")
def graph(state: State) -> str:
    """The memory-graph walk as a stage of any profile: personalised PageRank from the query's
    entities and the pool's top ``graph_seeds`` (by RRF over the spaces scored so far) joins the
    pool, its scores in the graph space's column (weighted in fusion by ``space_weights``). It
    runs only when the graph space has a weight (from the profile, the request or the analyzer)."""
    name = state.role("graph")
    c = state.cands
    if name is None:
        return "skipped: no graph space"
    if state.cfg.space_weights.get(name, 0.0) <= 0:
        return "skipped: the graph space has no weight for this query"
    lists = {}
    for space, col in c.spaces.items():  # each space's best graph_seeds, ties by pool position
        top, values = state.ctx.ops.topk(col, state.cfg.graph_seeds)
        lists[space] = (c.rows[np.asarray(top, np.int64)], values)
    seeds = _seeds(lists, state.cfg.graph_seeds, state.cfg.rrf_k)
    got = _graph(state, seeds)
    if got is None:
        return "skipped: no entities and no seeds"
    rows, scores = got
    pos = c.extend(rows)
    col = np.full(c.size, np.nan, np.float32)
    col[pos] = scores
    c.set_space(name, col)
    return f"found={rows.size} {state.report.get('graph_walk', '')}"


__all__ = ["Strategy", "graph", "run_strategies", "strategies", "strategy"]
