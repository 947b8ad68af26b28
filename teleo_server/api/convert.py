"""Protobuf messages <-> domain types, validating every field on the way in.

Validation errors name the field (``memory.metadata``) so a caller can act on them.
"""

from __future__ import annotations

import dataclasses

import base64
import math
from dataclasses import replace
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, get_args

import numpy as np
from google.protobuf.timestamp_pb2 import Timestamp
from teleo.v1 import memory_pb2 as pb

from teleo_server.api import validate as v
from teleo_server.config import Limits
from teleo_server.core import QueryVectors, new_memory_id
from teleo_server.domain import (
    EARLIEST_TIME,
    LATEST_TIME,
    AccessLevel,
    ChunkEmbedding,
    EmbeddingSet,
    Johari,
    Link,
    LinkType,
    Memory,
    MemoryType,
    Principal,
    content_hash,
)
from teleo_server.errors import InvalidArgument, PermissionDenied
from teleo_server.heads import (DENSE, SPLADE, CodecSpec, Head, HeadKind, SparseVector, TokenCodes, Vector, get_head,
                                heads)
from teleo_server.pipeline_settings import FusionMethod
from teleo_server.extract.code import LANGUAGES
from teleo_server.pipeline.analyze import KINDS
from teleo_server.pipeline.stages import stages
from teleo_server.pipeline.types import Filters, Hit, MemoryPurpose, Overrides, Query, StageReport
from teleo_server.query import RECENCY_CURVES, RECENCY_SCALES, TimeBoosts

FUSIONS = get_args(FusionMethod)
AGGREGATIONS = {
    pb.AGGREGATION_UNSPECIFIED: "weighted_average",
    pb.AGGREGATION_WEIGHTED_AVERAGE: "weighted_average",
    pb.AGGREGATION_RRF: "rrf",
    pb.AGGREGATION_MAX: "max",
    pb.AGGREGATION_MIN: "min",
    pb.AGGREGATION_GEOMETRIC_MEAN: "geometric_mean",
}


def ts_to_float(ts: Timestamp, field: str) -> float:
    """POSIX seconds of a Timestamp, which must lie in the range a Timestamp may hold."""
    if not EARLIEST_TIME <= ts.seconds <= LATEST_TIME:
        raise InvalidArgument(
            f"seconds {ts.seconds} is outside 0001-01-01..9999-12-31 "
            f"({EARLIEST_TIME}..{LATEST_TIME} seconds since the epoch)",
            field=field,
        )
    if not 0 <= ts.nanos <= 999_999_999:
        raise InvalidArgument(f"nanos {ts.nanos} must be in 0..999999999", field=field)
    # a float near the end of time rounds up by up to 30 us: keep it inside the range
    return min(ts.seconds + ts.nanos / 1e9, _LAST_FLOAT)


_LAST_FLOAT = LATEST_TIME + 0.999
_EDGES_NS = (EARLIEST_TIME * 10**9, LATEST_TIME * 10**9 + 999_999_999)


def float_to_ts(t: float) -> Timestamp:
    return Timestamp(**_ts_fields(t))


def _ts_fields(t: float) -> dict[str, int]:
    """A Timestamp's fields for ``t`` seconds, clamped to the range a Timestamp may hold (what
    ``Timestamp.FromNanoseconds`` sets, without building a message first)."""
    seconds, nanos = divmod(min(max(int(round(t * 1e9)), _EDGES_NS[0]), _EDGES_NS[1]), 1_000_000_000)
    return {"seconds": seconds, "nanos": nanos}


# -- memories --------------------------------------------------------------------------------


