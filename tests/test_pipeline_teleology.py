"""Goals, alignment, Johari, decay and MMR on synthetic vectors with known structure."""

from __future__ import annotations

import numpy as np
import pytest

from teleo_server.domain import AccessLevel, Johari, MemoryType
from teleo_server.pipeline import PipelineSettings, make_retriever
from bench.harness import memories as syn
from teleo_server.pipeline.types import Hit, Overrides, Query

DIM = 48
TOPICS = {
    "deploy": "deploy pipeline release canary rollout",
    "garden": "garden tomato compost seedling harvest",
    "invoice": "invoice payment ledger refund billing",
}


def _clustered(seed: int = 0, per_topic: int = 20, outliers: int = 3, max_goals: int = 16):
    """Three tight topic clusters (vectors and words) plus a few unrelated outliers."""
    rng = np.random.default_rng(seed)
    centres = syn.unit(rng.standard_normal((len(TOPICS), DIM)).astype(np.float32))
    goals = {"min_memories": 10, "memories_per_goal": 20, "max_goals": max_goals}
    r = make_retriever(PipelineSettings(goals=goals), "numpy")
    ids: dict[str, list[str]] = {}
    for t, (topic, words) in enumerate(TOPICS.items()):
        for i in range(per_topic):
            v = centres[t] + 0.15 * rng.standard_normal(DIM).astype(np.float32)
            text = " ".join(rng.permutation(words.split())[:3]) + f" note {i}"
            mid = f"{topic}{i}"
            r.add(syn.memory(mid, text), syn.embedding(syn.chunk(v, {t: 1.0}, rng=rng)))
            ids.setdefault(topic, []).append(mid)
    for i in range(outliers):
        # orthogonal to every centre: fits no goal
        v = rng.standard_normal(DIM).astype(np.float32)
        v -= centres.T @ (centres @ v)
        r.add(syn.memory(f"odd{i}", f"stray remark {i}"), syn.embedding(syn.chunk(v, {10 + i: 1.0}, rng=rng)))
    r.maintain()  # the server's background upkeep
    return r, centres, rng


def _hits(r, q: Query) -> list[Hit]:
    return [e for e in r.retrieve(q) if isinstance(e, Hit)]


def test_goals_emerge_from_clusters_with_readable_labels():
    r, _, _ = _clustered()
    goals = r.goals()
    assert r.goal_count() == 3
    labels = [g.label for g in goals]
    for topic, words in TOPICS.items():
        assert any(set(label.split()) <= set(words.split()) and label for label in labels), (topic, labels)
    assert sorted(g.size for g in goals) == [20, 21, 22] or sum(g.size for g in goals) == 63


def test_a_memorys_purpose_names_its_goal_and_its_alignment_in_every_space():
    r, _, _ = _clustered()
    p = r.purpose_of("garden3")
    goal = next(g for g in r.goals() if g.id == p.goal_id)
    assert set(goal.label.split()) <= set(TOPICS["garden"].split())
    assert p.alignment == max(p.goal_alignment.values()) and p.alignment > 0.5
    assert sorted(p.goal_alignment) == sorted(g.id for g in r.goals())
    assert p.members == 16
    # its own cluster's members are close in the dense space and share its words; a stray
    # memory's best goal is far in both
    assert p.space_alignment["E1_semantic"] > 0.7 and p.space_alignment["E6_lexical"] > 0.1
    odd = r.purpose_of("odd0")
    assert odd.alignment < 0.3 and odd.space_alignment["E1_semantic"] < p.space_alignment["E1_semantic"]
    assert odd.space_alignment.get("E6_lexical", 0.0) < p.space_alignment["E6_lexical"]
    assert all(0.0 <= v <= 1.0 for v in p.space_alignment.values())


def test_purpose_is_none_before_goals_emerge():
    r = make_retriever(PipelineSettings(), "numpy")
    r.add(syn.memory("one", "a lone note"), syn.embedding(syn.chunk(syn.unit(np.ones(DIM, np.float32)), {1: 1.0})))
    assert r.purpose_of("one") is None


