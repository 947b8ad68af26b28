// Exact dense scan: fp16 matrix x fp32 query -> fp32 inner products (GEMV), optionally over a
// Matryoshka prefix, a candidate list and a row bitmask. The top-k cut is topk.cu.
//
// Contract
// --------
// Matrix  m      float16 (N, D) row-major, row stride D elements; rows L2-normalised at full D.
//                dense_scan_f32 takes a float32 matrix with the same layout.
// Query   q      float32 (dim,), the first dim dims of the query, already L2-normalised over
//                those dims by the wrapper. 1 <= dim <= D, dim <= DENSE_MAX_DIM.
// Rows    rows   int32 (n_out,) row ids to score, strictly ascending (so position order is row
//                order and topk's "lower position first" tie rule is "lower row id first");
//                ignored when has_rows == 0, then n_out == N and position i is row i.
// Mask    mask   uint32 bitset over the N rows (bit set = allowed); a masked row scores NaN,
//                which topk.cu never selects; ignored when has_mask == 0.
// Output  out    float32 (n_out,). renorm != 0 (dim < D): out = <m[r,:dim], q> / ||m[r,:dim]||,
//                and 0.0 when that prefix norm is zero. renorm == 0: the plain inner product.
//                fp16 values are widened to fp32 and accumulated in fp32.
//
// Why a kernel and not cupy.matmul: cuBLAS on fp16 operands returns fp16 scores, whose 11-bit
// mantissa turns near neighbours into ties and reorders them against the fp32 reference; casting
// the matrix to fp32 per query would move 3x the bytes. This GEMV reads each fp16 byte once,
// keeps fp32 output, and computes the prefix norm in the same pass. The benchmark reports
// cupy.matmul (fp16 out) beside it as the named peer.
//
// Launch  DENSE_THREADS = 256 (8 warps), grid-stride over rows, one warp per row at a time.
//         Dynamic shared memory: dim * 4 bytes (the query).
//         dense_scan_reg256 / reg512 / reg1024: the vec8 conditions and dim <= 256 / 512 / 1024;
//         each lane loads 8 halves (16 bytes) per step, so a 256-dim row is one coalesced 512-byte
//         warp load, and keeps its slice of the query in registers (no shared memory).
//         dense_scan_vec8: the same loads for wider prefixes, query in shared memory.
//         dense_scan_scalar: any dim / D; lanes load one half each.
//         dense_scan_f32: float32 matrix, any dim / D; lanes load one float each.
//
// Batched scan (dense_scan_batch_vec8 / _scalar / _f32): nq queries against the same matrix,
// each row read once for all of them (a scan at 1M rows is bound by reading the matrix, so nq
// concurrent queries cost about one). Queries q float32 (nq, dim) row-major, each prepared as
// above; masks uint32 (nq, words) row bitsets, one per query (words = ceil(N / 32)), ignored when
// has_mask == 0; out float32 (nq, N), out[b * N + r]. A row no query admits is not read (NaN for
// each). Every score is the one the single-query kernel of the same path gives, bit for bit: each
// lane adds the same products in the same order and the warp reduces them the same way.
// 1 <= nq <= DENSE_MAX_BATCH. Dynamic shared memory: ceil(nq / 8) * 8 * dim * 4 bytes (the
// queries, padded with zeros to a group of DENSE_BATCH_GROUP, whose dot products a lane keeps in
// registers).

#define DENSE_THREADS 256
#define DENSE_MAX_DIM 8192

__device__ __forceinline__ float dense_h2f(unsigned short h) {
#ifdef __CUDA_ARCH__
    float f;
    asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
    return f;
#else  // host compilation (the CPU emulation of this kernel): the same IEEE conversion
    return __half2float(__ushort_as_half(h));
#endif
}

__device__ __forceinline__ float dense_to_f(unsigned short h) { return dense_h2f(h); }
__device__ __forceinline__ float dense_to_f(float x) { return x; }

