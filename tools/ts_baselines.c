/* tools/ts_baselines.c - the yardsticks beside a model's test MSE (the held-out
   tables of docs/results/timeseries.md): three forecasters with no seed, on exactly the
   windows examples/timeseries scores (gpt2rt_series_load with the same reading flags:
   the same borders, scaler, columns, fill and channel independence), scored by the
   library's gpt2rt_forecaster_baselines:
     last value      every step of the horizon = the lookback's last value;
     seasonal naive  step h = the lookback's step L - P + (h mod P), P = --season N, by
                     default the dates' calendar cycle (info.season: 24 hourly, 7 daily,
                     52 weekly, 12 monthly, ...), none when the dates have none;
     linear          gpt2rt_forecaster_linear_fit: one Linear(L -> H) plus bias shared by
                     the channels on each series' RevIN-normalised lookback, fit exactly on
                     every training window, ridge chosen on validation (the test split is
                     never looked at).
   Prints the three over every channel in the scaled data's units (the papers'
   convention), one line a forecaster: "<name> val mse .. test mse .. mae .. windows N";
   --drop-last N adds the test MSE over whole batches of N windows only (a
   drop_last=True test loader's); then each channel's test MSE and MAE in the data's
   own units. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#define CLI_PROG "ts_baselines"
#include "cli.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void) {
    printf("usage: ts_baselines --data FILE.csv --horizon H [--lookback L] [--season N] [--fill MODE]\n"
           "                    [--date-column NAME] [--columns a,b,c | --target NAME] [--drop-last N]\n"
           "  scores the last value, the seasonal naive and the least-squares linear map on the\n"
           "  windows examples/timeseries scores (its borders, scaler and reading flags)\n"
           "  --data FILE.csv     the series (a header line, a date column, numeric columns)\n"
           "  --horizon H         steps forecast (required)   --lookback L  input steps (default 336)\n"
           "  --season N          the seasonal naive's period in rows, at most L (default: the dates'\n"
           "                      calendar cycle: 24 hourly, 96 every 15 minutes, 7 daily, 5 business-daily,\n"
           "                      52 weekly, 12 monthly, 4 quarterly; none for yearly, irregular or numeric dates)\n"
           "  --fill MODE         missing values (empty, NA, NaN, null): refuse (default), previous, linear\n"
           "  --date-column NAME  the date column (none: there is none, unless a column is named none;\n"
           "                      default: date, time, timestamp, datetime or year, else a first text column)\n"
           "  --columns a,b,c     these columns, in this order (not with --target)\n"
           "  --target NAME       that column alone\n"
           "  --drop-last N       also the test MSE over whole batches of N windows only (default 0: not)\n"
           "prints each forecaster's val and test MSE and test MAE over every channel, scaled (the\n"
           "papers' convention), then each channel's test MSE and MAE in the data's own units\n");
}

typedef struct opts {
    const char *data, *date_column, *columns, *target;
    int horizon, lookback, season, drop, fill;
} opts;

/* 1 parsed, 0 refused (after one line on stderr: exit 2) */
static int parse(opts *o, int argc, char **argv) {
    static const char *text[] = {"--data", "--date-column", "--columns", "--target", "--fill"};
    static const char *ints[] = {"--horizon", "--lookback", "--season", "--drop-last"};
    memset(o, 0, sizeof *o);
    o->lookback = 336;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); exit(0); }
        if (!strcmp(a, "--period")) {
            fprintf(stderr, "ts_baselines: unknown option --period: the seasonal naive's period is --season N (rows)\n");
            return 0;
        }
        int t = -1, k = -1;
        for (int j = 0; j < 5; j++) if (!strcmp(a, text[j])) t = j;
        for (int j = 0; j < 4; j++) if (!strcmp(a, ints[j])) k = j;
        if (t < 0 && k < 0) { fprintf(stderr, "ts_baselines: unknown option %s (see --help)\n", a); return 0; }
        if (i + 1 >= argc) { fprintf(stderr, "ts_baselines: %s needs a value (see --help)\n", a); return 0; }
        const char *v = argv[++i];
        if (k == 0 && !arg_int(a, v, 1, 1 << 20, &o->horizon)) return 0;
        if (k == 1 && !arg_int(a, v, 1, 1 << 20, &o->lookback)) return 0;
        if (k == 2 && !arg_int(a, v, 1, 1 << 20, &o->season)) return 0;
        if (k == 3 && !arg_int(a, v, 0, 1 << 20, &o->drop)) return 0;
        if (t >= 0 && !v[0]) { fprintf(stderr, "ts_baselines: %s '': expected a value (see --help)\n", a); return 0; }
        if (t == 0) o->data = v;
        if (t == 1) o->date_column = v;
        if (t == 2) o->columns = v;
        if (t == 3) o->target = v;
        if (t == 4) {
            o->fill = !strcmp(v, "refuse") ? GPT2RT_SERIES_FILL_REFUSE : !strcmp(v, "previous") ? GPT2RT_SERIES_FILL_PREVIOUS
                    : !strcmp(v, "linear") ? GPT2RT_SERIES_FILL_LINEAR : -1;
            if (o->fill < 0) { fprintf(stderr, "ts_baselines: --fill '%s': expected previous, linear or refuse\n", v); return 0; }
        }
    }
    if (!o->data || !o->horizon) {
        fprintf(stderr, "ts_baselines: %s is required (see --help)\n", !o->data ? "--data FILE.csv" : "--horizon H");
        return 0;
    }
    if (o->season > o->lookback) {
        fprintf(stderr, "ts_baselines: --season '%d': longer than the lookback (%d): the seasonal naive repeats the "
                "lookback's last season; set --season <= %d or --lookback >= %d\n", o->season, o->lookback, o->lookback,
                o->season);
        return 0;
    }
    return 1;
}

