"""`teleo backup` and `teleo restore` against real server processes and real database files."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc

from teleo_server.store import SQLiteStore
from teleo_server.store.schema import MIGRATIONS, SCHEMA_VERSION
from tests._server import REPO

pytestmark = pytest.mark.integration

_BACKED_UP = re.compile(r"^backed up (\d+) memories \((\d+) bytes\) to (.+)$")
_NEEDLE = "The lighthouse on Skerry Point is painted in red and white bands."


def _stub(address: str):
    return memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(address))


def _cli(*args: str, data_dir: Path, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    cmd = prefix or [sys.executable, "-m", "teleo_server.cli"]
    return subprocess.run(
        [*cmd, *args, "--data-dir", str(data_dir)], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def _assert_clean_failure(r: subprocess.CompletedProcess, *words: str) -> None:
    """A non-zero exit with one `teleo: ...` line on stderr that names the problem, no traceback."""
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("teleo: "), r.stderr
    for word in words:
        assert word in lines[0], r.stderr


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _rows(path: Path) -> tuple[list[str], set[str], int]:
    """(integrity_check rows, memory ids, schema version) read straight from a database file."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        check = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        ids = {r[0] for r in conn.execute("SELECT id FROM memories")}
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()
    return check, ids, version


def _empty_database(data_dir: Path) -> Path:
    SQLiteStore(data_dir / "teleo.db").close()
    return data_dir / "teleo.db"


def _digest(*paths: Path) -> list[str | None]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None for p in paths]


def test_backup_while_the_server_writes_then_restore_and_serve(server_process, tmp_path):
    srv = server_process()
    auth = [("authorization", f"Bearer {srv.token}")]
    stub = _stub(srv.address)
    needle = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=_NEEDLE)), metadata=auth, timeout=60).id
    batch = stub.StoreBatch(
        iter(pb.StoreBatchRequest(memory=pb.MemoryInput(content=f"archived note {i} on topic {i % 7}")) for i in range(40)),
        metadata=auth,
        timeout=120,
    )
    assert batch.stored == 40
    acked = [needle, *(item.id for item in batch.items)]

    # A second client keeps storing, one acknowledged write after another, while the backup runs.
    stop, started = threading.Event(), threading.Event()
    errors: list[grpc.RpcError] = []

    def write() -> None:
        writer = _stub(srv.address)
        i = 0
        while not stop.is_set():
            try:
                resp = writer.Store(
                    pb.StoreRequest(memory=pb.MemoryInput(content=f"written during the backup, number {i}")),
                    metadata=auth,
                    timeout=60,
                )
            except grpc.RpcError as exc:
                errors.append(exc)
                return
            acked.append(resp.id)
            started.set()
            i += 1

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        assert started.wait(60), errors
        acked_before = list(acked)  # acknowledged before the backup began: all must be in it
        dest = tmp_path / "backups" / "teleo-backup.db"
        dest.parent.mkdir()
        result = _cli("backup", str(dest), data_dir=srv.data_dir)
        acked_during = len(acked) - len(acked_before)
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors
    assert result.returncode == 0, result.stderr + srv.logs()
    assert acked_during > 0  # the server really was acknowledging writes while the backup ran

    m = _BACKED_UP.match(result.stdout.strip())
    assert m, result.stdout
    memories, size, path = int(m.group(1)), int(m.group(2)), Path(m.group(3))
    assert path == dest and size == dest.stat().st_size
    assert _mode(dest) == 0o600  # it holds token hashes
    assert sorted(os.listdir(dest.parent)) == [dest.name]  # no temporary file left beside it
    check, ids, version = _rows(dest)
    assert check == ["ok"] and version == SCHEMA_VERSION
    assert set(acked_before) <= ids
    assert memories == len(ids) >= len(acked_before)

    fresh = tmp_path / "restored"
    restored = _cli("restore", str(dest), data_dir=fresh)
    assert restored.returncode == 0, restored.stderr
    assert f"restored {memories} memories" in restored.stdout
    assert _mode(fresh / "teleo.db") == 0o600

    # The restored database carries the tokens too: the original development token still works.
    again = server_process(data_dir=fresh)
    stub = _stub(again.address)
    auth = [("authorization", f"Bearer {again.token}")]
    got = stub.Get(pb.GetRequest(ids=acked_before), metadata=auth, timeout=30).memories
    assert [g.id for g in got] == acked_before
    assert got[0].input.content == _NEEDLE
    events = list(stub.Retrieve(pb.RetrieveRequest(text="which lighthouse is painted red and white", top_k=3), metadata=auth, timeout=60))
    results = [e.result.memory.id for e in events if e.WhichOneof("event") == "result"]
    assert results and results[0] == needle


