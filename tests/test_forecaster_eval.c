/* A forecaster's evaluation (gpt2rt.h 12.1): per-channel errors in the data's units
   beside the baselines, and backtests, equal to the same sums written out here; split-
   conformal intervals: the kept half-widths are the validation's order statistics at
   ceil((n + 1) level) (the next kept rank up off the grid), a save keeps them bitwise,
   a forecaster.json without them loads and says so, a level the windows cannot reach
   is refused; and 90% intervals cover 85-95% of the test split of a seeded sine + noise
   series and of data/ETTh2.csv. The forecasts are the linear map's (an untrained tiny
   model blended all the way to its map): the conformal calibration takes whatever
   errors a forecast makes, so any forecaster tests it, and this one is fast. */
#define _POSIX_C_SOURCE 200809L
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"
#include <sys/stat.h>

#define DIR "build/forecaster_eval_test_files"
enum { SL = 32, SH = 8, SM = 2, ROWS = 6000, PERIOD = 24 };
static gpt2rt_config one_thread; /* a tiny model: one thread is the fastest */

/* two channels of a 24-row cycle plus Gaussian noise (Box-Muller on the harness's
   stream, seed 5), on different scales, so data units and scaled units differ */
static void write_sine(const char *path) {
    FILE *f = fopen(path, "w");
    uint64_t st = 5;
    fprintf(f, "wave,flow\n");
    for (int t = 0; t < ROWS; t++) {
        double u = harness_rng_uniform(&st), v = harness_rng_uniform(&st);
        double g0 = sqrt(-2 * log(u)) * cos(6.283185307179586 * v), g1 = sqrt(-2 * log(u)) * sin(6.283185307179586 * v);
        fprintf(f, "%.6f,%.4f\n", 10 + 3 * sin(t * 6.283185307179586 / PERIOD) + 0.5 * g0,
                1000 + 200 * cos(t * 6.283185307179586 / PERIOD + 0.5) + 40 * g1);
    }
    fclose(f);
}

static gpt2rt_series *load(const char *csv, int L, int H, int no_scale) {
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.lookback = L; sd.horizon = H; sd.no_scale = no_scale;
    gpt2rt_series *s;
    if (gpt2rt_series_load(&s, csv, &sd) != GPT2RT_OK) CHECK(0, "load %s: %s", csv, gpt2rt_series_last_error(s));
    return s;
}

/* an untrained tiny patch model beside the series' linear map, blended all the way to
   the map, saved to dir; with_iv: with its conformal scores (returned in *iv) */
static gpt2rt_ctx *tiny_ctx(int L, int H, int M) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.input = GPT2RT_INPUT_PATCHES; c.head = GPT2RT_HEAD_REGRESSION; c.seq_len = L; c.patch_len = 8;
    c.patch_stride = 8; c.n_channels = M; c.horizon = H; c.n_layer = 1; c.n_head = 2; c.n_embd = 8; c.batch_size = 64;
    c.seed = 3; c.n_threads = 1;
    gpt2rt_ctx *ctx;
    CHECK_OK(ctx, gpt2rt_create(&ctx, &c));
    return ctx;
}

static int make_fc(const char *csv, const char *dir, int L, int H, int M, int with_iv, gpt2rt_forecaster_intervals *iv) {
    gpt2rt_series *s = load(csv, L, H, 0);
    gpt2rt_ctx *ctx = tiny_ctx(L, H, M);
    gpt2rt_forecaster_linear lm;
    memset(&lm, 0, sizeof lm);
    CHECK_OK(ctx, gpt2rt_forecaster_linear_fit(ctx, s, &lm));
    int ok = lm.weights != NULL;
    if (ok && with_iv) {
        gpt2rt_forecaster_score_desc d;
        memset(&d, 0, sizeof d);
        d.batch = 64; d.linear = &lm; d.blend = 1;
        CHECK_OK(ctx, gpt2rt_forecaster_intervals_fit(ctx, s, &d, iv));
        ok = iv->rank != NULL;
    }
    gpt2rt_forecaster_desc fd;
    memset(&fd, 0, sizeof fd);
    fd.series = s; fd.linear = lm.weights; fd.blend = 1; fd.batch = 64;
    fd.intervals = with_iv ? iv : NULL;
    if (ok) CHECK_OK(ctx, gpt2rt_forecaster_save(ctx, dir, &fd));
    gpt2rt_forecaster_linear_free(&lm);
    gpt2rt_free(ctx);
    gpt2rt_series_free(s);
    return ok;
}

