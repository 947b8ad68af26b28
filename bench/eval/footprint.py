"""Bytes per memory: what a corpus costs the server in memory and on disk.

Three measurements over SciFact's 5,183 abstracts, written from the cached embeddings:

* ``index``  — the in-process retriever: resident memory (RSS) grown by loading the corpus and
  running the background upkeep, in a fresh child process; plus each space's own arrays;
* ``server`` — the real server (``python -m teleo_server``) started on the stored corpus, against
  the same server started on an empty store: the difference of their RSS once serving;
* ``database`` — the SQLite file (after a checkpoint), and per head the bytes of its stored vectors,
  written as the server stores them (per-token vectors as the late-interaction space's codes;
  ``--settings '{"late_interaction_bits": 16, "late_interaction_dim": null}'`` keeps float16 rows);
* ``ingest`` — the empty server's RSS before and after one 64 KB memory goes in through ``Store``
  (the embedding runtime's buffers are sized by the largest batch it has run).

    python -m bench.eval.footprint --data ../shared/data [--settings '{"late_interaction_bits": 16}']

Results go to ``bench/results/footprint[-tag].json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def rss_mb() -> float:
    from bench.harness.env import rss_bytes

    return rss_bytes() / 2**20


def _arrays_bytes(obj: Any, seen: set[int], depth: int = 0) -> int:
    """Bytes of the numpy arrays reachable from ``obj`` (views counted once, through their base)."""
    if id(obj) in seen or depth > 8:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        base = obj if obj.base is None else obj.base
        if base is not obj:
            return _arrays_bytes(base, seen, depth + 1)
        return obj.nbytes
    if isinstance(obj, dict):
        return sum(_arrays_bytes(v, seen, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return sum(_arrays_bytes(v, seen, depth + 1) for v in obj)
    total = 0
    if hasattr(obj, "__dict__"):
        total += _arrays_bytes(vars(obj), seen, depth + 1)
    for slot in getattr(type(obj), "__slots__", ()):
        total += _arrays_bytes(getattr(obj, slot, None), seen, depth + 1)
    return total


def _index_child(data: Path, cache: Path, settings: dict[str, Any], out: Any) -> None:
    from bench.eval.corpora import load_all
    from teleo_server.pipeline import PipelineSettings, make_retriever

    prepared = load_all(data, cache, 1, ("scifact",))["scifact"][0]
    gc.collect()
    before = rss_mb()
    r = make_retriever(PipelineSettings(**settings), "numpy")
    for m, e in prepared.items:
        r.add(m, e)
    r.maintain()
    gc.collect()
    after = rss_mb()
    n = len(prepared.items)
    seen = {id(r.catalog)}  # the catalog is shared by every space: counted once, on its own
    spaces = {name: _arrays_bytes(s, seen) / n for name, s in r.spaces.items()}
    late = r.spaces.get("E12_late")
    out.put({"memories": n, "rss_growth_bytes_per_memory": (after - before) * 2**20 / n,
             "arrays_bytes_per_memory": {"catalog": _arrays_bytes(r.catalog, set()) / n, **spaces},
             "tokens_per_memory": late.store.n_tokens / n if late is not None else None,
             "token_bytes": late.store.codec.bytes_per_token if late is not None and late.store.codec else None})


def measure_index(data: Path, cache: Path, settings: dict[str, Any]) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_index_child, args=(data, cache, settings, q))
    p.start()
    res = q.get()
    p.join()
    return res


def token_codecs(settings: dict[str, Any]) -> dict[str, Any]:
    """Head -> the codec the server of these settings stores it in (``MemoryCore.stored_forms``)."""
    from teleo_server.pipeline import PipelineSettings, make_retriever

    return getattr(make_retriever(PipelineSettings(**settings), "numpy"), "token_codecs", dict)()


def write_store(data: Path, cache: Path, path: Path, settings: dict[str, Any]) -> int:
    from bench.eval.corpora import load_all
    from teleo_server.index.precision import stored_form
    from teleo_server.store import SQLiteStore

    prepared = load_all(data, cache, 1, ("scifact",))["scifact"][0]
    codecs = token_codecs(settings)
    store = SQLiteStore(path)
    try:
        for start in range(0, len(prepared.items), 256):
            store.put_many([(m, stored_form(e, codecs)) for m, e in prepared.items[start:start + 256]])
    finally:
        store.close()
    return len(prepared.items)


def measure_database(path: Path, n: int) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        heads = {h: (b or 0) / n for h, b in conn.execute(
            "SELECT head, SUM(length(data)) + SUM(COALESCE(length(ids), 0)) FROM chunk_vectors GROUP BY head")}
        content = conn.execute("SELECT SUM(length(content)) FROM memories").fetchone()[0] or 0
        pages = _pages(conn, n)
    finally:
        conn.close()
    files = sum(f.stat().st_size for f in path.parent.glob(path.name + "*"))
    return {"file_bytes_per_memory": files / n, "vector_bytes_per_memory": heads, "content_bytes_per_memory": content / n,
            "pages_per_memory": pages}


def _pages(conn: sqlite3.Connection, n: int) -> dict[str, dict[str, float]]:
    """Per table and index: bytes of its pages, of the rows in them and unused, per memory (SQLite's
    ``dbstat``; empty where SQLite is built without it). Rows too long for their b-tree page go on
    overflow pages, whose unused tails show here."""
    try:
        rows = conn.execute("SELECT name, SUM(pgsize), SUM(payload), SUM(unused) FROM dbstat GROUP BY name "
                            "ORDER BY 2 DESC").fetchall()
    except sqlite3.OperationalError:
        return {}
    return {name: {"bytes": size / n, "payload": payload / n, "unused": unused / n}
            for name, size, payload, unused in rows if size >= n}


def measure_server(data_dir: Path, empty_dir: Path, settings: dict[str, Any], n: int,
                   parts: tuple[str, ...] = ("server", "ingest"), repeat: int = 1) -> dict[str, Any]:
    """Start the empty and the loaded server ``repeat`` times each, alternating (the RSS of one
    start differs from the next by a few MB: which allocator arena each thread's blocks land in is
    decided as the threads run); the figures are the medians, every run's RSS is kept beside them."""
    runs: dict[str, list[float]] = {"empty": [], "loaded": []}
    out: dict[str, Any] = {}
    for i in range(repeat):
        # a fresh empty store each time (the first one takes the 64 KB Store of ``ingest``)
        empty = empty_dir if i == 0 else empty_dir.with_name(f"{empty_dir.name}-{i}")
        one = _server_run(data_dir, empty, settings, parts if i == 0 else tuple(p for p in parts if p != "ingest"))
        for name in runs:
            if f"{name}_rss_mb" in one:
                runs[name].append(one.pop(f"{name}_rss_mb"))
        out.update({k: v for k, v in one.items() if k not in out})
    for name, values in runs.items():
        if values:
            out[f"{name}_rss_mb"] = float(statistics.median(values))
            out[f"{name}_rss_runs_mb"] = values
    if runs["loaded"]:
        out["rss_bytes_per_memory"] = (out["loaded_rss_mb"] - out["empty_rss_mb"]) * 2**20 / n
        out["rss_bytes_per_memory_runs"] = [(b - a) * 2**20 / n for a, b in zip(runs["empty"], runs["loaded"])]
    return out


