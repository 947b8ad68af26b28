"""Administration of the local database: ``teleo token``, ``teleo backup`` and ``teleo restore``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from teleo_server.cli.common import local_settings


def cmd_token(args: argparse.Namespace) -> int:
    from teleo_server.auth import create_token
    from teleo_server.domain import AccessLevel
    from teleo_server.errors import TeleoError
    from teleo_server.store import SQLiteStore

    try:
        settings = local_settings(args)
        store = SQLiteStore(settings.db_path)
    except TeleoError as exc:
        print(f"teleo: {exc}", file=sys.stderr)
        return 2
    try:
        if args.token_cmd == "create":
            read = args.read or [args.namespace]
            write = args.write if args.write is not None else [args.namespace]
            record, token = create_token(
                store, args.agent, read, write, AccessLevel[args.access_level.upper()], args.namespace, args.note
            )
            print(token)
            print(
                f"token {record.token_id} for agent {record.agent_id!r}: read {','.join(record.read_namespaces)}; "
                f"write {','.join(record.write_namespaces) or '-'}; level {record.access_level.name}. "
                "It is shown only once.",
                file=sys.stderr,
            )
        elif args.token_cmd == "list":
            print(f"{'TOKEN_ID':<14}{'AGENT':<20}{'LEVEL':<14}{'READ':<24}{'WRITE':<24}STATUS")
            for t in store.list_tokens():
                status = "revoked" if t.revoked else "active"
                print(f"{t.token_id:<14}{t.agent_id:<20}{t.access_level.name:<14}{','.join(t.read_namespaces):<24}{','.join(t.write_namespaces):<24}{status}")
        elif args.token_cmd == "revoke":
            if not store.revoke_token(args.token_id, time.time()):
                print(f"teleo: no active token {args.token_id}", file=sys.stderr)
                return 1
            print(f"revoked {args.token_id}")
        return 0
    except TeleoError as exc:
        print(f"teleo: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()


def cmd_backup(args: argparse.Namespace) -> int:
    from teleo_server.store.backup import backup

    return _copy_database(args, lambda db: backup(db, Path(args.path), force=args.force),
                          lambda info: f"backed up {info.memories} memories ({info.bytes} bytes) to {info.path}")


def cmd_restore(args: argparse.Namespace) -> int:
    from teleo_server.store.backup import restore

    return _copy_database(args, lambda db: restore(Path(args.backup), db, force=args.force),
                          lambda info: f"restored {info.memories} memories ({info.bytes} bytes) from {args.backup} "
                                       f"to {info.path}")


def _copy_database(args: argparse.Namespace, copy: Callable[[Path], Any], done: Callable[[Any], str]) -> int:
    """Backup and restore: find the local database, copy, report in one line (errors on stderr)."""
    from teleo_server.errors import TeleoError

    try:
        info = copy(local_settings(args).db_path)
    except TeleoError as exc:
        print(f"teleo: {exc}", file=sys.stderr)
        return 1
    print(done(info))
    return 0


def _local_db_options(p: argparse.ArgumentParser) -> None:
    """Where a command finds the local database: the server's settings, as `teleo serve` does."""
    p.add_argument("--config", help="TOML config file (also TELEO_CONFIG)")
    p.add_argument("--data-dir")


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``token`` (create, list, revoke), ``backup`` and ``restore``."""
    t = sub.add_parser("token", help="manage API tokens in the local database")
    _local_db_options(t)
    tsub = t.add_subparsers(dest="token_cmd", required=True)
    tc = tsub.add_parser("create", help="create a token (printed once)")
    tc.add_argument("--agent", required=True)
    tc.add_argument("--namespace", default="default", help="default namespace (read/write unless --read/--write)")
    tc.add_argument("--read", action="append", help="readable namespace, 'prefix*' or '*' (repeatable)")
    tc.add_argument("--write", action="append", help="writable namespace (repeatable)")
    tc.add_argument("--access-level", default="internal", choices=["public", "internal", "confidential", "restricted"])
    tc.add_argument("--note", default="")
    tsub.add_parser("list", help="list tokens (never their secrets)")
    tr = tsub.add_parser("revoke", help="revoke a token by id")
    tr.add_argument("token_id")
    t.set_defaults(fn=cmd_token)

    b = sub.add_parser(
        "backup",
        help="online backup of the database (the server may keep running)",
        description="Write a consistent copy of the database in data_dir to PATH while the server keeps "
        "serving. The file has mode 0600 because it holds token hashes. The embedding cache "
        "(data_dir/embed-cache) is derived data and is not included.",
    )
    b.add_argument("path", metavar="PATH", help="backup file to write")
    b.add_argument("--force", action="store_true", help="overwrite PATH if it exists")
    _local_db_options(b)
    b.set_defaults(fn=cmd_backup)

    r = sub.add_parser(
        "restore",
        help="make a backup the database of data_dir (server stopped)",
        description="Verify BACKUP and place a copy of it as the database in data_dir; `teleo serve` then "
        "starts from it and migrates its schema if needed. Stop the server first. The embedding "
        "cache is derived data: it is not in the backup and refills as texts are embedded.",
    )
    r.add_argument("backup", metavar="BACKUP", help="backup file written by `teleo backup`")
    r.add_argument("--force", action="store_true", help="replace an existing database in data_dir")
    _local_db_options(r)
    r.set_defaults(fn=cmd_restore)


__all__ = ["add_commands", "cmd_backup", "cmd_restore", "cmd_token"]
