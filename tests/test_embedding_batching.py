"""Coalescing concurrent embed calls: merging, per-caller results, error isolation."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import pytest

from teleo_server import errors
from teleo_server.domain import EmbeddingSet
from teleo_server.embedding.batching import Coalescer


class _Backend:
    """Embeds a text as an EmbeddingSet whose model_version is the text (and the role)."""

    def __init__(self, delay_s: float = 0.01, fail: type[errors.TeleoError] | None = None):
        self.batches: list[list[str]] = []
        self.delay_s = delay_s
        self.fail = fail

    async def run(self, texts: list[str], is_query: list[bool]) -> list[EmbeddingSet]:
        self.batches.append(list(texts))
        await asyncio.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail("backend down")
        if "bad" in texts:
            raise errors.InvalidArgument("bad text", field="texts")
        return [EmbeddingSet(f"{t}|{'q' if q else 'd'}", []) for t, q in zip(texts, is_query)]


def _run(coro_fn):
    return asyncio.run(coro_fn())


@asynccontextmanager
async def _coalescer(run, **kwargs):
    """A Coalescer closed (whatever is still queued failed) when the block ends."""
    c = Coalescer(run, **kwargs)
    try:
        yield c
    finally:
        await c.close(errors.Unavailable("closed"))


@pytest.mark.parametrize("max_batch", [4, 64])
def test_concurrent_calls_merge_and_each_caller_gets_its_own_results(max_batch):
    backend = _Backend()

    async def main():
        async with _coalescer(backend.run, max_batch=max_batch, max_in_flight=1) as c:
            calls = [c.submit([f"a{i}", f"b{i}"], is_query=i % 2 == 0) for i in range(10)]
            return await asyncio.gather(*calls)

    results = _run(main)
    for i, r in enumerate(results):
        role = "q" if i % 2 == 0 else "d"
        assert [s.model_version for s in r] == [f"a{i}|{role}", f"b{i}|{role}"]
    assert sum(len(b) for b in backend.batches) == 20
    assert max(len(b) for b in backend.batches) <= max_batch
    assert len(backend.batches) < 10          # merged: fewer runs than calls


def test_window_waits_for_company():
    backend = _Backend(delay_s=0)

    async def main():
        async with _coalescer(backend.run, max_batch=8, window_s=0.2, max_in_flight=4) as c:
            first = asyncio.create_task(c.submit(["x"], False))
            await asyncio.sleep(0.02)
            second = asyncio.create_task(c.submit(["y"], False))
            return await asyncio.gather(first, second)

    _run(main)
    assert backend.batches == [["x", "y"]]


def test_bad_input_fails_only_its_caller():
    backend = _Backend(delay_s=0.02)

    async def main():
        async with _coalescer(backend.run, max_batch=16, max_in_flight=1) as c:
            blocker = asyncio.create_task(c.submit(["first"], False))
            await asyncio.sleep(0.005)         # the next three queue up behind it, together
            calls = [c.submit(["ok1"], False), c.submit(["bad", "x"], False),
                     c.submit(["ok2"], True)]
            return await blocker, await asyncio.gather(*calls, return_exceptions=True)

    _, (ok1, bad, ok2) = _run(main)
    assert [s.model_version for s in ok1] == ["ok1|d"]
    assert [s.model_version for s in ok2] == ["ok2|q"]
    assert isinstance(bad, errors.InvalidArgument)
    assert ["ok1", "bad", "x"] in backend.batches   # the documents were batched together
    assert backend.batches.index(["ok2"]) < backend.batches.index(["ok1", "bad", "x"])  # the query went first


def test_a_query_goes_before_the_documents_queued_ahead_of_it():
    backend = _Backend(delay_s=0.05)
    roles: list[list[bool]] = []
    run = backend.run

    async def recording(texts, is_query):
        roles.append(list(is_query))
        return await run(texts, is_query)

    async def main():
        async with _coalescer(recording, max_batch=2, max_in_flight=1) as c:
            running = asyncio.create_task(c.submit(["bulk0"], False))
            await asyncio.sleep(0.01)  # bulk0 is being embedded; the rest queue behind it
            bulk = asyncio.create_task(c.submit([f"bulk{i}" for i in range(1, 7)], False))
            await asyncio.sleep(0.005)
            asked = asyncio.create_task(c.submit(["where is staging?"], True))
            while ["where is staging?"] not in backend.batches:  # the query's batch runs; bulk1.. still wait
                await asyncio.sleep(0.005)
            later = asyncio.create_task(c.submit(["and production?"], True))
            return await asyncio.gather(running, bulk, asked, later)

    *_, asked, later = _run(main)
    assert asked[0].model_version == "where is staging?|q" and later[0].model_version == "and production?|q"
    assert all(len(set(r)) == 1 for r in roles)  # each batch one kind
    order = backend.batches
    assert order[:3] == [["bulk0"], ["where is staging?"], ["bulk1", "bulk2"]]
    # documents were waiting: the second query comes after one document batch, not before it
    assert order.index(["and production?"]) == 3 and order[4:] == [["bulk3", "bulk4"], ["bulk5", "bulk6"]]


def test_backend_failure_fails_the_batch_and_reports_it():
    backend = _Backend(fail=errors.Unavailable)
    seen: list[errors.TeleoError] = []

    async def main():
        async with _coalescer(backend.run, max_batch=8, max_in_flight=1, on_error=seen.append) as c:
            return await asyncio.gather(c.submit(["a"], False), c.submit(["b"], False),
                                        return_exceptions=True)

    results = _run(main)
    assert all(isinstance(r, errors.Unavailable) for r in results)
    assert seen and all(isinstance(e, errors.Unavailable) for e in seen)


def test_close_fails_queued_and_in_flight_calls():
    backend = _Backend(delay_s=5.0)

    async def main():
        c = Coalescer(backend.run, max_batch=1, max_in_flight=1)
        calls = [asyncio.create_task(c.submit([t], False)) for t in ("a", "b", "c")]
        await asyncio.sleep(0.05)
        await c.close(errors.Unavailable("closed"))
        return await asyncio.gather(*calls, return_exceptions=True)

    results = _run(main)
    assert all(isinstance(r, errors.Unavailable) for r in results)


def test_documents_go_in_smaller_batches_than_queries():
    backend = _Backend(delay_s=0.02)

    async def main():
        async with _coalescer(backend.run, max_batch=8, document_batch=2, max_in_flight=1) as c:
            blocker = asyncio.create_task(c.submit(["first"], False))
            await asyncio.sleep(0.005)
            docs = asyncio.create_task(c.submit([f"d{i}" for i in range(5)], False))
            queries = asyncio.create_task(c.submit([f"q{i}" for i in range(5)], True))
            return await asyncio.gather(blocker, docs, queries)

    _, docs, queries = _run(main)
    assert [s.model_version for s in docs] == [f"d{i}|d" for i in range(5)]
    assert [s.model_version for s in queries] == [f"q{i}|q" for i in range(5)]
    assert backend.batches == [["first"], [f"q{i}" for i in range(5)], ["d0", "d1"], ["d2", "d3"], ["d4"]]
