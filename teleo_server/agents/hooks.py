"""Claude Code lifecycle hooks: ``teleo hooks <Event>`` reads the hook's JSON payload on stdin and
answers on stdout in Claude Code's hook output format.

- **SessionStart**: the last session's summary, and the memories most related to it, as context.
- **UserPromptSubmit**: the memories most relevant to the prompt as context, within a character
  budget and a deadline; the prompt is then stored as an episodic memory of the session. When
  Teleo is down the hook prints nothing and exits 0: the prompt is never blocked.
- **PostToolUse**: selected tool results (edits, writes, commands with their output) stored with the
  session and the tool recorded; identical results are stored once (the server de-duplicates).
- **PreCompact** and **SessionEnd**: consolidation. Near-duplicate memories of the session (a word
  overlap proposes a pair, ``Compare``'s content perspectives above a threshold confirm it) are merged into one memory that
  ``supersedes`` them, and an extractive summary of the session is stored as a reflective memory.
- **SubagentStop**: what a subagent stored (its own namespace, ``<namespace>.agent-<id>``) is merged
  into the parent's namespace by one of four strategies: ``absorb`` (all of it, vectors reused),
  ``selective`` (its facts, procedures, conclusions and important memories), ``summarize`` (one
  extractive summary) or ``federated`` (left where it is, with a summary in the parent that points
  to it).

Memories go to one namespace per project (``project:<directory name>``, or ``--namespace``). A hook
never exits with status 2 (which would block Claude Code); any failure is one line on stderr.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from teleo_server.client import Client, ClientError, Filters, Link, Memory, MemoryInput

EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse", "PreCompact", "SessionEnd", "SubagentStop")
STRATEGIES = ("absorb", "selective", "summarize", "federated")
SUMMARY_KIND = "session-summary"
_NAMESPACE_CHARS = re.compile(r"[^A-Za-z0-9_.:-]+")
_WORD = re.compile(r"[^\W_]{2,}", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_STOP = frozenset("""a an and are as at be been but by can could did do does for from had has have he her his i if in
into is it its me my no not of on or our she so than that the their them then there these they this to too us was we
were what when where which who why will with would you your""".split())


@dataclass
class HookSettings:
    namespace: str = ""                 # "" = project:<directory name of the project>
    budget_chars: int = 6000            # the most context a hook adds (Claude Code caps hook output at 10,000)
    top_k: int = 128                    # enough that the budget, not the count, limits the context
    min_relevance: float = 0.01         # results less likely than this to be relevant are not injected
    store_prompts: bool = True
    tools: str = r"Edit|MultiEdit|Write|NotebookEdit|Bash"  # PostToolUse: the tools whose results are stored
    result_chars: int = 2000            # PostToolUse: the most of a tool's input and output kept
    merge_threshold: float = 0.9        # consolidation: content similarity (Compare) at or above which memories merge
    candidate_overlap: float = 0.5      # consolidation: word overlap (Jaccard) that proposes a pair to Compare
    max_consolidate: int = 200          # consolidation: the most recent memories of the session examined
    summary_sentences: int = 6
    summary_chars: int = 1500
    strategy: str = "selective"         # SubagentStop


@dataclass
class Outcome:
    """What a hook does: the JSON it prints (None: nothing) and a line for stderr (diagnostics)."""

    output: dict | None = None
    note: str = ""
    stored: list[str] = field(default_factory=list)


# --- names ----------------------------------------------------------------------------------------


def namespace_for(payload: Mapping[str, Any], settings: HookSettings, project_dir: str | None = None) -> str:
    """The project's namespace: ``settings.namespace`` or ``project:<directory name>``."""
    if settings.namespace:
        return settings.namespace
    root = project_dir or payload.get("cwd") or "."
    name = _NAMESPACE_CHARS.sub("-", Path(root).resolve().name or "root").strip("-") or "root"
    return f"project:{name}"[:128]


def subagent_namespace(parent: str, agent_id: str) -> str:
    """Where a subagent's memories go until SubagentStop merges them."""
    tail = _NAMESPACE_CHARS.sub("-", agent_id).strip("-")[:40] or "agent"
    return f"{parent[: 128 - len(tail) - 7]}.agent-{tail}"


def event_name(text: str) -> str:
    """``SessionStart`` for ``SessionStart``, ``session-start`` or ``sessionstart``; ValueError otherwise."""
    key = text.replace("-", "").replace("_", "").lower()
    for name in EVENTS:
        if name.lower() == key:
            return name
    raise ValueError(f"unknown hook event {text!r}; use one of {', '.join(EVENTS)}")


