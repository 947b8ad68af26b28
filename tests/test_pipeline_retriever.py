"""Retriever mechanics on synthetic vectors: ACL, filters, stage events, degradation, deletes."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from pydantic import ValidationError

from teleo_server.domain import AccessLevel, MemoryType
from teleo_server.errors import InvalidArgument, NotFound
from teleo_server.pipeline import PipelineSettings, make_retriever
from bench.harness import memories as syn
from teleo_server.pipeline.types import Filters, Hit, Outcome, Overrides, Query, StageReport


def _retriever(n: int = 300, seed: int = 0, **settings: object):
    r = make_retriever(PipelineSettings(**settings), "numpy")
    items = syn.corpus(n, dim=64, topics=8, seed=seed, tokens=6)
    for m, e in items:
        r.add(m, e)
    return r, items


def _run(r, query: Query) -> tuple[list[StageReport], list[Hit], Outcome]:
    events = list(r.retrieve(query))
    reports = [e for e in events if isinstance(e, StageReport)]
    hits = [e for e in events if isinstance(e, Hit)]
    assert isinstance(events[-1], Outcome)
    # order: every report before every hit, the outcome last
    kinds = [type(e).__name__ for e in events]
    assert kinds == sorted(kinds[:-1], key=lambda k: k != "StageReport") + ["Outcome"]
    return reports, hits, events[-1]


def _query(items, i: int, **kw) -> Query:
    m, e = items[i]
    kw.setdefault("principal", syn.admin())
    return Query(text=m.content, embedding=e, **kw)


def test_self_query_ranks_itself_first_with_every_stage_reported():
    r, items = _retriever()
    reports, hits, outcome = _run(r, _query(items, 7, top_k=5))
    assert [s.stage for s in reports] == ["analyze", "sparse_recall", "perspectives", "dense", "graph", "fusion",
                                          "alignment", "late_interaction", "finalize"]
    assert hits[0].memory.id == "m7"
    assert len(hits) == 5
    assert all(0.0 <= h.score <= 1.0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert {"E1_semantic", "E6_lexical", "E13_splade"} <= set(hits[0].found_by)
    assert hits[0].breakdown.space_ranks["E1_semantic"] == 1 and hits[0].breakdown.space_ranks["E6_lexical"] == 1
    # ranks are positions within the whole candidate pool, not within the five results
    assert max(r for h in hits for r in h.breakdown.space_ranks.values()) > 5
    assert "dense_dimension=" in next(s for s in reports if s.stage == "dense").detail
    assert outcome.corpus_size == 300 and not outcome.degraded


def test_acl_hides_namespaces_and_levels_before_scoring():
    r, items = _retriever()
    # m7 is in namespace ns3; a principal reading only ns0/ns1 must never see it, even asked for it verbatim
    p = syn.admin(frozenset({"ns0", "ns1"}))
    _, hits, outcome = _run(r, _query(items, 7, top_k=50, principal=p))
    assert hits and all(h.memory.namespace in {"ns0", "ns1"} for h in hits)
    assert outcome.corpus_size == 150
    secret, emb = syn.memory("secret", items[3][0].content, namespace="ns0", access_level=AccessLevel.RESTRICTED), items[3][1]
    r.add(secret, emb)
    low = syn.admin(frozenset({"*"}), AccessLevel.INTERNAL)
    _, hits, _ = _run(r, _query(items, 3, top_k=20, principal=low))
    assert "secret" not in {h.memory.id for h in hits}
    _, hits, _ = _run(r, _query(items, 3, top_k=20))
    assert "secret" in {h.memory.id for h in hits[:2]}


@pytest.mark.parametrize("filters, check", [
    pytest.param(Filters(namespaces=("ns2",)), lambda m: m.namespace == "ns2", id="namespace"),
    pytest.param(Filters(memory_types=(MemoryType.EPISODIC,)), lambda m: m.memory_type == MemoryType.EPISODIC, id="type"),
    pytest.param(Filters(event_start=1.7e9 + 100, event_end=1.7e9 + 200), lambda m: 1.7e9 + 100 <= m.event_time < 1.7e9 + 200, id="time"),
    pytest.param(Filters(session_id="s1"), lambda m: m.session_id == "s1", id="session"),
    pytest.param(Filters(metadata=(("tag", "x"),)), lambda m: m.metadata.get("tag") == "x", id="metadata"),
    pytest.param(Filters(min_confidence=0.5), lambda m: m.confidence >= 0.5, id="confidence"),
])
def test_filters_are_hard(filters, check):
    r = make_retriever(PipelineSettings(), "numpy")
    items = syn.corpus(200, dim=32, topics=4, seed=1, tokens=4)
    for i, (m, e) in enumerate(items):
        m.memory_type = MemoryType.EPISODIC if i % 3 == 0 else MemoryType.SEMANTIC
        m.session_id = "s1" if i % 5 == 0 else "s2"
        m.metadata = {"tag": "x" if i % 7 == 0 else "y"}
        m.confidence = (i % 10) / 10
        r.add(m, e)
    _, hits, _ = _run(r, _query(items, 0, top_k=100, filters=filters))
    assert hits, "the filter keeps some memories"
    assert all(check(h.memory) for h in hits)


def test_missing_embedding_degrades_to_lexical():
    r, items = _retriever()
    m, _ = items[11]
    reports, hits, outcome = _run(r, Query(text=m.content, embedding=None, principal=syn.admin(), top_k=3))
    assert outcome.degraded and "lexical" in outcome.degraded_reason
    assert hits[0].memory.id == "m11"
    assert "E1_semantic" not in hits[0].found_by and "E6_lexical" in hits[0].found_by
    assert next(s for s in reports if s.stage == "dense").skipped


def test_remove_and_compaction_keep_results_consistent():
    r, items = _retriever(n=200, compact_dead_fraction=0.2)
    r.remove([f"m{i}" for i in range(0, 60)])  # 30% dead: compaction is due
    assert len(r) == 140 and r.catalog.dead == 60 and r.maintenance_due()
    _, hits, _ = _run(r, _query(items, 70, top_k=10))  # tombstoned rows are never served
    assert hits[0].memory.id == "m70" and all(int(h.memory.id[1:]) >= 60 for h in hits)
    r.maintain()  # the background upkeep compacts
    assert r.catalog.dead == 0
    _, hits, _ = _run(r, _query(items, 70, top_k=10))
    assert hits[0].memory.id == "m70"
    assert all(int(h.memory.id[1:]) >= 60 for h in hits)
    _, hits, _ = _run(r, _query(items, 5, top_k=10))
    assert all(h.memory.id != "m5" for h in hits)
    r.add(*items[5])
    _, hits, _ = _run(r, _query(items, 5, top_k=1))
    assert hits[0].memory.id == "m5"


def test_readding_an_id_replaces_it():
    r, items = _retriever(n=50)
    m, e = items[1]
    r.add(m, e)
    assert len(r) == 50


def test_disabled_stage_is_reported_skipped():
    r, items = _retriever()
    reports, hits, _ = _run(r, _query(items, 9, top_k=3, overrides=Overrides(disable_stages=("late_interaction", "fusion"))))
    by = {s.stage: s for s in reports}
    assert by["late_interaction"].skipped and by["fusion"].skipped
    assert hits[0].memory.id == "m9"


def test_unknown_profile_and_compare_errors():
    r, items = _retriever(n=30)
    with pytest.raises(InvalidArgument):
        list(r.retrieve(_query(items, 0, profile="nope")))
    with pytest.raises(NotFound):
        r.compare("m0", "missing", "max", {})


def test_profiles_all_find_the_exact_match():
    r, items = _retriever()
    for prof in ("teleological", "hybrid", "entry_point", "single_space:E1", "single_space:E6_lexical",
                 "single_space:splade", "single_space:E9", "single_space:E12"):
        _, hits, _ = _run(r, _query(items, 21, top_k=3, profile=prof))
        assert hits[0].memory.id == "m21", prof


def test_chunked_memory_folds_to_its_best_chunk():
    r, items = _retriever(n=100)
    rng = np.random.default_rng(3)
    target = syn.unit(rng.standard_normal(64).astype(np.float32))
    other = syn.unit(rng.standard_normal(64).astype(np.float32))
    long = syn.memory("long", "alpha beta gamma", namespace="ns0")
    r.add(long, syn.embedding(syn.chunk(other, {1: 1.0}, rng=rng), syn.chunk(target, {2: 1.0}, rng=rng)))
    q = Query(text="", embedding=syn.embedding(syn.chunk(target, {2: 1.0}, rng=rng)), principal=syn.admin(), top_k=3)
    _, hits, _ = _run(r, q)
    assert hits[0].memory.id == "long"
    assert hits[0].chunk_index == 1


def test_a_hit_carries_its_chunk_span_through_deletes_and_compaction():
    """Each chunk's character span comes back with the hit whose best chunk it is, before and
    after other memories are deleted and the rows renumbered."""
    from dataclasses import replace

    r, items = _retriever(n=60)
    rng = np.random.default_rng(4)
    vecs = [syn.unit(rng.standard_normal(64).astype(np.float32)) for _ in range(6)]
    text = "first part. second part. third part."
    for i in range(2):
        chunks = [replace(syn.chunk(vecs[3 * i + j], {j + 1: 1.0}, rng=rng), start=12 * j, end=12 * j + 11)
                  for j in range(3)]
        r.add(syn.memory(f"long{i}", text, namespace="ns0"), syn.embedding(*chunks))

    def first(v):
        q = Query(text="", embedding=syn.embedding(syn.chunk(v, rng=rng)), principal=syn.admin(), top_k=3)
        return _run(r, q)[1][0]

    hit = first(vecs[5])
    assert (hit.memory.id, hit.chunk_index, hit.chunk_span) == ("long1", 2, (24, 35))
    r.remove(["long0"] + [m.id for m, _ in items[:30]])
    r.compact()
    for j in range(3):
        hit = first(vecs[3 + j])
        assert (hit.memory.id, hit.chunk_index, hit.chunk_span) == ("long1", j, (12 * j, 12 * j + 11))


def test_make_retriever_accepts_the_servers_plain_mapping():
    r = make_retriever({"bm25_k1": 1.2, "goals": {"max_goals": 4}}, "numpy")
    assert r.spaces["E6_lexical"].config.k1 == 1.2 and r.settings.goals.max_goals == 4 and r.backend == "numpy"
    with pytest.raises(ValidationError):
        make_retriever({"no_such_setting": 1}, "numpy")
    with pytest.raises(InvalidArgument):
        make_retriever(None, "tpu")


def test_entry_point_reports_the_space_it_started_from():
    r, items = _retriever()
    reports, hits, _ = _run(r, _query(items, 33, top_k=3, profile="entry_point"))
    entry = next(s for s in reports if s.stage == "entry")
    assert entry.detail.startswith("entry=E")
    assert hits[0].memory.id == "m33"


def test_space_weight_overrides_accept_codes_and_reject_unknown_spaces():
    r, items = _retriever(n=60)
    q = _query(items, 4, top_k=3, overrides=Overrides(space_weights=(("E1", 0.0), ("lexical", 0.0), ("E13", 0.0), ("E9", 0.0))))
    reports, hits, _ = _run(r, q)
    assert next(s for s in reports if s.stage == "fusion").detail.endswith("spaces=")
    q.overrides = Overrides(space_weights=(("E77", 1.0),))
    with pytest.raises(InvalidArgument):
        list(r.retrieve(q))


def test_settle_folds_write_buffers_without_changing_results():
    r, items = _retriever(n=120)
    from teleo_server.spaces.base import SparseScoredSpace

    sparse = [s for s in r.spaces.values() if isinstance(s, SparseScoredSpace) and s.index.nnz]
    assert sparse and all(s.index.pending for s in sparse), "small loads stay in the delta"
    before = [(h.memory.id, round(h.score, 5)) for h in _run(r, _query(items, 9, top_k=8))[1]]
    r.settle()
    assert all(s.index.pending == 0 for s in sparse)
    after = [(h.memory.id, round(h.score, 5)) for h in _run(r, _query(items, 9, top_k=8))[1]]
    assert after == before


def test_candidate_extend_appends_only_new_rows_and_returns_positions():
    from teleo_server.pipeline.state import Candidates

    c = Candidates(np.array([2, 5, 9], dtype=np.int64))
    c.set_space("E6_lexical", np.array([1.0, 2.0, 3.0], dtype=np.float32))
    pos = c.extend(np.array([9, 12, 0, 12, 5]))
    assert c.rows.tolist() == [2, 5, 9, 0, 12]
    assert pos.tolist() == [2, 4, 3, 4, 1]
    assert np.isnan(c.spaces["E6_lexical"][3:]).all() and not c.found["E6_lexical"][3:].any()
    assert c.extend(np.array([12, 2])).tolist() == [4, 0] and c.size == 5, "present rows are not added twice"


def test_sparse_recall_ranks_alike_over_the_reached_rows_and_over_every_row(monkeypatch):
    # queries whose terms reach a few memories join the spaces' lists; those reaching most score
    # every memory at once: the two ways give the same candidates, scores and results
    import teleo_server.pipeline.recall as recall

    r, items = _retriever(n=300, seed=3)
    outcomes = {}
    for share in (0.0, 10.0**9):  # 0: always every row; huge: always the joined lists
        monkeypatch.setattr(recall, "WHOLE_CORPUS_SHARE", share)
        runs = []
        for i in (0, 7, 42):
            q = _query(items, i, principal=syn.admin(frozenset({"ns0", "ns1"})), profile="hybrid", top_k=20)
            _, hits, _ = _run(r, q)
            runs.append([(h.memory.id, round(h.score, 6), tuple(sorted(h.breakdown.spaces.items()))) for h in hits])
        outcomes[share] = runs
    assert outcomes[0.0] == outcomes[10.0**9] and all(outcomes[0.0])


def test_warm_up_builds_the_word_tables_in_a_scratch_index_and_leaves_this_one_as_it_was():
    from teleo_server import entities

    r, items = _retriever(30)
    entities._word_lists.cache_clear()
    before = (len(r), r.catalog.n_rows, r.spaces["E6_lexical"].vocab.__len__())
    text = "Melanie Smith moved the staging cluster to us-east-2 because the quota ran out."
    found = r.warm_up(syn.memory("warm", text), syn.embedding(), Query(text="why did Melanie move the cluster",
                                                                        embedding=None, principal=syn.admin()))
    assert found >= 1
    assert entities._word_lists.cache_info().currsize == 1  # built by the sample, not by a request
    assert (len(r), r.catalog.n_rows, r.spaces["E6_lexical"].vocab.__len__()) == before
    assert "warm" not in r.catalog.row_of and "melanie" not in r.spaces["E6_lexical"].vocab


def test_primary_space_is_the_largest_weighted_reciprocal_rank_and_ties_go_to_the_name_sorting_last():
    from teleo_server.pipeline.retriever import _primary_spaces

    names = ["E1_semantic", "E6_lexical", "E9_hdc", "E13_splade"]
    weights = {"E1_semantic": 1.0, "E6_lexical": 2.0, "E13_splade": 1.0}  # E9_hdc unweighted
    inf = np.inf
    rank_mat = np.array([
        [1.0, 5.0, 1.0, 2.0],     # 1/61 vs 2/65: the lexical rank gives more
        [1.0, inf, 1.0, 1.0],     # E1 and E13 tie at 1/61: E1_semantic sorts after E13_splade
        [inf, inf, 1.0, inf],     # only the unweighted space ranked it: none
        [np.nan, inf, inf, 3.0],  # NaN is no rank
    ])
    assert _primary_spaces(names, weights, rank_mat, 60.0) == ["E6_lexical", "E1_semantic", "", "E13_splade"]
    # the rule the list follows, written out one row at a time
    for row, got in zip(rank_mat.tolist(), _primary_spaces(names, weights, rank_mat, 60.0)):
        want = max(((weights[n] / (60.0 + r), n) for n, r in zip(names, row) if n in weights and np.isfinite(r)),
                   default=(0.0, ""))[1]
        assert got == want
    assert _primary_spaces(names, {}, rank_mat, 60.0) == [""] * 4


def test_found_sets_read_each_row_in_space_order_past_the_width_of_one_int_too():
    from teleo_server.pipeline.retriever import _found_sets

    rng = np.random.default_rng(3)
    for n_spaces in (1, 4, 13, 70):
        names = [f"S{j}" for j in range(n_spaces)]
        found = rng.random((40, n_spaces)) < 0.3
        got = _found_sets(names, found)
        assert got == [tuple(n for n, f in zip(names, row) if f) for row in found.tolist()]
    assert _found_sets([], np.zeros((3, 0), bool)) == [(), (), ()]


def _calls(monkeypatch, obj, name: str, note=lambda *args, **kwargs: threading.get_ident()) -> list:
    """Record ``note(args)`` (by default the calling thread) of every call of ``obj.name``."""
    seen: list = []
    original = getattr(obj, name)

    def recorded(*args, **kwargs):
        seen.append(note(*args, **kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(obj, name, recorded)
    return seen


def _search_threads(monkeypatch, r) -> list[int]:
    """Record the thread of every search of the retriever's dense space."""
    return _calls(monkeypatch, r.spaces["E1_semantic"], "search")


