"""Scores of given rows among the rows a query reached: the search and the scatter paths agree."""

import numpy as np
import pytest

from teleo_server.spaces.base import lookup


@pytest.mark.parametrize("n_reached, n_rows", [(0, 5), (5, 3), (30, 40), (40_000, 60_000)])
def test_lookup_reads_reached_scores_and_nan_elsewhere(n_reached, n_rows):
    rng = np.random.default_rng(n_reached)
    reached = np.sort(rng.choice(1_000_000, n_reached, replace=False)).astype(np.int64)
    scores = rng.random(n_reached).astype(np.float32)
    rows = np.concatenate([rng.choice(reached, min(n_rows, n_reached)) if n_reached else np.zeros(0, np.int64),
                           rng.integers(0, 1_000_000, n_rows)])
    want = np.full(rows.size, np.nan, np.float32)
    where = {int(r): float(s) for r, s in zip(reached, scores)}
    for i, r in enumerate(rows.tolist()):
        if r in where:
            want[i] = where[r]
    np.testing.assert_array_equal(lookup(reached, scores, rows), want)
