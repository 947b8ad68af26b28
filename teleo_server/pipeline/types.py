"""Types crossing the boundary between the API layer and the retrieval pipeline (the query types
themselves live in :mod:`teleo_server.query`, below the indexes and spaces that read them)."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from teleo_server.domain import EmbeddingSet, Johari, Memory, Principal
from teleo_server.index.purpose import Goal
from teleo_server.query import Filters, Overrides, Query  # re-exported: the API layer builds them


@dataclass(slots=True)
class StageReport:
    stage: str
    elapsed_ms: float
    candidates_in: int
    candidates_out: int
    backend: str = "numpy"
    detail: str = ""
    skipped: bool = False


@dataclass(slots=True)
class Breakdown:
    content: float = 0.0
    purpose_alignment: float = 0.0
    goal_alignment: float = 0.0
    late_interaction: float = 0.0
    temporal: float = 1.0
    spaces: dict[str, float] = field(default_factory=dict)
    space_ranks: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a result came from and what it passed (every profile fills what it has)."""

    strategies: tuple[str, ...] = ()       # the strategies (or spaces) whose own lists held it
    fused_score: float = 0.0               # the merged score before validation and final weighting
    validation_passed: tuple[str, ...] = ()  # checks of the validation stage it passed
    confidence: float = 1.0                # the memory's stored confidence
    citation: str = ""                     # "namespace/YYYY-MM-DD (memory 1f5a2b3c...)"
    conflicts_with: tuple[str, ...] = ()   # ids of memories it contradicts, the pair unresolved


@dataclass(frozen=True, slots=True)
class ConflictPair:
    """Two memories that disagree, as the conflict stage found and resolved them."""

    id_a: str          # the memory the retrieval found
    id_b: str          # the one it conflicts with
    edge_type: str     # "supersedes" | "contradicts" | "implied" (an update without a link)
    resolution: str    # "supersedes" | "recency" | "confidence" | "unresolved"
    winner: str        # id of the memory kept ("" when unresolved)


@dataclass(frozen=True, slots=True)
class UpdateHint:
    """An earlier memory that a stored memory probably updates (``pipeline/updates.py``)."""

    id: str
    similarity: float    # cosine of the two memories' sentence vectors, in [-1, 1]
    content: str         # the earlier memory's text (its first 500 characters), to judge without a Get


@dataclass(slots=True)
class Hit:
    memory: Memory
    score: float                               # final, normalised to [0, 1]
    breakdown: Breakdown
    found_by: tuple[str, ...] = ()
    misaligned: bool = False
    johari: Johari = Johari.UNKNOWN
    explanation: str = ""
    chunk_index: int = 0
    unique_contribution: str = ""              # the only fused space whose own list found it, if one
    primary_space: str = ""                    # the space that gave most to its fused score
    relevance: float = 0.0                     # calibrated, absolute (pipeline/relevance.py)
    chunk_span: tuple[int, int] | None = None  # character span of the best-matching chunk
    provenance: Provenance | None = None


@dataclass(frozen=True, slots=True)
class EntryPoint:
    """A space's best match for a query (DiscoverEntryPoints)."""

    space: str
    memory_id: str
    similarity: float   # in [0, 1], comparable across spaces
    score: float        # the space's own raw score


@dataclass(frozen=True, slots=True)
class MemoryPurpose:
    """What a memory serves (Get with purpose): its alignment to each goal of its partition (its
    purpose vector), the goal it serves best, and per space its mean similarity to that goal's
    most central memories (the per-space purpose vector)."""

    goal_id: str
    goal_label: str
    alignment: float                  # cosine to that goal's centroid, clipped to [0, 1]
    goal_alignment: dict[str, float]  # goal id -> alignment
    space_alignment: dict[str, float]  # space name -> mean similarity in [0, 1] to the goal's members
    members: int                      # members compared


