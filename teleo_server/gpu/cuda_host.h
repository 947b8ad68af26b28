// CUDA on the host: the subset of the CUDA C++ device language that kernels/*.cu use, so that a
// kernel's unmodified source compiles with a host C++ compiler and runs on the CPU.
//
// Execution model
// ---------------
// A launch runs its blocks one after another on the calling OS thread. The threads of a block
// are cooperative fibers on that thread, each with its own stack; a fiber runs until it reaches
// a barrier (__syncthreads, a warp collective) or returns, then hands over to the next one.
// Blocks of one launch therefore never overlap, atomics are plain read-modify-writes, and a
// launch is deterministic: the same inputs give the same bits on every run.
//
// What a kernel source may use: threadIdx / blockIdx / blockDim / gridDim; __shared__ arrays
// (static ones are shared by the fibers of a block; `extern __shared__ T name[]` is the launch's
// dynamic shared memory); __syncthreads; the warp collectives __shfl*_sync, __ballot_sync,
// __any_sync, __all_sync, __match_any_sync, __syncwarp; atomics on 32- and 64-bit integers,
// float and double; __half and its conversions; uint4 / float4 and the other vector types; the
// bit casts and bit-count intrinsics. Inline PTX (`asm`) has no host meaning: a kernel keeps it
// under `#ifdef __CUDA_ARCH__` with a portable `#else`, as CUDA's own headers do.
//
// Limits (by design): no memory-model fidelity (no races are possible, so none are found), no
// timing fidelity, warp collectives wait for every lane of the warp that has not returned (a
// partial mask is not honoured), and an out-of-bounds access is a host memory error, not a
// launch error.

#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <type_traits>
#include <utility>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// ---- declaration specifiers --------------------------------------------------------------------
#ifdef TELEO_EMU_SCAN  // the loader's listing pass: keeps kernel entries recognisable
#define __global__ __teleo_global__
#else
#define __global__
#endif
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
// Block-scope thread_local is one object per OS thread, and a block's fibers share one thread.
#define __shared__ thread_local
#define __constant__ static

// ---- vector types --------------------------------------------------------------------------------
struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x = 1, y = 1, z = 1; };
struct alignas(8) uint2 { unsigned int x, y; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };

// ---- half precision ------------------------------------------------------------------------------
struct __half { unsigned short bits; };

inline float __half2float(__half h) {
    const unsigned int sign = (h.bits & 0x8000u) << 16;
    unsigned int exp = (h.bits >> 10) & 0x1Fu;
    unsigned int man = h.bits & 0x3FFu;
    unsigned int out;
    if (exp == 0x1Fu) {
        out = sign | 0x7F800000u | (man << 13);  // inf / NaN
    } else if (exp != 0) {
        out = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        out = sign;  // signed zero
    } else {  // subnormal: normalise
        int e = -1;
        do { man <<= 1; ++e; } while (!(man & 0x400u));
        out = sign | ((112u - (unsigned int)e) << 23) | ((man & 0x3FFu) << 13);
    }
    float f;
    std::memcpy(&f, &out, 4);
    return f;
}

inline __half __float2half(float f) {  // round to nearest even, as __float2half_rn
    unsigned int x;
    std::memcpy(&x, &f, 4);
    const unsigned short sign = (unsigned short)((x >> 16) & 0x8000u);
    const unsigned int absx = x & 0x7FFFFFFFu;
    unsigned short h;
    if (absx >= 0x7F800000u) {
        h = sign | 0x7C00u | (absx > 0x7F800000u ? 0x200u : 0u);
    } else if (absx >= 0x477FF000u) {  // rounds to >= 65520: overflow to inf
        h = sign | 0x7C00u;
    } else if (absx < 0x38800000u) {  // below the smallest normal half: a multiple of 2^-24
        float mag;
        std::memcpy(&mag, &absx, 4);
        // scaling by 2^24 is exact; the default rounding mode rounds half to even
        h = sign | (unsigned short)std::nearbyint(mag * 16777216.0f);
    } else {
        const unsigned int kept = (absx - 0x38000000u) >> 13;
        const unsigned int rest = absx & 0x1FFFu;
        h = sign | (unsigned short)(kept + ((rest > 0x1000u || (rest == 0x1000u && (kept & 1u))) ? 1u : 0u));
    }
    return __half{h};
}

inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline __half __float2half_rn(float f) { return __float2half(f); }

// ---- bit casts and bit counts ----------------------------------------------------------------------
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned int)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline unsigned int __brev(unsigned int x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    x = ((x >> 8) & 0x00FF00FFu) | ((x & 0x00FF00FFu) << 8);
    return (x >> 16) | (x << 16);
}
template <typename T> inline T __ldg(const T* p) { return *p; }

// Device code calls min / max unqualified on ints and floats alike.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }

// ---- fibers ------------------------------------------------------------------------------------------
namespace teleo_emu {

constexpr int kMaxThreads = 1024;
constexpr int kMaxWarps = kMaxThreads / 32;
constexpr std::size_t kStack = 256 * 1024;

#if defined(__x86_64__)
// Saves the callee-saved registers, MXCSR and the x87 control word on the current stack, stores
// the stack pointer in *save and resumes the context whose stack pointer is `to`.
extern "C" void teleo_emu_switch(void** save, void* to);
asm(R"(
    .text
    .p2align 4
    .hidden teleo_emu_switch
    .type teleo_emu_switch, @function
teleo_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size teleo_emu_switch, .-teleo_emu_switch
)");
#endif

struct Fiber {
#if defined(__x86_64__)
    void* sp = nullptr;
#else
    ucontext_t ctx;
#endif
    uint3 tid{0, 0, 0};
    int lane = 0;
    int warp = 0;
    bool done = false;
};

struct Barrier {
    int arrived = 0;
    unsigned long long generation = 0;
};

struct Warp {
    Barrier bar;
    int live = 0;
    unsigned long long slot[32];
};

struct Launch {
    dim3 grid, block;
    uint3 block_idx{0, 0, 0};
    int n_threads = 0;
    int live = 0;
    Fiber* fibers = nullptr;
    Fiber* current = nullptr;
    char* stacks = nullptr;
    void (*body)(void*) = nullptr;
    void* body_arg = nullptr;
    Barrier block_bar;
    Warp warps[kMaxWarps];
    unsigned long long events = 0;  // barrier arrivals and fiber exits: a yield round without any is a deadlock
    int idle_yields = 0;
    const char* error = nullptr;
#if defined(__x86_64__)
    void* home_sp = nullptr;
#else
    ucontext_t home;
#endif
};

inline thread_local Launch* g_launch = nullptr;

inline void switch_to(Fiber* from, Fiber* to) {
    Launch* L = g_launch;
    L->current = to;
#if defined(__x86_64__)
    teleo_emu_switch(&from->sp, to->sp);
#else
    swapcontext(&from->ctx, &to->ctx);
#endif
}

inline void go_home(Fiber* from) {
    Launch* L = g_launch;
#if defined(__x86_64__)
    teleo_emu_switch(&from->sp, L->home_sp);
#else
    swapcontext(&from->ctx, &L->home);
#endif
}

inline Fiber* next_live(Fiber* f) {
    Launch* L = g_launch;
    long i = f - L->fibers;
    for (int step = 1; step <= L->n_threads; ++step) {
        Fiber* g = &L->fibers[(i + step) % L->n_threads];
        if (!g->done) return g;
    }
    return nullptr;
}

// Hand over to the next live fiber; a whole round of waiting with nothing happening is a deadlock
// (a barrier some threads never reach), reported instead of spinning forever.
inline void yield() {
    Launch* L = g_launch;
    Fiber* self = L->current;
    if (++L->idle_yields > 2 * L->live + 2) {
        L->error = "deadlock: threads wait at a barrier that the other threads of the block never reach";
        go_home(self);  // never resumed
    }
    Fiber* to = next_live(self);
    if (to != self) switch_to(self, to);
}

inline void note_event() {
    g_launch->events++;
    g_launch->idle_yields = 0;
}

inline void arrive_and_wait(Barrier& bar, int expected) {
    note_event();
    if (++bar.arrived >= expected) {
        bar.arrived = 0;
        bar.generation++;
        return;
    }
    const unsigned long long gen = bar.generation;
    while (bar.generation == gen) yield();
}

inline void release_if_complete(Barrier& bar, int expected) {
    if (bar.arrived > 0 && bar.arrived >= expected) {
        bar.arrived = 0;
        bar.generation++;
    }
}

#if defined(__x86_64__)
[[noreturn]] inline void fiber_exit();
inline void fiber_entry() {
    Launch* L = g_launch;
    L->body(L->body_arg);
    fiber_exit();
}
#else
inline void fiber_entry_uc() {
    Launch* L = g_launch;
    L->body(L->body_arg);
    Fiber* self = L->current;
    self->done = true;
    L->live--;
    L->warps[self->warp].live--;
    note_event();
    release_if_complete(L->block_bar, L->live);
    release_if_complete(L->warps[self->warp].bar, L->warps[self->warp].live);
    Fiber* to = next_live(self);
    if (to) { L->current = to; setcontext(&to->ctx); }
    // returning from the ucontext entry resumes uc_link: the launcher's home context
}
#endif

#if defined(__x86_64__)
[[noreturn]] inline void fiber_exit() {
    Launch* L = g_launch;
    Fiber* self = L->current;
    self->done = true;
    L->live--;
    Warp& w = L->warps[self->warp];
    w.live--;
    note_event();
    release_if_complete(L->block_bar, L->live);
    release_if_complete(w.bar, w.live);
    Fiber* to = next_live(self);
    if (to) {
        L->current = to;
        void* dead;
        teleo_emu_switch(&dead, to->sp);
    } else {
        void* dead;
        teleo_emu_switch(&dead, L->home_sp);
    }
    __builtin_unreachable();
}
#endif

inline void init_fiber(Launch* L, Fiber* f, int index) {
    char* base = L->stacks + (std::size_t)index * kStack;
#if defined(__x86_64__)
    std::uintptr_t top = ((std::uintptr_t)(base + kStack)) & ~(std::uintptr_t)15;
    auto* sp = reinterpret_cast<std::uint64_t*>(top - 72);  // 8 mod 16 after the `ret` below
    std::uint32_t csr[2];
    asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
    std::memcpy(&sp[0], csr, 8);
    for (int r = 1; r <= 6; ++r) sp[r] = 0;  // r15 .. rbp
    sp[7] = reinterpret_cast<std::uint64_t>(&fiber_entry);
    sp[8] = 0;  // fiber_entry's return address: it never returns
    f->sp = sp;
#else
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = base;
    f->ctx.uc_stack.ss_size = kStack;
    f->ctx.uc_link = &L->home;
    makecontext(&f->ctx, fiber_entry_uc, 0);
#endif
    f->done = false;
}

// Runs `body(arg)` once for every thread of every block; 0 on success, else writes `err`.
inline int run(dim3 grid, dim3 block, void (*body)(void*), void* arg, char* err, std::size_t errlen) {
    const long long threads = (long long)block.x * block.y * block.z;
    if (threads < 1 || threads > kMaxThreads || block.z > 64) {
        std::snprintf(err, errlen, "invalid block (%u, %u, %u): 1..1024 threads, z <= 64", block.x, block.y, block.z);
        return 1;
    }
    if (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.y > 65535 || grid.z > 65535) {
        std::snprintf(err, errlen, "invalid grid (%u, %u, %u)", grid.x, grid.y, grid.z);
        return 1;
    }
    Launch L;
    L.grid = grid;
    L.block = block;
    L.n_threads = (int)threads;
    L.body = body;
    L.body_arg = arg;
    Fiber fibers[kMaxThreads];
    L.fibers = fibers;
    void* mem = mmap(nullptr, kStack * (std::size_t)threads, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) {
        std::snprintf(err, errlen, "cannot map %lld fiber stacks", threads);
        return 1;
    }
    L.stacks = static_cast<char*>(mem);
    Launch* outer = g_launch;
    g_launch = &L;
    int rc = 0;
    for (unsigned int bz = 0; bz < grid.z && rc == 0; ++bz)
    for (unsigned int by = 0; by < grid.y && rc == 0; ++by)
    for (unsigned int bx = 0; bx < grid.x && rc == 0; ++bx) {
        L.block_idx = uint3{bx, by, bz};
        L.live = L.n_threads;
        L.block_bar = Barrier{};
        L.idle_yields = 0;
        for (int w = 0; w < kMaxWarps; ++w) { L.warps[w].bar = Barrier{}; L.warps[w].live = 0; }
        for (int t = 0; t < L.n_threads; ++t) {
            Fiber& f = fibers[t];
            f.tid = uint3{(unsigned int)(t % block.x), (unsigned int)((t / block.x) % block.y),
                          (unsigned int)(t / (block.x * block.y))};
            f.lane = t & 31;
            f.warp = t >> 5;
            L.warps[f.warp].live++;
            init_fiber(&L, &f, t);
        }
        L.current = &fibers[0];
#if defined(__x86_64__)
        teleo_emu_switch(&L.home_sp, fibers[0].sp);
#else
        swapcontext(&L.home, &fibers[0].ctx);
#endif
        if (L.error) {
            std::snprintf(err, errlen, "block (%u, %u, %u): %s", bx, by, bz, L.error);
            rc = 1;
        }
    }
    g_launch = outer;
    munmap(mem, kStack * (std::size_t)threads);
    return rc;
}

inline Fiber& self() { return *g_launch->current; }

template <typename T>
inline T exchange(T value, int (*source)(int lane, int arg, int width), int arg, int width) {
    static_assert(sizeof(T) <= 8, "warp exchange of at most 8 bytes");
    Launch* L = g_launch;
    Fiber& f = *L->current;
    Warp& w = L->warps[f.warp];
    std::memcpy(&w.slot[f.lane], &value, sizeof(T));
    arrive_and_wait(w.bar, w.live);
    T out;
    std::memcpy(&out, &w.slot[source(f.lane, arg, width)], sizeof(T));
    arrive_and_wait(w.bar, w.live);
    return out;
}

inline int src_idx(int lane, int arg, int width) { return (lane & ~(width - 1)) | (arg & (width - 1)); }
inline int src_xor(int lane, int arg, int width) {
    const int s = lane ^ arg;
    return s >= ((lane & ~(width - 1)) + width) ? lane : s;
}
inline int src_down(int lane, int arg, int width) {
    return (lane & (width - 1)) + arg < width ? lane + arg : lane;
}
inline int src_up(int lane, int arg, int width) { return (lane & (width - 1)) >= arg ? lane - arg : lane; }

template <typename T>
inline unsigned int vote(T value, unsigned int (*combine)(const unsigned long long* slots, int lane, unsigned int live)) {
    Launch* L = g_launch;
    Fiber& f = *L->current;
    Warp& w = L->warps[f.warp];
    unsigned long long bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    w.slot[f.lane] = bits;
    arrive_and_wait(w.bar, w.live);
    unsigned int live = 0;
    const int first = f.warp * 32;
    for (int l = 0; l < 32 && first + l < L->n_threads; ++l) {
        if (!L->fibers[first + l].done) live |= 1u << l;
    }
    const unsigned int out = combine(w.slot, f.lane, live);
    arrive_and_wait(w.bar, w.live);
    return out;
}

inline unsigned int combine_ballot(const unsigned long long* s, int, unsigned int live) {
    unsigned int out = 0;
    for (int l = 0; l < 32; ++l) if ((live >> l) & 1u && s[l]) out |= 1u << l;
    return out;
}
inline unsigned int combine_match(const unsigned long long* s, int lane, unsigned int live) {
    unsigned int out = 0;
    for (int l = 0; l < 32; ++l) if ((live >> l) & 1u && s[l] == s[lane]) out |= 1u << l;
    return out;
}

}  // namespace teleo_emu

