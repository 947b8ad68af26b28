"""The interface between the pipeline and an index: search and score, with the filters pushed down.

Every index backend, in process or elsewhere, implements :class:`VectorIndex`::

    search(query, k, filter) -> (ids int64, scores float32)   best first, only rows ``filter`` admits
    score(ids, query)        -> scores float32                  NaN for rows the index has no vector of

over rows numbered by the caller (chunk rows for the dense, sparse and per-token heads, memory
rows for BM25). A query is a :class:`DenseQuery`, :class:`SparseQuery` or :class:`TokenQuery`
according to the index's kind; a ``bm25`` index takes a :class:`SparseQuery` whose weights are the
terms' IDF, stores each row's raw term frequencies (a :class:`SparseVector`; the row's length is
their sum) and weighs them at query time with the average length of its live rows (Okapi BM25 with
its ``k1`` and ``b``), so nothing it stores moves when a write moves the average.
The access-control and request filters travel as a :class:`RowFilter`: a :class:`Bitmask` for an
engine that shares the caller's row numbering, or an :class:`Expression` over row attributes
(namespace, access level, memory type, times, session, metadata) for one that stores the
attributes beside its vectors and filters on them itself (a Milvus collection, say): both describe
the same rows, which ``tests/test_index_conformance.py`` checks.

Backends are registered here by name (``register_backend``) and built by name (``make_backend``);
the conformance suite runs every registered backend against the exact NumPy reference, so a new
backend (GPU-resident, remote) is added by registering it and passing that suite. GPU backends
register themselves from ``teleo_server.gpu.backends`` when CuPy imports; the in-process ones from
``teleo_server.index.backends``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from teleo_server.compute.sets import member


# -- queries ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DenseQuery:
    """An L2-normalised float32 (D,) vector; ``dim`` asks for a Matryoshka first pass at that width
    (a backend without truncations searches at full width)."""

    vector: np.ndarray
    dim: int | None = None


@dataclass(frozen=True, slots=True)
class SparseQuery:
    ids: np.ndarray       # int32 (Q,)
    weights: np.ndarray   # float32 (Q,)


@dataclass(frozen=True, slots=True)
class TokenQuery:
    tokens: np.ndarray    # float32 (T, D), L2-normalised rows


# -- filters ----------------------------------------------------------------------------------------


class RowFilter(Protocol):
    """Which rows a search may return."""

    def bits(self, n: int) -> np.ndarray:
        """bool (n,): the admitted rows among the first ``n``."""
        ...


@dataclass(frozen=True, slots=True)
class Bitmask:
    """A filter as one bit per row (rows past the mask are not admitted)."""

    mask: np.ndarray

    def bits(self, n: int) -> np.ndarray:
        m = np.asarray(self.mask, dtype=bool)
        if m.size >= n:
            return m[:n]
        out = np.zeros(n, dtype=bool)
        out[: m.size] = m
        return out


Node = tuple  # ("and", *nodes) | ("or", *nodes) | ("not", node) | ("in", col, values) |
#               ("prefix", col, text) | ("<=" | ">=" | "<" | ">" | "==", col, value) | ("true",) | ("false",)


@dataclass(frozen=True, slots=True)
class Expression:
    """A filter as a boolean expression over row attributes.

    ``columns`` resolves an attribute name to one value per row (for evaluating the expression in
    process); a remote engine instead receives ``text()``, a boolean expression in the syntax
    vector databases take (``namespace in ["a"] and access_level <= 2``).
    """

    node: Node
    columns: Callable[[str], np.ndarray] | None = None

    def bits(self, n: int) -> np.ndarray:
        if self.columns is None:
            raise ValueError("this expression has no columns to evaluate against")
        return Bitmask(evaluate(self.node, self.columns)).bits(n)

    def text(self) -> str:
        return render(self.node)


def evaluate(node: Node, column: Callable[[str], np.ndarray]) -> np.ndarray:
    """The rows (bool per row) where ``node`` holds, reading attributes through ``column``."""
    op = node[0]
    if op in ("true", "false"):
        return np.full(column("alive").size, op == "true")
    if op == "and":
        out = evaluate(node[1], column).copy()
        for sub in node[2:]:
            out &= evaluate(sub, column)
        return out
    if op == "or":
        out = evaluate(node[1], column).copy()
        for sub in node[2:]:
            out |= evaluate(sub, column)
        return out
    if op == "not":
        return ~evaluate(node[1], column)
    values = column(node[1])
    if op == "in":
        return member(values, np.asarray(list(node[2]), dtype=values.dtype))
    if op == "prefix":
        return np.array([isinstance(v, str) and v.startswith(node[2]) for v in values.tolist()], dtype=bool)
    compare = {"<=": np.less_equal, ">=": np.greater_equal, "<": np.less, ">": np.greater, "==": np.equal}
    if op in compare:
        return np.asarray(compare[op](values, np.asarray(node[2], dtype=values.dtype)), dtype=bool)
    raise ValueError(f"unknown filter operator {op!r}")


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def render(node: Node) -> str:
    op = node[0]
    if op in ("true", "false"):
        return op
    if op in ("and", "or"):
        return "(" + f" {op} ".join(render(n) for n in node[1:]) + ")"
    if op == "not":
        return f"not ({render(node[1])})"
    if op == "in":
        return f"{node[1]} in [{', '.join(_literal(v) for v in node[2])}]"
    if op == "prefix":
        return f'{node[1]} like "{node[2]}%"'
    return f"{node[1]} {op} {_literal(node[2])}"


# -- the interface and its registry -----------------------------------------------------------------


class VectorIndex(Protocol):
    """One index over rows 0..n-1. ``kind`` is "dense", "sparse", "bm25" or "tokens"; ``exact`` says
    whether search returns exactly the reference's top k (otherwise: a recall bar)."""

    kind: str
    exact: bool

    @property
    def n(self) -> int: ...

    def add(self, vectors: list[Any]) -> np.ndarray:
        """Append one vector per new row (rows n, n+1, ...); returns their row ids."""
        ...

    def remove(self, rows: np.ndarray) -> None:
        """Tombstone rows: never returned again."""
        ...

    def search(self, query: Any, k: int, filter: RowFilter | None = None) -> tuple[np.ndarray, np.ndarray]: ...

    def score(self, ids: np.ndarray, query: Any) -> np.ndarray: ...