/* n windows from row0 of s in the data's units: x (n,L,M) as floats, y (n,H,M) in
   double, as the series' values unscaled with its scaler */
static void raw_windows(gpt2rt_series *s, int64_t row0, int64_t n, int64_t L, int64_t H, int64_t M, float *x,
                        double *y) {
    const float *v = gpt2rt_series_values(s);
    double mu[16], sd[16];
    for (int m = 0; m < M; m++) gpt2rt_series_scaler(s, m, &mu[m], &sd[m]);
    for (int64_t w = 0; w < n; w++) {
        for (int64_t i = 0; i < L * M; i++) x[w * L * M + i] = (float)((double)v[(row0 + w) * M + i] * sd[i % M] + mu[i % M]);
        for (int64_t i = 0; i < H * M; i++) y[w * H * M + i] = (double)v[(row0 + w + L) * M + i] * sd[i % M] + mu[i % M];
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the per-channel sums of the model and the three baselines, written out: want (M) */
static void direct_eval(gpt2rt_forecaster *fc, gpt2rt_series *s, int64_t row0, int64_t n, int P,
                        gpt2rt_forecaster_channel_eval *want, float *model) {
    int64_t L = SL, H = SH, M = SM;
    float *x = (float *)malloc(sizeof(float) * (size_t)(n * L * M)), *xs = (float *)malloc(sizeof(float) * (size_t)(n * L * M));
    float *off = (float *)malloc(sizeof(float) * (size_t)(n * H * M)), *mus = (float *)malloc(sizeof(float) * (size_t)(n * M));
    double *y = (double *)malloc(sizeof(double) * (size_t)(n * H * M)), fmu[SM], fsd[SM], sse[4][SM], sae[4][SM];
    raw_windows(s, row0, n, L, H, M, x, y);
    CHECK(gpt2rt_forecaster_predict(fc, x, n, model) == GPT2RT_OK, "predict: %s", gpt2rt_forecaster_last_error(fc));
    for (int m = 0; m < M; m++) gpt2rt_forecaster_scaler(fc, m, &fmu[m], &fsd[m]);
    for (int64_t i = 0; i < n * L * M; i++) xs[i] = (float)(((double)x[i] - fmu[i % M]) / fsd[i % M]);
    /* the map's weights as saved: read back through forecaster.json (the same doubles) */
    gpt2rt_forecaster_linear lm = {L, H, NULL, 0, 0};
    lm.weights = fc->W;
    CHECK_OK(gpt2rt_forecaster_ctx(fc), gpt2rt_forecaster_linear_offset(gpt2rt_forecaster_ctx(fc), &lm, xs, n, M, off, mus));
    memset(sse, 0, sizeof sse);
    memset(sae, 0, sizeof sae);
    for (int64_t w = 0; w < n; w++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t m = 0; m < M; m++) {
                int64_t i = (w * H + h) * M + m;
                double p[4] = {model[i], x[(w * L + L - 1) * M + m], x[(w * L + L - P + h % P) * M + m],
                               ((double)mus[w * M + m] + (double)off[i]) * fsd[m] + fmu[m]};
                for (int k = 0; k < 4; k++) {
                    double e = p[k] - y[i];
                    sse[k][m] += e * e;
                    sae[k][m] += fabs(e);
                }
            }
    for (int m = 0; m < M; m++) {
        want[m].best = GPT2RT_FORECASTER_LAST_VALUE;
        for (int k = 0; k < 4; k++) {
            want[m].mse[k] = sse[k][m] / (double)(n * H);
            want[m].mae[k] = sae[k][m] / (double)(n * H);
            if (k > 1 && want[m].mse[k] < want[m].mse[want[m].best]) want[m].best = (gpt2rt_forecaster_method)k;
        }
        want[m].model_better = want[m].mse[0] < want[m].mse[want[m].best];
    }
    free(x); free(xs); free(off); free(mus); free(y);
}

static int same_eval(const gpt2rt_forecaster_channel_eval *a, const gpt2rt_forecaster_channel_eval *b, int M) {
    for (int m = 0; m < M; m++) {
        if (a[m].best != b[m].best || a[m].model_better != b[m].model_better) return 0;
        for (int k = 0; k < 4; k++)
            if (a[m].mse[k] != b[m].mse[k] || a[m].mae[k] != b[m].mae[k]) return 0;
    }
    return 1;
}

static void per_channel_and_backtest(void) {
    gpt2rt_forecaster *fc;
    if (gpt2rt_forecaster_load(&fc, DIR "/sine_iv", &one_thread) != GPT2RT_OK) {
        CHECK(0, "load: %s", gpt2rt_forecaster_last_error(fc));
        gpt2rt_forecaster_free(fc);
        return;
    }
    gpt2rt_series *s = load(DIR "/sine.csv", SL, SH, 0);
    gpt2rt_series_info in;
    memset(&in, 0, sizeof in);
    gpt2rt_series_info_get(s, &in);
    int64_t n = in.windows[GPT2RT_SERIES_TEST], nw = 0;
    gpt2rt_forecaster_channel_eval got[SM], want[SM];
    float *model = (float *)malloc(sizeof(float) * (size_t)(n * SH * SM));
    CHECK(gpt2rt_forecaster_evaluate(fc, s, GPT2RT_SERIES_TEST, PERIOD, NULL, &nw, got) == GPT2RT_OK && nw == n,
          "evaluate: %s (%lld windows of %lld)", gpt2rt_forecaster_last_error(fc), (long long)nw, (long long)n);
    direct_eval(fc, s, in.begin[GPT2RT_SERIES_TEST], n, PERIOD, want, model);
    CHECK(same_eval(got, want, SM), "per channel: model mse %.17g (want %.17g), last value %.17g (%.17g), seasonal "
          "%.17g (%.17g), linear %.17g (%.17g): the same sums in the same order", got[1].mse[0], want[1].mse[0],
          got[1].mse[1], want[1].mse[1], got[1].mse[2], want[1].mse[2], got[1].mse[3], want[1].mse[3]);
    /* the forecast is the map's: the model's errors and the map's agree to the blend's rounding (the
       forecast p + 1 (map - p) in the scaler's units, rounded to a float, then unscaled: a relative 2^-22
       of the values, 1000 + 200 + 4 sd 40 < 1400 in "flow": |e| moves by 3.4e-4 at most; the MSE by
       2 |e| 3.4e-4 + 3.4e-4^2 with |e| < 400) */
    CHECK(fabs(got[1].mse[0] - got[1].mse[3]) < 0.28 && fabs(got[1].mae[0] - got[1].mae[3]) < 3.4e-4,
          "model %.9g / %.9g against the map %.9g / %.9g", got[1].mse[0], got[1].mae[0], got[1].mse[3], got[1].mae[3]);
    /* 24-row cycle + noise: the seasonal naive's error is the noise twice over (2 x 0.5^2 = 0.5 in "wave"), the
       map's about once: the map beats it; the last value misses the cycle by far more */
    CHECK(got[0].best == GPT2RT_FORECASTER_LINEAR_MAP && got[0].mse[2] > 0.4 && got[0].mse[2] < 0.6 &&
          got[0].mse[1] > got[0].mse[2], "wave: best %s, seasonal naive %.4f (want ~0.5), last value %.4f",
          gpt2rt_forecaster_method_name(got[0].best), got[0].mse[2], got[0].mse[1]);
    printf("    test split, per channel (data units): ");
    for (int m = 0; m < SM; m++)
        printf("%s: model %.4g, %s %.4g%s", gpt2rt_forecaster_column(fc, m) ? gpt2rt_forecaster_column(fc, m) : "?",
               got[m].mse[0],
               gpt2rt_forecaster_method_name(got[m].best) ? gpt2rt_forecaster_method_name(got[m].best) : "?", got[m].mse[got[m].best], m + 1 < SM ? "; " : "\n");
    CHECK(gpt2rt_forecaster_method_name(GPT2RT_FORECASTER_METHODS) == NULL &&
          !strcmp(gpt2rt_forecaster_method_name(GPT2RT_FORECASTER_SEASONAL_NAIVE), "seasonal naive"), "method names");

    /* a backtest of the last K origins: the last K windows of the whole file */
    enum { K = 50 };
    float bt[K * SH * SM], direct[K * SH * SM];
    CHECK(gpt2rt_forecaster_backtest(fc, s, K, PERIOD, NULL, got, bt) == GPT2RT_OK, "backtest: %s",
          gpt2rt_forecaster_last_error(fc));
    direct_eval(fc, s, in.rows - SL - SH - K + 1, K, PERIOD, want, direct);
    CHECK(same_eval(got, want, SM) && !memcmp(bt, direct, sizeof bt), "backtest of %d origins: the last %d windows' "
          "sums and forecasts (model mse %.17g, want %.17g)", K, K, got[0].mse[0], want[0].mse[0]);
    /* the first 100 rows alone, every row a training row: the origins that fit */
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    gpt2rt_forecaster_series_desc(fc, &sd);
    sd.borders = GPT2RT_SERIES_BORDERS_NONE;
    sd.no_scale = 1;
    gpt2rt_series *all;
    char csv[8192];
    FILE *f = fopen(DIR "/sine.csv", "rb");
    size_t len = f ? fread(csv, 1, sizeof csv - 1, f) : 0, cut = 0;
    if (f) fclose(f);
    for (int lines = 0; cut < len && lines < 101; cut++) lines += csv[cut] == '\n';
    CHECK(gpt2rt_series_load_mem(&all, csv, cut, "short.csv", &sd) == GPT2RT_OK, "load: %s",
          gpt2rt_series_last_error(all));
    CHECK(gpt2rt_forecaster_backtest(fc, all, 100 - SL - SH + 2, PERIOD, NULL, got, NULL) == GPT2RT_ERR_INVALID_ARGUMENT
          && strstr(gpt2rt_forecaster_last_error(fc), "62 origins: one origin needs lookback 32 + horizon 8 = 40 rows")
          && strstr(gpt2rt_forecaster_last_error(fc), "need 101 rows; the series has 100 (at most 61 origins)"),
          "K = rows - L - H + 2 refused: %s", gpt2rt_forecaster_last_error(fc));
    CHECK(gpt2rt_forecaster_backtest(fc, all, 100 - SL - SH + 1, 0, NULL, got, NULL) == GPT2RT_OK &&
          isnan(got[0].mse[GPT2RT_FORECASTER_SEASONAL_NAIVE]), "every origin fits; no season: the seasonal naive "
          "is NaN (%g): %s", got[0].mse[2], gpt2rt_forecaster_last_error(fc));
    CHECK(gpt2rt_forecaster_backtest(fc, all, 0, 0, NULL, got, NULL) == GPT2RT_ERR_INVALID_ARGUMENT, "K = 0 refused");
    CHECK(gpt2rt_forecaster_evaluate(fc, all, GPT2RT_SERIES_TEST, 0, NULL, NULL, got) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_forecaster_last_error(fc), "test split has no window"), "no test split: %s",
          gpt2rt_forecaster_last_error(fc));
    gpt2rt_series_free(all);
    free(model);
    gpt2rt_series_free(s);
    gpt2rt_forecaster_free(fc);
}

/* the scores through the forecaster, written out: sorted absolute errors (M, H, n) */
static double *direct_scores(gpt2rt_forecaster *fc, gpt2rt_series *s, int64_t *n_out) {
    gpt2rt_series_info in;
    memset(&in, 0, sizeof in);
    gpt2rt_series_info_get(s, &in);
    int64_t n = in.windows[GPT2RT_SERIES_VAL], L = SL, H = SH, M = SM;
    float *x = (float *)malloc(sizeof(float) * (size_t)(n * L * M)), *p = (float *)malloc(sizeof(float) * (size_t)(n * H * M));
    double *y = (double *)malloc(sizeof(double) * (size_t)(n * H * M)), *r = (double *)malloc(sizeof(double) * (size_t)(n * H * M));
    raw_windows(s, in.begin[GPT2RT_SERIES_VAL], n, L, H, M, x, y);
    gpt2rt_forecaster_predict(fc, x, n, p);
    for (int64_t w = 0; w < n; w++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t m = 0; m < M; m++)
                r[(m * H + h) * n + w] = fabs((double)p[(w * H + h) * M + m] - y[(w * H + h) * M + m]);
    for (int64_t mh = 0; mh < M * H; mh++) qsort(r + mh * n, (size_t)n, sizeof(double), cmp_double);
    free(x); free(p); free(y);
    *n_out = n;
    return r;
}

static float up(double d) {
    float f = (float)d;
    return (double)f < d ? nextafterf(f, INFINITY) : f;
}

static void intervals(gpt2rt_forecaster_intervals *fit) {
    gpt2rt_forecaster *fc, *old;
    CHECK(gpt2rt_forecaster_load(&fc, DIR "/sine_iv", &one_thread) == GPT2RT_OK, "load: %s", gpt2rt_forecaster_last_error(fc));
    CHECK(gpt2rt_forecaster_load(&old, DIR "/sine_no_iv", &one_thread) == GPT2RT_OK, "load: %s", gpt2rt_forecaster_last_error(old));
    gpt2rt_forecaster_intervals got;
    memset(&got, 0, sizeof got);
    /* a save keeps the scores bitwise */
    CHECK(gpt2rt_forecaster_intervals_get(fc, &got) == GPT2RT_OK && got.windows == fit->windows &&
          got.ranks == fit->ranks && got.channels == SM && got.horizon == SH &&
          !memcmp(got.rank, fit->rank, sizeof(int64_t) * (size_t)got.ranks) &&
          !memcmp(got.score, fit->score, sizeof(float) * (size_t)(SM * SH * got.ranks)),
          "saved and loaded scores: %lld windows, %lld ranks (fit: %lld, %lld), bitwise", (long long)got.windows,
          (long long)got.ranks, (long long)fit->windows, (long long)fit->ranks);
    /* a forecaster.json without them loads and says intervals are unavailable */
    double half[SH * SM], half2[SH * SM], g;
    CHECK(gpt2rt_forecaster_intervals_get(old, &got) == GPT2RT_ERR_STATE &&
          strstr(gpt2rt_forecaster_last_error(old), "no conformal intervals") &&
          gpt2rt_forecaster_interval_width(old, 0.9, half, &g) == GPT2RT_ERR_STATE &&
          strstr(gpt2rt_forecaster_last_error(old), "gpt2rt_forecaster_calibrate"),
          "without interval_* keys: %s", gpt2rt_forecaster_last_error(old));
    gpt2rt_series *s = load(DIR "/sine.csv", SL, SH, 0);
    CHECK(gpt2rt_forecaster_calibrate(old, s) == GPT2RT_OK, "calibrate: %s", gpt2rt_forecaster_last_error(old));
    int64_t n;
    double *r = direct_scores(old, s, &n);
    /* n = 600 validation rows - 8 + 1 = 593 > 100: the grid ranks; level 0.9 is on it: k = ceil(594 x 0.9) = 535 */
    CHECK(gpt2rt_forecaster_interval_width(old, 0.9, half, &g) == GPT2RT_OK && n == 593 &&
          g == 535.0 / 594, "level 0.9 of %lld windows: rank guarantees %.17g (want 535/594)", (long long)n, g);
    int same = 1;
    for (int64_t h = 0; h < SH; h++)
        for (int64_t m = 0; m < SM; m++) same &= half[h * SM + m] == (double)up(r[(m * SH + h) * n + 534]);
    CHECK(same, "0.9: every half-width is the 535th smallest absolute error of its channel and step, rounded up");
    /* off the grid, 0.905: k = ceil(594 x 0.905) = 538, the next kept rank is ceil(594 x 91 / 100) = 541 */
    CHECK(gpt2rt_forecaster_interval_width(old, 0.905, half2, &g) == GPT2RT_OK && g == 541.0 / 594, "0.905: %.17g "
          "(want 541/594)", g);
    same = 1;
    for (int64_t h = 0; h < SH; h++)
        for (int64_t m = 0; m < SM; m++)
            same &= half2[h * SM + m] == (double)up(r[(m * SH + h) * n + 540]) && half2[h * SM + m] >= r[(m * SH + h) * n + 537];
    CHECK(same, "0.905: the 541st order statistic, at least the exact 538th: wider, never narrower");
    /* a level beyond n / (n + 1) */
    CHECK(gpt2rt_forecaster_interval_width(old, 0.999, half, &g) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_forecaster_last_error(old), "n = 593") && strstr(gpt2rt_forecaster_last_error(old), "594-th") &&
          strstr(gpt2rt_forecaster_last_error(old), "at least 999"), "0.999: %s", gpt2rt_forecaster_last_error(old));
    CHECK(gpt2rt_forecaster_interval_width(old, 1, half, &g) == GPT2RT_ERR_INVALID_ARGUMENT &&
          gpt2rt_forecaster_interval_width(old, 0, half, &g) == GPT2RT_ERR_INVALID_ARGUMENT, "levels 0 and 1 refused");
    /* the context's fit and the forecaster's calibration see the same errors but for the last rounding: the
       context unscales (forecast - truth) in the scaler's units, the forecaster rounds the forecast in data
       units to a float: apart by 2 x 2^-24 of the values (< 1400) and the float rounding of the score,
       so 2e-4 */
    gpt2rt_forecaster_intervals cal;
    gpt2rt_forecaster_intervals_get(old, &cal);
    double worst = 0;
    for (int64_t i = 0; i < SM * SH * cal.ranks; i++) {
        double d = fabs((double)cal.score[i] - (double)fit->score[i]);
        worst = d > worst ? d : worst;
    }
    CHECK(cal.ranks == fit->ranks && worst < 2e-4, "calibrate through the forecaster against the context's fit: "
          "worst %.3g", worst);
    /* lo and hi around forecasts: the half-width, rounded outward */
    float f[2 * SH * SM], lo[2 * SH * SM], hi[2 * SH * SM];
    for (int i = 0; i < 2 * SH * SM; i++) f[i] = (float)(100 * sin(i));
    gpt2rt_forecaster_interval_width(old, 0.8, half, &g);
    CHECK(gpt2rt_forecaster_interval(old, 0.8, f, 2, lo, hi) == GPT2RT_OK, "interval: %s",
          gpt2rt_forecaster_last_error(old));
    same = 1;
    for (int i = 0; i < 2 * SH * SM; i++) {
        double q = half[i % (SH * SM)];
        same &= lo[i] <= f[i] - q && hi[i] >= f[i] + q && nextafterf(lo[i], INFINITY) > f[i] - q &&
                nextafterf(hi[i], -INFINITY) < f[i] + q;
    }
    CHECK(same, "0.8: lo and hi are the forecast -+ the half-width rounded outward to the next float");
    f[5] = NAN;
    CHECK(gpt2rt_forecaster_interval(old, 0.8, f, 2, lo, hi) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_forecaster_last_error(old), "forecasts[5] (window 0, step 2, channel 1) is nan"),
          "a NaN forecast: %s", gpt2rt_forecaster_last_error(old));
    gpt2rt_series *other = load(DIR "/sine.csv", SL + 1, SH, 0);
    CHECK(gpt2rt_forecaster_coverage(old, other, GPT2RT_SERIES_TEST, 0.9, NULL, &g, NULL) == GPT2RT_ERR_INVALID_ARGUMENT
          && strstr(gpt2rt_forecaster_last_error(old), "lookback 33 and horizon 8; the forecaster 2, 32 and 8"),
          "a series of another lookback: %s", gpt2rt_forecaster_last_error(old));
    gpt2rt_series_free(other);
    /* coverage: the share of the test split's values in the intervals, per channel, as counted here */
    gpt2rt_series_info in;
    memset(&in, 0, sizeof in);
    gpt2rt_series_info_get(s, &in);
    int64_t nt = in.windows[GPT2RT_SERIES_TEST], nw = 0;
    float *x = (float *)malloc(sizeof(float) * (size_t)(nt * SL * SM)), *p = (float *)malloc(sizeof(float) * (size_t)(nt * SH * SM));
    float *l = (float *)malloc(sizeof(float) * (size_t)(nt * SH * SM)), *u = (float *)malloc(sizeof(float) * (size_t)(nt * SH * SM));
    double *y = (double *)malloc(sizeof(double) * (size_t)(nt * SH * SM)), per[SM], all, per_want[SM] = {0, 0}, all_want;
    raw_windows(s, in.begin[GPT2RT_SERIES_TEST], nt, SL, SH, SM, x, y);
    gpt2rt_forecaster_predict(fc, x, nt, p);
    gpt2rt_forecaster_interval(fc, 0.9, p, nt, l, u);
    for (int64_t i = 0; i < nt * SH * SM; i++) per_want[i % SM] += y[i] >= l[i] && y[i] <= u[i];
    all_want = (per_want[0] + per_want[1]) / (double)(nt * SH * SM);
    for (int m = 0; m < SM; m++) per_want[m] /= (double)(nt * SH);
    CHECK(gpt2rt_forecaster_coverage(fc, s, GPT2RT_SERIES_TEST, 0.9, per, &all, &nw) == GPT2RT_OK && nw == nt &&
          per[0] == per_want[0] && per[1] == per_want[1] && all == all_want, "coverage %.6f %.6f / %.6f (counted "
          "here: %.6f %.6f / %.6f)", per[0], per[1], all, per_want[0], per_want[1], all_want);
    /* 0.9 on the seeded series: the errors are mostly the target's own noise, independent from row to row.
       Given the validation's n = 593 scores, a new error falls inside with probability ~ Beta(535, 59),
       mean 0.9007, sd sqrt(0.9 x 0.1 / 595) = 0.0123; the test's nt = 1193 windows add a binomial sd
       sqrt(0.09 / 1193) = 0.0087 (channels and steps averaged: at most that): 0.0151 in all, and 85-95%
       is 3.3 of those either side */
    printf("    coverage of 90%% intervals, sine + noise test split (%lld windows): %.4f (wave %.4f, flow %.4f)\n",
           (long long)nt, all, per[0], per[1]);
    CHECK(all >= 0.85 && all <= 0.95, "sine + noise: 90%% intervals cover %.4f of the test split", all);
    free(x); free(p); free(l); free(u); free(y); free(r);
    gpt2rt_series_free(s);
    gpt2rt_forecaster_free(fc);
    gpt2rt_forecaster_free(old);
}

