/* kernels/train_step.cu - lab of the CUDA backend driver (gpt2rt.h, section 8.5 Driver): whole
   training steps on the GPU against the CPU backend of gpt2rt.h and the Hugging Face
   fixture, then a GPT-2 124M timing.
     cd kernels && nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror \
         --Werror all-warnings -o /tmp/lab_train_step train_step.cu -lcublasLt
     /tmp/lab_train_step            checks + timing (B=8, and the largest B whose plan fits 40 GiB)
     /tmp/lab_train_step quick      checks + timing at B=8 only
     /tmp/lab_train_step checks     checks only
     /tmp/lab_train_step time       timing only (B=8, 16 and the largest), in a fresh process
     /tmp/lab_train_step sanitize   a few small steps for compute-sanitizer, no checks
     /tmp/lab_train_step time-chunk classifier_chunk = 1024 against the whole batch, B = 8 and 16
     /tmp/lab_train_step time-fuse  cuBLASLt's bias-gradient epilogue against the kernel here
                                    (blas.fuse 0x7, 0x3), the weight gradients with and without
                                    split-K (blas.reduction_mask_w), B = 8 and 16
     /tmp/lab_train_step profile B [CHUNK [FUSE [RED_W]]]
                                    GPT-2 124M bf16 at micro-batch B (LM head over CHUNK tokens
                                    at a time, 0: all): 3 warm steps, then one step between
                                    cudaProfilerStart and cudaProfilerStop, for
                                    ncu --profile-from-start off (kernels/gpu_profile.sh); FUSE:
                                    blas.fuse, the cuBLASLt epilogues allowed (0x7 all); RED_W:
                                    blas.reduction_mask_w (7: split-K allowed)
   Run from kernels/ or from the repository root (it looks for tests/fixtures/hf_tiny in both).

   Checks (fixture tests/fixtures/hf_tiny: L2 H4 C64 V1000, B4 T32, HS = 16 so attention
   takes the generic path; a second random-init model with HS = 64 exercises the tensor-core
   attention):
     - planned arena bytes (gpt2rt_plan of the CUDA config) == cudaMalloc'ed bytes, every run
     - fp32 logits within 1e-3 absolute of the fixture, loss vs the fixture and the CPU
     - fp32 gradients vs the CPU backend, relative (max-norm) 1e-4, every tensor; also with
       grad_accum = 2 (the accumulating matmul path) and two frozen-group configurations
     - 10 AdamW steps: fp32 vs CPU within 1e-4, bf16 and fp16 within 0.05 of fp32 (CUDA)
     - two CUDA runs bitwise equal (weights, master, moments, gradients), fp32/bf16/fp16
     - recompute selective / full (checkpoint 1 and 2) gradients bitwise equal to none,
       fp32 and bf16; the classifier fused into the forward bitwise equal to unfused
     - frozen groups: frozen weights unchanged after steps; selective == none bitwise
     - fp16 overflow (one wte row x 1e30 via gpt2rt_param_write for one step): exactly one
       update skipped, the loss scale halves, the next steps equal the clean run's (the
       skip leaves weights, moments and step untouched) and the loss keeps decreasing
     - measured overhead printed
   Timing: GPT-2 124M shape, random init, T = 1024, bf16: tokens/s, MFU, device memory, as
   machine-readable lines like tools/bench_torch_gpu.py's:
     gpt2rt mode=bf16 batch=8 tokens_per_s=... step_ms=... mfu=... peak_gib=... gpu="..." */
/* g++ 12 reports a false -Wmaybe-uninitialized inside its AVX-512 headers for the CPU AdamW
   of gpt2rt.h under nvcc -O3: the portable CPU kernels here (as kernels/adamw.cu). */
#define GPT2RT_SGEMM_NO_SIMD
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "lab.cuh"
#include <unistd.h>
#ifndef GPT2RT_CUDA_EMU
#include <cuda_profiler_api.h>
#endif

/* ---------------------------------------------------------------- the fixture */
static gpt2rt_ctx *fx_ctx;   /* owns the parse */
static gpt2rt__st fx;
static char fx_dir[256];

static const float *fx_f32(const char *name, int64_t *n) {
    const gpt2rt__st_tensor *t = gpt2rt__st_find(&fx, name);
    if (!t || (t->dtype != GPT2RT__F32 && t->dtype != GPT2RT__I32)) { printf("fixture lacks %s\n", name); exit(2); }
    if (n) *n = (int64_t)(t->end - t->begin) / 4;
    return (const float *)(void *)(fx.data + t->begin);
}
static double fx_num(const char *key) {
    const char *s = gpt2rt__st_meta(&fx, key);
    if (!s) { printf("fixture metadata lacks %s\n", key); exit(2); }
    return atof(s);
}
static void fx_load(void) {
    const char *dirs[2] = {"tests/fixtures/hf_tiny/", "../tests/fixtures/hf_tiny/"};
    gpt2rt_config z;
    memset(&z, 0, sizeof z);
    z.n_layer = 1; z.n_head = 1; z.n_embd = 4; z.vocab_size = 4; z.max_seq_len = 4;
    z.backend = GPT2RT_BACKEND_CPU; /* only parses the fixture */
    if (gpt2rt_create(&fx_ctx, &z) != GPT2RT_OK) { printf("create: %s\n", gpt2rt_last_error(fx_ctx)); exit(2); }
    unsigned char *buf = NULL;
    size_t len = 0;
    for (int i = 0; i < 2 && !buf; i++) {
        char path[300];
        snprintf(path, sizeof path, "%sreference.safetensors", dirs[i]);
        if (gpt2rt__read_file(fx_ctx, path, &buf, &len) == GPT2RT_OK) snprintf(fx_dir, sizeof fx_dir, "%s", dirs[i]);
        else buf = NULL;
    }
    if (!buf) { printf("cannot read tests/fixtures/hf_tiny/reference.safetensors (run from kernels/ or the repo root)\n"); exit(2); }
    LAB_OK(fx_ctx, gpt2rt__st_parse(fx_ctx, buf, len, "reference", &fx));
}
static gpt2rt_config fx_config(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = (int)fx_num("n_layer"); c.n_head = (int)fx_num("n_head"); c.n_embd = (int)fx_num("n_embd");
    c.vocab_size = (int)fx_num("vocab_size"); c.max_seq_len = (int)fx_num("n_positions");
    c.batch_size = (int)fx_num("B"); c.seq_len = (int)fx_num("T");
    c.lr = (float)fx_num("lr"); c.beta1 = (float)fx_num("beta1"); c.beta2 = (float)fx_num("beta2");
    c.eps = (float)fx_num("eps"); c.weight_decay = (float)fx_num("weight_decay"); c.grad_clip = (float)fx_num("grad_clip");
    c.warmup_steps = (int)fx_num("warmup_steps"); c.total_steps = (int)fx_num("total_steps");
    c.min_lr_frac = (float)fx_num("min_lr_frac");
    return c;
}
static char fx_weights[300];

/* ---------------------------------------------------------------- runs */
/* a CUDA run: a CPU context as its host side (tensor table, fp32 weights, step and
   accumulation bookkeeping) and the device state, hung on it as ctx->cu as gpt2rt_create
   does (the public calls on r.h would then take the CUDA paths: the lab calls the driver) */
struct Run {
    gpt2rt_ctx *h;
    gpt2rt__cu_state *st;
    gpt2rt_memory_plan plan;
};

static gpt2rt_ctx *cpu_make(gpt2rt_config c, const char *weights) {
    gpt2rt_ctx *ctx;
    c.backend = GPT2RT_BACKEND_CPU;
    c.precision = GPT2RT_PRECISION_DEFAULT;
    c.tf32 = 0; c.loss_scale = 0; c.recompute = GPT2RT_RECOMPUTE_NONE; c.checkpoint_every = 0;
    if (gpt2rt_create(&ctx, &c) != GPT2RT_OK) { printf("create: %s\n", gpt2rt_last_error(ctx)); exit(2); }
    if (weights) LAB_OK(ctx, gpt2rt_weights_load(ctx, weights));
    return ctx;
}

static const char *prec_name(gpt2rt_precision p) {
    return p == GPT2RT_PRECISION_BF16 ? "bf16" : p == GPT2RT_PRECISION_FP16 ? "fp16" : "fp32";
}

