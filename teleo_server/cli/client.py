"""Client commands of ``teleo``: talk to a running server over gRPC."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc

DEFAULT_ADDRESS = "127.0.0.1:50051"


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


def _where(args: argparse.Namespace):
    from teleo.v1 import memory_pb2 as pb

    return pb.RetrieveFilters(namespaces=args.namespace or [], session_id=args.session or "",
                              metadata=_meta_pairs(args.meta))


def _meta_pairs(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"teleo: --meta {item!r} needs key=value")
        out[key] = value
    return out


def cmd_list(args: argparse.Namespace) -> int:
    """One memory per line (JSON), oldest first; every page with --all, else the first."""
    from google.protobuf import json_format
    from teleo.v1 import memory_pb2 as pb

    stub, cursor = _stub(args), ""
    while True:
        resp = stub.List(pb.ListRequest(filters=_where(args), page_size=args.page_size, cursor=cursor),
                         metadata=_metadata(args), timeout=args.timeout)
        for m in resp.memories:
            print(json.dumps(json_format.MessageToDict(m), ensure_ascii=False))
        cursor = resp.next_cursor
        if not cursor or not args.all:
            break
    if cursor:
        print("more memories follow; pass --all to read every page", file=sys.stderr)
    return 0


def cmd_update(args: argparse.Namespace) -> int:
    """Change the given fields of one memory; prints it as stored (JSON)."""
    from google.protobuf import json_format
    from teleo.v1 import memory_pb2 as pb

    memory, fields = pb.MemoryInput(), []
    if args.content is not None:
        memory.content, fields = args.content, [*fields, "content"]
    if args.meta is not None:
        memory.metadata.update(_meta_pairs(args.meta))
        fields.append("metadata")
    if args.importance is not None:
        memory.importance, fields = args.importance, [*fields, "importance"]
    if not fields:
        raise SystemExit("teleo: nothing to change: give --content, --meta or --importance")
    resp = _stub(args).Update(pb.UpdateRequest(id=args.id, memory=memory, fields=fields, keep_previous=args.keep_previous),
                              metadata=_metadata(args), timeout=args.timeout)
    print(json.dumps(json_format.MessageToDict(resp), ensure_ascii=False))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """One exported memory per line (JSON) on stdout, oldest first."""
    from google.protobuf import json_format
    from teleo.v1 import memory_pb2 as pb

    n = 0
    for item in _stub(args).Export(pb.ExportRequest(filters=_where(args), with_embeddings=args.with_embeddings),
                                   metadata=_metadata(args), timeout=args.timeout):
        print(json.dumps(json_format.MessageToDict(item), ensure_ascii=False))
        n += 1
    print(f"exported {n}", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """Store the memories of an export file (new ids; links among them follow)."""
    from google.protobuf import json_format
    from teleo.v1 import memory_pb2 as pb

    items = []
    with (sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")) as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    items.append(json_format.ParseDict(json.loads(line), pb.ExportedMemory()))
                except (ValueError, json_format.ParseError) as exc:
                    raise SystemExit(f"teleo: {args.file} line {number}: not an exported memory ({exc})") from None
    resp = _stub(args).Import(iter(pb.ImportRequest(item=i) for i in items), metadata=_metadata(args),
                              timeout=args.timeout)
    for item in resp.items:
        if item.error:
            print(f"line {item.index + 1}: {item.error_code}: {item.error}", file=sys.stderr)
    print(f"stored {resp.stored}, duplicates {resp.duplicates}, failed {resp.failed}, "
          f"vectors reused {resp.vectors_reused}")
    return 1 if resp.failed else 0


def cmd_delete_where(args: argparse.Namespace) -> int:
    from teleo.v1 import memory_pb2 as pb

    resp = _stub(args).DeleteWhere(pb.DeleteWhereRequest(filters=_where(args), dry_run=args.dry_run),
                                   metadata=_metadata(args), timeout=args.timeout)
    print(f"matched {resp.matched}, deleted {resp.deleted}" + (" (dry run)" if args.dry_run else ""))
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


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``store``, ``ingest``, ``query``, ``get``, ``delete``, ``update``, ``list``,
    ``export``, ``import``, ``delete-where``, ``stats`` and ``health``."""

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
    c = client("update", "change fields of one memory (a new content is re-embedded)", cmd_update)
    c.add_argument("id")
    c.add_argument("--content", help="the new text")
    c.add_argument("--meta", action="append", help="key=value; replaces the metadata (repeatable)")
    c.add_argument("--importance", type=float)
    c.add_argument("--keep-previous", action="store_true", help="keep the old version; the new one supersedes it")
    c = client("list", "list memories you may read, oldest first (JSON lines)", cmd_list)
    c.add_argument("--namespace", action="append", help="only this namespace (repeatable)")
    c.add_argument("--session", help="only this session")
    c.add_argument("--meta", action="append", help="key=value metadata that must match (repeatable)")
    c.add_argument("--page-size", type=int, default=100)
    c.add_argument("--all", action="store_true", help="read every page")
    c = client("export", "write the memories you may read as JSON lines (a namespace's backup or move)", cmd_export)
    c.add_argument("--namespace", action="append", help="only this namespace (repeatable)")
    c.add_argument("--session", help="only this session")
    c.add_argument("--meta", action="append", help="key=value metadata that must match (repeatable)")
    c.add_argument("--with-embeddings", action="store_true", help="include the vectors (no re-embedding on import)")
    c.set_defaults(timeout=600.0)
    c = client("import", "store the memories of an export file (new ids)", cmd_import)
    c.add_argument("file", help="file written by `teleo export`, or -")
    c.set_defaults(timeout=600.0)
    c = client("delete-where", "delete every memory of the named namespaces matching the filters", cmd_delete_where)
    c.add_argument("--namespace", action="append", required=True, help="namespace to delete from (repeatable)")
    c.add_argument("--session", help="only this session")
    c.add_argument("--meta", action="append", help="key=value metadata that must match (repeatable)")
    c.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
    client("stats", "corpus statistics", cmd_stats)
    c = client("health", "exit 0 if SERVING (probe)", cmd_health)
    c.add_argument("component", nargs="?", default="", help="'', teleo.v1.MemoryService, embedding, index or store")
    c.set_defaults(timeout=5.0)


__all__ = [
    "DEFAULT_ADDRESS",
    "add_commands",
    "cmd_delete",
    "cmd_delete_where",
    "cmd_export",
    "cmd_get",
    "cmd_health",
    "cmd_import",
    "cmd_ingest",
    "cmd_list",
    "cmd_query",
    "cmd_stats",
    "cmd_store",
    "cmd_update",
]
