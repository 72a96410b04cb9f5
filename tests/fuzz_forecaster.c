/* tests/fuzz_forecaster.c - libFuzzer target for the forecaster directory loader
   (gpt2rt_forecaster_load: forecaster.json through the strict JSON reader, the
   weights' tensor list, the weights).

   The input is forecaster.json, then, after the line "#model.safetensors#", the
   weights file (an input without that line has forecaster.json alone). Both are
   written into a directory of this process's own (build/fuzz_fc_<pid>) and loaded
   with a CPU runtime of one thread and a memory_budget of 64 MiB (a hostile shape is
   refused by its plan, before anything is allocated).

   Oracles, beyond "no crash, no sanitizer report":
   - a failure is FORMAT, IO, INVALID_ARGUMENT or OUT_OF_MEMORY with a message, and
     the failed object answers nothing but its message;
   - a success describes a forecaster: lookback, horizon, channels, batch >= 1; every
     column named, no name empty or twice; the scaler, blend and date step inside the
     ranges the loader states; and a forecast of one window (every channel at its
     scaler mean) is either refused with a message naming the window or finite.

   Fuzzing (clang, libFuzzer), one process on one core: `make fuzz-forecaster`, or
     clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined \
           -o build/fuzz_forecaster tests/fuzz_forecaster.c -lm
     ./build/fuzz_forecaster build/fuzz_fc_corpus tests/fuzz_corpus_forecaster \
           -dict=tests/fuzz_forecaster.dict -max_len=16384
   Replay without libFuzzer (what make test runs):
     cc -std=c11 -DFUZZ_REPLAY -o build/fuzz_forecaster_replay tests/fuzz_forecaster.c -lm
     ./build/fuzz_forecaster_replay tests/fuzz_corpus_forecaster
   Seeds: cc -std=c11 -DFUZZ_SEEDS -o build/fuzz_forecaster_seeds tests/fuzz_forecaster.c -lm
   && ./build/fuzz_forecaster_seeds tests/fuzz_corpus_forecaster (real saved forecasters).
   See tests/FUZZING.md. */
#define _POSIX_C_SOURCE 200809L
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_SEP "\n#model.safetensors#\n"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif
#endif

static gpt2rt_result fz_last;
static char fz_msg[512], fz_dir[64];

static void fz_die(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_forecaster: %s: %s\n", what, detail ? detail : "");
    abort();
}

static void fz_write(const char *name, const uint8_t *p, size_t n) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", fz_dir, name);
    if (!p) { remove(path); return; }
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) fz_die("cannot write", path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fz_dir[0]) {
        mkdir("build", 0777);
        snprintf(fz_dir, sizeof fz_dir, "build/fuzz_fc_%d", (int)getpid());
        if (mkdir(fz_dir, 0777) != 0 && errno != EEXIST) fz_die("cannot create", fz_dir);
    }
    const uint8_t *sep = NULL;
    size_t k = strlen(FZ_SEP);
    for (size_t i = 0; !sep && size >= k && i <= size - k; i++)
        if (!memcmp(data + i, FZ_SEP, k)) sep = data + i;
    size_t njson = sep ? (size_t)(sep - data) : size;
    fz_write("forecaster.json", data, njson);
    fz_write("model.safetensors", sep ? sep + k : NULL, sep ? size - njson - k : 0);

    gpt2rt_config base;
    memset(&base, 0, sizeof base);
    base.backend = GPT2RT_BACKEND_CPU;
    base.n_threads = 1;
    base.memory_budget = 64u << 20;
    gpt2rt_forecaster *fc = NULL;
    gpt2rt_result r = gpt2rt_forecaster_load(&fc, fz_dir, &base);
    fz_last = r;
    if (!fc) fz_die("load returned no object", gpt2rt_result_string(r));
    snprintf(fz_msg, sizeof fz_msg, "%s", gpt2rt_forecaster_last_error(fc));
    gpt2rt_forecaster_info in;
    if (r != GPT2RT_OK) {
        if (r != GPT2RT_ERR_FORMAT && r != GPT2RT_ERR_IO && r != GPT2RT_ERR_INVALID_ARGUMENT &&
            r != GPT2RT_ERR_OUT_OF_MEMORY)
            fz_die("result", gpt2rt_result_string(r));
        if (!fz_msg[0]) fz_die("a failure without a message", gpt2rt_result_string(r));
        float x[1] = {0}, out[1];
        double mu, sd;
        if (gpt2rt_forecaster_info_get(fc, &in) != GPT2RT_ERR_STATE || gpt2rt_forecaster_column(fc, 0) ||
            gpt2rt_forecaster_date_column(fc) || gpt2rt_forecaster_ctx(fc) ||
            gpt2rt_forecaster_scaler(fc, 0, &mu, &sd) != GPT2RT_ERR_STATE ||
            gpt2rt_forecaster_predict(fc, x, 1, out) != GPT2RT_ERR_STATE)
            fz_die("a failed load still answers", fz_msg);
    } else {
        if (gpt2rt_forecaster_info_get(fc, &in) != GPT2RT_OK) fz_die("info after a load", "");
        int64_t L = in.lookback, H = in.horizon, M = in.channels;
        if (L < 1 || H < 1 || M < 1 || in.batch < 1 || !(in.blend >= 0 && in.blend <= 1) ||
            !(in.date_step >= 0 && in.date_step <= 1e10))
            fz_die("info out of range", "");
        for (int m = 0; m < M; m++) {
            const char *a = gpt2rt_forecaster_column(fc, m);
            double mu, sd;
            if (!a || !*a) fz_die("a column without a name", "");
            for (int q = 0; q < m; q++)
                if (!strcmp(a, gpt2rt_forecaster_column(fc, q))) fz_die("a name twice", a);
            if (gpt2rt_forecaster_scaler(fc, m, &mu, &sd) != GPT2RT_OK || !(fabs(mu) <= 3.4028234663852886e38) ||
                !(sd >= 2.220446049250313e-15 && sd <= 3.4028234663852886e38))
                fz_die("scaler out of range", a);
        }
        float *x = (float *)malloc(sizeof(float) * (size_t)(L * M)), *out = (float *)malloc(sizeof(float) * (size_t)(H * M));
        if (!x || !out) fz_die("malloc", "window");
        for (int64_t i = 0; i < L * M; i++) {
            double mu = 0, sd = 0;
            gpt2rt_forecaster_scaler(fc, (int)(i % M), &mu, &sd);
            x[i] = (float)mu;
        }
        gpt2rt_result pr = gpt2rt_forecaster_predict(fc, x, 1, out);
        if (pr == GPT2RT_OK) {
            for (int64_t i = 0; i < H * M; i++)
                if (!isfinite(out[i])) fz_die("predict returned OK with a value that is not finite", "");
        } else if (!strstr(gpt2rt_forecaster_last_error(fc), "window 0")) {
            fz_die("a refused forecast does not name the window", gpt2rt_forecaster_last_error(fc));
        }
        free(x);
        free(out);
    }
    gpt2rt_forecaster_free(fc);
    return 0;
}

