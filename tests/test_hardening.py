"""Failing clearly under bad input and faults, through a real server and real clients."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from teleo.v1 import memory_pb2 as pb

from teleo_server.auth import create_token
from teleo_server.core import SATURATED_RETRY_S
from teleo_server.domain import AccessLevel
from teleo_server.errors import RETRY_AFTER_KEY
from tests._rpc import status as _code
from tests._rpc import token_auth as _token

_IDENTITY = {"request_serializer": None, "response_deserializer": None}
# bytes that cannot parse: a field with wire type 7, and a string field holding invalid UTF-8
GARBAGE = [b"\xff\xff\xff\xff", b"\x0a\x03\x0a\x01\xff"]




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
    # no values at all is no dense head: refused as a query without vectors
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("vectors.dense:" if dim else "vectors: no query vector given")


def test_feedback_needs_write_access(api_server, stub):
    writer = _token(api_server, "fb-writer", ["fbk"], ["fbk"], AccessLevel.INTERNAL, "fbk")
    reader = _token(api_server, "fb-reader", ["fbk"], [], AccessLevel.INTERNAL, "fbk")
    mid = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="feedback scope check")), metadata=writer, timeout=30).id
    code, details = _code(lambda: stub.Feedback(pb.FeedbackRequest(id=mid, used=True, helpful=True), metadata=reader, timeout=10))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "feedback needs write access" in details
    (got,) = stub.Get(pb.GetRequest(ids=[mid]), metadata=reader, timeout=10).memories
    assert (got.used_count, got.helpful_count) == (0, 0)
    assert stub.Feedback(pb.FeedbackRequest(id=mid, used=True), metadata=writer, timeout=10).memory.used_count == 1


# -- slow consumers, admission and deadlines -----------------------------------------------------


@pytest.fixture(scope="module")
def tight_server(tmp_path_factory):
    """A server with small retrieval limits and a short write-stall timeout."""
    from teleo_server.config import Settings
    from tests._server import InThreadServer

    root = tmp_path_factory.mktemp("tight")
    limits = {"max_concurrent_retrieves": 2, "max_streams_per_token": 3, "write_stall_seconds": 4.0}
    srv = InThreadServer.start(Settings(port=0, data_dir=root / "data", dev_token_file=root / "token", limits=limits))
    yield srv
    srv.stop()


def _wait_for(predicate, what: str, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"not reached within {timeout:g} s: {what}")


def _tight_tokens(srv, n):
    return [[("authorization", f"Bearer {create_token(srv.app.core.store, f'slow{i}', ['*'], ['*'], AccessLevel.INTERNAL)[1]}")]
            for i in range(n)]


@pytest.fixture(scope="module")
def big_results(tight_server):
    """60 long memories: a top-60 Retrieve with explanations is ~200 KB, over a 64 KB window."""
    from teleo.v1 import memory_pb2_grpc

    auth = [("authorization", f"Bearer {tight_server.token}")]
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(tight_server.address))
    words = "harbour crane cargo manifest tide pilot berth container customs ledger".split()
    rng = np.random.default_rng(3)
    docs = [" ".join(rng.choice(words, 400)) + f" shipment {i}" for i in range(60)]
    stub.StoreBatch(iter(pb.StoreBatchRequest(memory=pb.MemoryInput(content=d)) for d in docs), metadata=auth, timeout=120)
    return pb.RetrieveRequest(text="harbour cargo manifest", top_k=60, explain=True, include_breakdown=True)


def _open_unread(srv, req, tokens):
    """Clients with small flow-control windows that open a Retrieve stream and never read it;
    opened one after another, each waited for until its results are computed."""
    from teleo.v1 import memory_pb2_grpc

    admission = srv.app.core.admission
    channels, calls = [], []
    for tok in tokens:
        channels.append(grpc.insecure_channel(srv.address, options=[("grpc.http2.bdp_probe", 0)]))
        calls.append(memory_pb2_grpc.MemoryServiceStub(channels[-1]).Retrieve(req, metadata=tok, timeout=60))
        _wait_for(lambda: admission.open == len(calls) and admission.computing == 0, f"{len(calls)} streams open, none computing")
    return channels, calls


def test_clients_that_never_read_do_not_hold_retrieval_slots(tight_server, big_results):
    from teleo.v1 import memory_pb2_grpc

    auth = [("authorization", f"Bearer {tight_server.token}")]
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(tight_server.address))
    admission = tight_server.app.core.admission
    channels, stalled = _open_unread(tight_server, big_results, _tight_tokens(tight_server, 4))
    try:
        # more stalled streams than compute slots (2), yet another client is served
        events = list(stub.Retrieve(pb.RetrieveRequest(text="customs ledger", top_k=3), metadata=auth, timeout=30))
        assert events[-1].summary.returned == 3
        # and the stalled streams are ended by the write-stall timeout
        _wait_for(lambda: admission.open == 0, "stalled streams ended")
        with pytest.raises(grpc.RpcError) as err:
            for _ in stalled[0]:
                pass
        assert err.value.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.CANCELLED), err.value
    finally:
        for ch in channels:
            ch.close()


def test_a_token_may_hold_only_so_many_open_streams(tight_server, big_results):
    from teleo.v1 import memory_pb2_grpc

    mine, other = _tight_tokens(tight_server, 2)
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(tight_server.address))
    admission = tight_server.app.core.admission
    _wait_for(lambda: admission.open == 0, "earlier streams ended")
    channels, held = _open_unread(tight_server, big_results, [mine] * 3)
    token_id = mine[0][1].split("_")[1]
    try:
        assert admission.per_token[token_id] == 3
        code, details = _code(lambda: list(stub.Retrieve(big_results, metadata=mine, timeout=30)))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "this token has 3 retrieve streams open" in details
        assert list(stub.Retrieve(pb.RetrieveRequest(text="harbour", top_k=1), metadata=other, timeout=30))[-1].summary.returned == 1
    finally:
        for call in held:
            call.cancel()
        for ch in channels:
            ch.close()
    _wait_for(lambda: admission.per_token.get(token_id, 0) == 0, "cancelled streams given back")


def test_a_store_whose_deadline_expires_during_its_commit_is_still_indexed(tight_server):
    import time

    from teleo.v1 import memory_pb2_grpc

    core = tight_server.app.core
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(tight_server.address))
    auth = [("authorization", f"Bearer {tight_server.token}")]
    real = core.store.put_many

    def slow_put_many(*args, **kw):  # a commit that takes longer than the caller is willing to wait
        time.sleep(1.0)
        return real(*args, **kw)

    core.store.put_many = slow_put_many
    try:
        text = "The night ferry to Stromness leaves at half past eleven."
        code, _ = _code(lambda: stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=text)), metadata=auth, timeout=0.5))
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        core.store.put_many = real
    _wait_for(lambda: not core._background, "the commit finished")
    again = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=text)), metadata=auth, timeout=30)
    assert again.duplicate  # it was committed ...
    events = list(stub.Retrieve(pb.RetrieveRequest(text="night ferry Stromness", top_k=1), metadata=auth, timeout=30))
    assert [e.result.memory.id for e in events if e.WhichOneof("event") == "result"] == [again.id]  # ... and indexed


def test_retrieve_shows_the_stored_retrieved_count_not_a_stale_copy(stub, auth):
    import time

    mid = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="The abacus predates written numerals.", namespace="counts")),
                     metadata=auth, timeout=30).id
    req = pb.RetrieveRequest(text="abacus numerals", top_k=1, filters=pb.RetrieveFilters(namespaces=["counts"]))

    def shown() -> int:
        events = list(stub.Retrieve(req, metadata=auth, timeout=30))
        (result,) = [e.result for e in events if e.WhichOneof("event") == "result"]
        assert result.memory.id == mid
        return result.memory.retrieved_count

    assert shown() == 0
    deadline = time.monotonic() + 30
    while (count := shown()) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert count >= 1
    assert stub.Get(pb.GetRequest(ids=[mid]), metadata=auth, timeout=10).memories[0].retrieved_count >= count


def test_feedback_helpful_false_is_counted_as_misled(stub, auth):
    mid = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="Misleading hint about the build cache.", namespace="counts")),
                     metadata=auth, timeout=30).id
    got = stub.Feedback(pb.FeedbackRequest(id=mid, used=True, helpful=False), metadata=auth, timeout=10).memory
    assert (got.used_count, got.helpful_count, got.misled_count) == (1, 0, 1)
    got = stub.Feedback(pb.FeedbackRequest(id=mid, used=True), metadata=auth, timeout=10).memory
    assert (got.used_count, got.helpful_count, got.misled_count) == (2, 0, 1)


def test_links_must_point_at_readable_memories_in_the_same_namespace(api_server, stub, auth):
    home = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="The lighthouse lamp was replaced in 1998.", namespace="links-a")),
                      metadata=auth, timeout=30).id
    away = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="A different namespace entirely.", namespace="links-b")),
                      metadata=auth, timeout=30).id
    secret = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="Restricted lamp budget.", namespace="links-a",
                                                              access_level=pb.ACCESS_LEVEL_RESTRICTED)), metadata=auth, timeout=30).id
    reader = _token(api_server, "linker", ["links-a"], ["links-a"], AccessLevel.INTERNAL, "links-a")

    def link(target, token=auth):
        mem = pb.MemoryInput(content=f"The new lamp is an LED unit ({target[:6]}).", namespace="links-a",
                             links=[pb.Link(target_id=target, type=pb.LINK_TYPE_SUPERSEDES)])
        return stub.Store(pb.StoreRequest(memory=mem), metadata=token, timeout=30)

    assert link(home).id
    answers = []
    for target, token in ((away, auth), ("no-such-id", auth), (secret, reader), ("no-such-id-2", reader)):
        code, details = _code(lambda: link(target, token))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("memory.links[0].target_id: no memory with id")
        answers.append(details.replace(target[:128], "X").split("(")[0])
    assert answers[2] == answers[3]  # an unreadable target answers like an unknown one
    batch = stub.StoreBatch(iter([pb.StoreBatchRequest(memory=pb.MemoryInput(content="batch link ok", namespace="links-a",
                                                                             links=[pb.Link(target_id=home, type=pb.LINK_TYPE_RELATES_TO)])),
                                  pb.StoreBatchRequest(memory=pb.MemoryInput(content="batch link bad", namespace="links-a",
                                                                             links=[pb.Link(target_id=away, type=pb.LINK_TYPE_RELATES_TO)]))]),
                            metadata=auth, timeout=30)
    assert batch.items[0].id and batch.items[1].error_code == "INVALID_ARGUMENT" and (batch.stored, batch.failed) == (1, 1)


def test_a_saturated_server_refuses_at_once_before_any_other_work(tight_server):
    import threading
    import time

    from teleo.v1 import memory_pb2_grpc

    core = tight_server.app.core
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(tight_server.address))
    auth = [("authorization", f"Bearer {tight_server.token}")]
    _wait_for(lambda: core.admission.open == 0, "earlier streams ended")
    release = threading.Event()
    core._index_ex.submit(release.wait, 60)  # the pipeline's thread busy: admitted retrievals wait there
    calls = [stub.Retrieve(pb.RetrieveRequest(text="harbour", top_k=1), metadata=auth, timeout=60) for _ in range(2)]
    try:
        _wait_for(lambda: core.admission.computing == 2, "both compute slots taken")
        for metadata in (auth, [("authorization", "Bearer not-a-token")]):
            t0 = time.monotonic()
            code, details = _code(lambda: list(stub.Retrieve(pb.RetrieveRequest(text="harbour"), metadata=metadata, timeout=30)))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "retrievals are being computed" in details
            assert time.monotonic() - t0 < 10  # not queued behind the busy pipeline
        # the refusal tells the client when to try again
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.Retrieve(pb.RetrieveRequest(text="harbour"), metadata=auth, timeout=30))
        assert dict(refused.value.trailing_metadata() or ())[RETRY_AFTER_KEY] == str(round(SATURATED_RETRY_S * 1e3))
    finally:
        release.set()
    for call in calls:
        assert list(call)[-1].WhichOneof("event") == "summary"  # the admitted ones were served
