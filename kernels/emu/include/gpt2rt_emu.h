/* kernels/emu/include/gpt2rt_emu.h - what a program built for the emulator includes first
   (g++ -include gpt2rt_emu.h): the fake CUDA headers, GPT2RT_CUDA_EMU, and the storage of
   the header's extern __shared__ arrays (one definition each, sized for the largest
   opt-in of an sm_90: 227 KiB). */
#ifndef GPT2RT_EMU_H
#define GPT2RT_EMU_H
#ifndef GPT2RT_CUDA_EMU
#define GPT2RT_CUDA_EMU 1
#endif
#include "cuda_runtime.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cublasLt.h"
GPT2RT_EMU_DYNAMIC_SHARED(float, gpt2rt__cu_ln_sh);
GPT2RT_EMU_DYNAMIC_SHARED(unsigned char, gpt2rt__cu_attn_dsm);
GPT2RT_EMU_DYNAMIC_SHARED(float, gpt2rt__kv_sh);
#endif
