"""What a restart costs: the server rebuilding its indexes from the database, against reading the
snapshot its last clean stop wrote (``teleo_server/snapshot.py``).

Two measurements:

* ``server`` — SciFact's 5,183 abstracts written to a database from the cached embeddings (as
  ``bench.eval.footprint`` does), then real servers (``python -m teleo_server``) started on it in
  turn: one that rebuilds (no snapshot there yet) and one that reads the snapshot the rebuilt
  server wrote when it stopped, ``--rounds`` times. Each start is timed from launch to SERVING,
  each stop from SIGTERM to exit (the snapshot is written then); the RSS once settled and the
  answers to 30 SciFact queries are compared (the same ids, the same scores).
* ``crash`` — ``--crash-writes N``: on the same SciFact database, a server started from the
  snapshot stores N more memories (SciFact test queries' texts) and is killed with SIGKILL, so no
  clean stop writes a new snapshot. The next start reads the old snapshot and indexes again the
  memories the database's change journal lists; it is timed from launch to SERVING against a start
  that rebuilds from the same database, and their answers (30 SciFact queries and 30 of the new
  memories' own texts) are compared.
* ``synthetic`` — ``--synthetic N`` memories of the scale workload's generator in-process: the
  time to index them (what a rebuild does per memory, without reading the database), to write
  the snapshot and to read it back, and whether 200 queries answer the same afterwards. Then a
  checkpoint as a serving server writes it, by a forked copy: how long the fork holds the index
  thread, how long the copy writes, its own memory, and retrieval latency while it writes.

    python -m bench.eval.restart --data ../shared/data [--rounds 2] [--crash-writes 300] [--synthetic 100000]

Results go to ``bench/results/restart.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")  # as `teleo serve` runs: a checkpoint is written by a fork


def _answers(server: Any, queries: list[str]) -> list[list[tuple[str, float]]]:
    import grpc
    from teleo.v1 import memory_pb2 as pb
    from teleo.v1 import memory_pb2_grpc

    with grpc.insecure_channel(server.address) as ch:
        stub = memory_pb2_grpc.MemoryServiceStub(ch)
        out = []
        for q in queries:
            events = stub.Retrieve(pb.RetrieveRequest(text=q, top_k=10), metadata=server.metadata, timeout=120)
            out.append([(e.result.memory.id, round(e.result.score, 5)) for e in events if e.WhichOneof("event") == "result"])
        return out


def _differences(a: list[list[tuple[str, float]]], b: list[list[tuple[str, float]]]) -> dict[str, Any]:
    """How two sets of answers to the same queries differ: queries whose ids (in order) differ,
    and the largest score difference where the ids agree."""
    ids = sum([x for x, _ in p] != [y for y, _ in q] for p, q in zip(a, b, strict=True))
    diff = max((abs(s - t) for p, q in zip(a, b, strict=True) if [x for x, _ in p] == [y for y, _ in q]
                for (_, s), (_, t) in zip(p, q, strict=True)), default=0.0)
    return {"queries_with_other_ids": ids, "max_score_difference": diff}


def _started(data_dir: Path, env: dict[str, str]) -> tuple[Any, float, dict[str, Any]]:
    """A server started on ``data_dir``, seconds from launch to SERVING, and its index.loaded event."""
    from bench.harness.server import ServerProcess

    server = ServerProcess(data_dir, env=env)
    t0 = time.perf_counter()
    server.start(timeout=1800)
    seconds = time.perf_counter() - t0
    loaded = [json.loads(ln) for ln in server.log_path.read_text(errors="replace").splitlines() if '"index.loaded"' in ln]
    return server, seconds, loaded[-1]


def _one_start(data_dir: Path, queries: list[str], env: dict[str, str]) -> dict[str, Any]:
    from bench.eval.footprint import settled_rss, wait_for_goals

    server, start_s, loaded = _started(data_dir, env)
    out: dict[str, Any] = {"start_s": start_s}
    try:
        out["source"] = loaded.get("source", "store")  # (a rebuild's event names no source)
        out["goals_after_s"] = wait_for_goals(server)
        out["rss_mb"] = settled_rss(server)
        out["memories_indexed"] = loaded["memories"]
        out["answers"] = _answers(server, queries)
        # asked again just before the stop that writes the snapshot: upkeep may have moved the
        # indexes since (goals, calibration), and the snapshot holds them as they are then
        out["answers_at_stop"] = _answers(server, queries)
    finally:
        t1 = time.perf_counter()
        server.stop()
        out["stop_s"] = time.perf_counter() - t1
    snap = data_dir / "index.snapshot"
    out["snapshot_bytes"] = snap.stat().st_size if snap.exists() else 0
    written = [json.loads(ln) for ln in server.log_path.read_text(errors="replace").splitlines()
               if '"index.snapshot_written"' in ln]
    out["snapshot_write_s"] = written[-1]["seconds"] if written else None
    return out


def _scifact_database(data: Path, cache: Path, settings: dict[str, Any], prefix: str
                      ) -> tuple[Path, Path, int, dict[str, str]]:
    """A scratch directory holding ``data/teleo.db`` with SciFact's abstracts written from the
    cached embeddings: (scratch root, data directory, memories, the servers' environment)."""
    from bench.eval.footprint import write_store

    root = Path(tempfile.mkdtemp(prefix=prefix))
    data_dir = root / "data"
    data_dir.mkdir()
    n = write_store(data, cache, data_dir / "teleo.db", settings)
    return root, data_dir, n, ({"TELEO_PIPELINE": json.dumps(settings)} if settings else {})


def measure_server(data: Path, cache: Path, rounds: int, settings: dict[str, Any]) -> dict[str, Any]:
    from bench.eval.datasets import scifact

    queries = [q.text for q in scifact(data).queries["train"][:30]]
    root, data_dir, n, env = _scifact_database(data, cache, settings, "teleo-restart-")
    try:
        runs: dict[str, list[dict[str, Any]]] = {"store": [], "snapshot": []}
        for _ in range(rounds):
            (data_dir / "index.snapshot").unlink(missing_ok=True)
            rebuilt = _one_start(data_dir, queries, env)  # writes the snapshot as it stops
            read = _one_start(data_dir, queries, env)
            assert rebuilt["source"] == "store" and read["source"] == "snapshot", (rebuilt["source"], read["source"])
            read["same_answers"] = read["answers"] == rebuilt["answers_at_stop"]
            read["differing"] = _differences(rebuilt["answers_at_stop"], read["answers"])
            rebuilt["moved_while_serving"] = _differences(rebuilt["answers"], rebuilt["answers_at_stop"])
            runs["store"].append(rebuilt)
            runs["snapshot"].append(read)
            print(f"rebuild {rebuilt['start_s']:.1f} s, {rebuilt['rss_mb']:.1f} MB; snapshot {read['start_s']:.1f} s, "
                  f"{read['rss_mb']:.1f} MB, {read['snapshot_bytes'] / 2**20:.1f} MB file, same answers "
                  f"{read['same_answers']} {read['differing']} (moved while serving {rebuilt['moved_while_serving']})", flush=True)
        out: dict[str, Any] = {"memories": n, "queries": len(queries)}
        for name, rs in runs.items():
            out[name] = {k: [r[k] for r in rs] for k in ("start_s", "stop_s", "rss_mb", "goals_after_s", "snapshot_bytes",
                                                         "snapshot_write_s", "memories_indexed")}
            out[name]["start_s_median"] = statistics.median(out[name]["start_s"])
        out["snapshot"]["same_answers"] = [r["same_answers"] for r in runs["snapshot"]]
        out["snapshot"]["differing"] = [r["differing"] for r in runs["snapshot"]]
        out["store"]["moved_while_serving"] = [r["moved_while_serving"] for r in runs["store"]]
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure_crash(data: Path, cache: Path, writes: int, rounds: int, settings: dict[str, Any]) -> dict[str, Any]:
    from teleo.v1 import memory_pb2 as pb

    from bench.eval.datasets import scifact
    from bench.eval.footprint import wait_for_goals
    from bench.harness.server import store_batch

    sf = scifact(data)
    queries = [q.text for q in sf.queries["train"][:30]]
    notes = [q.text for q in sf.queries["test"]][:writes]
    root, data_dir, n, env = _scifact_database(data, cache, settings, "teleo-crash-")
    try:
        first, _, _ = _started(data_dir, env)  # a rebuild; its clean stop writes the snapshot
        wait_for_goals(first)  # (a stop waits for the first upkeep round)
        first.stop()
        runs = []
        for r in range(rounds):
            if not (data_dir / "index.snapshot").exists():
                raise RuntimeError("no snapshot to start from: " + first.logs())
            before, _, loaded = _started(data_dir, env)
            try:
                if loaded.get("source") != "snapshot":
                    raise RuntimeError(f"the start before the crash rebuilt: {before.logs()}")
                batch = [pb.MemoryInput(content=f"{text} (note {r})") for text in notes]
                t0 = time.perf_counter()
                stored = store_batch(before.address, before.metadata, batch)
                store_s = time.perf_counter() - t0
                asked = queries + [m.content for m in batch[:30]]
            finally:
                before.kill()  # no clean stop: the snapshot on disk is the one this start read
            recovered, recovered_s, loaded = _started(data_dir, env)
            try:
                if loaded.get("source") != "snapshot":
                    raise RuntimeError(f"the start after the crash rebuilt: {recovered.logs()}")
                wait_for_goals(recovered)  # (the snapshot's goals: at once)
                answers = _answers(recovered, asked)
            finally:
                recovered.stop()  # writes a new snapshot: the next round starts from it
            # the same database rebuilt in a directory of its own (a rebuild here would prune the
            # journal the next round's snapshot relies on)
            copy = root / f"rebuilt-{r}"
            copy.mkdir()
            shutil.copy2(data_dir / "teleo.db", copy / "teleo.db")
            shutil.copy2(root / "data.token", root / f"{copy.name}.token")  # the token its database knows
            rebuilt, rebuilt_s, _ = _started(copy, env)
            try:
                wait_for_goals(rebuilt)  # its first upkeep round clusters the goals afresh
                reference = _answers(rebuilt, asked)
            finally:
                rebuilt.kill()
            found = sum(any(i == want.id for i, _ in got) for want, got in zip(stored.items, answers[len(queries):]))
            run = {"writes": len(notes), "store_batch_s": store_s, "recovered_start_s": recovered_s,
                   "reindexed": loaded.get("reindexed"), "counters": loaded.get("counters"),
                   "load_s": loaded.get("seconds"), "rebuild_start_s": rebuilt_s,
                   "new_found_by_own_text": found, "new_asked": len(asked) - len(queries),
                   "against_rebuild": _differences(reference, answers)}
            print(f"crash after {len(notes)} stores: start {recovered_s:.1f} s ({run['reindexed']} re-indexed, "
                  f"load {run['load_s']} s) vs rebuild {rebuilt_s:.1f} s; new found {found}/{run['new_asked']}; "
                  f"against the rebuild {run['against_rebuild']}", flush=True)
            runs.append(run)
        return {"memories": n, "runs": runs}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure_synthetic(n: int) -> dict[str, Any]:
    from bench.harness import synthetic, teleo_inproc
    from bench.harness.workloads.scale import memory_of
    from teleo_server import snapshot

    corpus = synthetic.make_corpus(synthetic.CorpusSpec(n=n, seed=0, max_tokens=32))
    queries = synthetic.make_queries(corpus, 200, seed=1)

    def answers(r: Any) -> list[list[str]]:
        return [teleo_inproc.run_query(r, queries.texts[j], queries.embedding(j), p, 10).ids
                for p in ("teleological", "hybrid") for j in range(len(queries))]

    r = teleo_inproc.make({})
    t0 = time.perf_counter()
    for i in range(n):
        r.add(memory_of(corpus, i), corpus.embedding(i))
    r.settle()
    index_s = time.perf_counter() - t0
    r.maintain()
    before = answers(r)
    root = Path(tempfile.mkdtemp(prefix="teleo-snapshot-"))
    try:
        path = root / "index.snapshot"
        state, shared = r.snapshot_state()
        t0 = time.perf_counter()
        size = snapshot.write(path, state, "bench", shared)
        write_s = time.perf_counter() - t0
        forked = _forked_write(r, queries, path) if snapshot.fork_unsafe() is None else None
        del state, shared, r
        fresh = teleo_inproc.make({})
        t0 = time.perf_counter()
        fresh.restore_state(snapshot.read(path, "bench", fresh.snapshot_state()[1]))
        read_s = time.perf_counter() - t0
        same = answers(fresh) == before
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{n} synthetic: index {index_s:.1f} s, write {write_s:.2f} s, read {read_s:.2f} s, {size / 2**20:.0f} MB, "
          f"same answers {same}", flush=True)
    return {"memories": n, "index_s": index_s, "write_s": write_s, "read_s": read_s, "bytes": size,
            "bytes_per_memory": size / n, "same_answers": same, "checkpoint_forked": forked}


