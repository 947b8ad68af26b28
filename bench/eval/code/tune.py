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
# (E1, E7, E13, E12 = the MaxSim rerank's share): meaning and code tokens, then how much meaning
# leads, SPLADE beside them, and the rerank
VARIANTS = [(1, 1, 0, 0), (2, 1, 0, 0), (1, 1, 0.5, 0), (1, 1, 0, 0.3), (3, 1, 0, 0), (2, 1, 0.5, 0.3), (2, 1, 0, 0.3),
            (2, 1, 0.5, 0), (3, 1, 0.5, 0.3), (4, 1, 0.5, 0.3), (3, 1.5, 0.5, 0.3), (3, 2, 0.5, 0.3), (2, 1.5, 0.5, 0.3),
            (3, 1.5, 0.5, 0.5), (3, 1.5, 1, 0.3), (3, 1.5, 0, 0.3), (4, 2, 0.5, 0.3)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "tuning_code.json")
    args = ap.parse_args(argv)
    p = prepare(build_set(), args.cache, 2)
    r = build(p, PipelineSettings())
    grid = []
    for e1, e7, e13, late in VARIANTS:
        weights = {"E1_semantic": e1, "E7_code": e7, "E13_splade": e13, "E12_late": late}
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
