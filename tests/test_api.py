"""The gRPC API end to end: a real server (real embedder, real store) and a real Python client."""

from __future__ import annotations

import math
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from teleo.v1 import memory_pb2 as pb

from teleo_server.auth import create_token
from teleo_server.domain import AccessLevel

CORPUS = [
    "The deployment pipeline pushes the container image to the registry after tests pass.",
    "Alice prefers green tea in the morning and coffee after lunch.",
    "To rotate the database password, update the secret and restart the workers.",
    "The quarterly report is due on the first Friday of April.",
    "Our cat Miso sleeps on the radiator every winter afternoon.",
]


def _retrieve(stub, auth, **kw):
    events = list(stub.Retrieve(pb.RetrieveRequest(**kw), metadata=auth, timeout=60))
    kinds = [e.WhichOneof("event") for e in events]
    return events, kinds


def _token(api_server, agent, read, write, level=AccessLevel.INTERNAL, ns="default"):
    _, token = create_token(api_server.app.core.store, agent, read, write, level, ns)
    return [("authorization", f"Bearer {token}")]


@pytest.fixture(scope="module")
def corpus_ids(stub, auth):
    reqs = [pb.StoreBatchRequest(memory=pb.MemoryInput(content=c, namespace="api"), client_ref=f"c{i}") for i, c in enumerate(CORPUS)]
    resp = stub.StoreBatch(iter(reqs), metadata=auth, timeout=120)
    assert resp.stored == len(CORPUS) and resp.failed == 0
    return [i.id for i in resp.items]


def test_health_reports_every_component_serving(channel):
    h = health_pb2_grpc.HealthStub(channel)
    for service in ("", "teleo.v1.MemoryService", "embedding", "index", "store"):
        assert h.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as err:
        h.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_reflection_lists_the_services(channel):
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    (resp,) = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5))
    names = {s.name for s in resp.list_services_response.service}
    assert {"teleo.v1.MemoryService", "grpc.health.v1.Health"} <= names


def test_store_get_round_trip_and_duplicate(stub, auth):
    target = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="Bob was born in Leeds.", namespace="api-rt")),
                        metadata=auth, timeout=60).id
    mem = pb.MemoryInput(
        content="Bob's birthday is on the 3rd of June.",
        namespace="api-rt",
        memory_type=pb.MEMORY_TYPE_EPISODIC,
        access_level=pb.ACCESS_LEVEL_CONFIDENTIAL,
        source="chat",
        confidence=0.8,
        importance=0.9,
        session_id="s-1",
        session_position=4,
        links=[pb.Link(target_id=target, type=pb.LINK_TYPE_RELATES_TO, weight=0.5)],
        metadata={"speaker": "Bob"},
    )
    mem.event_time.FromSeconds(1_700_000_000)
    first = stub.Store(pb.StoreRequest(memory=mem), metadata=auth, timeout=60)
    assert not first.duplicate and len(first.content_hash) == 64
    again = stub.Store(pb.StoreRequest(memory=mem), metadata=auth, timeout=60)
    assert again.duplicate and again.id == first.id
    (got,) = stub.Get(pb.GetRequest(ids=[first.id]), metadata=auth, timeout=10).memories
    assert got.input.content == mem.content and got.input.metadata["speaker"] == "Bob"
    assert got.input.access_level == pb.ACCESS_LEVEL_CONFIDENTIAL and got.input.session_position == 4
    assert math.isclose(got.input.confidence, 0.8, rel_tol=1e-6) and got.input.event_time.seconds == 1_700_000_000
    assert got.model_version and got.chunk_count >= 1


