/* inputs/forecaster.h - 6.4 Forecaster
   may call: inputs/series.h and what it includes */
#ifndef GPT2RT__SRC_INPUTS_FORECASTER_H
#define GPT2RT__SRC_INPUTS_FORECASTER_H
#include "series.h"

/* ==== 6.4 Forecaster ==== */

/* A trained patch model with what its forecast needs (gpt2rt_forecaster_save): the
   weights as gpt2rt_weights_save writes them, and forecaster.json, one flat JSON
   object (every key once; numbers, strings, null, arrays of numbers or of strings),
   written and read here only. The forecast is the training run's scoring, step for
   step: batches of info.batch windows (the last filled up by repeating its last
   window), the model's predictions in the scaler's units, then the linear map's
   offset (linear_residual) and the blend toward the map, in double, rounded once. */

struct gpt2rt_forecaster {
    int failed;
    char error[512];
    gpt2rt_ctx *ctx;
    gpt2rt_forecaster_info info;
    char *names;           /* the channels' names, then the date column's, NUL-separated */
    char **name;           /* (M) into names */
    char *date_name;       /* into names, NULL: none */
    double *mean, *std;    /* (M) the scaler */
    double *W;             /* (L+1, H) the linear map, NULL: none */
    float *x, *pred, *c, *mus; /* scratch: (B,L,M), (B,H,M), (B,H,M), (B,M) */
    double *z, *acc;       /* scratch: L+1, H */
};

static const char *gpt2rt__fc_borders[] = {"auto", "etth", "ettm", "ratio", "none"};

/* the linear map's forecast minus each series' lookback mean, (nb,H,M) into c, and
   the means (nb,M) into mus: each series of x (nb,L,M) normalised as RevIN does
   (mean, sqrt(biased variance + 1e-5)), z (L+1) with a trailing 1, c = sd * W'z;
   summed in double in index order (examples/timeseries.c fits W on the same terms) */
static void gpt2rt__fc_lin_offset(const double *W, int64_t L, int64_t H, const float *x, int64_t nb, int64_t M,
                                  float *c, float *mus, double *z, double *acc) {
    for (int64_t w = 0; w < nb; w++)
        for (int64_t m = 0; m < M; m++) {
            const float *xs = x + w * L * M;
            double s = 0, v = 0, sd;
            for (int64_t k = 0; k < L; k++) s += xs[k * M + m];
            s /= (double)L;
            for (int64_t k = 0; k < L; k++) v += (xs[k * M + m] - s) * (xs[k * M + m] - s);
            sd = sqrt(v / (double)L + 1e-5);
            for (int64_t k = 0; k < L; k++) z[k] = (xs[k * M + m] - s) / sd;
            z[L] = 1.0;
            mus[w * M + m] = (float)s;
            for (int64_t h = 0; h < H; h++) acc[h] = 0;
            for (int64_t k = 0; k <= L; k++) {
                const double *wk = W + k * H, zk = z[k];
                for (int64_t h = 0; h < H; h++) acc[h] += zk * wk[h];
            }
            for (int64_t h = 0; h < H; h++) c[(w * H + h) * M + m] = (float)(sd * acc[h]);
        }
}

/* ---- writing forecaster.json ---- */

static void gpt2rt__fc_put_str(FILE *f, const char *key, const char *v, int last) {
    char esc[1024];
    if (!v) { fprintf(f, "  \"%s\": null%s\n", key, last ? "" : ","); return; }
    gpt2rt__json_escape(esc, sizeof esc, v);
    fprintf(f, "  \"%s\": \"%s\"%s\n", key, esc, last ? "" : ",");
}

