"""Device wrappers and the kernels under them, against the NumPy references: on the CPU emulation
of the kernels in every run, and on a CUDA device when there is one (the ``cuda`` cases skip here)."""

import numpy as np
import pytest

from teleo_server.compute import dense, maxsim, sparse, topk
from teleo_server.gpu import loader
from teleo_server.gpu._checks import pack_mask

try:
    from _backends import device, require_cupy
except ImportError:  # tests/ imported as a package
    from tests._backends import device, require_cupy

__all__ = ["device"]  # the fixture, imported for pytest


def test_kernel_dir_is_found_and_overridable(tmp_path, monkeypatch):
    assert (loader.kernel_dir() / "maxsim.cu").is_file()
    (tmp_path / "topk.cu").write_text("// contract\n")
    monkeypatch.setenv(loader.KERNEL_DIR_ENV, str(tmp_path))
    assert loader.kernel_dir() == tmp_path


@pytest.mark.parametrize("n", [1, 31, 32, 33, 100])
def test_pack_mask_matches_kernel_bit_order(n):
    rng = np.random.default_rng(n)
    mask = rng.random(n) < 0.5
    words = pack_mask(mask)
    assert words.dtype == np.uint32 and words.shape == ((n + 31) // 32,)
    unpacked = [(int(words[i >> 5]) >> (i & 31)) & 1 for i in range(n)]
    assert unpacked == mask.astype(int).tolist()


def csc(rng, vocab, n_rows, density):
    dense_w = np.where(rng.random((vocab, n_rows)) < density, rng.integers(1, 5, (vocab, n_rows)), 0)
    indptr = np.concatenate([[0], np.cumsum((dense_w > 0).sum(axis=1))]).astype(np.int64)
    t, r = np.nonzero(dense_w)
    return indptr, r.astype(np.int32), dense_w[t, r].astype(np.float32)


@pytest.mark.gpu
def test_device_wrappers_reject_wrong_dtype_and_layout():
    cupy = require_cupy()
    from teleo_server.gpu.maxsim import maxsim_device
    from teleo_server.gpu.topk import topk_device

    with pytest.raises(TypeError):
        topk_device(cupy.zeros(10, cupy.float64), 3)
    with pytest.raises(TypeError):
        topk_device(np.zeros(10, np.float32), 3)
    with pytest.raises(ValueError):
        topk_device(cupy.zeros((10, 2), cupy.float32)[:, 0], 3)  # strided
    with pytest.raises(ValueError):
        topk_device(cupy.zeros(64, cupy.float32), 3, mask=cupy.zeros(3, cupy.uint32))
    q = cupy.zeros((2, 8), cupy.float32)
    with pytest.raises(TypeError):
        maxsim_device(q, cupy.zeros(2, cupy.int64), cupy.zeros((1, 8), cupy.float32), cupy.zeros(1, cupy.int32))


def test_topk_device_pads_and_counts_without_sync(device):
    xp = device.xp
    from teleo_server.gpu.topk import topk_device

    scores = xp.asarray(np.array([0.5, np.nan, 2.0, -1.0, 0.0], np.float32))
    ids, vals, count = topk_device(scores, 10, floor=0.0)
    assert ids.shape == (5,)
    assert int(count) == 2
    assert device.to_host(ids).tolist() == [2, 0, -1, -1, -1]
    assert device.to_host(vals)[2] == -np.inf


@pytest.mark.parametrize("n,k", [(1, 1), (1000, 10), (16384, 100), (16385, 100), (300_000, 1000), (300_000, 299_999)])
def test_topk_device_matches_reference_at_scale(n, k, device):
    xp = device.xp
    from teleo_server.gpu.topk import topk_device

    rng = np.random.default_rng(n + k)
    host = rng.standard_normal(n).astype(np.float32)
    host[rng.integers(0, n, n // 10 + 1)] = 0.25  # a large tie block
    mask = rng.random(n) < 0.8
    ids, vals, count = topk_device(xp.asarray(host), k, mask=xp.asarray(pack_mask(mask)))
    want_ids, want_vals = topk.topk(host, k, mask=mask)
    c = int(count)
    assert device.to_host(ids[:c]).tolist() == want_ids.tolist()
    np.testing.assert_array_equal(device.to_host(vals[:c]), want_vals)


def test_topk_device_small_input_is_one_selection_launch(device, monkeypatch):
    """Below SMALL_N the whole radix select is one block: one launch, then the decode (about 20
    launches on the grid-wide path)."""
    from teleo_server.gpu import topk as gpu_topk

    launched = []
    real = device.function

    def counting(module, kernel):
        fn = real(module, kernel)
        return lambda *a, **kw: (launched.append(kernel), fn(*a, **kw))[1]

    monkeypatch.setattr(device, "function", counting)
    xp = device.xp
    host = np.random.default_rng(3).standard_normal(gpu_topk.SMALL_N).astype(np.float32)
    ids, _, count = gpu_topk.topk_device(xp.asarray(host), 5)
    assert launched == ["topk_small", "topk_decode"]
    assert device.to_host(ids[: int(count)]).tolist() == np.argsort(-host)[:5].tolist()
    launched.clear()
    gpu_topk.topk_device(xp.asarray(np.concatenate([host, host])), 5)
    assert launched.count("topk_histogram") >= 2 and "topk_small" not in launched


def test_spmv_device_accumulates_segments(device):
    xp = device.xp
    from teleo_server.gpu.spmv import spmv_accumulate

    rng = np.random.default_rng(5)
    a, b = csc(rng, 50, 400, 0.05), csc(rng, 50, 400, 0.05)
    q_ids = np.array([1, 7, 7, 49, 50], np.int32)
    q_w = np.array([1.0, 0.5, 0.5, 2.0, 9.0], np.float32)
    out = xp.zeros(400, xp.float64)
    for seg in (a, b):
        spmv_accumulate(*(xp.asarray(x) for x in seg), xp.asarray(q_ids), xp.asarray(q_w), out)
    want = sparse.spmv_scores(*a, 400, q_ids, q_w) + sparse.spmv_scores(*b, 400, q_ids, q_w)
    np.testing.assert_allclose(device.to_host(out), want, rtol=1e-6)


def test_spmv_device_scores_are_the_references_bits(device):
    """float64 sums rounded once, as the reference does: no ulp of difference that would reorder
    equal scores between the CPU and GPU backends (float32 atomics gave one in most rows here)."""
    xp = device.xp
    from teleo_server.gpu.spmv import spmv_scores_device

    rng = np.random.default_rng(11)
    n_rows, vocab = 3000, 64
    dense_w = np.where(rng.random((vocab, n_rows)) < 0.5, rng.random((vocab, n_rows)), 0.0).astype(np.float32)
    t, r = np.nonzero(dense_w)
    indptr = np.concatenate([[0], np.cumsum((dense_w > 0).sum(axis=1))]).astype(np.int64)
    index = (indptr, r.astype(np.int32), dense_w[t, r])
    q_ids = np.arange(vocab, dtype=np.int32)
    q_w = rng.random(vocab).astype(np.float32) * 3
    got = device.to_host(spmv_scores_device(*(xp.asarray(x) for x in index), n_rows, xp.asarray(q_ids),
                                            xp.asarray(q_w)))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, sparse.spmv_scores(*index, n_rows, q_ids, q_w))


@pytest.mark.parametrize("dim", [7, 64, 96, 200, 384, 1000])
def test_maxsim_device_every_entry(dim, device):
    xp = device.xp
    from teleo_server.gpu.maxsim import maxsim_device

    rng = np.random.default_rng(dim)
    lengths = rng.integers(0, 12, 40)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = rng.standard_normal((int(offsets[-1]), dim)).astype(np.float16)
    q = rng.standard_normal((40, dim)).astype(np.float32)  # Q * D > 48 KiB at dim 384
    cand = rng.integers(0, 40, 64).astype(np.int32)
    got = device.to_host(maxsim_device(xp.asarray(q), xp.asarray(offsets), xp.asarray(tokens), xp.asarray(cand)))
    np.testing.assert_allclose(got, maxsim.maxsim(q, offsets, tokens, cand), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dim,misaligned", [(128, False), (128, True), (384, False), (50, False)])
def test_maxsim_device_tiles_a_254_token_query(dim, misaligned, device):
    """Shared memory no longer grows with the query: 254 query tokens (8 query tiles) against
    documents of up to 300 tokens (10 doc tiles), on the 16-byte path and on the scalar one."""
    xp = device.xp
    from teleo_server.gpu.maxsim import maxsim_device

    rng = np.random.default_rng(dim + misaligned)
    lengths = np.array([0, 1, 31, 32, 33, 64, 299, 7, 100, 0, 250, 2])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_tok = int(offsets[-1])
    buffer = np.zeros(n_tok * dim + 4, np.float16)
    tokens = (buffer[4:] if misaligned else buffer[: n_tok * dim]).reshape(n_tok, dim)  # 8-byte offset: no 16-byte loads
    tokens[:] = rng.standard_normal((n_tok, dim)) / np.sqrt(dim)
    q = (rng.standard_normal((254, dim)) / np.sqrt(dim)).astype(np.float32)
    cand = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 6], np.int32)
    got = device.to_host(maxsim_device(xp.asarray(q), xp.asarray(offsets), xp.asarray(tokens), xp.asarray(cand)))
    want = maxsim.maxsim(q, offsets, np.ascontiguousarray(tokens), cand)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert got[0] == 0.0 and got[9] == 0.0  # rows without tokens


@pytest.mark.parametrize("width,dim", [(256, None), (256, 64), (384, None), (1024, None), (2048, None), (2048, 1536),
                                       (100, None), (100, 37)])
def test_dense_device_paths(width, dim, device):
    xp = device.xp
    from teleo_server.gpu.dense import dense_scores_device

    rng = np.random.default_rng(width)
    m = rng.standard_normal((5000, width))
    m = (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float16)
    q = rng.standard_normal(width).astype(np.float32)
    got = device.to_host(dense_scores_device(xp.asarray(m), q, dim=dim))
    np.testing.assert_allclose(got, dense.dense_scores(m, q, dim=dim), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width,dim,dtype,nq", [(384, None, np.float16, 13), (384, 128, np.float16, 8), (256, None, np.float16, 1),
                                                (100, None, np.float16, 9), (96, 37, np.float16, 3),
                                                (64, None, np.float32, 11), (1024, None, np.float16, 5)])
