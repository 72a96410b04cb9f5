/* tools/bench_cpu.c - `make bench`: full training steps (forward, backward, AdamW)
   of the GPT-2 124M shape in fp32 on the CPU backend; prints tokens/s, GFLOP/s
   and the time of each phase. A benchmark, not a test.
   usage: bench_cpu [-steps N] [-batch B] [-seq T] [-layers L] [-threads N] */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#define CLI_PROG "bench_cpu"
#include "../tools/cli.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double now(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void cpu_name(char *out, size_t cap) {
    snprintf(out, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) { snprintf(out, cap, "%s", p + 2); out[strcspn(out, "\n")] = 0; }
            break;
        }
    fclose(f);
}

#define PROG "bench_cpu"

static void usage(void) {
    printf("usage: bench_cpu [-steps N] [-batch B] [-seq T] [-layers L] [-threads N]   (also --steps ...)\n"
           "  full training steps of the GPT-2 124M shape (fp32, CPU); defaults: 5 steps, B=4, T=64, 12 layers\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int steps = 5;
    gpt2rt_config cfg = {0}; /* GPT-2 124M */
    cfg.batch_size = 4; cfg.seq_len = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *k = a + (a[0] == '-' && a[1] == '-'); /* -steps or --steps */
        if (!strcmp(k, "-h") || !strcmp(k, "-help")) { usage(); return 0; }
        if (i + 1 >= argc) { fprintf(stderr, "bench_cpu: %s needs a value (see --help)\n", a); return 2; }
        const char *v = argv[++i];
        int ok;
        if (!strcmp(k, "-steps")) ok = arg_int(a, v, 1, 1000000, &steps);
        else if (!strcmp(k, "-batch")) ok = arg_int(a, v, 1, 1 << 20, &cfg.batch_size);
        else if (!strcmp(k, "-seq")) ok = arg_int(a, v, 1, 1 << 20, &cfg.seq_len);
        else if (!strcmp(k, "-layers")) ok = arg_int(a, v, 1, 1024, &cfg.n_layer);
        else if (!strcmp(k, "-threads")) ok = arg_int(a, v, 0, 1024, &cfg.n_threads);
        else { fprintf(stderr, "bench_cpu: unknown option %s (see --help)\n", a); return 2; }
        if (!ok) return 2;
    }
    gpt2rt_memory_plan plan;
    gpt2rt_ctx *ctx;
    if (gpt2rt_plan(&cfg, &plan) != GPT2RT_OK || gpt2rt_create(&ctx, &cfg) != GPT2RT_OK) {
        fprintf(stderr, "gpt2rt: %s\n", plan.error[0] ? plan.error : gpt2rt_last_error(ctx));
        return 1;
    }
    cfg = gpt2rt_config_get(ctx);
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    int BT = cfg.batch_size * cfg.seq_len;
    printf("bench_cpu: GPT-2 %.1fM (L=%d C=%d), B=%d T=%d, fp32, %d threads, %s\n", (double)plan.n_params / 1e6,
           cfg.n_layer, cfg.n_embd, cfg.batch_size, cfg.seq_len, cfg.n_threads, cpu);
    int32_t *x = (int32_t *)malloc(sizeof(int32_t) * (size_t)BT), *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)BT);
    uint64_t s = 1;
    double tf = 0, tb = 0, tu = 0;
    for (int k = -1; k < steps; k++) { /* step -1 warms up */
        for (int i = 0; i < BT; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (int32_t)((s >> 33) % 50257);
            y[i] = (int32_t)((s >> 13) % 50257);
        }
        float loss;
        gpt2rt_step_stats st;
        double t0 = now();
        gpt2rt_forward(ctx, x, y, &loss);
        double t1 = now();
        gpt2rt_backward(ctx);
        double t2 = now();
        if (gpt2rt_update(ctx, &st) != GPT2RT_OK) { fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx)); return 1; }
        double t3 = now();
        if (k >= 0) { tf += t1 - t0; tb += t2 - t1; tu += t3 - t2; }
        printf("step %2d: loss %.4f  %.0f ms (forward %.0f, backward %.0f, update %.0f)\n", k, loss,
               (t3 - t0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3);
    }
    double t = (tf + tb + tu) / steps, tps = BT / t;
    printf("\nmean of %d steps: %.0f ms per step (forward %.0f, backward %.0f, update %.0f)\n", steps, t * 1e3,
           tf / steps * 1e3, tb / steps * 1e3, tu / steps * 1e3);
    printf("tokens/s: %.1f\n", tps);
    printf("GFLOP/s:  %.1f (model FLOPs, %.2f GFLOP per token: 6 x matrix parameters + 12 L C T)\n",
           tps * plan.flops_per_token / 1e9, plan.flops_per_token / 1e9);
    printf("reference: llm.c's CPU trainer (train_gpt2.c, same shape) does about 88 tokens/s on this kind of 2-core "
           "machine; target >= 150 tokens/s\n");
    gpt2rt_free(ctx);
    free(x); free(y);
    return 0;
}
