/* cuda/ops.cuh - 8.2 Ops
   may call: cuda/common.cuh and what it includes */
#ifndef GPT2RT__SRC_CUDA_OPS_CUH
#define GPT2RT__SRC_CUDA_OPS_CUH
#include "common.cuh"

/* ==== 8.2 Ops ==== */

/* The lab files kernels/encoder.cu, layernorm.cu, gelu.cu, classifier.cu, bias_grad.cu,
   adamw.cu, global_norm.cu validate these kernels against the CPU ops and time them.

   The non-attention, non-matmul ops of the CUDA backend:
     embedding fwd/bwd, LayerNorm fwd (plain and fused with the residual add) and bwd,
     GELU fwd/bwd, residual add, casts, fused classifier (softmax cross-entropy with the
     backward in place), bias gradient, global gradient norm, inf/NaN check, AdamW;
     dropout (7.1's masks); time series: RevIN and patching, the position add, the
     de-normalisation, the MSE's gradient and the affine's (kernels/timeseries.cu).

   Conventions
   * floatX is the activation storage type: float, __nv_bfloat16 or __half. All arithmetic
     is fp32. Statistics (mean, rstd, losses, lse) and every gradient of a PARAMETER are
     fp32; gradients of activations are floatX.
   * Deterministic: no floating-point atomics. Every reduction runs in an order fixed by
     the shapes (never by the device or the timing), so two runs give the same bits.
     Ops that reduce across blocks write per-block partials into a caller-provided device
     scratch buffer (size: gpt2rt__cu_<op>_scratch_bytes) and a second kernel adds them
     in a fixed order.
   * Each launcher takes a cudaStream_t and returns the first cudaError_t (launch errors
     only; execution errors show up at the next synchronising call). No allocation, no
     synchronisation, no global state.
   * Fast paths use 128-bit loads/stores. They need the row length (C, OC, Vp) to be a
     multiple of VN = 16 / sizeof(floatX) (4 for fp32, 8 for bf16/fp16) and every pointer
     16-byte aligned (cudaMalloc gives 256); the launchers check this and otherwise take
     a generic scalar path that handles any size and alignment. Both paths do the same
     arithmetic per element, but the reductions group terms differently, so the fast and
     the generic path may differ in the last bits. */

#define GPT2RT__CU_NEG_BIG (-3.402823466e+38f) /* -FLT_MAX: "no value yet" of the running max */

/* ---- shared helpers ---- */

/* f (VN) = p (VN) converted to fp32. With VN * sizeof(S) a multiple of 16 the loads are
   128-bit and p must be 16-byte aligned; otherwise scalar. */
template <int VN, typename S>
__device__ __forceinline__ void gpt2rt__cu_ldv(float *f, const S *p) {
    if constexpr ((VN * sizeof(S)) % 16 == 0) {
        constexpr int per = (int)(16 / sizeof(S));
#pragma unroll
        for (int q = 0; q < VN / per; q++) {
            int4 raw = reinterpret_cast<const int4 *>(p)[q];
            const S *e = reinterpret_cast<const S *>(&raw);
#pragma unroll
            for (int k = 0; k < per; k++) f[q * per + k] = gpt2rt__cu_f(e[k]);
        }
    } else {
#pragma unroll
        for (int k = 0; k < VN; k++) f[k] = gpt2rt__cu_f(p[k]);
    }
}

/* p (VN) = f (VN) rounded to S; same access rules as gpt2rt__cu_ldv */
template <int VN, typename S>
__device__ __forceinline__ void gpt2rt__cu_stv(S *p, const float *f) {
    if constexpr ((VN * sizeof(S)) % 16 == 0) {
        constexpr int per = (int)(16 / sizeof(S));
#pragma unroll
        for (int q = 0; q < VN / per; q++) {
            int4 raw;
            S *e = reinterpret_cast<S *>(&raw);
#pragma unroll
            for (int k = 0; k < per; k++) e[k] = gpt2rt__cu_to<S>(f[q * per + k]);
            reinterpret_cast<int4 *>(p)[q] = raw;
        }
    } else {
#pragma unroll
        for (int k = 0; k < VN; k++) p[k] = gpt2rt__cu_to<S>(f[k]);
    }
}

/* sum over the 32 lanes, xor butterfly: every lane gets the same bits */
__device__ __forceinline__ float gpt2rt__cu_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double gpt2rt__cu_warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* sum over the block (blockDim.x a multiple of 32, at most 1024), fixed order; the result
   is returned to every thread. sh: 32 doubles of shared memory, reusable after return. */
__device__ __forceinline__ double gpt2rt__cu_block_sum_d(double v, double *sh) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    v = gpt2rt__cu_warp_sum_d(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    v = gpt2rt__cu_warp_sum_d(v);
    __syncthreads(); /* sh may be reused */
    return v;
}

static inline int gpt2rt__cu_al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* dst (n) fp32 (+)= sum over g < G of parts[g * ld + i] (accumulate 1: +=, 0: =). Block
   (32, 16): x a column, y one of 16 running sums over g = y, y+16, ...; the 16 are then
   added in order of y. The order depends only on G: deterministic. */
static __global__ void gpt2rt__cuk_sum_parts(float *dst, const float *parts, int64_t G, int64_t ld, int64_t n,
                                             int accumulate) {
    __shared__ float sh[16][33];
    int64_t i = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (i < n)
        for (int64_t g = threadIdx.y; g < G; g += 16) acc += parts[g * ld + i];
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < n) {
        float s = 0.0f;
        for (int y = 0; y < 16; y++) s += sh[y][threadIdx.x];
        dst[i] = accumulate ? dst[i] + s : s;
    }
}

static inline cudaError_t gpt2rt__cu_sum_parts(float *dst, const float *parts, int64_t G, int64_t ld, int64_t n,
                                               int accumulate, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 32), dim3(32, 16), 0, stream, gpt2rt__cuk_sum_parts)(dst, parts, G, ld, n,
                                                                                          accumulate);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- embeddings ---- */

/* out (B,T,C) = wte[tokens] + wpe[t]; tokens (B,T) int32 in [0,Vp), wte (Vp,C), wpe (P,C).
   One thread per VN consecutive elements of a row (C % VN == 0). */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_encoder_forward(floatX *out, const int32_t *tokens, const floatX *wte,
                                            const floatX *wpe, int64_t BT, int64_t T, int64_t C) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VN; /* element of (BT,C) */
    if (i >= BT * C) return;
    int64_t bt = i / C, c = i - bt * C, t = bt % T;
    float a[VN], b[VN];
    gpt2rt__cu_ldv<VN>(a, wte + (int64_t)tokens[bt] * C + c);
    gpt2rt__cu_ldv<VN>(b, wpe + t * C + c);
#pragma unroll
    for (int k = 0; k < VN; k++) a[k] += b[k];
    gpt2rt__cu_stv<VN>(out + i, a);
}

