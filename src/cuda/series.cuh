/* cuda/series.cuh - 8.2 Ops: time series (RevIN, patches, head output, MSE gradient), aLLM4TS's sequence head
   may call: cuda/ops.cuh and what it includes */
#ifndef GPT2RT__SRC_CUDA_SERIES_CUH
#define GPT2RT__SRC_CUDA_SERIES_CUH
#include "ops.cuh"

/* ---- time series: 6.2's RevIN, patches, head output and MSE gradient ----
   Series bm = b*M + m of the windows x (Bw,L,M) is row bm of the transformer's batch
   (B = Bw*M series of T = n_patches tokens). The statistics, patches and predictions
   are the CPU's bits in fp32: the same sums in double in the same order, IEEE division
   and square root, explicitly rounded products where the compiler could contract an
   FMA. The affine's gradients sum over the batch in a fixed tree (one block per
   channel), within rounding of the CPU's sequential sums and the same on every run. */

#define GPT2RT__CU_TS_THREADS 256 /* the per-channel reductions' block */

/* mean (B), std (B) of each series of x (Bw,L,M): gpt2rt__ts_revin_patch's statistics,
   one thread per series */
__global__ void gpt2rt__cuk_ts_stats(float *mean, float *std, const float *x, int64_t B, int64_t L, int64_t M) {
    int64_t bm = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (bm >= B) return;
    const float *xs = x + (bm / M) * L * M + bm % M; /* step t at xs[t*M] */
    double s = 0.0, ss = 0.0;
    for (int64_t t = 0; t < L; t++) s = __dadd_rn(s, (double)xs[t * M]);
    float mu = (float)(s / (double)L);
    for (int64_t t = 0; t < L; t++) {
        double c = (double)(xs[t * M] - mu);
        ss = __dadd_rn(ss, __dmul_rn(c, c));
    }
    mean[bm] = mu;
    std[bm] = (float)sqrt(ss / (double)L + 1e-5);
}

/* patch (B*T,PL) floatX, zs (B*T,PL) fp32 (NULL: no affine): element k of patch p of
   series bm is step p*PS + k (past the end: step L-1), z = (x - mean) / std, then
   z * w[m] + b[m] with the affine (w, b (M); NULL: none); PATCH_DECODE's placeholders
   (p >= TH, gpt2rt__ts_hist) are 0 in both. One thread per element. */
template <typename floatX>
__global__ void gpt2rt__cuk_ts_patch(floatX *patch, float *zs, const float *x, const float *mean, const float *std,
                                     const floatX *w, const floatX *b, int64_t B, int64_t L, int64_t M, int64_t T,
                                     int64_t PL, int64_t PS, int64_t TH) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * T * PL) return;
    int64_t k = i % PL, p = i / PL % T, bm = i / (PL * T), m = bm % M;
    if (p >= TH) {
        patch[i] = gpt2rt__cu_to<floatX>(0.0f);
        if (zs) zs[i] = 0.0f;
        return;
    }
    int64_t t = p * PS + k < L ? p * PS + k : L - 1;
    float z = (x[(bm / M) * L * M + t * M + m] - mean[bm]) / std[bm];
    patch[i] = gpt2rt__cu_to<floatX>(w ? __fadd_rn(__fmul_rn(z, gpt2rt__cu_f(w[m])), gpt2rt__cu_f(b[m])) : z);
    if (zs) zs[i] = z;
}

/* RevIN and patching (gpt2rt__ts_revin_patch): mean, std (B) and the patches (with the
   affine: zs the patches before it) from the windows x (Bw,L,M) on the device */
template <typename floatX>
static cudaError_t gpt2rt__cu_ts_revin_patch(floatX *patch, float *zs, float *mean, float *std, const float *x,
                                             const floatX *w, const floatX *b, const gpt2rt__dims *d,
                                             cudaStream_t stream) {
    int64_t n = d->B * d->T * d->patch_len;
    if (n <= 0) return cudaSuccess;
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(d->B, 128), 128, 0, stream, gpt2rt__cuk_ts_stats)(mean, std, x, d->B, d->lookback, d->M);
    GPT2RT__CU_LAUNCHED();
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_ts_patch<floatX>)(patch, zs, x, mean, std, w, b, d->B,
                                                                               d->lookback, d->M, d->T, d->patch_len, d->patch_stride,
                                                                               gpt2rt__ts_hist(d));
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* x (BT,C) += wpe[t] (T rows of (P,C)): in_layer's output plus the position, as the CPU
   adds it after the product */
