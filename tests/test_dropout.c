/* Dropout (config.dropout, attn_dropout, head_dropout; gpt2rt_mode_set), token and
   patch models alike. Exact properties only: the masks' statistics (the dropped
   fraction within a binomial bound, independence across steps, layers, sites and
   micro-batches, kept values exactly x * 1/(1-p)); evaluation bitwise equal to a
   model without dropout; recompute SELECTIVE and FULL, resume from a state file,
   1 vs 2 threads all bitwise equal with dropout on; finite differences of the loss
   with the masks on (a mask is a fixed function of the step); k micro-batches equal
   one batch k times the size; the config checks. */
/* every op splits over the threads whatever its size (by default an op too small to pay
   for a second thread runs on one), so the checks across thread counts below compare
   split work, not one thread's with itself */
#ifndef GPT2RT_CPU_WORK_PER_THREAD
#define GPT2RT_CPU_WORK_PER_THREAD 0
#endif
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

#define P_DROP 0.2f

/* a test's data: token ids (B,T) and targets, or windows (B,L,M) and targets (B,H,M),
   for up to 2 micro-batches */
static int32_t tok_in[2 * 4 * 16], tok_tg[2 * 4 * 16];
static float ts_x[2 * 3 * 32 * 2], ts_y[2 * 3 * 8 * 2];

static gpt2rt_config base_config(int patches) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2; c.n_head = 2; c.max_seq_len = 16; c.lr = 1e-3f; c.seed = 7;
    c.n_threads = 2;
    if (patches) {
        c.input = GPT2RT_INPUT_PATCHES; c.head = GPT2RT_HEAD_REGRESSION;
        c.n_embd = 16; c.batch_size = 3; c.seq_len = 32; c.n_channels = 2; c.patch_len = 8; c.patch_stride = 4;
        c.horizon = 8;
    } else {
        c.n_embd = 32; c.vocab_size = 64; c.batch_size = 4; c.seq_len = 16;
    }
    return c;
}

static gpt2rt_config drop_config(int patches) {
    gpt2rt_config c = base_config(patches);
    c.dropout = P_DROP; c.attn_dropout = P_DROP; c.head_dropout = P_DROP;
    return c;
}

static gpt2rt_ctx *make(gpt2rt_config c) {
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, &c) != GPT2RT_OK) { printf("create: %s\n", gpt2rt_last_error(ctx)); exit(2); }
    return ctx;
}

static float fwd(gpt2rt_ctx *ctx, int patches) {
    float l = 0;
    CHECK_OK(ctx, patches ? gpt2rt_forward_series(ctx, ts_x, ts_y, &l) : gpt2rt_forward(ctx, tok_in, tok_tg, &l));
    return l;
}

/* one optimizer step over grad_accum micro-batches of the data */
static void step(gpt2rt_ctx *ctx, int patches) {
    gpt2rt_step_stats st;
    CHECK_OK(ctx, patches ? gpt2rt_step_series(ctx, ts_x, ts_y, &st) : gpt2rt_step(ctx, tok_in, tok_tg, &st));
}

/* the model's output of the last forward: logits or predictions */
static int64_t output(gpt2rt_ctx *ctx, int patches, float *out) {
    gpt2rt_config c = gpt2rt_config_get(ctx);
    int64_t n = patches ? (int64_t)c.batch_size * c.horizon * c.n_channels : (int64_t)c.batch_size * c.seq_len * c.vocab_size;
    CHECK_OK(ctx, patches ? gpt2rt_predictions(ctx, out, n) : gpt2rt_logits(ctx, out, n));
    return n;
}

/* |k - n p| within 6 standard deviations of the binomial */
static int binomial_ok(int64_t k, int64_t n, double p) {
    return fabs((double)k - (double)n * p) <= 6.0 * sqrt((double)n * p * (1.0 - p));
}

