/* kernels/data_parallel.cu - lab of CUDA data parallel (gpt2rt.h, 8.6 Device communicators: NCCL,
   loopback; data parallel on the device): two virtual devices on GPU 0 (device_ids {0, 0},
   allow_shared_device, the loopback communicator) against one device, through the public API.
     nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror --Werror all-warnings \
         -o build/lab_data_parallel kernels/data_parallel.cu -lcublasLt   [-DGPT2RT_NCCL ... -lnccl]
     build/lab_data_parallel           every check; exit 77 without a CUDA device
     build/lab_data_parallel sanitize  a few small data-parallel steps for compute-sanitizer (the
                                       shard arithmetic of ZeRO-1 in bf16, accumulation), no checks
   (make gpu-build builds it, with NCCL where nccl.h is installed; make test-gpu runs it.)

   Model: random init, L2 H2 C128 (head size 64: the tensor-core attention) V500 (padded 512),
   T 32, micro-batch B = 2 per rank, lr 1e-3 with clipping and weight decay.
   Checks:
     - planned == cudaMalloc'ed bytes on each rank (gpt2rt_plan_allocated vs gpt2rt_plan),
       ZeRO-1 included (master and moments of a shard)
     - fp32: 2 ranks x B rows == 1 device x 2B rows within fp32 reassociation: loss 1e-5, every
       gradient (max-norm relative, per tensor) 1e-5, every weight after n steps within 2 n lr
       absolute (AdamW turns a zero gradient's summation noise into lr-sized steps); also
       with grad_accum = 2 (only the last micro-step reduces) and with frozen ATTENTION | MLP
     - the ranks' device weights bitwise equal after steps (every precision, every mode)
     - bitwise run to run: two fresh runs, every weight, every step's loss and norm
     - ZeRO-1 == unsharded bitwise (weights and Adam moments), fp32 / bf16 / fp16
     - recompute SELECTIVE and FULL (k = 1) bitwise equal to NONE under data parallel
     - bf16 and fp16: step losses within 2e-2 of one device's; fp16 with a forced overflow (a
       wte row at 1e5, inf in fp16, in rank 0's rows only): every rank skips the same update,
       the loss scale halves, as on one device, and training goes on
     - one rank failing (rank 1 made to refuse its backward): the call returns an error naming
       rank 1 within seconds instead of hanging, and the context still trains (its next step
       bitwise that of a fresh context)
     - the NCCL communicator with one rank (GPT2RT_NCCL builds): every collective leaves the
       buffer as it was, bitwise (one rank: the sum is the buffer itself) */
/* g++ 12 reports a false -Wmaybe-uninitialized inside its AVX-512 headers for the CPU AdamW
   of gpt2rt.h under nvcc -O3: the portable CPU kernels here (as kernels/train_step.cu). */
#define GPT2RT_SGEMM_NO_SIMD
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "lab.cuh"

static const int B = 2, T = 32, V = 500, STEPS = 4;

static gpt2rt_config base(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2; c.n_head = 2; c.n_embd = 128; c.vocab_size = V; c.max_seq_len = 64;
    c.batch_size = B; c.seq_len = T;
    c.lr = 1e-3f; c.weight_decay = 0.1f; c.grad_clip = 1.0f;
    c.backend = GPT2RT_BACKEND_CUDA;
    c.seed = 7;
    return c;
}
/* fp16 starts at a loss scale of 1024 (headroom: only the forced overflow overflows) */
static gpt2rt_config with_prec(gpt2rt_config c, gpt2rt_precision p) {
    c.precision = p;
    c.loss_scale = p == GPT2RT_PRECISION_FP16 ? 1024.0f : 0.0f;
    return c;
}
/* n ranks on GPU 0 (the loopback's test mode), or one device with n times the rows */
static gpt2rt_config with_ranks(gpt2rt_config c, int n) {
    if (n == 1) return c;
    c.parallel = GPT2RT_PARALLEL_DATA;
    c.n_devices = n;
    c.allow_shared_device = 1; /* device_ids all 0 */
    return c;
}
static gpt2rt_config one_device(gpt2rt_config c, int n) {
    c.batch_size *= n;
    return c;
}

