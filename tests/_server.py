"""Run real Teleo servers for tests: as a child process, or on an asyncio loop in a thread."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

REPO = Path(__file__).resolve().parent.parent
_SERVING = re.compile(r"teleo: serving on ([\d.]+):(\d+)")


class ServerProcess:
    """``python -m teleo_server serve`` on a free port, in its own process group."""

    def __init__(self, data_dir: Path, token_file: Path, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.token_file = token_file
        self.log_path = data_dir.parent / f"{data_dir.name}-server.log"
        self.env = {**os.environ, "TELEO_DEV_TOKEN_FILE": str(token_file), "TELEO_LOG_FORMAT": "json", **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.address = ""

    def start(self, timeout: float = 120.0) -> "ServerProcess":
        self._log = open(self.log_path, "ab")
        offset = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "teleo_server", "--port", "0", "--data-dir", str(self.data_dir)],
            stdout=self._log,
            stderr=self._log,
            env=self.env,
            cwd=REPO,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_bytes()[offset:].decode(errors="replace")
            m = _SERVING.search(text)
            if m:
                self.address = f"{m.group(1)}:{m.group(2)}"
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.logs()}")
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"server not serving after {timeout}s:\n{self.logs()}")

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")[-20000:]

    def signal(self, sig: int) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        if getattr(self, "_log", None):
            self._log.close()


@dataclass
class InThreadServer:
    """A server built with ``build_server`` and run on an event loop in a background thread."""

    address: str
    token: str
    app: object
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread

    @classmethod
    def start(cls, settings) -> "InThreadServer":
        from teleo_server.server import build_server

        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()

        async def up():
            app = build_server(settings)
            await app.start()
            return app

        app = asyncio.run_coroutine_threadsafe(up(), loop).result(180)
        token = settings.dev_token_file.read_text().strip() if settings.dev_token_file.exists() else ""
        return cls(f"127.0.0.1:{app.port}", token, app, loop, thread)

    def call(self, coro, timeout: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.call(self.app.stop(0.5))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class StubbedServer:
    """An in-thread server with a channel to it, a stub and the development token's metadata."""

    def __init__(self, settings) -> None:
        from teleo.v1 import memory_pb2_grpc

        self.settings = settings
        self.srv = InThreadServer.start(settings)
        self.channel = grpc.insecure_channel(self.srv.address)
        self.stub = memory_pb2_grpc.MemoryServiceStub(self.channel)
        self.auth = [("authorization", f"Bearer {self.srv.token}")]

    @property
    def core(self):
        return self.srv.app.core

    def store(self, texts: list[str], ns: str) -> list[str]:
        from teleo.v1 import memory_pb2 as pb

        return [self.stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=t, namespace=ns)),
                                metadata=self.auth, timeout=60).id for t in texts]

    def stop(self) -> None:
        self.channel.close()
        self.srv.stop()


def wait_serving(address: str, service: str = "", timeout: float = 30.0) -> None:
    with grpc.insecure_channel(address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2).status == 1:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    raise TimeoutError(f"{address} {service!r} not SERVING after {timeout}s")
