"""Coalescing concurrent embed calls: merging, per-caller results, error isolation."""

from __future__ import annotations

import asyncio

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


@pytest.mark.parametrize("max_batch", [4, 64])
def test_concurrent_calls_merge_and_each_caller_gets_its_own_results(max_batch):
    backend = _Backend()

    async def main():
        c = Coalescer(backend.run, max_batch=max_batch, max_in_flight=1)
        try:
            calls = [c.submit([f"a{i}", f"b{i}"], is_query=i % 2 == 0) for i in range(10)]
            return await asyncio.gather(*calls)
        finally:
            await c.close(errors.Unavailable("closed"))

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
        c = Coalescer(backend.run, max_batch=8, window_s=0.2, max_in_flight=4)
        try:
            first = asyncio.create_task(c.submit(["x"], False))
            await asyncio.sleep(0.02)
            second = asyncio.create_task(c.submit(["y"], False))
            return await asyncio.gather(first, second)
        finally:
            await c.close(errors.Unavailable("closed"))

    _run(main)
    assert backend.batches == [["x", "y"]]


def test_bad_input_fails_only_its_caller():
    backend = _Backend(delay_s=0.02)

    async def main():
        c = Coalescer(backend.run, max_batch=16, max_in_flight=1)
        try:
            blocker = asyncio.create_task(c.submit(["first"], False))
            await asyncio.sleep(0.005)         # the next three queue up behind it, together
            calls = [c.submit(["ok1"], False), c.submit(["bad", "x"], False),
                     c.submit(["ok2"], True)]
            return await blocker, await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await c.close(errors.Unavailable("closed"))

    _, (ok1, bad, ok2) = _run(main)
    assert [s.model_version for s in ok1] == ["ok1|d"]
    assert [s.model_version for s in ok2] == ["ok2|q"]
    assert isinstance(bad, errors.InvalidArgument)
    assert ["ok1", "bad", "x", "ok2"] in backend.batches   # they were batched together


def test_backend_failure_fails_the_batch_and_reports_it():
    backend = _Backend(fail=errors.Unavailable)
    seen: list[errors.TeleoError] = []

    async def main():
        c = Coalescer(backend.run, max_batch=8, max_in_flight=1, on_error=seen.append)
        try:
            return await asyncio.gather(c.submit(["a"], False), c.submit(["b"], False),
                                        return_exceptions=True)
        finally:
            await c.close(errors.Unavailable("closed"))

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