def links_from(msgs: Sequence[pb.Link], limits: Limits, field: str) -> tuple[Link, ...]:
    """Validated links (at most ``limits.max_links``; a target id of 1..128 characters, a known
    type, a weight in [0, 1] where 0 reads as 1)."""
    if len(msgs) > limits.max_links:
        raise InvalidArgument(f"at most {limits.max_links} links", field=field)
    links = []
    for i, lk in enumerate(msgs):
        f = f"{field}[{i}]"
        if not lk.target_id or len(lk.target_id) > 128:
            raise InvalidArgument("target_id must be 1..128 characters", field=f)
        ltype = v.enum_value(LinkType, lk.type, None, f"{f}.type")
        weight = v.unit(lk.weight, f"{f}.weight") or 1.0
        links.append(Link(lk.target_id, ltype, weight))
    return tuple(links)


def memory_from_input(msg: pb.MemoryInput, principal: Principal, limits: Limits, now: float, field: str = "memory") -> Memory:
    content = msg.content
    if not content.strip():
        raise InvalidArgument("must not be empty", field=f"{field}.content")
    v.max_bytes(content, limits.max_content_bytes, f"{field}.content")
    namespace = msg.namespace or principal.default_namespace
    v.namespace(namespace, f"{field}.namespace")
    level = v.enum_value(AccessLevel, msg.access_level, AccessLevel.INTERNAL, f"{field}.access_level")
    mtype = v.enum_value(MemoryType, msg.memory_type, MemoryType.SEMANTIC, f"{field}.memory_type")
    v.max_chars(msg.source, limits.max_string_chars, f"{field}.source")
    v.max_chars(msg.session_id, 256, f"{field}.session_id")
    confidence = v.unit(msg.confidence, f"{field}.confidence") if msg.HasField("confidence") else 1.0
    importance = v.unit(msg.importance, f"{field}.importance") if msg.HasField("importance") else 0.5
    position = None
    if msg.HasField("session_position"):
        if msg.session_position < 0:
            raise InvalidArgument("must be >= 0", field=f"{field}.session_position")
        position = msg.session_position
    event_time = ts_to_float(msg.event_time, f"{field}.event_time") if msg.HasField("event_time") else now
    links = links_from(msg.links, limits, f"{field}.links")
    metadata = v.metadata(dict(msg.metadata), limits, f"{field}.metadata")
    if not principal.can_write(namespace, level):
        raise PermissionDenied(
            f"agent {principal.agent_id!r} may not write {level.name} memories in namespace {namespace!r}",
            field=f"{field}.namespace",
        )
    return Memory(
        id=new_memory_id(),
        namespace=namespace,
        content=content,
        content_hash=content_hash(content),
        memory_type=mtype,
        access_level=level,
        source=msg.source,
        confidence=confidence,
        importance=importance,
        event_time=event_time,
        ingestion_time=now,
        session_id=msg.session_id,
        session_position=position,
        links=links,
        metadata=metadata,
        evergreen=msg.evergreen,
    )


def purpose_to_proto(p: MemoryPurpose) -> pb.MemoryPurpose:
    return pb.MemoryPurpose(goal_id=p.goal_id, goal_label=p.goal_label, alignment=p.alignment,
                            goal_alignment=p.goal_alignment, space_alignment=p.space_alignment,
                            members_compared=p.members)


def memory_to_proto(m: Memory) -> pb.Memory:
    return pb.Memory(**_memory_fields(m))


def _memory_fields(m: Memory, omit_content: bool = False) -> dict[str, Any]:
    """A Memory message's fields, nested messages as dicts: a message built from them in one call
    costs about half of one built from messages made first (each is copied in)."""
    inp: dict[str, Any] = {
        "content": "" if omit_content else m.content,
        "namespace": m.namespace,
        "access_level": int(m.access_level),
        "memory_type": int(m.memory_type),
        "source": m.source,
        "confidence": m.confidence,
        "importance": m.importance,
        "event_time": _ts_fields(m.event_time),
        "session_id": m.session_id,
        "metadata": m.metadata,
        "evergreen": m.evergreen,
    }
    if m.links:
        inp["links"] = [{"target_id": lk.target_id, "type": int(lk.type), "weight": lk.weight} for lk in m.links]
    if m.session_position is not None:
        inp["session_position"] = m.session_position
    return {
        "id": m.id,
        "input": inp,
        "content_hash": m.content_hash,
        "ingestion_time": _ts_fields(m.ingestion_time),
        "model_version": m.model_version,
        "chunk_count": m.chunk_count,
        "retrieved_count": m.retrieved_count,
        "used_count": m.used_count,
        "helpful_count": m.helpful_count,
        "misled_count": m.misled_count,
        "sufficient_count": m.sufficient_count,
        "insufficient_count": m.insufficient_count,
    }


