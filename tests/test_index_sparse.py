"""The incremental inverted index against a dense NumPy oracle, across merges and compaction."""

from __future__ import annotations

import numpy as np
import pytest

from teleo_server.compute.backend import ops
from teleo_server.index.sparse import SparseIndex


def _dense_oracle(docs: list[tuple[np.ndarray, np.ndarray]], n_terms: int) -> np.ndarray:
    m = np.zeros((len(docs), n_terms))
    for r, (ids, vals) in enumerate(docs):
        m[r, ids] += vals
    return m


@pytest.mark.parametrize("min_merge", [pytest.param(10**9, id="delta-only"), pytest.param(50, id="merging")])
def test_scores_match_dense_oracle(min_merge):
    rng = np.random.default_rng(0)
    idx = SparseIndex(merge_fraction=0.1, min_merge=min_merge)
    docs = []
    for r in range(300):
        ids = rng.choice(500, size=rng.integers(0, 12), replace=False)
        vals = rng.random(ids.size).astype(np.float32)
        idx.add(r, ids, vals)
        docs.append((ids, vals))
    idx.grow_rows(300)
    oracle = _dense_oracle(docs, 500)
    q_ids = rng.choice(520, size=15, replace=False).astype(np.int32)  # some ids beyond the vocabulary
    q_w = rng.random(15).astype(np.float32)
    want = oracle[:, q_ids[q_ids < 500]] @ q_w[q_ids < 500]
    got = idx.scores(ops("numpy"), q_ids, q_w)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if min_merge == 50:
        assert idx.indices.size > 0, "the delta was merged into the CSC"


@pytest.mark.parametrize("min_merge", [pytest.param(10**9, id="delta-only"), pytest.param(50, id="merging")])
def test_postings_list_every_entry_of_the_query_terms(min_merge):
    rng = np.random.default_rng(4)
    idx = SparseIndex(merge_fraction=0.1, min_merge=min_merge)
    entries = set()
    for r in range(300):
        ids = rng.choice(200, size=rng.integers(0, 9), replace=False)
        vals = rng.random(ids.size).astype(np.float32)
        idx.add(r, ids, vals)
        entries |= {(int(t), r, float(v)) for t, v in zip(ids, vals)}
        if r == 150:
            idx.scores(ops("numpy"), np.array([1], np.int32), np.ones(1, np.float32))  # builds a snapshot
    q = np.array([3, 7, 150, 199, 250], dtype=np.int64)  # 250: beyond the vocabulary
    which, rows, raw = idx.postings(q)
    got = {(int(q[w]), int(r), float(v)) for w, r, v in zip(which, rows, raw)}
    assert got == {e for e in entries if e[0] in set(q.tolist())} and len(got) == which.size


def test_compaction_renumbers_rows():
    rng = np.random.default_rng(1)
    idx = SparseIndex(min_merge=20)
    docs = []
    for r in range(100):
        ids = rng.choice(50, size=5, replace=False)
        vals = np.ones(5, dtype=np.float32)
        idx.add(r, ids, vals)
        docs.append((ids, vals))
    keep = np.arange(0, 100, 3)
    idx.compact(keep)
    assert idx.n_rows == keep.size
    oracle = _dense_oracle([docs[k] for k in keep], 50)
    q = np.array([3, 7, 11], dtype=np.int32)
    w = np.array([1.0, 2.0, 0.5], dtype=np.float32)
    np.testing.assert_allclose(idx.scores(ops("numpy"), q, w), oracle[:, q] @ w, rtol=1e-6)


