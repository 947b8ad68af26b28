"""The memory graph and its personalised PageRank: the walk matches a dense reference of the
documented chain, stays inside what the caller may read, grows incrementally and survives compaction."""

from __future__ import annotations

import numpy as np
import pytest

from teleo_server.index.graph import MemoryGraph, WalkSettings

FULL = WalkSettings(hops=50, hub_fraction=1.0, hub_min=10**9, tol=1e-12, max_iter=1000)


def _graph(seed: int = 0, n: int = 40, n_ent: int = 25, links: int = 15) -> tuple[MemoryGraph, list[list[str]], list[tuple[int, int, float]]]:
    rng = np.random.default_rng(seed)
    ents = [[f"e{j}" for j in rng.choice(n_ent, size=rng.integers(1, 5), replace=False)] for _ in range(n)]
    edges = [(int(a), int(b), float(w)) for a, b, w in zip(rng.integers(0, n, links), rng.integers(0, n, links),
                                                           rng.uniform(0.5, 2.0, links)) if a != b]
    g = MemoryGraph()
    for row, keys in enumerate(ents):
        g.add_memory(row, keys)
    for a, b, w in edges:
        g.link(a, b, w)
    return g, ents, edges


def _reference(ents: list[list[str]], edges: list[tuple[int, int, float]], readable: np.ndarray,
               seeds: dict[int, float], alpha: float = 0.85) -> np.ndarray:
    """Dense power iteration of the chain the module documents, over readable memories only."""
    keys = sorted({k for i, ks in enumerate(ents) if readable[i] for k in ks})
    col = {k: j for j, k in enumerate(keys)}
    n, m = len(ents), len(keys)
    inc = np.zeros((n, m))
    for i, ks in enumerate(ents):
        if readable[i]:
            for k in ks:
                inc[i, col[k]] = 1.0
    lk = np.zeros((n, n))
    for a, b, w in edges:
        if readable[a] and readable[b]:
            lk[a, b] += w
            lk[b, a] += w
    n_r = readable.sum()
    deg_e = inc.sum(axis=0)
    w_e = np.log1p(n_r / np.maximum(deg_e, 1)) / np.log1p(n_r)
    out = inc @ w_e + lk.sum(axis=1)
    pm = np.zeros(n)
    for r, w in seeds.items():
        pm[r] = w
    pm /= pm.sum()
    xm, xe = pm.copy(), np.zeros(m)
    for _ in range(5000):
        um = np.divide(xm, out, out=np.zeros(n), where=out > 0)
        ue = np.divide(xe, deg_e, out=np.zeros(m), where=deg_e > 0)
        nm = alpha * (inc @ ue + lk @ um) + (1 - alpha) * pm
        ne = alpha * w_e * (inc.T @ um)
        if np.abs(nm - xm).sum() + np.abs(ne - xe).sum() < 1e-14:
            xm, xe = nm, ne
            break
        xm, xe = nm, ne
    return xm


def test_walk_matches_the_dense_reference():
    g, ents, edges = _graph()
    readable = np.ones(40, dtype=bool)
    seeds = {3: 1.0, 17: 0.5}
    walk = g.ppr(readable, np.array([3, 17]), np.array([1.0, 0.5]), np.zeros(0, np.int64), None, FULL, 40)
    ref = _reference(ents, edges, readable, seeds)
    got = np.zeros(40)
    got[walk.rows] = walk.scores
    np.testing.assert_allclose(got, ref, atol=1e-6)
    assert list(walk.rows[:5]) == list(np.argsort(-ref, kind="stable")[:5])
    assert walk.iterations < FULL.max_iter


def test_the_direct_kernel_and_scipys_product_walk_alike(monkeypatch):
    """The walk calls SciPy's triplet kernel itself; where a SciPy lacks it, a ``csr_array`` and
    ``@`` give the same walk (up to the order of the sums) in the same number of steps."""
    from teleo_server.index import graph as graph_module

    assert graph_module.COO_MATVEC is not None  # this SciPy has the kernel: the fast path is the one tested above
    g, _, _ = _graph(seed=4, n=60, n_ent=30, links=25)
    readable = np.ones(60, dtype=bool)
    readable[::7] = False
    args = (readable, np.array([2, 9, 33]), np.array([1.0, 0.7, 0.4]), np.array([g.entity("e3")], np.int64), None,
            WalkSettings(hops=4), 20)
    fast = g.ppr(*args)
    monkeypatch.setattr(graph_module, "COO_MATVEC", None)
    slow = g.ppr(*args)
    assert fast.rows.size == 20 and fast.iterations > 5
    np.testing.assert_array_equal(fast.rows, slow.rows)
    np.testing.assert_allclose(fast.scores, slow.scores, rtol=1e-12)
    assert fast.iterations == slow.iterations


