/* forecaster.h - 12. Forecaster, unless GPT2RT_NO_SERIES: a client of the public calls
   may call: series.h, public/generate.h and what they include */
#ifndef GPT2RT__SRC_FORECASTER_H
#define GPT2RT__SRC_FORECASTER_H
#include "series.h"
#include "public/generate.h"

#ifndef GPT2RT_NO_SERIES
/* ==== 12. Forecaster ==== */

#ifdef _WIN32
#include <io.h> /* _findfirst: what a directory holds before a save replaces it */
#else
#include <dirent.h>
#endif

/* A trained patch model with what its forecast needs (gpt2rt_forecaster_save): a
   directory of the weights as gpt2rt_weights_save writes them, and forecaster.json, one
   flat JSON object, written here and read with the strict JSON reader (4.1): every key
   known and once, every number in its range, the weights file holding exactly the
   model's tensors. A save writes a new directory beside the old and swaps the two, so a
   failure leaves the old forecaster whole. The forecast is the training run's scoring,
   step for step: batches of info.batch windows (the last filled up by repeating its
   last window), the model's predictions in the scaler's units, then the linear map's
   offset (linear_residual) and the blend toward the map, in double, rounded once; a
   value that does not fit a float is refused. */

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
    char *columns;         /* the channels' names as the loader's list "a,b,c"; NULL until asked for */
    gpt2rt_forecaster_intervals iv; /* the conformal scores, iv.rank NULL: none */
    char *dir;             /* the directory it was loaded from (gpt2rt_forecaster_csv_write keeps out of it) */
};

static const char *gpt2rt__fc_borders[] = {"auto", "etth", "ettm", "ratio", "none"};
static const char *gpt2rt__fc_fills[] = {"refuse", "previous", "linear"};

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

/* ---- writing a forecaster directory: the whole of it, or nothing ---- */

/* Bounds of a forecaster's numbers, the same for save and load, so that every file
   a save writes loads. The scaler is a StandardScaler fit on finite floats
   (gpt2rt_series_load): |mean| <= FLT_MAX, and std = 1 or >= 10 * DBL_EPSILON
   (sklearn's floor, 2.220446049250313e-15), <= FLT_MAX (half the data's range). Then
   for any finite float x, |x - mean| <= 2 FLT_MAX = 6.8e38 and |x - mean| / std <=
   3.1e53: finite in double. The linear map's |w| <= 1e15: its offset sd * sum_k z_k w_k
   has L + 1 <= 2^31 terms, |z_k| <= sqrt(L) <= 2^15.5 (RevIN-normalised), sd <= FLT_MAX,
   so it is at most 2^46.5 * 1e15 * 3.4e38 = 3.4e67, finite in double (a forecast that
   does not fit a float is refused when it is made). */
#define GPT2RT__FC_MEAN_MAX 3.4028234663852886e38
#define GPT2RT__FC_STD_MIN 2.220446049250313e-15
#define GPT2RT__FC_STD_MAX 3.4028234663852886e38
#define GPT2RT__FC_LINEAR_MAX 1e15

/* the files of a forecaster directory: the only ones a save replaces */
static const char *gpt2rt__fc_files[] = {"forecaster.json", "model.safetensors", "config.json"};

/* a JSON string of any length */
static void gpt2rt__fc_put_esc(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { fputc('\\', f); fputc(c, f); }
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void gpt2rt__fc_put_str(FILE *f, const char *key, const char *v) {
    fprintf(f, "  \"%s\": ", key);
    if (v) gpt2rt__fc_put_esc(f, v);
    else fputs("null", f);
    fputs(",\n", f);
}

static void gpt2rt__fc_put_nums(FILE *f, const char *key, const double *v, int64_t n) {
    fprintf(f, "  \"%s\": [", key);
    for (int64_t i = 0; i < n; i++) fprintf(f, "%s%.17g", i ? (i % 8 ? ", " : ",\n    ") : "", v[i]);
    fprintf(f, "],\n");
}

#ifdef _WIN32
#define GPT2RT__RMDIR _rmdir
#define GPT2RT__MKDIR(d) _mkdir(d)
#else
#define GPT2RT__RMDIR rmdir
#define GPT2RT__MKDIR(d) mkdir(d, 0777)
#endif

/* dir's forecaster files (and the temporaries a failed gpt2rt_weights_save leaves),
   then dir; 0 when dir stays */
static int gpt2rt__fc_rmdir(const char *dir) {
    static const char *extra[] = {"model.safetensors.tmp", "model.safetensors.old", "config.json.tmp"};
    char p[4300];
    for (int i = 0; i < 6; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, i < 3 ? gpt2rt__fc_files[i] : extra[i - 3]);
        remove(p);
    }
    return GPT2RT__RMDIR(dir) == 0;
}

static int gpt2rt__fc_rename(const char *from, const char *to) {
#ifdef GPT2RT__TEST_HOOKS
    if (gpt2rt__test_rename_fail > 0 && --gpt2rt__test_rename_fail == 0) { errno = EIO; return -1; }
#endif
    return rename(from, to);
}

/* whether a save may replace dir: absent (*exists = 0), or a directory that holds a
   forecaster.json and nothing but a forecaster's files (or nothing) */
static gpt2rt_result gpt2rt__fc_dir_check(gpt2rt_ctx *ctx, const char *dir, int *exists) {
    struct stat sb;
    *exists = 0;
#if !defined(_WIN32) && defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 200112L
    if (lstat(dir, &sb) == 0 && S_ISLNK(sb.st_mode))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: %s is a symbolic link; a save "
                            "replaces the directory itself: give the directory it points to", dir);
#endif
    if (stat(dir, &sb) != 0) {
        if (errno == ENOENT) return GPT2RT_OK;
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "gpt2rt_forecaster_save: %s: %s", dir, strerror(errno));
    }
    if (!GPT2RT__IS_DIR(sb.st_mode))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: %s exists and is not a directory",
                            dir);
    *exists = 1;
    char other[512] = "";
    int n = 0, json = 0;
