"""Part 5, fault injection: a write lock held elsewhere, a full disk, and start-up on a broken data dir.

(a) Another process holds ``BEGIN EXCLUSIVE`` on the running server's database. Stores must fail
fast with UNAVAILABLE (not wait out SQLite's busy timeout), Retrieve and Get must keep working, and
writes must resume once the lock is gone.

(b) As root: the data directory is a 64 MiB tmpfs, filled to the last byte by a filler file.
Store must get RESOURCE_EXHAUSTED with a message that says the disk is full, Retrieve must still
succeed, health must report the ``store`` component as not serving, and all of it must recover
when the filler is removed. Without root this is skipped, and the JSON says so.

(c) Start-up on a read-only directory (a read-only tmpfs as root, mode 0555 otherwise), on a
read-only directory holding a database, on a full disk, and on a database locked by another
process: the server must exit, without a traceback, with a last line naming the path and the cause.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
from teleo.v1 import memory_pb2 as pb

from bench.stress.context import Context
from bench.stress import server
from bench.stress.report import Part
from bench.stress.server import (
    Server, annotate, bearer, channel, create_token_offline, fill, health, is_root, mount_tmpfs, remount_read_only, stub,
    tail, unmount,
)

# Holds a lock on a SQLite database until its stdin closes. "write": BEGIN EXCLUSIVE, which in WAL
# mode stops writers only; "exclusive": locking_mode=EXCLUSIVE first, which stops readers as well.
_LOCKER = r"""
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
if sys.argv[2] == "exclusive":
    conn.execute("PRAGMA locking_mode=EXCLUSIVE")
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("BEGIN EXCLUSIVE")
conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


