/* bf16 weights for generation (config.inference_weights = BF16), CPU backend:
   - rounding: bf16 of a float is round-to-nearest-even (ties to even, NaN kept, the
     overflow to infinity), within 2^-8 relative (half an ulp of 8 significant bits);
   - kernels: the portable, AVX2 and AVX-512F dot products are bitwise the same floats,
     and bitwise the fp32 matrix-vector product (gpt2rt__cpu_dot's order) on the widened
     weights; the AVX-512 BF16 path (a prefill's) within its derived tolerance of them;
     all within fp32 rounding of a double reference; one thread == two threads, bitwise,
     for few rows (decode) and many (prefill);
   - the context: loading the fixture's fp32 weights gives exactly their bf16 rounding
     (gpt2rt_param_read); greedy ids equal the fp32 context's wherever the fp32 top-2 gap
     exceeds twice the bf16 bound, and the logits lie within that bound; against an fp32
     context holding the same rounded weights the logits agree to the kernels' tolerance;
     the same ids and logits on 1 and 2 threads;
   - the plan counts the weights at 2 bytes (and its table says so), and planned ==
     allocated (the hooks);
   - the weights' arena is eligible for Linux's transparent huge pages (smaps);
   - refusals name the field: a training context, FP16, CUDA, patches; gpt2rt_forward and
     gpt2rt_weights_save say they need fp32 weights; training calls stay refused. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"
#include <float.h>

#define FIX "tests/fixtures/hf_tiny/"
#define MAXSTEP 48

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }


static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* ---- rounding ---- */
static void test_round(void) {
    /* 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 (bf16 keeps 7 fraction bits): to the even, 1;
       1 + 3*2^-8 halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to the even */
    CHECK(gpt2rt__bf16_round(1.0f + 0x1p-8f) == 0x3F80, "1+2^-8 -> 0x%04x, want 0x3f80", gpt2rt__bf16_round(1.0f + 0x1p-8f));
    CHECK(gpt2rt__bf16_round(1.0f + 0x3p-8f) == 0x3F82, "1+3*2^-8 -> 0x%04x, want 0x3f82", gpt2rt__bf16_round(1.0f + 0x3p-8f));
    CHECK(gpt2rt__bf16_round(-(1.0f + 0x1p-8f + 0x1p-20f)) == 0xBF81, "just above a tie rounds away: 0x%04x",
          gpt2rt__bf16_round(-(1.0f + 0x1p-8f + 0x1p-20f)));
    CHECK(gpt2rt__bf16_round(FLT_MAX) == 0x7F80 && gpt2rt__bf16_round(-INFINITY) == 0xFF80, "overflow: 0x%04x",
          gpt2rt__bf16_round(FLT_MAX));
    float nan = f_of(0x7F800001u); /* a NaN whose payload sits in the low half only */
    CHECK(isnan(gpt2rt__bf16_widen(gpt2rt__bf16_round(nan))), "NaN became 0x%04x", gpt2rt__bf16_round(nan));
    uint64_t s = 11;
    int bad = 0, ties = 0;
    for (int i = 0; i < 100000; i++) {
        float x = (float)((harness_rng_uniform(&s) - 0.5) * pow(2.0, (double)(int)(harness_rng_next(&s) % 40) - 20));
        float r = gpt2rt__bf16_widen(gpt2rt__bf16_round(x));
        uint32_t lo = u_of(x) & 0xFFFF0000u; /* truncation, and the next bf16 away from 0 */
        float a = f_of(lo), b = f_of(lo + 0x10000u);
        double da = fabs((double)x - a), db = fabs((double)x - b);
        float want = da < db ? a : db < da ? b : ((lo >> 16) & 1) ? b : a;
        ties += da == db;
        if (u_of(r) != u_of(want) || fabs((double)r - x) > 0x1p-8 * fabs((double)x)) bad++;
    }
    CHECK(bad == 0, "%d of 100000 values not the nearest bf16 (ties to even) within 2^-8 (%d ties)", bad, ties);
}