/* tokens for `steps` steps of `micro` micro-batches of `rows` rows; a few targets ignored */
static void tokens(int64_t n, uint64_t seed, int32_t *in, int32_t *tg) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        in[i] = (int32_t)((s >> 33) % (uint64_t)V);
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tg[i] = (s >> 40) % 17 == 0 ? -100 : (int32_t)((s >> 33) % (uint64_t)V);
    }
}

static gpt2rt_ctx *make(const gpt2rt_config &c) {
    gpt2rt_ctx *x = NULL;
    LAB_OK(x, gpt2rt_create(&x, &c));
    return x;
}

/* every tensor's `what` of ctx, concatenated in table order (n floats: *n) */
static float *read_all(gpt2rt_ctx *x, gpt2rt_param_what what, int64_t *n) {
    int64_t total = 0;
    for (int i = 0; i < gpt2rt_param_count(x); i++) {
        gpt2rt_param_info in;
        LAB_OK(x, gpt2rt_param_info_get(x, i, &in));
        total += in.numel;
    }
    float *out = (float *)calloc((size_t)total + 1, sizeof(float));
    int64_t at = 0;
    for (int i = 0; i < gpt2rt_param_count(x); i++) {
        gpt2rt_param_info in;
        LAB_OK(x, gpt2rt_param_info_get(x, i, &in));
        gpt2rt_result r = gpt2rt_param_read(x, in.name, what, out + at, in.numel);
        if (r != GPT2RT_OK && what == GPT2RT_PARAM_VALUE) LAB_OK(x, r);
        at += in.numel; /* frozen tensors have no gradient or moments: left 0 */
    }
    *n = total;
    return out;
}

static void check_true(const char *what, int ok) {
    printf("  %-64s %s\n", what, ok ? "PASS" : "FAIL");
    if (!ok) lab_failures++;
}

/* per tensor max|a-b| / max|b|, the worst over the tensors <= tol */
static void check_rel(const char *what, gpt2rt_ctx *ref, gpt2rt_param_what kind, gpt2rt_ctx *a, gpt2rt_ctx *b,
                      double tol) {
    double worst = 0.0;
    const char *wn = "";
    static char name[96];
    for (int i = 0; i < gpt2rt_param_count(ref); i++) {
        gpt2rt_param_info in;
        LAB_OK(ref, gpt2rt_param_info_get(ref, i, &in));
        float *x = (float *)malloc((size_t)in.numel * 4 + 4), *y = (float *)malloc((size_t)in.numel * 4 + 4);
        if (gpt2rt_param_read(a, in.name, kind, x, in.numel) != GPT2RT_OK ||
            gpt2rt_param_read(b, in.name, kind, y, in.numel) != GPT2RT_OK) { free(x); free(y); continue; } /* frozen */
        double mx = 0.0, md = 0.0;
        for (int64_t j = 0; j < in.numel; j++) {
            mx = fmax(mx, fabs((double)y[j]));
            double dd = fabs((double)x[j] - (double)y[j]);
            md = dd != dd ? INFINITY : fmax(md, dd);
        }
        double rel = md / (mx > 0.0 ? mx : 1.0);
        if (!(rel <= worst)) { worst = rel; snprintf(name, sizeof name, "%s", in.name); wn = name; }
        free(x); free(y);
    }
    int ok = worst <= tol;
    printf("  %-64s worst %.2e (%s) tol %.0e  %s\n", what, worst, wn, tol, ok ? "PASS" : "FAIL");
    if (!ok) lab_failures++;
}

/* weights after `steps` AdamW steps, in units of lr. Gradients agree to fp32 reassociation
   (checked strictly above), but AdamW divides by sqrt(v) + eps: where a true gradient is
   zero (the key slice of c_attn's bias: softmax ignores a per-query constant) or near eps
   (a LayerNorm bias under frozen attention and MLP: 1.4e-8 after clipping), +-1e-12 of
   summation noise becomes a step of up to lr in either direction. A step moves a weight by
   at most about lr whatever the gradient (|m_hat| / sqrt(v_hat) <= 1 at these betas), so
   two runs part by at most 2 lr a step: the bound is 2 * steps * lr, absolute (weight decay
   is the same on both sides) */
