/* Time series (input = PATCHES, head = REGRESSION) against PyTorch: the fixture in
   tests/fixtures/ts_tiny was written by tools/gen_ts_fixture.py from a GPT4TS-style
   forecaster around Hugging Face transformers' GPT2Model (B=3, L=32, M=2, patch 8
   stride 4, C=16, 2 layers, horizon 8). This test reads it (no Python) and compares
   the predictions, the loss, every gradient, 3 AdamW steps (all trained, and
   attention + MLP frozen as GPT4TS does), the same with RevIN's learned affine;
   then finite differences on RevIN's affine, in_layer,
   out_layer and wpe, the plan (no wte, no LM head), the config checks, a GPT-2
   truncation load, save / resume bitwise, recompute bitwise, micro-batches. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

#define FIX "tests/fixtures/ts_tiny/"
/* Tolerances from fp32's eps (1.19e-7) and the reductions behind each number, with the
   error measured on the committed fixture (gcc 12, x86-64 / v3 / native AVX-512, one AMD
   EPYC) and the margin:
   - predictions, losses: eps x sqrt(n_patches x C = 128), the head's dot product, the
     longest = 1.35e-6 -> 1.4e-6; measured 2.8e-7 (predictions), 2.0e-7 (losses)
   - gradients: a weight's gradient sums the rows' products of the forward's and the
     backward's errors: eps x sqrt(128) x 3 = 4.0e-6; measured 1.2e-6
   - values after 3 AdamW steps, as the update's error in L2 relative to the update:
     each step's m/sqrt(v) carries the gradient's relative error twice (once in m, half
     twice in sqrt(v)), so 3 steps x 2 x 4e-6 = 2.4e-5; measured 6.2e-6 (ln_2.weight, 16
     floats: one small gradient weighs more in a small tensor), 2.1e-6 elsewhere */
#define TOL_FWD 1.4e-6
#define TOL_GRAD 4e-6
#define TOL_UPDATE 2.4e-5

/* the reference file holds inputs, predictions and gradients, not a model: the
   public API cannot read it, the header's safetensors parser can */
static gpt2rt_ctx *ref_ctx;
static gpt2rt__st ref;

static const float *ref_f32(const char *name, int64_t *n) {
    const gpt2rt__st_tensor *t = gpt2rt__st_find(&ref, name);
    if (!t || t->dtype != GPT2RT__F32) { printf("fixture lacks %s\n", name); exit(2); }
    if (n) *n = (int64_t)(t->end - t->begin) / 4;
    return (const float *)(ref.data + t->begin);
}

static double meta_num(const char *key) {
    const char *s = gpt2rt__st_meta(&ref, key);
    if (!s) { printf("fixture metadata lacks %s\n", key); exit(2); }
    return atof(s);
}

static gpt2rt_config fixture_config(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.input = GPT2RT_INPUT_PATCHES;
    c.head = GPT2RT_HEAD_REGRESSION;
    c.n_layer = (int)meta_num("n_layer");
    c.n_head = (int)meta_num("n_head");
    c.n_embd = (int)meta_num("n_embd");
    c.max_seq_len = (int)meta_num("n_positions");
    c.batch_size = (int)meta_num("B");
    c.seq_len = (int)meta_num("L");
    c.n_channels = (int)meta_num("M");
    c.patch_len = (int)meta_num("patch_len");
    c.patch_stride = (int)meta_num("stride");
    c.horizon = (int)meta_num("horizon");
    c.lr = (float)meta_num("lr");
    c.weight_decay = (float)meta_num("weight_decay");
    c.grad_clip = (float)meta_num("grad_clip");
    c.beta1 = (float)meta_num("beta1");
    c.beta2 = (float)meta_num("beta2");
    c.eps = (float)meta_num("eps");
    return c;
}

static gpt2rt_ctx *make(gpt2rt_config c) {
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, &c) != GPT2RT_OK) { printf("create: %s\n", gpt2rt_last_error(ctx)); exit(2); }
    CHECK_OK(ctx, gpt2rt_weights_load(ctx, FIX "model.safetensors"));
    return ctx;
}

/* every parameter of ctx against the reference's prefix.name: a gradient as its largest
   error relative to the tensor's largest value (rel_err); a value after AdamW steps as
   the error of its update (value - the value in init, the file the run started from) in
   L2 relative to the update's L2 */