/* ---- kernels ---- */
/* AVX-512 BF16 against the others: x = hi + lo within 2^-16 |x| (hi within 2^-8 |x|, lo
   rounds that remainder within 2^-8 of itself); every product w*hi, w*lo is exact in fp32
   (8 x 8 significant bits); the 2K terms and the others' K products summed in fp32 in
   any order carry at most 2K and K roundings of 2^-24 each of sum |w x|: together
   (2^-16 + 3K 2^-24) sum |w x|. A denormal remainder flushed (DAZ) adds under 2^-126 a term. */
static double tol_bf16_path(double sum_abs, int64_t K) { return sum_abs * (0x1p-16 + 3.0 * (double)K * 0x1p-24) + (double)K * 0x1p-126; }

/* 1 when this file's compiler fuses a*b+c in one expression (clang's default fp-contract=on
   with FMA): then gpt2rt__cpu_dot (fp32) rounds each product differently from the bf16 paths */
static int fuses(void) {
    volatile float a = 1.0f + 0x1p-12f;
    float p = a * a - 1.0f; /* exact: 2^-11 + 2^-24; a*a rounded first: 2^-11 */
    return p != 0x1p-11f;
}

static void test_kernels(void) {
    const int64_t Ks[] = {1, 15, 16, 37, 64, 100, 768, 3072};
    uint64_t s = 3;
    int fns = 0;
    gpt2rt__bf16_rows_fn paths[3] = {NULL, NULL, NULL};
    const char *names[3] = {"AVX2", "AVX-512F", "AVX-512 BF16"};
#if GPT2RT__SG_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) paths[0] = gpt2rt__bf16_rows_avx2;
    if (__builtin_cpu_supports("avx512f")) paths[1] = gpt2rt__bf16_rows_avx512;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16")) paths[2] = gpt2rt__bf16_rows_avx512bf16;
#endif
    for (int p = 0; p < 3; p++) if (!paths[p]) SKIP("%s: this CPU does not have it", names[p]);
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        int64_t K = Ks[ki], R = 9; /* 9 rows: two groups of four and one left over */
        float *x = (float *)malloc(sizeof(float) * (size_t)K), *wf = (float *)malloc(sizeof(float) * (size_t)(R * K));
        uint16_t *w = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(R * K));
        for (int64_t i = 0; i < K; i++) x[i] = (float)(harness_rng_uniform(&s) * 2 - 1) * (i % 7 == 3 ? 30.0f : 1.0f);
        for (int64_t i = 0; i < R * K; i++) {
            w[i] = gpt2rt__bf16_round((float)(harness_rng_uniform(&s) * 2 - 1) * 0.05f);
            wf[i] = gpt2rt__bf16_widen(w[i]);
        }
        float yc[9], yf[9], yp[9];
        gpt2rt__bf16_rows_c(yc, x, w, K, R);
        gpt2rt__cpu_matvec_forward(yf, x, wf, NULL, 1, K, R, 1); /* fp32 product, widened weights */
        if (fuses()) SKIP("K=%lld: portable bf16 == fp32 matrix-vector: this compiler fuses gpt2rt__cpu_dot's "
                          "products", (long long)K);
        else CHECK(memcmp(yc, yf, sizeof yc) == 0, "K=%lld: portable bf16 != fp32 matrix-vector on the widened "
                   "weights", (long long)K);
        int bad_ref = 0;
        for (int64_t r = 0; r < R; r++) {
            double exact = 0, sa = 0;
            for (int64_t i = 0; i < K; i++) { exact += (double)x[i] * wf[r * K + i]; sa += fabs((double)x[i] * wf[r * K + i]); }
            /* K fp32 roundings (products and sums) of at most 2^-24 of sum |w x| each */
            if (fabs(yc[r] - exact) > (double)K * 0x1p-24 * sa + 1e-30) bad_ref++;
        }
        CHECK(bad_ref == 0, "K=%lld: %d rows off the double reference by more than K 2^-24 sum|wx|", (long long)K, bad_ref);
        for (int p = 0; p < 3; p++) {
            if (!paths[p]) continue;
            fns++;
            paths[p](yp, x, w, K, R);
            if (p < 2) {
                CHECK(memcmp(yp, yc, sizeof yc) == 0, "K=%lld: %s differs from portable C (want bitwise)", (long long)K,
                      names[p]);
                continue;
            }
            int bad = 0;
            double worst = 0;
            for (int64_t r = 0; r < R; r++) {
                double sa = 0;
                for (int64_t i = 0; i < K; i++) sa += fabs((double)x[i] * wf[r * K + i]);
                double e = fabs((double)yp[r] - yc[r]), t = tol_bf16_path(sa, K);
                if (!(e <= t)) bad++;
                if (e / t > worst) worst = e / t;
            }
            CHECK(bad == 0, "K=%lld: AVX-512 BF16 off portable beyond tolerance in %d rows (worst %.2f of it)",
                  (long long)K, bad, worst);
        }
        free(x); free(w); free(wf);
    }
    /* the matrix-vector product: threads own output blocks, never K: 1 == 2 threads */
    int64_t N = 3, IC = 200, OC = 300;
    float *in = (float *)malloc(sizeof(float) * (size_t)(N * IC)), *b = (float *)malloc(sizeof(float) * (size_t)OC);
    float *o1 = (float *)malloc(sizeof(float) * (size_t)(N * OC)), *o2 = (float *)malloc(sizeof(float) * (size_t)(N * OC));
    uint16_t *w = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(OC * IC));
    for (int64_t i = 0; i < N * IC; i++) in[i] = (float)(harness_rng_uniform(&s) - 0.5);
    for (int64_t i = 0; i < OC; i++) b[i] = (float)(harness_rng_uniform(&s) - 0.5);
    for (int64_t i = 0; i < OC * IC; i++) w[i] = gpt2rt__bf16_round((float)(harness_rng_uniform(&s) - 0.5));
    gpt2rt__cpu_matvec_bf16(o1, in, w, b, N, IC, OC, 1);
    gpt2rt__cpu_matvec_bf16(o2, in, w, b, N, IC, OC, 2);
    CHECK(memcmp(o1, o2, sizeof(float) * (size_t)(N * OC)) == 0, "matvec_bf16: 1 thread != 2 threads");
    float *m1 = (float *)malloc(sizeof(float) * (size_t)(3 * OC * 4)), *m2 = (float *)malloc(sizeof(float) * (size_t)(3 * OC * 4));
    float *in12 = (float *)malloc(sizeof(float) * (size_t)(12 * IC));
    for (int64_t i = 0; i < 12 * IC; i++) in12[i] = in[i % (N * IC)] * (float)(1 + i / (N * IC));
    gpt2rt__cpu_matvec_bf16(m1, in12, w, b, 12, IC, OC, 1); /* 12 rows: the prefill's path */
    gpt2rt__cpu_matvec_bf16(m2, in12, w, b, 12, IC, OC, 2);
    CHECK(memcmp(m1, m2, sizeof(float) * (size_t)(12 * OC)) == 0, "matvec_bf16, 12 rows: 1 thread != 2 threads");
    free(m1); free(m2); free(in12);
    float y0[300];
    gpt2rt__bf16_rows_pick(0)(y0, in + IC, w, IC, OC); /* row 1, by the few-rows path alone */
    int bias_bad = 0;
    for (int64_t o = 0; o < OC; o++) bias_bad += u_of(o1[OC + o]) != u_of(y0[o] + b[o]);
    CHECK(bias_bad == 0, "matvec_bf16: %d outputs are not dot + bias", bias_bad);
    free(in); free(b); free(o1); free(o2); free(w);
    printf("kernels: %d SIMD path runs\n", fns);
}

