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
   A parallel region waits for every thread of its team: microseconds on idle cores,
   3-8 ms a region (median) on a 2-core machine that other jobs keep busy (the wait
   for the scheduler; tools/bench_threads, docs/results/cpu-threads.md). So an op takes
   one thread per "work per thread" units of work, at most nt, and below two threads'
   worth it runs on the calling thread alone: no team. A unit is about a flop of the
   matrix product (0.020 ns on one core there); per element, GPT2RT__CPU_W_ADD units
   for an add or copy (0.19 ns), GPT2RT__CPU_W_MATH for LayerNorm, GELU, dropout's
   hash, an exponential or a multiply-add of attention (1.6-1.9 ns); backward passes
   twice that. The work per thread is the machine's, chosen once per process by the
   CPU backend (gpt2rt__threads_measure): GPT2RT__CPU_WORK_MIN on idle cores,
   GPT2RT__CPU_WORK_MAX on busy ones, so a 2-thread op saves at least the wait it
   pays; GPT2RT__CPU_WORK_MAX until chosen. A build may fix it:
   GPT2RT_CPU_WORK_PER_THREAD N (0 splits every op over all nt threads: the
   thread-count tests, tools/bench_threads). The results do not depend on the count. */
#define GPT2RT__CPU_W_ADD 10.0
#define GPT2RT__CPU_W_MATH 90.0
#define GPT2RT__CPU_WORK_MIN 2e6 /* 40 us a thread: a region's 1-20 us on idle cores, twice over */
#define GPT2RT__CPU_WORK_MAX 4e8 /* 8 ms a thread: the worst region wait measured on a busy 2-core machine */
#ifdef GPT2RT_CPU_WORK_PER_THREAD
static double gpt2rt__work_per_thread(void) { return GPT2RT_CPU_WORK_PER_THREAD; }
#else
static double gpt2rt__cpu_work_measured; /* 0: not measured yet */
static double gpt2rt__work_per_thread(void) {
    double w = gpt2rt__cpu_work_measured;
    return w > 0.0 ? w : GPT2RT__CPU_WORK_MAX;
}
#endif
static int gpt2rt__threads_for(int nt, double work) {
    double per = gpt2rt__work_per_thread();
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
