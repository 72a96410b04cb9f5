/* tools/ts_baselines.c - the yardsticks beside a model's test MSE (the held-out
   tables of docs/results/timeseries.md): three forecasters with no seed, on exactly the windows examples/timeseries
   scores (gpt2rt_series_load: the same borders, scaler and channel independence),
   MSE and MAE over every test window in the scaled data's units:
     last value      every step of the horizon = the lookback's last value;
     seasonal naive  step h = the lookback's step L - P + (h mod P), P = --period (24:
                     a day of hourly rows);
     linear          DLinear's idea without the decomposition (NLinear with RevIN, as
                     tools/ts_linear_ref.py for ETTh): each series normalised by its
                     lookback's mean and std, one Linear(L -> H) plus bias shared by the
                     channels, de-normalised; the exact least-squares fit on every
                     training window, rows weighted by the window's variance (so the
                     loss is in the scaled data's units), ridge chosen on validation
                     among 0.1, 1, 10, ..., 1e5 (the test split is never looked at).
   usage: ts_baselines --data FILE.csv --horizon H [--lookback 336] [--period 24] [--drop-last N]
   Prints one line a forecaster: "<name> val mse .. test mse .. mae .. windows N"; --drop-last N
   adds the test MSE over whole batches of N windows only (a drop_last=True test loader's). */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sums { double se, ae, se_dl; int64_t n, n_dl; } sums; /* _dl: the drop-last windows only */

/* the forecast (H) of series m of window x (L,M): kind 0 last value, 1 seasonal naive,
   2 linear with weights W (L+1, H) (last row: bias) */
static void forecast(int kind, const float *x, int64_t L, int64_t M, int64_t m, int64_t H, int64_t P, const double *W,
                     double *out) {
    if (kind == 0) { for (int64_t h = 0; h < H; h++) out[h] = x[(L - 1) * M + m]; return; }
    if (kind == 1) { for (int64_t h = 0; h < H; h++) out[h] = x[(L - P + h % P) * M + m]; return; }
    double mu = 0, var = 0;
    for (int64_t t = 0; t < L; t++) mu += x[t * M + m];
    mu /= (double)L;
    for (int64_t t = 0; t < L; t++) var += (x[t * M + m] - mu) * (x[t * M + m] - mu);
    double sd = sqrt(var / (double)L + 1e-5);
    for (int64_t h = 0; h < H; h++) {
        double s = W[L * H + h];
        for (int64_t t = 0; t < L; t++) s += (x[t * M + m] - mu) / sd * W[t * H + h];
        out[h] = s * sd + mu;
    }
}

/* drop (0: none): also sum over the first windows that fill whole batches of drop, as a
   test loader with drop_last=True and that batch size scores */
static sums score(gpt2rt_series *s, gpt2rt_series_split split, int kind, int64_t L, int64_t M, int64_t H, int64_t P,
                  const double *W, int64_t drop) {
    gpt2rt_series_info in;
    memset(&in, 0, sizeof in);
    (void)gpt2rt_series_info_get(s, &in);
    float *x = malloc(sizeof(float) * (size_t)(L * M)), *y = malloc(sizeof(float) * (size_t)(H * M));
    double *f = malloc(sizeof(double) * (size_t)H);
    sums r = {0, 0, 0, 0, 0};
    int64_t whole = drop > 0 ? in.windows[split] / drop * drop : 0;
    for (int64_t w = 0; w < in.windows[split]; w++) {
        gpt2rt_series_batch(s, split, 0, 0, w, 1, x, y);
        for (int64_t m = 0; m < M; m++) {
            forecast(kind, x, L, M, m, H, P, W, f);
            for (int64_t h = 0; h < H; h++) {
                double e = f[h] - y[h * M + m];
                r.se += e * e; r.ae += fabs(e); r.n++;
                if (w < whole) { r.se_dl += e * e; r.n_dl++; }
            }
        }
    }
    free(x); free(y); free(f);
    return r;
}

