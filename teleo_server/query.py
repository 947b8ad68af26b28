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
    space_mask: tuple[str, ...] = ()           # only these spaces or groups take part (empty = all)


# the five scales of the recency boost, in seconds
RECENCY_SCALES = {"5m": 300.0, "1h": 3_600.0, "1d": 86_400.0, "7d": 604_800.0, "30d": 2_592_000.0}
RECENCY_CURVES = ("linear", "exponential", "step")


@dataclass(frozen=True, slots=True)
class TimeBoosts:
    """Post-retrieval boosts, each ``score *= (1 + weight * closeness) / (1 + weight)``.

    recency (E2): closeness of the event's age to now on a curve over a scale: linear
    max(0, 1 - age / scale), exponential exp(-age / scale), step 1 within the scale else 0.
    periodic (E3): closeness of the event's hour of day and weekday (UTC) to the targets, on the
    clock face (cosine mapped to [0, 1]; hour and weekday averaged when both are set).
    sequence (E4): memories of ``session_id`` within ``sequence_window`` positions of
    ``session_position``: 1 - distance / (window + 1); others 0.
    """

    recency_curve: str = ""
    recency_scale: str = "1d"
    recency_weight: float = 0.0
    target_hour: int | None = None
    target_weekday: int | None = None
    periodic_weight: float = 0.0
    session_id: str = ""
    session_position: int | None = None
    sequence_window: int = 3
    sequence_weight: float = 0.0

    @property
    def active(self) -> bool:
        return (self.recency_weight > 0 and bool(self.recency_curve)) or (
            self.periodic_weight > 0 and (self.target_hour is not None or self.target_weekday is not None)) or (
            self.sequence_weight > 0 and bool(self.session_id) and self.session_position is not None)


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
    time_boosts: TimeBoosts = field(default_factory=TimeBoosts)  # post-retrieval E2 / E3 / E4 boosts


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


__all__ = ["Filters", "Overrides", "Query", "RECENCY_CURVES", "RECENCY_SCALES", "TimeBoosts", "visible"]
