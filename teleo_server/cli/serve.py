"""``teleo serve``: run the server until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from teleo_server.cli.common import local_settings


def cmd_serve(args: argparse.Namespace) -> int:
    from teleo_server import logs
    from teleo_server.errors import TeleoError
    from teleo_server.server import build_server

    try:
        settings = local_settings(args, host=args.host, port=args.port)
    except TeleoError as exc:
        print(f"teleo: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log_format, settings.debug)

    async def run() -> int:
        try:
            app = build_server(settings)
        except TeleoError as exc:
            print(f"teleo: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:  # a directory or file it needs (data_dir, token file, cache) is unusable
            print(f"teleo: cannot start: {exc.strerror or exc} ({exc.filename or settings.data_dir})", file=sys.stderr)
            return 2
        if app.dev_token:
            print(
                f"teleo: created a development token for agent 'dev' (all namespaces) and saved it to "
                f"{settings.dev_token_file} (mode 0600); the teleo CLI reads it from there.",
                file=sys.stderr,
                flush=True,
            )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            try:
                await app.start()
            except (TeleoError, OSError) as exc:
                print(f"teleo: cannot start: {exc}", file=sys.stderr)
                return 2
            print(f"teleo: serving on {settings.host}:{app.port} (backend {app.backend})", file=sys.stderr, flush=True)
            await stop.wait()
        finally:
            await app.stop()
        return 0

    return asyncio.run(run())


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``serve``."""
    s = sub.add_parser("serve", help="run the server")
    s.add_argument("--config", help="TOML config file (also TELEO_CONFIG)")
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.add_argument("--data-dir")
    s.set_defaults(fn=cmd_serve)


__all__ = ["add_commands", "cmd_serve"]