template <typename floatX>
static cudaError_t gpt2rt__cu_encoder_forward(floatX *out, const int32_t *tokens, const floatX *wte,
                                              const floatX *wpe, int64_t B, int64_t T, int64_t C,
                                              cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    int64_t n = B * T * C;
    if (n <= 0) return cudaSuccess;
    if (C % VN == 0 && gpt2rt__cu_al16(out) && gpt2rt__cu_al16(wte) && gpt2rt__cu_al16(wpe))
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n / VN, 256), 256, 0, stream, gpt2rt__cuk_encoder_forward<floatX, VN>)(
            out, tokens, wte, wpe, B * T, T, C);
    else
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_encoder_forward<floatX, 1>)(
            out, tokens, wte, wpe, B * T, T, C);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* Generation (8.5's decode pass): x (N,C) = wte[tok] + wpe[pos], N new tokens at any
   positions, the sum in fp32 as the encoder's. One thread per element. */
template <typename floatX>
__global__ void gpt2rt__cuk_decode_embed(floatX *x, const int32_t *tok, const int32_t *pos, const floatX *wte,
                                         const floatX *wpe, int64_t N, int64_t C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * C) return;
    int64_t n = i / C, c = i - n * C;
    x[i] = gpt2rt__cu_to<floatX>(gpt2rt__cu_f(wte[(int64_t)tok[n] * C + c]) + gpt2rt__cu_f(wpe[(int64_t)pos[n] * C + c]));
}

template <typename floatX>
static cudaError_t gpt2rt__cu_decode_embed(floatX *x, const int32_t *tok, const int32_t *pos, const floatX *wte,
                                           const floatX *wpe, int64_t N, int64_t C, cudaStream_t stream) {
    if (N * C <= 0) return cudaSuccess;
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(N * C, 256), 256, 0, stream, gpt2rt__cuk_decode_embed<floatX>)(x, tok, pos, wte,
                                                                                                   wpe, N, C);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* The bucket list of the deterministic dwte: the BT positions grouped by token.
   buf: int32, gpt2rt__cu_encoder_bucket_ints(BT) = 3*BT + 1 entries, fixed offsets:
     buf[0 .. nb]               start of bucket k in pos (nb + 1 entries, start[nb] = BT)
     buf[BT+1 .. BT+nb]         token of bucket k (increasing)
     buf[2BT+1 .. 3BT]          pos: the positions bt, grouped by token, increasing in a bucket
   Host code (radix sort by (token, position): O(BT) a byte of Vp, no allocation). Upload the
   whole buffer (or its first 3*BT+1 entries) and pass nb to gpt2rt__cu_encoder_backward.
   Returns nb, the number of distinct tokens, or -1 if a token is outside [0, Vp). BT < 2^31. */
static inline int64_t gpt2rt__cu_encoder_bucket_ints(int64_t BT) { return 3 * BT + 1; }

static inline int64_t gpt2rt__cu_encoder_buckets(int32_t *buf, const int32_t *tokens, int64_t BT, int64_t Vp) {
    int32_t *start = buf, *ids = buf + BT + 1, *pos = buf + 2 * BT + 1;
    int32_t *src = pos, *dst = ids; /* ids is free until the end: the sort's second buffer */
    int64_t nb = 0;
    for (int64_t i = 0; i < BT; i++) {
        if (tokens[i] < 0 || tokens[i] >= Vp) return -1;
        pos[i] = (int32_t)i;
    }
    /* least-significant-digit radix sort by token, one byte a pass, as many passes as Vp - 1
       has bytes; each pass is stable, so equal tokens keep their positions' increasing order
       and the (token, position) order comes out, which is unique. O(BT) a pass. */
    for (int shift = 0; shift < 32 && (((uint32_t)(Vp - 1)) >> shift) != 0; shift += 8) {
        int64_t count[257] = {0};
        for (int64_t i = 0; i < BT; i++) count[(((uint32_t)tokens[src[i]] >> shift) & 255u) + 1]++;
        for (int k = 0; k < 256; k++) count[k + 1] += count[k];
        for (int64_t i = 0; i < BT; i++) dst[count[((uint32_t)tokens[src[i]] >> shift) & 255u]++] = src[i];
        int32_t *t = src; src = dst; dst = t;
    }
    if (src != pos) memcpy(pos, src, (size_t)BT * sizeof(int32_t));
    for (int64_t i = 0; i < BT; i++)
        if (i == 0 || tokens[pos[i]] != tokens[pos[i - 1]]) { start[nb] = (int32_t)i; ids[nb] = tokens[pos[i]]; nb++; }
    start[nb] = (int32_t)BT;
    return nb;
}

/* dwte (Vp,C) fp32 += the rows of dout (BT,C) of each bucket, added in increasing position
   order (the CPU order). buckets: device copy of the list above. Grid (nb, column blocks);
   one thread per VN columns of one bucket. */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_encoder_backward_wte(float *dwte, const floatX *dout, const int32_t *buckets,
                                                 int64_t BT, int64_t C) {
    int64_t k = blockIdx.x, c = ((int64_t)blockIdx.y * blockDim.x + threadIdx.x) * VN;
    if (c >= C) return;
    const int32_t *start = buckets, *ids = buckets + BT + 1, *pos = buckets + 2 * BT + 1;
    float *dst = dwte + (int64_t)ids[k] * C + c;
    float acc[VN], d[VN];
    gpt2rt__cu_ldv<VN>(acc, dst);
    for (int32_t p = start[k], p1 = start[k + 1]; p < p1; p++) {
        gpt2rt__cu_ldv<VN>(d, dout + (int64_t)pos[p] * C + c);
#pragma unroll
        for (int q = 0; q < VN; q++) acc[q] += d[q];
    }
    gpt2rt__cu_stv<VN>(dst, acc);
}

/* dwpe (P,C) fp32 += dout (B,T,C) summed over b in increasing order (rows t < T only).
   One thread per VN elements of (T,C). */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_encoder_backward_wpe(float *dwpe, const floatX *dout, int64_t B, int64_t T, int64_t C) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VN; /* element of (T,C) */
    if (i >= T * C) return;
    float acc[VN], d[VN];
    gpt2rt__cu_ldv<VN>(acc, dwpe + i);
    for (int64_t b = 0; b < B; b++) {
        gpt2rt__cu_ldv<VN>(d, dout + b * T * C + i);
#pragma unroll
        for (int q = 0; q < VN; q++) acc[q] += d[q];
    }
    gpt2rt__cu_stv<VN>(dwpe + i, acc);
}

/* dwte (Vp,C) +=, dwpe (P,C) += from dout (B,T,C) (either NULL: frozen, not computed);
   buckets (device) and nb from gpt2rt__cu_encoder_buckets over the same tokens (unused
   when dwte is NULL). Bitwise equal to the CPU gpt2rt__cpu_encoder_backward on the same
   (fp32-converted) dout. No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_encoder_backward(float *dwte, float *dwpe, const floatX *dout, const int32_t *buckets,
                                               int64_t nb, int64_t B, int64_t T, int64_t C, cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (B * T * C <= 0) return cudaSuccess;
    if (nb < 0 || nb > B * T) return cudaErrorInvalidValue;
    int fast = C % VN == 0 && gpt2rt__cu_al16(dwte) && gpt2rt__cu_al16(dwpe) && gpt2rt__cu_al16(dout);
    int vn = fast ? VN : 1;
    dim3 grid_wte((unsigned)nb, gpt2rt__cu_blocks(C / vn, 64));
    unsigned grid_wpe = gpt2rt__cu_blocks(T * C / vn, 256);
    if (dwte && nb) {
        if (fast) GPT2RT__LAUNCH(grid_wte, 64, 0, stream, gpt2rt__cuk_encoder_backward_wte<floatX, VN>)(dwte, dout, buckets, B * T, C);
        else GPT2RT__LAUNCH(grid_wte, 64, 0, stream, gpt2rt__cuk_encoder_backward_wte<floatX, 1>)(dwte, dout, buckets, B * T, C);
        GPT2RT__CU_LAUNCHED();
    }
    if (dwpe) {
        if (fast) GPT2RT__LAUNCH(grid_wpe, 256, 0, stream, gpt2rt__cuk_encoder_backward_wpe<floatX, VN>)(dwpe, dout, B, T, C);
        else GPT2RT__LAUNCH(grid_wpe, 256, 0, stream, gpt2rt__cuk_encoder_backward_wpe<floatX, 1>)(dwpe, dout, B, T, C);
        GPT2RT__CU_LAUNCHED();
    }
    return cudaSuccess;
}

/* ---- LayerNorm (eps 1e-5, biased variance) ---- */

