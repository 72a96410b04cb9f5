/* The memory trade-offs, checked exactly on the CPU backend:
   - recompute (selective; full with every checkpoint spacing) gives bitwise the
     same loss, gradients and weights as keeping every activation;
   - k micro-batches of b give the update of one batch of k*b (loss normalised
     once, over every counted target), by gpt2rt_step and by explicit micro-steps;
   - frozen groups: the trained gradients are bitwise those of the unfrozen model,
     frozen weights never move, and they cost no gradient, moment or saved input;
   - planned == allocated over every knob, nothing allocated during a step;
   - the per-parameter bytes of the training state are Hugging Face's "model
     training anatomy" figures (4+4+8 fp32; 6+4+8 mixed precision);
   - the advisor's classic cases and the out-of-memory message;
   - the chunked classifier's cost in the GPU and CPU time models, and the advisor
     choosing between it and selective recompute by that cost. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

static gpt2rt_config small(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 5; c.n_head = 2; c.n_embd = 16; c.vocab_size = 37; c.max_seq_len = 8;
    c.batch_size = 2; c.seq_len = 8;
    c.lr = 1e-2f; c.weight_decay = 0.1f; c.seed = 11; c.n_threads = 2;
    return c;
}

static gpt2rt_ctx *make(const gpt2rt_config *c) {
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, c) != GPT2RT_OK) { printf("create: %s\n", gpt2rt_last_error(ctx)); exit(2); }
    return ctx;
}

/* n rows of T tokens; every 5th target ignored (-100), so micro-batches count differently */
static void data(int seed, int n_tok, int V, int32_t *x, int32_t *y) {
    uint64_t s = (uint64_t)seed * 977 + 3;
    for (int i = 0; i < n_tok; i++) {
        x[i] = (int32_t)(harness_rng_next(&s) % (uint64_t)V);
        y[i] = (harness_rng_next(&s) % 5 == 0) ? -100 : (int32_t)(harness_rng_next(&s) % (uint64_t)V);
    }
}

/* ---- recompute: bitwise equal to none ---- */
static void run_steps(gpt2rt_ctx *ctx, const gpt2rt_config *c, int steps, float *losses) {
    int32_t x[256], y[256];
    for (int k = 0; k < steps; k++) {
        gpt2rt_step_stats st;
        data(k, c->batch_size * c->seq_len * (c->grad_accum ? c->grad_accum : 1), c->vocab_size, x, y);
        CHECK_OK(ctx, gpt2rt_step(ctx, x, y, &st));
        losses[k] = st.loss;
    }
}

static void test_recompute(void) {
    struct { gpt2rt_recompute r; int k; unsigned frozen; const char *name; } v[] = {
        {GPT2RT_RECOMPUTE_SELECTIVE, 0, 0, "selective"},
        {GPT2RT_RECOMPUTE_FULL, 1, 0, "full, every layer"},
        {GPT2RT_RECOMPUTE_FULL, 2, 0, "full, every 2nd"},
        {GPT2RT_RECOMPUTE_FULL, 3, 0, "full, every 3rd"},
        {GPT2RT_RECOMPUTE_FULL, 5, 0, "full, every 5th (one segment)"},
        {GPT2RT_RECOMPUTE_FULL, GPT2RT_CHECKPOINT_SQRT, 0, "full, sqrt(L)"},
        {GPT2RT_RECOMPUTE_SELECTIVE, 0, GPT2RT_GROUP_MLP, "selective + frozen MLP"},
        {GPT2RT_RECOMPUTE_FULL, 2, GPT2RT_GROUP_ATTENTION, "full 2 + frozen attention"},
    };
    int nv = (int)(sizeof v / sizeof v[0]);
    for (int i = 0; i < nv; i++) {
        gpt2rt_config c0 = small(), c1 = small();
        c0.frozen = c1.frozen = v[i].frozen;
        c1.recompute = v[i].r; c1.checkpoint_every = v[i].k;
        gpt2rt_ctx *a = make(&c0), *b = make(&c1);
        /* one forward + backward: loss and every gradient */
        int32_t x[16], y[16];
        data(99, 16, c0.vocab_size, x, y);
        float la, lb;
        CHECK_OK(a, gpt2rt_forward(a, x, y, &la));
        CHECK_OK(b, gpt2rt_forward(b, x, y, &lb));
        CHECK_OK(a, gpt2rt_backward(a));
        CHECK_OK(b, gpt2rt_backward(b));
        CHECK(!memcmp(&la, &lb, sizeof la), "%s: loss %.9g vs %.9g", v[i].name, la, lb);
        CHECK(harness_params_equal(a, b, GPT2RT_PARAM_GRAD),
              "%s: gradients differ from no recompute", v[i].name);
        CHECK_OK(a, gpt2rt_update(a, NULL));
        CHECK_OK(b, gpt2rt_update(b, NULL));
        /* then 3 whole steps: weights and moments */
        float sa[3], sb[3];
        run_steps(a, &c0, 3, sa);
        run_steps(b, &c1, 3, sb);
        CHECK(harness_same_state(a, b) && !memcmp(sa, sb, sizeof sa),
              "%s: weights/moments/losses after 4 steps differ", v[i].name);
        gpt2rt_memory_plan pa, pb;
        gpt2rt_plan(&c0, &pa);
        gpt2rt_plan(&c1, &pb);
        printf("recompute %-30s bitwise equal to none (loss, %lld gradients, 4 steps); activations %6.1f -> %6.1f KiB\n",
               v[i].name, (long long)pa.n_trainable, pa.bytes[0][GPT2RT_MEM_ACTIVATIONS] / 1024.0,
               pb.bytes[0][GPT2RT_MEM_ACTIVATIONS] / 1024.0);
        if (v[i].k != 5) /* 5 of 5 layers: one segment, nothing recomputed, nothing saved */
            CHECK(pb.bytes[0][GPT2RT_MEM_ACTIVATIONS] < pa.bytes[0][GPT2RT_MEM_ACTIVATIONS], "%s saves no activations",
                  v[i].name);
        gpt2rt_free(a); gpt2rt_free(b);
    }
}

