"""GPU-resident index backends behind :class:`teleo_server.index.base.VectorIndex`.

Imported by the backend registry; each registers itself by name and is held to the same
conformance suite as the in-process indexes (``tests/test_index_conformance.py``): on a CUDA
device when there is one, and everywhere under the CPU emulation of the kernels
(``runtime="emulated"``). Importing this module never imports CuPy; making a resident backend
without CuPy and a device raises ``Unavailable`` saying what to install.

* ``dense.resident`` — fp16 rows on the device, exact scan (``ResidentDenseMatrix``);
* ``dense.cagra``    — cuVS CAGRA graph, filtered in-graph by a bitset (approximate);
* ``sparse.resident`` — CSC postings on the device in segments, SpMV (``ResidentSparseIndex``);
* ``bm25.resident`` — raw term frequencies and row lengths on the device, BM25 weighed in the
  kernel with the live rows' average length;
* ``tokens.resident`` — packed per-token vectors on the device (float16, or a token codec's
  codes), fused MaxSim.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from teleo_server.compute.backend import INSTALL_HINT
from teleo_server.compute.errors import InternalValueError
from teleo_server.errors import Unavailable
from teleo_server.gpu import runtime
from teleo_server.gpu.cagra import CagraIndex, CagraParams, cagra_available, searches_exactly
from teleo_server.gpu.resident import LiveRows, ResidentDenseMatrix, ResidentSparseIndex, ResidentTokenStore
from teleo_server.heads import CodecSpec, SparseCodes, SparseVector, TokenCodes
from teleo_server.index.base import DenseQuery, RowFilter, SparseQuery, TokenQuery, register_backend
from teleo_server.index.backends import RowLengths
from teleo_server.index.columns import Column
from teleo_server.index.tokens import RAW_BITS, TokenCodec


# a Matryoshka first pass fetches this many times the rows asked for, rescored at full width (as
# the built-in index's ``matryoshka_oversample``)
FIRST_PASS_OVERSAMPLE = 4


def _admitted(live: LiveRows, filter: RowFilter | None) -> np.ndarray:
    mask = live.host_mask()
    return mask if filter is None else mask & filter.bits(mask.size)


def _missing(name: str) -> str | None:
    """Why runtime ``name`` cannot run here (what to install), or None when it can."""
    ok, why = runtime.get(name).status()
    if ok:
        return None
    hint = INSTALL_HINT if name == "cuda" else "install a C++ compiler"
    return f"a GPU-resident index needs the {name} runtime, but {why}; {hint}"


def _cagra_missing(name: str) -> str | None:
    if name != "cuda":
        return f"CAGRA (cuVS) runs on a CUDA device only, not on the {name} runtime"
    return _missing(name) or (None if cagra_available() else "CAGRA needs cuVS; install the GPU extra")


def _runtime(name: str) -> str:
    """``name`` if that runtime can run here, else Unavailable naming what is missing."""
    why = _missing(name)
    if why is not None:
        raise Unavailable(why)
    return name


def _on_runtime(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a backend method with its own runtime current (device arrays never mix runtimes)."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        with runtime.use(self.runtime):
            return method(self, *args, **kwargs)

    return call


class ResidentDenseBackend:
    kind, exact = "dense", True

    def __init__(self, dim: int, ops: Any = None, runtime: str = "cuda") -> None:
        self.runtime = _runtime(runtime)
        self.live, self.matrix = self._make(dim)

    @_on_runtime
    def _make(self, dim: int) -> tuple[LiveRows, ResidentDenseMatrix]:
        live = LiveRows()
        return live, ResidentDenseMatrix(dim, live)

    @property
    def n(self) -> int:
        return self.live.n_rows

    @property
    def device_bytes(self) -> int:
        """Device memory its rows take (capacity not yet used excluded)."""
        return self.matrix.nbytes + self.live.nbytes

    @_on_runtime
    def add(self, vectors: list[Any]) -> np.ndarray:
        rows = np.asarray(vectors, dtype=np.float32).reshape(-1, self.matrix.dim)
        ids = self.live.append(rows.shape[0])
        self.matrix.append(rows)
        return ids

    @_on_runtime
    def remove(self, rows: np.ndarray) -> None:
        self.live.delete(rows)

    @_on_runtime
    def search(self, query: DenseQuery, k: int, filter: RowFilter | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact top ``k`` at full width; with ``query.dim``, a first pass over that prefix fetches
        ``FIRST_PASS_OVERSAMPLE`` times as many, rescored at full width (the built-in index's
        Matryoshka search)."""
        admitted = None if filter is None else _admitted(self.live, filter)
        if query.dim and query.dim < self.matrix.dim:  # the first pass narrows the candidates
            first, _ = self.matrix.search(query.vector, k * FIRST_PASS_OVERSAMPLE, admitted=admitted, dim=query.dim)
            ids, scores = self.matrix.search(query.vector, k, candidates=np.asarray(first, np.int64))
        else:
            ids, scores = self.matrix.search(query.vector, k, admitted=admitted)
        return np.asarray(ids, dtype=np.int64), np.asarray(scores, dtype=np.float32)

    @_on_runtime
    def search_many(self, queries: list[DenseQuery], k: int,
                    filters: list[RowFilter | None]) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`search` of several queries at once: those of one width (full, or one Matryoshka
        prefix) are scanned in one launch per ``gpu.dense.batch_size`` of them, the matrix read
        once for all (the first pass of a prefix, whose candidates are rescored one query at a
        time); the same rows and scores as one search each."""
        out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(queries)
        by_dim: dict[int | None, list[int]] = {}
        for i, q in enumerate(queries):
            by_dim.setdefault(q.dim if q.dim and q.dim < self.matrix.dim else None, []).append(i)
        alive = self.live.host_mask() if any(f is not None for f in filters) else None
        for dim, at in by_dim.items():  # each filter's live rows, as _admitted gives them
            admitted = [None if filters[i] is None else alive & filters[i].bits(alive.size) for i in at]
            fetch = k if dim is None else k * FIRST_PASS_OVERSAMPLE
            found = self.matrix.search_many(np.stack([np.asarray(queries[i].vector, np.float32) for i in at]), fetch,
                                            admitted, dim=dim)
            for i, (ids, scores) in zip(at, found):
                if dim is not None:  # rescored at full width, as search does
                    ids, scores = self.matrix.search(queries[i].vector, k, candidates=np.asarray(ids, np.int64))
                out[i] = (np.asarray(ids, dtype=np.int64), np.asarray(scores, dtype=np.float32))
        return out  # type: ignore[return-value] - every query's slot is filled above

    @_on_runtime
    def score(self, ids: np.ndarray, query: DenseQuery) -> np.ndarray:
        """Scores of the device rows (fp16, as a search reads them): the host keeps no copy."""
        ids = np.asarray(ids, dtype=np.int64)
        out = self.matrix.scores(np.asarray(query.vector, np.float32), ids)
        out[~self.live.alive(ids)] = np.nan
        return out


class CagraBackend(ResidentDenseBackend):
    """CAGRA over the same rows; the graph is (re)built or extended lazily before a search. A
    filter that admits at most ``params.exact_below`` of the rows (removed ones count as filtered
    out) is searched by the exact scan over the admitted rows instead (see ``searches_exactly``)."""

    exact = False

    def __init__(self, dim: int, ops: Any = None, params: CagraParams | None = None, runtime: str = "cuda") -> None:
        if runtime != "cuda":
            raise Unavailable(f"CAGRA (cuVS) runs on a CUDA device only, not on the {runtime} runtime")
        super().__init__(dim, ops, runtime)
        self.params = params or CagraParams()
        self._graph: CagraIndex | None = None

    @_on_runtime
    def search(self, query: DenseQuery, k: int, filter: RowFilter | None = None) -> tuple[np.ndarray, np.ndarray]:
        if self.n == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        admitted = _admitted(self.live, filter)
        if searches_exactly(int(admitted.sum()), self.n, self.params):
            return super().search(query, k, filter)
        if self._graph is None:  # built and extended from the device rows
            self._graph = CagraIndex.build(self.matrix.matrix, self.params)
        elif len(self._graph) < self.n:
            self._graph.extend(self.matrix.matrix[len(self._graph):])
        ids, scores = self._graph.search(query.vector, k, mask=admitted)
        return np.asarray(ids, dtype=np.int64), np.asarray(scores, dtype=np.float32)

    # one search each (the graph, or the exact scan under a heavy filter), not the batched exact
    # scan of the resident rows: index.base.search_many then asks search for each query
    search_many = None  # type: ignore[assignment]


def _segment(vectors: list[Any], first: int, coded: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Rows ``first``, ``first + 1``, ... holding ``vectors`` as one term-major CSC segment over the
    terms they hold (not the whole vocabulary: a write's offsets are few): indptr int64, row ids
    int32, values float32 (``coded``: the vectors' int8 codes); None when they hold no term."""
    terms = np.concatenate([np.asarray(v.ids, np.int64) for v in vectors] or [np.zeros(0, np.int64)])
    if not terms.size:
        return None
    rows = np.repeat(np.arange(first, first + len(vectors), dtype=np.int64), [v.size for v in vectors])
    if coded:
        vals = np.concatenate([np.asarray(v.codes, np.int8) for v in vectors if v.size])
    else:
        vals = np.concatenate([np.asarray(v.weights, np.float32) for v in vectors])
    order = np.lexsort((rows, terms))
    indptr = np.zeros(int(terms.max()) + 2, dtype=np.int64)
    np.cumsum(np.bincount(terms, minlength=indptr.size - 1), out=indptr[1:])
    return indptr, rows[order].astype(np.int32), vals[order]


