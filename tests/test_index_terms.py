"""The compact vocabulary against the dict and list it replaces."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from teleo_server.index import terms as terms_mod
from teleo_server.index.terms import TermTable


def _words(rng: np.random.Generator, n: int) -> list[str]:
    alphabet = list("abcdefghijklmnopqrstuvwxyzéßж日本") + ["", "-", "1"]
    return ["".join(rng.choice(alphabet, size=rng.integers(1, 12))) for _ in range(n)]


@pytest.mark.parametrize("min_recent", [4, 4096])
def test_term_table_maps_terms_and_ids_as_a_dict_and_a_list_do(monkeypatch, min_recent):
    monkeypatch.setattr(terms_mod, "MIN_RECENT", min_recent)
    rng = np.random.default_rng(3)
    table, vocab, order = TermTable(), {}, []
    for word in _words(rng, 3000):
        tid = table.add(word)
        if word not in vocab:
            vocab[word] = len(order)
            order.append(word)
        assert tid == vocab[word]
    assert len(table) == len(vocab) == len(table.terms)
    if min_recent == 4:
        assert table._state[2] > 0  # most terms were folded into the arrays
    for word, tid in vocab.items():
        assert table.get(word) == tid and table[word] == tid and word in table
        assert table.term(tid) == word and table.terms[tid] == word
    assert list(table.terms) == order and table.terms[-1] == order[-1] and table.terms[2:5] == order[2:5]
    picks = [len(order) - 1, 0, 7, 3, 7]
    assert table.terms_of(picks) == [order[i] for i in picks] and table.terms_of([]) == []
    for missing in ("zzzzzzzzzzzzzzz", "nope nope"):
        assert table.get(missing) is None and missing not in table
        with pytest.raises(KeyError):
            table[missing]
    assert 3 not in table  # not a str
    table.settle()
    assert [table.get(w) for w in order] == list(range(len(order)))
    assert list(table.items()) == [(w, i) for i, w in enumerate(order)]


class _SameHash(str):
    """A term whose hash collides with every other such term's."""

    def __hash__(self) -> int:
        return 12345


def test_terms_with_the_same_hash_are_told_apart_by_their_bytes():
    table = TermTable()
    words = [_SameHash(w) for w in ("alpha", "beta", "gamma", "delta")]
    ids = [table.add(w) for w in words]
    table.settle()
    assert (table._state[0] == 12345).sum() == 4
    assert [table.get(_SameHash(w)) for w in ("alpha", "beta", "gamma", "delta")] == ids
    assert table.get(_SameHash("epsilon")) is None
    assert table.add(_SameHash("epsilon")) == 4


def test_a_term_table_takes_a_fraction_of_the_dict_and_list():
    rng = np.random.default_rng(4)
    table = TermTable()
    for word in _words(rng, 20000):
        table.add(word)
    table.settle()
    assert table.nbytes < 40 * len(table)


def test_readers_beside_the_writer_only_ever_see_right_ids(monkeypatch):
    """Queries read the vocabulary while a Store adds to it: every id a reader gets names the
    term it asked for, across settles (switching threads as often as the interpreter allows)."""
    monkeypatch.setattr(terms_mod, "MIN_RECENT", 8)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    words = _words(np.random.default_rng(5), 6000)
    table, errors, done = TermTable(), [], threading.Event()

    def read() -> None:
        rng = np.random.default_rng(6)
        while not done.is_set():
            asked = [words[i] for i in rng.integers(0, len(words), 20)]
            try:
                for word, tid in zip(asked, table.ids_of(asked)):
                    if tid is not None and table.term(tid) != word:
                        errors.append((word, tid, table.term(tid)))
            except Exception as exc:  # noqa: BLE001 - any failure is the finding
                errors.append(repr(exc))

    readers = [threading.Thread(target=read) for _ in range(2)]
    try:
        for t in readers:
            t.start()
        for i in range(0, len(words), 7):
            table.add_all(words[i:i + 7])
    finally:
        done.set()
        for t in readers:
            t.join()
        sys.setswitchinterval(old)
    assert not errors, errors[:3]
    assert table._state[2] > 1000


def test_settling_a_retriever_after_a_load_folds_every_vocabulary_into_its_arrays():
    """After a bulk load every term table (BM25 fields, the memory graph's entities) holds no terms
    in its dict any more, and every term still has the id it had."""
    from bench.harness import memories as syn
    from teleo_server.pipeline import PipelineSettings, make_retriever

    r = make_retriever(PipelineSettings(), "numpy")
    texts = ["Melanie Smith moved the staging cluster to us-east-2 because the eu-west-1 quota ran out.",
             "We want to cut deploy time, so the canary runs first; `deploy_canary()` in ci/deploy.py.",
             "Caroline Jones from Acme Corp presented the 2025 roadmap in Berlin on Tuesday."]
    for i, text in enumerate(texts):
        r.add(syn.memory(f"m{i}", text), syn.embedding())
    tables = {name: getattr(space, "field").vocab for name, space in r.spaces.items() if hasattr(space, "field")}
    tables["E8_graph"] = r.spaces["E8_graph"].graph.entity_of
    assert len(tables) >= 5 and all(len(t) > 0 for t in tables.values())
    before = {name: dict(t.items()) for name, t in tables.items()}
    assert any(t._state[3] for t in tables.values())  # the newest terms wait in the dict after adds
    r.settle()
    for name, table in tables.items():
        assert not table._state[3] and table._state[2] == len(table), name
        assert dict(table.items()) == before[name], name
        assert table.ids_of(list(before[name])) == list(before[name].values()), name
