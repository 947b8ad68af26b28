"""Between the client's dataclasses and the protobuf messages of ``teleo.v1``: requests out,
responses in, and the JSON form of memories and exports (protobuf's JSON mapping, the format of
``teleo export`` files)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from teleo.v1 import memory_pb2 as pb

from teleo_server.client.types import (
    BatchItem,
    BatchResult,
    Breakdown,
    Comparison,
    ConflictPair,
    EntryPoint,
    Event,
    Exported,
    ExportedChunk,
    Filters,
    Goal,
    GoalSnapshot,
    Head,
    HeadVector,
    Link,
    Memory,
    MemoryInput,
    NamespaceStats,
    Overrides,
    Provenance,
    Purpose,
    QueryVectors,
    Result,
    Stage,
    Stats,
    StoreResult,
    Summary,
    TimeBoosts,
    UpdateHint,
    UpdateResult,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ENUMS = {  # python name -> (protobuf enum, prefix of its value names, what it is called in messages)
    "memory_type": (pb.MemoryType, "MEMORY_TYPE_", "memory type"),
    "access_level": (pb.AccessLevel, "ACCESS_LEVEL_", "access level"),
    "link_type": (pb.LinkType, "LINK_TYPE_", "link type"),
    "johari": (pb.JohariQuadrant, "JOHARI_QUADRANT_", "Johari quadrant"),
    "aggregation": (pb.Aggregation, "AGGREGATION_", "aggregation"),
}


def enum_number(kind: str, name: str | int | None) -> int:
    """The wire number of an enum value given by its short name in any case (``"episodic"``,
    ``"weighted-average"``), its full name, or its number; 0 for None or ""."""
    enum, prefix, what = _ENUMS[kind]
    if name is None or name == "":
        return 0
    if isinstance(name, int) and not isinstance(name, bool):
        if name in enum.values():
            return name
    elif isinstance(name, str):
        wanted = name.strip().upper().replace("-", "_")
        for candidate in (prefix + wanted, wanted):
            if candidate in enum.keys() and not candidate.endswith("UNSPECIFIED"):
                return enum.Value(candidate)
    valid = ", ".join(enum_names(kind))
    raise ValueError(f"unknown {what} {name!r}; use one of {valid}")


def enum_name(kind: str, number: int) -> str:
    """The short lower-case name of an enum value; "" for UNSPECIFIED."""
    enum, prefix, _ = _ENUMS[kind]
    if not number:
        return ""
    return enum.Name(number).removeprefix(prefix).lower()


def enum_names(kind: str) -> list[str]:
    enum, prefix, _ = _ENUMS[kind]
    return [n.removeprefix(prefix).lower() for n in enum.keys() if not n.endswith("UNSPECIFIED")]


def _set_time(ts: Any, moment: datetime) -> None:
    if moment.tzinfo is None:
        moment = moment.astimezone()  # a naive time is local time
    ts.FromMicroseconds((moment - _EPOCH) // timedelta(microseconds=1))


def _time(msg: Any, ts: Any, name: str) -> datetime | None:
    if not msg.HasField(name):
        return None
    return _EPOCH + timedelta(microseconds=ts.ToMicroseconds())


# --- out: requests ------------------------------------------------------------------------------


def memory_input(m: MemoryInput | str | Mapping[str, Any], namespace: str = "") -> pb.MemoryInput:
    """A MemoryInput message from a dataclass, a plain text, or a dict of MemoryInput's fields."""
    if isinstance(m, str):
        m = MemoryInput(content=m)
    elif isinstance(m, Mapping):
        m = MemoryInput(**m)
    msg = pb.MemoryInput(content=m.content, namespace=m.namespace or namespace, source=m.source,
                         session_id=m.session_id, evergreen=m.evergreen, metadata=dict(m.metadata),
                         memory_type=enum_number("memory_type", m.memory_type),
                         access_level=enum_number("access_level", m.access_level))
    if m.confidence is not None:
        msg.confidence = m.confidence
    if m.importance is not None:
        msg.importance = m.importance
    if m.session_position is not None:
        msg.session_position = m.session_position
    if m.event_time is not None:
        _set_time(msg.event_time, m.event_time)
    for link in m.links:
        msg.links.add(target_id=link.target_id, type=enum_number("link_type", link.type), weight=link.weight)
    return msg


