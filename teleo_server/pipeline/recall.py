"""Candidate-producing stages: sparse recall, dense join, single space, entry point."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from teleo_server.compute.sets import distinct, group_max, member
from teleo_server.pipeline.rerank import maxsim_scores
from teleo_server.pipeline.stages import stage
from teleo_server.pipeline.state import Candidates, State
from teleo_server.spaces.base import lookup


def _max_norm(x: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
    """``x`` (no NaN) over its largest value (among ``where``), unchanged when that is not positive.

    The masked maximum is taken as the maximum of ``x * where``: NumPy's ``max(where=...)`` costs
    6-13 ms over a million scores, the product about 1 ms."""
    m = float((x if where is None else x * where).max(initial=0.0))
    return x / m if m > 0 else x


def _at(reached: tuple[np.ndarray, np.ndarray] | None, full: np.ndarray | None, rows: np.ndarray) -> np.ndarray:
    """The scores of ``rows``, NaN where the query does not reach them: from the reached rows and
    their scores, or from the scores of every row (0 where not reached)."""
    if full is None:
        assert reached is not None
        return lookup(*reached, rows)
    got = full[rows]
    return np.where(got > 0, got, np.nan).astype(np.float32)


# sparse recall scores every memory once the query terms' postings (counted before scoring,
# ``Space.reach``) reach this share of them, and joins the rows they reach otherwise
WHOLE_CORPUS_SHARE = 0.25


@stage("sparse_recall")
def sparse_recall(state: State) -> str:
    """The lexical (BM25) and learned-sparse (SPLADE) spaces scored over the memories their query
    terms reach, blended by ``sparse_weight``; the top ``max_candidates`` by the blend, joined by
    the n-gram space's typo-robust top list, become the candidates. The cost follows the query
    terms' postings, not the size of the corpus, until they reach a good share of it. Where both
    spaces keep this caller's scores on one device, they are blended and cut there and only the
    top rows and the candidates' scores cross the bus."""
    ctx, cfg = state.ctx, state.cfg
    lex, spl, ngram = state.role("lexical"), state.role("learned_sparse"), state.role("ngram")
    lex_f, spl_f = state.feature(lex), state.feature(spl)
    # the n-gram space's query encoding is paid only when its list is wanted
    hdc_f = state.feature(ngram) if cfg.hdc_candidates > 0 else None
    w = cfg.sparse_weight if spl_f is not None else 0.0
    k = state.arm(cfg.max_candidates)
    on_device = _on_device(state, [(lex, lex_f), (spl, spl_f)])
    if on_device is not None:
        top, score_of, scored = _blend_on_device(state, on_device, w, k)
    else:
        top, score_of, scored = _blend_on_host(state, [(lex, lex_f), (spl, spl_f)], w, k)
    picked = [top]
    hdc = None
    n_hdc = 0
    if hdc_f is not None and cfg.hdc_candidates > 0:
        hdc = state.spaces[ngram].reached_scores(ctx, hdc_f)
        h_pos, _ = ctx.ops.topk(hdc[1], cfg.hdc_candidates, mask=ctx.mask[hdc[0]])
        h_rows = hdc[0][np.asarray(h_pos, np.int64)]
        picked.append(h_rows)
        n_hdc = h_rows.size
    c = Candidates(distinct(np.concatenate(picked), ctx.catalog.n_rows))
    in_blend = member(c.rows, picked[0])
    if lex is not None:
        b = score_of(0, c.rows)
        c.set_space(lex, b, in_blend & ~np.isnan(b))
    if spl_f is not None:
        sc = score_of(1, c.rows)
        c.set_space(spl, sc, in_blend & ~np.isnan(sc))
    if hdc is not None:
        c.set_space(ngram, lookup(*hdc, c.rows), member(c.rows, picked[1]))
    state.cands = c
    return (f"sparse_weight={w:g} bm25={'on' if lex_f is not None else 'off'} splade={'on' if spl_f is not None else 'off'} "
            f"hdc={n_hdc} scored={scored}")


Scores = Callable[[int, np.ndarray], np.ndarray]  # (0: BM25, 1: SPLADE; memory rows) -> scores, NaN: not reached


