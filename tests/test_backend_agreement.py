"""The CPU and device backends give the same answers: the whole pipeline, numpy against the device
code (on a GPU when there is one, else every kernel under the CPU emulation), over one corpus.

On a device every space that an index backend can serve keeps its rows there (the device defaults:
``dense.resident``, ``sparse.resident``, ``bm25.resident``, ``tokens.resident``). Two deliberate
differences of storage are set aside on the host side here: by default (``values = "auto"``) the
host keeps int8 dense rows (the device float16 ones made from float32), which moves scores by about
1e-3; and the host's built-in BM25 field keeps float16 values weighed with an average length up to
0.5% old, where the device weighs BM25 exactly at query time, as ``bm25.numpy`` does on the host.
"""

from __future__ import annotations

import pytest

from bench.harness import teleo_inproc as inproc
from bench.harness.synthetic import CorpusSpec, make_corpus, make_queries
from bench.harness.workloads.scale import memory_of

SETTINGS = {"spaces": {"E1_semantic": {"values": "float32"}}}
HOST = {"spaces": {**SETTINGS["spaces"], "E6_lexical": {"index": "bm25.numpy"}}}  # exact BM25, as on the device
try:
    from _backends import DEVICE, require_device
except ImportError:  # tests/ imported as a package
    from tests._backends import DEVICE, require_device


@pytest.fixture(scope="module")
def corpus():
    require_device()
    c = make_corpus(CorpusSpec(n=400, seed=3))
    retrievers = {}
    for backend in ("numpy", DEVICE):
        r = inproc.make(HOST if backend == "numpy" else SETTINGS, backend=backend)
        inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(len(c))))
        retrievers[backend] = r
    return c, make_queries(c, 16, seed=4), retrievers


@pytest.mark.parametrize("profile", ["teleological", "hybrid"])
def test_device_backend_ranks_as_the_host_does(corpus, profile):
    _, queries, retrievers = corpus
    for j in range(len(queries)):
        answers = [inproc.run_query(r, queries.texts[j], queries.embedding(j), profile, 10).ids
                   for r in retrievers.values()]
        assert len(answers[0]) == 10
        assert answers[1] == answers[0], f"query {j}"


def test_a_filtered_query_is_blended_on_the_device_as_on_the_host(corpus):
    """Sparse recall on the device (every memory's BM25 and SPLADE scores blended and cut there)
    scales each space by its best *admitted* memory, as the host does: under a filter the same
    rows come out, and the stage says where it scored."""
    from teleo_server.domain import MemoryType
    from teleo_server.pipeline.types import Query, StageReport
    from teleo_server.query import Filters, Overrides

    c, queries, retrievers = corpus
    device = retrievers[DEVICE]
    few = Overrides(max_candidates=12)  # the blend's order decides which memories go on
    for filters in (Filters(memory_types=(MemoryType.EPISODIC,)), Filters(event_start=1.7e9, event_end=1.7e9 + 9e6)):
        for j in range(len(queries)):
            answers = [inproc.run_query(r, queries.texts[j], queries.embedding(j), "hybrid", 10, filters=filters,
                                        overrides=few).ids for r in retrievers.values()]
            assert answers[0] and answers[1] == answers[0], (filters, j)
    q = Query(text=queries.texts[0], embedding=queries.embedding(0), principal=inproc.PRINCIPAL, top_k=10,
              profile="hybrid", filters=Filters(memory_types=(MemoryType.EPISODIC,)))
    detail = {e.stage: e.detail for e in device.retrieve(q) if isinstance(e, StageReport)}["sparse_recall"]
    assert detail.endswith("scored=on the device"), detail


def test_device_backend_sees_every_write_between_queries():
    """Memories stored between queries are found at once on the device too: each write appends to
    the device rows the spaces were first given (nothing is made again from the host rows), which
    stay in step with the host's built-in indexes."""
    require_device()
    c = make_corpus(CorpusSpec(n=240, seed=5))
    queries = make_queries(c, 12, seed=6)
    retrievers = {"numpy": inproc.make(HOST, backend="numpy"), DEVICE: inproc.make(SETTINGS, backend=DEVICE)}
    device = retrievers[DEVICE]
    first: dict[str, object] = {}
    for lo in range(0, len(c), 40):
        for r in retrievers.values():
            for i in range(lo, lo + 40):
                r.add(memory_of(c, i), c.embedding(i))
        for j in range(len(queries)):
            answers = [inproc.run_query(r, queries.texts[j], queries.embedding(j), "teleological", 10).ids
                       for r in retrievers.values()]
            assert answers[1] == answers[0], f"after {lo + 40} memories, query {j}"
        served = {name: space.backend for name, space in device.spaces.items() if getattr(space, "named", "")}
        assert set(served) == {"E1_semantic", "E6_lexical", "E12_late", "E13_splade"}
        for name, backend in served.items():
            assert getattr(backend, "device_bytes", 0) > 0, name  # its rows are device memory
            assert first.setdefault(name, backend) is backend, f"{name} was made again after {lo + 40} memories"
        assert served["E1_semantic"].n == device.spaces["E1_semantic"].index.n
        assert served["E13_splade"].n == device.spaces["E13_splade"].index.n_rows
        assert served["E12_late"].n == device.spaces["E12_late"].store.n
        assert served["E6_lexical"].n == device.spaces["E6_lexical"].field.doc_len.n


def test_memories_of_several_chunks_are_folded_on_the_device_as_on_the_host():
    """Sparse recall on the device folds SPLADE's chunk scores to their memories with the catalog's
    chunk map kept on the device (sent once, then what writes add): with memories of one, two and
    three chunks, written in two rounds, the device answers as the host."""
    from dataclasses import replace

    from teleo_server.domain import EmbeddingSet

    require_device()
    c = make_corpus(CorpusSpec(n=300, seed=9))
    queries = make_queries(c, 10, seed=10)

    def memory(i: int):  # memory i also holds the chunks of the next one or two texts
        extra = [c.embedding((i + j) % len(c)).chunks[0] for j in range(1, 1 + i % 3)]
        emb = c.embedding(i)
        return replace(memory_of(c, i), chunk_count=1 + len(extra)), EmbeddingSet(emb.model_version, emb.chunks + extra)

    retrievers = {"numpy": inproc.make(HOST, backend="numpy"), DEVICE: inproc.make(SETTINGS, backend=DEVICE)}
    for lo, hi in ((0, 200), (200, 300)):
        for r in retrievers.values():
            inproc.build(r, (memory(i) for i in range(lo, hi)))
        assert not retrievers[DEVICE].catalog.one_chunk_each
        for j in range(len(queries)):
            answers = [inproc.run_query(r, queries.texts[j], queries.embedding(j), "hybrid", 10).ids
                       for r in retrievers.values()]
            assert answers[1] == answers[0], (hi, j)
    assert retrievers[DEVICE].spaces["E13_splade"]._chunk_rows.n == retrievers[DEVICE].catalog.n_chunks
