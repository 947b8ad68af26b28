"""Faults in the store's surroundings: a full disk, a lock held by another process, a read-only
directory. Each must give a status a person can act on, keep reads working, and show in health."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from teleo.v1 import memory_pb2 as pb

from tests._server import REPO

pytestmark = pytest.mark.integration


def _code(fn):
    with pytest.raises(grpc.RpcError) as err:
        fn()
    return err.value.code(), err.value.details()


def _store(stub, auth, text, timeout=30):
    return stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=text, namespace="faults")), metadata=auth, timeout=timeout)


def _hits(stub, auth, text):
    events = list(stub.Retrieve(pb.RetrieveRequest(text=text, top_k=3, filters=pb.RetrieveFilters(namespaces=["faults"])),
                                metadata=auth, timeout=30))
    return [e.result.memory.id for e in events if e.WhichOneof("event") == "result"]


def _store_health(channel) -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="store"), timeout=5).status


def _wait_health(channel, status, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _store_health(channel) == status:
            return
        time.sleep(0.1)
    raise AssertionError(f"store health never became {status}")


@contextlib.contextmanager
def _capped(store, extra_pages: int):
    """The database may grow by only ``extra_pages`` pages: SQLite's own 'database or disk is full'."""
    with store._write_lock:
        pages = store._writer.execute("PRAGMA page_count").fetchone()[0]
        store._writer.execute(f"PRAGMA max_page_count = {pages + extra_pages}")
    try:
        yield
    finally:
        with store._write_lock:
            store._writer.execute("PRAGMA max_page_count = 4294967294")


def test_a_full_disk_refuses_stores_clearly_and_reads_keep_working(api_server, channel, stub, auth):
    kept = _store(stub, auth, "Ravens cache food in the snow for later.").id
    store = api_server.app.core.store
    with _capped(store, 2):
        code, details = _code(lambda: _store(stub, auth, "A memory too large for what is left: " + "x" * 60_000))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "is full" in details and str(store.path) in details
        # reads do not write: Retrieve (whose usage counters are bookkeeping), Get and Stats still answer
        assert _hits(stub, auth, "ravens cache food snow")[0] == kept
        assert stub.Get(pb.GetRequest(ids=[kept]), metadata=auth, timeout=10).memories[0].id == kept
        assert stub.Stats(pb.StatsRequest(), metadata=auth, timeout=10).memories >= 1
        _wait_health(channel, health_pb2.HealthCheckResponse.NOT_SERVING)
    _wait_health(channel, health_pb2.HealthCheckResponse.SERVING)
    assert not _store(stub, auth, "Space again: this one is stored.").duplicate


def test_a_lock_held_by_another_process_gives_unavailable_promptly(api_server, channel, stub, auth):
    kept = _store(stub, auth, "Otters hold hands while they sleep.").id
    other = sqlite3.connect(api_server.app.core.store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        t0 = time.monotonic()
        code, details = _code(lambda: _store(stub, auth, "Written while the database is locked."))
        assert code == grpc.StatusCode.UNAVAILABLE and "locked by another process" in details
        assert time.monotonic() - t0 < 20  # the lock timeout (2 s), not SQLite's default wait
        assert _hits(stub, auth, "otters hold hands")[0] == kept
        _wait_health(channel, health_pb2.HealthCheckResponse.NOT_SERVING)
    finally:
        other.execute("ROLLBACK")
        other.close()
    _wait_health(channel, health_pb2.HealthCheckResponse.SERVING)
    assert _store(stub, auth, "Written after the lock was released.").id


# -- start-up ----------------------------------------------------------------------------------


def _serve(data_dir: Path, tmp_path: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "TELEO_DEV_TOKEN_FILE": str(tmp_path / "token")}
    return subprocess.run([sys.executable, "-m", "teleo_server", "--port", "0", "--data-dir", str(data_dir)],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("teleo: ")]
    assert len(lines) == 1, proc.stderr[-2000:]
    return lines[0]


def test_start_up_with_a_data_dir_that_cannot_exist_says_so_in_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    line = _one_line_error(_serve(blocker / "data", tmp_path))
    assert "cannot open the store" in line and str(blocker) in line


def test_start_up_on_a_locked_database_says_so_in_one_line(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    holder = sqlite3.connect(data / "teleo.db", isolation_level=None)
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        line = _one_line_error(_serve(data, tmp_path))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "locked by another process" in line and str(data / "teleo.db") in line


@contextlib.contextmanager
def _tmpfs(path: Path, size: str, *options: str):
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_start_up_on_a_full_disk_says_so_in_one_line(tmp_path):
    with _tmpfs(tmp_path / "small", "256k") as data:
        with contextlib.suppress(OSError):
            (data / "filler").write_bytes(b"\0" * 1024 * 1024)
        line = _one_line_error(_serve(data, tmp_path))
    assert "full" in line and str(data) in line


def test_start_up_on_a_read_only_directory_says_so_in_one_line(tmp_path):
    with _tmpfs(tmp_path / "ro", "1m", "ro") as data:
        line = _one_line_error(_serve(data, tmp_path))
    assert "cannot open the store" in line and f"{data} is on a read-only file system" in line


def test_index_health_follows_a_probe_of_the_index_thread(tmp_path):
    from teleo_server.config import Settings
    from tests._server import InThreadServer

    settings = Settings(port=0, data_dir=tmp_path / "data", dev_token_file=tmp_path / "token",
                        store_check_seconds=0.1, index_probe_seconds=0.5)
    srv = InThreadServer.start(settings)
    try:
        with grpc.insecure_channel(srv.address) as ch:
            health = health_pb2_grpc.HealthStub(ch)

            def index_status() -> int:
                return health.Check(health_pb2.HealthCheckRequest(service="index"), timeout=5).status

            assert index_status() == health_pb2.HealthCheckResponse.SERVING
            core = srv.app.core
            core._index_ex.submit(time.sleep, 3.0)  # the index thread stuck behind 3 s of work
            deadline = time.monotonic() + 10
            while index_status() != health_pb2.HealthCheckResponse.NOT_SERVING and time.monotonic() < deadline:
                time.sleep(0.05)
            assert index_status() == health_pb2.HealthCheckResponse.NOT_SERVING
            deadline = time.monotonic() + 20
            while index_status() != health_pb2.HealthCheckResponse.SERVING and time.monotonic() < deadline:
                time.sleep(0.05)
            assert index_status() == health_pb2.HealthCheckResponse.SERVING
    finally:
        srv.stop()
