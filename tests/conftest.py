"""Shared fixtures: real Teleo servers on free loopback ports, and authenticated stubs."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")  # as `teleo serve` runs (teleo_server/cli), before gRPC loads

import grpc  # noqa: E402
import pytest
from teleo.v1 import memory_pb2_grpc

from tests._server import InThreadServer, ServerProcess


@pytest.fixture
def server_process(tmp_path: Path):
    """A factory of real server processes; every one is killed at teardown."""
    started: list[ServerProcess] = []

    def make(data_dir: Path | None = None, env: dict[str, str] | None = None) -> ServerProcess:
        srv = ServerProcess(data_dir or tmp_path / "data", tmp_path / "token", env)
        started.append(srv)
        return srv.start()

    yield make
    for srv in started:
        srv.kill()


@pytest.fixture(scope="module")
def api_server(tmp_path_factory):
    """One in-thread server per test module, with the real in-process embedder."""
    from teleo_server.config import Settings

    root = tmp_path_factory.mktemp("api")
    settings = Settings(port=0, data_dir=root / "data", dev_token_file=root / "token", log_format="json")
    srv = InThreadServer.start(settings)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def channel(api_server):
    with grpc.insecure_channel(api_server.address) as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel):
    return memory_pb2_grpc.MemoryServiceStub(channel)


@pytest.fixture(scope="module")
def auth(api_server):
    return [("authorization", f"Bearer {api_server.token}")]
