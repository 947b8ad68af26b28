"""Top-k selection shared by every scorer: score descending, ties broken by the lower row id."""

from __future__ import annotations

import numpy as np

from teleo_server.compute.errors import InternalValueError, InvalidValue


def topk(scores: np.ndarray, k: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best rows of a score vector.

    Parameters
    ----------
    scores : np.ndarray, shape (N,), any float dtype, host
        Cast to float32 before ranking, so every backend ranks the same values. NaN never qualifies.
    k : int
        Number wanted, ``>= 0``. Fewer come back when fewer rows qualify.
    mask : np.ndarray of bool, shape (N,), optional
        Rows with ``False`` are excluded.

    Returns
    -------
    ids : np.ndarray int32, shape (min(k, qualifying),)
        Row ids, best first; equal scores are ordered by ascending id.
    scores : np.ndarray float32, same shape

    Raises
    ------
    teleo_server.compute.errors.InvalidValue
        ``k < 0``.
    teleo_server.compute.errors.InternalValueError
        ``scores`` is not 1-D, or ``mask`` does not match it.
    """
    if k < 0:
        raise InvalidValue(f"k must be >= 0, got {k}")
    s = np.asarray(scores, dtype=np.float32)
    if s.ndim != 1:
        raise InternalValueError(f"scores must be 1-D, got shape {s.shape}")
    # -0.0 and +0.0 are one score: the tie rule, not the sign bit, decides their order.
    s = s + np.float32(0.0)
    valid = ~np.isnan(s)
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        if m.shape != s.shape:
            raise InternalValueError(f"mask shape {m.shape} != scores shape {s.shape}")
        valid &= m
    if valid.all():
        ids = np.arange(s.shape[0], dtype=np.int64)
        sub = s
    else:
        ids = np.flatnonzero(valid)
        sub = s[ids]
    n = sub.shape[0]
    if k == 0 or n == 0:
        return np.empty(0, np.int32), np.empty(0, np.float32)
    if k < n:
        # keep every row strictly above the k-th best value, then the lowest ids among those equal
        # to it (``ids`` is ascending), so ties at the cut are decided by row id.
        kth = np.partition(sub, n - k)[n - k]  # the value alone: half the cost of argpartition
        above = np.flatnonzero(sub > kth)
        tied = np.flatnonzero(sub == kth)[: k - above.shape[0]]
        keep = np.concatenate([above, tied])
        ids, sub = ids[keep], sub[keep]
    order = np.lexsort((ids, -sub))
    return ids[order].astype(np.int32), sub[order]


__all__ = ["topk"]
