"""Build the process's one embedder from settings."""

from __future__ import annotations

import structlog

from teleo_server.embedding.base import Embedder
from teleo_server.embedding.settings import EmbeddingSettings

log = structlog.get_logger(__name__)


def make_embedder(settings: EmbeddingSettings) -> Embedder:
    """In-process unless ``settings.triton_url`` is set; wrapped in the on-disk cache unless
    ``settings.cache_dir`` is None. Nothing loads or connects until ``start()``."""
    from teleo_server.embedding.cache import CachedEmbedder, EmbeddingCache
    from teleo_server.embedding.chunking import ChunkPlan
    from teleo_server.embedding.repository import default_model_dir

    embedder: Embedder
    if settings.triton_url:
        from teleo_server.embedding.triton import TritonEmbedder

        embedder = TritonEmbedder(settings.triton_url, model=settings.triton_model,
                                  timeout_s=settings.timeout_s, max_batch=settings.max_batch,
                                  batch_window_ms=settings.batch_window_ms)
    else:
        from teleo_server.embedding.inprocess import InProcessEmbedder

        embedder = InProcessEmbedder(
            settings.model_dir or default_model_dir(), threads=settings.threads,
            max_batch=settings.max_batch, document_batch=settings.document_batch, nice=settings.worker_nice,
            plan=ChunkPlan(settings.chunk_tokens, settings.chunk_overlap),
            query_max_terms=settings.query_max_terms)
    log.info("embedder.configured", backend=embedder.description,
             cache=str(settings.cache_dir) if settings.cache_dir else None)
    if settings.cache_dir is not None:
        embedder = CachedEmbedder(embedder, EmbeddingCache(settings.cache_dir), nice=settings.worker_nice,
                                  query_entries=settings.query_cache_entries)
    return embedder


__all__ = ["make_embedder"]