#ifdef _WIN32
    char pat[4300];
    struct _finddata_t fd;
    snprintf(pat, sizeof pat, "%s/*", dir);
    intptr_t h = _findfirst(pat, &fd);
    for (int more = h != -1; more; more = _findnext(h, &fd) == 0) {
        const char *nm = fd.name;
#else
    DIR *d = opendir(dir);
    if (!d) return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "gpt2rt_forecaster_save: cannot list %s: %s", dir, strerror(errno));
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *nm = e->d_name;
#endif
        if (!strcmp(nm, ".") || !strcmp(nm, "..")) continue;
        int k = 0;
        while (k < 3 && strcmp(nm, gpt2rt__fc_files[k])) k++;
        n++;
        if (k == 0) json = 1;
        if (k == 3 && !other[0]) snprintf(other, sizeof other, "%s", nm);
    }
#ifdef _WIN32
    if (h != -1) _findclose(h);
#else
    closedir(d);
#endif
    if (other[0] || (n && !json))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: %s is not a forecaster directory "
                            "(it holds %s%s%s); a save replaces the whole directory, so it replaces only a forecaster "
                            "(forecaster.json, model.safetensors, config.json) or an empty directory: name a new "
                            "directory", dir, other[0] ? "'" : "", other[0] ? other : "no forecaster.json",
                            other[0] ? "'" : "");
    return GPT2RT_OK;
}

/* conformal scores that a load takes back: shape (channels, horizon), 1 <= ranks, ranks
   strictly ascending in [1, windows], scores finite, >= 0 and non-decreasing with the
   rank; "" when they are, else why in why */
static void gpt2rt__fc_iv_check(const gpt2rt_forecaster_intervals *iv, int64_t M, int64_t H, char *why, size_t cap) {
    why[0] = 0;
    if (iv->channels != M || iv->horizon != H || iv->windows < 1 || iv->ranks < 1 || !iv->rank || !iv->score) {
        snprintf(why, cap, "the intervals are %lld channels x %lld steps with %lld ranks of %lld windows; the model's "
                 "are %lld x %lld, with at least one rank and window", (long long)iv->channels, (long long)iv->horizon,
                 (long long)iv->ranks, (long long)iv->windows, (long long)M, (long long)H);
        return;
    }
    for (int64_t g = 0; g < iv->ranks; g++)
        if (iv->rank[g] < (g ? iv->rank[g - 1] + 1 : 1) || iv->rank[g] > iv->windows) {
            snprintf(why, cap, "interval rank %lld is %lld: the ranks ascend strictly within [1, %lld] (the windows)",
                     (long long)g, (long long)iv->rank[g], (long long)iv->windows);
            return;
        }
    for (int64_t i = 0; i < M * H * iv->ranks; i++)
        if (!(iv->score[i] >= 0 && iv->score[i] <= GPT2RT__FC_STD_MAX) || (i % iv->ranks && iv->score[i] < iv->score[i - 1])) {
            snprintf(why, cap, "interval score %lld (channel %lld, step %lld, rank %lld) is %.9g: scores are finite, >= 0 "
                     "and grow with the rank", (long long)i, (long long)(i / (H * iv->ranks)),
                     (long long)(i / iv->ranks % H), (long long)iv->rank[i % iv->ranks], (double)iv->score[i]);
            return;
        }
}

static void gpt2rt__fc_put_intervals(FILE *f, const gpt2rt_forecaster_intervals *iv) {
    fprintf(f, "  \"interval_windows\": %lld,\n  \"interval_ranks\": [", (long long)iv->windows);
    for (int64_t g = 0; g < iv->ranks; g++) fprintf(f, "%s%lld", g ? (g % 16 ? ", " : ",\n    ") : "", (long long)iv->rank[g]);
    fprintf(f, "],\n  \"interval_scores\": [");
    for (int64_t i = 0; i < iv->channels * iv->horizon * iv->ranks; i++)
        fprintf(f, "%s%.9g", i ? (i % 8 ? ", " : ",\n    ") : "", (double)iv->score[i]);
    fprintf(f, "],\n");
}

