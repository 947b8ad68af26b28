"""Spaces searched or scored through a registered backend named in their settings
(``[pipeline.spaces.E1_semantic] index = "dense.resident"``), or served by the device defaults on a
device retriever: the rows live in device memory (on a GPU when there is one, else under the CPU
emulation of the kernels), the pipeline ranks as with the built-in index on the host, and writes,
deletes, compaction and a snapshot's state keep the two in step.

A device retriever keeps every such space on the device (``bm25.resident`` included, which weighs
BM25 exactly at query time), so the host retriever it is compared with names ``bm25.numpy``, the
exact reference, for its BM25 space."""

from __future__ import annotations

import numpy as np
import pytest

from bench.harness import teleo_inproc as inproc
from bench.harness.synthetic import CorpusSpec, make_corpus, make_queries
from bench.harness.workloads.scale import memory_of
from teleo_server.errors import InvalidArgument
from teleo_server.pipeline import PipelineSettings, make_retriever
from teleo_server.pipeline.types import Query, StageReport
from teleo_server.query import Overrides

try:
    from _backends import DEVICE, require_device
except ImportError:  # tests/ imported as a package
    from tests._backends import DEVICE, require_device
HOST = {"spaces": {"E1_semantic": {"values": "float32"}, "E6_lexical": {"index": "bm25.numpy"}}}
NAMED = {"spaces": {"E1_semantic": {"values": "float32", "index": "dense.resident"}}}


@pytest.fixture(autouse=True)
def _device_or_emulation():
    require_device()


def _answers(r, queries, profile: str) -> list[list[str]]:
    return [inproc.run_query(r, queries.texts[j], queries.embedding(j), profile, 10).ids for j in range(len(queries))]


def test_the_named_backend_searches_and_ranks_as_the_built_in_index():
    from teleo_server.gpu.backends import ResidentDenseBackend

    c = make_corpus(CorpusSpec(n=300, seed=11))
    queries = make_queries(c, 12, seed=12)
    host, named = inproc.make(HOST, backend="numpy"), inproc.make(NAMED, backend=DEVICE)
    for r in (host, named):
        inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(len(c))))
    space = named.spaces["E1_semantic"]
    assert isinstance(space.backend, ResidentDenseBackend) and space.backend.n == space.index.n
    assert host.spaces["E1_semantic"].backend is host.spaces["E1_semantic"].host
    for profile in ("single_space:E1_semantic", "hybrid", "teleological"):
        assert _answers(named, queries, profile) == _answers(host, queries, profile), profile
    q = Query(text=queries.texts[0], embedding=queries.embedding(0), principal=inproc.PRINCIPAL, top_k=10,
              profile="hybrid", overrides=Overrides(dense_dimension=128))
    detail = {e.stage: e.detail for e in named.retrieve(q) if isinstance(e, StageReport)}["dense"]
    assert detail.startswith("dense_dimension=128 index=dense.resident"), detail


def test_deletes_compaction_and_a_read_state_keep_the_rows_in_step():
    c = make_corpus(CorpusSpec(n=240, seed=13))
    queries = make_queries(c, 10, seed=14)
    host, named = inproc.make(HOST, backend="numpy"), inproc.make(NAMED, backend=DEVICE)
    ids = [memory_of(c, i).id for i in range(len(c))]
    for r in (host, named):
        inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(len(c))))
        r.remove(ids[::3])  # a third deleted: tombstoned in both indexes
    assert _answers(named, queries, "single_space:E1_semantic") == _answers(host, queries, "single_space:E1_semantic")
    for r in (host, named):
        r.compact()  # rows renumbered: the named backend is made again from the built-in rows
    space = named.spaces["E1_semantic"]
    assert space.backend.n == space.index.n == len(c) - len(ids[::3])
    assert _answers(named, queries, "single_space:E1_semantic") == _answers(host, queries, "single_space:E1_semantic")

    # a snapshot's state holds the built-in index only; the device rows are made again on first use
    state = space.__getstate__()
    assert state["backend"] is None and state["host"] is space.host
    space.__setstate__(state)
    assert space.backend is None
    assert _answers(named, queries, "single_space:E1_semantic") == _answers(host, queries, "single_space:E1_semantic")
    assert space.backend is not None and space.backend.n == space.index.n
    for r in (host, named):  # and writes after it land in both
        r.add(memory_of(c, 0), c.embedding(0))
    assert space.backend.n == space.index.n
    assert _answers(named, queries, "hybrid") == _answers(host, queries, "hybrid")


