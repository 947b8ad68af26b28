"""What the client library returns and takes: plain dataclasses, no protobuf messages.

Enumerations are lower-case names: memory types ``"episodic"``, ``"semantic"``, ``"procedural"``,
``"working"``, ``"reflective"``; access levels ``"public"``, ``"internal"``, ``"confidential"``,
``"restricted"``; link types ``"relates_to"``, ``"contradicts"``, ``"supersedes"``, ``"causes"``;
Johari quadrants ``"open"``, ``"blind"``, ``"hidden"``, ``"unknown"``. Times are timezone-aware
``datetime`` objects (UTC when they come from the server).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

MEMORY_TYPES = ("episodic", "semantic", "procedural", "working", "reflective")
ACCESS_LEVELS = ("public", "internal", "confidential", "restricted")
LINK_TYPES = ("relates_to", "contradicts", "supersedes", "causes")
JOHARI_QUADRANTS = ("open", "blind", "hidden", "unknown")
AGGREGATIONS = ("weighted_average", "rrf", "max", "min", "geometric_mean")


@dataclass(frozen=True)
class Link:
    """A typed, directed edge to another memory of the same namespace."""

    target_id: str
    type: str = "relates_to"
    weight: float = 1.0


@dataclass
class MemoryInput:
    """A memory as the caller writes it; unset fields take the server's defaults."""

    content: str
    namespace: str = ""                    # "" = the token's default namespace
    memory_type: str | None = None         # None = semantic
    access_level: str | None = None        # None = internal
    source: str = ""
    confidence: float | None = None        # None = 1
    importance: float | None = None        # None = 0.5
    event_time: datetime | None = None     # None = when it is stored
    session_id: str = ""
    session_position: int | None = None
    links: Sequence[Link] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    evergreen: bool = False


@dataclass(frozen=True)
class Purpose:
    """What a memory serves among its partition's emergent goals (``get(..., purpose=True)``)."""

    goal_id: str
    goal_label: str
    alignment: float                   # cosine to that goal's centroid, in [0, 1]
    goal_alignment: dict[str, float]   # goal id -> alignment (its purpose vector)
    space_alignment: dict[str, float]  # space -> mean similarity to the goal's most central memories
    members_compared: int


@dataclass(frozen=True)
class Memory:
    """A stored memory, with the server's bookkeeping."""

    id: str
    content: str
    namespace: str
    memory_type: str
    access_level: str
    source: str
    confidence: float | None
    importance: float | None
    event_time: datetime | None
    session_id: str
    session_position: int | None
    links: tuple[Link, ...]
    metadata: dict[str, str]
    evergreen: bool
    content_hash: str
    ingestion_time: datetime | None
    model_version: str
    chunk_count: int
    retrieved_count: int
    used_count: int
    helpful_count: int
    misled_count: int
    sufficient_count: int = 0    # Feedback said the retrieval's results were enough (sufficient=True)
    insufficient_count: int = 0  # Feedback said a follow-up query was needed (sufficient=False)
    purpose: Purpose | None = None  # only from get(..., purpose=True), once its partition has goals

    def as_input(self) -> MemoryInput:
        """The memory's fields as an input (to store it elsewhere, or change and update it)."""
        return MemoryInput(content=self.content, namespace=self.namespace, memory_type=self.memory_type,
                           access_level=self.access_level, source=self.source, confidence=self.confidence,
                           importance=self.importance, event_time=self.event_time, session_id=self.session_id,
                           session_position=self.session_position, links=self.links, metadata=dict(self.metadata),
                           evergreen=self.evergreen)


@dataclass(frozen=True)
class UpdateHint:
    """An earlier memory that a stored one probably updates (the same fact, noted again or changed)."""

    id: str
    similarity: float  # cosine of the two memories' sentence vectors
    content: str       # the earlier memory's text


@dataclass(frozen=True)
class StoreResult:
    id: str
    content_hash: str
    duplicate: bool  # the namespace already held this content: ``id`` is the existing memory
    # earlier memories of the namespace, readable by the caller, that this one probably updates,
    # best first; nothing is linked: link the ones it replaces with ``supersede(id, old_id)``
    possible_updates: tuple[UpdateHint, ...] = ()


@dataclass(frozen=True)
class BatchItem:
    """One item of a batch store or an import, in request order."""

    index: int
    client_ref: str
    id: str
    content_hash: str
    duplicate: bool
    error: str        # why the item was rejected ("" when it was not); the others are unaffected
    error_code: str   # the gRPC status name of the error, e.g. "INVALID_ARGUMENT"
    # asked for with ``store_batch(..., update_hints=True)``: as ``StoreResult.possible_updates``
    possible_updates: tuple[UpdateHint, ...] = ()


