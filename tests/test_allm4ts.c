/* aLLM4TS as configuration: the sequence head (out_layer: width -> patch_len
   at every position), stage 1 (head = NEXT_PATCH: causal next-patch MSE) and stage 2
   (head = PATCH_DECODE with attn_mask = PLACEHOLDERS). Checked here:
   1. the masked attention op against a double-precision reference we wrote from the
      definition, its gradient against central finite differences of that reference
      (tiled path), the untiled path against the reference's analytic gradient;
   2. the mask's exact property, in the op and in the whole model: a placeholder's
      input changes no other placeholder's output (bitwise), a later history patch no
      earlier output;
   3. stage 1's loss is the next-patch MSE computed here from the model's outputs and
      our own RevIN; stage 2's loss the MSE of the placeholders' de-normalised outputs;
   4. finite differences through the whole tiny model for both stages (out_layer,
      in_layer, wpe, c_attn through the mask);
   5. the plan equals what a context allocates, and the parameter count;
   6. a stage-1 model saved and loaded into stage 2, tensor by tensor bitwise;
   7. the config's refusals;
   8. data parallel (2 and 3 CPU ranks) against one device of the same total batch, both
      stages, with accumulation and dropout: the loss, the gradients, the update's norm and
      the weights after steps within fp32 reassociation (derived below); ZeRO-1 and a second
      run bitwise; the plan equal to what each rank allocated.
   9. (built with mpicc -DGPT2RT_MPI, run as `mpirun -np N test_allm4ts mpi`) both stages'
      heads over N processes (world_size N, one rank each): every step's loss and gradient
      norm and every weight after 3 steps bitwise equal to N ranks in one process (both
      sum the ranks' gradients in rank order, so nothing may differ). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"
#include <stdlib.h>
#include <unistd.h>

static uint64_t rng = 12345;
static float urand(void) { return (float)(2.0 * harness_rng_uniform(&rng) - 1.0); }

/* ---- 1. a double reference of masked attention, written from the definition ---- */
/* the probabilities' dropout the op under test draws (NULL: none); the reference multiplies
   probability (b,h,t,s) by the same factor, 0 or 1/(1-p), after the softmax */
static const gpt2rt__drop *ref_dr;
static double ref_f(int64_t b, int64_t h, int64_t NH, int64_t T, int64_t t, int64_t s) {
    return ref_dr ? gpt2rt__drop_factor(ref_dr, ((b * NH + h) * T + t) * T + s) : 1.0;
}

/* query t sees key s when s <= t and (t < TH or s < TH or s == t) */
static int visible(int64_t t, int64_t s, int64_t TH) { return s <= t && (t < TH || s < TH || s == t); }

static void ref_attention(double *out, const double *qkv, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t TH) {
    int64_t HS = C / NH, C3 = 3 * C;
    double sc[64];
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t t = 0; t < T; t++) {
                const double *q = qkv + (b * T + t) * C3 + h * HS;
                double mx = -1e300, sum = 0;
                for (int64_t s = 0; s < T; s++) {
                    if (!visible(t, s, TH)) continue;
                    const double *k = qkv + (b * T + s) * C3 + C + h * HS;
                    double a = 0;
                    for (int64_t i = 0; i < HS; i++) a += q[i] * k[i];
                    sc[s] = a / sqrt((double)HS);
                    if (sc[s] > mx) mx = sc[s];
                }
                for (int64_t s = 0; s < T; s++) if (visible(t, s, TH)) { sc[s] = exp(sc[s] - mx); sum += sc[s]; }
                double *y = out + (b * T + t) * C + h * HS;
                for (int64_t i = 0; i < HS; i++) y[i] = 0;
                for (int64_t s = 0; s < T; s++) {
                    if (!visible(t, s, TH)) continue;
                    const double *v = qkv + (b * T + s) * C3 + 2 * C + h * HS;
                    for (int64_t i = 0; i < HS; i++) y[i] += sc[s] / sum * ref_f(b, h, NH, T, t, s) * v[i];
                }
            }
}

/* the reference's analytic gradient dqkv of sum(out * dout) */
static void ref_attention_backward(double *dqkv, const double *dout, const double *qkv, int64_t B, int64_t T, int64_t C,
                                   int64_t NH, int64_t TH) {
    int64_t HS = C / NH, C3 = 3 * C;
    double p[64], dp[64];
    memset(dqkv, 0, sizeof(double) * (size_t)(B * T * C3));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t t = 0; t < T; t++) {
                const double *q = qkv + (b * T + t) * C3 + h * HS, *dy = dout + (b * T + t) * C + h * HS;
                double mx = -1e300, sum = 0, dsum = 0, sc = 1.0 / sqrt((double)HS);
                for (int64_t s = 0; s < T; s++) {
                    if (!visible(t, s, TH)) continue;
                    const double *k = qkv + (b * T + s) * C3 + C + h * HS;
                    double a = 0;
                    for (int64_t i = 0; i < HS; i++) a += q[i] * k[i];
                    p[s] = a * sc;
                    if (p[s] > mx) mx = p[s];
                }
                for (int64_t s = 0; s < T; s++) if (visible(t, s, TH)) { p[s] = exp(p[s] - mx); sum += p[s]; }
                for (int64_t s = 0; s < T; s++) {
                    if (!visible(t, s, TH)) continue;
                    const double *v = qkv + (b * T + s) * C3 + 2 * C + h * HS;
                    p[s] /= sum;
                    dp[s] = 0;
                    for (int64_t i = 0; i < HS; i++) dp[s] += dy[i] * v[i];
                    dp[s] *= ref_f(b, h, NH, T, t, s); /* y = sum p f v: dP = f (dy . v) */
                    dsum += p[s] * dp[s];
                }
                for (int64_t s = 0; s < T; s++) {
                    if (!visible(t, s, TH)) continue;
                    double g = p[s] * (dp[s] - dsum) * sc;
                    const double *k = qkv + (b * T + s) * C3 + C + h * HS;
                    double *dq = dqkv + (b * T + t) * C3 + h * HS, *dk = dqkv + (b * T + s) * C3 + C + h * HS;
                    for (int64_t i = 0; i < HS; i++) {
                        dq[i] += g * k[i];
                        dk[i] += g * q[i];
                        dk[C + i] += p[s] * ref_f(b, h, NH, T, t, s) * dy[i]; /* dv */
                    }
                }
            }
}