def test_batch_keeps_good_items_when_one_is_bad(stub, auth):
    reqs = [
        pb.StoreBatchRequest(memory=pb.MemoryInput(content="batch item one", namespace="api-b"), client_ref="a"),
        pb.StoreBatchRequest(memory=pb.MemoryInput(content="", namespace="api-b"), client_ref="bad"),
        pb.StoreBatchRequest(memory=pb.MemoryInput(content="batch item two", namespace="api-b", confidence=float("nan")), client_ref="nan"),
        pb.StoreBatchRequest(memory=pb.MemoryInput(content="batch item one", namespace="api-b"), client_ref="dup"),
    ]
    resp = stub.StoreBatch(iter(reqs), metadata=auth, timeout=60)
    assert (resp.stored, resp.duplicates, resp.failed) == (1, 1, 2)
    by_ref = {i.client_ref: i for i in resp.items}
    assert by_ref["bad"].error_code == "INVALID_ARGUMENT" and "content" in by_ref["bad"].error
    assert by_ref["nan"].error_code == "INVALID_ARGUMENT" and "confidence" in by_ref["nan"].error
    assert by_ref["dup"].duplicate and by_ref["dup"].id == by_ref["a"].id
    assert [i.index for i in resp.items] == [0, 1, 2, 3]


def test_retrieve_streams_stages_then_ranked_results_then_summary(stub, auth, corpus_ids):
    events, kinds = _retrieve(stub, auth, text="how do we ship container images", top_k=3, explain=True, include_breakdown=True)
    first_result = kinds.index("result")
    assert set(kinds[:first_result]) == {"stage"}
    assert kinds[-1] == "summary" and kinds.count("summary") == 1
    results = [e.result for e in events if e.WhichOneof("event") == "result"]
    assert [r.rank for r in results] == list(range(1, len(results) + 1))
    assert 1 <= len(results) <= 3
    assert results[0].memory.id == corpus_ids[0]
    assert all(0.0 <= r.score <= 1.0 for r in results)
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    assert results[0].found_by and results[0].explanation
    summary = events[-1].summary
    assert summary.returned == len(results) and not summary.degraded
    assert [s.stage for s in summary.stages] == [e.stage.stage for e in events if e.WhichOneof("event") == "stage"]
    assert summary.total_ms > 0 and summary.corpus_size >= len(CORPUS)


def _same_results(a, b):
    key = lambda r: (r.memory.id, r.rank, r.score, tuple(r.found_by), r.explanation, r.memory.input.content)
    return [key(r) for r in a] == [key(r) for r in b]


def test_a_batched_retrieve_sends_the_same_answer_in_two_messages(stub, auth, corpus_ids):
    ask = dict(text="how do we ship container images", top_k=5, explain=True, include_breakdown=True,
               filters=pb.RetrieveFilters(namespaces=["api"]))
    events, _ = _retrieve(stub, auth, **ask)
    batched, kinds = _retrieve(stub, auth, batched=True, **ask)
    assert kinds == ["results", "summary"]
    streamed = [e.result for e in events if e.WhichOneof("event") == "result"]
    assert len(streamed) == 5 and _same_results(batched[0].results.results, streamed)
    assert [r.breakdown.spaces for r in batched[0].results.results] == [r.breakdown.spaces for r in streamed]
    one, other = events[-1].summary, batched[-1].summary
    assert other.returned == one.returned == 5 and [s.stage for s in other.stages] == [s.stage for s in one.stages]
    # the stages are in the summary alone; asked again, the hipporag result cache answers in the same form
    ask["profile"] = "hipporag"
    first, _ = _retrieve(stub, auth, batched=True, **ask)
    again, kinds = _retrieve(stub, auth, batched=True, **ask)
    assert kinds == ["results", "summary"] and again[-1].summary.skip_reason == "cache_hit"
    assert _same_results(again[0].results.results, first[0].results.results)
    assert [s.stage for s in again[-1].summary.stages] == ["cache"]


