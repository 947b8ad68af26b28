"""``teleo hooks <Event>``: recorded Claude Code hook payloads fed through the real command against a
live server; what is stored and what comes back on stdout are checked, and a hook must exit 0,
quickly and with nothing on stdout, when Teleo is down."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from teleo_server.agents.hooks import (
    HookSettings,
    content_similarity,
    event_name,
    extractive_summary,
    namespace_for,
    subagent_namespace,
    tool_memory,
)
from teleo_server.client import Client, Filters, MemoryInput

pytestmark = pytest.mark.integration

PAYLOADS = Path(__file__).parent / "data" / "hooks"
SESSION = "b81c4e2a-0f6d-4a3b-8c2e-5d9f1a7b3e64"
# the recorded payloads name the user's home as $HOME_DIR (the project is $HOME_DIR/shop)
HOME_DIR = str(Path(tempfile.gettempdir()) / "teleo-hooks-user")


def _payload(name: str, **changes) -> str:
    data = json.loads((PAYLOADS / f"{name}.json").read_text().replace("$HOME_DIR", HOME_DIR))
    data.update(changes)
    return json.dumps(data)


def _hook(srv, event: str, stdin: str, *args: str, address: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TELEO_TOKEN": srv.token if srv is not None else "t"}
    env.pop("CLAUDE_PROJECT_DIR", None)
    return subprocess.run([sys.executable, "-m", "teleo_server.cli", "hooks", event,
                           "--address", address or srv.address, *args],
                          input=stdin, capture_output=True, text=True, timeout=120, env=env)


def _context(proc: subprocess.CompletedProcess, event: str) -> str:
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["hookSpecificOutput"]["hookEventName"] == event
    return out["hookSpecificOutput"]["additionalContext"]


@pytest.fixture(scope="module")
def client(api_server):
    with Client(api_server.address, token=api_server.token) as c:
        yield c


def test_prompt_gets_relevant_memories_within_the_budget_and_is_stored(api_server, client):
    ns = "hk-prompt"
    relevant = client.store("We moved the staging cluster from eu-west-1 to us-east-2 in March.", namespace=ns).id
    client.store("The office plants are watered on Thursdays.", namespace=ns)
    proc = _hook(api_server, "UserPromptSubmit", _payload("user_prompt_submit"), "--namespace", ns)
    text = _context(proc, "UserPromptSubmit")
    assert "us-east-2" in text and relevant[:12] in text and "relevance" in text
    assert "plants" not in text  # below the relevance floor
    assert len(text) <= 6000
    prompts = list(client.memories(Filters(namespaces=[ns], session_id=SESSION)))
    assert [m.content for m in prompts] == [json.loads(_payload("user_prompt_submit"))["prompt"]]
    assert prompts[0].memory_type == "episodic" and prompts[0].source == "user"

    for i in range(30):
        client.store(f"Staging deploy note {i}: the staging cluster in us-east-2 uses the blue-green rollout "
                     f"described in runbook section {i} with extra detail to take room in the context.", namespace=ns)
    small = _context(_hook(api_server, "UserPromptSubmit", _payload("user_prompt_submit"), "--namespace", ns,
                           "--budget", "400", "--top-k", "20", "--no-store-prompts"), "UserPromptSubmit")
    assert 0 < len(small) <= 400 and small.count("\n- [") >= 1


def test_a_prompt_with_nothing_relevant_adds_nothing(api_server):
    proc = _hook(api_server, "user-prompt-submit", _payload("user_prompt_submit"), "--namespace", "hk-empty",
                 "--no-store-prompts")
    assert proc.returncode == 0 and proc.stdout == ""


def test_tool_results_are_stored_selectively_and_once(api_server, client):
    ns = "hk-tools"
    for name in ("post_tool_use_edit", "post_tool_use_bash", "post_tool_use_bash", "post_tool_use_read"):
        proc = _hook(api_server, "PostToolUse", _payload(name), "--namespace", ns)
        assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    stored = list(client.memories(Filters(namespaces=[ns])))
    assert len(stored) == 2  # the repeated command once; Read is not a selected tool
    edit = next(m for m in stored if m.metadata["tool"] == "Edit")
    assert "AWS_REGION=eu-west-1" in edit.content and "AWS_REGION=us-east-2" in edit.content
    assert edit.metadata["file"] == f"{HOME_DIR}/shop/deploy/staging.env" and edit.session_id == SESSION
    bash = next(m for m in stored if m.metadata["tool"] == "Bash")
    assert bash.content.startswith("Ran `pytest -q tests/test_checkout.py`") and "24 passed" in bash.content
    assert bash.source == "claude-code:Bash" and bash.memory_type == "episodic"
    _hook(api_server, "PostToolUse", _payload("post_tool_use_read"), "--namespace", ns, "--tools", "Read")
    assert len(list(client.memories(Filters(namespaces=[ns])))) == 3


def test_session_end_merges_near_duplicates_and_stores_a_summary_that_the_next_session_starts_from(api_server, client):
    ns = "hk-session"
    for name in ("user_prompt_submit", "post_tool_use_edit", "post_tool_use_bash", "post_tool_use_bash_again"):
        event = json.loads(_payload(name))["hook_event_name"]
        assert _hook(api_server, event, _payload(name), "--namespace", ns).returncode == 0
    before = {m.id: m for m in client.memories(Filters(namespaces=[ns]))}
    assert len(before) == 4
    runs = [m for m in before.values() if m.metadata.get("tool") == "Bash"]

    proc = _hook(api_server, "SessionEnd", _payload("session_end"), "--namespace", ns)
    assert proc.returncode == 0 and proc.stdout == "" and "merged 2 near-duplicate memories into 1" in proc.stderr
    after = list(client.memories(Filters(namespaces=[ns])))
    merged = [m for m in after if m.metadata.get("kind") == "consolidated"]
    assert len(merged) == 1 and merged[0].id in {r.id for r in runs}
    other = next(r.id for r in runs if r.id != merged[0].id)
    assert ("supersedes", other) in {(link.type, link.target_id) for link in merged[0].links}
    assert "3.12s" in merged[0].content and "2.97s" in merged[0].content  # nothing either run said is lost
    assert other not in {m.id for m in after}
    [summary] = [m for m in after if m.metadata.get("kind") == "session-summary"]
    assert summary.memory_type == "reflective" and summary.session_id == SESSION
    assert summary.metadata["trigger"] == "session_end:prompt_input_exit"
    assert summary.content.startswith("Session summary (") and "staging" in summary.content.lower()

    start = _context(_hook(api_server, "SessionStart", _payload("session_start"), "--namespace", ns), "SessionStart")
    assert "last session summary" in start and summary.content[:60] in start
    assert "AWS_REGION" in start  # a memory related to where the last session left off


def test_pre_compact_consolidates_too(api_server, client):
    ns = "hk-compact"
    _hook(api_server, "UserPromptSubmit", _payload("user_prompt_submit"), "--namespace", ns)
    _hook(api_server, "PostToolUse", _payload("post_tool_use_edit"), "--namespace", ns)
    proc = _hook(api_server, "PreCompact", _payload("pre_compact"), "--namespace", ns)
    assert proc.returncode == 0 and proc.stdout == ""
    [summary] = [m for m in client.memories(Filters(namespaces=[ns])) if m.metadata.get("kind") == "session-summary"]
    assert summary.metadata["trigger"] == "pre_compact:auto" and len(summary.links) == 2


@pytest.mark.parametrize("strategy", ["absorb", "selective", "summarize", "federated"])
def test_subagent_memories_join_the_parent(api_server, client, strategy):
    ns = f"hk-sub-{strategy}"
    sub = subagent_namespace(ns, "a5e09d41")
    assert _hook(api_server, "PostToolUse", _payload("post_tool_use_subagent"), "--namespace", ns).returncode == 0
    client.store(MemoryInput(content="Payments retry three times with exponential backoff.", namespace=sub,
                             memory_type="semantic"))
    assert {m.metadata.get("agent_type") for m in client.memories(Filters(namespaces=[sub]))} >= {"Explore"}
    proc = _hook(api_server, "SubagentStop", _payload("subagent_stop"), "--namespace", ns, "--strategy", strategy)
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    parent = list(client.memories(Filters(namespaces=[ns])))
    left = list(client.memories(Filters(namespaces=[sub])))
    contents = " ".join(m.content for m in parent)
    if strategy == "absorb":
        assert len(parent) == 3 and not left and "grep -rn PAYMENT_TIMEOUT" in contents
        assert all(m.metadata["agent_id"] == "a5e09d41" for m in parent)
    elif strategy == "selective":  # the final answer and the fact, not the raw command output
        assert len(parent) == 2 and not left and "grep -rn" not in contents
        assert {m.memory_type for m in parent} == {"reflective", "semantic"}
    elif strategy == "summarize":
        assert len(parent) == 1 and not left and parent[0].metadata["kind"] == "subagent-summary"
        assert "45 seconds" in parent[0].content
    else:
        assert len(parent) == 1 and len(left) == 3 and parent[0].metadata["federated_namespace"] == sub
        assert sub in parent[0].content


def test_the_project_directory_names_the_namespace(api_server, client):
    proc = _hook(api_server, "PostToolUse", _payload("post_tool_use_edit"))
    assert proc.returncode == 0
    assert any(m.metadata.get("tool") == "Edit" for m in client.memories(Filters(namespaces=["project:shop"])))
    assert namespace_for({"cwd": f"{HOME_DIR}/My Project (2)"}, HookSettings()) == "project:My-Project-2"
    assert namespace_for({"cwd": "/x"}, HookSettings(namespace="team")) == "team"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("name", ["session_start", "user_prompt_submit", "post_tool_use_edit", "pre_compact",
                                  "session_end", "subagent_stop"])
def test_a_hook_exits_quickly_and_cleanly_when_teleo_is_down(name):
    event = json.loads(_payload(name))["hook_event_name"]
    t0 = time.monotonic()
    proc = _hook(None, event, _payload(name), "--timeout", "1", address=f"127.0.0.1:{_free_port()}")
    took = time.monotonic() - t0
    assert proc.returncode == 0 and proc.stdout == ""
    assert "UNAVAILABLE" in proc.stderr and "continuing without memory" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert took < 15  # bounded by the call deadline, not by a hang


def test_bad_input_is_one_line_and_exit_0(api_server):
    proc = _hook(api_server, "UserPromptSubmit", "not json")
    assert proc.returncode == 0 and proc.stdout == "" and "not JSON" in proc.stderr
    proc = _hook(api_server, "Bogus", "{}")
    assert proc.returncode == 0 and "unknown hook event 'Bogus'; use one of SessionStart" in proc.stderr


def test_helpers():
    assert event_name("session-end") == "SessionEnd" and event_name("SUBAGENTSTOP") == "SubagentStop"
    assert content_similarity({"E1_semantic": 0.9, "E12_late": 0.7, "E2_recency": 1.0}) == pytest.approx(0.8)
    text, meta = tool_memory("Bash", {"command": "ls"}, {"stdout": "a\nb", "stderr": "", "interrupted": True}, 500)
    assert text == "Ran `ls` (interrupted)\nOutput:\na\nb" and meta == {"tool": "Bash"}
    summary = extractive_summary(["The build uses Bazel. The build cache lives in /var/cache/bazel.",
                                  "Lunch is at noon today. The build cache must be warmed before tests."], 2, 500)
    assert "build cache" in summary and summary.count(".") <= 3
    assert subagent_namespace("p" * 128, "x" * 80).startswith("p") and len(subagent_namespace("p" * 128, "x" * 80)) <= 128


def test_a_prompt_that_cannot_be_stored_still_gets_its_context(api_server, client):
    from teleo_server.auth import create_token
    from teleo_server.domain import AccessLevel

    ns = "hk-readonly"
    client.store("We moved the staging cluster from eu-west-1 to us-east-2 in March.", namespace=ns)
    _, token = create_token(api_server.app.core.store, "reader", [ns], [], AccessLevel.INTERNAL, ns)
    env = {**os.environ, "TELEO_TOKEN": token}
    proc = subprocess.run([sys.executable, "-m", "teleo_server.cli", "hooks", "UserPromptSubmit", "--address",
                           api_server.address, "--namespace", ns], input=_payload("user_prompt_submit"),
                          capture_output=True, text=True, timeout=120, env=env)
    assert "us-east-2" in _context(proc, "UserPromptSubmit")
    assert "the prompt was not stored (PERMISSION_DENIED" in proc.stderr


def test_a_long_prompt_is_stored_cut_to_the_size_limit(api_server, client):
    ns = "hk-long"
    prompt = "東京の会議" * 8000  # 40,000 characters, 120,000 bytes of UTF-8
    proc = _hook(api_server, "UserPromptSubmit", _payload("user_prompt_submit", prompt=prompt), "--namespace", ns,
                 "--timeout", "120")  # embedding 60 KB takes longer than a hook's default 5 s deadline
    assert proc.returncode == 0 and proc.stderr == ""
    [m] = list(client.memories(Filters(namespaces=[ns])))
    assert len(m.content.encode()) <= 60_000 and prompt.startswith(m.content)
