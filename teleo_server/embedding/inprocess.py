"""Embedding in this process with onnxruntime: the default when no Triton address is set."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog

from teleo_server.domain import EmbeddingSet
from teleo_server.embedding.base import TextRole, check_texts
from teleo_server.embedding.batching import Coalescer, EmbedObservers
from teleo_server.embedding.chunking import ChunkPlan
from teleo_server.embedding.engine import Engine
from teleo_server.errors import Unavailable
from teleo_server.workers import DEFAULT_NICE, worker_pool

log = structlog.get_logger(__name__)


class InProcessEmbedder:
    """The :class:`~teleo_server.embedding.base.Embedder` protocol on local CPU models.

    Model calls run on one dedicated worker thread (onnxruntime brings its own ``threads``
    intra-op threads), so the event loop never blocks and calls never overlap; a second one runs
    splade-tiny beside MiniLM for a batch of queries (``Engine``'s ``helper``). Calls that arrive
    while the worker is busy are merged into one batch of up to ``max_batch`` texts.

    Parameters
    ----------
    model_dir : a repository materialised by ``build_repo``.
    threads : onnxruntime intra-op threads per model.
    nice : nice steps below the event loop for the embedding thread (and the runtime's pool,
        which it creates and which inherits it).
    max_batch : chunk texts per onnxruntime call, and queries per batch.
    document_batch : documents per batch (a query waits at most for the batch running when it
        arrives: queries go before queued documents).
    plan : chunk size and overlap in word pieces.
    query_max_terms : sparse terms kept for a query.
    """

    def __init__(self, model_dir: Path, *, threads: int = 2, max_batch: int = 32, document_batch: int | None = None,
                 plan: ChunkPlan | None = None, query_max_terms: int = 64, nice: int = DEFAULT_NICE) -> None:
        self._model_dir = model_dir
        self._nice = nice
        self._kwargs = dict(threads=threads, max_batch=max_batch, plan=plan or ChunkPlan(),
                            query_max_terms=query_max_terms)
        self._max_batch = max_batch
        self._document_batch = document_batch
        self._engine: Engine | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._helper: ThreadPoolExecutor | None = None
        self._batches: Coalescer | None = None
        self.observers = EmbedObservers()

    @property
    def model_version(self) -> str:
        if self._engine is None:
            raise Unavailable("embedder not started")
        return self._engine.version

    @property
    def queue_depth(self) -> int:
        """Texts waiting for a model call."""
        batches = self._batches
        return batches.pending if batches is not None else 0

    @property
    def description(self) -> str:
        return "in-process"

    async def start(self) -> None:
        if self._engine is not None:
            return
        self._executor = worker_pool("teleo-embed", self._nice)
        self._helper = worker_pool("teleo-embed-sparse", self._nice)
        loop = asyncio.get_running_loop()
        try:
            self._engine = await loop.run_in_executor(
                self._executor, lambda: Engine(self._model_dir, helper=self._helper, **self._kwargs))
        except Exception:
            self._shutdown(wait=False)
            raise
        self._batches = Coalescer(self._run, max_batch=self._max_batch, document_batch=self._document_batch,
                                  max_in_flight=1, observers=self.observers)
        log.info("embedder.started", backend="in-process", model_version=self._engine.version,
                 threads=self._kwargs["threads"])

    async def ready(self) -> bool:
        return self._engine is not None

    async def embed(self, texts: list[str], role: TextRole) -> list[EmbeddingSet]:
        """One EmbeddingSet per text (float32 dense (384,), float16 tokens (T, 384), ...)."""
        if self._batches is None:
            raise Unavailable("embedder not started")
        check_texts(texts)
        if not texts:
            return []
        return await self._batches.submit(texts, role is TextRole.QUERY)

    async def _run(self, texts: list[str], is_query: list[bool]) -> list[EmbeddingSet]:
        assert self._engine is not None and self._executor is not None
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, self._engine.embed, texts, is_query)

    async def close(self) -> None:
        if self._batches is not None:
            await self._batches.close(Unavailable("embedder closed"))
        self._shutdown(wait=True)
        self._batches = None
        self._engine = None

    def _shutdown(self, wait: bool) -> None:
        for pool in (self._executor, self._helper):  # the model thread first: it may use the helper
            if pool is not None:
                pool.shutdown(wait=wait)
        self._executor = self._helper = None


__all__ = ["InProcessEmbedder"]