def test_walks_one_after_another_and_side_by_side_answer_as_alone():
    """Each walk reads node positions from a per-thread table it fills and resets: a walk over
    another neighbourhood before it, a graph that grew in between, or a walk in another thread at
    the same time changes nothing in its answer."""
    import concurrent.futures

    g, _, _ = _graph(seed=5, n=60, n_ent=30, links=25)
    readable = np.ones(60, dtype=bool)
    settings = WalkSettings(hops=2)
    a = (readable, np.array([1, 8]), np.array([1.0, 0.5]), np.zeros(0, np.int64), None, settings, 15)
    b = (readable, np.array([40, 52]), np.array([1.0, 1.0]), np.array([g.entity("e7")], np.int64), None, settings, 15)
    first = g.ppr(*a)
    g.ppr(*b)
    again = g.ppr(*a)
    np.testing.assert_array_equal(first.rows, again.rows)
    np.testing.assert_array_equal(first.scores, again.scores)
    for row in range(60, 200):  # past the tables' size: they grow, and old positions stay -1
        g.add_memory(row, [f"e{row % 30}", f"new{row}"])
    wide = np.ones(200, dtype=bool)
    grown_a = (wide,) + a[1:]
    alone = g.ppr(*grown_a)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        walks = list(pool.map(lambda i: g.ppr(*(grown_a if i % 2 else (wide,) + b[1:])), range(16)))
    for w in walks[1::2]:
        np.testing.assert_array_equal(w.rows, alone.rows)
        np.testing.assert_array_equal(w.scores, alone.scores)


def test_the_walk_stops_at_the_tolerance():
    """The iteration ends at the first step that moves the scores by less than ``tol`` (L1): one
    more step of the same walk changes them by less than that."""
    g, ents, edges = _graph(seed=6)
    readable = np.ones(40, dtype=bool)
    args = (readable, np.array([5]), np.array([1.0]), np.zeros(0, np.int64), None)
    loose = g.ppr(*args, WalkSettings(hops=50, tol=1e-4), 40)
    tight = g.ppr(*args, WalkSettings(hops=50, tol=1e-10), 40)
    assert loose.iterations < tight.iterations
    got = np.zeros(40)
    got[loose.rows] = loose.scores
    ref = np.zeros(40)
    ref[tight.rows] = tight.scores
    # the tail of a geometric series at rate <= alpha after a step smaller than tol
    assert 0 < np.abs(ref - got).sum() <= 1e-4 * 0.85 / (1 - 0.85) + 1e-6


def test_unreadable_memories_neither_appear_nor_shape_scores():
    g, ents, edges = _graph(seed=1)
    readable = np.ones(40, dtype=bool)
    readable[::3] = False  # another tenant's memories
    readable[3] = True
    walk = g.ppr(readable, np.array([3]), np.array([1.0]), np.zeros(0, np.int64), None, FULL, 40)
    assert not set(walk.rows.tolist()) & set(np.flatnonzero(~readable).tolist())
    # exactly the walk over a graph that never held the unreadable memories
    alone = MemoryGraph()
    for row, keys in enumerate(ents):
        alone.add_memory(row, keys if readable[row] else [])
    for a, b, w in edges:
        if readable[a] and readable[b]:
            alone.link(a, b, w)
    other = alone.ppr(readable, np.array([3]), np.array([1.0]), np.zeros(0, np.int64), None, FULL, 40)
    np.testing.assert_allclose(dict(zip(walk.rows.tolist(), walk.scores.tolist())).get(5, 0.0),
                               dict(zip(other.rows.tolist(), other.scores.tolist())).get(5, 0.0), atol=1e-7)
    assert walk.rows.tolist() == other.rows.tolist()
    np.testing.assert_allclose(walk.scores, other.scores, atol=1e-7)


