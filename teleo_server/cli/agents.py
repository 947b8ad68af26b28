"""Agent commands of ``teleo``: ``mcp`` (a Model Context Protocol server over stdio or HTTP)."""

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


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``mcp``."""
    c = sub.add_parser("mcp", help="serve Teleo's memory as MCP tools to an agent (stdio, or HTTP with --transport http)")
    connection_options(c)
    c.add_argument("--namespace", help="default namespace for memories stored and searched through the tools")
    c.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="stdio (launched by the agent runtime) or streamable HTTP at http://HOST:PORT/mcp")
    c.add_argument("--host", default="127.0.0.1", help="HTTP: the address to listen on (default %(default)s)")
    c.add_argument("--port", type=int, default=8765, help="HTTP: the port (default %(default)s)")
    c.set_defaults(fn=cmd_mcp)


__all__ = ["add_commands", "cmd_mcp"]
