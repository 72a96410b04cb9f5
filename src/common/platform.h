/* common/platform.h - the CUDA switch, system headers, platform macros, whether a CUDA device is present
   may call: nothing of the files before it */
#ifndef GPT2RT__SRC_COMMON_PLATFORM_H
#define GPT2RT__SRC_COMMON_PLATFORM_H

/* the one switch for the CUDA backend: nvcc, or the host build of kernels/emu/, which
   supplies its own cuda_runtime.h, cublasLt.h and nccl.h and runs the kernels on the CPU */
#if defined(__CUDACC__) || defined(GPT2RT_CUDA_EMU)
#define GPT2RT__CUDA 1
#else
#define GPT2RT__CUDA 0
#endif

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#if GPT2RT__CUDA /* the CUDA backend (section 8); link with -lcublasLt */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#include <atomic> /* once-per-device kernel setup (8.3) */
#include <mutex>  /* the attention kernel's choice per shape (8.3) */
#ifdef GPT2RT_NCCL /* the NCCL communicator (8.6): link with -lnccl */
#include <nccl.h>
#endif
#endif
#ifdef _WIN32
#include <direct.h>
#else
#include <fcntl.h>  /* open(O_NONBLOCK): a FIFO is refused, not waited on */
#include <unistd.h>
#ifndef GPT2RT_NO_DIST
#include <sys/socket.h> /* the TCP rendezvous of multi-process runs (10.3) */
#include <netinet/in.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#endif
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPT2RT__ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(GPT2RT__ASAN)
#define GPT2RT__ASAN 1
#endif
/* the arenas on huge pages (1.3), in mappings of their own; not under ASan, which sees
   only what malloc hands out */
#if defined(__linux__) && !defined(GPT2RT_NO_HUGEPAGES) && !defined(GPT2RT__ASAN)
#include <sys/mman.h>
#if !defined(__USE_MISC) && !defined(__cplusplus)
int madvise(void *addr, size_t len, int advice); /* glibc declares it only outside strict ISO C (-std=c11) */
#endif
#ifndef MADV_HUGEPAGE
#define MADV_HUGEPAGE 14 /* Linux's value (asm-generic/mman-common.h) */
#endif
#if !defined(MAP_ANONYMOUS) && (defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || \
                                defined(__arm__) || defined(__riscv) || defined(__powerpc__) || defined(__s390__))
#define MAP_ANONYMOUS 0x20 /* Linux's value there (asm-generic/mman-common.h); glibc hides it under -std=c11 */
#endif
#ifdef MAP_ANONYMOUS
#define GPT2RT__HUGEPAGES 1
#endif
#endif
#ifdef GPT2RT_MPI /* CPU ranks in separate processes (10.4): compile with mpicc */
#ifdef GPT2RT_NO_DIST
#error "gpt2rt.h: GPT2RT_MPI and GPT2RT_NO_DIST together: MPI is part of the multi-process code NO_DIST leaves out"
#endif
#include <mpi.h>
#endif
#ifdef _WIN32
#define GPT2RT__IS_REG(mode) (((mode) & _S_IFMT) == _S_IFREG)
#define GPT2RT__IS_DIR(mode) (((mode) & _S_IFMT) == _S_IFDIR)
#else
#define GPT2RT__IS_REG(mode) S_ISREG(mode)
#define GPT2RT__IS_DIR(mode) S_ISDIR(mode)
#endif
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(GPT2RT_SGEMM_NO_SIMD)
#include <immintrin.h>
#endif
/* SIMD paths need GCC/Clang x86-64 (also fine as nvcc host code); define
   GPT2RT_SGEMM_NO_SIMD to force the portable C kernel. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(GPT2RT_SGEMM_NO_SIMD)
#define GPT2RT__SG_X86 1
#else
#define GPT2RT__SG_X86 0
#endif
#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "gpt2rt.h: little-endian hosts only (safetensors files are little-endian, read and written with memcpy)"
#endif

/* AUTO's choice (config/config.h): CUDA when the implementation was compiled with it and a
   device is present; compiled without CUDA, AUTO picks the CPU and gpt2rt_create refuses
   backend = CUDA (cuda.h) */
#if GPT2RT__CUDA
static int gpt2rt__cuda_present(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { (void)cudaGetLastError(); return 0; }
    return n > 0;
}
#else
static int gpt2rt__cuda_present(void) { return 0; }
#endif

#endif /* GPT2RT__SRC_COMMON_PLATFORM_H */
