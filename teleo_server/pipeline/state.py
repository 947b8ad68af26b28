"""Per-retrieval state passed from stage to stage: resolved config and the candidate table."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from teleo_server.compute.sets import distinct
from teleo_server.errors import InvalidArgument
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.pipeline.types import Overrides
from teleo_server.spaces.base import QueryContext, Space
from teleo_server.spaces.registry import resolve_name, space_classes

if TYPE_CHECKING:
    from teleo_server.index.purpose import GoalView
    from teleo_server.pipeline.resilience import Breakers

_OVERRIDABLE = ("sparse_weight", "max_candidates", "dense_dimension", "fusion", "rrf_k",
                "late_interaction_weight", "decay_half_life_days", "mmr_lambda", "min_score",
                "misalignment_threshold", "filter_misaligned", "min_relevance")


def _space(name: str, field_name: str) -> str:
    """Full space name for "E1", "semantic" or "E1_semantic"."""
    try:
        return resolve_name(name)
    except KeyError:
        raise InvalidArgument(f"unknown space {name[:64]!r}; expected one of {list(space_classes())} "
                              "(or a code such as 'E1', or a suffix such as 'semantic')", field=field_name) from None


def matrix_weights(settings: PipelineSettings, name: str, field_name: str) -> dict[str, float]:
    """The space weights of the search matrix ``name``; InvalidArgument naming ``field_name`` when
    there is none."""
    if name not in settings.search_matrices:
        raise InvalidArgument(f"unknown search matrix {name[:64]!r}; expected one of {sorted(settings.search_matrices)}",
                              field=field_name)
    return settings.search_matrices[name]


def masked_spaces(settings: PipelineSettings, names: tuple[str, ...]) -> set[str]:
    """The spaces a ``space_mask`` names: spaces (any accepted spelling) and groups."""
    out: set[str] = set()
    for i, name in enumerate(names):
        if name in settings.space_groups:
            out.update(settings.space_groups[name])
        else:
            try:
                out.add(resolve_name(name))
            except KeyError:
                raise InvalidArgument(f"unknown space or group {name[:64]!r}; groups: {sorted(settings.space_groups)}, "
                                      f"spaces: {list(space_classes())}", field=f"overrides.space_mask[{i}]") from None
    return out


def resolve_config(settings: PipelineSettings, overrides: Overrides, profile_updates: dict[str, Any]) -> PipelineSettings:
    """Settings with the profile's values, then the request's overrides, applied."""
    update: dict[str, Any] = dict(profile_updates)
    for name in _OVERRIDABLE:
        value = getattr(overrides, name)
        if value is not None:
            update[name] = value
    base = update.get("space_weights", settings.space_weights)
    if overrides.search_matrix:
        if overrides.search_matrix == "custom" and not overrides.space_weights:
            raise InvalidArgument("search matrix 'custom' needs overrides.space_weights", field="overrides.space_weights")
        base = matrix_weights(settings, overrides.search_matrix, "overrides.search_matrix")
    weights = {_space(n, "space_weights"): w for n, w in base.items()}
    for name, w in overrides.space_weights:
        weights[_space(name, "overrides.space_weights")] = float(w)
    if overrides.space_mask:
        keep = masked_spaces(settings, overrides.space_mask)
        weights = {n: (w if n in keep else 0.0) for n, w in weights.items()}
        late_role = settings.roles.get("late_interaction", "")
        if late_role not in keep:
            update["late_interaction_weight"] = 0.0
            weights.pop(late_role, None)
        update["masked_spaces"] = tuple(sorted(keep))
    # late interaction reranks rather than votes: its weight in a matrix or the request's weights is
    # the rerank's share (late_interaction_weight), unless the request sets that itself
    late = settings.roles.get("late_interaction", "")
    if late in weights and overrides.late_interaction_weight is None:
        update["late_interaction_weight"] = min(max(float(weights.pop(late)), 0.0), 1.0)
    else:
        weights.pop(late, None)
    update["space_weights"] = weights
    boosts = dict(update.get("space_boosts", settings.space_boosts))
    if overrides.space_mask:
        boosts = {n: b for n, b in boosts.items() if n in update["masked_spaces"]}
    update["space_boosts"] = boosts
    return settings.model_copy(update=update)


@dataclass(slots=True)
class Candidates:
    """Column table of candidate memories; every array has length C.

    rows int64 memory rows; spaces[name] float32 raw score (NaN = no signal); found[name] bool
    (the space's own candidate list held it); ranks[name] float64 1-based rank of the raw score
    within the whole candidate pool (inf = unscored), fixed at fusion; chunk int64 best chunk index; score float32 the
    current normalised score; the remaining columns fill the result breakdown.
    """

    rows: np.ndarray
    spaces: dict[str, np.ndarray] = field(default_factory=dict)
    found: dict[str, np.ndarray] = field(default_factory=dict)
    ranks: dict[str, np.ndarray] = field(default_factory=dict)  # 1-based rank within the pool, per space
    chunk: np.ndarray | None = None
    score: np.ndarray | None = None
    content: np.ndarray | None = None
    purpose: np.ndarray | None = None
    goal: np.ndarray | None = None
    goal_index: np.ndarray | None = None
    late: np.ndarray | None = None
    temporal: np.ndarray | None = None
    misaligned: np.ndarray | None = None
    # columns a stage adds for itself (a graph score, a conflict flag): carried by take() and
    # extend() like the rest, without the other stages knowing them
    columns: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return int(self.rows.size)

    @classmethod
    def empty(cls) -> "Candidates":
        return cls(np.zeros(0, dtype=np.int64))

    def take(self, idx: np.ndarray) -> "Candidates":
        """Subset / reorder every column by positions ``idx``."""
        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[idx]

        return Candidates(
            rows=self.rows[idx],
            spaces={k: v[idx] for k, v in self.spaces.items()},
            found={k: v[idx] for k, v in self.found.items()},
            ranks={k: v[idx] for k, v in self.ranks.items()},
            chunk=pick(self.chunk), score=pick(self.score), content=pick(self.content),
            purpose=pick(self.purpose), goal=pick(self.goal), goal_index=pick(self.goal_index),
            late=pick(self.late), temporal=pick(self.temporal), misaligned=pick(self.misaligned),
            columns={k: v[idx] for k, v in self.columns.items()},
        )

    def extend(self, rows: np.ndarray) -> np.ndarray:
        """Add rows not yet present (NaN/False in existing columns); returns positions of ``rows``."""
        rows = np.asarray(rows, dtype=np.int64)
        pos_of = self._position_table(rows)
        fresh = pos_of[rows] < 0
        if fresh.any():
            new = distinct(rows[fresh])
            n_new = new.size
            pos_of[new] = np.arange(self.rows.size, self.rows.size + n_new)
            self.rows = np.concatenate([self.rows, new])
            for k, v in self.spaces.items():
                self.spaces[k] = np.concatenate([v, np.full(n_new, np.nan, dtype=np.float32)])
            for k, v in self.found.items():
                self.found[k] = np.concatenate([v, np.zeros(n_new, dtype=bool)])
            for k, v in self.ranks.items():
                self.ranks[k] = np.concatenate([v, np.full(n_new, np.inf)])
            if self.chunk is not None:
                self.chunk = np.concatenate([self.chunk, np.zeros(n_new, dtype=np.int64)])
            for name in ("score", "content", "purpose", "goal", "late", "temporal"):
                v = getattr(self, name)
                if v is not None:
                    setattr(self, name, np.concatenate([v, np.full(n_new, np.nan, dtype=v.dtype)]))
            if self.goal_index is not None:
                self.goal_index = np.concatenate([self.goal_index, np.full(n_new, -1, dtype=self.goal_index.dtype)])
            if self.misaligned is not None:
                self.misaligned = np.concatenate([self.misaligned, np.zeros(n_new, dtype=bool)])
            for k, v in self.columns.items():
                fill = np.nan if np.issubdtype(v.dtype, np.floating) else ("" if v.dtype == object else 0)
                self.columns[k] = np.concatenate([v, np.full(n_new, fill, dtype=v.dtype)])
        return pos_of[rows]

    def _position_table(self, rows: np.ndarray) -> np.ndarray:
        # a row-indexed table (-1 = absent): memory rows are dense small integers, and a lookup
        # table is several times cheaper than sorting the pool for every join
        top = max(int(self.rows.max(initial=-1)), int(rows.max(initial=-1))) + 1
        pos_of = np.full(top, -1, dtype=np.int64)
        pos_of[self.rows] = np.arange(self.rows.size)
        return pos_of

    def set_space(self, name: str, scores: np.ndarray, found: np.ndarray | None = None) -> None:
        self.spaces[name] = scores.astype(np.float32, copy=False)
        self.found[name] = (~np.isnan(scores)) if found is None else found


@dataclass(slots=True)
class State:
    ctx: QueryContext
    cfg: PipelineSettings
    spaces: dict[str, Space]
    purpose: "GoalView"
    top_k: int
    cands: Candidates = field(default_factory=Candidates.empty)
    feats: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    degraded: str = ""
    params: dict[str, Any] = field(default_factory=dict)  # the profile's stage parameters (single_space: "space")
    breakers: "Breakers | None" = None  # the retriever's circuit breakers (pipeline/resilience.py)
    background: list[Future] = field(default_factory=list)  # abandoned calls the retriever waits for
    # stages' work started before the stages ran (``Stage.prefetch``), by stage name
    prefetches: dict[str, Future] = field(default_factory=dict)
    # what the summary reports beyond the stage events: route, skip_reason, conflicts, ...
    report: dict[str, Any] = field(default_factory=dict)

    def arm(self, cap: int) -> int:
        """How many candidates a recall arm with this cap fetches (``candidate_multiplier``)."""
        m = self.cfg.candidate_multiplier
        return min(cap, self.top_k * m) if m > 0 else cap

    def prefetched(self, stage: str) -> Any | None:
        """The result of the work ``stage`` had started before the stages ran (waiting for it; its
        exception raised here), or None when none was started."""
        fut = self.prefetches.pop(stage, None)
        return None if fut is None else fut.result()

    @property
    def parallel(self) -> bool:
        """Whether a stage may split large work over a second core (``workers.side_by_side``):
        the settings allow it (``parallel``) and so does the backend (``Ops.host_threads``)."""
        return self.cfg.parallel and self.ctx.ops.host_threads

    def role(self, role: str) -> str | None:
        """The space playing ``role`` (``PipelineSettings.roles``), or None if there is none."""
        name = self.cfg.roles.get(role)
        return name if name in self.spaces else None

    def feature(self, name: str | None) -> Any | None:
        """Prepared query features of a space (computed once per retrieval)."""
        if name is None:
            return None
        if name not in self.feats:
            space = self.spaces.get(name)
            self.feats[name] = None if space is None else space.prepare(self.ctx)
        return self.feats[name]


__all__ = ["Candidates", "State", "masked_spaces", "matrix_weights", "resolve_config"]