/* ---- the context on the Hugging Face fixture ---- */
typedef struct steps { int n; int32_t tok[MAXSTEP]; float *logits; int64_t V; } steps;
static int on_token(void *user, int row, int32_t token, const float *logits, int64_t n) {
    steps *st = (steps *)user;
    if (row != 0 || st->n >= MAXSTEP || n != st->V) return 1;
    memcpy(st->logits + (int64_t)st->n * n, logits, (size_t)n * sizeof(float));
    st->tok[st->n++] = token;
    return 0;
}

static gpt2rt_config fixture_cfg(int bf16, int threads) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    char err[512];
    if (gpt2rt_config_load(&c, FIX, err, sizeof err) != GPT2RT_OK) { printf("%s\n", err); exit(2); }
    c.batch_size = 1; c.seq_len = 8; c.kv_batch = 1; c.kv_len = c.max_seq_len;
    c.inference = 1; c.n_threads = threads; c.backend = GPT2RT_BACKEND_CPU;
    if (bf16) c.inference_weights = GPT2RT_PRECISION_BF16;
    return c;
}

static gpt2rt_ctx *make(const gpt2rt_config *c) {
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, c) != GPT2RT_OK) { printf("create: %s\n", gpt2rt_last_error(ctx)); exit(2); }
    return ctx;
}