static void gpt2rt__fc_put_nums(FILE *f, const char *key, const double *v, int64_t n) {
    fprintf(f, "  \"%s\": [", key);
    for (int64_t i = 0; i < n; i++) fprintf(f, "%s%.17g", i ? (i % 8 ? ", " : ",\n    ") : "", v[i]);
    fprintf(f, "],\n");
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_save(gpt2rt_ctx *ctx, const char *dir, const gpt2rt_forecaster_desc *desc) {
    GPT2RT__CHECK_CTX(ctx);
    if (!dir || !desc || !desc->series)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: %s is NULL",
                            !dir ? "dir" : !desc ? "desc" : "desc->series");
    if (strlen(dir) > 4000) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: dir too long");
    gpt2rt_config c = gpt2rt_config_get(ctx);
    const gpt2rt_series *s = desc->series;
    if (c.input != GPT2RT_INPUT_PATCHES || (c.head != GPT2RT_HEAD_REGRESSION && c.head != GPT2RT_HEAD_PATCH_DECODE))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: a forecaster forecasts a horizon: "
                            "input = PATCHES with head = REGRESSION or PATCH_DECODE (this context: input %d, head %d)",
                            (int)c.input, (int)c.head);
    if (s->failed)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: desc->series failed to load");
    if (s->info.channels != c.n_channels || s->desc.lookback != c.seq_len || s->desc.horizon != c.horizon)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: the series (%d channels, lookback "
                            "%d, horizon %d) and the context (n_channels %d, seq_len %d, horizon %d) differ",
                            s->info.channels, s->desc.lookback, s->desc.horizon, c.n_channels, c.seq_len, c.horizon);
    if (!(desc->blend >= 0 && desc->blend <= 1) || desc->batch < 0 || (desc->blend > 0 && !desc->linear) ||
        (desc->linear_residual && !desc->linear))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: blend = %g must lie in [0, 1], "
                            "batch = %d >= 0, and blend > 0 or linear_residual = %d need the linear map (linear is %s)",
                            desc->blend, desc->batch, desc->linear_residual, desc->linear ? "given" : "NULL");
    int64_t L = c.seq_len, H = c.horizon, M = c.n_channels, nw = (L + 1) * H;
    for (int64_t i = 0; desc->linear && i < nw; i++)
        if (!isfinite(desc->linear[i]))
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: linear[%lld] (row %lld, "
                                "column %lld) is %g; the map must be finite", (long long)i, (long long)(i / H),
                                (long long)(i % H), desc->linear[i]);
    gpt2rt_result r = gpt2rt_weights_save(ctx, dir);
    if (r != GPT2RT_OK) return r;
    char path[4200], tmp[4200];
    snprintf(path, sizeof path, "%s/forecaster.json", dir);
    snprintf(tmp, sizeof tmp, "%s/forecaster.json.tmp", dir);
    FILE *f = fopen(tmp, "wb");
    if (!f) return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    fprintf(f, "{\n");
    gpt2rt__fc_put_str(f, "format", "gpt2rt-forecaster", 0);
    fprintf(f, "  \"version\": 1,\n");
    gpt2rt__fc_put_str(f, "note", desc->note, 0);
    gpt2rt__fc_put_str(f, "head", c.head == GPT2RT_HEAD_PATCH_DECODE ? "patch_decode" : "regression", 0);
    gpt2rt__fc_put_str(f, "attn_mask", c.attn_mask == GPT2RT_MASK_PLACEHOLDERS ? "placeholders" : "causal", 0);
    fprintf(f, "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_embd\": %d,\n  \"max_seq_len\": %d,\n", c.n_layer, c.n_head,
            c.n_embd, c.max_seq_len);
    fprintf(f, "  \"lookback\": %d,\n  \"patch_len\": %d,\n  \"patch_stride\": %d,\n  \"horizon\": %d,\n", c.seq_len,
            c.patch_len, c.patch_stride, c.horizon);
    gpt2rt__fc_put_str(f, "trained_precision", c.precision == GPT2RT_PRECISION_BF16 ? "bf16"
                       : c.precision == GPT2RT_PRECISION_FP16 ? "fp16" : "fp32", 0);
    fprintf(f, "  \"channels\": %d,\n  \"revin_affine\": %d,\n  \"batch\": %d,\n", c.n_channels, c.revin_affine,
            desc->batch ? desc->batch : c.batch_size * (c.parallel == GPT2RT_PARALLEL_DATA ? c.n_devices : 1));
    fprintf(f, "  \"columns\": [");
    for (int64_t m = 0; m < M; m++) {
        char esc[1024];
        gpt2rt__json_escape(esc, sizeof esc, s->name[m]);
        fprintf(f, "%s\"%s\"", m ? ", " : "", esc);
    }
    fprintf(f, "],\n");
    gpt2rt__fc_put_str(f, "date_column", s->date_name, 0);
    fprintf(f, "  \"date_step\": %.17g,\n", s->info.date_step);
    gpt2rt__fc_put_str(f, "borders", gpt2rt__fc_borders[s->info.borders], 0);
    gpt2rt__fc_put_nums(f, "scaler_mean", s->mean, M);
    gpt2rt__fc_put_nums(f, "scaler_std", s->std, M);
    fprintf(f, "  \"linear_residual\": %d,\n  \"blend\": %.17g,\n", desc->linear_residual, desc->blend);
    if (desc->linear) {
        fprintf(f, "  \"linear_rows\": %lld,\n  \"linear_cols\": %lld,\n", (long long)(L + 1), (long long)H);
        gpt2rt__fc_put_nums(f, "linear", desc->linear, nw);
    } else fprintf(f, "  \"linear\": null,\n");
    fprintf(f, "  \"end\": true\n}\n");
    if ((r = gpt2rt__write_close(ctx, f, tmp, path, 1)) != GPT2RT_OK) return r;
    return gpt2rt__rename(ctx, tmp, path);
}