static double ref_loss(const double *qkv, const double *dout, double *out, int64_t B, int64_t T, int64_t C, int64_t NH,
                       int64_t TH) {
    ref_attention(out, qkv, B, T, C, NH, TH);
    double l = 0;
    for (int64_t i = 0; i < B * T * C; i++) l += out[i] * dout[i];
    return l;
}

static double rel_err_d(const float *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num || d != d) num = d != d ? INFINITY : d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

static void test_attention_op(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t TH, int fd, const gpt2rt__drop *dr) {
    int64_t n3 = B * T * 3 * C, n = B * T * C;
    float *qkv = malloc(sizeof(float) * (size_t)n3), *out = malloc(sizeof(float) * (size_t)n),
          *dout = malloc(sizeof(float) * (size_t)n), *dqkv = malloc(sizeof(float) * (size_t)n3),
          *lse = malloc(sizeof(float) * (size_t)(B * NH * T)), *scratch = malloc(sizeof(float) * 64 * 4);
    double *qd = malloc(sizeof(double) * (size_t)n3), *od = malloc(sizeof(double) * (size_t)n),
           *dd = malloc(sizeof(double) * (size_t)n), *gd = malloc(sizeof(double) * (size_t)n3);
    for (int64_t i = 0; i < n3; i++) { qkv[i] = urand(); qd[i] = qkv[i]; }
    for (int64_t i = 0; i < n; i++) { dout[i] = urand(); dd[i] = dout[i]; }
    ref_dr = dr;
    gpt2rt__cpu_attention_forward_masked(out, lse, qkv, scratch, B, T, C, NH, TH, dr, 1);
    ref_attention(od, qd, B, T, C, NH, TH);
    /* fp32 scores of HS products and a softmax over <= T terms: about 1e-6 relative;
       1e-5 leaves a factor 10 and still fails on any wrong key set (errors O(0.1)) */
    double ef = rel_err_d(out, od, n);
    CHECK(ef < 1e-5, "masked attention forward (T %lld, HS %lld, TH %lld): rel err %.2e", (long long)T,
          (long long)(C / NH), (long long)TH, ef);
    gpt2rt__cpu_attention_backward_masked(dqkv, dout, qkv, lse, scratch, B, T, C, NH, TH, dr, 1);
    ref_attention_backward(gd, dd, qd, B, T, C, NH, TH);
    /* same fp32 rounding as the forward, through one more product: 1e-5 */
    double eb = rel_err_d(dqkv, gd, n3);
    CHECK(eb < 1e-5, "masked attention backward vs the reference's gradient (T %lld, TH %lld): rel err %.2e",
          (long long)T, (long long)TH, eb);
    if (fd) { /* the reference's gradient itself, by central differences in double: h = 1e-5
                 gives truncation h^2 * f''' ~ 1e-10 and cancellation 1e-16/1e-5 = 1e-11 */
        double worst = 0, h = 1e-5;
        for (int64_t i = 0; i < n3; i++) {
            double keep = qd[i];
            qd[i] = keep + h; double lp = ref_loss(qd, dd, od, B, T, C, NH, TH);
            qd[i] = keep - h; double lm = ref_loss(qd, dd, od, B, T, C, NH, TH);
            qd[i] = keep;
            double e = fabs((lp - lm) / (2 * h) - gd[i]);
            if (e > worst) worst = e;
        }
        CHECK(worst < 1e-7, "reference gradient vs finite differences: worst abs err %.2e", worst);
        printf("    masked attention (T %lld, TH %lld%s): forward %.2e, backward %.2e, reference vs FD %.2e\n",
               (long long)T, (long long)TH, dr ? ", dropout 0.3" : "", ef, eb, worst);
    }
    ref_dr = NULL;
    free(qkv); free(out); free(dout); free(dqkv); free(lse); free(scratch); free(qd); free(od); free(dd); free(gd);
}

/* 2a. the mask in the op: bitwise */
static void test_mask_op(void) {
    int64_t B = 1, T = 9, C = 8, NH = 2, TH = 5, n3 = B * T * 3 * C, n = B * T * C;
    float qkv[9 * 24], qkv2[9 * 24], out[9 * 8], out2[9 * 8], lse[2 * 9], scratch[64];
    for (int64_t i = 0; i < n3; i++) qkv[i] = urand();
    gpt2rt__cpu_attention_forward_masked(out, lse, qkv, scratch, B, T, C, NH, TH, NULL, 1);
    /* a placeholder's q, k and v: only its own row moves */
    memcpy(qkv2, qkv, sizeof qkv);
    for (int64_t i = 0; i < 3 * C; i++) qkv2[6 * 3 * C + i] += 0.5f;
    gpt2rt__cpu_attention_forward_masked(out2, lse, qkv2, scratch, B, T, C, NH, TH, NULL, 1);
    int same = 1, moved = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            if (t != 6 && memcmp(&out[t * C + c], &out2[t * C + c], 4)) same = 0;
            if (t == 6 && out[t * C + c] != out2[t * C + c]) moved = 1;
        }
    CHECK(same && moved, "op: placeholder 6 changed another row (%d) or not its own (%d)", !same, moved);
    /* history patch 3: rows 0..2 bitwise, every later row (history and placeholders) moves */
    memcpy(qkv2, qkv, sizeof qkv);
    for (int64_t i = 0; i < 3 * C; i++) qkv2[3 * 3 * C + i] += 0.5f;
    gpt2rt__cpu_attention_forward_masked(out2, lse, qkv2, scratch, B, T, C, NH, TH, NULL, 1);
    same = !memcmp(out, out2, sizeof(float) * 3 * (size_t)C);
    int all_later = 1;
    for (int64_t t = 3; t < T; t++) if (!memcmp(&out[t * C], &out2[t * C], sizeof(float) * (size_t)C)) all_later = 0;
    CHECK(same && all_later, "op: history patch 3 changed an earlier row (%d) or left a later one (%d)", !same,
          !all_later);
    (void)n;
}

/* ---- the tiny models ---- */
enum { BW = 2, M = 2, L = 40 };

static gpt2rt_config tiny(gpt2rt_head head) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.input = GPT2RT_INPUT_PATCHES;
    c.head = head;
    c.n_layer = 2; c.n_head = 2; c.n_embd = 16; c.max_seq_len = 32;
    c.batch_size = BW; c.n_channels = M; c.seq_len = L;
    c.patch_len = 8;
    c.backend = GPT2RT_BACKEND_CPU; c.n_threads = 1;
    c.lr = 1e-3f;
    if (head == GPT2RT_HEAD_NEXT_PATCH) c.patch_stride = 8; /* aLLM4TS stage 1: stride = patch: T = 5 */
    else { c.patch_stride = 4; c.horizon = 20; c.attn_mask = GPT2RT_MASK_PLACEHOLDERS; } /* 10 history + 3 */
    return c;
}