def test_weigh_is_applied_to_main_and_delta_alike():
    idx = SparseIndex(weigh=lambda raw, rows: raw * (rows + 1).astype(np.float32), min_merge=3)
    idx.add(0, np.array([0]), np.array([1.0], np.float32))
    idx.add(1, np.array([0]), np.array([1.0], np.float32))
    idx.add(2, np.array([0, 1]), np.array([1.0, 1.0], np.float32))  # 4 entries: merged
    idx.add(3, np.array([0]), np.array([1.0], np.float32))         # stays in the delta
    got = idx.scores(ops("numpy"), np.array([0], np.int32), np.array([1.0], np.float32))
    np.testing.assert_allclose(got, [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError):
        idx.add(1, np.array([0]), np.array([1.0], np.float32))


@pytest.mark.parametrize("weighed", [False, True])
def test_delta_snapshot_and_tail_score_like_the_oracle(weighed):
    # queries between writes leave part of the delta sorted (snapshot) and part unsorted (tail);
    # both must score exactly like the dense oracle, before and after the snapshot is re-sorted
    rng = np.random.default_rng(3)
    weigh = (lambda raw, rows: raw * (1.0 + rows % 3).astype(np.float32)) if weighed else None
    idx = SparseIndex(weigh=weigh, min_merge=10**9)
    docs: list[tuple[np.ndarray, np.ndarray]] = []
    q_ids = np.array([0, 3, 7, 40, 41, 799, 900], dtype=np.int32)  # 900: beyond every term
    q_w = rng.random(q_ids.size).astype(np.float32)
    for step in range(6):
        for _ in range(400):
            ids = rng.choice(800 if step else 50, size=rng.integers(1, 10), replace=False)  # new terms after the snapshot
            vals = rng.random(ids.size).astype(np.float32)
            idx.add(len(docs), ids, vals)
            docs.append((ids, vals))
        oracle = _dense_oracle(docs, 800)
        if weighed:
            oracle = oracle * (1.0 + np.arange(len(docs)) % 3)[:, None]
        keep = q_ids < 800
        np.testing.assert_allclose(idx.scores(ops("numpy"), q_ids, q_w), oracle[:, q_ids[keep]] @ q_w[keep], rtol=1e-5, atol=1e-6)
    assert 0 < idx._snap_n < idx.pending, "the last query scored a snapshot and a tail"


@pytest.mark.parametrize("row_major", [True, False], ids=["row-major", "from-postings"])
@pytest.mark.parametrize("min_merge", [pytest.param(10**9, id="delta-only"), pytest.param(40, id="merging")])
def test_row_values_read_one_row_in_any_state(min_merge, row_major):
    """One row's terms (what Compare reads), from the row-major copy or read back from the
    postings: right before and after a merge, for skipped rows, and after compaction renumbers
    the rows."""
    rng = np.random.default_rng(5)
    weigh = lambda raw, rows: raw * (rows + 1).astype(np.float32)  # noqa: E731 - row-dependent
    idx = SparseIndex(weigh=weigh, min_merge=min_merge, row_major=row_major)
    docs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r in range(0, 120):
        if r % 7 == 3:
            continue  # a row that never gets terms (an empty document)
        ids = rng.choice(60, size=rng.integers(0, 8), replace=False)
        docs[r] = (ids, rng.random(ids.size).astype(np.float32))
        idx.add(r, *docs[r])
    idx.grow_rows(125)

    def check(row_of_old: dict[int, int]) -> None:
        for old, new in row_of_old.items():
            ids, raw = docs.get(old, (np.zeros(0, np.int64), np.zeros(0, np.float32)))
            terms, values = idx.row_values(new)
            order = np.argsort(terms)
            assert terms[order].tolist() == sorted(ids.tolist())
            want = dict(zip(ids.tolist(), (raw * (new + 1)).tolist()))
            np.testing.assert_allclose(values[order], [want[t] for t in terms[order].tolist()], rtol=1e-6)

    check({r: r for r in range(125)})
    keep = np.arange(1, 125, 2)
    idx.compact(keep)
    check({int(old): new for new, old in enumerate(keep)})
    terms, _ = idx.row_values(10_000)
    assert terms.size == 0


def test_row_values_never_scan_the_postings():
    """Compare reads a few rows at 100K memories: the cost must not be O(all postings) per row."""

    class NoScan:
        def __eq__(self, other):
            raise AssertionError("row_values compared every posting")

        __ne__ = __eq__

    idx = SparseIndex(min_merge=2)
    for r in range(10):
        idx.add(r, np.array([r, r + 1]), np.ones(2, np.float32))
    idx.indices = NoScan()  # type: ignore[assignment]
    idx._d_rows = NoScan()  # type: ignore[assignment]
    assert idx.row_values(4)[0].tolist() == [4, 5]


@pytest.mark.parametrize("min_merge", [pytest.param(10**9, id="delta-only"), pytest.param(30, id="merging")])
def test_rows_entries_lists_every_entry_of_the_given_rows(min_merge):
    """Several rows' entries in one pass over the postings, CSC and delta alike, int8 codes
    decoded with their own row's step; rows without terms and rows past the index give none."""
    rng = np.random.default_rng(8)
    idx = SparseIndex(min_merge=min_merge, values="int8", row_major=False)
    docs = {}
    for r in range(200):
        ids = rng.choice(90, size=rng.integers(0, 9), replace=False)
        docs[r] = dict(zip(ids.tolist(), (rng.random(ids.size) * 4).astype(np.float32).tolist()))
        idx.add(r, ids, np.array(list(docs[r].values()), np.float32))
    assert (idx.indices.size if min_merge < 10**9 else idx.pending)  # the CSC, or the delta alone
    assert idx.indptr.dtype == np.int32  # offsets in four bytes while the entries fit
    rows = np.array([150, 3, 199, 77, 500], np.int64)
    which, terms, values = idx.rows_entries(rows)
    for i, r in enumerate(rows.tolist()):
        got = dict(zip(terms[which == i].tolist(), values[which == i].tolist()))
        want = docs.get(r, {})
        assert sorted(got) == sorted(want)
        step = max(want.values(), default=0.0) / 127
        for t, v in want.items():
            assert abs(got[t] - v) <= step / 2 + 1e-6


@pytest.mark.parametrize("min_merge", [pytest.param(10**9, id="delta-only"), pytest.param(50, id="merging")])
def test_half_precision_values_score_within_their_rounding_and_take_fewer_bytes(min_merge):
    """float16 storage halves the value bytes; scores stay within float16's rounding of the
    float32 index, postings and row values come back as float32, and compaction keeps it all."""
    rng = np.random.default_rng(7)
    full = SparseIndex(min_merge=min_merge)
    half = SparseIndex(min_merge=min_merge, values="float16")
    lean = SparseIndex(min_merge=min_merge, values="float16", row_major=False)
    for r in range(300):
        ids = rng.choice(400, size=rng.integers(1, 12), replace=False)
        vals = (rng.random(ids.size) * 3).astype(np.float32)
        for idx in (full, half, lean):
            idx.add(r, ids, vals)
    q_ids = rng.choice(400, size=20, replace=False).astype(np.int32)
    q_w = rng.random(20).astype(np.float32)
    want = full.scores(ops("numpy"), q_ids, q_w)
    for idx in (half, lean):
        got = idx.scores(ops("numpy"), q_ids, q_w)
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-4)
        assert not np.array_equal(got, want)  # rounded: the float16 values, not the float32 ones
        which, rows, raw = idx.postings(q_ids)
        assert raw.dtype == np.float32 and rows.dtype == np.int64
    assert half.row_values(5)[1].dtype == np.float32
    np.testing.assert_allclose(half.row_values(5)[1], full.row_values(5)[1], rtol=1e-3)
    order = np.argsort(half.row_values(5)[0])
    assert lean.row_values(5)[0].tolist() == half.row_values(5)[0][order].tolist()  # read from the postings
    np.testing.assert_array_equal(lean.row_values(5)[1], half.row_values(5)[1][order])
    assert lean.nbytes < half.nbytes < full.nbytes
    keep = np.arange(0, 300, 3)
    for idx in (full, half, lean):
        idx.compact(keep)
    np.testing.assert_allclose(lean.scores(ops("numpy"), q_ids, q_w), full.scores(ops("numpy"), q_ids, q_w),
                               rtol=2e-3, atol=1e-4)