/* ---- gradient accumulation ---- */
static void read_all_params(gpt2rt_ctx *ctx, gpt2rt_param_what what, float *out) {
    int n = gpt2rt_param_count(ctx);
    for (int i = 0; i < n; i++) {
        gpt2rt_param_info in;
        memset(&in, 0, sizeof in);
        CHECK_OK(ctx, gpt2rt_param_info_get(ctx, i, &in));
        CHECK_OK(ctx, gpt2rt_param_read(ctx, in.name, what, out, in.numel));
        out += in.numel;
    }
}

static void test_accumulation(void) {
    const int k = 4;
    gpt2rt_config one = small(), acc = small();
    /* Adam's step is scale-free: a gradient of 1e-12 moves a weight as far as one of 1,
       so rounding-level differences in near-zero gradients would become lr-sized
       weight differences. eps = 1e-3 keeps the update a smooth function of the gradient. */
    one.eps = acc.eps = 1e-3f;
    one.batch_size = 2 * k;                 /* one batch of k*b */
    acc.batch_size = 2; acc.grad_accum = k; /* k micro-batches of b */
    gpt2rt_ctx *a = make(&one), *b = make(&acc), *e = make(&acc);
    gpt2rt_memory_plan pn;
    CHECK_OK(a, gpt2rt_plan_allocated(a, &pn));
    int64_t n = pn.n_params_padded;
    float *ga = (float *)malloc((size_t)n * 4), *gb = (float *)malloc((size_t)n * 4);
    double worst_g = 0, worst_p = 0, worst_l = 0;
    int explicit_same = 1;
    for (int step = 0; step < 3; step++) {
        /* every step from the same state: Adam turns rounding-level differences of
           near-zero gradients into visible ones, so states are not left to drift */
        if (step) {
            for (gpt2rt_ctx *t = b; t; t = t == b ? e : NULL) {
                CHECK_OK(a, gpt2rt_state_save(a, "build/accum_state.safetensors"));
                CHECK_OK(t, gpt2rt_state_load(t, "build/accum_state.safetensors"));
            }
        }
        int32_t x[64], y[64];
        data(step + 40, 64, one.vocab_size, x, y);
        /* the batch of k*b: forward + backward, read the gradients before the update */
        float loss_a;
        CHECK_OK(a, gpt2rt_forward(a, x, y, &loss_a));
        CHECK_OK(a, gpt2rt_backward(a));
        read_all_params(a, GPT2RT_PARAM_GRAD, ga);
        gpt2rt_step_stats sa, sb, se;
        CHECK_OK(a, gpt2rt_update(a, &sa));
        /* explicit micro-steps: forward/backward k times, read, update */
        for (int m = 0; m < k; m++) {
            CHECK_OK(b, gpt2rt_forward(b, x + m * 16, y + m * 16, NULL));
            CHECK_OK(b, gpt2rt_backward(b));
        }
        read_all_params(b, GPT2RT_PARAM_GRAD, gb);
        CHECK_OK(b, gpt2rt_update(b, &sb));
        /* one call per optimizer step */
        CHECK_OK(e, gpt2rt_step(e, x, y, &se));
        double eg = rel_err(gb, ga, n), el = fabs((double)sb.loss - sa.loss) / fabs((double)sa.loss);
        if (eg > worst_g) worst_g = eg;
        if (el > worst_l) worst_l = el;
        CHECK(sb.micro_batches == k && se.micro_batches == k && sb.tokens == 64 && sa.tokens == 64,
              "micro_batches %d/%d, tokens %lld", sb.micro_batches, se.micro_batches, (long long)sb.tokens);
        explicit_same &= harness_params_equal(b, e, GPT2RT_PARAM_VALUE) && !memcmp(&sb.loss, &se.loss, 4) &&
                         !memcmp(&sb.grad_norm, &se.grad_norm, 4);
        read_all_params(a, GPT2RT_PARAM_VALUE, ga);
        read_all_params(b, GPT2RT_PARAM_VALUE, gb);
        double ep = rel_err(gb, ga, n);
        if (ep > worst_p) worst_p = ep;
    }
    /* the same B*T = 64 token terms regrouped into k = 4 partial sums, through the
       forward's and the backward's chains: ~ (k + 4) eps32 = 9.5e-7 -> 1e-6; the loss one such
       sum; the weights one AdamW step (eps 1e-3 above keeps it smooth) of that gradient */
    CHECK(worst_g <= 1e-6, "accumulated gradients differ from the big batch's by %.3g (limit 1e-6)", worst_g);
    CHECK(worst_l <= 1e-6, "accumulated loss differs by %.3g", worst_l);
    CHECK(worst_p <= 1e-6, "weights after an update differ by %.3g", worst_p);
    CHECK(explicit_same, "explicit micro-steps and gpt2rt_step with grad_accum differ");
    printf("accumulation: %d micro-batches of 2 vs one batch of %d (20%% targets ignored, counts differ per "
           "micro-batch): gradients %.2g, loss %.2g, weights after the update %.2g relative (3 steps) (limit 1e-6); explicit "
           "micro-steps == gpt2rt_step bitwise\n", k, 2 * k, worst_g, worst_l, worst_p);
    /* a bad token in a later micro-batch: refused, nothing half-accumulated */
    int32_t x[64], y[64];
    data(7, 64, acc.vocab_size, x, y);
    x[40] = 9999;
    CHECK(gpt2rt_step(e, x, y, NULL) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(e), "9999"),
          "bad token in micro-batch 3: %s", gpt2rt_last_error(e));
    CHECK(gpt2rt_update(e, NULL) == GPT2RT_ERR_STATE, "partial accumulation left pending");
    x[40] = 1;
    gpt2rt_step_stats st;
    CHECK_OK(e, gpt2rt_step(e, x, y, &st));
    free(ga); free(gb);
    gpt2rt_free(a); gpt2rt_free(b); gpt2rt_free(e);
}

