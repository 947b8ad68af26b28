"""The methods both clients offer, written once.

Each public method builds a ``Call`` (which RPC, its request, how to read the response, whether it is
safe to repeat) and hands it to ``_unary``/``_stream``, which the sync client runs at once and the
asyncio client returns as an awaitable or an async iterator.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from teleo.v1 import memory_pb2 as pb

from teleo_server.client import convert
from teleo_server.client.connection import ClientError, RetryPolicy, metadata, resolve_address, resolve_token
from teleo_server.client.types import (
    BatchResult,
    Comparison,
    DeleteWhereResult,
    Exported,
    Filters,
    Link,
    Memory,
    MemoryInput,
    Overrides,
    Page,
    QueryVectors,
    Result,
    SearchResponse,
    Stats,
    StoreResult,
    Summary,
    TimeBoosts,
    UpdateResult,
)

MemoryLike = MemoryInput | str | Mapping[str, Any]


@dataclass(frozen=True)
class Call:
    method: str                       # the RPC, e.g. "Store"
    request: Any                      # a message, or a list of them for a client stream
    convert: Callable[[Any], Any]     # response (or each streamed response) -> what the method returns
    idempotent: bool                  # safe to repeat after UNAVAILABLE
    timeout: float | None
    client_stream: bool = False
    many: bool = False                # a streamed response converts to a list of items, each yielded

    def items(self, response: Any) -> list[Any]:
        """What one streamed response yields."""
        return self.convert(response) if self.many else [self.convert(response)]


class Attempts:
    """One call's attempts: its request id (the same on every attempt), the time left of its deadline,
    and how long to wait before the next attempt (or the error to raise when there is none)."""

    def __init__(self, call: Call, token: str | None, retry: RetryPolicy) -> None:
        self.call, self.retry, self.attempt = call, retry, 1
        self.metadata = metadata(token, new_request_id())
        self.end = time.monotonic() + call.timeout if call.timeout is not None else None

    def left(self) -> float | None:
        return None if self.end is None else self.end - time.monotonic()

    def wait_after(self, error: ClientError) -> float:
        """Seconds to wait before attempting again; raises ``error`` when the call is not retried
        (not safe, attempts used up, or the wait would outlast the deadline)."""
        if not self.retry.should_retry(error, self.call.idempotent, self.attempt):
            raise error
        wait = self.retry.delay(self.attempt, error)
        if self.end is not None and time.monotonic() + wait >= self.end:
            raise error
        self.attempt += 1
        return wait


class Api:
    """Teleo's memory API over one channel. See ``Client`` and ``AsyncClient``."""

    def __init__(self, address: str | None = None, *, token: str | None = None, ca_cert: Any = None,
                 timeout: float = 30.0, retry: RetryPolicy | None = None) -> None:
        self.address = resolve_address(address)
        self.token = resolve_token(token)
        self.ca_cert = ca_cert
        self.timeout = timeout
        self.retry = retry or RetryPolicy()

    def _deadline(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else timeout

    def _attempts(self, call: Call) -> Attempts:
        return Attempts(call, self.token, self.retry)

    def _unary(self, call: Call) -> Any:
        raise NotImplementedError

    def _stream(self, call: Call) -> Any:
        raise NotImplementedError

    # --- writing -----------------------------------------------------------------------------

    def store(self, memory: MemoryLike, *, namespace: str = "", timeout: float | None = None, **fields: Any) -> StoreResult:
        """Store one memory (a ``MemoryInput``, a text, or a dict of its fields; ``fields`` add to a
        text, e.g. ``store("...", memory_type="episodic", metadata={"team": "ops"})``). Acknowledged
        once it is durably committed with its embeddings. Content the namespace already holds is not
        stored again: ``duplicate`` is set and ``id`` is the existing memory's."""
        if fields:
            if not isinstance(memory, str):
                raise TypeError("keyword fields go with a text; put them in the MemoryInput instead")
            memory = MemoryInput(content=memory, **fields)
        req = pb.StoreRequest(memory=convert.memory_input(memory, namespace))
        return self._unary(Call("Store", req, convert.store_result, True, self._deadline(timeout)))

    def store_batch(self, memories: Iterable[MemoryLike], *, namespace: str = "", client_refs: Sequence[str] | None = None,
                    update_hints: bool = False, timeout: float | None = None) -> BatchResult:
        """Store many memories in one call; each is validated and stored on its own, so one bad item
        does not sink the others (see ``BatchResult.items``). ``update_hints``: each item also names
        the earlier memories it probably updates, as ``store`` does (one dense search an item)."""
        items = [pb.StoreBatchRequest(memory=convert.memory_input(m, namespace), update_hints=update_hints)
                 for m in memories]
        if client_refs is not None:
            if len(client_refs) != len(items):
                raise ValueError(f"{len(client_refs)} client_refs for {len(items)} memories; give one per memory")
            for item, ref in zip(items, client_refs):
                item.client_ref = ref
        return self._unary(Call("StoreBatch", items, convert.batch_result, True, self._deadline(timeout),
                                client_stream=True))

    def update(self, id: str, *, keep_previous: bool = False, add_links: Sequence[Link] = (),
               timeout: float | None = None, **fields: Any) -> UpdateResult:
        """Change the named fields of a memory, e.g. ``update(id, content="...")``; a new content is
        re-embedded atomically. ``keep_previous`` keeps the old version as a memory of its own, which
        the updated one ``supersedes``. ``add_links`` are added to the links the memory has when the
        update runs (``links=`` replaces them all)."""
        req = convert.update_request(id, fields, keep_previous, add_links)
        return self._unary(Call("Update", req, lambda r: UpdateResult(convert.memory(r.memory), r.previous_id),
                                False, self._deadline(timeout)))

    def supersede(self, id: str, replaced: str | Sequence[str], *, timeout: float | None = None,
                  **fields: Any) -> UpdateResult:
        """Link memory ``id`` to the earlier memories it replaces (``supersedes``), keeping its other
        links, in one call (with any ``fields`` to change as well): for the ``possible_updates`` a
        ``store`` named that it does replace."""
        return self.update(id, add_links=convert.with_links((), replaced), timeout=timeout, **fields)

    def delete(self, ids: str | Sequence[str], *, timeout: float | None = None) -> int:
        """Delete memories by id; any unknown or unreadable id fails the call (NOT_FOUND) and nothing
        is deleted. Returns how many were deleted."""
        req = pb.DeleteRequest(ids=[ids] if isinstance(ids, str) else list(ids))
        return self._unary(Call("Delete", req, lambda r: r.deleted, False, self._deadline(timeout)))

    def delete_where(self, filters: Filters | Mapping[str, Any], *, dry_run: bool = False,
                     timeout: float | None = None) -> DeleteWhereResult:
        """Delete every memory you may read that matches ``filters``; ``filters.namespaces`` is
        required. ``dry_run`` counts what would be deleted."""
        req = pb.DeleteWhereRequest(filters=convert.filters(filters), dry_run=dry_run)
        return self._unary(Call("DeleteWhere", req, lambda r: DeleteWhereResult(r.matched, r.deleted),
                                dry_run, self._deadline(timeout)))

    def feedback(self, id: str, *, used: bool = False, helpful: bool | None = None, request_id: str = "",
                 sufficient: bool | None = None, timeout: float | None = None) -> Memory:
        """Record that a retrieved memory was used, helped (``helpful=True``) or misled (``False``);
        returns the memory with its counters. ``sufficient`` says whether the retrieval's results
        were enough to answer (``True``) or a follow-up query was needed (``False``)."""
        if not used and helpful is None and sufficient is None:
            raise ValueError("nothing to record: pass used=True, helpful=True/False and/or sufficient=True/False")
        req = pb.FeedbackRequest(id=id, used=used, request_id=request_id)
        if helpful is not None:
            req.helpful = helpful
        if sufficient is not None:
            req.sufficient = sufficient
        return self._unary(Call("Feedback", req, lambda r: convert.memory(r.memory), False, self._deadline(timeout)))

    def import_(self, items: Iterable[Exported], *, timeout: float | None = None) -> BatchResult:
        """Store exported memories (new ids; links among them follow). Vectors they carry are reused
        when the server runs the same model version (``vectors_reused``)."""
        reqs = [pb.ImportRequest(item=convert.exported_message(e)) for e in items]
        return self._unary(Call("Import", reqs, convert.batch_result, True, self._deadline(timeout), client_stream=True))

    # --- reading -----------------------------------------------------------------------------

    def get(self, ids: str | Sequence[str], *, purpose: bool = False, timeout: float | None = None) -> list[Memory]:
        """Memories by id, in the order asked; any unknown or unreadable id fails the call (NOT_FOUND).
        ``purpose``: also each memory's goal and per-space alignment (``Memory.purpose``; up to 100 ids)."""
        req = pb.GetRequest(ids=[ids] if isinstance(ids, str) else list(ids), include_purpose=purpose)
        return self._unary(Call("Get", req, lambda r: [convert.memory(m) for m in r.memories], True,
                                self._deadline(timeout)))

    def list(self, filters: Filters | Mapping[str, Any] | None = None, *, page_size: int = 100, cursor: str = "",
             timeout: float | None = None) -> Page:
        """One page of the memories you may read, oldest first; pass ``next_cursor`` for the next."""
        req = pb.ListRequest(filters=convert.filters(filters), page_size=page_size, cursor=cursor)
        return self._unary(Call("List", req, lambda r: Page(tuple(convert.memory(m) for m in r.memories), r.next_cursor),
                                True, self._deadline(timeout)))

    def retrieve(self, query: str | QueryVectors, *, top_k: int = 0, profile: str = "",
                 filters: Filters | Mapping[str, Any] | None = None, target_goals: Iterable[str] = (),
                 johari: Iterable[str] = (), overrides: Overrides | Mapping[str, Any] | None = None,
                 breakdown: bool = False, explain: bool = False, snippets: bool = False, omit_content: bool = False,
                 include_historical: bool = False, as_of_event: datetime | None = None,
                 as_of_ingestion: datetime | None = None, time_boosts: TimeBoosts | Mapping[str, Any] | None = None,
                 batched: bool = False, timeout: float | None = None):
        """The retrieval's events as they arrive: a ``Stage`` as each stage finishes, then each
        ``Result`` in rank order, then one ``Summary``. ``search`` collects them. ``top_k`` 0 takes
        the profile's default (10; ``openclaw`` 6). ``batched`` has the server send the results in
        a few messages and the stages only in the summary (``search`` asks for it): the same
        results and summary, with two messages instead of one per stage and result.

        Knowledge over time: ``include_historical`` keeps memories that were superseded or lost a
        resolved contradiction (profiles with the conflicts stage, e.g. ``hipporag``, leave them out
        otherwise); ``as_of_event`` retrieves what was true at that moment (event time at or before
        it), ``as_of_ingestion`` what had been stored by then. A naive datetime is local time.
        ``time_boosts`` (``TimeBoosts``) raise recent memories, those near an hour or weekday, or those
        near a position in a session, before the final top-K."""
        req = convert.retrieve_request(query, top_k=top_k, profile=profile, where=filters, target_goals=target_goals,
                                       johari=johari, stage_overrides=overrides, breakdown=breakdown, explain=explain,
                                       snippets=snippets, omit_content=omit_content,
                                       include_historical=include_historical, as_of_event=as_of_event,
                                       as_of_ingestion=as_of_ingestion, boosts=time_boosts, batched=batched)
        return self._stream(Call("Retrieve", req, lambda ev: convert.events(ev, breakdown), True, self._deadline(timeout),
                                 many=True))

    def export(self, filters: Filters | Mapping[str, Any] | None = None, *, with_embeddings: bool = False,
               timeout: float | None = None):
        """Every memory you may read that matches ``filters``, oldest first, as ``Exported`` items
        (with their vectors when ``with_embeddings``)."""
        req = pb.ExportRequest(filters=convert.filters(filters), with_embeddings=with_embeddings)
        return self._stream(Call("Export", req, convert.exported, True, self._deadline(timeout)))

    def compare(self, id_a: str, id_b: str, *, aggregation: str = "weighted_average",
                space_weights: Mapping[str, float] | None = None, search_matrix: str = "",
                timeout: float | None = None) -> Comparison:
        """How similar two memories are in each space, and those similarities aggregated (weighted by
        ``space_weights``, on top of a named ``search_matrix``'s), and their purpose vectors' cosine."""
        req = pb.CompareRequest(id_a=id_a, id_b=id_b, aggregation=convert.enum_number("aggregation", aggregation),
                                space_weights=dict(space_weights or {}), search_matrix=search_matrix)
        return self._unary(Call("Compare", req, convert.comparison, True, self._deadline(timeout)))

    def discover_entry_points(self, query: str | QueryVectors, *, filters: Filters | Mapping[str, Any] | None = None,
                              min_similarity: float = 0.0, timeout: float | None = None):
        """Each space that can search the whole corpus, ranked by its best match for ``query``
        (``EntryPoint``: the space, its top memory, a similarity in [0, 1]), best first."""
        r = convert.retrieve_request(query, top_k=0, profile="", where=filters, target_goals=(), johari=(),
                                     stage_overrides=None, breakdown=False, explain=False, snippets=False,
                                     omit_content=False)
        req = pb.DiscoverEntryPointsRequest(filters=r.filters, min_similarity=min_similarity)
        if r.WhichOneof("query") == "vectors":
            req.vectors.CopyFrom(r.vectors)
        else:
            req.text = r.text
        return self._unary(Call("DiscoverEntryPoints", req, convert.entry_points, True, self._deadline(timeout)))

    def list_goals(self, *, timeout: float | None = None):
        """The goals that emerged from the memories you may read, each with its history."""
        return self._unary(Call("ListGoals", pb.ListGoalsRequest(), convert.goals, True, self._deadline(timeout)))

    def stats(self, namespaces: Sequence[str] = (), *, timeout: float | None = None) -> Stats:
        """What you may read (memories per namespace), the model, backend and embedding heads."""
        req = pb.StatsRequest(namespaces=list(namespaces))
        return self._unary(Call("Stats", req, convert.stats, True, self._deadline(timeout)))


def new_request_id() -> str:
    return uuid.uuid4().hex[:16]


def collect(events: Iterable[Any]) -> SearchResponse:
    """A retrieval's events gathered: its results in rank order and its summary."""
    results: list[Result] = []
    summary: Summary | None = None
    for ev in events:
        if isinstance(ev, Result):
            results.append(ev)
        elif isinstance(ev, Summary):
            summary = ev
    if summary is None:
        raise ClientError("INTERNAL", "the retrieval ended without its summary")
    return SearchResponse(tuple(results), summary)


__all__ = ["Api", "Attempts", "Call", "MemoryLike", "collect", "new_request_id"]