def _private_kb(pid: int) -> int | None:
    """The process's private (copied or its own) resident memory, KB (Linux)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    return sum(int(line.split()[1]) for line in text.splitlines() if line.startswith(("Private_Clean:", "Private_Dirty:")))


def _forked_write(r: Any, queries: Any, path: Path) -> dict[str, Any]:
    """A checkpoint as the server writes one (``snapshot.write_in_child``): how long the fork holds
    the caller (a retrieval waits that long, where it waited for the whole write before), how long
    the copy takes to write, the copy's own memory, and the latency of retrievals run while it
    writes against the same retrievals run alone (this process, the copy beside it on the CPU)."""
    import threading

    from bench.harness import teleo_inproc
    from bench.harness.results import percentiles
    from teleo_server import snapshot

    def timed(j: int) -> float:
        t = time.perf_counter()
        teleo_inproc.run_query(r, queries.texts[j], queries.embedding(j), "teleological", 10)
        return (time.perf_counter() - t) * 1e3

    def pct(xs: list[float]) -> dict[str, float]:
        p = percentiles(xs)
        return {"n": p["n"], "p50_ms": round(p["p50"], 2), "p99_ms": round(p["p99"], 2), "max_ms": round(p["max"], 2)}

    alone = [timed(j % len(queries)) for j in range(len(queries))]
    state, shared = r.snapshot_state()
    t0 = time.perf_counter()
    writer = snapshot.write_in_child(path, state, "bench", shared)
    fork_s = time.perf_counter() - t0
    done: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: done.update(result=writer.wait()))
    waiter.start()
    beside, private, j = [], [], 0
    while waiter.is_alive():
        beside.append(timed(j % len(queries)))
        j += 1
        if j % 20 == 0 and (kb := _private_kb(writer.pid)) is not None:
            private.append(kb)
    waiter.join()
    size, child_s = done["result"]
    out = {"fork_ms": round(fork_s * 1e3, 2), "child_write_s": round(child_s, 2), "bytes": size,
           "copy_private_mb_max": round(max(private) / 1024, 1) if private else None,
           "retrievals_alone": pct(alone), "retrievals_while_writing": pct(beside) if beside else None}
    print(f"checkpoint by a forked copy: fork {out['fork_ms']} ms, the copy wrote in {child_s:.2f} s "
          f"(its own memory up to {out['copy_private_mb_max']} MB); teleological alone {out['retrievals_alone']}, "
          f"while it wrote {out['retrievals_while_writing']}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    from bench.harness.env import environment

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "eval" / "cache")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "restart.json")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--synthetic", type=int, default=0, help="also measure N synthetic memories in-process")
    ap.add_argument("--crash-writes", type=int, default=0,
                    help="also measure a start after a SIGKILL that followed N stores (SciFact test queries' texts)")
    ap.add_argument("--skip-server", action="store_true")
    ap.add_argument("--settings", type=json.loads, default={}, help="PipelineSettings overrides as JSON")
    args = ap.parse_args(argv)
    result: dict[str, Any] = {"environment": environment(), "settings": args.settings}
    if not args.skip_server:
        result["server"] = measure_server(args.data, args.cache, args.rounds, args.settings)
    if args.crash_writes:
        result["crash"] = measure_crash(args.data, args.cache, args.crash_writes, args.rounds, args.settings)
    if args.synthetic:
        result["synthetic"] = measure_synthetic(args.synthetic)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
