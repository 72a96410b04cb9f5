/* kernels/emu/include/gpt2rt_emu_core.h - the CUDA emulator's execution model.

   A grid runs block by block on the host thread that synchronises its stream; one
   block's threads are cooperative fibers on that thread. A fiber runs until it reaches
   a barrier (__syncthreads), a warp collective (shuffles, __syncwarp, ballots, ldmatrix,
   mma) or its end, so a barrier is a real rendezvous and a warp collective sees every
   lane's operands at once. The order in which runnable fibers are resumed, and the
   order of the blocks, come from EMU_ORDER (forward, reverse, random[:seed]): a kernel
   whose result depends on them has a race. Errors a GPU would trap on (a lane reading
   an exited or diverged lane, a barrier nobody can pass) print one line naming the
   kernel, block and thread, and make the launch fail with cudaErrorLaunchFailure.

   Not part of gpt2rt: the header reaches it only through GPT2RT__LAUNCH and the PTX
   helpers of its section 8.3. Header-only C++17, one translation unit per program. */
#ifndef GPT2RT_EMU_CORE_H
#define GPT2RT_EMU_CORE_H
#include <stdarg.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/mman.h>
#include "cuda_fp16.h"
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define GPT2RT_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPT2RT_EMU_ASAN 1
#endif
#endif
#ifdef GPT2RT_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/asan_interface.h>
#endif

/* ---- CUDA's keywords on the host ---- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
/* block-scope thread_local is static: one instance per host thread, and one host thread
   runs one block at a time, so the block's fibers share it as a block shares smem */
#define __shared__ thread_local
#define __align__(n) __attribute__((aligned(n)))
#define __constant__

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 { unsigned x, y, z; };
struct int4 { int x, y, z, w; };
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
static constexpr int warpSize = 32;

/* the emulator's own bookkeeping is not what the sanitizers are here to check (the kernels
   are): its hot paths go uninstrumented, which makes a shuffle several times cheaper */
#if defined(__GNUC__) || defined(__clang__)
#define GPT2RT_EMU_HOT __attribute__((no_sanitize("address", "undefined")))
#else
#define GPT2RT_EMU_HOT
#endif

namespace gpt2rt_emu {

/* ---- fibers: a hand-rolled x86-64 switch (six callee-saved registers and the stack
   pointer), ucontext elsewhere ---- */
#if defined(__x86_64__)
extern "C" void gpt2rt_emu_switch(void **save_sp, void *new_sp);
extern "C" void gpt2rt_emu_fiber_start(void);
__asm__(".text\n"
        ".globl gpt2rt_emu_switch\n.type gpt2rt_emu_switch,@function\n"
        "gpt2rt_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
        ".size gpt2rt_emu_switch, .-gpt2rt_emu_switch\n"
        ".globl gpt2rt_emu_fiber_start\n.type gpt2rt_emu_fiber_start,@function\n"
        "gpt2rt_emu_fiber_start:\n  movq %r12, %rdi\n  callq *%r13\n  ud2\n"
        ".size gpt2rt_emu_fiber_start, .-gpt2rt_emu_fiber_start\n");
#else
#error "kernels/emu: the fiber switch is written for x86-64 only"
#endif

enum { F_RUN, F_BAR, F_WARP, F_DONE };
enum { W_SHFL = 1, W_SYNCWARP, W_VOTE, W_LDSM, W_MMA, W_WGMMA };

struct Fiber;
typedef void (*WarpFn)(Fiber *const *lanes, unsigned mask, void *ctx);

struct CpCopy { void *dst; const void *src; int bytes; };
/* one thread's share of an issued wgmma.mma_async: its accumulator registers and the
   values they get when the op's group is waited for */
struct WgPending { float *d; int n; std::vector<float> v; };

struct Fiber {
    void *sp;
    char *stack;
    void *asan_fake;
    uint3 tid;
    int linear, lane, warp, state;
    int bar_pred;
    /* the warp collective this lane waits in */
    int wkind;
    unsigned wmask;
    const char *wname;
    const void *win;
    void *wout;
    WarpFn wfn;
    void *wctx;
    /* cp.async: copies issued but not committed, and the committed groups */
    std::vector<CpCopy> cp_pending;
    std::vector<std::vector<CpCopy>> cp_groups;
    /* wgmma.mma_async: ops issued but not committed, and the committed groups */
    std::vector<WgPending> wg_pending;
    std::vector<std::vector<WgPending>> wg_groups;
};

struct Block;
struct Ctx { /* per host thread */
    Block *blk = nullptr;
    Fiber *cur = nullptr;
    void *sched_sp = nullptr;
    const void *sched_bottom = nullptr;
    size_t sched_size = 0;
    uint3 block_idx{0, 0, 0};
    dim3 block_dim, grid_dim;
    char *stacks = nullptr;
    size_t nstacks = 0;
    int dirty = 0;
};
inline thread_local Ctx tctx;

static const size_t stack_bytes = (size_t)256 << 10; /* ASan's redzones make frames several times larger */

struct WarpState { unsigned exists, exited, arrived; };
struct Block {
    std::vector<Fiber> f;
    std::vector<WarpState> w;
    const std::function<void()> *body;
    const char *kernel;
    int live, at_bar, bar_or, failed;
    std::vector<int> wg_count; /* per warpgroup (128 threads): threads waiting in a wgmma */
    std::vector<int> pos; /* each fiber's place in the schedule's order */
    int min_rel;          /* the earliest place a release made runnable since the last switch */
    std::string error;
};

/* EMU_ORDER: forward (default), reverse, random[:seed]; tests may switch it (set_order) */
inline int &order_kind_ref() { static int kind = -1; return kind; }
inline uint64_t &order_seed_ref() { static uint64_t s = 1; return s; }
inline int order_kind(uint64_t *seed) {
    int &kind = order_kind_ref();
    uint64_t &s0 = order_seed_ref();
    if (kind < 0) {
        const char *e = getenv("EMU_ORDER");
        kind = 0;
        if (e && !strncmp(e, "reverse", 7)) kind = 1;
        else if (e && !strncmp(e, "random", 6)) { kind = 2; if (e[6] == ':') s0 = strtoull(e + 7, nullptr, 10) | 1; }
    }
    if (seed) *seed = s0;
    return kind;
}
inline void set_order(int kind, uint64_t seed) { order_kind_ref() = kind; order_seed_ref() = seed | 1; }
inline uint64_t rng_next(uint64_t &s) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; }

