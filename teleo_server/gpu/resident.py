"""Indexes that live on the device and grow in place, so a query moves only itself and its top-k.

* :class:`DeviceExecutor` — one worker thread that owns a CUDA stream; every device call of the
  service runs there, off the event loop, in submission order.
* :class:`LiveRows` — the tombstone bitset shared by every space: deleting a row clears its bit
  (host copy is the truth; only the touched words are re-uploaded).
* :class:`ResidentSparseIndex` — term-major CSC postings as a base segment plus appended
  segments; a query scores every segment into one buffer, ``compact()`` merges them on device;
  the values are scores' weights (SPLADE) or raw term frequencies weighed in the kernel (BM25).
* :class:`ResidentTokenStore` — packed CSR late-interaction tokens, fp16 or the host store's
  scalar codes, capacity doubling.
* :class:`ResidentDenseMatrix` — fp16 (N, D) rows, capacity doubling, exact scan + top-k.

Every method must run on the executor thread (or one thread of the caller's choosing); none of
them lock.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Callable

import numpy as np

from teleo_server.compute.errors import InternalValueError
from teleo_server.compute.maxsim import CODE_BITS
from teleo_server.compute.sets import distinct
from teleo_server.compute.sparse import check_query
from teleo_server.gpu import runtime
from teleo_server.gpu._checks import pack_mask
from teleo_server.gpu.dense import batch_size, dense_scores_batch_device, dense_scores_device
from teleo_server.gpu.maxsim import maxsim_codes_device, maxsim_device
from teleo_server.gpu.spmv import bm25_accumulate, spmv_accumulate
from teleo_server.gpu.topk import topk_device


class DeviceExecutor:
    """A single worker thread bound to one runtime; on a CUDA device its current stream is its
    own non-blocking stream."""

    def __init__(self, device_id: int = 0, runtime_name: str = "cuda") -> None:
        self._device_id = device_id
        self._runtime_name = runtime_name
        self._stream: Any = None
        self._ready = threading.Event()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="teleo-gpu", initializer=self._init_thread
        )
        self._pool.submit(lambda: None).result()

    def _init_thread(self) -> None:
        self._stream = runtime.bind(self._runtime_name).bind_thread(self._device_id)
        self._ready.set()

    @property
    def stream(self) -> Any:
        return self._stream

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        return self._pool.submit(fn, *args, **kwargs)

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run on the device thread and wait for the result."""
        return self.submit(fn, *args, **kwargs).result()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


def _grow(xp: Any, buf: Any, need: int, fill: Any = 0) -> Any:
    """``buf`` with capacity >= need along axis 0 (doubling), contents kept."""
    if buf.shape[0] >= need:
        return buf
    cap = max(need, 2 * buf.shape[0], 1024)
    new = xp.full((cap,) + buf.shape[1:], fill, dtype=buf.dtype)
    new[: buf.shape[0]] = buf
    return new


def _host_topk(rt: runtime.Runtime, ids: Any, scores: Any, count: Any) -> tuple[np.ndarray, np.ndarray]:
    n = int(count)
    return rt.to_host(ids[:n]), rt.to_host(scores[:n])