def test_a_batched_retrieve_splits_large_answers_into_messages_a_client_can_take(stub, auth):
    bulky = {f"k{j:02d}": "ledger " * 580 for j in range(60)}  # about 240 KB of labels a memory
    reqs = [pb.StoreBatchRequest(memory=pb.MemoryInput(content=f"Crate manifest {i} for the harbour ledger.",
                                                       namespace="api-bulky", metadata=bulky)) for i in range(14)]
    assert stub.StoreBatch(iter(reqs), metadata=auth, timeout=120).stored == 14
    ask = dict(text="harbour ledger crate manifest", top_k=14, filters=pb.RetrieveFilters(namespaces=["api-bulky"]))
    events, kinds = _retrieve(stub, auth, batched=True, **ask)
    assert kinds[-1] == "summary" and set(kinds[:-1]) == {"results"} and len(kinds) >= 4
    assert all(e.ByteSize() < 2 * 2**20 for e in events)  # well under a client's default 4 MiB limit
    ranks = [r.rank for e in events[:-1] for r in e.results.results]
    assert ranks == list(range(1, 15))
    streamed, _ = _retrieve(stub, auth, **ask)
    assert _same_results([r for e in events[:-1] for r in e.results.results],
                         [e.result for e in streamed if e.WhichOneof("event") == "result"])


def test_retrieve_never_returns_what_the_caller_may_not_read(api_server, stub, auth):
    secret = "The launch codes for project Falcon are kept in the blue vault."
    stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=secret, namespace="vault")), metadata=auth, timeout=60)
    stub.Store(
        pb.StoreRequest(memory=pb.MemoryInput(content=secret + " (restricted copy)", namespace="acl", access_level=pb.ACCESS_LEVEL_RESTRICTED)),
        metadata=auth,
        timeout=60,
    )
    reader = _token(api_server, "reader", ["acl"], [], AccessLevel.INTERNAL, "acl")
    events, _ = _retrieve(stub, reader, text="launch codes project Falcon vault", top_k=50)
    for e in events:
        if e.WhichOneof("event") == "result":
            assert e.result.memory.input.namespace == "acl"
            assert e.result.memory.input.access_level <= pb.ACCESS_LEVEL_INTERNAL
    with pytest.raises(grpc.RpcError) as err:
        _retrieve(stub, reader, text="launch codes", filters=pb.RetrieveFilters(namespaces=["vault"]))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "vault" in err.value.details()