def test_an_hnsw_search_runs_beside_sparse_recall_and_finds_what_it_finds_in_order(monkeypatch):
    graph = {"spaces": {"E1_semantic": {"exact_threshold": 100}}}
    r_beside, items = _retriever(**graph)
    r_in_order, _ = _retriever(prefetch=False, **graph)
    beside, in_order = _search_threads(monkeypatch, r_beside), _search_threads(monkeypatch, r_in_order)
    for i in (3, 7, 11):
        q = _query(items, i, top_k=10, profile="hybrid")
        reports_a, hits_a, _ = _run(r_beside, q)
        reports_b, hits_b, _ = _run(r_in_order, q)
        assert [(h.memory.id, h.score) for h in hits_a] == [(h.memory.id, h.score) for h in hits_b]
        for reports in (reports_a, reports_b):
            assert "index=hnsw" in next(s for s in reports if s.stage == "dense").detail
    me = threading.get_ident()
    assert len(beside) == len(in_order) == 3
    assert all(t != me for t in beside)  # on a second thread, started before sparse recall ran
    assert all(t == me for t in in_order)


def test_an_exact_scan_and_a_disabled_dense_stage_start_nothing_beside(monkeypatch):
    r, items = _retriever()  # 300 rows: an exact scan, which would slow the stage beside it
    seen = _search_threads(monkeypatch, r)
    _, hits, _ = _run(r, _query(items, 7, top_k=5, profile="hybrid"))
    assert hits[0].memory.id == "m7" and seen == [threading.get_ident()]
    r_graph, items = _retriever(spaces={"E1_semantic": {"exact_threshold": 100}})
    seen = _search_threads(monkeypatch, r_graph)
    reports, _, _ = _run(r_graph, _query(items, 7, top_k=5, profile="hybrid",
                                         overrides=Overrides(disable_stages=("dense",))))
    assert seen == [] and next(s for s in reports if s.stage == "dense").skipped