def test_a_device_retriever_keeps_each_space_on_the_device_unless_its_setting_names_a_host_backend():
    """On a device every space an index backend can serve is served by its kind's device default;
    the host-side work runs on the NumPy scorers (no host array goes to the device per call); a
    space whose ``index`` names a host backend stays on the host; a host retriever names none."""
    defaults = {"E1_semantic": "dense.resident", "E13_splade": "sparse.resident", "E6_lexical": "bm25.resident",
                "E12_late": "tokens.resident"}
    device = make_retriever(PipelineSettings(), DEVICE)
    assert {n: s.named for n, s in device.spaces.items() if getattr(s, "named", "")} == defaults
    assert device.ops.name == "numpy" and device.runtime == ("cuda" if DEVICE == "cupy" else "emulated")
    host = make_retriever(PipelineSettings(), "numpy")
    assert not any(getattr(s, "named", "") for s in host.spaces.values()) and host.runtime is None
    pinned = make_retriever(PipelineSettings(spaces={"E1_semantic": {"index": "dense.numpy"}}), DEVICE)
    assert pinned.spaces["E1_semantic"].named == "dense.numpy" and pinned.spaces["E13_splade"].named == "sparse.resident"

    c = make_corpus(CorpusSpec(n=60, seed=41))
    q = make_queries(c, 1, seed=42)
    for r in (device, pinned):
        inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(len(c))))
    query = Query(text=q.texts[0], embedding=q.embedding(0), principal=inproc.PRINCIPAL, top_k=10, profile="teleological")
    details = {e.stage: e.detail for e in device.retrieve(query) if isinstance(e, StageReport)}
    assert "index=dense.resident" in details["dense"] and details["late_interaction"].endswith("index=tokens.resident")
    assert details["sparse_recall"].endswith("scored=on the device")  # BM25 and SPLADE blended there
    from teleo_server.gpu.backends import ResidentBm25Backend, ResidentDenseBackend, ResidentSparseBackend

    assert isinstance(device.spaces["E6_lexical"].backend, ResidentBm25Backend)
    assert isinstance(device.spaces["E13_splade"].backend, ResidentSparseBackend)
    assert not isinstance(pinned.spaces["E1_semantic"].backend, ResidentDenseBackend)
    assert _answers(pinned, q, "teleological") == _answers(device, q, "teleological")


def test_a_failing_write_to_the_named_backend_leaves_both_in_step(monkeypatch):
    c = make_corpus(CorpusSpec(n=30, seed=15))
    r = inproc.make(NAMED, backend=DEVICE)
    inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(20)))
    space = r.spaces["E1_semantic"]

    def refuse(vectors):
        raise MemoryError("device memory exhausted")

    monkeypatch.setattr(space.backend, "add", refuse)
    with pytest.raises(MemoryError):
        r.add(memory_of(c, 20), c.embedding(20))
    assert space.backend is None  # made again from the built-in rows on next use
    assert memory_of(c, 20).id not in r.catalog.row_of
    inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(21, 30)))
    assert space.backend.n == space.index.n
    q = make_queries(c, 1, seed=16)
    assert inproc.run_query(r, q.texts[0], q.embedding(0), "single_space:E1_semantic", 5).ids