inline void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
inline void fail(const char *fmt, ...) {
    Ctx &c = tctx;
    Block *b = c.blk;
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!b) { fprintf(stderr, "emu: %s\n", msg); return; }
    if (!b->failed) {
        char where[200];
        snprintf(where, sizeof where, "emu: kernel %s block (%u,%u,%u)", b->kernel, c.block_idx.x, c.block_idx.y,
                 c.block_idx.z);
        if (c.cur) {
            char t[80];
            snprintf(t, sizeof t, " thread (%u,%u,%u)", c.cur->tid.x, c.cur->tid.y, c.cur->tid.z);
            b->error = std::string(where) + t + ": " + msg;
        } else
            b->error = std::string(where) + ": " + msg;
        fprintf(stderr, "%s\n", b->error.c_str());
    }
    b->failed = 1;
}

/* from the running fiber back to the block's scheduler */
GPT2RT_EMU_HOT inline void yield_to_sched(bool exiting) {
    Ctx &c = tctx;
    Fiber *f = c.cur;
#ifdef GPT2RT_EMU_ASAN
    __sanitizer_start_switch_fiber(exiting ? nullptr : &f->asan_fake, c.sched_bottom, c.sched_size);
#else
    (void)exiting;
#endif
    gpt2rt_emu_switch(&f->sp, c.sched_sp);
#ifdef GPT2RT_EMU_ASAN
    __sanitizer_finish_switch_fiber(f->asan_fake, &c.sched_bottom, &c.sched_size);
#endif
}

/* a fiber that failed never resumes past its wait: the block is abandoned */
GPT2RT_EMU_HOT inline void block_wait(Fiber *f) {
    while (f->state != F_RUN) yield_to_sched(false);
}

/* after an error inside a kernel: this fiber never runs again (the scheduler stops the
   block at its next turn) */
[[noreturn]] inline void abandon(void) {
    for (;;) yield_to_sched(false);
}
#define GPT2RT_EMU_KFAIL(...) do { ::gpt2rt_emu::fail(__VA_ARGS__); if (::gpt2rt_emu::tctx.cur) ::gpt2rt_emu::abandon(); return; } while (0)

GPT2RT_EMU_HOT inline void release_barrier(Block *b) {
    int any = b->bar_or;
    for (auto &g : b->f)
        if (g.state == F_BAR) {
            g.state = F_RUN; g.bar_pred = any;
            if (b->pos[(size_t)g.linear] < b->min_rel) b->min_rel = b->pos[(size_t)g.linear];
        }
    b->at_bar = 0;
    b->bar_or = 0;
}

/* __syncthreads (with the OR of every thread's pred): every live thread waits; threads
   that returned count as arrived, as on sm_70 and later */
GPT2RT_EMU_HOT inline int syncthreads_pred(int pred) {
    Ctx &c = tctx;
    Block *b = c.blk;
    Fiber *f = c.cur;
    if (!b || !f) { fail("__syncthreads outside a kernel"); return 0; }
    f->state = F_BAR;
    b->bar_or |= pred != 0;
    if (++b->at_bar == b->live) release_barrier(b);
    block_wait(f);
    return f->bar_pred;
}

static inline const char *kind_name(int k) {
    switch (k) {
    case W_SHFL: return "a warp shuffle";
    case W_SYNCWARP: return "__syncwarp";
    case W_VOTE: return "a warp vote";
    case W_LDSM: return "ldmatrix";
    case W_MMA: return "mma.sync";
    case W_WGMMA: return "wgmma.mma_async";
    }
    return "?";
}

/* Warp collective: this lane deposits its operands (in) and where its result goes (out);
   the last lane of mask to arrive runs fn over all of them and releases them. Every lane
   of mask must wait in the same collective with the same mask; a lane of mask that has
   exited, or that waits in another collective, is an error. */
GPT2RT_EMU_HOT inline void warp_collective(int kind, const char *name, unsigned mask, const void *in, void *out, WarpFn fn,
                            void *ctx) {
    Ctx &c = tctx;
    Block *b = c.blk;
    Fiber *f = c.cur;
    if (!b || !f) { fail("%s outside a kernel", name); return; }
    if (!(mask >> f->lane & 1u)) GPT2RT_EMU_KFAIL("%s with mask 0x%08x that leaves out the calling lane %d", name, mask, f->lane);
    WarpState &w = b->w[(size_t)f->warp];
    if (mask & ~w.exists) GPT2RT_EMU_KFAIL("%s with mask 0x%08x names lanes past the block's last thread", name, mask);
    if (mask & w.exited) GPT2RT_EMU_KFAIL("%s with mask 0x%08x reads lane %d, which has exited", name, mask, __builtin_ctz(mask & w.exited));
    if (w.arrived & mask) {
        /* someone of mask waits: it must be this very collective */
        int l = __builtin_ctz(w.arrived & mask);
        Fiber *g = &b->f[(size_t)(f->warp * 32 + l)];
        if (g->wkind != kind || g->wmask != mask)
            GPT2RT_EMU_KFAIL("%s (mask 0x%08x) meets lane %d waiting in %s (mask 0x%08x): diverged warp", name, mask, l,
                             kind_name(g->wkind), g->wmask);
    }
    f->state = F_WARP; f->wkind = kind; f->wmask = mask; f->wname = name; f->win = in; f->wout = out; f->wfn = fn;
    f->wctx = ctx;
    w.arrived |= 1u << f->lane;
    if ((w.arrived & mask) == mask) {
        Fiber *lanes[32] = {0};
        for (int l = 0; l < 32; l++)
            if (mask >> l & 1u) lanes[l] = &b->f[(size_t)(f->warp * 32 + l)];
        fn(lanes, mask, ctx);
        w.arrived &= ~mask;
        for (int l = 0; l < 32; l++)
            if (lanes[l]) {
                lanes[l]->state = F_RUN;
                if (b->pos[(size_t)lanes[l]->linear] < b->min_rel) b->min_rel = b->pos[(size_t)lanes[l]->linear];
            }
        return;
    }
    block_wait(f);
}

