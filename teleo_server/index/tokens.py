"""Packed token store for late interaction: CSR offsets over chunk rows plus one code matrix.

Per-token vectors are the largest thing Teleo holds (a SciFact abstract has about 360 word pieces;
at 384 float16 dimensions that is 270 KB a memory). They are kept compact instead:

1. a seeded random orthonormal rotation to ``dim`` dimensions (128 by default), re-normalised;
   random rather than fitted, so nothing has to be learnt from the corpus or stored beside it, and
   every coordinate of a unit vector then has about the same spread, 1/sqrt(dim);
2. each coordinate as a ``bits``-bit code: the Lloyd-Max levels of a Gaussian of that spread, the
   quantiser with the least squared error for such values; codes are packed little-endian into
   bytes (eight 1-bit or four 2-bit codes a byte), so a token costs ``dim * bits / 8`` bytes (32
   at the late-interaction space's defaults, 128 dimensions and 2 bits: 24x less than float16 at
   384 dimensions).

Before the codes, a text's tokens may be pooled (``pool`` > 1): Ward's hierarchical clustering
groups its T vectors into max(ceil(T / pool), min(T, keep)) clusters of similar tokens, and each
cluster is kept as its re-normalised mean (:func:`pool_tokens`; the "token pooling" of Clavie et
al., 2024). Tokens that say nearly the same thing (a word's pieces, repeated words, punctuation)
then cost one row, and MaxSim, which takes each query token's best match, loses little; a short
text (at most ``keep`` tokens), which has few such repeats and few bytes to save, keeps them all.

Scoring decodes only the candidates' tokens (a 256-entry table per byte) and re-normalises them, so
MaxSim still compares unit vectors; the query keeps full precision (asymmetric). ``bits = 16``
keeps float16 tokens (no codes) and ``dim = None`` keeps the model's width.

A codec is named completely by its :class:`~teleo_server.heads.CodecSpec` (bits, dim, input dim,
seed, pool, keep). The database stores a memory's tokens as the same codes (:func:`to_codes`), tagged with
that spec, so a start-up appends them here as they are (:meth:`TokenStore.add` of
:class:`~teleo_server.heads.TokenCodes`); codes of another spec are refused, never decoded as if
they were this store's.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from teleo_server.compute.maxsim import CODE_BITS, decode_codes
from teleo_server.domain import ChunkEmbedding, EmbeddingSet
from teleo_server.heads import CodecSpec, TokenCodes
from teleo_server.index.columns import shrunk
from teleo_server.index.chunks import ranges

RAW_BITS = 16


def codec_spec(dim_in: int, dim: int | None, bits: int, seed: int = 0, pool: int = 1, keep: int = 0) -> CodecSpec:
    """The spec of the codec that ``TokenCodec(dim_in, dim, bits, seed, pool, keep)`` makes (a
    ``dim`` of None, or not below ``dim_in``, keeps the input's width)."""
    return CodecSpec(bits, dim if dim and dim < dim_in else dim_in, dim_in, seed, pool, keep if pool > 1 else 0)


def pool_tokens(tokens: np.ndarray, factor: int, keep: int = 0) -> np.ndarray:
    """One text's unit token vectors float (T, D) pooled to float32 (max(ceil(T / factor),
    min(T, keep)), D).

    Ward's linkage (SciPy's, over Euclidean distances from one matrix product) merges the two
    clusters whose union adds the least squared distance to their means, until that many clusters
    are left; each cluster becomes its mean, re-normalised. Rows come in the order of each
    cluster's first token, so the result is a function of the input alone. ``factor`` 1, or T at
    most ``keep`` (or 1), returns the tokens as float32.
    """
    t = np.asarray(tokens, dtype=np.float32)
    n = t.shape[0]
    rows = max(-(-n // max(factor, 1)), min(n, keep))
    if rows >= n:
        return t
    # only writers pool: keep SciPy's clustering off the import path
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    x = t.astype(np.float64)
    sq = np.einsum("ij,ij->i", x, x)
    dist = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2.0 * (x @ x.T), 0.0))  # BLAS, not pdist
    np.fill_diagonal(dist, 0.0)
    merges = linkage(squareform(dist, checks=False), method="ward")[: n - rows, :2].astype(np.int64)
    parent = np.arange(2 * n - rows)  # clusters n.. are the merges, in order; each is merged once
    parent[merges[:, 0]] = parent[merges[:, 1]] = np.arange(n, 2 * n - rows)
    # a token's cluster is the last merge above it: follow parents to the top (depth <= n - rows)
    root = parent[:n]
    while True:
        up = parent[root]
        if np.array_equal(up, root):
            break
        root = up
    _, first, label = np.unique(root, return_index=True, return_inverse=True)
    place = np.argsort(np.argsort(first))  # each cluster's place, by its first token
    means = np.zeros((first.size, t.shape[1]), np.float32)
    np.add.at(means, place[label], t)
    means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
    return means


def projection(dim_in: int, dim_out: int, seed: int = 0) -> np.ndarray:
    """Seeded random orthonormal projection float32 (dim_in, dim_out); preserves inner products
    up to a common scale, so MaxSim rankings survive (its quality cost is measured by ``make eval``)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((dim_in, dim_out)))
    return q.astype(np.float32)


@functools.cache
def gaussian_levels(bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd-Max quantiser of N(0, 1) with 2**bits levels: (levels float64 (L,), thresholds (L-1,)).

    Lloyd's iteration on a fine grid of the density: thresholds halfway between levels, each
    level the mean of its cell. Deterministic; 1 bit gives the known +-0.798, 2 bits +-0.453 / +-1.510.
    """
    n = 1 << bits
    x = np.linspace(-6.0, 6.0, 24001)
    p = np.exp(-0.5 * x * x)
    levels = np.linspace(-2.0, 2.0, n) if n > 1 else np.zeros(1)
    for _ in range(300):
        thresholds = (levels[1:] + levels[:-1]) / 2
        cell = np.searchsorted(thresholds, x)
        mass = np.bincount(cell, weights=p, minlength=n)
        moved = np.bincount(cell, weights=p * x, minlength=n) / np.maximum(mass, 1e-300)
        if np.allclose(moved, levels, atol=1e-10):
            break
        levels = moved
    levels = (levels - levels[::-1]) / 2  # exactly symmetric
    return levels, (levels[1:] + levels[:-1]) / 2


class TokenCodec:
    """Rotation to ``dim`` dimensions, pooling (``pool`` > 1), then ``bits``-bit Gaussian codes per
    coordinate.

    ``encode`` float (T, D_in) -> codes uint8 (T', width) (float16 (T', dim) when bits = 16), T' =
    max(ceil(T / pool), min(T, keep)) (T without pooling);
    ``decode`` codes -> float32 (T, dim), L2-normalised; ``transform`` is the query side (rotation
    and re-normalisation only).
    """

    def __init__(self, dim_in: int, dim: int | None = None, bits: int = RAW_BITS, seed: int = 0,
                 pool: int = 1, keep: int = 0) -> None:
        if bits not in CODE_BITS and bits != RAW_BITS:
            raise ValueError(f"bits must be one of {CODE_BITS} or {RAW_BITS}, got {bits}")
        self.dim_in = dim_in
        self.seed = seed
        self.pool = pool
        self.keep = keep if pool > 1 else 0
        self.proj = projection(dim_in, dim, seed) if dim and dim < dim_in else None
        self.dim = self.proj.shape[1] if self.proj is not None else dim_in
        self.bits = bits
        if bits == RAW_BITS:
            self.width, self.dtype = self.dim, np.dtype(np.float16)
        else:
            per_byte = 8 // bits
            if self.dim % per_byte:
                raise ValueError(f"dim {self.dim} must be a multiple of {per_byte} for {bits}-bit codes")
            self.width, self.dtype = self.dim // per_byte, np.dtype(np.uint8)
            levels, thresholds = gaussian_levels(bits)
            spread = 1.0 / np.sqrt(self.dim)
            self._thresholds = (thresholds * spread).astype(np.float32)
            self.levels = (levels * spread).astype(np.float32)  # the value of each code
            self._shifts = (bits * np.arange(per_byte)).astype(np.uint8)
        _ = self.spec  # CodecSpec refuses a pool or a floor out of range

    @classmethod
    @functools.lru_cache(maxsize=16)
    def of(cls, spec: CodecSpec) -> TokenCodec:
        """The codec ``spec`` names (shared: a codec holds no state once made)."""
        return cls(spec.dim_in, spec.dim, spec.bits, spec.seed, spec.pool, spec.keep)

    @property
    def spec(self) -> CodecSpec:
        return CodecSpec(self.bits, self.dim, self.dim_in, self.seed, self.pool, self.keep)

    @property
    def identity(self) -> bool:
        """Codes equal the float16 input (16 bits, no rotation, no pooling): nothing to gain by
        storing them."""
        return self.bits == RAW_BITS and self.proj is None and self.pool == 1

    @property
    def bytes_per_token(self) -> int:
        return self.width * self.dtype.itemsize

    def transform(self, tokens: np.ndarray) -> np.ndarray:
        """Rotate (when configured) and re-normalise float (T, D_in) -> float32 (T, dim)."""
        t = np.asarray(tokens, dtype=np.float32)
        if self.proj is not None:
            t = t @ self.proj
            t /= np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
        return t

    def encode(self, tokens: np.ndarray) -> np.ndarray:
        """One text's tokens (the document side: a query is only transformed) as stored rows."""
        t = self.transform(tokens)
        if self.pool > 1:
            t = pool_tokens(t, self.pool, self.keep)
        if self.bits == RAW_BITS:
            return t.astype(np.float16)
        codes = np.searchsorted(self._thresholds, t).astype(np.uint8)          # (T, dim)
        per_byte = 8 // self.bits
        grouped = codes.reshape(t.shape[0], self.width, per_byte) << self._shifts
        return np.bitwise_or.reduce(grouped, axis=2).astype(np.uint8)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        if self.bits == RAW_BITS:
            return np.asarray(codes, dtype=np.float32)
        return decode_codes(codes, self.bits, self.levels)


class TokenStore:
    """Tokens of chunk row ``r`` are ``codes[offsets[r]:offsets[r + 1]]``.

    offsets: int64 (n_chunks + 1,); codes: the codec's stored form (T, width). The codec is made
    at the first non-empty add, when the model's width is known.
    """

    def __init__(self, dim_out: int | None = None, seed: int = 0, bits: int = RAW_BITS, pool: int = 1,
                 keep: int = 0) -> None:
        self.dim_out = dim_out
        self.bits = bits
        self.pool = pool
        self.keep = keep
        self._seed = seed
        self.codec: TokenCodec | None = None
        self.dim: int | None = None
        self._offsets = np.zeros(64, dtype=np.int64)
        self.n = 0
        self._codes: np.ndarray | None = None
        self.n_tokens = 0
        self._offsets_view: np.ndarray | None = None
        self._codes_view: np.ndarray | None = None
        if bits != RAW_BITS or pool != 1:
            TokenCodec(max(dim_out or 8, 8), dim_out, bits, pool=pool, keep=keep)  # reject a bad codec now

    @property
    def offsets(self) -> np.ndarray:
        # one view object between writes, made once a write rather than at every read
        if self._offsets_view is None or self._offsets_view.shape[0] != self.n + 1 or self._offsets_view.base is not self._offsets:
            self._offsets_view = self._offsets[: self.n + 1]
        return self._offsets_view

    @property
    def codes(self) -> np.ndarray:
        assert self._codes is not None
        if self._codes_view is None or self._codes_view.shape[0] != self.n_tokens or self._codes_view.base is not self._codes:
            self._codes_view = self._codes[: self.n_tokens]
        return self._codes_view

    @property
    def raw(self) -> bool:
        """Tokens are stored as float16 vectors (no codes): kernels can read them in place."""
        return self.bits == RAW_BITS

    @property
    def tokens(self) -> np.ndarray:
        """Every stored token as float16 (T, dim): the store itself when raw, else decoded (a copy)."""
        return self.codes if self.raw else self.vectors(0, self.n_tokens).astype(np.float16)

    @property
    def nbytes(self) -> int:
        return self.n_tokens * (self.codec.bytes_per_token if self.codec else 0) + 8 * (self.n + 1)

    def transform(self, tokens: np.ndarray) -> np.ndarray:
        """The query side: rotate (when configured) and re-normalise float (T, D) -> float32 (T, dim)."""
        if self.codec is None:
            return np.asarray(tokens, dtype=np.float32)
        return self.codec.transform(tokens)

    def vectors(self, lo: int, hi: int) -> np.ndarray:
        """Decoded tokens float32 (hi - lo, dim) of token positions [lo, hi)."""
        assert self.codec is not None
        return self.codec.decode(self.codes[lo:hi])

    def spec(self, dim_in: int) -> CodecSpec:
        """The codec this store keeps tokens of width ``dim_in`` in."""
        if self.codec is not None and self.codec.dim_in == dim_in:
            return self.codec.spec
        return codec_spec(dim_in, self.dim_out, self.bits, self._seed, self.pool, self.keep)

    def codec_for(self, dim_in: int) -> TokenCodec:
        """The codec this store keeps tokens of width ``dim_in`` in (its own once it has one)."""
        if self.codec is not None and self.codec.dim_in == dim_in:
            return self.codec
        return TokenCodec.of(self.spec(dim_in))

    def add(self, row: int, tokens: np.ndarray | TokenCodes) -> None:
        """Append the tokens of chunk ``row``: float (T, D), encoded here, or codes of this store's
        codec, appended as they are (rows without tokens are appended empty). ValueError for
        codes of another codec: they would be read as different vectors."""
        if isinstance(tokens, TokenCodes):
            codes = self._check_codes(tokens)
        else:
            tokens = np.asarray(tokens)
            if self.codec is None and tokens.size:
                self._start(tokens.shape[1])
            codes = self.codec.encode(tokens) if tokens.size and self.codec is not None else None
        while self.n < row:
            self._append(None)
        self._append(codes)

    def _start(self, dim_in: int) -> None:
        self.dim = dim_in
        self.codec = self.codec_for(dim_in)
        self._codes = np.zeros((1024, self.codec.width), dtype=self.codec.dtype)

    def _check_codes(self, tokens: TokenCodes) -> np.ndarray | None:
        want = self.codec.spec if self.codec is not None else self.spec(tokens.spec.dim_in)
        if tokens.spec != want:
            raise ValueError(f"tokens coded as {tokens.spec.tag} cannot join a store of {want.tag}")
        if not tokens.rows:
            return None
        if self.codec is None:
            self._start(tokens.spec.dim_in)
        return tokens.data

    def _append(self, codes: np.ndarray | None) -> None:
        if self.n + 2 > self._offsets.size:
            self._offsets = np.concatenate([self._offsets, np.zeros_like(self._offsets)])
        count = 0 if codes is None else codes.shape[0]
        if count:
            assert self._codes is not None
            need = self.n_tokens + count
            if need > self._codes.shape[0]:
                # grow by half: the unused tail is never written, so it is not resident either
                grown = np.zeros((max(need, self._codes.shape[0] * 3 // 2), self._codes.shape[1]), dtype=self._codes.dtype)
                grown[: self.n_tokens] = self._codes[: self.n_tokens]
                self._codes = grown
            self._codes[self.n_tokens : need] = codes
            self.n_tokens = need
        self.n += 1
        self._offsets[self.n] = self.n_tokens

    def fit(self) -> None:
        """Shrink the buffers to what they hold (after a bulk load: growth leaves a spare third, and
        a buffer the heap handed out is resident whether written or not); the next ``add`` grows
        them again."""
        self._offsets_view = self._codes_view = None
        if self._offsets.size > self.n + 1:
            self._offsets = shrunk(self._offsets, self.n + 1)
        if self._codes is not None and self._codes.shape[0] > max(self.n_tokens, 1):
            self._codes = shrunk(self._codes, self.n_tokens)

    def compact(self, keep_chunks: np.ndarray) -> None:
        if self._codes is None:
            self.n = keep_chunks.size
            self._offsets = np.zeros(max(64, self.n + 1), dtype=np.int64)
            return
        offsets = self.offsets
        starts, ends = offsets[keep_chunks], offsets[keep_chunks + 1]
        lens = ends - starts
        total = int(lens.sum())
        kept = self._codes[ranges(starts, lens)]
        self._codes = np.zeros((max(1024, total), kept.shape[1]), dtype=kept.dtype)
        self._codes[:total] = kept
        self.n_tokens = total
        self.n = keep_chunks.size
        self._offsets = np.zeros(max(64, self.n + 1), dtype=np.int64)
        self._offsets[1 : self.n + 1] = np.cumsum(lens)

    def count(self, rows: np.ndarray) -> np.ndarray:
        return self.offsets[rows + 1] - self.offsets[rows]

    def maxsim(self, ops: Any, query: np.ndarray, chunks: np.ndarray) -> np.ndarray:
        """Unnormalised MaxSim float32 (C,) of chunk rows ``chunks`` (each in [0, n)) for a query
        already through :meth:`transform`. Raw stores are scored in place by the backend's kernel;
        coded ones by its code kernel, which decodes just the candidates' tokens (float32: no
        second rounding)."""
        chunks = np.asarray(chunks, dtype=np.int64).astype(np.int32)
        if self.raw:
            return ops.maxsim(query, self.offsets, self.codes, chunks)
        assert self.codec is not None
        return np.asarray(ops.maxsim_codes(query, self.offsets, self.codes, self.bits, self.codec.levels, chunks),
                          dtype=np.float32)


def to_codes(emb: EmbeddingSet, codecs: Mapping[str, TokenCodec]) -> EmbeddingSet:
    """``emb`` with the float tokens of every head in ``codecs`` as that codec's codes: the form the
    database stores them in, and the index takes as they are. Heads a codec leaves unchanged
    (``identity``), codes already, and every other head pass through."""
    coded = {h: c for h, c in codecs.items() if not c.identity}
    if not coded or not any(h in ch.vectors for ch in emb.chunks for h in coded):
        return emb
    chunks = []
    for ch in emb.chunks:
        vectors = dict(ch.vectors)
        for head, codec in coded.items():
            v = vectors.get(head)
            if isinstance(v, np.ndarray) and v.ndim == 2 and v.shape[1] == codec.dim_in:
                vectors[head] = TokenCodes(codec.encode(v), codec.spec)
        chunks.append(ChunkEmbedding(vectors, ch.start, ch.end))
    return EmbeddingSet(emb.model_version, chunks)


__all__ = ["CODE_BITS", "RAW_BITS", "TokenCodec", "TokenStore", "codec_spec", "gaussian_levels", "pool_tokens",
           "projection", "to_codes"]