def _blend_on_host(state: State, spaces: list[tuple[str | None, Any]], w: float, k: int) -> tuple[np.ndarray, Scores, str]:
    """The top ``k`` memory rows by the blend, scored on the host, the spaces' scores of any rows,
    and how they were scored."""
    ctx = state.ctx
    (lex, lex_f), (spl, spl_f) = spaces
    empty = (np.zeros(0, np.int64), np.zeros(0, np.float32))
    n = ctx.catalog.n_rows
    sparse = [(state.spaces[name], f) for name, f in spaces if name is not None and f is not None]
    bm25 = splade = reached = None
    full: list[np.ndarray | None] = [None, None]
    if sum(space.reach(ctx, f) for space, f in sparse) >= WHOLE_CORPUS_SHARE * n:
        # the query terms' postings cover a good share of the memories (common words, SPLADE's
        # expansions): one score per memory costs less than listing the rows they reach and
        # joining the lists
        full = [state.spaces[lex].all_scores(ctx, lex_f) if lex_f is not None else np.zeros(n, np.float32),
                state.spaces[spl].all_scores(ctx, spl_f) if spl_f is not None else None]
        admitted = ctx.mask
        values = full
    else:
        bm25 = state.spaces[lex].reached_scores(ctx, lex_f) if lex_f is not None else empty
        splade = state.spaces[spl].reached_scores(ctx, spl_f) if spl_f is not None else None
        reached = distinct(np.concatenate([bm25[0], splade[0]]), n) if splade is not None else bm25[0]
        admitted = ctx.mask[reached]
        values = [np.nan_to_num(lookup(*bm25, reached)),
                  np.nan_to_num(lookup(*splade, reached)) if splade is not None else None]
    # each space is scaled by its best admitted row: no other row shapes the blend (where every row
    # is admitted, the plain maximum: the masked one costs a product over the corpus)
    where = None if admitted.all() else admitted
    blend = (1.0 - w) * _max_norm(values[0], where)
    if values[1] is not None:
        blend = blend + w * _max_norm(values[1], where)
    pos, _ = ctx.ops.topk(blend, k, mask=admitted & (blend > 0))
    pos = np.asarray(pos, np.int64)
    top = pos if reached is None else reached[pos]
    found = (bm25, splade)
    return top, lambda i, rows: _at(found[i], full[i], rows), "every row" if reached is None else "reached rows"


def _blend_on_device(state: State, on_device: tuple[str, list[Any]], w: float, k: int) -> tuple[np.ndarray, Scores, str]:
    """As :func:`_blend_on_host`, every memory's scores kept on the device, blended and cut there
    (the same float32 arithmetic): only the top rows and, later, the candidates' scores cross."""
    from teleo_server.gpu import recall as device_recall

    runtime_name, scores = on_device
    weights = [(scores[0], 1.0 - w), (scores[1], w)]
    top = device_recall.blend_top(runtime_name, [(x, c) for x, c in weights if x is not None], state.ctx.mask, k)

    def score_of(i: int, rows: np.ndarray) -> np.ndarray:
        x = scores[i]
        return np.full(rows.size, np.nan, np.float32) if x is None else device_recall.gather(runtime_name, x, rows)

    return top, score_of, "on the device"


def _on_device(state: State, spaces: list[tuple[str | None, Any]]) -> tuple[str, list[Any]] | None:
    """(runtime, each space's device scores or None) when every sparse space with a query side
    keeps this caller's scores on one device (``Space.device_scores``), else None (the host
    blends)."""
    found: list[Any] = []
    where = ""
    for name, feats in spaces:
        if name is None or feats is None:
            found.append(None)
            continue
        got = state.spaces[name].device_scores(state.ctx, feats)
        if got is None or (where and got[0] != where):
            return None
        where = got[0]
        found.append(got[1])
    return (where, found) if where else None


