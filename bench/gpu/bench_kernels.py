"""Kernel benchmarks: SpMV recall, MaxSim, dense scan, top-k, on synthetic data.

Each case checks its answer against the NumPy reference first, warms up, then times. The cupy
backend times the device wrappers on device-resident data with CUDA events
(``cupyx.profiler.benchmark``) and reports achieved bandwidth against a device-to-device copy
measured in the same run; the numpy backend times the reference itself (wall clock) against a
host memcpy, so the harness runs anywhere.

    python bench/gpu/bench_kernels.py --backend numpy --sizes 10000          # smoke, any machine
    python bench/gpu/bench_kernels.py --backend cupy --sizes 100000,1000000  # a GPU

Writes ``kernels.jsonl`` (one JSON object per case, environment included) and ``kernels.md``
(appending when the files exist, so several backends land in one table) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.harness.env import cpu_model  # noqa: E402
from teleo_server.compute import dense, maxsim, sparse, topk  # noqa: E402

VOCAB = 30522          # a BERT / SPLADE vocabulary
NNZ_PER_DOC = 250
QUERY_TERMS = 50
ZIPF_S = 1.0
TOKENS_PER_DOC = 30
QUERY_TOKENS = 32
DENSE_DIM = 256


# ---------------------------------------------------------------------------- environment

def environment(backend: str) -> dict:
    env = {
        "backend": backend,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
    }
    try:
        env["git_sha"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        env["git_sha"] = "unknown"
    if backend == "cupy":
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"]
        env["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
        env["gpu_memory_gib"] = round(props["totalGlobalMem"] / 2**30, 1)
        env["sm_count"] = props["multiProcessorCount"]
        env["cupy"] = cupy.__version__
        env["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
        env["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    return env



# ---------------------------------------------------------------------------- timing

class Timer:
    """Percentiles of repeated calls: CUDA events on a GPU, perf_counter on the host."""

    def __init__(self, backend: str, repeat: int, warmup: int, max_seconds: float) -> None:
        self.backend, self.repeat, self.warmup, self.max_seconds = backend, repeat, warmup, max_seconds

    def __call__(self, fn) -> np.ndarray:
        """Seconds per call, shape (repeat,) (fewer if max_seconds ran out)."""
        if self.backend == "cupy":
            from cupyx.profiler import benchmark

            result = benchmark(fn, n_repeat=self.repeat, n_warmup=self.warmup, max_duration=self.max_seconds)
            return np.asarray(result.gpu_times[0], dtype=np.float64)
        for _ in range(self.warmup):
            fn()
        times = []
        start = time.perf_counter()
        for _ in range(self.repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
            if time.perf_counter() - start > self.max_seconds:
                break
        return np.asarray(times)


def copy_ceiling(backend: str, timer: Timer) -> float:
    """Bandwidth of a large copy (read + write bytes / time), GB/s: the roofline of this run."""
    nbytes = (1 << 30) if backend == "cupy" else (1 << 28)
    if backend == "cupy":
        import cupy

        src = cupy.ones(nbytes // 4, dtype=cupy.float32)
        dst = cupy.empty_like(src)
        times = timer(lambda: cupy.copyto(dst, src))
        del src, dst
        free_device()
    else:
        src = np.ones(nbytes // 4, dtype=np.float32)
        dst = np.empty_like(src)
        times = timer(lambda: np.copyto(dst, src))
    return 2 * nbytes / float(np.median(times)) / 1e9


def free_device() -> None:
    try:
        import cupy
    except ImportError:
        return
    cupy.get_default_memory_pool().free_all_blocks()


# ---------------------------------------------------------------------------- synthetic data

def xp_of(backend: str):
    if backend == "cupy":
        import cupy

        return cupy
    return np


def to_host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def zipf_cdf(xp, vocab: int):
    p = 1.0 / np.arange(1, vocab + 1) ** ZIPF_S
    return xp.asarray(np.cumsum(p / p.sum()))


def make_csc(xp, rs, n_rows: int):
    """Term-major CSC with Zipfian term draws, ~NNZ_PER_DOC draws per doc (repeats collapse)."""
    draws = n_rows * NNZ_PER_DOC
    cdf = zipf_cdf(xp, VOCAB)
    terms = xp.minimum(xp.searchsorted(cdf, rs.random_sample(draws)), VOCAB - 1).astype(xp.int64)
    rows = rs.randint(0, n_rows, size=draws).astype(xp.int64)
    keys = xp.unique((terms << 32) | rows)
    del terms, rows
    term = keys >> 32
    indices = (keys & 0xFFFFFFFF).astype(xp.int32)
    counts = xp.bincount(term, minlength=VOCAB)
    indptr = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(counts).astype(xp.int64)])
    data = (0.1 + 2.9 * rs.random_sample(indices.shape[0])).astype(xp.float32)
    return indptr, indices, data


def make_query_terms(rng: np.random.Generator):
    p = 1.0 / np.arange(1, VOCAB + 1) ** ZIPF_S
    ids = rng.choice(VOCAB, QUERY_TERMS, replace=False, p=p / p.sum()).astype(np.int32)
    return ids, (0.2 + rng.random(QUERY_TERMS)).astype(np.float32)


def normal_f32(xp, rs, shape):
    if xp is np:  # NumPy's RandomState has no dtype argument
        return rs.standard_normal(shape).astype(np.float32)
    return rs.standard_normal(shape, dtype=xp.float32)


def normal_f16_rows(xp, rs, n: int, dim: int, chunk: int = 1 << 20):
    """(n, dim) float16 rows of unit length, generated in chunks to bound the float32 scratch."""
    out = xp.empty((n, dim), dtype=xp.float16)
    for lo in range(0, n, chunk):
        m = min(chunk, n - lo)
        x = normal_f32(xp, rs, (m, dim))
        x /= xp.linalg.norm(x, axis=1, keepdims=True)
        out[lo : lo + m] = x.astype(xp.float16)
    return out


def make_token_store(xp, rs, n_rows: int, dim: int):
    lengths = rs.poisson(TOKENS_PER_DOC, size=n_rows).astype(xp.int64)
    offsets = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(lengths)])
    tokens = normal_f16_rows(xp, rs, int(offsets[-1]), dim)
    return offsets, tokens


# ---------------------------------------------------------------------------- cases

def record(rows: list, out_dir: Path, env: dict, ceiling: float, case: dict, times: np.ndarray) -> None:
    p50, p90, p99 = (float(np.percentile(times, q)) for q in (50, 90, 99))
    gbs = case.get("bytes", 0) / p50 / 1e9 if p50 > 0 else 0.0
    row = {
        **case,
        "p50_us": round(p50 * 1e6, 2),
        "p90_us": round(p90 * 1e6, 2),
        "p99_us": round(p99 * 1e6, 2),
        "repeats": int(times.shape[0]),
        "gb_s": round(gbs, 1),
        "ceiling_gb_s": round(ceiling, 1),
        "pct_of_ceiling": round(100 * gbs / ceiling, 1) if ceiling else None,
        "env": env,
    }
    rows.append(row)
    with (out_dir / "kernels.jsonl").open("a") as fh:
        fh.write(json.dumps(row) + "\n")
    print(f"{row['kernel']:<18} {row['backend']:<6} n={row['n']:<8} {row['variant']:<28} "
          f"p50={row['p50_us']:>10.1f}us p99={row['p99_us']:>10.1f}us {row['gb_s']:>7.1f} GB/s "
          f"({row['pct_of_ceiling']}% of copy) ok={row['correct']}", flush=True)


def bench_spmv(backend, n, timer, emit, rng, k=1000):
    xp = xp_of(backend)
    rs = xp.random.RandomState(int(rng.integers(1 << 31)))
    indptr, indices, data = make_csc(xp, rs, n)
    q_ids, q_w = make_query_terms(rng)
    h_indptr = to_host(indptr)
    touched = int(sum(h_indptr[t + 1] - h_indptr[t] for t in q_ids))
    nnz = int(indices.shape[0])
    base = {"kernel": "spmv_recall", "backend": backend, "n": n, "nnz_per_doc": round(nnz / n, 1),
            "query_terms": QUERY_TERMS, "postings_touched": touched}
    h_index = (h_indptr, to_host(indices), to_host(data))
    want_scores = sparse.spmv_scores(*h_index, n, q_ids, q_w)
    want_ids, want_vals = sparse.spmv_topk(*h_index, n, q_ids, q_w, k)
    if backend == "cupy":
        import cupy

        from teleo_server.gpu.spmv import spmv_scores_device, spmv_topk_device

        d_ids, d_w = cupy.asarray(q_ids), cupy.asarray(q_w)
        scores_fn = lambda: spmv_scores_device(indptr, indices, data, n, d_ids, d_w)  # noqa: E731
        topk_fn = lambda: spmv_topk_device(indptr, indices, data, n, d_ids, d_w, k)  # noqa: E731
        got_scores = scores_fn().get()
        ids, vals, count = topk_fn()
        c = int(count)
        got_ids, got_vals = ids[:c].get(), vals[:c].get()
    else:
        scores_fn = lambda: sparse.spmv_scores(*h_index, n, q_ids, q_w)  # noqa: E731
        topk_fn = lambda: sparse.spmv_topk(*h_index, n, q_ids, q_w, k)  # noqa: E731
        got_scores = scores_fn()
        got_ids, got_vals = topk_fn()
    # float32 atomics vs the float64 reference: equal to rounding, so near-ties may swap.
    ok = bool(np.allclose(got_scores, want_scores, rtol=1e-5, atol=1e-5)
              and got_ids.shape == want_ids.shape
              and np.allclose(got_vals, want_vals, rtol=1e-5, atol=1e-5)
              and len(set(got_ids.tolist()) & set(want_ids.tolist())) >= 0.99 * len(want_ids))
    moved = touched * 8 + n * 4
    emit({**base, "variant": "scores", "bytes": moved, "correct": ok}, timer(scores_fn))
    emit({**base, "variant": f"scores+top{k}", "k": k, "bytes": moved + n * 4, "correct": ok}, timer(topk_fn))
    del indptr, indices, data
    free_device()


def bench_maxsim(backend, n, timer, emit, rng, dims=(128, 384), cands=(1000, 10000)):
    xp = xp_of(backend)
    for dim in dims:
        rs = xp.random.RandomState(int(rng.integers(1 << 31)))
        offsets, tokens = make_token_store(xp, rs, n, dim)
        h_offsets = to_host(offsets)
        query = rng.standard_normal((QUERY_TOKENS, dim)).astype(np.float32)
        query /= np.linalg.norm(query, axis=1, keepdims=True)
        for c in cands:
            if c > n:
                continue
            cand = rng.choice(n, c, replace=False).astype(np.int32)
            # Reference on a compact copy of the first 256 candidates' tokens only.
            check = cand[:256]
            lens = h_offsets[check + 1] - h_offsets[check]
            sub_tokens = np.concatenate([to_host(tokens[int(h_offsets[r]) : int(h_offsets[r + 1])]) for r in check])
            sub_offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            want = maxsim.maxsim(query, sub_offsets, sub_tokens, np.arange(check.shape[0], dtype=np.int32))
            if backend == "cupy":
                import cupy

                from teleo_server.gpu.maxsim import maxsim_device

                d_q, d_c = cupy.asarray(query), cupy.asarray(cand)
                fn = lambda: maxsim_device(d_q, offsets, tokens, d_c)  # noqa: E731
                got = fn().get()[: check.shape[0]]
            else:
                fn = lambda: maxsim.maxsim(query, offsets, tokens, cand)  # noqa: E731
                got = fn()[: check.shape[0]]
            ok = bool(np.allclose(got, want, rtol=1e-4, atol=1e-3))
            doc_tokens = int((h_offsets[cand + 1] - h_offsets[cand]).sum())
            emit({"kernel": "maxsim", "backend": backend, "n": n, "variant": f"d{dim} c{c} q{QUERY_TOKENS}",
                  "dim": dim, "candidates": c, "doc_tokens": doc_tokens, "bytes": doc_tokens * dim * 2,
                  "correct": ok}, timer(fn))
        del offsets, tokens
        free_device()


def bench_dense(backend, n, timer, emit, rng, k=100):
    xp = xp_of(backend)
    rs = xp.random.RandomState(int(rng.integers(1 << 31)))
    matrix = normal_f16_rows(xp, rs, n, DENSE_DIM)
    h_matrix = to_host(matrix)
    query = h_matrix[int(rng.integers(n))].astype(np.float32)
    cand = np.unique(rng.choice(n, min(n, 10000), replace=False)).astype(np.int32)
    variants = [("full", None, None), ("prefix d128", None, 128), (f"candidates {cand.shape[0]}", cand, None)]
    for name, rows, dim in variants:
        want_ids, want_vals = dense.dense_topk(h_matrix, query, k, candidates=rows, dim=dim)
        if backend == "cupy":
            import cupy

            from teleo_server.gpu.dense import dense_topk_device

            d_rows = None if rows is None else cupy.asarray(rows)
            d_q = cupy.asarray(query)
            fn = lambda: dense_topk_device(matrix, d_q, k, rows=d_rows, dim=dim)  # noqa: E731
            ids, vals, count = fn()
            c = int(count)
            got_ids, got_vals = ids[:c].get(), vals[:c].get()
        else:
            fn = lambda: dense.dense_topk(h_matrix, query, k, candidates=rows, dim=dim)  # noqa: E731
            got_ids, got_vals = fn()
        ok = bool(got_ids.shape == want_ids.shape and np.allclose(got_vals, want_vals, rtol=1e-4, atol=1e-4)
                  and len(set(got_ids.tolist()) & set(want_ids.tolist())) >= 0.99 * len(want_ids))
        scanned = n if rows is None else rows.shape[0]
        width = DENSE_DIM if dim is None else dim
        emit({"kernel": "dense_scan", "backend": backend, "n": n, "variant": f"{name} top{k}", "dim": DENSE_DIM,
              "bytes": scanned * (width * 2 + 4), "correct": ok}, timer(fn))
    if backend == "cupy":
        import cupy

        # Named peer: cuBLAS GEMV through cupy.matmul on the same fp16 bytes (fp16 scores out).
        q16 = cupy.asarray(query, dtype=cupy.float16)
        emit({"kernel": "dense_scan", "backend": backend, "n": n, "variant": "peer cupy.matmul fp16 (no top-k)",
              "dim": DENSE_DIM, "bytes": n * (DENSE_DIM * 2 + 2), "correct": True},
             timer(lambda: cupy.matmul(matrix, q16)))
        # Concurrent queries in one launch (a group of retrievals, pipeline.retrieval_group): the
        # rows read once for all of them, against one scan each; scores must be the single scan's bits.
        from teleo_server.gpu.dense import dense_scores_batch_device, dense_scores_device

        for batch in (8, 16, 32):
            qs = cupy.asarray(h_matrix[rng.choice(n, batch, replace=False)].astype(np.float32))
            together = dense_scores_batch_device(matrix, qs)
            ok = all(bool((together[b] == dense_scores_device(matrix, qs[b])).all()) for b in range(batch))
            emit({"kernel": "dense_scan", "backend": backend, "n": n, "variant": f"batch of {batch} queries, one launch",
                  "dim": DENSE_DIM, "batch": batch, "bytes": n * (DENSE_DIM * 2 + 4 * batch), "correct": ok},
                 timer(lambda: dense_scores_batch_device(matrix, qs)))
            emit({"kernel": "dense_scan", "backend": backend, "n": n, "variant": f"batch of {batch} queries, one launch each",
                  "dim": DENSE_DIM, "batch": batch, "bytes": batch * n * (DENSE_DIM * 2 + 4), "correct": True},
                 timer(lambda: [dense_scores_device(matrix, qs[b]) for b in range(batch)]))
    del matrix
    free_device()


def bench_topk(backend, n, timer, emit, rng, k=1000):
    scores = rng.standard_normal(n).astype(np.float32)
    mask = rng.random(n) < 0.9
    want_ids, want_vals = topk.topk(scores, k, mask=mask)
    if backend == "cupy":
        import cupy

        from teleo_server.gpu._checks import pack_mask
        from teleo_server.gpu.topk import topk_device

        d_s, d_m = cupy.asarray(scores), cupy.asarray(pack_mask(mask))
        fn = lambda: topk_device(d_s, k, mask=d_m)  # noqa: E731
        ids, vals, count = fn()
        c = int(count)
        got_ids = ids[:c].get()
    else:
        fn = lambda: topk.topk(scores, k, mask=mask)  # noqa: E731
        got_ids = fn()[0]
    ok = got_ids.tolist() == want_ids.tolist()
    emit({"kernel": "topk", "backend": backend, "n": n, "variant": f"top{k} masked 90%", "k": k,
          "bytes": n * 4 + n // 8, "correct": ok}, timer(fn))


CASES = {"spmv": bench_spmv, "maxsim": bench_maxsim, "dense": bench_dense, "topk": bench_topk}


# ---------------------------------------------------------------------------- report

def write_markdown(rows: list, out_dir: Path, env: dict) -> None:
    path = out_dir / "kernels.md"
    new = not path.exists()
    with path.open("a") as fh:
        if new:
            fh.write("# Kernel benchmarks\n\n")
        device = env.get("gpu") or env["cpu"]
        fh.write(f"## backend `{env['backend']}` on {device} (git {env['git_sha']})\n\n")
        fh.write(f"Copy ceiling: {rows[0]['ceiling_gb_s'] if rows else 0} GB/s (large "
                 f"{'device-to-device' if env['backend'] == 'cupy' else 'host'} copy, read + write).\n\n")
        fh.write("| kernel | n | variant | p50 us | p90 us | p99 us | GB/s | % of copy | correct |\n")
        fh.write("|---|---:|---|---:|---:|---:|---:|---:|---|\n")
        for r in rows:
            fh.write(f"| {r['kernel']} | {r['n']:,} | {r['variant']} | {r['p50_us']:.1f} | {r['p90_us']:.1f} | "
                     f"{r['p99_us']:.1f} | {r['gb_s']} | {r['pct_of_ceiling']} | {'yes' if r['correct'] else 'NO'} |\n")
        fh.write("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cupy", "numpy"), default="cupy")
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated memory counts")
    parser.add_argument("--cases", default=",".join(CASES), help=f"subset of {','.join(CASES)}")
    parser.add_argument("--repeat", type=int, default=None, help="timed calls per case (default 50 GPU, 5 CPU)")
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--max-seconds", type=float, default=20.0, help="cap on timed seconds per case")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "bench" / "results"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    gpu = args.backend == "cupy"
    timer = Timer(args.backend, args.repeat or (50 if gpu else 5), args.warmup or (5 if gpu else 1), args.max_seconds)
    env = environment(args.backend)
    ceiling = copy_ceiling(args.backend, timer)
    rows: list = []
    emit = lambda case, times: record(rows, out_dir, env, ceiling, case, times)  # noqa: E731
    rng = np.random.default_rng(args.seed)
    for n in (int(s) for s in args.sizes.split(",")):
        for name in args.cases.split(","):
            CASES[name](args.backend, n, timer, emit, rng)
    write_markdown(rows, out_dir, env)
    failed = [r for r in rows if not r["correct"]]
    for r in failed:
        print(f"INCORRECT: {r['kernel']} n={r['n']} {r['variant']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
