"""Tenant isolation and poison input, end to end through a real server and a real client.

Each test here reproduces a defect found by an adversarial review: out-of-range timestamps that
broke every reader, de-duplication that revealed unreadable memories, and goals built from text
the caller may not read.
"""

from __future__ import annotations

import sqlite3
import time

import grpc
import pytest
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc

from teleo_server.domain import AccessLevel
from tests._rpc import status as _code
from tests._rpc import token_auth as _token



def _results(stub, auth, **kw):
    events = list(stub.Retrieve(pb.RetrieveRequest(**kw), metadata=auth, timeout=60))
    return [e.result for e in events if e.WhichOneof("event") == "result"], events[-1].summary



# -- poison input: timestamps outside what a protobuf Timestamp may hold --------------------------


@pytest.mark.parametrize("seconds", [10**12, -(10**11), 253_402_300_800, -62_135_596_801], ids=["1e12", "-1e11", "year10000", "year0"])
def test_store_rejects_an_event_time_a_timestamp_cannot_hold(stub, auth, seconds):
    mem = pb.MemoryInput(content=f"poison event time {seconds}", namespace="poison")
    mem.event_time.seconds = seconds
    code, details = _code(lambda: stub.Store(pb.StoreRequest(memory=mem), metadata=auth, timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("memory.event_time:")


def test_store_rejects_nanos_out_of_range(stub, auth):
    mem = pb.MemoryInput(content="poison nanos", namespace="poison")
    mem.event_time.seconds, mem.event_time.nanos = 1_700_000_000, -1
    code, details = _code(lambda: stub.Store(pb.StoreRequest(memory=mem), metadata=auth, timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "memory.event_time" in details and "nanos" in details


def test_the_edges_of_the_timestamp_range_are_accepted_and_read_back(stub, auth):
    for seconds, nanos in ((-62_135_596_800, 0), (253_402_300_799, 999_999_999)):
        mem = pb.MemoryInput(content=f"edge of time {seconds}", namespace="poison")
        mem.event_time.seconds, mem.event_time.nanos = seconds, nanos
        out = stub.Store(pb.StoreRequest(memory=mem), metadata=auth, timeout=30)
        (got,) = stub.Get(pb.GetRequest(ids=[out.id]), metadata=auth, timeout=10).memories
        # times are kept as float seconds: ~30 us apart this far from the epoch
        back = got.input.event_time.seconds + got.input.event_time.nanos / 1e9
        assert abs(back - (seconds + nanos / 1e9)) < 2e-3
        results, _ = _results(stub, auth, text=f"edge of time {seconds}", top_k=1, filters=pb.RetrieveFilters(namespaces=["poison"]))
        assert results[0].memory.id == out.id


def test_batch_item_with_a_poison_time_fails_alone(stub, auth):
    bad = pb.MemoryInput(content="batch poison", namespace="poison")
    bad.event_time.seconds = 10**12
    reqs = [pb.StoreBatchRequest(memory=bad, client_ref="bad"),
            pb.StoreBatchRequest(memory=pb.MemoryInput(content="batch fine", namespace="poison"), client_ref="ok")]
    resp = stub.StoreBatch(iter(reqs), metadata=auth, timeout=60)
    by_ref = {i.client_ref: i for i in resp.items}
    assert by_ref["bad"].error_code == "INVALID_ARGUMENT" and "memory.event_time" in by_ref["bad"].error
    assert by_ref["ok"].id and not by_ref["ok"].error


@pytest.mark.parametrize("which", ["start", "end"])
def test_retrieve_rejects_a_filter_time_a_timestamp_cannot_hold(stub, auth, which):
    req = pb.RetrieveRequest(text="anything")
    getattr(req.filters.event_time, which).seconds = 10**12
    code, details = _code(lambda: list(stub.Retrieve(req, metadata=auth, timeout=30)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(f"filters.event_time.{which}:")


def test_an_unservable_indexed_row_is_quarantined_not_failing_retrieve(api_server, stub, auth):
    """A memory written before validation existed (here: its indexed copy altered in place)."""
    good = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="kelp forests grow along the cold coast", namespace="quar")),
                      metadata=auth, timeout=30).id
    bad = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="kelp forests shelter otters near the coast", namespace="quar")),
                     metadata=auth, timeout=30).id
    retriever = api_server.app.core.retriever
    indexed = retriever.catalog.memory(retriever.catalog.row_of[bad])
    indexed.event_time = 1e12
    retriever.catalog.update(indexed)
    with sqlite3.connect(api_server.app.core.store.path) as conn:
        conn.execute("UPDATE memories SET event_time = 1e12 WHERE id = ?", (bad,))
    results, summary = _results(stub, auth, text="kelp forests coast", top_k=5, filters=pb.RetrieveFilters(namespaces=["quar"]))
    assert [r.memory.id for r in results] == [good] and summary.returned == 1
    # quarantining is bookkeeping done after the response, off the read path
    deadline = time.monotonic() + 30
    while bad not in api_server.app.core.store.quarantined() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert bad in api_server.app.core.store.quarantined()
    code, _ = _code(lambda: stub.Get(pb.GetRequest(ids=[bad]), metadata=auth, timeout=10))
    assert code == grpc.StatusCode.NOT_FOUND
    # the next retrieval no longer even sees it, and its owner can still delete it
    results, _ = _results(stub, auth, text="kelp forests coast", top_k=5, filters=pb.RetrieveFilters(namespaces=["quar"]))
    assert [r.memory.id for r in results] == [good]
    assert stub.Delete(pb.DeleteRequest(ids=[bad]), metadata=auth, timeout=10).deleted == 1