static gpt2rt_ctx *make(gpt2rt_config c) {
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, &c) != GPT2RT_OK) { printf("create: %s\n", gpt2rt_last_error(ctx)); exit(2); }
    gpt2rt_mode_set(ctx, GPT2RT_MODE_EVAL);
    return ctx;
}

static float X[BW * L * M], Y[BW * 20 * M];

static double loss_at(gpt2rt_ctx *ctx, int stage) {
    float l = 0;
    CHECK_OK(ctx, gpt2rt_forward_series(ctx, X, stage == 1 ? NULL : Y, &l));
    return l;
}

/* 3. the losses from the model's outputs (the logits arena: (BT,PL)) and our RevIN */
static void test_losses(void) {
    for (int stage = 1; stage <= 2; stage++) {
        gpt2rt_ctx *ctx = make(tiny(stage == 1 ? GPT2RT_HEAD_NEXT_PATCH : GPT2RT_HEAD_PATCH_DECODE));
        const gpt2rt__dims *d = &ctx->d;
        float loss = (float)loss_at(ctx, stage);
        int64_t T = d->T, PL = d->patch_len, PS = d->patch_stride, H = d->H, TH = stage == 1 ? T : T - 3;
        CHECK(T == (stage == 1 ? 5 : 13) && d->TH == TH, "stage %d: %lld positions, mask history %lld", stage,
              (long long)T, (long long)d->TH);
        double sum = 0, cnt = 0;
        for (int64_t b = 0; b < BW; b++)
            for (int64_t m = 0; m < M; m++) {
                double mu = 0, var = 0;
                for (int64_t t = 0; t < L; t++) mu += X[(b * L + t) * M + m];
                mu /= L;
                for (int64_t t = 0; t < L; t++) var += (X[(b * L + t) * M + m] - mu) * (X[(b * L + t) * M + m] - mu);
                double sd = sqrt(var / L + 1e-5);
                const float *out = ctx->logits + (b * M + m) * T * PL;
                if (stage == 1) /* position t against patch t+1 = steps (t+1)*PS .. +PL */
                    for (int64_t t = 0; t + 1 < T; t++)
                        for (int64_t k = 0; k < PL; k++) {
                            double z = (X[(b * L + (t + 1) * PS + k) * M + m] - mu) / sd, e = out[t * PL + k] - z;
                            sum += e * e; cnt++;
                        }
                else /* step h of the horizon: placeholder h / PL, element h % PL, de-normalised */
                    for (int64_t h = 0; h < H; h++) {
                        double pr = out[(TH + h / PL) * PL + h % PL] * sd + mu, e = pr - Y[(b * H + h) * M + m];
                        sum += e * e; cnt++;
                    }
            }
        double direct = sum / cnt, e = fabs(loss - direct) / direct;
        /* our RevIN in double against the header's fp32 (z to ~1e-7 relative), the loss
           rounded to float once (6e-8): 1e-5 */
        CHECK(e < 1e-5, "stage %d: loss %.7f, from the outputs %.7f (rel %.2e)", stage, (double)loss, direct, e);
        CHECK(cnt == (double)d->n_out, "stage %d: %g loss terms, n_out %lld", stage, cnt, (long long)d->n_out);
        printf("    stage %d loss %.6f, direct %.6f, %g terms\n", stage, (double)loss, direct, cnt);
        if (stage == 2) { /* the public predictions are the same de-normalised placeholders */
            float pred[BW * 20 * M];
            CHECK_OK(ctx, gpt2rt_predictions(ctx, pred, BW * 20 * M));
            double s2 = 0;
            for (int i = 0; i < BW * 20 * M; i++) s2 += ((double)pred[i] - Y[i]) * ((double)pred[i] - Y[i]);
            CHECK(fabs(s2 / (BW * 20 * M) - loss) / loss < 1e-6, "predictions' MSE %.7f vs loss %.7f",
                  s2 / (BW * 20 * M), (double)loss);
        } else {
            float pred[1];
            CHECK(gpt2rt_predictions(ctx, pred, 1) == GPT2RT_ERR_INVALID_ARGUMENT &&
                  strstr(gpt2rt_last_error(ctx), "NEXT_PATCH"), "stage 1 predictions: %s", gpt2rt_last_error(ctx));
        }
        gpt2rt_free(ctx);
    }
}

/* 2b. the mask through the whole model (stage 2): change the patches the model reads
   (ctx->ts_patch) and run the model again; ln_f's output rows tell who moved */
static void test_mask_model(void) {
    gpt2rt_ctx *ctx = make(tiny(GPT2RT_HEAD_PATCH_DECODE));
    const gpt2rt__dims *d = &ctx->d;
    int64_t T = d->T, PL = d->patch_len, C = d->C, TH = d->TH, BT = d->BT;
    loss_at(ctx, 2);
    float *keep = malloc(sizeof(float) * (size_t)(BT * C)), *pat = malloc(sizeof(float) * (size_t)(BT * PL));
    memcpy(keep, ctx->lnf, sizeof(float) * (size_t)(BT * C));
    memcpy(pat, ctx->ts_patch, sizeof(float) * (size_t)(BT * PL));
    int zeros = 1; /* the placeholders' patches are zeros: no future value reaches the model */
    for (int64_t bm = 0; bm < d->B; bm++)
        for (int64_t i = (bm * T + TH) * PL; i < (bm + 1) * T * PL; i++) if (ctx->ts_patch[i] != 0.0f) zeros = 0;
    CHECK(zeros, "a placeholder's patch is not zero");
    for (int kind = 0; kind < 2; kind++) {
        int64_t pos = kind ? TH + 1 : 6; /* series 1: placeholder 1, or history patch 6 */
        memcpy(ctx->ts_patch, pat, sizeof(float) * (size_t)(BT * PL));
        for (int64_t k = 0; k < PL; k++) ctx->ts_patch[(1 * T + pos) * PL + k] += 0.7f;
        CHECK_OK(ctx, gpt2rt__model_forward(ctx, ctx->be, ctx));
        int bad = 0, moved = 0;
        for (int64_t bt = 0; bt < BT; bt++) {
            int64_t s = bt / T, t = bt % T;
            int same = !memcmp(keep + bt * C, ctx->lnf + bt * C, sizeof(float) * (size_t)C);
            /* must stay: other series; placeholder kind: every other row; history kind:
               rows before pos */
            int stay = s != 1 || (kind ? t != pos : t < pos);
            if (stay && !same) bad++;
            if (!stay && !same) moved++;
        }
        CHECK(!bad && moved == (kind ? 1 : T - 6), "model: perturbing %s %lld changed %d rows it must not, moved %d",
              kind ? "placeholder" : "history patch", (long long)pos, bad, moved);
    }
    free(keep); free(pat);
    gpt2rt_free(ctx);
}

