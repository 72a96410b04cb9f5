/* cuda/common.cuh - 8.1 Common
   may call: cpu/backend.h and what it includes */
#ifndef GPT2RT__SRC_CUDA_COMMON_CUH
#define GPT2RT__SRC_CUDA_COMMON_CUH
#include "../cpu/backend.h"

/* ==== 8.1 Common ==== */

/* What the CUDA sections share: checked calls that return the error (never exit, never
   print), storage-type conversions, launch sizes. Arithmetic is always fp32. */

/* return the cudaError_t of a failing call to the caller; never exits, never prints */
#define GPT2RT__CU_TRY(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return e_; } while (0)
/* every kernel launch is written GPT2RT__LAUNCH(grid, block, smem, stream, k)(args),
   never with the chevrons, so the emulator in kernels/emu/ can launch on the CPU (the
   kernel goes last: a template's commas pass through; smem and stream always spelled) */
#ifndef GPT2RT__LAUNCH
#define GPT2RT__LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<(grid), (block), (smem), (stream)>>>
#endif
/* after a GPT2RT__LAUNCH */
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

#endif /* GPT2RT__SRC_CUDA_COMMON_CUH */
