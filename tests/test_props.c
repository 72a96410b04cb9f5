/* Exact properties of the CPU backend: finite differences, bitwise determinism
   (across runs and thread counts), save + resume == uninterrupted, planned ==
   allocated, resolved defaults, every not-yet-implemented knob refused, errors
   that name their numbers, call order, allocation failure, non-finite steps; the
   forward against GPT-2's definition evaluated in double, AdamW against
   torch.optim.AdamW's formula, k micro-batches against one batch of k times the rows. */
/* every op splits over the threads whatever its size (by default an op too small to pay
   for a second thread runs on one), so the checks across thread counts below compare
   split work, not one thread's with itself */
#ifndef GPT2RT_CPU_WORK_PER_THREAD
#define GPT2RT_CPU_WORK_PER_THREAD 0
#endif
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

static gpt2rt_config tiny(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2; c.n_head = 2; c.n_embd = 16; c.vocab_size = 37; c.max_seq_len = 8;
    c.batch_size = 2; c.seq_len = 8;
    c.lr = 1e-2f; c.warmup_steps = 2; c.total_steps = 8; c.min_lr_frac = 0.1f; c.weight_decay = 0.1f;
    c.seed = 7;
    return c;
}

static gpt2rt_ctx *make(const gpt2rt_config *c) {
    gpt2rt_ctx *ctx;
    gpt2rt_result r = gpt2rt_create(&ctx, c);
    if (r != GPT2RT_OK) { printf("create: %s\n", gpt2rt_last_error(ctx)); exit(2); }
    return ctx;
}

static void batch(const gpt2rt_config *c, int seed, int32_t *x, int32_t *y) {
    uint64_t s = (uint64_t)seed * 77 + 1;
    int n = c->batch_size * c->seq_len;
    for (int i = 0; i < n; i++) {
        x[i] = (int32_t)(harness_rng_next(&s) % (uint64_t)c->vocab_size);
        y[i] = (int32_t)(harness_rng_next(&s) % (uint64_t)c->vocab_size);
    }
}

static float loss_of(gpt2rt_ctx *ctx, const int32_t *x, const int32_t *y) {
    float l = 0;
    CHECK_OK(ctx, gpt2rt_forward(ctx, x, y, &l));
    return l;
}

/* ---- finite differences: for each tensor, along the gradient and along a random direction ---- */
static void test_finite_differences(void) {
    gpt2rt_config c = tiny();
    gpt2rt_ctx *ctx = make(&c);
    int32_t x[16], y[16];
    batch(&c, 1, x, y);
    y[3] = -100; /* an ignored target takes part too */
    /* spread the weights so every tensor has a sizeable gradient */
    uint64_t s = 99;
    for (int i = 0; i < gpt2rt_param_count(ctx); i++) {
        gpt2rt_param_info info;
        gpt2rt_param_info_get(ctx, i, &info);
        float *w = (float *)malloc(4 * (size_t)info.numel);
        CHECK_OK(ctx, gpt2rt_param_read(ctx, info.name, GPT2RT_PARAM_VALUE, w, info.numel));
        for (int64_t j = 0; j < info.numel; j++) w[j] += 0.2f * (float)(harness_rng_uniform(&s) - 0.5);
        CHECK_OK(ctx, gpt2rt_param_write(ctx, info.name, w, info.numel));
        free(w);
    }
    loss_of(ctx, x, y);
    CHECK_OK(ctx, gpt2rt_backward(ctx));
    double worst = 0;
    char worst_name[96] = "";
    for (int i = 0; i < gpt2rt_param_count(ctx); i++) {
        gpt2rt_param_info info;
        gpt2rt_param_info_get(ctx, i, &info);
        int64_t n = info.numel;
        float *p = (float *)malloc(4 * (size_t)n), *g = (float *)malloc(4 * (size_t)n), *q = (float *)malloc(4 * (size_t)n);
        double *dir = (double *)malloc(8 * (size_t)n);
        gpt2rt_param_read(ctx, info.name, GPT2RT_PARAM_VALUE, p, n);
        gpt2rt_param_read(ctx, info.name, GPT2RT_PARAM_GRAD, g, n);
        for (int pass = 0; pass < 2; pass++) {
            double norm = 0, gd = 0;
            for (int64_t j = 0; j < n; j++) {
                dir[j] = pass == 0 ? g[j] : harness_rng_uniform(&s) - 0.5;
                norm += dir[j] * dir[j];
            }
            norm = sqrt(norm);
            if (norm == 0) continue;
            for (int64_t j = 0; j < n; j++) { dir[j] /= norm; gd += dir[j] * g[j]; }
            double h = 1e-2, lp, lm;
            for (int64_t j = 0; j < n; j++) q[j] = (float)(p[j] + h * dir[j]);
            gpt2rt_param_write(ctx, info.name, q, n);
            lp = loss_of(ctx, x, y);
            for (int64_t j = 0; j < n; j++) q[j] = (float)(p[j] - h * dir[j]);
            gpt2rt_param_write(ctx, info.name, q, n);
            lm = loss_of(ctx, x, y);
            gpt2rt_param_write(ctx, info.name, p, n);
            double fd = (lp - lm) / (2 * h), gnorm = 0;
            for (int64_t j = 0; j < n; j++) gnorm += (double)g[j] * g[j];
            double err = fabs(fd - gd) / (sqrt(gnorm) + 1e-3);
            /* central difference at h = 1e-2: truncation h^2 |third derivative| / 6 ~ 1e-4 of the
               slope, the fp32 loss's rounding eps32 |L| / h ~ 5e-5; 1e-2 leaves room for a random
               net's curvature */
            CHECK(err < 1e-2, "finite difference of %s (%s direction): numeric %.6g analytic %.6g", info.name,
                  pass ? "random" : "gradient", fd, gd);
            if (err > worst) { worst = err; snprintf(worst_name, sizeof worst_name, "%s", info.name); }
        }
        free(p); free(g); free(q); free(dir);
    }
    printf("finite differences: %d tensors x 2 directions, worst error %.2e of |grad| (%s)\n",
           gpt2rt_param_count(ctx), worst, worst_name);
    gpt2rt_free(ctx);
}