/* forecaster.json into dir (a new directory of the save's) */
static gpt2rt_result gpt2rt__fc_write_json(gpt2rt_ctx *ctx, const char *dir, const gpt2rt_forecaster_desc *desc) {
    gpt2rt_config c = gpt2rt_config_get(ctx);
    const gpt2rt_series *s = desc->series;
    int64_t L = c.seq_len, H = c.horizon, M = c.n_channels;
    char path[4300];
    snprintf(path, sizeof path, "%s/forecaster.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    fprintf(f, "{\n");
    gpt2rt__fc_put_str(f, "format", "gpt2rt-forecaster");
    fprintf(f, "  \"version\": 1,\n");
    gpt2rt__fc_put_str(f, "note", desc->note);
    gpt2rt__fc_put_str(f, "head", c.head == GPT2RT_HEAD_PATCH_DECODE ? "patch_decode" : "regression");
    gpt2rt__fc_put_str(f, "attn_mask", c.attn_mask == GPT2RT_MASK_PLACEHOLDERS ? "placeholders" : "causal");
    fprintf(f, "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_embd\": %d,\n  \"max_seq_len\": %d,\n", c.n_layer, c.n_head,
            c.n_embd, c.max_seq_len);
    fprintf(f, "  \"lookback\": %d,\n  \"patch_len\": %d,\n  \"patch_stride\": %d,\n  \"horizon\": %d,\n", c.seq_len,
            c.patch_len, c.patch_stride, c.horizon);
    gpt2rt__fc_put_str(f, "trained_precision", c.precision == GPT2RT_PRECISION_BF16 ? "bf16"
                       : c.precision == GPT2RT_PRECISION_FP16 ? "fp16" : "fp32");
    fprintf(f, "  \"channels\": %d,\n  \"revin_affine\": %d,\n  \"batch\": %d,\n", c.n_channels, c.revin_affine,
            desc->batch ? desc->batch : c.batch_size * (c.parallel == GPT2RT_PARALLEL_DATA ? c.n_devices : 1));
    fprintf(f, "  \"columns\": [");
    for (int64_t m = 0; m < M; m++) {
        if (m) fputs(", ", f);
        gpt2rt__fc_put_esc(f, s->name[m]);
    }
    fprintf(f, "],\n");
    gpt2rt__fc_put_str(f, "date_column", s->date_name);
    fprintf(f, "  \"date_step\": %.17g,\n", s->info.date_step);
    gpt2rt__fc_put_str(f, "borders", gpt2rt__fc_borders[s->info.borders]);
    gpt2rt__fc_put_nums(f, "scaler_mean", s->mean, M);
    gpt2rt__fc_put_nums(f, "scaler_std", s->std, M);
    fprintf(f, "  \"linear_residual\": %d,\n  \"blend\": %.17g,\n", desc->linear_residual, desc->blend);
    gpt2rt__fc_put_str(f, "fill", gpt2rt__fc_fills[desc->fill]);
    fprintf(f, "  \"season\": %d,\n", desc->season);
    if (desc->intervals) gpt2rt__fc_put_intervals(f, desc->intervals);
    if (desc->linear) {
        fprintf(f, "  \"linear_rows\": %lld,\n  \"linear_cols\": %lld,\n", (long long)(L + 1), (long long)H);
        gpt2rt__fc_put_nums(f, "linear", desc->linear, (L + 1) * H);
    } else fprintf(f, "  \"linear\": null,\n");
    fprintf(f, "  \"end\": true\n}\n");
    return gpt2rt__write_close(ctx, f, path, path, 1);
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
    if ((int)desc->fill < GPT2RT_SERIES_FILL_REFUSE || (int)desc->fill > GPT2RT_SERIES_FILL_LINEAR || desc->season < 0)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: fill = %d must be a "
                            "gpt2rt_series_fill (0, 1 or 2) and season = %d >= 0", (int)desc->fill, desc->season);
    int64_t L = c.seq_len, H = c.horizon, nw = (L + 1) * H;
    for (int64_t i = 0; desc->linear && i < nw; i++)
        if (!(fabs(desc->linear[i]) <= GPT2RT__FC_LINEAR_MAX))
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: linear[%lld] (row %lld, "
                                "column %lld) is %g; the map's values must lie in [-1e15, 1e15]", (long long)i,
                                (long long)(i / H), (long long)(i % H), desc->linear[i]);
    for (int m = 0; m < s->info.channels; m++)
        if (!(fabs(s->mean[m]) <= GPT2RT__FC_MEAN_MAX) || !(s->std[m] >= GPT2RT__FC_STD_MIN) ||
            !(s->std[m] <= GPT2RT__FC_STD_MAX))
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: channel %d's scaler (mean "
                                "%g, std %g) is outside |mean| <= 3.4028234663852886e38, std in [2.220446049250313e-15, "
                                "3.4028234663852886e38]", m, s->mean[m], s->std[m]);
    if (desc->intervals) {
        char why[256];
        gpt2rt__fc_iv_check(desc->intervals, c.n_channels, c.horizon, why, sizeof why);
        if (why[0]) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: desc->intervals: %s", why);
    }
    for (int m = -2; m < s->info.channels; m++) { /* forecaster.json is UTF-8: the strict reader takes nothing else */
        const char *t = m == -2 ? desc->note : m == -1 ? s->date_name : s->name[m];
        for (size_t i = 0, n = t ? strlen(t) : 0; i < n;) {
            int k = (unsigned char)t[i] < 0x80 ? 1 : gpt2rt__json_utf8_len((const unsigned char *)t + i, n - i);
            if (!k) {
                char what[48];
                snprintf(what, sizeof what, m == -2 ? "desc->note" : m == -1 ? "the date column's name"
                                                                             : "column %d's name", m);
                return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: %s is not UTF-8 (byte "
                                    "%zu is 0x%02X); forecaster.json holds UTF-8 text: convert the CSV header", what, i,
                                    (unsigned char)t[i]);
            }
            i += (size_t)k;
        }
    }
    /* the name the directory goes by: trailing slashes off, never "." or ".." */
    char base[4100];
    size_t bn = strlen(dir);
    while (bn > 1 && dir[bn - 1] == '/') bn--;
    memcpy(base, dir, bn);
    base[bn] = 0;
    const char *last = strrchr(base, '/') ? strrchr(base, '/') + 1 : base;
    if (!*last || !strcmp(last, ".") || !strcmp(last, ".."))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forecaster_save: dir = '%s': name the directory "
                            "itself (a save writes it anew beside its old self, then swaps the two)", dir);
    int exists;
    gpt2rt_result r = gpt2rt__fc_dir_check(ctx, base, &exists);
    if (r != GPT2RT_OK) return r;
    /* the new directory is written beside the old one, then renamed into its place */
    char tmp[4200], old[4200];
    for (int n = 0;; n++) {
        snprintf(tmp, sizeof tmp, "%s.tmp-%d", base, n);
        if (GPT2RT__MKDIR(tmp) == 0) break;
        if (errno != EEXIST || n == 999)
            return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "gpt2rt_forecaster_save: cannot create %s (the forecaster is "
                                "written there, then renamed to %s): %s", tmp, base, strerror(errno));
    }
    if ((r = gpt2rt_weights_save(ctx, tmp)) == GPT2RT_OK) r = gpt2rt__fc_write_json(ctx, tmp, desc);
    if (r != GPT2RT_OK) {
        char first[sizeof ctx->error];
        snprintf(first, sizeof first, "%s", ctx->error);
        gpt2rt__fc_rmdir(tmp);
        return gpt2rt__fail(ctx, r, "gpt2rt_forecaster_save: %s (%s is unchanged)", first, base);
    }
    if (exists) {
        for (int n = 0;; n++) {
            struct stat sb;
            snprintf(old, sizeof old, "%s.old-%d", base, n);
            if (stat(old, &sb) != 0 || n == 999) break;
        }
        if (gpt2rt__fc_rename(base, old) != 0) {
            int e = errno;
            gpt2rt__fc_rmdir(tmp);
            return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "gpt2rt_forecaster_save: cannot move the previous forecaster %s "
                                "aside to %s: %s (%s is unchanged)", base, old, strerror(e), base);
        }
    }
    if (gpt2rt__fc_rename(tmp, base) != 0) {
        int e = errno, back = !exists || rename(old, base) == 0;
        gpt2rt__fc_rmdir(tmp);
        return gpt2rt__fail(ctx, GPT2RT_ERR_IO, "gpt2rt_forecaster_save: cannot rename %s to %s: %s (%s)", tmp, base,
                            strerror(e), !exists ? "nothing was written" : back ? "the previous forecaster is back"
                                                                             : "the previous forecaster is in the .old "
                                                                               "directory beside it");
    }
    if (exists && !gpt2rt__fc_rmdir(old))
        gpt2rt__log(ctx, GPT2RT_LOG_WARN, "gpt2rt_forecaster_save: saved %s; the previous forecaster stays in %s "
                    "(cannot remove it: %s)", base, old, strerror(errno));
    return GPT2RT_OK;
}

