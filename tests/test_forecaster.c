/* The forecaster artifact (gpt2rt.h 12): a trained patch model saved with
   gpt2rt_forecaster_save and loaded back with gpt2rt_forecaster_load forecasts the
   test windows exactly as the training context scored them (bitwise, in the scaler's
   units: the same batches, the same linear map offset and blend, written out here a
   second time), and in the data's units within the rounding of the inputs' scaling;
   both heads (the flatten head with the linear map, aLLM4TS's patch decoding without);
   what it refuses: a directory of weights only, another version, a model whose
   weights do not fit the saved shape, a blend outside [0, 1]; a save replaces the
   whole directory or nothing; hostile forecaster.json and weights files; the training
   run's calls (the linear map's fit and offset, a split's scoring) against their
   definitions written out here. */
#define _POSIX_C_SOURCE 200809L
#define GPT2RT__TEST_HOOKS /* a failing rename */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <glob.h>
#include <unistd.h>

enum { ROWS = 160, M = 3, L = 16, H = 4, B = 4 };
#define DIR "build/forecaster_test_files"

/* hourly rows from 2024-03-30 00:00: three channels with a daily cycle, a trend and
   a deterministic wobble */
static void write_csv(const char *path) {
    FILE *f = fopen(path, "w");
    fprintf(f, "date,load,temp,flow\n");
    for (int i = 0; i < ROWS; i++) {
        int day = 30 + i / 24, h = i % 24;
        fprintf(f, "2024-%02d-%02d %02d:00:00,%.3f,%.3f,%.3f\n", day > 31 ? 4 : 3, day > 31 ? day - 31 : day, h,
                10 + 3 * sin(i * 0.2618) + 0.01 * i + 0.3 * sin(i * 1.7), 20 + 5 * cos(i * 0.2618) + 0.2 * sin(i * 2.3),
                100 + 0.5 * i + 2 * sin(i * 0.9));
    }
    fclose(f);
}

/* the example's scoring, written out again: batches of B (the last filled with its
   last window), the model's predictions, then the linear map's offset and blend */
static void reference(gpt2rt_ctx *ctx, gpt2rt_series *s, const double *W, int residual, double blend, int64_t n,
                      float *ref) {
    float x[B * L * M], y[B * H * M], pred[B * H * M];
    gpt2rt_mode_set(ctx, GPT2RT_MODE_EVAL);
    for (int64_t first = 0; first < n; first += B) {
        int real = (int)(n - first < B ? n - first : B);
        gpt2rt_series_batch(s, GPT2RT_SERIES_TEST, 0, 0, first, real, x, y);
        for (int b = real; b < B; b++) memcpy(x + b * L * M, x + (real - 1) * L * M, sizeof(float) * L * M);
        CHECK_OK(ctx, gpt2rt_forward_series(ctx, x, NULL, NULL));
        CHECK_OK(ctx, gpt2rt_predictions(ctx, pred, B * H * M));
        for (int b = 0; b < real; b++)
            for (int m = 0; m < M; m++) {
                double mu = 0, v = 0, z[L + 1];
                for (int k = 0; k < L; k++) mu += x[(b * L + k) * M + m];
                mu /= L;
                for (int k = 0; k < L; k++) v += (x[(b * L + k) * M + m] - mu) * (x[(b * L + k) * M + m] - mu);
                double sd = sqrt(v / L + 1e-5);
                for (int k = 0; k < L; k++) z[k] = (x[(b * L + k) * M + m] - mu) / sd;
                z[L] = 1;
                for (int h = 0; h < H; h++) {
                    int i = (b * H + h) * M + m;
                    double acc = 0;
                    for (int k = 0; W && k <= L; k++) acc += z[k] * W[k * H + h];
                    float c = (float)(sd * acc);
                    double p = W ? (double)pred[i] + (residual ? (double)c : 0.0) : pred[i];
                    double d = (double)(float)mu + (double)c - p;
                    ref[(first + b) * H * M + (h * M + m)] = W ? (float)(p + blend * d) : pred[i];
                }
            }
    }
}

static void edit_json_in(const char *dir, const char *from, const char *to) { /* dir/forecaster.json, one value changed */
    char path[256];
    snprintf(path, sizeof path, "%s/forecaster.json", dir);
    CHECK(harness_replace(path, from, to), "%s holds %s", path, from);
}

static void edit_json(const char *from, const char *to) { edit_json_in(DIR "/fc", from, to); }

static void round_trip(gpt2rt_head head, int with_linear) {
    const char *label = head == GPT2RT_HEAD_REGRESSION ? "flatten head + linear map" : "patch decoding";
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.lookback = L; sd.horizon = H;
    gpt2rt_series *s, *raw;
    if (gpt2rt_series_load(&s, DIR "/series.csv", &sd) != GPT2RT_OK) {
        CHECK(0, "load: %s", gpt2rt_series_last_error(s));
        gpt2rt_series_free(s);
        return;
    }
    sd.no_scale = 1;
    CHECK(gpt2rt_series_load(&raw, DIR "/series.csv", &sd) == GPT2RT_OK, "raw load: %s", gpt2rt_series_last_error(raw));
    gpt2rt_series_info in;
    memset(&in, 0, sizeof in);
    gpt2rt_series_info_get(s, &in);
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.input = GPT2RT_INPUT_PATCHES; c.head = head; c.seq_len = L; c.patch_len = 4; c.patch_stride = 4;
    c.n_channels = M; c.horizon = H; c.n_layer = 1; c.n_head = 2; c.n_embd = 8; c.batch_size = B; c.lr = 1e-3f;
    c.attn_mask = head == GPT2RT_HEAD_PATCH_DECODE ? GPT2RT_MASK_PLACEHOLDERS : GPT2RT_MASK_CAUSAL;
    c.head_dropout = 0.1f; c.seed = 7;
    gpt2rt_ctx *ctx;
    CHECK_OK(ctx, gpt2rt_create(&ctx, &c));
    float x[B * L * M], y[B * H * M];
    gpt2rt_step_stats st;
    for (int k = 0; k < 4; k++) {
        gpt2rt_series_batch(s, GPT2RT_SERIES_TRAIN, 1, 0, k * B, B, x, y);
        CHECK_OK(ctx, gpt2rt_step_series(ctx, x, y, &st));
    }
    double W[(L + 1) * H];
    for (int i = 0; i < (L + 1) * H; i++) W[i] = 0.05 * sin(0.37 * i) + (i / H == L - 1 ? 0.5 : 0);
    int64_t n = in.windows[GPT2RT_SERIES_TEST];
    float *ref = (float *)malloc(sizeof(float) * (size_t)(n * H * M)), *got = (float *)malloc(sizeof(float) * (size_t)(n * H * M));
    float *xs = (float *)malloc(sizeof(float) * (size_t)(n * L * M)), *xr = (float *)malloc(sizeof(float) * (size_t)(n * L * M));
    float *yr = (float *)malloc(sizeof(float) * (size_t)(n * H * M)), *ys = (float *)malloc(sizeof(float) * (size_t)(n * H * M));
    reference(ctx, s, with_linear ? W : NULL, 1, 0.3, n, ref);
    gpt2rt_series_batch(s, GPT2RT_SERIES_TEST, 0, 0, 0, (int)n, xs, ys);
    gpt2rt_series_batch(raw, GPT2RT_SERIES_TEST, 0, 0, 0, (int)n, xr, yr);
    gpt2rt_forecaster_desc fd;
    memset(&fd, 0, sizeof fd);
    fd.series = s;
    fd.linear = with_linear ? W : NULL;
    fd.linear_residual = with_linear;
    fd.blend = with_linear ? 0.3 : 0;
    static char long_note[3000]; /* a note longer than any buffer of the reader's: skipped whole */
    memset(long_note, 'n', sizeof long_note - 1);
    long_note[10] = '"'; /* escaped on the way out */
    fd.note = with_linear ? "tests/test_forecaster.c" : long_note;
    CHECK_OK(ctx, gpt2rt_forecaster_save(ctx, DIR "/fc", &fd));
    { /* config.json describes the patch model, not a token LM with GPT-2's vocabulary */
        char cj[8192] = "", want[128];
        FILE *f = fopen(DIR "/fc/config.json", "rb");
        size_t n = f ? fread(cj, 1, sizeof cj - 1, f) : 0;
        if (f) fclose(f);
        cj[n] = 0;
        snprintf(want, sizeof want, "\"gpt2rt_horizon\": %d,", (int)H);
        CHECK(strstr(cj, "\"architectures\": [\"GPT2Model\"]") && !strstr(cj, "GPT2LMHeadModel") &&
                  strstr(cj, "\"gpt2rt_input\": \"patches\"") && strstr(cj, want) &&
                  strstr(cj, head == GPT2RT_HEAD_PATCH_DECODE ? "\"gpt2rt_head\": \"patch_decode\""
                                                              : "\"gpt2rt_head\": \"regression\""),
              "%s: config.json does not describe the patch model:\n%.400s", label, cj);
    }
    gpt2rt_forecaster *fc;
    gpt2rt_result r = gpt2rt_forecaster_load(&fc, DIR "/fc", NULL);
    CHECK(r == GPT2RT_OK, "%s: load: %s", label, gpt2rt_forecaster_last_error(fc));
    gpt2rt_forecaster_info fi;
    if (r == GPT2RT_OK && gpt2rt_forecaster_info_get(fc, &fi) == GPT2RT_OK) {
        CHECK(fi.lookback == L && fi.horizon == H && fi.channels == M && fi.batch == B && fi.date_step == 3600 &&
                  fi.has_linear == with_linear && !strcmp(gpt2rt_forecaster_column(fc, 2), "flow") &&
                  !strcmp(gpt2rt_forecaster_date_column(fc), "date") && fi.borders == GPT2RT_SERIES_BORDERS_RATIO,
              "%s: the saved shape, columns, date column and step", label);
        /* the last error is the latest call's: a refused call, then one that succeeds, leaves "" */
        CHECK(gpt2rt_forecaster_predict_scaled(fc, xs, -1, got) == GPT2RT_ERR_INVALID_ARGUMENT &&
                  *gpt2rt_forecaster_last_error(fc), "%s: n = -1 is refused with a message", label);
        CHECK(gpt2rt_forecaster_predict_scaled(fc, xs, n, got) == GPT2RT_OK, "%s: predict_scaled: %s", label,
              gpt2rt_forecaster_last_error(fc));
        CHECK(!*gpt2rt_forecaster_last_error(fc), "%s: after a success the last error is \"\", not \"%s\"", label,
              gpt2rt_forecaster_last_error(fc));
        int64_t diff = 0;
        for (int64_t i = 0; i < n * H * M; i++) diff += memcmp(&got[i], &ref[i], sizeof(float)) != 0;
        CHECK(diff == 0, "%s: the %lld test windows through the artifact == the training context's, bitwise (%lld of "
              "%lld values differ)", label, (long long)n, (long long)diff, (long long)(n * H * M));
        /* in the data's units from the raw file: the inputs' scaling rounds once more */
        CHECK(gpt2rt_forecaster_predict(fc, xr, n, got) == GPT2RT_OK, "%s: predict: %s", label,
              gpt2rt_forecaster_last_error(fc));
        double worst = 0;
        for (int64_t i = 0; i < n * H * M; i++) {
            double mu, sdv;
            gpt2rt_forecaster_scaler(fc, (int)(i % M), &mu, &sdv);
            double e = fabs(got[i] - (ref[i] * sdv + mu)) / sdv;
            if (e > worst) worst = e;
        }
        CHECK(worst < 1e-4, "%s: data units == the scaled forecast times std plus mean (worst %.3g std)", label, worst);
    }
    gpt2rt_forecaster_free(fc);
    free(ref); free(got); free(xs); free(xr); free(yr); free(ys);
    gpt2rt_free(ctx);
    gpt2rt_series_free(s);
    gpt2rt_series_free(raw);
}