/* a lane leaves: fail every collective that still counts on it */
inline void fiber_exit_checks(Block *b, Fiber *f) {
    WarpState &w = b->w[(size_t)f->warp];
    w.exited |= 1u << f->lane;
    for (unsigned a = w.arrived; a; a &= a - 1) {
        Fiber *g = &b->f[(size_t)(f->warp * 32 + __builtin_ctz(a))];
        if (g->wmask >> f->lane & 1u) {
            fail("lane %d exited while lane %d waits for it in %s (mask 0x%08x)", f->lane, g->lane, g->wname, g->wmask);
            return;
        }
    }
}

inline void cp_complete_all(Fiber *f);

inline void fiber_main(void *arg) {
    Fiber *f = (Fiber *)arg;
    Ctx &c = tctx;
#ifdef GPT2RT_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &c.sched_bottom, &c.sched_size);
#endif
    (*c.blk->body)();
    Block *b = c.blk;
    cp_complete_all(f);
    if (!f->wg_pending.empty() || !f->wg_groups.empty()) {
        /* the registers it would write are gone: a GPU leaves them undefined */
        fail("thread %d exits with wgmma.mma_async results it never waited for (wgmma.wait_group)", f->linear);
        f->wg_pending.clear(); f->wg_groups.clear();
    }
    f->state = F_DONE;
    b->live--;
    fiber_exit_checks(b, f);
    if (b->at_bar && b->at_bar == b->live) release_barrier(b);
    yield_to_sched(true);
    abort(); /* never resumed */
}

GPT2RT_EMU_HOT inline void run_fiber(Fiber *f) {
    Ctx &c = tctx;
    c.cur = f;
#ifdef GPT2RT_EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f->stack, stack_bytes);
#endif
    gpt2rt_emu_switch(&c.sched_sp, f->sp);
#ifdef GPT2RT_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    c.cur = nullptr;
}

inline void describe_deadlock(Block *b) {
    int at_bar = 0, at_warp = 0;
    const Fiber *w = nullptr;
    for (auto &g : b->f) {
        if (g.state == F_BAR) at_bar++;
        if (g.state == F_WARP) { at_warp++; if (!w) w = &g; }
    }
    if (w)
        fail("deadlock: %d thread(s) wait in __syncthreads while %d wait in warp collectives (thread %d in %s, "
             "mask 0x%08x)", at_bar, at_warp, w->linear, w->wname, w->wmask);
    else
        fail("deadlock: %d of %d live threads wait in __syncthreads", at_bar, b->live);
}

GPT2RT_EMU_HOT inline void run_schedule(Block &b, const std::vector<int> &order) {
    int n = (int)order.size(), cur = 0;
    while (b.live > 0 && !b.failed) {
        int k = cur;
        while (k < n && b.f[(size_t)order[(size_t)k]].state != F_RUN) k++;
        if (k == n) {
            int any = 0;
            for (int i = 0; i < n && !any; i++) any = b.f[(size_t)i].state == F_RUN;
            if (!any) { describe_deadlock(&b); break; }
            cur = 0;
            continue;
        }
        b.min_rel = n;
        run_fiber(&b.f[(size_t)order[(size_t)k]]);
        cur = b.min_rel < k ? b.min_rel : k;
    }
}

