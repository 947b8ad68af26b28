"""Prometheus metrics: what the server does, served as text on ``/metrics`` from a port of its own.

Every server owns a :class:`Metrics` with its own ``CollectorRegistry``, so several servers in one
process never share a series. Label values come only from bounded sets (RPC method and status
code, profile, stage, space, embedding role); never from query text, memory ids, tokens or agents.

Where the numbers come from:

- RPCs: a grpc.aio server interceptor times every call and reads its status code; on a
  ``Retrieve`` stream it also reads the stage timings and candidate counts of the final summary;
- embedding: the embedder's :class:`~teleo_server.embedding.batching.EmbedObservers` callbacks
  and ``queue_depth``, and the on-disk cache's hit and miss counters;
- store: ``SQLiteStore.write_observer`` (set by the server);
- indexes and Retrieve streams in flight: read at scrape time, plain ints and lengths only, so a
  scrape never waits for or disturbs the index thread.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import grpc
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from teleo.v1 import memory_pb2 as pb

from teleo_server.core import MemoryCore
from teleo_server.embedding.base import Embedder, TextRole
from teleo_server.embedding.batching import EmbedObservers
from teleo_server.embedding.cache import CachedEmbedder
from teleo_server.errors import Unavailable
from teleo_server.pipeline.types import Retriever

log = structlog.get_logger(__name__)

_RPC_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_STAGE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_CANDIDATE_BUCKETS = (0, 1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 50_000, 100_000)
_EMBED_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
_WRITE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


_ROUTES = frozenset({"simple", "multi_hop", "exploratory", "skip"})  # a bounded label set


class Metrics:
    """One server's metrics. ``watch`` attaches them to a core; ``serve`` starts the endpoint."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.rpc_requests = Counter(
            "teleo_rpc_requests", "RPCs finished, by method and gRPC status code.",
            ["service", "method", "code"], registry=r)
        self.rpc_duration = Histogram(
            "teleo_rpc_duration_seconds", "RPC time from the handler's start to its last message.",
            ["service", "method", "code"], buckets=_RPC_BUCKETS, registry=r)
        self.stage_duration = Histogram(
            "teleo_retrieve_stage_duration_seconds", "Time of each pipeline stage that ran in a Retrieve.",
            ["profile", "stage"], buckets=_STAGE_BUCKETS, registry=r)
        self.stage_candidates = Histogram(
            "teleo_retrieve_stage_candidates", "Candidates each pipeline stage that ran passed on.",
            ["profile", "stage"], buckets=_CANDIDATE_BUCKETS, registry=r)
        self.routes = Counter(
            "teleo_retrieve_routes", "Retrievals by the router's route (profiles with a router; a result-cache "
            "answer counts as skip).", ["profile", "route"], registry=r)
        self.retries = Counter(
            "teleo_retrieve_retries", "Bounded retries run (attempts after the first).", ["profile"], registry=r)
        self.store_write_duration = Histogram(
            "teleo_store_write_duration_seconds", "Time of each committed store write transaction.",
            buckets=_WRITE_BUCKETS, registry=r)
        self.interceptor = RpcInterceptor(self)
        self._httpd: Any = None
        self._http_thread: threading.Thread | None = None

    # -- sources ----------------------------------------------------------------------------

    def watch(self, core: MemoryCore) -> None:
        """Read retrieve streams in flight, the indexes and the embedder of ``core``."""
        Gauge("teleo_retrieve_streams_in_flight", "Retrieve streams open now.",
              registry=self.registry).set_function(lambda: core.in_flight)
        Gauge("teleo_index_writes_unindexed", "Stored memories whose indexing failed, waiting for the next "
              "upkeep round to index them again.", registry=self.registry).set_function(lambda: core.unindexed)
        self.registry.register(_IndexCollector(core.retriever))
        self.registry.register(_LoadCollector(core))
        self.registry.register(_ResilienceCollector(core))
        self._watch_embedder(core.embedder)

    def _watch_embedder(self, embedder: Embedder) -> None:
        if isinstance(embedder, CachedEmbedder):
            self.registry.register(_CacheCollector(embedder))
            embedder = embedder.inner
        observers = getattr(embedder, "observers", None)
        if isinstance(observers, EmbedObservers):
            calls = Histogram(
                "teleo_embed_duration_seconds",
                "Time an embed call waited for its vectors, queueing included (cache hits excluded).",
                ["role"], buckets=_EMBED_BUCKETS, registry=self.registry)
            batch_time = Histogram(
                "teleo_embed_batch_duration_seconds", "Time of each batched model call that returned vectors.",
                buckets=_EMBED_BUCKETS, registry=self.registry)
            batch_texts = Histogram(
                "teleo_embed_batch_texts", "Texts per batched model call.",
                buckets=_BATCH_BUCKETS, registry=self.registry)
            query, document = calls.labels(TextRole.QUERY.value), calls.labels(TextRole.DOCUMENT.value)

            def on_call(is_query: bool, seconds: float) -> None:
                (query if is_query else document).observe(seconds)

            def on_batch(texts: int, seconds: float) -> None:
                batch_time.observe(seconds)
                batch_texts.observe(texts)

            observers.call, observers.batch = on_call, on_batch
        if hasattr(embedder, "queue_depth"):
            Gauge("teleo_embed_queue_depth", "Texts waiting for a batched model call.",
                  registry=self.registry).set_function(lambda: embedder.queue_depth)

    def observe_retrieve(self, summary: pb.RetrieveSummary) -> None:
        profile = _profile_label(summary.profile)
        if summary.route in _ROUTES:
            self.routes.labels(profile, summary.route).inc()
        if summary.retry_count > 0:
            self.retries.labels(profile).inc(summary.retry_count)
        for stage in summary.stages:
            if stage.skipped:
                continue
            self.stage_duration.labels(profile, stage.stage).observe(stage.elapsed_ms / 1e3)
            self.stage_candidates.labels(profile, stage.stage).observe(stage.candidates_out)

    # -- the endpoint ------------------------------------------------------------------------

    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` over HTTP on a daemon thread; returns the bound port (0 picks one)."""
        try:
            self._httpd, self._http_thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise Unavailable(f"cannot serve metrics on {host}:{port}: {exc}; is the port in use?") from exc
        bound = int(self._httpd.server_address[1])
        log.info("metrics.serving", host=host, port=bound)
        return bound

    def close(self) -> None:
        """Stop the endpoint (blocks up to half a second while its thread notices)."""
        httpd, thread = self._httpd, self._http_thread
        self._httpd = self._http_thread = None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if thread is not None:
            thread.join(5)


def _profile_label(profile: str) -> str:
    # "single_space:<space>" accepts a space's code or suffix in any case: one label per space.
    kind, sep, space = profile.partition(":")
    if not sep:
        return profile
    from teleo_server.spaces.registry import resolve_name

    try:
        return f"{kind}:{resolve_name(space)}"
    except KeyError:
        return f"{kind}:unknown"


# -- RPCs ---------------------------------------------------------------------------------------


class RpcInterceptor(grpc.aio.ServerInterceptor):
    """Counts and times every RPC of the server by method and status code."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        # handlers are registered once, so each is wrapped once: method -> (handler, wrapped)
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:  # no such method: gRPC answers UNIMPLEMENTED; not a series of ours
            return handler
        name = handler_call_details.method
        cached = self._wrapped.get(name)
        if cached is not None and cached[0] is handler:
            return cached[1]
        service, _, method = name.lstrip("/").rpartition("/")
        wrapped = _wrap_handler(handler, _Recorder(self._metrics, service, method))
        self._wrapped[name] = (handler, wrapped)
        return wrapped


def _wrap_handler(h: grpc.RpcMethodHandler, record: "_Recorder") -> grpc.RpcMethodHandler:
    kwargs = {"request_deserializer": h.request_deserializer, "response_serializer": h.response_serializer}
    if h.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(_wrap_call(h.unary_unary, record), **kwargs)
    if h.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(_wrap_call(h.stream_unary, record), **kwargs)
    if h.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(_wrap_stream(h.unary_stream, record), **kwargs)
    return grpc.stream_stream_rpc_method_handler(_wrap_stream(h.stream_stream, record), **kwargs)


class _Recorder:
    __slots__ = ("metrics", "service", "method")

    def __init__(self, metrics: Metrics, service: str, method: str) -> None:
        self.metrics, self.service, self.method = metrics, service, method

    def done(self, context: grpc.aio.ServicerContext, exc: BaseException | None, t0: float) -> None:
        code = _code_name(context, exc)
        labels = (self.service, self.method, code)
        self.metrics.rpc_requests.labels(*labels).inc()
        self.metrics.rpc_duration.labels(*labels).observe(time.perf_counter() - t0)

    def item(self, message: Any) -> None:
        if isinstance(message, pb.RetrieveResponse) and message.WhichOneof("event") == "summary":
            self.metrics.observe_retrieve(message.summary)


def _code_name(context: grpc.aio.ServicerContext, exc: BaseException | None) -> str:
    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):  # the client went away
        return grpc.StatusCode.CANCELLED.name
    code = context.code()  # set by abort() or set_code(); None when the handler set nothing
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int):
        for status in grpc.StatusCode:
            if status.value[0] == code:
                return status.name
    # an exception that escaped the handler is reported to the client as UNKNOWN
    return grpc.StatusCode.OK.name if exc is None else grpc.StatusCode.UNKNOWN.name


def _wrap_call(behavior: Callable[..., Any], record: _Recorder) -> Callable[..., Any]:
    if not inspect.iscoroutinefunction(behavior):
        return behavior  # synchronous handlers do not occur on this aio server

    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        t0, exc = time.perf_counter(), None
        try:
            return await behavior(request, context)
        except BaseException as e:
            exc = e
            raise
        finally:
            record.done(context, exc, t0)

    return call


class _ObservedContext:
    """A servicer context whose ``write`` shows each response to the recorder first; everything
    else is the context itself."""

    __slots__ = ("_context", "_record")

    def __init__(self, context: grpc.aio.ServicerContext, record: _Recorder) -> None:
        self._context, self._record = context, record

    async def write(self, message: Any) -> None:
        self._record.item(message)
        await self._context.write(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def _wrap_stream(behavior: Callable[..., Any], record: _Recorder) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(behavior):  # responses are sent with context.write()

        async def written(request: Any, context: grpc.aio.ServicerContext) -> None:
            t0, exc = time.perf_counter(), None
            try:
                await behavior(request, _ObservedContext(context, record))
            except BaseException as e:
                exc = e
                raise
            finally:
                record.done(context, exc, t0)

        return written
    if not inspect.isasyncgenfunction(behavior):
        return behavior

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        t0, exc = time.perf_counter(), None
        try:
            async for message in behavior(request, context):
                record.item(message)
                yield message
        except BaseException as e:
            exc = e
            raise
        finally:
            record.done(context, exc, t0)

    return stream


# -- read at scrape time --------------------------------------------------------------------------


class _LoadCollector(Collector):
    """How the last start filled the indexes (from a snapshot or from the store), and the snapshots
    written since."""

    def __init__(self, core: MemoryCore) -> None:
        self._core = core

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        seconds = GaugeMetricFamily(
            "teleo_index_load_seconds", "Seconds the last start took to fill the in-memory indexes, by "
            "source: snapshot (written at the last clean stop) or store (rebuilt from the database).",
            labels=["source"])
        reindexed = GaugeMetricFamily(
            "teleo_index_load_reindexed", "Memories the last start indexed again after reading the snapshot: "
            "those the database's change journal listed as changed since it was written (a crash, another "
            "program); 0 after a rebuild.")
        if self._core.loaded_from:
            seconds.add_metric([self._core.loaded_from], self._core.load_seconds)
            reindexed.add_metric([], self._core.load_reindexed)
        yield seconds
        yield reindexed
        snapshots = CounterMetricFamily(
            "teleo_index_snapshots", "Index snapshots begun since the server started, by kind (checkpoint: "
            "while serving; stop) and outcome (written, failed, stopped: a checkpoint's copy the stop ended).",
            labels=["kind", "outcome"])
        for (kind, outcome), n in sorted(self._core.snapshots.items()):
            snapshots.add_metric([kind, outcome], n)
        yield snapshots
        written = GaugeMetricFamily(
            "teleo_index_snapshot_write_seconds", "Seconds the last snapshot written took to write, by kind "
            "(a checkpoint's by the forked copy that wrote it, unless written on the index thread).", labels=["kind"])
        for kind, took in sorted(self._core.snapshot_write_seconds.items()):
            written.add_metric([kind], took)
        yield written
        held = GaugeMetricFamily(
            "teleo_index_checkpoint_hold_seconds", "Seconds the last checkpoint held the index thread (retrievals "
            "wait that long): the fork of the copy that writes it, or the whole write on the thread.")
        if any(kind == "checkpoint" for kind, _ in self._core.snapshots):
            held.add_metric([], self._core.checkpoint_hold_seconds)
        yield held


class _IndexCollector(Collector):
    """Index sizes, read from plain ints and lengths while the index thread may be writing: a
    scrape can see a count a moment old, never a torn structure."""

    def __init__(self, retriever: Retriever) -> None:
        self._retriever = retriever

    def collect(self) -> Iterator[GaugeMetricFamily]:
        memories = GaugeMetricFamily("teleo_index_memories", "Memories in the in-memory indexes.")
        memories.add_metric([], len(self._retriever))
        yield memories
        rows = GaugeMetricFamily(
            "teleo_index_rows", "Rows (memories or chunks) in a space's index, removed ones included "
            "until compaction.", labels=["space"])
        entries = GaugeMetricFamily(
            "teleo_index_entries", "Entries in a space's index: postings (sparse), vectors (dense), "
            "token vectors (late interaction).", labels=["space"])
        pending = GaugeMetricFamily(
            "teleo_index_pending_entries", "Postings in a sparse index's write buffer, not yet merged.",
            labels=["space"])
        size = GaugeMetricFamily(
            "teleo_index_bytes", "Bytes of a space's stored entries (sparse postings and their row-major "
            "copy, dense rows and truncations, token codes), capacity not yet written excluded.", labels=["space"])
        for space, n_rows, n_entries, n_pending, n_bytes in _space_sizes(self._retriever):
            rows.add_metric([space], n_rows)
            entries.add_metric([space], n_entries)
            if n_pending is not None:
                pending.add_metric([space], n_pending)
            size.add_metric([space], n_bytes)
        yield rows
        yield entries
        yield pending
        yield size


def _space_sizes(retriever: Retriever) -> Iterator[tuple[str, int, int, int | None, int]]:
    """(space, rows, entries, write-buffer postings or None, bytes) of each space with an index."""
    from teleo_server.index.dense import DenseIndex
    from teleo_server.index.sparse import SparseIndex
    from teleo_server.index.tokens import TokenStore

    for name, space in dict(getattr(retriever, "spaces", {})).items():
        index, tokens = getattr(space, "index", None), getattr(space, "store", None)
        if isinstance(index, SparseIndex):
            buffered = index.pending
            yield name, index.n_rows, int(index.indices.size) + buffered, buffered, index.nbytes
        elif isinstance(index, DenseIndex):
            yield name, index.n, index.n, None, index.nbytes
        elif isinstance(tokens, TokenStore):
            yield name, tokens.n, tokens.n_tokens, None, tokens.nbytes


class _ResilienceCollector(Collector):
    """Circuit breakers of the retrieval strategies and the result cache."""

    def __init__(self, core: MemoryCore) -> None:
        self._core = core

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        states = getattr(self._core.retriever, "breaker_states", None)
        is_open = GaugeMetricFamily("teleo_breaker_open", "1 while a strategy's circuit breaker is open (the "
                                    "strategy is skipped), 0.5 half-open, 0 closed.", labels=["name"])
        for name, state in (states() if states is not None else {}).items():
            is_open.add_metric([name], {"open": 1.0, "half_open": 0.5}.get(state, 0.0))
        yield is_open
        cache = self._core.results
        yield CounterMetricFamily("teleo_result_cache_hits", "Retrievals answered from the result cache.", value=cache.hits)
        yield CounterMetricFamily("teleo_result_cache_misses", "Cacheable retrievals that were not in the result cache.",
                                  value=cache.misses)
        groups = CounterMetricFamily(
            "teleo_retrieval_groups", "Groups of retrievals the index thread took from its queue at once, by "
            "size (pipeline.retrieval_group at most): the work their stages can share, the dense search on a "
            "device, done for the group in one pass.", labels=["size"])
        for size, n in sorted(self._core.retrieval_groups.items()):
            groups.add_metric([str(size)], n)
        yield groups


class _CacheCollector(Collector):
    def __init__(self, embedder: CachedEmbedder) -> None:
        self._embedder = embedder

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily("teleo_embed_cache_hits", "Texts answered from the embedding cache.",
                                  value=self._embedder.hits)
        yield CounterMetricFamily("teleo_embed_cache_misses", "Distinct texts the embedding cache had to "
                                  "have embedded.", value=self._embedder.misses)


__all__ = ["Metrics", "RpcInterceptor"]