class LiveRows:
    """Which row ids exist: appended rows are live, deleted rows are tombstoned."""

    def __init__(self) -> None:
        self._rt = runtime.current()
        xp = self._rt.xp
        self.n_rows = 0
        self._host = np.zeros(0, dtype=bool)
        self._words = xp.zeros(0, dtype=xp.uint32)

    def append(self, count: int) -> np.ndarray:
        """Make ``count`` new live rows; returns their ids (int64, ascending)."""
        xp = self._rt.xp
        first = self.n_rows
        self.n_rows += count
        if self._host.shape[0] < self.n_rows:
            cap = max(self.n_rows, 2 * self._host.shape[0], 1024)
            host = np.zeros(-(-cap // 32) * 32, dtype=bool)  # whole bitset words
            host[:first] = self._host[:first]
            self._host = host
        self._host[first : self.n_rows] = True
        lo, hi = first // 32, (self.n_rows + 31) // 32
        self._words = _grow(xp, self._words, (self._host.shape[0] + 31) // 32)
        self._words[lo:hi] = xp.asarray(pack_mask(self._host[lo * 32 : hi * 32]))
        return np.arange(first, self.n_rows, dtype=np.int64)

    def delete(self, rows: np.ndarray) -> None:
        """Tombstone rows; only their bitset words cross the bus."""
        xp = self._rt.xp
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            return
        if rows.min() < 0 or rows.max() >= self.n_rows:
            raise InternalValueError(f"row id outside [0, {self.n_rows})")
        self._host[rows] = False
        touched = distinct(rows // 32)
        packed = pack_mask(self._host[: ((self.n_rows + 31) // 32) * 32])
        self._words[xp.asarray(touched)] = xp.asarray(packed[touched])

    @property
    def nbytes(self) -> int:
        """Device bytes of the live bitset (its rows' words)."""
        return 4 * ((self.n_rows + 31) // 32)

    def words(self) -> Any:
        """device array uint32 (ceil(n_rows / 32),), device: the live bitset."""
        return self._words[: (self.n_rows + 31) // 32]

    def host_mask(self) -> np.ndarray:
        return self._host[: self.n_rows].copy()

    def alive(self, rows: np.ndarray) -> np.ndarray:
        """Host bool (len(rows),): whether each of ``rows`` (each in [0, n_rows)) is live, read
        without copying the whole mask."""
        return self._host[np.asarray(rows, dtype=np.int64)]

    def device_mask(self) -> Any:
        """device array bool (n_rows,), device: the live rows, unpacked from the bitset there."""
        xp = self._rt.xp
        at = xp.arange(self.n_rows, dtype=xp.int64)
        return ((self.words()[at >> 5] >> (at & 31).astype(xp.uint32)) & 1).astype(bool)


class ResidentSparseIndex:
    """Term-major CSC postings on the device, appended to in segments.

    Past ``max_segments`` segments the newer ones are merged into one, leaving the first (the
    base, which holds most postings) as it is; only once they hold ``merge_fraction`` of the base's
    postings is everything merged into a new base. A write then costs a sort of the postings
    written since the last full merge, not of the whole index.
    """

    def __init__(self, vocab: int, live: LiveRows, *, max_segments: int = 8, merge_fraction: float = 0.1) -> None:
        self._rt = runtime.current()
        self.vocab = int(vocab)
        self.live = live
        self.max_segments = max_segments
        self.merge_fraction = merge_fraction
        self.segments: list[tuple[Any, Any, Any]] = []

    @property
    def nbytes(self) -> int:
        """Device bytes of every segment's offsets, row ids and values."""
        return sum(int(a.nbytes) for seg in self.segments for a in seg)

    def append(self, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray) -> None:
        """Add postings of new rows: a CSC over this vocabulary with global row ids.

        Parameters
        ----------
        indptr : np.ndarray int64, shape (V+1,), host; terms past a segment's V have no postings in it
        indices : np.ndarray int32, shape (nnz,), host; ids of rows already made live
        data : np.ndarray float32, shape (nnz,), host; or int8 codes, kept as such (a coded
            index: every segment's values are codes, and its scores are multiplied by each row's
            step by the caller)
        """
        xp = self._rt.xp
        indptr = np.asarray(indptr, dtype=np.int64)
        if indptr.ndim != 1 or indptr.size < 1 or int(indptr[-1]) != len(indices) or len(indices) != len(data):
            raise InternalValueError("segment must be a CSC: indptr (V+1,), indices and data (nnz,)")
        self.vocab = max(self.vocab, indptr.size - 1)  # a segment may cover fewer terms (a growing vocabulary)
        if len(indices) and (int(np.min(indices)) < 0 or int(np.max(indices)) >= self.live.n_rows):
            raise InternalValueError(f"posting row id outside [0, {self.live.n_rows})")
        values = xp.int8 if np.asarray(data).dtype == np.int8 else xp.float32  # codes stay a byte each
        self.segments.append(
            (xp.array(indptr), xp.array(indices, dtype=xp.int32), xp.array(data, dtype=values))
        )
        if len(self.segments) > self.max_segments:
            base, newer = self.segments[0][1].shape[0], sum(seg[1].shape[0] for seg in self.segments[1:])
            if newer >= self.merge_fraction * base:
                self.compact()
            else:
                self.segments = [self.segments[0], self._merged(self.segments[1:])]

    def compact(self) -> None:
        """Merge every segment into one CSC on the device (sort by term, then row)."""
        if len(self.segments) > 1:
            self.segments = [self._merged(self.segments)]

    def _merged(self, segments: list[tuple[Any, Any, Any]]) -> tuple[Any, Any, Any]:
        """One CSC on the device holding every posting of ``segments``."""
        xp = self._rt.xp
        terms, rows, vals = [], [], []
        for indptr, indices, data in segments:
            nnz = indices.shape[0]
            pos = xp.arange(nnz, dtype=xp.int64)
            terms.append(xp.searchsorted(indptr, pos, side="right") - 1)
            rows.append(indices)
            vals.append(data)
        term = xp.concatenate(terms)
        row = xp.concatenate(rows)
        order = xp.argsort((term << 32) | row.astype(xp.int64))
        counts = xp.bincount(term, minlength=self.vocab)
        indptr = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(counts).astype(xp.int64)])
        return indptr, row[order], xp.concatenate(vals)[order]

    def scores(self, q_ids: Any, q_weights: Any) -> Any:
        """device array float32 (n_rows,), device: summed over every segment."""
        xp = self._rt.xp
        scores = xp.zeros(self.live.n_rows, dtype=xp.float64)
        for indptr, indices, data in self.segments:
            spmv_accumulate(indptr, indices, data, q_ids, q_weights, scores)
        return scores.astype(xp.float32)  # rounded once, after every segment: the reference's bits

    def postings_count(self, q_ids: np.ndarray) -> int:
        """How many postings the query terms hold over every segment (an upper bound of the rows
        they reach, tombstoned rows included), read off the segments' offsets: one transfer."""
        xp = self._rt.xp
        ids = np.asarray(q_ids, dtype=np.int64).ravel()
        total = xp.zeros(1, dtype=xp.int64)
        for indptr, _, _ in self.segments:
            inside = ids[(ids >= 0) & (ids < indptr.shape[0] - 1)]
            if inside.size:
                at = xp.asarray(inside)
                total += (indptr[at + 1] - indptr[at]).sum()
        return int(self._rt.to_host(total)[0])

    def bm25_scores(self, q_ids: Any, q_weights: Any, doc_len: Any, k1: float, b: float, avgdl: float) -> Any:
        """device array float32 (n_rows,), device: BM25 with the segments' values read as raw term
        frequencies, weighed in the kernel with ``doc_len`` (device float32, each row's length) and
        ``avgdl`` (see :func:`teleo_server.gpu.spmv.bm25_accumulate`)."""
        xp = self._rt.xp
        scores = xp.zeros(self.live.n_rows, dtype=xp.float64)
        for indptr, indices, data in self.segments:
            bm25_accumulate(indptr, indices, data, doc_len, k1, b, avgdl, q_ids, q_weights, scores)
        return scores.astype(xp.float32)

    def search(self, q_ids: np.ndarray, q_weights: np.ndarray, k: int, mask: np.ndarray | None = None,
               scorer: Callable[[Any, Any], Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Best ``k`` live rows (score > 0), host int32 ids and float32 scores, best first;
        ``scorer(q_ids, q_weights)`` (device arrays) gives every row's scores (default: :meth:`scores`)."""
        xp = self._rt.xp
        q_ids = np.asarray(q_ids, dtype=np.int32).ravel()
        q_weights = np.asarray(q_weights, dtype=np.float32).ravel()
        check_query(q_ids, q_weights)
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            if mask.shape != (self.live.n_rows,):
                raise InternalValueError(f"mask shape {mask.shape} != ({self.live.n_rows},)")
        scores = (scorer or self.scores)(xp.asarray(q_ids), xp.asarray(q_weights))
        words = self.live.words()
        if mask is not None:
            words = words & xp.asarray(pack_mask(mask))
        return _host_topk(self._rt, *topk_device(scores, k, mask=words, floor=0.0))


class ResidentTokenStore:
    """Late-interaction tokens of every row, packed CSR, on the device: float16 vectors (``bits``
    16), or ``bits``-bit scalar codes packed into bytes with their ``levels`` (the host token store's
    form, decoded in the kernel for the candidates only)."""

    def __init__(self, dim: int, live: LiveRows, *, bits: int = 16, levels: np.ndarray | None = None) -> None:
        self._rt = runtime.current()
        xp = self._rt.xp
        self.dim = int(dim)
        self.live = live
        self.bits = int(bits)
        if self.bits == 16:
            self.width, dtype, self._levels = self.dim, xp.float16, None
        else:
            if self.bits not in CODE_BITS or (self.dim * self.bits) % 8:
                raise InternalValueError(f"{bits}-bit codes cannot hold {dim} dimensions in whole bytes")
            if levels is None or np.shape(levels) != (1 << self.bits,):
                raise InternalValueError(f"{bits}-bit codes need {1 << self.bits} levels")
            self.width, dtype = self.dim * self.bits // 8, xp.uint8
            self._levels = xp.asarray(np.asarray(levels, dtype=np.float32))
        self.n_tokens = 0
        self._tokens = xp.zeros((0, self.width), dtype=dtype)
        self._offsets = xp.zeros(1, dtype=xp.int64)
        self._rows = 0

    @property
    def nbytes(self) -> int:
        """Device bytes the stored tokens and offsets take (capacity not yet used excluded)."""
        return self.n_tokens * self.width * self._tokens.dtype.itemsize + 8 * (self._rows + 1)

    def append(self, lengths: np.ndarray, tokens: np.ndarray) -> None:
        """Tokens of the next ``len(lengths)`` rows (which must already be live), in row order.

        Parameters
        ----------
        lengths : np.ndarray int, shape (R,), host; tokens per row, 0 allowed
        tokens : np.ndarray, shape (sum(lengths), width), host: float16 vectors, or uint8 codes
        """
        xp = self._rt.xp
        lengths = np.asarray(lengths, dtype=np.int64)
        if tokens.shape != (int(lengths.sum()), self.width):
            raise InternalValueError(f"tokens must be ({int(lengths.sum())}, {self.width}), got {tokens.shape}")
        if self._rows + len(lengths) > self.live.n_rows:
            raise InternalValueError("append the rows to LiveRows first")
        self._tokens = _grow(xp, self._tokens, self.n_tokens + tokens.shape[0])
        self._tokens[self.n_tokens : self.n_tokens + tokens.shape[0]] = xp.asarray(tokens, dtype=self._tokens.dtype)
        self._offsets = _grow(xp, self._offsets, self._rows + len(lengths) + 1)
        new = self.n_tokens + np.cumsum(lengths)
        self._offsets[self._rows + 1 : self._rows + 1 + len(lengths)] = xp.asarray(new)
        self.n_tokens += tokens.shape[0]
        self._rows += len(lengths)

    def maxsim(self, query_tokens: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """Host float32 (C,) MaxSim scores of candidate rows (tombstoned rows score NaN); the query
        float (Q, dim), in the stored tokens' space."""
        xp = self._rt.xp
        cand = np.asarray(candidates, dtype=np.int32)
        if cand.size and (cand.min() < 0 or cand.max() >= self._rows):
            raise InternalValueError(f"candidate row id outside [0, {self._rows})")
        q = xp.asarray(np.asarray(query_tokens, dtype=np.float32))
        offsets, stored = self._offsets[: self._rows + 1], self._tokens[: self.n_tokens]
        if self._levels is None:
            out = maxsim_device(q, offsets, stored, xp.asarray(cand))
        else:
            out = maxsim_codes_device(q, offsets, stored, self.bits, self._levels, xp.asarray(cand))
        out = self._rt.to_host(out)
        out[~self.live.alive(cand)] = np.nan
        return out


class ResidentDenseMatrix:
    """L2-normalised fp16 rows on the device, appended in place."""

    def __init__(self, dim: int, live: LiveRows) -> None:
        self._rt = runtime.current()
        xp = self._rt.xp
        self.dim = int(dim)
        self.live = live
        self._rows = 0
        self._matrix = xp.zeros((0, self.dim), dtype=xp.float16)

    def append(self, rows: np.ndarray) -> None:
        """Append (R, dim) vectors for the next R live rows."""
        xp = self._rt.xp
        if rows.ndim != 2 or rows.shape[1] != self.dim:
            raise InternalValueError(f"rows must be (R, {self.dim}), got {rows.shape}")
        if self._rows + rows.shape[0] > self.live.n_rows:
            raise InternalValueError("append the rows to LiveRows first")
        self._matrix = _grow(xp, self._matrix, self._rows + rows.shape[0])
        self._matrix[self._rows : self._rows + rows.shape[0]] = xp.asarray(rows, dtype=xp.float16)
        self._rows += rows.shape[0]

    @property
    def nbytes(self) -> int:
        """Device bytes of the rows held (capacity not yet used excluded)."""
        return self._rows * self.dim * self._matrix.dtype.itemsize

    @property
    def matrix(self) -> Any:
        """device array float16 (n_rows, dim), device: a view of the live prefix of the buffer."""
        return self._matrix[: self._rows]

    def scores(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Host float32 (len(rows),): the inner product of ``query`` with each of ``rows`` (any
        order, repeats allowed, each in [0, n_rows)), read from the device rows."""
        xp = self._rt.xp
        rows = np.asarray(rows, dtype=np.int64).ravel()
        if rows.size and (rows.min() < 0 or rows.max() >= self._rows):
            raise InternalValueError(f"row id outside [0, {self._rows})")
        if rows.size == 0:
            return np.zeros(0, np.float32)
        each, at = np.unique(rows, return_inverse=True)  # the kernel reads ascending rows
        out = dense_scores_device(self.matrix, query, rows=xp.asarray(each.astype(np.int32)))
        return self._rt.to_host(out)[at].astype(np.float32)

    def search(self, query: np.ndarray, k: int, *, candidates: np.ndarray | None = None,
               admitted: np.ndarray | None = None, dim: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Best ``k`` live rows by inner product (prefix ``dim`` re-normalised), host arrays: among
        every live row, the rows of host bool ``admitted`` (n_rows,: live rows only, as the caller
        filters them; sent as a bitset, n / 8 bytes, which the kernel reads before it reads a row),
        or the ``candidates`` row ids (a few: a Matryoshka first pass's, rescored)."""
        xp = self._rt.xp
        if candidates is None:
            scores = dense_scores_device(self.matrix, query, mask=self._words(admitted), dim=dim)
            return _host_topk(self._rt, *topk_device(scores, k))
        rows = distinct(np.asarray(candidates, dtype=np.int64))
        rows = rows[(rows >= 0) & (rows < self._rows)]
        rows = rows[self.live.alive(rows)]
        scores = dense_scores_device(self.matrix, query, rows=xp.asarray(rows.astype(np.int32)), dim=dim)
        pos, vals = _host_topk(self._rt, *topk_device(scores, k))
        return rows[pos].astype(np.int32), vals

    def _words(self, admitted: np.ndarray | None) -> Any:
        """The device row bitset of host bool ``admitted`` (live rows only), or of every live row."""
        if admitted is None:
            return self.live.words()[: (self._rows + 31) // 32]
        return self._rt.xp.asarray(pack_mask(admitted[: self._rows]))

    def search_many(self, queries: np.ndarray, k: int, admitted: list[np.ndarray | None],
                    dim: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`search` of each of ``queries`` (B, dim) under its own admitted rows (host bool
        (n_rows,) of live rows, None: every live row), the matrix read once per ``batch_size(dim)`` queries
        (``dense_scores_batch_device``); the same rows and scores as one search each."""
        xp = self._rt.xp
        d = self.dim if dim is None else int(dim)
        step = batch_size(d)
        if step == 0 or self._rows == 0:
            return [self.search(q, k, admitted=a, dim=dim) for q, a in zip(queries, admitted)]
        out: list[tuple[np.ndarray, np.ndarray]] = []
        for lo in range(0, len(queries), step):
            part = admitted[lo:lo + step]
            words = xp.stack([self._words(a) for a in part])
            scores = dense_scores_batch_device(self.matrix, np.asarray(queries[lo:lo + step], np.float32),
                                               masks=words, dim=dim)
            out.extend(_host_topk(self._rt, *topk_device(scores[b], k)) for b in range(len(part)))
        return out


__all__ = ["DeviceExecutor", "LiveRows", "ResidentDenseMatrix", "ResidentSparseIndex", "ResidentTokenStore"]