/* run one block of nthreads fibers to completion (or to its first error) */
inline int run_block(Block &b, const dim3 &bd) {
    Ctx &c = tctx;
    int n = (int)(bd.x * bd.y * bd.z);
    if (c.nstacks < (size_t)n) {
        if (c.stacks) munmap(c.stacks, c.nstacks * stack_bytes);
        c.stacks = (char *)mmap(nullptr, (size_t)n * stack_bytes, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (c.stacks == MAP_FAILED) { c.stacks = nullptr; c.nstacks = 0; fail("no memory for %d fiber stacks", n); return 1; }
        c.nstacks = (size_t)n;
    }
#ifdef GPT2RT_EMU_ASAN
    /* the fibers of a failed block were abandoned with their frames' redzones poisoned */
    if (c.dirty) { __asan_unpoison_memory_region(c.stacks, c.nstacks * stack_bytes); c.dirty = 0; }
#endif
    b.f.assign((size_t)n, Fiber());
    b.live = n; b.at_bar = 0; b.bar_or = 0; b.failed = 0;
    b.w.assign((size_t)((n + 31) / 32), WarpState{0, 0, 0});
    b.wg_count.assign((size_t)((n + 127) / 128), 0);
    for (int i = 0; i < n; i++) b.w[(size_t)(i >> 5)].exists |= 1u << (i & 31);
    for (int i = 0; i < n; i++) {
        Fiber &f = b.f[(size_t)i];
        f.linear = i; f.lane = i & 31; f.warp = i >> 5; f.state = F_RUN;
        f.tid.x = (unsigned)i % bd.x; f.tid.y = (unsigned)i / bd.x % bd.y; f.tid.z = (unsigned)i / (bd.x * bd.y);
        f.stack = c.stacks + (size_t)i * stack_bytes;
#ifdef GPT2RT_EMU_ASAN
        /* the last fiber here ended inside fiber_main's frame, whose redzones stay poisoned */
        __asan_unpoison_memory_region(f.stack + stack_bytes - 8192, 8192);
#endif
        void **sp = (void **)(f.stack + stack_bytes - 16);
        *--sp = (void *)gpt2rt_emu_fiber_start; /* ret target; rsp is 16-aligned after it */
        *--sp = nullptr;                        /* rbp */
        *--sp = nullptr;                        /* rbx */
        *--sp = (void *)&f;                     /* r12: the argument */
        *--sp = (void *)fiber_main;             /* r13: the function */
        *--sp = nullptr;                        /* r14 */
        *--sp = nullptr;                        /* r15 */
        f.sp = sp;
    }
    /* The schedule always resumes the runnable fiber that comes first in the order: so
       the first warp runs ahead as far as its barriers let it, lanes of a warp in order,
       and a missing barrier between warps (or threads) shows. Orders: forward (thread 0
       first), reverse, random (one permutation per block from the seed). */
    uint64_t seed;
    int kind = order_kind(&seed);
    seed ^= (uint64_t)c.block_idx.x * 0x9E3779B97F4A7C15ull + c.block_idx.y * 31u + c.block_idx.z;
    if (!seed) seed = 1;
    std::vector<int> order((size_t)n);
    for (int i = 0; i < n; i++) order[(size_t)i] = kind == 1 ? n - 1 - i : i;
    if (kind == 2)
        for (int i = n - 1; i > 0; i--) std::swap(order[(size_t)i], order[(size_t)(rng_next(seed) % (uint64_t)(i + 1))]);
    b.pos.assign((size_t)n, 0);
    for (int i = 0; i < n; i++) b.pos[(size_t)order[(size_t)i]] = i;
    run_schedule(b, order);
    if (b.failed) c.dirty = 1;
    return b.failed;
}

/* ---- cp.async: a copy lands when its group is waited for (or the thread ends) ---- */
inline void cp_do(const CpCopy &k) {
    unsigned char tmp[16] = {0};
    if (k.bytes > 0) memcpy(tmp, k.src, (size_t)k.bytes);
    memcpy(k.dst, tmp, 16);
}
inline void cp_complete_all(Fiber *f) {
    for (auto &g : f->cp_groups)
        for (auto &k : g) cp_do(k);
    f->cp_groups.clear();
    for (auto &k : f->cp_pending) cp_do(k);
    f->cp_pending.clear();
}

} /* namespace gpt2rt_emu */

#define threadIdx (::gpt2rt_emu::tctx.cur->tid)
#define blockIdx (::gpt2rt_emu::tctx.block_idx)
#define blockDim (::gpt2rt_emu::tctx.block_dim)
#define gridDim (::gpt2rt_emu::tctx.grid_dim)

/* ---- the intrinsics ---- */
static inline void __syncthreads(void) { (void)gpt2rt_emu::syncthreads_pred(0); }
static inline int __syncthreads_or(int p) { return gpt2rt_emu::syncthreads_pred(p); }
static inline void __trap(void) { GPT2RT_EMU_KFAIL("__trap()"); }

namespace gpt2rt_emu {
struct ShflIn { uint64_t bits; int src; };
GPT2RT_EMU_HOT inline void shfl_fn(Fiber *const *lanes, unsigned mask, void *) {
    for (int l = 0; l < 32; l++) {
        if (!lanes[l]) continue;
        const ShflIn *in = (const ShflIn *)lanes[l]->win;
        int s = in->src;
        if (s < 0 || s > 31 || !(mask >> s & 1u)) {
            /* the PTX ISA leaves the value undefined when the source lane is not in mask */
            GPT2RT_EMU_KFAIL("a warp shuffle on lane %d reads lane %d, outside mask 0x%08x", l, s, mask);
        }
        *(uint64_t *)lanes[l]->wout = ((const ShflIn *)lanes[s]->win)->bits;
    }
}
template <typename T> GPT2RT_EMU_HOT inline T shfl(unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
    ShflIn in{0, src};
    memcpy(&in.bits, &v, sizeof(T));
    uint64_t out = 0;
    warp_collective(W_SHFL, "a warp shuffle", mask, &in, &out, shfl_fn, nullptr);
    T r;
    memcpy(&r, &out, sizeof(T));
    return r;
}
GPT2RT_EMU_HOT inline int lane_id(void) { return tctx.cur ? tctx.cur->lane : 0; }
GPT2RT_EMU_HOT inline void vote_fn(Fiber *const *lanes, unsigned, void *) {
    unsigned bal = 0;
    for (int l = 0; l < 32; l++)
        if (lanes[l] && *(const int *)lanes[l]->win) bal |= 1u << l;
    for (int l = 0; l < 32; l++)
        if (lanes[l]) *(unsigned *)lanes[l]->wout = bal;
}
inline unsigned ballot(unsigned mask, int p) {
    int in = p != 0;
    unsigned out = 0;
    warp_collective(W_VOTE, "a warp vote", mask, &in, &out, vote_fn, nullptr);
    return out;
}
inline void nop_fn(Fiber *const *, unsigned, void *) {}
} /* namespace gpt2rt_emu */