/* forecaster.json's interval keys: all or none, in range, ordered */
static void edit(const char *dir, const char *from, const char *to) {
    char path[256];
    snprintf(path, sizeof path, "%s/forecaster.json", dir);
    CHECK(harness_replace(path, from, to), "%s holds %s", path, from);
}

/* the first of interval_scores replaced by 1e30 */
static void first_score_big(const char *dir) {
    static char buf[1 << 17];
    char path[256];
    snprintf(path, sizeof path, "%s/forecaster.json", dir);
    FILE *f = fopen(path, "rb");
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    char *a = strstr(buf, "\"interval_scores\": [") + 20, *b = strchr(a, ',');
    f = fopen(path, "wb");
    fwrite(buf, 1, (size_t)(a - buf), f);
    fputs("1e30", f);
    fputs(b, f);
    fclose(f);
}

/* a save checks the scores as a load does: shape, ranks, order; nothing is written */
static void save_refuses(void) {
    gpt2rt_series *s = load(DIR "/sine.csv", SL, SH, 0);
    gpt2rt_ctx *ctx = tiny_ctx(SL, SH, SM);
    int64_t rank[2] = {3, 2};
    float score[SM * SH * 2];
    for (int i = 0; i < SM * SH * 2; i++) score[i] = (float)(i % 2);
    gpt2rt_forecaster_intervals bad = {5, SH + 1, SM, 2, rank, score};
    gpt2rt_forecaster_desc fd;
    memset(&fd, 0, sizeof fd);
    fd.series = s; fd.intervals = &bad;
    CHECK(gpt2rt_forecaster_save(ctx, DIR "/never", &fd) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "the intervals are 2 channels x 9 steps with 2 ranks of 5 windows; the model's "
                 "are 2 x 8"), "another horizon: %s", gpt2rt_last_error(ctx));
    bad.horizon = SH;
    CHECK(gpt2rt_forecaster_save(ctx, DIR "/never", &fd) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "interval rank 1 is 2"), "ranks out of order: %s", gpt2rt_last_error(ctx));
    rank[0] = 1;
    score[2] = -0.0f;
    score[3] = -1;
    CHECK(gpt2rt_forecaster_save(ctx, DIR "/never", &fd) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "interval score 3 (channel 0, step 1, rank 2) is -1"), "a negative score: %s",
          gpt2rt_last_error(ctx));
    struct stat sb;
    CHECK(stat(DIR "/never", &sb) != 0, "a refused save writes nothing");
    gpt2rt_series *other = load(DIR "/sine.csv", SL, SH + 1, 0);
    gpt2rt_forecaster_score_desc d;
    memset(&d, 0, sizeof d);
    d.batch = 64;
    CHECK(gpt2rt_forecaster_intervals_fit(ctx, other, &d, &bad) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "horizon 9 and 2 channels; the context seq_len 32, horizon 8") && !bad.rank,
          "a series of another horizon: %s", gpt2rt_last_error(ctx));
    gpt2rt_series_free(other);
    gpt2rt_free(ctx);
    gpt2rt_series_free(s);
}

