"""The catalog's memory records in a few arrays rather than a Python object graph per memory.

A record kept as a ``Memory`` object with its id, text, hash, metadata dict and times cost about
seven objects a memory (0.7 KB of objects, more with the allocator's slack), and pickling them for
a forked checkpoint writes every one of their reference counts, so the copy duplicated the pages
they sit on: about 2.9 KB a memory. Here:

- :class:`RowIds` maps memory ids to rows and back: the ids as UTF-8 in one buffer with a hash
  index (:class:`~teleo_server.index.terms.TermTable`), and a row per id and an id per row as
  integer columns;
- :class:`Records` keeps one byte string per row in one buffer: the catalog writes there the
  fields no column of its own holds (text, hash, source, exact times and values, session position,
  links, metadata, chunk count) as one ``marshal``-ed tuple, and makes a ``Memory`` of it and of its
  columns when a record is read.

One writer at a time (the index thread); a row's record is replaced by writing the new bytes first
and then its position, one int64, so a reader sees the old record or the new one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from teleo_server.index.chunks import ranges
from teleo_server.index.columns import Column
from teleo_server.index.terms import TermTable

_LEN_BITS = 26  # a record's position: its offset in the buffer << 26 | its length (under 64 MiB)
_LEN_MASK = (1 << _LEN_BITS) - 1


class RowIds:
    """Memory ids <-> memory rows, read like the dict it replaces (``get``, ``in``, ``[id]``,
    ``len``): only rows not removed are found by id; ``id_of`` names any row's memory."""

    def __init__(self) -> None:
        self._table = TermTable()                 # every id seen since the last compaction
        self._row_of_id = Column(np.int64, -1)    # by the table's id: its memory's row now, -1 when none
        self._id_of_row = Column(np.int64)        # by row: the table's id of its memory's id
        self._live = 0

    def __len__(self) -> int:
        return self._live

    def __contains__(self, memory_id: object) -> bool:
        return isinstance(memory_id, str) and self.get(memory_id) is not None

    def __getitem__(self, memory_id: str) -> int:
        row = self.get(memory_id)
        if row is None:
            raise KeyError(memory_id)
        return row

    def get(self, memory_id: str, default: int | None = None) -> int | None:
        tid = self._table.get(memory_id)
        if tid is None or tid >= self._row_of_id.n:
            return default
        row = int(self._row_of_id.view[tid])
        return default if row < 0 else row

    def add(self, memory_id: str, row: int) -> None:
        """``memory_id`` at ``row``, the next row (the id's earlier row, if any, is no longer found)."""
        if row != self._id_of_row.n:
            raise ValueError(f"row {row} is not the next row ({self._id_of_row.n})")
        tid = self._table.get(memory_id)
        if tid is None:
            tid = len(self._table)
            while self._row_of_id.n <= tid:
                self._row_of_id.append(-1)
            self._row_of_id.view[tid] = row
            self._id_of_row.append(tid)
            self._table.add(memory_id)  # last: a reader finds the id only once its row is set
            self._live += 1
            return
        self._live += int(self._row_of_id.view[tid]) < 0
        self._row_of_id.view[tid] = row
        self._id_of_row.append(tid)

    def settle(self) -> None:
        """Fold the newest ids into the table's arrays."""
        self._table.settle()

    def pop(self, memory_id: str) -> int | None:
        """Forget ``memory_id``'s row (returned; None when it has none)."""
        row = self.get(memory_id)
        if row is not None:
            self._row_of_id.view[self._table.get(memory_id)] = -1
            self._live -= 1
        return row

    def id_of(self, row: int) -> str:
        return self._table.term(int(self._id_of_row.view[row]))

    def ids_of(self, rows: np.ndarray | Sequence[int]) -> list[str]:
        """The ids of several rows at once."""
        return self._table.terms_of(self._id_of_row.view[np.asarray(rows, np.int64)])

    def kept(self, rows: np.ndarray) -> RowIds:
        """A new map holding the ids of ``rows`` (old rows, ascending) at rows 0, 1, ... (compaction:
        the ids of removed memories are dropped from the table)."""
        out = RowIds()
        tids = np.asarray(out._table.add_all(self.ids_of(rows)), np.int64)
        out._table.settle()
        row_of_id = np.full(len(out._table), -1, np.int64)
        row_of_id[tids] = np.arange(tids.size)
        out._row_of_id.extend(row_of_id)
        out._id_of_row.extend(tids)
        out._live = int(np.count_nonzero(row_of_id >= 0))
        return out


class Records:
    """One byte string per row, appended to one buffer; a replaced record's old bytes stay until
    :meth:`kept` copies the live ones into a new buffer (compaction)."""

    def __init__(self) -> None:
        self._bytes = Column(np.uint8)
        self._pos = Column(np.int64)  # by row: offset << _LEN_BITS | length

    def append(self, record: bytes) -> None:
        self._pos.append(self._put(record))

    def get(self, row: int) -> memoryview:
        pos = self._pos.at(row)
        at = pos >> _LEN_BITS
        return memoryview(self._bytes.view[at:at + (pos & _LEN_MASK)])

    def fit(self) -> None:
        """Cut the buffers to what they hold (after a bulk load)."""
        self._bytes.fit()
        self._pos.fit()

    def many(self, rows: np.ndarray) -> list[memoryview]:
        """The records of several rows (their positions read in one gather)."""
        pos = self._pos.view[np.asarray(rows, np.int64)]
        whole = memoryview(self._bytes.view)
        return [whole[at:at + n] for at, n in zip((pos >> _LEN_BITS).tolist(), (pos & _LEN_MASK).tolist())]

    def replace(self, row: int, record: bytes) -> None:
        if self.get(row) != record:
            self._pos.view[row] = self._put(record)

    def _put(self, record: bytes) -> int:
        if len(record) > _LEN_MASK:
            raise ValueError(f"a record of {len(record)} bytes is over the {_LEN_MASK} a record may hold")
        at = self._bytes.n
        self._bytes.extend(np.frombuffer(record, np.uint8))
        return at << _LEN_BITS | len(record)

    def kept(self, rows: np.ndarray) -> Records:
        """A new buffer holding the records of ``rows`` (old rows) in that order."""
        out = Records()
        pos = self._pos.view[np.asarray(rows, np.int64)]
        lengths = pos & _LEN_MASK
        out._bytes.extend(self._bytes.view[ranges(pos >> _LEN_BITS, lengths)])
        starts = np.cumsum(lengths) - lengths
        out._pos.extend(starts << _LEN_BITS | lengths)
        return out


__all__ = ["Records", "RowIds"]