__device__ __forceinline__ void dense_write(float dot, float nrm, int renorm, float* out) {
    if (renorm) *out = nrm > 0.0f ? dot / sqrtf(nrm) : 0.0f;
    else *out = dot;
}

// Row r of output position i, or -1 when the mask excludes it (its output is then NaN).
__device__ __forceinline__ long long dense_row(long long i, const int* __restrict__ rows, int has_rows,
                                              const unsigned int* __restrict__ mask, int has_mask, int lane,
                                              float* __restrict__ out) {
    const long long r = has_rows ? (long long)rows[i] : i;
    if (has_mask && !((mask[r >> 5] >> (r & 31)) & 1u)) {  // warp-uniform
        if (lane == 0) out[i] = __int_as_float(0x7FC00000);
        return -1;
    }
    return r;
}

// Eight halves (one 16-byte load) against eight query values: dot and squared norm accumulated.
__device__ __forceinline__ void dense_acc8(const uint4 pack, const float* qv, float& dot, float& nrm) {
    const unsigned int words[4] = {pack.x, pack.y, pack.z, pack.w};
#pragma unroll
    for (int h = 0; h < 4; ++h) {
        const float a = dense_h2f((unsigned short)(words[h] & 0xFFFFu));
        const float b = dense_h2f((unsigned short)(words[h] >> 16));
        dot = fmaf(a, qv[2 * h], dot);
        dot = fmaf(b, qv[2 * h + 1], dot);
        nrm = fmaf(a, a, nrm);
        nrm = fmaf(b, b, nrm);
    }
}

// The warp's partial sums reduced; lane 0 writes output position i.
__device__ __forceinline__ void dense_finish(float dot, float nrm, int lane, int renorm, float* out) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        dot += __shfl_xor_sync(0xFFFFFFFFu, dot, o);
        nrm += __shfl_xor_sync(0xFFFFFFFFu, nrm, o);
    }
    if (lane == 0) dense_write(dot, nrm, renorm, out);
}

template <typename T, bool VEC8>
__device__ __forceinline__ void dense_body(const T* __restrict__ m, long long n_out,
                                           int width, int dim, const float* __restrict__ q,
                                           const int* __restrict__ rows, int has_rows,
                                           const unsigned int* __restrict__ mask, int has_mask,
                                           int renorm, float* __restrict__ out) {
    extern __shared__ float s_q[];
    for (int i = threadIdx.x; i < dim; i += blockDim.x) s_q[i] = q[i];
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    for (long long i = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); i < n_out;
         i += warps) {
        const long long r = dense_row(i, rows, has_rows, mask, has_mask, lane, out);
        if (r < 0) continue;
        const T* row = m + r * (long long)width;
        float dot = 0.0f, nrm = 0.0f;
        if constexpr (VEC8) {
            const uint4* row8 = reinterpret_cast<const uint4*>(row);
            for (int v = lane; v < (dim >> 3); v += 32) dense_acc8(row8[v], s_q + (v << 3), dot, nrm);
        } else {
            for (int d = lane; d < dim; d += 32) {
                const float a = dense_to_f(row[d]);
                dot = fmaf(a, s_q[d], dot);
                nrm = fmaf(a, a, nrm);
            }
        }
        dense_finish(dot, nrm, lane, renorm, &out[i]);
    }
}

