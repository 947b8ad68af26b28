"""Bad input raises the same error class on both backends, and that class maps to a gRPC status.

A request can cause ``InvalidArgument`` (INVALID_ARGUMENT); arrays the server built that disagree
are ``Internal``. Every class is still the ``ValueError`` / ``TypeError`` it replaced.

The device executors check their host arguments before touching a device, so their half of each
pair runs on the CPU suite. The device wrappers take device arrays: their checks run under the
CPU emulation of the kernels (whose device arrays are NumPy arrays) and again against real CuPy
on a GPU machine.
"""

from __future__ import annotations

import types

import grpc
import numpy as np
import pytest

from teleo_server.api.status import status_of
from teleo_server.compute import dense, maxsim, sparse, topk
from teleo_server.compute.errors import DeviceLimit
from teleo_server.errors import Internal, InvalidArgument, ResourceExhausted
from teleo_server.gpu import emulator, runtime
from teleo_server.gpu import ops as gpu_ops

try:
    from _backends import RUNTIME_PARAMS, device
except ImportError:  # tests/ imported as a package
    from tests._backends import RUNTIME_PARAMS, device

__all__ = ["device"]  # the fixture, imported for pytest

BAD = InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT
BROKEN = Internal, grpc.StatusCode.INTERNAL


def _index():
    """A CSC over 2 terms and 4 rows: term 0 -> rows 0, 2; term 1 -> row 3."""
    return np.array([0, 2, 3], np.int64), np.array([0, 2, 3], np.int32), np.ones(3, np.float32)


M = np.eye(4, dtype=np.float32)
Q = np.ones(4, np.float32)
OFFSETS = np.array([0, 2, 4], np.int64)
TOKENS = np.ones((4, 8), np.float16)

# (id, function name, positional args, keyword args, expected class and status)
CASES = [
    ("topk-negative-k", "topk", (np.ones(3, np.float32), -1), {}, BAD),
    ("topk-2d-scores", "topk", (np.ones((2, 2), np.float32), 1), {}, BROKEN),
    ("topk-mask-length", "topk", (np.ones(3, np.float32), 1), {"mask": np.ones(2, bool)}, BROKEN),
    ("dense-query-width", "dense_topk", (M, np.ones(3, np.float32), 1), {}, BAD),
    ("dense-query-width-no-candidates-left", "dense_topk", (M, np.ones(3, np.float32), 1),
     {"candidates": np.array([0]), "mask": np.zeros(4, bool)}, BAD),
    ("dense-prefix-dim", "dense_topk", (M, Q, 1), {"dim": 5}, BAD),
    ("dense-prefix-dim-zero", "dense_topk", (M, Q, 1), {"dim": 0}, BAD),
    ("dense-negative-k", "dense_topk", (M, Q, -1), {}, BAD),
    ("dense-3d-matrix", "dense_topk", (np.ones((2, 2, 2), np.float32), Q, 1), {}, BROKEN),
    ("dense-mask-length", "dense_topk", (M, Q, 1), {"mask": np.ones(3, bool)}, BROKEN),
    ("dense-candidate-range", "dense_topk", (M, Q, 1), {"candidates": np.array([4], np.int32)}, BROKEN),
    ("spmv-ids-vs-weights", "spmv_scores", (*_index(), 4, np.array([0, 1], np.int32), np.ones(1, np.float32)), {}, BAD),
    ("spmv-nnz", "spmv_scores", (np.array([0, 3], np.int64), np.zeros(2, np.int32), np.zeros(2, np.float32), 4,
                                 np.zeros(1, np.int32), np.ones(1, np.float32)), {}, BROKEN),
    ("spmv-posting-range", "spmv_scores", (*_index(), 3, np.array([1], np.int32), np.ones(1, np.float32)), {}, BROKEN),
    ("spmv-topk-negative-k", "spmv_topk", (*_index(), 4, np.array([0], np.int32), np.ones(1, np.float32), -1), {}, BAD),
    ("spmv-topk-mask-length", "spmv_topk", (*_index(), 4, np.array([0], np.int32), np.ones(1, np.float32), 2),
     {"mask": np.ones(5, bool)}, BROKEN),
    ("maxsim-token-dim", "maxsim", (np.ones((2, 4), np.float32), OFFSETS, TOKENS, np.array([0], np.int32)), {}, BROKEN),
    ("maxsim-candidate-range", "maxsim", (np.ones((2, 8), np.float32), OFFSETS, TOKENS, np.array([2], np.int32)), {},
     BROKEN),
]

REFERENCE = {
    "topk": topk.topk,
    "dense_topk": dense.dense_topk,
    "spmv_scores": sparse.spmv_scores,
    "spmv_topk": sparse.spmv_topk,
    "maxsim": maxsim.maxsim,
}


def _raised(fn, args, kwargs) -> BaseException:
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    return info.value


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_reference_raises_mapped_error(case):
    _, name, args, kwargs, (cls, code) = case
    exc = _raised(REFERENCE[name], args, kwargs)
    assert isinstance(exc, cls), f"{type(exc).__name__}: {exc}"
    assert isinstance(exc, ValueError)
    assert status_of(exc) == code


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_cupy_executor_raises_what_the_reference_raises(case):
    """The host checks of ``gpu.ops`` run before CuPy is imported, so this needs no device."""
    _, name, args, kwargs, _ = case
    want = _raised(REFERENCE[name], args, kwargs)
    got = _raised(getattr(gpu_ops, name), args, kwargs)
    assert type(got) is type(want), f"{type(got).__name__}: {got}"
    assert str(got) == str(want)


