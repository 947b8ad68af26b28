"""Retrievals waiting for the index thread together run as one group (``MemoryCore._run_retrievals``,
``Retriever.retrieve_together``): on a device the dense search of the whole group is one scan of the
rows (the dense stage reports ``batch=``), every caller gets exactly the answer it gets alone, a
request that cannot run fails alone, and the group size follows ``pipeline.retrieval_group``."""

from __future__ import annotations

import asyncio
import threading

import pytest

from bench.harness import teleo_inproc as inproc
from bench.harness.synthetic import CorpusSpec, make_corpus, make_queries
from bench.harness.workloads.scale import memory_of
from teleo_server.core import MemoryCore
from teleo_server.errors import InvalidArgument
from teleo_server.pipeline.types import Hit, Query, StageReport
from teleo_server.store.sqlite import SQLiteStore

try:
    from _backends import DEVICE, require_device
except ImportError:  # tests/ imported as a package
    from tests._backends import DEVICE, require_device


@pytest.fixture(scope="module")
def corpus():
    require_device()
    c = make_corpus(CorpusSpec(n=240, seed=51))
    return c, make_queries(c, 7, seed=52)


def _retriever(c, backend: str, group: int):
    r = inproc.make({"retrieval_group": group}, backend=backend)
    inproc.build(r, ((memory_of(c, i), c.embedding(i)) for i in range(len(c))))
    return r


def _query(queries, j: int, profile: str = "teleological", top_k: int = 10) -> Query:
    return Query(text=queries.texts[j], embedding=queries.embedding(j), principal=inproc.PRINCIPAL, top_k=top_k,
                 profile=profile, now=inproc.NOW)


async def _run_waiting(core: MemoryCore, asked: list[Query]) -> list[list | BaseException]:
    """Every query of ``asked`` queued while the index thread is busy, then let go at once."""
    held = threading.Event()
    core._index_ex.submit(held.wait)  # the index thread is busy: the retrievals wait together

    async def one(q: Query) -> list | BaseException:
        ticket = core.admit(q.principal)
        try:
            return [ev async for ev in core.retrieve(q, 0.0, "", ticket)]
        except Exception as exc:
            return exc
        finally:
            ticket.close()

    tasks = [asyncio.create_task(one(q)) for q in asked]
    await asyncio.sleep(0.2)  # every one queued
    held.set()
    return await asyncio.gather(*tasks)


def _core(tmp_path, retriever) -> MemoryCore:
    return MemoryCore(SQLiteStore(tmp_path / "t.db"), embedder=None, retriever=retriever)  # type: ignore[arg-type]


def _close(core: MemoryCore) -> None:
    core._index_ex.shutdown()
    core._store_ex.shutdown()
    core.store.close()


def test_waiting_retrievals_run_as_one_group_and_each_gets_its_own_answer(corpus, tmp_path):
    c, queries = corpus
    r = _retriever(c, DEVICE, 16)
    asked = [_query(queries, j, profile) for j in range(6) for profile in ("teleological", "hybrid")]
    asked.insert(3, _query(queries, 0, top_k=-1))  # cannot run: fails alone
    alone = [[e.memory.id for e in r.retrieve(q) if isinstance(e, Hit)] for q in asked if q.top_k >= 0]
    core = _core(tmp_path, r)
    try:
        got = asyncio.run(_run_waiting(core, asked))
    finally:
        _close(core)
    assert isinstance(got[3], InvalidArgument) and "top_k" in str(got[3])
    answers = [[e.memory.id for e in events if isinstance(e, Hit)] for i, events in enumerate(got) if i != 3]
    assert answers == alone and all(len(a) == 10 for a in answers)
    assert core.retrieval_groups == {13: 1}
    dense = [[e.detail for e in events if isinstance(e, StageReport) and e.stage == "dense"][0]
             for i, events in enumerate(got) if i != 3]
    # the twelve that ran searched the device rows in one scan
    assert all(d.startswith("dense_dimension=") and d.endswith("index=dense.resident batch=12") for d in dense), dense


def test_the_group_size_is_bounded_and_the_host_runs_each_search_alone(corpus, tmp_path):
    c, queries = corpus
    r = _retriever(c, "numpy", 4)
    asked = [_query(queries, j) for j in range(7)]
    alone = [[e.memory.id for e in r.retrieve(q) if isinstance(e, Hit)] for q in asked]
    core = _core(tmp_path, r)
    try:
        got = asyncio.run(_run_waiting(core, asked))
    finally:
        _close(core)
    assert [[e.memory.id for e in events if isinstance(e, Hit)] for events in got] == alone
    assert core.retrieval_groups == {4: 1, 3: 1}
    # the built-in host index reads its rows once a query: nothing to share, nothing reported
    assert not any("batch=" in e.detail for events in got for e in events if isinstance(e, StageReport))


def test_a_caller_that_leaves_does_not_hold_up_its_group_and_a_stopped_server_says_so(corpus, tmp_path):
    """A caller that stops reading mid-stream gives its slots back and the rest of its group is
    answered; once the index thread is shut down, a retrieval ends UNAVAILABLE instead of waiting."""
    from teleo_server.errors import Unavailable

    c, queries = corpus
    r = _retriever(c, "numpy", 16)
    core = _core(tmp_path, r)
    asked = [_query(queries, j) for j in range(5)]

    async def scenario():
        held = threading.Event()
        core._index_ex.submit(held.wait)

        async def reader(q: Query, leave: bool) -> int:
            ticket = core.admit(q.principal)
            got = 0
            try:
                async for ev in core.retrieve(q, 0.0, "", ticket):
                    got += isinstance(ev, Hit)
                    if leave:
                        break  # the stream is closed here
            finally:
                ticket.close()
            return got

        tasks = [asyncio.create_task(reader(q, leave=(i == 1))) for i, q in enumerate(asked)]
        await asyncio.sleep(0.2)
        held.set()
        counts = await asyncio.wait_for(asyncio.gather(*tasks), 60)
        assert core.admission.computing == 0 and core.admission.open == 0
        core._index_ex.shutdown()
        with pytest.raises(Unavailable, match="the server is stopping"):
            async for _ in core.retrieve(asked[0], 0.0, "", core.admit(asked[0].principal)):
                pass
        return counts

    try:
        counts = asyncio.run(scenario())
    finally:
        _close(core)
    assert counts[1] == 0 and all(n == 10 for i, n in enumerate(counts) if i != 1)
    assert core.retrieval_groups == {5: 1}
