/* tools/bench_threads.c - the measurement behind the CPU backend's thread choice
   (src/cpu/ops.h, gpt2rt__cpu_nt): each op's time on 1 thread and on N (default
   the machine's cores) over sizes that double, each after a pause of single-thread
   work (as between a step's ops, so the other threads have gone idle), the median
   of many repetitions. Prints the time per unit of work (flops for the matrix
   product; elements for the others) on one thread, then each size's 1-thread and
   N-thread times and the size from which N threads are faster. A benchmark, not a test.
   usage: bench_threads [-threads N] [-gap US] [-ms MS] */
#define GPT2RT_CPU_WORK_PER_THREAD 0 /* every op on the count it is given: the choice measured, not applied */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#define CLI_PROG "bench_threads"
#include "../tools/cli.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double median(double *v, int n) { /* sorts v */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

enum { OP_GEMM, OP_RESID, OP_LN, OP_GELU, OP_ATT, N_OP };
static const char *op_name[N_OP] = {"matmul (M x 48 x 16)", "residual add", "layernorm (C=16)", "gelu", "attention (T=23, HS=8)"};
static const char *op_unit[N_OP] = {"flop", "element", "element", "element", "score"};

static float *A, *Bm, *Cm, *X, *Y, *M1, *M2, *G, *ws, *scr;
static volatile float sink;

/* single-thread work for about us microseconds */
static void pause_work(double us) {
    double t0 = cli_now();
    float s = 0;
    while ((cli_now() - t0) * 1e6 < us)
        for (int i = 0; i < 256; i++) s += X[i] * 0.5f;
    sink = s;
}

