"""Part 4, access control: hypothesis-generated calls of every RPC against an independent model of scope.

Five namespaces times four access levels make 20 partitions; every memory carries its partition's
marker word (``mkacmeq3`` for acme/CONFIDENTIAL), so anything derived from a memory (its text, a
goal label) names the partition it came from. Tokens: an admin, scoped readers and writers over
exact names and ``prefix*``, a read-only and a write-only token, one made with ``teleo token create``
while the server runs and one revoked through the CLI, plus one probe token per partition that
counts its goals. The harness keeps its own model of every memory and of every token's scope (it
does not use the server's code to decide what a caller may see) and checks, for each call:

- nothing outside the caller's scope is returned: results, Get, Compare, Feedback, Update, duplicates
  (Store, StoreBatch and Import); List and
  Export return exactly the readable matches, oldest first (List paged with small pages);
- nothing is counted: Stats totals and per-namespace counts, goal counts, ``summary.corpus_size``, what a
  DeleteWhere dry run matched (refused exactly when a readable match is not writable);
- nothing is labelled: no marker of an unreadable partition anywhere in a response, goal labels included;
- nothing is distinguishable: an unreadable id answers exactly like an unknown one (same status,
  same message once ids are blanked), a target goal the caller may not see acts like an unknown one,
  and storing memories the caller cannot read leaves its results and scores unchanged.

Writes follow the model too (a write outside the token's scope is PERMISSION_DENIED, Feedback needs
write access). The body never raises: every violation is counted and the first ones kept.
"""

from __future__ import annotations

import re
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from teleo.v1 import memory_pb2 as pb

from bench.stress.context import WORDS, Context
from bench.stress.report import Part
from bench.stress.server import (
    LEVELS, Server, bearer, channel, create_token_cli, create_tokens_offline, revoke_token_cli, stub, token_id,
)

NAMESPACES = ("acme", "acme-eng", "globex", "initech", "shared")
PARTITIONS = [(ns, lvl) for ns in NAMESPACES for lvl in (1, 2, 3, 4)]
SEED_PER_PARTITION = 16  # goals need 12 memories in a partition
WORD = re.compile(r"[a-z0-9]+")
HEX_ID = re.compile(r"\b[0-9a-f]{32}\b")
# Tokens: name, read scopes, write scopes, level, default namespace.
TOKENS = [
    ("admin", ["*"], ["*"], 4, "shared"),
    ("acme-conf", ["acme*"], ["acme"], 3, "acme"),
    ("acme-pub", ["acme"], ["acme"], 1, "acme"),
    ("globex-int", ["globex", "shared"], ["globex"], 2, "globex"),
    ("initech-restr", ["initech"], ["initech"], 4, "initech"),
    ("shared-reader", ["shared"], [], 4, "shared"),
    ("dropbox", [], ["shared"], 2, "shared"),
]
CLI_TOKEN = ("cli-bot", ["glob*", "shared"], ["globex"], 1, "globex")  # created while the server runs
REVOKED = ("revoked", ["*"], ["*"], 4, "shared")
CALLERS = [t[0] for t in TOKENS] + [CLI_TOKEN[0], REVOKED[0]]


def marker(ns: str, lvl: int) -> str:
    return f"mk{ns.replace('-', '')}q{lvl}"


def in_scope(ns: str, scopes: tuple[str, ...]) -> bool:
    return any(s == "*" or s == ns or (s.endswith("*") and ns.startswith(s[:-1])) for s in scopes)


@dataclass(frozen=True)
class Caller:
    name: str
    read: tuple[str, ...]
    write: tuple[str, ...]
    level: int
    default_ns: str
    token: str
    revoked: bool = False

    def can_read(self, ns: str, lvl: int) -> bool:
        return lvl <= self.level and in_scope(ns, self.read)

    def can_write(self, ns: str, lvl: int) -> bool:
        return lvl <= self.level and in_scope(ns, self.write)

    @property
    def md(self) -> list[tuple[str, str]]:
        return bearer(self.token)


@dataclass
class Mem:
    ns: str
    lvl: int
    content: str
    used: int = 0
    helpful: int = 0


@dataclass
class Model:
    """Every memory the server should hold, in the order they were stored."""

    mems: dict[str, Mem] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    dynamic: list[str] = field(default_factory=list)  # stored by the generated calls (deletable)

    def add(self, memory_id: str, mem: Mem, dynamic: bool = True) -> None:
        self.mems[memory_id] = mem
        self.order.append(memory_id)
        if dynamic:
            self.dynamic.append(memory_id)

    def remove(self, memory_id: str) -> None:
        if self.mems.pop(memory_id, None) is not None:
            self.deleted.append(memory_id)

    def alive(self) -> list[str]:
        return [i for i in self.order if i in self.mems]

    def readable(self, c: Caller, namespaces: tuple[str, ...] = ()) -> list[str]:
        return [i for i in self.alive() if c.can_read(self.mems[i].ns, self.mems[i].lvl)
                and (not namespaces or self.mems[i].ns in namespaces)]

    def find(self, ns: str, lvl: int, content: str) -> str | None:
        return next((i for i in self.alive() if (self.mems[i].ns, self.mems[i].lvl, self.mems[i].content) == (ns, lvl, content)), None)


# -- the generated calls ---------------------------------------------------------------------------

idx = st.integers(0, 10**6)
ref = st.one_of(st.tuples(st.just("readable"), idx), st.tuples(st.just("unreadable"), idx),
                st.tuples(st.just("unknown"), idx), st.tuples(st.just("deleted"), idx), st.tuples(st.just("any"), idx))
