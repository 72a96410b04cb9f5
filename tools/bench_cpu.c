/* tools/bench_cpu.c - `make bench`: full training steps (forward, backward, AdamW)
   of the GPT-2 124M shape in fp32 on the CPU backend; prints tokens/s, GFLOP/s,
   the time of each phase, where the time goes per op class (the CPU backend's
   private profile, ctx->prof), and the step's rate against the header's matrix
   product alone on the same shapes, timed in the same run (kernels/cpu_matmul.c's
   15 cases: fwd, dinp, dW of the 5 GPT-2 weight shapes). A benchmark, not a test.
   Then the chunked classifier: gpt2rt_step on two contexts of this shape, the
   whole batch's logits and classifier_chunk = -chunk tokens (default half the batch's
   tokens, 0: skipped), alternated step by step so both see the same machine, and the
   plan's bytes at 124M, B=16, T=1024, where the logits dominate.
   usage: bench_cpu [-steps N] [-batch B] [-seq T] [-layers L] [-threads N] [-chunk N] */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#define CLI_PROG "bench_cpu"
#include "../tools/cli.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* seconds of the header's matrix product alone on one of kernels/cpu_matmul.c's cases
   (mode 0 fwd: (M,K) x (N,K)^T + bias; 1 dinp: (M,K) x (K,N); 2 dW: (K,M)^T x (K,N) +=),
   best of reps after a warm-up, as the lab times it */
static double sgemm_seconds(int mode, int64_t M, int64_t N, int64_t K, int nt, int reps) {
    int ta = mode == 2, tb = mode == 0;
    int64_t asz = M * K, bsz = N * K;
    float *A = (float *)malloc(sizeof(float) * (size_t)asz), *B = (float *)malloc(sizeof(float) * (size_t)bsz);
    float *bias = (float *)malloc(sizeof(float) * (size_t)N), *C = (float *)calloc((size_t)(M * N), sizeof(float));
    void *ws = malloc(gpt2rt__sgemm_workspace_bytes(nt) + 64);
    float *wsa = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    uint64_t s = 7;
    for (int64_t i = 0; i < asz; i++) { s = s * 6364136223846793005ull + 1; A[i] = (float)((s >> 40) & 0xFFFF) / 65536.0f - 0.5f; }
    for (int64_t i = 0; i < bsz; i++) { s = s * 6364136223846793005ull + 1; B[i] = (float)((s >> 40) & 0xFFFF) / 65536.0f - 0.5f; }
    for (int64_t i = 0; i < N; i++) bias[i] = 0.01f * (float)(i % 7);
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        double t0 = cli_now();
        gpt2rt__sgemm(ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, mode == 0 ? bias : NULL, mode == 2, C, N, wsa, nt);
        double dt = cli_now() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    free(A); free(B); free(bias); free(C); free(ws);
    return best;
}

/* The per-op table (ms per step, share of the step, GFLOP/s where the op has a FLOP
   count), then the matrix products' rate in the step against the same products timed
   alone: what the step would take if everything but the matrix products cost nothing. */