template <typename floatX>
__global__ void gpt2rt__cuk_add_pos(floatX *x, const floatX *wpe, int64_t BT, int64_t T, int64_t C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= BT * C) return;
    x[i] = gpt2rt__cu_to<floatX>(gpt2rt__cu_f(x[i]) + gpt2rt__cu_f(wpe[(i / C % T) * C + i % C]));
}

template <typename floatX>
static cudaError_t gpt2rt__cu_add_pos(floatX *x, const floatX *wpe, int64_t BT, int64_t T, int64_t C,
                                      cudaStream_t stream) {
    if (BT * C <= 0) return cudaSuccess;
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(BT * C, 256), 256, 0, stream, gpt2rt__cuk_add_pos<floatX>)(x, wpe, BT, T, C);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* pred (Bw,H,M) fp32 = yn (B,H) in the original scale (gpt2rt__ts_denorm): the affine
   (w, b; NULL: none) undone as PatchTST does, then * std + mean. One thread per value. */
template <typename floatX>
__global__ void gpt2rt__cuk_ts_denorm(float *pred, const floatX *yn, const float *mean, const float *std,
                                      const floatX *w, const floatX *b, int64_t B, int64_t H, int64_t M) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * H) return;
    int64_t bm = i / H, h = i % H, m = bm % M;
    float u = gpt2rt__cu_f(yn[i]);
    if (w) u = (u - gpt2rt__cu_f(b[m])) / (gpt2rt__cu_f(w[m]) + GPT2RT__TS_AFFINE_EPS);
    pred[((bm / M) * H + h) * M + m] = __fadd_rn(__fmul_rn(u, std[bm]), mean[bm]);
}

