"""The files a user copies into Claude Code (deploy/claude/): skills with valid front matter that
name tools and commands which exist, and hook and MCP settings whose commands parse."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from teleo_server.cli import parser

CLAUDE = Path(__file__).resolve().parent.parent / "deploy" / "claude"
SKILLS = ("memory-inject", "semantic-search", "array-compare", "entry-discover", "purpose-align")
MCP_TOOLS = {"memory_store", "memory_search", "memory_get", "memory_update", "memory_delete", "memory_compare",
             "memory_feedback"}


def _front_matter(path: Path) -> tuple[dict[str, str], str]:
    text = path.read_text()
    m = re.match(r"---\n(.*?)\n---\n(.*)", text, re.S)
    assert m, f"{path} has no front matter"
    fields = dict(line.split(": ", 1) for line in m.group(1).splitlines())
    return fields, m.group(2)


@pytest.mark.parametrize("name", SKILLS)
def test_skill_front_matter_and_references(name):
    fields, body = _front_matter(CLAUDE / "skills" / name / "SKILL.md")
    assert fields["name"] == name and re.fullmatch(r"[a-z0-9-]{1,64}", name)
    assert 40 <= len(fields["description"]) <= 1024 and "<" not in fields["description"]
    tools = set(re.findall(r"mcp__teleo__(\w+)", fields["allowed-tools"] + body))
    assert tools and tools <= MCP_TOOLS, tools - MCP_TOOLS
    examples = [c for c in re.findall(r"`(teleo [^`|]+)`", body) if "..." not in c]
    for command in examples:  # every complete CLI example parses (placeholders stand for values)
        parser().parse_args([re.sub(r"<[^>]*>", "x", a) for a in shlex.split(command)[1:]])


def test_hook_settings_commands_parse_and_cover_every_event():
    from teleo_server.agents.hooks import EVENTS

    settings = json.loads((CLAUDE / "settings.json").read_text())["hooks"]
    assert set(settings) == set(EVENTS)
    for event, groups in settings.items():
        for group in groups:
            for hook in group["hooks"]:
                assert hook["type"] == "command" and hook["timeout"] > 0
                args = parser().parse_args(shlex.split(hook["command"])[1:])
                assert args.cmd == "hooks" and args.event == event


def test_mcp_settings_launch_the_mcp_command():
    server = json.loads((CLAUDE / "mcp.json").read_text())["mcpServers"]["teleo"]
    assert server["command"] == "teleo"
    args = parser().parse_args(server["args"])
    assert args.cmd == "mcp" and args.transport == "stdio"