/* width: segments of width lanes, as the device does */
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    int l = gpt2rt_emu::lane_id(), s = l ^ lane_mask;
    if ((s & ~(width - 1)) != (l & ~(width - 1))) s = l;
    return gpt2rt_emu::shfl(mask, v, s);
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    int l = gpt2rt_emu::lane_id(), s = l + (int)delta;
    if ((l % width) + (int)delta >= width) s = l;
    return gpt2rt_emu::shfl(mask, v, s);
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    int l = gpt2rt_emu::lane_id(), s = l - (int)delta;
    if ((l % width) < (int)delta) s = l;
    return gpt2rt_emu::shfl(mask, v, s);
}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    int l = gpt2rt_emu::lane_id();
    return gpt2rt_emu::shfl(mask, v, (l & ~(width - 1)) + (src & (width - 1)));
}
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    gpt2rt_emu::warp_collective(gpt2rt_emu::W_SYNCWARP, "__syncwarp", mask, nullptr, nullptr, gpt2rt_emu::nop_fn, nullptr);
}
static inline unsigned __ballot_sync(unsigned mask, int p) { return gpt2rt_emu::ballot(mask, p); }
static inline int __any_sync(unsigned mask, int p) { return gpt2rt_emu::ballot(mask, p) != 0; }
static inline int __all_sync(unsigned mask, int p) { return gpt2rt_emu::ballot(mask, p) == (mask & gpt2rt_emu::ballot(mask, 1)); }
static inline unsigned __activemask(void) { return 0xffffffffu; }

/* rounding-mode intrinsics: the host's IEEE operations round to nearest even */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
static inline size_t __cvta_generic_to_shared(const void *p) { return (size_t)p; }

/* the one atomic the labs use (matmul.cu counts mismatches); fibers of one host thread
   never run at the same time, so a plain add is atomic */
static inline int atomicAdd(int *p, int v) { int o = *p; *p = o + v; return o; }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) { unsigned long long o = *p; *p = o + v; return o; }

/* ---- the PTX helpers of gpt2rt.h 8.3 ---- */
static inline void gpt2rt_emu_cp_async16(void *dst, const void *src, int bytes) {
    gpt2rt_emu::Fiber *f = gpt2rt_emu::tctx.cur;
    if (((uintptr_t)dst & 15) || ((uintptr_t)src & 15)) GPT2RT_EMU_KFAIL("cp.async.cg 16 with an unaligned address");
    if (bytes < 0 || bytes > 16) GPT2RT_EMU_KFAIL("cp.async.cg 16 with src-size %d", bytes);
    /* a copy may land anywhere between its issue and its wait_group: at the wait in the
       forward and random orders (a read before the wait sees stale bytes), at the issue in
       the reverse order (a refill of a buffer another warp still reads shows) */
    if (gpt2rt_emu::order_kind(nullptr) == 1) { gpt2rt_emu::cp_do({dst, src, bytes}); return; }
    if (f) f->cp_pending.push_back({dst, src, bytes});
}
static inline void gpt2rt_emu_cp_commit(void) {
    gpt2rt_emu::Fiber *f = gpt2rt_emu::tctx.cur;
    if (!f) return;
    f->cp_groups.push_back(std::move(f->cp_pending));
    f->cp_pending.clear();
}
/* every committed group but the newest n has landed */
static inline void gpt2rt_emu_cp_wait(int n) {
    gpt2rt_emu::Fiber *f = gpt2rt_emu::tctx.cur;
    if (!f) return;
    while ((int)f->cp_groups.size() > n) {
        for (auto &k : f->cp_groups.front()) gpt2rt_emu::cp_do(k);
        f->cp_groups.erase(f->cp_groups.begin());
    }
}

namespace gpt2rt_emu {
/* ldmatrix.m8n8.x4.b16: lanes 8i..8i+7 give the rows of matrix i (16 bytes each); lane l
   receives in register i the elements (row l/4, columns 2(l%4), 2(l%4)+1) of matrix i,
   or with .trans the elements (rows 2(l%4), 2(l%4)+1, column l/4) */
inline void ldsm_fn(Fiber *const *lanes, unsigned, void *ctx) {
    int trans = ctx != nullptr;
    for (int l = 0; l < 32; l++) {
        unsigned *r = (unsigned *)lanes[l]->wout;
        for (int i = 0; i < 4; i++) {
            uint16_t lo, hi;
            if (!trans) {
                const uint16_t *row = *(const uint16_t *const *)lanes[8 * i + l / 4]->win;
                lo = row[2 * (l % 4)]; hi = row[2 * (l % 4) + 1];
            } else {
                const uint16_t *r0 = *(const uint16_t *const *)lanes[8 * i + 2 * (l % 4)]->win;
                const uint16_t *r1 = *(const uint16_t *const *)lanes[8 * i + 2 * (l % 4) + 1]->win;
                lo = r0[l / 4]; hi = r1[l / 4];
            }
            r[i] = (unsigned)lo | ((unsigned)hi << 16);
        }
    }
}
struct MmaIn { unsigned a[4], b[2]; float c[4]; };
inline float mma_in_f(int f16, uint16_t x) {
    if (f16) { __half h; h.__x = x; return __half2float(h); }
    return gpt2rt_emu_u2f((unsigned)x << 16);
}
/* mma.sync.m16n8k16.row.col.f32.{bf16,f16}: g = lane/4, t = lane%4;
   A (16x16): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
   B (16x8):  b0 (k 2t..2t+1, n g), b1 (k 2t+8..2t+9, n g)
   C, D (16x8): c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)
   Each element: d = c + sum over k = 0..15 in increasing order, fp32; the products of two
   16-bit values are exact in fp32. */
inline void mma_fn(Fiber *const *lanes, unsigned, void *ctx) {
    int f16 = ctx != nullptr;
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        const MmaIn *in = (const MmaIn *)lanes[l]->win;
        int g = l >> 2, t = l & 3;
        for (int h = 0; h < 2; h++) {
            A[g][2 * t + h] = mma_in_f(f16, (uint16_t)(in->a[0] >> (16 * h)));
            A[g + 8][2 * t + h] = mma_in_f(f16, (uint16_t)(in->a[1] >> (16 * h)));
            A[g][2 * t + 8 + h] = mma_in_f(f16, (uint16_t)(in->a[2] >> (16 * h)));
            A[g + 8][2 * t + 8 + h] = mma_in_f(f16, (uint16_t)(in->a[3] >> (16 * h)));
            B[2 * t + h][g] = mma_in_f(f16, (uint16_t)(in->b[0] >> (16 * h)));
            B[2 * t + 8 + h][g] = mma_in_f(f16, (uint16_t)(in->b[1] >> (16 * h)));
        }
        C[g][2 * t] = in->c[0]; C[g][2 * t + 1] = in->c[1]; C[g + 8][2 * t] = in->c[2]; C[g + 8][2 * t + 1] = in->c[3];
    }
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        float *d = (float *)lanes[l]->wout;
        const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
        for (int e = 0; e < 4; e++) {
            float s = C[rows[e]][cols[e]];
            for (int k = 0; k < 16; k++) s += A[rows[e]][k] * B[k][cols[e]];
            d[e] = s;
        }
    }
}
} /* namespace gpt2rt_emu */

