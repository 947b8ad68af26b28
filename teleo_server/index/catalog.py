"""Row bookkeeping for indexed memories: ids, records, chunk rows, and the columns filters and ACL read.

Memories occupy *memory rows* and their chunks *chunk rows*; every space index is keyed by one of
the two. Removal tombstones a row (``alive`` goes False); ``compact`` renumbers rows densely and
returns the kept old rows so every index can follow. A memory's record is its columns here and
one byte string of the rest (``index/records.py``); :meth:`Catalog.memory` makes a ``Memory`` of
them when it is read.
"""

from __future__ import annotations

import marshal
from typing import Any

import numpy as np

from teleo_server.compute.sets import member
from teleo_server.domain import AccessLevel, Link, LinkType, Memory, MemoryType, Principal, held_text, hold_text, text_of
from teleo_server.extract.code import LANGUAGES, detect
from teleo_server.index.base import Expression
from teleo_server.index.columns import Column, shrunk
from teleo_server.index.records import Records, RowIds
from teleo_server.query import Filters, visible


_READABLE_KEPT = 8  # access tables whose readable mask is kept
_TYPES = {int(t): t for t in MemoryType}
_LEVELS = {int(a): a for a in AccessLevel}
_LINKS = {int(t): t for t in LinkType}
# a record's usage and feedback counters, a column each (in Memory's order of fields)
_COUNTERS = ("retrieved_count", "used_count", "helpful_count", "misled_count", "sufficient_count", "insufficient_count")
# code_language codes: 0 = no code, 1 = code in a language not recognised, then LANGUAGES in order
LANGUAGE_CODES = {"unknown": 1, **{name: i + 2 for i, name in enumerate(LANGUAGES)}}


def language_code(text: str) -> int:
    """The code_language code of a memory's text."""
    spans = detect(text)
    if spans is None:
        return 0
    return LANGUAGE_CODES.get(spans.language or "unknown", 1)


def value_dtype(name: str) -> np.dtype:
    """The dtype an index stores its values in: float32 (the exact reference) or float16."""
    dtype = np.dtype(name)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float16)):
        raise ValueError(f"values must be float32 or float16, got {name}")
    return dtype


# the fields of a record's tuple, in order (``Catalog._record`` writes them, ``Catalog._made`` reads
# them all); the two read alone
_RECORD_FIELDS = ("text", "hash", "source", "event_time", "ingestion_time", "confidence", "importance",
                  "session_position", "links", "metadata", "model_version", "chunk_count")
_RECORD_TEXT, _RECORD_METADATA = _RECORD_FIELDS.index("text"), _RECORD_FIELDS.index("metadata")


