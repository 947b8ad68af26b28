"""Text spaces: BM25 against its formula, E9 typo robustness, registry, context spaces."""

from __future__ import annotations

import math

import numpy as np
import pytest

from teleo_server.pipeline import PipelineSettings, make_retriever
from bench.harness import memories as syn
from teleo_server.pipeline.types import Hit, Query
from teleo_server.spaces.base import QueryContext
from teleo_server.spaces.registry import resolve_name, space_classes
from teleo_server.spaces.text import tokenize

DOCS = [
    "the cat sat on the mat",
    "dogs chase cats in the park",
    "kubernetes deployment pipeline failed at the canary stage",
    "a recipe for sourdough bread with a long fermentation",
    "the mat was red and the cat was black and the cat slept",
]


def _lexical_only(docs: list[str], **settings):
    r = make_retriever(PipelineSettings(**settings), "numpy")
    for i, d in enumerate(docs):
        r.add(syn.memory(f"d{i}", d), syn.embedding())  # no learned vectors at all
    return r


def _ids(r, text: str, profile: str, k: int = 5) -> list[tuple[str, float]]:
    q = Query(text=text, embedding=None, principal=syn.admin(), top_k=k, profile=profile, include_breakdown=True)
    return [(e.memory.id, e.breakdown.spaces.get(resolve_name(profile.split(":")[1]), 0.0))
            for e in r.retrieve(q) if isinstance(e, Hit)]


def _bm25(query: str, docs: list[str], k1: float, b: float) -> np.ndarray:
    toks = [tokenize(d) for d in docs]
    avgdl = sum(map(len, toks)) / len(toks)
    out = np.zeros(len(docs))
    for t in set(tokenize(query)):
        df = sum(t in d for d in toks)
        if not df:
            continue
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        for i, d in enumerate(toks):
            tf = d.count(t)
            out[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avgdl)) if tf else 0.0
    return out


@pytest.mark.parametrize("k1, b", [(0.9, 0.4), (1.2, 0.75)])
def test_bm25_matches_the_formula(k1, b):
    # float32 scored values: the exact formula (the default float16 keeps three significant digits)
    r = _lexical_only(DOCS, bm25_k1=k1, bm25_b=b, spaces={"E6_lexical": {"values": "float32"}})
    got = dict(_ids(r, "the cat on a red mat", "single_space:E6"))
    want = _bm25("the cat on a red mat", DOCS, k1, b)
    for i, w in enumerate(want):
        if w > 0:
            assert got[f"d{i}"] == pytest.approx(w, rel=1e-5)


@pytest.mark.parametrize("values", ["float32", "float16"])
@pytest.mark.parametrize("merged", [False, True])
def test_bm25_after_delete_matches_the_formula_over_the_live_corpus(merged, values):
    # deleting a memory updates IDF and avgdl at once, not only at the next compaction; postings,
    # merged or not, score with float16 values by default (three significant digits)
    r = _lexical_only(DOCS, compact_dead_fraction=1.0, spaces={"E6_lexical": {"values": values}})
    rel = 1e-3 if values == "float16" else 1e-5
    if merged:
        r.settle()
        assert r.spaces["E6_lexical"].field.index.data.dtype == np.dtype(values)
    r.remove(["d4"])
    assert r.catalog.dead == 1, "still tombstoned, not compacted"
    got = dict(_ids(r, "the cat on a red mat", "single_space:E6"))
    want = _bm25("the cat on a red mat", DOCS[:4], 0.9, 0.4)
    assert "d4" not in got
    for i, w in enumerate(want):
        if w > 0:
            assert got[f"d{i}"] == pytest.approx(w, rel=rel)
    assert max(got, key=got.get) == f"d{int(np.argmax(want))}"


