/* The inference context (config.inference = 1), on the CPU backend:
   - its plan holds weights, the KV cache, the logits, two layers' activations and a
     forward workspace: 0 bytes of gradients, moments, master weights and transient;
     its activations are a training context's minus (L - 2) layer blocks exactly (a
     block measured as the plan's growth from L-1 to L layers); planned == allocated
     (the allocator hook's bytes per category) for token and patch models;
   - the same seed gives bitwise the weights, the loss and the logits of a training
     context, and the same greedy ids and per-token logits from gpt2rt_generate
     (L = 1, 2 and 5 layers: one block, two, blocks reused);
   - patch models: bitwise the training context's loss and predictions;
   - every training call is refused with GPT2RT_ERR_STATE naming config.inference, and
     the context still evaluates afterwards; bad configs are refused naming the field;
   - the plan's table, the advisor and the FLOPs say what it is (forward only: a third
     of forward + backward).
   And gpt2rt_schedule_set (the schedule re-sized mid-run, as train_text --minutes does):
   from the call on, bitwise the rates of a context configured with that schedule.
   And config.classifier_chunk (the LM head over chunks of tokens): the logits arena it
   plans, planned == allocated, loss and gradients against the whole-batch path (bitwise
   where the summation order allows, see test_chunked), one device and data parallel. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

static gpt2rt_config small(int L) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = L; c.n_head = 2; c.n_embd = 16; c.vocab_size = 37; c.max_seq_len = 24;
    c.batch_size = 2; c.seq_len = 8; c.kv_batch = 2; c.kv_len = 20;
    c.seed = 7; c.n_threads = 2;
    return c;
}

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }


static gpt2rt_ctx *make(const gpt2rt_config *c) {
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, c) != GPT2RT_OK) { printf("create: %s\n", gpt2rt_last_error(ctx)); exit(2); }
    return ctx;
}

/* B*T tokens, every 4th target ignored */
static void data(int seed, int n, int V, int32_t *x, int32_t *y) {
    uint64_t s = (uint64_t)seed * 131 + 5;
    for (int i = 0; i < n; i++) {
        x[i] = (int32_t)(harness_rng_next(&s) % (uint64_t)V);
        y[i] = i % 4 == 3 ? -100 : (int32_t)(harness_rng_next(&s) % (uint64_t)V);
    }
}

/* the logits each generated token was chosen from, in call order */
typedef struct seen { float logits[64 * 37]; int n; } seen;
static int on_token(void *user, int row, int32_t token, const float *logits, int64_t n) {
    seen *s = (seen *)user;
    (void)row; (void)token;
    if (s->n < 64 && n == 37) memcpy(s->logits + (int64_t)s->n * 37, logits, 37 * sizeof(float));
    s->n++;
    return 0;
}

