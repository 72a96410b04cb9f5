/* ETT-format CSV files (gpt2rt.h 6.3): the Time-Series-Library's split borders and
   window counts (ETTh, ETTm, 70/10/20 including sizes where Python's int(n * 0.7)
   is not n * 7 // 10), the StandardScaler against values worked out by hand on
   tests/fixtures/series_small.csv, the windows' contents, the seeded training
   order, every malformed-file error naming its line, column and numbers, and the
   line endings read (LF, CRLF, and CR alone); the shipped held-out file
   data/tmy3_greensboro.csv read through the loader and --preset cpu's model; the date
   column (by name, by content, named, none) and dates continued past the end; chosen
   columns; missing values refused or filled; empty and repeated column names refused;
   dates off the calendar refused, zones and unpadded fields kept, gpt2rt_series_date's
   buffer and year limits; calendar steps (months, quarters, years, month ends, business
   days, period labels) continued against tables from Python's datetime, the default
   season, and pandas' unnamed row index skipped. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

#define SMALL "tests/fixtures/series_small.csv"

static gpt2rt_series_desc desc(int L, int H, const char *target, gpt2rt_series_borders b) {
    gpt2rt_series_desc d;
    memset(&d, 0, sizeof d);
    d.lookback = L;
    d.horizon = H;
    d.target = target;
    d.borders = b;
    return d;
}

/* a CSV of n rows and m numeric columns (value = row + column / 10) in a malloc'd string */
static char *make_csv(int64_t n, int m, size_t *len) {
    size_t cap = (size_t)(n + 1) * (size_t)(24 + 12 * m) + 64, k = 0;
    char *s = (char *)malloc(cap);
    k += (size_t)snprintf(s + k, cap - k, "date");
    for (int j = 0; j < m; j++) k += (size_t)snprintf(s + k, cap - k, ",c%d", j);
    k += (size_t)snprintf(s + k, cap - k, "\n");
    for (int64_t i = 0; i < n; i++) {
        k += (size_t)snprintf(s + k, cap - k, "d%lld", (long long)i);
        for (int j = 0; j < m; j++) k += (size_t)snprintf(s + k, cap - k, ",%lld.%d", (long long)i, j);
        k += (size_t)snprintf(s + k, cap - k, "\n");
    }
    *len = k;
    return s;
}

/* the expected borders: b1 = {0, v1, t1}, b2 = {tr, v2, t2} */
static void check_borders(const char *label, const gpt2rt_series_info *in, gpt2rt_series_borders kind, int64_t L,
                          int64_t H, int64_t tr, int64_t v2, int64_t t2) {
    int64_t b1[3] = {0, tr - L, v2 - L}, b2[3] = {tr, v2, t2};
    CHECK(in->borders == kind, "%s: borders %d, expected %d", label, (int)in->borders, (int)kind);
    for (int k = 0; k < 3; k++) {
        CHECK(in->begin[k] == b1[k] && in->end[k] == b2[k], "%s: split %d is [%lld, %lld), expected [%lld, %lld)", label,
              k, (long long)in->begin[k], (long long)in->end[k], (long long)b1[k], (long long)b2[k]);
        int64_t w = b2[k] - b1[k] - L - H + 1;
        CHECK(in->windows[k] == w, "%s: split %d has %lld windows, expected %lld", label, k, (long long)in->windows[k],
              (long long)w);
    }
}

static void test_borders(void) {
    size_t len;
    gpt2rt_series *s;
    gpt2rt_series_info in = {0};
    gpt2rt_series_desc d = desc(336, 96, NULL, GPT2RT_SERIES_BORDERS_AUTO);
    /* ETTh: 12/4/4 months of 30 days of hours; the extra rows of the real files
       (ETTh2 has 17420) are not used */
    char *csv = make_csv(14500, 2, &len);
    CHECK(gpt2rt_series_load_mem(&s, csv, len, "some/dir/ETTh1.csv", &d) == GPT2RT_OK, "ETTh: %s",
          gpt2rt_series_last_error(s));
    gpt2rt_series_info_get(s, &in);
    check_borders("ETTh", &in, GPT2RT_SERIES_BORDERS_ETTH, 336, 96, 8640, 11520, 14400);
    /* the windows the Time-Series-Library reports for ETTh, L 336, H 96 */
    CHECK(in.windows[0] == 8209 && in.windows[1] == 2785 && in.windows[2] == 2785, "ETTh windows %lld %lld %lld, "
          "expected 8209 2785 2785", (long long)in.windows[0], (long long)in.windows[1], (long long)in.windows[2]);
    gpt2rt_series_free(s);
    /* too short for the ETTh borders: the message gives both counts */
    free(csv);
    csv = make_csv(14399, 2, &len);
    CHECK(gpt2rt_series_load_mem(&s, csv, len, "ETTh2.csv", &d) == GPT2RT_ERR_FORMAT &&
              strstr(gpt2rt_series_last_error(s), "14399 data rows") && strstr(gpt2rt_series_last_error(s), "need 14400"),
          "short ETTh: %s", gpt2rt_series_last_error(s));
    gpt2rt_series_free(s);
    free(csv);
    /* ETTm: every border times 4 */
    csv = make_csv(57600, 1, &len);
    d = desc(512, 720, NULL, GPT2RT_SERIES_BORDERS_AUTO);
    CHECK(gpt2rt_series_load_mem(&s, csv, len, "ETTm2.csv", &d) == GPT2RT_OK, "ETTm: %s", gpt2rt_series_last_error(s));
    gpt2rt_series_info_get(s, &in);
    check_borders("ETTm", &in, GPT2RT_SERIES_BORDERS_ETTM, 512, 720, 34560, 46080, 57600);
    gpt2rt_series_free(s);
    /* the same file named otherwise: 70/10/20 */
    d = desc(96, 96, NULL, GPT2RT_SERIES_BORDERS_AUTO);
    CHECK(gpt2rt_series_load_mem(&s, csv, len, "weather.csv", &d) == GPT2RT_OK, "ratio: %s", gpt2rt_series_last_error(s));
    gpt2rt_series_info_get(s, &in);
    check_borders("70/10/20 of 57600", &in, GPT2RT_SERIES_BORDERS_RATIO, 96, 96, 40320, 46080, 57600);
    gpt2rt_series_free(s);
    free(csv);
    /* sizes where Python's int(n * 0.7) and int(n * 0.2) (doubles, truncated) differ
       from n * 7 // 10: 90 * 0.7 = 62.99999999999999 -> 62, 700 * 0.7 -> 489 */
    struct { int64_t n, tr, te; } cases[] = {{90, 62, 18}, {700, 489, 140}, {1000, 700, 200}, {17420, 12194, 3484}};
    for (int i = 0; i < 4; i++) {
        csv = make_csv(cases[i].n, 1, &len);
        d = desc(2, 1, NULL, GPT2RT_SERIES_BORDERS_RATIO);
        char label[64];
        snprintf(label, sizeof label, "70/10/20 of %lld", (long long)cases[i].n);
        CHECK(gpt2rt_series_load_mem(&s, csv, len, "ETTh1.csv", &d) == GPT2RT_OK, "%s: %s", label,
              gpt2rt_series_last_error(s));
        gpt2rt_series_info_get(s, &in);
        check_borders(label, &in, GPT2RT_SERIES_BORDERS_RATIO, 2, 1, cases[i].tr, cases[i].n - cases[i].te, cases[i].n);
        gpt2rt_series_free(s);
        free(csv);
    }
}

/* series_small.csv: 30 rows, a = t, b = 5, c = 2t + 1 for row t. 70/10/20 of 30:
   train [0, 21), so the scaler sees t = 0..20: a has mean 10 and population variance
   2 (1^2 + ... + 10^2) / 21 = 770 / 21 = 110 / 3; c = 2a + 1 has mean 21 and twice
   a's std; b is constant, so sklearn keeps its scale at 1 (mean 5). */