def _server_run(data_dir: Path, empty_dir: Path, settings: dict[str, Any],
                parts: tuple[str, ...]) -> dict[str, Any]:
    from bench.harness.server import ServerProcess

    from bench.harness.server import store_batch
    from teleo.v1 import memory_pb2 as pb

    # every start rebuilds its indexes from the database, as the figures before snapshots did (a
    # server that reads a snapshot is measured by bench.eval.restart)
    env = {"TELEO_INDEX_SNAPSHOT": "false", **({"TELEO_PIPELINE": json.dumps(settings)} if settings else {})}
    out: dict[str, Any] = {}
    for name, d in (("empty", empty_dir), ("loaded", data_dir)):
        if name == "loaded" and "server" not in parts:
            continue
        server = ServerProcess(d, env=env)
        t0 = time.perf_counter()
        with server.start(timeout=900):
            if name == "loaded":
                # the start-up upkeep (goal clustering) runs beside reads and hands its temporaries
                # back when it ends: measured before that, RSS varied by several KB a memory
                out["upkeep_s"] = wait_for_goals(server)
            out[f"{name}_rss_mb"] = settled_rss(server)
            out[f"{name}_start_s"] = time.perf_counter() - t0
            if name == "empty" and "ingest" in parts:
                # a short memory first (the first embedding loads the models), then the long one
                store_batch(server.address, server.metadata, [pb.MemoryInput(content="warm-up note", namespace="fp")])
                before = server.rss_mb()
                text = long_text(64 * 1024)
                t1 = time.perf_counter()
                resp = store_batch(server.address, server.metadata, [pb.MemoryInput(content=text, namespace="fp")])
                if resp.failed:
                    raise RuntimeError(f"the 64 KB Store failed: {resp.items[0].error}")
                after = server.rss_mb()
                out["ingest"] = {"bytes": len(text.encode()), "store_s": time.perf_counter() - t1,
                                 "rss_before_mb": before, "rss_after_mb": after,
                                 "rss_growth_mb": after - before, "target_growth_mb": 100}
    return out