def test_writes_outside_scope_are_permission_denied(api_server, stub):
    writer = _token(api_server, "writer", ["own"], ["own"], AccessLevel.INTERNAL, "own")
    ok = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="mine")), metadata=writer, timeout=60)
    assert ok.id
    for mem in (
        pb.MemoryInput(content="theirs", namespace="other"),
        pb.MemoryInput(content="too secret", namespace="own", access_level=pb.ACCESS_LEVEL_RESTRICTED),
    ):
        with pytest.raises(grpc.RpcError) as err:
            stub.Store(pb.StoreRequest(memory=mem), metadata=writer, timeout=10)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_ids_of_other_tenants_look_unknown(api_server, stub, auth):
    hidden = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="hidden fact", namespace="tenant-a")), metadata=auth, timeout=60)
    other = _token(api_server, "other", ["tenant-b"], ["tenant-b"], AccessLevel.RESTRICTED, "tenant-b")
    for call, req in (
        (stub.Get, pb.GetRequest(ids=[hidden.id])),
        (stub.Delete, pb.DeleteRequest(ids=[hidden.id])),
        (stub.Feedback, pb.FeedbackRequest(id=hidden.id, used=True)),
    ):
        with pytest.raises(grpc.RpcError) as err:
            call(req, metadata=other, timeout=10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert stub.Get(pb.GetRequest(ids=[hidden.id]), metadata=auth, timeout=10).memories[0].id == hidden.id


@pytest.mark.parametrize("metadata", [pytest.param([], id="no-token"), pytest.param([("authorization", "Bearer teleo_0123456789ab_" + "z" * 43)], id="unknown-token")])
def test_every_method_needs_a_valid_token(stub, metadata):
    calls = [
        (stub.Store, pb.StoreRequest(memory=pb.MemoryInput(content="x"))),
        (stub.Get, pb.GetRequest(ids=["x"])),
        (stub.Delete, pb.DeleteRequest(ids=["x"])),
        (stub.Compare, pb.CompareRequest(id_a="x", id_b="y")),
        (stub.Feedback, pb.FeedbackRequest(id="x")),
        (stub.Stats, pb.StatsRequest()),
    ]
    for call, req in calls:
        with pytest.raises(grpc.RpcError) as err:
            call(req, metadata=metadata, timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, call
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Retrieve(pb.RetrieveRequest(text="x"), metadata=metadata, timeout=10))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as err:
        stub.StoreBatch(iter([pb.StoreBatchRequest(memory=pb.MemoryInput(content="x"))]), metadata=metadata, timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


BAD_STORES = [
    pytest.param(pb.MemoryInput(content=""), "memory.content", id="empty-content"),
    pytest.param(pb.MemoryInput(content="x" * (64 * 1024 + 1)), "memory.content", id="content-too-large"),
    pytest.param(pb.MemoryInput(content="x", namespace="has space"), "memory.namespace", id="bad-namespace"),
    pytest.param(pb.MemoryInput(content="x", confidence=1.5), "memory.confidence", id="confidence-out-of-range"),
    pytest.param(pb.MemoryInput(content="x", importance=float("nan")), "memory.importance", id="importance-nan"),
    pytest.param(pb.MemoryInput(content="x", session_position=-1), "memory.session_position", id="negative-position"),
    pytest.param(pb.MemoryInput(content="x", memory_type=99), "memory.memory_type", id="unknown-type"),
    pytest.param(pb.MemoryInput(content="x", links=[pb.Link(target_id="y")]), "memory.links[0].type", id="link-type-unset"),
    pytest.param(pb.MemoryInput(content="x", metadata={f"k{i}": "v" for i in range(65)}), "memory.metadata", id="too-much-metadata"),
    pytest.param(pb.MemoryInput(content="x", metadata={"k": "v" * 5000}), "memory.metadata[k]", id="metadata-value-too-long"),
    pytest.param(pb.MemoryInput(content="x", source="s" * 513), "memory.source", id="source-too-long"),
]


@pytest.mark.parametrize("mem,field", BAD_STORES)
def test_bad_memories_are_invalid_argument_naming_the_field(stub, auth, mem, field):
    with pytest.raises(grpc.RpcError) as err:
        stub.Store(pb.StoreRequest(memory=mem), metadata=auth, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(field + ":"), err.value.details()


BAD_RETRIEVES = [
    pytest.param(pb.RetrieveRequest(), "query", id="no-query"),
    pytest.param(pb.RetrieveRequest(text="   "), "text", id="blank-text"),
    pytest.param(pb.RetrieveRequest(text="x" * 9000), "text", id="text-too-long"),
    pytest.param(pb.RetrieveRequest(text="x", top_k=5000), "top_k", id="top-k-too-large"),
    pytest.param(pb.RetrieveRequest(text="x", top_k=-1), "top_k", id="top-k-negative"),
    pytest.param(pb.RetrieveRequest(text="x", profile="magic"), "profile", id="unknown-profile"),
    pytest.param(pb.RetrieveRequest(text="x", overrides=pb.StageOverrides(sparse_weight=float("nan"))), "overrides.sparse_weight", id="nan-weight"),
    pytest.param(pb.RetrieveRequest(text="x", overrides=pb.StageOverrides(fusion="best")), "overrides.fusion", id="unknown-fusion"),
    pytest.param(pb.RetrieveRequest(text="x", overrides=pb.StageOverrides(space_weights={"E1": 11.0})), "overrides.space_weights[E1]", id="weight-too-large"),
    pytest.param(pb.RetrieveRequest(text="x", filters=pb.RetrieveFilters(min_confidence=-0.1)), "filters.min_confidence", id="min-confidence"),
    pytest.param(pb.RetrieveRequest(vectors=pb.QueryVectors(dense=[0.1] * 384, model_version="other")), "vectors.model_version", id="foreign-model"),
    pytest.param(pb.RetrieveRequest(vectors=pb.QueryVectors(dense=[float("inf")] * 384)), "vectors.dense", id="inf-vector"),
]


@pytest.mark.parametrize("req,field", BAD_RETRIEVES)
def test_bad_retrieves_are_invalid_argument_naming_the_field(stub, auth, req, field):
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Retrieve(req, metadata=auth, timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(field + ":"), err.value.details()


def test_unknown_ids_are_not_found_and_nothing_is_deleted(stub, auth, corpus_ids):
    with pytest.raises(grpc.RpcError) as err:
        stub.Delete(pb.DeleteRequest(ids=[corpus_ids[1], "does-not-exist"]), metadata=auth, timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "does-not-exist" in err.value.details()
    assert len(stub.Get(pb.GetRequest(ids=[corpus_ids[1]]), metadata=auth, timeout=10).memories) == 1
    with pytest.raises(grpc.RpcError) as err:
        stub.Get(pb.GetRequest(ids=[]), metadata=auth, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_delete_removes_from_store_and_retrieval(stub, auth):
    text = "Zebra crossings were repainted on Elm Street on Tuesday."
    sid = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=text, namespace="del")), metadata=auth, timeout=60).id
    assert stub.Delete(pb.DeleteRequest(ids=[sid]), metadata=auth, timeout=10).deleted == 1
    with pytest.raises(grpc.RpcError) as err:
        stub.Get(pb.GetRequest(ids=[sid]), metadata=auth, timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    events, _ = _retrieve(stub, auth, text="zebra crossing Elm Street repainted", filters=pb.RetrieveFilters(namespaces=["del"]))
    assert all(e.result.memory.id != sid for e in events if e.WhichOneof("event") == "result")


def test_precomputed_vectors_query(api_server, stub, auth, corpus_ids):
    from teleo_server.embedding.base import TextRole

    (emb,) = api_server.call(api_server.app.core.embedder.embed(["green tea in the morning"], TextRole.QUERY))
    chunk = emb.chunks[0]
    vec = pb.QueryVectors(
        dense=chunk.vectors["dense"].tolist(), sparse_ids=chunk.vectors["splade"].ids.tolist(),
        sparse_weights=chunk.vectors["splade"].weights.tolist(), model_version=emb.model_version
    )
    events, _ = _retrieve(stub, auth, vectors=vec, top_k=3, filters=pb.RetrieveFilters(namespaces=["api"]))
    results = [e.result for e in events if e.WhichOneof("event") == "result"]
    assert results[0].memory.id == corpus_ids[1]
    assert events[-1].summary.embed_ms == 0


def test_compare_feedback_and_stats(stub, auth, corpus_ids):
    cmp = stub.Compare(pb.CompareRequest(id_a=corpus_ids[0], id_b=corpus_ids[2], aggregation=pb.AGGREGATION_MAX), metadata=auth, timeout=10)
    assert cmp.spaces and all(0.0 <= s <= 1.0 for s in cmp.spaces.values())
    assert math.isclose(cmp.aggregate, max(cmp.spaces.values()), rel_tol=1e-5)
    same = stub.Compare(pb.CompareRequest(id_a=corpus_ids[0], id_b=corpus_ids[0]), metadata=auth, timeout=10)
    other = stub.Compare(pb.CompareRequest(id_a=corpus_ids[0], id_b=corpus_ids[2]), metadata=auth, timeout=10)
    assert same.aggregate > other.aggregate
    semantic = next(k for k in same.spaces if k.startswith("E1"))
    assert same.spaces[semantic] > 0.99 > other.spaces[semantic]
    fb = stub.Feedback(pb.FeedbackRequest(id=corpus_ids[3], used=True, helpful=True), metadata=auth, timeout=10)
    assert (fb.memory.used_count, fb.memory.helpful_count) == (1, 1)
    stats = stub.Stats(pb.StatsRequest(namespaces=["api"]), metadata=auth, timeout=10)
    assert stats.memories == len(CORPUS) and stats.namespaces[0].namespace == "api"
    assert stats.model_version and stats.embedder_ready and stats.backend in ("numpy", "cupy")


def test_feedback_moves_a_result_into_a_surfaced_johari_quadrant(stub, auth, corpus_ids):
    def top():
        events, _ = _retrieve(stub, auth, text="Miso the cat sleeps on the radiator", top_k=1,
                              filters=pb.RetrieveFilters(namespaces=["api"]))
        return next(e.result for e in events if e.WhichOneof("event") == "result")

    before = top()
    assert before.memory.id == corpus_ids[4]
    assert before.johari in (pb.JOHARI_QUADRANT_BLIND, pb.JOHARI_QUADRANT_UNKNOWN), "never used yet"
    stub.Feedback(pb.FeedbackRequest(id=corpus_ids[4], used=True), metadata=auth, timeout=10)
    after = top()
    # alignment is unchanged, so the quadrant moves along the "surfaced" axis only
    moved = {pb.JOHARI_QUADRANT_BLIND: pb.JOHARI_QUADRANT_OPEN, pb.JOHARI_QUADRANT_UNKNOWN: pb.JOHARI_QUADRANT_HIDDEN}
    assert after.johari == moved[before.johari]
    # retrievals are counted together within half a second of them (core.USAGE_FLUSH_SECONDS)
    deadline = time.monotonic() + 10
    while True:
        got = stub.Get(pb.GetRequest(ids=[corpus_ids[4]]), metadata=auth, timeout=10).memories[0]
        if got.retrieved_count >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert got.used_count == 1 and got.retrieved_count >= 2


def test_expired_deadline_leaves_the_server_up(stub, auth, corpus_ids):
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Retrieve(pb.RetrieveRequest(text="anything at all"), metadata=auth, timeout=0.0001))
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert stub.Get(pb.GetRequest(ids=[corpus_ids[0]]), metadata=auth, timeout=10).memories


def test_additive_rrf_records_the_only_space_that_found_a_result(stub, auth, corpus_ids):
    # n-grams left out of the fusion (weight 0): they find every memory of this small corpus
    req = pb.RetrieveRequest(text="container image registry", top_k=5, filters=pb.RetrieveFilters(namespaces=["api"]),
                             overrides=pb.StageOverrides(fusion="additive_rrf", space_weights={"E9_hdc": 0.0}))
    events = list(stub.Retrieve(req, metadata=auth, timeout=60))
    fusion = next(e.stage for e in events if e.WhichOneof("event") == "stage" and e.stage.stage == "fusion")
    assert fusion.detail.startswith("method=additive_rrf") and "E9" not in fusion.detail
    results = {e.result.memory.id: e.result for e in events if e.WhichOneof("event") == "result"}
    fused = {r.memory.id: [s for s in r.found_by if s != "E9_hdc"] for r in results.values()}
    shipped = results[corpus_ids[0]]  # shares words with the query: several spaces found it
    assert len(fused[shipped.memory.id]) > 1 and shipped.unique_contribution == ""
    lonely = [r for r in results.values() if len(fused[r.memory.id]) == 1]
    assert lonely and all(r.unique_contribution == fused[r.memory.id][0] for r in lonely)
    # every fusion records it, with each result's primary space and the coverage in the summary
    plain = list(stub.Retrieve(pb.RetrieveRequest(text="container image registry", top_k=5, filters=pb.RetrieveFilters(namespaces=["api"]),
                                                  overrides=pb.StageOverrides(fusion="rrf", space_weights={"E9_hdc": 0.0}),
                                                  include_breakdown=True), metadata=auth, timeout=60))
    got = [e.result for e in plain if e.WhichOneof("event") == "result"]
    for r in got:
        voters = [s for s in r.found_by if s != "E9_hdc"]
        assert r.unique_contribution == (voters[0] if len(voters) == 1 else "")
        assert r.primary_space in r.breakdown.space_ranks or r.primary_space in r.breakdown.spaces
        assert r.primary_space != "E9_hdc"  # weight 0 gives nothing to the fused score
    summary = plain[-1].summary
    assert summary.found_by_space["E6_lexical"] == sum("E6_lexical" in r.found_by for r in got)
    assert sum(summary.unique_by_space.values()) == sum(bool(r.unique_contribution) for r in got)
