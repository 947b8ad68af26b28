"""Distinct values and membership of integer arrays, by sorting.

``np.unique`` and ``np.isin`` in NumPy 2.3 and later take a hashing path for integers that measured
20-35x slower than a sort on a 2-core x86 CPU (NumPy 2.4: 5,000 row ids 2.0 ms against 0.06 ms;
``np.isin`` of 300 ids in 5,000: 2.4 ms against 0.05 ms). The pipeline takes distinct candidate
rows several times per query, so these replacements (same results, sorted output) sit on its hot
path. Each works on any sortable 1-D array.
"""

from __future__ import annotations

import numpy as np


def _first_flags(s: np.ndarray) -> np.ndarray:
    """True where a sorted array's value differs from the one before it (and at position 0)."""
    keep = np.empty(s.size, bool)
    if s.size:
        keep[0] = True
        np.not_equal(s[1:], s[:-1], out=keep[1:])
    return keep


def distinct(values: np.ndarray, bound: int | None = None) -> np.ndarray:
    """The sorted distinct values of ``values`` (as ``np.unique(values)``). With ``bound`` (the
    values are integers in [0, bound)), many values against the bound are marked in one pass of
    flags instead of sorted."""
    v = np.asarray(values).ravel()
    if bound is not None and v.size * 16 >= bound:
        seen = np.zeros(bound, bool)
        seen[v] = True
        return np.flatnonzero(seen)
    s = np.sort(v)
    return s[_first_flags(s)]


def _stable_sort(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stable sort order, the sorted values, first-of-its-value flags over them)."""
    v = np.asarray(values).ravel()
    order = np.argsort(v, kind="stable")
    s = v[order]
    return order, s, _first_flags(s)


def distinct_first(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, index int64 of each one's first occurrence) (as
    ``np.unique(values, return_index=True)``)."""
    order, s, keep = _stable_sort(values)
    return s[keep], order[keep].astype(np.int64)


def distinct_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, inverse int64 with ``distinct[inverse] == values``) (as
    ``np.unique(values, return_inverse=True)``)."""
    order, s, keep = _stable_sort(values)
    inverse = np.empty(order.size, np.int64)
    inverse[order] = np.cumsum(keep) - 1
    return s[keep], inverse


def member(values: np.ndarray, of: np.ndarray) -> np.ndarray:
    """bool, shaped like ``values``: whether each value occurs in ``of`` (as ``np.isin``)."""
    v = np.asarray(values)
    table = distinct(of)
    if table.size == 0 or v.size == 0:
        return np.zeros(v.shape, bool)
    if table.size <= 8:  # a few equality passes beat a search
        out = v == table[0]
        for t in table[1:]:
            out |= v == t
        return out
    pos = np.searchsorted(table, v)
    pos[pos == table.size] = 0
    return table[pos] == v


def group_sum(keys: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Sums of ``values`` by integer key in [0, n), nonzero sums only: (keys int64 ascending,
    sums float64). Each key's values are added in the order they come, as ``np.bincount`` does; a
    sort when the keys are few against ``n``, one bincount over ``n`` when they are many."""
    keys = np.asarray(keys, np.int64).ravel()
    values = np.asarray(values, np.float64).ravel()
    if keys.size * 8 >= n:
        sums = np.bincount(keys, weights=values, minlength=n)
        hit = np.flatnonzero(sums)
        return hit, sums[hit]
    order, s, first = _stable_sort(keys)
    starts = np.flatnonzero(first)
    if not starts.size:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    sums = np.add.reduceat(values[order], starts)
    hit = sums != 0
    return s[starts][hit], sums[hit]


def group_max(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The largest of ``values`` per integer key: (distinct keys int64 ascending, maxima like
    ``values``). Keys that arrive sorted (a memory's chunks are contiguous) are not sorted again."""
    keys = np.asarray(keys, np.int64).ravel()
    values = np.asarray(values).ravel()
    if keys.size > 1 and np.any(keys[1:] < keys[:-1]):
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], values[order]
    starts = np.flatnonzero(_first_flags(keys))
    if not starts.size:
        return keys[:0], values[:0]
    return keys[starts], np.maximum.reduceat(values, starts)


__all__ = ["distinct", "distinct_first", "distinct_inverse", "group_max", "group_sum", "member"]