static void refusals(void) {
    gpt2rt_forecaster *fc;
    gpt2rt_result r;
    /* weights only (gpt2rt_weights_save, a pretrain directory) */
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.input = GPT2RT_INPUT_PATCHES; c.head = GPT2RT_HEAD_REGRESSION; c.seq_len = L; c.patch_len = 4; c.patch_stride = 4; c.n_channels = M; c.horizon = H;
    c.n_layer = 1; c.n_head = 2; c.n_embd = 8; c.batch_size = B;
    gpt2rt_ctx *ctx;
    CHECK_OK(ctx, gpt2rt_create(&ctx, &c));
    CHECK_OK(ctx, gpt2rt_weights_save(ctx, DIR "/weights_only"));
    r = gpt2rt_forecaster_load(&fc, DIR "/weights_only", NULL);
    CHECK(r == GPT2RT_ERR_IO && strstr(gpt2rt_forecaster_last_error(fc), "weights only") &&
              gpt2rt_forecaster_ctx(fc) == NULL, "weights only: %s", gpt2rt_forecaster_last_error(fc));
    gpt2rt_forecaster_free(fc);
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.lookback = L; sd.horizon = H;
    gpt2rt_series *s;
    gpt2rt_series_load(&s, DIR "/series.csv", &sd);
    gpt2rt_forecaster_desc fd;
    memset(&fd, 0, sizeof fd);
    fd.series = s;
    fd.blend = 1.5;
    CHECK(gpt2rt_forecaster_save(ctx, DIR "/never", &fd) == GPT2RT_ERR_INVALID_ARGUMENT &&
              strstr(gpt2rt_last_error(ctx), "blend = 1.5"), "blend 1.5: %s", gpt2rt_last_error(ctx));
    struct stat stt;
    CHECK(stat(DIR "/never", &stt) != 0, "a refused save writes nothing");
    fd.blend = 0;
    CHECK_OK(ctx, gpt2rt_forecaster_save(ctx, DIR "/fc", &fd));
    edit_json("\"version\": 1", "\"version\": 2");
    r = gpt2rt_forecaster_load(&fc, DIR "/fc", NULL);
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(gpt2rt_forecaster_last_error(fc), "version 2; this gpt2rt reads version 1"),
          "version 2: %s", gpt2rt_forecaster_last_error(fc));
    gpt2rt_forecaster_free(fc);
    edit_json("\"version\": 2", "\"version\": 1");
    edit_json("\"n_embd\": 8", "\"n_embd\": 16");
    r = gpt2rt_forecaster_load(&fc, DIR "/fc", NULL);
    CHECK(r != GPT2RT_OK && strstr(gpt2rt_forecaster_last_error(fc), "model.safetensors"),
          "n_embd 16 against weights of width 8: %s", gpt2rt_forecaster_last_error(fc));
    gpt2rt_forecaster_free(fc);
    edit_json("\"n_embd\": 16", "\"n_embd\": 8");
    edit_json("\"scaler_std\": [", "\"scaler_std\": [-");
    r = gpt2rt_forecaster_load(&fc, DIR "/fc", NULL);
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(gpt2rt_forecaster_last_error(fc), "\"scaler_std\": element 0 = -") &&
              strstr(gpt2rt_forecaster_last_error(fc), "is outside [2.220446049250313e-15, 3.4028234663852886e38]"),
          "a negative std: %s", gpt2rt_forecaster_last_error(fc));
    gpt2rt_forecaster_free(fc);
    gpt2rt_series_free(s);
    gpt2rt_free(ctx);
}

/* ---- shared by the hostile-input tests: a small forecaster, its test windows ---- */

static gpt2rt_series *fx_series(const char *csv) {
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.lookback = L; sd.horizon = H;
    gpt2rt_series *s;
    if (gpt2rt_series_load(&s, csv, &sd) != GPT2RT_OK) CHECK(0, "load %s: %s", csv, gpt2rt_series_last_error(s));
    return s;
}

static gpt2rt_ctx *fx_ctx(int revin) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.input = GPT2RT_INPUT_PATCHES; c.head = GPT2RT_HEAD_REGRESSION; c.seq_len = L; c.patch_len = 4; c.patch_stride = 4;
    c.n_channels = M; c.horizon = H; c.n_layer = 1; c.n_head = 2; c.n_embd = 8; c.batch_size = B; c.lr = 1e-2f;
    c.seed = 11; c.revin_affine = revin; c.n_threads = 1;
    gpt2rt_ctx *ctx;
    CHECK_OK(ctx, gpt2rt_create(&ctx, &c));
    return ctx;
}

static void fx_train(gpt2rt_ctx *ctx, gpt2rt_series *s, int steps) {
    float x[B * L * M], y[B * H * M];
    gpt2rt_step_stats st;
    for (int k = 0; k < steps; k++) {
        gpt2rt_series_batch(s, GPT2RT_SERIES_TRAIN, 3, 0, k * B, B, x, y);
        CHECK_OK(ctx, gpt2rt_step_series(ctx, x, y, &st));
    }
}

static gpt2rt_result fx_save(gpt2rt_ctx *ctx, gpt2rt_series *s, const char *dir, const char *note) {
    static double W[(L + 1) * H];
    for (int i = 0; i < (L + 1) * H; i++) W[i] = 0.05 * cos(0.29 * i) + (i / H == L - 1 ? 0.5 : 0);
    gpt2rt_forecaster_desc fd;
    memset(&fd, 0, sizeof fd);
    fd.series = s; fd.linear = W; fd.linear_residual = 1; fd.blend = 0.25; fd.note = note;
    return gpt2rt_forecaster_save(ctx, dir, &fd);
}

/* the first test windows (n of them, data units) through the forecaster in dir */
enum { NW = 5 };
static gpt2rt_result fx_predict(const char *dir, float *out, char *err) {
    gpt2rt_series *s = fx_series(DIR "/series.csv");
    float x[NW * L * M], y[NW * H * M];
    gpt2rt_series_batch(s, GPT2RT_SERIES_TEST, 0, 0, 0, NW, x, y);
    gpt2rt_series_free(s);
    gpt2rt_forecaster *fc;
    gpt2rt_result r = gpt2rt_forecaster_load(&fc, dir, NULL);
    if (r == GPT2RT_OK) r = gpt2rt_forecaster_predict_scaled(fc, x, NW, out);
    snprintf(err, 512, "%s", gpt2rt_forecaster_last_error(fc));
    gpt2rt_forecaster_free(fc);
    return r;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) { fputs(text, f); fclose(f); }
}

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[4096];
    size_t n;
    while (a && b && (n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    if (a) fclose(a);
    if (b) fclose(b);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* A save writes a new directory beside the old and swaps the two: a failure on the
   way (a write the file-size limit stops, a rename that fails) leaves the old
   forecaster loading and forecasting its own numbers, bitwise; a directory that is
   not a forecaster's is refused, its files kept. */
static void save_whole_or_nothing(void) {
    const char *fdir = DIR "/atomic";
    char err[512];
    gpt2rt_series *s = fx_series(DIR "/series.csv");
    gpt2rt_ctx *ctx = fx_ctx(0);
    fx_train(ctx, s, 3);
    CHECK_OK(ctx, fx_save(ctx, s, fdir, "first"));
    float old_pred[NW * H * M], got[NW * H * M];
    CHECK(fx_predict(fdir, old_pred, err) == GPT2RT_OK, "the first save loads: %s", err);
    fx_train(ctx, s, 3); /* other weights from here on */

    /* forecaster.json (a 256 KiB note) outgrows the file-size limit the weights fit in */
    static char note[1 << 18];
    memset(note, 'n', sizeof note - 1);
    long wsize = file_size(DIR "/atomic/model.safetensors");
    struct rlimit was, lim;
    getrlimit(RLIMIT_FSIZE, &was);
    lim = was;
    lim.rlim_cur = (rlim_t)wsize + 4096;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails with EFBIG */
    int set = wsize > 0 && setrlimit(RLIMIT_FSIZE, &lim) == 0;
    gpt2rt_result r = set ? fx_save(ctx, s, fdir, note) : GPT2RT_OK;
    setrlimit(RLIMIT_FSIZE, &was);
    signal(SIGXFSZ, prev);
    if (!set) SKIP("RLIMIT_FSIZE cannot be set here");
    else {
        CHECK(r == GPT2RT_ERR_IO && strstr(gpt2rt_last_error(ctx), "is unchanged"),
              "a save the file-size limit stops half-way fails saying the forecaster is unchanged: %s",
              gpt2rt_last_error(ctx));
        CHECK(fx_predict(fdir, got, err) == GPT2RT_OK && !memcmp(got, old_pred, sizeof got),
              "after the failed save the directory forecasts the first save's numbers, bitwise (%s)", err);
        CHECK(!exists(DIR "/atomic.tmp-0") && !exists(DIR "/atomic.old-0"), "the failed save leaves no temporary");
    }

    /* the rename that swaps the new directory in fails (the 4th rename: weights_save's
       two, the old one aside, the new one in) */
    gpt2rt__test_rename_fail = 4;
    r = fx_save(ctx, s, fdir, "second");
    gpt2rt__test_rename_fail = 0;
    CHECK(r == GPT2RT_ERR_IO && strstr(gpt2rt_last_error(ctx), "previous forecaster is back"),
          "a failed swap says the previous forecaster is back: %s", gpt2rt_last_error(ctx));
    CHECK(fx_predict(fdir, got, err) == GPT2RT_OK && !memcmp(got, old_pred, sizeof got),
          "after the failed swap the directory forecasts the first save's numbers, bitwise (%s)", err);
    CHECK(!exists(DIR "/atomic.tmp-0") && !exists(DIR "/atomic.old-0"), "the failed swap leaves no temporary");

    /* a save that works replaces it all, and leaves nothing beside it */
    CHECK_OK(ctx, fx_save(ctx, s, DIR "/atomic/", "third"));
    CHECK(fx_predict(fdir, got, err) == GPT2RT_OK && memcmp(got, old_pred, sizeof got),
          "a good save replaces the forecaster (%s)", err);
    CHECK(!exists(DIR "/atomic.tmp-0") && !exists(DIR "/atomic.old-0"), "a good save leaves no temporary");

    /* a directory of other files, or weights without forecaster.json, is not replaced */
    mkdir(DIR "/foreign", 0777);
    write_file(DIR "/foreign/notes.txt", "mine");
    r = fx_save(ctx, s, DIR "/foreign", NULL);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(ctx), "'notes.txt'") &&
              exists(DIR "/foreign/notes.txt") && !exists(DIR "/foreign/forecaster.json"),
          "a directory holding notes.txt is refused and kept: %s", gpt2rt_last_error(ctx));
    CHECK_OK(ctx, gpt2rt_weights_save(ctx, DIR "/weights_dir"));
    r = fx_save(ctx, s, DIR "/weights_dir", NULL);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(ctx), "no forecaster.json") &&
              !exists(DIR "/weights_dir/forecaster.json"),
          "a weights-only directory is refused and kept: %s", gpt2rt_last_error(ctx));
    gpt2rt_free(ctx);
    gpt2rt_series_free(s);
}