def test_an_unknown_or_wrong_kind_of_backend_is_refused_by_name():
    with pytest.raises(InvalidArgument, match=r"pipeline\.spaces\.E1_semantic\.index .*'dense\.nowhere' is not a "
                                              r"registered dense index backend; registered: .*dense\.numpy"):
        make_retriever(PipelineSettings(spaces={"E1_semantic": {"index": "dense.nowhere"}}))
    with pytest.raises(InvalidArgument, match=r"'sparse\.numpy' is not a registered dense index backend"):
        make_retriever(PipelineSettings(spaces={"E1_semantic": {"index": "sparse.numpy"}}))


def test_a_host_backend_named_by_setting_is_used_as_named():
    """``dense.hnsw`` (an hnswlib graph from the first row) searches in place of the exact scan."""
    pytest.importorskip("hnswlib")
    c = make_corpus(CorpusSpec(n=120, seed=17))
    r = inproc.make({"spaces": {"E1_semantic": {"index": "dense.hnsw"}}}, backend="numpy")
    inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(len(c))))
    space = r.spaces["E1_semantic"]
    assert space.backend is not space.host and space.backend.index.uses_hnsw and not space.index.uses_hnsw
    q = make_queries(c, 8, seed=18)
    found = [inproc.run_query(r, q.texts[j], q.embedding(j), "single_space:E1_semantic", 10).ids for j in range(8)]
    assert all(len(ids) == 10 for ids in found)
    exact = inproc.make({}, backend="numpy")
    inproc.build(exact, ((memory_of(c, i), c.embedding(i)) for i in range(len(c))))
    want = [inproc.run_query(exact, q.texts[j], q.embedding(j), "single_space:E1_semantic", 10).ids for j in range(8)]
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, want)])
    assert overlap >= 0.9


@pytest.mark.parametrize("values", ["int8", "float32"])
def test_splade_scored_by_a_named_sparse_backend_ranks_as_the_built_in_index(values):
    """``[pipeline.spaces.E13_splade] index = "sparse.resident"``: the postings in device memory,
    scored by the SpMV kernel, through writes, compaction and a snapshot's state; it is given the
    weights as the built-in index keeps them (by default its int8 codes and a step a row, which the
    device keeps as they are and scores with the host's arithmetic), so both score alike."""
    from teleo_server.gpu.backends import ResidentSparseBackend

    c = make_corpus(CorpusSpec(n=200, seed=19))
    queries = make_queries(c, 10, seed=20)
    splade = {"values": values}
    host = inproc.make({"spaces": {**HOST["spaces"], "E13_splade": splade}}, backend="numpy")
    named = inproc.make({"spaces": {"E1_semantic": {"values": "float32"},
                                    "E13_splade": {**splade, "index": "sparse.resident"}}}, backend=DEVICE)
    for r in (host, named):
        inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(150)))
    for profile in ("single_space:E13_splade", "hybrid"):
        assert _answers(named, queries, profile) == _answers(host, queries, profile), profile
    space = named.spaces["E13_splade"]
    assert isinstance(space.backend, ResidentSparseBackend) and space.backend.n == space.index.n_rows
    from teleo_server.index.backends import SparseBackend
    from teleo_server.index.base import SparseQuery, every_score

    sparse = queries.embedding(0).chunks[0].vectors["splade"]
    q = SparseQuery(sparse.ids, sparse.weights)
    built_in = every_score(SparseBackend(host.ops, index=host.spaces["E13_splade"].index), q)
    if values == "int8":  # the device keeps the index's own codes (a byte a value) and steps: the same bits
        np.testing.assert_array_equal(every_score(space.backend, q), built_in)
        assert all(seg[2].dtype == np.int8 for seg in space.backend.index.segments)
    else:
        np.testing.assert_allclose(every_score(space.backend, q), built_in, rtol=1e-6, atol=1e-7)
    ids = [memory_of(c, i).id for i in range(150)]
    for r in (host, named):  # more writes, deletes and a compaction
        inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(150, 200)))
        r.remove(ids[::4])
    assert space.backend.n == space.index.n_rows
    assert _answers(named, queries, "single_space:E13_splade") == _answers(host, queries, "single_space:E13_splade")
    for r in (host, named):
        r.compact()
    assert _answers(named, queries, "hybrid") == _answers(host, queries, "hybrid")
    assert space.backend.n == space.index.n_rows == space.catalog.n_chunks
    if values == "int8":  # made again from the index's rows: the codes and steps read back exactly
        np.testing.assert_array_equal(every_score(space.backend, q),
                                      every_score(SparseBackend(host.ops, index=host.spaces["E13_splade"].index), q))
    state = space.__getstate__()
    assert state["backend"] is None
    space.__setstate__(state)
    assert _answers(named, queries, "single_space:E13_splade") == _answers(host, queries, "single_space:E13_splade")
    with pytest.raises(InvalidArgument, match=r"'dense\.numpy' is not a registered sparse index backend"):
        make_retriever(PipelineSettings(spaces={"E13_splade": {"index": "dense.numpy"}}))


