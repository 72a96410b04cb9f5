/* Generation with the KV cache (gpt2rt_generate):
   - the logits of every step equal a full forward over the prefix (TOL_CACHE relative),
     for several prompts of different lengths at once, greedy and sampled, with a
     prompt longer than one prefill pass;
   - greedy continuations equal Hugging Face transformers' generate (greedy,
     use_cache) on the tiny model of tests/fixtures/hf_tiny: the ids in
     tests/fixtures/hf_tiny/generate.txt, written by tools/gen_generate_fixture.py;
   - top_k = 1 is greedy; top_k and top_p never sample outside their set; the same
     seed gives the same ids (whatever the thread count), another seed others;
   - rows stop at eot, max_new_tokens, row_cap, kv_len and on the callback's word;
   - bad options and configs are refused with the numbers; the cache is planned,
     shown, and allocated through the hooks;
   - op by op, the decode step's attention over the cache is bitwise the forward's at
     every position (head sizes with a tail past 16, both forward paths, one pass or a
     token a pass, 1 and 3 threads). */
/* every op splits over the threads whatever its size (by default an op too small to pay
   for a second thread runs on one), so the checks across thread counts below compare
   split work, not one thread's with itself */
#ifndef GPT2RT_CPU_WORK_PER_THREAD
#define GPT2RT_CPU_WORK_PER_THREAD 0
#endif
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

/* cache vs full recompute: the same products summed in another order (matrix-vector
   steps against the full forward's blocked matrix products), so each side's logits carry
   fp32 eps x sqrt(4C = 256, the longest reduction) = 1.9e-6 per layer: 2 layers x 2 sides
   = 7.6e-6 of the largest |logit|; measured 1.4e-6 */
#define TOL_CACHE 7.6e-6

#define FIX "tests/fixtures/hf_tiny/"
#define MAXB 4
#define MAXT 512

/* ---- the per-step logits, as the callback sees them ---- */
typedef struct record {
    int64_t V;
    int n[MAXB];          /* tokens seen per row */
    int32_t tok[MAXB][MAXT];
    float *logits[MAXB];  /* (MAXT, V) per row */
    int stop_row, stop_after; /* the callback ends stop_row after that many tokens (-1: never) */
    int calls;
} record;

static void record_init(record *r, int64_t V) {
    memset(r, 0, sizeof *r);
    r->V = V;
    r->stop_row = -1;
    for (int b = 0; b < MAXB; b++) r->logits[b] = (float *)calloc((size_t)(MAXT * V), sizeof(float));
}

static void record_reset(record *r) {
    memset(r->n, 0, sizeof r->n);
    r->calls = 0;
}

static void record_free(record *r) {
    for (int b = 0; b < MAXB; b++) free(r->logits[b]);
}

static int on_token(void *user, int row, int32_t token, const float *logits, int64_t n_logits) {
    record *r = (record *)user;
    r->calls++;
    if (row < 0 || row >= MAXB || n_logits != r->V || r->n[row] >= MAXT) return 1;
    memcpy(r->logits[row] + (int64_t)r->n[row] * r->V, logits, (size_t)n_logits * sizeof(float));
    r->tok[row][r->n[row]++] = token;
    return row == r->stop_row && r->n[row] >= r->stop_after;
}

static gpt2rt_ctx *make(gpt2rt_config c) {
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, &c) != GPT2RT_OK) { printf("create: %s\n", gpt2rt_last_error(ctx)); exit(2); }
    return ctx;
}

/* Every step's logits against a full forward of the finished row: ctx runs (1,T)
   forwards, and the logits at position p depend on tokens [0, p] only (causal), so
   one forward of the row padded with zeros gives every step's reference. Returns
   the worst relative error over the rows and steps. */
static double cache_vs_recompute(gpt2rt_ctx *ctx, const record *rec, int B, const int32_t *tokens, int64_t row_cap,
                                 const int64_t *len0, const int64_t *lens, int *steps) {
    gpt2rt_config c = gpt2rt_config_get(ctx);
    int64_t T = c.seq_len, V = c.vocab_size, worst_row = 0;
    int32_t *in = (int32_t *)calloc((size_t)T, sizeof(int32_t));
    float *full = (float *)malloc(sizeof(float) * (size_t)(T * V));
    double worst = 0;
    *steps = 0;
    for (int b = 0; b < B; b++) {
        memset(in, 0, (size_t)T * sizeof(int32_t));
        for (int64_t i = 0; i < lens[b] && i < T; i++) in[i] = tokens[b * row_cap + i];
        if (gpt2rt_forward(ctx, in, NULL, NULL) != GPT2RT_OK || gpt2rt_logits(ctx, full, T * V) != GPT2RT_OK) {
            printf("forward: %s\n", gpt2rt_last_error(ctx));
            exit(2);
        }
        CHECK(rec->n[b] == lens[b] - len0[b], "row %d: %d callbacks for %lld new tokens", b, rec->n[b],
              (long long)(lens[b] - len0[b]));
        for (int i = 0; i < rec->n[b]; i++) { /* token len0+i was drawn from the logits at position len0+i-1 */
            int64_t p = len0[b] + i - 1;
            double e = rel_err(rec->logits[b] + (int64_t)i * V, full + p * V, V);
            if (e > worst) { worst = e; worst_row = b; }
            (*steps)++;
        }
    }
    (void)worst_row;
    free(in);
    free(full);
    return worst;
}