/* One warp per row; lane l handles the VN-wide column groups l, l+32, ... (the same ones
   in every pass, so a lane re-reads only what it wrote itself).
   out (N,C) floatX; mean (N), rstd (N) fp32, either may be NULL; w (C), b (C).
   RESID = false: normalises inp (N,C).
   RESID = true : res (N,C) = inp + inp2 rounded to floatX, then normalises res (the value
                  as stored, so the backward sees the same input). res may alias inp or inp2. */
template <typename floatX, int VN, bool RESID>
__global__ void gpt2rt__cuk_layernorm_forward(floatX *out, float *mean, float *rstd, floatX *res, const floatX *inp,
                                              const floatX *inp2, const floatX *w, const floatX *b, int64_t N,
                                              int64_t C) {
    int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const floatX *x = inp + row * C;
    float a[VN], t[VN], sum = 0.0f;
    if (RESID) {
        floatX *r = res + row * C;
        for (int64_t c = (int64_t)lane * VN; c < C; c += 32 * VN) {
            gpt2rt__cu_ldv<VN>(a, x + c);
            gpt2rt__cu_ldv<VN>(t, inp2 + row * C + c);
#pragma unroll
            for (int k = 0; k < VN; k++) { a[k] = gpt2rt__cu_f(gpt2rt__cu_to<floatX>(a[k] + t[k])); sum += a[k]; }
            gpt2rt__cu_stv<VN>(r + c, a);
        }
        x = r;
    } else {
        for (int64_t c = (int64_t)lane * VN; c < C; c += 32 * VN) {
            gpt2rt__cu_ldv<VN>(a, x + c);
#pragma unroll
            for (int k = 0; k < VN; k++) sum += a[k];
        }
    }
    float m = gpt2rt__cu_warp_sum(sum) / (float)C, var = 0.0f;
    for (int64_t c = (int64_t)lane * VN; c < C; c += 32 * VN) {
        gpt2rt__cu_ldv<VN>(a, x + c);
#pragma unroll
        for (int k = 0; k < VN; k++) { float d = a[k] - m; var += d * d; }
    }
    float s = 1.0f / sqrtf(gpt2rt__cu_warp_sum(var) / (float)C + 1e-5f);
    floatX *o = out + row * C;
    for (int64_t c = (int64_t)lane * VN; c < C; c += 32 * VN) {
        float wv[VN], bv[VN];
        gpt2rt__cu_ldv<VN>(a, x + c);
        gpt2rt__cu_ldv<VN>(wv, w + c);
        gpt2rt__cu_ldv<VN>(bv, b + c);
#pragma unroll
        for (int k = 0; k < VN; k++) a[k] = (a[k] - m) * s * wv[k] + bv[k];
        gpt2rt__cu_stv<VN>(o + c, a);
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = s;
    }
}

template <typename floatX, bool RESID>
static cudaError_t gpt2rt__cu_layernorm_forward_impl(floatX *out, float *mean, float *rstd, floatX *res,
                                                     const floatX *inp, const floatX *inp2, const floatX *w,
                                                     const floatX *b, int64_t N, int64_t C, cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (N <= 0 || C <= 0) return cudaSuccess;
    unsigned grid = gpt2rt__cu_blocks(N, 8); /* 8 warps (rows) per block */
    int fast = C % VN == 0 && gpt2rt__cu_al16(out) && gpt2rt__cu_al16(inp) && gpt2rt__cu_al16(w) &&
               gpt2rt__cu_al16(b) && (!RESID || (gpt2rt__cu_al16(res) && gpt2rt__cu_al16(inp2)));
    if (fast)
        GPT2RT__LAUNCH(grid, 256, 0, stream, gpt2rt__cuk_layernorm_forward<floatX, VN, RESID>)(out, mean, rstd, res, inp, inp2, w, b, N, C);
    else
        GPT2RT__LAUNCH(grid, 256, 0, stream, gpt2rt__cuk_layernorm_forward<floatX, 1, RESID>)(out, mean, rstd, res, inp, inp2, w, b, N, C);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* out (N,C), mean (N), rstd (N) (NULL: not stored) from inp (N,C), w (C), b (C). No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp,
                                                const floatX *w, const floatX *b, int64_t N, int64_t C,
                                                cudaStream_t stream) {
    return gpt2rt__cu_layernorm_forward_impl<floatX, false>(out, mean, rstd, (floatX *)0, inp, (const floatX *)0,
                                                           w, b, N, C, stream);
}

/* res (N,C) = a + b (rounded to floatX; may alias a or b), then out (N,C), mean, rstd =
   LayerNorm(res) with w (C), bias (C). The `x += attn; ln_2(x)` pair. No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_residual_layernorm_forward(floatX *res, floatX *out, float *mean, float *rstd,
                                                         const floatX *a, const floatX *b, const floatX *w,
                                                         const floatX *bias, int64_t N, int64_t C,
                                                         cudaStream_t stream) {
    return gpt2rt__cu_layernorm_forward_impl<floatX, true>(out, mean, rstd, res, a, b, w, bias, N, C, stream);
}

#define GPT2RT__CU_LN_ROWS 32 /* rows per block of the LayerNorm backward = rows per dw/db partial */

/* warps per block of the LayerNorm backward: each warp keeps fp32 dw and db accumulators
   for the whole row (8*C bytes of shared memory), at most 48 KiB in all when C <= 6144 */
static inline int gpt2rt__cu_ln_warps(int64_t C) {
    int64_t w = 49152 / (8 * C);
    return w < 1 ? 1 : w > 8 ? 8 : (int)w;
}

/* device bytes of scratch gpt2rt__cu_layernorm_backward needs: ceil(N/32) partials of 2C floats */
static inline size_t gpt2rt__cu_layernorm_backward_scratch_bytes(int64_t N, int64_t C) {
    return (size_t)((N + GPT2RT__CU_LN_ROWS - 1) / GPT2RT__CU_LN_ROWS) * (size_t)(2 * C) * sizeof(float);
}

