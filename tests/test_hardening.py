"""Failing clearly under bad input and faults, through a real server and real clients."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from teleo.v1 import memory_pb2 as pb

from teleo_server.auth import create_token
from teleo_server.domain import AccessLevel

_IDENTITY = {"request_serializer": None, "response_deserializer": None}
# bytes that cannot parse: a field with wire type 7, and a string field holding invalid UTF-8
GARBAGE = [b"\xff\xff\xff\xff", b"\x0a\x03\x0a\x01\xff"]


def _token(api_server, agent, read, write, level=AccessLevel.INTERNAL, ns="default"):
    _, token = create_token(api_server.app.core.store, agent, read, write, level, ns)
    return [("authorization", f"Bearer {token}")]


def _code(fn):
    with pytest.raises(grpc.RpcError) as err:
        fn()
    return err.value.code(), err.value.details()


@pytest.mark.parametrize("body", GARBAGE, ids=["wire-type-7", "bad-utf8"])
@pytest.mark.parametrize("method", ["Store", "Get", "Delete", "Compare", "Feedback", "Stats"])
def test_an_unparseable_unary_body_is_invalid_argument(channel, auth, method, body):
    call = channel.unary_unary(f"/teleo.v1.MemoryService/{method}", **_IDENTITY)
    code, details = _code(lambda: call(body, metadata=auth, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("request: is not a valid teleo.v1.") and "Error'" not in details


def test_an_unparseable_retrieve_body_is_invalid_argument(channel, auth):
    call = channel.unary_stream("/teleo.v1.MemoryService/Retrieve", **_IDENTITY)
    code, details = _code(lambda: list(call(GARBAGE[0], metadata=auth, timeout=10)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "teleo.v1.RetrieveRequest" in details


def test_an_unparseable_body_without_a_token_is_still_unauthenticated(channel):
    call = channel.unary_unary("/teleo.v1.MemoryService/Get", **_IDENTITY)
    code, _ = _code(lambda: call(GARBAGE[0], timeout=10))
    assert code == grpc.StatusCode.UNAUTHENTICATED


def test_an_unparseable_batch_item_fails_alone(channel, auth):
    good = pb.StoreBatchRequest(memory=pb.MemoryInput(content="a well formed batch item", namespace="hard"), client_ref="ok")
    call = channel.stream_unary("/teleo.v1.MemoryService/StoreBatch", **_IDENTITY)
    raw = call(iter([good.SerializeToString(), GARBAGE[1]]), metadata=auth, timeout=60)
    resp = pb.StoreBatchResponse.FromString(raw)
    assert (resp.stored, resp.failed) == (1, 1)
    assert resp.items[0].id and not resp.items[0].error
    assert resp.items[1].error_code == "INVALID_ARGUMENT" and "item: is not a valid teleo.v1.StoreBatchRequest" in resp.items[1].error


@pytest.mark.parametrize("dim", [0, 3, 383, 385, 768])
def test_query_vectors_of_the_wrong_length_are_refused(api_server, stub, auth, dim):
    version = api_server.app.core.embedder.model_version
    req = pb.RetrieveRequest(vectors=pb.QueryVectors(dense=np.ones(dim, np.float32) / max(dim, 1) ** 0.5, model_version=version))
    code, details = _code(lambda: list(stub.Retrieve(req, metadata=auth, timeout=10)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("vectors.dense:")


def test_feedback_needs_write_access(api_server, stub):
    writer = _token(api_server, "fb-writer", ["fbk"], ["fbk"], AccessLevel.INTERNAL, "fbk")
    reader = _token(api_server, "fb-reader", ["fbk"], [], AccessLevel.INTERNAL, "fbk")
    mid = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="feedback scope check")), metadata=writer, timeout=30).id
    code, details = _code(lambda: stub.Feedback(pb.FeedbackRequest(id=mid, used=True, helpful=True), metadata=reader, timeout=10))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "feedback needs write access" in details
    (got,) = stub.Get(pb.GetRequest(ids=[mid]), metadata=reader, timeout=10).memories
    assert (got.used_count, got.helpful_count) == (0, 0)
    assert stub.Feedback(pb.FeedbackRequest(id=mid, used=True), metadata=writer, timeout=10).memory.used_count == 1
