"""The ``teleo`` command: run the server, manage tokens, and talk to a running server."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

DEFAULT_ADDRESS = "127.0.0.1:50051"


# -- server-side commands ------------------------------------------------------------------------


def _settings(args: argparse.Namespace, **extra: object):
    from teleo_server.config import load_settings

    overrides = {k: v for k, v in extra.items() if v is not None}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    return load_settings(getattr(args, "config", None), **overrides)


def cmd_serve(args: argparse.Namespace) -> int:
    from teleo_server import logs
    from teleo_server.errors import TeleoError
    from teleo_server.server import build_server

    try:
        settings = _settings(args, host=args.host, port=args.port)
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


def cmd_token(args: argparse.Namespace) -> int:
    from teleo_server.auth import create_token
    from teleo_server.domain import AccessLevel
    from teleo_server.errors import TeleoError
    from teleo_server.store import SQLiteStore

    try:
        settings = _settings(args)
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
        info = copy(_settings(args).db_path)
    except TeleoError as exc:
        print(f"teleo: {exc}", file=sys.stderr)
        return 1
    print(done(info))
    return 0


# -- client commands ---------------------------------------------------------------------------


def _token(args: argparse.Namespace) -> str | None:
    from teleo_server.config import default_token_file

    if args.token:
        return args.token
    if os.environ.get("TELEO_TOKEN"):
        return os.environ["TELEO_TOKEN"]
    path = Path(os.environ.get("TELEO_DEV_TOKEN_FILE") or default_token_file())
    if path.is_file():
        return path.read_text().strip()
    return None


def _channel(args: argparse.Namespace) -> grpc.Channel:
    if args.ca_cert:
        creds = grpc.ssl_channel_credentials(Path(args.ca_cert).read_bytes())
        return grpc.secure_channel(args.address, creds)
    return grpc.insecure_channel(args.address)


def _metadata(args: argparse.Namespace) -> list[tuple[str, str]]:
    token = _token(args)
    return [("authorization", f"Bearer {token}")] if token else []


def _stub(args: argparse.Namespace):
    from teleo.v1 import memory_pb2_grpc

    return memory_pb2_grpc.MemoryServiceStub(_channel(args))


def _memory_input(d: dict, default_ns: str | None):
    from google.protobuf import json_format
    from teleo.v1 import memory_pb2 as pb

    msg = pb.MemoryInput()
    json_format.ParseDict(d, msg)
    if default_ns and not msg.namespace:
        msg.namespace = default_ns
    return msg


def cmd_store(args: argparse.Namespace) -> int:
    from teleo.v1 import memory_pb2 as pb

    content = args.content if args.content != "-" else sys.stdin.read()
    mem = _memory_input({"content": content}, args.namespace)
    for kv in args.meta or []:
        k, _, val = kv.partition("=")
        mem.metadata[k] = val
    if args.type:
        mem.memory_type = pb.MemoryType.Value(f"MEMORY_TYPE_{args.type.upper()}")
    resp = _stub(args).Store(pb.StoreRequest(memory=mem), metadata=_metadata(args), timeout=args.timeout)
    print(f"{resp.id}{'  (duplicate)' if resp.duplicate else ''}")
    return 0


def _jsonl(path: str) -> Iterator[dict]:
    stream = sys.stdin if path == "-" else open(path, encoding="utf-8")
    with stream:
        for n, line in enumerate(stream, 1):
            line = line.strip()
            if line:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SystemExit(f"teleo: {path}:{n}: not JSON ({exc.msg})") from None


def _progress(done: int, total: int | None, t0: float) -> None:
    rate = done / max(time.perf_counter() - t0, 1e-9)
    if total:
        filled = int(30 * done / total)
        bar = "#" * filled + "." * (30 - filled)
        sys.stderr.write(f"\r[{bar}] {done}/{total}  {rate:,.0f}/s")
    else:
        sys.stderr.write(f"\r{done}  {rate:,.0f}/s")
    sys.stderr.flush()


def cmd_ingest(args: argparse.Namespace) -> int:
    from teleo.v1 import memory_pb2 as pb

    total = None
    if args.file != "-":
        with open(args.file, encoding="utf-8") as f:
            total = sum(1 for line in f if line.strip())
    t0 = time.perf_counter()
    sent = 0
    stored = dups = failed = 0
    stub = _stub(args)

    def batch(records: list[dict]) -> Iterator[pb.StoreBatchRequest]:
        for i, rec in enumerate(records):
            ref = str(rec.pop("client_ref", sent + i))
            if "text" in rec and "content" not in rec:
                rec["content"] = rec.pop("text")
            yield pb.StoreBatchRequest(memory=_memory_input(rec, args.namespace), client_ref=ref)

    pending: list[dict] = []

    def flush() -> None:
        nonlocal sent, stored, dups, failed
        resp = stub.StoreBatch(batch(pending), metadata=_metadata(args), timeout=args.timeout)
        stored, dups, failed = stored + resp.stored, dups + resp.duplicates, failed + resp.failed
        for item in resp.items:
            if item.error:
                sys.stderr.write(f"\nitem {item.client_ref}: {item.error_code}: {item.error}")
        sent += len(pending)
        pending.clear()
        _progress(sent, total, t0)

    for rec in _jsonl(args.file):
        pending.append(rec)
        if len(pending) >= args.batch_size:
            flush()
    if pending:
        flush()
    sys.stderr.write("\n")
    print(f"stored {stored}, duplicates {dups}, failed {failed} in {time.perf_counter() - t0:.1f}s")
    return 1 if failed else 0


def cmd_query(args: argparse.Namespace) -> int:
    from teleo.v1 import memory_pb2 as pb

    req = pb.RetrieveRequest(text=args.text, top_k=args.top_k, profile=args.profile, explain=True, include_breakdown=args.breakdown)
    if args.namespace:
        req.filters.namespaces.append(args.namespace)
    stages, results, summary = [], [], None
    for ev in _stub(args).Retrieve(req, metadata=_metadata(args), timeout=args.timeout):
        kind = ev.WhichOneof("event")
        if kind == "stage":
            stages.append(ev.stage)
        elif kind == "result":
            results.append(ev.result)
        else:
            summary = ev.summary
    if args.json:
        from google.protobuf import json_format

        print(json.dumps([json_format.MessageToDict(r) for r in results], indent=2))
        return 0
    width = 60
    print(f"{'#':>3}  {'SCORE':>6}  {'ID':<12}  {'FOUND BY':<18}  CONTENT")
    for r in results:
        content = " ".join(r.memory.input.content.split())
        content = content[: width - 1] + "…" if len(content) > width else content
        print(f"{r.rank:>3}  {r.score:6.3f}  {r.memory.id[:12]:<12}  {'+'.join(r.found_by)[:18]:<18}  {content}")
        if r.explanation:
            print(f"{'':>25}{r.explanation}")
    if summary is not None:
        timing = ", ".join(f"{s.stage} {s.elapsed_ms:.1f}ms ({s.candidates_out})" for s in summary.stages if not s.skipped)
        flag = f"  DEGRADED: {summary.degraded_reason}" if summary.degraded else ""
        print(f"\n{summary.returned} results in {summary.total_ms:.1f} ms [{summary.profile}] {timing}{flag}")
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    from google.protobuf import json_format
    from teleo.v1 import memory_pb2 as pb

    resp = _stub(args).Get(pb.GetRequest(ids=args.ids), metadata=_metadata(args), timeout=args.timeout)
    for m in resp.memories:
        print(json.dumps(json_format.MessageToDict(m), ensure_ascii=False))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from teleo.v1 import memory_pb2 as pb

    resp = _stub(args).Delete(pb.DeleteRequest(ids=args.ids), metadata=_metadata(args), timeout=args.timeout)
    print(f"deleted {resp.deleted}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from google.protobuf import json_format
    from teleo.v1 import memory_pb2 as pb

    resp = _stub(args).Stats(pb.StatsRequest(), metadata=_metadata(args), timeout=args.timeout)
    print(json.dumps(json_format.MessageToDict(resp), indent=2))
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    """Exit 0 only when the server (or the named component) is SERVING: usable as a probe."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    stub = health_pb2_grpc.HealthStub(_channel(args))
    try:
        resp = stub.Check(health_pb2.HealthCheckRequest(service=args.component), timeout=args.timeout)
    except grpc.RpcError as exc:
        print(f"{args.component or 'server'}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 2
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
    print(f"{args.component or 'server'}: {status}")
    return 0 if resp.status == health_pb2.HealthCheckResponse.SERVING else 1


# -- parser --------------------------------------------------------------------------------------


def _local_db_options(p: argparse.ArgumentParser) -> None:
    """Where a command finds the local database: the server's settings, as `teleo serve` does."""
    p.add_argument("--config", help="TOML config file (also TELEO_CONFIG)")
    p.add_argument("--data-dir")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="teleo", description="Teleo memory retrieval service")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="run the server")
    s.add_argument("--config", help="TOML config file (also TELEO_CONFIG)")
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.add_argument("--data-dir")
    s.set_defaults(fn=cmd_serve)

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

    def client(name: str, help: str, fn) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help)
        c.add_argument("--address", default=os.environ.get("TELEO_ADDRESS", DEFAULT_ADDRESS))
        c.add_argument("--token", help="bearer token (default: TELEO_TOKEN, then the dev token file)")
        c.add_argument("--ca-cert", help="CA certificate for a TLS server")
        c.add_argument("--timeout", type=float, default=30.0)
        c.set_defaults(fn=fn)
        return c

    c = client("store", "store one memory", cmd_store)
    c.add_argument("content", help="text, or - for stdin")
    c.add_argument("--namespace")
    c.add_argument("--type", choices=["episodic", "semantic", "procedural", "working", "reflective"])
    c.add_argument("--meta", action="append", help="key=value metadata (repeatable)")
    c = client("ingest", "bulk-store a JSONL file of MemoryInput objects", cmd_ingest)
    c.add_argument("file", help="JSONL path or -; each line {\"content\": ..., ...}")
    c.add_argument("--namespace")
    c.add_argument("--batch-size", type=int, default=256)
    c.set_defaults(timeout=600.0)
    c = client("query", "retrieve memories", cmd_query)
    c.add_argument("text")
    c.add_argument("-k", "--top-k", type=int, default=10)
    c.add_argument("--profile", default="teleological")
    c.add_argument("--namespace")
    c.add_argument("--breakdown", action="store_true")
    c.add_argument("--json", action="store_true")
    c = client("get", "fetch memories by id", cmd_get)
    c.add_argument("ids", nargs="+")
    c = client("delete", "delete memories by id", cmd_delete)
    c.add_argument("ids", nargs="+")
    client("stats", "corpus statistics", cmd_stats)
    c = client("health", "exit 0 if SERVING (probe)", cmd_health)
    c.add_argument("component", nargs="?", default="", help="'', teleo.v1.MemoryService, embedding, index or store")
    c.set_defaults(timeout=5.0)
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


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "DEFAULT_ADDRESS",
    "cmd_backup",
    "cmd_delete",
    "cmd_get",
    "cmd_health",
    "cmd_ingest",
    "cmd_query",
    "cmd_restore",
    "cmd_serve",
    "cmd_stats",
    "cmd_store",
    "cmd_token",
    "main",
    "parser",
]