/* 4. finite differences through the tiny model */
static void test_fd(void) {
    const char *names[5] = {"out_layer.weight", "out_layer.bias", "in_layer.weight", "transformer.wpe.weight",
                            "transformer.h.1.attn.c_attn.weight"};
    for (int stage = 1; stage <= 2; stage++) {
        gpt2rt_ctx *ctx = make(tiny(stage == 1 ? GPT2RT_HEAD_NEXT_PATCH : GPT2RT_HEAD_PATCH_DECODE));
        CHECK_OK(ctx, gpt2rt_forward_series(ctx, X, stage == 1 ? NULL : Y, NULL));
        CHECK_OK(ctx, gpt2rt_backward(ctx));
        double worst = 0;
        for (int k = 0; k < 5; k++) {
            gpt2rt_param_info in;
            int idx = -1;
            for (int i = 0; i < gpt2rt_param_count(ctx); i++) {
                gpt2rt_param_info_get(ctx, i, &in);
                if (!strcmp(in.name, names[k])) { idx = i; break; }
            }
            CHECK(idx >= 0, "no parameter %s", names[k]);
            if (idx < 0) continue;
            if (k == 0) CHECK(in.shape[0] == 8 && in.shape[1] == 16, "out_layer.weight (%lld, %lld), want (8, 16)",
                              (long long)in.shape[0], (long long)in.shape[1]);
            float *w = malloc(sizeof(float) * (size_t)in.numel), *g = malloc(sizeof(float) * (size_t)in.numel);
            CHECK_OK(ctx, gpt2rt_param_read(ctx, names[k], GPT2RT_PARAM_GRAD, g, in.numel));
            CHECK_OK(ctx, gpt2rt_param_read(ctx, names[k], GPT2RT_PARAM_VALUE, w, in.numel));
            for (int rep = 0; rep < 3; rep++) { /* the 3 largest gradients */
                int64_t j = 0;
                for (int64_t i = 0; i < in.numel; i++) if (fabsf(g[i]) > fabsf(g[j])) j = i;
                float keep = w[j], h = 1e-2f, gj = g[j];
                w[j] = keep + h; CHECK_OK(ctx, gpt2rt_param_write(ctx, names[k], w, in.numel));
                double lp = loss_at(ctx, stage);
                w[j] = keep - h; CHECK_OK(ctx, gpt2rt_param_write(ctx, names[k], w, in.numel));
                double lm = loss_at(ctx, stage);
                w[j] = keep; CHECK_OK(ctx, gpt2rt_param_write(ctx, names[k], w, in.numel));
                /* central differences of an fp32 loss: truncation h^2 f''' ~ 1e-4 and rounding
                   1e-7 * loss / h ~ 1e-5, against gradients of 1e-2 .. 1: 2e-2 relative to
                   |g| + 1e-2; a wrong index or a missing term is off by O(1) */
                double fd = (lp - lm) / (2.0 * h), e = fabs(fd - gj) / (fabs(gj) + 1e-2);
                CHECK(e < 2e-2, "stage %d finite difference %s[%lld]: %.6f vs gradient %.6f", stage, names[k],
                      (long long)j, fd, (double)gj);
                if (e > worst) worst = e;
                g[j] = 0;
            }
            free(w); free(g);
        }
        printf("    stage %d finite differences (out_layer, in_layer, wpe, c_attn): worst %.2e\n", stage, worst);
        gpt2rt_free(ctx);
    }
}

/* 5. plan == allocated; the parameter count */
static void test_plan(void) {
    for (int stage = 1; stage <= 2; stage++) {
        gpt2rt_config c = tiny(stage == 1 ? GPT2RT_HEAD_NEXT_PATCH : GPT2RT_HEAD_PATCH_DECODE);
        gpt2rt_memory_plan p, a;
        CHECK(gpt2rt_plan(&c, &p) == GPT2RT_OK, "plan: %s", p.error);
        int64_t C = 16, PL = 8, per_layer = 12 * C * C + 13 * C;
        int64_t want = 32 * C + (C * PL + C) + 2 * per_layer + 2 * C + (PL * C + PL);
        CHECK(p.n_params == want, "stage %d: %lld parameters, want %lld", stage, (long long)p.n_params,
              (long long)want);
        gpt2rt_ctx *ctx = make(c);
        CHECK_OK(ctx, gpt2rt_plan_allocated(ctx, &a));
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++)
            CHECK(a.bytes[0][i] == p.bytes[0][i], "stage %d %s: planned %llu, allocated %llu", stage,
                  gpt2rt_mem_name((gpt2rt_mem)i), (unsigned long long)p.bytes[0][i], (unsigned long long)a.bytes[0][i]);
        gpt2rt_free(ctx);
        /* the plan answers for the CUDA backend too (creation refuses it for now) */
        c.backend = GPT2RT_BACKEND_CUDA; c.precision = GPT2RT_PRECISION_BF16;
        CHECK(gpt2rt_plan(&c, &p) == GPT2RT_OK && p.bytes[0][GPT2RT_MEM_LOGITS] > 0, "stage %d CUDA bf16 plan: %s",
              stage, p.error);
    }
}