/* The weights file must hold exactly the forecaster's tensors: a token model's (no
   in_layer/out_layer), and revin.* that forecaster.json's revin_affine does not
   describe (either way), are refused, naming the tensor. */
static void weights_must_match(void) {
    char err[512];
    float got[NW * H * M];
    gpt2rt_series *s = fx_series(DIR "/series.csv");
    gpt2rt_ctx *ctx = fx_ctx(0), *rctx = fx_ctx(1);
    CHECK_OK(ctx, fx_save(ctx, s, DIR "/plain", NULL));
    CHECK_OK(rctx, fx_save(rctx, s, DIR "/revin", NULL));
    CHECK(fx_predict(DIR "/plain", got, err) == GPT2RT_OK && fx_predict(DIR "/revin", got, err) == GPT2RT_OK,
          "both load as saved: %s", err);
    /* a token model's weights of the same width */
    gpt2rt_config tc;
    memset(&tc, 0, sizeof tc);
    tc.vocab_size = 64; tc.seq_len = 16; tc.n_layer = 1; tc.n_head = 2; tc.n_embd = 8; tc.batch_size = 1;
    gpt2rt_ctx *tok;
    CHECK_OK(tok, gpt2rt_create(&tok, &tc));
    CHECK_OK(tok, gpt2rt_weights_save(tok, DIR "/token"));
    gpt2rt_free(tok);
    copy_file(DIR "/token/model.safetensors", DIR "/plain/model.safetensors");
    gpt2rt_result r = fx_predict(DIR "/plain", got, err);
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(err, "in_layer.weight") && strstr(err, "missing"),
          "a token model's weights (no in_layer, out_layer) are refused: %s", err);
    /* revin_affine 1 in the json, no revin tensors in the file */
    edit_json_in(DIR "/plain", "\"revin_affine\": 0", "\"revin_affine\": 1");
    CHECK_OK(ctx, fx_save(ctx, s, DIR "/plain", NULL));
    edit_json_in(DIR "/plain", "\"revin_affine\": 0", "\"revin_affine\": 1");
    r = fx_predict(DIR "/plain", got, err);
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(err, "revin.affine_weight") && strstr(err, "revin_affine"),
          "revin_affine = 1 without revin tensors is refused: %s", err);
    /* revin_affine 0 in the json, revin tensors in the file */
    edit_json_in(DIR "/revin", "\"revin_affine\": 1", "\"revin_affine\": 0");
    r = fx_predict(DIR "/revin", got, err);
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(err, "revin.affine_") && strstr(err, "revin_affine"),
          "revin tensors with revin_affine = 0 are refused: %s", err);
    gpt2rt_free(ctx);
    gpt2rt_free(rctx);
    gpt2rt_series_free(s);
}

/* Column names: any length is written whole and read back; forecaster.json's names
   are JSON strings (\u escapes to UTF-8); duplicate and empty names are refused,
   and so is anything in "columns" that is not a string. */
static void column_names(void) {
    static char longname[3001];
    memset(longname, 'c', 3000);
    longname[5] = '"'; /* escaped on the way out */
    char path[128];
    snprintf(path, sizeof path, "%s/long.csv", DIR);
    FILE *f = fopen(path, "wb");
    fprintf(f, "date,%s,temp,flow\n", longname);
    for (int i = 0; i < ROWS; i++)
        fprintf(f, "2024-01-%02d %02d:00:00,%.3f,%.3f,%.3f\n", 1 + i / 24, i % 24, 10 + sin(i * 0.3), 20 + cos(i * 0.2),
                0.1 * i);
    fclose(f);
    gpt2rt_series *s = fx_series(path);
    gpt2rt_ctx *ctx = fx_ctx(0);
    CHECK_OK(ctx, fx_save(ctx, s, DIR "/names", NULL));
    gpt2rt_forecaster *fc;
    gpt2rt_result r = gpt2rt_forecaster_load(&fc, DIR "/names", NULL);
    const char *c0 = r == GPT2RT_OK ? gpt2rt_forecaster_column(fc, 0) : NULL;
    CHECK(c0 && !strcmp(c0, longname), "a 3000-byte column name comes back whole (%zu bytes: %s)", c0 ? strlen(c0) : 0,
          gpt2rt_forecaster_last_error(fc));
    gpt2rt_forecaster_free(fc);
    gpt2rt_series_free(s);
    gpt2rt_free(ctx);

    /* a Latin-1 header: refused by the save, which writes nothing a load would refuse */
    f = fopen(path, "wb");
    fprintf(f, "date,caf\xe9,temp,flow\n");
    for (int i = 0; i < ROWS; i++)
        fprintf(f, "2024-01-%02d %02d:00:00,%.3f,%.3f,%.3f\n", 1 + i / 24, i % 24, 10 + sin(i * 0.3), 20 + cos(i * 0.2),
                0.1 * i);
    fclose(f);
    s = fx_series(path);
    ctx = fx_ctx(0);
    r = fx_save(ctx, s, DIR "/latin1", NULL);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_last_error(ctx), "column 0's name is not UTF-8 (byte 3 is 0xE9)") &&
              !exists(DIR "/latin1"), "a Latin-1 column name is refused by the save: %s", gpt2rt_last_error(ctx));
    gpt2rt_series_free(s);
    gpt2rt_free(ctx);

    s = fx_series(DIR "/series.csv");
    ctx = fx_ctx(0);
    static const struct { const char *to, *says; } bad[] = {
        {"\"columns\": [1, 2, 3]", "columns"},
        {"\"columns\": [\"lo\\u0000ad\", \"temp\", \"flow\"]", "NUL"},
        {"\"columns\": [\"load\", \"load\", \"flow\"]", "\"load\" twice"},
        {"\"columns\": [\"load\", \"\", \"flow\"]", "empty"},
        {"\"columns\": [\"load\", \"temp\"]", "3 names"},
        {"\"columns\": [\"load\", \"temp\", \"flow\", \"more\"]", "3 names"},
        {"\"columns\": [\"load\", \"temp\", [\"flow\"]]", "columns"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        CHECK_OK(ctx, fx_save(ctx, s, DIR "/names", NULL));
        edit_json_in(DIR "/names", "\"columns\": [\"load\", \"temp\", \"flow\"]", bad[k].to);
        r = gpt2rt_forecaster_load(&fc, DIR "/names", NULL);
        CHECK(r == GPT2RT_ERR_FORMAT && strstr(gpt2rt_forecaster_last_error(fc), bad[k].says),
              "%s is refused (\"%s\"): %s", bad[k].to, bad[k].says, gpt2rt_forecaster_last_error(fc));
        gpt2rt_forecaster_free(fc);
    }
    /* Python's json.dump writes a non-ASCII name as \u escapes */
    CHECK_OK(ctx, fx_save(ctx, s, DIR "/names", NULL));
    edit_json_in(DIR "/names", "\"columns\": [\"load\", \"temp\", \"flow\"]",
                 "\"columns\": [\"caf\\u00e9\", \"\\ud83d\\ude00\", \"flow\"]");
    r = gpt2rt_forecaster_load(&fc, DIR "/names", NULL);
    CHECK(r == GPT2RT_OK && !strcmp(gpt2rt_forecaster_column(fc, 0), "caf\xc3\xa9") &&
              !strcmp(gpt2rt_forecaster_column(fc, 1), "\xf0\x9f\x98\x80"),
          "caf\\u00e9 and a surrogate pair load as UTF-8: %s", gpt2rt_forecaster_last_error(fc));
    gpt2rt_forecaster_free(fc);
    gpt2rt_series_free(s);
    gpt2rt_free(ctx);
}

/* forecaster.json is read by the one strict JSON reader: numbers by RFC 8259's grammar,
   every key known and once, every value in its range (the range in the message), valid
   JSON it did not write refused naming the key; and a forecast that is not finite is
   refused, naming the window and channel, never returned as OK. */