/* 1. the op: statistics, kept values, independence, determinism, threads */
static void test_masks(void) {
    gpt2rt_ctx *ctx = make(drop_config(0));
    const int64_t n = (int64_t)1 << 20;
    float *x = (float *)malloc(sizeof(float) * (size_t)n), *y = (float *)malloc(sizeof(float) * (size_t)n);
    unsigned char *m0 = (unsigned char *)malloc((size_t)n), *m1 = (unsigned char *)malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = 1.0f + (float)(i % 97) * 0.37f;
    const float ps[3] = {0.1f, 0.5f, 0.9f};
    for (int k = 0; k < 3; k++) {
        gpt2rt__drop_begin(ctx);
        gpt2rt__drop dr = gpt2rt__drop_at(ctx, ps[k], 0, GPT2RT__DROP_MLP_RESID, n);
        gpt2rt__cpu_dropout(y, x, &dr, n, 1);
        int64_t dropped = 0, bad_kept = 0;
        float scale = (float)(1.0 / (1.0 - (double)ps[k]));
        for (int64_t i = 0; i < n; i++) {
            if (y[i] == 0.0f) { dropped++; continue; }
            float want = x[i] * scale;
            double rel = fabs((double)y[i] - (double)x[i] / (1.0 - (double)ps[k])) / ((double)x[i] / (1.0 - (double)ps[k]));
            if (memcmp(&y[i], &want, 4) || rel > 1.2e-7) bad_kept++;
        }
        CHECK(dr.on && dr.scale == scale, "p = %g: scale %g", (double)ps[k], (double)dr.scale);
        CHECK(binomial_ok(dropped, n, ps[k]), "p = %g: %lld of %lld dropped (expected %.0f)", (double)ps[k],
              (long long)dropped, (long long)n, (double)n * ps[k]);
        CHECK(bad_kept == 0, "p = %g: %lld kept values are not x * 1/(1-p)", (double)ps[k], (long long)bad_kept);
        gpt2rt__cpu_dropout(x, x, &dr, 0, 1); /* N = 0: nothing */
        printf("    p = %.1f: %.5f of 2^20 dropped\n", (double)ps[k], (double)dropped / (double)n);
    }
    /* two masks disagree on a fraction 2p(1-p) when independent; the same key gives the same mask */
    const double p = 0.1;
    gpt2rt__drop_begin(ctx);
    gpt2rt__drop ref = gpt2rt__drop_at(ctx, (float)p, 0, GPT2RT__DROP_ATTN_RESID, n);
    gpt2rt__cpu_dropout(y, x, &ref, n, 1);
    for (int64_t i = 0; i < n; i++) m0[i] = y[i] == 0.0f;
    const char *what[6] = {"the same site (2 threads)", "another step", "another layer", "another site",
                           "the next micro-batch", "another seed"};
    for (int k = 0; k < 6; k++) {
        gpt2rt__drop dr = ref;
        int nt = 1;
        if (k == 0) nt = 2;
        if (k == 1) { ctx->step = 1; gpt2rt__drop_begin(ctx);
                      dr = gpt2rt__drop_at(ctx, (float)p, 0, GPT2RT__DROP_ATTN_RESID, n); ctx->step = 0; gpt2rt__drop_begin(ctx); }
        if (k == 2) dr = gpt2rt__drop_at(ctx, (float)p, 1, GPT2RT__DROP_ATTN_RESID, n);
        if (k == 3) dr = gpt2rt__drop_at(ctx, (float)p, 0, GPT2RT__DROP_MLP_RESID, n);
        if (k == 4) { ctx->acc_micro = 1; gpt2rt__drop_begin(ctx);
                      dr = gpt2rt__drop_at(ctx, (float)p, 0, GPT2RT__DROP_ATTN_RESID, n); ctx->acc_micro = 0; }
        if (k == 5) { uint64_t keep = ctx->rng; ctx->rng ^= 1; gpt2rt__drop_begin(ctx);
                      dr = gpt2rt__drop_at(ctx, (float)p, 0, GPT2RT__DROP_ATTN_RESID, n); ctx->rng = keep; }
        gpt2rt__cpu_dropout(y, x, &dr, n, nt);
        int64_t differ = 0;
        for (int64_t i = 0; i < n; i++) m1[i] = y[i] == 0.0f, differ += m1[i] != m0[i];
        if (k == 0) CHECK(differ == 0, "%s: %lld elements differ", what[k], (long long)differ);
        else CHECK(binomial_ok(differ, n, 2 * p * (1 - p)), "%s: the masks differ on %lld of %lld (independent: %.0f)",
                   what[k], (long long)differ, (long long)n, (double)n * 2 * p * (1 - p));
    }
    gpt2rt__drop_begin(ctx);
    gpt2rt__drop off = gpt2rt__drop_at(ctx, 0.0f, 0, GPT2RT__DROP_ATTN_RESID, n);
    CHECK(!off.on, "p = 0 is off");
    CHECK_OK(ctx, gpt2rt_mode_set(ctx, GPT2RT_MODE_EVAL));
    gpt2rt__drop_begin(ctx);
    off = gpt2rt__drop_at(ctx, 0.5f, 0, GPT2RT__DROP_ATTN_RESID, n);
    CHECK(!off.on, "EVAL mode is off");
    free(x); free(y); free(m0); free(m1);
    gpt2rt_free(ctx);
}