# --- text -----------------------------------------------------------------------------------------


def _words(text: str) -> set[str]:
    return {w for w in (m.group(0).casefold() for m in _WORD.finditer(text)) if w not in _STOP}


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


MAX_CONTENT_BYTES = 60_000  # under the server's default limits.max_content_bytes (64 KiB)


def _fit(text: str, limit: int = MAX_CONTENT_BYTES) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8 (the server limits content in bytes)."""
    data = text.encode("utf-8")
    return text if len(data) <= limit else data[:limit].decode("utf-8", errors="ignore")


def _cut(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit * 0.6 else cut).rstrip() + "…"


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if len(s.strip()) >= 12]


def extractive_summary(texts: Sequence[str], max_sentences: int, max_chars: int) -> str:
    """The sentences most central to ``texts`` (by the session-wide frequency of their words, with a
    penalty for words already covered), in their original order, within ``max_chars``."""
    pool: list[tuple[int, str, list[str]]] = []
    for text in texts:
        for s in sentences(text):
            words = [w for w in (m.group(0).casefold() for m in _WORD.finditer(s)) if w not in _STOP]
            if words and not any(s == p for _, p, _ in pool):
                pool.append((len(pool), s, words))
    if not pool:
        return ""
    freq = Counter(w for _, _, words in pool for w in set(words))
    chosen: list[tuple[int, str]] = []
    covered: set[str] = set()
    used = 0
    while pool and len(chosen) < max_sentences:
        def gain(item: tuple[int, str, list[str]]) -> float:
            fresh = [w for w in set(item[2]) if w not in covered]
            return sum(math.log1p(freq[w]) for w in fresh) / math.sqrt(len(item[2]) + 1)

        best = max(pool, key=gain)
        pool.remove(best)
        if gain(best) <= 0:
            break
        s = _cut(best[1], max(80, max_chars // 3))
        if used + len(s) + 1 > max_chars:
            continue
        chosen.append((best[0], s))
        covered.update(best[2])
        used += len(s) + 1
    return " ".join(s for _, s in sorted(chosen))


def _when(m: Memory) -> str:
    moment = m.event_time or m.ingestion_time
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d") if moment else ""


def render(title: str, memories: Iterable[tuple[Memory, float | None]], budget: int) -> str:
    """A context block: a title line and one line per memory (date, type, relevance) within ``budget``."""
    lines = [title]
    used = len(title)
    for m, relevance in memories:
        rel = f", relevance {relevance:.2f}" if relevance is not None else ""
        head = f"- [{_when(m)}, {m.memory_type}{rel}, id {m.id[:12]}] "
        room = budget - used - len(head) - 1
        if room < 40:
            break
        line = head + _cut(" ".join(m.content.split()), min(room, 1200))
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines) if len(lines) > 1 else ""


def _context(event: str, text: str) -> dict | None:
    if not text:
        return None
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}


# --- the hooks ------------------------------------------------------------------------------------


class Hooks:
    """The hook handlers over one client. ``run(event, payload)`` never raises for a server failure:
    it returns an Outcome whose note says what failed."""

    def __init__(self, client: Client, settings: HookSettings | None = None, project_dir: str | None = None,
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.client = client
        self.settings = settings or HookSettings()
        self.project_dir = project_dir
        self.now = now

    def run(self, event: str, payload: Mapping[str, Any]) -> Outcome:
        handler = {"SessionStart": self.session_start, "UserPromptSubmit": self.user_prompt_submit,
                   "PostToolUse": self.post_tool_use, "PreCompact": self.pre_compact,
                   "SessionEnd": self.session_end, "SubagentStop": self.subagent_stop}[event]
        try:
            return handler(payload)
        except ClientError as exc:
            return Outcome(note=f"Teleo at {self.client.address}: {exc}; continuing without memory")

    def _ns(self, payload: Mapping[str, Any]) -> str:
        return namespace_for(payload, self.settings, self.project_dir)

    # SessionStart ---------------------------------------------------------------------------------

    def session_start(self, payload: Mapping[str, Any]) -> Outcome:
        ns = self._ns(payload)
        s = self.settings
        summaries = [m for m in self.client.memories(Filters(namespaces=[ns], memory_types=["reflective"],
                                                             metadata={"kind": SUMMARY_KIND}))]
        session = payload.get("session_id", "")
        # on resume or after compaction, this session's own summary comes first
        summaries.sort(key=lambda m: (m.session_id == session and payload.get("source") in ("resume", "compact"),
                                      m.event_time or m.ingestion_time or datetime.min.replace(tzinfo=timezone.utc)))
        last = summaries[-1] if summaries else None
        query = last.content if last is not None else f"{ns.split(':', 1)[-1]} decisions conventions open tasks"
        hits = self.client.search(query, top_k=s.top_k, filters=Filters(namespaces=[ns])).results
        related = [(r.memory, r.relevance) for r in hits
                   if (last is None or r.memory.id != last.id) and r.relevance >= s.min_relevance]
        parts = []
        if last is not None:
            parts.append(f"Teleo memory, last session summary ({_when(last)}): {_cut(last.content, s.budget_chars // 3)}")
        block = render(f"Teleo memories related to {'it' if last is not None else 'this project'} (namespace {ns}):",
                       related, s.budget_chars - sum(len(p) + 1 for p in parts))
        if block:
            parts.append(block)
        return Outcome(output=_context("SessionStart", "\n".join(parts)))

    # UserPromptSubmit -----------------------------------------------------------------------------

    def user_prompt_submit(self, payload: Mapping[str, Any]) -> Outcome:
        ns, s = self._ns(payload), self.settings
        prompt = str(payload.get("prompt") or "").strip()
        if not prompt:
            return Outcome()
        query = prompt if len(prompt.encode()) <= 8000 else prompt.encode()[:8000].decode(errors="ignore")
        hits = self.client.search(query, top_k=s.top_k, filters=Filters(namespaces=[ns]),
                                  overrides={"min_relevance": s.min_relevance})
        text = render(f"Relevant memories from Teleo (namespace {ns}; relevance is a calibrated probability):",
                      ((r.memory, r.relevance) for r in hits.results), s.budget_chars)
        out = Outcome(output=_context("UserPromptSubmit", text))
        if s.store_prompts:
            try:  # storing the prompt is bookkeeping: its failure must not cost the context found
                stored = self.client.store(MemoryInput(content=_fit(prompt), namespace=ns, memory_type="episodic",
                                                       source="user", session_id=str(payload.get("session_id", ""))[:256],
                                                       metadata={"hook": "UserPromptSubmit"}))
                out.stored.append(stored.id)
            except ClientError as exc:
                out.note = f"the prompt was not stored ({exc})"
        return out

    # PostToolUse ----------------------------------------------------------------------------------

    def post_tool_use(self, payload: Mapping[str, Any]) -> Outcome:
        s = self.settings
        tool = str(payload.get("tool_name") or "")
        if not tool or not re.fullmatch(s.tools, tool):
            return Outcome()
        content, meta = tool_memory(tool, payload.get("tool_input") or {}, payload.get("tool_response"), s.result_chars)
        if not content:
            return Outcome()
        ns = self._ns(payload)
        if payload.get("agent_id"):
            ns = subagent_namespace(ns, str(payload["agent_id"]))
            meta["agent_type"] = str(payload.get("agent_type") or "")[:200]
        meta["hook"] = "PostToolUse"
        stored = self.client.store(MemoryInput(content=content, namespace=ns, memory_type="episodic",
                                               source=f"claude-code:{tool}"[:512],
                                               session_id=str(payload.get("session_id", ""))[:256], metadata=meta))
        return Outcome(stored=[stored.id])

    # consolidation --------------------------------------------------------------------------------

    def pre_compact(self, payload: Mapping[str, Any]) -> Outcome:
        return self.consolidate(payload, trigger=f"pre_compact:{payload.get('trigger') or 'auto'}")

    def session_end(self, payload: Mapping[str, Any]) -> Outcome:
        return self.consolidate(payload, trigger=f"session_end:{payload.get('reason') or 'other'}")

    def consolidate(self, payload: Mapping[str, Any], trigger: str) -> Outcome:
        ns, session = self._ns(payload), str(payload.get("session_id", ""))[:256]
        if not session:
            return Outcome(note="no session_id in the payload; nothing to consolidate")
        memories = [m for m in self.client.memories(Filters(namespaces=[ns], session_id=session))
                    if m.metadata.get("kind") != SUMMARY_KIND]
        merged, removed = self.merge_duplicates(memories[-self.settings.max_consolidate:], ns, session)
        kept = [m for m in memories if m.id not in removed] + merged
        out = Outcome(stored=[m.id for m in merged],
                      note=f"merged {len(removed)} near-duplicate memories into {len(merged)}")
        summary = self.summarize(kept, ns, session, {"kind": SUMMARY_KIND, "trigger": trigger},
                                 title="Session summary")
        if summary:
            out.stored.append(summary)
        return out

    def merge_duplicates(self, memories: Sequence[Memory], ns: str, session: str) -> tuple[list[Memory], set[str]]:
        """Merge groups of near-duplicates; returns the merged memories and the ids they replaced."""
        s = self.settings
        words = {m.id: _words(m.content) for m in memories}
        parent = {m.id: m.id for m in memories}

        def root(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for i, a in enumerate(memories):
            for b in memories[i + 1:]:
                if root(a.id) == root(b.id) or _jaccard(words[a.id], words[b.id]) < s.candidate_overlap:
                    continue
                if content_similarity(self.client.compare(a.id, b.id).spaces) >= s.merge_threshold:
                    parent[root(b.id)] = root(a.id)
        groups: dict[str, list[Memory]] = {}
        for m in memories:
            groups.setdefault(root(m.id), []).append(m)
        merged: list[Memory] = []
        removed: set[str] = set()
        for group in (g for g in groups.values() if len(g) > 1):
            group.sort(key=lambda m: len(m.content), reverse=True)
            base, others = group[0], group[1:]
            extra = [x for m in others for x in sentences(m.content) if x not in base.content]
            content = base.content + ("\n" + "\n".join(dict.fromkeys(extra)) if extra else "")
            fields: dict[str, Any] = {
                "metadata": {**{k: v for m in reversed(group) for k, v in m.metadata.items()}, "kind": "consolidated"},
                "links": [*base.links, *(Link(m.id, "supersedes") for m in others)][:64],
            }
            if content != base.content:
                fields["content"] = _fit(content)
            # the longest keeps its id and takes in what the others add; they are removed only after
            updated = self.client.update(base.id, **fields).memory
            self.client.delete([m.id for m in others])
            merged.append(updated)
            removed.update(m.id for m in group)
        return merged, removed

    def summarize(self, memories: Sequence[Memory], ns: str, session: str, metadata: dict[str, str],
                  title: str) -> str | None:
        """Store an extractive summary of ``memories`` as a reflective memory in ``ns``, linked to those
        of them that are in ``ns`` (links stay within a namespace); returns its id."""
        s = self.settings
        text = extractive_summary([m.content for m in memories], s.summary_sentences, s.summary_chars)
        if not text:
            return None
        content = f"{title} ({self.now().strftime('%Y-%m-%d')}, {len(memories)} memories): {text}"
        stored = self.client.store(MemoryInput(content=content, namespace=ns, memory_type="reflective",
                                               source="teleo-hooks", session_id=session, metadata=metadata,
                                               importance=0.7,
                                               links=[Link(m.id, "relates_to", 0.5) for m in memories
                                                      if m.namespace == ns][-64:]))
        return stored.id

    # SubagentStop ---------------------------------------------------------------------------------

    def subagent_stop(self, payload: Mapping[str, Any]) -> Outcome:
        s = self.settings
        parent = self._ns(payload)
        agent_id = str(payload.get("agent_id") or "")
        if not agent_id:
            return Outcome(note="no agent_id in the payload; nothing to merge")
        sub = subagent_namespace(parent, agent_id)
        session = str(payload.get("session_id", ""))[:256]
        agent_type = str(payload.get("agent_type") or "subagent")[:200]
        final = str(payload.get("last_assistant_message") or "").strip()
        meta = {"agent_id": agent_id[:200], "agent_type": agent_type, "hook": "SubagentStop"}
        if final:
            self.client.store(MemoryInput(content=_fit(final), namespace=sub, memory_type="reflective",
                                          source=f"subagent:{agent_type}", session_id=session, metadata=meta))
        items = list(self.client.export(Filters(namespaces=[sub]), with_embeddings=s.strategy in ("absorb", "selective")))
        if not items:
            return Outcome(note=f"subagent {agent_id} stored nothing")
        if s.strategy == "federated":
            summary = self.summarize([e.memory for e in items], parent, session,
                                     {**meta, "kind": "subagent-summary", "federated_namespace": sub},
                                     title=f"Subagent {agent_type} ({agent_id}) worked in namespace {sub}")
            return Outcome(stored=[summary] if summary else [], note=f"left {len(items)} memories in {sub}")
        if s.strategy == "summarize":
            summary = self.summarize([e.memory for e in items], parent, session, {**meta, "kind": "subagent-summary"},
                                     title=f"Subagent {agent_type} summary")
            stored = [summary] if summary else []
        else:
            chosen = items if s.strategy == "absorb" else [e for e in items if _worth_keeping(e.memory)]
            moved = [replace(e, memory=replace(e.memory, namespace=parent,
                                               metadata={**e.memory.metadata, "agent_id": agent_id[:200],
                                                         "agent_type": agent_type}))
                     for e in chosen]
            result = self.client.import_(moved) if moved else None
            if result is not None and result.failed:
                first = next(i for i in result.items if i.error)
                return Outcome(note=f"merge of {sub} failed for {result.failed} memories ({first.error_code}: "
                                    f"{first.error}); they stay in {sub}")
            stored = [i.id for i in result.items] if result is not None else []
        self.client.delete_where(Filters(namespaces=[sub]))
        return Outcome(stored=stored, note=f"{s.strategy}: {len(stored)} of {len(items)} memories into {parent}")


# Compare's perspectives on what a memory says (not on when it was stored, which is the same for a
# session's memories): their mean decides whether two memories are near-duplicates.
CONTENT_SPACES = ("E1_semantic", "E12_late", "E13_splade", "E9_hdc")


def content_similarity(spaces: Mapping[str, float]) -> float:
    """The mean of Compare's similarities over the content perspectives it returned (0 if none)."""
    values = [spaces[name] for name in CONTENT_SPACES if name in spaces]
    return sum(values) / len(values) if values else 0.0