/* 6. stage 1 trained, saved, loaded into stage 2 */
static void test_stages(void) {
    gpt2rt_config c1 = tiny(GPT2RT_HEAD_NEXT_PATCH);
    c1.max_seq_len = 32;
    gpt2rt_ctx *s1 = make(c1);
    gpt2rt_mode_set(s1, GPT2RT_MODE_TRAIN);
    float l0 = (float)loss_at(s1, 1), l1 = 0;
    for (int i = 0; i < 20; i++) CHECK_OK(s1, gpt2rt_step_series(s1, X, NULL, NULL));
    l1 = (float)loss_at(s1, 1);
    CHECK(l1 < l0, "stage 1: 20 steps on one batch, loss %.5f -> %.5f", (double)l0, (double)l1);
    char dir[] = "/tmp/gpt2rt_allm4ts_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    CHECK_OK(s1, gpt2rt_weights_save(s1, dir));
    gpt2rt_config c2 = tiny(GPT2RT_HEAD_PATCH_DECODE);
    c2.frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP; /* aLLM4TS stage 2 trains LayerNorms, wpe, in/out */
    gpt2rt_ctx *s2 = make(c2);
    CHECK_OK(s2, gpt2rt_weights_load(s2, dir));
    int same = 0, n = gpt2rt_param_count(s2);
    for (int i = 0; i < n; i++) {
        gpt2rt_param_info in;
        gpt2rt_param_info_get(s2, i, &in);
        float *a = malloc(sizeof(float) * (size_t)in.numel), *b = malloc(sizeof(float) * (size_t)in.numel);
        CHECK_OK(s1, gpt2rt_param_read(s1, in.name, GPT2RT_PARAM_VALUE, a, in.numel));
        CHECK_OK(s2, gpt2rt_param_read(s2, in.name, GPT2RT_PARAM_VALUE, b, in.numel));
        if (!memcmp(a, b, sizeof(float) * (size_t)in.numel)) same++;
        else printf("FAIL-detail: %s differs after the load\n", in.name);
        free(a); free(b);
    }
    CHECK(same == n && n == gpt2rt_param_count(s1), "stage 2 holds %d of its %d tensors bitwise as stage 1 saved them",
          same, n);
    float g[16 * 48];
    CHECK(gpt2rt_param_read(s2, "transformer.h.0.attn.c_attn.weight", GPT2RT_PARAM_GRAD, g, 16 * 48) != GPT2RT_OK,
          "stage 2: frozen attention has a gradient");
    gpt2rt_mode_set(s2, GPT2RT_MODE_TRAIN);
    float m0 = (float)loss_at(s2, 2);
    for (int i = 0; i < 20; i++) CHECK_OK(s2, gpt2rt_step_series(s2, X, Y, NULL));
    float m1 = (float)loss_at(s2, 2);
    CHECK(m1 < m0, "stage 2: 20 steps on one batch, loss %.5f -> %.5f", (double)m0, (double)m1);
    printf("    stage 1 loss %.4f -> %.4f; saved, loaded (%d tensors bitwise); stage 2 %.4f -> %.4f\n", (double)l0,
           (double)l1, same, (double)m0, (double)m1);
    char f[256];
    snprintf(f, sizeof f, "%s/model.safetensors", dir); remove(f);
    snprintf(f, sizeof f, "%s/config.json", dir); remove(f);
    rmdir(dir);
    gpt2rt_free(s1); gpt2rt_free(s2);
}

/* 6b. a training state records the objective: NEXT_PATCH and PATCH_DECODE have the same
   tensors, so a resume must check head and attn_mask themselves */
static void test_state_objective(void) {
    gpt2rt_config ca = tiny(GPT2RT_HEAD_PATCH_DECODE);
    ca.attn_mask = GPT2RT_MASK_CAUSAL; /* PATCH_DECODE under the plain causal mask */
    gpt2rt_ctx *a = make(ca);
    gpt2rt_mode_set(a, GPT2RT_MODE_TRAIN);
    for (int i = 0; i < 2; i++) CHECK_OK(a, gpt2rt_step_series(a, X, Y, NULL));
    char path[] = "/tmp/gpt2rt_allm4ts_state_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) close(fd);
    CHECK_OK(a, gpt2rt_state_save(a, path));
    /* the same config resumes, and its next step is the original's, bitwise */
    gpt2rt_ctx *same = make(ca);
    gpt2rt_mode_set(same, GPT2RT_MODE_TRAIN);
    CHECK(gpt2rt_state_load(same, path) == GPT2RT_OK, "the same objective resumes: %s", gpt2rt_last_error(same));
    gpt2rt_step_stats sa, sb;
    CHECK_OK(a, gpt2rt_step_series(a, X, Y, &sa));
    CHECK_OK(same, gpt2rt_step_series(same, X, Y, &sb));
    CHECK(!memcmp(&sa.loss, &sb.loss, 4), "resumed step's loss %.9g == the original's %.9g", (double)sb.loss,
          (double)sa.loss);
    /* another mask: refused, naming both */
    gpt2rt_ctx *mask = make(tiny(GPT2RT_HEAD_PATCH_DECODE));
    gpt2rt_result r = gpt2rt_state_load(mask, path);
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(gpt2rt_last_error(mask), "attn_mask = 0 (CAUSAL), this context has 1 "
                                                                   "(PLACEHOLDERS)"),
          "another attn_mask is refused: %s", gpt2rt_last_error(mask));
    /* another head with every shape key equal: refused on the head, before the tensors */
    gpt2rt_config cr = ca;
    cr.head = GPT2RT_HEAD_REGRESSION;
    gpt2rt_ctx *reg = make(cr);
    r = gpt2rt_state_load(reg, path);
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(gpt2rt_last_error(reg), "head = 3 (PATCH_DECODE), this context has 1 "
                                                                  "(REGRESSION)"),
          "another head is refused: %s", gpt2rt_last_error(reg));
    remove(path);
    gpt2rt_free(a); gpt2rt_free(same); gpt2rt_free(mask); gpt2rt_free(reg);
}

/* 7. refusals name the field */
static void test_config(void) {
    gpt2rt_memory_plan p;
    gpt2rt_config c = tiny(GPT2RT_HEAD_PATCH_DECODE);
    c.head = GPT2RT_HEAD_REGRESSION;
    CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(p.error, "attn_mask = PLACEHOLDERS"),
          "PLACEHOLDERS with REGRESSION: %s", p.error);
    c = tiny(GPT2RT_HEAD_NEXT_PATCH); c.horizon = 96;
    CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(p.error, "horizon = 96"),
          "NEXT_PATCH with a horizon: %s", p.error);
    c = tiny(GPT2RT_HEAD_NEXT_PATCH); c.seq_len = 12;
    CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(p.error, "2 patches"),
          "NEXT_PATCH with one patch: %s", p.error);
    c = tiny(GPT2RT_HEAD_PATCH_DECODE); c.horizon = 200; /* 10 history + 25 placeholders > 32 positions */
    CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(p.error, "25 placeholders"),
          "PATCH_DECODE past wpe: %s", p.error);
    c = tiny(GPT2RT_HEAD_PATCH_DECODE); c.input = GPT2RT_INPUT_TOKENS; c.patch_len = c.patch_stride = c.n_channels = 0;
    c.horizon = 0;
    CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(p.error, "got head = PATCH_DECODE"),
          "tokens with PATCH_DECODE: %s", p.error);
    c = tiny(GPT2RT_HEAD_NEXT_PATCH); c.parallel = GPT2RT_PARALLEL_LAYER_SPLIT; c.n_devices = 2;
    gpt2rt_ctx *ctx;
    CHECK(gpt2rt_create(&ctx, &c) == GPT2RT_ERR_NOT_IMPLEMENTED &&
          strstr(gpt2rt_last_error(ctx), "NEXT_PATCH with parallel = LAYER_SPLIT") &&
          strstr(gpt2rt_last_error(ctx), "GPT2RT_PARALLEL_DATA over the 2 devices"),
          "NEXT_PATCH with layer split: %s", gpt2rt_last_error(ctx));
    gpt2rt_free(ctx);
}

