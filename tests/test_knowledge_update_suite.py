"""The committed knowledge-update test set is what its generator writes, and its scenarios, links,
moments and expected answers are consistent with each other (no embedding, no model files)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

from bench.eval.knowledge_update import build


@pytest.fixture(scope="module")
def memories() -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in build.read(build.MEMORIES)}


@pytest.fixture(scope="module")
def queries() -> list[dict[str, Any]]:
    return build.read(build.QUERIES)


@pytest.fixture(scope="module")
def chains(memories) -> dict[str, list[dict[str, Any]]]:
    """Scenario id -> its memories in step order (distractors left out)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in memories.values():
        if m["step"] is not None:
            out[m["scenario"]].append(m)
    return {s: sorted(ms, key=lambda m: m["step"]) for s, ms in out.items()}


def test_the_committed_files_are_up_to_date():
    assert build.main(["--check"]) == 0


def test_the_files_stay_small():
    assert build.MEMORIES.stat().st_size + build.QUERIES.stat().st_size < 1_000_000


def test_enough_scenarios_with_the_specified_shares(memories, queries, chains):
    assert len(chains) >= 240
    assert {m["scenario"] for m in memories.values()} == set(chains)
    assert all([m["step"] for m in ms] == list(range(len(ms))) and len(ms) in (2, 3) for ms in chains.values())
    now = [q for q in queries if q["kind"] == "now"]
    assert len(now) == len(chains) and {q["scenario"] for q in now} == set(chains)
    links = Counter(q["link"] for q in now)
    for kind, share in build.LINK_SHARES:
        assert abs(links[kind] / len(now) - share) <= 0.05, (kind, links)
    assert abs(sum(len(ms) == 3 for ms in chains.values()) / len(chains) - build.CHAIN_SHARE) <= 0.05
    updates = [m for ms in chains.values() for m in ms[1:]]
    late = [m for m in updates if m["ingestion_time"] > m["event_time"]]
    assert abs(len(late) / len(updates) - build.LATE_SHARE) <= 0.05
    assert Counter(q["kind"] for q in queries)["as_of_ingestion"] == len(late)
    distractors = Counter(m["scenario"] for m in memories.values() if m["step"] is None)
    assert set(distractors) == set(chains) and set(distractors.values()) <= {1, 2}
    assert len({m["slot"] for m in memories.values()}) >= 15


def test_no_two_memories_share_content(memories):
    contents = [m["content"] for m in memories.values()]
    assert len(set(contents)) == len(contents)


def test_times_are_ordered_and_before_now(memories, chains):
    for m in memories.values():
        assert m["event_time"] <= m["ingestion_time"] < build.NOW
        assert m["ingestion_time"] - m["event_time"] <= build.LATE_DAYS[1] * build.DAY + 8 * 3600
    for ms in chains.values():
        for a, b in zip(ms, ms[1:]):
            assert a["event_time"] < b["event_time"]
            assert a["ingestion_time"] < b["event_time"]  # a late note comes before the next change


def test_links_point_to_existing_earlier_memories_of_the_same_chain(memories, chains, queries):
    link_of = {q["scenario"]: q["link"] for q in queries}
    for m in memories.values():
        for link in m["links"]:
            target = memories[link["target"]]
            assert link["type"] in ("supersedes", "contradicts")
            assert target["event_time"] < m["event_time"]
            assert target["scenario"] == m["scenario"] and target["step"] == m["step"] - 1
    for sid, ms in chains.items():
        assert ms[0]["links"] == []
        for m in ms[1:]:
            want = [] if link_of[sid] == "none" else [{"target": ms[m["step"] - 1]["id"], "type": link_of[sid]}]
            assert m["links"] == want


def test_expected_answers(memories, queries, chains):
    assert len({q["id"] for q in queries}) == len(queries)
    for q in queries:
        expected = memories[q["expected"]]
        chain = chains[q["scenario"]]
        assert expected["scenario"] == q["scenario"] and expected["slot"] == q["slot"]
        assert q["chain"] == len(chain)
        if q["kind"] == "now":
            assert q["at"] is None and expected is chain[-1]
            continue
        step = expected["step"]
        assert step < len(chain) - 1
        nxt = chain[step + 1]
        if q["kind"] == "as_of_event":  # after the expected value was set, before it changed
            assert expected["event_time"] < q["at"] < nxt["event_time"]
        else:  # the change had happened, but its note was not stored yet
            assert q["kind"] == "as_of_ingestion"
            assert nxt["event_time"] < q["at"] < nxt["ingestion_time"]
            assert expected["ingestion_time"] <= q["at"]


def test_every_step_but_the_last_is_asked_about_as_of_event(queries, chains):
    asked = Counter((q["scenario"], q["expected"]) for q in queries if q["kind"] == "as_of_event")
    for sid, ms in chains.items():
        assert all(asked[(sid, m["id"])] == 1 for m in ms[:-1])


def test_the_quick_subset_has_every_kind_of_query(queries):
    quick = {f"s{i:03d}" for i in range(build.QUICK)}
    mine = [q for q in queries if q["scenario"] in quick]
    assert Counter(q["kind"] for q in mine).keys() == {"now", "as_of_event", "as_of_ingestion"}
    assert {q["link"] for q in mine} == {"supersedes", "contradicts", "none"}
