"""Packed token store for late interaction: CSR offsets over chunk rows plus one fp16 matrix."""

from __future__ import annotations

import numpy as np


def projection(dim_in: int, dim_out: int, seed: int = 0) -> np.ndarray:
    """Seeded random orthonormal projection float32 (dim_in, dim_out); preserves inner products
    up to a common scale, so MaxSim rankings survive (its quality cost is measured by ``make eval``)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((dim_in, dim_out)))
    return q.astype(np.float32)


class TokenStore:
    """Tokens of chunk row ``r`` are ``tokens[offsets[r]:offsets[r + 1]]``.

    offsets: int64 (n_chunks + 1,); tokens: float16 (T, D'), L2-normalised after the optional
    projection to D' dimensions.
    """

    def __init__(self, dim_out: int | None = None, seed: int = 0) -> None:
        self.dim_out = dim_out
        self._seed = seed
        self._proj: np.ndarray | None = None
        self.dim: int | None = None
        self._offsets = np.zeros(64, dtype=np.int64)
        self.n = 0
        self._tokens: np.ndarray | None = None
        self.n_tokens = 0
        self._offsets_view: np.ndarray | None = None
        self._tokens_view: np.ndarray | None = None

    @property
    def offsets(self) -> np.ndarray:
        # stable view objects between writes: device backends mirror host arrays by identity
        if self._offsets_view is None or self._offsets_view.shape[0] != self.n + 1 or self._offsets_view.base is not self._offsets:
            self._offsets_view = self._offsets[: self.n + 1]
        return self._offsets_view

    @property
    def tokens(self) -> np.ndarray:
        assert self._tokens is not None
        if self._tokens_view is None or self._tokens_view.shape[0] != self.n_tokens or self._tokens_view.base is not self._tokens:
            self._tokens_view = self._tokens[: self.n_tokens]
        return self._tokens_view

    def transform(self, tokens: np.ndarray) -> np.ndarray:
        """Project (when configured) and re-normalise float (T, D) -> float32 (T, D')."""
        t = np.asarray(tokens, dtype=np.float32)
        if self._proj is not None:
            t = t @ self._proj
            t /= np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
        return t

    def add(self, row: int, tokens: np.ndarray) -> None:
        """Append the tokens float (T, D) of chunk ``row`` (rows without tokens are appended empty)."""
        tokens = np.asarray(tokens)
        if self._tokens is None and tokens.size:
            self.dim = tokens.shape[1]
            if self.dim_out and self.dim_out < self.dim:
                self._proj = projection(self.dim, self.dim_out, self._seed)
            width = self._proj.shape[1] if self._proj is not None else self.dim
            self._tokens = np.zeros((1024, width), dtype=np.float16)
        while self.n < row:
            self._append(np.zeros((0, 1), dtype=np.float32))
        self._append(self.transform(tokens) if tokens.size else np.zeros((0, 1), dtype=np.float32))

    def _append(self, t: np.ndarray) -> None:
        if self.n + 2 > self._offsets.size:
            self._offsets = np.concatenate([self._offsets, np.zeros_like(self._offsets)])
        count = t.shape[0]
        if count:
            assert self._tokens is not None
            need = self.n_tokens + count
            if need > self._tokens.shape[0]:
                grown = np.zeros((max(need, 2 * self._tokens.shape[0]), self._tokens.shape[1]), dtype=np.float16)
                grown[: self.n_tokens] = self._tokens[: self.n_tokens]
                self._tokens = grown
            self._tokens[self.n_tokens : need] = t
            self.n_tokens = need
        self.n += 1
        self._offsets[self.n] = self.n_tokens

    def compact(self, keep_chunks: np.ndarray) -> None:
        if self._tokens is None:
            self.n = keep_chunks.size
            self._offsets = np.zeros(max(64, self.n + 1), dtype=np.int64)
            return
        offsets = self.offsets
        starts, ends = offsets[keep_chunks], offsets[keep_chunks + 1]
        lens = ends - starts
        total = int(lens.sum())
        first = np.cumsum(lens) - lens
        pos = np.arange(total, dtype=np.int64) - np.repeat(first - starts, lens)
        kept = self._tokens[pos]
        self._tokens = np.zeros((max(1024, total), kept.shape[1]), dtype=np.float16)
        self._tokens[:total] = kept
        self.n_tokens = total
        self.n = keep_chunks.size
        self._offsets = np.zeros(max(64, self.n + 1), dtype=np.int64)
        self._offsets[1 : self.n + 1] = np.cumsum(lens)

    def count(self, rows: np.ndarray) -> np.ndarray:
        return self.offsets[rows + 1] - self.offsets[rows]


__all__ = ["TokenStore", "projection"]