static void test_scaler_and_windows(void) {
    gpt2rt_series *s;
    gpt2rt_series_info in = {0};
    gpt2rt_series_desc d = desc(2, 1, NULL, GPT2RT_SERIES_BORDERS_AUTO);
    CHECK(gpt2rt_series_load(&s, SMALL, &d) == GPT2RT_OK, "load: %s", gpt2rt_series_last_error(s));
    CHECK(gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.rows == 30 && in.channels == 3, "rows %lld channels %d",
          (long long)in.rows, in.channels);
    check_borders("small", &in, GPT2RT_SERIES_BORDERS_RATIO, 2, 1, 21, 24, 30);
    const double sa = sqrt(110.0 / 3.0), want_mean[3] = {10, 5, 21}, want_std[3] = {sa, 1, 2 * sa};
    const char *names[3] = {"a", "b", "c"};
    for (int m = 0; m < 3; m++) {
        double mu = -1, sd = -1;
        CHECK(gpt2rt_series_scaler(s, m, &mu, &sd) == GPT2RT_OK, "scaler %d", m);
        CHECK(fabs(mu - want_mean[m]) < 1e-12 && fabs(sd - want_std[m]) < 1e-12, "column %s: mean %.15g std %.15g, "
              "expected %.15g %.15g", names[m], mu, sd, want_mean[m], want_std[m]);
        CHECK(gpt2rt_series_column(s, m) && strcmp(gpt2rt_series_column(s, m), names[m]) == 0, "column %d name", m);
    }
    CHECK(gpt2rt_series_column(s, 3) == NULL && gpt2rt_series_column(s, -1) == NULL, "column out of range");
    { /* the last error is the latest call's: a refused call, then one that succeeds, leaves "" */
        double mu, sd;
        CHECK(gpt2rt_series_scaler(s, 3, &mu, &sd) == GPT2RT_ERR_INVALID_ARGUMENT && *gpt2rt_series_last_error(s),
              "scaler of channel 3 of 3 is refused with a message");
        CHECK(gpt2rt_series_scaler(s, 0, &mu, &sd) == GPT2RT_OK && !*gpt2rt_series_last_error(s),
              "after a success the last error is \"\", not \"%s\"", gpt2rt_series_last_error(s));
    }
    /* the scaled values of every row, test rows included (fit on train only) */
    const float *v = gpt2rt_series_values(s);
    double worst = 0;
    for (int t = 0; t < 30; t++) {
        double want[3] = {(t - 10) / sa, 0.0, (2 * t + 1 - 21) / (2 * sa)};
        for (int m = 0; m < 3; m++) worst = fmax(worst, fabs(v[t * 3 + m] - want[m]));
    }
    CHECK(worst < 1e-6, "scaled values off by %g", worst);
    /* validation and test windows in time order: window w of a split starts at row
       begin + w, y is the H rows after the L of x */
    float x[2 * 2 * 3], y[2 * 1 * 3];
    CHECK(gpt2rt_series_batch(s, GPT2RT_SERIES_TEST, 0, 0, 4, 2, x, y) == GPT2RT_OK, "test batch: %s",
          gpt2rt_series_last_error(s));
    CHECK(x[0] == v[(22 + 4) * 3] && x[3 * 2 + 2] == v[(22 + 5) * 3 + 2] && y[0] == v[(22 + 4 + 2) * 3] &&
              y[3 + 1] == v[(22 + 5 + 2) * 3 + 1], "test windows 4 and 5 are not rows 26.. and 27..");
    CHECK(gpt2rt_series_batch(s, GPT2RT_SERIES_TEST, 0, 0, 5, 2, x, y) == GPT2RT_ERR_INVALID_ARGUMENT &&
              strstr(gpt2rt_series_last_error(s), "first = 5, B = 2") &&
              strstr(gpt2rt_series_last_error(s), "test split's [0, 6)"),
          "a batch past the split: %s", gpt2rt_series_last_error(s));
    /* training order: each epoch visits all 19 windows once; the same (seed, epoch)
       gives the same order, another seed or epoch another */
    int order[3][19];
    uint64_t seeds[3] = {7, 7, 8};
    int64_t epochs[3] = {0, 1, 0};
    for (int k = 0; k < 3; k++) {
        int seen[19] = {0};
        for (int w = 0; w < 19; w++) {
            float xx[2 * 3], yy[3];
            gpt2rt_series_batch(s, GPT2RT_SERIES_TRAIN, seeds[k], epochs[k], w, 1, xx, yy);
            int start = (int)lround(xx[0] * sa + 10); /* a = t recovers the row */
            order[k][w] = start;
            if (start >= 0 && start < 19) seen[start]++;
        }
        int all = 1;
        for (int w = 0; w < 19; w++) all &= seen[w] == 1;
        CHECK(all, "seed %llu epoch %lld does not visit every training window once", (unsigned long long)seeds[k],
              (long long)epochs[k]);
    }
    float xa[4 * 2 * 3], ya[4 * 3], xb[4 * 2 * 3], yb[4 * 3];
    gpt2rt_series_batch(s, GPT2RT_SERIES_TRAIN, 7, 0, 3, 4, xa, ya);
    gpt2rt_series_batch(s, GPT2RT_SERIES_TRAIN, 7, 0, 3, 4, xb, yb);
    CHECK(memcmp(xa, xb, sizeof xa) == 0 && memcmp(ya, yb, sizeof ya) == 0, "the same batch twice differs");
    CHECK(memcmp(order[0], order[1], sizeof order[0]) != 0 && memcmp(order[0], order[2], sizeof order[0]) != 0,
          "another epoch or seed gives the same training order");
    gpt2rt_series_free(s);

    /* one target column: M = 1, its own scaler; no_scale keeps the raw values */
    d = desc(2, 1, "c", GPT2RT_SERIES_BORDERS_AUTO);
    d.no_scale = 1;
    CHECK(gpt2rt_series_load(&s, SMALL, &d) == GPT2RT_OK, "target c: %s", gpt2rt_series_last_error(s));
    gpt2rt_series_info_get(s, &in);
    v = gpt2rt_series_values(s);
    CHECK(in.channels == 1 && v[29] == 59.0f && strcmp(gpt2rt_series_column(s, 0), "c") == 0,
          "target c unscaled: channels %d, row 29 = %g", in.channels, (double)v[29]);
    gpt2rt_series_free(s);
}

/* a malformed file: the load fails with result r and a message holding every
   fragment; the failed object answers nothing but its message */
static void bad(const char *label, const char *csv, gpt2rt_series_desc d, gpt2rt_result r, const char *f1,
                const char *f2, const char *f3) {
    gpt2rt_series *s;
    gpt2rt_result got = gpt2rt_series_load_mem(&s, csv, strlen(csv), "bad.csv", &d);
    const char *e = gpt2rt_series_last_error(s);
    CHECK(got == r && strstr(e, "bad.csv") && (!f1 || strstr(e, f1)) && (!f2 || strstr(e, f2)) && (!f3 || strstr(e, f3)),
          "%s: %s: \"%s\" (want %s, \"%s\", \"%s\", \"%s\")", label, gpt2rt_result_string(got), e, gpt2rt_result_string(r),
          f1 ? f1 : "", f2 ? f2 : "", f3 ? f3 : "");
    gpt2rt_series_info in = {0};
    float x[4], y[4];
    CHECK(gpt2rt_series_info_get(s, &in) == GPT2RT_ERR_STATE && gpt2rt_series_values(s) == NULL &&
              gpt2rt_series_batch(s, GPT2RT_SERIES_TRAIN, 0, 0, 0, 1, x, y) == GPT2RT_ERR_STATE,
          "%s: the failed object still answers", label);
    gpt2rt_series_free(s);
}

