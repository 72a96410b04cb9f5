/* tools/bench_gen.c - `make bench`: generation speed with the KV cache, GPT-2 124M
   shape (random init), B = 1, fp32, CPU: a 64-token prompt, then greedy decoding
   of -new tokens. Prints the median over -reps runs of new tokens per second of
   the whole gpt2rt_generate call (prefill included, as tools/bench_hf_generate.py
   times Hugging Face's generate), and the decode steps alone. A benchmark, not a
   test.
   -inference 1 generates from an inference context (config.inference: no gradients,
   moments or saved activations); both print the planned bytes and the process's peak
   resident memory (VmHWM, Linux) after the runs, the figures of docs/results/memory.md.
   -bf16 1 generates from an inference context whose weights are bf16
   (config.inference_weights = BF16; implies -inference 1).
   usage: bench_gen [-new N] [-prompt N] [-reps N] [-threads N] [-layers L] [-inference 0|1] [-bf16 0|1] */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#define CLI_PROG "bench_gen"
#include "../tools/cli.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the process's peak resident set (VmHWM) in bytes; 0 where /proc is absent */
static unsigned long long peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %llu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the time of the first new token (the prefill's end) and of the last */
typedef struct clock2 { double first, last; int n; } clock2;
static int on_token(void *user, int row, int32_t token, const float *logits, int64_t n_logits) {
    clock2 *c = (clock2 *)user;
    (void)row; (void)token; (void)logits; (void)n_logits;
    c->last = cli_now();
    if (!c->n++) c->first = c->last;
    return 0;
}

#define PROG "bench_gen"

static void usage(void) {
    printf("usage: bench_gen [-new N] [-prompt N] [-reps N] [-threads N] [-layers L] [-inference 0|1] [-bf16 0|1]\n"
           "  (also --new ...) KV-cache generation speed, GPT-2 124M shape, B=1, greedy; defaults: 32 new,\n"
           "  64-token prompt, 3 reps, a training context (-inference 1: an inference context; -bf16 1: an\n"
           "  inference context with bf16 weights)\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int n_new = 32, n_prompt = 64, reps = 3, bf16 = 0;
    gpt2rt_config cfg = {0}; /* GPT-2 124M */
    cfg.batch_size = 1; cfg.seq_len = 1; /* the training buffers are not used: keep them small */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *k = a + (a[0] == '-' && a[1] == '-'); /* -steps or --steps */
        if (!strcmp(k, "-h") || !strcmp(k, "-help")) { usage(); return 0; }
        if (i + 1 >= argc) { fprintf(stderr, "bench_gen: %s needs a value (see --help)\n", a); return 2; }
        const char *v = argv[++i];
        int ok;
        if (!strcmp(k, "-new")) ok = arg_int(a, v, 1, 1023, &n_new);
        else if (!strcmp(k, "-prompt")) ok = arg_int(a, v, 1, 1023, &n_prompt);
        else if (!strcmp(k, "-reps")) ok = arg_int(a, v, 1, 100000, &reps);
        else if (!strcmp(k, "-threads")) ok = arg_int(a, v, 0, 1024, &cfg.n_threads);
        else if (!strcmp(k, "-layers")) ok = arg_int(a, v, 1, 1024, &cfg.n_layer);
        else if (!strcmp(k, "-inference")) ok = arg_int(a, v, 0, 1, &cfg.inference);
        else if (!strcmp(k, "-bf16")) ok = arg_int(a, v, 0, 1, &bf16);
        else { fprintf(stderr, "bench_gen: unknown option %s (see --help)\n", a); return 2; }
        if (!ok) return 2;
    }
    if (n_new < 1 || n_prompt < 1 || reps < 1 || n_new + n_prompt > 1024) {
        fprintf(stderr, "bench_gen: -new %d, -prompt %d, -reps %d: each >= 1, prompt + new <= 1024\n", n_new, n_prompt, reps);
        return 1;
    }
    cfg.kv_batch = 1; cfg.kv_len = n_prompt + n_new;
    if (bf16) { cfg.inference = 1; cfg.inference_weights = GPT2RT_PRECISION_BF16; cfg.backend = GPT2RT_BACKEND_CPU; }
    gpt2rt_memory_plan plan;
    gpt2rt_ctx *ctx;
    if (gpt2rt_plan(&cfg, &plan) != GPT2RT_OK || gpt2rt_create(&ctx, &cfg) != GPT2RT_OK) {
        fprintf(stderr, "gpt2rt: %s\n", plan.error[0] ? plan.error : gpt2rt_last_error(ctx));
        return 1;
    }
    cfg = gpt2rt_config_get(ctx);
    printf("bench_gen: GPT-2 %.1fM (L=%d C=%d), B=1, %d-token prompt, %d new tokens greedy, %s weights, %d threads; "
           "kvcache %.1f MiB; %s context\n", (double)plan.n_params / 1e6, cfg.n_layer, cfg.n_embd, n_prompt, n_new,
           bf16 ? "bf16" : "fp32", cfg.n_threads, (double)plan.bytes[0][GPT2RT_MEM_KVCACHE] / 1048576.0,
           cfg.inference ? "an inference" : "a training");
    int32_t *row = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_prompt + n_new));
    double *tps = (double *)malloc(sizeof(double) * (size_t)reps), *dps = (double *)malloc(sizeof(double) * (size_t)reps);
    uint64_t s = 1;
    gpt2rt_sample opt;
    memset(&opt, 0, sizeof opt);
    opt.max_new_tokens = n_new; opt.eot = -1; opt.on_token = on_token;
    for (int k = -1; k < reps; k++) { /* run -1 warms up */
        for (int i = 0; i < n_prompt; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            row[i] = (int32_t)((s >> 33) % 50257);
        }
        int64_t len = n_prompt;
        clock2 c = {0, 0, 0};
        opt.user = &c;
        double t0 = cli_now();
        if (gpt2rt_generate(ctx, &opt, 1, row, n_prompt + n_new, &len) != GPT2RT_OK) {
            fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx));
            return 1;
        }
        double t = cli_now() - t0;
        if (k < 0) continue;
        tps[k] = (double)(len - n_prompt) / t;
        dps[k] = c.n > 1 ? (double)(c.n - 1) / (c.last - c.first) : 0.0;
        printf("run %d: %lld new tokens in %.0f ms (prefill and first token %.0f ms, then %.1f ms a token)\n", k,
               (long long)(len - n_prompt), t * 1e3, (c.first - t0) * 1e3, dps[k] > 0 ? 1e3 / dps[k] : 0.0);
    }
    qsort(tps, (size_t)reps, sizeof *tps, cmp_double);
    qsort(dps, (size_t)reps, sizeof *dps, cmp_double);
    printf("decode steps alone: %.1f tokens/s (median)\n", dps[reps / 2]);
    printf("generate tokens/s: %.1f (median of %d, prefill included)\n", tps[reps / 2], reps);
    printf("memory: planned %.1f MiB (gradients and moments %.1f MiB), peak RSS %.1f MiB (VmHWM: the whole "
           "process)\n", (double)plan.total[0] / 1048576.0,
           (double)(plan.bytes[0][GPT2RT_MEM_GRADS] + plan.bytes[0][GPT2RT_MEM_MOMENTS]) / 1048576.0,
           (double)peak_rss() / 1048576.0);
    gpt2rt_free(ctx);
    free(row); free(tps); free(dps);
    return 0;
}