/* Block g owns rows [32g, 32g+32); its W warps take rows warp, warp+W, ... in order.
   Per row: dinp (N,C) += (w*dout - mean(w*dout) - norm*mean(w*dout*norm)) * rstd, and the
   row's norm*dout and dout are added into the warp's shared dw, db accumulators. Then the
   block adds its warps in order: parts (G, 2C) with parts[g][0,C) = dw, parts[g][C,2C) = db.
   Shared layout: warp slice of 2C floats; column c = j*VN + k stored at k*(C/VN) + j so
   the 32 lanes hit 32 banks. dout, inp, w (C) floatX; mean, rstd (N) fp32 from the forward. */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_layernorm_backward(floatX *dinp, float *parts, const floatX *dout, const floatX *inp,
                                               const floatX *w, const float *mean, const float *rstd, int64_t N,
                                               int64_t C) {
    extern __shared__ float gpt2rt__cu_ln_sh[]; /* (W, 2C) */
    int W = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int64_t CV = C / VN;
    for (int64_t i = threadIdx.x; i < (int64_t)W * 2 * C; i += blockDim.x) gpt2rt__cu_ln_sh[i] = 0.0f;
    __syncthreads();
    float *acc_w = gpt2rt__cu_ln_sh + (int64_t)warp * 2 * C, *acc_b = acc_w + C;
    int64_t r0 = (int64_t)blockIdx.x * GPT2RT__CU_LN_ROWS;
    int64_t r1 = r0 + GPT2RT__CU_LN_ROWS < N ? r0 + GPT2RT__CU_LN_ROWS : N;
    for (int64_t row = r0 + warp; row < r1; row += W) {
        const floatX *x = inp + row * C, *g = dout + row * C;
        float m = mean[row], s = rstd[row], dm = 0.0f, dnm = 0.0f;
        float xv[VN], gv[VN], wv[VN];
        for (int64_t j = lane; j < CV; j += 32) {
            gpt2rt__cu_ldv<VN>(xv, x + j * VN);
            gpt2rt__cu_ldv<VN>(gv, g + j * VN);
            gpt2rt__cu_ldv<VN>(wv, w + j * VN);
#pragma unroll
            for (int k = 0; k < VN; k++) {
                float n = (xv[k] - m) * s, dn = wv[k] * gv[k];
                dm += dn;
                dnm += dn * n;
                acc_w[k * CV + j] += n * gv[k];
                acc_b[k * CV + j] += gv[k];
            }
        }
        dm = gpt2rt__cu_warp_sum(dm) / (float)C;
        dnm = gpt2rt__cu_warp_sum(dnm) / (float)C;
        floatX *dx = dinp + row * C;
        for (int64_t j = lane; j < CV; j += 32) {
            float dv[VN];
            gpt2rt__cu_ldv<VN>(xv, x + j * VN);
            gpt2rt__cu_ldv<VN>(gv, g + j * VN);
            gpt2rt__cu_ldv<VN>(wv, w + j * VN);
            gpt2rt__cu_ldv<VN>(dv, dx + j * VN);
#pragma unroll
            for (int k = 0; k < VN; k++) dv[k] += (wv[k] * gv[k] - dm - (xv[k] - m) * s * dnm) * s;
            gpt2rt__cu_stv<VN>(dx + j * VN, dv);
        }
    }
    __syncthreads();
    float *p = parts + (int64_t)blockIdx.x * 2 * C;
    for (int64_t i = threadIdx.x; i < 2 * C; i += blockDim.x) {
        float s = 0.0f;
        for (int v = 0; v < W; v++) s += gpt2rt__cu_ln_sh[(int64_t)v * 2 * C + i];
        int64_t half = i / C, li = i - half * C, k = li / CV, j = li - k * CV;
        p[half * C + j * VN + k] = s;
    }
}

/* dinp (N,C) floatX +=, dw (C) fp32 +=, db (C) fp32 += from dout (N,C) and the forward's
   inp (N,C), w (C), mean (N), rstd (N). dinp must not alias dout or inp. dw and db may be
   NULL (a frozen LayerNorm: only dinp is wanted; the partials are still written).
   scratch: device, gpt2rt__cu_layernorm_backward_scratch_bytes(N, C). For C > 6144 the
   launcher raises the kernel's dynamic shared memory limit (8*C bytes, C <= ~29000). */
template <typename floatX>
static cudaError_t gpt2rt__cu_layernorm_backward(floatX *dinp, float *dw, float *db, const floatX *dout,
                                                 const floatX *inp, const floatX *w, const float *mean,
                                                 const float *rstd, float *scratch, int64_t N, int64_t C,
                                                 cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (N <= 0 || C <= 0) return cudaSuccess;
    int W = gpt2rt__cu_ln_warps(C);
    int64_t G = (N + GPT2RT__CU_LN_ROWS - 1) / GPT2RT__CU_LN_ROWS;
    size_t smem = (size_t)W * 2 * (size_t)C * sizeof(float);
    int fast = C % VN == 0 && gpt2rt__cu_al16(dinp) && gpt2rt__cu_al16(dout) && gpt2rt__cu_al16(inp) &&
               gpt2rt__cu_al16(w);
    if (fast) {
        if (smem > 49152)
            GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_layernorm_backward<floatX, VN>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        GPT2RT__LAUNCH((unsigned)G, W * 32, smem, stream, gpt2rt__cuk_layernorm_backward<floatX, VN>)(dinp, scratch, dout, inp, w,
                                                                                         mean, rstd, N, C);
    } else {
        if (smem > 49152)
            GPT2RT__CU_TRY(cudaFuncSetAttribute(gpt2rt__cuk_layernorm_backward<floatX, 1>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        GPT2RT__LAUNCH((unsigned)G, W * 32, smem, stream, gpt2rt__cuk_layernorm_backward<floatX, 1>)(dinp, scratch, dout, inp, w,
                                                                                        mean, rstd, N, C);
    }
    GPT2RT__CU_LAUNCHED();
    if (dw) GPT2RT__CU_TRY(gpt2rt__cu_sum_parts(dw, scratch, G, 2 * C, C, 1, stream));
    if (db) GPT2RT__CU_TRY(gpt2rt__cu_sum_parts(db, scratch + C, G, 2 * C, C, 1, stream));
    return cudaSuccess;
}

/* ---- GELU (tanh form), residual add, casts: elementwise ---- */
/* Elementwise kernels: one thread per VN elements; the last thread does the tail of n
   that is not a multiple of VN with scalar accesses. */

__device__ __forceinline__ float gpt2rt__cu_gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float gpt2rt__cu_gelu_grad(float x) {
    float th = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}

/* out (n) = gelu(inp (n)); out may alias inp */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_gelu_forward(floatX *out, const floatX *inp, int64_t n) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VN;
    if (i >= n) return;
    if (i + VN <= n) {
        float x[VN];
        gpt2rt__cu_ldv<VN>(x, inp + i);
#pragma unroll
        for (int k = 0; k < VN; k++) x[k] = gpt2rt__cu_gelu(x[k]);
        gpt2rt__cu_stv<VN>(out + i, x);
    } else {
        for (; i < n; i++) out[i] = gpt2rt__cu_to<floatX>(gpt2rt__cu_gelu(gpt2rt__cu_f(inp[i])));
    }
}

/* dinp (n) = gelu'(inp (n)) * dout (n); dinp may alias dout */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_gelu_backward(floatX *dinp, const floatX *inp, const floatX *dout, int64_t n) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VN;
    if (i >= n) return;
    if (i + VN <= n) {
        float x[VN], d[VN];
        gpt2rt__cu_ldv<VN>(x, inp + i);
        gpt2rt__cu_ldv<VN>(d, dout + i);
#pragma unroll
        for (int k = 0; k < VN; k++) x[k] = gpt2rt__cu_gelu_grad(x[k]) * d[k];
        gpt2rt__cu_stv<VN>(dinp + i, x);
    } else {
        for (; i < n; i++)
            dinp[i] = gpt2rt__cu_to<floatX>(gpt2rt__cu_gelu_grad(gpt2rt__cu_f(inp[i])) * gpt2rt__cu_f(dout[i]));
    }
}