static void print_profile(const gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan, const double *prof, int steps,
                          double t_step) {
    const gpt2rt__dims *d = &ctx->d;
    double BT = (double)d->BT, C = (double)d->C, L = (double)d->L, Vp = (double)d->Vp, T = (double)d->T;
    /* matrix products: forward 2 BT IC OC each, backward twice that (dinp and dW) */
    double mm_fwd = 2.0 * BT * L * (3 * C * C + C * C + 4 * C * C + 4 * C * C), head_fwd = 2.0 * BT * C * Vp;
    /* attention as computed (causal: query t scores t+1 keys): forward q.k and p.v,
       2 * (T+1)/2 * C * 2 FLOPs a token a layer; the backward recomputes q.k and runs
       dP, dV, dK, dQ: 5 such products where the forward runs 2 */
    double att_fwd = L * BT * 2.0 * (T + 1.0) * C;
    static const char *names[GPT2RT__PROF_COUNT] = {
        "matmul fwd (layers)", "matmul bwd (layers)", "LM head fwd", "LM head bwd", "attention fwd",
        "attention bwd", "GELU", "LayerNorm", "classifier (softmax+CE)", "residual, embed, zero", "update: grad norm",
        "update: AdamW"};
    double flops[GPT2RT__PROF_COUNT] = {mm_fwd, 2 * mm_fwd, head_fwd, 2 * head_fwd, att_fwd, 2.5 * att_fwd};
    double sum = 0.0;
    printf("\nwhere the time goes (mean of %d steps; wall time of each op class, both threads' work inside it):\n", steps);
    printf("  %-26s %9s %7s %9s\n", "op", "ms/step", "% step", "GFLOP/s");
    for (int i = 0; i < GPT2RT__PROF_COUNT; i++) {
        double ms = prof[i] / steps * 1e3;
        sum += prof[i] / steps;
        if (flops[i] > 0) printf("  %-26s %9.1f %6.1f%% %9.1f\n", names[i], ms, 100.0 * ms / (t_step * 1e3), flops[i] / (ms * 1e-3) * 1e-9);
        else printf("  %-26s %9.1f %6.1f%% %9s\n", names[i], ms, 100.0 * ms / (t_step * 1e3), "");
    }
    printf("  %-26s %9.1f %6.1f%% %9s\n", "the rest (driver, calls)", (t_step - sum) * 1e3, 100.0 * (t_step - sum) / t_step, "");
    printf("  %-26s %9.1f %6.1f%%\n", "step", t_step * 1e3, 100.0);
    /* the same products alone, kernels/cpu_matmul.c's cases at this BT, each weighted
       by how often the step runs it */
    static const int shp[5][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50304}};
    double t_alone = 0.0, f_alone = 0.0;
    for (int si = 0; si < 5; si++) {
        int64_t IC = shp[si][0] * d->C / 768, OC = si == 4 ? d->Vp : shp[si][1] * d->C / 768, M = d->BT;
        double times = si == 4 ? 1.0 : L;
        for (int mode = 0; mode < 3; mode++) {
            double sec = mode == 0 ? sgemm_seconds(0, M, OC, IC, d->n_threads, si == 4 ? 3 : 10)
                       : mode == 1 ? sgemm_seconds(1, M, IC, OC, d->n_threads, si == 4 ? 3 : 10)
                                   : sgemm_seconds(2, OC, IC, M, d->n_threads, si == 4 ? 3 : 10);
            t_alone += times * sec;
            f_alone += times * 2.0 * (double)M * (double)IC * (double)OC;
        }
    }
    double mm_step = prof[GPT2RT__PROF_MM_FWD] + prof[GPT2RT__PROF_MM_BWD] + prof[GPT2RT__PROF_HEAD_FWD] + prof[GPT2RT__PROF_HEAD_BWD];
    double r_alone = f_alone / t_alone * 1e-9, r_step = plan->flops_per_token * BT / t_step * 1e-9;
    printf("\nmatmul alone (gpt2rt__sgemm, kernels/cpu_matmul.c's 15 cases at M=%lld, this run): %.1f GFLOP/s, %.1f ms "
           "for one step's products\n", (long long)d->BT, r_alone, t_alone * 1e3);
    printf("matmul inside the step (incl. bias sums):  %.1f GFLOP/s, %.1f ms\n", f_alone / (mm_step / steps) * 1e-9,
           mm_step / steps * 1e3);
    printf("step = %.0f%% of the matmul rate (%.1f model GFLOP/s against %.1f)\n", 100.0 * r_step / r_alone, r_step,
           r_alone);
}

/* whole batch against classifier_chunk = chunk, alternated: the mean and best ms of a
   gpt2rt_step (forward with the head's backward fused, backward, AdamW) */