static void check_weights(const char *what, gpt2rt_ctx *a, gpt2rt_ctx *b, int steps, double lr) {
    double worst = 0.0;
    int64_t n_loose = 0, n_all = 0;
    static char name[96];
    name[0] = 0;
    for (int i = 0; i < gpt2rt_param_count(b); i++) {
        gpt2rt_param_info in;
        LAB_OK(b, gpt2rt_param_info_get(b, i, &in));
        float *x = (float *)malloc((size_t)in.numel * 4 + 4), *y = (float *)malloc((size_t)in.numel * 4 + 4);
        if (gpt2rt_param_read(a, in.name, GPT2RT_PARAM_VALUE, x, in.numel) == GPT2RT_OK &&
            gpt2rt_param_read(b, in.name, GPT2RT_PARAM_VALUE, y, in.numel) == GPT2RT_OK)
            for (int64_t j = 0; j < in.numel; j++) {
                double dd = fabs((double)x[j] - (double)y[j]);
                if (dd != dd) dd = INFINITY;
                if (dd > 1e-5 * fabs((double)y[j])) n_loose++; /* beyond reassociation: AdamW's noise */
                n_all++;
                if (!(dd <= worst)) { worst = dd; snprintf(name, sizeof name, "%s", in.name); }
            }
        free(x); free(y);
    }
    double tol = 2.0 * steps * lr;
    int ok = worst <= tol;
    printf("  %-64s worst %.2e = %.2f lr (%s), bound 2 x %d steps x lr; %lld of %lld weights beyond 1e-5 relative  %s\n",
           what, worst, worst / lr, name, steps, (long long)n_loose, (long long)n_all, ok ? "PASS" : "FAIL");
    if (!ok) lab_failures++;
}

static void check_same(const char *what, gpt2rt_ctx *a, gpt2rt_ctx *b, gpt2rt_param_what kind) {
    int64_t na, nb;
    float *x = read_all(a, kind, &na), *y = read_all(b, kind, &nb);
    check_true(what, na == nb && memcmp(x, y, (size_t)na * 4) == 0);
    free(x); free(y);
}

/* every rank's device weights (floatX) and, with a master, its fp32 master bitwise rank 0's */
static void check_ranks_agree(const char *what, gpt2rt_ctx *x) {
    int ok = x->n_ranks > 1;
    const gpt2rt__cu_state *s0 = x->cu;
    size_t wbytes = (size_t)s0->bytes[GPT2RT_MEM_WEIGHTS];
    unsigned char *a = (unsigned char *)malloc(wbytes + 1), *b = (unsigned char *)malloc(wbytes + 1);
    LAB_CK(cudaMemcpy(a, s0->w, wbytes, cudaMemcpyDeviceToHost));
    for (int r = 1; r < x->n_ranks; r++) {
        LAB_CK(cudaMemcpy(b, x->ranks[r]->cu->w, wbytes, cudaMemcpyDeviceToHost));
        /* the padding between tensors is never written: compare the tensors */
        for (int i = 0; i < x->n_tensors; i++) {
            const gpt2rt__tensor *t = &x->tensors[i];
            size_t at = (size_t)t->off * (size_t)s0->d.weight_bytes, len = (size_t)(t->rows * t->cols) * (size_t)s0->d.weight_bytes;
            ok &= memcmp(a + at, b + at, len) == 0;
        }
        ok &= x->ranks[r]->step == x->step && x->ranks[r]->cu->loss_scale == s0->loss_scale;
    }
    char name[160];
    snprintf(name, sizeof name, "%s: every rank's weights, step, loss scale = rank 0's", what);
    check_true(name, ok);
    free(a); free(b);
}

/* `steps` gpt2rt_step calls; rows per call: n ranks x B x grad_accum (the same tokens
   whatever the split); losses, norms, skips into the arrays (may be NULL) */
static void train(gpt2rt_ctx *x, const int32_t *in, const int32_t *tg, int64_t rows_per_step, int steps,
                  float *loss, float *norm, int *skipped) {
    for (int k = 0; k < steps; k++) {
        gpt2rt_step_stats s;
        LAB_OK(x, gpt2rt_step(x, in + k * rows_per_step * T, tg + k * rows_per_step * T, &s));
        if (loss) loss[k] = s.loss;
        if (norm) norm[k] = s.grad_norm;
        if (skipped) skipped[k] = s.skipped;
    }
}

