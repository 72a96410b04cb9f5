/* kernels/timeseries.cu - lab of the CUDA backend's time-series model and dropout (gpt2rt.h:
   8.2's time-series and dropout kernels, 8.5's patch steps) against the CPU backend.
     cd kernels && nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror \
         --Werror all-warnings -o /tmp/lab_timeseries timeseries.cu -lcublasLt
     /tmp/lab_timeseries          every check below (a few seconds); exit 77 without a device
     /tmp/lab_timeseries allm4ts  the aLLM4TS checks alone

   Ops (fp32, against the CPU functions of 6.2 and 7.1 on the same inputs):
     - dropout: gpt2rt__cu_dropout == gpt2rt__cpu_dropout bitwise (2^20 + 3 elements, p = 0.1,
       0.5, 0.9, three keys and element offsets): the same masks and the same products
     - attention with dropout on its probabilities (HS 16, 64; p = 0.2) against the CPU's
       attention with the same mask: out, lse 1e-5, dqkv 1e-5 + 1e-4 relative; without the
       mask the output differs
     - RevIN + patching (affine on and off): patches, zs, mean, std bitwise
     - de-normalisation: bitwise; the MSE's gradient: dyn bitwise, the affine's dw, db
       (a tree sum against the CPU's sequential one) within 1e-6 relative; the affine's
       input side within 1e-6 relative
   End to end (the public API on a CUDA context against a CPU context of the same config
   and seed; a small patch model: 2 layers, C 32, 4 windows of 3 channels, lookback 48,
   patch 8 stride 8, horizon 12):
     - planned == cudaMalloc'ed bytes per category
     - fp32, RevIN affine off / on, every group trained / GPT4TS's frozen attention + MLP:
       predictions within 1e-4, loss within 1e-5 relative, every trained gradient within
       1e-4 relative (max-norm), then 3 AdamW steps: losses within 1e-4, weights within 1e-3
       (AdamW's step is about lr for any gradient, so near-zero gradients amplify)
     - bf16: the 3 steps' losses within 5e-2 relative of the CPU's
     - dropout = attn_dropout = head_dropout = 0.1 (TRAIN), fp32: predictions, loss and
       gradients against the CPU within 1e-4 (one differing mask element moves them by far
       more), patches and tokens (HS = 16); bf16 tokens with HS = 64 (tensor-core attention
       off under attn_dropout): 4 steps' losses within 2e-2 relative of the CPU's
     - recompute SELECTIVE and FULL (checkpoint 1 and 2) with dropout: gradients bitwise
       equal to NONE on the GPU; two runs of 3 steps bitwise equal
     - EVAL with dropout set == a context without dropout, bitwise (predictions, loss,
       gradients); TRAIN differs from it
     - aLLM4TS (check_allm4ts): NEXT_PATCH causal, PATCH_DECODE under PLACEHOLDERS and CAUSAL,
       fp32 (HS 16) loss, gradients and 3 steps against the CPU; bf16 HS 64 (the tensor-core
       attention with the mask) 4 steps' losses, two runs bitwise equal */
/* g++ 12 reports a false -Wmaybe-uninitialized inside its AVX-512 headers for the CPU AdamW
   of gpt2rt.h under nvcc -O3: the portable CPU kernels here (as kernels/train_step.cu). */
#define GPT2RT_SGEMM_NO_SIMD
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "lab.cuh"

static void check_true(const char *what, int ok) {
    printf("  %-56s %s\n", what, ok ? "PASS" : "FAIL");
    if (!ok) lab_failures++;
}
static void check_rel(const char *what, double err, double tol) {
    int ok = err <= tol; /* NaN fails */
    printf("  %-56s %.3e (tol %.0e)  %s\n", what, err, tol, ok ? "PASS" : "FAIL");
    if (!ok) lab_failures++;
}
/* max |a - b| / max |b|, NaN worst */
static double rel_err(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]), m = fabs((double)b[i]);
        if (d > num || d != d) num = d != d ? INFINITY : d;
        if (m > den) den = m;
    }
    return den > 0 ? num / den : num;
}
static float *dev_floats(const float *h, int64_t n) {
    float *d;
    LAB_CK(cudaMalloc(&d, (size_t)n * 4 + 4));
    if (h) LAB_CK(cudaMemcpy(d, h, (size_t)n * 4, cudaMemcpyHostToDevice));
    else LAB_CK(cudaMemset(d, 0, (size_t)n * 4 + 4));
    return d;
}
static float *host_of(const float *d, int64_t n) {
    float *h = (float *)malloc((size_t)n * 4 + 4);
    LAB_CK(cudaMemcpy(h, d, (size_t)n * 4, cudaMemcpyDeviceToHost));
    return h;
}
static int same(const float *a, const float *b, int64_t n) { return memcmp(a, b, (size_t)n * 4) == 0; }

/* ---------------------------------------------------------------- the model */
enum { BW = 4, M = 3, LB = 48, PLEN = 8, PSTR = 8, HZ = 12, NSTEPS = 3 };

