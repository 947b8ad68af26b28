"""The CPU emulation of CUDA kernels: the device language it provides, how it fails, its cache.

The kernels of ``kernels/`` are checked against their references under it in
``test_kernels_wrappers.py``, ``test_compute_*.py`` and ``test_index_conformance.py``; here small
probe kernels pin down the semantics those tests rely on.
"""

from __future__ import annotations

import numpy as np
import pytest

from teleo_server.compute.errors import InternalTypeError, InternalValueError
from teleo_server.gpu import emulator, loader

ok, why = emulator.status()
pytestmark = pytest.mark.skipif(not ok, reason=f"kernel emulation unavailable: {why}")

PROBES = r'''// Probe kernels for the emulation's own tests.
extern "C" __global__ void __launch_bounds__(256)
probe_block(const float* __restrict__ x, float* __restrict__ out, unsigned int* __restrict__ ids, int n) {
    __shared__ float tile[256];
    extern __shared__ float dyn[];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    dyn[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    // neighbour in the block through static shared memory, a warp sum through shuffles
    float v = tile[(threadIdx.x + 1) % blockDim.x] + dyn[blockDim.x - 1 - threadIdx.x];
    float s = v;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
    const float down = __shfl_down_sync(0xFFFFFFFFu, v, 1);
    if (i < n) out[i] = s + 1000.0f * down;
    const unsigned int peers = __match_any_sync(0xFFFFFFFFu, (unsigned int)(threadIdx.x & 3));
    const unsigned int ballot = __ballot_sync(0xFFFFFFFFu, (threadIdx.x & 1) == 0);
    if (i < n) ids[i] = peers ^ ballot;
    atomicAdd(&ids[n], 1u);
}

extern "C" __global__ void __launch_bounds__(32)
probe_deadlock(int* __restrict__ out) {
    if (threadIdx.x == 0) __syncwarp();
    else __syncthreads();
    out[threadIdx.x] = 1;
}

extern "C" __global__ void __launch_bounds__(256)
probe_half(const float* __restrict__ x, unsigned short* __restrict__ h, float* __restrict__ back, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const __half v = __float2half(x[i]);
    h[i] = __half_as_ushort(v);
    back[i] = __half2float(v);
}

extern "C" __global__ void __launch_bounds__(64)
probe_early_exit(int* __restrict__ out, int keep) {
    if ((int)threadIdx.x >= keep) return;  // the rest of the block leaves before the barrier
    __syncthreads();
    out[threadIdx.x] = __popc(__ballot_sync(0xFFFFFFFFu, 1));
}
'''


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kernels")
    (folder / "topk.cu").write_text("// marks the folder as a kernel folder\n")
    (folder / "emu_probe.cu").write_text(PROBES)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(loader.KERNEL_DIR_ENV, str(folder))
        mp.setenv(emulator.CACHE_ENV, str(tmp_path_factory.mktemp("cache")))
        module = emulator.EmulatedModule("emu_probe")
    return module


def test_threads_blocks_shared_memory_and_warp_collectives(probes):
    n = 700
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    ids = np.zeros(n + 1, np.uint32)
    kernel = probes.get_function("probe_block")
    kernel((3,), (256,), (x, out, ids, np.int32(n)), shared_mem=256 * 4)

    tid = np.arange(3 * 256) % 256
    xs = np.concatenate([x, np.zeros(3 * 256 - n, np.float32)])
    block_of = np.arange(3 * 256) // 256
    v = xs[block_of * 256 + (tid + 1) % 256] + (255 - tid)
    warp_sum = v.reshape(-1, 32).sum(axis=1).repeat(32)
    lane = tid % 32
    down = np.where(lane < 31, np.roll(v, -1), v)  # the last lane keeps its own value
    np.testing.assert_allclose(out, (warp_sum + 1000.0 * down)[:n], rtol=1e-6)

    peers = np.array([sum(1 << m for m in range(32) if m % 4 == lane_ % 4) for lane_ in range(32)], np.uint64)
    ballot = sum(1 << m for m in range(0, 32, 2))
    np.testing.assert_array_equal(ids[:n], (peers[lane] ^ ballot)[:n].astype(np.uint32))
    assert ids[n] == 3 * 256  # every thread's atomic counted once


