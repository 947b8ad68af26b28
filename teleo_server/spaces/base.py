"""What a space is: its index, its query-side features, its similarity."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

import numpy as np

from pydantic import AfterValidator, BaseModel, ConfigDict

from teleo_server.domain import EmbeddingSet, Memory
from teleo_server.compute.backend import ops as compute_ops
from teleo_server.index.base import make_for, registered
from teleo_server.index.catalog import Catalog
from teleo_server.index.chunks import expand, segment_max
from teleo_server.index.sparse import SparseIndex
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.query import Query


@dataclass(slots=True)
class QueryContext:
    """One retrieval's shared state: resolved ops, the ACL/filter mask and query features.

    mask: bool (n_rows,) memory rows the caller may see after filters; chunk_mask: bool (n_chunks,)
    their chunk rows, or None to make them on first use (:meth:`visible_chunks`).
    readable: bool (n_rows,) live rows the caller may read (before filters); ``sees_all`` when that is
    every live row. Corpus statistics a score depends on (BM25's N, df and avgdl, n-gram rarity) are
    taken over ``readable``, so another tenant's documents never move a caller's scores.
    """

    query: Query
    ops: Any
    catalog: Catalog
    mask: np.ndarray
    chunk_mask: np.ndarray | None
    now: float
    features: dict[str, Any] = field(default_factory=dict)
    readable: np.ndarray | None = None
    sees_all: bool = True

    def visible_chunks(self) -> np.ndarray:
        """bool (n_chunks,): the chunk rows of the memory rows in ``mask`` (made once, when a
        space first searches chunks: a gather over every chunk costs ~2 ms at 1M)."""
        if self.chunk_mask is None:
            cat = self.catalog
            if cat.one_chunk_each and cat.n_chunks == self.mask.size:
                self.chunk_mask = self.mask  # chunk row r is memory row r
            else:
                self.chunk_mask = self.mask[cat.chunk_mem] if cat.n_chunks else np.zeros(0, dtype=bool)
        return self.chunk_mask


class SpaceSettings(BaseModel):
    """A space's own settings (``[pipeline.spaces.<name>]``); a space with settings subclasses this
    next to its code and names it as ``Settings``."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Space:
    """A space of the teleological array.

    Class attributes: ``name`` (e.g. "E1_semantic"), ``recall`` (can search the whole corpus),
    ``needs_embedding`` (its query side comes from the query's EmbeddingSet), ``head`` (the
    embedding head it reads, :mod:`teleo_server.heads`; "" for spaces computed from the text).
    Subclasses override what they support; scores are higher-is-better float32, NaN where the
    space has no signal for a memory.
    """

    name: ClassVar[str] = ""
    recall: ClassVar[bool] = False
    needs_embedding: ClassVar[bool] = False
    description: ClassVar[str] = ""
    head: ClassVar[str] = ""
    Settings: ClassVar[type[SpaceSettings]] = SpaceSettings

    def __init__(self, settings: PipelineSettings, catalog: Catalog) -> None:
        self.settings = settings
        self.catalog = catalog
        self.config: Any = self.Settings.model_validate(settings.space(self.name))
        self.ops: Any = None  # the retriever's host scorers, set by build_spaces
        # where the retriever keeps device rows ("cuda", "emulated"; None: on the host), set by build_spaces
        self.runtime: str | None = None

    @property
    def code(self) -> str:
        return self.name.split("_", 1)[0]

    def query_vector(self, ctx: QueryContext) -> Any | None:
        """The query's vector of this space's head (its first chunk), None when it has none."""
        emb = ctx.query.embedding
        if emb is None or not emb.chunks:
            return None
        return emb.chunks[0].vectors.get(self.head)

    def chunk_vectors(self, chunk_rows: np.ndarray, embeddings: EmbeddingSet):
        """(chunk row, vector) of this space's head for each chunk of a memory being added."""
        for chunk_row, chunk in zip(chunk_rows, embeddings.chunks):
            v = chunk.vectors.get(self.head)
            if v is not None:
                yield int(chunk_row), v

    def attach(self, spaces: dict[str, "Space"]) -> None:
        """Called once every space of the retriever is built: a space that builds on another (the
        graph space smooths the semantic space's vectors) keeps its reference here."""

    def add(self, row: int, chunk_rows: np.ndarray, memory: Memory, embeddings: EmbeddingSet) -> None:
        """Index one memory (memory row ``row``, chunk rows ``chunk_rows`` int64)."""

    def remove(self, rows: np.ndarray, chunk_rows: np.ndarray) -> None:
        """Tombstone memory rows; called just before the catalog forgets them, so their memories
        can still be read (``catalog.memory(row)``). Indexes may drop them early or at compaction."""

    def compact(self, keep_rows: np.ndarray, keep_chunks: np.ndarray) -> None:
        """Keep only these old rows (sorted), renumbered densely."""

    def settle(self) -> None:
        """Fold write buffers into the read-optimised layout (after a bulk load)."""

    def prepare(self, ctx: QueryContext) -> Any | None:
        """Query-side features, or None when this space cannot serve the query."""
        return None

    def search(self, ctx: QueryContext, feats: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` memory rows int64 and scores float32 among ``ctx.mask``, best first."""
        rows = np.flatnonzero(ctx.mask)
        scores = self.score(ctx, feats, rows)
        ids, top = ctx.ops.topk(np.nan_to_num(scores, nan=-np.inf), k, mask=~np.isnan(scores))
        return rows[ids], top

    def score(self, ctx: QueryContext, feats: Any, rows: np.ndarray) -> np.ndarray:
        """Scores float32 (len(rows),) of memory ``rows`` for the query."""
        return np.full(rows.size, np.nan, dtype=np.float32)

    def search_runs_beside(self, ctx: QueryContext) -> bool:
        """Whether :meth:`search` for this caller spends its time outside the interpreter lock (a
        compiled index, a device), so that a stage may run it on a second thread beside others."""
        return False

    def search_then_score(self, ctx: QueryContext, feats: Any, k: int) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        """``search``'s top-``k`` rows, and a function that gives ``score`` of any rows for the same
        query: a space that computes its scores once per query (its postings' reach) reuses them
        for both. A space that overrides ``search`` or ``score`` and this together keeps them one."""
        rows, _ = self.search(ctx, feats, k)
        return rows, lambda given: self.score(ctx, feats, given)

    def similarity(self, a: int, rows: np.ndarray) -> np.ndarray:
        """Similarity in [0, 1] float32 (len(rows),) of memory row ``a`` to each of ``rows``."""
        return np.full(rows.size, np.nan, dtype=np.float32)

    def similarity_among(self, a: int, rows: np.ndarray, readable: np.ndarray) -> np.ndarray:
        """``similarity`` for a caller who may read only ``readable`` rows (bool (n_rows,)): a space
        whose comparison reads memories other than the two compared (the memory graph's
        neighbours) reads only readable ones. By default the two memories' own ``similarity``."""
        return self.similarity(a, rows)

    def unit_score(self, scores: np.ndarray) -> np.ndarray:
        """This space's query scores mapped into [0, 1], comparable across spaces (entry-point
        discovery). Unbounded scores (BM25 and its kin) saturate as s / (1 + s); spaces whose
        scores are cosines override it."""
        s = np.maximum(np.nan_to_num(scores.astype(np.float32), nan=0.0), 0.0)
        return (s / (1.0 + s)).astype(np.float32)

    # ---- helpers for chunk-level spaces ------------------------------------------------------------
    def fold_candidates(self, rows: np.ndarray, chunk_scores_fn: Any) -> tuple[np.ndarray, np.ndarray]:
        """Max over each memory's chunks: (scores float32 (C,), best chunk index int64 (C,))."""
        chunks, counts = expand(self.catalog.chunk_start, self.catalog.chunk_count, rows)
        values = chunk_scores_fn(chunks) if chunks.size else np.zeros(0, dtype=np.float32)
        return segment_max(np.asarray(values, dtype=np.float32), counts)


__all__ = ["IndexName", "NamedBackend", "QueryContext", "Space", "SpaceSettings", "SparseScoredSpace", "lookup"]


class SparseScoredSpace(Space):
    """A space whose query scores every memory at once (an inverted-index SpMV).

    Subclasses provide ``all_scores``; search and scoring of given rows follow from it. A row
    with no overlap with the query (score <= 0) was not found by this space: NaN, not 0.
    """

    index: SparseIndex

    def all_scores(self, ctx: QueryContext, feats: Any) -> np.ndarray:
        raise NotImplementedError

    def settle(self) -> None:
        if self.index.pending:
            self.index.merge()

    def device_scores(self, ctx: QueryContext, feats: Any) -> tuple[str, Any] | None:
        """(runtime, device float32 (n_rows,)): every memory's score left in device memory (0
        where not reached), when this space's index keeps its rows on a device and scores this
        caller there, so that sparse recall blends the spaces on the device and only the top rows
        cross the bus (:mod:`teleo_server.gpu.recall`); None (the default): scored on the host."""
        return None

    def reach(self, ctx: QueryContext, feats: Any) -> int:
        """An upper bound, known before scoring, of the rows :meth:`reached_scores` lists (an
        inverted index's postings of the query terms): a recall stage compares it with the corpus
        to choose between joining the reached rows and :meth:`all_scores` over every row. By
        default every row."""
        return self.catalog.n_rows

    def reached_scores(self, ctx: QueryContext, feats: Any) -> tuple[np.ndarray, np.ndarray]:
        """The memory rows the query reaches with a positive score (ascending, int64) and their
        scores float32; every other row scores 0. A space whose index lists them from the query
        terms' postings overrides this, so that recall costs what the query touches rather than
        one pass per row of the corpus; by default they are read off :meth:`all_scores`."""
        scores = self.all_scores(ctx, feats)
        rows = np.flatnonzero(scores > 0)
        return rows, scores[rows].astype(np.float32)

    def search(self, ctx: QueryContext, feats: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        rows, scores = self.reached_scores(ctx, feats)
        pos, top = ctx.ops.topk(scores, k, mask=ctx.mask[rows])
        return rows[np.asarray(pos, np.int64)], top

    def score(self, ctx: QueryContext, feats: Any, rows: np.ndarray) -> np.ndarray:
        return lookup(*self.reached_scores(ctx, feats), rows)

    def search_then_score(self, ctx: QueryContext, feats: Any, k: int) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        reached, scores = self.reached_scores(ctx, feats)  # the postings are read once for both
        pos, _ = ctx.ops.topk(scores, k, mask=ctx.mask[reached])
        return reached[np.asarray(pos, np.int64)], lambda given: lookup(reached, scores, given)


def lookup(reached: np.ndarray, scores: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """float32 (len(rows),): the score of each of ``rows`` among ``reached`` (ascending) rows and
    their ``scores``, NaN for a row not reached."""
    rows = np.asarray(rows, np.int64)
    out = np.full(rows.size, np.nan, np.float32)
    if not reached.size or not rows.size:
        return out
    bound = int(max(reached[-1], rows.max())) + 1
    if (reached.size + rows.size) * 16 >= bound:  # many against the row range: one scatter, one gather
        full = np.full(bound, np.nan, np.float32)
        full[reached] = scores
        return full[rows]
    pos = np.minimum(np.searchsorted(reached, rows), reached.size - 1)
    hit = reached[pos] == rows
    out[hit] = scores[pos[hit]]
    return out



def IndexName(kind: str) -> Any:  # noqa: N802 - a type, used as one in the settings
    """The type of a space's ``index`` setting: "" (its built-in index) or the name of a registered
    backend of ``kind``; another name is refused with the registered ones (``index.base.registered``)."""
    return Annotated[str, AfterValidator(lambda v: registered(v, kind))]


class NamedBackend:
    """For a space whose ``index`` setting may name a registered backend that serves it beside its
    built-in index: ``backend`` is made on first use under ``_sync`` (the lock a write holds while
    it adds to both), and a named one, whose rows may be device memory, is not pickled: it is made
    again from the built-in rows on first use after the state is read.

    ``named`` is the backend that serves the space (``build_spaces`` sets it): the ``index``
    setting, or, on a retriever that keeps its rows on a device, the device default of the
    space's ``index_kind`` (``index.base.serving``); "" for the built-in index alone."""

    index_kind: ClassVar[str] = ""
    named: str = ""
    backend: Any
    config: Any
    ops: Any
    runtime: str | None
    _sync: threading.Lock

    def _make_named(self, **options: Any) -> Any:
        """A new, empty instance of the backend ``named`` names, on the retriever's runtime."""
        return make_for(self.named, self.ops or compute_ops("numpy"), self.runtime, **options)

    def _serving(self, make: Callable[[], Any]) -> Any:
        """``backend``, made by ``make()`` under the lock when there is none yet."""
        backend = self.backend
        if backend is None:
            with self._sync:
                if self.backend is None:
                    self.backend = make()
                backend = self.backend
        return backend

    def _extend_named(self, rows: int, vectors: Callable[[int], list[Any]]) -> None:
        """Bring the named backend, when one is made, up to ``rows`` rows: ``vectors(n)`` gives the
        rows past its ``n``, in order. Called with ``_sync`` held; when it fails, the backend is
        dropped (made again from the built-in rows on next use) and the error raised."""
        named = self.backend if self.named else None
        if named is None or named.n >= rows:
            return
        try:
            named.add(vectors(named.n))
        except BaseException:
            self.backend = None
            raise

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_sync"]
        if self.named:
            state["backend"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._sync = threading.Lock()
