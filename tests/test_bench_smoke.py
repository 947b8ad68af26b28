"""The smoke group of the benchmark harness, run end to end so the harness never rots.

It starts real server processes and writes real records; the assertions check that every
workload produced sane measurements (ordered percentiles, no RPC errors, correctness checks
passed), and that peers either ran or said why not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[list[dict], Path]:
    out = tmp_path_factory.mktemp("bench-smoke")
    proc = subprocess.run(
        [sys.executable, "-m", "bench.harness", "--group", "smoke", "--out", str(out),
         "--workdir", str(out / "work"), "--no-plots"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return records, out


def _where(records: list[dict], **match) -> list[dict]:
    return [r for r in records if all(r.get(k) == v for k, v in match.items())]


@pytest.mark.integration
def test_smoke_records_environment_first(smoke):
    records, _ = smoke
    env = records[0]
    assert env["workload"] == "environment"
    assert len(env["git_sha"]) == 40 and env["cores"] >= 1 and env["cpu_model"]
    assert env["versions"]["numpy"] and env["machine"]
    assert all(r["machine"] == env["machine"] for r in records)


@pytest.mark.integration
def test_smoke_runs_every_workload_without_failure(smoke):
    records, _ = smoke
    assert not [r for r in records if r.get("error")]
    ran = {r["workload"] for r in records if r.get("metric") == "workload_seconds"}
    assert ran == {"correctness", "scale", "latency", "ingest", "quality"}


@pytest.mark.integration
def test_smoke_correctness_checks_pass(smoke):
    records, _ = smoke
    checks = _where(records, workload="correctness", metric="check")
    assert len(checks) >= 2
    assert all(c["passed"] for c in checks), checks
    hnsw = sorted(_where(records, workload="correctness", metric="ann_recall", index="hnsw"), key=lambda r: r["ef_search"])
    assert [r["ef_search"] for r in hnsw] == [16, 64]
    assert hnsw[-1]["recall"] >= hnsw[0]["recall"]  # a wider beam never finds fewer true neighbours here


@pytest.mark.integration
def test_smoke_scale_percentiles_are_ordered_and_targets_found(smoke):
    records, _ = smoke
    teleo = _where(records, workload="scale", system="teleo", metric="query")
    assert {r["profile"] for r in teleo} == {"hybrid", "teleological"}
    for r in teleo:
        assert 0 < r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"]
        assert r["queries"] == 8
        assert r["hit_at_k"] >= 0.75  # each synthetic query is built from its target memory
        assert "dense" in r["stage_p50_ms"] and "finalize" in r["stage_p50_ms"]


@pytest.mark.integration
def test_smoke_grpc_latency_has_stages_and_no_errors(smoke):
    records, _ = smoke
    grpc = _where(records, workload="latency", metric="grpc")
    assert {(r["profile"], r["clients"]) for r in grpc} == {(p, c) for p in ("hybrid", "teleological") for c in (1, 2)}
    for r in grpc:
        assert r["errors"] == 0 and r["requests"] == 3 * r["clients"]
        assert r["returned_mean"] == 10
        assert 0 < r["p50_ms"] <= r["p99_ms"]
        assert r["embed_p50_ms"] > 0  # text queries are embedded by the server, never served from a cache
        assert r["throughput_qps"] > 0
        assert {"sparse_recall", "dense", "fusion", "finalize"} <= set(r["stage_p50_ms"])
    tele = [r for r in grpc if r["profile"] == "teleological"]
    assert all("late_interaction" in r["stage_p50_ms"] for r in tele)


@pytest.mark.integration
def test_smoke_ingest_measures_with_and_without_embedding(smoke):
    records, _ = smoke
    grpc = _where(records, workload="ingest", metric="grpc_store_batch")[0]
    direct = _where(records, workload="ingest", metric="store_and_index")[0]
    embed = _where(records, workload="ingest", metric="embed_only")[0]
    assert grpc["stored"] == grpc["memories"] == 8
    assert direct["memories"] == embed["memories"] == 8
    # Without embedding, storing and indexing must be faster than the full path.
    assert direct["memories_per_s"] > grpc["memories_per_s"]


@pytest.mark.integration
def test_smoke_peers_ran_or_said_why(smoke):
    records, out = smoke
    for peer in ("bm25s", "milvus_lite", "lancedb"):
        ran = _where(records, system=peer, metric="query") or _where(records, system=peer, metric="ann_recall")
        skipped = [r for r in _where(records, system=peer) if r.get("skipped")]
        assert ran or (skipped and "bench-venv" in skipped[0]["reason"]), peer
    summary = (out / "summary.md").read_text()
    assert "## Targets" in summary and "## Scale" in summary and "## Latency through the gRPC server" in summary
