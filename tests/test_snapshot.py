"""Index snapshots: a server stopped cleanly writes its indexes beside the database and the next
start reads them back instead of rebuilding them, then indexes again every memory the database's
change journal lists as changed since (a crash after the snapshot, another program's write); any
sign that the snapshot does not match (other settings or code, another database, a journal that no
longer reaches back to it, a damaged file) means a rebuild, never stale answers.

Real servers on real SQLite files with the in-process embedder, and the snapshot file format on
its own.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import structlog
import structlog.testing
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc

from teleo_server import snapshot
from teleo_server.config import Settings
from tests._server import StubbedServer
from tests.test_token_codes_store import TEXTS as NOTES

NS = "snap"
TEXTS = [
    *NOTES,  # billing outage, runbook, staging move, offsite, vitamin D
    "Melanie Smith leads the payments team; she joined from Stripe in 2024.",
    "def get_user_name(user_id): return db.users[user_id].name  # used by the billing export",
    "We moved the nightly backup window to 02:00 UTC because the old one overlapped the batch jobs.",
]
QUERIES = ["what caused the billing outage", "where is the offsite", "who leads payments",
           "why did the backup window move", "getUserName billing export"]
PROFILES = ("teleological", "hybrid", "hipporag", "openclaw")


class Running(StubbedServer):
    """One in-thread server on ``root``'s data directory."""

    def __init__(self, root: Path, **settings) -> None:
        super().__init__(Settings(port=0, data_dir=root / "data", dev_token_file=root / "token", log_format="json",
                                  **settings))

    @property
    def path(self) -> Path:
        return self.settings.data_dir / snapshot.FILE_NAME

    def store(self, texts: list[str], ns: str = NS) -> list[str]:
        return super().store(texts, ns)

    def answers(self) -> dict[tuple[str, str], list[tuple[str, float]]]:
        """(profile, query) -> (id, score) of each result in this test's namespace, best first."""
        return _answers(self.stub, self.auth, pb.RetrieveFilters(namespaces=[NS]))

    def stats(self) -> int:
        return self.stub.Stats(pb.StatsRequest(), metadata=self.auth, timeout=30).memories

    def call(self, coro):
        """Run ``coro`` on the server's own event loop."""
        return self.srv.call(coro)


def test_a_clean_stop_writes_the_indexes_and_the_next_start_reads_them_back(tmp_path):
    first = Running(tmp_path)
    try:
        assert first.core.loaded_from == "store"
        ids = first.store(TEXTS)
        # a deleted memory and a link: tombstones and the memory graph travel too
        first.stub.Delete(pb.DeleteRequest(ids=[ids[1]]), metadata=first.auth, timeout=30)
        first.stub.Update(pb.UpdateRequest(id=ids[2], add_links=[pb.Link(target_id=ids[7], type=pb.LINK_TYPE_RELATES_TO)]),
                          metadata=first.auth, timeout=30)
        before = first.answers()
        path = first.path
    finally:
        first.stop()
    meta = snapshot.trailer(path)
    assert meta["memories"] == len(TEXTS) - 1 and meta["model_version"]
    assert path.stat().st_mode & 0o777 == 0o600  # it holds the memories' text

    snapshot.partial(path).write_bytes(b"what a stop killed while it wrote left")
    second = Running(tmp_path)
    try:
        assert second.core.loaded_from == "snapshot" and 0 < second.core.load_seconds < 30  # teleo_index_load_seconds
        assert path.exists()  # kept: with the journal, what a start after a crash reads
        assert not snapshot.partial(path).exists()
        assert second.stats() == len(TEXTS) - 1
        assert second.answers() == before
        assert all(before[p, QUERIES[0]] for p in PROFILES)
        # the restored indexes take writes as the rebuilt ones would
        (new_id,) = second.store(["The billing outage postmortem is due on Friday."])
        got = second.answers()
        assert new_id in [i for i, _ in got["teleological", QUERIES[0]]]
        after_write = got
    finally:
        second.stop()

    # a rebuild from the store finds the same memories (the order of near ties may differ: the
    # rebuilt indexes hold no tombstones and number the rows afresh)
    third = Running(tmp_path, index_snapshot=False)
    try:
        assert third.core.loaded_from == "store" and not third.path.exists()
        rebuilt = third.answers()
        assert {k: {i for i, _ in v} for k, v in rebuilt.items()} == {k: {i for i, _ in v} for k, v in after_write.items()}
    finally:
        third.stop()
    assert not (tmp_path / "data" / snapshot.FILE_NAME).exists()  # off: none written


def _stopped_with_snapshot(tmp_path: Path, **settings) -> tuple[list[str], Path]:
    first = Running(tmp_path, **settings)
    try:
        ids = first.store(TEXTS[:4])
    finally:
        first.stop()
    path = tmp_path / "data" / snapshot.FILE_NAME
    assert path.exists()
    return ids, path


def _start_unused(root: Path, **settings) -> tuple[Running, str]:
    """A server started on ``root`` and why it did not read the snapshot there."""
    with structlog.testing.capture_logs() as logs:
        srv = Running(root, **settings)
    reasons = [e["reason"] for e in logs if e["event"] == "index.snapshot_unused"]
    assert reasons and srv.core.loaded_from == "store", logs
    return srv, reasons[-1]


def _start_read(root: Path, **settings) -> tuple[Running, dict]:
    """A server started on ``root`` that read the snapshot there, and its ``index.loaded`` event."""
    with structlog.testing.capture_logs() as logs:
        srv = Running(root, **settings)
    loaded = [e for e in logs if e["event"] == "index.loaded"]
    assert srv.core.loaded_from == "snapshot" and loaded and loaded[-1]["source"] == "snapshot", logs
    return srv, loaded[-1]


