"""Device top-k: radix select in ``kernels/topk.cu`` (one block and one launch for small inputs, grid-wide
passes for large ones) plus a sort of the k survivors."""

from __future__ import annotations

from typing import Any

import numpy as np

from teleo_server.compute.errors import InternalValueError, InvalidValue
from teleo_server.gpu import _checks, runtime

_THREADS = 256
_PASSES = 8
_SMALL_THREADS = 1024
# Up to this many scores one block does the whole selection in one launch (topk_small); above it
# the grid-wide passes spread the reads over every multiprocessor.
SMALL_N = 16384


def _grid(n: int, sms: int) -> int:
    return max(1, min((n + _THREADS - 1) // _THREADS, sms * 4))


def topk_device(
    scores: Any,
    k: int,
    *,
    mask: Any | None = None,
    floor: float | None = None,
) -> tuple[Any, Any, Any]:
    """Best ``k`` rows of a device score vector, without synchronising.

    Parameters
    ----------
    scores : device array float32, shape (N,), device, C-contiguous
        NaN never qualifies.
    k : int
    mask : device array uint32, shape (ceil(N / 32),), device, optional
        Row bitset; a clear bit excludes the row.
    floor : float, optional
        When given, only scores strictly greater qualify (SpMV uses 0.0).

    Returns
    -------
    ids : device array int32, shape (min(k, N),), device
        Best first, ties by ascending row id; padded with -1 past ``count``.
    scores : device array float32, same shape, device; padded with -inf
    count : device array uint64, shape (), device
        Rows actually selected, ``min(k, qualifying)``. Reading it synchronises.

    Raises
    ------
    teleo_server.compute.errors.InvalidValue
        ``k < 0``.
    teleo_server.compute.errors.InternalTypeError, InternalValueError
        ``scores`` or ``mask`` is not as described, or N does not fit int32 row ids.
    """
    rt = runtime.current()
    xp = rt.xp

    _checks.device_array("scores", scores, np.float32, 1)
    n = int(scores.shape[0])
    if n >= 2**31:
        raise InternalValueError(f"top-k over {n} rows exceeds int32 row ids")
    if k < 0:
        raise InvalidValue(f"k must be >= 0, got {k}")
    if mask is not None:
        _checks.mask_words(mask, n)
    kbuf = min(int(k), n)
    state = xp.zeros(8, dtype=xp.uint64)
    if kbuf == 0:
        return xp.empty(0, xp.int32), xp.empty(0, xp.float32), state[7]
    words = mask if mask is not None else xp.zeros(1, dtype=xp.uint32)
    has_mask = np.int32(mask is not None)
    use_floor = np.int32(floor is not None)
    floor32 = np.float32(0.0 if floor is None else floor)
    keys = xp.zeros(kbuf, dtype=xp.uint64)
    if n <= SMALL_N:
        small = rt.function("topk", "topk_small")
        small((1,), (_SMALL_THREADS,), (scores, words, has_mask, use_floor, floor32, np.int32(n), np.int32(kbuf), state,
                                        keys, np.int32(kbuf)))
    else:
        hist = xp.zeros(256, dtype=xp.uint32)
        grid = (_grid(n, rt.sm_count()),)
        histogram = rt.function("topk", "topk_histogram")
        scan = rt.function("topk", "topk_scan")
        for p in range(_PASSES):
            histogram(grid, (_THREADS,), (scores, words, has_mask, use_floor, floor32, np.int32(n), np.int32(p), state, hist))
            scan((1,), (32,), (hist, state, np.int32(kbuf), np.int32(p)))
        collect = rt.function("topk", "topk_collect")
        collect(grid, (_THREADS,), (scores, words, has_mask, use_floor, floor32, np.int32(n), state, keys, np.int32(kbuf)))
    keys = xp.sort(keys)
    ids = xp.empty(kbuf, dtype=xp.int32)
    vals = xp.empty(kbuf, dtype=xp.float32)
    decode = rt.function("topk", "topk_decode")
    decode(((kbuf + _THREADS - 1) // _THREADS,), (_THREADS,), (keys, np.int32(kbuf), ids, vals))
    return ids, vals, state[7]


__all__ = ["SMALL_N", "topk_device"]