// ---- built-in variables --------------------------------------------------------------------------
#define threadIdx (::teleo_emu::self().tid)
#define blockIdx (::teleo_emu::g_launch->block_idx)
#define blockDim (::teleo_emu::g_launch->block)
#define gridDim (::teleo_emu::g_launch->grid)
#define warpSize 32

// ---- synchronisation -----------------------------------------------------------------------------
inline void __syncthreads() {
    ::teleo_emu::arrive_and_wait(::teleo_emu::g_launch->block_bar, ::teleo_emu::g_launch->live);
}
inline int __syncthreads_count(int p) {
    thread_local int total;
    __syncthreads();
    total = 0;  // every fiber writes 0 before anyone adds: the barrier below orders it
    __syncthreads();
    total += p != 0;
    __syncthreads();
    const int out = total;
    __syncthreads();
    return out;
}
inline void __syncwarp(unsigned int = 0xFFFFFFFFu) {
    auto& w = ::teleo_emu::g_launch->warps[::teleo_emu::self().warp];
    ::teleo_emu::arrive_and_wait(w.bar, w.live);
}
inline void __threadfence() {}
inline void __threadfence_block() {}
inline unsigned int __activemask() {
    return ::teleo_emu::vote(0, [](const unsigned long long*, int, unsigned int live) { return live; });
}