def ids_from(ids: list[str] | tuple[str, ...], limits: Limits, field: str = "ids") -> list[str]:
    ids = list(ids)
    if not ids:
        raise InvalidArgument("at least one id is required", field=field)
    if len(ids) > limits.max_ids:
        raise InvalidArgument(f"at most {limits.max_ids} ids per call", field=field)
    for i in ids:
        if not i or len(i) > 128:
            raise InvalidArgument("each id must be 1..128 characters", field=field)
    return list(dict.fromkeys(ids))


# -- updates ---------------------------------------------------------------------------------

UPDATABLE = tuple(f.name for f in pb.MemoryInput.DESCRIPTOR.fields)


def updated_memory(old: Memory, msg: pb.UpdateRequest, principal: Principal, limits: Limits) -> Memory:
    """``old`` with the fields ``msg.fields`` names taken from ``msg.memory``, validated as a Store is
    (the caller must be able to write the result's namespace and level), and the links of
    ``msg.add_links`` it does not have yet (same target and type) added. Bookkeeping stays."""
    added = links_from(msg.add_links, limits, "add_links")
    if not msg.fields and not added:
        raise InvalidArgument(f"name the fields to change (any of {list(UPDATABLE)}) or the links to add (add_links)",
                              field="fields")
    merged = memory_to_proto(old).input
    for i, name in enumerate(msg.fields):
        if name not in UPDATABLE:
            raise InvalidArgument(f"unknown field {name[:64]!r}; updatable: {list(UPDATABLE)}", field=f"fields[{i}]")
        field = pb.MemoryInput.DESCRIPTOR.fields_by_name[name]
        if field.is_repeated:  # links, metadata
            merged.ClearField(name)
            target = getattr(merged, name)
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                target.update(getattr(msg.memory, name))
            else:
                target.extend(getattr(msg.memory, name))
        elif field.message_type is not None or field.has_presence:
            merged.ClearField(name)
            if msg.memory.HasField(name):
                if field.message_type is not None:
                    getattr(merged, name).CopyFrom(getattr(msg.memory, name))
                else:
                    setattr(merged, name, getattr(msg.memory, name))
        else:
            setattr(merged, name, getattr(msg.memory, name))
    new = memory_from_input(merged, principal, limits, old.ingestion_time, field="memory")
    if added:
        links = list(new.links)
        have = {(lk.target_id, lk.type) for lk in links}
        for lk in added:
            if (lk.target_id, lk.type) not in have:
                have.add((lk.target_id, lk.type))
                links.append(lk)
        new = replace(new, links=tuple(links))
        if len(new.links) > limits.max_links:
            raise InvalidArgument(f"at most {limits.max_links} links; with these the memory would have {len(new.links)}",
                                  field="add_links")
    return replace(new, id=old.id, ingestion_time=old.ingestion_time, model_version=old.model_version,
                   chunk_count=old.chunk_count, retrieved_count=old.retrieved_count, used_count=old.used_count,
                   helpful_count=old.helpful_count, misled_count=old.misled_count,
                   sufficient_count=old.sufficient_count, insufficient_count=old.insufficient_count)


# -- export and import -----------------------------------------------------------------------