static gpt2rt_config ts_config(int affine, unsigned frozen) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.input = GPT2RT_INPUT_PATCHES;
    c.head = GPT2RT_HEAD_REGRESSION;
    c.n_layer = 2; c.n_head = 2; c.n_embd = 32; c.max_seq_len = 16;
    c.batch_size = BW; c.seq_len = LB; c.n_channels = M; c.patch_len = PLEN; c.patch_stride = PSTR; c.horizon = HZ;
    c.revin_affine = affine;
    c.frozen = frozen;
    c.lr = 1e-3f;
    c.weight_decay = 0.01f;
    c.grad_clip = 1.0f;
    c.seed = 11;
    return c;
}

/* windows x (NSTEPS+1 batches of (BW,LB,M)) and targets y ((BW,HZ,M) each): sines of
   different scales and offsets per channel, so RevIN has something to undo */
static float xs[(NSTEPS + 1) * BW * LB * M], ys[(NSTEPS + 1) * BW * HZ * M];
static void make_data(void) {
    for (int k = 0; k <= NSTEPS; k++)
        for (int b = 0; b < BW; b++)
            for (int t = 0; t < LB + HZ; t++)
                for (int m = 0; m < M; m++) {
                    float v = (1.0f + (float)m) * sinf(0.2f * (float)(t + 7 * b + 13 * k) * (1.0f + 0.3f * (float)m)) +
                              3.0f * (float)m - 1.0f + 0.2f * lab_uniform();
                    if (t < LB) xs[((k * BW + b) * LB + t) * M + m] = v;
                    else ys[((k * BW + b) * HZ + (t - LB)) * M + m] = v;
                }
}
static const float *xk(int k) { return xs + (int64_t)k * BW * LB * M; }
static const float *yk(int k) { return ys + (int64_t)k * BW * HZ * M; }

static gpt2rt_ctx *make(gpt2rt_config c, gpt2rt_backend be, gpt2rt_precision prec) {
    gpt2rt_ctx *ctx = NULL;
    c.backend = be;
    c.precision = prec;
    if (gpt2rt_create(&ctx, &c) != GPT2RT_OK) { printf("create: %s\n", gpt2rt_last_error(ctx)); exit(2); }
    return ctx;
}

/* planned == cudaMalloc'ed, per category */
static void check_plan(gpt2rt_ctx *g, const char *what) {
    gpt2rt_memory_plan p;
    if (gpt2rt_plan(&g->cfg, &p) != GPT2RT_OK) { printf("plan: %s\n", p.error); exit(2); }
    int ok = 1;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) ok &= p.bytes[0][i] == g->cu->allocated[i];
    char name[96];
    snprintf(name, sizeof name, "%s: planned == cudaMalloc'ed (%.2f MiB)", what, GPT2RT__MIB(p.total[0]));
    check_true(name, ok);
}

/* worst relative gradient error over the trained tensors of a against b (public API) */
static double grads_err(gpt2rt_ctx *a, gpt2rt_ctx *b, unsigned frozen, const char **worst_name) {
    double worst = 0.0;
    for (int i = 0; i < gpt2rt_param_count(a); i++) {
        gpt2rt_param_info in;
        LAB_OK(a, gpt2rt_param_info_get(a, i, &in));
        if (in.group & frozen) continue;
        float *x = (float *)malloc((size_t)in.numel * 4), *y = (float *)malloc((size_t)in.numel * 4);
        LAB_OK(a, gpt2rt_param_read(a, in.name, GPT2RT_PARAM_GRAD, x, in.numel));
        LAB_OK(b, gpt2rt_param_read(b, in.name, GPT2RT_PARAM_GRAD, y, in.numel));
        double e = rel_err(x, y, in.numel);
        if (!(e <= worst)) {
            static char keep[96];
            worst = e;
            snprintf(keep, sizeof keep, "%s", in.name);
            if (worst_name) *worst_name = keep;
        }
        free(x); free(y);
    }
    return worst;
}
/* every trained gradient of a and b bitwise equal */
static int grads_same(gpt2rt_ctx *a, gpt2rt_ctx *b, unsigned frozen) {
    int ok = 1;
    for (int i = 0; i < gpt2rt_param_count(a); i++) {
        gpt2rt_param_info in;
        LAB_OK(a, gpt2rt_param_info_get(a, i, &in));
        if (in.group & frozen) continue;
        float *x = (float *)malloc((size_t)in.numel * 4), *y = (float *)malloc((size_t)in.numel * 4);
        LAB_OK(a, gpt2rt_param_read(a, in.name, GPT2RT_PARAM_GRAD, x, in.numel));
        LAB_OK(b, gpt2rt_param_read(b, in.name, GPT2RT_PARAM_GRAD, y, in.numel));
        ok &= same(x, y, in.numel);
        free(x); free(y);
    }
    return ok;
}
static double weights_err(gpt2rt_ctx *a, gpt2rt_ctx *b) {
    double worst = 0.0;
    for (int i = 0; i < gpt2rt_param_count(a); i++) {
        gpt2rt_param_info in;
        LAB_OK(a, gpt2rt_param_info_get(a, i, &in));
        float *x = (float *)malloc((size_t)in.numel * 4), *y = (float *)malloc((size_t)in.numel * 4);
        LAB_OK(a, gpt2rt_param_read(a, in.name, GPT2RT_PARAM_VALUE, x, in.numel));
        LAB_OK(b, gpt2rt_param_read(b, in.name, GPT2RT_PARAM_VALUE, y, in.numel));
        double e = rel_err(x, y, in.numel);
        worst = !(e <= worst) ? e : worst;
        free(x); free(y);
    }
    return worst;
}

