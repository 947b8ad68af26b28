"""Types crossing the boundary between the API layer and the retrieval pipeline."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from teleo_server.domain import EmbeddingSet, Johari, Memory, MemoryType, Principal


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
    now: float = 0.0                           # POSIX seconds used for temporal decay


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
    unique_contribution: str = ""              # additive_rrf: the only space that found it, if one


@dataclass(slots=True)
class Outcome:
    """Final bookkeeping of one retrieval (the stream's summary)."""

    corpus_size: int
    degraded: bool = False
    degraded_reason: str = ""


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
    """

    @property
    def backend(self) -> str: ...

    def add(self, memory: Memory, embeddings: EmbeddingSet) -> None: ...

    def remove(self, ids: list[str]) -> None: ...

    def update(self, memory: Memory) -> None:
        """Refresh bookkeeping (feedback counters) of a memory already indexed."""
        ...

    def retrieve(self, query: Query) -> Iterator[StageReport | Hit | Outcome]:
        """Stage reports as stages finish, then hits in rank order, then one Outcome."""
        ...

    def compare(self, a: str, b: str, aggregation: str, weights: dict[str, float]) -> tuple[dict[str, float], float]:
        """Per-space similarity in [0, 1] and their aggregate."""
        ...

    def resolve_profile(self, name: str) -> str:
        """The canonical name of profile ``name`` ("" = the default); InvalidArgument if unknown."""
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
    "Filters",
    "Hit",
    "Offload",
    "Outcome",
    "Overrides",
    "Query",
    "Retriever",
    "StageReport",
]
