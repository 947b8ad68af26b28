"""Recall@10 and MRR per language on the multilingual test set (``README.md`` beside this file),
for the retrieval profiles, with the current text analyser and with the first one (lower-cased
``[a-z0-9]+`` runs only, ``AnalyzerSettings(ascii_only=True)``).

    python -m bench.eval.multilingual.run [--out bench/results/multilingual.json]

One corpus holds every language's memories (as one agent's memory would); each query searches all
of it and is scored against its own language's relevant memories. Embeddings come from the
in-process engine and are cached under ``var/eval/cache``. The ``openclaw`` and ``keywords``
profiles run as configured (score floors on) and with their floors off; "openclaw without
embedding" is the ``openclaw`` profile given no query embedding, as a server without an embedder
runs it, which falls back to the keyword-only ``keywords`` profile. "openclaw, MMR off"
(``mmr_lambda = 1``) separates its ranking from its word-set (Jaccard) diversification.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from teleo_server.domain import AccessLevel, EmbeddingSet, Memory, MemoryType, Principal, content_hash
from teleo_server.pipeline import PipelineSettings, make_retriever
from teleo_server.pipeline.types import Hit, Outcome, Overrides, Query
from teleo_server.pipeline_settings import AnalyzerSettings

from bench.eval.cache import embed_cached
from bench.eval.corpora import engine_factory
from bench.eval.multilingual.build import MEMORIES, QUERIES
from bench.eval.multilingual.templates import LANGUAGES

REPO = Path(__file__).resolve().parents[3]
PRINCIPAL = Principal("eval", "eval", frozenset({"*"}), frozenset({"*"}), AccessLevel.RESTRICTED, "eval")
K = 10
NOW = 2.0e9  # memories carry no dates, so no profile's decay applies
STORED_AT = 1.7e9
LANGS = tuple(lang.code for lang in LANGUAGES)
ANALYSERS = {"new": AnalyzerSettings(), "old": AnalyzerSettings(ascii_only=True)}
NO_FLOORS = Overrides(min_score=0.0, min_relevance=0.0)
FALLBACK = "keywords profile ran instead"  # what a fallen-back query's degraded_reason says


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    profile: str
    overrides: Overrides = field(default_factory=Overrides)
    embedded: bool = True  # False: the query carries no embedding


RUNS = (
    Run("keywords", "keywords"),
    Run("keywords, floors off", "keywords", NO_FLOORS),
    Run("openclaw without embedding", "openclaw", embedded=False),
    Run("openclaw without embedding, floors off", "openclaw", NO_FLOORS, embedded=False),
    Run("openclaw", "openclaw"),
    Run("openclaw, floors off", "openclaw", NO_FLOORS),
    Run("openclaw, MMR off", "openclaw", Overrides(mmr_lambda=1.0)),
    Run("teleological", "teleological"),
    Run("hybrid", "hybrid"),
    Run("single_space:E6_lexical", "single_space:E6_lexical"),
)
KEYWORD_ONLY = ("keywords", "openclaw without embedding")


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


Items = list[tuple[Memory, EmbeddingSet]]
Queries = list[tuple[dict[str, Any], EmbeddingSet]]


def load(cache: Path, threads: int) -> tuple[Items, Queries]:
    """The set's memories (as stored memories, with embeddings) and its queries with embeddings."""
    mems, qs = _read(MEMORIES), _read(QUERIES)
    factory = engine_factory(threads)
    doc_sets = embed_cached([m["content"] for m in mems], False, cache, factory, "multilingual-docs")
    q_sets = embed_cached([q["text"] for q in qs], True, cache, factory, "multilingual-queries")
    items = []
    for m, emb in zip(mems, doc_sets):
        memory = Memory(id=m["id"], namespace="eval", content=m["content"], content_hash=content_hash(m["content"]),
                        memory_type=MemoryType.SEMANTIC, event_time=STORED_AT, ingestion_time=STORED_AT,
                        model_version=emb.model_version, chunk_count=len(emb.chunks))
        items.append((memory, emb))
    return items, list(zip(qs, q_sets))


def build(items: Items, analyzer: AnalyzerSettings):
    """An in-process retriever over the set, maintained (goals, calibration) as after a bulk load."""
    r = make_retriever(PipelineSettings(analyzer=analyzer), "numpy")
    for memory, emb in items:
        r.add(memory, emb)
    r.maintain()
    return r


def _summary(rows: list[tuple[float, float, bool]]) -> dict[str, float]:
    a = np.array(rows, dtype=np.float64)
    return {"n": len(rows), "recall@10": float(a[:, 0].mean()), "mrr@10": float(a[:, 1].mean()),
            "empty": int(a[:, 2].sum())}