def _result(stub, auth, text: str, memory_id: str):
    """The memory ``memory_id`` as a retrieval for ``text`` returns it: the index's copy of it,
    counters included (Get reads the database's)."""
    events = stub.Retrieve(pb.RetrieveRequest(text=text, top_k=10), metadata=auth, timeout=60)
    (got,) = [e.result.memory for e in events if e.WhichOneof("event") == "result" and e.result.memory.id == memory_id]
    return got


def test_writes_by_another_program_after_the_snapshot_are_indexed_at_start(tmp_path):
    ids, path = _stopped_with_snapshot(tmp_path)
    db = tmp_path / "data" / "teleo.db"  # another program, through SQLite
    _sql(db, "DELETE FROM memories WHERE id = ?", ids[0])
    _sql(db, "UPDATE memories SET namespace = 'moved' WHERE id = ?", ids[2])
    _sql(db, "UPDATE memories SET used_count = used_count + 3 WHERE id = ?", ids[1])
    again, loaded = _start_read(tmp_path)
    try:
        # the journal's triggers saw the three: two memories indexed again, one counter copied
        assert (loaded["reindexed"], loaded["counters"]) == (2, 1) and again.core.load_reindexed == 2
        assert again.stats() == 3  # one deleted (the moved one still counts: the token reads every namespace)
        found = {i for v in again.answers().values() for i, _ in v}
        assert ids[0] not in found and ids[2] not in found and ids[1] in found
        moved = _answers(again.stub, again.auth, pb.RetrieveFilters(namespaces=["moved"]))
        assert ids[2] in {i for v in moved.values() for i, _ in v}
        assert _result(again.stub, again.auth, TEXTS[1], ids[1]).used_count == 3
    finally:
        again.stop()


def _sql(db: Path, statement: str, *args) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(statement, args)
    conn.close()


def test_writes_by_another_program_while_the_server_runs_are_indexed_before_its_snapshot(tmp_path):
    srv = Running(tmp_path)
    try:
        ids = srv.store(TEXTS[:4])
        srv.stub.Delete(pb.DeleteRequest(ids=[ids[3]]), metadata=srv.auth, timeout=30)  # its own
        _sql(tmp_path / "data" / "teleo.db", "DELETE FROM memories WHERE id = ?", ids[0])
        assert ids[0] in {i for v in srv.answers().values() for i, _ in v}  # a running server does not watch
    finally:
        with structlog.testing.capture_logs() as logs:
            srv.stop()
    (caught,) = [e for e in logs if e["event"] == "index.caught_up"]
    assert (caught["reindexed"], caught["counters"]) == (1, 0)  # the other program's delete only
    again, loaded = _start_read(tmp_path)
    try:
        assert (loaded["reindexed"], loaded["counters"]) == (0, 0)
        found = {i for v in again.answers().values() for i, _ in v}
        assert ids[0] not in found and ids[3] not in found and {ids[1], ids[2]} <= found
    finally:
        again.stop()


def test_a_stop_that_cannot_index_another_programs_change_keeps_the_snapshot_it_read(tmp_path):
    ids, path = _stopped_with_snapshot(tmp_path)
    srv, _ = _start_read(tmp_path)
    retriever = srv.core.retriever
    add = retriever.add

    def broken(memory, emb):
        raise RuntimeError("an index that fails halfway")

    try:
        _sql(tmp_path / "data" / "teleo.db", "UPDATE memories SET namespace = 'moved' WHERE id = ?", ids[1])
        retriever.add = broken  # the stop's catch-up indexes that memory again, and fails
    finally:
        with structlog.testing.capture_logs() as logs:
            srv.stop()
        retriever.add = add
    events = [e["event"] for e in logs]
    assert "index.catch_up_failed" in events and "index.snapshot_written" not in events
    assert [e["reason"] for e in logs if e["event"] == "index.snapshot_skipped"] == ["an index call failed during this run"]
    again, loaded = _start_read(tmp_path)  # the snapshot it read, and the journal since
    try:
        assert loaded["reindexed"] == 1
        moved = _answers(again.stub, again.auth, pb.RetrieveFilters(namespaces=["moved"]))
        assert ids[1] in {i for v in moved.values() for i, _ in v}
        assert ids[1] not in {i for v in again.answers().values() for i, _ in v}
    finally:
        again.stop()


def test_a_snapshot_of_another_database_or_past_the_journal_is_not_read(tmp_path):
    ids, path = _stopped_with_snapshot(tmp_path)
    db = tmp_path / "data" / "teleo.db"
    # the database as it was at this snapshot, put back after a later one
    saved = tmp_path / "teleo.db.saved"
    saved.write_bytes(db.read_bytes())  # closed cleanly: the file alone holds every write
    later, _ = _start_read(tmp_path)
    try:
        later.store(["A note written after the copy was taken."])
    finally:
        later.stop()
    for leftover in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        leftover.unlink(missing_ok=True)
    db.write_bytes(saved.read_bytes())
    older, reason = _start_unused(tmp_path)
    try:
        assert "older than the snapshot" in reason and older.stats() == 4 and not path.exists()
    finally:
        older.stop()  # writes this database's own

    # a journal pruned past the snapshot (as a start that rebuilt prunes it) no longer lists
    # every change since; another database in its place has an id of its own
    for change, why in (("UPDATE meta SET value = '1000000' WHERE key = 'changes_pruned_through'",
                         "no longer lists every change"),
                        ("UPDATE meta SET value = 'another' WHERE key = 'database_id'", "another database")):
        _sql(db, change)
        srv, reason = _start_unused(tmp_path)
        try:
            assert why in reason and srv.stats() == 4
        finally:
            srv.stop()  # writes this database's own