def test_a_poison_row_on_disk_is_quarantined_at_start_up(server_process):
    srv = server_process()
    auth = [("authorization", f"Bearer {srv.token}")]
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(srv.address))
    ids = [stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=f"lighthouse keeper log entry {i}")), metadata=auth, timeout=60).id
           for i in range(3)]
    srv.kill()
    with sqlite3.connect(srv.data_dir / "teleo.db") as conn:
        conn.execute("UPDATE memories SET event_time = 1e12 WHERE id = ?", (ids[0],))
        conn.execute("UPDATE memories SET metadata = 'not json' WHERE id = ?", (ids[1],))
    again = server_process(data_dir=srv.data_dir)
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(again.address))
    results, _ = _results(stub, auth, text="lighthouse keeper log entry", top_k=10)
    assert [r.memory.id for r in results] == [ids[2]]
    assert [m.id for m in stub.Get(pb.GetRequest(ids=[ids[2]]), metadata=auth, timeout=10).memories] == [ids[2]]
    for bad in ids[:2]:
        code, _ = _code(lambda: stub.Get(pb.GetRequest(ids=[bad]), metadata=auth, timeout=10))
        assert code == grpc.StatusCode.NOT_FOUND
    assert '"event": "store.quarantined"' in again.logs()


# -- de-duplication never reveals what the caller cannot read -----------------------------------


def test_duplicate_of_a_higher_level_memory_is_stored_not_revealed(api_server, stub):
    secret = "The zebracorn acquisition closes on 14 March."
    boss = _token(api_server, "boss", ["dd"], ["dd"], AccessLevel.RESTRICTED, "dd")
    intern = _token(api_server, "intern", ["dd"], ["dd"], AccessLevel.INTERNAL, "dd")
    hidden = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=secret, access_level=pb.ACCESS_LEVEL_RESTRICTED)),
                        metadata=boss, timeout=30)
    mine = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=secret)), metadata=intern, timeout=30)
    assert not mine.duplicate and mine.id != hidden.id
    (got,) = stub.Get(pb.GetRequest(ids=[mine.id]), metadata=intern, timeout=10).memories
    assert got.input.access_level == pb.ACCESS_LEVEL_INTERNAL
    # at its own level a repeat is still a duplicate of what the caller can read
    again = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=secret)), metadata=intern, timeout=30)
    assert again.duplicate and again.id == mine.id
    results, _ = _results(stub, intern, text="zebracorn acquisition", top_k=5)
    assert [r.memory.id for r in results] == [mine.id]


def test_a_write_only_token_never_learns_of_an_existing_memory(api_server, stub):
    text = "The vault combination is written inside the blue notebook."
    owner = _token(api_server, "owner", ["wo"], ["wo"], AccessLevel.INTERNAL, "wo")
    dropbox = _token(api_server, "dropbox", [], ["wo"], AccessLevel.INTERNAL, "wo")
    first = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=text)), metadata=owner, timeout=30)
    single = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=text)), metadata=dropbox, timeout=30)
    batch = stub.StoreBatch(iter([pb.StoreBatchRequest(memory=pb.MemoryInput(content=text))] * 2), metadata=dropbox, timeout=30)
    ids = {first.id, single.id} | {i.id for i in batch.items}
    assert not single.duplicate and batch.duplicates == 0 and batch.stored == 2 and len(ids) == 4


# -- update hints name only what the writer may read --------------------------------------------


