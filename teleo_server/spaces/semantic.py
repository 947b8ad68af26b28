"""E1 semantic: MiniLM sentence vectors (384-d cosine), Matryoshka truncation to 128/256."""

from __future__ import annotations

from teleo_server.spaces.dense_head import DenseHeadSpace
from teleo_server.spaces.registry import register


@register
class SemanticSpace(DenseHeadSpace):
    """MiniLM sentence vectors, with Matryoshka truncations for the first pass."""

    name = "E1_semantic"
    description = "sentence-vector cosine (MiniLM), Matryoshka-truncatable"
    head = "dense"

    def truncations(self) -> tuple[int, ...]:
        return tuple(self.settings.matryoshka_dims)

    def dimension(self, requested: int | None) -> int:
        """The first-pass dimension: the request, else the calibrated adaptive one."""
        assert self.index is not None
        if requested:
            return min(requested, self.index.dim)
        return self.index.adaptive_dim


__all__ = ["SemanticSpace"]