def filters(f: Filters | Mapping[str, Any] | None) -> pb.RetrieveFilters:
    if f is None:
        return pb.RetrieveFilters()
    if isinstance(f, Mapping):
        f = Filters(**f)
    if isinstance(f.namespaces, str) or isinstance(f.memory_types, str):
        raise ValueError("filters.namespaces and filters.memory_types are lists; write e.g. namespaces=['ops']")
    if isinstance(f.languages, str):
        raise ValueError("filters.languages is a list; write e.g. languages=['python']")
    msg = pb.RetrieveFilters(namespaces=list(f.namespaces), session_id=f.session_id, metadata=dict(f.metadata),
                             memory_types=[enum_number("memory_type", t) for t in f.memory_types],
                             languages=list(f.languages))
    if f.since is not None:
        _set_time(msg.event_time.start, f.since)
    if f.until is not None:
        _set_time(msg.event_time.end, f.until)
    if f.min_confidence is not None:
        msg.min_confidence = f.min_confidence
    return msg


def overrides(o: Overrides | Mapping[str, Any] | None) -> pb.StageOverrides | None:
    if o is None:
        return None
    if isinstance(o, Mapping):
        o = Overrides(**o)
    msg = pb.StageOverrides(space_weights=dict(o.space_weights), disable_stages=list(o.disable_stages),
                            space_mask=list(o.space_mask))
    for name in ("sparse_weight", "max_candidates", "dense_dimension", "fusion", "rrf_k", "late_interaction_weight",
                 "decay_half_life_days", "mmr_lambda", "min_score", "min_relevance", "misalignment_threshold",
                 "filter_misaligned", "search_matrix", "query_type"):
        value = getattr(o, name)
        if value is not None:
            setattr(msg, name, value)
    return msg


def head_vector(v: HeadVector) -> pb.HeadVector:
    return pb.HeadVector(values=list(v.values), rows=v.rows, ids=list(v.ids), weights=list(v.weights), codes=v.codes,
                         codec=v.codec)


def time_boosts(t: TimeBoosts | Mapping[str, Any]) -> pb.TimeBoosts:
    if isinstance(t, Mapping):
        t = TimeBoosts(**t)
    msg = pb.TimeBoosts(recency_curve=t.recency_curve, recency_scale=t.recency_scale, recency_weight=t.recency_weight,
                        periodic_weight=t.periodic_weight, session_id=t.session_id, sequence_window=t.sequence_window,
                        sequence_weight=t.sequence_weight)
    for name in ("target_hour", "target_weekday", "session_position"):
        if getattr(t, name) is not None:
            setattr(msg, name, getattr(t, name))
    return msg


def retrieve_request(text: str | QueryVectors, *, top_k: int, profile: str, where: Filters | Mapping | None,
                     target_goals: Iterable[str], johari: Iterable[str], stage_overrides: Overrides | Mapping | None,
                     breakdown: bool, explain: bool, snippets: bool, omit_content: bool,
                     include_historical: bool = False, as_of_event: datetime | None = None,
                     as_of_ingestion: datetime | None = None,
                     boosts: TimeBoosts | Mapping | None = None, batched: bool = False) -> pb.RetrieveRequest:
    req = pb.RetrieveRequest(top_k=top_k, profile=profile, filters=filters(where), target_goals=list(target_goals),
                             johari=[enum_number("johari", q) for q in johari], include_breakdown=breakdown,
                             explain=explain, snippets=snippets, omit_content=omit_content,
                             include_historical=include_historical, batched=batched)
    if as_of_event is not None:
        _set_time(req.as_of_event, as_of_event)
    if as_of_ingestion is not None:
        _set_time(req.as_of_ingestion, as_of_ingestion)
    if isinstance(text, QueryVectors):
        req.vectors.model_version = text.model_version
        for name, v in text.heads.items():
            req.vectors.heads[name].CopyFrom(head_vector(v))
    else:
        req.text = text
    o = overrides(stage_overrides)
    if o is not None:
        req.overrides.CopyFrom(o)
    if boosts is not None:
        req.time_boosts.CopyFrom(time_boosts(boosts))
    return req


