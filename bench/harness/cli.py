"""``python -m bench.harness``: run a config group and write results, a summary and plots."""

from __future__ import annotations

import argparse
import os
import shutil
import time
import traceback
from pathlib import Path

import structlog

from bench.harness import config, env, report
from bench.harness.results import Recorder, read
from bench.harness.workloads import Context
from bench.harness.workloads import run as run_workload

log = structlog.get_logger(__name__)
REPO = env.REPO


def _default_data() -> Path:
    return REPO.parent / "shared" / "data"


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.harness", description=__doc__)
    ap.add_argument("--group", default="smoke", help=f"config group in bench/configs ({', '.join(config.groups())})")
    ap.add_argument("--out", type=Path, default=None, help="output directory (default bench/results/<group>)")
    ap.add_argument("--data", type=Path, default=_default_data(), help="dataset root (default ../shared/data)")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache",
                    help="embedding cache shared with `make eval` (default var/eval/cache)")
    ap.add_argument("--workdir", type=Path, default=None, help="scratch space for stores and peer indexes")
    ap.add_argument("--only", action="append", choices=config.WORKLOADS, help="run only these workloads")
    ap.add_argument("--backend", choices=("numpy", "cupy"), default=None, help="override the group's backend")
    ap.add_argument("--append", action="store_true",
                    help="keep an existing results.jsonl, replacing only the records of the workloads run now")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=JSON",
                    help='override one config value, e.g. --set \'scale.sizes=[10000]\'')
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--report-only", action="store_true", help="rewrite summary.md and plots from OUT/results.jsonl")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    cfg = config.load(args.group)
    for item in args.set:
        config.override(cfg, item)
    out = args.out or REPO / "bench" / "results" / args.group
    if args.report_only:
        report.write(read(out / "results.jsonl"), out, with_plots=not args.no_plots)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    workdir = args.workdir or REPO / "bench" / "results" / "tmp" / f"work-{args.group}-{os.getpid()}"
    workdir.mkdir(parents=True, exist_ok=True)
    environment = env.environment()
    to_run = [w for w in cfg.get("workloads", []) if not args.only or w in args.only]
    rec = Recorder(out / "results.jsonl", environment["machine"], environment["git_sha"], append=args.append,
                   replace=frozenset(to_run))
    rec.write({"workload": "environment", "system": "", "group": args.group, "config": cfg,
               "data": os.path.relpath(args.data, REPO), **environment})
    ctx = Context(cfg=cfg, rec=rec, data=args.data, workdir=workdir, cache=args.cache,
                  backend=args.backend or cfg.get("backend", "numpy"))
    failed = []
    try:
        for name in to_run:
            t0 = time.perf_counter()
            log.info("bench.workload_start", workload=name, group=args.group)
            try:
                run_workload(name, ctx)
            except Exception as exc:  # one workload failing still leaves the others' results
                failed.append(name)
                # Paths relative to the checkout, so results can be committed and compared across machines.
                rec.write({"workload": name, "system": "", "error": repr(exc).replace(str(REPO), "."),
                           "traceback": traceback.format_exc().replace(str(REPO), ".")})
                log.error("bench.workload_failed", workload=name, error=repr(exc))
            # The machine may be shared: the load average says how much to trust the timings.
            rec.write({"workload": name, "system": "", "metric": "workload_seconds",
                       "seconds": time.perf_counter() - t0, "load_avg_1m": round(os.getloadavg()[0], 2)})
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report.write(rec.records, out, with_plots=not args.no_plots)
    log.info("bench.done", out=str(out), failed=failed)
    return 1 if failed else 0
