"""The result cache: a retrieval's answer kept for a short time, per caller.

Keyed by the caller's identity (its whole principal: agent, token, scope and level, so two callers
never share an entry) and the request as sent (query, filters, profile, every option). An entry
lives ``ttl`` seconds (the profile's ``result_cache_ttl_s``; 0 = not cached) and is dropped as soon
as anything the caller could see changes: every write, update, delete or feedback bumps the version
of its partition (namespace and access level), and an entry is served only while each partition the
caller can read has the version it had when the retrieval started (one that appeared since counts
as a change). Writes the caller cannot read (another namespace, or a level above its own) leave its
entries alone, so whether an answer came from the cache never tells a caller about them.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from teleo_server.domain import AccessLevel, Principal


@dataclass(slots=True)
class _Entry:
    value: Any
    expires: float
    versions: dict[tuple[str, int], int]


class ResultCache:
    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._versions: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def written(self, partitions: Iterable[tuple[str, AccessLevel]]) -> None:
        """Memories of these (namespace, level) partitions changed: entries that could see them go stale."""
        with self._lock:
            for ns, level in set(partitions):
                key = (ns, int(level))
                self._versions[key] = self._versions.get(key, 0) + 1

    def snapshot(self, principal: Principal) -> dict[tuple[str, int], int]:
        """The versions of the partitions ``principal`` can read, taken before a retrieval runs."""
        with self._lock:
            return self._readable(principal)

    def _readable(self, principal: Principal) -> dict[tuple[str, int], int]:
        return {p: v for p, v in self._versions.items() if principal.can_read(p[0], AccessLevel(p[1]))}

    def get(self, key: Hashable, principal: Principal, now: float | None = None) -> Any | None:
        now = time.monotonic() if now is None else now
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.expires <= now or entry.versions != self._readable(principal):
                if entry is not None:
                    del self._entries[key]
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry.value

    def put(self, key: Hashable, value: Any, ttl: float, versions: dict[tuple[str, int], int], now: float | None = None) -> None:
        if ttl <= 0:
            return
        now = time.monotonic() if now is None else now
        with self._lock:
            self._entries[key] = _Entry(value, now + ttl, versions)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


__all__ = ["ResultCache"]
