"""The committed multilingual test set is what its generator writes, and has the size and shape the
evaluation relies on."""

from __future__ import annotations

import json
from collections import Counter

from bench.eval.multilingual import build


def test_the_committed_files_are_up_to_date():
    assert build.main(["--check"]) == 0


def test_every_language_has_enough_memories_and_queries_with_known_answers():
    memories = [json.loads(line) for line in build.MEMORIES.read_text().splitlines()]
    queries = [json.loads(line) for line in build.QUERIES.read_text().splitlines()]
    ids = {m["id"]: m["lang"] for m in memories}
    per_lang_m, per_lang_q = Counter(m["lang"] for m in memories), Counter(q["lang"] for q in queries)
    assert set(per_lang_m) == set(per_lang_q) == {"en", "es", "pt", "zh", "ja", "ko", "ar"}
    assert sum(per_lang_m.values()) >= 300 and sum(per_lang_q.values()) >= 150
    assert all(1 <= len(q["relevant"]) <= 2 and all(ids[r] == q["lang"] for r in q["relevant"]) for q in queries)
