"""The memory graph: memories joined by the entities they share, by typed links and by session
adjacency, with personalised PageRank over it.

Two sparse matrices hold the graph. ``incidence`` (memory rows x entity nodes) records which
entities each memory names: a bipartite graph, so a memory reaches every other memory naming the
same entity in two steps without a quadratic number of memory-memory edges. ``links`` (memory x
memory, symmetric) holds typed links and session adjacency with their weights. Both grow by
appending triplets; a query folds pending triplets into the CSR form first (amortised: only
after writes). A removed memory keeps its edges until compaction; every walk is restricted to the
rows the caller may read, so neither a deleted memory nor another tenant's is ever crossed, and
entity weights and degrees are counted over readable rows only (another tenant's memories do not
move a caller's scores).

The walk (``ppr``) is a sparse power iteration with damping ``alpha`` over the seeds'
neighbourhood: the rows and entities within ``hops`` steps of a seed, not crossing *hub*
entities (named by more than ``hub_fraction`` of the readable memories, such as a speaker's name
on every dialog turn), and within a budget of ``max_nodes`` memories, reached through the most
specific entities first; PageRank mass that would leave the neighbourhood is dropped. Close to
the seeds, where the top results lie, this ranks as the whole-graph walk does, at a cost set by
the budget rather than the corpus.

``neighbour_mean`` is the other use of the graph: the mean of a per-memory value (a score, or a
vector) over each memory's readable neighbours, by typed link and session weight and by the
memories it shares specific entities with (each entity counts by its specificity, the memory
itself left out of the entity's mean). The graph space smooths a memory's vector with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from teleo_server.compute.sets import distinct
from teleo_server.index.chunks import slices
from teleo_server.index.terms import TermTable


class GrowingMatrix:
    """A sparse float32 matrix built by appending (row, col, weight) triplets; duplicates add up."""

    __slots__ = ("_rows", "_cols", "_vals", "_csr", "_shape", "pending")

    def __init__(self) -> None:
        self._rows: list[np.ndarray] = []
        self._cols: list[np.ndarray] = []
        self._vals: list[np.ndarray] = []
        self._csr: sp.csr_matrix | None = None
        self._shape = (0, 0)
        self.pending = 0

    def add(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> None:
        if rows.size:
            self._rows.append(np.asarray(rows, np.int64))
            self._cols.append(np.asarray(cols, np.int64))
            self._vals.append(np.asarray(vals, np.float32))
            self.pending += int(rows.size)

    def csr(self, n_rows: int, n_cols: int) -> sp.csr_matrix:
        """The matrix, shape (n_rows, n_cols), pending triplets folded in."""
        if self._csr is not None and not self.pending and self._shape == (n_rows, n_cols):
            return self._csr
        parts_r, parts_c, parts_v = list(self._rows), list(self._cols), list(self._vals)
        if self._csr is not None:
            coo = self._csr.tocoo()
            parts_r.insert(0, coo.row.astype(np.int64))
            parts_c.insert(0, coo.col.astype(np.int64))
            parts_v.insert(0, coo.data)
        r = np.concatenate(parts_r) if parts_r else np.zeros(0, np.int64)
        c = np.concatenate(parts_c) if parts_c else np.zeros(0, np.int64)
        v = np.concatenate(parts_v) if parts_v else np.zeros(0, np.float32)
        m = sp.coo_matrix((v, (r, c)), shape=(n_rows, n_cols)).tocsr()
        m.sum_duplicates()
        self._csr, self._shape = m, (n_rows, n_cols)
        self._rows, self._cols, self._vals, self.pending = [], [], [], 0
        return m

    def compact(self, new_row: np.ndarray, new_col: np.ndarray | None, n_rows: int, n_cols: int) -> None:
        """Renumber rows (and columns, for a memory x memory matrix) by ``new_row``/``new_col``
        (-1 drops); the shape becomes (n_rows, n_cols)."""
        coo = self.csr(new_row.size, new_col.size if new_col is not None else n_cols).tocoo()
        r = new_row[coo.row]
        c = new_col[coo.col] if new_col is not None else coo.col.astype(np.int64)
        keep = (r >= 0) & (c >= 0)
        self._csr = None
        self._rows, self._cols, self._vals, self.pending = [r[keep]], [c[keep]], [coo.data[keep]], int(keep.sum())
        self.csr(n_rows, n_cols)

    @property
    def nnz(self) -> int:
        return (0 if self._csr is None else int(self._csr.nnz)) + self.pending


@dataclass(frozen=True, slots=True)
class WalkSettings:
    alpha: float = 0.85          # probability of following an edge rather than jumping to a seed
    max_iter: int = 100
    tol: float = 1e-6            # L1 change of the score vector that ends the iteration
    hops: int = 3                # neighbourhood radius in memory steps (memory -> entity -> memory is one)
    hub_fraction: float = 0.05   # entities named by more than this share of readable memories are not crossed
    hub_min: int = 50            # ... nor by fewer than this many memories ever counted as hubs
    max_nodes: int = 500         # neighbourhood budget (memories): rarer entities are crossed first, until it is spent


@dataclass(slots=True)
class Walk:
    rows: np.ndarray        # memory rows int64, best first
    scores: np.ndarray      # PageRank mass float32 (sums to <= 1 over the neighbourhood)
    iterations: int
    nodes: int              # memories in the neighbourhood walked
    entities: int           # entity nodes in it


class MemoryGraph:
    """Memories, entities and links as sparse matrices (see the module docstring)."""

    def __init__(self) -> None:
        self.entity_of = TermTable()       # entity key -> id, in a few arrays
        self.incidence = GrowingMatrix()   # memory row x entity
        self.links = GrowingMatrix()       # memory row x memory row, symmetric
        self.n_rows = 0
        self.version = 0                   # changes with every write (keys caches of derived arrays)
        self._inc_t: sp.csr_matrix | None = None
        self._static: tuple[tuple, tuple] | None = None
        self._degrees: tuple[tuple, tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def n_entities(self) -> int:
        return len(self.entity_of)

    # ---- writes ----------------------------------------------------------------------------------
    def entity(self, key: str, create: bool = True) -> int:
        e = self.entity_of.add(key) if create else self.entity_of.get(key)
        return -1 if e is None else e

    def add_memory(self, row: int, entity_keys: list[str]) -> None:
        self.version += 1
        self.n_rows = max(self.n_rows, row + 1)
        if entity_keys:
            ents = np.array(sorted(set(self.entity_of.add_all(entity_keys))), dtype=np.int64)
            self.incidence.add(np.full(ents.size, row, np.int64), ents, np.ones(ents.size, np.float32))

    def link(self, a: int, b: int, weight: float) -> None:
        """An undirected edge between memory rows ``a`` and ``b``."""
        if a != b and weight > 0:
            self.version += 1
            self.links.add(np.array([a, b]), np.array([b, a]), np.array([weight, weight], np.float32))

    def compact(self, keep: np.ndarray) -> None:
        self.version += 1
        new = np.full(max(self.n_rows, int(keep.max(initial=-1)) + 1), -1, np.int64)
        new[keep] = np.arange(keep.size)
        self.incidence.compact(new, None, keep.size, self.n_entities)
        self.links.compact(new, new, keep.size, keep.size)
        self.n_rows = int(keep.size)
        self._inc_t = None

    def matrices(self, n_rows: int) -> tuple[sp.csr_matrix, sp.csr_matrix, sp.csr_matrix]:
        """(incidence, its transpose, links) as CSR over ``n_rows`` memory rows."""
        self.n_rows = max(self.n_rows, n_rows)
        pending = self.incidence.pending
        inc = self.incidence.csr(self.n_rows, self.n_entities)
        if pending or self._inc_t is None or self._inc_t.shape != (inc.shape[1], inc.shape[0]):
            self._inc_t = inc.T.tocsr()
        return inc, self._inc_t, self.links.csr(self.n_rows, self.n_rows)

    # ---- reads -----------------------------------------------------------------------------------
    def _key(self, readable: np.ndarray) -> tuple[int, int, int]:
        """What a cache of arrays derived from the graph and a readable set is valid for."""
        return self.version, readable.size, hash(np.packbits(readable).tobytes())

    def degrees(self, readable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(readable as float64 over the matrices' rows, readable memories naming each entity
        float64 (n_entities,)), cached per graph version and readable set (one sparse product over
        the whole corpus otherwise, the largest cost of a walk)."""
        inc, inc_t, _ = self.matrices(readable.size)
        key = self._key(readable)
        if self._degrees is not None and self._degrees[0] == key:
            return self._degrees[1]
        r = np.zeros(inc.shape[0])
        r[: min(readable.size, r.size)] = readable[: r.size]
        got = (r, inc_t @ r)
        self._degrees = (key, got)
        return got

    def _entity_weights(self, readable: np.ndarray, settings: WalkSettings, entity_share: float) -> tuple:
        """What neighbour means over ``readable`` rows need besides the values, cached per graph
        version and readable set: (r float64 (n,), per-entity weight w over (degree - 1) (0 for
        hubs and entities no other readable memory names), per-row link weight, per-row entity
        weight, per-row sum of those per-entity factors)."""
        n = readable.size
        key = (*self._key(readable), settings.hub_fraction, settings.hub_min, entity_share)
        if self._static is not None and self._static[0] == key:
            return self._static[1]
        inc, inc_t, links = self.matrices(n)
        r, deg = self.degrees(readable)
        n_readable = max(float(r.sum()), 1.0)
        hub = deg > max(settings.hub_fraction * n_readable, settings.hub_min)
        w = np.where(hub | (deg <= 1), 0.0, np.log1p(n_readable / np.maximum(deg, 1.0)) / np.log1p(n_readable)) * entity_share
        a = np.divide(w, deg - 1.0, out=np.zeros_like(w), where=w > 0)
        static = (r, a, links @ r, inc @ w, inc @ a)
        self._static = (key, static)
        return static

    def neighbour_mean(self, values: np.ndarray, readable: np.ndarray, settings: WalkSettings,
                       entity_share: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """(sum, weight) over each memory's readable neighbours of ``values`` (float (n,) or (n, d)):
        sum float64 like ``values``, weight float64 (n,); the mean is sum / weight where weight > 0.

        A linked (or session-adjacent) memory counts by its edge weight; a shared entity counts by
        ``entity_share`` x its specificity, log(1 + N / df) / log(1 + N) over the N readable
        memories, with the mean of ``values`` over the *other* readable memories naming it. Hub
        entities (as in the walk) are not crossed. Rows outside ``readable`` get weight 0 and
        never count as anyone's neighbour, so what a caller may not read cannot move the result.
        """
        inc, inc_t, links = self.matrices(readable.size)
        r, a, link_w, ent_w, self_share = self._entity_weights(readable, settings, entity_share)
        x = np.asarray(values, np.float64)[: r.size]
        rx = x * (r[:, None] if x.ndim == 2 else r)
        total = links @ rx
        per_entity = inc_t @ rx                                    # readable sum per entity
        per_entity *= a[:, None] if x.ndim == 2 else a             # ... over (degree - 1), times weight
        total = total + inc @ per_entity
        total -= x * (self_share[:, None] if x.ndim == 2 else self_share)  # the memory's own share
        weight = (link_w + ent_w) * r
        total *= (r[:, None] if x.ndim == 2 else r)
        return total, weight

    def neighbour_mean_of(self, row: int, vectors_of: Callable[[np.ndarray], np.ndarray], readable: np.ndarray,
                          settings: WalkSettings, entity_share: float = 1.0) -> tuple[np.ndarray, float]:
        """``neighbour_mean`` of one row's vectors: ``vectors_of(rows)`` float (len(rows), d) is
        read for its neighbours only. Returns (sum float64 (d,), weight)."""
        inc, inc_t, links = self.matrices(readable.size)
        r, a, _, _, _ = self._entity_weights(readable, settings, entity_share)
        parts: list[np.ndarray] = []
        weight = 0.0
        if row < r.size and r[row]:
            lo, hi = links.indptr[row], links.indptr[row + 1]
            nb = links.indices[lo:hi]
            wl = links.data[lo:hi].astype(np.float64) * r[nb]
            if nb.size:
                parts.append(wl @ np.asarray(vectors_of(nb), np.float64))
                weight += float(wl.sum())
            ents = inc.indices[inc.indptr[row]: inc.indptr[row + 1]]
            for e in ents[a[ents] > 0].tolist():
                members = inc_t.indices[inc_t.indptr[e]: inc_t.indptr[e + 1]]
                members = members[(members != row) & (r[members] > 0)]
                if members.size:
                    parts.append(a[e] * np.asarray(vectors_of(members), np.float64).sum(axis=0))
                    weight += float(a[e]) * members.size
        if not parts:
            return np.zeros(np.asarray(vectors_of(np.array([row], np.int64))).shape[1]), 0.0
        return np.sum(parts, axis=0), weight

    def ppr(self, readable: np.ndarray, seed_rows: np.ndarray, seed_weights: np.ndarray,
            seed_entities: np.ndarray, entity_weights: np.ndarray | None, settings: WalkSettings,
            k: int) -> Walk:
        """Personalised PageRank from memory and entity seeds over readable rows.

        seed_rows/seed_weights: memory seeds and their teleport weights; seed_entities: entity
        seeds (each weighs the mean memory seed weight, or 1). Returns the ``k`` memory rows with
        the most mass, seeds included.
        """
        inc, inc_t, links = self.matrices(readable.size)
        R, deg_e = self.degrees(readable)  # readable memories per entity
        seed_rows = np.asarray(seed_rows, np.int64)
        ok = (seed_rows >= 0) & (seed_rows < R.size)
        ok[ok] = R[seed_rows[ok]] > 0
        seed_rows, seed_weights = seed_rows[ok], np.asarray(seed_weights, np.float64)[ok]
        seed_entities = np.asarray(seed_entities, np.int64)
        seed_entities = seed_entities[(seed_entities >= 0) & (seed_entities < deg_e.size)]
        seed_entities = seed_entities[deg_e[seed_entities] > 0]
        if not seed_rows.size and not seed_entities.size:
            return Walk(np.zeros(0, np.int64), np.zeros(0, np.float32), 0, 0, 0)
        n_readable = max(float(R.sum()), 1.0)
        hub = deg_e > max(settings.hub_fraction * n_readable, settings.hub_min)
        # the neighbourhood: memory rows and non-hub entities within `hops` steps of a seed
        mem = np.zeros(R.size, bool)
        mem[seed_rows] = True
        ent = np.zeros(deg_e.size, bool)
        ent[seed_entities] = True
        budget = settings.max_nodes
        # entity seeds spend the budget too, the most specific first
        seed_entities = seed_entities[np.argsort(deg_e[seed_entities], kind="stable")]
        seed_entities = seed_entities[np.cumsum(deg_e[seed_entities]) <= max(budget - seed_rows.size, 0)]
        ent[:] = False
        ent[seed_entities] = True
        if not seed_rows.size and not seed_entities.size:
            return Walk(np.zeros(0, np.int64), np.zeros(0, np.float32), 0, 0, 0)
        frontier_m, frontier_e = seed_rows, seed_entities
        n_mem = int(np.count_nonzero(mem))
        for _ in range(settings.hops):
            left = budget - n_mem
            if left <= 0:
                break
            # memory -> entity (not hubs), entity -> memory, memory -> linked memory; the most
            # specific entities first, while the memories they name fit in the budget
            e_new = distinct(_row_columns(inc, frontier_m), deg_e.size)
            e_new = _by_degree(e_new[~hub[e_new] & ~ent[e_new]], deg_e)
            e_new = e_new[np.cumsum(deg_e[e_new]) <= left]
            ent[e_new] = True
            e_all = np.concatenate([frontier_e, e_new])
            reached = np.concatenate([_row_columns(inc_t, e_all), _row_columns(links, frontier_m)])
            cand = distinct(reached, R.size)
            cand = cand[(R[cand] > 0) & ~mem[cand]]
            mem[cand] = True
            n_mem += int(cand.size)
            frontier_m, frontier_e = cand, np.zeros(0, np.int64)
            if not cand.size:
                break
        rows = np.flatnonzero(mem)
        rows = rows[R[rows] > 0]
        ents = np.flatnonzero(ent)
        ents = ents[deg_e[ents] > 0]
        nm = rows.size
        # positions in the neighbourhood, read from this thread's tables over every row and entity
        # id (set for this walk's nodes, reset after): no array over the whole corpus per walk
        with _positions(rows, R.size, "rows") as pos_m, _positions(ents, deg_e.size, "entities") as pos_e:
            # the neighbourhood's entries: memory i names entity e (value iv), memory i links to j (lv),
            # read from whichever side of the incidence holds fewer entries
            by_row = int((inc.indptr[rows + 1] - inc.indptr[rows]).sum())
            by_entity = int((inc_t.indptr[ents + 1] - inc_t.indptr[ents]).sum())
            if by_entity < by_row:
                ej, mi, iv = _row_entries(inc_t, ents)
                mi = pos_m(mi)
                keep = mi >= 0
            else:
                mi, ej, iv = _row_entries(inc, rows)
                ej = pos_e(ej)
                keep = ej >= 0
            mi, ej, iv = mi[keep], ej[keep], iv[keep]
            li, lj, lv = _row_entries(links, rows)
            lj = pos_m(lj)
            keep = lj >= 0
            li, lj, lv = li[keep], lj[keep], lv[keep]
            seed_at, entity_seed_at = pos_m(seed_rows), pos_e(seed_entities)
        # entity weight: how specific it is among readable memories, in (0, 1] (for the
        # neighbourhood's entities only)
        if entity_weights is None:
            w_e = np.log1p(n_readable / np.maximum(deg_e[ents], 1.0)) / np.log1p(n_readable)
        else:
            w_e = entity_weights[ents]
        # memory out-weight: entities (by weight) plus links (by weight), over the neighbourhood
        # (bincount of nothing is int64 even with weights: the sums are made float64 explicitly)
        out = np.bincount(mi, iv * w_e[ej], minlength=nm) + np.bincount(li, lv, minlength=nm).astype(np.float64)
        deg_sub_e = np.bincount(ej, iv, minlength=ents.size).astype(np.float64)
        inv_out = np.divide(1.0, out, out=np.zeros_like(out), where=out > 0)
        inv_deg_e = np.divide(1.0, deg_sub_e, out=np.zeros_like(deg_sub_e), where=deg_sub_e > 0)
        # one transition matrix over [memories; entities], columns scaled by how their mass leaves:
        # memory -> memory by link weight, memory -> entity by entity weight, entity -> memory evenly
        a = settings.alpha
        size = nm + ents.size
        transition = (np.concatenate([lv * (a * inv_out[lj]), iv * (a * inv_deg_e[ej]), iv * (a * w_e[ej] * inv_out[mi])]),
                      np.concatenate([li, mi, nm + ej]), np.concatenate([lj, nm + ej, mi]))
        p = np.zeros(nm + ents.size)
        np.add.at(p, seed_at, seed_weights)
        if seed_entities.size:
            p[nm + entity_seed_at] = float(seed_weights.mean()) if seed_weights.size else 1.0
        p *= (1.0 - a) / p.sum()
        x, it = _power_iteration(transition, size, p, settings.max_iter, settings.tol)
        xm = x[:nm]
        k = min(k, rows.size)
        top = np.argpartition(-xm, k - 1)[:k] if 0 < k < rows.size else np.arange(rows.size)
        top = top[np.argsort(-xm[top], kind="stable")]
        top = top[xm[top] > 0]
        return Walk(rows[top].astype(np.int64), xm[top].astype(np.float32), it, int(rows.size), int(ents.size))


def _coo_matvec() -> Callable[..., None] | None:
    """SciPy's sparse kernel ``y += A x`` over (row, column, value) triplets
    (``scipy.sparse._sparsetools.coo_matvec``), or None where this SciPy does not have it under
    that name (the walk then builds a ``csr_array`` and multiplies through ``@``)."""
    try:
        from scipy.sparse import _sparsetools
    except ImportError:
        return None
    return getattr(_sparsetools, "coo_matvec", None)


COO_MATVEC = _coo_matvec()


def _power_iteration(transition: tuple[np.ndarray, np.ndarray, np.ndarray], size: int, p: np.ndarray,
                     max_iter: int, tol: float) -> tuple[np.ndarray, int]:
    """x <- T x + p from x = p until the L1 change falls below ``tol`` (at most ``max_iter``
    steps), T the (size x size) matrix of the (values, rows, columns) triplets ``transition``
    (repeats add up); returns x and the steps taken.

    T and p hold no negative value, so from x = p every step only adds (T x_k >= T x_(k-1) when
    x_k >= x_(k-1), rounding included: sums of non-negative terms in a fixed order are monotone),
    and the L1 change of a step is the growth of the sum: one reduction a step where the change
    itself costs three.

    A walk takes 60-90 steps over a few thousand nodes, where building a ``csr_array`` and each
    ``@`` cost more than the products themselves (SciPy's dispatch and a fresh array per step):
    SciPy's triplet kernel runs on the triplets as they are, into two buffers that trade places
    (10K synthetic memories: 0.9 ms of building and 31 against 23 us a step saved; the sum in
    place of the change 21 against 15 us a step)."""
    values, rows, cols = transition
    matvec = COO_MATVEC
    if matvec is None:
        matrix = sp.csr_array((values, (rows, cols)), shape=(size, size))
    x, nx = p.copy(), np.empty_like(p)
    total = float(x.sum())
    it = 0
    for it in range(1, max_iter + 1):
        if matvec is not None:
            np.copyto(nx, p)
            matvec(values.size, rows, cols, values, x, nx)
        else:
            nx = matrix @ x + p
        x, nx = nx, x
        grown = float(x.sum())
        if grown - total < tol:
            break
        total = grown
    return x, it


class _PositionTables(threading.local):
    """Per thread: int32 tables over node ids, -1 except inside a ``_positions`` block."""

    def __init__(self) -> None:
        self.tables: dict[str, np.ndarray] = {}


_TABLES = _PositionTables()


@contextmanager
def _positions(keys: np.ndarray, size: int, name: str) -> Iterator[Callable[[np.ndarray], np.ndarray]]:
    """Within the block, a function giving where each id (in ``[0, size)``) sits among ``keys``
    (distinct, ascending), -1 where it is not there: a gather from this thread's table for ``name``
    (grown as ids grow, kept between walks), its entries for ``keys`` reset when the block ends."""
    table = _TABLES.tables.get(name)
    if table is None or table.size < size:
        table = _TABLES.tables[name] = np.full(max(size, 2 * (0 if table is None else table.size)), -1, np.int32)
    table[keys] = np.arange(keys.size, dtype=np.int32)
    try:
        yield lambda x: table[x].astype(np.int64)
    finally:
        table[keys] = -1


def _by_degree(entities: np.ndarray, degrees: np.ndarray) -> np.ndarray:
    """Distinct ascending entity ids ordered by degree, ties by id (a stable argsort by degree),
    through one sort of int64 keys: degree counts memories, so it is a whole number."""
    if entities.size < 2:
        return entities
    n = degrees.size
    key = degrees[entities].astype(np.int64) * n + entities
    key.sort()
    return key % n


def _row_columns(m: sp.csr_matrix, rows: np.ndarray) -> np.ndarray:
    """The columns int64 of the stored entries of ``rows`` of a CSR matrix (``_row_entries``'
    second part alone)."""
    _, pos = slices(m.indptr, np.asarray(rows, np.int64))
    return m.indices[pos].astype(np.int64)


def _row_entries(m: sp.csr_matrix, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stored entries of ``rows`` of a CSR matrix, without building a sub-matrix: position in
    ``rows`` int64, column int64 and value float64 of each."""
    rows = np.asarray(rows, np.int64)
    lengths, pos = slices(m.indptr, rows)
    return np.repeat(np.arange(rows.size), lengths), m.indices[pos].astype(np.int64), m.data[pos].astype(np.float64)


__all__ = ["GrowingMatrix", "MemoryGraph", "Walk", "WalkSettings"]