/* ---- plan: what the context holds ---- */
static void test_plan(void) {
    gpt2rt_config t = small(5), i = t;
    i.inference = 1;
    gpt2rt_memory_plan pt, pi, p4;
    CHECK(gpt2rt_plan(&t, &pt) == GPT2RT_OK, "plan: %s", pt.error);
    CHECK(gpt2rt_plan(&i, &pi) == GPT2RT_OK, "plan: %s", pi.error);
    gpt2rt_config t4 = t;
    t4.n_layer = 4;
    CHECK(gpt2rt_plan(&t4, &p4) == GPT2RT_OK, "plan: %s", p4.error);
    uint64_t block = pt.bytes[0][GPT2RT_MEM_ACTIVATIONS] - p4.bytes[0][GPT2RT_MEM_ACTIVATIONS];
    CHECK(block > 0, "a layer's block is %llu bytes", (unsigned long long)block);
    int zero[] = {GPT2RT_MEM_GRADS, GPT2RT_MEM_MOMENTS, GPT2RT_MEM_MASTER, GPT2RT_MEM_TRANSIENT};
    for (int k = 0; k < 4; k++)
        CHECK(pi.bytes[0][zero[k]] == 0 && (zero[k] == GPT2RT_MEM_MASTER || pt.bytes[0][zero[k]] > 0), /* fp32: no master */
              "%s: inference %llu bytes (want 0), training %llu", gpt2rt_mem_name((gpt2rt_mem)zero[k]),
              (unsigned long long)pi.bytes[0][zero[k]], (unsigned long long)pt.bytes[0][zero[k]]);
    int same[] = {GPT2RT_MEM_WEIGHTS, GPT2RT_MEM_LOGITS, GPT2RT_MEM_KVCACHE};
    for (int k = 0; k < 3; k++)
        CHECK(pi.bytes[0][same[k]] == pt.bytes[0][same[k]], "%s: inference %llu, training %llu (want equal)",
              gpt2rt_mem_name((gpt2rt_mem)same[k]), (unsigned long long)pi.bytes[0][same[k]],
              (unsigned long long)pt.bytes[0][same[k]]);
    /* two blocks used in turn instead of five */
    CHECK(pi.bytes[0][GPT2RT_MEM_ACTIVATIONS] == pt.bytes[0][GPT2RT_MEM_ACTIVATIONS] - 3 * block,
          "activations: inference %llu, training %llu - 3 blocks of %llu = %llu",
          (unsigned long long)pi.bytes[0][GPT2RT_MEM_ACTIVATIONS], (unsigned long long)pt.bytes[0][GPT2RT_MEM_ACTIVATIONS],
          (unsigned long long)block, (unsigned long long)(pt.bytes[0][GPT2RT_MEM_ACTIVATIONS] - 3 * block));
    /* the workspace differs by the gradient norm's partial sums only (no trained floats) */
    CHECK(pi.bytes[0][GPT2RT_MEM_WORKSPACE] <= pt.bytes[0][GPT2RT_MEM_WORKSPACE] &&
          pt.bytes[0][GPT2RT_MEM_WORKSPACE] - pi.bytes[0][GPT2RT_MEM_WORKSPACE] <= 64,
          "workspace: inference %llu, training %llu", (unsigned long long)pi.bytes[0][GPT2RT_MEM_WORKSPACE],
          (unsigned long long)pt.bytes[0][GPT2RT_MEM_WORKSPACE]);
    CHECK(pi.n_trainable == 0 && pt.n_trainable == pt.n_params_padded && pi.n_params == pt.n_params,
          "trainable: inference %lld (want 0), training %lld of %lld", (long long)pi.n_trainable,
          (long long)pt.n_trainable, (long long)pt.n_params_padded);
    /* forward FLOPs: 2 a weight and 4 C T a layer against 6 and 12: exactly a third */
    CHECK(fabs(pi.flops_per_token * 3.0 - pt.flops_per_token) <= 1e-9 * pt.flops_per_token,
          "flops a token: inference %g, training %g", pi.flops_per_token, pt.flops_per_token);
    char buf[4096];
    gpt2rt_plan_format(&pi, buf, sizeof buf);
    CHECK(has(buf, "inference (forward only)") && has(buf, "0.00M trained"), "plan table: %s", buf);
    gpt2rt_plan_format(&pt, buf, sizeof buf);
    CHECK(!has(buf, "inference"), "training plan table mentions inference: %s", buf);
    /* the advisor says what inference saves, and the number is the plans' difference */
    gpt2rt_config out;
    char why[4096], want[128];
    uint64_t peak_t = pt.total[0], peak_i = pi.total[0];
    CHECK(gpt2rt_fit(&i, peak_i, 0, &out, why, sizeof why) == GPT2RT_OK && out.inference == 1, "fit: %s", why);
    snprintf(want, sizeof want, "inference = 1 already saves %.2f %s", GPT2RT__SZ(peak_t - peak_i));
    CHECK(has(why, want), "advisor: want \"%s\" in: %s", want, why);
    printf("plan: inference %llu bytes against training %llu (%.1f%%): grads, moments, transient 0; activations "
           "%llu -> %llu (2 blocks of %llu for 5)\n", (unsigned long long)peak_i, (unsigned long long)peak_t,
           100.0 * (double)peak_i / (double)peak_t, (unsigned long long)pt.bytes[0][GPT2RT_MEM_ACTIVATIONS],
           (unsigned long long)pi.bytes[0][GPT2RT_MEM_ACTIVATIONS], (unsigned long long)block);
}

