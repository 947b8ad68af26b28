"""The embedder interface the server depends on."""

from __future__ import annotations

import enum
from typing import Protocol

from teleo_server.domain import EmbeddingSet


class TextRole(enum.Enum):
    """Queries and documents are embedded differently (e.g. SPLADE query-side handling)."""

    QUERY = "query"
    DOCUMENT = "document"


class Embedder(Protocol):
    """Turns texts into every learned space at once (all or none).

    Implementations raise ``errors.Unavailable`` when the model backend cannot be reached, and
    never return a partial set.
    """

    @property
    def model_version(self) -> str: ...

    @property
    def description(self) -> str:
        """Where embedding happens, for logs and Stats ("in-process", "triton://host:port")."""
        ...

    async def start(self) -> None:
        """Load models or connect; raises Unavailable if not ready."""
        ...

    async def ready(self) -> bool: ...

    async def embed(self, texts: list[str], role: TextRole) -> list[EmbeddingSet]:
        """One EmbeddingSet per text, chunked when a text exceeds the model window."""
        ...

    async def close(self) -> None: ...


def check_texts(texts: list[str]) -> None:
    """Raise InvalidArgument (field ``texts``) unless every item is a str encodable as utf-8."""
    from teleo_server.errors import InvalidArgument

    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidArgument(f"item {i} is {type(text).__name__}, not str", field="texts")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgument(f"item {i} is not valid unicode: {exc.reason}",
                                  field="texts") from exc


__all__ = ["Embedder", "TextRole", "check_texts"]
