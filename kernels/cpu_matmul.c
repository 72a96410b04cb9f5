/* gpt2rt CPU fp32 matmul lab: validates and times gpt2rt__sgemm, the header's
 * matrix product (section 7.2), against a double-accumulating reference.
 *
 * Build + run:
 *   gcc -O3 -std=c11 -fopenmp kernels/cpu_matmul.c -o /tmp/cpu_matmul -lm
 *   OMP_NUM_THREADS=2 /tmp/cpu_matmul ; OMP_NUM_THREADS=1 /tmp/cpu_matmul
 * Options: /tmp/cpu_matmul quick   (validation only, skip timing)
 *          /tmp/cpu_matmul bench TA TB M N K REPS   (one shape; env CPUTIME=1 times
 *          process CPU seconds instead of wall clock, useful on a shared machine)
 * Macros (gpt2rt.h's manual): -DGPT2RT_SGEMM_FORCE_PATH=1 (portable C) / =2 (AVX2) to test the
 * other paths; -DGPT2RT_SGEMM_KC/MC/NC=... to sweep blocking.
 */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"


/* ============================ lab harness ============================ */
#ifndef GPT2RT_CPU_MATMUL_NO_MAIN
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int g_cputime; /* bench: measure process CPU seconds (robust on a shared machine) */
static double now_s(void) {
    if (g_cputime) return (double)clock() / (double)CLOCKS_PER_SEC;
#ifdef _OPENMP
    return omp_get_wtime();
#else
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#endif
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void *xalloc(size_t bytes) {
    void *p = malloc(bytes + 64);
    if (!p) { fprintf(stderr, "oom\n"); exit(1); }
    return p;
}
/* 64-byte aligned view of a raw allocation */
static void *align64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}
static int max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* reference value of one C element (double accumulation) and sum |a||b| */
static double ref_elem(int ta, int tb, int64_t m, int64_t n, int64_t K, const float *A, int64_t lda,
                       const float *B, int64_t ldb, double *absum) {
    double s = 0.0, sa = 0.0;
    int64_t k;
    for (k = 0; k < K; k++) {
        double a = ta ? A[k * lda + m] : A[m * lda + k];
        double b = tb ? B[n * ldb + k] : B[k * ldb + n];
        s += a * b;
        sa += fabs(a * b);
    }
    *absum = sa;
    return s;
}

typedef struct {
    int ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    int use_bias, accumulate;
} tcase;

static float *g_ws;
static size_t g_ws_bytes;

/* returns max relative error (|c-ref| / (sum|ab| + |c0| + |bias|)), checking `samples` elements (0: all) */
static double run_case(const tcase *t, int samples, int nthreads_a, int nthreads_b, int *det_ok) {
    int64_t arows = t->ta ? t->K : t->M, brows = t->tb ? t->N : t->K;
    size_t asz = (size_t)(arows ? arows : 1) * (size_t)t->lda, bsz = (size_t)(brows ? brows : 1) * (size_t)t->ldb;
    size_t csz = (size_t)(t->M ? t->M : 1) * (size_t)t->ldc;
    float *A = (float *)xalloc(asz * 4), *B = (float *)xalloc(bsz * 4), *bias = (float *)xalloc((size_t)(t->N + 1) * 4);
    float *C0 = (float *)xalloc(csz * 4), *C = (float *)xalloc(csz * 4), *C2 = (float *)xalloc(csz * 4);
    double maxerr = 0.0;
    size_t i;
    int64_t m, n, s;
    for (i = 0; i < asz; i++) A[i] = frand();
    for (i = 0; i < bsz; i++) B[i] = frand();
    for (i = 0; i < (size_t)t->N; i++) bias[i] = frand();
    for (i = 0; i < csz; i++) C0[i] = frand();
    memcpy(C, C0, csz * 4);
    memcpy(C2, C0, csz * 4);
    set_threads(nthreads_a);
    gpt2rt__sgemm(t->ta, t->tb, t->M, t->N, t->K, A, t->lda, B, t->ldb, t->use_bias ? bias : NULL,
                  t->accumulate, C, t->ldc, g_ws, max_threads());
    set_threads(nthreads_b);
    gpt2rt__sgemm(t->ta, t->tb, t->M, t->N, t->K, A, t->lda, B, t->ldb, t->use_bias ? bias : NULL,
                  t->accumulate, C2, t->ldc, g_ws, max_threads());
    *det_ok = memcmp(C, C2, csz * 4) == 0;
    /* padding between rows (n >= N) must be untouched */
    for (m = 0; m < t->M; m++)
        for (n = t->N; n < t->ldc; n++)
            if (C[m * t->ldc + n] != C0[m * t->ldc + n]) maxerr = 1e30;
    {
        int64_t total = t->M * t->N, cnt = samples > 0 && samples < total ? samples : total;
        for (s = 0; s < cnt; s++) {
            double absum, ref, err, den;
            int64_t idx = cnt == total ? s : (int64_t)((rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull) >> 33) % total;
            m = idx / t->N;
            n = idx % t->N;
            ref = ref_elem(t->ta, t->tb, m, n, t->K, A, t->lda, B, t->ldb, &absum);
            den = absum;
            if (t->accumulate) { ref += C0[m * t->ldc + n]; den += fabs(C0[m * t->ldc + n]); }
            if (t->use_bias && !t->accumulate) { ref += bias[n]; den += fabs(bias[n]); }
            err = fabs((double)C[m * t->ldc + n] - ref) / (den + 1e-30);
            if (!(err <= maxerr)) maxerr = err; /* catches NaN */
        }
    }
    free(A); free(B); free(bias); free(C0); free(C); free(C2);
    return maxerr;
}

