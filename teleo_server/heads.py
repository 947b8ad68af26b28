"""Embedding heads: the named vectors a memory's text is embedded into, declared in one place.

A head has a name, a kind, a width and a dtype:

* ``dense``  — one vector per chunk, float (``dim``,);
* ``tokens`` — one vector per word piece of the chunk, float (T, ``dim``), T >= 0;
* ``sparse`` — vocabulary terms: :class:`SparseVector` (int32 ids ascending, float32 weights);
  ``dim`` bounds the ids (the vocabulary size), 0 for no bound.

A per-token head may also travel in a codec's compact form, :class:`TokenCodes` (the codes the
late-interaction index keeps, described completely by a :class:`CodecSpec`): that is how the store
keeps it and how ``Export`` carries it. Only the space that owns the codec can read them.

The store, the embedding wire format, Triton's ``teleo_embed`` outputs and the public
``QueryVectors`` all follow this registry. Heads made by the ONNX models (``dense``, ``tokens``,
``splade``) are declared below and computed by :mod:`teleo_server.embedding.engine`; a head computed
in Python carries its own ``encode`` and is computed beside them by every embedder. Adding a head is
one module that calls :func:`register_head` (loaded with the ``plugins`` setting when it lives
outside the package), plus a space that reads it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from teleo_server.errors import InvalidArgument


class HeadKind(str, enum.Enum):
    DENSE = "dense"
    TOKENS = "tokens"
    SPARSE = "sparse"


@dataclass(frozen=True, slots=True)
class SparseVector:
    """Vocabulary terms of one chunk: int32 ids (ascending) and float32 weights (float16 as stored),
    equal lengths."""

    ids: np.ndarray
    weights: np.ndarray

    @classmethod
    def of(cls, ids, weights) -> SparseVector:
        return cls(np.ascontiguousarray(ids, dtype=np.int32),
                   np.ascontiguousarray(weights, dtype=np.float32))

    @property
    def size(self) -> int:
        return int(self.ids.size)


@dataclass(frozen=True, slots=True)
class SparseCodes:
    """A sparse vector as an int8-coded index keeps it: int32 term ids (ascending), int8 codes and
    one float32 step, the values being ``codes x step`` (``weights``, float32). Read through
    ``ids``, ``weights`` and ``size`` it is the :class:`SparseVector` of those values, so a backend
    that does not keep codes takes it as one; one that does keeps a byte a value."""

    ids: np.ndarray
    codes: np.ndarray
    step: np.float32

    @classmethod
    def of(cls, ids, codes, step) -> SparseCodes:
        return cls(np.ascontiguousarray(ids, dtype=np.int32), np.ascontiguousarray(codes, dtype=np.int8),
                   np.float32(step))

    @property
    def weights(self) -> np.ndarray:
        return self.codes.astype(np.float32) * self.step

    @property
    def size(self) -> int:
        return int(self.ids.size)


# "code{bits}x{dim}:{dim_in}:s{seed}[:p{pool}[m{keep}]]", e.g. "code2x128:384:s0:p3m64"
# ("code2x128:384:s0": pool 1; "...:p3": pool 3 with no floor)
_CODEC_TAG = re.compile(r"code(\d+)x(\d+):(\d+):s(\d+)(?::p(\d+)(?:m(\d+))?)?")
CODEC_BITS = (1, 2, 4, 8, 16)
MAX_POOL = 8
MAX_POOL_KEEP = 4096


@dataclass(frozen=True, slots=True)
class CodecSpec:
    """A per-token codec, named completely: ``dim_in``-wide vectors rotated by the seeded random
    orthonormal matrix of ``seed`` to ``dim`` dimensions, re-normalised, then each coordinate as a
    ``bits``-bit Gaussian code packed little-endian into bytes (``bits = 16``: float16 values).
    ``pool`` > 1: a text's T tokens are first clustered into max(ceil(T / pool), min(T, keep))
    groups of similar vectors and each group kept as its mean (``index.tokens.pool_tokens``): a
    text of at most ``keep`` tokens keeps them all. The rows are then those means, so codes made
    with another ``pool`` or ``keep`` are other vectors even where the bytes would fit.

    ``tag`` (``"code2x128:384:s0:p3m64"``; no ``:p`` part for pool 1, no ``m`` for keep 0) is how
    the store's ``dtype`` column and an export name it; ``width`` values of ``dtype`` make one
    token's row.
    """

    bits: int
    dim: int
    dim_in: int
    seed: int = 0
    pool: int = 1
    keep: int = 0

    def __post_init__(self) -> None:
        if self.bits not in CODEC_BITS:
            raise ValueError(f"codec bits must be one of {CODEC_BITS}, got {self.bits}")
        if not 0 < self.dim <= self.dim_in or (self.bits < 16 and self.dim % (8 // self.bits)):
            raise ValueError(f"codec of {self.bits} bits cannot map {self.dim_in} to {self.dim} dimensions")
        if not 1 <= self.pool <= MAX_POOL:
            raise ValueError(f"codec pool factor must be 1 to {MAX_POOL}, got {self.pool}")
        if not 0 <= self.keep <= MAX_POOL_KEEP or (self.keep and self.pool == 1):
            raise ValueError(f"codec pool floor must be 0 to {MAX_POOL_KEEP}, and 0 without pooling; got {self.keep}")

    @property
    def tag(self) -> str:
        pooled = (f":p{self.pool}" + (f"m{self.keep}" if self.keep else "")) if self.pool > 1 else ""
        return f"code{self.bits}x{self.dim}:{self.dim_in}:s{self.seed}{pooled}"

    @property
    def unpooled(self) -> CodecSpec | None:
        """This codec without pooling, whose codes of a chunk of at most ``keep`` tokens this one
        takes as they are (``takes``); None when this codec does not pool."""
        return CodecSpec(self.bits, self.dim, self.dim_in, self.seed) if self.pool > 1 else None

    def takes(self, other: CodecSpec, rows: int) -> bool:
        """Whether ``rows`` token rows that ``other`` coded are exactly what this codec makes of the
        same text: the same codec, or the same codec without pooling when this one keeps a chunk of
        ``rows`` tokens whole (``rows`` at most ``keep``), as it does most chat turns."""
        if other == self:
            return True
        return rows <= self.keep and other == self.unpooled

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float16 if self.bits == 16 else np.uint8)

    @property
    def width(self) -> int:
        return self.dim if self.bits == 16 else self.dim * self.bits // 8

    @staticmethod
    def is_tag(text: str) -> bool:
        """Whether ``text`` claims to be a codec tag (rather than a numpy dtype name)."""
        return text.startswith("code")

    @classmethod
    def parse(cls, tag: str) -> CodecSpec:
        """The codec a tag names; ValueError when it names none."""
        m = _CODEC_TAG.fullmatch(tag)
        if m is None:
            raise ValueError(f"{tag[:64]!r} is not a token codec (expected e.g. 'code2x128:384:s0:p3m64')")
        bits, dim, dim_in, seed = (int(g) for g in m.groups()[:4])
        pool = int(m.group(5)) if m.group(5) is not None else 1
        keep = int(m.group(6)) if m.group(6) is not None else 0
        spec = cls(bits, dim, dim_in, seed, pool, keep)
        if spec.tag != tag:  # one tag a codec: no ":p1", no "m0", no leading zeros
            raise ValueError(f"{tag[:64]!r} is not a token codec: it is written {spec.tag!r}")
        return spec


@dataclass(frozen=True, slots=True)
class TokenCodes:
    """A per-token head's vectors of one chunk as ``spec``'s codes: ``data`` (rows, spec.width)
    of ``spec.dtype``, exactly what the late-interaction index holds for them."""

    data: np.ndarray
    spec: CodecSpec

    @classmethod
    def of(cls, data: bytes | np.ndarray, rows: int, spec: CodecSpec) -> TokenCodes:
        """From raw bytes (a stored row, an export) or an array; ValueError when the size is not
        ``rows`` rows of the codec's width."""
        flat = np.frombuffer(data, dtype=spec.dtype) if isinstance(data, bytes) else np.asarray(data, spec.dtype)
        if rows < 0 or flat.size != rows * spec.width:
            raise ValueError(f"{flat.size} values are not {rows} rows of {spec.width} ({spec.tag})")
        return cls(np.ascontiguousarray(flat.reshape(rows, spec.width)), spec)

    @property
    def rows(self) -> int:
        return int(self.data.shape[0])


