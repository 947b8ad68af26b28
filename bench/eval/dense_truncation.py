"""Dense-only SciFact: truncation at the model window versus Teleo's chunking.

The published all-MiniLM-L6-v2 figure (nDCG@10 about 0.645) truncates each abstract at the
model window. Teleo splits long texts into overlapping chunks and scores a memory by its best
chunk. This compares the two over the same cached embeddings, so the embedding itself is
checked against the published number and the gain from chunking is measured.

    python -m bench.eval.dense_truncation [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench.eval.corpora import load_all
from bench.eval.metrics import ndcg_at, recall_at

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "dense_truncation.json")
    args = ap.parse_args(argv)
    if not (args.data / "beir" / "scifact").is_dir():
        raise SystemExit(f"SciFact not found under {args.data}; pass --data")
    p = load_all(args.data, args.cache, 1, which=("scifact",))["scifact"][0]
    ids = [m.id for m, _ in p.items]
    first = np.stack([e.chunks[0].vectors["dense"] for _, e in p.items])
    chunks = [np.stack([c.vectors["dense"] for c in e.chunks]) for _, e in p.items]
    owner = np.concatenate([np.full(len(c), i) for i, c in enumerate(chunks)])
    every = np.concatenate(chunks)
    out = {"queries": len(p.queries["test"]), "memories": len(ids), "multi_chunk_memories": int(sum(len(c) > 1 for c in chunks))}
    for name in ("first_chunk", "best_chunk"):
        ndcg, rec = [], []
        for q, qe in p.queries["test"]:
            v = qe.chunks[0].vectors["dense"]
            if name == "first_chunk":
                s = first @ v
            else:
                s = np.full(len(ids), -np.inf)
                np.maximum.at(s, owner, every @ v)
            ranked = [ids[i] for i in np.argsort(-s, kind="stable")[:100]]
            ndcg.append(ndcg_at(ranked, q.relevant, 10))
            rec.append(recall_at(ranked, q.relevant, 100))
        out[name] = {"ndcg@10": float(np.mean(ndcg)), "recall@100": float(np.mean(rec))}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
