"""Index upkeep (compaction, Matryoshka calibration, goal clustering) runs in the background on its
own schedule: reads never run it, and the clustering runs away from the index thread."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc

from bench.harness import memories as syn
from teleo_server.index import purpose
from teleo_server.pipeline import PipelineSettings, make_retriever
from teleo_server.pipeline.types import Query
from tests._server import InThreadServer

GOALS = {"min_memories": 6, "memories_per_goal": 3, "max_goals": 4}


def _clustered(n_per_topic: int = 12):
    rng = np.random.default_rng(3)
    centres = syn.unit(rng.standard_normal((2, 384)).astype(np.float32))
    r = make_retriever(PipelineSettings(goals=GOALS), "numpy")
    for t in range(2):
        for i in range(n_per_topic):
            v = centres[t] + 0.1 * rng.standard_normal(384).astype(np.float32)
            r.add(syn.memory(f"t{t}-{i}", f"topic{t} words note {i}"), syn.embedding(syn.chunk(v, {t: 1.0}, rng=rng)))
    return r, centres


def test_reads_never_maintain(monkeypatch):
    r, centres = _clustered()
    ran = []
    monkeypatch.setattr(purpose.PurposeIndex, "plan", lambda *a, **k: ran.append(1) or [])
    q = Query(text="topic0", embedding=syn.embedding(syn.chunk(centres[0], {0: 1.0})), principal=syn.admin(), top_k=5)
    assert [e for e in r.retrieve(q)] and r.goal_count() == 0 and r.goals() == []
    assert ran == [] and r.maintenance_due()


def test_the_clustering_is_handed_out_and_the_rest_are_short_steps():
    r, _ = _clustered()
    steps = r.maintenance()
    kinds, result = [], None
    while True:
        try:
            step = steps.send(result)
        except StopIteration:
            break
        kinds.append(type(step).__name__)
        result = step.run() if step is not None else None
    assert kinds.count("Offload") >= 1 and r.goal_count() >= 2 and not r.maintenance_due()


def test_the_server_maintains_in_the_background_and_off_the_index_thread(tmp_path, monkeypatch):
    from teleo_server.config import Settings

    threads: list[str] = []
    original = purpose.RefreshJob.cluster

    def cluster(self):
        threads.append(threading.current_thread().name)
        return original(self)

    monkeypatch.setattr(purpose.RefreshJob, "cluster", cluster)
    settings = Settings(port=0, data_dir=tmp_path / "data", dev_token_file=tmp_path / "token",
                        maintenance_seconds=0.05, pipeline={"goals": GOALS})
    srv = InThreadServer.start(settings)
    try:
        stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(srv.address))
        auth = [("authorization", f"Bearer {srv.token}")]
        texts = [f"the build pipeline failed at step {i} with a timeout" for i in range(8)] + \
                [f"we planted tomatoes and basil in bed {i} of the garden" for i in range(8)]
        for text in texts:
            stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=text)), metadata=auth, timeout=60)
        deadline = time.monotonic() + 30
        while stub.Stats(pb.StatsRequest(), metadata=auth, timeout=10).goals == 0:
            assert time.monotonic() < deadline, "no goals appeared without any read"
            time.sleep(0.05)
    finally:
        srv.stop()
    assert threads and not any(name.startswith("teleo-index") for name in threads)


def test_a_round_that_clustered_hands_the_freed_memory_back(tmp_path, monkeypatch):
    """The clustering's temporaries (a copy of every memory vector) stay with the allocator of the
    thread that ran it unless released; a round without it releases nothing."""
    import asyncio

    from teleo_server import core as core_module
    from teleo_server.core import MemoryCore
    from teleo_server.store.sqlite import SQLiteStore

    released: list[str] = []
    monkeypatch.setattr(core_module, "release_memory", lambda: released.append(threading.current_thread().name) or True)
    r, _ = _clustered()
    store = SQLiteStore(tmp_path / "t.db")
    core = MemoryCore(store, embedder=None, retriever=r)  # type: ignore[arg-type]

    async def rounds() -> tuple[bool, bool]:
        return await core.maintain(), await core.maintain()

    try:
        first, second = asyncio.run(rounds())
    finally:
        core._index_ex.shutdown()
        core._store_ex.shutdown()
        store.close()
    assert first and r.goal_count() >= 2 and len(released) == 1
    assert not released[0].startswith("teleo-index")  # off the index thread, like the clustering
    assert second is False and len(released) == 1  # nothing was due: nothing to hand back


def _numpy_huge_pages() -> bool:
    from numpy._core.multiarray import _set_madvise_hugepage

    old = _set_madvise_hugepage(True)
    _set_madvise_hugepage(old)
    return bool(old)


def test_the_server_turns_numpy_huge_pages_off_unless_configured(tmp_path):
    """Partly written index buffers must not grow into whole 2 MB pages behind the server's back:
    NumPy's huge-page request is off once a server is built, and on when the setting says so."""
    from numpy._core.multiarray import _set_madvise_hugepage

    from teleo_server.config import Settings
    from teleo_server.heap import huge_pages

    before = _numpy_huge_pages()
    try:
        assert huge_pages(True) and _numpy_huge_pages()
        for wanted in (False, True):
            settings = Settings(port=0, data_dir=tmp_path / f"data{wanted}", dev_token_file=tmp_path / f"token{wanted}",
                                **({"huge_pages": True} if wanted else {}))
            srv = InThreadServer.start(settings)
            try:
                assert _numpy_huge_pages() is wanted
            finally:
                srv.stop()
    finally:
        _set_madvise_hugepage(before)


