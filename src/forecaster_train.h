/* forecaster_train.h - 12. Forecaster, unless GPT2RT_NO_SERIES: the linear map, scoring, training, baselines, CSV
   may call: forecaster.h and what it includes */
#ifndef GPT2RT__SRC_FORECASTER_TRAIN_H
#define GPT2RT__SRC_FORECASTER_TRAIN_H
#include "forecaster.h"

#ifndef GPT2RT_NO_SERIES

/* ---- the linear map and scoring (the training run's, gpt2rt_forecaster_linear_fit,
   gpt2rt_forecaster_score) ---- */

/* A (n,n) symmetric positive definite: solve A X = B (n,k) in place (Cholesky); 0 on failure */
static int gpt2rt__fc_solve(double *A, double *B, int64_t n, int64_t k) {
    for (int64_t j = 0; j < n; j++) {
        double d = A[j * n + j];
        for (int64_t p = 0; p < j; p++) d -= A[j * n + p] * A[j * n + p];
        if (d <= 0) return 0;
        A[j * n + j] = sqrt(d);
        for (int64_t i = j + 1; i < n; i++) {
            double v = A[i * n + j];
            for (int64_t p = 0; p < j; p++) v -= A[i * n + p] * A[j * n + p];
            A[i * n + j] = v / A[j * n + j];
        }
    }
    for (int64_t c = 0; c < k; c++) {
        for (int64_t i = 0; i < n; i++) { /* L z = b */
            double v = B[i * k + c];
            for (int64_t p = 0; p < i; p++) v -= A[i * n + p] * B[p * k + c];
            B[i * k + c] = v / A[i * n + i];
        }
        for (int64_t i = n - 1; i >= 0; i--) { /* L^T x = z */
            double v = B[i * k + c];
            for (int64_t p = i + 1; p < n; p++) v -= A[p * n + i] * B[p * k + c];
            B[i * k + c] = v / A[i * n + i];
        }
    }
    return 1;
}

/* series m of window x (L,M): its mean, std and normalised lookback z (L+1: a trailing 1) */
static void gpt2rt__fc_lin_norm(const float *x, int64_t L, int64_t M, int64_t m, double *mu, double *sd, double *z) {
    double s = 0, v = 0;
    for (int64_t k = 0; k < L; k++) s += x[k * M + m];
    s /= (double)L;
    for (int64_t k = 0; k < L; k++) v += (x[k * M + m] - s) * (x[k * M + m] - s);
    *mu = s;
    *sd = sqrt(v / (double)L + 1e-5);
    for (int64_t k = 0; k < L; k++) z[k] = (x[k * M + m] - s) / *sd;
    z[L] = 1.0;
}

/* the weighted normal equations of a split: A (n,n), b (n,H) added to, c set */
static int gpt2rt__fc_lin_sums(gpt2rt_series *s, gpt2rt_series_split split, int64_t L, int64_t H, int64_t M,
                               int64_t windows, double *A, double *b, double *c) {
    int64_t n = L + 1;
    double *z = (double *)malloc(sizeof(double) * (size_t)n), *t = (double *)malloc(sizeof(double) * (size_t)H);
    float *x = (float *)malloc(sizeof(float) * (size_t)(L * M)), *y = (float *)malloc(sizeof(float) * (size_t)(H * M));
    int ok = z && t && x && y;
    *c = 0;
    for (int64_t w = 0; ok && w < windows; w++) {
        if (gpt2rt_series_batch(s, split, 0, 0, w, 1, x, y) != GPT2RT_OK) { ok = 0; break; }
        for (int64_t m = 0; m < M; m++) {
            double mu, sd;
            gpt2rt__fc_lin_norm(x, L, M, m, &mu, &sd, z);
            double wt = sd * sd;
            for (int64_t h = 0; h < H; h++) {
                t[h] = (y[h * M + m] - mu) / sd;
                *c += wt * t[h] * t[h];
            }
            for (int64_t i = 0; i < n; i++) {
                double wz = wt * z[i];
                for (int64_t j = 0; j <= i; j++) A[i * n + j] += wz * z[j];
                for (int64_t h = 0; h < H; h++) b[i * H + h] += wz * t[h];
            }
        }
    }
    for (int64_t i = 0; i < n; i++) for (int64_t j = 0; j < i; j++) A[j * n + i] = A[i * n + j];
    free(z); free(t); free(x); free(y);
    return ok;
}

GPT2RT_DEF void gpt2rt_forecaster_linear_free(gpt2rt_forecaster_linear *lm) {
    if (!lm) return;
    free(lm->weights);
    lm->weights = NULL;
}

/* Validation MSE per ridge from the validation split's own normal equations:
   sum sd^2 (W'z - t)^2 = tr(W'A W) - 2 tr(W'b) + c, no pass over the windows per ridge */
GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_linear_fit(gpt2rt_ctx *ctx, gpt2rt_series *s, gpt2rt_forecaster_linear *lm) {
    GPT2RT__CHECK_CTX(ctx);
    gpt2rt_series_info in;
    if (!lm) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_linear_fit: lm is NULL");
    memset(lm, 0, sizeof *lm);
    if (!s || gpt2rt_series_info_get(s, &in) != GPT2RT_OK)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "the linear map: %s",
                            s ? gpt2rt_series_last_error(s) : "the series is NULL");
    int64_t L = s->desc.lookback, H = s->desc.horizon, M = in.channels, n = L + 1;
    lm->lookback = L; lm->horizon = H; lm->val_mse = INFINITY;
    if (in.windows[GPT2RT_SERIES_VAL] < 1)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "the linear map chooses its ridge on the validation "
                            "split, which has no window (lookback %lld + horizon %lld)", (long long)L, (long long)H);
    double *A = (double *)calloc((size_t)(n * n), sizeof(double)), *b = (double *)calloc((size_t)(n * H), sizeof(double));
    double *Av = (double *)calloc((size_t)(n * n), sizeof(double)), *bv = (double *)calloc((size_t)(n * H), sizeof(double));
    double *Ar = (double *)malloc(sizeof(double) * (size_t)(n * n)), *W = (double *)malloc(sizeof(double) * (size_t)(n * H));
    double *AW = (double *)malloc(sizeof(double) * (size_t)H), c, cv;
    lm->weights = (double *)malloc(sizeof(double) * (size_t)(n * H));
    int mem = A && b && Av && bv && Ar && W && AW && lm->weights;
    int ok = mem && gpt2rt__fc_lin_sums(s, GPT2RT_SERIES_TRAIN, L, H, M, in.windows[GPT2RT_SERIES_TRAIN], A, b, &c) &&
             gpt2rt__fc_lin_sums(s, GPT2RT_SERIES_VAL, L, H, M, in.windows[GPT2RT_SERIES_VAL], Av, bv, &cv);
    static const double ridges[] = {0.1, 1, 10, 100, 1000, 1e4, 1e5};
    for (int r = 0; ok && r < 7; r++) {
        memcpy(Ar, A, sizeof(double) * (size_t)(n * n));
        memcpy(W, b, sizeof(double) * (size_t)(n * H));
        for (int64_t i = 0; i < L; i++) Ar[i * n + i] += ridges[r]; /* not on the bias */
        if (!gpt2rt__fc_solve(Ar, W, n, H)) continue;
        double sse = cv; /* tr(W'Av W) - 2 tr(W'bv) + cv, a row of Av at a time */
        for (int64_t i = 0; i < n; i++) {
            for (int64_t h = 0; h < H; h++) AW[h] = 0;
            for (int64_t j = 0; j < n; j++)
                for (int64_t h = 0; h < H; h++) AW[h] += Av[i * n + j] * W[j * H + h];
            for (int64_t h = 0; h < H; h++) sse += W[i * H + h] * (AW[h] - 2 * bv[i * H + h]);
        }
        double mse = sse / (double)(in.windows[GPT2RT_SERIES_VAL] * M * H);
        if (mse < lm->val_mse) {
            lm->val_mse = mse; lm->ridge = ridges[r];
            memcpy(lm->weights, W, sizeof(double) * (size_t)(n * H));
        }
    }
    free(A); free(b); free(Av); free(bv); free(Ar); free(W); free(AW);
    if (!ok || lm->ridge == 0) {
        gpt2rt_forecaster_linear_free(lm);
        if (!mem) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "the linear map: out of memory for %lld x %lld "
                                      "normal equations", (long long)n, (long long)n);
        if (!ok) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "the linear map: a window: %s",
                                     gpt2rt_series_last_error(s));
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "the linear map: the normal equations are singular at "
                            "every ridge (0.1 to 1e5)");
    }
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_linear_offset(gpt2rt_ctx *ctx, const gpt2rt_forecaster_linear *lm,
                                                         const float *x, int64_t n, int64_t channels, float *offset,
                                                         float *means) {
    GPT2RT__CHECK_CTX(ctx);
    if (!lm || !lm->weights || !x || !offset || n < 0 || channels < 1)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_linear_offset: %s",
                            !lm || !lm->weights ? "no fitted map" : !x || !offset ? "x or offset is NULL"
                            : "n < 0 or channels < 1");
    double *z = (double *)malloc(sizeof(double) * (size_t)(lm->lookback + 1));
    double *acc = (double *)malloc(sizeof(double) * (size_t)lm->horizon);
    float *mus = means ? means : (float *)malloc(sizeof(float) * (size_t)(n * channels + 1));
    gpt2rt_result r = GPT2RT_OK;
    if (z && acc && mus) gpt2rt__fc_lin_offset(lm->weights, lm->lookback, lm->horizon, x, n, channels, offset, mus, z, acc);
    else r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_forecaster_linear_offset: out of memory");
    free(z); free(acc);
    if (!means) free(mus);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_errors(const float *pred, const float *truth, int64_t n, int64_t horizon,
                                                  int64_t channels, double *sse, double *sae) {
    if (!pred || !truth || !sse || !sae || n < 0 || horizon < 1 || channels < 1) return GPT2RT_ERR_INVALID_ARGUMENT;
    for (int64_t m = 0; m < channels; m++) sse[m] = sae[m] = 0;
    for (int64_t i = 0; i < n * horizon * channels; i++) {
        double e = (double)pred[i] - (double)truth[i];
        sse[i % channels] += e * e;
        sae[i % channels] += fabs(e);
    }
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_baselines(gpt2rt_ctx *ctx, const float *x, const float *y, int64_t n,
                                                     int64_t period, const gpt2rt_forecaster_linear *lm, double mse[3],
                                                     double mae[3]) {
    GPT2RT__CHECK_CTX(ctx);
    gpt2rt_config c = gpt2rt_config_get(ctx);
    int64_t L = c.seq_len, H = c.horizon, M = c.n_channels;
    if (!x || !y || !mse || !mae || n < 1 || L < 1 || H < 1 || M < 1)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_baselines: %s",
                            !x || !y || !mse || !mae ? "x, y, mse or mae is NULL"
                            : n < 1 ? "n < 1" : "the context has no lookback, horizon or channels (a patch model's)");
    if (lm && (lm->lookback != L || lm->horizon != H))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_baselines: the linear map is for "
                            "lookback %lld, horizon %lld; the context's are %lld, %lld", (long long)lm->lookback,
                            (long long)lm->horizon, (long long)L, (long long)H);
    float *p = (float *)malloc(sizeof(float) * (size_t)(n * H * M));
    double *sse = (double *)malloc(sizeof(double) * (size_t)M), *sae = (double *)malloc(sizeof(double) * (size_t)M);
    gpt2rt_result r = p && sse && sae ? GPT2RT_OK : gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY,
                                                                 "gpt2rt_forecaster_baselines: out of memory");
    for (int k = 0; r == GPT2RT_OK && k < 3; k++) {
        mse[k] = mae[k] = NAN;
        if ((k == 1 && (period < 1 || period > L)) || (k == 2 && !lm)) continue;
        if (k == 2) {
            float *off = (float *)malloc(sizeof(float) * (size_t)(n * H * M)), *mus = (float *)malloc(sizeof(float) * (size_t)(n * M));
            if (!off || !mus) r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_forecaster_baselines: out of memory");
            else r = gpt2rt_forecaster_linear_offset(ctx, lm, x, n, M, off, mus);
            for (int64_t i = 0; r == GPT2RT_OK && i < n * H * M; i++)
                p[i] = (float)((double)mus[i / (H * M) * M + i % M] + (double)off[i]);
            free(off); free(mus);
            if (r != GPT2RT_OK) break;
        } else
            for (int64_t w = 0; w < n; w++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t m = 0; m < M; m++)
                        p[(w * H + h) * M + m] = x[(w * L + (k ? L - period + h % period : L - 1)) * M + m];
        gpt2rt_forecaster_errors(p, y, n, H, M, sse, sae);
        double a = 0, b = 0;
        for (int64_t m = 0; m < M; m++) { a += sse[m]; b += sae[m]; }
        mse[k] = a / (double)(n * H * M);
        mae[k] = b / (double)(n * H * M);
    }
    free(p); free(sse); free(sae);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_score(gpt2rt_ctx *ctx, gpt2rt_series *data, gpt2rt_series_split split,
                                                 const gpt2rt_forecaster_score_desc *desc,
                                                 gpt2rt_forecaster_scores *sc) {
    GPT2RT__CHECK_CTX(ctx);
    gpt2rt_series_info info;
    if (!desc || !sc || desc->batch < 1)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_score: %s",
                            !desc || !sc ? "desc or scores is NULL" : "desc->batch < 1");
    if (!data || gpt2rt_series_info_get(data, &info) != GPT2RT_OK)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_score: %s",
                            data ? gpt2rt_series_last_error(data) : "the series is NULL");
    if ((int)split < 0 || split > GPT2RT_SERIES_TEST)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_score: split %d (0 to 2)", (int)split);
    const gpt2rt_forecaster_linear *lm = desc->linear && desc->linear->weights ? desc->linear : NULL;
    int64_t B = desc->batch, L = data->desc.lookback, H = data->desc.horizon, M = info.channels, n = info.windows[split];
    if (lm && (lm->lookback != L || lm->horizon != H))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_score: the linear map is lookback "
                            "%lld horizon %lld, the series %lld and %lld", (long long)lm->lookback,
                            (long long)lm->horizon, (long long)L, (long long)H);
    int64_t drop_batch = desc->drop_batch > 0 ? desc->drop_batch : B;
    int64_t n_whole = n / drop_batch * drop_batch; /* the windows a drop-last loader scores */
    float *x = (float *)malloc(sizeof(float) * (size_t)(B * L * M)), *y = (float *)malloc(sizeof(float) * (size_t)(B * H * M));
    float *pred = (float *)malloc(sizeof(float) * (size_t)(B * H * M));
    float *c = lm ? (float *)malloc(sizeof(float) * (size_t)(B * H * M)) : NULL;
    float *mus = lm ? (float *)malloc(sizeof(float) * (size_t)(B * M)) : NULL;
    double *z = lm ? (double *)malloc(sizeof(double) * (size_t)(L + 1)) : NULL;
    double *acc = lm ? (double *)malloc(sizeof(double) * (size_t)H) : NULL;
    gpt2rt_result r = GPT2RT_OK;
    memset(sc, 0, sizeof *sc);
    if (!x || !y || !pred || (lm && (!c || !mus || !z || !acc)))
        r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_forecaster_score: out of memory for a batch of %lld "
                         "windows", (long long)B);
    if (r == GPT2RT_OK) r = gpt2rt_mode_set(ctx, GPT2RT_MODE_EVAL); /* no dropout while scoring */
    for (int64_t first = 0; r == GPT2RT_OK && first < n; first += B) {
        int real = (int)(n - first < B ? n - first : B);
        if (gpt2rt_series_batch(data, split, 0, 0, first, real, x, y) != GPT2RT_OK) {
            r = gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "batch: %s", gpt2rt_series_last_error(data));
            break;
        }
        for (int b = real; b < B; b++) memcpy(x + b * L * M, x + (real - 1) * L * M, sizeof(float) * (size_t)(L * M));
        if ((r = gpt2rt_forward_series(ctx, x, NULL, NULL)) != GPT2RT_OK ||
            (r = gpt2rt_predictions(ctx, pred, B * H * M)) != GPT2RT_OK)
            break;
        if (lm) {
            gpt2rt__fc_lin_offset(lm->weights, L, H, x, real, M, c, mus, z, acc);
            for (int64_t i = 0; i < (int64_t)real * H * M; i++) {
                double p = (double)pred[i] + (desc->linear_residual ? (double)c[i] : 0.0);
                double d = (double)mus[i / (H * M) * M + i % M] + (double)c[i] - p; /* linear - forecast */
                double e = p - (double)y[i];
                sc->see += e * e; sc->sed += e * d; sc->sdd += d * d;
                pred[i] = (float)(p + desc->blend * d);
            }
        }
        for (int b = 0; b < real; b++) {
            double se = 0, ae = 0;
            for (int64_t i = (int64_t)b * H * M; i < (int64_t)(b + 1) * H * M; i++) {
                double e = (double)pred[i] - (double)y[i];
                se += e * e;
                ae += fabs(e);
            }
            sc->sse += se; sc->sae += ae; sc->windows++;
            if (first + b < n_whole) { sc->sse_full += se; sc->sae_full += ae; sc->windows_full++; }
        }
        for (int b = 0; desc->keep && b < real && first + b < desc->keep_windows; b++)
            memcpy(desc->keep + (first + b) * H * M, pred + b * H * M, sizeof(float) * (size_t)(H * M));
    }
    free(x); free(y); free(pred); free(c); free(mus); free(z); free(acc);
    return r;
}

