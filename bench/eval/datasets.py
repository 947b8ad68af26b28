"""Readers for the evaluation datasets (BEIR SciFact, LoCoMo) from a ``--data`` directory."""

from __future__ import annotations

import csv
import gzip
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path


@dataclass(slots=True)
class Doc:
    id: str
    text: str
    session: str = ""
    position: int | None = None
    event_time: float = 0.0


@dataclass(slots=True)
class QueryItem:
    id: str
    text: str
    relevant: dict[str, float]
    category: str = ""


@dataclass(slots=True)
class Dataset:
    name: str
    docs: list[Doc]
    queries: dict[str, list[QueryItem]] = field(default_factory=dict)  # split -> queries


def scifact(data: Path) -> Dataset:
    root = data / "beir" / "scifact"
    docs = []
    with gzip.open(root / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            docs.append(Doc(d["_id"], (d["title"] + " " + d["text"]).strip()))
    texts = {}
    with open(root / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            q = json.loads(line)
            texts[q["_id"]] = q["text"]
    ds = Dataset("scifact", docs)
    for split in ("train", "test"):
        rel: dict[str, dict[str, float]] = {}
        with open(root / "qrels" / f"{split}.tsv", encoding="utf-8") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                rel.setdefault(row["query-id"], {})[row["corpus-id"]] = float(row["score"])
        ds.queries[split] = [QueryItem(qid, texts[qid], r) for qid, r in rel.items()]
    return ds


_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*(am|pm) on (\d{1,2}) (\w+),? (\d{4})", re.I)


def _locomo_time(s: str) -> float:
    m = _DATE.search(s or "")
    if not m:
        return 0.0
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    dt = datetime.strptime(f"{day} {month} {year}", "%d %B %Y").replace(hour=h, minute=int(minute), tzinfo=timezone.utc)
    return dt.timestamp()


CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def locomo(data: Path, conversations: slice = slice(None)) -> list[Dataset]:
    """One dataset per conversation: every dialog turn is a memory ("speaker: text" with its
    session, position and the session's date); every QA item's evidence turns are relevant."""
    raw = json.loads((data / "locomo" / "locomo_dev.json").read_text(encoding="utf-8"))
    out = []
    for sample in raw[conversations]:
        conv = sample["conversation"]
        docs = []
        n = 1
        while f"session_{n}" in conv:
            t0 = _locomo_time(conv.get(f"session_{n}_date_time", ""))
            for pos, turn in enumerate(conv[f"session_{n}"]):
                text = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                docs.append(Doc(turn["dia_id"], text, session=f"{sample['sample_id']}/s{n}", position=pos,
                                event_time=t0 + 30.0 * pos))
            n += 1
        ids = {d.id for d in docs}
        qs = []
        for i, qa in enumerate(sample["qa"]):
            rel = {e.strip(): 1.0 for e in qa.get("evidence", []) if e.strip() in ids}
            if rel:
                qs.append(QueryItem(f"{sample['sample_id']}/q{i}", qa["question"], rel, CATEGORIES.get(qa["category"], str(qa["category"]))))
        out.append(Dataset(sample["sample_id"], docs, {"dev": qs}))
    return out


__all__ = ["CATEGORIES", "Dataset", "Doc", "QueryItem", "locomo", "scifact"]
