"""Chunk-to-memory folding: long memories are indexed as several chunks, ranked as one (max)."""

from __future__ import annotations

import numpy as np

from teleo_server.compute.sets import distinct_first


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Positions int64 of the concatenated ranges ``[starts[i], starts[i] + lengths[i])``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    first = np.cumsum(lengths) - lengths
    return np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(first - np.asarray(starts, dtype=np.int64), lengths)


def slices(indptr: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The entries of ``keys`` (rows of a CSR matrix, terms of a CSC index; each < indptr.size - 1)
    flattened into one gather: each key's length int64 (K,) and the entry positions int64."""
    keys = np.asarray(keys, np.int64)
    starts = indptr[keys].astype(np.int64)
    lengths = indptr[keys + 1].astype(np.int64) - starts
    return lengths, ranges(starts, lengths)


def expand(chunk_start: np.ndarray, chunk_count: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Chunk rows of memory ``rows`` (chunks of a memory are contiguous).

    Returns chunk rows int64 (sum(counts),) in memory order and counts int64 (len(rows),).
    """
    counts = chunk_count[rows].astype(np.int64)
    return ranges(chunk_start[rows], counts), counts


def segment_max(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-segment max and the 0-based index of the maximum within its segment.

    values: float32 (sum(counts),); counts: int64 (S,). Empty segments give NaN and index 0.
    """
    out = np.full(counts.size, np.nan, dtype=np.float32)
    arg = np.zeros(counts.size, dtype=np.int64)
    nonempty = counts > 0
    if not nonempty.any():
        return out, arg
    if np.all(counts == 1):
        return values.astype(np.float32), arg
    starts = (np.cumsum(counts) - counts)[nonempty]
    seg_max = np.maximum.reduceat(values, starts)
    out[nonempty] = seg_max
    owner = np.repeat(np.arange(counts.size), counts)
    is_max = values >= out[owner]
    first = np.flatnonzero(is_max)
    seg_of_first, idx = distinct_first(owner[first])
    arg[seg_of_first] = first[idx] - (np.cumsum(counts) - counts)[seg_of_first]
    return out, arg


def fold_rows(chunk_scores: np.ndarray, chunk_mem: np.ndarray, n_rows: int, one_each: bool | None = None) -> np.ndarray:
    """Max over each memory's chunks of a full chunk-score vector: float32 (n_rows,), -inf where none.

    ``one_each``: whether every memory has exactly one chunk (the catalog tracks it), so that the
    chunk scores are the memory scores; worked out from ``chunk_mem`` when not given.
    """
    if chunk_mem.size == n_rows and n_rows:
        if one_each is None:
            one_each = bool(chunk_mem[-1] == n_rows - 1 and np.all(np.diff(chunk_mem) == 1))
        if one_each:
            return chunk_scores.astype(np.float32, copy=False)
    out = np.full(n_rows, -np.inf, dtype=np.float32)
    np.maximum.at(out, chunk_mem, chunk_scores)
    return out


__all__ = ["expand", "fold_rows", "ranges", "segment_max", "slices"]