/* every parameter's values: the best epoch's weights */
typedef struct gpt2rt__fc_snap { int n; float **v; } gpt2rt__fc_snap;

static gpt2rt_result gpt2rt__fc_snap_take(gpt2rt_ctx *ctx, gpt2rt__fc_snap *s) {
    gpt2rt_result r;
    if (!s->v) {
        s->n = gpt2rt_param_count(ctx);
        s->v = (float **)calloc((size_t)s->n + 1, sizeof(float *));
        if (!s->v) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "the best epoch's weights: out of memory");
    }
    for (int i = 0; i < s->n; i++) {
        gpt2rt_param_info in;
        if ((r = gpt2rt_param_info_get(ctx, i, &in)) != GPT2RT_OK) return r;
        if (!s->v[i] && !(s->v[i] = (float *)malloc(sizeof(float) * (size_t)in.numel)))
            return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "the best epoch's weights: out of memory for %s", in.name);
        if ((r = gpt2rt_param_read(ctx, in.name, GPT2RT_PARAM_VALUE, s->v[i], in.numel)) != GPT2RT_OK) return r;
    }
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__fc_snap_restore(gpt2rt_ctx *ctx, const gpt2rt__fc_snap *s) {
    gpt2rt_result r;
    for (int i = 0; i < s->n; i++) {
        gpt2rt_param_info in;
        if ((r = gpt2rt_param_info_get(ctx, i, &in)) != GPT2RT_OK) return r;
        if ((r = gpt2rt_param_write(ctx, in.name, s->v[i], in.numel)) != GPT2RT_OK) return r;
    }
    return GPT2RT_OK;
}

/* out_layer.weight zero: the regression head adds nothing to the linear map's offset */
static gpt2rt_result gpt2rt__fc_zero_head(gpt2rt_ctx *ctx) {
    gpt2rt_param_info pi;
    for (int i = 0; i < gpt2rt_param_count(ctx); i++)
        if (gpt2rt_param_info_get(ctx, i, &pi) == GPT2RT_OK && !strcmp(pi.name, "out_layer.weight")) {
            float *zero = (float *)calloc((size_t)pi.numel, sizeof(float));
            if (!zero) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "out_layer.weight: out of memory");
            gpt2rt_result r = gpt2rt_param_write(ctx, pi.name, zero, pi.numel);
            free(zero);
            return r;
        }
    return GPT2RT_OK;
}