static int plan_lines = 0;
/* the host context of base (CPU) plus the device state of base with the CUDA knobs */
static Run run_make(gpt2rt_config base, gpt2rt_precision prec, gpt2rt_recompute rec, int ck, const char *weights) {
    Run r;
    r.h = cpu_make(base, weights);
    gpt2rt_config c = base;
    c.backend = GPT2RT_BACKEND_CUDA;
    c.precision = prec;
    c.recompute = rec;
    c.checkpoint_every = rec == GPT2RT_RECOMPUTE_FULL ? ck : 0;
    if (gpt2rt_plan(&c, &r.plan) != GPT2RT_OK) { printf("plan: %s\n", r.plan.error); exit(2); }
    char err[2048];
    if (gpt2rt__cu_create_cfg(r.h, &r.plan.config, &r.st, err, sizeof err) != GPT2RT_OK) {
        printf("gpt2rt__cu_create: %s\n", err);
        exit(2);
    }
    r.h->cu = r.st; /* the driver's steps (8.5) find the state through the context */
    /* the update policy (section 9) reads the precision from the context, as gpt2rt_create
       leaves it: fp16's loss scale halves on an overflow only when the context says FP16 */
    r.h->cfg.precision = r.plan.config.precision;
    r.h->cfg.loss_scale = r.plan.config.loss_scale;
    int same = 1;
    uint64_t alloc = 0;
    for (int i = 0; i < GPT2RT_MEM_COUNT; i++) {
        same &= r.plan.bytes[0][i] == r.st->allocated[i];
        alloc += r.st->allocated[i];
    }
    same &= alloc == r.plan.total[0];
    if (!same || plan_lines < 3) {
        printf("  plan %s recompute %d/%d frozen 0x%x: planned %llu bytes, cudaMalloc'ed %llu: %s; overhead %.1f MiB "
               "(estimate %.1f)\n", prec_name(prec), (int)rec, ck, base.frozen, (unsigned long long)r.plan.total[0],
               (unsigned long long)alloc, same ? "PASS" : "FAIL", GPT2RT__MIB(r.st->overhead),
               GPT2RT__MIB(r.plan.overhead[0]));
        plan_lines++;
    }
    if (!same) {
        lab_failures++;
        for (int i = 0; i < GPT2RT_MEM_COUNT; i++)
            printf("    %-12s planned %llu allocated %llu\n", gpt2rt_mem_name((gpt2rt_mem)i),
                   (unsigned long long)r.plan.bytes[0][i], (unsigned long long)r.st->allocated[i]);
    }
    return r;
}
static void run_free(Run &r) {
    /* r.h is a CPU context: its backend's release does not know the device state hung on
       it, so the lab frees that itself (gpt2rt_free of a CUDA context does it in
       gpt2rt__cu_be_release; check_public_api checks that the memory comes back) */
    gpt2rt__cu_free(r.st);
    r.h->cu = NULL;
    gpt2rt_free(r.h);
}

static uint64_t device_used(void) {
    size_t fr = 0, tot = 0;
    LAB_CK(cudaMemGetInfo(&fr, &tot));
    return (uint64_t)(tot - fr);
}

/* the public calls' bookkeeping around the driver (what gpt2rt_forward/backward/update
   will do once spliced) */
static float lab_fwd(Run &r, const int32_t *in, const int32_t *tg, int fuse) {
    float loss = 0.0f;
    r.st->dlogits_in_forward = fuse;
    LAB_OK(r.h, gpt2rt__cu_forward(r.h, r.st, in, tg, &loss));
    r.h->have_loss = tg != NULL;
    return loss;
}
static void lab_bwd(Run &r) {
    LAB_OK(r.h, gpt2rt__cu_backward(r.h, r.st));
    r.h->acc_loss_sum += r.h->loss_sum;
    r.h->acc_targets += r.h->n_targets;
    r.h->acc_micro++;
    r.h->have_loss = 0;
}
static gpt2rt_step_stats lab_upd(Run &r) {
    gpt2rt_step_stats s;
    memset(&s, 0, sizeof s);
    s.lr = gpt2rt__opt_lr_at(&r.h->cfg, r.h->step);
    LAB_OK(r.h, gpt2rt__cu_update(r.h, r.st, s.lr, &s.grad_norm, &s.skipped, &s.loss_scale));
    if (!s.skipped) r.h->step++;
    s.step = r.h->step;
    s.loss = r.h->acc_targets ? (float)(r.h->acc_loss_sum / (double)r.h->acc_targets) : 0.0f;
    s.micro_batches = r.h->acc_micro;
    gpt2rt__accum_reset(r.h);
    return s;
}
static gpt2rt_step_stats lab_step(Run &r, const int32_t *in, const int32_t *tg) {
    lab_fwd(r, in, tg, 1);
    lab_bwd(r);
    return lab_upd(r);
}

/* device arena k of two runs, bitwise */
static void same_arena(const char *what, Run &a, Run &b, gpt2rt_mem k) {
    char name[128];
    snprintf(name, sizeof name, "%s: %s", what, gpt2rt_mem_name(k));
    if (a.st->bytes[k] != b.st->bytes[k]) {
        printf("  %-40s sizes differ (%llu, %llu): FAIL\n", name, (unsigned long long)a.st->bytes[k],
               (unsigned long long)b.st->bytes[k]);
        lab_failures++;
        return;
    }
    if (a.st->bytes[k]) lab_same_bits(name, a.st->arena[k], b.st->arena[k], a.st->bytes[k]);
}

/* max-norm relative error, NaN worst */
static double rel_err(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]), m = fabs((double)b[i]);
        if (d > num || d != d) num = d != d ? INFINITY : d;
        if (m > den) den = m;
    }
    return den > 0 ? num / den : num;
}

/* every trained tensor's raw gradient of run r vs the CPU context's, rel tol */
static void grads_vs_cpu(const char *what, Run &r, gpt2rt_ctx *cpu, double tol) {
    float *g = (float *)malloc((size_t)r.st->n_train * 4 + 4);
    LAB_OK(r.h, gpt2rt__cu_download_grads(r.h, r.st, g));
    double worst = 0;
    const char *wn = "";
    for (int i = 0; i < cpu->n_tensors; i++) {
        const gpt2rt__tensor *t = &cpu->tensors[i];
        if (t->goff < 0) continue;
        double e = rel_err(g + t->goff, cpu->grads + t->goff, t->rows * t->cols);
        if (!(e <= worst)) { worst = e; wn = t->name; }
    }
    int ok = worst <= tol;
    printf("  %-40s worst rel err %.3e (%s) tol %.0e  %s\n", what, worst, wn, tol, ok ? "PASS" : "FAIL");
    if (!ok) lab_failures++;
    free(g);
}

static void check_close(const char *what, double got, double want, double tol) {
    int ok = fabs(got - want) <= tol; /* NaN fails */
    printf("  %-40s %.7f vs %.7f (|d| %.2e, tol %.0e)  %s\n", what, got, want, fabs(got - want), tol, ok ? "PASS" : "FAIL");
    if (!ok) lab_failures++;
}
static void check_true(const char *what, int ok) {
    printf("  %-40s %s\n", what, ok ? "PASS" : "FAIL");
    if (!ok) lab_failures++;
}

/* ---------------------------------------------------------------- checks */

