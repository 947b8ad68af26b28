"""Character bigrams against dictionary segmenters for Chinese and Japanese BM25.

    python -m bench.eval.multilingual.segmenters [--out bench/results/segmenters.json]

Teleo indexes Chinese and Japanese as character unigrams and bigrams (the seed's choice), which
needs no dictionary. The alternative is a word segmenter that ships its dictionary on PyPI: jieba
for Chinese (MIT) and Janome for Japanese (Apache-2.0, with the IPADIC dictionary); both are in
``bench/peers/requirements.txt`` (``make bench-venv``). This runs Okapi BM25 (Teleo's k1 0.9,
b 0.4) over the whole multilingual set (every language, as one agent's memory), with the Chinese
and Japanese memories and queries tokenised each way and the other languages by Teleo's analyser,
and reports Recall@10 and MRR@10 of the Chinese and Japanese queries, and the time to tokenise
them.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from bench.eval.multilingual.build import MEMORIES, QUERIES
from bench.eval.multilingual.run import environment
from teleo_server.analysis import DEFAULT

REPO = Path(__file__).resolve().parents[3]
K1, B, K = 0.9, 0.4, 10


def _jieba() -> Callable[[str], list[str]]:
    import jieba

    jieba.setLogLevel(logging.WARNING)
    return lambda text: [w for w in (t.strip().casefold() for t in jieba.lcut(text)) if w and any(c.isalnum() for c in w)]


def _janome() -> Callable[[str], list[str]]:
    from janome.tokenizer import Tokenizer

    tok = Tokenizer()
    return lambda text: [w for w in (t.casefold() for t in tok.tokenize(text, wakati=True)) if any(c.isalnum() for c in w)]


def bm25_rank(docs: list[list[str]], query: list[str]) -> list[int]:
    """Document indexes by Okapi BM25 score for ``query``, best first (those scoring above 0)."""
    n = len(docs)
    avgdl = sum(len(d) for d in docs) / max(n, 1)
    df = Counter(t for d in docs for t in set(d))
    scores = []
    for i, d in enumerate(docs):
        tf = Counter(d)
        s = 0.0
        for t in set(query):
            if t in tf:
                idf = math.log1p((n - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * tf[t] * (K1 + 1) / (tf[t] + K1 * (1 - B + B * len(d) / avgdl))
        if s > 0:
            scores.append((s, i))
    return [i for _, i in sorted(scores, key=lambda x: -x[0])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.eval.multilingual.segmenters", description=__doc__)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "segmenters.json")
    args = ap.parse_args(argv)
    memories = [json.loads(line) for line in MEMORIES.read_text().splitlines()]
    queries = [json.loads(line) for line in QUERIES.read_text().splitlines()]
    segmenters = {"zh": ("jieba", _jieba()), "ja": ("janome", _janome())}
    ids = [m["id"] for m in memories]
    out: dict = {"environment": environment(), "bm25": {"k1": K1, "b": B}, "languages": {}}
    for lang, (name, segment) in segmenters.items():
        rows = {}
        for label, tokenize in (("character unigrams and bigrams (Teleo)", DEFAULT.terms), (name, segment)):
            tokenize(memories[0]["content"])  # a segmenter loads its dictionary on first use: not timed
            mine = [q for q in queries if q["lang"] == lang]
            texts = [m["content"] for m in memories if m["lang"] == lang] + [q["text"] for q in mine]
            t0 = time.perf_counter()
            for text in texts:
                tokenize(text)
            seconds = time.perf_counter() - t0
            docs = [tokenize(m["content"]) if m["lang"] == lang else DEFAULT.terms(m["content"]) for m in memories]
            qtoks = [tokenize(q["text"]) for q in mine]
            recall = mrr = 0.0
            for q, toks in zip(mine, qtoks):
                ranked = [ids[i] for i in bm25_rank(docs, toks)][:K]
                relevant = set(q["relevant"])
                recall += len(relevant & set(ranked)) / len(relevant)
                mrr += next((1.0 / (r + 1) for r, i in enumerate(ranked) if i in relevant), 0.0)
            rows[label] = {"recall@10": round(recall / len(mine), 4), "mrr@10": round(mrr / len(mine), 4),
                           "tokenise_ms_per_text": round(seconds * 1e3 / len(texts), 3),
                           "queries": len(mine)}
        out["languages"][lang] = rows
        for label, r in rows.items():
            print(f"{lang}  {label:<42} Recall@10 {r['recall@10']:.3f}  MRR@10 {r['mrr@10']:.3f}")  # noqa: T201
    args.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
