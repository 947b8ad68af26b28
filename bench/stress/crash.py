"""Part 1, crash loop: SIGKILL a real server during concurrent writes; nothing acknowledged may be lost.

Client threads run Store, StoreBatch and Delete against one server process, and two threads add
links to the same few memories at once (Update with ``add_links``: concurrent updates of one
memory); after a seeded random time the process group gets SIGKILL, the server is restarted on
the same data directory, and every acknowledged write is read back with Get (content and
namespace compared), every acknowledged link must be on its memory, a sample is found again by
Retrieve on its exact text, and every acknowledged delete must still answer NOT_FOUND. A write
or delete whose call was cut off by the kill is "uncertain" and not judged.

A last phase looks at deadlines: Stores sent one at a time with deadlines held at the edge of
their latency by a staircase, so many expire while the server commits. For each one that
expired, storing the same content again tells whether the first had been committed anyway (it
answers duplicate); such a memory must then be found by Retrieve on the live server, without a
restart. Everything then goes through one more SIGKILL and read-back.

Halfway through, the server is stopped cleanly once, so that it writes an index snapshot: every
start after a kill from then on reads that snapshot and indexes again the memories the database's
change journal lists as changed since, and the same read-back judges it. From then on the server
also writes checkpoints every few seconds while it serves (``CHECKPOINTS``), each by a forked copy
of itself, so kills land while copies write and starts read the checkpoints.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc
from teleo.v1 import memory_pb2 as pb

from bench.stress.context import Context
from bench.stress.report import Part, percentile
from bench.stress.server import Server, bearer, channel, stub

NAMESPACES = ("crash-a", "crash-b", "crash-c")
# the second half's servers: a checkpoint once 50 memories changed (and a twentieth of those
# indexed), at most every 2 seconds (teleo_server/config.py CheckpointSettings)
CHECKPOINTS = {"TELEO_CHECKPOINT__SHARE": "0.05", "TELEO_CHECKPOINT__MIN_CHANGES": "50",
               "TELEO_CHECKPOINT__SECONDS": "2"}


@dataclass
class Ledger:
    """What the clients were told: acknowledged writes and deletes (shared by the client threads)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    alive: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (namespace, content)
    deleted: set[str] = field(default_factory=set)
    uncertain: set[str] = field(default_factory=set)
    reserved: set[str] = field(default_factory=set)
    links: dict[str, set[str]] = field(default_factory=dict)  # memory id -> targets of acknowledged links
    hubs: list[tuple[str, str]] = field(default_factory=list)  # (id, namespace) the linkers share
    acked_writes: int = 0
    acked_deletes: int = 0
    acked_links: int = 0
    codes: Counter = field(default_factory=Counter)
    lost: list[dict] = field(default_factory=list)

    def ack(self, memory_id: str, ns: str, content: str) -> None:
        with self.lock:
            self.alive[memory_id] = (ns, content)
            self.acked_writes += 1

    def count(self, key: str) -> None:
        with self.lock:
            self.codes[key] += 1

    def reserve(self, rng: random.Random, k: int) -> list[str]:
        with self.lock:
            pool = sorted(set(self.alive) - self.reserved)
            ids = rng.sample(pool, min(k, len(pool))) if pool else []
            self.reserved.update(ids)
            return ids

    def settle(self, ids: list[str], outcome: str) -> None:
        with self.lock:
            self.reserved.difference_update(ids)
            for i in ids:
                self.alive.pop(i, None)
                (self.deleted if outcome == "deleted" else self.uncertain).add(i)
            if outcome == "deleted":
                self.acked_deletes += len(ids)


def _content(prefix: str, rng: random.Random, ctx: Context) -> str:
    return f"{prefix} {ctx.sentence(rng, rng.randint(6, 24))}"


def _storer(address, auth, ledger, stop, rng, ctx, tag):
    with channel(address) as ch:
        _store_loop(stub(ch), auth, ledger, stop, rng, ctx, tag)


def _store_loop(s, auth, ledger, stop, rng, ctx, tag):
    i = 0
    while not stop.is_set():
        i += 1
        ns, content = rng.choice(NAMESPACES), _content(f"{tag} n{i}", rng, ctx)
        try:
            out = s.Store(pb.StoreRequest(memory=pb.MemoryInput(content=content, namespace=ns)), metadata=auth, timeout=10)
            ledger.ack(out.id, ns, content)
        except grpc.RpcError as exc:
            ledger.count(f"Store {exc.code().name}")
            time.sleep(0.02)


