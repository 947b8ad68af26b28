"""The store interface, so a server-grade database can sit behind it later."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from teleo_server.domain import AccessLevel, EmbeddingSet, Memory


@dataclass(frozen=True, slots=True)
class StoredToken:
    token_id: str
    agent_id: str
    read_namespaces: tuple[str, ...]
    write_namespaces: tuple[str, ...]
    access_level: AccessLevel
    default_namespace: str
    created: float
    revoked: float | None
    note: str


class MemoryStore(Protocol):
    """All methods are blocking; the server calls them from its store executor.

    A method returns only after its transaction is durably committed.
    """

    def find_duplicate(self, namespace: str, content_hash: str) -> str | None: ...

    def put(self, memory: Memory, embeddings: EmbeddingSet) -> tuple[Memory, bool]:
        """Insert; returns (stored memory, duplicate). A duplicate writes nothing."""
        ...

    def put_many(self, items: list[tuple[Memory, EmbeddingSet]]) -> list[tuple[Memory, bool]]:
        """Insert all in one transaction (duplicates, including within the batch, write nothing)."""
        ...

    def get(self, ids: list[str]) -> dict[str, Memory]: ...

    def delete(self, ids: list[str]) -> int: ...

    def record_feedback(self, memory_id: str, used: bool, helpful: bool | None) -> Memory | None: ...

    def record_retrieved(self, ids: list[str]) -> None: ...

    def iter_memories(self) -> Iterator[tuple[Memory, EmbeddingSet]]: ...

    def stale_ids(self, model_version: str) -> list[str]:
        """Memories embedded by another model version (they must be re-embedded)."""
        ...

    def replace_embeddings(self, memory_id: str, embeddings: EmbeddingSet) -> Memory | None: ...

    def count_by_namespace(self) -> dict[tuple[str, AccessLevel], tuple[int, int]]:
        """(namespace, access level) -> (memories, chunks)."""
        ...

    # Tokens: only hashes are stored.
    def add_token(self, token: StoredToken, token_hash: str) -> None: ...

    def token_by_hash(self, token_hash: str) -> StoredToken | None: ...

    def list_tokens(self) -> list[StoredToken]: ...

    def revoke_token(self, token_id: str, when: float) -> bool: ...

    def close(self) -> None: ...
