"""Packed token store: CSR layout, compaction, and the optional projection."""

from __future__ import annotations

import numpy as np

from teleo_server.compute.maxsim import maxsim
from teleo_server.index.tokens import TokenStore, projection
from bench.harness.memories import unit


def test_packed_layout_and_compaction():
    rng = np.random.default_rng(0)
    store = TokenStore()
    docs = [unit(rng.standard_normal((n, 16)).astype(np.float32)) for n in (3, 0, 5, 2)]
    for r, d in enumerate(docs):
        store.add(r, d)
    np.testing.assert_array_equal(store.offsets, [0, 3, 3, 8, 10])
    np.testing.assert_allclose(store.tokens[3:8].astype(np.float32), docs[2], atol=1e-3)
    store.compact(np.array([0, 2]))
    np.testing.assert_array_equal(store.offsets, [0, 3, 8])
    np.testing.assert_allclose(store.tokens[3:8].astype(np.float32), docs[2], atol=1e-3)


def test_projection_is_orthonormal_and_roughly_preserves_maxsim_order():
    p = projection(64, 32, seed=1)
    np.testing.assert_allclose(p.T @ p, np.eye(32), atol=1e-5)
    rng = np.random.default_rng(2)
    q = unit(rng.standard_normal((6, 64)).astype(np.float32))
    near = unit(q[:4] + 0.2 * rng.standard_normal((4, 64)).astype(np.float32))
    far = unit(rng.standard_normal((4, 64)).astype(np.float32))
    full, small = TokenStore(), TokenStore(dim_out=32)
    for store in (full, small):
        store.add(0, far)
        store.add(1, near)
    assert small.tokens.shape[1] == 32
    for store in (full, small):
        s = maxsim(store.transform(q), store.offsets, store.tokens, np.array([0, 1], dtype=np.int32))
        assert s[1] > s[0]
