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
    # bi-temporal views: what was true at a moment (event time) and what had been stored by a
    # moment (ingestion time), both inclusive; the validation stage also undoes supersessions
    # that came later than the moment
    as_of_event: float | None = None
    as_of_ingestion: float | None = None
    # only memories holding code in one of these languages (teleo_server.extract.code.LANGUAGES, or
    # "unknown" for code in a language not recognised)
    languages: tuple[str, ...] = ()


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
    search_matrix: str = ""                    # a named strategy's space weights ("custom": space_weights alone)
    query_type: str = ""                       # force the analyzer's kind ("none" turns it off; "" = detect)


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
    include_historical: bool = False           # keep memories a newer one superseded (validation stage)


def visible(principal: Principal, filters: Filters) -> tuple:
    """What ``principal`` may read and ``filters`` admit, as a boolean expression over row
    attributes: ``("and" | "or", *nodes)``, ``("not", node)``, ``("in", attribute, values)``,
    ``("prefix", attribute, text)``, ``(op, attribute, value)`` for op in ``== <= >= < >``, and
    ``("true",)``. The index evaluates it (``Catalog.expression``), the store renders it as SQL,
    a remote engine receives its text: one definition of the ACL and the hard filters."""
    scope = principal.read_namespaces
    if "*" in scope:
        ns_scope: tuple = ("true",)
    else:
        exact = sorted(n for n in scope if not n.endswith("*"))
        ns_scope = ("or", ("in", "namespace", exact),
                    *(("prefix", "namespace", n[:-1]) for n in sorted(scope) if n.endswith("*")))
    parts: list[tuple] = [("==", "alive", True), ("<=", "access_level", int(principal.access_level)), ns_scope]
    if filters.namespaces:
        parts.append(("in", "namespace", list(filters.namespaces)))
    if filters.memory_types:
        parts.append(("in", "memory_type", [int(t) for t in filters.memory_types]))
    if filters.event_start is not None:
        parts.append((">=", "event_time", float(filters.event_start)))
    if filters.event_end is not None:
        parts.append(("<", "event_time", float(filters.event_end)))
    if filters.min_confidence is not None:
        parts.append((">=", "confidence", float(filters.min_confidence)))
    if filters.session_id:
        parts.append(("==", "session_id", filters.session_id))
    if filters.as_of_event is not None:
        parts.append(("<=", "event_time", float(filters.as_of_event)))
    if filters.as_of_ingestion is not None:
        parts.append(("<=", "ingestion_time", float(filters.as_of_ingestion)))
    if filters.languages:
        parts.append(("in", "code_language", list(filters.languages)))
    for key, value in filters.metadata:
        parts.append(("==", f"metadata.{key}", value))
    return ("and", *parts)


__all__ = ["Filters", "Overrides", "Query", "visible"]
