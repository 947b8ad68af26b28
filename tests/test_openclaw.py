"""The `openclaw` profile (configuration only): a 0.7 vector / 0.3 text merge of absolute scores,
30-day decay with evergreen memories exempt, MMR over word-set Jaccard, a 0.35 floor on that score and
a 0.05 floor on calibrated relevance."""

from __future__ import annotations

import time

import numpy as np
import pytest
from teleo.v1 import memory_pb2 as pb

from teleo_server.auth import create_token
from teleo_server.domain import AccessLevel
from teleo_server.pipeline.finalize import jaccard_matrix
from teleo_server.pipeline.fusion import vector_text


def test_the_merge_is_seventy_thirty_over_absolute_scores():
    cos = np.array([0.8, 0.2, np.nan, -0.3])
    bm25 = np.array([0.0, 3.0, 1.0, np.nan])
    got = vector_text(cos, bm25, 0.7, 0.3, 4)
    want = [0.7 * 0.8, 0.7 * 0.2 + 0.3 * 0.75, 0.3 * 0.5, 0.0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(vector_text(cos, bm25, 7.0, 3.0, 4), want, rtol=1e-6)  # weights normalised


def test_jaccard_of_word_sets():
    m = jaccard_matrix(["The Cat sat", "the cat SAT!", "a dog", ""])
    assert m[0, 1] == 1.0 and m[0, 2] == 0.0 and m[3, 3] == 1.0 and m[0, 3] == 0.0
    assert jaccard_matrix(["a b c", "a b d"])[0, 1] == pytest.approx(2 / 4)


@pytest.fixture(scope="module")
def claw(api_server, stub):
    _, token = create_token(api_server.app.core.store, "claw", ["claw"], ["claw"], AccessLevel.INTERNAL, "claw")
    auth = [("authorization", f"Bearer {token}")]
    ids = {}

    def put(key: str, content: str, days_ago: float | None = None, evergreen: bool = False) -> None:
        # OpenClaw dates a note by a date in its source (memory/2025-11-27.md); undated ones never decay
        source = "" if days_ago is None else time.strftime("memory/%Y-%m-%d.md", time.gmtime(time.time() - days_ago * 86_400))
        memory = pb.MemoryInput(content=content, namespace="claw", source=source, evergreen=evergreen)
        ids[key] = stub.Store(pb.StoreRequest(memory=memory), metadata=auth, timeout=60).id

    put("lunch", "The team lunch is on Friday at noon in the cafeteria.")
    put("lunch_dup", "The team lunch is on Friday at noon in the big cafeteria.")
    put("tacos", "On Friday the cafeteria serves tacos for the team lunch crowd.")
    put("old_plan", "The on-call rotation schedule changes every Monday morning.", days_ago=120)
    put("new_plan", "The on-call rotation schedule changes every Monday at nine.", days_ago=1)
    put("old_rule", "The on-call rotation schedule is owned by the platform team.", days_ago=120, evergreen=True)
    put("undated", "The on-call rotation schedule is posted in the ops channel.")
    return auth, ids


def _run(stub, auth, text, **kw):
    events = list(stub.Retrieve(pb.RetrieveRequest(text=text, profile="openclaw", filters=pb.RetrieveFilters(namespaces=["claw"]), **kw),
                                metadata=auth, timeout=60))
    stages = [e.stage.stage for e in events if e.WhichOneof("event") == "stage"]
    return [e.result for e in events if e.WhichOneof("event") == "result"], stages, events[-1].summary


def test_openclaw_runs_as_configured_over_grpc(stub, claw):
    auth, ids = claw
    results, stages, summary = _run(stub, auth, "team lunch on Friday", top_k=3)
    assert stages == ["sparse_recall", "dense", "fusion", "finalize"] and summary.profile == "openclaw"
    assert results and all(r.score >= 0.35 for r in results)
    # Jaccard MMR: the near-duplicate of the best result is pushed below a different memory
    order = [r.memory.id for r in results]
    assert order[0] in (ids["lunch"], ids["lunch_dup"]) and order[1] == ids["tacos"]
    plain, _, _ = _run(stub, auth, "team lunch on Friday", top_k=3, overrides=pb.StageOverrides(mmr_lambda=1.0))
    assert {r.memory.id for r in plain[:2]} == {ids["lunch"], ids["lunch_dup"]}  # relevance alone keeps both on top


def test_openclaw_decays_old_memories_but_not_evergreen_ones(stub, claw):
    auth, ids = claw
    results, _, _ = _run(stub, auth, "on-call rotation schedule", top_k=6, overrides=pb.StageOverrides(mmr_lambda=1.0))
    score = {r.memory.id: r.score for r in results}
    assert ids["new_plan"] in score and ids["old_rule"] in score and ids["undated"] in score
    # 120 days at a 30-day half-life: 1/16 of its score, below the 0.35 floor
    assert ids["old_plan"] not in score
    assert score[ids["old_rule"]] >= 0.35
    undecayed, _, _ = _run(stub, auth, "on-call rotation schedule", top_k=6,
                           overrides=pb.StageOverrides(mmr_lambda=1.0, decay_half_life_days=0.0))
    assert ids["old_plan"] in {r.memory.id for r in undecayed}


def test_the_floor_removes_what_matches_nothing(stub, claw):
    auth, _ = claw
    results, _, _ = _run(stub, auth, "quantum chromodynamics lattice", top_k=6)
    assert results == []


def test_a_note_is_dated_by_a_date_in_its_source_or_metadata():
    from bench.harness import memories as syn
    from teleo_server.pipeline.finalize import dated

    assert dated(syn.memory("a", "x", source="memory/2025-11-27.md")) == 1764201600.0
    assert dated(syn.memory("b", "x", metadata={"day": "2024-02-29"})) == 1709164800.0
    assert np.isnan(dated(syn.memory("c", "x", source="notes.md")))
    assert np.isnan(dated(syn.memory("d", "x", source="2025-02-30 is no date")))


def test_a_snippet_is_cut_at_word_boundaries_within_its_span():
    from teleo_server.api.convert import snippet

    text = "alpha beta gamma delta " * 60
    got, start, end = snippet(text, (6, len(text)), limit=30)
    assert got == text[start:end] and start == 6 and len(got) <= 30 and not got.endswith(" ")
    assert text[end] == " " and got.split()[-1] in {"alpha", "beta", "gamma", "delta"}  # whole words
    assert snippet("short note", None) == ("short note", 0, 10)


def test_results_can_carry_the_matching_chunk_instead_of_the_whole_memory(stub, claw):
    auth, _ = claw
    filler = " ".join(f"Routine status line {i} about nothing in particular." for i in range(60))
    long_text = filler + " The backup generator is tested on the first Sunday of every month. " + filler
    mid = stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=long_text, namespace="claw")), metadata=auth, timeout=60).id
    events = list(stub.Retrieve(pb.RetrieveRequest(text="when is the backup generator tested", top_k=1, snippets=True,
                                                   omit_content=True, filters=pb.RetrieveFilters(namespaces=["claw"])),
                                metadata=auth, timeout=60))
    (r,) = [e.result for e in events if e.WhichOneof("event") == "result"]
    assert r.memory.id == mid and r.memory.input.content == "" and r.chunk_index >= 1
    assert 0 < len(r.snippet) <= 700 and "backup generator" in r.snippet
    assert r.snippet == long_text[r.snippet_start:r.snippet_end]