static void strict_keys(void) {
    static const struct { const char *from, *to, *says; } cases[] = {
        {"\"interval_windows\": 593,", "", "come together"},
        {"\"interval_windows\": 593,", "\"interval_windows\": 10,", "interval rank"},
        {"\"interval_ranks\": [6,", "\"interval_ranks\": [6.5,", "interval rank 0 is -1"},
        {"\"interval_ranks\": [6,", "\"interval_ranks\": [6, 6,", "\"interval_scores\" has"},
        {"\"interval_scores\": [", "\"interval_scores\": [-1, ", "outside [0,"},
        {"\"interval_scores\": [", NULL, "grow with the rank"}, /* the first score 1e30: above the next */
    };
    char cmd[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "rm -rf %s/edited && cp -r %s/sine_iv %s/edited", DIR, DIR, DIR);
        CHECK(system(cmd) == 0, "copy");
        if (cases[i].to) edit(DIR "/edited", cases[i].from, cases[i].to);
        else first_score_big(DIR "/edited");
        gpt2rt_forecaster *fc;
        gpt2rt_result r = gpt2rt_forecaster_load(&fc, DIR "/edited", NULL);
        CHECK(r == GPT2RT_ERR_FORMAT && strstr(gpt2rt_forecaster_last_error(fc), cases[i].says),
              "%s -> %s: %s (want \"%s\")", cases[i].from, cases[i].to, gpt2rt_forecaster_last_error(fc), cases[i].says);
        gpt2rt_forecaster_free(fc);
    }
}