static void strict_json(void) {
    static const struct { const char *from, *to, *says; } bad[] = {
        {"\"n_layer\": 1", "\"n_layer\": 1abc", "'a' after a number"},
        {"\"n_layer\": 1", "\"n_layer\": +1", "'+' cannot start a JSON number"},
        {"\"n_layer\": 1", "\"n_layer\": 0x1", "'x' after a number"},
        {"\"n_layer\": 1", "\"n_layer\": 1.0", "expected an integer in [1, 2147483647]"},
        {"\"batch\": 4", "\"batch\": -0", "\"batch\": -0 is outside [1, 2147483647]"},
        {"\"revin_affine\": 0", "\"revin_affine\": 7", "\"revin_affine\": 7 is outside [0, 1]"},
        {"\"n_embd\": 8", "\"n_embd\": 0", "\"n_embd\": 0 is outside [1, 2147483647]"},
        {"\"borders\": \"", "\"borders\": \"weekly", "is not auto, etth, ettm, ratio or none"},
        {"\"head\": \"regression\"", "\"head\": \"flatten\"", "neither \"regression\" nor \"patch_decode\""},
        {"\"linear\": [", "\"linear\": [1e300, ", "element 0 = 1.0000000000000001e+300 is outside [-1e15, 1e15]"},
        {"\"linear\": [", "\"linear\": [1e400, ", "out of range"},
        {"\"linear_rows\": 17", "\"linear_rows\": 16", "linear map is of another shape"},
        {"\"scaler_std\": [", "\"scaler_std\": [1e-310, ", "element 0 = 9.9999999999999694e-311 is outside [2.220446049250313e-15"},
        {"\"scaler_mean\": [", "\"scaler_mean\": [1e308, ", "is outside [-3.4028234663852886e38, 3.4028234663852886e38]"},
        {"\"blend\": ", "\"blend\": 1", "is outside [0, 1]"},
        {"\"date_step\": 3600", "\"date_step\": -1", "\"date_step\": -1 is outside [0, 1e10]"},
        {"\"end\": true", "\"end\": 1", "expected true or false"},
        {"\"format\"", "\"zzz\": 1, \"format\"", "\"zzz\": unknown key"},
        {"\"format\"", "\"batch\": 4, \"format\"", "\"batch\": the key appears twice"},
        {"\"format\"", "\"a_key_of_more_than_thirty_one_characters\": {\"nested\": [1, {\"x\": null}]}, \"format\"",
         "\"a_key_of_more_than_thirty_one_characters\": unknown key"},
        {"\"scaler_std\": [", "\"scaler_std\": [1, ", "have 3 and 4 numbers"},
        {"\"channels\": 3", "\"channels\": 2", "\"columns\" has 3 names; \"channels\" = 2"},
        {"\"linear_rows\": 17,", "", "given without its sizes"},
        {"  \"end\": true\n}", "  \"end\": true\n}\n{}", "text after the JSON value"},
    };
    gpt2rt_series *s = fx_series(DIR "/series.csv");
    gpt2rt_ctx *ctx = fx_ctx(0);
    gpt2rt_forecaster *fc;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        CHECK_OK(ctx, fx_save(ctx, s, DIR "/strict", NULL));
        edit_json_in(DIR "/strict", bad[k].from, bad[k].to);
        gpt2rt_result r = gpt2rt_forecaster_load(&fc, DIR "/strict", NULL);
        const char *e = gpt2rt_forecaster_last_error(fc);
        CHECK(r == GPT2RT_ERR_FORMAT && strstr(e, bad[k].says) && !strstr(e, "model.safetensors"),
              "%s -> %s is refused (\"%s\"): %s", bad[k].from, bad[k].to, bad[k].says, e);
        gpt2rt_forecaster_free(fc);
    }
    /* a forecast that overflows a float: the head's weights at 3e38 */
    CHECK_OK(ctx, fx_save(ctx, s, DIR "/strict", NULL));
    gpt2rt_result r = gpt2rt_forecaster_load(&fc, DIR "/strict", NULL);
    CHECK(r == GPT2RT_OK, "the saved forecaster loads: %s", gpt2rt_forecaster_last_error(fc));
    gpt2rt_ctx *fctx = gpt2rt_forecaster_ctx(fc);
    for (int i = 0; fctx && i < gpt2rt_param_count(fctx); i++) {
        gpt2rt_param_info pi;
        gpt2rt_param_info_get(fctx, i, &pi);
        if (strncmp(pi.name, "out_layer.", 10)) continue;
        float *big = (float *)malloc(sizeof(float) * (size_t)pi.numel);
        for (int64_t q = 0; q < pi.numel; q++) big[q] = 3e38f;
        CHECK_OK(fctx, gpt2rt_param_write(fctx, pi.name, big, pi.numel));
        free(big);
    }
    float x[NW * L * M], y[NW * H * M], out[NW * H * M];
    gpt2rt_series_batch(s, GPT2RT_SERIES_TEST, 0, 0, 0, NW, x, y);
    r = gpt2rt_forecaster_predict_scaled(fc, x, NW, out);
    CHECK(r != GPT2RT_OK && strstr(gpt2rt_forecaster_last_error(fc), "window 0") &&
              strstr(gpt2rt_forecaster_last_error(fc), "channel 0"),
          "a forecast that does not fit a float is refused, naming window and channel: %s",
          gpt2rt_forecaster_last_error(fc));
    gpt2rt_forecaster_free(fc);
    gpt2rt_series_free(s);
    gpt2rt_free(ctx);
}

/* the training run's calls: the linear map's fit, its offset, a split's scoring */
static void training_calls(void) {
    gpt2rt_series *s = fx_series(DIR "/series.csv");
    gpt2rt_ctx *ctx = fx_ctx(0);
    fx_train(ctx, s, 3);
    gpt2rt_series_info in;
    memset(&in, 0, sizeof in);
    gpt2rt_series_info_get(s, &in);
    gpt2rt_forecaster_linear lm;
    CHECK(gpt2rt_forecaster_linear_fit(ctx, s, &lm) == GPT2RT_OK, "linear_fit: %s", gpt2rt_last_error(ctx));
    if (!lm.weights) { gpt2rt_free(ctx); gpt2rt_series_free(s); return; }
    CHECK(lm.lookback == L && lm.horizon == H, "linear_fit: shape %lld x %lld", (long long)lm.lookback, (long long)lm.horizon);
    int ridge_ok = 0;
    for (double r = 0.1; r < 2e5; r *= 10) ridge_ok |= fabs(lm.ridge - r) < 1e-9 * r;
    CHECK(ridge_ok, "linear_fit: ridge %g is one of 0.1 .. 1e5", lm.ridge);

    /* the offset: sd * W'z, each series normalised by its lookback, bitwise as written out here */
    int64_t nv = in.windows[GPT2RT_SERIES_VAL];
    float *x = (float *)malloc(sizeof(float) * (size_t)(nv * L * M)), *y = (float *)malloc(sizeof(float) * (size_t)(nv * H * M));
    float *c = (float *)malloc(sizeof(float) * (size_t)(nv * H * M)), *mus = (float *)malloc(sizeof(float) * (size_t)(nv * M));
    gpt2rt_series_batch(s, GPT2RT_SERIES_VAL, 0, 0, 0, (int)nv, x, y);
    CHECK(gpt2rt_forecaster_linear_offset(ctx, &lm, x, nv, M, c, mus) == GPT2RT_OK, "linear_offset: %s", gpt2rt_last_error(ctx));
    int same = 1;
    double sse = 0;
    for (int64_t w = 0; w < nv; w++)
        for (int m = 0; m < M; m++) {
            const float *xs = x + w * L * M;
            double mu = 0, v = 0, z[L + 1];
            for (int k = 0; k < L; k++) mu += xs[k * M + m];
            mu /= L;
            for (int k = 0; k < L; k++) v += (xs[k * M + m] - mu) * (xs[k * M + m] - mu);
            double sd = sqrt(v / L + 1e-5);
            for (int k = 0; k < L; k++) z[k] = (xs[k * M + m] - mu) / sd;
            z[L] = 1;
            same &= mus[w * M + m] == (float)mu;
            for (int h = 0; h < H; h++) {
                double acc = 0;
                for (int k = 0; k <= L; k++) acc += z[k] * lm.weights[k * H + h];
                int i = (int)((w * H + h) * M + m);
                same &= c[i] == (float)(sd * acc);
                double e = (double)mus[w * M + m] + (double)c[i] - (double)y[i];
                sse += e * e;
            }
        }
    CHECK(same, "linear_offset: the offsets and means are the map's, bitwise");
    /* the fit's validation MSE is the trace formula's, the direct sum's here: they differ by the
       float rounding of mu and of each offset (2^-24 relative, |values| < 10 scaled, so under 1e-6
       per error) and summation order; 1e-4 relative is far above that and far below a wrong ridge's */
    double direct = sse / (double)(nv * H * M);
    CHECK(fabs(direct - lm.val_mse) <= 1e-4 * direct, "linear_fit: val mse %.9g, the map's forecast scores %.9g", lm.val_mse, direct);
    gpt2rt_forecaster_linear none;
    memset(&none, 0, sizeof none);
    CHECK(gpt2rt_forecaster_linear_offset(ctx, &none, x, nv, M, c, NULL) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "no fitted map"), "linear_offset without a fit: %s", gpt2rt_last_error(ctx));

    /* scoring: the forecasts the reference (the example's scoring written out) makes, bitwise;
       the sums over them; the drop-last count */
    int64_t n = in.windows[GPT2RT_SERIES_TEST];
    float *ref = (float *)malloc(sizeof(float) * (size_t)(n * H * M)), *keep = (float *)malloc(sizeof(float) * (size_t)(n * H * M));
    float *xt = (float *)malloc(sizeof(float) * (size_t)(n * L * M)), *yt = (float *)malloc(sizeof(float) * (size_t)(n * H * M));
    reference(ctx, s, lm.weights, 1, 0.3, n, ref);
    gpt2rt_series_batch(s, GPT2RT_SERIES_TEST, 0, 0, 0, (int)n, xt, yt);
    gpt2rt_forecaster_score_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.batch = B; sd.linear = &lm; sd.linear_residual = 1; sd.blend = 0.3; sd.drop_batch = 3; sd.keep = keep; sd.keep_windows = n;
    gpt2rt_forecaster_scores sc;
    CHECK(gpt2rt_forecaster_score(ctx, s, GPT2RT_SERIES_TEST, &sd, &sc) == GPT2RT_OK, "score: %s", gpt2rt_last_error(ctx));
    CHECK(!memcmp(keep, ref, sizeof(float) * (size_t)(n * H * M)), "score: the kept forecasts are the reference's, bitwise");
    double want = 0, want_full = 0;
    for (int64_t w = 0; w < n; w++) {
        double se = 0;
        for (int64_t i = w * H * M; i < (w + 1) * H * M; i++) se += ((double)ref[i] - yt[i]) * ((double)ref[i] - yt[i]);
        want += se;
        if (w < n / 3 * 3) want_full += se;
    }
    CHECK(sc.windows == n && sc.windows_full == n / 3 * 3 && sc.sse == want && sc.sse_full == want_full,
          "score: %lld windows (want %lld), %lld whole batches of 3 (want %lld), sse %.9g (want %.9g), full %.9g (want %.9g)",
          (long long)sc.windows, (long long)n, (long long)sc.windows_full, (long long)(n / 3 * 3), sc.sse, want,
          sc.sse_full, want_full);
    /* the blend sums: the SSE at blend w is see + 2 w sed + w^2 sdd up to the float rounding of each
       forecast (2^-24 relative of |p| < 10: 6e-7 per error, squared errors ~1: 1e-5 relative is ample) */
    double at = sc.see + 2 * 0.3 * sc.sed + 0.09 * sc.sdd;
    CHECK(fabs(at - sc.sse) <= 1e-5 * sc.sse, "score: see + 2 w sed + w^2 sdd = %.9g, the blended sse %.9g", at, sc.sse);
    sd.batch = 0;
    CHECK(gpt2rt_forecaster_score(ctx, s, GPT2RT_SERIES_TEST, &sd, &sc) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "batch"), "score with batch 0: %s", gpt2rt_last_error(ctx));
    sd.batch = B;
    lm.lookback = L + 1;
    CHECK(gpt2rt_forecaster_score(ctx, s, GPT2RT_SERIES_TEST, &sd, &sc) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "lookback 17"), "score with a map of another lookback: %s", gpt2rt_last_error(ctx));
    lm.lookback = L;
    gpt2rt_forecaster_linear_free(&lm);
    CHECK(lm.weights == NULL, "linear_free: the weights are released");
    free(x); free(y); free(c); free(mus); free(ref); free(keep); free(xt); free(yt);
    gpt2rt_series_free(s);

    /* a series without a validation window (borders NONE: every row trains): no ridge to
       choose, refused naming why */
    gpt2rt_series_desc d;
    memset(&d, 0, sizeof d);
    d.lookback = L; d.horizon = H; d.borders = GPT2RT_SERIES_BORDERS_NONE;
    CHECK(gpt2rt_series_load(&s, DIR "/series.csv", &d) == GPT2RT_OK, "load, borders none: %s", gpt2rt_series_last_error(s));
    memset(&in, 0, sizeof in);
    gpt2rt_series_info_get(s, &in);
    CHECK(in.windows[GPT2RT_SERIES_VAL] == 0, "borders none: %lld validation windows", (long long)in.windows[GPT2RT_SERIES_VAL]);
    CHECK(gpt2rt_forecaster_linear_fit(ctx, s, &lm) == GPT2RT_ERR_INVALID_ARGUMENT && !lm.weights &&
          strstr(gpt2rt_last_error(ctx), "validation split, which has no window"), "linear_fit with no validation window: %s",
          gpt2rt_last_error(ctx));
    gpt2rt_series_free(s);
    gpt2rt_free(ctx);
}