/* ---------------------------------------------------------------- ops */

/* after a forward on both: the backward's gradients, then an update and NSTEPS more
   steps' losses, fp32 on the GPU against the CPU (targets: the windows' own, or none
   where the head predicts from the input alone) */
static void check_fp32_steps(gpt2rt_ctx *cpu, gpt2rt_ctx *g, unsigned frozen, int with_targets) {
    LAB_OK(cpu, gpt2rt_backward(cpu));
    LAB_OK(g, gpt2rt_backward(g));
    const char *wn = "";
    double e = grads_err(g, cpu, frozen, &wn);
    char name[128];
    snprintf(name, sizeof name, "fp32 gradients vs CPU, worst (%s)", wn);
    check_rel(name, e, 1e-4);
    LAB_OK(cpu, gpt2rt_update(cpu, NULL));
    LAB_OK(g, gpt2rt_update(g, NULL));
    double worst = 0.0;
    for (int k = 1; k <= NSTEPS; k++) {
        gpt2rt_step_stats a, b;
        LAB_OK(cpu, gpt2rt_step_series(cpu, xk(k), with_targets ? yk(k) : NULL, &a));
        LAB_OK(g, gpt2rt_step_series(g, xk(k), with_targets ? yk(k) : NULL, &b));
        double d = fabs((double)a.loss - (double)b.loss) / fabs((double)a.loss);
        worst = !(d <= worst) ? d : worst;
    }
    check_rel("fp32 losses of 3 more AdamW steps vs CPU, relative", worst, 1e-4);
}

static void check_dropout_op(void) {
    printf("dropout: the device's masks against the CPU's\n");
    const int64_t n = ((int64_t)1 << 20) + 3;
    float *h = (float *)malloc((size_t)n * 4), *want = (float *)malloc((size_t)n * 4);
    lab_fill(h, (size_t)n, 2.0f);
    float *din = dev_floats(h, n), *dout = dev_floats(NULL, n);
    const float ps[3] = {0.1f, 0.5f, 0.9f};
    const uint64_t keys[3] = {0x0123456789ABCDEFull, 42, 0xFFFFFFFFFFFFFFFFull}, offs[3] = {0, 12345, (uint64_t)1 << 33};
    int ok = 1;
    for (int k = 0; k < 3; k++) {
        gpt2rt__drop dr;
        memset(&dr, 0, sizeof dr);
        dr.on = 1;
        dr.thresh = (uint32_t)floor((double)ps[k] * 4294967296.0 + 0.5);
        dr.scale = (float)(1.0 / (1.0 - (double)ps[k]));
        dr.key = keys[k];
        dr.off = offs[k];
        gpt2rt__cpu_dropout(want, h, &dr, n, 1);
        LAB_CK(gpt2rt__cu_dropout<float>(dout, din, &dr, n, 0));
        float *got = host_of(dout, n);
        int64_t dropped = 0;
        for (int64_t i = 0; i < n; i++) dropped += got[i] == 0.0f;
        int eq = same(got, want, n);
        printf("    p = %.1f key %016llx off %llu: %.4f dropped, %s\n", (double)ps[k], (unsigned long long)keys[k],
               (unsigned long long)offs[k], (double)dropped / (double)n, eq ? "bitwise equal" : "DIFFER");
        ok &= eq;
        free(got);
    }
    check_true("gpt2rt__cu_dropout == gpt2rt__cpu_dropout, bitwise", ok);
    /* in place, as the driver calls it */
    gpt2rt__drop dr;
    memset(&dr, 0, sizeof dr);
    dr.on = 1; dr.thresh = 429496730u; dr.scale = (float)(1.0 / 0.9); dr.key = 7; dr.off = 99;
    gpt2rt__cpu_dropout(want, h, &dr, n, 1);
    LAB_CK(gpt2rt__cu_dropout<float>(din, din, &dr, n, 0));
    float *got = host_of(din, n);
    check_true("in place (out == in), bitwise", same(got, want, n));
    free(got); free(h); free(want);
    LAB_CK(cudaFree(din)); LAB_CK(cudaFree(dout));
}

/* the attention probabilities' dropout: the device's generic attention with a mask against
   the CPU's attention with the same mask (HS 16 and 64, fp32), forward and backward */
