/* forecaster_eval.h - 12.1 Forecaster: evaluation, unless GPT2RT_NO_SERIES: per-channel errors in the data's units
   beside the baselines, backtests, split-conformal intervals; may call: forecaster_train.h and what it includes */
#ifndef GPT2RT__SRC_FORECASTER_EVAL_H
#define GPT2RT__SRC_FORECASTER_EVAL_H
#include "forecaster_train.h"

#ifndef GPT2RT_NO_SERIES
/* ==== 12.1 Forecaster: evaluation ==== */

/* Windows are taken from a series in chunks: each chunk's lookbacks and truths in the
   data's units (the series' values unscaled with its scaler, in double; the lookbacks
   rounded to floats, what gpt2rt_forecaster_predict takes), and the forecaster's
   forecasts of them. Errors are summed in double per channel, window by window, step by
   step, so a caller summing in that order gets the same bits. */
typedef struct gpt2rt__fce {
    gpt2rt_forecaster *fc;
    gpt2rt_series *s;
    int64_t L, H, M, C;          /* C: windows a chunk */
    float *x, *xs, *pred, *c, *mus; /* (C,L,M) data units, (C,L,M) the forecaster's scale, (C,H,M), (C,H,M), (C,M) */
    double *y, *z, *acc;         /* (C,H,M) the truth, data units; L+1, H: the linear map's scratch */
} gpt2rt__fce;

static void gpt2rt__fce_close(gpt2rt__fce *e) {
    free(e->x); free(e->xs); free(e->pred); free(e->c); free(e->mus); free(e->y); free(e->z); free(e->acc);
    memset(e, 0, sizeof *e);
}

/* fc and s checked against each other (the message in fc->error, naming fn), the chunk's
   buffers allocated */
static gpt2rt_result gpt2rt__fce_open(gpt2rt__fce *e, gpt2rt_forecaster *fc, gpt2rt_series *s, const char *fn) {
    memset(e, 0, sizeof *e);
    if (!fc) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (fc->failed) return GPT2RT_ERR_STATE;
    fc->error[0] = 0;
    int64_t L = fc->info.lookback, H = fc->info.horizon, M = fc->info.channels;
    if (!s || s->failed)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the series is %s", fn,
                               s ? "one that failed to load" : "NULL");
    if (s->info.channels != M || s->desc.lookback != L || s->desc.horizon != H)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the series has %d channels, lookback %d and "
                               "horizon %d; the forecaster %lld, %lld and %lld (read the file with "
                               "gpt2rt_forecaster_series_desc)", fn, s->info.channels, s->desc.lookback,
                               s->desc.horizon, (long long)M, (long long)L, (long long)H);
    e->fc = fc; e->s = s; e->L = L; e->H = H; e->M = M;
    e->C = fc->info.batch > 64 ? fc->info.batch : 64;
    size_t xl = (size_t)(e->C * L * M), yl = (size_t)(e->C * H * M);
    e->x = (float *)malloc(sizeof(float) * xl); e->xs = (float *)malloc(sizeof(float) * xl);
    e->pred = (float *)malloc(sizeof(float) * yl); e->c = (float *)malloc(sizeof(float) * yl);
    e->mus = (float *)malloc(sizeof(float) * (size_t)(e->C * M)); e->y = (double *)malloc(sizeof(double) * yl);
    e->z = (double *)malloc(sizeof(double) * (size_t)(L + 1)); e->acc = (double *)malloc(sizeof(double) * (size_t)H);
    if (!e->x || !e->xs || !e->pred || !e->c || !e->mus || !e->y || !e->z || !e->acc) {
        gpt2rt__fce_close(e);
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld windows", fn,
                               (long long)e->C);
    }
    return GPT2RT_OK;
}

/* the nb windows whose lookbacks start at rows row0, row0 + 1, ...: x, y, pred */
static gpt2rt_result gpt2rt__fce_chunk(gpt2rt__fce *e, int64_t row0, int64_t nb) {
    int64_t L = e->L, H = e->H, M = e->M;
    const float *v = e->s->values;
    const double *mu = e->s->mean, *sd = e->s->std;
    for (int64_t w = 0; w < nb; w++) {
        for (int64_t i = 0; i < L * M; i++)
            e->x[w * L * M + i] = (float)((double)v[(row0 + w) * M + i] * sd[i % M] + mu[i % M]);
        for (int64_t i = 0; i < H * M; i++)
            e->y[w * H * M + i] = (double)v[(row0 + w + L) * M + i] * sd[i % M] + mu[i % M];
    }
    return gpt2rt_forecaster_predict(e->fc, e->x, nb, e->pred);
}