/* fp32 logits, loss, gradients vs the fixture and the CPU */
static void check_fp32_parity(gpt2rt_config cfg) {
    printf("fp32 forward/backward vs the fixture and the CPU backend\n");
    int64_t B = cfg.batch_size, T = cfg.seq_len, V = cfg.vocab_size, n;
    const int32_t *in = (const int32_t *)fx_f32("inputs", NULL), *tg = (const int32_t *)fx_f32("targets", NULL);
    gpt2rt_ctx *cpu = cpu_make(cfg, fx_weights);
    float loss_cpu;
    float *lc = (float *)malloc(sizeof(float) * (size_t)(B * T * V)), *lg = (float *)malloc(sizeof(float) * (size_t)(B * T * V));
    LAB_OK(cpu, gpt2rt_forward(cpu, in, tg, &loss_cpu));
    LAB_OK(cpu, gpt2rt_logits(cpu, lc, B * T * V));
    LAB_OK(cpu, gpt2rt_backward(cpu));
    for (int tf = 0; tf < 2; tf++) {
        gpt2rt_config c = cfg;
        c.tf32 = tf;
        Run r = run_make(c, GPT2RT_PRECISION_FP32, GPT2RT_RECOMPUTE_NONE, 0, fx_weights);
        float loss = lab_fwd(r, in, tg, 0);
        LAB_OK(r.h, gpt2rt__cu_logits(r.h, r.st, lg, B * T * V));
        const float *ref = fx_f32("logits", &n);
        if (!tf) {
            lab_compare("fp32 logits vs fixture (abs 1e-3)", lg, ref, (size_t)n, 1e-3f, 0.0f);
            lab_compare("fp32 logits vs CPU", lg, lc, (size_t)n, 1e-4f, 1e-4f);
            check_close("fp32 loss vs fixture", loss, fx_f32("loss", NULL)[0], 1e-4);
            check_close("fp32 loss vs CPU", loss, loss_cpu, 1e-5);
        } else {
            lab_compare("tf32 logits vs fixture (abs 1e-2)", lg, ref, (size_t)n, 1e-2f, 0.0f);
        }
        lab_bwd(r);
        grads_vs_cpu(tf ? "tf32 gradients vs CPU (rel 1e-2)" : "fp32 gradients vs CPU", r, cpu, tf ? 1e-2 : 1e-4);
        run_free(r);
    }
    gpt2rt_free(cpu);

    /* grad_accum = 2: the second micro-batch accumulates (dW +=, db via scratch) */
    gpt2rt_config c2 = cfg;
    c2.grad_accum = 2;
    const int32_t *si = (const int32_t *)fx_f32("step_inputs", NULL), *stg = (const int32_t *)fx_f32("step_targets", NULL);
    cpu = cpu_make(c2, fx_weights);
    Run r = run_make(c2, GPT2RT_PRECISION_FP32, GPT2RT_RECOMPUTE_NONE, 0, fx_weights);
    for (int k = 0; k < 2; k++) {
        LAB_OK(cpu, gpt2rt_forward(cpu, si + k * B * T, stg + k * B * T, NULL));
        LAB_OK(cpu, gpt2rt_backward(cpu));
        lab_fwd(r, si + k * B * T, stg + k * B * T, k);
        lab_bwd(r);
    }
    grads_vs_cpu("fp32 grad_accum=2 gradients vs CPU", r, cpu, 1e-4);
    gpt2rt_step_stats sc, sg = lab_upd(r);
    LAB_OK(cpu, gpt2rt_update(cpu, &sc));
    check_close("fp32 grad_accum=2 grad norm vs CPU", sg.grad_norm, sc.grad_norm, 1e-4 * sc.grad_norm);
    run_free(r);
    gpt2rt_free(cpu);

    free(lc);
    free(lg);
}

/* the 10 fixture steps: CPU, fp32, bf16, fp16 (CUDA); returns fp16's losses in f16_out */
static void check_steps(gpt2rt_config cfg, float *f16_out) {
    printf("10 AdamW steps on the fixture (warmup + cosine, clipping, decay)\n");
    int64_t BT = (int64_t)cfg.batch_size * cfg.seq_len, steps = (int64_t)fx_num("steps");
    const int32_t *si = (const int32_t *)fx_f32("step_inputs", NULL), *stg = (const int32_t *)fx_f32("step_targets", NULL);
    const float *sl = fx_f32("step_losses", NULL);
    float L[4][16];
    gpt2rt_ctx *cpu = cpu_make(cfg, fx_weights);
    for (int64_t k = 0; k < steps; k++) {
        gpt2rt_step_stats s;
        LAB_OK(cpu, gpt2rt_step(cpu, si + k * BT, stg + k * BT, &s));
        L[0][k] = s.loss;
    }
    gpt2rt_free(cpu);
    const gpt2rt_precision ps[3] = {GPT2RT_PRECISION_FP32, GPT2RT_PRECISION_BF16, GPT2RT_PRECISION_FP16};
    for (int p = 0; p < 3; p++) {
        Run r = run_make(cfg, ps[p], GPT2RT_RECOMPUTE_NONE, 0, fx_weights);
        for (int64_t k = 0; k < steps; k++) L[p + 1][k] = lab_step(r, si + k * BT, stg + k * BT).loss;
        if (p == 0) {
            gpt2rt__cu_refresh_overhead(r.st);
            printf("  measured overhead after training steps: %.1f MiB (device total %.1f GiB)\n",
                   GPT2RT__MIB(r.st->overhead), GPT2RT__GIB(r.st->mem_total));
        }
        run_free(r);
    }
    printf("  step   fixture     CPU        fp32       bf16       fp16\n");
    double w32 = 0, w16b = 0, w16h = 0;
    for (int64_t k = 0; k < steps; k++) {
        printf("  %4lld  %.6f  %.6f  %.6f  %.6f  %.6f\n", (long long)k, sl[k], L[0][k], L[1][k], L[2][k], L[3][k]);
        double a = fabs(L[1][k] - L[0][k]), b = fabs(L[2][k] - L[1][k]), h = fabs(L[3][k] - L[1][k]);
        w32 = !(a <= w32) ? a : w32; w16b = !(b <= w16b) ? b : w16b; w16h = !(h <= w16h) ? h : w16h;
        f16_out[k] = L[3][k];
    }
    printf("  %-40s worst %.3e  %s\n", "fp32 CUDA vs CPU losses (1e-4)", w32, w32 <= 1e-4 ? "PASS" : "FAIL");
    printf("  %-40s worst %.3e  %s\n", "bf16 vs fp32 losses (0.05)", w16b, w16b <= 0.05 ? "PASS" : "FAIL");
    printf("  %-40s worst %.3e  %s\n", "fp16 vs fp32 losses (0.05)", w16h, w16h <= 0.05 ? "PASS" : "FAIL");
    lab_failures += !(w32 <= 1e-4) + !(w16b <= 0.05) + !(w16h <= 0.05);
}

/* two runs, bitwise: weights, master, moments after 3 steps, then one more gradient */
static void check_determinism(gpt2rt_config cfg, const char *weights, const int32_t *in, const int32_t *tg,
                              int64_t stride, const char *label) {
    const gpt2rt_precision ps[3] = {GPT2RT_PRECISION_FP32, GPT2RT_PRECISION_BF16, GPT2RT_PRECISION_FP16};
    for (int p = 0; p < 3; p++) {
        Run a = run_make(cfg, ps[p], GPT2RT_RECOMPUTE_NONE, 0, weights);
        Run b = run_make(cfg, ps[p], GPT2RT_RECOMPUTE_NONE, 0, weights);
        for (int k = 0; k < 3; k++) { lab_step(a, in + k * stride, tg + k * stride); lab_step(b, in + k * stride, tg + k * stride); }
        lab_fwd(a, in + 3 * stride, tg + 3 * stride, 0); lab_bwd(a);
        lab_fwd(b, in + 3 * stride, tg + 3 * stride, 0); lab_bwd(b);
        LAB_CK(cudaDeviceSynchronize());
        char what[96];
        snprintf(what, sizeof what, "%s %s two runs", label, prec_name(ps[p]));
        same_arena(what, a, b, GPT2RT_MEM_WEIGHTS);
        same_arena(what, a, b, GPT2RT_MEM_MASTER);
        same_arena(what, a, b, GPT2RT_MEM_MOMENTS);
        same_arena(what, a, b, GPT2RT_MEM_GRADS);
        run_free(a);
        run_free(b);
    }
}

/* recompute levels and the fused classifier give bitwise the gradients of none */
static void check_recompute(gpt2rt_config cfg, const char *weights, const int32_t *in, const int32_t *tg,
                            int64_t stride, const char *label) {
    const gpt2rt_precision ps[2] = {GPT2RT_PRECISION_FP32, GPT2RT_PRECISION_BF16};
    for (int p = 0; p < 2; p++) {
        /* two steps first, so the weights are not the loaded ones, then one gradient */
        Run none = run_make(cfg, ps[p], GPT2RT_RECOMPUTE_NONE, 0, weights);
        for (int k = 0; k < 2; k++) lab_step(none, in + k * stride, tg + k * stride);
        lab_fwd(none, in + 2 * stride, tg + 2 * stride, 0);
        lab_bwd(none);
        struct { gpt2rt_recompute rec; int ck; int fuse; const char *name; } v[4] = {
            {GPT2RT_RECOMPUTE_SELECTIVE, 0, 0, "selective"}, {GPT2RT_RECOMPUTE_FULL, 1, 0, "full ck=1"},
            {GPT2RT_RECOMPUTE_FULL, cfg.n_layer, 0, "full ck=L"}, {GPT2RT_RECOMPUTE_NONE, 0, 1, "fused classifier"}};
        for (int i = 0; i < 4; i++) {
            Run r = run_make(cfg, ps[p], v[i].rec, v[i].ck, weights);
            for (int k = 0; k < 2; k++) lab_step(r, in + k * stride, tg + k * stride);
            lab_fwd(r, in + 2 * stride, tg + 2 * stride, v[i].fuse);
            lab_bwd(r);
            LAB_CK(cudaDeviceSynchronize());
            char what[96];
            snprintf(what, sizeof what, "%s %s %s == none", label, prec_name(ps[p]), v[i].name);
            same_arena(what, r, none, GPT2RT_MEM_GRADS);
            run_free(r);
        }
        run_free(none);
    }
}

