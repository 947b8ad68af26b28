"""The Triton client's error mapping and its behaviour with no server (no tritonserver needed)."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from tritonclient.utils import InferenceServerException

from teleo_server import errors
from teleo_server.embedding.base import TextRole
from teleo_server.embedding.triton import TritonEmbedder, map_error
from teleo_server.embedding.triton_launcher import free_port


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


@pytest.mark.parametrize("exc,expected", [
    pytest.param(_rpc_error(grpc.StatusCode.UNAVAILABLE, "Stream removed"), errors.Unavailable,
                 id="aio-unavailable"),
    pytest.param(_rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline"), errors.Unavailable,
                 id="aio-deadline"),
    pytest.param(_rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "bad"), errors.InvalidArgument,
                 id="aio-invalid"),
    pytest.param(InferenceServerException("Server is stopping", status="StatusCode.UNAVAILABLE"),
                 errors.Unavailable, id="triton-stopping"),
    pytest.param(InferenceServerException("Request for unknown model",
                                          status="StatusCode.NOT_FOUND"),
                 errors.Unavailable, id="triton-model-unloaded"),
    pytest.param(InferenceServerException("Stub process 'x' is not healthy.",
                                          status="StatusCode.INTERNAL"),
                 errors.Unavailable, id="triton-stub-crashed"),
    pytest.param(InferenceServerException("ROLE needs one of", status="StatusCode.INVALID_ARGUMENT"),
                 errors.InvalidArgument, id="triton-invalid"),
    pytest.param(InferenceServerException("out of memory", status="StatusCode.RESOURCE_EXHAUSTED"),
                 errors.ResourceExhausted, id="triton-exhausted"),
    pytest.param(InferenceServerException("boom", status="StatusCode.INTERNAL"), errors.Internal,
                 id="triton-internal"),
    pytest.param(TimeoutError(), errors.Unavailable, id="timeout"),
    pytest.param(KeyError("x"), errors.Internal, id="bug"),
])
def test_map_error(exc, expected):
    mapped = map_error(exc, "h:1")
    assert type(mapped) is expected
    assert "h:1" in str(mapped)
    assert mapped.retryable is (expected in (errors.Unavailable, errors.ResourceExhausted))


def test_start_without_server_fails_fast_with_unavailable():
    embedder = TritonEmbedder(f"127.0.0.1:{free_port()}", timeout_s=2.0)

    async def run():
        t0 = time.monotonic()
        with pytest.raises(errors.Unavailable):
            await embedder.start()
        elapsed = time.monotonic() - t0
        assert not await embedder.ready()
        with pytest.raises(errors.Unavailable):
            await embedder.embed(["x"], TextRole.QUERY)
        with pytest.raises(errors.Unavailable):
            _ = embedder.model_version
        await embedder.close()
        return elapsed

    assert asyncio.run(run()) < 5.0


def test_embed_before_start_is_unavailable():
    embedder = TritonEmbedder("127.0.0.1:1")
    with pytest.raises(errors.Unavailable):
        asyncio.run(embedder.embed(["x"], TextRole.QUERY))
    assert embedder.description == "triton://127.0.0.1:1"