def test_a_replay_that_fails_means_a_rebuild(tmp_path):
    ids, path = _stopped_with_snapshot(tmp_path)
    _sql(tmp_path / "data" / "teleo.db", "UPDATE memories SET importance = 0.9 WHERE id = ?", ids[3])
    from teleo_server.pipeline.retriever import TeleologicalRetriever

    add = TeleologicalRetriever.add
    calls = []

    def failing(self, memory, emb):
        if self.catalog.row_of and not calls:  # the first add into restored indexes
            calls.append(memory.id)
            raise RuntimeError("an index that fails halfway")
        return add(self, memory, emb)

    TeleologicalRetriever.add = failing
    try:
        with structlog.testing.capture_logs() as logs:
            srv = Running(tmp_path)
    finally:
        TeleologicalRetriever.add = add
    try:
        assert calls == [ids[3]] and srv.core.loaded_from == "store"
        assert any(e["event"] == "index.snapshot_replay_failed" for e in logs)
        assert srv.stats() == 4 and len(srv.core.retriever) == 4  # the rebuild, not the half-replayed snapshot
        found = {i for v in srv.answers().values() for i, _ in v}
        assert set(ids) <= found
    finally:
        srv.stop()


def test_other_settings_or_a_damaged_file_mean_a_rebuild(tmp_path):
    _, path = _stopped_with_snapshot(tmp_path)
    changed, reason = _start_unused(tmp_path, pipeline={"spaces": {"E6_lexical": {"k1": 1.5}}})
    try:
        assert "other code or settings" in reason
    finally:
        changed.stop()
    assert path.exists()
    data = bytearray(path.read_bytes())
    data[len(snapshot.MAGIC) + 100] ^= 0xFF  # one flipped byte in the pickled state
    path.write_bytes(bytes(data))
    damaged, reason = _start_unused(tmp_path, pipeline={"spaces": {"E6_lexical": {"k1": 1.5}}})
    try:
        assert "checksum" in reason
        assert damaged.stats() == 4
    finally:
        damaged.stop()


def _first_answer(srv) -> list[str]:
    events = srv.stub.Retrieve(pb.RetrieveRequest(text="where did the staging cluster move", top_k=1),
                               metadata=srv.auth, timeout=60)
    return [e.result.memory.input.content for e in events if e.WhichOneof("event") == "result"]


def test_no_snapshot_after_an_index_call_failed_or_before_the_indexes_were_loaded(tmp_path):
    srv = Running(tmp_path)
    retriever = srv.core.retriever
    add = retriever.add

    def broken(memory, emb):
        raise RuntimeError("an index that fails halfway")

    # a write whose indexing failed, and fails again when the stop tries it once more: no snapshot
    try:
        srv.store(TEXTS[:2])
        retriever.add = broken
        with pytest.raises(grpc.RpcError):
            srv.store(TEXTS[2:3])  # committed to the store, never indexed
    finally:
        with structlog.testing.capture_logs() as logs:
            srv.stop()
        retriever.add = add
    assert [e["reason"] for e in logs if e["event"] == "index.snapshot_skipped"] == [
        "writes whose indexing failed are not indexed yet"]
    assert not (tmp_path / "data" / snapshot.FILE_NAME).exists()
    again = Running(tmp_path)  # rebuilt: the memory the failed call stored is found again
    try:
        assert again.core.loaded_from == "store" and again.stats() == 3
        assert _first_answer(again) == [TEXTS[2]]
        # one that the stop indexes: the snapshot is written, and holds it
        retriever, add = again.core.retriever, again.core.retriever.add
        retriever.add = broken
        with pytest.raises(grpc.RpcError):
            again.store(TEXTS[3:4])
        retriever.add = add
    finally:
        with structlog.testing.capture_logs() as logs:
            again.stop()
    assert [e["event"] for e in logs if e["event"].startswith("index.snapshot")] == ["index.snapshot_written"]
    third = Running(tmp_path)
    try:
        assert third.core.loaded_from == "snapshot" and third.stats() == 4
        # an index call that fails without saying what it left undone (upkeep here) makes the
        # indexes suspect: no snapshot at this stop, and the next start rebuilds
        due = third.core.retriever.maintenance_due
        third.core.retriever.maintenance_due = lambda: (_ for _ in ()).throw(RuntimeError("upkeep failed"))
        with pytest.raises(RuntimeError):
            third.call(third.core.maintain())
        third.core.retriever.maintenance_due = due
    finally:
        with structlog.testing.capture_logs() as logs:
            third.stop()
    assert [e["reason"] for e in logs if e["event"] == "index.snapshot_skipped"] == ["an index call failed during this run"]
    (tmp_path / "data" / snapshot.FILE_NAME).unlink()  # the one the second server's stop wrote

    # a server stopped before its indexes were loaded (a start that failed) writes none either
    import asyncio

    from teleo_server.server import build_server

    async def stopped_before_loading() -> list:
        app = build_server(Settings(port=0, data_dir=tmp_path / "data", dev_token_file=tmp_path / "token"))
        with structlog.testing.capture_logs() as logs:
            await app.core.close()
        await app.server.stop(0)
        return logs

    logs = asyncio.run(stopped_before_loading())
    assert [e["reason"] for e in logs if e["event"] == "index.snapshot_skipped"] == ["the indexes were never loaded"]
    assert not (tmp_path / "data" / snapshot.FILE_NAME).exists()


