// Fused late-interaction MaxSim over a packed token store, tiled so that shared memory does not
// depend on the query length or the vector width.
//
// Contract
// --------
// Query   q       float32 (Q, D) row-major, already widened from fp16 by the wrapper; any Q >= 0.
// Store   offsets int64 (N+1,), tokens float16 (T, D) row-major, packed CSR: the tokens of row r
//                 are tokens[offsets[r] : offsets[r+1]]. Packing avoids padding every memory to
//                 the longest one; a row with no tokens is legal.
// Work    cand    int32 (C,) row ids; repeats allowed. An id outside [0, N) scores NaN (the
//                 host-facing wrapper rejects those before launch; this is the last line).
// Output  out     float32 (C,): out[c] = sum_q max_t <q[q], tokens[t]> over the tokens t of row
//                 cand[c]; fp16 storage, fp32 products and accumulation. A row with no tokens
//                 (or Q == 0) scores 0.0. The Q x L similarity matrix is never materialised.
// Dims    any D >= 1. maxsim_vec8 needs D % 8 == 0 and a 16-byte aligned token store (each
//         thread loads 8 halves, 16 bytes, at once); maxsim_scalar takes any D.
// Codes   maxsim_codes reads the compact store instead: codes uint8 (T, width), each byte
//         holding 8 / bits coordinates (bits in {1, 2, 4, 8}, little-endian within the byte:
//         coordinate d of a token is (byte[d / per_byte] >> (bits * (d % per_byte))) & mask),
//         levels float32 (2^bits,) the reconstruction value of each code. A token is decoded to
//         those levels and L2-normalised (a zero vector stays zero) before the dot product, as
//         the host codec decodes it; the query is already rotated into the codes' space.
//
// Launch  grid = C blocks (one candidate per block), MAXSIM_THREADS = 128, no dynamic shared
//         memory: about 9.5 KB of static shared memory whatever Q and D are (10.5 KB with the
//         code book of maxsim_codes).
//
// Tiling  The block walks 32-query-token tiles; inside one, 32-doc-token tiles; inside one,
//         32-dim slices. A slice of the query tile and of the doc tile is staged in shared memory
//         (transposed, padded to 33 columns: conflict-free), and each thread accumulates a 2 x 4
//         micro-tile of (query token, doc token) dot products in registers: query rows ty and
//         ty + 16, doc columns tx, tx + 8, tx + 16, tx + 24 (ty = tid / 8, tx = tid % 8). After a
//         doc tile the thread folds its 4 columns into a running max per query row, in registers.
//         After the last doc tile the 8 threads of a query row fold their maxima through shared
//         memory, and thread 0 adds the tile's 32 maxima in order to the block's sum, so the
//         result does not depend on scheduling. Query tiles beyond the first re-read the doc
//         tokens (from L2 for a candidate's few hundred tokens); no shared memory grows with Q.

#define MAXSIM_THREADS 128
#define MAXSIM_TILE 32
#define MAXSIM_PAD (MAXSIM_TILE + 1)

__device__ __forceinline__ float maxsim_h2f(unsigned short h) {
#ifdef __CUDA_ARCH__
    float f;
    asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
    return f;
#else  // host compilation (the CPU emulation of this kernel): the same IEEE conversion
    return __half2float(__ushort_as_half(h));
#endif
}

#define MAXSIM_SCALAR 0
#define MAXSIM_VEC8 1
#define MAXSIM_CODES 2

// Where a candidate's tokens are and how they are stored.
struct MaxsimDoc {
    const unsigned short* tok;   // fp16 rows (MAXSIM_SCALAR, MAXSIM_VEC8)
    const unsigned char* codes;  // code rows of `width` bytes (MAXSIM_CODES)
    int width, bits;
    const float* levels;         // in shared memory for MAXSIM_CODES
};