static void check_attention_dropout_op(void) {
    printf("attention with dropout on its probabilities: the device against the CPU (fp32)\n");
    const int B = 2, T = 37, shapes[2][2] = {{64, 4}, {128, 2}};
    for (int k = 0; k < 2; k++) {
        int C = shapes[k][0], NH = shapes[k][1];
        int64_t nq = (int64_t)B * T * 3 * C, no = (int64_t)B * T * C, nl = (int64_t)B * NH * T;
        float *qkv = (float *)malloc((size_t)nq * 4), *dout = (float *)malloc((size_t)no * 4);
        float *out = (float *)malloc((size_t)no * 4), *lse = (float *)malloc((size_t)nl * 4);
        float *dqkv = (float *)malloc((size_t)nq * 4), *scratch = (float *)malloc((size_t)gpt2rt__pad16(2 * T) * 4);
        lab_fill(qkv, (size_t)nq, 1.0f);
        lab_fill(dout, (size_t)no, 1.0f);
        gpt2rt__drop dr;
        memset(&dr, 0, sizeof dr);
        dr.on = 1; dr.thresh = 858993459u; /* p = 0.2 */
        dr.scale = (float)(1.0 / 0.8); dr.key = 0x5EEDull + (uint64_t)k; dr.off = (uint64_t)nl * T;
        gpt2rt__cpu_attention_forward(out, lse, qkv, scratch, B, T, C, NH, &dr, 1);
        gpt2rt__cpu_attention_backward(dqkv, dout, qkv, lse, scratch, B, T, C, NH, &dr, 1);
        float *d_qkv = dev_floats(qkv, nq), *d_dout = dev_floats(dout, no), *d_out = dev_floats(NULL, no);
        float *d_lse = dev_floats(NULL, nl), *d_dqkv = dev_floats(NULL, nq), *d_D = dev_floats(NULL, nl);
        LAB_CK(gpt2rt__cu_attention_forward<float>(d_out, d_lse, d_qkv, B, T, C, NH, 0, &dr));
        LAB_CK(gpt2rt__cu_attention_backward<float>(d_dqkv, d_dout, d_qkv, d_out, d_lse, d_D, B, T, C, NH, 0, &dr));
        float *g_out = host_of(d_out, no), *g_lse = host_of(d_lse, nl), *g_dqkv = host_of(d_dqkv, nq);
        char name[96];
        snprintf(name, sizeof name, "HS %d: out vs CPU", C / NH);
        lab_compare(name, g_out, out, (size_t)no, 1e-5f, 1e-5f);
        snprintf(name, sizeof name, "HS %d: lse vs CPU", C / NH);
        lab_compare(name, g_lse, lse, (size_t)nl, 1e-5f, 1e-5f);
        snprintf(name, sizeof name, "HS %d: dqkv vs CPU", C / NH);
        lab_compare(name, g_dqkv, dqkv, (size_t)nq, 1e-5f, 1e-4f);
        /* without the mask the result must differ (the mask is applied at all) */
        LAB_CK(gpt2rt__cu_attention_forward<float>(d_out, d_lse, d_qkv, B, T, C, NH, 0, NULL));
        free(g_out);
        g_out = host_of(d_out, no);
        snprintf(name, sizeof name, "HS %d: no mask gives another output", C / NH);
        check_true(name, rel_err(g_out, out, no) > 1e-2);
        free(qkv); free(dout); free(out); free(lse); free(dqkv); free(scratch); free(g_out); free(g_lse); free(g_dqkv);
        float *dev[] = {d_qkv, d_dout, d_out, d_lse, d_dqkv, d_D};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) LAB_CK(cudaFree(dev[i]));
    }
}