def test_indexes_on_a_device_backend_are_not_snapshotted(tmp_path):
    from teleo_server.pipeline import PipelineSettings, make_retriever
    from teleo_server.server import _snapshot_plan

    settings = Settings(port=0, data_dir=tmp_path / "data", dev_token_file=tmp_path / "token")
    host, device = (make_retriever(PipelineSettings(), name) for name in ("numpy", "emulated"))
    assert host.can_snapshot() and not device.can_snapshot()
    with pytest.raises(ValueError, match="rebuilt at start"):
        device.snapshot_state()
    assert _snapshot_plan(settings, host, "numpy") is not None
    path = settings.data_dir / snapshot.FILE_NAME
    path.parent.mkdir(parents=True)
    path.write_bytes(b"a host backend's indexes")
    assert _snapshot_plan(settings, device, "emulated") is None  # rebuilt at every start, and
    assert not path.exists()  # the journal an earlier snapshot needs is pruned by that rebuild


def _answers(stub, auth, filters=None) -> dict[tuple[str, str], list[tuple[str, float]]]:
    """(profile, query) -> (id, score) of each result, best first."""
    out = {}
    for profile in PROFILES:
        for q in QUERIES:
            events = stub.Retrieve(pb.RetrieveRequest(text=q, top_k=5, profile=profile, filters=filters),
                                   metadata=auth, timeout=60)
            out[profile, q] = [(e.result.memory.id, round(e.result.score, 5)) for e in events if e.WhichOneof("event") == "result"]
    return out


@pytest.mark.integration
def test_sigterm_writes_the_snapshot_and_after_kill_9_it_is_brought_up_to_date(server_process):
    srv = server_process()
    auth = [("authorization", f"Bearer {srv.token}")]
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(srv.address))
    ids = [stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=t)), metadata=auth, timeout=60).id for t in TEXTS]
    before = _answers(stub, auth)
    srv.signal(signal.SIGTERM)
    assert srv.wait(60) == 0
    assert (srv.data_dir / snapshot.FILE_NAME).exists()

    again = server_process(data_dir=srv.data_dir)
    assert '"source": "snapshot"' in again.logs()
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(again.address))
    # another process, with other string hashes: the same answers, to the score
    assert _answers(stub, auth) == before and all(before.values())
    (new_id,) = [stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="Porto offsite hike moved to day three.")),
                            metadata=auth, timeout=60).id]
    stub.Delete(pb.DeleteRequest(ids=[ids[0]]), metadata=auth, timeout=60)
    stub.Feedback(pb.FeedbackRequest(id=ids[3], used=True, helpful=True), metadata=auth, timeout=60)
    again.signal(signal.SIGKILL)  # after acknowledged writes, with no clean stop
    again.wait()
    assert (srv.data_dir / snapshot.FILE_NAME).exists()  # the one the second start read

    third = server_process(data_dir=srv.data_dir)
    log = third.log_path.read_text(errors="replace")
    assert log.count('"source": "snapshot"') == 2  # brought up to date from the journal, not rebuilt
    assert '"reindexed": 2' in log and '"counters": 1' in log  # the store and the delete; the feedback
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(third.address))
    events = list(stub.Retrieve(pb.RetrieveRequest(text="where is the offsite hike", top_k=3), metadata=auth, timeout=60))
    found = [e.result.memory.id for e in events if e.WhichOneof("event") == "result"]
    assert new_id in found and ids[3] in found
    found = {i for v in _answers(stub, auth).values() for i, _ in v}
    assert ids[0] not in found and new_id in found
    fed = _result(stub, auth, TEXTS[3], ids[3])
    assert fed.used_count == 1 and fed.helpful_count == 1


@pytest.fixture
def serving(tmp_path):
    """An in-thread server whose upkeep writes no checkpoint (each test asks for its own), stopped at
    the end once the gate (``tmp_path / "gate"``) is open, so that no copy still waits at it."""
    srv = Running(tmp_path, checkpoint={"share": 0})
    yield srv
    (tmp_path / "gate").touch()
    srv.stop()


def test_a_checkpoint_is_written_only_when_enough_changed_and_no_write_is_half_done(serving):
    srv = serving
    srv.store(TEXTS[:4])
    core = srv.core
    assert not srv.call(core.checkpoint(0, 1, 0)) and not srv.path.exists()  # off
    assert not srv.call(core.checkpoint(0.5, 5, 0)) and not srv.path.exists()  # 4 changed, 5 wanted
    core._last_checkpoint -= 7200  # the last one two hours ago: due, at most hourly
    core._pending_writes += 1  # as while a write is between its store call and its index call
    try:
        assert not srv.call(core.checkpoint(0.5, 1, 3600)) and not srv.path.exists()
    finally:
        core._pending_writes -= 1
    core._checkpoint_looked -= 10  # the next round: tried again, not an hour later
    with structlog.testing.capture_logs() as logs:
        assert srv.call(core.checkpoint(0.5, 1, 3600)) and srv.path.exists()
    assert [e["reason"] for e in logs if e["event"] == "index.snapshot_written"] == ["checkpoint: 4 memories changed"]
    assert not srv.call(core.checkpoint(0.5, 1, 0))  # nothing changed since
    assert not srv.call(core.checkpoint(0.5, 1, 3600))  # and not twice within the hour either way