static void test_errors(void) {
    gpt2rt_series_desc d = desc(2, 1, NULL, GPT2RT_SERIES_BORDERS_RATIO);
    const char *ok10 = "date,a,b\n1,1,2\n2,2,3\n3,3,4\n4,4,5\n5,5,6\n6,6,7\n7,7,8\n8,8,9\n9,9,10\n10,10,11\n";
    bad("empty file", "", d, GPT2RT_ERR_FORMAT, "line 1 is empty", "the file is empty", NULL);
    bad("header only", "date,a,b\n", d, GPT2RT_ERR_FORMAT, "no data rows", NULL, NULL);
    bad("one column", "date\n1\n2\n", d, GPT2RT_ERR_FORMAT, "header (line 1) has 1 column", NULL, NULL);
    bad("ragged row", "date,a,b\n1,1,2\n2,2\n", d, GPT2RT_ERR_FORMAT, "line 3 has 2 fields", "has 3", NULL);
    bad("extra field", "date,a,b\n1,1,2\n2,2,3,4\n", d, GPT2RT_ERR_FORMAT, "line 3 has 4 fields", NULL, NULL);
    bad("not a number", "date,a,b\n1,1,2\n2,2,x7\n", d, GPT2RT_ERR_FORMAT, "line 3, column 3 (\"b\")", "\"x7\"",
        "not a finite number");
    bad("trailing junk", "date,a,b\n1,1,2e\n", d, GPT2RT_ERR_FORMAT, "line 2, column 3", "\"2e\"", NULL);
    bad("empty field", "date,a,b\n1,,2\n", d, GPT2RT_ERR_FORMAT, "line 2, column 2 (\"a\")", "empty field", NULL);
    bad("nan", "date,a,b\n1,1,2\n2,nan,3\n", d, GPT2RT_ERR_FORMAT, "line 3, column 2", "\"nan\"", NULL);
    bad("inf", "date,a,b\n1,1,2\n2,1e999,3\n", d, GPT2RT_ERR_FORMAT, "line 3, column 2", "\"1e999\"", NULL);
    bad("beyond float", "date,a,b\n1,1,2\n2,1e39,3\n", d, GPT2RT_ERR_FORMAT, "line 3, column 2", "\"1e39\"",
        "fits a float");
    /* training rows 0 and 1e-14 (std 5e-15), then 3e38: (3e38 - 5e-15) / 5e-15 overflows a float */
    bad("scaled beyond float", "date,a\n1,0\n2,1e-14\n3,0\n4,1e-14\n5,0\n6,1e-14\n7,0\n8,0\n9,3e38\n10,0\n",
        desc(1, 1, NULL, GPT2RT_SERIES_BORDERS_RATIO), GPT2RT_ERR_FORMAT, "line 10, column \"a\"", "does not fit a float",
        NULL);
    bad("blank line inside", "date,a,b\n1,1,2\n\n2,2,3\n", d, GPT2RT_ERR_FORMAT, "line 3 is empty", NULL, NULL);
    /* 10 rows, 70/10/20: train [0, 7), val [5, 8), test [6, 10); L + H = 3 + 2 = 5
       does not fit the 3 rows of validation (lookback included) */
    bad("too few rows", ok10, desc(3, 2, NULL, GPT2RT_SERIES_BORDERS_RATIO), GPT2RT_ERR_FORMAT,
        "10 data rows are too few", "validation split ends at row 8", "3 + 2 = 5");
    bad("too few rows for training", "date,a\n1,1\n2,2\n", desc(336, 96, NULL, GPT2RT_SERIES_BORDERS_RATIO),
        GPT2RT_ERR_FORMAT, "2 data rows are too few", "training split", "336 + 96 = 432");
    bad("missing target", ok10, desc(2, 1, "OT", GPT2RT_SERIES_BORDERS_RATIO), GPT2RT_ERR_FORMAT,
        "no column named \"OT\"", "\"a\", \"b\"", NULL);
    bad("target is the date", ok10, desc(2, 1, "date", GPT2RT_SERIES_BORDERS_RATIO), GPT2RT_ERR_FORMAT,
        "no column named \"date\"", NULL, NULL);
    bad("lookback 0", ok10, desc(0, 1, NULL, GPT2RT_SERIES_BORDERS_RATIO), GPT2RT_ERR_INVALID_ARGUMENT,
        "lookback = 0", NULL, NULL);
    bad("ETTm borders on 10 rows", ok10, desc(2, 1, NULL, GPT2RT_SERIES_BORDERS_ETTM), GPT2RT_ERR_FORMAT,
        "10 data rows", "ETTm borders need 57600", NULL);
    /* a bad number in a column the target leaves out is still an error: the file is wrong */
    bad("bad other column", "date,a,b\n1,1,2\n2,zz,3\n", desc(1, 1, "b", GPT2RT_SERIES_BORDERS_RATIO),
        GPT2RT_ERR_FORMAT, "line 3, column 2 (\"a\")", NULL, NULL);
    /* the file itself */
    gpt2rt_series *s;
    CHECK(gpt2rt_series_load(&s, "tests/fixtures/no_such_file.csv", &d) == GPT2RT_ERR_IO &&
              strstr(gpt2rt_series_last_error(s), "no_such_file.csv"), "missing file: %s", gpt2rt_series_last_error(s));
    gpt2rt_series_free(s);
    /* what is accepted: CRLF, a byte-order mark, spaces around fields, trailing
       blank lines, exponents */
    const char *fine = "\xEF\xBB\xBF" "date , a,b\r\n1, 1 ,2e0\r\n2,2,3\r\n3,3,4\r\n4,4,5\r\n5,5,6\r\n6,6,7\r\n7,7,8\r\n"
                       "8,8,9\r\n9,9,10\r\n10,10,1.1E1\r\n\r\n\n";
    gpt2rt_series_desc dn = desc(1, 1, NULL, GPT2RT_SERIES_BORDERS_RATIO);
    dn.no_scale = 1;
    CHECK(gpt2rt_series_load_mem(&s, fine, strlen(fine), "fine.csv", &dn) == GPT2RT_OK, "accepted forms: %s",
          gpt2rt_series_last_error(s));
    gpt2rt_series_info in = {0};
    if (gpt2rt_series_info_get(s, &in) == GPT2RT_OK)
        CHECK(in.rows == 10 && gpt2rt_series_values(s)[19] == 11.0f && strcmp(gpt2rt_series_column(s, 0), "a") == 0,
              "accepted forms: rows %lld, last value %g", (long long)in.rows, (double)gpt2rt_series_values(s)[19]);
    gpt2rt_series_free(s);
    /* lines ending in CR alone (old Mac programs): before, the whole file was one
       header line and the load said "no data rows after the header (line 1)" */
    for (int mixed = 0; mixed < 2; mixed++) {
        const char *cr = mixed ? "date,a,b\r1,1,2\n2,2,3\r\n3,3,4\r4,4,5\r5,5,6\r6,6,7\r7,7,8\r8,8,9\r9,9,10\r10,10,11\r\r"
                               : "date,a,b\r1,1,2\r2,2,3\r3,3,4\r4,4,5\r5,5,6\r6,6,7\r7,7,8\r8,8,9\r9,9,10\r10,10,11\r";
        gpt2rt_result r = gpt2rt_series_load_mem(&s, cr, strlen(cr), "old_mac.csv", &dn);
        const float *v = gpt2rt_series_values(s);
        CHECK(r == GPT2RT_OK && gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.rows == 10 && in.channels == 2 &&
                  v[0] == 1.0f && v[1] == 2.0f && v[18] == 10.0f && v[19] == 11.0f &&
                  strcmp(gpt2rt_series_column(s, 1), "b") == 0,
              "%s line endings: %s: %s", mixed ? "mixed CR, LF, CRLF" : "CR-only", gpt2rt_result_string(r),
              gpt2rt_series_last_error(s));
        gpt2rt_series_free(s);
    }
    /* a CR-only file's errors still count lines */
    bad("CR-only, bad number", "date,a,b\r1,1,2\r2,2,x\r", d, GPT2RT_ERR_FORMAT, "line 3, column 3", "\"x\"", NULL);
    bad("CR-only, blank line inside", "date,a,b\r1,1,2\r\r2,2,3\r", d, GPT2RT_ERR_FORMAT, "line 3 is empty", NULL, NULL);
}

/* the held-out dataset (data/tmy3_greensboro.csv): the file as shipped (8760
   rows, 8 named channels, 70/10/20 by name), Python's int(8760 * 0.7) = 6132 and
   int(8760 * 0.2) = 1752 as the borders, the scaler against this test's own read of the
   file (strtod in double, every training row), a test window's rows, and --preset cpu's
   model (examples/timeseries.c: lookback 336, patch 16 stride 16, 1 layer, 2 heads, width
   16, attention + MLP frozen, head dropout 0.3, batch 16) trained a few steps on its
   training windows and scored on a few test windows, so the loader path stays exercised */
#define HELDOUT "data/tmy3_greensboro.csv"
static void test_heldout(void) {
    enum { L = 336, H = 96, M = 8, ROWS = 8760, TRAIN = 6132, TEST = 1752, BW = 16 };
    gpt2rt_series_desc d = desc(L, H, NULL, GPT2RT_SERIES_BORDERS_AUTO);
    gpt2rt_series *s;
    if (gpt2rt_series_load(&s, HELDOUT, &d) != GPT2RT_OK) {
        CHECK(0, "%s: %s", HELDOUT, gpt2rt_series_last_error(s));
        gpt2rt_series_free(s);
        return;
    }
    gpt2rt_series_info in = {0};
    memset(&in, 0, sizeof in);
    CHECK(gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.rows == ROWS && in.channels == M, "%s: %lld rows, %d "
          "channels; shipped: %d, %d", HELDOUT, (long long)in.rows, in.channels, ROWS, M);
    check_borders(HELDOUT, &in, GPT2RT_SERIES_BORDERS_RATIO, L, H, TRAIN, ROWS - TEST, ROWS);
    static const char *names[M] = {"ghi", "dni", "dhi", "temp", "dew_point", "rel_hum", "pressure", "wind_speed"};
    int named = 0;
    for (int m = 0; m < M; m++) named += gpt2rt_series_column(s, m) && !strcmp(gpt2rt_series_column(s, m), names[m]);
    CHECK(named == M, "%s: %d of the %d column names as shipped", HELDOUT, named, M);
    /* our own read: every value, in double */
    double *raw = (double *)malloc(sizeof(double) * ROWS * M);
    FILE *f = fopen(HELDOUT, "r");
    char line[512];
    int64_t r = -1;
    while (f && fgets(line, sizeof line, f)) {
        if (r >= 0 && r < ROWS) {
            char *p = strchr(line, ',');
            for (int m = 0; m < M && p; m++) { raw[r * M + m] = strtod(p + 1, &p); }
        }
        r++;
    }
    if (f) fclose(f);
    CHECK(r == ROWS, "%s: read %lld data rows here", HELDOUT, (long long)r);
    double worst = 0;
    for (int m = 0; m < M; m++) {
        double mu = 0, var = 0, gm = 0, gs = 0;
        for (int64_t t = 0; t < TRAIN; t++) mu += raw[t * M + m];
        mu /= TRAIN;
        for (int64_t t = 0; t < TRAIN; t++) var += (raw[t * M + m] - mu) * (raw[t * M + m] - mu);
        double sd = sqrt(var / TRAIN);
        gpt2rt_series_scaler(s, m, &gm, &gs);
        /* the same sums in the same order: bitwise unless the loader summed otherwise */
        double e = fabs(gm - mu) / (sd > 0 ? sd : 1) + fabs(gs - sd) / (sd > 0 ? sd : 1);
        if (e > worst) worst = e;
    }
    CHECK(worst < 1e-12, "%s: the scaler differs from this test's mean and population std by %.3g (in stds)", HELDOUT,
          worst);
    /* test window 7 reads rows [TRAIN + 876 - L + 7, ... + L + H): (raw - mean) / std, to float once */
    float *x = (float *)malloc(sizeof(float) * BW * L * M), *y = (float *)malloc(sizeof(float) * BW * H * M);
    CHECK(gpt2rt_series_batch(s, GPT2RT_SERIES_TEST, 0, 0, 7, 1, x, y) == GPT2RT_OK, "test batch: %s",
          gpt2rt_series_last_error(s));
    int64_t row0 = ROWS - TEST - L + 7;
    int off = 0;
    for (int64_t t = 0; t < L + H; t++)
        for (int m = 0; m < M; m++) {
            double mu = 0, sd = 1;
            gpt2rt_series_scaler(s, m, &mu, &sd);
            float want = (float)((raw[(row0 + t) * M + m] - mu) / sd), got = t < L ? x[t * M + m] : y[(t - L) * M + m];
            off += memcmp(&want, &got, sizeof got) != 0;
        }
    CHECK(off == 0, "%s: test window 7: %d of its %d values are not the scaled rows %lld..", HELDOUT, off, (L + H) * M,
          (long long)row0);
    /* --preset cpu's model (its shape; lr 1e-3, the model alone as the preset was before the
       linear map, which is examples/timeseries.c's): 5 steps on training windows, then 2 batches
       of test windows */
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.input = GPT2RT_INPUT_PATCHES; c.head = GPT2RT_HEAD_REGRESSION;
    c.seq_len = L; c.patch_len = 16; c.patch_stride = 16; c.n_channels = M; c.horizon = H;
    c.n_layer = 1; c.n_head = 2; c.n_embd = 16; c.batch_size = BW; c.frozen = GPT2RT_GROUP_ATTENTION | GPT2RT_GROUP_MLP;
    c.head_dropout = 0.3f; c.lr = 1e-3f; c.grad_clip = 1.0f; c.seed = 1; c.n_threads = 1;
    gpt2rt_ctx *ctx;
    if (gpt2rt_create(&ctx, &c) != GPT2RT_OK) { CHECK(0, "create: %s", gpt2rt_last_error(ctx)); gpt2rt_free(ctx); }
    else {
        float first = 0, last = 0;
        for (int k = 0; k < 5; k++) {
            gpt2rt_step_stats st;
            CHECK(gpt2rt_series_batch(s, GPT2RT_SERIES_TRAIN, 1, 0, (int64_t)k * BW, BW, x, y) == GPT2RT_OK, "train batch");
            CHECK_OK(ctx, gpt2rt_step_series(ctx, x, y, &st));
            if (k == 0) first = st.loss;
            last = st.loss;
        }
        gpt2rt_mode_set(ctx, GPT2RT_MODE_EVAL);
        float *pred = (float *)malloc(sizeof(float) * BW * H * M);
        double se = 0, sl = 0;
        for (int k = 0; k < 2; k++) {
            float loss;
            CHECK(gpt2rt_series_batch(s, GPT2RT_SERIES_TEST, 0, 0, (int64_t)k * BW, BW, x, y) == GPT2RT_OK, "test batch");
            CHECK_OK(ctx, gpt2rt_forward_series(ctx, x, y, &loss));
            CHECK_OK(ctx, gpt2rt_predictions(ctx, pred, BW * H * M));
            double e = 0;
            for (int i = 0; i < BW * H * M; i++) e += ((double)pred[i] - y[i]) * ((double)pred[i] - y[i]);
            se += e / (BW * H * M);
            sl += loss;
        }
        /* the loss is the predictions' MSE (summed in double, rounded to float once: 1e-6);
           the scaled data's MSE of a forecaster that learned anything is well below 2
           (last value scores 1.3 over every test window, tools/ts_baselines) */
        CHECK(fabs(se - sl) <= 1e-6 * se && se == se && se < 2.0 && first == first && last == last,
              "%s, --preset cpu's model: 5 steps (loss %.4f -> %.4f), test MSE of 2 batches %.4f, the losses' %.4f",
              HELDOUT, (double)first, (double)last, se / 2, sl / 2);
        printf("    %s: %lld rows x %d, 70/10/20 windows %lld / %lld / %lld; --preset cpu's model, 5 steps (%.4f -> "
               "%.4f), 2 test batches MSE %.4f\n", HELDOUT, (long long)in.rows, in.channels, (long long)in.windows[0],
               (long long)in.windows[1], (long long)in.windows[2], (double)first, (double)last, se / 2);
        free(pred);
        gpt2rt_free(ctx);
    }
    free(raw); free(x); free(y);
    gpt2rt_series_free(s);
}