@pytest.mark.parametrize("merged", [False, True])
def test_bm25_for_a_tenant_matches_the_formula_over_its_own_documents(merged):
    """A caller that may read only some memories scores BM25 as if the rest did not exist."""
    from teleo_server.domain import AccessLevel

    r = make_retriever(PipelineSettings(), "numpy")
    others = ["the cat the cat the cat", "mat mat red red red red", "on on on a a a the"]
    for i, d in enumerate(DOCS):
        r.add(syn.memory(f"d{i}", d, namespace="mine"), syn.embedding())
        if i < len(others):  # interleaved rows of another tenant, full of the query's words
            r.add(syn.memory(f"o{i}", others[i], namespace="theirs"), syn.embedding())
    if merged:
        r.settle()
    me = syn.admin(frozenset({"mine"}), AccessLevel.INTERNAL)
    q = Query(text="the cat on a red mat", embedding=None, principal=me, top_k=5, profile="single_space:E6",
              include_breakdown=True)
    got = {e.memory.id: e.breakdown.spaces["E6_lexical"] for e in r.retrieve(q) if isinstance(e, Hit)}
    want = _bm25("the cat on a red mat", DOCS, 0.9, 0.4)
    assert set(got) == {f"d{i}" for i, w in enumerate(want) if w > 0}
    for i, w in enumerate(want):
        if w > 0:
            assert got[f"d{i}"] == pytest.approx(w, rel=1e-5)


def test_typo_is_found_only_through_hdc():
    r = _lexical_only(DOCS)
    assert _ids(r, "kuberentes deploymnet", "single_space:E6") == []  # BM25 sees no shared token
    hits = _ids(r, "kuberentes deploymnet", "single_space:E9")
    assert hits[0][0] == "d2"
    q = Query(text="kuberentes deploymnet", embedding=None, principal=syn.admin(), top_k=3)
    top = [e for e in r.retrieve(q) if isinstance(e, Hit)]
    assert top[0].memory.id == "d2" and "E9_hdc" in top[0].found_by


def test_bm25_alone_finds_the_word_where_the_ngrams_find_its_letters():
    # "studies" is "study" once stemmed; the n-grams prefer a note full of "studio"'s letters
    r = _lexical_only(["Our study of the soil samples from the northern field is finished at last.",
                       "Studio studios: students in the studio.", "Lunch is at noon on the terrace."])
    assert _ids(r, "what did the studies find", "single_space:E6")[0][0] == "d0"
    assert _ids(r, "what did the studies find", "single_space:E9")[0][0] == "d1"
    for other in ("E5", "E7", "E10", "E11"):  # the spans and names these read are not in the question
        assert _ids(r, "what did the studies find", f"single_space:{other}") == [], other


def test_periodicity_alone_finds_the_memory_of_this_hour_and_weekday():
    day = 86_400.0
    now = 1_700_000_000.0
    r = make_retriever(PipelineSettings(), "numpy")
    r.add(syn.memory("standup", "standup notes", event_time=now - 21 * day), syn.embedding())  # same hour and weekday
    for i in range(4):
        r.add(syn.memory(f"t{i}", f"turn {i}", session_id="s", session_position=i, event_time=now - (i + 1) * 3_600 - 0.4 * day),
              syn.embedding())
    r.add(syn.memory("latest", "latest note", event_time=now - 600), syn.embedding())

    def first(space: str) -> str:
        q = Query(text="", embedding=None, principal=syn.admin(), top_k=3, profile=f"single_space:{space}", now=now)
        return next(e.memory.id for e in r.retrieve(q) if isinstance(e, Hit))

    assert first("E3") == "standup"
    assert first("E2") == "latest" and first("E4") == "t3"


def test_registry_discovers_every_space_in_order():
    names = list(space_classes())
    assert names[:4] == ["E1_semantic", "E2_recency", "E3_periodicity", "E4_sequence"]
    assert {"E6_lexical", "E9_hdc", "E12_late", "E13_splade"} <= set(names)
    assert resolve_name("splade") == "E13_splade" and resolve_name("E12") == "E12_late"
    with pytest.raises(KeyError):
        resolve_name("E99")