/* ---- frozen groups ---- */
static void test_frozen(void) {
    gpt2rt_config c0 = small(), c1 = small();
    c1.frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP; /* GPT4TS: LayerNorm and position embeddings train */
    gpt2rt_ctx *a = make(&c0), *b = make(&c1);
    int32_t x[16], y[16];
    data(5, 16, c0.vocab_size, x, y);
    CHECK_OK(a, gpt2rt_forward(a, x, y, NULL)); CHECK_OK(a, gpt2rt_backward(a));
    CHECK_OK(b, gpt2rt_forward(b, x, y, NULL)); CHECK_OK(b, gpt2rt_backward(b));
    int same = 1, n_frozen = 0;
    for (int i = 0; i < gpt2rt_param_count(b); i++) {
        gpt2rt_param_info in;
        gpt2rt_param_info_get(b, i, &in);
        float *ga = (float *)malloc((size_t)in.numel * 4), *gb = (float *)malloc((size_t)in.numel * 4);
        if (gpt2rt_param_read(b, in.name, GPT2RT_PARAM_GRAD, gb, in.numel) != GPT2RT_OK) n_frozen++;
        else same &= gpt2rt_param_read(a, in.name, GPT2RT_PARAM_GRAD, ga, in.numel) == GPT2RT_OK &&
                     !memcmp(ga, gb, (size_t)in.numel * 4);
        free(ga);
        free(gb);
    }
    CHECK(same, "trained tensors' gradients differ when attention and MLP are frozen");
    CHECK(n_frozen == 4 * 5 * 2, "%d frozen tensors, expected 40", n_frozen);
    float w0[16 * 48];
    CHECK(gpt2rt_param_read(b, "transformer.h.0.attn.c_attn.weight", GPT2RT_PARAM_GRAD, w0, 16 * 48) ==
          GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(b), "frozen"), "gradient of a frozen weight: %s",
          gpt2rt_last_error(b));
    CHECK_OK(b, gpt2rt_update(b, NULL));
    float before[16 * 48], after[16 * 48], ln_before[16], ln_after[16];
    gpt2rt_ctx *fresh = make(&c1);
    CHECK_OK(fresh, gpt2rt_param_read(fresh, "transformer.h.0.attn.c_attn.weight", GPT2RT_PARAM_VALUE, before, 16 * 48));
    CHECK_OK(fresh, gpt2rt_param_read(fresh, "transformer.h.0.ln_1.weight", GPT2RT_PARAM_VALUE, ln_before, 16));
    float l[3];
    run_steps(b, &c1, 3, l);
    CHECK_OK(b, gpt2rt_param_read(b, "transformer.h.0.attn.c_attn.weight", GPT2RT_PARAM_VALUE, after, 16 * 48));
    CHECK_OK(b, gpt2rt_param_read(b, "transformer.h.0.ln_1.weight", GPT2RT_PARAM_VALUE, ln_after, 16));
    CHECK(!memcmp(before, after, sizeof before), "a frozen weight moved");
    CHECK(memcmp(ln_before, ln_after, sizeof ln_before), "a trained LayerNorm weight did not move");
    /* state save + load keeps the frozen layout, and refuses a state of another layout */
    CHECK_OK(b, gpt2rt_state_save(b, "build/frozen_state.safetensors"));
    gpt2rt_ctx *r = make(&c1);
    CHECK_OK(r, gpt2rt_state_load(r, "build/frozen_state.safetensors"));
    CHECK(harness_params_equal(r, b, GPT2RT_PARAM_VALUE) && harness_params_equal(r, b, GPT2RT_PARAM_ADAM_M),
          "frozen state round trip");
    CHECK(gpt2rt_state_load(a, "build/frozen_state.safetensors") == GPT2RT_ERR_FORMAT &&
          strstr(gpt2rt_last_error(a), "frozen"), "an unfrozen context loaded a frozen state: %s", gpt2rt_last_error(a));
    gpt2rt_memory_plan pa, pb;
    gpt2rt_plan(&c0, &pa);
    gpt2rt_plan(&c1, &pb);
    CHECK(pb.bytes[0][GPT2RT_MEM_GRADS] == (uint64_t)pb.n_trainable * 4 &&
          pb.bytes[0][GPT2RT_MEM_MOMENTS] == (uint64_t)pb.n_trainable * 8 &&
          pb.bytes[0][GPT2RT_MEM_ACTIVATIONS] < pa.bytes[0][GPT2RT_MEM_ACTIVATIONS], "frozen plan");
    printf("frozen attention + MLP: %d tensors frozen, trained gradients bitwise those of the full model, frozen "
           "weights unchanged after 4 steps; grads+moments %lld -> %lld bytes, activations %llu -> %llu\n",
           n_frozen, (long long)(pa.bytes[0][GPT2RT_MEM_GRADS] + pa.bytes[0][GPT2RT_MEM_MOMENTS]),
           (long long)(pb.bytes[0][GPT2RT_MEM_GRADS] + pb.bytes[0][GPT2RT_MEM_MOMENTS]),
           (unsigned long long)pa.bytes[0][GPT2RT_MEM_ACTIVATIONS], (unsigned long long)pb.bytes[0][GPT2RT_MEM_ACTIVATIONS]);
    gpt2rt_free(a); gpt2rt_free(b); gpt2rt_free(fresh); gpt2rt_free(r);
}