int main(int argc, char **argv) {
    const char *data = NULL;
    int64_t L = 336, H = 0, P = 24, drop = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--data")) data = argv[i + 1];
        else if (!strcmp(argv[i], "--horizon")) H = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--lookback")) L = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--period")) P = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--drop-last")) drop = atoll(argv[i + 1]);
        else { fprintf(stderr, "ts_baselines: unknown option %s\n", argv[i]); return 2; }
    }
    if (!data || H < 1 || L < 2 || P < 1 || P > L || drop < 0) {
        fprintf(stderr, "usage: ts_baselines --data FILE.csv --horizon H [--lookback L] [--period P <= L] [--drop-last N >= 0]\n");
        return 2;
    }
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.lookback = (int)L; sd.horizon = (int)H;
    gpt2rt_series *s;
    if (gpt2rt_series_load(&s, data, &sd) != GPT2RT_OK) { fprintf(stderr, "%s\n", gpt2rt_series_last_error(s)); return 1; }
    gpt2rt_series_info in;
    memset(&in, 0, sizeof in);
    (void)gpt2rt_series_info_get(s, &in); /* a loaded series has one */
    int64_t M = in.channels, n = L + 1;
    /* the normal equations of the weighted least squares over every training window and channel */
    double *A = calloc((size_t)(n * n), sizeof(double)), *B = calloc((size_t)(n * H), sizeof(double));
    double *z = malloc(sizeof(double) * (size_t)n), *t = malloc(sizeof(double) * (size_t)H);
    float *x = malloc(sizeof(float) * (size_t)(L * M)), *y = malloc(sizeof(float) * (size_t)(H * M));
    for (int64_t w = 0; w < in.windows[GPT2RT_SERIES_TRAIN]; w++) {
        gpt2rt_series_batch(s, GPT2RT_SERIES_TRAIN, 0, 0, w, 1, x, y); /* a seeded order: a sum */
        for (int64_t m = 0; m < M; m++) {
            double mu = 0, var = 0;
            for (int64_t k = 0; k < L; k++) mu += x[k * M + m];
            mu /= (double)L;
            for (int64_t k = 0; k < L; k++) var += (x[k * M + m] - mu) * (x[k * M + m] - mu);
            double sdv = sqrt(var / (double)L + 1e-5), wt = sdv * sdv;
            for (int64_t k = 0; k < L; k++) z[k] = (x[k * M + m] - mu) / sdv;
            z[L] = 1.0;
            for (int64_t h = 0; h < H; h++) t[h] = (y[h * M + m] - mu) / sdv;
            for (int64_t i = 0; i < n; i++) {
                double wz = wt * z[i];
                for (int64_t j = 0; j <= i; j++) A[i * n + j] += wz * z[j];
                for (int64_t h = 0; h < H; h++) B[i * H + h] += wz * t[h];
            }
        }
    }
    for (int64_t i = 0; i < n; i++) for (int64_t j = 0; j < i; j++) A[j * n + i] = A[i * n + j];
    double *Ar = malloc(sizeof(double) * (size_t)(n * n)), *W = malloc(sizeof(double) * (size_t)(n * H)), *best_W = NULL;
    double best = INFINITY, best_ridge = 0;
    static const double ridges[] = {0.1, 1, 10, 100, 1000, 1e4, 1e5};
    for (int r = 0; r < 7; r++) {
        memcpy(Ar, A, sizeof(double) * (size_t)(n * n));
        memcpy(W, B, sizeof(double) * (size_t)(n * H));
        for (int64_t i = 0; i < L; i++) Ar[i * n + i] += ridges[r]; /* not on the bias */
        if (!gpt2rt__fc_solve(Ar, W, n, H)) continue; /* the forecaster's Cholesky solve */
        sums v = score(s, GPT2RT_SERIES_VAL, 2, L, M, H, P, W, 0);
        double mse = v.se / (double)v.n;
        if (mse < best) {
            best = mse; best_ridge = ridges[r];
            if (!best_W) best_W = malloc(sizeof(double) * (size_t)(n * H));
            memcpy(best_W, W, sizeof(double) * (size_t)(n * H));
        }
    }
    if (!best_W) { fprintf(stderr, "ts_baselines: the normal equations are singular at every ridge\n"); return 1; }
    static const char *names[] = {"last-value", "seasonal-naive", "linear"};
    for (int kind = 0; kind < 3; kind++) {
        sums v = score(s, GPT2RT_SERIES_VAL, kind, L, M, H, P, best_W, 0),
             te = score(s, GPT2RT_SERIES_TEST, kind, L, M, H, P, best_W, drop);
        printf("%s val mse %.4f test mse %.4f mae %.4f windows %lld", names[kind], v.se / (double)v.n,
               te.se / (double)te.n, te.ae / (double)te.n, (long long)in.windows[GPT2RT_SERIES_TEST]);
        if (kind == 1) printf(" (period %lld)", (long long)P);
        if (kind == 2) printf(" (ridge %g, chosen on validation)", best_ridge);
        if (drop && te.n_dl) printf("; drop-last %lld: test mse %.4f windows %lld", (long long)drop, te.se_dl / (double)te.n_dl,
                                    (long long)(te.n_dl / (H * M)));
        printf("\n");
    }
    free(A); free(B); free(z); free(t); free(x); free(y); free(Ar); free(W); free(best_W);
    gpt2rt_series_free(s);
    return 0;
}