/* the epochs, steps and early stopping of gpt2rt_forecaster_train, its scratch given */
static gpt2rt_result gpt2rt__fc_train(gpt2rt_ctx *ctx, gpt2rt_series *data, const gpt2rt_forecaster_train_desc *d,
                                      gpt2rt_forecaster_train_result *res, int64_t L, int64_t H, int64_t M, float *x,
                                      float *y, float *c, gpt2rt__fc_snap *best_w) {
    int64_t B = d->batch, spe = res->steps_per_epoch;
    gpt2rt_forecaster_score_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.batch = d->batch;
    sd.linear = d->linear;
    sd.linear_residual = d->linear && d->linear_residual;
    gpt2rt_forecaster_scores sc;
    gpt2rt_forecaster_progress pg;
    gpt2rt_result r;
    double best = INFINITY;
    int bad_epochs = 0;
    if (d->start_from_linear && sd.linear_residual) {
        if ((r = gpt2rt__fc_zero_head(ctx)) != GPT2RT_OK || (r = gpt2rt_forecaster_score(ctx, data, GPT2RT_SERIES_VAL, &sd, &sc)) != GPT2RT_OK)
            return r;
        best = sc.sse / (double)(sc.windows * H * M);
        res->best_epoch = 0;
        if ((r = gpt2rt__fc_snap_take(ctx, best_w)) != GPT2RT_OK) return r;
        memset(&pg, 0, sizeof pg);
        pg.event = GPT2RT_FORECASTER_EPOCH; pg.val_mse = best; pg.best = 1;
        if (d->progress) d->progress(d->user, &pg);
    }
    for (int epoch = 0; epoch < d->epochs; epoch++) {
        double t0 = gpt2rt__now(), loss_sum = 0;
        if ((r = gpt2rt_mode_set(ctx, GPT2RT_MODE_TRAIN)) != GPT2RT_OK) return r;
        for (int64_t s = 0; s < spe; s++) {
            gpt2rt_step_stats st;
            if (gpt2rt_series_batch(data, GPT2RT_SERIES_TRAIN, d->seed, epoch, s * B, (int)B, x, y) != GPT2RT_OK)
                return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "batch: %s", gpt2rt_series_last_error(data));
            if (sd.linear_residual) { /* the target is what the linear map leaves: the loss is the sum's */
                if ((r = gpt2rt_forecaster_linear_offset(ctx, d->linear, x, B, M, c, NULL)) != GPT2RT_OK) return r;
                for (int64_t i = 0; i < B * H * M; i++) y[i] -= c[i];
            }
            if ((r = gpt2rt_step_series(ctx, x, y, &st)) != GPT2RT_OK) return r;
            loss_sum += st.loss;
            res->steps++;
            res->step_seconds += st.seconds;
            memset(&pg, 0, sizeof pg);
            pg.event = GPT2RT_FORECASTER_STEP; pg.epoch = epoch + 1; pg.step = s + 1; pg.steps = spe;
            pg.epoch_seconds = gpt2rt__now() - t0; pg.stats = &st;
            if (d->progress) d->progress(d->user, &pg);
            if (d->max_steps && res->steps >= d->max_steps) {
                res->max_steps_reached = 1;
                return GPT2RT_OK;
            }
        }
        double t1 = gpt2rt__now();
        if ((r = gpt2rt_forecaster_score(ctx, data, GPT2RT_SERIES_VAL, &sd, &sc)) != GPT2RT_OK) return r;
        memset(&pg, 0, sizeof pg);
        pg.event = GPT2RT_FORECASTER_EPOCH; pg.epoch = epoch + 1;
        pg.train_mse = loss_sum / (double)spe;
        pg.val_mse = sc.sse / (double)(sc.windows * H * M);
        pg.best = pg.val_mse < best;
        if (pg.best) {
            best = pg.val_mse;
            res->best_epoch = epoch + 1;
            bad_epochs = 0;
            if ((r = gpt2rt__fc_snap_take(ctx, best_w)) != GPT2RT_OK) return r;
        } else pg.stop = d->patience > 0 && ++bad_epochs >= d->patience;
        pg.train_seconds = t1 - t0;
        pg.val_seconds = gpt2rt__now() - t1;
        if (d->progress) d->progress(d->user, &pg);
        if (pg.stop) break;
    }
    res->best_val_mse = best;
    if ((r = gpt2rt__fc_snap_restore(ctx, best_w)) != GPT2RT_OK) return r;
    if (d->blend_linear && d->linear) { /* the weight minimising the validation SSE see + 2 w sed + w^2 sdd over [0, 1] */
        if ((r = gpt2rt_forecaster_score(ctx, data, GPT2RT_SERIES_VAL, &sd, &sc)) != GPT2RT_OK) return r;
        double w = sc.sdd > 0 ? -sc.sed / sc.sdd : 0, nv = (double)(sc.windows * H * M);
        w = w < 0 ? 0 : w > 1 ? 1 : w;
        res->blend = w;
        res->blend_val_mse = (sc.see + 2 * w * sc.sed + w * w * sc.sdd) / nv;
        res->model_val_mse = sc.see / nv;
        res->linear_val_mse = (sc.see + 2 * sc.sed + sc.sdd) / nv;
    }
    (void)L;
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_train(gpt2rt_ctx *ctx, gpt2rt_series *data,
                                                 const gpt2rt_forecaster_train_desc *d,
                                                 gpt2rt_forecaster_train_result *res) {
    GPT2RT__CHECK_CTX(ctx);
    gpt2rt_series_info info;
    if (!d || !res) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_train: desc or result is NULL");
    memset(res, 0, sizeof *res);
    res->best_epoch = -1;
    res->best_val_mse = INFINITY;
    if (!data || gpt2rt_series_info_get(data, &info) != GPT2RT_OK)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_train: %s",
                            data ? gpt2rt_series_last_error(data) : "the series is NULL");
    if (d->batch < 1 || d->epochs < 1 || d->patience < 0 || d->steps_per_epoch < 0 || d->max_steps < 0)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_train: batch %d and epochs %d must be "
                            "at least 1, patience %d, steps_per_epoch %lld and max_steps %d at least 0", d->batch,
                            d->epochs, d->patience, (long long)d->steps_per_epoch, d->max_steps);
    int64_t L = data->desc.lookback, H = data->desc.horizon, M = info.channels, B = d->batch;
    if ((d->linear_residual || d->start_from_linear || d->blend_linear) && (!d->linear || !d->linear->weights))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_train: linear_residual, "
                            "start_from_linear and blend_linear need a fitted linear map (desc.linear)");
    res->steps_per_epoch = info.windows[GPT2RT_SERIES_TRAIN] / B;
    if (res->steps_per_epoch < 1)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "batch %lld exceeds the %lld training windows",
                            (long long)B, (long long)info.windows[GPT2RT_SERIES_TRAIN]);
    if (d->steps_per_epoch && d->steps_per_epoch < res->steps_per_epoch) res->steps_per_epoch = d->steps_per_epoch;
    float *x = (float *)malloc(sizeof(float) * (size_t)(B * L * M)), *y = (float *)malloc(sizeof(float) * (size_t)(B * H * M));
    float *c = (float *)malloc(sizeof(float) * (size_t)(B * H * M));
    gpt2rt__fc_snap best_w = {0, NULL};
    gpt2rt_result r = x && y && c ? gpt2rt__fc_train(ctx, data, d, res, L, H, M, x, y, c, &best_w)
                    : gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_forecaster_train: out of memory for a batch "
                                   "of %lld windows", (long long)B);
    for (int i = 0; i < best_w.n && best_w.v; i++) free(best_w.v[i]);
    free(best_w.v); free(x); free(y); free(c);
    return r;
}

/* the series [i0, i0 + B) of a split (each channel of each window one, in order) into x
   (B, L); tmp, ytmp: room for B + 1 windows */
static gpt2rt_result gpt2rt__fc_pool(gpt2rt_ctx *ctx, gpt2rt_series *d, gpt2rt_series_split split, uint64_t seed,
                                     int epoch, int64_t i0, int64_t B, int64_t L, float *x, float *tmp, float *ytmp) {
    int64_t M = d->info.channels, w0 = i0 / M, w1 = (i0 + B - 1) / M;
    if (gpt2rt_series_batch(d, split, seed, epoch, w0, (int)(w1 - w0 + 1), tmp, ytmp) != GPT2RT_OK)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "batch: %s", gpt2rt_series_last_error(d));
    for (int64_t j = 0; j < B; j++)
        for (int64_t t = 0; t < L; t++) x[j * L + t] = tmp[(((i0 + j) / M - w0) * L + t) * M + (i0 + j) % M];
    return GPT2RT_OK;
}

/* the mean next-patch MSE over the whole batches of every validation series (the last
   partial batch is left out: filling it would weigh its series twice); with naive, the
   last patch repeated's instead (patches of PL steps PS apart, in RevIN's scale) */