/* ---- determinism ---- */
static void train(gpt2rt_ctx *ctx, const gpt2rt_config *c, int first, int steps, float *losses) {
    int32_t x[4096], y[4096];
    for (int k = first; k < first + steps; k++) {
        gpt2rt_step_stats st;
        batch(c, k, x, y);
        CHECK_OK(ctx, gpt2rt_step(ctx, x, y, &st));
        if (losses) losses[k] = st.loss;
    }
}

static int same_state(gpt2rt_ctx *a, gpt2rt_ctx *b) { return harness_same_state(a, b); }

static void test_determinism(void) {
    gpt2rt_config c = tiny();
    c.n_threads = 2;
    float la[8], lb[8];
    gpt2rt_ctx *a = make(&c), *b = make(&c);
    train(a, &c, 0, 5, la);
    train(b, &c, 0, 5, lb);
    CHECK(same_state(a, b) && !memcmp(la, lb, 5 * sizeof(float)), "two identical runs differ");
    /* "bitwise the same for any thread count" (README, n_threads): 1, 3, 4 and 7 threads
       (7: more threads than rows, columns split unevenly) against 2, after 5 steps */
    const int counts[4] = {1, 3, 4, 7};
    for (int i = 0; i < 4; i++) {
        c.n_threads = counts[i];
        gpt2rt_ctx *other = make(&c);
        train(other, &c, 0, 5, lb);
        CHECK(same_state(a, other) && !memcmp(la, lb, 5 * sizeof(float)), "%d threads and 2 threads differ", counts[i]);
        gpt2rt_free(other);
    }
    printf("determinism: two runs bitwise equal; 1, 2, 3, 4 and 7 threads bitwise equal (weights, moments, losses)\n");
    gpt2rt_free(a); gpt2rt_free(b);
}

static void test_resume(void) {
    gpt2rt_config c = tiny();
    float la[8], lb[8];
    gpt2rt_ctx *a = make(&c);
    train(a, &c, 0, 6, la);
    gpt2rt_ctx *b = make(&c);
    train(b, &c, 0, 3, lb);
    CHECK_OK(b, gpt2rt_state_save(b, "build/props_state.safetensors"));
    gpt2rt_free(b);
    gpt2rt_config c2 = c;
    c2.seed = 12345; /* a different init, overwritten by the state */
    gpt2rt_ctx *r = make(&c2);
    CHECK_OK(r, gpt2rt_state_load(r, "build/props_state.safetensors"));
    CHECK(r->step == 3, "resumed step %lld, expected 3", (long long)r->step);
    train(r, &c, 3, 3, lb);
    CHECK(same_state(a, r), "save + resume differs from an uninterrupted run");
    CHECK(!memcmp(la + 3, lb + 3, 3 * sizeof(float)), "losses after resume differ");
    printf("save + resume: 3 + 3 steps bitwise equal to 6 (weights, moments, step, losses)\n");
    gpt2rt_free(a); gpt2rt_free(r);
}

/* ---- memory: a counting allocator ---- */
typedef struct counter {
    uint64_t bytes[GPT2RT_MEM_COUNT];
    int64_t live, book_live;
    int calls, fail_at;
} counter;

static void *count_alloc(void *user, size_t bytes, int cat) {
    counter *k = (counter *)user;
    if (++k->calls == k->fail_at) return NULL;
    void *p = NULL;
    if (posix_memalign(&p, GPT2RT_ALIGN, bytes ? bytes : 1)) return NULL;
    if (cat >= 0) k->bytes[cat] += bytes;
    else k->book_live++;
    k->live++;
    return p;
}

static void count_free(void *user, void *p, int cat) {
    counter *k = (counter *)user;
    if (cat < 0) k->book_live--;
    k->live--;
    free(p);
}

