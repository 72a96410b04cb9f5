/* inputs/patches.h - 6. Inputs; 6.1 Tokens; 6.2 Patches
   may call: common/threads.h, common/types.h, common/errors.h, plan/activations.h */
#ifndef GPT2RT__SRC_INPUTS_PATCHES_H
#define GPT2RT__SRC_INPUTS_PATCHES_H
#include "../common/threads.h"
#include "../common/types.h"
#include "../common/errors.h"
#include "../plan/activations.h"

/* ==== 6. Inputs ==== */

/* ==== 6.1 Tokens ==== */

/* inputs (B,T) must lie in [0, vocab_size); targets (B,T), when given, below
   vocab_size (negative: ignored). The message names the first bad one. */
static gpt2rt_result gpt2rt__input_tokens_check(gpt2rt_ctx *ctx, const char *fn, const int32_t *inputs,
                                                const int32_t *targets) {
    const gpt2rt__dims *d = &ctx->d;
    for (int64_t i = 0; i < d->BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= d->V)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT,
                                "%s: inputs[%lld] (batch %lld, position %lld) = %d is outside the "
                                "vocabulary [0, %lld)", fn, (long long)i, (long long)(i / d->T), (long long)(i % d->T),
                                inputs[i], (long long)d->V);
        if (targets && targets[i] >= d->V)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT,
                                "%s: targets[%lld] (batch %lld, position %lld) = %d is outside the "
                                "vocabulary [0, %lld) (negative targets are ignored)", fn, (long long)i,
                                (long long)(i / d->T), (long long)(i % d->T), targets[i], (long long)d->V);
    }
    return GPT2RT_OK;
}

/* ==== 6.2 Patches ==== */

/* Continuous series cut into patches (GPT4TS): a window x (Bw,L,M) is M series, each
   instance-normalised over its lookback (RevIN), padded with stride copies of its
   last value and cut into T = n_patches patches; the predictions (B*M,H) of the
   regression head come back to (Bw,H,M) in the original scale; the loss is their
   mean squared error. Series bm = b*M + m is row bm of the transformer's batch. */

/* x (Bw,L,M) and y (Bw,H,M) (may be NULL) must be finite; the message names the first
   bad value by window, step and channel */
static gpt2rt_result gpt2rt__ts_check(gpt2rt_ctx *ctx, const char *fn, const float *x, const float *y) {
    const gpt2rt__dims *d = &ctx->d;
    for (int k = 0; k < 2; k++) {
        const float *v = k ? y : x;
        int64_t steps = k ? d->H : d->lookback, n = d->Bw * steps * d->M;
        for (int64_t i = 0; v && i < n; i++)
            if (!isfinite(v[i]))
                return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: %s[%lld] (window %lld, step %lld, channel "
                                    "%lld) is %g; series values must be finite", fn, k ? "y" : "x", (long long)i,
                                    (long long)(i / (steps * d->M)), (long long)(i / d->M % steps),
                                    (long long)(i % d->M), (double)v[i]);
    }
    return GPT2RT_OK;
}

/* patch (B*M*T, PL), mean (B*M), std (B*M) from x (Bw,L,M): RevIN as GPT4TS computes
   it (mean; std = sqrt(biased variance + 1e-5); z = (x - mean) / std in fp32; with
   the affine w (M), b (M): z * w[m] + b[m], and z kept in zs), then patch p of series
   bm holds its normalised steps p*PS .. p*PS+PL-1, steps past the end repeating step
   L-1. Statistics are summed in double in step order. */
/* PATCH_DECODE: the history's patches, then the placeholders (gpt2rt__ts_hist) */
static int64_t gpt2rt__ts_hist(const gpt2rt__dims *d) {
    return d->seqhead == GPT2RT_HEAD_PATCH_DECODE ? d->T - (d->H + d->patch_len - 1) / d->patch_len : d->T;
}