def with_links(current: tuple[Link, ...], targets: str | Sequence[str], kind: str = "supersedes") -> tuple[Link, ...]:
    """``current`` links and a ``kind`` link to each of ``targets`` it does not have yet (an Update
    replaces a memory's links: what it links to already is kept)."""
    have = {(link.target_id, link.type) for link in current}
    wanted = [targets] if isinstance(targets, str) else list(targets)
    return tuple(current) + tuple(Link(t, kind) for t in dict.fromkeys(wanted) if (t, kind) not in have)


def update_request(id: str, fields: Mapping[str, Any], keep_previous: bool,
                   add_links: Sequence[Link] = ()) -> pb.UpdateRequest:
    """An UpdateRequest changing the MemoryInput fields named in ``fields`` (python names, dataclass
    values) and adding ``add_links`` to the memory's links."""
    if not fields and not add_links:
        raise ValueError("nothing to change: name at least one field, e.g. content=..., or links to add")
    known = set(MemoryInput.__dataclass_fields__)
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"cannot update {', '.join(unknown)}; fields are {', '.join(sorted(known))}")
    values = MemoryInput(content=fields.get("content", ""), **{k: v for k, v in fields.items() if k != "content"})
    req = pb.UpdateRequest(id=id, memory=memory_input(values), fields=list(fields), keep_previous=keep_previous)
    for link in add_links:
        req.add_links.add(target_id=link.target_id, type=enum_number("link_type", link.type), weight=link.weight)
    return req


# --- in: responses ------------------------------------------------------------------------------


def memory(m: pb.Memory) -> Memory:
    i = m.input
    return Memory(
        id=m.id, content=i.content, namespace=i.namespace, memory_type=enum_name("memory_type", i.memory_type),
        access_level=enum_name("access_level", i.access_level), source=i.source,
        confidence=i.confidence if i.HasField("confidence") else None,
        importance=i.importance if i.HasField("importance") else None,
        event_time=_time(i, i.event_time, "event_time"), session_id=i.session_id,
        session_position=i.session_position if i.HasField("session_position") else None,
        links=tuple(Link(link.target_id, enum_name("link_type", link.type), link.weight) for link in i.links),
        metadata=dict(i.metadata), evergreen=i.evergreen, content_hash=m.content_hash,
        ingestion_time=_time(m, m.ingestion_time, "ingestion_time"), model_version=m.model_version,
        chunk_count=m.chunk_count, retrieved_count=m.retrieved_count, used_count=m.used_count,
        helpful_count=m.helpful_count, misled_count=m.misled_count, sufficient_count=m.sufficient_count,
        insufficient_count=m.insufficient_count, purpose=purpose(m.purpose) if m.HasField("purpose") else None)


def purpose(p: pb.MemoryPurpose) -> Purpose:
    return Purpose(p.goal_id, p.goal_label, p.alignment, dict(p.goal_alignment), dict(p.space_alignment),
                   p.members_compared)


def memory_message(m: Memory) -> pb.Memory:
    """The protobuf form of a memory (for its JSON form and for import)."""
    msg = pb.Memory(id=m.id, input=memory_input(m.as_input()), content_hash=m.content_hash,
                    model_version=m.model_version, chunk_count=m.chunk_count, retrieved_count=m.retrieved_count,
                    used_count=m.used_count, helpful_count=m.helpful_count, misled_count=m.misled_count,
                    sufficient_count=m.sufficient_count, insufficient_count=m.insufficient_count)
    if m.ingestion_time is not None:
        _set_time(msg.ingestion_time, m.ingestion_time)
    if m.purpose is not None:
        p = m.purpose
        msg.purpose.CopyFrom(pb.MemoryPurpose(goal_id=p.goal_id, goal_label=p.goal_label, alignment=p.alignment,
                                              goal_alignment=p.goal_alignment, space_alignment=p.space_alignment,
                                              members_compared=p.members_compared))
    return msg


def update_hints(hints: Any) -> tuple[UpdateHint, ...]:
    return tuple(UpdateHint(h.id, h.similarity, h.content) for h in hints)


def store_result(r: pb.StoreResponse) -> StoreResult:
    return StoreResult(r.id, r.content_hash, r.duplicate, update_hints(r.possible_updates))


