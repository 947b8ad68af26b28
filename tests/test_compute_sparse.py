import numpy as np
import pytest

try:
    from _backends import BACKEND_PARAMS, backend_ops
except ImportError:  # tests/ imported as a package
    from tests._backends import BACKEND_PARAMS, backend_ops


@pytest.fixture(params=BACKEND_PARAMS)
def ops(request):
    return backend_ops(request.param)


def build_index(postings, vocab):
    """CSC from {term: {row: weight}}."""
    indptr, indices, data = [0], [], []
    for t in range(vocab):
        for row, w in sorted(postings.get(t, {}).items()):
            indices.append(row)
            data.append(w)
        indptr.append(len(indices))
    return (
        np.asarray(indptr, np.int64),
        np.asarray(indices, np.int32),
        np.asarray(data, np.float32),
    )


def random_postings(rng, vocab, n_rows, density, integer=False):
    postings = {}
    for t in range(vocab):
        rows = np.flatnonzero(rng.random(n_rows) < density)
        if integer:
            weights = rng.integers(1, 4, rows.size).astype(float)
        else:
            weights = rng.random(rows.size) + 0.01
        postings[t] = dict(zip(rows.tolist(), weights.tolist()))
    return postings


def naive_scores(postings, n_rows, q_ids, q_weights):
    out = [0.0] * n_rows
    for t, w in zip(q_ids.tolist(), q_weights.tolist()):
        for row, v in postings.get(t, {}).items():
            out[row] += float(np.float32(v)) * float(np.float32(w))
    return np.asarray(out)


def naive_topk(scores, k, mask=None):
    rows = [(s, i) for i, s in enumerate(scores) if s > 0 and (mask is None or mask[i])]
    rows.sort(key=lambda r: (-r[0], r[1]))
    return [i for _, i in rows[:k]]


def test_spmv_scores_match_naive_with_oov_and_repeats(ops):
    rng = np.random.default_rng(10)
    vocab, n_rows = 40, 300
    postings = random_postings(rng, vocab, n_rows, 0.05)
    index = build_index(postings, vocab)
    q_ids = np.array([3, 3, 17, 39, 40, 10_000, -1, 0], np.int32)  # repeat, OOV, negative
    q_w = rng.random(q_ids.size).astype(np.float32) + 0.1
    got = ops.spmv_scores(*index, n_rows, q_ids, q_w)
    assert got.dtype == np.float32 and got.shape == (n_rows,)
    np.testing.assert_allclose(got, naive_scores(postings, n_rows, q_ids, q_w), rtol=1e-5, atol=1e-6)
    # the indexes keep int32 offsets while their entries fit: the same scores
    narrow = (index[0].astype(np.int32), *index[1:])
    np.testing.assert_array_equal(ops.spmv_scores(*narrow, n_rows, q_ids, q_w), got)


def test_spmv_scores_compiled_and_bincount_paths_give_the_same_bits(monkeypatch):
    # many postings go through SciPy's CSC mat-vec, few through one bincount: the same float64
    # products in the same order, so the reference gives the same bits either way
    import teleo_server.compute.sparse as sparse

    rng = np.random.default_rng(12)
    vocab, n_rows = 60, 2_000
    index = build_index(random_postings(rng, vocab, n_rows, 0.3), vocab)
    q_ids = np.array([5, 5, 17, 59, 60, -3, 0, 33], np.int32)  # repeat, OOV, negative
    q_w = rng.random(q_ids.size).astype(np.float32) + 0.1
    got = {}
    # the bincount path copies a few terms' postings slice by slice and gathers many by position
    for start, sliced in ((0, 64), (10**12, 64), (10**12, 0)):
        monkeypatch.setattr(sparse, "COMPILED_FROM", start)
        monkeypatch.setattr(sparse, "SLICED_UP_TO", sliced)
        got[start, sliced] = sparse.spmv_scores(*index, n_rows, q_ids, q_w)
        with pytest.raises(sparse.InternalValueError, match="outside"):
            sparse.spmv_scores(*index, n_rows - 1, q_ids, q_w)  # a posting names row n_rows - 1
        negative = (index[0], index[1].astype(np.int32).copy(), index[2])
        negative[1][int(index[0][17])] = -1  # the first posting of a query term
        with pytest.raises(sparse.InternalValueError, match="outside"):
            sparse.spmv_scores(*negative, n_rows, q_ids, q_w)
    assert got[0, 64].dtype == np.float32 and np.count_nonzero(got[0, 64]) > n_rows // 2
    np.testing.assert_array_equal(got[0, 64], got[10**12, 64])
    np.testing.assert_array_equal(got[0, 64], got[10**12, 0])