/* frozen groups: gradients vs CPU, frozen weights unchanged, selective == none */
static void check_frozen(gpt2rt_config base) {
    const int32_t *si = (const int32_t *)fx_f32("step_inputs", NULL), *stg = (const int32_t *)fx_f32("step_targets", NULL);
    int64_t BT = (int64_t)base.batch_size * base.seq_len;
    /* attention frozen with recompute NONE: ln_1's output is not kept and passes through dbig;
       attention and MLP frozen: SELECTIVE has no rcbuf at all */
    const unsigned fr[3] = {GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_POS_EMBED, GPT2RT_GROUP_LAYERNORM | GPT2RT_GROUP_TOKEN_EMBED,
                            GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP};
    for (int f = 0; f < 3; f++) {
        gpt2rt_config c = base;
        c.frozen = fr[f];
        printf("frozen 0x%x\n", c.frozen);
        gpt2rt_ctx *cpu = cpu_make(c, fx_weights);
        Run r = run_make(c, GPT2RT_PRECISION_FP32, GPT2RT_RECOMPUTE_NONE, 0, fx_weights);
        LAB_OK(cpu, gpt2rt_forward(cpu, si, stg, NULL));
        LAB_OK(cpu, gpt2rt_backward(cpu));
        lab_fwd(r, si, stg, 0);
        lab_bwd(r);
        grads_vs_cpu("fp32 frozen gradients vs CPU", r, cpu, 1e-4);
        gpt2rt_step_stats sc, sg = lab_upd(r);
        LAB_OK(cpu, gpt2rt_update(cpu, &sc));
        float worst = 0.0f;
        for (int k = 1; k < 4; k++) {
            gpt2rt_step_stats a, b;
            LAB_OK(cpu, gpt2rt_step(cpu, si + k * BT, stg + k * BT, &a));
            b = lab_step(r, si + k * BT, stg + k * BT);
            worst = fmaxf(worst, fabsf(a.loss - b.loss));
        }
        check_close("fp32 frozen 4-step loss vs CPU", worst, 0.0, 1e-4);
        (void)sg;
        /* frozen tensors untouched, trained ones moved: compare the device weights with the load */
        LAB_OK(r.h, gpt2rt__cu_download_params(r.h, r.st));
        gpt2rt_ctx *init = cpu_make(c, fx_weights);
        int frozen_same = 1, trained_moved = 1;
        for (int i = 0; i < init->n_tensors; i++) {
            const gpt2rt__tensor *t = &init->tensors[i];
            float *dev = (float *)malloc((size_t)(t->rows * t->cols) * 4 + 4);
            gpt2rt_ctx *h = r.h;
            /* the frozen weights on the device: the fp32 copy of the weights arena */
            if (t->goff < 0) {
                LAB_CK(cudaMemcpy(dev, (const float *)r.st->w + t->off, (size_t)(t->rows * t->cols) * 4, cudaMemcpyDeviceToHost));
                frozen_same &= !memcmp(dev, init->params + t->off, (size_t)(t->rows * t->cols) * 4);
            } else {
                trained_moved &= memcmp(h->params + t->off, init->params + t->off, (size_t)(t->rows * t->cols) * 4) != 0;
            }
            free(dev);
        }
        check_true("frozen weights unchanged on the device", frozen_same);
        check_true("trained weights moved", trained_moved);
        gpt2rt_free(init);
        run_free(r);
        gpt2rt_free(cpu);
        /* bf16 selective == none with frozen groups */
        Run a = run_make(c, GPT2RT_PRECISION_BF16, GPT2RT_RECOMPUTE_NONE, 0, fx_weights);
        Run b = run_make(c, GPT2RT_PRECISION_BF16, GPT2RT_RECOMPUTE_SELECTIVE, 0, fx_weights);
        lab_step(a, si, stg); lab_step(b, si, stg);
        lab_fwd(a, si + BT, stg + BT, 0); lab_bwd(a);
        lab_fwd(b, si + BT, stg + BT, 0); lab_bwd(b);
        LAB_CK(cudaDeviceSynchronize());
        same_arena("bf16 frozen selective == none", a, b, GPT2RT_MEM_GRADS);
        same_arena("bf16 frozen selective == none", a, b, GPT2RT_MEM_WEIGHTS);
        run_free(a);
        run_free(b);
    }
}

/* fp16 overflow: one step with a wte row (of a token of that step's inputs) x 1e30 */
static void check_overflow(gpt2rt_config cfg, const char *weights, const int32_t *in, const int32_t *tg, int64_t stride,
                           int steps, const float *clean, const char *label) {
    const int poison = 3;
    printf("fp16 overflow at step %d (%s)\n", poison, label);
    Run r = run_make(cfg, GPT2RT_PRECISION_FP16, GPT2RT_RECOMPUTE_NONE, 0, weights);
    float scale0 = r.st->loss_scale, losses[64];
    int skipped = 0, n = 0;
    int64_t C = cfg.n_embd;
    int64_t wte_n = (int64_t)cfg.vocab_size * C;
    float *wte = (float *)malloc((size_t)wte_n * 4), *bad = (float *)malloc((size_t)wte_n * 4);
    float scale_after = 0.0f;
    for (int k = 0; k < steps; k++) {
        if (k == poison) {
            int32_t tok = in[k * stride];
            LAB_OK(r.h, gpt2rt__cu_download_params(r.h, r.st));
            LAB_OK(r.h, gpt2rt_param_read(r.h, "transformer.wte.weight", GPT2RT_PARAM_VALUE, wte, wte_n));
            memcpy(bad, wte, (size_t)wte_n * 4);
            for (int64_t c = 0; c < C; c++) bad[tok * C + c] *= 1e30f;
            LAB_OK(r.h, gpt2rt_param_write(r.h, "transformer.wte.weight", bad, wte_n));
            LAB_OK(r.h, gpt2rt__cu_upload_params(r.h, r.st));
            gpt2rt_step_stats s = lab_step(r, in + k * stride, tg + k * stride);
            skipped += s.skipped;
            scale_after = s.loss_scale;
            printf("  poisoned step: loss %g norm %g skipped %d scale %g -> %g, step count %lld\n", s.loss, s.grad_norm,
                   s.skipped, scale0, s.loss_scale, (long long)s.step);
            LAB_OK(r.h, gpt2rt__cu_download_params(r.h, r.st));
            LAB_OK(r.h, gpt2rt_param_write(r.h, "transformer.wte.weight", wte, wte_n));
            LAB_OK(r.h, gpt2rt__cu_upload_params(r.h, r.st));
        }
        gpt2rt_step_stats s = lab_step(r, in + k * stride, tg + k * stride);
        skipped += s.skipped;
        losses[n++] = s.loss;
    }
    check_true("exactly one update skipped", skipped == 1);
    check_close("loss scale halved", scale_after, scale0 * 0.5, 0.0);
    check_true("step count = steps", r.h->step == steps);
    double worst = 0;
    for (int k = 0; k < steps; k++) {
        double e = fabs(losses[k] - clean[k]);
        worst = !(e <= worst) ? e : worst;
    }
    check_close("losses vs the clean fp16 run (worst |d|)", worst, 0.0, 1e-3);
    if (!strcmp(label, "fixed batch"))
        check_true("loss keeps decreasing after the skip", losses[steps - 1] < losses[poison] && losses[poison] < losses[0]);
    free(wte);
    free(bad);
    run_free(r);
}

