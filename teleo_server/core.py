"""MemoryCore: the service's operations on domain types, independent of gRPC.

Threading: SQLite work runs on a single store thread and index work (the Retriever) on a single
index thread that, on a GPU backend, owns the CUDA stream. The asyncio loop only awaits them, so a
slow query never blocks the loop and the Retriever needs no locks of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import structlog

from teleo_server.domain import (AccessLevel, ChunkEmbedding, EmbeddingSet, Link, LinkType, Memory, Principal,
                                 content_hash, unreadable_reason)
from teleo_server.heads import CodecSpec, TokenCodes, Vector
from teleo_server.heap import TRIM_AFTER_CHUNKS, release_memory, whole_mappings
from teleo_server.embedding.base import Embedder, TextRole
from teleo_server.errors import (
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    TeleoError,
    Unavailable,
)
from teleo_server.index.precision import stored_form
from teleo_server.index.tokens import TokenCodec
from teleo_server.index.purpose import Goal
from teleo_server.keyed_locks import KeyedLocks
from teleo_server.pipeline.types import (EntryPoint, Filters, Hit, MemoryPurpose, Outcome, Query, Retriever, StageReport,
                                         UpdateHint)
from teleo_server.store.base import MemoryStore, Position
from teleo_server.result_cache import ResultCache
from teleo_server import snapshot
from teleo_server.workers import DEFAULT_NICE, worker_pool

log = structlog.get_logger(__name__)
T = TypeVar("T")

# A fixed sample (never a caller's text) that names people, places, code, a cause and a goal, so
# that warming up reaches every text analyser: ``MemoryCore.warm_up``.
WARM_UP_TEXT = ("Melanie Smith moved the staging cluster from eu-west-1 to us-east-2 in March because the "
                "quota ran out. To cut deploy time, `deploy_canary()` in ci/deploy.py now runs first.")
WARM_UP_QUERY = "Why did Melanie Smith move the staging cluster?"
_WARM_UP_PRINCIPAL = Principal(agent_id="teleo-warm-up", token_id="", read_namespaces=frozenset({"*"}),
                               write_namespaces=frozenset(), access_level=AccessLevel.RESTRICTED,
                               default_namespace="")

_DONE = object()


@dataclass(slots=True)
class _Retrieval:
    """A retrieval waiting for the index thread (``MemoryCore._run_retrievals``): its query, where
    its events go (``deliver``: an event, or the exception that ended it), whether its caller has
    gone, and what to do once it has run (``finished``: always called, once)."""

    query: Query
    deliver: Callable[[Any], None]
    cancelled: threading.Event
    finished: Callable[[], None]

# retrieval usage counters are written together at most this long after the retrieval
USAGE_FLUSH_SECONDS = 0.5
# memories read from the store at a time when a start brings a snapshot's indexes up to date
REPLAY_BATCH = 256
# how often, at most, upkeep counts the journal's changes to see whether a checkpoint is due
CHECKPOINT_LOOK_SECONDS = 5.0
# how long a forked copy may take to write a checkpoint before it is ended (the next round forks
# another): 10 minutes, and 2 ms a memory indexed beyond. It writes about 45 us a memory on an idle
# 2-core CPU, at the lowest priority, so only a copy that hangs or never gets the CPU reaches it.
CHECKPOINT_WRITE_LIMIT_S = 600.0
CHECKPOINT_WRITE_LIMIT_PER_MEMORY_S = 0.002


@dataclass(slots=True)
class StoreOutcome:
    memory: Memory
    duplicate: bool


@dataclass(slots=True)
class QueryVectors:
    """A caller's precomputed query: head name -> vector, each already checked against its head."""

    heads: dict[str, Vector]
    model_version: str


@dataclass(slots=True)
class RetrieveDone:
    """Last event of a retrieval, after the pipeline's Outcome."""

    outcome: Outcome
    embed_ms: float
    total_ms: float
    returned: int


class Ticket:
    """One admitted retrieval: a compute slot until its results are computed, and a stream slot
    until the stream ends. Both releases are idempotent."""

    __slots__ = ("_admission", "token_id", "_computing", "_open")

    def __init__(self, admission: "Admission", token_id: str) -> None:
        self._admission, self.token_id = admission, token_id
        self._computing = self._open = True

    def computed(self) -> None:
        if self._computing:
            self._computing = False
            self._admission.computing -= 1

    def close(self) -> None:
        self.computed()
        if self._open:
            self._open = False
            a = self._admission
            a.open -= 1
            left = a.per_token[self.token_id] - 1
            if left:
                a.per_token[self.token_id] = left
            else:
                del a.per_token[self.token_id]


# How long a client refused for saturation is told to wait before retrying (a retrieval takes tens
# of milliseconds to a few hundred under load).
SATURATED_RETRY_S = 0.2


class Admission:
    """Decides, before any work is spent (embedding included), whether a retrieval may start.

    Three bounds: retrievals being computed (the pipeline's queue), streams open in all, and streams
    open per token. A stream whose results are computed and that only waits for its client to read
    holds no compute slot, so clients that stop reading cannot starve everyone else; the write-stall
    timeout then ends their streams. Used on the event loop only, so it needs no lock.
    """

    def __init__(self, max_computing: int = 64, max_open: int = 1024, max_per_token: int = 32) -> None:
        self.max_computing, self.max_open, self.max_per_token = max_computing, max_open, max_per_token
        self.computing = 0
        self.open = 0
        self.per_token: dict[str, int] = {}

    def saturated(self) -> str | None:
        """Why no retrieval may start now, whoever asks (None when one may)."""
        if self.computing >= self.max_computing:
            return f"{self.computing} retrievals are being computed, the most this server runs at once; retry shortly"
        if self.open >= self.max_open:
            return f"{self.open} retrieve streams are open, the most this server holds; retry shortly"
        return None

    def admit(self, principal: Principal) -> Ticket:
        reason = self.saturated()
        if reason is not None:
            raise ResourceExhausted(reason, retry_after=SATURATED_RETRY_S)
        mine = self.per_token.get(principal.token_id, 0)
        if mine >= self.max_per_token:
            raise ResourceExhausted(
                f"this token has {mine} retrieve streams open, its limit; read or cancel them before opening more"
            )
        self.computing += 1
        self.open += 1
        self.per_token[principal.token_id] = mine + 1
        return Ticket(self, principal.token_id)


@dataclass(frozen=True, slots=True)
class SnapshotPlan:
    """Where the index snapshot lives (``teleo_server/snapshot.py``) and what the indexes were made
    by (code, settings, backend; the core adds the embedding model and the token codecs). The
    database a snapshot was made from, and how far its change journal had come, are in the
    snapshot itself."""

    path: Path
    parts: dict[str, Any]
    plugins: tuple[str, ...] = ()  # modules whose classes a snapshot may hold beside Teleo's


@dataclass(slots=True)
class _SnapshotJob:
    """A snapshot to write: the indexes' state as it stood at ``position`` of the change journal,
    and, while a forked copy writes it, that copy (``writer``)."""

    path: Path
    state: dict[str, Any]
    print_: str
    shared: dict[str, Any]
    info: dict[str, Any]
    position: Position
    reason: str
    kind: str  # "checkpoint" (while serving) or "stop"
    writer: snapshot.ChildWriter | None = None