def test_context_spaces_rank_by_time_and_sequence():
    r = make_retriever(PipelineSettings(), "numpy")
    day = 86_400.0
    for i in range(6):
        r.add(syn.memory(f"t{i}", f"turn {i}", session_id="s", session_position=i, event_time=1e9 + i * day), syn.embedding())
    r.add(syn.memory("loose", "no session", event_time=1e9 + 2.5 * day), syn.embedding())
    now = 1e9 + 6 * day
    q = Query(text="", embedding=None, principal=syn.admin(), top_k=3, profile="single_space:E2", now=now)
    assert [e.memory.id for e in r.retrieve(q) if isinstance(e, Hit)] == ["t5", "t4", "t3"]
    q = Query(text="", embedding=None, principal=syn.admin(), top_k=7, profile="single_space:E4", now=now)
    got = [e.memory.id for e in r.retrieve(q) if isinstance(e, Hit)]
    assert got[:2] == ["t5", "t4"] and "loose" not in got
    sims, _, _ = r.compare("t1", "t2", "max", {})
    far, _, _ = r.compare("t1", "t5", "max", {})
    assert sims["E4_sequence"] > far["E4_sequence"] and sims["E2_recency"] > far["E2_recency"]
    assert sims["E3_periodicity"] == pytest.approx((1.0 + (1 + math.cos(2 * math.pi / 7)) / 2) / 2, rel=1e-5)


def test_document_frequencies_follow_deletes_in_bm25_and_e9():
    r = _lexical_only(DOCS, compact_dead_fraction=1.0)
    r.remove(["d0", "d4"])
    live = [DOCS[i] for i in (1, 2, 3)]
    lex, hdc = r.spaces["E6_lexical"], r.spaces["E9_hdc"]
    for term, tid in lex.vocab.items():
        assert lex.df.view[tid] == sum(term in tokenize(d) for d in live), term
    want = np.zeros_like(hdc.df)
    for d in live:
        want[hdc.encode(d)[0]] += 1
    np.testing.assert_array_equal(hdc.df, want)


def test_e9_reads_at_most_its_posting_budget_rarest_n_grams_first():
    # a query's n-grams are kept rarest first while their postings fit max_postings: a common
    # n-gram is left out once the budget is spent, and the budget never drops the rarest one
    docs = [f"sourdough starter note {i}" for i in range(40)] + ["a kubernetes canary deployment"]
    wide = make_retriever({"spaces": {"E9_hdc": {"max_df": 1000, "max_df_fraction": 1.0}}}, "numpy")
    tight = make_retriever({"spaces": {"E9_hdc": {"max_df": 1000, "max_df_fraction": 1.0, "max_postings": 12}}}, "numpy")
    for r in (wide, tight):
        for i, d in enumerate(docs):
            r.add(syn.memory(f"d{i}", d), syn.embedding())
    query = "kubernetes sourdough"
    feats = {}
    for name, r in (("wide", wide), ("tight", tight)):
        n = r.catalog.n_rows
        ctx = QueryContext(query=Query(text=query, embedding=None, principal=syn.admin()), ops=r.ops, catalog=r.catalog,
                           mask=np.ones(n, bool), chunk_mask=np.ones(r.catalog.n_chunks, bool), now=0.0)
        feats[name] = r.spaces["E9_hdc"].prepare(ctx)
    wide_ids, tight_ids = (set(feats[n][0].tolist()) for n in ("wide", "tight"))
    hdc = wide.spaces["E9_hdc"]
    assert tight_ids < wide_ids
    assert int(hdc.df[list(tight_ids)].sum()) <= 12
    assert max(hdc.df[list(tight_ids)]) < max(hdc.df[list(wide_ids)]), "the common n-grams went first"
    assert min(hdc.df[list(wide_ids)]) in hdc.df[list(tight_ids)], "the rarest n-gram stays"