static double time_case(const tcase *t, int reps) {
    int64_t arows = t->ta ? t->K : t->M, brows = t->tb ? t->N : t->K;
    size_t asz = (size_t)arows * (size_t)t->lda, bsz = (size_t)brows * (size_t)t->ldb, csz = (size_t)t->M * (size_t)t->ldc;
    float *A = (float *)xalloc(asz * 4), *B = (float *)xalloc(bsz * 4), *bias = (float *)xalloc((size_t)t->N * 4);
    float *C = (float *)xalloc(csz * 4);
    double best = 1e30;
    size_t i;
    int r;
    for (i = 0; i < asz; i++) A[i] = frand();
    for (i = 0; i < bsz; i++) B[i] = frand();
    for (i = 0; i < (size_t)t->N; i++) bias[i] = frand();
    for (i = 0; i < csz; i++) C[i] = 0.0f;
    for (r = 0; r < reps + 1; r++) {
        double t0 = now_s(), dt;
        gpt2rt__sgemm(t->ta, t->tb, t->M, t->N, t->K, A, t->lda, B, t->ldb, t->use_bias ? bias : NULL,
                      t->accumulate, C, t->ldc, g_ws, max_threads());
        dt = now_s() - t0;
        if (r > 0 && dt < best) best = dt; /* first run is warm-up */
    }
    free(A); free(B); free(bias); free(C);
    return 2.0 * (double)t->M * (double)t->N * (double)t->K / best * 1e-9;
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    if (argc == 8 && strcmp(argv[1], "bench") == 0) { /* bench ta tb M N K reps */
        tcase t;
        void *raw;
        t.ta = atoi(argv[2]); t.tb = atoi(argv[3]);
        t.M = atoll(argv[4]); t.N = atoll(argv[5]); t.K = atoll(argv[6]);
        t.lda = t.ta ? t.M : t.K; t.ldb = t.tb ? t.K : t.N; t.ldc = t.N;
        t.use_bias = 0; t.accumulate = t.ta;
        g_ws_bytes = gpt2rt__sgemm_workspace_bytes(max_threads());
        g_cputime = getenv("CPUTIME") != NULL;
        raw = xalloc(g_ws_bytes);
        g_ws = (float *)align64(raw);
        printf("%.1f GFLOP/s\n", time_case(&t, atoi(argv[7])));
        free(raw);
        return 0;
    }
    int nthr = max_threads(), fails = 0;
    int ws_thr = nthr > 3 ? nthr : 3;
    void *ws_raw;
    static const int shapes[5][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50304}};
    int si, mi;
    gpt2rt__sg_impl im = gpt2rt__sg_select();
    g_ws_bytes = gpt2rt__sgemm_workspace_bytes(ws_thr);
    ws_raw = xalloc(g_ws_bytes);
    g_ws = (float *)align64(ws_raw);
    printf("kernel %dx%d, omp max threads %d, workspace %zu bytes (%d threads)\n", im.mr, im.nr, nthr,
           g_ws_bytes, ws_thr);

    /* ---- odd shapes: full check, determinism 1 vs 2 and 1 vs 3 threads ---- */
    {
        static const int64_t dims[][3] = {{1, 1, 1}, {1, 1000, 17}, {13, 1024, 17}, {128, 192, 64}, {128, 64, 192},
                                          {192, 64, 128}, {37, 1000, 300}, {25, 33, 513}, {7, 5, 0}, {0, 5, 3},
                                          {5, 0, 3}, {100, 31, 1}, {384, 97, 257}, {12, 32, 256}, {24, 64, 512},
                                          {1, 50304, 64}, {3, 7, 1100}};
        int nd = (int)(sizeof(dims) / sizeof(dims[0])), di, ta, tb, variant;
        double worst = 0.0;
        int det_all = 1, ncases = 0;
        for (di = 0; di < nd; di++)
            for (ta = 0; ta < 2; ta++)
                for (tb = 0; tb < 2; tb++)
                    for (variant = 0; variant < 3; variant++) {
                        tcase t;
                        int det;
                        double e;
                        t.ta = ta; t.tb = tb;
                        t.M = dims[di][0]; t.N = dims[di][1]; t.K = dims[di][2];
                        t.use_bias = variant == 1;
                        t.accumulate = variant == 2;
                        /* leading dims: tight for variant 0, padded otherwise */
                        t.lda = (ta ? t.M : t.K) + (variant ? 3 : 0);
                        t.ldb = (tb ? t.K : t.N) + (variant ? 5 : 0);
                        t.ldc = t.N + (variant ? 7 : 0);
                        if (t.lda < 1) t.lda = 1;
                        if (t.ldb < 1) t.ldb = 1;
                        if (t.ldc < 1) t.ldc = 1;
                        e = run_case(&t, 0, 1, (di & 1) ? 3 : 2, &det);
                        ncases++;
                        if (e > worst) worst = e;
                        if (!det) det_all = 0;
                        if (e > 1e-5 || !det) {
                            printf("FAIL odd M=%lld N=%lld K=%lld ta=%d tb=%d v=%d err=%.3g det=%d\n", (long long)t.M,
                                   (long long)t.N, (long long)t.K, ta, tb, variant, e, det);
                            fails++;
                        }
                    }
        printf("odd shapes: %d cases, max rel err %.3g, thread determinism %s\n", ncases, worst,
               det_all ? "bitwise OK" : "FAILED");
    }

    /* ---- GPT-2 124M shapes: sampled validation + determinism + timing ---- */
    printf("\n%-14s %-6s %6s %6s %6s %10s %5s %9s\n", "(IC,OC)", "mode", "M", "N", "K", "max_rel_err", "det",
           quick ? "" : "GFLOP/s");
    for (si = 0; si < 5; si++)
        for (mi = 0; mi < 3; mi++) {
            int IC = shapes[si][0], OC = shapes[si][1], BT = 256, det;
            double e, gf = 0.0;
            tcase t;
            const char *mname = mi == 0 ? "fwd" : mi == 1 ? "dinp" : "dW";
            if (mi == 0) { t.ta = 0; t.tb = 1; t.M = BT; t.N = OC; t.K = IC; t.use_bias = 1; t.accumulate = 0; }
            else if (mi == 1) { t.ta = 0; t.tb = 0; t.M = BT; t.N = IC; t.K = OC; t.use_bias = 0; t.accumulate = 0; }
            else { t.ta = 1; t.tb = 0; t.M = OC; t.N = IC; t.K = BT; t.use_bias = 0; t.accumulate = 1; }
            t.lda = t.ta ? t.M : t.K;
            t.ldb = t.tb ? t.K : t.N;
            t.ldc = t.N;
            e = run_case(&t, 3000, 1, nthr > 1 ? nthr : 2, &det);
            set_threads(nthr);
            if (!quick) gf = time_case(&t, OC > 10000 ? 3 : 10);
            if (e > 1e-5 || !det) fails++;
            printf("(%4d,%5d)   %-6s %6lld %6lld %6lld %10.2e %5s %9.1f\n", IC, OC, mname, (long long)t.M,
                   (long long)t.N, (long long)t.K, e, det ? "ok" : "FAIL", gf);
        }
    free(ws_raw);
    printf("\n%s (%d failures)\n", fails ? "FAILED" : "ALL OK", fails);
    return fails ? 1 : 0;
}
#endif /* GPT2RT_CPU_MATMUL_NO_MAIN */
