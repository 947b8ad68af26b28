"""Managing memories through the real server: List (paged, filtered, only what the caller may read)
and DeleteWhere (by namespace and filters, with a dry run)."""

from __future__ import annotations

import grpc
import pytest
from teleo.v1 import memory_pb2 as pb

from teleo_server.domain import AccessLevel
from tests._rpc import status as _code
from tests._rpc import token_auth as _token

LEVEL = {AccessLevel.PUBLIC: pb.ACCESS_LEVEL_PUBLIC, AccessLevel.INTERNAL: pb.ACCESS_LEVEL_INTERNAL,
         AccessLevel.RESTRICTED: pb.ACCESS_LEVEL_RESTRICTED}




def _store(stub, auth, content, ns, level=AccessLevel.INTERNAL, **kw) -> str:
    memory = pb.MemoryInput(content=content, namespace=ns, access_level=LEVEL[level], **kw)
    return stub.Store(pb.StoreRequest(memory=memory), metadata=auth, timeout=60).id


def _all_pages(stub, auth, page_size, **kw) -> tuple[list[str], int]:
    ids, cursor, pages = [], "", 0
    while True:
        resp = stub.List(pb.ListRequest(page_size=page_size, cursor=cursor, **kw), metadata=auth, timeout=30)
        ids += [m.id for m in resp.memories]
        pages += 1
        assert len(resp.memories) <= page_size
        if not resp.next_cursor:
            return ids, pages
        cursor = resp.next_cursor


def test_list_pages_through_what_the_caller_may_read(api_server, stub):
    owner = _token(api_server, "lister", ["shelf", "vault"], ["shelf", "vault"], AccessLevel.RESTRICTED, "shelf")
    visitor = _token(api_server, "visitor", ["shelf"], [], AccessLevel.PUBLIC, "shelf")
    public = [_store(stub, owner, f"public shelf note {i}", "shelf", AccessLevel.PUBLIC) for i in range(7)]
    secret = [_store(stub, owner, f"restricted shelf note {i}", "shelf", AccessLevel.RESTRICTED) for i in range(3)]
    vault = [_store(stub, owner, f"vault note {i}", "vault") for i in range(2)]

    ids, pages = _all_pages(stub, owner, 4, filters=pb.RetrieveFilters(namespaces=["shelf"]))
    assert ids == public + secret and pages == 3  # oldest first, 4 + 4 + 2
    everything, _ = _all_pages(stub, owner, 100)
    assert everything == public + secret + vault
    # a PUBLIC reader pages through the same namespace and sees only what it may read
    seen, _ = _all_pages(stub, visitor, 3)
    assert seen == public
    # and may not even name a namespace it cannot read
    code, details = _code(lambda: stub.List(pb.ListRequest(filters=pb.RetrieveFilters(namespaces=["vault"])),
                                            metadata=visitor, timeout=30))
    assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("filters.namespaces")


def test_list_applies_retrieves_filters(api_server, stub):
    auth = _token(api_server, "filterer", ["desk"], ["desk"], AccessLevel.INTERNAL, "desk")
    a = _store(stub, auth, "standup notes for monday", "desk", session_id="s1", metadata={"team": "infra"})
    _store(stub, auth, "lunch order for tuesday", "desk", session_id="s2", metadata={"team": "food"})
    c = _store(stub, auth, "retro action items", "desk", session_id="s1", memory_type=pb.MEMORY_TYPE_PROCEDURAL)
    got = lambda **f: [m.id for m in stub.List(pb.ListRequest(filters=pb.RetrieveFilters(namespaces=["desk"], **f)),  # noqa: E731
                                                metadata=auth, timeout=30).memories]
    assert got(session_id="s1") == [a, c]
    assert got(metadata={"team": "infra"}) == [a]
    assert got(memory_types=[pb.MEMORY_TYPE_PROCEDURAL]) == [c]
    assert got(session_id="nope") == []