/* what gpt2rt_forecaster_train reported, in order */
typedef struct train_log {
    int n_steps, n_epochs, order_ok, last_epoch, stops, step_seen, baselines;
    int64_t spe;
    double val[16], baseline;
    int best[16];
} train_log;
static void train_cb(void *user, const gpt2rt_forecaster_progress *p) {
    train_log *t = (train_log *)user;
    if (p->event == GPT2RT_FORECASTER_BASELINE) { /* before anything else */
        t->order_ok &= t->n_steps == 0 && t->n_epochs == 0;
        t->baseline = p->val_mse;
        t->baselines++;
        return;
    }
    if (p->event == GPT2RT_FORECASTER_STEP) {
        t->order_ok &= p->epoch == t->last_epoch + 1 && p->step == t->step_seen + 1 && p->steps == t->spe && p->stats;
        t->step_seen = (int)p->step;
        t->n_steps++;
        return;
    }
    t->order_ok &= t->stops == 0 && (p->epoch == 0 ? t->n_epochs == 0 && t->n_steps == 0 && p->best
                                                   : p->epoch == t->last_epoch + 1 && t->step_seen == t->spe);
    if (t->n_epochs < 16) { t->val[t->n_epochs] = p->val_mse; t->best[t->n_epochs] = p->best; }
    t->n_epochs++;
    t->last_epoch = p->epoch;
    t->step_seen = 0;
    t->stops += p->stop;
}

static void train_call(void) {
    gpt2rt_series *s = fx_series(DIR "/series.csv");
    gpt2rt_ctx *ctx = fx_ctx(0);
    gpt2rt_forecaster_linear lm;
    CHECK(gpt2rt_forecaster_linear_fit(ctx, s, &lm) == GPT2RT_OK, "linear_fit: %s", gpt2rt_last_error(ctx));
    gpt2rt_forecaster_train_desc td;
    memset(&td, 0, sizeof td);
    td.batch = B; td.epochs = 6; td.patience = 2; td.steps_per_epoch = 3; td.seed = 5;
    td.linear = &lm; td.linear_residual = 1; td.start_from_linear = 1; td.blend_linear = 1;
    train_log t;
    memset(&t, 0, sizeof t);
    t.order_ok = 1; t.last_epoch = 0; t.spe = 3;
    td.progress = train_cb; td.user = &t;
    gpt2rt_forecaster_train_result tr;
    CHECK(gpt2rt_forecaster_train(ctx, s, &td, &tr) == GPT2RT_OK, "train: %s", gpt2rt_last_error(ctx));
    int epochs = t.n_epochs - 1; /* epoch 0, the map alone, first */
    CHECK(t.order_ok && t.n_steps == 3 * epochs && tr.steps == t.n_steps && tr.steps_per_epoch == 3 &&
          (epochs == 6 ? t.stops <= 1 : t.stops == 1), "train: %d epochs of 3 steps reported in order (%d steps, %lld "
          "counted, %d stops)", epochs, t.n_steps, (long long)tr.steps, t.stops);
    double best = INFINITY;
    int best_epoch = -1, since = 0, stop_ok = 1;
    for (int e = 0; e < t.n_epochs && e < 16; e++) {
        int better = t.val[e] < best;
        stop_ok &= t.best[e] == better;
        if (better) { best = t.val[e]; best_epoch = e; since = 0; } else since++;
        stop_ok &= e == t.n_epochs - 1 || since < 2; /* no epoch after patience ran out */
    }
    CHECK(stop_ok && tr.best_epoch == best_epoch && tr.best_val_mse == best, "train: best epoch %d (val %.9g), the "
          "reports' lowest is %d (%.9g); early stopping after 2 epochs without a better one", tr.best_epoch,
          tr.best_val_mse, best_epoch, best);
    /* the best epoch's weights are the context's: validation scores what it scored then, exactly */
    gpt2rt_forecaster_score_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.batch = B; sd.linear = &lm; sd.linear_residual = 1;
    gpt2rt_forecaster_scores sc;
    CHECK_OK(ctx, gpt2rt_forecaster_score(ctx, s, GPT2RT_SERIES_VAL, &sd, &sc));
    double now_val = sc.sse / (double)(sc.windows * H * M);
    CHECK(now_val == tr.best_val_mse, "train: the restored weights score %.9g on validation, the best epoch %.9g",
          now_val, tr.best_val_mse);
    /* the blend minimises the quadratic over [0, 1]: no worse than either end, up to the
       rounding of three sums of ~1e2 terms (1e-12 relative) */
    CHECK(tr.blend >= 0 && tr.blend <= 1 && tr.blend_val_mse <= tr.model_val_mse * (1 + 1e-12) &&
          tr.blend_val_mse <= tr.linear_val_mse * (1 + 1e-12), "train: blend %g scores %.9g, model %.9g, linear %.9g",
          tr.blend, tr.blend_val_mse, tr.model_val_mse, tr.linear_val_mse);

    /* max_steps: that many steps, then back */
    memset(&t, 0, sizeof t);
    t.order_ok = 1; t.spe = 3;
    td.max_steps = 2; td.start_from_linear = 0;
    CHECK(gpt2rt_forecaster_train(ctx, s, &td, &tr) == GPT2RT_OK && tr.max_steps_reached && tr.steps == 2 &&
          t.n_steps == 2 && t.n_epochs == 0, "train with max_steps 2: %lld steps, %d reported, %d epochs: %s",
          (long long)tr.steps, t.n_steps, t.n_epochs, gpt2rt_last_error(ctx));
    td.max_steps = 0;
    /* refusals */
    td.linear = NULL;
    CHECK(gpt2rt_forecaster_train(ctx, s, &td, &tr) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "need a fitted linear map"), "train: blend without a map: %s", gpt2rt_last_error(ctx));
    td.linear = &lm;
    td.batch = 1000;
    CHECK(gpt2rt_forecaster_train(ctx, s, &td, &tr) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "batch 1000 exceeds the"), "train: a batch over the training windows: %s",
          gpt2rt_last_error(ctx));
    gpt2rt_forecaster_linear_free(&lm);
    gpt2rt_series_free(s);
    gpt2rt_free(ctx);
}

/* pretraining: the pooled series' steps, the last-patch baseline against its definition
   written out here, the best epoch among the reports, refusals */
static void pretrain_call(void) {
    gpt2rt_series *ds[2] = {fx_series(DIR "/series.csv"), fx_series(DIR "/series.csv")};
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.input = GPT2RT_INPUT_PATCHES; c.head = GPT2RT_HEAD_NEXT_PATCH; c.seq_len = L; c.patch_len = 4; c.patch_stride = 4;
    c.n_channels = 1; c.n_layer = 1; c.n_head = 2; c.n_embd = 8; c.batch_size = 5; c.lr = 1e-2f; c.seed = 3; c.n_threads = 1;
    gpt2rt_ctx *ctx;
    CHECK_OK(ctx, gpt2rt_create(&ctx, &c));
    gpt2rt_forecaster_train_desc td;
    memset(&td, 0, sizeof td);
    td.batch = 5; td.epochs = 3; td.patience = 1; td.steps_per_epoch = 4; td.seed = 2;
    train_log t;
    memset(&t, 0, sizeof t);
    t.order_ok = 1; t.spe = 4;
    td.progress = train_cb; td.user = &t;
    gpt2rt_forecaster_pretrain_result pr;
    CHECK(gpt2rt_forecaster_pretrain(ctx, ds, 2, &td, &pr) == GPT2RT_OK, "pretrain: %s", gpt2rt_last_error(ctx));
    /* the baseline: every validation series (each channel of each window) in whole batches of 5,
       each next patch forecast as the one before in RevIN's scale */
    gpt2rt_series_info in;
    memset(&in, 0, sizeof in);
    gpt2rt_series_info_get(ds[0], &in);
    int64_t nv = in.windows[GPT2RT_SERIES_VAL], ns = nv * M / 5 * 5;
    float *x = (float *)malloc(sizeof(float) * (size_t)(nv * L * M)), *y = (float *)malloc(sizeof(float) * (size_t)(nv * H * M));
    gpt2rt_series_batch(ds[0], GPT2RT_SERIES_VAL, 0, 0, 0, (int)nv, x, y);
    double sum = 0;
    for (int64_t b = 0; b < ns; b += 5) {
        double se = 0;
        for (int64_t i = b; i < b + 5; i++) {
            const float *xs = x + i / M * L * M + i % M;
            double mu = 0, var = 0;
            for (int k = 0; k < L; k++) mu += xs[k * M];
            mu /= L;
            for (int k = 0; k < L; k++) var += (xs[k * M] - mu) * (xs[k * M] - mu);
            double sd = sqrt(var / L + 1e-5);
            for (int p = 0; p + 1 < L / 4; p++)
                for (int q = 0; q < 4; q++) se += ((xs[((p + 1) * 4 + q) * M] - xs[(p * 4 + q) * M]) / sd) *
                                                  ((xs[((p + 1) * 4 + q) * M] - xs[(p * 4 + q) * M]) / sd);
        }
        sum += se / (5.0 * (L / 4 - 1) * 4);
    }
    double naive = sum / (double)(ns / 5); /* both files the same: the mean over both is this one's */
    /* the same terms in the same order but for the pooling of two equal files: a mean of equal
       means, 1e-12 relative */
    CHECK(fabs(pr.naive_val_mse - naive) <= 1e-12 * naive && t.baselines == 1 && t.baseline == pr.naive_val_mse,
          "pretrain: last patch repeated %.12g (reported %d times, %.12g), written out %.12g", pr.naive_val_mse,
          t.baselines, t.baseline, naive);
    CHECK(t.order_ok && t.n_epochs >= 1 && t.n_steps == 4 * t.n_epochs && pr.steps == t.n_steps && pr.steps_per_epoch == 4,
          "pretrain: %d epochs of 4 steps reported in order (%d steps)", t.n_epochs, t.n_steps);
    double best = INFINITY;
    int best_epoch = 0;
    for (int e = 0; e < t.n_epochs && e < 16; e++) if (t.val[e] < best) { best = t.val[e]; best_epoch = e + 1; }
    CHECK(pr.best_epoch == best_epoch && pr.best_val_mse == best, "pretrain: best epoch %d (%.9g), the reports' %d (%.9g)",
          pr.best_epoch, pr.best_val_mse, best_epoch, best);
    td.steps_per_epoch = 0; td.max_steps = 3;
    memset(&t, 0, sizeof t);
    t.order_ok = 1; t.spe = (in.windows[GPT2RT_SERIES_TRAIN] * M / 5) * 2;
    CHECK(gpt2rt_forecaster_pretrain(ctx, ds, 2, &td, &pr) == GPT2RT_OK && pr.max_steps_reached && pr.steps == 3 &&
          t.order_ok && t.n_steps == 3 && t.baselines == 0 && pr.steps_per_epoch == t.spe, "pretrain with max_steps 3: %lld steps of %lld an "
          "epoch (want %lld): %s", (long long)pr.steps, (long long)pr.steps_per_epoch, (long long)t.spe, gpt2rt_last_error(ctx));
    gpt2rt_ctx *reg = fx_ctx(0);
    CHECK(gpt2rt_forecaster_pretrain(reg, ds, 2, &td, &pr) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(reg), "head NEXT_PATCH, n_channels 1"), "pretrain on a regression context: %s",
          gpt2rt_last_error(reg));
    gpt2rt_free(reg);
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.lookback = 20; sd.horizon = H;
    gpt2rt_series *other;
    CHECK_OK(ctx, gpt2rt_series_load(&other, DIR "/series.csv", &sd) == GPT2RT_OK ? GPT2RT_OK : GPT2RT_ERR_FORMAT);
    gpt2rt_series *mixed[2] = {ds[0], other};
    CHECK(gpt2rt_forecaster_pretrain(ctx, mixed, 2, &td, &pr) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "series 1 has lookback 20"), "pretrain on a series of another lookback: %s",
          gpt2rt_last_error(ctx));
    gpt2rt_series_free(other);
    free(x); free(y);
    gpt2rt_series_free(ds[0]); gpt2rt_series_free(ds[1]);
    gpt2rt_free(ctx);
}