static gpt2rt_result gpt2rt__fc_pre_val(gpt2rt_ctx *ctx, gpt2rt_series *const *ds, int nf, int64_t B, int64_t L,
                                        int64_t PL, int64_t PS, int naive, float *x, float *tmp, float *ytmp,
                                        double *val) {
    double sum = 0;
    int64_t n = 0, T = (L - PL) / PS + 1;
    gpt2rt_result r;
    if (!naive && (r = gpt2rt_mode_set(ctx, GPT2RT_MODE_EVAL)) != GPT2RT_OK) return r;
    for (int k = 0; k < nf && (!naive || T > 1); k++) {
        int64_t ns = ds[k]->info.windows[GPT2RT_SERIES_VAL] * ds[k]->info.channels;
        for (int64_t i0 = 0; i0 + B <= ns; i0 += B) {
            if ((r = gpt2rt__fc_pool(ctx, ds[k], GPT2RT_SERIES_VAL, 0, 0, i0, B, L, x, tmp, ytmp)) != GPT2RT_OK) return r;
            if (naive) {
                double se = 0;
                for (int64_t j = 0; j < B; j++) {
                    const float *xs = x + j * L;
                    double mu = 0, var = 0;
                    for (int64_t t = 0; t < L; t++) mu += xs[t];
                    mu /= (double)L;
                    for (int64_t t = 0; t < L; t++) var += (xs[t] - mu) * (xs[t] - mu);
                    double sd = sqrt(var / (double)L + 1e-5);
                    for (int64_t p = 0; p + 1 < T; p++)
                        for (int64_t q = 0; q < PL; q++) {
                            double e = (xs[(p + 1) * PS + q] - xs[p * PS + q]) / sd;
                            se += e * e;
                        }
                }
                sum += se / (double)(B * (T - 1) * PL);
            } else {
                float loss;
                if ((r = gpt2rt_forward_series(ctx, x, NULL, &loss)) != GPT2RT_OK) return r;
                sum += loss;
            }
            n++;
        }
    }
    *val = n ? sum / (double)n : NAN;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__fc_pretrain(gpt2rt_ctx *ctx, gpt2rt_series *const *ds, int nf,
                                         const gpt2rt_forecaster_train_desc *d, gpt2rt_forecaster_pretrain_result *res,
                                         int64_t L, int64_t PL, int64_t PS, int64_t *nser, int64_t *pos, float *x,
                                         float *tmp, float *ytmp, gpt2rt__fc_snap *best_w) {
    int64_t B = d->batch, steps = res->steps_per_epoch;
    gpt2rt_forecaster_progress pg;
    gpt2rt_result r;
    double best = INFINITY, val = 0;
    int bad_epochs = 0;
    if (!d->max_steps) {
        if ((r = gpt2rt__fc_pre_val(ctx, ds, nf, B, L, PL, PS, 1, x, tmp, ytmp, &res->naive_val_mse)) != GPT2RT_OK) return r;
        memset(&pg, 0, sizeof pg);
        pg.event = GPT2RT_FORECASTER_BASELINE; pg.val_mse = res->naive_val_mse;
        if (d->progress) d->progress(d->user, &pg);
    }
    for (int epoch = 0; epoch < d->epochs; epoch++) {
        double t0 = gpt2rt__now(), loss_sum = 0;
        if ((r = gpt2rt_mode_set(ctx, GPT2RT_MODE_TRAIN)) != GPT2RT_OK) return r;
        for (int k = 0; k < nf; k++) pos[k] = 0;
        for (int64_t s = 0, k = 0; s < steps; s++) {
            while (pos[k % nf] + B > nser[k % nf]) k++; /* steps <= the sum of whole batches: one has room */
            gpt2rt_step_stats st;
            if ((r = gpt2rt__fc_pool(ctx, ds[k % nf], GPT2RT_SERIES_TRAIN, d->seed, epoch, pos[k % nf], B, L, x, tmp,
                                     ytmp)) != GPT2RT_OK ||
                (r = gpt2rt_step_series(ctx, x, NULL, &st)) != GPT2RT_OK)
                return r;
            loss_sum += st.loss;
            pos[k % nf] += B;
            k++;
            res->steps++;
            res->step_seconds += st.seconds;
            memset(&pg, 0, sizeof pg);
            pg.event = GPT2RT_FORECASTER_STEP; pg.epoch = epoch + 1; pg.step = s + 1; pg.steps = steps;
            pg.epoch_seconds = gpt2rt__now() - t0; pg.stats = &st;
            if (d->progress) d->progress(d->user, &pg);
            if (d->max_steps && res->steps >= d->max_steps) {
                res->max_steps_reached = 1;
                return GPT2RT_OK;
            }
        }
        double t1 = gpt2rt__now();
        if ((r = gpt2rt__fc_pre_val(ctx, ds, nf, B, L, PL, PS, 0, x, tmp, ytmp, &val)) != GPT2RT_OK) return r;
        memset(&pg, 0, sizeof pg);
        pg.event = GPT2RT_FORECASTER_EPOCH; pg.epoch = epoch + 1;
        pg.train_mse = loss_sum / (double)steps;
        pg.val_mse = val;
        pg.best = val < best || best != best;
        if (pg.best || val != val) { /* no validation series: keep the last epoch */
            best = val; res->best_epoch = epoch + 1; bad_epochs = 0;
            if ((r = gpt2rt__fc_snap_take(ctx, best_w)) != GPT2RT_OK) return r;
        } else pg.stop = d->patience > 0 && ++bad_epochs >= d->patience;
        pg.train_seconds = t1 - t0;
        pg.val_seconds = gpt2rt__now() - t1;
        if (d->progress) d->progress(d->user, &pg);
        if (pg.stop) break;
    }
    res->best_val_mse = best;
    return gpt2rt__fc_snap_restore(ctx, best_w);
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_pretrain(gpt2rt_ctx *ctx, gpt2rt_series *const *ds, int nf,
                                                    const gpt2rt_forecaster_train_desc *d,
                                                    gpt2rt_forecaster_pretrain_result *res) {
    GPT2RT__CHECK_CTX(ctx);
    if (!d || !res || !ds || nf < 1)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_pretrain: %s",
                            !d || !res ? "desc or result is NULL" : "no series");
    memset(res, 0, sizeof *res);
    res->best_val_mse = res->naive_val_mse = NAN;
    if (d->batch < 1 || d->epochs < 1 || d->patience < 0 || d->steps_per_epoch < 0 || d->max_steps < 0)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_pretrain: batch %d and epochs %d must "
                            "be at least 1, patience %d, steps_per_epoch %lld and max_steps %d at least 0", d->batch,
                            d->epochs, d->patience, (long long)d->steps_per_epoch, d->max_steps);
    gpt2rt_config c = gpt2rt_config_get(ctx);
    int64_t L = c.seq_len, B = d->batch, Mmax = 1, HMmax = 1, steps = 0;
    if (c.head != GPT2RT_HEAD_NEXT_PATCH || c.n_channels != 1)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_pretrain: the context's head is %d "
                            "with %d channels; pretraining takes head NEXT_PATCH, n_channels 1", (int)c.head, c.n_channels);
    for (int k = 0; k < nf; k++) {
        if (!ds[k] || ds[k]->failed)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_pretrain: series %d %s", k,
                                ds[k] ? "failed to load" : "is NULL");
        if (ds[k]->desc.lookback != L)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_pretrain: series %d has lookback "
                                "%d, the context seq_len %lld", k, ds[k]->desc.lookback, (long long)L);
        if (ds[k]->info.channels > Mmax) Mmax = ds[k]->info.channels;
        if ((int64_t)ds[k]->desc.horizon * ds[k]->info.channels > HMmax) HMmax = (int64_t)ds[k]->desc.horizon * ds[k]->info.channels;
        steps += ds[k]->info.windows[GPT2RT_SERIES_TRAIN] * ds[k]->info.channels / B;
    }
    if (steps < 1)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "batch %lld exceeds every file's training series", (long long)B);
    res->steps_per_epoch = d->steps_per_epoch && d->steps_per_epoch < steps ? d->steps_per_epoch : steps;
    /* a batch of B series spans at most B + 1 windows of the widest file (their horizons
       are read and not used) */
    int64_t *nser = (int64_t *)calloc((size_t)nf, sizeof(int64_t)), *pos = (int64_t *)calloc((size_t)nf, sizeof(int64_t));
    float *x = (float *)malloc(sizeof(float) * (size_t)(B * L));
    float *tmp = (float *)malloc(sizeof(float) * (size_t)((B + 1) * L * Mmax));
    float *ytmp = (float *)malloc(sizeof(float) * (size_t)((B + 1) * HMmax));
    gpt2rt__fc_snap best_w = {0, NULL};
    gpt2rt_result r;
    if (!nser || !pos || !x || !tmp || !ytmp)
        r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_forecaster_pretrain: out of memory for a batch of %lld "
                         "series", (long long)B);
    else {
        for (int k = 0; k < nf; k++) nser[k] = ds[k]->info.windows[GPT2RT_SERIES_TRAIN] * ds[k]->info.channels;
        r = gpt2rt__fc_pretrain(ctx, ds, nf, d, res, L, c.patch_len, c.patch_stride, nser, pos, x, tmp, ytmp, &best_w);
    }
    for (int i = 0; i < best_w.n && best_w.v; i++) free(best_w.v[i]);
    free(best_w.v); free(nser); free(pos); free(x); free(tmp); free(ytmp);
    return r;
}

