"""The perspectives made from text structure: E5 causal, E7 code, E10 intent, E11 entity, the query
analyzer, the perspectives recall and search matrices. Each space is shown finding, on a small
corpus, an answer that the lexical spaces rank below a distractor or do not find at all."""

from __future__ import annotations

import numpy as np
import pytest
from teleo.v1 import memory_pb2 as pb

from bench.harness import memories as syn
from teleo_server.domain import ChunkEmbedding, EmbeddingSet, Link, LinkType
from teleo_server.errors import InvalidArgument
from teleo_server.extract import causal, code, intent
from teleo_server.pipeline import PipelineSettings, make_retriever
from teleo_server.pipeline.analyze import classify
from teleo_server.pipeline.types import Filters, Hit, Overrides, Query, StageReport
from teleo_server.pipeline_settings import DEFAULT_MATRICES
from teleo_server.spaces.registry import space_classes

ADMIN = syn.admin()


def _retriever(docs: dict[str, str], links: dict[str, list[Link]] | None = None, namespaces: dict[str, str] | None = None):
    r = make_retriever(PipelineSettings(), "numpy")
    for mid, text in docs.items():
        kw = {"links": links[mid]} if links and mid in links else {}
        r.add(syn.memory(mid, text, namespace=(namespaces or {}).get(mid, "ns"), **kw), syn.embedding())
    return r


def _run(r, text: str, profile: str = "teleological", principal=ADMIN, **kw):
    q = Query(text=text, embedding=None, principal=principal, top_k=5, profile=profile, include_breakdown=True, **kw)
    events = list(r.retrieve(q))
    hits = [e.memory.id for e in events if isinstance(e, Hit)]
    stages = {e.stage: e.detail for e in events if isinstance(e, StageReport)}
    return hits, stages


# the spaces that read a question's text without a model (the corpora here carry no learned vectors)
TEXT_SPACES = ("E5", "E6", "E7", "E9", "E10", "E11")


def _only_first(r, text: str, space: str, answer: str) -> None:
    """``space`` alone ranks ``answer`` first among the spaces that read the text."""
    firsts = {s: _run(r, text, f"single_space:{s}")[0][:1] for s in TEXT_SPACES}
    assert firsts[space] == [answer], firsts
    assert [s for s, first in firsts.items() if first == [answer]] == [space], firsts


def test_all_thirteen_spaces_are_registered():
    names = list(space_classes())
    assert [n.split("_")[0] for n in names] == [f"E{i}" for i in range(1, 14)]


# ---- E5 causal ----------------------------------------------------------------------------------
CAUSAL = {
    "cause": "The deploy failed because the disk on the build host was full.",
    "echo": "Deploy failed. The deploy failed, and the deploy failed again: deploy failed.",
    "spike": "Traffic spiked at noon on Black Friday.",
    "oom": "The checkout service ran out of memory.",
}


def test_causal_spans_and_question_direction():
    (pair,) = causal.pairs(CAUSAL["cause"])
    assert pair.cause == "the disk on the build host was full" and pair.effect == "The deploy failed"
    assert causal.pairs("Heavy rain fell. As a result, the road was closed.")[0].cause == "Heavy rain fell"
    assert causal.direction("why did the deploy fail?").seek == "cause"
    assert causal.direction("what happens if the disk is full?").seek == "effect"
    assert causal.direction("what is the capital of France?") is None


def test_causal_space_answers_why_where_lexical_prefers_an_echo():
    r = _retriever(CAUSAL, links={"spike": [Link("oom", LinkType.CAUSES)]})
    assert _run(r, "why did the deploy fail?", "single_space:E5")[0] == ["cause"]
    assert _run(r, "why did the deploy fail?", "single_space:E6")[0][0] == "echo"
    _only_first(r, "why did the deploy fail?", "E5", "cause")
    hits, stages = _run(r, "why did the deploy fail?")
    assert hits[0] == "cause" and "types=causal" in stages["analyze"] and "E5" in stages["fusion"]
    # asymmetric: the disk is the cause here, so asking why the disk was full finds nothing
    assert _run(r, "what happens if the disk on the build host is full?", "single_space:E5")[0] == ["cause"]
    assert _run(r, "why was the disk on the build host full?", "single_space:E5")[0] == []