static void run(gpt2rt_ctx *ctx, const int32_t *prompt, int plen, steps *st) {
    int32_t row[64];
    memcpy(row, prompt, sizeof(int32_t) * (size_t)plen);
    int64_t len = plen;
    gpt2rt_sample o;
    memset(&o, 0, sizeof o);
    o.max_new_tokens = MAXSTEP; o.eot = -1; o.on_token = on_token; o.user = st;
    st->n = 0;
    CHECK_OK(ctx, gpt2rt_generate(ctx, &o, 1, row, 64, &len));
}

static void test_fixture(void) {
    gpt2rt_config c32 = fixture_cfg(0, 2), c16 = fixture_cfg(1, 2), c16one = fixture_cfg(1, 1);
    gpt2rt_ctx *a = make(&c32), *b = make(&c16), *b1 = make(&c16one), *r = make(&c32);
    CHECK_OK(a, gpt2rt_weights_load(a, FIX "model.safetensors"));
    CHECK_OK(b, gpt2rt_weights_load(b, FIX "model.safetensors"));
    CHECK_OK(b1, gpt2rt_weights_load(b1, FIX "model.safetensors"));
    /* every weight: exactly its fp32 value rounded to nearest even; r gets the rounded ones */
    int bad = 0;
    int64_t total = 0, changed = 0;
    for (int i = 0; i < gpt2rt_param_count(a); i++) {
        gpt2rt_param_info in;
        gpt2rt_param_info_get(a, i, &in);
        float *wa = (float *)malloc(sizeof(float) * (size_t)in.numel), *wb = (float *)malloc(sizeof(float) * (size_t)in.numel);
        CHECK_OK(a, gpt2rt_param_read(a, in.name, GPT2RT_PARAM_VALUE, wa, in.numel));
        CHECK_OK(b, gpt2rt_param_read(b, in.name, GPT2RT_PARAM_VALUE, wb, in.numel));
        for (int64_t j = 0; j < in.numel; j++) {
            bad += u_of(wb[j]) != u_of(gpt2rt__bf16_widen(gpt2rt__bf16_round(wa[j])));
            changed += wb[j] != wa[j];
        }
        total += in.numel;
        CHECK_OK(r, gpt2rt_param_write(r, in.name, wb, in.numel));
        free(wa); free(wb);
    }
    CHECK(bad == 0 && changed > total / 2, "load: %d of %lld weights are not their bf16 rounding (%lld changed)", bad,
          (long long)total, (long long)changed);

    int64_t V = c32.vocab_size, C = c32.n_embd, L = c32.n_layer;
    steps s32 = {0, {0}, NULL, V}, s16 = s32, s16one = s32, sr = s32;
    s32.logits = (float *)calloc((size_t)(MAXSTEP * V), 4); s16.logits = (float *)calloc((size_t)(MAXSTEP * V), 4);
    s16one.logits = (float *)calloc((size_t)(MAXSTEP * V), 4); sr.logits = (float *)calloc((size_t)(MAXSTEP * V), 4);
    /* bf16 against fp32: every weight moved by at most 2^-8 of itself (half an ulp of 8
       significant bits), so each product's output by at most 2^-8 sum |w x| of its K terms;
       through the 4 products of each of L layers and the head (4L + 1 = 9), with LayerNorm's
       rescaling, take twice that per product: (4L + 1) * 2 * 2^-8 = 7% of the largest |logit|
       (a worst case: the errors of 64..256 terms mostly cancel, measured about 0.35%) */
    double tol_w = (double)(4 * L + 1) * 2.0 * 0x1p-8;
    /* bf16 path against fp32 on the same rounded weights: tol_bf16_path's relative part at
       K = 4C per product, same count and factor (the prefill of r takes 7.2's blocked
       product: fp32 reassociation, inside the 3K 2^-24 term) */
    double tol_k = (double)(4 * L + 1) * 2.0 * (0x1p-16 + 3.0 * 4.0 * (double)C * 0x1p-24);
    const int32_t prompts[3][12] = {{1, 2, 3}, {500, 17, 99, 4, 250, 31, 7, 640, 12, 3, 88, 901}, {999}};
    const int plens[3] = {3, 12, 1};
    int decided = 0, compared = 0;
    for (int p = 0; p < 3; p++) {
        run(a, prompts[p], plens[p], &s32);
        run(b, prompts[p], plens[p], &s16);
        run(b1, prompts[p], plens[p], &s16one);
        run(r, prompts[p], plens[p], &sr);
        CHECK(s16.n == MAXSTEP && s32.n == MAXSTEP && sr.n == MAXSTEP, "prompt %d: %d, %d, %d tokens", p, s16.n, s32.n, sr.n);
        CHECK(s16one.n == s16.n && memcmp(s16one.tok, s16.tok, sizeof s16.tok) == 0 &&
              memcmp(s16one.logits, s16.logits, sizeof(float) * (size_t)(MAXSTEP * V)) == 0,
              "prompt %d: 1 thread != 2 threads (ids or logits)", p);
        int k = 0, ids_bad = 0, lg_bad = 0, rk_bad = 0;
        double worst_w = 0, worst_k = 0;
        for (; k < MAXSTEP && k < s16.n && s16.tok[k] == s32.tok[k]; k++) { /* the same prefix on both sides */
            const float *l32 = s32.logits + k * V, *l16 = s16.logits + k * V;
            double e = rel_err(l16, l32, V);
            if (e > worst_w) worst_w = e;
            lg_bad += !(e <= tol_w);
        }
        /* the first divergence (if any) must be a near tie of the fp32 logits: a gap above
           twice the bound cannot swap the two */
        if (k < MAXSTEP && k < s16.n) {
            const float *l32 = s32.logits + k * V;
            double top = -INFINITY, second = -INFINITY, mx = 0;
            for (int64_t v = 0; v < V; v++) {
                if (l32[v] > top) { second = top; top = l32[v]; } else if (l32[v] > second) second = l32[v];
                if (fabs(l32[v]) > mx) mx = fabs(l32[v]);
            }
            ids_bad += top - second > 2.0 * tol_w * mx;
        } else decided++;
        for (int j = 0; j < MAXSTEP && j < sr.n && sr.tok[j] == s16.tok[j]; j++) {
            double e = rel_err(s16.logits + j * V, sr.logits + j * V, V);
            if (e > worst_k) worst_k = e;
            rk_bad += !(e <= tol_k);
            compared++;
        }
        CHECK(lg_bad == 0 && ids_bad == 0, "prompt %d: bf16 vs fp32 over %d equal ids: %d steps beyond %.3g (worst "
              "%.3g), a divergence at a clear gap: %d", p, k, lg_bad, tol_w, worst_w, ids_bad);
        CHECK(rk_bad == 0, "prompt %d: bf16 vs fp32 on the rounded weights: %d steps beyond %.3g (worst %.3g)", p,
              rk_bad, tol_k, worst_k);
        printf("prompt %d: %d steps with fp32's ids, logits within %.2e of fp32 (bound %.2e), %.2e of the rounded "
               "fp32 model (bound %.2e)\n", p, k, worst_w, tol_w, worst_k, tol_k);
    }
    CHECK(compared >= MAXSTEP, "only %d steps compared with the rounded fp32 model", compared);
    free(s32.logits); free(s16.logits); free(s16one.logits); free(sr.logits);
    gpt2rt_free(a); gpt2rt_free(b); gpt2rt_free(b1); gpt2rt_free(r);
}