_MAPPINGS_PROBE = """
import ctypes, sys
import numpy as np
import pytest
from teleo_server.heap import whole_mappings

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
def mapped():
    return libc.mallinfo2().hblks
def served_by_a_mapping(mb):
    before = mapped()
    block = np.ones(mb << 20, np.uint8)
    own = mapped() == before + 1
    del block
    return own
big = np.ones(16 << 20, np.uint8)
del big  # freeing a 16 MB mapping raises glibc's threshold: smaller blocks now come from a heap
first = served_by_a_mapping(8)  # leaves 8 MB free in the heap
with whole_mappings() as available:
    during = served_by_a_mapping(12)  # more than the heap has free
after = served_by_a_mapping(12)
print(available, first, during, after)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_bulk_load_gives_each_large_block_a_mapping_of_its_own_and_then_serves_them_from_the_heap():
    """During ``whole_mappings`` a 12 MB buffer the heap has no room for gets a mapping of its own
    (and goes back to the system when freed), where glibc's risen threshold would have grown the
    heap for it; afterwards blocks up to 32 MB come from the heaps again."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _MAPPINGS_PROBE], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert out.stdout.split() == ["True", "False", "True", "False"], out.stdout + out.stderr


def test_retrievals_are_counted_together_and_close_writes_what_is_pending(tmp_path):
    """A retrieval's usage counters are not written one transaction a retrieval: those within
    USAGE_FLUSH_SECONDS go in one, to the database and the index alike, and close() writes what
    is still pending."""
    import asyncio

    from bench.harness import memories as syn
    from teleo_server.core import USAGE_FLUSH_SECONDS, MemoryCore
    from teleo_server.pipeline import PipelineSettings, make_retriever
    from teleo_server.store.sqlite import SQLiteStore

    r = make_retriever(PipelineSettings(), "numpy")
    store = SQLiteStore(tmp_path / "t.db")
    items = syn.corpus(3, dim=64, topics=2, seed=0, tokens=4)
    for m, e in items:
        r.add(m, e)
        store.put(m, e)
    a, b, c = (m.id for m, _ in items)
    writes: list[list[str]] = []
    record = store.record_retrieved
    store.record_retrieved = lambda ids: writes.append(list(ids)) or record(ids)  # type: ignore[method-assign]
    from teleo_server.embedding.inprocess import InProcessEmbedder
    from teleo_server.embedding.repository import default_model_dir

    # an embedder never started (close() closes it): these counts need no model
    core = MemoryCore(store, embedder=InProcessEmbedder(default_model_dir()), retriever=r)

    def counts() -> tuple[list[int], list[int]]:
        stored = store.get([a, b, c])
        return ([stored[i].retrieved_count for i in (a, b, c)],
                [r.catalog.memory(r.catalog.row_of[i]).retrieved_count for i in (a, b, c)])

    async def run():
        for ids in ([a, b], [a], [c, a]):  # three retrievals in a row
            core._count_retrieved(ids)
        early = list(writes)
        await asyncio.sleep(USAGE_FLUSH_SECONDS + 0.5)
        after_wait = counts()
        core._count_retrieved([b])
        await core.close()  # at once, not after the flush delay
        return early, after_wait

    early, after_wait = asyncio.run(run())
    assert early == []
    assert writes == [[a, b, a, c, a], [b]]
    assert after_wait == ([3, 1, 1], [3, 1, 1])
    stored = SQLiteStore(tmp_path / "t.db").get([a, b, c])
    assert [stored[i].retrieved_count for i in (a, b, c)] == [3, 2, 1]
