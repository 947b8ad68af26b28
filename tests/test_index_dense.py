"""Dense index: exact search, Matryoshka truncation with rescoring, HNSW above the threshold."""

from __future__ import annotations

import numpy as np
import pytest

from teleo_server.compute.backend import ops
from teleo_server.index.dense import DenseIndex
from bench.harness.memories import unit

OPS = ops("numpy")


def _data(n: int, d: int, seed: int = 0) -> np.ndarray:
    return unit(np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32))


def test_exact_search_matches_brute_force_and_respects_mask():
    x = _data(500, 32)
    idx = DenseIndex(32)
    idx.add(x[:200])
    idx.add(x[200:])
    q = x[17]
    mask = np.ones(500, dtype=bool)
    mask[17] = False
    rows, scores = idx.search(OPS, q, 10, mask)
    brute = x @ q
    brute[17] = -np.inf
    np.testing.assert_array_equal(rows, np.argsort(-brute, kind="stable")[:10])
    np.testing.assert_allclose(scores, brute[rows], rtol=1e-5)
    idx.remove(np.array([rows[0]]))
    rows2, _ = idx.search(OPS, q, 10, mask)
    assert rows[0] not in rows2


def test_truncated_search_rescored_at_full_dimension():
    # vectors whose energy sits in the first 16 dims: truncation loses little
    rng = np.random.default_rng(2)
    x = rng.standard_normal((400, 64)).astype(np.float32)
    x[:, 16:] *= 0.05
    x = unit(x)
    idx = DenseIndex(64, truncations=(16, 32), oversample=4)
    idx.add(x)
    rows, scores = idx.search(OPS, x[5], 5, dim=16)
    assert rows[0] == 5 and idx.last_scan == ("exact", 16)
    np.testing.assert_allclose(scores, x[rows] @ x[5], rtol=1e-5)
    chosen = idx.calibrate(OPS, threshold=0.9, k=5)
    assert chosen == 16 and idx.recall_by_dim[16] >= 0.9


def test_a_prefix_pass_that_would_gather_most_rows_is_one_exact_scan():
    """A Matryoshka pass reads a prefix of every row and then gathers each fetched row at full
    dimension; when that costs more than one streaming pass over all the rows, the search is that
    exact pass (memoised for scoring the candidates next), and says so."""
    x = _data(400, 64, seed=5)
    idx = DenseIndex(64, truncations=(16,), oversample=4)
    idx.add(x)
    assert idx.scan_dim(5, 16, "numpy") == 16   # a quarter of each row, then 20 rows gathered
    assert idx.scan_dim(60, 16, "numpy") == 64  # 240 of 400 rows gathered: more than one pass
    rows, scores = idx.search(OPS, x[7], 60, dim=16)
    assert idx.last_scan == ("exact", 64)  # the prefix pass would cost more: a full one ran
    exact_rows, exact_scores = idx.search(OPS, x[7], 60)
    np.testing.assert_array_equal(rows, exact_rows)
    np.testing.assert_allclose(scores, exact_scores, rtol=1e-6)
    assert idx._memoised(x[7]) is not None
    truncated = idx.prefix_scores(16, unit(x[7:8, :16])[0])
    assert set(np.argsort(-truncated)[:60]) != set(rows.tolist())  # a prefix alone would rank otherwise


def test_calibration_keeps_full_dimension_for_isotropic_vectors():
    idx = DenseIndex(64, truncations=(8,), oversample=1)
    idx.add(_data(600, 64, seed=3))
    assert idx.calibrate(OPS, threshold=0.95, k=10) == 64
    assert idx.recall_by_dim[8] < 0.95