/* out (n) = a (n) + b (n); out may alias a or b */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_residual_forward(floatX *out, const floatX *a, const floatX *b, int64_t n) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VN;
    if (i >= n) return;
    if (i + VN <= n) {
        float x[VN], y[VN];
        gpt2rt__cu_ldv<VN>(x, a + i);
        gpt2rt__cu_ldv<VN>(y, b + i);
#pragma unroll
        for (int k = 0; k < VN; k++) x[k] += y[k];
        gpt2rt__cu_stv<VN>(out + i, x);
    } else {
        for (; i < n; i++) out[i] = gpt2rt__cu_to<floatX>(gpt2rt__cu_f(a[i]) + gpt2rt__cu_f(b[i]));
    }
}

/* out (n) To = in (n) From, round to nearest even; VN = 8 (one or two 128-bit accesses) */
template <typename To, typename From, int VN>
__global__ void gpt2rt__cuk_cast(To *out, const From *in, int64_t n) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VN;
    if (i >= n) return;
    if (i + VN <= n) {
        float x[VN];
        gpt2rt__cu_ldv<VN>(x, in + i);
        gpt2rt__cu_stv<VN>(out + i, x);
    } else {
        for (; i < n; i++) out[i] = gpt2rt__cu_to<To>(gpt2rt__cu_f(in[i]));
    }
}