/* ---- 8. data parallel: n CPU ranks of b windows against one device of n*b ---- */

/* every parameter's value or gradient (frozen: zeros), in the table's order */
static float *all_params(gpt2rt_ctx *ctx, gpt2rt_param_what what, int64_t *n_out) {
    int64_t n = 0, o = 0;
    gpt2rt_param_info in;
    for (int i = 0; i < gpt2rt_param_count(ctx); i++) { gpt2rt_param_info_get(ctx, i, &in); n += in.numel; }
    float *w = calloc((size_t)n, sizeof(float));
    for (int i = 0; i < gpt2rt_param_count(ctx); i++) {
        gpt2rt_param_info_get(ctx, i, &in);
        if (what == GPT2RT_PARAM_VALUE || !(gpt2rt_config_get(ctx).frozen & in.group))
            CHECK_OK(ctx, gpt2rt_param_read(ctx, in.name, what, w + o, in.numel));
        o += in.numel;
    }
    *n_out = n;
    return w;
}

/* max |a - b| / max |b| */
static double rel_err_f(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > num || d != d) num = d != d ? INFINITY : d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

/* windows for seed s: x (W,L,M) a noisy sine per channel, y (W,20,M) its continuation */
static void dp_windows(int64_t W, int s, float *x, float *y) {
    uint64_t st = 77 + (uint64_t)s * 1000003u;
    for (int64_t w = 0; w < W; w++)
        for (int64_t m = 0; m < M; m++) {
            double ph = 6.28 * harness_rng_uniform(&st), a = 1.0 + harness_rng_uniform(&st), lvl = 3.0 * urand();
            for (int64_t t = 0; t < L + 20; t++) {
                float v = (float)(lvl + a * sin(0.4 * (double)t + ph) + 0.2 * (2.0 * harness_rng_uniform(&st) - 1.0));
                if (t < L) x[(w * L + t) * M + m] = v;
                else y[(w * 20 + t - L) * M + m] = v;
            }
        }
}