/* ---- the plan: 2 bytes a weight, planned == allocated ---- */
static void test_plan(void) {
    gpt2rt_config c32 = fixture_cfg(0, 2), c16 = fixture_cfg(1, 2);
    gpt2rt_memory_plan p32, p16, pa;
    CHECK(gpt2rt_plan(&c32, &p32) == GPT2RT_OK && gpt2rt_plan(&c16, &p16) == GPT2RT_OK, "plan: %s %s", p32.error,
          p16.error);
    uint64_t w16 = p16.bytes[0][GPT2RT_MEM_WEIGHTS], w32 = p32.bytes[0][GPT2RT_MEM_WEIGHTS];
    CHECK(w16 == (uint64_t)p16.n_params_padded * 2 && w32 == (uint64_t)p32.n_params_padded * 4,
          "weights: bf16 %llu bytes, fp32 %llu, for %lld parameters (want 2 and 4 bytes each)", (unsigned long long)w16,
          (unsigned long long)w32, (long long)p16.n_params_padded);
    CHECK(p16.bytes[0][GPT2RT_MEM_MASTER] == 0 && p16.bytes[0][GPT2RT_MEM_GRADS] == 0, "bf16: master %llu, grads %llu",
          (unsigned long long)p16.bytes[0][GPT2RT_MEM_MASTER], (unsigned long long)p16.bytes[0][GPT2RT_MEM_GRADS]);
    /* the cache arena grows by the widened vectors only: 13C floats, rounded up to 64 bytes */
    uint64_t wvec = ((uint64_t)13 * (uint64_t)c16.n_embd * 4 + 63) / 64 * 64;
    CHECK(p16.bytes[0][GPT2RT_MEM_KVCACHE] == p32.bytes[0][GPT2RT_MEM_KVCACHE] + wvec, "kv cache: %llu vs %llu + %llu",
          (unsigned long long)p16.bytes[0][GPT2RT_MEM_KVCACHE], (unsigned long long)p32.bytes[0][GPT2RT_MEM_KVCACHE],
          (unsigned long long)wvec);
    char buf[8192];
    gpt2rt_plan_format(&p16, buf, sizeof buf);
    CHECK(has(buf, "bf16 weights (2 bytes each)"), "plan table: %s", buf);
    gpt2rt_plan_format(&p32, buf, sizeof buf);
    CHECK(!has(buf, "bf16 weights"), "fp32 plan table mentions bf16: %s", buf);
    harness_counter k;
    memset(&k, 0, sizeof k);
    c16.alloc = harness_count_alloc; c16.free = harness_count_free; c16.alloc_user = &k;
    gpt2rt_ctx *ctx = make(&c16);
    CHECK_OK(ctx, gpt2rt_plan_allocated(ctx, &pa));
    int bad = 0;
    for (int m = 0; m < GPT2RT_MEM_COUNT; m++)
        bad += p16.bytes[0][m] != pa.bytes[0][m] || k.bytes[m] != p16.bytes[0][m];
    CHECK(bad == 0, "bf16: %d categories planned != allocated (weights planned %llu, hook %llu)", bad,
          (unsigned long long)p16.bytes[0][GPT2RT_MEM_WEIGHTS], (unsigned long long)k.bytes[GPT2RT_MEM_WEIGHTS]);
    gpt2rt_config got = gpt2rt_config_get(ctx);
    CHECK(got.inference_weights == GPT2RT_PRECISION_BF16, "config_get: inference_weights = %d", (int)got.inference_weights);
    gpt2rt_free(ctx);
    CHECK(k.live == 0, "%lld allocations leaked", (long long)k.live);
    gpt2rt_config d = fixture_cfg(0, 1);
    gpt2rt_ctx *dc = make(&d);
    got = gpt2rt_config_get(dc);
    CHECK(got.inference_weights == GPT2RT_PRECISION_FP32, "default: inference_weights = %d (want FP32)",
          (int)got.inference_weights);
    gpt2rt_free(dc);
}