def test_goals_refresh_keeps_ids_and_reports_drift():
    r, centres, rng = _clustered(max_goals=3)
    before = {g.id: g.label for g in r.goals()}
    # a burst of new 'deploy' memories shifted towards another direction
    shift = syn.unit(rng.standard_normal(DIM).astype(np.float32))
    for i in range(20):
        v = centres[0] + 0.6 * shift + 0.1 * rng.standard_normal(DIM).astype(np.float32)
        r.add(syn.memory(f"deploy-new{i}", "deploy rollout canary"), syn.embedding(syn.chunk(v, rng=rng)))
    # a read never maintains: until the upkeep runs, the goals are those of before
    assert {g.id: g.label for g in r.goals()} == before and r.maintenance_due()
    r.maintain()
    after = r.goals()
    assert {g.id for g in after} == set(before)
    drift = {g.id: g.drift for g in after}
    deploy_goal = next(g.id for g in after if "deploy" in g.label or "rollout" in g.label or "canary" in g.label)
    assert drift[deploy_goal] == max(drift.values()) and drift[deploy_goal] > 0.01
    # each goal keeps its snapshots: the first clustering's and this one's
    for g in after:
        assert len(g.history) == 2 and g.history[0].drift == 0.0 and g.history[-1].drift == g.drift
        assert g.history[-1].size == g.size and g.history[0].time <= g.history[-1].time


def test_misaligned_memories_are_flagged_or_filtered():
    r, _, _ = _clustered()
    probe = syn.embedding(syn.chunk(r.spaces["E1_semantic"].index.matrix[-1], {10: 1.0}))  # an outlier's own vector
    q = Query(text="stray remark", embedding=probe, principal=syn.admin(), top_k=5, explain=True)
    hits = _hits(r, q)
    assert hits[0].memory.id.startswith("odd") and hits[0].misaligned
    assert "misaligned" in hits[0].explanation
    aligned = [h for h in hits if not h.memory.id.startswith("odd")]
    assert all(not h.misaligned for h in aligned)
    q.overrides = Overrides(filter_misaligned=True)
    assert all(not h.memory.id.startswith("odd") for h in _hits(r, q))


def test_johari_quadrants_follow_alignment_and_use():
    r, _, _ = _clustered()
    used = r.catalog.memory(r.catalog.row_of["garden3"])
    used.used_count = 2
    r.update(used)
    odd_used = r.catalog.memory(r.catalog.row_of["odd1"])
    odd_used.used_count = 1
    r.update(odd_used)
    q = Query(text="garden tomato stray remark", embedding=None, principal=syn.admin(), top_k=100)
    quad = {h.memory.id: h.johari for h in _hits(r, q)}
    assert quad["garden3"] == Johari.OPEN
    assert quad["odd1"] == Johari.HIDDEN
    assert quad["odd0"] == Johari.UNKNOWN
    assert quad["garden4"] == Johari.BLIND
    q.johari = (Johari.OPEN, Johari.HIDDEN)
    assert {h.memory.id for h in _hits(r, q)} == {"garden3", "odd1"}


def test_goal_alignment_targets_a_named_goal_and_explains_it():
    r, centres, _ = _clustered()
    label = next(g.label for g in r.goals() if set(g.label.split()) & {"invoice", "payment", "ledger", "refund", "billing"})
    q = Query(text="note", embedding=None, principal=syn.admin(), top_k=60, target_goals=(label,), explain=True,
              include_breakdown=True)
    hits = _hits(r, q)
    inv = [h for h in hits if h.memory.id.startswith("invoice")]
    other = [h for h in hits if h.memory.id.startswith("garden")]
    assert min(h.breakdown.goal_alignment for h in inv) > max(h.breakdown.goal_alignment for h in other)
    assert f"goal '{label}'" in inv[0].explanation