/* ---------------------------------------------------------------- checks */

static int32_t *g_in, *g_tg; /* enough tokens for every check */

static void check_plan(void) {
    printf("memory: planned == allocated on each rank\n");
    for (int sh = 0; sh < 2; sh++)
        for (int p = 0; p < 2; p++) {
            gpt2rt_config c = with_ranks(base(), 2);
            c.shard_optimizer = sh;
            c = with_prec(c, p ? GPT2RT_PRECISION_BF16 : GPT2RT_PRECISION_FP32);
            gpt2rt_memory_plan want, got;
            if (gpt2rt_plan(&c, &want) != GPT2RT_OK) { printf("plan: %s\n", want.error); exit(2); }
            gpt2rt_ctx *x = make(c);
            LAB_OK(x, gpt2rt_plan_allocated(x, &got));
            int ok = got.n_devices == 2;
            for (int r = 0; r < 2; r++)
                for (int i = 0; i < GPT2RT_MEM_COUNT; i++) ok &= got.bytes[r][i] == want.bytes[r][i];
            char name[128];
            snprintf(name, sizeof name, "%s%s: plan == cudaMalloc on ranks 0 and 1 (moments %llu bytes each)",
                     p ? "bf16" : "fp32", sh ? " ZeRO-1" : "", (unsigned long long)got.bytes[1][GPT2RT_MEM_MOMENTS]);
            check_true(name, ok);
            gpt2rt_free(x);
        }
}

static void check_fp32_vs_one(void) {
    printf("fp32: 2 ranks x B rows vs 1 device x 2B rows\n");
    int64_t rows = 2 * B;
    gpt2rt_ctx *dp = make(with_ranks(base(), 2)), *one = make(one_device(base(), 2));
    float l_dp = 0.0f, l_one = 0.0f;
    LAB_OK(dp, gpt2rt_forward(dp, g_in, g_tg, &l_dp));
    LAB_OK(one, gpt2rt_forward(one, g_in, g_tg, &l_one));
    printf("  loss %.7f vs %.7f\n", l_dp, l_one);
    check_true("loss within 1e-5 relative", fabs((double)l_dp - l_one) <= 1e-5 * fabs((double)l_one));
    LAB_OK(dp, gpt2rt_backward(dp));
    LAB_OK(one, gpt2rt_backward(one));
    check_rel("gradients (summed over the ranks by the buckets)", one, GPT2RT_PARAM_GRAD, dp, one, 1e-5);
    LAB_OK(dp, gpt2rt_update(dp, NULL));
    LAB_OK(one, gpt2rt_update(one, NULL));
    float a[16], b[16];
    train(dp, g_in + rows * T, g_tg + rows * T, rows, STEPS - 1, a, NULL, NULL);
    train(one, g_in + rows * T, g_tg + rows * T, rows, STEPS - 1, b, NULL, NULL);
    double w = 0;
    for (int k = 0; k < STEPS - 1; k++) w = fmax(w, fabs((double)a[k] - b[k]) / fabs((double)b[k]));
    printf("  step losses: worst relative difference %.2e\n", w);
    check_true("step losses within 1e-5 relative", w <= 1e-5);
    check_weights("weights after 4 steps", dp, one, STEPS, 1e-3);
    check_ranks_agree("fp32", dp);
    gpt2rt_free(dp);
    gpt2rt_free(one);

    /* grad_accum 2: the first micro-step keeps its sums, the second reduces */
    gpt2rt_config c = base();
    c.grad_accum = 2;
    dp = make(with_ranks(c, 2));
    one = make(one_device(c, 2));
    train(dp, g_in, g_tg, 2 * rows, 2, a, NULL, NULL);
    train(one, g_in, g_tg, 2 * rows, 2, b, NULL, NULL);
    check_true("grad_accum 2: step losses within 1e-5 relative",
               fabs((double)a[1] - b[1]) <= 1e-5 * fabs((double)b[1]) && fabs((double)a[0] - b[0]) <= 1e-5 * fabs((double)b[0]));
    check_weights("grad_accum 2: weights after 2 steps", dp, one, 2, 1e-3);
    gpt2rt_free(dp);
    gpt2rt_free(one);

    /* frozen groups: fewer buckets (the layers hold only LayerNorms) */
    c = base();
    c.frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP;
    dp = make(with_ranks(c, 2));
    one = make(one_device(c, 2));
    train(dp, g_in, g_tg, rows, STEPS, NULL, NULL, NULL);
    train(one, g_in, g_tg, rows, STEPS, NULL, NULL, NULL);
    check_weights("frozen ATTENTION|MLP: weights after 4 steps", dp, one, STEPS, 1e-3);
    gpt2rt_free(dp);
    gpt2rt_free(one);
}