class MemoryCore:
    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        retriever: Retriever,
        admission: Admission | None = None,
        worker_nice: int = DEFAULT_NICE,
        snapshot_plan: SnapshotPlan | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.retriever = retriever
        self._store_ex = ThreadPoolExecutor(1, thread_name_prefix="teleo-store")
        self._index_ex = worker_pool("teleo-index", worker_nice)
        # retrievals waiting for the index thread, taken from it in groups (_run_retrievals)
        self._waiting: list[_Retrieval] = []
        self._waiting_lock = threading.Lock()
        self._taking = False  # a _run_retrievals job is queued on the index thread
        self.retrieval_groups: Counter[int] = Counter()  # group size -> groups run (read by /metrics)
        self.admission = admission or Admission()
        self.embedder_ready = False
        self._background: set[asyncio.Task] = set()
        # ids returned by retrievals whose usage counters are not written yet (``_count_retrieved``)
        self._retrieved: list[str] = []
        self._usage_flush: asyncio.Future | None = None
        self._flush_now: asyncio.Event | None = None  # set to write them at once (close)
        # writes that read a memory and write it back, and its index entry after it, one at a time
        # per memory (keyed_locks.py)
        self.locks = KeyedLocks()
        self.results = ResultCache()  # retrievals' answers, per caller, for profiles that cache them
        # head -> the codec its space keeps it in: the database stores those heads as the same codes
        codecs = getattr(retriever, "token_codecs", None)  # a retriever may keep no codes
        self.codecs: dict[str, TokenCodec] = dict(codecs()) if codecs is not None else {}
        self._recode: set[str] = set()  # memories whose stored codes another codec made
        # memories stored whose indexing then failed (a write, an update, a re-embedding): indexed
        # again from the store by the next upkeep round (_index_again); changed on the index thread
        self._unindexed: set[str] = set()
        self._retag: set[str] = set()  # heads whose stored codes the running codec took under another tag
        self.snapshot_plan = snapshot_plan  # None: the indexes are rebuilt at every start
        self.loaded_from = ""  # "snapshot" or "store": how the last load_indexes filled the indexes
        self.load_seconds = 0.0  # and how long that took
        self.load_reindexed = 0  # memories a start from the snapshot indexed again from the change journal
        self._index_suspect = False  # an index call failed unexpectedly (see _on_index)
        # the change journal's number the indexes were loaded up to: a change listed after it that
        # was not this server's own (another program's) is indexed before a snapshot says the
        # indexes hold it (_catch_up)
        self._journal_start: int | None = None
        self._snapshot_change: int | None = None  # the change the snapshot on disk holds the database up to
        self._pending_writes = 0  # writes between their store call and their index call (_writing)
        self._last_checkpoint = self._checkpoint_looked = time.monotonic()
        self._checkpoint_writer: snapshot.ChildWriter | None = None  # the copy writing a checkpoint, while it does
        self._fork_unsafe = snapshot.fork_unsafe()  # why checkpoints are written on the index thread instead
        # (kind, outcome) -> snapshots begun in this run: "checkpoint" or "stop"; "written", "failed"
        # or "stopped" (a copy a stop ended); read by /metrics
        self.snapshots: Counter[tuple[str, str]] = Counter()
        self.snapshot_write_seconds: dict[str, float] = {}  # kind -> how long the last one written took
        self.checkpoint_hold_seconds = 0.0  # how long the last checkpoint held the index thread

    @property
    def in_flight(self) -> int:
        """Retrieve streams open now."""
        return self.admission.open

    async def probe_index(self, timeout: float) -> str | None:
        """None when the index thread answers within ``timeout`` seconds, else why not."""
        try:
            await asyncio.wait_for(self._on_index(len, self.retriever), timeout)
        except asyncio.TimeoutError:
            return f"the index did not answer within {timeout:g} s"
        return None

    def admit(self, principal: Principal) -> Ticket:
        """Reserve a retrieval's slots, or raise ResourceExhausted at once."""
        return self.admission.admit(principal)

    async def _locked(self, ids: list[str], write: Callable[[], Awaitable[T]]) -> T:
        """``write()`` while holding the locks of the memories ``ids`` (``self.locks``); run it
        under ``_finish``, so that the locks are held until its index update is done."""
        async with self.locks.hold(ids):
            return await write()

    def _finish(self, coro: Any) -> asyncio.Future:
        """Run ``coro`` to completion even if the awaiting call is cancelled (deadline, disconnect):
        once a commit may have happened, its index update must follow."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return asyncio.shield(task)

    # -- plumbing ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Around a write from its store call to its index call (on the event loop): while any is
        in flight, a checkpoint cannot tell which committed changes its indexes hold yet."""
        self._pending_writes += 1
        try:
            yield
        finally:
            self._pending_writes -= 1

    @property
    def unindexed(self) -> int:
        """Stored memories whose indexing failed and that wait to be indexed again (a metric)."""
        return len(self._unindexed)

    @contextlib.contextmanager
    def _indexing(self, ids: list[str]) -> Iterator[None]:
        """Around an index call (on the index thread) that indexes or removes the stored state of
        memories ``ids``: when it fails they are kept for :meth:`_index_again`; when it succeeds,
        a retry pending for them is not needed any more (what they are now is in the indexes)."""
        try:
            yield
        except BaseException as exc:
            self._unindexed.update(ids)
            try:  # what the failure left undone is listed: the indexes are not suspect for it
                exc.teleo_listed = True  # type: ignore[attr-defined]
            except AttributeError:
                pass
            raise
        self._unindexed.difference_update(ids)

    async def _on_store(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._store_ex, fn, *args)

    async def _on_index(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._index_ex, fn, *args)
        except TeleoError:
            raise  # a caller's mistake or a refusal: nothing was left half done
        except Exception as exc:
            # an index call failed unexpectedly and may have left the indexes short of the store:
            # no snapshot is written at stop, so the next start rebuilds them from the store; unless
            # the call listed what it left undone (_indexing): those memories are indexed again
            # (_index_again), and no snapshot is written while any waits
            if not getattr(exc, "teleo_listed", False):
                self._index_suspect = True
            raise

    async def stored_forms(self, sets: list[EmbeddingSet]) -> list[EmbeddingSet]:
        """Each set as it is stored and indexed (the heads kept as codes in those codes, sentence
        vectors and sparse weights as float16), made off the event loop: pooling a long text's
        tokens takes milliseconds a chunk, which would hold up every other call."""
        if not sets:
            return []
        return await asyncio.get_running_loop().run_in_executor(None, lambda: [stored_form(e, self.codecs) for e in sets])

    def token_specs(self) -> dict[str, CodecSpec]:
        """Head -> the codec whose codes this server stores and takes (Import) for it as they are."""
        return {head: c.spec for head, c in self.codecs.items() if not c.identity}

    def _indexable(self, emb: EmbeddingSet, taken: set[str] | None = None) -> tuple[EmbeddingSet, bool]:
        """``emb`` without the token codes the index cannot read (another codec made them: they are
        never decoded as if they were its own), and whether a head the index codes lost some (the
        memory is then re-derived from its text by ``reembed_stale``). Codes another codec made
        that are exactly this one's (unpooled rows of a chunk this codec keeps whole,
        ``CodecSpec.takes``) are taken as they are, and their heads added to ``taken``."""
        foreign: set[tuple[int, str]] = set()
        same: dict[tuple[int, str], TokenCodes] = {}
        for i, ch in enumerate(emb.chunks):
            for head, v in ch.vectors.items():
                if not isinstance(v, TokenCodes):
                    continue
                codec = self.codecs.get(head)
                if codec is None or not codec.spec.takes(v.spec, v.rows):
                    foreign.add((i, head))
                elif v.spec != codec.spec:
                    same[(i, head)] = TokenCodes(v.data, codec.spec)
                    if taken is not None:
                        taken.add(head)
        if not foreign and not same:
            return emb, False
        chunks = [ChunkEmbedding({h: same.get((i, h), v) for h, v in ch.vectors.items() if (i, h) not in foreign},
                                 ch.start, ch.end) for i, ch in enumerate(emb.chunks)]
        return EmbeddingSet(emb.model_version, chunks), any(head in self.codecs for _, head in foreign)

    async def load_indexes(self) -> int:
        """Rebuild the in-memory indexes from the store; returns how many memories were indexed.

        Token codes of the running codec go into the index as they are (no decoding); float rows
        (written before codes were stored) are encoded as they go in. A memory whose codes another
        codec made (the configuration changed) is indexed without them and re-derived from its
        text by ``reembed_stale``, which rewrites its rows."""
        try:
            version: str | None = self.embedder.model_version
        except Unavailable:
            # A remote embedder that is down has not told us its version yet: index the first
            # version found (never two at once); reembed_stale() reconciles once it is back.
            version = None
        if self.snapshot_plan is not None and self._fork_unsafe is not None:
            log.info("index.checkpoints_in_process", reason=self._fork_unsafe,
                     detail="retrievals wait while a checkpoint is written")

        t0 = time.perf_counter()
        if await self._on_index(self._read_snapshot, version):
            self.loaded_from, self.load_seconds = "snapshot", time.perf_counter() - t0
            return len(self.retriever)

        def load() -> tuple[int, int]:
            nonlocal version
            # every change the journal lists up to here is in what the scan reads: no snapshot
            # needs them (one not read is gone, or was made before them)
            position = self._journal_position()
            head = None if position is None else position.change
            with whole_mappings():  # buffers freed during the load go back to the system at once
                loaded = stale = 0
                for memory, emb in self.store.iter_memories():
                    if version is None:
                        version = emb.model_version
                    if emb.model_version != version:
                        stale += 1  # other model's vectors must never be mixed in; re-embedded later
                        continue
                    emb, recode = self._indexable(emb, self._retag)
                    if recode:
                        self._recode.add(memory.id)
                    self.retriever.add(memory, emb)
                    loaded += 1
                self.retriever.settle()
                release_memory()  # the load's temporaries (decoded vectors, merge buffers) are gone
            if head is not None:
                self._prune_journal(head)
            self._journal_start = head
            return loaded, stale

        loaded, stale = await self._on_index(load)
        self.loaded_from, self.load_seconds = "store", time.perf_counter() - t0
        settings = getattr(self.retriever, "settings", None)  # a retriever may have no text analyser
        analyzer = settings.analyzer.build().version if settings is not None else None
        log.info("index.loaded", memories=loaded, stale=stale, model_version=version, analyzer=analyzer)
        if self._recode:
            log.warning("index.codec_changed", memories=len(self._recode),
                        codecs={h: c.spec.tag for h, c in self.codecs.items()},
                        detail="stored token codes of another codec are re-derived from the memories' text")
        await self._retag_taken()
        return loaded

    def _snapshot_print(self) -> str:
        assert self.snapshot_plan is not None
        return snapshot.fingerprint({**self.snapshot_plan.parts, "codecs": {h: c.spec.tag for h, c in self.codecs.items()}})

    def _read_snapshot(self, version: str | None) -> bool:
        """Fill the indexes from the snapshot when it was made by this code and these settings
        from this database, then index again every memory the database's change journal says
        changed since (written after the snapshot by this server before a crash, or by another
        program). The file stays: until a checkpoint or the next clean stop replaces it, it and
        the journal are what a start after a crash reads. One that cannot be used is deleted,
        before anything is served."""
        plan = self.snapshot_plan
        restore = getattr(self.retriever, "restore_state", None)
        dump = getattr(self.retriever, "snapshot_state", None)
        if plan is None or restore is None or dump is None or not plan.path.exists():
            return False
        t0 = time.perf_counter()
        usable = False
        try:
            meta = snapshot.trailer(plan.path)
            made_with = meta.get("model_version")
            if version is not None and made_with != version:
                raise snapshot.Unusable(f"made with embedding model {made_with!r}, not {version!r}")
            since, head = self._journal_since(meta.get("database"))
            changes = self.store.changes_since(since)
            empty, shared = dump()  # the running objects the snapshot names; the empty indexes
            with whole_mappings():
                state = snapshot.read(plan.path, self._snapshot_print(), shared, plan.plugins, meta)
            restore(state)
            usable = True
        except (snapshot.Unusable, ValueError, TeleoError) as exc:
            log.warning("index.snapshot_unused", path=str(plan.path), reason=str(exc))
            return False
        finally:
            if not usable:
                plan.path.unlink(missing_ok=True)
        try:
            indexed, counted = self._replay(changes, version or made_with)
        except Exception as exc:  # noqa: BLE001 - the start rebuilds from the store instead
            log.error("index.snapshot_replay_failed", path=str(plan.path), error=f"{type(exc).__name__}: {exc}")
            restore(empty)
            plan.path.unlink(missing_ok=True)
            return False
        self._prune_journal(since)
        self._journal_start, self._snapshot_change, self.load_reindexed = head, since, indexed
        release_memory()
        log.info("index.loaded", memories=len(self.retriever), source="snapshot", seconds=round(time.perf_counter() - t0, 3),
                 written_at=meta.get("written_at"), reindexed=indexed, counters=counted)
        return True

    def _journal_since(self, made_from: Any) -> tuple[int, int]:
        """The change a snapshot's indexes hold the database up to, if the snapshot was made from
        this database and its journal still lists every change after it (Unusable otherwise), and
        the journal's latest change now."""
        position = self.store.position()
        if not isinstance(made_from, dict) or made_from.get("id") != position.database_id:
            raise snapshot.Unusable("made from another database")
        since = made_from.get("change")
        if not isinstance(since, int) or since > position.change:
            raise snapshot.Unusable("the database is older than the snapshot (a copy put back?)")
        if since < position.pruned:
            raise snapshot.Unusable("the database no longer lists every change since the snapshot")
        return since, position.change

    def _replay(self, changes: list[tuple[str, bool]], version: str | None) -> tuple[int, int]:
        """Bring restored indexes up to date with the store: each memory changed since is taken
        out and, if it is still stored and servable, indexed again as a rebuild would; one whose
        counters alone changed gets them copied. Returns (memories re-indexed or removed, counted)."""
        full = [memory_id for memory_id, counters in changes if not counters]
        counted = [memory_id for memory_id, counters in changes if counters]
        for start in range(0, len(full), REPLAY_BATCH):
            batch = full[start:start + REPLAY_BATCH]
            self._index_stored(batch, self.store.indexable(batch), version)
        for start in range(0, len(counted), REPLAY_BATCH):
            for memory in self.store.get(counted[start:start + REPLAY_BATCH]).values():
                self.retriever.update(memory)
        if full:
            self.retriever.settle()
        return len(full), len(counted)

    def _index_stored(self, ids: list[str], found: list[tuple[Memory, EmbeddingSet]], version: str | None,
                      failed: Callable[[Memory, Exception], None] | None = None) -> list[Memory]:
        """Take memories ``ids`` out of the indexes and index those of them the store holds
        (``found``, from ``store.indexable``) as a rebuild would: vectors of another model than
        ``version`` are left for ``reembed_stale``, codes another codec made are re-derived later.
        A memory whose indexing fails is passed to ``failed`` and the others go on; without it the
        error is raised. Returns the memories indexed."""
        self.retriever.remove(ids)
        done = []
        for memory, emb in found:
            if version is not None and emb.model_version != version:
                continue  # another model's vectors: reembed_stale embeds it again
            emb, recode = self._indexable(emb, self._retag)
            if recode:
                self._recode.add(memory.id)
            try:
                self.retriever.add(memory, emb)
            except Exception as exc:
                if failed is None:
                    raise
                failed(memory, exc)
                continue
            done.append(memory)
        return done

    def _catch_up(self, version: str | None) -> bool:
        """Before a snapshot says the indexes hold the database up to now: index the memories the
        journal lists as changed since the indexes were loaded by someone other than this server
        (another program; it indexed its own writes as it made them). False when the journal
        could not be read; a replay that fails marks the indexes suspect (no snapshot then)."""
        if self._journal_start is None:
            return True
        try:
            foreign = self.store.changes_since(self._journal_start, others_only=True)
        except TeleoError as exc:
            log.warning("store.journal_unreadable", error=str(exc))
            return False
        if not foreign:
            return True
        try:
            indexed, counted = self._replay(foreign, version)
        except Exception as exc:  # noqa: BLE001 - the indexes may be short of the database now: no snapshot
            self._index_suspect = True
            log.error("index.catch_up_failed", error=f"{type(exc).__name__}: {exc}")
            return True
        log.info("index.caught_up", reindexed=indexed, counters=counted,
                 detail="memories another program changed while this server ran")
        return True

    def _save_snapshot(self, version: str | None, position: Position | None, reason: str) -> bool:
        """With every write indexed up to ``position`` (the journal as it stood; None when it could
        not be read): catch up with other programs' changes, write the snapshot here, and prune
        the journal up to it. Returns whether it was written."""
        job = self._snapshot_job(version, position, "stop", reason)
        return job is not None and self._write_job(job)

    def _write_job(self, job: _SnapshotJob) -> bool:
        """Write ``job``'s snapshot here and prune the journal up to it; whether it was written. One
        not written costs the next start the re-indexing (or rebuild) it was meant to save, and
        never fails the stop or the upkeep that asked for it."""
        t0 = time.perf_counter()
        try:
            size = snapshot.write(job.path, job.state, job.print_, job.shared, job.info)
        except Exception as exc:  # noqa: BLE001 - see above
            self._snapshot_failed(job.kind, job.path, f"{type(exc).__name__}: {exc}")
            return False
        self._snapshot_saved(job, size, time.perf_counter() - t0)
        return True

    def _snapshot_job(self, version: str | None, position: Position | None, kind: str,
                      reason: str) -> _SnapshotJob | None:
        """On the index thread (or once it is shut down), with every write indexed up to
        ``position``: catch up with other programs' changes, and gather what a snapshot holds;
        None (logged) when none may be written now. When none is, the one the start read (if any)
        stays, with every change since in the journal."""
        if position is not None and not self._catch_up(version):
            position = None
        plan = self.snapshot_plan
        dump = getattr(self.retriever, "snapshot_state", None)
        if plan is None or dump is None:
            return None
        why = None
        if not self.loaded_from:
            why = "the indexes were never loaded"
        elif self._index_suspect:
            why = "an index call failed during this run"
        elif self._unindexed:
            why = "writes whose indexing failed are not indexed yet"
        elif version is None:
            why = "the embedding model's version is unknown"
        elif self._recode:
            why = "memories wait to have their token codes re-derived"
        elif position is None:
            why = "the database's change journal could not be read"
        if why is not None:
            log.info("index.snapshot_skipped", reason=why)
            return None
        assert position is not None
        try:
            state, shared = dump()
        except Exception as exc:  # noqa: BLE001 - as a failed write: the next start reads the one before, or rebuilds
            self._snapshot_failed(kind, plan.path, f"{type(exc).__name__}: {exc}")
            return None
        info = {"model_version": version, "memories": len(self.retriever),
                "database": {"id": position.database_id, "change": position.change}}
        return _SnapshotJob(plan.path, state, self._snapshot_print(), shared, info, position, reason, kind)

    def _snapshot_failed(self, kind: str, path: Path, error: str) -> None:
        self.snapshots[kind, "failed"] += 1
        log.warning("index.snapshot_failed", path=str(path), error=error)

    def _snapshot_saved(self, job: _SnapshotJob, size: int, seconds: float) -> None:
        """Once ``job``'s snapshot is on disk: log it, and forget the journal's changes it holds."""
        self.snapshots[job.kind, "written"] += 1
        self.snapshot_write_seconds[job.kind] = seconds
        log.info("index.snapshot_written", path=str(job.path), memories=job.info["memories"], bytes=size,
                 seconds=round(seconds, 3), change=job.position.change, reason=job.reason)
        self._prune_journal(job.position.change)
        self._journal_start = self._snapshot_change = job.position.change

    async def checkpoint(self, share: float, min_changes: int, seconds: float, fork: bool = True) -> bool:
        """While serving: write a new snapshot once the journal lists more memories as changed
        since the one on disk than ``share`` of those indexed (at least ``min_changes``), at most
        every ``seconds`` (``config.CheckpointSettings``). With ``fork``, a forked copy of the
        process writes it (``snapshot.write_in_child``): the index thread is held only while the
        copy is made, and this waits for it off the event loop; without, the index thread writes
        it. Returns whether one was written."""
        now = time.monotonic()
        if (self.snapshot_plan is None or share <= 0 or not self.loaded_from or self._index_suspect or self._recode
                or self._unindexed or self._pending_writes or self._checkpoint_writer is not None or now - self._last_checkpoint < seconds
                or now - self._checkpoint_looked < min(seconds, CHECKPOINT_LOOK_SECONDS)):
            return False
        since = self._snapshot_change if self._snapshot_change is not None else self._journal_start
        if since is None:
            return False
        self._checkpoint_looked = now  # (counting the journal's changes is a query: not every round)
        try:
            changed = await self._on_store(self.store.changed_since, since)
            version = self.embedder.model_version
        except (TeleoError, Unavailable):
            return False
        if changed < max(min_changes, share * len(self.retriever)):
            return False
        job = await self._on_index(self._checkpoint, version, changed, fork)
        if job is None:
            return False
        if job.writer is None:  # written on the index thread (a job is returned only once written)
            return True
        limit = CHECKPOINT_WRITE_LIMIT_S + CHECKPOINT_WRITE_LIMIT_PER_MEMORY_S * int(job.info["memories"])
        try:
            size, took = await asyncio.wait_for(asyncio.to_thread(job.writer.wait), limit)
            await self._on_store(self._snapshot_saved, job, size, took)
        except asyncio.TimeoutError:
            job.writer.stop()
            self._snapshot_failed(job.kind, job.path, f"the writing process took more than {limit:.0f} s and was "
                                                      "ended; the next round tries again")
            return False
        except snapshot.NotWritten as exc:
            if job.writer.stopped:
                self.snapshots[job.kind, "stopped"] += 1
                log.info("index.checkpoint_stopped", detail="the server stops, and writes its own snapshot")
            else:
                self._snapshot_failed(job.kind, job.path, str(exc))
            return False
        except asyncio.CancelledError:  # the server stops: its own snapshot at close replaces this one
            job.writer.stop()
            raise
        finally:
            self._checkpoint_writer = None
        return True

    def _checkpoint(self, version: str, changed: int, fork: bool) -> _SnapshotJob | None:
        """The checkpoint's start, on the index thread: no index call runs beside it, and a write
        whose store call has committed waits behind it for its index call. Forks the copy that
        writes the snapshot, or writes it here when ``fork`` is off or a copy may not be forked
        (``snapshot.fork_unsafe``)."""
        position = self._journal_position()
        if position is None or self._pending_writes:
            return None  # a write is between its store call and its index call: the next round
        self._last_checkpoint = time.monotonic()  # written or failed, not again for a while
        t0 = time.perf_counter()
        try:
            return self._begin_checkpoint(version, position, f"checkpoint: {changed} memories changed", fork)
        finally:
            self.checkpoint_hold_seconds = time.perf_counter() - t0

    def _begin_checkpoint(self, version: str, position: Position, reason: str, fork: bool) -> _SnapshotJob | None:
        """The job, once forked or written here; None when none is (skipped or failed, logged)."""
        job = self._snapshot_job(version, position, "checkpoint", reason)
        if job is None:
            return None
        if not fork or self._fork_unsafe is not None:
            return job if self._write_job(job) else None
        t0 = time.perf_counter()
        try:
            job.writer = self._checkpoint_writer = snapshot.write_in_child(job.path, job.state, job.print_,
                                                                            job.shared, job.info)
        except OSError as exc:  # no process could be made (strict memory overcommit, a process limit)
            log.warning("index.checkpoint_not_forked", error=str(exc), detail="written on the index thread instead")
            return job if self._write_job(job) else None
        log.info("index.checkpoint_forked", pid=job.writer.pid, seconds=round(time.perf_counter() - t0, 4),
                 change=position.change)
        return job

    def _journal_position(self) -> Position | None:
        try:
            return self.store.position()
        except TeleoError as exc:
            log.warning("store.journal_unreadable", error=str(exc))
            return None

    def _prune_journal(self, through: int) -> None:
        """Forget the changes up to ``through``. Best effort: a journal that keeps them (a full
        disk, a lock) only costs a later start some re-indexing."""
        try:
            self.store.prune_changes(through)
        except TeleoError as exc:
            log.warning("store.journal_not_pruned", error=str(exc))

    async def _retag_taken(self) -> None:
        """Rename the stored token rows the running codec took as they are (unpooled codes of
        chunks it keeps whole), so that later starts read them as its own. Best effort: a store
        that cannot be written now (a full disk, a lock) is retried at the next start."""
        for head in sorted(self._retag):
            spec = self.codecs[head].spec
            old = spec.unpooled  # a codec takes another's codes only when it pools (CodecSpec.takes)
            assert old is not None
            try:
                renamed = await self._on_store(self.store.retag_tokens, head, old.tag, spec.tag, spec.keep)
            except TeleoError as exc:
                log.warning("index.retag_failed", head=head, error=str(exc))
                continue
            log.info("index.retagged", head=head, rows=renamed, old=old.tag, new=spec.tag)
        self._retag.clear()

    async def reembed_stale(self) -> int:
        """Re-embed memories written by another model version, and those whose token codes another
        codec made (``load_indexes``), then store and index them in the running form."""
        version = self.embedder.model_version
        stale = await self._on_store(self.store.stale_ids, version)
        recode = sorted(self._recode.difference(stale))
        ids, recoding = stale + recode, set(recode)
        done = recoded = 0
        for start in range(0, len(ids), 32):
            batch = await self._on_store(self.store.get, ids[start : start + 32])
            memories = list(batch.values())
            sets = await self.stored_forms(await self.embedder.embed([m.content for m in memories], TextRole.DOCUMENT))
            for memory, emb in zip(memories, sets, strict=True):
                # an Update may have changed the text since it was read: the vectors are then left
                # out (the Update embedded its own text)
                if await self._finish(self._locked([memory.id], lambda m=memory, e=emb: self._replace(m, e))):
                    done += 1
                    recoded += memory.id in recoding
            self._recode.difference_update(ids[start : start + 32])  # done, or gone from the store
        if stale:
            log.info("index.reembedded", memories=done - recoded, model_version=version)
        if recode:
            log.info("index.recoded", memories=recoded, codecs={h: c.spec.tag for h, c in self.codecs.items()})
        return done

    async def _replace(self, memory: Memory, emb: EmbeddingSet) -> bool:
        with self._writing():
            updated = await self._on_store(self.store.replace_embeddings, memory.id, emb, memory.content_hash)
            if updated is not None:
                await self._on_index(self._reindex, updated, emb)
        return updated is not None

    def _reindex(self, memory: Memory, emb: EmbeddingSet) -> None:
        with self._indexing([memory.id]):
            self.retriever.remove([memory.id])
            self.retriever.add(memory, emb)
        self.results.written([(memory.namespace, memory.access_level)])

    def _partitions(self, ids: list[str]) -> set[tuple[str, AccessLevel]]:
        """(namespace, level) of the indexed memories ``ids`` (run where index calls run)."""
        cat = getattr(self.retriever, "catalog", None)
        if cat is None:
            return set()
        out = set()
        for i in ids:
            row = cat.row_of.get(i)
            if row is not None:
                m = cat.memory(row)
                out.add((m.namespace, m.access_level))
        return out

    def _remove(self, ids: list[str]) -> None:
        """Remove from the indexes, and drop cached results that could see them."""
        touched = self._partitions(ids)
        with self._indexing(ids):
            self.retriever.remove(ids)
        self.results.written(touched)

    # -- writes -----------------------------------------------------------------------------

    async def store_many(self, principal: Principal, memories: list[Memory],
                         given: dict[str, EmbeddingSet] | None = None) -> list[StoreOutcome]:
        """Embed and durably store; duplicates write nothing.

        A duplicate is a memory with the same content in the same namespace at the same access
        level, and only one the writer may read: a duplicate answer (and the id it returns) must
        never reveal a memory the caller could not read, so a writer without read access to that
        scope always gets its own copy stored.

        ``given``: memory id -> its vectors, already checked to be of this server's model version
        (an import); those memories are not embedded again.

        Raises Unavailable when the embedder is down: a memory is never stored half-embedded.
        """
        given = given or {}
        if not memories:
            return []

        def dedup(m: Memory) -> bool:
            return principal.can_read(m.namespace, m.access_level)

        def key(m: Memory) -> tuple[str, int, str] | str:
            """What a memory is a duplicate by: its content key, or (no de-duplication) itself."""
            return (m.namespace, int(m.access_level), m.content_hash) if dedup(m) else m.id

        known = await self._on_store(self._find_duplicates, [m for m in memories if dedup(m)])
        fresh = [m for m in memories if m.id not in known]
        unique: dict[tuple[str, int, str] | str, Memory] = {}
        for m in fresh:
            unique.setdefault(key(m), m)
        to_embed = list(unique.values())
        missing = [m for m in to_embed if m.id not in given]
        fresh_sets = await self.embedder.embed([m.content for m in missing], TextRole.DOCUMENT) if missing else []
        if len(fresh_sets) != len(missing):
            raise Unavailable("embedder returned a partial result; nothing was stored")
        embedded = dict(zip([m.id for m in missing], fresh_sets, strict=True))
        sets = await self.stored_forms([given[m.id] if m.id in given else embedded[m.id] for m in to_embed])
        stored = await self._finish(self._commit(list(zip(to_embed, sets, strict=True)), dedup))
        by_key = {key(m): stored_dup for m, stored_dup in zip(to_embed, stored, strict=True)}
        out = []
        for m in memories:
            if m.id in known:
                out.append(StoreOutcome(known[m.id], True))
                continue
            winner, dup = by_key[key(m)]
            out.append(StoreOutcome(winner, dup or winner.id != m.id))
        return out

    async def update_hints(self, principal: Principal, memory_id: str) -> list[UpdateHint]:
        """Earlier memories ``principal`` may read that the stored memory ``memory_id`` probably
        updates (``pipeline/updates.py``). The memory is stored already: a failure here is logged
        and gives no hints, never a failed Store."""
        try:
            return await self._on_index(self.retriever.update_hints, memory_id, principal)
        except Exception as exc:
            log.warning("store.update_hints_failed", error=str(exc)[:200])
            return []

    async def link_errors(self, principal: Principal, memories: list[Memory],
                          kept: frozenset[tuple[str, LinkType]] = frozenset(),
                          field_of: Callable[[int, Link], str] | None = None) -> dict[str, InvalidArgument]:
        """memory id -> why one of its links is refused: a link must point at an existing memory the
        caller may read, in the same namespace (unknown and unreadable targets answer alike).
        Links in ``kept`` (target, type), which an updated memory had already, are not checked
        again: a memory whose link target was deleted since can still be updated. ``field_of``
        names the request field a refused link came from (by its place among the memory's links);
        by default ``memory.links[i].target_id``."""
        targets = list({lk.target_id for m in memories for lk in m.links if (lk.target_id, lk.type) not in kept})
        if not targets:
            return {}
        access = await self._on_store(self.store.access_of, targets)
        errors: dict[str, InvalidArgument] = {}
        for m in memories:
            for i, lk in enumerate(m.links):
                if (lk.target_id, lk.type) in kept:
                    continue
                found = access.get(lk.target_id)
                if found is None or not principal.can_read(*found) or found[0] != m.namespace:
                    errors[m.id] = InvalidArgument(
                        f"no memory with id {lk.target_id[:128]!r} in namespace {m.namespace!r}; links stay within "
                        "a namespace and point at stored memories",
                        field=field_of(i, lk) if field_of is not None else f"memory.links[{i}].target_id")
                    break
        return errors

    async def _commit(self, items: list[tuple[Memory, EmbeddingSet]], dedup: Callable[[Memory], bool]) -> list[tuple[Memory, bool]]:
        with self._writing():
            stored = await self._on_store(self.store.put_many, items, dedup)
            await self._on_index(self._index_new, stored, [e for _, e in items])
        return stored

    def _find_duplicates(self, memories: list[Memory]) -> dict[str, Memory]:
        """new memory id -> the stored memory with the same content, namespace and access level."""
        existing = {m.id: self.store.find_duplicate(m.namespace, m.access_level, m.content_hash) for m in memories}
        stored = self.store.get([i for i in existing.values() if i is not None])
        return {new: stored[old] for new, old in existing.items() if old is not None and old in stored}

    def _index_new(self, stored: list[tuple[Memory, bool]], sets: list[EmbeddingSet]) -> None:
        with self._indexing([memory.id for memory, dup in stored if not dup]):
            for (memory, dup), emb in zip(stored, sets, strict=True):
                if not dup:
                    self.retriever.add(memory, emb)
        self.results.written([(m.namespace, m.access_level) for m, dup in stored if not dup])
        if sum(len(e.chunks) for e in sets) > TRIM_AFTER_CHUNKS:
            release_memory()  # encoding a long text's vectors left large temporaries on this thread

    async def get(self, principal: Principal, ids: list[str]) -> list[Memory]:
        found = await self._on_store(self.store.get, ids)
        missing = [i for i in ids if i not in found or not principal.can_read(found[i].namespace, found[i].access_level)]
        if missing:
            # Unreadable ids look exactly like unknown ones, so ids do not leak across tenants.
            raise NotFound(f"no memory with id(s) {', '.join(missing[:10])}", field="ids")
        return [found[i] for i in ids]

    async def delete(self, principal: Principal, ids: list[str]) -> int:
        # by the rows' scope, not by get(): a quarantined memory can still be deleted by its owner
        access = await self._on_store(self.store.access_of, ids)
        missing = [i for i in ids if i not in access or not principal.can_read(*access[i])]
        if missing:
            raise NotFound(f"no memory with id(s) {', '.join(missing[:10])}", field="ids")
        for ns, level in access.values():
            if not principal.can_write(ns, level):
                raise PermissionDenied(f"token may not write namespace {ns!r}", field="ids")
        return await self._finish(self._locked(ids, lambda: self._delete(ids)))

    async def editable(self, principal: Principal, memory_id: str) -> Memory:
        """The memory, if ``principal`` may read and write it (NotFound when it may not read it)."""
        found = (await self._on_store(self.store.get, [memory_id])).get(memory_id)
        if found is None or not principal.can_read(found.namespace, found.access_level):
            raise NotFound(f"no memory with id {memory_id}", field="id")
        if not principal.can_write(found.namespace, found.access_level):
            raise PermissionDenied(f"token may not write namespace {found.namespace!r}", field="id")
        return found

    async def update(self, principal: Principal, memory_id: str, change: Callable[[Memory], Memory],
                     keep_previous: bool, link_field: Callable[[int, Link], str] | None = None) -> tuple[Memory, str]:
        """Apply ``change`` (the memory as stored -> its new version, same id) and store the result
        in place: re-embedded when its content changed, re-indexed, atomically. With
        ``keep_previous`` the old version stays as a memory of its own, which the updated one
        ``supersedes``. Returns (stored memory, kept id or ""). ``link_field`` names the request
        field of a refused link (``link_errors``' ``field_of``).

        Updates of one memory run one at a time, each ``change`` applied to the memory as the one
        before left it: two concurrent updates of different fields (or adding different links) both
        keep theirs. The request is checked and a new text embedded before the memory is locked, so
        a refused or abandoned update costs no wait and a slow embedding holds up no other write;
        from the lock on, the update runs to the end even if its caller goes away."""
        old = await self.editable(principal, memory_id)
        new = self._changed(principal, old, change, keep_previous)
        errors = await self.link_errors(principal, [new], _link_keys(old), link_field)
        if errors:
            raise next(iter(errors.values()))
        emb = None
        if new.content_hash != old.content_hash:
            (emb,) = await self.stored_forms(await self.embedder.embed([new.content], TextRole.DOCUMENT))
        return await self._finish(self._locked(
            [memory_id], lambda: self._apply_update(principal, memory_id, change, keep_previous, (new.content_hash, emb),
                                                    link_field)))

    @staticmethod
    def _changed(principal: Principal, old: Memory, change: Callable[[Memory], Memory], keep_previous: bool) -> Memory:
        if not principal.can_write(old.namespace, old.access_level):
            raise PermissionDenied(f"token may not write namespace {old.namespace!r}", field="id")
        new = change(old)
        if keep_previous and new.namespace != old.namespace:
            raise InvalidArgument("keep_previous keeps the old version in its namespace, and links stay within "
                                  "one: move the memory without it", field="keep_previous")
        return new

    async def _apply_update(self, principal: Principal, memory_id: str, change: Callable[[Memory], Memory],
                            keep_previous: bool, embedded: tuple[str, EmbeddingSet | None],
                            link_field: Callable[[int, Link], str] | None) -> tuple[Memory, str]:
        """``update`` under the memory's lock: read it again, change it, store it. ``embedded``: a
        content hash and its vectors, made before the lock (used when that is the new content)."""
        old = await self.editable(principal, memory_id)
        new = self._changed(principal, old, change, keep_previous)
        previous_id = new_memory_id() if keep_previous else ""
        errors = await self.link_errors(principal, [new], _link_keys(old), link_field)
        if errors:
            raise next(iter(errors.values()))
        if previous_id:
            new = replace(new, links=(*new.links, Link(previous_id, LinkType.SUPERSEDES)))
        emb = None
        if new.content_hash != old.content_hash:
            # embedded before the lock, unless an update in between changed what "unchanged" means
            emb = embedded[1] if embedded[0] == new.content_hash else None
            if emb is None:
                (emb,) = await self.stored_forms(await self.embedder.embed([new.content], TextRole.DOCUMENT))
        stored = await self._update(new, emb, previous_id or None)
        if stored is None:
            raise NotFound(f"no memory with id(s) {memory_id}", field="id")
        return stored, previous_id

    async def _update(self, new: Memory, emb: EmbeddingSet | None, previous_id: str | None) -> Memory | None:
        with self._writing():
            # the vectors as stored now: still the memory's own when its content is unchanged, and the
            # kept version's; a new content without a kept version needs no read
            kept_emb = None
            if emb is None or previous_id is not None:
                kept_emb = await self._on_store(self.store.embeddings_of, new.id)
                if kept_emb is not None:
                    kept_emb = self._indexable(kept_emb)[0]
            stored = await self._on_store(self.store.update, new, emb, previous_id)
            if stored is None or (emb is None and kept_emb is None):
                return stored
            kept = None
            if previous_id is not None:
                kept = (await self._on_store(self.store.get, [previous_id])).get(previous_id)

            def reindex() -> None:
                with self._indexing([new.id] + ([kept.id] if kept is not None else [])):
                    self._remove([new.id])
                    self.retriever.add(stored, emb if emb is not None else kept_emb)
                    if kept is not None and kept_emb is not None:
                        self.retriever.add(kept, kept_emb)
                self.results.written([(stored.namespace, stored.access_level)])

            await self._on_index(reindex)
            return stored

    async def export(self, principal: Principal, filters: Filters, with_embeddings: bool) -> AsyncIterator[tuple[Memory, EmbeddingSet | None]]:
        """Every memory ``principal`` may read that matches ``filters``, oldest first (a page at a time)."""
        after = 0
        while True:
            page = await self._on_store(self.store.list_page, principal, filters, after, 256)
            for _, memory in page:
                emb = await self._on_store(self.store.embeddings_of, memory.id) if with_embeddings else None
                yield memory, emb
            if len(page) < 256:
                return
            after = page[-1][0]

    async def list_memories(self, principal: Principal, filters: Filters, after: int, limit: int) -> tuple[list[Memory], int | None]:
        """One page of what ``principal`` may read, oldest first, and where the next page starts
        (None after the last)."""
        rows = await self._on_store(self.store.list_page, principal, filters, after, limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        return [m for _, m in rows], (rows[-1][0] if more and rows else None)

    async def delete_where(self, principal: Principal, filters: Filters, dry_run: bool) -> tuple[int, int]:
        """(matched, deleted): every readable memory matching ``filters`` (which name namespaces);
        PermissionDenied, and nothing deleted, when one of them is not writable by ``principal``."""
        if not filters.namespaces:
            raise InvalidArgument("name the namespaces to delete from (filters.namespaces)", field="filters.namespaces")
        matched: list[Memory] = []
        after = 0
        while True:
            page = await self._on_store(self.store.list_page, principal, filters, after, 1000)
            matched += [m for _, m in page]
            if len(page) < 1000:
                break
            after = page[-1][0]
        for m in matched:
            if not principal.can_write(m.namespace, m.access_level):
                raise PermissionDenied(f"token may not write namespace {m.namespace!r} at level "
                                       f"{m.access_level.name.lower()}", field="filters")
        if dry_run or not matched:
            return len(matched), 0
        ids = [m.id for m in matched]
        deleted = 0
        for start in range(0, len(ids), 1000):
            part = ids[start:start + 1000]
            deleted += await self._finish(self._locked(part, lambda part=part: self._delete(part)))
        return len(matched), deleted

    async def _delete(self, ids: list[str]) -> int:
        with self._writing():
            deleted = await self._on_store(self.store.delete, ids)
            await self._on_index(self._remove, ids)
        return deleted

    async def feedback(self, principal: Principal, memory_id: str, used: bool, helpful: bool | None,
                       sufficient: bool | None = None) -> Memory:
        (memory,) = await self.get(principal, [memory_id])
        # the counters shape every reader's Johari quadrants: changing them is a write
        if not principal.can_write(memory.namespace, memory.access_level):
            raise PermissionDenied(
                f"agent {principal.agent_id!r} may not write namespace {memory.namespace!r}; feedback needs write access",
                field="id",
            )
        updated = await self._finish(self._locked([memory.id], lambda: self._feedback(memory.id, used, helpful, sufficient)))
        if updated is None:
            raise NotFound(f"no memory with id {memory_id}", field="id")
        return updated

    async def _feedback(self, memory_id: str, used: bool, helpful: bool | None,
                        sufficient: bool | None = None) -> Memory | None:
        with self._writing():
            updated = await self._on_store(self.store.record_feedback, memory_id, used, helpful, sufficient)
            if updated is not None:
                await self._on_index(self.retriever.update, updated)
                # feedback moves scores (the feedback prior) and Johari quadrants
                self.results.written([(updated.namespace, updated.access_level)])
        return updated

    async def warm_up(self) -> bool:
        """Store the fixed sample in a scratch index and query it (the retriever's ``warm_up``),
        so the first Store and Retrieve after a start do not build the text analysers' word
        tables and caches themselves (the first Store took 45-55 ms more than the next ones).
        Nothing reaches the store or the live index. False when the retriever has no warm-up or
        the embedder is not ready; a failure is logged and never stops the server."""
        warm = getattr(self.retriever, "warm_up", None)  # a retriever may have nothing to warm
        if warm is None or not self.embedder_ready:
            return False
        try:
            # the sample's vectors are the query's: only their shapes matter here, and embedding a
            # document grew an empty server's embedding buffers by 29 MB (the first Store's own
            # document grows them when it comes)
            (query,) = await self.embedder.embed([WARM_UP_QUERY], TextRole.QUERY)
            (doc,) = await self.stored_forms([query])
            now = time.time()
            memory = Memory(id="teleo-warm-up", namespace="", content=WARM_UP_TEXT,
                            content_hash=content_hash(WARM_UP_TEXT), event_time=now, ingestion_time=now,
                            model_version=doc.model_version, chunk_count=len(doc.chunks))
            found = await self._on_index(warm, memory, doc, Query(text=WARM_UP_QUERY, embedding=query,
                                                                  principal=_WARM_UP_PRINCIPAL, now=now))
        except Exception:  # noqa: BLE001 - a warm-up is an optimisation: the server serves without it
            log.exception("warm_up.failed")
            return False
        finally:
            release_memory()  # the scratch index's pages go back to the system
        log.info("warm_up.done", results=found)
        return True

    # -- reads ------------------------------------------------------------------------------

    async def embed_query(self, text: str) -> tuple[EmbeddingSet | None, float, str]:
        """Returns (embedding or None when degraded, ms spent, degraded reason)."""
        t0 = time.perf_counter()
        try:
            (emb,) = await self.embedder.embed([text], TextRole.QUERY)
            return emb, (time.perf_counter() - t0) * 1e3, ""
        except Unavailable as exc:
            log.warning("retrieve.degraded", reason=str(exc))
            return None, (time.perf_counter() - t0) * 1e3, f"embedding unavailable: {exc}"

    def vectors_to_embedding(self, v: QueryVectors) -> EmbeddingSet:
        if v.model_version != self.embedder.model_version:
            raise InvalidArgument(
                f"vectors were made by model version {v.model_version!r}, the server uses "
                f"{self.embedder.model_version!r}",
                field="vectors.model_version",
            )
        return EmbeddingSet(model_version=v.model_version, chunks=[ChunkEmbedding(dict(v.heads))])

    async def retrieve(self, query: Query, embed_ms: float, degraded_reason: str,
                       ticket: Ticket) -> AsyncIterator[StageReport | Hit | RetrieveDone]:
        """Stream the pipeline's events; the ACL is checked again on every hit before it leaves.

        ``ticket``: the admission of this retrieval (``admit``, which its caller closes); its
        compute slot is given back as soon as the pipeline has finished, whether or not the client
        reads on.
        """
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        cancelled = threading.Event()
        fut: asyncio.Future[None] = loop.create_future()

        def finished() -> None:
            loop.call_soon_threadsafe(ticket.computed)
            loop.call_soon_threadsafe(queue.put_nowait, _DONE)
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(None))

        self._queue_retrieval(_Retrieval(query, lambda ev: loop.call_soon_threadsafe(queue.put_nowait, ev),
                                         cancelled, finished))
        returned: list[str] = []
        unservable: list[tuple[str, str]] = []
        outcome = Outcome(corpus_size=0)
        try:
            while True:
                ev = await queue.get()
                if ev is _DONE:
                    break
                if isinstance(ev, BaseException):
                    if isinstance(ev, TeleoError):
                        raise ev
                    raise RuntimeError("retrieval pipeline failed") from ev
                if isinstance(ev, Hit):
                    if not query.principal.can_read(ev.memory.namespace, ev.memory.access_level):
                        log.error("retrieve.acl_violation_blocked", memory_id=ev.memory.id)
                        continue
                    reason = unreadable_reason(ev.memory)
                    if reason is not None:
                        # one bad row must not fail every reader's retrieval: out of service it goes
                        unservable.append((ev.memory.id, reason))
                        continue
                    returned.append(ev.memory.id)
                elif isinstance(ev, Outcome):
                    outcome = ev
                    continue
                yield ev
            if degraded_reason and not outcome.degraded:
                outcome.degraded, outcome.degraded_reason = True, degraded_reason
            yield RetrieveDone(outcome, embed_ms, (time.perf_counter() - t0) * 1e3 + embed_ms, len(returned))
        finally:
            cancelled.set()
            # bookkeeping is off the read path: a failing write (full disk, lock) never fails a read
            if unservable:
                self._finish(self._quarantine(unservable))
            if returned:
                self._count_retrieved(returned)
            await asyncio.shield(fut)

    def _queue_retrieval(self, job: _Retrieval) -> None:
        """Queue a retrieval for the index thread; a job that takes the waiting ones is queued
        there unless one already is."""
        with self._waiting_lock:
            self._waiting.append(job)
            if self._taking:
                return
            self._taking = True
        self._take_waiting()

    def _take_waiting(self) -> None:
        """Queue a :meth:`_run_retrievals` job on the index thread; when that thread is shut down
        (the server is stopping), every waiting retrieval ends UNAVAILABLE instead of waiting."""
        try:
            self._index_ex.submit(self._run_retrievals)
        except BaseException as exc:
            with self._waiting_lock:
                taken, self._waiting, self._taking = self._waiting, [], False
            for waiting in taken:
                waiting.deliver(Unavailable(f"the server is stopping ({exc}); retry on another instance or later"))
                waiting.finished()

    def _run_retrievals(self) -> None:
        """On the index thread: the retrievals waiting, at most ``retrieval_group`` of them (the
        pipeline setting), run as one group (``retrieve_together``: work their stages can share,
        the dense search on a device backend, is done for all of them at once), one after
        another, each one's events handed to its caller as they come. Retrievals still waiting go
        to a job queued behind whatever else the index thread was given meanwhile (writes)."""
        limit = max(1, int(getattr(getattr(self.retriever, "settings", None), "retrieval_group", 1)))
        with self._waiting_lock:
            group, self._waiting = self._waiting[:limit], self._waiting[limit:]
            more = bool(self._waiting)
            self._taking = more
        if more:
            self._take_waiting()
        live = [job for job in group if not job.cancelled.is_set()]
        for job in group:
            if job.cancelled.is_set():
                job.finished()
        if not live:
            return
        self.retrieval_groups[len(live)] += 1
        together = getattr(self.retriever, "retrieve_together", None)
        runs: list[Any] | None = None
        if together is not None and len(live) > 1:
            try:
                runs = together([job.query for job in live])
            except Exception as exc:  # each retrieval runs alone, and meets the failure there if it lasts
                log.warning("retrieve.group_failed", retrievals=len(live), error=str(exc))
        if runs is None:
            runs = [self.retriever.retrieve(job.query) for job in live]
        for job, events in zip(live, runs):
            self._deliver(job, events)

    @staticmethod
    def _deliver(job: _Retrieval, events: Iterator[Any]) -> None:
        """Hand a retrieval's events to its caller until it ends or the caller goes."""
        try:
            for ev in events:
                if job.cancelled.is_set():
                    return
                job.deliver(ev)
        except BaseException as exc:  # delivered to the consumer, which re-raises
            job.deliver(exc)
        finally:
            try:
                close = getattr(events, "close", None)
                if close is not None:
                    close()  # a retrieval left early waits for its background work here
            finally:
                job.finished()

    async def _quarantine(self, unservable: list[tuple[str, str]]) -> None:
        try:
            for memory_id, reason in unservable:
                with self._writing():
                    await self._on_store(self.store.quarantine, memory_id, reason)
                    await self._on_index(self._remove, [memory_id])
        except Exception as exc:
            log.warning("retrieve.bookkeeping_failed", error=str(exc))

    def _count_retrieved(self, ids: list[str]) -> None:
        """Count a retrieval's results in their usage counters, with the others of the next
        ``USAGE_FLUSH_SECONDS`` in one write: a transaction (and a sync to disk) per retrieval cost
        every retrieval about 0.4 ms through the server on a 2-core CPU, and a loaded server a
        hundred syncs a second. Counters are not acknowledged writes: a crash loses at most that
        much of them; ``close`` writes what is pending."""
        self._retrieved.extend(ids)
        if self._usage_flush is None:
            self._flush_now = asyncio.Event()
            self._usage_flush = self._finish(self._flush_usage(self._flush_now))

    async def _flush_usage(self, now: asyncio.Event) -> None:
        try:
            await asyncio.wait_for(now.wait(), USAGE_FLUSH_SECONDS)
        except asyncio.TimeoutError:
            pass
        ids, self._retrieved, self._usage_flush = self._retrieved, [], None
        try:
            with self._writing():
                await self._on_store(self.store.record_retrieved, ids)
                # the indexed copies carry the counters results show: counted there the same way
                await self._on_index(self.retriever.count_retrieved, ids)
        except Exception as exc:
            log.warning("retrieve.bookkeeping_failed", error=str(exc))

    async def compare(self, principal: Principal, a: str, b: str, aggregation: str, weights: dict[str, float],
                      matrix: str = "") -> tuple[dict[str, float], float, float | None]:
        await self.get(principal, [a, b])
        return await self._on_index(self.retriever.compare, a, b, aggregation, weights, matrix, principal)

    async def discover(self, query: Query, min_similarity: float, precomputed: bool) -> list[EntryPoint]:
        """Each whole-corpus space's best match (DiscoverEntryPoints), admitted like a retrieval."""
        ticket = self.admit(query.principal)
        try:
            if not precomputed:
                query.embedding, _, _ = await self.embed_query(query.text)
            return await self._on_index(self.retriever.discover, query, min_similarity)
        finally:
            ticket.close()

    async def get_with_purposes(self, principal: Principal,
                                ids: list[str]) -> tuple[list[Memory], list[MemoryPurpose | None]]:
        """``get``, and each memory's purpose (None while its partition has no goals or it is not
        indexed yet)."""
        memories = await self.get(principal, ids)

        def each() -> list[MemoryPurpose | None]:
            out: list[MemoryPurpose | None] = []
            for i in ids:
                try:
                    out.append(self.retriever.purpose_of(i))
                except NotFound:  # stored, not yet indexed
                    out.append(None)
            return out

        return memories, await self._on_index(each)

    async def goals(self, principal: Principal) -> list[Goal]:
        return await self._on_index(self.retriever.goals, principal)

    async def stats(self, principal: Principal, namespaces: list[str]) -> tuple[dict[str, tuple[int, int]], int]:
        counts = await self._on_store(self.store.count_by_namespace)
        visible: dict[str, tuple[int, int]] = {}
        for (ns, level), (n, chunks) in counts.items():
            # Only what the caller could read counts, so Stats leaks nothing about other tenants.
            if principal.can_read(ns, level) and (not namespaces or ns in namespaces):
                prev = visible.get(ns, (0, 0))
                visible[ns] = (prev[0] + n, prev[1] + chunks)
        goals = await self._on_index(self.retriever.goal_count, principal)
        return visible, goals

    async def _index_again(self) -> int:
        """Index again, as a rebuild would, up to ``REPLAY_BATCH`` memories whose indexing failed
        after the store had them (a caller was told of the failure; the store kept the write): read
        from the store, then, on the index thread, each one still pending is taken out of the
        indexes and added as stored (one no longer stored stays out). A later write that indexed
        one meanwhile has taken it off the list, so an older read never replaces it. Returns how
        many were indexed; one that fails again stays listed for the next round."""
        # the list is read and changed on the index thread only
        batch = await self._on_index(lambda: sorted(self._unindexed)[:REPLAY_BATCH])
        if not batch:
            return 0
        found = await self._on_store(self.store.indexable, batch)
        try:
            version: str | None = self.embedder.model_version
        except Unavailable:
            version = None

        def apply() -> int:
            todo = [i for i in batch if i in self._unindexed]
            if not todo:
                return 0
            touched = self._partitions(todo)
            still: set[str] = set()

            def failed(memory: Memory, exc: Exception) -> None:  # it stays listed; the others go on
                still.add(memory.id)
                log.warning("index.retry_failed", memory_id=memory.id, error=f"{type(exc).__name__}: {exc}"[:200])

            listed = set(todo)
            done = self._index_stored(todo, [(m, e) for m, e in found if m.id in listed], version, failed)
            # indexed, deleted meanwhile, or left to reembed_stale (another model's vectors)
            self._unindexed.difference_update(listed - still)
            touched.update((m.namespace, m.access_level) for m in done)
            self.results.written(touched)
            return len(done)

        done = await self._on_index(apply)
        log.info("index.retried", indexed=done, still_pending=len(self._unindexed))
        return done

    async def _index_pending(self) -> None:
        """Before a stop's snapshot: index again every write whose indexing failed, while rounds
        make progress (a snapshot is written only once none waits)."""
        try:
            while self._unindexed and await self._index_again():
                pass
        except Exception as exc:  # noqa: BLE001 - the stop goes on; the snapshot is then skipped
            log.warning("index.retry_failed", error=f"{type(exc).__name__}: {exc}"[:200])

    async def maintain(self) -> bool:
        """One round of the retriever's upkeep (compaction, calibration, goals), beside reads: its
        short steps queue on the index thread like any call, and the clustering runs on a worker
        thread of its own. Returns whether there was anything to do."""
        if self._unindexed:  # not counted as work done: a memory that fails again waits for the next round
            await self._index_again()
        r = self.retriever
        due = getattr(r, "maintenance_due", None)  # a retriever may need no upkeep at all
        if due is None or not await self._on_index(due):
            return False
        steps = r.maintenance()

        def advance(result: Any) -> tuple[bool, Any]:
            try:
                return False, steps.send(result)
            except StopIteration:
                return True, None

        result: Any = None
        offloaded = False
        while True:
            done, step = await self._on_index(advance, result)
            if done:
                break
            if step is not None:
                offloaded = True
                result = await asyncio.to_thread(step.run)
            else:
                result = None
        if offloaded:
            # the clustering's temporaries (a copy of every memory vector, distance blocks) stay
            # with the allocator of the thread that ran it: about 12 KB a SciFact memory otherwise
            await asyncio.to_thread(release_memory)
        return True

    async def close(self) -> None:
        if self._flush_now is not None:
            self._flush_now.set()  # usage counters pending are written now
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        try:
            version: str | None = self.embedder.model_version  # what the indexed vectors were made by
        except Unavailable:
            version = None
        await self._index_pending()
        await self.embedder.close()
        self._index_ex.shutdown(wait=True)
        self._store_ex.shutdown(wait=True)
        if self._checkpoint_writer is not None:
            # a copy still writing a checkpoint (also one forked after its wait was cancelled):
            # ended, as the snapshot this stop writes replaces it
            self._checkpoint_writer.stop()
        if self.snapshot_plan is not None:
            # every write is in the indexes now: the snapshot holds the database up to this change
            await asyncio.to_thread(self._save_snapshot, version, self._journal_position(), "clean stop")
        self.store.close()


def _link_keys(memory: Memory) -> frozenset[tuple[str, LinkType]]:
    """(target, type) of each of a memory's links."""
    return frozenset((lk.target_id, lk.type) for lk in memory.links)


def new_memory_id() -> str:
    return uuid.uuid4().hex


__all__ = [
    "SATURATED_RETRY_S",
    "Admission",
    "MemoryCore",
    "QueryVectors",
    "RetrieveDone",
    "SnapshotPlan",
    "StoreOutcome",
    "Ticket",
    "new_memory_id",
]