/* HS = 64 (tensor-core attention in bf16/fp16): a random-init model, one fixed batch */
static void check_hs64(void) {
    printf("HS = 64 model (L2 H2 C128 V1000 T128 B4, random init, fixed batch): fast attention path\n");
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2; c.n_head = 2; c.n_embd = 128; c.vocab_size = 1000; c.max_seq_len = 128;
    c.batch_size = 4; c.seq_len = 128; c.lr = 1e-3f; c.weight_decay = 0.1f; c.seed = 7;
    const int steps = 10;
    int64_t BT = (int64_t)c.batch_size * c.seq_len;
    int32_t *tok = (int32_t *)malloc((size_t)(BT + 1) * 4);
    for (int64_t i = 0; i <= BT; i++) tok[i] = (int32_t)((lab_uniform() * 0.5f + 0.5f) * 999.0f);
    /* the same batch every step: stride 0 */
    const int32_t *in = tok, *tg = tok + 1;
    float L[4][steps];
    gpt2rt_ctx *cpu = cpu_make(c, NULL);
    for (int k = 0; k < steps; k++) {
        gpt2rt_step_stats s;
        LAB_OK(cpu, gpt2rt_step(cpu, in, tg, &s));
        L[0][k] = s.loss;
    }
    gpt2rt_free(cpu);
    const gpt2rt_precision ps[3] = {GPT2RT_PRECISION_FP32, GPT2RT_PRECISION_BF16, GPT2RT_PRECISION_FP16};
    for (int p = 0; p < 3; p++) {
        Run r = run_make(c, ps[p], GPT2RT_RECOMPUTE_NONE, 0, NULL);
        for (int k = 0; k < steps; k++) L[p + 1][k] = lab_step(r, in, tg).loss;
        run_free(r);
    }
    double w32 = 0, wb = 0, wh = 0;
    printf("  step   CPU        fp32       bf16       fp16\n");
    for (int k = 0; k < steps; k++) {
        printf("  %4d  %.6f  %.6f  %.6f  %.6f\n", k, L[0][k], L[1][k], L[2][k], L[3][k]);
        double a = fabs(L[1][k] - L[0][k]), b = fabs(L[2][k] - L[1][k]), h = fabs(L[3][k] - L[1][k]);
        w32 = !(a <= w32) ? a : w32; wb = !(b <= wb) ? b : wb; wh = !(h <= wh) ? h : wh;
    }
    printf("  %-40s worst %.3e  %s\n", "fp32 CUDA vs CPU losses (1e-4)", w32, w32 <= 1e-4 ? "PASS" : "FAIL");
    printf("  %-40s worst %.3e  %s\n", "bf16 vs fp32 losses (0.05)", wb, wb <= 0.05 ? "PASS" : "FAIL");
    printf("  %-40s worst %.3e  %s\n", "fp16 vs fp32 losses (0.05)", wh, wh <= 0.05 ? "PASS" : "FAIL");
    lab_failures += !(w32 <= 1e-4) + !(wb <= 0.05) + !(wh <= 0.05);
    check_true("losses decrease (fp32, bf16)", L[1][steps - 1] < L[1][0] && L[2][steps - 1] < L[2][0]);
    check_determinism(c, NULL, in, tg, 0, "HS64");
    check_recompute(c, NULL, in, tg, 0, "HS64");
    check_overflow(c, NULL, in, tg, 0, steps, L[3], "fixed batch");
    free(tok);
}

/* weights and moments out of one run into a fresh one (download/upload, the state_save /
   state_load path): both continue bitwise alike; read_tensor agrees with download_grads */
static void check_resume(gpt2rt_config cfg) {
    const int32_t *si = (const int32_t *)fx_f32("step_inputs", NULL), *stg = (const int32_t *)fx_f32("step_targets", NULL);
    int64_t BT = (int64_t)cfg.batch_size * cfg.seq_len;
    const gpt2rt_precision ps[2] = {GPT2RT_PRECISION_FP32, GPT2RT_PRECISION_BF16};
    for (int p = 0; p < 2; p++) {
        Run a = run_make(cfg, ps[p], GPT2RT_RECOMPUTE_NONE, 0, fx_weights);
        Run b = run_make(cfg, ps[p], GPT2RT_RECOMPUTE_NONE, 0, NULL);
        for (int k = 0; k < 3; k++) lab_step(a, si + k * BT, stg + k * BT);
        int64_t n = a.st->n_train;
        float *m = (float *)malloc((size_t)n * 4), *v = (float *)malloc((size_t)n * 4);
        LAB_OK(a.h, gpt2rt__cu_download_params(a.h, a.st));
        LAB_OK(a.h, gpt2rt__cu_download_moments(a.h, a.st, m, v));
        memcpy(b.h->params, a.h->params, (size_t)a.h->n_params * 4);
        LAB_OK(b.h, gpt2rt__cu_upload_params(b.h, b.st));
        LAB_OK(b.h, gpt2rt__cu_upload_moments(b.h, b.st, m, v));
        b.h->step = a.h->step;
        for (int k = 3; k < 5; k++) { lab_step(a, si + k * BT, stg + k * BT); lab_step(b, si + k * BT, stg + k * BT); }
        lab_fwd(a, si + 5 * BT, stg + 5 * BT, 0); lab_bwd(a);
        lab_fwd(b, si + 5 * BT, stg + 5 * BT, 0); lab_bwd(b);
        LAB_CK(cudaDeviceSynchronize());
        char what[64];
        snprintf(what, sizeof what, "%s resumed run", prec_name(ps[p]));
        same_arena(what, a, b, GPT2RT_MEM_WEIGHTS);
        same_arena(what, a, b, GPT2RT_MEM_MASTER);
        same_arena(what, a, b, GPT2RT_MEM_MOMENTS);
        same_arena(what, a, b, GPT2RT_MEM_GRADS);
        /* one tensor through read_tensor vs the whole gradient */
        const gpt2rt__tensor *t = &gpt2rt__layer_tensors(a.h, 0)[GPT2RT__FCW];
        float *g = (float *)malloc((size_t)n * 4), *one = (float *)malloc((size_t)(t->rows * t->cols) * 4);
        LAB_OK(a.h, gpt2rt__cu_download_grads(a.h, a.st, g));
        LAB_OK(a.h, gpt2rt__cu_read_tensor(a.h, a.st, t, GPT2RT_PARAM_GRAD, one));
        check_true("read_tensor(GRAD) == download_grads slice", !memcmp(one, g + t->goff, (size_t)(t->rows * t->cols) * 4));
        free(g); free(one); free(m); free(v);
        run_free(a);
        run_free(b);
    }
}

/* odd B*T (3 x 21): the token buckets in their planned workspace slot, every activation
   sub-buffer still 256-byte aligned (d.align), so cuBLASLt picks the same algorithms for a
   kept block and for dbig / rcbuf: gradients vs CPU and selective == none bitwise */
static void check_odd_shape(gpt2rt_config base) {
    printf("odd shape: the fixture model at B=3 T=21\n");
    gpt2rt_config c = base;
    c.batch_size = 3;
    c.seq_len = 21;
    int64_t BT = 63;
    const int32_t *si = (const int32_t *)fx_f32("step_inputs", NULL), *stg = (const int32_t *)fx_f32("step_targets", NULL);
    gpt2rt_ctx *cpu = cpu_make(c, fx_weights);
    Run r = run_make(c, GPT2RT_PRECISION_FP32, GPT2RT_RECOMPUTE_NONE, 0, fx_weights);
    for (int k = 0; k < 2; k++) {
        gpt2rt_step_stats a;
        LAB_OK(cpu, gpt2rt_step(cpu, si + k * BT, stg + k * BT, &a));
        lab_step(r, si + k * BT, stg + k * BT);
    }
    LAB_OK(cpu, gpt2rt_forward(cpu, si + 2 * BT, stg + 2 * BT, NULL));
    LAB_OK(cpu, gpt2rt_backward(cpu));
    lab_fwd(r, si + 2 * BT, stg + 2 * BT, 1);
    lab_bwd(r);
    grads_vs_cpu("fp32 B3 T21 gradients vs CPU (after 2 steps)", r, cpu, 1e-4);
    run_free(r);
    gpt2rt_free(cpu);
    Run a = run_make(c, GPT2RT_PRECISION_BF16, GPT2RT_RECOMPUTE_NONE, 0, fx_weights);
    Run b = run_make(c, GPT2RT_PRECISION_BF16, GPT2RT_RECOMPUTE_SELECTIVE, 0, fx_weights);
    lab_fwd(a, si, stg, 0); lab_bwd(a);
    lab_fwd(b, si, stg, 0); lab_bwd(b);
    LAB_CK(cudaDeviceSynchronize());
    same_arena("bf16 B3T21 selective == none", a, b, GPT2RT_MEM_GRADS);
    run_free(a);
    run_free(b);
}

/* a token outside [0, Vp) is refused before anything is queued from the pinned token
   buffer; the next forward then gives the loss it gives without the refused one */