/* the linear map W's forecast of window w, step h, channel m of the chunk, in the data's
   units; gpt2rt__fce_lin first puts the chunk in the forecaster's scale, as its forecast
   does, and runs the map */
static void gpt2rt__fce_lin(gpt2rt__fce *e, const double *W, int64_t nb) {
    const gpt2rt_forecaster *fc = e->fc;
    for (int64_t i = 0; i < nb * e->L * e->M; i++)
        e->xs[i] = (float)(((double)e->x[i] - fc->mean[i % e->M]) / fc->std[i % e->M]);
    gpt2rt__fc_lin_offset(W, e->L, e->H, e->xs, nb, e->M, e->c, e->mus, e->z, e->acc);
}
static double gpt2rt__fce_lin_at(const gpt2rt__fce *e, int64_t w, int64_t i) {
    int64_t m = i % e->M;
    return ((double)e->mus[w * e->M + m] + (double)e->c[i]) * e->fc->std[m] + e->fc->mean[m];
}

GPT2RT_DEF const char *gpt2rt_forecaster_method_name(gpt2rt_forecaster_method k) {
    static const char *names[] = {"model", "last value", "seasonal naive", "linear map"};
    return (unsigned)k < GPT2RT_FORECASTER_METHODS ? names[k] : NULL;
}

/* n windows from row0 scored per channel: the model and the baselines; forecasts (may
   be NULL) take the model's */
