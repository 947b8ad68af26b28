"""Worker threads that yield the CPU to the gRPC event loop.

Embedding and index computation run on worker threads; the event loop accepts calls, refuses the
ones past the server's limits and writes results. On a machine with few cores a burst of calls
competes with the workers for the CPU, and a refusal that should take a millisecond waits behind
seconds of computation. Workers therefore run at a lower scheduling priority (a higher nice value,
per thread on Linux): they lose nothing on an idle machine, and under load the event loop is served
first. Threads that a worker creates (the embedding runtime's pool) inherit its priority.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Generic, TypeVar

T = TypeVar("T")

DEFAULT_NICE = 10  # CFS weight 110 against the event loop's 1024: about a tenth of a contended core


def lower_priority(step: int = DEFAULT_NICE) -> None:
    """Raise the calling thread's nice value by ``step`` (Linux: per thread; elsewhere a no-op)."""
    if step <= 0 or not hasattr(os, "setpriority") or not hasattr(threading, "get_native_id"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + step))
    except OSError:  # not permitted, or not per-thread here: run at the process's priority
        pass


def worker_pool(name: str, nice: int = DEFAULT_NICE) -> ThreadPoolExecutor:
    """One worker thread, named ``name``, ``nice`` steps below the event loop (0: the same)."""
    return ThreadPoolExecutor(1, thread_name_prefix=name, initializer=lower_priority, initargs=(nice,))


def thread_nice() -> int:
    """The calling thread's nice value (Linux: per thread; elsewhere 0)."""
    if not hasattr(os, "getpriority") or not hasattr(threading, "get_native_id"):
        return 0
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except OSError:
        return 0


def _set_nice(nice: int) -> None:
    """Raise the calling thread's nice value to ``nice`` (it cannot be lowered without privilege)."""
    lower_priority(nice - thread_nice())


_BESIDE: dict[int, ThreadPoolExecutor] = {}
_BESIDE_LOCK = threading.Lock()
BESIDE_THREADS = 4
_local = threading.local()  # ``beside``: set on the beside pools' threads


def _beside_thread(nice: int) -> None:
    _set_nice(nice)
    _local.beside = True


def beside_pool() -> ThreadPoolExecutor:
    """Threads for work a thread hands off to run beside itself (a retrieval's concurrent
    strategies, a search started before the stages that precede it), at the caller's own priority:
    one pool per nice value, made when first asked for. A hand-off to a thread below its caller's
    priority would wait behind any busy thread at the caller's (a search beside the retrieval took
    1.1 ms instead of 0.6 with a busy process on the other core, and the retrieval waited for it),
    and one above it would take the CPU from the event loop the caller yields to."""
    nice = thread_nice()
    with _BESIDE_LOCK:
        pool = _BESIDE.get(nice)
        if pool is None:
            pool = _BESIDE[nice] = ThreadPoolExecutor(BESIDE_THREADS, thread_name_prefix=f"teleo-beside-{nice}",
                                                      initializer=_beside_thread, initargs=(nice,))
        return pool


def side_by_side(calls: Sequence[Callable[[], T]]) -> list[T]:
    """The results of ``calls``, in order: the first runs on the calling thread while the others run
    beside it (``beside_pool``), so that work which releases the interpreter lock (NumPy's and
    SciPy's compiled loops, BLAS) uses a second core. Every call has ended when this returns or
    raises (the first call's error first, then the others' in order). Called on a beside pool's
    own thread, the calls run one after the other there: a pool thread waiting on work queued
    behind it could wait forever."""
    if len(calls) < 2 or getattr(_local, "beside", False):
        return [call() for call in calls]
    pool = beside_pool()
    futures = [pool.submit(call) for call in calls[1:]]
    try:
        first = calls[0]()
    finally:
        wait(futures)
    return [first, *(f.result() for f in futures)]


class Handoff(Generic[T]):
    """Items from worker threads to one coroutine on the event loop, with at most one wake-up of the
    loop outstanding at a time.

    ``loop.call_soon_threadsafe`` writes to the loop's wake-up socket, and the thread that writes
    gives up the interpreter lock for the write and then waits to take it back, up to the switch
    interval (5 ms) while another thread runs Python. One write per item cost a retrieval's index
    thread 0.7 ms at the median and 3 ms at the 90th percentile for the 16 events of a ``hybrid``
    answer (a 2-core AMD EPYC), time in which the index serves no one else. Here an item put while
    a wake-up is on its way joins it: the stage events of a fast pipeline and a list of results go
    over in a few wake-ups, and one that arrives while the loop is waiting still goes at once.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: deque[T] = deque()
        self._lock = threading.Lock()
        self._pending = False  # a wake-up is scheduled and ``take`` has not collected since
        self._ready = asyncio.Event()

    def put(self, item: T, also: Callable[[], None] | None = None, wake: bool = True) -> None:
        """Queue ``item`` (any thread). ``also`` is called on the loop's thread with a wake-up of
        its own, scheduled even when one is already on its way (``take`` may return the item
        before the call has run). ``wake=False`` leaves the item for the next wake-up: an item
        nobody waits for on its own."""
        with self._lock:
            self._items.append(item)
            schedule = also is not None or (wake and not self._pending)
            self._pending = self._pending or schedule
        if schedule:
            self._loop.call_soon_threadsafe(self._wake, also)

    def _wake(self, also: Callable[[], None] | None) -> None:
        if also is not None:
            also()
        self._ready.set()

    async def take(self) -> list[T]:
        """Every item queued so far, in order, waiting (on the loop) until there is one."""
        while True:
            with self._lock:
                items = list(self._items)
                self._items.clear()
                self._pending = False
            if items:
                return items
            # a wake-up scheduled before the lock was taken may still set the event: the next
            # round finds nothing and waits again
            self._ready.clear()
            await self._ready.wait()


__all__ = ["BESIDE_THREADS", "DEFAULT_NICE", "Handoff", "beside_pool", "lower_priority", "side_by_side", "thread_nice", "worker_pool"]