def test_update_hints_name_only_memories_the_writer_may_read(api_server, stub):
    """A Store names the earlier memories the new one probably updates: never one of another
    namespace, of a level above the writer's, or any at all for a token that cannot read."""
    boss = _token(api_server, "hint-boss", ["hints", "hints-other"], ["hints", "hints-other"], AccessLevel.RESTRICTED,
                  "hints")
    staff = _token(api_server, "hint-staff", ["hints"], ["hints"], AccessLevel.INTERNAL, "hints")
    dropbox = _token(api_server, "hint-dropbox", [], ["hints"], AccessLevel.INTERNAL, "hints")

    def store(auth, content, **kw):
        return stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=content, **kw)), metadata=auth, timeout=30)

    secret = store(boss, "The zebracorn cluster runs in eu-west-1.", access_level=pb.ACCESS_LEVEL_RESTRICTED)
    elsewhere = store(boss, "The zebracorn cluster runs in eu-west-2.", namespace="hints-other")
    visible = store(staff, "The zebracorn cluster has 12 nodes.")
    # the boss sees the restricted fact named; the staff writer only what it may read
    moved = store(boss, "We moved the zebracorn cluster to us-east-2.", access_level=pb.ACCESS_LEVEL_RESTRICTED)
    assert secret.id in [h.id for h in moved.possible_updates]
    staff_hints = {h.id for h in store(staff, "Zebracorn cluster moved to us-east-1 now.").possible_updates}
    assert staff_hints == {visible.id}  # not the restricted fact or note, not the other namespace's
    assert not store(dropbox, "Zebracorn cluster moved to ap-south-1 now.").possible_updates
    # a duplicate writes nothing and names nothing
    again = store(staff, "Zebracorn cluster moved to us-east-1 now.")
    assert again.duplicate and not again.possible_updates


# -- goals come only from what the caller may read ----------------------------------------------

ZEBRACORN = [
    "The zebracorn merger plan needs board approval before the end of the quarter.",
    "Zebracorn merger plan: the valuation model assumes twelve percent growth.",
    "Legal flagged two risks in the zebracorn merger plan term sheet.",
    "The zebracorn merger plan keeps both engineering teams intact.",
    "Finance wants the zebracorn merger plan numbers by Thursday.",
    "Due diligence for the zebracorn merger plan starts next Monday.",
    "The zebracorn merger plan is code-named to keep it quiet.",
    "Zebracorn merger plan communications go out only after signing.",
    "A banker asked about the zebracorn merger plan timeline again.",
    "The zebracorn merger plan moves headquarters to Lisbon.",
    "Retention bonuses are part of the zebracorn merger plan.",
    "The zebracorn merger plan was discussed at the offsite.",
    "Antitrust counsel reviewed the zebracorn merger plan filing.",
    "The zebracorn merger plan closing checklist has forty items.",
]