// The vectorised path with the query in registers: lane l holds query dims [8v, 8v + 8) for
// v = l + 32 j, j < NV (dim <= 256 * NV), read once from global memory; no shared memory, no
// barrier, and no bank conflicts (a shared-memory read of 8 floats at a 32-byte lane stride is
// a 4-way conflict on every step).
template <int NV>
__device__ __forceinline__ void dense_body_reg(const unsigned short* __restrict__ m, long long n_out, int width,
                                               int dim, const float* __restrict__ q,
                                               const int* __restrict__ rows, int has_rows,
                                               const unsigned int* __restrict__ mask, int has_mask,
                                               int renorm, float* __restrict__ out) {
    const int lane = threadIdx.x & 31;
    const int groups = dim >> 3;
    float qr[NV][8];
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int v = lane + 32 * j;
#pragma unroll
        for (int u = 0; u < 8; ++u) qr[j][u] = v < groups ? q[(v << 3) + u] : 0.0f;
    }
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    for (long long i = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); i < n_out;
         i += warps) {
        const long long r = dense_row(i, rows, has_rows, mask, has_mask, lane, out);
        if (r < 0) continue;
        const uint4* row8 = reinterpret_cast<const uint4*>(m + r * (long long)width);
        float dot = 0.0f, nrm = 0.0f;
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            if (lane + 32 * j < groups) dense_acc8(row8[lane + 32 * j], qr[j], dot, nrm);
        }
        dense_finish(dot, nrm, lane, renorm, &out[i]);
    }
}

#define DENSE_REG_ENTRY(NAME, NV)                                                                 \
    extern "C" __global__ void __launch_bounds__(DENSE_THREADS)                                  \
    NAME(const unsigned short* __restrict__ m, long long n_out, int width, int dim,              \
         const float* __restrict__ q, const int* __restrict__ rows, int has_rows,                \
         const unsigned int* __restrict__ mask, int has_mask, int renorm, float* __restrict__ out) { \
        dense_body_reg<NV>(m, n_out, width, dim, q, rows, has_rows, mask, has_mask, renorm, out); \
    }

DENSE_REG_ENTRY(dense_scan_reg256, 1)
DENSE_REG_ENTRY(dense_scan_reg512, 2)
DENSE_REG_ENTRY(dense_scan_reg1024, 4)

extern "C" __global__ void __launch_bounds__(DENSE_THREADS)
dense_scan_vec8(const unsigned short* __restrict__ m, long long n_out, int width, int dim,
                const float* __restrict__ q, const int* __restrict__ rows, int has_rows,
                const unsigned int* __restrict__ mask, int has_mask, int renorm,
                float* __restrict__ out) {
    dense_body<unsigned short, true>(m, n_out, width, dim, q, rows, has_rows, mask, has_mask, renorm, out);
}

extern "C" __global__ void __launch_bounds__(DENSE_THREADS)
dense_scan_scalar(const unsigned short* __restrict__ m, long long n_out, int width, int dim,
                  const float* __restrict__ q, const int* __restrict__ rows, int has_rows,
                  const unsigned int* __restrict__ mask, int has_mask, int renorm,
                  float* __restrict__ out) {
    dense_body<unsigned short, false>(m, n_out, width, dim, q, rows, has_rows, mask, has_mask, renorm, out);
}

extern "C" __global__ void __launch_bounds__(DENSE_THREADS)
dense_scan_f32(const float* __restrict__ m, long long n_out, int width, int dim,
               const float* __restrict__ q, const int* __restrict__ rows, int has_rows,
               const unsigned int* __restrict__ mask, int has_mask, int renorm,
               float* __restrict__ out) {
    dense_body<float, false>(m, n_out, width, dim, q, rows, has_rows, mask, has_mask, renorm, out);
}

// ---- batched scan ------------------------------------------------------------------------------

#define DENSE_BATCH_GROUP 8
#define DENSE_MAX_BATCH 64