def search_many(index: VectorIndex, queries: list[Any], k: int,
                filters: list[RowFilter | None]) -> list[tuple[np.ndarray, np.ndarray]]:
    """``[index.search(q, k, f) for q, f in zip(queries, filters)]``: the backend's own
    ``search_many(queries, k, filters)`` when it has one (a device scan that reads its rows once for
    several queries), which must answer exactly as those searches do."""
    own = getattr(index, "search_many", None)
    if own is not None:
        return list(own(queries, k, filters))
    return [index.search(q, k, f) for q, f in zip(queries, filters)]


def batches(index: VectorIndex) -> bool:
    """Whether ``index`` answers :func:`search_many` in fewer passes than one search each."""
    return getattr(index, "search_many", None) is not None


def reached(index: VectorIndex, query: Any) -> tuple[np.ndarray, np.ndarray]:
    """Every row of ``index`` with a signal for ``query`` (not removed): rows int64 ascending and
    their scores float32. A backend that can list them from its own structures (an inverted
    index's postings) provides ``reached(query)``; any other is scored over every row."""
    own = getattr(index, "reached", None)
    if own is not None:
        return own(query)
    rows = np.arange(index.n, dtype=np.int64)
    scores = np.asarray(index.score(rows, query), np.float32)
    hit = ~np.isnan(scores)
    return rows[hit], scores[hit]


def every_score(index: VectorIndex, query: Any) -> np.ndarray:
    """float32 (index.n,): the score of every row for ``query``, clipped at 0 (a row with no signal,
    or removed, scores 0). A backend that scores every row at once provides ``every_score(query)``;
    any other is asked for ``score`` of every row."""
    own = getattr(index, "every_score", None)
    if own is not None:
        return np.asarray(own(query), np.float32)
    scores = np.asarray(index.score(np.arange(index.n, dtype=np.int64), query), np.float32)
    return np.where(scores > 0, scores, np.float32(0.0))


def reach(index: VectorIndex, query: Any) -> int:
    """An upper bound, known before scoring, of the rows :func:`reached` would list for ``query``:
    the backend's own ``reach(query)`` (an inverted index counts its postings), else every row."""
    own = getattr(index, "reach", None)
    return int(own(query)) if own is not None else index.n


def runs_beside(index: VectorIndex, filter: RowFilter | None = None) -> bool:
    """Whether a search of ``index`` under ``filter`` spends its time outside the Python
    interpreter in one call (a compiled graph search, a device, a remote service), so that it pays
    to run it on a second thread beside other work: the backend's own ``runs_beside(filter)``,
    else False. A search of many short array operations, each taking the interpreter lock back,
    slows the thread beside it more than it gains (an exact NumPy scan of 10,000 rows beside
    sparse recall: 3.4 ms a query against 2.6 in order)."""
    own = getattr(index, "runs_beside", None)
    return bool(own(filter)) if own is not None else False