def _maxsim_calls(monkeypatch, r) -> list[tuple[int, int]]:
    """Record (thread, rows) of every MaxSim scoring call of the retriever's late-interaction space."""
    return _calls(monkeypatch, r.spaces["E12_late"], "score_with_chunks",
                  lambda ops, feats, rows: (threading.get_ident(), int(rows.size)))


def test_a_large_maxsim_window_is_scored_in_two_halves_side_by_side(monkeypatch):
    from teleo_server.pipeline import rerank

    r_split, items = _retriever()
    r_whole, _ = _retriever(parallel=False)
    late = r_split.spaces["E12_late"]
    # every memory here keeps its six token rows: the window's size in token rows is known
    assert late.token_rows(np.arange(300)) == late.store.n_tokens == 300 * 6
    assert late.token_rows(np.array([4, 9])) == 12
    split, whole = _maxsim_calls(monkeypatch, r_split), _maxsim_calls(monkeypatch, r_whole)
    queries = [_query(items, i, top_k=10) for i in (3, 7, 11)]
    for q in queries:  # 300 memories of six tokens: a window far below the threshold is scored whole
        _run(r_split, q)
    assert len(split) == 3 and all(t == threading.get_ident() for t, _ in split)
    split.clear()
    monkeypatch.setattr(rerank, "PARALLEL_RERANK_TOKENS", 60)
    for q in queries:
        reports_a, hits_a, _ = _run(r_split, q)
        reports_b, hits_b, _ = _run(r_whole, q)
        assert [h.memory.id for h in hits_a] == [h.memory.id for h in hits_b]
        assert [h.score for h in hits_a] == pytest.approx([h.score for h in hits_b], abs=1e-6)
        assert next(s for s in reports_a if s.stage == "late_interaction").candidates_out > 10
    me = threading.get_ident()
    # each window in two halves, one on the retrieval's thread and one beside it; the setting off:
    # whole, on the retrieval's thread
    assert len(split) == 6
    for pair in (split[0:2], split[2:4], split[4:6]):  # the half beside may start first
        assert sorted(t == me for t, _ in pair) == [False, True]
        assert abs(pair[0][1] - pair[1][1]) <= 1
    assert len(whole) == 3 and all(t == me for t, _ in whole)