static void test_plan_equals_allocated(void) {
    gpt2rt_config cs[5];
    for (int i = 0; i < 5; i++) cs[i] = tiny();
    cs[1].n_layer = 3; cs[1].n_head = 3; cs[1].n_embd = 48; cs[1].vocab_size = 50; cs[1].seq_len = 7;
    cs[1].batch_size = 3; cs[1].n_threads = 1;
    cs[2].n_layer = 1; cs[2].n_head = 1; cs[2].n_embd = 8; cs[2].vocab_size = 1; cs[2].max_seq_len = 1; cs[2].seq_len = 1;
    cs[2].batch_size = 1;
    memset(&cs[3], 0, sizeof cs[3]); /* GPT-2 124M, small batch */
    cs[3].batch_size = 1; cs[3].seq_len = 8;
    cs[4].padded_vocab = 64; cs[4].n_threads = 3;
    for (int i = 0; i < 5; i++) {
        counter k;
        memset(&k, 0, sizeof k);
        cs[i].alloc = count_alloc; cs[i].free = count_free; cs[i].alloc_user = &k;
        gpt2rt_memory_plan plan, got;
        CHECK(gpt2rt_plan(&cs[i], &plan) == GPT2RT_OK, "plan: %s", plan.error);
        gpt2rt_ctx *ctx = make(&cs[i]);
        CHECK_OK(ctx, gpt2rt_plan_allocated(ctx, &got));
        for (int m = 0; m < GPT2RT_MEM_COUNT; m++) {
            CHECK(k.bytes[m] == plan.bytes[0][m], "config %d, %s: planned %llu, allocated %llu", i,
                  gpt2rt_mem_name((gpt2rt_mem)m), (unsigned long long)plan.bytes[0][m], (unsigned long long)k.bytes[m]);
            CHECK(got.bytes[0][m] == plan.bytes[0][m], "config %d, %s: plan_allocated disagrees", i,
                  gpt2rt_mem_name((gpt2rt_mem)m));
        }
        if (i == 3) {
            gpt2rt_config r = gpt2rt_config_get(ctx);
            CHECK(r.n_layer == 12 && r.n_head == 12 && r.n_embd == 768 && r.vocab_size == 50257 && r.padded_vocab == 50304 &&
                  r.max_seq_len == 1024 && r.grad_accum == 1 && r.precision == GPT2RT_PRECISION_FP32 &&
                  r.backend == GPT2RT_BACKEND_CPU && r.lr == 3e-4f && r.beta2 == 0.999f && r.grad_clip == 1.0f &&
                  r.seed == 1337 && r.n_threads >= 1, "resolved defaults of the zero config are wrong");
            CHECK(plan.n_params == 124439808, "GPT-2 124M has %lld parameters, expected 124439808 (Hugging Face)",
                  (long long)plan.n_params);
            char table[4096];
            gpt2rt_plan_format(&plan, table, sizeof table);
            printf("%s", table);
        }
        /* a training step allocates nothing more */
        int32_t x[64], y[64];
        gpt2rt_config rc = gpt2rt_config_get(ctx);
        batch(&rc, 0, x, y);
        if (rc.batch_size * rc.seq_len <= 64) {
            int calls = k.calls;
            gpt2rt_step_stats st;
            CHECK_OK(ctx, gpt2rt_step(ctx, x, y, &st));
            CHECK(k.calls == calls, "config %d: a training step made %d allocations", i, k.calls - calls);
        }
        gpt2rt_free(ctx);
        CHECK(k.live == 0, "config %d: %lld allocations leaked", i, (long long)k.live);
    }
    printf("plan == allocated: 5 configs, every category exact, no allocation during a step, no leaks\n");

    /* every allocation failing in turn: a clear error, then a clean free */
    int max_calls;
    {
        counter k;
        memset(&k, 0, sizeof k);
        gpt2rt_config c = tiny();
        c.alloc = count_alloc; c.free = count_free; c.alloc_user = &k;
        gpt2rt_ctx *ctx = make(&c);
        max_calls = k.calls;
        gpt2rt_free(ctx);
    }
    for (int f = 1; f <= max_calls; f++) {
        counter k;
        memset(&k, 0, sizeof k);
        k.fail_at = f;
        gpt2rt_config c = tiny();
        c.alloc = count_alloc; c.free = count_free; c.alloc_user = &k;
        gpt2rt_ctx *ctx;
        gpt2rt_result r = gpt2rt_create(&ctx, &c);
        CHECK(r == GPT2RT_ERR_OUT_OF_MEMORY, "allocation %d failing: result %s", f, gpt2rt_result_string(r));
        CHECK(f == 1 ? ctx == NULL : strstr(gpt2rt_last_error(ctx), "bytes") != NULL || strstr(gpt2rt_last_error(ctx), "table"),
              "allocation %d failing: message '%s'", f, gpt2rt_last_error(ctx));
        gpt2rt_free(ctx);
        CHECK(k.live == 0, "allocation %d failing: %lld allocations leaked", f, (long long)k.live);
    }
    printf("allocation failure: each of %d allocations failed in turn, each reported and freed cleanly\n", max_calls);

    /* a budget below the plan is refused before allocating, with the numbers */
    gpt2rt_config c = tiny();
    c.memory_budget = 100000;
    gpt2rt_memory_plan plan;
    gpt2rt_plan(&c, &plan);
    gpt2rt_ctx *ctx;
    CHECK(gpt2rt_create(&ctx, &c) == GPT2RT_ERR_OUT_OF_MEMORY, "budget below the plan accepted");
    char want[64];
    snprintf(want, sizeof want, "%llu bytes", (unsigned long long)plan.total[0]);
    CHECK(strstr(gpt2rt_last_error(ctx), want) && strstr(gpt2rt_last_error(ctx), "100000") &&
          strstr(gpt2rt_last_error(ctx), "activations"), "budget message: %s", gpt2rt_last_error(ctx));
    CHECK(gpt2rt_forward(ctx, NULL, NULL, NULL) == GPT2RT_ERR_STATE, "a failed context accepted a forward");
    gpt2rt_free(ctx);
}

/* ---- configuration errors ---- */
static void expect_refused(gpt2rt_config c, gpt2rt_result want, const char *needle, const char *what) {
    gpt2rt_ctx *ctx;
    gpt2rt_result r = gpt2rt_create(&ctx, &c);
    CHECK(r == want, "%s: result %s, expected %s", what, gpt2rt_result_string(r), gpt2rt_result_string(want));
    CHECK(ctx && strstr(gpt2rt_last_error(ctx), needle), "%s: message '%s' lacks '%s'", what,
          ctx ? gpt2rt_last_error(ctx) : "", needle);
    gpt2rt_memory_plan plan;
    CHECK(gpt2rt_plan(&c, &plan) == want && strstr(plan.error, needle), "%s: plan gives '%s'", what, plan.error);
    gpt2rt_free(ctx);
}