def test_a_bounded_vocabulary_keeps_row_major_terms_in_two_bytes():
    """A model's vocabulary (SPLADE: 30,522 terms) bounds the term ids: the row-major copy keeps
    them as uint16, reads them back as the same ids, across compaction, and refuses an id past it."""
    rng = np.random.default_rng(9)
    wide, narrow = SparseIndex(min_merge=40), SparseIndex(min_merge=40, term_bound=30522)
    for r in range(100):
        ids = rng.choice(30522, size=rng.integers(1, 10), replace=False)
        vals = rng.random(ids.size).astype(np.float32)
        for idx in (wide, narrow):
            idx.add(r, ids, vals)
    assert narrow._r_terms.view.dtype == np.uint16 and wide._r_terms.view.dtype == np.int32
    assert wide.nbytes - narrow.nbytes == 2 * narrow.nnz
    for idx in (wide, narrow):
        idx.compact(np.arange(0, 100, 2))
    for r in range(50):
        (a, va), (b, vb) = wide.row_values(r), narrow.row_values(r)
        assert b.dtype == np.int64 and a.tolist() == b.tolist() and va.tolist() == vb.tolist()
    with pytest.raises(ValueError, match=r"\[0, 30522\)"):
        narrow.add(50, np.array([30522]), np.ones(1, np.float32))
    with pytest.raises(ValueError, match="term_bound"):
        SparseIndex(term_bound=2**31 + 1)