/* ---- planned == allocated for every knob ---- */

static void test_plan_knobs(void) {
    int n_cfg = 0, bad = 0;
    for (int r = 0; r < 5; r++)
        for (int f = 0; f < 3; f++)
            for (int acc = 1; acc <= 3; acc += 2) {
                gpt2rt_config c = small();
                c.recompute = r == 0 ? GPT2RT_RECOMPUTE_NONE : r == 1 ? GPT2RT_RECOMPUTE_SELECTIVE : GPT2RT_RECOMPUTE_FULL;
                c.checkpoint_every = r == 2 ? 1 : r == 3 ? 2 : r == 4 ? GPT2RT_CHECKPOINT_SQRT : 0;
                c.frozen = f == 0 ? 0 : f == 1 ? GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP
                                                 : GPT2RT_GROUP_TOKEN_EMBED | GPT2RT_GROUP_LAYERNORM;
                c.grad_accum = acc;
                harness_counter k;
                memset(&k, 0, sizeof k);
                c.alloc = harness_count_alloc; c.free = harness_count_free; c.alloc_user = &k;
                gpt2rt_memory_plan plan;
                CHECK(gpt2rt_plan(&c, &plan) == GPT2RT_OK, "plan: %s", plan.error);
                gpt2rt_ctx *ctx = make(&c);
                for (int m = 0; m < GPT2RT_MEM_COUNT; m++)
                    if (k.bytes[m] != plan.bytes[0][m]) {
                        bad++;
                        printf("  r%d f%d acc%d %s: planned %llu allocated %llu\n", r, f, acc,
                               gpt2rt_mem_name((gpt2rt_mem)m), (unsigned long long)plan.bytes[0][m],
                               (unsigned long long)k.bytes[m]);
                    }
                int32_t x[64], y[64];
                data(1, 16 * acc, c.vocab_size, x, y);
                int calls = k.calls;
                CHECK_OK(ctx, gpt2rt_step(ctx, x, y, NULL));
                CHECK(k.calls == calls, "a step allocated");
                gpt2rt_free(ctx);
                CHECK(k.live == 0, "leak");
                n_cfg++;
            }
    CHECK(bad == 0, "%d categories planned != allocated", bad);
    printf("plan == allocated: %d configs (5 recompute settings x 3 frozen sets x 2 accumulations), every category "
           "exact, no allocation during a step\n", n_cfg);
}

/* ---- the training state per parameter: Hugging Face's "model training anatomy" ---- */
static void test_anatomy(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c); /* GPT-2 124M */
    c.backend = GPT2RT_BACKEND_CUDA;
    for (int p = 0; p < 2; p++) {
        c.precision = p ? GPT2RT_PRECISION_BF16 : GPT2RT_PRECISION_FP32;
        gpt2rt_memory_plan plan;
        CHECK(gpt2rt_plan(&c, &plan) == GPT2RT_OK, "plan: %s", plan.error);
        const uint64_t *b = plan.bytes[0];
        double per = (double)(b[GPT2RT_MEM_WEIGHTS] + b[GPT2RT_MEM_MASTER]) / (double)plan.n_params_padded;
        double g = (double)b[GPT2RT_MEM_GRADS] / (double)plan.n_params_padded;
        double o = (double)b[GPT2RT_MEM_MOMENTS] / (double)plan.n_params_padded;
        /* "4 bytes * parameters for fp32 training, 6 bytes for mixed precision; gradients 4 bytes;
           AdamW 8 bytes" (huggingface.co/docs/transformers/model_memory_anatomy) */
        CHECK(per == (p ? 6.0 : 4.0) && g == 4.0 && o == 8.0, "%s: weights %.2f, grads %.2f, moments %.2f bytes/param",
              p ? "bf16" : "fp32", per, g, o);
        printf("anatomy %s: weights %.0f + gradients %.0f + AdamW %.0f bytes per parameter (Hugging Face: %s)\n",
               p ? "bf16" : "fp32", per, g, o, p ? "6 + 4 + 8" : "4 + 4 + 8");
    }
    /* half-precision activations are half the bytes, statistics stay fp32 */
    gpt2rt_memory_plan f32, b16;
    c.batch_size = 8; c.seq_len = 1024;
    c.precision = GPT2RT_PRECISION_FP32; gpt2rt_plan(&c, &f32);
    c.precision = GPT2RT_PRECISION_BF16; gpt2rt_plan(&c, &b16);
    double ratio = (double)b16.bytes[0][GPT2RT_MEM_ACTIVATIONS] / (double)f32.bytes[0][GPT2RT_MEM_ACTIVATIONS];
    CHECK(ratio > 0.5 && ratio < 0.52, "bf16/fp32 activations %.4f", ratio);
    CHECK(b16.bytes[0][GPT2RT_MEM_LOGITS] * 2 == f32.bytes[0][GPT2RT_MEM_LOGITS], "bf16 logits");
}

/* ---- the advisor ---- */
static uint64_t peak(const gpt2rt_config *c) {
    gpt2rt_memory_plan p;
    if (gpt2rt_plan(c, &p) != GPT2RT_OK) return UINT64_MAX;
    uint64_t m = 0;
    for (int d = 0; d < p.n_devices; d++)
        if (p.total[d] + p.overhead[d] > m) m = p.total[d] + p.overhead[d];
    return m;
}

static int64_t global_batch(const gpt2rt_config *c) {
    return (int64_t)c->batch_size * (c->grad_accum ? c->grad_accum : 1) *
           (c->parallel == GPT2RT_PARALLEL_DATA ? c->n_devices : 1);
}