/* 2. the embeddings' mask seen in the model: x0 of a training forward is 0 or the
   evaluation's x0 times 1/(1-p), the fraction dropped is binomial, and it changes
   from one step to the next */
static void test_embed_mask(int patches) {
    gpt2rt_config c = drop_config(patches);
    c.lr = 1e-30f; /* the weights barely move: x0 is the same but for the mask */
    gpt2rt_ctx *ctx = make(c);
    int64_t n = ctx->d.BT * ctx->d.C;
    float *ev = (float *)malloc(sizeof(float) * (size_t)n);
    unsigned char *z0 = (unsigned char *)malloc((size_t)n);
    CHECK_OK(ctx, gpt2rt_mode_set(ctx, GPT2RT_MODE_EVAL));
    CHECK(gpt2rt_mode_get(ctx) == GPT2RT_MODE_EVAL, "mode_get");
    fwd(ctx, patches);
    memcpy(ev, ctx->x0, sizeof(float) * (size_t)n);
    CHECK_OK(ctx, gpt2rt_mode_set(ctx, GPT2RT_MODE_TRAIN));
    int64_t differ = 0, dropped0 = 0;
    for (int s = 0; s < 2; s++) {
        fwd(ctx, patches);
        int64_t dropped = 0, bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float want = ev[i] * (float)(1.0 / (1.0 - (double)ctx->cfg.dropout));
            if (ctx->x0[i] == 0.0f) dropped++;
            else if (ctx->x0[i] != want) bad++;
            if (s == 0) z0[i] = ctx->x0[i] == 0.0f;
            else differ += z0[i] != (ctx->x0[i] == 0.0f);
        }
        if (s == 0) dropped0 = dropped;
        CHECK(binomial_ok(dropped, n, P_DROP) && !bad, "%s x0 at step %d: %lld of %lld dropped, %lld kept values wrong",
              patches ? "patches" : "tokens", s, (long long)dropped, (long long)n, (long long)bad);
        if (s == 0) { CHECK_OK(ctx, gpt2rt_backward(ctx)); CHECK_OK(ctx, gpt2rt_update(ctx, NULL)); }
    }
    CHECK(binomial_ok(differ, n, 2 * P_DROP * (1 - P_DROP)), "%s: the masks of steps 0 and 1 differ on %lld of %lld",
          patches ? "patches" : "tokens", (long long)differ, (long long)n);
    printf("    %s: x0 of %lld elements, %lld dropped at step 0, %lld changed at step 1\n", patches ? "patches" : "tokens",
           (long long)n, (long long)dropped0, (long long)differ);
    free(ev); free(z0);
    gpt2rt_free(ctx);
}

/* 3. evaluation: a dropout model in EVAL mode computes bitwise what the same model
   without dropout does (loss, outputs, gradients); TRAIN mode differs; a backward
   follows the mode of its forward */
static void test_eval(int patches) {
    gpt2rt_ctx *a = make(base_config(patches)), *b = make(drop_config(patches));
    static float oa[4 * 16 * 64], ob[4 * 16 * 64];
    float la = fwd(a, patches);
    int64_t n = output(a, patches, oa);
    CHECK_OK(b, gpt2rt_mode_set(b, GPT2RT_MODE_EVAL));
    float lb = fwd(b, patches);
    output(b, patches, ob);
    CHECK(la == lb && !memcmp(oa, ob, sizeof(float) * (size_t)n), "%s: EVAL loss %.7f vs no dropout %.7f",
          patches ? "patches" : "tokens", (double)lb, (double)la);
    CHECK_OK(b, gpt2rt_mode_set(b, GPT2RT_MODE_TRAIN)); /* after the forward: the backward stays EVAL */
    CHECK_OK(a, gpt2rt_backward(a));
    CHECK_OK(b, gpt2rt_backward(b));
    CHECK(harness_params_equal(a, b, GPT2RT_PARAM_GRAD), "%s: EVAL gradients differ from no dropout",
          patches ? "patches" : "tokens");
    CHECK_OK(a, gpt2rt_update(a, NULL));
    CHECK_OK(b, gpt2rt_update(b, NULL));
    float lt = fwd(b, patches);
    CHECK_OK(b, gpt2rt_mode_set(b, GPT2RT_MODE_EVAL));
    float le = fwd(b, patches), l0 = fwd(a, patches);
    CHECK(lt != le && le == l0, "%s: TRAIN loss %.7f, EVAL %.7f, no dropout %.7f", patches ? "patches" : "tokens",
          (double)lt, (double)le, (double)l0);
    CHECK(gpt2rt_mode_set(b, (gpt2rt_mode)2) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(b), "mode = 2"),
          "mode 2: %s", gpt2rt_last_error(b));
    printf("    %s: TRAIN loss %.6f, EVAL %.6f (== no dropout)\n", patches ? "patches" : "tokens", (double)lt, (double)le);
    gpt2rt_free(a); gpt2rt_free(b);
}

