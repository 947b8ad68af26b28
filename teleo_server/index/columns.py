"""Growable NumPy columns: the storage every index and the catalog append to."""

from __future__ import annotations

import sys

import numpy as np


def shrunk(a: np.ndarray, rows: int) -> np.ndarray:
    """``a`` cut to its first ``rows`` rows (at least one): in place when only its owner refers to
    it, so the allocator takes the tail back and a large buffer is never held twice; else a copy.

    Pass the owner's reference itself (``self._m = shrunk(self._m, n)``): a view of the buffer,
    or any other name for it, adds a reference and the buffer is copied instead."""
    rows = min(max(rows, 1), a.shape[0])
    # the owner's reference, this parameter and getrefcount's own argument: nothing else holds it
    if a.flags.owndata and sys.getrefcount(a) <= 3:
        a.resize((rows,) + a.shape[1:], refcheck=False)
        return a
    return a[:rows].copy()


class Column:
    """A growable 1-D numpy array (amortised O(1) append)."""

    __slots__ = ("_a", "n")

    def __init__(self, dtype: np.dtype | type, fill: float | int | bool = 0) -> None:
        self._a = np.full(64, fill, dtype=dtype)
        self.n = 0

    def append(self, value: float | int | bool) -> None:
        if self.n == self._a.size:
            self._a = np.concatenate([self._a, np.zeros_like(self._a)])
        self._a[self.n] = value
        self.n += 1

    def extend(self, values: np.ndarray) -> None:
        need = self.n + values.size
        if need > self._a.size:
            grown = np.zeros(max(need, 2 * self._a.size), dtype=self._a.dtype)
            grown[: self.n] = self._a[: self.n]
            self._a = grown
        self._a[self.n : need] = values
        self.n = need

    def at(self, i: int) -> float | int | bool:
        """Element ``i`` as a Python scalar (cheaper than ``view[i]`` for one)."""
        return self._a.item(i)

    @property
    def view(self) -> np.ndarray:
        return self._a[: self.n]

    def fit(self) -> None:
        """Cut the buffer to the values held (at least one slot), in place where it can be."""
        self._a = shrunk(self._a, self.n)

    def keep(self, rows: np.ndarray) -> None:
        kept = self._a[rows].copy()
        self._a = np.zeros(max(64, kept.size), dtype=self._a.dtype)
        self._a[: kept.size] = kept
        self.n = kept.size


__all__ = ["Column", "shrunk"]
