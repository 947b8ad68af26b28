"""SQLite store: WAL, synchronous=FULL, one writer connection, per-thread readers."""

from __future__ import annotations

import contextlib
import functools
import errno
import json
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import structlog

from teleo_server.domain import (
    AccessLevel,
    ChunkEmbedding,
    EmbeddingSet,
    Link,
    LinkType,
    Memory,
    MemoryType,
    Principal,
    unreadable_reason,
)
from teleo_server.errors import ResourceExhausted, TeleoError, Unavailable
from teleo_server.extract.code import detect as detect_code
from teleo_server.heads import CodecSpec, SparseVector, TokenCodes, Vector
from teleo_server.query import Filters, visible
from teleo_server.store.base import Position, StoredToken
from teleo_server.store.schema import migrate

log = structlog.get_logger(__name__)
T = TypeVar("T")

_MEMORY_COLUMNS = (
    "id, namespace, content, content_hash, memory_type, access_level, source, confidence, importance, "
    "event_time, ingestion_time, session_id, session_position, links, metadata, evergreen, model_version, "
    "chunk_count, retrieved_count, used_count, helpful_count, misled_count, sufficient_count, insufficient_count"
)


# the oldest servable memory with the same content in the same namespace at the same access level
_SAME_CONTENT = ("namespace = ? AND access_level = ? AND content_hash = ? AND quarantine IS NULL "
                 "ORDER BY pk LIMIT 1")

# SQLite's primary result codes this store tells apart (extended codes carry them in the low byte)
_BUSY, _LOCKED, _READONLY, _IOERR, _FULL, _CANTOPEN = 5, 6, 8, 10, 13, 14


def translate(exc: BaseException, path: Path, room: int | None = None) -> TeleoError:
    """A SQLite or OS error as the service's error, with what an operator can do about it.

    room: bytes the database may still grow by, when known (disk space, or its own size limit)."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if isinstance(exc, OSError):
        code = {errno.ENOSPC: _FULL, errno.EDQUOT: _FULL, errno.EROFS: _READONLY, errno.EACCES: _READONLY}.get(exc.errno or 0, _IOERR)
    where = path.parent
    if code == _FULL:
        free = _free_bytes(where) if room is None else room
        return ResourceExhausted(
            f"the disk holding {path} is full, or the database reached its size limit ({free} bytes left); "
            "writes are refused until space is freed"
        )
    if code in (_BUSY, _LOCKED):
        return Unavailable(f"the database {path} is locked by another process; retry shortly, or stop the process holding it")
    if code in (_READONLY, _CANTOPEN) and _read_only(where):
        return Unavailable(f"the database {path} cannot be written: {where} is on a read-only file system")
    if code == _READONLY:
        return Unavailable(f"the database {path} cannot be written (read-only file or directory {where}): {exc}")
    if code == _CANTOPEN:
        return Unavailable(f"the database {path} cannot be opened (does {where} exist and may this user write it?): {exc}")
    return Unavailable(f"the database {path} failed: {exc}")


def _read_only(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _free_bytes(directory: Path) -> int:
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return 0


def _guarded(fn: Callable[..., T]) -> Callable[..., T]:
    """Reads: SQLite and OS failures become the service's errors, as writes do in ``_tx``."""

    @functools.wraps(fn)
    def wrapper(self: "SQLiteStore", *args: Any, **kw: Any) -> T:
        try:
            return fn(self, *args, **kw)
        except (sqlite3.Error, OSError) as exc:
            raise translate(exc, self.path) from exc

    return wrapper


