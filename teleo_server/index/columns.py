"""Growable NumPy columns: the storage every index and the catalog append to."""

from __future__ import annotations

import numpy as np


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

    def keep(self, rows: np.ndarray) -> None:
        kept = self._a[rows].copy()
        self._a = np.zeros(max(64, kept.size), dtype=self._a.dtype)
        self._a[: kept.size] = kept
        self.n = kept.size


__all__ = ["Column"]
