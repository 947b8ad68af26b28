"""Index backend conformance: every registered backend, the same rows, queries and filters, checked
against an exact NumPy reference written here.

A new backend (GPU-resident, remote) is added by registering it in ``teleo_server.index.base`` and
passing this suite. Exact backends must return the reference's top k (ties and float rounding
aside); approximate ones must reach recall@k >= 0.9. Every backend must return only rows the filter
admits and that were not removed, best first, with the reference's scores, and ``score`` must give
the reference's score (NaN where a row has no signal).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from bench.harness import memories as syn
from teleo_server.compute.backend import cupy_status, ops
from teleo_server.gpu import emulator
from teleo_server.domain import AccessLevel, MemoryType
from teleo_server.heads import SparseVector
from teleo_server.index.base import (Bitmask, DenseQuery, Expression, SparseQuery, TokenQuery, backends, batches,
                                     every_score, make_backend, reach, reached, runs_beside, search_many)
from teleo_server.index.catalog import Catalog
from teleo_server.query import Filters

N = 1500
DIM = 48
VOCAB = 400
REMOVED = np.arange(0, N, 13)  # tombstoned after loading
GPU_TOLERANCE = 3e-3  # fp16 storage on the device


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _data(kind: str, rng: np.random.Generator):
    if kind == "dense":
        return list(_unit(rng.standard_normal((N, DIM)).astype(np.float32)))
    if kind in ("sparse", "bm25"):
        out = []
        for i in range(N):
            n = int(rng.integers(0, 12)) if i % 50 else 0  # a few rows without any term
            ids = np.sort(rng.choice(VOCAB, n, replace=False))
            # BM25 rows hold raw term frequencies (whole counts, or fractional ones: a weighed-down term)
            values = rng.integers(1, 5, n).astype(np.float32) if kind == "bm25" else rng.gamma(2.0, 0.5, n)
            out.append(SparseVector.of(ids, values))
        return out
    return [_unit(rng.standard_normal((int(rng.integers(0, 6)), DIM)).astype(np.float32)).astype(np.float16)
            if i % 40 else np.zeros((0, DIM), np.float16) for i in range(N)]


def _queries(kind: str, rng: np.random.Generator, data) -> list:
    if kind == "dense":
        # near stored rows (so the true top k is well separated from the rest) and random ones
        picks = [_unit(data[int(i)] + 0.3 * rng.standard_normal(DIM).astype(np.float32)) for i in rng.choice(N, 6)]
        return [DenseQuery(q) for q in picks + list(_unit(rng.standard_normal((4, DIM)).astype(np.float32)))]
    if kind in ("sparse", "bm25"):
        out = []
        for _ in range(10):
            ids = np.sort(rng.choice(VOCAB, int(rng.integers(1, 20)), replace=False)).astype(np.int32)
            out.append(SparseQuery(ids, rng.random(ids.size).astype(np.float32)))
        return out
    return [TokenQuery(_unit(rng.standard_normal((int(rng.integers(1, 5)), DIM)).astype(np.float32))) for _ in range(6)]


def _reference(kind: str, data, query) -> np.ndarray:
    """Exact scores of every row (NaN where the row has no signal)."""
    if kind == "dense":
        return (np.stack(data) @ query.vector).astype(np.float32)
    if kind == "sparse":
        weights = dict(zip(query.ids.tolist(), query.weights.tolist()))
        s = np.array([sum(weights.get(t, 0.0) * w for t, w in zip(v.ids.tolist(), v.weights.tolist())) for v in data],
                     dtype=np.float32)
        return np.where(s > 0, s, np.nan).astype(np.float32)
    if kind == "bm25":  # Okapi BM25, k1 0.9, b 0.4, the average length over the rows not removed
        weights = dict(zip(query.ids.tolist(), query.weights.tolist()))
        lengths = np.array([float(np.sum(v.weights)) for v in data])
        alive = np.ones(N, dtype=bool)
        alive[REMOVED] = False
        avgdl = lengths[alive].mean()
        s = np.array([sum(weights.get(t, 0.0) * f * 1.9 / (f + 0.9 * (0.6 + 0.4 * length / avgdl))
                          for t, f in zip(v.ids.tolist(), v.weights.tolist())) for v, length in zip(data, lengths)],
                     dtype=np.float32)
        return np.where(s > 0, s, np.nan).astype(np.float32)
    out = np.full(N, np.nan, dtype=np.float32)
    for i, t in enumerate(data):
        if len(t):
            out[i] = float((query.tokens @ t.astype(np.float32).T).max(axis=1).mean())
    return out


def _filters(rng: np.random.Generator) -> dict[str, np.ndarray | None]:
    return {
        "none": None,
        "half": rng.random(N) < 0.5,
        "one_percent": rng.random(N) < 0.01,
        "one_row": np.isin(np.arange(N), [777]),
        "nothing": np.zeros(N, dtype=bool),
        "short_mask": np.ones(N // 2, dtype=bool),  # rows past a mask are not admitted
    }


BACKENDS = sorted(backends())
# The GPU-resident backends run on a device when there is one, else with every kernel emulated on
# the CPU (the same Python code and .cu sources); CAGRA needs the device.
DEVICE_RUNTIME = "cuda" if cupy_status()[0] else "emulated"


def _build(name: str, data):
    info = backends()[name]
    options = {"ops": ops("numpy")}
    if info.device:
        ok, why = emulator.status()
        if DEVICE_RUNTIME == "emulated" and not ok:
            pytest.skip(f"no device and no kernel emulation: {why}")
        options["runtime"] = DEVICE_RUNTIME
    if info.kind == "dense":
        options["dim"] = DIM
    if info.kind == "tokens":
        options["dim"] = DIM
    backend = make_backend(name, **options)
    rows = np.concatenate([backend.add(data[i:i + 500]) for i in range(0, N, 500)])
    assert rows.tolist() == list(range(N)) and backend.n == N
    backend.remove(REMOVED)
    return backend


@pytest.mark.parametrize("name", BACKENDS)
def test_backend_matches_the_exact_reference_under_every_filter(name):
    info = backends()[name]
    rng = np.random.default_rng(hash(info.kind) % 2**32)
    data = _data(info.kind, rng)
    backend = _build(name, data)
    tol = GPU_TOLERANCE if "resident" in name or "cagra" in name else 2e-3 if info.kind == "tokens" else 1e-5
    alive = np.ones(N, dtype=bool)
    alive[REMOVED] = False
    recalls = []
    for fname, mask in _filters(np.random.default_rng(1)).items():
        admitted = alive.copy() if mask is None else alive & Bitmask(mask).bits(N)
        for query in _queries(info.kind, np.random.default_rng(2), data):
            ref = _reference(info.kind, data, query)
            for k in (1, 10, 100):
                ids, scores = backend.search(query, k, None if mask is None else Bitmask(mask))
                assert ids.dtype == np.int64 and scores.dtype == np.float32 and ids.shape == scores.shape
                assert len(set(ids.tolist())) == ids.size <= k, (fname, k)
                assert admitted[ids].all(), f"{name} returned a row the filter ({fname}) or a removal excludes"
                np.testing.assert_allclose(scores, ref[ids], atol=tol, err_msg=f"{name} {fname} k={k}")
                assert np.all(np.diff(scores) <= tol), "best first"
                candidates = np.flatnonzero(admitted & ~np.isnan(ref))
                want = min(k, candidates.size)
                if want == 0:
                    assert ids.size == 0
                    continue
                kth = np.sort(ref[candidates])[::-1][want - 1]
                if info.exact:
                    assert ids.size == want, (name, fname, k)
                    assert np.all(ref[ids] >= kth - tol), f"{name} missed a better row ({fname}, k={k})"
                else:
                    truth = candidates[np.argsort(-ref[candidates], kind="stable")[:want]]
                    recalls.append(len(set(ids.tolist()) & set(truth.tolist())) / want)
            # score() of arbitrary rows, removed and signal-less ones included
            probe = np.random.default_rng(3).choice(N, 64, replace=False)
            got = backend.score(probe, query)
            expect = np.where(alive[probe], ref[probe], np.nan)
            np.testing.assert_allclose(got, expect, atol=tol, equal_nan=True, err_msg=f"{name} score()")
            # the rows with a signal, as listed by the backend (or derived from score())
            rows, values = reached(backend, query)
            signal = np.flatnonzero(alive & ~np.isnan(ref))
            assert rows.dtype == np.int64 and values.dtype == np.float32
            np.testing.assert_array_equal(rows, signal, err_msg=f"{name} reached()")
            np.testing.assert_allclose(values, ref[signal], atol=tol, err_msg=f"{name} reached()")
            # every row's score at once (0 without a signal or removed), and an upper bound of the
            # rows reached that is known before scoring
            every = every_score(backend, query)
            assert every.dtype == np.float32 and every.shape == (N,)
            np.testing.assert_allclose(every, np.where(alive, np.nan_to_num(np.maximum(ref, 0.0)), 0.0), atol=tol,
                                       err_msg=f"{name} every_score()")
            assert reach(backend, query) >= rows.size, f"{name} reach() is below the rows reached"
    if not info.exact:
        assert np.mean(recalls) >= 0.9, f"{name} recall@k {np.mean(recalls):.3f}"


@pytest.mark.parametrize("name", BACKENDS)
def test_a_search_said_to_run_beside_others_answers_the_same_from_several_threads_at_once(name):
    """A backend whose search ``runs_beside`` other work is searched from a second thread while the
    retrieval's own thread goes on (it may search the same index too): answers must not change."""
    info = backends()[name]
    rng = np.random.default_rng(hash(info.kind) % 2**32)
    data = _data(info.kind, rng)
    backend = _build(name, data)
    queries = _queries(info.kind, np.random.default_rng(2), data)
    claimed = []
    for fname, mask in _filters(np.random.default_rng(1)).items():
        f = None if mask is None else Bitmask(mask)
        if not runs_beside(backend, f):
            continue
        claimed.append(fname)
        alone = [backend.search(q, 10, f) for q in queries]
        with ThreadPoolExecutor(4) as pool:
            together = list(pool.map(lambda q: backend.search(q, 10, f), queries * 4))
        for (ids_a, s_a), (ids_b, s_b) in zip(alone * 4, together):
            np.testing.assert_array_equal(ids_a, ids_b, err_msg=f"{name} {fname}")
            np.testing.assert_array_equal(s_a, s_b, err_msg=f"{name} {fname}")
    # the in-process backends: only the HNSW graph search runs outside the interpreter lock (it
    # does wherever the filter leaves rows to search); an exact NumPy scan, SpMV or MaxSim never
    if name == "dense.hnsw":
        assert claimed == ["none", "half", "one_percent", "one_row", "short_mask"]
    elif name in ("dense.numpy", "sparse.numpy", "bm25.numpy", "tokens.numpy"):
        assert claimed == []