@pytest.mark.parametrize("floor", [0.0, 0.3])
def test_splade_leaves_memory_terms_below_its_floor_out_of_the_index(floor):
    """Static pruning: a memory's SPLADE terms weighing less than ``min_doc_weight`` are not
    indexed (the query side keeps every term), so a memory reached only through such a term is not
    found by the space, and one reached through a heavier term scores as without the floor."""
    r = make_retriever(PipelineSettings(spaces={"E13_splade": {"min_doc_weight": floor}}), "numpy")
    rng = np.random.default_rng(2)
    docs = {"faint": {7: 0.1, 9: 1.5}, "strong": {7: 1.2, 11: 0.8}, "none": {13: 1.0}}
    for mid, sparse in docs.items():
        r.add(syn.memory(mid, f"{mid} note"), syn.embedding(syn.chunk(rng.standard_normal(384), sparse, rng=rng)))
    q = Query(text="", embedding=syn.embedding(syn.chunk(rng.standard_normal(384), {7: 1.0})),
              principal=syn.admin(), top_k=5, profile="single_space:E13_splade")
    hits = {h.memory.id: h.breakdown.spaces["E13_splade"] for h in r.retrieve(q) if isinstance(h, Hit)}
    assert hits["strong"] == pytest.approx(1.2, rel=1e-3)
    assert ("faint" in hits) == (floor == 0.0) and "none" not in hits
    nnz = r.spaces["E13_splade"].index.nnz
    assert nnz == (5 if floor == 0.0 else 4)


def _bm25_vector(doc: str, docs: list[str], k1: float = 0.9, b: float = 0.4) -> dict[str, float]:
    toks = [tokenize(d) for d in docs]
    avgdl = sum(map(len, toks)) / len(toks)
    mine = tokenize(doc)
    out = {}
    for t in set(mine):
        df = sum(t in d for d in toks)
        tf = mine.count(t)
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        out[t] = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(mine) / avgdl))
    norm = math.sqrt(sum(v * v for v in out.values()))
    return {t: v / norm for t, v in out.items()}


@pytest.mark.parametrize("merged", [False, True])
def test_bm25_similarity_re_derives_rows_from_their_text(merged, monkeypatch):
    """The lexical index keeps no row-major copy of its postings; a memory's BM25 vector for
    Compare is rebuilt from its text (never read back from the postings) and equals the
    formula's cosine, merged or not."""
    r = _lexical_only(DOCS)
    if merged:
        r.settle()
    space = r.spaces["E6_lexical"]
    assert not space.field.index.row_major

    def scan(*_args, **_kwargs):
        raise AssertionError("read the postings back")

    monkeypatch.setattr(space.field.index, "row_values", scan)
    monkeypatch.setattr(space.field.index, "rows_entries", scan)
    got = space.similarity(4, np.arange(len(DOCS)))
    a = _bm25_vector(DOCS[4], DOCS)
    for i, doc in enumerate(DOCS):
        v = _bm25_vector(doc, DOCS)
        assert got[i] == pytest.approx(sum(w * v.get(t, 0.0) for t, w in a.items()), abs=1e-5)
    assert got[4] == pytest.approx(1.0, abs=1e-5) and got[0] > got[2]


def test_hdc_remembers_a_bounded_number_of_ngrams_and_encodes_the_same_past_it(monkeypatch):
    """Past the bound, n-grams are hashed again instead of remembered: the same vectors either way."""
    from teleo_server.spaces import hdc

    texts = [f"{w}ing{i} unrelated{i * 7} tokens{i % 13} café{i}" for i, w in enumerate(["alpha", "beta", "gamma"] * 40)]
    unbounded = make_retriever(PipelineSettings(), "numpy").spaces["E9_hdc"]
    want = [unbounded.encode(t) for t in texts]
    monkeypatch.setattr(hdc, "CACHED_GRAMS", 50)
    bounded = make_retriever(PipelineSettings(), "numpy").spaces["E9_hdc"]
    for t, (ids, vals) in zip(texts, want):
        got_ids, got_vals = bounded.encode(t)
        np.testing.assert_array_equal(got_ids, ids)
        np.testing.assert_array_equal(got_vals, vals)
    assert len(bounded._cache) == 50 < len(unbounded._cache)