/* a CSV of n rows: a header, then row i's line from row() */
static char *rows_csv(const char *header, int n, void (*row)(char *line, size_t cap, int i)) {
    size_t cap = strlen(header) + 2 + (size_t)n * 96, k = 0;
    char *s = (char *)malloc(cap), line[96];
    k += (size_t)snprintf(s + k, cap - k, "%s\n", header);
    for (int i = 0; i < n; i++) {
        row(line, sizeof line, i);
        k += (size_t)snprintf(s + k, cap - k, "%s\n", line);
    }
    return s;
}
static void row_numbers(char *l, size_t cap, int i) { snprintf(l, cap, "%d,%d.5,%d", i, 10 + i, 100 - i); }
static void row_hourly(char *l, size_t cap, int i) { /* from 2016-12-31 14:00 on, hourly */
    int h = 14 + i;
    snprintf(l, cap, "%s %02d:00:00,%d,%d", h < 24 ? "2016-12-31" : "2017-01-01", h % 24, i, 2 * i);
}
static void row_daily(char *l, size_t cap, int i) { /* from 2020-02-20 on, daily, 'when' after the values */
    snprintf(l, cap, "%d,2020/%s/%02d", i, 20 + i <= 29 ? "02" : "03", 20 + i <= 29 ? 20 + i : 20 + i - 29);
}
static void row_minutes(char *l, size_t cap, int i) { snprintf(l, cap, "x%d,2021-06-01T10:%02d,%d", i, 15 * (i % 4), i); }

/* the date column: found by name (anywhere) or by content (a text first column), or
   none, and named by desc.date_column; a file without one keeps every numeric column,
   its first included; dates continue past the last row */
static void test_date_column(void) {
    gpt2rt_series *s;
    gpt2rt_series_info in = {0};
    char buf[96];
    gpt2rt_series_desc d = desc(2, 1, NULL, GPT2RT_SERIES_BORDERS_RATIO);
    d.no_scale = 1;
    /* no date column: three numeric columns stay three channels */
    char *csv = rows_csv("a,b,c", 12, row_numbers);
    CHECK(gpt2rt_series_load_mem(&s, csv, strlen(csv), "sensor.csv", &d) == GPT2RT_OK && gpt2rt_series_info_get(s, &in) ==
              GPT2RT_OK && in.channels == 3 && in.date_column == -1 && !strcmp(gpt2rt_series_column(s, 0), "a") &&
              gpt2rt_series_values(s)[3] == 1.0f && gpt2rt_series_values(s)[5] == 99.0f &&
              gpt2rt_series_date_column(s) == NULL && gpt2rt_series_date(s, 0, buf, sizeof buf) == GPT2RT_ERR_STATE,
          "no date column: 3 channels (a first), values kept: %s", gpt2rt_series_last_error(s));
    gpt2rt_series_free(s);
    /* the same file with date_column "a": a numeric date, step 1, continued */
    d.date_column = "a";
    CHECK(gpt2rt_series_load_mem(&s, csv, strlen(csv), "sensor.csv", &d) == GPT2RT_OK && gpt2rt_series_info_get(s, &in) ==
              GPT2RT_OK && in.channels == 2 && in.date_column == 0 && in.date_step == 1.0 &&
              in.date_is_calendar == 0 && !strcmp(gpt2rt_series_column(s, 0), "b") && gpt2rt_series_date(s, 13, buf, sizeof buf) == GPT2RT_OK &&
              !strcmp(buf, "13"), "date_column \"a\" (numbers): 2 channels, step %g, row 13's date %s: %s", in.date_step,
          buf, gpt2rt_series_last_error(s));
    gpt2rt_series_free(s);
    d.date_column = "zz";
    bad("date_column not in the header", csv, d, GPT2RT_ERR_FORMAT, "no column named \"zz\" (the date column)",
        "\"a\", \"b\", \"c\"", NULL);
    free(csv);
    /* hourly dates by name, across a year's end: step 3600 s, continued in the file's form */
    d.date_column = NULL;
    csv = rows_csv("date,x,y", 12, row_hourly);
    CHECK(gpt2rt_series_load_mem(&s, csv, strlen(csv), "hourly.csv", &d) == GPT2RT_OK && gpt2rt_series_info_get(s, &in) ==
              GPT2RT_OK && in.channels == 2 && in.date_column == 0 && in.date_step == 3600.0 &&
              in.date_is_calendar == 1 && !strcmp(gpt2rt_series_date_column(s), "date") && gpt2rt_series_date(s, 0, buf, sizeof buf) == GPT2RT_OK &&
              !strcmp(buf, "2016-12-31 14:00:00"), "hourly: step %g, row 0 %s: %s", in.date_step, buf,
          gpt2rt_series_last_error(s));
    CHECK(gpt2rt_series_date(s, 12, buf, sizeof buf) == GPT2RT_OK && !strcmp(buf, "2017-01-01 02:00:00"),
          "hourly: the row after the last is %s, want 2017-01-01 02:00:00", buf);
    CHECK(gpt2rt_series_date(s, 13 + 24 * 59, buf, sizeof buf) == GPT2RT_OK && !strcmp(buf, "2017-03-01 03:00:00"),
          "hourly: 59 days and 2 hours past the last row is %s, want 2017-03-01 03:00:00", buf);
    gpt2rt_series_free(s);
    /* a text first column that is not the date: "none" refuses it by line and column */
    d.date_column = "none";
    bad("date_column none, text first column", csv, d, GPT2RT_ERR_FORMAT, "line 2, column 1 (\"date\")",
        "\"2016-12-31 14:00:00\"", "not a finite number");
    free(csv);
    /* a date by content in the first column, whatever its name */
    d.date_column = NULL;
    csv = rows_csv("when,x,y", 12, row_hourly);
    CHECK(gpt2rt_series_load_mem(&s, csv, strlen(csv), "when.csv", &d) == GPT2RT_OK && gpt2rt_series_info_get(s, &in) ==
              GPT2RT_OK && in.channels == 2 && in.date_column == 0 && in.date_step == 3600.0,
          "a text first column is the date: %s", gpt2rt_series_last_error(s));
    gpt2rt_series_free(s);
    free(csv);
    /* daily 'YYYY/MM/DD' in the last column, named Date (any case), across a leap day */
    csv = rows_csv("v,Date", 12, row_daily);
    CHECK(gpt2rt_series_load_mem(&s, csv, strlen(csv), "daily.csv", &d) == GPT2RT_OK && gpt2rt_series_info_get(s, &in) ==
              GPT2RT_OK && in.channels == 1 && in.date_column == 1 && in.date_step == 86400.0 &&
              gpt2rt_series_date(s, 9, buf, sizeof buf) == GPT2RT_OK && !strcmp(buf, "2020/02/29") &&
              gpt2rt_series_date(s, 12, buf + 20, 20) == GPT2RT_OK && !strcmp(buf + 20, "2020/03/03"),
          "daily: step %g, row 9 %s, row 12 %s: %s", in.date_step, buf, buf + 20, gpt2rt_series_last_error(s));
    gpt2rt_series_free(s);
    free(csv);
    /* 'T' and minutes, 15 minutes apart, the date in the middle; a text column first is data: refused */
    csv = rows_csv("id,time,v", 12, row_minutes);
    bad("a text column beside the date", csv, d, GPT2RT_ERR_FORMAT, "line 2, column 1 (\"id\")", "\"x0\"", NULL);
    d.columns = "v";
    bad("a text column not chosen is still checked", csv, d, GPT2RT_ERR_FORMAT, "line 2, column 1 (\"id\")", NULL, NULL);
    free(csv);
    /* the gap past the end: 15-minute steps continue as 'T' H:M */
    d.columns = NULL;
    const char *quarter = "time,v\n2021-06-01T10:00,1\n2021-06-01T10:15,2\n2021-06-01T10:30,3\n2021-06-01T10:45,4\n"
                          "2021-06-01T11:00,5\n2021-06-01T11:15,6\n2021-06-01T11:30,7\n2021-06-01T11:45,8\n"
                          "2021-06-01T12:00,9\n2021-06-01T12:15,10\n";
    CHECK(gpt2rt_series_load_mem(&s, quarter, strlen(quarter), "quarter.csv", &d) == GPT2RT_OK &&
              gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.date_step == 900.0 &&
              gpt2rt_series_date(s, 11, buf, sizeof buf) == GPT2RT_OK && !strcmp(buf, "2021-06-01T12:45"),
          "15 minutes: step %g, row 11 %s: %s", in.date_step, buf, gpt2rt_series_last_error(s));
    gpt2rt_series_free(s);
    /* fractions of a second keep the file's digits, written back and past the end, and
       carry into the minute */
    const char *quartersec = "time,v\n2021-06-01 10:00:58.000,1\n2021-06-01 10:00:58.250,2\n"
                             "2021-06-01 10:00:58.500,3\n2021-06-01 10:00:58.750,4\n2021-06-01 10:00:59.000,5\n"
                             "2021-06-01 10:00:59.250,6\n2021-06-01 10:00:59.500,7\n2021-06-01 10:00:59.750,8\n"
                             "2021-06-01 10:01:00.000,9\n2021-06-01 10:01:00.250,10\n";
    CHECK(gpt2rt_series_load_mem(&s, quartersec, strlen(quartersec), "quartersec.csv", &d) == GPT2RT_OK &&
              gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.date_step == 0.25 &&
              gpt2rt_series_date(s, 7, buf, sizeof buf) == GPT2RT_OK && !strcmp(buf, "2021-06-01 10:00:59.750") &&
              gpt2rt_series_date(s, 11, buf + 40, 40) == GPT2RT_OK && !strcmp(buf + 40, "2021-06-01 10:01:00.750"),
          "quarter seconds: step %g, row 7 %s, row 11 %s: %s", in.date_step, buf, buf + 40, gpt2rt_series_last_error(s));
    gpt2rt_series_free(s);
}