@stage("keywords")
def keywords(state: State) -> str:
    """OpenClaw's keyword-only mode: the query's keywords (stop words, numbers and short words left
    out, in every supported language) are each searched with BM25 on their own, and a memory keeps
    its best keyword's score, mapped to [0, 1) as BM25 / (1 + BM25)."""
    ctx, cfg = state.ctx, state.cfg
    lex = state.role("lexical")
    words = cfg.analyzer.build().keywords(ctx.query.text) if ctx.query.text else []
    if lex is None or not words:
        state.cands = Candidates.empty()
        return "no keywords" if lex is not None else "no lexical space"
    space = state.spaces[lex]
    hit_rows, hit_scores = [np.zeros(0, np.int64)], [np.zeros(0, np.float32)]
    searched = 0
    for word in words:
        # a keyword that is already an index term (a CJK bigram, a Korean stem) is searched as it
        # is; a word goes through the index's own analysis (its stem, when the index stems)
        ids, weights = space.term_weights([word])
        if not ids.size:
            ids, weights = space.query_terms(word)
        if ids.size:
            r, sc = space.reached_scores(ctx, (ids, weights))
            hit_rows.append(r)
            hit_scores.append(sc)
            searched += 1
    reached, best = group_max(np.concatenate(hit_rows), np.concatenate(hit_scores))
    pos, _ = ctx.ops.topk(best, state.arm(cfg.max_candidates), mask=ctx.mask[reached])
    pos = np.sort(np.asarray(pos, np.int64))
    rows, best = reached[pos], best[pos]
    c = Candidates(rows)
    c.set_space(lex, best, np.ones(rows.size, dtype=bool))
    c.content = (best / (1.0 + best)).astype(np.float32)
    c.score = c.content.copy()
    state.cands = c
    return f"keywords={len(words)} known={searched}: " + " ".join(words[:12])


@dataclass(frozen=True, slots=True)
class _DenseSearch:
    """The dense stage's ANN search over the whole corpus, as a request: it reads the query vector,
    the caller's mask and recall settings no stage changes. Called, it returns the rows found and
    how the search went (HNSW or an exact pass, at which dimension)."""

    space: Any
    ctx: Any
    vector: np.ndarray
    k: int
    dim: int | None

    def __call__(self) -> tuple[np.ndarray, tuple[str, int]]:
        rows, _ = self.space.search(self.ctx, self.vector, self.k, dim=self.dim)
        return rows, self.space.last_scan(self.dim)


def _dense_search(state: State) -> _DenseSearch | None:
    """The dense stage's search for this retrieval (None without a query vector)."""
    name = state.role("dense")
    q = state.feature(name)
    if name is None or q is None:
        return None
    space, cfg = state.spaces[name], state.cfg
    return _DenseSearch(space, state.ctx, q, state.arm(cfg.dense_candidates), space.dimension(cfg.dense_dimension or None))


def _dense_together(states: list[State]) -> None:
    """The dense searches of a group of retrievals whose space can search them together (its index
    backend reads its rows once for several queries: ``index.base.batches``), one call per space;
    the stage reports how many shared it (``batch=``)."""
    asks: dict[int, list[tuple[State, _DenseSearch]]] = {}
    for st in states:
        search = _dense_search(st)
        if search is not None and search.space.searches_together():
            asks.setdefault(id(search.space), []).append((st, search))
    for group in asks.values():
        if len(group) < 2:
            continue
        space = group[0][1].space
        found = space.search_many([(ask.ctx, ask.vector, ask.k, ask.dim) for _, ask in group])
        for (st, ask), rows in zip(group, found):
            done: Future = Future()
            done.set_result((rows, space.last_scan(ask.dim)))
            st.prefetches["dense"] = done
            st.report["dense_batch"] = len(group)


def _dense_prefetch(state: State) -> Callable[[], tuple[np.ndarray, tuple[str, int]]] | None:
    """The search, to run while the stages before ``dense`` do, where it spends its time outside
    the interpreter lock (HNSW; an exact NumPy scan would slow the stages beside it more than it
    saves)."""
    search = _dense_search(state)
    if search is None or not state.spaces[str(state.role("dense"))].search_runs_beside(state.ctx):
        return None
    return search