def test_late_interaction_alone_scores_a_large_pool_in_two_halves_side_by_side(monkeypatch):
    from teleo_server.pipeline import rerank

    monkeypatch.setattr(rerank, "PARALLEL_RERANK_TOKENS", 60)
    r_split, items = _retriever()
    r_whole, _ = _retriever(parallel=False)
    split, whole = _maxsim_calls(monkeypatch, r_split), _maxsim_calls(monkeypatch, r_whole)
    q = _query(items, 7, top_k=10, profile="single_space:E12_late")
    _, hits_a, _ = _run(r_split, q)
    _, hits_b, _ = _run(r_whole, q)
    assert hits_a[0].memory.id == "m7"
    assert [h.memory.id for h in hits_a] == [h.memory.id for h in hits_b]
    assert [h.score for h in hits_a] == pytest.approx([h.score for h in hits_b], abs=1e-6)
    me = threading.get_ident()
    assert len(split) == 2 and sorted(t == me for t, _ in split) == [False, True]
    assert len(whole) == 1 and whole[0][0] == me and whole[0][1] == split[0][1] + split[1][1]


def test_a_memory_is_indexed_in_every_space_or_in_none(monkeypatch):
    r, items = _retriever(60, seed=3)
    names = list(r.spaces)
    failing = names[len(names) // 2]  # a space in the middle: those before it have taken the memory
    extra = syn.corpus(61, dim=64, topics=8, seed=3, tokens=6)[60]
    original = type(r.spaces[failing]).add

    def broken(self, row, chunk_rows, memory, embeddings):
        if memory.id == extra[0].id:
            raise RuntimeError("space failed")
        return original(self, row, chunk_rows, memory, embeddings)

    monkeypatch.setattr(type(r.spaces[failing]), "add", broken)
    with pytest.raises(RuntimeError, match="space failed"):
        r.add(*extra)
    assert extra[0].id not in r.catalog.row_of and len(r) == 60
    # no space answers with it, and every space scores the others as an index that never saw it does
    clean, _ = _retriever(60, seed=3)
    for i in (0, 17, 42):
        for name in ("teleological", *(f"single_space:{n}" for n in ("E1_semantic", "E6_lexical", "E13_splade", "E9_hdc"))):
            q = _query(items, i, top_k=10, profile=name, include_breakdown=True)
            got, want = _run(r, q)[1], _run(clean, q)[1]
            assert [h.memory.id for h in got] == [h.memory.id for h in want], name
            assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-6), name
    # once the space works again the memory goes in whole
    monkeypatch.setattr(type(r.spaces[failing]), "add", original)
    r.add(*extra)
    hits = _run(r, Query(text=extra[0].content, embedding=extra[1], principal=syn.admin(), top_k=3))[1]
    assert hits[0].memory.id == extra[0].id