/* a file read as training read it, and forecasts written as dated CSV */
static void csv_calls(void) {
    gpt2rt_series *s = fx_series(DIR "/series.csv");
    gpt2rt_ctx *ctx = fx_ctx(0);
    CHECK(fx_save(ctx, s, DIR "/fc_csv", NULL) == GPT2RT_OK, "save: %s", gpt2rt_last_error(ctx));
    gpt2rt_free(ctx);
    gpt2rt_series_free(s);
    gpt2rt_forecaster *fc;
    if (gpt2rt_forecaster_load(&fc, DIR "/fc_csv", NULL) != GPT2RT_OK) {
        CHECK(0, "load: %s", gpt2rt_forecaster_last_error(fc));
        gpt2rt_forecaster_free(fc);
        return;
    }
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.fill = GPT2RT_SERIES_FILL_LINEAR;
    CHECK(gpt2rt_forecaster_series_desc(fc, &sd) == GPT2RT_OK && sd.lookback == L && sd.horizon == H &&
          sd.columns && !strcmp(sd.columns, "load,temp,flow") && sd.date_column && !strcmp(sd.date_column, "date") &&
          !sd.no_date_column && sd.borders == GPT2RT_SERIES_BORDERS_RATIO && sd.fill == GPT2RT_SERIES_FILL_REFUSE,
          "series_desc: lookback %d horizon %d columns %s date %s borders %d, fill %d (want the saved refuse)", sd.lookback, sd.horizon,
          sd.columns ? sd.columns : "NULL", sd.date_column ? sd.date_column : "NULL", (int)sd.borders, (int)sd.fill);
    sd.borders = GPT2RT_SERIES_BORDERS_NONE; sd.no_scale = 1;
    gpt2rt_series *raw;
    CHECK(gpt2rt_series_load(&raw, DIR "/series.csv", &sd) == GPT2RT_OK, "load raw: %s", gpt2rt_series_last_error(raw));
    const float *v = gpt2rt_series_values(raw);
    float out[2 * H * M];
    int64_t first = ROWS - L - 1; /* the last two windows: the last ends at row 159, 2024-04-05 15:00 */
    float xw[2 * L * M];
    for (int w = 0; w < 2; w++) memcpy(xw + w * L * M, v + (first + w) * M, sizeof(float) * L * M);
    CHECK_OK(gpt2rt_forecaster_ctx(fc), gpt2rt_forecaster_predict(fc, xw, 2, out));
    char *text = NULL;
    size_t len = 0;
    CHECK(gpt2rt_forecaster_csv(fc, raw, first, 2, out, 1, &text, &len) == GPT2RT_OK && text && strlen(text) == len,
          "csv: %s", gpt2rt_forecaster_last_error(fc));
    char want[256];
    snprintf(want, sizeof want, "origin,date,load,temp,flow\n2024-04-05 14:00:00,2024-04-05 15:00:00,%.9g,%.9g,%.9g\n",
             (double)out[0], (double)out[1], (double)out[2]);
    int lines = 0;
    for (size_t i = 0; text && i < len; i++) lines += text[i] == '\n';
    char last[256];
    snprintf(last, sizeof last, "2024-04-05 15:00:00,2024-04-05 19:00:00,%.9g,%.9g,%.9g\n", (double)out[2 * H * M - 3],
             (double)out[2 * H * M - 2], (double)out[2 * H * M - 1]);
    CHECK(text && !strncmp(text, want, strlen(want)) && lines == 1 + 2 * H && len > strlen(last) &&
          !strcmp(text + len - strlen(last), last), "csv: the header, dates continuing the file's, values %%.9g; %d lines:\n%s",
          lines, text ? text : "");
    free(text);
    CHECK(gpt2rt_forecaster_csv(fc, raw, first + 1, 2, out, 0, &text, &len) == GPT2RT_ERR_INVALID_ARGUMENT && !text &&
          strstr(gpt2rt_forecaster_last_error(fc), "160 rows"), "csv past the series' end: %s", gpt2rt_forecaster_last_error(fc));
    gpt2rt_series_free(raw);
    gpt2rt_forecaster_free(fc);
}

/* the whole of a small file ("" when it cannot be read) */
static const char *slurp(const char *path) {
    static char buf[8192];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    return buf;
}

/* a file of DIR whose name begins with prefix (a temporary left behind) */
static int left_in_dir(const char *prefix) {
    char pat[256];
    glob_t g;
    snprintf(pat, sizeof pat, DIR "/%s*", prefix);
    int found = glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    if (found) globfree(&g);
    return found;
}

/* Outputs against inputs: the same file under other spellings and links, a path inside
   a directory, and a directory holding an input, told apart by device and inode; an
   output path that cannot be written named before any work; a forecast CSV written
   whole or not at all, never onto its data file or into the forecaster's directory. */
static void csv_write_call(void) {
    const char *data = DIR "/cw_data.csv", *out = DIR "/cw_out.csv";
    copy_file(DIR "/series.csv", data);
    remove(DIR "/cw_hard.csv"); remove(DIR "/cw_sym.csv"); remove(DIR "/cw_link.csv"); remove(out);
    CHECK(link(data, DIR "/cw_hard.csv") == 0 && symlink("cw_data.csv", DIR "/cw_sym.csv") == 0, "links: %s",
          strerror(errno));
    static const char *same[] = {DIR "/cw_data.csv", "./" DIR "/cw_data.csv", "build/../" DIR "/cw_data.csv",
                                 DIR "/cw_hard.csv", DIR "/cw_sym.csv"};
    for (int i = 0; i < 5; i++)
        CHECK(gpt2rt_forecaster_path_clash(same[i], data) == GPT2RT_FORECASTER_SAME_FILE, "%s is the data file",
              same[i]);
    CHECK(gpt2rt_forecaster_path_clash(DIR "/new_a.csv", "./" DIR "/new_a.csv") == GPT2RT_FORECASTER_SAME_FILE &&
          gpt2rt_forecaster_path_clash(DIR "/new_a.csv", DIR "/new_b.csv") == GPT2RT_FORECASTER_APART,
          "two names not there yet: the same when their directory and name agree");
    CHECK(gpt2rt_forecaster_path_clash(DIR "/fc_csv", "./" DIR "/fc_csv/") == GPT2RT_FORECASTER_SAME_DIR &&
          gpt2rt_forecaster_path_clash(DIR "/fc_csv/new.csv", DIR "/fc_csv") == GPT2RT_FORECASTER_OUT_INSIDE &&
          gpt2rt_forecaster_path_clash(DIR "/fc_csv", DIR "/fc_csv/config.json") == GPT2RT_FORECASTER_IN_INSIDE &&
          gpt2rt_forecaster_path_clash(out, data) == GPT2RT_FORECASTER_APART &&
          gpt2rt_forecaster_path_clash(out, NULL) == GPT2RT_FORECASTER_APART,
          "the same directory, a path inside one, a directory holding one, two files apart");
    char why[600];
    CHECK(gpt2rt_forecaster_path_check(data, 0, why, sizeof why) == GPT2RT_OK && !why[0] &&
          gpt2rt_forecaster_path_check(out, 0, why, sizeof why) == GPT2RT_OK &&
          gpt2rt_forecaster_path_check(DIR "/new_dir", 1, why, sizeof why) == GPT2RT_OK &&
          gpt2rt_forecaster_path_check(DIR "/fc_csv", 1, why, sizeof why) == GPT2RT_OK,
          "an existing file, a new one, a new and an existing directory can be written: %s", why);
    CHECK(gpt2rt_forecaster_path_check(data, 1, why, sizeof why) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(why, "exists and is not a directory"), "a file where a directory goes: %s", why);
    CHECK(gpt2rt_forecaster_path_check(DIR, 0, why, sizeof why) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(why, "is a directory"), "a directory where a file goes: %s", why);
    CHECK(gpt2rt_forecaster_path_check(DIR "/no_such_dir/x.csv", 0, why, sizeof why) == GPT2RT_ERR_INVALID_ARGUMENT &&
          !strcmp(why, "the directory " DIR "/no_such_dir does not exist"), "a file in a missing directory: %s", why);

    gpt2rt_forecaster *fc;
    if (gpt2rt_forecaster_load(&fc, DIR "/fc_csv", NULL) != GPT2RT_OK) {
        CHECK(0, "load: %s", gpt2rt_forecaster_last_error(fc));
        gpt2rt_forecaster_free(fc);
        return;
    }
    const char *old = "old,text\n1,2\n", *text = "date,load,temp,flow\n2024-04-05 16:00:00,1,2,3\n";
    size_t len = strlen(text);
    char keep[8192];
    snprintf(keep, sizeof keep, "%s", slurp(data));
    static const char *refuse[] = {DIR "/cw_hard.csv", DIR "/cw_sym.csv", DIR "/fc_csv/forecaster.json",
                                   DIR "/fc_csv/new.csv", DIR "/fc_csv"};
    for (int i = 0; i < 5; i++)
        CHECK(gpt2rt_forecaster_csv_write(fc, refuse[i], text, len, data) == GPT2RT_ERR_INVALID_ARGUMENT &&
              strstr(gpt2rt_forecaster_last_error(fc), "nothing was written"), "csv_write onto %s refused: %s",
              refuse[i], gpt2rt_forecaster_last_error(fc));
    CHECK(!strcmp(slurp(data), keep) && !exists(DIR "/fc_csv/new.csv") && !left_in_dir("cw_data.csv.tmp") &&
              !left_in_dir("cw_hard.csv.tmp"),
          "the refused writes left the data file as it was and wrote nothing into the forecaster's directory");
    CHECK(gpt2rt_forecaster_csv_write(fc, out, text, len, data) == GPT2RT_OK && !strcmp(slurp(out), text) &&
          !gpt2rt_forecaster_last_error(fc)[0], "csv_write: the file holds the text: %s", gpt2rt_forecaster_last_error(fc));
    /* an existing file: replaced whole, its permissions kept; through a symbolic link: the
       file it names replaced, the link kept */
    write_file(out, old);
    chmod(out, 0640);
    struct stat st;
    CHECK(gpt2rt_forecaster_csv_write(fc, out, text, len, NULL) == GPT2RT_OK && !strcmp(slurp(out), text) &&
          stat(out, &st) == 0 && (st.st_mode & 0777) == 0640, "csv_write over a 0640 file: its text, mode %o",
          (unsigned)(st.st_mode & 0777));
    write_file(out, old);
    CHECK(symlink("cw_out.csv", DIR "/cw_link.csv") == 0 &&
          gpt2rt_forecaster_csv_write(fc, DIR "/cw_link.csv", text, len, NULL) == GPT2RT_OK &&
          lstat(DIR "/cw_link.csv", &st) == 0 && S_ISLNK(st.st_mode) && !strcmp(slurp(out), text),
          "csv_write through a symbolic link: the link kept, the file it names replaced");
    /* a failed rename, and a write past a file-size limit, leave the old file whole and
       no temporary beside it */
    write_file(out, old);
    gpt2rt__test_rename_fail = 1;
    gpt2rt_result r = gpt2rt_forecaster_csv_write(fc, out, text, len, NULL);
    gpt2rt__test_rename_fail = 0;
    CHECK(r == GPT2RT_ERR_IO && strstr(gpt2rt_forecaster_last_error(fc), "is as it was") && !strcmp(slurp(out), old) &&
          !left_in_dir("cw_out.csv.tmp"), "a failed rename: %s; the old file whole, no temporary",
          gpt2rt_forecaster_last_error(fc));
    static char big[1 << 16];
    memset(big, 'x', sizeof big);
    struct rlimit was, lim;
    getrlimit(RLIMIT_FSIZE, &was);
    lim = was;
    lim.rlim_cur = 4096;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    int set = setrlimit(RLIMIT_FSIZE, &lim) == 0;
    r = set ? gpt2rt_forecaster_csv_write(fc, out, big, sizeof big, NULL) : GPT2RT_OK;
    setrlimit(RLIMIT_FSIZE, &was);
    signal(SIGXFSZ, prev);
    if (!set) SKIP("RLIMIT_FSIZE cannot be set here");
    else CHECK(r == GPT2RT_ERR_IO && strstr(gpt2rt_forecaster_last_error(fc), "File too large") &&
               !strcmp(slurp(out), old) && !left_in_dir("cw_out.csv.tmp"),
               "64 KiB past a 4 KiB file-size limit: %s; the old file whole, no temporary",
               gpt2rt_forecaster_last_error(fc));
    gpt2rt_forecaster_free(fc);
    remove(DIR "/cw_hard.csv"); remove(DIR "/cw_sym.csv"); remove(DIR "/cw_link.csv"); remove(out); remove(data);
}