/* out (n) = gelu(inp (n)). No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_gelu_forward(floatX *out, const floatX *inp, int64_t n, cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (n <= 0) return cudaSuccess;
    if (gpt2rt__cu_al16(out) && gpt2rt__cu_al16(inp))
        GPT2RT__LAUNCH(gpt2rt__cu_blocks((n + VN - 1) / VN, 256), 256, 0, stream, gpt2rt__cuk_gelu_forward<floatX, VN>)(out, inp, n);
    else
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_gelu_forward<floatX, 1>)(out, inp, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* dinp (n) = gelu'(inp) * dout; dinp may alias dout. No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_gelu_backward(floatX *dinp, const floatX *inp, const floatX *dout, int64_t n,
                                            cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (n <= 0) return cudaSuccess;
    if (gpt2rt__cu_al16(dinp) && gpt2rt__cu_al16(inp) && gpt2rt__cu_al16(dout))
        GPT2RT__LAUNCH(gpt2rt__cu_blocks((n + VN - 1) / VN, 256), 256, 0, stream, gpt2rt__cuk_gelu_backward<floatX, VN>)(dinp, inp, dout, n);
    else
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_gelu_backward<floatX, 1>)(dinp, inp, dout, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* out (n) = a (n) + b (n); out may alias a or b. No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_residual_forward(floatX *out, const floatX *a, const floatX *b, int64_t n,
                                               cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (n <= 0) return cudaSuccess;
    if (gpt2rt__cu_al16(out) && gpt2rt__cu_al16(a) && gpt2rt__cu_al16(b))
        GPT2RT__LAUNCH(gpt2rt__cu_blocks((n + VN - 1) / VN, 256), 256, 0, stream, gpt2rt__cuk_residual_forward<floatX, VN>)(out, a, b, n);
    else
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_residual_forward<floatX, 1>)(out, a, b, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* out (n) To = in (n) From (fp32 -> floatX, floatX -> fp32, or same-type copy). No scratch. */
template <typename To, typename From>
static cudaError_t gpt2rt__cu_cast(To *out, const From *in, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (gpt2rt__cu_al16(out) && gpt2rt__cu_al16(in))
        GPT2RT__LAUNCH(gpt2rt__cu_blocks((n + 7) / 8, 256), 256, 0, stream, gpt2rt__cuk_cast<To, From, 8>)(out, in, n);
    else
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_cast<To, From, 1>)(out, in, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- fused classifier: softmax cross-entropy over the first V of Vp columns ---- */

#define GPT2RT__CU_CLS_THREADS 512

/* (m, s) <- the log-sum-exp pair of (m, s) and (m2, s2): sum = s e^m + s2 e^m2. Symmetric
   in its two arguments, so both lanes of a butterfly get the same bits. m = -FLT_MAX,
   s = 0 is the empty pair (no inf - inf). */
__device__ __forceinline__ void gpt2rt__cu_lse_merge(float &m, float &s, float m2, float s2) {
    float M = fmaxf(m, m2);
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

/* One block per row i. logits (BT,Vp) floatX; targets (BT) int32, < 0: ignored, else < V.
   Pass 1: per-thread online max/sum of exp over columns < V, merged over the block in a
   fixed order -> lse; losses[i] = lse - x[target] (0 for ignored rows); lse_out[i] = lse
   unless NULL. Pass 2 (WRITE): the row becomes dlogits in place,
   (softmax - onehot(target)) * dloss for columns < V, 0 for columns >= V and ignored rows.
   The second read of the row mostly hits L2. VN columns per access (Vp % VN == 0). */
template <typename floatX, int VN, bool WRITE>
__global__ void __launch_bounds__(GPT2RT__CU_CLS_THREADS)
gpt2rt__cuk_classifier(floatX *logits, float *losses, float *lse_out, const int32_t *targets, float dloss,
                       int64_t V, int64_t Vp) {
    __shared__ float sh_m[32], sh_s[32];
    int64_t row = blockIdx.x;
    floatX *x = logits + row * Vp;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    int32_t tgt = targets[row];
    float x_tgt = 0.0f;
    if (threadIdx.x == 0 && tgt >= 0) x_tgt = gpt2rt__cu_f(x[tgt]); /* read before anyone writes */
    float m = GPT2RT__CU_NEG_BIG, s = 0.0f, v[VN];
    int64_t nv = (V + VN - 1) / VN; /* VN-groups holding columns < V */
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
        gpt2rt__cu_ldv<VN>(v, x + j * VN);
#pragma unroll
        for (int k = 0; k < VN; k++) {
            if (j * VN + k >= V) break;
            if (v[k] > m) { s = s * expf(m - v[k]) + 1.0f; m = v[k]; }
            else s += expf(v[k] - m);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        gpt2rt__cu_lse_merge(m, s, m2, s2);
    }
    if (lane == 0) { sh_m[warp] = m; sh_s[warp] = s; }
    __syncthreads();
    m = lane < nw ? sh_m[lane] : GPT2RT__CU_NEG_BIG;
    s = lane < nw ? sh_s[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        gpt2rt__cu_lse_merge(m, s, m2, s2);
    }
    float lse = m + logf(s); /* every warp computed the same bits */
    if (threadIdx.x == 0) {
        losses[row] = tgt >= 0 ? lse - x_tgt : 0.0f;
        if (lse_out) lse_out[row] = lse;
    }
    if constexpr (WRITE) { /* stores, all after the barrier above, so after the read of x[tgt] */
        for (int64_t j = threadIdx.x; j < Vp / VN; j += blockDim.x) {
            gpt2rt__cu_ldv<VN>(v, x + j * VN);
#pragma unroll
            for (int k = 0; k < VN; k++) {
                int64_t col = j * VN + k;
                float d = 0.0f;
                if (tgt >= 0 && col < V) {
                    d = expf(v[k] - lse) * dloss;
                    if (col == tgt) d -= dloss;
                }
                v[k] = d;
            }
            gpt2rt__cu_stv<VN>(x + j * VN, v);
        }
    }
}

/* losses (BT) fp32 (0 for ignored rows), lse (BT) fp32 or NULL, from logits (BT,Vp) and
   targets (BT) (negative: ignored; else < V). write_dlogits = 1: logits become dlogits in
   place, (softmax - onehot) * dloss, 0 in padded columns and ignored rows (dloss: e.g.
   1/n_targets, or loss_scale/n_targets). write_dlogits = 0: logits untouched (eval).
   Never materialises probabilities. No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_classifier(floatX *logits, float *losses, float *lse, const int32_t *targets,
                                         float dloss, int write_dlogits, int64_t BT, int64_t V, int64_t Vp,
                                         cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (BT <= 0) return cudaSuccess;
    if (V <= 0 || V > Vp) return cudaErrorInvalidValue;
    int fast = Vp % VN == 0 && gpt2rt__cu_al16(logits);
    unsigned grid = (unsigned)BT;
    if (fast && write_dlogits)
        GPT2RT__LAUNCH(grid, GPT2RT__CU_CLS_THREADS, 0, stream, gpt2rt__cuk_classifier<floatX, VN, true>)(logits, losses, lse, targets, dloss, V, Vp);
    else if (fast)
        GPT2RT__LAUNCH(grid, GPT2RT__CU_CLS_THREADS, 0, stream, gpt2rt__cuk_classifier<floatX, VN, false>)(logits, losses, lse, targets, dloss, V, Vp);
    else if (write_dlogits)
        GPT2RT__LAUNCH(grid, GPT2RT__CU_CLS_THREADS, 0, stream, gpt2rt__cuk_classifier<floatX, 1, true>)(logits, losses, lse, targets, dloss, V, Vp);
    else
        GPT2RT__LAUNCH(grid, GPT2RT__CU_CLS_THREADS, 0, stream, gpt2rt__cuk_classifier<floatX, 1, false>)(logits, losses, lse, targets, dloss, V, Vp);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- bias gradient ---- */

#define GPT2RT__CU_BIAS_ROWS 64 /* rows per partial of the bias gradient, at least */

/* rows per partial of the bias gradient of dout (BT,OC) with at most cap bytes of scratch:
   64, or the multiple of 8 that keeps ceil(BT/rows) partials of OC floats within cap */
static inline int64_t gpt2rt__cu_bias_backward_rows(int64_t BT, int64_t OC, size_t cap) {
    int64_t g = (int64_t)(cap / ((size_t)OC * sizeof(float))), rows;
    if (g < 1) return 0; /* not even one partial fits */
    rows = (BT + g - 1) / g;
    rows = (rows + 7) / 8 * 8;
    return rows < GPT2RT__CU_BIAS_ROWS ? GPT2RT__CU_BIAS_ROWS : rows;
}

/* device bytes of scratch gpt2rt__cu_bias_backward needs: ceil(BT/rows) partials of OC floats */
static inline size_t gpt2rt__cu_bias_backward_scratch_bytes(int64_t BT, int64_t OC, int64_t rows) {
    return (size_t)((BT + rows - 1) / rows) * (size_t)OC * sizeof(float);
}

/* parts (G, OC): parts[g][c] = sum of dout[r][c] over the rows r of chunk g (rows each).
   Block (32, 8), grid (G, column tiles of 32*VN): x picks VN columns, y sums the rows
   r = rows g + y, +8, ... in order; the 8 sums are then added in order of y. dout (BT,OC) */
template <typename floatX, int VN>
__global__ void gpt2rt__cuk_bias_backward_parts(float *parts, const floatX *dout, int64_t BT, int64_t OC,
                                                int64_t rows) {
    __shared__ float sh[8][VN][33];
    int64_t c = ((int64_t)blockIdx.y * 32 + threadIdx.x) * VN;
    int64_t r0 = (int64_t)blockIdx.x * rows;
    int64_t r1 = r0 + rows < BT ? r0 + rows : BT;
    float acc[VN], d[VN];
#pragma unroll
    for (int k = 0; k < VN; k++) acc[k] = 0.0f;
    if (c < OC)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
            gpt2rt__cu_ldv<VN>(d, dout + r * OC + c);
#pragma unroll
            for (int k = 0; k < VN; k++) acc[k] += d[k];
        }
#pragma unroll
    for (int k = 0; k < VN; k++) sh[threadIdx.y][k][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && c < OC) {
#pragma unroll
        for (int k = 0; k < VN; k++) {
            float s = 0.0f;
            for (int y = 0; y < 8; y++) s += sh[y][k][threadIdx.x];
            acc[k] = s;
        }
        float *p = parts + (int64_t)blockIdx.x * OC + c;
#pragma unroll
        for (int k = 0; k < VN; k++) p[k] = acc[k];
    }
}

/* db (OC) fp32 (accumulate 1: +=, 0: =) column sums of dout (BT,OC) floatX: partial sums
   of rows rows each (a multiple of 8, gpt2rt__cu_bias_backward_rows), then their sum in a
   fixed order. scratch: device, gpt2rt__cu_bias_backward_scratch_bytes(BT, OC, rows).
   OC / (32*VN) < 65536. */
template <typename floatX>
static cudaError_t gpt2rt__cu_bias_backward(float *db, const floatX *dout, float *scratch, int64_t BT, int64_t OC,
                                            int64_t rows, int accumulate, cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(floatX));
    if (BT <= 0 || OC <= 0) return accumulate ? cudaSuccess : cudaMemsetAsync(db, 0, (size_t)OC * sizeof(float), stream);
    if (rows <= 0 || rows % 8) return cudaErrorInvalidValue;
    int64_t G = (BT + rows - 1) / rows;
    if (OC % VN == 0 && gpt2rt__cu_al16(dout)) {
        dim3 grid((unsigned)G, gpt2rt__cu_blocks(OC / VN, 32));
        GPT2RT__LAUNCH(grid, dim3(32, 8), 0, stream, gpt2rt__cuk_bias_backward_parts<floatX, VN>)(scratch, dout, BT, OC,
                                                                                                  rows);
    } else {
        dim3 grid((unsigned)G, gpt2rt__cu_blocks(OC, 32));
        GPT2RT__LAUNCH(grid, dim3(32, 8), 0, stream, gpt2rt__cuk_bias_backward_parts<floatX, 1>)(scratch, dout, BT, OC,
                                                                                                 rows);
    }
    GPT2RT__CU_LAUNCHED();
    return gpt2rt__cu_sum_parts(db, scratch, G, OC, OC, accumulate, stream);
}

/* ---- global gradient norm, inf/NaN check ---- */

#define GPT2RT__CU_NORM_CHUNK 65536 /* elements per block of the first pass */

/* device bytes of scratch gpt2rt__cu_global_norm needs: one double per chunk of 65536 */
static inline size_t gpt2rt__cu_global_norm_scratch_bytes(int64_t n) {
    return (size_t)((n + GPT2RT__CU_NORM_CHUNK - 1) / GPT2RT__CU_NORM_CHUNK) * sizeof(double);
}