def test_a_matryoshka_first_pass_on_the_resident_backend_is_rescored_at_full_width():
    """``DenseQuery(dim=...)`` asks for a first pass over a prefix: the resident backend fetches
    four times the rows there and rescores them at full width, as the built-in index does, so the
    top 10 are those of the full-width scan."""
    from teleo_server.gpu.backends import ResidentDenseBackend
    from teleo_server.index.base import DenseQuery

    rng = np.random.default_rng(21)
    scale = np.exp(-np.arange(384) / 48.0).astype(np.float32)  # most of a row's weight in its first dimensions
    rows = rng.standard_normal((600, 384)).astype(np.float32) * scale
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    backend = ResidentDenseBackend(384, runtime="emulated" if DEVICE == "emulated" else "cuda")
    backend.add(list(rows))
    same = []
    for q in rows[rng.choice(600, 20, replace=False)] + 0.3 * rng.standard_normal((20, 384)).astype(np.float32) * scale:
        q = (q / np.linalg.norm(q)).astype(np.float32)
        full = np.argsort(-(rows @ q), kind="stable")[:10]
        got, scores = backend.search(DenseQuery(q, dim=64), 10)
        same.append(len(set(got.tolist()) & set(full.tolist())) / 10)
        np.testing.assert_allclose(scores, rows[got] @ q, atol=2e-3)  # full-width scores, not the prefix's
    assert np.mean(same) >= 0.95, same


def _runtime() -> str:
    return "emulated" if DEVICE == "emulated" else "cuda"


def test_the_resident_token_backend_keeps_a_codecs_codes_and_scores_as_the_host_store():
    """``tokens.resident`` given a codec (the late-interaction space's: tokens rotated to 128
    dimensions, pooled, 2-bit codes) holds those codes on the device, 32 bytes a token, and its
    MaxSim is the host store's, whether it is given float tokens or the codes themselves."""
    from teleo_server.gpu.backends import ResidentTokenBackend
    from teleo_server.heads import TokenCodes
    from teleo_server.index.backends import TokenBackend
    from teleo_server.index.base import TokenQuery
    from teleo_server.index.tokens import TokenStore, codec_spec

    rng = np.random.default_rng(23)

    def unit(x):
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    docs = [unit(rng.standard_normal((int(rng.integers(1, 40)), 384))) for _ in range(120)]
    docs[7] = np.zeros((0, 384), np.float32)  # a chunk without tokens
    spec = codec_spec(384, 128, 2, pool=3, keep=16)
    host = TokenBackend(ops=None, store=TokenStore(128, bits=2, pool=3, keep=16))
    from teleo_server.compute.backend import ops as compute_ops
    host.ops = compute_ops("numpy")
    host.add(docs)
    floats = ResidentTokenBackend(runtime=_runtime(), codec=spec)
    floats.add(docs)
    coded = ResidentTokenBackend(runtime=_runtime(), codec=spec)
    codec = host.store.codec
    coded.add([TokenCodes(codec.encode(d), spec) if d.size else np.zeros((0, 384), np.float32) for d in docs])
    assert coded.store.n_tokens == host.store.n_tokens < sum(len(d) for d in docs)  # pooled
    assert coded.store.nbytes == host.store.nbytes == 32 * host.store.n_tokens + 8 * (len(docs) + 1)
    rows = np.arange(len(docs))
    for q in (unit(rng.standard_normal((n, 384))) for n in (1, 9, 33)):
        want = host.score(rows, TokenQuery(q))
        assert np.isnan(want[7]) and np.isnan(coded.score(rows, TokenQuery(q))[7])
        for backend in (floats, coded):
            np.testing.assert_allclose(backend.score(rows, TokenQuery(q)), want, atol=1e-5, equal_nan=True)
        ids, scores = coded.search(TokenQuery(q), 10)
        np.testing.assert_array_equal(ids, np.argsort(-np.nan_to_num(want, nan=-1.0), kind="stable")[:10])
    other = codec_spec(384, 128, 4)
    with pytest.raises(ValueError, match="cannot join this store"):
        coded.add([TokenCodes(np.zeros((2, other.width), np.uint8), other)])


