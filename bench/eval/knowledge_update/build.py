"""Writes the knowledge-update test set beside this file: ``memories.jsonl`` and ``queries.jsonl``
(fields in ``README.md``).

    python -m bench.eval.knowledge_update.build [--check]

Each scenario takes an (entity, slot) pair of ``templates.py``: an old memory states a value, one
or two later memories note that it changed, and each update links to the memory it replaces with
the scenario's link kind (``supersedes``, ``contradicts``, or ``none``: no link at all). One or
two distractors state other slots of the same entity; every scenario's memories share one
corpus. Some updates are written down days after they happened (ingestion time later than
event time). Queries ask for the current value ("now"), for the value at a moment between two
changes (``as_of_event``) and, for a late note, for what had been stored at a moment between the
change and the note (``as_of_ingestion``).

Deterministic: one ``random.Random`` seeded with ``SEED``, so the files change only when the
templates or this file do. ``--check`` writes nothing and fails when the committed files differ
from what would be written.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.eval.generated import jsonl, write_or_check
from bench.eval.knowledge_update.templates import (CORRECTIONS, ENTITIES, LATE, MONTHS, SLOTS, SOURCES, Entity,
                                                   Slot, version_key)

SEED = 20250301
SCENARIOS = 264
QUICK = 60  # ``run.py --quick``: the first scenarios (s000..s059) and only their memories and queries
NAMESPACE = "agent"
DAY = 86_400
START = 1_672_617_600  # 2023-01-02 00:00 UTC: the earliest old fact
FIRST_SPAN_DAYS = 540  # old facts fall within this many days of START
GAP_DAYS = (14, 150)  # days between a value and the next one
LATE_DAYS = (2, 12)  # how many days after the change a late note is written (shorter than any gap)
NOW = 1_756_684_800  # 2025-09-01 00:00 UTC: after every event and every ingestion; "now" of the queries
LINK_SHARES = (("supersedes", 0.60), ("contradicts", 0.25), ("none", 0.15))
CHAIN_SHARE = 0.30  # scenarios with a second update
LATE_SHARE = 0.20  # updates written down late
HERE = Path(__file__).resolve().parent
MEMORIES = HERE / "memories.jsonl"
QUERIES = HERE / "queries.jsonl"
WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


@dataclass
class Scenario:
    index: int
    slot: Slot
    entity: Entity
    link: str
    values: list[str]
    times: list[int]  # event time of each step
    ingested: list[int]  # ingestion time of each step
    distractors: list[tuple[Slot, str, int]] = field(default_factory=list)  # (slot, value, time)

    @property
    def sid(self) -> str:
        return f"s{self.index:03d}"


def _at(day: int, rng: random.Random) -> int:
    """A moment in working hours (08:00-19:00 UTC) of the day starting at ``day``."""
    return day + rng.randint(8 * 3600, 19 * 3600)


def _day(t: int) -> int:
    return t - t % DAY


def _shares(n: int, rng: random.Random) -> list[str]:
    """``n`` link kinds in the proportions of ``LINK_SHARES``, shuffled."""
    counts = [round(n * share) for _, share in LINK_SHARES[:-1]]
    kinds = [kind for (kind, _), c in zip(LINK_SHARES, counts) for _ in range(c)]
    kinds += [LINK_SHARES[-1][0]] * (n - len(kinds))
    rng.shuffle(kinds)
    return kinds


def _values(slot: Slot, entity: Entity, n: int, rng: random.Random) -> list[str]:
    pool = [v for v in slot.values if v != entity["entity"]]  # nobody is their own manager
    values = rng.sample(pool, n)
    return sorted(values, key=version_key) if slot.ordered else values


def scenarios(rng: random.Random) -> list[Scenario]:
    """The scenarios' structure: slots, entities, values, times, link kinds and late notes."""
    slot_order = [SLOTS[i % len(SLOTS)] for i in range(SCENARIOS)]
    rng.shuffle(slot_order)
    links = _shares(SCENARIOS, rng)
    chained = set(rng.sample(range(SCENARIOS), round(CHAIN_SHARE * SCENARIOS)))
    used: set[tuple[str, str, str]] = set()  # (kind, entity, slot): each states at most one fact line
    out = []
    for i, slot in enumerate(slot_order):
        others = [s for s in SLOTS if s.kind == slot.kind and s is not slot]

        def free(e: Entity, s: Slot) -> bool:
            return (s.kind, e["entity"], s.name) not in used

        pool = [e for e in ENTITIES[slot.kind] if free(e, slot) and any(free(e, o) for o in others)]
        if not pool:
            raise ValueError(f"no entity left for slot {slot.name}: enlarge the {slot.kind} pool")
        entity = rng.choice(pool)
        spare = [o for o in others if free(entity, o)]
        extra = rng.sample(spare, min(rng.choice((1, 2)), len(spare)))
        for s in (slot, *extra):
            used.add((s.kind, entity["entity"], s.name))
        steps = 3 if i in chained else 2
        times = [_at(START + rng.randint(0, FIRST_SPAN_DAYS) * DAY, rng)]
        for _ in range(steps - 1):
            times.append(_at(_day(times[-1]) + rng.randint(*GAP_DAYS) * DAY, rng))
        sc = Scenario(i, slot, entity, links[i], _values(slot, entity, steps, rng), times, list(times))
        for s in extra:
            t = _at(_day(times[0]) + rng.randint(-120, (times[-1] - times[0]) // DAY + 30) * DAY, rng)
            sc.distractors.append((s, rng.choice([v for v in s.values if v != entity["entity"]]), t))
        out.append(sc)
    updates = [(sc.index, k) for sc in out for k in range(1, len(sc.times))]
    for i, k in sorted(rng.sample(updates, round(LATE_SHARE * len(updates)))):
        sc = out[i]
        delay = rng.randint(*LATE_DAYS) * DAY + rng.randint(0, 8 * 3600)
        sc.ingested[k] = sc.times[k] + delay
        if k + 1 < len(sc.times) and sc.ingested[k] >= sc.times[k + 1]:
            raise AssertionError("a late note must be written before the next change")
    return out


def _date(t: int) -> str:
    d = datetime.fromtimestamp(t, timezone.utc)
    return f"{MONTHS[d.month - 1]} {d.day}"


def _texts(sc: Scenario, rng: random.Random) -> tuple[list[str], list[str]]:
    """The contents of the scenario's steps and of its distractors."""
    slot, e = sc.slot, sc.entity
    steps = [rng.choice(slot.facts).format(**e, value=sc.values[0])]
    notes = rng.sample(slot.updates, len(sc.values) - 1)
    corrections = rng.sample(CORRECTIONS, len(sc.values) - 1)
    for k in range(1, len(sc.values)):
        new, old = sc.values[k], sc.values[k - 1]
        if sc.link == "contradicts":
            fact = rng.choice(slot.facts).format(**e, value=new)
            note = corrections[k - 1].format(fact=fact, old=old, source=rng.choice(SOURCES))
        else:
            note = notes[k - 1].format(**e, value=new, old=old)
        if sc.ingested[k] != sc.times[k]:
            t = sc.times[k]
            note = rng.choice(LATE).format(weekday=WEEKDAY_NAMES[datetime.fromtimestamp(t, timezone.utc).weekday()],
                                           date=_date(t), days=(sc.ingested[k] - t) // DAY, note=note)
        steps.append(note)
    distractors = [rng.choice(s.facts).format(**e, value=v) for s, v, _ in sc.distractors]
    return steps, distractors


def build() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Memories (in id order) and queries (in scenario order)."""
    rng = random.Random(SEED)
    all_scenarios = scenarios(rng)
    rows: list[dict[str, Any]] = []  # memories before they have ids; "key" names them meanwhile
    for sc in all_scenarios:
        steps, distractors = _texts(sc, rng)
        for k, text in enumerate(steps):
            link = [] if k == 0 or sc.link == "none" else [{"target": (sc.index, k - 1), "type": sc.link}]
            rows.append({"key": (sc.index, k), "content": text, "event_time": sc.times[k],
                         "ingestion_time": sc.ingested[k], "links": link, "scenario": sc.sid,
                         "slot": sc.slot.name, "step": k})
        for j, ((slot, _, t), text) in enumerate(zip(sc.distractors, distractors)):
            rows.append({"key": (sc.index, f"d{j}"), "content": text, "event_time": t, "ingestion_time": t,
                         "links": [], "scenario": sc.sid, "slot": slot.name, "step": None})
    seen: dict[str, Any] = {}
    for row in rows:
        if row["content"] in seen:
            raise ValueError(f"two memories read {row['content']!r}")
        seen[row["content"]] = row["key"]
    rng.shuffle(rows)  # ids say nothing of the scenario or the step
    ids = {row["key"]: f"ku-m{n:04d}" for n, row in enumerate(rows)}
    memories = [{"id": ids[row["key"]], "content": row["content"], "namespace": NAMESPACE,
                 "event_time": row["event_time"], "ingestion_time": row["ingestion_time"],
                 "links": [{"target": ids[link["target"]], "type": link["type"]} for link in row["links"]],
                 "scenario": row["scenario"], "slot": row["slot"], "step": row["step"]} for row in rows]

    queries: list[dict[str, Any]] = []

    def ask(sc: Scenario, text: str, kind: str, at: int | None, step: int) -> None:
        queries.append({"id": f"ku-q{len(queries):04d}", "text": text, "kind": kind, "at": at,
                        "expected": ids[(sc.index, step)], "link": sc.link, "chain": len(sc.values),
                        "scenario": sc.sid, "slot": sc.slot.name})

    for sc in all_scenarios:
        e, last = sc.entity, len(sc.values) - 1
        ask(sc, rng.choice(sc.slot.now).format(**e), "now", None, last)
        past = list(sc.slot.past)
        rng.shuffle(past)
        n = 0
        for k in range(last):  # between two changes: the earlier value holds
            at = sc.times[k] + round(rng.uniform(0.25, 0.75) * (sc.times[k + 1] - sc.times[k]))
            ask(sc, past[n % len(past)].format(**e), "as_of_event", at, k)
            n += 1
        for k in range(1, last + 1):  # after a change, before its late note: the earlier value is all stored
            if sc.ingested[k] != sc.times[k]:
                at = sc.times[k] + round(rng.uniform(0.25, 0.75) * (sc.ingested[k] - sc.times[k]))
                ask(sc, past[n % len(past)].format(**e), "as_of_ingestion", at, k - 1)
                n += 1
    latest = max(max(m["event_time"], m["ingestion_time"]) for m in memories)
    if latest >= NOW:
        raise AssertionError(f"a memory at {latest} is not before NOW ({NOW})")
    memories.sort(key=lambda m: m["id"])
    return memories, queries


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = ap.parse_args(argv)
    memories, queries = build()
    files = {MEMORIES: jsonl(memories), QUERIES: jsonl(queries)}
    if args.check:
        return write_or_check(files, True, "python -m bench.eval.knowledge_update.build")
    write_or_check(files, False, "python -m bench.eval.knowledge_update.build")
    kinds = {k: sum(q["kind"] == k for q in queries) for k in ("now", "as_of_event", "as_of_ingestion")}
    links = {k: sum(q["link"] == k for q in queries if q["kind"] == "now") for k, _ in LINK_SHARES}
    print(f"{len({m['scenario'] for m in memories})} scenarios, {len(memories)} memories, "  # noqa: T201
          f"{len(queries)} queries {kinds}; link kinds {links}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
