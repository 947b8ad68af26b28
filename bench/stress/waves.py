"""Part 3, concurrency: waves of simultaneous Retrieve streams, and clients that never read.

Waves: N Retrieve streams (200, 500, 1,000) start at once from grpc.aio clients over 16
connections and 50 tokens, with unique query texts (nothing comes from the embedding cache), while
two writer threads keep storing. Each stream is served (its summary arrives) or refused
(RESOURCE_EXHAUSTED); the refusal latency is measured from the call's start to its status. The
client's own event-loop lag is recorded beside it, so a slow client is not mistaken for a slow
server.

A client that starts a thousand streams at once cannot time them apart from itself: the last call
it starts waits for it to send the 999 before, and the same client against a server that refuses
every call in its gRPC core (before any Python runs) measures hundreds of milliseconds. So while
each wave runs, a separate process (sixteen connections, each one call at a time, unique query texts)
times what a client arriving at the saturated server waits for its answer: that is the refusal
latency the target is judged on, and the wave client's own figure is reported beside it. Sixteen,
not four as first: its first calls land before the wave has filled the server, are admitted, and
wait most of the wave for their first event, so four timed as few as 7 refusals in a 1,000 wave
on some machines.

Slow consumers: 64 clients, each on its own connection, open Retrieve streams whose results are
several megabytes (top_k 1000 over memories with 128 KiB of metadata each, explanations and
breakdowns on) and never read them. The stream stays open only if gRPC flow control stopped the
server's writes; that is checked, not assumed: the streams must still be open when the measurement
ends, and a sample read afterwards must show a server-side total time as long as the hold. Four
other clients measure Retrieve latency first on the idle server, then while the streams are held.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import re
import threading
import time
from collections import Counter

import grpc
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc

from bench.stress.context import Context
from bench.stress.report import Part, percentile
from bench.stress.server import Server, bearer, channel, create_tokens_offline, stub

WAVE_CHANNELS = 16
WAVE_TOKENS = 50
SLOW_CLIENTS = 64
SLOW_TOKENS = 16
BULK_MEMORIES = 80
BULK_META = {f"field{j:02d}": (f"{j:02d}" + "ledger value ") * 300 for j in range(32)}  # 32 x ~4 KB
BULK_META = {k: v[:4000] for k, v in BULK_META.items()}
BULK_QUERY = pb.RetrieveRequest(text="bulk ledger entry shipping crates", top_k=1000, explain=True,
                                include_breakdown=True, filters=pb.RetrieveFilters(namespaces=["bulk"]))


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1e3, 1)


def _shape(message: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "N", message)[:160]


class _Writers:
    """Two threads storing memories for as long as they run; their latencies and failures."""

    def __init__(self, address: str, token: str, ctx: Context, tag: str) -> None:
        self.address, self.auth, self.ctx, self.tag = address, bearer(token), ctx, tag
        self.stop = threading.Event()
        self.took: list[float] = []
        self.codes: Counter = Counter()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(2)]

    def _run(self, i: int) -> None:
        rng = self.ctx.rng(f"waves-writer-{self.tag}-{i}")
        with channel(self.address) as ch:
            s = stub(ch)
            n = 0
            while not self.stop.is_set():
                n += 1
                t0 = time.perf_counter()
                try:
                    s.Store(pb.StoreRequest(memory=pb.MemoryInput(content=f"{self.tag} writer {i} {n} {self.ctx.sentence(rng)}",
                                                                  namespace="waves")), metadata=self.auth, timeout=30)
                    self.took.append(time.perf_counter() - t0)
                    self.codes["OK"] += 1
                except grpc.RpcError as exc:
                    self.codes[exc.code().name] += 1
                    time.sleep(0.05)

    def __enter__(self) -> "_Writers":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def figures(self) -> dict:
        return {"stores": self.codes["OK"], "p50_ms": _ms(percentile(self.took, 50)), "p99_ms": _ms(percentile(self.took, 99)),
                "failed": {k: v for k, v in self.codes.items() if k != "OK"}}


async def _lag_monitor(samples: list[float], stop: asyncio.Event, step: float = 0.005) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t0 = loop.time()
        await asyncio.sleep(step)
        samples.append(loop.time() - t0 - step)


async def _wave(address: str, tokens: list[str], n: int, ctx: Context, arrivals: _Arrivals | None = None) -> dict:
    rng = ctx.rng(f"waves-{n}")
    texts = [f"{ctx.sentence(rng, rng.randint(3, 8))} {i}" for i in range(n)]
    channels = [grpc.aio.insecure_channel(address) for _ in range(WAVE_CHANNELS)]
    for ch in channels:
        await asyncio.wait_for(ch.channel_ready(), 30)
    stubs = [memory_pb2_grpc.MemoryServiceStub(ch) for ch in channels]
    out: list[tuple[str, float, str]] = []
    lag: list[float] = []
    stop = asyncio.Event()

    async def one(i: int) -> None:
        req = pb.RetrieveRequest(text=texts[i], top_k=10)
        md = bearer(tokens[i % len(tokens)])
        t0 = time.perf_counter()
        try:
            async for _ in stubs[i % len(stubs)].Retrieve(req, metadata=md, timeout=120):
                pass
            out.append(("OK", time.perf_counter() - t0, ""))
        except grpc.aio.AioRpcError as exc:
            out.append((exc.code().name, time.perf_counter() - t0, exc.details() or ""))

    monitor = asyncio.create_task(_lag_monitor(lag, stop))
    t0 = time.perf_counter()
    if arrivals is not None:
        arrivals.start.set()
    try:
        await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        wall = time.perf_counter() - t0
        arrived = arrivals.finish() if arrivals is not None else None
        stop.set()
        await monitor
        for ch in channels:
            await ch.close()
    refused = [t for c, t, _ in out if c == "RESOURCE_EXHAUSTED"]
    served = [t for c, t, _ in out if c == "OK"]
    codes = Counter(c for c, _, _ in out)
    messages = Counter(_shape(m) for c, _, m in out if c != "OK")
    return {
        "streams": n, "served": len(served), "refused": len(refused),
        "other": {k: v for k, v in codes.items() if k not in ("OK", "RESOURCE_EXHAUSTED")},
        "refusal_ms_p50": _ms(percentile(refused, 50)), "refusal_ms_p99": _ms(percentile(refused, 99)),
        "refusal_ms_max": _ms(max(refused, default=None)),
        "served_ms_p50": _ms(percentile(served, 50)), "served_ms_p99": _ms(percentile(served, 99)),
        "wall_s": round(wall, 2), "client_loop_lag_ms_p99": _ms(percentile(lag, 99)),
        "messages": dict(messages.most_common(4)),
        **({"arrivals": arrived} if arrived is not None else {}),
    }


ARRIVAL_CLIENTS = 16


def _arrivals(address: str, token: str, start: "multiprocessing.synchronize.Event",
              stop: "multiprocessing.synchronize.Event", out: "multiprocessing.Queue", gap_s: float = 0.005) -> None:
    """Runs in its own process: ``ARRIVAL_CLIENTS`` threads, each on its own connection, send one
    Retrieve at a time from ``start`` until ``stop``; puts (code, seconds until the status of a refused
    call or the first event of an admitted one, which is then cancelled). Several threads, so that
    one whose call was admitted and waits for its first event does not stop the sampling."""
    results: list[tuple[str, float]] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        with grpc.insecure_channel(address) as ch:
            s = memory_pb2_grpc.MemoryServiceStub(ch)
            grpc.channel_ready_future(ch).result(timeout=30)
            start.wait(120)
            n = 0
            while not stop.is_set():
                n += 1
                req = pb.RetrieveRequest(text=f"arrival probe {c} {n} harbour lantern orchard", top_k=10)
                t0 = time.perf_counter()
                call = s.Retrieve(req, metadata=bearer(token), timeout=10)
                try:
                    next(call)  # admitted: its first event came; the rest is not waited for
                    got = ("OK", time.perf_counter() - t0)
                    call.cancel()
                except StopIteration:
                    got = ("OK", time.perf_counter() - t0)
                except grpc.RpcError as exc:
                    got = (exc.code().name, time.perf_counter() - t0)
                if not stop.is_set() or got[0] != "CANCELLED":
                    with lock:
                        results.append(got)
                time.sleep(gap_s)

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(ARRIVAL_CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    with lock:
        out.put(list(results))


class _Arrivals:
    """A separate process timing single calls that arrive while a wave runs (see the module doc)."""

    def __init__(self, address: str, token: str) -> None:
        mp = multiprocessing.get_context("spawn")
        self.start, self.stop, self.queue = mp.Event(), mp.Event(), mp.Queue()
        self.proc = mp.Process(target=_arrivals, args=(address, token, self.start, self.stop, self.queue), daemon=True)
        self.proc.start()

    def finish(self) -> dict:
        self.stop.set()
        self.start.set()
        try:
            results = self.queue.get(timeout=120)
        finally:
            self.proc.join(30)
            if self.proc.is_alive():
                self.proc.kill()
        refused = [t for c, t in results if c == "RESOURCE_EXHAUSTED"]
        served = [t for c, t in results if c == "OK"]
        return {"calls": len(results), "refused": len(refused), "admitted": len(served),
                "other": dict(Counter(c for c, _ in results if c not in ("OK", "RESOURCE_EXHAUSTED"))),
                "refusal_ms_p50": _ms(percentile(refused, 50)), "refusal_ms_p99": _ms(percentile(refused, 99)),
                "refusal_ms_max": _ms(max(refused, default=None)),
                "admitted_first_event_ms_p50": _ms(percentile(served, 50)),
                "refusals_ms": [_ms(t) for c, t in results if c == "RESOURCE_EXHAUSTED"][:200]}


async def _probe(address: str, token: str, texts: list[str], clients: int, per_client: int) -> dict:
    """``clients`` closed-loop clients, each ``per_client`` Retrieves (top_k 10) on its own connection."""
    channels = [grpc.aio.insecure_channel(address) for _ in range(clients)]
    took: list[float] = []
    codes: Counter = Counter()
    messages: Counter = Counter()

    async def client(c: int) -> None:
        s = memory_pb2_grpc.MemoryServiceStub(channels[c])
        for i in range(per_client):
            req = pb.RetrieveRequest(text=texts[(c * per_client + i) % len(texts)], top_k=10)
            t0 = time.perf_counter()
            try:
                async for _ in s.Retrieve(req, metadata=bearer(token), timeout=60):
                    pass
                took.append(time.perf_counter() - t0)
                codes["OK"] += 1
            except grpc.aio.AioRpcError as exc:
                codes[exc.code().name] += 1
                messages[_shape(exc.details() or "")] += 1
                await asyncio.sleep(0.02)

    try:
        for ch in channels:
            await asyncio.wait_for(ch.channel_ready(), 30)
        await asyncio.gather(*(client(c) for c in range(clients)))
    finally:
        for ch in channels:
            await ch.close()
    return {"calls": clients * per_client, "served": codes["OK"], "p50_ms": _ms(percentile(took, 50)),
            "p99_ms": _ms(percentile(took, 99)), "failed": {k: v for k, v in codes.items() if k != "OK"},
            "messages": dict(messages.most_common(3))}


async def _slow_consumers(address: str, slow_tokens: list[str], probe_token: str, texts: list[str], ctx: Context) -> dict:
    per_client = ctx.pick(2, 1)
    # BDP probing off: a slow client keeps gRPC's default 64 KiB stream window instead of one grown
    # from its history, so every one of these streams has to block the server's writes
    channels = [grpc.aio.insecure_channel(address, options=[("grpc.http2.bdp_probe", 0)]) for _ in range(SLOW_CLIENTS)]
    for ch in channels:
        await asyncio.wait_for(ch.channel_ready(), 30)
    calls, owner = [], []
    ended: dict[int, tuple[float, str]] = {}
    t_open = time.perf_counter()
    stubs = [memory_pb2_grpc.MemoryServiceStub(ch) for ch in channels]
    for round_ in range(per_client):
        if round_:
            await asyncio.sleep(1.0)  # the first streams are computed (and blocked) before more open
        for c, s in enumerate(stubs):
            call = s.Retrieve(BULK_QUERY, metadata=bearer(slow_tokens[c % len(slow_tokens)]), timeout=300)
            k = len(calls)
            call.add_done_callback(lambda cl, k=k: ended.setdefault(k, (time.perf_counter() - t_open, "")))
            calls.append(call)  # started, never iterated
            owner.append(c)
    await asyncio.sleep(1.5)  # let the server compute them and fill the windows
    loaded = await _probe(address, probe_token, texts, 4, ctx.pick(25, 10))
    held_s = time.perf_counter() - t_open
    open_at_end = sum(1 for k in range(len(calls)) if k not in ended)
    holding = len({owner[k] for k in range(len(calls)) if k not in ended})
    early = Counter()
    for k, call in enumerate(calls):
        if k in ended:
            code = await call.code()
            early[f"{code.name}: {_shape(await call.details() or '')}"] += 1
    # read a sample: a stream that was held shows a server-side total time about as long as the hold
    sample = [k for k in range(len(calls)) if k not in ended][: ctx.pick(12, 6)]
    server_blocked = 0
    totals = []
    for k in sample:
        read_at = time.perf_counter() - t_open
        total_ms = None
        try:
            async for ev in calls[k]:
                if ev.WhichOneof("event") == "summary":
                    total_ms = ev.summary.total_ms
        except grpc.aio.AioRpcError as exc:
            early[f"{exc.code().name} on read: {_shape(exc.details() or '')}"] += 1
        if total_ms is not None:
            totals.append(total_ms)
            server_blocked += total_ms >= 0.5 * read_at * 1e3
    for call in calls:
        call.cancel()
    for ch in channels:
        await ch.close()
    return {"slow_clients": SLOW_CLIENTS, "slow_streams": len(calls), "held_s": round(held_s, 1),
            "open_when_measured": open_at_end, "clients_holding_a_stream": holding,
            "ended_before_read": dict(early), "sample_read": len(sample),
            "sample_server_total_ms": [round(t) for t in totals], "sample_blocked_server_side": server_blocked,
            "loaded": loaded}


def _corpus(srv: Server, token: str, ctx: Context) -> None:
    rng = ctx.rng("waves-corpus")
    n = ctx.pick(400, 200)
    with channel(srv.address) as ch:
        s = stub(ch)
        reqs = [pb.StoreBatchRequest(memory=pb.MemoryInput(content=f"wave corpus {i} {ctx.sentence(rng, rng.randint(6, 20))}",
                                                           namespace="waves")) for i in range(n)]
        s.StoreBatch(iter(reqs), metadata=bearer(token), timeout=600)
        bulk = [pb.StoreBatchRequest(memory=pb.MemoryInput(content=f"bulk ledger entry {i} about shipping crates {ctx.sentence(rng, 4)}",
                                                           namespace="bulk", metadata=BULK_META)) for i in range(BULK_MEMORIES)]
        out = s.StoreBatch(iter(bulk), metadata=bearer(token), timeout=600)
        if out.failed:
            raise RuntimeError(f"bulk memories refused: {out.items[0].error}")


def run(ctx: Context) -> Part:
    part = Part("concurrency", "3. concurrency")
    work = ctx.dir("waves")
    sizes = ctx.pick((200, 500, 1000), (200, 500))
    specs = [("waves-admin", ["*"], ["*"], 4, "waves"), ("waves-probe", ["*"], ["*"], 2, "waves")]
    specs += [(f"waves-client-{i}", ["waves"], ["waves"], 2, "waves") for i in range(WAVE_TOKENS)]
    specs += [(f"waves-slow-{i}", ["bulk"], [], 2, "bulk") for i in range(SLOW_TOKENS)]
    tokens = create_tokens_offline(work / "data", specs)
    admin, probe_token = tokens[0], tokens[1]
    wave_tokens, slow_tokens = tokens[2:2 + WAVE_TOKENS], tokens[2 + WAVE_TOKENS:]
    srv = Server(work / "data", work, name="waves")
    waves: dict[str, dict] = {}
    slow: dict = {}
    idle: dict = {}
    try:
        srv.start()
        _corpus(srv, admin, ctx)
        for n in sizes:
            with _Writers(srv.address, admin, ctx, f"wave{n}") as writers:
                arrivals = _Arrivals(srv.address, probe_token)
                waves[str(n)] = asyncio.run(_wave(srv.address, wave_tokens, n, ctx, arrivals))
            waves[str(n)]["writers"] = writers.figures()
            time.sleep(1.0)
        rng = ctx.rng("waves-probe")
        texts = [ctx.sentence(rng, rng.randint(3, 8)) for _ in range(20)]
        time.sleep(2.0)  # what the last wave left behind (bookkeeping, index merges) settles first
        asyncio.run(_probe(srv.address, probe_token, texts, 4, len(texts) // 4))  # warm the query cache for both runs
        idle = asyncio.run(_probe(srv.address, probe_token, texts, 4, ctx.pick(25, 10)))
        slow = asyncio.run(_slow_consumers(srv.address, slow_tokens, probe_token, texts, ctx))
        time.sleep(0.5)
        slow["idle_after"] = asyncio.run(_probe(srv.address, probe_token, texts, 4, ctx.pick(25, 10)))
    except Exception as exc:
        part.error = f"{type(exc).__name__}: {exc}"
    finally:
        srv.stop()
    # The load generator's own floor: the same wave against a server whose gRPC core refuses every
    # call before any Python runs (limits.max_concurrent_rpcs = 1). What this client measures there
    # is what it cannot tell apart from the server on this machine.
    floor: dict = {}
    floor_srv = Server(work / "floor-data", work, env={"TELEO_LIMITS__MAX_CONCURRENT_RPCS": "1"}, name="waves-floor")
    try:
        floor_srv.start()
        floor = asyncio.run(_wave(floor_srv.address, wave_tokens[:1], sizes[-1], ctx))
    except Exception as exc:
        floor = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        floor_srv.stop()
    part.figures.update({"waves": waves, "idle": idle, "slow_consumers": slow, "client_floor": floor})

    big = waves.get(str(sizes[-1]), {})
    arrived = big.get("arrivals", {})
    p99 = arrived.get("refusal_ms_p99")
    enough = arrived.get("refused", 0) >= 20
    part.target("refusal_p99", f"refusals under the {sizes[-1]:,}-stream wave arrive in <= 50 ms (p99)",
                None if p99 is None else
                f"{p99} ms p99 (p50 {arrived.get('refusal_ms_p50')} ms, {arrived.get('refused')} refusals) for calls "
                f"arriving from another process during the wave; the wave client itself measures p99 "
                f"{big.get('refusal_ms_p99')} ms, and {floor.get('refusal_ms_p99')} ms against a server refusing every "
                f"call in its gRPC core (its own floor)",
                (p99 <= 50.0) if p99 is not None and enough else None,
                "" if enough else f"only {arrived.get('refused', 0)} arriving calls were refused during the wave (20 needed)")
    others = {n: w["other"] for n, w in waves.items() if w.get("other")}
    part.target("answered", "every wave stream is served or refused with RESOURCE_EXHAUSTED",
                "; ".join(f"{n}: {o}" for n, o in others.items()) or (f"all {sum(w['streams'] for w in waves.values())}" if waves else None),
                (not others) if len(waves) == len(sizes) else (False if others else None))
    loaded = slow.get("loaded", {})
    # the clients really held the server: nearly every one has an open stream, and the sampled ones
    # were blocked server-side (streams past the server's own limits may be refused; that is fine)
    verified = bool(slow) and slow["clients_holding_a_stream"] >= 0.9 * SLOW_CLIENTS \
        and slow["sample_blocked_server_side"] >= 0.9 * max(slow["sample_read"], 1)
    slow_note = "" if verified else (
        "the slow clients did not hold the server (%s of %s clients with an open stream, %s of %s sampled streams blocked "
        "server-side), so this did not test slow consumers"
        % (slow.get("clients_holding_a_stream"), SLOW_CLIENTS, slow.get("sample_blocked_server_side"), slow.get("sample_read"))
        if slow else "not run")
    served_share = loaded.get("served", 0) / loaded["calls"] if loaded.get("calls") else None
    part.target("slow_served", f"other clients served while {SLOW_CLIENTS} clients hold unread streams (>= 95%)",
                None if served_share is None else f"{loaded['served']} of {loaded['calls']}",
                (served_share >= 0.95) if verified and served_share is not None else None, slow_note)
    ratio = (loaded["p50_ms"] / idle["p50_ms"]) if loaded.get("p50_ms") and idle.get("p50_ms") else None
    part.target("slow_p50", "other clients' Retrieve p50 within 2x of the idle server's",
                None if ratio is None else f"{loaded['p50_ms']} vs {idle['p50_ms']} ms idle = {ratio:.2f}x",
                (ratio <= 2.0) if verified and ratio is not None else None,
                slow_note or ("" if ratio is not None else "no Retrieve was served while the streams were held"))
    return part