@dataclass(frozen=True)
class BatchResult:
    items: tuple[BatchItem, ...]
    stored: int
    duplicates: int
    failed: int
    vectors_reused: int = 0  # imports: items stored with the vectors they carried


@dataclass(frozen=True)
class UpdateResult:
    memory: Memory
    previous_id: str  # the kept old version (keep_previous), else ""


@dataclass(frozen=True)
class Page:
    memories: tuple[Memory, ...]
    next_cursor: str  # "" on the last page


@dataclass(frozen=True)
class DeleteWhereResult:
    matched: int
    deleted: int


@dataclass
class Filters:
    """Hard filters of search, list, export and delete_where (all of them must hold)."""

    namespaces: Sequence[str] = ()
    memory_types: Sequence[str] = ()
    since: datetime | None = None          # event time at or after
    until: datetime | None = None          # event time before
    min_confidence: float | None = None
    session_id: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    languages: Sequence[str] = ()          # memories holding code in one of these languages ("python", ...)


@dataclass
class Overrides:
    """Per-request stage settings; None keeps the profile's value (see the server's README)."""

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
    space_weights: Mapping[str, float] = field(default_factory=dict)
    disable_stages: Sequence[str] = ()
    search_matrix: str | None = None       # "identity", "semantic_focused", ..., "code_focused", "custom"
    query_type: str | None = None          # force the query analyzer's kind ("none" turns it off)
    space_mask: Sequence[str] = ()         # only these spaces or groups ("semantic", "lexical", ...) take part


@dataclass
class TimeBoosts:
    """Post-retrieval boosts (each ``score *= (1 + weight * closeness) / (1 + weight)``; weight 0 is off):
    recency on a curve ("linear", "exponential", "step") over a scale ("5m", "1h", "1d", "7d", "30d"),
    closeness to a target hour (0-23, UTC) and weekday (0 = Monday), and nearness to a position in a session."""

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


@dataclass(frozen=True)
class HeadVector:
    """One embedding head's vector: dense (values), per-token (rows x dim values) or sparse (ids, weights).

    An export of a per-token head the server keeps as compact codes carries ``rows`` tokens of
    ``codes`` instead of values, and the ``codec`` that made them (Import reuses them only on a
    server of the same codec)."""

    values: tuple[float, ...] = ()
    rows: int = 0
    ids: tuple[int, ...] = ()
    weights: tuple[float, ...] = ()
    codes: bytes = b""
    codec: str = ""


@dataclass(frozen=True)
class QueryVectors:
    """Precomputed query vectors, for callers that embed on their side with the server's model version."""

    model_version: str
    heads: Mapping[str, HeadVector]


@dataclass(frozen=True)
class Stage:
    """A retrieval stage finished."""

    stage: str
    elapsed_ms: float
    candidates_in: int
    candidates_out: int
    backend: str
    detail: str
    skipped: bool


@dataclass(frozen=True)
class Breakdown:
    content: float
    purpose_alignment: float
    goal_alignment: float
    late_interaction: float
    temporal: float
    spaces: dict[str, float]
    space_ranks: dict[str, int]


@dataclass(frozen=True)
class Provenance:
    """Where a result came from and which checks it passed (every profile fills what it has)."""

    strategies: tuple[str, ...] = ()         # strategies whose own lists held it ("vector", "bm25", "splade",
                                             # "graph"), or spaces for profiles without strategies
    fused_score: float = 0.0                 # the merged (RRF or fusion) score before validation and weighting
    validation_passed: tuple[str, ...] = ()  # "access", "temporal", "confidence", "relevance"
    confidence: float = 0.0                  # the memory's stored confidence
    citation: str = ""                       # "namespace/YYYY-MM-DD (memory 1f5a2b3c…)"
    conflicts_with: tuple[str, ...] = ()     # memories it contradicts, the pair left unresolved (both returned)


@dataclass(frozen=True)
class ConflictPair:
    """Two memories that disagree, found among (or next to) the candidates, and how it was resolved."""

    id_a: str             # the memory the retrieval found
    id_b: str             # the memory it conflicts with
    edge_type: str        # "supersedes" (id_b supersedes id_a, directly or by a chain), "contradicts", or
                          # "implied" (no link: id_b, newer, reads as an update of id_a and is ranked first)
    resolution: str       # "supersedes", "recency", "confidence" or "unresolved"
    winner: str = ""      # the memory kept; "" when unresolved (both kept)