/* ---- huge pages (gpt2rt.h 1.3): the weights' arena asks Linux for them ----
   Linux reports per mapping in /proc/self/smaps whether huge pages may back it
   (THPeligible); with THP in "madvise" mode (this VM, most distributions) a mapping is
   eligible only once madvise(MADV_HUGEPAGE) named it, so without the advice the line
   reads 0. Skips where THP is off or absent, or the kernel has no such line. */
#if defined(__linux__) && !defined(GPT2RT_NO_HUGEPAGES) && !defined(GPT2RT__ASAN)
static int thp_eligible(const void *addr) { /* 1, 0, or -1: no line for addr's mapping */
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0, got = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        if (sscanf(line, "%llx-%llx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)addr >= a && (uintptr_t)addr < b;
            continue;
        }
        int v;
        if (in && sscanf(line, "THPeligible: %d", &v) == 1) { got = v; break; }
    }
    fclose(f);
    return got;
}

static void plain_malloc_not_eligible(const char *mode, const char *when) {
    if (!strstr(mode, "[madvise]")) return;
    unsigned char *m = (unsigned char *)malloc((size_t)16 << 20);
    if (!m) return;
    memset(m, 1, (size_t)16 << 20);
    int e = thp_eligible(m + (8u << 20));
    CHECK(e == 0, "a plain malloc%s reads THPeligible %d in madvise mode (want 0)", when, e);
    free(m);
}

