"""Agent commands of ``teleo``: ``mcp`` (a Model Context Protocol server over stdio or HTTP) and
``hooks`` (Claude Code lifecycle hooks)."""

from __future__ import annotations

import argparse
import sys

from teleo_server.cli.common import client_for, connection_options


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from teleo_server.agents import mcp_server
    except ImportError as exc:  # the mcp SDK is an extra
        print(f"teleo: the MCP server needs the mcp package ({exc.name} is missing); install it with "
              "pip install 'teleo[agents]'", file=sys.stderr)
        return 2
    with client_for(args) as client:
        mcp_server.serve(client, namespace=args.namespace or "", transport=args.transport, host=args.host,
                         port=args.port)
    return 0


def cmd_hooks(args: argparse.Namespace) -> int:
    """Run one hook: payload on stdin, Claude Code's hook JSON on stdout. Exits 0 whatever happens to
    Teleo (a hook that fails must not block the agent); what went wrong is one line on stderr."""
    import json
    import os

    from teleo_server.agents.hooks import HookSettings, Hooks, event_name, read_payload
    from teleo_server.client import RetryPolicy

    try:
        event = event_name(args.event)
        payload = read_payload()
    except ValueError as exc:
        print(f"teleo hooks: {exc}", file=sys.stderr)
        return 0
    settings = HookSettings(namespace=args.namespace or os.environ.get("TELEO_NAMESPACE", ""),
                            budget_chars=args.budget, top_k=args.top_k, min_relevance=args.min_relevance,
                            store_prompts=not args.no_store_prompts, tools=args.tools,
                            merge_threshold=args.merge_threshold, strategy=args.strategy)
    with client_for(args, retry=RetryPolicy(attempts=2, initial_backoff=0.05)) as client:
        outcome = Hooks(client, settings, project_dir=os.environ.get("CLAUDE_PROJECT_DIR")).run(event, payload)
    if outcome.output is not None:
        print(json.dumps(outcome.output, ensure_ascii=False))
    if outcome.note:
        print(f"teleo hooks {event}: {outcome.note}", file=sys.stderr)
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``mcp`` and ``hooks``."""
    from teleo_server.agents.hooks import EVENTS, STRATEGIES

    h = sub.add_parser("hooks", help="a Claude Code lifecycle hook: reads its JSON payload on stdin",
                       description="Run as a Claude Code command hook, e.g. `teleo hooks UserPromptSubmit`. "
                                   "Memories go to the namespace project:<project directory name> unless "
                                   "--namespace or TELEO_NAMESPACE names one.")
    h.add_argument("event", help=f"one of {', '.join(EVENTS)}")
    connection_options(h, timeout=5.0)
    h.add_argument("--namespace", help="the project's namespace (default: TELEO_NAMESPACE, else project:<dir name>)")
    h.add_argument("--budget", type=int, default=6000, help="the most characters of context a hook adds")
    h.add_argument("--top-k", type=int, default=128,
                   help="the most memories retrieved for a prompt or a session start (the budget cuts the context)")
    h.add_argument("--min-relevance", type=float, default=0.01,
                   help="memories less likely than this to be relevant are not injected (0..1)")
    h.add_argument("--no-store-prompts", action="store_true", help="UserPromptSubmit: do not store the prompt")
    h.add_argument("--tools", default=r"Edit|MultiEdit|Write|NotebookEdit|Bash",
                   help="PostToolUse: a regular expression of the tool names whose results are stored")
    h.add_argument("--merge-threshold", type=float, default=0.9,
                   help="consolidation: the mean similarity of two memories over Compare's content perspectives at "
                        "or above which they are merged (0..1)")
    h.add_argument("--strategy", choices=STRATEGIES, default="selective",
                   help="SubagentStop: how a subagent's memories join the parent's namespace")
    h.set_defaults(fn=cmd_hooks)

    c = sub.add_parser("mcp", help="serve Teleo's memory as MCP tools to an agent (stdio, or HTTP with --transport http)")
    connection_options(c)
    c.add_argument("--namespace", help="default namespace for memories stored and searched through the tools")
    c.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="stdio (launched by the agent runtime) or streamable HTTP at http://HOST:PORT/mcp")
    c.add_argument("--host", default="127.0.0.1", help="HTTP: the address to listen on (default %(default)s)")
    c.add_argument("--port", type=int, default=8765, help="HTTP: the port (default %(default)s)")
    c.set_defaults(fn=cmd_mcp)


__all__ = ["add_commands", "cmd_hooks", "cmd_mcp"]
