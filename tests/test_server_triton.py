"""The server embedding through a real Triton: degrade when it dies, recover when it returns."""

from __future__ import annotations

import signal
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc

from teleo_server.embedding.repository import ModelFiles, default_model_dir
from teleo_server.embedding.triton_launcher import TritonInstall, TritonServer, default_triton_venv

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _health(address: str, service: str) -> int:
    with grpc.insecure_channel(address) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


def _until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _retrieve(stub, auth, text: str):
    events = list(stub.Retrieve(pb.RetrieveRequest(text=text, top_k=5), metadata=auth, timeout=60))
    return [e.result for e in events if e.WhichOneof("event") == "result"], events[-1].summary


def test_server_degrades_without_triton_and_recovers_by_itself(server_process, tmp_path):
    model_dir = default_model_dir()
    if ModelFiles.in_dir(model_dir).missing():
        pytest.fail("model repository not materialised: run `make models`")
    try:
        install = TritonInstall.find(default_triton_venv())
    except FileNotFoundError as exc:
        pytest.skip(f"Triton venv absent ({exc}); run `make triton-env`")
    triton = TritonServer(install, model_dir)
    triton.start(log_to=tmp_path / "triton.log")
    revived = None
    try:
        triton.wait_ready(timeout_s=120)
        srv = server_process(env={"TELEO_EMBEDDING__TRITON_URL": triton.grpc_url, "TELEO_EMBEDDER_CHECK_SECONDS": "0.5"})
        stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(srv.address))
        auth = [("authorization", f"Bearer {srv.token}")]
        stats = stub.Stats(pb.StatsRequest(), metadata=auth, timeout=10)
        assert triton.grpc_url in stats.embedder and stats.embedder_ready
        kept = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="The orchard's apple harvest begins in late September.")), metadata=auth, timeout=60)
        results, summary = _retrieve(stub, auth, "apple harvest")
        assert not summary.degraded and results[0].memory.id == kept.id

        triton.kill_server(signal.SIGKILL)
        triton.stop()
        _until(lambda: _health(srv.address, "embedding") == health_pb2.HealthCheckResponse.NOT_SERVING, 30, "embedding NOT_SERVING")
        assert _health(srv.address, "") == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as err:
            stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="Pears ripen after apples.")), metadata=auth, timeout=30)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        results, summary = _retrieve(stub, auth, "when does the apple harvest begin")  # a text not in the cache
        assert summary.degraded and "embedding" in summary.degraded_reason
        assert results and results[0].memory.id == kept.id  # lexical recall still finds it
        assert stub.Get(pb.GetRequest(ids=[kept.id]), metadata=auth, timeout=10).memories  # nothing lost

        revived = TritonServer(install, model_dir, http_port=triton.http_port, grpc_port=triton.grpc_port, metrics_port=triton.metrics_port)
        revived.start(log_to=tmp_path / "triton2.log")
        revived.wait_ready(timeout_s=120)
        _until(lambda: _health(srv.address, "embedding") == health_pb2.HealthCheckResponse.SERVING, 60, "embedding SERVING again")
        assert stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="Pears ripen after apples.")), metadata=auth, timeout=60).id
        results, summary = _retrieve(stub, auth, "which fruit ripens after apples")
        assert not summary.degraded and results
    finally:
        for t in (triton, revived):
            if t is not None:
                t.stop()
        assert not triton.stub_pids() and not triton.shm_regions()
