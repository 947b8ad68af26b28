"""A vocabulary of terms (str) and their ids, in a few arrays instead of a dict and a list.

A BM25 field's vocabulary held each term as a dict entry, a str object and a list slot: about
115 bytes a term (with the memory graph's entity table, 2.2 KB a SciFact memory). Here the settled terms are their
UTF-8 bytes in one buffer (with an offset each) and a hash index (the terms' hashes sorted, with
their ids): about 24 bytes a term. The newest terms wait in a small dict and are folded into the
arrays once it holds an eighth as many as they do, so adding a term stays O(1) amortised.

Hashes are Python's own ``hash`` of the str, stable for the life of the process only (Python
seeds them anew in each process): a table read back from an index snapshot hashes its terms again
(``__setstate__``). Two terms with the same hash are told apart by their bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from teleo_server.index.columns import Column

# the newest terms stay in a dict until there are this many (or an eighth of the settled ones)
MIN_RECENT = 4096


class TermTable:
    """Terms <-> ids ``0..len-1`` in arrival order: ``get``, ``in``, ``[term]`` and ``add`` like a
    dict of str to int, ``term(id)`` and ``terms`` (a sequence in id order) like the list beside it.

    One writer at a time (the index's own lock); readers may run beside it. The table's state is
    one tuple, replaced whole when the newest terms are settled (after the bytes and offsets it
    refers to are in place): a reader takes it once and sees one consistent table. Between
    settles the writer appends to the tuple's list of newest terms, then to its dict, so an id a
    reader finds there is readable."""

    def __init__(self) -> None:
        self._bytes = Column(np.uint8)      # settled terms' UTF-8 bytes, in id order (append-only)
        self._offsets = Column(np.int32)    # term i is _bytes[_offsets[i]:_offsets[i + 1]] (under 2 GB of terms)
        self._offsets.append(0)
        # (settled terms' hashes ascending, the id of each, how many are settled, the newest terms:
        # term -> id, and those terms in id order)
        self._state: tuple[np.ndarray, np.ndarray, int, dict[str, int], list[str]] = (
            np.zeros(0, np.int64), np.zeros(0, np.int32), 0, {}, [])

    def __len__(self) -> int:
        _, _, settled, _, recent_terms = self._state
        return settled + len(recent_terms)

    def __getstate__(self) -> dict[str, object]:
        """Pickled without the hash index: it holds this process's hashes, which another process
        (a server reading an index snapshot) does not share."""
        _, _, settled, _, recent_terms = self._state
        return {"bytes": self._bytes, "offsets": self._offsets, "settled": settled, "recent_terms": list(recent_terms)}

    def __setstate__(self, state: dict[str, object]) -> None:
        """The terms and ids as pickled, their hash index made again with this process's hashes."""
        self._bytes, self._offsets = state["bytes"], state["offsets"]  # type: ignore[assignment]
        settled: int = state["settled"]  # type: ignore[assignment]
        recent_terms: list[str] = state["recent_terms"]  # type: ignore[assignment]
        off, raw = self._offsets.view, self._bytes.view.tobytes()
        hashes = np.fromiter((hash(raw[a:b].decode("utf-8")) for a, b in zip(off[:settled].tolist(), off[1:settled + 1].tolist())),
                             dtype=np.int64, count=settled)
        order = np.argsort(hashes, kind="stable")
        self._state = (hashes[order], order.astype(np.int32), settled,
                       {t: settled + i for i, t in enumerate(recent_terms)}, recent_terms)

    def get(self, term: str, default: int | None = None) -> int | None:
        """The term's id, or ``default`` (one term; ``ids_of`` for several)."""
        hashes, hash_ids, _, recent, _ = self._state
        tid = recent.get(term)
        if tid is not None:
            return tid
        h = hash(term)
        tid = self._probe(term.encode("utf-8"), hashes, hash_ids, int(hashes.searchsorted(h)), h)
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
        hashes, hash_ids, _, recent, _ = self._state
        out: list[int | None] = [recent.get(t) for t in terms]
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
        cand = hash_ids[pos[sel]].astype(np.int64)
        off = self._offsets.view
        raw = memoryview(self._bytes.view)
        for j, tid, a, b in zip(sel.tolist(), cand.tolist(), off[cand].tolist(), off[cand + 1].tolist()):
            term = terms[missing[j]]
            want = term.encode("utf-8")
            out[missing[j]] = tid if raw[a:b] == want else self._probe(want, hashes, hash_ids, int(pos[j]) + 1,
                                                                        int(h[j]))
        return out

    def _probe(self, want: bytes, hashes: np.ndarray, hash_ids: np.ndarray, p: int, h: int) -> int | None:
        """The id of the settled term whose bytes are ``want`` among those of hash ``h`` from
        position ``p`` of the hash index on (None when none of them is it)."""
        off, raw = self._offsets.view, memoryview(self._bytes.view)
        while p < hashes.size and hashes[p] == h:
            tid = int(hash_ids[p])
            if raw[int(off[tid]):int(off[tid + 1])] == want:
                return tid
            p += 1
        return None

    def add(self, term: str) -> int:
        """The term's id, given the next one when it is new."""
        return self.add_all([term])[0]

    def add_all(self, terms: Sequence[str]) -> list[int]:
        """The id of each of ``terms``, the new ones given the next ids in order (the writer)."""
        ids = self.ids_of(terms)
        _, _, settled, recent, recent_terms = self._state
        for i, tid in enumerate(ids):
            if tid is None:
                term = terms[i]
                tid = recent.get(term)  # a repeat within ``terms``
                if tid is None:
                    # a plain int: the newest terms' dict is emptied at the next settle, and a
                    # list of shared ints as long as the vocabulary would outlive it (36 bytes a term)
                    tid = settled + len(recent_terms)
                    recent_terms.append(term)  # the list first: an id a reader finds is readable
                    recent[term] = tid
                ids[i] = tid
        if len(recent_terms) >= max(MIN_RECENT, settled // 8):
            self.settle()
        return ids  # type: ignore[return-value]

    def term(self, tid: int) -> str:
        """The term of id ``tid``."""
        _, _, settled, _, recent_terms = self._state
        if tid >= settled:
            return recent_terms[tid - settled]
        return self._bytes.view[self._offsets.at(tid):self._offsets.at(tid + 1)].tobytes().decode("utf-8")

    def terms_of(self, ids: Sequence[int]) -> list[str]:
        """The terms of several ids at once (one gather of their offsets)."""
        _, _, settled, _, recent_terms = self._state
        ids = np.asarray(ids, dtype=np.int64)
        old = ids[ids < settled]
        off = self._offsets.view
        raw = memoryview(self._bytes.view)
        decoded = iter([bytes(raw[a:b]).decode("utf-8") for a, b in zip(off[old].tolist(), off[old + 1].tolist())])
        return [next(decoded) if i < settled else recent_terms[i - settled] for i in ids.tolist()]

    def items(self) -> Iterator[tuple[str, int]]:
        """(term, id) pairs in id order, like a dict's."""
        return ((t, i) for i, t in enumerate(self.terms))

    @property
    def terms(self) -> Sequence[str]:
        """Every term in id order (a read-only view: ``terms[i]``, ``len``, iteration)."""
        return _Terms(self)

    def settle(self) -> None:
        """Fold the newest terms into the arrays (the writer)."""
        hashes, hash_ids, settled, _, recent_terms = self._state
        if not recent_terms:
            return
        encoded = [t.encode("utf-8") for t in recent_terms]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        self._bytes.extend(np.frombuffer(b"".join(encoded), dtype=np.uint8))
        self._offsets.extend(int(self._offsets.view[-1]) + np.cumsum(lengths))
        hashes = np.concatenate([hashes, np.fromiter(map(hash, recent_terms), dtype=np.int64, count=len(recent_terms))])
        ids = np.concatenate([hash_ids, np.arange(settled, settled + len(recent_terms), dtype=np.int32)])
        order = np.argsort(hashes, kind="stable")
        self._state = (hashes[order], ids[order], settled + len(recent_terms), {}, [])

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (the unsettled dict not counted)."""
        hashes, hash_ids = self._state[:2]
        return self._bytes.n + 4 * self._offsets.n + hashes.nbytes + hash_ids.nbytes


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
        _, _, settled, _, recent_terms = table._state
        off, raw = table._offsets.view, table._bytes.view.tobytes()
        for i in range(settled):
            yield raw[int(off[i]):int(off[i + 1])].decode("utf-8")
        yield from list(recent_terms)


__all__ = ["MIN_RECENT", "TermTable"]