/* data/ETTh2.csv, every channel, lookback 96, horizon 24: 90% intervals on the test split */
static void etth2(void) {
    FILE *f = fopen("data/ETTh2.csv", "rb");
    if (!f) { SKIP("data/ETTh2.csv is not here (run from the repository's root)"); return; }
    fclose(f);
    enum { L = 96, H = 24, M = 7 };
    gpt2rt_forecaster_intervals iv;
    memset(&iv, 0, sizeof iv);
    if (!make_fc("data/ETTh2.csv", DIR "/etth2", L, H, M, 1, &iv)) return;
    gpt2rt_forecaster *fc;
    CHECK(gpt2rt_forecaster_load(&fc, DIR "/etth2", &one_thread) == GPT2RT_OK, "load: %s", gpt2rt_forecaster_last_error(fc));
    gpt2rt_series *s = load("data/ETTh2.csv", L, H, 0);
    double per[M], all = 0;
    int64_t nw = 0;
    CHECK(gpt2rt_forecaster_coverage(fc, s, GPT2RT_SERIES_TEST, 0.9, per, &all, &nw) == GPT2RT_OK, "coverage: %s",
          gpt2rt_forecaster_last_error(fc));
    printf("    coverage of 90%% intervals, ETTh2 test split (%lld windows, %lld validation): %.4f (", (long long)nw,
           (long long)iv.windows, all);
    for (int m = 0; m < M; m++) printf("%s %.3f%s", gpt2rt_forecaster_column(fc, m) ? gpt2rt_forecaster_column(fc, m) : "?", per[m], m + 1 < M ? ", " : ")\n");
    /* n = 2857 validation windows: Beta sd sqrt(0.09 / 2859) = 0.0056, the test's 2857 windows' binomial
       sd the same: 0.008 in all for exchangeable errors; ETTh2's hours are autocorrelated and its test
       months are not its validation months, so the band is a fixed 85-95% (within 5 points of the level asked), not 3 sd */
    CHECK(all >= 0.85 && all <= 0.95, "ETTh2: 90%% intervals cover %.4f of the test split", all);
    gpt2rt_forecaster_intervals_free(&iv);
    gpt2rt_series_free(s);
    gpt2rt_forecaster_free(fc);
}

int main(void) {
    one_thread.n_threads = 1;
    mkdir("build", 0777);
    mkdir(DIR, 0777);
    write_sine(DIR "/sine.csv");
    gpt2rt_forecaster_intervals iv;
    memset(&iv, 0, sizeof iv);
    if (make_fc(DIR "/sine.csv", DIR "/sine_iv", SL, SH, SM, 1, &iv) &&
        make_fc(DIR "/sine.csv", DIR "/sine_no_iv", SL, SH, SM, 0, NULL)) {
        per_channel_and_backtest();
        intervals(&iv);
        strict_keys();
        save_refuses();
    }
    gpt2rt_forecaster_intervals_free(&iv);
    etth2();
    return harness_finish();
}
