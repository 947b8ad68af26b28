"""BM25 (E6) quality under each text analyser setting (``python -m bench.eval.analyzer``).

The analyser must not cost the English evaluation sets anything: BM25 nDCG@10 on SciFact train
and test and LoCoMo dev, and Recall@100 on SciFact test, for the first analyser (lower-cased
``[a-z0-9]`` runs), Unicode words with accents folded, and that with Snowball stemming, stop-word
removal or both (the default). Published for comparison: bm25s with stemming scores nDCG@10 0.680
on SciFact. Written to ``bench/results/analyzer.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.eval.corpora import load_all
from bench.eval.run import REPO, Run, build, environment, evaluate
from teleo_server.pipeline import PipelineSettings

VARIANTS = {
    "first analyser ([a-z0-9] runs)": {"ascii_only": True},
    "Unicode, accents folded": {"stem": False, "drop_stopwords": False},
    "+ Snowball stems": {"stem": True, "drop_stopwords": False},
    "+ stop words dropped": {"stem": False, "drop_stopwords": True},
    "+ stems + stop words dropped (default)": {"stem": True, "drop_stopwords": True},
}
BM25 = Run("single_space:E6_lexical", "single_space:E6_lexical")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.eval.analyzer", description=__doc__)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "analyzer.json")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    if not args.data.is_dir():
        ap.error(f"--data {args.data} does not exist")
    data = load_all(args.data, args.cache, args.threads)
    rows: dict[str, Any] = {}
    for name, analyzer in VARIANTS.items():
        t0 = time.perf_counter()
        settings = PipelineSettings(analyzer=analyzer)
        index = build(data["scifact"][0], settings)
        sci = evaluate(index, data["scifact"][0], "test", BM25)["all"]
        train = evaluate(index, data["scifact"][0], "train", BM25)["all"]
        n = total = 0.0
        for conv in data["locomo"]:
            res = evaluate(build(conv, settings), conv, "dev", BM25)["all"]
            n, total = n + res["n"], total + res["ndcg@10"] * res["n"]
        rows[name] = {"settings": analyzer, "scifact_train_ndcg@10": round(train["ndcg@10"], 4),
                      "scifact_test_ndcg@10": round(sci["ndcg@10"], 4),
                      "scifact_test_recall@100": round(sci["recall@100"], 4),
                      "locomo_dev_ndcg@10": round(total / max(n, 1), 4), "seconds": round(time.perf_counter() - t0, 1)}
        print(name, rows[name])  # noqa: T201 - progress of a long run
    doc = {"environment": environment(), "space": "E6_lexical (BM25, k1 0.9, b 0.4)", "variants": rows,
           "published": {"bm25s (stemmed) SciFact nDCG@10": 0.680}}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