class Locker:
    def __init__(self, db: Path, mode: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _LOCKER, str(db), mode], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        line = self.proc.stdout.readline().strip()
        if line != "locked":
            err = self.proc.stderr.read()
            self.release()
            raise RuntimeError(f"could not take the lock: {err.strip()[-300:]}")

    def release(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> "Locker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _timed(fn) -> dict:
    t0 = time.perf_counter()
    try:
        fn()
        code, details = "OK", ""
    except grpc.RpcError as exc:
        code, details = exc.code().name, exc.details() or ""
    return {"status": code, "seconds": round(time.perf_counter() - t0, 2), "message": details[:300]}


def _calls(srv: Server, ids: list[str], deadline: float, ctx: Context, tag: str, size: int) -> dict:
    """Store first, then (0.3 s later, while it may still hang) Retrieve, Get and a StoreBatch, each on its own thread.

    size: characters of the stored content (a large one needs new database pages)."""
    auth = bearer(srv.token)
    rng = ctx.rng(f"faults-{tag}")
    out: dict[str, dict] = {}
    with channel(srv.address) as ch:
        s = stub(ch)
        big = " ".join(ctx.sentence(rng, 12) for _ in range(size // 60 + 1))[:size]
        jobs = {
            "Store": lambda: s.Store(pb.StoreRequest(memory=pb.MemoryInput(content=f"{tag} store {big}", namespace="faults")),
                                     metadata=auth, timeout=deadline),
            "Retrieve": lambda: list(s.Retrieve(pb.RetrieveRequest(text="faults baseline memory", top_k=5), metadata=auth,
                                                timeout=deadline)),
            "Get": lambda: s.Get(pb.GetRequest(ids=ids[:5]), metadata=auth, timeout=deadline),
            "StoreBatch": lambda: _batch(s, auth, deadline, f"{tag} batch {big[:8000]}"),
        }
        threads = []
        for name, fn in jobs.items():
            t = threading.Thread(target=lambda n=name, f=fn: out.__setitem__(n, _timed(f)), daemon=True)
            t.start()
            threads.append(t)
            if name == "Store":
                time.sleep(0.3)
        time.sleep(1.5)
        out["health"] = {"store": health(srv.address, "store"), "server": health(srv.address, "")}
        for t in threads:
            t.join(deadline + 10)
    return out


def _batch(s, auth, deadline: float, content: str) -> None:
    resp = s.StoreBatch(iter([pb.StoreBatchRequest(memory=pb.MemoryInput(content=content, namespace="faults"))]),
                        metadata=auth, timeout=deadline)
    if resp.items and resp.items[0].error:
        raise _ItemError(resp.items[0].error_code, resp.items[0].error)


class _ItemError(grpc.RpcError):
    def __init__(self, code: str, details: str) -> None:
        self._code, self._details = code, details

    def code(self):
        return grpc.StatusCode[self._code]

    def details(self) -> str:
        return "(batch item) " + self._details


def _seed(srv: Server, ctx: Context) -> list[str]:
    rng = ctx.rng("faults-seed")
    with channel(srv.address) as ch:
        reqs = [pb.StoreBatchRequest(memory=pb.MemoryInput(content=f"faults baseline memory {i} {ctx.sentence(rng)}", namespace="faults"))
                for i in range(20)]
        return [i.id for i in stub(ch).StoreBatch(iter(reqs), metadata=bearer(srv.token), timeout=120).items]


def _recovers(srv: Server, seconds: float) -> dict:
    """Poll until a Store succeeds and health 'store' is SERVING again, for at most ``seconds``."""
    t0 = time.monotonic()
    stored = serving = None
    with channel(srv.address) as ch:
        s = stub(ch)
        while time.monotonic() - t0 < seconds and (stored is None or serving is None):
            if stored is None:
                try:
                    s.Store(pb.StoreRequest(memory=pb.MemoryInput(content=f"faults recovery {time.time()}", namespace="faults")),
                            metadata=bearer(srv.token), timeout=10)
                    stored = round(time.monotonic() - t0, 2)
                except grpc.RpcError:
                    pass
            if serving is None and health(srv.address, "store") == "SERVING":
                serving = round(time.monotonic() - t0, 2)
            time.sleep(0.25)
    return {"store_ok_after_s": stored, "health_serving_after_s": serving}


# -- (a) a held write lock --------------------------------------------------------------------------


def held_lock(ctx: Context, part: Part) -> None:
    work = ctx.dir("faults-lock")
    srv = Server(work / "data", work, name="lock")
    deadline = ctx.pick(40.0, 8.0)
    fig: dict = {"client_deadline_s": deadline}
    try:
        srv.start()
        ids = _seed(srv, ctx)
        with Locker(srv.data_dir / "teleo.db", "write"):
            fig["during"] = _calls(srv, ids, deadline, ctx, "lock", 200)
        fig["after_release"] = _recovers(srv, 15.0)
    except Exception as exc:
        fig["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        srv.stop()
        _explain(fig, srv.logs())
    part.figures["held_write_lock"] = fig
    during = fig.get("during", {})
    st, rt = during.get("Store"), during.get("Retrieve")
    part.target("lock_store", "(a) write lock held elsewhere: Store fails fast (<= 5 s) with UNAVAILABLE",
                None if st is None else f"{st['status']} after {st['seconds']} s",
                None if st is None else st["status"] == "UNAVAILABLE" and st["seconds"] <= 5.0)
    part.target("lock_retrieve", "(a) write lock held elsewhere: Retrieve keeps working (OK in <= 5 s)",
                None if rt is None else f"{rt['status']} after {rt['seconds']} s",
                None if rt is None else rt["status"] == "OK" and rt["seconds"] <= 5.0)
    rec = fig.get("after_release", {})
    part.target("lock_recovery", "(a) writes resume within 15 s of the lock's release",
                None if not rec else f"Store OK after {rec['store_ok_after_s']} s" if rec["store_ok_after_s"] is not None else "no",
                None if not rec else rec["store_ok_after_s"] is not None)
    for name, r in during.items():
        want = "UNAVAILABLE" if name.startswith("Store") else "OK"
        if name != "health" and (r["status"] != want or r["seconds"] > 5.0):
            part.example(fault="write lock held", method=name, expected=f"{want} in <= 5 s", status=r["status"],
                         seconds=r["seconds"], message=r["message"], server_exception=r.get("server_exception", ""))


# -- (b) a full disk ------------------------------------------------------------------------------

ACTIONABLE = re.compile(r"disk|space|full|no room|quota", re.I)


def _explain(fig: dict, logs: str) -> None:
    """The server's own exception next to each INTERNAL answer it gave (found by request id)."""
    results = [r for r in fig.get("during", {}).values() if "status" in r] + fig.get("retrieve_again", [])
    annotate(results, logs)


def full_disk(ctx: Context, part: Part) -> None:
    names = ("disk_store", "disk_retrieve", "disk_health", "disk_recovery")
    why = "" if is_root() else "not running as root: a tmpfs cannot be mounted, so the disk cannot be filled safely"
    work = ctx.dir("faults-disk")
    mnt = work / "mnt"
    srv = None
    fig: dict = {}
    if not why:
        try:
            mount_tmpfs(mnt, "64m")
        except RuntimeError as exc:
            why = f"tmpfs mount failed: {exc}"
    if why:
        part.skipped.append(f"(b) full disk: {why}")
        for n in names:
            part.target(n, f"(b) full disk: {n.split('_')[1]}", None, None, f"skipped: {why}")
        part.figures["full_disk"] = {"skipped": why}
        return
    try:
        srv = Server(mnt / "data", work, name="disk")
        srv.start()
        ids = _seed(srv, ctx)
        fig["filled_bytes"] = fill(mnt)
        fig["during"] = _calls(srv, ids, 30.0, ctx, "disk", 32_000)
        with channel(srv.address) as ch:
            s = stub(ch)
            fig["retrieve_again"] = [_timed(lambda k=k: list(s.Retrieve(pb.RetrieveRequest(text=f"faults baseline memory {k}", top_k=5),
                                                                        metadata=bearer(srv.token), timeout=30)))
                                     for k in range(3)]
        (mnt / "filler.bin").unlink()
        fig["after_freeing"] = _recovers(srv, 20.0)
    except Exception as exc:
        fig["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if srv is not None:
            srv.stop()
            _explain(fig, srv.logs())
        unmount(mnt)
    part.figures["full_disk"] = fig
    during = fig.get("during", {})
    st = during.get("Store")
    actionable = bool(st) and bool(ACTIONABLE.search(st["message"]))
    part.target("disk_store", "(b) full disk: Store gets RESOURCE_EXHAUSTED saying the disk is full",
                None if st is None else f"{st['status']}: {st['message'][:120]!r}",
                None if st is None or st["status"] == "OK" else st["status"] == "RESOURCE_EXHAUSTED" and actionable,
                "the Store succeeded: the database still had room" if st and st["status"] == "OK" else "")
    reads = [during.get("Retrieve")] + fig.get("retrieve_again", []) if during.get("Retrieve") else []
    part.target("disk_retrieve", "(b) full disk: Retrieve still succeeds",
                None if not reads else f"{sum(r['status'] == 'OK' for r in reads)} of {len(reads)} OK",
                None if not reads else all(r["status"] == "OK" for r in reads))
    h = during.get("health")
    part.target("disk_health", "(b) full disk: health 'store' is not SERVING",
                None if h is None else f"store {h['store']}, server {h['server']}",
                None if h is None else h["store"] != "SERVING")
    rec = fig.get("after_freeing")
    part.target("disk_recovery", "(b) full disk: Store and health recover within 20 s of freeing space",
                None if rec is None else f"Store OK after {rec['store_ok_after_s']} s, health SERVING after {rec['health_serving_after_s']} s",
                None if rec is None else rec["store_ok_after_s"] is not None and rec["health_serving_after_s"] is not None)
    for name, r in during.items():
        want = "RESOURCE_EXHAUSTED" if name.startswith("Store") else "OK"
        if name != "health" and r["status"] != want:
            part.example(fault="full disk", method=name, expected=want, status=r["status"], seconds=r["seconds"],
                         message=r["message"], server_exception=r.get("server_exception", ""))


# -- (c) start-up on a broken data directory -------------------------------------------------------

CAUSES = {"read-only": r"read-only|readonly|permission|not writable|cannot be written",
          "full": r"full|space|no room", "locked": r"lock|busy"}


def _start(data_dir: Path, work: Path, limit: float) -> dict:
    """Start a server on ``data_dir``; how it ended, its last line, whether it printed a traceback."""
    log = work / f"start-{data_dir.parent.name}-{data_dir.name}.log"
    env = {"TELEO_DEV_TOKEN_FILE": str(work / "start.token"), "TELEO_LOG_FORMAT": "json", "TELEO_BACKEND": "numpy"}
    t0 = time.monotonic()
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "teleo_server", "--port", "0", "--data-dir", str(data_dir)],
                                stdout=f, stderr=f, env={**os.environ, **env}, cwd=server.SERVER_ROOT, start_new_session=True)
    outcome = "hung"
    try:
        while time.monotonic() - t0 < limit:
            if proc.poll() is not None:
                outcome = "exited"
                break
            if "teleo: serving on" in log.read_text(errors="replace"):
                outcome = "serving"
                break
            time.sleep(0.1)
    finally:
        elapsed = round(time.monotonic() - t0, 2)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    text = log.read_text(errors="replace")
    lines = [line for line in text.splitlines() if line.strip()]
    return {"outcome": outcome, "exit_code": proc.returncode if outcome == "exited" else None, "seconds": elapsed,
            "last_line": lines[-1][:400] if lines else "", "traceback": "Traceback" in text,
            "log_tail": "" if outcome == "exited" else tail(text, 4)}


def _judge(case: dict, data_dir: Path, cause: str) -> bool:
    line = case["last_line"]
    named = str(data_dir) in line
    rest = line.replace(str(data_dir), " ")  # the cause must be in the words, not in the path
    case["names_path"], case["names_cause"] = named, bool(re.search(CAUSES[cause], rest, re.I))
    return case["outcome"] == "exited" and case["exit_code"] != 0 and not case["traceback"] and named and case["names_cause"]


def _db_with_token(data_dir: Path) -> None:
    create_token_offline(data_dir, "faults", ["*"], ["*"], 4, "faults")


def startup(ctx: Context, part: Part) -> None:
    work = ctx.dir("faults-start")
    limit = ctx.pick(45.0, 12.0)
    cases: dict[str, dict] = {}
    skipped: list[str] = []
    root = is_root()

    def run_case(name: str, slug: str, cause: str, prepare, mount_size: str | None) -> None:
        mnt = work / slug
        data = mnt / "data"
        mounted = False
        try:
            if mount_size:
                mount_tmpfs(mnt, mount_size)
                mounted = True
            prepare(mnt, data)
            case = _start(data, work, limit)
            case["ok"] = _judge(case, data, cause)
            cases[name] = case
        except RuntimeError as exc:
            skipped.append(f"{name}: {exc}")
        finally:
            if mounted:
                unmount(mnt)
            elif mnt.exists():
                mnt.chmod(0o755)
                if data.exists():
                    data.chmod(0o755)

    def ro_empty(mnt: Path, data: Path) -> None:
        data.mkdir(parents=True, exist_ok=True)
        if root:
            remount_read_only(mnt)
        else:
            data.chmod(0o555)

    def ro_existing(mnt: Path, data: Path) -> None:
        _db_with_token(data)
        remount_read_only(mnt)

    def full(mnt: Path, data: Path) -> None:
        data.mkdir(parents=True, exist_ok=True)
        fill(mnt)

    if root:
        run_case("read-only directory", "ro", "read-only", ro_empty, "4m")
        run_case("read-only directory holding a database", "ro-db", "read-only", ro_existing, "16m")
        run_case("full disk", "full", "full", full, "2m")
    else:
        run_case("read-only directory", "ro", "read-only", ro_empty, None)
        skipped.append("read-only directory holding a database, full disk: need root to mount a tmpfs")

    data = work / "locked" / "data"
    _db_with_token(data)
    try:
        with Locker(data / "teleo.db", "exclusive"):
            case = _start(data, work, limit)
        case["ok"] = _judge(case, data, "locked")
        cases["database locked by another process"] = case
    except RuntimeError as exc:
        skipped.append(f"database locked by another process: {exc}")

    data = work / "locked-new" / "data"
    data.mkdir(parents=True, exist_ok=True)
    try:
        with Locker(data / "teleo.db", "write"):  # an empty database whose schema the server must write
            case = _start(data, work, limit)
        case["ok"] = _judge(case, data, "locked")
        cases["new database write-locked by another process"] = case
    except RuntimeError as exc:
        skipped.append(f"new database write-locked by another process: {exc}")

    part.figures["startup"] = cases
    part.skipped += [f"(c) {s}" for s in skipped]
    good = [n for n, c in cases.items() if c["ok"]]
    part.target("startup", "(c) start-up on a broken data dir ends in one line naming the path and the cause, no traceback",
                f"{len(good)} of {len(cases)} cases" if cases else None, (len(good) == len(cases)) if cases else None)
    for name, c in cases.items():
        if not c["ok"]:
            part.example(fault=f"start-up: {name}", outcome=c["outcome"], exit_code=c["exit_code"], seconds=c["seconds"],
                         traceback=c["traceback"], last_line=c["last_line"])


def run(ctx: Context) -> Part:
    part = Part("faults", "5. fault injection")
    for step in (held_lock, full_disk, startup):
        try:
            step(ctx, part)
        except Exception as exc:
            part.error = (part.error + "; " if part.error else "") + f"{step.__name__}: {type(exc).__name__}: {exc}"
    return part
