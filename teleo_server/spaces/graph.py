"""E8 graph: a memory's vector smoothed over its neighbours in the memory graph (shared entities,
typed links, session adjacency), and personalised PageRank over the same graph.

The space's vector of a memory is its sentence vector in the ``base`` space (E1's vectors, a
memory's being the mean of its chunks') mixed with the mean of its neighbours' vectors:
``g(m) = (1 - smooth) v(m) + smooth * mean_n v(n)``. Neighbours are the memories it links to or is
linked from, the previous and next turn of its session, and the memories that share a specific
entity with it (:meth:`MemoryGraph.neighbour_mean`). The query side is the base space's query, and
since the score is linear in the vectors, ``q . g(m)`` is the same mix of the base space's scores
(its best-chunk cosines): a memory whose own text misses the query rises when the memories around
it match. The mean is taken over what the caller may read, at query time, over the graph as it
stands after the last write (so every write updates its neighbours' vectors at once, and another
tenant's memories never move a score); the space keeps no vectors of its own.

A memory is joined to the entities its text names (``teleo_server.entities``: proper-noun spans,
quoted terms, identifiers, quantities), to the memories its links name (``relates_to``,
``contradicts``, ``supersedes``, ``causes``; a link to a memory not stored yet joins when that
memory arrives), and to its neighbours in its session (the previous and next memory by position,
else by event time). The query side is the query's entities; a search walks from them, and the
``graph`` stage walks from them together with the top hits of the other spaces, so memories
connected to what the query finds rise even when their own text does not match. Typed links are
also kept by memory id for the validation and conflict stages (:meth:`GraphSpace.links_between`,
:meth:`GraphSpace.superseders`).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field

from teleo_server.domain import EmbeddingSet, LinkType, Memory
from teleo_server.entities import keys as entity_keys
from teleo_server.index.catalog import Catalog
from teleo_server.index.graph import MemoryGraph, Walk, WalkSettings
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.spaces.base import QueryContext, Space, SpaceSettings
from teleo_server.spaces.registry import register


_WALK = WalkSettings()  # the walk's defaults, stated once (index/graph.py)


class GraphSettings(SpaceSettings):
    alpha: float = Field(_WALK.alpha, gt=0, lt=1)          # damping: the chance of following an edge
    max_iter: int = Field(_WALK.max_iter, ge=1, le=1000)
    tol: float = Field(_WALK.tol, gt=0)
    hops: int = Field(_WALK.hops, ge=1, le=8)                # neighbourhood radius walked (memory steps)
    hub_fraction: float = Field(_WALK.hub_fraction, gt=0, le=1)   # entities on more memories than this share are not crossed
    # neighbourhood budget of a walk, in memories (500, WalkSettings), chosen on SciFact train and
    # LoCoMo dev (2,000 before): `teleological` 0.7447 / 0.7535 at 2,000, 0.7452 / 0.7535 at 1,000,
    # 0.7450 / 0.7569 at 500 (nDCG@10 / Recall@10), `hipporag` 0.7364 / 0.7363, 0.7375 / 0.7363,
    # 0.7365 / 0.7348; the walk takes a quarter of the nodes and half the time (10,000 synthetic
    # memories: 3.5 -> 1.7 ms)
    max_nodes: int = Field(_WALK.max_nodes, ge=100)
    max_entities: int = Field(64, ge=1)             # entities kept per memory
    link_weight: float = Field(1.0, ge=0)           # typed link edge weight (times the link's own weight)
    session_weight: float = Field(0.5, ge=0)        # edge to the previous / next memory of the session
    smooth: float = Field(0.3, ge=0, le=1)          # share of a memory's graph vector taken from its neighbours (LoCoMo dev)
    base: str = "E1_semantic"                       # the space whose vectors (and query scores) are smoothed
    # weight of shared-entity neighbours beside links and session turns (per link weight). 0, chosen on
    # LoCoMo dev and SciFact train: the space alone 0.514 / 0.670 against 0.507 / 0.625 at 1 (E1 alone
    # 0.449 / 0.670): entities shared across unrelated abstracts dilute more than they connect
    entity_share: float = Field(0.0, ge=0)

    def walk(self) -> WalkSettings:
        return WalkSettings(alpha=self.alpha, max_iter=self.max_iter, tol=self.tol, hops=self.hops,
                            hub_fraction=self.hub_fraction, max_nodes=self.max_nodes)


@dataclass(slots=True)
class GraphQuery:
    """The query's side of the graph space: the base space's query features (None without them),
    the entity nodes it names (int64, None when none), and the smoothed scores once computed."""

    base: Any | None
    entities: np.ndarray | None
    scores: np.ndarray | None = None


@register
class GraphSpace(Space):
    """Sentence vectors smoothed over the memory graph; personalised PageRank over it for walks."""

    name = "E8_graph"
    recall = True
    description = "memory graph (entities, links, sessions): neighbour-smoothed vectors; PageRank walks"
    Settings = GraphSettings

    def __init__(self, settings: PipelineSettings, catalog: Catalog) -> None:
        super().__init__(settings, catalog)
        self.graph = MemoryGraph()
        self._walk = self.config.walk()
        self.out_links: dict[str, tuple[tuple[str, LinkType, float], ...]] = {}  # memory id -> its links
        self.in_links: dict[str, set[str]] = defaultdict(set)                    # target id -> linking ids
        self._sessions: dict[str, list[tuple[float, str]]] = defaultdict(list)   # session -> (order key, id)
        self._base: Space | None = None

    def attach(self, spaces: dict[str, Space]) -> None:
        self._base = spaces.get(self.config.base)

    # ---- smoothed vectors ----------------------------------------------------------------------------
    def graph_vector(self, ctx: QueryContext, row: int) -> np.ndarray | None:
        """The memory's smoothed vector float64 (unit), over what the caller may read and its
        bi-temporal view holds (None when the base space holds no vector for it)."""
        return self._graph_vector(row, self._with_vectors(self.walkable(ctx)))

    def _with_vectors(self, readable: np.ndarray) -> np.ndarray:
        n = self.catalog.n_rows
        return readable[:n] & (self.catalog.chunk_count[:n] > 0)  # neighbours without a chunk hold no vector

    def _graph_vector(self, row: int, usable: np.ndarray) -> np.ndarray | None:
        """The memory's smoothed vector float64 (unit), its neighbours' mean taken over ``usable``
        rows (readable, holding a vector) only; None when the base space holds no vector for it."""
        vectors_of = getattr(self._base, "memory_vectors", None)
        if vectors_of is None or getattr(self._base, "index", None) is None:
            return None
        own = vectors_of(np.array([row], np.int64))[0].astype(np.float64)
        if not own.any():
            return None
        total, weight = self.graph.neighbour_mean_of(row, vectors_of, usable, self._walk, self.config.entity_share)
        g = self._mix(own, total, weight)
        return g / max(float(np.linalg.norm(g)), 1e-12)

    def _mix(self, own: np.ndarray, total: np.ndarray, weight: np.ndarray | float) -> np.ndarray:
        """(1 - smooth) x own + smooth x the neighbours' mean, where a memory has neighbours. (A
        neighbour weight in place of the fixed share, (own + smooth * total) / (1 + smooth * weight),
        ranked worse on LoCoMo dev and SciFact train: a memory naming many entities drowned.)"""
        b = self.config.smooth
        mean = np.divide(total, weight, out=np.zeros_like(total), where=np.asarray(weight) > 0)
        return np.where(np.asarray(weight) > 0, (1 - b) * own + b * mean, own)

    def smoothed(self, ctx: QueryContext, feats: GraphQuery) -> np.ndarray:
        """``q . g(m)`` float32 (n_rows,) for every memory, NaN where it has no vector or the caller
        may not read it; computed once per query."""
        if feats.scores is not None:
            return feats.scores
        n = ctx.catalog.n_rows
        feats.scores = np.full(n, np.nan, np.float32)
        if feats.base is None or self._base is None:
            return feats.scores
        own = np.asarray(self._base.score(ctx, feats.base, np.arange(n, dtype=np.int64)), np.float64)
        readable = self.walkable(ctx) & ~np.isnan(own)
        s = np.nan_to_num(own, nan=0.0)
        total, weight = self.graph.neighbour_mean(s, readable, self._walk, self.config.entity_share)
        feats.scores[readable] = self._mix(s, total, weight)[readable]
        return feats.scores

    # ---- writes ----------------------------------------------------------------------------------
    def add(self, row: int, chunk_rows: np.ndarray, memory: Memory, embeddings: EmbeddingSet) -> None:
        cfg, row_of = self.config, self.catalog.row_of
        self.graph.add_memory(row, entity_keys(memory.content, cfg.max_entities))
        links = tuple((ln.target_id, ln.type, ln.weight) for ln in memory.links)
        if links:  # most memories link nothing: no entry at all rather than an empty one each
            self.out_links[memory.id] = links
        for target, _, weight in links:
            self.in_links[target].add(memory.id)
            other = row_of.get(target)
            if other is not None:
                self.graph.link(row, other, cfg.link_weight * weight)
        for source in self.in_links.get(memory.id, ()):  # links made before this memory arrived
            other = row_of.get(source)
            if other is not None:
                weight = max((w for t, _, w in self.out_links.get(source, ()) if t == memory.id), default=0.0)
                self.graph.link(row, other, cfg.link_weight * weight)
        if memory.session_id and cfg.session_weight > 0:
            order = float(memory.session_position) if memory.session_position is not None else memory.event_time
            turns = self._sessions[memory.session_id]
            at = bisect.bisect_left(turns, (order, memory.id))
            for j in (at - 1, at):
                if 0 <= j < len(turns):
                    other = row_of.get(turns[j][1])
                    if other is not None:
                        self.graph.link(row, other, cfg.session_weight)
            turns.insert(at, (order, memory.id))

    def remove(self, rows: np.ndarray, chunk_rows: np.ndarray) -> None:
        # edges stay in the matrices until compaction (dead rows are never walked); the id-keyed
        # bookkeeping forgets the memory now
        for r in rows.tolist():
            m = self.catalog.memory(int(r))
            for target, _, _ in self.out_links.pop(m.id, ()):
                sources = self.in_links.get(target)
                if sources is not None:
                    sources.discard(m.id)
                    if not sources:
                        del self.in_links[target]
            if m.session_id:
                turns = self._sessions.get(m.session_id, [])
                turns[:] = [t for t in turns if t[1] != m.id]
                if not turns:
                    self._sessions.pop(m.session_id, None)

    def compact(self, keep_rows: np.ndarray, keep_chunks: np.ndarray) -> None:
        self.graph.compact(keep_rows)

    def settle(self) -> None:
        self.graph.entity_of.settle()
        self.graph.matrices(self.catalog.n_rows)

    # ---- typed links, for validation and conflict resolution ----------------------------------------
    def links_of(self, memory_id: str) -> tuple[tuple[str, LinkType, float], ...]:
        """(target id, type, weight) of every link the memory makes."""
        return self.out_links.get(memory_id, ())

    def linked_from(self, memory_id: str) -> set[str]:
        """Ids of the memories that link to this one."""
        return set(self.in_links.get(memory_id, ()))

    # ---- reads -----------------------------------------------------------------------------------
    def walkable(self, ctx: QueryContext) -> np.ndarray:
        """Rows a walk may cross: readable by the caller and inside its bi-temporal view (a memory
        stored or true only after the moment asked about cannot connect anything)."""
        cat = ctx.catalog
        rows = ctx.readable if ctx.readable is not None else cat.alive
        f = ctx.query.filters
        if f.as_of_event is not None:
            rows = rows & (cat.event_time <= f.as_of_event)
        if f.as_of_ingestion is not None:
            rows = rows & (cat.ingestion_time <= f.as_of_ingestion)
        return rows

    def prepare(self, ctx: QueryContext) -> GraphQuery | None:
        """The base space's query features and the entity nodes the query names; None when neither."""
        text = ctx.query.text
        keys = entity_keys(text, self.config.max_entities) if text else []
        ids = [e for e in (self.graph.entity(k, create=False) for k in keys) if e >= 0]
        base = self._base.prepare(ctx) if self._base is not None else None
        if base is None and not ids:
            return None
        return GraphQuery(base, np.array(ids, dtype=np.int64) if ids else None)

    def walk(self, ctx: QueryContext, feats: GraphQuery | None, seed_rows: np.ndarray,
             seed_weights: np.ndarray, k: int) -> Walk:
        """Personalised PageRank from the query's entities and memory seeds; results within the mask."""
        ents = feats.entities if feats is not None and feats.entities is not None else np.zeros(0, np.int64)
        w = self.graph.ppr(self.walkable(ctx), seed_rows, seed_weights, ents, None, self._walk, max(k * 4, k + seed_rows.size))
        keep = ctx.mask[w.rows]
        w.rows, w.scores = w.rows[keep][:k], w.scores[keep][:k]
        return w

    def search(self, ctx: QueryContext, feats: GraphQuery, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = self.smoothed(ctx, feats)
        valid = ~np.isnan(scores)
        valid[: ctx.mask.size] &= ctx.mask[: valid.size]
        ids, top = ctx.ops.topk(np.nan_to_num(scores, nan=-np.inf), k, mask=valid)
        return np.asarray(ids, np.int64), top

    def score(self, ctx: QueryContext, feats: GraphQuery | None, rows: np.ndarray) -> np.ndarray:
        if feats is None or not rows.size:
            return np.full(rows.size, np.nan, dtype=np.float32)
        return self.smoothed(ctx, feats)[rows]

    def unit_score(self, scores: np.ndarray) -> np.ndarray:
        """Cosine-like (unit query and vectors), clipped into [0, 1]."""
        return np.clip(np.nan_to_num(scores.astype(np.float32), nan=0.0), 0.0, 1.0)

    def similarity_among(self, a: int, rows: np.ndarray, readable: np.ndarray) -> np.ndarray:
        """The cosine of the two memories' smoothed vectors (the space's own vectors, as search
        scores them), each smoothed over the neighbours ``readable`` holds, mapped into [0, 1] as
        the base space maps its cosine ((1 + cos) / 2): two memories whose neighbours agree are
        alike here even when their texts are not. NaN where a memory has no vector."""
        out = np.full(rows.size, np.nan, dtype=np.float32)
        usable = self._with_vectors(readable)
        ga = self._graph_vector(a, usable)
        if ga is None:
            return out
        for i, r in enumerate(rows.tolist()):
            g = ga if r == a else self._graph_vector(r, usable)
            if g is not None:
                out[i] = float(np.clip((1.0 + ga @ g) / 2.0, 0.0, 1.0))
        return out

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        """Jaccard similarity of entity sets; 1 for a memory linked to ``a`` (what the two memories
        hold themselves, for comparisons that do not know the caller, such as a goal's members)."""
        inc, _, links = self.graph.matrices(self.catalog.n_rows)
        ea = set(inc[a].indices.tolist())
        linked = set(links[a].indices.tolist())
        out = np.zeros(rows.size, dtype=np.float32)
        for i, r in enumerate(rows.tolist()):
            if r in linked:
                out[i] = 1.0
                continue
            eb = set(inc[r].indices.tolist())
            union = len(ea | eb)
            out[i] = len(ea & eb) / union if union else 0.0
        if not ea and not linked:
            return np.full(rows.size, np.nan, dtype=np.float32)  # nothing to compare by
        return out


__all__ = ["GraphQuery", "GraphSettings", "GraphSpace"]