LATE = {"spaces": {"E1_semantic": {"values": "float32"}, "E12_late": {"index": "tokens.resident"}}}


def _read_back_and_refuse_a_write(r, space, built_in: str, memory, embedding, same) -> None:
    """A space's state as a snapshot holds it (its built-in index, no named backend) read back:
    ``same()`` still holds once the named one is made again; then a write the named backend
    refuses leaves the memory out of both (the named one is made again on next use)."""
    state = space.__getstate__()
    assert state["backend"] is None and state[built_in] is getattr(space, built_in)
    space.__setstate__(state)
    assert same()

    def refuse(vectors):
        raise MemoryError("device memory exhausted")

    space.backend.add = refuse
    with pytest.raises(MemoryError):
        r.add(memory, embedding)
    assert space.backend is None and memory.id not in r.catalog.row_of



def test_the_late_interaction_space_scored_by_a_named_backend_reranks_as_the_built_in_store():
    """``[pipeline.spaces.E12_late] index = "tokens.resident"``: the store's codes in device
    memory, scored by the MaxSim code kernel, through writes, deletes, compaction, a snapshot's
    state and a failed write; the rerank reports the backend."""
    from teleo_server.gpu.backends import ResidentTokenBackend

    c = make_corpus(CorpusSpec(n=220, seed=25))
    queries = make_queries(c, 10, seed=26)
    host, named = inproc.make(HOST, backend="numpy"), inproc.make(LATE, backend=DEVICE)
    ids = [memory_of(c, i).id for i in range(len(c))]
    for r in (host, named):
        inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(160)))
    space = named.spaces["E12_late"]
    assert _answers(named, queries, "teleological") == _answers(host, queries, "teleological")
    assert isinstance(space.backend, ResidentTokenBackend) and space.backend.n == space.store.n
    assert space.backend.store.n_tokens == space.store.n_tokens and space.backend.store.bits == 2
    q = Query(text=queries.texts[0], embedding=queries.embedding(0), principal=inproc.PRINCIPAL, top_k=10,
              profile="teleological")
    detail = {e.stage: e.detail for e in named.retrieve(q) if isinstance(e, StageReport)}["late_interaction"]
    assert detail.endswith("index=tokens.resident"), detail
    for r in (host, named):  # more writes, deletes and a compaction
        inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(160, 200)))
        r.remove(ids[::4])
    assert space.backend.n == space.store.n
    assert _answers(named, queries, "teleological") == _answers(host, queries, "teleological")
    for r in (host, named):
        r.compact()
    assert space.backend is None
    assert _answers(named, queries, "teleological") == _answers(host, queries, "teleological")
    assert space.backend.n == space.store.n == space.catalog.n_chunks
    _read_back_and_refuse_a_write(named, space, "store", memory_of(c, 200), c.embedding(200),
                                  lambda: _answers(named, queries, "teleological") == _answers(host, queries, "teleological"))
    for r in (host, named):
        inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(201, 220)))
    assert _answers(named, queries, "teleological") == _answers(host, queries, "teleological")
    assert space.backend.n == space.store.n
    with pytest.raises(InvalidArgument, match=r"'sparse\.numpy' is not a registered tokens index backend"):
        make_retriever(PipelineSettings(spaces={"E12_late": {"index": "sparse.numpy"}}))