static void check_bad_token(gpt2rt_config base) {
    printf("bad token\n");
    const int32_t *si = (const int32_t *)fx_f32("step_inputs", NULL), *stg = (const int32_t *)fx_f32("step_targets", NULL);
    int64_t BT = (int64_t)base.batch_size * base.seq_len;
    Run r = run_make(base, GPT2RT_PRECISION_FP32, GPT2RT_RECOMPUTE_NONE, 0, fx_weights);
    float want = lab_fwd(r, si + BT, stg + BT, 0);
    int32_t *bad = (int32_t *)malloc((size_t)BT * 4);
    memcpy(bad, si, (size_t)BT * 4);
    bad[BT / 2] = (int32_t)r.st->d.Vp;
    float loss = -1.0f;
    gpt2rt_result res = gpt2rt__cu_forward(r.h, r.st, bad, stg, &loss);
    printf("  refused: %s: %s\n", gpt2rt_result_string(res), gpt2rt_last_error(r.h));
    check_true("a token = Vp is refused (GPT2RT_ERR_INVALID_ARGUMENT)", res == GPT2RT_ERR_INVALID_ARGUMENT);
    float again = lab_fwd(r, si + BT, stg + BT, 0);
    check_true("the next forward: the same loss, bitwise", memcmp(&want, &again, 4) == 0);
    free(bad);
    run_free(r);
}

/* the public API on a CUDA context (gpt2rt_create with backend CUDA): 3 gpt2rt_step calls
   give bitwise the losses of the driver run above them; gradients through
   gpt2rt_param_read against the CPU backend; gpt2rt_state_save on the GPU, then
   gpt2rt_state_load on the CPU and on the GPU: the same weights, bitwise in fp32 */
static void check_public_api(gpt2rt_config base) {
    printf("public API on a CUDA context\n");
    const int32_t *si = (const int32_t *)fx_f32("step_inputs", NULL), *stg = (const int32_t *)fx_f32("step_targets", NULL);
    int64_t BT = (int64_t)base.batch_size * base.seq_len;
    gpt2rt_config c = base;
    c.backend = GPT2RT_BACKEND_CUDA;
    gpt2rt_ctx *g = NULL, *g2 = NULL;
    uint64_t used0 = device_used();
    LAB_OK(g, gpt2rt_create(&g, &c));
    LAB_OK(g, gpt2rt_weights_load(g, fx_weights));
    Run r = run_make(base, GPT2RT_PRECISION_FP32, GPT2RT_RECOMPUTE_NONE, 0, fx_weights);
    int same = 1;
    for (int k = 0; k < 3; k++) {
        gpt2rt_step_stats a, b = lab_step(r, si + k * BT, stg + k * BT);
        LAB_OK(g, gpt2rt_step(g, si + k * BT, stg + k * BT, &a));
        same &= memcmp(&a.loss, &b.loss, 4) == 0 && memcmp(&a.grad_norm, &b.grad_norm, 4) == 0;
    }
    check_true("gpt2rt_step on CUDA == the driver run (losses, norms)", same);
    run_free(r);
    /* gradients of one more forward/backward, public API, against the CPU backend */
    gpt2rt_ctx *cpu = cpu_make(base, NULL);
    char path[64];
    snprintf(path, sizeof path, "/tmp/gpt2rt_lab_state_%d.safetensors", (int)getpid());
    LAB_OK(g, gpt2rt_state_save(g, path));
    LAB_OK(cpu, gpt2rt_state_load(cpu, path));
    LAB_OK(g, gpt2rt_forward(g, si + 3 * BT, stg + 3 * BT, NULL));
    LAB_OK(g, gpt2rt_backward(g));
    LAB_OK(cpu, gpt2rt_forward(cpu, si + 3 * BT, stg + 3 * BT, NULL));
    LAB_OK(cpu, gpt2rt_backward(cpu));
    double worst = 0.0;
    for (int i = 0; i < gpt2rt_param_count(g); i++) {
        gpt2rt_param_info in;
        LAB_OK(g, gpt2rt_param_info_get(g, i, &in));
        float *x = (float *)malloc((size_t)in.numel * 4), *y = (float *)malloc((size_t)in.numel * 4);
        LAB_OK(g, gpt2rt_param_read(g, in.name, GPT2RT_PARAM_GRAD, x, in.numel));
        LAB_OK(cpu, gpt2rt_param_read(cpu, in.name, GPT2RT_PARAM_GRAD, y, in.numel));
        double mx = 0.0, md = 0.0;
        for (int64_t j = 0; j < in.numel; j++) {
            mx = fmax(mx, fabs((double)y[j]));
            md = fmax(md, fabs((double)x[j] - (double)y[j]));
        }
        double rel = md / (mx > 0.0 ? mx : 1.0);
        worst = !(rel <= worst) ? rel : worst;
        free(x); free(y);
    }
    check_close("gpt2rt_param_read(GRAD) CUDA vs CPU, worst relative", worst, 0.0, 1e-4);
    LAB_OK(g, gpt2rt_update(g, NULL));
    LAB_OK(cpu, gpt2rt_update(cpu, NULL));
    /* save on the GPU, resume on the CPU and on a second CUDA context */
    LAB_OK(g, gpt2rt_state_save(g, path));
    gpt2rt_ctx *cpu2 = cpu_make(base, NULL);
    LAB_OK(cpu2, gpt2rt_state_load(cpu2, path));
    LAB_OK(g2, gpt2rt_create(&g2, &c));
    LAB_OK(g2, gpt2rt_state_load(g2, path));
    int w_cpu = 1, w_gpu = 1;
    for (int i = 0; i < gpt2rt_param_count(g); i++) {
        gpt2rt_param_info in;
        LAB_OK(g, gpt2rt_param_info_get(g, i, &in));
        float *x = (float *)malloc((size_t)in.numel * 4), *y = (float *)malloc((size_t)in.numel * 4);
        float *z = (float *)malloc((size_t)in.numel * 4);
        LAB_OK(g, gpt2rt_param_read(g, in.name, GPT2RT_PARAM_VALUE, x, in.numel));
        LAB_OK(cpu2, gpt2rt_param_read(cpu2, in.name, GPT2RT_PARAM_VALUE, y, in.numel));
        LAB_OK(g2, gpt2rt_param_read(g2, in.name, GPT2RT_PARAM_VALUE, z, in.numel));
        w_cpu &= !memcmp(x, y, (size_t)in.numel * 4);
        w_gpu &= !memcmp(x, z, (size_t)in.numel * 4);
        free(x); free(y); free(z);
    }
    check_true("state saved on CUDA, loaded on the CPU: same weights", w_cpu);
    check_true("state saved on CUDA, loaded on CUDA: same weights", w_gpu);
    gpt2rt_step_stats a, b;
    LAB_OK(g, gpt2rt_step(g, si + 4 * BT, stg + 4 * BT, &a));
    LAB_OK(g2, gpt2rt_step(g2, si + 4 * BT, stg + 4 * BT, &b));
    check_true("the resumed CUDA context steps bitwise like the original", !memcmp(&a.loss, &b.loss, 4));
    remove(path);
    gpt2rt_free(cpu2);
    gpt2rt_free(cpu);
    gpt2rt_free(g2);
    gpt2rt_free(g);
    /* two CUDA contexts and a lab run created and freed: the device memory in use is back
       where it was (cudaFree returns whole allocations; 2 MiB is the driver's granule) */
    uint64_t used1 = device_used();
    check_close("device MiB in use after gpt2rt_free vs before gpt2rt_create", GPT2RT__MIB(used1),
                GPT2RT__MIB(used0), 2.0);
}

/* a plan above the device's free memory is refused before anything is allocated, with the
   table and the advisor's suggestion, also when memory_budget is above the free memory;
   and a plan above memory_budget, naming the budget */
static int max_batch_for(uint64_t budget, gpt2rt_memory_plan *best); /* timing, below */
static void check_oom_refusal(void) {
    printf("refusals before allocating\n");
    size_t fr = 0, tot = 0;
    LAB_CK(cudaMemGetInfo(&fr, &tot));
    gpt2rt_memory_plan p;
    memset(&p, 0, sizeof p);
    int b = max_batch_for((uint64_t)((double)fr * 1.3), &p); /* a plan between free and 1.3x free */
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.seq_len = 1024; c.batch_size = b; c.backend = GPT2RT_BACKEND_CUDA; c.precision = GPT2RT_PRECISION_BF16;
    c.memory_budget = (uint64_t)fr * 2; /* above the free memory: the free memory decides */
    gpt2rt_memory_plan q;
    LAB_OK(NULL, gpt2rt_plan(&c, &q));
    uint64_t used0 = device_used();
    gpt2rt_ctx *g = NULL;
    gpt2rt_result r = gpt2rt_create(&g, &c);
    const char *e = gpt2rt_last_error(g);
    printf("  B=%d: plan %.2f GiB, %.2f GiB free, budget %.2f GiB\n", b, GPT2RT__GIB(q.total[0]), GPT2RT__GIB(fr),
           GPT2RT__GIB(c.memory_budget));
    check_true("plan above the free memory (budget above it): refused OUT_OF_MEMORY",
               q.total[0] > fr && r == GPT2RT_ERR_OUT_OF_MEMORY);
    check_true("  its message: nothing allocated, the table, what would fit",
               e && strstr(e, "nothing was allocated") && strstr(e, "activations") && strstr(e, "what would fit"));
    check_close("  device MiB in use after the refusal vs before", GPT2RT__MIB(device_used()), GPT2RT__MIB(used0), 2.0);
    gpt2rt_free(g);
    g = NULL;
    c.batch_size = 8;
    c.memory_budget = (uint64_t)1 << 30; /* the B=8 plan is 5.2 GiB */
    r = gpt2rt_create(&g, &c);
    e = gpt2rt_last_error(g);
    check_true("plan above memory_budget: refused OUT_OF_MEMORY, naming the budget (1.00 GiB)",
               r == GPT2RT_ERR_OUT_OF_MEMORY && e && strstr(e, "the budget is 1.00 GiB"));
    gpt2rt_free(g);
}