static gpt2rt_result gpt2rt__fce_score(gpt2rt_forecaster *fc, gpt2rt_series *s, const char *fn, int64_t row0,
                                       int64_t n, int season, const gpt2rt_forecaster_linear *lm,
                                       gpt2rt_forecaster_channel_eval *ch, float *forecasts) {
    gpt2rt__fce e;
    gpt2rt_result r = gpt2rt__fce_open(&e, fc, s, fn);
    if (r != GPT2RT_OK) return r;
    int64_t L = e.L, H = e.H, M = e.M, P = season ? season : fc->info.season;
    if (P < 1 || P > L) P = 0;
    const double *W = lm ? lm->weights : fc->W;
    double *sse = (double *)calloc((size_t)(2 * GPT2RT_FORECASTER_METHODS * M), sizeof(double));
    double *sae = sse ? sse + GPT2RT_FORECASTER_METHODS * M : NULL;
    if (lm && (lm->lookback != L || lm->horizon != H || !lm->weights))
        r = gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the linear map lm is for lookback %lld, "
                            "horizon %lld%s; the forecaster's are %lld and %lld", fn, (long long)lm->lookback,
                            (long long)lm->horizon, lm->weights ? "" : " without weights", (long long)L, (long long)H);
    else if (!sse) r = gpt2rt__tok_msg(fc->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int64_t w0 = 0; r == GPT2RT_OK && w0 < n; w0 += e.C) {
        int64_t nb = n - w0 < e.C ? n - w0 : e.C;
        if ((r = gpt2rt__fce_chunk(&e, row0 + w0, nb)) != GPT2RT_OK) break;
        if (W) gpt2rt__fce_lin(&e, W, nb);
        for (int64_t w = 0; w < nb; w++)
            for (int64_t i = w * H * M; i < (w + 1) * H * M; i++) {
                int64_t h = i / M % H, m = i % M;
                double p[GPT2RT_FORECASTER_METHODS] = {
                    e.pred[i], e.x[(w * L + L - 1) * M + m], P ? e.x[(w * L + L - P + h % P) * M + m] : NAN,
                    W ? gpt2rt__fce_lin_at(&e, w, i) : NAN};
                for (int k = 0; k < GPT2RT_FORECASTER_METHODS; k++) {
                    double d = p[k] - e.y[i];
                    sse[k * M + m] += d * d;
                    sae[k * M + m] += fabs(d);
                }
            }
        if (forecasts) memcpy(forecasts + w0 * H * M, e.pred, sizeof(float) * (size_t)(nb * H * M));
    }
    for (int64_t m = 0; r == GPT2RT_OK && m < M; m++) {
        gpt2rt_forecaster_channel_eval *c = &ch[m];
        c->best = GPT2RT_FORECASTER_LAST_VALUE;
        for (int k = 0; k < GPT2RT_FORECASTER_METHODS; k++) {
            c->mse[k] = sse[k * M + m] / (double)(n * H); /* NaN for a baseline not computed */
            c->mae[k] = sae[k * M + m] / (double)(n * H);
            if (k > 1 && c->mse[k] < c->mse[c->best]) c->best = (gpt2rt_forecaster_method)k;
        }
        c->model_better = c->mse[0] < c->mse[c->best];
    }
    free(sse);
    gpt2rt__fce_close(&e);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_evaluate(gpt2rt_forecaster *fc, gpt2rt_series *s, gpt2rt_series_split split,
                                                    int season, const gpt2rt_forecaster_linear *lm, int64_t *windows,
                                                    gpt2rt_forecaster_channel_eval *ch) {
    static const char *fn = "gpt2rt_forecaster_evaluate";
    if (!fc) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (fc->failed) return GPT2RT_ERR_STATE;
    if (windows) *windows = 0;
    if (!ch || season < 0 || (unsigned)split >= GPT2RT_SERIES_SPLIT_COUNT || !s || s->failed)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: %s", fn,
                               !ch ? "ch is NULL" : season < 0 ? "season < 0 (0: the forecaster's)"
                               : (unsigned)split >= GPT2RT_SERIES_SPLIT_COUNT ? "split is not TRAIN, VAL or TEST"
                               : "no loaded series");
    int64_t n = s->info.windows[split];
    if (n < 1)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the %s split has no window (rows [%lld, "
                               "%lld); one window needs lookback %d + horizon %d rows)", fn,
                               split == GPT2RT_SERIES_TRAIN ? "training" : split == GPT2RT_SERIES_VAL ? "validation"
                               : "test", (long long)s->info.begin[split], (long long)s->info.end[split],
                               s->desc.lookback, s->desc.horizon);
    gpt2rt_result r = gpt2rt__fce_score(fc, s, fn, s->info.begin[split], n, season, lm, ch, NULL);
    if (r == GPT2RT_OK && windows) *windows = n;
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_backtest(gpt2rt_forecaster *fc, gpt2rt_series *s, int64_t K, int season,
                                                    const gpt2rt_forecaster_linear *lm,
                                                    gpt2rt_forecaster_channel_eval *ch, float *forecasts) {
    static const char *fn = "gpt2rt_forecaster_backtest";
    if (!fc) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (fc->failed) return GPT2RT_ERR_STATE;
    if (!ch || season < 0 || !s || s->failed)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: %s", fn, !ch ? "ch is NULL"
                               : season < 0 ? "season < 0 (0: the forecaster's)" : "no loaded series");
    int64_t L = fc->info.lookback, H = fc->info.horizon, rows = s->info.rows;
    if (K < 1 || K > rows - L - H + 1)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: %lld origins: one origin needs lookback "
                               "%lld + horizon %lld = %lld rows and each further origin one row more, so %lld origins "
                               "need %lld rows; the series has %lld (at most %lld origins)", fn, (long long)K,
                               (long long)L, (long long)H, (long long)(L + H), (long long)K, (long long)(L + H + K - 1),
                               (long long)rows, (long long)(rows - L - H + 1 > 0 ? rows - L - H + 1 : 0));
    return gpt2rt__fce_score(fc, s, fn, rows - L - H - K + 1, K, season, lm, ch, forecasts);
}

/* ---- split-conformal intervals ---- */

GPT2RT_DEF void gpt2rt_forecaster_intervals_free(gpt2rt_forecaster_intervals *iv) {
    if (!iv) return;
    free(iv->rank);
    free(iv->score);
    memset(iv, 0, sizeof *iv);
}

static int gpt2rt__fce_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the kept ranks of n windows (at most 102): every rank for n <= 100, else the ranks
   of levels j / 100, 0.995 and 0.999, ceil((n + 1) a) in integers, and n */
static int64_t gpt2rt__fce_ranks(int64_t n, int64_t *rank) {
    int64_t G = 0;
    if (n <= 100) {
        for (int64_t k = 1; k <= n; k++) rank[G++] = k;
        return G;
    }
    for (int j = 1; j <= 102; j++) {
        int64_t k = j <= 99 ? ((n + 1) * j + 99) / 100 : j == 100 ? ((n + 1) * 199 + 199) / 200
                  : j == 101 ? ((n + 1) * 999 + 999) / 1000 : n;
        if (k > n) k = n;
        if (!G || k > rank[G - 1]) rank[G++] = k;
    }
    return G;
}

/* res (M, H, n): each channel's and step's n absolute errors (sorted here) into iv's
   kept order statistics, rounded up to floats; the message in err */