static void test_config_errors(void) {
    gpt2rt_config c;
    int n = 0;
    /* time series (tests/test_timeseries.c): the input and head kinds go together, and
       patch fields do not apply to tokens */
#define MISMATCH(field, value, needle) do { c = tiny(); c.field = value; \
        expect_refused(c, GPT2RT_ERR_INVALID_ARGUMENT, needle, #field " = " #value); n++; } while (0)
    MISMATCH(input, GPT2RT_INPUT_PATCHES, "input = PATCHES goes with head = REGRESSION (got head = LM)");
    MISMATCH(head, GPT2RT_HEAD_REGRESSION, "input = TOKENS goes with head = LM (got head = REGRESSION)");
    MISMATCH(patch_len, 16, "patch_len = 16, patch_stride = 0, n_channels = 0, horizon = 0, revin_affine = 0 apply to input = PATCHES");
    MISMATCH(n_channels, 7, "n_channels = 7");
    MISMATCH(horizon, 96, "horizon = 96");
#undef MISMATCH
#define UNAVAILABLE(field, value, needle) do { c = tiny(); c.field = value; \
        expect_refused(c, GPT2RT_ERR_UNAVAILABLE, needle, #field " = " #value); n++; } while (0)
    UNAVAILABLE(precision, GPT2RT_PRECISION_BF16, "BF16 needs backend = GPT2RT_BACKEND_CUDA");
    UNAVAILABLE(precision, GPT2RT_PRECISION_FP16, "FP16 needs backend = GPT2RT_BACKEND_CUDA");
    UNAVAILABLE(tf32, 1, "tf32 = 1 needs backend = GPT2RT_BACKEND_CUDA");
#undef UNAVAILABLE
    /* backend CUDA: created where the implementation was compiled by nvcc and a device is
       present; otherwise refused, saying why */
    {
        gpt2rt_config k = tiny();
        k.backend = GPT2RT_BACKEND_CUDA; k.precision = GPT2RT_PRECISION_BF16;
        gpt2rt_ctx *x;
        gpt2rt_result r = gpt2rt_create(&x, &k);
#ifdef __CUDACC__
        int n_dev = 0;
        if (cudaGetDeviceCount(&n_dev) != cudaSuccess) n_dev = 0;
        CHECK(n_dev ? r == GPT2RT_OK : r == GPT2RT_ERR_UNAVAILABLE && strstr(gpt2rt_last_error(x), "CUDA device"),
              "create of CUDA with %d device(s): %s", n_dev, gpt2rt_last_error(x));
#else
        CHECK(r == GPT2RT_ERR_UNAVAILABLE && strstr(gpt2rt_last_error(x), "compiled by nvcc"), "create of CUDA: %s",
              gpt2rt_last_error(x));
#endif
        gpt2rt_free(x);
        n++;
    }
    /* planned, not yet created: the plan works, creation says what is missing
       (data parallel and layer split run: tests/test_parallel.c) */
    {
        gpt2rt_config k[1];
        const char *needle[1] = {"LAYER_SPLIT with dropout"};
        k[0] = tiny();
        k[0].parallel = GPT2RT_PARALLEL_LAYER_SPLIT; k[0].n_devices = 2; k[0].n_layer = 3;
        k[0].attn_dropout = 0.1f;
        for (int i = 0; i < 1; i++) {
            gpt2rt_memory_plan plan;
            gpt2rt_ctx *x;
            CHECK(gpt2rt_plan(&k[i], &plan) == GPT2RT_OK, "plan of %s: %s", needle[i], plan.error);
            CHECK(gpt2rt_create(&x, &k[i]) == GPT2RT_ERR_NOT_IMPLEMENTED && strstr(gpt2rt_last_error(x), needle[i]),
                  "create of %s: %s", needle[i], gpt2rt_last_error(x));
            gpt2rt_free(x);
            n++;
        }
    }
#define BAD(field, value, needle) do { c = tiny(); c.field = value; \
        expect_refused(c, GPT2RT_ERR_INVALID_ARGUMENT, needle, #field " = " #value); n++; } while (0)
    BAD(n_embd, 15, "n_embd = 15 is not a multiple of n_head = 2");
    BAD(n_head, -3, "n_head = -3");
    BAD(seq_len, 9, "seq_len = 9 must lie in [1, max_seq_len = 8]");
    BAD(padded_vocab, 30, "padded_vocab = 30");
    BAD(lr, -1.0f, "lr = -1");
    BAD(beta2, 1.0f, "beta2 = 1");
    BAD(n_threads, -1, "n_threads = -1");
    BAD(precision, (gpt2rt_precision)9, "precision = 9");
    BAD(device_ids[3], -1, "device_ids[3] = -1");
    BAD(alloc, count_alloc, "alloc and free hooks must be set together");
    BAD(loss_scale, 1024.0f, "loss_scale = 1024 applies to precision = FP16 only");
    BAD(checkpoint_every, 3, "checkpoint_every = 3 applies to recompute = FULL only");
    BAD(recompute, (gpt2rt_recompute)7, "recompute = 7");
    BAD(parallel, GPT2RT_PARALLEL_DATA, "parallel = DATA needs world_size x n_devices >= 2 (it is 1 x 1)");
    BAD(parallel, GPT2RT_PARALLEL_LAYER_SPLIT, "parallel = LAYER_SPLIT needs n_devices >= 2");
    BAD(n_devices, 2, "n_devices = 2 needs parallel = DATA or LAYER_SPLIT");
    BAD(frozen, 0x40, "frozen = 0x40 has bits outside");
    BAD(frozen, GPT2RT_GROUP_HEAD, "GPT2RT_GROUP_HEAD");
    BAD(frozen, 0x1f, "freezes every parameter group");
    BAD(grad_accum, -2, "grad_accum = -2");
    c = tiny(); c.recompute = GPT2RT_RECOMPUTE_FULL; c.checkpoint_every = 3;
    expect_refused(c, GPT2RT_ERR_INVALID_ARGUMENT, "checkpoint_every = 3 must lie in [1, n_layer = 2]", "checkpoint 3 of 2"); n++;
    c = tiny(); c.parallel = GPT2RT_PARALLEL_LAYER_SPLIT; c.n_devices = 3;
    expect_refused(c, GPT2RT_ERR_INVALID_ARGUMENT, "needs n_layer >= 3 (it is 2)", "split 2 layers over 3"); n++;
#undef BAD
    printf("config: %d refused configurations, each with the field and its value in the message\n", n);
    gpt2rt_ctx *ctx;
    CHECK(gpt2rt_create(&ctx, NULL) == GPT2RT_ERR_INVALID_ARGUMENT && ctx, "NULL config");
    gpt2rt_free(ctx);
}

/* ---- call order and bad tokens: refused, context still usable ---- */
static void test_call_order(void) {
    gpt2rt_config c = tiny();
    gpt2rt_ctx *ctx = make(&c);
    int32_t x[16], y[16];
    batch(&c, 3, x, y);
    float logits[16 * 37];
    CHECK(gpt2rt_backward(ctx) == GPT2RT_ERR_STATE, "backward before forward");
    CHECK(gpt2rt_update(ctx, NULL) == GPT2RT_ERR_STATE, "update before backward");
    CHECK(gpt2rt_logits(ctx, logits, 16 * 37) == GPT2RT_ERR_STATE, "logits before forward");
    CHECK_OK(ctx, gpt2rt_forward(ctx, x, NULL, NULL));
    CHECK(gpt2rt_backward(ctx) == GPT2RT_ERR_STATE, "backward after a forward without targets");
    CHECK(gpt2rt_logits(ctx, logits, 15) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "2*8*37 = 592"), "logits count: %s", gpt2rt_last_error(ctx));
    x[13] = 37;
    CHECK(gpt2rt_forward(ctx, x, y, NULL) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "inputs[13] (batch 1, position 5) = 37") &&
          strstr(gpt2rt_last_error(ctx), "[0, 37)"), "bad token: %s", gpt2rt_last_error(ctx));
    x[13] = 0;
    y[2] = 40;
    CHECK(gpt2rt_forward(ctx, x, y, NULL) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(ctx), "targets[2]"),
          "bad target: %s", gpt2rt_last_error(ctx));
    y[2] = 1;
    CHECK_OK(ctx, gpt2rt_forward(ctx, x, y, NULL));
    CHECK_OK(ctx, gpt2rt_backward(ctx));
    CHECK(gpt2rt_logits(ctx, logits, 16 * 37) == GPT2RT_ERR_STATE, "logits after backward");
    CHECK(gpt2rt_state_save(ctx, "build/props_pending.safetensors") == GPT2RT_ERR_STATE, "state save with pending grads");
    gpt2rt_step_stats st;
    CHECK(gpt2rt_step(ctx, x, y, &st) == GPT2RT_ERR_STATE, "step with pending grads");
    CHECK_OK(ctx, gpt2rt_update(ctx, &st));
    CHECK(st.step == 1 && !st.skipped, "update stats: step %lld skipped %d", (long long)st.step, st.skipped);

    /* backward accumulates: two forward+backward of one batch sum to twice its gradient,
       which reads (normalised over the targets counted, twice as many) as one's */
    gpt2rt_ctx *a = make(&c), *b = make(&c);
    CHECK_OK(a, gpt2rt_forward(a, x, y, NULL)); CHECK_OK(a, gpt2rt_backward(a));
    CHECK_OK(b, gpt2rt_forward(b, x, y, NULL)); CHECK_OK(b, gpt2rt_backward(b));
    CHECK_OK(b, gpt2rt_forward(b, x, y, NULL)); CHECK_OK(b, gpt2rt_backward(b));
    gpt2rt_memory_plan pl;
    CHECK_OK(a, gpt2rt_plan_allocated(a, &pl));
    float *ga = (float *)malloc(4 * (size_t)pl.n_params_padded), *gb = (float *)malloc(4 * (size_t)pl.n_params_padded);
    int64_t ng = harness_params(a, GPT2RT_PARAM_GRAD, ga);
    harness_params(b, GPT2RT_PARAM_GRAD, gb);
    double worst = 0;
    for (int64_t i = 0; i < ng; i++) {
        double e = fabs((double)ga[i] - gb[i]) / (fabs((double)ga[i]) + 1e-12);
        if (ga[i] != 0 && e > worst) worst = e;
    }
    CHECK(worst < 1e-6, "two backwards are not twice one: rel %.2e", worst);

    /* a non-finite gradient skips the update and keeps the weights */
    float nan_w[16];
    gpt2rt_param_read(a, "transformer.ln_f.weight", GPT2RT_PARAM_VALUE, nan_w, 16);
    CHECK_OK(a, gpt2rt_update(a, &st));
    nan_w[0] = NAN;
    gpt2rt_param_write(a, "transformer.ln_f.weight", nan_w, 16);
    int64_t nw = harness_params(a, GPT2RT_PARAM_VALUE, ga);
    CHECK_OK(a, gpt2rt_step(a, x, y, &st));
    CHECK(st.skipped == 1 && st.step == 1, "non-finite step: skipped %d step %lld", st.skipped, (long long)st.step);
    harness_params(a, GPT2RT_PARAM_VALUE, gb);
    CHECK(!memcmp(ga, gb, 4 * (size_t)nw), "a skipped step changed the weights");
    free(ga);
    free(gb);
    printf("call order: 9 misuses refused with STATE/INVALID_ARGUMENT, context usable after; backward accumulates "
           "(rel %.1e); a NaN step is skipped\n", worst);
    gpt2rt_free(a); gpt2rt_free(b); gpt2rt_free(ctx);
}

