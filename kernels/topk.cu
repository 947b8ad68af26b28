// Top-k selection over a score vector by radix select on unique 64-bit keys.
//
// Contract
// --------
// Input   scores  float32 (n,), device, contiguous. NaN never qualifies.
//         mask    uint32 (ceil(n / 32),) bitset, bit (i & 31) of word (i >> 5) set = row i allowed;
//                 ignored when has_mask == 0 (pass any 1-word array).
//         floor   when use_floor != 0 a row qualifies only if score > floor (SpMV passes 0.0:
//                 memories sharing no term with the query never come back).
// Order   score descending, ties by ascending row id. Each qualifying row gets the key
//             key = ord(score) << 32 | (0xFFFFFFFF - row)
//         where ord() maps IEEE-754 floats to uint32 preserving order (-0.0 is folded into +0.0
//         first, so signed zeros tie). Keys are unique, so "the k largest keys" is exactly the
//         answer, with no tie handling at the cut. Key 0 is never produced by a real row
//         (ord(-inf) = 0x007FFFFF), so 0 doubles as "empty slot".
// Output  keys_out uint64 (kbuf,), kbuf = min(k, n): the selected keys, unordered; slots left
//         zero when fewer than k rows qualify. The caller sorts them (CUB via cupy.sort) and
//         decodes with topk_decode, which writes ids int32 / scores float32 best first and pads
//         with id -1, score -inf. state[7] holds the number of keys written = min(k, qualifying).
// Edges   n == 0 or k == 0: the wrapper launches nothing. k >= qualifying: pass 0 sees it and
//         selects every qualifying row. All masked: count 0, all slots padding.
// Launch  Per digit pass p = 0..7 (8-bit digits, most significant first):
//             topk_histogram<<<grid, 256>>>(..., p)  grid-stride over n, warp-aggregated
//                                                    shared-memory atomics into 256 bins
//             topk_scan<<<1, 32>>>(..., p)           one thread walks the 256 bins
//         then topk_collect<<<grid, 256>>> and, after the sort, topk_decode<<<ceil(kbuf/256), 256>>>.
//         Once the scan finds that the whole bin at the cut is wanted, it marks the search done
//         and later histogram passes return at once, so typical inputs cost 2-4 real passes.
//         No host synchronisation anywhere: state lives in a zeroed uint64[8] device buffer.
//         Small n: topk_small<<<1, 1024>>> runs every pass, the choice and the collection in one
//         block (shared-memory histogram, state in shared memory), so the selection is one launch.
// State   [0] prefix of the k-th key found so far   [1] mask of the bits fixed in [0]
//         [2] rank still wanted inside the prefix    [3] done flag
//         [4] threshold key T                        [5] shift s: select rows with key>>s >= T>>s
//         [6] qualifying rows (from pass 0)          [7] keys written by topk_collect

#define TOPK_THREADS 256
#define TOPK_SMALL_THREADS 1024
#define TOPK_BINS 256

__device__ __forceinline__ bool topk_qualifies(float s, unsigned int row,
                                               const unsigned int* __restrict__ mask,
                                               int has_mask, int use_floor, float floor) {
    if (s != s) return false;
    if (has_mask && !((mask[row >> 5] >> (row & 31u)) & 1u)) return false;
    if (use_floor && !(s > floor)) return false;
    return true;
}

__device__ __forceinline__ unsigned long long topk_key(float s, unsigned int row) {
    if (s == 0.0f) s = 0.0f;  // -0.0 == 0.0, so this folds the sign bit
    unsigned int u = __float_as_uint(s);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (unsigned long long)(0xFFFFFFFFu - row);
}

extern "C" __global__ void __launch_bounds__(TOPK_THREADS)
topk_histogram(const float* __restrict__ scores, const unsigned int* __restrict__ mask,
               int has_mask, int use_floor, float floor, int n, int pass,
               const unsigned long long* __restrict__ state, unsigned int* __restrict__ hist) {
    __shared__ unsigned int bins[TOPK_BINS];
    if (state[3]) return;  // uniform across the grid: no thread reaches a barrier below
    const unsigned long long prefix = state[0];
    const unsigned long long pmask = state[1];
    const int shift = 56 - 8 * pass;
    for (int b = threadIdx.x; b < TOPK_BINS; b += blockDim.x) bins[b] = 0;
    __syncthreads();
    const unsigned int lane = threadIdx.x & 31u;
    // Every lane of a warp runs the same number of iterations (base is block-uniform), which
    // __match_any_sync with a full mask requires.
    for (long long base = (long long)blockIdx.x * blockDim.x; base < n;
         base += (long long)gridDim.x * blockDim.x) {
        const long long i = base + threadIdx.x;
        unsigned int digit = TOPK_BINS;  // sentinel: contributes nothing
        if (i < n) {
            const float s = scores[i];
            if (topk_qualifies(s, (unsigned int)i, mask, has_mask, use_floor, floor)) {
                const unsigned long long key = topk_key(s, (unsigned int)i);
                if ((key & pmask) == prefix) digit = (unsigned int)(key >> shift) & 0xFFu;
            }
        }
        // Scores cluster in a few exponent bins; aggregate equal digits per warp first.
        const unsigned int peers = __match_any_sync(0xFFFFFFFFu, digit);
        if (digit < TOPK_BINS && lane == (unsigned int)(__ffs(peers) - 1)) {
            atomicAdd(&bins[digit], (unsigned int)__popc(peers));
        }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < TOPK_BINS; b += blockDim.x) {
        if (bins[b]) atomicAdd(&hist[b], bins[b]);
    }
}

