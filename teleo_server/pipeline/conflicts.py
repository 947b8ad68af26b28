"""Knowledge over time: supersession chains and contradictions between memories (HippoRAG stage 5),
read from the typed links the memory graph keeps (``supersedes``, ``contradicts``).

A memory B that links ``supersedes`` to A replaced A's fact. A memory the caller can see is
*superseded* when a memory it can also see, inside the query's bi-temporal view (``as_of_event``:
event time at or before the moment; ``as_of_ingestion``: stored by then), supersedes it; the chain is
followed to its latest visible memory. So "as of" a moment before the update, the old memory is
still the truth, and "now" the update is.

``contradicts`` pairs are resolved as the seed design does: the more recent memory (event time)
wins when it is at least as confident (``recency``); at the same event time the more confident
wins (``confidence``); when the newer one is less confident, recency and confidence disagree and
the pair is ``unresolved``: both are kept, each naming the other. A superseded memory and a
resolved contradiction's loser are hidden unless the query asks for ``include_historical``; the
winner takes the loser's place in the candidate pool when the retrieval had not found it itself
(and the filters admit it). Every pair found is reported in the summary (``ConflictPair``).

Updates are often written without a link ("Cirrus Starter is capped at 5 seats now." after "The
Cirrus Starter plan is capped at 10 seats."). With ``implied_update_similarity`` set, memories
near the top whose dense vectors nearly coincide and whose scores are close are read as one fact
noted at different times: the newest (event time) takes the group's best score, the older keep
the rest in order, and each such pair is reported with edge type ``implied``. Two notes that name
siblings ("Kite Pro" in one, "Kite Team" in the other: names that share a word, neither holding
the other) are two facts and never pair (``implied_update_names``). Nothing is hidden:
without a link the server cannot be sure the older note is stale. Within the bi-temporal view
this also picks the latest note before the moment asked about.
"""

from __future__ import annotations

import numpy as np

from teleo_server import entities
from teleo_server.compute.sets import member
from teleo_server.domain import LinkType
from teleo_server.pipeline.stages import stage
from teleo_server.pipeline.state import State
from teleo_server.pipeline.types import ConflictPair

RECENCY, CONFIDENCE, UNRESOLVED, SUPERSEDED = "recency", "confidence", "unresolved", "supersedes"
IMPLIED = "implied"


class Links:
    """Typed links among the memories one query may see (readable and inside its bi-temporal view)."""

    def __init__(self, state: State) -> None:
        self.state = state
        name = state.role("graph")
        self.graph = state.spaces.get(name) if name is not None else None
        self.cat = state.ctx.catalog
        self.visible = self.graph.walkable(state.ctx) if self.graph is not None else state.ctx.readable

    def row(self, memory_id: str) -> int | None:
        r = self.cat.row_of.get(memory_id)
        return r if r is not None and self.visible is not None and bool(self.visible[r]) else None

    def superseders(self, memory_id: str) -> list[int]:
        """Visible rows that supersede this memory."""
        if self.graph is None:
            return []
        out = []
        for source in self.graph.linked_from(memory_id):
            r = self.row(source)
            if r is not None and any(t == memory_id and k == LinkType.SUPERSEDES for t, k, _ in self.graph.links_of(source)):
                out.append(r)
        return out

    def latest(self, row: int, limit: int = 32) -> int:
        """The end of the supersession chain from ``row`` (``row`` itself when nothing supersedes it);
        among several superseders the one with the latest event time is followed."""
        seen = {row}
        for _ in range(limit):
            nxt = self.superseders(self.cat.id_of(row))
            nxt = [r for r in nxt if r not in seen]
            if not nxt:
                return row
            row = max(nxt, key=lambda r: (float(self.cat.event_time[r]), r))
            seen.add(row)
        return row

    def contradictions(self, memory_id: str) -> list[int]:
        """Visible rows in a ``contradicts`` link with this memory, either direction."""
        if self.graph is None:
            return []
        rows = set()
        for target, kind, _ in self.graph.links_of(memory_id):
            if kind == LinkType.CONTRADICTS and (r := self.row(target)) is not None:
                rows.add(r)
        for source in self.graph.linked_from(memory_id):
            if any(t == memory_id and k == LinkType.CONTRADICTS for t, k, _ in self.graph.links_of(source)):
                if (r := self.row(source)) is not None:
                    rows.add(r)
        return sorted(rows)


def resolve(cat, a: int, b: int) -> tuple[str, int]:
    """(resolution, winner row or -1) of a ``contradicts`` pair, by recency then confidence."""
    ta, tb = float(cat.event_time[a]), float(cat.event_time[b])
    ca, cb = float(cat.confidence[a]), float(cat.confidence[b])
    if ta == tb:
        return (CONFIDENCE, a if ca > cb else b) if ca != cb else (UNRESOLVED, -1)
    newer, older = (a, b) if ta > tb else (b, a)
    cn, co = float(cat.confidence[newer]), float(cat.confidence[older])
    return (RECENCY, newer) if cn >= co else (UNRESOLVED, -1)


def _place(state: State, loser_pos: int, winner: int, mask: np.ndarray) -> None:
    """Put ``winner`` into the pool with at least the loser's score, if the filters admit it."""
    c = state.cands
    if not mask[winner]:
        return
    pos = int(c.extend(np.array([winner]))[0])
    for arr in (c.score, c.content):
        if arr is not None and not arr[pos] >= arr[loser_pos]:  # NaN (just added) or lower
            arr[pos] = arr[loser_pos]