def test_a_cursor_survives_deletes_and_a_forged_one_is_refused(api_server, stub):
    auth = _token(api_server, "pager", ["pages"], ["pages"], AccessLevel.INTERNAL, "pages")
    ids = [_store(stub, auth, f"page item {i}", "pages") for i in range(6)]
    first = stub.List(pb.ListRequest(page_size=2), metadata=auth, timeout=30)
    assert [m.id for m in first.memories] == ids[:2] and first.next_cursor
    stub.Delete(pb.DeleteRequest(ids=[ids[2]]), metadata=auth, timeout=30)  # the next page's first item
    rest = stub.List(pb.ListRequest(page_size=10, cursor=first.next_cursor), metadata=auth, timeout=30)
    assert [m.id for m in rest.memories] == ids[3:] and rest.next_cursor == ""
    import base64

    huge = "c1." + base64.urlsafe_b64encode(str(2**63).encode()).decode()
    for bad in ("xyz", "c1.!!!", "c1.LTE=", huge):  # garbage, bad base64, a negative position, past int64
        code, details = _code(lambda: stub.List(pb.ListRequest(cursor=bad), metadata=auth, timeout=30))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("cursor: not a cursor this server issued")
    code, details = _code(lambda: stub.List(pb.ListRequest(page_size=5000), metadata=auth, timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("page_size")


def test_delete_where_counts_first_and_deletes_only_what_matches(api_server, stub):
    auth = _token(api_server, "cleaner", ["bin", "keep"], ["bin", "keep"], AccessLevel.INTERNAL, "bin")
    old = [_store(stub, auth, f"scratch {i}", "bin", session_id="old") for i in range(4)]
    new = [_store(stub, auth, f"fresh {i}", "bin", session_id="new") for i in range(2)]
    kept = _store(stub, auth, "unrelated", "keep", session_id="old")
    where = pb.RetrieveFilters(namespaces=["bin"], session_id="old")
    dry = stub.DeleteWhere(pb.DeleteWhereRequest(filters=where, dry_run=True), metadata=auth, timeout=30)
    assert (dry.matched, dry.deleted) == (4, 0)
    assert len(stub.Get(pb.GetRequest(ids=old), metadata=auth, timeout=30).memories) == 4
    done = stub.DeleteWhere(pb.DeleteWhereRequest(filters=where), metadata=auth, timeout=30)
    assert (done.matched, done.deleted) == (4, 4)
    remaining = [m.id for m in stub.List(pb.ListRequest(), metadata=auth, timeout=30).memories]
    assert remaining == new + [kept]
    # deleted memories are gone from retrieval too, not only from the store
    events = list(stub.Retrieve(pb.RetrieveRequest(text="scratch", top_k=10, filters=pb.RetrieveFilters(namespaces=["bin"])),
                                metadata=auth, timeout=60))
    assert not {e.result.memory.id for e in events if e.WhichOneof("event") == "result"} & set(old)
    code, details = _code(lambda: stub.DeleteWhere(pb.DeleteWhereRequest(), metadata=auth, timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("filters.namespaces")


def test_delete_where_refuses_when_any_match_is_not_writable(api_server, stub):
    owner = _token(api_server, "owner", ["shared"], ["shared"], AccessLevel.INTERNAL, "shared")
    reader = _token(api_server, "reader", ["shared"], [], AccessLevel.INTERNAL, "shared")
    ids = [_store(stub, owner, f"shared fact {i}", "shared") for i in range(3)]
    code, details = _code(lambda: stub.DeleteWhere(
        pb.DeleteWhereRequest(filters=pb.RetrieveFilters(namespaces=["shared"])), metadata=reader, timeout=30))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "may not write namespace 'shared'" in details
    assert len(stub.Get(pb.GetRequest(ids=ids), metadata=owner, timeout=30).memories) == 3


def test_list_and_the_index_agree_on_every_filter(tmp_path):
    """The store's SQL filters select exactly the rows of the index's mask (the same ACL scopes,
    levels, namespaces, types, times, confidence, session and metadata)."""
    import numpy as np

    from bench.harness import memories as syn
    from teleo_server.domain import MemoryType
    from teleo_server.index.catalog import Catalog
    from teleo_server.query import Filters
    from teleo_server.store import SQLiteStore

    rng = np.random.default_rng(4)
    store, cat = SQLiteStore(tmp_path / "t.db"), Catalog()
    for i in range(300):
        m = syn.memory(f"m{i}", f"text {i}", namespace=str(rng.choice(["team-a", "team-b", "ops", "ops-eu"])),
                       access_level=AccessLevel(int(rng.integers(1, 5))), memory_type=MemoryType(int(rng.integers(1, 6))),
                       event_time=float(rng.choice([0.0, *range(1, 1000)])), ingestion_time=500.0,
                       confidence=float(rng.integers(0, 11)) / 10, session_id=str(rng.choice(["", "s1", "s2"])),
                       metadata={"project": str(rng.choice(["apollo", "zephyr"]))} if i % 3 else {})
        stored, _ = store.put(m, syn.embedding(syn.chunk(rng.standard_normal(8))), dedup=False)
        cat.add(stored, 1)
    scopes = [frozenset({"*"}), frozenset({"team-a"}), frozenset({"ops*"}), frozenset({"team-b", "ops*"})]
    filters = [Filters(), Filters(namespaces=("team-a", "ops-eu")), Filters(memory_types=(MemoryType.EPISODIC,)),
               Filters(event_start=100.0, event_end=600.0), Filters(min_confidence=0.3), Filters(session_id="s2"),
               Filters(metadata=(("project", "apollo"),))]
    for scope in scopes:
        for level in AccessLevel:
            principal = syn.admin(scope, level)
            for f in filters:
                listed = [m.id for _, m in store.list_page(principal, f, 0, 1000)]
                masked = [cat.memory(int(r)).id for r in np.flatnonzero(cat.mask(principal, f))]
                assert listed == masked, (scope, level, f)


def _results(stub, auth, text, ns):
    events = list(stub.Retrieve(pb.RetrieveRequest(text=text, top_k=5, filters=pb.RetrieveFilters(namespaces=[ns])),
                                metadata=auth, timeout=60))
    return [e.result for e in events if e.WhichOneof("event") == "result"]


def test_update_changes_fields_in_place_and_re_embeds_a_new_content(api_server, stub):
    auth = _token(api_server, "editor", ["facts"], ["facts"], AccessLevel.INTERNAL, "facts")
    mid = _store(stub, auth, "The staging cluster runs in eu-west-1.", "facts", metadata={"owner": "ops"})
    stub.Feedback(pb.FeedbackRequest(id=mid, used=True, helpful=True), metadata=auth, timeout=30)
    resp = stub.Update(pb.UpdateRequest(id=mid, fields=["content", "importance"], memory=pb.MemoryInput(
        content="We moved staging to us-east-2 in March.", importance=0.9)), metadata=auth, timeout=60)
    m = resp.memory
    assert m.id == mid and resp.previous_id == ""
    assert m.input.content.startswith("We moved staging") and abs(m.input.importance - 0.9) < 1e-6
    assert m.input.metadata == {"owner": "ops"} and m.used_count == 1 and m.helpful_count == 1  # untouched
    top = _results(stub, auth, "which region is staging in now, us-east-2?", "facts")[0]
    assert top.memory.id == mid and "us-east-2" in top.memory.input.content  # the index has the new vectors
    (got,) = stub.Get(pb.GetRequest(ids=[mid]), metadata=auth, timeout=30).memories
    assert got.input.content == m.input.content and got.content_hash == m.content_hash != ""
    # a field change alone keeps the vectors and still moves the filters
    stub.Update(pb.UpdateRequest(id=mid, fields=["session_id"], memory=pb.MemoryInput(session_id="s9")),
                metadata=auth, timeout=60)
    listed = stub.List(pb.ListRequest(filters=pb.RetrieveFilters(namespaces=["facts"], session_id="s9")), metadata=auth, timeout=30)
    assert [x.id for x in listed.memories] == [mid]
    hits = list(stub.Retrieve(pb.RetrieveRequest(text="staging us-east-2", filters=pb.RetrieveFilters(session_id="s9")),
                              metadata=auth, timeout=60))
    assert [e.result.memory.id for e in hits if e.WhichOneof("event") == "result"] == [mid]


def test_update_can_keep_the_previous_version_which_it_supersedes(api_server, stub):
    auth = _token(api_server, "historian", ["hist"], ["hist"], AccessLevel.INTERNAL, "hist")
    mid = _store(stub, auth, "The office coffee machine is on floor 2.", "hist")
    resp = stub.Update(pb.UpdateRequest(id=mid, fields=["content"], keep_previous=True,
                                        memory=pb.MemoryInput(content="The office coffee machine moved to floor 5.")),
                       metadata=auth, timeout=60)
    prev = resp.previous_id
    assert prev and prev != mid
    assert [(lk.target_id, lk.type) for lk in resp.memory.input.links] == [(prev, pb.LINK_TYPE_SUPERSEDES)]
    (old,) = stub.Get(pb.GetRequest(ids=[prev]), metadata=auth, timeout=30).memories
    assert old.input.content == "The office coffee machine is on floor 2."
    found = {r.memory.id for r in _results(stub, auth, "coffee machine floor", "hist")}
    assert {mid, prev} <= found  # both versions are indexed


def test_update_refuses_what_the_caller_may_not_do(api_server, stub):
    owner = _token(api_server, "ed-owner", ["mine", "elsewhere"], ["mine"], AccessLevel.INTERNAL, "mine")
    reader = _token(api_server, "ed-reader", ["mine"], [], AccessLevel.INTERNAL, "mine")
    outsider = _token(api_server, "ed-out", ["other"], ["other"], AccessLevel.INTERNAL, "other")
    mid = _store(stub, owner, "a fact only its owner may change", "mine")
    change = pb.MemoryInput(content="changed")
    cases = [
        (reader, pb.UpdateRequest(id=mid, fields=["content"], memory=change), grpc.StatusCode.PERMISSION_DENIED, "id:"),
        (outsider, pb.UpdateRequest(id=mid, fields=["content"], memory=change), grpc.StatusCode.NOT_FOUND, "id:"),
        (owner, pb.UpdateRequest(id="nope", fields=["content"], memory=change), grpc.StatusCode.NOT_FOUND, "id:"),
        (owner, pb.UpdateRequest(id=mid, fields=["colour"], memory=change), grpc.StatusCode.INVALID_ARGUMENT, "fields[0]:"),
        (owner, pb.UpdateRequest(id=mid, memory=change), grpc.StatusCode.INVALID_ARGUMENT, "fields:"),
        (owner, pb.UpdateRequest(id=mid, fields=["namespace"], memory=pb.MemoryInput(namespace="elsewhere")),
         grpc.StatusCode.PERMISSION_DENIED, "memory.namespace:"),
        (owner, pb.UpdateRequest(id=mid, fields=["content"], memory=pb.MemoryInput(content="  ")),
         grpc.StatusCode.INVALID_ARGUMENT, "memory.content:"),
    ]
    for auth, req, code, prefix in cases:
        got, details = _code(lambda: stub.Update(req, metadata=auth, timeout=30))
        assert got == code and details.startswith(prefix), (req.fields, got, details)
    (still,) = stub.Get(pb.GetRequest(ids=[mid]), metadata=owner, timeout=30).memories
    assert still.input.content == "a fact only its owner may change"


def test_a_namespace_moves_between_servers_by_export_and_import(api_server, stub, tmp_path):
    """Export from this server, import into a second one: contents, fields, links among the moved
    memories and (same model version) vectors arrive; nothing else is visible to the exporter."""
    from teleo.v1 import memory_pb2_grpc

    from teleo_server.config import Settings
    from tests._server import InThreadServer

    owner = _token(api_server, "mover", ["moving", "stay"], ["moving", "stay"], AccessLevel.INTERNAL, "moving")
    first = _store(stub, owner, "The release train leaves every Tuesday.", "moving", metadata={"team": "rel"})
    second = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(
        content="Release trains were moved to Wednesdays.", namespace="moving",
        links=[pb.Link(target_id=first, type=pb.LINK_TYPE_SUPERSEDES)])), metadata=owner, timeout=60).id
    _store(stub, owner, "not part of the move", "stay")
    exported = list(stub.Export(pb.ExportRequest(filters=pb.RetrieveFilters(namespaces=["moving"]), with_embeddings=True),
                                metadata=owner, timeout=60))
    assert [e.memory.id for e in exported] == [first, second]
    assert all(e.chunks and set(e.chunks[0].heads) == {"dense", "tokens", "splade"} for e in exported)

    target = InThreadServer.start(Settings(port=0, data_dir=tmp_path / "t", dev_token_file=tmp_path / "token2"))
    try:
        other = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(target.address))
        auth = [("authorization", f"Bearer {target.token}")]
        resp = other.Import(iter(pb.ImportRequest(item=e) for e in exported), metadata=auth, timeout=120)
        assert (resp.stored, resp.failed, resp.duplicates, resp.vectors_reused) == (2, 0, 0, 2), resp
        new_first, new_second = (i.id for i in resp.items)
        got = {m.id: m for m in other.Get(pb.GetRequest(ids=[new_first, new_second]), metadata=auth, timeout=30).memories}
        assert got[new_first].input.metadata == {"team": "rel"} and got[new_first].input.namespace == "moving"
        assert [lk.target_id for lk in got[new_second].input.links] == [new_first]  # the link followed
        # the vectors arrived as they were: retrieving by the exported dense vector finds the memory first
        vec = exported[1].chunks[0].heads["dense"].values
        hits = list(other.Retrieve(pb.RetrieveRequest(vectors=pb.QueryVectors(dense=vec, model_version=exported[1].memory.model_version),
                                                      top_k=1, profile="hybrid"), metadata=auth, timeout=60))
        assert [e.result.memory.id for e in hits if e.WhichOneof("event") == "result"] == [new_second]
        # importing again finds the same content: duplicates, nothing new
        again = other.Import(iter(pb.ImportRequest(item=e) for e in exported), metadata=auth, timeout=120)
        assert (again.stored, again.duplicates) == (0, 2)
        # vectors of another model version are not trusted: the memory is embedded again
        stale = pb.ExportedMemory()
        stale.CopyFrom(exported[0])
        stale.memory.model_version = "some-other-model"
        stale.memory.input.content = "The release train leaves every Tuesday at noon."
        redone = other.Import(iter([pb.ImportRequest(item=stale)]), metadata=auth, timeout=120)
        assert (redone.stored, redone.vectors_reused) == (1, 0)
    finally:
        target.stop()


def test_import_checks_every_item_like_a_store(api_server, stub):
    auth = _token(api_server, "importer", ["imp"], ["imp"], AccessLevel.INTERNAL, "imp")
    good = pb.ExportedMemory(memory=pb.Memory(id="x1", input=pb.MemoryInput(content="fine", namespace="imp")))
    foreign = pb.ExportedMemory(memory=pb.Memory(id="x2", input=pb.MemoryInput(content="not mine", namespace="elsewhere")))
    empty = pb.ExportedMemory(memory=pb.Memory(id="x3", input=pb.MemoryInput(content=" ", namespace="imp")))
    bad_vectors = pb.ExportedMemory(memory=pb.Memory(id="x4", input=pb.MemoryInput(content="with vectors", namespace="imp"),
                                                     model_version=api_server.app.core.embedder.model_version))
    bad_vectors.chunks.add(start=0, end=12).heads["dense"].values.extend([1.0, 2.0])
    resp = stub.Import(iter(pb.ImportRequest(item=i) for i in (good, foreign, empty, bad_vectors)), metadata=auth, timeout=60)
    codes = [i.error_code for i in resp.items]
    assert codes == ["", "PERMISSION_DENIED", "INVALID_ARGUMENT", "INVALID_ARGUMENT"] and resp.stored == 1
    assert resp.items[3].error.startswith("item.chunks[0].heads")