def exported(memory: Memory, emb: EmbeddingSet | None) -> pb.ExportedMemory:
    out = pb.ExportedMemory(memory=memory_to_proto(memory))
    for chunk in (emb.chunks if emb is not None else []):
        c = out.chunks.add(start=chunk.start, end=chunk.end)
        for name, v in chunk.vectors.items():
            if isinstance(v, SparseVector):
                c.heads[name].ids.extend(v.ids.tolist())
                c.heads[name].weights.extend(v.weights.tolist())
            elif isinstance(v, TokenCodes):  # as stored: the codes, and the codec that reads them
                c.heads[name].codes = v.data.tobytes()
                c.heads[name].codec = v.spec.tag
                c.heads[name].rows = v.rows
            else:
                a = np.asarray(v, dtype=np.float32)
                c.heads[name].values.extend(a.reshape(-1).tolist())
                c.heads[name].rows = a.shape[0] if a.ndim == 2 else 0
    return out


def imported(msg: pb.ExportedMemory, principal: Principal, limits: Limits, now: float,
             model_version: str, codecs: Mapping[str, CodecSpec] | None = None) -> tuple[Memory, EmbeddingSet | None]:
    """A new memory (new id) from an exported one, validated and authorised as a Store is, and its
    vectors when they were made by ``model_version``, hold every registered head and give a head
    as codes only in the codec ``codecs`` names for it, the one this server keeps, or in codes
    that are exactly that codec's (``CodecSpec.takes``; else None: it is embedded again; another
    codec's codes are never read as this server's)."""
    memory = memory_from_input(msg.memory.input, principal, limits, now, field="item.memory.input")
    if msg.memory.HasField("ingestion_time"):
        memory = replace(memory, ingestion_time=ts_to_float(msg.memory.ingestion_time, "item.memory.ingestion_time"))
    if not msg.chunks or msg.memory.model_version != model_version:
        return memory, None
    chunks = []
    for i, c in enumerate(msg.chunks):
        where = f"item.chunks[{i}]"
        if not 0 <= c.start <= c.end <= len(memory.content):
            raise InvalidArgument(f"span [{c.start}, {c.end}) is not within the content", field=where)
        if set(c.heads) != set(heads()):
            raise InvalidArgument(f"needs every head {sorted(heads())}, has {sorted(c.heads)}", field=f"{where}.heads")
        vectors: dict[str, Vector] = {}
        for name, hv in c.heads.items():
            at = f"{where}.heads[{name!r}]"
            if not (hv.codes or hv.codec):
                vectors[name] = head_vector(hv, get_head(name), at)
                continue
            codes = token_codes(hv, get_head(name), at)
            spec = (codecs or {}).get(name)
            if spec is None or not spec.takes(codes.spec, codes.rows):
                return memory, None
            vectors[name] = TokenCodes(codes.data, spec)  # exactly this server's codes, named as it names them
        chunks.append(ChunkEmbedding(vectors, c.start, c.end))
    return memory, EmbeddingSet(model_version, chunks)


# -- listing ---------------------------------------------------------------------------------

_CURSOR_PREFIX = "c1."


def page_from(msg: pb.ListRequest, limits: Limits) -> tuple[int, int]:
    """(start after this sequence number, page size) of a List request."""
    size = msg.page_size or 100
    if not 1 <= size <= limits.max_ids:
        raise InvalidArgument(f"must be 1..{limits.max_ids} (0 = 100)", field="page_size")
    if not msg.cursor:
        return 0, size
    text = msg.cursor
    try:
        after = int(base64.urlsafe_b64decode(text[len(_CURSOR_PREFIX):].encode()).decode()) \
            if text.startswith(_CURSOR_PREFIX) else -1
    except (ValueError, UnicodeDecodeError):
        after = -1
    if not 0 <= after < 2**63:  # a sequence number the store can hold
        raise InvalidArgument("not a cursor this server issued; pass next_cursor from the previous page, "
                              "or nothing for the first page", field="cursor")
    return after, size


def cursor_of(after: int | None) -> str:
    return "" if after is None else _CURSOR_PREFIX + base64.urlsafe_b64encode(str(after).encode()).decode()


