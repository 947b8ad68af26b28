"""Building, starting and stopping the gRPC server.

``build_server`` does everything but start (tests bind port 0); ``App.start`` loads the indexes
from the store and flips health to SERVING; ``App.stop`` drains gracefully.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import grpc
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection
from pydantic import ValidationError
from teleo.v1 import memory_pb2

from teleo_server.api.servicer import MemoryServicer, add_to_server
from teleo_server.auth import Authenticator, ensure_dev_token
from teleo_server.blas import limit_threads
from teleo_server.config import Settings, invalid_configuration
from teleo_server import snapshot
from teleo_server.core import Admission, MemoryCore, SnapshotPlan
from teleo_server.embedding.base import Embedder
from teleo_server.errors import InvalidArgument, TeleoError, Unavailable
from teleo_server.heap import huge_pages
from teleo_server.metrics import Metrics
from teleo_server.pipeline.types import Retriever
from teleo_server.plugins import load_plugins
from teleo_server.store import SQLiteStore
from teleo_server.store.schema import SCHEMA_VERSION

log = structlog.get_logger(__name__)

SERVICE_NAME = memory_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name
# Health service names: "" is the whole server; the others are its components.
COMPONENTS = ("embedding", "index", "store")
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass
class App:
    settings: Settings
    server: grpc.aio.Server
    port: int
    core: MemoryCore
    health: HealthServicer
    backend: str
    dev_token: str | None = None
    metrics: Metrics | None = None
    metrics_port: int | None = None  # where /metrics is served once started; None = off
    _tasks: list[asyncio.Task] = field(default_factory=list)
    _embedder_started: bool = False

    async def start(self) -> None:
        if self.metrics is not None:
            self.metrics_port = self.metrics.serve(self.settings.metrics.host, self.settings.metrics.port or 0)
        for name in ("", SERVICE_NAME, *COMPONENTS):
            await self.health.set(name, NOT_SERVING)
        await self.server.start()
        await self.health.set("store", SERVING)
        ready = await self._check_embedder()
        await self.core.load_indexes()
        if ready and self.settings.warm_up:
            await self.core.warm_up()
        await self.health.set("index", SERVING)
        await self.health.set("", SERVING)
        await self.health.set(SERVICE_NAME, SERVING)
        log.info("server.serving", port=self.port, backend=self.backend, embedder=self.core.embedder.description, embedder_ready=ready)
        self._tasks.append(asyncio.create_task(self._watch_embedder(), name="teleo-embedder-watch"))
        self._tasks.append(asyncio.create_task(self._watch_store(), name="teleo-store-watch"))
        self._tasks.append(asyncio.create_task(self._maintain(), name="teleo-maintenance"))
        self._tasks.append(asyncio.create_task(self._checkpoints(), name="teleo-checkpoints"))
        if ready:
            self._tasks.append(asyncio.create_task(self._reembed(), name="teleo-reembed"))

    async def _check_embedder(self) -> bool:
        try:
            if not self._embedder_started:
                # start() connects (Triton) or loads models (in-process); retried until it works.
                await self.core.embedder.start()
                self._embedder_started = True
            ready = await self.core.embedder.ready()
        except TeleoError as exc:
            log.warning("embedder.unavailable", embedder=self.core.embedder.description, error=str(exc))
            ready = False
        if ready != self.core.embedder_ready:
            log.info("embedder.state", ready=ready, embedder=self.core.embedder.description)
        self.core.embedder_ready = ready
        await self.health.set("embedding", SERVING if ready else NOT_SERVING)
        return ready

    async def _maintain(self) -> None:
        """Index upkeep on its own schedule, so no query pays for it."""
        while True:
            try:
                if await self.core.maintain():
                    continue  # more may have arrived meanwhile: look again at once
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - upkeep must not die; the next round retries
                log.exception("maintenance.failed")
            await asyncio.sleep(self.settings.maintenance_seconds)

    async def _checkpoints(self) -> None:
        """A snapshot while serving, once enough has changed (``config.CheckpointSettings``), on a
        loop of its own: upkeep never waits while a forked copy writes one."""
        cp = self.settings.checkpoint
        while True:
            try:
                await self.core.checkpoint(cp.share, cp.min_changes, cp.seconds, cp.fork)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - as upkeep: the next round retries
                log.exception("checkpoint.failed")
            await asyncio.sleep(self.settings.maintenance_seconds)

    async def _watch_embedder(self) -> None:
        # Recovery is automatic: when the embedder comes back, health and writes follow.
        while True:
            await asyncio.sleep(self.settings.embedder_check_seconds)
            was = self.core.embedder_ready
            if await self._check_embedder() and not was:
                await self._reembed()

    async def _watch_store(self) -> None:
        """Probe the store and the index, and let their health follow.

        ``store`` is NOT_SERVING while writes cannot succeed (a full disk, a write lock held by
        another process; reads keep working either way); ``index`` while the index thread does not
        answer within ``index_probe_seconds`` (stuck behind work that should never take that long).
        """
        store, serving = self.core.store, {"store": True, "index": True}
        while True:
            await asyncio.sleep(self.settings.store_check_seconds)
            problems = {"store": await asyncio.to_thread(store.check),
                        "index": await self.core.probe_index(self.settings.index_probe_seconds)}
            for component, problem in problems.items():
                if (problem is None) != serving[component]:
                    serving[component] = problem is None
                    log.warning(f"{component}.health", serving=serving[component], problem=problem)
                    await self.health.set(component, SERVING if serving[component] else NOT_SERVING)

    async def _reembed(self) -> None:
        try:
            await self.core.reembed_stale()
        except TeleoError as exc:
            log.warning("index.reembed_failed", error=str(exc))

    async def wait(self) -> None:
        await self.server.wait_for_termination()

    async def stop(self, grace: float | None = None) -> None:
        grace = self.settings.grace_seconds if grace is None else grace
        await self.health.enter_graceful_shutdown()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        try:
            await self.server.stop(grace)
        finally:
            if self.metrics is not None:
                await asyncio.to_thread(self.metrics.close)
            await self.core.close()
        log.info("server.stopped")


def _default_embedder(settings: Settings) -> Embedder:
    from teleo_server.embedding import EmbeddingSettings, make_embedder

    options = dict(settings.embedding)
    # The cache lives beside the database unless configured, so one data_dir holds all state.
    options.setdefault("cache_dir", settings.data_dir / "embed-cache")
    options.setdefault("worker_nice", settings.limits.worker_nice)
    try:
        embedding = EmbeddingSettings(**options)
    except ValidationError as exc:
        raise invalid_configuration(exc, ("embedding",)) from exc
    return make_embedder(embedding)


def _default_retriever(settings: Settings, backend: str) -> Retriever:
    from teleo_server.pipeline import make_retriever
    from teleo_server.pipeline_settings import PipelineSettings

    try:
        pipeline = PipelineSettings(**settings.pipeline)
    except ValidationError as exc:
        raise invalid_configuration(exc, ("pipeline",)) from exc
    return make_retriever(pipeline, backend)


def _resolve_backend(name: str) -> str:
    from teleo_server.compute.backend import resolve

    return resolve(name)


def _snapshot_plan(settings: Settings, retriever: Retriever, backend: str) -> SnapshotPlan | None:
    """Where and against what the indexes are snapshotted (None: off, or a device backend, whose
    indexes live on the device and are rebuilt at every start)."""
    pipeline = getattr(retriever, "settings", None)
    path = settings.data_dir / snapshot.FILE_NAME
    can = getattr(retriever, "can_snapshot", None)  # (with snapshot_state and restore_state)
    off = not settings.index_snapshot or can is None or not can()
    # a stop killed while it wrote one left the partial file; with snapshots off, this start
    # rebuilds and prunes the change journal that one an earlier run left would need
    for stale in (snapshot.partial(path), *((path,) if off else ())):
        try:
            stale.unlink()
            log.info("index.snapshot_removed", path=str(stale))
        except FileNotFoundError:
            pass
        except OSError as exc:  # a read-only data directory: a start that reads it finds it unusable
            log.warning("index.snapshot_not_removed", path=str(stale), error=str(exc))
    if off:
        return None
    parts = {"code": snapshot.code_digest(settings.plugins), "backend": backend, "schema": SCHEMA_VERSION,
             "pipeline": pipeline.model_dump(mode="json") if pipeline is not None else settings.pipeline}
    return SnapshotPlan(path, parts, tuple(settings.plugins))


def build_server(settings: Settings, *, embedder: Embedder | None = None, retriever: Retriever | None = None) -> App:
    """Open the store, make the embedder and retriever, bind the port; does not start serving."""
    load_plugins(settings.plugins)  # first: they may add heads, spaces and stages
    huge_pages(settings.huge_pages)  # before the indexes allocate anything
    blas = limit_threads(settings.blas_threads)
    if blas:
        log.info("blas.threads", threads=settings.blas_threads, libraries=blas)
    backend = _resolve_backend(settings.backend)
    log.info("backend.resolved", requested=settings.backend, backend=backend)
    store = SQLiteStore(settings.db_path)
    metrics = Metrics() if settings.metrics.enabled else None
    if metrics is not None:
        store.write_observer = metrics.store_write_duration.observe
    dev_token = None
    if settings.auth and settings.create_dev_token:
        dev_token = ensure_dev_token(store, settings.dev_token_file)
    try:
        # `is None`, not `or`: an empty Retriever has len() == 0 and is falsy.
        if embedder is None:
            embedder = _default_embedder(settings)
        if retriever is None:
            retriever = _default_retriever(settings, backend)
    except TeleoError:
        store.close()
        raise
    limits = settings.limits
    admission = Admission(limits.max_concurrent_retrieves, limits.max_open_streams, limits.max_streams_per_token)
    core = MemoryCore(store, embedder, retriever, admission, worker_nice=limits.worker_nice,
                      snapshot_plan=_snapshot_plan(settings, retriever, backend))
    if metrics is not None:
        metrics.watch(core)
    server = grpc.aio.server(
        maximum_concurrent_rpcs=settings.limits.max_concurrent_rpcs,
        interceptors=[metrics.interceptor] if metrics is not None else None,
        options=[
            ("grpc.max_receive_message_length", 16 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.so_reuseport", 0),
            # Clients that keep idle channels alive (pymilvus-style 10 s keepalive is common) must
            # not be cut off with GOAWAY "too_many_pings": accept a ping every 5 s, with or without
            # calls in flight. Our own pings find dead clients within ~80 s.
            ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.keepalive_time_ms", 60_000),
            ("grpc.keepalive_timeout_ms", 20_000),
        ]
    )
    add_to_server(MemoryServicer(core, Authenticator(store, settings.auth), settings.limits, backend, settings.debug), server)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server
    )
    address = f"{settings.host}:{settings.port}"
    try:
        if settings.tls.enabled:
            creds = grpc.ssl_server_credentials(
                [(settings.tls.key_file.read_bytes(), settings.tls.cert_file.read_bytes())]  # type: ignore[union-attr]
            )
            port = server.add_secure_port(address, creds)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as exc:
        store.close()
        raise Unavailable(f"cannot listen on {address}: {exc}; is another server running there?") from exc
    if port == 0:
        store.close()
        raise InvalidArgument(f"cannot listen on {address}; is the port in use?", field="port")
    return App(settings=settings, server=server, port=port, core=core, health=health, backend=backend, dev_token=dev_token, metrics=metrics)


__all__ = ["App", "COMPONENTS", "NOT_SERVING", "SERVICE_NAME", "SERVING", "build_server"]
