"""Index snapshots: the in-memory indexes written beside the database at a clean stop, read back
at the next start instead of rebuilding them from every stored memory.

A start rebuilds each perspective from the stored text and vectors (2.5 ms a short memory on a
2-core CPU: analysis, entities, n-grams, the memory graph), so a server of 100,000 memories took
minutes to serve again. A snapshot is one file, ``index.snapshot`` in the data directory:

    MAGIC | pickled state | trailer JSON | trailer length (8 bytes, little endian) | END

The trailer says what the state was made from and when it may be trusted:

* ``fingerprint``: the server's code (a digest of every module of the package and of the plugins
  loaded), the pipeline settings, the backend, the embedding model version and the token codecs.
  Any difference and the snapshot is not read.
* ``database``: the id of the database it was made from and the sequence number of the last
  change in that database's change journal that the indexes hold (``store/schema.py``, v7: the
  database's triggers list every memory inserted, updated or deleted, by any program, in the same
  transaction). The core reads a snapshot only from that database, and then indexes again every
  memory changed after that number: those a server wrote before it crashed, or another program.
* ``sha256`` of the pickled state, checked before it is read.

A checkpoint while serving writes it from a forked copy of the server process (``write_in_child``):
the copy holds the indexes exactly as they stood at the fork, which takes milliseconds, and the
server goes on serving and writing while it is written. A clean stop writes it in the process.

The snapshot stays after a start has read it: until a checkpoint while serving or the next clean
stop replaces it, it and the journal are what a start after a crash reads. One that cannot be used
(damaged, made by other code or settings or from another database, or older than what the journal
still lists) is deleted before anything is served, and costs only the rebuild it was meant to
save; the reason is logged.

Trust: the state is a pickle, read only from the data directory, which holds the database itself
(whoever can write one can rewrite every memory). Unpickling is limited to the classes of this
package and of the plugins loaded, NumPy, SciPy's sparse matrices, hnswlib and plain containers,
and happens only after the checksum matched.
"""

from __future__ import annotations

import gc
import hashlib
import io
import json
import os
import pickle
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

FILE_NAME = "index.snapshot"
FORMAT = 1
MAGIC = b"TELEO-INDEX-SNAPSHOT\n"
END = b"\nTELEO-END\n"
_TRAILER_LEN = 8
_BLOCK = 1 << 20

# what an unpickled snapshot may name: classes of this package (and of the plugins loaded), of NumPy,
# SciPy's sparse matrices, hnswlib and the standard library's containers; and only the functions
# that rebuild arrays, scalars and patterns, and this module's own reducers
_CLASS_MODULES = ("teleo_server", "numpy", "scipy.sparse", "hnswlib", "array", "collections", "datetime", "enum",
                  "decimal")
_BUILTINS = frozenset({"set", "frozenset", "dict", "list", "tuple", "bytearray", "bytes", "int", "float", "complex",
                       "str", "bool", "slice", "range", "object"})
_FUNCTIONS = frozenset({
    ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar"),
    ("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer"),
    ("array", "_array_reconstructor"), ("re", "_compile"), ("copyreg", "_reconstructor"),
    ("teleo_server.snapshot", "_view"), ("teleo_server.snapshot", "_fresh"), ("teleo_server.snapshot", "_fresh_local"),
    ("teleo_server.snapshot", "_fresh_lock"), ("teleo_server.snapshot", "_fresh_rlock"),
})


