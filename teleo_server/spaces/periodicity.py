"""E3 periodicity: time of day and day of week as angles; close on the clock face = similar."""

from __future__ import annotations

from typing import Any

import numpy as np

from teleo_server.spaces.base import QueryContext, Space
from teleo_server.spaces.registry import register

DAY = 86_400.0
WEEK = 7 * DAY


def periodic_similarity(t_a: np.ndarray | float, t_b: np.ndarray) -> np.ndarray:
    """Mean of time-of-day and day-of-week agreement, each (1 + cos(angle difference)) / 2 in [0, 1]."""
    d = np.asarray(t_b, dtype=np.float64) - t_a
    day = (1.0 + np.cos(2 * np.pi * d / DAY)) / 2.0
    week = (1.0 + np.cos(2 * np.pi * d / WEEK)) / 2.0
    return ((day + week) / 2.0).astype(np.float32)


@register
class PeriodicitySpace(Space):
    name = "E3_periodicity"
    description = "time of day / day of week"

    def prepare(self, ctx: QueryContext) -> Any | None:
        return ctx.now

    def score(self, ctx: QueryContext, feats: Any, rows: np.ndarray) -> np.ndarray:
        return periodic_similarity(feats, self.catalog.event_time[rows])

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        return periodic_similarity(float(self.catalog.event_time[a]), self.catalog.event_time[rows])


__all__ = ["PeriodicitySpace", "periodic_similarity"]
