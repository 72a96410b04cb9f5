/* kernels/emu/include/cuda_bf16.h - the emulator's __nv_bfloat16: the top 16 bits of
   an fp32, rounded to nearest even as __float2bfloat16_rn does; NaN stays NaN. */
#ifndef GPT2RT_EMU_CUDA_BF16_H
#define GPT2RT_EMU_CUDA_BF16_H
#include "cuda_fp16.h"

struct __nv_bfloat16 {
    unsigned short __x;
};

static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    unsigned u = gpt2rt_emu_f2u(f);
    __nv_bfloat16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) { b.__x = (unsigned short)((u >> 16) | 0x40u); return b; } /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* ties to even; a carry rounds up to the next binade or inf */
    b.__x = (unsigned short)(u >> 16);
    return b;
}
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static inline float __bfloat162float(__nv_bfloat16 b) { return gpt2rt_emu_u2f((unsigned)b.__x << 16); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { __nv_bfloat16 b; b.__x = x; return b; }
#endif
