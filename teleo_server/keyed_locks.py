"""One asyncio lock per key (a memory id), for writes that read a memory and write it back.

An Update reads the memory, changes the fields it names and writes the whole record; a Delete, a
Feedback and a re-embedding each write a memory and then its index entry. Two of them on one
memory at once could each start from the same record (the first one's change lost although it
was acknowledged), or update the index in the other order than the store (the index then holds
a version the store no longer has, or a deleted memory). Holding the memory's lock across the
read, the write and the index update puts them in a line. Keys are locked in sorted order, so
two holders of several keys never wait on each other; a key's lock exists only while it is held
or waited for.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager


class KeyedLocks:
    """``async with locks.hold(keys):`` holds every one of ``keys`` (one event loop)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # key -> (its lock, holders and waiters)

    def __len__(self) -> int:
        """Keys held or waited for now."""
        return len(self._locks)

    def _ref(self, key: str) -> asyncio.Lock:
        lock, users = self._locks.get(key, (None, 0))
        lock = lock if lock is not None else asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        return lock

    def _unref(self, key: str) -> None:
        lock, users = self._locks[key]
        if users == 1:
            del self._locks[key]
        else:
            self._locks[key] = (lock, users - 1)

    @asynccontextmanager
    async def hold(self, keys: Iterable[str]) -> AsyncIterator[None]:
        ordered = sorted(set(keys))
        locks = [self._ref(k) for k in ordered]
        taken: list[asyncio.Lock] = []
        try:
            for lock in locks:
                await lock.acquire()
                taken.append(lock)
            yield
        finally:
            for lock in reversed(taken):
                lock.release()
            for key in ordered:
                self._unref(key)


__all__ = ["KeyedLocks"]