/* desc.columns: the channels by name in the order given; desc.fill: missing values
   (empty, NA, NaN, null) refused naming the line, or filled and counted */
static void test_columns_fill(void) {
    gpt2rt_series *s;
    gpt2rt_series_info in = {0};
    gpt2rt_series_desc d = desc(2, 1, NULL, GPT2RT_SERIES_BORDERS_RATIO);
    d.no_scale = 1;
    const char *ok10 = "date,a,b,c\n1,1,2,3\n2,2,3,4\n3,3,4,5\n4,4,5,6\n5,5,6,7\n6,6,7,8\n7,7,8,9\n8,8,9,10\n9,9,10,11\n"
                       "10,10,11,12\n";
    d.columns = "c, a";
    CHECK(gpt2rt_series_load_mem(&s, ok10, strlen(ok10), "cols.csv", &d) == GPT2RT_OK && gpt2rt_series_info_get(s, &in) ==
              GPT2RT_OK && in.channels == 2 && !strcmp(gpt2rt_series_column(s, 0), "c") &&
              !strcmp(gpt2rt_series_column(s, 1), "a") && gpt2rt_series_values(s)[0] == 3.0f &&
              gpt2rt_series_values(s)[1] == 1.0f, "columns \"c, a\": %s", gpt2rt_series_last_error(s));
    gpt2rt_series_free(s);
    d.columns = "a,zz";
    bad("columns: unknown", ok10, d, GPT2RT_ERR_FORMAT, "no column named \"zz\" (columns)", "\"a\", \"b\", \"c\"", NULL);
    d.columns = "a,a";
    bad("columns: twice", ok10, d, GPT2RT_ERR_FORMAT, "column \"a\" is named twice", NULL, NULL);
    d.columns = "a,date";
    bad("columns: the date", ok10, d, GPT2RT_ERR_FORMAT, "\"date\" (columns)", "it is the date column", NULL);
    d.columns = "a,,b";
    bad("columns: empty name", ok10, d, GPT2RT_ERR_FORMAT, "an empty name", NULL, NULL);
    d.columns = "a";
    d.target = "b";
    bad("columns and target", ok10, d, GPT2RT_ERR_INVALID_ARGUMENT, "both choose the channels", NULL, NULL);
    d.columns = NULL;
    d.target = NULL;
    /* a: an empty field at row 2 and NA at rows 6, 7; b: NaN first; c: null last */
    const char *gaps = "date,a,b,c\n1,1,NaN,3\n2,,3,4\n3,3,4,5\n4,4,5,6\n5,5,6,7\n6,NA,7,8\n7,na,8,9\n8,8,9,10\n"
                       "9,9,10,11\n10,10,11,null\n";
    bad("fill refuse: empty", gaps, d, GPT2RT_ERR_FORMAT, "line 2, column 3 (\"b\")", "\"NaN\" is a missing value",
        "--fill previous|linear");
    float want_prev[3][10] = {{1, 1, 3, 4, 5, 5, 5, 8, 9, 10}, {3, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4, 5, 6, 7, 8, 9, 10, 11, 11}};
    float want_lin[3][10] = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {3, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4, 5, 6, 7, 8, 9, 10, 11, 11}};
    for (int k = 0; k < 2; k++) {
        d.fill = k ? GPT2RT_SERIES_FILL_LINEAR : GPT2RT_SERIES_FILL_PREVIOUS;
        gpt2rt_result r = gpt2rt_series_load_mem(&s, gaps, strlen(gaps), "gaps.csv", &d);
        const float *v = gpt2rt_series_values(s);
        int same = r == GPT2RT_OK && gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.filled == 5;
        for (int t = 0; same && t < 10; t++)
            for (int m = 0; m < 3; m++) same &= v[t * 3 + m] == (k ? want_lin : want_prev)[m][t];
        CHECK(same, "fill %s: 5 values filled as expected (filled %lld): %s", k ? "linear" : "previous",
              (long long)in.filled, gpt2rt_series_last_error(s));
        gpt2rt_series_free(s);
    }
    bad("fill: a column with no value", "date,a,b\n1,1,\n2,2,NA\n3,3,\n", d, GPT2RT_ERR_FORMAT,
        "column \"b\" has no value in any of its 3 rows", NULL, NULL);
    /* a missing value in a column not read is no error */
    d.fill = GPT2RT_SERIES_FILL_REFUSE;
    d.target = "b";
    CHECK(gpt2rt_series_load_mem(&s, gaps, strlen(gaps), "gaps.csv", &d) == GPT2RT_ERR_FORMAT, "target b: b's NaN refused");
    gpt2rt_series_free(s);
    d.target = "c";
    d.columns = NULL;
    const char *gaps_a = "date,a,c\n1,,3\n2,NA,4\n3,3,5\n4,4,6\n5,5,7\n6,6,8\n7,7,9\n8,8,10\n9,9,11\n10,10,12\n";
    CHECK(gpt2rt_series_load_mem(&s, gaps_a, strlen(gaps_a), "gaps_a.csv", &d) == GPT2RT_OK &&
              gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.channels == 1 && in.filled == 0,
          "target c: a's missing values are not read: %s", gpt2rt_series_last_error(s));
    gpt2rt_series_free(s);
}

/* load csv with d, expecting OK; the message when not */
static gpt2rt_series *load_ok(const char *label, const char *csv, gpt2rt_series_desc d) {
    gpt2rt_series *s;
    gpt2rt_result r = gpt2rt_series_load_mem(&s, csv, strlen(csv), label, &d);
    CHECK(r == GPT2RT_OK, "%s: %s: %s", label, gpt2rt_result_string(r), gpt2rt_series_last_error(s));
    if (r == GPT2RT_OK) return s;
    gpt2rt_series_free(s);
    return NULL;
}

/* row's date, or "<error>" */
static const char *date_of(gpt2rt_series *s, int64_t row, char *buf, size_t cap) {
    if (!s || gpt2rt_series_date(s, row, buf, cap) != GPT2RT_OK) snprintf(buf, cap, "<error>");
    return buf;
}

/* column names: an empty or repeated name is refused at load, naming the columns
   ("date,a,a" with columns "a" would be ambiguous; what training loads, predict must
   load too); a date column headed "none" is found by that name, and no_date_column
   says "no date column" whatever the header holds */
