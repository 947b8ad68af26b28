"""Retrieval: indexes over every space and the staged pipeline that ranks memories."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.pipeline.types import Retriever


def make_retriever(settings: PipelineSettings | Mapping[str, Any] | None = None, backend: str = "numpy") -> Retriever:
    """Build the retriever for a resolved backend ("numpy" or "cupy").

    ``settings`` may be a ``PipelineSettings`` or the plain mapping from the server's config.
    """
    from teleo_server.pipeline.retriever import TeleologicalRetriever

    if settings is None:
        settings = PipelineSettings()
    elif not isinstance(settings, PipelineSettings):
        settings = PipelineSettings.model_validate(dict(settings))
    return TeleologicalRetriever(settings, backend)


__all__ = ["PipelineSettings", "make_retriever"]
