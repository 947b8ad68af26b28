"""Emergent goals and per-memory purpose vectors.

Goals emerge from the stored memories themselves: spherical k-means over their sentence vectors
(a seeded sample when the corpus is large), each cluster labelled with its most distinctive terms.
A memory's purpose vector holds its clipped cosine to every goal centroid, float32 (G,); its
purpose alignment is the largest entry (how well it serves some goal of the agent). Goals are
re-derived lazily once the corpus has grown by ``refresh_growth``; each refresh matches new goals
to old ones, keeps their ids, and reports drift (1 - cosine between old and new centroid).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import structlog

from teleo_server.domain import Johari
from teleo_server.pipeline.settings import GoalSettings

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class Goal:
    id: str
    label: str
    size: int
    drift: float = 0.0


def _normalise(x: np.ndarray) -> np.ndarray:
    return (x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)).astype(np.float32)


def spherical_kmeans(x: np.ndarray, k: int, iterations: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Cluster unit vectors x float32 (N, D) into k groups by cosine.

    Returns centroids float32 (k, D) (unit) and assignment int64 (N,). k-means++ seeding.
    """
    n = x.shape[0]
    centroids = np.empty((k, x.shape[1]), dtype=np.float32)
    centroids[0] = x[rng.integers(n)]
    closest = 1.0 - x @ centroids[0]
    for j in range(1, k):
        p = np.maximum(closest, 0.0) ** 2
        total = float(p.sum())
        idx = int(rng.choice(n, p=p / total)) if total > 0 else int(rng.integers(n))
        centroids[j] = x[idx]
        closest = np.minimum(closest, 1.0 - x @ centroids[j])
    assign = np.zeros(n, dtype=np.int64)
    for _ in range(iterations):
        sims = x @ centroids.T
        new = sims.argmax(axis=1)
        if _ > 0 and np.array_equal(new, assign):
            break
        assign = new
        sums = np.zeros_like(centroids)
        np.add.at(sums, assign, x)
        counts = np.bincount(assign, minlength=k)
        empty = counts == 0
        if empty.any():
            # re-seed empty clusters at the points worst served by their centroid
            worst = np.argsort(sims[np.arange(n), assign])[: int(empty.sum())]
            sums[empty] = x[worst]
        centroids = _normalise(sums)
    return centroids, assign


