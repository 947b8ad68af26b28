"""The device scorers behind :func:`teleo_server.compute.backend.ops`: host arrays in and out.

Importing this module registers them twice: as ``cupy`` (a CUDA device) and as ``emulated`` (the
same code and kernels on the CPU emulation of :mod:`teleo_server.gpu.emulator`, for tests). Every
executor checks its host arguments before touching the device and raises what the NumPy reference
raises for the same bad input (see :mod:`teleo_server.compute.errors`).

Each call copies the arrays it is given to the device: these executors check each kernel against
its reference (the kernel tests, ``bench/gpu``) and serve one-off calls. A retriever on a device
never hands them its index arrays: its indexes keep their rows in device memory
(:mod:`teleo_server.gpu.backends`, over :mod:`teleo_server.gpu.resident`) and its host-side work
runs on the NumPy scorers (``pipeline.ops``).
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import numpy as np

from teleo_server.compute.backend import Ops, register
from teleo_server.compute.dense import check_query as check_dense_query
from teleo_server.compute.errors import InternalValueError, InvalidValue
from teleo_server.compute.maxsim import CODE_BITS
from teleo_server.compute.sets import distinct
from teleo_server.compute.sparse import check_index, check_query as check_sparse_query
from teleo_server.gpu import runtime
from teleo_server.gpu._checks import pack_mask
from teleo_server.gpu.dense import dense_scores_device
from teleo_server.gpu.maxsim import maxsim_codes_device, maxsim_device
from teleo_server.gpu.spmv import spmv_scores_device
from teleo_server.gpu.topk import topk_device


def _upload(host: Any, dtype: Any) -> Any:
    """A device copy of host array ``host`` as ``dtype``, C-contiguous."""
    return runtime.current().xp.asarray(np.ascontiguousarray(host, dtype=dtype))


def _host_topk(ids: Any, scores: Any, count: Any) -> tuple[np.ndarray, np.ndarray]:
    n = int(count)  # the one synchronisation of a call
    rt = runtime.current()
    return rt.to_host(ids[:n]), rt.to_host(scores[:n])


def _check_k(k: int) -> None:
    if k < 0:
        raise InvalidValue(f"k must be >= 0, got {k}")


def _check_mask(mask: np.ndarray | None, n: int) -> np.ndarray | None:
    """The host bool mask, checked against ``n`` rows (None stays None)."""
    if mask is None:
        return None
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != (n,):
        raise InternalValueError(f"mask shape {mask.shape} != ({n},)")
    return mask


def _device_mask(mask: np.ndarray | None) -> Any:
    """A checked host mask as a device bitset (None stays None)."""
    xp = runtime.current().xp
    return None if mask is None else xp.asarray(pack_mask(mask))


def _check_index(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n_rows: int) -> None:
    """What :func:`teleo_server.compute.sparse.spmv_scores` checks, plus every row id, on the host."""
    check_index(np.asarray(indptr), np.asarray(indices), np.asarray(data))
    # An out-of-range row id would be an out-of-bounds atomic on the device: check, once per array.
    # With no rows nothing is launched (the reference answers an empty result there too).
    if n_rows and np.shape(indices)[0] and int(_bounds(indices)) >= n_rows:
        raise InternalValueError(f"posting row id outside [0, {n_rows})")


def _device_index(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray) -> tuple[Any, Any, Any]:
    """A checked host index, copied to the device."""
    return _upload(indptr, np.int64), _upload(indices, np.int32), _upload(data, np.float32)


_bounds_cache: dict[int, int] = {}


def _bounds(indices: np.ndarray) -> int:
    if not isinstance(indices, np.ndarray):
        arr = np.asarray(indices)
        if arr.min() < 0:
            raise InternalValueError("posting row id below 0")
        return int(arr.max())
    key = id(indices)
    if key not in _bounds_cache:
        arr = np.asarray(indices)
        if arr.size and arr.min() < 0:
            raise InternalValueError("posting row id below 0")
        _bounds_cache[key] = int(arr.max())
        weakref.finalize(indices, _bounds_cache.pop, key, None)
    return _bounds_cache[key]


def _query(q_ids: np.ndarray, q_weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Checked host int32 ids and float32 weights of a sparse query."""
    ids = np.asarray(q_ids).ravel()
    w = np.asarray(q_weights, dtype=np.float32).ravel()
    check_sparse_query(ids, w)
    # int64 ids beyond int32 are out of vocabulary anyway; clamp so the cast cannot wrap into range.
    ids = np.clip(ids.astype(np.int64), -1, np.iinfo(np.int32).max).astype(np.int32)
    return ids, w


