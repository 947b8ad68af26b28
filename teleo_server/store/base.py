"""The store interface, so a server-grade database can sit behind it later."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from teleo_server.domain import AccessLevel, EmbeddingSet, Memory, Principal
from teleo_server.query import Filters


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


@dataclass(frozen=True, slots=True)
class Position:
    """Where a database's change journal stands: the database's own id (random, made with it),
    the sequence number of its latest change (0 before any), and how far the journal has been
    pruned (changes up to that number are no longer listed)."""

    database_id: str
    change: int
    pruned: int


class MemoryStore(Protocol):
    """All methods are blocking; the server calls them from its store executor.

    A method returns only after its transaction is durably committed. Embeddings are kept as they
    are given and read back the same: a per-token head given as ``heads.TokenCodes`` comes back as
    the same codes with the same ``CodecSpec``, never as another codec's or as floats.
    """

    def find_duplicate(self, namespace: str, level: AccessLevel, content_hash: str) -> str | None:
        """The oldest servable memory with this content in this namespace at this access level."""
        ...

    def put(self, memory: Memory, embeddings: EmbeddingSet, dedup: bool = True) -> tuple[Memory, bool]:
        """Insert; returns (stored memory, duplicate). A duplicate writes nothing."""
        ...

    def put_many(self, items: list[tuple[Memory, EmbeddingSet]],
                 dedup: Callable[[Memory], bool] = ...) -> list[tuple[Memory, bool]]:
        """Insert all in one transaction. A memory for which ``dedup`` is true is not written when
        one with the same (namespace, access level, content) exists (also earlier in the batch);
        the writer decides, because only a memory it may read may be reported as a duplicate."""
        ...

    def get(self, ids: list[str]) -> dict[str, Memory]:
        """Servable memories by id; a row that cannot be served is quarantined and left out."""
        ...

    def list_page(self, principal: Principal, filters: Filters, after: int, limit: int) -> list[tuple[int, Memory]]:
        """Up to ``limit`` servable memories ``principal`` may read that match ``filters``, oldest
        first, each with its sequence number (> ``after``; the next page starts after the last)."""
        ...

    def access_of(self, ids: list[str]) -> dict[str, tuple[str, AccessLevel]]:
        """(namespace, access level) of each known id, quarantined rows included."""
        ...

    def quarantine(self, memory_id: str, reason: str) -> None: ...

    def quarantined(self) -> dict[str, str]:
        """id -> reason, for every quarantined row."""
        ...

    def delete(self, ids: list[str]) -> int: ...

    def update(self, memory: Memory, embeddings: EmbeddingSet | None, previous_id: str | None) -> Memory | None:
        """Overwrite a memory's caller-set fields (and embeddings when given) in one transaction; with
        ``previous_id``, keep the old row under that id first. None when the memory is gone."""
        ...

    def embeddings_of(self, memory_id: str) -> EmbeddingSet | None: ...

    def record_feedback(self, memory_id: str, used: bool, helpful: bool | None,
                        sufficient: bool | None = None) -> Memory | None: ...

    def record_retrieved(self, ids: list[str]) -> None: ...

    def iter_memories(self) -> Iterator[tuple[Memory, EmbeddingSet]]: ...

    def stale_ids(self, model_version: str) -> list[str]:
        """Memories embedded by another model version (they must be re-embedded)."""
        ...

    def replace_embeddings(self, memory_id: str, embeddings: EmbeddingSet,
                           content_hash: str | None = None) -> Memory | None:
        """Store ``embeddings`` as the memory's own; with ``content_hash``, only while its content
        is still the one embedded (None when it is gone or its content changed)."""
        ...

    def count_by_namespace(self) -> dict[tuple[str, AccessLevel], tuple[int, int]]:
        """(namespace, access level) -> (memories, chunks)."""
        ...

    # Tokens: only hashes are stored.
    def add_token(self, token: StoredToken, token_hash: str) -> None: ...

    def token_by_hash(self, token_hash: str) -> StoredToken | None: ...

    def list_tokens(self) -> list[StoredToken]: ...

    def revoke_token(self, token_id: str, when: float) -> bool: ...

    # -- the change journal: which memories changed, in order, whoever changed them ----------------

    def position(self) -> Position:
        """The database's id and where its change journal stands now."""
        ...

    def changes_since(self, change: int, others_only: bool = False) -> list[tuple[str, bool]]:
        """(memory id, only its counters changed) of every memory changed after sequence number
        ``change``, in the order of their latest change; a memory once, however often it changed.
        ``others_only``: only those some change of which was not made through this store (another
        program's, or a row it found unservable while reading)."""
        ...

    def changed_since(self, change: int) -> int:
        """How many memories changed after sequence number ``change`` in more than their counters."""
        ...

    def prune_changes(self, through: int) -> int:
        """Forget the changes up to sequence number ``through`` (no snapshot needs them any more);
        returns how many entries went."""
        ...

    def indexable(self, ids: list[str]) -> list[tuple[Memory, EmbeddingSet]]:
        """What ``iter_memories`` would give for ``ids``: those stored and servable, with their
        embeddings."""
        ...

    def close(self) -> None: ...


__all__ = ["MemoryStore", "Position", "StoredToken"]