/* A split through the forecaster (gpt2rt_forecaster_predict_split) is predict_scaled on
   the split's windows as gpt2rt_series_batch gives them, bitwise; the split's table
   (gpt2rt_forecaster_metrics) is gpt2rt_forecaster_errors and _baselines on the same
   windows, bitwise; a series cut otherwise is refused. */
static void split_calls(void) {
    gpt2rt_forecaster *fc;
    if (gpt2rt_forecaster_load(&fc, DIR "/fc_csv", NULL) != GPT2RT_OK) {
        CHECK(0, "load: %s", gpt2rt_forecaster_last_error(fc));
        gpt2rt_forecaster_free(fc);
        return;
    }
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    gpt2rt_forecaster_series_desc(fc, &sd);
    gpt2rt_series *s;
    CHECK(gpt2rt_series_load(&s, DIR "/series.csv", &sd) == GPT2RT_OK, "load: %s", gpt2rt_series_last_error(s));
    gpt2rt_series_info in;
    memset(&in, 0, sizeof in);
    gpt2rt_series_info_get(s, &in);
    int64_t n = in.windows[GPT2RT_SERIES_TEST];
    float *x = (float *)malloc(sizeof(float) * (size_t)(n * L * M)), *y = (float *)malloc(sizeof(float) * (size_t)(n * H * M));
    float *want = (float *)malloc(sizeof(float) * (size_t)(n * H * M)), *got = (float *)malloc(sizeof(float) * (size_t)(n * H * M));
    for (int64_t w = 0; w < n; w++) gpt2rt_series_batch(s, GPT2RT_SERIES_TEST, 0, 0, w, 1, x + w * L * M, y + w * H * M);
    CHECK(n > B && gpt2rt_forecaster_predict_scaled(fc, x, n, want) == GPT2RT_OK &&
          gpt2rt_forecaster_predict_split(fc, s, GPT2RT_SERIES_TEST, got) == GPT2RT_OK &&
          !memcmp(want, got, sizeof(float) * (size_t)(n * H * M)),
          "predict_split of %lld test windows equals predict_scaled of their batches, bitwise: %s", (long long)n,
          gpt2rt_forecaster_last_error(fc));
    gpt2rt_ctx *ctx = gpt2rt_forecaster_ctx(fc);
    gpt2rt_forecaster_linear lm;
    memset(&lm, 0, sizeof lm);
    CHECK_OK(ctx, gpt2rt_forecaster_linear_fit(ctx, s, &lm));
    double sse[M], sae[M], e_sse[M], e_sae[M], b_mse[3], b_mae[3];
    gpt2rt_forecaster_errors(got, y, n, H, M, e_sse, e_sae);
    CHECK_OK(ctx, gpt2rt_forecaster_baselines(ctx, x, y, n, 24, &lm, b_mse, b_mae));
    gpt2rt_forecaster_metric mt;
    memset(&mt, 0, sizeof mt);
    mt.sse = sse; mt.sae = sae;
    CHECK(gpt2rt_forecaster_metrics(ctx, s, GPT2RT_SERIES_TEST, got, 24, &lm, &mt) == GPT2RT_OK && mt.windows == n &&
          !memcmp(sse, e_sse, sizeof sse) && !memcmp(sae, e_sae, sizeof sae) && !memcmp(mt.base_mse, b_mse, sizeof b_mse) &&
          !memcmp(mt.base_mae, b_mae, sizeof b_mae) && b_mse[2] < b_mse[0],
          "metrics: the per-channel sums and the baselines of errors() and baselines(), bitwise (%s)", gpt2rt_last_error(ctx));
    CHECK(gpt2rt_forecaster_metrics(ctx, s, GPT2RT_SERIES_TEST, got, 0, NULL, &mt) == GPT2RT_OK &&
          mt.base_mse[1] != mt.base_mse[1] && mt.base_mse[2] != mt.base_mse[2] && mt.base_mse[0] == b_mse[0],
          "metrics without a period or a map: those baselines NaN, the last value's as before");
    gpt2rt_forecaster_linear_free(&lm);
    gpt2rt_series *other;
    sd.lookback = L / 2;
    CHECK(gpt2rt_series_load(&other, DIR "/series.csv", &sd) == GPT2RT_OK, "load: %s", gpt2rt_series_last_error(other));
    CHECK(gpt2rt_forecaster_predict_split(fc, other, GPT2RT_SERIES_TEST, got) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_forecaster_last_error(fc), "lookback 8"), "predict_split of a series cut at lookback 8: %s",
          gpt2rt_forecaster_last_error(fc));
    CHECK(gpt2rt_forecaster_metrics(ctx, other, GPT2RT_SERIES_TEST, got, 0, NULL, &mt) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "differ"), "metrics of a series cut at lookback 8: %s", gpt2rt_last_error(ctx));
    gpt2rt_series_free(other);
    free(x); free(y); free(want); free(got);
    gpt2rt_series_free(s);
    gpt2rt_forecaster_free(fc);
}

/* The recipes (gpt2rt_forecaster_recipe_get) are the settings their comments publish;
   the stage follows the head; the cpu recipe's config, given channels and a horizon,
   builds a context whose plan counts the frozen blocks out; a bad recipe or head is
   refused. */
static void recipes(void) {
    gpt2rt_config c;
    gpt2rt_forecaster_train_desc td;
    unsigned am = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP;
    CHECK(gpt2rt_forecaster_recipe_get(GPT2RT_FORECASTER_RECIPE_CPU, GPT2RT_HEAD_REGRESSION, &c, &td) == GPT2RT_OK &&
          c.input == GPT2RT_INPUT_PATCHES && c.seq_len == 336 && c.patch_len == 16 && c.patch_stride == 16 &&
          c.n_layer == 1 && c.n_head == 2 && c.n_embd == 16 && c.lr == 1e-4f && c.frozen == am &&
          c.head_dropout == 0.3f && c.grad_clip == 1.0f && c.batch_size == 16 && td.batch == 16 && td.epochs == 10 &&
          td.patience == 3 && td.linear_residual == 1 && td.blend_linear == 1 && c.n_channels == 0 && c.horizon == 0,
          "cpu, flatten head: lookback 336, patch 16 stride 16, 1x2x16 frozen, lr 1e-4, batch 16, the linear map");
    CHECK(gpt2rt_forecaster_recipe_get(GPT2RT_FORECASTER_RECIPE_CPU, GPT2RT_HEAD_PATCH_DECODE, &c, &td) == GPT2RT_OK &&
          !td.linear_residual && !td.blend_linear && c.attn_mask == GPT2RT_MASK_PLACEHOLDERS,
          "cpu, patch decoding: no linear map, the placeholder mask");
    CHECK(gpt2rt_forecaster_recipe_get(GPT2RT_FORECASTER_RECIPE_GPT4TS, GPT2RT_HEAD_REGRESSION, &c, &td) == GPT2RT_OK &&
          c.n_layer == 6 && c.n_head == 12 && c.n_embd == 768 && c.patch_stride == 8 && td.batch == 256 &&
          c.frozen == 0 && c.recompute == GPT2RT_RECOMPUTE_FULL && !td.linear_residual,
          "gpt4ts: 6x12x768, stride 8, batch 256, nothing frozen until weights load, full recompute");
    CHECK(gpt2rt_forecaster_recipe_get(GPT2RT_FORECASTER_RECIPE_ALLM4TS, GPT2RT_HEAD_NEXT_PATCH, &c, &td) == GPT2RT_OK &&
          c.head == GPT2RT_HEAD_NEXT_PATCH && c.n_channels == 1 && c.seq_len == 1024 && c.patch_stride == 16 &&
          td.batch == 2048 && c.dropout == 0.2f && c.frozen == 0,
          "allm4ts stage 1: next patch, one channel a series, lookback 1024, batch 2048, dropout 0.2, all trained");
    CHECK(gpt2rt_forecaster_recipe_get(GPT2RT_FORECASTER_RECIPE_ALLM4TS, GPT2RT_HEAD_PATCH_DECODE, &c, &td) == GPT2RT_OK &&
          c.seq_len == 336 && c.patch_stride == 8 && c.lr == 3e-3f && td.batch == 256 && c.frozen == am,
          "allm4ts stage 2: lookback 336, stride 8, lr 3e-3, batch 256, attention + MLP frozen");
    CHECK(gpt2rt_forecaster_recipe_get((gpt2rt_forecaster_recipe)7, GPT2RT_HEAD_REGRESSION, &c, &td) ==
              GPT2RT_ERR_INVALID_ARGUMENT &&
          gpt2rt_forecaster_recipe_get(GPT2RT_FORECASTER_RECIPE_CPU, GPT2RT_HEAD_LM, &c, &td) == GPT2RT_ERR_INVALID_ARGUMENT,
          "an unknown recipe, a token head: refused");
    gpt2rt_forecaster_recipe_get(GPT2RT_FORECASTER_RECIPE_CPU, GPT2RT_HEAD_REGRESSION, &c, &td);
    c.n_channels = M; c.horizon = H; c.n_threads = 1;
    gpt2rt_ctx *ctx = NULL;
    gpt2rt_memory_plan plan;
    CHECK(gpt2rt_create(&ctx, &c) == GPT2RT_OK && gpt2rt_plan(&c, &plan) == GPT2RT_OK && plan.n_trainable < plan.n_params,
          "the cpu recipe builds a context, fewer parameters trained than held (attention + MLP frozen): %s",
          gpt2rt_last_error(ctx));
    gpt2rt_free(ctx);
}

