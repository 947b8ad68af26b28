"""Part 2, fuzzer: arbitrary bytes, extreme values and malformed credentials at every MemoryService method.

Requests go through generic ``unary_unary`` / ``unary_stream`` / ``stream_unary`` callables with
identity serializers, so any bytes reach the server as the request body. Four families, all drawn
from seeded random streams:

- ``random``: random bytes and "tag soup" (random protobuf tags and payloads) as the body;
- ``mutated``: valid requests with flipped bits, cut or spliced bytes, invalid UTF-8, overlong varints;
- ``extreme``: well-formed messages with extreme values (NaN/inf, huge and negative numbers,
  timestamps outside 0001..9999, strings at and past every limit, unknown enum values, empty and
  odd unicode), first a fixed list of hand-picked cases, then random field combinations;
- ``auth``: missing, malformed, unknown, revoked, truncated and very long tokens, odd extra metadata.

Every response is counted by method and status code. INTERNAL and UNKNOWN are the failures: a
request the server does not understand must be refused with a status that says why.
"""

from __future__ import annotations

import random
import struct
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import grpc
from google.protobuf.message import Message
from teleo.v1 import memory_pb2 as pb

from bench.stress import cases
from bench.stress.context import Context
from bench.stress.report import Part, percentile
from bench.stress.server import Server, annotate, bearer, channel, create_token_cli, revoke_token_cli, tail

SERVICE = "/teleo.v1.MemoryService/"
METHODS: dict[str, tuple[str, type[Message]]] = {
    "Store": ("unary", pb.StoreRequest),
    "StoreBatch": ("stream", pb.StoreBatchRequest),
    "Get": ("unary", pb.GetRequest),
    "Delete": ("unary", pb.DeleteRequest),
    "Retrieve": ("server_stream", pb.RetrieveRequest),
    "Compare": ("unary", pb.CompareRequest),
    "Feedback": ("unary", pb.FeedbackRequest),
    "Stats": ("unary", pb.StatsRequest),
    "Update": ("unary", pb.UpdateRequest),
    "List": ("unary", pb.ListRequest),
    "DeleteWhere": ("unary", pb.DeleteWhereRequest),
    "Export": ("server_stream", pb.ExportRequest),
    "Import": ("stream", pb.ImportRequest),
}
BAD = ("INTERNAL", "UNKNOWN")
_ident: Callable[[bytes], bytes] = lambda b: b


@dataclass
class Case:
    method: str
    family: str
    what: str                       # short description
    body: bytes | list[bytes]       # a list for StoreBatch and Import: the client stream
    metadata: list[tuple[str, str | bytes]] | None = None  # None: the valid token

    def size(self) -> int:
        return sum(map(len, self.body)) if isinstance(self.body, list) else len(self.body)

    def head(self) -> str:
        b = self.body[0] if isinstance(self.body, list) and self.body else self.body
        return bytes(b[:48]).hex() if isinstance(b, bytes | bytearray) else ""


# -- random bodies ---------------------------------------------------------------------------------