static double compare_params(gpt2rt_ctx *ctx, gpt2rt_param_what what, const char *prefix, const char *label,
                             const char *init) {
    double worst = 0;
    float *buf = (float *)malloc(sizeof(float) * 65536), *b0 = (float *)malloc(sizeof(float) * 65536);
    gpt2rt_ctx *ctx0 = NULL;
    if (init) {
        gpt2rt_config c0 = gpt2rt_config_get(ctx);
        if (gpt2rt_create(&ctx0, &c0) != GPT2RT_OK) { printf("create: %s\n", gpt2rt_last_error(ctx0)); exit(2); }
        CHECK_OK(ctx0, gpt2rt_weights_load(ctx0, init));
    }
    double lr = meta_num("lr"), steps = meta_num("steps");
    for (int i = 0; i < gpt2rt_param_count(ctx); i++) {
        gpt2rt_param_info in;
        CHECK_OK(ctx, gpt2rt_param_info_get(ctx, i, &in));
        char key[160];
        snprintf(key, sizeof key, "%s.%s", prefix, in.name);
        int64_t n;
        const float *r = ref_f32(key, &n);
        CHECK(n == in.numel, "%s: %s has %lld elements, the reference %lld", label, in.name, (long long)in.numel,
              (long long)n);
        if (n != in.numel || n > 65536) continue;
        CHECK_OK(ctx, gpt2rt_param_read(ctx, in.name, what, buf, n));
        if (!init) {
            double e = rel_err(buf, r, n);
            CHECK(e <= TOL_GRAD, "%s: %s relative error %.3g > %g", label, in.name, e, TOL_GRAD);
            if (e > worst) worst = e;
            continue;
        }
        CHECK_OK(ctx0, gpt2rt_param_read(ctx0, in.name, GPT2RT_PARAM_VALUE, b0, n));
        int kbias = strstr(in.name, "attn.c_attn.bias") != NULL;
        if (kbias) {
            /* the key bias: its gradient is 0 in exact arithmetic (softmax ignores a
               shift every key shares), so AdamW's m/sqrt(v) turns both sides' rounding
               noise into steps of any sign, each at most ~lr: |ours - theirs| <= 2 x
               steps x lr. Query and value biases are held to the update bound */
            int64_t C = n / 3;
            double ek = 0;
            for (int64_t j = C; j < 2 * C; j++) ek = fmax(ek, fabs((double)buf[j] - r[j]));
            CHECK(ek <= 2 * steps * lr, "%s: %s key bias error %.3g > 2 x %g steps x lr %g", label, in.name, ek, steps, lr);
            for (int64_t j = C; j < 2 * C; j++) buf[j] = b0[j]; /* below: query and value only */
        }
        double err2 = 0, upd2 = 0;
        for (int64_t j = 0; j < n; j++) {
            double theirs = kbias && j >= n / 3 && j < 2 * n / 3 ? 0.0 : (double)r[j] - b0[j];
            double ours = (double)buf[j] - b0[j];
            err2 += (ours - theirs) * (ours - theirs);
            upd2 += theirs * theirs;
        }
        double e = upd2 > 0 ? sqrt(err2 / upd2) : err2 > 0 ? INFINITY : 0.0; /* frozen: no update on either side */
        CHECK(e <= TOL_UPDATE, "%s: %s update error %.3g of the update > %g", label, in.name, e, TOL_UPDATE);
        if (e > worst) worst = e;
    }
    free(buf);
    free(b0);
    gpt2rt_free(ctx0);
    return worst;
}

static float loss_at(gpt2rt_ctx *ctx, const float *x, const float *y) {
    float l = 0;
    CHECK_OK(ctx, gpt2rt_forward_series(ctx, x, y, &l));
    return l;
}

/* RevIN against its definition (GPT4TS / PatchTST: per row and channel, mean and
   std = sqrt(biased variance + 1e-5) over the lookback; the head's output times std plus
   mean). With in_layer's weight zero every patch embeds to its bias alone, so the head's
   output o is the same for every window and a prediction is exactly o x std + mean. Three
   windows of zero mean (+a, -a alternating) and a = 1, 1e-3, 3e-3: the second's variance
   (1e-6) is a tenth of eps, so the prediction follows sqrt(var + 1e-5), not the data. */