static void dp_case(int stage, int n, int b, int accum, float drop) {
    gpt2rt_config c1 = tiny(stage == 1 ? GPT2RT_HEAD_NEXT_PATCH : GPT2RT_HEAD_PATCH_DECODE), cn, cz;
    c1.batch_size = n * b; c1.grad_accum = accum;
    c1.lr = 1e-2f; c1.weight_decay = 0.1f; c1.grad_clip = 0.5f; /* clipping active: the global norm matters */
    c1.dropout = c1.attn_dropout = drop;
    if (stage == 2) c1.frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP; /* aLLM4TS stage 2's groups */
    cn = c1; cn.parallel = GPT2RT_PARALLEL_DATA; cn.n_devices = n; cn.batch_size = b;
    cz = cn; cz.shard_optimizer = 1;
    gpt2rt_ctx *one = make(c1), *par = make(cn), *zro = make(cz), *again = make(cn);
    gpt2rt_ctx *all[4] = {one, par, zro, again};
    for (int k = 0; k < 4; k++) gpt2rt_mode_set(all[k], GPT2RT_MODE_TRAIN);
    const gpt2rt__dims *d = &one->d;
    int64_t W = (int64_t)n * b * accum, xs = (int64_t)n * b * L * M, ys = (int64_t)n * b * 20 * M;
    float *x = malloc(sizeof(float) * (size_t)(W * L * M)), *y = malloc(sizeof(float) * (size_t)(W * 20 * M));
    const float *yy = stage == 1 ? NULL : y;
    dp_windows(W, 1, x, y);

    /* the plan is what every rank allocated, per device and category (ZeRO-1 too) */
    int bad = 0;
    for (int k = 0; k < 2; k++) {
        gpt2rt_memory_plan p, a;
        CHECK(gpt2rt_plan(k ? &cz : &cn, &p) == GPT2RT_OK, "plan: %s", p.error);
        CHECK_OK(par, gpt2rt_plan_allocated(k ? zro : par, &a));
        bad += a.n_devices != n || p.n_devices != n;
        for (int dv = 0; dv < n; dv++)
            for (int i = 0; i < GPT2RT_MEM_COUNT; i++) bad += a.bytes[dv][i] != p.bytes[dv][i];
    }
    CHECK(bad == 0, "stage %d, %d ranks: %d of the plan's per-device figures differ from what the ranks allocated",
          stage, n, bad);

    /* the gradients of one accumulated batch, micro-batch by micro-batch */
    for (int k = 0; k < accum; k++) {
        float l1 = 0, ln = 0;
        CHECK_OK(one, gpt2rt_forward_series(one, x + k * xs, yy ? yy + k * ys : NULL, &l1));
        CHECK_OK(par, gpt2rt_forward_series(par, x + k * xs, yy ? yy + k * ys : NULL, &ln));
        /* each output is the same row's arithmetic but for the matrix product's row blocking,
           which changes with the row count (a few fp32 ulps); the mean of squares over
           n_out terms then agrees to a few eps32 relative: 1e-5 leaves a factor 20 */
        CHECK(fabsf(l1 - ln) <= 1e-5f * fabsf(l1), "stage %d, %d ranks: forward loss %.8g, one device %.8g", stage, n,
              (double)ln, (double)l1);
        if (stage == 2) { /* the ranks' predictions in rank order are one device's rows */
            int64_t np = (int64_t)n * b * d->H * M;
            float *p1 = malloc(sizeof(float) * (size_t)np), *pn = malloc(sizeof(float) * (size_t)np);
            CHECK_OK(one, gpt2rt_predictions(one, p1, np));
            CHECK_OK(par, gpt2rt_predictions(par, pn, np));
            double e = rel_err_f(pn, p1, np);
            CHECK(e < 1e-5, "stage 2, %d ranks: predictions rel err %.3g", n, e); /* as the loss above */
            free(p1); free(pn);
        }
        CHECK_OK(one, gpt2rt_backward(one));
        CHECK_OK(par, gpt2rt_backward(par));
    }
    int64_t ng;
    float *g1 = all_params(one, GPT2RT_PARAM_GRAD, &ng), *gn = all_params(par, GPT2RT_PARAM_GRAD, &ng);
    double eg = rel_err_f(gn, g1, ng);
    /* a weight's gradient sums R = accum x n x b x M x T position terms; n ranks regroup the
       sum (each rank its own rows, then rank order) and each term carries the forward's and
       the backward's rounding: 3 R eps32 */
    double rows = (double)accum * n * b * M * (double)d->T, gbound = 3.0 * rows * 1.1920929e-7;
    CHECK(eg < gbound, "stage %d, %d ranks x %d windows, accum %d, dropout %g: gradient rel err %.3g (bound %.3g)",
          stage, n, b, accum, (double)drop, eg, gbound);
    int64_t nw;
    float *w0 = all_params(one, GPT2RT_PARAM_VALUE, &nw), *w0n = all_params(par, GPT2RT_PARAM_VALUE, &nw);
    CHECK(!memcmp(w0, w0n, sizeof(float) * (size_t)nw), "stage %d, %d ranks: the initial weights differ", stage, n);
    gpt2rt_step_stats s1, sn;
    CHECK_OK(one, gpt2rt_update(one, &s1));
    CHECK_OK(par, gpt2rt_update(par, &sn));
    /* the weights after that first update, element by element: AdamW's first step is
       lr g / (|g| + eps) (m and v of one gradient), whose change under a gradient error e is
       at most 2 lr e / (|g| + eps), and e <= gbound max|g| (the normwise bound above); so
       |dw_i| <= 2 lr gbound max|g| / (|g_i| + eps), plus 2 ulps of w_i for the update's own
       rounding (weight decay and the step may round apart). Where g_i is within the error of
       0 the bound exceeds 2 lr: the direction may differ there, and nowhere else */
    float *w1u = all_params(one, GPT2RT_PARAM_VALUE, &nw), *wnu = all_params(par, GPT2RT_PARAM_VALUE, &nw);
    double gmax = 0, wq = 0, lr = (double)c1.lr;
    for (int64_t i = 0; i < ng; i++) if (fabs((double)g1[i]) > gmax) gmax = fabs((double)g1[i]);
    int over = 0;
    for (int64_t i = 0; i < nw; i++) {
        double e = fabs((double)w1u[i] - (double)wnu[i]), moved = fabs((double)w1u[i] - (double)w0[i]);
        double bound = 2.0 * lr * gbound * gmax / (fabs((double)g1[i]) + 1e-8) + 2.0 * 1.1920929e-7 * fabs((double)w1u[i]);
        if (e > bound) over++;
        if (moved > 0.5 * lr && e / moved > wq) wq = e / moved; /* elements the step moved: the error relative to it */
    }
    CHECK(over == 0, "stage %d, %d ranks: %d weights after the first update differ by more than the derived bound",
          stage, n, over);
    free(g1); free(gn); free(w0n); free(w1u); free(wnu);
    /* the norm: the gradients' bound; the loss: the forward's */
    CHECK(fabsf(s1.grad_norm - sn.grad_norm) <= (float)gbound * s1.grad_norm && fabsf(s1.loss - sn.loss) <= 1e-5f * s1.loss
          && sn.micro_batches == accum, "stage %d, %d ranks: update norm %.8g vs %.8g, loss %.8g vs %.8g, micro %d",
          stage, n, (double)sn.grad_norm, (double)s1.grad_norm, (double)sn.loss, (double)s1.loss, sn.micro_batches);
    /* the ZeRO-1 and second plain runs reach this point through gpt2rt_step_series */
    for (int k = 2; k < 4; k++) {
        gpt2rt_step_stats st;
        CHECK_OK(all[k], gpt2rt_step_series(all[k], x, yy, &st));
        CHECK(!memcmp(&st.loss, &sn.loss, 4) && !memcmp(&st.grad_norm, &sn.grad_norm, 4), "stage %d, %d ranks: %s "
              "step 1 loss %.9g norm %.9g, forward/backward/update %.9g %.9g: not bitwise", stage, n,
              k == 2 ? "ZeRO-1" : "a second run's", (double)st.loss, (double)st.grad_norm, (double)sn.loss,
              (double)sn.grad_norm);
    }
    /* 3 more steps on new windows */
    float L1[3], Ln[3], Lz[3], La[3];
    for (int s = 0; s < 3; s++) {
        dp_windows(W, 2 + s, x, y);
        float *out[4] = {L1, Ln, Lz, La};
        for (int k = 0; k < 4; k++) {
            gpt2rt_step_stats st;
            CHECK_OK(all[k], gpt2rt_step_series(all[k], x, yy, &st));
            out[k][s] = st.loss;
        }
    }
    float *w1 = all_params(one, GPT2RT_PARAM_VALUE, &nw), *wn = all_params(par, GPT2RT_PARAM_VALUE, &nw);
    float *wz = all_params(zro, GPT2RT_PARAM_VALUE, &nw), *wa = all_params(again, GPT2RT_PARAM_VALUE, &nw);
    double worst = 0, dw = 0;
    for (int s = 0; s < 3; s++)
        if (fabs((double)L1[s] - Ln[s]) / L1[s] > worst) worst = fabs((double)L1[s] - Ln[s]) / L1[s];
    for (int64_t i = 0; i < nw; i++) if (fabs((double)w1[i] - wn[i]) > dw) dw = fabs((double)w1[i] - wn[i]);
    /* each step's weights move the next gradient by the bound again, and Adam's m/sqrt(v)
       carries a gradient's relative error twice: 3 steps x 2 x gbound */
    CHECK(worst < 6.0 * gbound, "stage %d, %d ranks: losses of later steps differ by %.3g relative (bound %.3g)", stage,
          n, worst, 6.0 * gbound);
    CHECK(!memcmp(wz, wn, sizeof(float) * (size_t)nw) && !memcmp(wa, wn, sizeof(float) * (size_t)nw) &&
          !memcmp(Lz, Ln, sizeof Ln) && !memcmp(La, Ln, sizeof Ln), "stage %d, %d ranks: ZeRO-1 or a second run is "
          "not bitwise the plain data-parallel run", stage, n);
    printf("    stage %d, %d ranks x %d windows, accum %d, dropout %g: gradient rel err %.2g (bound %.2g), first "
           "update within the per-weight bound (worst %.2g of a step), later losses %.2g, weights after 4 steps "
           "%.2g apart; ZeRO-1 and a rerun bitwise; plan == allocated\n", stage, n, b, accum, (double)drop, eg,
           gbound, wq, worst, dw);
    free(w0); free(w1); free(wn); free(wz); free(wa); free(x); free(y);
    for (int k = 0; k < 4; k++) gpt2rt_free(all[k]);
}