/* ---- the forward against GPT-2's definition ----
   A double-precision forward written from the definition (transformers' GPT2Model:
   pre-LayerNorm blocks, LayerNorm eps 1e-5 on the biased variance, attention scores
   q.k / sqrt(head size) under a causal mask, gelu_new, tied LM head), on weights chosen
   so that the constants matter: the residual stream's variance (~1e-5) is of the size
   of LayerNorm's eps, and the attention scores spread over several units. */
static double *param_d(gpt2rt_ctx *ctx, const char *name, int64_t *n) {
    gpt2rt_param_info in;
    for (int i = 0; i < gpt2rt_param_count(ctx); i++) {
        if (gpt2rt_param_info_get(ctx, i, &in) != GPT2RT_OK || strcmp(in.name, name)) continue;
        float *f = (float *)malloc(4 * (size_t)in.numel);
        double *d = (double *)malloc(8 * (size_t)in.numel);
        CHECK_OK(ctx, gpt2rt_param_read(ctx, name, GPT2RT_PARAM_VALUE, f, in.numel));
        for (int64_t j = 0; j < in.numel; j++) d[j] = f[j];
        free(f);
        if (n) *n = in.numel;
        return d;
    }
    printf("no parameter %s\n", name);
    exit(2);
}

static void ref_layernorm(double *out, const double *x, const double *w, const double *b, int64_t C) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; c++) m += x[c];
    m /= (double)C;
    for (int64_t c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    double s = 1.0 / sqrt(v / (double)C + 1e-5);
    for (int64_t c = 0; c < C; c++) out[c] = (x[c] - m) * s * w[c] + b[c];
}