def settled_rss(server: Any, every_s: float = 1.0, within_mb: float = 0.5, limit_s: float = 60.0) -> float:
    """The server's RSS (MB) once three readings ``every_s`` apart agree within ``within_mb`` (at
    most ``limit_s`` of readings): upkeep still under way must not be read as what the corpus holds."""
    readings: list[float] = []
    t0 = time.perf_counter()
    while True:
        time.sleep(every_s)
        readings.append(server.rss_mb())
        last = readings[-3:]
        if len(last) == 3 and max(last) - min(last) <= within_mb or time.perf_counter() - t0 > limit_s:
            return last[-1]


def wait_for_goals(server: Any, limit_s: float = 300.0) -> float:
    """Seconds until the server reports goals (its first upkeep round has clustered the corpus)."""
    from bench.harness.server import stats

    import grpc

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        try:
            if stats(server.address, server.metadata).goals > 0:
                return time.perf_counter() - t0
        except grpc.RpcError as exc:  # still starting (the embedder loads beside the index)
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
        time.sleep(0.5)
    raise RuntimeError(f"the server reported no goals within {limit_s:.0f} s of starting")


def long_text(size: int) -> str:
    """Deterministic prose-like text of ``size`` bytes (words of the synthetic corpus)."""
    from bench.harness import synthetic

    corpus = synthetic.make_corpus(synthetic.CorpusSpec(n=400, seed=7, median_words=120, max_words=400, max_tokens=1))
    text = ". ".join(corpus.texts)
    while len(text) < size:
        text += ". " + text
    return text[:size]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--settings", type=json.loads, default={}, help="PipelineSettings overrides as JSON")
    ap.add_argument("--tag", default="")
    ap.add_argument("--repeat", type=int, default=1,
                    help="start the empty and the loaded server this many times each (medians reported)")
    ap.add_argument("--parts", default="index,database,server,ingest",
                    help="comma-separated: index, database, server (loaded vs empty RSS), ingest (one 64 KB Store)")
    args = ap.parse_args(argv)
    parts = tuple(p.strip() for p in args.parts.split(","))
    if not (args.data / "beir" / "scifact").is_dir():
        ap.error(f"SciFact not found under {args.data}")
    sys.path.insert(0, str(REPO))
    from bench.eval.run import environment

    res: dict[str, Any] = {"environment": environment(), "settings": args.settings, "target_bytes_per_memory": 17 * 1024}
    if "index" in parts:
        res["index"] = measure_index(args.data, args.cache, args.settings)
    with tempfile.TemporaryDirectory(prefix="teleo-footprint-") as tmp:
        loaded, empty = Path(tmp) / "loaded", Path(tmp) / "empty"
        loaded.mkdir()
        n = 0
        if "database" in parts or "server" in parts:
            t0 = time.perf_counter()
            n = write_store(args.data, args.cache, loaded / "teleo.db", args.settings)
            res["database"] = {**measure_database(loaded / "teleo.db", n), "load_and_write_s": time.perf_counter() - t0,
                               "token_codecs": {h: c.spec.tag for h, c in token_codecs(args.settings).items()
                                                if not c.identity}}
        if "server" in parts or "ingest" in parts:
            res["server"] = measure_server(loaded, empty, args.settings, n, parts, max(args.repeat, 1))
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"footprint{'-' + args.tag if args.tag else ''}.json"
    (args.out / name).write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))  # noqa: T201 - the command's report
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