static gpt2rt_result gpt2rt__fce_grid(double *res, int64_t n, int64_t H, int64_t M, gpt2rt_forecaster_intervals *iv,
                                      char *err, size_t cap, const char *fn) {
    int64_t rank[102], G = gpt2rt__fce_ranks(n, rank);
    memset(iv, 0, sizeof *iv);
    iv->rank = (int64_t *)malloc(sizeof(int64_t) * (size_t)G);
    iv->score = (float *)malloc(sizeof(float) * (size_t)(M * H * G));
    if (!iv->rank || !iv->score) {
        gpt2rt_forecaster_intervals_free(iv);
        snprintf(err, cap, "%s: out of memory", fn);
        return GPT2RT_ERR_OUT_OF_MEMORY;
    }
    iv->windows = n; iv->horizon = H; iv->channels = M; iv->ranks = G;
    memcpy(iv->rank, rank, sizeof(int64_t) * (size_t)G);
    for (int64_t mh = 0; mh < M * H; mh++) {
        double *row = res + mh * n;
        qsort(row, (size_t)n, sizeof(double), gpt2rt__fce_cmp);
        for (int64_t g = 0; g < G; g++) {
            double d = row[rank[g] - 1];
            float f = (float)d;
            if ((double)f < d) f = nextafterf(f, INFINITY);
            if (!(f <= GPT2RT__FC_STD_MAX)) {
                snprintf(err, cap, "%s: channel %lld's absolute error at step %lld is %g, beyond a float", fn,
                         (long long)(mh / H), (long long)(mh % H), d);
                gpt2rt_forecaster_intervals_free(iv);
                return GPT2RT_ERR_INVALID_ARGUMENT;
            }
            iv->score[mh * G + g] = f;
        }
    }
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_intervals_fit(gpt2rt_ctx *ctx, gpt2rt_series *s,
                                                         const gpt2rt_forecaster_score_desc *desc,
                                                         gpt2rt_forecaster_intervals *iv) {
    GPT2RT__CHECK_CTX(ctx);
    static const char *fn = "gpt2rt_forecaster_intervals_fit";
    if (!iv || !desc) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, !iv ? "iv" : "desc");
    memset(iv, 0, sizeof *iv);
    if (!s || s->failed)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the series is %s", fn, s ? "one that failed to load"
                                                                                             : "NULL");
    int64_t L = s->desc.lookback, H = s->desc.horizon, M = s->info.channels, n = s->info.windows[GPT2RT_SERIES_VAL];
    gpt2rt_config c = gpt2rt_config_get(ctx);
    if (c.seq_len != L || c.horizon != H || c.n_channels != M)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the series has lookback %lld, horizon %lld and %lld "
                            "channels; the context seq_len %d, horizon %d and n_channels %d", fn, (long long)L,
                            (long long)H, (long long)M, c.seq_len, c.horizon, c.n_channels);
    if (n < 1)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the validation split (rows [%lld, %lld)) has no "
                            "window of lookback %lld + horizon %lld rows: the scores come from it", fn,
                            (long long)s->info.begin[GPT2RT_SERIES_VAL], (long long)s->info.end[GPT2RT_SERIES_VAL],
                            (long long)L, (long long)H);
    float *keep = (float *)malloc(sizeof(float) * (size_t)(n * H * M));
    double *res = (double *)malloc(sizeof(double) * (size_t)(n * H * M));
    gpt2rt_forecaster_score_desc d = *desc;
    gpt2rt_forecaster_scores sc;
    gpt2rt_result r = keep && res ? GPT2RT_OK : gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for "
                                                             "%lld windows", fn, (long long)n);
    d.keep = keep; d.keep_windows = n;
    if (r == GPT2RT_OK) r = gpt2rt_forecaster_score(ctx, s, GPT2RT_SERIES_VAL, &d, &sc);
    for (int64_t w = 0; r == GPT2RT_OK && w < n; w++) {
        const float *y = s->values + (s->info.begin[GPT2RT_SERIES_VAL] + w + L) * M;
        for (int64_t i = 0; i < H * M; i++)
            res[(i % M * H + i / M) * n + w] = fabs((double)keep[w * H * M + i] - (double)y[i]) * s->std[i % M];
    }
    if (r == GPT2RT_OK) {
        char err[256];
        if ((r = gpt2rt__fce_grid(res, n, H, M, iv, err, sizeof err, fn)) != GPT2RT_OK) gpt2rt__fail(ctx, r, "%s", err);
    }
    free(keep); free(res);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_calibrate(gpt2rt_forecaster *fc, gpt2rt_series *s) {
    static const char *fn = "gpt2rt_forecaster_calibrate";
    gpt2rt__fce e;
    gpt2rt_result r = gpt2rt__fce_open(&e, fc, s, fn);
    if (r != GPT2RT_OK) return r;
    int64_t H = e.H, M = e.M, n = s->info.windows[GPT2RT_SERIES_VAL], row0 = s->info.begin[GPT2RT_SERIES_VAL];
    double *res = n > 0 ? (double *)malloc(sizeof(double) * (size_t)(n * H * M)) : NULL;
    if (n < 1)
        r = gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the validation split (rows [%lld, %lld)) has no "
                            "window of lookback %lld + horizon %lld rows: the scores come from it", fn, (long long)row0,
                            (long long)s->info.end[GPT2RT_SERIES_VAL], (long long)e.L, (long long)H);
    else if (!res) r = gpt2rt__tok_msg(fc->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld windows", fn,
                                       (long long)n);
    for (int64_t w0 = 0; r == GPT2RT_OK && w0 < n; w0 += e.C) {
        int64_t nb = n - w0 < e.C ? n - w0 : e.C;
        if ((r = gpt2rt__fce_chunk(&e, row0 + w0, nb)) != GPT2RT_OK) break;
        for (int64_t i = 0; i < nb * H * M; i++)
            res[(i % M * H + i / M % H) * n + w0 + i / (H * M)] = fabs((double)e.pred[i] - e.y[i]);
    }
    gpt2rt_forecaster_intervals iv;
    if (r == GPT2RT_OK && (r = gpt2rt__fce_grid(res, n, H, M, &iv, fc->error, sizeof fc->error, fn)) == GPT2RT_OK) {
        gpt2rt_forecaster_intervals_free(&fc->iv);
        fc->iv = iv;
    }
    free(res);
    gpt2rt__fce_close(&e);
    return r;
}

