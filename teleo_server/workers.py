"""Worker threads that yield the CPU to the gRPC event loop.

Embedding and index computation run on worker threads; the event loop accepts calls, refuses the
ones past the server's limits and writes results. On a machine with few cores a burst of calls
competes with the workers for the CPU, and a refusal that should take a millisecond waits behind
seconds of computation. Workers therefore run at a lower scheduling priority (a higher nice value,
per thread on Linux): they lose nothing on an idle machine, and under load the event loop is served
first. Threads that a worker creates (the embedding runtime's pool) inherit its priority.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

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


__all__ = ["BESIDE_THREADS", "DEFAULT_NICE", "beside_pool", "lower_priority", "side_by_side", "thread_nice", "worker_pool"]
