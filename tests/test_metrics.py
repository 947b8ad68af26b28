"""Prometheus metrics: a real server with ``/metrics`` on, real calls through a real client, and
real scrapes over HTTP parsed by the official client's parser."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc

from teleo_server.config import Settings, load_settings
from teleo_server.errors import InvalidArgument
from tests._server import InThreadServer

CONTENTS = [
    "The staging cluster runs in eu-west-1 behind the internal load balancer.",
    "Alice prefers green tea in the morning and coffee after lunch.",
    "To rotate the database password, update the secret and restart the workers.",
]
QUERY = "which region does the staging cluster run in"
UNKNOWN_ID = "0123456789abcdef0123456789abcdef"
Samples = dict[str, list[tuple[dict[str, str], float]]]


def _settings(root: Path, **metrics: object) -> Settings:
    return Settings(port=0, data_dir=root / "data", dev_token_file=root / "token", log_format="json", metrics=metrics)


def _scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def _value(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels`` (0 when none)."""
    return sum(v for got, v in samples.get(name, []) if labels.items() <= got.items())


def _delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return _value(after, name, **labels) - _value(before, name, **labels)


def _listening_ports() -> set[int]:
    """TCP ports this process listens on (Linux /proc)."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A = LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = InThreadServer.start(_settings(tmp_path_factory.mktemp("metrics"), port=0))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def stub(server):
    with grpc.insecure_channel(server.address) as ch:
        yield memory_pb2_grpc.MemoryServiceStub(ch)


@pytest.fixture(scope="module")
def auth(server):
    return [("authorization", f"Bearer {server.token}")]


@pytest.fixture(scope="module")
def traffic(server, stub, auth):
    """Scrape, make known calls, scrape again: (before, after, ids, stage events of one Retrieve)."""
    before = _scrape(server.app.metrics_port)
    ids = [stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=c, namespace="ops")), metadata=auth, timeout=60).id
           for c in CONTENTS]
    first = list(stub.Retrieve(pb.RetrieveRequest(text=QUERY, top_k=3), metadata=auth, timeout=60))
    list(stub.Retrieve(pb.RetrieveRequest(text=QUERY, top_k=3), metadata=auth, timeout=60))  # same query: a cache hit
    list(stub.Retrieve(pb.RetrieveRequest(text=QUERY, profile="single_space:SEMANTIC"), metadata=auth, timeout=60))
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Retrieve(pb.RetrieveRequest(text=QUERY, profile="no-such-profile"), metadata=auth, timeout=60))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as err:
        stub.Get(pb.GetRequest(ids=[UNKNOWN_ID]), metadata=auth, timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    # a call is counted as its handler finishes, which can be just after the client has its status
    deadline = time.monotonic() + 10
    while True:
        after = _scrape(server.app.metrics_port)
        counted = {(labels.get("method"), labels.get("code")) for labels, _ in after.get("teleo_rpc_requests_total", [])}
        if ("Get", "NOT_FOUND") in counted or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    stages = [e.stage for e in first if e.WhichOneof("event") == "stage"]
    assert [e.WhichOneof("event") for e in first][-1] == "summary"
    return before, after, ids, stages


def test_rpcs_are_counted_and_timed_by_method_and_status_code(traffic):
    before, after, _, _ = traffic
    service = "teleo.v1.MemoryService"
    expected = {("Store", "OK"): 3, ("Retrieve", "OK"): 3, ("Retrieve", "INVALID_ARGUMENT"): 1, ("Get", "NOT_FOUND"): 1,
                ("Get", "OK"): 0}
    for (method, code), n in expected.items():
        labels = {"service": service, "method": method, "code": code}
        assert _delta(before, after, "teleo_rpc_requests_total", **labels) == n, (method, code)
        assert _delta(before, after, "teleo_rpc_duration_seconds_count", **labels) == n, (method, code)
    assert _delta(before, after, "teleo_rpc_duration_seconds_sum", service=service, method="Retrieve", code="OK") > 0
    # retrievals one after another: each taken from the index thread's queue alone
    assert _delta(before, after, "teleo_retrieval_groups_total", size="1") >= 2


def test_retrieve_stages_are_observed_per_profile(traffic):
    before, after, _, stages = traffic
    ran = [s.stage for s in stages if not s.skipped]
    assert ran
    for stage in ran:
        # the two teleological retrievals; candidates_out of each stage is what the histogram counts
        labels = {"profile": "teleological", "stage": stage}
        assert _delta(before, after, "teleo_retrieve_stage_duration_seconds_count", **labels) == 2, stage
        assert _delta(before, after, "teleo_retrieve_stage_candidates_count", **labels) == 2, stage
    for s in stages:
        if not s.skipped:
            labels = {"profile": "teleological", "stage": s.stage}
            assert _value(after, "teleo_retrieve_stage_candidates_sum", **labels) >= s.candidates_out
    profiles = {labels["profile"] for labels, _ in after["teleo_retrieve_stage_duration_seconds_count"]}
    # a space named in any spelling gets one label; a refused profile gets none
    assert profiles == {"teleological", "single_space:E1_semantic"}


def test_embedding_latency_queue_and_cache_are_measured(traffic):
    before, after, _, _ = traffic
    # three new documents and one new query were embedded; the query twice more came from the cache
    assert _delta(before, after, "teleo_embed_duration_seconds_count", role="document") == 3
    assert _delta(before, after, "teleo_embed_duration_seconds_count", role="query") == 1
    assert _delta(before, after, "teleo_embed_batch_texts_sum") == 4
    assert _delta(before, after, "teleo_embed_batch_duration_seconds_count") >= 1
    assert _delta(before, after, "teleo_embed_cache_misses_total") == 4
    assert _delta(before, after, "teleo_embed_cache_hits_total") == 2
    assert _value(after, "teleo_embed_queue_depth") == 0


def test_store_writes_and_index_sizes_are_reported(traffic):
    before, after, _, _ = traffic
    assert _delta(before, after, "teleo_store_write_duration_seconds_count") >= 3
    assert _value(after, "teleo_index_memories") == 3
    # the start rebuilt its (empty) indexes from the store: one sample, that source, its seconds
    [(labels, seconds)] = after["teleo_index_load_seconds"]
    assert labels == {"source": "store"} and 0 <= seconds < 60
    assert after["teleo_index_load_reindexed"] == [({}, 0.0)]  # nothing to bring up to date after a rebuild
    rows = {labels["space"]: v for labels, v in after["teleo_index_rows"]}
    entries = {labels["space"]: v for labels, v in after["teleo_index_entries"]}
    assert {"E1_semantic", "E6_lexical", "E12_late"} <= rows.keys()
    assert rows["E1_semantic"] >= 3 and rows["E6_lexical"] == 3
    # spaces made of spans a text may not hold (causal, code, intent) can be empty here
    assert all(entries[space] > 0 for space in ("E1_semantic", "E6_lexical", "E9_hdc", "E11_entity", "E12_late"))
    assert all(entries[space] >= 0 for space in rows)
    size = {labels["space"]: v for labels, v in after["teleo_index_bytes"]}
    assert size.keys() == rows.keys() and all(size[space] > 0 for space in rows)
    # late interaction keeps 2-bit codes of 128 dimensions: 32 bytes a token, plus the offsets
    assert size["E12_late"] == 32 * entries["E12_late"] + 8 * (rows["E12_late"] + 1)


def test_no_label_carries_query_text_ids_or_tokens(server, traffic):
    _, after, ids, _ = traffic
    secrets = [QUERY, UNKNOWN_ID, server.token, *ids, *CONTENTS]
    values = {v for samples in after.values() for labels, _ in samples for v in labels.values()}
    assert values
    for value in values:
        assert value != "dev"  # the agent of the development token
        for secret in secrets:
            assert secret not in value


def test_retrieve_streams_in_flight_are_counted(server, stub, auth):
    port, core = server.app.metrics_port, server.app.core
    gate = threading.Event()
    # hold the index thread, so a retrieval stays in its pipeline until released
    held = asyncio.run_coroutine_threadsafe(core._on_index(gate.wait, 60), server.loop)
    call = stub.Retrieve(pb.RetrieveRequest(text=QUERY, top_k=2), metadata=auth, timeout=60)
    try:
        deadline = time.monotonic() + 30
        while _value(_scrape(port), "teleo_retrieve_streams_in_flight") != 1:
            assert time.monotonic() < deadline, "the open Retrieve stream was never counted"
            time.sleep(0.05)
    finally:
        gate.set()
        held.result(30)
    assert [e.WhichOneof("event") for e in call][-1] == "summary"
    assert _value(_scrape(port), "teleo_retrieve_streams_in_flight") == 0


def test_metrics_settings_come_from_the_environment(monkeypatch):
    monkeypatch.delenv("TELEO_CONFIG", raising=False)
    assert load_settings().metrics.port is None and not load_settings().metrics.enabled
    monkeypatch.setenv("TELEO_METRICS__PORT", "9464")
    s = load_settings()
    assert (s.metrics.host, s.metrics.port, s.metrics.enabled) == ("127.0.0.1", 9464, True)
    monkeypatch.setenv("TELEO_METRICS__PORT", "70000")
    with pytest.raises(InvalidArgument, match="TELEO_METRICS__PORT"):
        load_settings()


def test_metrics_are_off_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv("TELEO_METRICS__PORT", raising=False)
    before = _listening_ports()
    srv = InThreadServer.start(_settings(tmp_path))
    try:
        assert srv.app.metrics is None and srv.app.metrics_port is None
        assert _listening_ports() - before == {srv.app.port}  # the gRPC port and nothing else
    finally:
        srv.stop()


def test_each_server_has_its_own_registry_and_stop_closes_the_endpoint(server, traffic, tmp_path):
    other = InThreadServer.start(_settings(tmp_path, port=0))
    port = other.app.metrics_port
    try:
        assert port not in (None, 0, server.app.metrics_port)
        samples = _scrape(port)
        # the first server's calls are not here: nothing was called on this one yet
        assert _value(samples, "teleo_rpc_requests_total") == 0
        assert _value(samples, "teleo_index_memories") == 0
    finally:
        other.stop()
    with pytest.raises(urllib.error.URLError):
        _scrape(port)


def test_checkpoints_are_counted_with_how_long_they_held_the_index_thread(tmp_path):
    srv = InThreadServer.start(Settings(port=0, data_dir=tmp_path / "data", dev_token_file=tmp_path / "token",
                                        log_format="json", metrics={"port": 0}, checkpoint={"share": 0}))
    try:
        port, core = srv.app.metrics_port, srv.app.core
        before = _scrape(port)
        assert _value(before, "teleo_index_snapshots_total") == 0 and not before.get("teleo_index_checkpoint_hold_seconds")
        stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(srv.address))
        for text in CONTENTS:
            stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=text)),
                       metadata=[("authorization", f"Bearer {srv.token}")], timeout=30)
        core._last_checkpoint -= 7200
        core._checkpoint_looked -= 7200
        assert srv.call(core.checkpoint(0.5, 1, 0, fork=False))  # written on the index thread
        after = _scrape(port)
        assert _value(after, "teleo_index_snapshots_total", kind="checkpoint", outcome="written") == 1
        assert _value(after, "teleo_index_snapshots_total", outcome="failed") == 0
        [(_, wrote)] = after["teleo_index_snapshot_write_seconds"]
        [(_, held)] = after["teleo_index_checkpoint_hold_seconds"]
        assert 0 < wrote <= held  # on the index thread, the hold is the write and a little more
    finally:
        srv.stop()


def test_writes_whose_indexing_failed_are_counted_until_upkeep_indexes_them(server, stub, auth):
    port, core = server.app.metrics_port, server.app.core
    retriever = core.retriever
    add = retriever.add

    def broken(memory, emb):
        raise RuntimeError("an index that fails halfway")

    assert _value(_scrape(port), "teleo_index_writes_unindexed") == 0
    retriever.add = broken
    try:
        with pytest.raises(grpc.RpcError):
            stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="The failover runbook lives in ops/failover.md.",
                                                             namespace="metrics-retry")), metadata=auth, timeout=60)
    finally:
        retriever.add = add
    assert _value(_scrape(port), "teleo_index_writes_unindexed") == 1
    asyncio.run_coroutine_threadsafe(core.maintain(), server.loop).result(60)
    assert _value(_scrape(port), "teleo_index_writes_unindexed") == 0