/* ---- planned == allocated, bitwise the training context's forward and generation ---- */
static void test_same_as_training(int L) {
    gpt2rt_config t = small(L), i = t;
    i.inference = 1;
    harness_counter k;
    memset(&k, 0, sizeof k);
    i.alloc = harness_count_alloc; i.free = harness_count_free; i.alloc_user = &k;
    gpt2rt_memory_plan pi, pa;
    CHECK(gpt2rt_plan(&i, &pi) == GPT2RT_OK, "plan: %s", pi.error);
    gpt2rt_ctx *a = make(&t), *b = make(&i);
    CHECK_OK(b, gpt2rt_plan_allocated(b, &pa));
    int bad = 0;
    for (int m = 0; m < GPT2RT_MEM_COUNT; m++)
        bad += k.bytes[m] != pi.bytes[0][m] || pa.bytes[0][m] != pi.bytes[0][m];
    CHECK(bad == 0, "L=%d: %d categories planned != allocated", L, bad);
    CHECK(gpt2rt_mode_get(b) == GPT2RT_MODE_EVAL && gpt2rt_mode_get(a) == GPT2RT_MODE_TRAIN, "modes %d %d",
          (int)gpt2rt_mode_get(b), (int)gpt2rt_mode_get(a));
    /* the same weights from the same seed */
    static float wa[200000], wb[200000];
    int64_t na = harness_params(a, GPT2RT_PARAM_VALUE, wa), nb = harness_params(b, GPT2RT_PARAM_VALUE, wb);
    CHECK(na == nb && na > 0 && memcmp(wa, wb, (size_t)na * sizeof(float)) == 0, "L=%d: weights differ (%lld, %lld)",
          L, (long long)na, (long long)nb);
    /* two batches: the second overwrites the blocks the first left */
    for (int s = 0; s < 2; s++) {
        int32_t x[16], y[16];
        data(s + 10 * L, 16, t.vocab_size, x, y);
        float la = -1, lb = -2;
        static float ga[16 * 37], gb[16 * 37];
        CHECK_OK(a, gpt2rt_forward(a, x, y, &la));
        CHECK_OK(b, gpt2rt_forward(b, x, y, &lb));
        CHECK(memcmp(&la, &lb, sizeof la) == 0 && la > 0, "L=%d batch %d: loss %.9g vs training %.9g", L, s, lb, la);
        CHECK_OK(a, gpt2rt_logits(a, ga, 16 * 37));
        CHECK_OK(b, gpt2rt_logits(b, gb, 16 * 37));
        CHECK(memcmp(ga, gb, sizeof ga) == 0, "L=%d batch %d: logits differ, rel %g", L, s, rel_err(gb, ga, 16 * 37));
    }
    /* greedy generation: the same ids, from bitwise the same logits */
    int32_t ta[2 * 20], tb[2 * 20];
    int64_t lena[2] = {3, 5}, lenb[2] = {3, 5};
    for (int j = 0; j < 40; j++) ta[j] = tb[j] = (int32_t)((j * 7 + 3) % 37);
    seen sa, sb;
    memset(&sa, 0, sizeof sa); memset(&sb, 0, sizeof sb);
    gpt2rt_sample o;
    memset(&o, 0, sizeof o);
    o.max_new_tokens = 9; o.eot = -1; o.on_token = on_token;
    o.user = &sa;
    CHECK_OK(a, gpt2rt_generate(a, &o, 2, ta, 20, lena));
    o.user = &sb;
    CHECK_OK(b, gpt2rt_generate(b, &o, 2, tb, 20, lenb));
    CHECK(lena[0] == 12 && lena[1] == 14 && lenb[0] == lena[0] && lenb[1] == lena[1] &&
          memcmp(ta, tb, sizeof ta) == 0, "L=%d: generated ids differ (lengths %lld %lld vs %lld %lld)", L,
          (long long)lenb[0], (long long)lenb[1], (long long)lena[0], (long long)lena[1]);
    CHECK(sa.n == 18 && sb.n == 18 && memcmp(sa.logits, sb.logits, sizeof sa.logits) == 0,
          "L=%d: per-token logits differ (%d, %d calls)", L, sa.n, sb.n);
    gpt2rt_free(a);
    gpt2rt_free(b);
    CHECK(k.live == 0, "L=%d: %lld allocations leaked", L, (long long)k.live);
}

/* ---- patch models: the forward-only evaluation of a forecaster ---- */
static void test_series(void) {
    gpt2rt_config t;
    memset(&t, 0, sizeof t);
    t.n_layer = 3; t.n_head = 2; t.n_embd = 16; t.max_seq_len = 16;
    t.input = GPT2RT_INPUT_PATCHES; t.head = GPT2RT_HEAD_REGRESSION;
    t.seq_len = 32; t.patch_len = 8; t.patch_stride = 4; t.n_channels = 2; t.horizon = 6; t.batch_size = 2;
    t.seed = 3; t.n_threads = 2;
    gpt2rt_config i = t;
    i.inference = 1;
    harness_counter k;
    memset(&k, 0, sizeof k);
    i.alloc = harness_count_alloc; i.free = harness_count_free; i.alloc_user = &k;
    gpt2rt_memory_plan pi;
    CHECK(gpt2rt_plan(&i, &pi) == GPT2RT_OK, "plan: %s", pi.error);
    gpt2rt_ctx *a = make(&t), *b = make(&i);
    int bad = 0;
    for (int m = 0; m < GPT2RT_MEM_COUNT; m++) bad += k.bytes[m] != pi.bytes[0][m];
    CHECK(bad == 0 && pi.bytes[0][GPT2RT_MEM_GRADS] == 0, "series: %d categories planned != allocated", bad);
    float x[2 * 32 * 2], y[2 * 6 * 2], pa[24], pb[24], la = -1, lb = -2;
    uint64_t s = 99;
    for (int j = 0; j < 128; j++) x[j] = (float)(harness_rng_uniform(&s) * 4 - 2 + 0.1 * j);
    for (int j = 0; j < 24; j++) y[j] = (float)harness_rng_uniform(&s);
    gpt2rt_mode_set(a, GPT2RT_MODE_EVAL);
    CHECK_OK(a, gpt2rt_forward_series(a, x, y, &la));
    CHECK_OK(b, gpt2rt_forward_series(b, x, y, &lb));
    CHECK_OK(a, gpt2rt_predictions(a, pa, 24));
    CHECK_OK(b, gpt2rt_predictions(b, pb, 24));
    CHECK(memcmp(&la, &lb, sizeof la) == 0 && memcmp(pa, pb, sizeof pa) == 0, "series: loss %.9g vs %.9g", lb, la);
    gpt2rt_step_stats st;
    gpt2rt_result r = gpt2rt_step_series(b, x, y, &st);
    CHECK(r == GPT2RT_ERR_STATE && has(gpt2rt_last_error(b), "gpt2rt_step_series") &&
          has(gpt2rt_last_error(b), "config.inference = 1"), "step_series: %s", gpt2rt_last_error(b));
    gpt2rt_free(a);
    gpt2rt_free(b);
    CHECK(k.live == 0, "series: leak");
}

