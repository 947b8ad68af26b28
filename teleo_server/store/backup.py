"""Online backup of the SQLite store, and placing a backup as the database of a data directory.

``backup`` copies a live database (WAL mode, a server writing to it) with SQLite's online backup
API in one step: one read transaction, so the copy is the consistent snapshot at which it began
and holds every write committed before then; in WAL mode the server's writers are not blocked.
The copy goes to a temporary file beside its destination (mode 0600: it holds token hashes), is
switched to rollback-journal mode so it is one self-contained file, fsynced, verified
(``PRAGMA integrity_check``, foreign keys, a readable schema version) and only then renamed into
place. ``restore`` does the same in the other direction for a stopped server; the server migrates
the schema forward at its next start as usual.

The embedding cache under the data directory is derived data and is neither copied nor needed.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import structlog

from teleo_server.errors import TeleoError
from teleo_server import snapshot
from teleo_server.store.schema import SCHEMA_VERSION

log = structlog.get_logger(__name__)

_TABLES = {"memories", "chunks", "tokens"}
# Files SQLite keeps beside a database; a leftover one would be applied to whatever database
# next takes that name.
_SIDECARS = ("-wal", "-shm", "-journal")

__all__ = ["BackupError", "BackupInfo", "backup", "restore", "verify"]


class BackupError(TeleoError):
    """A backup or restore that could not be done; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class BackupInfo:
    path: Path
    schema_version: int
    memories: int
    bytes: int


def backup(db_path: Path, dest: Path, *, force: bool = False) -> BackupInfo:
    """Copy the database at ``db_path`` to ``dest`` while a server may keep writing to it.

    Refuses an existing ``dest`` unless ``force``; ``dest`` appears only once complete and verified.
    """
    db_path, dest = Path(db_path), Path(dest).absolute()
    if not db_path.is_file():
        raise BackupError(f"no database at {db_path} (is data_dir {db_path.parent} right?)")
    _check_destination(dest, force)
    if dest.exists() and os.path.samefile(dest, db_path):
        raise BackupError(f"{dest} is the live database itself")
    with _Staged(dest) as tmp:
        _copy(db_path, tmp.path, dest, source_is_live=True)
        info = verify(tmp.path)
        tmp.place(force=force)
    info = BackupInfo(dest, info.schema_version, info.memories, info.bytes)
    log.info("store.backup_written", path=str(dest), memories=info.memories, bytes=info.bytes)
    return info


def restore(backup_path: Path, db_path: Path, *, force: bool = False) -> BackupInfo:
    """Place a verified copy of ``backup_path`` as the database at ``db_path``.

    Refuses to replace an existing database unless ``force``, and always refuses one that is open
    (a server running on it). Leftover ``-wal``/``-shm``/``-journal`` files of the replaced
    database are removed before the copy takes its name, so none of them is applied to it.
    """
    backup_path, db_path = Path(backup_path), Path(db_path).absolute()
    if not backup_path.is_file():
        raise BackupError(f"no backup file at {backup_path}")
    if db_path.exists():
        if not force:
            raise BackupError(f"a database already exists at {db_path}; pass --force to replace it")
        if os.path.samefile(db_path, backup_path):
            raise BackupError(f"{backup_path} is the database it would replace")
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BackupError(f"cannot create {db_path.parent}: {_reason(exc)}") from exc
    with _Staged(db_path) as tmp:
        _copy(backup_path, tmp.path, db_path, source_is_live=False)
        info = verify(tmp.path)
        if info.schema_version > SCHEMA_VERSION:
            raise BackupError(
                f"{backup_path} has schema version {info.schema_version}, newer than this server's "
                f"{SCHEMA_VERSION}; upgrade Teleo"
            )
        if db_path.exists():
            _check_not_in_use(db_path)  # only now, so a failed copy leaves the old database untouched
        for suffix in _SIDECARS:
            _remove(Path(f"{db_path}{suffix}"))
        # the index snapshot of the replaced database: the start would find it does not match the
        # restored file, and it is of no use to anyone
        _remove(db_path.parent / snapshot.FILE_NAME)
        tmp.place(force=force)
    info = BackupInfo(db_path, info.schema_version, info.memories, info.bytes)
    log.info("store.restored", path=str(db_path), source=str(backup_path), memories=info.memories)
    return info


def verify(path: Path) -> BackupInfo:
    """Check that ``path`` is an intact Teleo database; raises BackupError if it is not."""
    path = Path(path)
    try:
        conn = sqlite3.connect(_uri(path, "ro"), uri=True)
    except sqlite3.Error as exc:
        raise BackupError(f"cannot open {path}: {exc}") from exc
    try:
        problems = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        if problems != ["ok"]:
            raise BackupError(f"{path} fails the integrity check: {'; '.join(problems[:3])}")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version < 1 or not _TABLES <= tables:
            raise BackupError(f"{path} is not a Teleo database (schema version {version})")
        if conn.execute("PRAGMA foreign_key_check").fetchone() is not None:
            raise BackupError(f"{path} has rows whose parent row is missing (a chunk without its memory, or vectors without their chunk)")
        memories = conn.execute("SELECT COUNT(*) FROM memories").fetchone()[0]
    except sqlite3.Error as exc:
        raise BackupError(f"{path} is not a readable SQLite database: {exc}") from exc
    finally:
        conn.close()
    return BackupInfo(path, version, memories, path.stat().st_size)