/* ---- reading forecaster.json: the keys first, then each value where it is needed ---- */

typedef struct gpt2rt__fj {
    const char *p, *end;
    int n;
    char key[64][32];
    const char *val[64]; /* where key[i]'s value starts */
} gpt2rt__fj;

static void gpt2rt__fj_ws(gpt2rt__fj *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

/* a string at p into out (cap bytes, NUL-terminated); 0 when it is not one or too long */
static int gpt2rt__fj_str(gpt2rt__fj *j, char *out, size_t cap) {
    gpt2rt__fj_ws(j);
    if (j->p >= j->end || *j->p != '"') return 0;
    size_t n = 0;
    for (j->p++; j->p < j->end && *j->p != '"'; j->p++) {
        unsigned c = (unsigned char)*j->p;
        if (c < 0x20) return 0;
        if (c == '\\') {
            if (++j->p >= j->end) return 0;
            c = (unsigned char)*j->p;
            if (c == 'u') {
                unsigned u = 0;
                for (int i = 0; i < 4; i++) {
                    if (++j->p >= j->end || gpt2rt__hex(*j->p) < 0) return 0;
                    u = u * 16 + (unsigned)gpt2rt__hex(*j->p);
                }
                if (u == 0 || u >= 0x80) return 0; /* the writer escapes control characters only */
                c = u;
            } else if (c == 'n') c = '\n';
            else if (c == 't') c = '\t';
            else if (c == 'r') c = '\r';
            else if (c != '"' && c != '\\' && c != '/') return 0;
        }
        if (n + 1 >= cap) return 0;
        out[n++] = (char)c;
    }
    if (j->p >= j->end) return 0;
    j->p++;
    out[n] = 0;
    return 1;
}

/* past one value: a number, string, true/false/null, or an array of them */
static int gpt2rt__fj_skip(gpt2rt__fj *j, int depth) {
    gpt2rt__fj_ws(j);
    if (j->p >= j->end) return 0;
    if (*j->p == '"') { /* any length: nothing kept */
        for (j->p++; j->p < j->end && *j->p != '"'; j->p++)
            if (*j->p == '\\' && ++j->p >= j->end) return 0;
        if (j->p >= j->end) return 0;
        j->p++;
        return 1;
    }
    if (*j->p == '[') {
        if (depth > 0) return 0;
        j->p++;
        gpt2rt__fj_ws(j);
        if (j->p < j->end && *j->p == ']') { j->p++; return 1; }
        for (;;) {
            if (!gpt2rt__fj_skip(j, depth + 1)) return 0;
            gpt2rt__fj_ws(j);
            if (j->p < j->end && *j->p == ',') { j->p++; continue; }
            if (j->p < j->end && *j->p == ']') { j->p++; return 1; }
            return 0;
        }
    }
    const char *b = j->p;
    while (j->p < j->end && ((*j->p >= '0' && *j->p <= '9') || (*j->p >= 'a' && *j->p <= 'z') || strchr("+-.E", *j->p))) j->p++;
    return j->p > b;
}

static int gpt2rt__fj_parse(gpt2rt__fj *j, const char *text, size_t len) {
    memset(j, 0, sizeof *j);
    j->p = text;
    j->end = text + len;
    gpt2rt__fj_ws(j);
    if (j->p >= j->end || *j->p++ != '{') return 0;
    for (;;) {
        if (j->n == 64 || !gpt2rt__fj_str(j, j->key[j->n], sizeof j->key[0])) return 0;
        gpt2rt__fj_ws(j);
        if (j->p >= j->end || *j->p++ != ':') return 0;
        gpt2rt__fj_ws(j);
        j->val[j->n++] = j->p;
        if (!gpt2rt__fj_skip(j, 0)) return 0;
        gpt2rt__fj_ws(j);
        if (j->p < j->end && *j->p == ',') { j->p++; continue; }
        if (j->p < j->end && *j->p == '}') return 1;
        return 0;
    }
}

/* key's value position in *j (p moved there), 0 when the key is absent */
static int gpt2rt__fj_at(gpt2rt__fj *j, const char *key) {
    for (int i = 0; i < j->n; i++)
        if (!strcmp(j->key[i], key)) { j->p = j->val[i]; return 1; }
    return 0;
}

static int gpt2rt__fj_null(gpt2rt__fj *j) {
    return j->end - j->p >= 4 && !memcmp(j->p, "null", 4);
}

/* a number at p (strtod's syntax, finite) */
static int gpt2rt__fj_num(gpt2rt__fj *j, double *v) {
    char buf[64];
    size_t n = 0;
    gpt2rt__fj_ws(j);
    while (j->p < j->end && n + 1 < sizeof buf && ((*j->p >= '0' && *j->p <= '9') || strchr("+-.eE", *j->p)))
        buf[n++] = *j->p++;
    buf[n] = 0;
    char *e;
    *v = strtod(buf, &e);
    return n > 0 && *e == 0 && isfinite(*v);
}

/* n numbers of an array at p into v */
static int gpt2rt__fj_nums(gpt2rt__fj *j, double *v, int64_t n) {
    gpt2rt__fj_ws(j);
    if (j->p >= j->end || *j->p++ != '[') return 0;
    for (int64_t i = 0; i < n; i++) {
        gpt2rt__fj_ws(j);
        if (i && (j->p >= j->end || *j->p++ != ',')) return 0;
        if (!gpt2rt__fj_num(j, &v[i])) return 0;
    }
    gpt2rt__fj_ws(j);
    return j->p < j->end && *j->p == ']';
}

static gpt2rt_result gpt2rt__fc_done(gpt2rt_forecaster **out, gpt2rt_forecaster *fc, gpt2rt_result r) {
    if (r != GPT2RT_OK) {
        gpt2rt_free(fc->ctx);
        free(fc->names); free(fc->name); free(fc->mean); free(fc->std); free(fc->W);
        free(fc->x); free(fc->pred); free(fc->c); free(fc->mus); free(fc->z); free(fc->acc);
        char keep[512];
        memcpy(keep, fc->error, sizeof keep);
        memset(fc, 0, sizeof *fc);
        memcpy(fc->error, keep, sizeof keep);
        fc->failed = 1;
    }
    *out = fc;
    return r;
}

/* the model and runtime of the forecaster in j into c; 0 (and the message) when a
   field is missing or out of range */
static int gpt2rt__fc_config(gpt2rt_forecaster *fc, gpt2rt__fj *j, const char *file, gpt2rt_config *c) {
    static const char *keys[] = {"n_layer", "n_head", "n_embd", "max_seq_len", "lookback", "patch_len", "patch_stride",
                                 "horizon", "channels", "revin_affine", "batch", "linear_residual"};
    int *dst[] = {&c->n_layer, &c->n_head, &c->n_embd, &c->max_seq_len, &c->seq_len, &c->patch_len, &c->patch_stride,
                  &c->horizon, &c->n_channels, &c->revin_affine, &fc->info.batch, &fc->info.linear_residual};
    for (int k = 0; k < 12; k++) {
        double v;
        if (!gpt2rt__fj_at(j, keys[k]) || !gpt2rt__fj_num(j, &v) || v != floor(v) || v < 0 || v > 1e9) {
            gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: \"%s\" is missing or not an integer in [0, 1e9]", file,
                            keys[k]);
            return 0;
        }
        *dst[k] = (int)v;
    }
    char head[32], mask[32], borders[16];
    if (!gpt2rt__fj_at(j, "head") || !gpt2rt__fj_str(j, head, sizeof head) ||
        (strcmp(head, "regression") && strcmp(head, "patch_decode")) || !gpt2rt__fj_at(j, "attn_mask") ||
        !gpt2rt__fj_str(j, mask, sizeof mask) || (strcmp(mask, "causal") && strcmp(mask, "placeholders")) ||
        !gpt2rt__fj_at(j, "borders") || !gpt2rt__fj_str(j, borders, sizeof borders)) {
        gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: \"head\" (regression or patch_decode), \"attn_mask\" (causal "
                        "or placeholders) or \"borders\" is missing or unknown", file);
        return 0;
    }
    c->input = GPT2RT_INPUT_PATCHES;
    c->head = strcmp(head, "regression") ? GPT2RT_HEAD_PATCH_DECODE : GPT2RT_HEAD_REGRESSION;
    c->attn_mask = strcmp(mask, "causal") ? GPT2RT_MASK_PLACEHOLDERS : GPT2RT_MASK_CAUSAL;
    fc->info.borders = GPT2RT_SERIES_BORDERS_AUTO;
    for (int k = 1; k < 5; k++)
        if (!strcmp(borders, gpt2rt__fc_borders[k])) fc->info.borders = (gpt2rt_series_borders)k;
    if (c->n_channels < 1 || c->seq_len < 1 || c->horizon < 1 || fc->info.batch < 1) {
        gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: channels = %d, lookback = %d, horizon = %d and batch = %d "
                        "must be >= 1", file, c->n_channels, c->seq_len, c->horizon, fc->info.batch);
        return 0;
    }
    fc->info.lookback = c->seq_len;
    fc->info.horizon = c->horizon;
    fc->info.channels = c->n_channels;
    return 1;
}