def test_restore_replaces_a_database_only_with_force_and_never_under_a_running_server(server_process, tmp_path):
    srv = server_process()
    auth = [("authorization", f"Bearer {srv.token}")]
    stub = _stub(srv.address)
    kept = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="stored before the backup")), metadata=auth, timeout=60).id
    dest = tmp_path / "b.db"
    made = _cli("backup", str(dest), data_dir=srv.data_dir)
    assert made.returncode == 0, made.stderr
    later = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="stored after the backup")), metadata=auth, timeout=60).id
    srv.signal(signal.SIGKILL)  # leaves teleo.db-wal and -shm behind, holding the later write
    srv.wait()
    db = srv.data_dir / "teleo.db"
    wal, shm = Path(f"{db}-wal"), Path(f"{db}-shm")
    assert wal.exists() and shm.exists()

    before = _digest(db, wal, shm)
    refused = _cli("restore", str(dest), data_dir=srv.data_dir)
    _assert_clean_failure(refused, "--force", str(db))
    assert _digest(db, wal, shm) == before

    replaced = _cli("restore", str(dest), "--force", data_dir=srv.data_dir)
    assert replaced.returncode == 0, replaced.stderr
    # The replaced database's WAL must not be replayed into the restored one.
    assert not wal.exists() and not shm.exists()
    assert _mode(db) == 0o600
    assert sorted(p.name for p in srv.data_dir.iterdir() if p.name.startswith(".")) == []

    again = server_process(data_dir=srv.data_dir)
    stub = _stub(again.address)
    assert [m.id for m in stub.Get(pb.GetRequest(ids=[kept]), metadata=auth, timeout=30).memories] == [kept]
    with pytest.raises(grpc.RpcError) as err:
        stub.Get(pb.GetRequest(ids=[later]), metadata=auth, timeout=30)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND

    # Even with --force, a database a server has open is left alone.
    busy = _cli("restore", str(dest), "--force", data_dir=srv.data_dir)
    _assert_clean_failure(busy, "in use")
    assert sorted(p.name for p in srv.data_dir.iterdir() if p.name.startswith(".")) == []
    assert [m.id for m in stub.Get(pb.GetRequest(ids=[kept]), metadata=auth, timeout=30).memories] == [kept]


def test_backup_refuses_to_overwrite_without_force(tmp_path):
    data = tmp_path / "data"
    _empty_database(data)
    dest = tmp_path / "out" / "b.db"
    dest.parent.mkdir()
    dest.write_bytes(b"an older backup")
    dest.chmod(0o644)

    refused = _cli("backup", str(dest), data_dir=data)
    _assert_clean_failure(refused, str(dest), "--force")
    assert dest.read_bytes() == b"an older backup"
    assert os.listdir(dest.parent) == [dest.name]

    forced = _cli("backup", str(dest), "--force", data_dir=data)
    assert forced.returncode == 0, forced.stderr
    assert _BACKED_UP.match(forced.stdout.strip()).group(1) == "0"
    assert _rows(dest)[0] == ["ok"] and _mode(dest) == 0o600


def test_missing_database_and_bad_destinations_are_clear_errors(tmp_path):
    absent = tmp_path / "no-data"
    r = _cli("backup", str(tmp_path / "b.db"), data_dir=absent)
    _assert_clean_failure(r, str(absent / "teleo.db"))
    assert not (tmp_path / "b.db").exists() and not absent.exists()

    data = tmp_path / "data"
    _empty_database(data)
    _assert_clean_failure(_cli("backup", str(tmp_path / "missing-dir" / "b.db"), data_dir=data), "does not exist")
    (tmp_path / "a-file").write_text("x")
    _assert_clean_failure(_cli("backup", str(tmp_path / "a-file" / "b.db"), data_dir=data), "a-file")
    _assert_clean_failure(_cli("backup", str(tmp_path), data_dir=data), "directory")
    _assert_clean_failure(_cli("backup", str(data / "teleo.db"), "--force", data_dir=data), "live database")

    target = tmp_path / "target"
    _assert_clean_failure(_cli("restore", str(tmp_path / "none.db"), data_dir=target), "none.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    _assert_clean_failure(_cli("restore", str(junk), data_dir=target), "junk.db")
    assert not (target / "teleo.db").exists() and list(target.iterdir()) == []

    newer = tmp_path / "newer.db"
    SQLiteStore(newer).close()
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    _assert_clean_failure(_cli("restore", str(newer), data_dir=target), "newer")
    assert not (target / "teleo.db").exists()


def test_a_write_failure_during_backup_leaves_nothing_behind(tmp_path):
    """The file-size limit makes the copy's writes fail the way a full disk does."""
    data = tmp_path / "data"
    db = _empty_database(data)
    assert db.stat().st_size > 16384
    limited = [
        sys.executable,
        "-c",
        "import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384)); "
        "from teleo_server.cli import main; sys.exit(main(sys.argv[1:]))",
    ]
    out = tmp_path / "out"
    out.mkdir()
    r = _cli("backup", str(out / "b.db"), data_dir=data, prefix=limited)
    _assert_clean_failure(r, str(out / "b.db"))
    assert list(out.iterdir()) == []
    assert _rows(db)[0] == ["ok"]


def test_restore_of_an_older_schema_migrates_at_start(server_process, tmp_path):
    old = tmp_path / "v1.db"
    conn = sqlite3.connect(old, isolation_level=None)
    conn.executescript(MIGRATIONS[0])
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    data = tmp_path / "data"
    r = _cli("restore", str(old), data_dir=data)
    assert r.returncode == 0, r.stderr
    assert _rows(data / "teleo.db")[2] == 1

    srv = server_process(data_dir=data)
    assert f'"to_version": {SCHEMA_VERSION}' in srv.logs()
    stats = _stub(srv.address).Stats(pb.StatsRequest(), metadata=[("authorization", f"Bearer {srv.token}")], timeout=10)
    assert stats.server_version