static void test_column_names(void) {
    gpt2rt_series_desc d = desc(1, 1, NULL, GPT2RT_SERIES_BORDERS_NONE);
    gpt2rt_series_info in = {0};
    char buf[64];
    bad("repeated name", "date,a,a\n1,1,2\n2,2,3\n", d, GPT2RT_ERR_FORMAT, "columns 2 and 3 both \"a\"", "line 1", NULL);
    d.columns = "a";
    bad("repeated name, one chosen", "date,a,b,a\n1,1,2,3\n2,2,3,4\n", d, GPT2RT_ERR_FORMAT,
        "columns 2 and 4 both \"a\"", NULL, NULL);
    d.columns = NULL;
    bad("repeated name, the earliest repeat", "z,y,x,y,z\n1,1,2,3,4\n", d, GPT2RT_ERR_FORMAT,
        "columns 2 and 4 both \"y\"", NULL, NULL);
    bad("empty name", "date,,b\n1,1,2\n2,2,3\n", d, GPT2RT_ERR_FORMAT, "column 2 of the header (line 1) has no name",
        NULL, NULL);
    bad("unnamed first column of text", ",date,a\nx,2025-01-01,1\ny,2025-01-02,2\n", d, GPT2RT_ERR_FORMAT,
        "column 1 of the header (line 1) has no name", NULL, NULL);
    bad("blank name", "date, \t,b\n1,1,2\n", d, GPT2RT_ERR_FORMAT, "column 2 of the header", NULL, NULL);
    /* a date column headed none: found by content (training), then by its name (predict) */
    const char *none_date = "none,a,b\n2025-01-01,1,2\n2025-01-02,2,3\n2025-01-03,3,4\n";
    gpt2rt_series *s = load_ok("none_date.csv", none_date, d);
    CHECK(s && gpt2rt_series_date_column(s) && !strcmp(gpt2rt_series_date_column(s), "none"),
          "a text first column headed none is the date column (found by content)");
    gpt2rt_series_free(s);
    d.date_column = "none";
    s = load_ok("none_date.csv, date_column none", none_date, d);
    CHECK(s && gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.date_column == 0 && in.channels == 2 &&
              !strcmp(date_of(s, 3, buf, sizeof buf), "2025-01-04"),
          "date_column \"none\" names the column headed none: date column %d, %d channels, row 3 %s", in.date_column,
          in.channels, buf);
    gpt2rt_series_free(s);
    /* "none" in a header without such a column: no date column, as before */
    s = load_ok("numbers.csv, date_column none", "a,b\n1,2\n2,3\n", d);
    CHECK(s && gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.date_column == -1 && in.channels == 2,
          "date_column \"none\" without a column so named: no date column, 2 channels");
    gpt2rt_series_free(s);
    /* no_date_column: none, even with a (numeric) column headed none */
    d.date_column = NULL;
    d.no_date_column = 1;
    s = load_ok("numbers named none", "a,none\n1,2\n2,3\n", d);
    CHECK(s && gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.date_column == -1 && in.channels == 2 &&
              !strcmp(gpt2rt_series_column(s, 1), "none"), "no_date_column: the column headed none is a channel");
    gpt2rt_series_free(s);
    d.date_column = "none";
    bad("no_date_column with a date_column", "a,none\n1,2\n", d, GPT2RT_ERR_INVALID_ARGUMENT, "no_date_column = 1",
        "date_column = \"none\"", "set one");
}

/* dates: impossible ones (2025-02-30, 25:00) refused naming the line, the row and the
   text; continued dates keep the zone (11:00:00Z -> 12:00:00Z) and the fields' form
   (2025/1/31 7:05 -> 2025/2/1 7:05) */
static void test_dates(void) {
    gpt2rt_series_desc d = desc(1, 1, NULL, GPT2RT_SERIES_BORDERS_NONE);
    gpt2rt_series_info in = {0};
    char buf[64];
    static const struct { const char *date, *why; } impossible[] = {
        {"2025-02-30", "day 30 is not in 1..28 (2025-02 has 28 days)"},
        {"2100-02-29", "day 29 is not in 1..28"},
        {"2025-04-31", "day 31 is not in 1..30"},
        {"2025-13-01", "month 13 is not in 1..12"},
        {"2025-00-10", "month 0 is not in 1..12"},
        {"2025-01-00", "day 0 is not in 1..31"},
        {"2025-01-01 25:00", "hour 25 is not in 0..23"},
        {"2025-01-01 24:01", "hour 24 is not in 0..23"},
        {"2025-01-01 10:60", "minute 60 is not in 0..59"},
        {"2025-01-01 10:00:60", "second 60 is not in 0..59"},
        {"0000-01-01", "year 0 is before year 1"},
        {"2025-01-01T10:00+24:00", "the zone +24:00"},
    };
    for (size_t k = 0; k < sizeof impossible / sizeof impossible[0]; k++) {
        char csv[160], label[64], want[64];
        snprintf(csv, sizeof csv, "date,a\n2024-12-30,1\n2024-12-31,2\n%s,3\n", impossible[k].date);
        snprintf(label, sizeof label, "impossible date %s", impossible[k].date);
        snprintf(want, sizeof want, "\"%s\" is not on the calendar", impossible[k].date);
        bad(label, csv, d, GPT2RT_ERR_FORMAT, "line 4 (data row 2), column 1 (\"date\")", want, impossible[k].why);
    }
    /* what the calendar has: a leap day, 2000-02-29, and 24:00 (the day's end, as TMY3 writes it) */
    gpt2rt_series *s = load_ok("possible dates", "date,a\n2024-02-29 23:00,1\n2024-02-29 24:00,2\n2000-02-29 01:00,3\n", d);
    CHECK(s && !strcmp(date_of(s, 1, buf, sizeof buf), "2024-03-01 00:00"), "24:00 is the next day's 00:00: %s", buf);
    gpt2rt_series_free(s);
    /* zones: Z and +hh:mm kept on continued dates; a change of offset is a change of clock */
    s = load_ok("zulu.csv", "date,a\n2025-01-01T10:00:00Z,1\n2025-01-01T11:00:00Z,2\n", d);
    CHECK(s && gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.date_step == 3600 &&
              !strcmp(date_of(s, 2, buf, sizeof buf), "2025-01-01T12:00:00Z"), "Z kept: step %g, row 2 %s", in.date_step, buf);
    gpt2rt_series_free(s);
    s = load_ok("india.csv", "date,a\n2025-01-01 23:00+05:30,1\n2025-01-01 23:30+05:30,2\n", d);
    CHECK(s && gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.date_step == 1800 &&
              !strcmp(date_of(s, 2, buf, sizeof buf), "2025-01-02 00:00+05:30"), "+05:30 kept: row 2 %s", buf);
    gpt2rt_series_free(s);
    /* Europe's spring change: 01:00+01:00 then 03:00+02:00 is one hour later */
    s = load_ok("dst.csv", "date,a\n2025-03-30T00:00+0100,1\n2025-03-30T01:00+0100,2\n2025-03-30T03:00+0200,3\n", d);
    CHECK(s && gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.date_step == 3600 &&
              !strcmp(date_of(s, 3, buf, sizeof buf), "2025-03-30T04:00+0200"), "+0100 to +0200: step %g, row 3 %s",
          in.date_step, buf);
    gpt2rt_series_free(s);
    /* the file's form: no leading zeros where it writes none; leading zeros where it does */
    s = load_ok("unpadded.csv", "date,a\n2025/1/29 7:05,1\n2025/1/30 7:05,2\n2025/1/31 7:05,3\n", d);
    CHECK(s && !strcmp(date_of(s, 3, buf, sizeof buf), "2025/2/1 7:05"), "2025/1/31 7:05 continues as %s, want "
          "2025/2/1 7:05", buf);
    CHECK(s && !strcmp(date_of(s, 2, buf, sizeof buf), "2025/1/31 7:05"), "2025/1/31 7:05 written back as %s", buf);
    gpt2rt_series_free(s);
    s = load_ok("padded.csv", "date,a\n2025/01/30 07:05,1\n2025/01/31 07:05,2\n", d);
    CHECK(s && !strcmp(date_of(s, 2, buf, sizeof buf), "2025/02/01 07:05"), "2025/01/31 07:05 continues as %s", buf);
    gpt2rt_series_free(s);
    s = load_ok("two digits.csv", "date,a\n2025-12-30 10:00,1\n2025-12-31 10:00,2\n", d);
    CHECK(s && !strcmp(date_of(s, 2, buf, sizeof buf), "2026-01-01 10:00"), "2025-12-31 10:00 continues as %s", buf);
    gpt2rt_series_free(s);
    /* gpt2rt_series_date: a buffer too small is an error naming the size, the buffer left
       empty, never a truncated date; a row past the year 9999 an error naming the row */
    s = load_ok("zulu.csv", "date,a\n2025-01-01T10:00:00Z,1\n2025-01-01T11:00:00Z,2\n", d);
    memset(buf, 'x', sizeof buf);
    gpt2rt_result r = s ? gpt2rt_series_date(s, 0, buf, 7) : GPT2RT_OK;
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && buf[0] == 0 && buf[1] == 'x' &&
              strstr(gpt2rt_series_last_error(s), "needs cap = 21 bytes") && strstr(gpt2rt_series_last_error(s), "cap is 7"),
          "cap 7 for a 20-character date: %s, \"%.8s\": %s", gpt2rt_result_string(r), buf, gpt2rt_series_last_error(s));
    CHECK(s && gpt2rt_series_date(s, 0, buf, 21) == GPT2RT_OK && !strcmp(buf, "2025-01-01T10:00:00Z"),
          "cap 21 holds it: %s", buf);
    memset(buf, 'x', sizeof buf);
    r = s ? gpt2rt_series_date(s, (int64_t)1 << 62, buf, sizeof buf) : GPT2RT_OK;
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && buf[0] == 0 && strstr(gpt2rt_series_last_error(s), "row 4611686018427387904") &&
              strstr(gpt2rt_series_last_error(s), "year 9999"), "row 2^62: %s, \"%.8s\": %s", gpt2rt_result_string(r),
          buf, gpt2rt_series_last_error(s));
    /* the last hour of 9999 is still written; the next is not */
    int64_t last = (int64_t)(((double)(gpt2rt__days_from_civil(10000, 1, 1) - gpt2rt__days_from_civil(2025, 1, 1)) * 24.0)) - 11;
    CHECK(s && !strcmp(date_of(s, last, buf, sizeof buf), "9999-12-31T23:00:00Z") &&
              gpt2rt_series_date(s, last + 1, buf, sizeof buf) == GPT2RT_ERR_INVALID_ARGUMENT,
          "row %lld: %s, the next refused", (long long)last, buf);
    gpt2rt_series_free(s);
}