def test_causes_links_answer_in_both_directions_and_compare_is_directed():
    r = _retriever(CAUSAL, links={"spike": [Link("oom", LinkType.CAUSES)]})
    # the spike's text says nothing about memory: the link alone makes it the answer
    assert _run(r, "why did the checkout service run out of memory?", "single_space:E5")[0] == ["spike"]
    assert _run(r, "what happened after traffic spiked at noon?", "single_space:E5")[0] == ["oom"]
    space = r.spaces["E5_causal"]
    row = r.catalog.row_of
    forward = space.similarity(row["spike"], np.array([row["oom"]]))[0]
    backward = space.similarity(row["oom"], np.array([row["spike"]]))[0]
    assert forward == 1.0 and not backward == 1.0


# ---- E7 code ------------------------------------------------------------------------------------
CODE = {
    "py": "Fixed it:\n```python\ndef getUserName(user_id):\n    return db.fetch_user(user_id).display_name\n```",
    "js": "const total = items.reduce((sum, item) => sum + item.price, 0);\nconsole.log(total);",
    "prose": "Get the user a name badge; the name is printed on the user's badge at the desk.",
}


def test_code_detection_language_and_tokens():
    spans = code.detect(CODE["py"])
    assert spans.language == "python"
    toks = code.tokens(spans.code)
    assert {"getusername", "get", "user", "name", "def:getusername", "call:fetch_user"} <= set(toks)
    assert toks["return"] == code.KEYWORD_WEIGHT  # a keyword counts a quarter
    assert code.detect(CODE["js"]).language == "javascript"
    assert code.detect("Melanie went hiking with her kids on Sunday.") is None


def test_a_definition_is_code_whatever_its_body_holds():
    # a body that is mostly a list of strings or a long message reads as prose line by line
    listed = "def _get_kwargs(self):\n    names = [\n" + "".join(f"        '{w}',\n" for w in ("prog", "usage", "help", "dest")) \
        + "    ]\n    return [(name, getattr(self, name)) for name in names]"
    spans = code.detect(listed)
    assert spans is not None and spans.code == listed and spans.language == "python"
    assert {"name:get", "name:argument", "call:getattr"} <= set(code.tokens(spans.code))
    assert code.detect("function warnOnce(msg) {\n  A note for the reader\n  of this module\n  and more\n}").spans[0].startswith("function")
    # a definition named in the middle of prose is not a header
    assert code.detect("We talked about it.\ndef is what Python writes before a name\nand that was all\nreally") is None


def test_code_names_split_compounds_and_docstring_verbs():
    toks = code.tokens("def iterdir(self):\n    for entry in os.listdir(self.path):\n        yield entry\n")
    assert {"name:iterdir", "name:iter", "name:directory", "directory"} <= set(toks)
    assert code.compound_words("readlines") == ["read", "lines"] and code.compound_words("zebra") is None
    # English words beyond the programmers' list; a word is never split ("calendar" is not "cal" + "endar")
    assert code.compound_words("yeardayscalendar") == ["year", "days", "calendar"]
    assert code.compound_words("passwordprompt") == ["password", "prompt"] and code.compound_words("calendar") is None
    assert {"name:calendar", "name:day", "calendar"} <= set(code.tokens("def yeardayscalendar(self, year):\n    pass\n"))
    asked = code.query_tokens("Return whether the file name is valid.")
    assert asked["name:get"] == asked["name:is"] == code.NAME_VERB_WEIGHT
    assert asked["name:file"] == 1.0 and asked["name:filename"] == 0.5


NAMED = {
    "iterdir": "def iterdir(self):\n    for name in os.listdir(self._path):\n        yield self._make_child(name)\n",
    "scan": ("def _scan_entries(self, root):\n    found = []\n    for entry in os.scandir(root):\n"
             "        if entry.is_file() and not entry.name.startswith('.'):\n            found.append(entry.path)\n"
             "    return found\n"),
}