/* ---------------------------------------------------------------- sanitizer steps */
/* A few small steps that launch every kernel of the driver, for compute-sanitizer
   (memcheck, racecheck; make test-gpu): the fixture (HS = 16: generic attention) in fp32
   with two accumulated micro-batches (fused and unfused classifier, the bias-gradient
   scratch) and the logits read back; attention and MLP frozen under SELECTIVE in bf16
   (no rcbuf, outputs through dbig); the HS = 64 model (tensor-core attention) in bf16
   SELECTIVE with two micro-batches and in fp16 FULL recompute. No numbers are checked
   here: the other modes do that. */
static void sanitize_steps(gpt2rt_config fx) {
    const int32_t *si = (const int32_t *)fx_f32("step_inputs", NULL), *stg = (const int32_t *)fx_f32("step_targets", NULL);
    int64_t BT = (int64_t)fx.batch_size * fx.seq_len;
    gpt2rt_config c = fx;
    c.grad_accum = 2;
    printf("sanitize: fixture fp32, 2 micro-batches, logits\n");
    Run r = run_make(c, GPT2RT_PRECISION_FP32, GPT2RT_RECOMPUTE_NONE, 0, fx_weights);
    lab_fwd(r, si, stg, 1); lab_bwd(r);
    lab_fwd(r, si + BT, stg + BT, 0);
    float *logits = (float *)malloc((size_t)(BT * r.st->d.V) * 4);
    LAB_OK(r.h, gpt2rt__cu_logits(r.h, r.st, logits, BT * r.st->d.V));
    free(logits);
    lab_bwd(r); lab_upd(r);
    run_free(r);
    printf("sanitize: fixture bf16, attention and MLP frozen, selective\n");
    c = fx;
    c.frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP;
    r = run_make(c, GPT2RT_PRECISION_BF16, GPT2RT_RECOMPUTE_SELECTIVE, 0, fx_weights);
    lab_step(r, si, stg);
    run_free(r);
    memset(&c, 0, sizeof c); /* the HS = 64 model of check_hs64 */
    c.n_layer = 2; c.n_head = 2; c.n_embd = 128; c.vocab_size = 1000; c.max_seq_len = 128;
    c.batch_size = 2; c.seq_len = 128; c.seed = 7; c.grad_accum = 2;
    int64_t BT2 = (int64_t)c.batch_size * c.seq_len;
    int32_t *tok = (int32_t *)malloc((size_t)(2 * BT2 + 1) * 4);
    for (int64_t i = 0; i <= 2 * BT2; i++) tok[i] = (int32_t)((lab_uniform() * 0.5f + 0.5f) * 999.0f);
    printf("sanitize: HS = 64 bf16 selective, 2 micro-batches\n");
    r = run_make(c, GPT2RT_PRECISION_BF16, GPT2RT_RECOMPUTE_SELECTIVE, 0, NULL);
    lab_fwd(r, tok, tok + 1, 1); lab_bwd(r);
    lab_fwd(r, tok + BT2, tok + BT2 + 1, 1); lab_bwd(r);
    lab_upd(r);
    run_free(r);
    printf("sanitize: HS = 64 fp16 full recompute (checkpoint every layer)\n");
    c.grad_accum = 1;
    r = run_make(c, GPT2RT_PRECISION_FP16, GPT2RT_RECOMPUTE_FULL, 1, NULL);
    lab_step(r, tok, tok + 1);
    run_free(r);
    free(tok);
    LAB_CK(cudaDeviceSynchronize());
}

/* ---------------------------------------------------------------- timing */
static double peak_tflops(const char *name) {
    if (strstr(name, "H100 PCIe")) return 756.0;
    if (strstr(name, "H100") || strstr(name, "H200")) return 989.4;
    return 989.4; /* unknown: printed with the name */
}

/* one timed configuration: micro-batch B, recompute rec (FULL: every ck-th layer kept),
   accum micro-batches per update, the LM head over chunk tokens at a time (0: all);
   label names it in the machine-readable line */
static void time_gpt2_cfg(int B, const char *gpu, double peak, gpt2rt_recompute rec, int ck, int accum,
                          const char *label, int chunk = 0, int profile = 0,
                          unsigned fuse = GPT2RT__CU_MM_FUSE_DEFAULT,
                          uint32_t red_w = GPT2RT__CU_BLAS_REDUCTION_W_DEFAULT) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c); /* GPT-2 124M shape */
    c.seq_len = 1024;
    c.weight_decay = 0.1f;
    gpt2rt_config hc = c;
    hc.batch_size = 1;
    hc.seq_len = 1; /* the host side needs the weights only */
    Run r;
    r.h = cpu_make(hc, NULL);
    c.batch_size = B;
    c.backend = GPT2RT_BACKEND_CUDA;
    c.precision = GPT2RT_PRECISION_BF16;
    c.recompute = rec;
    c.checkpoint_every = rec == GPT2RT_RECOMPUTE_FULL ? ck : 0;
    c.grad_accum = accum;
    c.classifier_chunk = chunk;
    if (gpt2rt_plan(&c, &r.plan) != GPT2RT_OK) { printf("plan: %s\n", r.plan.error); exit(2); }
    char err[2048];
    if (gpt2rt__cu_create_cfg(r.h, &r.plan.config, &r.st, err, sizeof err) != GPT2RT_OK) {
        printf("gpt2rt mode=bf16%s batch=%d SKIP: %s\n", label, B, err);
        gpt2rt_free(r.h);
        return;
    }
    r.h->cu = r.st;
    r.h->cfg.precision = r.plan.config.precision;
    r.st->blas.fuse = fuse; /* before the first product: the plans remember these */
    r.st->blas.reduction_mask_w = red_w;
    double created = (double)(r.st->mem_total - r.st->free_after);
    int64_t BT = (int64_t)B * 1024;
    int32_t *tok = (int32_t *)malloc((size_t)(4 * BT + 1) * 4);
    auto step = [&](int k) {
        for (int a = 0; a < accum - 1; a++) {
            int j = (k + a) % 4;
            lab_fwd(r, tok + j * BT, tok + j * BT + 1, 1);
            lab_bwd(r);
        }
        return lab_step(r, tok + ((k + accum - 1) % 4) * BT, tok + ((k + accum - 1) % 4) * BT + 1);
    };
    for (int64_t i = 0; i <= 4 * BT; i++) tok[i] = (int32_t)((lab_uniform() * 0.5f + 0.5f) * 50256.0f);
    const int warm = 3, steps = profile ? 1 : 10;
    gpt2rt_step_stats s;
    for (int k = 0; k < warm; k++) s = step(k);
    LAB_CK(cudaDeviceSynchronize());
#ifndef GPT2RT_CUDA_EMU
    if (profile) LAB_CK(cudaProfilerStart());
#endif
    double t0 = gpt2rt__now();
    for (int k = 0; k < steps; k++) s = step(k);
    LAB_CK(cudaDeviceSynchronize());
    double dt = gpt2rt__now() - t0;
#ifndef GPT2RT_CUDA_EMU
    if (profile) LAB_CK(cudaProfilerStop());