/* a CSV "header\n<date>,<i>\n..." of the n dates given, loaded (lookback 1, horizon 1, no borders) */
static gpt2rt_series *load_dates(const char *label, const char *header, const char *const *dates, int n) {
    char csv[4096];
    size_t k = (size_t)snprintf(csv, sizeof csv, "%s\n", header);
    for (int i = 0; i < n && k < sizeof csv; i++) k += (size_t)snprintf(csv + k, sizeof csv - k, "%s,%d\n", dates[i], i);
    return load_ok(label, csv, desc(1, 1, NULL, GPT2RT_SERIES_BORDERS_NONE));
}

/* the file's first `given` dates of want[] loaded; info's calendar checked; rows given ..
   total-1 continued and compared with want[] */
static void check_calendar(const char *label, const char *header, const char *const *want, int given, int total,
                           gpt2rt_series_calendar cal, int months, int month_end, int season) {
    gpt2rt_series *s = load_dates(label, header, want, given);
    gpt2rt_series_info in;
    memset(&in, 0, sizeof in);
    CHECK(s && gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.date_calendar == cal && in.date_months == months &&
              in.date_month_end == month_end && in.season == season && in.date_is_calendar == 1 && in.date_step > 0,
          "%s: calendar %d (want %d), months %d (want %d), month end %d (want %d), season %d (want %d), step %g", label,
          (int)in.date_calendar, (int)cal, in.date_months, months, in.date_month_end, month_end, in.season, season,
          in.date_step);
    char buf[64];
    int same = s != NULL, at = -1;
    for (int i = 0; same && i < total; i++)
        if (strcmp(date_of(s, i, buf, sizeof buf), want[i])) { same = 0; at = i; }
    CHECK(same, "%s: row %d is %s, want %s", label, at, buf, at >= 0 ? want[at] : "");
    gpt2rt_series_free(s);
}

/* calendar steps: monthly, quarterly and yearly files continue by calendar months, not
   at a fixed number of seconds (quarterly 2009-10-01 goes on 2010-01-01, 2010-04-01, ...);
   month ends stay month ends; period labels (1959Q1, 2020-03, 2020) are dates written back
   in their form. The tables are Python's datetime and calendar
   (stdlib; pandas is not installed here), the equivalents of
   pandas.date_range(start, periods=n, freq='ME' / 'MS' / 'QS' / 'B'):
     python3 -c 'import datetime, calendar; ...' (add k months to y*12+m-1; the day 1, or
     calendar.monthrange(y, m)[1] for month ends; weekdays by date.weekday() < 5) */
static void test_calendar(void) {
    /* freq='ME' from 2019-08-31: Dec -> Jan, and February 29th of 2020 */
    static const char *const me[] = {"2019-08-31", "2019-09-30", "2019-10-31", "2019-11-30", "2019-12-31", "2020-01-31",
                                     "2020-02-29", "2020-03-31", "2020-04-30", "2020-05-31", "2020-06-30", "2020-07-31",
                                     "2020-08-31", "2020-09-30", "2020-10-31", "2020-11-30", "2020-12-31"};
    check_calendar("month ends", "date,v", me, 5, 17, GPT2RT_SERIES_CALENDAR_MONTHS, 1, 1, 12);
    /* freq='MS' from 2019-01-01 (a monthly file that ends 2019-12-01) */
    static const char *const ms[] = {"2019-01-01", "2019-02-01", "2019-03-01", "2019-04-01", "2019-05-01", "2019-06-01",
                                     "2019-07-01", "2019-08-01", "2019-09-01", "2019-10-01", "2019-11-01", "2019-12-01",
                                     "2020-01-01", "2020-02-01", "2020-03-01", "2020-04-01", "2020-05-01", "2020-06-01",
                                     "2020-07-01", "2020-08-01", "2020-09-01", "2020-10-01", "2020-11-01", "2020-12-01"};
    check_calendar("month starts", "date,v", ms, 12, 24, GPT2RT_SERIES_CALENDAR_MONTHS, 1, 0, 12);
    /* freq='QS' from 2008-07-01 (a quarterly file that ends 2009-07-01, 2009-10-01): Q4 -> Q1 */
    static const char *const qs[] = {"2008-07-01", "2008-10-01", "2009-01-01", "2009-04-01", "2009-07-01",
                                     "2009-10-01", "2010-01-01", "2010-04-01", "2010-07-01"};
    check_calendar("quarter starts", "date,v", qs, 6, 9, GPT2RT_SERIES_CALENDAR_MONTHS, 3, 0, 4);
    /* the same quarters as labels (pandas' PeriodIndex, freq='Q'), from 1959Q1 */
    static const char *const ql[] = {"1959Q1", "1959Q2", "1959Q3", "1959Q4", "1960Q1", "1960Q2", "1960Q3", "1960Q4",
                                     "1961Q1", "1961Q2", "1961Q3"};
    check_calendar("quarter labels", "date,v", ql, 7, 11, GPT2RT_SERIES_CALENDAR_MONTHS, 3, 0, 4);
    static const char *const qd[] = {"1960-Q3", "1960-Q4", "1961-Q1", "1961-Q2"};
    check_calendar("quarter labels 1960-Q3", "quarter,v", qd, 2, 4, GPT2RT_SERIES_CALENDAR_MONTHS, 3, 0, 4);
    /* year-month labels (freq='M' periods): 'MS' above cut to YYYY-MM */
    char ym_text[24][8];
    const char *ym[24];
    for (int i = 0; i < 24; i++) { snprintf(ym_text[i], sizeof ym_text[i], "%.7s", ms[i]); ym[i] = ym_text[i]; }
    check_calendar("year-month labels", "month,v", ym, 12, 24, GPT2RT_SERIES_CALENDAR_MONTHS, 1, 0, 12);
    /* unpadded year-months stay unpadded */
    static const char *const ym1[] = {"2020/9", "2020/10", "2020/11", "2020/12", "2021/1", "2021/2"};
    check_calendar("year-month 2020/9", "date,v", ym1, 4, 6, GPT2RT_SERIES_CALENDAR_MONTHS, 1, 0, 12);
    /* a year column (found by its name, year), and years under a date column */
    static const char *const yr[] = {"2015", "2016", "2017", "2018", "2019", "2020", "2021", "2022"};
    check_calendar("years", "year,v", yr, 6, 8, GPT2RT_SERIES_CALENDAR_MONTHS, 12, 0, 1);
    check_calendar("years under date", "Date,v", yr, 3, 8, GPT2RT_SERIES_CALENDAR_MONTHS, 12, 0, 1);
    /* yearly on February 28th (not the month's end in 2020) stays on the 28th; yearly at
       February's end follows it, 29th in leap years */
    static const char *const feb28[] = {"2019-02-28", "2020-02-28", "2021-02-28", "2022-02-28"};
    check_calendar("yearly Feb 28", "date,v", feb28, 2, 4, GPT2RT_SERIES_CALENDAR_MONTHS, 12, 0, 1);
    static const char *const febend[] = {"2022-02-28", "2023-02-28", "2024-02-29", "2025-02-28"};
    check_calendar("yearly Feb end", "date,v", febend, 2, 4, GPT2RT_SERIES_CALENDAR_MONTHS, 12, 1, 1);
    /* monthly on the 30th: the day kept, February's last when shorter */
    static const char *const m30[] = {"2019-12-30 06:30", "2020-01-30 06:30", "2020-02-29 06:30", "2020-03-30 06:30",
                                      "2020-04-30 06:30"};
    check_calendar("monthly on the 30th", "date,v", m30, 3, 5, GPT2RT_SERIES_CALENDAR_MONTHS, 1, 0, 12);
    /* freq='B' from Thursday 2020-02-20: Friday -> Monday (Saturday 29th skipped) */
    static const char *const bd[] = {"2020-02-20", "2020-02-21", "2020-02-24", "2020-02-25", "2020-02-26", "2020-02-27",
                                     "2020-02-28", "2020-03-02", "2020-03-03", "2020-03-04", "2020-03-05", "2020-03-06"};
    check_calendar("business days", "date,v", bd, 7, 12, GPT2RT_SERIES_CALENDAR_BUSINESS_DAYS, 0, 0, 5);
    /* a weekday missing (a holiday) is still business-daily */
    static const char *const bh[] = {"2020-02-20", "2020-02-21", "2020-02-24", "2020-02-26", "2020-02-27",
                                     "2020-02-28", "2020-03-02"};
    check_calendar("business days with a holiday", "date,v", bh, 6, 7, GPT2RT_SERIES_CALENDAR_BUSINESS_DAYS, 0, 0, 5);
    /* fixed steps: daily (weekends included), weekly on Mondays (weekdays, yet 5 a step), hourly,
       every 15 minutes; a step that is no calendar's cycle */
    static const char *const dd[] = {"2020-02-27", "2020-02-28", "2020-02-29", "2020-03-01", "2020-03-02"};
    check_calendar("daily", "date,v", dd, 4, 5, GPT2RT_SERIES_CALENDAR_FIXED, 0, 0, 7);
    static const char *const wk[] = {"2020-02-17", "2020-02-24", "2020-03-02", "2020-03-09"};
    check_calendar("weekly", "date,v", wk, 3, 4, GPT2RT_SERIES_CALENDAR_FIXED, 0, 0, 52);
    static const char *const hr[] = {"2020-02-28 22:00", "2020-02-28 23:00", "2020-02-29 00:00", "2020-02-29 01:00"};
    check_calendar("hourly", "date,v", hr, 3, 4, GPT2RT_SERIES_CALENDAR_FIXED, 0, 0, 24);
    static const char *const qh[] = {"2020-02-28 23:15", "2020-02-28 23:30", "2020-02-28 23:45", "2020-02-29 00:00"};
    check_calendar("15 minutes", "date,v", qh, 3, 4, GPT2RT_SERIES_CALENDAR_FIXED, 0, 0, 96);
    static const char *const h7[] = {"2020-01-01 00:00", "2020-01-01 07:00", "2020-01-01 14:00", "2020-01-01 21:00",
                                     "2020-01-02 04:00"};
    check_calendar("every 7 hours", "date,v", h7, 4, 5, GPT2RT_SERIES_CALENDAR_FIXED, 0, 0, 1);
    /* numbers stay numbers: four digits among other numbers are not years; no date column */
    gpt2rt_series_desc d = desc(1, 1, NULL, GPT2RT_SERIES_BORDERS_NONE);
    gpt2rt_series_info in;
    char buf[64];
    memset(&in, 0, sizeof in);
    gpt2rt_series *s = load_ok("999 to 1001", "date,v\n999,1\n1000,2\n1001,3\n", d);
    CHECK(s && gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.date_calendar == GPT2RT_SERIES_CALENDAR_FIXED &&
              in.date_is_calendar == 0 && in.date_step == 1 && in.season == 1 && !strcmp(date_of(s, 3, buf, sizeof buf), "1002"),
          "numbers 999..1001: calendar %d, step %g, season %d, row 3 %s", (int)in.date_calendar, in.date_step, in.season, buf);
    gpt2rt_series_free(s);
    s = load_ok("no dates", "a,b\n1,2\n2,3\n", d);
    CHECK(s && gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.date_calendar == GPT2RT_SERIES_CALENDAR_NONE &&
              in.season == 1 && in.date_months == 0, "no date column: calendar %d, season %d", (int)in.date_calendar, in.season);
    gpt2rt_series_free(s);
    /* labels off the calendar are refused like dates */
    bad("quarter 5", "date,v\n1959Q4,1\n1959Q5,2\n", d, GPT2RT_ERR_FORMAT, "line 3 (data row 1)", "\"1959Q5\"",
        "quarter 5 is not in 1..4");
    bad("month 13", "date,v\n2020-12,1\n2020-13,2\n", d, GPT2RT_ERR_FORMAT, "line 3 (data row 1)", "\"2020-13\"",
        "month 13 is not in 1..12");
}

