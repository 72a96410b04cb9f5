/* cuda.h - 8. CUDA backend: the files of cuda/ under the CUDA switch, or the two calls that say it is absent
   may call: cpu/backend.h and what it includes */
#ifndef GPT2RT__SRC_CUDA_H
#define GPT2RT__SRC_CUDA_H
#include "cpu/backend.h"

/* ==== 8. CUDA backend ==== */

/* Compiled by nvcc, or by a host C++ compiler against the emulator in kernels/emu/
   (GPT2RT__CUDA; infix gpt2rt__cu_): hand-written kernels for every op that is not a
   matrix product (8.2, 8.3), cuBLASLt for the matrix products (8.4), the driver (8.5):
   the steps of 7.3's model driver on the device, the optimizer, creation and what the
   public calls do on a CUDA context, data parallel on the devices (8.6), the layer
   split's stages (8.7) and the backend table with its step-level entries (8.8,
   gpt2rt__cu_be_).
   The executors (10) reach all of it through ctx->be and the stages' ctx->ls->ops only. The kernel labs
   in kernels/ validate each part against the CPU backend and time it. */
#if GPT2RT__CUDA

#include "cuda/common.cuh"
#include "cuda/ops.cuh"
#include "cuda/series.cuh"
#include "cuda/attention.cuh"
#include "cuda/attention_backward.cuh"
#include "cuda/matmul.cuh"
#include "cuda/driver.cuh"
#include "cuda/steps.cuh"
#include "cuda/comm.cuh"
#include "cuda/stages.cuh"
#include "cuda/backend.cuh"
#else
/* compiled without CUDA: gpt2rt_create refuses backend = CUDA */
static gpt2rt_result gpt2rt__cuda_open(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
    (void)plan;
    return gpt2rt__fail(ctx, GPT2RT_ERR_UNAVAILABLE, "gpt2rt_create: backend = GPT2RT_BACKEND_CUDA needs the "
                        "implementation compiled by nvcc (GPT2RT_IMPLEMENTATION in a .cu file, linked with "
                        "-lcublasLt); this one was compiled without CUDA");
}
#endif /* GPT2RT__CUDA */

#endif /* GPT2RT__SRC_CUDA_H */
