"""Writes to one memory at the same time, through a real server: every acknowledged change is kept,
and the index follows the store (per-memory locks in ``core``, ``keyed_locks.py``)."""

from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest
from teleo.v1 import memory_pb2 as pb

from teleo_server.client import Client, ClientError, Link
from teleo_server.keyed_locks import KeyedLocks

pytestmark = pytest.mark.integration

# about 18 KB in 240 distinct sentences: many chunks, so its embedding takes a while (2 s on a
# 2-core CPU), long enough for the other writes to happen during it
LONG = " ".join(f"Runbook step {i}: rotate the quokka-{i} credentials and page the harbour desk." for i in range(240))


@pytest.fixture(scope="module")
def client(api_server):
    with Client(api_server.address, token=api_server.token) as c:
        yield c


def _in_thread(fn, *args, **kwargs) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run():
        try:
            out["value"] = fn(*args, **kwargs)
        except Exception as exc:  # reported by the test
            out["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    return t, out


def test_concurrent_supersedes_each_keep_their_link(client):
    ns = "cw-links"
    new = client.store("The rollout calendar lives in the ops wiki now.", namespace=ns)
    olds = [client.store(f"The rollout calendar was kept in spreadsheet {i}.", namespace=ns).id for i in range(16)]
    client.update(new.id, links=[Link(olds[0], "relates_to")])
    runs = [_in_thread(client.supersede, new.id, old) for old in olds]
    for t, _ in runs:
        t.join(60)
    assert all("error" not in out for _, out in runs), [out.get("error") for _, out in runs]
    (stored,) = client.get(new.id)
    links = [(lk.target_id, lk.type) for lk in stored.links]
    assert links[0] == (olds[0], "relates_to")
    assert sorted(links[1:]) == sorted((old, "supersedes") for old in olds)  # each once, none lost


def test_a_text_being_embedded_does_not_undo_updates_that_finish_meanwhile(client):
    ns = "cw-fields"
    m = client.store("Harbour desk phone: extension 4411.", namespace=ns, importance=0.2)
    slow, out = _in_thread(client.update, m.id, content=LONG)
    time.sleep(0.3)  # the new text is being embedded
    client.update(m.id, importance=0.9)
    client.update(m.id, metadata={"team": "harbour"})
    client.supersede(m.id, client.store("Harbour desk phone: extension 4410.", namespace=ns).id)
    slow.join(120)
    assert "error" not in out, out.get("error")
    (stored,) = client.get(m.id)
    assert stored.content == LONG and stored.importance == pytest.approx(0.9)
    assert stored.metadata == {"team": "harbour"} and [lk.type for lk in stored.links] == ["supersedes"]
    # the index holds the version the store has: found by its new text, not by its old one
    found = client.search("rotate the quokka-17 credentials", filters={"namespaces": [ns]}, top_k=3)
    assert [r.memory.id for r in found.results][:1] == [m.id]
    assert found.results[0].memory.importance == pytest.approx(0.9)
    gone = client.search("Harbour desk phone extension 4411", filters={"namespaces": [ns]}, top_k=5)
    assert m.id not in [r.memory.id for r in gone.results if r.memory.content != LONG]


def test_a_memory_deleted_while_an_update_embeds_stays_deleted(client):
    ns = "cw-delete"
    m = client.store("Loading dock B closes at 18:00.", namespace=ns)
    slow, out = _in_thread(client.update, m.id, content=LONG.replace("quokka", "wombat"))
    time.sleep(0.3)
    assert client.delete(m.id) == 1
    slow.join(120)
    assert isinstance(out.get("error"), ClientError) and out["error"].code == "NOT_FOUND"
    with pytest.raises(ClientError) as exc:
        client.get(m.id)
    assert exc.value.code == "NOT_FOUND"
    found = client.search("rotate the wombat-3 credentials", filters={"namespaces": [ns]}, top_k=5)
    assert m.id not in [r.memory.id for r in found.results]


def test_add_links_are_checked_and_added_once(stub, auth, client):
    ns = "cw-add"
    a = client.store("The VPN gateway moved to rack 12.", namespace=ns)
    b = client.store("The VPN gateway sits in rack 7.", namespace=ns)
    elsewhere = client.store("The VPN gateway sits in rack 7.", namespace="cw-add-other")
    sup = pb.Link(target_id=b.id, type=pb.LINK_TYPE_SUPERSEDES)
    got = stub.Update(pb.UpdateRequest(id=a.id, add_links=[sup, sup]), metadata=auth)
    again = stub.Update(pb.UpdateRequest(id=a.id, add_links=[sup, pb.Link(target_id=b.id, type=pb.LINK_TYPE_RELATES_TO)]),
                        metadata=auth)
    assert [(lk.target_id, lk.type) for lk in got.memory.input.links] == [(b.id, pb.LINK_TYPE_SUPERSEDES)]
    assert [(lk.target_id, lk.type) for lk in again.memory.input.links] == [
        (b.id, pb.LINK_TYPE_SUPERSEDES), (b.id, pb.LINK_TYPE_RELATES_TO)]
    bad = [
        (pb.UpdateRequest(id=a.id), "fields"),
        (pb.UpdateRequest(id=a.id, add_links=[pb.Link(target_id=b.id)]), "add_links[0].type"),
        (pb.UpdateRequest(id=a.id, add_links=[pb.Link(target_id="", type=pb.LINK_TYPE_CAUSES)]), "add_links[0]"),
        (pb.UpdateRequest(id=a.id, add_links=[sup, pb.Link(target_id=elsewhere.id, type=pb.LINK_TYPE_SUPERSEDES)]),
         "add_links[1].target_id"),
        # a replaced list of links is named as such
        (pb.UpdateRequest(id=a.id, fields=["links"], memory=pb.MemoryInput(links=[
            pb.Link(target_id=elsewhere.id, type=pb.LINK_TYPE_CAUSES)])), "memory.links[0].target_id"),
    ]
    for req, field in bad:
        with pytest.raises(grpc.RpcError) as exc:
            stub.Update(req, metadata=auth)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, req
        assert field in exc.value.details(), (field, exc.value.details())
    (stored,) = client.get(a.id)
    assert len(stored.links) == 2  # the refused updates changed nothing


def test_keyed_locks_serialise_a_key_and_let_others_run():
    async def run():
        locks = KeyedLocks()
        order: list[str] = []

        async def writer(name: str, keys: list[str], hold: float):
            async with locks.hold(keys):
                order.append(f"{name}+")
                await asyncio.sleep(hold)
                order.append(f"{name}-")

        first = asyncio.create_task(writer("a", ["m1", "m2"], 0.05))
        await asyncio.sleep(0)
        # b waits for a (m2); c shares no key with a and runs at once; d waits, then is cancelled
        b = asyncio.create_task(writer("b", ["m3", "m2"], 0.0))
        c = asyncio.create_task(writer("c", ["m4"], 0.0))
        d = asyncio.create_task(writer("d", ["m1"], 0.0))
        await asyncio.sleep(0.01)
        held_meanwhile = len(locks)
        d.cancel()
        await asyncio.gather(first, b, c, return_exceptions=True)
        return order, held_meanwhile, len(locks), d.cancelled()

    order, held_meanwhile, held_after, cancelled = asyncio.run(run())
    assert order.index("c+") < order.index("a-") < order.index("b+")
    assert "d+" not in order and cancelled
    assert held_meanwhile == 3 and held_after == 0  # m1 and m2 (a holds them, b and d wait) and m3 (b's next)


def test_a_memory_whose_link_target_was_deleted_can_still_be_updated(client):
    ns = "cw-dangling"
    old = client.store("The status page is hosted on Netlify.", namespace=ns)
    new = client.store("The status page moved to Cloudflare Pages.", namespace=ns)
    client.supersede(new.id, old.id)
    assert client.delete(old.id) == 1
    # its own links are not checked again; a new one still is
    got = client.update(new.id, importance=0.8).memory
    assert got.importance == pytest.approx(0.8) and [lk.target_id for lk in got.links] == [old.id]
    third = client.store("Status page incidents are posted by the on-call engineer.", namespace=ns)
    linked = client.update(new.id, add_links=[Link(third.id, "relates_to")]).memory
    assert [lk.target_id for lk in linked.links] == [old.id, third.id]
    with pytest.raises(ClientError) as exc:
        client.update(new.id, add_links=[Link(old.id, "relates_to")])  # a new link to what is gone
    assert exc.value.code == "INVALID_ARGUMENT"