def test_the_relevance_floor_drops_what_the_score_floor_lets_through(stub, claw):
    auth, _ = claw
    for query in ("ops channel permissions", "cafeteria renovation budget"):  # words in common, no answer
        loose, _, _ = _run(stub, auth, query, top_k=6, overrides=pb.StageOverrides(min_relevance=0.0))
        assert loose and all(r.score >= 0.35 and r.relevance < 0.05 for r in loose)  # past OpenClaw's own floor
        kept, _, _ = _run(stub, auth, query, top_k=6)
        assert kept == []
    relevant, _, _ = _run(stub, auth, "when is the team lunch", top_k=6)
    assert relevant and all(r.relevance >= 0.05 for r in relevant)


def test_six_results_by_default_from_arms_of_four_times_as_many(stub, claw):
    auth, _ = claw
    for i in range(40):
        stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=f"Schedule note {i}: the rotation schedule for week {i}.",
                                                         namespace="claw")), metadata=auth, timeout=60)
    results, _, summary = _run(stub, auth, "rotation schedule week", overrides=pb.StageOverrides(min_relevance=0.0))
    assert len(results) == 6  # top_k 0: the profile's default
    arms = {s.stage: s for s in summary.stages}
    assert arms["sparse_recall"].candidates_out == 24 and arms["fusion"].candidates_in <= 48  # min(200, 6 x 4) per arm
    more, _, summary = _run(stub, auth, "rotation schedule week", top_k=10, overrides=pb.StageOverrides(min_relevance=0.0))
    assert len(more) == 10 and {s.stage: s for s in summary.stages}["sparse_recall"].candidates_out == 40
    teleo = list(stub.Retrieve(pb.RetrieveRequest(text="rotation schedule week", filters=pb.RetrieveFilters(namespaces=["claw"])),
                               metadata=auth, timeout=60))
    assert sum(e.WhichOneof("event") == "result" for e in teleo) == 10  # the default profile's default