def test_invalid_argument_messages_say_what_to_change():
    with pytest.raises(InvalidArgument, match=r"query vector has 3 dimensions; the index holds 4-dimensional"):
        dense.dense_topk(M, np.ones(3, np.float32), 1)
    with pytest.raises(InvalidArgument, match=r"prefix dim must be in \[1, 4\]"):
        dense.dense_topk(M, Q, 1, dim=5)
    with pytest.raises(InvalidArgument, match=r"2 term ids but 1 weights; send one weight per id"):
        sparse.spmv_scores(*_index(), 4, np.array([0, 1], np.int32), np.ones(1, np.float32))


@pytest.fixture
def to_device(device):
    """Host array -> a device array of the runtime under test."""
    return device.xp.asarray


def test_topk_device_checks(to_device):
    from teleo_server.gpu.topk import topk_device

    with pytest.raises(InvalidArgument, match="k must be >= 0"):
        topk_device(to_device(np.zeros(10, np.float32)), -1)
    with pytest.raises(Internal) as info:
        topk_device(to_device(np.zeros(10, np.float64)), 3)
    assert isinstance(info.value, TypeError)
    with pytest.raises(Internal) as info:
        topk_device(to_device(np.zeros((10, 2), np.float32))[:, 0], 3)  # strided
    assert isinstance(info.value, ValueError)
    with pytest.raises(Internal, match="mask"):
        topk_device(to_device(np.zeros(64, np.float32)), 3, mask=to_device(np.zeros(3, np.uint32)))


def test_dense_device_checks(to_device):
    from teleo_server.gpu.dense import dense_scores_device

    matrix = to_device(np.zeros((5, 16), np.float16))
    with pytest.raises(InvalidArgument, match="query vector has 15 dimensions"):
        dense_scores_device(matrix, np.ones(15, np.float32))
    with pytest.raises(InvalidArgument, match="prefix dim"):
        dense_scores_device(matrix, np.ones(16, np.float32), dim=17)
    with pytest.raises(Internal):
        dense_scores_device(to_device(np.zeros((5, 16), np.float64)), np.ones(16, np.float32))
    with pytest.raises(Internal, match="rows"):
        dense_scores_device(matrix, np.ones(16, np.float32), rows=to_device(np.zeros(2, np.int64)))


def test_maxsim_device_checks(to_device):
    from teleo_server.gpu.maxsim import MAX_DIM, maxsim_device

    dim = MAX_DIM + 1
    args = (to_device(np.zeros(2, np.int64)), to_device(np.zeros((1, dim), np.float16)), to_device(np.zeros(1, np.int32)))
    with pytest.raises(Internal, match="use the numpy backend"):
        maxsim_device(to_device(np.zeros((2, dim), np.float32)), *args)
    with pytest.raises(Internal):
        maxsim_device(np.zeros((2, 8), np.float32), *args)


def test_spmv_device_checks(to_device):
    from teleo_server.gpu.spmv import spmv_accumulate

    indptr, indices, data = (to_device(a) for a in _index())
    q = to_device(np.zeros(2, np.int32))
    with pytest.raises(Internal, match="q_weights"):
        spmv_accumulate(indptr, indices, data, q, to_device(np.ones(1, np.float32)), to_device(np.zeros(4, np.float64)))
    with pytest.raises(Internal, match="indptr"):
        spmv_accumulate(to_device(np.zeros(0, np.int64)), to_device(np.zeros(0, np.int32)),
                        to_device(np.zeros(0, np.float32)), q, to_device(np.ones(2, np.float32)),
                        to_device(np.zeros(4, np.float64)))


def test_resident_sparse_search_checks_the_query(to_device):
    from teleo_server.gpu.resident import ResidentSparseIndex

    index = ResidentSparseIndex(2, types.SimpleNamespace(n_rows=4))
    with pytest.raises(InvalidArgument, match="send one weight per id"):
        index.search(np.array([0, 1], np.int32), np.ones(1, np.float32), 3)
    with pytest.raises(Internal, match="mask shape"):
        index.search(np.array([0], np.int32), np.ones(1, np.float32), 3, mask=np.ones(5, bool))


def test_cagra_search_checks_like_the_exact_scan(to_device):
    from teleo_server.gpu.cagra import CagraIndex, CagraParams

    index = CagraIndex(None, CagraParams(), to_device(np.zeros((5, 16), np.float16)))
    with pytest.raises(InvalidArgument, match="k must be >= 0"):
        index.search(np.ones(16, np.float32), -1)
    with pytest.raises(InvalidArgument, match="query vector has 8 dimensions"):
        index.search(np.ones(8, np.float32), 3)
    with pytest.raises(Internal, match="mask shape"):
        index.search(np.ones(16, np.float32), 3, mask=np.ones(4, bool))


@pytest.mark.parametrize("name", [p.values[0] for p in RUNTIME_PARAMS])
def test_shared_memory_over_the_device_limit_is_resource_exhausted(monkeypatch, name):
    rt = runtime.get(name)
    monkeypatch.setattr(rt, "shared_optin_limit", lambda: 64 * 1024)
    with pytest.raises(ResourceExhausted) as info:
        rt.ensure_shared(None, 64 * 1024 + 4)
    assert isinstance(info.value, ValueError) and isinstance(info.value, DeviceLimit)
    assert status_of(info.value) == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_an_emulated_launch_over_the_shared_limit_fails_like_the_device():
    ok, why = emulator.status()
    if not ok:
        pytest.skip(why)
    kernel = emulator.function("dense_scan", "dense_scan_f32")
    with pytest.raises(DeviceLimit, match="dynamic shared memory"):
        kernel((1,), (32,), (), shared_mem=64 * 1024)  # above 48 KiB without opting in