def code_digest(extra_modules: Iterable[str] = ()) -> str:
    """sha256 over the source of every module of this package and of ``extra_modules`` (plugins):
    a snapshot pickled by other code is never read."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    files = sorted(root.rglob("*.py"))
    for name in sorted(set(extra_modules)):
        mod = sys.modules.get(name)
        path = getattr(mod, "__file__", None)
        h.update(name.encode())
        if path:
            files.append(Path(path))
    for path in files:
        h.update(str(path.relative_to(root) if path.is_relative_to(root) else path.name).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return ""


def fingerprint(parts: dict[str, Any]) -> str:
    """sha256 of ``parts`` (JSON-able) with the library versions the pickled state depends on."""
    full = {**parts, "format": FORMAT, "python": sys.version,
            **{lib: _version(lib) for lib in ("numpy", "scipy", "hnswlib")}}
    return hashlib.sha256(json.dumps(full, sort_keys=True, default=str).encode()).hexdigest()


# ---- pickling ----------------------------------------------------------------------------------------
def _view(base: np.ndarray, offset: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: np.dtype,
          writeable: bool) -> np.ndarray:
    v = np.ndarray(shape, dtype, buffer=base, offset=offset, strides=strides)
    if not writeable:
        v.flags.writeable = False
    return v


def _fresh(kind: type) -> Any:
    return kind()


def _fresh_local() -> Any:
    return threading.local()


def _fresh_lock() -> Any:
    return threading.Lock()


def _fresh_rlock() -> Any:
    return threading.RLock()


_LOCK = type(threading.Lock())
_RLOCK = type(threading.RLock())


class _Pickler(pickle.Pickler):
    """Keeps what a running index shares: a view is written as (its base array, where it starts),
    so it reads back as a view of the same array rather than a copy of its own. Thread-local
    caches and locks are written as new empty ones. The objects in ``shared`` (the settings, the
    compute backend, the text analyser) are written by name and read back as the running
    server's own."""

    def __init__(self, f: Any, shared: dict[str, Any]) -> None:
        super().__init__(f, protocol=5)
        self._shared = {id(v): k for k, v in shared.items()}

    def persistent_id(self, obj: Any) -> str | None:
        return self._shared.get(id(obj))

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            # the array that owns the memory, or wraps a buffer that does (an array read back
            # from a snapshot wraps the bytes it was read into): views are written against it
            root, base = None, obj.base
            while isinstance(base, np.ndarray):
                root, base = base, base.base
            if (root is not None and root.flags.c_contiguous and root.flags.writeable
                    and not root.dtype.hasobject and not obj.dtype.hasobject and obj.size):
                offset = obj.__array_interface__["data"][0] - root.__array_interface__["data"][0]
                if offset >= 0 and all(s >= 0 for s in obj.strides):
                    return _view, (root, offset, obj.shape, obj.strides, obj.dtype, bool(obj.flags.writeable))
            return NotImplemented
        if isinstance(obj, threading.local):
            return (_fresh_local, ()) if type(obj) is threading.local else (_fresh, (type(obj),))
        if isinstance(obj, _LOCK):
            return _fresh_lock, ()
        if isinstance(obj, _RLOCK):
            return _fresh_rlock, ()
        return NotImplemented


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


class _Unpickler(pickle.Unpickler):
    def __init__(self, f: Any, shared: dict[str, Any], plugins: tuple[str, ...]) -> None:
        super().__init__(f)
        self._shared = shared
        self._own = ("teleo_server", *plugins)  # whose classes a snapshot may hold

    def _method(self, obj: Any, name: str) -> Any:
        """``getattr`` as a snapshot may use it: a bound method that an object of this package's
        own classes (or a plugin's) defines, which is how bound methods are pickled; never any
        other attribute."""
        kind = type(obj)
        if not _within(kind.__module__, self._own) or name.startswith("__") or not callable(getattr(kind, name, None)):
            raise pickle.UnpicklingError(f"a snapshot may not read {kind.__name__}.{name}")
        return getattr(obj, name)

    def persistent_load(self, pid: Any) -> Any:
        try:
            return self._shared[pid]
        except (KeyError, TypeError):
            raise pickle.UnpicklingError(f"the snapshot names a shared object this server does not have: {pid!r}") from None

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name == "getattr":
            return self._method
        if (module == "builtins" and name in _BUILTINS) or (module, name) in _FUNCTIONS:
            return super().find_class(module, name)
        if _within(module, _CLASS_MODULES) or _within(module, self._own):
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise pickle.UnpicklingError(f"a snapshot may not name {module}.{name}")


class _HashingWriter(io.RawIOBase):
    def __init__(self, f: BinaryIO, sha: Any = None) -> None:
        self.f, self.sha, self.n = f, hashlib.sha256() if sha is None else sha, 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        self.sha.update(mv)
        self.f.write(mv)
        self.n += mv.nbytes
        return mv.nbytes


# ---- files ---------------------------------------------------------------------------------------------
def partial(path: Path) -> Path:
    """Where the snapshot for ``path`` is written before it is complete (renamed when it is)."""
    return path.with_name(path.name + ".tmp")


def write(path: Path, state: Any, print_: str, shared: dict[str, Any] | None = None,
          info: dict[str, Any] | None = None, _sha: Any = None) -> int:
    """Write ``state`` to ``path`` (through a temporary file, synced, then renamed), the objects of
    ``shared`` by name, ``info`` (JSON-able) into the trailer; returns the file's size in bytes.
    (``_sha``: a new sha256 object made beforehand, for a forked copy: making one takes a lock of
    the crypto library that a thread of the server may have held at the fork.)"""
    tmp = partial(path)
    try:
        # 0600: the indexes hold the memories' text, as the database does
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            os.fchmod(f.fileno(), 0o600)  # also when a partial file was left with another mode
            f.write(MAGIC)
            body = _HashingWriter(f, _sha)
            _Pickler(body, shared or {}).dump(state)
            trailer = json.dumps({**(info or {}), "format": FORMAT, "fingerprint": print_,
                                  "sha256": body.sha.hexdigest(), "bytes": body.n, "written_at": time.time()}).encode()
            f.write(trailer)
            f.write(len(trailer).to_bytes(_TRAILER_LEN, "little"))
            f.write(END)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size