@stage("conflicts", needs_score=True)
def conflicts(state: State) -> str:
    """Find supersessions and contradictions touching the candidates; hide losers unless
    ``include_historical``; report every pair."""
    c, cat = state.cands, state.ctx.catalog
    links = Links(state)
    if links.graph is None:
        return "skipped: no memory graph"
    historical = state.ctx.query.include_historical
    found: list[ConflictPair] = []
    hide: set[int] = set()
    keep_both: dict[int, list[str]] = {}
    mask = state.ctx.mask
    rows = c.rows.tolist()
    for pos, (r, mid) in enumerate(zip(rows, cat.ids_of(c.rows))):
        last = links.latest(r)
        if last != r:
            found.append(ConflictPair(mid, cat.id_of(last), "supersedes", SUPERSEDED, cat.id_of(last)))
            if not historical:
                hide.add(r)
                _place(state, pos, last, mask)
            continue
        for other in links.contradictions(mid):
            resolution, winner = resolve(cat, r, other)
            oid = cat.id_of(other)
            pair = tuple(sorted((mid, oid)))
            if any(tuple(sorted((f.id_a, f.id_b))) == pair for f in found):
                continue
            found.append(ConflictPair(mid, oid, "contradicts", resolution, cat.id_of(winner) if winner >= 0 else ""))
            if resolution == UNRESOLVED:
                keep_both.setdefault(r, []).append(oid)
                keep_both.setdefault(other, []).append(mid)
                _place(state, pos, other, mask)
            elif not historical:
                loser = other if winner == r else r
                hide.add(loser)  # a loser not in the pool stays out of it
                if loser == r:
                    _place(state, pos, winner, mask)
    c = state.cands
    if hide:
        keep = np.flatnonzero(~member(c.rows, np.fromiter(hide, np.int64, len(hide))))
        state.cands = c = c.take(keep)
    annotated = np.full(c.size, "", dtype=object)
    for i, r in enumerate(c.rows.tolist()):
        if r in keep_both:
            annotated[i] = ",".join(keep_both[r])
    c.columns["conflicts_with"] = annotated
    implied = implied_updates(state)
    found.extend(implied)
    state.report["conflicts"] = found
    n_super = sum(f.edge_type == "supersedes" for f in found)
    n_contra = sum(f.edge_type == "contradicts" for f in found)
    return (f"pairs={len(found)} superseded={n_super} contradictions={n_contra} implied={len(implied)} "
            f"hidden={len(hide)} include_historical={historical}")


def names_of(text: str) -> frozenset[str]:
    """The keys of the names (proper-noun spans) a text holds."""
    return frozenset(e.key for e in entities.extract(text) if e.kind == "proper")


def name_siblings(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether two texts holding the names ``a`` and ``b`` (:func:`names_of`) name different
    members of one family, and so state two facts, not one noted twice: one names something
    ("Kite Pro") the other does not, and the other names something ("Kite Team") that shares a word
    with it, neither name holding the other."""
    only_a, only_b = a - b, b - a
    return any(set(x.split()) & set(y.split()) and x not in y and y not in x for x in only_a for y in only_b)


def _siblings(texts: list[str]) -> np.ndarray:
    """bool (n, n): :func:`name_siblings` of every two texts."""
    names = [names_of(t) for t in texts]
    n = len(texts)
    out = np.zeros((n, n), bool)
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i] = name_siblings(names[i], names[j])
    return out


def _groups(linked: np.ndarray) -> list[list[int]]:
    """Connected components (of two or more) of a symmetric boolean adjacency matrix."""
    n = linked.shape[0]
    parent = list(range(n))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, j in zip(*np.nonzero(np.triu(linked, 1))):
        parent[root(int(i))] = root(int(j))
    members: dict[int, list[int]] = {}
    for i in range(n):
        members.setdefault(root(i), []).append(i)
    return [g for g in members.values() if len(g) > 1]


def implied_updates(state: State) -> list[ConflictPair]:
    """Order near-identical, closely scored memories near the top by event time (newest first);
    the pairs whose order changed, as ``implied`` ConflictPairs won by the newer memory."""
    cfg, c, cat = state.cfg, state.cands, state.ctx.catalog
    dense = state.role("dense")
    space = state.spaces.get(dense) if dense is not None else None
    if cfg.implied_update_similarity <= 0 or space is None or getattr(space, "index", None) is None or c.size < 2:
        return []
    top = np.argsort(-c.score, kind="stable")[: cfg.implied_update_window]
    vectors = space.memory_vectors(c.rows[top])
    sims = vectors @ vectors.T
    scores = c.score[top].astype(np.float64)
    close = np.minimum.outer(scores, scores) >= cfg.implied_update_ratio * np.maximum.outer(scores, scores)
    pairs: list[ConflictPair] = []
    linked = (sims >= cfg.implied_update_similarity) & close & (scores[:, None] > 0) & (scores[None, :] > 0)
    if cfg.implied_update_names and np.triu(linked, 1).any():  # the texts are read only for a pair
        linked &= ~_siblings([cat.content(int(c.rows[i])) for i in top])
    for group in _groups(linked):
        by_score = sorted(group, key=lambda i: (-scores[i], i))       # the group's places, best first
        by_time = sorted(group, key=lambda i: (-float(cat.event_time[c.rows[top[i]]]), i))  # newest first
        if by_score == by_time:
            continue
        best = [c.score[top[i]] for i in by_score]
        for i, value in zip(by_time, best):
            c.score[top[i]] = value
        for newer, older in zip(by_time, by_time[1:]):
            pairs.append(ConflictPair(cat.id_of(int(c.rows[top[older]])), cat.id_of(int(c.rows[top[newer]])),
                                      IMPLIED, RECENCY, cat.id_of(int(c.rows[top[newer]]))))
    return pairs


__all__ = ["CONFIDENCE", "IMPLIED", "Links", "RECENCY", "SUPERSEDED", "UNRESOLVED", "conflicts", "implied_updates",
           "name_siblings", "names_of", "resolve"]
