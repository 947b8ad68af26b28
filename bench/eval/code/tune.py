"""Choose the ``code_focused`` search matrix on the code set's dev split (never the test split).

    python -m bench.eval.code.tune [--cache var/eval/cache]  -> bench/results/tuning_code.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import structlog

from teleo_server.pipeline import PipelineSettings
from teleo_server.pipeline.types import Overrides

from bench.eval.code.generate import build as build_set
from bench.eval.corpora import prepare
from bench.eval.run import REPO, Run, build, environment, evaluate

log = structlog.get_logger(__name__)
# (E1, E7, E13, E12 = the MaxSim rerank's share, E6, E9, E8): meaning and code tokens, then how much
# meaning leads, SPLADE beside them, the rerank; then BM25 (added once the lexical index stemmed and
# dropped stop words: BM25 alone went from 0.341 to 0.393 on dev); then the character n-grams (which
# meet "iterator" in ``iter`` and "logging" in ``log``) and the memory graph's walk (functions that
# share identifiers), each alone and together, around the matrix in use
VARIANTS = [(1, 1, 0, 0, 0, 0, 0), (2, 1, 0, 0, 0, 0, 0), (1, 1, 0.5, 0, 0, 0, 0), (1, 1, 0, 0.3, 0, 0, 0),
            (3, 1, 0, 0, 0, 0, 0), (2, 1, 0.5, 0.3, 0, 0, 0), (2, 1, 0, 0.3, 0, 0, 0), (2, 1, 0.5, 0, 0, 0, 0),
            (3, 1, 0.5, 0.3, 0, 0, 0), (4, 1, 0.5, 0.3, 0, 0, 0), (3, 1.5, 0.5, 0.3, 0, 0, 0), (3, 2, 0.5, 0.3, 0, 0, 0),
            (2, 1.5, 0.5, 0.3, 0, 0, 0), (3, 1.5, 0.5, 0.5, 0, 0, 0), (3, 1.5, 1, 0.3, 0, 0, 0),
            (3, 1.5, 0, 0.3, 0, 0, 0), (4, 2, 0.5, 0.3, 0, 0, 0),
            (2, 1.5, 0.5, 0.3, 0.25, 0, 0), (2, 1.5, 0.5, 0.3, 0.5, 0, 0), (2, 1.5, 0.5, 0.3, 1, 0, 0),
            (2, 1.5, 0.25, 0.3, 0.5, 0, 0), (2, 1.5, 0, 0.3, 0.5, 0, 0), (2, 1, 0.5, 0.3, 0.5, 0, 0),
            (3, 1.5, 0.5, 0.3, 0.5, 0, 0), (2, 2, 0.5, 0.3, 0.5, 0, 0)]
VARIANTS += [(e1, 1.5, e13, 0.3, 0, e9, e8) for e1 in (2, 3) for e13 in (0, 0.5) for e9 in (0, 0.25, 0.5)
             for e8 in (0, 0.25, 0.5) if e9 or e8]
VARIANTS += [(2, 2, 0, 0.3, 0, 0.5, 0.25), (2, 1.5, 0, 0.3, 0, 1, 0.25), (2, 1.5, 0, 0.5, 0, 0.5, 0.25),
             (2, 1.5, 0, 0.2, 0, 0.5, 0.25)]
COLUMNS = ("E1_semantic", "E7_code", "E13_splade", "E12_late", "E6_lexical", "E9_hdc", "E8_graph")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "tuning_code.json")
    args = ap.parse_args(argv)
    p = prepare(build_set(), args.cache, 2)
    r = build(p, PipelineSettings())
    grid = []
    for variant in VARIANTS:
        # the first four columns are always written (0 included), as the earlier rows recorded them
        weights = {name: w for name, w in zip(COLUMNS, variant) if w or name in COLUMNS[:4]}
        run = Run("variant", "teleological", Overrides(search_matrix="custom", space_weights=tuple(weights.items())))
        res = evaluate(r, p, "dev", run)
        row = {"weights": weights, "dev_ndcg@10": round(res["all"]["ndcg@10"], 4)}
        grid.append(row)
        log.info("code_tune", **row)
    best = max(grid, key=lambda x: x["dev_ndcg@10"])
    args.out.write_text(json.dumps({"environment": environment(), "best": best, "grid": grid}, indent=2))
    print(json.dumps(best))  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