static void test_hugepages(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char mode[128] = "";
    int have = f && fgets(mode, sizeof mode, f) && !strstr(mode, "[never]");
    if (f) fclose(f);
    mode[strcspn(mode, "\n")] = 0;
    if (!have) { SKIP("huge pages: transparent huge pages are off or absent here (%s)", mode[0] ? mode : "no sysfs file"); return; }
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        gpt2rt_config c = fixture_cfg(bf16, 1);
        c.vocab_size = 50257; /* wte alone 3.2M parameters: 6.4 MB in bf16, whole 2 MiB pages inside */
        gpt2rt_ctx *ctx = make(&c);
        const unsigned char *w = (const unsigned char *)ctx->arena[GPT2RT_MEM_WEIGHTS];
        const unsigned char *h = (const unsigned char *)(((uintptr_t)w + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1));
        int e = thp_eligible(h);
        if (e < 0) SKIP("huge pages: /proc/self/smaps has no THPeligible line for the weights (older kernel)");
        else CHECK(e == 1, "%s weights at %p: THPeligible %d (want 1: the arena asked for huge pages; THP mode %s)",
                   bf16 ? "bf16" : "fp32", (const void *)h, e, mode);
        gpt2rt_free(ctx);
    }
    /* the control: a plain malloc of the same size is not eligible in "madvise" mode, so the
       checks above can fail */
    plain_malloc_not_eligible(mode, "");
    /* a training context: every planned arena of at least 2 MiB (but a KV cache) asks too
       (gradients, moments, activations: a step's backward and AdamW walk them) */
    {
        gpt2rt_config c = fixture_cfg(0, 1);
        c.vocab_size = 50257;
        c.inference = 0; c.kv_batch = 0; c.kv_len = 0;
        c.batch_size = 4; c.seq_len = 64;
        gpt2rt_memory_plan p;
        if (gpt2rt_plan(&c, &p) != GPT2RT_OK) { printf("plan: %s\n", p.error); exit(2); }
        gpt2rt_ctx *ctx = make(&c);
        int asked = 0;
        for (int k = 0; k < GPT2RT_MEM_COUNT; k++) {
            uintptr_t a = (uintptr_t)ctx->arena[k], h = (a + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1);
            if (!a || k == GPT2RT_MEM_KVCACHE || p.bytes[0][k] < (2u << 20)) continue; /* small arenas stay on malloc */
            int e = thp_eligible((const void *)h);
            if (e < 0) continue;
            asked++;
            CHECK(e == 1, "training context's %s arena (%.1f MiB): THPeligible %d (want 1; THP mode %s)",
                  gpt2rt_mem_name((gpt2rt_mem)k), (double)p.bytes[0][k] / 1048576.0, e, mode);
        }
        CHECK(asked >= 4, "a training context has %d arenas of 2 MiB or more (want weights, gradients, moments, "
              "activations: >= 4)", asked);
        gpt2rt_free(ctx);
    }
    /* and the advice left with the arenas' own mappings: freed arenas on the heap would have
       left it on memory the next malloc reuses (glibc serves 16 MiB from the heap once a
       large free has raised its mmap threshold) */
    plain_malloc_not_eligible(mode, " after a training context's arenas were freed");
}
#else
static void test_hugepages(void) {
    SKIP("huge pages: not Linux, GPT2RT_NO_HUGEPAGES, or an ASan build (its arenas stay on malloc)");
}
#endif