template <typename floatX>
static cudaError_t gpt2rt__cu_ts_denorm(float *pred, const floatX *yn, const float *mean, const float *std,
                                        const floatX *w, const floatX *b, const gpt2rt__dims *d, cudaStream_t stream) {
    if (d->B * d->H <= 0) return cudaSuccess;
    GPT2RT__LAUNCH(gpt2rt__cu_blocks(d->B * d->H, 256), 256, 0, stream, gpt2rt__cuk_ts_denorm<floatX>)(pred, yn, mean, std, w, b,
                                                                                        d->B, d->H, d->M);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* dyn (B,H) floatX, in place over yn: d(dloss * sum of squared errors of pred against y,
   both (Bw,H,M)) / d(yn) through the de-normalisation (gpt2rt__ts_mse_backward); with
   the affine (w, b) also dw, db (M) fp32 += (NULL: frozen). One block per channel m, its
   (window, step) pairs strided over the threads. */
template <typename floatX>
__global__ void __launch_bounds__(GPT2RT__CU_TS_THREADS)
gpt2rt__cuk_ts_mse_backward(floatX *dyn, const float *pred, const float *y, const float *std, const floatX *w,
                            const floatX *b, float *dw, float *db, float dloss, int64_t Bw, int64_t H, int64_t M) {
    __shared__ double sh[32];
    int64_t m = blockIdx.x;
    double sw = 0.0, sb = 0.0;
    float inv = w ? 1.0f / (gpt2rt__cu_f(w[m]) + GPT2RT__TS_AFFINE_EPS) : 1.0f;
    for (int64_t j = threadIdx.x; j < Bw * H; j += blockDim.x) {
        int64_t bw = j / H, h = j % H, bm = bw * M + m, i = (bw * H + h) * M + m;
        float du = 2.0f * (pred[i] - y[i]) * dloss * std[bm];
        if (!w) { dyn[bm * H + h] = gpt2rt__cu_to<floatX>(du); continue; }
        float u = (gpt2rt__cu_f(dyn[bm * H + h]) - gpt2rt__cu_f(b[m])) * inv;
        dyn[bm * H + h] = gpt2rt__cu_to<floatX>(du * inv);
        sw -= (double)du * inv * u; /* d/dw of (yn - b) / (w + eps) = -u / (w + eps) */
        sb -= (double)du * inv;
    }
    if (!w || !dw) return; /* the same for the whole block */
    sw = gpt2rt__cu_block_sum_d(sw, sh);
    sb = gpt2rt__cu_block_sum_d(sb, sh);
    if (threadIdx.x == 0) { dw[m] += (float)sw; db[m] += (float)sb; }
}

template <typename floatX>
static cudaError_t gpt2rt__cu_ts_mse_backward(floatX *dyn, const float *pred, const float *y, const float *std,
                                              const floatX *w, const floatX *b, float *dw, float *db, float dloss,
                                              const gpt2rt__dims *d, cudaStream_t stream) {
    if (d->B * d->H <= 0) return cudaSuccess;
    GPT2RT__LAUNCH((unsigned)d->M, GPT2RT__CU_TS_THREADS, 0, stream, gpt2rt__cuk_ts_mse_backward<floatX>)(
        dyn, pred, y, std, w, b, dw, db, dloss, d->Bw, d->H, d->M);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* dw, db (M) fp32 += the affine's input side (gpt2rt__ts_affine_backward): over the
   patch elements of channel m (padded copies included), dpatch * z and dpatch, with
   dpatch (B*T*PL) floatX the patches' gradient and zs (B*T*PL) the patches before the
   affine; the first n = TH*PL of each series' ld = T*PL (placeholders: no affine). One
   block per channel. */
template <typename floatX>
__global__ void __launch_bounds__(GPT2RT__CU_TS_THREADS)
gpt2rt__cuk_ts_affine_backward(float *dw, float *db, const floatX *dpatch, const float *zs, int64_t Bw, int64_t M,
                               int64_t n, int64_t ld) {
    __shared__ double sh[32];
    int64_t m = blockIdx.x;
    double sw = 0.0, sb = 0.0;
    for (int64_t j = threadIdx.x; j < Bw * n; j += blockDim.x) {
        int64_t i = ((j / n) * M + m) * ld + j % n;
        double g = (double)gpt2rt__cu_f(dpatch[i]);
        sw += g * (double)zs[i];
        sb += g;
    }
    sw = gpt2rt__cu_block_sum_d(sw, sh);
    sb = gpt2rt__cu_block_sum_d(sb, sh);
    if (threadIdx.x == 0) { dw[m] += (float)sw; db[m] += (float)sb; }
}

template <typename floatX>
static cudaError_t gpt2rt__cu_ts_affine_backward(float *dw, float *db, const floatX *dpatch, const float *zs,
                                                 const gpt2rt__dims *d, cudaStream_t stream) {
    if (d->B * d->T * d->patch_len <= 0) return cudaSuccess;
    GPT2RT__LAUNCH((unsigned)d->M, GPT2RT__CU_TS_THREADS, 0, stream, gpt2rt__cuk_ts_affine_backward<floatX>)(
        dw, db, dpatch, zs, d->Bw, d->M, gpt2rt__ts_hist(d) * d->patch_len, d->T * d->patch_len);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* ---- aLLM4TS's sequence head (6.2: head = NEXT_PATCH, PATCH_DECODE) on the device ----
   out (BT,PL) floatX: out_layer at every position, in the logits arena; yn (B,H) floatX
   after it (gpt2rt__ts_yn_off). One thread per element, except the loss's sums. */

/* PATCH_DECODE: yn (B,H) = the placeholders' rows of out (gpt2rt__ts_decode_gather) */
template <typename floatX>
__global__ void gpt2rt__cuk_ts_decode_gather(floatX *yn, const floatX *out, int64_t B, int64_t T, int64_t PL,
                                             int64_t H, int64_t TH) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * H) return;
    int64_t bm = i / H, h = i % H;
    yn[i] = out[(bm * T + TH + h / PL) * PL + h % PL];
}

/* PATCH_DECODE: dout (BT,PL) = dyn (B,H) at the placeholders' rows, 0 elsewhere
   (gpt2rt__ts_decode_scatter); dout and dyn do not overlap */
template <typename floatX>
__global__ void gpt2rt__cuk_ts_decode_scatter(floatX *dout, const floatX *dyn, int64_t B, int64_t T, int64_t PL,
                                              int64_t H, int64_t TH) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * T * PL) return;
    int64_t bm = i / (T * PL), h = (i / PL % T - TH) * PL + i % PL;
    dout[i] = h >= 0 && h < H ? dyn[bm * H + h] : gpt2rt__cu_to<floatX>(0.0f);
}