/* channel m's name ("?" past the channels, which never happens here) */
static const char *column(const gpt2rt_series *s, int64_t m) {
    const char *c = gpt2rt_series_column(s, (int)m);
    return c ? c : "?";
}

/* channel m of windows first .. first+n-1 of a split: x (n, L), y (n, H), scaled */
static void channel_windows(const float *v, int64_t M, int64_t m, int64_t begin, int64_t n, int64_t L, int64_t H, float *x,
                            float *y) {
    for (int64_t w = 0; w < n; w++) {
        for (int64_t t = 0; t < L; t++) x[w * L + t] = v[(begin + w + t) * M + m];
        for (int64_t t = 0; t < H; t++) y[w * H + t] = v[(begin + w + L + t) * M + m];
    }
}

int main(int argc, char **argv) {
    opts o;
    if (!parse(&o, argc, argv)) return 2;
    int64_t L = o.lookback, H = o.horizon;
    gpt2rt_series_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.lookback = o.lookback; sd.horizon = o.horizon;
    sd.date_column = o.date_column; sd.columns = o.columns; sd.target = o.target;
    sd.fill = (gpt2rt_series_fill)o.fill;
    gpt2rt_series *s;
    if (gpt2rt_series_load(&s, o.data, &sd) != GPT2RT_OK) {
        fprintf(stderr, "ts_baselines: %s\n", gpt2rt_series_last_error(s));
        gpt2rt_series_free(s);
        return 1;
    }
    gpt2rt_series_info in;
    memset(&in, 0, sizeof in);
    (void)gpt2rt_series_info_get(s, &in); /* a loaded series has one */
    /* the loader refuses a file whose training, validation or test split holds no window */
    int64_t M = in.channels, nv = in.windows[GPT2RT_SERIES_VAL], nt = in.windows[GPT2RT_SERIES_TEST];
    static const char *borders[] = {"auto", "ETTh", "ETTm", "70/10/20", "no"};
    printf("data %s: %lld rows, %lld channel%s (", o.data, (long long)in.rows, (long long)M, M > 1 ? "s" : "");
    for (int64_t m = 0; m < M && m < 16; m++) printf("%s%s", m ? ", " : "", column(s, m));
    printf("%s), %s borders; windows train %lld, validation %lld, test %lld\n", M > 16 ? ", ..." : "",
           borders[in.borders], (long long)in.windows[GPT2RT_SERIES_TRAIN], (long long)nv, (long long)nt);
    if (in.filled) printf("filled %lld missing values (--fill)\n", (long long)in.filled);
    int64_t P = o.season ? o.season : in.season > 1 ? in.season : 0;
    const char *no_season = "the dates have no calendar cycle; --season N sets one";
    if (o.season) printf("season %lld rows (--season)\n", (long long)P);
    else if (P > L) {
        printf("season %lld rows (the dates' calendar cycle) is longer than the lookback %lld: no seasonal naive "
               "(--season N <= %lld sets one)\n", (long long)P, (long long)L, (long long)L);
        no_season = "the calendar's season is longer than the lookback; --season N sets one";
        P = 0;
    } else if (P) printf("season %lld rows (the dates' calendar cycle; --season N sets another)\n", (long long)P);
    else printf("season: none (%s): no seasonal naive\n", no_season);

    /* the baselines take lookback, horizon and channels from a patch context: a tiny one
       of one channel, so each call scores one channel (the forecasters are per series) */
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.input = GPT2RT_INPUT_PATCHES; c.head = GPT2RT_HEAD_REGRESSION; c.backend = GPT2RT_BACKEND_CPU;
    c.seq_len = o.lookback; c.horizon = o.horizon; c.n_channels = 1; c.patch_len = 1; c.patch_stride = 1;
    c.max_seq_len = o.lookback + 1; c.n_layer = 1; c.n_head = 1; c.n_embd = 1; c.batch_size = 1; c.inference = 1;
    c.n_threads = 1;
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, &c) != GPT2RT_OK) {
        fprintf(stderr, "ts_baselines: a context for the baselines: %s\n", gpt2rt_last_error(ctx));
        gpt2rt_free(ctx);
        gpt2rt_series_free(s);
        return 1;
    }
    gpt2rt_forecaster_linear lm;
    const char *no_linear = NULL;
    char why[4096];
    if (gpt2rt_forecaster_linear_fit(ctx, s, &lm) != GPT2RT_OK) {
        snprintf(why, sizeof why, "%s", gpt2rt_last_error(ctx));
        no_linear = why;
    }
    /* per channel and split (0 val, 1 test, 2 test's whole drop-last batches): mse[3], mae[3] */
    int64_t whole = o.drop ? nt / o.drop * o.drop : 0;
    double *mse = malloc(sizeof(double) * (size_t)(M * 9)), *mae = malloc(sizeof(double) * (size_t)(M * 9));
    int64_t most = nv > nt ? nv : nt;
    float *x = malloc(sizeof(float) * (size_t)(most * L + 1)), *y = malloc(sizeof(float) * (size_t)(most * H + 1));
    if (!mse || !mae || !x || !y) { fprintf(stderr, "ts_baselines: out of memory for %lld windows\n", (long long)most); return 1; }
    const float *v = gpt2rt_series_values(s);
    for (int64_t m = 0; m < M; m++) {
        double *e = mse + m * 9, *a = mae + m * 9;
        for (int k = 0; k < 9; k++) e[k] = a[k] = NAN;
        for (int sp = 0; sp < 2; sp++) {
            gpt2rt_series_split split = sp ? GPT2RT_SERIES_TEST : GPT2RT_SERIES_VAL;
            int64_t n = in.windows[split];
            channel_windows(v, M, m, in.begin[split], n, L, H, x, y);
            gpt2rt_result r = gpt2rt_forecaster_baselines(ctx, x, y, n, P, no_linear ? NULL : &lm, e + 3 * sp, a + 3 * sp);
            if (r == GPT2RT_OK && sp && whole)
                r = gpt2rt_forecaster_baselines(ctx, x, y, whole, P, no_linear ? NULL : &lm, e + 6, a + 6);
            if (r != GPT2RT_OK) { fprintf(stderr, "ts_baselines: %s\n", gpt2rt_last_error(ctx)); return 1; }
        }
    }
    printf("over every channel, scaled (the papers' convention):\n");
    static const char *names[] = {"last-value", "seasonal-naive", "linear"};
    for (int k = 0; k < 3; k++) {
        if (k == 1 && !P) { printf("seasonal-naive none (%s)\n", no_season); continue; }
        if (k == 2 && no_linear) { printf("linear none (%s)\n", no_linear); continue; }
        double vm = 0, tm = 0, ta = 0, dm = 0; /* every channel has n * H values: the mean of the channels' means */
        for (int64_t m = 0; m < M; m++) {
            vm += mse[m * 9 + k]; tm += mse[m * 9 + 3 + k]; ta += mae[m * 9 + 3 + k]; dm += mse[m * 9 + 6 + k];
        }
        printf("%s val mse %.4f test mse %.4f mae %.4f windows %lld", names[k], vm / (double)M, tm / (double)M,
               ta / (double)M, (long long)nt);
        if (k == 1) printf(" (period %lld)", (long long)P);
        if (k == 2) printf(" (ridge %g, chosen on validation)", lm.ridge);
        if (whole) printf("; drop-last %lld: test mse %.4f windows %lld", (long long)o.drop, dm / (double)M, (long long)whole);
        printf("\n");
    }
    printf("each channel's test mse / mae in the data's units:\n");
    for (int64_t m = 0; m < M; m++) {
        double mu, sdv;
        gpt2rt_series_scaler(s, (int)m, &mu, &sdv);
        printf("channel %s:", column(s, m));
        for (int k = 0; k < 3; k++) {
            if ((k == 1 && !P) || (k == 2 && no_linear)) continue;
            printf("%s %s %.6g / %.6g", k ? ";" : "", names[k], mse[m * 9 + 3 + k] * sdv * sdv, mae[m * 9 + 3 + k] * sdv);
        }
        printf("\n");
    }
    free(mse); free(mae); free(x); free(y);
    gpt2rt_forecaster_linear_free(&lm);
    gpt2rt_free(ctx);
    gpt2rt_series_free(s);
    return 0;
}