template <typename T> inline T __shfl_sync(unsigned int, T v, int src, int width = 32) {
    return ::teleo_emu::exchange(v, ::teleo_emu::src_idx, src, width);
}
template <typename T> inline T __shfl_xor_sync(unsigned int, T v, int lane_mask, int width = 32) {
    return ::teleo_emu::exchange(v, ::teleo_emu::src_xor, lane_mask, width);
}
template <typename T> inline T __shfl_down_sync(unsigned int, T v, unsigned int delta, int width = 32) {
    return ::teleo_emu::exchange(v, ::teleo_emu::src_down, (int)delta, width);
}
template <typename T> inline T __shfl_up_sync(unsigned int, T v, unsigned int delta, int width = 32) {
    return ::teleo_emu::exchange(v, ::teleo_emu::src_up, (int)delta, width);
}
inline unsigned int __ballot_sync(unsigned int, int p) { return ::teleo_emu::vote(p != 0, ::teleo_emu::combine_ballot); }
inline int __any_sync(unsigned int m, int p) { return __ballot_sync(m, p) != 0; }
inline int __all_sync(unsigned int m, int p) {
    const unsigned int live = __activemask();
    return (__ballot_sync(m, p) & live) == live;
}
template <typename T> inline unsigned int __match_any_sync(unsigned int, T v) {
    return ::teleo_emu::vote(v, ::teleo_emu::combine_match);
}

