"""The Python client library against a real server: typed results, every method, errors as
ClientError with the status and message, retries only where they are safe, and the asyncio twin."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from datetime import datetime, timedelta, timezone

import grpc
import pytest
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc

from teleo_server.client import (
    AsyncClient,
    Client,
    ClientError,
    ConflictPair,
    Filters,
    Link,
    Memory,
    MemoryInput,
    Overrides,
    Provenance,
    Result,
    RetryPolicy,
    Stage,
    Summary,
    UpdateHint,
)
from teleo_server.client import convert
from teleo_server.errors import RETRY_AFTER_KEY

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client(api_server):
    with Client(api_server.address, token=api_server.token) as c:
        yield c


def test_store_get_and_search_return_typed_results(client):
    when = datetime(2024, 3, 14, 9, 30, tzinfo=timezone.utc)
    stored = client.store("we moved the staging cluster to us-east-2 in March", namespace="cl-basic",
                          memory_type="episodic", metadata={"team": "ops"}, event_time=when, importance=0.8)
    assert len(stored.id) == 32 and not stored.duplicate
    again = client.store("we moved the staging cluster to us-east-2 in March", namespace="cl-basic")
    assert again.duplicate and again.id == stored.id

    [m] = client.get(stored.id)
    assert (m.content, m.namespace, m.memory_type, m.metadata) == (
        "we moved the staging cluster to us-east-2 in March", "cl-basic", "episodic", {"team": "ops"})
    assert m.event_time == when and m.importance == pytest.approx(0.8) and m.access_level == "internal"
    assert m.ingestion_time is not None and m.ingestion_time.tzinfo is not None

    client.store("the cafeteria serves lentil soup on Fridays", namespace="cl-basic")
    events = list(client.retrieve("which region is staging in?", top_k=2, filters={"namespaces": ["cl-basic"]},
                                  explain=True, breakdown=True))
    kinds = [type(e) for e in events]
    assert kinds[-1] is Summary and Result in kinds
    assert kinds.index(Result) > max(i for i, k in enumerate(kinds) if k is Stage)  # stages come first
    results = [e for e in events if isinstance(e, Result)]
    assert results[0].memory.id == stored.id and results[0].rank == 1
    assert results[0].breakdown is not None and "E1_semantic" in results[0].breakdown.spaces
    assert results[0].explanation and 0.0 <= results[0].relevance <= 1.0
    summary = events[-1]
    assert summary.returned == len(results) and summary.request_id and summary.stages

    hits = client.search("which region is staging in?", top_k=1, filters=Filters(namespaces=["cl-basic"]))
    assert [r.memory.id for r in hits.results] == [stored.id] and hits.stages == hits.summary.stages
    assert hits.results[0].breakdown is None  # not asked for


def test_store_names_what_it_probably_updates_and_an_update_links_it(client):
    old = client.store("The staging cluster runs in eu-west-1.", namespace="cl-hints",
                       event_time=datetime(2024, 1, 5, tzinfo=timezone.utc))
    assert old.possible_updates == ()
    move = client.store("We moved staging to us-east-2 in March.", namespace="cl-hints",
                        event_time=datetime(2024, 3, 20, tzinfo=timezone.utc))
    [hint] = [h for h in move.possible_updates if h.id == old.id]
    assert isinstance(hint, UpdateHint) and hint.content == "The staging cluster runs in eu-west-1."
    assert 0.4 <= hint.similarity <= 1.0
    other = client.store("Staging deploys go out every Tuesday.", namespace="cl-hints",
                         event_time=datetime(2024, 1, 6, tzinfo=timezone.utc))
    client.update(move.id, links=[Link(other.id, "relates_to")])
    for _ in range(2):  # linking twice links once; the link it had stays
        linked = client.supersede(move.id, old.id)
    assert [(lk.target_id, lk.type) for lk in linked.memory.links] == [(other.id, "relates_to"), (old.id, "supersedes")]
    hits = client.search("which region is staging in?", profile="hipporag", filters={"namespaces": ["cl-hints"]})
    found = [r.memory.id for r in hits.results]
    assert found[0] == move.id and old.id not in found  # the replaced fact is hidden


def test_a_batch_names_what_its_items_probably_update_when_asked(client):
    ns = "cl-batch-hints"
    old = client.store("The staging cluster runs in eu-west-1.", namespace=ns,
                       event_time=datetime(2024, 1, 5, tzinfo=timezone.utc))
    notes = [MemoryInput("We moved staging to us-east-2 in March.", event_time=datetime(2024, 3, 20, tzinfo=timezone.utc)),
             MemoryInput("The cafeteria now serves lunch until 3 pm.", event_time=datetime(2024, 3, 21, tzinfo=timezone.utc)),
             MemoryInput("The staging cluster runs in eu-west-1.")]  # a duplicate: no hints
    asked = client.store_batch(notes, namespace=ns, update_hints=True)
    move, lunch, dup = asked.items
    assert [h.id for h in move.possible_updates][:1] == [old.id]
    assert move.possible_updates[0].content == "The staging cluster runs in eu-west-1."
    assert old.id not in [h.id for h in lunch.possible_updates]
    assert dup.duplicate and dup.id == old.id and dup.possible_updates == ()
    plain = client.store_batch([MemoryInput("Staging moved to us-east-2 this spring.",
                                            event_time=datetime(2024, 3, 22, tzinfo=timezone.utc))], namespace=ns)
    assert plain.items[0].id and plain.items[0].possible_updates == ()  # not asked for


def test_search_options_reach_the_server(client):
    client.store_batch([f"note {i} about the quarterly budget review" for i in range(5)], namespace="cl-opts")
    hits = client.search("budget review", top_k=5, filters={"namespaces": ["cl-opts"]}, snippets=True,
                         omit_content=True, overrides=Overrides(disable_stages=["late_interaction"]))
    assert hits.results and all(r.memory.content == "" and r.snippet for r in hits.results)
    late = [s for s in hits.stages if s.stage == "late_interaction"]
    assert late and late[0].skipped
    assert client.search("budget review", top_k=5, filters={"namespaces": ["cl-opts"]},
                         overrides={"min_relevance": 1.0}).results == ()


def test_store_batch_reports_each_item(client):
    out = client.store_batch(["first batch note", {"content": "second batch note", "memory_type": "procedural"},
                              MemoryInput(content="", namespace="cl-batch")],
                             namespace="cl-batch", client_refs=["a", "b", "c"])
    assert (out.stored, out.duplicates, out.failed) == (2, 0, 1)
    assert [i.client_ref for i in out.items] == ["a", "b", "c"]
    assert out.items[2].error_code == "INVALID_ARGUMENT" and "content" in out.items[2].error
    [second] = client.get(out.items[1].id)
    assert second.memory_type == "procedural" and second.namespace == "cl-batch"
    with pytest.raises(ValueError, match="one per memory"):
        client.store_batch(["x"], client_refs=["a", "b"])


def test_update_list_and_delete_where(client):
    first = client.store("the on-call rotation changes every Monday", namespace="cl-manage")
    upd = client.update(first.id, content="the on-call rotation changes every Tuesday", keep_previous=True)
    assert upd.memory.id == first.id and upd.memory.content.endswith("Tuesday") and upd.previous_id
    assert any(link.type == "supersedes" and link.target_id == upd.previous_id for link in upd.memory.links)
    meta = client.update(first.id, metadata={"owner": "sre"})
    assert meta.memory.metadata == {"owner": "sre"} and meta.previous_id == ""
    with pytest.raises(ValueError, match="cannot update colour"):
        client.update(first.id, colour="blue")

    for i in range(5):
        client.store(f"paging note number {i}", namespace="cl-manage", metadata={"kind": "page"})
    page = client.list({"namespaces": ["cl-manage"]}, page_size=2)
    assert len(page.memories) == 2 and page.next_cursor
    everything = list(client.memories({"namespaces": ["cl-manage"]}, page_size=2))
    assert len(everything) == 7 and len({m.id for m in everything}) == 7
    assert [m.ingestion_time for m in everything] == sorted(m.ingestion_time for m in everything)

    dry = client.delete_where({"namespaces": ["cl-manage"], "metadata": {"kind": "page"}}, dry_run=True)
    assert (dry.matched, dry.deleted) == (5, 0)
    done = client.delete_where(Filters(namespaces=["cl-manage"], metadata={"kind": "page"}))
    assert (done.matched, done.deleted) == (5, 5)
    assert client.delete(upd.previous_id) == 1
    assert [m.id for m in client.memories({"namespaces": ["cl-manage"]})] == [first.id]


def test_export_and_import_move_a_namespace_without_reembedding(client):
    ids = [client.store(f"exported fact {i}: the build cache lives on disk {i}", namespace="cl-src").id for i in range(3)]
    client.update(ids[0], links=[Link(ids[1], "relates_to", 0.5)])
    items = list(client.export({"namespaces": ["cl-src"]}, with_embeddings=True))
    assert [e.memory.id for e in items] == ids and all(e.chunks and "dense" in e.chunks[0].heads for e in items)
    moved = [dataclasses.replace(e, memory=dataclasses.replace(e.memory, namespace="cl-dst")) for e in items]
    out = client.import_(moved)
    assert (out.stored, out.failed, out.vectors_reused) == (3, 0, 3)
    copies = list(client.memories({"namespaces": ["cl-dst"]}))
    assert sorted(m.content for m in copies) == sorted(e.memory.content for e in items)
    first = next(m for m in copies if m.content.startswith("exported fact 0"))
    second = next(m for m in copies if m.content.startswith("exported fact 1"))
    assert [(link.target_id, link.type) for link in first.links] == [(second.id, "relates_to")]
    # the JSON form is the export file format, and reads back to the same item
    line = convert.exported_json(items[0])
    assert line["memory"]["id"] == ids[0] and convert.exported_from_json(line) == items[0]


def test_compare_feedback_stats_and_health(client):
    a = client.store("the database backups run nightly at 02:00", namespace="cl-misc").id
    b = client.store("nightly database backups start at 2 am", namespace="cl-misc").id
    c = client.store("the office plants need water on Thursdays", namespace="cl-misc").id
    near, far = client.compare(a, b), client.compare(a, c, aggregation="max")
    assert near.aggregate > client.compare(a, c).aggregate and near.aggregation == "weighted_average"
    assert far.aggregation == "max" and "E1_semantic" in far.spaces
    m = client.feedback(a, used=True, helpful=True)
    assert (m.used_count, m.helpful_count, m.misled_count) == (1, 1, 0)
    with pytest.raises(ValueError, match="nothing to record"):
        client.feedback(a)
    s = client.stats(["cl-misc"])
    assert [(n.namespace, n.memories) for n in s.namespaces] == [("cl-misc", 3)]
    assert {h.name for h in s.heads} >= {"dense", "tokens", "splade"} and s.embedder_ready
    assert client.health() == "SERVING" and client.health("store") == "SERVING"
    with pytest.raises(ClientError) as err:
        client.health("bogus")
    assert err.value.code == "NOT_FOUND"


def test_errors_carry_status_message_and_request_id(api_server, client):
    with pytest.raises(ClientError) as err:
        client.get("0" * 32)
    assert err.value.code == "NOT_FOUND" and "0" * 32 in err.value.message and err.value.request_id
    with pytest.raises(ClientError) as err:
        client.store("x", namespace="bad namespace!")
    assert err.value.code == "INVALID_ARGUMENT" and "namespace" in err.value.message
    with Client(api_server.address, token="not-a-token") as stranger, pytest.raises(ClientError) as err:
        stranger.stats()
    assert err.value.code == "UNAUTHENTICATED"
    with pytest.raises(ValueError, match="unknown memory type 'dream'; use one of episodic"):
        client.store("x", memory_type="dream")
    with pytest.raises(ClientError) as err:
        list(client.retrieve("x", top_k=5000))
    assert err.value.code == "INVALID_ARGUMENT" and "top_k" in err.value.message


def test_provenance_and_conflicts_convert_both_ways():
    prov = pb.Provenance(strategies=["vector", "graph"], fused_score=0.75, validation_passed=["access", "temporal"],
                         confidence=0.5, citation="ops/2024-03-14 (memory 1f5a2b3c…)", conflicts_with=["b" * 32])
    msg = pb.Result(rank=1, memory=pb.Memory(id="a" * 32, input=pb.MemoryInput(content="x", namespace="ops")),
                    score=0.9, relevance=0.8, provenance=prov)
    r = convert.result(msg, with_breakdown=False)
    assert r.provenance == Provenance(("vector", "graph"), 0.75, ("access", "temporal"), 0.5,
                                      "ops/2024-03-14 (memory 1f5a2b3c…)", ("b" * 32,))
    assert convert.result_message(r).provenance == prov
    assert convert.result(convert.result_message(r), with_breakdown=False) == r
    # no provenance sent: None, and None writes none back
    bare = convert.result(pb.Result(rank=1, memory=msg.memory), with_breakdown=False)
    assert bare.provenance is None and not convert.result_message(bare).HasField("provenance")
    # an empty one sent is kept as an (empty) Provenance, and stays present on the way back
    empty = convert.result(pb.Result(rank=1, memory=msg.memory, provenance=pb.Provenance()), with_breakdown=False)
    assert empty.provenance == Provenance() and convert.result_message(empty).HasField("provenance")

    pairs = [pb.ConflictPair(id_a="a" * 32, id_b="b" * 32, edge_type="supersedes", resolution="supersedes",
                             winner="b" * 32),
             pb.ConflictPair(id_a="a" * 32, id_b="c" * 32, edge_type="contradicts", resolution="unresolved")]
    sm = pb.RetrieveSummary(returned=2, profile="hipporag", request_id="r1", route="multi_hop", skip_reason="",
                            retry_count=1, retrieval_confidence=0.625, conflicts=pairs,
                            stages=[pb.StageEvent(stage="route", elapsed_ms=0.5)])
    s = convert.summary(sm)
    assert (s.route, s.skip_reason, s.retry_count, s.retrieval_confidence) == ("multi_hop", "", 1, 0.625)
    assert s.conflicts == (ConflictPair("a" * 32, "b" * 32, "supersedes", "supersedes", "b" * 32),
                           ConflictPair("a" * 32, "c" * 32, "contradicts", "unresolved", ""))
    assert convert.summary_message(s) == sm and convert.summary(convert.summary_message(s)) == s
    skipped = convert.summary(pb.RetrieveSummary(route="skip", skip_reason="cache_hit"))
    assert (skipped.route, skipped.skip_reason, skipped.conflicts) == ("skip", "cache_hit", ())

    # the JSON form (``teleo query --json``) carries them under protobuf's names
    line = convert.event_json(s)["summary"]
    assert line["route"] == "multi_hop" and line["retryCount"] == 1
    assert line["conflicts"][0] == {"idA": "a" * 32, "idB": "b" * 32, "edgeType": "supersedes",
                                    "resolution": "supersedes", "winner": "b" * 32}
    assert convert.event_json(r)["result"]["provenance"]["citation"] == "ops/2024-03-14 (memory 1f5a2b3c…)"

    # positional construction written before these fields still works, with their defaults
    old_summary = Summary(0, 1.0, 0.0, (), False, "", "teleological", "r", 3)
    assert (old_summary.route, old_summary.retry_count, old_summary.conflicts) == ("", 0, ())
    old_result = Result(1, r.memory, 0.9, 0.8, (), False, "", "", 0, "", "", 0, 0, None)
    assert old_result.provenance is None
    assert dataclasses.is_dataclass(Provenance) and Memory.__dataclass_fields__["sufficient_count"].default == 0


def test_retrieve_request_carries_history_and_as_of_times():
    common = dict(top_k=3, profile="hipporag", where=None, target_goals=(), johari=(), stage_overrides=None,
                  breakdown=False, explain=False, snippets=False, omit_content=False)
    plain = convert.retrieve_request("q", **common)
    assert not plain.include_historical and not plain.HasField("as_of_event") and not plain.HasField("as_of_ingestion")

    event = datetime(2024, 3, 14, 9, 30, tzinfo=timezone.utc)
    stored_by = datetime(2024, 6, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))  # any zone, sent as UTC
    req = convert.retrieve_request("q", **common, include_historical=True, as_of_event=event,
                                   as_of_ingestion=stored_by)
    assert req.include_historical and req.profile == "hipporag"
    assert req.as_of_event.ToDatetime(tzinfo=timezone.utc) == event
    assert req.as_of_ingestion.ToDatetime(tzinfo=timezone.utc) == stored_by
    assert req.as_of_ingestion.seconds == int(datetime(2024, 6, 1, 10, 0, tzinfo=timezone.utc).timestamp())

    # a naive datetime is local time, as everywhere in the client (event_time, filters.since/until)
    naive = datetime(2024, 3, 14, 9, 30)
    local = convert.retrieve_request("q", **common, as_of_event=naive)
    assert local.as_of_event == convert.filters(Filters(since=naive)).event_time.start
    assert local.as_of_event.ToDatetime(tzinfo=timezone.utc) == naive.astimezone()


def test_the_new_options_reach_the_server(client):
    march = datetime(2024, 3, 14, 9, 0, tzinfo=timezone.utc)
    stored = client.store("the audit log is kept for ninety days", namespace="cl-asof", event_time=march)
    where = {"namespaces": ["cl-asof"]}
    before = client.search("how long is the audit log kept?", top_k=3, filters=where,
                           as_of_event=march - timedelta(days=30))
    after = client.search("how long is the audit log kept?", top_k=3, filters=where,
                          as_of_event=march + timedelta(days=30), include_historical=True)
    assert [r.memory.id for r in before.results] == []  # it had not happened yet
    assert [r.memory.id for r in after.results] == [stored.id]
    gone = client.search("how long is the audit log kept?", top_k=3, filters=where,
                         as_of_ingestion=datetime(2000, 1, 1, tzinfo=timezone.utc))
    assert gone.results == ()  # nothing had been stored by then

    m = client.feedback(stored.id, sufficient=False, request_id=after.summary.request_id)
    assert (m.used_count, m.insufficient_count, m.sufficient_count) == (0, 1, 0)
    m = client.feedback(stored.id, used=True, sufficient=True)
    assert (m.used_count, m.insufficient_count, m.sufficient_count) == (1, 1, 1)


def test_hipporag_reports_its_route_and_each_result_s_provenance(client):
    client.store_batch(["the payments service writes to the ledger database",
                        "the ledger database is backed up to the eu-west bucket every night",
                        "the cafeteria closes at three on Fridays"], namespace="cl-hippo")
    hits = client.search("where do the payments service's backups go?", top_k=3, profile="hipporag",
                         filters={"namespaces": ["cl-hippo"]})
    summary = hits.summary
    assert summary.profile == "hipporag"
    assert summary.route in ("simple", "multi_hop", "exploratory", "skip"), summary
    assert 0 <= summary.retry_count <= 2 and 0.0 <= summary.retrieval_confidence <= 1.0
    assert all(isinstance(c, ConflictPair) for c in summary.conflicts)
    if summary.route != "skip":
        assert hits.results
    for r in hits.results:
        assert r.provenance is not None and r.provenance.citation, r

    # a superseded memory is left out unless include_historical, and the supersession is reported
    old = client.store("the staging cluster runs in us-east-1", namespace="cl-hippo").id
    new = client.update(old, content="the staging cluster runs in us-east-2", keep_previous=True)
    previous = new.previous_id
    current = client.search("which region does the staging cluster run in?", top_k=5, profile="hipporag",
                            filters={"namespaces": ["cl-hippo"]})
    history = client.search("which region does the staging cluster run in?", top_k=5, profile="hipporag",
                            filters={"namespaces": ["cl-hippo"]}, include_historical=True)
    assert old in [r.memory.id for r in current.results] and previous not in [r.memory.id for r in current.results]
    assert {old, previous} <= {r.memory.id for r in history.results}
    assert ConflictPair(previous, old, "supersedes", "supersedes", old) in current.summary.conflicts


def test_the_token_comes_from_the_places_the_cli_reads(api_server, tmp_path, monkeypatch):
    path = tmp_path / "token"
    path.write_text(api_server.token + "\n")
    monkeypatch.delenv("TELEO_TOKEN", raising=False)
    monkeypatch.setenv("TELEO_DEV_TOKEN_FILE", str(path))
    with Client(api_server.address) as c:
        assert c.token == api_server.token and c.stats().embedder_ready
    monkeypatch.setenv("TELEO_TOKEN", "from-the-environment")
    assert Client(api_server.address).token == "from-the-environment"
    assert Client(api_server.address, token="given").token == "given"


def test_a_saturated_server_says_when_to_retry_and_the_client_does(api_server, client):
    admission = api_server.app.core.admission
    saved = admission.max_computing
    admission.max_computing = 0  # every retrieval is refused for saturation
    try:
        with grpc.insecure_channel(api_server.address) as ch, pytest.raises(grpc.RpcError) as err:
            list(memory_pb2_grpc.MemoryServiceStub(ch).Retrieve(
                pb.RetrieveRequest(text="anything"), metadata=[("authorization", f"Bearer {api_server.token}")], timeout=10))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert dict(err.value.trailing_metadata())[RETRY_AFTER_KEY] == "200"

        with pytest.raises(ClientError) as refused:
            list(Client(api_server.address, token=api_server.token, retry=RetryPolicy(attempts=1)).retrieve("anything"))
        assert refused.value.code == "RESOURCE_EXHAUSTED" and refused.value.retry_after == pytest.approx(0.2)

        threading.Timer(0.5, lambda: setattr(admission, "max_computing", saved)).start()
        t0 = time.monotonic()
        hits = client.search("which region is staging in?", top_k=1)  # retried until the slots free up
        assert time.monotonic() - t0 >= 0.4 and hits.summary.returned == 1
    finally:
        admission.max_computing = saved


def test_a_refusal_that_must_change_first_is_not_retried(api_server):
    calls = []
    policy = RetryPolicy(attempts=5, initial_backoff=0.01)
    with Client(api_server.address, token=api_server.token, retry=policy) as c:
        original = c._stub.StoreBatch

        def counting(*args, **kwargs):
            calls.append(1)
            return original(*args, **kwargs)

        c._stub.StoreBatch = counting
        limit = api_server.app.settings.limits.max_batch_items
        with pytest.raises(ClientError) as err:
            c.store_batch(["same text"] * (limit + 1), namespace="cl-big")
    assert err.value.code == "RESOURCE_EXHAUSTED" and err.value.retry_after is None and len(calls) == 1


def test_an_unreachable_server_is_retried_for_reads_only_and_within_the_deadline(unused_tcp_port):
    policy = RetryPolicy(attempts=3, initial_backoff=0.05, max_backoff=0.1)
    with Client(f"127.0.0.1:{unused_tcp_port}", token="t", retry=policy, timeout=5.0) as c:
        attempts = []
        original = c._stub.Get
        c._stub.Get = lambda *a, **k: (attempts.append(1), original(*a, **k))[1]
        with pytest.raises(ClientError) as err:
            c.get("x")
        assert err.value.code == "UNAVAILABLE" and len(attempts) == 3

        attempts.clear()
        original_delete = c._stub.Delete
        c._stub.Delete = lambda *a, **k: (attempts.append(1), original_delete(*a, **k))[1]
        with pytest.raises(ClientError):
            c.delete("x")  # not safe to repeat: a lost reply may hide a delete that happened
        assert len(attempts) == 1

    with Client(f"127.0.0.1:{unused_tcp_port}", token="t", retry=RetryPolicy(attempts=50), timeout=0.6) as c:
        t0 = time.monotonic()
        with pytest.raises(ClientError):
            c.stats()
        assert time.monotonic() - t0 < 3.0  # the deadline bounds the retries


@pytest.fixture
def unused_tcp_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_async_client_mirrors_the_sync_one(api_server):
    async def scenario():
        async with AsyncClient(api_server.address, token=api_server.token) as c:
            stored = await c.store("the release train leaves every other Wednesday", namespace="cl-async")
            events = [e async for e in c.retrieve("when does the release train leave?", top_k=1,
                                                  filters={"namespaces": ["cl-async"]})]
            hits = await c.search("when does the release train leave?", top_k=1, filters={"namespaces": ["cl-async"]})
            past = await c.search("when does the release train leave?", top_k=1, filters={"namespaces": ["cl-async"]},
                                  as_of_event=datetime(2000, 1, 1, tzinfo=timezone.utc), include_historical=True)
            assert past.results == ()  # stored now: it had not happened by 2000
            listed = [m.id async for m in c.memories({"namespaces": ["cl-async"]})]
            exported = [e.memory.id async for e in c.export({"namespaces": ["cl-async"]})]
            batch = await c.store_batch(["async batch one", "async batch two"], namespace="cl-async")
            note = await c.store("the release train now leaves every Thursday", namespace="cl-async")
            linked = await c.supersede(note.id, [h.id for h in note.possible_updates if h.id == stored.id])
            try:
                await c.get("f" * 32)
            except ClientError as exc:
                missing = exc.code
            return stored, events, hits, listed, exported, batch, missing, await c.health(), linked

    stored, events, hits, listed, exported, batch, missing, health, linked = asyncio.run(scenario())
    assert [(lk.target_id, lk.type) for lk in linked.memory.links] == [(stored.id, "supersedes")]
    assert isinstance(events[-1], Summary) and any(isinstance(e, Result) and e.memory.id == stored.id for e in events)
    assert hits.results[0].memory.id == stored.id
    assert listed == exported == [stored.id]
    assert batch.stored == 2 and missing == "NOT_FOUND" and health == "SERVING"


def test_the_library_loads_nothing_of_the_server():
    import ast
    import subprocess
    import sys

    code = ("import sys, teleo_server.client; "
            "print(sorted(m for m in sys.modules if m.startswith(('teleo_server', 'numpy', 'pydantic', 'structlog'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    modules = ast.literal_eval(loaded)
    assert not [m for m in modules if m.split(".")[0] in ("numpy", "pydantic", "structlog")], modules
    assert {m for m in modules if not m.startswith("teleo_server.client")} == {"teleo_server", "teleo_server.errors",
                                                                             "teleo_server.paths"}


def test_search_reads_the_answer_batched_and_retrieve_streams_it(client, api_server):
    client.store_batch(["The nightly backup runs at 02:00 from the east rack.",
                        "Backups are checked every Monday by the storage team.",
                        "The east rack hosts the build cache."], namespace="cl-batched")
    ask = dict(top_k=3, explain=True, breakdown=True, filters={"namespaces": ["cl-batched"]})
    streamed = list(client.retrieve("when does the backup run?", **ask))
    batched = list(client.retrieve("when does the backup run?", batched=True, **ask))
    kinds = [type(e).__name__ for e in streamed]
    assert kinds == ["Stage"] * kinds.count("Stage") + ["Result"] * 3 + ["Summary"] and kinds.count("Stage") >= 3
    assert [type(e).__name__ for e in batched] == ["Result"] * 3 + ["Summary"]
    # (a result's memory carries its usage counters, which each retrieval moves)
    same = lambda rs: [(r.rank, r.memory.id, r.memory.content, r.score, r.found_by, r.explanation, r.breakdown) for r in rs]
    results = same(e for e in streamed if isinstance(e, Result))
    assert same(e for e in batched if isinstance(e, Result)) == results
    found = client.search("when does the backup run?", **ask)
    assert same(found.results) == results
    assert [s.stage for s in found.summary.stages] == [e.stage for e in streamed if isinstance(e, Stage)]

    async def aio():
        async with AsyncClient(api_server.address, token=api_server.token) as c:
            return await c.search("when does the backup run?", **ask)

    assert same(asyncio.run(aio()).results) == results