#endif
    gpt2rt__cu_refresh_overhead(r.st);
    double tps = (double)BT * accum * steps / dt, mfu = tps * r.plan.flops_per_token / (peak * 1e12);
    double used = (double)(r.st->mem_total - r.st->free_after);
    printf("gpt2rt mode=bf16%s batch=%d tokens_per_s=%.0f step_ms=%.2f mfu=%.4f peak_gib=%.3f arenas_gib=%.3f "
           "overhead_gib=%.3f created_gib=%.3f plan_overhead_gib=%.3f last_loss=%.4f gpu=\"%s\"\n", label, B, tps,
           dt / steps * 1e3, mfu, used / 1073741824.0, GPT2RT__GIB(r.st->arena_total), GPT2RT__GIB(r.st->overhead),
           created / 1073741824.0,
           GPT2RT__GIB(r.plan.overhead[0]), s.loss, gpu);
    lab_print_attn_pick<__nv_bfloat16>("  ", B * 12, 1024); /* GPT-2 124M: 12 heads */
    printf("  matmul epilogues allowed 0x%x, fallback kernels taken 0x%x (1 GELU, 2 dGELU, 4 bias gradient), "
           "weight-gradient reduction schemes 0x%x; loss %a\n", fuse, r.st->blas.fallbacks, red_w, s.loss);
    if (!(s.loss == s.loss) || s.loss > 12.0f) { printf("  loss %g is not sane: FAIL\n", s.loss); lab_failures++; }
    free(tok);
    run_free(r);
}

static void time_gpt2(int B, const char *gpu, double peak) {
    time_gpt2_cfg(B, gpu, peak, GPT2RT_RECOMPUTE_NONE, 0, 1, "");
}

/* the largest micro-batch whose plan (arenas + estimated overhead) fits budget bytes */
static int max_batch_for(uint64_t budget, gpt2rt_memory_plan *best) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.seq_len = 1024;
    c.backend = GPT2RT_BACKEND_CUDA;
    c.precision = GPT2RT_PRECISION_BF16;
    int lo = 0, hi = 4096;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        gpt2rt_memory_plan p;
        c.batch_size = mid;
        if (gpt2rt_plan(&c, &p) == GPT2RT_OK && p.total[0] + p.overhead[0] <= budget) { lo = mid; *best = p; }
        else hi = mid - 1;
    }
    return lo;
}

/* the timing runs: what = 0 (quick) B=8; 1 (after the checks) B=8 and the largest B whose
   plan fits 40 GiB; 2 (time, a fresh process) B=8, 16, the largest, then the CPU table's GPU
   twin (recompute and accumulation at 8 sequences a step), B=8 and 16 with the LM head over
   1024 tokens at a time (classifier_chunk: the logits arena 1024 x Vp, not B*T x Vp; the
   peak against torch.compile's) and B=8, 16 again (run-to-run spread) */
static void timing(const char *gpu, int what) {
    double peak = peak_tflops(gpu);
    printf("timing: GPT-2 124M, T=1024, bf16, peak %.1f TFLOP/s for \"%s\"\n", peak, gpu);
    time_gpt2(8, gpu, peak);
    if (what == 0) return;
    if (what == 2) time_gpt2(16, gpu, peak);
    gpt2rt_memory_plan p;
    memset(&p, 0, sizeof p);
    int mb = max_batch_for((uint64_t)40 << 30, &p);
    printf("gpt2rt max_batch_for_gib=40 batch=%d plan_gib=%.3f plan_overhead_gib=%.3f\n", mb, GPT2RT__GIB(p.total[0]),
           GPT2RT__GIB(p.overhead[0]));
    if (mb > 8 || what == 2) time_gpt2(mb, gpu, peak);
    if (what != 2) return;
    time_gpt2_cfg(8, gpu, peak, GPT2RT_RECOMPUTE_SELECTIVE, 0, 1, " recompute=selective");
    time_gpt2_cfg(8, gpu, peak, GPT2RT_RECOMPUTE_FULL, 1, 1, " recompute=full:1");
    time_gpt2_cfg(8, gpu, peak, GPT2RT_RECOMPUTE_FULL, 3, 1, " recompute=full:3");
    time_gpt2_cfg(4, gpu, peak, GPT2RT_RECOMPUTE_NONE, 0, 2, " accum=2");
    time_gpt2_cfg(2, gpu, peak, GPT2RT_RECOMPUTE_NONE, 0, 4, " accum=4");
    time_gpt2_cfg(8, gpu, peak, GPT2RT_RECOMPUTE_NONE, 0, 1, " classifier_chunk=1024", 1024);
    time_gpt2_cfg(16, gpu, peak, GPT2RT_RECOMPUTE_NONE, 0, 1, " classifier_chunk=1024", 1024);
    time_gpt2(8, gpu, peak);
    time_gpt2(16, gpu, peak);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "full";
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
        printf("train_step: SKIP: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    LAB_CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, cuBLASLt %zu\n", prop.name, prop.multiProcessorCount, cublasLtGetVersion());

    fx_load();
    snprintf(fx_weights, sizeof fx_weights, "%smodel.safetensors", fx_dir);
    gpt2rt_config cfg = fx_config();
    int64_t BT = (int64_t)cfg.batch_size * cfg.seq_len;
    const int32_t *si = (const int32_t *)fx_f32("step_inputs", NULL), *stg = (const int32_t *)fx_f32("step_targets", NULL);
    if (strcmp(mode, "sanitize") == 0) {
        sanitize_steps(cfg);
        return lab_finish("train_step sanitize");
    }

    if (strcmp(mode, "profile") == 0) { /* one step for a profiler, in a fresh process */
        int B = argc > 2 ? atoi(argv[2]) : 8, chunk = argc > 3 ? atoi(argv[3]) : 0;
        unsigned fuse = argc > 4 ? (unsigned)strtoul(argv[4], NULL, 0) : GPT2RT__CU_MM_FUSE_DEFAULT;
        uint32_t red_w = argc > 5 ? (uint32_t)strtoul(argv[5], NULL, 0) : GPT2RT__CU_BLAS_REDUCTION_W_DEFAULT;
        if (B < 1 || B > 1024 || chunk < 0) { printf("profile: B %d must be in [1, 1024], CHUNK %d >= 0\n", B, chunk); return 2; }
        char label[64];
        snprintf(label, sizeof label, " profile classifier_chunk=%d", chunk);
        time_gpt2_cfg(B, prop.name, peak_tflops(prop.name), GPT2RT_RECOMPUTE_NONE, 0, 1, label, chunk, 1, fuse, red_w);
        return lab_finish("train_step profile");
    }
    if (strcmp(mode, "time-chunk") == 0) { /* the chunked classifier against the whole batch alone */
        double peak = peak_tflops(prop.name);
        for (int B = 8; B <= 16; B += 8) {
            time_gpt2(B, prop.name, peak);
            time_gpt2_cfg(B, prop.name, peak, GPT2RT_RECOMPUTE_NONE, 0, 1, " classifier_chunk=1024", 1024);
        }
        return lab_finish("train_step time-chunk");
    }
    if (strcmp(mode, "time-fuse") == 0) { /* cuBLASLt's fused epilogues against the kernels here */
        double peak = peak_tflops(prop.name);
        const unsigned masks[2] = {GPT2RT__CU_MM_FUSE_ALL, GPT2RT__CU_MM_FUSE_ALL & ~GPT2RT__CU_MM_FB_BGRAD};
        const uint32_t reds[2] = {CUBLASLT_REDUCTION_SCHEME_NONE, CUBLASLT_REDUCTION_SCHEME_MASK};
        for (int B = 8; B <= 16; B += 8)
            for (int k = 0; k < 2; k++)
                for (int i = 0; i < 2; i++) {
                    char label[64];
                    snprintf(label, sizeof label, " fuse=0x%x red_w=0x%x", masks[i], reds[k]);
                    time_gpt2_cfg(B, prop.name, peak, GPT2RT_RECOMPUTE_NONE, 0, 1, label, 0, 0, masks[i], reds[k]);
                }
        return lab_finish("train_step time-fuse");
    }
    if (strcmp(mode, "time") == 0) { /* timing alone, in a fresh process */
        timing(prop.name, 2);
        return lab_finish("train_step time");
    }
    check_fp32_parity(cfg);
    float f16[16];
    check_steps(cfg, f16);
    printf("determinism (fixture)\n");
    check_determinism(cfg, fx_weights, si, stg, BT, "fixture");
    printf("recompute (fixture)\n");
    check_recompute(cfg, fx_weights, si, stg, BT, "fixture");
    check_frozen(cfg);
    check_overflow(cfg, fx_weights, si, stg, BT, (int)fx_num("steps"), f16, "fixture");
    check_resume(cfg);
    check_odd_shape(cfg);
    check_bad_token(cfg);
    check_public_api(cfg);
    check_oom_refusal();
    check_hs64();

    if (strcmp(mode, "checks") != 0) timing(prop.name, strcmp(mode, "quick") == 0 ? 0 : 1);
    return lab_finish("train_step");
}