// ---- atomics (the block's fibers share one OS thread and blocks run in turn) -----------------------
template <typename T> inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <typename T> inline T atomicSub(T* p, T v) { T old = *p; *p = old - v; return old; }
template <typename T> inline T atomicMax(T* p, T v) { T old = *p; if (v > old) *p = v; return old; }
template <typename T> inline T atomicMin(T* p, T v) { T old = *p; if (v < old) *p = v; return old; }
template <typename T> inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <typename T> inline T atomicCAS(T* p, T compare, T v) { T old = *p; if (old == compare) *p = v; return old; }
template <typename T> inline T atomicAnd(T* p, T v) { T old = *p; *p = old & v; return old; }
template <typename T> inline T atomicOr(T* p, T v) { T old = *p; *p = old | v; return old; }
template <typename T> inline T atomicXor(T* p, T v) { T old = *p; *p = old ^ v; return old; }

// ---- launch glue used by the generated entry points --------------------------------------------
namespace teleo_emu {

template <typename T> struct Param {
    static constexpr int kind = std::is_pointer<T>::value ? 1 : (std::is_floating_point<T>::value ? 2 : 3);
};

template <typename... A, std::size_t... I>
inline void call_with(void (*fn)(A...), void** args, std::index_sequence<I...>) {
    fn(*static_cast<typename std::remove_reference<A>::type*>(args[I])...);
}

template <typename... A> struct Bound {
    void (*fn)(A...);
    void** args;
    static void invoke(void* self) {
        auto* b = static_cast<Bound*>(self);
        call_with(b->fn, b->args, std::index_sequence_for<A...>{});
    }
};

template <typename... A>
inline int launch(void (*fn)(A...), const unsigned int* dims, void** args, char* err, std::size_t errlen) {
    Bound<A...> b{fn, args};
    return run(dim3{dims[0], dims[1], dims[2]}, dim3{dims[3], dims[4], dims[5]}, &Bound<A...>::invoke, &b, err, errlen);
}

// The parameter list as (size, kind) pairs: kind 1 pointer, 2 floating point, 3 integer.
template <typename... A>
inline int signature(void (*)(A...), int* sizes, int* kinds, int cap) {
    const int s[] = {0, (int)sizeof(A)...};
    const int k[] = {0, Param<A>::kind...};
    const int n = (int)sizeof...(A);
    for (int i = 0; i < n && i < cap; ++i) { sizes[i] = s[i + 1]; kinds[i] = k[i + 1]; }
    return n;
}

}  // namespace teleo_emu