/* 4. recompute, threads, resume: bitwise the same training with dropout on */
static void test_bitwise(int patches) {
    const char *kind = patches ? "patches" : "tokens";
    gpt2rt_config c = drop_config(patches);
    gpt2rt_ctx *base = make(c);
    for (int s = 0; s < 3; s++) step(base, patches);
    struct { gpt2rt_recompute rc; int ck, nt; const char *name; } v[4] = {
        {GPT2RT_RECOMPUTE_SELECTIVE, 0, 2, "recompute SELECTIVE"}, {GPT2RT_RECOMPUTE_FULL, 1, 2, "recompute FULL k=1"},
        {GPT2RT_RECOMPUTE_FULL, 2, 2, "recompute FULL k=2"}, {GPT2RT_RECOMPUTE_NONE, 0, 1, "1 thread (vs 2)"}};
    for (int k = 0; k < 4; k++) {
        gpt2rt_config r = c;
        r.recompute = v[k].rc; r.checkpoint_every = v[k].ck; r.n_threads = v[k].nt;
        gpt2rt_ctx *o = make(r);
        for (int s = 0; s < 3; s++) step(o, patches);
        CHECK(harness_same_state(base, o), "%s: %s with dropout differs from NONE, 2 threads", kind, v[k].name);
        gpt2rt_free(o);
    }
    /* GPT4TS's frozen attention and MLP: the saved inputs change, the masks must not */
    gpt2rt_config f = c;
    f.frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP;
    gpt2rt_ctx *fb = make(f);
    for (int s = 0; s < 3; s++) step(fb, patches);
    for (int k = 0; k < 2; k++) {
        gpt2rt_config r = f;
        r.recompute = k ? GPT2RT_RECOMPUTE_FULL : GPT2RT_RECOMPUTE_SELECTIVE;
        gpt2rt_ctx *o = make(r);
        for (int s = 0; s < 3; s++) step(o, patches);
        CHECK(harness_same_state(fb, o), "%s: frozen attention + MLP, recompute %s with dropout differs from NONE", kind,
              k ? "FULL" : "SELECTIVE");
        gpt2rt_free(o);
    }
    gpt2rt_free(fb);
    /* resume: 1 step, save, 2 more == load the save into a context of another seed's
       initialisation (same seed: the masks' key comes from the state), 2 steps */
    gpt2rt_ctx *a = make(c);
    step(a, patches);
    CHECK_OK(a, gpt2rt_state_save(a, "build/dropout_state_mid.safetensors"));
    step(a, patches); step(a, patches);
    CHECK(harness_same_state(base, a), "%s: a saving run differs", kind);
    gpt2rt_ctx *b = make(c);
    step(b, patches); /* move it away first */
    CHECK_OK(b, gpt2rt_state_load(b, "build/dropout_state_mid.safetensors"));
    step(b, patches); step(b, patches);
    CHECK(harness_same_state(a, b), "%s: resumed training with dropout differs from the uninterrupted run", kind);
    /* and dropout really acted: without it the run differs */
    gpt2rt_ctx *nod = make(base_config(patches));
    for (int s = 0; s < 3; s++) step(nod, patches);
    CHECK(!harness_same_state(base, nod), "%s: training with and without dropout is the same", kind);
    printf("    %s: recompute SELECTIVE / FULL k=1,2 (also frozen attention + MLP), 1 thread, resume: bitwise equal "
           "with dropout %.1f\n", kind,
           (double)P_DROP);
    gpt2rt_free(nod); gpt2rt_free(a); gpt2rt_free(b); gpt2rt_free(base);
}

/* 5. finite differences of the training-mode loss (the masks are fixed by the step
   and the micro-batch: the perturbed forwards come before the backward, which would
   make the next forward the step's second micro-batch), on the largest-gradient
   element of tensors below every dropout site (c_attn twice: anywhere, and among
   the query columns, whose gradient passes through the attention mask's dP) */