Vector = np.ndarray | SparseVector | TokenCodes
# encode(chunk texts, is_query per text) -> one vector per text
Encode = Callable[[Sequence[str], Sequence[bool]], list[Vector]]


@dataclass(frozen=True, slots=True)
class Head:
    """One named head. ``encode`` is None for heads made by the model repository's models."""

    name: str
    kind: HeadKind
    dim: int
    dtype: str = "float32"
    description: str = ""
    encode: Encode | None = field(default=None, compare=False)
    version: str = ""   # part of the model version of a Python head: bump when its vectors change

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name.lower() != self.name:
            raise ValueError(f"head name {self.name!r} must be a lower-case identifier")
        if self.kind is not HeadKind.SPARSE and self.dim <= 0:
            raise ValueError(f"head {self.name!r}: dim must be > 0")
        if np.dtype(self.dtype).kind != "f":
            raise ValueError(f"head {self.name!r}: dtype {self.dtype!r} is not a float type")

    def coerce(self, value, where: str) -> Vector:
        """``value`` as this head's vector type, or InvalidArgument (field ``where``) naming what
        is wrong with it: a caller-supplied vector is checked here before any index sees it."""
        if self.kind is HeadKind.SPARSE:
            if not isinstance(value, SparseVector):
                raise InvalidArgument("a sparse head needs ids and weights", field=where)
            ids = np.asarray(value.ids)
            weights = np.asarray(value.weights, dtype=np.float32)
            if ids.shape != weights.shape or ids.ndim != 1:
                raise InvalidArgument(f"ids ({ids.size}) and weights ({weights.size}) differ in "
                                      "length", field=where)
            if not np.all(np.isfinite(weights)) or np.any(weights < 0):
                raise InvalidArgument("weights must be finite and >= 0", field=where)
            if ids.size and (ids.min() < 0 or (self.dim and ids.max() >= self.dim)):
                raise InvalidArgument(f"ids must be in [0, {self.dim or 2**31 - 1})", field=where)
            order = np.argsort(ids, kind="stable")
            if ids.size and np.any(np.diff(ids[order]) == 0):
                raise InvalidArgument("ids must not repeat", field=where)
            return SparseVector.of(ids[order], weights[order])
        array = np.asarray(value, dtype=np.float32)
        want = "(dim,)" if self.kind is HeadKind.DENSE else "(n, dim)"
        if array.ndim != (1 if self.kind is HeadKind.DENSE else 2) or array.shape[-1] != self.dim:
            raise InvalidArgument(f"has shape {array.shape}; head {self.name!r} takes {want} with "
                                  f"dim = {self.dim}", field=where)
        if not np.all(np.isfinite(array)):
            raise InvalidArgument("must be finite", field=where)
        return np.ascontiguousarray(array, dtype=self.dtype)