# ---- written by a forked copy of the process ------------------------------------------------------------
CAN_FORK = hasattr(os, "fork")
_PR_SET_PDEATHSIG = 1
GRPC_FORK_VARIABLE = "GRPC_ENABLE_FORK_SUPPORT"


def fork_unsafe() -> str | None:
    """Why a checkpoint may not be written by a forked copy of this process, or None when it may.
    gRPC's fork handlers must be off (``GRPC_ENABLE_FORK_SUPPORT=0`` before gRPC is loaded, as
    ``teleo serve`` sets it): with them on, gRPC restarts its threads in the copy, where they fail
    on the files and sockets the copy closes, and end it."""
    if not CAN_FORK:
        return "this platform cannot fork"
    if os.environ.get(GRPC_FORK_VARIABLE, "").strip().lower() not in ("0", "false", "no", "off"):
        return f"gRPC's fork handlers are on (set {GRPC_FORK_VARIABLE}=0 before gRPC is loaded)"
    return None


class NotWritten(Exception):
    """Why a snapshot that a forked writer was writing was not written."""


class ChildWriter:
    """A snapshot being written by a forked copy of this process (:func:`write_in_child`).

    ``wait`` blocks until the copy is done and returns (bytes, seconds), or raises
    :class:`NotWritten`; ``stop`` ends it at once (the partial file is removed, the snapshot on
    disk before stays). Both may be called from any thread, ``stop`` while ``wait`` blocks."""

    def __init__(self, pid: int, fd: int, path: Path) -> None:
        self.pid, self.path = pid, path
        self._fd: int | None = fd
        self._lock = threading.Lock()
        self._status: int | None = None
        self._stopped = False

    def _reap(self, kill: bool) -> int:
        with self._lock:
            if self._status is None:
                if kill:
                    self._stopped = True
                    try:
                        os.kill(self.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self._status = os.waitpid(self.pid, 0)[1]
            return self._status

    def wait(self) -> tuple[int, float]:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is None:
            raise NotWritten("already waited for")
        out = bytearray()
        try:
            while block := os.read(fd, 1 << 16):
                out += block
        finally:
            os.close(fd)
        status = self._reap(kill=False)
        if self._stopped:
            raise NotWritten("stopped before it was complete")
        try:
            report = json.loads(out) if out else {}
        except ValueError:
            report = {}
        if os.waitstatus_to_exitcode(status) == 0 and "bytes" in report:
            return int(report["bytes"]), float(report["seconds"])
        if "error" in report:
            raise NotWritten(str(report["error"]))
        code = os.waitstatus_to_exitcode(status)
        raise NotWritten(f"the writing process ended by signal {-code}" if code < 0 else
                         f"the writing process exited with status {code}")

    def stop(self) -> None:
        self._reap(kill=True)
        with self._lock:
            fd, self._fd = self._fd, None  # (when nobody waits for it)
        if fd is not None:
            os.close(fd)
        partial(self.path).unlink(missing_ok=True)

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` ended it before it was done."""
        return self._stopped


_PRCTL: list[Any] = []


def _death_signal() -> Any:
    """prctl(2) where there is one (Linux), to have the writing copy end with the server (looked
    up once)."""
    if not _PRCTL:
        try:
            import ctypes

            _PRCTL.append(ctypes.CDLL(None, use_errno=True).prctl)
        except (OSError, AttributeError, ImportError):
            _PRCTL.append(None)
    return _PRCTL[0]


def _detach(keep: int, parent: int, prctl: Any) -> None:
    """In the forked copy, before it writes: end with the server (Linux), hold none of the server's
    files or sockets (a port stays the server's alone, and a restarted server's too), and give way
    to serving. The copy runs nothing but the write: no log, no database, no threads."""
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the server ended before the line above took effect
        os._exit(1)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    try:
        signal.set_wakeup_fd(-1)
    except (OSError, ValueError):
        pass
    top = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536
    os.closerange(3, keep)
    os.closerange(keep + 1, max(keep + 2, top))
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 19)
    except (OSError, AttributeError):
        pass
    # nothing may print: a server thread may have held the standard streams' locks at the fork
    sys.stdout = sys.stderr = None  # type: ignore[assignment]
    warnings.simplefilter("ignore")


def write_in_child(path: Path, state: Any, print_: str, shared: dict[str, Any] | None = None,
                   info: dict[str, Any] | None = None) -> ChildWriter:
    """Fork, and :func:`write` the snapshot from the copy: the indexes as they are now, while the
    caller goes on changing its own. The copy shares every page with the server until one of the
    two writes to it (copy on write), so it costs the memory the server changes meanwhile and the
    pages of the objects it pickles. Call it where nothing else changes ``state``."""
    parent, prctl = os.getpid(), _death_signal()  # (looked up here: the copy imports nothing)
    sha = hashlib.sha256()
    r, w = os.pipe()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # (newer Pythons warn when a threaded process forks)
            pid = os.fork()
    except BaseException:
        os.close(r)
        os.close(w)
        raise
    if pid == 0:  # the copy: write, report, and leave without running anything of the server's
        code, report = 1, {"error": "the writing process failed to start"}
        try:
            gc.disable()  # a collection would touch (and so copy) every page of objects
            os.close(r)
            _detach(w, parent, prctl)
            t0 = time.perf_counter()
            size = write(path, state, print_, shared, info, _sha=sha)
            code, report = 0, {"bytes": size, "seconds": time.perf_counter() - t0}
        except BaseException as exc:  # noqa: BLE001 - reported to the server, which logs it
            report = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            try:
                os.write(w, json.dumps(report).encode())
            finally:
                os._exit(code)
    os.close(w)
    return ChildWriter(pid, r, path)


class Unusable(Exception):
    """Why a snapshot cannot be read (the server then rebuilds its indexes)."""


def trailer(path: Path) -> dict[str, Any]:
    """The trailer of the snapshot at ``path`` (Unusable when it is missing or damaged)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            tail = len(END) + _TRAILER_LEN
            if size < len(MAGIC) + tail:
                raise Unusable("the file is truncated")
            f.seek(0)
            if f.read(len(MAGIC)) != MAGIC:
                raise Unusable("not a snapshot file")
            f.seek(size - tail)
            n = int.from_bytes(f.read(_TRAILER_LEN), "little")
            if f.read(len(END)) != END or n <= 0 or n > size - len(MAGIC) - tail:
                raise Unusable("the file is truncated")
            f.seek(size - tail - n)
            meta = json.loads(f.read(n))
    except FileNotFoundError:
        raise Unusable("no snapshot") from None
    except (OSError, ValueError) as exc:
        raise Unusable(f"unreadable: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise Unusable("another snapshot format")
    if size != len(MAGIC) + int(meta.get("bytes", -1)) + n + tail:
        raise Unusable("the file is truncated")
    return meta


def read(path: Path, print_: str, shared: dict[str, Any] | None = None, plugins: tuple[str, ...] = (),
         meta: dict[str, Any] | None = None) -> Any:
    """The state in the snapshot at ``path`` if it was made by this code and these settings, its
    shared objects replaced by those of ``shared`` (the classes of the ``plugins`` modules allowed
    beside this package's; ``meta``: its :func:`trailer`, when the caller has read it already);
    raises :class:`Unusable` saying why not. Which database it was made from, and how far, is the
    caller's to check (the trailer's ``info``)."""
    meta = trailer(path) if meta is None else meta
    if meta.get("fingerprint") != print_:
        raise Unusable("made by other code or settings")
    n = int(meta["bytes"])
    with open(path, "rb") as f:
        f.seek(len(MAGIC))
        sha, left = hashlib.sha256(), n
        while left:
            block = f.read(min(_BLOCK, left))
            if not block:
                raise Unusable("the file is truncated")
            sha.update(block)
            left -= len(block)
        if sha.hexdigest() != meta.get("sha256"):
            raise Unusable("checksum mismatch")
        f.seek(len(MAGIC))
        try:
            return _Unpickler(_Bounded(f, n), shared or {}, plugins).load()
        except Exception as exc:  # noqa: BLE001 - any failure to read means: rebuild
            raise Unusable(f"unreadable: {type(exc).__name__}: {exc}") from exc


class _Bounded(io.RawIOBase):
    """A reader that stops after ``n`` bytes of ``f``."""

    def __init__(self, f: BinaryIO, n: int) -> None:
        self.f, self.left = f, n

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        want = min(len(mv), self.left)
        if want <= 0:
            return 0
        got = self.f.readinto(mv[:want])
        self.left -= got or 0
        return got or 0

    def read(self, size: int = -1) -> bytes:
        size = self.left if size is None or size < 0 else min(size, self.left)
        data = self.f.read(size)
        self.left -= len(data)
        return data

    def readline(self, size: int | None = -1) -> bytes:
        limit = self.left if size is None or size < 0 else min(size, self.left)
        data = self.f.readline(limit)
        self.left -= len(data)
        return data


__all__ = ["CAN_FORK", "FILE_NAME", "GRPC_FORK_VARIABLE", "ChildWriter", "NotWritten", "Unusable", "code_digest", "fingerprint",
           "fork_unsafe", "partial", "read", "trailer", "write", "write_in_child"]
