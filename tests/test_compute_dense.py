import numpy as np
import pytest

from teleo_server.compute.dense import quantize_rows, quantized_scores
from teleo_server.compute.errors import InternalValueError, InvalidValue

try:
    from _backends import BACKEND_PARAMS, backend_ops
except ImportError:  # tests/ imported as a package
    from tests._backends import BACKEND_PARAMS, backend_ops


@pytest.fixture(params=BACKEND_PARAMS)
def ops(request):
    return backend_ops(request.param)


def unit_rows(rng, n, dim, dtype=np.float16):
    m = rng.standard_normal((n, dim))
    return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(dtype)


def naive_dense(matrix, query, k, candidates=None, mask=None, dim=None):
    d = matrix.shape[1] if dim is None else dim
    q = query.astype(np.float64)[:d]
    rows = range(matrix.shape[0]) if candidates is None else sorted(set(candidates.tolist()))
    scored = []
    for r in rows:
        if mask is not None and not mask[r]:
            continue
        x = matrix[r, :d].astype(np.float64)
        s = float(x @ q)
        if d < matrix.shape[1]:
            denom = np.linalg.norm(x) * np.linalg.norm(q)
            s = s / denom if denom > 0 else 0.0
        scored.append((s, r))
    scored.sort(key=lambda t: (-t[0], t[1]))
    return [r for _, r in scored[:k]], np.asarray([s for s, _ in scored[:k]])


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("dim", [None, 33, 64])
@pytest.mark.parametrize("k", [0, 1, 10, 500, 600])
def test_dense_topk_matches_naive(ops, dtype, dim, k):
    rng = np.random.default_rng(30)
    matrix = unit_rows(rng, 500, 96, dtype)
    query = rng.standard_normal(96).astype(np.float32)
    query /= np.linalg.norm(query)
    ids, scores = ops.dense_topk(matrix, query, k, dim=dim)
    want_ids, want_scores = naive_dense(matrix, query, k, dim=dim)
    assert ids.dtype == np.int32 and scores.dtype == np.float32
    assert ids.tolist() == want_ids
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)


def test_dense_topk_candidates_and_mask(ops):
    rng = np.random.default_rng(31)
    matrix = unit_rows(rng, 300, 40)
    query = unit_rows(rng, 1, 40, np.float32)[0]
    candidates = rng.integers(0, 300, 120).astype(np.int32)  # with repeats
    mask = rng.random(300) < 0.5
    ids, scores = ops.dense_topk(matrix, query, 25, candidates=candidates, mask=mask)
    want_ids, want_scores = naive_dense(matrix, query, 25, candidates, mask)
    assert ids.tolist() == want_ids
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)
    assert set(ids.tolist()) <= set(candidates.tolist())


def test_dense_topk_ties_by_row_id(ops):
    matrix = np.tile(np.array([[0.6, 0.8], [1.0, 0.0]], np.float16), (5, 1))  # rows repeat exactly
    ids, scores = ops.dense_topk(matrix, np.array([1.0, 0.0], np.float32), 7)
    assert ids.tolist() == [1, 3, 5, 7, 9, 0, 2]
    assert scores[0] == 1.0


def test_dense_topk_all_masked_and_empty_candidates(ops):
    rng = np.random.default_rng(32)
    matrix = unit_rows(rng, 50, 8)
    query = unit_rows(rng, 1, 8, np.float32)[0]
    assert ops.dense_topk(matrix, query, 5, mask=np.zeros(50, bool))[0].size == 0
    assert ops.dense_topk(matrix, query, 5, candidates=np.zeros(0, np.int32))[0].size == 0


def test_dense_prefix_with_zero_norm_row_scores_zero(ops):
    matrix = np.array([[0.0, 0.0, 1.0], [0.6, 0.8, 0.0]], np.float32)
    ids, scores = ops.dense_topk(matrix, np.array([0.6, 0.8, 0.0], np.float32), 2, dim=2)
    assert ids.tolist() == [1, 0]
    np.testing.assert_allclose(scores, [1.0, 0.0], atol=1e-6)


def test_dense_rejects_bad_dim(ops):
    matrix = np.eye(4, dtype=np.float32)
    with pytest.raises(ValueError):
        ops.dense_topk(matrix, np.ones(4, np.float32), 1, dim=5)


def test_quantized_scores_are_the_widened_product_in_blocks():
    """int8 rows: every row of several blocks (and a ragged last one) scores as its decoded float
    row does, on a prefix too; codes keep each value within half its row's scale."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((600, 40)).astype(np.float32)
    x[7] = 0.0  # an all-zero row keeps scale 0 and scores 0
    codes, scales = quantize_rows(x)
    assert codes.dtype == np.int8 and scales.dtype == np.float32 and scales[7] == 0
    decoded = codes.astype(np.float32) * scales[:, None]
    assert np.all(np.abs(decoded - x) <= scales[:, None] / 2 + 1e-6)
    q = rng.standard_normal(40).astype(np.float32)
    np.testing.assert_allclose(quantized_scores(codes, scales, q), decoded @ q, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(quantized_scores(codes, scales, q[:12], dim=12), decoded[:, :12] @ q[:12],
                               rtol=1e-5, atol=1e-5)
    assert quantized_scores(codes[:0], scales[:0], q).shape == (0,)
    with pytest.raises(InvalidValue):
        quantized_scores(codes, scales, q, dim=41)
    with pytest.raises(InternalValueError):
        quantized_scores(decoded, scales, q)
