"""What one refused Retrieve costs the server, against gRPC's own floor on the same machine.

    python -m bench.stress.refusal_cost [--streams 1000] [--rounds 4] [--out FILE]

A burst of ``--streams`` Retrieve calls (one grpc.aio client, 16 connections, unique query texts)
is sent to three servers in turn, and the server process's CPU time (user + system, from
``/proc/PID/stat``) over the burst is divided by the calls:

- ``teleo``: a real Teleo server with ``limits.max_concurrent_retrieves = 1``, so every call of the
  burst but the few admitted while the slot is free is refused by its admission check (the admitted
  ones' own work, query embedding included, is in the figure: ``codes`` says how many there were);
- ``aio_handler``: a bare grpc.aio server whose Retrieve handler only sets RESOURCE_EXHAUSTED and
  returns (the least a Python handler can do);
- ``core_limit``: the same bare server with ``maximum_concurrent_rpcs = 1`` and one call held
  open, so gRPC refuses every call of the burst before any handler runs.

The last two are the floor a refusal costs in this process model whatever the handler does, so a
burst's length on the server, and the wait of a call that lands behind it, follow from them.
Linux only (``/proc``); traffic to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import grpc
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc

from bench.harness.env import environment
from bench.stress.report import percentile
from bench.stress.server import Server, bearer

CONNECTIONS = 16


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _bare_server(ports: "multiprocessing.Queue", core_limit: bool) -> None:
    """A grpc.aio server whose Retrieve refuses at once (or, under the core limit, holds the one
    call it admits)."""

    class Refusing(memory_pb2_grpc.MemoryServiceServicer):
        async def Retrieve(self, request, context):  # noqa: N802 (the RPC's name)
            if core_limit:
                await asyncio.sleep(3600)
            context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
            context.set_details("saturated")
            return
            yield  # an async generator, as a server-streaming handler is

    async def main() -> None:
        server = grpc.aio.server(maximum_concurrent_rpcs=1 if core_limit else None)
        memory_pb2_grpc.add_MemoryServiceServicer_to_server(Refusing(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        ports.put(port)
        await server.wait_for_termination()

    asyncio.run(main())


async def _bursts(address: str, pid: int, token: str, streams: int, rounds: int, hold: bool) -> dict:
    channels = [grpc.aio.insecure_channel(address) for _ in range(CONNECTIONS)]
    for ch in channels:
        await asyncio.wait_for(ch.channel_ready(), 30)
    stubs = [memory_pb2_grpc.MemoryServiceStub(ch) for ch in channels]
    md = bearer(token)

    async def one(i: int, r: int) -> str:
        try:
            req = pb.RetrieveRequest(text=f"refusal cost probe {r} {i} lantern", top_k=10)
            async for _ in stubs[i % CONNECTIONS].Retrieve(req, metadata=md, timeout=60):
                pass
            return "OK"
        except grpc.aio.AioRpcError as exc:
            return exc.code().name

    held = None
    if hold:  # the call that holds the one slot, in place before the first burst
        held = asyncio.ensure_future(one(-1, -1))
        await asyncio.sleep(0.5)
    per_call, codes = [], Counter()
    for r in range(rounds):
        before = _cpu_seconds(pid)
        got = await asyncio.gather(*(one(i, r) for i in range(streams)))
        await asyncio.sleep(0.3)  # what the server still does for the burst is counted
        per_call.append((_cpu_seconds(pid) - before) / streams)
        codes.update(got)
    if held is not None:
        held.cancel()
    for ch in channels:
        await ch.close()
    return {"us_per_call": [round(x * 1e6) for x in per_call],
            "us_per_call_p50": round(percentile(per_call, 50) * 1e6), "codes": dict(codes)}


def run(streams: int, rounds: int) -> dict:
    out: dict = {"environment": environment(), "streams": streams, "rounds": rounds, "connections": CONNECTIONS}
    work = Path(tempfile.mkdtemp(prefix="teleo-refusal-"))
    srv = Server(work / "data", work, env={"TELEO_LIMITS__MAX_CONCURRENT_RETRIEVES": "1"}, name="refusal")
    try:
        srv.start()
        # a retrieval holds its slot only while it is computed, so no call can hold it for a
        # whole burst: the few admitted ones are counted in the figure
        out["teleo"] = asyncio.run(_bursts(srv.address, srv.pid, srv.token, streams, rounds, hold=False))
    finally:
        srv.stop()
    ctx = multiprocessing.get_context("spawn")
    for name, core_limit in (("aio_handler", False), ("core_limit", True)):
        ports = ctx.Queue()
        proc = ctx.Process(target=_bare_server, args=(ports, core_limit), daemon=True)
        proc.start()
        try:
            port = ports.get(timeout=60)
            out[name] = asyncio.run(_bursts(f"127.0.0.1:{port}", proc.pid, "unused", streams, rounds, hold=core_limit))
        finally:
            proc.kill()
            proc.join(10)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.stress.refusal_cost", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    figures = run(args.streams, args.rounds)
    figures["seconds"] = round(time.monotonic() - t0, 1)
    text = json.dumps(figures, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
