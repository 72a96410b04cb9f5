/* STAGING: pasted verbatim into gpt2rt.h (section 8 "CUDA backend", under __CUDACC__)
   once the kernels are validated on a GPU. Until then the lab files in kernels/
   include it after gpt2rt.h. Shared by cu_ops.cuh, cu_attention.cuh, cu_matmul.cuh. */
#ifndef GPT2RT__CU_COMMON
#define GPT2RT__CU_COMMON
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#include <stdint.h>

/* return the cudaError_t of a failing call to the caller; never exits, never prints */
#define GPT2RT__CU_TRY(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return e_; } while (0)
/* after a <<<>>> launch */
#define GPT2RT__CU_LAUNCHED() do { cudaError_t e_ = cudaGetLastError(); if (e_ != cudaSuccess) return e_; } while (0)

/* storage types: float, __nv_bfloat16, __half; arithmetic is always fp32 */
__device__ __forceinline__ float gpt2rt__cu_f(float x) { return x; }
__device__ __forceinline__ float gpt2rt__cu_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float gpt2rt__cu_f(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T gpt2rt__cu_to(float x);
template <> __device__ __forceinline__ float gpt2rt__cu_to<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 gpt2rt__cu_to<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half gpt2rt__cu_to<__half>(float x) { return __float2half_rn(x); }

static inline unsigned gpt2rt__cu_blocks(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }
#endif
