"""Postings from int64 keys to integer ids, for lookup tables that only grow (a name's character
trigrams -> the names that contain them).

A Python dict of per-key arrays costs about 200 bytes a key before its first id (the key object,
the table slot, the array object and its spare room); here every posting is 2 bytes (while every
id is below 65,536) or 4 in one CSR (keys sorted, int64 (K,); offsets int64 (K+1,); ids uint16 or
int32 (E,)), plus a write buffer that is folded in once it holds an eighth as many entries, so a
burst of writes costs amortised O(1) each.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

import numpy as np

from teleo_server.index.chunks import ranges, slices
from teleo_server.index.sparse import rows_dtype


def _copy(buffer: array, dtype: type) -> np.ndarray:
    """The write buffer's entries as a NumPy array of their own: a view would keep the buffer
    exported while NumPy works without the GIL, and an append in the meantime would fail."""
    return np.frombuffer(buffer.tobytes(), dtype=dtype)


class KeyedPostings:
    """key (int64) -> ids (int32) posted under it, in the order they were added."""

    def __init__(self, min_merge: int = 4096) -> None:
        self._min_merge = min_merge
        self.keys = np.zeros(0, dtype=np.int64)
        self.offsets = np.zeros(1, dtype=np.int64)
        self.ids = np.zeros(0, dtype=rows_dtype(0))
        self._p_keys = array("q")
        self._p_ids = array("i")
        self._p_sorted: tuple[np.ndarray, np.ndarray] | None = None  # the buffer sorted by key

    def __len__(self) -> int:
        """Postings held (a key's id counted once each time it was posted)."""
        return int(self.ids.size) + len(self._p_ids)

    def add(self, keys: Iterable[int], id_: int) -> None:
        """Post ``id_`` under each of ``keys`` (give each key once)."""
        for key in keys:
            self._p_keys.append(key)
            self._p_ids.append(id_)
        self._p_sorted = None
        if len(self._p_ids) > max(self._min_merge, self.ids.size // 8):
            self.merge()

    def merge(self) -> None:
        """Fold the write buffer into the CSR."""
        if not self._p_ids:
            return
        keys = np.concatenate([np.repeat(self.keys, np.diff(self.offsets)), _copy(self._p_keys, np.int64)])
        ids = np.concatenate([self.ids, _copy(self._p_ids, np.int32)])
        order = np.argsort(keys, kind="stable")  # stable: each key's ids stay in the order posted
        keys, ids = keys[order], ids[order]
        self.ids = ids.astype(rows_dtype(int(ids.max()) + 1 if ids.size else 0))  # two bytes while they fit
        first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else np.zeros(0, np.int64)
        self.keys = keys[first]
        self.offsets = np.append(first, keys.size).astype(np.int64)
        self._p_keys, self._p_ids, self._p_sorted = array("q"), array("i"), None

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """The ids (uint16 or int32) posted under any of ``keys`` (distinct int64), one per posting
        (an id posted under three of them appears three times)."""
        keys = np.asarray(keys, dtype=np.int64)
        out = [self._from(self.keys, self.offsets, self.ids, keys)]
        if self._p_ids:
            if self._p_sorted is None:
                p_keys = _copy(self._p_keys, np.int64)
                order = np.argsort(p_keys, kind="stable")
                self._p_sorted = (p_keys[order], _copy(self._p_ids, np.int32)[order])
            p_keys, p_ids = self._p_sorted
            lo, hi = np.searchsorted(p_keys, keys, "left"), np.searchsorted(p_keys, keys, "right")
            out.append(p_ids[ranges(lo, hi - lo)])
        return np.concatenate(out) if len(out) > 1 else out[0]

    @staticmethod
    def _from(sorted_keys: np.ndarray, offsets: np.ndarray, ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(sorted_keys, keys)
        found = pos < sorted_keys.size
        found[found] = sorted_keys[pos[found]] == keys[found]
        return ids[slices(offsets, pos[found])[1]]


__all__ = ["KeyedPostings"]