static void test_fd(int patches) {
    gpt2rt_config c = drop_config(patches);
    gpt2rt_ctx *ctx = make(c);
    step(ctx, patches); /* away from the initialisation */
    static float w[64 * 128], g[64 * 128];
    /* sharper attention in layer 0: the queries' gradient grows out of the noise */
    int64_t nqkv = 3 * (int64_t)c.n_embd * c.n_embd;
    CHECK_OK(ctx, gpt2rt_param_read(ctx, "transformer.h.0.attn.c_attn.weight", GPT2RT_PARAM_VALUE, w, nqkv));
    for (int64_t i = 0; i < nqkv; i++) w[i] *= 6.0f;
    CHECK_OK(ctx, gpt2rt_param_write(ctx, "transformer.h.0.attn.c_attn.weight", w, nqkv));
    const char *names[6] = {patches ? "in_layer.weight" : "transformer.wte.weight", "transformer.h.0.attn.c_attn.weight",
                            "transformer.h.0.ln_1.weight", "transformer.h.1.mlp.c_fc.weight", "transformer.ln_f.weight",
                            "transformer.h.0.attn.c_attn.weight"};
    int64_t C3 = 3 * (int64_t)c.n_embd; /* c_attn (C, 3C) in the Hugging Face layout: q, k, v columns */
    double worst = 0;
    for (int k = 0; k < 6; k++) {
        int64_t n = 0;
        for (int i = 0; i < gpt2rt_param_count(ctx); i++) {
            gpt2rt_param_info in;
            CHECK_OK(ctx, gpt2rt_param_info_get(ctx, i, &in));
            if (!strcmp(in.name, names[k])) n = in.numel;
        }
        fwd(ctx, patches);
        CHECK_OK(ctx, gpt2rt_backward(ctx));
        CHECK_OK(ctx, gpt2rt_param_read(ctx, names[k], GPT2RT_PARAM_GRAD, g, n));
        CHECK_OK(ctx, gpt2rt_param_read(ctx, names[k], GPT2RT_PARAM_VALUE, w, n));
        gpt2rt__accum_reset(ctx); /* forget the backward (the gradients are read) */
        memset(ctx->grads, 0, sizeof(float) * (size_t)ctx->n_train);
        int64_t j = 0;
        for (int64_t i = 1; i < n; i++)
            if (fabsf(g[i]) > fabsf(g[j]) && (k < 5 || i % C3 < C3 / 3)) j = i;
        float keep = w[j], h = 1e-2f;
        w[j] = keep + h; CHECK_OK(ctx, gpt2rt_param_write(ctx, names[k], w, n));
        double lp = fwd(ctx, patches);
        w[j] = keep - h; CHECK_OK(ctx, gpt2rt_param_write(ctx, names[k], w, n));
        double lm = fwd(ctx, patches);
        w[j] = keep; CHECK_OK(ctx, gpt2rt_param_write(ctx, names[k], w, n));
        double fd = (lp - lm) / (2.0 * h), e = fabs(fd - g[j]) / (fabs(g[j]) + 1e-3);
        /* central difference at h = 1e-2: truncation h^2 |third derivative| / 6 ~ 1e-4 of the
           slope, the fp32 loss's rounding eps32 |L| / h ~ 5e-5; 1e-2 leaves room for a random
           net's curvature */
        CHECK(e < 1e-2, "%s: finite difference %s[%lld]: %.6f vs gradient %.6f", patches ? "patches" : "tokens",
              names[k], (long long)j, fd, (double)g[j]);
        if (e > worst) worst = e;
        if (getenv("FD_DEBUG")) printf("      %s[%lld]: fd %.7f grad %.7f\n", names[k], (long long)j, fd, (double)g[j]);
    }
    printf("    %s: finite differences with dropout on, worst relative error %.2e\n", patches ? "patches" : "tokens", worst);
    gpt2rt_free(ctx);
}