/* the channels' names, the date column, the scaler, the linear map and the blend */
static int gpt2rt__fc_data(gpt2rt_forecaster *fc, gpt2rt__fj *j, const char *file) {
    int64_t M = fc->info.channels, L = fc->info.lookback, H = fc->info.horizon;
    size_t cap = 0;
    if (gpt2rt__fj_at(j, "columns")) cap = (size_t)(j->end - j->p) + 1;
    if (gpt2rt__fj_at(j, "date_column")) cap += (size_t)(j->end - j->p) + 1;
    fc->names = (char *)malloc(cap ? cap : 1);
    fc->name = (char **)calloc((size_t)M, sizeof(char *));
    fc->mean = (double *)malloc(sizeof(double) * (size_t)M);
    fc->std = (double *)malloc(sizeof(double) * (size_t)M);
    if (!fc->names || !fc->name || !fc->mean || !fc->std) {
        gpt2rt__tok_msg(fc->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", file);
        return 0;
    }
    char *q = fc->names;
    int good = gpt2rt__fj_at(j, "columns");
    if (good) {
        gpt2rt__fj_ws(j);
        good = j->p < j->end && *j->p++ == '[';
    }
    for (int64_t m = 0; good && m < M; m++) {
        gpt2rt__fj_ws(j);
        if (m && (j->p >= j->end || *j->p++ != ',')) { good = 0; break; }
        fc->name[m] = q;
        good = gpt2rt__fj_str(j, q, cap - (size_t)(q - fc->names));
        q += strlen(q) + 1;
    }
    if (good) { gpt2rt__fj_ws(j); good = j->p < j->end && *j->p == ']'; }
    if (!good) {
        gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: \"columns\" is missing or is not %lld names", file, (long long)M);
        return 0;
    }
    if (gpt2rt__fj_at(j, "date_column") && !gpt2rt__fj_null(j)) {
        fc->date_name = q;
        if (!gpt2rt__fj_str(j, q, cap - (size_t)(q - fc->names))) {
            gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: \"date_column\" is neither a name nor null", file);
            return 0;
        }
    }
    double v;
    if (gpt2rt__fj_at(j, "date_step") && gpt2rt__fj_num(j, &v) && v >= 0) fc->info.date_step = v;
    if (!gpt2rt__fj_at(j, "scaler_mean") || !gpt2rt__fj_nums(j, fc->mean, M) || !gpt2rt__fj_at(j, "scaler_std") ||
        !gpt2rt__fj_nums(j, fc->std, M)) {
        gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: \"scaler_mean\" and \"scaler_std\" must be %lld finite numbers "
                        "each (one a channel)", file, (long long)M);
        return 0;
    }
    for (int64_t m = 0; m < M; m++)
        if (!(fc->std[m] > 0)) {
            gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: scaler_std[%lld] = %g must be > 0", file, (long long)m,
                            fc->std[m]);
            return 0;
        }
    if (!gpt2rt__fj_at(j, "blend") || !gpt2rt__fj_num(j, &fc->info.blend) || fc->info.blend < 0 || fc->info.blend > 1) {
        gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: \"blend\" is missing or outside [0, 1]", file);
        return 0;
    }
    if (gpt2rt__fj_at(j, "linear") && !gpt2rt__fj_null(j)) {
        double rows = 0, cols = 0;
        if (!gpt2rt__fj_at(j, "linear_rows") || !gpt2rt__fj_num(j, &rows) || !gpt2rt__fj_at(j, "linear_cols") ||
            !gpt2rt__fj_num(j, &cols) || rows != (double)(L + 1) || cols != (double)H) {
            gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: the linear map is %g x %g; lookback %lld and horizon %lld "
                            "need %lld x %lld", file, rows, cols, (long long)L, (long long)H, (long long)(L + 1),
                            (long long)H);
            return 0;
        }
        fc->W = (double *)malloc(sizeof(double) * (size_t)((L + 1) * H));
        if (!fc->W || !gpt2rt__fj_at(j, "linear") || !gpt2rt__fj_nums(j, fc->W, (L + 1) * H)) {
            gpt2rt__tok_msg(fc->error, fc->W ? GPT2RT_ERR_FORMAT : GPT2RT_ERR_OUT_OF_MEMORY, "%s: \"linear\" must be "
                            "%lld finite numbers", file, (long long)((L + 1) * H));
            return 0;
        }
        fc->info.has_linear = 1;
    }
    if ((fc->info.blend > 0 || fc->info.linear_residual) && !fc->W) {
        gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: blend = %g, linear_residual = %d, but no linear map", file,
                        fc->info.blend, fc->info.linear_residual);
        return 0;
    }
    return 1;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_load(gpt2rt_forecaster **out, const char *dir, const gpt2rt_config *base) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    gpt2rt_forecaster *fc = (gpt2rt_forecaster *)calloc(1, sizeof(gpt2rt_forecaster));
    *out = fc;
    if (!fc) return GPT2RT_ERR_OUT_OF_MEMORY;
    if (!dir || strlen(dir) > 4000)
        return gpt2rt__fc_done(out, fc, gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_load: "
                                                        "dir is NULL or too long"));
    char file[4200], weights[4200];
    snprintf(file, sizeof file, "%s/forecaster.json", dir);
    snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
    unsigned char *buf;
    size_t len;
    char err[512];
    if (gpt2rt__tok_read_file(file, &buf, &len, err) != GPT2RT_OK) {
        FILE *w = fopen(weights, "rb");
        if (w) fclose(w);
        return gpt2rt__fc_done(out, fc, gpt2rt__tok_msg(fc->error, GPT2RT_ERR_IO, "%s: no forecaster here (%s)%s", dir, err,
                                                        w ? ": it holds weights only (model.safetensors), not the scaler, "
                                                            "lookback, horizon and columns a forecast needs: save a "
                                                            "forecaster with gpt2rt_forecaster_save (timeseries --save)"
                                                          : ""));
    }
    gpt2rt__fj j;
    char format[32];
    double version = 0;
    int parsed = gpt2rt__fj_parse(&j, (const char *)buf, len);
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    gpt2rt_result r = GPT2RT_OK;
    if (!parsed || !gpt2rt__fj_at(&j, "format") || !gpt2rt__fj_str(&j, format, sizeof format) ||
        strcmp(format, "gpt2rt-forecaster") || !gpt2rt__fj_at(&j, "version") || !gpt2rt__fj_num(&j, &version))
        r = gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: not a forecaster: a JSON object with \"format\": "
                            "\"gpt2rt-forecaster\" and a \"version\" is expected%s", file,
                            parsed ? "" : " (the file does not parse as one flat JSON object)");
    else if (version != 1)
        r = gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: version %g; this gpt2rt reads version 1", file, version);
    else if (!gpt2rt__fc_config(fc, &j, file, &c) || !gpt2rt__fc_data(fc, &j, file))
        r = fc->error[0] && strstr(fc->error, "out of memory") ? GPT2RT_ERR_OUT_OF_MEMORY : GPT2RT_ERR_FORMAT;
    free(buf);
    if (r != GPT2RT_OK) return gpt2rt__fc_done(out, fc, r);
    if (base) { /* the forecast's precision is the caller's (fp32 by default), whatever trained_precision says */
        c.backend = base->backend;
        c.precision = base->precision;
        c.n_threads = base->n_threads;
        c.log = base->log;
        c.log_user = base->log_user;
        if (base->batch_size > 0) fc->info.batch = base->batch_size;
    }
    c.batch_size = fc->info.batch;
    if ((r = gpt2rt_create(&fc->ctx, &c)) != GPT2RT_OK || (r = gpt2rt_weights_load(fc->ctx, dir)) != GPT2RT_OK ||
        (r = gpt2rt_mode_set(fc->ctx, GPT2RT_MODE_EVAL)) != GPT2RT_OK) {
        gpt2rt__tok_msg(fc->error, r, "%s: %s", dir, gpt2rt_last_error(fc->ctx));
        return gpt2rt__fc_done(out, fc, r);
    }
    int64_t B = fc->info.batch, L = c.seq_len, H = c.horizon, M = c.n_channels;
    fc->x = (float *)malloc(sizeof(float) * (size_t)(B * L * M));
    fc->pred = (float *)malloc(sizeof(float) * (size_t)(B * H * M));
    fc->c = (float *)malloc(sizeof(float) * (size_t)(B * H * M));
    fc->mus = (float *)malloc(sizeof(float) * (size_t)(B * M));
    fc->z = (double *)malloc(sizeof(double) * (size_t)(L + 1));
    fc->acc = (double *)malloc(sizeof(double) * (size_t)H);
    if (!fc->x || !fc->pred || !fc->c || !fc->mus || !fc->z || !fc->acc)
        return gpt2rt__fc_done(out, fc, gpt2rt__tok_msg(fc->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for a "
                                                        "batch of %lld windows", dir, (long long)B));
    return GPT2RT_OK;
}

