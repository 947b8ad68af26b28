"""Real server processes: durability across kill -9, graceful SIGTERM, the CLI, and a Node.js client."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc

from tests._server import REPO

pytestmark = pytest.mark.integration


def _stub(address: str):
    return memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(address))


def test_acknowledged_writes_survive_kill_9(server_process, tmp_path):
    srv = server_process()
    auth = [("authorization", f"Bearer {srv.token}")]
    stub = _stub(srv.address)
    acked = []
    for i in range(5):
        acked.append(stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=f"single memory number {i}")), metadata=auth, timeout=60).id)
    batch = stub.StoreBatch(
        iter(pb.StoreBatchRequest(memory=pb.MemoryInput(content=f"batched memory number {i}")) for i in range(40)), metadata=auth, timeout=120
    )
    acked += [item.id for item in batch.items]
    srv.signal(signal.SIGKILL)  # right after the acknowledgements, no chance to flush anything
    srv.wait()

    again = server_process(data_dir=srv.data_dir)
    stub = _stub(again.address)
    auth = [("authorization", f"Bearer {again.token}")]
    got = stub.Get(pb.GetRequest(ids=acked), metadata=auth, timeout=30).memories
    assert [m.id for m in got] == acked
    # and the rebuilt indexes find them
    events = list(stub.Retrieve(pb.RetrieveRequest(text="batched memory number 7", top_k=3), metadata=auth, timeout=60))
    ids = [e.result.memory.id for e in events if e.WhichOneof("event") == "result"]
    assert set(ids) & set(acked)


def test_sigterm_drains_and_exits_cleanly(server_process):
    srv = server_process()
    health = health_pb2_grpc.HealthStub(grpc.insecure_channel(srv.address))
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
    srv.signal(signal.SIGTERM)
    assert srv.wait(30) == 0
    assert '"event": "server.stopped"' in srv.logs()


def test_a_start_warms_up_on_a_sample_that_no_caller_can_see(server_process):
    """Before it serves, the server stores a fixed sample in a scratch index and queries it; the
    sample reaches neither the store nor the live index: nothing is counted, found or listed."""
    from teleo_server.core import WARM_UP_TEXT

    srv = server_process()
    warmed = [json.loads(line) for line in srv.logs().splitlines() if '"warm_up.done"' in line]
    assert warmed and warmed[0]["results"] >= 1, srv.logs()[-2000:]
    auth = [("authorization", f"Bearer {srv.token}")]
    stub = _stub(srv.address)
    assert stub.Stats(pb.StatsRequest(), metadata=auth, timeout=30).memories == 0
    events = list(stub.Retrieve(pb.RetrieveRequest(text=WARM_UP_TEXT, top_k=5), metadata=auth, timeout=60))
    assert not [e for e in events if e.WhichOneof("event") == "result"]
    assert not stub.List(pb.ListRequest(), metadata=auth, timeout=30).memories


def _cli(srv, *args: str, token: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "TELEO_ADDRESS": srv.address, "TELEO_DEV_TOKEN_FILE": str(srv.token_file)}
    if not token:
        env["TELEO_DEV_TOKEN_FILE"] = str(srv.token_file) + ".absent"
    return subprocess.run([sys.executable, "-m", "teleo_server.cli", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_cli_round_trip_with_the_dev_token(server_process, tmp_path):
    srv = server_process()
    assert "created a development token" in srv.logs()
    stored = _cli(srv, "store", "The staging cluster runs in eu-west-1.", "--namespace", "ops")
    assert stored.returncode == 0, stored.stderr
    memory_id = stored.stdout.split()[0]
    query = _cli(srv, "query", "which region is staging in", "--namespace", "ops")
    assert query.returncode == 0, query.stderr
    assert memory_id[:12] in query.stdout and "eu-west-1" in query.stdout and "results in" in query.stdout
    # Logs carry request ids, never the query text (debug is off).
    assert '"request_id"' in srv.logs() and "which region is staging in" not in srv.logs()
    records = tmp_path / "in.jsonl"
    records.write_text("\n".join(json.dumps({"content": f"ingested line {i}", "namespace": "ops"}) for i in range(12)) + "\n")
    ingest = _cli(srv, "ingest", str(records), "--batch-size", "5")
    assert ingest.returncode == 0 and "stored 12" in ingest.stdout, ingest.stderr
    got = _cli(srv, "get", memory_id)
    assert json.loads(got.stdout)["input"]["content"].startswith("The staging cluster")
    updated = _cli(srv, "update", memory_id, "--content", "Staging moved to us-east-2.", "--keep-previous")
    out = json.loads(updated.stdout)
    assert out["memory"]["id"] == memory_id and out["memory"]["input"]["content"] == "Staging moved to us-east-2."
    assert out["memory"]["input"]["links"][0]["targetId"] == out["previousId"], updated.stderr
    assert _cli(srv, "delete", out["previousId"]).stdout.strip() == "deleted 1"
    assert "nothing to change" in _cli(srv, "update", memory_id).stderr
    refused = _cli(srv, "query", "anything", token=False)
    assert refused.returncode == 1 and "UNAUTHENTICATED" in refused.stderr
    assert _cli(srv, "health").returncode == 0
    assert _cli(srv, "health", "store").returncode == 0
    assert _cli(srv, "delete", memory_id).stdout.strip() == "deleted 1"
    # list pages through every ingested memory; delete-where counts first, then deletes
    first = _cli(srv, "list", "--namespace", "ops", "--page-size", "5")
    assert len(first.stdout.splitlines()) == 5 and "pass --all" in first.stderr
    listed = _cli(srv, "list", "--namespace", "ops", "--page-size", "5", "--all")
    contents = [json.loads(line)["input"]["content"] for line in listed.stdout.splitlines()]
    assert contents == [f"ingested line {i}" for i in range(12)], listed.stderr
    exported = _cli(srv, "export", "--namespace", "ops", "--with-embeddings")
    assert len(exported.stdout.splitlines()) == 12 and "exported 12" in exported.stderr
    dump = tmp_path / "ops.jsonl"
    dump.write_text(exported.stdout)
    dry = _cli(srv, "delete-where", "--namespace", "ops", "--dry-run")
    assert dry.stdout.strip() == "matched 12, deleted 0 (dry run)", dry.stderr
    assert _cli(srv, "delete-where", "--namespace", "ops").stdout.strip() == "matched 12, deleted 12"
    assert _cli(srv, "list", "--all").stdout == ""
    back = _cli(srv, "import", str(dump))
    assert back.stdout.strip() == "stored 12, duplicates 0, failed 0, vectors reused 12", back.stderr
    dump.write_text('{"memory": {"input": {"content": "fine"}}}\n[1, 2]\n')
    broken = _cli(srv, "import", str(dump))
    assert broken.returncode == 1 and "line 2: not an exported memory" in broken.stderr
    dump.write_bytes(b'{"memory": {"input": {"content": "fine"}}}\n\xff\xfe bad bytes\n')
    binary = _cli(srv, "import", str(dump))
    assert binary.returncode == 1 and "line 2: not UTF-8 text" in binary.stderr and "Traceback" not in binary.stderr
    missing = _cli(srv, "import", str(tmp_path / "absent.jsonl"))
    assert missing.returncode == 1 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr


def test_oversized_batch_is_resource_exhausted_and_server_stays_up(server_process):
    srv = server_process(env={"TELEO_LIMITS__MAX_BATCH_ITEMS": "3"})
    stub = _stub(srv.address)
    auth = [("authorization", f"Bearer {srv.token}")]
    with pytest.raises(grpc.RpcError) as err:
        stub.StoreBatch(iter(pb.StoreBatchRequest(memory=pb.MemoryInput(content=f"item {i}")) for i in range(4)), metadata=auth, timeout=60)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "split" in err.value.details()
    ok = stub.StoreBatch(iter(pb.StoreBatchRequest(memory=pb.MemoryInput(content=f"item {i}")) for i in range(3)), metadata=auth, timeout=60)
    assert ok.stored == 3


def test_health_probe_fails_when_no_server(tmp_path):
    env = {**os.environ, "TELEO_ADDRESS": "127.0.0.1:9"}
    r = subprocess.run([sys.executable, "-m", "teleo_server.cli", "health", "--timeout", "1"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "UNAVAILABLE" in r.stderr


def test_token_commands_manage_access(server_process, tmp_path):
    srv = server_process()
    data = ["--data-dir", str(srv.data_dir)]
    created = subprocess.run(
        [sys.executable, "-m", "teleo_server.cli", "token", *data, "create", "--agent", "bot", "--namespace", "bots"],
        capture_output=True, text=True, timeout=60,
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    stub = _stub(srv.address)
    auth = [("authorization", f"Bearer {token}")]
    assert stub.Stats(pb.StatsRequest(), metadata=auth, timeout=10).server_version
    listed = subprocess.run([sys.executable, "-m", "teleo_server.cli", "token", *data, "list"], capture_output=True, text=True, timeout=60)
    token_id = next(line.split()[0] for line in listed.stdout.splitlines() if " bot " in f" {line} ")
    assert token not in listed.stdout
    revoked = subprocess.run([sys.executable, "-m", "teleo_server.cli", "token", *data, "revoke", token_id], capture_output=True, text=True, timeout=60)
    assert revoked.returncode == 0
    with pytest.raises(grpc.RpcError) as err:
        stub.Stats(pb.StatsRequest(), metadata=auth, timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


NODE_DIR = REPO / "tests" / "node"


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_node_client_from_protos_alone(server_process):
    if not (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir():
        pytest.fail("Node dependencies missing: run `make node-deps` (make test does)")
    srv = server_process()
    env = {**os.environ, "TELEO_ADDRESS": srv.address, "TELEO_TOKEN": srv.token, "TELEO_PROTOS": str(REPO / "protos")}
    r = subprocess.run(["node", str(NODE_DIR / "client.mjs")], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr + srv.logs()
    out = json.loads(r.stdout)
    assert out["health"] == "SERVING"
    assert out["events"][0] == "stage" and out["events"][-1] == "summary"
    assert out["results"][0]["id"] == out["stored_id"]
    hint = next(h for h in out["possible_updates"] if h["id"] == out["stored_id"])
    assert hint["content"].startswith("The Node.js client stored") and 0.4 <= hint["similarity"] <= 1
    assert out["summary"]["returned"] == len(out["results"])
    batched = out["batched"]  # the same answer in two messages
    assert batched["events"] == ["results", "summary"] and batched["summary"] == out["summary"]
    assert [r["id"] for r in batched["results"]] == [r["id"] for r in out["results"]]
    hippo = out["hipporag"]
    assert hippo["profile"] == "hipporag" and hippo["route"] in ("simple", "multi_hop", "exploratory", "skip"), hippo
    assert hippo["returned"] == len(hippo["results"]) and (hippo["results"] or hippo["route"] == "skip"), hippo
    assert all(r["citation"] for r in hippo["results"]), hippo  # every result says where it came from
    assert out["unauthenticated"] == "UNAUTHENTICATED"