def test_code_space_ranks_the_function_whose_name_says_it():
    # the body of the second names files and directories more often; the first is called what was asked
    r = _retriever(NAMED)
    assert _run(r, "Iterate over the files in this directory.", "single_space:E7")[0][0] == "iterdir"


def test_code_space_reaches_identifiers_from_words_and_code_from_code():
    r = _retriever(CODE)
    assert _run(r, "get user name", "single_space:E7")[0] == ["py"]
    assert _run(r, "get user name", "single_space:E6")[0][0] == "prose"
    _only_first(r, "get user name", "E7", "py")
    assert _run(r, "name = fetch_user(uid).display_name", "single_space:E7")[0][0] == "py"


def test_language_filter_keeps_only_code_in_those_languages():
    r = _retriever(CODE)
    hits, _ = _run(r, "total price of the user items", filters=Filters(languages=("javascript",)))
    assert hits == ["js"]
    hits, _ = _run(r, "user name", filters=Filters(languages=("python",)))
    assert hits == ["py"]


# ---- E10 intent ---------------------------------------------------------------------------------
INTENT = {
    "goal": "I'm trying to cut our cloud bill in half before the audit.",
    "fact": "How do I read it: the cloud bill was cut in half by the vendor; the cloud bill is cut.",
}


def test_intent_clauses_and_boost():
    assert intent.clauses(INTENT["goal"]) == ["cut our cloud bill in half before the audit"]
    assert intent.query_intent("how do I cut the cloud bill?") == "cut the cloud bill"
    r = _retriever(INTENT)
    assert _run(r, "how do I cut the cloud bill?", "single_space:E10")[0] == ["goal"]
    assert _run(r, "how do I cut the cloud bill?", "single_space:E6")[0][0] == "fact"
    _only_first(r, "how do I cut the cloud bill?", "E10", "goal")
    hits, stages = _run(r, "how do I cut the cloud bill?")
    assert "boosts=E10" in stages["fusion"]
    # without the analyzer there is no boost: the stated goal's lead over the fact shrinks
    on = _scores(r, "how do I cut the cloud bill?", Overrides())
    off = _scores(r, "how do I cut the cloud bill?", Overrides(query_type="none"))
    assert on["goal"] / on["fact"] > off["goal"] / off["fact"]


def _scores(r, text, overrides):
    q = Query(text=text, embedding=None, principal=ADMIN, top_k=5, overrides=overrides)
    return {e.memory.id: e.score for e in r.retrieve(q) if isinstance(e, Hit)}


# ---- E11 entity ---------------------------------------------------------------------------------
ENTITY = {
    "ibm": "International Business Machines reported record revenue.",
    "mel": "Melanie Smith painted a sunset over the lake.",
    "other": "The revenue report was painted in a good light.",
}


def test_entity_space_reaches_initials_spelling_variants_and_part_names():
    r = _retriever(ENTITY)
    assert _run(r, "IBM", "single_space:E11")[0] == ["ibm"]
    assert _run(r, "IBM", "single_space:E6")[0] == [] and _run(r, "IBM", "single_space:E9")[0] == []
    _only_first(r, "What did IBM report?", "E11", "ibm")
    assert _run(r, "what did melany paint", "single_space:E11")[0] == ["mel"]
    assert _run(r, "smith", "single_space:E11")[0] == ["mel"]


def test_entity_names_of_another_tenant_are_never_matched():
    r = _retriever({"a": "Zebracorn Holdings merger plan.", "b": "Zebracorn sighting at the zoo."},
                   namespaces={"a": "secret", "b": "open"})
    reader = syn.admin(frozenset({"open"}))
    space = r.spaces["E11_entity"]
    state_terms = space.reached("zebracorn holdings")
    assert state_terms  # the key exists in the index
    hits, _ = _run(r, "zebracorn holdings", "single_space:E11", principal=reader)
    assert hits == ["b"]  # found by its own "zebracorn" (partial), never by the other tenant's key
    ctx_terms = _query_terms_for(r, "zebracorn holdings", reader)
    assert "zebracorn holdings" not in ctx_terms