def _worth_keeping(m: Memory) -> bool:
    """``selective``: facts, procedures, conclusions, and anything marked important."""
    return m.memory_type in ("semantic", "procedural", "reflective") or (m.importance or 0.0) >= 0.6


def tool_memory(tool: str, tool_input: Mapping[str, Any], response: Any, limit: int) -> tuple[str, dict[str, str]]:
    """The memory text and metadata of one tool call (empty text: nothing worth storing)."""
    path = str(tool_input.get("file_path") or tool_input.get("notebook_path") or "")
    meta = {"tool": tool[:200]}
    if path:
        meta["file"] = path[:4000]
    half = max(40, limit // 2)
    if tool == "Write":
        return f"Wrote {path}:\n{_cut(str(tool_input.get('content') or ''), limit)}", meta
    if tool == "Edit":
        return (f"Edited {path}: replaced {_cut(str(tool_input.get('old_string') or ''), half)!r} with "
                f"{_cut(str(tool_input.get('new_string') or ''), half)!r}"), meta
    if tool == "MultiEdit":
        edits = tool_input.get("edits") or []
        parts = [f"{_cut(str(e.get('old_string') or ''), 200)!r} -> {_cut(str(e.get('new_string') or ''), 200)!r}"
                 for e in edits if isinstance(e, Mapping)]
        return _cut(f"Edited {path} ({len(parts)} edits): " + "; ".join(parts), limit), meta
    if tool == "Bash":
        command = str(tool_input.get("command") or "")
        if not command:
            return "", meta
        out = response if isinstance(response, Mapping) else {"stdout": str(response or "")}
        stdout, stderr = str(out.get("stdout") or ""), str(out.get("stderr") or "")
        text = f"Ran `{_cut(command, half)}`"
        if out.get("interrupted"):
            text += " (interrupted)"
        if stdout.strip():
            text += f"\nOutput:\n{_cut(stdout, half)}"
        if stderr.strip():
            text += f"\nErrors:\n{_cut(stderr, half // 2)}"
        return text, meta
    shown_input = json.dumps(tool_input, ensure_ascii=False, sort_keys=True, default=str)
    shown_output = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False, default=str)
    return _cut(f"{tool} {_cut(shown_input, half)}\nResult: {shown_output}", limit), meta


def read_payload(stream: Any = None) -> dict:
    """The hook's JSON payload from stdin; ValueError says what is wrong with it."""
    raw = (stream or sys.stdin).read()
    try:
        payload = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"the hook payload on stdin is not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(payload, dict):
        raise ValueError("the hook payload on stdin is not a JSON object")
    return payload


__all__ = [
    "EVENTS",
    "CONTENT_SPACES",
    "HookSettings",
    "Hooks",
    "Outcome",
    "STRATEGIES",
    "content_similarity",
    "event_name",
    "extractive_summary",
    "namespace_for",
    "read_payload",
    "render",
    "sentences",
    "subagent_namespace",
    "tool_memory",
]
