"""Coalesce concurrent embed calls into batches (both embedders use it).

Each text becomes a queue item with its own future. A pump takes a free slot (one per request
that may be in flight), then the first queued item, then whatever else of its kind is queued
(waiting up to ``window_s`` for more) up to ``max_batch`` texts, and runs them as one batch. While
every slot is busy, new calls accumulate and go together when one frees up.

Queries and documents queue apart and a batch holds one kind: a query (a short text someone is
waiting on) goes before the documents queued ahead of it, so a retrieval does not wait for a bulk
store's texts to be embedded, only for the batch already running. Documents are never starved:
while they wait, no two query batches run in a row.

A monitor may set the callbacks of :class:`EmbedObservers` (the coalescer never imports one).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from teleo_server.domain import EmbeddingSet
from teleo_server.errors import Internal, InvalidArgument, TeleoError, Unavailable

log = structlog.get_logger(__name__)

RunBatch = Callable[[list[str], list[bool]], Awaitable[list[EmbeddingSet]]]


@dataclass(slots=True)
class EmbedObservers:
    """Optional callbacks on successful work, called on the event loop (keep them quick).

    batch : ``(texts, seconds)`` of each ``run`` call that returned its vectors.
    call : ``(is_query, seconds)`` of each :meth:`Coalescer.submit` that got its vectors,
        queueing included.
    """

    batch: Callable[[int, float], None] | None = None
    call: Callable[[bool, float], None] | None = None


@dataclass(slots=True)
class _Item:
    text: str
    is_query: bool
    caller: int
    future: asyncio.Future = field(repr=False)


class Coalescer:
    """Runs ``run(texts, is_query)`` on batches of the texts passed to :meth:`submit`.

    Parameters
    ----------
    run : embeds a batch; returns one EmbeddingSet per text, raises TeleoError on failure.
    max_batch : most texts per ``run`` call.
    document_batch : most documents per ``run`` call (``max_batch`` when None): smaller, a query
        that arrives during a bulk store waits less for the batch running.
    window_s : how long a batch's first text waits for company (0: take only what is queued).
    max_in_flight : ``run`` calls outstanding at once.
    on_error : called with every TeleoError a batch raised (e.g. to mark a backend down).
    observers : callbacks on finished batches and calls; may be shared with the embedder
        that owns this coalescer, so they can be set before or after it exists.
    """

    def __init__(self, run: RunBatch, *, max_batch: int, document_batch: int | None = None, window_s: float = 0.0,
                 max_in_flight: int = 1,
                 on_error: Callable[[TeleoError], None] | None = None,
                 observers: EmbedObservers | None = None) -> None:
        self._run = run
        self.observers = observers if observers is not None else EmbedObservers()
        self.max_batch = max_batch
        self.document_batch = min(document_batch or max_batch, max_batch)
        self.window_s = window_s
        self._on_error = on_error
        self._queues: dict[bool, deque[_Item]] = {True: deque(), False: deque()}  # is_query -> items
        self._arrived = asyncio.Event()
        self._last_query = False  # the kind of the last batch taken
        self._slots = asyncio.Semaphore(max_in_flight)
        self._callers = itertools.count()
        self._tasks: set[asyncio.Task] = set()
        self._pump_task = asyncio.create_task(self._pump(), name="embed-coalescer")

    @property
    def pending(self) -> int:
        """Texts queued and not yet taken into a batch (plain lengths: safe from any thread)."""
        return len(self._queues[True]) + len(self._queues[False])

    async def submit(self, texts: list[str], is_query: bool) -> list[EmbeddingSet]:
        loop = asyncio.get_running_loop()
        caller = next(self._callers)
        items = [_Item(t, is_query, caller, loop.create_future()) for t in texts]
        t0 = time.perf_counter()
        self._queues[is_query].extend(items)
        self._arrived.set()
        try:
            results = list(await asyncio.gather(*(i.future for i in items)))
        except BaseException:
            for i in items:
                i.future.cancel()
            raise
        if self.observers.call is not None:
            self.observers.call(is_query, time.perf_counter() - t0)
        return results

    async def _wait_arrival(self) -> None:
        self._arrived.clear()
        await self._arrived.wait()

    async def _collect(self) -> list[_Item]:
        queries, documents = self._queues[True], self._queues[False]
        while not (queries or documents):
            await self._wait_arrival()
        # queries first, unless the last batch was queries and documents are waiting
        kind = bool(queries) and not (self._last_query and documents)
        self._last_query = kind
        queue = self._queues[kind]
        size = self.max_batch if kind else self.document_batch
        batch: list[_Item] = []
        deadline = time.monotonic() + self.window_s
        while True:
            while queue and len(batch) < size:
                batch.append(queue.popleft())
            remaining = deadline - time.monotonic()
            if len(batch) >= size or remaining <= 0:
                break
            try:
                await asyncio.wait_for(self._wait_arrival(), remaining)
            except TimeoutError:
                break
        return [i for i in batch if not i.future.done()]

    async def _pump(self) -> None:
        while True:
            await self._slots.acquire()
            try:
                batch = await self._collect()
            except BaseException:
                self._slots.release()
                raise
            if not batch:
                self._slots.release()
                continue
            task = asyncio.create_task(self._send(batch))
            self._tasks.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        self._slots.release()

    async def _send(self, batch: list[_Item]) -> None:
        t0 = time.perf_counter()
        try:
            results = await self._run([i.text for i in batch], [i.is_query for i in batch])
            if len(results) != len(batch):
                raise Internal(f"{len(results)} embedding sets for {len(batch)} texts")
        except InvalidArgument as exc:
            callers = list(dict.fromkeys(i.caller for i in batch))
            if len(callers) == 1:
                _fail(batch, exc)
                return
            # one caller's bad input must not fail the others it was batched with
            for caller in callers:
                await self._send([i for i in batch if i.caller == caller])
            return
        except TeleoError as exc:
            if self._on_error is not None:
                self._on_error(exc)
            _fail(batch, exc)
            return
        except asyncio.CancelledError:
            _fail(batch, Unavailable("embedder closed"))
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in run(): its callers get Internal
            log.exception("embed.batch_failed", texts=len(batch))
            _fail(batch, Internal(f"embedding failed: {exc!r}"))
            return
        if self.observers.batch is not None:
            self.observers.batch(len(batch), time.perf_counter() - t0)
        for item, result in zip(batch, results):
            if not item.future.done():
                item.future.set_result(result)

    async def close(self, error: TeleoError) -> None:
        """Stop the pump, cancel batches in flight and fail whatever is still queued."""
        self._pump_task.cancel()
        await asyncio.gather(self._pump_task, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for queue in self._queues.values():
            _fail(list(queue), error)
            queue.clear()


def _fail(items: list[_Item], exc: TeleoError) -> None:
    for item in items:
        if not item.future.done():
            item.future.set_exception(exc)


__all__ = ["Coalescer", "EmbedObservers", "RunBatch"]
