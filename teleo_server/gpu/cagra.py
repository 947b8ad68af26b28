"""Approximate dense search with cuVS CAGRA behind the same interface as the exact scan.

Written against cuVS's documented Python API (``cuvs.neighbors.cagra``: ``IndexParams``,
``build``, ``SearchParams``, ``search(..., filter=)``, ``ExtendParams``, ``extend``, ``save``,
``load``; ``cuvs.neighbors.filters.from_bitset``). cuVS is optional: it is not installed on the
CPU machines nor on the GPU test image, so this module imports it lazily and
:func:`cagra_available` says whether it can be used; its test skips without it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from teleo_server.compute.dense import check_query
from teleo_server.compute.errors import InternalValueError, InvalidValue
from teleo_server.errors import Unavailable
from teleo_server.gpu._checks import pack_mask


def cagra_available() -> bool:
    try:
        importlib.import_module("cuvs.neighbors.cagra")
    except ImportError:
        return False
    return True


def _cuvs() -> tuple[Any, Any]:
    try:
        cagra = importlib.import_module("cuvs.neighbors.cagra")
        filters = importlib.import_module("cuvs.neighbors.filters")
    except ImportError as exc:
        raise Unavailable("cuVS is not installed; install cuvs matching the CUDA driver") from exc
    return cagra, filters


@dataclass(frozen=True, slots=True)
class CagraParams:
    """Build and search knobs (cuVS defaults unless noted)."""

    graph_degree: int = 64
    intermediate_graph_degree: int = 128
    build_algo: str = "nn_descent"   # faster than the IVF-PQ default for the sizes we hold
    itopk_size: int = 64             # main recall / latency knob; must be >= k
    search_width: int = 1
    extend_chunk: int | None = None
    # a filter that admits at most this share of the rows is searched by the exact scan instead:
    # CAGRA's recall collapses under heavy filters (cuVS issue #252 recommends pre-filtered brute
    # force once 90% or more of the vectors are filtered out), and the scan reads only those rows
    exact_below: float = 0.1


def searches_exactly(admitted: int, n: int, params: CagraParams) -> bool:
    """Whether a search whose filter admits ``admitted`` of ``n`` rows goes to the exact scan."""
    return admitted <= params.exact_below * n


class CagraIndex:
    """A CAGRA graph over fp16 rows, inner-product metric, row ids = insertion order."""

    def __init__(self, index: Any, params: CagraParams, dataset: Any) -> None:
        self._index = index
        self.params = params
        self._dataset = dataset  # fp16 rows, kept to re-score exactly and to serialise

    @classmethod
    def build(cls, matrix: Any, params: CagraParams = CagraParams()) -> "CagraIndex":
        """Build from (N, D) L2-normalised rows (host or device; stored fp16 on the device)."""
        import cupy

        cagra, _ = _cuvs()
        data = cupy.ascontiguousarray(cupy.asarray(matrix, dtype=cupy.float16))
        index_params = cagra.IndexParams(
            metric="inner_product",
            graph_degree=params.graph_degree,
            intermediate_graph_degree=params.intermediate_graph_degree,
            build_algo=params.build_algo,
        )
        return cls(cagra.build(index_params, data), params, data)

    def __len__(self) -> int:
        return int(self._dataset.shape[0])

    def extend(self, rows: Any) -> None:
        """Append rows; their ids continue the insertion order."""
        import cupy

        cagra, _ = _cuvs()
        new = cupy.ascontiguousarray(cupy.asarray(rows, dtype=cupy.float16))
        extend_params = cagra.ExtendParams(max_chunk_size=self.params.extend_chunk)
        self._index = cagra.extend(extend_params, self._index, new)
        self._dataset = cupy.concatenate([self._dataset, new])

    def search(self, query: Any, k: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Approximate best ``k`` rows for one query.

        Parameters
        ----------
        query : array-like float, shape (D,)
        k : int
        mask : np.ndarray of bool, shape (N,), optional; ``False`` rows are filtered out in-graph

        Returns
        -------
        ids : np.ndarray int32, shape (<= k,), best first (exact fp32 re-score, ties by lower id)
        scores : np.ndarray float32, same shape

        Raises
        ------
        teleo_server.compute.errors.InvalidValue, InternalValueError
            What :func:`teleo_server.compute.dense.dense_topk` raises for the same arguments.
        """
        n = len(self)
        if k < 0:
            raise InvalidValue(f"k must be >= 0, got {k}")
        check_query(int(np.size(query)), int(self._dataset.shape[1]), None)
        if mask is not None and np.shape(mask) != (n,):
            raise InternalValueError(f"mask shape {np.shape(mask)} != ({n},)")
        import cupy

        cagra, filters = _cuvs()
        k = min(int(k), n)
        if k <= 0:
            return np.empty(0, np.int32), np.empty(0, np.float32)
        q = cupy.asarray(query, dtype=cupy.float16).reshape(1, -1)
        prefilter = None
        if mask is not None:
            prefilter = filters.from_bitset(cupy.asarray(pack_mask(np.asarray(mask, dtype=bool))))
        search_params = cagra.SearchParams(itopk_size=max(self.params.itopk_size, k), search_width=self.params.search_width)
        _, neighbors = cagra.search(search_params, self._index, q, k, filter=prefilter)
        ids = cupy.asarray(neighbors).ravel().astype(cupy.int64)
        ids = ids[ids < n]  # unfilled slots come back as 0xFFFFFFFF
        # Re-score exactly in fp32 so the distance convention of the metric never leaks out.
        scores = self._dataset[ids].astype(cupy.float32) @ cupy.asarray(query, dtype=cupy.float32).ravel()
        ids_h, scores_h = ids.get(), scores.get()
        if mask is not None:
            keep = np.asarray(mask, dtype=bool)[ids_h]
            ids_h, scores_h = ids_h[keep], scores_h[keep]
        order = np.lexsort((ids_h, -scores_h))
        return ids_h[order].astype(np.int32), scores_h[order].astype(np.float32)

    def save(self, path: str) -> None:
        cagra, _ = _cuvs()
        cagra.save(str(path), self._index, include_dataset=True)

    @classmethod
    def load(cls, path: str, dataset: Any, params: CagraParams = CagraParams()) -> "CagraIndex":
        """Load a saved graph; ``dataset`` is the same (N, D) rows, used for exact re-scoring."""
        import cupy

        cagra, _ = _cuvs()
        return cls(cagra.load(str(path)), params, cupy.ascontiguousarray(cupy.asarray(dataset, dtype=cupy.float16)))


__all__ = ["CagraIndex", "CagraParams", "cagra_available", "searches_exactly"]
