"""Real Teleo server processes, tokens and tmpfs mounts for the stress parts; all of them reaped.

Every server runs as ``python -m teleo_server --port 0 --data-dir DIR`` in its own process group
on 127.0.0.1. Whatever is started or mounted here is registered, and ``cleanup()`` (called by the
runner on exit, Ctrl-C included) kills and unmounts what is left.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from collections.abc import Iterator
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from teleo.v1 import memory_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
# The checkout whose server is stressed: this one, unless the runner is told another (--server-root).
SERVER_ROOT = REPO
_SERVING = re.compile(r"teleo: serving on ([\d.]+):(\d+)")
LEVELS = {1: "public", 2: "internal", 3: "confidential", 4: "restricted"}

_live: set["Server"] = set()
_mounts: list[Path] = []


class ServerError(RuntimeError):
    """The server did not come up; the message carries the tail of its log."""


class Server:
    """One server process on a data directory; ``start`` may be called again after ``kill``."""

    def __init__(self, data_dir: Path, log_dir: Path, env: dict[str, str] | None = None, name: str = "server") -> None:
        self.data_dir = data_dir
        self.token_file = log_dir / f"{name}.token"
        self.log_path = log_dir / f"{name}.log"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "TELEO_DEV_TOKEN_FILE": str(self.token_file), "TELEO_LOG_FORMAT": "json",
                    "TELEO_BACKEND": "numpy", **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.address = ""
        self.starts: list[float] = []  # seconds each start took until "serving"

    def start(self, timeout: float = 120.0) -> "Server":
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "teleo_server", "--port", "0", "--data-dir", str(self.data_dir)],
                stdout=log, stderr=log, env=self.env, cwd=SERVER_ROOT, start_new_session=True)
        _live.add(self)
        while time.monotonic() - t0 < timeout:
            text = self.log_path.read_bytes()[offset:].decode(errors="replace")
            m = _SERVING.search(text)
            if m:
                self.address = f"{m.group(1)}:{m.group(2)}"
                self.starts.append(time.monotonic() - t0)
                return self
            if self.proc.poll() is not None:
                _live.discard(self)
                raise ServerError(f"server exited with {self.proc.returncode}: {tail(text)}")
            time.sleep(0.05)
        self.kill()
        raise ServerError(f"server not serving after {timeout:.0f}s: {tail(self.logs())}")

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group; SIGKILL waits until the process is gone."""
        if self.alive():
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            if sig == signal.SIGKILL:
                self.proc.wait(30)
        if not self.alive():
            _live.discard(self)

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM (the server drains), then SIGKILL if it is still there after ``grace`` seconds."""
        if self.alive():
            self.kill(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


_RID = re.compile(r"request id ([0-9A-Za-z_-]+)")


def annotate(examples: list[dict], logs: str) -> None:
    """Add to each example whose message quotes a request id the exception the server logged for it."""
    for ex in examples:
        m = _RID.search(str(ex.get("message", "")))
        if not m:
            continue
        for line in logs.splitlines():
            if m.group(1) not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("exception"):
                ex["server_exception"] = rec["exception"].strip().splitlines()[-1][:300]
                break


def tail(text: str, lines: int = 6, width: int = 600) -> str:
    out = " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])
    return out[-width:]


def channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20),
                                                   ("grpc.max_send_message_length", 64 << 20)])


def stub(ch: grpc.Channel) -> memory_pb2_grpc.MemoryServiceStub:
    return memory_pb2_grpc.MemoryServiceStub(ch)


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def health(address: str, service: str = "", timeout: float = 3.0) -> str:
    """The health status name of ``service``, or the status code name when the check fails."""
    with grpc.insecure_channel(address) as ch:
        try:
            resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            return exc.code().name
    return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


# -- tokens ---------------------------------------------------------------------------------------


_CREATE = r"""
import json, sys
from pathlib import Path
from teleo_server.auth import create_token
from teleo_server.domain import AccessLevel
from teleo_server.store import SQLiteStore