@dataclass(frozen=True)
class Result:
    """One retrieved memory, in rank order."""

    rank: int
    memory: Memory
    score: float        # relative: the best result of a search is near 1
    relevance: float    # absolute: a calibrated estimate in [0, 1] that it is relevant
    found_by: tuple[str, ...]
    misaligned: bool
    johari: str
    explanation: str
    chunk_index: int
    unique_contribution: str
    snippet: str
    snippet_start: int
    snippet_end: int
    breakdown: Breakdown | None
    provenance: Provenance | None = None  # None when the server sent none
    primary_space: str = ""               # the space that gave most to its fused score


@dataclass(frozen=True)
class Summary:
    """The last event of every retrieval."""

    returned: int
    total_ms: float
    embed_ms: float
    stages: tuple[Stage, ...]
    degraded: bool
    degraded_reason: str
    profile: str
    request_id: str
    corpus_size: int
    route: str = ""                       # the router's route: "simple", "multi_hop", "exploratory", "skip"
                                          # ("" for profiles without a router)
    skip_reason: str = ""                 # with route "skip": "no_retrieval_needed" or "cache_hit"
    retry_count: int = 0                  # bounded retries after the first attempt (0 .. 2)
    retrieval_confidence: float = 0.0     # mean calibrated relevance of the top 3 results (0 when none)
    conflicts: tuple[ConflictPair, ...] = ()  # supersessions and contradictions touching the candidates
    query_types: tuple[str, ...] = ()     # the query analyzer's reading ("general" when no kind)
    space_weights: Mapping[str, float] = field(default_factory=dict)  # fusion weights the retrieval ran with
    found_by_space: Mapping[str, int] = field(default_factory=dict)   # results each space's list found
    unique_by_space: Mapping[str, int] = field(default_factory=dict)  # results only that space found


Event = Stage | Result | Summary


@dataclass(frozen=True)
class SearchResponse:
    results: tuple[Result, ...]
    summary: Summary

    @property
    def stages(self) -> tuple[Stage, ...]:
        return self.summary.stages


@dataclass(frozen=True)
class Comparison:
    spaces: dict[str, float]  # per-space similarity in [0, 1]
    aggregate: float
    aggregation: str
    purpose_similarity: float | None = None  # cosine of their purpose vectors (same partition with goals)


@dataclass(frozen=True)
class EntryPoint:
    """A space's best match for a query (``discover_entry_points``)."""

    space: str
    memory_id: str
    similarity: float  # in [0, 1], comparable across spaces
    score: float       # the space's own raw score


@dataclass(frozen=True)
class GoalSnapshot:
    time: datetime | None
    label: str
    size: int
    drift: float


@dataclass(frozen=True)
class Goal:
    """An emergent goal of the memories you may read, with its history (oldest first)."""

    id: str
    label: str
    size: int
    drift: float
    history: tuple[GoalSnapshot, ...] = ()


@dataclass(frozen=True)
class NamespaceStats:
    namespace: str
    memories: int
    chunks: int


@dataclass(frozen=True)
class Head:
    name: str
    kind: str        # "dense" | "tokens" | "sparse"
    dimension: int
    dtype: str


@dataclass(frozen=True)
class Stats:
    memories: int
    namespaces: tuple[NamespaceStats, ...]
    model_version: str
    backend: str
    embedder: str
    embedder_ready: bool
    goals: int
    server_version: str
    heads: tuple[Head, ...]


@dataclass(frozen=True)
class ExportedChunk:
    start: int
    end: int
    heads: dict[str, HeadVector]


@dataclass(frozen=True)
class Exported:
    """One memory as export writes it (with its vectors when exported with embeddings)."""

    memory: Memory
    chunks: tuple[ExportedChunk, ...] = ()


__all__ = [
    "ACCESS_LEVELS",
    "AGGREGATIONS",
    "BatchItem",
    "BatchResult",
    "Breakdown",
    "Comparison",
    "ConflictPair",
    "DeleteWhereResult",
    "EntryPoint",
    "Event",
    "Exported",
    "ExportedChunk",
    "Filters",
    "Goal",
    "GoalSnapshot",
    "Head",
    "HeadVector",
    "JOHARI_QUADRANTS",
    "LINK_TYPES",
    "Link",
    "MEMORY_TYPES",
    "Memory",
    "MemoryInput",
    "NamespaceStats",
    "Overrides",
    "Page",
    "Provenance",
    "Purpose",
    "QueryVectors",
    "Result",
    "SearchResponse",
    "Stage",
    "Stats",
    "StoreResult",
    "Summary",
    "TimeBoosts",
    "UpdateHint",
    "UpdateResult",
]