/* the fixture: max_new_tokens, eos, scale, then prompt / output line pairs */
typedef struct fixture {
    int max_new, eos, n;
    float scale;
    int plen[8], olen[8];
    int32_t prompt[8][64], output[8][128];
} fixture;

static int read_ids(char *s, int32_t *out, int cap) {
    int n = 0;
    for (char *t = strtok(s, " \n"); t && n < cap; t = strtok(NULL, " \n")) out[n++] = (int32_t)atoi(t);
    return n;
}

static int load_fixture(fixture *f) {
    FILE *fp = fopen(FIX "generate.txt", "r");
    if (!fp) return 0;
    char line[4096];
    memset(f, 0, sizeof *f);
    while (fgets(line, sizeof line, fp)) {
        if (!strncmp(line, "max_new_tokens ", 15)) f->max_new = atoi(line + 15);
        else if (!strncmp(line, "eos ", 4)) f->eos = atoi(line + 4);
        else if (!strncmp(line, "scale ", 6)) f->scale = (float)atof(line + 6);
        else if (!strncmp(line, "prompt ", 7) && f->n < 8) f->plen[f->n] = read_ids(line + 7, f->prompt[f->n], 64);
        else if (!strncmp(line, "output ", 7) && f->n < 8) { f->olen[f->n] = read_ids(line + 7, f->output[f->n], 128); f->n++; }
    }
    fclose(fp);
    return f->n > 0 && f->max_new > 0 && f->scale > 0;
}

/* what the fixture's script does to the weights: wpe and every c_attn weight times scale */
static void scale_weights(gpt2rt_ctx *ctx, float scale) {
    for (int i = 0; i < gpt2rt_param_count(ctx); i++) {
        gpt2rt_param_info in;
        gpt2rt_param_info_get(ctx, i, &in);
        size_t nl = strlen(in.name);
        if (strcmp(in.name, "transformer.wpe.weight") && !(nl > 18 && !strcmp(in.name + nl - 18, "attn.c_attn.weight")))
            continue;
        float *w = (float *)malloc(sizeof(float) * (size_t)in.numel);
        gpt2rt_param_read(ctx, in.name, GPT2RT_PARAM_VALUE, w, in.numel);
        for (int64_t j = 0; j < in.numel; j++) w[j] *= scale;
        CHECK_OK(ctx, gpt2rt_param_write(ctx, in.name, w, in.numel));
        free(w);
    }
}

/* the nucleus of softmax(logits / temp) restricted to the top_k (0: all), as
   Hugging Face's TopK then TopP warpers define it; in[v] = 1 for its members */