static void bench_chunk(gpt2rt_config cfg, int chunk, int rounds) {
    gpt2rt_ctx *ctx[2] = {NULL, NULL};
    gpt2rt_config cc[2] = {cfg, cfg};
    cc[1].classifier_chunk = chunk;
    for (int i = 0; i < 2; i++)
        if (gpt2rt_create(&ctx[i], &cc[i]) != GPT2RT_OK) {
            fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx[i]));
            gpt2rt_free(ctx[0]); gpt2rt_free(ctx[1]);
            return;
        }
    int BT = cfg.batch_size * cfg.seq_len;
    int32_t *x = (int32_t *)malloc(sizeof(int32_t) * (size_t)BT), *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)BT);
    double sum[2] = {0, 0}, best[2] = {1e30, 1e30};
    uint64_t s = 3;
    for (int r = -1; r < rounds; r++) /* round -1 warms both up */
        for (int i = 0; i < 2; i++) {
            for (int k = 0; k < BT; k++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                x[k] = (int32_t)((s >> 33) % 50257); y[k] = (int32_t)((s >> 13) % 50257);
            }
            gpt2rt_step_stats st;
            double t0 = cli_now();
            if (gpt2rt_step(ctx[i], x, y, &st) != GPT2RT_OK) { fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx[i])); r = rounds; break; }
            double dt = cli_now() - t0;
            if (r >= 0) { sum[i] += dt; if (dt < best[i]) best[i] = dt; }
        }
    printf("\nclassifier_chunk (gpt2rt_step, %d alternated rounds): whole batch %.0f ms (best %.0f), chunks of %d tokens "
           "%.0f ms (best %.0f): %+.1f%% (best %+.1f%%); logits arena %.1f -> %.1f MiB\n", rounds,
           sum[0] / rounds * 1e3, best[0] * 1e3, chunk, sum[1] / rounds * 1e3, best[1] * 1e3,
           100.0 * (sum[1] / sum[0] - 1.0), 100.0 * (best[1] / best[0] - 1.0),
           (double)ctx[0]->arena_bytes[GPT2RT_MEM_LOGITS] / 1048576.0, (double)ctx[1]->arena_bytes[GPT2RT_MEM_LOGITS] / 1048576.0);
    gpt2rt_free(ctx[0]); gpt2rt_free(ctx[1]);
    free(x); free(y);
    /* where the logits dominate: the plan only, nothing allocated */
    gpt2rt_config big = {0};
    big.batch_size = 16; big.seq_len = 1024;
    gpt2rt_memory_plan p0, p1;
    gpt2rt_plan(&big, &p0);
    big.classifier_chunk = 1024;
    gpt2rt_plan(&big, &p1);
    printf("plan at 124M, B=16, T=1024 (CPU, fp32): logits %.2f GiB of %.2f GiB; classifier_chunk = 1024: logits %.2f "
           "GiB of %.2f GiB (saves %.2f GiB)\n", p0.bytes[0][GPT2RT_MEM_LOGITS] / 1073741824.0, p0.total[0] / 1073741824.0,
           p1.bytes[0][GPT2RT_MEM_LOGITS] / 1073741824.0, p1.total[0] / 1073741824.0,
           ((double)p0.total[0] - (double)p1.total[0]) / 1073741824.0);
}

static void usage(void) {
    printf("usage: bench_cpu [-steps N] [-batch B] [-seq T] [-layers L] [-threads N] [-chunk N]   (also --steps ...)\n"
           "  full training steps of the GPT-2 124M shape (fp32, CPU); defaults: 5 steps, B=4, T=64, 12 layers;\n"
           "  then gpt2rt_step with classifier_chunk = N against the whole batch (default B*T/2; 0: skipped)\n");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int steps = 5, chunk = -1;
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
        else if (!strcmp(k, "-chunk")) ok = arg_int(a, v, 0, 1 << 30, &chunk);
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
    double prof[GPT2RT__PROF_COUNT] = {0};
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
        double t0 = cli_now();
        gpt2rt_forward(ctx, x, y, &loss);
        double t1 = cli_now();
        gpt2rt_backward(ctx);
        double t2 = cli_now();
        if (gpt2rt_update(ctx, &st) != GPT2RT_OK) { fprintf(stderr, "gpt2rt: %s\n", gpt2rt_last_error(ctx)); return 1; }
        double t3 = cli_now();
        if (k >= 0) { tf += t1 - t0; tb += t2 - t1; tu += t3 - t2; }
        if (k == -1) ctx->prof = prof; /* the timed steps' ops only */
        printf("step %2d: loss %.4f  %.0f ms (forward %.0f, backward %.0f, update %.0f)\n", k, loss,
               (t3 - t0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3);
    }
    double t = (tf + tb + tu) / steps, tps = BT / t;
    printf("\nmean of %d steps: %.0f ms per step (forward %.0f, backward %.0f, update %.0f)\n", steps, t * 1e3,
           tf / steps * 1e3, tb / steps * 1e3, tu / steps * 1e3);
    printf("tokens/s: %.1f\n", tps);
    printf("GFLOP/s:  %.1f (model FLOPs, %.2f GFLOP per token: 6 x matrix parameters + 12 L C T)\n",
           tps * plan.flops_per_token / 1e9, plan.flops_per_token / 1e9);
    print_profile(ctx, &plan, prof, steps, t);
    printf("reference: llm.c's CPU trainer (train_gpt2.c, same shape) does about 88 tokens/s on this kind of 2-core "
           "machine; target >= 150 tokens/s\n");
    gpt2rt_free(ctx);
    free(x); free(y);
    if (chunk < 0) chunk = BT / 2;
    if (chunk > 0 && chunk < BT) bench_chunk(cfg, chunk, steps);
    return 0;
}