@pytest.mark.parametrize("name", BACKENDS)
def test_several_queries_searched_at_once_answer_as_one_search_each(name):
    """``search_many`` (the backend's own, or one search each): every query under its own filter
    (a Matryoshka prefix among them, for a dense backend) gets exactly the rows and scores its own
    search gives, whatever else shares the batch."""
    info = backends()[name]
    rng = np.random.default_rng(hash(info.kind) % 2**32)
    data = _data(info.kind, rng)
    backend = _build(name, data)
    queries = _queries(info.kind, np.random.default_rng(2), data)
    if info.kind == "dense":
        queries += [DenseQuery(q.vector, dim=16) for q in queries[:3]]
    masks = list(_filters(np.random.default_rng(1)).values())
    filters = [None if masks[i % len(masks)] is None else Bitmask(masks[i % len(masks)]) for i in range(len(queries))]
    for k in (1, 10, 100):
        together = search_many(backend, queries, k, filters)
        assert len(together) == len(queries)
        for (ids, scores), q, f in zip(together, queries, filters):
            want_ids, want_scores = backend.search(q, k, f)
            np.testing.assert_array_equal(ids, want_ids, err_msg=f"{name} k={k}")
            np.testing.assert_array_equal(scores, want_scores, err_msg=f"{name} k={k}")
            assert ids.dtype == np.int64 and scores.dtype == np.float32
    # the device scan reads its rows once for the batch; the others search one query at a time
    assert batches(backend) == (name == "dense.resident")