def _batcher(address, auth, ledger, stop, rng, ctx, tag):
    with channel(address) as ch:
        _batch_loop(stub(ch), auth, ledger, stop, rng, ctx, tag)


def _batch_loop(s, auth, ledger, stop, rng, ctx, tag):
    b = 0
    while not stop.is_set():
        b += 1
        items = [(rng.choice(NAMESPACES), _content(f"{tag} b{b} i{j}", rng, ctx)) for j in range(rng.randint(4, 16))]
        reqs = [pb.StoreBatchRequest(memory=pb.MemoryInput(content=c, namespace=ns), client_ref=str(j))
                for j, (ns, c) in enumerate(items)]
        try:
            out = s.StoreBatch(iter(reqs), metadata=auth, timeout=20)
        except grpc.RpcError as exc:
            ledger.count(f"StoreBatch {exc.code().name}")
            time.sleep(0.02)
            continue
        for item in out.items:
            if item.error:
                ledger.count(f"StoreBatch item {item.error_code}")
            else:
                ns, content = items[int(item.client_ref)]
                ledger.ack(item.id, ns, content)


def _deleter(address, auth, ledger, stop, rng, ctx, tag):
    with channel(address) as ch:
        _delete_loop(stub(ch), auth, ledger, stop, rng)


def _delete_loop(s, auth, ledger, stop, rng):
    while not stop.is_set():
        time.sleep(rng.uniform(0.1, 0.3))
        ids = ledger.reserve(rng, rng.randint(1, 2))
        if not ids:
            continue
        try:
            out = s.Delete(pb.DeleteRequest(ids=ids), metadata=auth, timeout=10)
        except grpc.RpcError as exc:
            ledger.count(f"Delete {exc.code().name}")
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                # nobody else deletes these: an acknowledged write is gone while the server runs
                with ledger.lock:
                    ledger.lost.append({"where": "Delete while running", "ids": ids, "status": "NOT_FOUND",
                                        "message": exc.details()})
            ledger.settle(ids, "uncertain")
            continue
        if out.deleted != len(ids):
            with ledger.lock:
                ledger.lost.append({"where": "Delete while running", "ids": ids,
                                    "message": f"deleted={out.deleted}, expected {len(ids)}"})
        ledger.settle(ids, "deleted")


# links a shared memory takes before the linkers move on to the next cycle's (the server allows 64)
HUB_LINKS = 48


def _hubs(s, auth, ledger: Ledger, ctx: Context, cycle: int) -> None:
    """Three memories per cycle (one a namespace) that both linkers add links to; never deleted."""
    for ns in NAMESPACES:
        content = f"crash c{cycle} hub {ns} {ctx.sentence(ctx.rng(f'hub{cycle}{ns}'), 8)}"
        out = s.Store(pb.StoreRequest(memory=pb.MemoryInput(content=content, namespace=ns)), metadata=auth, timeout=30)
        ledger.ack(out.id, ns, content)
        with ledger.lock:
            ledger.reserved.add(out.id)  # kept from the deleter
            ledger.hubs.append((out.id, ns))


def _linker(address, auth, ledger, stop, rng, ctx, tag):
    with channel(address) as ch:
        _link_loop(stub(ch), auth, ledger, stop, rng)


def _link_loop(s, auth, ledger, stop, rng):
    while not stop.is_set():
        with ledger.lock:
            hubs = [(h, ns) for h, ns in ledger.hubs[-len(NAMESPACES):] if len(ledger.links.get(h, ())) < HUB_LINKS]
            hub, ns = rng.choice(hubs) if hubs else (None, None)
            pool = [i for i, (n, _) in ledger.alive.items() if n == ns and i != hub and i not in ledger.reserved]
            target = rng.choice(pool) if pool and hub else None
        if target is None:
            time.sleep(0.05)
            continue
        try:
            s.Update(pb.UpdateRequest(id=hub, add_links=[pb.Link(target_id=target, type=pb.LINK_TYPE_RELATES_TO)]),
                     metadata=auth, timeout=10)
        except grpc.RpcError as exc:
            # e.g. INVALID_ARGUMENT when the target was deleted meanwhile
            ledger.count(f"Update {exc.code().name}: {re.sub(r'[0-9a-f]{12,}', '<id>', exc.details() or '')[:70]}")
            time.sleep(0.02)
            continue
        with ledger.lock:
            ledger.links.setdefault(hub, set()).add(target)
            ledger.acked_links += 1


