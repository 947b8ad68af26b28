"""Request material for the fuzzer: valid requests, extreme values, hand-picked edge cases, credentials."""

from __future__ import annotations

import random
import secrets
import string
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.protobuf import descriptor as d
from google.protobuf.message import Message
from teleo.v1 import memory_pb2 as pb

from bench.stress.context import WORDS
from bench.stress.server import Server, bearer, channel, health, stub

EARLIEST, LATEST = -62_135_596_800, 253_402_300_799
NAN, INF = float("nan"), float("inf")

FLOATS = (NAN, INF, -INF, -0.0, 0.0, 1.0, 1.0000001, -1.0, 0.5, 2.0, 10.0, 10.000001, 1e-45, -1e-45,
          3.4028235e38, -3.4028235e38, 1e-6)
INT32 = (0, 1, -1, 2, 5, 100, 384, 1000, 1001, 4096, 4097, 100_000, 100_001, 2**31 - 1, -(2**31))
INT64 = (0, -1, EARLIEST - 1, EARLIEST, LATEST, LATEST + 1, 2**63 - 1, -(2**63), 10**12, -(10**11), 1_700_000_000)
ENUMS = (0, 1, 2, 3, 4, 5, 6, -1, 99, 2**31 - 1, -(2**31))
ODD = ("", " ", "\t\n", "\x00", "a", "default", "名前空間", "🧠🔥" * 10, "Z̴̡̛a̷l̶g̵o̶ t̷e̵x̸t̴", "\u202eevil\u202c",
       "\ufeffbom", "line\u2028sep", "\uffff", "\U0010ffff", "e\u0301\u0301\u0301", "../../etc/passwd",
       "' OR 1=1 --", "%s%n%x", '{"a": [1, {"b": null}]}', "ns:team.a-b_c", "*", "team*")
LONG = (129, 257, 513, 4097, 8192, 8193, 65536, 65537)


