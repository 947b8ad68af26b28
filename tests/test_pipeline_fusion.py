"""Fusion methods and Compare aggregations on hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from teleo_server.errors import InvalidArgument
from teleo_server.pipeline import PipelineSettings, make_retriever
from bench.harness import memories as syn
from teleo_server.pipeline.compare import aggregate
from teleo_server.pipeline.fusion import fuse, ranks

NAN = np.nan


def test_ranks_skip_missing_scores():
    np.testing.assert_array_equal(ranks(np.array([0.2, NAN, 0.9, 0.2])), [2, np.inf, 1, 3])


def test_rrf_by_hand():
    spaces = {"a": np.array([3.0, 2.0, NAN]), "b": np.array([NAN, 1.0, 5.0])}
    got, used = fuse(spaces, {"a": 1.0, "b": 2.0}, "rrf", 60.0)
    best = 1 / 61 + 2 / 61
    want = np.array([1 / 61, 1 / 62 + 2 / 62, 2 / 61]) / best
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert used == ["a", "b"]


def test_weighted_relative_and_rrf_relative_mean():
    spaces = {"a": np.array([4.0, 2.0, 1.0]), "b": np.array([0.5, 1.0, NAN])}
    w, _ = fuse(spaces, {"a": 1.0, "b": 1.0}, "weighted", 60.0)
    np.testing.assert_allclose(w, [(1.0 + 0.5) / 2, (0.5 + 1.0) / 2, 0.25 / 2], rtol=1e-6)
    rel, _ = fuse(spaces, {"a": 1.0, "b": 1.0}, "relative", 60.0)
    np.testing.assert_allclose(rel, [(1.0 + 0.0) / 2, (1 / 3 + 1.0) / 2, 0.0], rtol=1e-6)
    add, _ = fuse(spaces, {"a": 1.0, "b": 1.0}, "rrf_relative_mean", 60.0)
    plain, _ = fuse(spaces, {"a": 1.0, "b": 1.0}, "rrf", 60.0)
    assert plain[0] == plain[1]  # mirrored ranks tie under plain RRF
    np.testing.assert_allclose(add, (plain + rel) / 2, rtol=1e-6)
    assert add[1] > add[0]  # the magnitudes break the tie


def test_additive_rrf_boosts_what_exactly_one_space_found():
    from teleo_server.pipeline.fusion import additive_rrf

    spaces = {"a": np.array([4.0, 2.0, 1.0, 3.0]), "b": np.array([0.5, 1.0, 0.9, NAN])}
    found = {"a": np.array([True, True, False, True]), "b": np.array([True, True, True, False])}
    plain, _ = fuse(spaces, {"a": 1.0, "b": 1.0}, "rrf", 60.0)
    got, used, unique = additive_rrf(spaces, found, {"a": 1.0, "b": 1.0}, 60.0, 0.1)
    assert used == ["a", "b"] and unique.tolist() == [-1, -1, 1, 0]  # c: only b found it, d: only a
    np.testing.assert_allclose(got, plain * np.array([1.0, 1.0, 1.1, 1.1]) / 1.1, rtol=1e-6)
    assert got.max() <= 1.0
    none, _, _ = additive_rrf(spaces, found, {"a": 1.0, "b": 1.0}, 60.0, 0.0)
    np.testing.assert_allclose(none, plain, rtol=1e-6)


def test_zero_weight_space_is_left_out_and_unknown_method_fails():
    spaces = {"a": np.array([1.0, 2.0]), "b": np.array([9.0, 1.0])}
    got, used = fuse(spaces, {"a": 1.0, "b": 0.0}, "rrf", 60.0)
    assert used == ["a"] and got[1] > got[0]
    with pytest.raises(ValueError):
        fuse(spaces, {"a": 1.0}, "borda", 60.0)


@pytest.mark.parametrize("aggregation, want", [
    pytest.param("weighted_average", (0.8 * 1 + 0.2 * 3) / 4, id="weighted_average"),
    pytest.param("max", 0.8, id="max"),
    pytest.param("min", 0.2, id="min"),
    pytest.param("geometric_mean", math.exp((math.log(0.8) + 3 * math.log(0.2)) / 4), id="geometric_mean"),
    pytest.param("rrf", (1 / 61 + 3 / 65) / (4 / 61), id="rrf"),
])
def test_aggregations(aggregation, want):
    got = aggregate({"x": 0.8, "y": 0.2}, aggregation, {"x": 1.0, "y": 3.0}, {"x": 1, "y": 5})
    assert got == pytest.approx(want)


def test_compare_two_memories_over_every_space():
    r = make_retriever(PipelineSettings(), "numpy")
    items = syn.corpus(120, dim=32, topics=4, seed=5, tokens=4)
    for m, e in items:
        r.add(m, e)
    same, agg_same, _ = r.compare("m0", "m0", "weighted_average", {})
    assert set(same) >= {"E1_semantic", "E6_lexical", "E9_hdc", "E12_late", "E13_splade", "E2_recency"}
    assert all(0.0 <= v <= 1.0 for v in same.values())
    assert same["E1_semantic"] == pytest.approx(1.0, abs=1e-5) and same["E6_lexical"] == pytest.approx(1.0, abs=1e-5)
    other = next(m.id for m, _ in items[1:] if m.id != "m0")
    _, agg_other, _ = r.compare("m0", other, "weighted_average", {})
    assert agg_other < agg_same
    _, rrf_self, _ = r.compare("m0", "m0", "rrf", {})
    _, rrf_other, _ = r.compare("m0", other, "rrf", {})
    assert rrf_self == pytest.approx(1.0) and rrf_other < 1.0
    with pytest.raises(InvalidArgument):
        r.compare("m0", other, "median", {})


def test_float32_ranks_sorted_as_keys_match_the_stable_sort():
    """The key sort of float32 scores ranks exactly as a stable sort does: ties by position,
    -0.0 tied with 0.0, infinities in place, NaN last."""
    from teleo_server.pipeline.fusion import ranks

    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 17, 300):
        s = rng.standard_normal(n).astype(np.float32)
        if n > 2:
            s[rng.integers(0, n, n // 3)] = np.float32(0.5)
            s[rng.integers(0, n, n // 5)] = np.nan
            s[rng.integers(0, n, n // 6)] = np.float32(-0.0)
            s[rng.integers(0, n, n // 6)] = np.float32(0.0)
            s[rng.integers(0, n, n // 9)] = -np.inf
            s[rng.integers(0, n, n // 9)] = np.inf
        want = np.full(n, np.inf)
        idx = np.flatnonzero(~np.isnan(s))
        want[idx[np.argsort(-s[idx].astype(np.float64), kind="stable")]] = np.arange(1, idx.size + 1)
        np.testing.assert_array_equal(ranks(s), want)


def test_compare_ranks_among_what_the_caller_may_read_only():
    # another tenant's copies of m0 would outrank every memory in m0's pool; a caller who cannot
    # read them gets the rrf aggregate of a store that never held them
    import dataclasses

    def build(with_other_tenant: bool):
        r = make_retriever(PipelineSettings(), "numpy")
        items = syn.corpus(60, dim=32, topics=3, seed=8, tokens=4)
        for m, e in items:
            r.add(dataclasses.replace(m, namespace="mine"), e)
        if with_other_tenant:
            first_m, first_e = items[0]
            for i in range(30):
                r.add(dataclasses.replace(first_m, id=f"theirs{i}", namespace="theirs"), first_e)
        return r

    me = syn.admin(frozenset({"mine"}))
    alone = build(False).compare("m0", "m1", "rrf", {}, principal=me)[1]
    shared = build(True)
    assert shared.compare("m0", "m1", "rrf", {}, principal=me)[1] == pytest.approx(alone)
    # every reader counts the copies: the aggregate moves, so the test can tell
    assert shared.compare("m0", "m1", "rrf", {})[1] != pytest.approx(alone)


def _linked_store(restricted_neighbour: bool):
    """a -> c and b -> d by relates_to links; c and d say the same thing, a and b nothing alike."""
    from teleo_server.domain import AccessLevel, Link, LinkType

    axis = np.eye(32, dtype=np.float32)
    r = make_retriever(PipelineSettings(), "numpy")
    level_c = AccessLevel.RESTRICTED if restricted_neighbour else AccessLevel.PUBLIC
    for mid, vec, links, level in (("c", axis[2], (), level_c), ("d", axis[2] + 0.01 * axis[3], (), AccessLevel.PUBLIC),
                                   ("a", axis[0], (Link("c", LinkType.RELATES_TO),), AccessLevel.PUBLIC),
                                   ("b", axis[1], (Link("d", LinkType.RELATES_TO),), AccessLevel.PUBLIC)):
        r.add(syn.memory(mid, f"note {mid}", access_level=level, links=links), syn.embedding(syn.chunk(vec)))
    return r


def test_compare_by_the_graph_reads_the_neighbours_the_caller_may_read():
    # the memory graph's vectors: a and b share nothing, but what each links to says the same
    reader = syn.admin()
    sims, _, _ = _linked_store(False).compare("a", "b", "weighted_average", {}, principal=reader)
    assert sims["E1_semantic"] == pytest.approx(0.5, abs=1e-6)  # (1 + cos) / 2 of orthogonal vectors
    assert sims["E8_graph"] > 0.55
    # c is restricted: a public caller's comparison is that of a store where a links to nothing
    public = syn.admin(level=syn.AccessLevel.PUBLIC)
    hidden = _linked_store(True)
    assert hidden.compare("a", "b", "weighted_average", {}, principal=public)[0]["E8_graph"] == pytest.approx(0.5, abs=1e-6)
    assert hidden.compare("a", "b", "weighted_average", {}, principal=reader)[0]["E8_graph"] > 0.55