def _verify(srv: Server, ledger: Ledger, rng: random.Random, sample: int, part: Part, cycle: int) -> dict:
    """Read back everything acknowledged; returns this restart's counts."""
    with channel(srv.address) as ch:
        return _read_back(stub(ch), bearer(srv.token), ledger, rng, sample, part, cycle)


def _read_back(s, auth, ledger: Ledger, rng: random.Random, sample: int, part: Part, cycle: int) -> dict:
    with ledger.lock:
        alive = dict(ledger.alive)
        deleted = sorted(ledger.deleted)
        links = {k: set(v) for k, v in ledger.links.items()}
    ids = sorted(alive)
    links_lost = 0
    missing: list[str] = []
    wrong: list[str] = []
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        try:
            got = s.Get(pb.GetRequest(ids=chunk), metadata=auth, timeout=60).memories
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
            got = []
            for i in chunk:  # find which ones
                try:
                    got += s.Get(pb.GetRequest(ids=[i]), metadata=auth, timeout=30).memories
                except grpc.RpcError as one:
                    if one.code() != grpc.StatusCode.NOT_FOUND:
                        raise
                    missing.append(i)
        for m in got:
            if (m.input.namespace, m.input.content) != alive[m.id]:
                wrong.append(m.id)
        for m in got:
            have = {lk.target_id for lk in m.input.links}
            for target in sorted(links.get(m.id, set()) - have):
                links_lost += 1
                part.example(kind="acknowledged link lost", restart=cycle, method="Get", id=m.id, target=target)
    for i in missing + wrong:
        ns, content = alive[i]
        part.example(kind="acknowledged write lost" if i in missing else "acknowledged write changed",
                     restart=cycle, method="Get", id=i, namespace=ns, content=content[:80])

    def still_deleted(i: str) -> bool:
        try:
            s.Get(pb.GetRequest(ids=[i]), metadata=auth, timeout=30)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return True
            raise
        return False

    with ThreadPoolExecutor(4) as ex:
        back = [i for i, ok in zip(deleted, ex.map(still_deleted, deleted)) if not ok]
    for i in back:
        part.example(kind="acknowledged delete undone", restart=cycle, method="Get", id=i)

    misses = 0
    for i in rng.sample(ids, min(sample, len(ids))) if ids else []:
        if i in missing:
            continue
        ns, content = alive[i]
        req = pb.RetrieveRequest(text=content, top_k=10, filters=pb.RetrieveFilters(namespaces=[ns]))
        found = [e.result.memory.id for e in s.Retrieve(req, metadata=auth, timeout=60) if e.WhichOneof("event") == "result"]
        if i not in found:
            misses += 1
            part.example(kind="acknowledged write not found by Retrieve on its exact text", restart=cycle,
                         method="Retrieve", id=i, namespace=ns, query=content[:80], returned=len(found))
    return {"restarts": 1, "checked": len(ids), "lost": len(missing) + len(wrong), "deletes_checked": len(deleted),
            "undone": len(back), "retrieve_checked": min(sample, len(ids)), "retrieve_missed": misses,
            "links_checked": sum(len(v) for v in links.values()), "links_lost": links_lost}


def _traffic(srv: Server, ledger: Ledger, ctx: Context, cycle: int, seconds: float) -> None:
    auth = bearer(srv.token)
    stop = threading.Event()
    with channel(srv.address) as ch:
        _hubs(stub(ch), auth, ledger, ctx, cycle)
    workers = [(_storer, "s0"), (_storer, "s1"), (_batcher, "b0"), (_deleter, "d0"), (_linker, "l0"), (_linker, "l1")]
    threads = [threading.Thread(target=fn, args=(srv.address, auth, ledger, stop, ctx.rng(f"crash{cycle}{tag}"), ctx,
                                                 f"crash c{cycle} {tag}"), daemon=True)
               for fn, tag in workers]
    for t in threads:
        t.start()
    time.sleep(seconds)
    srv.kill()  # SIGKILL to the process group, mid-traffic
    stop.set()
    for t in threads:
        t.join(30)