def test_hnsw_above_threshold_finds_neighbours_and_honours_deletes_and_masks():
    x = _data(3000, 32, seed=4)
    idx = DenseIndex(32, exact_threshold=1000, hnsw_ef_search=128)
    idx.add(x[:1500])
    assert idx.uses_hnsw
    idx.add(x[1500:])
    hits = 0
    for qi in range(0, 3000, 150):
        rows, _ = idx.search(OPS, x[qi], 10)
        truth = np.argsort(-(x @ x[qi]))[:10]
        hits += len(set(rows.tolist()) & set(truth.tolist()))
    assert hits / (20 * 10) >= 0.9
    idx.remove(np.array([42]))
    assert 42 not in idx.search(OPS, x[42], 5)[0]
    mask = np.zeros(3000, dtype=bool)
    mask[::4] = True
    rows, _ = idx.search(OPS, x[43], 5, mask)
    assert rows.size == 5 and np.all(rows % 4 == 0)  # fewer rows than the threshold: exact over them
    assert idx.last_scan == ("exact", 32)  # what a report of this search names, HNSW or not
    truth = np.flatnonzero(mask)[np.argsort(-(x[mask] @ x[43]))[:5]]
    np.testing.assert_array_equal(np.sort(rows), np.sort(truth))
    mask[::2] = True
    rows, _ = idx.search(OPS, x[43], 5, mask)
    assert rows.size == 5 and np.all(rows % 2 == 0)  # HNSW, post-filtered
    assert idx.last_scan == ("hnsw", 32)


def test_unfiltered_searches_take_the_graph_earlier_than_filtered_ones():
    x = _data(1200, 32, seed=6)
    idx = DenseIndex(32, exact_threshold=5000, hnsw_ef_search=128, unfiltered_threshold=1000)
    idx.add(x[:900])
    assert not idx.uses_hnsw  # below both thresholds: no graph is built
    idx.add(x[900:])
    assert idx.uses_hnsw and idx.n_alive == 1200
    rows, _ = idx.search(OPS, x[7], 5)
    assert idx.last_scan == ("hnsw", 32) and rows[0] == 7 and idx.searches_graph()
    everything = np.ones(1200, dtype=bool)
    idx.search(OPS, x[7], 5, everything)  # a mask that keeps every row is no filter
    assert idx.last_scan == ("hnsw", 32) and idx.searches_graph(everything)
    some = everything.copy()
    some[::7] = False
    rows, _ = idx.search(OPS, x[8], 5, some)  # a filter: exact below exact_threshold
    assert idx.last_scan == ("exact", 32) and not idx.searches_graph(some)
    truth = np.flatnonzero(some)[np.argsort(-(x[some] @ x[8]))[:5]]
    np.testing.assert_array_equal(rows, truth)
    # removing rows (twice over, and the same row twice) leaves the count of rows left exact
    idx.remove(np.array([3, 3, 4]))
    idx.remove(np.array([4]))
    assert idx.n_alive == 1198
    idx.search(OPS, x[9], 5)
    assert idx.last_scan == ("hnsw", 32)  # every row left may be returned: still unfiltered
    idx.remove(np.arange(10, 210))  # 998 rows left: under the unfiltered threshold
    rows, _ = idx.search(OPS, x[9], 5)
    assert idx.last_scan == ("exact", 32) and not set(rows.tolist()) & set(range(10, 210))
    idx.compact(np.flatnonzero(idx.alive[: idx.n]))
    assert idx.n == idx.n_alive == 998 and not idx.uses_hnsw
    # without the second threshold, filtered or not, the graph waits for exact_threshold
    plain = DenseIndex(32, exact_threshold=5000)
    plain.add(x)
    assert not plain.uses_hnsw and plain.unfiltered_threshold == 5000


def test_the_semantic_space_takes_the_graph_for_unfiltered_searches_on_the_host_only():
    from teleo_server.index.catalog import Catalog
    from teleo_server.pipeline_settings import PipelineSettings
    from teleo_server.spaces.semantic import SemanticSpace

    settings = PipelineSettings(spaces={"E1_semantic": {"unfiltered_threshold": 1000, "exact_threshold": 5000}})
    space = SemanticSpace(settings, Catalog())
    space.make_backend(32)
    assert space.index is not None and space.index.unfiltered_threshold == 1000
    space.runtime = "cuda"  # a retriever that keeps device rows (its spaces' built-in rows stay on the host)
    space.make_backend(32)
    assert space.index.unfiltered_threshold == 5000  # a device scans every row faster than a walk


