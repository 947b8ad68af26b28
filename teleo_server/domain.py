"""Plain domain types shared by the store, the pipeline and the API layer.

Only ``api/convert.py`` turns these into protobuf messages and back; nothing below the API layer
sees a protobuf message.
"""

from __future__ import annotations

import enum
import hashlib
import math
import sys
import zlib
from dataclasses import dataclass, field

import numpy as np

from teleo_server.heads import DENSE, SPLADE, TOKENS, SparseVector, Vector


class MemoryType(enum.IntEnum):
    EPISODIC = 1
    SEMANTIC = 2
    PROCEDURAL = 3
    WORKING = 4
    REFLECTIVE = 5


class AccessLevel(enum.IntEnum):
    """Ordered: a principal with level L reads and writes memories of level <= L."""

    PUBLIC = 1
    INTERNAL = 2
    CONFIDENTIAL = 3
    RESTRICTED = 4


class LinkType(enum.IntEnum):
    RELATES_TO = 1
    CONTRADICTS = 2
    SUPERSEDES = 3
    CAUSES = 4


class Johari(enum.IntEnum):
    OPEN = 1
    BLIND = 2
    HIDDEN = 3
    UNKNOWN = 4


@dataclass(frozen=True, slots=True)
class Link:
    target_id: str
    type: LinkType
    weight: float = 1.0


@dataclass(slots=True)
class Memory:
    """A memory and its bookkeeping. Times are POSIX seconds (float, UTC)."""

    id: str
    namespace: str
    content: str
    content_hash: str
    memory_type: MemoryType = MemoryType.SEMANTIC
    access_level: AccessLevel = AccessLevel.INTERNAL
    source: str = ""
    confidence: float = 1.0
    importance: float = 0.5
    event_time: float = 0.0
    ingestion_time: float = 0.0
    session_id: str = ""
    session_position: int | None = None
    links: tuple[Link, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    evergreen: bool = False
    model_version: str = ""
    chunk_count: int = 0
    retrieved_count: int = 0
    used_count: int = 0
    helpful_count: int = 0
    misled_count: int = 0
    sufficient_count: int = 0      # Feedback said the retrieval's results were enough
    insufficient_count: int = 0    # ... or that a follow-up query was needed

    @property
    def packed(self) -> bool:
        """Whether ``content`` is held compressed."""
        return type(_CONTENT_SLOT.__get__(self, Memory)) is bytes


# A record the index holds keeps its text deflated (``held_text``): a SciFact abstract takes 0.7 KB
# instead of 1.9 as a str, and reading it back costs about 9 us. Shorter texts gain too little.
PACK_AT = 256
PACK_RATIO = 0.8           # kept deflated only when that saves at least a fifth
_WBITS = -15               # raw deflate: no header or checksum (the text is in the database too)
_CONTENT_SLOT = Memory.__dict__["content"]


def held_text(memory: Memory) -> str | bytes:
    """The form of ``memory``'s text a record keeps: raw-deflated UTF-8 bytes where that saves at
    least a fifth of a long text, else the str itself."""
    text = _CONTENT_SLOT.__get__(memory, Memory)
    if type(text) is str and len(text) >= PACK_AT:
        packed = zlib.compress(text.encode("utf-8"), 6, _WBITS)
        if sys.getsizeof(packed) < PACK_RATIO * sys.getsizeof(text):
            return packed
    return text


def hold_text(memory: Memory, held: str | bytes) -> None:
    """Give ``memory`` a text in the form ``held_text`` made; ``content`` inflates it when read."""
    _CONTENT_SLOT.__set__(memory, held)


def text_of(held: str | bytes) -> str:
    """The text a form made by ``held_text`` holds."""
    return held if type(held) is str else zlib.decompress(held, _WBITS).decode("utf-8")


def _get_content(self: Memory) -> str:
    return text_of(_CONTENT_SLOT.__get__(self, Memory))


def _set_content(self: Memory, text: str) -> None:
    _CONTENT_SLOT.__set__(self, text)


Memory.content = property(_get_content, _set_content, doc="The memory's text (a str, however it is held).")  # type: ignore[assignment]


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


# The range a protobuf Timestamp may hold: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z.
# Every time Teleo accepts or returns must lie inside it, or it cannot be sent back to a reader.
EARLIEST_TIME = -62_135_596_800
LATEST_TIME = 253_402_300_799


def time_in_range(t: float) -> bool:
    return math.isfinite(t) and EARLIEST_TIME <= t < LATEST_TIME + 1


def unreadable_reason(m: Memory) -> str | None:
    """Why a stored memory cannot be served (a row written before its fields were validated), or None."""
    for name in ("event_time", "ingestion_time"):
        t = getattr(m, name)
        if not time_in_range(t):
            return f"{name} {t!r} is outside the range a timestamp can hold"
    for name in ("confidence", "importance"):
        x = getattr(m, name)
        if not (math.isfinite(x) and 0.0 <= x <= 1.0):
            return f"{name} {x!r} is not in [0, 1]"
    if m.session_position is not None and not 0 <= m.session_position < 2**63:
        return f"session_position {m.session_position!r} is out of range"
    return None


@dataclass(slots=True)
class ChunkEmbedding:
    """Every head of one chunk of a memory's text.

    vectors: head name -> vector, as :mod:`teleo_server.heads` declares each head (a dense head
    (dim,), a per-token head (T, dim) with T >= 0, a sparse head a ``SparseVector``). A query's
    set may hold only some heads; a space whose head is absent does not serve that query.
    start / end: character span of the chunk within the memory's content.
    """

    vectors: dict[str, Vector]
    start: int = 0
    end: int = 0

    def get(self, head: str) -> Vector | None:
        return self.vectors.get(head)

    @classmethod
    def from_models(cls, dense, tokens, sparse_ids, sparse_weights, start: int = 0,
                    end: int = 0) -> ChunkEmbedding:
        """A chunk of the model repository's three heads (dense, tokens, splade)."""
        return cls({DENSE.name: np.ascontiguousarray(dense, dtype=DENSE.dtype),
                    TOKENS.name: np.ascontiguousarray(tokens, dtype=TOKENS.dtype),
                    SPLADE.name: SparseVector.of(sparse_ids, sparse_weights)}, start, end)


@dataclass(slots=True)
class EmbeddingSet:
    """All chunks of one text, produced by one model version (never mixed across versions)."""

    model_version: str
    chunks: list[ChunkEmbedding]


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller: an agent identity and its scope."""

    agent_id: str
    token_id: str
    read_namespaces: frozenset[str]
    write_namespaces: frozenset[str]
    access_level: AccessLevel
    default_namespace: str

    def can_read(self, namespace: str, level: AccessLevel) -> bool:
        return level <= self.access_level and _in_scope(namespace, self.read_namespaces)

    def can_write(self, namespace: str, level: AccessLevel) -> bool:
        return level <= self.access_level and _in_scope(namespace, self.write_namespaces)


def _in_scope(namespace: str, scope: frozenset[str]) -> bool:
    # "*" grants every namespace; "prefix*" grants namespaces beginning with prefix.
    if namespace in scope or "*" in scope:
        return True
    return any(s.endswith("*") and namespace.startswith(s[:-1]) for s in scope)


__all__ = [
    "AccessLevel",
    "ChunkEmbedding",
    "EARLIEST_TIME",
    "EmbeddingSet",
    "Johari",
    "LATEST_TIME",
    "Link",
    "LinkType",
    "Memory",
    "MemoryType",
    "Principal",
    "content_hash",
    "held_text",
    "hold_text",
    "text_of",
    "time_in_range",
    "unreadable_reason",
]