def filters_from(msg: pb.RetrieveFilters, principal: Principal, limits: Limits) -> Filters:
    """Retrieve's hard filters, checked (also used by List and DeleteWhere)."""
    return _filters(msg, principal, limits)


# -- retrieval -------------------------------------------------------------------------------


def query_from_request(req: pb.RetrieveRequest, principal: Principal, limits: Limits, now: float,
                       resolve_profile: Callable[[str], str]) -> tuple[Query, QueryVectors | None]:
    """The Query (embedding still unset) and, for precomputed vectors, the vectors.

    resolve_profile: the retriever's canonical name for a requested profile ("" = its default);
    raises InvalidArgument for an unknown one.
    """
    which = req.WhichOneof("query")
    vectors = None
    text = ""
    if which == "text":
        text = req.text
        if not text.strip():
            raise InvalidArgument("must not be empty", field="text")
        v.max_bytes(text, limits.max_query_bytes, "text")
    elif which == "vectors":
        vectors = _vectors(req.vectors)
    else:
        raise InvalidArgument("set either text or vectors", field="query")
    top_k = req.top_k  # 0: the profile's default (10; openclaw 6)
    if not 0 <= top_k <= limits.max_top_k:
        raise InvalidArgument(f"must be in 1..{limits.max_top_k}, or 0 for the profile's default", field="top_k")
    v.max_chars(req.profile, 256, "profile")
    profile = resolve_profile(req.profile)
    johari = tuple(v.enum_value(Johari, q, None, "johari") for q in req.johari)
    for i, g in enumerate(req.target_goals):
        v.max_chars(g, 256, f"target_goals[{i}]")
    return (
        Query(
            text=text,
            embedding=None,
            principal=principal,
            top_k=top_k,
            profile=profile,
            filters=_as_of(req, _filters(req.filters, principal, limits)),
            target_goals=tuple(req.target_goals),
            johari=johari,
            overrides=_overrides(req.overrides),
            include_breakdown=req.include_breakdown,
            explain=req.explain,
            snippets=req.snippets,
            omit_content=req.omit_content,
            include_historical=req.include_historical,
            now=now,
            time_boosts=_time_boosts(req.time_boosts) if req.HasField("time_boosts") else TimeBoosts(),
        ),
        vectors,
    )


def _time_boosts(msg: pb.TimeBoosts) -> TimeBoosts:
    f = "time_boosts."
    if msg.recency_curve and msg.recency_curve not in RECENCY_CURVES:
        raise InvalidArgument(f"must be one of {', '.join(RECENCY_CURVES)} (or empty: off)", field=f + "recency_curve")
    scale = msg.recency_scale or "1d"
    if scale not in RECENCY_SCALES:
        raise InvalidArgument(f"must be one of {', '.join(RECENCY_SCALES)}", field=f + "recency_scale")
    hour = v.int_range(msg.target_hour, 0, 23, f + "target_hour") if msg.HasField("target_hour") else None
    weekday = v.int_range(msg.target_weekday, 0, 6, f + "target_weekday") if msg.HasField("target_weekday") else None
    position = msg.session_position if msg.HasField("session_position") else None
    if position is not None and position < 0:
        raise InvalidArgument("must be 0 or more", field=f + "session_position")
    v.max_chars(msg.session_id, 256, f + "session_id")
    return TimeBoosts(
        recency_curve=msg.recency_curve, recency_scale=scale,
        recency_weight=v.in_range(msg.recency_weight, 0.0, 10.0, f + "recency_weight"),
        target_hour=hour, target_weekday=weekday,
        periodic_weight=v.in_range(msg.periodic_weight, 0.0, 10.0, f + "periodic_weight"),
        session_id=msg.session_id, session_position=position,
        sequence_window=v.int_range(msg.sequence_window, 1, 1000, f + "sequence_window") if msg.sequence_window else 3,
        sequence_weight=v.in_range(msg.sequence_weight, 0.0, 10.0, f + "sequence_weight"),
    )