static void check_ts_ops(void) {
    printf("time-series ops against 6.2's CPU functions (fp32)\n");
    for (int affine = 0; affine < 2; affine++) {
        gpt2rt_ctx *c = make(ts_config(affine, 0), GPT2RT_BACKEND_CPU, GPT2RT_PRECISION_DEFAULT);
        const gpt2rt__dims *d = &c->d;
        int64_t nx = d->B * d->lookback, np = d->BT * d->patch_len, B = d->B, nyn = d->B * d->H, ny = d->n_out;
        float w[M], b[M];
        for (int m = 0; m < M; m++) { w[m] = 0.7f + 0.3f * (float)m; b[m] = 0.1f * (float)m - 0.05f; }
        const float *hw = affine ? w : NULL, *hb = affine ? b : NULL;
        /* RevIN and patches */
        float *patch = (float *)malloc((size_t)np * 4), *zs = (float *)malloc((size_t)np * 4);
        float *mean = (float *)malloc((size_t)B * 4), *sd = (float *)malloc((size_t)B * 4);
        gpt2rt__ts_revin_patch(patch, affine ? zs : NULL, mean, sd, xk(0), hw, hb, d);
        float *dx = dev_floats(xk(0), nx), *dpatch = dev_floats(NULL, np), *dzs = dev_floats(NULL, np);
        float *dmean = dev_floats(NULL, B), *dsd = dev_floats(NULL, B);
        float *dw_ = dev_floats(w, M), *db_ = dev_floats(b, M);
        LAB_CK(gpt2rt__cu_ts_revin_patch<float>(dpatch, affine ? dzs : NULL, dmean, dsd, dx, affine ? dw_ : NULL,
                                                affine ? db_ : NULL, d, 0));
        float *g1 = host_of(dpatch, np), *g2 = host_of(dzs, np), *g3 = host_of(dmean, B), *g4 = host_of(dsd, B);
        char name[96];
        snprintf(name, sizeof name, "affine %d: mean, std bitwise", affine);
        check_true(name, same(g3, mean, B) && same(g4, sd, B));
        snprintf(name, sizeof name, "affine %d: patches (%lld)%s bitwise", affine, (long long)np, affine ? ", zs" : "");
        check_true(name, same(g1, patch, np) && (!affine || same(g2, zs, np)));
        /* de-normalisation of some normalised predictions yn (B,H) */
        float *yn = (float *)malloc((size_t)nyn * 4), *pred = (float *)malloc((size_t)ny * 4);
        lab_fill(yn, (size_t)nyn, 1.5f);
        gpt2rt__ts_denorm(pred, yn, mean, sd, hw, hb, d);
        float *dyn = dev_floats(yn, nyn), *dpred = dev_floats(NULL, ny);
        LAB_CK(gpt2rt__cu_ts_denorm<float>(dpred, dyn, dmean, dsd, affine ? dw_ : NULL, affine ? db_ : NULL, d, 0));
        float *g5 = host_of(dpred, ny);
        snprintf(name, sizeof name, "affine %d: de-normalised predictions bitwise", affine);
        check_true(name, same(g5, pred, ny));
        /* the MSE's gradient, in place over yn; the affine's dw, db (start from 0.5) */
        float *dy = dev_floats(yk(0), ny);
        float gw[M], gb[M];
        for (int m = 0; m < M; m++) gw[m] = gb[m] = 0.5f;
        float *dgw = dev_floats(gw, M), *dgb = dev_floats(gb, M);
        float *cyn = (float *)malloc((size_t)nyn * 4);
        memcpy(cyn, yn, (size_t)nyn * 4);
        gpt2rt__ts_mse_backward(cyn, pred, yk(0), sd, hw, hb, affine ? gw : NULL, affine ? gb : NULL, 0.01f, d);
        LAB_CK(gpt2rt__cu_ts_mse_backward<float>(dyn, dpred, dy, dsd, affine ? dw_ : NULL, affine ? db_ : NULL,
                                                 affine ? dgw : NULL, affine ? dgb : NULL, 0.01f, d, 0));
        float *g6 = host_of(dyn, nyn), *g7 = host_of(dgw, M), *g8 = host_of(dgb, M);
        snprintf(name, sizeof name, "affine %d: MSE gradient dyn bitwise", affine);
        check_true(name, same(g6, cyn, nyn));
        if (affine) {
            check_rel("affine 1: MSE's dw, db (tree sum), rel", fmax(rel_err(g7, gw, M), rel_err(g8, gb, M)), 1e-6);
            /* the affine's input side from some patch gradient */
            float *gp = (float *)malloc((size_t)np * 4);
            lab_fill(gp, (size_t)np, 1.0f);
            float *dgp = dev_floats(gp, np);
            gpt2rt__ts_affine_backward(gw, gb, gp, zs, d);
            LAB_CK(gpt2rt__cu_ts_affine_backward<float>(dgw, dgb, dgp, dzs, d, 0));
            free(g7); free(g8);
            g7 = host_of(dgw, M); g8 = host_of(dgb, M);
            check_rel("affine 1: input side's dw, db (tree sum), rel", fmax(rel_err(g7, gw, M), rel_err(g8, gb, M)),
                      1e-6);
            free(gp);
            LAB_CK(cudaFree(dgp));
        }
        free(g1); free(g2); free(g3); free(g4); free(g5); free(g6); free(g7); free(g8);
        free(patch); free(zs); free(mean); free(sd); free(yn); free(pred); free(cyn);
        float *dev[] = {dx, dpatch, dzs, dmean, dsd, dw_, db_, dyn, dpred, dy, dgw, dgb};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) LAB_CK(cudaFree(dev[i]));
        gpt2rt_free(c);
    }
}

/* ---------------------------------------------------------------- end to end */

