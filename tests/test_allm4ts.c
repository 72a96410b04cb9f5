/* aLLM4TS as configuration (issue 25): the sequence head (out_layer: width -> patch_len
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
   7. the config's refusals. */
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
        int64_t T = d->T, PL = d->PL, PS = d->PS, H = d->H, TH = stage == 1 ? T : T - 3;
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
    int64_t T = d->T, PL = d->PL, C = d->C, TH = d->TH, BT = d->BT;
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
    c = tiny(GPT2RT_HEAD_NEXT_PATCH); c.parallel = GPT2RT_PARALLEL_DATA; c.n_devices = 2;
    gpt2rt_ctx *ctx;
    CHECK(gpt2rt_create(&ctx, &c) == GPT2RT_ERR_NOT_IMPLEMENTED && strstr(gpt2rt_last_error(ctx), "runs on one device"),
          "NEXT_PATCH with data parallel: %s", gpt2rt_last_error(ctx));
    gpt2rt_free(ctx);
}

int main(void) {
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
    return harness_finish();
}
