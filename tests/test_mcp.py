"""``teleo mcp`` end to end: the MCP SDK's own client drives the server over stdio (and streamable
HTTP) against a live Teleo server; every tool is called, and failures come back as tool errors."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from teleo_server.client import Client  # noqa: E402

pytestmark = pytest.mark.integration

TOOLS = {"memory_store", "memory_search", "memory_get", "memory_update", "memory_delete", "memory_compare",
         "memory_feedback"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@asynccontextmanager
async def _session(address: str, token: str, *extra: str):
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "teleo_server.cli", "mcp", "--address", address, *extra],
                                   env={"TELEO_TOKEN": token, "TELEO_DEV_TOKEN_FILE": os.devnull})
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                yield session, await session.initialize()


def _text(result) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def test_every_tool_over_stdio(api_server):
    async def scenario():
        async with _session(api_server.address, api_server.token, "--namespace", "mcp-agent") as (s, init):
            tools = {t.name: t for t in (await s.list_tools()).tools}
            stored = await s.call_tool("memory_store", {
                "content": "The staging cluster moved to us-east-2 in March.", "memory_type": "episodic",
                "metadata": {"project": "infra"}, "importance": 0.9})
            other = await s.call_tool("memory_store", {"content": "Lunch on Fridays is lentil soup."})
            again = await s.call_tool("memory_store", {"content": "The staging cluster moved to us-east-2 in March."})
            found = await s.call_tool("memory_search", {"query": "which region is staging in?", "top_k": 2,
                                                        "explain": True})
            sid, oid = stored.structured_content["id"], other.structured_content["id"]
            got = await s.call_tool("memory_get", {"ids": [sid]})
            compared = await s.call_tool("memory_compare", {"id_a": sid, "id_b": oid})
            feedback = await s.call_tool("memory_feedback", {"id": sid, "helpful": True,
                                                             "request_id": found.structured_content["request_id"]})
            updated = await s.call_tool("memory_update", {"id": sid, "content": "The staging cluster moved to "
                                                          "eu-central-1 in October."})
            deleted = await s.call_tool("memory_delete", {"ids": [oid]})
            question = {"query": "which region is the staging cluster in?", "profile": "hipporag", "top_k": 5}
            current = await s.call_tool("memory_search", question)
            history = await s.call_tool("memory_search", {**question, "include_historical": True})
            before = await s.call_tool("memory_search", {"query": "staging cluster region", "as_of": "2000-01-01"})
            return (init, tools, stored, again, found, got, compared, feedback, updated, deleted, sid,
                    (current, history, before))

    (init, tools, stored, again, found, got, compared, feedback, updated, deleted, sid,
     over_time) = asyncio.run(scenario())
    assert init.server_info.name == "teleo" and "memory_search" in (init.instructions or "")
    assert set(tools) == TOOLS
    for tool in tools.values():  # written for a model: a description and described parameters
        assert len(tool.description or "") > 30, tool.name
        props = tool.input_schema["properties"]
        assert all(p.get("description") for name, p in props.items() if name not in ("importance",)), tool.name
    assert tools["memory_search"].annotations.read_only_hint and tools["memory_delete"].annotations.destructive_hint
    assert set(tools["memory_store"].input_schema["properties"]["memory_type"]["enum"]) == {
        "episodic", "semantic", "procedural", "working", "reflective"}

    assert not stored.is_error and stored.structured_content["duplicate"] is False
    assert again.structured_content == {"id": sid, "duplicate": True, "possible_updates": []}
    with Client(api_server.address, token=api_server.token) as c:
        [m] = c.get(sid)
    assert (m.namespace, m.memory_type, m.metadata, m.importance) == ("mcp-agent", "episodic", {"project": "infra"},
                                                                      pytest.approx(0.9))
    hits = found.structured_content["results"]
    assert hits[0]["id"] == sid and 0 < hits[0]["relevance"] <= 1 and hits[0]["explanation"]
    assert found.structured_content["searched"] == 2  # the default namespace only
    assert json.loads(_text(found))["results"][0]["id"] == sid  # the text block carries the same JSON
    assert got.structured_content["result"][0]["metadata"] == {"project": "infra"}
    assert 0 <= compared.structured_content["aggregate"] <= 1 and "E1_semantic" in compared.structured_content["spaces"]
    assert feedback.structured_content["helpful_count"] == 1 and feedback.structured_content["used_count"] == 1
    new = updated.structured_content
    assert new["memory"]["content"].endswith("October.") and new["previous_id"]
    assert {"target_id": new["previous_id"], "type": "supersedes", "weight": 1.0} in new["memory"]["links"]
    assert deleted.structured_content == {"deleted": 1}
    # knowledge over time: the superseded version only with include_historical; nothing had happened by 2000
    current, history, before = (r.structured_content for r in over_time)
    previous = new["previous_id"]
    assert current["profile"] == "hipporag" and [h["id"] for h in current["results"]] == [sid]
    assert {h["id"] for h in history["results"]} == {sid, previous}
    assert before["results"] == [] and before["searched"] == 2  # the new version and the kept old one
    props = tools["memory_search"].input_schema["properties"]
    assert props["include_historical"]["type"] == "boolean" and "as_of" in props


def test_a_change_note_names_what_it_probably_updates_and_the_agent_links_it(api_server):
    """The issue's own case: "we moved staging" stored after "staging runs in eu-west-1", no link
    given. The store names the region fact as a possible update; linking it (supersedes) through
    memory_update makes hipporag answer with the move and hide the old fact."""
    async def scenario():
        async with _session(api_server.address, api_server.token, "--namespace", "mcp-hints") as (s, _):
            old = await s.call_tool("memory_store", {"content": "The staging cluster runs in eu-west-1."})
            await s.call_tool("memory_store", {"content": "Lunch on Fridays is lentil soup."})
            move = await s.call_tool("memory_store", {"content": "We moved staging to us-east-2 in March."})
            question = {"query": "which region is staging in?", "profile": "hipporag", "top_k": 3}
            unlinked = await s.call_tool("memory_search", question)
            linked = await s.call_tool("memory_update", {"id": move.structured_content["id"],
                                                         "supersedes": [old.structured_content["id"]]})
            again = await s.call_tool("memory_update", {"id": move.structured_content["id"],
                                                        "supersedes": [old.structured_content["id"]]})
            answered = await s.call_tool("memory_search", question)
            direct = await s.call_tool("memory_store", {"content": "Staging is in ap-south-1 since November.",
                                                        "supersedes": [move.structured_content["id"]]})
            # a correction and a link in one call: both land, the old text kept (keep_previous)
            both = await s.call_tool("memory_update", {"id": direct.structured_content["id"],
                                                       "content": "Staging is in ap-south-2 since November.",
                                                       "supersedes": [old.structured_content["id"]]})
            return old, move, unlinked, linked, again, answered, direct, both

    old, move, unlinked, linked, again, answered, direct, both = (r.structured_content for r in asyncio.run(scenario()))
    assert both["memory"]["content"] == "Staging is in ap-south-2 since November." and both["previous_id"]
    assert [(lk["target_id"], lk["type"]) for lk in both["memory"]["links"]] == [
        (move["id"], "supersedes"), (old["id"], "supersedes"), (both["previous_id"], "supersedes")]
    assert old["possible_updates"] == []  # nothing earlier in the namespace
    hints = move["possible_updates"]
    assert hints and hints[0]["id"] == old["id"] and hints[0]["content"] == "The staging cluster runs in eu-west-1."
    assert "lentil" not in json.dumps(hints) and 0.4 <= hints[0]["similarity"] <= 1
    assert unlinked["results"][0]["id"] == old["id"]  # unlinked, the old fact answers first
    link = {"target_id": old["id"], "type": "supersedes", "weight": 1.0}
    assert link in linked["memory"]["links"] and linked["previous_id"] == ""
    assert again["memory"]["links"].count(link) == 1  # linking twice adds nothing
    assert [h["id"] for h in answered["results"]][:1] == [move["id"]]
    assert old["id"] not in {h["id"] for h in answered["results"]}
    with Client(api_server.address, token=api_server.token) as c:
        [m] = c.get(both["previous_id"])
    assert m.content == "Staging is in ap-south-1 since November."  # the version the correction replaced
    assert [(lk.target_id, lk.type) for lk in m.links] == [(move["id"], "supersedes")]


def test_failures_are_tool_errors_and_the_server_keeps_serving(api_server):
    async def scenario():
        async with _session(api_server.address, api_server.token) as (s, _):
            missing = await s.call_tool("memory_get", {"ids": ["0" * 32]})
            bad_time = await s.call_tool("memory_search", {"query": "x", "since": "last tuesday"})
            bad_as_of = await s.call_tool("memory_search", {"query": "x", "as_of": "yesterday"})
            bad_enum = await s.call_tool("memory_store", {"content": "x", "memory_type": "dream"})
            bad_ns = await s.call_tool("memory_store", {"content": "x", "namespace": "no spaces allowed"})
            nothing = await s.call_tool("memory_update", {"id": "0" * 32})
            after = await s.call_tool("memory_store", {"content": "still serving after errors", "namespace": "mcp-err"})
            return missing, bad_time, bad_as_of, bad_enum, bad_ns, nothing, after

    missing, bad_time, bad_as_of, bad_enum, bad_ns, nothing, after = asyncio.run(scenario())
    assert missing.is_error and "NOT_FOUND" in _text(missing) and "0" * 32 in _text(missing)
    assert bad_time.is_error and "INVALID_ARGUMENT: since" in _text(bad_time) and "ISO 8601" in _text(bad_time)
    assert bad_as_of.is_error and "INVALID_ARGUMENT: as_of" in _text(bad_as_of)
    assert bad_enum.is_error and "memory_type" in _text(bad_enum)
    assert bad_ns.is_error and "INVALID_ARGUMENT" in _text(bad_ns) and "namespace" in _text(bad_ns)
    assert nothing.is_error and "nothing to change" in _text(nothing)
    assert not after.is_error and after.structured_content["duplicate"] is False


def test_a_server_that_is_down_is_a_tool_error_not_a_crash():
    async def scenario():
        async with _session(f"127.0.0.1:{_free_port()}", "t", "--timeout", "2") as (s, _):
            first = await s.call_tool("memory_search", {"query": "anything"})
            second = await s.call_tool("memory_store", {"content": "anything"})
            return first, second

    first, second = asyncio.run(scenario())
    assert first.is_error and "UNAVAILABLE" in _text(first)
    assert second.is_error and "UNAVAILABLE" in _text(second)


def test_streamable_http_transport(api_server, tmp_path):
    from mcp.client.streamable_http import streamable_http_client

    port = _free_port()
    log = open(tmp_path / "mcp.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "teleo_server.cli", "mcp", "--address", api_server.address,
                             "--transport", "http", "--port", str(port)],
                            env={**os.environ, "TELEO_TOKEN": api_server.token}, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "mcp.log").read_text()
                time.sleep(0.2)

        async def scenario():
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    names = {t.name for t in (await s.list_tools()).tools}
                    stored = await s.call_tool("memory_store", {"content": "stored over HTTP", "namespace": "mcp-http"})
                    return names, stored

        names, stored = asyncio.run(scenario())
        assert names == TOOLS and not stored.is_error
        with Client(api_server.address, token=api_server.token) as c:
            assert c.get(stored.structured_content["id"])[0].content == "stored over HTTP"
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()


def test_memory_get_with_purpose_names_the_goal(api_server):
    topics = {"garden": "tomato seedlings compost harvest garden bed", "billing": "invoice refund ledger payment billing"}
    texts = [f"{words.split()[i % 5]} note {i}: {words}" for words in topics.values() for i in range(8)]
    with Client(api_server.address, token=api_server.token) as c:
        ids = [r.id for r in c.store_batch(texts, namespace="mcp-purpose").items]
        deadline = time.monotonic() + 60
        while not any(g.id.startswith("mcp-purpose/") for g in c.list_goals()):
            assert time.monotonic() < deadline, "goals were never built"
            time.sleep(0.2)

    async def scenario():
        async with _session(api_server.address, api_server.token) as (s, _):
            plain = await s.call_tool("memory_get", {"ids": [ids[0]]})
            with_purpose = await s.call_tool("memory_get", {"ids": [ids[0]], "purpose": True})
            return plain.structured_content["result"][0], with_purpose.structured_content["result"][0]

    plain, got = asyncio.run(scenario())
    assert plain["purpose"] is None
    p = got["purpose"]
    assert p["goal_id"].startswith("mcp-purpose/") and p["alignment"] == max(p["goal_alignment"].values())
    assert "E1_semantic" in p["space_alignment"]