def batch_result(r: pb.StoreBatchResponse | pb.ImportResponse) -> BatchResult:
    items = tuple(BatchItem(i.index, i.client_ref, i.id, i.content_hash, i.duplicate, i.error, i.error_code,
                            update_hints(i.possible_updates))
                  for i in r.items)
    return BatchResult(items, r.stored, r.duplicates, r.failed, getattr(r, "vectors_reused", 0))


def stage(s: pb.StageEvent) -> Stage:
    return Stage(s.stage, s.elapsed_ms, s.candidates_in, s.candidates_out, s.backend, s.detail, s.skipped)


def provenance(p: pb.Provenance) -> Provenance:
    return Provenance(strategies=tuple(p.strategies), fused_score=p.fused_score,
                      validation_passed=tuple(p.validation_passed), confidence=p.confidence, citation=p.citation,
                      conflicts_with=tuple(p.conflicts_with))


def conflict_pair(c: pb.ConflictPair) -> ConflictPair:
    return ConflictPair(c.id_a, c.id_b, c.edge_type, c.resolution, c.winner)


def result(r: pb.Result, with_breakdown: bool) -> Result:
    b = r.breakdown
    breakdown = Breakdown(b.content, b.purpose_alignment, b.goal_alignment, b.late_interaction, b.temporal,
                          dict(b.spaces), dict(b.space_ranks)) if with_breakdown else None
    return Result(rank=r.rank, memory=memory(r.memory), score=r.score, relevance=r.relevance,
                  found_by=tuple(r.found_by), misaligned=r.misaligned, johari=enum_name("johari", r.johari),
                  explanation=r.explanation, chunk_index=r.chunk_index, unique_contribution=r.unique_contribution,
                  snippet=r.snippet, snippet_start=r.snippet_start, snippet_end=r.snippet_end, breakdown=breakdown,
                  provenance=provenance(r.provenance) if r.HasField("provenance") else None,
                  primary_space=r.primary_space)


def summary(s: pb.RetrieveSummary) -> Summary:
    return Summary(s.returned, s.total_ms, s.embed_ms, tuple(stage(x) for x in s.stages), s.degraded,
                   s.degraded_reason, s.profile, s.request_id, s.corpus_size, route=s.route, skip_reason=s.skip_reason,
                   retry_count=s.retry_count, retrieval_confidence=s.retrieval_confidence,
                   conflicts=tuple(conflict_pair(c) for c in s.conflicts), query_types=tuple(s.query_types),
                   space_weights=dict(s.space_weights), found_by_space=dict(s.found_by_space),
                   unique_by_space=dict(s.unique_by_space))


def events(ev: pb.RetrieveResponse, with_breakdown: bool) -> list[Event]:
    """The events one streamed message carries: a stage, a result, a batch of results, or the summary."""
    kind = ev.WhichOneof("event")
    if kind == "stage":
        return [stage(ev.stage)]
    if kind == "result":
        return [result(ev.result, with_breakdown)]
    if kind == "results":
        return [result(r, with_breakdown) for r in ev.results.results]
    if kind == "summary":
        return [summary(ev.summary)]
    raise ValueError(f"the server sent a retrieve event of an unknown kind ({kind!r}); upgrade the client")


def entry_points(r: pb.DiscoverEntryPointsResponse) -> tuple[EntryPoint, ...]:
    return tuple(EntryPoint(e.space, e.memory_id, e.similarity, e.score) for e in r.entry_points)


def goals(r: pb.ListGoalsResponse) -> tuple[Goal, ...]:
    return tuple(Goal(g.id, g.label, g.size, g.drift,
                      tuple(GoalSnapshot(_time(h, h.time, "time"), h.label, h.size, h.drift) for h in g.history))
                 for g in r.goals)


def comparison(r: pb.CompareResponse) -> Comparison:
    return Comparison(dict(r.spaces), r.aggregate, enum_name("aggregation", r.aggregation),
                      r.purpose_similarity if r.HasField("purpose_similarity") else None)


def stats(r: pb.StatsResponse) -> Stats:
    return Stats(r.memories, tuple(NamespaceStats(n.namespace, n.memories, n.chunks) for n in r.namespaces),
                 r.model_version, r.backend, r.embedder, r.embedder_ready, r.goals, r.server_version,
                 tuple(Head(h.name, h.kind, h.dimension, h.dtype) for h in r.heads))


