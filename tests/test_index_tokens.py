"""Packed token store: CSR layout, compaction, the optional projection and the compact codes."""

from __future__ import annotations

import numpy as np
import pytest

from teleo_server.compute.backend import ops
from teleo_server.compute.maxsim import maxsim
from teleo_server.heads import CodecSpec
from teleo_server.index.tokens import TokenCodec, TokenStore, gaussian_levels, pool_tokens, projection
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


@pytest.mark.parametrize("bits", [2, 16])
def test_fit_cuts_the_buffers_to_the_tokens_and_keeps_every_score(bits):
    """After a bulk load the store's buffers hold exactly its tokens; MaxSim answers as before and
    later adds grow them again."""
    rng = np.random.default_rng(3)
    store = TokenStore(bits=bits)
    docs = [unit(rng.standard_normal((n, 16)).astype(np.float32)) for n in rng.integers(0, 9, 300)]
    for r, d in enumerate(docs):
        store.add(r, d)
    q = unit(rng.standard_normal((4, 16)).astype(np.float32))
    chunks = np.arange(300)
    before = store.maxsim(ops("numpy"), q, chunks)
    assert store._codes.shape[0] > store.n_tokens
    buffer = id(store._codes)
    store.fit()
    assert store._codes.shape[0] == store.n_tokens and store._offsets.size == 301
    assert id(store._codes) == buffer, "nothing else held the codes: cut in place, never held twice"
    np.testing.assert_array_equal(store.maxsim(ops("numpy"), q, chunks), before)
    extra = unit(rng.standard_normal((6, 16)).astype(np.float32))
    store.add(300, extra)
    assert store.offsets[-1] - store.offsets[-2] == 6
    np.testing.assert_array_equal(store.maxsim(ops("numpy"), q, chunks), before)


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


def test_gaussian_levels_are_the_known_lloyd_max_quantisers():
    one, _ = gaussian_levels(1)
    np.testing.assert_allclose(one, [-0.7979, 0.7979], atol=2e-3)   # sqrt(2 / pi)
    two, thresholds = gaussian_levels(2)
    np.testing.assert_allclose(two, [-1.510, -0.4528, 0.4528, 1.510], atol=3e-3)
    np.testing.assert_allclose(thresholds, [-0.9816, 0.0, 0.9816], atol=3e-3)