def _as_of(req: pb.RetrieveRequest, filters: Filters) -> Filters:
    """The request's bi-temporal moments, added to its filters."""
    event = ts_to_float(req.as_of_event, "as_of_event") if req.HasField("as_of_event") else None
    ingestion = ts_to_float(req.as_of_ingestion, "as_of_ingestion") if req.HasField("as_of_ingestion") else None
    if event is None and ingestion is None:
        return filters
    return dataclasses.replace(filters, as_of_event=event, as_of_ingestion=ingestion)


def _vectors(msg: pb.QueryVectors) -> QueryVectors:
    """Every head the message carries, each checked against the head registry."""
    given: dict[str, tuple[str, object]] = {}
    if len(msg.dense):
        given[DENSE.name] = ("vectors.dense", np.asarray(msg.dense, dtype=np.float32))
    if len(msg.sparse_ids) or len(msg.sparse_weights):
        given[SPLADE.name] = ("vectors.sparse_ids", SparseVector(
            np.asarray(msg.sparse_ids, dtype=np.int64), np.asarray(msg.sparse_weights, np.float32)))
    for name, hv in msg.heads.items():
        where = f"vectors.heads[{name[:64]!r}]"
        if name in given:
            raise InvalidArgument(f"head {name!r} is given twice (a shorthand field and heads)",
                                  field=where)
        given[name] = (where, head_vector(hv, get_head(name, where), where, min_rows=1))
    if not given:
        raise InvalidArgument("no query vector given (set dense, sparse_ids or heads)",
                              field="vectors")
    heads = {name: get_head(name, where).coerce(value, where)
             for name, (where, value) in given.items()}
    return QueryVectors(heads=heads, model_version=msg.model_version)


def token_codes(hv: pb.HeadVector, head: Head, where: str) -> TokenCodes:
    """An exported per-token head given as codes (``codes``, ``codec``, ``rows``), checked: a codec
    of ``head``'s width and rows of its size."""
    if head.kind is not HeadKind.TOKENS:
        raise InvalidArgument(f"head {head.name!r} is not per-token: it has no codes", field=where)
    if hv.values or not hv.codec:
        raise InvalidArgument("codes need their codec, and no values beside them", field=where)
    try:
        spec = CodecSpec.parse(hv.codec)
        if spec.dim_in != head.dim:
            raise ValueError(f"codec {spec.tag} codes {spec.dim_in}-d vectors; head {head.name!r} has {head.dim}")
        return TokenCodes.of(hv.codes, hv.rows, spec)
    except ValueError as exc:
        raise InvalidArgument(str(exc), field=where) from None


def head_vector(hv: pb.HeadVector, head: Head, where: str, min_rows: int = 0) -> Vector:
    """A ``HeadVector`` message as ``head``'s vector, checked (``head.coerce``); a per-token head
    needs ``rows`` >= ``min_rows`` and rows x dimension values (codes are for Import only)."""
    if hv.codes or hv.codec:
        raise InvalidArgument("codes are taken by Import only; give the vector's values", field=where)
    if head.kind is HeadKind.SPARSE:
        value: Any = SparseVector(np.asarray(hv.ids, dtype=np.int64), np.asarray(hv.weights, dtype=np.float32))
    elif head.kind is HeadKind.TOKENS:
        values = np.asarray(hv.values, dtype=np.float32)
        if hv.rows < min_rows or values.size != hv.rows * head.dim:
            raise InvalidArgument(f"needs rows >= {min_rows} and rows * {head.dim} values (has rows "
                                  f"{hv.rows}, {values.size} values)", field=where)
        value = values.reshape(hv.rows, head.dim)
    else:
        value = np.asarray(hv.values, dtype=np.float32)
    return head.coerce(value, where)