def test_entity_seeds_reach_memories_naming_them_and_their_neighbours():
    g = MemoryGraph()
    g.add_memory(0, ["priya raman", "halcyon"])
    g.add_memory(1, ["halcyon", "lisbon"])
    g.add_memory(2, ["lisbon"])
    g.add_memory(3, ["unrelated"])
    walk = g.ppr(np.ones(4, bool), np.zeros(0, np.int64), np.zeros(0), np.array([g.entity("priya raman")]), None, FULL, 4)
    assert walk.rows[0] == 0
    assert 2 in walk.rows.tolist()  # two entity hops away: priya -> memory 0 -> halcyon -> 1 -> lisbon -> 2
    assert 3 not in walk.rows.tolist()  # nothing connects it


def test_incremental_writes_equal_a_fresh_build_and_compaction_renumbers():
    g, ents, edges = _graph(seed=2, n=30)
    readable = np.ones(30, dtype=bool)
    before = g.ppr(readable, np.array([0]), np.array([1.0]), np.zeros(0, np.int64), None, FULL, 30)
    g.add_memory(30, ["e1", "e2"])   # writes after a walk fold in on the next walk
    g.link(30, 0, 1.0)
    readable = np.ones(31, dtype=bool)
    after = g.ppr(readable, np.array([0]), np.array([1.0]), np.zeros(0, np.int64), None, FULL, 31)
    assert 30 in after.rows.tolist() and before.rows.size == 30 or 30 in after.rows.tolist()
    fresh = MemoryGraph()
    for row, keys in enumerate(ents + [["e1", "e2"]]):
        fresh.add_memory(row, keys)
    for a, b, w in edges + [(30, 0, 1.0)]:
        fresh.link(a, b, w)
    ref = fresh.ppr(readable, np.array([0]), np.array([1.0]), np.zeros(0, np.int64), None, FULL, 31)
    np.testing.assert_allclose(after.scores, ref.scores, atol=1e-7)
    # delete rows 5 and 6 (tombstones), then compact: the walk over the compacted graph is the
    # walk over the tombstoned one, renumbered
    readable[[5, 6]] = False
    tomb = g.ppr(readable, np.array([0]), np.array([1.0]), np.zeros(0, np.int64), None, FULL, 31)
    keep = np.flatnonzero(readable)
    g.compact(keep)
    new_of_old = {int(o): i for i, o in enumerate(keep)}
    compacted = g.ppr(np.ones(keep.size, bool), np.array([0]), np.array([1.0]), np.zeros(0, np.int64), None, FULL, 31)
    assert compacted.rows.tolist() == [new_of_old[r] for r in tomb.rows.tolist()]
    np.testing.assert_allclose(compacted.scores, tomb.scores, atol=1e-7)


def test_hub_entities_are_not_crossed_and_hops_bound_the_neighbourhood():
    g = MemoryGraph()
    n = 200
    for row in range(n):
        g.add_memory(row, ["caroline", f"topic{row // 2}"])  # a speaker's name on every turn
    near = WalkSettings(hops=1, hub_fraction=0.05, hub_min=10)
    walk = g.ppr(np.ones(n, bool), np.array([10]), np.array([1.0]), np.zeros(0, np.int64), None, near, 50)
    assert sorted(walk.rows.tolist()) == [10, 11]  # its topic's partner only: the hub is not crossed
    assert walk.nodes == 2
    crossing = WalkSettings(hops=1, hub_fraction=1.0, hub_min=10**9)
    wide = g.ppr(np.ones(n, bool), np.array([10]), np.array([1.0]), np.zeros(0, np.int64), None, crossing, 50)
    assert wide.nodes == n


def test_no_seed_gives_an_empty_walk():
    g, _, _ = _graph()
    walk = g.ppr(np.ones(40, bool), np.zeros(0, np.int64), np.zeros(0), np.array([g.entity("nope", create=False)]),
                 None, FULL, 10)
    assert walk.rows.size == 0
    # a seed the caller cannot read is no seed
    readable = np.ones(40, bool)
    readable[3] = False
    assert g.ppr(readable, np.array([3]), np.array([1.0]), np.zeros(0, np.int64), None, FULL, 10).rows.size == 0