def _head(v: pb.HeadVector) -> HeadVector:
    return HeadVector(tuple(v.values), v.rows, tuple(v.ids), tuple(v.weights), v.codes, v.codec)


def exported(e: pb.ExportedMemory) -> Exported:
    return Exported(memory(e.memory), tuple(ExportedChunk(c.start, c.end, {k: _head(v) for k, v in c.heads.items()})
                                            for c in e.chunks))


def exported_message(e: Exported) -> pb.ExportedMemory:
    msg = pb.ExportedMemory(memory=memory_message(e.memory))
    for c in e.chunks:
        chunk = msg.chunks.add(start=c.start, end=c.end)
        for name, v in c.heads.items():
            chunk.heads[name].CopyFrom(head_vector(v))
    return msg


def memory_input_from_message(i: pb.MemoryInput) -> MemoryInput:
    """The dataclass of a MemoryInput message (e.g. one parsed from a JSON line)."""
    return MemoryInput(
        content=i.content, namespace=i.namespace, memory_type=enum_name("memory_type", i.memory_type) or None,
        access_level=enum_name("access_level", i.access_level) or None, source=i.source,
        confidence=i.confidence if i.HasField("confidence") else None,
        importance=i.importance if i.HasField("importance") else None,
        event_time=_time(i, i.event_time, "event_time"), session_id=i.session_id,
        session_position=i.session_position if i.HasField("session_position") else None,
        links=tuple(Link(link.target_id, enum_name("link_type", link.type), link.weight) for link in i.links),
        metadata=dict(i.metadata), evergreen=i.evergreen)


# --- back to messages, for their JSON form ------------------------------------------------------


def stage_message(s: Stage) -> pb.StageEvent:
    return pb.StageEvent(stage=s.stage, elapsed_ms=s.elapsed_ms, candidates_in=s.candidates_in,
                         candidates_out=s.candidates_out, backend=s.backend, detail=s.detail, skipped=s.skipped)


def result_message(r: Result) -> pb.Result:
    msg = pb.Result(rank=r.rank, memory=memory_message(r.memory), score=r.score, relevance=r.relevance,
                    found_by=list(r.found_by), misaligned=r.misaligned, johari=enum_number("johari", r.johari),
                    explanation=r.explanation, chunk_index=r.chunk_index, unique_contribution=r.unique_contribution,
                    snippet=r.snippet, snippet_start=r.snippet_start, snippet_end=r.snippet_end,
                    primary_space=r.primary_space)
    b = r.breakdown
    if b is not None:
        msg.breakdown.CopyFrom(pb.ScoreBreakdown(content=b.content, purpose_alignment=b.purpose_alignment,
                                                 goal_alignment=b.goal_alignment, late_interaction=b.late_interaction,
                                                 temporal=b.temporal, spaces=b.spaces, space_ranks=b.space_ranks))
    if r.provenance is not None:
        msg.provenance.CopyFrom(provenance_message(r.provenance))
    return msg


def provenance_message(p: Provenance) -> pb.Provenance:
    return pb.Provenance(strategies=list(p.strategies), fused_score=p.fused_score,
                         validation_passed=list(p.validation_passed), confidence=p.confidence, citation=p.citation,
                         conflicts_with=list(p.conflicts_with))


def conflict_pair_message(c: ConflictPair) -> pb.ConflictPair:
    return pb.ConflictPair(id_a=c.id_a, id_b=c.id_b, edge_type=c.edge_type, resolution=c.resolution, winner=c.winner)


def summary_message(s: Summary) -> pb.RetrieveSummary:
    return pb.RetrieveSummary(returned=s.returned, total_ms=s.total_ms, embed_ms=s.embed_ms,
                              stages=[stage_message(x) for x in s.stages], degraded=s.degraded,
                              degraded_reason=s.degraded_reason, profile=s.profile, request_id=s.request_id,
                              corpus_size=s.corpus_size, route=s.route, skip_reason=s.skip_reason,
                              retry_count=s.retry_count, retrieval_confidence=s.retrieval_confidence,
                              conflicts=[conflict_pair_message(c) for c in s.conflicts],
                              query_types=list(s.query_types), space_weights=dict(s.space_weights),
                              found_by_space=dict(s.found_by_space), unique_by_space=dict(s.unique_by_space))