def _filters(msg: pb.RetrieveFilters, principal: Principal, limits: Limits) -> Filters:
    for ns in msg.namespaces:
        v.namespace(ns, "filters.namespaces")
        if not principal.can_read(ns, AccessLevel.PUBLIC):
            raise PermissionDenied(f"agent {principal.agent_id!r} may not read namespace {ns!r}", field="filters.namespaces")
    start = end = None
    if msg.HasField("event_time"):
        if msg.event_time.HasField("start"):
            start = ts_to_float(msg.event_time.start, "filters.event_time.start")
        if msg.event_time.HasField("end"):
            end = ts_to_float(msg.event_time.end, "filters.event_time.end")
        if start is not None and end is not None and end <= start:
            raise InvalidArgument("end must be after start", field="filters.event_time")
    min_conf = v.unit(msg.min_confidence, "filters.min_confidence") if msg.HasField("min_confidence") else None
    return Filters(
        namespaces=tuple(dict.fromkeys(msg.namespaces)),
        memory_types=tuple(v.enum_value(MemoryType, t, None, "filters.memory_types") for t in msg.memory_types),
        event_start=start,
        event_end=end,
        min_confidence=min_conf,
        session_id=msg.session_id,
        metadata=tuple(sorted(v.metadata(dict(msg.metadata), limits, "filters.metadata").items())),
        languages=_languages(msg.languages),
    )


def _languages(names) -> tuple[str, ...]:
    known = ("unknown", *LANGUAGES)
    for i, name in enumerate(names):
        if name not in known:
            raise InvalidArgument(f"unknown language {name[:32]!r}; expected one of {', '.join(known)}",
                                  field=f"filters.languages[{i}]")
    return tuple(dict.fromkeys(names))


def _overrides(msg: pb.StageOverrides) -> Overrides:
    def opt(name: str, check) -> object:
        return check(getattr(msg, name), f"overrides.{name}") if msg.HasField(name) else None

    fusion = None
    if msg.HasField("fusion"):
        if msg.fusion not in FUSIONS:
            raise InvalidArgument(f"must be one of {', '.join(FUSIONS)}", field="overrides.fusion")
        fusion = msg.fusion
    weights = []
    for name, w in msg.space_weights.items():
        weights.append((name, v.in_range(w, 0.0, 10.0, f"overrides.space_weights[{name}]")))
    return Overrides(
        sparse_weight=opt("sparse_weight", v.unit),
        max_candidates=opt("max_candidates", lambda x, f: v.int_range(x, 1, 100_000, f)),
        dense_dimension=opt("dense_dimension", lambda x, f: v.int_range(x, 0, 4096, f)),
        fusion=fusion,
        rrf_k=opt("rrf_k", lambda x, f: v.in_range(x, 1e-6, 1e6, f)),
        late_interaction_weight=opt("late_interaction_weight", v.unit),
        decay_half_life_days=opt("decay_half_life_days", lambda x, f: v.in_range(x, 0.0, 1e6, f)),
        mmr_lambda=opt("mmr_lambda", v.unit),
        min_score=opt("min_score", v.unit),
        min_relevance=opt("min_relevance", v.unit),
        misalignment_threshold=opt("misalignment_threshold", v.unit),
        filter_misaligned=msg.filter_misaligned if msg.HasField("filter_misaligned") else None,
        space_weights=tuple(sorted(weights)),
        disable_stages=_disable_stages(msg.disable_stages),
        search_matrix=msg.search_matrix if msg.HasField("search_matrix") else "",
        query_type=_query_type(msg) if msg.HasField("query_type") else "",
        space_mask=_space_mask(msg.space_mask),
    )


def _space_mask(names) -> tuple[str, ...]:
    for i, name in enumerate(names):
        v.max_chars(name, 64, f"overrides.space_mask[{i}]")
    return tuple(dict.fromkeys(names))


def _query_type(msg: pb.StageOverrides) -> str:
    kinds = ("none", "general", *KINDS)
    if msg.query_type not in kinds:
        raise InvalidArgument(f"must be one of {', '.join(kinds)}", field="overrides.query_type")
    return msg.query_type


