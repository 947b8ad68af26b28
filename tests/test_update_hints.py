"""Update hints: a Store names the earlier memories the stored one probably updates, through a real
server with the real embedding models; what counts as a change note; what is never named."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from teleo.v1 import memory_pb2 as pb

from teleo_server.pipeline.updates import reads_as_change


def _ts(day: str) -> Timestamp:
    t = Timestamp()
    t.FromDatetime(datetime.fromisoformat(day).replace(tzinfo=timezone.utc))
    return t


def _store(stub, auth, ns: str, content: str, day: str, links=()) -> pb.StoreResponse:
    memory = pb.MemoryInput(content=content, namespace=ns, event_time=_ts(day),
                            links=[pb.Link(target_id=t, type=pb.LINK_TYPE_SUPERSEDES) for t in links])
    return stub.Store(pb.StoreRequest(memory=memory), metadata=auth, timeout=60)


@pytest.mark.parametrize("text", [
    "We moved staging to us-east-2 in March.", "Dana now works from Lisbon.", "The API no longer accepts XML.",
    "Switched the build to Bazel.", "The timeout is 5 s (was 30 s).", "Correction: the launch is on May 2.",
    "Das Team trifft sich jetzt dienstags.", "Le serveur est désormais à Paris.", "El equipo ya no usa Jira.",
    "Kenji manages the Warsaw office. (Not Isabel as noted before.)", "Shipped the Ranger app v1.9.2.",
])
def test_change_notes_are_recognised(text):
    assert reads_as_change(text)


@pytest.mark.parametrize("text", ["The staging cluster runs in eu-west-1.", "Dana works from the Berlin office.",
                                  "Snowfall closed the northern pass.", "A known issue affects renewals."])
def test_plain_statements_are_not_change_notes(text):
    assert not reads_as_change(text)


def test_hints_name_only_earlier_memories_best_first(stub, auth):
    ns = "hints-time"
    berlin = _store(stub, auth, ns, "Dana works from the Berlin office.", "2024-01-10")
    _store(stub, auth, ns, "The cafeteria serves lentil soup on Fridays.", "2024-01-11")
    # written down later, but it happened before the Berlin note: Berlin is not what it updates
    lisbon = _store(stub, auth, ns, "Dana now works from the Lisbon office.", "2023-06-01")
    assert berlin.id not in {h.id for h in lisbon.possible_updates}
    porto = _store(stub, auth, ns, "Dana moved to the Porto office.", "2024-06-01")
    named = [h.id for h in porto.possible_updates]
    assert set(named) >= {berlin.id, lisbon.id} and len(named) <= 3
    sims = [h.similarity for h in porto.possible_updates]
    assert sims == sorted(sims, reverse=True) and all(s >= 0.4 for s in sims)
    assert all("lentil" not in h.content for h in porto.possible_updates)
    by_id = {h.id: h.content for h in porto.possible_updates}
    assert by_id[berlin.id] == "Dana works from the Berlin office."


def test_linked_and_superseded_memories_are_not_named_again(stub, auth):
    ns = "hints-links"
    old = _store(stub, auth, ns, "The payments service runs on Java 17.", "2024-01-01")
    linked = _store(stub, auth, ns, "The payments service was upgraded to Java 21.", "2024-03-01", links=[old.id])
    assert old.id not in {h.id for h in linked.possible_updates}
    later = _store(stub, auth, ns, "The payments service now runs on Kotlin 2.0.", "2024-09-01")
    named = {h.id for h in later.possible_updates}
    # the Java 17 fact is superseded already: the latest version of the fact is what is named
    assert linked.id in named and old.id not in named


def test_a_plain_statement_is_named_only_when_it_restates_a_fact(stub, auth):
    ns = "hints-plain"
    port = _store(stub, auth, ns, "The payments service listens on port 8443.", "2024-01-01")
    restated = _store(stub, auth, ns, "The payments service listens on port 9443.", "2024-02-01")
    assert [h.id for h in restated.possible_updates][:1] == [port.id]
    unrelated = _store(stub, auth, ns, "The football club plays its home games on Sunday mornings.", "2024-03-01")
    assert not unrelated.possible_updates


def test_a_hint_carries_at_most_500_characters_of_the_earlier_text(stub, auth):
    ns = "hints-long"
    long_text = " ".join(["The staging cluster runs in eu-west-1 and serves the nightly integration runs."] * 30)
    old = _store(stub, auth, ns, long_text, "2024-01-01")
    note = _store(stub, auth, ns, "We moved the staging cluster to us-east-2 now.", "2024-02-01")
    [hint] = [h for h in note.possible_updates if h.id == old.id]
    assert len(hint.content) == 500 and hint.content.endswith("…") and long_text.startswith(hint.content[:-1])


def test_a_memory_about_a_sibling_is_not_named(stub, auth):
    """A price change of the Kite Pro plan names the earlier Kite Pro price, never the Kite Team
    plan's (names sharing a word, neither holding the other: another member of the family), though
    their sentence vectors are close."""
    ns = "hints-siblings"
    pro = _store(stub, auth, ns, "The Kite Pro plan costs 12 dollars a month.", "2024-01-10")
    team = _store(stub, auth, ns, "The Kite Team plan costs 30 dollars a month.", "2024-01-11")
    change = _store(stub, auth, ns, "We raised the Kite Pro plan to 15 dollars a month.", "2024-06-01")
    named = [h.id for h in change.possible_updates]
    assert pro.id in named and team.id not in named
    # the same note about a plan of another name is still hinted at by the close vectors alone
    other = _store(stub, auth, ns, "We raised the price of the plan to 15 dollars a month.", "2024-06-02")
    assert team.id in {h.id for h in other.possible_updates}