@pytest.mark.integration
def test_a_checkpoint_while_serving_bounds_what_a_start_after_a_crash_indexes_again(server_process):
    import json
    import time

    srv = server_process(env={"TELEO_CHECKPOINT__SHARE": "0.01", "TELEO_CHECKPOINT__MIN_CHANGES": "3",
                              "TELEO_CHECKPOINT__SECONDS": "0"})
    auth = [("authorization", f"Bearer {srv.token}")]
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(srv.address))
    done = stub.StoreBatch(iter([pb.StoreBatchRequest(memory=pb.MemoryInput(content=t)) for t in TEXTS[:5]]),
                           metadata=auth, timeout=60)
    ids = [item.id for item in done.items]
    deadline, written = time.monotonic() + 60, []
    while not written and time.monotonic() < deadline:  # upkeep looks every half second
        time.sleep(0.1)
        written = [json.loads(ln) for ln in srv.log_path.read_text(errors="replace").splitlines()
                   if "index.snapshot_written" in ln]
    assert (srv.data_dir / snapshot.FILE_NAME).exists()
    assert [(w["memories"], w["reason"]) for w in written] == [(5, "checkpoint: 5 memories changed")]
    logs = srv.log_path.read_text(errors="replace")
    if snapshot.CAN_FORK:  # written by a copy of the server, with gRPC's fork handlers off (`teleo serve`)
        assert "index.checkpoint_forked" in logs and "fork_posix" not in logs and "checkpoints_in_process" not in logs
    (late,) = [stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=TEXTS[5])), metadata=auth, timeout=60).id]
    srv.signal(signal.SIGKILL)  # 1 change since the checkpoint: under its 3, so no other was written
    srv.wait()

    again = server_process(data_dir=srv.data_dir)
    log = again.log_path.read_text(errors="replace")
    assert log.count('"source": "snapshot"') == 1 and '"reindexed": 1' in log
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(again.address))
    for memory_id, text in zip([*ids, late], TEXTS[:6], strict=True):  # each found by its own text
        events = stub.Retrieve(pb.RetrieveRequest(text=text, top_k=3, profile="hybrid"), metadata=auth, timeout=60)
        assert memory_id in [e.result.memory.id for e in events if e.WhichOneof("event") == "result"], text


def test_a_checkpoint_is_written_in_the_process_where_a_copy_may_not_be_forked(serving, monkeypatch):
    monkeypatch.setenv(snapshot.GRPC_FORK_VARIABLE, "1")
    assert "gRPC's fork handlers are on" in snapshot.fork_unsafe()
    monkeypatch.setenv(snapshot.GRPC_FORK_VARIABLE, "false")
    assert snapshot.fork_unsafe() is None or not snapshot.CAN_FORK
    srv = serving
    srv.store(TEXTS[:3])
    core = srv.core
    _due(core)
    with structlog.testing.capture_logs() as logs:  # checkpoint.fork off
        assert srv.call(core.checkpoint(0.5, 1, 0, fork=False)) and srv.path.exists()
    assert [e["event"] for e in logs if e["event"].startswith("index.")] == ["index.snapshot_written"]
    assert snapshot.trailer(srv.path)["memories"] == 3 and core._checkpoint_writer is None
    srv.store(TEXTS[3:5])
    core._fork_unsafe = "this platform cannot fork"  # as on one without fork()
    _due(core)
    with structlog.testing.capture_logs() as logs:
        assert srv.call(core.checkpoint(0.1, 1, 0)) and srv.path.exists()
    assert [e["event"] for e in logs if e["event"].startswith("index.")] == ["index.snapshot_written"]
    assert snapshot.trailer(srv.path)["memories"] == 5 and core._checkpoint_writer is None
    if snapshot.CAN_FORK:  # a fork refused (strict overcommit, a process limit): written here instead
        core._fork_unsafe = None
        srv.store(TEXTS[5:7])
        _due(core)

        def refused():
            raise OSError(12, "Cannot allocate memory")

        monkeypatch.setattr(os, "fork", refused)
        with structlog.testing.capture_logs() as logs:
            assert srv.call(core.checkpoint(0.1, 1, 0))
        monkeypatch.undo()
        assert [e["event"] for e in logs if e["event"].startswith("index.")] == ["index.checkpoint_not_forked",
                                                                                "index.snapshot_written"]
        assert snapshot.trailer(srv.path)["memories"] == 7 and core._checkpoint_writer is None


def test_checkpoint_fork_off_has_the_upkeep_write_checkpoints_on_the_index_thread(tmp_path):
    srv = Running(tmp_path, checkpoint={"share": 0.01, "min_changes": 2, "seconds": 0, "fork": False})
    try:
        with structlog.testing.capture_logs() as logs:
            srv.store(TEXTS[:3])
            deadline = time.monotonic() + 30
            while not srv.path.exists() and time.monotonic() < deadline:  # upkeep looks every half second
                time.sleep(0.05)
            time.sleep(0.2)
        events = [e for e in logs if e["event"].startswith("index.")]
        assert [e["event"] for e in events][:1] == ["index.snapshot_written"] and "checkpoint" in events[0]["reason"]
        assert "index.checkpoint_forked" not in [e["event"] for e in events]
    finally:
        srv.stop()


def _gated_write(monkeypatch, gate: Path, fail: bool = False) -> None:
    """The forked copy's snapshot write waits for ``gate`` to exist (or fails, with ``fail``); the
    server's own are left as they are."""
    real, server = snapshot.write, os.getpid()

    def write(*args, **kwargs):
        if os.getpid() == server:  # the server's own write (at its stop)
            return real(*args, **kwargs)
        deadline = time.monotonic() + 60
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        if fail:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(snapshot, "write", write)


def _due(core) -> None:
    core._last_checkpoint -= 7200
    core._checkpoint_looked -= 7200


forks = pytest.mark.skipif(not snapshot.CAN_FORK, reason="the checkpoint is written in the process where it cannot fork")


def _forking(srv: Running):
    """A due checkpoint started on the server's loop, once its copy is forked: (the running
    checkpoint, the copy)."""
    core = srv.core
    _due(core)
    running = asyncio.run_coroutine_threadsafe(core.checkpoint(0.5, 1, 0), srv.srv.loop)
    deadline = time.monotonic() + 30
    while core._checkpoint_writer is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert core._checkpoint_writer is not None and not running.done()
    return running, core._checkpoint_writer