/* parts[b] = sum of g[i]^2 over chunk b (fp64, products exact), block of 256 threads:
   each thread keeps VN running sums over its VN-groups, then the block sums in fixed order.
   g (n) fp32; VN = 4 needs g 16-byte aligned (chunks start at multiples of 65536). */
template <int VN>
__global__ void __launch_bounds__(256) gpt2rt__cuk_global_norm_parts(double *parts, const float *g, int64_t n) {
    __shared__ double sh[32];
    int64_t i0 = (int64_t)blockIdx.x * GPT2RT__CU_NORM_CHUNK;
    int64_t i1 = i0 + GPT2RT__CU_NORM_CHUNK < n ? i0 + GPT2RT__CU_NORM_CHUNK : n;
    int64_t iv = i0 + (i1 - i0) / VN * VN; /* end of the whole VN-groups */
    double acc[VN];
#pragma unroll
    for (int k = 0; k < VN; k++) acc[k] = 0.0;
    for (int64_t i = i0 + (int64_t)threadIdx.x * VN; i < iv; i += (int64_t)blockDim.x * VN) {
        float x[VN];
        gpt2rt__cu_ldv<VN>(x, g + i);
#pragma unroll
        for (int k = 0; k < VN; k++) acc[k] += (double)x[k] * (double)x[k];
    }
    for (int64_t i = iv + threadIdx.x; i < i1; i += blockDim.x) acc[0] += (double)g[i] * (double)g[i];
    double t = 0.0;
#pragma unroll
    for (int k = 0; k < VN; k++) t += acc[k];
    t = gpt2rt__cu_block_sum_d(t, sh);
    if (threadIdx.x == 0) parts[blockIdx.x] = t;
}

/* norm[0] = sqrt(the sum of parts (G)), sumsq[0] = the sum; fp64, either may be NULL.
   One block of 1024 threads: thread t sums parts t, t+1024, ... then the block sums. */
static __global__ void __launch_bounds__(1024) gpt2rt__cuk_global_norm_final(double *norm, double *sumsq,
                                                                             const double *parts, int64_t G) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < G; i += blockDim.x) acc += parts[i];
    acc = gpt2rt__cu_block_sum_d(acc, sh);
    if (threadIdx.x == 0) {
        if (norm) norm[0] = sqrt(acc);
        if (sumsq) sumsq[0] = acc;
    }
}

/* norm (1 double, device) = ||g||_2 over g (n) fp32 (n up to ~2^40); sumsq (1 double,
   device) = the sum of squares; either may be NULL. A non-finite norm means an inf/NaN
   gradient. Fixed chunks of 65536 summed in fp64 (squares exact), so the result is
   deterministic; it is not bitwise the CPU gpt2rt__opt_sumsq (same chunks, another order
   inside a chunk), the two agree to ~1e-15 relative.
   scratch: device, gpt2rt__cu_global_norm_scratch_bytes(n), 8-byte aligned. */
static inline cudaError_t gpt2rt__cu_global_norm(double *norm, double *sumsq, const float *g, int64_t n,
                                                 double *scratch, cudaStream_t stream) {
    int64_t G = (n + GPT2RT__CU_NORM_CHUNK - 1) / GPT2RT__CU_NORM_CHUNK;
    if (n > 0) {
        if (gpt2rt__cu_al16(g)) GPT2RT__LAUNCH((unsigned)G, 256, 0, stream, gpt2rt__cuk_global_norm_parts<4>)(scratch, g, n);
        else GPT2RT__LAUNCH((unsigned)G, 256, 0, stream, gpt2rt__cuk_global_norm_parts<1>)(scratch, g, n);
        GPT2RT__CU_LAUNCHED();
    }
    GPT2RT__LAUNCH(1, 1024, 0, stream, gpt2rt__cuk_global_norm_final)(norm, sumsq, scratch, n > 0 ? G : 0);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* flag[0] = 1 if any of x (n) is inf or NaN (otherwise untouched). Grid-stride over
   VN-groups; a block stores 1 once if any of its threads saw one. Plain stores of the same
   value: the result does not depend on timing. */
template <typename S, int VN>
__global__ void gpt2rt__cuk_nonfinite(int *flag, const S *x, int64_t n) {
    int bad = 0;
    int64_t nv = n / VN, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < nv; j += stride) {
        float v[VN];
        gpt2rt__cu_ldv<VN>(v, x + j * VN);
#pragma unroll
        for (int k = 0; k < VN; k++) bad |= !isfinite(v[k]);
    }
    for (int64_t i = nv * VN + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        bad |= !isfinite(gpt2rt__cu_f(x[i]));
    if (__syncthreads_or(bad) && threadIdx.x == 0) flag[0] = 1;
}

/* flag (1 int, device) = 1 if x (n) (fp32, bf16 or fp16) holds an inf or NaN.
   reset = 1: the flag is first set to 0 (stream-ordered memset); reset = 0: ORs into the
   flag, to check several buffers with one flag. No scratch. */
template <typename S>
static cudaError_t gpt2rt__cu_nonfinite(int *flag, const S *x, int64_t n, int reset, cudaStream_t stream) {
    constexpr int VN = (int)(16 / sizeof(S));
    if (reset) GPT2RT__CU_TRY(cudaMemsetAsync(flag, 0, sizeof(int), stream));
    if (n <= 0) return cudaSuccess;
    if (gpt2rt__cu_al16(x)) {
        int64_t b = (int64_t)gpt2rt__cu_blocks(n / VN + 1, 256);
        GPT2RT__LAUNCH((unsigned)(b < 4096 ? b : 4096), 256, 0, stream, gpt2rt__cuk_nonfinite<S, VN>)(flag, x, n);
    } else {
        int64_t b = (int64_t)gpt2rt__cu_blocks(n, 256);
        GPT2RT__LAUNCH((unsigned)(b < 4096 ? b : 4096), 256, 0, stream, gpt2rt__cuk_nonfinite<S, 1>)(flag, x, n);
    }
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- AdamW, all tensors in one launch ---- */

/* one row of the AdamW tensor table (the launcher reads it from device memory) */
typedef struct gpt2rt__cu_adamw_tensor {
    int64_t off;    /* element offset into the flat params / grads / m / v (and params_x) */
    int64_t n;      /* elements */
    int64_t block0; /* first block of the launch on this tensor: gpt2rt__cu_adamw_table fills it */
    int decay;      /* 1: decoupled weight decay applies (2-D weights) */
    int pad_;
} gpt2rt__cu_adamw_tensor;

#define GPT2RT__CU_ADAMW_CHUNK 4096 /* elements per block */

/* host: fills t[i].block0 (tensors in table order, each cut into chunks of 4096); returns
   the number of blocks of the launch. Upload the table afterwards. */
static inline int64_t gpt2rt__cu_adamw_table(gpt2rt__cu_adamw_tensor *t, int n_tensors) {
    int64_t b = 0;
    for (int i = 0; i < n_tensors; i++) {
        t[i].block0 = b;
        b += (t[i].n + GPT2RT__CU_ADAMW_CHUNK - 1) / GPT2RT__CU_ADAMW_CHUNK;
    }
    return b;
}

/* One element, the CPU gpt2rt__opt_adamw_scalar operation for operation, with explicitly
   rounded intrinsics so that nothing is contracted into an FMA: the same bits as the CPU
   when the CPU build does not contract either. */
__device__ __forceinline__ void gpt2rt__cu_adamw_one(float &p, float &g, float &m, float &v, float grad_scale,
                                                     float decay, float omb1, float b2, float omb2, float step_size,
                                                     float bc2_sqrt, float eps) {
    float gj = __fmul_rn(g, grad_scale);
    float pj = __fmul_rn(p, decay);
    float mj = __fadd_rn(m, __fmul_rn(omb1, __fsub_rn(gj, m)));
    float vj = __fadd_rn(__fmul_rn(v, b2), __fmul_rn(__fmul_rn(omb2, gj), gj));
    float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vj), bc2_sqrt), eps);
    p = __fsub_rn(pj, __fmul_rn(step_size, __fdiv_rn(mj, den)));
    g = 0.0f;
    m = mj;
    v = vj;
}

