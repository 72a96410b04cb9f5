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
