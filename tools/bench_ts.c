/* tools/bench_ts.c - `make bench-ts` (part of `make bench`): training windows/s of the
   GPT4TS-style forecaster (input = PATCHES, head = REGRESSION) on the CPU backend:
   full steps (RevIN, patching, in_layer, GPT-2 blocks, ln_f, out_layer, MSE, backward,
   AdamW) on ETTh-like windows. tools/bench_torch_ts.py is the same model in PyTorch;
   the Makefile prints both and the ratio. A benchmark, not a test.
   The default shape is examples/timeseries.c's --preset cpu (ETTh: 7 channels,
   lookback 336, patch 16, stride 16 (22 patches), horizon 96; 1 layer, 2 heads, width 16,
   batch 16 windows, dropout 0.3 before the head; attention and MLP frozen, as GPT4TS
   does); every part of it is a flag:
   -head next-patch times aLLM4TS's stage 1 instead (head = NEXT_PATCH: out_layer at every
   position against the next patch, no padding, no targets; `make bench-ts` runs it at
   BENCH_TS_ALLM4TS's shape, the script's 1024-step windows and 6 blocks at width 64).
   -backend cuda -precision bf16 time it on a GPU: the file compiled by nvcc as CUDA
   (make gpu-build's build/bench_ts_nvcc; make bench-gpu runs aLLM4TS stage 1 at its
   scripts' shape that way); compiled by a C compiler, -backend cuda is refused.
   usage: bench_ts [-steps N] [-batch B] [-lookback L] [-patch P] [-stride S]
                   [-channels M] [-horizon H] [-layers N] [-heads N] [-width C]
                   [-freeze 0|1] [-dropout P] [-head-dropout P] [-threads N]
                   [-head regression|next-patch] [-backend cpu|cuda] [-precision fp32|bf16] */
#define _POSIX_C_SOURCE 200809L /* clock_gettime(CLOCK_PROCESS_CPUTIME_ID) under -std=c11 */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#define CLI_PROG "bench_ts"
#include "../tools/cli.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the process's CPU time: on a machine shared with other jobs it counts the work, not the waits */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double median(double *v, int n) { /* sorts v */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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


static void usage(void) {
    printf("usage: bench_ts [-steps N] [-batch B] [-lookback L] [-patch P] [-stride S] [-channels M] [-horizon H]\n"
           "                [-layers N] [-heads N] [-width C] [-freeze 0|1] [-dropout P] [-head-dropout P] [-threads N]\n"
           "                [-head regression|next-patch] [-backend cpu|cuda] [-precision fp32|bf16]\n"
           "  training windows/s of examples/timeseries' --preset cpu shape (the defaults); also --steps ...;\n"
           "  -head next-patch: aLLM4TS's stage 1 (next-patch MSE at every position, no targets)\n");
}


