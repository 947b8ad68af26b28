"""Circuit breakers and time-limited calls for the pipeline's strategies and stages.

A breaker counts consecutive failures (an exception, or a call past its time limit) of one named
part. After ``threshold`` of them it *opens*: the part is skipped, and the pipeline answers without
it (a degraded answer, said so in the summary). After ``reset_s`` it lets one call through
(*half-open*): a success closes it, a failure opens it again. Breakers belong to one retriever, so
their state is the server's: ``Breakers.states`` feeds the health report and the metrics.

Strategies run on a small pool of threads at the retrieval's own priority, with a time limit
each. A call past its limit is abandoned, not interrupted (Python threads cannot be): the pipeline
goes on without it, and the retriever waits for it before it releases the indexes
(``State.background``), so an abandoned call never reads an index while a write changes it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from teleo_server.workers import beside_pool

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


@dataclass(slots=True)
class Breaker:
    name: str
    threshold: int = 5
    reset_s: float = 30.0
    failures: int = 0
    opened_at: float = 0.0
    state: str = CLOSED
    trips: int = 0                  # times it has opened
    last_error: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def allow(self, now: float | None = None) -> bool:
        """Whether a call may go ahead (an open breaker lets one through after ``reset_s``)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self.state == OPEN and now - self.opened_at >= self.reset_s:
                self.state = HALF_OPEN
                return True
            return self.state != OPEN

    def probe(self) -> None:
        """Let the next call through as a half-open trial, even before ``reset_s``."""
        with self._lock:
            if self.state == OPEN:
                self.state = HALF_OPEN

    def success(self) -> None:
        with self._lock:
            self.failures, self.state = 0, CLOSED

    def failure(self, error: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            self.failures += 1
            self.last_error = error[:200]
            if self.state == HALF_OPEN or self.failures >= self.threshold:
                if self.state != OPEN:
                    self.trips += 1
                self.state, self.opened_at = OPEN, now


class Breakers:
    """The breakers of one retriever, made on first use by name."""

    def __init__(self, threshold: int = 5, reset_s: float = 30.0) -> None:
        self.threshold, self.reset_s = threshold, reset_s
        self._by_name: dict[str, Breaker] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> Breaker:
        with self._lock:
            b = self._by_name.get(name)
            if b is None:
                b = self._by_name[name] = Breaker(name, self.threshold, self.reset_s)
            return b

    def states(self) -> dict[str, str]:
        """Breaker name -> "closed" | "open" | "half_open"."""
        with self._lock:
            return {name: b.state for name, b in sorted(self._by_name.items())}

    def all(self) -> list[Breaker]:
        with self._lock:
            return [self._by_name[n] for n in sorted(self._by_name)]


def pool() -> ThreadPoolExecutor:
    """The strategies' threads (shared by every retriever of the process), at the priority of the
    thread that runs the retrieval (``workers.beside_pool``). They used to be made once, niced
    10 below whichever thread first asked: below the server's index worker, itself niced, so a
    loaded machine served the strategies last."""
    return beside_pool()


@dataclass(slots=True)
class Outcome:
    name: str
    value: Any = None
    error: str = ""          # "" = it answered
    ms: float = 0.0
    skipped: bool = False    # its breaker was open
    late: Future | None = None  # still running past its time limit


def run_guarded(calls: dict[str, Callable[[], Any]], limits_ms: dict[str, float], breakers: Breakers,
                background: list[Future], parallel: bool = True, probe: bool = False) -> dict[str, Outcome]:
    """Run each call under its breaker and time limit; concurrently when ``parallel``.

    Calls still running at their limit are left in ``background`` for the caller to wait for (and
    in their outcome's ``late``). ``probe``: run even a call whose breaker is open, as its
    half-open trial.
    """
    out: dict[str, Outcome] = {}
    started: dict[str, tuple[Future, float]] = {}
    for name, fn in calls.items():
        br = breakers.get(name)
        if probe:
            br.probe()
        elif not br.allow():
            out[name] = Outcome(name, skipped=True, error=f"circuit open: {br.last_error}")
            continue
        t0 = time.perf_counter()
        if parallel:
            started[name] = (pool().submit(fn), t0)
        else:
            try:
                value = fn()
            except Exception as exc:  # a failing strategy is skipped; the others answer
                br.failure(f"{type(exc).__name__}: {exc}")
                out[name] = Outcome(name, error=f"{type(exc).__name__}: {exc}", ms=(time.perf_counter() - t0) * 1e3)
                continue
            ms = (time.perf_counter() - t0) * 1e3
            limit = limits_ms.get(name, 0.0)
            if limit > 0 and ms > limit:
                br.failure(f"took {ms:.0f} ms, limit {limit:g} ms")
            else:
                br.success()
            out[name] = Outcome(name, value=value, ms=ms)
    for name, (fut, t0) in started.items():
        br = breakers.get(name)
        limit = limits_ms.get(name, 0.0)
        left = max(limit / 1e3 - (time.perf_counter() - t0), 0.0) if limit > 0 else None
        try:
            value = fut.result(timeout=left)
        except FutureTimeout:
            background.append(fut)
            br.failure(f"timed out after {limit:g} ms")
            out[name] = Outcome(name, error=f"timed out after {limit:g} ms", ms=(time.perf_counter() - t0) * 1e3,
                                late=fut)
            continue
        except Exception as exc:
            br.failure(f"{type(exc).__name__}: {exc}")
            out[name] = Outcome(name, error=f"{type(exc).__name__}: {exc}", ms=(time.perf_counter() - t0) * 1e3)
            continue
        br.success()
        out[name] = Outcome(name, value=value, ms=(time.perf_counter() - t0) * 1e3)
    return out


__all__ = ["Breaker", "Breakers", "CLOSED", "HALF_OPEN", "OPEN", "Outcome", "pool", "run_guarded"]