/* ---- every training call refused, naming the field; the context still works ---- */
static void test_refusals(void) {
    gpt2rt_config i = small(2);
    i.inference = 1;
    gpt2rt_ctx *b = make(&i);
    int32_t x[16], y[16];
    data(1, 16, i.vocab_size, x, y);
    float l0 = 0, l1 = 0, g[24 * 16]; /* wpe: (max_seq_len, C) */
    CHECK_OK(b, gpt2rt_forward(b, x, y, &l0));
    gpt2rt_step_stats st;
    /* each refusal's own message, read at once */
    const char *fn[] = {"gpt2rt_backward", "gpt2rt_update", "gpt2rt_step", "gpt2rt_state_save", "gpt2rt_state_load",
                        "gpt2rt_param_read", "gpt2rt_param_read"};
    for (int j = 0; j < 7; j++) {
        gpt2rt_result r = j == 0 ? gpt2rt_backward(b) : j == 1 ? gpt2rt_update(b, &st) : j == 2 ? gpt2rt_step(b, x, y, &st)
                        : j == 3 ? gpt2rt_state_save(b, "build/test_infer_state.safetensors")
                        : j == 4 ? gpt2rt_state_load(b, "build/test_infer_state.safetensors")
                        : gpt2rt_param_read(b, "transformer.wpe.weight", j == 5 ? GPT2RT_PARAM_GRAD : GPT2RT_PARAM_ADAM_M,
                                            g, 24 * 16);
        CHECK(r == GPT2RT_ERR_STATE && has(gpt2rt_last_error(b), fn[j]) &&
              has(gpt2rt_last_error(b), "config.inference = 1"), "%s: %s, %s", fn[j], gpt2rt_result_string(r),
              gpt2rt_last_error(b));
    }
    /* a failed state_save wrote nothing */
    FILE *f = fopen("build/test_infer_state.safetensors", "rb");
    CHECK(!f, "state_save left a file");
    if (f) fclose(f);
    /* values still read and write; the forward is unchanged by the refusals */
    CHECK_OK(b, gpt2rt_param_read(b, "transformer.wpe.weight", GPT2RT_PARAM_VALUE, g, 24 * 16));
    CHECK_OK(b, gpt2rt_forward(b, x, y, &l1));
    CHECK(memcmp(&l0, &l1, sizeof l0) == 0, "forward after the refusals: %.9g, before %.9g", l1, l0);
    g[0] += 1.0f;
    CHECK_OK(b, gpt2rt_param_write(b, "transformer.wpe.weight", g, 24 * 16));
    CHECK_OK(b, gpt2rt_forward(b, x, y, &l1));
    CHECK(l1 != l0, "a written weight did not change the loss (%.9g)", l1);
    gpt2rt_free(b);

    /* the config's own checks */
    gpt2rt_memory_plan p;
    gpt2rt_config c2 = small(2);
    c2.inference = 2;
    CHECK(gpt2rt_plan(&c2, &p) == GPT2RT_ERR_INVALID_ARGUMENT && has(p.error, "inference = 2"), "2: %s", p.error);
    c2 = small(2); c2.inference = 1; c2.recompute = GPT2RT_RECOMPUTE_SELECTIVE;
    CHECK(gpt2rt_plan(&c2, &p) == GPT2RT_ERR_INVALID_ARGUMENT && has(p.error, "recompute"), "recompute: %s", p.error);
    c2 = small(2); c2.inference = 1; c2.parallel = GPT2RT_PARALLEL_DATA; c2.n_devices = 2;
    CHECK(gpt2rt_plan(&c2, &p) == GPT2RT_ERR_NOT_IMPLEMENTED && has(p.error, "parallel"), "parallel: %s", p.error);
    c2 = small(2); c2.inference = 1; c2.frozen = GPT2RT_GROUP_MLP;
    CHECK(gpt2rt_plan(&c2, &p) == GPT2RT_ERR_INVALID_ARGUMENT && has(p.error, "frozen = 0x10"), "frozen: %s", p.error);
}