static void gpt2rt__ts_revin_patch(float *patch, float *zs, float *mean, float *std, const float *x, const float *w,
                                   const float *b, const gpt2rt__dims *d) {
    int64_t L = d->lookback, M = d->M, T = d->T, PL = d->patch_len, PS = d->patch_stride, TH = gpt2rt__ts_hist(d);
    GPT2RT__PARALLEL_FOR(gpt2rt__threads_for(d->n_threads, GPT2RT__CPU_W_MATH * (double)(d->B * (L + TH * PL))))
    for (int64_t bm = 0; bm < d->B; bm++) {
        const float *xs = x + (bm / M) * L * M + bm % M; /* step t at xs[t*M] */
        double s = 0.0, ss = 0.0;
        for (int64_t t = 0; t < L; t++) s += xs[t * M];
        float mu = (float)(s / (double)L);
        for (int64_t t = 0; t < L; t++) { double c = (double)(xs[t * M] - mu); ss += c * c; }
        float sd = (float)sqrt(ss / (double)L + 1e-5);
        mean[bm] = mu;
        std[bm] = sd;
        for (int64_t p = 0; p < TH; p++)
            for (int64_t k = 0; k < PL; k++) {
                int64_t t = p * PS + k < L ? p * PS + k : L - 1, i = (bm * T + p) * PL + k;
                float z = (xs[t * M] - mu) / sd;
                patch[i] = w ? z * w[bm % M] + b[bm % M] : z;
                if (zs) zs[i] = z;
            }
        /* PATCH_DECODE's placeholders: a zero patch, the series' mean in RevIN's scale,
           in training and at test time alike (aLLM4TS's training embeds the true future,
           which a forecast cannot have); in_layer makes it in_layer.bias, and wpe tells
           the placeholders apart */
        for (int64_t i = (bm * T + TH) * PL; i < (bm + 1) * T * PL; i++) {
            patch[i] = 0.0f;
            if (zs) zs[i] = 0.0f;
        }
    }
}

/* RevIN's affine undone as PatchTST does: (yn - b) / (w + 1e-10) */
#define GPT2RT__TS_AFFINE_EPS 1e-10f

/* pred (Bw,H,M) = yn (B*M,H) * std + mean: the original scale (affine w, b: undone first) */
static void gpt2rt__ts_denorm(float *pred, const float *yn, const float *mean, const float *std, const float *w,
                              const float *b, const gpt2rt__dims *d) {
    int64_t M = d->M, H = d->H;
    for (int64_t bm = 0; bm < d->B; bm++)
        for (int64_t h = 0; h < H; h++) {
            float u = yn[bm * H + h];
            if (w) u = (u - b[bm % M]) / (w[bm % M] + GPT2RT__TS_AFFINE_EPS);
            pred[((bm / M) * H + h) * M + bm % M] = u * std[bm] + mean[bm];
        }
}

/* sum of squared errors of pred against y, both (Bw,H,M), in double in order */
static double gpt2rt__ts_mse_sum(const float *pred, const float *y, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) { double e = (double)pred[i] - (double)y[i]; s += e * e; }
    return s;
}

/* dyn (B*M,H) = d(dloss * sum of squared errors) / d(yn), in place over yn: through
   the de-normalisation; with the affine w, b also dw, db (M) += (NULL: frozen), summed
   per channel in double in (window, step) order */
static void gpt2rt__ts_mse_backward(float *dyn, const float *pred, const float *y, const float *std, const float *w,
                                    const float *b, float *dw, float *db, float dloss, const gpt2rt__dims *d) {
    int64_t M = d->M, H = d->H;
    for (int64_t m = 0; m < M; m++) {
        double sw = 0.0, sb = 0.0;
        for (int64_t bw = 0; bw < d->Bw; bw++)
            for (int64_t h = 0; h < H; h++) {
                int64_t bm = bw * M + m, i = (bw * H + h) * M + m;
                float du = 2.0f * (pred[i] - y[i]) * dloss * std[bm];
                if (!w) { dyn[bm * H + h] = du; continue; }
                float inv = 1.0f / (w[m] + GPT2RT__TS_AFFINE_EPS), u = (dyn[bm * H + h] - b[m]) * inv;
                dyn[bm * H + h] = du * inv;
                sw -= (double)du * inv * u; /* d/dw of (yn - b) / (w + eps) = -u / (w + eps) */
                sb -= (double)du * inv;
            }
        if (dw) { dw[m] += (float)sw; db[m] += (float)sb; }
    }
}

/* the affine's input side: dw, db (M) += from dpatch (BT,PL), the gradient of
   z * w + b, with zs (BT,PL) the patches' z; each patch element counts once, padded
   copies included (the chain rule through the padding); summed per channel in
   double in order */
