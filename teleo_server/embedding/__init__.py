"""Embedding: one model code path, served in-process or through Triton."""

from teleo_server.embedding.base import Embedder, TextRole
from teleo_server.embedding.factory import make_embedder
from teleo_server.embedding.settings import EmbeddingSettings

__all__ = ["Embedder", "EmbeddingSettings", "TextRole", "make_embedder"]