/* ---- gpt2rt_schedule_set: a schedule changed after some steps is the one configured ----
   A context created for 40 steps and re-sized to warmup 2, total 10 after 3 updates
   takes bitwise the rates and weights of one created with warmup 2, total 10 */
static void test_schedule(void) {
    gpt2rt_config a = small(2), b;
    a.kv_batch = 0; a.kv_len = 0;
    a.lr = 1e-2f; a.min_lr_frac = 0.1f; a.warmup_steps = 2; a.total_steps = 10;
    b = a;
    b.warmup_steps = 5; b.total_steps = 40;
    gpt2rt_ctx *ca = make(&a), *cb = make(&b);
    int32_t x[16], y[16];
    float ra[12], rb[12];
    int same_lr = 1;
    for (int s = 0; s < 12; s++) {
        gpt2rt_step_stats sa, sb;
        if (s == 3) {
            CHECK_OK(cb, gpt2rt_schedule_set(cb, 2, 10));
            gpt2rt_config got = gpt2rt_config_get(cb);
            CHECK(got.warmup_steps == 2 && got.total_steps == 10, "config_get: warmup %d total %d", got.warmup_steps,
                  got.total_steps);
        }
        data(100 + s, 16, a.vocab_size, x, y);
        CHECK_OK(ca, gpt2rt_step(ca, x, y, &sa));
        CHECK_OK(cb, gpt2rt_step(cb, x, y, &sb));
        ra[s] = sa.lr; rb[s] = sb.lr;
        if (s >= 3) same_lr &= memcmp(&ra[s], &rb[s], sizeof(float)) == 0;
    }
    CHECK(same_lr, "rates after schedule_set differ from the configured schedule's");
    /* steps 0..2 ran the old schedule: warmup 5 gives lr (s+1)/5, against (s+1)/2 */
    CHECK(rb[0] == 1e-2f * 1.0f / 5.0f && ra[0] == 1e-2f / 2.0f, "step 0: %g, %g", rb[0], ra[0]);
    /* the configured schedule itself, from the manual's formula: step 6 is the cosine's middle
       (r = (6-2)/8), lr_min + (lr - lr_min)/2 = 5.5e-3, to fp32 rounding (2^-24 relative, a few ops) */
    CHECK(fabs(ra[6] - 5.5e-3) <= 5.5e-3 * 4e-7, "step 6: %.9g, want 5.5e-3", ra[6]);
    CHECK(ra[10] == 1e-3f && ra[11] == 1e-3f, "after total_steps: %g %g, want lr_min 1e-3", ra[10], ra[11]);
    /* re-sized before its first update, a context trains bitwise the configured one's weights */
    gpt2rt_ctx *cc = make(&b);
    CHECK_OK(cc, gpt2rt_schedule_set(cc, 2, 10));
    for (int s = 0; s < 12; s++) {
        data(100 + s, 16, a.vocab_size, x, y);
        CHECK_OK(cc, gpt2rt_step(cc, x, y, NULL));
    }
    static float wa[200000], wc[200000];
    int64_t na = harness_params(ca, GPT2RT_PARAM_VALUE, wa), nc = harness_params(cc, GPT2RT_PARAM_VALUE, wc);
    CHECK(na == nc && na > 0 && memcmp(wa, wc, (size_t)na * sizeof(float)) == 0, "weights after 12 steps differ");
    gpt2rt_free(cc);
    /* refusals */
    gpt2rt_result r = gpt2rt_schedule_set(cb, 11, 10);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(gpt2rt_last_error(cb), "warmup_steps = 11") &&
          has(gpt2rt_last_error(cb), "total_steps = 10"), "warmup > total: %s", gpt2rt_last_error(cb));
    r = gpt2rt_schedule_set(cb, -1, 0);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(gpt2rt_last_error(cb), "warmup_steps = -1"), "negative: %s",
          gpt2rt_last_error(cb));
    gpt2rt_config got = gpt2rt_config_get(cb);
    CHECK(got.warmup_steps == 2 && got.total_steps == 10, "a refused call changed the schedule");
    /* total 0: constant after the warmup */
    CHECK_OK(cb, gpt2rt_schedule_set(cb, 0, 0));
    gpt2rt_step_stats st;
    CHECK_OK(cb, gpt2rt_step(cb, x, y, &st));
    CHECK(st.lr == 1e-2f, "total 0: lr %g, want the peak 1e-2", st.lr);
    gpt2rt_free(ca);
    gpt2rt_free(cb);
    gpt2rt_config i = small(2);
    i.inference = 1;
    gpt2rt_ctx *ci = make(&i);
    r = gpt2rt_schedule_set(ci, 1, 2);
    CHECK(r == GPT2RT_ERR_STATE && has(gpt2rt_last_error(ci), "config.inference = 1"), "inference: %s",
          gpt2rt_last_error(ci));
    gpt2rt_free(ci);
}

