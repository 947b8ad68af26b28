"""Helpers shared by the command groups of ``teleo``."""

from __future__ import annotations

import argparse
import difflib
import os
from pathlib import Path


class StrictParser(argparse.ArgumentParser):
    """An argument parser that takes no abbreviated options and rejects unknown ones where they occur.

    Subcommand parsers (``add_subparsers`` makes them of the same class) report an unknown option
    themselves, naming it and the closest known option, instead of leaving it to the top level.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(self._unrecognized(extras))
        return namespace, extras

    def _unrecognized(self, extras: list[str]) -> str:
        options = [a for a in extras if a.startswith("-") and len(a) > 1]
        if not options:
            return f"unrecognized arguments: {' '.join(extras)}"
        known = sorted(self._option_string_actions)
        name = options[0].split("=", 1)[0]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; see {self.prog} --help"
        return f"unrecognized option {name}{hint}"


def connection_options(c: argparse.ArgumentParser, timeout: float = 30.0) -> None:
    """Where the server is and how to reach it, for commands that call a running server."""
    from teleo_server.client.connection import DEFAULT_ADDRESS

    c.add_argument("--address", default=os.environ.get("TELEO_ADDRESS", DEFAULT_ADDRESS),
                   help="the server (default: TELEO_ADDRESS, else %(default)s)")
    c.add_argument("--token", help="bearer token (default: TELEO_TOKEN, then the dev token file)")
    c.add_argument("--ca-cert", help="CA certificate for a TLS server")
    c.add_argument("--timeout", type=float, default=timeout, help="seconds for each call (default %(default)s)")


def client_for(args: argparse.Namespace, **kwargs):
    """A client library ``Client`` for the options ``connection_options`` added."""
    from teleo_server.client import Client

    return Client(args.address, token=args.token, ca_cert=args.ca_cert, timeout=args.timeout, **kwargs)


def local_settings(args: argparse.Namespace, **extra: object):
    """The server's settings from ``--config`` and ``--data-dir``, with the non-None ``extra`` overrides."""
    from teleo_server.config import load_settings

    overrides = {k: v for k, v in extra.items() if v is not None}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    return load_settings(getattr(args, "config", None), **overrides)


__all__ = ["StrictParser", "client_for", "connection_options", "local_settings"]