/* the message for a forecaster without scores */
static gpt2rt_result gpt2rt__fce_none(gpt2rt_forecaster *fc, const char *fn) {
    return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_STATE, "%s: this forecaster has no conformal intervals (its "
                           "forecaster.json was saved without interval_windows, interval_ranks and interval_scores): "
                           "gpt2rt_forecaster_calibrate computes them from a file's validation split", fn);
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_intervals_get(gpt2rt_forecaster *fc, gpt2rt_forecaster_intervals *iv) {
    if (!fc) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (fc->failed) return GPT2RT_ERR_STATE;
    fc->error[0] = 0;
    if (!iv) return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_intervals_get: iv is NULL");
    if (!fc->iv.rank) {
        memset(iv, 0, sizeof *iv);
        return gpt2rt__fce_none(fc, "gpt2rt_forecaster_intervals_get");
    }
    *iv = fc->iv;
    return GPT2RT_OK;
}

/* the kept rank for level a (its index g), or the message: k = ceil((n + 1) a) in
   double (a product a hair above an integer takes the next rank: wider, never narrower) */
static gpt2rt_result gpt2rt__fce_rank(gpt2rt_forecaster *fc, const char *fn, double a, int64_t *g) {
    if (!fc->iv.rank) return gpt2rt__fce_none(fc, fn);
    int64_t n = fc->iv.windows;
    if (!(a > 0 && a < 1))
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: level %g must lie in (0, 1) (0.9: a 90%% "
                               "interval)", fn, a);
    double k = ceil((double)(n + 1) * a);
    if (k > (double)n)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: level %g needs the %.0f-th smallest of the "
                               "validation's absolute errors, ceil((n + 1) x %g) with n = %lld windows: a level above "
                               "n / (n + 1) = %.6g needs more windows (at least %.0f for %g)", fn, a, k, a,
                               (long long)n, (double)n / (double)(n + 1), ceil(a / (1 - a)), a);
    for (*g = 0; fc->iv.rank[*g] < (int64_t)k; (*g)++) {}
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_interval_width(gpt2rt_forecaster *fc, double level, double *half,
                                                          double *guaranteed) {
    static const char *fn = "gpt2rt_forecaster_interval_width";
    if (!fc) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (fc->failed) return GPT2RT_ERR_STATE;
    fc->error[0] = 0;
    if (!half) return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: half is NULL", fn);
    int64_t g, H = fc->iv.horizon, M = fc->iv.channels, G = fc->iv.ranks;
    gpt2rt_result r = gpt2rt__fce_rank(fc, fn, level, &g);
    if (r != GPT2RT_OK) return r;
    for (int64_t i = 0; i < H * M; i++) half[i] = fc->iv.score[(i % M * H + i / M) * G + g];
    if (guaranteed) *guaranteed = (double)fc->iv.rank[g] / (double)(fc->iv.windows + 1);
    return GPT2RT_OK;
}

