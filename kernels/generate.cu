/* kernels/generate.cu - lab of generation with the KV cache on the CUDA backend (gpt2rt.h:
   8.2's decode_embed, 8.3's kv_store + attention_cached, 8.5's decode pass, reached through
   gpt2rt_generate) against the CPU backend and Hugging Face's generate.
     nvcc -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror --Werror all-warnings \
         -o build/lab_generate kernels/generate.cu -lcublasLt      (make build/lab_generate)
     build/lab_generate          the checks, then the timing (run from the repository root);
                                 exit 77 without a device
     build/lab_generate checks   the checks only (what the emulator runs)

   Checks (the tiny model of tests/fixtures/hf_tiny with the weights that
   tools/gen_generate_fixture.py scaled: wpe and every c_attn weight times `scale`):
     - fp32: greedy ids of every prompt of tests/fixtures/hf_tiny/generate.txt, all rows
       in one call (prompts of unequal length), == transformers' generate (the fixture's
       output lines) and == the CPU backend's; every step's logits within 1e-4 of the CPU's
       (the same products summed in other orders: n <= 4C = 256 terms of 2^-24 each, through
       two layers and the head, with a 10x margin)
     - bf16, fp16: every step's logits within 5e-2 / 1.5e-2 (max-norm relative) of the CPU's
       fp32, on the steps whose context still agrees with it (8 or 11 mantissa bits, tens
       of roundings along a path: kernels/emu/drive.cpp's derivation); and every row's first
       new token the CPU's argmax, or a near tie within twice that error of it
     - planned == cudaMalloc'ed, per category (the KV cache's included), for each precision
   Timing: GPT-2 124M, random init, bf16, inference context, a 64-token prompt per row and
   128 new tokens (greedy, no eot), B = 1 and B = 8: seconds of gpt2rt_generate (prefill
   included, after one warm-up call) and new tokens per second. */
#define GPT2RT_SGEMM_NO_SIMD /* as kernels/train_step.cu: g++ 12's false warning in its AVX-512 headers under -O3 */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "lab.cuh"
#include <time.h>

#define MAXB 8
#define MAXS 64 /* steps recorded per row */

static void check_true(const char *what, int ok) {
    printf("  %-64s %s\n", what, ok ? "PASS" : "FAIL");
    if (!ok) lab_failures++;
}
static void check_rel(const char *what, double err, double tol) {
    int ok = err <= tol; /* NaN fails */
    printf("  %-64s %.3e (tol %.1e)  %s\n", what, err, tol, ok ? "PASS" : "FAIL");
    if (!ok) lab_failures++;
}

/* ---- the fixture: max_new_tokens, eos, scale, then prompt / output line pairs ---- */
typedef struct fixture {
    int max_new, eos, n;
    float scale;
    int plen[MAXB], olen[MAXB];
    int32_t prompt[MAXB][64], output[MAXB][160];
} fixture;
static const char *fix_dir = "tests/fixtures/hf_tiny/";

static int read_ids(char *s, int32_t *out, int cap) {
    int n = 0;
    for (char *t = strtok(s, " \n"); t && n < cap; t = strtok(NULL, " \n")) out[n++] = (int32_t)atoi(t);
    return n;
}
static int load_fixture(fixture *f) {
    char path[256];
    snprintf(path, sizeof path, "%sgenerate.txt", fix_dir);
    FILE *fp = fopen(path, "r");
    if (!fp) { fix_dir = "../tests/fixtures/hf_tiny/"; snprintf(path, sizeof path, "%sgenerate.txt", fix_dir); fp = fopen(path, "r"); }
    if (!fp) return 0;
    char line[4096];
    memset(f, 0, sizeof *f);
    while (fgets(line, sizeof line, fp)) {
        if (!strncmp(line, "max_new_tokens ", 15)) f->max_new = atoi(line + 15);
        else if (!strncmp(line, "eos ", 4)) f->eos = atoi(line + 4);
        else if (!strncmp(line, "scale ", 6)) f->scale = (float)atof(line + 6);
        else if (!strncmp(line, "prompt ", 7) && f->n < MAXB) f->plen[f->n] = read_ids(line + 7, f->prompt[f->n], 64);
        else if (!strncmp(line, "output ", 7) && f->n < MAXB) { f->olen[f->n] = read_ids(line + 7, f->output[f->n], 160); f->n++; }
    }
    fclose(fp);
    return f->n > 0 && f->max_new > 0 && f->max_new <= MAXS && f->scale > 0;
}