@pytest.mark.parametrize("k", [0, 1, 5, 299, 300, 1000])
def test_spmv_topk_orders_ties_by_row_id(ops, k):
    rng = np.random.default_rng(11)
    vocab, n_rows = 12, 300
    # Small integer weights: sums are exact in float32 and ties are frequent.
    postings = random_postings(rng, vocab, n_rows, 0.2, integer=True)
    index = build_index(postings, vocab)
    q_ids = np.array([0, 4, 7, 11], np.int32)
    q_w = np.array([1, 2, 1, 1], np.float32)
    ids, scores = ops.spmv_topk(*index, n_rows, q_ids, q_w, k)
    want = naive_topk(naive_scores(postings, n_rows, q_ids, q_w), k)
    assert ids.tolist() == want
    assert np.all(scores > 0) and np.all(np.diff(scores) <= 0)


def test_spmv_topk_excludes_nonpositive_and_masked(ops):
    postings = {0: {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0}, 1: {1: -5.0, 4: 1.0}}
    index = build_index(postings, 2)
    mask = np.array([True, True, True, False, True, True])
    ids, scores = ops.spmv_topk(*index, 6, np.array([0, 1], np.int32), np.ones(2, np.float32), 10, mask=mask)
    # row 1 sums to -3, row 3 is masked, row 5 has no posting
    assert ids.tolist() == [2, 0, 4]
    np.testing.assert_array_equal(scores, np.array([3.0, 1.0, 1.0], np.float32))


def test_spmv_all_masked_returns_nothing(ops):
    index = build_index({0: {0: 1.0, 1: 1.0}}, 1)
    ids, scores = ops.spmv_topk(*index, 2, np.array([0], np.int32), np.ones(1, np.float32), 5, mask=np.zeros(2, bool))
    assert ids.size == 0 and scores.size == 0


def test_spmv_empty_index_and_empty_query(ops):
    empty = build_index({}, 0)  # V = 0: indptr == [0]
    assert ops.spmv_scores(*empty, 4, np.array([0, 1], np.int32), np.ones(2, np.float32)).tolist() == [0.0] * 4
    index = build_index({0: {1: 1.0}}, 3)
    got = ops.spmv_scores(*index, 3, np.zeros(0, np.int32), np.zeros(0, np.float32))
    assert got.tolist() == [0.0, 0.0, 0.0]
    ids, _ = ops.spmv_topk(*index, 0, np.zeros(0, np.int32), np.zeros(0, np.float32), 5)
    assert ids.size == 0


def test_spmv_many_query_terms(ops):
    rng = np.random.default_rng(12)
    vocab, n_rows = 3000, 500
    postings = random_postings(rng, vocab, n_rows, 0.002)
    index = build_index(postings, vocab)
    q_ids = rng.integers(0, vocab + 100, 2500).astype(np.int32)  # more terms than one launch chunk
    q_w = rng.random(2500).astype(np.float32)
    got = ops.spmv_scores(*index, n_rows, q_ids, q_w)
    np.testing.assert_allclose(got, naive_scores(postings, n_rows, q_ids, q_w), rtol=1e-5, atol=1e-5)


def test_spmv_rejects_inconsistent_index(ops):
    indptr = np.array([0, 3], np.int64)
    with pytest.raises(ValueError):
        ops.spmv_scores(indptr, np.zeros(2, np.int32), np.zeros(2, np.float32), 4, np.zeros(1, np.int32), np.ones(1, np.float32))
