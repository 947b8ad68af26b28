"""A vocabulary of terms (str) and their ids, in a few arrays instead of a dict and a list.

A BM25 field's vocabulary held each term as a dict entry, a str object and a list slot: about
115 bytes a term, 1.5 KB a SciFact memory over the five fields. Here the settled terms are their
UTF-8 bytes in one buffer (with an offset each) and a hash index (the terms' hashes sorted, with
their ids): about 28 bytes a term. The newest terms wait in a small dict and are folded into the
arrays once it holds an eighth as many as they do, so adding a term stays O(1) amortised.

Hashes are Python's own ``hash`` of the str, stable for the life of the process (the table is
rebuilt at each start); two terms with the same hash are told apart by their bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from teleo_server.index.catalog import Column
from teleo_server.index.keyed import shared_id

# the newest terms stay in a dict until there are this many (or an eighth of the settled ones)
MIN_RECENT = 4096


class TermTable:
    """Terms <-> ids ``0..len-1`` in arrival order: ``get``, ``in``, ``[term]`` and ``add`` like a
    dict of str to int, ``term(id)`` and ``terms`` (a sequence in id order) like the list beside it."""

    def __init__(self) -> None:
        self._bytes = Column(np.uint8)      # settled terms' UTF-8 bytes, in id order
        self._offsets = Column(np.int64)    # term i is _bytes[_offsets[i]:_offsets[i + 1]]
        self._offsets.append(0)
        self._hashes = np.zeros(0, np.int64)  # settled terms' hashes, ascending
        self._hash_ids = np.zeros(0, np.int32)  # the id of each
        self._recent: dict[str, int] = {}   # ids _settled.. in arrival order
        self._recent_terms: list[str] = []
        self._settled = 0

    def __len__(self) -> int:
        return self._settled + len(self._recent_terms)

    def get(self, term: str, default: int | None = None) -> int | None:
        tid = self.ids_of([term])[0]
        return default if tid is None else tid

    def __contains__(self, term: object) -> bool:
        return isinstance(term, str) and self.get(term) is not None

    def __getitem__(self, term: str) -> int:
        tid = self.get(term)
        if tid is None:
            raise KeyError(term)
        return tid

    def ids_of(self, terms: Sequence[str]) -> list[int | None]:
        """The id of each of ``terms`` (None for one the table does not hold), hashed and searched
        in one pass: several times faster a term than ``get`` one at a time."""
        recent = self._recent
        out: list[int | None] = [recent.get(t) for t in terms]
        hashes = self._hashes
        missing = [i for i, tid in enumerate(out) if tid is None]
        if not hashes.size or not missing:
            return out
        h = np.fromiter((hash(terms[i]) for i in missing), dtype=np.int64, count=len(missing))
        pos = np.minimum(np.searchsorted(hashes, h), hashes.size - 1)
        sel = np.flatnonzero(hashes[pos] == h)
        if not sel.size:
            return out
        # the first term of each matching hash, checked by its bytes (a second term with the same
        # hash, rare, is looked for after it)
        cand = self._hash_ids[pos[sel]].astype(np.int64)
        off = self._offsets.view
        raw = memoryview(self._bytes.view)
        for j, tid, a, b in zip(sel.tolist(), cand.tolist(), off[cand].tolist(), off[cand + 1].tolist()):
            term = terms[missing[j]]
            out[missing[j]] = tid if raw[a:b] == term.encode("utf-8") else self._probe(term, int(pos[j]) + 1, int(h[j]))
        return out

    def _probe(self, term: str, p: int, h: int) -> int | None:
        """The id of ``term`` among the settled terms whose hash is ``h``, from position ``p`` of
        the hash index on."""
        hashes, want = self._hashes, term.encode("utf-8")
        while p < hashes.size and int(hashes[p]) == h:
            tid = int(self._hash_ids[p])
            if self.term(tid).encode("utf-8") == want:
                return tid
            p += 1
        return None

    def add(self, term: str) -> int:
        """The term's id, given the next one when it is new."""
        return self.add_all([term])[0]

    def add_all(self, terms: Sequence[str]) -> list[int]:
        """The id of each of ``terms``, the new ones given the next ids in order."""
        ids = self.ids_of(terms)
        for i, tid in enumerate(ids):
            if tid is None:
                term = terms[i]
                tid = self._recent.get(term)  # a repeat within ``terms``
                if tid is None:
                    tid = shared_id(len(self))
                    self._recent[term] = tid
                    self._recent_terms.append(term)
                ids[i] = tid
        if len(self._recent_terms) >= max(MIN_RECENT, self._settled // 8):
            self.settle()
        return ids  # type: ignore[return-value]

    def term(self, tid: int) -> str:
        """The term of id ``tid``."""
        if tid >= self._settled:
            return self._recent_terms[tid - self._settled]
        off = self._offsets.view
        return self._bytes.view[int(off[tid]):int(off[tid + 1])].tobytes().decode("utf-8")

    def items(self) -> Iterator[tuple[str, int]]:
        """(term, id) pairs in id order, like a dict's."""
        return ((t, shared_id(i)) for i, t in enumerate(self.terms))

    @property
    def terms(self) -> Sequence[str]:
        """Every term in id order (a read-only view: ``terms[i]``, ``len``, iteration)."""
        return _Terms(self)

    def settle(self) -> None:
        """Fold the newest terms into the arrays."""
        if not self._recent_terms:
            return
        encoded = [t.encode("utf-8") for t in self._recent_terms]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        self._bytes.extend(np.frombuffer(b"".join(encoded), dtype=np.uint8))
        self._offsets.extend(int(self._offsets.view[-1]) + np.cumsum(lengths))
        hashes = np.concatenate([self._hashes, np.fromiter(map(hash, self._recent_terms), dtype=np.int64,
                                                           count=len(self._recent_terms))])
        ids = np.concatenate([self._hash_ids, np.arange(self._settled, len(self), dtype=np.int32)])
        order = np.argsort(hashes, kind="stable")
        self._hashes, self._hash_ids = hashes[order], ids[order]
        self._settled = len(self)
        self._recent, self._recent_terms = {}, []

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (the unsettled dict not counted)."""
        return self._bytes.n + 8 * self._offsets.n + self._hashes.nbytes + self._hash_ids.nbytes


class _Terms(Sequence[str]):
    """The table's terms in id order."""

    def __init__(self, table: TermTable) -> None:
        self._table = table

    def __len__(self) -> int:
        return len(self._table)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self._table.term(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return self._table.term(i)

    def __iter__(self) -> Iterator[str]:
        table = self._table
        off, raw = table._offsets.view, table._bytes.view.tobytes()
        for i in range(table._settled):
            yield raw[int(off[i]):int(off[i + 1])].decode("utf-8")
        yield from list(table._recent_terms)


__all__ = ["MIN_RECENT", "TermTable"]
