"""What a retrieval asks for: the query, its hard filters and its per-request overrides.

Below the indexes and spaces (which read them) and above only the domain types.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from teleo_server.domain import EmbeddingSet, Johari, MemoryType, Principal


@dataclass(frozen=True, slots=True)
class Filters:
    namespaces: tuple[str, ...] = ()          # empty = every namespace the principal may read
    memory_types: tuple[MemoryType, ...] = ()
    event_start: float | None = None          # POSIX seconds, inclusive
    event_end: float | None = None            # exclusive
    min_confidence: float | None = None
    session_id: str = ""
    metadata: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Overrides:
    """Per-request stage settings; None keeps the profile's value."""

    sparse_weight: float | None = None
    max_candidates: int | None = None
    dense_dimension: int | None = None
    fusion: str | None = None
    rrf_k: float | None = None
    late_interaction_weight: float | None = None
    decay_half_life_days: float | None = None
    mmr_lambda: float | None = None
    min_score: float | None = None
    min_relevance: float | None = None
    misalignment_threshold: float | None = None
    filter_misaligned: bool | None = None
    space_weights: tuple[tuple[str, float], ...] = ()
    disable_stages: tuple[str, ...] = ()


@dataclass(slots=True)
class Query:
    text: str                                  # may be "" for vector-only queries
    embedding: EmbeddingSet | None             # query-side vectors; None when embedding is unavailable
    principal: Principal
    top_k: int = 10
    profile: str = "teleological"
    filters: Filters = field(default_factory=Filters)
    target_goals: tuple[str, ...] = ()
    johari: tuple[Johari, ...] = ()
    overrides: Overrides = field(default_factory=Overrides)
    include_breakdown: bool = False
    explain: bool = False
    snippets: bool = False                     # results carry their best-matching chunk, cut to 700 characters
    omit_content: bool = False                 # results leave the memory's content out
    now: float = 0.0                           # POSIX seconds used for temporal decay


__all__ = ["Filters", "Overrides", "Query"]
