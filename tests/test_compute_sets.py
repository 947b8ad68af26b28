"""The sort-based set helpers agree with NumPy's np.unique / np.isin on every input shape."""

import numpy as np
import pytest

from teleo_server.compute.sets import distinct, distinct_first, distinct_inverse, group_max, group_sum, member


@pytest.mark.parametrize("n, hi, dtype", [(0, 5, np.int64), (1, 5, np.int64), (50, 5, np.int8),
                                          (5_000, 100_000, np.int64), (5_000, 300, np.int32)])
def test_distinct_agrees_with_numpy(n, hi, dtype):
    x = np.random.default_rng(n).integers(0, hi, n).astype(dtype)
    np.testing.assert_array_equal(distinct(x), np.unique(x))
    u, first = distinct_first(x)
    nu, nfirst = np.unique(x, return_index=True)
    np.testing.assert_array_equal(u, nu)
    np.testing.assert_array_equal(first, nfirst)
    u, inv = distinct_inverse(x)
    np.testing.assert_array_equal(u[inv], x)
    np.testing.assert_array_equal(inv, np.unique(x, return_inverse=True)[1].ravel())


def test_first_occurrence_is_the_earliest_position():
    x = np.array([7, 3, 7, 3, 1, 7])
    u, first = distinct_first(x)
    assert u.tolist() == [1, 3, 7] and first.tolist() == [4, 1, 0]


@pytest.mark.parametrize("n_of", [0, 1, 3, 8, 9, 300])
def test_member_agrees_with_isin(n_of):
    rng = np.random.default_rng(n_of)
    values = rng.integers(0, 1_000, 4_000)
    of = rng.integers(0, 1_000, n_of)
    np.testing.assert_array_equal(member(values, of), np.isin(values, of))
    # values beyond the table's largest entry, and a 2-D shape kept
    grid = np.array([[0, 999_999], [int(of[0]) if n_of else 5, -1]])
    np.testing.assert_array_equal(member(grid, of), np.isin(grid, of))


def test_member_of_strings():
    names = np.array(["alpha", "beta", "gamma", "delta"])
    assert member(names, np.array(["gamma", "alpha", "zeta"])).tolist() == [True, False, True, False]


@pytest.mark.parametrize("n_keys, n", [(0, 10), (30, 100_000), (50_000, 1_000)])
def test_group_sum_agrees_with_bincount(n_keys, n):
    rng = np.random.default_rng(n_keys)
    keys = rng.integers(0, n, n_keys)
    values = rng.standard_normal(n_keys)
    full = np.bincount(keys, weights=values, minlength=n)
    got_keys, sums = group_sum(keys, values, n)
    expected = np.flatnonzero(full)
    np.testing.assert_array_equal(got_keys, expected)
    np.testing.assert_array_equal(sums, full[expected])  # same order of additions: bit-identical


def test_group_sum_drops_keys_that_sum_to_zero():
    keys, sums = group_sum(np.array([4, 2, 4]), np.array([1.5, 2.0, -1.5]), 1_000)
    assert keys.tolist() == [2] and sums.tolist() == [2.0]


@pytest.mark.parametrize("shuffled", [False, True])
def test_group_max_takes_each_keys_largest_value(shuffled):
    rng = np.random.default_rng(7)
    keys = np.sort(rng.integers(0, 50, 400))
    values = rng.standard_normal(400).astype(np.float32)
    if shuffled:
        order = rng.permutation(400)
        keys, values = keys[order], values[order]
    got_keys, maxima = group_max(keys, values)
    want = {int(k): values[keys == k].max() for k in np.unique(keys)}
    assert got_keys.tolist() == sorted(want) and maxima.dtype == np.float32
    np.testing.assert_array_equal(maxima, [want[k] for k in got_keys.tolist()])
    assert group_max(np.zeros(0, np.int64), np.zeros(0, np.float32))[0].size == 0


@pytest.mark.parametrize("n", [10, 2_000, 200_000])
def test_distinct_within_a_bound_takes_either_path_alike(n):
    x = np.random.default_rng(n).integers(0, 1_000, n)
    np.testing.assert_array_equal(distinct(x, 1_000), np.unique(x))