template <typename T, bool VEC8>
__device__ __forceinline__ void dense_batch_body(const T* __restrict__ m, long long n, int width, int dim,
                                                 const float* __restrict__ q, int nq,
                                                 const unsigned int* __restrict__ mask, long long words,
                                                 int has_mask, int renorm, float* __restrict__ out) {
    extern __shared__ float s_q[];
    const int padded = (nq + DENSE_BATCH_GROUP - 1) / DENSE_BATCH_GROUP * DENSE_BATCH_GROUP;
    for (int i = threadIdx.x; i < padded * dim; i += blockDim.x) s_q[i] = i < nq * dim ? q[i] : 0.0f;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    for (long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < n; r += warps) {
        unsigned long long admit = 0ull;  // bit b: query b reads this row (warp-uniform)
        for (int b = 0; b < nq; ++b) {
            if (!has_mask || ((mask[b * words + (r >> 5)] >> (r & 31)) & 1u)) admit |= 1ull << b;
        }
        if (admit == 0ull) {
            for (int b = lane; b < nq; b += 32) out[b * n + r] = __int_as_float(0x7FC00000);
            continue;
        }
        const T* row = m + r * (long long)width;
        for (int b0 = 0; b0 < nq; b0 += DENSE_BATCH_GROUP) {
            float dot[DENSE_BATCH_GROUP];
#pragma unroll
            for (int j = 0; j < DENSE_BATCH_GROUP; ++j) dot[j] = 0.0f;
            float nrm = 0.0f;
            const float* qg = s_q + b0 * dim;
            if constexpr (VEC8) {
                const uint4* row8 = reinterpret_cast<const uint4*>(row);
                for (int v = lane; v < (dim >> 3); v += 32) {
                    const uint4 pack = row8[v];
                    const unsigned int w4[4] = {pack.x, pack.y, pack.z, pack.w};
#pragma unroll
                    for (int h = 0; h < 4; ++h) {
                        const float a = dense_h2f((unsigned short)(w4[h] & 0xFFFFu));
                        const float c = dense_h2f((unsigned short)(w4[h] >> 16));
                        const int d = (v << 3) + 2 * h;
#pragma unroll
                        for (int j = 0; j < DENSE_BATCH_GROUP; ++j) {
                            dot[j] = fmaf(a, qg[j * dim + d], dot[j]);
                            dot[j] = fmaf(c, qg[j * dim + d + 1], dot[j]);
                        }
                        nrm = fmaf(a, a, nrm);
                        nrm = fmaf(c, c, nrm);
                    }
                }
            } else {
                for (int d = lane; d < dim; d += 32) {
                    const float a = dense_to_f(row[d]);
#pragma unroll
                    for (int j = 0; j < DENSE_BATCH_GROUP; ++j) dot[j] = fmaf(a, qg[j * dim + d], dot[j]);
                    nrm = fmaf(a, a, nrm);
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
                for (int j = 0; j < DENSE_BATCH_GROUP; ++j) dot[j] += __shfl_xor_sync(0xFFFFFFFFu, dot[j], o);
                nrm += __shfl_xor_sync(0xFFFFFFFFu, nrm, o);
            }
            if (lane == 0) {
#pragma unroll
                for (int j = 0; j < DENSE_BATCH_GROUP; ++j) {
                    const int b = b0 + j;
                    if (b >= nq) break;
                    if ((admit >> b) & 1ull) dense_write(dot[j], nrm, renorm, &out[b * n + r]);
                    else out[b * n + r] = __int_as_float(0x7FC00000);
                }
            }
        }
    }
}

#define DENSE_BATCH_ENTRY(NAME, T, VEC8)                                                          \
    extern "C" __global__ void __launch_bounds__(DENSE_THREADS)                                  \
    NAME(const T* __restrict__ m, long long n, int width, int dim, const float* __restrict__ q,   \
         int nq, const unsigned int* __restrict__ mask, long long words, int has_mask, int renorm, \
         float* __restrict__ out) {                                                              \
        dense_batch_body<T, VEC8>(m, n, width, dim, q, nq, mask, words, has_mask, renorm, out);   \
    }

DENSE_BATCH_ENTRY(dense_scan_batch_vec8, unsigned short, true)
DENSE_BATCH_ENTRY(dense_scan_batch_scalar, unsigned short, false)
DENSE_BATCH_ENTRY(dense_scan_batch_f32, float, false)