/* ---- recipes: the settings of published forecasting runs, as data ---- */

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_recipe_get(gpt2rt_forecaster_recipe recipe, gpt2rt_head head,
                                                      gpt2rt_config *c, gpt2rt_forecaster_train_desc *td) {
    if (!c || !td || (int)recipe < 0 || (int)recipe > GPT2RT_FORECASTER_RECIPE_ALLM4TS ||
        (head != GPT2RT_HEAD_REGRESSION && head != GPT2RT_HEAD_PATCH_DECODE && head != GPT2RT_HEAD_NEXT_PATCH))
        return GPT2RT_ERR_INVALID_ARGUMENT;
    memset(c, 0, sizeof *c);
    memset(td, 0, sizeof *td);
    int pre = head == GPT2RT_HEAD_NEXT_PATCH;
    c->input = GPT2RT_INPUT_PATCHES;
    c->head = head;
    c->attn_mask = head == GPT2RT_HEAD_PATCH_DECODE ? GPT2RT_MASK_PLACEHOLDERS : GPT2RT_MASK_CAUSAL;
    c->n_channels = pre ? 1 : 0; /* next-patch pre-training: each channel one series */
    c->seq_len = 336; c->patch_len = 16; c->patch_stride = 8; c->grad_clip = 1.0f;
    td->epochs = 10; td->patience = 3;
    if (recipe == GPT2RT_FORECASTER_RECIPE_ALLM4TS) { /* aLLM4TS's scripts (Bian et al., ICML 2024) */
        c->n_layer = 6; c->n_head = 12; c->n_embd = 768;
        if (pre) { c->seq_len = 1024; c->patch_stride = 16; c->lr = 1e-4f; td->batch = 2048; c->dropout = 0.2f; }
        else { c->lr = 3e-3f; td->batch = 256; c->frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP; }
        c->recompute = GPT2RT_RECOMPUTE_FULL;
    } else if (recipe == GPT2RT_FORECASTER_RECIPE_GPT4TS) {
        c->n_layer = 6; c->n_head = 12; c->n_embd = 768; c->lr = 1e-4f; td->batch = 256;
        c->recompute = GPT2RT_RECOMPUTE_FULL; /* 23 GiB of activations otherwise: more than a 24 GiB machine has free */
    } else { /* cpu: the published ETTh rows' lookback, 336 (GPT4TS, PatchTST, aLLM4TS use it;
                fixed, not searched: validation on ETTh2 prefers 192, test 336-512, README
                "Time series"), and the rest chosen on ETTh2's validation split (horizon 96,
                seeds 1-3): one small block whose attention and MLP keep their random init
                (frozen: a fixed random feature map, nothing to overfit), stride 16 (validation
                0.2078 against 0.2087 for stride 8 at this lookback), small batches (more,
                noisier updates) and dropout 0.3 before the head. The model rides on the
                least-squares linear map: it trains on what the map leaves, at lr 1e-4, and the
                result is blended with the map (validation at horizons 96/192/336/720, seeds
                1-3: 0.2025/0.2653/0.3504/0.5932, against 0.2082/0.2755/0.3647/0.6108 for the
                model alone at lr 1e-3 and 0.2037/0.2689/0.3567/0.6019 for the map alone;
                README "Time series") */
        c->patch_stride = 16; c->n_layer = 1; c->n_head = 2; c->n_embd = 16; c->lr = 1e-4f; td->batch = 16;
        c->frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP;
        c->head_dropout = 0.3f;
        td->linear_residual = td->blend_linear = head == GPT2RT_HEAD_REGRESSION; /* chosen for the flatten head */
    }
    c->batch_size = td->batch;
    return GPT2RT_OK;
}

/* ---- reading a file as training did, writing forecasts as CSV ---- */

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_series_desc(gpt2rt_forecaster *fc, gpt2rt_series_desc *sd) {
    if (!fc || fc->failed) return fc ? GPT2RT_ERR_STATE : GPT2RT_ERR_INVALID_ARGUMENT;
    fc->error[0] = 0;
    if (!sd) return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT,
                                    "gpt2rt_forecaster_series_desc: desc is NULL");
    int M = fc->info.channels;
    if (!fc->columns) {
        size_t n = 1;
        for (int m = 0; m < M; m++) n += strlen(fc->name[m]) + 1;
        char *q = fc->columns = (char *)malloc(n);
        if (!q) return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_OUT_OF_MEMORY,
                                       "gpt2rt_forecaster_series_desc: out of memory");
        for (int m = 0; m < M; m++) q += sprintf(q, "%s%s", m ? "," : "", fc->name[m]);
    }
    sd->lookback = fc->info.lookback; sd->horizon = fc->info.horizon; sd->columns = fc->columns;
    sd->borders = fc->info.borders;
    sd->date_column = fc->date_name; /* by name, "none" too */
    sd->no_date_column = !fc->date_name;
    sd->fill = fc->info.fill;
    return GPT2RT_OK;
}

/* every window of a split: x (n,L,M) and y (n,H,M), malloc'd (n + 1 windows: never 0
   bytes); the failure in error (512 bytes) */
