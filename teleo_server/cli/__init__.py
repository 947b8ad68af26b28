"""The ``teleo`` command: run the server, manage tokens, and talk to a running server.

Each command group registers its subcommands with ``add_commands(sub)``: ``serve`` (the server),
``admin`` (the local database: tokens, backup, restore), ``client`` (gRPC calls to a server) and
``agents`` (the MCP server and the agent lifecycle hooks).
"""

from __future__ import annotations

import argparse
import os
import sys

# gRPC's own fork handlers off, before gRPC is loaded: a checkpoint is written by a forked copy of
# the server (teleo_server/snapshot.py), and with them on gRPC restarts its threads in the copy
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import grpc  # noqa: E402

from teleo_server import __version__
from teleo_server.cli import admin, agents, client, serve
from teleo_server.cli.common import StrictParser
from teleo_server.client import ClientError


def parser() -> argparse.ArgumentParser:
    """The ``teleo`` parser: no abbreviated options, unknown options are errors in every subcommand."""
    p = StrictParser(prog="teleo", description="Teleo memory retrieval service")
    p.add_argument("--version", action="version", version=f"teleo {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    serve.add_commands(sub)
    admin.add_commands(sub)
    client.add_commands(sub)
    agents.add_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from teleo_server import logs

    args = parser().parse_args(argv)
    if args.cmd != "serve":
        logs.configure("console", quiet=True)
    try:
        return args.fn(args)
    except ClientError as exc:
        print(f"teleo: {exc}", file=sys.stderr)
        return 1
    except grpc.RpcError as exc:  # commands that talk gRPC without the client library
        print(f"teleo: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`teleo list --all | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


__all__ = ["main", "parser"]
