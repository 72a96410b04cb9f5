/* kernels/emu/include/cuda_fp16.h - the emulator's __half: 16-bit storage, host
   conversions with round-to-nearest-even as the device's __float2half_rn does
   (subnormals kept, overflow to infinity, NaN stays NaN). */
#ifndef GPT2RT_EMU_CUDA_FP16_H
#define GPT2RT_EMU_CUDA_FP16_H
#include <stdint.h>
#include <string.h>

struct __half {
    unsigned short __x;
};
typedef struct __half half;

static inline unsigned gpt2rt_emu_f2u(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float gpt2rt_emu_u2f(unsigned u) { float f; memcpy(&f, &u, 4); return f; }

static inline __half __float2half_rn(float f) {
    unsigned u = gpt2rt_emu_f2u(f), sign = (u >> 16) & 0x8000u, ex = (u >> 23) & 0xffu, man = u & 0x7fffffu;
    __half h;
    if (ex == 0xffu) { h.__x = (unsigned short)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u)); return h; }
    int e = (int)ex - 127 + 15; /* the half's biased exponent */
    if (e >= 31) { h.__x = (unsigned short)(sign | 0x7c00u); return h; }
    if (e <= 0) { /* subnormal half (or zero): shift the full mantissa, then round */
        if (e < -10) { h.__x = (unsigned short)sign; return h; }
        unsigned m = man | 0x800000u, shift = (unsigned)(14 - e), q = m >> shift, rem = m & ((1u << shift) - 1u),
                 halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (q & 1u))) q++;
        h.__x = (unsigned short)(sign | q); return h;
    }
    unsigned q = ((unsigned)e << 10) | (man >> 13), rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++; /* a carry into the exponent is right, up to inf */
    h.__x = (unsigned short)(sign | q);
    return h;
}
static inline __half __float2half(float f) { return __float2half_rn(f); }
static inline float __half2float(__half h) {
    unsigned sign = ((unsigned)h.__x & 0x8000u) << 16, ex = ((unsigned)h.__x >> 10) & 0x1fu, man = (unsigned)h.__x & 0x3ffu;
    if (ex == 0x1fu) return gpt2rt_emu_u2f(sign | 0x7f800000u | (man << 13));
    if (ex == 0) {
        if (!man) return gpt2rt_emu_u2f(sign);
        float v = (float)man * (1.0f / 16777216.0f); /* man * 2^-24, exact */
        return sign ? -v : v;
    }
    return gpt2rt_emu_u2f(sign | ((ex - 15 + 127) << 23) | (man << 13));
}
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __half __ushort_as_half(unsigned short x) { __half h; h.__x = x; return h; }
#endif