class ResidentSparseBackend:
    """Sparse vectors as CSC segments on the device (``ResidentSparseIndex``), scored by SpMV; the
    rows a query reaches are picked out on the device, so only they cross the bus."""

    kind, exact = "sparse", True

    def __init__(self, ops: Any = None, vocab: int = 30522, runtime: str = "cuda", **_: Any) -> None:
        self.runtime = _runtime(runtime)
        self.live, self.index = self._make(vocab)
        self._coded: bool | None = None  # rows as int8 codes and a step a row (see _coding)
        self._steps: Any = None  # each row's step on the device, for coded rows

    @_on_runtime
    def _make(self, vocab: int) -> tuple[LiveRows, ResidentSparseIndex]:
        live = LiveRows()
        return live, ResidentSparseIndex(vocab, live)

    @property
    def n(self) -> int:
        return self.live.n_rows

    @property
    def device_bytes(self) -> int:
        steps = 4 * self.n if self._coded else 0
        return self.index.nbytes + self.live.nbytes + steps

    def _scorer(self) -> Callable[[Any, Any], Any]:
        """(device term ids, device weights) -> device float32 scores of every row (a coded
        index's sums times each row's step, in float32, as the host index scores its codes)."""
        if not self._coded:
            return self.index.scores
        return lambda ids, w: self.index.scores(ids, w) * self._steps[: self.n]

    def _coding(self, vectors: list[Any]) -> bool:
        """Whether these rows come as int8 codes (``SparseCodes``: the SPLADE index's, by default),
        which the backend then keeps with a step a row; fixed by the first rows holding terms.
        Rows without terms say nothing."""
        kinds = {isinstance(v, SparseCodes) for v in vectors if v.size}
        if len(kinds) > 1 or (self._coded is not None and kinds and kinds != {self._coded}):
            raise InternalValueError("a sparse backend takes either int8-coded rows or float rows, not both")
        if self._coded is None and kinds:
            self._coded = kinds.pop()
            if self._coded:
                self._steps = runtime.current().xp.zeros(self.n, dtype=np.float32)
        return bool(self._coded)

    def _device_scores(self, query: SparseQuery) -> Any:
        rt = runtime.current()
        return self._scorer()(rt.xp.asarray(np.asarray(query.ids, np.int32)),
                              rt.xp.asarray(np.asarray(query.weights, np.float32)))

    @_on_runtime
    def add(self, vectors: list[SparseVector]) -> np.ndarray:
        coded = self._coding(vectors)
        first = self.n
        ids = self.live.append(len(vectors))
        segment = _segment(vectors, int(ids[0]), coded) if ids.size else None
        if segment is not None:
            self.index.append(*segment)
        if coded:
            xp = runtime.current().xp
            self._steps = _grow_vector(xp, self._steps, self.n)
            self._steps[first:self.n] = xp.asarray(
                np.array([v.step if isinstance(v, SparseCodes) else 0.0 for v in vectors], np.float32))
        return ids

    @_on_runtime
    def remove(self, rows: np.ndarray) -> None:
        self.live.delete(rows)

    @_on_runtime
    def search(self, query: SparseQuery, k: int, filter: RowFilter | None = None) -> tuple[np.ndarray, np.ndarray]:
        mask = None if filter is None else filter.bits(self.n)
        ids, scores = self.index.search(query.ids, query.weights, k, mask=mask, scorer=self._scorer())
        return np.asarray(ids, dtype=np.int64), np.asarray(scores, dtype=np.float32)

    @_on_runtime
    def device_scores(self, query: SparseQuery) -> Any:
        """Every row's score as a device float32 (n,) array, 0 where removed or not reached: what
        ``every_score`` gives, left on the device (sparse recall blends it there:
        :mod:`teleo_server.gpu.recall`)."""
        xp = runtime.current().xp
        s = self._device_scores(query)
        return xp.where((s > 0) & self.live.device_mask(), s, xp.float32(0.0)).astype(xp.float32)

    @_on_runtime
    def every_score(self, query: SparseQuery) -> np.ndarray:
        return runtime.current().to_host(self.device_scores(query))

    def score(self, ids: np.ndarray, query: SparseQuery) -> np.ndarray:
        s = self.every_score(query)[np.asarray(ids, dtype=np.int64)]
        return np.where(s > 0, s, np.nan).astype(np.float32)

    @_on_runtime
    def reached(self, query: SparseQuery) -> tuple[np.ndarray, np.ndarray]:
        """The live rows the query scores above 0 and their scores, picked out on the device: only
        those cross the bus, not a score for every row."""
        rt = runtime.current()
        scores = self.device_scores(query)
        rows = rt.xp.flatnonzero(scores > 0)
        return rt.to_host(rows).astype(np.int64), rt.to_host(scores[rows]).astype(np.float32)

    @_on_runtime
    def reach(self, query: SparseQuery) -> int:
        return self.index.postings_count(query.ids)


