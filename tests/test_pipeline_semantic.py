"""Semantics with the real in-process models (MiniLM + splade-tiny): what each space can reach."""

from __future__ import annotations

import pytest

from teleo_server.embedding.repository import ModelFiles, default_model_dir
from teleo_server.pipeline import PipelineSettings, make_retriever
from bench.harness import memories as syn
from teleo_server.pipeline.types import Hit, Query

pytestmark = pytest.mark.skipif(bool(ModelFiles.in_dir(default_model_dir()).missing()),
                                reason="model repository not materialised (make models)")

MEMORIES = {
    "elderly": "Elderly participants improved their balance after twelve weeks of tai chi.",
    "pet": "The puppy chased a ball across the lawn all afternoon.",
    "deploy": "The canary release of the payments service was rolled back on Friday.",
    "bread": "Sourdough needs a long fermentation and a very hot oven.",
    "tax": "Quarterly VAT returns are due at the end of the month.",
    "moon": "Apollo 11 landed on the Moon in July 1969.",
}


@pytest.fixture(scope="module")
def engine():
    from teleo_server.embedding.engine import Engine

    return Engine(default_model_dir(), threads=1)


def _indexed(engine, docs: dict[str, str]):
    """A retriever of default settings over ``docs`` (id -> text), embedded by ``engine``."""
    r = make_retriever(PipelineSettings(), "numpy")
    for (mid, text), emb in zip(docs.items(), engine.embed(list(docs.values()), [False] * len(docs))):
        r.add(syn.memory(mid, text), emb)
    return r


@pytest.fixture(scope="module")
def retriever(engine):
    return _indexed(engine, MEMORIES)


def _top(retriever, engine, text: str, profile: str = "teleological", k: int = 3) -> list[Hit]:
    emb = engine.embed([text], [True])[0]
    q = Query(text=text, embedding=emb, principal=syn.admin(), top_k=k, profile=profile)
    return [e for e in retriever.retrieve(q) if isinstance(e, Hit)]


def test_reachable_only_through_splade_expansion(retriever, engine):
    query = "older adults"  # shares no token with the memory; SPLADE expands to 'elderly'
    assert "elderly" not in {h.memory.id for h in _top(retriever, engine, query, "single_space:E6")}
    splade = _top(retriever, engine, query, "single_space:E13")
    assert splade and splade[0].memory.id == "elderly"
    top = _top(retriever, engine, query)
    assert top[0].memory.id == "elderly" and "E13_splade" in top[0].found_by and "E6_lexical" not in top[0].found_by


def test_reachable_only_through_dense_similarity(retriever, engine):
    query = "young dog playing fetch outdoors"  # no token in common with the memory
    assert "pet" not in {h.memory.id for h in _top(retriever, engine, query, "single_space:E6")}
    dense = _top(retriever, engine, query, "single_space:E1")
    assert dense[0].memory.id == "pet"
    top = _top(retriever, engine, query)
    assert top[0].memory.id == "pet" and "E1_semantic" in top[0].found_by


def test_late_interaction_prefers_the_matching_memory(retriever, engine):
    hits = _top(retriever, engine, "When did astronauts first land on the Moon?", "single_space:E12")
    assert hits[0].memory.id == "moon"


def test_the_host_backend_holds_sentence_vectors_as_int8_unless_told(engine):
    """E1's rows default to int8 codes on the host backend; a configured layout is kept as given,
    and the same memory is found first either way."""
    import numpy as np

    sets = engine.embed(list(MEMORIES.values()), [False] * len(MEMORIES))
    q = engine.embed(["older adults practising a martial art for stability"], [True])[0]
    firsts = {}
    for values in ("auto", "float32", "float16"):
        settings = PipelineSettings() if values == "auto" else PipelineSettings(
            spaces={"E1_semantic": {"values": values}})
        r = make_retriever(settings, "numpy")
        for (mid, text), emb in zip(MEMORIES.items(), sets):
            r.add(syn.memory(mid, text), emb)
        index = r.spaces["E1_semantic"].index
        assert index.matrix.dtype == np.dtype("int8" if values == "auto" else values)
        query = Query(text="", embedding=q, principal=syn.admin(), top_k=3, profile="single_space:E1_semantic")
        firsts[values] = [e.memory.id for e in r.retrieve(query) if isinstance(e, Hit)][0]
    assert set(firsts.values()) == {"elderly"}


