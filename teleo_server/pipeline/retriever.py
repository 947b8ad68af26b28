"""The retriever the server talks to: indexes every space and runs a profile's stages."""

from __future__ import annotations

import dataclasses
import functools
import gc
import itertools
import math
import time
from collections.abc import Generator, Iterator
from concurrent.futures import wait
from datetime import date, timedelta
from typing import Any

import numpy as np
import structlog

from teleo_server.domain import EmbeddingSet, Johari, Memory, Principal
from teleo_server.errors import InvalidArgument, NotFound
from teleo_server.index.catalog import Catalog, Column
from teleo_server.index.chunks import expand
from teleo_server.index.purpose import Goal, GoalView, PurposeIndex
from teleo_server.index.tokens import TokenCodec
from teleo_server.pipeline import alignment as alignment_stage
from teleo_server.pipeline.compare import compare_rows, space_alignment
from teleo_server.pipeline.explain import explanation
from teleo_server.pipeline import profiles
from teleo_server.pipeline.fusion import no_fusion, ranks
from teleo_server.pipeline.ops import device_runtime, resolve_ops
from teleo_server.pipeline.relevance import relevance
from teleo_server.pipeline.resilience import Breakers
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.pipeline.stages import get_stage
from teleo_server.pipeline.state import State, matrix_weights, resolve_config
from teleo_server.pipeline.updates import update_hints
from teleo_server.pipeline.types import (Breakdown, EntryPoint, Hit, MemoryPurpose, Offload, Outcome, Provenance, Query,
                                         StageReport, UpdateHint)
from teleo_server.spaces.base import QueryContext, Space
from teleo_server.spaces.registry import build_spaces
from teleo_server.workers import beside_pool

log = structlog.get_logger(__name__)

# the third attempt of a bounded retry takes the next broader route
NEXT_ROUTE = {"simple": "multi_hop", "multi_hop": "exploratory", "exploratory": "exploratory"}


def broadened(query: Query, now: float) -> Query:
    """The query with relaxed filters for a retry: the event-time window twice as wide (about its
    middle; an open-ended one reaching twice as far back) and ``min_confidence`` 0.2 lower.
    Bi-temporal moments, ``include_historical`` and the caller's scope are kept: a broader search
    must not answer "now" with a fact that was replaced."""
    f = query.filters
    start, end = f.event_start, f.event_end
    if start is not None and end is not None:
        half = (end - start) / 2.0
        start, end = start - half, end + half
    elif start is not None:
        start = start - max(now - start, 0.0)
    min_conf = None if f.min_confidence is None else max(f.min_confidence - 0.2, 0.0)
    filters = dataclasses.replace(f, event_start=start, event_end=end, min_confidence=min_conf)
    return dataclasses.replace(query, filters=filters)


def clock(query: Query) -> float:
    """The query's "now" (decay, recency): its own time, or the moment it asks about
    (``as_of_event``) when that is earlier."""
    now = query.now or time.time()
    moment = query.filters.as_of_event
    return min(now, moment) if moment is not None else now


def retrieval_confidence(state: State) -> float:
    """Mean calibrated relevance of the top three candidates (0 when there are none)."""
    c = state.cands
    if c.size == 0:
        return 0.0
    rel = c.columns["relevance"] if "relevance" in c.columns else relevance(c.spaces, c.size)
    order = np.argsort(-c.score, kind="stable")[:3] if c.score is not None else np.arange(min(3, c.size))
    return float(np.mean(rel[order]))


_EPOCH = date(1970, 1, 1)
_JOHARI = {int(j): j for j in Johari}  # an enum call a hit cost more than a lookup


@functools.lru_cache(maxsize=4096)
def _utc_day(days: int) -> str:
    """"YYYY-MM-DD" of the UTC day ``days`` after 1970-01-01 ("undated" outside the calendar).
    Results share a handful of days: formatting each hit's date cost more than the rest of it."""
    try:
        return (_EPOCH + timedelta(days=days)).isoformat()
    except OverflowError:  # a row stored before times were validated
        return "undated"