def test_every_kind_has_an_exact_reference_backend():
    kinds = {b.kind for b in backends().values() if b.exact}
    assert kinds == {"dense", "sparse", "bm25", "tokens"}


def test_each_kind_has_one_exact_device_default_and_a_host_retriever_none():
    from teleo_server.index.base import register_backend, serving

    defaults = {b.kind: b.name for b in backends().values() if b.device_default}
    assert defaults == {"dense": "dense.resident", "sparse": "sparse.resident", "bm25": "bm25.resident",
                        "tokens": "tokens.resident"}
    assert all(backends()[name].exact and backends()[name].device for name in defaults.values())
    assert serving("", "dense", "cuda") == serving("", "dense", "emulated") == "dense.resident"
    assert serving("", "dense", None) == ""  # a host retriever: the built-in index
    assert serving("dense.numpy", "dense", "cuda") == "dense.numpy"  # a setting is kept, on a device too
    with pytest.raises(ValueError, match="the dense kind has a device default already"):
        register_backend("dense.second", "dense", True, lambda **kw: None, device=True, device_default=True)
    with pytest.raises(ValueError, match="only a device backend can be the default on a device"):
        register_backend("dense.host_default", "dense", True, lambda **kw: None, device_default=True)
    assert "dense.second" not in backends() and "dense.host_default" not in backends()


