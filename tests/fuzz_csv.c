/* tests/fuzz_csv.c - libFuzzer target for the ETT-format CSV reader
   (gpt2rt_series_load_mem, what gpt2rt_series_load runs on the file's bytes).

   The first input byte picks the settings, the rest is the file: lookback
   1 + (b & 7), horizon 1 + (b >> 3 & 3), every column or the target column "b"
   (bit 5), the 70/10/20 borders or the name's (bit 6: "ETTh1.csv", which needs
   14400 rows), no_scale (bit 7).

   Oracles, beyond "no crash, no sanitizer report":
   - a failure is GPT2RT_ERR_FORMAT (or OUT_OF_MEMORY), its message names the input,
     and the failed object answers nothing but its message;
   - a success describes the rows it read: channels >= 1, borders inside [0, rows],
     at least one window per split with windows = end - begin - L - H + 1, every
     value finite, every scaler std > 0, and the first and last window of each
     split can be read (the training ones in a seeded order); the calendar fields
     agree (MONTHS with a month count, a season >= 1), and dates at and far past the
     end are written or refused, never a crash.

   Fuzzing (clang, libFuzzer), one process on one core: `make fuzz-csv`, or
     clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined \
           -o build/fuzz_csv tests/fuzz_csv.c -lm
     ./build/fuzz_csv build/fuzz_csv_work tests/fuzz_corpus_csv -dict=tests/fuzz_csv.dict
   Replay without libFuzzer (what make test runs):
     cc -std=c11 -DFUZZ_REPLAY -o build/fuzz_csv_replay tests/fuzz_csv.c -lm
     ./build/fuzz_csv_replay tests/fuzz_corpus_csv
   See tests/FUZZING.md. */
#define _POSIX_C_SOURCE 200809L
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static gpt2rt_result fz_last;
static char fz_msg[512];

static void fz_die(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_csv: %s: %s\n", what, detail ? detail : "");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t b = data[0];
    gpt2rt_series_desc d;
    memset(&d, 0, sizeof d);
    d.lookback = 1 + (b & 7);
    d.horizon = 1 + (b >> 3 & 3);
    d.target = b & 32 ? "b" : NULL;
    d.borders = b & 64 ? GPT2RT_SERIES_BORDERS_AUTO : GPT2RT_SERIES_BORDERS_RATIO;
    d.no_scale = b >> 7;
    const char *name = b & 64 ? "fuzz/ETTh1.csv" : "fuzz.csv";
    /* a copy of exactly the file's bytes, so ASan sees any read past the end */
    size_t n = size - 1;
    char *buf = (char *)malloc(n ? n : 1);
    if (!buf) fz_die("malloc", "input");
    memcpy(buf, data + 1, n);
    gpt2rt_series *s = NULL;
    gpt2rt_result r = gpt2rt_series_load_mem(&s, buf, n, name, &d);
    fz_last = r;
    if (!s) fz_die("load returned no object", gpt2rt_result_string(r));
    snprintf(fz_msg, sizeof fz_msg, "%s", gpt2rt_series_last_error(s));
    gpt2rt_series_info in;
    if (r != GPT2RT_OK) {
        if (r != GPT2RT_ERR_FORMAT && r != GPT2RT_ERR_OUT_OF_MEMORY) fz_die("result", gpt2rt_result_string(r));
        if (!strstr(fz_msg, name)) fz_die("error message does not name the input", fz_msg);
        float x[1], y[1];
        if (gpt2rt_series_info_get(s, &in) != GPT2RT_ERR_STATE || gpt2rt_series_values(s) ||
            gpt2rt_series_batch(s, GPT2RT_SERIES_TRAIN, 0, 0, 0, 1, x, y) != GPT2RT_ERR_STATE)
            fz_die("a failed load still answers", fz_msg);
    } else {
        if (gpt2rt_series_info_get(s, &in) != GPT2RT_OK) fz_die("info after a load", "");
        int64_t L = d.lookback, H = d.horizon, M = in.channels;
        if (M < 1 || in.rows < 1 || (d.target && M != 1)) fz_die("channels or rows", "");
        for (int k = 0; k < 3; k++) {
            if (in.begin[k] < 0 || in.end[k] > in.rows || in.windows[k] < 1 ||
                in.windows[k] != in.end[k] - in.begin[k] - L - H + 1)
                fz_die("borders", "");
        }
        const float *v = gpt2rt_series_values(s);
        for (int64_t i = 0; i < in.rows * M; i++)
            if (!isfinite(v[i])) fz_die("a value is not finite", "");
        for (int m = 0; m < M; m++) {
            double mu = 0, sd = 0;
            if (gpt2rt_series_scaler(s, m, &mu, &sd) != GPT2RT_OK || !(sd > 0) || !isfinite(mu))
                fz_die("scaler", "");
            if (!gpt2rt_series_column(s, m)) fz_die("column name", "");
        }
        /* the calendar: a known kind with its fields, and dates past the end written or
           refused (never a crash, never a date outside years 1..9999) */
        if ((unsigned)in.date_calendar > GPT2RT_SERIES_CALENDAR_BUSINESS_DAYS || in.season < 1 ||
            (in.date_calendar == GPT2RT_SERIES_CALENDAR_MONTHS) != (in.date_months >= 1) ||
            (in.date_month_end && in.date_calendar != GPT2RT_SERIES_CALENDAR_MONTHS) ||
            (in.date_calendar == GPT2RT_SERIES_CALENDAR_NONE) != !(in.date_step > 0))
            fz_die("calendar fields", "");
        if (in.date_column >= 0) {
            int64_t rows_past[4] = {in.rows - 1, in.rows, in.rows + 1000, (int64_t)1 << 62};
            for (int k = 0; k < 4; k++) {
                char date[64];
                gpt2rt_result dr = gpt2rt_series_date(s, rows_past[k], date, sizeof date);
                if (dr == GPT2RT_OK ? !date[0] || (in.date_is_calendar && (date[0] < '0' || date[0] > '9'))
                                    : dr != GPT2RT_ERR_STATE && dr != GPT2RT_ERR_INVALID_ARGUMENT)
                    fz_die("date past the end", gpt2rt_series_last_error(s));
            }
        }
        float *x = (float *)malloc(sizeof(float) * (size_t)(L * M)), *y = (float *)malloc(sizeof(float) * (size_t)(H * M));
        for (int k = 0; k < 3; k++)
            for (int e = 0; e < 2; e++)
                if (gpt2rt_series_batch(s, (gpt2rt_series_split)k, 42, 0, e ? in.windows[k] - 1 : 0, 1, x, y) != GPT2RT_OK)
                    fz_die("batch", gpt2rt_series_last_error(s));
        free(x);
        free(y);
    }
    gpt2rt_series_free(s);
    free(buf);
    return 0;
}

#ifdef FUZZ_REPLAY
static const char *fz_replay_status(void) { return fz_last == GPT2RT_OK ? "ok" : fz_msg; }
static void fz_replay_end(void) {}
#include "fuzz_replay.h"
#endif