def test_an_unknown_value_type_is_refused():
    with pytest.raises(ValueError, match="float32 or float16"):
        SparseIndex(values="int16")
    with pytest.raises(ValueError, match="int8 values cannot be weighed"):
        SparseIndex(values="int8", weigh=lambda raw, rows: raw)


@pytest.mark.parametrize("min_merge", [pytest.param(10**9, id="delta-only"), pytest.param(50, id="merging")])
def test_int8_values_score_within_half_a_step_of_each_row_and_take_a_byte(min_merge):
    """int8 codes keep one step per row (its largest magnitude / 127): every value is within half
    a step of the one given, so a score is within half a step times the query's weights; postings
    and row values come back decoded, signs survive, and compaction carries the steps along."""
    rng = np.random.default_rng(11)
    full = SparseIndex(min_merge=min_merge)
    half = SparseIndex(min_merge=min_merge, values="float16")
    coded = SparseIndex(min_merge=min_merge, values="int8")
    docs = {}
    for r in range(300):
        if r % 7 == 3:
            continue  # rows never given terms
        ids = rng.choice(400, size=rng.integers(1, 12), replace=False)
        vals = (rng.standard_normal(ids.size) * rng.uniform(0.1, 5.0)).astype(np.float32)  # each row its own scale
        docs[r] = (ids, vals)
        for idx in (full, half, coded):
            idx.add(r, ids, vals)
    for idx in (full, half, coded):
        idx.grow_rows(300)
    steps = coded.steps(np.arange(300))
    for r in range(300):
        want = np.abs(docs[r][1]).max() / 127 if r in docs else 0.0
        assert steps[r] == pytest.approx(want, rel=1e-6)
    q_ids = rng.choice(400, size=20, replace=False).astype(np.int32)
    q_w = rng.random(20).astype(np.float32)
    want = full.scores(ops("numpy"), q_ids, q_w)
    got = coded.scores(ops("numpy"), q_ids, q_w)
    bound = 0.5 * steps * q_w.sum() + 1e-5
    assert np.all(np.abs(got - want) <= bound) and not np.array_equal(got, want)
    rows, s = coded.reached(q_ids, q_w)
    np.testing.assert_allclose(s, got[rows], rtol=1e-5, atol=1e-6)
    assert set(rows.tolist()) == set(np.flatnonzero(got).tolist())
    which, prow, raw = coded.postings(q_ids)
    _, frow, fraw = full.postings(q_ids)
    assert raw.dtype == np.float32 and prow.size == frow.size
    order_c, order_f = np.lexsort((raw, prow)), np.lexsort((fraw, frow))
    np.testing.assert_allclose(raw[order_c], fraw[order_f], atol=float(steps.max()) / 2 + 1e-6)
    for r in (0, 5, 299):
        t_c, v_c = coded.row_values(r)
        t_f, v_f = full.row_values(r)
        assert t_c.tolist() == t_f.tolist()
        assert np.all(np.abs(v_c - v_f) <= steps[r] / 2 + 1e-6)
        assert np.all((np.sign(v_c) == np.sign(v_f)) | (np.abs(v_f) < steps[r] / 2))
    assert coded.nbytes < half.nbytes
    keep = np.arange(1, 300, 2)
    for idx in (full, coded):
        idx.compact(keep)
    np.testing.assert_array_equal(coded.steps(np.arange(keep.size)), steps[keep])
    got = coded.scores(ops("numpy"), q_ids, q_w)
    want = full.scores(ops("numpy"), q_ids, q_w)
    assert np.all(np.abs(got - want) <= 0.5 * steps[keep] * q_w.sum() + 1e-5)