/* ---- reading forecaster.json ---- */

/* its keys, each once: the strings and arrays, then the integers with their ranges.
   note, trained_precision, end, fill and season may be left out (a file saved before
   them: no fill, no season); linear_rows and linear_cols are there exactly when linear
   is not null; interval_windows, interval_ranks and interval_scores all or none (none:
   no intervals). */
static const char *gpt2rt__fc_keys[] = {"format", "version", "note", "head", "attn_mask", "trained_precision",
                                        "columns", "date_column", "date_step", "borders", "scaler_mean",
                                        "scaler_std", "blend", "linear", "end", "fill", "interval_ranks",
                                        "interval_scores"};
enum { GPT2RT__FK_FORMAT, GPT2RT__FK_VERSION, GPT2RT__FK_NOTE, GPT2RT__FK_HEAD, GPT2RT__FK_MASK, GPT2RT__FK_PRECISION,
       GPT2RT__FK_COLUMNS, GPT2RT__FK_DATE_COLUMN, GPT2RT__FK_DATE_STEP, GPT2RT__FK_BORDERS, GPT2RT__FK_MEAN,
       GPT2RT__FK_STD, GPT2RT__FK_BLEND, GPT2RT__FK_LINEAR, GPT2RT__FK_END, GPT2RT__FK_FILL, GPT2RT__FK_IV_RANKS,
       GPT2RT__FK_IV_SCORES, GPT2RT__FK_NS };
static const struct { const char *key; int64_t lo, hi; } gpt2rt__fc_ints[] = {
    {"n_layer", 1, INT32_MAX}, {"n_head", 1, INT32_MAX}, {"n_embd", 1, INT32_MAX}, {"max_seq_len", 1, INT32_MAX},
    {"lookback", 1, INT32_MAX}, {"patch_len", 1, INT32_MAX}, {"patch_stride", 1, INT32_MAX},
    {"horizon", 1, INT32_MAX}, {"channels", 1, INT32_MAX}, {"revin_affine", 0, 1}, {"batch", 1, INT32_MAX},
    {"linear_residual", 0, 1}, {"linear_rows", 1, INT32_MAX}, {"linear_cols", 1, INT32_MAX}, {"season", 0, INT32_MAX},
    {"interval_windows", 1, (int64_t)1 << 53}};
enum { GPT2RT__FI_N = 16, GPT2RT__FI_ROWS = 12, GPT2RT__FI_COLS = 13, GPT2RT__FI_SEASON = 14, GPT2RT__FI_IV = 15 };
#define GPT2RT__FC_DATE_STEP_MAX 1e10 /* seconds: 317 years between rows */

/* one of n names, or -1 */
static int gpt2rt__fc_pick(const char *s, const char *const *names, int n) {
    for (int k = 0; k < n; k++)
        if (!strcmp(s, names[k])) return k;
    return -1;
}

/* an array of numbers, each in [lo, hi], appended to *v (grown as it goes) */
static gpt2rt_result gpt2rt__fc_nums(gpt2rt__json *j, double **v, int64_t *n, double lo, double hi, const char *range) {
    gpt2rt_result r = gpt2rt__json_array_begin(j);
    int64_t cap = 0;
    while (r == GPT2RT_OK && gpt2rt__json_array_next(j, &r)) {
        double x;
        const char *at = j->p;
        if ((r = gpt2rt__json_number(j, &x)) != GPT2RT_OK) break;
        if (!(x >= lo && x <= hi)) {
            j->p = (char *)at;
            return gpt2rt__json_failf(j, "element %lld = %.17g is outside %s", (long long)*n, x, range);
        }
        if (*n == cap) {
            double *g = (double *)realloc(*v, sizeof(double) * (size_t)(cap = cap ? 2 * cap : 64));
            if (!g) return gpt2rt__tok_msg(j->err, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", j->what);
            *v = g;
        }
        (*v)[(*n)++] = x;
    }
    return r;
}

/* the interval_* keys (all: all three given) into fc->iv, checked as a save checks them */
static gpt2rt_result gpt2rt__fc_read_intervals(gpt2rt_forecaster *fc, const char *file, int all, int64_t n,
                                               const double *ranks, int64_t G, const double *scores, int64_t ns,
                                               int64_t M, int64_t H) {
    gpt2rt_forecaster_intervals *v = &fc->iv;
    if (!all)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: \"interval_windows\", \"interval_ranks\" and "
                               "\"interval_scores\" come together (some are missing)", file);
    if (ns != M * H * G)
        return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: \"interval_scores\" has %lld numbers; %lld channels x "
                               "%lld steps x %lld ranks need %lld", file, (long long)ns, (long long)M, (long long)H,
                               (long long)G, (long long)(M * H * G));
    v->rank = (int64_t *)malloc(sizeof(int64_t) * (size_t)G);
    v->score = (float *)malloc(sizeof(float) * (size_t)ns);
    if (!v->rank || !v->score) return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", file);
    v->windows = n; v->horizon = H; v->channels = M; v->ranks = G;
    for (int64_t g = 0; g < G; g++) v->rank[g] = ranks[g] == floor(ranks[g]) ? (int64_t)ranks[g] : -1;
    for (int64_t i = 0; i < ns; i++) v->score[i] = (float)scores[i]; /* a save's %.9g reads back the same float */
    char why[256];
    gpt2rt__fc_iv_check(v, M, H, why, sizeof why);
    return why[0] ? gpt2rt__tok_msg(fc->error, GPT2RT_ERR_FORMAT, "%s: %s", file, why) : GPT2RT_OK;
}

