import numpy as np
import pytest

try:
    from _backends import BACKEND_PARAMS, backend_ops
except ImportError:  # tests/ imported as a package
    from tests._backends import BACKEND_PARAMS, backend_ops


@pytest.fixture(params=BACKEND_PARAMS)
def ops(request):
    return backend_ops(request.param)


def naive_topk(scores, k, mask=None):
    rows = [
        (float(s), i)
        for i, s in enumerate(np.asarray(scores, dtype=np.float32))
        if not np.isnan(s) and (mask is None or mask[i])
    ]
    rows.sort(key=lambda r: (-r[0], r[1]))
    rows = rows[:k]
    return [i for _, i in rows], [s for s, _ in rows]


def check(ops, scores, k, mask=None):
    ids, vals = ops.topk(scores, k, mask=mask)
    want_ids, want_vals = naive_topk(scores, k, mask)
    assert ids.dtype == np.int32 and vals.dtype == np.float32
    assert ids.tolist() == want_ids
    np.testing.assert_array_equal(vals, np.asarray(want_vals, dtype=np.float32))


@pytest.mark.parametrize("k", [0, 1, 7, 49, 50, 51, 1000])
def test_topk_ties_break_by_lower_id(ops, k):
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 5, size=50).astype(np.float32)  # many exact ties
    check(ops, scores, k)


@pytest.mark.parametrize("k", [1, 10, 300])
def test_topk_with_mask(ops, k):
    rng = np.random.default_rng(2)
    scores = rng.standard_normal(1000).astype(np.float32)
    mask = rng.random(1000) < 0.3
    check(ops, scores, k, mask)


def test_topk_all_masked_is_empty(ops):
    ids, vals = ops.topk(np.ones(20, np.float32), 5, mask=np.zeros(20, bool))
    assert ids.shape == (0,) and vals.shape == (0,)


def test_topk_empty_input(ops):
    ids, vals = ops.topk(np.zeros(0, np.float32), 3)
    assert ids.shape == (0,) and vals.shape == (0,)


def test_topk_nan_never_qualifies_and_signed_zeros_tie(ops):
    scores = np.array([np.nan, -0.0, 0.0, -1.0, np.nan, 2.0, -np.inf], np.float32)
    ids, vals = ops.topk(scores, 10)
    assert ids.tolist() == [5, 1, 2, 3, 6]
    assert vals[0] == 2.0 and vals[-1] == -np.inf


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_topk_accepts_float_dtypes(ops, dtype):
    rng = np.random.default_rng(3)
    scores = rng.standard_normal(257).astype(dtype)
    check(ops, scores, 17)


def test_topk_large_random_matches_full_sort(ops):
    rng = np.random.default_rng(4)
    scores = rng.standard_normal(100_000).astype(np.float32)
    scores[rng.integers(0, 100_000, 5000)] = 0.5  # a tie block that straddles the cut
    mask = rng.random(100_000) < 0.9
    ids, vals = ops.topk(scores, 2000, mask=mask)
    order = np.lexsort((np.arange(100_000), -np.where(mask, scores, -np.inf)))[:2000]
    assert ids.tolist() == order.tolist()
    np.testing.assert_array_equal(vals, scores[order])


def test_topk_rejects_negative_k(ops):
    with pytest.raises(ValueError):
        ops.topk(np.ones(3, np.float32), -1)


@pytest.mark.parametrize("pattern", ["few_valid", "minus_inf", "sampled_rows_best", "ties_everywhere", "k_large"])
def test_topk_over_many_rows_is_exact_whatever_the_sample_sees(ops, pattern):
    """Past SAMPLED_FROM rows the host selection starts from a sampled threshold; the answer must
    be the exact top k whatever the layout of the scores."""
    n = 200_003
    rng = np.random.default_rng(7)
    scores = rng.random(n).astype(np.float32)
    mask = None
    k = 1_000
    if pattern == "few_valid":  # fewer qualifying rows than the sample can place
        mask = np.zeros(n, bool)
        mask[rng.integers(0, n, 1_500)] = True
    elif pattern == "minus_inf":  # -inf is a score like any other
        scores[rng.random(n) < 0.995] = -np.inf
    elif pattern == "sampled_rows_best":  # the best rows are exactly the ones a stride would sample
        scores[:] = 0.25
        scores[:: n // (1 << 14)] = 1.0
        scores[5] = 2.0
    elif pattern == "ties_everywhere":
        scores = rng.integers(0, 3, n).astype(np.float32)
        mask = rng.random(n) < 0.5
    elif pattern == "k_large":
        k = 90_000
    ids, vals = ops.topk(scores, k, mask=mask)
    keyed = np.where(mask, scores, np.nan) if mask is not None else scores
    valid = ~np.isnan(keyed)
    order = np.flatnonzero(valid)[np.lexsort((np.flatnonzero(valid), -keyed[valid]))][:k]
    assert ids.tolist() == order.tolist()
    np.testing.assert_array_equal(vals, scores[order])