def evaluate(r, queries: Queries, run: Run) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Per-language Recall@10, MRR@10 and queries left with no result, the ids of the queries
    that missed a relevant memory and, for runs without an embedding, how many queries fell back
    to the keyword-only profile (all of them, or this raises); and the missed queries with their
    top three results."""
    per_lang: dict[str, list[tuple[float, float, bool]]] = {code: [] for code in LANGS}
    missed, fell_back = [], 0
    for q, emb in queries:
        query = Query(text=q["text"], embedding=emb if run.embedded else None, principal=PRINCIPAL, top_k=K,
                      profile=run.profile, overrides=run.overrides, now=NOW)
        ranked: list[str] = []
        for event in r.retrieve(query):
            if isinstance(event, Hit):
                ranked.append(event.memory.id)
            elif isinstance(event, Outcome) and FALLBACK in event.degraded_reason:
                fell_back += 1
        relevant = set(q["relevant"])
        recall = len(relevant & set(ranked[:K])) / len(relevant)
        rank = next((i + 1 for i, mid in enumerate(ranked[:K]) if mid in relevant), 0)
        per_lang[q["lang"]].append((recall, 1.0 / rank if rank else 0.0, not ranked))
        if recall < 1.0:
            missed.append({"id": q["id"], "text": q["text"], "relevant": q["relevant"], "top3": ranked[:3]})
    out: dict[str, Any] = {code: _summary(rows) for code, rows in per_lang.items()}
    out["all"] = _summary([row for rows in per_lang.values() for row in rows])
    out["missed"] = [m["id"] for m in missed]
    if not run.embedded:
        if fell_back != len(queries):
            raise RuntimeError(f"{run.name}: {len(queries) - fell_back} queries did not fall back to keywords")
        out["fell_back_to_keywords"] = fell_back
    return out, missed


def _explain(missed: list[dict[str, Any]], analyzer: AnalyzerSettings, content: dict[str, str]) -> list[dict[str, Any]]:
    """Missed queries with the keywords the analyser extracted, the relevant memories and the top three."""
    keywords = analyzer.build().keywords
    return [{"id": m["id"], "text": m["text"], "keywords": keywords(m["text"]),
             "relevant": {mid: content[mid] for mid in m["relevant"]},
             "top3": {mid: content[mid] for mid in m["top3"]}} for m in missed]


def environment() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    sha, dirty = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain")
    from bench.harness.env import cpu_model

    return {"machine": f"{os.cpu_count()}-core {cpu_model()}", "gpu": "none (NumPy backend)", "git": sha,
            "git_dirty": bool(dirty), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "python": platform.python_version(), "numpy": np.__version__, "backend": "numpy"}


def markdown(results: dict[str, dict[str, Any]]) -> str:
    """Recall@10 per language, new / old analyser, one row per run."""
    cols = [*LANGS, "all"]
    lines = ["Recall@10 per language, new analyser / old analyser (ASCII only)", "",
             "| run | " + " | ".join(cols) + " |", "| --- |" + " --- |" * len(cols)]
    for run in RUNS:
        new, old = results["new"][run.name], results["old"][run.name]
        lines.append(f"| {run.name} | " + " | ".join(f"{new[c]['recall@10']:.2f} / {old[c]['recall@10']:.2f}"
                                                       for c in cols) + " |")
    lines += ["", "MRR@10 per language, new analyser / old analyser", "",
              "| run | " + " | ".join(cols) + " |", "| --- |" + " --- |" * len(cols)]
    for run in RUNS:
        new, old = results["new"][run.name], results["old"][run.name]
        lines.append(f"| {run.name} | " + " | ".join(f"{new[c]['mrr@10']:.2f} / {old[c]['mrr@10']:.2f}"
                                                       for c in cols) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "multilingual.json")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache", help="embedding cache directory")
    ap.add_argument("--threads", type=int, default=2, help="embedding threads when the cache is cold")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    items, queries = load(args.cache, args.threads)
    timings = {"load_and_embed_s": time.perf_counter() - t0}
    results: dict[str, dict[str, Any]] = {}
    misses: list[dict[str, Any]] = []
    for name, analyzer in ANALYSERS.items():
        t = time.perf_counter()
        r = build(items, analyzer)
        timings[f"build_{name}_s"] = time.perf_counter() - t
        t = time.perf_counter()
        results[name] = {}
        for run in RUNS:
            results[name][run.name], missed = evaluate(r, queries, run)
            if name == "new" and run.name == "keywords":
                misses = _explain(missed, analyzer, {m.id: m.content for m, _ in items})
        timings[f"evaluate_{name}_s"] = time.perf_counter() - t
    timings = {k: round(v, 1) for k, v in timings.items()}
    timings["total_s"] = round(time.perf_counter() - t0, 1)
    keyword_only = {run: {c: results["new"][run][c]["recall@10"] for c in LANGS} for run in KEYWORD_ONLY}
    report = {
        "environment": environment(),
        "set": {"memories": len(items), "queries": len(queries),
                "per_language": {c: {"memories": sum(m.id.startswith(f"{c}-") for m, _ in items),
                                     "queries": sum(q["lang"] == c for q, _ in queries)} for c in LANGS}},
        "settings": {"top_k": K, "analysers": {n: a.model_dump() for n, a in ANALYSERS.items()},
                     "runs": {run.name: {"profile": run.profile, "embedding": run.embedded,
                                         "overrides": {k: v for k, v in (("min_score", run.overrides.min_score),
                                                                         ("min_relevance", run.overrides.min_relevance))
                                                       if v is not None}} for run in RUNS}},
        "target": {"keyword_only_recall@10": 0.9,
                   "met": {run: all(v >= 0.9 for v in per.values()) for run, per in keyword_only.items()}},
        "timings": timings,
        "results": results,
        "keyword_only_misses": misses,
        "markdown": markdown(results),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(report["markdown"])  # noqa: T201 - the command's report
    print(f"keyword-only Recall@10 >= 0.9 in every language: {report['target']['met']}; "  # noqa: T201
          f"{timings['total_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