def citation(namespace: str, event_time: float, memory_id: str) -> str:
    """"namespace/YYYY-MM-DD (memory 1f5a2b3c...)": where a result can be found again."""
    day = _utc_day(int(event_time // 86400)) if event_time and math.isfinite(event_time) else "undated"
    return f"{namespace}/{day} (memory {memory_id[:8]}\u2026)"


def _found_sets(names: list[str], found: np.ndarray) -> list[tuple[str, ...]]:
    """Each row's spaces (``names`` order) whose own lists found it (``found``: bool, one column a
    space); rows share a few such sets, each made once."""
    sets: dict[tuple[bool, ...], tuple[str, ...]] = {}
    out = []
    for row in map(tuple, found.tolist()):
        got = sets.get(row)
        if got is None:
            got = sets[row] = tuple(itertools.compress(names, row))
        out.append(got)
    return out


def _primary_spaces(names: list[str], weights: dict[str, float], rank_mat: np.ndarray, k: float) -> list[str]:
    """Each row's primary space: of the weighted spaces that ranked it, the one whose weighted
    reciprocal rank ``w / (k + rank)`` is largest (on a tie the name that sorts last); "" when
    none ranked it."""
    n = rank_mat.shape[0]
    cols = [j for j in sorted(range(len(names)), key=lambda j: names[j], reverse=True) if names[j] in weights]
    if not cols:
        return [""] * n
    w = np.array([weights[names[j]] for j in cols], np.float64)
    r = rank_mat[:, cols]
    with np.errstate(invalid="ignore"):
        gain = np.where(np.isfinite(r), w / (k + r), -np.inf)
    best = gain.argmax(axis=1)  # the first of equal gains: the name that sorts last
    ranked = np.isfinite(gain[np.arange(n), best])
    return [names[cols[b]] if ok else "" for b, ok in zip(best.tolist(), ranked.tolist())]


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    """A retrieval as :meth:`TeleologicalRetriever._plan` resolves it, before its first attempt."""

    query: Query
    prof: Any
    fallback: str
    cfg: PipelineSettings
    stage_list: list
    goals: GoalView


def _raising(exc: BaseException) -> Iterator[Any]:
    """Events of a retrieval that could not run: ``exc``, raised when they are read."""
    raise exc
    yield  # noqa: unreachable - makes this a generator


class TeleologicalRetriever:
    """In-memory indexes over every registered space; the store stays the source of truth."""

    def __init__(self, settings: PipelineSettings, backend: str = "numpy") -> None:
        profiles.check(settings)
        self.settings = settings
        self._backend = backend
        self.ops = resolve_ops(backend)
        self.runtime = device_runtime(backend)  # where device rows live (None: every index on the host)
        self.catalog = Catalog()
        self.spaces = build_spaces(settings, self.catalog, self.ops, self.runtime)
        self.purpose = PurposeIndex(settings.goals)
        self.breakers = Breakers(settings.breaker_threshold, settings.breaker_reset_s)
        # each chunk row's character span within its memory's content
        self._span_start, self._span_end = Column(np.int32), Column(np.int32)

    @property
    def backend(self) -> str:
        return self._backend

    def __len__(self) -> int:
        return len(self.catalog)

    # ---- writes --------------------------------------------------------------------------------
    def add(self, memory: Memory, embeddings: EmbeddingSet) -> None:
        """Index ``memory`` in every space, or in none: when a space fails, the spaces that took it
        forget it again (in reverse order) and so does the catalog, whose removal also masks whatever
        the failing space had written of it; the error is raised. A memory stored under the same id
        is replaced (removed first)."""
        if memory.id in self.catalog.row_of:
            self.remove([memory.id])
        row, chunk_rows = self.catalog.add(memory, len(embeddings.chunks))
        self._span_start.extend(np.fromiter((c.start for c in embeddings.chunks), np.int32, len(embeddings.chunks)))
        self._span_end.extend(np.fromiter((c.end for c in embeddings.chunks), np.int32, len(embeddings.chunks)))
        taken: list[Space] = []
        try:
            for space in self.spaces.values():
                space.add(row, chunk_rows, memory, embeddings)
                taken.append(space)
        except BaseException:
            rows = np.array([row], dtype=np.int64)
            for space in reversed(taken):
                space.remove(rows, chunk_rows)
            self.catalog.remove(memory.id)
            log.warning("index.add_rolled_back", memory_id=memory.id, indexed_by=len(taken), spaces=len(self.spaces))
            raise

    def warm_up(self, memory: Memory, embeddings: EmbeddingSet, query: Query) -> int:
        """Index ``memory`` in a scratch retriever of the same settings, run ``query`` over it to
        the end and drop it: what the first write and read build on first use (the text
        analysers' word tables and caches, code paths run once) is ready before the first request.
        This retriever's own indexes are not touched. Returns the results the scratch query gave."""
        scratch = TeleologicalRetriever(self.settings, self._backend)
        scratch.add(memory, embeddings)
        scratch.settle()
        found = sum(isinstance(event, Hit) for event in scratch.retrieve(query))
        del scratch
        gc.collect()  # the spaces refer to each other: the scratch index goes with the cycles
        return found

    def add_many(self, items: list[tuple[Memory, EmbeddingSet]]) -> None:
        for memory, embeddings in items:
            self.add(memory, embeddings)

    def token_codecs(self) -> dict[str, TokenCodec]:
        """Head name -> the codec the spaces keep it in, for the heads
        kept as codes: the database stores them as the same codes. A head two spaces would code
        differently has none (it is stored as floats and each space encodes it)."""
        found: dict[str, list[TokenCodec]] = {}
        for space in self.spaces.values():
            make = getattr(space, "storage_codec", None)
            if make is not None:
                found.setdefault(space.head, []).append(make())
        return {head: cs[0] for head, cs in found.items() if len({c.spec for c in cs}) == 1}

    # ---- snapshots (teleo_server/snapshot.py) ------------------------------------------------------
    def can_snapshot(self) -> bool:
        """Whether :meth:`snapshot_state` can write these indexes: on the host backend only (a
        device backend's indexes live on the device and are rebuilt at every start)."""
        return self._backend == "numpy"

    def snapshot_state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(state, shared): every index's data, and the running objects it refers to (settings,
        compute backend), which a snapshot names rather than copies (``can_snapshot`` first)."""
        if not self.can_snapshot():
            raise ValueError(f"indexes on the {self._backend} backend are rebuilt at start, not snapshotted")
        state = {"catalog": self.catalog, "spaces": self.spaces, "purpose": self.purpose,
                 "span_start": self._span_start, "span_end": self._span_end}
        return state, {"settings": self.settings, "ops": self.ops}

    def restore_state(self, state: dict[str, Any]) -> None:
        """Take the indexes of a snapshot made by :meth:`snapshot_state` under the same settings."""
        if set(state) != {"catalog", "spaces", "purpose", "span_start", "span_end"} or set(state["spaces"]) != set(self.spaces):
            raise ValueError("the snapshot holds other indexes than this retriever's")
        self.catalog, self.spaces, self.purpose = state["catalog"], state["spaces"], state["purpose"]
        self._span_start, self._span_end = state["span_start"], state["span_end"]

    def settle(self) -> None:
        """After a bulk load: fold every index's write buffer, so the first reads pay no delta scan."""
        self.catalog.settle()
        for space in self.spaces.values():
            space.settle()

    def remove(self, ids: list[str]) -> None:
        id_of_row = {r: i for i, r in ((i, self.catalog.row_of.get(i)) for i in ids) if r is not None}
        if not id_of_row:
            return
        rows = np.array(sorted(id_of_row), dtype=np.int64)
        chunks, _ = expand(self.catalog.chunk_start, self.catalog.chunk_count, rows)
        for space in self.spaces.values():
            space.remove(rows, chunks)  # before the catalog forgets them: spaces may read the memories
        for r in rows.tolist():
            self.catalog.remove(id_of_row[r])

    def update(self, memory: Memory) -> None:
        self.catalog.update(memory)

    def count_retrieved(self, ids: list[str]) -> None:
        self.catalog.count_retrieved(ids)

    def compact(self) -> None:
        """Drop tombstoned rows from every index (renumbering rows densely)."""
        keep, keep_chunks = self.catalog.compact()
        self._span_start.keep(keep_chunks)
        self._span_end.keep(keep_chunks)
        for space in self.spaces.values():
            space.compact(keep, keep_chunks)
        self.purpose.compact(keep)
        log.info("indexes_compacted", memories=int(keep.size), chunks=int(keep_chunks.size))

    # ---- maintenance, off the read path ----------------------------------------------------------
    def _space(self, role: str) -> Any:
        """The space playing ``role`` (``settings.roles``), or None."""
        return self.spaces.get(self.settings.roles.get(role, ""))

    def resolve_profile(self, name: str) -> str:
        """The canonical name of profile ``name`` ("" = the default); InvalidArgument if unknown."""
        return profiles.profile(name, self.settings).name

    def cache_ttl(self, profile: str) -> float:
        """Seconds a result of this profile may come from the result cache (its ``result_cache_ttl_s``)."""
        prof = profiles.profile(profile, self.settings)
        return float(prof.updates.get("result_cache_ttl_s", self.settings.result_cache_ttl_s))

    def maintenance_due(self) -> bool:
        """Whether :meth:`maintenance` has work: writes since the goals were derived, tombstones
        past ``compact_dead_fraction``, or a dense index that needs (re)calibrating."""
        index = getattr(self._space("dense"), "index", None)
        return (self.catalog.dead > self.settings.compact_dead_fraction * max(self.catalog.n_rows, 1)
                or (index is not None and self.purpose.due(self.catalog.version))
                or (index is not None and self.settings.dense_dimension == 0 and index.needs_calibration()))

    def maintenance(self) -> Generator[Offload | None, Any, None]:
        """Index compaction, Matryoshka calibration and goal clustering, as steps a scheduler runs
        beside reads (``MemoryCore`` does, on its own schedule).

        The code between yields touches the indexes, so the scheduler advances the generator where
        index calls run (one thread); each step is short. A yielded :class:`Offload` is pure work on
        copies (the clustering): run it anywhere and send its result back. ``None`` just lets queued
        reads go first. Queries never run maintenance themselves.
        """
        if self.catalog.dead > self.settings.compact_dead_fraction * max(self.catalog.n_rows, 1):
            self.compact()
            yield None
        semantic = self._space("dense")
        index = getattr(semantic, "index", None)
        if index is None:
            return
        if self.settings.dense_dimension == 0 and index.needs_calibration():
            index.calibrate(self.ops, self.settings.min_recall_threshold)
            yield None
        cat, lexical = self.catalog, self._space("lexical")
        label_terms = self.settings.goals.label_terms

        def labels(groups: np.ndarray, k: int) -> list[list[str]]:
            return lexical.top_terms(groups, k, label_terms) if lexical is not None else [[] for _ in range(k)]

        version = cat.version
        for job in self.purpose.plan(version, cat.partitions, cat.alive, self._partition_name,
                                     semantic.memory_vectors):
            centroids, assign = yield Offload(job.cluster)
            # rows are renumbered only by compact(), which runs only in this generator: the
            # job's row ids are still valid; rows added meanwhile get their vectors in finish()
            self.purpose.install(job, centroids, assign, cat.partitions, semantic.memory_vectors, labels)
            yield None
        self.purpose.finish(version, cat.partitions, semantic.memory_vectors)

    def maintain(self) -> None:
        """Run :meth:`maintenance` to the end here (tests, benchmarks, a bulk load)."""
        steps = self.maintenance()
        result: Any = None
        while True:
            try:
                step = steps.send(result)
            except StopIteration:
                return
            result = step.run() if step is not None else None

    def _partition_name(self, key: int) -> str:
        namespace, level = self.catalog.partition(key)
        return f"{namespace}/{level.name.lower()}"

    def _goal_view(self, principal: Principal | None) -> GoalView:
        semantic = self._space("dense")
        vectors = semantic.memory_vectors if getattr(semantic, "index", None) is not None else None

        def readable(key: int) -> bool:
            return principal is None or principal.can_read(*self.catalog.partition(key))

        return self.purpose.view(readable, self.catalog.partitions, vectors)  # type: ignore[arg-type]

    def goal_count(self, principal: Principal | None = None) -> int:
        """Goals of the partitions ``principal`` may read (every goal when None)."""
        return self._goal_view(principal).n_goals

    def goals(self, principal: Principal | None = None) -> list[Goal]:
        """The emergent goals ``principal`` may see (all when None), each with its snapshots."""
        return list(self._goal_view(principal).goals)

    # ---- reads ---------------------------------------------------------------------------------
    def retrieve(self, query: Query) -> Iterator[StageReport | Hit | Outcome]:
        yield from self._run(self._plan(query))

    def retrieve_together(self, queries: list[Query]) -> list[Iterator[StageReport | Hit | Outcome]]:
        """The events of each of ``queries``, as :meth:`retrieve` gives them, for retrievals run one
        after another with no write between them (the index thread takes them from its queue
        together): work their stages can share (``Stage.together``: the dense search on a backend
        that reads its rows once for several queries) is done for all of them first. A query that
        cannot run raises, as with :meth:`retrieve`, when its events are read; a failure of the
        shared work leaves each retrieval to do its own."""
        planned: list[tuple[_Plan, State] | BaseException] = []
        for query in queries:
            try:
                plan = self._plan(query)
                planned.append((plan, self._state(query, plan.cfg, plan.goals, plan.prof.params, plan.fallback)))
            except Exception as exc:  # raised when that query's events are read
                planned.append(exc)
        ready = [p for p in planned if not isinstance(p, BaseException)]
        shared: dict[str, list[State]] = {}
        for plan, state in ready:
            disabled = set(plan.query.overrides.disable_stages)
            for st in plan.stage_list:
                if st.together is not None and st.name not in disabled:
                    shared.setdefault(st.name, []).append(state)
        for name, states in shared.items():
            if len(states) > 1:
                try:
                    get_stage(name).together(states)  # type: ignore[misc]
                except Exception as exc:  # each retrieval does its own, and meets the failure there if it lasts
                    log.warning("retrieve.together_failed", stage=name, queries=len(states), error=str(exc))
        return [_raising(p) if isinstance(p, BaseException) else self._run(*p) for p in planned]

    def _plan(self, query: Query) -> "_Plan":
        """What a retrieval of ``query`` runs: its profile (or the fallback one without an
        embedding), settings, stages and the goals its caller may see; InvalidArgument for a
        request that cannot run."""
        if query.top_k < 0:
            raise InvalidArgument("top_k must be >= 0 (0: the profile's default)", field="top_k")
        prof = profiles.profile(query.profile, self.settings)
        fallback = ""
        if query.embedding is None and prof.without_embedding:
            fallback, prof = prof.without_embedding, profiles.profile(prof.without_embedding, self.settings)
        cfg = resolve_config(self.settings, query.overrides, prof.updates)
        stage_list = [get_stage(name, field="profile") for name in prof.stages]
        goals = self._goal_view(query.principal)
        for i, target in enumerate(query.target_goals):
            if not goals.resolve_targets((target,)):
                # the same answer whether the goal does not exist or belongs to a partition the
                # caller may not read
                raise InvalidArgument(f"no goal you may see is named {target[:64]!r} (goals are matched by id or "
                                      f"label; Stats counts them)", field=f"target_goals[{i}]")
        return _Plan(query, prof, fallback, cfg, stage_list, goals)

    def _run(self, plan: "_Plan", first: State | None = None) -> Iterator[StageReport | Hit | Outcome]:
        """The attempts of a planned retrieval, the first on ``first`` when given (a state made
        for it beforehand, whose shared work is done)."""
        query, prof, fallback, cfg, stage_list, goals = (plan.query, plan.prof, plan.fallback, plan.cfg,
                                                          plan.stage_list, plan.goals)
        attempt_query, force_route = query, ""
        background: list = []
        try:
            for attempt in range(1, cfg.max_attempts + 1):
                if attempt == 1 and first is not None:
                    state = first
                else:
                    state = self._state(attempt_query, cfg, goals, prof.params, fallback)
                state.background = background
                if force_route:
                    state.report["force_route"] = force_route
                yield from self._run_stages(state, stage_list, attempt)
                c = state.cands
                if c.size and "relevance" not in c.columns:  # once, for the retry check and the hits
                    c.columns["relevance"] = relevance(c.spaces, c.size)
                confidence = retrieval_confidence(state)
                route = state.report.get("route", "")
                if (attempt == cfg.max_attempts or route == "skip"
                        or (state.cands.size > 0 and confidence >= cfg.retry_confidence)):
                    break
                # bounded retry: broader filters, then also the next broader route
                attempt_query = broadened(query, state.ctx.now)
                if attempt + 1 == 3:
                    force_route = NEXT_ROUTE.get(route or "simple", "exploratory")
            returned: set[str] = set()
            for hit in self._hits(state, attempt_query):  # every candidate, in order
                returned.add(hit.memory.id)
                yield hit
            # the conflicts that touch what is delivered (deeper candidates' pairs say nothing)
            conflicts = [c for c in state.report.get("conflicts", ()) if c.id_a in returned or c.id_b in returned]
            yield Outcome(corpus_size=int(np.count_nonzero(state.ctx.readable)) if state.ctx.readable is not None else 0,
                          degraded=bool(state.degraded), degraded_reason=state.degraded,
                          route=state.report.get("route", ""), skip_reason=state.report.get("skip_reason", ""),
                          retry_count=attempt - 1, retrieval_confidence=confidence,
                          conflicts=conflicts, query_types=list(state.report.get("query_types", ())),
                          space_weights={n: float(w) for n, w in state.cfg.space_weights.items() if w > 0},
                          coverage={n: (f, u) for n, (f, u) in state.report.get("coverage", {}).items()})
        finally:
            # strategies abandoned at their time limit still read the indexes: the index thread
            # is not released (to a write) before they finish
            if background:
                wait(background)

    def _state(self, query: Query, cfg: PipelineSettings, goals: GoalView, params: dict[str, Any],
               fallback: str) -> State:
        cat = self.catalog
        readable = cat.readable(query.principal)
        mask = cat.mask(query.principal, query.filters, readable=readable)
        n_readable = int(np.count_nonzero(readable))
        ctx = QueryContext(query=query, ops=self.ops, catalog=cat, mask=mask, readable=readable,
                           sees_all=n_readable == len(cat), chunk_mask=None, now=clock(query))
        state = State(ctx=ctx, cfg=cfg, spaces=self.spaces, purpose=goals,
                      top_k=query.top_k or cfg.default_top_k, params=dict(params), breakers=self.breakers)
        if query.embedding is None:
            state.degraded = (f"embedding unavailable: the {fallback} profile ran instead" if fallback
                              else "embedding unavailable: lexical only")
        return state

    def _run_stages(self, state: State, stage_list: list, attempt: int) -> Iterator[StageReport]:
        disabled = set(state.ctx.query.overrides.disable_stages)
        prefix = f"attempt {attempt}: " if attempt > 1 else ""
        if state.cfg.prefetch:
            # a stage's work that needs no earlier stage runs beside the stages before it (the
            # first stage has nothing to run beside); the retriever waits for it like any
            # background call before it lets a write touch the indexes
            for st in stage_list[1:]:
                if st.prefetch is not None and st.name not in disabled and st.name not in state.prefetches:
                    call = st.prefetch(state)
                    if call is not None:
                        fut = beside_pool().submit(call)
                        state.prefetches[st.name] = fut
                        state.background.append(fut)
        for st in stage_list:
            n_in = state.cands.size
            if st.name in disabled:
                if st.on_disabled is not None:
                    st.on_disabled(state)
                yield StageReport(st.name, 0.0, n_in, state.cands.size, self._backend, prefix + "disabled", skipped=True)
                continue
            t0 = time.perf_counter()
            if st.needs_score and state.cands.score is None:
                no_fusion(state)
            detail = st.run(state)
            ms = (time.perf_counter() - t0) * 1e3
            skipped = detail.startswith("skipped")
            yield StageReport(st.name, ms, n_in, state.cands.size, self._backend, prefix + detail, skipped=skipped)

    def breaker_states(self) -> dict[str, str]:
        """Each strategy's circuit breaker: "closed", "open" or "half_open"."""
        return self.breakers.states()

    def _hits(self, state: State, query: Query) -> Iterator[Hit]:
        c = state.cands
        if c.size == 0:
            return
        alignment_stage.annotate(state)
        quadrants = alignment_stage.johari_of(state)
        assert c.score is not None and c.purpose is not None and c.goal is not None
        assert c.misaligned is not None and c.goal_index is not None
        # What every hit is made of is worked out over the whole list first, as arrays: one
        # hit's own statements cost more than the rest of a retrieval at 100 results.
        names = list(c.spaces)
        n = c.size
        # ranks within the whole pool when fusion recorded them; else within what is left
        rank_mat = np.empty((n, len(names)), np.float64)
        found_mat = np.zeros((n, len(names)), bool)
        for j, name in enumerate(names):
            rank_mat[:, j] = c.ranks[name] if name in c.ranks else ranks(c.spaces[name].astype(np.float64))
            found_mat[:, j] = c.found[name]
        found_of, found_rows, rank_of = _found_sets(names, found_mat), found_mat.tolist(), rank_mat.tolist()
        value_of = np.stack([c.spaces[name] for name in names], axis=1).tolist() if names else [[]] * n
        scores = np.clip(c.score, 0.0, 1.0).tolist()
        content = (c.content if c.content is not None else c.score).tolist()
        purpose, goal_score, goal_index = c.purpose.tolist(), c.goal.tolist(), c.goal_index.tolist()
        misaligned, quadrant = c.misaligned.tolist(), [_JOHARI[q] for q in quadrants.tolist()]
        late_of = None if c.late is None else c.late.tolist()
        temporal_of = None if c.temporal is None else c.temporal.tolist()
        relevance_of = (c.columns["relevance"] if "relevance" in c.columns else relevance(c.spaces, c.size)).tolist()
        weights = {name: w for name, w in state.cfg.space_weights.items() if w > 0}
        if "unique_contribution" in c.columns:
            unique_of = c.columns["unique_contribution"].tolist()
        else:  # the one fused space whose own list found it, if only one did
            voted = found_mat & np.array([name in weights for name in names], bool)
            one = voted.sum(axis=1) == 1
            first = voted.argmax(axis=1) if names else np.zeros(n, np.int64)
            unique_of = [names[f] if o else "" for f, o in zip(first.tolist(), one.tolist())]
        primary_of = _primary_spaces(names, weights, rank_mat, state.cfg.rrf_k)
        coverage = state.report.setdefault("coverage", {})
        for name, count in zip(names, found_mat.sum(axis=0).tolist()):
            if count:
                coverage.setdefault(name, [0, 0])[0] += count
        for name in unique_of:
            if name:
                coverage.setdefault(name, [0, 0])[1] += 1
        chunk = np.zeros(n, np.int64) if c.chunk is None else np.asarray(c.chunk, np.int64)
        rows_arr = c.rows.astype(np.int64)
        first_chunk = self.catalog.chunk_start[rows_arr].astype(np.int64)
        has_span = (chunk >= 0) & (chunk < self.catalog.chunk_count[rows_arr])
        at = (first_chunk + chunk)[has_span]
        span_of: list[tuple[int, int] | None] = [None] * n
        for i, a, b in zip(np.flatnonzero(has_span).tolist(), self._span_start.view[at].tolist(),
                           self._span_end.view[at].tolist()):
            span_of[i] = (a, b)
        chunk_of = chunk.tolist()
        # provenance: the strategies (hipporag) or spaces whose own lists held each result
        strategy_of = {state.role(role): name for name, role in state.report.get("strategies", {}).items()}
        strategies_of: dict[tuple[str, ...], tuple[str, ...]] = {}
        checks = tuple(state.report.get("validation", ()))
        conflicts_of = c.columns["conflicts_with"].tolist() if "conflicts_with" in c.columns else None
        goals = state.purpose.goals
        records = self.catalog.memories(c.rows)
        for i in range(n):
            found = found_of[i]
            spaces = {name: v for name, v in zip(names, value_of[i]) if not math.isnan(v)}
            space_ranks = {name: int(r) for name, r, f in zip(names, rank_of[i], found_rows[i]) if f and math.isfinite(r)}
            late = None if late_of is None else late_of[i]
            temporal = 1.0 if temporal_of is None else temporal_of[i]
            breakdown = Breakdown(content=content[i], purpose_alignment=purpose[i], goal_alignment=goal_score[i],
                                  late_interaction=late or 0.0, temporal=temporal, spaces=spaces, space_ranks=space_ranks)
            gi = goal_index[i]
            goal = goals[gi] if gi >= 0 else None
            text = explanation(found, goal, goal_score[i], late, misaligned[i], temporal) if query.explain else ""
            memory = records[i]
            strategies = strategies_of.get(found)
            if strategies is None:
                strategies = strategies_of[found] = tuple(strategy_of.get(name, name) for name in found)
            provenance = Provenance(
                strategies=strategies, fused_score=float(content[i]),
                validation_passed=checks, confidence=memory.confidence,
                citation=citation(memory.namespace, memory.event_time, memory.id),
                conflicts_with=tuple(x for x in (conflicts_of[i].split(",") if conflicts_of and conflicts_of[i] else ()) if x))
            yield Hit(memory=memory, score=scores[i], breakdown=breakdown, found_by=found, provenance=provenance,
                      misaligned=misaligned[i], johari=quadrant[i], explanation=text, chunk_index=chunk_of[i],
                      unique_contribution=unique_of[i], primary_space=primary_of[i],
                      relevance=relevance_of[i], chunk_span=span_of[i])

    def discover(self, query: Query, min_similarity: float = 0.0) -> list[EntryPoint]:
        """Every space that can search the whole corpus, ranked by its best match for the query:
        the top memory it finds among what the caller may read (and the filters admit) and that
        match's similarity in [0, 1] (``Space.unit_score``). Spaces with no signal for the query,
        or whose best similarity is below ``min_similarity``, are left out."""
        state = self._state(query, self.settings, self._goal_view(query.principal), {}, "")
        out = []
        for name, space in self.spaces.items():
            if not space.recall:
                continue
            feats = state.feature(name)
            if feats is None:
                continue
            rows, _ = space.search(state.ctx, feats, 1)
            rows = np.asarray(rows, dtype=np.int64)[:1]
            if not rows.size:
                continue
            score = space.score(state.ctx, feats, rows)  # exact (a search may rank on a truncated vector)
            sim = float(space.unit_score(score)[0])
            if sim >= min_similarity and not math.isnan(float(score[0])):
                out.append(EntryPoint(name, self.catalog.id_of(int(rows[0])), sim, float(score[0])))
        out.sort(key=lambda e: (-e.similarity, e.space))
        return out

    def update_hints(self, memory_id: str, principal: Principal, limit: int | None = None) -> list[UpdateHint]:
        """Earlier memories of its namespace, readable by ``principal``, that the memory
        ``memory_id`` probably updates (``pipeline/updates.py``); at most ``limit``
        (``update_hints`` by default). Empty when it is not indexed."""
        row = self.catalog.row_of.get(memory_id)
        if row is None:
            return []
        s = self.settings
        goals = self._goal_view(principal)
        return update_hints(lambda q: self._state(q, s, goals, {}, ""), self.spaces, s.roles.get("dense"), row,
                            principal, s.update_hints if limit is None else limit,
                            s.update_hint_change_similarity, s.update_hint_restated_similarity)

    def compare(self, a: str, b: str, aggregation: str, weights: dict[str, float],
                matrix: str = "", principal: Principal | None = None) -> tuple[dict[str, float], float, float | None]:
        """Per-space similarities, their aggregate, and the cosine of the two purpose vectors (None
        unless both memories lie in one partition that has goals). ``rrf`` ranks b among the
        memories ``principal`` may read (every live one when None)."""
        ra, rb = self.catalog.row_of.get(a), self.catalog.row_of.get(b)
        if ra is None or rb is None:
            raise NotFound(f"memory {a if ra is None else b} is not indexed")
        if matrix:
            base = matrix_weights(self.settings, matrix, "search_matrix")
            weights = {**{n: float(base.get(n, 0.0)) for n in self.spaces}, **weights}
        pool = self.catalog.alive if principal is None else self.catalog.readable(principal)
        sims, agg = compare_rows(self.spaces, pool, self.settings.roles.get("dense"), ra, rb,
                                 aggregation, weights)
        purpose = None
        keys = self.catalog.partitions
        part = self.purpose.partitions.get(int(keys[ra]))
        if int(keys[ra]) == int(keys[rb]) and part is not None and part.goals:
            vecs, _ = self.purpose.vectors_of(np.array([ra, rb], dtype=np.int64))
            na, nb = float(np.linalg.norm(vecs[0])), float(np.linalg.norm(vecs[1]))
            if na > 0 and nb > 0:
                purpose = float(np.clip(vecs[0] @ vecs[1] / (na * nb), 0.0, 1.0))
        return sims, agg, purpose


    def purpose_of(self, memory_id: str, members: int = 16) -> MemoryPurpose | None:
        """The memory's purpose (None while its partition has no goals): its alignment to each goal
        of its own partition, the best of them, and per space the mean similarity to the
        ``members`` memories of that goal closest to its centroid (itself excluded). Everything
        comes from the memory's own partition, which whoever may read the memory may read."""
        row = self.catalog.row_of.get(memory_id)
        if row is None:
            raise NotFound(f"memory {memory_id} is not indexed")
        key = int(self.catalog.partitions[row])
        part = self.purpose.partitions.get(key)
        if part is None or not part.goals:
            return None
        n_goals = len(part.goals)
        vec = self.purpose.vectors_of(np.array([row], dtype=np.int64))[0][0, :n_goals]
        best = int(np.argmax(vec))
        same = np.flatnonzero(self.catalog.alive & (self.catalog.partitions[: self.catalog.alive.size] == key))
        same = same[same != row]
        pv = self.purpose.vectors_of(same)[0][:, :n_goals]
        in_goal = pv.argmax(axis=1) == best
        chosen = np.sort(same[in_goal][np.argsort(-pv[in_goal, best], kind="stable")[:members]])
        goal = part.goals[best]
        return MemoryPurpose(goal.id, goal.label, float(vec[best]),
                             {g.id: float(vec[j]) for j, g in enumerate(part.goals)},
                             space_alignment(self.spaces, row, chosen), int(chosen.size))


__all__ = ["NEXT_ROUTE", "TeleologicalRetriever", "broadened", "citation", "clock", "retrieval_confidence"]