def test_the_resident_dense_backend_scores_from_the_device_rows_and_keeps_no_host_copy():
    """``score`` reads the fp16 rows on the device (any order, repeats, removed rows NaN); the
    backend holds no host array of the rows, so a write appends to the device only."""
    from teleo_server.gpu.backends import ResidentDenseBackend
    from teleo_server.index.base import DenseQuery

    rng = np.random.default_rng(27)
    rows = rng.standard_normal((300, 64)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    backend = ResidentDenseBackend(64, runtime=_runtime())
    for lo in range(0, 300, 7):  # many small writes
        backend.add(list(rows[lo:lo + 7]))
    backend.remove(np.array([4, 250]))
    q = rows[17]
    ids = np.array([250, 5, 17, 5, 0, 4, 299])
    got = backend.score(ids, DenseQuery(q))
    want = (rows[ids].astype(np.float16).astype(np.float32) @ q).astype(np.float32)
    want[[0, 5]] = np.nan
    np.testing.assert_allclose(got, want, atol=2e-3, equal_nan=True)
    assert not [name for name, value in vars(backend).items()
                if isinstance(value, np.ndarray) and value.size >= rows.size], "a host copy of the rows"


def test_bm25_scored_by_a_named_backend_ranks_as_its_reference():
    """``[pipeline.spaces.E6_lexical] index = "bm25.resident"``: raw term frequencies and lengths
    in device memory, each posting weighed in the kernel with the average length of the moment. It
    ranks as the in-process reference named the same way (``bm25.numpy``: exact BM25, weighed at
    query time) through writes, deletes (which move the average), compaction, a snapshot's state
    and a failed write, and nearly as the built-in field (float16 values weighed with an average
    up to 0.5% old: near ties may swap); a caller who may read only some memories is scored by the
    built-in field (N, df and the average over its memories)."""
    from dataclasses import replace

    from teleo_server.domain import AccessLevel, Principal
    from teleo_server.gpu.backends import ResidentBm25Backend
    from teleo_server.pipeline.types import Hit

    c = make_corpus(CorpusSpec(n=260, seed=33))
    queries = make_queries(c, 12, seed=34)
    field = inproc.make({"spaces": {"E1_semantic": {"values": "float32"}}}, backend="numpy")
    host = inproc.make(HOST, backend="numpy")
    named = inproc.make({"spaces": {"E1_semantic": {"values": "float32"}, "E6_lexical": {"index": "bm25.resident"}}},
                        backend=DEVICE)
    ids = [memory_of(c, i).id for i in range(len(c))]

    def memory(i):  # a third of the memories in a namespace the tenant below may not read
        m = memory_of(c, i)
        return replace(m, namespace="other") if i % 3 == 0 else m

    for r in (field, host, named):
        inproc.build(r, ((memory(i), c.embedding(i)) for i in range(180)))
    space = named.spaces["E6_lexical"]
    assert space.backend is None  # made on first use
    for profile in ("single_space:E6_lexical", "hybrid", "teleological"):
        assert _answers(named, queries, profile) == _answers(host, queries, profile), profile
    built_in, exact = _answers(field, queries, "single_space:E6_lexical"), _answers(named, queries, "single_space:E6_lexical")
    assert np.mean([set(a) == set(b) for a, b in zip(built_in, exact)]) >= 0.9
    assert isinstance(space.backend, ResidentBm25Backend) and space.backend.n == space.field.doc_len.n
    for r in (field, host, named):  # more writes and deletes, which move the average length
        inproc.build(r, ((memory(i), c.embedding(i)) for i in range(180, 240)))
        r.remove(ids[1:240:4])
    assert space.backend.n == space.field.doc_len.n
    assert _answers(named, queries, "single_space:E6_lexical") == _answers(host, queries, "single_space:E6_lexical")
    tenant = Principal("t", "t", frozenset({"bench"}), frozenset({"bench"}), AccessLevel.RESTRICTED, "bench")

    def tenant_answers(r):
        out = []
        for j in range(len(queries)):
            q = Query(text=queries.texts[j], embedding=queries.embedding(j), principal=tenant, top_k=10,
                      profile="single_space:E6_lexical", now=inproc.NOW)
            out.append([e.memory.id for e in r.retrieve(q) if isinstance(e, Hit)])
        return out

    mine = tenant_answers(named)
    assert mine == tenant_answers(field) and any(mine)
    assert all(int(m[1:]) % 3 for found in mine for m in found), "a memory the tenant may not read"
    for r in (host, named):
        r.compact()
    assert space.backend is None
    assert _answers(named, queries, "hybrid") == _answers(host, queries, "hybrid")
    assert space.backend.n == space.field.doc_len.n == len(named.catalog)
    _read_back_and_refuse_a_write(named, space, "field", memory(240), c.embedding(240),
                                  lambda: _answers(named, queries, "single_space:E6_lexical")
                                  == _answers(host, queries, "single_space:E6_lexical"))
    for r in (host, named):
        inproc.build(r, ((memory(i), c.embedding(i)) for i in range(241, 260)))
    assert _answers(named, queries, "teleological") == _answers(host, queries, "teleological")
    assert space.backend.n == space.field.doc_len.n
    with pytest.raises(InvalidArgument, match=r"'sparse\.resident' is not a registered bm25 index backend"):
        make_retriever(PipelineSettings(spaces={"E6_lexical": {"index": "sparse.resident"}}))


def test_the_cagra_backend_sends_a_heavily_filtered_search_to_the_exact_scan():
    """The routing of ``dense.cagra`` where cuVS cannot run: a filter admitting at most a tenth of
    the rows (``CagraParams.exact_below``; removed rows count as filtered out) is searched by the
    exact scan over the device rows, never by the graph; a wider one goes to the graph. The graph
    here stands in for cuVS's and records what it is asked (``tests/test_kernels_cagra.py`` runs
    the real one on a GPU with cuVS)."""
    from teleo_server.gpu.backends import CagraBackend, ResidentDenseBackend
    from teleo_server.gpu.cagra import CagraParams
    from teleo_server.index.base import Bitmask, DenseQuery

    class Graph:
        def __init__(self):
            self.asked = []

        def __len__(self):
            return 400

        def search(self, vector, k, mask=None):
            self.asked.append(int(mask.sum()))
            return np.arange(k, dtype=np.int32), np.zeros(k, np.float32)

    rng = np.random.default_rng(35)
    rows = rng.standard_normal((400, 32)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    backend = CagraBackend.__new__(CagraBackend)  # cuVS refuses any runtime but CUDA
    ResidentDenseBackend.__init__(backend, 32, runtime=_runtime())
    backend.params, backend._graph = CagraParams(), Graph()
    backend.add(list(rows))
    backend.remove(np.arange(0, 400, 2))  # half removed: 200 live rows
    q = rows[7]
    few = np.zeros(400, bool)
    few[1:120:3] = True  # 40 admitted, 20 of them live: 5% of the rows
    got, scores = backend.search(DenseQuery(q), 5, Bitmask(few))
    live_few = np.flatnonzero(few & (np.arange(400) % 2 == 1))
    want = live_few[np.argsort(-(rows[live_few] @ q), kind="stable")[:5]]
    assert got.tolist() == want.tolist() and backend._graph.asked == []
    backend.search(DenseQuery(q), 5, Bitmask(np.arange(400) < 300))  # 150 live rows admitted: 37.5%
    assert backend._graph.asked == [150]


@pytest.mark.parametrize("space, name", [("E1_semantic", "dense.resident"), ("E13_splade", "sparse.resident"),
                                         ("E6_lexical", "bm25.resident"), ("E12_late", "tokens.resident")])
def test_a_device_backend_without_its_runtime_stops_the_retriever_at_start(space, name):
    """On ``backend = "numpy"`` a named device backend keeps its rows on the GPU: with no CuPy or
    no device that is said when the retriever is made, naming the setting and what to install,
    not at the first write or query."""
    from teleo_server.gpu import runtime

    ok, _ = runtime.get("cuda").status()
    if ok:
        pytest.skip("a CUDA device is present: the backend can be made")
    with pytest.raises(InvalidArgument, match=rf"pipeline\.spaces\.{space}\.index '{name}': a GPU-resident index "
                                              r"needs the cuda runtime, but .*install the GPU extra"):
        make_retriever(PipelineSettings(spaces={space: {"index": name}}), "numpy")
    assert make_retriever(PipelineSettings(spaces={space: {"index": name}}), "emulated").spaces[space].named == name


def test_sparse_recall_on_the_device_sends_the_top_rows_not_every_score(monkeypatch):
    """Blended on the device, a query's sparse recall sends the host its top rows and the
    candidates' scores; blended on the host over the same resident backends, each space sends the
    scores of every memory its terms reach (here most of them): several times the bytes, for the
    same answers."""
    from teleo_server.gpu import runtime
    from teleo_server.query import Overrides
    from teleo_server.spaces.lexical import LexicalSpace
    from teleo_server.spaces.splade import SpladeSpace

    c = make_corpus(CorpusSpec(n=3000, seed=43))
    queries = make_queries(c, 8, seed=44)
    r = inproc.make({}, backend=DEVICE)
    inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(len(c))))
    rt = runtime.get(r.runtime)
    few = Overrides(max_candidates=100)

    def sent() -> tuple[int, list[list[str]]]:
        _answers(r, queries, "hybrid")  # backends made
        before = rt.downloaded
        got = [inproc.run_query(r, queries.texts[j], queries.embedding(j), "hybrid", 10, overrides=few).ids
               for j in range(len(queries))]
        return (rt.downloaded - before) // len(queries), got

    on_device, answers = sent()
    for space in (LexicalSpace, SpladeSpace):  # the host blends what the backends send it
        monkeypatch.setattr(space, "device_scores", lambda self, ctx, feats: None)
    on_host, host_answers = sent()
    assert host_answers == answers
    assert on_host > 3 * on_device and on_host > 4 * 3000, (on_device, on_host)