@pytest.mark.parametrize("bits,min_cosine", [(1, 0.75), (2, 0.92), (4, 0.99), (8, 0.999), (16, 0.9999)])
def test_codes_round_trip_close_to_the_rotated_vector(bits, min_cosine):
    rng = np.random.default_rng(3)
    x = unit(rng.standard_normal((200, 96)).astype(np.float32))
    codec = TokenCodec(96, 32, bits)
    codes = codec.encode(x)
    assert codes.shape == (200, codec.width) and codes.nbytes == 200 * codec.bytes_per_token
    assert codec.bytes_per_token == (32 * bits // 8 if bits < 16 else 64)
    back = codec.decode(codes)
    np.testing.assert_allclose(np.linalg.norm(back, axis=1), 1.0, atol=2e-3)
    cosine = (back * codec.transform(x)).sum(axis=1)
    assert cosine.mean() >= min_cosine
    if bits < 16:  # fewer bits, a coarser copy: the 8-bit round trip is closer than the 1-bit one
        assert cosine.mean() < 1.0


def test_a_bad_width_for_the_code_size_is_refused():
    with pytest.raises(ValueError, match="multiple of 8"):
        TokenStore(dim_out=20, bits=1)
    with pytest.raises(ValueError, match="bits"):
        TokenCodec(32, 16, bits=3)


@pytest.mark.parametrize("bits", [2, 16])
def test_coded_store_maxsim_matches_maxsim_over_its_decoded_tokens(bits):
    """The store's MaxSim decodes only the candidates, and gives what a raw store of the decoded
    tokens gives, repeats and empty rows included; compaction keeps the codes."""
    rng = np.random.default_rng(4)
    store = TokenStore(dim_out=32, bits=bits)
    docs = [unit(rng.standard_normal((n, 64)).astype(np.float32)) for n in (4, 0, 7, 3, 5)]
    for r, d in enumerate(docs):
        store.add(r, d)
    q = store.transform(unit(rng.standard_normal((3, 64)).astype(np.float32)))
    cand = np.array([4, 0, 2, 2, 1], dtype=np.int64)
    decoded = store.vectors(0, store.n_tokens) if bits < 16 else store.codes
    want = maxsim(q, store.offsets, decoded, cand.astype(np.int32))
    np.testing.assert_allclose(store.maxsim(ops("numpy"), q, cand), want, rtol=1e-5, atol=1e-6)
    assert store.maxsim(ops("numpy"), q, cand)[4] == 0.0
    before = store.vectors(int(store.offsets[2]), int(store.offsets[3]))
    store.compact(np.array([2, 4]))
    np.testing.assert_array_equal(store.vectors(0, 7), before)
    assert store.nbytes == store.n_tokens * store.codec.bytes_per_token + 8 * 3


def test_coded_tokens_keep_the_maxsim_order_of_near_and_far_documents():
    rng = np.random.default_rng(5)
    q = unit(rng.standard_normal((8, 128)).astype(np.float32))
    wins = 0
    for trial in range(20):
        near = unit(q + 0.08 * rng.standard_normal(q.shape).astype(np.float32))
        far = unit(rng.standard_normal((8, 128)).astype(np.float32))
        store = TokenStore(dim_out=64, bits=2, seed=trial)
        store.add(0, far)
        store.add(1, near)
        s = store.maxsim(ops("numpy"), store.transform(q), np.array([0, 1]))
        wins += int(s[1] > s[0])
    assert wins == 20


def test_pooling_merges_near_duplicate_tokens_into_their_mean_in_first_seen_order():
    rng = np.random.default_rng(6)
    distinct = unit(rng.standard_normal((5, 48)).astype(np.float32))
    # each vector twice (a word's pieces, a repeated word), slightly apart, interleaved
    order = [0, 1, 0, 2, 3, 1, 4, 2, 3, 4]
    tokens = unit(distinct[order] + 0.01 * rng.standard_normal((10, 48)).astype(np.float32))
    pooled = pool_tokens(tokens, 2)
    assert pooled.shape == (5, 48) and pooled.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(pooled, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(pooled, distinct, atol=0.06)  # the pairs' means, by first appearance
    pairs = [unit(tokens[[i for i, o in enumerate(order) if o == k]].sum(axis=0, keepdims=True))[0] for k in range(5)]
    np.testing.assert_allclose(pooled, np.stack(pairs), atol=1e-5)
    np.testing.assert_array_equal(pool_tokens(tokens, 2), pooled)  # a function of its input


@pytest.mark.parametrize("n,factor,rows", [(0, 2, 0), (1, 2, 1), (2, 2, 1), (3, 2, 2), (7, 3, 3), (9, 1, 9), (30, 4, 8)])
def test_pooling_keeps_ceil_t_over_factor_rows(n, factor, rows):
    rng = np.random.default_rng(n)
    tokens = unit(rng.standard_normal((n, 16)).astype(np.float32)) if n else np.zeros((0, 16), np.float32)
    pooled = pool_tokens(tokens, factor)
    assert pooled.shape == (rows, 16)
    if rows == n:
        np.testing.assert_array_equal(pooled, tokens)


def test_a_pooling_codec_stores_fewer_rows_under_its_own_tag_and_keeps_the_maxsim_order():
    codec = TokenCodec(96, 32, 2, pool=2)
    assert codec.spec.tag == "code2x32:96:s0:p2" and CodecSpec.parse(codec.spec.tag) == codec.spec
    assert TokenCodec.of(codec.spec).pool == 2 and not TokenCodec(96, None, 16, pool=2).identity
    rng = np.random.default_rng(7)
    q = unit(rng.standard_normal((8, 96)).astype(np.float32))
    wins = 0
    for trial in range(20):
        # a document that holds the query's tokens (each with a near copy) beside one that does not
        near = unit(np.repeat(q, 2, axis=0) + 0.03 * rng.standard_normal((16, 96)).astype(np.float32))
        far = unit(rng.standard_normal((16, 96)).astype(np.float32))
        pooled, plain = TokenStore(dim_out=32, bits=2, seed=trial, pool=2), TokenStore(dim_out=32, bits=2, seed=trial)
        for store in (pooled, plain):
            store.add(0, far)
            store.add(1, near)
        assert pooled.n_tokens == 16 and plain.n_tokens == 32
        s = pooled.maxsim(ops("numpy"), pooled.transform(q), np.array([0, 1]))
        wins += int(s[1] > s[0])
        # near copies pooled into one row lose little of the best match
        full = plain.maxsim(ops("numpy"), plain.transform(q), np.array([1]))
        assert abs(s[1] - full[0]) < 0.05 * full[0]
    assert wins == 20


def test_a_bad_pool_factor_is_refused():
    for bad in (0, 9):
        with pytest.raises(ValueError, match="pool"):
            TokenCodec(32, 16, 2, pool=bad)
        with pytest.raises(ValueError, match="pool"):
            CodecSpec(2, 16, 32, 0, bad)
    for other in ("code2x128:384:s0:p1", "code2x128:384:s0:p3m0", "code2x128:384:s0:p03"):
        with pytest.raises(ValueError, match="it is written"):  # one tag a codec
            CodecSpec.parse(other)
    with pytest.raises(ValueError, match="floor"):
        CodecSpec(2, 16, 32, 0, 1, 32)  # a floor without pooling would be a second name for pool 1
    assert CodecSpec.parse("code2x128:384:s0") == CodecSpec(2, 128, 384, 0, 1)
    assert CodecSpec.parse("code2x128:384:s0:p3m32") == CodecSpec(2, 128, 384, 0, 3, 32)


def test_a_text_of_at_most_keep_tokens_keeps_them_all_and_a_longer_one_keeps_at_least_keep():
    rng = np.random.default_rng(8)
    codec = TokenCodec(64, 32, 2, pool=3, keep=8)
    assert codec.spec.tag == "code2x32:64:s0:p3m8"
    for n, rows in ((5, 5), (8, 8), (9, 8), (24, 8), (30, 10)):
        tokens = unit(rng.standard_normal((n, 64)).astype(np.float32))
        assert codec.encode(tokens).shape == (rows, codec.width)
        assert pool_tokens(codec.transform(tokens), 3, 8).shape[0] == rows
    short = unit(rng.standard_normal((6, 64)).astype(np.float32))
    np.testing.assert_array_equal(codec.encode(short), TokenCodec(64, 32, 2).encode(short))  # as if unpooled


def test_a_pooling_codec_takes_unpooled_codes_only_of_chunks_it_keeps_whole():
    pooled, plain = CodecSpec(2, 32, 64, 0, 3, 8), CodecSpec(2, 32, 64, 0)
    assert pooled.takes(pooled, 100) and pooled.takes(plain, 8) and not pooled.takes(plain, 9)
    assert not plain.takes(pooled, 4)                      # pooled rows are never read as unpooled ones
    assert not pooled.takes(CodecSpec(2, 32, 64, 1), 4)    # another rotation
    assert not pooled.takes(CodecSpec(4, 32, 64, 0), 4)    # another code size
    # what takes() promises: the very bytes this codec makes of a chunk it keeps whole
    rng = np.random.default_rng(9)
    for n in (1, 5, 8):
        tokens = unit(rng.standard_normal((n, 64)).astype(np.float32))
        np.testing.assert_array_equal(TokenCodec.of(pooled).encode(tokens), TokenCodec.of(plain).encode(tokens))
