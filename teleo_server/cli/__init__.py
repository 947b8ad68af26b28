"""The ``teleo`` command: run the server, manage tokens, and talk to a running server.

Each command group registers its subcommands with ``add_commands(sub)``: ``serve`` (the server),
``admin`` (the local database: tokens, backup, restore) and ``client`` (gRPC calls to a server).
"""

from __future__ import annotations

import argparse
import sys

import grpc

from teleo_server.cli import admin, client, serve


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="teleo", description="Teleo memory retrieval service")
    sub = p.add_subparsers(dest="cmd", required=True)
    serve.add_commands(sub)
    admin.add_commands(sub)
    client.add_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from teleo_server import logs

    args = parser().parse_args(argv)
    if args.cmd != "serve":
        logs.configure("console", quiet=True)
    try:
        return args.fn(args)
    except grpc.RpcError as exc:
        print(f"teleo: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


__all__ = ["main", "parser"]
