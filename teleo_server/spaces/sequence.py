"""E4 sequence: position within a session (session_position, else event-time order)."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from teleo_server.spaces.base import QueryContext, Space, SpaceSettings
from teleo_server.spaces.registry import register


class SequenceSettings(SpaceSettings):
    scale: float = Field(10.0, gt=0)  # session positions over which adjacency decays


@register
class SequenceSpace(Space):
    """Query score: closeness to the latest turn of the memory's own session, exp(-gap / scale)."""

    name = "E4_sequence"
    Settings = SequenceSettings
    description = "position within a session"

    def positions(self) -> np.ndarray:
        """float64 (n_rows,): session_position, or the event-time rank within the session when unset;
        NaN for memories outside any session."""
        cat = self.catalog
        pos = cat.position.astype(np.float64)
        in_session = cat.session > 0
        pos[~in_session] = np.nan
        missing = np.flatnonzero(in_session & (cat.position < 0))
        if missing.size:
            order = np.lexsort((cat.event_time[missing], cat.session[missing]))
            sess = cat.session[missing][order]
            starts = np.r_[0, np.flatnonzero(np.diff(sess)) + 1]
            rank = np.arange(order.size) - np.repeat(starts, np.diff(np.r_[starts, order.size]))
            pos[missing[order]] = rank
        return pos

    def prepare(self, ctx: QueryContext) -> Any | None:
        return self.positions()

    def score(self, ctx: QueryContext, feats: Any, rows: np.ndarray) -> np.ndarray:
        pos = feats
        sess = self.catalog.session
        latest = np.full(int(sess.max(initial=0)) + 1, -np.inf)
        ok = ~np.isnan(pos) & ctx.mask
        np.maximum.at(latest, sess[ok], pos[ok])
        gap = latest[sess[rows]] - pos[rows]
        return np.exp(-gap / self.config.scale).astype(np.float32)

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        pos = self.positions()
        sess = self.catalog.session
        if sess[a] == 0:
            return np.full(rows.size, np.nan, dtype=np.float32)  # not in a session: no signal
        same = sess[rows] == sess[a]
        gap = np.abs(pos[rows] - pos[a])
        return np.where(same & ~np.isnan(gap), np.exp(-np.nan_to_num(gap) / self.config.scale), 0.0).astype(np.float32)


__all__ = ["SequenceSettings", "SequenceSpace"]
