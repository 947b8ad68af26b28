"""``summary.md`` and PNG plots from the result records (every table and plot names its machine)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)
Rec = dict[str, Any]


def _f(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _table(header: list[str], rows: list[list[Any]], digits: int = 2) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_f(c, digits) for c in r) + " |" for r in rows]
    return out + [""]


def _sel(records: list[Rec], workload: str, **match: Any) -> list[Rec]:
    return [r for r in records if r.get("workload") == workload and not r.get("skipped")
            and all(r.get(k) == v for k, v in match.items())]


_KEY = ("workload", "system", "metric", "dataset", "mode", "profile", "n", "clients", "index", "ef_search", "check")


def latest(records: list[Rec]) -> list[Rec]:
    """One record per measurement key, the last written (runs appended with --append replace older ones)."""
    keep: dict[tuple, Rec] = {}
    for r in records:
        key = tuple(str(r.get(k)) for k in _KEY) + ((r.get("reason"),) if r.get("skipped") else ())
        keep.pop(key, None)
        keep[key] = r
    return list(keep.values())


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return None
    return a / b


STAGE_ORDER = ("embed", "sparse_recall", "dense", "entry", "single_space", "fusion", "alignment",
               "late_interaction", "finalize", "queue + transport")

# Which peer measurement each Teleo profile is compared with (same data, same embeddings).
PAIRS = {
    "hybrid": [("qdrant_edge", "hybrid"), ("qdrant_edge", "hybrid_sq"), ("qdrant_edge", "hybrid_bq"),
               ("milvus_lite", "hybrid"), ("milvus_lite_hnsw", "hybrid"), ("lancedb", "hybrid")],
    "teleological": [("qdrant_edge", "teleological"), ("qdrant_edge", "teleological_sq"),
                     ("qdrant_edge", "teleological_bq"),
                     ("milvus_lite", "hybrid"), ("milvus_lite_hnsw", "hybrid"), ("lancedb", "hybrid")],
    "openclaw": [("openclaw_sqlite", "hybrid")],
    "single_space:E6_lexical": [("tantivy", "bm25_teleo_tokens"), ("tantivy", "bm25"), ("qdrant_edge", "bm25"),
                                ("bm25s", "bm25"), ("lancedb", "fts"), ("openclaw_sqlite", "fts_or")],
    "single_space:E1_semantic": [("qdrant_edge", "dense"), ("qdrant_edge", "dense_exact"), ("qdrant_edge", "dense_sq"),
                                 ("qdrant_edge", "dense_bq"), ("chroma", "dense"), ("openclaw_sqlite", "dense_knn"),
                                 ("openclaw_sqlite", "dense"), ("milvus_lite", "dense"), ("lancedb", "dense")],
    "single_space:E13_splade": [("qdrant_edge", "sparse"), ("milvus_lite", "sparse")],
}


def ratio_rows(records: list[Rec]) -> list[list[Any]]:
    """Teleo ÷ peer for every metric, per dataset (quality) and corpus size (scale)."""
    rows: list[list[Any]] = []
    for t in _sel(records, "quality", metric="quality", system="teleo"):
        for peer, mode in PAIRS.get(t["mode"], []):
            p = _sel(records, "quality", metric="quality", dataset=t["dataset"], system=peer, mode=mode)
            if p:
                p = p[-1]
                rows.append([t["dataset"], t["mode"], f"{peer} {mode}", _ratio(t["ndcg@10"], p["ndcg@10"]),
                             _ratio(t["recall@100"], p["recall@100"]), _ratio(t["p50_ms"], p["p50_ms"]),
                             _ratio(t["p95_ms"], p["p95_ms"]), _ratio(t["p99_ms"], p["p99_ms"])])
    for t in _sel(records, "scale", metric="query", system="teleo"):
        for peer, mode in PAIRS.get(t["mode"], []):
            p = _sel(records, "scale", metric="query", n=t["n"], system=peer, mode=mode)
            if p:
                p = p[-1]
                rows.append([f"synthetic {t['n']:,}", t["mode"], f"{peer} {mode}", None,
                             _ratio(t.get("hit_at_k"), p.get("hit_at_k")), _ratio(t["p50_ms"], p["p50_ms"]),
                             _ratio(t["p95_ms"], p["p95_ms"]), _ratio(t["p99_ms"], p["p99_ms"])])
    return rows


def targets(records: list[Rec]) -> list[list[Any]]:
    """Rows (target, measured, met) for the project's stated targets; absent data says so.

    ``met`` is None ("–") where the run did not measure the target (a partial run, e.g. one
    scale size), rather than a failure.
    """
    rows: list[list[Any]] = []
    has_milvus = any(r.get("system", "").startswith("milvus_lite") for r in records)
    for n in (10_000, 100_000) if has_milvus else ():
        t = _sel(records, "scale", system="teleo", metric="query", n=n, profile="hybrid")
        m = _sel(records, "scale", system="milvus_lite", metric="query", n=n, mode="hybrid")
        r = _ratio(t[-1]["p50_ms"], m[-1]["p50_ms"]) if t and m else None
        rows.append([f"hybrid p50 latency at {n:,} ≤ 0.5 × Milvus Lite hybrid",
                     f"{t[-1]['p50_ms']:.2f} / {m[-1]['p50_ms']:.2f} ms = {r:.3f}×" if r is not None else "not measured",
                     None if r is None else r <= 0.5])
        h = _sel(records, "scale", system="milvus_lite_hnsw", metric="query", n=n, mode="hybrid")
        if t and h:
            r = _ratio(t[-1]["p50_ms"], h[-1]["p50_ms"])
            rows.append([f"(same, Milvus Lite with an HNSW index) at {n:,}",
                         f"{t[-1]['p50_ms']:.2f} / {h[-1]['p50_ms']:.2f} ms = {r:.3f}×", r is not None and r <= 0.5])
    rows += stronger_targets(records)
    tq = _sel(records, "quality", system="teleo", metric="quality", dataset="scifact", mode="hybrid")
    mq = _sel(records, "quality", system="milvus_lite", metric="quality", dataset="scifact", mode="hybrid")
    if not has_milvus:
        pass
    elif tq and mq:
        rows.append(["SciFact hybrid nDCG@10 ≥ Milvus Lite hybrid",
                     f"{tq[-1]['ndcg@10']:.4f} vs {mq[-1]['ndcg@10']:.4f}", tq[-1]["ndcg@10"] >= mq[-1]["ndcg@10"]])
        r = _ratio(tq[-1]["p50_ms"], mq[-1]["p50_ms"])
        rows.append(["SciFact (5,183 memories) hybrid p50 ≤ 0.5 × Milvus Lite hybrid",
                     f"{tq[-1]['p50_ms']:.2f} / {mq[-1]['p50_ms']:.2f} ms = {r:.3f}×", r is not None and r <= 0.5])
    else:
        rows.append(["SciFact hybrid nDCG@10 ≥ Milvus Lite hybrid", "not measured", None])
    tb = _sel(records, "quality", system="teleo", metric="quality", dataset="scifact", mode="single_space:E6_lexical")
    bb = _sel(records, "quality", system="bm25s", metric="quality", dataset="scifact", mode="bm25")
    if not has_milvus:
        pass
    elif tb and bb:
        stage = tb[-1].get("stage_p50_ms", {}).get("single_space")
        r_wall = _ratio(tb[-1]["p50_ms"], bb[-1]["p50_ms"])
        r_stage = _ratio(stage, bb[-1]["p50_ms"])
        rows.append(["BM25 query p50 ≤ 1.5 × bm25s (whole retrieve call)",
                     f"{tb[-1]['p50_ms']:.2f} / {bb[-1]['p50_ms']:.2f} ms = {r_wall:.3f}×", r_wall is not None and r_wall <= 1.5])
        if r_stage is not None:
            rows.append(["BM25 query p50 ≤ 1.5 × bm25s (BM25 stage alone)",
                         f"{stage:.2f} / {bb[-1]['p50_ms']:.2f} ms = {r_stage:.3f}×", r_stage <= 1.5])
        d = tb[-1]["ndcg@10"] - bb[-1]["ndcg@10"]
        rows.append(["BM25 nDCG@10 within ±0.005 of bm25s", f"{tb[-1]['ndcg@10']:.4f} vs {bb[-1]['ndcg@10']:.4f} (Δ {d:+.4f})",
                     abs(d) <= 0.005])
    else:
        rows.append(["BM25 vs bm25s on SciFact", "not measured", None])
    return rows


def _p50_row(label: str, t: list[Rec], p: list[Rec], bound: float) -> list[Any]:
    """(target, "a / b ms = r×", met) for Teleo's p50 ≤ ``bound`` × the peer's p50."""
    r = _ratio(t[-1]["p50_ms"], p[-1]["p50_ms"]) if t and p else None
    return [label, f"{t[-1]['p50_ms']:.2f} / {p[-1]['p50_ms']:.2f} ms = {r:.3f}×" if r is not None else "not measured",
            None if r is None else r <= bound]


def stronger_targets(records: list[Rec]) -> list[list[Any]]:
    """The targets against the strongest peers (Qdrant Edge, Tantivy), when the run measured them."""
    rows: list[list[Any]] = []
    if not any(r.get("system") in ("qdrant_edge", "tantivy") for r in records):
        return rows
    for n in (10_000, 100_000):
        t = _sel(records, "scale", system="teleo", metric="query", n=n, mode="teleological")
        for mode in ("teleological", "teleological_sq", "teleological_bq"):
            q = _sel(records, "scale", system="qdrant_edge", metric="query", n=n, mode=mode)
            if mode == "teleological" or q:
                rows.append(_p50_row(f"teleological p50 at {n:,} ≤ 0.5 × Qdrant Edge {mode} (RRF → MaxSim)", t, q, 0.5))
    for n in (10_000, 100_000):
        t = _sel(records, "scale", system="teleo", metric="query", n=n, mode="hybrid")
        q = _sel(records, "scale", system="qdrant_edge", metric="query", n=n, mode="hybrid")
        rows.append(_p50_row(f"hybrid p50 at {n:,} ≤ Qdrant Edge hybrid{' (target)' if n == 100_000 else ''}", t, q, 1.0))
    tb = _sel(records, "quality", system="teleo", metric="quality", dataset="scifact", mode="single_space:E6_lexical")
    for mode in ("bm25_teleo_tokens", "bm25"):
        tv = _sel(records, "quality", system="tantivy", metric="quality", dataset="scifact", mode=mode)
        if not (tb and tv):
            rows.append([f"SciFact BM25 stage p50 ≤ Tantivy {mode} at equal nDCG@10", "not measured", None])
            continue
        stage = tb[-1].get("stage_p50_ms", {}).get("single_space")
        r = _ratio(stage, tv[-1]["p50_ms"])
        d = tb[-1]["ndcg@10"] - tv[-1]["ndcg@10"]
        rows.append([f"SciFact BM25 stage p50 ≤ Tantivy {mode} (nDCG@10 {tb[-1]['ndcg@10']:.4f} vs "
                     f"{tv[-1]['ndcg@10']:.4f}, Δ {d:+.4f})",
                     f"{stage:.3f} / {tv[-1]['p50_ms']:.3f} ms = {r:.3f}×" if r is not None else "not measured",
                     None if r is None else (r <= 1.0 and d >= -0.005)])
        r_wall = _ratio(tb[-1]["p50_ms"], tv[-1]["p50_ms"])
        rows.append([f"(same, Teleo's whole retrieve call) vs Tantivy {mode}",
                     f"{tb[-1]['p50_ms']:.3f} / {tv[-1]['p50_ms']:.3f} ms = {r_wall:.3f}×", r_wall is not None and r_wall <= 1.0])
    return rows


def memory_rows(records: list[Rec]) -> list[list[Any]]:
    """Bytes per memory of every system that recorded a footprint (RSS growth over its build, disk)."""
    rows = []
    for r in records:
        if r.get("metric") != "memory" or r.get("skipped"):
            continue
        where = r.get("dataset") or (f"synthetic {r['n']:,}" if r.get("n") else "?")
        parts = ", ".join(f"{k} {v / 1024:.1f}" for k, v in r.get("disk_breakdown_bytes_per_memory", {}).items())
        rows.append([where, r["system"], r["memories"], r["rss_bytes_per_memory"] / 1024,
                     r["disk_bytes_per_memory"] / 1024 if r.get("disk_bytes") else None, r.get("build_s"), parts])
    return rows


def _vs_milvus_hybrid(records: list[Rec], r: Rec, workload: str, **key: Any) -> float | None:
    """``r``'s p50 over Milvus Lite's hybrid p50 on the same data (``key`` selects it), or None."""
    base = _sel(records, workload, system="milvus_lite", mode="hybrid", **key)
    return _ratio(r["p50_ms"], base[-1]["p50_ms"]) if base else None


def markdown(records: list[Rec]) -> str:
    records = latest(records)
    env = next((r for r in records if r.get("workload") == "environment"), {})
    machine = env.get("machine", "unknown machine")
    lines = [f"# Teleo benchmark: group `{env.get('group', '?')}`", "",
             f"Machine: **{machine}** ({env.get('cores', '?')} cores, GPU: {env.get('gpu') or 'none'}), "
             f"load average at start {env.get('load_avg_1m_at_start', '?')}. "
             f"git {str(env.get('git_sha', ''))[:10]}{' (dirty)' if env.get('git_dirty') else ''}, "
             f"Python {env.get('python', '?')}.", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(env.get("versions", {}).items())), "",
             "Latencies are per query, single-threaded client unless stated, in milliseconds; p50/p95/p99 are "
             "percentiles over all timed queries after warm-up.", ""]
    if any(r.get("interleaved") for r in records):
        lines += ["Teleo and the peers were queried in alternation (each query through every system in a rotating "
                  "order), so load from other work on this machine, which was shared, fell on all of them alike; "
                  "ratios compare samples taken over the same minutes. The 1-minute load average at the end of each "
                  "workload is under Run.", ""]
    lines += ["## Targets", ""] + _table(["target", "measured", "met"], targets(records))

    ratios = ratio_rows(records)
    if ratios:
        lines += ["## Teleo ÷ peer (below 1 is Teleo faster for latency; above 1 is Teleo better for quality)", ""]
        lines += _table(["data", "Teleo profile", "peer", "nDCG@10", "R@100 (hit@10 on synthetic)", "p50", "p95", "p99"],
                        ratios)

    mem = memory_rows(records)
    if mem:
        lines += ["## Bytes per memory", "",
                  "RSS growth of this process over the system's build (every system here runs in-process; arrays "
                  "the caller already held are not counted), and bytes allocated on disk, per memory, in KiB. "
                  "Teleo keeps its indexes in memory (per-token vectors as 2-bit codes by default); the server "
                  "also writes memories and embeddings to SQLite, not measured here.", ""]
        lines += _table(["data", "system", "memories", "RSS KiB/memory", "disk KiB/memory", "build s",
                         "disk KiB/memory by part"], mem, 1)

    checks = _sel(records, "correctness", metric="check") + _sel(records, "quality", metric="check") + \
        _sel(records, "scale", metric="check")
    ann = _sel(records, "correctness", metric="ann_recall")
    if checks or ann:
        lines += ["## Correctness (before timing)", ""]
        lines += _table(["workload", "data", "system", "check", "value", "passed"],
                        [[r["workload"], r.get("dataset") or (f"{r['n']:,}" if r.get("n") else ""), r["system"], r["check"],
                          r.get("value"), r["passed"]] for r in checks], 4)
        lines += _table(["system", "index", "ef_search", "n", "recall@k vs exact", "p50 ms"],
                        [[r["system"], r["index"], r.get("ef_search"), r["n"], r["recall"], r["p50_ms"]] for r in ann], 4)

    qual = _sel(records, "quality", metric="quality")
    if qual:
        lines += ["## Quality and in-process latency (same embeddings for every system)", ""]
        rows = []
        for r in qual:
            rows.append([r["dataset"], r["system"], r["mode"], r["ndcg@10"], r["recall@10"], r["recall@100"],
                         r["p50_ms"], r["p95_ms"], r["p99_ms"], _vs_milvus_hybrid(records, r, "quality", metric="quality", dataset=r["dataset"])])
        lines += _table(["dataset", "system", "profile / mode", "nDCG@10", "R@10", "R@100", "p50", "p95", "p99",
                         "p50 ÷ Milvus hybrid"], rows, 3)
        stage_rows = [[r["dataset"], r["mode"], ", ".join(f"{s} {v:.2f}" for s, v in r.get("stage_p50_ms", {}).items())]
                      for r in qual if r["system"] == "teleo"]
        lines += ["Teleo per-stage p50 (ms):", ""] + _table(["dataset", "profile", "stages"], stage_rows)

    scale = _sel(records, "scale", metric="query")
    if scale:
        lines += ["## Scale (synthetic corpora, in-process, precomputed vectors)", ""]
        rows = []
        for r in scale:
            rows.append([f"{r['n']:,}", r["system"], r["mode"], r["p50_ms"], r["p95_ms"], r["p99_ms"], r.get("hit_at_k"),
                         _vs_milvus_hybrid(records, r, "scale", metric="query", n=r["n"])])
        lines += _table(["memories", "system", "profile / mode", "p50", "p95", "p99", "target hit@10", "p50 ÷ Milvus hybrid"], rows)
        builds = _sel(records, "scale", metric="build")
        lines += _table(["memories", "system", "build s", "memories/s", "RSS growth MB"],
                        [[f"{r['n']:,}", r["system"], r["seconds"], r["memories_per_s"], r.get("rss_growth_mb")] for r in builds], 1)

    grpc = _sel(records, "latency", metric="grpc")
    if grpc:
        srv = _sel(records, "latency", metric="server")
        lines += ["## Latency through the gRPC server (query embedding included)", ""]
        if srv:
            s = srv[-1]
            lines += [f"Corpus {s['corpus']}, {s['memories']:,} memories; start-up to serving {s['start_to_serving_s']:.1f} s, "
                      f"server RSS {s['rss_mb']:.0f} MB.", ""]
        lines += _table(["profile", "clients", "p50", "p95", "p99", "QPS", "server total p50", "embed p50", "errors"],
                        [[r["profile"], r["clients"], r["p50_ms"], r["p95_ms"], r["p99_ms"], r["throughput_qps"],
                          r["server_total_p50_ms"], r["embed_p50_ms"], r["errors"]] for r in grpc], 1)
        lines += ["Per-stage p50 / p99 from the stream's StageEvents (ms):", ""]
        lines += _table(["profile", "clients", "stages"],
                        [[r["profile"], r["clients"], ", ".join(f"{s} {v:.1f}/{r['stage_p99_ms'].get(s, float('nan')):.1f}"
                                                                 for s, v in r["stage_p50_ms"].items())] for r in grpc])

    ing = [r for r in _sel(records, "ingest") if "memories_per_s" in r]
    if ing:
        lines += ["## Ingest", ""]
        lines += _table(["system", "what", "memories", "seconds", "memories/s", "includes"],
                        [[r["system"], r.get("metric"), r.get("memories"), r["seconds"], r["memories_per_s"],
                          r.get("includes", "")] for r in ing], 1)

    durations = [r for r in records if r.get("metric") == "workload_seconds"]
    if durations:
        lines += ["## Run", ""]
        lines += _table(["workload", "git", "seconds", "1-min load average at its end"],
                        [[r["workload"], r.get("git", "?"), r["seconds"], r.get("load_avg_1m")] for r in durations], 1)

    skipped = [r for r in records if r.get("skipped")]
    errors = [r for r in records if r.get("error")]
    if skipped or errors:
        lines += ["## Skipped or failed", ""]
        lines += [f"- {r['workload']} {r.get('system') or ''}: {r['reason']}" for r in skipped]
        lines += [f"- {r['workload']}: FAILED {r['error']}" for r in errors]
        lines.append("")
    return "\n".join(lines)


def plots(records: list[Rec], out: Path) -> list[Path]:
    """latency_vs_size.png, recall_vs_latency.png, stage_breakdown.png (those with data)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("report.no_matplotlib", hint="make bench-venv installs it")
        return []
    records = latest(records)
    env = next((r for r in records if r.get("workload") == "environment"), {})
    machine = env.get("machine", "")
    made = []

    scale = _sel(records, "scale", metric="query")
    if scale:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        series: dict[str, list[tuple[int, float]]] = {}
        for r in scale:
            series.setdefault(f"{r['system']} {r['mode']}", []).append((r["n"], r["p50_ms"]))
        for label, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("memories")
        ax.set_ylabel("p50 query latency (ms)")
        ax.set_title(f"Latency vs corpus size — {machine}", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
        made.append(_save(fig, out / "latency_vs_size.png"))

    qual = _sel(records, "quality", metric="quality")
    ann = _sel(records, "correctness", metric="ann_recall")
    if qual or ann:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        for ds, marker in (("scifact", "o"), ("locomo", "s")):
            for r in (q for q in qual if q["dataset"] == ds):
                axes[0].scatter(r["p50_ms"], r["ndcg@10"], marker=marker)
                axes[0].annotate(f"{r['system']} {r['mode'].replace('single_space:', '')} ({ds})", (r["p50_ms"], r["ndcg@10"]), fontsize=6)
        axes[0].set_xscale("log")
        axes[0].set_xlabel("p50 query latency (ms)")
        axes[0].set_ylabel("nDCG@10")
        axes[0].set_title("Quality vs latency", fontsize=9)
        by_sys: dict[str, list[tuple[float, float, Any]]] = {}
        for r in ann:
            by_sys.setdefault(f"{r['system']} {r['index']}", []).append((r["p50_ms"], r["recall"], r.get("ef_search")))
        for label, pts in by_sys.items():
            pts.sort(key=lambda p: p[0])
            axes[1].plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
            for x, y, ef in pts:
                if ef:
                    axes[1].annotate(f"ef={ef}", (x, y), fontsize=6)
        axes[1].set_xscale("log")
        axes[1].set_xlabel("p50 dense search latency (ms)")
        axes[1].set_ylabel("recall@10 vs exact")
        axes[1].set_title("ANN recall vs latency", fontsize=9)
        axes[1].legend(fontsize=7)
        fig.suptitle(machine, fontsize=9)
        made.append(_save(fig, out / "recall_vs_latency.png"))

    grpc_rows = []
    for r in _sel(records, "latency", metric="grpc"):
        st = dict(r["stage_p50_ms"])
        st["embed"] = r.get("embed_p50_ms", 0.0)
        # What the client waited beyond embedding and the stages: queueing behind other clients, transport.
        st["queue + transport"] = max(0.0, r["p50_ms"] - sum(st.values()))
        grpc_rows.append((f"{r['profile']} c={r['clients']}", st))
    local_rows = [(f"{r['dataset']} {r['mode']}", r.get("stage_p50_ms", {}))
                  for r in _sel(records, "quality", metric="quality", system="teleo") if not r["mode"].startswith("single_space")]
    local_rows += [(f"synthetic {r['n']:,} {r['profile']}", r.get("stage_p50_ms", {}))
                   for r in _sel(records, "scale", metric="query", system="teleo")]
    panels = [(t, rows) for t, rows in (("in-process (precomputed query vectors)", local_rows),
                                        ("through the gRPC server, SciFact, c = concurrent clients", grpc_rows)) if rows]
    if panels:
        seen = {s for _, rows in panels for _, st in rows for s in st}
        stages = [s for s in STAGE_ORDER if s in seen] + sorted(seen - set(STAGE_ORDER))
        colours = {s: f"C{i}" for i, s in enumerate(stages)}
        heights = [0.4 * len(rows) + 1.0 for _, rows in panels]
        fig, axes = plt.subplots(len(panels), 1, figsize=(8, sum(heights) + 0.8), squeeze=False,
                                 gridspec_kw={"height_ratios": heights})
        for ax, (title, rows) in zip(axes[:, 0], panels):
            left = [0.0] * len(rows)
            for s in stages:
                vals = [st.get(s, 0.0) for _, st in rows]
                if any(vals):
                    ax.barh(range(len(rows)), vals, left=left, label=s, color=colours[s])
                left = [a + b for a, b in zip(left, vals)]
            ax.set_yticks(range(len(rows)))
            ax.set_yticklabels([r[0] for r in rows], fontsize=7)
            ax.set_xlabel("p50 ms per stage (stacked)")
            ax.set_title(title, fontsize=8)
            ax.legend(fontsize=6, loc="lower right")
        fig.suptitle(f"Teleo per-stage breakdown — {machine}", fontsize=9)
        made.append(_save(fig, out / "stage_breakdown.png"))
    return made


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def write(records: list[Rec], out: Path, with_plots: bool = True) -> Path:
    path = out / "summary.md"
    text = markdown(records)
    if with_plots:
        made = plots(records, out)
        if made:
            text += "\n## Plots\n\n" + "\n".join(f"![{p.stem}]({p.name})" for p in made) + "\n"
    path.write_text(text, encoding="utf-8")
    return path