/* ---- refusals ---- */
static void refused(gpt2rt_config c, gpt2rt_result want, const char *a, const char *b, const char *what) {
    gpt2rt_ctx *ctx = NULL;
    gpt2rt_result r = gpt2rt_create(&ctx, &c);
    const char *m = gpt2rt_last_error(ctx);
    CHECK(r == want && has(m, a) && has(m, b), "%s: %s (%s), want %s naming '%s', '%s'", what, gpt2rt_result_string(r),
          m ? m : "", gpt2rt_result_string(want), a, b);
    gpt2rt_free(ctx);
}

static void test_refusals(void) {
    gpt2rt_config c = fixture_cfg(1, 2);
    c.inference = 0;
    refused(c, GPT2RT_ERR_INVALID_ARGUMENT, "inference_weights = BF16", "inference = 0", "training context");
    c = fixture_cfg(1, 2);
    c.inference_weights = GPT2RT_PRECISION_FP16;
    refused(c, GPT2RT_ERR_INVALID_ARGUMENT, "inference_weights = 3", "BF16", "FP16");
    c = fixture_cfg(1, 2);
    c.backend = GPT2RT_BACKEND_CUDA;
    refused(c, GPT2RT_ERR_NOT_IMPLEMENTED, "inference_weights = BF16", "GPT2RT_BACKEND_CPU", "CUDA");
    gpt2rt_config cp;
    memset(&cp, 0, sizeof cp);
    cp.input = GPT2RT_INPUT_PATCHES; cp.head = GPT2RT_HEAD_REGRESSION; cp.n_layer = 1; cp.n_head = 2; cp.n_embd = 16; cp.seq_len = 32;
    cp.inference = 1; cp.inference_weights = GPT2RT_PRECISION_BF16; cp.backend = GPT2RT_BACKEND_CPU;
    refused(cp, GPT2RT_ERR_NOT_IMPLEMENTED, "inference_weights = BF16", "PATCHES", "patches");

    c = fixture_cfg(1, 2);
    gpt2rt_ctx *ctx = make(&c);
    int32_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {2, 3, 4, 5, 6, 7, 8, 9};
    float loss;
    gpt2rt_result r = gpt2rt_forward(ctx, x, y, &loss);
    CHECK(r == GPT2RT_ERR_NOT_IMPLEMENTED && has(gpt2rt_last_error(ctx), "gpt2rt_forward") &&
          has(gpt2rt_last_error(ctx), "inference_weights = BF16"), "forward: %s (%s)", gpt2rt_result_string(r),
          gpt2rt_last_error(ctx));
    r = gpt2rt_weights_save(ctx, "build/test_infer_bf16_never");
    CHECK(r == GPT2RT_ERR_NOT_IMPLEMENTED && has(gpt2rt_last_error(ctx), "gpt2rt_weights_save"), "save: %s (%s)",
          gpt2rt_result_string(r), gpt2rt_last_error(ctx));
    r = gpt2rt_step(ctx, x, y, NULL);
    CHECK(r == GPT2RT_ERR_STATE && has(gpt2rt_last_error(ctx), "inference = 1"), "step: %s (%s)",
          gpt2rt_result_string(r), gpt2rt_last_error(ctx));
    steps st = {0, {0}, NULL, c.vocab_size}; /* and it still generates */
    st.logits = (float *)calloc((size_t)(MAXSTEP * c.vocab_size), 4);
    run(ctx, x, 3, &st);
    CHECK(st.n == MAXSTEP, "after the refusals: %d tokens generated", st.n);
    free(st.logits);
    gpt2rt_free(ctx);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_round();
    test_kernels();
    test_fixture();
    test_plan();
    test_hugepages();
    test_refusals();
    return harness_finish();
}
