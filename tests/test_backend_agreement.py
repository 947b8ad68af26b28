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
