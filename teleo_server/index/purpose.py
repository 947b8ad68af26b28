"""Emergent goals and per-memory purpose vectors.

Goals emerge from the stored memories themselves: spherical k-means over their sentence vectors
(a seeded sample when a partition is large), each cluster labelled with its most distinctive terms.
Goals are kept per partition, one (namespace, access level): a tenant's goals, labels and counts
come from its own memories only, and a caller is shown the goals of the partitions it may read.
A memory's purpose vector holds its clipped cosine to every goal centroid of its partition,
float32 (G,); its purpose alignment is the largest entry (how well it serves some goal of the
agent). A partition's goals are re-derived lazily once it has grown by ``refresh_growth``; each
refresh matches new goals to old ones, keeps their ids, and reports drift (1 - cosine between old
and new centroid).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import structlog

from teleo_server.domain import Johari
from teleo_server.pipeline_settings import GoalSettings

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class GoalSnapshot:
    """A goal as one clustering left it."""

    time: float     # POSIX seconds of the clustering
    label: str
    size: int
    drift: float    # 1 - cosine of its centroid to the one before (0 for a new goal)


@dataclass(slots=True)
class Goal:
    id: str
    label: str
    size: int
    drift: float = 0.0
    history: tuple[GoalSnapshot, ...] = ()  # oldest first, at most HISTORY snapshots


HISTORY = 32  # snapshots a goal keeps


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


class _Partition:
    """The goals of one (namespace, access level): built only from that partition's memories."""

    __slots__ = ("prefix", "goals", "centroids", "n_at_refresh", "next_id", "last_drift")

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.goals: list[Goal] = []
        self.centroids = np.zeros((0, 0), dtype=np.float32)
        self.n_at_refresh = 0
        self.next_id = 0
        self.last_drift: list[tuple[str, float]] = []

    def stale(self, n_live: int, s: GoalSettings) -> bool:
        if n_live < s.min_memories:
            return bool(self.goals)  # shrank below the minimum: its goals go
        return not self.goals or n_live >= (1.0 + s.refresh_growth) * self.n_at_refresh

    def match_previous(self, centroids: np.ndarray, labels: list[list[str]], sizes: np.ndarray, now: float = 0.0) -> None:
        old, old_c = self.goals, self.centroids
        sims = centroids @ old_c.T if old else np.zeros((centroids.shape[0], 0))
        taken: set[int] = set()
        goals, drift = [], []
        for j in np.argsort(-sizes, kind="stable"):
            gid, d, history = None, 0.0, ()
            if sims.shape[1]:
                for o in np.argsort(-sims[j]):
                    if int(o) not in taken and sims[j, o] > 0.5:
                        taken.add(int(o))
                        gid, d, history = old[int(o)].id, float(1.0 - sims[j, o]), old[int(o)].history
                        break
            if gid is None:
                gid = f"{self.prefix}/g{self.next_id}"
                self.next_id += 1
            label = " ".join(labels[j]) or gid
            snapshot = GoalSnapshot(now, label, int(sizes[j]), d)
            goals.append((int(j), Goal(gid, label, int(sizes[j]), d, (*history, snapshot)[-HISTORY:])))
            drift.append((gid, d))
        goals.sort(key=lambda t: t[0])
        self.goals = [g for _, g in goals]
        self.last_drift = drift


@dataclass(slots=True)
class RefreshJob:
    """One partition's re-clustering: its live rows, the sampled rows and a copy of their vectors."""

    key: int
    live_rows: np.ndarray
    sample: np.ndarray
    x: np.ndarray
    k: int
    iterations: int
    rng: np.random.Generator  # the seeded stream the sample was drawn from, continued

    def cluster(self) -> tuple[np.ndarray, np.ndarray]:
        """Centroids float32 (k, D) and assignment int64 (len(sample),). Reads only this job."""
        return spherical_kmeans(self.x, self.k, self.iterations, self.rng)