static inline void gpt2rt_emu_ldmatrix_x4(unsigned r[4], const void *p, int trans) {
    if ((uintptr_t)p & 15) GPT2RT_EMU_KFAIL("ldmatrix row address %p not 16-byte aligned", p);
    const void *in = p;
    gpt2rt_emu::warp_collective(gpt2rt_emu::W_LDSM, trans ? "ldmatrix.x4.trans" : "ldmatrix.x4", 0xffffffffu, &in, r,
                                gpt2rt_emu::ldsm_fn, trans ? (void *)1 : nullptr);
}
static inline void gpt2rt_emu_mma_m16n8k16(float c[4], const unsigned a[4], unsigned b0, unsigned b1, int f16) {
    gpt2rt_emu::MmaIn in;
    memcpy(in.a, a, sizeof in.a);
    in.b[0] = b0; in.b[1] = b1;
    memcpy(in.c, c, sizeof in.c);
    float out[4];
    gpt2rt_emu::warp_collective(gpt2rt_emu::W_MMA, f16 ? "mma.sync f16" : "mma.sync bf16", 0xffffffffu, &in, out,
                                gpt2rt_emu::mma_fn, f16 ? (void *)1 : nullptr);
    memcpy(c, out, sizeof out);
}

/* ---- wgmma (sm_90a): warpgroup matrix products ----
   Modelled from the PTX ISA (9.7.15, "Asynchronous Warpgroup Level Matrix Multiply-
   Accumulate"): wgmma.fence, wgmma.commit_group, wgmma.wait_group N and
     wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}.{bf16,f16}
       d, {a-desc | a (4 registers)}, b-desc, scale-d, imm-scale-a, imm-scale-b[, imm-trans-a], imm-trans-b
   for N = 8 .. 256 (a multiple of 8). A warpgroup is 4 consecutive warps (threads
   128 g .. 128 g + 127); its 128 threads meet in the instruction (a collective), warp
   w = (thread / 32) % 4 of the group, lane l, gid = l / 4, tig = l % 4.
   D (64 x N fp32), N/2 registers per thread: d[i] is row 16 w + gid + 8 ((i >> 1) & 1),
     column 8 (i >> 2) + 2 tig + (i & 1)  (so d[4j..4j+1]: row 16w+gid, columns 8j+2tig, +1;
     d[4j+2..4j+3]: row 16w+gid+8).
   A from registers (64 x 16, 16-bit pairs, low half first): warp w holds rows 16w..16w+15
     as mma.sync.m16n8k16's A: a0 (gid, 2tig..+1), a1 (gid+8, 2tig..), a2 (gid, 2tig+8..),
     a3 (gid+8, 2tig+8..).
   A and B from shared memory: a 64-bit matrix descriptor,
     bits  0-13 start address >> 4 (of the 18-bit shared address),
     bits 16-29 leading dimension byte offset (LBO) >> 4,
     bits 32-45 stride dimension byte offset (SBO) >> 4,
     bits 49-51 matrix base offset (only 0, atoms aligned to their repeat, is modelled),
     bits 62-63 swizzle: 0 none (interleave), 1 128 B, 2 64 B, 3 32 B.
   Operand element (r, k), r < 64 (A: M) or N (B), k < 16, at byte start + off:
     K-major (trans 0; A is M x K with K contiguous, B is N x K with K contiguous):
       none:     off = (r/8) SBO + (k/8) LBO + (r%8) 16 + (k%8) 2   (8 x 16-byte core matrices)
       W-byte:   off = (r/8) SBO + (r%8) W + 2k                     (LBO unused)
     MN-major (trans 1; B is K x N with N contiguous, as V (keys, head) for P V):
       none:     off = (r/8) SBO + (k/8) LBO + (k%8) 16 + (r%8) 2
       W-byte:   off = (r/E) LBO + (k/8) SBO + (k%8) W + 2 (r%E),  E = W/2 elements
   and swizzled to the address  a ^ ((a >> 3) & m), m = 0x70 (128 B), 0x30 (64 B), 0x10
   (32 B): the 16-byte chunk index (bits 4-6) XOR the row index within the 1024-byte
   (512, 256) repeat (bits 7-9), on the absolute shared address, as the hardware does.
   The emulator's shared memory is host memory: the 18-bit address is resolved as the one
   address congruent to it modulo 2^18 in [smem, smem + 256 KiB), smem being a pointer the
   kernel passes (its shared array); a start address or offset that misses the data reads
   other bytes there, as on a GPU.
   Arithmetic: each d element = (scale-d ? d : 0) + sum over k = 0..15 in increasing order of
   (scale-a A)(scale-b B), in fp32 (16-bit products are exact). The hardware's summation
   order inside one instruction is not documented; results agree with it to fp32 rounding.
   Asynchrony: operands (registers and shared memory) are read at the instruction; d is
   written when its group is waited for (wgmma.wait_group), so a kernel that reads d
   earlier sees the old values. Issues that chain on the same d (registers of one thread)
   see the previous in-flight result, as the PTX ISA guarantees for the same accumulator.
   Every thread of the group must pass the same descriptors, N, types and flags. A thread
   that exits with ops it never waited for fails the launch. wgmma.fence orders register
   writes before the op on a GPU; here operands are read at the call, so it is a no-op. */