static gpt2rt_result gpt2rt__fc_split(gpt2rt_series *s, gpt2rt_series_split split, float **x, float **y, int64_t *n,
                                      char *error, const char *fn) {
    *x = *y = NULL;
    *n = 0;
    if (!s || s->failed || (int)split < 0 || (int)split > GPT2RT_SERIES_TEST)
        return gpt2rt__tok_msg(error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: %s", fn, !s || s->failed ? "no loaded series"
                               : "split is not TRAIN, VAL or TEST");
    int64_t L = s->desc.lookback, H = s->desc.horizon, M = s->info.channels, nw = s->info.windows[split];
    *x = (float *)malloc(sizeof(float) * (size_t)((nw + 1) * L * M));
    *y = (float *)malloc(sizeof(float) * (size_t)((nw + 1) * H * M));
    gpt2rt_result r = *x && *y ? GPT2RT_OK : gpt2rt__tok_msg(error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for "
                                                             "%lld windows", fn, (long long)nw);
    for (int64_t w = 0; r == GPT2RT_OK && w < nw; w++)
        if (gpt2rt_series_batch(s, split, 0, 0, w, 1, *x + w * L * M, *y + w * H * M) != GPT2RT_OK)
            r = gpt2rt__tok_msg(error, GPT2RT_ERR_STATE, "%s: %s", fn, s->error);
    if (r != GPT2RT_OK) { free(*x); free(*y); *x = *y = NULL; }
    else *n = nw;
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_predict_split(gpt2rt_forecaster *fc, gpt2rt_series *series,
                                                         gpt2rt_series_split split, float *out) {
    if (!fc || fc->failed) return fc ? GPT2RT_ERR_STATE : GPT2RT_ERR_INVALID_ARGUMENT;
    fc->error[0] = 0;
    const char *fn = "gpt2rt_forecaster_predict_split";
    if (!out) return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    if (series && !series->failed && (series->desc.lookback != fc->info.lookback ||
                                      series->desc.horizon != fc->info.horizon ||
                                      series->info.channels != fc->info.channels))
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the series (lookback %d, horizon %d, %d "
                               "channels) is not cut as the forecaster's windows (%d, %d, %d): load it with "
                               "gpt2rt_forecaster_series_desc", fn, series->desc.lookback, series->desc.horizon,
                               series->info.channels, fc->info.lookback, fc->info.horizon, fc->info.channels);
    float *x, *y;
    int64_t n;
    gpt2rt_result r = gpt2rt__fc_split(series, split, &x, &y, &n, fc->error, fn);
    if (r == GPT2RT_OK) r = gpt2rt_forecaster_predict_scaled(fc, x, n, out);
    free(x); free(y);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_metrics(gpt2rt_ctx *ctx, gpt2rt_series *series, gpt2rt_series_split split,
                                                   const float *pred, int64_t period,
                                                   const gpt2rt_forecaster_linear *lm, gpt2rt_forecaster_metric *out) {
    GPT2RT__CHECK_CTX(ctx);
    const char *fn = "gpt2rt_forecaster_metrics";
    if (!pred || !out || !out->sse || !out->sae)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: pred, out, out->sse or out->sae is NULL", fn);
    float *x, *y;
    int64_t n;
    char err[512];
    if (gpt2rt__fc_split(series, split, &x, &y, &n, err, fn) != GPT2RT_OK)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s", err);
    gpt2rt_config c = gpt2rt_config_get(ctx);
    gpt2rt_result r = GPT2RT_OK;
    if (series->desc.lookback != c.seq_len || series->desc.horizon != c.horizon || series->info.channels != c.n_channels)
        r = gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the series (lookback %d, horizon %d, %d channels) and "
                         "the context (seq_len %d, horizon %d, n_channels %d) differ", fn, series->desc.lookback,
                         series->desc.horizon, series->info.channels, c.seq_len, c.horizon, c.n_channels);
    else if (n < 1) r = gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the split has no window", fn);
    if (r == GPT2RT_OK) {
        out->windows = n;
        gpt2rt_forecaster_errors(pred, y, n, c.horizon, c.n_channels, out->sse, out->sae);
        r = gpt2rt_forecaster_baselines(ctx, x, y, n, period, lm, out->base_mse, out->base_mae);
    }
    free(x); free(y);
    return r;
}

typedef struct gpt2rt__fc_buf { char *p; size_t len, cap; int failed; } gpt2rt__fc_buf;

static void gpt2rt__fc_put(gpt2rt__fc_buf *b, const char *fmt, ...) GPT2RT__PRINTF(2, 3);
static void gpt2rt__fc_put(gpt2rt__fc_buf *b, const char *fmt, ...) {
    va_list ap;
    for (int pass = 0; pass < 2 && !b->failed; pass++) {
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) { b->failed = 1; return; }
        if (b->p && b->len + (size_t)n < b->cap) { b->len += (size_t)n; return; }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *q = (char *)realloc(b->p, cap);
        if (!q) { b->failed = 1; return; }
        b->p = q; b->cap = cap;
    }
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_csv(gpt2rt_forecaster *fc, const gpt2rt_series *s, int64_t first,
                                               int64_t nw, const float *p, int with_origin, char **text,
                                               size_t *len) {
    if (!fc || fc->failed) return fc ? GPT2RT_ERR_STATE : GPT2RT_ERR_INVALID_ARGUMENT;
    fc->error[0] = 0;
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!s || s->failed || !p || !text || !len || nw < 0)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_csv: %s",
                               !s || s->failed ? "no loaded series" : nw < 0 ? "n < 0" : "forecasts, text or len is NULL");
    int64_t L = fc->info.lookback, H = fc->info.horizon, M = fc->info.channels;
    if (s->info.channels != M || first < 0 || first + nw - 1 + L > s->info.rows)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_csv: "
                               "windows %lld to %lld of lookback %lld in a series of %lld rows and %d channels (the "
                               "forecaster's: %lld)", (long long)first, (long long)(first + nw - 1), (long long)L,
                               (long long)s->info.rows, s->info.channels, (long long)M);
    int dated = s->info.date_step > 0 && gpt2rt_series_date_column(s);
    gpt2rt__fc_buf b = {NULL, 0, 0, 0};
    gpt2rt__fc_put(&b, "%s%s", with_origin ? "origin," : "", dated ? gpt2rt_series_date_column(s) : "step");
    for (int64_t m = 0; m < M; m++) gpt2rt__fc_put(&b, ",%s", fc->name[m]);
    gpt2rt__fc_put(&b, "\n");
    for (int64_t w = 0; w < nw; w++) {
        int64_t last = first + w + L - 1; /* the window's last row */
        char a[64], d[64];
        if (with_origin && (!dated || gpt2rt_series_date(s, last, a, sizeof a) != GPT2RT_OK))
            snprintf(a, sizeof a, "%lld", (long long)last);
        for (int64_t h = 0; h < H; h++) {
            if (!dated || gpt2rt_series_date(s, last + 1 + h, d, sizeof d) != GPT2RT_OK)
                snprintf(d, sizeof d, "%lld", (long long)(last + 1 + h));
            gpt2rt__fc_put(&b, "%s%s%s", with_origin ? a : "", with_origin ? "," : "", d);
            for (int64_t m = 0; m < M; m++) gpt2rt__fc_put(&b, ",%.9g", (double)p[(w * H + h) * M + m]);
            gpt2rt__fc_put(&b, "\n");
        }
    }
    if (b.failed) {
        free(b.p);
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_forecaster_csv: out of "
                               "memory for the text of %lld windows", (long long)nw);
    }
    *text = b.p;
    *len = b.len;
    return GPT2RT_OK;
}

/* ---- outputs against inputs, checked before anything is written ---- */

/* path's directory ("." for a bare name) stat'ed into st, and *base (may be NULL) at
   path's last component; 0 when it does not stat */
static int gpt2rt__fc_parent_stat(const char *path, struct stat *st, const char **base) {
    size_t n = strlen(path);
    char *p = (char *)malloc(n + 2);
    if (!p) return 0;
    memcpy(p, path, n + 1);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    char *slash = strrchr(p, '/');
    if (base) *base = path + (slash ? slash - p + 1 : 0);
    if (!slash) strcpy(p, ".");
    else if (slash == p) p[1] = 0;
    else *slash = 0;
    int good = stat(p, st) == 0;
    free(p);
    return good;
}

/* the same file or directory: device and inode (Windows gives no inode: never) */
static int gpt2rt__fc_same_id(const struct stat *a, const struct stat *b) {
#ifdef _WIN32
    (void)a; (void)b;
    return 0;
#else
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
#endif
}

GPT2RT_DEF gpt2rt_forecaster_clash gpt2rt_forecaster_path_clash(const char *out, const char *in) {
    if (!out || !in) return GPT2RT_FORECASTER_APART;
    struct stat so, si, po, pi;
    int eo = stat(out, &so) == 0, ei = stat(in, &si) == 0;
    const char *bo, *bi;
    if (eo && ei ? gpt2rt__fc_same_id(&so, &si)
                 : !eo && !ei && gpt2rt__fc_parent_stat(out, &po, &bo) && gpt2rt__fc_parent_stat(in, &pi, &bi) &&
                   gpt2rt__fc_same_id(&po, &pi) && strcspn(bo, "/") == strcspn(bi, "/") &&
                   !strncmp(bo, bi, strcspn(bo, "/")))
        return eo && GPT2RT__IS_DIR(so.st_mode) ? GPT2RT_FORECASTER_SAME_DIR : GPT2RT_FORECASTER_SAME_FILE;
    if (ei && GPT2RT__IS_DIR(si.st_mode) && gpt2rt__fc_parent_stat(out, &po, NULL) && gpt2rt__fc_same_id(&po, &si))
        return GPT2RT_FORECASTER_OUT_INSIDE;
    if (eo && GPT2RT__IS_DIR(so.st_mode) && gpt2rt__fc_parent_stat(in, &pi, NULL) && gpt2rt__fc_same_id(&pi, &so))
        return GPT2RT_FORECASTER_IN_INSIDE;
    return GPT2RT_FORECASTER_APART;
}

