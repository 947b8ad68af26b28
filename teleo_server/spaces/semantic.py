"""E1 semantic: MiniLM sentence vectors (384-d cosine), Matryoshka truncation to 128/256."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from teleo_server.spaces.dense_head import DenseHeadSettings, DenseHeadSpace
from teleo_server.spaces.registry import register


class SemanticSettings(DenseHeadSettings):
    matryoshka_dims: tuple[int, ...] = (128, 256)  # truncations kept for the first pass
    # "auto": int8 rows on the host backend (a quarter of float32's bytes at its scan speed, and
    # the same quality on SciFact train and LoCoMo dev: nDCG@10 / Recall@10 within 0.0013 for E1
    # alone, 0.0006 for the profiles; bench/results/dense_int8.json), float32 on a device backend
    values: Literal["auto", "float32", "float16", "int8"] = "auto"

    @field_validator("matryoshka_dims")
    @classmethod
    def _sorted_dims(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(d < 8 for d in v):
            raise ValueError("matryoshka_dims must be >= 8")
        return tuple(sorted(set(v)))


@register
class SemanticSpace(DenseHeadSpace):
    """MiniLM sentence vectors, with Matryoshka truncations for the first pass."""

    name = "E1_semantic"
    description = "sentence-vector cosine (MiniLM), Matryoshka-truncatable"
    head = "dense"
    Settings = SemanticSettings

    def truncations(self) -> tuple[int, ...]:
        return tuple(self.config.matryoshka_dims)

    def dimension(self, requested: int | None) -> int:
        """The first-pass dimension: the request, else the calibrated adaptive one."""
        assert self.index is not None
        if requested:
            return min(requested, self.index.dim)
        return self.index.adaptive_dim


__all__ = ["SemanticSettings", "SemanticSpace"]
