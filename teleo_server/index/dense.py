"""Dense vector index over chunk rows: exact below a size threshold, HNSW (hnswlib) above it.

Two thresholds: a search that may return every stored row goes through the graph from
``unfiltered_threshold`` rows, one whose mask leaves some out from ``exact_threshold`` rows (the
graph holds every tenant's rows, and its walk passes through rows the mask removes, so a filtered
search keeps the exact scan longer: its candidates then depend on nothing the caller cannot read).

Vectors are L2-normalised, so inner product is cosine. Matryoshka truncation scans the first
``d`` dimensions of the full rows in place (a strided product) and divides by each row's prefix
norm, kept per configured ``d`` (4 bytes a row, where a re-normalised copy would take ``4 d``);
the prefix scan at 128 of 384 dimensions is about twice the cost of a contiguous copy's and a
third of the full product's. A truncated search over-fetches ``k * oversample`` rows and rescores
them at full dimension; ``calibrate`` measures that procedure's recall against a full-dimension
search and picks the smallest dimension that keeps it above the threshold.

Rows are held as float32 (the exact reference), float16 (the layout a device kernel reads
natively) or int8 with a float32 scale per row (``values="int8"``: a quarter of float32's bytes).
NumPy widens float16 at about 2.6 ns an element, so a host scan of 10,000 float16 rows of 384
dimensions costs ~10 ms where the float32 product costs ~0.8 ms; int8 rows are widened a
cache-sized block at a time and scan at float32's speed, because the scan is bound by the bytes it
reads (``compute.dense.quantized_scores``). An int8 row's values are within half its scale
(``max|x| / 254``) of the float ones, so cosines move by about 1e-3.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import structlog

from teleo_server.compute.dense import dense_scores, quantize_rows, quantized_scores
from teleo_server.index.columns import shrunk

log = structlog.get_logger(__name__)
# rows gathered per block when scoring given rows (256 x 384 float32 = 384 KB, an L2's worth)
GATHER_BLOCK = 256
# Extra rows a device scan fetches beyond k for the rescoring on the host.
DEVICE_MARGIN = 32


ROW_VALUES = ("float32", "float16", "int8")


def row_dtype(name: str) -> np.dtype:
    """The dtype dense rows are held in: one of ``ROW_VALUES``."""
    if name not in ROW_VALUES:
        raise ValueError(f"values must be one of {', '.join(ROW_VALUES)}, got {name}")
    return np.dtype(name)


# the host cost of gathering one row at full dimension (and scaling it back) against reading it in a
# streaming pass: 0.32 against 0.08 us a 384-d int8 row (2,400 of 9,634 SciFact chunk rows)
GATHER_COST = 4.0


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32)


class DenseIndex:
    """Parameters: ``dim`` full dimension; ``truncations`` Matryoshka dims below it."""

    def __init__(self, dim: int, truncations: tuple[int, ...] = (), exact_threshold: int = 50_000,
                 hnsw_m: int = 16, hnsw_ef_construction: int = 200, hnsw_ef_search: int = 256,
                 oversample: int = 4, values: str = "float32", unfiltered_threshold: int | None = None) -> None:
        self.dim = dim
        # the full-dimension rows: float32 (the exact reference), float16 (half the bytes; every
        # host scan widens them first) or int8 codes with a scale per row (a quarter)
        self.values = row_dtype(values)
        self.quantized = self.values == np.dtype(np.int8)
        self._scale = np.zeros(64 if self.quantized else 0, dtype=np.float32)
        self.truncations = tuple(d for d in truncations if d < dim)
        self.exact_threshold = exact_threshold
        self.unfiltered_threshold = exact_threshold if unfiltered_threshold is None else min(unfiltered_threshold,
                                                                                            exact_threshold)
        self._hnsw_params = (hnsw_m, hnsw_ef_construction, hnsw_ef_search)
        self.oversample = oversample
        self._m = np.zeros((64, dim), dtype=self.values)
        # per truncation d: the norm of each row's first d dimensions
        self._pnorm: dict[int, np.ndarray] = {d: np.zeros(64, dtype=np.float32) for d in self.truncations}
        self.n = 0
        self._views: dict[int, np.ndarray] = {}
        # full-dimension scores of every row for the last query vector seen (host backend): the
        # exact search and the candidates' scoring of one retrieval share one pass over the matrix
        self._memo: tuple[bytes, np.ndarray] | None = None
        # how the last search of each thread found its rows (``last_scan``): a search started beside
        # the stages of one retrieval and one of another retrieval never read each other's
        self._scans = threading.local()
        self.alive = np.zeros(64, dtype=bool)
        self.n_alive = 0  # rows not removed
        self._hnsw: Any = None
        self.adaptive_dim = dim
        self.recall_by_dim: dict[int, float] = {}
        self._calibrated_at = 0

    @property
    def matrix(self) -> np.ndarray:
        """The stored rows (n, dim) in ``values``' dtype, host (int8 rows are codes: see
        :meth:`vectors` for float32 rows); rows of removed chunks are still present (masked by
        ``alive``). The same view object is returned until rows are added.
        """
        return self._view(self._m, self.dim)

    @property
    def nbytes(self) -> int:
        """Bytes of the stored rows and prefix norms; unwritten capacity excluded."""
        per_row = self.dim * self.values.itemsize + len(self.truncations) * 4 + (4 if self.quantized else 0)
        return self.n * per_row + self.n

    def vectors(self, rows: np.ndarray | slice) -> np.ndarray:
        """float32 rows (len(rows), dim): copies of the stored rows, int8 ones scaled back."""
        if isinstance(rows, slice):
            got = self._m[: self.n][rows].astype(np.float32)
            return got * self._scale[: self.n][rows, None] if self.quantized else got
        return self._rows(np.asarray(rows, dtype=np.int64))

    def prefix_scores(self, d: int, query_prefix: np.ndarray) -> np.ndarray:
        """Cosine float32 (n,) of every row's first ``d`` dims with a unit ``query_prefix`` (d,)."""
        if self.quantized:
            dots = quantized_scores(self.matrix, self._scale[: self.n], query_prefix, dim=d)
        else:
            dots = dense_scores(self.matrix[:, :d], query_prefix)
        norms = self._pnorm[d][: self.n]
        return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)

    def _view(self, base: np.ndarray, key: int) -> np.ndarray:
        v = self._views.get(key)
        if v is None or v.shape[0] != self.n or v.base is not base:
            v = base[: self.n]
            self._views[key] = v
        return v

    @property
    def last_scan(self) -> tuple[str, int]:
        """How this thread's last search found its rows: ("hnsw" | "exact", the dimension it first
        scanned at), for the dense stage's report."""
        return getattr(self._scans, "last", ("exact", self.dim))

    @last_scan.setter
    def last_scan(self, scan: tuple[str, int]) -> None:
        self._scans.last = scan

    @property
    def uses_hnsw(self) -> bool:
        return self._hnsw is not None

    def searches_graph(self, mask: np.ndarray | None = None) -> bool:
        """Whether :meth:`search` under ``mask`` goes through the HNSW graph (one compiled call that
        runs outside the interpreter lock) rather than an exact scan."""
        return self._graph_for(self._live(mask))

    def _live(self, mask: np.ndarray | None) -> np.ndarray:
        """bool (n,): the rows a search under ``mask`` may return (removed rows never)."""
        return self.alive[: self.n] if mask is None else (mask[: self.n] & self.alive[: self.n])

    def _graph_for(self, live: np.ndarray) -> bool:
        """HNSW past ``unfiltered_threshold`` searchable rows when the search may return every row
        not removed, past ``exact_threshold`` when its mask leaves some out; an exact scan below."""
        if self._hnsw is None:
            return False
        count = int(np.count_nonzero(live))
        return count >= self.exact_threshold or (count >= self.unfiltered_threshold and count == self.n_alive)

    def add(self, vectors: np.ndarray) -> np.ndarray:
        """Append float32 (B, dim) L2-normalised rows; returns their row ids int64 (B,)."""
        vectors = np.asarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        b = vectors.shape[0]
        need = self.n + b
        if need > self._m.shape[0]:
            cap = max(need, 2 * self._m.shape[0])
            self._m = self._grow(self._m, cap)
            self._pnorm = {d: self._grow(t, cap) for d, t in self._pnorm.items()}
            if self.quantized:
                self._scale = self._grow(self._scale, cap)
            alive = np.zeros(cap, dtype=bool)
            alive[: self.n] = self.alive[: self.n]
            self.alive = alive
        rows = np.arange(self.n, need, dtype=np.int64)
        self._memo = None
        if self.quantized:
            self._m[self.n : need], self._scale[self.n : need] = quantize_rows(vectors)
        else:
            self._m[self.n : need] = vectors
        # prefix norms of the rows as held (what a prefix scan multiplies)
        held = self._rows(rows) if self._pnorm else None
        for d, t in self._pnorm.items():
            t[self.n : need] = np.linalg.norm(held[:, :d], axis=1)
        self.alive[self.n : need] = True
        self.n_alive += b
        self.n = need
        if self._hnsw is not None:
            self._hnsw_add(rows)
        elif self.n >= self.unfiltered_threshold:
            self._build_hnsw()
        return rows

    def remove(self, rows: np.ndarray) -> None:
        self._memo = None
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        gone = rows[self.alive[rows]]  # a row removed before (or named twice) is removed once
        self.n_alive -= gone.size
        self.alive[gone] = False
        if self._hnsw is not None:
            for r in gone.tolist():
                self._hnsw.mark_deleted(r)

    def compact(self, keep_rows: np.ndarray) -> None:
        """Keep ``keep_rows`` (sorted old row ids) as rows 0..len-1: the stored rows, their scales
        and prefix norms are carried over as they are (nothing decoded or coded again)."""
        keep_rows = np.asarray(keep_rows, dtype=np.int64)
        n, cap = keep_rows.size, max(64, keep_rows.size)
        self._memo = None
        self._views.clear()
        self._m = self._grow(np.take(self._m, keep_rows, axis=0), cap)
        self._pnorm = {d: self._grow(t[keep_rows], cap) for d, t in self._pnorm.items()}
        if self.quantized:
            self._scale = self._grow(self._scale[keep_rows], cap)
        self.alive = np.zeros(cap, dtype=bool)
        self.alive[:n] = True
        self.n = self.n_alive = n
        self._hnsw = None
        if n >= self.unfiltered_threshold:
            self._build_hnsw()

    def fit(self) -> None:
        """Shrink the buffers to the rows held (after a bulk load: doubling leaves up to half of
        them spare, and a buffer the heap handed out is resident whether written or not); the next
        ``add`` grows them again."""
        cap = max(self.n, 64)
        if self._m.shape[0] > cap:
            self._views.clear()
            self._memo = None
            self._m = shrunk(self._m, cap)
            self._pnorm = {d: shrunk(t, cap) for d, t in self._pnorm.items()}
            self._scale = shrunk(self._scale, cap) if self.quantized else self._scale
            self.alive = shrunk(self.alive, cap)

    @staticmethod
    def _grow(a: np.ndarray, cap: int) -> np.ndarray:
        """``a`` (rows, ...) in a zeroed buffer of ``cap`` rows."""
        g = np.zeros((cap,) + a.shape[1:], dtype=a.dtype)
        g[: a.shape[0]] = a
        return g

    # ---- HNSW ----------------------------------------------------------------------------------
    def _build_hnsw(self) -> None:
        import hnswlib

        m, efc, efs = self._hnsw_params
        index = hnswlib.Index(space="ip", dim=self.dim)
        index.init_index(max_elements=max(2 * self.n, 1024), ef_construction=efc, M=m, random_seed=0)
        index.set_ef(efs)
        index.set_num_threads(1)
        self._hnsw = index
        live = np.flatnonzero(self.alive[: self.n])
        self._hnsw_add(live)
        log.info("dense_hnsw_built", rows=int(live.size), m=m, ef_construction=efc)

    def _hnsw_add(self, rows: np.ndarray) -> None:
        if rows.size == 0:
            return
        need = int(rows.max()) + 1
        if need > self._hnsw.get_max_elements():
            self._hnsw.resize_index(max(2 * need, 1024))
        self._hnsw.add_items(self._rows(rows), rows, num_threads=1)

    # ---- search --------------------------------------------------------------------------------
    def search(self, ops: Any, query: np.ndarray, k: int, mask: np.ndarray | None = None,
               dim: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` rows by inner product with ``query`` among rows where ``mask`` holds.

        Parameters
        ----------
        ops : backend ops namespace providing ``dense_topk``.
        query : float32 (dim,), L2-normalised.
        mask : bool (n,) or None; removed rows are always excluded.
        dim : Matryoshka dimension for the first pass (None/full = exact full dimension); an
            exact pass instead where the prefix pass would cost more (``scan_dim``).

        Returns
        -------
        rows int64 (<=k,), scores float32 (<=k,) at full dimension, best first.
        """
        live = self._live(mask)
        k = min(k, self.n)
        if k <= 0:
            self.last_scan = ("exact", self.dim)
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        query = np.asarray(query, dtype=np.float32)
        if self._graph_for(live):
            try:
                found = self._search_hnsw(query, k, live)
                self.last_scan = ("hnsw", self.dim)
                return found
            except RuntimeError:
                # hnswlib refuses when deletions leave fewer reachable items than asked for
                log.warning("dense_hnsw_fallback_exact", k=k)
        host = ops.name == "numpy" or self.quantized  # int8 rows are a host layout
        dim = self.scan_dim(k, dim, ops.name)
        self.last_scan = ("exact", dim)
        if dim >= self.dim:
            if host:  # the host scan is memoised for the candidates' scoring
                ids, scores = ops.topk(self.full_scores(query), k, mask=live)
                return np.asarray(ids, dtype=np.int64), np.asarray(scores, dtype=np.float32)
            # A device scan sums in its own order (and reads float16 rows as float16): it
            # over-fetches, and the host rescores what it found as the host scan would, so the
            # answer is the host's unless a row moved past the margin.
            ids, _ = ops.dense_topk(self.matrix, query, min(max(2 * k, k + DEVICE_MARGIN), self.n), mask=live)
        else:
            fetch = min(k * self.oversample, self.n)
            if host:
                ids, _ = ops.topk(self.prefix_scores(dim, _normalise(query[:dim])), fetch, mask=live)
            else:  # a device scan re-normalises the prefix in the same pass
                ids, _ = ops.dense_topk(self.matrix, query, fetch, mask=live, dim=dim)
        ids = np.asarray(ids, dtype=np.int64)
        full = self._dots(ids, query)
        order = np.argsort(-full, kind="stable")[:k]
        return ids[order], full[order].astype(np.float32)

    def scan_dim(self, k: int, dim: int | None, ops_name: str) -> int:
        """The dimension an exact search for ``k`` rows first scans at: ``dim`` (a Matryoshka
        prefix, then the fetched rows rescored at full dimension) where that pays, else the full
        one. On the host a prefix pass reads dim / D of every row and then gathers each fetched
        row at full dimension (a random read: ``GATHER_COST`` times a streamed row); past the cost
        of one streaming pass over all the rows that pass is cheaper, exact, and memoised for the
        candidates' scoring that follows."""
        if dim is None or dim >= self.dim or dim not in self._pnorm or self.n == 0:
            return self.dim
        if ops_name == "numpy" or self.quantized:
            fetch = min(k * self.oversample, self.n)
            if dim / self.dim + GATHER_COST * fetch / self.n >= 1:
                return self.dim
        return dim

    def _search_hnsw(self, query: np.ndarray, k: int, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # fetch k first; only when the mask removes too many, widen (the mask keeps at least
        # exact_threshold rows here, so a few doublings always suffice)
        fetch = k
        total = self._hnsw.get_current_count()
        while True:
            fetch = min(fetch, total)
            self._hnsw.set_ef(max(self._hnsw_params[2], fetch))
            labels, dist = self._hnsw.knn_query(query, k=fetch, num_threads=1)
            rows = labels[0].astype(np.int64)
            keep = live[rows]
            if keep.sum() >= k or fetch >= total:
                return rows[keep][:k], (1.0 - dist[0][keep][:k]).astype(np.float32)
            fetch *= 4

    def full_scores(self, query: np.ndarray) -> np.ndarray:
        """Full-dimension inner products float32 (n,) of every row with ``query`` (memoised per query)."""
        query = np.asarray(query, dtype=np.float32)
        got = self._memoised(query)
        if got is None:
            got = (quantized_scores(self.matrix, self._scale[: self.n], query) if self.quantized
                   else dense_scores(self.matrix, query))
            self._memo = (query.tobytes(), got)  # one assignment: a concurrent reader sees a whole pair
        return got

    def _memoised(self, query: np.ndarray) -> np.ndarray | None:
        """Every row's score with ``query`` when they are at hand (the exact search made them)."""
        memo = self._memo
        return memo[1] if memo is not None and memo[1].size == self.n and memo[0] == query.tobytes() else None

    def _rows(self, rows: np.ndarray) -> np.ndarray:
        """float32 copies of ``rows`` (np.take gathers ~3x faster than fancy indexing here, and
        float32 rows are not copied a second time); int8 rows scaled back."""
        got = np.take(self._m, rows, axis=0).astype(np.float32, copy=False)
        if self.quantized:
            got *= np.take(self._scale, rows)[:, None]
        return got

    def score(self, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Full-dimension inner products float32 (len(rows),) of ``rows`` with ``query``."""
        query = np.asarray(query, dtype=np.float32)
        # Gathering rows costs a random read each; past a quarter of the matrix one streaming
        # pass over all of it is cheaper, and it is free when the exact search already made it.
        full = self._memoised(query)
        if full is None and 4 * rows.size > self.n:
            full = self.full_scores(query)
        if full is not None:
            return full[rows]
        return self._dots(rows, query)

    def _dots(self, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Inner products float32 (len(rows),) of the gathered ``rows`` with a float32 ``query``,
        computed as the full scan computes them: int8 codes widened, multiplied, then scaled per row
        (scaling each product rather than every coordinate: 1,100 rows 240 -> 106 us). Gathered
        in blocks that stay in the cache for their product (one pass over the rows rather than a
        copy of all of them written out and read back: 7,500 rows 3.4 -> 2.2 ms)."""
        out = np.empty(rows.size, np.float32)
        for i in range(0, rows.size, GATHER_BLOCK):
            block = rows[i:i + GATHER_BLOCK]
            np.matmul(np.take(self._m, block, axis=0).astype(np.float32, copy=False), query, out=out[i:i + GATHER_BLOCK])
        if self.quantized:
            out *= np.take(self._scale, rows)
        return out

    # ---- Matryoshka calibration ------------------------------------------------------------------
    def calibrate(self, ops: Any, threshold: float, k: int = 10, n_queries: int = 64, seed: int = 0) -> int:
        """Pick the smallest truncation whose search recall@k vs full dimension is >= threshold.

        Stored vectors serve as pseudo-queries (seeded sample). Returns the chosen dimension and
        records ``recall_by_dim``.
        """
        self._calibrated_at = self.n
        live = np.flatnonzero(self.alive[: self.n])
        if not self.truncations or live.size < 2 * k:
            self.adaptive_dim = self.dim
            return self.dim
        rng = np.random.default_rng(seed)
        queries = rng.choice(live, size=min(n_queries, live.size), replace=False)
        mask = self.alive[: self.n].copy()
        probes = self._rows(np.asarray(queries, dtype=np.int64))
        truth = [set(self.search(ops, v, k + 1, mask)[0].tolist()) - {int(q)} for q, v in zip(queries, probes)]
        chosen = self.dim
        self.recall_by_dim = {}
        for d in self.truncations:
            hits = total = 0
            for q, v, t in zip(queries, probes, truth):
                got = set(self.search(ops, v, k + 1, mask, dim=d)[0].tolist()) - {int(q)}
                hits += len(got & t)
                total += len(t)
            recall = hits / max(total, 1)
            self.recall_by_dim[d] = recall
            if recall >= threshold and d < chosen:
                chosen = d
        self.adaptive_dim = chosen
        log.info("dense_dimension_calibrated", rows=int(live.size), chosen=chosen,
                 recall={str(d): round(r, 4) for d, r in self.recall_by_dim.items()})
        return chosen

    def needs_calibration(self) -> bool:
        # HNSW searches at full dimension; truncation only serves the exact path
        return bool(self.truncations) and self._hnsw is None and self.n >= 2 * max(self._calibrated_at, 500)


__all__ = ["ROW_VALUES", "DenseIndex", "row_dtype"]