#ifdef _WIN32
#define GPT2RT__FC_WRITABLE(p, dir) (_access(p, 2) == 0)
#else
#define GPT2RT__FC_WRITABLE(p, dir) (access(p, (dir) ? W_OK | X_OK : W_OK) == 0)
#endif

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_path_check(const char *path, int dir, char *why, size_t cap) {
    char none[1];
    if (!why || !cap) why = none, cap = sizeof none;
    why[0] = 0;
    if (!path || !*path) {
        snprintf(why, cap, "no path given");
        return GPT2RT_ERR_INVALID_ARGUMENT;
    }
    struct stat st;
    if (stat(path, &st) == 0) {
        if (dir && !GPT2RT__IS_DIR(st.st_mode)) {
            snprintf(why, cap, "exists and is not a directory (the weights go into a directory): name a new path or "
                     "a directory");
            return GPT2RT_ERR_INVALID_ARGUMENT;
        }
        if (!dir && GPT2RT__IS_DIR(st.st_mode)) {
            snprintf(why, cap, "is a directory; name a file in it");
            return GPT2RT_ERR_INVALID_ARGUMENT;
        }
        if (!GPT2RT__FC_WRITABLE(path, dir)) {
            snprintf(why, cap, "not writable (%s)", strerror(errno));
            return GPT2RT_ERR_IO;
        }
        return GPT2RT_OK;
    }
    if (errno != ENOENT) {
        snprintf(why, cap, "%s", strerror(errno));
        return GPT2RT_ERR_IO;
    }
    /* a new name: its directory must exist and take it */
    size_t n = strlen(path);
    char *parent = (char *)malloc(n + 2);
    if (!parent) {
        snprintf(why, cap, "out of memory");
        return GPT2RT_ERR_OUT_OF_MEMORY;
    }
    memcpy(parent, path, n + 1);
    while (n > 1 && parent[n - 1] == '/') parent[--n] = 0;
    char *slash = strrchr(parent, '/');
    if (!slash) strcpy(parent, ".");
    else if (slash == parent) parent[1] = 0;
    else *slash = 0;
    gpt2rt_result r = GPT2RT_OK;
    if (stat(parent, &st) != 0 || !GPT2RT__IS_DIR(st.st_mode)) {
        snprintf(why, cap, "the directory %s does not exist%s", parent, dir ? " (one directory is created, not its "
                 "parents)" : "");
        r = GPT2RT_ERR_INVALID_ARGUMENT;
    } else if (!GPT2RT__FC_WRITABLE(parent, 1)) {
        snprintf(why, cap, "the directory %s is not writable (%s)", parent, strerror(errno));
        r = GPT2RT_ERR_IO;
    }
    free(parent);
    return r;
}

/* the temporary file beside dest (*tmp malloc'd), created new; POSIX: with dest's
   permissions, or a new file's (0666 less the umask) */
static FILE *gpt2rt__fc_tmp_open(const char *dest, char **tmp) {
    size_t n = strlen(dest) + 24;
    FILE *f = NULL;
    if (!(*tmp = (char *)malloc(n))) return NULL;
#if !defined(_WIN32) && defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 200809L
    snprintf(*tmp, n, "%s.tmp.XXXXXX", dest);
    int fd = mkstemp(*tmp);
    struct stat st;
    mode_t mask = umask(0);
    umask(mask);
    if (fd >= 0 && (fchmod(fd, stat(dest, &st) == 0 ? st.st_mode & 07777 : 0666 & ~mask) != 0 ||
                    !(f = fdopen(fd, "w")))) {
        int e = errno;
        close(fd);
        remove(*tmp);
        errno = e;
    }
#else /* C11's exclusive create */
    for (int k = 0; !f && k < 1000; k++) {
        snprintf(*tmp, n, "%s.tmp-%d", dest, k);
        f = fopen(*tmp, "wbx");
    }
#endif
    if (!f) { free(*tmp); *tmp = NULL; }
    return f;
}

/* path with its symbolic links followed (malloc'd; NULL: out of memory): the file a
   write replaces, the links kept */
static char *gpt2rt__fc_link_target(const char *path) {
    char *p = (char *)malloc(strlen(path) + 1);
    if (p) strcpy(p, path);
#if !defined(_WIN32) && defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 200112L
    for (int hop = 0; p && hop < 40; hop++) { /* 40: Linux's limit on links followed */
        struct stat st;
        char to[4096];
        ssize_t n = lstat(p, &st) == 0 && S_ISLNK(st.st_mode) ? readlink(p, to, sizeof to - 1) : -1;
        if (n < 0) break;
        to[n] = 0;
        const char *slash = strrchr(p, '/');
        size_t dn = to[0] == '/' || !slash ? 0 : (size_t)(slash - p + 1); /* relative: from the link's directory */
        char *q = (char *)malloc(dn + (size_t)n + 1);
        if (q) { memcpy(q, p, dn); memcpy(q + dn, to, (size_t)n + 1); }
        free(p);
        p = q;
    }
#endif
    return p;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_csv_write(gpt2rt_forecaster *fc, const char *path, const char *text,
                                                     size_t len, const char *data) {
    if (!fc || fc->failed) return fc ? GPT2RT_ERR_STATE : GPT2RT_ERR_INVALID_ARGUMENT;
    fc->error[0] = 0;
    if (!path || (!text && len))
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_csv_write: %s is NULL",
                               !path ? "path" : "text");
    gpt2rt_forecaster_clash k = gpt2rt_forecaster_path_clash(path, data);
    if (k == GPT2RT_FORECASTER_SAME_FILE || k == GPT2RT_FORECASTER_SAME_DIR)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s and %s (the data) are the same %s: writing "
                               "would replace it; nothing was written", path, data, k == GPT2RT_FORECASTER_SAME_DIR
                               ? "directory" : "file");
    k = gpt2rt_forecaster_path_clash(path, fc->dir);
    if (k != GPT2RT_FORECASTER_APART)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s %s the forecaster's directory %s: writing "
                               "could replace its files; nothing was written", path, k == GPT2RT_FORECASTER_OUT_INSIDE
                               ? "lies inside" : k == GPT2RT_FORECASTER_IN_INSIDE ? "holds" : "is", fc->dir);
    char *tmp = NULL, *dest = gpt2rt__fc_link_target(path);
    FILE *f = dest ? gpt2rt__fc_tmp_open(dest, &tmp) : NULL;
    if (!f) {
        int e = dest ? errno : ENOMEM;
        free(dest);
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_IO, "%s: cannot create a file beside it: %s", path, strerror(e));
    }
    int good = fwrite(text, 1, len, f) == len;
    good = fflush(f) == 0 && !ferror(f) && good;
    int e = errno;
    if (fclose(f) != 0 && good) good = 0, e = errno;
#ifdef _WIN32
    if (good) remove(dest); /* rename does not replace a file there */
#endif
    if (good && gpt2rt__fc_rename(tmp, dest) != 0) good = 0, e = errno;
    if (!good) remove(tmp);
    free(tmp); free(dest);
    if (!good)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_IO, "%s: writing the forecasts failed: %s; %s is as it was", path,
                               strerror(e), path);
    return GPT2RT_OK;
}
#endif /* GPT2RT_NO_SERIES */
#endif /* GPT2RT__SRC_FORECASTER_TRAIN_H */