template <typename floatX>
static cudaError_t gpt2rt__cu_ts_decode(floatX *yn, floatX *out, int scatter, const gpt2rt__dims *d,
                                        cudaStream_t stream) {
    int64_t n = scatter ? d->BT * d->patch_len : d->B * d->H, TH = gpt2rt__ts_hist(d);
    if (n <= 0) return cudaSuccess;
    if (scatter)
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_ts_decode_scatter<floatX>)(out, yn, d->B, d->T,
                                                                                          d->patch_len, d->H, TH);
    else
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(n, 256), 256, 0, stream, gpt2rt__cuk_ts_decode_gather<floatX>)(yn, out, d->B, d->T,
                                                                                         d->patch_len, d->H, TH);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

/* NEXT_PATCH: part (B) fp64 = each series' sum over t < T-1, k < PL of (out[bm,t,k] -
   patch[bm,t+1,k])^2, in double in that order (gpt2rt__ts_next_sum's terms; the host adds
   the B partial sums in series order). One thread per series. */
template <typename floatX>
__global__ void gpt2rt__cuk_ts_next_sum(double *part, const floatX *out, const floatX *patch, int64_t B, int64_t T,
                                        int64_t PL) {
    int64_t bm = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (bm >= B) return;
    double s = 0.0;
    for (int64_t i = bm * T * PL; i < ((bm + 1) * T - 1) * PL; i++) {
        double e = (double)gpt2rt__cu_f(out[i]) - (double)gpt2rt__cu_f(patch[i + PL]);
        s = __dadd_rn(s, __dmul_rn(e, e));
    }
    part[bm] = s;
}

/* NEXT_PATCH: dout (BT,PL) = 2 (out - the next patch) dloss, in place over out; a series'
   last position 0 (gpt2rt__ts_next_backward, the same fp32 operations) */
template <typename floatX>
__global__ void gpt2rt__cuk_ts_next_backward(floatX *out, const floatX *patch, float dloss, int64_t B, int64_t T,
                                             int64_t PL) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * T * PL) return;
    float g = 0.0f;
    if (i / PL % T < T - 1)
        g = __fmul_rn(__fmul_rn(2.0f, __fsub_rn(gpt2rt__cu_f(out[i]), gpt2rt__cu_f(patch[i + PL]))), dloss);
    out[i] = gpt2rt__cu_to<floatX>(g);
}

/* part != NULL: the loss's partial sums; else the gradient in place over out */
template <typename floatX>
static cudaError_t gpt2rt__cu_ts_next(double *part, floatX *out, const floatX *patch, float dloss,
                                      const gpt2rt__dims *d, cudaStream_t stream) {
    if (d->BT * d->patch_len <= 0) return cudaSuccess;
    if (part)
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(d->B, 128), 128, 0, stream, gpt2rt__cuk_ts_next_sum<floatX>)(part, out, patch, d->B,
                                                                                       d->T, d->patch_len);
    else
        GPT2RT__LAUNCH(gpt2rt__cu_blocks(d->BT * d->patch_len, 256), 256, 0, stream, gpt2rt__cuk_ts_next_backward<floatX>)(
            out, patch, dloss, d->B, d->T, d->patch_len);
    GPT2RT__CU_LAUNCHED();
    return cudaSuccess;
}

#endif /* GPT2RT__SRC_CUDA_SERIES_CUH */
