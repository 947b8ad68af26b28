"""Compare two memories space by space and aggregate the per-space similarities."""

from __future__ import annotations

from typing import Any

import numpy as np

from teleo_server.compute.sets import distinct
from teleo_server.errors import InvalidArgument

AGGREGATIONS = ("weighted_average", "rrf", "max", "min", "geometric_mean")
_RRF_K = 60.0
_POOL = 200


def aggregate(sims: dict[str, float], aggregation: str, weights: dict[str, float],
              space_ranks: dict[str, int] | None = None) -> float:
    """Aggregate per-space similarities in [0, 1].

    ``rrf`` needs ``space_ranks``: the 1-based rank of b among a's neighbours in each space; the
    sum of w / (60 + rank) is divided by its best value (every rank 1), so it lies in (0, 1].
    """
    if aggregation not in AGGREGATIONS:
        raise InvalidArgument(f"unknown aggregation {aggregation!r}; expected one of {AGGREGATIONS}", field="aggregation")
    names = [n for n in sims if weights.get(n, 1.0) > 0]
    if not names:
        return 0.0
    w = np.array([weights.get(n, 1.0) for n in names], dtype=np.float64)
    s = np.array([sims[n] for n in names], dtype=np.float64)
    if aggregation == "weighted_average":
        return float((w * s).sum() / w.sum())
    if aggregation == "max":
        return float(s.max())
    if aggregation == "min":
        return float(s.min())
    if aggregation == "geometric_mean":
        return float(np.exp((w * np.log(np.maximum(s, 1e-6))).sum() / w.sum()))
    assert space_ranks is not None
    r = np.array([space_ranks[n] for n in names], dtype=np.float64)
    return float((w / (_RRF_K + r)).sum() / (w / (_RRF_K + 1.0)).sum())


def compare_rows(spaces: dict[str, Any], readable: np.ndarray, dense: str | None, a: int, b: int,
                 aggregation: str, weights: dict[str, float]) -> tuple[dict[str, float], float]:
    """Per-space similarity of memory rows a and b, and their aggregate.

    spaces: name -> Space; readable: bool (n_rows,) the live rows the caller may read (no other
    row shapes a similarity or a rank); dense: the space playing the dense role. For ``rrf`` each
    space ranks b among a pool of a's nearest memories (the dense space's top 200, plus b).
    """
    sims: dict[str, float] = {}
    for name, space in spaces.items():
        v = space.similarity_among(a, np.array([b], dtype=np.int64), readable)
        if v.size and not np.isnan(v[0]):
            sims[name] = float(np.clip(v[0], 0.0, 1.0))
    ranks = None
    if aggregation == "rrf":
        semantic = spaces.get(dense or "")
        alive = np.flatnonzero(readable)
        alive = alive[alive != a]
        pool = alive
        if getattr(semantic, "index", None) is not None and alive.size > _POOL:
            s = semantic.similarity(a, alive)
            pool = alive[np.argsort(-s, kind="stable")[:_POOL]]
        pool = distinct(np.append(pool, b))
        ranks = {}
        for name in sims:
            s = spaces[name].similarity_among(a, pool, readable)
            ranks[name] = 1 + int((s > s[np.searchsorted(pool, b)]).sum())
    return sims, aggregate(sims, aggregation, weights, ranks)


def space_alignment(spaces: dict[str, Any], a: int, members: np.ndarray) -> dict[str, float]:
    """Per space, the mean similarity in [0, 1] of memory row ``a`` to ``members`` (rows int64);
    a space with no signal for any member is left out."""
    out: dict[str, float] = {}
    if not members.size:
        return out
    for name, space in spaces.items():
        v = np.asarray(space.similarity(a, members), dtype=np.float64)
        v = v[~np.isnan(v)]
        if v.size:
            out[name] = float(np.clip(v, 0.0, 1.0).mean())
    return out


__all__ = ["AGGREGATIONS", "aggregate", "compare_rows", "space_alignment"]