class Catalog:
    """Memory rows, chunk rows and filterable columns.

    Arrays exposed (all length ``n_rows`` unless noted): ``alive`` bool, ``ns`` int32 namespace
    code, ``level`` int8, ``mtype`` int8, ``event_time`` float64, ``ingestion_time`` float64, ``confidence`` float32,
    ``session`` int32 session code, ``position`` int32 (-1 = none), ``evergreen`` bool, ``importance`` float32,
    ``used`` int64; ``chunk_mem`` int32 (n_chunks,) maps a chunk row to its memory row;
    ``chunk_start`` int64 maps a memory row to its first chunk row, ``chunk_count`` int32.
    """

    def __init__(self) -> None:
        self.row_of = RowIds()  # memory id -> row (``get``, ``in``, ``[id]`` like a dict)
        self._records = Records()  # per row: the fields no column holds (``_record``)
        self._ns_codes: dict[str, int] = {}
        self.ns_names: list[str] = []
        self._session_codes: dict[str, int] = {"": 0}
        self._session_names: list[str] = [""]
        self._version_codes: dict[str, int] = {}
        self._version_names: list[str] = []
        self._metadata: dict[tuple[str, str], set[int]] = {}
        self._alive = Column(np.bool_, False)
        self._ns = Column(np.int32)
        self._level = Column(np.int8)
        self._mtype = Column(np.int8)
        self._event = Column(np.float64)
        self._ingested = Column(np.float64)
        self._conf = Column(np.float32)
        self._importance = Column(np.float32)
        self._session = Column(np.int32)
        self._position = Column(np.int32, -1)
        self._evergreen = Column(np.bool_, False)
        self._counters = {name: Column(np.int64) for name in _COUNTERS}
        self._lang = Column(np.int8)  # the language of the code a memory holds (code_language)
        self._chunk_start = Column(np.int64)
        self._chunk_count = Column(np.int32)
        self._chunk_mem = Column(np.int32)
        self._not_one_chunk = 0  # memory rows whose chunk count is not 1
        self.dead = 0
        self.version = 0  # changes whenever rows are added, removed or renumbered
        self._partition_keys: tuple[int, np.ndarray] = (-1, np.zeros(0, dtype=np.int64))  # (version, keys)
        # readable masks of the last few access tables: (version, mask) by the table's bytes
        self._readable: dict[bytes, tuple[int, np.ndarray]] = {}

    # ---- columns -------------------------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        return self._alive.n

    @property
    def n_chunks(self) -> int:
        return self._chunk_mem.n

    @property
    def one_chunk_each(self) -> bool:
        """Whether every memory row has exactly one chunk row (then chunk row r is memory row r)."""
        return self._not_one_chunk == 0

    @property
    def alive(self) -> np.ndarray:
        return self._alive.view

    @property
    def ns(self) -> np.ndarray:
        return self._ns.view

    @property
    def level(self) -> np.ndarray:
        return self._level.view

    @property
    def mtype(self) -> np.ndarray:
        return self._mtype.view

    @property
    def event_time(self) -> np.ndarray:
        return self._event.view

    @property
    def ingestion_time(self) -> np.ndarray:
        return self._ingested.view

    @property
    def confidence(self) -> np.ndarray:
        return self._conf.view

    @property
    def importance(self) -> np.ndarray:
        return self._importance.view

    @property
    def session(self) -> np.ndarray:
        return self._session.view

    @property
    def position(self) -> np.ndarray:
        return self._position.view

    @property
    def evergreen(self) -> np.ndarray:
        return self._evergreen.view

    @property
    def used(self) -> np.ndarray:
        return self._counters["used_count"].view

    @property
    def chunk_mem(self) -> np.ndarray:
        return self._chunk_mem.view

    @property
    def chunk_start(self) -> np.ndarray:
        return self._chunk_start.view

    @property
    def chunk_count(self) -> np.ndarray:
        return self._chunk_count.view

    def __len__(self) -> int:
        return self.n_rows - self.dead

    # ---- writes --------------------------------------------------------------------------------
    def add(self, memory: Memory, n_chunks: int) -> tuple[int, np.ndarray]:
        """Append a memory; returns its memory row and its chunk rows (int64 (n_chunks,))."""
        row = self.n_rows
        self.version += 1
        self._records.append(self._record(memory))
        self._ns.append(self._code(self._ns_codes, memory.namespace, self.ns_names))
        self._level.append(int(memory.access_level))
        self._mtype.append(int(memory.memory_type))
        self._event.append(memory.event_time or memory.ingestion_time)
        self._ingested.append(memory.ingestion_time)
        self._conf.append(memory.confidence)
        self._importance.append(memory.importance)
        self._session.append(self._code(self._session_codes, memory.session_id, self._session_names))
        self._position.append(-1 if memory.session_position is None else memory.session_position)
        self._evergreen.append(memory.evergreen)
        for name, col in self._counters.items():
            col.append(getattr(memory, name))
        self._lang.append(language_code(memory.content))
        first = self.n_chunks
        self._chunk_start.append(first)
        self._chunk_count.append(n_chunks)
        self._chunk_mem.extend(np.full(n_chunks, row, dtype=np.int32))
        self._not_one_chunk += n_chunks != 1
        for kv in memory.metadata.items():
            self._metadata.setdefault(kv, set()).add(row)
        self._alive.append(True)
        self.row_of.add(memory.id, row)  # last: the id finds a row whose columns are all written
        return row, np.arange(first, first + n_chunks, dtype=np.int64)

    def _record(self, memory: Memory) -> bytes:
        """The bytes of ``memory``'s fields that no column holds exactly: its text (deflated when
        long), its hash (32 bytes when it is a sha256 in hex), source, event and ingestion times,
        confidence and importance as given, session position, links, metadata, the model version's
        code and the chunk count."""
        digest: str | bytes = memory.content_hash
        try:
            raw = bytes.fromhex(digest)
            if raw.hex() == digest:
                digest = raw
        except ValueError:
            pass
        links = tuple((str(link.target_id), int(link.type), float(link.weight)) for link in memory.links)
        position = memory.session_position
        return marshal.dumps((held_text(memory), digest, str(memory.source), float(memory.event_time),
                              float(memory.ingestion_time), float(memory.confidence), float(memory.importance),
                              None if position is None else int(position), links,
                              {str(k): str(v) for k, v in memory.metadata.items()} or None,
                              self._code(self._version_codes, memory.model_version, self._version_names),
                              int(memory.chunk_count)))

    def settle(self) -> None:
        """After a bulk load: fold the newest ids into the id table's arrays, and cut every column
        and the records' buffer to what they hold (growing by doubling leaves up to half unused)."""
        self.row_of.settle()
        self._records.fit()
        for col in (*self._row_columns(), self._chunk_mem, self._chunk_start):
            col.fit()

    def remove(self, memory_id: str) -> int | None:
        row = self.row_of.pop(memory_id)
        if row is None:
            return None
        # the record's metadata alone, not the whole memory (the row is still alive: only its id is forgotten)
        metadata = self._record_field(row, _RECORD_METADATA) or {}
        self.version += 1
        for kv in metadata.items():
            self._metadata.get(kv, set()).discard(row)
        self._alive.view[row] = False
        self.dead += 1
        return row

    def update(self, memory: Memory) -> int | None:
        """Refresh a record (its feedback and usage counters, and the fields its bytes hold);
        returns the row or None if unknown."""
        row = self.row_of.get(memory.id)
        if row is None:
            return None
        self._records.replace(row, self._record(memory))
        for name, col in self._counters.items():
            col.view[row] = getattr(memory, name)
        return row

    def count_retrieved(self, ids: list[str]) -> None:
        """One more retrieval on the records of ``ids`` (unknown ids are skipped)."""
        for memory_id in ids:
            row = self.row_of.get(memory_id)
            if row is not None:
                self._counters["retrieved_count"].view[row] += 1

    def compact(self) -> tuple[np.ndarray, np.ndarray]:
        """Drop tombstoned rows; returns kept old memory rows and kept old chunk rows (int64)."""
        self.version += 1
        keep = np.flatnonzero(self.alive)
        keep_chunks = np.flatnonzero(self.alive[self.chunk_mem])
        new_of_old = np.full(self.n_rows, -1, dtype=np.int64)
        new_of_old[keep] = np.arange(keep.size)
        for col in self._row_columns():
            col.keep(keep)
        mem_of_chunk = new_of_old[self.chunk_mem[keep_chunks]].astype(np.int32)
        self._chunk_mem = Column(np.int32)
        self._chunk_mem.extend(mem_of_chunk)
        starts = np.zeros(keep.size, dtype=np.int64)
        if keep.size:
            starts[1:] = np.cumsum(self.chunk_count)[:-1]
        self._chunk_start = Column(np.int64)
        self._chunk_start.extend(starts)
        self._not_one_chunk = int(np.count_nonzero(self.chunk_count != 1))
        self._records = self._records.kept(keep)
        self.row_of = self.row_of.kept(keep)
        self._metadata = {kv: {int(new_of_old[r]) for r in rows} for kv, rows in self._metadata.items() if rows}
        self.dead = 0
        return keep, keep_chunks

    # ---- partitions: (namespace, access level), the unit of tenancy --------------------------------
    _LEVELS = 8  # partition key = namespace code * 8 + access level (levels are 1..4)

    @property
    def partitions(self) -> np.ndarray:
        """int64 (n_rows,) partition key of each row; recomputed only after rows change."""
        if self._partition_keys[0] != self.version:
            self._partition_keys = (self.version, self.ns.astype(np.int64) * self._LEVELS + self.level.astype(np.int64))
        return self._partition_keys[1]

    def partition(self, key: int) -> tuple[str, AccessLevel]:
        """The (namespace, access level) a partition key stands for."""
        return self.ns_names[key // self._LEVELS], AccessLevel(key % self._LEVELS)

    # ---- masks ---------------------------------------------------------------------------------
    def readable(self, principal: Principal) -> np.ndarray:
        """bool (n_rows,): alive and readable by ``principal`` (namespace scope and level)."""
        n_ns = len(self.ns_names)
        table = np.zeros((max(n_ns, 1), len(AccessLevel) + 1), dtype=bool)
        for code, name in enumerate(self.ns_names):
            for level in AccessLevel:
                table[code, int(level)] = principal.can_read(name, level)
        if self.n_rows == 0:
            return np.zeros(0, dtype=bool)
        if table.all():  # reads every namespace at every level: a copy, not a lookup per row
            return self.alive.copy()
        # a lookup per row costs ~7 ms at 1M rows: kept per (rows' version, access table) until a
        # write changes the rows; a copy is handed out, so no caller can change the kept one
        key = table.tobytes()
        kept = self._readable.get(key)
        if kept is None or kept[0] != self.version or kept[1].size != self.n_rows:
            kept = (self.version, self.alive & table[self.ns, self.level])
            if len(self._readable) >= _READABLE_KEPT:
                self._readable = {}  # (a new dict: readers on other threads may be using the old one)
            self._readable[key] = kept
        return kept[1].copy()

    def session_code(self, session_id: str) -> int | None:
        """The code ``session`` holds for a session id (None when no memory has it)."""
        return self._session_codes.get(session_id)

    def mask(self, principal: Principal, filters: Filters, readable: np.ndarray | None = None) -> np.ndarray:
        """bool (n_rows,): ACL mask AND every filter of ``filters``. Applied before any scoring.

        ``readable``: this principal's ``readable`` mask when the caller already has it.
        """
        m = self.readable(principal) if readable is None else readable.copy()
        if filters.namespaces:
            wanted = np.zeros(max(len(self.ns_names), 1), dtype=bool)
            for name in filters.namespaces:
                code = self._ns_codes.get(name)
                if code is not None:
                    wanted[code] = True
            m &= wanted[self.ns]
        if filters.memory_types:
            m &= member(self.mtype, np.array([int(t) for t in filters.memory_types], dtype=np.int8))
        if filters.event_start is not None:
            m &= self.event_time >= filters.event_start
        if filters.event_end is not None:
            m &= self.event_time < filters.event_end
        if filters.as_of_event is not None:
            m &= self.event_time <= filters.as_of_event
        if filters.as_of_ingestion is not None:
            m &= self.ingestion_time <= filters.as_of_ingestion
        if filters.min_confidence is not None:
            m &= self.confidence >= np.float32(filters.min_confidence)
        if filters.session_id:
            code = self._session_codes.get(filters.session_id)
            m &= (self.session == code) if code is not None else False
        if filters.languages:
            m &= member(self._lang.view, np.array([LANGUAGE_CODES.get(x, -1) for x in filters.languages], dtype=np.int8))
        for kv in filters.metadata:
            rows = self._metadata.get(kv, set())
            sel = np.zeros(self.n_rows, dtype=bool)
            if rows:
                sel[np.fromiter(rows, dtype=np.int64, count=len(rows))] = True
            m &= sel
        return m

    def expression(self, principal: Principal, filters: Filters) -> Expression:
        """The rows of :meth:`mask` as a boolean expression over row attributes, for an index that
        filters on attributes it stores itself; evaluable here through :meth:`column`."""
        return Expression(visible(principal, filters), self.column)

    def column(self, name: str) -> np.ndarray:
        """One attribute per memory row, by the names :meth:`expression` uses."""
        numeric = {"alive": self.alive, "access_level": self.level, "memory_type": self.mtype,
                   "event_time": self.event_time, "ingestion_time": self.ingestion_time,
                   "confidence": self.confidence}
        if name in numeric:
            return numeric[name]
        if name == "namespace":
            return np.array(self.ns_names + [""], dtype=object)[self.ns] if self.n_rows else np.zeros(0, object)
        if name == "session_id":
            return np.array(self._session_names, dtype=object)[self.session] if self.n_rows else np.zeros(0, object)
        if name == "code_language":
            return np.array(["", "unknown", *LANGUAGES], dtype=object)[self._lang.view]
        if name.startswith("metadata."):
            key = name.removeprefix("metadata.")
            out = np.full(self.n_rows, None, dtype=object)
            for (k, v), rows in self._metadata.items():
                if k == key and rows:
                    out[np.fromiter(rows, dtype=np.int64, count=len(rows))] = v
            return out
        raise KeyError(f"no row attribute {name!r}")

    def memory(self, row: int) -> Memory:
        """The record of a memory row not removed, as a new ``Memory`` (changing it changes
        nothing here: ``update`` does)."""
        assert self._alive.at(row), "tombstoned row"
        return self._made(self.row_of.id_of(row), self._records.get(row), *(c.at(row) for c in self._record_columns()))

    def memories(self, rows: np.ndarray) -> list[Memory]:
        """The records of several memory rows not removed (each column read once for them all)."""
        rows = np.asarray(rows, np.int64)
        assert bool(self.alive[rows].all()), "tombstoned row"
        return [self._made(*values) for values in zip(self.row_of.ids_of(rows), self._records.many(rows),
                                                      *(c.view[rows].tolist() for c in self._record_columns()))]

    def _row_columns(self) -> tuple[Column, ...]:
        """Every column with a value per memory row (the chunk rows' columns are not)."""
        return (self._alive, self._ns, self._level, self._mtype, self._event, self._ingested, self._conf,
                self._importance, self._session, self._position, self._evergreen, self._lang, self._chunk_count,
                *self._counters.values())

    def _record_columns(self) -> tuple[Column, ...]:
        """The columns a record is made from, in :meth:`_made`'s order."""
        return (self._ns, self._mtype, self._level, self._session, self._evergreen, *self._counters.values())

    def _made(self, memory_id: str, record: memoryview, ns: int, mtype: int, level: int, session: int,
              evergreen: bool, retrieved: int, used: int, helpful: int, misled: int, sufficient: int,
              insufficient: int) -> Memory:
        """A ``Memory`` of a record's bytes (:meth:`_record`) and its columns' values."""
        (held, digest, source, event_time, ingestion_time, confidence, importance, position, links, metadata,
         version, chunk_count) = marshal.loads(record)
        m = Memory(memory_id, self.ns_names[ns], "", digest.hex() if type(digest) is bytes else digest,
                   _TYPES[mtype], _LEVELS[level], source, confidence, importance, event_time, ingestion_time,
                   self._session_names[session], position,
                   tuple(Link(target, _LINKS[kind], weight) for target, kind, weight in links) if links else (),
                   dict(metadata) if metadata else {}, bool(evergreen), self._version_names[version], chunk_count,
                   retrieved, used, helpful, misled, sufficient, insufficient)
        hold_text(m, held)
        return m

    def content(self, row: int) -> str:
        """The text of a memory row not removed (without making its whole record)."""
        assert self._alive.at(row), "tombstoned row"
        return text_of(self._record_field(row, _RECORD_TEXT))

    def _record_field(self, row: int, field: int) -> Any:
        """One field of a row's record (``_RECORD_FIELDS``), without making the memory."""
        return marshal.loads(self._records.get(row))[field]

    def id_of(self, row: int) -> str:
        """The memory id of a row (removed or not)."""
        return self.row_of.id_of(row)

    def ids_of(self, rows: np.ndarray) -> list[str]:
        """The memory ids of several rows at once."""
        return self.row_of.ids_of(rows)

    def feedback_counts(self, rows: np.ndarray) -> np.ndarray:
        """int64 (len(rows), 4): the helpful, misled, sufficient and insufficient marks of rows."""
        rows = np.asarray(rows, np.int64)
        return np.stack([self._counters[name].view[rows]
                         for name in ("helpful_count", "misled_count", "sufficient_count", "insufficient_count")], axis=1)

    @staticmethod
    def _code(codes: dict[str, int], key: str, names: list[str] | None) -> int:
        code = codes.get(key)
        if code is None:
            code = len(codes)
            codes[key] = code
            if names is not None:
                names.append(key)
        return code


__all__ = ["Catalog", "Column", "LANGUAGE_CODES", "language_code", "shrunk", "value_dtype"]
