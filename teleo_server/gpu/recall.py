"""Sparse recall on the device: the BM25 and SPLADE spaces' scores of every memory stay in device
memory, are blended there as ``pipeline.recall`` blends them on the host, and only the top rows
and, later, the candidates' scores cross the bus (a query whose terms reach most of a million
memories would otherwise send two score vectors of a million and blend them on the host).

Every function takes the runtime its arrays live on (``"cuda"`` or ``"emulated"``) and runs there.
The arithmetic is the host's, operation for operation in float32, so the same rows come out
(``tests/test_backend_agreement.py`` compares the whole pipeline).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teleo_server.gpu import runtime
from teleo_server.gpu._checks import pack_mask
from teleo_server.gpu.topk import topk_device


def _bits(xp: Any, words: Any, n: int) -> Any:
    """device bool (n,) of a row bitset."""
    at = xp.arange(n, dtype=xp.int64)
    return ((words[at >> 5] >> (at & 31).astype(xp.uint32)) & 1).astype(bool)


def fit(runtime_name: str, scores: Any, n: int) -> Any:
    """Device float32 (n,): ``scores`` cut or padded with 0 to ``n`` rows (rows an index does not
    hold yet score 0)."""
    with runtime.use(runtime_name) as rt:
        xp = rt.xp
        if scores.shape[0] == n:
            return scores
        out = xp.zeros(n, dtype=xp.float32)
        m = min(n, int(scores.shape[0]))
        out[:m] = scores[:m]
        return out


class DeviceColumn:
    """A device copy of a host int column that only grows until its owner drops the copy (the
    catalog's chunk -> memory map between compactions): each :meth:`view` sends only the values
    appended since the last one, into a device buffer with room to grow."""

    def __init__(self, runtime_name: str) -> None:
        self.runtime = runtime_name
        self._buf: Any = None
        self.n = 0

    def view(self, host: np.ndarray) -> Any:
        """Device int64 (len(host),): ``host`` as it is now, whose first ``n`` values are those sent
        before (the owner drops this copy when they change)."""
        with runtime.use(self.runtime) as rt:
            xp = rt.xp
            need = int(host.shape[0])
            if self._buf is None or self._buf.shape[0] < need:
                grown = xp.zeros(max(need, 2 * self.n, 1024), dtype=xp.int64)
                if self._buf is not None:
                    grown[: self.n] = self._buf[: self.n]
                self._buf = grown
            if need > self.n:
                self._buf[self.n:need] = xp.asarray(np.asarray(host[self.n:need], np.int64))
            self.n = max(self.n, need)
            return self._buf[:need]


def fold_chunks(runtime_name: str, chunk_scores: Any, chunk_rows: Any | None, n_chunks: int, n_rows: int) -> Any:
    """Device float32 (n_rows,): each memory's best chunk score, 0 where it has none above 0, from
    device chunk scores (0 where none) and the device map chunk row -> memory row (``chunk_rows``,
    (n_chunks,); None when every memory has exactly one chunk, chunk row r being memory row r):
    ``fold_rows`` on the host."""
    with runtime.use(runtime_name) as rt:
        xp = rt.xp
        scores = fit(runtime_name, chunk_scores, n_chunks)
        if chunk_rows is None:
            return xp.maximum(scores, xp.float32(0.0))
        out = xp.zeros(n_rows, dtype=xp.float32)
        if xp is np:
            np.maximum.at(out, chunk_rows, scores)
        else:
            import cupyx

            cupyx.scatter_max(out, chunk_rows, scores)
        return out


def blend_top(runtime_name: str, parts: list[tuple[Any, float]], admitted: np.ndarray, k: int) -> np.ndarray:
    """Host int64 rows: the best ``k`` admitted rows by ``sum(weight * scores / best)`` over
    ``parts`` (device float32 (n,) each), each space scaled by its best admitted row (left as it
    is when that is not positive), among rows whose blend is above 0; ties by ascending row.
    ``admitted``: host bool (n,), sent as a bitset."""
    with runtime.use(runtime_name) as rt:
        xp = rt.xp
        n = int(admitted.shape[0])
        words = xp.asarray(pack_mask(admitted))
        where = None if admitted.all() else _bits(xp, words, n)
        blend = None
        for scores, weight in parts:
            best = float((scores if where is None else scores * where).max()) if n else 0.0
            normed = scores / xp.float32(best) if best > 0 else scores
            term = xp.float32(weight) * normed
            blend = term if blend is None else blend + term
        if blend is None or n == 0:
            return np.zeros(0, np.int64)
        ids, _, count = topk_device(xp.ascontiguousarray(blend, dtype=xp.float32), k, mask=words, floor=0.0)
        return rt.to_host(ids[: int(count)]).astype(np.int64)


def gather(runtime_name: str, scores: Any, rows: np.ndarray) -> np.ndarray:
    """Host float32 (len(rows),): device ``scores`` at ``rows``, NaN where 0 or below (not
    reached), as the host stage reads a space's scores."""
    with runtime.use(runtime_name) as rt:
        got = rt.to_host(scores[rt.xp.asarray(np.asarray(rows, np.int64))]).astype(np.float32)
        return np.where(got > 0, got, np.nan).astype(np.float32)


__all__ = ["DeviceColumn", "blend_top", "fit", "fold_chunks", "gather"]