def event_message(ev: Event) -> pb.RetrieveResponse:
    if isinstance(ev, Stage):
        return pb.RetrieveResponse(stage=stage_message(ev))
    if isinstance(ev, Result):
        return pb.RetrieveResponse(result=result_message(ev))
    return pb.RetrieveResponse(summary=summary_message(ev))


def stats_message(s: Stats) -> pb.StatsResponse:
    return pb.StatsResponse(
        memories=s.memories, namespaces=[pb.NamespaceStats(namespace=n.namespace, memories=n.memories, chunks=n.chunks)
                                         for n in s.namespaces],
        model_version=s.model_version, backend=s.backend, embedder=s.embedder, embedder_ready=s.embedder_ready,
        goals=s.goals, server_version=s.server_version,
        heads=[pb.EmbeddingHead(name=h.name, kind=h.kind, dimension=h.dimension, dtype=h.dtype) for h in s.heads])


def comparison_message(c: Comparison) -> pb.CompareResponse:
    msg = pb.CompareResponse(spaces=c.spaces, aggregate=c.aggregate, aggregation=enum_number("aggregation", c.aggregation))
    if c.purpose_similarity is not None:
        msg.purpose_similarity = c.purpose_similarity
    return msg


# --- JSON ---------------------------------------------------------------------------------------


def message_json(msg: Any) -> dict:
    """A message as a JSON-ready dict: protobuf's JSON mapping (camelCase names, enums by name, zero
    values written out) with 64-bit integers as numbers, not the strings the mapping writes."""
    return _int64_as_int(json_format.MessageToDict(msg, always_print_fields_with_no_presence=True), msg.DESCRIPTOR)


def _int64_as_int(d: dict, desc: Any) -> dict:
    wide = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
            FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64}
    for f in desc.fields:
        value = d.get(f.json_name)
        if value is None:
            continue
        if f.message_type is None:
            if f.type in wide:
                d[f.json_name] = [int(v) for v in value] if isinstance(value, list) else int(value)
        elif f.message_type.GetOptions().map_entry:
            inner = f.message_type.fields_by_name["value"]
            if inner.type in wide:
                d[f.json_name] = {k: int(v) for k, v in value.items()}
            elif inner.message_type is not None:
                for v in value.values():
                    _int64_as_int(v, inner.message_type)
        elif not f.message_type.full_name.startswith("google.protobuf."):
            for v in value if isinstance(value, list) else [value]:
                _int64_as_int(v, f.message_type)
    return d


def memory_json(m: Memory) -> dict:
    return message_json(memory_message(m))


def event_json(ev: Event) -> dict:
    """A retrieve event as ``teleo query --json`` prints it: {"stage": ...}, {"result": ...} or {"summary": ...}."""
    return message_json(event_message(ev))


def update_json(u: UpdateResult) -> dict:
    return message_json(pb.UpdateResponse(memory=memory_message(u.memory), previous_id=u.previous_id))


def exported_json(e: Exported) -> dict:
    return message_json(exported_message(e))


def exported_from_json(d: Mapping[str, Any] | str) -> Exported:
    """An export line (as ``teleo export`` writes it); ValueError says what is wrong."""
    try:
        data = json.loads(d) if isinstance(d, str) else dict(d)
        return exported(json_format.ParseDict(data, pb.ExportedMemory()))
    except (ValueError, json_format.ParseError, TypeError) as exc:
        raise ValueError(f"not an exported memory ({exc})") from None


__all__ = [
    "batch_result",
    "comparison",
    "comparison_message",
    "conflict_pair",
    "conflict_pair_message",
    "entry_points",
    "enum_name",
    "enum_names",
    "enum_number",
    "event_json",
    "event_message",
    "events",
    "exported",
    "exported_from_json",
    "exported_json",
    "exported_message",
    "filters",
    "goals",
    "head_vector",
    "memory",
    "memory_input",
    "memory_input_from_message",
    "memory_json",
    "memory_message",
    "message_json",
    "overrides",
    "provenance",
    "provenance_message",
    "purpose",
    "result",
    "result_message",
    "retrieve_request",
    "stage",
    "stage_message",
    "stats",
    "stats_message",
    "store_result",
    "summary",
    "summary_message",
    "time_boosts",
    "update_hints",
    "update_json",
    "update_request",
    "with_links",
]