static void revin_definition(gpt2rt_config cfg) {
    if (cfg.batch_size < 3) { SKIP("RevIN definition check: the fixture's batch has %d windows, 3 needed", cfg.batch_size); return; }
    gpt2rt_ctx *ctx = make(cfg);
    int64_t B = cfg.batch_size, L = cfg.seq_len, M = cfg.n_channels, H = cfg.horizon;
    gpt2rt_param_info in;
    int found = 0;
    for (int i = 0; i < gpt2rt_param_count(ctx) && !found; i++)
        found = gpt2rt_param_info_get(ctx, i, &in) == GPT2RT_OK && !strcmp(in.name, "in_layer.weight");
    CHECK(found, "no in_layer.weight");
    if (!found) { gpt2rt_free(ctx); return; }
    float *zero = (float *)calloc((size_t)in.numel, sizeof(float));
    CHECK_OK(ctx, gpt2rt_param_write(ctx, "in_layer.weight", zero, in.numel));
    float *x = (float *)malloc(sizeof(float) * (size_t)(B * L * M)), *pred = (float *)malloc(sizeof(float) * (size_t)(B * H * M));
    const double amp[3] = {1.0, 1e-3, 3e-3};
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < L; t++)
            for (int64_t c = 0; c < M; c++) x[(b * L + t) * M + c] = (float)((t % 2 ? -1 : 1) * amp[b % 3] * (1 + c));
    CHECK_OK(ctx, gpt2rt_forward_series(ctx, x, NULL, NULL));
    CHECK_OK(ctx, gpt2rt_predictions(ctx, pred, B * H * M));
    double worst = 0;
    for (int64_t b = 1; b < 3; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t c = 0; c < M; c++) {
                double a0 = amp[0] * (1 + c), ab = amp[b] * (1 + c); /* mean 0, biased variance a^2 (L even) */
                double o = pred[(0 * H + h) * M + c] / sqrt(a0 * a0 + 1e-5);
                double want = o * sqrt(ab * ab + 1e-5), e = fabs(pred[(b * H + h) * M + c] - want) / fabs(want);
                if (e > worst) worst = e;
            }
    /* each prediction is o x std in fp32: the head's o carries the forward's rounding
       (identical in every window: the same inputs to the head), std and the product one
       rounding each: 4 eps32 = 4.8e-7 -> 1e-6 */
    printf("    RevIN against its definition (std = sqrt(var + 1e-5), variance 1e-6 and 9e-6 windows): rel error %.2e "
           "(bound 1e-6)\n", worst);
    CHECK(worst <= 1e-6, "RevIN: predictions of low-variance windows off sqrt(var + 1e-5) by %.3g relative", worst);
    free(zero); free(x); free(pred);
    gpt2rt_free(ctx);
}