@forks
def test_a_checkpoint_is_written_by_a_copy_of_the_process_while_it_goes_on_serving(serving, tmp_path, monkeypatch):
    gate = tmp_path / "gate"
    srv = serving
    ids = srv.store(TEXTS[:6])
    core = srv.core
    head = core.store.position().change
    _gated_write(monkeypatch, gate)
    with structlog.testing.capture_logs() as logs:
        running, writer = _forking(srv)
        # the copy holds none of the server's files or sockets: only the standard streams and
        # the pipe it reports on (it waits at the gate before it opens the file it writes)
        fds = {int(f.name) for f in Path(f"/proc/{writer.pid}/fd").iterdir()} if Path("/proc/self/fd").exists() else set()
        deadline = time.monotonic() + 10
        while len(fds) > 4 and time.monotonic() < deadline:  # until it has closed the rest
            time.sleep(0.01)
            fds = {int(f.name) for f in Path(f"/proc/{writer.pid}/fd").iterdir()}
        if fds:
            kept = fds - {0, 1, 2}
            assert len(kept) == 1 and os.readlink(f"/proc/{writer.pid}/fd/{kept.pop()}").startswith("pipe:"), fds
        # while the copy writes, the server serves reads and writes as usual
        (late,) = srv.store([TEXTS[6]])
        found = srv.stub.Retrieve(pb.RetrieveRequest(text=TEXTS[6], top_k=3), metadata=srv.auth, timeout=30)
        returned = [e.result.memory.id for e in found if e.WhichOneof("event") == "result"]
        assert late in returned
        assert not srv.path.exists() and not running.done()
        gate.touch()
        assert running.result(60) is True
    assert [e["event"] for e in logs if e["event"].startswith("index.")][:2] == ["index.checkpoint_forked",
                                                                                "index.snapshot_written"]
    meta = snapshot.trailer(srv.path)
    # the indexes as they stood at the fork: the six memories, the journal up to then
    assert meta["memories"] == 6 and meta["database"]["change"] == head
    # the index thread was held for the fork only, not for the write (/metrics reads these)
    assert core.snapshots == {("checkpoint", "written"): 1}
    assert core.checkpoint_hold_seconds < core.snapshot_write_seconds["checkpoint"]
    assert core._snapshot_change == head
    # pruned up to the snapshot only: the store made during the write is still listed. The
    # retrieval's usage counters are listed too when they were written before the prune (half a
    # second after it, or sooner on a busy machine): a memory whose content change was still in
    # the journal then keeps that change's mark, so it is listed as changed, not as counters only
    listed = [i for i, counters in core.store.changes_since(0) if not counters]
    assert late in listed and set(listed) <= set(returned), (listed, returned)
    assert len(ids) == 6


@forks
def test_a_checkpoint_copy_that_fails_leaves_the_snapshot_and_the_journal_and_a_stop_ends_one_that_runs(tmp_path, monkeypatch):
    gate = tmp_path / "gate"
    srv = Running(tmp_path, checkpoint={"share": 0})
    try:
        srv.store(TEXTS[:4])
        core = srv.core
        _due(core)
        assert srv.call(core.checkpoint(0.5, 1, 0))  # a first snapshot, at this change
        first = snapshot.trailer(srv.path)
        srv.store(TEXTS[4:8])
        _gated_write(monkeypatch, gate, fail=True)
        gate.touch()
        _due(core)
        with structlog.testing.capture_logs() as logs:
            assert srv.call(core.checkpoint(0.5, 1, 0)) is False
        (failed,) = [e for e in logs if e["event"] == "index.snapshot_failed"]
        assert "No space left on device" in failed["error"]  # the copy's own error, reported by the server
        assert core.snapshots[("checkpoint", "failed")] == 1
        assert snapshot.trailer(srv.path) == first and not snapshot.partial(srv.path).exists()
        assert len([i for i, c in core.store.changes_since(first["database"]["change"]) if not c]) == 4  # nothing pruned
        assert core._checkpoint_writer is None
        # a copy still writing when the server stops is ended; the stop writes its own snapshot
        gate.unlink()
        _gated_write(monkeypatch, gate)
        running, writer = _forking(srv)
        pid = writer.pid
    finally:
        srv.stop()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # ended and reaped
    assert snapshot.trailer(srv.path)["memories"] == 8 and not snapshot.partial(srv.path).exists()
    assert running.result(5) is False


@forks
def test_a_stop_ends_a_copy_forked_after_its_checkpoint_was_cancelled(tmp_path, monkeypatch):
    gate, entered, release, forked = tmp_path / "gate", threading.Event(), threading.Event(), []
    real = snapshot.write_in_child

    def late_fork(*args, **kwargs):  # the index thread is about to fork when the wait is cancelled
        entered.set()
        release.wait(30)
        forked.append(real(*args, **kwargs))
        return forked[-1]

    srv = Running(tmp_path, checkpoint={"share": 0})
    try:
        srv.store(TEXTS[:4])
        core = srv.core
        _gated_write(monkeypatch, gate)  # and its copy would wait at the gate for ever
        monkeypatch.setattr(snapshot, "write_in_child", late_fork)
        _due(core)
        running = asyncio.run_coroutine_threadsafe(core.checkpoint(0.5, 1, 0), srv.srv.loop)
        assert entered.wait(30)
        running.cancel()
        time.sleep(0.2)
        release.set()
        deadline = time.monotonic() + 30
        while not forked and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        release.set()
        srv.stop()
    assert len(forked) == 1 and forked[0].stopped
    with pytest.raises(ChildProcessError):
        os.waitpid(forked[0].pid, os.WNOHANG)  # ended and reaped by the stop
    assert snapshot.trailer(srv.path)["memories"] == 4 and not snapshot.partial(srv.path).exists()