def long_string(n: int, rng: random.Random) -> str:
    unit = rng.choice(("x", "€", "🧠", "a b "))
    size = len(unit.encode())
    return (unit * (n // size + 1)).encode()[: n - n % size].decode()


@dataclass
class Pools:
    ids: list[str]
    model_version: str
    token: str
    scoped: str = ""
    revoked: str = ""
    namespaces: list[str] = field(default_factory=lambda: ["fuzz", "fuzz-b", "fuzz-scoped"])
    cursor: str = ""                                   # a List cursor the server issued
    exported: list[pb.ExportedMemory] = field(default_factory=list)  # with their vectors

# Imports land here and DeleteWhere deletes only here: the pools' memories (fuzz, fuzz-b) stay.
SPARE = "fuzz-spare"
UPDATABLE = ("content", "namespace", "access_level", "memory_type", "source", "confidence", "importance",
             "event_time", "session_id", "session_position", "links", "metadata", "evergreen")


def setup(srv: Server, work: Path, create_cli, revoke_cli) -> Pools:
    """Memories to point ids at, the model version, a scoped and a revoked token (both through the CLI)."""
    rng = random.Random(7)
    auth = bearer(srv.token)
    with channel(srv.address) as ch:
        s = stub(ch)
        reqs = [pb.StoreBatchRequest(memory=pb.MemoryInput(content=" ".join(rng.choice(WORDS) for _ in range(10)),
                                                           namespace=rng.choice(("fuzz", "fuzz-b"))))
                for _ in range(40)]
        ids = [i.id for i in s.StoreBatch(iter(reqs), metadata=auth, timeout=120).items if i.id]
        version = s.Stats(pb.StatsRequest(), metadata=auth, timeout=30).model_version
        cursor = s.List(pb.ListRequest(page_size=1), metadata=auth, timeout=30).next_cursor
        exported = list(s.Export(pb.ExportRequest(filters=pb.RetrieveFilters(namespaces=["fuzz"]), with_embeddings=True),
                                 metadata=auth, timeout=120))[:4]
    _, scoped = create_cli(srv.data_dir, "fuzz-scoped", ["fuzz-scoped"], ["fuzz-scoped"], 1, "fuzz-scoped")
    revoked_id, revoked = create_cli(srv.data_dir, "fuzz-revoked", ["*"], ["*"], 4, "fuzz")
    revoke_cli(srv.data_dir, revoked_id)
    return Pools(ids=ids, model_version=version, token=srv.token, scoped=scoped, revoked=revoked, cursor=cursor,
                 exported=exported)


def still_serving(srv: Server) -> bool:
    if health(srv.address) != "SERVING":
        return False
    auth = bearer(srv.token)
    try:
        with channel(srv.address) as ch:
            s = stub(ch)
            out = s.Store(pb.StoreRequest(memory=pb.MemoryInput(content="fuzz survivor check", namespace="fuzz")),
                          metadata=auth, timeout=60)
            events = list(s.Retrieve(pb.RetrieveRequest(text="fuzz survivor check", top_k=3), metadata=auth, timeout=60))
    except grpc.RpcError:
        return False
    return any(e.WhichOneof("event") == "result" and e.result.memory.id == out.id for e in events)


# -- valid requests --------------------------------------------------------------------------------


def _sentence(rng: random.Random, n: int = 8) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _id(rng: random.Random, pools: Pools) -> str:
    return rng.choice(pools.ids) if pools.ids and rng.random() < 0.8 else secrets.token_hex(16)


def valid(method: str, rng: random.Random, pools: Pools, cheap: bool = False) -> Message | list[Message]:
    if method == "Store":
        return pb.StoreRequest(memory=pb.MemoryInput(content=_sentence(rng), namespace=rng.choice(pools.namespaces[:2]),
                                                     confidence=rng.random(), session_id="s1", session_position=rng.randint(0, 9)))
    if method == "StoreBatch":
        return [pb.StoreBatchRequest(memory=pb.MemoryInput(content=_sentence(rng), namespace="fuzz"), client_ref=str(i))
                for i in range(rng.randint(1, 3))]
    if method == "Get":
        return pb.GetRequest(ids=[_id(rng, pools) for _ in range(rng.randint(1, 3))])
    if method == "Delete":
        return pb.DeleteRequest(ids=[secrets.token_hex(16) if cheap or rng.random() < 0.9 else _id(rng, pools)])
    if method == "Retrieve":
        req = pb.RetrieveRequest(text=_sentence(rng, rng.randint(1, 6)), top_k=rng.randint(1, 20),
                                 profile=rng.choice(("", "teleological", "hybrid", "entry_point", "single_space:E6_lexical")),
                                 explain=rng.random() < 0.5, include_breakdown=rng.random() < 0.5)
        if rng.random() < 0.3:
            req.filters.namespaces.append("fuzz")
        return req
    if method == "Compare":
        return pb.CompareRequest(id_a=_id(rng, pools), id_b=_id(rng, pools), aggregation=rng.randint(0, 5))
    if method == "Feedback":
        req = pb.FeedbackRequest(id=_id(rng, pools), used=rng.random() < 0.5)
        if rng.random() < 0.5:
            req.helpful = rng.random() < 0.5
        return req
    if method == "Update":
        names = rng.sample(("importance", "confidence", "metadata", "evergreen", "source", "content"), rng.randint(1, 2))
        mem = pb.MemoryInput(content=_sentence(rng), importance=rng.random(), confidence=rng.random(), source="fuzz",
                             metadata={"k": str(rng.randint(0, 9))}, evergreen=rng.random() < 0.5)
        return pb.UpdateRequest(id=_id(rng, pools), memory=mem, fields=names, keep_previous=rng.random() < 0.1)
    if method == "List":
        req = pb.ListRequest(page_size=rng.randint(1, 20), cursor=pools.cursor if rng.random() < 0.3 else "")
        if rng.random() < 0.7:
            req.filters.namespaces.extend(rng.sample(pools.namespaces[:2] + [SPARE], rng.randint(1, 2)))
        if rng.random() < 0.2:
            req.filters.session_id = "s1"
        return req
    if method == "DeleteWhere":
        # only the spare namespace: a mutation may clear dry_run or drop a filter
        req = pb.DeleteWhereRequest(filters=pb.RetrieveFilters(namespaces=[SPARE]), dry_run=cheap or rng.random() < 0.8)
        if rng.random() < 0.3:
            req.filters.memory_types.append(rng.randint(1, 5))
        return req
    if method == "Export":
        # small: the spare namespace, or a session that matches few memories of the pools
        req = pb.ExportRequest(with_embeddings=rng.random() < 0.3)
        req.filters.namespaces.append(SPARE)
        if rng.random() < 0.4:
            req.filters.namespaces.append(rng.choice(pools.namespaces[:2]))
            req.filters.session_id = f"s{rng.randint(2, 9)}"
        return req
    if method == "Import":
        out = []
        for i in range(1 if cheap else rng.randint(1, 3)):
            item = pb.ExportedMemory()
            if pools.exported and rng.random() < 0.5:  # carries its vectors: stored without re-embedding
                item.CopyFrom(rng.choice(pools.exported))
            else:
                item.memory.id = secrets.token_hex(16)
                item.memory.model_version = pools.model_version
                item.memory.input.content = _sentence(rng)
            item.memory.input.namespace = SPARE
            out.append(pb.ImportRequest(item=item))
        return out
    return pb.StatsRequest(namespaces=rng.sample(pools.namespaces, rng.randint(0, 2)))


# -- extreme values, by reflection -----------------------------------------------------------------


def _string(rng: random.Random, f: d.FieldDescriptor, pools: Pools) -> str:
    if f.name in ("id", "ids", "id_a", "id_b", "target_id") and rng.random() < 0.4:
        return _id(rng, pools)
    if f.name == "model_version" and rng.random() < 0.5:
        return pools.model_version
    r = rng.random()
    if r < 0.08:
        return long_string(rng.choice(LONG), rng)
    if r < 0.6:
        return rng.choice(ODD)
    return _sentence(rng, rng.randint(1, 5))


def _scalar(rng: random.Random, f: d.FieldDescriptor, pools: Pools):
    t = f.type
    if t == d.FieldDescriptor.TYPE_STRING:
        return _string(rng, f, pools)
    if t in (d.FieldDescriptor.TYPE_FLOAT, d.FieldDescriptor.TYPE_DOUBLE):
        return rng.choice(FLOATS)
    if t == d.FieldDescriptor.TYPE_INT64:
        return rng.choice(INT64)
    if t == d.FieldDescriptor.TYPE_INT32:
        return rng.choice(INT32)
    if t == d.FieldDescriptor.TYPE_ENUM:
        return rng.choice(ENUMS)
    if t == d.FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    return None


def randomize(msg: Message, rng: random.Random, pools: Pools, notes: list[str], depth: int = 0, prefix: str = "") -> Message:
    """Set a random subset of ``msg``'s fields to extreme values; ``notes`` gets one entry per field set."""
    for f in msg.DESCRIPTOR.fields:
        if rng.random() < 0.5:
            continue
        name = prefix + f.name
        try:
            if f.message_type is not None and f.message_type.GetOptions().map_entry:
                n = rng.choice((0, 1, 3, 65)) if rng.random() < 0.9 else 1000
                kf, vf = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
                target = getattr(msg, f.name)
                for _ in range(n):
                    target[_scalar(rng, kf, pools)] = _scalar(rng, vf, pools)
                notes.append(f"{name}={{{n} entries}}")
            elif f.label == d.FieldDescriptor.LABEL_REPEATED:
                n = rng.choice((0, 1, 2, 5)) if rng.random() < 0.95 else rng.choice((65, 1001))
                target = getattr(msg, f.name)
                for _ in range(n):
                    if f.message_type is not None:
                        randomize(target.add(), rng, pools, [], depth + 1, name + "[].") if depth < 3 else target.add()
                    else:
                        target.append(_scalar(rng, f, pools))
                notes.append(f"{name}=[{n} items]")
            elif f.message_type is not None:
                if depth < 3:
                    randomize(getattr(msg, f.name), rng, pools, notes, depth + 1, name + ".")
                getattr(msg, f.name).SetInParent()
            else:
                value = _scalar(rng, f, pools)
                setattr(msg, f.name, value)
                notes.append(f"{name}={_show(value)}")
        except (ValueError, TypeError, OverflowError):
            continue
    return msg


def _show(v) -> str:
    if isinstance(v, str):
        return repr(v[:24]) + (f"..({len(v.encode())} B)" if len(v) > 24 else "")
    return repr(v)


def extreme(method: str, rng: random.Random, pools: Pools) -> tuple[Message | list[Message], str]:
    notes: list[str] = []
    if method in ("StoreBatch", "Import"):
        cls = pb.StoreBatchRequest if method == "StoreBatch" else pb.ImportRequest
        items = [randomize(cls(), rng, pools, notes, prefix=f"[{i}].") for i in range(rng.randint(1, 4))]
        if method == "Import":
            for it in items:
                if pools.exported and rng.random() < 0.3:  # real vectors under random values elsewhere
                    it.item.chunks.extend(rng.choice(pools.exported).chunks)
        return items, "random extremes: " + ", ".join(notes)[:300]
    cls = {"Store": pb.StoreRequest, "Get": pb.GetRequest, "Delete": pb.DeleteRequest, "Retrieve": pb.RetrieveRequest,
           "Compare": pb.CompareRequest, "Feedback": pb.FeedbackRequest, "Stats": pb.StatsRequest,
           "Update": pb.UpdateRequest, "List": pb.ListRequest, "DeleteWhere": pb.DeleteWhereRequest,
           "Export": pb.ExportRequest}[method]
    msg = randomize(cls(), rng, pools, notes)
    if method == "Delete" and rng.random() < 0.9:
        del msg.ids[:]  # keep the seeded memories for the other cases
        msg.ids.append(secrets.token_hex(16))
    if method == "Update" and rng.random() < 0.6:  # field names the server knows, so the values are checked
        del msg.fields[:]
        msg.fields.extend(rng.sample(UPDATABLE, rng.randint(1, 4)))
        notes.append(f"fields={list(msg.fields)}")
    if method == "List" and rng.random() < 0.3:
        msg.cursor = pools.cursor
    if method == "DeleteWhere" and not msg.dry_run:
        kept = [n for n in msg.filters.namespaces if n not in pools.namespaces]
        del msg.filters.namespaces[:]
        msg.filters.namespaces.extend(kept)
    if method == "Export" and msg.with_embeddings and rng.random() < 0.8:  # keep it cheap
        msg.filters.namespaces.append(SPARE)
    return msg, "random extremes: " + (", ".join(notes)[:300] or "empty message")


# -- hand-picked edge cases ------------------------------------------------------------------------


def _mem(**kw) -> pb.MemoryInput:
    base = {"content": "edge case memory", "namespace": "fuzz"}
    base.update(kw)
    return pb.MemoryInput(**base)


def _ts(seconds: int, nanos: int = 0):
    from google.protobuf.timestamp_pb2 import Timestamp

    t = Timestamp()
    t.seconds, t.nanos = seconds, nanos
    return t


def fixed(pools: Pools):
    """(method, message or list, description) for every hand-picked edge case."""
    out: list[tuple[str, object, str]] = []
    a, b = (pools.ids + ["x", "y"])[:2]

    def store(what: str, **kw) -> None:
        out.append(("Store", pb.StoreRequest(memory=_mem(**kw)), f"Store {what}"))

    for name in ("confidence", "importance"):
        for v in (NAN, INF, -INF, -0.0, 1.0000001, -1e-45, 3.4028235e38):
            store(f"memory.{name}={v!r}", **{name: v})
    for secs, nanos in ((2**63 - 1, 0), (-(2**63), 0), (EARLIEST - 1, 0), (LATEST + 1, 0), (LATEST, 999_999_999),
                        (EARLIEST, 0), (0, -1), (0, 1_000_000_000), (0, 2**31 - 1)):
        store(f"memory.event_time=({secs}, {nanos})", event_time=_ts(secs, nanos))
    for v in (-1, -(2**31), 2**31 - 1):
        store(f"memory.session_position={v}", session_position=v)
    for v in (5, -1, 2**31 - 1):
        store(f"memory.access_level={v}", access_level=v)
        store(f"memory.memory_type={v}", memory_type=v)
    for what, content in (("empty", ""), ("whitespace", " \t\n "), ("NUL", "\x00"), ("64 KiB exactly", "x" * 65536),
                          ("64 KiB + 1", "x" * 65537), ("21846 euro signs (65538 B)", "€" * 21846),
                          ("1 MiB", "y" * (1 << 20)), ("15 MiB", "z" * (15 << 20)), ("17 MiB", "z" * (17 << 20)),
                          ("odd unicode", " ".join(ODD[6:16]))):
        store(f"memory.content {what}", content=content)
    for what, ns in (("empty", ""), ("129 chars", "n" * 129), ("space", "a b"), ("slash", "ns/../x"),
                     ("unicode", "名前"), ("star", "*"), ("unreadable for the scoped token", "fuzz-scoped")):
        store(f"memory.namespace {what}", namespace=ns)
    store("memory.source 513 chars", source="s" * 513)
    store("memory.session_id 257 chars", session_id="s" * 257)
    store("65 links", links=[pb.Link(target_id=a, type=1)] * 65)
    for what, link in (("type 0", pb.Link(target_id=a)), ("type 99", pb.Link(target_id=a, type=99)),
                       ("weight nan", pb.Link(target_id=a, type=1, weight=NAN)), ("weight -1", pb.Link(target_id=a, type=1, weight=-1)),
                       ("empty target", pb.Link(type=1)), ("129-char target", pb.Link(target_id="t" * 129, type=1))):
        store(f"link {what}", links=[link])
    for what, md in (("65 entries", {f"k{i}": "v" for i in range(65)}), ("empty key", {"": "v"}),
                     ("129-char key", {"k" * 129: "v"}), ("4097-byte value", {"k": "v" * 4097}),
                     ("1366 euro signs (4098 B)", {"k": "€" * 1366}), ("unicode key", {"🔑": "v"})):
        store(f"memory.metadata {what}", metadata=md)
    out.append(("Store", pb.StoreRequest(), "Store without memory"))

    def retrieve(what: str, **kw) -> None:
        kw.setdefault("text", "harbor lantern")
        out.append(("Retrieve", pb.RetrieveRequest(**kw), f"Retrieve {what}"))

    for what, text in (("empty", ""), ("8192 B", "q" * 8192), ("8193 B", "q" * 8193), ("NUL", "\x00"),
                       ("odd unicode", " ".join(ODD[6:16])), ("1 MiB", "q" * (1 << 20))):
        retrieve(f"text {what}", text=text)
    out.append(("Retrieve", pb.RetrieveRequest(), "Retrieve with neither text nor vectors"))
    dim = 384
    for what, vec in (("empty dense", pb.QueryVectors(model_version=pools.model_version)),
                      ("NaN dense", pb.QueryVectors(dense=[NAN] * dim, model_version=pools.model_version)),
                      ("inf dense", pb.QueryVectors(dense=[INF] * dim, model_version=pools.model_version)),
                      ("3.4e38 dense", pb.QueryVectors(dense=[3.4e38] * dim, model_version=pools.model_version)),
                      ("zero dense", pb.QueryVectors(dense=[0.0] * dim, model_version=pools.model_version)),
                      ("383 dims", pb.QueryVectors(dense=[0.05] * 383, model_version=pools.model_version)),
                      ("385 dims", pb.QueryVectors(dense=[0.05] * 385, model_version=pools.model_version)),
                      ("100000 dims", pb.QueryVectors(dense=[0.05] * 100_000, model_version=pools.model_version)),
                      ("sparse id -1", pb.QueryVectors(dense=[0.05] * dim, sparse_ids=[-1], sparse_weights=[1], model_version=pools.model_version)),
                      ("sparse id 2^31-1", pb.QueryVectors(dense=[0.05] * dim, sparse_ids=[2**31 - 1], sparse_weights=[1], model_version=pools.model_version)),
                      ("sparse id 30522", pb.QueryVectors(dense=[0.05] * dim, sparse_ids=[30522], sparse_weights=[1], model_version=pools.model_version)),
                      ("sparse lengths differ", pb.QueryVectors(dense=[0.05] * dim, sparse_ids=[1, 2], sparse_weights=[1], model_version=pools.model_version)),
                      ("sparse weight -1", pb.QueryVectors(dense=[0.05] * dim, sparse_ids=[5], sparse_weights=[-1], model_version=pools.model_version)),
                      ("sparse weight nan", pb.QueryVectors(dense=[0.05] * dim, sparse_ids=[5], sparse_weights=[NAN], model_version=pools.model_version)),
                      ("100000 repeated sparse ids", pb.QueryVectors(dense=[0.05] * dim, sparse_ids=[7] * 100_000, sparse_weights=[1] * 100_000, model_version=pools.model_version)),
                      ("wrong model version", pb.QueryVectors(dense=[0.05] * dim, model_version="other")),
                      ("empty model version", pb.QueryVectors(dense=[0.05] * dim))):
        out.append(("Retrieve", pb.RetrieveRequest(vectors=vec, explain=True, include_breakdown=True), f"Retrieve vectors: {what}"))
    for v in (-1, 1001, 2**31 - 1, -(2**31)):
        retrieve(f"top_k={v}", top_k=v)
    for p in ("single_space:", "single_space:E1_semantic", "single_space:nope", "single_space:E12_late_interaction",
              "p" * 1024, "TELEOLOGICAL"):
        retrieve(f"profile={p[:40]!r}", profile=p)
    for what, f in (("invalid namespace", pb.RetrieveFilters(namespaces=["a b"])),
                    ("1000 namespaces", pb.RetrieveFilters(namespaces=[f"ns{i}" for i in range(1000)])),
                    ("memory_types [0]", pb.RetrieveFilters(memory_types=[0])),
                    ("memory_types [99]", pb.RetrieveFilters(memory_types=[99])),
                    ("start after end", pb.RetrieveFilters(event_time=pb.TimeRange(start=_ts(10), end=_ts(5)))),
                    ("start == end", pb.RetrieveFilters(event_time=pb.TimeRange(start=_ts(10), end=_ts(10)))),
                    ("end past 9999", pb.RetrieveFilters(event_time=pb.TimeRange(end=_ts(LATEST + 1)))),
                    ("start nanos -1", pb.RetrieveFilters(event_time=pb.TimeRange(start=_ts(0, -1)))),
                    ("min_confidence nan", pb.RetrieveFilters(min_confidence=NAN)),
                    ("min_confidence 2", pb.RetrieveFilters(min_confidence=2)),
                    ("65 metadata pairs", pb.RetrieveFilters(metadata={f"k{i}": "v" for i in range(65)})),
                    ("session 10 KiB", pb.RetrieveFilters(session_id="s" * 10240))):
        retrieve(f"filters {what}", filters=f)
    retrieve("target_goals 257 chars", target_goals=["g" * 257])
    retrieve("1000 target_goals", target_goals=[f"goal {i}" for i in range(1000)])
    retrieve("target_goals odd unicode", target_goals=list(ODD))
    for v in ([0], [5], [-1], [1, 2, 3, 4] * 50):
        retrieve(f"johari={v[:5]}", johari=v)
    for what, o in (("sparse_weight nan", pb.StageOverrides(sparse_weight=NAN)),
                    ("max_candidates 0", pb.StageOverrides(max_candidates=0)),
                    ("max_candidates 100001", pb.StageOverrides(max_candidates=100_001)),
                    ("max_candidates 100000", pb.StageOverrides(max_candidates=100_000)),
                    ("dense_dimension -1", pb.StageOverrides(dense_dimension=-1)),
                    ("dense_dimension 1", pb.StageOverrides(dense_dimension=1)),
                    ("dense_dimension 7", pb.StageOverrides(dense_dimension=7)),
                    ("dense_dimension 383", pb.StageOverrides(dense_dimension=383)),
                    ("dense_dimension 385", pb.StageOverrides(dense_dimension=385)),
                    ("dense_dimension 4096", pb.StageOverrides(dense_dimension=4096)),
                    ("dense_dimension 4097", pb.StageOverrides(dense_dimension=4097)),
                    ("fusion bogus", pb.StageOverrides(fusion="bogus")),
                    ("fusion empty", pb.StageOverrides(fusion="")),
                    ("rrf_k 0", pb.StageOverrides(rrf_k=0)), ("rrf_k 1e-7", pb.StageOverrides(rrf_k=1e-7)),
                    ("rrf_k inf", pb.StageOverrides(rrf_k=INF)),
                    ("decay -1", pb.StageOverrides(decay_half_life_days=-1)),
                    ("decay 1e-30", pb.StageOverrides(decay_half_life_days=1e-30)),
                    ("mmr_lambda 0", pb.StageOverrides(mmr_lambda=0)), ("mmr_lambda 2", pb.StageOverrides(mmr_lambda=2)),
                    ("min_score 1", pb.StageOverrides(min_score=1)),
                    ("misalignment 1 + filter", pb.StageOverrides(misalignment_threshold=1, filter_misaligned=True)),
                    ("space weight nan", pb.StageOverrides(space_weights={"E1_semantic": NAN})),
                    ("space weight 11", pb.StageOverrides(space_weights={"E1_semantic": 11})),
                    ("unknown space weight", pb.StageOverrides(space_weights={"nope": 1})),
                    ("all space weights 0", pb.StageOverrides(space_weights={s: 0 for s in ("E1_semantic", "E6_lexical", "E13_splade", "E9_hdc")})),
                    ("disable finalize", pb.StageOverrides(disable_stages=["finalize"])),
                    ("disable unknown stage", pb.StageOverrides(disable_stages=["everything"])),
                    ("disable every stage", pb.StageOverrides(disable_stages=["sparse_recall", "dense", "fusion", "alignment", "late_interaction", "finalize"])),
                    ("1000 disabled stages", pb.StageOverrides(disable_stages=["x" * 100] * 1000))):
        retrieve(f"overrides {what}", overrides=o, top_k=50, explain=True, include_breakdown=True)

    for method, cls in (("Get", pb.GetRequest), ("Delete", pb.DeleteRequest)):
        for what, ids in (("no ids", []), ("empty id", [""]), ("1001 ids", [f"{i:032x}" for i in range(1001)]),
                          ("1000 ids of 128 chars", ["i" * 128] * 1000), ("129-char id", ["i" * 129]),
                          ("unicode id", ["名前"]), ("NUL id", ["\x00"]), ("same id twice", [a, a])):
            if method == "Delete" and what == "same id twice":
                ids = [secrets.token_hex(16)] * 2
            out.append((method, cls(ids=ids), f"{method} {what}"))
    for what, req in (("empty ids", pb.CompareRequest()), ("same id", pb.CompareRequest(id_a=a, id_b=a)),
                      ("aggregation 6", pb.CompareRequest(id_a=a, id_b=b, aggregation=6)),
                      ("aggregation -1", pb.CompareRequest(id_a=a, id_b=b, aggregation=-1)),
                      ("space weight nan", pb.CompareRequest(id_a=a, id_b=b, space_weights={"E1_semantic": NAN})),
                      ("unknown space weight", pb.CompareRequest(id_a=a, id_b=b, space_weights={"nope": 1})),
                      ("every weight 0", pb.CompareRequest(id_a=a, id_b=b, space_weights={s: 0 for s in ("E1_semantic", "E6_lexical", "E13_splade", "E9_hdc")})),
                      ("geometric mean", pb.CompareRequest(id_a=a, id_b=b, aggregation=5)),
                      ("129-char id", pb.CompareRequest(id_a="i" * 129, id_b=b))):
        out.append(("Compare", req, f"Compare {what}"))
    for what, req in (("empty id", pb.FeedbackRequest()), ("unknown id", pb.FeedbackRequest(id=secrets.token_hex(16))),
                      ("helpful false", pb.FeedbackRequest(id=a, used=True, helpful=False)),
                      ("request_id 10 KiB", pb.FeedbackRequest(id=a, request_id="r" * 10240)),
                      ("129-char id", pb.FeedbackRequest(id="i" * 129))):
        out.append(("Feedback", req, f"Feedback {what}"))
    for what, req in (("10000 namespaces", pb.StatsRequest(namespaces=[f"ns{i}" for i in range(10000)])),
                      ("invalid namespaces", pb.StatsRequest(namespaces=["a b", "", "名前", "*"]))):
        out.append(("Stats", req, f"Stats {what}"))
    for what, items in (("no items", []), ("item without memory", [pb.StoreBatchRequest(client_ref="x")]),
                        ("client_ref 10 KiB", [pb.StoreBatchRequest(memory=_mem(content="batch ref"), client_ref="r" * 10240)]),
                        ("10001 items", [pb.StoreBatchRequest(memory=pb.MemoryInput(content=""))] * 10001),
                        ("NaN confidence among good", [pb.StoreBatchRequest(memory=_mem(content="good one")),
                                                       pb.StoreBatchRequest(memory=_mem(content="bad", confidence=NAN))])):
        out.append(("StoreBatch", items, f"StoreBatch {what}"))

    for what, req in (("no fields", pb.UpdateRequest(id=a, memory=_mem())), ("no memory", pb.UpdateRequest(id=a, fields=["content"])),
                      ("empty id", pb.UpdateRequest(fields=["importance"], memory=_mem(importance=0.3))),
                      ("unknown id", pb.UpdateRequest(id=secrets.token_hex(16), fields=["importance"], memory=_mem(importance=0.3))),
                      ("129-char id", pb.UpdateRequest(id="i" * 129, fields=["importance"], memory=_mem())),
                      ("unknown field", pb.UpdateRequest(id=a, fields=["nope"], memory=_mem())),
                      ("bookkeeping field", pb.UpdateRequest(id=a, fields=["id"], memory=_mem())),
                      ("field named twice", pb.UpdateRequest(id=a, fields=["importance", "importance"], memory=_mem(importance=0.4))),
                      ("1000 fields", pb.UpdateRequest(id=a, fields=["importance"] * 1000, memory=_mem(importance=0.4))),
                      ("empty content", pb.UpdateRequest(id=a, fields=["content"], memory=_mem(content=""))),
                      ("content 64 KiB + 1", pb.UpdateRequest(id=a, fields=["content"], memory=_mem(content="x" * 65537))),
                      ("invalid namespace", pb.UpdateRequest(id=a, fields=["namespace"], memory=_mem(namespace="a b"))),
                      ("namespace the scoped token owns", pb.UpdateRequest(id=b, fields=["namespace"], memory=_mem(namespace="fuzz-scoped"))),
                      ("namespace cleared", pb.UpdateRequest(id=b, fields=["namespace"], memory=_mem(namespace=""))),
                      ("access_level 99", pb.UpdateRequest(id=a, fields=["access_level"], memory=_mem(access_level=99))),
                      ("confidence nan", pb.UpdateRequest(id=a, fields=["confidence"], memory=_mem(confidence=NAN))),
                      ("event_time past 9999", pb.UpdateRequest(id=a, fields=["event_time"], memory=_mem(event_time=_ts(LATEST + 1)))),
                      ("link to itself", pb.UpdateRequest(id=a, fields=["links"], memory=_mem(links=[pb.Link(target_id=a, type=1)]))),
                      ("65 links", pb.UpdateRequest(id=a, fields=["links"], memory=_mem(links=[pb.Link(target_id=b, type=1)] * 65))),
                      ("65 metadata entries", pb.UpdateRequest(id=a, fields=["metadata"], memory=_mem(metadata={f"k{i}": "v" for i in range(65)}))),
                      ("keep_previous twice over", pb.UpdateRequest(id=b, fields=["content"], keep_previous=True, memory=_mem(content="kept once"))),
                      ("keep_previous without change", pb.UpdateRequest(id=b, fields=["importance"], keep_previous=True, memory=_mem()))):
        out.append(("Update", req, f"Update {what}"))
    for what, req in (("page_size -1", pb.ListRequest(page_size=-1)), ("page_size 1001", pb.ListRequest(page_size=1001)),
                      ("page_size 2^31-1", pb.ListRequest(page_size=2**31 - 1)), ("page_size 1000", pb.ListRequest(page_size=1000)),
                      ("garbage cursor", pb.ListRequest(cursor="not a cursor")),
                      ("cursor prefix only", pb.ListRequest(cursor="c1.")),
                      ("cursor -1", pb.ListRequest(cursor="c1.LTE=")),
                      ("cursor 2^63", pb.ListRequest(cursor="c1.OTIyMzM3MjAzNjg1NDc3NTgwOA==")),
                      ("cursor 10^40", pb.ListRequest(cursor="c1.MTAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMA==")),
                      ("cursor not base64", pb.ListRequest(cursor="c1.***")),
                      ("cursor of invalid UTF-8 bytes", pb.ListRequest(cursor="c1.__8=")),
                      ("cursor 10 KiB", pb.ListRequest(cursor="c1." + "A" * 10240)),
                      ("cursor with other filters", pb.ListRequest(cursor=pools.cursor, page_size=5, filters=pb.RetrieveFilters(namespaces=["fuzz-b"]))),
                      ("invalid namespace", pb.ListRequest(filters=pb.RetrieveFilters(namespaces=["a b"]))),
                      ("1000 namespaces", pb.ListRequest(filters=pb.RetrieveFilters(namespaces=[f"ns{i}" for i in range(1000)]))),
                      ("start after end", pb.ListRequest(filters=pb.RetrieveFilters(event_time=pb.TimeRange(start=_ts(10), end=_ts(5))))),
                      ("min_confidence nan", pb.ListRequest(filters=pb.RetrieveFilters(min_confidence=NAN)))):
        out.append(("List", req, f"List {what}"))
    for what, req in (("no namespaces (dry run)", pb.DeleteWhereRequest(dry_run=True)),
                      ("no namespaces", pb.DeleteWhereRequest()),
                      ("invalid namespace", pb.DeleteWhereRequest(filters=pb.RetrieveFilters(namespaces=["a b"]))),
                      ("star namespace", pb.DeleteWhereRequest(filters=pb.RetrieveFilters(namespaces=["*"]))),
                      ("empty namespace", pb.DeleteWhereRequest(filters=pb.RetrieveFilters(namespaces=[""]))),
                      ("1000 namespaces (dry run)", pb.DeleteWhereRequest(dry_run=True, filters=pb.RetrieveFilters(namespaces=[f"ns{i}" for i in range(1000)]))),
                      ("the pools (dry run)", pb.DeleteWhereRequest(dry_run=True, filters=pb.RetrieveFilters(namespaces=pools.namespaces))),
                      ("unknown namespace", pb.DeleteWhereRequest(filters=pb.RetrieveFilters(namespaces=["fuzz-none"]))),
                      ("memory_types [99]", pb.DeleteWhereRequest(filters=pb.RetrieveFilters(namespaces=[SPARE], memory_types=[99]))),
                      ("start after end", pb.DeleteWhereRequest(filters=pb.RetrieveFilters(namespaces=[SPARE], event_time=pb.TimeRange(start=_ts(10), end=_ts(5))))),
                      ("min_confidence 2", pb.DeleteWhereRequest(filters=pb.RetrieveFilters(namespaces=[SPARE], min_confidence=2)))):
        out.append(("DeleteWhere", req, f"DeleteWhere {what}"))
    for what, req in (("everything", pb.ExportRequest()), ("everything with embeddings", pb.ExportRequest(with_embeddings=True)),
                      ("invalid namespace", pb.ExportRequest(filters=pb.RetrieveFilters(namespaces=["a b"]))),
                      ("memory_types [99]", pb.ExportRequest(filters=pb.RetrieveFilters(memory_types=[99]))),
                      ("end past 9999", pb.ExportRequest(filters=pb.RetrieveFilters(event_time=pb.TimeRange(end=_ts(LATEST + 1))))),
                      ("65 metadata pairs", pb.ExportRequest(filters=pb.RetrieveFilters(metadata={f"k{i}": "v" for i in range(65)})))):
        out.append(("Export", req, f"Export {what}"))

    def imported(**kw) -> pb.ImportRequest:
        item = pb.ExportedMemory()
        if pools.exported:
            item.CopyFrom(pools.exported[0])
        else:
            item.memory.id, item.memory.model_version = secrets.token_hex(16), pools.model_version
            item.memory.input.content = "imported edge case"
        item.memory.input.namespace = SPARE
        for k, v in kw.items():
            v(item)
        return pb.ImportRequest(item=item)

    def heads(f):
        def edit(item: pb.ExportedMemory) -> None:
            for ch in item.chunks:
                for name in list(ch.heads):
                    f(name, ch.heads[name])
        return edit

    def clear(fieldname: str):
        return lambda item: item.ClearField(fieldname)

    def setm(**kw):
        return lambda item: [setattr(item.memory, k, v) for k, v in kw.items()]

    def seti(**kw):
        return lambda item: [getattr(item.memory.input, k).extend(v) if isinstance(v, list) else setattr(item.memory.input, k, v)
                             for k, v in kw.items()]

    def chunks(*spans):
        def edit(item: pb.ExportedMemory) -> None:
            base = item.chunks[0] if item.chunks else pb.ExportedChunk()
            del item.chunks[:]
            for s0, e0 in spans:
                item.chunks.add().CopyFrom(base)
                item.chunks[-1].start, item.chunks[-1].end = s0, e0
        return edit

    for what, items in (("no items", []), ("item without memory", [pb.ImportRequest()]),
                        ("empty item", [pb.ImportRequest(item=pb.ExportedMemory())]),
                        ("as exported", [imported()]), ("as exported, twice", [imported(), imported()]),
                        ("without chunks", [imported(c=clear("chunks"))]),
                        ("other model version", [imported(m=setm(model_version="other"))]),
                        ("no model version", [imported(m=setm(model_version=""))]),
                        ("empty exported id", [imported(m=setm(id=""))]),
                        ("129-char exported id", [imported(m=setm(id="i" * 129))]),
                        ("same exported id twice", [imported(m=setm(id="dup")), imported(m=setm(id="dup"), c=seti(content="other text"))]),
                        ("empty content", [imported(c=seti(content=""))]),
                        ("content changed, vectors kept", [imported(c=seti(content="quite different words now"))]),
                        ("invalid namespace", [imported(c=seti(namespace="a b"))]),
                        ("namespace the scoped token owns", [imported(c=seti(namespace="fuzz-scoped"))]),
                        ("access_level 99", [imported(c=seti(access_level=99))]),
                        ("confidence nan", [imported(c=seti(confidence=NAN))]),
                        ("negative counters", [imported(m=setm(retrieved_count=-1, used_count=-(2**63), chunk_count=-1))]),
                        ("chunk_count 2^31-1", [imported(m=setm(chunk_count=2**31 - 1))]),
                        ("ingestion_time past 9999", [imported(m=lambda it: it.memory.ingestion_time.CopyFrom(_ts(LATEST + 1)))]),
                        ("chunk end before start", [imported(c=chunks((5, 2)))]),
                        ("chunk past the content", [imported(c=chunks((0, 10**6)))]),
                        ("negative chunk span", [imported(c=chunks((-5, -1)))]),
                        ("overlapping chunks", [imported(c=chunks((0, 5), (2, 8)))]),
                        ("1000 chunks", [imported(c=chunks(*[(0, 1)] * 1000))]),
                        ("NaN vectors", [imported(c=heads(lambda n, h: h.values.__setitem__(slice(None), [NAN] * len(h.values))))]),
                        ("inf vectors", [imported(c=heads(lambda n, h: h.values.__setitem__(slice(None), [INF] * len(h.values))))]),
                        ("one value short", [imported(c=heads(lambda n, h: h.values.pop() if len(h.values) else None))]),
                        ("one value over", [imported(c=heads(lambda n, h: h.values.append(0.5)))]),
                        ("rows -1", [imported(c=heads(lambda n, h: setattr(h, "rows", -1)))]),
                        ("rows 2^31-1", [imported(c=heads(lambda n, h: setattr(h, "rows", 2**31 - 1)))]),
                        ("sparse id -1", [imported(c=heads(lambda n, h: (h.ids.append(-1), h.weights.append(1.0))))]),
                        ("sparse lengths differ", [imported(c=heads(lambda n, h: h.ids.append(3)))]),
                        ("sparse weight nan", [imported(c=heads(lambda n, h: (h.ids.append(4), h.weights.append(NAN))))]),
                        ("unknown head", [imported(c=lambda it: [ch.heads["nope"].values.extend([0.1] * 4) for ch in it.chunks])]),
                        ("one head missing", [imported(c=lambda it: [ch.heads.pop(next(iter(ch.heads))) for ch in it.chunks if ch.heads])]),
                        ("link to an unknown id", [imported(c=seti(links=[pb.Link(target_id=secrets.token_hex(16), type=1)]))]),
                        ("link to an imported item in another namespace",
                         [imported(m=setm(id="ia")), imported(m=setm(id="ib"), c=seti(namespace="fuzz-b", content="linked across",
                                                                                       links=[pb.Link(target_id="ia", type=1)]))]),
                        ("10001 items", [pb.ImportRequest(item=pb.ExportedMemory(memory=pb.Memory(input=pb.MemoryInput(content=""))))] * 10001)):
        out.append(("Import", items, f"Import {what}"))
    return out


# -- credentials -----------------------------------------------------------------------------------


def credentials(rng: random.Random, pools: Pools, k: int) -> tuple[str, list[tuple[str, str | bytes]]]:
    t = pools.token
    junk = "".join(rng.choice(string.ascii_letters + string.digits + "-._~+/=") for _ in range(rng.randint(1, 200)))
    flipped = t[:-5] + ("A" if t[-5] != "A" else "B") + t[-4:]
    variants: list[tuple[str, list]] = [
        ("no metadata", []),
        ("empty authorization", [("authorization", "")]),
        ("'Bearer' alone", [("authorization", "Bearer")]),
        ("'Bearer ' with nothing after", [("authorization", "Bearer ")]),
        ("Basic scheme", [("authorization", "Basic dXNlcjpwYXNzd29yZA==")]),
        ("Token scheme", [("authorization", f"Token {t}")]),
        ("token without scheme", [("authorization", t)]),
        ("lowercase bearer (valid)", [("authorization", f"bearer {t}")]),
        ("token plus extra word", [("authorization", f"Bearer {t} extra")]),
        ("well-formed unknown token", [("authorization", f"Bearer teleo_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}")]),
        ("revoked token", [("authorization", f"Bearer {pools.revoked}")]),
        ("token cut by one char", [("authorization", f"Bearer {t[:-1]}")]),
        ("token with one char changed", [("authorization", f"Bearer {flipped}")]),
        ("garbage token", [("authorization", f"Bearer {junk}")]),
        ("1 KiB token", [("authorization", "Bearer " + "a" * 1024)]),
        ("8 KiB token", [("authorization", "Bearer teleo_" + "b" * 8192)]),
        ("15 KiB token", [("authorization", "Bearer " + "c" * 15360)]),
        ("20 KiB token (past the 16 KiB metadata limit)", [("authorization", "Bearer " + "d" * 20480)]),
        ("valid then junk authorization", [("authorization", f"Bearer {t}"), ("authorization", f"Bearer {junk}")]),
        ("junk then valid authorization", [("authorization", f"Bearer {junk}"), ("authorization", f"Bearer {t}")]),
        ("x-request-id of 65 chars", [("authorization", f"Bearer {t}"), ("x-request-id", "r" * 65)]),
        ("x-request-id of 8 KiB", [("authorization", f"Bearer {t}"), ("x-request-id", "r" * 8192)]),
        ("authorization-bin only", [("authorization-bin", rng.randbytes(rng.randint(1, 64)))]),
        ("200 junk metadata entries", [("authorization", f"Bearer {t}")] + [(f"x-junk-{i}", junk[:20] or "j") for i in range(200)]),
        ("scoped token (PUBLIC, one namespace)", [("authorization", f"Bearer {pools.scoped}")]),
        ("'teleo_' prefix only", [("authorization", "Bearer teleo_")]),
        ("non-hex token id", [("authorization", f"Bearer teleo_ZZZZZZZZZZZZ_{secrets.token_urlsafe(32)}")]),
    ]
    return variants[k % len(variants)]


__all__ = ["Pools", "credentials", "extreme", "fixed", "randomize", "setup", "still_serving", "valid"]
