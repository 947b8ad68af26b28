import numpy as np
import pytest

try:
    from _backends import BACKEND_PARAMS, backend_ops
except ImportError:  # tests/ imported as a package
    from tests._backends import BACKEND_PARAMS, backend_ops


@pytest.fixture(params=BACKEND_PARAMS)
def ops(request):
    return backend_ops(request.param)


def packed_store(rng, lengths, dim):
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = rng.standard_normal((int(offsets[-1]), dim)).astype(np.float16)
    return offsets, tokens


def naive_maxsim(query, offsets, tokens, candidates):
    q = query.astype(np.float64)
    out = []
    for c in candidates.tolist():
        doc = tokens[offsets[c] : offsets[c + 1]].astype(np.float64)
        total = 0.0
        if doc.shape[0]:
            for qt in q:
                total += max(float(qt @ t) for t in doc)
        out.append(total)
    return np.asarray(out)


@pytest.mark.parametrize("dim", [1, 31, 33, 128, 384])
@pytest.mark.parametrize("qdtype", [np.float32, np.float16])
def test_maxsim_matches_naive(ops, dim, qdtype):
    rng = np.random.default_rng(20)
    lengths = rng.integers(0, 40, 60)
    lengths[[3, 17]] = 0  # empty documents
    offsets, tokens = packed_store(rng, lengths, dim)
    query = rng.standard_normal((9, dim)).astype(qdtype)
    candidates = rng.integers(0, 60, 45).astype(np.int32)
    candidates[:3] = [3, 17, 3]
    got = ops.maxsim(query, offsets, tokens, candidates)
    assert got.dtype == np.float32 and got.shape == (45,)
    np.testing.assert_allclose(got, naive_maxsim(query, offsets, tokens, candidates), rtol=1e-4, atol=1e-3)
    assert got[0] == 0.0 and got[1] == 0.0


def test_maxsim_no_candidates_and_no_query_tokens(ops):
    rng = np.random.default_rng(21)
    offsets, tokens = packed_store(rng, [3, 4], 16)
    assert ops.maxsim(rng.standard_normal((4, 16)), offsets, tokens, np.zeros(0, np.int32)).shape == (0,)
    got = ops.maxsim(np.zeros((0, 16), np.float32), offsets, tokens, np.array([0, 1], np.int32))
    assert got.tolist() == [0.0, 0.0]


def test_maxsim_long_documents(ops):
    rng = np.random.default_rng(22)
    offsets, tokens = packed_store(rng, [1, 700, 5], 64)  # longer than any block's token stride
    query = rng.standard_normal((32, 64)).astype(np.float32)
    cand = np.array([1, 0, 2], np.int32)
    np.testing.assert_allclose(
        ops.maxsim(query, offsets, tokens, cand), naive_maxsim(query, offsets, tokens, cand), rtol=1e-4, atol=1e-3
    )


def test_maxsim_rejects_out_of_range_candidate(ops):
    rng = np.random.default_rng(23)
    offsets, tokens = packed_store(rng, [2, 2], 8)
    with pytest.raises(ValueError):
        ops.maxsim(np.ones((1, 8), np.float32), offsets, tokens, np.array([2], np.int32))


def test_reference_splits_candidates_into_cache_sized_blocks(monkeypatch):
    import teleo_server.compute.maxsim as reference

    rng = np.random.default_rng(23)
    lengths = rng.integers(0, 30, 50)
    offsets, tokens = packed_store(rng, lengths, 48)
    query = rng.standard_normal((6, 48)).astype(np.float32)
    cand = rng.integers(0, 50, 40).astype(np.int32)
    want = naive_maxsim(query, offsets, tokens, cand)
    monkeypatch.setattr(reference, "_BLOCK_ELEMENTS", 48 * 30 * 3)  # three documents per block
    np.testing.assert_allclose(reference.maxsim(query, offsets, tokens, cand), want, rtol=1e-4, atol=1e-3)


def naive_decode(codes, bits, levels):
    """Coordinate d of a token is field d % per_byte of byte d // per_byte, little-endian; each
    token re-normalised (a zero token stays zero)."""
    per_byte = 8 // bits
    rows = []
    for row in codes.tolist():
        coords = [levels[(byte >> (bits * u)) & ((1 << bits) - 1)] for byte in row for u in range(per_byte)]
        v = np.asarray(coords, np.float64)
        n = np.linalg.norm(v)
        rows.append(v / n if n > 0 else v)
    return np.asarray(rows).reshape(len(rows), codes.shape[1] * per_byte)


@pytest.mark.parametrize("bits,dim", [(1, 64), (2, 128), (2, 40), (4, 96), (8, 24)])
def test_maxsim_over_codes_matches_naive_decoding(ops, bits, dim):
    rng = np.random.default_rng(bits * 100 + dim)
    lengths = rng.integers(0, 45, 30)
    lengths[[2, 11]] = 0
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    codes = rng.integers(0, 256, (int(offsets[-1]), dim * bits // 8)).astype(np.uint8)
    levels = np.sort(rng.standard_normal(1 << bits)).astype(np.float32)
    query = rng.standard_normal((37, dim)).astype(np.float32)  # two query tiles on the device
    cand = rng.integers(0, 30, 25).astype(np.int32)
    cand[:3] = [2, 11, 5]
    got = ops.maxsim_codes(query, offsets, codes, bits, levels, cand)
    want = naive_maxsim(query, offsets, naive_decode(codes, bits, levels), cand)
    assert got.dtype == np.float32 and got.shape == (25,)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert got[0] == 0.0 and got[1] == 0.0


def test_maxsim_over_codes_scores_what_the_token_codec_decodes(ops):
    from teleo_server.index.tokens import TokenCodec

    rng = np.random.default_rng(31)
    codec = TokenCodec(384, 128, 2, seed=4)
    raw = rng.standard_normal((300, 384)).astype(np.float32)
    codes = codec.encode(raw)
    offsets = np.array([0, 120, 120, 300], np.int64)
    query = codec.transform(rng.standard_normal((10, 384)))
    cand = np.array([0, 1, 2, 0], np.int32)
    got = ops.maxsim_codes(query, offsets, codes, 2, codec.levels, cand)
    np.testing.assert_allclose(got, naive_maxsim(query, offsets, codec.decode(codes), cand), rtol=1e-4, atol=1e-3)


def test_maxsim_over_codes_rejects_a_query_of_another_width(ops):
    with pytest.raises(ValueError, match="must describe"):
        ops.maxsim_codes(np.ones((2, 64), np.float32), np.array([0, 1], np.int64), np.zeros((1, 8), np.uint8), 2,
                         np.ones(4, np.float32), np.array([0], np.int32))