/* f -+ q rounded outward to floats */
static void gpt2rt__fce_bounds(double f, double q, float *lo, float *hi) {
    float a = (float)(f - q), b = (float)(f + q);
    *lo = (double)a > f - q ? nextafterf(a, -INFINITY) : a;
    *hi = (double)b < f + q ? nextafterf(b, INFINITY) : b;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_interval(gpt2rt_forecaster *fc, double level, const float *forecasts,
                                                    int64_t n, float *lo, float *hi) {
    static const char *fn = "gpt2rt_forecaster_interval";
    if (!fc) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (fc->failed) return GPT2RT_ERR_STATE;
    fc->error[0] = 0;
    if (!forecasts || !lo || !hi || n < 0)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: %s", fn,
                               n < 0 ? "n < 0" : "forecasts, lo or hi is NULL");
    int64_t g, H = fc->info.horizon, M = fc->info.channels;
    gpt2rt_result r = gpt2rt__fce_rank(fc, fn, level, &g);
    for (int64_t i = 0; r == GPT2RT_OK && i < n * H * M; i++) {
        int64_t hm = i % (H * M);
        if (!isfinite(forecasts[i]))
            return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: forecasts[%lld] (window %lld, step %lld, "
                                   "channel %lld) is %g", fn, (long long)i, (long long)(i / (H * M)),
                                   (long long)(hm / M), (long long)(hm % M), (double)forecasts[i]);
        gpt2rt__fce_bounds(forecasts[i], fc->iv.score[(hm % M * H + hm / M) * fc->iv.ranks + g], &lo[i], &hi[i]);
    }
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_coverage(gpt2rt_forecaster *fc, gpt2rt_series *s, gpt2rt_series_split split,
                                                    double level, double *per_channel, double *all, int64_t *windows) {
    static const char *fn = "gpt2rt_forecaster_coverage";
    gpt2rt__fce e;
    int64_t g, n;
    if (fc && !fc->failed && (!all || (unsigned)split >= GPT2RT_SERIES_SPLIT_COUNT))
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: %s", fn, !all ? "all is NULL"
                               : "split is not TRAIN, VAL or TEST");
    gpt2rt_result r = gpt2rt__fce_open(&e, fc, s, fn);
    if (r != GPT2RT_OK) return r;
    if ((r = gpt2rt__fce_rank(fc, fn, level, &g)) != GPT2RT_OK) { gpt2rt__fce_close(&e); return r; }
    int64_t H = e.H, M = e.M, G = fc->iv.ranks, row0 = s->info.begin[split];
    if ((n = s->info.windows[split]) < 1) {
        gpt2rt__fce_close(&e);
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the split has no window", fn);
    }
    int64_t *in = (int64_t *)calloc((size_t)M, sizeof(int64_t));
    if (!in) r = gpt2rt__tok_msg(fc->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int64_t w0 = 0; r == GPT2RT_OK && w0 < n; w0 += e.C) {
        int64_t nb = n - w0 < e.C ? n - w0 : e.C;
        if ((r = gpt2rt__fce_chunk(&e, row0 + w0, nb)) != GPT2RT_OK) break;
        for (int64_t i = 0; i < nb * H * M; i++) {
            int64_t hm = i % (H * M);
            float lo, hi;
            gpt2rt__fce_bounds(e.pred[i], fc->iv.score[(hm % M * H + hm / M) * G + g], &lo, &hi);
            in[hm % M] += e.y[i] >= lo && e.y[i] <= hi;
        }
    }
    if (r == GPT2RT_OK) {
        int64_t sum = 0;
        for (int64_t m = 0; m < M; m++) {
            sum += in[m];
            if (per_channel) per_channel[m] = (double)in[m] / (double)(n * H);
        }
        *all = (double)sum / (double)(n * H * M);
        if (windows) *windows = n;
    }
    free(in);
    gpt2rt__fce_close(&e);
    return r;
}
#endif /* GPT2RT_NO_SERIES */
#endif /* GPT2RT__SRC_FORECASTER_EVAL_H */