namespace = st.sampled_from(NAMESPACES + ("",))
level = st.sampled_from((0, 1, 2, 3, 4))
item = st.tuples(namespace, level, st.sampled_from(("fresh", "fresh", "dup", "same")), idx)
caller = st.sampled_from(CALLERS[:-1] * 6 + CALLERS[-1:])
word_ref = st.tuples(st.sampled_from(("marker", "topic", "goal", "word")), st.sampled_from(PARTITIONS), idx)

CALLS = {
    "Store": st.fixed_dictionaries({"item": item}),
    "StoreBatch": st.fixed_dictionaries({"items": st.lists(item, min_size=1, max_size=6)}),
    "Get": st.fixed_dictionaries({"refs": st.lists(ref, min_size=1, max_size=4)}),
    "Delete": st.fixed_dictionaries({"refs": st.lists(ref, min_size=1, max_size=2)}),
    "Retrieve": st.fixed_dictionaries({
        "words": st.lists(word_ref, min_size=1, max_size=5), "top_k": st.integers(1, 40),
        "namespaces": st.lists(st.sampled_from(NAMESPACES), max_size=2, unique=True),
        "targets": st.lists(word_ref, max_size=3), "johari": st.lists(st.integers(1, 4), max_size=2, unique=True),
        "explain": st.booleans(), "breakdown": st.booleans(),
        "profile": st.sampled_from(("", "teleological", "hybrid", "entry_point"))}),
    "Compare": st.fixed_dictionaries({"a": ref, "b": ref, "aggregation": st.integers(0, 5)}),
    "Feedback": st.fixed_dictionaries({"ref": ref, "used": st.booleans(), "helpful": st.sampled_from((None, True, False))}),
    "Stats": st.fixed_dictionaries({"namespaces": st.lists(st.sampled_from(NAMESPACES), max_size=3, unique=True)}),
    "NonInterference": st.fixed_dictionaries({"words": st.lists(word_ref, min_size=2, max_size=4), "pick": idx}),
    "List": st.fixed_dictionaries({"namespaces": st.lists(st.sampled_from(NAMESPACES), max_size=2, unique=True),
                                   "own": st.booleans(), "page_size": st.integers(4, 40)}),
    "Export": st.fixed_dictionaries({"namespaces": st.lists(st.sampled_from(NAMESPACES), max_size=2, unique=True),
                                     "own": st.booleans()}),
    "DeleteWhere": st.fixed_dictionaries({"namespaces": st.lists(st.sampled_from(NAMESPACES), max_size=2, unique=True),
                                          "own": st.booleans()}),
    "Update": st.fixed_dictionaries({"ref": ref, "change": st.sampled_from(("content", "metadata", "move")),
                                     "to": st.sampled_from(PARTITIONS), "keep_previous": st.booleans()}),
    "Import": st.fixed_dictionaries({"items": st.lists(item, min_size=1, max_size=4)}),
}
WEIGHTS = {"Store": 3, "StoreBatch": 2, "Get": 3, "Delete": 2, "Retrieve": 5, "Compare": 2, "Feedback": 2, "Stats": 2,
           "NonInterference": 1, "List": 2, "Export": 1, "DeleteWhere": 2, "Update": 2, "Import": 1}
call = st.tuples(caller, st.sampled_from([k for k, w in WEIGHTS.items() for _ in range(w)])).flatmap(
    lambda cm: st.tuples(st.just(cm[0]), st.just(cm[1]), CALLS[cm[1]]))


class Budget(Exception):
    """The part's time is up."""