static void gpt2rt__ts_affine_backward(float *dw, float *db, const float *dpatch, const float *zs, const gpt2rt__dims *d) {
    int64_t M = d->M, n = gpt2rt__ts_hist(d) * d->patch_len, ld = d->T * d->patch_len; /* placeholders: no affine */
    for (int64_t m = 0; m < M; m++) {
        double sw = 0.0, sb = 0.0;
        for (int64_t bw = 0; bw < d->Bw; bw++) {
            const float *dp = dpatch + (bw * M + m) * ld, *z = zs + (bw * M + m) * ld;
            for (int64_t i = 0; i < n; i++) { sw += (double)dp[i] * z[i]; sb += dp[i]; }
        }
        dw[m] += (float)sw;
        db[m] += (float)sb;
    }
}

/* ---- aLLM4TS's sequence head (head = NEXT_PATCH, PATCH_DECODE) ----
   out (BT,PL): out_layer at every position. NEXT_PATCH compares position t's output
   with patch t+1 of the same series (t < T-1) in RevIN's scale; PATCH_DECODE reads the
   placeholders' outputs as the normalised forecast yn (B*M,H): placeholder f gives
   steps f*PL .. f*PL+PL-1, the last one cut at H; from there on it is the regression
   head's loss. */

/* the normalised predictions (B*M,H) in the logits arena (gpt2rt__ts_yn_off) */
static float *gpt2rt__ts_yn(const gpt2rt_ctx *ctx) {
    return (float *)(void *)((unsigned char *)ctx->logits + gpt2rt__ts_yn_off(&ctx->d));
}

/* yn (B*M,H) = the placeholders' rows of out (BT,PL) */
static void gpt2rt__ts_decode_gather(float *yn, const float *out, const gpt2rt__dims *d) {
    int64_t T = d->T, PL = d->patch_len, H = d->H, TH = gpt2rt__ts_hist(d);
    for (int64_t bm = 0; bm < d->B; bm++)
        for (int64_t h = 0; h < H; h++) yn[bm * H + h] = out[(bm * T + TH + h / PL) * PL + h % PL];
}

/* dout (BT,PL) = dyn (B*M,H) at the placeholders' rows, 0 elsewhere (the history's
   outputs and the cut tail of the last placeholder feed no loss) */
static void gpt2rt__ts_decode_scatter(float *dout, const float *dyn, const gpt2rt__dims *d) {
    int64_t T = d->T, PL = d->patch_len, H = d->H, TH = gpt2rt__ts_hist(d);
    memset(dout, 0, (size_t)(d->BT * PL) * sizeof(float));
    for (int64_t bm = 0; bm < d->B; bm++)
        for (int64_t h = 0; h < H; h++) dout[(bm * T + TH + h / PL) * PL + h % PL] = dyn[bm * H + h];
}

/* NEXT_PATCH: sum over series bm, t < T-1, k < PL of (out[bm,t,k] - patch[bm,t+1,k])^2,
   in double in that order */
static double gpt2rt__ts_next_sum(const float *out, const float *patch, const gpt2rt__dims *d) {
    int64_t T = d->T, PL = d->patch_len;
    double s = 0.0;
    for (int64_t bm = 0; bm < d->B; bm++)
        for (int64_t i = bm * T * PL; i < ((bm + 1) * T - 1) * PL; i++) {
            double e = (double)out[i] - (double)patch[i + PL];
            s += e * e;
        }
    return s;
}

/* NEXT_PATCH: dout (BT,PL) = d(dloss * gpt2rt__ts_next_sum) / d(out), in place over out;
   the last position of each series predicts nothing (0) */
static void gpt2rt__ts_next_backward(float *out, const float *patch, float dloss, const gpt2rt__dims *d) {
    int64_t T = d->T, PL = d->patch_len;
    for (int64_t bm = 0; bm < d->B; bm++) {
        float *o = out + bm * T * PL;
        const float *pt = patch + bm * T * PL;
        for (int64_t i = 0; i < (T - 1) * PL; i++) o[i] = 2.0f * (o[i] - pt[i + PL]) * dloss;
        for (int64_t i = (T - 1) * PL; i < T * PL; i++) o[i] = 0.0f;
    }
}

#endif /* GPT2RT__SRC_INPUTS_PATCHES_H */