class PurposeIndex:
    """Goals (centroids float32 (G, D)) and purpose vectors float32 (n_rows, G)."""

    def __init__(self, settings: GoalSettings) -> None:
        self.settings = settings
        self.goals: list[Goal] = []
        self.centroids = np.zeros((0, 0), dtype=np.float32)
        self.purpose = np.zeros((0, 0), dtype=np.float32)
        # row-wise max of ``purpose``, kept beside it: a row max over a 10K-row gather cost ~1 ms a query
        self.best = np.zeros(0, dtype=np.float32)
        self._n_at_refresh = 0
        self._next_id = 0
        self.last_drift: list[tuple[str, float]] = []

    @property
    def n_goals(self) -> int:
        return len(self.goals)

    def stale(self, n_live: int) -> bool:
        s = self.settings
        if n_live < s.min_memories:
            return False
        return not self.goals or n_live >= (1.0 + s.refresh_growth) * self._n_at_refresh

    def refresh(self, live_rows: np.ndarray, vectors: Callable[[np.ndarray], np.ndarray],
                labeler: Callable[[np.ndarray, int], list[list[str]]], n_rows: int) -> None:
        """Re-cluster live memories into goals and recompute every purpose vector.

        vectors(rows) -> float32 (C, D) unit memory vectors; labeler(group_of_row int64 (n_rows,), G)
        -> top terms per goal.
        """
        s = self.settings
        rng = np.random.default_rng(s.seed)
        sample = live_rows if live_rows.size <= s.sample_size else np.sort(rng.choice(live_rows, s.sample_size, replace=False))
        x = vectors(sample)
        keep = np.linalg.norm(x, axis=1) > 0
        sample, x = sample[keep], x[keep]
        k = int(np.clip(sample.size // s.memories_per_goal, 2, s.max_goals))
        if sample.size < max(2 * k, s.min_memories):
            return
        centroids, assign = spherical_kmeans(x, k, s.iterations, rng)
        groups = np.full(n_rows, -1, dtype=np.int64)
        groups[sample] = assign
        labels = labeler(groups, k)
        sizes = np.bincount(assign, minlength=k)
        self._match_previous(centroids, labels, sizes)
        self.centroids = centroids
        self.purpose = np.zeros((0, k), dtype=np.float32)
        self.best = np.zeros(0, dtype=np.float32)
        self._n_at_refresh = int(live_rows.size)
        self.sync(n_rows, vectors)
        log.info("goals_refreshed", goals=k, memories=int(live_rows.size),
                 drifted=[g for g, d in self.last_drift if d > s.drift_threshold])

    def _match_previous(self, centroids: np.ndarray, labels: list[list[str]], sizes: np.ndarray) -> None:
        old, old_c = self.goals, self.centroids
        sims = centroids @ old_c.T if old else np.zeros((centroids.shape[0], 0))
        taken: set[int] = set()
        goals, drift = [], []
        for j in np.argsort(-sizes, kind="stable"):
            gid, d = None, 0.0
            if sims.shape[1]:
                for o in np.argsort(-sims[j]):
                    if int(o) not in taken and sims[j, o] > 0.5:
                        taken.add(int(o))
                        gid, d = old[int(o)].id, float(1.0 - sims[j, o])
                        break
            if gid is None:
                gid = f"g{self._next_id}"
                self._next_id += 1
            goals.append((int(j), Goal(gid, " ".join(labels[j]) or gid, int(sizes[j]), d)))
            drift.append((gid, d))
        goals.sort(key=lambda t: t[0])
        self.goals = [g for _, g in goals]
        self.last_drift = drift

    def sync(self, n_rows: int, vectors: Callable[[np.ndarray], np.ndarray]) -> None:
        """Compute purpose vectors of rows added since the last call."""
        if not self.goals:
            return
        have = self.purpose.shape[0]
        if have < n_rows:
            rows = np.arange(have, n_rows)
            p = np.clip(vectors(rows) @ self.centroids.T, 0.0, 1.0).astype(np.float32)
            self.purpose = np.concatenate([self.purpose, p]) if have else p
            self.best = np.concatenate([self.best, p.max(axis=1)]) if have else p.max(axis=1)

    def compact(self, keep_rows: np.ndarray) -> None:
        if self.goals and self.purpose.shape[0]:
            kept = keep_rows[keep_rows < self.purpose.shape[0]]
            self.purpose, self.best = self.purpose[kept], self.best[kept]

    def purpose_alignment(self, rows: np.ndarray) -> np.ndarray:
        """float32 (C,): cosine to the nearest goal (clipped to [0, 1]); 1 when no goals exist yet."""
        if not self.goals:
            return np.ones(rows.size, dtype=np.float32)
        return self.best[rows]

    def goal_for_query(self, q: np.ndarray | None) -> int | None:
        if not self.goals or q is None:
            return None
        return int(np.argmax(self.centroids @ q))

    def resolve_targets(self, targets: tuple[str, ...]) -> list[int]:
        """Goal indices named by id or label (case-insensitive; a label may match by substring)."""
        out = []
        for t in targets:
            tl = t.lower()
            for i, g in enumerate(self.goals):
                if g.id == t or g.label.lower() == tl or tl in g.label.lower():
                    out.append(i)
        return sorted(set(out))

    def goal_alignment(self, rows: np.ndarray, goals: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Best alignment float32 (C,) over ``goals`` and which goal (index into self.goals)."""
        if not self.goals or not goals:
            return np.zeros(rows.size, dtype=np.float32), np.full(rows.size, -1, dtype=np.int64)
        if len(goals) == 1:
            return self.purpose[rows, goals[0]], np.full(rows.size, goals[0], dtype=np.int64)
        sub = self.purpose[rows][:, goals]
        arg = sub.argmax(axis=1)
        return sub[np.arange(rows.size), arg].astype(np.float32), np.asarray(goals)[arg]


def johari(aligned: np.ndarray, surfaced: np.ndarray) -> np.ndarray:
    """Quadrant codes int8 (C,) from bool (C,) inputs (the proto's JohariQuadrant definition)."""
    out = np.full(aligned.size, int(Johari.UNKNOWN), dtype=np.int8)
    out[aligned & surfaced] = int(Johari.OPEN)
    out[aligned & ~surfaced] = int(Johari.BLIND)
    out[~aligned & surfaced] = int(Johari.HIDDEN)
    return out


__all__ = ["Goal", "PurposeIndex", "johari", "spherical_kmeans"]
