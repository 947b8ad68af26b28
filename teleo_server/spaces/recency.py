"""E2 recency: how recent a memory's event is, exp(-age / scale)."""

from __future__ import annotations

from typing import Any

import numpy as np

from teleo_server.spaces.base import QueryContext, Space
from teleo_server.spaces.registry import register

DAY = 86_400.0


@register
class RecencySpace(Space):
    name = "E2_recency"
    description = "event-time recency"

    def prepare(self, ctx: QueryContext) -> Any | None:
        return ctx.now

    def score(self, ctx: QueryContext, feats: Any, rows: np.ndarray) -> np.ndarray:
        age = np.maximum(feats - self.catalog.event_time[rows], 0.0) / DAY
        return np.exp(-age / self.settings.recency_scale_days).astype(np.float32)

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        gap = np.abs(self.catalog.event_time[rows] - self.catalog.event_time[a]) / DAY
        return np.exp(-gap / self.settings.recency_scale_days).astype(np.float32)


__all__ = ["RecencySpace"]