def _deadline_phase(srv: Server, ledger: Ledger, ctx: Context, part: Part) -> dict:
    """Stores whose deadline expires while they run; those committed anyway must be retrievable."""
    with channel(srv.address) as ch:
        return _expire(stub(ch), bearer(srv.token), ledger, ctx, part)


def _expire(s, auth, ledger: Ledger, ctx: Context, part: Part) -> dict:
    expired: list[tuple[str, str, float]] = []
    acked = 0
    n = ctx.pick(120, 40)

    def store(tag: str, timeout: float) -> tuple[str, str, float, object]:
        r = ctx.rng(f"crash-deadline-{tag}")
        ns, content = r.choice(NAMESPACES), _content(f"crash deadline {tag}", r, ctx) + " " + ctx.sentence(r, 60)
        t0 = time.perf_counter()
        try:
            out = s.Store(pb.StoreRequest(memory=pb.MemoryInput(content=content, namespace=ns)), metadata=auth, timeout=timeout)
        except grpc.RpcError as exc:
            out = exc
        return ns, content, time.perf_counter() - t0, out

    # One Store at a time, so its latency is steady: the commit (and the index update after it) is
    # its last few milliseconds. A staircase keeps the deadline at the edge: longer after a call
    # expired, shorter after one completed, so many deadlines expire just as the server commits.
    took = []
    for k in range(10):
        ns, content, t, out = store(f"probe{k}", 60)
        took.append(t)
        ledger.ack(out.id, ns, content)
    typical = first = percentile(took, 50) or 0.05
    r = ctx.rng("crash-deadline-steps")
    for k in range(n):
        deadline = typical * r.uniform(0.9, 1.1)
        ns, content, _, out = store(f"d{k}", deadline)
        if isinstance(out, grpc.RpcError):
            typical *= 1.04
            if out.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                expired.append((ns, content, deadline))
        else:
            typical *= 0.96
            ledger.ack(out.id, ns, content)
            acked += 1
    time.sleep(1.0)  # whatever the server still does for the expired calls
    committed = not_indexed = 0
    for ns, content, deadline in expired:
        out = s.Store(pb.StoreRequest(memory=pb.MemoryInput(content=content, namespace=ns)), metadata=auth, timeout=60)
        ledger.ack(out.id, ns, content)
        if not out.duplicate:
            continue  # the expired call had not committed: nothing to find
        committed += 1
        req = pb.RetrieveRequest(text=content, top_k=10, filters=pb.RetrieveFilters(namespaces=[ns]))
        found = [e.result.memory.id for e in s.Retrieve(req, metadata=auth, timeout=60) if e.WhichOneof("event") == "result"]
        if out.id not in found:
            not_indexed += 1
            part.example(kind="store committed as its deadline expired, not retrievable", method="Store",
                         deadline_ms=deadline * 1e3, id=out.id, namespace=ns, query=content[:80],
                         note="re-Store answered duplicate=true (committed); Retrieve on the exact text missed it")
    return {"typical_store_ms": round(first * 1e3, 1), "final_deadline_ms": round(typical * 1e3, 1), "sent": n, "acknowledged": acked, "deadline_exceeded": len(expired),
            "committed_anyway": committed, "committed_not_retrievable": not_indexed}