/* every step's logits per row, as on_token sees them */
typedef struct record {
    int64_t V;
    int n[MAXB];
    float *lg[MAXB]; /* (MAXS, V) */
} record;
static int on_token(void *user, int row, int32_t token, const float *logits, int64_t n) {
    (void)token;
    record *r = (record *)user;
    if (row < MAXB && r->n[row] < MAXS && n == r->V) memcpy(r->lg[row] + (int64_t)r->n[row]++ * n, logits, (size_t)n * 4);
    return 0;
}

/* what the fixture's script did to the weights: wpe and every c_attn weight times scale */
static void scale_weights(gpt2rt_ctx *ctx, float scale) {
    for (int i = 0; i < gpt2rt_param_count(ctx); i++) {
        gpt2rt_param_info in;
        gpt2rt_param_info_get(ctx, i, &in);
        size_t nl = strlen(in.name);
        if (strcmp(in.name, "transformer.wpe.weight") && !(nl > 18 && !strcmp(in.name + nl - 18, "attn.c_attn.weight")))
            continue;
        float *w = (float *)malloc(sizeof(float) * (size_t)in.numel);
        LAB_OK(ctx, gpt2rt_param_read(ctx, in.name, GPT2RT_PARAM_VALUE, w, in.numel));
        for (int64_t j = 0; j < in.numel; j++) w[j] *= scale;
        LAB_OK(ctx, gpt2rt_param_write(ctx, in.name, w, in.numel));
        free(w);
    }
}

/* greedy generation of every fixture prompt at once on backend b, precision p:
   ids (n, cap), lens (n), every step's logits in *rec; planned == allocated checked */
static void run_fixture(const fixture *fx, gpt2rt_backend b, gpt2rt_precision p, int32_t *ids, int64_t cap,
                        int64_t *lens, record *rec) {
    gpt2rt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    char err[512];
    if (gpt2rt_config_load(&cfg, fix_dir, err, sizeof err) != GPT2RT_OK) { fprintf(stderr, "%s\n", err); exit(2); }
    cfg.batch_size = 1; cfg.seq_len = 8; cfg.kv_batch = fx->n; cfg.kv_len = (int)cap;
    cfg.backend = b; cfg.precision = p;
    gpt2rt_ctx *ctx = NULL;
    if (gpt2rt_create(&ctx, &cfg) != GPT2RT_OK) {
        fprintf(stderr, "gpt2rt_create: %s\n", ctx ? gpt2rt_last_error(ctx) : "?");
        exit(2);
    }
    char path[256];
    snprintf(path, sizeof path, "%smodel.safetensors", fix_dir);
    LAB_OK(ctx, gpt2rt_weights_load(ctx, path));
    scale_weights(ctx, fx->scale);
    if (b == GPT2RT_BACKEND_CUDA) {
        gpt2rt_memory_plan plan, got;
        int ok = gpt2rt_plan(&cfg, &plan) == GPT2RT_OK && gpt2rt_plan_allocated(ctx, &got) == GPT2RT_OK, bad = 0;
        for (int m = 0; m < GPT2RT_MEM_COUNT; m++) bad += plan.bytes[0][m] != got.bytes[0][m];
        char what[128];
        snprintf(what, sizeof what, "%s: planned == cudaMalloc'ed per category (KV cache %llu B)",
                 gpt2rt__precision_name(p), (unsigned long long)plan.bytes[0][GPT2RT_MEM_KVCACHE]);
        check_true(what, ok && !bad && plan.bytes[0][GPT2RT_MEM_KVCACHE] > 0);
    }
    memset(ids, 0, (size_t)(fx->n * cap) * 4);
    for (int r = 0; r < fx->n; r++) {
        memcpy(ids + r * cap, fx->prompt[r], (size_t)fx->plen[r] * 4);
        lens[r] = fx->plen[r];
        rec->n[r] = 0;
    }
    gpt2rt_sample o;
    memset(&o, 0, sizeof o);
    o.max_new_tokens = fx->max_new; o.eot = fx->eos; o.on_token = on_token; o.user = rec;
    LAB_OK(ctx, gpt2rt_generate(ctx, &o, fx->n, ids, cap, lens));
    gpt2rt_free(ctx);
}