// Stage dims [k0, k0 + 32) of doc tokens [t0, t0 + 32) as fp32, transposed: s_t[dim][token].
template <int MODE>
__device__ __forceinline__ void maxsim_stage_doc(float (*s_t)[MAXSIM_PAD], const MaxsimDoc& doc,
                                                 int n_tok, int t0, int k0, int dim) {
    const unsigned short* tok = doc.tok;
    if (MODE == MAXSIM_CODES) {
        const int per_byte = 8 / doc.bits, mask = (1 << doc.bits) - 1;
        for (int e = threadIdx.x; e < MAXSIM_TILE * MAXSIM_TILE; e += MAXSIM_THREADS) {
            const int t = e / MAXSIM_TILE, kk = e % MAXSIM_TILE;
            const int d = k0 + kk;
            float v = 0.0f;
            if (t0 + t < n_tok && d < dim) {
                const unsigned int byte = doc.codes[(long long)(t0 + t) * doc.width + d / per_byte];
                v = doc.levels[(byte >> (doc.bits * (d % per_byte))) & mask];
            }
            s_t[kk][t] = v;
        }
    } else if (MODE == MAXSIM_VEC8) {
        // 32 tokens x 4 groups of 8 halves: one 16-byte load per thread. D % 8 == 0, so a group
        // is wholly inside or wholly outside the vector.
        const int t = threadIdx.x >> 2, g = (threadIdx.x & 3) * 8;
        const int d = k0 + g;
        float v[8];
        if (t0 + t < n_tok && d < dim) {
            const uint4 pack = *reinterpret_cast<const uint4*>(tok + (long long)(t0 + t) * dim + d);
            const unsigned int words[4] = {pack.x, pack.y, pack.z, pack.w};
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                v[2 * h] = maxsim_h2f((unsigned short)(words[h] & 0xFFFFu));
                v[2 * h + 1] = maxsim_h2f((unsigned short)(words[h] >> 16));
            }
        } else {
#pragma unroll
            for (int u = 0; u < 8; ++u) v[u] = 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) s_t[g + u][t] = v[u];
    } else {
        for (int e = threadIdx.x; e < MAXSIM_TILE * MAXSIM_TILE; e += MAXSIM_THREADS) {
            const int t = e / MAXSIM_TILE, kk = e % MAXSIM_TILE;  // consecutive threads: consecutive dims
            const int d = k0 + kk;
            s_t[kk][t] = (t0 + t < n_tok && d < dim) ? maxsim_h2f(tok[(long long)(t0 + t) * dim + d]) : 0.0f;
        }
    }
}