/* fp32 CUDA against the CPU: predictions, loss, gradients, 3 steps; bf16's 3 steps */
static void check_model(int affine, unsigned frozen, float dropout) {
    gpt2rt_config c = ts_config(affine, frozen);
    c.dropout = c.head_dropout = c.attn_dropout = dropout;
    printf("patch model: affine %d, frozen 0x%x, dropout = attn_dropout = head_dropout = %g\n", affine, frozen,
           (double)dropout);
    gpt2rt_ctx *cpu = make(c, GPT2RT_BACKEND_CPU, GPT2RT_PRECISION_DEFAULT);
    gpt2rt_ctx *g = make(c, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_FP32);
    check_plan(g, "fp32");
    int64_t ny = g->d.n_out;
    float lc = 0, lg = 0;
    float *pc = (float *)malloc((size_t)ny * 4), *pg = (float *)malloc((size_t)ny * 4);
    LAB_OK(cpu, gpt2rt_forward_series(cpu, xk(0), yk(0), &lc));
    LAB_OK(g, gpt2rt_forward_series(g, xk(0), yk(0), &lg));
    LAB_OK(cpu, gpt2rt_predictions(cpu, pc, ny));
    LAB_OK(g, gpt2rt_predictions(g, pg, ny));
    lab_compare("fp32 predictions vs CPU (1e-4)", pg, pc, (size_t)ny, 1e-4f, 1e-4f);
    check_rel("fp32 loss vs CPU, relative", fabs((double)lg - (double)lc) / fabs((double)lc), 1e-5);
    check_fp32_steps(cpu, g, frozen, 1);
    /* AdamW moves a weight by about lr whatever its gradient's size, so a gradient near 0
       whose last bits differ moves it differently: 1e-3 of the largest weight per tensor */
    check_rel("fp32 weights after them vs CPU, relative", weights_err(g, cpu), 1e-3);
    gpt2rt_free(g);
    gpt2rt_free(cpu);
    free(pc); free(pg);
    if (dropout > 0.0f) return;
    /* bf16: the same 4 steps, losses against the CPU's */
    cpu = make(c, GPT2RT_BACKEND_CPU, GPT2RT_PRECISION_DEFAULT);
    g = make(c, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_BF16);
    check_plan(g, "bf16");
    double worst = 0.0;
    for (int k = 0; k <= NSTEPS; k++) {
        gpt2rt_step_stats a, b;
        LAB_OK(cpu, gpt2rt_step_series(cpu, xk(k), yk(k), &a));
        LAB_OK(g, gpt2rt_step_series(g, xk(k), yk(k), &b));
        double d = fabs((double)a.loss - (double)b.loss) / fabs((double)a.loss);
        worst = !(d <= worst) ? d : worst;
    }
    check_rel("bf16 losses of 4 AdamW steps vs CPU fp32, relative", worst, 5e-2);
    gpt2rt_free(g);
    gpt2rt_free(cpu);
}

/* token inputs with dropout (HS = 16, the generic attention): gradients vs the CPU */
static void check_tokens_dropout(void) {
    printf("token model with dropout = attn_dropout = head_dropout = 0.1\n");
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2; c.n_head = 2; c.n_embd = 32; c.vocab_size = 100; c.max_seq_len = 32;
    c.batch_size = 2; c.seq_len = 32; c.seed = 5; c.dropout = 0.1f; c.head_dropout = 0.1f; c.attn_dropout = 0.1f;
    int32_t tok[2 * 32 + 1];
    for (int i = 0; i <= 64; i++) tok[i] = (int32_t)((lab_uniform() * 0.5f + 0.5f) * 99.0f);
    gpt2rt_ctx *cpu = make(c, GPT2RT_BACKEND_CPU, GPT2RT_PRECISION_DEFAULT);
    gpt2rt_ctx *g = make(c, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_FP32);
    float lc = 0, lg = 0;
    LAB_OK(cpu, gpt2rt_forward(cpu, tok, tok + 1, &lc));
    LAB_OK(g, gpt2rt_forward(g, tok, tok + 1, &lg));
    check_rel("fp32 loss vs CPU, relative", fabs((double)lg - (double)lc) / fabs((double)lc), 1e-5);
    LAB_OK(cpu, gpt2rt_backward(cpu));
    LAB_OK(g, gpt2rt_backward(g));
    const char *wn = "";
    double e = grads_err(g, cpu, 0, &wn);
    char name[128];
    snprintf(name, sizeof name, "fp32 gradients vs CPU, worst (%s)", wn);
    check_rel(name, e, 1e-4);
    gpt2rt_free(g);
    gpt2rt_free(cpu);
}

/* one forward + backward of a CUDA patch context with dropout under a recompute level */
static gpt2rt_ctx *ts_fwd_bwd(gpt2rt_config c, gpt2rt_recompute rec, int ck, float *loss) {
    c.recompute = rec;
    c.checkpoint_every = rec == GPT2RT_RECOMPUTE_FULL ? ck : 0;
    gpt2rt_ctx *g = make(c, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_FP32);
    LAB_OK(g, gpt2rt_forward_series(g, xk(0), yk(0), loss));
    LAB_OK(g, gpt2rt_backward(g));
    return g;
}

