"""Device memory a memory takes on a device retriever: SciFact's abstracts stored with the device
defaults (``dense.resident``, ``sparse.resident``, ``bm25.resident`` and ``tokens.resident``)
serving their spaces, and each backend's device bytes (rows, offsets, values and live bitset as
held once the load ends; capacity not yet used excluded) divided by the memories.

    python bench/gpu/device_footprint.py [--backend emulated|cupy] [--data ../shared/data]
        [--out bench/results/device_footprint.json]

On ``emulated`` (the default) the kernels' CPU emulation holds the same arrays as a device would,
so the bytes are the device's; ``cupy`` measures on a GPU. Embeddings come from the evaluation
cache (``var/eval/cache``), made on first use.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.eval.corpora import load_all  # noqa: E402
from bench.eval.multilingual.run import environment  # noqa: E402
from bench.harness import teleo_inproc as inproc  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="emulated", choices=("emulated", "cupy"))
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "device_footprint.json")
    args = ap.parse_args()
    (part,) = load_all(args.data, args.cache, 2, ("scifact",))["scifact"]
    r = inproc.make({}, backend=args.backend)
    named = {name: space.named for name, space in r.spaces.items() if getattr(space, "named", "")}
    t0 = time.perf_counter()
    inproc.build(r, part.items)
    build_s = time.perf_counter() - t0
    q, emb = part.queries["test"][0]
    inproc.run_query(r, q.text, emb, "teleological", 10)  # every device backend made and filled
    n = len(r.catalog)
    per = {s: r.spaces[s].backend.device_bytes / n for s in named}
    report = {"environment": environment(), "backend": args.backend, "memories": n,
              "chunks": int(r.catalog.n_chunks), "build_s": round(build_s, 1), "backends": named,
              "device_bytes_per_memory": {s: round(v, 1) for s, v in per.items()},
              "total_kib_per_memory": round(sum(per.values()) / 1024, 2)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))  # noqa: T201 - the command's report
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