def test_candidate_scores_are_the_same_whether_gathered_or_from_one_full_pass():
    x = _data(400, 24, seed=3)
    idx = DenseIndex(24)
    idx.add(x[:300])
    q = x[5]
    few, many = np.array([3, 250, 7]), np.arange(0, 300, 2)  # 3 rows gathered; 150 > n/4 from a full pass
    np.testing.assert_allclose(idx.score(few, q), x[few] @ q, rtol=1e-5)
    np.testing.assert_allclose(idx.score(many, q), x[many] @ q, rtol=1e-5)
    idx.add(x[300:])  # the full pass is redone for the grown matrix, never served stale
    rows = np.arange(400)
    np.testing.assert_allclose(idx.score(rows, q), x @ q, rtol=1e-5)
    np.testing.assert_allclose(idx.score(rows, x[6]), x @ x[6], rtol=1e-5)
    # more rows than one gathered block (and fewer than a quarter of the index), in any order
    big = _data(1_300, 24, seed=4)
    idx = DenseIndex(24)
    idx.add(big)
    picked = np.random.default_rng(5).choice(1_300, 320, replace=True)
    np.testing.assert_allclose(idx.score(picked, big[9]), big[picked] @ big[9], rtol=1e-5)
    # after an exact search, a few rows are read from its full pass; a write retires that pass
    idx.search(OPS, big[9], 5)
    np.testing.assert_allclose(idx.score(few, big[9]), big[few] @ big[9], rtol=1e-5)
    idx.remove(np.array([3]))
    idx.add(unit(np.ones((1, 24), np.float32)))
    np.testing.assert_allclose(idx.score(np.array([3, 1_300]), big[9]),
                               [big[3] @ big[9], unit(np.ones(24, np.float32)) @ big[9]], rtol=1e-5)


@pytest.mark.parametrize("values", ["float32", "int8"])
def test_gathered_candidate_scores_have_the_bits_of_the_full_pass(values):
    """A candidate scores the same whether its row was gathered or read in the full scan: a pool
    that mixes both never reorders two memories by rounding alone (int8 rows: the product is
    scaled per row in both paths)."""
    x = _data(2_000, 48, seed=11)
    idx = DenseIndex(48, values=values)
    idx.add(x)
    q = x[17]
    rows = np.random.default_rng(12).choice(2_000, 300, replace=False)  # gathered: 300 < n / 4
    gathered = idx.score(rows, q)
    full = idx.full_scores(q)[rows]
    assert gathered.dtype == np.float32
    np.testing.assert_array_equal(gathered, full)