template <int MODE>
__device__ __forceinline__ void maxsim_body(const float* __restrict__ q, int n_q, int dim,
                                            const long long* __restrict__ offsets, long long n_rows,
                                            MaxsimDoc doc, const int* __restrict__ cand,
                                            float* __restrict__ out) {
    __shared__ float s_q[MAXSIM_TILE][MAXSIM_PAD];   // [dim in slice][query token in tile]
    __shared__ float s_t[MAXSIM_TILE][MAXSIM_PAD];   // [dim in slice][doc token in tile]
    __shared__ float s_red[MAXSIM_TILE][8];          // [query token][tx]: each thread's max
    __shared__ float s_levels[256];                  // MAXSIM_CODES: the code book
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
    if (MODE == MAXSIM_CODES) {
        for (int i = threadIdx.x; i < (1 << doc.bits); i += MAXSIM_THREADS) s_levels[i] = doc.levels[i];
        doc.levels = s_levels;
        doc.codes += first * (long long)doc.width;
        __syncthreads();  // the code book is in place before any staging reads it
    } else {
        doc.tok += first * (long long)dim;
    }
    const int ty = threadIdx.x >> 3, tx = threadIdx.x & 7;
    float total = 0.0f;  // meaningful in thread 0 only
    for (int q0 = 0; q0 < n_q; q0 += MAXSIM_TILE) {
        float best[2] = {__int_as_float(0xFF800000), __int_as_float(0xFF800000)};  // -inf
        for (int t0 = 0; t0 < n_tok; t0 += MAXSIM_TILE) {
            float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
            float nrm[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // MAXSIM_CODES: squared norms of the 4 columns
            for (int k0 = 0; k0 < dim; k0 += MAXSIM_TILE) {
                for (int e = threadIdx.x; e < MAXSIM_TILE * MAXSIM_TILE; e += MAXSIM_THREADS) {
                    const int qi = e / MAXSIM_TILE, kk = e % MAXSIM_TILE;
                    const int d = k0 + kk;
                    s_q[kk][qi] = (q0 + qi < n_q && d < dim) ? q[(long long)(q0 + qi) * dim + d] : 0.0f;
                }
                maxsim_stage_doc<MODE>(s_t, doc, n_tok, t0, k0, dim);
                __syncthreads();
#pragma unroll 8
                for (int kk = 0; kk < MAXSIM_TILE; ++kk) {
                    const float a0 = s_q[kk][ty], a1 = s_q[kk][ty + 16];
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const float b = s_t[kk][tx + 8 * j];
                        acc[0][j] = fmaf(a0, b, acc[0][j]);
                        acc[1][j] = fmaf(a1, b, acc[1][j]);
                        if (MODE == MAXSIM_CODES) nrm[j] = fmaf(b, b, nrm[j]);
                    }
                }
                __syncthreads();  // the next slice overwrites s_q and s_t
            }
            if (MODE == MAXSIM_CODES) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const float inv = nrm[j] > 0.0f ? 1.0f / sqrtf(nrm[j]) : 0.0f;
                    acc[0][j] *= inv;
                    acc[1][j] *= inv;
                }
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (t0 + tx + 8 * j < n_tok) {  // padding columns are not tokens
                    best[0] = fmaxf(best[0], acc[0][j]);
                    best[1] = fmaxf(best[1], acc[1][j]);
                }
            }
        }
        s_red[ty][tx] = best[0];
        s_red[ty + 16][tx] = best[1];
        __syncthreads();
        if (threadIdx.x == 0) {
            const int rows = min(MAXSIM_TILE, n_q - q0);
            for (int qi = 0; qi < rows; ++qi) {
                float m = s_red[qi][0];
#pragma unroll
                for (int x = 1; x < 8; ++x) m = fmaxf(m, s_red[qi][x]);
                total += m;
            }
        }
        __syncthreads();  // s_red is rewritten by the next query tile
    }
    if (threadIdx.x == 0) out[c] = total;
}

extern "C" __global__ void __launch_bounds__(MAXSIM_THREADS)
maxsim_vec8(const float* __restrict__ q, int n_q, int dim, const long long* __restrict__ offsets,
            long long n_rows, const unsigned short* __restrict__ tokens, const int* __restrict__ cand,
            float* __restrict__ out) {
    maxsim_body<MAXSIM_VEC8>(q, n_q, dim, offsets, n_rows, MaxsimDoc{tokens, nullptr, 0, 0, nullptr}, cand, out);
}

extern "C" __global__ void __launch_bounds__(MAXSIM_THREADS)
maxsim_scalar(const float* __restrict__ q, int n_q, int dim, const long long* __restrict__ offsets,
              long long n_rows, const unsigned short* __restrict__ tokens, const int* __restrict__ cand,
              float* __restrict__ out) {
    maxsim_body<MAXSIM_SCALAR>(q, n_q, dim, offsets, n_rows, MaxsimDoc{tokens, nullptr, 0, 0, nullptr}, cand, out);
}

extern "C" __global__ void __launch_bounds__(MAXSIM_THREADS)
maxsim_codes(const float* __restrict__ q, int n_q, int dim, const long long* __restrict__ offsets,
             long long n_rows, const unsigned char* __restrict__ codes, int width, int bits,
             const float* __restrict__ levels, const int* __restrict__ cand, float* __restrict__ out) {
    maxsim_body<MAXSIM_CODES>(q, n_q, dim, offsets, n_rows, MaxsimDoc{nullptr, codes, width, bits, levels}, cand, out);
}