/* two fresh runs bitwise; sharded == unsharded bitwise; recompute == none bitwise */
static void check_bitwise(gpt2rt_precision prec) {
    const char *pn = prec == GPT2RT_PRECISION_BF16 ? "bf16" : prec == GPT2RT_PRECISION_FP16 ? "fp16" : "fp32";
    printf("%s: bitwise properties of 2 ranks\n", pn);
    int64_t rows = 2 * B;
    gpt2rt_config c = with_ranks(base(), 2);
    c = with_prec(c, prec);
    float la[16], lb[16], na[16], nb[16];
    gpt2rt_ctx *a = make(c), *b = make(c);
    train(a, g_in, g_tg, rows, STEPS, la, na, NULL);
    train(b, g_in, g_tg, rows, STEPS, lb, nb, NULL);
    char name[128];
    snprintf(name, sizeof name, "%s: two runs: losses and norms bitwise", pn);
    check_true(name, memcmp(la, lb, sizeof(float) * STEPS) == 0 && memcmp(na, nb, sizeof(float) * STEPS) == 0);
    snprintf(name, sizeof name, "%s: two runs: weights bitwise", pn);
    check_same(name, a, b, GPT2RT_PARAM_VALUE);
    check_ranks_agree(pn, a);
    gpt2rt_free(b);

    gpt2rt_config s = c;
    s.shard_optimizer = 1;
    b = make(s);
    train(b, g_in, g_tg, rows, STEPS, lb, nb, NULL);
    snprintf(name, sizeof name, "%s: ZeRO-1: losses and norms bitwise the unsharded run's", pn);
    check_true(name, memcmp(la, lb, sizeof(float) * STEPS) == 0 && memcmp(na, nb, sizeof(float) * STEPS) == 0);
    snprintf(name, sizeof name, "%s: ZeRO-1: weights bitwise", pn);
    check_same(name, a, b, GPT2RT_PARAM_VALUE);
    snprintf(name, sizeof name, "%s: ZeRO-1: Adam m bitwise (gathered from the shards)", pn);
    check_same(name, a, b, GPT2RT_PARAM_ADAM_M);
    snprintf(name, sizeof name, "%s: ZeRO-1: Adam v bitwise", pn);
    check_same(name, a, b, GPT2RT_PARAM_ADAM_V);
    snprintf(name, sizeof name, "%s ZeRO-1", pn);
    check_ranks_agree(name, b);
    gpt2rt_free(b);

    for (int k = 0; k < 2; k++) {
        gpt2rt_config r = c;
        r.recompute = k ? GPT2RT_RECOMPUTE_FULL : GPT2RT_RECOMPUTE_SELECTIVE;
        r.checkpoint_every = k ? 1 : 0;
        b = make(r);
        train(b, g_in, g_tg, rows, STEPS, NULL, NULL, NULL);
        snprintf(name, sizeof name, "%s: recompute %s: weights bitwise recompute NONE's", pn, k ? "FULL k=1" : "SELECTIVE");
        check_same(name, a, b, GPT2RT_PARAM_VALUE);
        gpt2rt_free(b);
    }
    gpt2rt_free(a);
}

/* bf16 / fp16 against one device: losses (rounding differs with the row split) */
static void check_low_vs_one(gpt2rt_precision prec) {
    const char *pn = prec == GPT2RT_PRECISION_BF16 ? "bf16" : "fp16";
    int64_t rows = 2 * B;
    gpt2rt_config c = base();
    c = with_prec(c, prec);
    gpt2rt_ctx *dp = make(with_ranks(c, 2)), *one = make(one_device(c, 2));
    float a[16], b[16];
    train(dp, g_in, g_tg, rows, STEPS, a, NULL, NULL);
    train(one, g_in, g_tg, rows, STEPS, b, NULL, NULL);
    double w = 0;
    for (int k = 0; k < STEPS; k++) w = fmax(w, fabs((double)a[k] - b[k]));
    char name[128];
    snprintf(name, sizeof name, "%s: step losses within 2e-2 of one device's (worst %.2e)", pn, w);
    check_true(name, w <= 2e-2);
    gpt2rt_free(dp);
    gpt2rt_free(one);
}