def _length(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.05:
        return 0
    if r < 0.40:
        return rng.randint(1, 16)
    if r < 0.90:
        return rng.randint(17, 512)
    if r < 0.99:
        return rng.randint(513, 65536)
    return rng.randint(1 << 20, 2 << 20)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def tag_soup(rng: random.Random, depth: int = 0) -> bytes:
    """Random fields: field numbers 1..20, every wire type (also the invalid 6 and 7), random payloads."""
    out = bytearray()
    for _ in range(rng.randint(1, 12)):
        field, wire = rng.randint(1, 20), rng.choice((0, 0, 1, 2, 2, 2, 3, 4, 5, 6, 7))
        out += _varint(field << 3 | wire)
        if wire == 0:
            out += _varint(rng.choice((0, 1, 2, 5, 99, -1, 2**31 - 1, 2**63 - 1, rng.getrandbits(64))))
        elif wire == 1:
            out += struct.pack("<d", rng.choice((float("nan"), float("inf"), -1e308, 0.5)))
        elif wire == 5:
            out += struct.pack("<f", rng.choice((float("nan"), float("-inf"), 3.4e38, 0.5)))
        elif wire == 2:
            payload = tag_soup(rng, depth + 1) if depth < 3 and rng.random() < 0.3 else rng.randbytes(rng.randint(0, 64))
            n = len(payload) + rng.choice((0, 0, 0, 1, -1, 1000))  # sometimes a lying length
            out += _varint(max(n, 0)) + payload
        elif wire in (6, 7):
            out += rng.randbytes(rng.randint(0, 4))
    return bytes(out)


def random_case(method: str, rng: random.Random) -> Case:
    def body() -> tuple[bytes, str]:
        if rng.random() < 0.5:
            n = _length(rng)
            return rng.randbytes(n), "random bytes"
        return tag_soup(rng), "tag soup"

    if METHODS[method][0] == "stream":
        items = [body() for _ in range(rng.randint(1, 4))]
        return Case(method, "random", f"{len(items)} items: " + ", ".join(f"{w} ({len(b)} B)" for b, w in items),
                    [b for b, _ in items])
    b, what = body()
    return Case(method, "random", f"{what} ({len(b)} B)", b)


# -- mutated valid requests ------------------------------------------------------------------------


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    b = bytearray(data)
    done = []
    for _ in range(rng.randint(1, 4)):
        op = rng.choice(("flip", "byte", "insert", "delete", "truncate", "duplicate", "varint", "utf8", "length"))
        at = rng.randint(0, max(len(b) - 1, 0))
        if op == "flip" and b:
            b[at] ^= 1 << rng.randint(0, 7)
        elif op == "byte" and b:
            b[at] = rng.randint(0, 255)
        elif op == "insert":
            b[at:at] = rng.randbytes(rng.randint(1, 16))
        elif op == "delete" and b:
            del b[at:at + rng.randint(1, 16)]
        elif op == "truncate":
            del b[at:]
        elif op == "duplicate" and b:
            b[at:at] = b[at:at + rng.randint(1, 64)]
        elif op == "varint":
            b[at:at] = b"\x08" + b"\xff" * rng.randint(10, 12) + b"\x01"  # longer than any varint may be
        elif op == "utf8":
            b[at:at] = rng.choice((b"\xc3\x28", b"\xed\xa0\x80", b"\xff\xfe", b"\xf4\x90\x80\x80", b"\xc0\xaf"))
        elif op == "length":
            b += b"\x0a" + _varint(rng.choice((2**31, 2**32 + 5, 2**63))) + b"xy"  # a length past the end
        done.append(f"{op}@{at}")
    return bytes(b), ", ".join(done)


def mutated_case(method: str, rng: random.Random, pools: "cases.Pools") -> Case:
    msg = cases.valid(method, rng, pools)
    if METHODS[method][0] == "stream":
        out, notes = [], []
        for m in msg:
            b, what = mutate(m.SerializeToString(), rng) if rng.random() < 0.6 else (m.SerializeToString(), "intact")
            out.append(b)
            notes.append(what)
        return Case(method, "mutated", f"valid {len(msg)}-item stream mutated: " + "; ".join(notes), out)
    b, what = mutate(msg.SerializeToString(), rng)
    return Case(method, "mutated", f"valid {type(msg).__name__} mutated: {what}", b)


# -- extreme values ------------------------------------------------------------------------------


def extreme_case(method: str, rng: random.Random, pools: "cases.Pools") -> Case:
    msg, what = cases.extreme(method, rng, pools)
    if METHODS[method][0] == "stream":
        return Case(method, "extreme", what, [m.SerializeToString() for m in msg])
    return Case(method, "extreme", what, msg.SerializeToString())


# -- credentials -----------------------------------------------------------------------------------


def auth_case(method: str, rng: random.Random, pools: "cases.Pools", k: int) -> Case:
    name, md = cases.credentials(rng, pools, k)
    msg = cases.valid(method, rng, pools, cheap=True)
    body = [m.SerializeToString() for m in msg] if METHODS[method][0] == "stream" else msg.SerializeToString()
    return Case(method, "auth", name, body, md)


# -- the run ---------------------------------------------------------------------------------------


def _plan(ctx: Context, pools: "cases.Pools", counts: dict[str, int]) -> Iterator[Case]:
    """Every case, in a seeded order; the families interleave so a time budget cuts them evenly."""
    rng = ctx.rng("fuzz-plan")
    names = list(METHODS)
    fixed = [(m, msg, what) for m, msg, what in cases.fixed(pools)]
    fams = {f: ctx.rng(f"fuzz-{f}") for f in counts}
    left = dict(counts)
    i = 0
    while any(left.values()):
        fam = rng.choice([f for f, n in left.items() if n])
        left[fam] -= 1
        r = fams[fam]
        method = names[i % len(names)] if fam != "extreme" else r.choice(names)
        i += 1
        if fam == "random":
            yield random_case(method, r)
        elif fam == "mutated":
            yield mutated_case(method, r, pools)
        elif fam == "auth":
            yield auth_case(method, r, pools, counts["auth"] - left["auth"])
        elif fixed:
            m, msg, what = fixed.pop(0)
            body = [x.SerializeToString() for x in msg] if METHODS[m][0] == "stream" else msg.SerializeToString()
            yield Case(m, "extreme", what, body)
        else:
            yield extreme_case(method, r, pools)


def _call(ch: grpc.Channel, case: Case, token_md: list, timeout: float) -> tuple[str, str, float]:
    kind = METHODS[case.method][0]
    md = token_md if case.metadata is None else case.metadata
    path = SERVICE + case.method
    t0 = time.perf_counter()
    try:
        if kind == "unary":
            ch.unary_unary(path, request_serializer=_ident, response_deserializer=_ident)(case.body, metadata=md, timeout=timeout)
        elif kind == "stream":
            ch.stream_unary(path, request_serializer=_ident, response_deserializer=_ident)(iter(case.body), metadata=md, timeout=timeout)
        else:
            for _ in ch.unary_stream(path, request_serializer=_ident, response_deserializer=_ident)(case.body, metadata=md, timeout=timeout):
                pass
        code, details = "OK", ""
    except grpc.RpcError as exc:
        code, details = exc.code().name, exc.details() or ""
        if code == "INTERNAL" and details == "Invalid metadata":
            code = "CLIENT_REJECTED"  # grpc refused to send it; the server never saw this request
    return code, details, time.perf_counter() - t0


def run(ctx: Context) -> Part:
    part = Part("fuzzer", "2. fuzzer")
    total = ctx.pick(12_000, 2_400)
    counts = {"random": total * 28 // 100, "mutated": total * 28 // 100, "auth": total * 12 // 100}
    counts["extreme"] = total - sum(counts.values())
    budget = ctx.pick(240.0, 60.0)
    minimum = ctx.pick(10_000, 2_000)
    work = ctx.dir("fuzz")
    srv = Server(work / "data", work, name="fuzz")
    by_method: dict[str, Counter] = defaultdict(Counter)
    by_family: dict[str, Counter] = defaultdict(Counter)
    latency: list[float] = []
    slowest: list[tuple[float, str, str]] = []
    lock = threading.Lock()
    sent = 0
    up_at_end = None
    try:
        srv.start()
        pools = cases.setup(srv, work, create_token_cli, revoke_token_cli)
        token_md = bearer(srv.token)
        part.figures["families_planned"] = counts
        deadline = time.monotonic() + budget
        stop = False

        def record(case: Case, fut: Future) -> None:
            nonlocal sent
            code, details, took = fut.result()
            with lock:
                by_method[case.method][code] += 1
                by_family[case.family][code] += 1
                if code != "CLIENT_REJECTED":
                    sent += 1
                    latency.append(took)
                    slowest.append((took, case.method, case.what[:120]))
                    slowest.sort(reverse=True)
                    del slowest[5:]
                if code in BAD or code == "DEADLINE_EXCEEDED":
                    part.example(method=case.method, family=case.family, input=case.what, body_bytes=case.size(),
                                 body_head_hex=case.head(), status=code, message=details[:300],
                                 seconds=round(took, 3))

        with channel(srv.address) as ch, ThreadPoolExecutor(6) as ex:
            window: list[Future] = []
            for case in _plan(ctx, pools, counts):
                if time.monotonic() > deadline or not srv.alive():
                    stop = True
                    break
                fut = ex.submit(_call, ch, case, token_md, 30.0)
                fut.add_done_callback(lambda f, c=case: record(c, f))
                window.append(fut)
                if len(window) >= 24:
                    window[0].result()
                    window = [f for f in window if not f.done()]
            for f in window:
                f.result()
            part.figures["stopped_early"] = "time budget" if stop and srv.alive() else "server exited" if stop else ""
            up_at_end = srv.alive() and cases.still_serving(srv)
    except Exception as exc:
        part.error = f"{type(exc).__name__}: {exc}"
    finally:
        srv.stop()
        logs = srv.logs()
        annotate(part.examples, logs)
    bad = sum(c[k] for c in by_method.values() for k in BAD)
    part.figures.update({
        "requests_sent": sent,
        "client_rejected": sum(c["CLIENT_REJECTED"] for c in by_method.values()),
        "by_method": {m: dict(sorted(c.items())) for m, c in sorted(by_method.items())},
        "by_family": {f: dict(sorted(c.items())) for f, c in sorted(by_family.items())},
        "internal_or_unknown": bad,
        "deadline_exceeded": sum(c["DEADLINE_EXCEEDED"] for c in by_method.values()),
        "latency_ms_p50": _ms(percentile(latency, 50)),
        "latency_ms_p99": _ms(percentile(latency, 99)),
        "slowest": [{"seconds": round(t, 3), "method": m, "input": w} for t, m, w in slowest],
        "server_logged_internal_errors": logs.count('"rpc.internal_error"'),
        "server_log_tail_if_down": "" if up_at_end else tail(logs, 8),
    })
    part.target("requests", f">= {minimum:,} requests across all {len(METHODS)} methods", sent, sent >= minimum if sent else None)
    part.target("internal_unknown", "0 responses with INTERNAL or UNKNOWN", bad, (bad == 0) if sent else None)
    part.target("server_up", "server still serving at the end", up_at_end, up_at_end)
    return part


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1e3, 2)