namespace gpt2rt_emu {
struct WgOp {
    int n, f16, a_reg, trans_a, trans_b, scale_d, scale_a, scale_b;
    uint64_t da, db;
    unsigned a[4];
    const unsigned char *smem;
    const float *cin; /* this thread's accumulator input (N/2) */
};
GPT2RT_EMU_HOT inline void group_collective(int kind, const char *name, const void *in, void *out, WarpFn fn) {
    Ctx &c = tctx;
    Block *b = c.blk;
    Fiber *f = c.cur;
    if (!b || !f) { fail("%s outside a kernel", name); return; }
    int n = (int)b->f.size(), g = f->linear / 128;
    if (n % 128) GPT2RT_EMU_KFAIL("%s in a block of %d threads: a warpgroup is 128 threads", name, n);
    /* the other warps of the group may still be in warp collectives of their own; lanes of
       this warp may not */
    for (int w = 4 * g; w < 4 * g + 4; w++) {
        WarpState &ws = b->w[(size_t)w];
        if (ws.exited) GPT2RT_EMU_KFAIL("%s waits for warp %d of its warpgroup, whose lane %d has exited", name, w, __builtin_ctz(ws.exited));
        if (w == f->warp && ws.arrived) {
            Fiber *o = &b->f[(size_t)(w * 32 + __builtin_ctz(ws.arrived))];
            if (o->wkind != kind) GPT2RT_EMU_KFAIL("%s meets lane %d waiting in %s: diverged warp", name, o->lane, kind_name(o->wkind));
        }
    }
    f->state = F_WARP; f->wkind = kind; f->wmask = 0xffffffffu; f->wname = name; f->win = in; f->wout = out; f->wfn = fn;
    f->wctx = nullptr;
    b->w[(size_t)f->warp].arrived |= 1u << f->lane;
    if (++b->wg_count[(size_t)g] == 128) {
        Fiber *lanes[128];
        for (int i = 0; i < 128; i++) lanes[i] = &b->f[(size_t)(128 * g + i)];
        fn(lanes, 0xffffffffu, nullptr);
        b->wg_count[(size_t)g] = 0;
        for (int w = 4 * g; w < 4 * g + 4; w++) b->w[(size_t)w].arrived = 0;
        for (int i = 0; i < 128; i++) {
            lanes[i]->state = F_RUN;
            if (b->pos[(size_t)lanes[i]->linear] < b->min_rel) b->min_rel = b->pos[(size_t)lanes[i]->linear];
        }
        return;
    }
    block_wait(f);
}
inline uint32_t wg_swizzle(uint32_t a, unsigned mode) {
    static const uint32_t m[4] = {0, 0x70, 0x30, 0x10};
    return a ^ ((a >> 3) & m[mode & 3]);
}
/* rows x 16 values of the operand described by desc into X[r * 16 + k]; 0 on a bad descriptor */
inline int wg_load(float *X, int rows, uint64_t desc, int mn_major, int f16, const unsigned char *smem) {
    uint32_t start = (uint32_t)(desc & 0x3FFF) << 4, lbo = (uint32_t)(desc >> 16 & 0x3FFF) << 4;
    uint32_t sbo = (uint32_t)(desc >> 32 & 0x3FFF) << 4, base_off = (uint32_t)(desc >> 49 & 7);
    unsigned mode = (unsigned)(desc >> 62);
    if (base_off) return 0;
    const uint32_t W = mode == 1 ? 128 : mode == 2 ? 64 : 32, E = W / 2;
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < 16; k++) {
            uint32_t off, R = (uint32_t)r, K = (uint32_t)k;
            if (!mn_major) off = mode ? R / 8 * sbo + R % 8 * W + 2 * K : R / 8 * sbo + K / 8 * lbo + R % 8 * 16 + K % 8 * 2;
            else off = mode ? R / E * lbo + K / 8 * sbo + K % 8 * W + 2 * (R % E) : R / 8 * sbo + K / 8 * lbo + K % 8 * 16 + R % 8 * 2;
            uint32_t a = wg_swizzle((start + off) & 0x3FFFFu, mode);
            const unsigned char *p = smem + ((a - (uint32_t)(uintptr_t)smem) & 0x3FFFFu);
            uint16_t v;
            memcpy(&v, p, 2);
            X[r * 16 + k] = mma_in_f(f16, v);
        }
    return 1;
}
inline void wgmma_fn(Fiber *const *lanes, unsigned, void *) {
    const WgOp *o0 = (const WgOp *)lanes[0]->win;
    for (int i = 1; i < 128; i++) {
        const WgOp *o = (const WgOp *)lanes[i]->win;
        if (o->n != o0->n || o->f16 != o0->f16 || o->a_reg != o0->a_reg || o->trans_a != o0->trans_a ||
            o->trans_b != o0->trans_b || o->scale_d != o0->scale_d || o->scale_a != o0->scale_a ||
            o->scale_b != o0->scale_b || o->db != o0->db || (!o->a_reg && o->da != o0->da) || o->smem != o0->smem)
            GPT2RT_EMU_KFAIL("wgmma.mma_async: thread %d of the warpgroup passes other descriptors, shape or flags "
                             "than thread %d (b-desc 0x%016llx vs 0x%016llx)", lanes[i]->linear, lanes[0]->linear,
                             (unsigned long long)o->db, (unsigned long long)o0->db);
    }
    const int N = o0->n, f16 = o0->f16;
    /* A[m*16+k], B[n*16+k]; on the fiber's stack, not the heap: a failing block's fibers are
       abandoned without unwinding */
    float A[64 * 16], B[256 * 16];
    if (o0->a_reg) {
        for (int i = 0; i < 128; i++) {
            const WgOp *o = (const WgOp *)lanes[i]->win;
            int w = i >> 5, gid = (i & 31) >> 2, tig = i & 3, r0 = 16 * w + gid;
            for (int h = 0; h < 2; h++) {
                A[(size_t)(r0 * 16 + 2 * tig + h)] = mma_in_f(f16, (uint16_t)(o->a[0] >> (16 * h)));
                A[(size_t)((r0 + 8) * 16 + 2 * tig + h)] = mma_in_f(f16, (uint16_t)(o->a[1] >> (16 * h)));
                A[(size_t)(r0 * 16 + 2 * tig + 8 + h)] = mma_in_f(f16, (uint16_t)(o->a[2] >> (16 * h)));
                A[(size_t)((r0 + 8) * 16 + 2 * tig + 8 + h)] = mma_in_f(f16, (uint16_t)(o->a[3] >> (16 * h)));
            }
        }
    } else if (!wg_load(A, 64, o0->da, o0->trans_a, f16, o0->smem))
        GPT2RT_EMU_KFAIL("wgmma.mma_async: a-desc 0x%016llx has a matrix base offset (not modelled)", (unsigned long long)o0->da);
    if (!wg_load(B, N, o0->db, o0->trans_b, f16, o0->smem))
        GPT2RT_EMU_KFAIL("wgmma.mma_async: b-desc 0x%016llx has a matrix base offset (not modelled)", (unsigned long long)o0->db);
    const float sa = (float)o0->scale_a, sb = (float)o0->scale_b;
    for (int i = 0; i < 128; i++) {
        const WgOp *o = (const WgOp *)lanes[i]->win;
        float *d = (float *)lanes[i]->wout;
        int w = i >> 5, gid = (i & 31) >> 2, tig = i & 3;
        for (int e = 0; e < N / 2; e++) {
            int row = 16 * w + gid + 8 * ((e >> 1) & 1), col = 8 * (e >> 2) + 2 * tig + (e & 1);
            float s = o->scale_d ? o->cin[e] : 0.0f;
            for (int k = 0; k < 16; k++) s += (sa * A[(size_t)(row * 16 + k)]) * (sb * B[(size_t)(col * 16 + k)]);
            d[e] = s;
        }
    }
}
} /* namespace gpt2rt_emu */