def test_a_resident_sparse_backend_keeps_int8_codes_as_a_byte_and_refuses_mixed_rows():
    """Rows given as ``SparseCodes`` (the SPLADE index's int8 codes and step) are kept a byte a
    value with a step a row, scored as the host scores them; rows without terms say nothing of
    the kind; float rows after coded ones are refused rather than mixed."""
    from teleo_server.compute.errors import InternalValueError
    from teleo_server.gpu.backends import ResidentSparseBackend
    from teleo_server.heads import SparseCodes, SparseVector
    from teleo_server.index.base import SparseQuery

    b = ResidentSparseBackend(vocab=50, runtime=_runtime())
    empty = SparseVector.of(np.zeros(0), np.zeros(0))
    b.add([empty, SparseCodes.of([1, 7], [127, -3], 0.02), SparseCodes.of([7, 9], [64, 127], 0.5), empty])
    got = b.every_score(SparseQuery(np.array([7, 9], np.int32), np.array([1.0, 0.25], np.float32)))
    want = np.array([0, np.float32(-3.0) * np.float32(0.02), np.float32(64 + 127 * 0.25) * np.float32(0.5), 0], np.float32)
    np.testing.assert_array_equal(got, np.maximum(want, 0))
    assert b.index.nbytes == sum(int(a.nbytes) for seg in b.index.segments for a in seg)
    assert all(seg[2].dtype == np.int8 for seg in b.index.segments) and b.device_bytes == b.index.nbytes + b.live.nbytes + 16
    with pytest.raises(InternalValueError, match="either int8-coded rows or float rows"):
        b.add([SparseVector.of([3], [1.5])])