#ifdef FUZZ_SEEDS
static unsigned char *fz_read(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = (unsigned char *)malloc(len > 0 ? (size_t)len : 1);
    *n = buf && len > 0 ? fread(buf, 1, (size_t)len, f) : 0;
    fclose(f);
    return buf;
}
#endif

#ifdef FUZZ_REPLAY
static const char *fz_replay_status(void) { return fz_last == GPT2RT_OK ? "ok" : fz_msg; }
static void fz_replay_end(void) { /* the directory the inputs were written into */
    if (!fz_dir[0]) return;
    fz_write("forecaster.json", NULL, 0);
    fz_write("model.safetensors", NULL, 0);
    rmdir(fz_dir);
}
#include "fuzz_replay.h"
#endif

#ifdef FUZZ_SEEDS
/* real saved forecasters, tiny: both heads, with and without the linear map and RevIN */
static void fz_seed(const char *out_dir, const char *name, gpt2rt_head head, int revin, int linear) {
    enum { L = 4, H = 2, M = 2, ROWS = 40 };
    const char *csv = "build/fuzz_fc_seed.csv", *dir = "build/fuzz_fc_seed";
    FILE *f = fopen(csv, "w");
    fprintf(f, "date,caf\xc3\xa9,b\n");
    for (int i = 0; i < ROWS; i++)
        fprintf(f, "2024-01-%02d %02d:00:00,%.3f,%.3f\n", 1 + i / 24, i % 24, sin(i * 0.5), 2 + cos(i * 0.3));
    fclose(f);
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.lookback = L; sd.horizon = H;
    gpt2rt_series *s;
    if (gpt2rt_series_load(&s, csv, &sd) != GPT2RT_OK) fz_die("series", gpt2rt_series_last_error(s));
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.input = GPT2RT_INPUT_PATCHES; c.head = head; c.seq_len = L; c.patch_len = 2; c.patch_stride = 2;
    c.n_channels = M; c.horizon = H; c.n_layer = 1; c.n_head = 1; c.n_embd = 4; c.batch_size = 2; c.seed = 5; c.max_seq_len = 8;
    c.revin_affine = revin; c.n_threads = 1;
    c.attn_mask = head == GPT2RT_HEAD_PATCH_DECODE ? GPT2RT_MASK_PLACEHOLDERS : GPT2RT_MASK_CAUSAL;
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, &c) != GPT2RT_OK) fz_die("create", gpt2rt_last_error(ctx));
    double W[(L + 1) * H];
    for (int i = 0; i < (L + 1) * H; i++) W[i] = 0.1 * i - 0.3;
    gpt2rt_forecaster_desc fd;
    memset(&fd, 0, sizeof fd);
    fd.series = s; fd.linear = linear ? W : NULL; fd.linear_residual = linear; fd.blend = linear ? 0.5 : 0;
    if (gpt2rt_forecaster_save(ctx, dir, &fd) != GPT2RT_OK) fz_die("save", gpt2rt_last_error(ctx));
    size_t nj, nw;
    unsigned char *j = fz_read("build/fuzz_fc_seed/forecaster.json", &nj), *w = fz_read("build/fuzz_fc_seed/model.safetensors", &nw);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    f = fopen(path, "wb");
    fwrite(j, 1, nj, f);
    fputs(FZ_SEP, f);
    fwrite(w, 1, nw, f);
    fclose(f);
    free(j); free(w);
    gpt2rt_free(ctx);
    gpt2rt_series_free(s);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: fuzz_forecaster_seeds OUT_DIR\n"); return 2; }
    fz_seed(argv[1], "regression_linear", GPT2RT_HEAD_REGRESSION, 0, 1);
    fz_seed(argv[1], "patch_decode_revin", GPT2RT_HEAD_PATCH_DECODE, 1, 0);
    return 0;
}
#endif