int main(void) {
    gpt2rt_config zero;
    memset(&zero, 0, sizeof zero);
    zero.n_layer = 1; zero.n_head = 1; zero.n_embd = 4; zero.vocab_size = 4; zero.max_seq_len = 4;
    if (gpt2rt_create(&ref_ctx, &zero) != GPT2RT_OK) return 2;
    size_t len;
    unsigned char *ref_buf = read_all(FIX "reference.safetensors", &len);
    if (!ref_buf) { printf("cannot read " FIX "reference.safetensors (run from the repo root)\n"); return 2; }
    if (gpt2rt__st_parse(ref_ctx, ref_buf, len, "reference", &ref) != GPT2RT_OK) {
        printf("%s\n", gpt2rt_last_error(ref_ctx));
        return 2;
    }
    gpt2rt_config cfg = fixture_config();
    int64_t n_pred, n;
    const float *x = ref_f32("x", NULL), *y = ref_f32("y", NULL), *pred_ref = ref_f32("pred", &n_pred);
    float *pred = (float *)malloc(sizeof(float) * (size_t)n_pred);

    /* 1. predictions, loss and every gradient */
    gpt2rt_ctx *ctx = make(cfg);
    float loss = 0;
    CHECK_OK(ctx, gpt2rt_forward_series(ctx, x, y, &loss));
    CHECK_OK(ctx, gpt2rt_predictions(ctx, pred, n_pred));
    double e_pred = rel_err(pred, pred_ref, n_pred), e_loss = fabs(loss - ref_f32("loss", NULL)[0]) / ref_f32("loss", NULL)[0];
    CHECK(e_pred <= TOL_FWD, "predictions: relative error %.3g", e_pred);
    CHECK(e_loss <= TOL_FWD, "loss %.7f vs PyTorch %.7f", (double)loss, (double)ref_f32("loss", NULL)[0]);
    CHECK_OK(ctx, gpt2rt_backward(ctx));
    double e_grad = compare_params(ctx, GPT2RT_PARAM_GRAD, "grad", "gradient", NULL);
    CHECK_OK(ctx, gpt2rt_predictions(ctx, pred, n_pred)); /* the backward keeps them */
    CHECK(rel_err(pred, pred_ref, n_pred) <= TOL_FWD, "predictions after the backward");
    printf("    vs PyTorch: predictions %.2e, loss %.2e, worst gradient %.2e (relative)\n", e_pred, e_loss, e_grad);
    gpt2rt_free(ctx);

    /* 2. AdamW steps: every group trained, then GPT4TS's frozen attention + MLP */
    for (int frozen = 0; frozen < 2; frozen++) {
        gpt2rt_config c = cfg;
        if (frozen) c.frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP;
        ctx = make(c);
        int steps = (int)meta_num("steps");
        const float *ref_losses = ref_f32(frozen ? "frozen_loss" : "step_loss", NULL);
        double worst_loss = 0;
        for (int s = 0; s < steps; s++) {
            gpt2rt_step_stats st;
            CHECK_OK(ctx, gpt2rt_step_series(ctx, x, y, &st));
            double e = fabs(st.loss - ref_losses[s]) / fabs(ref_losses[s]);
            CHECK(e <= TOL_FWD, "%s step %d: loss %.7f vs PyTorch %.7f", frozen ? "frozen" : "all", s, (double)st.loss,
                  (double)ref_losses[s]);
            if (e > worst_loss) worst_loss = e;
        }
        double e = compare_params(ctx, GPT2RT_PARAM_VALUE, frozen ? "frozen_final" : "final", "after AdamW", FIX "model.safetensors");
        printf("    %d AdamW steps (%s): losses %.2e, updates %.2e (L2, relative)\n", steps,
               frozen ? "attention + MLP frozen" : "all trained", worst_loss, e);
        if (frozen) {
            float g[16 * 48];
            CHECK(gpt2rt_param_read(ctx, "transformer.h.0.attn.c_attn.weight", GPT2RT_PARAM_GRAD, g, 16 * 48) ==
                  GPT2RT_ERR_INVALID_ARGUMENT, "a frozen weight has no gradient");
            gpt2rt_memory_plan pa, pf;
            gpt2rt_config all = cfg;
            CHECK_OK(ctx, gpt2rt_plan_allocated(ctx, &pf));
            gpt2rt_plan(&all, &pa);
            CHECK(pf.n_trainable < pa.n_trainable && pf.bytes[0][GPT2RT_MEM_GRADS] == (uint64_t)pf.n_trainable * 4,
                  "frozen: %lld of %lld trainable, grads %llu bytes", (long long)pf.n_trainable,
                  (long long)pa.n_trainable, (unsigned long long)pf.bytes[0][GPT2RT_MEM_GRADS]);
        }
        gpt2rt_free(ctx);
    }

    /* 2b. RevIN's learned affine (PatchTST's): predictions, loss, every gradient, 3 AdamW steps */
    {
        gpt2rt_config c = cfg;
        c.revin_affine = 1;
        if (gpt2rt_create(&ctx, &c) != GPT2RT_OK) { printf("create: %s\n", gpt2rt_last_error(ctx)); return 2; }
        CHECK_OK(ctx, gpt2rt_weights_load(ctx, FIX "model_affine.safetensors"));
        const float *lref = ref_f32("affine.loss", NULL);
        CHECK_OK(ctx, gpt2rt_forward_series(ctx, x, y, &loss));
        CHECK_OK(ctx, gpt2rt_predictions(ctx, pred, n_pred));
        double ep = rel_err(pred, ref_f32("affine.pred", NULL), n_pred), el = fabs(loss - lref[0]) / lref[0];
        CHECK(ep <= TOL_FWD && el <= TOL_FWD, "affine: predictions %.3g, loss %.7f vs %.7f", ep, (double)loss, (double)lref[0]);
        CHECK_OK(ctx, gpt2rt_backward(ctx));
        double eg = compare_params(ctx, GPT2RT_PARAM_GRAD, "affine.grad", "affine gradient", NULL);
        CHECK_OK(ctx, gpt2rt_update(ctx, NULL)); /* a first step taken apart, then two whole ones */
        const float *sl = ref_f32("affine.step_loss", NULL);
        double es = 0;
        for (int s = 1; s < (int)meta_num("steps"); s++) {
            gpt2rt_step_stats st;
            CHECK_OK(ctx, gpt2rt_step_series(ctx, x, y, &st));
            double e = fabs(st.loss - sl[s]) / fabs(sl[s]);
            CHECK(e <= TOL_FWD, "affine step %d: loss %.7f vs %.7f", s, (double)st.loss, (double)sl[s]);
            if (e > es) es = e;
        }
        double ef = compare_params(ctx, GPT2RT_PARAM_VALUE, "affine.final", "affine after AdamW", FIX "model_affine.safetensors");
        printf("    RevIN affine vs PyTorch: predictions %.2e, loss %.2e, worst gradient %.2e, steps %.2e, "
               "weights %.2e\n", ep, el, eg, es, ef);
        /* finite differences on the affine itself */
        CHECK_OK(ctx, gpt2rt_forward_series(ctx, x, y, NULL));
        CHECK_OK(ctx, gpt2rt_backward(ctx));
        const char *an[2] = {"revin.affine_weight", "revin.affine_bias"};
        double worst = 0;
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 2; j++) {
                float w[2], g[2];
                CHECK_OK(ctx, gpt2rt_param_read(ctx, an[k], GPT2RT_PARAM_GRAD, g, 2));
                CHECK_OK(ctx, gpt2rt_param_read(ctx, an[k], GPT2RT_PARAM_VALUE, w, 2));
                float keep = w[j], h = 1e-2f;
                w[j] = keep + h; CHECK_OK(ctx, gpt2rt_param_write(ctx, an[k], w, 2));
                double lp = loss_at(ctx, x, y);
                w[j] = keep - h; CHECK_OK(ctx, gpt2rt_param_write(ctx, an[k], w, 2));
                double lm = loss_at(ctx, x, y);
                w[j] = keep; CHECK_OK(ctx, gpt2rt_param_write(ctx, an[k], w, 2));
                double fd = (lp - lm) / (2.0 * h), e = fabs(fd - g[j]) / (fabs(g[j]) + 1e-2);
                /* central difference at h = 1e-2: truncation h^2 |third derivative| / 6 ~ 1e-4 of the
                   slope, the fp32 loss's rounding eps32 |L| / h ~ 5e-5; 1e-2 leaves room for a random
                   net's curvature */
                CHECK(e < 1e-2, "finite difference %s[%d]: %.6f vs gradient %.6f", an[k], j, fd, (double)g[j]);
                if (e > worst) worst = e;
            }
        printf("    finite differences (RevIN affine): worst %.2e\n", worst);
        gpt2rt_free(ctx);
    }

    /* 3. finite differences on the new parts: in_layer, out_layer, wpe (central, fp32
       loss, so a loose bound; it catches a wrong index or a missing term) */
    {
        ctx = make(cfg);
        CHECK_OK(ctx, gpt2rt_forward_series(ctx, x, y, NULL));
        CHECK_OK(ctx, gpt2rt_backward(ctx));
        const char *names[5] = {"in_layer.weight", "in_layer.bias", "out_layer.weight", "out_layer.bias",
                                "transformer.wpe.weight"};
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
            float *w = (float *)malloc(sizeof(float) * (size_t)in.numel), *g = (float *)malloc(sizeof(float) * (size_t)in.numel);
            CHECK_OK(ctx, gpt2rt_param_read(ctx, names[k], GPT2RT_PARAM_GRAD, g, in.numel));
            CHECK_OK(ctx, gpt2rt_param_read(ctx, names[k], GPT2RT_PARAM_VALUE, w, in.numel));
            /* the 3 largest gradients, and (wpe) an unused position's zero */
            for (int rep = 0; rep < 4; rep++) {
                int64_t j = 0;
                if (rep < 3) {
                    for (int64_t i = 0; i < in.numel; i++) if (fabsf(g[i]) > fabsf(g[j])) j = i;
                } else if (k == 4) j = in.numel - 1; /* position 9 > n_patches: no gradient */
                else continue;
                float keep = w[j], h = 1e-2f, gj = g[j];
                w[j] = keep + h; CHECK_OK(ctx, gpt2rt_param_write(ctx, names[k], w, in.numel));
                double lp = loss_at(ctx, x, y);
                w[j] = keep - h; CHECK_OK(ctx, gpt2rt_param_write(ctx, names[k], w, in.numel));
                double lm = loss_at(ctx, x, y);
                w[j] = keep; CHECK_OK(ctx, gpt2rt_param_write(ctx, names[k], w, in.numel));
                double fd = (lp - lm) / (2.0 * h), e = fabs(fd - gj) / (fabs(gj) + 1e-2);
                /* as the affine's finite differences above */
                CHECK(e < 1e-2, "finite difference %s[%lld]: %.6f vs gradient %.6f", names[k], (long long)j, fd,
                      (double)gj);
                if (e > worst) worst = e;
                g[j] = 0; /* next largest */
            }
            free(w); free(g);
        }
        printf("    finite differences (in_layer, out_layer, wpe): worst %.2e\n", worst);
        gpt2rt_free(ctx);
    }

    /* 4. the plan: no token embedding, no LM head; logits are the (B*M, H) predictions */
    {
        gpt2rt_memory_plan p;
        CHECK(gpt2rt_plan(&cfg, &p) == GPT2RT_OK, "plan: %s", p.error);
        CHECK(p.n_params == (int64_t)meta_num("n_params") && p.n_params_padded == p.n_params,
              "plan: %lld parameters, PyTorch's model without wte %lld", (long long)p.n_params,
              (long long)meta_num("n_params"));
        CHECK(p.bytes[0][GPT2RT_MEM_WEIGHTS] == (uint64_t)p.n_params * 4, "weights %llu bytes for %lld parameters",
              (unsigned long long)p.bytes[0][GPT2RT_MEM_WEIGHTS], (long long)p.n_params);
        CHECK(p.bytes[0][GPT2RT_MEM_LOGITS] == (uint64_t)(cfg.batch_size * cfg.n_channels * cfg.horizon * 4),
              "logits %llu bytes", (unsigned long long)p.bytes[0][GPT2RT_MEM_LOGITS]);
        ctx = make(cfg);
        gpt2rt_memory_plan a;
        CHECK_OK(ctx, gpt2rt_plan_allocated(ctx, &a));
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++)
            CHECK(a.bytes[0][i] == p.bytes[0][i], "%s: planned %llu, allocated %llu", gpt2rt_mem_name((gpt2rt_mem)i),
                  (unsigned long long)p.bytes[0][i], (unsigned long long)a.bytes[0][i]);
        CHECK(a.n_params == p.n_params, "allocated parameters %lld", (long long)a.n_params);
        int has_wte = 0;
        for (int i = 0; i < gpt2rt_param_count(ctx); i++) {
            gpt2rt_param_info in;
            gpt2rt_param_info_get(ctx, i, &in);
            if (strstr(in.name, "wte")) has_wte = 1;
        }
        CHECK(!has_wte, "a patch model lists a token embedding");
        gpt2rt_config tok = cfg;
        tok.input = GPT2RT_INPUT_TOKENS; tok.head = GPT2RT_HEAD_LM;
        tok.patch_len = tok.patch_stride = tok.n_channels = tok.horizon = 0; tok.seq_len = 8;
        gpt2rt_memory_plan pt;
        CHECK(gpt2rt_plan(&tok, &pt) == GPT2RT_OK, "token plan: %s", pt.error);
        char table[4096];
        gpt2rt_plan_format(&p, table, sizeof table);
        CHECK(pt.n_params > p.n_params, "tokens %lld parameters (wte), patches %lld", (long long)pt.n_params,
              (long long)p.n_params);

        /* wrong calls for the kind of input, bad values */
        int32_t ids[64] = {0};
        float out[64];
        CHECK(gpt2rt_forward(ctx, ids, ids, NULL) == GPT2RT_ERR_STATE && strstr(gpt2rt_last_error(ctx), "_series"),
              "gpt2rt_forward on a patch model: %s", gpt2rt_last_error(ctx));
        CHECK(gpt2rt_logits(ctx, out, 64) == GPT2RT_ERR_STATE, "gpt2rt_logits on a patch model");
        CHECK(gpt2rt_predictions(ctx, out, 48) == GPT2RT_ERR_STATE, "predictions before any forward");
        CHECK_OK(ctx, gpt2rt_forward_series(ctx, x, NULL, NULL));
        CHECK(gpt2rt_predictions(ctx, out, 47) == GPT2RT_ERR_INVALID_ARGUMENT &&
              strstr(gpt2rt_last_error(ctx), "48"), "predictions count: %s", gpt2rt_last_error(ctx));
        CHECK(gpt2rt_backward(ctx) == GPT2RT_ERR_STATE, "backward without targets");
        float *bad = (float *)malloc(sizeof(float) * 3 * 32 * 2);
        memcpy(bad, x, sizeof(float) * 3 * 32 * 2);
        bad[1 * 64 + 5 * 2 + 1] = NAN;
        CHECK(gpt2rt_forward_series(ctx, bad, y, NULL) == GPT2RT_ERR_INVALID_ARGUMENT &&
              strstr(gpt2rt_last_error(ctx), "window 1, step 5, channel 1"), "NaN input: %s", gpt2rt_last_error(ctx));
        free(bad);
        gpt2rt_free(ctx);
        gpt2rt_ctx *tc;
        tok.seq_len = 4;
        CHECK(gpt2rt_create(&tc, &tok) == GPT2RT_OK, "token ctx: %s", gpt2rt_last_error(tc));
        CHECK(gpt2rt_forward_series(tc, x, y, NULL) == GPT2RT_ERR_STATE, "series call on a token model");
        gpt2rt_free(tc);

        gpt2rt_config c;
        c = cfg; c.head = GPT2RT_HEAD_LM;
        CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(p.error, "REGRESSION"), "head LM: %s", p.error);
        c = cfg; c.input = GPT2RT_INPUT_TOKENS;
        CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT, "tokens + regression: %s", p.error);
        c = tok; c.horizon = 5;
        CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(p.error, "horizon = 5"), "tokens + horizon: %s", p.error);
        c = tok; c.revin_affine = 1;
        CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(p.error, "revin_affine = 1"), "tokens + affine: %s", p.error);
        c = cfg; c.max_seq_len = 7;
        CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(p.error, "= 8 exceeds max_seq_len = 7"),
              "too many patches: %s", p.error);
        c = cfg; c.patch_len = 33;
        CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(p.error, "patch_len = 33"), "patch > lookback: %s", p.error);
        c = cfg; c.frozen = GPT2RT_GROUP_TOKEN_EMBED;
        CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT, "frozen wte on patches: %s", p.error);
        c = cfg; c.frozen = GPT2RT_GROUP_HEAD | GPT2RT_GROUP_POS_EMBED | GPT2RT_GROUP_LAYERNORM | GPT2RT_GROUP_ATTENTION |
                            GPT2RT_GROUP_MLP;
        CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(p.error, "nothing to train"), "all frozen: %s", p.error);
        c = cfg; c.n_channels = -1;
        CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(p.error, "n_channels = -1"), "channels: %s", p.error);
        memset(&c, 0, sizeof c);
        c.input = GPT2RT_INPUT_PATCHES; c.head = GPT2RT_HEAD_REGRESSION;
        CHECK(gpt2rt_plan(&c, &p) == GPT2RT_OK && p.config.patch_len == 16 && p.config.patch_stride == 8 &&
              p.config.n_channels == 1 && p.config.horizon == 96 && p.config.seq_len == 336,
              "GPT4TS defaults: %s", p.error);
    }

    /* 5. a GPT-2 checkpoint truncated to its first layer: blocks, wpe, ln_f load, wte is
       skipped, in_layer and out_layer come from the file when it has them */
    {
        gpt2rt_config c = cfg;
        c.n_layer = 1;
        ctx = make(c);
        gpt2rt_ctx *full = make(cfg);
        const char *names[4] = {"transformer.h.0.mlp.c_fc.weight", "transformer.wpe.weight", "in_layer.weight",
                                "out_layer.bias"};
        for (int k = 0; k < 4; k++) {
            float a[16 * 64], b[16 * 64];
            int64_t cnt = k == 0 ? 16 * 64 : k == 1 ? 10 * 16 : k == 2 ? 16 * 8 : 8;
            CHECK_OK(ctx, gpt2rt_param_read(ctx, names[k], GPT2RT_PARAM_VALUE, a, cnt));
            CHECK_OK(full, gpt2rt_param_read(full, names[k], GPT2RT_PARAM_VALUE, b, cnt));
            CHECK(!memcmp(a, b, sizeof(float) * (size_t)cnt), "truncated load: %s differs", names[k]);
        }
        CHECK(gpt2rt_param_count(ctx) == gpt2rt_param_count(full) - 12, "1 layer: %d tensors", gpt2rt_param_count(ctx));
        gpt2rt_free(full);
        gpt2rt_free(ctx);
        /* a real GPT2LMHeadModel file (hf_tiny: width 64, 2 layers) under a 1-layer patch
           model: its first block, wpe and ln_f load, wte and the LM head are skipped,
           in_layer and out_layer (not in the file) keep their initial values */
        c = cfg;
        c.n_embd = 64; c.n_layer = 1; c.max_seq_len = 64;
        gpt2rt_ctx *g, *g0;
        if (gpt2rt_create(&g, &c) != GPT2RT_OK || gpt2rt_create(&g0, &c) != GPT2RT_OK) return 2;
        CHECK_OK(g, gpt2rt_weights_load(g, "tests/fixtures/hf_tiny/model.safetensors"));
        static float a[64 * 256], b[64 * 256];
        CHECK_OK(g, gpt2rt_param_read(g, "in_layer.weight", GPT2RT_PARAM_VALUE, a, 64 * 8));
        CHECK_OK(g0, gpt2rt_param_read(g0, "in_layer.weight", GPT2RT_PARAM_VALUE, b, 64 * 8));
        CHECK(!memcmp(a, b, sizeof(float) * 64 * 8), "in_layer changed by a GPT-2 load");
        CHECK_OK(g, gpt2rt_param_read(g, "transformer.h.0.mlp.c_fc.weight", GPT2RT_PARAM_VALUE, a, 64 * 256));
        CHECK_OK(g0, gpt2rt_param_read(g0, "transformer.h.0.mlp.c_fc.weight", GPT2RT_PARAM_VALUE, b, 64 * 256));
        CHECK(memcmp(a, b, sizeof(float) * 64 * 256) != 0, "the GPT-2 block did not load");
        CHECK_OK(g, gpt2rt_forward_series(g, x, y, NULL));
        gpt2rt_free(g);
        gpt2rt_free(g0);
    }

    /* 6. save + resume == uninterrupted (bitwise, through state_save's bytes); weights_save
       + weights_load round trip */
    {
        ctx = make(cfg);
        gpt2rt_step_stats st;
        for (int s = 0; s < 2; s++) CHECK_OK(ctx, gpt2rt_step_series(ctx, x, y, &st));
        CHECK_OK(ctx, gpt2rt_state_save(ctx, "build/ts_state_mid.safetensors"));
        for (int s = 0; s < 2; s++) CHECK_OK(ctx, gpt2rt_step_series(ctx, x, y, &st));
        CHECK_OK(ctx, gpt2rt_state_save(ctx, "build/ts_state_a.safetensors"));
        CHECK_OK(ctx, gpt2rt_weights_save(ctx, "build/ts_weights"));
        float *pa = (float *)malloc(sizeof(float) * 16384), *pb = (float *)malloc(sizeof(float) * 16384);
        int64_t na = harness_params(ctx, GPT2RT_PARAM_VALUE, pa);
        gpt2rt_free(ctx);
        gpt2rt_config c = cfg;
        c.seed = 99; /* different init: everything must come from the file */
        gpt2rt_ctx *b;
        if (gpt2rt_create(&b, &c) != GPT2RT_OK) return 2;
        CHECK_OK(b, gpt2rt_state_load(b, "build/ts_state_mid.safetensors"));
        for (int s = 0; s < 2; s++) CHECK_OK(b, gpt2rt_step_series(b, x, y, &st));
        CHECK_OK(b, gpt2rt_state_save(b, "build/ts_state_b.safetensors"));
        size_t la, lb;
        unsigned char *fa = read_all("build/ts_state_a.safetensors", &la), *fb = read_all("build/ts_state_b.safetensors", &lb);
        CHECK(fa && fb && la == lb && !memcmp(fa, fb, la),
              "resumed training differs from the uninterrupted run");
        free(fa); free(fb);
        CHECK(st.step == 4, "step %lld", (long long)st.step);
        gpt2rt_free(b);
        if (gpt2rt_create(&b, &c) != GPT2RT_OK) return 2;
        CHECK_OK(b, gpt2rt_weights_load(b, "build/ts_weights"));
        int64_t nb = harness_params(b, GPT2RT_PARAM_VALUE, pb);
        CHECK(na == nb && !memcmp(pa, pb, sizeof(float) * (size_t)na), "weights_save + weights_load round trip");
        gpt2rt_config back;
        memset(&back, 0, sizeof back);
        char err[256];
        CHECK(gpt2rt_config_load(&back, "build/ts_weights", err, sizeof err) == GPT2RT_OK && back.n_embd == cfg.n_embd &&
              back.n_layer == cfg.n_layer && back.max_seq_len == cfg.max_seq_len, "config.json of a patch model: %s", err);
        /* a state of another shape is refused with the numbers */
        gpt2rt_free(b);
        c = cfg; c.horizon = 4;
        if (gpt2rt_create(&b, &c) != GPT2RT_OK) return 2;
        CHECK(gpt2rt_state_load(b, "build/ts_state_a.safetensors") == GPT2RT_ERR_FORMAT &&
              strstr(gpt2rt_last_error(b), "horizon = 8"), "horizon mismatch: %s", gpt2rt_last_error(b));
        gpt2rt_free(b);
        free(pa); free(pb);
    }
    /* 7. recompute (selective, full) gives bitwise the same training; two micro-batches
       of B windows give the update of one batch of 2B (as for tokens) */
    {
        gpt2rt_config c = cfg;
        c.batch_size = 2;
        c.revin_affine = 1; /* the affine's buffers too (loaded file lacks it: ones and zeros) */
        static float x4[4 * 32 * 2], y4[4 * 8 * 2];
        for (int i = 0; i < 4 * 32 * 2; i++) x4[i] = x[i % (3 * 32 * 2)] + 0.1f * (float)(i / (3 * 32 * 2));
        for (int i = 0; i < 4 * 8 * 2; i++) y4[i] = y[i % (3 * 8 * 2)];
        gpt2rt_ctx *base = make(c);
        gpt2rt_step_stats st;
        for (int s = 0; s < 2; s++) CHECK_OK(base, gpt2rt_step_series(base, x4, y4, &st));
        const gpt2rt_recompute modes[2] = {GPT2RT_RECOMPUTE_SELECTIVE, GPT2RT_RECOMPUTE_FULL};
        for (int k = 0; k < 2; k++) {
            gpt2rt_config r = c;
            r.recompute = modes[k];
            r.grad_accum = 1;
            gpt2rt_ctx *o = make(r);
            for (int s = 0; s < 2; s++) CHECK_OK(o, gpt2rt_step_series(o, x4, y4, &st));
            CHECK(harness_same_state(base, o), "recompute %s differs from none", k ? "full" : "selective");
            gpt2rt_free(o);
        }
        gpt2rt_free(base);
        c.batch_size = 4;
        gpt2rt_ctx *one = make(c);
        c.batch_size = 2; c.grad_accum = 2;
        gpt2rt_ctx *two = make(c);
        gpt2rt_step_stats s1, s2;
        CHECK_OK(one, gpt2rt_step_series(one, x4, y4, &s1));
        CHECK_OK(two, gpt2rt_step_series(two, x4, y4, &s2));
        float *a = (float *)malloc(sizeof(float) * 16384), *b = (float *)malloc(sizeof(float) * 16384);
        int64_t na = harness_params(one, GPT2RT_PARAM_VALUE, a), nb = harness_params(two, GPT2RT_PARAM_VALUE, b);
        double e = na == nb ? rel_err(b, a, na) : 1.0;
        CHECK(e < 1e-6 && fabs(s1.loss - s2.loss) <= 1e-6 * fabs(s1.loss) && s2.micro_batches == 2,
              "2 micro-batches of 2 vs one of 4: weights %.3g, loss %.7f vs %.7f", e, (double)s2.loss, (double)s1.loss);
        printf("    recompute selective/full bitwise == none; 2 x 2 windows vs 4: weights %.2e\n", e);
        free(a); free(b);
        gpt2rt_free(one);
        gpt2rt_free(two);
    }
    (void)n;
    free(pred);
    revin_definition(cfg);
    gpt2rt__st_release(ref_ctx, &ref);
    gpt2rt_free(ref_ctx);
    free(ref_buf);
    return harness_finish();
}