/* out (T,N) = in (T,K) . W (K,N) + b (N): Conv1D's (in, out) layout */
static void ref_linear(double *out, const double *in, const double *W, const double *b, int64_t T, int64_t K, int64_t N) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double s = b[n];
            for (int64_t k = 0; k < K; k++) s += in[t * K + k] * W[k * N + n];
            out[t * N + n] = s;
        }
}

/* logits (T,V) of one row of tokens (T) */
static void ref_forward(gpt2rt_ctx *ctx, const gpt2rt_config *c, const int32_t *tok, double *logits) {
    int64_t T = c->seq_len, C = c->n_embd, V = c->vocab_size, NH = c->n_head, HS = C / NH;
    double *wte = param_d(ctx, "transformer.wte.weight", NULL), *wpe = param_d(ctx, "transformer.wpe.weight", NULL);
    double *x = (double *)calloc((size_t)(T * C), 8), *a = (double *)calloc((size_t)(T * 4 * C), 8);
    double *qkv = (double *)calloc((size_t)(T * 3 * C), 8), *y = (double *)calloc((size_t)(T * C), 8);
    double *o = (double *)calloc((size_t)(T * C), 8), *p = (double *)calloc((size_t)T, 8);
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < C; k++) x[t * C + k] = wte[tok[t] * C + k] + wpe[t * C + k];
    for (int l = 0; l < c->n_layer; l++) {
        char nm[8][96];
        const char *suffix[8] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                 "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias"};
        double *w[8];
        for (int i = 0; i < 8; i++) {
            snprintf(nm[i], sizeof nm[i], "transformer.h.%d.%s", l, suffix[i]);
            w[i] = param_d(ctx, nm[i], NULL);
        }
        for (int64_t t = 0; t < T; t++) ref_layernorm(a + t * C, x + t * C, w[0], w[1], C);
        ref_linear(qkv, a, w[2], w[3], T, C, 3 * C);
        for (int64_t h = 0; h < NH; h++)
            for (int64_t t = 0; t < T; t++) {
                double mx = -1e300, sum = 0;
                for (int64_t s = 0; s <= t; s++) {
                    double d = 0;
                    for (int64_t i = 0; i < HS; i++) d += qkv[t * 3 * C + h * HS + i] * qkv[s * 3 * C + C + h * HS + i];
                    p[s] = d / sqrt((double)HS);
                    if (p[s] > mx) mx = p[s];
                }
                for (int64_t s = 0; s <= t; s++) { p[s] = exp(p[s] - mx); sum += p[s]; }
                for (int64_t i = 0; i < HS; i++) {
                    double acc = 0;
                    for (int64_t s = 0; s <= t; s++) acc += p[s] / sum * qkv[s * 3 * C + 2 * C + h * HS + i];
                    y[t * C + h * HS + i] = acc;
                }
            }
        ref_linear(o, y, w[4], w[5], T, C, C);
        for (int64_t j = 0; j < T * C; j++) x[j] += o[j];
        for (int64_t t = 0; t < T; t++) ref_layernorm(y + t * C, x + t * C, w[6], w[7], C);
        char n1[96], n2[96], n3[96], n4[96];
        snprintf(n1, sizeof n1, "transformer.h.%d.mlp.c_fc.weight", l);
        snprintf(n2, sizeof n2, "transformer.h.%d.mlp.c_fc.bias", l);
        snprintf(n3, sizeof n3, "transformer.h.%d.mlp.c_proj.weight", l);
        snprintf(n4, sizeof n4, "transformer.h.%d.mlp.c_proj.bias", l);
        double *fw = param_d(ctx, n1, NULL), *fb = param_d(ctx, n2, NULL), *pw = param_d(ctx, n3, NULL),
               *pb = param_d(ctx, n4, NULL);
        ref_linear(a, y, fw, fb, T, C, 4 * C);
        for (int64_t j = 0; j < T * 4 * C; j++) /* gelu_new, the tanh form GPT-2 uses */
            a[j] = 0.5 * a[j] * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (a[j] + 0.044715 * a[j] * a[j] * a[j])));
        ref_linear(o, a, pw, pb, T, 4 * C, C);
        for (int64_t j = 0; j < T * C; j++) x[j] += o[j];
        for (int i = 0; i < 8; i++) free(w[i]);
        free(fw); free(fb); free(pw); free(pb);
    }
    double *lw = param_d(ctx, "transformer.ln_f.weight", NULL), *lb = param_d(ctx, "transformer.ln_f.bias", NULL);
    for (int64_t t = 0; t < T; t++) {
        ref_layernorm(y + t * C, x + t * C, lw, lb, C);
        for (int64_t v = 0; v < V; v++) {
            double s = 0;
            for (int64_t k = 0; k < C; k++) s += y[t * C + k] * wte[v * C + k];
            logits[t * V + v] = s;
        }
    }
    free(lw); free(lb); free(wte); free(wpe); free(x); free(a); free(qkv); free(y); free(o); free(p);
}

/* every tensor set to uniform noise of the given half-width around its centre */
static void set_weights(gpt2rt_ctx *ctx, uint64_t seed) {
    uint64_t s = seed;
    for (int i = 0; i < gpt2rt_param_count(ctx); i++) {
        gpt2rt_param_info in;
        CHECK_OK(ctx, gpt2rt_param_info_get(ctx, i, &in));
        double centre = 0, half = 0.005; /* embeddings, projections into the residual: var ~1e-5 */
        if (strstr(in.name, "ln_") && strstr(in.name, ".weight")) centre = 1, half = 0.2;
        else if (strstr(in.name, "ln_")) half = 0.1;
        else if (strstr(in.name, "c_attn.weight")) half = 1.0; /* scores of several units */
        else if (strstr(in.name, "c_attn.bias")) half = 0.1;
        else if (strstr(in.name, "c_fc.")) half = 0.5;
        float *w = (float *)malloc(4 * (size_t)in.numel);
        for (int64_t j = 0; j < in.numel; j++) w[j] = (float)(centre + 2 * half * (harness_rng_uniform(&s) - 0.5));
        CHECK_OK(ctx, gpt2rt_param_write(ctx, in.name, w, in.numel));
        free(w);
    }
}