static void test_advisor(void) {
    const uint64_t GiB = (uint64_t)1 << 30;
    char why[4096];
    gpt2rt_config c, out;
    /* (a) GPT-2 124M, B=32, T=1024, fp32, one 24 GiB card */
    memset(&c, 0, sizeof c);
    c.backend = GPT2RT_BACKEND_CUDA; c.batch_size = 32; c.seq_len = 1024;
    CHECK(peak(&c) > 24 * GiB, "(a) should not fit as it is: %.2f GiB", peak(&c) / (double)GiB);
    gpt2rt_result r = gpt2rt_fit(&c, 24 * GiB, 0, &out, why, sizeof why);
    CHECK(r == GPT2RT_OK && peak(&out) <= 24 * GiB && global_batch(&out) == 32 && out.precision == GPT2RT_PRECISION_FP32,
          "(a) %s: %.2f GiB, batch %d x %d", gpt2rt_result_string(r), peak(&out) / (double)GiB, out.batch_size,
          out.grad_accum);
    printf("advisor (a) GPT-2 124M B=32 T=1024 fp32, 24 GiB: %.2f GiB as given ->\n%s", peak(&c) / (double)GiB, why);
    /* with precision allowed, bf16 is the faster answer */
    r = gpt2rt_fit(&c, 24 * GiB, GPT2RT_FIT_DEFAULT | GPT2RT_FIT_PRECISION, &out, why, sizeof why);
    CHECK(r == GPT2RT_OK && out.precision == GPT2RT_PRECISION_BF16 && peak(&out) <= 24 * GiB && global_batch(&out) == 32,
          "(a, precision allowed) %s", why);

    /* (b) about 30 GiB of training state on two 24 GiB cards: data parallel cannot fit */
    memset(&c, 0, sizeof c);
    c.backend = GPT2RT_BACKEND_CUDA; c.n_layer = 48; c.n_head = 25; c.n_embd = 1600; c.n_layer = 62;
    c.batch_size = 1; c.seq_len = 1024; c.grad_accum = 8;
    c.parallel = GPT2RT_PARALLEL_DATA; c.n_devices = 2;
    gpt2rt_memory_plan p;
    gpt2rt_plan(&c, &p);
    double state = (double)(p.bytes[0][GPT2RT_MEM_WEIGHTS] + p.bytes[0][GPT2RT_MEM_GRADS] + p.bytes[0][GPT2RT_MEM_MOMENTS]);
    CHECK(state > 28.0 * GiB && state < 32.0 * GiB, "(b) state %.2f GiB, wanted about 30", state / GiB);
    r = gpt2rt_fit(&c, 24 * GiB, GPT2RT_FIT_BATCH | GPT2RT_FIT_RECOMPUTE, &out, why, sizeof why);
    CHECK(r == GPT2RT_ERR_OUT_OF_MEMORY, "(b) data parallel alone fitted: %s", why);
    r = gpt2rt_fit(&c, 24 * GiB, 0, &out, why, sizeof why);
    CHECK(r == GPT2RT_OK && out.parallel == GPT2RT_PARALLEL_LAYER_SPLIT && peak(&out) <= 24 * GiB &&
          global_batch(&out) == global_batch(&c) && strstr(why, "every weight, gradient and moment on every device"),
          "(b) %s", why);
    printf("advisor (b) %.1fM parameters, training state %.1f GiB, data parallel on 2 x 24 GiB ->\n%s",
           p.n_params / 1e6, state / GiB, why);

    /* (b') the walk from data parallel to layer split passes configs gpt2rt_plan refuses: a
       split over 2 devices under FULL recompute needs 2 checkpoint segments, and
       checkpoint_every = 62 gives 1 until the recompute step changes it. A refused step is
       said so (no figure), and the next step's figure starts from the last plan that
       stood, so the figures add up to the result */
    c.recompute = GPT2RT_RECOMPUTE_FULL; c.checkpoint_every = 62;
    gpt2rt_config split_ck = c;
    split_ck.parallel = GPT2RT_PARALLEL_LAYER_SPLIT;
    CHECK(gpt2rt_plan(&split_ck, &p) == GPT2RT_ERR_INVALID_ARGUMENT && strstr(p.error, "segment"),
          "(b') layer split at checkpoint_every 62 should be refused: %s", p.error);
    r = gpt2rt_fit(&c, 24 * GiB, 0, &out, why, sizeof why);
    CHECK(r == GPT2RT_OK && out.parallel == GPT2RT_PARALLEL_LAYER_SPLIT && out.checkpoint_every != 62,
          "(b') %s: %s", gpt2rt_result_string(r), why);
    CHECK(strstr(why, "gpt2rt_plan refuses") && strstr(why, "segment"),
          "(b') the refused intermediate plan is not named: %s", why);
    CHECK(!strstr(why, "-> 0.00 KiB") && !strstr(why, "needs 0.00 KiB"),
          "(b') a refused intermediate plan read as a plan of 0 bytes: %s", why);
    {   /* the steps' figures add up: base peak - saves + costs = the result's peak (each
           figure rounded to 0.005 of its unit) */
        double left = (double)peak(&c), slack = 0;
        int figures = 0;
        for (const char *q = why; (q = strstr(q, "needs ")) != NULL; q++) {
            double v;
            char how[8], unit[8];
            const char *f = strstr(q, " (saves ");
            const char *g = strstr(q, " (costs ");
            if (g && (!f || g < f)) f = g;
            if (!f || strchr(q, '\n') < f) continue; /* the first line: no figure */
            if (sscanf(f, " (%7s %lf %7s", how, &v, unit) != 3) continue;
            double u = !strncmp(unit, "GiB", 3) ? 1073741824.0 : !strncmp(unit, "MiB", 3) ? 1048576.0 : 1024.0;
            left += (strcmp(how, "saves") ? 1 : -1) * v * u;
            slack += 0.005 * u;
            figures++;
        }
        double want = (double)peak(&out);
        CHECK(figures >= 1 && fabs(left - want) <= slack + 1,
              "(b') %d figures take %.0f bytes to %.0f, the result needs %.0f: %s", figures, (double)peak(&c), left,
              want, why);
    }
    printf("advisor (b') through a refused intermediate ->\n%s", why);

    /* (c) a frozen backbone (GPT4TS: attention and MLP frozen) saves their gradients and moments */
    memset(&c, 0, sizeof c);
    c.backend = GPT2RT_BACKEND_CUDA; c.batch_size = 8; c.seq_len = 1024;
    gpt2rt_config fz = c;
    fz.frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP;
    uint64_t pu = peak(&c), pf = peak(&fz), budget = (pu + pf) / 2;
    gpt2rt_memory_plan pp;
    gpt2rt_plan(&fz, &pp);
    int64_t frozen_params = pp.n_params_padded - pp.n_trainable;
    CHECK(frozen_params == 12LL * (12 * 768 * 768 + 9 * 768), "(c) %lld frozen parameters", (long long)frozen_params);
    CHECK(pu - pf >= (uint64_t)frozen_params * 12, "(c) frozen saves %llu bytes, less than 12 per frozen parameter",
          (unsigned long long)(pu - pf));
    r = gpt2rt_fit(&fz, budget, 0, &out, why, sizeof why);
    CHECK(r == GPT2RT_OK && strstr(why, "fits as it is") && strstr(why, "already save"), "(c) frozen: %s", why);
    printf("advisor (c) GPT4TS frozen backbone, budget %.2f GiB ->\n%s", budget / (double)GiB, why);
    r = gpt2rt_fit(&c, budget, 0, &out, why, sizeof why);
    CHECK(r == GPT2RT_OK && (out.batch_size != c.batch_size || out.recompute != c.recompute),
          "(c) the unfrozen model should need a change: %s", why);

    /* nothing fits: the smallest, and out of memory */
    memset(&c, 0, sizeof c);
    c.backend = GPT2RT_BACKEND_CUDA;
    r = gpt2rt_fit(&c, GiB / 2, 0, &out, why, sizeof why);
    CHECK(r == GPT2RT_ERR_OUT_OF_MEMORY && strstr(why, "nothing reachable fits"), "(d) %s", why);
}