/* Block b finds its tensor (largest block0 <= b, binary search in the table (nt)) and
   updates its chunk: params, grads, m, v (flat, fp32); params_x (flat floatX) = the new
   params, unless NULL. VN = 4: 128-bit accesses when the tensor's offset is a multiple of 4
   (the arrays are 16-byte aligned), scalar otherwise. */
template <typename floatX, int VN>
__global__ void __launch_bounds__(256)
gpt2rt__cuk_adamw(float *params, floatX *params_x, float *grads, float *m, float *v,
                  const gpt2rt__cu_adamw_tensor *table, int nt, float grad_scale, float decay_on, float omb1,
                  float b2, float omb2, float step_size, float bc2_sqrt, float eps) {
    int64_t b = blockIdx.x;
    int lo = 0, hi = nt - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (table[mid].block0 <= b) lo = mid; else hi = mid - 1;
    }
    const gpt2rt__cu_adamw_tensor tn = table[lo];
    float decay = tn.decay ? decay_on : 1.0f;
    int64_t e0 = tn.off + (b - tn.block0) * GPT2RT__CU_ADAMW_CHUNK;
    int64_t e1 = e0 + GPT2RT__CU_ADAMW_CHUNK < tn.off + tn.n ? e0 + GPT2RT__CU_ADAMW_CHUNK : tn.off + tn.n;
    int64_t ev = e0;
    if (VN > 1 && tn.off % VN == 0) {
        ev = e0 + (e1 - e0) / VN * VN;
        for (int64_t e = e0 + (int64_t)threadIdx.x * VN; e < ev; e += (int64_t)blockDim.x * VN) {
            float pv[VN], gv[VN], mv[VN], vv[VN];
            gpt2rt__cu_ldv<VN>(pv, params + e);
            gpt2rt__cu_ldv<VN>(gv, grads + e);
            gpt2rt__cu_ldv<VN>(mv, m + e);
            gpt2rt__cu_ldv<VN>(vv, v + e);
#pragma unroll
            for (int k = 0; k < VN; k++)
                gpt2rt__cu_adamw_one(pv[k], gv[k], mv[k], vv[k], grad_scale, decay, omb1, b2, omb2, step_size,
                                     bc2_sqrt, eps);
            gpt2rt__cu_stv<VN>(params + e, pv);
            gpt2rt__cu_stv<VN>(grads + e, gv);
            gpt2rt__cu_stv<VN>(m + e, mv);
            gpt2rt__cu_stv<VN>(v + e, vv);
            if (params_x) gpt2rt__cu_stv<VN>(params_x + e, pv);
        }
    }
    for (int64_t e = ev + threadIdx.x; e < e1; e += blockDim.x) {
        float pe = params[e], ge = grads[e], me = m[e], ve = v[e];
        gpt2rt__cu_adamw_one(pe, ge, me, ve, grad_scale, decay, omb1, b2, omb2, step_size, bc2_sqrt, eps);
        params[e] = pe; grads[e] = ge; m[e] = me; v[e] = ve;
        if (params_x) params_x[e] = gpt2rt__cu_to<floatX>(pe);
    }
}

/* One AdamW step (torch.optim.AdamW; the CPU gpt2rt__opt_adamw) over every tensor of table
   (device, nt rows, block0 filled by gpt2rt__cu_adamw_table, which also gave n_blocks).
   params, grads, m, v: flat fp32 arrays; grads are read scaled by grad_scale (clip
   coefficient times the loss-scale unscale) and zeroed. params_x: flat floatX copy of the
   weights to refresh, or NULL (fp32 training: the master is the copy). t: 1-based step.
   step_size = lr/(1-b1^t), bc2_sqrt = sqrt(1-b2^t), decay = 1 - lr*wd, in double on the
   host exactly as the CPU does. No scratch. */
template <typename floatX>
static cudaError_t gpt2rt__cu_adamw(float *params, floatX *params_x, float *grads, float *m, float *v,
                                    const gpt2rt__cu_adamw_tensor *table, int nt, int64_t n_blocks, float lr,
                                    float beta1, float beta2, float eps, float weight_decay, int64_t t,
                                    float grad_scale, cudaStream_t stream) {
    if (nt <= 0 || n_blocks <= 0) return cudaSuccess;
    float step_size = (float)(lr / (1.0 - pow(beta1, (double)t)));
    float bc2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)t));
    float decay_on = (float)(1.0 - (double)lr * weight_decay);
    int fast = gpt2rt__cu_al16(params) && gpt2rt__cu_al16(grads) && gpt2rt__cu_al16(m) && gpt2rt__cu_al16(v) &&
               (!params_x || gpt2rt__cu_al16(params_x));
    if (fast)
        GPT2RT__LAUNCH((unsigned)n_blocks, 256, 0, stream, gpt2rt__cuk_adamw<floatX, 4>)(
            params, params_x, grads, m, v, table, nt, grad_scale, decay_on, 1.0f - beta1, beta2, 1.0f - beta2,
            step_size, bc2_sqrt, eps);
    else
        GPT2RT__LAUNCH((unsigned)n_blocks, 256, 0, stream, gpt2rt__cuk_adamw<floatX, 1>)(
            params, params_x, grads, m, v, table, nt, grad_scale, decay_on, 1.0f - beta1, beta2, 1.0f - beta2,
            step_size, bc2_sqrt, eps);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- dropout ----
   7.1's inverted dropout with 7.1's mask: element i of a site is kept when the hash
   gpt2rt__drop_factor draws (the same host-and-device function), so a mask on the
   device is bit for bit the CPU's, and the backward and the recompute draw it again. */

/* out (n) = in (n) * mask / (1-p) (out may alias in); its own backward. One thread per
   element; in fp32 the CPU's bits (one product per element). */
template <typename floatX>
__global__ void gpt2rt__cuk_dropout(floatX *out, const floatX *in, gpt2rt__drop dr, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = gpt2rt__cu_to<floatX>(gpt2rt__cu_f(in[i]) * gpt2rt__drop_factor(&dr, i));
}

/* a site's mask (dr->on = 0: nothing to do) */
template <typename floatX>
static cudaError_t gpt2rt__cu_dropout(floatX *out, const floatX *in, const gpt2rt__drop *dr, int64_t n,
                                      cudaStream_t stream) {
    if (n <= 0 || !dr->on) return cudaSuccess;
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_dropout<floatX>)(out, in, *dr, n);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

#endif /* GPT2RT__SRC_CUDA_OPS_CUH */