static int gpt2rt__fc_cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* forecaster.json (text, len bytes and a NUL, unescaped in place) into fc and c: every
   key known and once, every value of its type and in its range, the arrays as long as
   the shape says; the message in fc->error */
static gpt2rt_result gpt2rt__fc_read(gpt2rt_forecaster *fc, char *text, size_t len, const char *file, gpt2rt_config *c) {
    int seen[GPT2RT__FK_NS + GPT2RT__FI_N] = {0};
    int64_t iv[GPT2RT__FI_N] = {0};
    const char *head = NULL, *mask = NULL, *date = NULL, *key, **cols = NULL;
    double *arr[5] = {NULL, NULL, NULL, NULL, NULL}; /* scaler_mean, scaler_std, linear, interval ranks, scores */
    int64_t narr[5] = {0, 0, 0, 0, 0}, ncols = 0, cap = 0;
    int borders = 0, end = 1, linear_null = 0, fill = 0;
    char *e = fc->error;
    gpt2rt__json j;
    gpt2rt__json_init(&j, text, len, NULL, e, sizeof fc->error, file, "forecaster.json");
    gpt2rt_result r = gpt2rt__json_object_begin(&j);
    while (r == GPT2RT_OK && gpt2rt__json_object_next(&j, &key, &r)) {
        int k = gpt2rt__fc_pick(key, gpt2rt__fc_keys, GPT2RT__FK_NS);
        for (int i = 0; k < 0 && i < GPT2RT__FI_N; i++)
            if (!strcmp(key, gpt2rt__fc_ints[i].key)) k = GPT2RT__FK_NS + i;
        if (k < 0) { r = gpt2rt__json_fail(&j, "unknown key (docs/timeseries.md lists forecaster.json's keys)"); break; }
        if (seen[k]++) { r = gpt2rt__json_fail(&j, "the key appears twice"); break; }
        const char *s = NULL;
        int64_t v = 0;
        switch (k) {
        case GPT2RT__FK_FORMAT:
            if ((r = gpt2rt__json_string(&j, &s)) == GPT2RT_OK && strcmp(s, "gpt2rt-forecaster"))
                r = gpt2rt__json_failf(&j, "\"%.60s\": not a forecaster (its format is \"gpt2rt-forecaster\")", s);
            break;
        case GPT2RT__FK_VERSION:
            if ((r = gpt2rt__json_int(&j, 0, INT32_MAX, &v)) == GPT2RT_OK && v != 1)
                r = gpt2rt__json_failf(&j, "version %lld; this gpt2rt reads version 1", (long long)v);
            break;
        case GPT2RT__FK_NOTE:
        case GPT2RT__FK_DATE_COLUMN:
            if (gpt2rt__json_null(&j)) break;
            if ((r = gpt2rt__json_string(&j, &s)) == GPT2RT_OK && k == GPT2RT__FK_DATE_COLUMN) {
                if (!*s) r = gpt2rt__json_fail(&j, "an empty name (a name, or null for none)");
                date = s;
            }
            break;
        case GPT2RT__FK_HEAD:
            if ((r = gpt2rt__json_string(&j, &head)) == GPT2RT_OK && strcmp(head, "regression") &&
                strcmp(head, "patch_decode"))
                r = gpt2rt__json_failf(&j, "\"%.60s\" is neither \"regression\" nor \"patch_decode\"", head);
            break;
        case GPT2RT__FK_MASK:
            if ((r = gpt2rt__json_string(&j, &mask)) == GPT2RT_OK && strcmp(mask, "causal") && strcmp(mask, "placeholders"))
                r = gpt2rt__json_failf(&j, "\"%.60s\" is neither \"causal\" nor \"placeholders\"", mask);
            break;
        case GPT2RT__FK_PRECISION: {
            static const char *p[] = {"fp32", "bf16", "fp16"};
            if ((r = gpt2rt__json_string(&j, &s)) == GPT2RT_OK && gpt2rt__fc_pick(s, p, 3) < 0)
                r = gpt2rt__json_failf(&j, "\"%.60s\" is not fp32, bf16 or fp16", s);
            break;
        }
        case GPT2RT__FK_BORDERS:
            if ((r = gpt2rt__json_string(&j, &s)) == GPT2RT_OK && (borders = gpt2rt__fc_pick(s, gpt2rt__fc_borders, 5)) < 0)
                r = gpt2rt__json_failf(&j, "\"%.60s\" is not auto, etth, ettm, ratio or none", s);
            break;
        case GPT2RT__FK_FILL:
            if ((r = gpt2rt__json_string(&j, &s)) == GPT2RT_OK && (fill = gpt2rt__fc_pick(s, gpt2rt__fc_fills, 3)) < 0)
                r = gpt2rt__json_failf(&j, "\"%.60s\" is not refuse, previous or linear", s);
            break;
        case GPT2RT__FK_COLUMNS:
            if ((r = gpt2rt__json_array_begin(&j)) != GPT2RT_OK) break;
            while (gpt2rt__json_array_next(&j, &r)) {
                size_t n;
                if (gpt2rt__json_peek(&j) != '"') { r = gpt2rt__json_failf(&j, "name %lld is not a string", (long long)ncols); break; }
                if ((r = gpt2rt__json_string_n(&j, &s, &n)) != GPT2RT_OK) break;
                if (!n) { r = gpt2rt__json_failf(&j, "name %lld is empty", (long long)ncols); break; }
                if (ncols == cap) {
                    const char **g = (const char **)realloc((void *)cols, sizeof(char *) * (size_t)(cap = cap ? 2 * cap : 16));
                    if (!g) { r = gpt2rt__tok_msg(e, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", file); break; }
                    cols = g;
                }
                cols[ncols++] = s;
            }
            break;
        case GPT2RT__FK_DATE_STEP: {
            double d;
            const char *at = j.p;
            if ((r = gpt2rt__json_number(&j, &d)) == GPT2RT_OK && !(d >= 0 && d <= GPT2RT__FC_DATE_STEP_MAX)) {
                j.p = (char *)at;
                r = gpt2rt__json_failf(&j, "%.17g is outside [0, 1e10] (seconds between rows; 0: unknown)", d);
            }
            fc->info.date_step = d;
            break;
        }
        case GPT2RT__FK_BLEND: {
            const char *at = j.p;
            if ((r = gpt2rt__json_number(&j, &fc->info.blend)) == GPT2RT_OK && !(fc->info.blend >= 0 && fc->info.blend <= 1)) {
                j.p = (char *)at;
                r = gpt2rt__json_failf(&j, "%.17g is outside [0, 1]", fc->info.blend);
            }
            break;
        }
        case GPT2RT__FK_MEAN:
            r = gpt2rt__fc_nums(&j, &arr[0], &narr[0], -GPT2RT__FC_MEAN_MAX, GPT2RT__FC_MEAN_MAX,
                                "[-3.4028234663852886e38, 3.4028234663852886e38] (a mean of floats)");
            break;
        case GPT2RT__FK_STD:
            r = gpt2rt__fc_nums(&j, &arr[1], &narr[1], GPT2RT__FC_STD_MIN, GPT2RT__FC_STD_MAX,
                                "[2.220446049250313e-15, 3.4028234663852886e38] (a scaler's std: positive, at least "
                                "10 DBL_EPSILON, at most FLT_MAX)");
            break;
        case GPT2RT__FK_LINEAR:
            if (!(linear_null = gpt2rt__json_null(&j)))
                r = gpt2rt__fc_nums(&j, &arr[2], &narr[2], -GPT2RT__FC_LINEAR_MAX, GPT2RT__FC_LINEAR_MAX, "[-1e15, 1e15]");
            break;
        case GPT2RT__FK_IV_RANKS:
            r = gpt2rt__fc_nums(&j, &arr[3], &narr[3], 1, 9007199254740992.0, "[1, 2^53] (a rank among the windows)");
            break;
        case GPT2RT__FK_IV_SCORES:
            r = gpt2rt__fc_nums(&j, &arr[4], &narr[4], 0, GPT2RT__FC_STD_MAX, "[0, 3.4028234663852886e38] (an absolute "
                                "error in a float)");
            break;
        case GPT2RT__FK_END:
            if ((r = gpt2rt__json_bool(&j, &end)) == GPT2RT_OK && !end) r = gpt2rt__json_fail(&j, "false; a complete file ends with \"end\": true");
            break;
        default: {
            int i = k - GPT2RT__FK_NS;
            r = gpt2rt__json_int(&j, gpt2rt__fc_ints[i].lo, gpt2rt__fc_ints[i].hi, &iv[i]);
        }
        }
    }
    if (r == GPT2RT_OK) r = gpt2rt__json_end(&j);
    /* every key the writer always writes, and the arrays as long as the shape says */
    for (int k = 0; r == GPT2RT_OK && k < GPT2RT__FK_NS + GPT2RT__FI_N; k++) {
        const char *name = k < GPT2RT__FK_NS ? gpt2rt__fc_keys[k] : gpt2rt__fc_ints[k - GPT2RT__FK_NS].key;
        int optional = k == GPT2RT__FK_NOTE || k == GPT2RT__FK_PRECISION || k == GPT2RT__FK_END || k == GPT2RT__FK_FILL ||
                       k == GPT2RT__FK_IV_RANKS || k == GPT2RT__FK_IV_SCORES || k >= GPT2RT__FK_NS + GPT2RT__FI_ROWS;
        if (!seen[k] && !optional) r = gpt2rt__tok_msg(e, GPT2RT_ERR_FORMAT, "%s: \"%s\" is missing", file, name);
    }
    int64_t L = iv[4], H = iv[7], M = iv[8];
    int has_linear = !linear_null, rows = seen[GPT2RT__FK_NS + GPT2RT__FI_ROWS],
        lcols = seen[GPT2RT__FK_NS + GPT2RT__FI_COLS];
    if (r != GPT2RT_OK) {
    } else if (ncols != M) {
        r = gpt2rt__tok_msg(e, GPT2RT_ERR_FORMAT, "%s: \"columns\" has %lld names; \"channels\" = %lld needs %lld names",
                            file, (long long)ncols, (long long)M, (long long)M);
    } else if (narr[0] != M || narr[1] != M) {
        r = gpt2rt__tok_msg(e, GPT2RT_ERR_FORMAT, "%s: \"scaler_mean\" and \"scaler_std\" have %lld and %lld numbers; "
                            "\"channels\" = %lld needs %lld each", file, (long long)narr[0], (long long)narr[1],
                            (long long)M, (long long)M);
    } else if (has_linear != rows || has_linear != lcols || (has_linear && (iv[GPT2RT__FI_ROWS] != L + 1 ||
               iv[GPT2RT__FI_COLS] != H || narr[2] != (L + 1) * H))) {
        r = gpt2rt__tok_msg(e, GPT2RT_ERR_FORMAT, "%s: the linear map is %s; lookback %lld and horizon %lld need "
                            "\"linear_rows\" = %lld, \"linear_cols\" = %lld and %lld numbers in \"linear\" (or "
                            "\"linear\": null and neither size)", file,
                            !has_linear ? (rows || lcols ? "null but a size is given" : "null")
                            : !rows || !lcols ? "given without its sizes" : "of another shape",
                            (long long)L, (long long)H, (long long)(L + 1), (long long)H, (long long)((L + 1) * H));
        if (has_linear && rows && lcols)
            snprintf(e + strlen(e), sizeof fc->error - strlen(e), " (it is %lld x %lld, %lld numbers)",
                     (long long)iv[GPT2RT__FI_ROWS], (long long)iv[GPT2RT__FI_COLS], (long long)narr[2]);
    } else if ((fc->info.blend > 0 || iv[11]) && !has_linear) {
        r = gpt2rt__tok_msg(e, GPT2RT_ERR_FORMAT, "%s: blend = %g, linear_residual = %d, but no linear map", file,
                            fc->info.blend, (int)iv[11]);
    } else if (seen[GPT2RT__FK_IV_RANKS] + seen[GPT2RT__FK_IV_SCORES] + seen[GPT2RT__FK_NS + GPT2RT__FI_IV]) {
        r = gpt2rt__fc_read_intervals(fc, file, seen[GPT2RT__FK_IV_RANKS] && seen[GPT2RT__FK_IV_SCORES] &&
                                      seen[GPT2RT__FK_NS + GPT2RT__FI_IV], iv[GPT2RT__FI_IV], arr[3], narr[3], arr[4],
                                      narr[4], M, H);
    }
    free(arr[3]); free(arr[4]);
    if (r == GPT2RT_OK && M > 1) { /* duplicate names: sorted neighbours */
        const char **sorted = (const char **)malloc(sizeof(char *) * (size_t)M);
        if (!sorted) r = gpt2rt__tok_msg(e, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", file);
        else {
            memcpy((void *)sorted, (const void *)cols, sizeof(char *) * (size_t)M);
            qsort((void *)sorted, (size_t)M, sizeof(char *), gpt2rt__fc_cmp_names);
            for (int64_t m = 1; m < M && r == GPT2RT_OK; m++)
                if (!strcmp(sorted[m - 1], sorted[m]))
                    r = gpt2rt__tok_msg(e, GPT2RT_ERR_FORMAT, "%s: \"columns\" names \"%.200s\" twice; each channel "
                                        "has its own name", file, sorted[m]);
            free((void *)sorted);
        }
    }
    if (r == GPT2RT_OK) { /* the names, then the date column's, NUL-separated, in one block */
        size_t total = date ? strlen(date) + 1 : 0;
        for (int64_t m = 0; m < M; m++) total += strlen(cols[m]) + 1;
        fc->names = (char *)malloc(total ? total : 1);
        fc->name = (char **)malloc(sizeof(char *) * (size_t)M);
        if (!fc->names || !fc->name) r = gpt2rt__tok_msg(e, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", file);
        else {
            char *q = fc->names;
            for (int64_t m = 0; m <= M; m++) {
                const char *src = m < M ? cols[m] : date;
                if (!src) break;
                size_t n = strlen(src) + 1;
                memcpy(q, src, n);
                if (m < M) fc->name[m] = q;
                else fc->date_name = q;
                q += n;
            }
        }
    }
    free((void *)cols);
    if (r != GPT2RT_OK) {
        free(arr[0]); free(arr[1]); free(arr[2]);
        return r;
    }
    fc->mean = arr[0];
    fc->std = arr[1];
    fc->W = arr[2];
    int *dst[] = {&c->n_layer, &c->n_head, &c->n_embd, &c->max_seq_len, &c->seq_len, &c->patch_len, &c->patch_stride,
                  &c->horizon, &c->n_channels, &c->revin_affine, &fc->info.batch, &fc->info.linear_residual};
    for (int i = 0; i < 12; i++) *dst[i] = (int)iv[i];
    c->input = GPT2RT_INPUT_PATCHES;
    c->head = strcmp(head, "regression") ? GPT2RT_HEAD_PATCH_DECODE : GPT2RT_HEAD_REGRESSION;
    c->attn_mask = strcmp(mask, "causal") ? GPT2RT_MASK_PLACEHOLDERS : GPT2RT_MASK_CAUSAL;
    fc->info.borders = (gpt2rt_series_borders)borders;
    fc->info.fill = (gpt2rt_series_fill)fill;
    fc->info.season = (int)iv[GPT2RT__FI_SEASON];
    fc->info.lookback = c->seq_len;
    fc->info.horizon = c->horizon;
    fc->info.channels = c->n_channels;
    fc->info.has_linear = has_linear;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__fc_done(gpt2rt_forecaster **out, gpt2rt_forecaster *fc, gpt2rt_result r) {
    if (r != GPT2RT_OK) {
        gpt2rt_free(fc->ctx);
        free(fc->names); free(fc->name); free(fc->mean); free(fc->std); free(fc->W); free(fc->iv.rank); free(fc->iv.score);
        free(fc->x); free(fc->pred); free(fc->c); free(fc->mus); free(fc->z); free(fc->acc); free(fc->dir);
        char keep[512];
        memcpy(keep, fc->error, sizeof keep);
        memset(fc, 0, sizeof *fc);
        memcpy(fc->error, keep, sizeof keep);
        fc->failed = 1;
    }
    *out = fc;
    return r;
}

/* the weights file holds exactly the tensors of fc->ctx's model: gpt2rt_weights_load
   keeps a patch model's own tensors when a file lacks them (a GPT-2 checkpoint to
   fine-tune from) and ignores the ones it does not know; a forecaster has them all */
static gpt2rt_result gpt2rt__fc_tensors(gpt2rt_forecaster *fc, const char *weights) {
    gpt2rt_ctx *ctx = fc->ctx;
    unsigned char *buf;
    size_t len;
    gpt2rt__st st;
    gpt2rt_result r = gpt2rt__read_file(ctx, weights, &buf, &len);
    if (r != GPT2RT_OK) return r;
    if ((r = gpt2rt__st_parse(ctx, buf, len, weights, &st)) == GPT2RT_OK) {
        int revin = ctx->cfg.revin_affine;
        for (int i = 0; i < ctx->n_tensors && r == GPT2RT_OK; i++) {
            const char *nm = ctx->tensors[i].name;
            if (!gpt2rt__st_find(&st, nm))
                r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' is missing: a forecaster's weights hold the "
                                 "%d tensors of its model (this file has %d%s%s)%s", weights, nm, ctx->n_tensors, st.n,
                                 st.n ? ", the first " : "", st.n ? st.t[0].name : "",
                                 strncmp(nm, "revin.", 6) ? "" : "; forecaster.json says revin_affine = 1");
        }
        for (int k = 0; k < st.n && r == GPT2RT_OK; k++)
            if (!gpt2rt__tensor_named(ctx, st.t[k].name))
                r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' is not one of the %d tensors of the model "
                                 "forecaster.json describes%s", weights, st.t[k].name, ctx->n_tensors,
                                 strncmp(st.t[k].name, "revin.", 6) || revin ? ""
                                 : " (forecaster.json says revin_affine = 0)");
        gpt2rt__st_release(ctx, &st);
    }
    gpt2rt__free(&ctx->cfg, buf, GPT2RT_MEM_BOOKKEEPING);
    return r;
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
    unsigned char *text = (unsigned char *)realloc(buf, len + 1); /* the reader reads a NUL at the end */
    if (!text) {
        free(buf);
        return gpt2rt__fc_done(out, fc, gpt2rt__tok_msg(fc->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", file));
    }
    text[len] = 0;
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    gpt2rt_result r = gpt2rt__fc_read(fc, (char *)text, len, file, &c);
    free(text);
    if (r != GPT2RT_OK) return gpt2rt__fc_done(out, fc, r);
    if (base) { /* the forecast's precision is the caller's (fp32 by default), whatever trained_precision says */
        c.backend = base->backend;
        c.precision = base->precision;
        c.n_threads = base->n_threads;
        c.log = base->log;
        c.log_user = base->log_user;
        c.memory_budget = base->memory_budget;
        if (base->batch_size > 0) fc->info.batch = base->batch_size;
    }
    c.batch_size = fc->info.batch;
    if ((r = gpt2rt_create(&fc->ctx, &c)) != GPT2RT_OK) {
        gpt2rt__tok_msg(fc->error, r, "%s: the model it describes cannot be built: %s", file, gpt2rt_last_error(fc->ctx));
        return gpt2rt__fc_done(out, fc, r);
    }
    if ((r = gpt2rt__fc_tensors(fc, weights)) != GPT2RT_OK || (r = gpt2rt_weights_load(fc->ctx, dir)) != GPT2RT_OK ||
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
    if ((fc->dir = (char *)malloc(strlen(dir) + 1)) != NULL) strcpy(fc->dir, dir);
    if (!fc->x || !fc->pred || !fc->c || !fc->mus || !fc->z || !fc->acc || !fc->dir)
        return gpt2rt__fc_done(out, fc, gpt2rt__tok_msg(fc->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for a "
                                                        "batch of %lld windows", dir, (long long)B));
    return GPT2RT_OK;
}

GPT2RT_DEF void gpt2rt_forecaster_free(gpt2rt_forecaster *fc) {
    if (!fc) return;
    gpt2rt_free(fc->ctx);
    free(fc->names); free(fc->name); free(fc->mean); free(fc->std); free(fc->W); free(fc->iv.rank); free(fc->iv.score);
    free(fc->x); free(fc->pred); free(fc->c); free(fc->mus); free(fc->z); free(fc->acc); free(fc->columns);
    free(fc->dir);
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
    fc->error[0] = 0;
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
        for (int64_t i = 0; i < real * H * M; i++) {
            float v = units ? (float)((double)fc->pred[i] * fc->std[i % M] + fc->mean[i % M]) : fc->pred[i];
            if (!isfinite(v))
                return gpt2rt__tok_msg(fc->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: the forecast of window %lld, step "
                                       "%lld, channel %lld is %g: it does not fit a float (the window lies too far "
                                       "outside the training data's range, or the weights overflow)", fn,
                                       (long long)(first + i / (H * M)), (long long)(i / M % H), (long long)(i % M),
                                       (double)v);
            out[first * H * M + i] = v;
        }
    }
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_predict(gpt2rt_forecaster *fc, const float *x, int64_t n, float *out) {
    return gpt2rt__fc_run(fc, "gpt2rt_forecaster_predict", x, n, out, 1);
}

GPT2RT_DEF gpt2rt_result gpt2rt_forecaster_predict_scaled(gpt2rt_forecaster *fc, const float *x, int64_t n, float *out) {
    return gpt2rt__fc_run(fc, "gpt2rt_forecaster_predict_scaled", x, n, out, 0);
}
#endif /* GPT2RT_NO_SERIES */
#endif /* GPT2RT__SRC_FORECASTER_H */
