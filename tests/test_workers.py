"""Worker threads run below the event loop's priority, so a burst of calls is accepted or refused
without waiting behind embedding and index computation."""

import os
import sys
import threading

import pytest

from teleo_server.config import Settings
from teleo_server.core import MemoryCore
from teleo_server.workers import worker_pool

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is a Linux feature")


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_worker_thread_runs_the_given_steps_below_its_creator():
    base = _nice()
    pool = worker_pool("teleo-test", 3)
    try:
        assert pool.submit(_nice).result() == min(19, base + 3)
    finally:
        pool.shutdown()
    assert _nice() == base  # the caller's own priority is untouched


def test_zero_steps_leave_the_worker_at_the_callers_priority():
    pool = worker_pool("teleo-test", 0)
    try:
        assert pool.submit(_nice).result() == _nice()
    finally:
        pool.shutdown()


def test_threads_a_worker_starts_inherit_its_priority():
    # the embedding runtime creates its thread pool from the embedding worker
    def spawn() -> int:
        out: list[int] = []
        t = threading.Thread(target=lambda: out.append(_nice()))
        t.start()
        t.join()
        return out[0]

    pool = worker_pool("teleo-test", 4)
    try:
        assert pool.submit(spawn).result() == min(19, _nice() + 4)
    finally:
        pool.shutdown()


def test_the_setting_reaches_the_index_worker(tmp_path):
    from teleo_server.store.sqlite import SQLiteStore

    settings = Settings(limits={"worker_nice": 2})
    assert settings.limits.worker_nice == 2
    store = SQLiteStore(tmp_path / "t.db")
    core = MemoryCore(store, embedder=None, retriever=None, worker_nice=settings.limits.worker_nice)  # type: ignore[arg-type]
    try:
        assert core._index_ex.submit(_nice).result() == min(19, _nice() + 2)
    finally:
        core._index_ex.shutdown()
        core._store_ex.shutdown()
        store.close()


def test_out_of_range_nice_is_refused():
    with pytest.raises(Exception, match="worker_nice"):
        Settings(limits={"worker_nice": 25})


def test_the_setting_reaches_the_embedding_worker(tmp_path):
    from teleo_server.embedding import EmbeddingSettings, make_embedder

    embedder = make_embedder(EmbeddingSettings(worker_nice=3, cache_dir=None, model_dir=tmp_path))
    assert embedder._nice == 3  # the thread is created at start(), from this value


def test_work_handed_off_beside_a_thread_runs_at_that_threads_priority():
    from teleo_server.workers import beside_pool

    def hand_off(steps: int) -> tuple[int, int]:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, _nice() + steps))
        return _nice(), beside_pool().submit(_nice).result()

    base = _nice()
    for steps in (0, 3, 7):  # a fresh thread per caller priority: nice cannot be lowered again
        out: list[tuple[int, int]] = []
        t = threading.Thread(target=lambda: out.append(hand_off(steps)))
        t.start()
        t.join()
        caller, worker = out[0]
        assert caller == min(19, base + steps) and worker == caller
    # the retrieval's strategies and prefetched searches use these threads
    from teleo_server.pipeline.resilience import pool

    assert pool() is beside_pool()


def test_side_by_side_runs_the_first_call_here_and_the_others_beside_in_order():
    from teleo_server.workers import side_by_side

    me = threading.get_ident()
    out = side_by_side([lambda: ("a", threading.get_ident()), lambda: ("b", threading.get_ident()),
                        lambda: ("c", threading.get_ident())])
    assert [name for name, _ in out] == ["a", "b", "c"]
    assert out[0][1] == me and out[1][1] != me and out[2][1] != me
    assert side_by_side([]) == [] and side_by_side([lambda: 5]) == [5]


def test_side_by_side_raises_only_once_every_call_has_ended():
    import time

    from teleo_server.workers import side_by_side

    ended: list[str] = []

    def slow() -> None:
        time.sleep(0.05)
        ended.append("slow")

    def fail() -> None:
        raise ValueError("first")

    with pytest.raises(ValueError, match="first"):
        side_by_side([fail, slow])
    assert ended == ["slow"]  # the call beside had finished before the error came out

    def fail_beside() -> None:
        raise KeyError("beside")

    with pytest.raises(KeyError, match="beside"):
        side_by_side([lambda: ended.append("here"), fail_beside])
    assert ended == ["slow", "here"]


def test_side_by_side_on_a_beside_thread_runs_its_calls_there_instead_of_waiting_on_the_pool():
    # every beside thread busy with a caller that itself splits its work: were the inner calls
    # queued on the same pool, each caller would wait on work queued behind it
    from concurrent.futures import wait

    from teleo_server.workers import BESIDE_THREADS, beside_pool, side_by_side

    barrier = threading.Barrier(BESIDE_THREADS, timeout=10)

    def caller() -> tuple[int, list[int]]:
        barrier.wait()  # all pool threads taken at once
        return threading.get_ident(), side_by_side([threading.get_ident, threading.get_ident])

    futures = [beside_pool().submit(caller) for _ in range(BESIDE_THREADS)]
    done, not_done = wait(futures, timeout=20)
    assert not not_done
    for f in done:
        own, inner = f.result()
        assert inner == [own, own]
