"""Chunk rows folded into memory rows, and the catalog's account of whether they are one to one."""

from __future__ import annotations

import numpy as np

from bench.harness import memories as syn
from teleo_server.index.catalog import Catalog
from teleo_server.index.chunks import fold_rows


def _catalog(counts: list[int]) -> Catalog:
    cat = Catalog()
    for i, n in enumerate(counts):
        cat.add(syn.memory(f"m{i}", f"text {i}"), n)
    return cat


def test_the_catalog_knows_when_every_memory_has_one_chunk_through_adds_and_compaction():
    cat = _catalog([1, 1, 1])
    assert cat.one_chunk_each and cat.n_chunks == cat.n_rows == 3
    cat.add(syn.memory("m3", "long"), 2)
    assert not cat.one_chunk_each
    cat.remove("m3")
    assert not cat.one_chunk_each, "a removed memory keeps its chunks until compaction"
    cat.compact()
    assert cat.one_chunk_each and cat.n_chunks == cat.n_rows == 3
    cat.add(syn.memory("m4", ""), 0)  # a memory without chunks: chunk rows no longer match memory rows
    assert not cat.one_chunk_each


def test_fold_rows_takes_each_memory_s_best_chunk_whether_told_or_worked_out():
    rng = np.random.default_rng(0)
    # memory 1 has no chunk, memory 2 two: three chunks, three memories, yet not one to one
    for counts in ([1, 1, 1, 1], [1, 0, 2], [2, 1, 0, 3]):
        cat = _catalog(counts)
        scores = rng.random(cat.n_chunks).astype(np.float32)
        want = np.full(cat.n_rows, -np.inf, np.float32)
        for c, m in enumerate(cat.chunk_mem.tolist()):
            want[m] = max(want[m], scores[c])
        told = fold_rows(scores, cat.chunk_mem, cat.n_rows, cat.one_chunk_each)
        worked_out = fold_rows(scores, cat.chunk_mem, cat.n_rows)
        np.testing.assert_array_equal(told, want)
        np.testing.assert_array_equal(worked_out, want)