_ORPHAN = """
import sys, time
from pathlib import Path
from teleo_server import snapshot
snapshot.write = lambda *args, **kwargs: time.sleep(120)  # a copy that would write for minutes
writer = snapshot.write_in_child(Path(sys.argv[1]), {}, "print")
print(writer.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux: the copy ends with its server by prctl")
def test_a_checkpoint_copy_ends_when_its_server_is_killed_alone(tmp_path):
    import subprocess
    import sys

    with subprocess.Popen([sys.executable, "-c", _ORPHAN, str(tmp_path / "index.snapshot")],
                          stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1]) as server:
        try:
            copy = int(server.stdout.readline())
            assert _running(copy)
            server.kill()  # SIGKILL to the server alone, not to its process group
            server.wait(30)
            deadline = time.monotonic() + 10
            while _running(copy) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert not _running(copy)
        finally:
            server.kill()


def _running(pid: int) -> bool:
    """Whether ``pid`` is alive (not gone, not a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@forks
def test_a_checkpoint_copy_that_takes_too_long_is_ended_and_the_next_round_forks_another(serving, tmp_path, monkeypatch):
    from teleo_server import core as core_module

    gate = tmp_path / "gate"
    srv = serving
    srv.store(TEXTS[:4])
    core = srv.core
    _gated_write(monkeypatch, gate)  # the copy hangs at the gate
    limit = core_module.CHECKPOINT_WRITE_LIMIT_S
    monkeypatch.setattr(core_module, "CHECKPOINT_WRITE_LIMIT_S", 0.5)
    _due(core)
    with structlog.testing.capture_logs() as logs:
        assert srv.call(core.checkpoint(0.5, 1, 0)) is False
    (failed,) = [e for e in logs if e["event"] == "index.snapshot_failed"]
    assert "took more than" in failed["error"] and core._checkpoint_writer is None
    assert not srv.path.exists() and not snapshot.partial(srv.path).exists()
    gate.touch()
    # the next copy gets the usual limit: on a busy machine forking and writing may take longer
    # than the half second that ended the hung one
    monkeypatch.setattr(core_module, "CHECKPOINT_WRITE_LIMIT_S", limit)
    _due(core)
    assert srv.call(core.checkpoint(0.5, 1, 0)) is True and snapshot.trailer(srv.path)["memories"] == 4


# ---- the file format ---------------------------------------------------------------------------------
def _held() -> dict:
    base = np.arange(100, dtype=np.float32)
    local = threading.local()
    local.x = 1
    return {"base": base, "view": base[10:20], "lock": threading.Lock(), "local": local}


def test_views_come_back_as_views_and_locks_as_new_ones(tmp_path):
    path = tmp_path / "s"
    held = _held()
    held["lock"].acquire()
    snapshot.write(path, held, "fp")
    got = snapshot.read(path, "fp")
    assert np.shares_memory(got["view"], got["base"]) and np.array_equal(got["view"], np.arange(10, 20))
    got["base"][10] = -1
    assert got["view"][0] == -1  # one array, as in the running index
    assert got["lock"].acquire(blocking=False) and not hasattr(got["local"], "x")
    # written again by the server that read it: still one array (the file does not grow by a
    # copy of the 40 bytes the view holds; only by how the arrays are named)
    first = path.stat().st_size
    snapshot.write(path, got, "fp")
    again = snapshot.read(path, "fp")
    assert path.stat().st_size < first + 40 and np.shares_memory(again["view"], again["base"])


def test_a_snapshot_is_read_only_when_everything_matches(tmp_path):
    path = tmp_path / "s"
    snapshot.write(path, {"a": np.ones(3)}, "fp")
    assert np.array_equal(snapshot.read(path, "fp")["a"], np.ones(3))
    with pytest.raises(snapshot.Unusable, match="other code or settings"):
        snapshot.read(path, "other")
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(snapshot.Unusable, match="truncated"):
        snapshot.read(path, "fp")
    with pytest.raises(snapshot.Unusable, match="no snapshot"):
        snapshot.read(tmp_path / "absent", "fp")


class _System:
    def __reduce__(self):
        import os
        return os.system, ("echo pwned",)


class _Load:
    """Pickles as numpy.load(a path, ...): a NumPy function that could read another pickle."""

    def __reduce__(self):
        return np.load, ("elsewhere.npy",)


class _Reach:
    """Pickles as getattr(an object of ours, "__class__"): how a pickle reaches further."""

    def __reduce__(self):
        return getattr, (snapshot.Unusable("x"), "__class__")


def test_a_snapshot_cannot_name_what_an_index_never_holds(tmp_path):
    path = tmp_path / "s"
    snapshot.write(path, _System(), "fp")
    with pytest.raises(snapshot.Unusable, match="may not name posix.system"):
        snapshot.read(path, "fp")
    snapshot.write(path, _Load(), "fp")
    with pytest.raises(snapshot.Unusable, match="may not name numpy.load"):
        snapshot.read(path, "fp")
    # getattr (how bound methods are pickled) reaches methods of this package's classes only
    snapshot.write(path, _Reach(), "fp")
    with pytest.raises(snapshot.Unusable, match="may not read Unusable.__class__"):
        snapshot.read(path, "fp")


def test_a_restore_removes_the_snapshot_of_the_database_it_replaces(tmp_path):
    from teleo_server.store import SQLiteStore
    from teleo_server.store.backup import restore

    SQLiteStore(tmp_path / "backup.db").close()
    data = tmp_path / "data"
    SQLiteStore(data / "teleo.db").close()
    (data / snapshot.FILE_NAME).write_bytes(b"the replaced database's indexes")
    restore(tmp_path / "backup.db", data / "teleo.db", force=True)
    assert not (data / snapshot.FILE_NAME).exists() and (data / "teleo.db").exists()


_TERMS_IN_ANOTHER_PROCESS = """
import sys
from pathlib import Path
from teleo_server import snapshot
from teleo_server.index.terms import TermTable
t = TermTable()
t.add_all([f"term{i}" for i in range(5000)])
t.settle()
t.add_all(["newest", "term7"])
snapshot.write(Path(sys.argv[1]), t, "fp")
"""


def test_a_term_table_written_by_another_process_finds_its_terms(tmp_path):
    """Python seeds its string hashes anew in each process: the table's hash index is made again
    when it is read back, or no settled term would be found."""
    import subprocess
    import sys

    from tests._server import REPO

    path = tmp_path / "terms"
    done = subprocess.run([sys.executable, "-c", _TERMS_IN_ANOTHER_PROCESS, str(path)], cwd=REPO, capture_output=True,
                          text=True, env={**__import__("os").environ, "PYTHONHASHSEED": "12345"}, timeout=120)
    assert done.returncode == 0, done.stderr
    table = snapshot.read(path, "fp")
    assert len(table) == 5001
    assert table.ids_of(["term0", "term4999", "newest", "term7", "absent"]) == [0, 4999, 5000, 7, None]
    assert table.get("term1234") == 1234 and table.term(4321) == "term4321"
    assert table.add("another") == 5001 and table.get("newest") == 5000


def test_a_new_database_and_its_log_are_the_owners_only(tmp_path):
    from teleo_server.store import SQLiteStore

    store = SQLiteStore(tmp_path / "data" / "teleo.db")
    try:
        store.record_retrieved([])  # a write: the write-ahead log exists now
        wal = tmp_path / "data" / "teleo.db-wal"
        assert (tmp_path / "data" / "teleo.db").stat().st_mode & 0o777 == 0o600
        assert (tmp_path / "data").stat().st_mode & 0o777 == 0o700  # the directory it made
        assert wal.exists() and wal.stat().st_mode & 0o777 == 0o600
    finally:
        store.close()


@pytest.mark.integration
def test_writes_acknowledged_up_to_a_sigterm_are_found_after_each_restart_from_the_snapshot(server_process):
    """Stores keep arriving while the server is stopped cleanly, three times over: every write
    acknowledged before the stop is retrievable by its own text after a start that read the
    snapshot (a commit whose call was cut short is indexed before the snapshot is written)."""
    acked: dict[str, str] = {}
    srv = server_process()
    auth = [("authorization", f"Bearer {srv.token}")]
    for round_ in range(3):
        stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(srv.address))
        stop = threading.Event()

        def writer(stub=stub, round_=round_) -> None:
            i = 0
            while not stop.is_set():
                text = f"round {round_} note {i}: the {['amber', 'cobalt', 'jade', 'ochre'][i % 4]} ledger line {i * 7919}"
                try:
                    acked[stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=text)), metadata=auth, timeout=30).id] = text
                except grpc.RpcError:
                    return  # the server is going away: this write was not acknowledged
                i += 1

        thread = threading.Thread(target=writer)
        thread.start()
        while len(acked) < 10 * (round_ + 1):
            threading.Event().wait(0.05)
        srv.signal(signal.SIGTERM)
        assert srv.wait(60) == 0
        stop.set()
        thread.join(60)
        srv = server_process(data_dir=srv.data_dir)
        # the log file holds every start of this data directory: one more read a snapshot
        assert srv.log_path.read_text(errors="replace").count('"source": "snapshot"') == round_ + 1
        stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(srv.address))
        for memory_id, text in list(acked.items()):
            events = stub.Retrieve(pb.RetrieveRequest(text=text, top_k=3, profile="hybrid"), metadata=auth, timeout=60)
            assert memory_id in [e.result.memory.id for e in events if e.WhichOneof("event") == "result"], text