/* 6. two micro-batches of B draw the masks of one batch of 2B: the same update */
static void test_micro(int patches) {
    gpt2rt_config c = drop_config(patches);
    c.batch_size *= 2;
    gpt2rt_ctx *one = make(c);
    c.batch_size /= 2; c.grad_accum = 2;
    gpt2rt_ctx *two = make(c);
    gpt2rt_step_stats s1, s2;
    CHECK_OK(one, patches ? gpt2rt_step_series(one, ts_x, ts_y, &s1) : gpt2rt_step(one, tok_in, tok_tg, &s1));
    CHECK_OK(two, patches ? gpt2rt_step_series(two, ts_x, ts_y, &s2) : gpt2rt_step(two, tok_in, tok_tg, &s2));
    float *a = (float *)malloc(sizeof(float) * 65536), *b = (float *)malloc(sizeof(float) * 65536);
    int64_t na = harness_params(one, GPT2RT_PARAM_VALUE, a), nb = harness_params(two, GPT2RT_PARAM_VALUE, b);
    double e = na == nb ? rel_err(b, a, na) : 1.0;
    /* the same token terms regrouped into 2 partial sums: a few eps32 through the chains,
       ~8 eps32 = 9.5e-7 -> 1e-6 (test_memory's accumulation bound, k = 2) */
    CHECK(e < 1e-6 && fabs(s1.loss - s2.loss) <= 1e-6 * fabs(s1.loss), "%s: 2 micro-batches vs one of twice the "
          "size with dropout: weights %.3g, loss %.7f vs %.7f", patches ? "patches" : "tokens", e, (double)s2.loss,
          (double)s1.loss);
    printf("    %s: 2 micro-batches vs one batch of twice the size, with dropout: weights %.2e\n",
           patches ? "patches" : "tokens", e);
    free(a); free(b);
    gpt2rt_free(one); gpt2rt_free(two);
}

/* 7. the config checks */
static void test_config(void) {
    gpt2rt_memory_plan p;
    gpt2rt_config c;
    const float bad[4] = {-0.1f, 1.0f, NAN, 1.5f};
    for (int f = 0; f < 3; f++)
        for (int k = 0; k < 4; k++) {
            c = base_config(f == 2);
            float *field = f == 0 ? &c.dropout : f == 1 ? &c.attn_dropout : &c.head_dropout;
            const char *name = f == 0 ? "dropout = " : f == 1 ? "attn_dropout = " : "head_dropout = ";
            *field = bad[k];
            CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(p.error, name) &&
                  strstr(p.error, "[0, 1)"), "%s%g: %s", name, (double)bad[k], p.error);
        }
    /* the CUDA backend takes every dropout field (kernels/timeseries.cu checks its masks
       against these): this build, without nvcc, names the backend, not the dropout */
    c = base_config(0);
    c.backend = GPT2RT_BACKEND_CUDA; c.n_threads = 0; c.dropout = c.attn_dropout = c.head_dropout = 0.1f;
    gpt2rt_ctx *ctx;
    gpt2rt_result r = gpt2rt_create(&ctx, &c);
    CHECK(r == GPT2RT_ERR_UNAVAILABLE && strstr(gpt2rt_last_error(ctx), "compiled by nvcc") &&
          !strstr(gpt2rt_last_error(ctx), "dropout"), "CUDA + dropout in a C build: %s: %s", gpt2rt_result_string(r),
          gpt2rt_last_error(ctx));
    gpt2rt_free(ctx);
    c = base_config(0);
    CHECK(gpt2rt_plan(&c, &p) == GPT2RT_OK && p.config.dropout == 0.0f && p.config.attn_dropout == 0.0f &&
          p.config.head_dropout == 0.0f, "default: off");
    ctx = make(c);
    CHECK(gpt2rt_mode_get(ctx) == GPT2RT_MODE_TRAIN && gpt2rt_mode_get(NULL) == GPT2RT_MODE_TRAIN, "default mode TRAIN");
    gpt2rt_free(ctx);
}

int main(void) {
    uint64_t s = 42;
    for (size_t i = 0; i < sizeof tok_in / sizeof tok_in[0]; i++) {
        tok_in[i] = (int32_t)(harness_rng_next(&s) % 64);
        tok_tg[i] = (int32_t)(harness_rng_next(&s) % 64);
    }
    for (size_t i = 0; i < sizeof ts_x / sizeof ts_x[0]; i++)
        ts_x[i] = sinf(0.3f * (float)(i / 2)) * (1.0f + (float)(i % 2)) + 0.3f * (float)harness_rng_uniform(&s);
    for (size_t i = 0; i < sizeof ts_y / sizeof ts_y[0]; i++) ts_y[i] = (float)harness_rng_uniform(&s);
    test_masks();
    test_config();
    for (int patches = 0; patches < 2; patches++) {
        test_embed_mask(patches);
        test_eval(patches);
        test_bitwise(patches);
        test_fd(patches);
        test_micro(patches);
    }
    return harness_finish();
}