/* ---- classifier_chunk: the LM head, loss and backward over chunks of tokens ----
   Against the whole-batch path (chunk 0) on B=2, T=256 (BT = 512): the loss bitwise for
   every chunk (each token's row is computed alone); every gradient but wte's bitwise
   (d(lnf) is row by row); wte's gradient, a sum over the tokens, bitwise for chunks that
   are multiples of the matrix product's KC slice (256), else within reassociation;
   the same through gpt2rt_step (the fused path: the head's backward in the forward) and
   through forward + backward (the logits computed again). */
static gpt2rt_ctx *make_chunk(int chunk, harness_counter *k) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2; c.n_head = 2; c.n_embd = 16; c.vocab_size = 37; c.max_seq_len = 256;
    c.batch_size = 2; c.seq_len = 256; c.seed = 5; c.n_threads = 2; c.lr = 1e-2f; c.classifier_chunk = chunk;
    if (k) { c.alloc = harness_count_alloc; c.free = harness_count_free; c.alloc_user = k; }
    gpt2rt_memory_plan p;
    CHECK(gpt2rt_plan(&c, &p) == GPT2RT_OK && p.bytes[0][GPT2RT_MEM_LOGITS] == (uint64_t)(chunk ? chunk : 512) * 128 * 4,
          "chunk %d: logits %llu bytes, want %d x 128 x 4", chunk, (unsigned long long)p.bytes[0][GPT2RT_MEM_LOGITS],
          chunk ? chunk : 512);
    gpt2rt_ctx *ctx = make(&c);
    if (k) {
        int bad = 0;
        for (int m = 0; m < GPT2RT_MEM_COUNT; m++) bad += k->bytes[m] != p.bytes[0][m];
        CHECK(bad == 0, "chunk %d: %d categories planned != allocated", chunk, bad);
    }
    return ctx;
}