_HEADS: dict[str, Head] = {}
# names whose tensors would collide with the wire format's own (see embedding.wire)
_RESERVED = {"chunk_count", "chunk_span", "model_version", "text", "role"}


def register_head(head: Head) -> Head:
    """Declare a head; a second head with the same name is an error."""
    if head.name in _HEADS or head.name in _RESERVED:
        raise ValueError(f"embedding head {head.name!r} is registered twice or reserved")
    taken = {f"{h.name}_{suffix}" for h in _HEADS.values() for suffix in ("count", "ids", "weights")}
    if head.name in taken:
        raise ValueError(f"embedding head {head.name!r} collides with another head's tensors")
    _HEADS[head.name] = head
    return head


def unregister_head(name: str) -> None:
    """Remove a head (for plugins and tests); embedders built earlier keep theirs."""
    _HEADS.pop(name, None)


def heads() -> dict[str, Head]:
    """Every registered head by name, in registration order (model heads first)."""
    return dict(_HEADS)


def get_head(name: str, where: str = "head") -> Head:
    try:
        return _HEADS[name]
    except KeyError:
        raise InvalidArgument(f"unknown embedding head {name!r}; known: {sorted(_HEADS)}",
                              field=where) from None


def python_heads() -> list[Head]:
    """Heads computed in Python beside the models, in registration order."""
    return [h for h in _HEADS.values() if h.encode is not None]


def heads_signature() -> str:
    """The Python heads' part of a model version ("" when there are none, so the models' version
    is unchanged)."""
    return "".join(f"+{h.name}.{h.version or '0'}" for h in python_heads())


# The model repository's heads (teleo_server.embedding.models computes them).
DENSE = register_head(Head("dense", HeadKind.DENSE, 384, "float32",
                           "MiniLM sentence vector, L2-normalised"))
TOKENS = register_head(Head("tokens", HeadKind.TOKENS, 384, "float16",
                            "MiniLM per-word-piece vectors, L2-normalised"))
SPLADE = register_head(Head("splade", HeadKind.SPARSE, 30522, "float32",
                            "splade-tiny vocabulary terms"))


__all__ = [
    "CODEC_BITS",
    "CodecSpec",
    "DENSE",
    "Encode",
    "Head",
    "HeadKind",
    "MAX_POOL",
    "MAX_POOL_KEEP",
    "SPLADE",
    "SparseCodes",
    "SparseVector",
    "TOKENS",
    "TokenCodes",
    "Vector",
    "get_head",
    "heads",
    "heads_signature",
    "python_heads",
    "register_head",
    "unregister_head",
]
