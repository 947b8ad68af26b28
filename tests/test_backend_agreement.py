"""The CPU and device backends give the same answers: the whole pipeline, numpy against the device
code (on a GPU when there is one, else every kernel under the CPU emulation), over one corpus.

The dense rows are float32 on both sides here: by default (``values = "auto"``) the host keeps
int8 rows and a device float32, a deliberate difference in storage that moves scores by about 1e-3.
"""

from __future__ import annotations

import pytest

from bench.harness import teleo_inproc as inproc
from bench.harness.synthetic import CorpusSpec, make_corpus, make_queries
from bench.harness.workloads.scale import memory_of
from teleo_server.compute.backend import cupy_status
from teleo_server.gpu import emulator

SETTINGS = {"spaces": {"E1_semantic": {"values": "float32"}}}
DEVICE = "cupy" if cupy_status()[0] else "emulated"


@pytest.fixture(scope="module")
def corpus():
    if DEVICE == "emulated":
        ok, why = emulator.status()
        if not ok:
            pytest.skip(f"no device and no kernel emulation: {why}")
    c = make_corpus(CorpusSpec(n=400, seed=3))
    retrievers = {}
    for backend in ("numpy", DEVICE):
        r = inproc.make(SETTINGS, backend=backend)
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


def test_device_backend_sees_every_write_between_queries():
    """Memories stored between queries are found at once on the device too (its copies of the
    index take the appended rows), and only those rows are sent."""
    if DEVICE == "emulated":
        ok, why = emulator.status()
        if not ok:
            pytest.skip(f"no device and no kernel emulation: {why}")
    from teleo_server.gpu import ops as gpu_ops

    c = make_corpus(CorpusSpec(n=240, seed=5))
    queries = make_queries(c, 12, seed=6)
    retrievers = {b: inproc.make(SETTINGS, backend=b) for b in ("numpy", DEVICE)}
    sent = []
    for lo in range(0, len(c), 40):
        for r in retrievers.values():
            for i in range(lo, lo + 40):
                r.add(memory_of(c, i), c.embedding(i))
        before = gpu_ops._mirror.uploaded_bytes
        for j in range(len(queries)):
            answers = [inproc.run_query(r, queries.texts[j], queries.embedding(j), "hybrid", 10).ids
                       for r in retrievers.values()]
            assert answers[1] == answers[0], f"after {lo + 40} memories, query {j}"
        sent.append(gpu_ops._mirror.uploaded_bytes - before)
    # the dense rows (384 float32 each) of 40 new memories and the sparse index's new postings per
    # round, not the whole index again each time: the last round sends no more than the first
    assert sent[-1] <= 1.5 * sent[0]
