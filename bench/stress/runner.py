"""``python -m bench.stress``: run the parts in order, write the JSON, print the markdown summary."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench.harness.env import environment
from bench.stress import report, server
from bench.stress.context import Context

REPO = server.REPO
PARTS = {
    "crash": "bench.stress.crash",
    "fuzz": "bench.stress.fuzz",
    "waves": "bench.stress.waves",
    "acl": "bench.stress.acl",
    "faults": "bench.stress.faults",
}
TITLES = {"crash": "1. crash loop", "fuzz": "2. fuzzer", "waves": "3. concurrency", "acl": "4. access control",
          "faults": "5. fault injection"}


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.stress", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="reduced volumes (~2-3 min); targets judged on what ran")
    ap.add_argument("--only", action="append", choices=list(PARTS), help="run only these parts (repeatable)")
    ap.add_argument("--seed", type=int, default=20260101, help="seed of every random choice (default %(default)s)")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON path (default bench/results/stress.json; --quick: bench/results/tmp/stress-quick.json)")
    ap.add_argument("--workdir", type=Path, default=None, help="scratch directory (default: a new one under /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (server logs, databases)")
    ap.add_argument("--server-root", type=Path, default=None,
                    help="run the server (and its token commands) from another checkout, e.g. an earlier commit to compare")
    return ap.parse_args(argv)


def _environment() -> dict:
    env = environment()
    env["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for name in ("grpcio", "protobuf", "hypothesis"):
        try:
            env[name] = md.version(name)
        except md.PackageNotFoundError:
            env[name] = None
    env["root"] = server.is_root()
    if server.SERVER_ROOT != REPO:
        env["server_root"] = str(server.SERVER_ROOT)
        env["server_git_sha"] = subprocess.run(["git", "-C", str(server.SERVER_ROOT), "rev-parse", "HEAD"],
                                               capture_output=True, text=True).stdout.strip() or None
    return env


def _on_signal(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from teleo_server import logs

    logs.configure("console", quiet=True)  # token creation in this process logs nothing to the summary
    mode = "quick" if args.quick else "full"
    out = args.out or (REPO / "bench" / "results" / ("tmp/stress-quick.json" if args.quick else "stress.json"))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="teleo-stress-"))
    workdir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _on_signal)
    if args.server_root:
        server.SERVER_ROOT = args.server_root.resolve()
    started = time.time()
    env = _environment()  # after --server-root is set: it records which server ran
    ctx = Context(workdir=workdir, quick=args.quick, seed=args.seed)
    parts: list[report.Part] = []
    print(f"stress: {mode} run, seed {args.seed}, scratch {workdir}", flush=True)
    try:
        for key in [k for k in PARTS if not args.only or k in args.only]:
            t0 = time.monotonic()
            print(f"stress: {TITLES[key]} ...", flush=True)
            try:
                part = importlib.import_module(PARTS[key]).run(ctx)
            except Exception as exc:  # a harness failure: the part reads as not measured
                part = report.Part(key, TITLES[key], error=f"{type(exc).__name__}: {exc}")
                traceback.print_exc()
            finally:
                server.cleanup()
            part.seconds = round(time.monotonic() - t0, 1)
            parts.append(part)
            print(f"stress: {part.title}: {part.status} ({part.seconds:.0f} s)"
                  + (f" [{part.error}]" if part.error else ""), flush=True)
    except KeyboardInterrupt:
        print("stress: interrupted; writing what was measured", file=sys.stderr)
    finally:
        server.cleanup()
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    doc = report.write(out, parts, env, mode, args.seed, started, scratch=workdir)
    print()
    print(doc["summary_markdown"])
    print(f"\nstress: {doc['seconds']:.0f} s; results in {os.path.relpath(out, Path.cwd())}")
    return 0 if parts and all(p.status == report.PASS for p in parts) and len(parts) == len(args.only or PARTS) else 1


__all__ = ["main", "parse"]