def _query_terms_for(r, text, principal):
    from teleo_server.spaces.base import QueryContext

    readable = r.catalog.readable(principal)
    ctx = QueryContext(Query(text=text, embedding=None, principal=principal), None, r.catalog, readable,
                       np.ones(r.catalog.n_chunks, bool), 0.0, readable=readable, sees_all=False)
    return dict(r.spaces["E11_entity"].query_terms(ctx) or {})


# ---- E8 graph ------------------------------------------------------------------------------------
def _unit(v):
    v = np.asarray(v, np.float32)
    return v / np.linalg.norm(v)


def _graph_corpus(namespaces: dict[str, str] | None = None, held: tuple[str, ...] | None = None):
    """"found" matches the query's vector; "answer" does not, but links to it; the distractors
    match a little, alone. Vectors are given, so only the graph decides "answer"'s rank."""
    rng = np.random.default_rng(7)
    q = _unit(rng.standard_normal(384))
    noise = [_unit(rng.standard_normal(384)) for _ in range(8)]
    off = _unit(noise[0] - (noise[0] @ q) * q)                  # orthogonal to the query
    vectors = {"found": q, "answer": off}
    for i in range(1, 6):
        n = _unit(noise[i] - (noise[i] @ q) * q)
        vectors[f"near{i}"] = _unit(0.2 * q + np.sqrt(1 - 0.04) * n)  # cosine 0.2, no neighbours
    links = {"answer": [Link("found", LinkType.RELATES_TO)]}
    r = make_retriever(PipelineSettings(), "numpy")
    for mid, v in vectors.items():
        if held is not None and mid not in held:
            continue
        kw = {"links": links[mid]} if mid in links else {}
        r.add(syn.memory(mid, f"memory {mid}", namespace=(namespaces or {}).get(mid, "ns"), **kw),
              syn.embedding(ChunkEmbedding({"dense": v}, 0, 9)))
    return r, EmbeddingSet(syn.MODEL_VERSION, [ChunkEmbedding({"dense": q}, 0, 5)])


def _graph_run(r, query_emb, space: str, principal=ADMIN):
    q = Query(text="", embedding=query_emb, principal=principal, top_k=3, profile=f"single_space:{space}",
              include_breakdown=True)
    return [(e.memory.id, e.score) for e in r.retrieve(q) if isinstance(e, Hit)]


def test_graph_space_lifts_a_memory_linked_to_what_the_query_finds():
    r, qe = _graph_corpus()
    dense = [m for m, _ in _graph_run(r, qe, "E1")]
    graph = [m for m, _ in _graph_run(r, qe, "E8")]
    assert dense[0] == "found" and "answer" not in dense   # its own vector misses the query
    assert set(graph[:2]) == {"found", "answer"}            # its neighbour's vector does not
    space, row = r.spaces["E8_graph"], r.catalog.row_of["answer"]
    ctx = _graph_ctx(r, ADMIN)
    g = space.graph_vector(ctx, row)
    # 0.3 (``smooth``) of its graph vector is its neighbour's: the semantic vectors, mixed
    e1 = r.spaces["E1_semantic"]
    pa, pf = e1.memory_vectors(np.array([row, r.catalog.row_of["found"]]))
    expected = 0.7 * pa + 0.3 * pf
    np.testing.assert_allclose(g, expected / np.linalg.norm(expected), atol=2e-3)


def _graph_ctx(r, principal):
    from teleo_server.spaces.base import QueryContext

    readable = r.catalog.readable(principal)
    return QueryContext(Query(text="", embedding=None, principal=principal), r.ops, r.catalog, readable,
                        np.ones(r.catalog.n_chunks, bool), 0.0, readable=readable, sees_all=bool(readable.all()))


def _graph_scores(r, qe, principal) -> dict[str, float]:
    """Every readable memory's E8 score (its smoothed vector's cosine to the query), by id."""
    ctx = _graph_ctx(r, principal)
    ctx.query = Query(text="", embedding=qe, principal=principal)
    space = r.spaces["E8_graph"]
    scores = space.smoothed(ctx, space.prepare(ctx))
    return {r.catalog.memory(int(i)).id: float(scores[i]) for i in np.flatnonzero(~np.isnan(scores))}