@dataclass(frozen=True, slots=True)
class BackendInfo:
    name: str
    kind: str
    exact: bool
    factory: Callable[..., VectorIndex]
    description: str = ""
    # its rows live on a device: the factory takes ``runtime`` ("cuda", or "emulated": the kernels
    # on the CPU emulation), the runtime whose memory holds them
    device: bool = False
    # for a device backend: runtime name -> None when it can be made on that runtime, else why not
    # (checked when a server starts, not at its first write or query)
    unavailable: Callable[[str], str | None] | None = None
    # the backend of its kind that serves a space whose ``index`` setting is empty when the
    # retriever runs on a device (``backend = "cupy"``): at most one per kind
    device_default: bool = False


KINDS = ("dense", "sparse", "bm25", "tokens")
_BACKENDS: dict[str, BackendInfo] = {}
# modules that register backends when imported: the in-process ones, then those whose dependencies
# may be missing here (CuPy, cuVS)
PROVIDERS = ("teleo_server.index.backends",)
OPTIONAL_PROVIDERS = ("teleo_server.gpu.backends",)
_providers_loaded = False


def register_backend(name: str, kind: str, exact: bool, factory: Callable[..., VectorIndex],
                     description: str = "", device: bool = False,
                     unavailable: Callable[[str], str | None] | None = None, device_default: bool = False) -> None:
    if name in _BACKENDS:
        raise ValueError(f"index backend {name!r} is registered twice")
    if kind not in KINDS:
        raise ValueError(f"index backend {name!r}: unknown kind {kind!r}")
    if device_default and not device:
        raise ValueError(f"index backend {name!r}: only a device backend can be the default on a device")
    if device_default and any(b.device_default and b.kind == kind for b in _BACKENDS.values()):
        raise ValueError(f"index backend {name!r}: the {kind} kind has a device default already")
    _BACKENDS[name] = BackendInfo(name, kind, exact, factory, description, device, unavailable, device_default)


def backends(kind: str | None = None) -> dict[str, BackendInfo]:
    """Registered backends (of one kind), the optional providers imported first."""
    global _providers_loaded
    if not _providers_loaded:
        _providers_loaded = True
        for module in PROVIDERS:
            importlib.import_module(module)
        for module in OPTIONAL_PROVIDERS:
            try:
                importlib.import_module(module)
            except ImportError:
                pass  # its dependencies (CuPy, cuVS) are not installed here
    return {n: b for n, b in _BACKENDS.items() if kind is None or b.kind == kind}


def registered(name: str, kind: str) -> str:
    """``name`` when it is "" or a registered backend of ``kind``, else ValueError naming those that
    are (for a setting that names the backend of a space)."""
    if name and name not in backends(kind):
        raise ValueError(f"{name!r} is not a registered {kind} index backend; registered: "
                         f"{', '.join(sorted(backends(kind)))}")
    return name


def serving(setting: str, kind: str, runtime: str | None) -> str:
    """The backend that serves a space whose ``index`` setting is ``setting``, for a retriever whose
    device rows live on ``runtime`` (None: a host retriever): the setting when it names one; else,
    on a device, the kind's device default (``device_default``); else "" (the space's built-in
    index)."""
    if setting or runtime is None:
        return setting
    return next((b.name for b in backends(kind).values() if b.device_default), "")


def make_for(name: str, ops: Any, runtime: str | None = None, **options: Any) -> VectorIndex:
    """Backend ``name`` for a retriever whose host scorers are ``ops`` and whose device rows live on
    ``runtime``: a backend that keeps its rows on a device is made there (on CUDA when the retriever
    has no device runtime of its own, a host retriever naming a device backend)."""
    if backends()[name].device:
        options["runtime"] = runtime or "cuda"
    return make_backend(name, ops=ops, **options)


def unavailable_for(name: str, runtime: str | None = None) -> str | None:
    """Why backend ``name`` cannot be made for a retriever whose device rows live on ``runtime``
    (a device backend without its runtime: no CuPy or no device, no cuVS), or None when it can."""
    info = backends()[name]
    if not info.device or info.unavailable is None:
        return None
    return info.unavailable(runtime or "cuda")


def make_backend(name: str, **options: Any) -> VectorIndex:
    try:
        info = backends()[name]
    except KeyError:
        raise ValueError(f"unknown index backend {name!r}; known: {sorted(_BACKENDS)}") from None
    return info.factory(**options)


__all__ = [
    "BackendInfo",
    "Bitmask",
    "DenseQuery",
    "Expression",
    "KINDS",
    "OPTIONAL_PROVIDERS",
    "PROVIDERS",
    "RowFilter",
    "SparseQuery",
    "TokenQuery",
    "VectorIndex",
    "backends",
    "batches",
    "evaluate",
    "every_score",
    "make_backend",
    "make_for",
    "reach",
    "reached",
    "register_backend",
    "registered",
    "render",
    "runs_beside",
    "search_many",
    "serving",
    "unavailable_for",
]