static void check_recompute_and_modes(void) {
    printf("dropout on the GPU: recompute, determinism, EVAL\n");
    gpt2rt_config c = ts_config(1, 0);
    c.dropout = c.head_dropout = c.attn_dropout = 0.2f;
    c.n_layer = 4; /* FULL with checkpoint 2: two segments */
    float l0, l1;
    gpt2rt_ctx *none = ts_fwd_bwd(c, GPT2RT_RECOMPUTE_NONE, 0, &l0);
    const gpt2rt_recompute recs[3] = {GPT2RT_RECOMPUTE_SELECTIVE, GPT2RT_RECOMPUTE_FULL, GPT2RT_RECOMPUTE_FULL};
    const int cks[3] = {0, 1, 2};
    const char *names[3] = {"selective", "full, checkpoint 1", "full, checkpoint 2"};
    for (int i = 0; i < 3; i++) {
        gpt2rt_ctx *g = ts_fwd_bwd(c, recs[i], cks[i], &l1);
        char name[128];
        snprintf(name, sizeof name, "recompute %s == none: loss, gradients bitwise", names[i]);
        check_true(name, !memcmp(&l0, &l1, 4) && grads_same(g, none, 0));
        gpt2rt_free(g);
    }
    gpt2rt_free(none);
    /* two runs of 3 steps */
    gpt2rt_ctx *a = make(c, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_FP32), *b = make(c, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_FP32);
    int eq = 1;
    for (int k = 0; k < NSTEPS; k++) {
        gpt2rt_step_stats sa, sb;
        LAB_OK(a, gpt2rt_step_series(a, xk(k), yk(k), &sa));
        LAB_OK(b, gpt2rt_step_series(b, xk(k), yk(k), &sb));
        eq &= !memcmp(&sa.loss, &sb.loss, 4) && !memcmp(&sa.grad_norm, &sb.grad_norm, 4);
    }
    check_true("two CUDA runs with dropout, 3 steps: losses, norms bitwise", eq);
    gpt2rt_free(a);
    gpt2rt_free(b);
    /* EVAL == no dropout, TRAIN differs */
    gpt2rt_config off = c;
    off.dropout = off.head_dropout = off.attn_dropout = 0.0f;
    gpt2rt_ctx *ev = make(c, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_FP32), *nd = make(off, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_FP32);
    LAB_OK(ev, gpt2rt_mode_set(ev, GPT2RT_MODE_EVAL));
    int64_t ny = ev->d.n_out;
    float *pe = (float *)malloc((size_t)ny * 4), *pn = (float *)malloc((size_t)ny * 4), le, ln, lt;
    LAB_OK(ev, gpt2rt_forward_series(ev, xk(0), yk(0), &le));
    LAB_OK(nd, gpt2rt_forward_series(nd, xk(0), yk(0), &ln));
    LAB_OK(ev, gpt2rt_predictions(ev, pe, ny));
    LAB_OK(nd, gpt2rt_predictions(nd, pn, ny));
    LAB_OK(ev, gpt2rt_backward(ev));
    LAB_OK(nd, gpt2rt_backward(nd));
    check_true("EVAL == no dropout: predictions, loss, gradients bitwise",
               same(pe, pn, ny) && !memcmp(&le, &ln, 4) && grads_same(ev, nd, 0));
    LAB_OK(ev, gpt2rt_update(ev, NULL));
    LAB_OK(ev, gpt2rt_mode_set(ev, GPT2RT_MODE_TRAIN));
    LAB_OK(nd, gpt2rt_update(nd, NULL));
    LAB_OK(ev, gpt2rt_forward_series(ev, xk(1), yk(1), &lt));
    LAB_OK(nd, gpt2rt_forward_series(nd, xk(1), yk(1), &ln));
    check_true("TRAIN with dropout differs from no dropout (loss)", memcmp(&lt, &ln, 4) != 0);
    free(pe); free(pn);
    gpt2rt_free(ev);
    gpt2rt_free(nd);
}

/* bf16 with HS = 64 (the tensor-core attention without dropout, the generic one with
   attn_dropout): a token model's 4 steps with every dropout against the CPU's */
static void check_bf16_hs64_dropout(void) {
    printf("bf16, HS = 64, every dropout 0.1: 4 steps against the CPU\n");
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2; c.n_head = 2; c.n_embd = 128; c.vocab_size = 256; c.max_seq_len = 64;
    c.batch_size = 2; c.seq_len = 64; c.seed = 3; c.dropout = c.attn_dropout = c.head_dropout = 0.1f;
    int32_t tok[5 * 128 + 1];
    for (int i = 0; i <= 5 * 128; i++) tok[i] = (int32_t)((lab_uniform() * 0.5f + 0.5f) * 255.0f);
    gpt2rt_ctx *cpu = make(c, GPT2RT_BACKEND_CPU, GPT2RT_PRECISION_DEFAULT);
    gpt2rt_ctx *g = make(c, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_BF16);
    double worst = 0.0;
    for (int k = 0; k < 4; k++) {
        gpt2rt_step_stats a, b;
        LAB_OK(cpu, gpt2rt_step(cpu, tok + k * 128, tok + k * 128 + 1, &a));
        LAB_OK(g, gpt2rt_step(g, tok + k * 128, tok + k * 128 + 1, &b));
        double d = fabs((double)a.loss - (double)b.loss) / fabs((double)a.loss);
        worst = !(d <= worst) ? d : worst;
    }
    check_rel("bf16 losses of 4 steps vs CPU fp32, relative", worst, 2e-2);
    gpt2rt_free(g);
    gpt2rt_free(cpu);
}