static void test_data_parallel(void) {
    dp_case(1, 2, 1, 1, 0.0f);
    dp_case(1, 3, 1, 2, 0.2f); /* aLLM4TS stage 1 trains with dropout 0.2 */
    dp_case(2, 2, 2, 2, 0.0f);
    dp_case(2, 3, 1, 1, 0.2f);
}

#ifdef GPT2RT_MPI
/* 9: one process of mpirun's world; the same global batches through N threads here */
static void test_mpi(void) {
    for (int stage = 1; stage <= 2; stage++) {
        gpt2rt_config c;
        memset(&c, 0, sizeof c);
        c.input = GPT2RT_INPUT_PATCHES; c.n_layer = 1; c.n_head = 2; c.n_embd = 16; c.seq_len = 64; c.patch_len = 16;
        c.head = stage == 1 ? GPT2RT_HEAD_NEXT_PATCH : GPT2RT_HEAD_PATCH_DECODE;
        c.attn_mask = stage == 1 ? GPT2RT_MASK_CAUSAL : GPT2RT_MASK_PLACEHOLDERS;
        c.patch_stride = stage == 1 ? 16 : 8; c.n_channels = stage == 1 ? 1 : 2; c.horizon = stage == 1 ? 0 : 24;
        c.batch_size = 2; c.parallel = GPT2RT_PARALLEL_DATA; c.lr = 1e-3f; c.seed = 1; c.timeout_s = 30.0f;
        c.n_threads = 1; c.total_steps = 10; c.dropout = stage == 1 ? 0.2f : 0.0f; /* stage 1 trains with dropout */
        gpt2rt_ctx *p, *q;
        if (gpt2rt_create(&p, &c) != GPT2RT_OK) { CHECK(0, "stage %d under mpirun: %s", stage, gpt2rt_last_error(p)); gpt2rt_free(p); return; }
        gpt2rt_config got = gpt2rt_config_get(p), t = c;
        t.world_size = 1; t.n_devices = got.world_size;
        CHECK_OK(q, gpt2rt_create(&q, &t));
        const int N = got.world_size, me = got.rank, B = 2, Lm = 64, Mm = c.n_channels, Hm = c.horizon;
        float *x = (float *)malloc(sizeof(float) * (size_t)(N * B * Lm * Mm));
        float *y = (float *)malloc(sizeof(float) * (size_t)(N * B * (Hm ? Hm : 1) * Mm));
        int same = 1;
        for (int s = 0; s < 3; s++) {
            for (int i = 0; i < N * B * Lm * Mm; i++) x[i] = (float)(sin(0.1 * i + s) + 0.01 * (i % 7));
            for (int i = 0; i < N * B * (Hm ? Hm : 1) * Mm; i++) y[i] = (float)cos(0.05 * i + s);
            gpt2rt_step_stats a, b;
            CHECK_OK(p, gpt2rt_step_series(p, x + (size_t)me * B * Lm * Mm, Hm ? y + (size_t)me * B * Hm * Mm : NULL, &a));
            CHECK_OK(q, gpt2rt_step_series(q, x, Hm ? y : NULL, &b));
            same &= a.loss == b.loss && a.grad_norm == b.grad_norm;
        }
        int differ = 0;
        for (int i = 0; i < gpt2rt_param_count(p); i++) {
            gpt2rt_param_info in;
            gpt2rt_param_info_get(p, i, &in);
            float *u = (float *)malloc(sizeof(float) * (size_t)in.numel), *v = (float *)malloc(sizeof(float) * (size_t)in.numel);
            gpt2rt_param_read(p, in.name, GPT2RT_PARAM_VALUE, u, in.numel);
            gpt2rt_param_read(q, in.name, GPT2RT_PARAM_VALUE, v, in.numel);
            differ += memcmp(u, v, sizeof(float) * (size_t)in.numel) != 0;
            free(u); free(v);
        }
        CHECK(N >= 2 && same && !differ, "rank %d of %d, stage %d: 3 steps' losses and gradient norms %s those of %d "
              "ranks in one process, %d of %d tensors differ", me, N, stage, same ? "==" : "!=", N, differ,
              gpt2rt_param_count(p));
        free(x); free(y);
        gpt2rt_free(p); gpt2rt_free(q);
    }
}
#endif

int main(int argc, char **argv) {
    if (argc > 1) {
#ifdef GPT2RT_MPI
        if (!strcmp(argv[1], "mpi")) { printf("test_allm4ts mpi\n"); test_mpi(); return harness_finish(); }
#endif
        fprintf(stderr, "test_allm4ts: unknown mode '%s' (mpi: built with mpicc -DGPT2RT_MPI, under mpirun)\n", argv[1]);
        return 2;
    }
    for (int i = 0; i < BW * L * M; i++) X[i] = (float)(sin(0.3 * i) * 2.0 + 0.3 * urand() + 1.0);
    for (int i = 0; i < BW * 20 * M; i++) Y[i] = (float)(sin(0.3 * (i + 80)) * 2.0 + 1.0);
    printf("test_allm4ts\n");
    test_attention_op(2, 7, 8, 2, 4, 1, NULL);    /* tiled, 3 placeholders */
    test_attention_op(1, 6, 8, 2, 6, 1, NULL);    /* TH = T: GPT-2's causal mask */
    test_attention_op(1, 8, 1040, 2, 5, 0, NULL); /* HS * T > the tile: the untiled path */
    /* the probabilities' dropout under the mask (aLLM4TS stage 1 trains with dropout), p = 0.3:
       the placeholder's own key draws element (row, t) of the mask as the forward did */
    gpt2rt__drop dr;
    memset(&dr, 0, sizeof dr);
    dr.on = 1; dr.thresh = (uint32_t)(0.3 * 4294967296.0); dr.scale = 1.0f / 0.7f; dr.key = 0x5EEDull;
    test_attention_op(2, 7, 8, 2, 4, 1, &dr);
    test_attention_op(1, 8, 1040, 2, 5, 0, &dr);
    test_mask_op();
    test_losses();
    test_mask_model();
    test_fd();
    test_plan();
    test_stages();
    test_state_objective();
    test_config();
    test_data_parallel();
    return harness_finish();
}
