"""Growing int64 -> integer id postings (the entity space's trigram tables), against a dict of lists."""

from __future__ import annotations

import random
from collections import defaultdict

import numpy as np

from teleo_server.index.keyed import KeyedPostings


def test_lookups_match_a_dict_of_lists_through_buffered_and_merged_postings():
    rng = random.Random(7)
    kp, ref = KeyedPostings(min_merge=40), defaultdict(list)
    merged_seen = buffered_seen = False
    for i in range(2000):
        # mostly small keys (shared by many ids), some huge ones (three 21-bit code points)
        keys = {rng.randrange(-(2**62), 2**62) if rng.random() < 0.05 else rng.randrange(200)
                for _ in range(rng.randrange(0, 10))}
        kp.add(keys, i)
        for k in keys:
            ref[k].append(i)
        if i % 37 == 0:
            merged_seen |= kp.ids.size > 0
            buffered_seen |= len(kp) > kp.ids.size
            asked = np.array(sorted({rng.randrange(230) for _ in range(15)} | set(list(ref)[-3:])), np.int64)
            want = sorted(x for k in asked.tolist() for x in ref.get(k, []))
            assert sorted(kp.lookup(asked).tolist()) == want, i
    assert merged_seen and buffered_seen  # both the CSR and the write buffer were read
    kp.merge()
    assert len(kp) == kp.ids.size == sum(map(len, ref.values()))
    for k in (0, 17, 199):  # one key's ids in the order they were posted
        assert kp.lookup(np.array([k])).tolist() == ref[k]
    assert kp.lookup(np.array([10**15], np.int64)).size == 0


def test_ids_take_two_bytes_until_one_reaches_65536():
    kp = KeyedPostings(min_merge=10)
    for i in range(0, 65_536, 4096):
        kp.add([i % 7, 100], i)
    kp.add([3], 65_535)
    kp.merge()
    assert kp.ids.dtype == np.uint16
    assert kp.lookup(np.array([3], np.int64)).tolist()[-1] == 65_535
    kp.add([3, 100], 70_000)
    assert kp.lookup(np.array([3], np.int64)).tolist()[-2:] == [65_535, 70_000]  # CSR and buffer
    kp.merge()
    assert kp.ids.dtype == np.int32
    assert kp.lookup(np.array([3], np.int64)).tolist()[-2:] == [65_535, 70_000]
    assert kp.lookup(np.array([100], np.int64)).tolist() == list(range(0, 65_536, 4096)) + [70_000]


def test_entity_space_reaches_the_same_names_from_its_write_buffer_and_after_settling():
    from teleo_server.pipeline import PipelineSettings, make_retriever
    from bench.harness import memories as syn

    r = make_retriever(PipelineSettings(), "numpy")
    people = ["Melanie Smith", "Caroline Jones", "Joanna Smythe", "International Business Machines",
              "Gina Lollobrigida", "Carlos Santana", "Melinda Gates"]
    for i, name in enumerate(people):
        r.add(syn.memory(f"m{i}", f"{name} met us at the lake on Tuesday."), syn.embedding())
    space = r.spaces["E11_entity"]
    queries = ["what did melany smith paint", "smyth", "Carolyn", "IBM revenue", "santanna", "gates", "lollobrigda"]
    before = [space.reached(q) for q in queries]
    assert space._grams.ids.size == 0 and len(space._grams) > 0  # all in the write buffer so far
    r.settle()
    assert len(space._grams) == space._grams.ids.size > 0        # all in the CSR now
    assert [space.reached(q) for q in queries] == before
    terms = space.field.terms
    assert "melanie smith" in {terms[t] for t in before[0]} and "joanna smythe" in {terms[t] for t in before[1]}
    assert "carlos santana" in {terms[t] for t in before[4]}
