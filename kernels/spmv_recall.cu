// Sparse recall: query term weights x term-major CSC inverted index -> one score per memory.
//
// Contract
// --------
// Index   indptr  int64 (V+1,)   postings of term t are [indptr[t], indptr[t+1])
//         indices int32 (nnz,)   memory row ids in [0, n_rows)
//         data    float32 (nnz,) term weight in that memory (BM25 impact or SPLADE weight)
// Query   q_ids int32 (Q,), q_weights float32 (Q,), 1 <= Q <= SPMV_MAX_TERMS per launch (the
//         wrapper launches once per chunk of terms, accumulating into the same scores).
//         Ids outside [0, V) are out of vocabulary and contribute nothing; a repeated id counts
//         once per occurrence, like the NumPy reference.
// Output  scores float64 (n_rows,), zeroed by the caller, ACCUMULATED into: a second index
//         segment (appended memories) is scored by a second launch into the same buffer. The
//         caller rounds them to float32 once, after the last segment.
//
// Formulation: scatter with atomics, not gather. Work is proportional to the postings the query
// touches (sum of its terms' document frequencies), not to n_rows x Q. Inside one posting list
// every row is distinct, so atomics only collide when two query terms hit the same memory in the
// same instant, which is rare; a gather (per-row binary search of every query term) would cost
// n_rows * Q * log(df) and read the whole index. The atomics' order is not fixed, so they add
// float64 products (each float32 x float32 product is exact in float64) into float64 sums, which
// are rounded to float32 once: the same bits as the NumPy reference (also float64, rounded once)
// unless a sum falls within about 1e-16 of a float32 rounding boundary. With float32 atomics a
// score differed from the reference by an ulp in the last place for about one memory in twenty,
// enough to reorder exact ties (equal BM25 scores) between the CPU and GPU backends.
//
// The candidate / ACL bitmask and the top-k cut happen afterwards in topk.cu (floor 0: a memory
// that shares no term with the query never comes back).
//
// BM25 variant (spmv_bm25_scatter): data holds raw term frequencies, and each posting is weighed
// in the kernel, in float64, with the row's document length and the average length of the query's
// moment: q_weight * tf (k1 + 1) / (tf + k1 (1 - b + b len / avgdl)). Nothing stored depends on
// avgdl, so a write that moves it re-weighs nothing: the resident BM25 index appends and deletes
// like the others. compute.sparse.bm25_scores is its reference.
//
// Coded variant (spmv_coded_scatter): values are int8 codes (SPLADE's, as the host index keeps
// them: each row's values are its codes times one step per row); the scatter adds weight x code,
// and the caller multiplies each rounded score by its row's step, in float32: the host index's
// own arithmetic, so the same bits, at a byte a posting instead of four.
//
// Launch  spmv_plan<<<1, 256>>>: prefix sum of the Q posting-list lengths into plan_off (Q+1,)
//         and term starts into plan_start (Q,), int64, on the device: no host round trip.
//         spmv_scatter<<<grid, 256, 0>>>: grid-stride over the flattened (term, posting) space;
//         the plan sits in shared memory and each thread finds its term by binary search, so a
//         long posting list is spread over every block instead of serialising one.

#define SPMV_THREADS 256
#define SPMV_MAX_TERMS 1024

extern "C" __global__ void __launch_bounds__(SPMV_THREADS)
spmv_plan(const long long* __restrict__ indptr, long long vocab,
          const int* __restrict__ q_ids, int n_terms,
          long long* __restrict__ plan_start, long long* __restrict__ plan_off) {
    __shared__ long long lens[SPMV_MAX_TERMS];
    for (int t = threadIdx.x; t < n_terms; t += blockDim.x) {
        const long long id = q_ids[t];
        long long start = 0, len = 0;
        if (id >= 0 && id < vocab) {
            start = indptr[id];
            len = indptr[id + 1] - start;
        }
        plan_start[t] = start;
        lens[t] = len;
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // Q <= 1024: a serial scan is a few microseconds and obviously right
        long long acc = 0;
        plan_off[0] = 0;
        for (int t = 0; t < n_terms; ++t) {
            acc += lens[t];
            plan_off[t + 1] = acc;
        }
    }
}

