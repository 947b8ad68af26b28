"""What the update hints of a Store find on the knowledge-update set (``README.md`` beside this file).

    python -m bench.eval.knowledge_update.hints [--out bench/results/knowledge_update_hints.json]
        [--change 0.5] [--restated 0.8] [--grid]

Every memory of the set is stored in the order it was written down, *without its links* (as an
agent that never links would store them), and its hints (``TeleologicalRetriever.update_hints``:
earlier memories of the namespace it probably updates) are taken right after it is added, as a
Store takes them. Per memory kind:

- an **update** (step 1 or 2 of a chain): whether the memory it replaced (the step before) is the
  first hint (hit@1) or among the hints (hit@3);
- a **first fact** or a **distractor** (nothing to update): whether it gets any hint at all
  (``false_alarm``: every hint it gets is wrong);
- over every hint given: the share that names the memory replaced (``precision``).

Scenarios are split as in ``run.py``: the floors were chosen on the even-numbered ones (``--grid``
prints the choices), the odd ones are reported held out.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from teleo_server.pipeline import PipelineSettings, make_retriever
from teleo_server.pipeline.updates import reads_as_change

from bench.eval.knowledge_update.run import PRINCIPAL, REPO, load
from bench.eval.multilingual.run import environment

GRID_CHANGE = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6)
GRID_RESTATED = (0.7, 0.75, 0.8, 0.85, 0.9, 1.01)


def collect(items, rows: dict[str, dict[str, Any]], limit: int = 3) -> list[dict[str, Any]]:
    """Every memory's hints at the lowest floors (-1: everything the search returns, best first)
    with their similarities; ``score`` applies the floors afterwards."""
    settings = PipelineSettings(update_hint_change_similarity=-1.0, update_hint_restated_similarity=-1.0)
    r = make_retriever(settings, "numpy")
    predecessor = {}
    by_chain: dict[str, dict[int, str]] = {}
    for m in rows.values():
        if m["step"] is not None:
            by_chain.setdefault(m["scenario"], {})[m["step"]] = m["id"]
    for chain in by_chain.values():
        for step, mid in chain.items():
            if step > 0:
                predecessor[mid] = chain[step - 1]
    out = []
    for memory, emb in items:
        r.add(replace(memory, links=()), emb)
        hints = r.update_hints(memory.id, PRINCIPAL, limit)
        m = rows[memory.id]
        out.append({"id": memory.id, "scenario": int(m["scenario"][1:]), "step": m["step"],
                    "replaced": predecessor.get(memory.id), "content": m["content"],
                    "hints": [(h.id, h.similarity) for h in hints]})
    return out


def _kept(rec: dict[str, Any], change: float, restated: float) -> list[str]:
    """The ids of a record's hints above the floor that applies to its memory."""
    floor = change if reads_as_change(rec["content"]) else restated
    return [h for h, s in rec["hints"] if s >= floor]


def score(records: list[dict[str, Any]], change: float, restated: float, half: int | None = None) -> dict[str, Any]:
    upd, other, given, right = [], [], 0, 0
    for rec in records:
        if half is not None and rec["scenario"] % 2 != half:
            continue
        hints = _kept(rec, change, restated)
        given += len(hints)
        if rec["replaced"] is not None:
            right += rec["replaced"] in hints
            upd.append((hints[:1] == [rec["replaced"]], rec["replaced"] in hints))
        else:
            other.append(bool(hints))
    return {"updates": len(upd), "hit@1": round(float(np.mean([a for a, _ in upd])), 3) if upd else None,
            "hit@3": round(float(np.mean([b for _, b in upd])), 3) if upd else None,
            "others": len(other), "false_alarm": round(float(np.mean(other)), 3) if other else None,
            "hints_given": given, "precision": round(right / given, 3) if given else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = PipelineSettings()
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "knowledge_update_hints.json")
    ap.add_argument("--change", type=float, default=defaults.update_hint_change_similarity)
    ap.add_argument("--restated", type=float, default=defaults.update_hint_restated_similarity)
    ap.add_argument("--grid", action="store_true", help="also score a grid of floors on both halves")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache", help="embedding cache directory")
    ap.add_argument("--threads", type=int, default=2, help="embedding threads when the cache is cold")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows, items, _ = load(args.cache, args.threads, False)
    by_id = {m["id"]: m for m in rows}
    records = collect(items, by_id)
    report: dict[str, Any] = {
        "environment": environment(),
        "floors": {"change": args.change, "restated": args.restated},
        "chosen_on": "even-numbered scenarios; odd ones held out",
        "even": score(records, args.change, args.restated, 0),
        "odd": score(records, args.change, args.restated, 1),
        "all": score(records, args.change, args.restated),
    }
    if args.grid:
        report["grid"] = [{"change": c, "restated": s, "even": score(records, c, s, 0), "odd": score(records, c, s, 1)}
                          for c in GRID_CHANGE for s in GRID_RESTATED]
    report["examples"] = [{"stored": rec["content"], "replaced": by_id[rec["replaced"]]["content"],
                           "hints": [by_id[h]["content"] for h in _kept(rec, args.change, args.restated)]}
                          for rec in records if rec["replaced"] is not None][:12]
    report["seconds"] = round(time.perf_counter() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for half in ("even", "odd", "all"):
        print(half, report[half])  # noqa: T201 - the command's report
    for g in report.get("grid", []):
        print(g["change"], g["restated"], "even", g["even"], "odd", g["odd"])  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