static void test_forward_definition(void) {
    gpt2rt_config c = tiny();
    c.batch_size = 1;
    gpt2rt_ctx *ctx = make(&c);
    set_weights(ctx, 4242);
    int64_t T = c.seq_len, V = c.vocab_size;
    int32_t x[8], y[8];
    batch(&c, 3, x, y);
    float *lg = (float *)malloc(4 * (size_t)(T * V));
    double *ref = (double *)malloc(8 * (size_t)(T * V));
    CHECK_OK(ctx, gpt2rt_forward(ctx, x, NULL, NULL));
    CHECK_OK(ctx, gpt2rt_logits(ctx, lg, T * V));
    ref_forward(ctx, &c, x, ref);
    double num = 0, den = 0;
    for (int64_t j = 0; j < T * V; j++) {
        double d = fabs((double)lg[j] - ref[j]);
        if (d > num || d != d) num = d != d ? INFINITY : d;
        if (fabs(ref[j]) > den) den = fabs(ref[j]);
    }
    /* fp32 eps 1.19e-7 x 4C = 64, the longest reduction (the MLP's): 7.6e-6; measured
       about 1e-7 (gcc -O3 x86-64, x86-64-v3, native AVX-512). A LayerNorm eps of 1e-6
       moves the logits by ~30%, an attention scale 1/sqrt(C) for 1/sqrt(head size) by ~5% */
    double e = num / den;
    printf("forward against GPT-2's definition (double precision, LayerNorm eps 1e-5 ~ the residual's variance): "
           "logits rel error %.2e (bound 7.6e-6)\n", e);
    CHECK(e <= 7.6e-6, "logits against the double-precision definition: rel error %.3e > 7.6e-6", e);
    free(lg); free(ref);
    gpt2rt_free(ctx);
}

/* ---- AdamW against torch.optim.AdamW's definition ----
   Two updates of a constant learning rate, each checked element by element against the
   formula evaluated in double from the gradients the step used: clip coefficient
   clip/(norm+1e-6) when the norm exceeds clip, m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
   p = p (1 - lr wd [2-D weights only]) - lr/(1-b1^t) m / (sqrt(v/(1-b2^t)) + eps). */
static void test_adamw_definition(void) {
    gpt2rt_config c = tiny();
    c.warmup_steps = 0; c.total_steps = 0; /* constant lr */
    gpt2rt_ctx *ctx = make(&c);
    gpt2rt_config r = gpt2rt_config_get(ctx);
    gpt2rt_memory_plan pl;
    CHECK_OK(ctx, gpt2rt_plan_allocated(ctx, &pl));
    int64_t N = pl.n_params_padded;
    float *p0 = (float *)malloc(4 * (size_t)N), *g = (float *)malloc(4 * (size_t)N), *p1 = (float *)malloc(4 * (size_t)N);
    double *m = (double *)calloc((size_t)N, 8), *v = (double *)calloc((size_t)N, 8);
    unsigned char *twod = (unsigned char *)calloc((size_t)N, 1);
    int64_t at = 0;
    for (int i = 0; i < gpt2rt_param_count(ctx); i++) { /* harness_params' order: which floats are 2-D */
        gpt2rt_param_info in;
        CHECK_OK(ctx, gpt2rt_param_info_get(ctx, i, &in));
        memset(twod + at, in.ndim == 2, (size_t)in.numel);
        at += in.numel;
    }
    double worst = 0, worst_rel_lr = 0;
    int bad = 0;
    for (int t = 1; t <= 2; t++) {
        int32_t x[16], y[16];
        batch(&c, 10 + t, x, y);
        int64_t n = harness_params(ctx, GPT2RT_PARAM_VALUE, p0);
        CHECK_OK(ctx, gpt2rt_forward(ctx, x, y, NULL));
        CHECK_OK(ctx, gpt2rt_backward(ctx));
        harness_params(ctx, GPT2RT_PARAM_GRAD, g);
        gpt2rt_step_stats st;
        CHECK_OK(ctx, gpt2rt_update(ctx, &st));
        harness_params(ctx, GPT2RT_PARAM_VALUE, p1);
        double norm = 0;
        for (int64_t j = 0; j < n; j++) norm += (double)g[j] * g[j];
        norm = sqrt(norm);
        double coef = r.grad_clip > 0 && norm > r.grad_clip ? r.grad_clip / (norm + 1e-6) : 1.0, lr = r.lr;
        for (int64_t j = 0; j < n; j++) {
            double gj = g[j] * coef;
            m[j] = r.beta1 * m[j] + (1 - r.beta1) * gj;
            v[j] = r.beta2 * v[j] + (1 - r.beta2) * gj * gj;
            double mh = m[j] / (1 - pow(r.beta1, t)), vh = v[j] / (1 - pow(r.beta2, t));
            double want = p0[j] * (twod[j] ? 1 - lr * r.weight_decay : 1.0) - lr * mh / (sqrt(vh) + r.eps);
            /* the update is lr-sized and computed in fp32 from an fp32 gradient (a few
               ulps of it: 8 eps32 lr) on an fp32 weight (8 eps32 |p|) */
            double err = fabs(p1[j] - want), tol = 8 * 1.1920929e-7 * (lr + fabs(want));
            if (err > tol) {
                if (bad++ < 5) printf("  AdamW step %d, float %lld: %.9g, definition %.9g (grad %.3g)\n", t, (long long)j,
                                      (double)p1[j], want, gj);
            }
            if (err / tol > worst) worst = err / tol;
            if (err / lr > worst_rel_lr) worst_rel_lr = err / lr;
        }
    }
    printf("AdamW against its definition: 2 steps, every float; worst error %.2f of the bound, %.2e of lr\n", worst,
           worst_rel_lr);
    CHECK(bad == 0, "AdamW: %d floats off the definition (worst %.3g x the bound)", bad, worst);
    free(p0); free(g); free(p1); free(m); free(v); free(twod);
    gpt2rt_free(ctx);
}

