"""Durable storage: the source of truth for memories, their embeddings and API tokens."""

from teleo_server.store.base import MemoryStore, StoredToken
from teleo_server.store.sqlite import SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "StoredToken"]