def _catalog(rng: np.random.Generator) -> Catalog:
    cat = Catalog()
    for i in range(400):
        meta = {"project": str(rng.choice(["apollo", "zephyr"]))} if i % 3 else {}
        m = syn.memory(f"m{i}", "text", namespace=str(rng.choice(["team-a", "team-b", "ops", "ops-eu"])),
                       access_level=AccessLevel(int(rng.integers(1, 5))), memory_type=MemoryType(int(rng.integers(1, 6))),
                       event_time=float(rng.integers(0, 1000)), confidence=float(rng.random()),
                       session_id=str(rng.choice(["", "s1", "s2"])), metadata=meta)
        cat.add(m, 1)
    for i in range(0, 400, 17):
        cat.remove(f"m{i}")
    return cat


@pytest.mark.parametrize("seed", range(6))
def test_an_expression_filter_admits_exactly_the_bitmask_rows(seed):
    """The same ACL and request filters as a boolean expression over row attributes (what a remote
    engine is sent) select exactly the rows of the in-process bitmask."""
    rng = np.random.default_rng(seed)
    cat = _catalog(rng)
    scopes = [frozenset({"*"}), frozenset({"team-a"}), frozenset({"ops*"}), frozenset({"team-b", "ops*"})]
    filters = [Filters(), Filters(namespaces=("team-a", "ops-eu")), Filters(memory_types=(MemoryType.EPISODIC, MemoryType.WORKING)),
               Filters(event_start=100.0, event_end=600.0, min_confidence=0.3), Filters(session_id="s2"),
               Filters(metadata=(("project", "apollo"),)), Filters(session_id="nope")]
    for scope in scopes:
        for level in AccessLevel:
            principal = syn.admin(scope, level)
            for f in filters:
                expr = cat.expression(principal, f)
                assert isinstance(expr, Expression)
                np.testing.assert_array_equal(expr.bits(cat.n_rows), cat.mask(principal, f), err_msg=expr.text())


def test_an_expression_renders_as_a_vector_database_filter():
    cat = _catalog(np.random.default_rng(0))
    expr = cat.expression(syn.admin(frozenset({"team-a", "ops*"}), AccessLevel.INTERNAL),
                          Filters(memory_types=(MemoryType.EPISODIC,), event_start=10.0, session_id='s"1'))
    assert expr.text() == ('(alive == true and access_level <= 2 and (namespace in ["team-a"] or namespace like "ops%") '
                           'and memory_type in [1] and event_time >= 10.0 and session_id == "s\\"1")')