def _only_first(engine, docs: dict[str, str], question: str, space: str, answer: str) -> None:
    """``space`` alone ranks ``answer`` first: each other space that reads the question ranks the
    note called "echo" first."""
    r = _indexed(engine, docs)
    assert _top(r, engine, question, f"single_space:{space}")[0].memory.id == answer
    for other in {"E1_semantic", "E6_lexical", "E9_hdc", "E12_late", "E13_splade"} - {space}:
        assert _top(r, engine, question, f"single_space:{other}")[0].memory.id == "echo", other


def test_late_interaction_alone_finds_the_answer_the_other_spaces_miss(engine):
    """A question answered in one clause of a long note: every query token finds its match in that
    clause ("when" the time), which only the token-level MaxSim sees; the sentence vector, BM25,
    n-grams and SPLADE all prefer a short note that repeats the question's words."""
    docs = {
        "answer": "Notes from the ops sync: the office moves to the fourth floor in May, the coffee machine is "
                  "fixed, the nightly backup job runs at 02:00, and Sara takes over the on-call rota.",
        "topic": "Backups matter: every team should plan a backup strategy and test restores.",
        "echo": "Job board: run the nightly backup job, run the backup job, the nightly job runs on schedule.",
    }
    _only_first(engine, docs, "when does the nightly backup job run?", "E12_late", "answer")


def test_sentence_vectors_alone_find_the_paraphrase_the_other_spaces_miss(engine):
    """A paraphrase with no word in common: only the sentence vector ranks it above a note that
    shares the question's words in another sense."""
    docs = {
        "pet": MEMORIES["pet"],
        "echo": "Dog licence fees: owners of a young dog pay less; fetch the form from the outdoors office.",
        "tax": MEMORIES["tax"],
    }
    _only_first(engine, docs, "young dog playing fetch outdoors", "E1_semantic", "pet")


def test_learned_sparse_weights_alone_find_the_error_number_the_other_spaces_miss(engine):
    """A question of a common word and a number: SPLADE's learned weights count the number for more
    than the word and match its word pieces whole. The sentence vector and MaxSim see a nearly
    identical number (4013) in a note that says "error" three times, BM25 counts "error", the n-grams
    see the shared digits, and the spaces that read text structure find nothing to match."""
    docs = {
        "answer": "4012 means the licence has expired.",
        "echo": "Error 4013: error in the error handler.",
        "tax": MEMORIES["tax"],
    }
    _only_first(engine, docs, "error 4012", "E13_splade", "answer")
    r = _indexed(engine, docs)
    for space in ("E5", "E7", "E8", "E10", "E11"):
        assert [h.memory.id for h in _top(r, engine, "error 4012", f"single_space:{space}")][:1] != ["answer"], space


def test_notes_naming_sibling_products_are_two_facts_not_one_update(engine):
    """Near-identical notes about "Kite Pro" and "Kite Team" are not one fact noted twice: the newer
    one (about Pro) must not take the place of the note about the plan asked for."""
    from teleo_server.pipeline.conflicts import _siblings
    from teleo_server.pipeline.types import Outcome

    assert _siblings(["The Kite Pro plan now costs $14 per month.", "The Kite Team plan costs $24 a month."])[0, 1]
    assert not _siblings(["Cirrus Starter is capped at 5 seats now.", "The Cirrus Starter plan is capped at 10 seats."]).any()
    docs = {"team": "The Kite Team plan now costs $24 per user per month.",
            "pro": "The Kite Pro plan now costs $14 per month.",
            "bakery": MEMORIES["bread"]}
    day = 86_400.0
    sets = engine.embed(list(docs.values()), [False] * len(docs))
    question = "How much does the Kite Team plan cost?"
    emb = engine.embed([question], [True])[0]
    implied = {}
    for names in (True, False):
        r = make_retriever(PipelineSettings(implied_update_names=names), "numpy")
        for i, ((mid, text), e) in enumerate(zip(docs.items(), sets)):  # the note about Pro is the newest
            r.add(syn.memory(mid, text, event_time=1.7e9 + i * day), e)
        events = list(r.retrieve(Query(text=question, embedding=emb, principal=syn.admin(), top_k=3, profile="hipporag",
                                       now=1.7e9 + 10 * day)))
        implied[names] = [(c.id_a, c.id_b) for c in events[-1].conflicts if c.edge_type == "implied"]
        assert isinstance(events[-1], Outcome)
        if names:
            assert next(e.memory.id for e in events if isinstance(e, Hit)) == "team"
    assert implied[True] == [] and implied[False] == [("team", "pro")]