# -- internals -----------------------------------------------------------------------------------


def _uri(path: Path, mode: str) -> str:
    return f"file:{quote(str(path.absolute()))}?mode={mode}"


def _reason(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"no space left ({exc.strerror})"
    return exc.strerror or str(exc)


def _check_destination(dest: Path, force: bool) -> None:
    if dest.is_dir():
        raise BackupError(f"{dest} is a directory; give a file name")
    if dest.exists() and not force:
        raise BackupError(f"{dest} already exists; pass --force to overwrite it")
    if not dest.parent.is_dir():
        why = "is not a directory" if dest.parent.exists() else "does not exist"
        raise BackupError(f"cannot write {dest}: {dest.parent} {why}")


def _check_not_in_use(db_path: Path) -> None:
    """Leaving WAL mode needs every other connection closed, so a running server makes it fail.
    The database is about to be replaced, so checkpointing its WAL here loses nothing."""
    try:
        conn = sqlite3.connect(_uri(db_path, "rw"), uri=True, timeout=1.0, isolation_level=None)
    except sqlite3.Error:
        return  # not openable as a database: nobody can be serving from it
    try:
        mode = conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise BackupError(f"the database at {db_path} is in use; stop the server first") from exc
        return
    except sqlite3.DatabaseError:
        return
    finally:
        conn.close()
    if mode != "delete":
        raise BackupError(f"the database at {db_path} is in use; stop the server first")


def _copy(source: Path, target: Path, dest: Path, *, source_is_live: bool) -> None:
    """SQLite's online backup in a single step (one read transaction on the source: a consistent
    snapshot that does not block writers in WAL mode), then fsync."""
    # A live database is opened read-write so SQLite can use its -shm index as the server does; the
    # backup only reads. A backup file is opened read-only so it is never modified.
    src_mode = "rw" if source_is_live else "ro"
    try:
        src = sqlite3.connect(_uri(source, src_mode), uri=True, timeout=30.0)
    except sqlite3.Error as exc:
        raise BackupError(f"cannot open {source}: {exc}") from exc
    try:
        dst = sqlite3.connect(target, isolation_level=None)
        try:
            src.backup(dst)
            # The copy inherits WAL mode from its source's header; rollback-journal mode makes it
            # one self-contained file (the server switches it back to WAL when it opens it).
            dst.execute("PRAGMA journal_mode=DELETE")
        finally:
            dst.close()
    except sqlite3.Error as exc:
        raise BackupError(f"cannot copy {source} to {dest}: {_sqlite_reason(exc)}") from exc
    finally:
        src.close()
    try:
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise BackupError(f"cannot sync the copy for {dest}: {_reason(exc)}") from exc


def _sqlite_reason(exc: sqlite3.Error) -> str:
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return f"no space left ({exc})"
    name = getattr(exc, "sqlite_errorname", None)
    return f"{exc} ({name})" if name else str(exc)


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise BackupError(f"cannot remove {path}: {_reason(exc)}") from exc


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Staged:
    """A mode-0600 temporary file beside ``dest`` that is renamed into place or removed."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest

    def __enter__(self) -> "_Staged":
        try:
            fd, name = tempfile.mkstemp(prefix=f".{self.dest.name}.", suffix=".tmp", dir=self.dest.parent)
        except OSError as exc:
            raise BackupError(f"cannot write in {self.dest.parent}: {_reason(exc)}") from exc
        self.path = Path(name)
        self._placed = False
        try:
            os.fchmod(fd, 0o600)  # mkstemp's default, made explicit: the file will hold token hashes
        except OSError as exc:
            self.path.unlink(missing_ok=True)
            raise BackupError(f"cannot set the mode of {self.path}: {_reason(exc)}") from exc
        finally:
            os.close(fd)
        return self

    def place(self, *, force: bool) -> None:
        try:
            if force:
                os.replace(self.path, self.dest)
            else:
                self._place_new()
            self._placed = True
            _fsync_dir(self.dest.parent)
        except FileExistsError as exc:
            raise BackupError(f"{self.dest} already exists; pass --force to overwrite it") from exc
        except OSError as exc:
            raise BackupError(f"cannot move the copy to {self.dest}: {_reason(exc)}") from exc

    def _place_new(self) -> None:
        # A hard link never overwrites, so a file that appeared meanwhile is kept.
        try:
            os.link(self.path, self.dest)
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links
            if self.dest.exists():
                raise FileExistsError(errno.EEXIST, "exists", str(self.dest)) from None
            os.replace(self.path, self.dest)
        else:
            self.path.unlink()

    def __exit__(self, *exc_info: object) -> None:
        if not self._placed:
            for suffix in ("", *_SIDECARS):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