def test_decay_orders_by_age_and_spares_evergreen():
    r = make_retriever(PipelineSettings(), "numpy")
    rng = np.random.default_rng(1)
    v = syn.unit(rng.standard_normal(DIM).astype(np.float32))
    day = 86_400.0
    now = 1e9 + 100 * day
    for i, age in enumerate([1, 30, 90]):
        r.add(syn.memory(f"a{age}", "same words here", event_time=now - age * day), syn.embedding(syn.chunk(v, {1: 1.0}, rng=rng)))
    r.add(syn.memory("old-evergreen", "same words here", event_time=now - 90 * day, evergreen=True),
          syn.embedding(syn.chunk(v, {1: 1.0}, rng=rng)))
    r.add(syn.memory("old-howto", "same words here", event_time=now - 90 * day, memory_type=MemoryType.PROCEDURAL),
          syn.embedding(syn.chunk(v, {1: 1.0}, rng=rng)))
    q = Query(text="same words here", embedding=syn.embedding(syn.chunk(v, {1: 1.0}, rng=rng)), principal=syn.admin(),
              top_k=5, now=now, overrides=Overrides(decay_half_life_days=30.0, disable_stages=("late_interaction",)))
    hits = _hits(r, q)
    order = [h.memory.id for h in hits]
    assert order.index("a1") < order.index("a30") < order.index("a90")
    by = {h.memory.id: h for h in hits}
    assert by["a30"].breakdown.temporal == pytest.approx(0.5 ** (30 / 30), rel=1e-4)
    assert by["old-evergreen"].breakdown.temporal == 1.0 and by["old-howto"].breakdown.temporal == 1.0
    assert by["a90"].score < by["old-evergreen"].score


def test_mmr_pushes_near_duplicates_down():
    r = make_retriever(PipelineSettings(), "numpy")
    rng = np.random.default_rng(2)
    q = syn.unit(rng.standard_normal(DIM).astype(np.float32))
    side = syn.unit(rng.standard_normal(DIM).astype(np.float32))
    dup = syn.unit(q + 0.2 * side)
    for i in range(4):  # four near-identical copies, closest to the query
        r.add(syn.memory(f"dup{i}", f"copy {i}"), syn.embedding(syn.chunk(dup + 0.01 * rng.standard_normal(DIM).astype(np.float32), rng=rng)))
    for i in range(4):  # distinct memories, a little further away
        d = syn.unit(q + 0.35 * syn.unit(rng.standard_normal(DIM).astype(np.float32)))
        r.add(syn.memory(f"distinct{i}", f"other {i}"), syn.embedding(syn.chunk(d, rng=rng)))
    base = Query(text="", embedding=syn.embedding(syn.chunk(q, rng=rng)), principal=syn.admin(), top_k=4, profile="single_space:E1")
    plain = [h.memory.id for h in _hits(r, base)]
    assert all(m.startswith("dup") for m in plain)
    base.overrides = Overrides(mmr_lambda=0.5)
    diverse = [h.memory.id for h in _hits(r, base)]
    assert diverse[0].startswith("dup")
    assert sum(m.startswith("dup") for m in diverse) == 1


@pytest.mark.parametrize("k", [1, 3, 7, 12, 20])
def test_final_order_selects_as_a_stable_sort_would(k):
    """The final top k is selected, not sorted in full: same positions, equal scores in candidate
    order, and a NaN score (never expected, but possible) still last."""
    from teleo_server.pipeline.finalize import _best

    score = np.array([0.5, 0.9, 0.5, 0.1, 0.9, 0.0, -0.0, 0.5, 0.3, 0.9, 0.2, 0.5], np.float32)
    want = np.argsort(-score, kind="stable")[:k]
    assert _best(score, k).tolist() == want.tolist()
    with_nan = score.copy()
    with_nan[1] = np.nan
    assert _best(with_nan, k).tolist() == np.argsort(-with_nan, kind="stable")[:k].tolist()