def test_repeated_entries_of_a_row_are_summed_when_merged():
    idx = SparseIndex(min_merge=1, merge_fraction=0.0)
    idx.add(0, np.array([3, 3, 5]), np.array([1.0, 2.0, 4.0], np.float32))
    idx.merge()
    np.testing.assert_allclose(idx.scores(ops("numpy"), np.array([3, 5], np.int32), np.ones(2, np.float32)), [7.0])
    assert idx.indices.size == 2


@pytest.mark.parametrize("min_merge", [pytest.param(10**9, id="delta-only"), pytest.param(300, id="merging")])
@pytest.mark.parametrize("weighed", [False, True])
@pytest.mark.parametrize("many", [pytest.param(0, id="grouped"), pytest.param(10**9, id="every-row")])
def test_reached_lists_every_row_the_query_scores(min_merge, weighed, many, monkeypatch):
    # the rows a query reaches (CSC, sorted snapshot and unsorted tail alike) with their scores,
    # exactly the nonzero entries of the full score vector; a repeated query id counts twice.
    # Alike whether the postings are grouped by row or (many against the rows) every row is scored.
    import teleo_server.index.sparse as sparse

    monkeypatch.setattr(sparse, "MANY_POSTINGS", many)
    rng = np.random.default_rng(5)
    weigh = (lambda raw, rows: raw * (1.0 + rows % 3).astype(np.float32)) if weighed else None
    idx = SparseIndex(weigh=weigh, min_merge=min_merge)
    docs: list[tuple[np.ndarray, np.ndarray]] = []
    q_ids = np.array([0, 3, 3, 7, 40, 799, 900], dtype=np.int32)
    q_w = rng.random(q_ids.size).astype(np.float32)
    for step in range(4):
        for _ in range(300):
            ids = rng.choice(800, size=rng.integers(0, 10), replace=False)
            vals = rng.random(ids.size).astype(np.float32)
            idx.add(len(docs), ids, vals)
            docs.append((ids, vals))
        idx.grow_rows(len(docs))
        oracle = _dense_oracle(docs, 800)
        if weighed:
            oracle = oracle * (1.0 + np.arange(len(docs)) % 3)[:, None]
        keep = q_ids < 800
        want = oracle[:, q_ids[keep]] @ q_w[keep]
        rows, scores = idx.reached(q_ids, q_w)
        np.testing.assert_array_equal(rows, np.flatnonzero(want))
        np.testing.assert_allclose(scores, want[rows], rtol=1e-5)
        full = idx.scores(ops("numpy"), q_ids, q_w)
        np.testing.assert_allclose(full[rows], scores, rtol=1e-6)
    if min_merge == 300:
        assert idx.indices.size > 0 and idx.pending > 0, "both the CSC and the delta were read"
    else:
        assert 0 < idx._snap_n < idx.pending, "a snapshot and a tail were read"