@stage("dense", prefetch=_dense_prefetch, together=_dense_together)
def dense(state: State) -> str:
    """Dense ANN over the whole corpus joins the sparse candidates; every candidate then gets its
    exact full-dimension cosine (best chunk). An HNSW search starts with the retrieval, beside the
    stages before this one, unless ``prefetch`` is off."""
    name = state.role("dense")
    q = state.feature(name)
    if name is None or q is None:
        state.notes.append("dense unavailable")
        return "skipped: no query vector"
    found_rows = state.prefetched("dense")
    if found_rows is None:
        search = _dense_search(state)
        assert search is not None
        found_rows = search()
    rows, (kind, dim) = found_rows
    batch = state.report.get("dense_batch", 0)
    space = state.spaces[name]
    index = space.index
    assert index is not None
    c = state.cands
    pos = c.extend(rows)
    scores, chunk = space.score_with_chunks(q, c.rows)
    found = np.zeros(c.size, dtype=bool)
    found[pos] = True
    c.set_space(name, scores, found)
    c.chunk = chunk
    recall = index.recall_by_dim.get(dim)
    return (f"dense_dimension={dim} index={kind}" + (f" measured_recall={recall:.3f}" if recall is not None else "")
            + (f" batch={batch}" if batch > 1 else ""))


def _space_top(state: State, name: str | None, k: int) -> tuple[np.ndarray, np.ndarray] | None:
    feats = state.feature(name)
    if name is None or feats is None:
        return None
    return state.spaces[name].search(state.ctx, feats, k)


def _late_pool(state: State, k: int) -> np.ndarray:
    pools = [t[0] for t in (_space_top(state, state.role("dense"), k), _space_top(state, state.role("lexical"), k))
             if t is not None]
    return distinct(np.concatenate(pools)) if pools else np.zeros(0, dtype=np.int64)


@stage("single_space")
def single_space(state: State) -> str:
    """Rank by one space alone (the profile's ``space`` parameter). Late interaction, which has no
    whole-corpus index, reranks the union of the dense and lexical top 300."""
    name = state.params["space"]
    space = state.spaces[name]
    feats = state.feature(name)
    if feats is None:
        state.cands = Candidates.empty()
        state.degraded = state.degraded or f"{name} unavailable for this query"
        return "skipped: space unavailable"
    k = max(state.top_k, state.cfg.mmr_depth)
    if name == state.role("late_interaction"):
        pool = _late_pool(state, 300)
        s = maxsim_scores(state, name, feats, pool)
        order = np.argsort(-s, kind="stable")[:k]
        rows, scores = pool[order], s[order]
    else:
        rows, scores = space.search(state.ctx, feats, k)
    c = Candidates(rows.astype(np.int64))
    c.set_space(name, scores.astype(np.float32))
    top = float(scores.max(initial=0.0))
    low = float(scores.min(initial=0.0))
    c.content = (scores - min(low, 0.0)) / (top - min(low, 0.0)) if top > min(low, 0.0) else np.ones(rows.size, np.float32)
    c.score = c.content.astype(np.float32)
    state.cands = c
    return f"space={name}"


@stage("entry")
def entry_point(state: State) -> str:
    """Query every recall space, start from the one whose top list the rest of the array
    corroborates most, and pool its candidates (the refinement scores them in every space)."""
    k_top, k_pool = 10, 100
    tops: dict[str, np.ndarray] = {}
    for name, space in state.spaces.items():
        if space.recall:
            got = _space_top(state, name, state.cfg.dense_candidates)
            if got is not None and got[0].size:
                tops[name] = got[0]
    if not tops:
        state.cands = Candidates.empty()
        return "no space could serve the query"
    agreement = {}
    for name, rows in tops.items():
        others = [set(r[:k_pool].tolist()) for o, r in tops.items() if o != name]
        head = rows[:k_top].tolist()
        agreement[name] = sum(sum(x in o for o in others) for x in head) / max(len(head) * max(len(others), 1), 1)
    entry = max(agreement, key=lambda n: (agreement[n], n == state.role("dense")))
    pool = distinct(np.concatenate([tops[entry]] + [r[:k_pool] for r in tops.values()]))
    c = Candidates(pool)
    for name, rows in tops.items():
        feats = state.feature(name)
        s = state.spaces[name].score(state.ctx, feats, pool)
        c.set_space(name, s, member(pool, rows))
    state.cands = c
    state.feats["entry_space"] = entry
    # the entry space leads the refinement's fusion
    state.cfg.space_weights[entry] = state.cfg.space_weights.get(entry, 1.0) * 2.0
    return f"entry={entry} agreement=" + ",".join(f"{n.split('_')[0]}:{a:.2f}" for n, a in sorted(agreement.items()))


__all__ = ["dense", "entry_point", "keywords", "single_space", "sparse_recall"]