def test_half_precision_rows_search_like_float32_and_take_fewer_bytes():
    """float16 full rows (an option) rank as float32 rows do, within float16's rounding, truncated
    first passes included."""
    from teleo_server.compute.backend import ops

    rng = np.random.default_rng(11)
    x = rng.standard_normal((600, 64)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    full, half = DenseIndex(64, (16,)), DenseIndex(64, (16,), values="float16")
    for idx in (full, half):
        idx.add(x)
    assert half.matrix.dtype == np.float16 and full.matrix.dtype == np.float32
    assert half.nbytes < full.nbytes
    q = x[:20] + 0.05 * rng.standard_normal((20, 64)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    for v in q:
        for dim in (None, 16):
            a_ids, a_s = full.search(ops("numpy"), v, 10, dim=dim)
            b_ids, b_s = half.search(ops("numpy"), v, 10, dim=dim)
            assert a_ids[0] == b_ids[0]
            np.testing.assert_allclose(b_s, full.score(b_ids, v), atol=2e-3)
    with pytest.raises(ValueError, match="float32, float16, int8"):
        DenseIndex(8, values="int4")


def test_int8_rows_search_like_float32_in_a_quarter_of_the_bytes():
    """int8 rows with a scale each: the exact scan, the truncated first pass, scoring given rows,
    decoded vectors and compaction all stay within the codes' rounding of the float32 index."""
    from teleo_server.compute.backend import ops

    rng = np.random.default_rng(13)
    x = rng.standard_normal((700, 64)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    full, codes = DenseIndex(64, (16,)), DenseIndex(64, (16,), values="int8")
    for idx in (full, codes):
        idx.add(x[:300])
        idx.add(x[300:])  # a second add grows the codes and their scales together
    assert codes.matrix.dtype == np.int8
    assert codes.nbytes == 700 * (64 + 4 + 4) + 700 < full.nbytes / 3
    # each value within half its row's scale (max|x| / 254)
    half_step = np.abs(x).max(axis=1, keepdims=True) / 254 + 1e-7
    assert np.all(np.abs(codes.vectors(np.arange(700)) - x) <= half_step)
    np.testing.assert_allclose(codes.vectors(slice(10, 20)), codes.vectors(np.arange(10, 20)))
    q = x[:30] + 0.05 * rng.standard_normal((30, 64)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    agree = 0
    for v in q:
        for dim in (None, 16):
            a_ids, _ = full.search(ops("numpy"), v, 10, dim=dim)
            b_ids, b_s = codes.search(ops("numpy"), v, 10, dim=dim)
            assert a_ids[0] == b_ids[0]
            agree += len(set(a_ids.tolist()) & set(b_ids.tolist()))
            np.testing.assert_allclose(b_s, full.score(b_ids, v), atol=5e-3)
        rows = rng.choice(700, 50, replace=False)
        np.testing.assert_allclose(codes.score(rows, v), full.score(rows, v), atol=5e-3)
    assert agree >= 0.95 * 30 * 2 * 10
    np.testing.assert_allclose(codes.prefix_scores(16, x[0, :16] / np.linalg.norm(x[0, :16])),
                               full.prefix_scores(16, x[0, :16] / np.linalg.norm(x[0, :16])), atol=1e-2)
    before = codes.vectors(np.arange(0, 700, 7))
    codes.compact(np.arange(0, 700, 7))  # compaction re-quantises decoded rows to the same codes
    assert codes.n == 100
    np.testing.assert_array_equal(codes.vectors(np.arange(100)), before)


def test_a_truncated_pass_scores_prefixes_in_place_with_stored_norms():
    """No re-normalised copy per Matryoshka dim: the prefix scan divides by a stored prefix norm,
    so a row costs 4 bytes per truncation, and the scores are the prefix cosines."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((300, 48)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    idx = DenseIndex(48, (8, 16))
    idx.add(x[:100])
    idx.add(x[100:])  # a second add grows the buffers
    assert idx.nbytes == 300 * (48 * 4 + 2 * 4) + 300
    q = rng.standard_normal(16).astype(np.float32)
    q /= np.linalg.norm(q)
    prefix = x[:, :16] / np.linalg.norm(x[:, :16], axis=1, keepdims=True)
    np.testing.assert_allclose(idx.prefix_scores(16, q), prefix @ q, rtol=1e-5, atol=1e-6)
    idx.compact(np.arange(0, 300, 3))
    np.testing.assert_allclose(idx.prefix_scores(16, q), prefix[::3] @ q, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("values", ["float32", "int8"])
def test_fit_shrinks_the_buffers_to_the_rows_and_keeps_every_answer(values):
    """After a bulk load the doubled buffers are cut to the rows held; searches answer as before
    and a later add grows them again."""
    from teleo_server.compute.backend import ops

    rng = np.random.default_rng(14)
    x = rng.standard_normal((330, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    idx = DenseIndex(32, (8,), values=values)
    for lo in range(0, 300, 30):
        idx.add(x[lo : lo + 30])
    idx.remove(np.array([3, 4]))
    assert idx._m.shape[0] > 300
    before = [idx.search(ops("numpy"), v, 5, dim=d) for v in x[:10] for d in (None, 8)]
    buffer = id(idx._m)
    idx.fit()
    assert idx._m.shape[0] == 300 and idx.alive.size == 300 and idx.n == 300
    assert id(idx._m) == buffer, "nothing else held the rows: cut in place, never held twice"
    after = [idx.search(ops("numpy"), v, 5, dim=d) for v in x[:10] for d in (None, 8)]
    for (a_ids, a_s), (b_ids, b_s) in zip(before, after):
        np.testing.assert_array_equal(a_ids, b_ids)
        np.testing.assert_array_equal(a_s, b_s)
    assert 3 not in idx.search(ops("numpy"), x[3], 5)[0].tolist()
    idx.add(x[300:])
    ids, _ = idx.search(ops("numpy"), x[320], 1)
    assert ids.tolist() == [320]
