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
from concurrent.futures import ThreadPoolExecutor

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


__all__ = ["DEFAULT_NICE", "lower_priority", "worker_pool"]