/* fill and season: what training decided is saved, read back, and applied by series_desc;
   a file saved without them (older saves) reads as no fill and no season; bad values refused */
static void fill_season(void) {
    gpt2rt_series *s = fx_series(DIR "/series.csv");
    gpt2rt_ctx *ctx = fx_ctx(0);
    gpt2rt_forecaster_desc fd;
    memset(&fd, 0, sizeof fd);
    fd.series = s; fd.fill = GPT2RT_SERIES_FILL_LINEAR; fd.season = 24;
    CHECK_OK(ctx, gpt2rt_forecaster_save(ctx, DIR "/fc_fill", &fd));
    fd.fill = (gpt2rt_series_fill)3;
    CHECK(gpt2rt_forecaster_save(ctx, DIR "/fc_never", &fd) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "fill = 3"), "save with fill 3: %s", gpt2rt_last_error(ctx));
    fd.fill = GPT2RT_SERIES_FILL_PREVIOUS; fd.season = -1;
    CHECK(gpt2rt_forecaster_save(ctx, DIR "/fc_never", &fd) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "season = -1"), "save with season -1: %s", gpt2rt_last_error(ctx));
    gpt2rt_free(ctx);
    gpt2rt_series_free(s);
    for (int old = 0; old < 2; old++) {
        if (old) { /* as a save before the keys: both lines gone */
            edit_json_in(DIR "/fc_fill", "  \"fill\": \"linear\",\n", "");
            edit_json_in(DIR "/fc_fill", "  \"season\": 24,\n", "");
        }
        gpt2rt_forecaster *fc;
        gpt2rt_forecaster_info fi;
        memset(&fi, 0, sizeof fi);
        gpt2rt_series_desc sd;
        memset(&sd, 0, sizeof sd);
        sd.fill = GPT2RT_SERIES_FILL_PREVIOUS;
        gpt2rt_result r = gpt2rt_forecaster_load(&fc, DIR "/fc_fill", NULL);
        CHECK(r == GPT2RT_OK, "load (%s): %s", old ? "old keys" : "new keys", gpt2rt_forecaster_last_error(fc));
        if (r == GPT2RT_OK && gpt2rt_forecaster_info_get(fc, &fi) == GPT2RT_OK && gpt2rt_forecaster_series_desc(fc, &sd) == GPT2RT_OK) {
            gpt2rt_series_fill want = old ? GPT2RT_SERIES_FILL_REFUSE : GPT2RT_SERIES_FILL_LINEAR;
            CHECK(fi.fill == want && fi.season == (old ? 0 : 24) && sd.fill == want,
                  "%s: info fill %d season %d, series_desc fill %d; want fill %d season %d",
                  old ? "a save without fill and season" : "fill linear, season 24 round trip", (int)fi.fill, fi.season,
                  (int)sd.fill, (int)want, old ? 0 : 24);
        }
        gpt2rt_forecaster_free(fc);
    }
    static const char *bad[][2] = {{"\"season\": 0,\n", "\"season\": -2,\n"}, {"\"fill\": \"refuse\"", "\"fill\": \"zero\""},
                                   {"\"season\": 0,\n", "\"season\": 0,\n  \"season\": 0,\n"}};
    const char *want[] = {"season", "not refuse, previous or linear", "twice"};
    for (int k = 0; k < 3; k++) {
        gpt2rt_series *s2 = fx_series(DIR "/series.csv");
        gpt2rt_ctx *c2 = fx_ctx(0);
        CHECK(fx_save(c2, s2, DIR "/fc_bad", NULL) == GPT2RT_OK, "save: %s", gpt2rt_last_error(c2));
        gpt2rt_free(c2);
        gpt2rt_series_free(s2);
        edit_json_in(DIR "/fc_bad", bad[k][0], bad[k][1]);
        gpt2rt_forecaster *fc;
        gpt2rt_result r = gpt2rt_forecaster_load(&fc, DIR "/fc_bad", NULL);
        CHECK(r == GPT2RT_ERR_FORMAT && strstr(gpt2rt_forecaster_last_error(fc), want[k]),
              "forecaster.json with %s: refused naming '%s': %s", bad[k][1], want[k], gpt2rt_forecaster_last_error(fc));
        gpt2rt_forecaster_free(fc);
    }
}

/* the baselines on windows built so each error is known: x periodic with period 4 in
   every channel, y the next period continued plus 1 in channel 0, plus 0 elsewhere */
static void baselines(void) {
    enum { N = 2, P = 4 };
    gpt2rt_ctx *ctx = fx_ctx(0);
    float x[N * L * M], y[N * H * M];
    for (int w = 0; w < N; w++)
        for (int m = 0; m < M; m++) {
            for (int k = 0; k < L; k++) x[(w * L + k) * M + m] = (float)(k % P + 2 * m + w);
            for (int h = 0; h < H; h++) y[(w * H + h) * M + m] = (float)((L + h) % P + 2 * m + w + (m == 0));
        }
    /* last value x[L-1] = 3 + 2m + w against (16 + h) % 4 + 2m + w (+1 in channel 0): errors over h = 0..3
       are 3, 2, 1, 0 (channels 1, 2) and 2, 1, 0, -1 (channel 0): mse (2 * 14 + 6) / 12, mae (2 * 6 + 4) / 12;
       the seasonal naive at 4 misses by 1 in channel 0 only: mse = mae = 1 / 3 */
    double mse[3], mae[3];
    CHECK_OK(ctx, gpt2rt_forecaster_baselines(ctx, x, y, N, P, NULL, mse, mae));
    CHECK(mse[0] == 34.0 / 12 && mae[0] == 16.0 / 12 && fabs(mse[1] - 1.0 / 3) < 1e-15 && fabs(mae[1] - 1.0 / 3) < 1e-15 &&
          isnan(mse[2]) && isnan(mae[2]), "baselines: last %.17g / %.17g (want 34/12, 16/12), seasonal %.17g / %.17g "
          "(want 1/3; 1e-15: a sum of 24 exact small integers divided once), linear %g (want NaN: no map)",
          mse[0], mae[0], mse[1], mae[1], mse[2]);
    /* a map forecasting the last value: W's row L-1 is 1, the rest 0: mean + sd * z[L-1] */
    static double W[(L + 1) * H];
    for (int i = 0; i < (L + 1) * H; i++) W[i] = i / H == L - 1 ? 1 : 0;
    gpt2rt_forecaster_linear lm = {L, H, W, 0, 0};
    CHECK_OK(ctx, gpt2rt_forecaster_baselines(ctx, x, y, N, L + 1, &lm, mse, mae));
    /* 1e-5: (x - mean) / sd * sd in double, the sum with the mean rounded to float once: values below 8 are
       off by at most 2^-21 each, so mse moves by at most 2 * 3 * 2^-21 + 2^-42 < 3e-6 and mae by 2^-21 */
    CHECK(isnan(mse[1]) && fabs(mse[2] - 34.0 / 12) < 1e-5 && fabs(mae[2] - 16.0 / 12) < 1e-5,
          "baselines: period %d > lookback gives NaN (%g); a last-value map scores %.9g / %.9g (want 34/12, 16/12)",
          L + 1, mse[1], mse[2], mae[2]);
    { /* per channel: (n 1, horizon 2, 2 channels) errors 1, -2 | 3, 0.5 */
        float pr[4] = {1, -2, 3, 0.5f}, tr[4] = {0, 0, 0, 0};
        double se[2], ae[2];
        CHECK(gpt2rt_forecaster_errors(pr, tr, 1, 2, 2, se, ae) == GPT2RT_OK && se[0] == 10 && se[1] == 4.25 &&
              ae[0] == 4 && ae[1] == 2.5, "errors: sse %g %g (want 10, 4.25), sae %g %g (want 4, 2.5)", se[0], se[1],
              ae[0], ae[1]);
        CHECK(gpt2rt_forecaster_errors(pr, tr, -1, 2, 2, se, ae) == GPT2RT_ERR_INVALID_ARGUMENT, "errors: n = -1 refused");
    }
    gpt2rt_forecaster_linear wrong = {L + 1, H, W, 0, 0};
    CHECK(gpt2rt_forecaster_baselines(ctx, x, y, N, P, &wrong, mse, mae) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "lookback 17"), "a map of another lookback: %s", gpt2rt_last_error(ctx));
    CHECK(gpt2rt_forecaster_baselines(ctx, x, y, 0, P, NULL, mse, mae) == GPT2RT_ERR_INVALID_ARGUMENT &&
          strstr(gpt2rt_last_error(ctx), "n < 1"), "n = 0: %s", gpt2rt_last_error(ctx));
    gpt2rt_free(ctx);
}

int main(void) {
    mkdir("build", 0777);
    mkdir(DIR, 0777);
    write_csv(DIR "/series.csv");
    round_trip(GPT2RT_HEAD_REGRESSION, 1);
    round_trip(GPT2RT_HEAD_PATCH_DECODE, 0);
    refusals();
    save_whole_or_nothing();
    weights_must_match();
    column_names();
    strict_json();
    training_calls();
    train_call();
    pretrain_call();
    csv_calls();
    csv_write_call();
    split_calls();
    recipes();
    fill_season();
    baselines();
    return harness_finish();
}