def test_weighed_values_kept_as_float16_score_the_same_before_and_after_a_merge():
    """The delta's weighed values are rounded as the CSC keeps them, so merging changes no score;
    and they are float16's rounding of the float32 weighing, not the float32 values themselves."""
    rng = np.random.default_rng(5)
    lengths = rng.integers(5, 40, size=200).astype(np.float32)

    def weigh(raw, rows):
        return raw * 1.9 / (raw + 0.9 * (0.6 + 0.4 * lengths[rows] / 20.0))

    half = SparseIndex(weigh=weigh, min_merge=10**9, weighed_values="float16")
    full = SparseIndex(weigh=weigh, min_merge=10**9)
    for r in range(200):
        ids = rng.choice(300, size=rng.integers(1, 10), replace=False)
        tf = rng.integers(1, 6, size=ids.size).astype(np.float32)
        for idx in (half, full):
            idx.add(r, ids, tf)
    q_ids, q_w = rng.choice(300, size=25, replace=False).astype(np.int32), rng.random(25).astype(np.float32)
    before = half.scores(ops("numpy"), q_ids, q_w)
    rows_before, reached_before = half.reached(q_ids, q_w)
    half.merge()
    assert half.data.dtype == np.float16 and half.pending == 0
    np.testing.assert_allclose(half.scores(ops("numpy"), q_ids, q_w), before, rtol=1e-6, atol=1e-7)
    rows_after, reached_after = half.reached(q_ids, q_w)
    assert rows_after.tolist() == rows_before.tolist()
    np.testing.assert_allclose(reached_after, reached_before, rtol=1e-6, atol=1e-7)
    exact = full.scores(ops("numpy"), q_ids, q_w)
    np.testing.assert_allclose(before, exact, rtol=2e-3, atol=1e-4)
    assert not np.array_equal(before, exact)


def test_row_ids_take_two_bytes_up_to_65536_rows_and_four_past_that():
    """Every query path gives the oracle's answer on either side of the switch, including postings
    to the last two-byte row (65,535) and the first four-byte one (65,536)."""
    rng = np.random.default_rng(7)
    idx = SparseIndex(merge_fraction=0.0, min_merge=1000)
    entries: dict[tuple[int, int], float] = {}
    # sparse rows keep the test small: row ids come in strides, ending exactly at the boundary
    rows = np.r_[np.arange(0, 65_000, 97), np.arange(65_500, 65_536)]
    for r in rows:
        ids = rng.choice(40, size=3, replace=False)
        vals = rng.random(3).astype(np.float32) + 0.1
        idx.add(int(r), ids, vals)
        entries.update({(int(r), int(t)): float(v) for t, v in zip(ids, vals)})
    idx.merge()
    assert idx.indices.dtype == np.uint16 and idx.n_rows == 65_536
    half = idx.nbytes

    def check() -> None:
        q = np.array([0, 5, 17, 39], dtype=np.int32)
        w = np.array([1.0, 0.5, 2.0, 0.25], dtype=np.float32)
        want = np.zeros(idx.n_rows)
        for (r, t), v in entries.items():
            if t in q:
                want[r] += v * w[list(q).index(t)]
        np.testing.assert_allclose(idx.scores(ops("numpy"), q, w), want, rtol=1e-5, atol=1e-6)
        hit, got = idx.reached(q, w)
        np.testing.assert_array_equal(hit, np.flatnonzero(want))
        np.testing.assert_allclose(got, want[hit], rtol=1e-5)
        which, prow, _ = idx.postings(q.astype(np.int64))
        assert sorted(zip(prow.tolist(), q[which].tolist())) == sorted(k for k in entries if k[1] in q)
        at, _, _ = idx.rows_entries(np.array([65_535], dtype=np.int64))
        assert at.size == sum(1 for r, _ in entries if r == 65_535)

    check()
    for r in (65_536, 65_537, 70_000):
        ids = np.array([5, 17], dtype=np.int64)
        vals = np.array([1.5, 0.75], dtype=np.float32)
        idx.add(r, ids, vals)
        entries.update({(r, 5): 1.5, (r, 17): 0.75})
    check()  # new rows in the delta, old ones in the two-byte CSC
    idx.merge()
    assert idx.indices.dtype == np.int32 and idx.nbytes > half
    check()
    # compaction back under the boundary returns to two bytes
    keep = np.array(sorted({r for r, _ in entries if r % 2 == 0 and r < 65_536}), dtype=np.int64)
    idx.compact(keep)
    assert idx.indices.dtype == np.uint16 and idx.n_rows == keep.size