static void test_chunked(void) {
    enum { BT = 512, WTE = 37 * 16 }; /* wte comes first in the public order: vocab x C floats */
    static int32_t x[BT], y[BT];
    static float ga[20000], gb[20000], wa[20000], wb[20000];
    uint64_t s = 3;
    for (int i = 0; i < BT; i++) {
        x[i] = (int32_t)(harness_rng_next(&s) % 37);
        y[i] = i % 5 == 4 ? -100 : (int32_t)(harness_rng_next(&s) % 37);
    }
    gpt2rt_ctx *a = make_chunk(0, NULL), *a2 = make_chunk(0, NULL);
    float la, lb;
    CHECK_OK(a, gpt2rt_forward(a, x, y, &la));
    CHECK_OK(a, gpt2rt_backward(a));
    int64_t n = harness_params(a, GPT2RT_PARAM_GRAD, ga);
    gpt2rt_step_stats sa, sb;
    CHECK_OK(a2, gpt2rt_step(a2, x, y, &sa));
    harness_params(a2, GPT2RT_PARAM_VALUE, wa);
    int chunks[] = {1, 7, 100, 256, 300};
    for (int k = 0; k < 5; k++) {
        int c = chunks[k], bitwise = c % 256 == 0;
        harness_counter cnt;
        memset(&cnt, 0, sizeof cnt);
        gpt2rt_ctx *b = make_chunk(c, &cnt), *b2 = make_chunk(c, NULL);
        /* forward + backward: the logits computed again in the backward */
        CHECK_OK(b, gpt2rt_forward(b, x, y, &lb));
        CHECK(memcmp(&la, &lb, sizeof la) == 0, "chunk %d: loss %.9g, whole batch %.9g", c, lb, la);
        CHECK_OK(b, gpt2rt_backward(b));
        harness_params(b, GPT2RT_PARAM_GRAD, gb);
        /* wte: each element a sum of BT products; reassociating a sum of BT terms moves it by
           at most BT units in the last place of its largest partial sum: BT * 2^-24 relative */
        double tol = bitwise ? 0.0 : BT * 5.96e-8;
        CHECK(rel_err(gb, ga, WTE) <= tol, "chunk %d: wte gradient rel %g > %g", c, rel_err(gb, ga, WTE), tol);
        CHECK(memcmp(gb + WTE, ga + WTE, (size_t)(n - WTE) * sizeof(float)) == 0,
              "chunk %d: a gradient other than wte's differs", c);
        /* gpt2rt_step: the fused path (the head's backward inside the forward) */
        CHECK_OK(b2, gpt2rt_step(b2, x, y, &sb));
        CHECK(memcmp(&sb.loss, &sa.loss, sizeof sa.loss) == 0, "chunk %d: step loss %.9g, whole batch %.9g", c,
              sb.loss, sa.loss);
        harness_params(b2, GPT2RT_PARAM_VALUE, wb);
        CHECK(memcmp(wb + WTE, wa + WTE, (size_t)(n - WTE) * sizeof(float)) == 0,
              "chunk %d: after a step, a weight other than wte differs", c);
        /* wte: AdamW's first step moves a weight by lr * g/(|g| + eps), at most lr either way
           (no weight decay), so gradients within tol move it by at most 2 lr */
        double md = 0;
        for (int i = 0; i < WTE; i++) md = fabs((double)wb[i] - wa[i]) > md ? fabs((double)wb[i] - wa[i]) : md;
        CHECK(bitwise ? md == 0 : md <= 2 * 1e-2, "chunk %d: wte after a step differs by %g", c, md);
        float lg[8];
        gpt2rt_result r = gpt2rt_logits(b, lg, BT * 37);
        CHECK(r == GPT2RT_ERR_STATE && has(gpt2rt_last_error(b), "classifier_chunk"), "chunk %d logits: %s", c,
              gpt2rt_last_error(b));
        gpt2rt_free(b);
        gpt2rt_free(b2);
        CHECK(cnt.live == 0, "chunk %d: leak", c);
    }
    gpt2rt_free(a2);
    gpt2rt_free(a);
    /* data parallel: two CPU ranks of one row each, chunks of 100 (not a KC multiple: each
       rank's wte gradient within reassociation, every other weight bitwise after a step) */
    {
        gpt2rt_ctx *dp[2];
        for (int j = 0; j < 2; j++) {
            gpt2rt_config c;
            memset(&c, 0, sizeof c);
            c.n_layer = 2; c.n_head = 2; c.n_embd = 16; c.vocab_size = 37; c.max_seq_len = 256;
            c.batch_size = 1; c.seq_len = 256; c.seed = 5; c.n_threads = 2; c.lr = 1e-2f;
            c.parallel = GPT2RT_PARALLEL_DATA; c.n_devices = 2; c.classifier_chunk = j ? 100 : 0;
            dp[j] = make(&c);
            CHECK_OK(dp[j], gpt2rt_step(dp[j], x, y, j ? &sb : &sa));
        }
        harness_params(dp[0], GPT2RT_PARAM_VALUE, wa);
        harness_params(dp[1], GPT2RT_PARAM_VALUE, wb);
        CHECK(memcmp(&sa.loss, &sb.loss, sizeof sa.loss) == 0 &&
              memcmp(wb + WTE, wa + WTE, (size_t)(n - WTE) * sizeof(float)) == 0,
              "data parallel, chunk 100: loss %.9g vs %.9g, or a weight other than wte differs", sb.loss, sa.loss);
        gpt2rt_free(dp[0]);
        gpt2rt_free(dp[1]);
    }
    /* refusals */
    gpt2rt_config c;
    gpt2rt_memory_plan p;
    memset(&c, 0, sizeof c);
    c.classifier_chunk = -1;
    CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && has(p.error, "classifier_chunk = -1"), "%s", p.error);
    memset(&c, 0, sizeof c);
    c.classifier_chunk = 64; c.backend = GPT2RT_BACKEND_CUDA; /* runs on CUDA too: 64 of B x T = 4 x 64 rows */
    {
        gpt2rt_memory_plan whole;
        gpt2rt_config cw = c;
        cw.classifier_chunk = 0;
        CHECK(gpt2rt_plan(&c, &p) == GPT2RT_OK && gpt2rt_plan(&cw, &whole) == GPT2RT_OK &&
              p.bytes[0][GPT2RT_MEM_LOGITS] * 4 * 64 == whole.bytes[0][GPT2RT_MEM_LOGITS] * 64, "CUDA chunk plan: %s",
              p.error);
    }
    memset(&c, 0, sizeof c);
    c.classifier_chunk = 64; c.input = GPT2RT_INPUT_PATCHES; c.head = GPT2RT_HEAD_REGRESSION;
    CHECK(gpt2rt_plan(&c, &p) == GPT2RT_ERR_INVALID_ARGUMENT && has(p.error, "token models"), "%s", p.error);
    /* at 124M, B=16, T=1024 the logits are 3.1 GiB; chunks of 1024 tokens hold 1/16 of them */
    memset(&c, 0, sizeof c);
    c.batch_size = 16; c.seq_len = 1024;
    gpt2rt_memory_plan p0, p1;
    CHECK(gpt2rt_plan(&c, &p0) == GPT2RT_OK, "%s", p0.error);
    c.classifier_chunk = 1024;
    CHECK(gpt2rt_plan(&c, &p1) == GPT2RT_OK, "%s", p1.error);
    char tb[4096];
    gpt2rt_plan_format(&p1, tb, sizeof tb);
    CHECK(has(tb, "classifier over 1024 tokens at a time"), "plan table: %s", tb);
    CHECK(p1.bytes[0][GPT2RT_MEM_LOGITS] * 16 == p0.bytes[0][GPT2RT_MEM_LOGITS] &&
          p0.total[0] - p1.total[0] == p0.bytes[0][GPT2RT_MEM_LOGITS] - p1.bytes[0][GPT2RT_MEM_LOGITS],
          "124M B=16 T=1024: logits %llu -> %llu", (unsigned long long)p0.bytes[0][GPT2RT_MEM_LOGITS],
          (unsigned long long)p1.bytes[0][GPT2RT_MEM_LOGITS]);
    /* the advisor tries it when allowed: 11.44 GiB fits 12 GiB with nothing else changed
       (at fp32 its modelled cost, 15 further chunks, is below a smaller batch's or selective recompute's) */
    {
        gpt2rt_config fit;
        char why[4096], want[160];
        c.classifier_chunk = 0;
        uint64_t budget = (uint64_t)12 << 30;
        gpt2rt_result r = gpt2rt_fit(&c, budget, GPT2RT_FIT_DEFAULT | GPT2RT_FIT_CLASSIFIER, &fit, why, sizeof why);
        snprintf(want, sizeof want, "classifier over 1024 tokens at a time: the fullest device needs %.2f GiB -> "
                 "%.2f GiB (saves %.2f GiB)", p0.total[0] / 1073741824.0, p1.total[0] / 1073741824.0,
                 (p0.total[0] - p1.total[0]) / 1073741824.0);
        CHECK(r == GPT2RT_OK && fit.classifier_chunk == 1024 && fit.batch_size == 16 && fit.grad_accum == 1 &&
              fit.recompute == GPT2RT_RECOMPUTE_NONE && has(why, want), "fit: chunk %d B %d accum %d: %s (want %s)",
              fit.classifier_chunk, fit.batch_size, fit.grad_accum, why, want);
        r = gpt2rt_fit(&c, budget, GPT2RT_FIT_DEFAULT, &fit, why, sizeof why);
        CHECK(r == GPT2RT_OK && fit.classifier_chunk == 0, "fit without the bit chose chunk %d", fit.classifier_chunk);
        /* the CUDA backend too: a budget of the chunked CUDA plan's arenas + 1 GiB (the advisor adds
           its 600 MiB estimate of the CUDA context and libraries; the whole batch's plan is 2.9 GiB more) */
        gpt2rt_config cu = c, cuk;
        cu.backend = GPT2RT_BACKEND_CUDA;
        cuk = cu;
        cuk.classifier_chunk = 1024;
        gpt2rt_memory_plan q0, q1;
        CHECK(gpt2rt_plan(&cu, &q0) == GPT2RT_OK && gpt2rt_plan(&cuk, &q1) == GPT2RT_OK &&
              q1.bytes[0][GPT2RT_MEM_LOGITS] * 16 == q0.bytes[0][GPT2RT_MEM_LOGITS], "CUDA plan with chunks: %s %s",
              q0.error, q1.error);
        r = gpt2rt_fit(&cu, q1.total[0] + ((uint64_t)1 << 30), GPT2RT_FIT_DEFAULT | GPT2RT_FIT_CLASSIFIER, &fit, why, sizeof why);
        CHECK(r == GPT2RT_OK && fit.backend == GPT2RT_BACKEND_CUDA && fit.classifier_chunk == 1024 &&
              fit.batch_size == 16 && fit.recompute == GPT2RT_RECOMPUTE_NONE, "CUDA fit: chunk %d B %d: %s",
              fit.classifier_chunk, fit.batch_size, why);
    }
    printf("classifier_chunk: 124M B=16 T=1024 plan %.2f GiB -> %.2f GiB (logits %.2f GiB -> %.3f GiB)\n",
           p0.total[0] / 1073741824.0, p1.total[0] / 1073741824.0, p0.bytes[0][GPT2RT_MEM_LOGITS] / 1073741824.0,
           p1.bytes[0][GPT2RT_MEM_LOGITS] / 1073741824.0);
}

int main(void) {
    test_plan();
    for (int L = 1; L <= 5; L += (L == 2 ? 3 : 1)) test_same_as_training(L);
    test_series();
    test_refusals();
    test_schedule();
    test_chunked();
    return harness_finish();
}