def _log_count(srv: Server, needle: str) -> int:
    """Lines of the server's log (every start's) that hold ``needle``."""
    try:
        return sum(needle in line for line in srv.log_path.read_text(errors="replace").splitlines())
    except OSError:
        return 0


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def run(ctx: Context) -> Part:
    part = Part("crash_loop", "1. crash loop")
    kills = ctx.pick(20, 4)
    low, high = ctx.pick((1.0, 4.0), (0.6, 2.0))
    sample = ctx.pick(8, 4)
    rng = ctx.rng("crash")
    srv = Server(ctx.dir("crash") / "data", ctx.dir("crash"), name="crash")
    ledger = Ledger()
    totals = Counter()
    part.figures["kills_planned"] = kills
    done = 0
    deadline: dict = {}
    try:
        srv.start()
        for cycle in range(1, kills + 1):
            if cycle == kills // 2 + 1:
                # a clean stop halfway: it writes an index snapshot, and each start after a kill
                # from here on reads it and indexes again what the database's change journal
                # lists since, instead of rebuilding (teleo_server/snapshot.py)
                srv.stop()
                srv.env.update(CHECKPOINTS)
                srv.start()
                totals.update(_verify(srv, ledger, rng, sample, part, cycle))
            _traffic(srv, ledger, ctx, cycle, rng.uniform(low, high))
            done += 1
            srv.start()
            totals.update(_verify(srv, ledger, rng, sample, part, cycle))
        deadline = _deadline_phase(srv, ledger, ctx, part)
        srv.kill()
        srv.start()
        totals.update(_verify(srv, ledger, rng, sample, part, kills + 1))
    except Exception as exc:  # the part stops; what it measured so far is kept
        part.error = f"{type(exc).__name__}: {exc}"
    finally:
        srv.stop()
    lost = totals["lost"] + len(ledger.lost)
    for item in ledger.lost:
        part.example(kind="acknowledged write missing while running", **item)
    part.figures.update({
        "kills": done,
        "restarts_verified": totals["restarts"],
        "acknowledged_writes": ledger.acked_writes,
        "acknowledged_deletes": ledger.acked_deletes,
        "acknowledged_links": ledger.acked_links,
        "link_checks": totals["links_checked"],
        "links_lost": totals["links_lost"],
        "uncertain_deletes": len(ledger.uncertain),
        "get_checks": totals["checked"],
        "deleted_checks": totals["deletes_checked"],
        "lost": lost,
        "deletes_undone": totals["undone"],
        "retrieve_sample_checked": totals["retrieve_checked"],
        "retrieve_sample_missed": totals["retrieve_missed"],
        # starts that read the snapshot of the clean stop (and the journal since), of all starts
        "starts_from_snapshot": _log_count(srv, '"source": "snapshot"'),
        # the second half's checkpoints: copies forked, and snapshots they wrote (a kill ends the
        # copy that was writing)
        "checkpoints_forked": _log_count(srv, "index.checkpoint_forked"),
        "checkpoints_written": _log_count(srv, '"reason": "checkpoint'),
        "starts": len(srv.starts),
        "restart_s_p50": _round(percentile(srv.starts[1:], 50)),
        "restart_s_max": _round(max(srv.starts[1:], default=None)),
        "client_errors_during_traffic": dict(sorted(ledger.codes.items())),
        "deadline_phase": deadline,
    })
    complete = done == kills and not part.error
    part.target("writes_lost", f"0 acknowledged writes lost over {kills} SIGKILL restarts (Get)",
                f"{lost} of {ledger.acked_writes}", (lost == 0) if complete else (False if lost else None),
                "" if complete else f"only {done} of {kills} kills ran")
    part.target("links_lost", "0 acknowledged links lost (two clients adding links to the same memories at once)",
                f"{totals['links_lost']} of {ledger.acked_links}",
                (totals["links_lost"] == 0) if complete and ledger.acked_links else
                (False if totals["links_lost"] else None))
    part.target("deletes_undone", "0 acknowledged deletes undone",
                f"{totals['undone']} of {ledger.acked_deletes}",
                (totals["undone"] == 0) if complete else (False if totals["undone"] else None))
    part.target("retrieve_missed", "0 acknowledged writes missed by Retrieve on their exact text (sample)",
                f"{totals['retrieve_missed']} of {totals['retrieve_checked']}",
                (totals["retrieve_missed"] == 0) if complete and totals["retrieve_checked"] else
                (False if totals["retrieve_missed"] else None))
    committed = deadline.get("committed_anyway", 0)
    part.target("deadline_commits_indexed", "0 writes committed as their deadline expired missing from Retrieve",
                f"{deadline.get('committed_not_retrievable', 0)} of {committed}" if deadline else None,
                (deadline["committed_not_retrievable"] == 0) if committed else None,
                "" if committed else "no expired Store had committed, so this could not be observed")
    return part