def test_min_score_applies_to_the_normalised_score():
    r, _, _ = _clustered()
    q = Query(text="garden tomato", embedding=None, principal=syn.admin(), top_k=50)
    all_hits = _hits(r, q)
    scores = sorted(h.score for h in all_hits)
    cut = (scores[len(scores) // 2] + scores[len(scores) // 2 - 1]) / 2
    assert 0.0 < cut < 1.0
    q.overrides = Overrides(min_score=cut)
    kept = _hits(r, q)
    assert 0 < len(kept) < len(all_hits)
    assert all(h.score >= cut for h in kept)
    assert {h.memory.id for h in kept} == {h.memory.id for h in all_hits if h.score >= cut}


def _tenants(with_vault: bool):
    """A PUBLIC 'lobby' with two topics and, optionally, a RESTRICTED 'vault' with a third."""
    rng = np.random.default_rng(7)
    centres = syn.unit(rng.standard_normal((3, DIM)).astype(np.float32))
    r = make_retriever(PipelineSettings(goals={"min_memories": 10, "memories_per_goal": 20, "max_goals": 16}), "numpy")
    plan = [("lobby", AccessLevel.PUBLIC, 0, "garden tomato compost seedling harvest"),
            ("lobby", AccessLevel.PUBLIC, 1, "deploy pipeline release canary rollout")]
    if with_vault:
        plan.append(("vault", AccessLevel.RESTRICTED, 2, "zebracorn merger plan acquisition"))
    for ns, level, t, words in plan:
        for i in range(20):
            v = centres[t] + 0.15 * rng.standard_normal(DIM).astype(np.float32)
            text = " ".join(rng.permutation(words.split())[:3]) + f" note {i}"
            r.add(syn.memory(f"{ns}{t}-{i}", text, namespace=ns, access_level=level),
                  syn.embedding(syn.chunk(v, {t: 1.0}, rng=rng)))
    r.maintain()
    return r, centres


def test_goals_are_built_and_shown_per_partition():
    r, _ = _tenants(with_vault=True)
    public = syn.admin(frozenset({"lobby"}), AccessLevel.PUBLIC)
    everyone = {g.label for g in r.goals()}
    mine = r.goals(public)
    assert any("zebracorn" in label or "merger" in label for label in everyone)
    assert mine and all(g.id.startswith("lobby/public/") for g in mine)
    assert not any(set(g.label.split()) & {"zebracorn", "merger", "plan", "acquisition"} for g in mine)
    assert r.goal_count(public) == len(mine) < r.goal_count()
    # vault goals count only vault memories (20), lobby goals only lobby memories (40)
    assert sum(g.size for g in r.goals() if g.id.startswith("vault/")) == 20
    assert sum(g.size for g in mine) == 40


def test_a_caller_cannot_reach_goals_of_partitions_it_cannot_read():
    from teleo_server.errors import InvalidArgument

    r, centres = _tenants(with_vault=True)
    public = syn.admin(frozenset({"lobby"}), AccessLevel.PUBLIC)
    probe = syn.embedding(syn.chunk(centres[2], {2: 1.0}))
    answers = []
    for target in ("zebracorn", "no-such-goal-anywhere"):
        q = Query(text="", embedding=probe, principal=public, top_k=10, target_goals=(target,), explain=True)
        with pytest.raises(InvalidArgument) as err:
            _hits(r, q)
        answers.append(str(err.value).replace(target, "X"))
    # a vault goal's label answers exactly like a label that exists nowhere
    assert answers[0] == answers[1] and answers[0].startswith("target_goals[0]: no goal you may see")
    q = Query(text="", embedding=probe, principal=public, top_k=10, explain=True)
    hits = _hits(r, q)
    assert hits and all(h.memory.namespace == "lobby" for h in hits)
    assert not any("zebracorn" in h.explanation or "merger" in h.explanation for h in hits)


def test_another_tenants_memories_do_not_change_what_a_caller_sees():
    public = syn.admin(frozenset({"lobby"}), AccessLevel.PUBLIC)
    seen = []
    for with_vault in (False, True):
        r, centres = _tenants(with_vault)
        probe = syn.embedding(syn.chunk(centres[0] + centres[2], {0: 1.0, 2: 1.0}))
        q = Query(text="", embedding=probe, principal=public, top_k=15, explain=True, include_breakdown=True)
        seen.append([(h.memory.id, round(h.score, 6), h.explanation, h.misaligned, h.johari,
                      round(h.breakdown.purpose_alignment, 6), round(h.breakdown.goal_alignment, 6)) for h in _hits(r, q)])
        seen.append([(g.id, g.label, g.size, g.drift, [(s.label, s.size) for s in g.history]) for g in r.goals(public)])
    assert seen[0] == seen[2] and seen[1] == seen[3]


def test_goal_alignment_across_two_readable_partitions():
    r, centres = _tenants(with_vault=True)
    boss = syn.admin(frozenset({"lobby", "vault"}), AccessLevel.RESTRICTED)
    vault_goal = next(g.label for g in r.goals(boss) if g.id.startswith("vault/"))
    q = Query(text="", embedding=syn.embedding(syn.chunk(centres[0], {0: 1.0})), principal=boss, top_k=60,
              target_goals=(vault_goal,), include_breakdown=True)
    by_id = {h.memory.id: h.breakdown.goal_alignment for h in _hits(r, q)}
    vault = [a for i, a in by_id.items() if i.startswith("vault")]
    lobby = [a for i, a in by_id.items() if i.startswith("lobby")]
    # lobby memories are scored against the vault goal from their own vectors, and score lower
    assert vault and lobby and min(vault) > max(lobby) and max(lobby) < 0.5


def test_another_tenants_text_does_not_move_a_callers_lexical_scores():
    """BM25's N, df and avgdl and the n-gram space's rarity are taken over what the caller may read."""
    rng = np.random.default_rng(11)
    lobby = [f"garden {w} tomato compost {i} " + " ".join(rng.choice(["seedling", "harvest", "mulch", "trowel"], 1 + i % 5))
             for i, w in enumerate(rng.choice(["early", "late", "spring", "autumn"], 30))]
    public = syn.admin(frozenset({"lobby"}), AccessLevel.PUBLIC)
    seen = []
    for vault_size in (1, 40):
        r = make_retriever(PipelineSettings(), "numpy")
        v_rng = np.random.default_rng(5)
        for i, text in enumerate(lobby):
            own = np.random.default_rng(100 + i)
            r.add(syn.memory(f"l{i}", text, namespace="lobby", access_level=AccessLevel.PUBLIC),
                  syn.embedding(syn.chunk(own.standard_normal(DIM), {i % 7: 1.0}, rng=own)))
            # the other tenant writes the caller's words, many times and at length, between its writes
            for j in range(vault_size // len(lobby) + (1 if i < vault_size % len(lobby) else 0)):
                r.add(syn.memory(f"v{i}-{j}", "tomato tomato garden compost harvest " * (3 + j), namespace="vault",
                                 access_level=AccessLevel.RESTRICTED),
                      syn.embedding(syn.chunk(v_rng.standard_normal(DIM), {3: 1.0}, rng=v_rng)))
        for text in ("tomato harvest", "compost seedling garden", "tomatoe mulch"):
            q = Query(text=text, embedding=None, principal=public, top_k=10, include_breakdown=True)
            seen.append((vault_size, text, [(h.memory.id, round(h.score, 5), round(h.breakdown.spaces.get("E6_lexical", -1), 4),
                                             round(h.breakdown.spaces.get("E9_hdc", -1), 4)) for h in _hits(r, q)]))
    half = len(seen) // 2
    for a, b in zip(seen[:half], seen[half:]):
        assert a[2] and a[2] == b[2], (a, b)


def test_importance_is_a_prior_in_the_final_score():
    seen = {}
    for weight in (0.0, 0.5):
        r = make_retriever(PipelineSettings(importance_weight=weight), "numpy")
        for mid, imp in (("low", 0.1), ("mid", 0.5), ("high", 0.9)):
            r.add(syn.memory(mid, "lantern festival river", importance=imp), syn.embedding())
        q = Query(text="lantern festival", embedding=None, principal=syn.admin(), top_k=3, profile="hybrid")
        seen[weight] = [(h.memory.id, h.score) for h in _hits(r, q)]
    assert [i for i, _ in seen[0.0]] == ["low", "mid", "high"]  # equal text: stored order
    assert [i for i, _ in seen[0.5]] == ["high", "mid", "low"]
    before, after = dict(seen[0.0]), dict(seen[0.5])
    assert after["low"] == pytest.approx(before["low"] * 0.6, rel=1e-4)  # 1 + 0.5 * (2 * 0.1 - 1)
    assert after["mid"] == pytest.approx(before["mid"], rel=1e-6)        # the default importance is neutral


def test_compare_by_purpose_vector_and_search_matrix():
    from teleo_server.errors import InvalidArgument

    r, _, _ = _clustered()
    topics = list(TOPICS)
    _, _, same = r.compare(f"{topics[0]}0", f"{topics[0]}1", "weighted_average", {})
    _, _, apart = r.compare(f"{topics[0]}0", f"{topics[1]}0", "weighted_average", {})
    assert same is not None and apart is not None and same > 0.9 > apart
    sims, agg, _ = r.compare(f"{topics[0]}0", f"{topics[1]}0", "weighted_average", {}, "semantic_focused")
    w = PipelineSettings().search_matrices["semantic_focused"]
    want = sum(w.get(n, 0.0) * s for n, s in sims.items()) / sum(w.get(n, 0.0) for n in sims)
    assert agg == pytest.approx(want)
    with pytest.raises(InvalidArgument, match="unknown search matrix"):
        r.compare(f"{topics[0]}0", f"{topics[1]}0", "weighted_average", {}, "nope")