/* fp16: a wte row too large for fp16 makes the loss inf: every rank skips, the scale halves */
static void check_overflow(void) {
    printf("fp16: a forced overflow skips the same update on every rank\n");
    int64_t rows = 2 * B;
    gpt2rt_config c = base();
    c = with_prec(c, GPT2RT_PRECISION_FP16);
    gpt2rt_ctx *x[2] = {make(with_ranks(c, 2)), make(one_device(c, 2))};
    int skipped[2][4];
    float scale[2][4];
    for (int i = 0; i < 2; i++) {
        int64_t n = (int64_t)V * c.n_embd;
        float *wte = (float *)malloc((size_t)n * 4), *big = (float *)malloc((size_t)n * 4);
        int32_t tok = g_in[rows * T]; /* a token of step 1's rows (rank 0's) */
        for (int k = 0; k < 4; k++) {
            gpt2rt_step_stats s;
            if (k == 1) { /* the token's row at 1e5, beyond fp16's 65504: inf in the working copy */
                LAB_OK(x[i], gpt2rt_param_read(x[i], "transformer.wte.weight", GPT2RT_PARAM_VALUE, wte, n));
                memcpy(big, wte, (size_t)n * 4);
                for (int j = 0; j < c.n_embd; j++) big[(int64_t)tok * c.n_embd + j] = j % 2 ? 1e5f : -1e5f;
                LAB_OK(x[i], gpt2rt_param_write(x[i], "transformer.wte.weight", big, n));
            }
            if (k == 2) LAB_OK(x[i], gpt2rt_param_write(x[i], "transformer.wte.weight", wte, n));
            LAB_OK(x[i], gpt2rt_step(x[i], g_in + k * rows * T, g_tg + k * rows * T, &s));
            skipped[i][k] = s.skipped;
            scale[i][k] = s.loss_scale;
        }
        free(wte); free(big);
    }
    printf("  skipped (2 ranks / one device): %d%d%d%d / %d%d%d%d; scale after step 1: %g / %g\n", skipped[0][0],
           skipped[0][1], skipped[0][2], skipped[0][3], skipped[1][0], skipped[1][1], skipped[1][2], skipped[1][3],
           (double)scale[0][1], (double)scale[1][1]);
    check_true("exactly step 1 skipped, on both", skipped[0][1] && !skipped[0][0] && !skipped[0][2] && !skipped[0][3] &&
               memcmp(skipped[0], skipped[1], sizeof skipped[0]) == 0);
    check_true("the loss scale halved, as on one device", scale[0][1] == scale[0][0] * 0.5f && scale[0][1] == scale[1][1]);
    check_ranks_agree("fp16 after the overflow", x[0]);
    gpt2rt_free(x[0]);
    gpt2rt_free(x[1]);
}

/* rank 1 refuses its backward: rank 0 is waiting at the first bucket and must be released */
static void check_rank_failure(void) {
    printf("one rank failing\n");
    int64_t rows = 2 * B;
    gpt2rt_config c = with_ranks(base(), 2);
    gpt2rt_ctx *x = make(c), *fresh = make(c);
    LAB_OK(x, gpt2rt_forward(x, g_in, g_tg, NULL));
    x->ranks[1]->cu->have_targets = 0; /* its gpt2rt__cu_backward fails before any collective */
    double t0 = gpt2rt__now();
    gpt2rt_result r = gpt2rt_backward(x);
    double dt = gpt2rt__now() - t0;
    printf("  gpt2rt_backward: %s after %.2f s: %s\n", gpt2rt_result_string(r), dt, gpt2rt_last_error(x));
    check_true("an error naming rank 1, within 30 s", r != GPT2RT_OK && strstr(gpt2rt_last_error(x), "rank 1") && dt < 30.0);
    LAB_OK(x, gpt2rt_step(x, g_in + rows * T, g_tg + rows * T, NULL));
    LAB_OK(fresh, gpt2rt_step(fresh, g_in + rows * T, g_tg + rows * T, NULL));
    check_same("the next step: weights bitwise a fresh context's", x, fresh, GPT2RT_PARAM_VALUE);
    check_ranks_agree("after the failure", x);
    gpt2rt_free(x);
    gpt2rt_free(fresh);
}

