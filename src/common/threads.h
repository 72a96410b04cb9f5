/* common/threads.h - 1. Common; 1.1 Threads, compiler helpers
   may call: common/platform.h */
#ifndef GPT2RT__SRC_COMMON_THREADS_H
#define GPT2RT__SRC_COMMON_THREADS_H
#include "platform.h"

/* ==== 1. Common ==== */

/* ==== 1.1 Threads, compiler helpers ==== */

/* the loop that follows runs on nt threads, each a fixed contiguous share
   (_RR: round robin, for triangular work) */
#ifdef _OPENMP
#define GPT2RT__PRAGMA(x) _Pragma(#x)
#define GPT2RT__PARALLEL_FOR(nt) (void)(nt); GPT2RT__PRAGMA(omp parallel for num_threads(nt) schedule(static))
#define GPT2RT__PARALLEL_FOR_RR(nt) (void)(nt); GPT2RT__PRAGMA(omp parallel for num_threads(nt) schedule(static, 1))
static int gpt2rt__thread_id(void) { return omp_get_thread_num(); }
static int gpt2rt__default_threads(void) { return omp_get_max_threads(); }
#else
#define GPT2RT__PARALLEL_FOR(nt) (void)(nt);
#define GPT2RT__PARALLEL_FOR_RR(nt) (void)(nt);
static int gpt2rt__thread_id(void) { return 0; }
static int gpt2rt__default_threads(void) { return 1; }
#endif

/* the threads of an op by its work (the CPU backend's ops, the update, the patching).
   A parallel region waits for every thread of its team; on cores that other jobs keep
   busy that is a wait for the scheduler: 3-6 ms a region on a 2-core machine at load
   average 5 (tools/bench_threads; a few microseconds on idle cores), against 5.8 ms
   for a whole training step of examples/timeseries' cpu preset on one thread. So an op
   takes one thread per GPT2RT_CPU_WORK_PER_THREAD units of work, at most nt; below two
   units' worth it runs on the calling thread alone. A unit is about one flop of the
   matrix product (0.055 ns on one core there), and 1e8 of them (5.5 ms) cover a
   region's wait, so an op is not slower on the default count than on one thread
   (docs/results/cpu-threads.md). The ops' weights: a unit per flop of a product, and per
   element: GPT2RT__CPU_W_ADD for an add or copy (0.67 ns), GPT2RT__CPU_W_MATH for
   LayerNorm, GELU, dropout's hash, an exponential, or a multiply-add of attention
   (2-3 ns); backward passes twice that. The results do not depend on the count; a
   build with GPT2RT_CPU_WORK_PER_THREAD 0 splits every op over nt threads (the
   tests of that). */
#ifndef GPT2RT_CPU_WORK_PER_THREAD
#define GPT2RT_CPU_WORK_PER_THREAD 1e8
#endif
#define GPT2RT__CPU_W_ADD 12.0
#define GPT2RT__CPU_W_MATH 50.0
static int gpt2rt__threads_for(int nt, double work) {
    double per = GPT2RT_CPU_WORK_PER_THREAD;
    if (nt < 2 || per <= 0.0) return nt < 1 ? 1 : nt;
    return work < 2.0 * per ? 1 : work < per * (double)nt ? (int)(work / per) : nt;
}

#if defined(__GNUC__) || defined(__clang__)
#define GPT2RT__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define GPT2RT__PRINTF(a, b)
#endif

/* a function only some builds call (the CUDA or MPI code, the tests) */
#if defined(__GNUC__) || defined(__clang__)
#define GPT2RT__MAYBE_UNUSED __attribute__((unused))
#else
#define GPT2RT__MAYBE_UNUSED
#endif

#define GPT2RT__PI 3.14159265358979323846

/* a function the CUDA kernels call too (the dropout hash: one definition, so the
   device draws the CPU's masks bit for bit) */
#if GPT2RT__CUDA
#define GPT2RT__HOSTDEV __host__ __device__
#else
#define GPT2RT__HOSTDEV
#endif

/* append printf-style text to (buf, cap) at n, counting what did not fit: the
   formatters return the length they needed, as snprintf does */
#define GPT2RT__PUT(...) do { int k_ = snprintf(buf ? buf + (n < cap ? n : cap) : NULL, \
        buf && n < cap ? cap - n : 0, __VA_ARGS__); if (k_ > 0) n += (size_t)k_; } while (0)

#endif /* GPT2RT__SRC_COMMON_THREADS_H */