/* worst max-norm relative logit error of a against b over the steps where row r's ids agree */
static double logit_err(const fixture *fx, const record *a, const record *b, const int32_t *ia, const int32_t *ib,
                        int64_t cap, int *steps) {
    double w = 0;
    *steps = 0;
    for (int r = 0; r < fx->n; r++)
        for (int k = 0; k < a->n[r] && k < b->n[r]; k++) {
            const float *x = a->lg[r] + (int64_t)k * a->V, *y = b->lg[r] + (int64_t)k * a->V;
            double m = 0, e = 0;
            for (int64_t v = 0; v < a->V; v++) {
                m = fmax(m, fabs((double)y[v]));
                double d = fabs((double)x[v] - y[v]);
                if (!(d <= e)) e = d;
            }
            double rel = m > 0 ? e / m : e;
            if (!(rel <= w)) w = rel;
            (*steps)++;
            if (ia[r * cap + fx->plen[r] + k] != ib[r * cap + fx->plen[r] + k]) break;
        }
    return w;
}

static void check_fixture(void) {
    fixture fx;
    if (!load_fixture(&fx)) { fprintf(stderr, "cannot read tests/fixtures/hf_tiny/generate.txt (run from the repository root)\n"); exit(2); }
    int64_t cap = 0;
    for (int r = 0; r < fx.n; r++) cap = fx.plen[r] + fx.max_new > cap ? fx.plen[r] + fx.max_new : cap;
    gpt2rt_config c0;
    memset(&c0, 0, sizeof c0);
    char err[512];
    if (gpt2rt_config_load(&c0, fix_dir, err, sizeof err) != GPT2RT_OK) { fprintf(stderr, "%s\n", err); exit(2); }
    if (cap > c0.max_seq_len) cap = c0.max_seq_len;
    int64_t V = c0.vocab_size;
    record rc, rg;
    memset(&rc, 0, sizeof rc); memset(&rg, 0, sizeof rg);
    rc.V = rg.V = V;
    for (int r = 0; r < MAXB; r++) {
        rc.lg[r] = (float *)malloc((size_t)(MAXS * V) * 4);
        rg.lg[r] = (float *)malloc((size_t)(MAXS * V) * 4);
    }
    int32_t *ic = (int32_t *)malloc((size_t)(MAXB * cap) * 4), *ig = (int32_t *)malloc((size_t)(MAXB * cap) * 4);
    int64_t lc[MAXB], lg[MAXB];
    printf("Hugging Face tiny model, %d prompts at once (lengths %d..%d), %d new tokens greedy\n", fx.n, fx.plen[0],
           fx.plen[fx.n - 1], fx.max_new);
    run_fixture(&fx, GPT2RT_BACKEND_CPU, GPT2RT_PRECISION_FP32, ic, cap, lc, &rc);
    run_fixture(&fx, GPT2RT_BACKEND_CUDA, GPT2RT_PRECISION_FP32, ig, cap, lg, &rg);
    int hf = 1, cpu = 1;
    for (int r = 0; r < fx.n; r++) {
        hf &= lg[r] == fx.olen[r] && !memcmp(ig + r * cap, fx.output[r], (size_t)fx.olen[r] * 4);
        cpu &= lg[r] == lc[r] && !memcmp(ig + r * cap, ic + r * cap, (size_t)lc[r] * 4);
    }
    check_true("fp32: CUDA greedy ids == transformers' generate (the fixture)", hf);
    check_true("fp32: CUDA greedy ids == the CPU backend's", cpu);
    int steps = 0;
    double e = logit_err(&fx, &rg, &rc, ig, ic, cap, &steps);
    char what[128];
    snprintf(what, sizeof what, "fp32: logits of %d steps vs the CPU (max-norm relative)", steps);
    check_rel(what, e, 1e-4);
    const gpt2rt_precision half[2] = {GPT2RT_PRECISION_BF16, GPT2RT_PRECISION_FP16};
    const double tol[2] = {5e-2, 1.5e-2};
    for (int k = 0; k < 2; k++) {
        run_fixture(&fx, GPT2RT_BACKEND_CUDA, half[k], ig, cap, lg, &rg);
        e = logit_err(&fx, &rg, &rc, ig, ic, cap, &steps);
        snprintf(what, sizeof what, "%s: logits of %d steps (ids still agreeing) vs the CPU's fp32",
                 gpt2rt__precision_name(half[k]), steps);
        check_rel(what, e, tol[k]);
        /* the first new token: with every logit within e = tol * max|logit| of the CPU's, the
           one chosen is the CPU's argmax or within 2e of it (a near tie may flip) */
        int near = 1, same = 0;
        for (int r = 0; r < fx.n; r++) {
            const float *y = rc.lg[r];
            int64_t best = 0;
            double m = 0;
            for (int64_t v = 0; v < V; v++) { m = fmax(m, fabs((double)y[v])); if (y[v] > y[best]) best = v; }
            int32_t got = ig[r * cap + fx.plen[r]];
            near &= got >= 0 && got < V && (double)y[got] >= (double)y[best] - 2.0 * tol[k] * m;
            same += got == (int32_t)best;
        }
        snprintf(what, sizeof what, "%s: every row's first new token the CPU's argmax or within 2e (%d of %d equal)",
                 gpt2rt__precision_name(half[k]), same, fx.n);
        check_true(what, near);
    }
    for (int r = 0; r < MAXB; r++) { free(rc.lg[r]); free(rg.lg[r]); }
    free(ic); free(ig);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* GPT-2 124M (the zero config's shape), random init, bf16 inference context */
static void time_124m(void) {
    const int P = 64, NEW = 128;
    for (int B = 1; B <= 8; B += 7) {
        gpt2rt_config c;
        memset(&c, 0, sizeof c);
        c.backend = GPT2RT_BACKEND_CUDA; c.precision = GPT2RT_PRECISION_BF16; c.inference = 1;
        c.batch_size = 1; c.seq_len = P; c.kv_batch = B; c.kv_len = P + NEW; c.seed = 1;
        gpt2rt_ctx *ctx = NULL;
        if (gpt2rt_create(&ctx, &c) != GPT2RT_OK) {
            fprintf(stderr, "gpt2rt_create: %s\n", ctx ? gpt2rt_last_error(ctx) : "?");
            exit(2);
        }
        int64_t cap = P + NEW, lens[8];
        int32_t *ids = (int32_t *)malloc((size_t)(B * cap) * 4);
        gpt2rt_sample o;
        memset(&o, 0, sizeof o);
        o.max_new_tokens = NEW; o.eot = -1;
        double sec = 0;
        for (int rep = 0; rep < 2; rep++) { /* the first call builds cuBLASLt's plans */
            for (int r = 0; r < B; r++) {
                for (int i = 0; i < P; i++) ids[r * cap + i] = (int32_t)((r * 977 + i * 131) % 50257);
                lens[r] = P;
            }
            double t0 = now_s();
            LAB_OK(ctx, gpt2rt_generate(ctx, &o, B, ids, cap, lens));
            sec = now_s() - t0;
        }
        int grown = 1;
        for (int r = 0; r < B; r++) grown &= lens[r] == P + NEW;
        check_true(B == 1 ? "124M bf16 B=1: every row grew by 128 tokens" : "124M bf16 B=8: every row grew by 128 tokens",
                   grown);
        printf("timing: GPT-2 124M bf16 (random init), prompt %d, %d new tokens, B=%d: %.3f s per call (prefill "
               "included), %.0f new tokens/s\n", P, NEW, B, sec, (double)(B * NEW) / sec);
        free(ids);
        gpt2rt_free(ctx);
    }
}

int main(int argc, char **argv) {
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
        printf("generate: SKIP: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    LAB_CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s\n", prop.name);
    check_fixture();
    if (!(argc > 1 && !strcmp(argv[1], "checks"))) time_124m();
    return lab_finish("generate");
}