/* run op at size n (its units of work: *work) on nt threads */
static void run_op(int op, int64_t n, int nt, double *work) {
    switch (op) {
    case OP_GEMM: gpt2rt__sgemm(0, 1, n, 48, 16, A, 16, Bm, 16, NULL, 0, Cm, 48, ws, nt); *work = 2.0 * n * 48 * 16; break;
    case OP_RESID: gpt2rt__cpu_residual_add(Y, X, n, nt); *work = (double)n; break;
    case OP_LN: gpt2rt__cpu_layernorm_forward(Y, M1, M2, X, G, G, n / 16, 16, nt); *work = (double)(n / 16 * 16); break;
    case OP_GELU: gpt2rt__cpu_gelu_forward(Y, X, n, nt); *work = (double)n; break;
    case OP_ATT: { /* n / (T*T*HS) heads of T=23 queries at HS=8, width 16 (2 heads) */
        int64_t T = 23, bh = n / (T * T * 8), b = bh / 2 > 0 ? bh / 2 : 1;
        gpt2rt__drop no;
        memset(&no, 0, sizeof no);
        gpt2rt__cpu_attention_forward_masked(Y, M1, X, scr, b, T, 16, 2, 0, &no, nt);
        *work = (double)(b * 2 * T * (T + 1) / 2 * 8);
        break; }
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int nt = gpt2rt__default_threads(), gap = 300, ms = 40;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *k = a + (a[0] == '-' && a[1] == '-');
        if (!strcmp(k, "-h") || !strcmp(k, "-help")) {
            printf("usage: bench_threads [-threads N] [-gap US] [-ms MS]\n"
                   "  each CPU op's time on 1 and N threads (default: the machine's cores) over doubling sizes,\n"
                   "  each run after US microseconds of single-thread work (default 300), MS ms a size (default 40)\n");
            return 0;
        }
        if (i + 1 >= argc) { fprintf(stderr, "bench_threads: %s needs a value (see --help)\n", a); return 2; }
        const char *v = argv[++i];
        int ok;
        if (!strcmp(k, "-threads")) ok = arg_int(a, v, 2, 1024, &nt);
        else if (!strcmp(k, "-gap")) ok = arg_int(a, v, 0, 1000000, &gap);
        else if (!strcmp(k, "-ms")) ok = arg_int(a, v, 1, 100000, &ms);
        else { fprintf(stderr, "bench_threads: unknown option %s (see --help)\n", a); return 2; }
        if (!ok) return 2;
    }
    if (nt < 2) nt = 2; /* one core: still the cost of a team of two */
    const int64_t NMAX = (int64_t)1 << 21;
    A = (float *)malloc(sizeof(float) * NMAX * 16); Bm = (float *)malloc(sizeof(float) * 48 * 16);
    Cm = (float *)malloc(sizeof(float) * NMAX * 48);
    X = (float *)malloc(sizeof(float) * NMAX * 3); Y = (float *)malloc(sizeof(float) * NMAX);
    M1 = (float *)malloc(sizeof(float) * NMAX); M2 = (float *)malloc(sizeof(float) * NMAX);
    G = (float *)malloc(sizeof(float) * 16);
    ws = (float *)aligned_alloc(64, (gpt2rt__sgemm_workspace_bytes(nt) + 63) / 64 * 64);
    scr = (float *)malloc(sizeof(float) * (size_t)nt * 64);
    if (!A || !Bm || !Cm || !X || !Y || !M1 || !M2 || !G || !ws || !scr) { fprintf(stderr, "bench_threads: out of memory\n"); return 1; }
    for (int64_t i = 0; i < NMAX * 16; i++) A[i] = (float)(i % 7) * 0.1f;
    for (int64_t i = 0; i < 48 * 16; i++) Bm[i] = (float)(i % 5) * 0.1f;
    for (int64_t i = 0; i < NMAX * 3; i++) X[i] = (float)(i % 11) * 0.1f - 0.5f;
    for (int i = 0; i < 16; i++) G[i] = 1.0f;
    printf("bench_threads: 1 against %d threads, each run after %d us of single-thread work, median of %d ms a size\n",
           nt, gap, ms);
    for (int op = 0; op < N_OP; op++) {
        int64_t n0 = op == OP_GEMM ? 16 : op == OP_ATT ? 23 * 23 * 8 * 2 : 1024;
        int64_t nmax = op == OP_GEMM ? ((int64_t)1 << 16) : op == OP_ATT ? 23 * 23 * 8 * 2 * 1024 : NMAX;
        double cross = -1, per1 = 0;
        printf("\n%s: %12s %10s %10s %7s\n", op_name[op], op_unit[op], "1 thread", "threads", "ratio");
        for (int64_t n = n0; n <= nmax; n *= 2) {
            double t[2], work = 0;
            for (int s = 0; s < 2; s++) {
                int k = s ? nt : 1, reps = 0;
                double v[4096], spent = 0;
                while (reps < 4096 && (reps < 5 || spent < ms * 1e-3)) {
                    pause_work(gap);
                    double a = cli_now();
                    run_op(op, n, k, &work);
                    v[reps] = cli_now() - a;
                    spent += v[reps] + gap * 1e-6;
                    reps++;
                }
                t[s] = median(v, reps);
            }
            if (per1 == 0 || t[0] / work < per1) per1 = t[0] / work; /* the best rate of the sizes */
            printf("  %*s%12.0f %8.1fus %8.1fus %7.2f\n", (int)strlen(op_name[op]), "", work, t[0] * 1e6, t[1] * 1e6, t[0] / t[1]);
            if (cross < 0 && t[1] < t[0]) cross = work;
            if (cross >= 0 && t[1] >= t[0]) cross = -1; /* not yet for good */
        }
        if (cross > 0)
            printf("  %s: %.3f ns a %s on 1 thread (the best size); %d threads faster from %.0f %ss on\n", op_name[op],
                   per1 * 1e9, op_unit[op], nt, cross, op_unit[op]);
        else
            printf("  %s: %.3f ns a %s on 1 thread (the best size); %d threads faster at no size up to the largest\n",
                   op_name[op], per1 * 1e9, op_unit[op], nt);
    }
    return 0;
}