// One digit pass of the selection, given that pass's 256-bin histogram: narrows the prefix of the
// k-th key in st[0..5] (the State layout above; st[6] is set on pass 0). Run by one thread.
__device__ __forceinline__ void topk_choose(const unsigned int* hist, unsigned long long* st, int k, int pass) {
    const int shift = 56 - 8 * pass;
    unsigned long long want = (pass == 0) ? (unsigned long long)k : st[2];
    if (pass == 0) {
        unsigned long long total = 0;
        for (int b = 0; b < TOPK_BINS; ++b) total += hist[b];
        st[6] = total;
        if (total <= want) {  // everything that qualifies is selected
            st[3] = 1; st[4] = 0; st[5] = 0;
            return;
        }
    }
    unsigned long long above = 0;
    int b = TOPK_BINS - 1;
    for (; b > 0; --b) {
        if (above + hist[b] >= want) break;
        above += hist[b];
    }
    const unsigned long long in_bin = hist[b];
    const unsigned long long prefix = st[0] | ((unsigned long long)b << shift);
    want -= above;
    st[0] = prefix;
    st[1] |= 0xFFull << shift;
    st[2] = want;
    if (in_bin == want || pass == 7) {  // the whole bin is taken: its remaining bits do not matter
        st[3] = 1; st[4] = prefix; st[5] = (unsigned long long)shift;
    }
}

extern "C" __global__ void __launch_bounds__(32)
topk_scan(unsigned int* __restrict__ hist, unsigned long long* __restrict__ state, int k, int pass) {
    if (threadIdx.x != 0) return;
    if (state[3]) return;
    topk_choose(hist, state, k, pass);
    for (int i = 0; i < TOPK_BINS; ++i) hist[i] = 0;
}

// The whole selection in one block, for small n (the wrapper's SMALL_N): every digit pass, the
// choice and the collection in one launch instead of about twenty. Same state and output as the
// multi-block path (state must be zeroed; keys_out is left for the sort and topk_decode).
extern "C" __global__ void __launch_bounds__(TOPK_SMALL_THREADS)
topk_small(const float* __restrict__ scores, const unsigned int* __restrict__ mask,
           int has_mask, int use_floor, float floor, int n, int k,
           unsigned long long* __restrict__ state, unsigned long long* __restrict__ keys_out, int kbuf) {
    __shared__ unsigned int bins[TOPK_BINS];
    __shared__ unsigned long long st[8];
    __shared__ unsigned int written;
    if (threadIdx.x < 8) st[threadIdx.x] = 0;
    if (threadIdx.x == 0) written = 0;
    for (int pass = 0; pass < 8; ++pass) {
        for (int b = threadIdx.x; b < TOPK_BINS; b += blockDim.x) bins[b] = 0;
        __syncthreads();  // also publishes st from the previous pass
        if (st[3]) break;  // block-uniform: read after the barrier, written before it
        const unsigned long long prefix = st[0], pmask = st[1];
        const int shift = 56 - 8 * pass;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const float s = scores[i];
            if (!topk_qualifies(s, (unsigned int)i, mask, has_mask, use_floor, floor)) continue;
            const unsigned long long key = topk_key(s, (unsigned int)i);
            if ((key & pmask) == prefix) atomicAdd(&bins[(unsigned int)(key >> shift) & 0xFFu], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) topk_choose(bins, st, k, pass);
        __syncthreads();  // st is read by every thread at the top of the next pass
    }
    const unsigned long long cut = st[4] >> (int)st[5];
    const int shift = (int)st[5];
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float s = scores[i];
        if (!topk_qualifies(s, (unsigned int)i, mask, has_mask, use_floor, floor)) continue;
        const unsigned long long key = topk_key(s, (unsigned int)i);
        if ((key >> shift) >= cut) {
            const unsigned int slot = atomicAdd(&written, 1u);
            if (slot < (unsigned int)kbuf) keys_out[slot] = key;
        }
    }
    __syncthreads();
    if (threadIdx.x < 7) state[threadIdx.x] = st[threadIdx.x];
    if (threadIdx.x == 0) state[7] = written;
}

extern "C" __global__ void __launch_bounds__(TOPK_THREADS)
topk_collect(const float* __restrict__ scores, const unsigned int* __restrict__ mask,
             int has_mask, int use_floor, float floor, int n,
             unsigned long long* __restrict__ state, unsigned long long* __restrict__ keys_out,
             int kbuf) {
    const unsigned long long threshold = state[4];
    const int shift = (int)state[5];
    const unsigned long long cut = threshold >> shift;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const float s = scores[i];
        if (!topk_qualifies(s, (unsigned int)i, mask, has_mask, use_floor, floor)) continue;
        const unsigned long long key = topk_key(s, (unsigned int)i);
        if ((key >> shift) >= cut) {
            const unsigned long long slot = atomicAdd(&state[7], 1ull);
            if (slot < (unsigned long long)kbuf) keys_out[slot] = key;
        }
    }
}

// keys_sorted: the collected keys sorted ascending (padding zeros first); writes best first.
extern "C" __global__ void __launch_bounds__(TOPK_THREADS)
topk_decode(const unsigned long long* __restrict__ keys_sorted, int kbuf,
            int* __restrict__ ids_out, float* __restrict__ scores_out) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= kbuf) return;
    const unsigned long long key = keys_sorted[kbuf - 1 - j];
    if (key == 0ull) {
        ids_out[j] = -1;
        scores_out[j] = __int_as_float(0xFF800000);  // -inf
        return;
    }
    const unsigned int u = (unsigned int)(key >> 32);
    const unsigned int bits = (u & 0x80000000u) ? (u & 0x7FFFFFFFu) : ~u;
    ids_out[j] = (int)(0xFFFFFFFFu - (unsigned int)(key & 0xFFFFFFFFull));
    scores_out[j] = __uint_as_float(bits);
}