// The query term whose postings hold flattened position j: the largest t with s_off[t] <= j (empty
// lists, with equal offsets, are skipped by taking the last).
__device__ __forceinline__ int spmv_term_of(const long long* s_off, int n_terms, long long j) {
    int lo = 0, hi = n_terms - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (s_off[mid] <= j) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// The plan and the query weights into the block's shared memory (the caller synchronises after).
__device__ __forceinline__ void spmv_load_plan(long long* s_off, long long* s_start, float* s_w,
                                               const long long* __restrict__ plan_off,
                                               const long long* __restrict__ plan_start,
                                               const float* __restrict__ q_weights, int n_terms) {
    for (int t = threadIdx.x; t <= n_terms; t += blockDim.x) {
        s_off[t] = plan_off[t];
        if (t < n_terms) {
            s_start[t] = plan_start[t];
            s_w[t] = q_weights[t];
        }
    }
}

// Every (term, posting) of the plan, grid-stride: adds the term's weight times the posting's value
// (``value(p, row)``, float64) to the row's score. The plan must be in shared memory already.
template <typename Value>
__device__ __forceinline__ void spmv_scatter_all(const long long* s_off, const long long* s_start, const float* s_w,
                                                 int n_terms, const int* __restrict__ indices,
                                                 double* __restrict__ scores, const Value& value) {
    const long long total = s_off[n_terms];
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < total;
         j += (long long)gridDim.x * blockDim.x) {
        const int t = spmv_term_of(s_off, n_terms, j);
        const long long p = s_start[t] + (j - s_off[t]);
        const int row = indices[p];
        atomicAdd(&scores[row], (double)s_w[t] * value(p, row));
    }
}

// A scatter kernel's whole body: the plan and the query weights into the block's shared memory,
// then every (term, posting) scattered with ``value``. Each kernel that calls it gets arrays of
// its own (static shared memory declared in a device function is the calling kernel's).
template <typename Value>
__device__ __forceinline__ void spmv_planned_scatter(const long long* __restrict__ plan_start,
                                                     const long long* __restrict__ plan_off,
                                                     const float* __restrict__ q_weights, int n_terms,
                                                     const int* __restrict__ indices, double* __restrict__ scores,
                                                     const Value& value) {
    __shared__ long long s_off[SPMV_MAX_TERMS + 1];
    __shared__ long long s_start[SPMV_MAX_TERMS];
    __shared__ float s_w[SPMV_MAX_TERMS];
    spmv_load_plan(s_off, s_start, s_w, plan_off, plan_start, q_weights, n_terms);
    __syncthreads();
    spmv_scatter_all(s_off, s_start, s_w, n_terms, indices, scores, value);
}

// The stored value as it is (a BM25 impact, a SPLADE weight).
struct SpmvStored {
    const float* data;
    __device__ __forceinline__ double operator()(long long p, int) const { return (double)data[p]; }
};

// BM25's term-frequency part of a raw frequency, in float64, with the row's length.
struct SpmvCoded {  // int8 codes: the row's step multiplies the rounded sum afterwards, as on the host
    const signed char* codes;
    __device__ __forceinline__ double operator()(long long p, int) const { return (double)codes[p]; }
};

struct SpmvBm25 {
    const float* tf;
    const float* doc_len;
    double k1, b, avgdl;
    __device__ __forceinline__ double operator()(long long p, int row) const {
        const double f = (double)tf[p];
        return f * (k1 + 1.0) / (f + k1 * (1.0 - b + b * (double)doc_len[row] / avgdl));
    }
};

extern "C" __global__ void __launch_bounds__(SPMV_THREADS)
spmv_scatter(const int* __restrict__ indices, const float* __restrict__ data,
             const long long* __restrict__ plan_start, const long long* __restrict__ plan_off,
             const float* __restrict__ q_weights, int n_terms, double* __restrict__ scores) {
    spmv_planned_scatter(plan_start, plan_off, q_weights, n_terms, indices, scores, SpmvStored{data});
}

extern "C" __global__ void __launch_bounds__(SPMV_THREADS)
spmv_bm25_scatter(const int* __restrict__ indices, const float* __restrict__ tf,
                  const float* __restrict__ doc_len, double k1, double b, double avgdl,
                  const long long* __restrict__ plan_start, const long long* __restrict__ plan_off,
                  const float* __restrict__ q_weights, int n_terms, double* __restrict__ scores) {
    spmv_planned_scatter(plan_start, plan_off, q_weights, n_terms, indices, scores,
                         SpmvBm25{tf, doc_len, k1, b, avgdl});
}

extern "C" __global__ void __launch_bounds__(SPMV_THREADS)
spmv_coded_scatter(const int* __restrict__ indices, const signed char* __restrict__ codes,
                   const long long* __restrict__ plan_start, const long long* __restrict__ plan_off,
                   const float* __restrict__ q_weights, int n_terms, double* __restrict__ scores) {
    spmv_planned_scatter(plan_start, plan_off, q_weights, n_terms, indices, scores, SpmvCoded{codes});
}