def test_a_seed_with_no_edges_keeps_its_own_mass():
    # a memory that names no entity and has no link: the walk is the seed alone (its edge-free
    # neighbourhood once made integer sums of nothing, which failed the division)
    g = MemoryGraph()
    g.add_memory(0, [])
    g.add_memory(1, ["Orion"])
    walk = g.ppr(np.ones(2, bool), np.array([0]), np.array([1.0]), np.zeros(0, np.int64), None, FULL, 10)
    assert walk.rows.tolist() == [0] and walk.scores[0] == pytest.approx(1.0 - FULL.alpha)


@pytest.mark.parametrize("alpha", [0.5, 0.85])
def test_alpha_is_the_chance_of_following_an_edge(alpha):
    g, ents, edges = _graph(seed=4)
    readable = np.ones(40, dtype=bool)
    s = WalkSettings(alpha=alpha, hops=50, hub_fraction=1.0, hub_min=10**9, tol=1e-12, max_iter=1000)
    walk = g.ppr(readable, np.array([7]), np.array([1.0]), np.zeros(0, np.int64), None, s, 40)
    got = np.zeros(40)
    got[walk.rows] = walk.scores
    np.testing.assert_allclose(got, _reference(ents, edges, readable, {7: 1.0}, alpha), atol=1e-6)


def _mean_reference(ents: list[list[str]], edges: list[tuple[int, int, float]], readable: np.ndarray,
                    x: np.ndarray, share: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Each readable memory's neighbours, one by one, as ``neighbour_mean`` documents them (no hubs)."""
    n = len(ents)
    n_r = readable.sum()
    df = {}
    for i, ks in enumerate(ents):
        if readable[i]:
            for k in set(ks):
                df[k] = df.get(k, 0) + 1
    total, weight = np.zeros(x.shape), np.zeros(n)
    for m in np.flatnonzero(readable):
        for a, b, w in edges:
            for p, q in ((a, b), (b, a)):
                if p == m and readable[q]:
                    total[m] += w * x[q]
                    weight[m] += w
        for k in set(ents[m]):
            others = [j for j in range(n) if j != m and readable[j] and k in ents[j]]
            if others:
                we = share * np.log1p(n_r / df[k]) / np.log1p(n_r)
                total[m] += we * np.mean([x[j] for j in others], axis=0)
                weight[m] += we
    return total, weight


@pytest.mark.parametrize("width", [None, 6])
def test_neighbour_mean_matches_a_reference_and_ignores_unreadable_memories(width):
    g, ents, edges = _graph(seed=5)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(40) if width is None else rng.standard_normal((40, width))
    readable = np.ones(40, dtype=bool)
    readable[::4] = False
    total, weight = g.neighbour_mean(x, readable, FULL, entity_share=0.7)
    ref_total, ref_weight = _mean_reference(ents, edges, readable, x, 0.7)
    np.testing.assert_allclose(weight, ref_weight, atol=1e-6)  # link weights are stored as float32
    np.testing.assert_allclose(total, ref_total, atol=1e-6)
    assert not weight[~readable].any()
    # what an unreadable memory holds never moves anyone's mean
    x2 = x.copy()
    x2[~readable] = 1e6
    np.testing.assert_allclose(g.neighbour_mean(x2, readable, FULL, 0.7)[0], total, atol=1e-6)
    if width is not None:  # the one-row form agrees with the whole-graph form
        for row in (1, 2, 7):
            one, w = g.neighbour_mean_of(row, lambda rows: x[rows], readable, FULL, 0.7)
            np.testing.assert_allclose(one, total[row], atol=1e-6)
            assert w == pytest.approx(weight[row])


def test_neighbour_mean_skips_hub_entities_and_follows_writes():
    g = MemoryGraph()
    n = 100
    for row in range(n):
        g.add_memory(row, ["caroline", f"topic{row // 2}"])
    x = np.arange(n, dtype=float)
    near = WalkSettings(hub_fraction=0.05, hub_min=10)
    total, weight = g.neighbour_mean(x, np.ones(n, bool), near)
    assert total[10] / weight[10] == pytest.approx(11.0)  # its topic's partner only, not every turn
    g.link(10, 50, 1.0)                                   # a write after a read is seen by the next one
    total, weight = g.neighbour_mean(x, np.ones(n, bool), near)
    assert 11.0 < total[10] / weight[10] < 50.0