GPT2RT_DEF void gpt2rt_forecaster_free(gpt2rt_forecaster *fc) {
    if (!fc) return;
    gpt2rt_free(fc->ctx);
    free(fc->names); free(fc->name); free(fc->mean); free(fc->std); free(fc->W);
    free(fc->x); free(fc->pred); free(fc->c); free(fc->mus); free(fc->z); free(fc->acc);
    free(fc);
}

GPT2RT_DEF const char *gpt2rt_forecaster_last_error(const gpt2rt_forecaster *fc) {
    return fc ? fc->error : "gpt2rt_forecaster: no forecaster (out of memory)";
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_info_get(const gpt2rt_forecaster *fc, gpt2rt_forecaster_info *info) {
    if (!fc || !info) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (fc->failed) return GPT2RT_ERR_STATE;
    *info = fc->info;
    return GPT2RT_OK;
}

GPT2RT_DEF const char *gpt2rt_forecaster_column(const gpt2rt_forecaster *fc, int m) {
    return fc && !fc->failed && m >= 0 && m < fc->info.channels ? fc->name[m] : NULL;
}

GPT2RT_DEF const char *gpt2rt_forecaster_date_column(const gpt2rt_forecaster *fc) {
    return fc && !fc->failed ? fc->date_name : NULL;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_scaler(const gpt2rt_forecaster *fc, int m, double *mean, double *std) {
    if (!fc || !mean || !std) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (fc->failed) return GPT2RT_ERR_STATE;
    if (m < 0 || m >= fc->info.channels) return GPT2RT_ERR_INVALID_ARGUMENT;
    *mean = fc->mean[m];
    *std = fc->std[m];
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_ctx *gpt2rt_forecaster_ctx(gpt2rt_forecaster *fc) { return fc && !fc->failed ? fc->ctx : NULL; }

/* x (n,L,M) -> out (n,H,M); units: both in the data's units (scaled on the way in,
   unscaled on the way out), else in the scaler's */
static gpt2rt_result gpt2rt__fc_run(gpt2rt_forecaster *fc, const char *fn, const float *x, int64_t n, float *out,
                                    int units) {
    if (!fc) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (fc->failed) return GPT2RT_ERR_STATE;
    if (!x || !out || n < 0)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: x is %s, out is %s, n = %lld (>= 0)", fn,
                               x ? "given" : "NULL", out ? "given" : "NULL", (long long)n);
    int64_t B = fc->info.batch, L = fc->info.lookback, H = fc->info.horizon, M = fc->info.channels;
    for (int64_t first = 0; first < n; first += B) {
        int64_t real = n - first < B ? n - first : B;
        for (int64_t i = 0; i < real * L * M; i++) {
            float v = x[first * L * M + i];
            if (units) v = (float)(((double)v - fc->mean[i % M]) / fc->std[i % M]);
            if (!isfinite(v))
                return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: x[%lld] (window %lld, step %lld, "
                                       "channel %lld) is %g%s; values must be finite", fn,
                                       (long long)(first * L * M + i), (long long)(first + i / (L * M)),
                                       (long long)(i / M % L), (long long)(i % M), (double)x[first * L * M + i],
                                       units ? " (scaled)" : "");
            fc->x[i] = v;
        }
        for (int64_t b = real; b < B; b++) memcpy(fc->x + b * L * M, fc->x + (real - 1) * L * M, sizeof(float) * (size_t)(L * M));
        if (gpt2rt_forward_series(fc->ctx, fc->x, NULL, NULL) != GPT2RT_OK ||
            gpt2rt_predictions(fc->ctx, fc->pred, B * H * M) != GPT2RT_OK)
            return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_STATE, "%s: %s", fn, gpt2rt_last_error(fc->ctx));
        if (fc->W) {
            gpt2rt__fc_lin_offset(fc->W, L, H, fc->x, real, M, fc->c, fc->mus, fc->z, fc->acc);
            for (int64_t i = 0; i < real * H * M; i++) {
                double p = (double)fc->pred[i] + (fc->info.linear_residual ? (double)fc->c[i] : 0.0);
                double d = (double)fc->mus[i / (H * M) * M + i % M] + (double)fc->c[i] - p; /* linear - forecast */
                fc->pred[i] = (float)(p + fc->info.blend * d);
            }
        }
        for (int64_t i = 0; i < real * H * M; i++)
            out[first * H * M + i] = units ? (float)((double)fc->pred[i] * fc->std[i % M] + fc->mean[i % M]) : fc->pred[i];
    }
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_predict(gpt2rt_forecaster *fc, const float *x, int64_t n, float *out) {
    return gpt2rt__fc_run(fc, "gpt2rt_forecaster_predict", x, n, out, 1);
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_predict_scaled(gpt2rt_forecaster *fc, const float *x, int64_t n, float *out) {
    return gpt2rt__fc_run(fc, "gpt2rt_forecaster_predict_scaled", x, n, out, 0);
}
#endif /* GPT2RT__SRC_INPUTS_FORECASTER_H */
