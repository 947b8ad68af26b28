"""``teleo mcp``: a Model Context Protocol server that gives an agent Teleo's memory as tools.

It talks to a running Teleo server through the client library, with a token, over stdio (what
Claude Code, Claude Desktop and Cursor launch) or streamable HTTP (``--transport http``, served at
``http://HOST:PORT/mcp``). Every failure comes back as a tool error carrying the gRPC status name and
the server's message, so the model can read what went wrong and try again; the MCP server itself
never exits because a call failed.

Tools: memory_store, memory_search, memory_get, memory_update, memory_delete, memory_compare,
memory_feedback.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from teleo_server.client import Client, ClientError, Filters, MemoryInput
from teleo_server.client import Memory as ClientMemory
from teleo_server.client.convert import with_links

MemoryType = Literal["episodic", "semantic", "procedural", "working", "reflective"]
Aggregation = Literal["weighted_average", "rrf", "max", "min", "geometric_mean"]

INSTRUCTIONS = """\
Teleo is this agent's long-term memory. Search it before answering questions about earlier work,
decisions, preferences or facts that may have been stored before (memory_search), and store what
is worth remembering later: decisions, facts learnt, user preferences, outcomes of tasks
(memory_store). When a stored fact changes, update it (memory_update) rather than storing a
contradicting copy; when you store a change as a new note, name the memories it replaces
(`supersedes`): memory_store lists the earlier memories the new one probably updates
(`possible_updates`), and you decide which it really replaces. Each search result carries
`relevance`, a calibrated probability that it is relevant: below about 0.2 treat it as a weak hint,
not as a fact. After using a result, report it with memory_feedback so that useful memories rank
higher."""


class PossibleUpdate(BaseModel):
    id: str
    content: str
    similarity: float = Field(description="cosine of the two memories' sentence vectors")


class StoredMemory(BaseModel):
    id: str = Field(description="the memory's id (use it with memory_get, memory_update, memory_delete)")
    duplicate: bool = Field(description="true if the namespace already held this exact content; id is the existing memory")
    possible_updates: list[PossibleUpdate] = Field(
        default_factory=list,
        description="earlier memories this one probably updates (not linked): if it replaces one of them, call "
                    "memory_update with this id and supersedes=[that id]")


class MemoryOut(BaseModel):
    id: str
    content: str
    namespace: str
    memory_type: str
    event_time: str | None = Field(None, description="when it happened (ISO 8601, UTC)")
    source: str = ""
    session_id: str = ""
    metadata: dict[str, str] = Field(default_factory=dict)
    importance: float | None = None
    links: list[dict[str, Any]] = Field(default_factory=list, description="typed links to other memories")
    used_count: int = 0
    helpful_count: int = 0
    misled_count: int = 0
    purpose: dict[str, Any] | None = Field(None, description="with purpose: the goal it serves best, its alignment to "
                                           "every goal, and its similarity to that goal's memories in each space")


class SearchHit(BaseModel):
    rank: int
    id: str
    relevance: float = Field(description="calibrated probability in [0, 1] that this memory is relevant")
    score: float = Field(description="relative score within this search (the best result is near 1)")
    content: str = Field(description="the memory's text (or its best-matching passage when snippets is on)")
    namespace: str
    memory_type: str
    event_time: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    explanation: str = Field("", description="why it matched (when explain is on)")
    misaligned: bool = Field(False, description="its purpose is far from the goals searched for (or the agent's goals)")
    johari: str = Field("", description="open (on-goal, used), blind (on-goal, never used), hidden (used, off-goal) "
                                        "or unknown")


class SearchOut(BaseModel):
    results: list[SearchHit]
    request_id: str = Field(description="pass it to memory_feedback for the results you use")
    profile: str
    degraded: bool = Field(description="true if embedding was unavailable and the search was lexical only")
    searched: int = Field(description="how many memories this token could search")


class UpdatedMemory(BaseModel):
    memory: MemoryOut
    previous_id: str = Field(description="the kept old version when keep_previous is true, else empty")


class Deleted(BaseModel):
    deleted: int


class Comparison(BaseModel):
    aggregate: float = Field(description="the per-perspective similarities combined, in [0, 1]")
    aggregation: str
    spaces: dict[str, float] = Field(description="similarity in each perspective (semantic, lexical, ...), in [0, 1]")


class Counters(BaseModel):
    id: str
    retrieved_count: int
    used_count: int
    helpful_count: int
    misled_count: int


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment is not None else None


def _memory_out(m: ClientMemory) -> MemoryOut:
    p = m.purpose
    return MemoryOut(id=m.id, content=m.content, namespace=m.namespace, memory_type=m.memory_type,
                     event_time=_iso(m.event_time), source=m.source, session_id=m.session_id, metadata=m.metadata,
                     importance=m.importance,
                     links=[{"target_id": link.target_id, "type": link.type, "weight": link.weight} for link in m.links],
                     used_count=m.used_count, helpful_count=m.helpful_count, misled_count=m.misled_count,
                     purpose=None if p is None else {
                         "goal_id": p.goal_id, "goal_label": p.goal_label, "alignment": round(p.alignment, 4),
                         "goal_alignment": {g: round(v, 4) for g, v in p.goal_alignment.items()},
                         "space_alignment": {n: round(v, 4) for n, v in p.space_alignment.items()}})


def build(client: Client, *, namespace: str = "", name: str = "teleo"):
    """The MCP server (an ``MCPServer``) whose tools call ``client``; ``namespace`` is the default
    for stores and searches that name none."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    from teleo_server import __version__

    default_namespace = namespace
    server = MCPServer(name, instructions=INSTRUCTIONS, version=__version__)
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

    def call(fn, *args: Any, **kwargs: Any) -> Any:
        """Run a client call; its failure becomes a tool error the model can read."""
        try:
            return fn(*args, **kwargs)
        except ClientError as exc:
            raise ToolError(f"{exc.code}: {exc.message}") from None
        except (ValueError, TypeError) as exc:
            raise ToolError(f"INVALID_ARGUMENT: {exc}") from None

    @server.tool(annotations=writes)
    def memory_store(
        content: Annotated[str, Field(description="the text to remember: one self-contained fact, decision, event or "
                                                  "instruction, written so it makes sense on its own later")],
        memory_type: Annotated[MemoryType, Field(description="episodic: something that happened; semantic: a fact; "
                                                             "procedural: how to do something; working: short-lived task "
                                                             "state; reflective: a conclusion or summary")] = "semantic",
        namespace: Annotated[str, Field(description="where to store it (empty: the default namespace)")] = "",
        metadata: Annotated[dict[str, str] | None, Field(description="string labels to filter on later, e.g. "
                                                                     "{\"project\": \"billing\"}")] = None,
        importance: Annotated[float | None, Field(ge=0, le=1, description="how important, 0..1 (default 0.5)")] = None,
        source: Annotated[str, Field(description="where it came from: a tool, a file, a URL, \"user\"")] = "",
        session_id: Annotated[str, Field(description="the conversation or task it belongs to")] = "",
        evergreen: Annotated[bool, Field(description="true for facts that do not age (exempt from recency decay)")] = False,
        supersedes: Annotated[list[str] | None, Field(max_length=64, description="ids of earlier memories this one "
                                                                                 "replaces (the fact changed)")] = None,
    ) -> StoredMemory:
        """Store a memory for later retrieval. Storing the same text twice in a namespace keeps one copy.
        The answer lists earlier memories the new one probably updates; link those it replaces."""
        memory = MemoryInput(content=content, namespace=namespace or default_namespace, memory_type=memory_type,
                             metadata=metadata or {}, importance=importance, source=source, session_id=session_id,
                             evergreen=evergreen, links=with_links((), supersedes or ()))
        out = call(client.store, memory)
        return StoredMemory(id=out.id, duplicate=out.duplicate,
                            possible_updates=[PossibleUpdate(id=h.id, content=h.content, similarity=round(h.similarity, 4))
                                              for h in out.possible_updates])

    @server.tool(annotations=read_only)
    def memory_search(
        query: Annotated[str, Field(description="what to look for, in natural language or keywords")],
        top_k: Annotated[int, Field(ge=1, le=50, description="how many results")] = 5,
        profile: Annotated[str, Field(description="retrieval system: \"teleological\" (default, most accurate), "
                                                  "\"hybrid\", \"openclaw\" (fast vector+keyword), \"entry_point\" "
                                                  "(starts from the perspective the others agree with most), "
                                                  "\"hipporag\" (routes the question, follows links between "
                                                  "memories, drops superseded facts)")] = "",
        namespaces: Annotated[list[str] | None, Field(description="only these namespaces (default: the default "
                                                                  "namespace if one is set, else all you may read)")] = None,
        memory_types: Annotated[list[MemoryType] | None, Field(description="only these memory types")] = None,
        since: Annotated[str | None, Field(description="only memories that happened at or after this ISO 8601 time")] = None,
        until: Annotated[str | None, Field(description="only memories that happened before this ISO 8601 time")] = None,
        metadata: Annotated[dict[str, str] | None, Field(description="only memories with these exact labels")] = None,
        min_relevance: Annotated[float | None, Field(ge=0, le=1, description="drop results whose calibrated "
                                                                             "relevance is lower")] = None,
        explain: Annotated[bool, Field(description="say why each result matched")] = False,
        snippets: Annotated[bool, Field(description="return each memory's best-matching passage instead of "
                                                    "its whole text (for long memories)")] = False,
        target_goals: Annotated[list[str] | None, Field(description="goal ids or labels to align the results "
                                                                    "with (default: all emergent goals)")] = None,
        johari: Annotated[list[Literal["open", "blind", "hidden", "unknown"]] | None,
                          Field(description="keep only these Johari quadrants; \"blind\" finds on-goal memories "
                                            "that were never used")] = None,
        include_historical: Annotated[bool, Field(description="also return memories that a newer one superseded or "
                                                              "that lost a contradiction (the hipporag profile "
                                                              "leaves them out otherwise)")] = False,
        as_of: Annotated[str | None, Field(description="what was true at this ISO 8601 time: only memories that "
                                                       "had happened by then, and only the supersessions made "
                                                       "by then")] = None,
    ) -> SearchOut:
        """Search the memories you may read; the best first, each with a calibrated relevance. For the
        history of a fact, set include_historical; for what was true at a past moment, set as_of."""
        where = Filters(namespaces=namespaces or ([default_namespace] if default_namespace else []),
                        memory_types=memory_types or [],
                        since=_moment(since, "since", ToolError), until=_moment(until, "until", ToolError),
                        metadata=metadata or {})
        overrides = {"min_relevance": min_relevance} if min_relevance is not None else None
        found = call(client.search, query, top_k=top_k, profile=profile, filters=where, overrides=overrides,
                     explain=explain, snippets=snippets, omit_content=snippets, target_goals=target_goals or (),
                     johari=johari or (), include_historical=include_historical,
                     as_of_event=_moment(as_of, "as_of", ToolError))
        return SearchOut(
            results=[SearchHit(rank=r.rank, id=r.memory.id, relevance=round(r.relevance, 4), score=round(r.score, 4),
                               content=r.snippet if snippets else r.memory.content, namespace=r.memory.namespace,
                               memory_type=r.memory.memory_type, event_time=_iso(r.memory.event_time),
                               metadata=r.memory.metadata, explanation=r.explanation, misaligned=r.misaligned,
                               johari=r.johari)
                     for r in found.results],
            request_id=found.summary.request_id, profile=found.summary.profile, degraded=found.summary.degraded,
            searched=found.summary.corpus_size)

    @server.tool(annotations=read_only)
    def memory_get(
        ids: Annotated[list[str], Field(min_length=1, max_length=100, description="memory ids")],
        purpose: Annotated[bool, Field(description="also what each memory serves among the emergent goals")] = False,
    ) -> list[MemoryOut]:
        """Fetch memories by id, with their labels, links and usage counters (and, with purpose, the
        goal each serves; none until enough memories have been stored for goals to emerge)."""
        return [_memory_out(m) for m in call(client.get, ids, purpose=purpose)]

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                                             open_world_hint=False))
    def memory_update(
        id: Annotated[str, Field(description="the memory to change")],
        content: Annotated[str | None, Field(description="the corrected text (it is re-embedded)")] = None,
        metadata: Annotated[dict[str, str] | None, Field(description="replaces the labels")] = None,
        importance: Annotated[float | None, Field(ge=0, le=1)] = None,
        keep_previous: Annotated[bool, Field(description="keep the old text as a memory of its own, which the "
                                                         "updated one supersedes (a history of the fact)")] = True,
        supersedes: Annotated[list[str] | None, Field(max_length=64, description="ids of earlier memories this one "
                                                                                 "replaces, added to its links")] = None,
    ) -> UpdatedMemory:
        """Correct a stored memory when the fact it records has changed, or link it to the earlier
        memories it replaces (supersedes)."""
        fields = {k: v for k, v in (("content", content), ("metadata", metadata), ("importance", importance))
                  if v is not None}
        # one Update: the fields, and the supersedes links added to the ones the memory has then
        out = call(client.update, id, keep_previous=keep_previous and "content" in fields,
                   add_links=with_links((), supersedes or ()), **fields)
        return UpdatedMemory(memory=_memory_out(out.memory), previous_id=out.previous_id)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                                             open_world_hint=False))
    def memory_delete(
        ids: Annotated[list[str], Field(min_length=1, max_length=100, description="memory ids to delete")],
    ) -> Deleted:
        """Delete memories by id. All must exist and be yours to change, or nothing is deleted."""
        return Deleted(deleted=call(client.delete, ids))

    @server.tool(annotations=read_only)
    def memory_compare(
        id_a: Annotated[str, Field(description="first memory id")],
        id_b: Annotated[str, Field(description="second memory id")],
        aggregation: Annotated[Aggregation, Field(description="how the per-perspective similarities are "
                                                              "combined")] = "weighted_average",
    ) -> Comparison:
        """How similar two memories are in each perspective (meaning, words, time, ...): use it to spot
        duplicates or contradictions before storing or updating."""
        out = call(client.compare, id_a, id_b, aggregation=aggregation)
        return Comparison(aggregate=round(out.aggregate, 4), aggregation=out.aggregation,
                          spaces={k: round(v, 4) for k, v in out.spaces.items()})

    @server.tool(annotations=writes)
    def memory_feedback(
        id: Annotated[str, Field(description="a memory returned by memory_search")],
        used: Annotated[bool, Field(description="you used it in your answer or work")] = True,
        helpful: Annotated[bool | None, Field(description="true if it helped, false if it was wrong or misleading")] = None,
        request_id: Annotated[str, Field(description="the request_id of the search it came from")] = "",
    ) -> Counters:
        """Report that a search result was used, helped or misled; it shapes future rankings."""
        m = call(client.feedback, id, used=used, helpful=helpful, request_id=request_id)
        return Counters(id=m.id, retrieved_count=m.retrieved_count, used_count=m.used_count,
                        helpful_count=m.helpful_count, misled_count=m.misled_count)

    return server


def _moment(text: str | None, name: str, error: type[Exception]) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise error(f"INVALID_ARGUMENT: {name}: {text!r} is not an ISO 8601 time; write e.g. 2024-05-01 or "
                    "2024-05-01T13:30:00Z") from None
    return moment if moment.tzinfo else moment.astimezone()


def serve(client: Client, *, namespace: str = "", transport: str = "stdio", host: str = "127.0.0.1",
          port: int = 8765) -> None:
    """Run until the client disconnects (stdio) or the process is stopped (HTTP)."""
    server = build(client, namespace=namespace)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)


__all__ = ["Comparison", "Counters", "Deleted", "INSTRUCTIONS", "MemoryOut", "PossibleUpdate", "SearchHit", "SearchOut",
           "StoredMemory", "UpdatedMemory", "build", "serve"]
