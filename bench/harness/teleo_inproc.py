"""Teleo's pipeline driven in-process through the ``Retriever`` protocol, with precomputed vectors."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from teleo_server.domain import AccessLevel, EmbeddingSet, Memory, Principal
from teleo_server.pipeline.types import Filters, Hit, Outcome, Overrides, Query, Retriever, StageReport

# Reads every namespace at the highest level, so the ACL mask is all-true and costs what it costs.
PRINCIPAL = Principal("bench", "bench", frozenset({"*"}), frozenset({"*"}), AccessLevel.RESTRICTED, "bench")
NOW = 2.0e9  # fixed "now" so temporal decay is reproducible


@dataclass(slots=True)
class QueryRun:
    """One retrieval: ranked memory ids, wall time (ms) and per-stage times (ms)."""

    ids: list[str]
    wall_ms: float
    stages: dict[str, float]
    skipped: tuple[str, ...] = ()
    degraded: bool = False


def make(settings: dict[str, Any] | None = None, backend: str = "numpy") -> Retriever:
    """A fresh Teleo retriever with ``PipelineSettings(**settings)`` on ``backend``."""
    from teleo_server.pipeline import PipelineSettings, make_retriever

    return make_retriever(PipelineSettings(**(settings or {})), backend)


def build(retriever: Retriever, items: Iterable[tuple[Memory, EmbeddingSet]]) -> tuple[int, float]:
    """Index every (memory, embedding set); returns (count, seconds)."""
    t0 = time.perf_counter()
    n = 0
    for memory, emb in items:
        retriever.add(memory, emb)
        n += 1
    maintain = getattr(retriever, "maintain", None)
    if maintain is not None:
        maintain()  # goals and calibration, as the server's background upkeep does
    return n, time.perf_counter() - t0


def run_query(retriever: Retriever, text: str, embedding: EmbeddingSet | None, profile: str, top_k: int,
              filters: Filters | None = None, overrides: Overrides | None = None) -> QueryRun:
    """Drain one ``retrieve`` stream, timing it end to end."""
    q = Query(text=text, embedding=embedding, principal=PRINCIPAL, top_k=top_k, profile=profile,
              filters=filters or Filters(), overrides=overrides or Overrides(), now=NOW)
    ids: list[str] = []
    stages: dict[str, float] = {}
    skipped: list[str] = []
    degraded = False
    t0 = time.perf_counter()
    for ev in retriever.retrieve(q):
        if isinstance(ev, Hit):
            ids.append(ev.memory.id)
        elif isinstance(ev, StageReport):
            if ev.skipped:
                skipped.append(ev.stage)
            else:
                stages[ev.stage] = stages.get(ev.stage, 0.0) + ev.elapsed_ms
        elif isinstance(ev, Outcome):
            degraded = ev.degraded
    return QueryRun(ids, (time.perf_counter() - t0) * 1e3, stages, tuple(skipped), degraded)


def warm_up(retriever: Retriever, text: str, embedding: EmbeddingSet | None, profiles: Iterable[str]) -> float:
    """First queries pay lazy maintenance (goal clustering, Matryoshka calibration); returns ms."""
    t0 = time.perf_counter()
    for p in profiles:
        run_query(retriever, text, embedding, p, 10)
    return (time.perf_counter() - t0) * 1e3