/* ---- the chunked classifier's cost in the time models ----
   gpt2rt-mem's H100 figures (tools/gpt2rt_mem.c: 450 TFLOP/s of bf16 products, half
   efficiency at 640 tokens, 3350 GB/s): the step times it prints for GPT-2 124M. */
static gpt2rt_hardware h100_tool(void) {
    gpt2rt_hardware hw;
    memset(&hw, 0, sizeof hw);
    hw.flops_16 = 450e12; hw.flops_fp32 = 22.7e12; hw.flops_tf32 = 30.9e12;
    hw.mem_bw = 3350e9; hw.link_bw = 24e9; hw.half_tokens = 640.0;
    return hw;
}

static double step_s(const gpt2rt_config *c, const gpt2rt_hardware *hw) {
    gpt2rt_step_time st;
    char err[512];
    if (gpt2rt_plan_step_time(c, hw, 0, &st, err, sizeof err) != GPT2RT_OK) { printf("step time: %s\n", err); return -1; }
    return st.total;
}

static double predicted(const gpt2rt_config *c) {
    gpt2rt_memory_plan p;
    return gpt2rt_plan(c, &p) == GPT2RT_OK ? p.predicted_seconds : -1.0;
}

static void test_chunk_time(void) {
    gpt2rt_hardware hw = h100_tool();
    gpt2rt_config c;
    const double VC = 50304.0 * 768.0; /* wte of 124M: padded vocabulary x width */
    for (int B = 8; B <= 16; B += 8) {
        memset(&c, 0, sizeof c);
        c.backend = GPT2RT_BACKEND_CUDA; c.precision = GPT2RT_PRECISION_BF16; c.batch_size = B; c.seq_len = 1024;
        double t0 = step_s(&c, &hw), last = t0;
        /* a chunk of all the tokens (or more) is the whole batch: the same time */
        c.classifier_chunk = B * 1024;
        CHECK(step_s(&c, &hw) == t0 && t0 > 0, "B=%d chunk = B*T: %.6f s against %.6f", B, step_s(&c, &hw), t0);
        c.classifier_chunk = 4 * B * 1024;
        CHECK(step_s(&c, &hw) == t0, "B=%d chunk = 4 B*T: %.6f s against %.6f", B, step_s(&c, &hw), t0);
        /* smaller chunks cost more, every halving */
        for (int n = B * 512; n >= 64; n /= 2) {
            c.classifier_chunk = n;
            double t = step_s(&c, &hw);
            CHECK(t > last, "B=%d chunk %d: %.6f s, not above chunk %d's %.6f", B, n, t, 2 * n, last);
            last = t;
        }
        /* the derivation: each chunk after the first reads and writes wte's fp32 gradient
           (8 bytes a weight at 3350 GB/s) and launches 4 kernels at 5 us; equal up to
           double rounding of a sum of a few terms (1e-12 relative) */
        c.classifier_chunk = 1024;
        double t = step_s(&c, &hw), want = (B - 1) * (8.0 * VC / hw.mem_bw + 4 * 5e-6);
        CHECK(fabs((t - t0) - want) <= 1e-12 * t0, "B=%d chunk 1024 costs %.6f ms, the count says %.6f", B,
              1e3 * (t - t0), 1e3 * want);
        /* measured on an H100 (docs/results/gpu.md, classifier_chunk = 1024, one run each):
           tokens/s 3.4% lower at B = 8 (427,116 -> 412,389) and 4.7% at B = 16 (446,272 ->
           425,083). The model's fall in tokens/s, 1 - t0/t, lies in that band for both */
        double fall = 1.0 - t0 / t;
        CHECK(fall >= 0.034 && fall <= 0.047, "B=%d: chunks of 1024 cost %.2f%% of the tokens a second, measured "
              "3.4%% (B=8) and 4.7%% (B=16)", B, 100 * fall);
        printf("chunked classifier, 124M bf16 B=%d T=1024, gpt2rt-mem's H100: %.2f ms -> %.2f ms with chunks of 1024 "
               "(%.2f%% fewer tokens/s; measured %s)\n", B, 1e3 * t0, 1e3 * t, 100 * fall, B == 8 ? "3.4%" : "4.7%");
        /* frozen wte: no gradient to accumulate, 3 kernels a chunk */
        c.frozen = GPT2RT_GROUP_TOKEN_EMBED;
        c.classifier_chunk = 0;
        t0 = step_s(&c, &hw);
        c.classifier_chunk = 1024;
        t = step_s(&c, &hw);
        CHECK(fabs((t - t0) - (B - 1) * 3 * 5e-6) <= 1e-12 * t0, "B=%d frozen wte: chunks cost %.6f ms", B, 1e3 * (t - t0));
    }
    /* the advisor's own model (gpt2rt_plan's predicted_seconds) counts them too */
    memset(&c, 0, sizeof c);
    c.backend = GPT2RT_BACKEND_CUDA; c.precision = GPT2RT_PRECISION_BF16; c.batch_size = 8; c.seq_len = 1024;
    double p0 = predicted(&c);
    c.classifier_chunk = 1024;
    CHECK(predicted(&c) > p0 * 1.01, "plan: chunks of 1024 predicted %.3f ms against %.3f", 1e3 * predicted(&c), 1e3 * p0);

    /* the CPU model counts the same gradient traffic and adds wte's two re-reads (fp32):
       16 bytes a weight a chunk at its memory rate (half_rows 0: no rows term) */
    {
        gpt2rt_cpu_speed sp;
        memset(&sp, 0, sizeof sp);
        sp.matmul_peak = 6e10; sp.head_peak = 7e10; sp.mem_bw = 1e10; sp.n_threads = 2;
        gpt2rt_step_time a, b;
        char err[512];
        memset(&c, 0, sizeof c);
        c.batch_size = 4; c.seq_len = 64;
        CHECK(gpt2rt_plan_cpu_time(&c, &sp, &a, err, sizeof err) == GPT2RT_OK, "cpu time: %s", err);
        c.classifier_chunk = 64;
        CHECK(gpt2rt_plan_cpu_time(&c, &sp, &b, err, sizeof err) == GPT2RT_OK, "cpu time: %s", err);
        double want = 3 * 16.0 * VC / sp.mem_bw;
        CHECK(fabs((b.total - a.total) - want) <= 1e-12 * a.total, "CPU: 4 chunks cost %.6f s, the count says %.6f",
              b.total - a.total, want);
    }

    /* The advisor weighs the chunks against selective recompute by their modelled cost:
       GPT-2 124M bf16 on CUDA, a budget both single changes fit and the config does not.
       At B = 16 selective recompute (LayerNorm and GELU outputs again: 3.6 GB of traffic,
       1.45 ms on the advisor's figures) is cheaper than 15 further chunks (2.15 ms); a
       48-layer model at B = 2 needs 4 x 0.45 GB of recompute against one further chunk */
    struct { int L, B; } cs[2] = {{12, 16}, {48, 2}};
    for (int i = 0; i < 2; i++) {
        const uint64_t GiB = (uint64_t)1 << 30;
        char why[4096];
        gpt2rt_config sel, chk, out;
        memset(&c, 0, sizeof c);
        c.backend = GPT2RT_BACKEND_CUDA; c.precision = GPT2RT_PRECISION_BF16; c.n_layer = cs[i].L;
        c.batch_size = cs[i].B; c.seq_len = 1024;
        sel = chk = c;
        sel.recompute = GPT2RT_RECOMPUTE_SELECTIVE;
        chk.classifier_chunk = 1024;
        uint64_t budget = peak(&sel) > peak(&chk) ? peak(&sel) : peak(&chk);
        double ts = predicted(&sel), tc = predicted(&chk);
        CHECK(peak(&c) > budget && ts > 0 && tc > 0 && fabs(ts - tc) > 0.01 * (ts < tc ? ts : tc),
              "L=%d B=%d: needs %.2f GiB against %.2f; selective %.3f ms, chunks %.3f ms: not a clear case", cs[i].L,
              cs[i].B, peak(&c) / (double)GiB, budget / (double)GiB, 1e3 * ts, 1e3 * tc);
        int want_sel = i == 0;
        CHECK((ts < tc) == want_sel, "L=%d B=%d: selective %.3f ms, chunks %.3f ms", cs[i].L, cs[i].B, 1e3 * ts, 1e3 * tc);
        gpt2rt_result r = gpt2rt_fit(&c, budget, GPT2RT_FIT_RECOMPUTE | GPT2RT_FIT_CLASSIFIER, &out, why, sizeof why);
        CHECK(r == GPT2RT_OK && out.batch_size == c.batch_size &&
              (want_sel ? out.recompute == GPT2RT_RECOMPUTE_SELECTIVE && !out.classifier_chunk
                        : out.recompute == GPT2RT_RECOMPUTE_NONE && out.classifier_chunk == 1024),
              "L=%d B=%d: the advisor chose recompute %d, chunk %d (selective %.3f ms, chunks %.3f ms predicted): %s",
              cs[i].L, cs[i].B, (int)out.recompute, out.classifier_chunk, 1e3 * ts, 1e3 * tc, why);
        printf("advisor, GPT-2 L=%d bf16 B=%d T=1024 in %.2f GiB: selective %.2f ms, chunks of 1024 %.2f ms -> %s\n",
               cs[i].L, cs[i].B, budget / (double)GiB, 1e3 * ts, 1e3 * tc,
               out.classifier_chunk ? "chunks" : out.recompute == GPT2RT_RECOMPUTE_SELECTIVE ? "selective" : "other");
    }
}

