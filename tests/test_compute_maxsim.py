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