@dataclass(slots=True)
class Outcome:
    """Final bookkeeping of one retrieval (the stream's summary)."""

    corpus_size: int
    degraded: bool = False
    degraded_reason: str = ""
    route: str = ""                  # the router's route ("" when the profile has no router)
    skip_reason: str = ""            # why nothing was retrieved, when route is "skip"
    retry_count: int = 0             # attempts after the first (bounded retries)
    retrieval_confidence: float = 0.0  # mean calibrated relevance of the top 3 results (0 when none)
    conflicts: list[ConflictPair] = field(default_factory=list)  # pairs touching a delivered result
    query_types: list[str] = field(default_factory=list)  # the query analyzer's kinds ([] without one)
    space_weights: dict[str, float] = field(default_factory=dict)  # fusion weights the retrieval ran with
    # perspective coverage of the delivered results: space -> (results its list found, results only it found)
    coverage: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Offload:
    """Pure work a maintenance step hands out (it reads only copies), to run away from the thread
    that owns the indexes; its result is sent back into the maintenance generator."""

    fn: Callable[[], Any]

    def run(self) -> Any:
        return self.fn()


class Retriever(Protocol):
    """Owns the in-memory indexes over every space; the store stays the source of truth.

    Calls arrive from one executor thread, so implementations need no locking of their own.
    ``retrieve`` must never yield a memory ``query.principal`` may not read.

    Optional, found by name by the core: ``token_codecs``, ``warm_up``, and ``can_snapshot`` /
    ``snapshot_state`` / ``restore_state`` (the indexes written at a clean stop and read back at
    the next start, ``teleo_server/snapshot.py``); a retriever without them, or whose
    ``can_snapshot()`` is false, is rebuilt from the store at every start.
    """

    @property
    def backend(self) -> str: ...

    def add(self, memory: Memory, embeddings: EmbeddingSet) -> None: ...

    def remove(self, ids: list[str]) -> None: ...

    def update(self, memory: Memory) -> None:
        """Refresh bookkeeping (feedback counters) of a memory already indexed."""
        ...

    def count_retrieved(self, ids: list[str]) -> None:
        """Add one to the retrieved count of the indexed copies of ``ids`` (after the store's own
        counters moved the same way): results show the count without the copies being replaced."""
        ...

    def retrieve(self, query: Query) -> Iterator[StageReport | Hit | Outcome]:
        """Stage reports as stages finish, then hits in rank order, then one Outcome."""
        ...

    def compare(self, a: str, b: str, aggregation: str, weights: dict[str, float],
                matrix: str = "", principal: Principal | None = None) -> tuple[dict[str, float], float, float | None]:
        """Per-space similarity in [0, 1], their aggregate (``weights`` over a named search
        ``matrix``'s), and the purpose vectors' cosine (None when not comparable); ``rrf`` ranks
        among the memories ``principal`` may read."""
        ...

    def discover(self, query: Query, min_similarity: float = 0.0) -> list[EntryPoint]:
        """Each whole-corpus space's best match for the query, best first (DiscoverEntryPoints)."""
        ...

    def goals(self, principal: Principal | None = None) -> list[Goal]:
        """The emergent goals the principal may see, each with its history of snapshots."""
        ...

    def purpose_of(self, memory_id: str, members: int = 16) -> MemoryPurpose | None:
        """A memory's purpose among its own partition's goals (None while it has none);
        NotFound when it is not indexed."""
        ...

    def resolve_profile(self, name: str) -> str:
        """The canonical name of profile ``name`` ("" = the default); InvalidArgument if unknown."""
        ...

    def update_hints(self, memory_id: str, principal: Principal, limit: int | None = None) -> list[UpdateHint]:
        """Earlier memories ``principal`` may read that memory ``memory_id`` probably updates, best
        first (empty when it is not indexed)."""
        ...

    def cache_ttl(self, profile: str) -> float:
        """Seconds a result of this profile may be answered from the result cache (0 = never)."""
        ...

    def breaker_states(self) -> dict[str, str]:
        """Circuit breaker name -> "closed" | "open" | "half_open"."""
        ...

    def goal_count(self, principal: Principal | None = None) -> int:
        """Goals the principal may see: built only from partitions it may read."""
        ...

    def maintenance_due(self) -> bool:
        """Whether ``maintenance`` has work to do."""
        ...

    def maintenance(self) -> Generator[Offload | None, Any, None]:
        """Background upkeep as short steps (see ``TeleologicalRetriever.maintenance``)."""
        ...

    def __len__(self) -> int: ...


__all__ = [
    "Breakdown",
    "ConflictPair",
    "EntryPoint",
    "Filters",
    "Hit",
    "MemoryPurpose",
    "Offload",
    "Outcome",
    "Overrides",
    "Provenance",
    "Query",
    "Retriever",
    "StageReport",
    "UpdateHint",
]
