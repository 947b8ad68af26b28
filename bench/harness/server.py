"""The real Teleo gRPC server as a child process, and the client calls the benchmarks make."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc

from bench.harness.env import REPO, rss_bytes

_SERVING = re.compile(r"teleo: serving on ([\d.]+):(\d+)")


class ServerProcess:
    """``python -m teleo_server --port 0`` (the ``serve`` command) in its own process group; always reaped by ``stop``."""

    def __init__(self, data_dir: Path, backend: str = "numpy", env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.token_file = data_dir.parent / f"{data_dir.name}.token"
        self.log_path = data_dir.parent / f"{data_dir.name}-server.log"
        # The embedding cache is off: a benchmark must pay for every embedding it reports.
        self.env = {**os.environ, "TELEO_DEV_TOKEN_FILE": str(self.token_file), "TELEO_LOG_FORMAT": "json",
                    "TELEO_BACKEND": backend, "TELEO_EMBEDDING": json.dumps({"cache_dir": None}), **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.address = ""

    def start(self, timeout: float = 300.0) -> ServerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "teleo_server", "--port", "0", "--data-dir", str(self.data_dir)],
            stdout=log, stderr=log, env=self.env, cwd=REPO, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = _SERVING.search(self.log_path.read_text(errors="replace"))
            if m:
                self.address = f"{m.group(1)}:{m.group(2)}"
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.logs()}")
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server not serving after {timeout}s:\n{self.logs()}")

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    @property
    def metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.token}")]

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")[-8000:] if self.log_path.exists() else ""

    def rss_mb(self) -> float:
        """Resident memory of the server process (MB), from /proc; 0 when unavailable."""
        return rss_bytes(self.proc.pid) / 2**20 if self.proc else 0.0

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)

    def kill(self) -> None:
        """SIGKILL, as a crash: no clean stop."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def store_batch(address: str, metadata: list[tuple[str, str]], inputs: list[pb.MemoryInput],
                timeout: float = 600.0) -> pb.StoreBatchResponse:
    """One client-streamed StoreBatch call."""
    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        stub = memory_pb2_grpc.MemoryServiceStub(ch)
        reqs = (pb.StoreBatchRequest(memory=m, client_ref=str(i)) for i, m in enumerate(inputs))
        return stub.StoreBatch(reqs, metadata=metadata, timeout=timeout)


def stats(address: str, metadata: list[tuple[str, str]], timeout: float = 30.0) -> pb.StatsResponse:
    """One Stats call."""
    with grpc.insecure_channel(address) as ch:
        return memory_pb2_grpc.MemoryServiceStub(ch).Stats(pb.StatsRequest(), metadata=metadata, timeout=timeout)


@dataclass(slots=True)
class StreamTiming:
    """One Retrieve stream seen by the client."""

    e2e_ms: float                 # call to last message
    first_result_ms: float        # call to first Result
    stages: dict[str, float]      # StageEvent.elapsed_ms by stage (server side)
    total_ms: float               # RetrieveSummary.total_ms (server side)
    embed_ms: float
    ids: list[str] = field(default_factory=list)
    error: str = ""


async def _one_retrieve(stub, req: pb.RetrieveRequest, metadata, timeout: float) -> StreamTiming:
    t0 = time.perf_counter()
    first = 0.0
    stages: dict[str, float] = {}
    ids: list[str] = []
    total = embed = 0.0
    try:
        async for ev in stub.Retrieve(req, metadata=metadata, timeout=timeout):
            kind = ev.WhichOneof("event")
            if kind == "stage":
                if not ev.stage.skipped:
                    stages[ev.stage.stage] = stages.get(ev.stage.stage, 0.0) + ev.stage.elapsed_ms
            elif kind in ("result", "results"):  # one result, or a batch of them (batched requests)
                if not first:
                    first = (time.perf_counter() - t0) * 1e3
                ids.extend([ev.result.memory.id] if kind == "result" else [r.memory.id for r in ev.results.results])
            elif kind == "summary":
                total, embed = ev.summary.total_ms, ev.summary.embed_ms
                if req.batched:  # the stage events come inside the summary
                    for st in ev.summary.stages:
                        if not st.skipped:
                            stages[st.stage] = stages.get(st.stage, 0.0) + st.elapsed_ms
    except grpc.aio.AioRpcError as exc:
        return StreamTiming((time.perf_counter() - t0) * 1e3, 0.0, {}, 0.0, 0.0, [], exc.code().name)
    return StreamTiming((time.perf_counter() - t0) * 1e3, first, stages, total, embed, ids)


async def _load(address: str, metadata, requests: list[pb.RetrieveRequest], clients: int,
                per_client: int, timeout: float) -> tuple[list[StreamTiming], float]:
    # One channel per client: each behaves like a separate agent process.
    channels = [grpc.aio.insecure_channel(address) for _ in range(clients)]
    try:
        stubs = [memory_pb2_grpc.MemoryServiceStub(ch) for ch in channels]
        out: list[StreamTiming] = []

        async def client(c: int) -> None:
            for i in range(per_client):
                req = requests[(c * per_client + i) % len(requests)]
                out.append(await _one_retrieve(stubs[c], req, metadata, timeout))

        t0 = time.perf_counter()
        await asyncio.gather(*(client(c) for c in range(clients)))
        return out, time.perf_counter() - t0
    finally:
        for ch in channels:
            await ch.close()


def retrieve_load(address: str, metadata, requests: list[pb.RetrieveRequest], clients: int,
                  per_client: int, timeout: float = 120.0) -> tuple[list[StreamTiming], float]:
    """``clients`` concurrent closed-loop clients, each issuing ``per_client`` Retrieve calls.

    Returns every stream's timing and the wall-clock seconds of the whole run (for throughput).
    """
    return asyncio.run(_load(address, metadata, requests, clients, per_client, timeout))
