// Fused late-interaction MaxSim over a packed token store.
//
// Contract
// --------
// Query   q       float32 (Q, D) row-major, already widened from fp16 by the wrapper.
// Store   offsets int64 (N+1,), tokens float16 (T, D) row-major, packed CSR: the tokens of row r
//                 are tokens[offsets[r] : offsets[r+1]]. Packing avoids padding every memory to
//                 the longest one; a row with no tokens is legal.
// Work    cand    int32 (C,) row ids; repeats allowed. An id outside [0, N) scores NaN (the
//                 host-facing wrapper rejects those before launch; this is the last line).
// Output  out     float32 (C,): out[c] = sum_q max_t <q[q], tokens[t]> over the tokens t of row
//                 cand[c]; fp16 storage, fp32 products and accumulation. A row with no tokens
//                 (or Q == 0) scores 0.0. The Q x L similarity matrix is never materialised:
//                 only a running max per (warp, query token) lives in shared memory.
// Dims    any D in [1, 32 * NJ]; dims need not be a multiple of 32 (lanes past D load nothing).
//         One entry per register budget: maxsim_d128 (NJ=4), maxsim_d256, maxsim_d512,
//         maxsim_d1024; the wrapper picks the smallest that fits.
//
// Launch  grid = C blocks (one candidate per block), MAXSIM_THREADS = 128 (4 warps).
//         Dynamic shared memory = (Q * D + 4 * Q) * 4 bytes: the query tokens, then one running
//         max per warp and query token. Above 48 KiB the wrapper raises the kernel's
//         max_dynamic_shared_size_bytes; Q * D is bounded by what the device allows.
//         Warp w takes doc tokens w, w+4, ...: lane l holds dims l, l+32, ... of the token in
//         registers (coalesced 64-byte loads), computes one partial dot per query token and
//         reduces it across the warp with shuffles; the lane q % 32 keeps the max for token q.
//         The block then folds the 4 warps' maxima and sums over q in a fixed order, so the
//         result does not depend on scheduling.

#define MAXSIM_THREADS 128
#define MAXSIM_WARPS (MAXSIM_THREADS / 32)

__device__ __forceinline__ float maxsim_h2f(unsigned short h) {
    float f;
    asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
    return f;
}

template <int NJ>
__device__ __forceinline__ void maxsim_body(const float* __restrict__ q, int n_q, int dim,
                                            const long long* __restrict__ offsets, long long n_rows,
                                            const unsigned short* __restrict__ tokens,
                                            const int* __restrict__ cand, float* __restrict__ out) {
    extern __shared__ float smem[];
    float* s_q = smem;                          // [n_q * dim]
    float* s_max = smem + (long long)n_q * dim; // [MAXSIM_WARPS * n_q]
    const int c = blockIdx.x;
    const int row = cand[c];
    if (row < 0 || (long long)row >= n_rows) {  // block-uniform, before any barrier
        if (threadIdx.x == 0) out[c] = __int_as_float(0x7FC00000);  // NaN
        return;
    }
    const long long first = offsets[row];
    const int n_tok = (int)(offsets[row + 1] - first);
    if (n_tok <= 0 || n_q == 0) {
        if (threadIdx.x == 0) out[c] = 0.0f;
        return;
    }
    for (int i = threadIdx.x; i < n_q * dim; i += blockDim.x) s_q[i] = q[i];
    for (int i = threadIdx.x; i < MAXSIM_WARPS * n_q; i += blockDim.x) {
        s_max[i] = __int_as_float(0xFF800000);  // -inf
    }
    __syncthreads();

    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    float* w_max = s_max + warp * n_q;
    for (int t = warp; t < n_tok; t += MAXSIM_WARPS) {
        const unsigned short* tok = tokens + (first + t) * (long long)dim;
        float x[NJ];
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            const int d = lane + 32 * j;
            x[j] = d < dim ? maxsim_h2f(tok[d]) : 0.0f;
        }
        for (int qi = 0; qi < n_q; ++qi) {
            const float* qv = s_q + qi * dim;
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const int d = lane + 32 * j;
                if (d < dim) acc = fmaf(qv[d], x[j], acc);
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
            // Every lane now holds the dot; one lane per query token owns its running max, so
            // there is no race within the warp and no atomics.
            if (lane == (qi & 31)) w_max[qi] = fmaxf(w_max[qi], acc);
        }
    }
    __syncthreads();
    // Fold the warps' maxima (a warp that saw no token left -inf, which fmaxf ignores) and sum
    // over query tokens: lane-strided partial sums, then a fixed shuffle tree in warp 0.
    if (warp == 0) {
        float part = 0.0f;
        for (int qi = lane; qi < n_q; qi += 32) {
            float m = s_max[qi];
#pragma unroll
            for (int w = 1; w < MAXSIM_WARPS; ++w) m = fmaxf(m, s_max[w * n_q + qi]);
            part += m;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xFFFFFFFFu, part, o);
        if (lane == 0) out[c] = part;
    }
}

#define MAXSIM_ENTRY(NAME, NJ)                                                                   \
    extern "C" __global__ void __launch_bounds__(MAXSIM_THREADS)                                \
    NAME(const float* __restrict__ q, int n_q, int dim, const long long* __restrict__ offsets,   \
         long long n_rows, const unsigned short* __restrict__ tokens,                           \
         const int* __restrict__ cand, float* __restrict__ out) {                               \
        maxsim_body<NJ>(q, n_q, dim, offsets, n_rows, tokens, cand, out);                       \
    }

MAXSIM_ENTRY(maxsim_d128, 4)
MAXSIM_ENTRY(maxsim_d256, 8)
MAXSIM_ENTRY(maxsim_d512, 16)
MAXSIM_ENTRY(maxsim_d1024, 32)
