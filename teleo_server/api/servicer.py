"""MemoryService over grpc.aio: authenticate, convert, call MemoryCore, convert back."""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import grpc
import structlog
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc as pb_grpc

from teleo_server import __version__
from teleo_server.api import convert, validate
from teleo_server.api.status import status_of
from teleo_server.auth import Authenticator
from teleo_server.config import Limits
from teleo_server.core import SATURATED_RETRY_S, MemoryCore, RetrieveDone
from teleo_server.domain import EmbeddingSet, Memory, Principal
from teleo_server.errors import RETRY_AFTER_KEY, Internal, InvalidArgument, ResourceExhausted, TeleoError, Unavailable
from teleo_server.heads import heads
from teleo_server.pipeline.types import Hit, StageReport

log = structlog.get_logger(__name__)
PURPOSE_IDS = 100  # ids per Get that may ask for their purpose (each compares against its goal's members)
# a batched Retrieve closes a message of results once it holds this many bytes (a client's default
# limit on a message it receives is 4 MiB; one result is at most a few hundred KB)
RESULT_BATCH_BYTES = 1 << 20


def _request_id(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "x-request-id" and 0 < len(value) <= 64:
            return value
    return uuid.uuid4().hex[:16]


def _authorization(context: grpc.aio.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            return value
    return None


async def _fail(context: grpc.aio.ServicerContext, exc: BaseException, rid: str, method: str) -> None:
    code = status_of(exc)
    if isinstance(exc, Internal):  # a bug found by a check, not a caller's mistake
        log.error("rpc.internal_error", method=method, error=str(exc), exc_info=exc)
        detail = f"internal error ({exc}); quote request id {rid} when reporting it"
    elif isinstance(exc, TeleoError):
        log.info("rpc.rejected", method=method, code=code.name, error=str(exc))
        detail = str(exc)
    else:
        log.exception("rpc.internal_error", method=method)
        detail = f"internal error; quote request id {rid} when reporting it"
    trailers = [("x-request-id", rid)]
    if isinstance(exc, ResourceExhausted) and exc.retry_after is not None:
        trailers.append((RETRY_AFTER_KEY, str(round(exc.retry_after * 1e3))))
    await context.abort(code, detail, trailing_metadata=tuple(trailers))


class _Call:
    """One RPC's bookkeeping: request id, caller, logging, and mapping failures to a status."""

    def __init__(self, servicer: "MemoryServicer", context: grpc.aio.ServicerContext, method: str) -> None:
        self.context = context
        self.method = method
        self.rid = _request_id(context)
        self.servicer = servicer
        self.t0 = time.perf_counter()
        self.principal: Principal | None = None

    async def __aenter__(self) -> "_Call":
        structlog.contextvars.bind_contextvars(request_id=self.rid, method=self.method)
        try:
            self.principal = self.servicer.auth.authenticate(_authorization(self.context))
        except Exception as exc:
            await self.__aexit__(type(exc), exc, None)  # aborts the call: the body never runs
        structlog.contextvars.bind_contextvars(agent=self.principal.agent_id)
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        try:
            if exc is None:
                self.context.set_trailing_metadata((("x-request-id", self.rid),))
                log.info("rpc.ok", ms=round((time.perf_counter() - self.t0) * 1e3, 3))
            elif isinstance(exc, Exception):
                await _fail(self.context, exc, self.rid, self.method)  # raises AbortError
        finally:
            structlog.contextvars.clear_contextvars()
        return False


class Malformed:
    """A request body (or stream item) that does not parse as its message.

    The deserializers installed by ``add_to_server`` return one instead of raising, so a bad body
    is answered with INVALID_ARGUMENT by the handler rather than with gRPC's generic error.
    """

    __slots__ = ("message", "reason")

    def __init__(self, message: str, reason: str) -> None:
        self.message, self.reason = message, reason

    def error(self, field: str = "request") -> InvalidArgument:
        return InvalidArgument(f"is not a valid {self.message} message ({self.reason})", field=field)


def _parse(cls: Any) -> Callable[[bytes], Any]:
    name = cls.DESCRIPTOR.full_name

    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except Exception as exc:  # DecodeError, and whatever else a hostile body provokes
            return Malformed(name, type(exc).__name__ if not str(exc) else str(exc)[:120])

    return parse


def add_to_server(servicer: "MemoryServicer", server: grpc.aio.Server) -> None:
    """Register MemoryService with deserializers that never raise (see ``Malformed``)."""
    service = pb.DESCRIPTOR.services_by_name["MemoryService"]
    factories = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    handlers = {
        m.name: factories[(m.client_streaming, m.server_streaming)](
            getattr(servicer, m.name),
            request_deserializer=_parse(getattr(pb, m.input_type.name)),
            response_serializer=getattr(pb, m.output_type.name).SerializeToString,
        )
        for m in service.methods
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)


def rpc(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Unary and client-streaming handlers."""

    @functools.wraps(fn)
    async def handler(self: MemoryServicer, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async with _Call(self, context, fn.__name__) as call:
            if isinstance(request, Malformed):
                raise request.error()
            return await fn(self, request, context, call.principal)

    return handler


def streaming_rpc(shed: Callable[["MemoryServicer"], str | None] | None = None) -> Callable[..., Any]:
    """Server-streaming handlers: the decorated function is an async generator of responses.

    Each response is written with ``context.write`` under the write-stall timeout: a client that
    reads nothing for ``limits.write_stall_seconds`` has its stream ended (and ``fn`` closed, so
    everything it holds is given back) instead of holding it for as long as its socket stays open.

    shed(servicer): a reason to refuse at once, before authentication or parsing (the server is
    saturated): a refusal under a wave of calls then costs almost nothing and reveals nothing.
    """

    def wrap(fn: Callable[..., AsyncIterator[Any]]) -> Callable[..., Any]:
        @functools.wraps(fn)
        async def handler(self: MemoryServicer, request: Any, context: grpc.aio.ServicerContext) -> None:
            reason = shed(self) if shed is not None else None
            if reason is not None:
                # the status set and the handler returned: no exception travels through gRPC
                context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
                context.set_details(reason)
                context.set_trailing_metadata(((RETRY_AFTER_KEY, str(round(SATURATED_RETRY_S * 1e3))),))
                return
            await _stream(self, fn, request, context)

        return handler

    return wrap


async def _stream(self: "MemoryServicer", fn: Callable[..., AsyncIterator[Any]], request: Any,
                  context: grpc.aio.ServicerContext) -> None:
    async with _Call(self, context, fn.__name__) as call:
        if isinstance(request, Malformed):
            raise request.error()
        stall = self.limits.write_stall_seconds
        responses = fn(self, request, context, call.principal, call.rid)
        try:
            async for item in responses:
                try:
                    async with asyncio.timeout(stall):  # a timer, not a task per message as wait_for makes
                        await context.write(item)
                except TimeoutError:
                    log.warning("rpc.write_stalled", method=fn.__name__, seconds=stall)
                    raise ResourceExhausted(
                        f"the client read nothing for {stall:g} s; the stream was ended (read results as they arrive)"
                    ) from None
        finally:
            await responses.aclose()


class MemoryServicer(pb_grpc.MemoryServiceServicer):
    def __init__(self, core: MemoryCore, auth: Authenticator, limits: Limits, backend: str, debug: bool = False) -> None:
        self.core = core
        self.auth = auth
        self.limits = limits
        self.backend = backend
        self.debug = debug

    @rpc
    async def Store(self, request: pb.StoreRequest, context: Any, principal: Principal) -> pb.StoreResponse:
        if not request.HasField("memory"):
            raise InvalidArgument("is required", field="memory")
        memory = convert.memory_from_input(request.memory, principal, self.limits, convert.now())
        bad_links = await self.core.link_errors(principal, [memory])
        if bad_links:
            raise bad_links[memory.id]
        (out,) = await self.core.store_many(principal, [memory])
        hints = [] if out.duplicate else await self._hints(principal, out.memory.id)
        return pb.StoreResponse(id=out.memory.id, content_hash=out.memory.content_hash, duplicate=out.duplicate,
                                possible_updates=hints)

    async def _hints(self, principal: Principal, memory_id: str) -> list[pb.UpdateHint]:
        return [pb.UpdateHint(id=h.id, similarity=h.similarity, content=h.content)
                for h in await self.core.update_hints(principal, memory_id)]

    @rpc
    async def StoreBatch(self, request_iterator: Any, context: Any, principal: Principal) -> pb.StoreBatchResponse:
        items: list[pb.StoreBatchItem] = []
        valid = []  # (index in items, Memory)
        hinted: list[int] = []  # items that asked for update hints
        now = convert.now()
        async for req in request_iterator:
            index = len(items)
            if index >= self.limits.max_batch_items:
                raise ResourceExhausted(
                    f"a batch holds at most {self.limits.max_batch_items} items; split it", field="StoreBatch"
                )
            if isinstance(req, Malformed):
                item = pb.StoreBatchItem(index=index)
                items.append(item)
                item.error, item.error_code = str(req.error("item")), "INVALID_ARGUMENT"
                continue
            item = pb.StoreBatchItem(index=index, client_ref=req.client_ref[:256])
            items.append(item)
            try:
                if not req.HasField("memory"):
                    raise InvalidArgument("is required", field="memory")
                valid.append((index, convert.memory_from_input(req.memory, principal, self.limits, now)))
                if req.update_hints:
                    hinted.append(index)
            except TeleoError as exc:
                item.error, item.error_code = str(exc), status_of(exc).name
        await self._commit_items(principal, items, valid, {})
        for index in hinted:  # after the whole batch is stored: an item may update one stored before it
            item = items[index]
            if item.id and not item.duplicate and not item.error:
                item.possible_updates.extend(await self._hints(principal, item.id))
        failed = sum(1 for i in items if i.error)
        dups = sum(1 for i in items if i.duplicate)
        return pb.StoreBatchResponse(items=items, stored=len(items) - failed - dups, duplicates=dups, failed=failed)

    async def _commit_items(self, principal: Principal, items: list[pb.StoreBatchItem], valid: list[tuple[int, Memory]],
                            given: dict[str, EmbeddingSet], local_links: frozenset[str] = frozenset()) -> None:
        """Store the valid items, marking each result on ``items``. ``given``: vectors to use instead
        of embedding; ``local_links``: ids of this batch that links may point at (checked by the caller)."""
        # links to memories of this batch are not stored yet: check only the others here
        outside = [replace(m, links=tuple(lk for lk in m.links if lk.target_id not in local_links)) for _, m in valid]
        bad_links = await self.core.link_errors(principal, outside)
        for index, m in valid:
            if m.id in bad_links:
                items[index].error, items[index].error_code = str(bad_links[m.id]), "INVALID_ARGUMENT"
        valid = [(index, m) for index, m in valid if m.id not in bad_links]
        # One embedding+commit per chunk of items: bounded memory, and a failure (embedder down)
        # marks only the items of the chunk that failed.
        down: TeleoError | None = None  # a dependency that failed (full disk, lock, embedder): the rest fail alike
        for start in range(0, len(valid), 256):
            chunk = valid[start : start + 256]
            try:
                if down is not None:
                    raise down
                outs = await self.core.store_many(principal, [m for _, m in chunk], given)
            except TeleoError as exc:
                if isinstance(exc, (ResourceExhausted, Unavailable)):
                    down = exc
                for index, _ in chunk:
                    items[index].error, items[index].error_code = str(exc), status_of(exc).name
                continue
            for (index, _), out in zip(chunk, outs, strict=True):
                items[index].id = out.memory.id
                items[index].content_hash = out.memory.content_hash
                items[index].duplicate = out.duplicate

    @rpc
    async def Import(self, request_iterator: Any, context: Any, principal: Principal) -> pb.ImportResponse:
        items: list[pb.StoreBatchItem] = []
        valid: list[tuple[int, Memory]] = []
        given: dict[str, EmbeddingSet] = {}
        new_id: dict[str, tuple[str, str]] = {}  # exported id -> (new id, namespace)
        now, version = convert.now(), self.core.embedder.model_version
        codecs = self.core.token_specs()  # exported token codes are reused only under the same codec
        async for req in request_iterator:
            index = len(items)
            if index >= self.limits.max_batch_items:
                raise ResourceExhausted(f"an import holds at most {self.limits.max_batch_items} items; split it",
                                        field="Import")
            item = pb.StoreBatchItem(index=index)
            items.append(item)
            try:
                if isinstance(req, Malformed):
                    raise req.error("item")
                memory, emb = convert.imported(req.item, principal, self.limits, now, version, codecs)
            except TeleoError as exc:
                item.error, item.error_code = str(exc), status_of(exc).name
                continue
            item.client_ref = req.item.memory.id[:256]
            new_id[req.item.memory.id] = (memory.id, memory.namespace)
            valid.append((index, memory))
            if emb is not None:
                given[memory.id] = emb
        # links between imported memories follow their new ids, within one namespace
        for pos, (index, m) in enumerate(valid):
            links = []
            for i, lk in enumerate(m.links):
                target = new_id.get(lk.target_id)
                if target is not None and target[1] != m.namespace:
                    items[index].error = str(InvalidArgument("links stay within a namespace",
                                                             field=f"item.memory.input.links[{i}]"))
                    items[index].error_code = "INVALID_ARGUMENT"
                links.append(replace(lk, target_id=target[0]) if target is not None else lk)
            valid[pos] = (index, replace(m, links=tuple(links)))
        valid = [(index, m) for index, m in valid if not items[index].error]
        await self._commit_items(principal, items, valid, given,
                                 frozenset(new for new, _ in new_id.values()))
        failed = sum(1 for i in items if i.error)
        dups = sum(1 for i in items if i.duplicate)
        reused = sum(1 for index, m in valid if m.id in given and not items[index].error and not items[index].duplicate)
        return pb.ImportResponse(items=items, stored=len(items) - failed - dups, duplicates=dups, failed=failed,
                                 vectors_reused=reused)

    @rpc
    async def Get(self, request: pb.GetRequest, context: Any, principal: Principal) -> pb.GetResponse:
        ids = convert.ids_from(request.ids, self.limits)
        if request.include_purpose and len(ids) > PURPOSE_IDS:
            raise InvalidArgument(f"include_purpose allows at most {PURPOSE_IDS} ids per call, got {len(ids)}; "
                                  "split the call", field="ids")
        if not request.include_purpose:
            return pb.GetResponse(memories=[convert.memory_to_proto(m) for m in await self.core.get(principal, ids)])
        memories, purposes = await self.core.get_with_purposes(principal, ids)
        out = [convert.memory_to_proto(m) for m in memories]
        for m, purpose in zip(out, purposes):
            if purpose is not None:
                m.purpose.CopyFrom(convert.purpose_to_proto(purpose))
        return pb.GetResponse(memories=out)

    @rpc
    async def Delete(self, request: pb.DeleteRequest, context: Any, principal: Principal) -> pb.DeleteResponse:
        ids = convert.ids_from(request.ids, self.limits)
        return pb.DeleteResponse(deleted=await self.core.delete(principal, ids))

    @rpc
    async def Update(self, request: pb.UpdateRequest, context: Any, principal: Principal) -> pb.UpdateResponse:
        (memory_id,) = convert.ids_from([request.id], self.limits, field="id")
        added = {(lk.target_id, int(lk.type)): j for j, lk in enumerate(request.add_links)}
        given = len(request.memory.links) if "links" in request.fields else None

        def link_field(i: int, link: Any) -> str:
            """Where a refused link came from: add_links, or the memory's links (a replaced list)."""
            j = added.get((link.target_id, int(link.type)))
            if j is not None and (given is None or i >= given):
                return f"add_links[{j}].target_id"
            return f"memory.links[{i}].target_id"

        stored, previous_id = await self.core.update(
            principal, memory_id, lambda old: convert.updated_memory(old, request, principal, self.limits),
            request.keep_previous, link_field)
        return pb.UpdateResponse(memory=convert.memory_to_proto(stored), previous_id=previous_id)

    @streaming_rpc()
    async def Export(self, request: pb.ExportRequest, context: Any, principal: Principal, rid: str) -> AsyncIterator[pb.ExportedMemory]:
        filters = convert.filters_from(request.filters, principal, self.limits)
        async for memory, emb in self.core.export(principal, filters, request.with_embeddings):
            yield convert.exported(memory, emb)

    @rpc
    async def List(self, request: pb.ListRequest, context: Any, principal: Principal) -> pb.ListResponse:
        after, size = convert.page_from(request, self.limits)
        filters = convert.filters_from(request.filters, principal, self.limits)
        memories, next_after = await self.core.list_memories(principal, filters, after, size)
        return pb.ListResponse(memories=[convert.memory_to_proto(m) for m in memories],
                               next_cursor=convert.cursor_of(next_after))

    @rpc
    async def DeleteWhere(self, request: pb.DeleteWhereRequest, context: Any,
                          principal: Principal) -> pb.DeleteWhereResponse:
        filters = convert.filters_from(request.filters, principal, self.limits)
        matched, deleted = await self.core.delete_where(principal, filters, request.dry_run)
        return pb.DeleteWhereResponse(matched=matched, deleted=deleted)

    @streaming_rpc(shed=lambda servicer: servicer.core.admission.saturated())
    async def Retrieve(self, request: pb.RetrieveRequest, context: Any, principal: Principal, rid: str) -> AsyncIterator[pb.RetrieveResponse]:
        query, vectors = convert.query_from_request(request, principal, self.limits, convert.now(),
                                                    self.core.retriever.resolve_profile)
        if self.debug:
            log.debug("retrieve.query", text=query.text, profile=query.profile)
        if vectors is not None:
            query.embedding = self.core.vectors_to_embedding(vectors)
        ttl = self.core.retriever.cache_ttl(query.profile)
        key = (principal, query.profile, request.SerializeToString(deterministic=True)) if ttl > 0 else None
        if key is not None:
            cached = self.core.results.get(key, principal)
            if cached is not None:
                for response in self._replay(cached, rid, request.batched):
                    yield response
                return
            versions = self.core.results.snapshot(principal)
        # admitted (or refused) before any work is spent on it, embedding included
        ticket = self.core.admit(principal)
        sent: list[pb.RetrieveResponse] = []
        try:
            async for response in self._retrieve(query, vectors is not None, ticket, rid, request.batched):
                if key is not None:
                    sent.append(response)
                yield response
        finally:
            ticket.close()
        if key is not None and sent and sent[-1].HasField("summary") and not sent[-1].summary.degraded:
            self.core.results.put(key, sent, ttl, versions)

    @staticmethod
    def _replay(cached: list[pb.RetrieveResponse], rid: str, batched: bool) -> list[pb.RetrieveResponse]:
        """A cached answer: one stage event saying so (in the summary alone when batched), the
        results as they were sent (the request, ``batched`` included, is the cache's key), and the
        summary (route skip, skip_reason cache_hit, this call's request id)."""
        t0 = time.perf_counter()
        results = [r for r in cached if r.HasField("result") or r.HasField("results")]
        n = sum(len(r.results.results) if r.HasField("results") else 1 for r in results)
        summary = pb.RetrieveSummary()
        summary.CopyFrom(cached[-1].summary)
        stage = pb.StageEvent(stage="cache", candidates_in=n, candidates_out=n,
                              backend="cache", detail=f"cache_hit (first answered with route={summary.route or 'none'})")
        summary.route, summary.skip_reason, summary.request_id = "skip", "cache_hit", rid
        summary.embed_ms, summary.retry_count = 0.0, 0
        del summary.stages[:]
        summary.stages.append(stage)
        summary.total_ms = (time.perf_counter() - t0) * 1e3
        return [*([] if batched else [pb.RetrieveResponse(stage=stage)]), *results, pb.RetrieveResponse(summary=summary)]

    async def _retrieve(self, query: Any, precomputed: bool, ticket: Any, rid: str,
                        batched: bool) -> AsyncIterator[pb.RetrieveResponse]:
        """The answer as messages: each stage event and each result on its own, or (``batched``)
        the results in batches of about ``RESULT_BATCH_BYTES`` and the stage events in the summary."""
        embed_ms, degraded = 0.0, ""
        if not precomputed:
            query.embedding, embed_ms, degraded = await self.core.embed_query(query.text)
        stages: list[pb.StageEvent] = []
        rank = 0
        batch, batch_bytes = pb.RetrieveResponse(), 0
        async for ev in self.core.retrieve(query, embed_ms, degraded, ticket):
            if isinstance(ev, StageReport):
                stage = convert.stage_to_proto(ev)
                stages.append(stage)
                if not batched:
                    yield pb.RetrieveResponse(stage=stage)
            elif isinstance(ev, Hit):
                rank += 1
                fields = convert.result_fields(ev, rank, query.include_breakdown, query.explain, query.snippets,
                                               query.omit_content)
                if not batched:
                    yield pb.RetrieveResponse(result=fields)
                    continue
                batch_bytes += batch.results.results.add(**fields).ByteSize()
                if batch_bytes >= RESULT_BATCH_BYTES:
                    yield batch
                    batch, batch_bytes = pb.RetrieveResponse(), 0
            elif isinstance(ev, RetrieveDone):
                if batch.HasField("results"):
                    yield batch
                yield pb.RetrieveResponse(
                    summary=pb.RetrieveSummary(
                        returned=ev.returned,
                        total_ms=ev.total_ms,
                        embed_ms=ev.embed_ms,
                        stages=stages,
                        degraded=ev.outcome.degraded,
                        degraded_reason=ev.outcome.degraded_reason,
                        profile=query.profile,
                        request_id=rid,
                        corpus_size=ev.outcome.corpus_size,
                        route=ev.outcome.route,
                        skip_reason=ev.outcome.skip_reason,
                        retry_count=ev.outcome.retry_count,
                        retrieval_confidence=min(max(float(ev.outcome.retrieval_confidence), 0.0), 1.0),
                        query_types=ev.outcome.query_types,
                        space_weights=ev.outcome.space_weights,
                        found_by_space={n: f for n, (f, _) in ev.outcome.coverage.items()},
                        unique_by_space={n: u for n, (_, u) in ev.outcome.coverage.items() if u},
                        conflicts=[pb.ConflictPair(id_a=c.id_a, id_b=c.id_b, edge_type=c.edge_type,
                                                   resolution=c.resolution, winner=c.winner)
                                   for c in ev.outcome.conflicts],
                    )
                )

    @rpc
    async def Compare(self, request: pb.CompareRequest, context: Any, principal: Principal) -> pb.CompareResponse:
        if not request.id_a or not request.id_b:
            raise InvalidArgument("both id_a and id_b are required", field="id_a" if not request.id_a else "id_b")
        aggregation = convert.AGGREGATIONS.get(request.aggregation)
        if aggregation is None:
            raise InvalidArgument(f"unknown value {request.aggregation}", field="aggregation")
        weights = {k: validate.in_range(w, 0.0, 10.0, f"space_weights[{k}]") for k, w in request.space_weights.items()}
        validate.max_chars(request.search_matrix, 64, "search_matrix")
        spaces, agg, purpose = await self.core.compare(principal, request.id_a, request.id_b, aggregation, weights,
                                                       request.search_matrix)
        resp = pb.CompareResponse(spaces=spaces, aggregate=agg, aggregation=request.aggregation or pb.AGGREGATION_WEIGHTED_AVERAGE)
        if purpose is not None:
            resp.purpose_similarity = purpose
        return resp

    @rpc
    async def DiscoverEntryPoints(self, request: pb.DiscoverEntryPointsRequest, context: Any,
                                  principal: Principal) -> pb.DiscoverEntryPointsResponse:
        min_similarity = validate.unit(request.min_similarity, "min_similarity")
        as_retrieve = pb.RetrieveRequest(filters=request.filters)
        which = request.WhichOneof("query")
        if which == "text":
            as_retrieve.text = request.text
        elif which == "vectors":
            as_retrieve.vectors.CopyFrom(request.vectors)
        query, vectors = convert.query_from_request(as_retrieve, principal, self.limits, convert.now(),
                                                    self.core.retriever.resolve_profile)
        if vectors is not None:
            query.embedding = self.core.vectors_to_embedding(vectors)
        found = await self.core.discover(query, min_similarity, vectors is not None)
        return pb.DiscoverEntryPointsResponse(entry_points=[
            pb.EntryPoint(space=e.space, memory_id=e.memory_id, similarity=e.similarity, score=e.score) for e in found])

    @rpc
    async def ListGoals(self, request: pb.ListGoalsRequest, context: Any, principal: Principal) -> pb.ListGoalsResponse:
        goals = await self.core.goals(principal)
        return pb.ListGoalsResponse(goals=[
            pb.Goal(id=g.id, label=g.label, size=g.size, drift=g.drift,
                    history=[pb.GoalSnapshot(time=convert.float_to_ts(h.time), label=h.label, size=h.size, drift=h.drift)
                             for h in g.history]) for g in goals])

    @rpc
    async def Feedback(self, request: pb.FeedbackRequest, context: Any, principal: Principal) -> pb.FeedbackResponse:
        if not request.id:
            raise InvalidArgument("is required", field="id")
        helpful = request.helpful if request.HasField("helpful") else None
        sufficient = request.sufficient if request.HasField("sufficient") else None
        memory = await self.core.feedback(principal, request.id, request.used, helpful, sufficient)
        return pb.FeedbackResponse(memory=convert.memory_to_proto(memory))

    @rpc
    async def Stats(self, request: pb.StatsRequest, context: Any, principal: Principal) -> pb.StatsResponse:
        counts, goals = await self.core.stats(principal, list(request.namespaces))
        return pb.StatsResponse(
            memories=sum(n for n, _ in counts.values()),
            namespaces=[pb.NamespaceStats(namespace=ns, memories=n, chunks=c) for ns, (n, c) in sorted(counts.items())],
            model_version=self.core.embedder.model_version,
            backend=self.backend,
            embedder=self.core.embedder.description,
            embedder_ready=self.core.embedder_ready,
            goals=goals,
            server_version=__version__,
            heads=[pb.EmbeddingHead(name=h.name, kind=h.kind.value, dimension=h.dim, dtype=h.dtype)
                   for h in heads().values()],
        )


__all__ = ["Malformed", "MemoryServicer", "add_to_server", "rpc", "streaming_rpc"]
