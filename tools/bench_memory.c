/* tools/bench_memory.c - `make bench`, second part: what each memory knob costs in
   time and saves in bytes, measured on this machine's backend. A benchmark, not a
   test: every configuration trains the same global batch from the same weights,
   and the printed overhead is against the first row measured in the same run.
   usage: bench_memory [-steps N] [-batch B] [-seq T] [-layers L] [-threads N] */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#define CLI_PROG "bench_memory"
#include "../tools/cli.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct knob { const char *name; gpt2rt_recompute recompute; int every, div; } knob;

#define PROG "bench_memory"

static void usage(void) {
    printf("usage: bench_memory [-steps N] [-batch B] [-seq T] [-layers L] [-threads N]   (also --steps ...)\n"
           "  each memory knob's time and bytes on the GPT-2 124M shape; defaults: 3 steps, B=4, T=64, 12 layers\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int steps = 3;
    gpt2rt_config base = {0}; /* GPT-2 124M */
    base.batch_size = 4; base.seq_len = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *k = a + (a[0] == '-' && a[1] == '-'); /* -steps or --steps */
        if (!strcmp(k, "-h") || !strcmp(k, "-help")) { usage(); return 0; }
        if (i + 1 >= argc) { fprintf(stderr, "bench_memory: %s needs a value (see --help)\n", a); return 2; }
        const char *v = argv[++i];
        int ok;
        if (!strcmp(k, "-steps")) ok = arg_int(a, v, 1, 1000000, &steps);
        else if (!strcmp(k, "-batch")) ok = arg_int(a, v, 1, 1 << 20, &base.batch_size);
        else if (!strcmp(k, "-seq")) ok = arg_int(a, v, 1, 1 << 20, &base.seq_len);
        else if (!strcmp(k, "-layers")) ok = arg_int(a, v, 1, 1024, &base.n_layer);
        else if (!strcmp(k, "-threads")) ok = arg_int(a, v, 0, 1024, &base.n_threads);
        else { fprintf(stderr, "bench_memory: unknown option %s (see --help)\n", a); return 2; }
        if (!ok) return 2;
    }
    const knob knobs[] = {
        {"baseline", GPT2RT_RECOMPUTE_NONE, 0, 1},
        {"selective recompute", GPT2RT_RECOMPUTE_SELECTIVE, 0, 1},
        {"full recompute, every layer", GPT2RT_RECOMPUTE_FULL, 1, 1},
        {"full recompute, sqrt(L)", GPT2RT_RECOMPUTE_FULL, GPT2RT_CHECKPOINT_SQRT, 1},
        {"micro-batch /2, accumulate 2", GPT2RT_RECOMPUTE_NONE, 0, 2},
        {"micro-batch /4, accumulate 4", GPT2RT_RECOMPUTE_NONE, 0, 4},
    };
    int nk = (int)(sizeof knobs / sizeof knobs[0]);
    int global = base.batch_size, T = base.seq_len ? base.seq_len : 64;
    int32_t *x = (int32_t *)malloc(sizeof(int32_t) * (size_t)global * T);
    int32_t *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)global * T);
    double t_base = 0;
    uint64_t act_base = 0, total_base = 0;
    printf("bench_memory: each knob on the same global batch of %d x %d tokens, %d timed steps after one warm-up\n",
           global, T, steps);
    printf("%-30s %10s %9s %12s %12s %12s %10s\n", "configuration", "ms/step", "overhead", "activations", "transient",
           "total MiB", "saved MiB");
    for (int k = 0; k < nk; k++) {
        gpt2rt_config c = base;
        if (global % knobs[k].div) continue;
        c.recompute = knobs[k].recompute;
        c.checkpoint_every = knobs[k].every;
        c.batch_size = global / knobs[k].div;
        c.grad_accum = knobs[k].div;
        gpt2rt_memory_plan plan;
        gpt2rt_ctx *ctx;
        if (gpt2rt_plan(&c, &plan) != GPT2RT_OK || gpt2rt_create(&ctx, &c) != GPT2RT_OK) {
            fprintf(stderr, "gpt2rt: %s\n", plan.error[0] ? plan.error : gpt2rt_last_error(ctx));
            return 1;
        }
        double t = 0;
        float loss = 0;
        for (int s = -1; s < steps; s++) {
            uint64_t r = 1 + (uint64_t)(s + 1);
            for (int i = 0; i < global * T; i++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                x[i] = (int32_t)((r >> 33) % 50257);
                y[i] = (int32_t)((r >> 13) % 50257);
            }
            gpt2rt_step_stats st;
            double t0 = cli_now();
            if (gpt2rt_step(ctx, x, y, &st) != GPT2RT_OK) { fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx)); return 1; }
            if (s >= 0) t += cli_now() - t0;
            loss = st.loss;
        }
        t /= steps;
        uint64_t act = plan.bytes[0][GPT2RT_MEM_ACTIVATIONS], total = plan.total[0];
        if (k == 0) { t_base = t; act_base = act; total_base = total; }
        printf("%-30s %10.0f %+8.1f%% %12.1f %12.1f %12.1f %10.1f   (loss %.6f)\n", knobs[k].name, t * 1e3,
               (t / t_base - 1) * 100, act / 1048576.0, plan.bytes[0][GPT2RT_MEM_TRANSIENT] / 1048576.0,
               total / 1048576.0, ((double)total_base - (double)total) / 1048576.0, loss);
        gpt2rt_free(ctx);
    }
    printf("(activations in the baseline: %.1f MiB; recompute rows train bitwise the same weights, so their losses "
           "match the baseline's exactly; accumulation rows match to rounding)\n", act_base / 1048576.0);
    free(x); free(y);
    return 0;
}