/* aLLM4TS's heads on the windows above: stage 1 (NEXT_PATCH, causal: L48 P8 S8,
   T = 6) and stage 2 (PATCH_DECODE: L48 P8 S4, 12 history patches + 2 placeholders) under
   PLACEHOLDERS and CAUSAL. fp32 at C 32 (HS 16): loss 1e-5, gradients 1e-4, 3 AdamW
   steps' losses 1e-4 against the CPU (as check_model); bf16 at C 128 (HS 64: the
   tensor-core attention with the mask): 4 steps' losses within 5e-2 of the CPU's fp32;
   two bf16 runs bitwise equal; planned == cudaMalloc'ed in both */
static void check_allm4ts(gpt2rt_head head, gpt2rt_attn_mask mask) {
    gpt2rt_config c = ts_config(head == GPT2RT_HEAD_PATCH_DECODE, 0u);
    c.head = head;
    c.attn_mask = mask;
    if (head == GPT2RT_HEAD_NEXT_PATCH) c.horizon = 0;
    else c.patch_stride = 4;
    c.max_seq_len = 16;
    int y = head != GPT2RT_HEAD_NEXT_PATCH;
    printf("aLLM4TS: head %s, mask %s\n", y ? "PATCH_DECODE" : "NEXT_PATCH",
           mask == GPT2RT_MASK_PLACEHOLDERS ? "PLACEHOLDERS" : "CAUSAL");
    gpt2rt_ctx *cpu = make(c, GPT2RT_BACKEND_CPU, GPT2RT_PRECISION_DEFAULT);
    gpt2rt_ctx *g = make(c, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_FP32);
    check_plan(g, "fp32");
    float lc = 0, lg = 0;
    LAB_OK(cpu, gpt2rt_forward_series(cpu, xk(0), y ? yk(0) : NULL, &lc));
    LAB_OK(g, gpt2rt_forward_series(g, xk(0), y ? yk(0) : NULL, &lg));
    check_rel("fp32 loss vs CPU, relative", fabs((double)lg - (double)lc) / fabs((double)lc), 1e-5);
    check_fp32_steps(cpu, g, 0u, y);
    gpt2rt_free(g);
    gpt2rt_free(cpu);
    c.n_embd = 128; /* HS 64 */
    cpu = make(c, GPT2RT_BACKEND_CPU, GPT2RT_PRECISION_DEFAULT);
    g = make(c, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_BF16);
    gpt2rt_ctx *g2 = make(c, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_BF16);
    check_plan(g, "bf16 C128");
    double worst = 0.0;
    int same_runs = 1;
    for (int k = 0; k <= NSTEPS; k++) {
        gpt2rt_step_stats a, b, b2;
        LAB_OK(cpu, gpt2rt_step_series(cpu, xk(k), y ? yk(k) : NULL, &a));
        LAB_OK(g, gpt2rt_step_series(g, xk(k), y ? yk(k) : NULL, &b));
        LAB_OK(g2, gpt2rt_step_series(g2, xk(k), y ? yk(k) : NULL, &b2));
        same_runs &= b.loss == b2.loss;
        double d = fabs((double)a.loss - (double)b.loss) / fabs((double)a.loss);
        worst = !(d <= worst) ? d : worst;
    }
    check_rel("bf16 HS64 losses of 4 AdamW steps vs CPU fp32, relative", worst, 5e-2);
    check_true("bf16 HS64: two runs' losses and weights bitwise equal", same_runs && weights_err(g, g2) == 0.0);
    gpt2rt_free(g2);
    gpt2rt_free(g);
    gpt2rt_free(cpu);
}

int main(int argc, char **argv) {
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
        printf("timeseries: SKIP: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    LAB_CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s\n", prop.name);
    make_data();
    if (argc > 1 && !strcmp(argv[1], "allm4ts")) { /* this part alone (e.g. on the emulator: EMU_LABS=timeseries:allm4ts) */
        check_allm4ts(GPT2RT_HEAD_NEXT_PATCH, GPT2RT_MASK_CAUSAL);
        check_allm4ts(GPT2RT_HEAD_PATCH_DECODE, GPT2RT_MASK_PLACEHOLDERS);
        return lab_finish("timeseries allm4ts");
    }
    check_dropout_op();
    check_attention_dropout_op();
    check_ts_ops();
    for (int affine = 0; affine < 2; affine++)
        for (int fz = 0; fz < 2; fz++) check_model(affine, fz ? GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP : 0u, 0.0f);
    check_model(1, 0, 0.1f);
    check_model(0, GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP, 0.1f);
    check_tokens_dropout();
    check_recompute_and_modes();
    check_bf16_hs64_dropout();
    check_allm4ts(GPT2RT_HEAD_NEXT_PATCH, GPT2RT_MASK_CAUSAL);
    check_allm4ts(GPT2RT_HEAD_PATCH_DECODE, GPT2RT_MASK_PLACEHOLDERS);
    check_allm4ts(GPT2RT_HEAD_PATCH_DECODE, GPT2RT_MASK_CAUSAL);
    return lab_finish("timeseries");
}