/* ---- out of memory, explained ---- */
/* the CPU model's ops between the products: with their forwards given (a, b, c), full
   recompute adds the forward of the layers between checkpoints, (L - k)(a + b), and
   selective the LayerNorms and GELU, L a, over what the same knobs add without them
   (exact: the rest of the model is the same sum in both); measuring at a GPT-2 shape
   fills all three, at a patch model's no cross-entropy */
static void test_cpu_ops_time(void) {
    const double a = 1e-3, b = 2e-3, c = 5e-4;
    gpt2rt_cpu_speed none, ops;
    memset(&none, 0, sizeof none);
    none.matmul_peak = 6e10; none.head_peak = 7e10; none.mem_bw = 1e10; none.n_threads = 2;
    ops = none;
    ops.layer_norm_gelu = a; ops.layer_attention = b; ops.cross_entropy = c;
    gpt2rt_config cf;
    memset(&cf, 0, sizeof cf);
    cf.n_layer = 6; cf.batch_size = 4; cf.seq_len = 64;
    char err[512];
    gpt2rt_step_time t[2][3];
    gpt2rt_recompute rc[3] = {GPT2RT_RECOMPUTE_NONE, GPT2RT_RECOMPUTE_FULL, GPT2RT_RECOMPUTE_SELECTIVE};
    for (int k = 0; k < 3; k++) {
        cf.recompute = rc[k];
        cf.checkpoint_every = rc[k] == GPT2RT_RECOMPUTE_FULL ? 2 : 0;
        CHECK(gpt2rt_plan_cpu_time(&cf, &none, &t[0][k], err, sizeof err) == GPT2RT_OK, "cpu time: %s", err);
        CHECK(gpt2rt_plan_cpu_time(&cf, &ops, &t[1][k], err, sizeof err) == GPT2RT_OK, "cpu time: %s", err);
    }
    double full = (t[1][1].total - t[1][0].total) - (t[0][1].total - t[0][0].total);
    double sel = (t[1][2].total - t[1][0].total) - (t[0][2].total - t[0][0].total);
    CHECK(fabs(full - 4 * (a + b)) <= 1e-9, "full recompute (6 layers, checkpoint every 2) adds %.6f s of ops, want 4 (a + b) = %.6f",
          full, 4 * (a + b));
    CHECK(fabs(sel - 6 * a) <= 1e-9, "selective recompute adds %.6f s of ops, want 6 a = %.6f", sel, 6 * a);
    gpt2rt_cpu_speed m;
    cf.recompute = GPT2RT_RECOMPUTE_NONE; cf.checkpoint_every = 0; cf.n_threads = 1;
    CHECK(gpt2rt_cpu_speed_measure(&cf, 1, &m) == GPT2RT_OK && m.layer_norm_gelu > 0 && m.layer_attention > 0 &&
              m.cross_entropy > 0, "measured at a GPT-2 shape: LayerNorms and GELU %g s, attention %g s, cross-entropy %g s",
          m.layer_norm_gelu, m.layer_attention, m.cross_entropy);
    memset(&cf, 0, sizeof cf);
    cf.input = GPT2RT_INPUT_PATCHES; cf.head = GPT2RT_HEAD_REGRESSION; cf.n_layer = 1; cf.n_head = 2; cf.n_embd = 16;
    cf.seq_len = 64; cf.patch_len = 16; cf.patch_stride = 16; cf.horizon = 8; cf.n_channels = 2; cf.batch_size = 4;
    cf.n_threads = 1;
    gpt2rt_result r = gpt2rt_cpu_speed_measure(&cf, 1, &m);
    CHECK(r == GPT2RT_OK && m.layer_norm_gelu > 0 && m.cross_entropy == 0,
          "measured at a patch model: LayerNorms and GELU %g s, cross-entropy %g s (want none), result %d",
          m.layer_norm_gelu, m.cross_entropy, (int)r);
}

static void test_oom_message(void) {
    gpt2rt_config c = small();
    c.batch_size = 8; c.grad_accum = 1;
    gpt2rt_memory_plan p;
    gpt2rt_plan(&c, &p);
    c.memory_budget = p.total[0] - p.bytes[0][GPT2RT_MEM_ACTIVATIONS] / 2;
    gpt2rt_ctx *ctx;
    CHECK(gpt2rt_create(&ctx, &c) == GPT2RT_ERR_OUT_OF_MEMORY, "over budget accepted");
    const char *m = gpt2rt_last_error(ctx);
    CHECK(strstr(m, "activations") && strstr(m, "moments") && strstr(m, "free") && strstr(m, "what would fit") &&
          strstr(m, "saves"), "message: %s", m);
    printf("out of memory, explained:\n%s\n", m);
    gpt2rt_free(ctx);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_recompute();
    test_accumulation();
    test_frozen();
    test_plan_knobs();
    test_anatomy();
    test_advisor();
    test_chunk_time();
    test_cpu_ops_time();
    test_oom_message();
    return harness_finish();
}