class ResidentBm25Backend(ResidentSparseBackend):
    """Okapi BM25 on the device (the ``bm25`` kind): raw term frequencies as CSC segments, each
    row's length in device memory, every posting weighed in the kernel with the average length of
    the live rows at the query's moment (:class:`~teleo_server.index.backends.RowLengths`), so a
    write appends its own postings and re-weighs nothing. The in-process ``bm25.numpy`` is its
    reference."""

    kind = "bm25"

    def __init__(self, ops: Any = None, k1: float = 0.9, b: float = 0.4, sparse: bool = False,
                 runtime: str = "cuda", **_: Any) -> None:
        super().__init__(ops, vocab=0, runtime=runtime)  # the vocabulary grows with the corpus
        self.k1, self.b = float(k1), float(b)
        self.lengths = RowLengths(bool(sparse))
        self._doc_len = self._zeros()  # each row's length, on the device

    @_on_runtime
    def _zeros(self) -> Any:
        return runtime.current().xp.zeros(0, dtype=np.float32)

    @property
    def device_bytes(self) -> int:
        return super().device_bytes + 4 * self.n  # and each row's length

    def _scorer(self) -> Callable[[Any, Any], Any]:
        avgdl = self.lengths.average()
        return lambda ids, w: self.index.bm25_scores(ids, w, self._doc_len, self.k1, self.b, avgdl)

    @_on_runtime
    def add(self, vectors: list[SparseVector]) -> np.ndarray:
        first = self.n
        ids = super().add(vectors)
        lengths = self.lengths.extend(vectors)
        self._doc_len = _grow_vector(runtime.current().xp, self._doc_len, self.n)
        self._doc_len[first:self.n] = runtime.current().xp.asarray(lengths)
        return ids

    @_on_runtime
    def remove(self, rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        rows = np.unique(rows[self.live.alive(rows)]) if rows.size else rows
        self.lengths.forget(rows)
        super().remove(rows)


def _grow_vector(xp: Any, buf: Any, need: int) -> Any:
    """A 1-D device buffer with room for ``need`` values (doubling), contents kept."""
    if buf.shape[0] >= need:
        return buf
    new = xp.zeros(max(need, 2 * buf.shape[0], 1024), dtype=buf.dtype)
    new[: buf.shape[0]] = buf
    return new


class ResidentTokenBackend:
    """Per-token vectors on the device, scored by MaxSim (mean over query tokens of the best
    document token), exact.

    With ``codec`` (a :class:`~teleo_server.heads.CodecSpec`: the late-interaction space gives its
    own), the device holds that codec's rows, as the host token store does: by default 2-bit codes
    of tokens rotated to 128 dimensions and pooled, 32 bytes a token, decoded by the code kernel for
    the candidates only; a query is rotated as the codec rotates. ``add`` takes a row's tokens as
    float (T, dim_in), encoded here, or as :class:`~teleo_server.heads.TokenCodes` of that codec,
    appended as they are. Without one, float16 tokens of width ``dim`` as given.
    """

    kind, exact = "tokens", True

    def __init__(self, ops: Any = None, dim: int = 384, runtime: str = "cuda", codec: CodecSpec | None = None,
                 **_: Any) -> None:
        self.runtime = _runtime(runtime)
        self.codec = TokenCodec.of(codec) if codec is not None else None
        width = self.codec.dim if self.codec is not None else dim
        bits = self.codec.bits if self.codec is not None else RAW_BITS
        levels = self.codec.levels if bits != RAW_BITS else None
        self.live, self.store = self._make(width, bits, levels)
        self._lengths = Column(np.int64)  # tokens a row holds (grows in place)

    @_on_runtime
    def _make(self, dim: int, bits: int, levels: np.ndarray | None) -> tuple[LiveRows, ResidentTokenStore]:
        live = LiveRows()
        return live, ResidentTokenStore(dim, live, bits=bits, levels=levels)

    @property
    def n(self) -> int:
        return self.live.n_rows

    @property
    def device_bytes(self) -> int:
        return self.store.nbytes + self.live.nbytes

    def _stored(self, tokens: Any) -> np.ndarray:
        """One row's tokens in the store's form: (T, width) float16 or codes."""
        if isinstance(tokens, TokenCodes):
            if self.codec is None or tokens.spec != self.codec.spec:
                raise InternalValueError(f"tokens coded as {tokens.spec.tag} cannot join this store")
            return tokens.data
        t = np.asarray(tokens, np.float32)
        if self.codec is None:
            return t.reshape(-1, self.store.dim).astype(np.float16)
        if t.size == 0:
            return np.zeros((0, self.store.width), self.codec.dtype)
        return self.codec.encode(t)

    @_on_runtime
    def add(self, vectors: list[Any]) -> np.ndarray:
        rows = [self._stored(t) for t in vectors]
        ids = self.live.append(len(vectors))
        lengths = np.array([r.shape[0] for r in rows], dtype=np.int64)
        dtype = np.float16 if self.codec is None else self.codec.dtype
        self.store.append(lengths, np.concatenate(rows or [np.zeros((0, self.store.width), dtype)]))
        self._lengths.extend(lengths)
        return ids

    @_on_runtime
    def remove(self, rows: np.ndarray) -> None:
        self.live.delete(rows)

    @_on_runtime
    def score(self, ids: np.ndarray, query: TokenQuery) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        out = np.full(ids.size, np.nan, dtype=np.float32)
        has = (self._lengths.view[ids] > 0) if ids.size else np.zeros(0, bool)
        q = np.asarray(query.tokens, np.float32)
        if self.codec is not None and q.size:
            q = self.codec.transform(q)
        if has.any() and q.shape[0]:
            out[has] = self.store.maxsim(q, ids[has]) / q.shape[0]
        return out

    @_on_runtime
    def search(self, query: TokenQuery, k: int, filter: RowFilter | None = None) -> tuple[np.ndarray, np.ndarray]:
        rows = np.flatnonzero(_admitted(self.live, filter))
        s = self.score(rows, query)
        ok = ~np.isnan(s)
        rows, s = rows[ok], s[ok]
        order = np.lexsort((rows, -s))[:k]
        return rows[order], s[order]


def register_all() -> None:
    """Register the resident backends (made on a CUDA device unless ``runtime`` says otherwise)
    and, where cuVS is installed, CAGRA."""
    register_backend("dense.resident", "dense", True,
                     lambda dim, ops=None, runtime="cuda", **kw: ResidentDenseBackend(dim, ops, runtime),
                     "fp16 rows resident on the GPU, exact scan", device=True, unavailable=_missing,
                     device_default=True)
    register_backend("sparse.resident", "sparse", True, lambda ops=None, **kw: ResidentSparseBackend(ops, **kw),
                     "CSC postings resident on the GPU, SpMV", device=True, unavailable=_missing,
                     device_default=True)
    register_backend("bm25.resident", "bm25", True, lambda ops=None, **kw: ResidentBm25Backend(ops, **kw),
                     "raw term frequencies resident on the GPU, BM25 weighed in the SpMV kernel", device=True,
                     unavailable=_missing, device_default=True)
    register_backend("tokens.resident", "tokens", True, lambda ops=None, **kw: ResidentTokenBackend(ops, **kw),
                     "per-token vectors (float16 or codes) resident on the GPU, fused MaxSim", device=True,
                     unavailable=_missing, device_default=True)
    if cagra_available():
        register_backend("dense.cagra", "dense", False,
                         lambda dim, ops=None, runtime="cuda", **kw: CagraBackend(dim, ops, runtime=runtime),
                         "cuVS CAGRA graph, bitset-filtered in graph (CUDA only)", device=True,
                         unavailable=_cagra_missing)


register_all()


__all__ = ["CagraBackend", "ResidentBm25Backend", "ResidentDenseBackend", "ResidentSparseBackend", "ResidentTokenBackend", "register_all"]