/* far past the end under month steps: each date from the last row's month + k*n (no
   error accumulates over 1000 steps), refused past the year 9999 naming the row */
static void test_calendar_far(void) {
    char buf[64];
    static const char *const ms[] = {"2019-10-01", "2019-11-01", "2019-12-01"};
    static const char *const me[] = {"2019-10-31", "2019-11-30", "2019-12-31"};
    gpt2rt_series *s = load_dates("monthly", "date,v", ms, 3), *e = load_dates("month ends", "date,v", me, 3);
    /* 1000 months after 2019-12: (2019*12 + 11 + 1000) = 2103*12 + 3, April 2103 (30 days) */
    CHECK(!strcmp(date_of(s, 2 + 1000, buf, sizeof buf), "2103-04-01"), "monthly, 1000 past: %s, want 2103-04-01", buf);
    CHECK(!strcmp(date_of(e, 2 + 1000, buf, sizeof buf), "2103-04-30"), "month ends, 1000 past: %s, want 2103-04-30", buf);
    /* (9999 - 2019) * 12 = 95760 months after 2019-12 is 9999-12; one more is refused */
    CHECK(!strcmp(date_of(s, 2 + 95760, buf, sizeof buf), "9999-12-01") &&
              !strcmp(date_of(e, 2 + 95760, buf, sizeof buf), "9999-12-31"), "95760 months past: %s", buf);
    gpt2rt_result r = s ? gpt2rt_series_date(s, 2 + 95761, buf, sizeof buf) : GPT2RT_OK;
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && buf[0] == 0 && strstr(gpt2rt_series_last_error(s), "row 95763") &&
              strstr(gpt2rt_series_last_error(s), "1 month)") && strstr(gpt2rt_series_last_error(s), "year 9999"),
          "95761 months past: %s: %s", gpt2rt_result_string(r), s ? gpt2rt_series_last_error(s) : "");
    r = s ? gpt2rt_series_date(s, (int64_t)1 << 62, buf, sizeof buf) : GPT2RT_OK;
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_series_last_error(s), "row 4611686018427387904") &&
              strstr(gpt2rt_series_last_error(s), "year 9999"), "monthly, row 2^62: %s", s ? gpt2rt_series_last_error(s) : "");
    gpt2rt_series_free(s);
    gpt2rt_series_free(e);
    /* business days: 2020-03-06 is a Friday; 5 * 1000 weekdays later is 7000 days later */
    static const char *const bd[] = {"2020-03-04", "2020-03-05", "2020-03-06", "2020-03-09"};
    s = load_dates("business", "date,v", bd, 3 + 1);
    /* from Monday 2020-03-09, 1000 weeks of weekdays: 2039-05-09 (datetime: date(2020,3,9) + 7000 days) */
    CHECK(!strcmp(date_of(s, 3 + 5000, buf, sizeof buf), "2039-05-09"), "business, 5000 past: %s, want 2039-05-09", buf);
    r = s ? gpt2rt_series_date(s, (int64_t)1 << 62, buf, sizeof buf) : GPT2RT_OK;
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_series_last_error(s), "year 9999"), "business, row 2^62: %s",
          s ? gpt2rt_series_last_error(s) : "");
    gpt2rt_series_free(s);
}

/* pandas' df.to_csv() writes its row index as an unnamed first column: skipped and said
   (info.index_column_skipped); any other unnamed column, or an unnamed
   first column that does not count the rows, is refused */
static void test_index_column(void) {
    gpt2rt_series_desc d = desc(1, 1, NULL, GPT2RT_SERIES_BORDERS_NONE);
    d.no_scale = 1;
    gpt2rt_series_info in;
    char buf[64];
    memset(&in, 0, sizeof in);
    gpt2rt_series *s = load_ok("pandas index from 0", ",date,a,b\n0,2025-01-01,1,5\n1,2025-01-02,2,6\n2,2025-01-03,3,7\n", d);
    CHECK(s && gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.index_column_skipped == 1 && in.channels == 2 &&
              in.date_column == 1 && !strcmp(gpt2rt_series_column(s, 0), "a") && gpt2rt_series_values(s)[0] == 1.0f &&
              gpt2rt_series_values(s)[1] == 5.0f && !strcmp(date_of(s, 3, buf, sizeof buf), "2025-01-04"),
          "index 0, 1, 2 skipped (%d): %d channels, date column %d, row 3 %s", in.index_column_skipped, in.channels,
          in.date_column, buf);
    gpt2rt_series_free(s);
    /* from 1, the date found by content in the first column past the index */
    s = load_ok("pandas index from 1", ",when,a\n1,2025-01-01,1\n2,2025-01-02,2\n3,2025-01-03,3\n", d);
    CHECK(s && gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.index_column_skipped == 1 && in.channels == 1 &&
              in.date_column == 1 && !strcmp(gpt2rt_series_date_column(s), "when"),
          "index 1, 2, 3 skipped: %d channels, date column %d", in.channels, in.date_column);
    gpt2rt_series_free(s);
    s = load_ok("named first column", "id,a\n0,1\n1,2\n", d);
    CHECK(s && gpt2rt_series_info_get(s, &in) == GPT2RT_OK && in.index_column_skipped == 0 && in.channels == 2,
          "a named first column is data: skipped %d, %d channels", in.index_column_skipped, in.channels);
    gpt2rt_series_free(s);
    bad("unnamed first column, not counting", ",date,a\n0,2025-01-01,1\n2,2025-01-02,2\n", d, GPT2RT_ERR_FORMAT,
        "column 1 of the header (line 1) has no name", "line 3 holds \"2\" there, not 1", "0, 1, 2, ...");
    bad("unnamed first column from 5", ",a\n5,1\n6,2\n", d, GPT2RT_ERR_FORMAT, "line 2 holds \"5\" there, not 0 or 1",
        NULL, NULL);
    bad("unnamed first column of dates", ",a\n2025-01-01,1\n2025-01-02,2\n", d, GPT2RT_ERR_FORMAT,
        "column 1 of the header (line 1) has no name", "\"2025-01-01\"", NULL);
    bad("unnamed first column, 01", ",a\n0,1\n01,2\n", d, GPT2RT_ERR_FORMAT, "line 3 holds \"01\"", NULL, NULL);
    bad("unnamed second column", "date,,b\n0,1,2\n1,2,3\n", d, GPT2RT_ERR_FORMAT,
        "column 2 of the header (line 1) has no name", NULL, NULL);
}

int main(void) {
    test_borders();
    test_scaler_and_windows();
    test_errors();
    test_heldout();
    test_date_column();
    test_columns_fill();
    test_column_names();
    test_dates();
    test_calendar();
    test_calendar_far();
    test_index_column();
    return harness_finish();
}