typedef struct pv { double p; int id; } pv;
static int pv_cmp(const void *a, const void *b) {
    const pv *x = (const pv *)a, *y = (const pv *)b;
    return x->p != y->p ? (x->p > y->p ? -1 : 1) : x->id - y->id;
}
static void allowed_set(const float *logits, int64_t V, double temp, int top_k, double top_p, char *in) {
    if (V <= 0 || V > (1 << 24)) return;
    pv *a = (pv *)malloc(sizeof(pv) * (size_t)V);
    double mx = -INFINITY, tot = 0;
    for (int64_t v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
    for (int64_t v = 0; v < V; v++) { a[v].p = exp(((double)logits[v] - mx) / temp); a[v].id = (int)v; }
    qsort(a, (size_t)V, sizeof *a, pv_cmp);
    int64_t n = top_k > 0 && top_k < V ? top_k : V;
    for (int64_t i = 0; i < n; i++) tot += a[i].p;
    double acc = 0;
    int64_t keep = n;
    for (int64_t i = 0; i < n; i++) { acc += a[i].p; if (acc >= top_p * tot * (1 - 1e-9)) { keep = i + 1; break; } }
    memset(in, 0, (size_t)V);
    for (int64_t i = 0; i < keep; i++) in[a[i].id] = 1;
    free(a);
}

static int has(const char *msg, const char *s) { return strstr(msg, s) != NULL; }

/* ---- 8. the decode step's attention is bitwise the forward's, op by op ----
   gpt2rt__cpu_attention_cached (one query against the cached keys) against
   gpt2rt__cpu_attention_forward (blocks of queries against a transposed key tile, or a
   query at a time past the tile) on the same qkv: every output float the same bits, for
   head sizes with and without a tail past the blocks of 16, both forward paths, the
   whole prefix in one pass and a token at a time, 1 and 3 threads. Inputs hold zeros
   and -0 (zero products of either sign in every sum). Returns the differing floats. */
static int64_t attention_cached_vs_forward(int64_t B, int64_t T, int64_t C, int64_t NH, int one_by_one, int nt) {
    int64_t n = B * T * C, n3 = 3 * n;
    float *qkv = (float *)malloc(sizeof(float) * (size_t)n3), *out = (float *)malloc(sizeof(float) * (size_t)n),
          *got = (float *)malloc(sizeof(float) * (size_t)n), *lse = (float *)malloc(sizeof(float) * (size_t)(B * NH * T)),
          *kc = (float *)malloc(sizeof(float) * (size_t)n), *vc = (float *)malloc(sizeof(float) * (size_t)n),
          *scratch = (float *)malloc(sizeof(float) * (size_t)(nt * gpt2rt__pad16(2 * T)));
    int32_t *row = (int32_t *)malloc(sizeof(int32_t) * (size_t)(B * T)), *pos = (int32_t *)malloc(sizeof(int32_t) * (size_t)(B * T));
    uint64_t st = (uint64_t)(B * 1000 + T * 10 + C);
    for (int64_t i = 0; i < n3; i++) {
        uint64_t u = harness_rng_next(&st);
        qkv[i] = u % 11 == 0 ? (u & 1024 ? -0.0f : 0.0f) : (float)(harness_rng_uniform(&st) * 4.0 - 2.0);
    }
    gpt2rt__cpu_attention_forward(out, lse, qkv, scratch, B, T, C, NH, NULL, nt);
    float *qi = (float *)malloc(sizeof(float) * (size_t)(B * 3 * C));
    for (int64_t t = 0; t < T; t += one_by_one ? 1 : T) { /* a pass: position t of every row, or all at once */
        int64_t m = one_by_one ? 1 : T, N = B * m;
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < m; j++) {
                row[b * m + j] = (int32_t)b;
                pos[b * m + j] = (int32_t)(t + j);
            }
        const float *in = qkv;
        if (one_by_one) {
            for (int64_t b = 0; b < B; b++) memcpy(qi + b * 3 * C, qkv + (b * T + t) * 3 * C, sizeof(float) * (size_t)(3 * C));
            in = qi;
        }
        float *tmp = (float *)malloc(sizeof(float) * (size_t)(N * C));
        gpt2rt__cpu_attention_cached(tmp, in, kc, vc, row, pos, scratch, N, T, C, NH, nt);
        for (int64_t i = 0; i < N; i++)
            memcpy(got + ((int64_t)row[i] * T + pos[i]) * C, tmp + i * C, sizeof(float) * (size_t)C);
        free(tmp);
    }
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += memcmp(&got[i], &out[i], sizeof(float)) != 0;
    free(qkv); free(out); free(got); free(lse); free(kc); free(vc); free(scratch); free(row); free(pos); free(qi);
    return bad;
}