def _spmv(indptr, indices, data, n_rows: int, q_ids, q_weights, mask) -> tuple[Any, Any]:
    """Checks every argument, then device scores (n_rows,) and the device bitset of ``mask``."""
    _check_index(indptr, indices, data, n_rows)
    ids, w = _query(q_ids, q_weights)
    mask = _check_mask(mask, n_rows)
    xp = runtime.current().xp
    scores = spmv_scores_device(*_device_index(indptr, indices, data), n_rows, xp.asarray(ids), xp.asarray(w))
    return scores, _device_mask(mask)


def spmv_scores(indptr, indices, data, n_rows, q_ids, q_weights) -> np.ndarray:
    """CuPy executor of :func:`teleo_server.compute.sparse.spmv_scores` (host in, host out)."""
    scores, _ = _spmv(indptr, indices, data, int(n_rows), q_ids, q_weights, None)
    return runtime.current().to_host(scores)


def spmv_topk(indptr, indices, data, n_rows, q_ids, q_weights, k, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """CuPy executor of :func:`teleo_server.compute.sparse.spmv_topk` (host in, host out)."""
    _check_k(k)
    scores, words = _spmv(indptr, indices, data, int(n_rows), q_ids, q_weights, mask)
    return _host_topk(*topk_device(scores, k, mask=words, floor=0.0))


def _candidates(doc_offsets, candidates) -> np.ndarray:
    """Candidate rows as a flat host array, each checked against the packed store's rows."""
    n_rows = np.shape(doc_offsets)[0] - 1
    cand = np.asarray(candidates).ravel()
    if cand.size and (cand.min() < 0 or cand.max() >= n_rows):
        raise InternalValueError(f"candidate row id outside [0, {n_rows})")
    return cand


def maxsim(query_tokens, doc_offsets, doc_tokens, candidates) -> np.ndarray:
    """CuPy executor of :func:`teleo_server.compute.maxsim.maxsim` (host in, host out).

    float32 ``doc_tokens`` are stored as float16 on the device, which is the layout the kernel
    reads; pass float16 to score exactly what the reference scores.
    """
    q = np.asarray(query_tokens, dtype=np.float32)
    if q.ndim != 2 or doc_tokens.ndim != 2 or q.shape[1] != doc_tokens.shape[1]:
        raise InternalValueError(f"query {q.shape} and doc_tokens {doc_tokens.shape} must be (*, D) alike")
    cand = _candidates(doc_offsets, candidates)
    if cand.size == 0 or q.shape[0] == 0:
        return np.zeros(cand.shape[0], dtype=np.float32)
    xp = runtime.current().xp
    out = maxsim_device(
        xp.asarray(q),
        _upload(doc_offsets, np.int64),
        _upload(doc_tokens, np.float16),
        xp.asarray(cand.astype(np.int32)),
    )
    return runtime.current().to_host(out)


def maxsim_codes(query_tokens, doc_offsets, codes, bits, levels, candidates) -> np.ndarray:
    """Device executor of :func:`teleo_server.compute.maxsim.maxsim_codes` (host in, host out):
    the codes stay on the device and only the candidates' tokens are decoded, in the kernel."""
    q = np.asarray(query_tokens, dtype=np.float32)
    per_byte = 8 // bits if bits in CODE_BITS else 0
    if q.ndim != 2 or codes.ndim != 2 or q.shape[1] != codes.shape[1] * per_byte:
        raise InternalValueError(f"query {q.shape} and {bits}-bit codes {codes.shape} must describe (*, D) alike")
    cand = _candidates(doc_offsets, candidates)
    if cand.size == 0 or q.shape[0] == 0:
        return np.zeros(cand.shape[0], dtype=np.float32)
    rt = runtime.current()
    out = maxsim_codes_device(rt.xp.asarray(q), _upload(doc_offsets, np.int64), _upload(codes, np.uint8), int(bits),
                              rt.xp.asarray(np.asarray(levels, dtype=np.float32)), rt.xp.asarray(cand.astype(np.int32)))
    return rt.to_host(out)


def dense_topk(matrix, query, k, candidates=None, mask=None, *, dim=None) -> tuple[np.ndarray, np.ndarray]:
    """CuPy executor of :func:`teleo_server.compute.dense.dense_topk` (host in, host out)."""
    _check_k(k)
    if matrix.ndim != 2:
        raise InternalValueError(f"matrix must be 2-D, got shape {matrix.shape}")
    n, width = matrix.shape
    check_dense_query(int(np.size(query)), width, dim)
    d = width if dim is None else int(dim)
    mask = _check_mask(mask, n)
    rows = None
    if candidates is not None:
        rows = distinct(np.asarray(candidates, dtype=np.int64))
        if rows.size and (rows[0] < 0 or rows[-1] >= n):
            raise InternalValueError(f"candidate row id outside [0, {n})")
        if mask is not None:
            rows = rows[mask[rows]]
        if rows.size == 0:
            return np.empty(0, np.int32), np.empty(0, np.float32)
    xp = runtime.current().xp
    dtype = np.float32 if matrix.dtype == np.float32 else np.float16
    d_matrix = _upload(matrix, dtype)
    if rows is None:
        scores = dense_scores_device(d_matrix, query, mask=_device_mask(mask), dim=d)
        return _host_topk(*topk_device(scores, k))
    scores = dense_scores_device(d_matrix, query, rows=xp.asarray(rows.astype(np.int32)), dim=d)
    pos, vals = _host_topk(*topk_device(scores, k))
    return rows[pos].astype(np.int32), vals


def topk(scores, k, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """CuPy executor of :func:`teleo_server.compute.topk.topk` (host in, host out)."""
    _check_k(k)
    s = np.asarray(scores, dtype=np.float32)
    if s.ndim != 1:
        raise InternalValueError(f"scores must be 1-D, got shape {s.shape}")
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        if m.shape != s.shape:
            raise InternalValueError(f"mask shape {m.shape} != scores shape {s.shape}")
    xp = runtime.current().xp
    words = None if mask is None else xp.asarray(pack_mask(m))
    return _host_topk(*topk_device(xp.asarray(np.ascontiguousarray(s)), k, mask=words))


def _on(runtime_name: str, fn: Any) -> Any:
    """``fn`` run on one runtime whatever the calling thread's default."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with runtime.use(runtime_name):
            return fn(*args, **kwargs)

    return call


def _ops(backend: str, runtime_name: str) -> Ops:
    fns = (spmv_scores, spmv_topk, maxsim, dense_topk, topk, maxsim_codes)
    return Ops(backend, *(_on(runtime_name, fn) for fn in fns))


@functools.cache
def cupy_ops() -> Ops:
    """The device scorers on a CUDA device, bundled like the NumPy ones."""
    return _ops("cupy", "cuda")


@functools.cache
def emulated_ops() -> Ops:
    """The same scorers with every kernel emulated on the CPU."""
    return _ops("emulated", "emulated")


register("cupy", cupy_ops)
register("emulated", emulated_ops)


__all__ = ["cupy_ops", "dense_topk", "emulated_ops", "maxsim", "maxsim_codes", "spmv_scores", "spmv_topk",
           "topk"]