class Checker:
    def __init__(self, srv: Server, callers: dict[str, Caller], probes: dict[tuple[str, int], str], topics: dict,
                 part: Part, ctx: Context) -> None:
        self.ch = channel(srv.address)
        self.s = stub(self.ch)
        self.callers, self.probes, self.topics, self.part = callers, probes, topics, part
        self.owner = {w: p for p, ws in topics.items() for w in ws} | {marker(*p): p for p in PARTITIONS}
        self.model = Model()
        self.checks: Counter = Counter()
        self.failures: Counter = Counter()
        self.calls: Counter = Counter()
        self.errors: Counter = Counter()
        self.rng = ctx.rng("acl-content")
        self.n = 0

    # -- plumbing ---------------------------------------------------------------------------------

    def rpc(self, method: str, req, c: Caller):
        """(status name, details, response or list of stream events)."""
        fn = getattr(self.s, method)
        try:
            if method in ("Retrieve", "Export"):
                return "OK", "", list(fn(req, metadata=c.md, timeout=60))
            if method in ("StoreBatch", "Import"):
                return "OK", "", fn(iter(req), metadata=c.md, timeout=120)
            return "OK", "", fn(req, metadata=c.md, timeout=60)
        except grpc.RpcError as exc:
            return exc.code().name, exc.details() or "", None

    def check(self, name: str, ok: bool, **example) -> bool:
        self.checks[name] += 1
        if not ok:
            self.failures[name] += 1
            self.part.example(check=name, **example)
        return ok

    def leaks(self, c: Caller, *texts: str, sent: str = "") -> list[str]:
        """Marker and topic words in ``texts`` that belong to partitions ``c`` may not read (words the
        caller sent itself, echoed in a message, are not a leak)."""
        words = {w for t in texts for w in WORD.findall(t.lower())} - set(WORD.findall(sent.lower()))
        return sorted(w for w in words if w in self.owner and not c.can_read(*self.owner[w]))

    def no_leak(self, c: Caller, method: str, what: str, *texts: str, message: str = "", sent: str = "") -> None:
        """No word of an unreadable partition in ``texts``, nor in the error ``message`` beyond what was ``sent``."""
        bad = sorted(set(self.leaks(c, *texts)) | set(self.leaks(c, message, sent=sent)))
        self.check("nothing labelled or returned from unreadable partitions", not bad, caller=c.name, method=method,
                   input=what, leaked_markers=bad[:5])

    def resolve(self, c: Caller, r: tuple[str, int]) -> tuple[str, str]:
        """A reference -> (id, kind) where kind is readable / unreadable / unknown."""
        kind, k = r
        alive = self.model.alive()
        if kind == "any" and alive:
            i = alive[k % len(alive)]
            m = self.model.mems[i]
            return i, "readable" if c.can_read(m.ns, m.lvl) else "unreadable"
        pool = {"readable": self.model.readable(c),
                "unreadable": [i for i in alive if not c.can_read(self.model.mems[i].ns, self.model.mems[i].lvl)],
                "deleted": self.model.deleted}.get(kind, [])
        if not pool:
            return secrets.token_hex(16), "unknown"
        return pool[k % len(pool)], "unknown" if kind == "deleted" else kind

    def twin(self, c: Caller, method: str, make, ids: list[str], kinds: list[str], code: str, details: str, what: str) -> None:
        """The same call with every unreadable id replaced by an unknown one must answer alike."""
        if "unreadable" not in kinds:
            return
        fresh = {i: secrets.token_hex(16) for i, k in zip(ids, kinds) if k == "unreadable"}  # one per distinct id
        swapped = [fresh.get(i, i) for i in ids]
        code2, details2, _ = self.rpc(method, make(swapped), c)
        blank = lambda s: HEX_ID.sub("<id>", s)
        self.check("unreadable id answers like an unknown id", (code, blank(details)) == (code2, blank(details2)),
                   caller=c.name, method=method, input=what, unreadable=f"{code}: {details[:160]}",
                   unknown=f"{code2}: {details2[:160]}")

    def content(self, ns: str, lvl: int) -> str:
        self.n += 1
        words = " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(4, 10)))
        topic = " ".join(self.topics[(ns, lvl)])
        return f"{marker(ns, lvl)} {topic} {words} item{self.n} {marker(ns, lvl)}"

    def words(self, refs) -> tuple[list[str], list[bool]]:
        """Query words from references; and whether each names a partition (ns, lvl)."""
        out = []
        for kind, (ns, lvl), k in refs:
            if kind == "marker":
                out.append(marker(ns, lvl))
            elif kind == "topic":
                out.append(self.topics[(ns, lvl)][k % 3])
            elif kind == "goal":
                out.append(f"{ns}/{LEVELS[lvl]}/g{k % 2}")
            else:
                out.append(WORDS[k % len(WORDS)])
        return out, [kind != "word" for kind, _, _ in refs]

    # -- the calls --------------------------------------------------------------------------------

    def __call__(self, name: str, op: str, args: dict) -> None:
        c = self.callers[name]
        self.calls[op] += 1
        getattr(self, "do_" + op)(c, args)

    def revoked(self, c: Caller, method: str, code: str, details: str) -> bool:
        if c.revoked:
            self.check("revoked token is UNAUTHENTICATED", code == "UNAUTHENTICATED", caller=c.name, method=method,
                       status=code, message=details[:160])
        return c.revoked

    def _expect_items(self, c: Caller, items) -> list[tuple[str, int, str, str, str | None]]:
        """(ns, level, content, expected status, expected duplicate id) per item, in order."""
        out: list[tuple[str, int, str, str, str | None]] = []
        batch: list[tuple[str, int, str]] = []
        for ns, lvl, how, k in items:
            ns_eff, lvl_eff = ns or c.default_ns, lvl or 2
            content = self.content(ns_eff, lvl_eff)
            same = [b for b in batch if (b[0], b[1]) == (ns_eff, lvl_eff)]
            if how == "dup":
                pool = [i for i in self.model.alive() if (self.model.mems[i].ns, self.model.mems[i].lvl) == (ns_eff, lvl_eff)]
                if pool:
                    content = self.model.mems[pool[k % len(pool)]].content
            elif how == "same" and same:
                content = same[k % len(same)][2]
            batch.append((ns_eff, lvl_eff, content))
            if not c.can_write(ns_eff, lvl_eff):
                out.append((ns_eff, lvl_eff, content, "PERMISSION_DENIED", None))
                continue
            dup = self.model.find(ns_eff, lvl_eff, content) if c.can_read(ns_eff, lvl_eff) else None
            earlier = next((o for o in out if o[3] == "OK" and (o[0], o[1], o[2]) == (ns_eff, lvl_eff, content)), None)
            out.append((ns_eff, lvl_eff, content, "OK", dup or ("batch" if earlier and c.can_read(ns_eff, lvl_eff) else None)))
        return out

    def _stored(self, c: Caller, method: str, exp, got_id: str, duplicate: bool, what: str) -> None:
        ns, lvl, content, _, dup = exp
        if duplicate:
            m = self.model.mems.get(got_id)
            self.check("a duplicate answer names only a memory the caller can read",
                       m is not None and c.can_read(m.ns, m.lvl) and m.content == content, caller=c.name, method=method,
                       input=what, returned_id=got_id, partition=f"{ns}/{lvl}")
        else:
            self.model.add(got_id, Mem(ns, lvl, content))
        self.check("duplicates are found among what the caller can read", duplicate == (dup is not None),
                   caller=c.name, method=method, input=what, expected_duplicate=dup is not None, duplicate=duplicate)

    def do_Store(self, c: Caller, a: dict) -> None:
        ns, lvl, how, k = a["item"]
        (exp,) = self._expect_items(c, [a["item"]])
        what = f"Store {how} into {exp[0]}/{LEVELS[exp[1]]} (asked namespace {ns!r}, level {lvl})"
        code, details, resp = self.rpc("Store", pb.StoreRequest(memory=pb.MemoryInput(content=exp[2], namespace=ns, access_level=lvl)), c)
        if self.revoked(c, "Store", code, details):
            return
        if self.check("writes outside the token's scope are refused", code == exp[3], caller=c.name, method="Store",
                      input=what, expected=exp[3], status=code, message=details[:200]) and code == "OK":
            self._stored(c, "Store", exp, resp.id, resp.duplicate, what)
        self.no_leak(c, "Store", what, details, str(resp))

    def _batch(self, c: Caller, method: str, reqs: list, exps: list, what: str) -> None:
        """StoreBatch and Import: one item per request, each authorised and de-duplicated on its own."""
        code, details, resp = self.rpc(method, reqs, c)
        if self.revoked(c, method, code, details):
            return
        if not self.check(f"{method} answers OK with one item per request", code == "OK" and len(resp.items) == len(exps),
                          caller=c.name, method=method, input=what, status=code, message=details[:200]):
            return
        for exp, got in zip(exps, resp.items):
            status = got.error_code or "OK"
            if self.check("writes outside the token's scope are refused", status == exp[3], caller=c.name,
                          method=method, input=what, expected=exp[3], status=status, message=got.error[:200]) and status == "OK":
                if exp[4] == "batch":
                    exp = (*exp[:4], self.model.find(exp[0], exp[1], exp[2]))
                self._stored(c, method, exp, got.id, got.duplicate, what)
        self.no_leak(c, method, what, str(resp))

    def do_StoreBatch(self, c: Caller, a: dict) -> None:
        exps = self._expect_items(c, a["items"])
        reqs = [pb.StoreBatchRequest(memory=pb.MemoryInput(content=content, namespace=item[0], access_level=item[1]),
                                     client_ref=str(j)) for j, ((_, _, content, _, _), item) in enumerate(zip(exps, a["items"]))]
        self._batch(c, "StoreBatch", reqs, exps, "StoreBatch " + ", ".join(f"{e[0]}/{LEVELS[e[1]]}" for e in exps))

    def do_Import(self, c: Caller, a: dict) -> None:
        """Import is authorised and de-duplicated as StoreBatch is (its items come as exported memories)."""
        exps = self._expect_items(c, a["items"])
        reqs = [pb.ImportRequest(item=pb.ExportedMemory(memory=pb.Memory(
                    id=secrets.token_hex(16), input=pb.MemoryInput(content=content, namespace=it[0], access_level=it[1]))))
                for (_, _, content, _, _), it in zip(exps, a["items"])]
        self._batch(c, "Import", reqs, exps, "Import " + ", ".join(f"{e[0]}/{LEVELS[e[1]]}" for e in exps))

    def do_Update(self, c: Caller, a: dict) -> None:
        """Change a memory's content, metadata, or partition (moved with a content of the new partition,
        so its marker stays true); with keep_previous the old version stays as a memory of its own."""
        kind, k = a["ref"]
        dyn = [i for i in self.model.dynamic if i in self.model.mems]
        if kind in ("readable", "any") and dyn:  # memories the generated calls stored: the seed keeps the goals
            i = dyn[k % len(dyn)]
            m = self.model.mems[i]
            kind = "readable" if c.can_read(m.ns, m.lvl) else "unreadable"
        else:
            i, kind = self.resolve(c, (kind, k))
        m = self.model.mems.get(i) if kind == "readable" else None
        change, keep = a["change"], a["keep_previous"] and a["change"] != "move"
        ns, lvl = a["to"] if change == "move" else ((m.ns, m.lvl) if m is not None else ("shared", 1))
        content = self.content(ns, lvl) if change != "metadata" else (m.content if m is not None else "x")
        fields = {"content": ["content"], "metadata": ["metadata"], "move": ["content", "namespace", "access_level"]}[change]
        what = f"Update {change} of a {kind} memory" + (f" to {ns}/{LEVELS[lvl]}" if change == "move" else "") + \
            (" keeping the previous version" if keep else "")

        def make(x: list[str]) -> pb.UpdateRequest:
            return pb.UpdateRequest(id=x[0], fields=fields, keep_previous=keep, memory=pb.MemoryInput(
                content=content, namespace=ns, access_level=lvl, metadata={"edited": str(self.n)}))

        code, details, resp = self.rpc("Update", make([i]), c)
        if self.revoked(c, "Update", code, details):
            return
        if m is None:
            expected = "NOT_FOUND"
        elif not c.can_write(m.ns, m.lvl) or not c.can_write(ns, lvl):
            expected = "PERMISSION_DENIED"
        else:
            expected = "OK"
        if self.check("Update answers by the caller's scope", code == expected, caller=c.name, method="Update",
                      input=what, expected=expected, status=code, message=details[:200]) and code == "OK":
            got = resp.memory
            self.check("Update stores what was asked", (got.id, got.input.namespace, got.input.access_level,
                                                        got.input.content) == (i, ns, lvl, content),
                       caller=c.name, method="Update", input=what, got=f"{got.input.namespace}/{got.input.access_level}")
            self.check("Update keeps the previous version exactly when asked", bool(resp.previous_id) == keep,
                       caller=c.name, method="Update", input=what, previous_id=resp.previous_id)
            if resp.previous_id:
                self.model.add(resp.previous_id, Mem(m.ns, m.lvl, m.content))
            m.ns, m.lvl, m.content = ns, lvl, content
        elif code != "OK" and m is not None:
            code2, _, now = self.rpc("Get", pb.GetRequest(ids=[i]), self.callers["admin"])
            self.check("a refused Update changes nothing", code2 == "OK" and now.memories[0].input.content == m.content,
                       caller=c.name, method="Update", input=what, status=code)
        self.no_leak(c, "Update", what, details, str(resp), sent=content)
        self.twin(c, "Update", make, [i], [kind], code, details, what)

    def do_Get(self, c: Caller, a: dict) -> None:
        resolved = [self.resolve(c, r) for r in a["refs"]]
        ids, kinds = [i for i, _ in resolved], [k for _, k in resolved]
        what = "Get " + ", ".join(kinds)
        code, details, resp = self.rpc("Get", pb.GetRequest(ids=ids), c)
        if self.revoked(c, "Get", code, details):
            return
        expected = "OK" if all(k == "readable" for k in kinds) else "NOT_FOUND"
        if self.check("Get answers exactly what the caller can read", code == expected, caller=c.name, method="Get",
                      input=what, expected=expected, status=code, message=details[:200]) and code == "OK":
            want = list(dict.fromkeys(ids))
            got = [m.id for m in resp.memories]
            self.check("Get returns the memories asked for", got == want and all(
                m.input.content == self.model.mems[m.id].content for m in resp.memories), caller=c.name, method="Get",
                input=what, returned=got[:4])
        self.no_leak(c, "Get", what, details, str(resp))
        self.twin(c, "Get", lambda x: pb.GetRequest(ids=x), ids, kinds, code, details, what)

    def do_Delete(self, c: Caller, a: dict) -> None:
        refs = [("any", k) if kind == "readable" and self.model.dynamic and k % 5 else (kind, k) for kind, k in a["refs"]]
        resolved = []
        for kind, k in refs:
            dyn = [i for i in self.model.dynamic if i in self.model.mems]
            if kind == "any" and dyn:  # mostly memories the generated calls stored: the seed keeps the goals
                i = dyn[k % len(dyn)]
                m = self.model.mems[i]
                resolved.append((i, "readable" if c.can_read(m.ns, m.lvl) else "unreadable"))
            else:
                resolved.append(self.resolve(c, (kind, k)))
        ids, kinds = [i for i, _ in resolved], [k for _, k in resolved]
        what = "Delete " + ", ".join(kinds)
        code, details, resp = self.rpc("Delete", pb.DeleteRequest(ids=ids), c)
        if self.revoked(c, "Delete", code, details):
            return
        if any(k != "readable" for k in kinds):
            expected = "NOT_FOUND"
        elif not all(c.can_write(self.model.mems[i].ns, self.model.mems[i].lvl) for i in ids):
            expected = "PERMISSION_DENIED"
        else:
            expected = "OK"
        self.check("Delete answers by the caller's scope", code == expected, caller=c.name, method="Delete", input=what,
                   expected=expected, status=code, message=details[:200])
        existing = [i for i in dict.fromkeys(ids) if i in self.model.mems]
        if code == "OK":
            for i in existing:
                self.model.remove(i)
        elif existing:
            code2, _, _ = self.rpc("Get", pb.GetRequest(ids=existing), self.callers["admin"])
            self.check("a refused Delete deletes nothing", code2 == "OK", caller=c.name, method="Delete", input=what,
                       status=code, admin_get=code2)
        self.no_leak(c, "Delete", what, details)
        if code != "OK":
            self.twin(c, "Delete", lambda x: pb.DeleteRequest(ids=x), ids, kinds, code, details, what)

    def do_Compare(self, c: Caller, a: dict) -> None:
        (ia, ka), (ib, kb) = self.resolve(c, a["a"]), self.resolve(c, a["b"])
        what = f"Compare {ka} with {kb}"
        make = lambda x: pb.CompareRequest(id_a=x[0], id_b=x[1], aggregation=a["aggregation"])
        code, details, resp = self.rpc("Compare", make([ia, ib]), c)
        if self.revoked(c, "Compare", code, details):
            return
        expected = "OK" if ka == kb == "readable" else "NOT_FOUND"
        self.check("Compare answers by the caller's scope", code == expected, caller=c.name, method="Compare",
                   input=what, expected=expected, status=code, message=details[:200])
        self.no_leak(c, "Compare", what, details, str(resp))
        self.twin(c, "Compare", make, [ia, ib], [ka, kb], code, details, what)

    def do_Feedback(self, c: Caller, a: dict) -> None:
        i, kind = self.resolve(c, a["ref"])
        what = f"Feedback on a {kind} memory (used={a['used']}, helpful={a['helpful']})"

        def make(x: list[str]) -> pb.FeedbackRequest:
            req = pb.FeedbackRequest(id=x[0], used=a["used"])
            if a["helpful"] is not None:
                req.helpful = a["helpful"]
            return req

        code, details, resp = self.rpc("Feedback", make([i]), c)
        if self.revoked(c, "Feedback", code, details):
            return
        m = self.model.mems.get(i)
        expected = "NOT_FOUND" if kind != "readable" else "OK" if c.can_write(m.ns, m.lvl) else "PERMISSION_DENIED"
        self.check("Feedback needs read and write access", code == expected, caller=c.name, method="Feedback",
                   input=what, expected=expected, status=code, message=details[:200])
        if code == "OK" and m is not None:
            m.used += int(a["used"])
            m.helpful += int(a["helpful"] is True)
            self.check("Feedback counts", (resp.memory.used_count, resp.memory.helpful_count) == (m.used, m.helpful),
                       caller=c.name, method="Feedback", input=what,
                       counts=f"{resp.memory.used_count}/{resp.memory.helpful_count}, model {m.used}/{m.helpful}")
            if resp.memory.used_count != m.used or resp.memory.helpful_count != m.helpful:
                m.used, m.helpful = resp.memory.used_count, resp.memory.helpful_count
        self.no_leak(c, "Feedback", what, details, str(resp))
        self.twin(c, "Feedback", make, [i], [kind], code, details, what)

    def goals_of(self, c: Caller) -> int:
        """Goals the caller should see: the sum over the partitions it may read, each counted by its probe token."""
        per: dict[str, list[int]] = {}
        for ns in NAMESPACES:
            counts = [0]
            for lvl in (1, 2, 3, 4):
                got = self.s.Stats(pb.StatsRequest(), metadata=bearer(self.probes[(ns, lvl)]), timeout=30).goals
                counts.append(got)
            per[ns] = counts
        return sum(per[ns][lvl] - per[ns][lvl - 1] for ns, lvl in PARTITIONS if c.can_read(ns, lvl))

    def do_Stats(self, c: Caller, a: dict) -> None:
        nss = tuple(a["namespaces"])
        what = f"Stats namespaces={list(nss)}"
        code, details, resp = self.rpc("Stats", pb.StatsRequest(namespaces=nss), c)
        if self.revoked(c, "Stats", code, details) or not self.check(
                "Stats answers OK", code == "OK", caller=c.name, method="Stats", input=what, status=code, message=details[:200]):
            return
        want = Counter(self.model.mems[i].ns for i in self.model.readable(c, nss))
        got = {n.namespace: n.memories for n in resp.namespaces}
        self.check("Stats counts only what the caller can read", resp.memories == sum(want.values()) and got == dict(want),
                   caller=c.name, method="Stats", input=what, expected=dict(want), got=got, total=resp.memories)
        if not nss:
            expected = self.goals_of(c)
            self.check("goal counts cover only readable partitions", resp.goals == expected, caller=c.name,
                       method="Stats", input=what, expected=expected, got=resp.goals)

    @staticmethod
    def _namespaces(c: Caller, a: dict) -> tuple[str, ...]:
        """The drawn namespaces; with ``own``, only those the caller may read (its first one if none is)."""
        if not a["own"]:
            return tuple(a["namespaces"])
        mine = [ns for ns in NAMESPACES if c.can_read(ns, 1)]
        return tuple(ns for ns in a["namespaces"] if ns in mine) or tuple(mine[:1])

    def _listed(self, c: Caller, method: str, nss: tuple[str, ...], code: str, details: str, got: list, what: str) -> None:
        """``got`` (memories of a List or Export) must be exactly the readable memories in ``nss``, oldest first."""
        expected = "OK" if all(c.can_read(ns, 1) for ns in nss) else "PERMISSION_DENIED"
        ok = self.check(f"{method} answers by the caller's scope", code == expected, caller=c.name, method=method,
                        input=what, expected=expected, status=code, message=details[:200])
        self.no_leak(c, method, what, details, "".join(str(m) for m in got))
        if not ok or code != "OK":
            return
        for m in got:
            mem = self.model.mems.get(m.id)
            self.check(f"{method} returns only what the caller can read",
                       mem is not None and c.can_read(mem.ns, mem.lvl) and (not nss or mem.ns in nss)
                       and m.input.content == mem.content, caller=c.name, method=method, input=what, result=m.id,
                       partition=f"{m.input.namespace}/{m.input.access_level}")
        want, ids = self.model.readable(c, nss), [m.id for m in got]
        self.check(f"{method} returns every readable match, oldest first", ids == want, caller=c.name, method=method,
                   input=what, expected=len(want), got=len(ids), same_set=set(ids) == set(want),
                   missing=[i for i in want if i not in set(ids)][:3], extra=[i for i in ids if i not in set(want)][:3])

    def do_List(self, c: Caller, a: dict) -> None:
        nss = self._namespaces(c, a)
        what = f"List namespaces={list(nss)} page_size={a['page_size']}"
        got: list = []
        cursor, code, details = "", "OK", ""
        for _ in range(len(self.model.mems) // a["page_size"] + 3):  # a bound on the pages, in case the cursor loops
            code, details, resp = self.rpc("List", pb.ListRequest(filters=pb.RetrieveFilters(namespaces=nss),
                                                                  page_size=a["page_size"], cursor=cursor), c)
            if code != "OK":
                break
            self.check("List pages are at most page_size", len(resp.memories) <= a["page_size"], caller=c.name,
                       method="List", input=what, page=len(resp.memories))
            got += resp.memories
            cursor = resp.next_cursor
            if not cursor:
                break
        else:
            self.check("List reaches its last page", False, caller=c.name, method="List", input=what, listed=len(got))
        if self.revoked(c, "List", code, details):
            return
        self._listed(c, "List", nss, code, details, got, what)

    def do_Export(self, c: Caller, a: dict) -> None:
        nss = self._namespaces(c, a)
        what = f"Export namespaces={list(nss)}"
        code, details, events = self.rpc("Export", pb.ExportRequest(filters=pb.RetrieveFilters(namespaces=nss)), c)
        if self.revoked(c, "Export", code, details):
            return
        self.check("Export without embeddings carries no chunks", not any(e.chunks for e in events or []),
                   caller=c.name, method="Export", input=what)
        self._listed(c, "Export", nss, code, details, [e.memory for e in events or []], what)

    def do_DeleteWhere(self, c: Caller, a: dict) -> None:
        """Dry runs only: the seed keeps the goals, and the model's count is checked without changing it."""
        nss = self._namespaces(c, a)
        what = f"DeleteWhere dry run namespaces={list(nss)}"
        code, details, resp = self.rpc("DeleteWhere", pb.DeleteWhereRequest(
            filters=pb.RetrieveFilters(namespaces=nss), dry_run=True), c)
        if self.revoked(c, "DeleteWhere", code, details):
            return
        matches = self.model.readable(c, nss)
        if not nss:
            expected = "INVALID_ARGUMENT"
        elif not all(c.can_read(ns, 1) for ns in nss):
            expected = "PERMISSION_DENIED"
        elif not all(c.can_write(self.model.mems[i].ns, self.model.mems[i].lvl) for i in matches):
            expected = "PERMISSION_DENIED"
        else:
            expected = "OK"
        if self.check("DeleteWhere answers by the caller's scope", code == expected, caller=c.name, method="DeleteWhere",
                      input=what, expected=expected, status=code, message=details[:200]) and code == "OK":
            self.check("DeleteWhere counts only readable matches and deletes nothing on a dry run",
                       (resp.matched, resp.deleted) == (len(matches), 0), caller=c.name, method="DeleteWhere",
                       input=what, expected=len(matches), matched=resp.matched, deleted=resp.deleted)
        self.no_leak(c, "DeleteWhere", what, details, str(resp))

    def _retrieve_request(self, a: dict, words: list[str], targets: list[str]) -> pb.RetrieveRequest:
        return pb.RetrieveRequest(text=" ".join(words), top_k=a["top_k"], profile=a["profile"], target_goals=targets,
                                  johari=a["johari"], explain=a["explain"], include_breakdown=a["breakdown"],
                                  filters=pb.RetrieveFilters(namespaces=a["namespaces"]))

    def do_Retrieve(self, c: Caller, a: dict) -> None:
        words, _ = self.words(a["words"])
        targets, _ = self.words(a["targets"])
        sent = " ".join(words + targets)
        what = f"Retrieve {' '.join(words)!r} targets={targets} namespaces={a['namespaces']} johari={a['johari']}"
        code, details, events = self.rpc("Retrieve", self._retrieve_request(a, words, targets), c)
        if self.revoked(c, "Retrieve", code, details):
            return
        expected = "OK" if all(c.can_read(ns, 1) for ns in a["namespaces"]) else "PERMISSION_DENIED"
        # a target goal that names no goal the caller may see may be refused; the twin below checks
        # that an unreadable one is refused exactly like an unknown one
        refused_target = expected == "OK" and code == "INVALID_ARGUMENT" and bool(targets) and "target_goals" in details
        ok = self.check("Retrieve answers by the caller's scope", code == expected or refused_target, caller=c.name,
                        method="Retrieve", input=what, expected=expected, status=code, message=details[:200])
        self.no_leak(c, "Retrieve", what, "".join(str(e) for e in events or []), message=details, sent=sent)
        if ok and code == "OK":
            self._results(c, a, events, what, sent)
        hidden = [j for j, (kind, (ns, lvl), _) in enumerate(a["targets"]) if kind != "word" and not c.can_read(ns, lvl)]
        if hidden and code in ("OK", "INVALID_ARGUMENT"):
            swapped = list(targets)
            for j in hidden:
                swapped[j] = {"marker": "mkzzzzq9", "topic": "qzxvwkj", "goal": "nosuch/internal/g0"}[a["targets"][j][0]]
            code2, details2, events2 = self.rpc("Retrieve", self._retrieve_request(a, words, swapped), c)

            def shape(code_: str, details_: str, evs, names: list[str]):
                for t in sorted(set(names), key=len, reverse=True):
                    details_ = details_.replace(t, "<target>")
                return code_, details_, [(e.result.memory.id, round(e.result.score, 4), e.result.explanation)
                                         for e in evs or [] if e.WhichOneof("event") == "result"]

            first, second = shape(code, details, events, targets), shape(code2, details2, events2, swapped)
            self.check("a target goal the caller cannot see acts like an unknown one", first == second, caller=c.name,
                       method="Retrieve", input=what, unknown_targets=swapped, first=str(first)[:300], second=str(second)[:300])

    def _results(self, c: Caller, a: dict, events: list, what: str, sent: str) -> None:
        results = [e.result for e in events if e.WhichOneof("event") == "result"]
        summary = events[-1].summary if events and events[-1].WhichOneof("event") == "summary" else None
        for r in results:
            m = self.model.mems.get(r.memory.id)
            self.check("results come only from what the caller can read",
                       m is not None and c.can_read(m.ns, m.lvl) and (not a["namespaces"] or m.ns in a["namespaces"]),
                       caller=c.name, method="Retrieve", input=what, result=r.memory.id,
                       partition=f"{r.memory.input.namespace}/{r.memory.input.access_level}")
            if "goal '" in r.explanation:
                label = r.explanation.split("goal '", 1)[1].split("'", 1)[0]
                self.check("goal labels come only from readable partitions", not self.leaks(c, label), caller=c.name,
                           method="Retrieve", input=what, label=label)
        readable = len(self.model.readable(c))
        self.check("corpus_size counts only what the caller can read",
                   summary is not None and summary.corpus_size == readable, caller=c.name, method="Retrieve", input=what,
                   corpus_size=summary.corpus_size if summary else None, expected=readable)

    def do_NonInterference(self, c: Caller, a: dict) -> None:
        hidden = [(ns, lvl) for ns, lvl in PARTITIONS if not c.can_read(ns, lvl)]
        if c.revoked or not hidden:
            return
        words, named = self.words(a["words"])
        common = [w for w, n in zip(words, named) if not n] or [WORDS[a["pick"] % len(WORDS)], WORDS[a["pick"] // 7 % len(WORDS)]]
        words = words + [w for w in common if w not in words]
        req = pb.RetrieveRequest(text=" ".join(words), top_k=10, include_breakdown=True, explain=True)
        code, details, before = self.rpc("Retrieve", req, c)
        if code != "OK":
            return
        ns, lvl = hidden[a["pick"] % len(hidden)]
        admin = self.callers["admin"]
        items = []
        for j in range(3):
            # the query's plain words, in the hidden partition's own vocabulary (no other partition's words)
            content = f"{marker(ns, lvl)} {' '.join(common)} {' '.join(self.topics[(ns, lvl)])} {' '.join(common[::-1])} n{self.n}v{j}"
            items.append(pb.StoreBatchRequest(memory=pb.MemoryInput(content=content, namespace=ns, access_level=lvl)))
        code2, _, out = self.rpc("StoreBatch", items, admin)
        if code2 != "OK":
            return
        for it, got in zip(items, out.items):
            if got.id and not got.duplicate:
                self.model.add(got.id, Mem(ns, lvl, it.memory.content))
        _, _, after = self.rpc("Retrieve", req, c)

        def view(evs):
            rs = [e.result for e in evs or [] if e.WhichOneof("event") == "result"]
            return [(r.memory.id, r.score, dict(r.breakdown.spaces), r.explanation) for r in rs]

        v1, v2 = view(before), view(after)
        diff = sorted({k for (i1, s1, b1, e1), (i2, s2, b2, e2) in zip(v1, v2)
                       for k in set(b1) | set(b2) if abs(b1.get(k, 0) - b2.get(k, 0)) > 1e-4 * max(1.0, abs(b1.get(k, 0)))})
        same = [r[0] for r in v1] == [r[0] for r in v2] and all(
            abs(x[1] - y[1]) <= 1e-4 and x[3] == y[3] for x, y in zip(v1, v2)) and not diff
        self.check("memories the caller cannot read do not change its results or scores", same, caller=c.name,
                   method="Retrieve", input=f"{' '.join(words)!r}, then 3 memories with these words stored in {ns}/{LEVELS[lvl]}",
                   order_changed=[r[0] for r in v1] != [r[0] for r in v2], spaces_changed=diff,
                   top_score=f"{v1[0][1]:.5f} -> {v2[0][1]:.5f}" if v1 and v2 else "")


def _setup(ctx: Context, work) -> tuple[Server, dict[str, Caller], dict, dict]:
    data = work / "data"
    specs = [(n, r, w, lvl, ns) for n, r, w, lvl, ns in TOKENS + [REVOKED]]
    specs += [(f"probe-{ns}-{lvl}", [ns], [], lvl, ns) for ns, lvl in PARTITIONS]
    tokens = create_tokens_offline(data, specs)
    callers = {spec[0]: Caller(spec[0], tuple(spec[1]), tuple(spec[2]), spec[3], spec[4], tok)
               for spec, tok in zip(specs[:len(TOKENS) + 1], tokens)}
    probes = {(ns, lvl): tok for (ns, lvl), tok in zip(PARTITIONS, tokens[len(TOKENS) + 1:])}
    srv = Server(data, work, name="acl")
    srv.start()
    # while it runs: one token made with the CLI, and the revoked one revoked through it
    n, r, w, lvl, ns = CLI_TOKEN
    _, tok = create_token_cli(data, n, r, w, lvl, ns)
    callers[n] = Caller(n, tuple(r), tuple(w), lvl, ns, tok)
    revoke_token_cli(data, token_id(callers[REVOKED[0]].token))
    n, r, w, lvl, ns = REVOKED
    callers[n] = Caller(n, tuple(r), tuple(w), lvl, ns, callers[n].token, revoked=True)
    rng = ctx.rng("acl-topics")
    pool = list(WORDS)
    rng.shuffle(pool)
    topics = {p: [pool[(3 * k + j) % len(pool)] + "x" for j in range(3)] for k, p in enumerate(PARTITIONS)}
    return srv, callers, probes, topics


def run(ctx: Context) -> Part:
    part = Part("access_control", "4. access control")
    work = ctx.dir("acl")
    examples = ctx.pick(1600, 350)
    minimum = ctx.pick(4000, 800)
    budget = ctx.pick(420.0, 90.0)
    checker = None
    srv = None
    try:
        srv, callers, probes, topics = _setup(ctx, work)
        checker = Checker(srv, callers, probes, topics, part, ctx)
        admin = callers["admin"]
        for ns, lvl in PARTITIONS:  # the seed: every partition gets its goals
            items = [pb.StoreBatchRequest(memory=pb.MemoryInput(content=checker.content(ns, lvl), namespace=ns, access_level=lvl))
                     for _ in range(SEED_PER_PARTITION)]
            out = checker.s.StoreBatch(iter(items), metadata=admin.md, timeout=300)
            for it, got in zip(items, out.items):
                checker.model.add(got.id, Mem(ns, lvl, it.memory.content), dynamic=False)
        deadline = time.monotonic() + budget

        @seed(ctx.seed)
        @settings(max_examples=examples, database=None, deadline=None, phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck), derandomize=False, print_blob=False)
        @given(call)
        def prop(c) -> None:
            if time.monotonic() > deadline:
                raise Budget()
            name, op, args = c
            try:
                checker(name, op, args)
            except grpc.RpcError as exc:  # a call the checker did not expect to fail (e.g. a helper Get)
                checker.errors[f"{op}: {exc.code().name}"] += 1

        try:
            prop()
        except Budget:
            part.figures["stopped_early"] = "time budget"
    except Exception as exc:
        part.error = f"{type(exc).__name__}: {exc}"
    finally:
        if checker is not None:
            checker.ch.close()
        if srv is not None:
            srv.stop()
    checks = sum(checker.checks.values()) if checker else 0
    failed = sum(checker.failures.values()) if checker else 0
    if checker:
        part.figures.update({
            "calls": dict(checker.calls), "memories_in_model": len(checker.model.mems),
            "checks": dict(checker.checks), "failures": dict(checker.failures),
            "unexpected_rpc_errors": dict(checker.errors),
        })
    part.target("checks", f">= {minimum:,} property checks", checks, checks >= minimum if checks else None)
    part.target("failures", "0 property failures", f"{failed} of {checks}", (failed == 0) if checks else None)
    return part