/* ---- accumulation: k micro-batches == one batch of k times the rows ----
   The gradient (of the mean loss over every target) and the step's gradient norm match to
   fp32 rounding: the same per-token terms, summed in another grouping */
static void test_accumulation_scale(void) {
    gpt2rt_config c1 = tiny(), c2 = tiny();
    c1.batch_size = 4;
    c2.batch_size = 2; c2.grad_accum = 2;
    gpt2rt_ctx *a = make(&c1), *b = make(&c2);
    int32_t x[32], y[32];
    batch(&c1, 21, x, y);
    y[5] = -100; /* an ignored target in the first micro-batch only: normalisation over what is counted */
    CHECK_OK(a, gpt2rt_forward(a, x, y, NULL));
    CHECK_OK(a, gpt2rt_backward(a));
    CHECK_OK(b, gpt2rt_forward(b, x, y, NULL));
    CHECK_OK(b, gpt2rt_backward(b));
    CHECK_OK(b, gpt2rt_forward(b, x + 16, y + 16, NULL));
    CHECK_OK(b, gpt2rt_backward(b));
    gpt2rt_memory_plan pl;
    CHECK_OK(a, gpt2rt_plan_allocated(a, &pl));
    float *ga = (float *)malloc(4 * (size_t)pl.n_params_padded), *gb = (float *)malloc(4 * (size_t)pl.n_params_padded);
    int64_t n = harness_params(a, GPT2RT_PARAM_GRAD, ga);
    harness_params(b, GPT2RT_PARAM_GRAD, gb);
    double e = rel_err(gb, ga, n);
    gpt2rt_step_stats sa, sb;
    CHECK_OK(a, gpt2rt_update(a, &sa));
    CHECK_OK(b, gpt2rt_update(b, &sb));
    double en = fabs((double)sa.grad_norm - sb.grad_norm) / sa.grad_norm;
    /* a sum of B*T = 32 token terms regrouped: <= 32 eps32 = 3.8e-6 relative */
    printf("accumulation: 2 micro-batches of 2 == 1 batch of 4: gradients rel %.2e, grad norm rel %.2e (bound 3.8e-6)\n",
           e, en);
    CHECK(e <= 3.8e-6, "accumulated gradients differ from one batch's: rel %.3e", e);
    CHECK(en <= 3.8e-6, "accumulated grad norm %.7g, one batch %.7g", (double)sb.grad_norm, (double)sa.grad_norm);
    free(ga); free(gb);
    gpt2rt_free(a); gpt2rt_free(b);
}

/* ---- learning: a fixed batch is memorised ---- */
static void test_learns(void) {
    gpt2rt_config c = tiny();
    c.warmup_steps = 0; c.total_steps = 0; c.lr = 3e-3f;
    gpt2rt_ctx *ctx = make(&c);
    int32_t x[16], y[16];
    batch(&c, 5, x, y);
    gpt2rt_step_stats st;
    float first = 0;
    for (int k = 0; k < 60; k++) {
        CHECK_OK(ctx, gpt2rt_step(ctx, x, y, &st));
        if (!k) first = st.loss;
    }
    printf("learning: a fixed batch, loss %.3f -> %.3f in 60 steps\n", first, st.loss);
    CHECK(first > 3.4f && st.loss < 0.5f * first, "loss %.3f -> %.3f", first, st.loss);
    gpt2rt_free(ctx);
}

/* gpt2rt__exp_fast (the softmaxes' exp, 7.1) against exp in double over [-87, 88]: the
   header's stated bound is 2 ulp of the float result (a degree-7 Taylor polynomial on
   |r| <= ln2/2, truncation < 5e-9 relative, plus the roundings of r's two parts and of
   Horner's steps); beyond the range it clamps (exp(-87), exp(88)), and NaN gives NaN */
static void test_exp_fast(void) {
    const int N = 1 << 20;
    double worst = 0.0, at = 0.0;
    for (int i = 0; i <= N; i++) {
        float x = -87.0f + (float)((double)i * 175.0 / N);
        double ref = exp((double)x);
        float rf = (float)ref, ulp = nextafterf(rf, INFINITY) - rf;
        double e = fabs((double)gpt2rt__exp_fast(x) - ref) / (double)ulp;
        if (!(e <= worst)) { worst = e; at = x; }
    }
    CHECK(worst <= 2.0, "exp_fast: %.3g ulp at x = %.9g (the header says within 2 ulp)", worst, at);
    float nan = nanf("");
    CHECK(isnan(gpt2rt__exp_fast(nan)), "exp_fast(NaN) = %g, not NaN", (double)gpt2rt__exp_fast(nan));
    CHECK(gpt2rt__exp_fast(-1000.0f) == gpt2rt__exp_fast(-87.0f) && gpt2rt__exp_fast(-INFINITY) == gpt2rt__exp_fast(-87.0f)
          && gpt2rt__exp_fast(1000.0f) == gpt2rt__exp_fast(88.0f) && isfinite(gpt2rt__exp_fast(INFINITY)),
          "exp_fast's clamps: -1000 -> %g, -inf -> %g (exp(-87) = %g), 1000 -> %g (exp(88) = %g)",
          (double)gpt2rt__exp_fast(-1000.0f), (double)gpt2rt__exp_fast(-INFINITY), (double)gpt2rt__exp_fast(-87.0f),
          (double)gpt2rt__exp_fast(1000.0f), (double)gpt2rt__exp_fast(88.0f));
    printf("exp_fast: within %.3f ulp of exp over [-87, 88] (2^20 points; worst at %.6g), clamped beyond, NaN kept\n",
           worst, at);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_finite_differences();
    test_determinism();
    test_resume();
    test_plan_equals_allocated();
    test_config_errors();
    test_call_order();
    test_learns();
    test_forward_definition();
    test_adamw_definition();
    test_accumulation_scale();
    test_exp_fast();
    return harness_finish();
}