def _journal_head(conn: sqlite3.Connection) -> int:
    """The sequence number the change journal last gave out (0 before any): AUTOINCREMENT keeps
    it once the journal is pruned."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
    return int(row[0]) if row else 0


def _with_embeddings(conn: sqlite3.Connection, rows: Iterable[tuple], bad: list[tuple[str, str]]
                     ) -> Iterator[tuple[Memory, EmbeddingSet]]:
    """Each row (pk, memory columns) that decodes, with its embeddings; (id, why) of the others
    appended to ``bad`` for the caller to quarantine."""
    for row in rows:
        memory, reason = _decode(row[1:])
        if reason is not None:
            bad.append((row[1], reason))
            continue
        try:
            emb = _load_embeddings(conn, row[0], memory.model_version)
        except ValueError as exc:  # a vector row that names no codec, or the wrong size
            bad.append((row[1], f"vectors do not decode: {exc}"))
            continue
        yield memory, emb


class SQLiteStore:
    """Embedded default store. Safe to call from several threads; writes are serialised.

    SQLite and OS failures leave it as the service's errors (``translate``): a full disk is
    ResourceExhausted, a lock held by another process Unavailable after ``lock_timeout`` seconds;
    ``fault`` holds the last write failure until a write succeeds again.
    """

    def __init__(self, path: Path | str, lock_timeout: float = 2.0) -> None:
        self.path = Path(path)
        self.lock_timeout = lock_timeout
        self._write_lock = threading.Lock()
        self._local = threading.local()
        # called with the seconds each committed write transaction took (metrics); None = nobody
        self.write_observer: Callable[[float], None] | None = None
        self.fault: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # a new data directory: the owner's only
            created = not self.path.exists()
            self._writer = self._connect(lock_timeout, writer=True)
            if created:
                # the memories' text and the token hashes: the owner's only, as backups are (SQLite
                # gives the -wal and -shm files the database file's mode)
                os.chmod(self.path, 0o600)
            before = migrate(self._writer)
        except (sqlite3.Error, OSError) as exc:
            err = translate(exc, self.path)
            raise type(err)(f"cannot open the store: {err}") from exc
        log.info("store.opened", path=str(self.path), schema_from=before)

    def _connect(self, timeout: float = 5.0, writer: bool = False) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=timeout)
        conn.create_function("teleo_code_language", 1, _code_language, deterministic=True)
        if writer:
            # WAL is a property of the file, set once by the writer; readers asking again would
            # wait on a lock another process holds
            conn.execute("PRAGMA journal_mode=WAL")
        # FULL: a commit is on disk before we acknowledge it, also across power loss.
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    @contextmanager
    def _tx(self, mine: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction. ``mine``: the changes it makes are the server's own, which its
        indexes take as it makes them (the change journal marks them so, ``schema.py`` v7)."""
        with self._write_lock:
            t0 = time.perf_counter()
            conn = self._writer
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    if mine:  # (set and cleared inside the transaction: no other connection sees it set)
                        conn.execute("UPDATE meta SET value = '1' WHERE key = 'server_writes'")
                    yield conn
                    if mine:
                        conn.execute("UPDATE meta SET value = '0' WHERE key = 'server_writes'")
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            conn.execute("ROLLBACK")
                    raise
            except (sqlite3.Error, OSError) as exc:
                err = translate(exc, self.path, self._room())
                if self.fault != str(err):
                    log.error("store.write_failed", error=str(err))
                self.fault = str(err)
                raise err from exc
            if self.fault is not None:
                log.info("store.recovered", was=self.fault)
                self.fault = None
            if self.write_observer is not None:
                self.write_observer(time.perf_counter() - t0)

    def _room(self) -> int:
        """Bytes the database may still grow by: free disk space, or its own page limit if smaller.
        Called with the write lock held."""
        free = _free_bytes(self.path.parent)
        try:
            size, limit, count = (self._writer.execute(f"PRAGMA {p}").fetchone()[0]
                                  for p in ("page_size", "max_page_count", "page_count"))
        except sqlite3.Error:
            return free
        return min(free, max(limit - count, 0) * size)

    def check(self, min_free_bytes: int = 1 << 20) -> str | None:
        """Why writes would fail now (a lock held elsewhere, a full disk), or None. Writes nothing;
        clears ``fault`` when nothing is wrong any more."""
        with self._write_lock:
            room = self._room()
        if room < min_free_bytes:
            return str(translate(OSError(errno.ENOSPC, "no space"), self.path, room))
        try:
            with self._write_lock:
                self._writer.execute("BEGIN IMMEDIATE")
                self._writer.execute("ROLLBACK")
        except sqlite3.Error as exc:
            return str(translate(exc, self.path))
        self.fault = None
        return None

    # -- memories ---------------------------------------------------------------------------

    @_guarded
    def find_duplicate(self, namespace: str, level: AccessLevel, content_hash: str) -> str | None:
        row = self._reader().execute(f"SELECT id FROM memories WHERE {_SAME_CONTENT}",
                                     (namespace, int(level), content_hash)).fetchone()
        return row[0] if row else None

    def put(self, memory: Memory, embeddings: EmbeddingSet, dedup: bool = True) -> tuple[Memory, bool]:
        return self.put_many([(memory, embeddings)], lambda m: dedup)[0]

    def put_many(self, items: list[tuple[Memory, EmbeddingSet]],
                 dedup: Callable[[Memory], bool] = lambda m: True) -> list[tuple[Memory, bool]]:
        out: list[tuple[Memory, bool]] = []
        with self._tx() as conn:
            for memory, emb in items:
                existing = None
                if dedup(memory):
                    existing = conn.execute(
                        f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE {_SAME_CONTENT}",
                        (memory.namespace, int(memory.access_level), memory.content_hash),
                    ).fetchone()
                if existing is not None:
                    out.append((_row_to_memory(existing), True))
                    continue
                memory.model_version = emb.model_version
                memory.chunk_count = len(emb.chunks)
                cur = conn.execute(
                    f"INSERT INTO memories ({_MEMORY_COLUMNS}) VALUES ({','.join('?' * 24)})",
                    _memory_to_row(memory),
                )
                _insert_chunks(conn, cur.lastrowid, emb)
                out.append((memory, False))
        return out

    @_guarded
    def get(self, ids: list[str]) -> dict[str, Memory]:
        if not ids:
            return {}
        rows = self._reader().execute(
            f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE id IN ({','.join('?' * len(ids))}) AND quarantine IS NULL",
            ids,
        ).fetchall()
        return {m.id: m for m in (self._servable(r) for r in rows) if m is not None}

    @_guarded
    def list_page(self, principal: Principal, filters: Filters, after: int, limit: int) -> list[tuple[int, Memory]]:
        """Up to ``limit`` servable memories ``principal`` may read that match ``filters``, with
        their sequence number (> ``after``), oldest first. Filters mean what the index's mask means."""
        where, args = _sql(visible(principal, filters))
        rows = self._reader().execute(
            f"SELECT pk, {_MEMORY_COLUMNS} FROM memories WHERE quarantine IS NULL AND pk > ? AND {where} "
            "ORDER BY pk LIMIT ?", [after, *args, limit]).fetchall()
        out = []
        for row in rows:
            memory = self._servable(row[1:])
            if memory is not None and principal.can_read(memory.namespace, memory.access_level):
                out.append((int(row[0]), memory))
        return out

    @_guarded
    def access_of(self, ids: list[str]) -> dict[str, tuple[str, AccessLevel]]:
        if not ids:
            return {}
        rows = self._reader().execute(
            f"SELECT id, namespace, access_level FROM memories WHERE id IN ({','.join('?' * len(ids))})", ids
        ).fetchall()
        return {i: (ns, AccessLevel(level)) for i, ns, level in rows}

    def quarantine(self, memory_id: str, reason: str) -> None:
        """Take a row out of service (kept for its owner to inspect or delete). Best effort: a
        failing write only means the row is skipped again next time. Not marked as the server's
        own in the change journal: a row found unservable while reading is still in the indexes."""
        try:
            with self._tx(mine=False) as conn:
                conn.execute("UPDATE memories SET quarantine = ? WHERE id = ?", (reason[:500], memory_id))
        except TeleoError as exc:  # _tx has translated the SQLite error
            log.warning("store.quarantine_failed", memory_id=memory_id, reason=reason, error=str(exc))
            return
        log.error("store.quarantined", memory_id=memory_id, reason=reason)

    @_guarded
    def quarantined(self) -> dict[str, str]:
        rows = self._reader().execute("SELECT id, quarantine FROM memories WHERE quarantine IS NOT NULL")
        return dict(rows.fetchall())

    def _servable(self, row: tuple) -> Memory | None:
        """The row as a Memory, or None after quarantining a row that cannot be served."""
        memory, reason = _decode(row)
        if reason is not None:
            self.quarantine(row[0], reason)
            return None
        return memory

    def delete(self, ids: list[str]) -> int:
        if not ids:
            return 0
        with self._tx() as conn:
            cur = conn.execute(f"DELETE FROM memories WHERE id IN ({','.join('?' * len(ids))})", ids)
            return cur.rowcount

    def record_feedback(self, memory_id: str, used: bool, helpful: bool | None,
                        sufficient: bool | None = None) -> Memory | None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE memories SET used_count = used_count + ?, helpful_count = helpful_count + ?, "
                "misled_count = misled_count + ?, sufficient_count = sufficient_count + ?, "
                "insufficient_count = insufficient_count + ? WHERE id = ?",
                (int(used), int(helpful is True), int(helpful is False), int(sufficient is True),
                 int(sufficient is False), memory_id),
            )
            row = conn.execute(f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE id = ?", (memory_id,)).fetchone()
        return _row_to_memory(row) if row else None

    def record_retrieved(self, ids: list[str]) -> None:
        if not ids:
            return
        with self._tx() as conn:
            conn.executemany("UPDATE memories SET retrieved_count = retrieved_count + 1 WHERE id = ?", [(i,) for i in ids])

    def iter_memories(self) -> Iterator[tuple[Memory, EmbeddingSet]]:
        conn = self._connect()  # its own snapshot, so a long start-up scan never blocks writers
        bad: list[tuple[str, str]] = []
        try:
            rows = conn.execute(f"SELECT pk, {_MEMORY_COLUMNS} FROM memories WHERE quarantine IS NULL ORDER BY pk")
            yield from _with_embeddings(conn, rows, bad)
        finally:
            conn.close()
        for memory_id, reason in bad:
            self.quarantine(memory_id, reason)

    @_guarded
    def indexable(self, ids: list[str]) -> list[tuple[Memory, EmbeddingSet]]:
        """``iter_memories`` for ``ids`` only: those of them that are stored and servable, with
        their embeddings, oldest first (a row that cannot be served is quarantined and left out)."""
        if not ids:
            return []
        bad: list[tuple[str, str]] = []
        conn = self._reader()
        rows = conn.execute(f"SELECT pk, {_MEMORY_COLUMNS} FROM memories WHERE quarantine IS NULL "
                            f"AND id IN ({','.join('?' * len(ids))}) ORDER BY pk", ids).fetchall()
        out = list(_with_embeddings(conn, rows, bad))
        for memory_id, reason in bad:
            self.quarantine(memory_id, reason)
        return out

    # -- the change journal (schema v7) ------------------------------------------------------

    @_guarded
    def position(self) -> Position:
        conn = self._reader()
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        return Position(meta["database_id"], _journal_head(conn), int(meta["changes_pruned_through"]))

    @_guarded
    def changes_since(self, change: int, others_only: bool = False) -> list[tuple[str, bool]]:
        where = "seq > ?" + (" AND (mine = 0 OR others = 1)" if others_only else "")
        rows = self._reader().execute(f"SELECT memory_id, counters FROM changes WHERE {where} ORDER BY seq", (change,))
        return [(memory_id, bool(counters)) for memory_id, counters in rows]

    @_guarded
    def changed_since(self, change: int) -> int:
        row = self._reader().execute("SELECT COUNT(*) FROM changes WHERE seq > ? AND counters = 0", (change,)).fetchone()
        return int(row[0])

    def prune_changes(self, through: int) -> int:
        with self._tx(mine=False) as conn:  # (no memory changes)
            cur = conn.execute("DELETE FROM changes WHERE seq <= ?", (through,))
            conn.execute("UPDATE meta SET value = CAST(MAX(CAST(value AS INTEGER), ?) AS TEXT) "
                         "WHERE key = 'changes_pruned_through'", (through,))
            return cur.rowcount

    def update(self, memory: Memory, embeddings: EmbeddingSet | None, previous_id: str | None) -> Memory | None:
        """Overwrite a memory's fields (all but its bookkeeping counters), and its embeddings when
        given, in one transaction; with ``previous_id``, first keep the row as it was (embeddings
        too) under that id. None when the memory is gone (or quarantined)."""
        with self._tx() as conn:
            row = conn.execute("SELECT pk FROM memories WHERE id = ? AND quarantine IS NULL", (memory.id,)).fetchone()
            if row is None:
                return None
            pk = row[0]
            if previous_id is not None:
                rest = _MEMORY_COLUMNS.removeprefix("id, ")
                cur = conn.execute(f"INSERT INTO memories (id, {rest}) SELECT ?, {rest} FROM memories WHERE pk = ?",
                                   (previous_id, pk))
                kept = cur.lastrowid
                conn.execute("INSERT INTO chunks SELECT ?, idx, start, end FROM chunks WHERE memory_pk = ?", (kept, pk))
                conn.execute("INSERT INTO chunk_vectors SELECT ?, idx, head, kind, dtype, rows, cols, data, ids "
                             "FROM chunk_vectors WHERE memory_pk = ?", (kept, pk))
            values = _memory_to_row(memory)
            fields = _MEMORY_COLUMNS.split(", ")[1:16]  # namespace .. evergreen: what a caller may change
            conn.execute(f"UPDATE memories SET {', '.join(f + ' = ?' for f in fields)} WHERE pk = ?",
                         (*values[1:16], pk))
            if embeddings is not None:
                conn.execute("DELETE FROM chunks WHERE memory_pk = ?", (pk,))
                _insert_chunks(conn, pk, embeddings)
                conn.execute("UPDATE memories SET model_version = ?, chunk_count = ? WHERE pk = ?",
                             (embeddings.model_version, len(embeddings.chunks), pk))
            out = conn.execute(f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE pk = ?", (pk,)).fetchone()
        return _row_to_memory(out)

    def embeddings_of(self, memory_id: str) -> EmbeddingSet | None:
        """The stored embeddings of a memory (None when it is gone)."""
        conn = self._reader()
        row = conn.execute("SELECT pk, model_version FROM memories WHERE id = ?", (memory_id,)).fetchone()
        return None if row is None else _load_embeddings(conn, row[0], row[1])

    @_guarded
    def stale_ids(self, model_version: str) -> list[str]:
        rows = self._reader().execute("SELECT id FROM memories WHERE model_version != ? AND quarantine IS NULL", (model_version,))
        return [r[0] for r in rows]

    def replace_embeddings(self, memory_id: str, embeddings: EmbeddingSet,
                           content_hash: str | None = None) -> Memory | None:
        with self._tx() as conn:
            row = conn.execute("SELECT pk, content_hash FROM memories WHERE id = ?", (memory_id,)).fetchone()
            if row is not None and content_hash is not None and row[1] != content_hash:
                return None  # an update changed the text these vectors were made from
            if row is None:
                return None
            conn.execute("DELETE FROM chunks WHERE memory_pk = ?", (row[0],))
            _insert_chunks(conn, row[0], embeddings)
            conn.execute(
                "UPDATE memories SET model_version = ?, chunk_count = ? WHERE pk = ?",
                (embeddings.model_version, len(embeddings.chunks), row[0]),
            )
            mem = conn.execute(f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE pk = ?", (row[0],)).fetchone()
        return _row_to_memory(mem)

    def retag_tokens(self, head: str, old_tag: str, new_tag: str, max_rows: int) -> int:
        """Name the token rows of ``head`` coded as ``old_tag`` with at most ``max_rows`` rows as
        ``new_tag`` (codes another codec takes as they are, ``CodecSpec.takes``); returns how many
        rows were renamed. The bytes are untouched."""
        with self._tx() as conn:
            cur = conn.execute("UPDATE chunk_vectors SET dtype = ? WHERE head = ? AND kind = 'tokens' AND dtype = ? "
                               "AND rows <= ?", (new_tag, head, old_tag, max_rows))
            return cur.rowcount

    @_guarded
    def count_by_namespace(self) -> dict[tuple[str, AccessLevel], tuple[int, int]]:
        rows = self._reader().execute(
            "SELECT namespace, access_level, COUNT(*), COALESCE(SUM(chunk_count), 0) FROM memories "
            "WHERE quarantine IS NULL GROUP BY namespace, access_level"
        )
        return {(ns, AccessLevel(lvl)): (n, c) for ns, lvl, n, c in rows}

    # -- tokens -----------------------------------------------------------------------------

    def add_token(self, token: StoredToken, token_hash: str) -> None:
        with self._tx(mine=False) as conn:  # (no memory changes)
            conn.execute(
                "INSERT INTO tokens VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    token.token_id,
                    token_hash,
                    token.agent_id,
                    json.dumps(list(token.read_namespaces)),
                    json.dumps(list(token.write_namespaces)),
                    int(token.access_level),
                    token.default_namespace,
                    token.created,
                    token.revoked,
                    token.note,
                ),
            )

    @_guarded
    def token_by_hash(self, token_hash: str) -> StoredToken | None:
        row = self._reader().execute(
            "SELECT token_id, agent_id, read_namespaces, write_namespaces, access_level, default_namespace, "
            "created, revoked, note FROM tokens WHERE token_hash = ?",
            (token_hash,),
        ).fetchone()
        return _row_to_token(row) if row else None

    @_guarded
    def list_tokens(self) -> list[StoredToken]:
        rows = self._reader().execute(
            "SELECT token_id, agent_id, read_namespaces, write_namespaces, access_level, default_namespace, "
            "created, revoked, note FROM tokens ORDER BY created"
        )
        return [_row_to_token(r) for r in rows]

    def revoke_token(self, token_id: str, when: float) -> bool:
        with self._tx(mine=False) as conn:  # (no memory changes)
            cur = conn.execute("UPDATE tokens SET revoked = ? WHERE token_id = ? AND revoked IS NULL", (when, token_id))
            return cur.rowcount == 1

    def close(self) -> None:
        with self._write_lock:
            # fold the write-ahead log into the database file and empty it, so that the file alone
            # holds every write once the server has stopped (a copy of it alone is whole)
            with contextlib.suppress(sqlite3.Error):
                self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._writer.close()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def _memory_to_row(m: Memory) -> tuple:
    return (
        m.id,
        m.namespace,
        m.content,
        m.content_hash,
        int(m.memory_type),
        int(m.access_level),
        m.source,
        m.confidence,
        m.importance,
        m.event_time,
        m.ingestion_time,
        m.session_id,
        m.session_position,
        json.dumps([[lk.target_id, int(lk.type), lk.weight] for lk in m.links]),
        json.dumps(m.metadata, sort_keys=True),
        int(m.evergreen),
        m.model_version,
        m.chunk_count,
        m.retrieved_count,
        m.used_count,
        m.helpful_count,
        m.misled_count,
        m.sufficient_count,
        m.insufficient_count,
    )


def _row_to_memory(r: tuple) -> Memory:
    return Memory(
        id=r[0],
        namespace=r[1],
        content=r[2],
        content_hash=r[3],
        memory_type=MemoryType(r[4]),
        access_level=AccessLevel(r[5]),
        source=r[6],
        confidence=r[7],
        importance=r[8],
        event_time=r[9],
        ingestion_time=r[10],
        session_id=r[11],
        session_position=r[12],
        links=tuple(Link(t, LinkType(k), w) for t, k, w in json.loads(r[13])),
        metadata=json.loads(r[14]),
        evergreen=bool(r[15]),
        model_version=r[16],
        chunk_count=r[17],
        retrieved_count=r[18],
        used_count=r[19],
        helpful_count=r[20],
        misled_count=r[21],
        sufficient_count=r[22],
        insufficient_count=r[23],
    )


def _decode(row: tuple) -> tuple[Memory | None, str | None]:
    """(memory, None), or (memory or None, why it cannot be served)."""
    try:
        memory = _row_to_memory(row)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        return None, f"row does not decode: {exc}"
    return memory, unreadable_reason(memory)


def _row_to_token(r: tuple) -> StoredToken:
    return StoredToken(
        token_id=r[0],
        agent_id=r[1],
        read_namespaces=tuple(json.loads(r[2])),
        write_namespaces=tuple(json.loads(r[3])),
        access_level=AccessLevel(r[4]),
        default_namespace=r[5],
        created=r[6],
        revoked=r[7],
        note=r[8],
    )


# the row attributes of ``query.visible`` as SQL over the memories table
_SQL_COLUMNS = {"namespace": "namespace", "access_level": "access_level", "memory_type": "memory_type",
                "confidence": "confidence", "session_id": "session_id", "ingestion_time": "ingestion_time",
                # the index's event time: the event time, else the ingestion time
                "event_time": "(CASE WHEN event_time != 0 THEN event_time ELSE ingestion_time END)",
                # derived from the text as the index derives it (a function each connection registers)
                "code_language": "teleo_code_language(content)"}


def _code_language(content: str | None) -> str:
    spans = detect_code(content or "")
    return "" if spans is None else (spans.language or "unknown")


def _sql(node: tuple) -> tuple[str, list[Any]]:
    """SQL (and its arguments) for a ``query.visible`` expression over the memories table."""
    op = node[0]
    if op in ("true", "false"):
        return ("1" if op == "true" else "0"), []
    if op in ("and", "or"):
        parts = [_sql(n) for n in node[1:]]
        return "(" + f" {op.upper()} ".join(p for p, _ in parts) + ")", [a for _, args in parts for a in args]
    if op == "not":
        inner, args = _sql(node[1])
        return f"NOT {inner}", args
    attribute, value = node[1], node[2]
    if attribute == "alive":
        return ("1" if value else "0"), []  # every stored row is alive; quarantine is checked apart
    if attribute.startswith("metadata."):
        if op != "==":
            raise ValueError(f"metadata supports ==, not {op}")
        return ("EXISTS (SELECT 1 FROM json_each(memories.metadata) WHERE key = ? AND value = ?)",
                [attribute.removeprefix("metadata."), value])
    column = _SQL_COLUMNS[attribute]
    if op == "in":
        return (f"{column} IN ({','.join('?' * len(value))})" if value else "0"), list(value)
    if op == "prefix":
        return f"substr({column}, 1, ?) = ?", [len(value), value]
    return f"{column} {'=' if op == '==' else op} ?", [value]


def _sparse_ids(ids: np.ndarray) -> bytes:
    """A sparse vector's term ids as stored: two bytes each when every id fits (a vocabulary of up
    to 65,536 terms, as SPLADE's 30,522), else four. The reader tells them apart by length."""
    ids = np.asarray(ids)
    if ids.size and 0 <= int(ids.min()) and int(ids.max()) <= np.iinfo(np.uint16).max:
        return ids.astype(np.uint16).tobytes()
    return np.ascontiguousarray(ids, np.int32).tobytes()


def _read_sparse_ids(blob: bytes, rows: int) -> np.ndarray:
    if rows and len(blob) == 2 * rows:
        return np.frombuffer(blob, dtype=np.uint16).astype(np.int32)
    return np.frombuffer(blob, dtype=np.int32)


def _insert_chunks(conn: sqlite3.Connection, memory_pk: int, emb: EmbeddingSet) -> None:
    chunks, vectors = [], []
    for i, c in enumerate(emb.chunks):
        chunks.append((memory_pk, i, c.start, c.end))
        for head, v in c.vectors.items():
            if isinstance(v, SparseVector):
                vectors.append((memory_pk, i, head, "sparse", v.weights.dtype.name, v.size, 0,
                                v.weights.tobytes(), _sparse_ids(v.ids)))
            elif isinstance(v, TokenCodes):
                # dtype names the codec (schema.py); cols is a token's width in the codec's values
                vectors.append((memory_pk, i, head, "tokens", v.spec.tag, v.rows, v.spec.width,
                                np.ascontiguousarray(v.data).tobytes(), None))
            else:
                a = np.ascontiguousarray(v)
                kind = "dense" if a.ndim == 1 else "tokens"
                rows, cols = (1, a.shape[0]) if a.ndim == 1 else a.shape
                vectors.append((memory_pk, i, head, kind, a.dtype.name, rows, cols, a.tobytes(),
                                None))
    conn.executemany("INSERT INTO chunks VALUES (?,?,?,?)", chunks)
    conn.executemany("INSERT INTO chunk_vectors VALUES (?,?,?,?,?,?,?,?,?)", vectors)


def _load_embeddings(conn: sqlite3.Connection, memory_pk: int, model_version: str) -> EmbeddingSet:
    chunks = [ChunkEmbedding({}, start, end) for start, end in conn.execute(
        "SELECT start, end FROM chunks WHERE memory_pk = ? ORDER BY idx", (memory_pk,))]
    for idx, head, kind, dtype, rows, cols, data, ids in conn.execute(
        "SELECT idx, head, kind, dtype, rows, cols, data, ids FROM chunk_vectors "
        "WHERE memory_pk = ?", (memory_pk,),
    ):
        if kind == "sparse":
            v: Vector = SparseVector(_read_sparse_ids(ids, rows), np.frombuffer(data, dtype=dtype))
        elif CodecSpec.is_tag(dtype):
            v = TokenCodes.of(data, rows, CodecSpec.parse(dtype))
        else:
            v = np.frombuffer(data, dtype=dtype)
            v = v.reshape(rows, cols) if kind == "tokens" else v
        chunks[idx].vectors[head] = v
    return EmbeddingSet(model_version=model_version, chunks=chunks)


__all__ = ["SQLiteStore", "translate"]