class PurposeIndex:
    """Goals per partition (namespace, access level) and each memory's purpose vector.

    Goals, their labels, sizes and drift are computed from one partition's memories only, and a
    caller sees the goals of the partitions it may read (``view``): nothing a caller may not read
    shapes a goal it is shown. A memory's purpose vector holds its alignment to the goals of its
    own partition, float32 (n_rows, max_goals) (zeros past that partition's goal count); its purpose
    alignment ``best`` is the largest (1.0 while its partition has no goals yet).
    """

    def __init__(self, settings: GoalSettings) -> None:
        self.settings = settings
        self.partitions: dict[int, _Partition] = {}
        self.purpose = np.zeros((0, settings.max_goals), dtype=np.float32)
        # row-wise max of ``purpose``, kept beside it: a row max over a 10K-row gather cost ~1 ms a query
        self.best = np.zeros(0, dtype=np.float32)
        self._seen_version = -1

    def maintain(self, version: int, keys: np.ndarray, alive: np.ndarray, prefix_of: Callable[[int], str],
                 vectors: Callable[[np.ndarray], np.ndarray],
                 labeler: Callable[[np.ndarray, int], list[list[str]]]) -> None:
        """Refresh the partitions that have grown (or shrunk) enough, then compute new rows' vectors,
        all at once (``plan`` / ``RefreshJob.cluster`` / ``install`` / ``finish`` in one call).

        version: changes whenever rows are added, removed or renumbered (nothing to do otherwise);
        keys: each row's partition key (``Catalog.partitions``); prefix_of(key) names a partition in goal ids.
        """
        for job in self.plan(version, keys, alive, prefix_of, vectors):
            self.install(job, *job.cluster(), keys, vectors, labeler)
        self.finish(version, keys, vectors)

    def due(self, version: int) -> bool:
        return version != self._seen_version

    def plan(self, version: int, keys: np.ndarray, alive: np.ndarray, prefix_of: Callable[[int], str],
             vectors: Callable[[np.ndarray], np.ndarray]) -> list[RefreshJob]:
        """The partitions to re-cluster, each with a copy of its sampled vectors, so the clustering
        (the costly part) can run away from the indexes. Partitions too small for goals are settled
        here."""
        if version == self._seen_version:
            return []
        s = self.settings
        counts = np.bincount(keys[alive], minlength=1) if keys.size else np.zeros(1, dtype=np.int64)
        jobs = []
        for key in sorted(set(np.flatnonzero(counts).tolist()) | set(self.partitions)):
            n = int(counts[key]) if key < counts.size else 0
            part = self.partitions.get(key)
            if part is None:
                part = self.partitions[key] = _Partition(prefix_of(key))
            if not part.stale(n, s):
                continue
            live_rows = np.flatnonzero(alive & (keys == key))
            rng = np.random.default_rng(s.seed)
            sample = live_rows if live_rows.size <= s.sample_size else \
                np.sort(rng.choice(live_rows, s.sample_size, replace=False))
            x = vectors(sample) if sample.size else np.zeros((0, 1), dtype=np.float32)
            keep = np.linalg.norm(x, axis=1) > 0
            sample, x = sample[keep], x[keep]
            k = int(np.clip(sample.size // s.memories_per_goal, 2, s.max_goals))
            if sample.size < max(2 * k, s.min_memories):
                part.goals, part.centroids = [], np.zeros((0, 0), dtype=np.float32)
                part.n_at_refresh = int(live_rows.size)
                self._score(live_rows[live_rows < self.best.size], part, vectors)
                continue
            jobs.append(RefreshJob(key, live_rows, sample, np.array(x, dtype=np.float32), k,
                                   s.iterations, rng))
        return jobs

    def install(self, job: RefreshJob, centroids: np.ndarray, assign: np.ndarray, keys: np.ndarray,
                vectors: Callable[[np.ndarray], np.ndarray],
                labeler: Callable[[np.ndarray, int], list[list[str]]]) -> None:
        """Adopt a partition's new goals (``job.cluster()``'s result): label them, keep the ids of
        goals that persist, and recompute the partition's purpose vectors."""
        part = self.partitions[job.key]
        groups = np.full(keys.size, -1, dtype=np.int64)
        groups[job.sample] = assign
        labels = labeler(groups, job.k)
        part.match_previous(centroids, labels, np.bincount(assign, minlength=job.k), time.time())
        part.centroids, part.n_at_refresh = centroids, int(job.live_rows.size)
        log.info("goals_refreshed", goals=job.k, memories=int(job.live_rows.size),
                 drifted=sum(1 for _, d in part.last_drift if d > self.settings.drift_threshold))
        self._score(job.live_rows[job.live_rows < self.best.size], part, vectors)

    def finish(self, version: int, keys: np.ndarray, vectors: Callable[[np.ndarray], np.ndarray]) -> None:
        """Purpose vectors of rows added since, and the catalog version now reflected."""
        self.sync(keys, vectors)
        self._seen_version = version

    def _score(self, rows: np.ndarray, part: _Partition, vectors: Callable[[np.ndarray], np.ndarray]) -> None:
        self.purpose[rows] = 0.0
        if not part.goals or not rows.size:
            self.best[rows] = 1.0
            return
        p = np.clip(vectors(rows) @ part.centroids.T, 0.0, 1.0).astype(np.float32)
        self.purpose[rows, : p.shape[1]] = p
        self.best[rows] = p.max(axis=1)

    def sync(self, keys: np.ndarray, vectors: Callable[[np.ndarray], np.ndarray]) -> None:
        """Compute purpose vectors of rows added since the last call."""
        have, n_rows = self.best.size, keys.size
        if have >= n_rows:
            return
        self.purpose = np.concatenate([self.purpose, np.zeros((n_rows - have, self.settings.max_goals), dtype=np.float32)])
        self.best = np.concatenate([self.best, np.ones(n_rows - have, dtype=np.float32)])
        new = np.arange(have, n_rows)
        for key in np.unique(keys[new]).tolist():
            part = self.partitions.get(key)
            if part is not None and part.goals:
                self._score(new[keys[new] == key], part, vectors)

    def vectors_of(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Purpose vectors float32 (C, max_goals) and alignments float32 (C,) of ``rows``. Rows
        added since the last upkeep have none yet: zeros and 1.0, as in a partition without goals."""
        known = rows < self.best.size
        if known.all():
            return self.purpose[rows], self.best[rows]
        purpose = np.zeros((rows.size, self.settings.max_goals), dtype=np.float32)
        best = np.ones(rows.size, dtype=np.float32)
        purpose[known], best[known] = self.purpose[rows[known]], self.best[rows[known]]
        return purpose, best

    def compact(self, keep_rows: np.ndarray) -> None:
        kept = keep_rows[keep_rows < self.best.size]
        self.purpose, self.best = self.purpose[kept], self.best[kept]
        self._seen_version = -1

    def view(self, readable: Callable[[int], bool], keys: np.ndarray,
             vectors: Callable[[np.ndarray], np.ndarray]) -> "GoalView":
        """The goals of the partitions ``readable(key)`` admits, for one caller."""
        parts = [(k, p) for k, p in sorted(self.partitions.items()) if p.goals and readable(k)]
        return GoalView(self, parts, keys, vectors)


class GoalView:
    """What one caller may see of the goals: those of the partitions it may read.

    Goal indices below index ``goals`` of this view.
    """

    def __init__(self, index: PurposeIndex, parts: list[tuple[int, _Partition]], keys: np.ndarray,
                 vectors: Callable[[np.ndarray], np.ndarray]) -> None:
        self._index, self._keys, self._vectors = index, keys, vectors
        self.goals: list[Goal] = [g for _, p in parts for g in p.goals]
        self.owner = np.array([k for k, p in parts for _ in p.goals], dtype=np.int64)
        self.local = np.array([j for _, p in parts for j in range(len(p.goals))], dtype=np.int64)
        self.centroids = np.concatenate([p.centroids for _, p in parts]) if parts else np.zeros((0, 0), dtype=np.float32)

    @property
    def n_goals(self) -> int:
        return len(self.goals)

    def purpose_alignment(self, rows: np.ndarray) -> np.ndarray:
        """float32 (C,): cosine to the nearest goal of the row's own partition (clipped to [0, 1]);
        1 while that partition has no goals yet."""
        if not self.goals:
            return np.ones(rows.size, dtype=np.float32)
        best = self._index.best
        return best[rows] if rows.size == 0 or rows.max() < best.size else self._index.vectors_of(rows)[1]

    def goals_for_query(self, q: np.ndarray | None) -> list[int]:
        """Each partition's goal nearest to the query vector (one per partition in the view)."""
        if not self.goals or q is None or q.shape[0] != self.centroids.shape[1]:
            return []
        sims = self.centroids @ q
        out = []
        for key in np.unique(self.owner).tolist():
            mine = np.flatnonzero(self.owner == key)
            out.append(int(mine[np.argmax(sims[mine])]))
        return out

    def resolve_targets(self, targets: tuple[str, ...]) -> list[int]:
        """Goal indices named by id or label (case-insensitive; a label may match by substring)."""
        out = []
        for t in targets:
            tl = t.lower()
            for i, g in enumerate(self.goals):
                if g.id == t or g.label.lower() == tl or tl in g.label.lower():
                    out.append(i)
        return sorted(set(out))

    def goal_alignment(self, rows: np.ndarray, goals: list[int], own_partition: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Best alignment float32 (C,) over ``goals`` and which goal (index into self.goals, -1 none).

        A row's alignment to a goal of its own partition is read from its purpose vector. With
        ``own_partition`` (``goals`` then holds at most one goal per partition, as
        ``goals_for_query`` gives) a row is measured against its own partition's goal only (0 and -1
        when there is none); otherwise a goal of another partition the caller may read is
        measured from the memory's vector.
        """
        if not self.goals or not goals:
            return np.zeros(rows.size, dtype=np.float32), np.full(rows.size, -1, dtype=np.int64)
        g = np.asarray(goals, dtype=np.int64)
        row_keys, owners = self._keys[rows], self.owner[g]
        purpose = self._index.vectors_of(rows)[0]
        if own_partition:
            # one goal per partition: look each row's up by its partition key
            table = np.full(int(max(owners.max(), row_keys.max(initial=0))) + 1, -1, dtype=np.int64)
            table[owners] = g
            which = table[row_keys]
            has = which >= 0
            out = np.zeros(rows.size, dtype=np.float32)
            out[has] = purpose[np.flatnonzero(has), self.local[which[has]]]
            return out, which
        if (owners == owners[0]).all() and (row_keys == owners[0]).all():
            # one partition (the common case): read the stored purpose vectors directly
            if g.size == 1:
                return purpose[:, self.local[g[0]]].copy(), np.full(rows.size, g[0], dtype=np.int64)
            sub = purpose[:, self.local[g]]
            arg = sub.argmax(axis=1)
            return sub[np.arange(rows.size), arg].astype(np.float32), g[arg]
        same = row_keys[:, None] == owners[None, :]
        sub = np.where(same, purpose[:, self.local[g]], 0.0).astype(np.float32)
        cross = np.flatnonzero(~same.all(axis=1))
        if cross.size:
            other = np.clip(self._vectors(rows[cross]) @ self.centroids[g].T, 0.0, 1.0)
            sub[cross] = np.where(same[cross], sub[cross], other)
        arg = sub.argmax(axis=1)
        return sub[np.arange(rows.size), arg].astype(np.float32), g[arg]


def johari(aligned: np.ndarray, surfaced: np.ndarray) -> np.ndarray:
    """Quadrant codes int8 (C,) from bool (C,) inputs (the proto's JohariQuadrant definition)."""
    out = np.full(aligned.size, int(Johari.UNKNOWN), dtype=np.int8)
    out[aligned & surfaced] = int(Johari.OPEN)
    out[aligned & ~surfaced] = int(Johari.BLIND)
    out[~aligned & surfaced] = int(Johari.HIDDEN)
    return out


__all__ = ["Goal", "GoalSnapshot", "GoalView", "HISTORY", "PurposeIndex", "RefreshJob", "johari", "spherical_kmeans"]