def test_graph_space_never_smooths_over_what_the_caller_cannot_read():
    ns = {"found": "secret"}
    r, qe = _graph_corpus(ns)
    reader = syn.admin(frozenset({"ns"}))
    seen = dict(_graph_run(r, qe, "E8", principal=reader))
    assert "found" not in seen and "answer" not in seen  # no readable neighbour matches, so it stays down
    # exactly the scores of a store that never held the unreadable memory
    alone, _ = _graph_corpus(ns, held=tuple(m for m in ("answer", *(f"near{i}" for i in range(1, 6)))))
    assert _graph_scores(alone, qe, reader) == pytest.approx(_graph_scores(r, qe, reader))
    row = r.catalog.row_of["answer"]
    assert r.spaces["E8_graph"].graph_vector(_graph_ctx(r, reader), row) @ \
        alone.spaces["E8_graph"].graph_vector(_graph_ctx(alone, reader), alone.catalog.row_of["answer"]) == pytest.approx(1.0)


def test_search_then_score_agrees_with_search_and_score_in_every_space():
    # the perspectives stage reads a space's scores once for both; that must be what each gives alone
    r = _retriever({**CAUSAL, **CODE})
    ctx = _graph_ctx(r, ADMIN)
    ctx.query = Query(text="why did the deploy fail? get the user name", embedding=None, principal=ADMIN)
    every = np.arange(r.catalog.n_rows, dtype=np.int64)
    checked = []
    for name, space in r.spaces.items():
        feats = space.prepare(ctx)
        if feats is None:
            continue
        rows, score_of = space.search_then_score(ctx, feats, 3)
        np.testing.assert_array_equal(rows, space.search(ctx, feats, 3)[0])
        np.testing.assert_array_equal(score_of(every), space.score(ctx, feats, every))
        checked.append(name)
    assert {"E5_causal", "E6_lexical", "E7_code"} <= set(checked)


# ---- analyzer, matrices -------------------------------------------------------------------------
def test_classify_reads_the_kinds_of_question():
    assert classify("why did the deploy fail?") == ["causal"]
    assert "code" in classify("how do I call getUserName() in python?")
    assert "entity" in classify("What did Melanie paint?")
    assert "intent" in classify("I want to lower our cloud costs")
    assert classify("kubernetes canary") == ["keyword"]
    assert "graph" in classify("What do Caroline and Melanie have in common?")
    assert classify("what should we eat tonight?") == []


def test_search_matrix_sets_the_weights_and_keeps_the_analyzer_out():
    r = _retriever(CODE)
    q = Query(text="why did the build fail?", embedding=None, principal=ADMIN, top_k=3,
              overrides=Overrides(search_matrix="code_focused"))
    events = list(r.retrieve(q))
    done = events[-1]
    assert done.query_types == ["causal"]
    matrix = DEFAULT_MATRICES["code_focused"]
    assert done.space_weights["E1_semantic"] == matrix["E1_semantic"] and done.space_weights["E7_code"] == matrix["E7_code"]
    assert "E5_causal" not in done.space_weights and "E12_late" not in done.space_weights
    with pytest.raises(InvalidArgument, match="unknown search matrix"):
        list(r.retrieve(Query(text="x", embedding=None, principal=ADMIN, overrides=Overrides(search_matrix="nope"))))
    with pytest.raises(InvalidArgument, match="needs overrides.space_weights"):
        list(r.retrieve(Query(text="x", embedding=None, principal=ADMIN, overrides=Overrides(search_matrix="custom"))))