int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int steps = 20;
    gpt2rt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.input = GPT2RT_INPUT_PATCHES; cfg.head = GPT2RT_HEAD_REGRESSION;
    cfg.seq_len = 336; cfg.patch_len = 16; cfg.patch_stride = 16; cfg.n_channels = 7; cfg.horizon = 96;
    cfg.n_layer = 1; cfg.n_head = 2; cfg.n_embd = 16; cfg.batch_size = 16;
    cfg.head_dropout = 0.3f;
    int freeze = 1; /* attention and MLP, as GPT4TS */
    cfg.lr = 1e-3f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *k = a + (a[0] == '-' && a[1] == '-'); /* -steps or --steps */
        if (!strcmp(k, "-h") || !strcmp(k, "-help")) { usage(); return 0; }
        if (i + 1 >= argc) { fprintf(stderr, "bench_ts: %s needs a value (see --help)\n", a); return 2; }
        const char *v = argv[++i];
        int ok;
        if (!strcmp(k, "-steps")) ok = arg_int(a, v, 1, 1000000, &steps);
        else if (!strcmp(k, "-batch")) ok = arg_int(a, v, 1, 1 << 20, &cfg.batch_size);
        else if (!strcmp(k, "-lookback")) ok = arg_int(a, v, 1, 1 << 20, &cfg.seq_len);
        else if (!strcmp(k, "-patch")) ok = arg_int(a, v, 1, 1 << 20, &cfg.patch_len);
        else if (!strcmp(k, "-stride")) ok = arg_int(a, v, 1, 1 << 20, &cfg.patch_stride);
        else if (!strcmp(k, "-channels")) ok = arg_int(a, v, 1, 1 << 20, &cfg.n_channels);
        else if (!strcmp(k, "-horizon")) ok = arg_int(a, v, 1, 1 << 20, &cfg.horizon);
        else if (!strcmp(k, "-layers")) ok = arg_int(a, v, 1, 1024, &cfg.n_layer);
        else if (!strcmp(k, "-heads")) ok = arg_int(a, v, 1, 1024, &cfg.n_head);
        else if (!strcmp(k, "-width")) ok = arg_int(a, v, 1, 65536, &cfg.n_embd);
        else if (!strcmp(k, "-freeze")) ok = arg_int(a, v, 0, 1, &freeze);
        else if (!strcmp(k, "-dropout")) ok = arg_realf(a, v, 0, 1, 0, 1, &cfg.dropout);
        else if (!strcmp(k, "-head-dropout")) ok = arg_realf(a, v, 0, 1, 0, 1, &cfg.head_dropout);
        else if (!strcmp(k, "-threads")) ok = arg_int(a, v, 0, 1024, &cfg.n_threads);
        else if (!strcmp(k, "-backend")) {
            ok = !strcmp(v, "cpu") || !strcmp(v, "cuda");
            if (ok) cfg.backend = !strcmp(v, "cpu") ? GPT2RT_BACKEND_CPU : GPT2RT_BACKEND_CUDA;
            else fprintf(stderr, "bench_ts: %s '%s': expected cpu or cuda\n", a, v);
        }
        else if (!strcmp(k, "-precision")) {
            ok = !strcmp(v, "fp32") || !strcmp(v, "bf16");
            if (ok) cfg.precision = !strcmp(v, "fp32") ? GPT2RT_PRECISION_FP32 : GPT2RT_PRECISION_BF16;
            else fprintf(stderr, "bench_ts: %s '%s': expected fp32 or bf16\n", a, v);
        }
        else if (!strcmp(k, "-head")) {
            ok = !strcmp(v, "regression") || !strcmp(v, "next-patch");
            if (ok) cfg.head = !strcmp(v, "regression") ? GPT2RT_HEAD_REGRESSION : GPT2RT_HEAD_NEXT_PATCH;
            else fprintf(stderr, "bench_ts: %s '%s': expected regression or next-patch\n", a, v);
        }
        else { fprintf(stderr, "bench_ts: unknown option %s (see --help)\n", a); return 2; }
        if (!ok) return 2;
    }
    cfg.frozen = freeze ? GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP : 0;
    int next = cfg.head == GPT2RT_HEAD_NEXT_PATCH;
    if (next) cfg.horizon = 0; /* the targets are the window's own next patches */
    /* the positions the patches need (GPT-2's 1024 otherwise: a bigger wpe, the same work);
       NEXT_PATCH does not pad: one patch fewer */
    cfg.max_seq_len = (cfg.seq_len - cfg.patch_len) / (cfg.patch_stride > 0 ? cfg.patch_stride : 1) + (next ? 1 : 2);
    gpt2rt_memory_plan plan;
    gpt2rt_ctx *ctx = NULL;
    if (gpt2rt_plan(&cfg, &plan) != GPT2RT_OK) { fprintf(stderr, "bench_ts: %s\n", plan.error); return 2; }
    if (gpt2rt_create(&ctx, &cfg) != GPT2RT_OK) { fprintf(stderr, "bench_ts: %s\n", gpt2rt_last_error(ctx)); return 1; }
    cfg = gpt2rt_config_get(ctx);
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    int B = cfg.batch_size, L = cfg.seq_len, M = cfg.n_channels, H = cfg.horizon;
    printf("bench_ts: %s, %lld parameters (L=%d NH=%d C=%d), windows B=%d lookback %d patch %d stride %d (%d patches) "
           "channels %d horizon %d, %s, dropout %g, head dropout %g, %s, %s, %d threads, %s\n",
           next ? "aLLM4TS stage 1 (next patch)" : "GPT4TS (regression head)", (long long)plan.n_params, cfg.n_layer,
           cfg.n_head, cfg.n_embd, B, L, cfg.patch_len, cfg.patch_stride, cfg.max_seq_len, M, H,
           cfg.frozen ? "attention + MLP frozen" : "nothing frozen", (double)cfg.dropout,
           (double)cfg.head_dropout, cfg.precision == GPT2RT_PRECISION_BF16 ? "bf16" : "fp32",
           cfg.backend == GPT2RT_BACKEND_CUDA ? "CUDA backend" : "CPU backend", cfg.n_threads, cpu);
    printf("plan: %.3f GiB of arenas + %.3f GiB of estimated overhead on device 0\n",
           (double)plan.total[0] / 1073741824.0, (double)plan.overhead[0] / 1073741824.0);
    /* ETTh-like data: per channel a daily and a weekly cycle, a drift and noise */
    int64_t len = (int64_t)L + H + B * 8;
    float *series = (float *)malloc(sizeof(float) * (size_t)(len * M));
    float *x = (float *)malloc(sizeof(float) * (size_t)B * L * M), *y = (float *)malloc(sizeof(float) * (size_t)B * H * M);
    uint64_t s = 1;
    for (int64_t t = 0; t < len; t++)
        for (int m = 0; m < M; m++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double noise = (double)(s >> 11) / 9007199254740992.0 - 0.5;
            series[t * M + m] = (float)(sin(2 * GPT2RT__PI * t / 24.0 + m) * (1 + 0.2 * m) +
                                        0.5 * sin(2 * GPT2RT__PI * t / 168.0) + 1e-3 * t + 0.3 * noise);
        }
    double total = 0, *dts = (double *)malloc(sizeof(double) * (size_t)steps), *cts = (double *)malloc(sizeof(double) * (size_t)steps);
    for (int k = -2; k < steps; k++) { /* two steps warm up */
        int64_t t0 = (int64_t)(((unsigned)k + 2u) % 8u); /* windows start t0, t0 + 8, ...: a new batch each step */
        for (int b = 0; b < B; b++) {
            memcpy(x + (size_t)b * L * M, series + (t0 + (int64_t)b * 8) * M, sizeof(float) * (size_t)L * M);
            memcpy(y + (size_t)b * H * M, series + (t0 + (int64_t)b * 8 + L) * M, sizeof(float) * (size_t)H * M);
        }
        gpt2rt_step_stats st;
        double a = cli_now(), ca = cpu_now();
        if (gpt2rt_step_series(ctx, x, next ? NULL : y, &st) != GPT2RT_OK) { fprintf(stderr, "bench_ts: %s\n", gpt2rt_last_error(ctx)); return 1; }
        double dt = cli_now() - a, ct = cpu_now() - ca;
        if (k >= 0) { total += dt; dts[k] = dt; cts[k] = ct; }
        if (k < 0 || k % 5 == 4 || k == steps - 1)
            printf("step %3d: loss %.4f  %.1f ms\n", k, (double)st.loss, dt * 1e3);
    }
    /* the median step: a shared machine's load spikes move the mean, not the median */
    double med = median(dts, steps), cmed = median(cts, steps);
    printf("\n%d steps of %d windows: median %.2f ms, mean %.2f ms\n", steps, B, med * 1e3, total / steps * 1e3);
    printf("windows/s: %.1f (median step)\n", B / med);
    printf("cpu ms/step: %.2f (median, process CPU time of all threads)\n", cmed * 1e3);
    free(dts);
    free(cts);
    gpt2rt_free(ctx);
    free(series); free(x); free(y);
    return 0;
}