def test_goals_labels_and_counts_come_only_from_readable_memories(api_server, stub):
    boss = _token(api_server, "ceo", ["boardroom"], ["boardroom"], AccessLevel.RESTRICTED, "boardroom")
    public = _token(api_server, "visitor", ["foyer"], ["foyer"], AccessLevel.PUBLIC, "foyer")
    stub.StoreBatch(iter(pb.StoreBatchRequest(memory=pb.MemoryInput(content=c, access_level=pb.ACCESS_LEVEL_RESTRICTED))
                         for c in ZEBRACORN), metadata=boss, timeout=120)
    stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="The foyer plants are watered on Mondays.", access_level=pb.ACCESS_LEVEL_PUBLIC)),
               metadata=public, timeout=30)
    # the owner sees a goal built from its memories, once the background upkeep has clustered them
    deadline = time.monotonic() + 30
    while stub.Stats(pb.StatsRequest(), metadata=boss, timeout=10).goals < 2:
        assert time.monotonic() < deadline, "goals were never built"
        time.sleep(0.1)
    results, _ = _results(stub, boss, text="zebracorn", top_k=3, target_goals=["zebracorn"], explain=True)
    assert any("zebracorn" in r.explanation for r in results)
    assert stub.Stats(pb.StatsRequest(), metadata=boss, timeout=10).goals >= 2
    # a PUBLIC caller elsewhere gets no trace of it: no label, no count, and naming it as a target
    # answers exactly as a goal that exists nowhere does
    answers = []
    for target in ("zebracorn", "quokkaplan"):
        code, details = _code(lambda: _results(stub, public, text="zebracorn merger plan", target_goals=[target]))
        answers.append((code, details.replace(target, "X")))
    assert answers[0] == answers[1] and answers[0][0] == grpc.StatusCode.INVALID_ARGUMENT
    results, _ = _results(stub, public, text="zebracorn merger plan", top_k=5, explain=True, include_breakdown=True)
    assert results and all(r.memory.input.namespace == "foyer" for r in results)
    assert not any("zebracorn" in r.explanation or "merger" in r.explanation for r in results)
    assert stub.Stats(pb.StatsRequest(), metadata=public, timeout=10).goals == 0
    # ListGoals: the owner's goals with their first snapshot; nothing for the visitor
    mine = stub.ListGoals(pb.ListGoalsRequest(), metadata=boss, timeout=10).goals
    assert len(mine) == stub.Stats(pb.StatsRequest(), metadata=boss, timeout=10).goals
    assert any("zebracorn" in g.label for g in mine) and sum(g.size for g in mine) == len(ZEBRACORN)
    assert all(g.history and g.history[-1].size == g.size and g.history[-1].label == g.label for g in mine)
    assert all(g.history[-1].time.seconds > 1.7e9 for g in mine)
    assert list(stub.ListGoals(pb.ListGoalsRequest(), metadata=public, timeout=10).goals) == []
    # DiscoverEntryPoints: the owner's best matches name its memories; the visitor's never do
    theirs = stub.DiscoverEntryPoints(pb.DiscoverEntryPointsRequest(text="zebracorn merger plan"), metadata=boss,
                                      timeout=30).entry_points
    assert theirs and [e.similarity for e in theirs] == sorted((e.similarity for e in theirs), reverse=True)
    got = stub.Get(pb.GetRequest(ids=[e.memory_id for e in theirs]), metadata=boss, timeout=10).memories
    assert all("zebracorn" in m.input.content.lower() for m in got)
    # Get with purpose: the owner's goal and its per-space alignment; the visitor's memory has
    # no goal of its own partition (and the owner's goals never reach it)
    with_purpose = stub.Get(pb.GetRequest(ids=[got[0].id], include_purpose=True), metadata=boss, timeout=10).memories[0]
    assert with_purpose.HasField("purpose") and with_purpose.purpose.goal_id in {g.id for g in mine}
    assert "E1_semantic" in with_purpose.purpose.space_alignment and with_purpose.purpose.members_compared > 0
    assert not stub.Get(pb.GetRequest(ids=[got[0].id]), metadata=boss, timeout=10).memories[0].HasField("purpose")
    foyer = stub.List(pb.ListRequest(), metadata=public, timeout=10).memories[0].id
    assert not stub.Get(pb.GetRequest(ids=[foyer], include_purpose=True), metadata=public, timeout=10).memories[0].HasField("purpose")
    assert _code(lambda: stub.Get(pb.GetRequest(ids=[got[0].id], include_purpose=True), metadata=public,
                                  timeout=10))[0] == grpc.StatusCode.NOT_FOUND
    # Compare by purpose vector: two of the owner's memories lie in a partition with goals; the
    # visitor's lies in one without, and the owner's memories are not there for it to name
    owned = [m.id for m in stub.List(pb.ListRequest(), metadata=boss, timeout=10).memories][:2]
    pair = stub.Compare(pb.CompareRequest(id_a=owned[0], id_b=owned[1]), metadata=boss, timeout=10)
    assert pair.HasField("purpose_similarity") and -1.0 <= pair.purpose_similarity <= 1.0
    assert not stub.Compare(pb.CompareRequest(id_a=foyer, id_b=foyer), metadata=public, timeout=10).HasField("purpose_similarity")
    assert _code(lambda: stub.Compare(pb.CompareRequest(id_a=foyer, id_b=owned[0]), metadata=public,
                                      timeout=10))[0] == grpc.StatusCode.NOT_FOUND
    seen = stub.DiscoverEntryPoints(pb.DiscoverEntryPointsRequest(text="zebracorn merger plan"), metadata=public,
                                    timeout=30).entry_points
    assert {e.memory_id for e in seen}.isdisjoint({e.memory_id for e in theirs})
    strict = stub.DiscoverEntryPoints(pb.DiscoverEntryPointsRequest(text="zebracorn merger plan", min_similarity=0.99),
                                      metadata=boss, timeout=30).entry_points
    assert all(e.similarity >= 0.99 for e in strict) and len(strict) < len(theirs)
    code, details = _code(lambda: stub.DiscoverEntryPoints(pb.DiscoverEntryPointsRequest(text="x", min_similarity=2.0),
                                                           metadata=boss, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "min_similarity" in details