/* count the bytes the allocator hook is asked for, per category */
typedef struct counter { uint64_t bytes[GPT2RT_MEM_COUNT]; } counter;
static void *count_alloc(void *user, size_t n, int cat) {
    counter *c = (counter *)user;
    if (cat >= 0 && cat < GPT2RT_MEM_COUNT) c->bytes[cat] += n;
    void *p = NULL;
    if (posix_memalign(&p, GPT2RT_ALIGN, n ? n : 1)) return NULL;
    return p;
}
static void count_free(void *user, void *p, int cat) { (void)user; (void)cat; free(p); }

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* ---- 1. Hugging Face: greedy continuations of the scaled tiny model ---- */
    fixture fx;
    if (!load_fixture(&fx)) { printf("cannot read " FIX "generate.txt (run from the repo root)\n"); return 2; }
    gpt2rt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    char err[512];
    if (gpt2rt_config_load(&cfg, FIX, err, sizeof err) != GPT2RT_OK) { printf("%s\n", err); return 2; }
    cfg.batch_size = 1; cfg.seq_len = cfg.max_seq_len; cfg.kv_batch = MAXB;
    gpt2rt_ctx *ctx = make(cfg);
    CHECK_OK(ctx, gpt2rt_weights_load(ctx, FIX "model.safetensors"));
    scale_weights(ctx, fx.scale);
    int64_t V = cfg.vocab_size, P = cfg.max_seq_len;
    record rec;
    record_init(&rec, V);
    int32_t tokens[MAXB * MAXT];
    int64_t lens[MAXB], len0[MAXB];
    gpt2rt_sample greedy;
    memset(&greedy, 0, sizeof greedy);
    greedy.max_new_tokens = fx.max_new; greedy.eot = fx.eos; greedy.on_token = on_token; greedy.user = &rec;
    int B = fx.n < MAXB ? fx.n : MAXB, steps = 0;
    /* all prompts at once (lengths 1, 5, 17, 30: each row its own positions), then one by one */
    for (int b = 0; b < B; b++) {
        memcpy(tokens + b * P, fx.prompt[b], (size_t)fx.plen[b] * sizeof(int32_t));
        lens[b] = len0[b] = fx.plen[b];
    }
    record_reset(&rec);
    CHECK_OK(ctx, gpt2rt_generate(ctx, &greedy, B, tokens, P, lens));
    int hf_same = 1;
    for (int b = 0; b < B; b++) {
        int same = lens[b] == fx.olen[b] && !memcmp(tokens + b * P, fx.output[b], (size_t)fx.olen[b] * sizeof(int32_t));
        CHECK(same, "row %d (prompt of %d): %lld ids, transformers' generate %d; first new id %d, HF %d", b, fx.plen[b],
              (long long)lens[b], fx.olen[b], tokens[b * P + fx.plen[b]], fx.output[b][fx.plen[b]]);
        hf_same &= same;
    }
    double e = cache_vs_recompute(ctx, &rec, B, tokens, P, len0, lens, &steps);
    CHECK(e <= TOL_CACHE, "greedy, %d rows of unequal prompts: logits with the cache vs full recompute: %.3g relative", B, e);
    printf("greedy, %d prompts at once (lengths %d..%d): %s transformers' generate; cache vs recompute over %d steps: "
           "%.2e relative\n", B, fx.plen[0], fx.plen[B - 1], hf_same ? "the same ids as" : "NOT", steps, e);
    for (int b = 0; b < B; b++) {
        int64_t l = fx.plen[b];
        int32_t row[MAXT];
        memcpy(row, fx.prompt[b], (size_t)l * sizeof(int32_t));
        gpt2rt_sample g1 = greedy;
        g1.on_token = NULL;
        CHECK_OK(ctx, gpt2rt_generate(ctx, &g1, 1, row, P, &l));
        CHECK(l == fx.olen[b] && !memcmp(row, fx.output[b], (size_t)l * sizeof(int32_t)),
              "prompt %d alone: differs from transformers' generate", b);
    }

    /* ---- 2. top_k = 1 is greedy; top_k and top_p stay inside their sets ---- */
    {
        int64_t l = fx.plen[1];
        int32_t a[MAXT], g[MAXT];
        memcpy(a, fx.prompt[1], (size_t)l * sizeof(int32_t));
        gpt2rt_sample s;
        memset(&s, 0, sizeof s);
        s.temperature = 0.7f; s.top_k = 1; s.seed = 99; s.max_new_tokens = fx.max_new; s.eot = -1;
        CHECK_OK(ctx, gpt2rt_generate(ctx, &s, 1, a, P, &l));
        int64_t lg = fx.plen[1];
        memcpy(g, fx.prompt[1], (size_t)lg * sizeof(int32_t));
        gpt2rt_sample gr = greedy;
        gr.on_token = NULL; gr.eot = -1;
        CHECK_OK(ctx, gpt2rt_generate(ctx, &gr, 1, g, P, &lg));
        CHECK(l == lg && !memcmp(a, g, (size_t)l * sizeof(int32_t)), "top_k = 1 (temperature 0.7) differs from greedy");
    }
    {
        static const struct { float temp; int k; float p; } cases[] = {{1.5f, 0, 0.5f}, {1.0f, 7, 0.0f}, {2.0f, 20, 0.3f}};
        char *in = (char *)malloc((size_t)V);
        for (int c = 0; c < 3; c++) {
            gpt2rt_sample s;
            memset(&s, 0, sizeof s);
            s.temperature = cases[c].temp; s.top_k = cases[c].k; s.top_p = cases[c].p; s.seed = 7 + (uint64_t)c;
            s.eot = -1; s.on_token = on_token; s.user = &rec;
            for (int b = 0; b < MAXB; b++) { tokens[b * P] = (int32_t)(11 * b + 3); lens[b] = 1; }
            record_reset(&rec);
            CHECK_OK(ctx, gpt2rt_generate(ctx, &s, MAXB, tokens, P, lens));
            int outside = 0, total = 0, not_argmax = 0;
            for (int b = 0; b < MAXB; b++)
                for (int i = 0; i < rec.n[b]; i++) {
                    const float *lg = rec.logits[b] + (int64_t)i * V;
                    allowed_set(lg, V, s.temperature, s.top_k, s.top_p ? s.top_p : 1.0, in);
                    int32_t t = rec.tok[b][i];
                    outside += !in[t];
                    int64_t am = 0;
                    for (int64_t v = 1; v < V; v++) if (lg[v] > lg[am]) am = v;
                    not_argmax += t != am;
                    total++;
                }
            CHECK(outside == 0 && total == MAXB * (P - 1), "temperature %g top_k %d top_p %g: %d of %d tokens outside "
                  "the allowed set", (double)s.temperature, s.top_k, (double)s.top_p, outside, total);
            CHECK(not_argmax > 0, "temperature %g top_k %d top_p %g: every one of %d tokens was the argmax: not sampling",
                  (double)s.temperature, s.top_k, (double)s.top_p, total);
            printf("temperature %g top_k %d top_p %g: %d tokens, all inside the set, %d not the argmax\n",
                   (double)s.temperature, s.top_k, (double)(s.top_p ? s.top_p : 1.0f), total, not_argmax);
        }
        free(in);
    }

    /* ---- 3. seeds and threads ---- */
    {
        int32_t a[MAXB * MAXT], b2[MAXB * MAXT], c2[MAXB * MAXT];
        int64_t la[MAXB], lb[MAXB], lc[MAXB];
        gpt2rt_sample s;
        memset(&s, 0, sizeof s);
        s.temperature = 1.0f; s.seed = 1234; s.eot = -1; s.max_new_tokens = 40;
        for (int b = 0; b < 2; b++) { a[b * P] = b2[b * P] = c2[b * P] = 42; la[b] = lb[b] = lc[b] = 1; }
        CHECK_OK(ctx, gpt2rt_generate(ctx, &s, 2, a, P, la));
        gpt2rt_config one = cfg;
        one.n_threads = 1;
        gpt2rt_ctx *ctx1 = make(one);
        CHECK_OK(ctx1, gpt2rt_weights_load(ctx1, FIX "model.safetensors"));
        scale_weights(ctx1, fx.scale);
        CHECK_OK(ctx1, gpt2rt_generate(ctx1, &s, 2, b2, P, lb));
        CHECK(!memcmp(a, b2, sizeof(int32_t) * (size_t)(P + 41)) && la[1] == lb[1],
              "the same seed on 1 thread and on %d gave different ids", cfg.n_threads ? cfg.n_threads : gpt2rt_config_get(ctx).n_threads);
        s.seed = 1235;
        CHECK_OK(ctx, gpt2rt_generate(ctx, &s, 2, c2, P, lc));
        CHECK(memcmp(a + 1, c2 + 1, sizeof(int32_t) * 40) != 0, "seeds 1234 and 1235 gave the same 40 ids");
        /* a row's own stream: the same prompt in rows 0 and 1 gives different samples */
        CHECK(memcmp(a + 1, a + P + 1, sizeof(int32_t) * 40) != 0, "rows 0 and 1 (same prompt) drew the same ids");
        gpt2rt_free(ctx1);
    }

    /* ---- 4. where rows stop ---- */
    {
        /* eot: the 4th token greedy gives prompt 2 ends the row at its first occurrence */
        int32_t want_eot = fx.output[2][fx.plen[2] + 3];
        int first = 0;
        while (fx.output[2][fx.plen[2] + first] != want_eot) first++;
        int64_t l = fx.plen[2];
        int32_t row[MAXT];
        memcpy(row, fx.prompt[2], (size_t)l * sizeof(int32_t));
        gpt2rt_sample s = greedy;
        s.on_token = NULL; s.eot = want_eot; s.max_new_tokens = 0;
        CHECK_OK(ctx, gpt2rt_generate(ctx, &s, 1, row, P, &l));
        CHECK(l == fx.plen[2] + first + 1 && row[l - 1] == want_eot, "eot %d: the row has %lld ids, expected %d ending in it",
              want_eot, (long long)l, fx.plen[2] + first + 1);
        /* max_new_tokens, row_cap, kv_len (the cache is full), the callback */
        for (int b = 0; b < MAXB; b++) { memcpy(tokens + b * P, fx.prompt[b], (size_t)fx.plen[b] * sizeof(int32_t)); lens[b] = fx.plen[b]; }
        s.eot = -1; s.max_new_tokens = 5;
        CHECK_OK(ctx, gpt2rt_generate(ctx, &s, MAXB, tokens, P, lens));
        int ok = 1;
        for (int b = 0; b < MAXB; b++) ok &= lens[b] == fx.plen[b] + 5;
        CHECK(ok, "max_new_tokens = 5: lengths %lld %lld %lld %lld", (long long)lens[0], (long long)lens[1],
              (long long)lens[2], (long long)lens[3]);
        s.max_new_tokens = 0;
        int32_t small[2 * 20];
        int64_t sl[2] = {3, 19};
        for (int i = 0; i < 40; i++) small[i] = i % 20;
        CHECK_OK(ctx, gpt2rt_generate(ctx, &s, 2, small, 20, sl));
        CHECK(sl[0] == 20 && sl[1] == 20, "row_cap = 20: lengths %lld %lld", (long long)sl[0], (long long)sl[1]);
        for (int b = 0; b < 2; b++) { tokens[b * MAXT] = 5; lens[b] = 1; }
        rec.stop_row = 1; rec.stop_after = 3;
        s.on_token = on_token; s.user = &rec;
        record_reset(&rec);
        CHECK_OK(ctx, gpt2rt_generate(ctx, &s, 2, tokens, MAXT, lens));
        CHECK(lens[0] == P && lens[1] == 4, "kv_len = %lld, callback stop after 3: lengths %lld %lld", (long long)P,
              (long long)lens[0], (long long)lens[1]);
        rec.stop_row = -1;
    }

    /* ---- 5. bad options, refused with the numbers ---- */
    {
        int32_t t[2 * 70];
        int64_t l[2] = {3, 3};
        memset(t, 0, sizeof t);
        gpt2rt_sample s;
        struct { const char *what, *needle1, *needle2; gpt2rt_result want; } ex[] = {
            {"temperature -1", "temperature = -1", "", GPT2RT_ERR_INVALID_ARGUMENT},
            {"top_p 1.5", "top_p = 1.5", "(0, 1]", GPT2RT_ERR_INVALID_ARGUMENT},
            {"top_p -0.25", "top_p = -0.25", "(0, 1]", GPT2RT_ERR_INVALID_ARGUMENT},
            {"top_k -2", "top_k = -2", "", GPT2RT_ERR_INVALID_ARGUMENT},
            {"prompt 65 > kv_len 64", "lens[1] = 65", "kv_len = 64", GPT2RT_ERR_INVALID_ARGUMENT},
            {"empty prompt", "lens[0] = 0", "at least one", GPT2RT_ERR_INVALID_ARGUMENT},
            {"B 5 > kv_batch 4", "B = 5", "kv_batch = 4", GPT2RT_ERR_INVALID_ARGUMENT},
            {"token 1000", "tokens[1][2] = 1000", "[0, 1000)", GPT2RT_ERR_INVALID_ARGUMENT},
        };
        for (int i = 0; i < (int)(sizeof ex / sizeof ex[0]); i++) {
            memset(&s, 0, sizeof s);
            int Bx = 2;
            l[0] = 3; l[1] = 3;
            memset(t, 0, sizeof t);
            if (i == 0) s.temperature = -1.0f;
            if (i == 1) s.top_p = 1.5f;
            if (i == 2) s.top_p = -0.25f;
            if (i == 3) s.top_k = -2;
            if (i == 4) l[1] = 65;
            if (i == 5) l[0] = 0;
            if (i == 6) Bx = 5;
            if (i == 7) t[70 + 2] = 1000;
            int32_t before = t[3];
            gpt2rt_result r = gpt2rt_generate(ctx, &s, Bx, i == 6 ? tokens : t, 70, i == 6 ? lens : l);
            const char *m = gpt2rt_last_error(ctx);
            CHECK(r == ex[i].want && has(m, ex[i].needle1) && has(m, ex[i].needle2), "%s: %s: %s", ex[i].what,
                  gpt2rt_result_string(r), m);
            CHECK(t[3] == before, "%s: the refused call wrote tokens", ex[i].what);
            if (i == 4) printf("refused: %s\n", m);
        }
        /* more new tokens than a row holds: refused up front, naming how many fit; the
           message is the latest call's, cleared by the next call that succeeds */
        struct { int64_t cap, len; int ask; int64_t fit; const char *room; } over[] = {
            {70, 3, 62, 61, "min(row_cap = 70, kv_len = 64) = 64"}, /* the cache: 3 + 62 > 64 */
            {20, 5, 16, 15, "min(row_cap = 20, kv_len = 64) = 20"}, /* the row: 5 + 16 > 20 */
        };
        for (int i = 0; i < 2; i++) {
            memset(&s, 0, sizeof s);
            s.eot = -1; s.max_new_tokens = over[i].ask;
            l[0] = 3; l[1] = over[i].len;
            memset(t, 0, sizeof t);
            char want[64];
            snprintf(want, sizeof want, "at most %lld new tokens", (long long)over[i].fit);
            gpt2rt_result r = gpt2rt_generate(ctx, &s, 2, t, over[i].cap, l);
            const char *m = gpt2rt_last_error(ctx);
            CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && has(m, over[i].room) && has(m, "max_new_tokens = ") && has(m, want) &&
                  l[0] == 3 && l[1] == over[i].len && t[3] == 0 && t[over[i].cap + 3] == 0,
                  "row_cap %lld, prompt %lld, max_new_tokens %d: %s: %s (lens %lld %lld)", (long long)over[i].cap,
                  (long long)over[i].len, over[i].ask, gpt2rt_result_string(r), m, (long long)l[0], (long long)l[1]);
            if (i == 0) printf("refused: %s\n", m);
            s.max_new_tokens = (int)over[i].fit; /* exactly what fits row 1 */
            r = gpt2rt_generate(ctx, &s, 2, t, over[i].cap, l);
            CHECK(r == GPT2RT_OK && l[0] == 3 + over[i].fit && l[1] == over[i].len + over[i].fit && !gpt2rt_last_error(ctx)[0],
                  "max_new_tokens %d, what fits: %s, lens %lld %lld, last_error '%s'", s.max_new_tokens,
                  gpt2rt_result_string(r), (long long)l[0], (long long)l[1], gpt2rt_last_error(ctx));
        }
        CHECK(gpt2rt_mode_set(ctx, (gpt2rt_mode)7) == GPT2RT_ERR_INVALID_ARGUMENT && gpt2rt_last_error(ctx)[0] &&
              gpt2rt_mode_set(ctx, GPT2RT_MODE_TRAIN) == GPT2RT_OK && !gpt2rt_last_error(ctx)[0],
              "mode_set 7 then TRAIN: last_error '%s' after the success", gpt2rt_last_error(ctx));
        {
            int32_t ids[40];
            for (int i = 0; i < 40; i++) ids[i] = i;
            gpt2rt_shard *sh = NULL;
            int32_t in[8], tg[8];
            CHECK(gpt2rt_shard_from_tokens(&sh, ids, 40) == GPT2RT_OK &&
                  gpt2rt_shard_batch(sh, 1, 0, 0, 1, 1, 100, in, tg) != GPT2RT_OK && gpt2rt_shard_last_error(sh)[0] &&
                  gpt2rt_shard_batch(sh, 1, 0, 0, 1, 2, 4, in, tg) == GPT2RT_OK && !gpt2rt_shard_last_error(sh)[0],
                  "a shard: T 100 refused, then a batch of (2, 4): last_error '%s' after the success",
                  sh ? gpt2rt_shard_last_error(sh) : "(no shard)");
            gpt2rt_shard_free(sh);
        }
        /* a context without a cache; config checks */
        gpt2rt_config nc = cfg;
        nc.kv_batch = 0;
        gpt2rt_ctx *c0 = make(nc);
        gpt2rt_result r = gpt2rt_generate(c0, NULL, 1, t, 70, l);
        CHECK(r == GPT2RT_ERR_STATE && has(gpt2rt_last_error(c0), "kv_batch"), "no cache: %s", gpt2rt_last_error(c0));
        gpt2rt_free(c0);
        gpt2rt_memory_plan pl;
        nc = cfg; nc.kv_len = 100;
        CHECK(gpt2rt_plan(&nc, &pl) == GPT2RT_ERR_INVALID_ARGUMENT && has(pl.error, "kv_len = 100") &&
              has(pl.error, "max_seq_len = 64"), "kv_len 100 > max_seq_len: %s", pl.error);
        nc = cfg; nc.kv_batch = 0; nc.kv_len = 8;
        CHECK(gpt2rt_plan(&nc, &pl) == GPT2RT_ERR_INVALID_ARGUMENT && has(pl.error, "kv_len = 8"), "kv_len alone: %s", pl.error);
        nc = cfg; nc.kv_batch = -1;
        CHECK(gpt2rt_plan(&nc, &pl) == GPT2RT_ERR_INVALID_ARGUMENT && has(pl.error, "kv_batch = -1"), "kv_batch -1: %s", pl.error);
        gpt2rt_config ts;
        memset(&ts, 0, sizeof ts);
        ts.input = GPT2RT_INPUT_PATCHES; ts.head = GPT2RT_HEAD_REGRESSION; ts.kv_batch = 1;
        CHECK(gpt2rt_plan(&ts, &pl) == GPT2RT_ERR_INVALID_ARGUMENT && has(pl.error, "input = TOKENS"), "patches: %s", pl.error);
        ts = cfg; ts.backend = GPT2RT_BACKEND_CUDA;
        CHECK(gpt2rt_plan(&ts, &pl) == GPT2RT_OK && pl.bytes[0][GPT2RT_MEM_KVCACHE] > 0, "the CUDA plan has the cache");
    }

    /* ---- 6. the plan: a category of its own, planned == allocated ---- */
    {
        gpt2rt_memory_plan p0, p1;
        gpt2rt_config a = cfg;
        a.kv_batch = 0;
        char t0[4096], t1[4096];
        CHECK(gpt2rt_plan(&a, &p0) == GPT2RT_OK && gpt2rt_plan(&cfg, &p1) == GPT2RT_OK, "plans");
        gpt2rt_plan_format(&p0, t0, sizeof t0);
        gpt2rt_plan_format(&p1, t1, sizeof t1);
        int64_t L = cfg.n_layer, C = cfg.n_embd, kvb = (int64_t)2 * L * MAXB * P * C * 4;
        CHECK(p0.bytes[0][GPT2RT_MEM_KVCACHE] == 0 && !has(t0, "kvcache"), "no cache: 0 bytes, no row");
        CHECK(p1.bytes[0][GPT2RT_MEM_KVCACHE] >= (uint64_t)kvb && has(t1, "kvcache") &&
              p1.total[0] == p0.total[0] + p1.bytes[0][GPT2RT_MEM_KVCACHE],
              "kv_batch %d: kvcache %llu bytes (keys and values alone %lld), totals %llu vs %llu", MAXB,
              (unsigned long long)p1.bytes[0][GPT2RT_MEM_KVCACHE], (long long)kvb, (unsigned long long)p1.total[0],
              (unsigned long long)p0.total[0]);
        counter cnt;
        memset(&cnt, 0, sizeof cnt);
        gpt2rt_config h = cfg;
        h.alloc = count_alloc; h.free = count_free; h.alloc_user = &cnt;
        gpt2rt_ctx *hc = make(h);
        CHECK(cnt.bytes[GPT2RT_MEM_KVCACHE] == p1.bytes[0][GPT2RT_MEM_KVCACHE], "the hook was asked for %llu kvcache "
              "bytes, planned %llu", (unsigned long long)cnt.bytes[GPT2RT_MEM_KVCACHE],
              (unsigned long long)p1.bytes[0][GPT2RT_MEM_KVCACHE]);
        int32_t t[4] = {1, 2, 3, 4};
        int64_t l = 4;
        CHECK_OK(hc, gpt2rt_generate(hc, NULL, 1, t, 4, &l));
        gpt2rt_free(hc);
        printf("kvcache: %.2f MiB for kv_batch %d x kv_len %lld (keys and values %.2f MiB)\n",
               (double)p1.bytes[0][GPT2RT_MEM_KVCACHE] / 1048576.0, MAXB, (long long)P, (double)kvb / 1048576.0);
    }
    gpt2rt_free(ctx);

    /* ---- 7. a long prompt (several prefill passes), sampling, random init ---- */
    {
        gpt2rt_config r;
        memset(&r, 0, sizeof r);
        r.n_layer = 2; r.n_head = 2; r.n_embd = 32; r.vocab_size = 300; r.max_seq_len = 320;
        r.batch_size = 1; r.seq_len = 320; r.kv_batch = 3; r.seed = 5;
        gpt2rt_ctx *rc = make(r);
        record rr;
        record_init(&rr, r.vocab_size);
        int32_t tk[3 * 320];
        int64_t ln[3] = {200, 3, 129}, l0[3];
        uint64_t s = 77;
        for (int i = 0; i < 3 * 320; i++) tk[i] = (int32_t)(harness_rng_next(&s) % 300);
        memcpy(l0, ln, sizeof ln);
        gpt2rt_sample sm;
        memset(&sm, 0, sizeof sm);
        sm.temperature = 1.0f; sm.top_p = 0.9f; sm.max_new_tokens = 30; sm.on_token = on_token; sm.user = &rr;
        record_reset(&rr);
        CHECK_OK(rc, gpt2rt_generate(rc, &sm, 3, tk, 320, ln));
        int st = 0;
        double er = cache_vs_recompute(rc, &rr, 3, tk, 320, l0, ln, &st);
        CHECK(er <= TOL_CACHE && st == 90, "prompts of 200, 3, 129 (two prefill passes), top_p 0.9: cache vs recompute "
              "%.3g relative over %d steps", er, st);
        printf("sampled, prompts of 200, 3 and 129 tokens (prefill passes of %d): cache vs recompute over %d steps: "
               "%.2e relative\n", GPT2RT__KV_CHUNK, st, er);
        record_free(&rr);
        gpt2rt_free(rc);
    }
    record_free(&rec);

    /* ---- 8. the decode step's attention, op by op (see attention_cached_vs_forward) ---- */
    {
        /* B, T, C, NH: head sizes 16 and 8 (aLLM4TS, GPT4TS presets), 12 and 24 (a tail
           past the blocks of 16), 64 (GPT-2), 1; T = 300 and HS 64 x T 80 past the tile */
        static const int64_t shapes[][4] = {{3, 64, 64, 4}, {2, 37, 16, 2}, {2, 29, 24, 2}, {2, 33, 48, 2},
                                            {2, 64, 128, 2}, {1, 80, 64, 1}, {1, 300, 16, 1}, {2, 9, 3, 3}};
        int64_t worst = 0, cases = 0;
        for (int k = 0; k < (int)(sizeof shapes / sizeof shapes[0]); k++)
            for (int mode = 0; mode < 3; mode++) { /* one pass at 1 thread; a token a pass at 1 and 3 threads */
                const int64_t *sh = shapes[k];
                int64_t bad = attention_cached_vs_forward(sh[0], sh[1], sh[2], sh[3], mode > 0, mode == 2 ? 3 : 1);
                CHECK(bad == 0, "B %lld T %lld C %lld NH %lld (%s, %d threads): %lld of %lld cached attention outputs "
                      "differ from the forward's", (long long)sh[0], (long long)sh[1], (long long)sh[2], (long long)sh[3],
                      mode ? "a token a pass" : "one pass", mode == 2 ? 3 : 1, (long long)bad,
                      (long long)(sh[0] * sh[1] * sh[2]));
                if (bad > worst) worst = bad;
                cases++;
            }
        printf("attention over the cache vs the forward, %lld shapes x passes x threads: %s\n", (long long)cases,
               worst ? "DIFFER" : "bitwise");
    }
    return harness_finish();
}