data_dir, specs = Path(sys.argv[1]), json.load(sys.stdin)
data_dir.mkdir(parents=True, exist_ok=True)
store = SQLiteStore(data_dir / "teleo.db")
try:
    print(json.dumps([create_token(store, a, r, w, AccessLevel(lvl), ns)[1] for a, r, w, lvl, ns in specs]))
finally:
    store.close()
"""


def create_tokens_offline(data_dir: Path, specs: list[tuple[str, list[str], list[str], int, str]]) -> list[str]:
    """Tokens written straight into the database, (agent, read, write, level, namespace) each; only while
    no server runs on it. Done by the server's own code (``SERVER_ROOT``), so the schema is the server's."""
    done = subprocess.run([sys.executable, "-c", _CREATE, str(data_dir)], input=json.dumps(specs), cwd=SERVER_ROOT,
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"creating tokens failed: {tail(done.stderr)}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def create_token_offline(data_dir: Path, agent: str, read: list[str], write: list[str], level: int,
                         namespace: str) -> str:
    return create_tokens_offline(data_dir, [(agent, read, write, level, namespace)])[0]


def token_id(token: str) -> str:
    """The id part of ``teleo_<id>_<secret>`` (what ``teleo token revoke`` takes)."""
    return token.split("_")[1]


def _cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "teleo_server.cli", *args], cwd=SERVER_ROOT, capture_output=True,
                          text=True, timeout=timeout)


def create_token_cli(data_dir: Path, agent: str, read: list[str], write: list[str], level: int,
                     namespace: str) -> tuple[str, str]:
    """(token_id, token) through ``teleo token create``, also while the server runs."""
    args = ["token", "--data-dir", str(data_dir), "create", "--agent", agent, "--namespace", namespace,
            "--access-level", LEVELS[level]]
    for r in read:
        args += ["--read", r]
    for w in write:
        args += ["--write", w]
    done = _cli(*args)
    if done.returncode != 0:
        raise RuntimeError(f"teleo token create failed: {done.stderr.strip()}")
    token = done.stdout.strip().splitlines()[0]
    return token_id(token), token


def revoke_token_cli(data_dir: Path, token_id: str) -> None:
    done = _cli("token", "--data-dir", str(data_dir), "revoke", token_id)
    if done.returncode != 0:
        raise RuntimeError(f"teleo token revoke failed: {done.stderr.strip()}")


# -- tmpfs ----------------------------------------------------------------------------------------


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def mount_tmpfs(path: Path, size: str) -> None:
    """Mount a tmpfs of ``size`` (e.g. "64m") on ``path``; raises RuntimeError with mount's message."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"mount -t tmpfs failed: {done.stderr.strip() or done.returncode}")
    _mounts.append(path)


def remount_read_only(path: Path) -> None:
    done = subprocess.run(["mount", "-o", "remount,ro", str(path)], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"remount read-only failed: {done.stderr.strip() or done.returncode}")


def unmount(path: Path) -> None:
    for args in (["umount", str(path)], ["umount", str(path)], ["umount", "-l", str(path)]):
        if subprocess.run(args, capture_output=True, timeout=30).returncode == 0:
            break
        time.sleep(0.5)
    if path in _mounts:
        _mounts.remove(path)


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    mount_tmpfs(path, size)
    try:
        yield path
    finally:
        unmount(path)


def fill(path: Path) -> int:
    """Write a filler file under ``path`` until the filesystem is full; returns the bytes written."""
    written = 0
    with open(path / "filler.bin", "wb", buffering=0) as f:
        for block in (1 << 20, 64 << 10, 4 << 10, 512, 1):
            chunk = b"\0" * block
            while True:
                try:
                    written += f.write(chunk)
                except OSError:
                    break
    return written


def cleanup() -> None:
    """Kill every server still running and unmount every tmpfs still mounted."""
    for srv in list(_live):
        srv.kill()
    for path in list(reversed(_mounts)):
        unmount(path)


__all__ = ["Server", "ServerError", "annotate", "bearer", "channel", "cleanup", "create_token_cli", "create_token_offline",
           "create_tokens_offline",
           "fill", "health", "is_root", "token_id", "mount_tmpfs", "remount_read_only", "revoke_token_cli", "stub", "tail",
           "tmpfs", "unmount"]
