"""The ``hipporag`` profile over gRPC, on a small corpus with known answers: the router, a memory
reachable only through the graph, supersession and the bi-temporal views, contradictions resolved
each way and left unresolved, circuit breakers, the result cache, bounded retries and the feedback
prior."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import grpc
import numpy as np
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc

from teleo_server.auth import create_token
from teleo_server.domain import AccessLevel
from teleo_server.pipeline import strategies as strategies_mod
from teleo_server.pipeline.finalize import feedback_prior
from teleo_server.pipeline.resilience import Breakers
from teleo_server.pipeline.route import classify
from tests._server import InThreadServer

NS = "hippo"


def _ts(day: str, hour: int = 0) -> Timestamp:
    t = Timestamp()
    t.FromDatetime(datetime.fromisoformat(day).replace(hour=hour, tzinfo=timezone.utc))
    return t


DISTRACTORS = [
    "The billing team meets on Thursdays to review open invoices.",
    "Outage reports go to the public status page within ten minutes.",
    "Marta prefers green tea to coffee in the afternoon.",
    "The new espresso machine on the third floor needs descaling monthly.",
    "Our mobile app supports dark mode since version 4.2.",
    "The design review for the checkout page is on Wednesday.",
    "Invoices above five thousand euros need a second approval.",
    "The football club plays its home games on Sunday mornings.",
    "Rafael is learning Japanese with an evening course.",
    "The parking garage closes at eleven at night.",
    "Quarterly taxes are filed by the finance team in April.",
    "The hiking trip to the Dolomites was postponed because of snow.",
    "Our support inbox receives about three hundred emails a day.",
    "The search page loads results in under two hundred milliseconds.",
    "The library on Elm Street has a new reading room.",
    "The marketing site is built with a static site generator.",
]


@pytest.fixture(scope="module")
def hippo(tmp_path_factory):
    from teleo_server.config import Settings

    root = tmp_path_factory.mktemp("hippo")
    # short strategy lists, so what only the graph can reach shows; quick breaker resets
    settings = Settings(port=0, data_dir=root / "data", dev_token_file=root / "token", log_format="json",
                        metrics={"port": 0}, pipeline={"strategy_candidates": 2, "breaker_reset_s": 1.0})
    srv = InThreadServer.start(settings)
    with grpc.insecure_channel(srv.address) as ch:
        stub = memory_pb2_grpc.MemoryServiceStub(ch)
        auth = [("authorization", f"Bearer {srv.token}")]
        ids: dict[str, str] = {}

        def put(key: str, content: str, day: str | None = None, confidence: float = 1.0,
                links: tuple[tuple[str, int], ...] = (), hour: int = 0) -> None:
            m = pb.MemoryInput(content=content, namespace=NS, confidence=confidence,
                               links=[pb.Link(target_id=ids[t], type=k) for t, k in links])
            if day:
                m.event_time.CopyFrom(_ts(day, hour))
            ids[key] = stub.Store(pb.StoreRequest(memory=m), metadata=auth, timeout=60).id

        for i, text in enumerate(DISTRACTORS):
            put(f"d{i}", text)
        put("outage", "The billing outage in March was caused by a stale cache in the Redis cluster.", "2026-03-03")
        put("runbook", "Runbook: drain the nodes, restore the snapshot, then reopen traffic.", "2026-03-04",
            links=(("outage", pb.LINK_TYPE_RELATES_TO),))
        put("staging_old", "The staging cluster runs in eu-west-1.", "2026-01-10")
        stored_between = time.time()
        time.sleep(0.05)
        put("staging_new", "We moved the staging cluster to us-east-2 in March.", "2026-03-14",
            links=(("staging_old", pb.LINK_TYPE_SUPERSEDES),))
        put("price_old", "The Pro plan costs 20 dollars per month.", "2026-01-05", confidence=0.9)
        put("price_new", "The Pro plan now costs 25 dollars per month.", "2026-02-05", confidence=0.9,
            links=(("price_old", pb.LINK_TYPE_CONTRADICTS),))
        put("wifi_weekly", "The office wifi password rotates every week.", "2026-02-01", confidence=0.6)
        put("wifi_monthly", "The office wifi password rotates every month.", "2026-02-01", confidence=0.95,
            links=(("wifi_weekly", pb.LINK_TYPE_CONTRADICTS),))
        put("freeze_fri", "The deploy freeze starts on Friday evening.", "2026-01-20", confidence=0.95)
        put("freeze_mon", "The deploy freeze starts on Monday morning.", "2026-02-20", confidence=0.5,
            links=(("freeze_fri", pb.LINK_TYPE_CONTRADICTS),))
        put("offsite", "The quarterly offsite will be held in Porto.", "2026-05-10", hour=10)
        # an update written without a link
        put("seats_old", "The Cirrus Starter plan is capped at 10 seats.", "2026-01-08")
        put("seats_new", "Cirrus Starter is capped at 5 seats now.", "2026-02-08")
        yield srv, stub, auth, ids, stored_between
    srv.stop()


def _ask(stub, auth, text: str, **kw):
    kw.setdefault("profile", "hipporag")
    kw.setdefault("filters", pb.RetrieveFilters(namespaces=[NS]))
    events = list(stub.Retrieve(pb.RetrieveRequest(text=text, **kw), metadata=auth, timeout=60))
    results = [e.result for e in events if e.WhichOneof("event") == "result"]
    stages = [e.stage for e in events if e.WhichOneof("event") == "stage"]
    return results, stages, events[-1].summary


def _ids(results) -> list[str]:
    return [r.memory.id for r in results]


# ---- router -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, route", [
    ("hello!", "skip"), ("Thanks a lot", "skip"), ("who are you?", "skip"), ("  ", "skip"),
    ("why did the billing outage happen", "multi_hop"), ("what led to the migration", "multi_hop"),
    ("how is the Redis cluster related to Project Halcyon", "multi_hop"),
    ("tell me everything about the staging cluster", "exploratory"), ("history of the Pro plan price", "exploratory"),
    ("which region is staging in", "simple"), ("hello, which region is staging in?", "simple"),
])
def test_router_routes(text, route):
    assert classify(text)[0] == route
    assert (classify(text)[1] == "no_retrieval_needed") == (route == "skip")


def test_small_talk_skips_retrieval(hippo):
    _, stub, auth, _, _ = hippo
    results, stages, summary = _ask(stub, auth, "hello there!")
    assert results == [] and summary.route == "skip" and summary.skip_reason == "no_retrieval_needed"
    assert stages[0].stage == "route" and "route=skip" in stages[0].detail


# ---- the memory graph ---------------------------------------------------------------------------

def test_a_memory_reachable_only_through_the_graph(hippo):
    _, stub, auth, ids, _ = hippo
    results, stages, summary = _ask(stub, auth, "what caused the billing outage in March?", top_k=10)
    assert summary.route == "multi_hop"
    by_id = {r.memory.id: r for r in results}
    assert ids["outage"] in by_id and ids["runbook"] in by_id
    # the runbook shares no words with the question: only its link to the outage brings it
    assert list(by_id[ids["runbook"]].provenance.strategies) == ["graph"]
    assert "vector" in by_id[ids["outage"]].provenance.strategies
    strat = next(s for s in stages if s.stage == "strategies")
    assert "graph=" in strat.detail and "iterations=" in strat.detail
    # without the graph (another profile), the runbook is not found
    plain, _, _ = _ask(stub, auth, "what caused the billing outage in March?", top_k=3, profile="hybrid")
    assert ids["runbook"] not in _ids(plain)


def test_provenance_of_every_result(hippo):
    _, stub, auth, ids, _ = hippo
    results, _, summary = _ask(stub, auth, "what caused the billing outage in March?", top_k=5)
    assert results and 0.0 <= summary.retrieval_confidence <= 1.0
    top = next(r for r in results if r.memory.id == ids["outage"])
    p = top.provenance
    assert p.citation == f"{NS}/2026-03-03 (memory {ids['outage'][:8]}\u2026)"
    assert list(p.validation_passed) == ["access", "temporal", "confidence", "relevance"]
    assert p.confidence == pytest.approx(1.0) and 0.0 < p.fused_score <= 1.0


# ---- supersession and bi-temporal views ---------------------------------------------------------

def test_superseded_fact_is_hidden_unless_historical(hippo):
    _, stub, auth, ids, _ = hippo
    results, _, summary = _ask(stub, auth, "which region is the staging cluster in?", top_k=5)
    got = _ids(results)
    assert ids["staging_new"] in got and ids["staging_old"] not in got
    pairs = [(c.id_a, c.id_b, c.edge_type, c.resolution, c.winner) for c in summary.conflicts]
    assert (ids["staging_old"], ids["staging_new"], "supersedes", "supersedes", ids["staging_new"]) in pairs
    hist, _, _ = _ask(stub, auth, "which region is the staging cluster in?", top_k=5, include_historical=True)
    assert {ids["staging_new"], ids["staging_old"]} <= set(_ids(hist))
    # other profiles read no links: the old fact is still there
    tele, _, _ = _ask(stub, auth, "which region is the staging cluster in?", top_k=5, profile="teleological")
    assert ids["staging_old"] in _ids(tele)


def test_as_of_event_sees_what_was_true_then(hippo):
    _, stub, auth, ids, _ = hippo
    results, _, summary = _ask(stub, auth, "which region is the staging cluster in?", top_k=5,
                               as_of_event=_ts("2026-02-01"))
    got = _ids(results)
    assert ids["staging_old"] in got and ids["staging_new"] not in got
    assert not [c for c in summary.conflicts if c.edge_type == "supersedes"]


def test_as_of_ingestion_sees_what_had_been_stored(hippo):
    _, stub, auth, ids, stored_between = hippo
    moment = Timestamp()
    moment.FromNanoseconds(int(stored_between * 1e9))
    results, _, _ = _ask(stub, auth, "which region is the staging cluster in?", top_k=5, as_of_ingestion=moment)
    got = _ids(results)
    assert ids["staging_old"] in got and ids["staging_new"] not in got and ids["offsite"] not in got


def test_an_update_without_a_link_is_read_as_one(hippo):
    """Two near-identical notes of one fact, the newer first; both stay, the pair is reported."""
    _, stub, auth, ids, _ = hippo
    results, _, summary = _ask(stub, auth, "How many seats does the Cirrus Starter plan allow?", top_k=5)
    got = _ids(results)
    assert got[0] == ids["seats_new"] and ids["seats_old"] in got
    pair = next(c for c in summary.conflicts if c.edge_type == "implied")
    assert (pair.id_a, pair.id_b, pair.resolution, pair.winner) == (ids["seats_old"], ids["seats_new"], "recency",
                                                                    ids["seats_new"])
    # as of a moment before the update, the older note is the answer
    before, _, summary = _ask(stub, auth, "How many seats does the Cirrus Starter plan allow?", top_k=5,
                              as_of_event=_ts("2026-02-01"))
    assert _ids(before)[0] == ids["seats_old"] and ids["seats_new"] not in _ids(before)
    assert not [c for c in summary.conflicts if c.edge_type == "implied"]


# ---- contradictions -----------------------------------------------------------------------------

@pytest.mark.parametrize("question, loser, winner, resolution", [
    ("how much does the Pro plan cost per month?", "price_old", "price_new", "recency"),
    # the winner matches better and is met first: its loser must still be hidden
    ("what does the Pro plan now cost per month?", "price_old", "price_new", "recency"),
    ("the Pro plan costs 20 dollars per month", "price_old", "price_new", "recency"),
    ("how often does the office wifi password rotate?", "wifi_weekly", "wifi_monthly", "confidence"),
])
def test_contradiction_resolved(hippo, question, loser, winner, resolution):
    _, stub, auth, ids, _ = hippo
    results, _, summary = _ask(stub, auth, question, top_k=5)
    got = _ids(results)
    assert ids[winner] in got and ids[loser] not in got
    pair = next(c for c in summary.conflicts if ids[loser] in (c.id_a, c.id_b))
    assert pair.edge_type == "contradicts" and pair.resolution == resolution and pair.winner == ids[winner]
    hist, _, _ = _ask(stub, auth, question, top_k=5, include_historical=True)
    assert {ids[winner], ids[loser]} <= set(_ids(hist))


def test_contradiction_left_unresolved_keeps_both(hippo):
    _, stub, auth, ids, _ = hippo
    results, _, summary = _ask(stub, auth, "when does the deploy freeze start?", top_k=5)
    by_id = {r.memory.id: r for r in results}
    assert ids["freeze_fri"] in by_id and ids["freeze_mon"] in by_id
    pair = next(c for c in summary.conflicts if ids["freeze_fri"] in (c.id_a, c.id_b))
    assert pair.resolution == "unresolved" and pair.winner == ""
    assert list(by_id[ids["freeze_fri"]].provenance.conflicts_with) == [ids["freeze_mon"]]
    assert list(by_id[ids["freeze_mon"]].provenance.conflicts_with) == [ids["freeze_fri"]]


# ---- circuit breakers ---------------------------------------------------------------------------

def test_a_failing_strategy_trips_its_breaker_while_the_others_answer(hippo, monkeypatch):
    srv, stub, auth, ids, _ = hippo
    retriever = srv.app.core.retriever
    retriever.breakers = Breakers(threshold=3, reset_s=1.0)
    calls = {"n": 0}

    def broken(state, seeds):
        calls["n"] += 1
        raise RuntimeError("graph store unreachable")

    original = strategies_mod._STRATEGIES["graph"]
    monkeypatch.setitem(strategies_mod._STRATEGIES, "graph", strategies_mod.Strategy("graph", "graph", broken, True))
    for i in range(3):
        results, stages, summary = _ask(stub, auth, f"which region is the staging cluster in? ({i})", top_k=3)
        assert results and summary.degraded and "graph" in summary.degraded_reason
    assert retriever.breaker_states()["graph"] == "open" and calls["n"] == 3
    results, stages, summary = _ask(stub, auth, "which region is the staging cluster in? (open)", top_k=3)
    assert calls["n"] == 3  # skipped while open
    assert results and "circuit open" in next(s for s in stages if s.stage == "strategies").detail
    # the breaker is visible to operators
    assert srv.app.metrics.registry.get_sample_value("teleo_breaker_open", {"name": "graph"}) == 1.0
    # after reset_s one call goes through; a success closes the breaker
    monkeypatch.setitem(strategies_mod._STRATEGIES, "graph", original)
    time.sleep(1.1)
    _, _, summary = _ask(stub, auth, "which region is the staging cluster in? (healed)", top_k=3)
    assert not summary.degraded and retriever.breaker_states()["graph"] == "closed"


def test_every_strategy_failing_is_unavailable(hippo, monkeypatch):
    srv, stub, auth, _, _ = hippo
    srv.app.core.retriever.breakers = Breakers(threshold=5, reset_s=1.0)

    def broken(state, seeds):
        raise RuntimeError("down")

    for name, st in list(strategies_mod._STRATEGIES.items()):
        monkeypatch.setitem(strategies_mod._STRATEGIES, name, strategies_mod.Strategy(name, st.role, broken, st.seeded))
    with pytest.raises(grpc.RpcError) as err:
        _ask(stub, auth, "which region is the staging cluster in? (all down)")
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "every retrieval strategy failed" in err.value.details()
    srv.app.core.retriever.breakers = Breakers(threshold=5, reset_s=1.0)


def test_when_every_strategy_is_late_the_first_answer_is_used(hippo, monkeypatch):
    srv, stub, auth, ids, _ = hippo
    srv.app.core.retriever.breakers = Breakers(threshold=5, reset_s=1.0)
    for name in ("vector", "bm25", "splade"):
        st = strategies_mod._STRATEGIES[name]

        def slow(state, seeds, st=st):
            time.sleep(0.45)  # past the 300 / 200 / 200 ms limits
            return st.run(state, seeds)

        monkeypatch.setitem(strategies_mod._STRATEGIES, name, strategies_mod.Strategy(name, st.role, slow, st.seeded))
    results, _, summary = _ask(stub, auth, "which region is the staging cluster in? (slow)", top_k=3)
    assert ids["staging_new"] in _ids(results)
    assert summary.degraded and "answered late" in summary.degraded_reason


def test_with_every_breaker_open_the_query_is_their_trial(hippo):
    srv, stub, auth, ids, _ = hippo
    breakers = Breakers(threshold=1, reset_s=3600.0)  # open, and not due to retry for an hour
    for name in ("vector", "bm25", "splade", "graph"):
        breakers.get(name).failure("earlier outage")
    srv.app.core.retriever.breakers = breakers
    results, _, summary = _ask(stub, auth, "which region is the staging cluster in? (trial)", top_k=3)
    assert ids["staging_new"] in _ids(results)
    assert breakers.states()["vector"] == "closed" and breakers.states()["bm25"] == "closed"
    srv.app.core.retriever.breakers = Breakers(threshold=5, reset_s=1.0)


# ---- result cache -------------------------------------------------------------------------------

def test_cache_hit_and_its_invalidation_by_a_write(hippo):
    srv, stub, auth, ids, _ = hippo
    q = "where will the quarterly offsite be held?"
    first, _, s1 = _ask(stub, auth, q, top_k=3)
    second, stages, s2 = _ask(stub, auth, q, top_k=3)
    assert s1.skip_reason == "" and s2.route == "skip" and s2.skip_reason == "cache_hit"
    assert _ids(first) == _ids(second) and [s.stage for s in stages] == ["cache"]
    assert s2.request_id and s2.request_id != s1.request_id
    # another identity never gets this caller's entry
    _, token = create_token(srv.app.core.store, "other-agent", [NS], [NS], AccessLevel.RESTRICTED, NS)
    other = [("authorization", f"Bearer {token}")]
    _, _, s3 = _ask(stub, other, q, top_k=3)
    assert s3.skip_reason != "cache_hit"
    # a write elsewhere, which the caller cannot see, keeps the entry
    _, narrow = create_token(srv.app.core.store, "narrow", [NS], [NS, "elsewhere"], AccessLevel.RESTRICTED, NS)
    _, _, s4 = _ask(stub, [("authorization", f"Bearer {narrow}")], q, top_k=3)
    stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="Porto is also where the elsewhere team meets.",
                                                     namespace="elsewhere")),
               metadata=[("authorization", f"Bearer {narrow}")], timeout=60)
    _, _, s5 = _ask(stub, [("authorization", f"Bearer {narrow}")], q, top_k=3)
    assert s5.skip_reason == "cache_hit"
    # a write the caller can see drops it
    stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="The offsite venue in Porto is by the river.", namespace=NS)),
               metadata=auth, timeout=60)
    third, _, s6 = _ask(stub, auth, q, top_k=3)
    assert s6.skip_reason != "cache_hit"
    assert srv.app.core.results.hits >= 2


# ---- bounded retries ----------------------------------------------------------------------------

def test_an_empty_answer_is_retried_with_a_wider_window(hippo):
    _, stub, auth, ids, _ = hippo
    window = pb.TimeRange(start=_ts("2026-05-10", 0), end=_ts("2026-05-10", 8))  # the offsite note is at 10:00
    results, stages, summary = _ask(stub, auth, "where is the quarterly offsite?", top_k=3,
                                    filters=pb.RetrieveFilters(namespaces=[NS], event_time=window))
    assert summary.retry_count == 1 and ids["offsite"] in _ids(results)
    assert any(s.detail.startswith("attempt 2: ") for s in stages)


def test_retries_are_bounded_and_end_on_a_broader_route(hippo):
    _, stub, auth, _, _ = hippo
    window = pb.TimeRange(start=_ts("2001-01-01"), end=_ts("2001-01-02"))
    results, stages, summary = _ask(stub, auth, "which region is staging in?", top_k=3,
                                    filters=pb.RetrieveFilters(namespaces=[NS], event_time=window))
    assert results == [] and summary.retry_count == 2
    assert summary.route == "multi_hop"  # the third attempt took the next broader route
    assert sum(s.stage == "route" for s in stages) == 3


def test_routes_and_retries_are_counted(hippo):
    srv, stub, auth, _, _ = hippo
    registry = srv.app.metrics.registry

    def value(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    skips, retries = value("teleo_retrieve_routes_total", profile="hipporag", route="skip"), value("teleo_retrieve_retries_total", profile="hipporag")
    _ask(stub, auth, "thanks!")
    window = pb.TimeRange(start=_ts("2001-01-01"), end=_ts("2001-01-02"))
    _ask(stub, auth, "which region is staging in, counted?", filters=pb.RetrieveFilters(namespaces=[NS], event_time=window))
    assert value("teleo_retrieve_routes_total", profile="hipporag", route="skip") == skips + 1
    assert value("teleo_retrieve_retries_total", profile="hipporag") == retries + 2


# ---- feedback prior -----------------------------------------------------------------------------

def test_feedback_prior_formula():
    got = feedback_prior(np.array([[0, 0, 0, 0], [3, 0, 0, 0], [0, 3, 0, 0], [1, 1, 0, 0], [0, 0, 2, 0]]), 0.2)
    np.testing.assert_allclose(got, [1.0, 1.12, 0.88, 1.0, 1 + 0.2 * 1 / 3])


def test_helpful_feedback_raises_and_misleading_lowers_a_memory(hippo):
    _, stub, auth, _, _ = hippo
    ids = {}
    for key, text in (("a", "Team lunch is at noon on Fridays in the cafeteria."),
                      ("b", "Team lunch is at noon on Fridays in the canteen.")):
        ids[key] = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=text, namespace=NS)), metadata=auth, timeout=60).id
    q = "when is the team lunch on Fridays?"
    before, _, _ = _ask(stub, auth, q, top_k=5)
    order = [i for i in _ids(before) if i in ids.values()]
    assert len(order) == 2
    up, down = order[1], order[0]
    for _ in range(3):
        stub.Feedback(pb.FeedbackRequest(id=up, used=True, helpful=True, sufficient=True), metadata=auth, timeout=30)
        stub.Feedback(pb.FeedbackRequest(id=down, used=True, helpful=False, sufficient=False), metadata=auth, timeout=30)
    after, _, summary = _ask(stub, auth, q, top_k=5)
    assert summary.skip_reason != "cache_hit"  # feedback is a write the caller sees
    assert [i for i in _ids(after) if i in ids.values()] == [up, down]
    m = stub.Get(pb.GetRequest(ids=[up]), metadata=auth, timeout=30).memories[0]
    assert (m.helpful_count, m.sufficient_count, m.insufficient_count) == (3, 3, 0)


def test_a_citation_survives_a_time_no_calendar_holds():
    from teleo_server.pipeline.retriever import citation

    assert citation("ops", 1.7735e9, "1f5a2b3c9d") == "ops/2026-03-14 (memory 1f5a2b3c\u2026)"
    assert citation("ops", 1e12, "1f5a2b3c9d") == "ops/undated (memory 1f5a2b3c\u2026)"
    assert citation("ops", 0.0, "abc") == "ops/undated (memory abc\u2026)"