def test_a_write_whose_indexing_failed_is_indexed_again_by_the_next_upkeep_round(tmp_path):
    """The store keeps a write whose index call then failed (the caller is told it failed): an
    Update that replaced the indexed version, and a Store. Until then neither version answers; the
    next upkeep round indexes what the store holds, and a delete meanwhile is not undone."""
    # the upkeep round is run by the test (a scheduled one could come at any moment of a slow machine)
    srv = Running(tmp_path, maintenance_seconds=3600)
    retriever = srv.core.retriever
    add = retriever.add

    def broken(memory, emb):
        raise RuntimeError("an index that fails halfway")

    def found(query: str) -> list[str]:
        events = srv.stub.Retrieve(pb.RetrieveRequest(text=query, top_k=3, filters=pb.RetrieveFilters(namespaces=[NS])),
                                   metadata=srv.auth, timeout=60)
        return [e.result.memory.input.content for e in events if e.WhichOneof("event") == "result"]

    try:
        ids = srv.store(TEXTS[:4])
        moved = "The staging cluster moved again, to ap-south-1, in June."
        retriever.add = broken
        with pytest.raises(grpc.RpcError):
            srv.stub.Update(pb.UpdateRequest(id=ids[2], memory=pb.MemoryInput(content=moved), fields=["content"]),
                            metadata=srv.auth, timeout=60)
        for text in TEXTS[4:6]:
            with pytest.raises(grpc.RpcError):
                srv.store([text])  # committed to the store, not indexed
        retriever.add = add
        assert srv.core._unindexed >= {ids[2]} and len(srv.core._unindexed) == 3
        assert moved not in found("where did the staging cluster move")  # neither version is indexed
        pending = sorted(srv.core._unindexed - {ids[2]})
        srv.stub.Delete(pb.DeleteRequest(ids=[pending[0]]), metadata=srv.auth, timeout=30)
        srv.call(srv.core.maintain())
        assert srv.core._unindexed == set()
        assert found("where did the staging cluster move")[0] == moved
        assert srv.stats() == 5  # the four stored first and the one of the failed Store not deleted
        assert pending[0] not in retriever.catalog.row_of and pending[1] in retriever.catalog.row_of
    finally:
        retriever.add = add
        srv.stop()