#ifdef GPT2RT_NCCL
static void check_nccl_one_rank(void) {
    printf("NCCL communicator, one rank\n");
    gpt2rt__comm c;
    char err[1024] = "";
    int dev = 0;
    gpt2rt_result r = gpt2rt__nccl_ranks(1, &dev, 60.0, NULL, &c, err, sizeof err);
    check_true("ncclCommInitRank of one rank", r == GPT2RT_OK);
    if (r != GPT2RT_OK) { printf("  %s\n", err); return; }
    const int64_t n = 100003;
    float *h = (float *)malloc(n * 4), *back = (float *)malloc(n * 4);
    lab_fill(h, (size_t)n, 3.0f);
    float *d = lab_upload<float>(h, (size_t)n);
    const char *names[5] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier"};
    for (int k = 0; k < 5; k++) {
        gpt2rt_result q = k == 0 ? c.all_reduce(&c, d, n) : k == 1 ? c.reduce_scatter(&c, d, n)
                        : k == 2 ? c.all_gather(&c, d, n) : k == 3 ? c.broadcast(&c, d, (size_t)n * 4, 0) : c.barrier(&c);
        if (q == GPT2RT_OK) q = c.wait(&c);
        LAB_CK(cudaMemcpy(back, d, (size_t)n * 4, cudaMemcpyDeviceToHost));
        char name[96];
        snprintf(name, sizeof name, "NCCL %s of one rank: the buffer bitwise unchanged", names[k]);
        check_true(name, q == GPT2RT_OK && memcmp(h, back, (size_t)n * 4) == 0);
        if (q != GPT2RT_OK) printf("  %s\n", c.err);
    }
    c.destroy(&c);
    LAB_CK(cudaFree(d));
    free(h); free(back);
}
#endif

/* for compute-sanitizer memcheck: every device path of data parallel once, no checks */
static void sanitize_steps(void) {
    int64_t rows = 2 * B;
    for (int k = 0; k < 2; k++) {
        gpt2rt_config c = with_ranks(base(), 2);
        c = with_prec(c, k ? GPT2RT_PRECISION_BF16 : GPT2RT_PRECISION_FP32);
        c.shard_optimizer = k;
        c.grad_accum = 2 - k;
        gpt2rt_ctx *x = make(c);
        train(x, g_in, g_tg, rows * c.grad_accum, 2, NULL, NULL, NULL);
        int64_t n;
        free(read_all(x, GPT2RT_PARAM_ADAM_M, &n));
        gpt2rt_free(x);
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "checks";
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
        printf("data_parallel: SKIP: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    LAB_CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s; two virtual devices on GPU 0 (device_ids {0, 0}, allow_shared_device)\n", prop.name);
    const int64_t n = (int64_t)16 * 2 * B * T;
    g_in = (int32_t *)malloc((size_t)n * 4);
    g_tg = (int32_t *)malloc((size_t)n * 4);
    tokens(n, 12345, g_in, g_tg);
    if (strcmp(mode, "sanitize") == 0) {
        sanitize_steps();
        free(g_in);
        free(g_tg);
        return lab_finish("data_parallel sanitize");
    }

    check_plan();
    check_fp32_vs_one();
    check_bitwise(GPT2RT_PRECISION_FP32);
    check_bitwise(GPT2RT_PRECISION_BF16);
    check_bitwise(GPT2RT_PRECISION_FP16);
    printf("bf16 / fp16 vs one device\n");
    check_low_vs_one(GPT2RT_PRECISION_BF16);
    check_low_vs_one(GPT2RT_PRECISION_FP16);
    check_overflow();
    check_rank_failure();
#ifdef GPT2RT_NCCL
    check_nccl_one_rank();
#else
    printf("NCCL: not built with GPT2RT_NCCL: the one-rank NCCL check did not run\n");
#endif
    free(g_in);
    free(g_tg);
    return lab_finish("data_parallel");
}