def _disable_stages(names: list[str]) -> tuple[str, ...]:
    known = stages()
    for i, name in enumerate(names):
        if name not in known:
            raise InvalidArgument(f"unknown stage {name[:64]!r}; expected one of {sorted(known)}",
                                  field=f"overrides.disable_stages[{i}]")
        if name == "finalize":
            raise InvalidArgument("finalize always runs (it applies top_k)", field=f"overrides.disable_stages[{i}]")
    return tuple(dict.fromkeys(names))


def stage_to_proto(s: StageReport) -> pb.StageEvent:
    return pb.StageEvent(
        stage=s.stage,
        elapsed_ms=s.elapsed_ms,
        candidates_in=s.candidates_in,
        candidates_out=s.candidates_out,
        backend=s.backend,
        detail=s.detail,
        skipped=s.skipped,
    )


SNIPPET_CHARS = 700


def snippet(content: str, span: tuple[int, int] | None, limit: int = SNIPPET_CHARS) -> tuple[str, int, int]:
    """At most ``limit`` characters of ``content[span]`` (the whole content without a span), cut at
    word boundaries where it must be cut; returns (text, start, end) with offsets into ``content``."""
    start, end = span if span is not None else (0, len(content))
    start, end = max(0, min(start, len(content))), max(0, min(end, len(content)))
    while start < end and content[start].isspace():
        start += 1
    if end - start > limit:
        cut = content.rfind(" ", start, start + limit + 1)
        end = cut if cut > start else start + limit
    while end > start and content[end - 1].isspace():
        end -= 1
    return content[start:end], start, end


def result_fields(hit: Hit, rank: int, include_breakdown: bool, explain: bool, snippets: bool = False,
                  omit_content: bool = False) -> dict[str, Any]:
    """The fields of ``hit``'s Result message, nested messages as dicts: the response that holds
    the result is built from them in one call (``pb.Result(**fields)`` builds the message alone)."""
    fields: dict[str, Any] = {
        "rank": rank,
        "memory": _memory_fields(hit.memory, omit_content),
        "score": _finite(hit.score),
        "found_by": hit.found_by,
        "misaligned": hit.misaligned,
        "johari": int(hit.johari),
        "chunk_index": hit.chunk_index,
        "unique_contribution": hit.unique_contribution,
        "relevance": hit.relevance,
        "primary_space": hit.primary_space,
    }
    p = hit.provenance
    if p is not None:
        fields["provenance"] = {
            "strategies": p.strategies, "fused_score": _finite(p.fused_score),
            "validation_passed": p.validation_passed, "confidence": _finite(p.confidence), "citation": p.citation,
            "conflicts_with": p.conflicts_with}
    if include_breakdown:
        b = hit.breakdown
        fields["breakdown"] = {
            "content": _finite(b.content),
            "purpose_alignment": _finite(b.purpose_alignment),
            "goal_alignment": _finite(b.goal_alignment),
            "late_interaction": _finite(b.late_interaction),
            "temporal": _finite(b.temporal),
            "spaces": {k: _finite(x) for k, x in b.spaces.items()},
            "space_ranks": b.space_ranks,
        }
    if explain:
        fields["explanation"] = hit.explanation
    if snippets:
        fields["snippet"], fields["snippet_start"], fields["snippet_end"] = snippet(hit.memory.content, hit.chunk_span)
    return fields


def _finite(x: float) -> float:
    return float(x) if math.isfinite(x) else 0.0


def now() -> float:
    return time.time()


__all__ = [
    "AGGREGATIONS",
    "UPDATABLE",
    "FUSIONS",
    "cursor_of",
    "exported",
    "filters_from",
    "purpose_to_proto",
    "float_to_ts",
    "head_vector",
    "imported",
    "ids_from",
    "links_from",
    "memory_from_input",
    "memory_to_proto",
    "now",
    "page_from",
    "query_from_request",
    "result_fields",
    "snippet",
    "stage_to_proto",
    "token_codes",
    "ts_to_float",
    "updated_memory",
]
