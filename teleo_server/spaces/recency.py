"""E2 recency: how recent a memory's event is, exp(-age / scale)."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from teleo_server.spaces.base import QueryContext, Space, SpaceSettings
from teleo_server.spaces.registry import register

DAY = 86_400.0


class RecencySettings(SpaceSettings):
    scale_days: float = Field(30.0, gt=0)


@register
class RecencySpace(Space):
    name = "E2_recency"
    description = "event-time recency"
    Settings = RecencySettings

    def prepare(self, ctx: QueryContext) -> Any | None:
        return ctx.now

    def score(self, ctx: QueryContext, feats: Any, rows: np.ndarray) -> np.ndarray:
        age = np.maximum(feats - self.catalog.event_time[rows], 0.0) / DAY
        return np.exp(-age / self.config.scale_days).astype(np.float32)

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        gap = np.abs(self.catalog.event_time[rows] - self.catalog.event_time[a]) / DAY
        return np.exp(-gap / self.config.scale_days).astype(np.float32)


__all__ = ["RecencySettings", "RecencySpace"]