# ---- over gRPC ----------------------------------------------------------------------------------
def test_analysis_matrix_and_language_filter_over_grpc(stub, auth):
    docs = [CODE["py"], CODE["js"], CAUSAL["cause"]]
    reqs = [pb.StoreBatchRequest(memory=pb.MemoryInput(content=c, namespace="persp"), client_ref=f"p{i}")
            for i, c in enumerate(docs)]
    assert stub.StoreBatch(iter(reqs), metadata=auth, timeout=120).stored == 3
    events = list(stub.Retrieve(pb.RetrieveRequest(text="why did the deploy fail?",
                                                   filters=pb.RetrieveFilters(namespaces=["persp"])),
                                metadata=auth, timeout=60))
    summary = events[-1].summary
    assert list(summary.query_types) == ["causal"] and summary.space_weights["E5_causal"] > 0
    assert events[-2].result.memory.input.content == CAUSAL["cause"] or any(
        e.result.rank == 1 and e.result.memory.input.content == CAUSAL["cause"] for e in events if e.HasField("result"))
    events = list(stub.Retrieve(pb.RetrieveRequest(text="user name", filters=pb.RetrieveFilters(
        namespaces=["persp"], languages=["python"]), overrides=pb.StageOverrides(search_matrix="code_focused")),
        metadata=auth, timeout=60))
    contents = [e.result.memory.input.content for e in events if e.HasField("result")]
    assert contents == [CODE["py"]]
    assert events[-1].summary.space_weights["E7_code"] == DEFAULT_MATRICES["code_focused"]["E7_code"]
    import grpc

    for req in (pb.RetrieveRequest(text="x", filters=pb.RetrieveFilters(languages=["cobol"])),
                pb.RetrieveRequest(text="x", overrides=pb.StageOverrides(query_type="weird")),
                pb.RetrieveRequest(text="x", overrides=pb.StageOverrides(search_matrix="weird"))):
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Retrieve(req, metadata=auth, timeout=60))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # List honours the language filter as the index does
    page = stub.List(pb.ListRequest(filters=pb.RetrieveFilters(namespaces=["persp"], languages=["javascript"])),
                     metadata=auth, timeout=60)
    assert [m.input.content for m in page.memories] == [CODE["js"]]


# ---- time boosts (E2 / E3 / E4 after retrieval) ---------------------------------------------------
def _timed_retriever():
    r = make_retriever(PipelineSettings(), "numpy")
    now = 1_800_000_000.0  # a Friday, 08:00 UTC
    docs = {  # the same words, so only the boosts tell them apart
        "old": (now - 20 * 86_400, 2), "hour": (now - 3 * 86_400 + 6 * 3_600, 5), "new": (now - 120, 9),
    }
    for mid, (t, pos) in docs.items():
        r.add(syn.memory(mid, "standup notes for the payments team", event_time=t, ingestion_time=t,
                         session_id="s1", session_position=pos), syn.embedding())
    return r, now


def _boosted(r, now, boosts):
    from teleo_server.query import TimeBoosts

    q = Query(text="standup notes payments", embedding=None, principal=ADMIN, top_k=3, now=now,
              time_boosts=TimeBoosts(**boosts))
    events = list(r.retrieve(q))
    detail = next(e.detail for e in events if isinstance(e, StageReport) and e.stage == "finalize")
    return [e.memory.id for e in events if isinstance(e, Hit)], detail


@pytest.mark.parametrize("curve, scale", [("linear", "7d"), ("exponential", "7d"), ("step", "1d")])
def test_recency_boost_puts_the_newest_first(curve, scale):
    r, now = _timed_retriever()
    hits, detail = _boosted(r, now, {"recency_curve": curve, "recency_scale": scale, "recency_weight": 2.0})
    assert hits[0] == "new" and f"recency={curve}/{scale}" in detail
    if curve != "step":  # a one-day step cannot tell 3 days from 20
        assert hits.index("hour") < hits.index("old")


def test_periodic_and_sequence_boosts():
    r, now = _timed_retriever()
    hits, detail = _boosted(r, now, {"target_hour": 14, "periodic_weight": 3.0})
    assert hits[0] == "hour" and "periodic" in detail  # the one written at 14:00
    hits, detail = _boosted(r, now, {"session_id": "s1", "session_position": 2, "sequence_window": 2, "sequence_weight": 3.0})
    assert hits[0] == "old" and "sequence=2" in detail
    hits, _ = _boosted(r, now, {"session_id": "other", "session_position": 2, "sequence_weight": 3.0})
    assert hits[0] != "old" or len(set(hits)) == 3  # another session's positions boost nothing
    _, detail = _boosted(r, now, {})
    assert "time_boosts" not in detail