def test_half_conversion_is_ieee_round_to_nearest_even(probes):
    rng = np.random.default_rng(0)
    x = np.concatenate([
        rng.standard_normal(4000).astype(np.float32) * np.float32(10.0) ** rng.integers(-9, 6, 4000).astype(np.float32),
        np.array([0.0, -0.0, 65504.0, 65519.0, 65520.0, 1e6, -1e6, 6e-8, 3e-8, 2.98e-8, 1e-9, np.inf, -np.inf,
                  1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 2.0 ** -14, 2.0 ** -24, 1.5 * 2.0 ** -24], np.float32),
    ])
    h = np.zeros(x.size, np.uint16)
    back = np.zeros(x.size, np.float32)
    probes.get_function("probe_half")((x.size // 256 + 1,), (256,), (x, h, back, np.int32(x.size)))
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    np.testing.assert_array_equal(h, want.view(np.uint16))
    np.testing.assert_array_equal(back, want.astype(np.float32))
    nan = np.zeros(1, np.uint16)
    probes.get_function("probe_half")((1,), (256,), (np.array([np.nan], np.float32), nan, np.zeros(1, np.float32),
                                                    np.int32(1)))
    assert np.isnan(np.array(nan).view(np.float16)[0])


def test_threads_that_return_early_do_not_hold_a_barrier(probes):
    out = np.zeros(64, np.int32)
    probes.get_function("probe_early_exit")((1,), (64,), (out, np.int32(40)))
    # warp 0 keeps 32 lanes, warp 1 keeps 8: the ballot sees the lanes still running
    assert out[:32].tolist() == [32] * 32 and out[32:40].tolist() == [8] * 8 and not out[40:].any()


def test_a_barrier_that_cannot_complete_is_reported_not_hung(probes):
    with pytest.raises(InternalValueError, match="deadlock"):
        probes.get_function("probe_deadlock")((1,), (32,), (np.zeros(32, np.int32),))


def test_arguments_are_checked_against_the_kernel_signature(probes):
    kernel = probes.get_function("probe_half")
    assert kernel.params == [(8, "pointer"), (8, "pointer"), (8, "pointer"), (4, "int")]
    x = np.zeros(4, np.float32)
    with pytest.raises(InternalTypeError, match="takes 4 arguments"):
        kernel((1,), (32,), (x, x, x))
    with pytest.raises(InternalTypeError, match="4-byte int, got int64"):
        kernel((1,), (32,), (x, x, x, np.int64(4)))
    with pytest.raises(InternalTypeError, match="pass a numpy scalar"):
        kernel((1,), (32,), (x, x, x, 4))
    with pytest.raises(InternalTypeError, match="pass a numpy array"):
        kernel((1,), (32,), (x, 0, x, np.int32(4)))
    with pytest.raises(InternalValueError, match="invalid block"):
        kernel((1,), (2048,), (x, x, x, np.int32(4)))
    with pytest.raises(InternalValueError, match="not in emu_probe.cu"):
        probes.get_function("no_such_kernel")


def test_builds_are_cached_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv(emulator.CACHE_ENV, str(tmp_path))
    first, kernels = emulator.build("topk")
    assert "topk_small" in kernels and "topk_histogram" in kernels
    mtime = first.stat().st_mtime_ns
    again, _ = emulator.build("topk")
    assert again == first and again.stat().st_mtime_ns == mtime  # not rebuilt
    assert first.parent == tmp_path


def test_every_kernel_module_compiles_for_the_host():
    for source in sorted(loader.kernel_dir().glob("*.cu")):
        _, kernels = emulator.build(source.stem)
        assert kernels, source.name