def test_dense_batch_scores_each_query_as_the_single_scan_does_bit_for_bit(width, dim, dtype, nq, device):
    """One launch for ``nq`` queries, each under its own row mask (all, half, a few rows, none):
    every score is the single-query kernel's, bit for bit, on the vectorised (16-byte loads),
    scalar and float32 paths, with and without a Matryoshka prefix; masked rows are NaN."""
    xp = device.xp
    from teleo_server.gpu.dense import batch_size, dense_scores_batch_device, dense_scores_device

    rng = np.random.default_rng(width + nq)
    n = 1000
    m = rng.standard_normal((n, width))
    m = (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(dtype)
    m[17] = 0  # a zero row: renormalised to 0 over a prefix
    qs = rng.standard_normal((nq, width)).astype(np.float32)
    masks = np.ones((nq, n), bool)
    masks[1::4] = rng.random((len(range(1, nq, 4)), n)) < 0.5
    masks[2::4] = False
    masks[2::4, [0, 31, 32, 999]] = True
    masks[3::4] = False  # a query that admits nothing
    masks[:, 500:520] = False  # rows no query admits
    packed = np.stack([pack_mask(row) for row in masks])
    d_m = xp.asarray(m)
    got = device.to_host(dense_scores_batch_device(d_m, qs, masks=xp.asarray(packed), dim=dim))
    assert got.shape == (nq, n)
    for b in range(nq):
        want = device.to_host(dense_scores_device(d_m, qs[b], mask=xp.asarray(packed[b]), dim=dim))
        np.testing.assert_array_equal(got[b].view(np.uint32)[masks[b]], want.view(np.uint32)[masks[b]])
        assert np.isnan(got[b][~masks[b]]).all() and np.isnan(want[~masks[b]]).all()
    unmasked = device.to_host(dense_scores_batch_device(d_m, qs, dim=dim))
    np.testing.assert_allclose(unmasked, np.stack([dense.dense_scores(m, q, dim=dim) for q in qs]), rtol=1e-4, atol=1e-4)
    assert batch_size(384) == 32 and batch_size(1024) == 8 and batch_size(2048) == 0
    with pytest.raises(Exception, match="at most 8 queries of 1024 dims"):
        dense_scores_batch_device(xp.asarray(np.zeros((4, 1024), np.float16)), np.zeros((9, 1024), np.float32))


def test_resident_indexes_append_delete_compact(device):
    from teleo_server.gpu.resident import DeviceExecutor, LiveRows, ResidentDenseMatrix, ResidentSparseIndex, ResidentTokenStore

    rng = np.random.default_rng(9)
    vocab, dim = 30, 48
    executor = DeviceExecutor(runtime_name=device.name)
    try:
        def scenario():
            live = LiveRows()
            sparse_idx = ResidentSparseIndex(vocab, live, max_segments=2)
            tokens = ResidentTokenStore(dim, live)
            matrix = ResidentDenseMatrix(dim, live)
            all_dense, all_w = [], np.zeros((vocab, 0))
            tok_len, tok_all = [], []
            for batch in range(4):  # the third append triggers a compaction
                rows = live.append(100)
                w = np.where(rng.random((vocab, 100)) < 0.1, rng.integers(1, 4, (vocab, 100)), 0).astype(np.float32)
                t, r = np.nonzero(w)
                indptr = np.concatenate([[0], np.cumsum((w > 0).sum(axis=1))]).astype(np.int64)
                sparse_idx.append(indptr, (r + rows[0]).astype(np.int32), w[t, r])
                all_w = np.concatenate([all_w, w], axis=1)
                lengths = rng.integers(0, 6, 100)
                toks = rng.standard_normal((int(lengths.sum()), dim)).astype(np.float16)
                tokens.append(lengths, toks)
                tok_len.append(lengths)
                tok_all.append(toks)
                d = rng.standard_normal((100, dim))
                d = (d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float16)
                matrix.append(d)
                all_dense.append(d)
            assert len(sparse_idx.segments) <= 2
            dead = np.array([0, 5, 150, 399])
            live.delete(dead)
            alive = np.ones(400, bool)
            alive[dead] = False

            q_ids = np.array([0, 3, 3, 29], np.int32)
            q_w = np.array([1, 1, 2, 1], np.float32)
            indptr = np.concatenate([[0], np.cumsum((all_w > 0).sum(axis=1))]).astype(np.int64)
            t, r = np.nonzero(all_w)
            want = sparse.spmv_topk(indptr, r.astype(np.int32), all_w[t, r].astype(np.float32), 400, q_ids, q_w, 50, mask=alive)
            got = sparse_idx.search(q_ids, q_w, 50)
            assert got[0].tolist() == want[0].tolist()

            m = np.concatenate(all_dense)
            q = m[7].astype(np.float32)
            want = dense.dense_topk(m, q, 20, mask=alive)
            got = matrix.search(q, 20)
            assert got[0].tolist() == want[0].tolist()

            lengths = np.concatenate(tok_len)
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            qt = rng.standard_normal((8, dim)).astype(np.float32)
            cand = np.array([1, 2, 150, 398], np.int32)
            got = tokens.maxsim(qt, cand)
            want = maxsim.maxsim(qt, offsets, np.concatenate(tok_all), cand)
            np.testing.assert_allclose(got[[0, 1, 3]], want[[0, 1, 3]], rtol=1e-4, atol=1e-3)
            assert np.isnan(got[2])
            return True

        assert executor.run(scenario)
    finally:
        executor.shutdown()


def test_bm25_device_weighs_raw_frequencies_as_the_reference(device):
    """The BM25 scatter weighs each posting's raw term frequency with its row's length and the
    average length given, in float64, over two segments: the reference's scores (and 0 for rows the
    query does not reach)."""
    xp = device.xp
    from teleo_server.gpu.spmv import bm25_accumulate

    rng = np.random.default_rng(29)
    n_rows, vocab = 600, 80
    segs = []
    for _ in range(2):
        tf = np.where(rng.random((vocab, n_rows)) < 0.05, rng.integers(1, 6, (vocab, n_rows)), 0).astype(np.float32)
        t, r = np.nonzero(tf)
        indptr = np.concatenate([[0], np.cumsum((tf > 0).sum(axis=1))]).astype(np.int64)
        segs.append((indptr, r.astype(np.int32), tf[t, r]))
    doc_len = rng.integers(1, 200, n_rows).astype(np.float32)
    q_ids = np.array([0, 3, 3, 41, 79, 80, -1], np.int32)  # a repeat and two out of vocabulary
    q_w = rng.random(q_ids.size).astype(np.float32) * 4
    out = xp.zeros(n_rows, xp.float64)
    for seg in segs:
        bm25_accumulate(*(xp.asarray(x) for x in seg), xp.asarray(doc_len), 0.9, 0.4, 57.5, xp.asarray(q_ids),
                        xp.asarray(q_w), out)
    got = device.to_host(out).astype(np.float32)
    want = sum(sparse.bm25_scores(*seg, doc_len, n_rows, q_ids, q_w, 0.9, 0.4, 57.5) for seg in segs)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert (got > 0).sum() == (want > 0).sum() > 50
    # the reference by hand for one row: the formula, not the kernel's own arithmetic
    row = int(np.flatnonzero(want > 0)[0])
    by_hand = 0.0
    for term, w in zip(q_ids.tolist(), q_w.tolist()):
        for indptr, indices, tf in segs:
            if 0 <= term < vocab:
                hit = np.flatnonzero(indices[indptr[term]:indptr[term + 1]] == row)
                for f in tf[indptr[term]:indptr[term + 1]][hit]:
                    by_hand += w * f * 1.9 / (f + 0.9 * (0.6 + 0.4 * doc_len[row] / 57.5))
    assert abs(want[row] - by_hand) < 1e-4 * by_hand


def test_resident_sparse_index_merges_small_writes_without_resorting_the_base(device):
    """Many small appends after a large one: past ``max_segments`` the newer segments are merged
    among themselves and the base stays as it was, until they hold ``merge_fraction`` of its
    postings; the scores are the reference's throughout."""
    from teleo_server.gpu.resident import LiveRows, ResidentSparseIndex

    rng = np.random.default_rng(31)
    vocab = 40
    live = LiveRows()
    index = ResidentSparseIndex(vocab, live, max_segments=3, merge_fraction=0.1)
    all_w = np.zeros((vocab, 0), np.float32)

    def append(n):
        nonlocal all_w
        rows = live.append(n)
        w = np.where(rng.random((vocab, n)) < 0.2, rng.random((vocab, n)), 0).astype(np.float32)
        t, r = np.nonzero(w)
        indptr = np.concatenate([[0], np.cumsum((w > 0).sum(axis=1))]).astype(np.int64)
        index.append(indptr, (r + rows[0]).astype(np.int32), w[t, r])
        all_w = np.concatenate([all_w, w], axis=1)

    def check():
        q_ids = np.arange(0, vocab, 3, dtype=np.int32)
        q_w = rng.random(q_ids.size).astype(np.float32)
        t, r = np.nonzero(all_w)
        indptr = np.concatenate([[0], np.cumsum((all_w > 0).sum(axis=1))]).astype(np.int64)
        want = sparse.spmv_scores(indptr, r.astype(np.int32), all_w[t, r], all_w.shape[1], q_ids, q_w)
        got = device.to_host(index.scores(device.xp.asarray(q_ids), device.xp.asarray(q_w)))
        np.testing.assert_array_equal(got, want)

    append(2000)
    base = index.segments[0][1]
    for _ in range(12):  # about 80 postings a write against the base's 16,000
        append(10)
        assert len(index.segments) <= 3 and index.segments[0][1] is base
    check()
    while index.segments[0][1] is base:  # until the newer ones hold a tenth of the base
        append(10)
    assert len(index.segments) == 1 and index.segments[0][1].shape[0] == int((all_w > 0).sum())
    check()


def test_sparse_recall_on_the_device_folds_blends_and_cuts_as_the_host_does(device):
    """``gpu.recall``: chunk scores folded to their memories' best (several chunks a memory, some
    memories without any), two spaces blended with each scaled by its best admitted row, the top k
    among rows whose blend is above 0 (ties by row), and the candidates' scores read back: the
    host stage's arithmetic, row for row."""
    from teleo_server.compute.topk import topk as host_topk
    from teleo_server.gpu import recall
    from teleo_server.index.chunks import fold_rows

    xp = device.xp
    rng = np.random.default_rng(61)
    n_rows = 500
    chunk_mem = np.sort(rng.integers(0, n_rows, 1400)).astype(np.int32)  # 0..n chunks a memory
    chunk_scores = np.where(rng.random(1400) < 0.3, rng.gamma(2.0, 1.0, 1400), 0).astype(np.float32)
    column = recall.DeviceColumn(device.name)
    column.view(chunk_mem[:900])  # then the map grows: only the new values are sent, to the same copy
    rows = column.view(chunk_mem)
    np.testing.assert_array_equal(device.to_host(rows), chunk_mem)
    assert column.n == 1400
    got = device.to_host(recall.fold_chunks(device.name, xp.asarray(chunk_scores[:1300]), rows, 1400, n_rows))
    want = np.maximum(fold_rows(np.concatenate([chunk_scores[:1300], np.zeros(100, np.float32)]), chunk_mem, n_rows), 0)
    np.testing.assert_array_equal(got, want)  # the chunks the index does not hold yet score 0
    one = rng.gamma(2.0, 1.0, n_rows).astype(np.float32)
    np.testing.assert_array_equal(device.to_host(recall.fold_chunks(device.name, xp.asarray(one), None, n_rows, n_rows)), one)

    bm25 = np.where(rng.random(n_rows) < 0.4, rng.gamma(2.0, 2.0, n_rows), 0).astype(np.float32)
    bm25[[3, 4]] = bm25[5] = 7.0  # ties
    splade = want
    for admitted in (np.ones(n_rows, bool), rng.random(n_rows) < 0.3):
        for w in (0.0, 0.5, 0.8):
            where = None if admitted.all() else admitted

            def norm(x):
                m = float((x if where is None else x * where).max(initial=0.0))
                return x / m if m > 0 else x

            blend = (1.0 - w) * norm(bm25) + w * norm(splade)
            pos, _ = host_topk(blend, 40, mask=admitted & (blend > 0))
            top = recall.blend_top(device.name, [(xp.asarray(bm25), 1.0 - w), (xp.asarray(splade), w)], admitted, 40)
            np.testing.assert_array_equal(top, np.asarray(pos, np.int64), err_msg=f"w={w}")
    rows = np.array([3, 10, 499, 0, 3])
    np.testing.assert_array_equal(recall.gather(device.name, xp.asarray(bm25), rows),
                                  np.where(bm25[rows] > 0, bm25[rows], np.nan).astype(np.float32))
    assert recall.blend_top(device.name, [(xp.asarray(bm25), 1.0)], np.zeros(n_rows, bool), 10).size == 0