def test_time_boosts_over_grpc(stub, auth):
    import grpc

    ids = []
    for content, t in (("Standup: payments retro notes.", "2020-01-01T09:00:00Z"), ("Standup: payments retro notes!", None)):
        mi = pb.MemoryInput(content=content, namespace="boosts")
        if t:
            mi.event_time.FromJsonString(t)
        ids.append(stub.Store(pb.StoreRequest(memory=mi), metadata=auth, timeout=60).id)
    req = pb.RetrieveRequest(text="standup payments retro", filters=pb.RetrieveFilters(namespaces=["boosts"]),
                             time_boosts=pb.TimeBoosts(recency_curve="exponential", recency_scale="30d", recency_weight=5.0))
    events = list(stub.Retrieve(req, metadata=auth, timeout=60))
    assert [e.result.memory.id for e in events if e.HasField("result")][0] == ids[1]
    assert "time_boosts=recency=exponential/30d" in next(e.stage.detail for e in events
                                                          if e.HasField("stage") and e.stage.stage == "finalize")
    for bad in (pb.TimeBoosts(recency_curve="cubic", recency_weight=1), pb.TimeBoosts(recency_scale="2y"),
                pb.TimeBoosts(target_hour=24), pb.TimeBoosts(recency_weight=11)):
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Retrieve(pb.RetrieveRequest(text="x", time_boosts=bad), metadata=auth, timeout=30))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "time_boosts." in err.value.details()


def test_space_mask_keeps_fusion_and_the_analyzer_to_the_named_spaces():
    r = _retriever(CAUSAL, links={"spike": [Link("oom", LinkType.CAUSES)]})
    hits, stages = _run(r, "why did the deploy fail?", overrides=Overrides(space_mask=("lexical",)))
    assert "E5" not in stages["analyze"].split("weights=")[1] and "E5" not in stages["fusion"]
    assert hits[0] == "echo"  # the lexical echo, once the causal space may not speak
    hits, stages = _run(r, "why did the deploy fail?", overrides=Overrides(space_mask=("structural", "E6")))
    assert hits[0] == "cause" and set(stages["fusion"].split("spaces=")[1].split()[0].split("+")) <= {"E5", "E6"}
    with pytest.raises(InvalidArgument, match="unknown space or group"):
        _run(r, "x", overrides=Overrides(space_mask=("telepathy",)))


def test_a_name_on_most_memories_is_not_asked_for():
    docs = {f"t{i}": f"Caroline: turn {i} about the garden and the weather." for i in range(30)}
    docs["trip"] = "Caroline: I flew to Sweden last spring."
    r = _retriever(docs)
    terms = _query_terms_for(r, "When did Caroline go to Sweden?", ADMIN)
    assert set(terms) == {"sweden"}  # "caroline" names every turn: no better than a common word
    assert _run(r, "When did Caroline go to Sweden?", "single_space:E11")[0] == ["trip"]


def test_another_tenants_names_do_not_change_which_names_a_query_reaches():
    mine = {"mel": "Melanie Smith painted a sunset over the lake.", "kid": "Melanie Smith took the kids camping."}
    surnames = [f"{a}{b}ford" for a in "BCDFGH" for b in "aeiou"] + [f"{a}{b}ton" for a in "BCDFGH" for b in "aeiou"]
    crowd = {f"x{i}": f"Yesterday Melanie {name} met us at the lake." for i, name in enumerate(surnames)}
    reader = syn.admin(frozenset({"open"}))
    alone = _retriever(mine, namespaces={k: "open" for k in mine})
    crowded = _retriever({**mine, **crowd}, namespaces={**{k: "open" for k in mine}, **{k: "other" for k in crowd}})
    for text in ("melanie", "what did melany smith paint", "smith", "Melanie Smyth"):
        assert _query_terms_for(alone, text, reader) == _query_terms_for(crowded, text, reader), text
        assert _run(alone, text, "single_space:E11", principal=reader)[0] == _run(
            crowded, text, "single_space:E11", principal=reader)[0]
