"""E8 graph: the memory graph (shared entities, typed links, session adjacency) and personalised
PageRank over it.

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


class GraphSettings(SpaceSettings):
    alpha: float = Field(0.85, gt=0, lt=1)          # damping: the chance of following an edge
    max_iter: int = Field(100, ge=1, le=1000)
    tol: float = Field(1e-6, gt=0)
    hops: int = Field(3, ge=1, le=8)                # neighbourhood radius walked (memory steps)
    hub_fraction: float = Field(0.05, gt=0, le=1)   # entities on more memories than this share are not crossed
    max_nodes: int = Field(2_000, ge=100)
    max_entities: int = Field(64, ge=1)             # entities kept per memory
    link_weight: float = Field(1.0, ge=0)           # typed link edge weight (times the link's own weight)
    session_weight: float = Field(0.5, ge=0)        # edge to the previous / next memory of the session

    def walk(self) -> WalkSettings:
        return WalkSettings(alpha=self.alpha, max_iter=self.max_iter, tol=self.tol, hops=self.hops,
                            hub_fraction=self.hub_fraction, max_nodes=self.max_nodes)


@register
class GraphSpace(Space):
    """Personalised PageRank over the memory graph, seeded from the query's entities."""

    name = "E8_graph"
    description = "memory graph (entities, links, sessions): personalised PageRank"
    Settings = GraphSettings

    def __init__(self, settings: PipelineSettings, catalog: Catalog) -> None:
        super().__init__(settings, catalog)
        self.graph = MemoryGraph()
        self._walk = self.config.walk()
        self.out_links: dict[str, tuple[tuple[str, LinkType, float], ...]] = {}  # memory id -> its links
        self.in_links: dict[str, set[str]] = defaultdict(set)                    # target id -> linking ids
        self._sessions: dict[str, list[tuple[float, str]]] = defaultdict(list)   # session -> (order key, id)
        self._entities: dict[str, list[str]] = {}

    # ---- writes ----------------------------------------------------------------------------------
    def add(self, row: int, chunk_rows: np.ndarray, memory: Memory, embeddings: EmbeddingSet) -> None:
        cfg, row_of = self.config, self.catalog.row_of
        keys = entity_keys(memory.content, cfg.max_entities)
        self._entities[memory.id] = keys
        self.graph.add_memory(row, keys)
        self.out_links[memory.id] = tuple((ln.target_id, ln.type, ln.weight) for ln in memory.links)
        for target, _, weight in self.out_links[memory.id]:
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
            self._entities.pop(m.id, None)
            if m.session_id:
                turns = self._sessions.get(m.session_id, [])
                turns[:] = [t for t in turns if t[1] != m.id]
                if not turns:
                    self._sessions.pop(m.session_id, None)

    def compact(self, keep_rows: np.ndarray, keep_chunks: np.ndarray) -> None:
        self.graph.compact(keep_rows)

    def settle(self) -> None:
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

    def prepare(self, ctx: QueryContext) -> Any | None:
        """The query's entities that name at least one entity node (ids int64), or None."""
        text = ctx.query.text
        if not text:
            return None
        ids = [e for e in (self.graph.entity(k, create=False) for k in entity_keys(text, self.config.max_entities)) if e >= 0]
        return np.array(ids, dtype=np.int64) if ids else None

    def walk(self, ctx: QueryContext, entities: np.ndarray | None, seed_rows: np.ndarray,
             seed_weights: np.ndarray, k: int) -> Walk:
        """Personalised PageRank from the query's entities and memory seeds; results within the mask."""
        ents = entities if entities is not None else np.zeros(0, np.int64)
        w = self.graph.ppr(self.walkable(ctx), seed_rows, seed_weights, ents, None, self._walk, max(k * 4, k + seed_rows.size))
        keep = ctx.mask[w.rows]
        w.rows, w.scores = w.rows[keep][:k], w.scores[keep][:k]
        return w

    def search(self, ctx: QueryContext, feats: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        w = self.walk(ctx, feats, np.zeros(0, np.int64), np.zeros(0), k)
        return w.rows, w.scores

    def score(self, ctx: QueryContext, feats: Any, rows: np.ndarray) -> np.ndarray:
        out = np.full(rows.size, np.nan, dtype=np.float32)
        if feats is None or not rows.size:
            return out
        w = self.walk(ctx, feats, np.zeros(0, np.int64), np.zeros(0), self.catalog.n_rows)
        pos = np.full(self.catalog.n_rows, -1, np.int64)
        pos[w.rows] = np.arange(w.rows.size)
        hit = pos[rows] >= 0
        out[hit] = w.scores[pos[rows][hit]]
        return out

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        """Jaccard similarity of entity sets; 1 for a memory linked to ``a``."""
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


__all__ = ["GraphSettings", "GraphSpace"]