static inline void gpt2rt_emu_wgmma_fence(void) {}
static inline void gpt2rt_emu_wgmma_commit(void) {
    gpt2rt_emu::Fiber *f = gpt2rt_emu::tctx.cur;
    if (!f) return;
    f->wg_groups.push_back(std::move(f->wg_pending));
    f->wg_pending.clear();
}
/* every committed group but the newest n is complete: its results land in the registers */
static inline void gpt2rt_emu_wgmma_wait(int n) {
    gpt2rt_emu::Fiber *f = gpt2rt_emu::tctx.cur;
    if (!f) return;
    while ((int)f->wg_groups.size() > n) {
        for (auto &p : f->wg_groups.front()) memcpy(p.d, p.v.data(), (size_t)p.n * sizeof(float));
        f->wg_groups.erase(f->wg_groups.begin());
    }
}
/* d (N/2 fp32 per thread) = [d +] A B; a: 4 registers (A from registers) or NULL (A from
   a_desc); trans_a, trans_b: 1 for an MN-major operand; smem: the kernel's shared array */
static inline void gpt2rt_emu_wgmma(float *d, int N, const unsigned *a, uint64_t a_desc, uint64_t b_desc, int scale_d,
                                    int trans_a, int trans_b, int f16, const void *smem) {
    gpt2rt_emu::Fiber *f = gpt2rt_emu::tctx.cur;
    if (!f) { gpt2rt_emu::fail("wgmma.mma_async outside a kernel"); return; }
    if (N < 8 || N > 256 || N % 8) GPT2RT_EMU_KFAIL("wgmma.mma_async m64n%dk16: N must be 8 .. 256 in steps of 8", N);
    if (a && trans_a) GPT2RT_EMU_KFAIL("wgmma.mma_async: imm-trans-a with A in registers");
    gpt2rt_emu::WgOp op;
    memset(&op, 0, sizeof op);
    op.n = N; op.f16 = f16; op.a_reg = a != nullptr; op.trans_a = trans_a; op.trans_b = trans_b; op.scale_d = scale_d != 0;
    op.scale_a = op.scale_b = 1; op.da = a ? 0 : a_desc; op.db = b_desc; op.smem = (const unsigned char *)smem;
    if (a) memcpy(op.a, a, sizeof op.a);
    /* the accumulator input: the newest in-flight result for these registers, else d (arrays
       on the stack: a fiber abandoned inside the collective never unwinds) */
    float cin[128], out[128];
    memcpy(cin, d, (size_t)(N / 2) * sizeof(float));
    const gpt2rt_emu::WgPending *last = nullptr;
    for (auto &p : f->wg_pending) if (p.d == d) last = &p;
    if (!last)
        for (auto it = f->wg_groups.rbegin(); it != f->wg_groups.rend() && !last; ++it)
            for (auto &p : *it) if (p.d == d) last = &p;
    if (last) {
        if (last->n != N / 2) GPT2RT_EMU_KFAIL("wgmma.mma_async chains on accumulator registers of another shape in flight");
        memcpy(cin, last->v.data(), (size_t)(N / 2) * sizeof(float));
    }
    op.cin = cin;
    gpt2rt_emu::group_collective(gpt2rt_emu::W_WGMMA, f16 ? "wgmma.mma_async f16" : "wgmma.mma_async bf16", &op,
                                 out, gpt2rt_emu::wgmma_fn);
    f->wg_pending.push_back(gpt2rt_emu::WgPending{d, N / 2, std::vector<float>(out, out + N / 2)});
}
#endif
