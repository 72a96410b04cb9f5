/* inputs/series.h - 6.3 Series files
   may call: inputs/patches.h and what it includes */
#ifndef GPT2RT__SRC_INPUTS_SERIES_H
#define GPT2RT__SRC_INPUTS_SERIES_H
#include "patches.h"

/* ==== 6.3 Series files ==== */

/* ETT-format CSV (a date column and numeric columns) cut as the Time-Series-Library
   cuts it (thuml/Time-Series-Library, data_provider/data_loader.py: Dataset_ETT_hour,
   Dataset_ETT_minute, Dataset_Custom):
       ETTh:  border1s = [0, 12*30*24 - L, 12*30*24 + 4*30*24 - L]
              border2s = [12*30*24, 12*30*24 + 4*30*24, 12*30*24 + 8*30*24]
       ETTm:  the same times 4
       other: num_train = int(len*0.7), num_test = int(len*0.2),
              num_vali = len - num_train - num_test,
              border1s = [0, num_train - L, len - num_test - L]
              border2s = [num_train, num_train + num_vali, len]
   and __len__ = border2 - border1 - L - H + 1 windows per split. The scaler is fit on
   rows [0, border2s[0]) (sklearn's StandardScaler: population variance; a constant
   column gets scale 1). Dataset_Custom moves the target column last in 'M' mode;
   here every mode keeps the file's order (the MSE over channels does not change).
   The values are parsed with strtod, so the C locale's '.' is the decimal point.
   The date column is found, not assumed: a file without one keeps every numeric
   column, and a column that is neither the date nor numbers is an error, so no
   column is ever dropped unread. */

/* the forms of a date: a day (Y-M-D, maybe with a time), or a period label, read as the
   period's first day: year-month (2020-03), quarter (1959Q1, 1959-Q1, 1959 Q1), year (2020) */
enum { GPT2RT__DATE_DAY = 0, GPT2RT__DATE_MONTH, GPT2RT__DATE_QUARTER, GPT2RT__DATE_YEAR };

/* how the file writes its dates: 'Y-M-D', then ' ' or 'T' and H:M or H:M:S[.frac], then
   a zone (Z, +hh:mm, +hhmm, +hh); or a period label (form) */
typedef struct gpt2rt__date_fmt {
    int form;        /* GPT2RT__DATE_*: DAY, or the period label's */
    char qsep[4];    /* a quarter's text between the year and the digit: "Q", "-Q", " q" */
    char dsep, tsep; /* '-' or '/'; ' ' or 'T' */
    int parts;       /* 3: date only, 5: with H:M, 6: with H:M:S */
    int frac;        /* digits after the seconds' point (0-9; more are read, 9 written) */
    int width[3];    /* month, day, hour: 2 written with a leading zero below 10, 1 without;
                        parsed: 2 for "01", 1 for "1", 0 for "12" (either) */
    char zone[8];    /* the zone as written: "", "Z", "+05:30", "-0800", "+05" */
    int zone_s;      /* its offset from UTC in seconds (the dates are kept in UTC) */
} gpt2rt__date_fmt;

struct gpt2rt_series {
    int failed;
    char error[512];
    gpt2rt_series_desc desc; /* target not kept (the caller's string) */
    gpt2rt_series_info info;
    float *values;           /* (rows, M) scaled */
    double *mean, *std;      /* (M) */
    char *names;             /* M NUL-terminated column names, one after another, then the date's */
    char **name;             /* (M) into names */
    char *date_name;         /* into names; NULL without a date column */
    double *time;            /* (rows) each row's date: seconds since 1970-01-01 00:00 (time_kind 2)
                                or the column's number (1); NAN where it does not parse */
    int time_kind;           /* 0: no usable dates, 1: numbers, 2: dates written as date_fmt */
    gpt2rt__date_fmt date_fmt; /* the last row's, with the widths every row agrees on */
    int date_day;            /* MONTHS: the day of the month continued dates take (the month's
                                last when shorter): the largest day of the file's dates */
};

/* one field of a line: [b, e) with surrounding spaces and tabs trimmed */
typedef struct gpt2rt__csv_field { const char *b, *e; } gpt2rt__csv_field;

static const char *gpt2rt__csv_trim(const char **b, const char *e) {
    while (*b < e && (**b == ' ' || **b == '\t')) (*b)++;
    while (e > *b && (e[-1] == ' ' || e[-1] == '\t')) e--;
    return e;
}

/* the fields of line [p, end) (no newline inside) into f (cap): the count, which
   may exceed cap (then only cap are stored) */
static int64_t gpt2rt__csv_split(const char *p, const char *end, gpt2rt__csv_field *f, int64_t cap) {
    int64_t n = 0;
    for (;;) {
        const char *c = p;
        while (c < end && *c != ',') c++;
        if (n < cap) { f[n].b = p; f[n].e = gpt2rt__csv_trim(&f[n].b, c); }
        n++;
        if (c == end) return n;
        p = c + 1;
    }
}

/* a number filling [b, e) entirely that fits a float (|v| <= FLT_MAX), in *v; 0
   when it is not one */
static int gpt2rt__csv_number(const char *b, const char *e, double *v) {
    char buf[256];
    size_t n = (size_t)(e - b);
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, b, n);
    buf[n] = 0;
    char *stop;
    *v = strtod(buf, &stop);
    return stop == buf + n && fabs(*v) <= 3.4028234663852886e38;
}

/* a field for a message: at most 24 bytes of it, quoted, non-printing bytes as '?' */
static void gpt2rt__csv_show(char *out, const char *b, const char *e) {
    size_t n = (size_t)(e - b), k = 0;
    out[k++] = '"';
    for (size_t i = 0; i < n && i < 24; i++) out[k++] = (b[i] >= 32 && b[i] < 127) ? b[i] : '?';
    if (n > 24) { memcpy(out + k, "...", 3); k += 3; }
    out[k++] = '"';
    out[k] = 0;
}

/* Lines end in LF, CRLF or a lone CR (files saved by old Mac programs, where a
   reader that looks for LF alone sees one line): the end of the line at p, and the
   start of the next (past its one line ending) in *next */
static const char *gpt2rt__csv_eol(const char *p, const char *end, const char **next) {
    while (p < end && *p != '\n' && *p != '\r') p++;
    *next = p == end ? end : p + (*p == '\r' && p + 1 < end && p[1] == '\n' ? 2 : 1);
    return p;
}

static gpt2rt_result gpt2rt__series_done(gpt2rt_series **out, gpt2rt_series *s, gpt2rt_result r) {
    if (r != GPT2RT_OK) {
        free(s->values); free(s->mean); free(s->std); free(s->names); free(s->name); free(s->time);
        s->values = NULL; s->mean = s->std = NULL; s->names = NULL; s->name = NULL; s->time = NULL; s->date_name = NULL;
        memset(&s->info, 0, sizeof s->info);
        s->failed = 1;
    }
    *out = s;
    return r;
}

/* the split borders of info->rows rows for lookback L, horizon H (info->borders
   resolved); an error names the split that holds no window */
static gpt2rt_result gpt2rt__series_borders(gpt2rt_series *s, const char *name, int64_t L, int64_t H) {
    gpt2rt_series_info *in = &s->info;
    int64_t rows = in->rows, b2[3];
    if (in->borders == GPT2RT_SERIES_BORDERS_NONE) {
        if (rows < L)
            return gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: %lld data rows are fewer than the lookback, %lld",
                                   name, (long long)rows, (long long)L);
        int64_t w = rows - L - H + 1;
        for (int k = 0; k < 3; k++) {
            in->begin[k] = k ? rows : 0;
            in->end[k] = rows;
            in->windows[k] = k || w < 0 ? 0 : w;
        }
        return GPT2RT_OK;
    }
    if (in->borders == GPT2RT_SERIES_BORDERS_RATIO) {
        /* Python's int(len * 0.7): the same double product, truncated */
        int64_t n_train = (int64_t)((double)rows * 0.7), n_test = (int64_t)((double)rows * 0.2);
        int64_t n_val = rows - n_train - n_test;
        b2[0] = n_train; b2[1] = n_train + n_val; b2[2] = rows;
    } else {
        int64_t unit = (in->borders == GPT2RT_SERIES_BORDERS_ETTM ? 4 : 1) * 30 * 24; /* rows a month */
        b2[0] = 12 * unit; b2[1] = 16 * unit; b2[2] = 20 * unit;
        if (rows < b2[2])
            return gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: %lld data rows; the %s borders need %lld (train "
                                   "[0, %lld), validation and test up to %lld); use borders RATIO for other files",
                                   name, (long long)rows, in->borders == GPT2RT_SERIES_BORDERS_ETTM ? "ETTm" : "ETTh",
                                   (long long)b2[2], (long long)b2[0], (long long)b2[2]);
    }
    static const char *split_name[3] = {"training", "validation", "test"};
    for (int k = 0; k < 3; k++) {
        in->begin[k] = k ? b2[k - 1] - L : 0;
        in->end[k] = b2[k];
        in->windows[k] = in->end[k] - in->begin[k] - L - H + 1;
        if (in->begin[k] < 0 || in->windows[k] < 1)
            return gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: %lld data rows are too few: the %s split ends at "
                                   "row %lld and must hold lookback + horizon = %lld + %lld = %lld rows%s (it has %lld)",
                                   name, (long long)rows, split_name[k], (long long)b2[k], (long long)L, (long long)H,
                                   (long long)(L + H), k ? " counting the lookback before it" : "",
                                   (long long)(in->end[k] - (in->begin[k] > 0 ? in->begin[k] : 0)));
    }
    return GPT2RT_OK;
}

/* ---- the date column: which one, and each row's date as a number ---- */

/* days since 1970-01-01 of a proleptic Gregorian date, and back (H. Hinnant's
   days_from_civil / civil_from_days: exact for every int64 year in range) */
static int64_t gpt2rt__days_from_civil(int64_t y, int64_t m, int64_t d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400, yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1, doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void gpt2rt__civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097, doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365, doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* mind..maxd decimal digits at *p (before e) into *v; the pointer moves past them;
   the count read, 0 when fewer than mind */
static int gpt2rt__date_digits(const char **p, const char *e, int mind, int maxd, int64_t *v) {
    int n = 0;
    *v = 0;
    while (*p < e && n < maxd && **p >= '0' && **p <= '9') { *v = *v * 10 + (**p - '0'); (*p)++; n++; }
    return n >= mind ? n : 0;
}

/* the width n digits at q show: 2 with a leading zero ("01"), 1 for one digit, 0 either ("12") */
static int gpt2rt__date_width(const char *q, int n) { return n == 1 ? 1 : q[0] == '0' ? 2 : 0; }

static int gpt2rt__month_days(int64_t y, int64_t m) {
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) ? 29 : days[m - 1];
}

/* [b, e) as YYYY-MM-DD[( |T)HH:MM[:SS[.frac]][zone]] ('/' also between the date's parts;
   zone: Z, +hh:mm, +hhmm or +hh, '-' too; Z also after a date alone) into seconds since
   1970-01-01 00:00 UTC (without a zone the file's clock is taken as UTC): 1; 0 when it is
   not written as a date; -1 when it is but names no time of the calendar (why says which
   field: year 0, month 13, February 30, hour 25 or 24:01, minute or second 60); 24:00 is
   the end of the day, the next one's 00:00 */
static int gpt2rt__date_parse(const char *b, const char *e, double *t, gpt2rt__date_fmt *fmt, char *why, size_t why_cap) {
    int64_t y, mo, d, h = 0, mi = 0, sec = 0, zh = 0, zm = 0;
    double frac = 0;
    const char *p = b, *q;
    int n;
    gpt2rt__date_fmt f;
    memset(&f, 0, sizeof f);
    f.dsep = '-'; f.tsep = ' '; f.parts = 3;
    d = 1;
    if (!gpt2rt__date_digits(&p, e, 4, 4, &y)) return 0;
    if (p == e) { /* a year alone: four digits, 1000..9999 (0123 is a number, not a year) */
        if (*b == '0') return 0;
        f.form = GPT2RT__DATE_YEAR;
        mo = 1;
        goto check;
    }
    q = p + (p + 1 < e && (*p == '-' || *p == ' '));
    if (*q == 'Q' || *q == 'q') { /* a quarter: 1959Q1 */
        int64_t qn;
        memcpy(f.qsep, p, (size_t)(q - p + 1));
        p = q + 1;
        if (!gpt2rt__date_digits(&p, e, 1, 1, &qn) || p != e) return 0;
        if (qn < 1 || qn > 4) {
            snprintf(why, why_cap, "quarter %lld is not in 1..4", (long long)qn);
            return -1;
        }
        f.form = GPT2RT__DATE_QUARTER;
        mo = 3 * qn - 2;
        goto check;
    }
    if (*p != '-' && *p != '/') return 0;
    f.dsep = *p++;
    q = p;
    if (!(n = gpt2rt__date_digits(&p, e, 1, 2, &mo))) return 0;
    f.width[0] = gpt2rt__date_width(q, n);
    if (p == e) { f.form = GPT2RT__DATE_MONTH; goto check; } /* a year-month: 2020-03 */
    if (*p != f.dsep) return 0;
    q = ++p;
    if (!(n = gpt2rt__date_digits(&p, e, 1, 2, &d))) return 0;
    f.width[1] = gpt2rt__date_width(q, n);
    if (p < e && (*p == ' ' || *p == 'T')) {
        f.tsep = *p++;
        while (p < e && *p == ' ') p++;
        q = p;
        if (!(n = gpt2rt__date_digits(&p, e, 1, 2, &h)) || p == e || *p != ':') return 0;
        f.width[2] = gpt2rt__date_width(q, n);
        p++;
        if (!gpt2rt__date_digits(&p, e, 2, 2, &mi)) return 0;
        f.parts = 5;
        if (p < e && *p == ':') {
            p++;
            if (!gpt2rt__date_digits(&p, e, 2, 2, &sec)) return 0;
            f.parts = 6;
            if (p < e && *p == '.') {
                double scale = 0.1;
                for (p++; p < e && *p >= '0' && *p <= '9'; p++, scale *= 0.1) {
                    frac += (*p - '0') * scale;
                    if (f.frac < 9) f.frac++;
                }
            }
        }
        if (p < e && (*p == '+' || *p == '-')) {
            const char *z = p++;
            if (!gpt2rt__date_digits(&p, e, 2, 2, &zh)) return 0;
            if (p < e && *p == ':') {
                p++;
                if (!gpt2rt__date_digits(&p, e, 2, 2, &zm)) return 0;
            } else if (p < e && *p >= '0' && *p <= '9' && !gpt2rt__date_digits(&p, e, 2, 2, &zm)) return 0;
            memcpy(f.zone, z, (size_t)(p - z)); /* at most "+hh:mm" */
            f.zone_s = (int)((*z == '-' ? -1 : 1) * (zh * 3600 + zm * 60));
        }
    }
    if (p < e && *p == 'Z' && !f.zone[0]) { f.zone[0] = 'Z'; p++; }
    if (p != e) return 0;
check:;
    int md = mo >= 1 && mo <= 12 ? gpt2rt__month_days(y, mo) : 0;
    if (y < 1) snprintf(why, why_cap, "year 0 is before year 1");
    else if (!md) snprintf(why, why_cap, "month %lld is not in 1..12", (long long)mo);
    else if (d < 1 || d > md)
        snprintf(why, why_cap, "day %lld is not in 1..%d (%04lld-%02lld has %d days)", (long long)d, md, (long long)y,
                 (long long)mo, md);
    else if (h > 23 && !(h == 24 && mi == 0 && sec == 0 && frac == 0)) /* 24:00: the day's end (ISO 8601, TMY3) */
        snprintf(why, why_cap, "hour %lld is not in 0..23 (or 24:00, the day's end)", (long long)h);
    else if (mi > 59) snprintf(why, why_cap, "minute %lld is not in 0..59", (long long)mi);
    else if (sec > 59) snprintf(why, why_cap, "second %lld is not in 0..59", (long long)sec);
    else if (zh > 23 || zm > 59) snprintf(why, why_cap, "the zone %s is not within -23:59..+23:59", f.zone);
    else {
        *t = (double)gpt2rt__days_from_civil(y, mo, d) * 86400.0 + (double)(h * 3600 + mi * 60 + sec) + frac - f.zone_s;
        if (fmt) *fmt = f;
        return 1;
    }
    return -1;
}

/* the header names the AUTO rule takes for the date: date, time, timestamp, datetime, year */
static int gpt2rt__csv_date_name(const char *b, const char *e) {
    static const char *names[] = {"date", "time", "timestamp", "datetime", "year"};
    size_t n = (size_t)(e - b);
    for (int k = 0; k < 5; k++) {
        if (strlen(names[k]) != n) continue;
        size_t i = 0;
        while (i < n && (b[i] >= 'A' && b[i] <= 'Z' ? b[i] + 32 : b[i]) == names[k][i]) i++;
        if (i == n) return 1;
    }
    return 0;
}

/* a missing value: an empty field, NA, N/A, NaN or null (any case) */
static int gpt2rt__csv_missing(const char *b, const char *e) {
    static const char *names[] = {"na", "n/a", "nan", "null"};
    size_t n = (size_t)(e - b);
    if (n == 0) return 1;
    for (int k = 0; k < 4; k++) {
        if (strlen(names[k]) != n) continue;
        size_t i = 0;
        while (i < n && (b[i] >= 'A' && b[i] <= 'Z' ? b[i] + 32 : b[i]) == names[k][i]) i++;
        if (i == n) return 1;
    }
    return 0;
}

/* the message's list of the header's columns, the date's left out: "a", "b", ... */
static void gpt2rt__csv_list(char *error, size_t k, const gpt2rt__csv_field *hdr, int64_t ncol, int64_t datec) {
    int first = 1;
    for (int64_t c = 0; c < ncol && k < 400; c++) {
        if (c == datec || hdr[c].b == hdr[c].e) continue; /* the date, a skipped index */
        char show[40];
        gpt2rt__csv_show(show, hdr[c].b, hdr[c].e);
        k += (size_t)snprintf(error + k, 512 - k, "%s %s", first ? "" : ",", show);
        first = 0;
    }
    if (first) snprintf(error + k, 512 - k, " none but the date");
}

/* the column named [b, b+n) in the header, -1 if none */
static int64_t gpt2rt__csv_find(const gpt2rt__csv_field *hdr, int64_t ncol, const char *b, size_t n) {
    for (int64_t c = 0; c < ncol; c++)
        if ((size_t)(hdr[c].e - hdr[c].b) == n && memcmp(hdr[c].b, b, n) == 0) return c;
    return -1;
}

typedef struct gpt2rt__csv_name { const char *b; size_t n; int64_t c; } gpt2rt__csv_name;

static int gpt2rt__csv_name_cmp(const void *x, const void *y) {
    const gpt2rt__csv_name *a = (const gpt2rt__csv_name *)x, *b = (const gpt2rt__csv_name *)y;
    int k = memcmp(a->b, b->b, a->n < b->n ? a->n : b->n);
    if (k) return k;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return a->c < b->c ? -1 : a->c > b->c;
}

/* every header name present and different from the others (columns are found by name:
   an empty or repeated one would make a file that loads once and not again); 0 after an
   error. Sorted, so a header of many columns takes n log n. */
static int gpt2rt__csv_names_ok(gpt2rt_series *s, const char *name, const gpt2rt__csv_field *hdr, int64_t ncol) {
    /* pandas' df.to_csv() writes its row index as an unnamed first column: taken as an
       index, skipped, when its fields count the rows (checked row by row) */
    s->info.index_column_skipped = ncol > 1 && hdr[0].b == hdr[0].e;
    for (int64_t c = s->info.index_column_skipped; c < ncol; c++)
        if (hdr[c].b == hdr[c].e) {
            gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: column %lld of the header (line 1) has no name; every "
                            "column needs one, different from the others (columns are found by name)", name,
                            (long long)(c + 1));
            return 0;
        }
    gpt2rt__csv_name *v = (gpt2rt__csv_name *)malloc(sizeof(gpt2rt__csv_name) * (size_t)ncol);
    if (!v) { gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", name); return 0; }
    for (int64_t c = 0; c < ncol; c++) { v[c].b = hdr[c].b; v[c].n = (size_t)(hdr[c].e - hdr[c].b); v[c].c = c; }
    qsort(v, (size_t)ncol, sizeof *v, gpt2rt__csv_name_cmp);
    int64_t first = -1, second = -1; /* the repeat with the earliest second use */
    for (int64_t i = 1; i < ncol; i++)
        if (v[i].n == v[i - 1].n && !memcmp(v[i].b, v[i - 1].b, v[i].n) && (i < 2 || v[i - 2].n != v[i].n ||
            memcmp(v[i - 2].b, v[i].b, v[i].n)) && (second < 0 || v[i].c < second)) {
            first = v[i - 1].c;
            second = v[i].c;
        }
    free(v);
    if (second < 0) return 1;
    char show[40];
    gpt2rt__csv_show(show, hdr[first].b, hdr[first].e);
    gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: the header (line 1) names columns %lld and %lld both %s; every "
                    "column needs a name of its own (columns are found by name)", name, (long long)(first + 1),
                    (long long)(second + 1), show);
    return 0;
}

/* the date column as desc asks (see gpt2rt_series_desc), -1 for none, -2 after an
   error; row1 [rb, re) is the first data row (may be empty) */
static int64_t gpt2rt__csv_date_col(gpt2rt_series *s, const char *name, const gpt2rt__csv_field *hdr, int64_t ncol,
                                    const char *rb, const char *re) {
    const char *want = s->desc.date_column;
    if (s->desc.no_date_column) return -1;
    if (want && want[0]) {
        int64_t c = gpt2rt__csv_find(hdr, ncol, want, strlen(want));
        if (c < 0 && !strcmp(want, "none")) return -1; /* no column of that name: none */
        if (c < 0) {
            size_t k = (size_t)snprintf(s->error, 512, "%s: no column named \"%.64s\" (the date column); the header (line "
                                        "1) has:", name, want);
            gpt2rt__csv_list(s->error, k, hdr, ncol, -1);
            return -2;
        }
        return c;
    }
    for (int64_t c = 0; c < ncol; c++)
        if (gpt2rt__csv_date_name(hdr[c].b, hdr[c].e)) return c;
    int64_t c0 = s->info.index_column_skipped; /* the first column, past a skipped index */
    if (rb < re && c0 < ncol) { /* the first column, when its first field is text */
        gpt2rt__csv_field f0[2];
        double v;
        if (gpt2rt__csv_split(rb, re, f0, 2) > c0 && !gpt2rt__csv_number(f0[c0].b, f0[c0].e, &v) &&
            !gpt2rt__csv_missing(f0[c0].b, f0[c0].e))
            return c0;
    }
    return -1;
}

/* the channels' file columns into col (M of them), as desc asks; 0 after an error */
static int gpt2rt__csv_channels(gpt2rt_series *s, const gpt2rt_series_desc *d, const char *name,
                                const gpt2rt__csv_field *hdr, int64_t ncol, int64_t datec, int *col, int64_t *M) {
    const char *list = d->columns && d->columns[0] ? d->columns : d->target && d->target[0] ? d->target : NULL;
    *M = 0;
    if (!list) {
        for (int64_t c = s->info.index_column_skipped; c < ncol; c++)
            if (c != datec) col[(*M)++] = (int)c;
        if (*M == 0) {
            char show[40];
            gpt2rt__csv_show(show, hdr[datec].b, hdr[datec].e);
            gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: the header (line 1) has 1 column, %s, the date column; at "
                            "least one numeric column is needed (comma-separated)", name, show);
            return 0;
        }
        return 1;
    }
    const char *what = d->columns && d->columns[0] ? "columns" : "target";
    for (const char *p = list;;) {
        const char *c = p;
        while (*c && *c != ',') c++;
        const char *b = p, *e = gpt2rt__csv_trim(&b, c);
        int64_t k = gpt2rt__csv_find(hdr, ncol, b, (size_t)(e - b));
        if (b == e || k < 0 || k == datec) {
            size_t n = b == e ? (size_t)snprintf(s->error, 512, "%s: %s: an empty name in \"%.64s\";", name, what, list)
                     : (size_t)snprintf(s->error, 512, "%s: no column named \"%.*s\" (%s)%s; the header (line 1) has:",
                                        name, (int)(e - b < 64 ? e - b : 64), b, what,
                                        k >= 0 ? " among the numeric columns: it is the date column" : "");
            gpt2rt__csv_list(s->error, n < 512 ? n : 511, hdr, ncol, k >= 0 ? -1 : datec);
            return 0;
        }
        for (int64_t m = 0; m < *M; m++)
            if (col[m] == k) {
                gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: %s: column \"%.*s\" is named twice", name, what,
                                (int)(e - b < 64 ? e - b : 64), b);
                return 0;
            }
        col[(*M)++] = (int)k;
        if (!*c) return 1;
        p = c + 1;
    }
}

/* desc.fill over raw (rows, M), NAN where a value was missing; 0 (and the message)
   when a channel has no value at all */
static int gpt2rt__series_fill(gpt2rt_series *s, const char *name, double *raw, int64_t rows, int64_t M) {
    for (int64_t m = 0; m < M; m++) {
        int64_t prev = -1;
        for (int64_t t = 0; t <= rows; t++) {
            if (t < rows && raw[t * M + m] != raw[t * M + m]) continue;
            if (t == rows && prev < 0) {
                gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: column \"%s\" has no value in any of its %lld rows: "
                                "nothing to fill from", name, s->name[m], (long long)rows);
                return 0;
            }
            for (int64_t k = prev + 1; k < t; k++) {
                double a = prev >= 0 ? raw[prev * M + m] : raw[t * M + m], z = t < rows ? raw[t * M + m] : a;
                raw[k * M + m] = s->desc.fill == GPT2RT_SERIES_FILL_LINEAR && prev >= 0 && t < rows
                                     ? a + (z - a) * (double)(k - prev) / (double)(t - prev) : prev >= 0 ? a : z;
            }
            prev = t;
        }
    }
    return 1;
}

/* the most common positive step between consecutive dates, 0 when a date does not
   parse or none increases */
static double gpt2rt__series_step(const double *time, int64_t rows) {
    if (rows < 2) return 0;
    double *d = (double *)malloc(sizeof(double) * (size_t)(rows - 1));
    if (!d) return 0;
    int64_t n = 0;
    for (int64_t t = 1; t < rows; t++) {
        double v = time[t] - time[t - 1];
        if (v != v) { free(d); return 0; }
        if (v > 0) d[n++] = v;
    }
    for (int64_t i = 1; i < n; i++) { /* insertion sort, from the already sorted common case */
        double v = d[i];
        int64_t j = i;
        while (j > 0 && d[j - 1] > v) { d[j] = d[j - 1]; j--; }
        d[j] = v;
    }
    double best = 0;
    int64_t best_run = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j < n && d[j] == d[i]) j++;
        if (j - i > best_run) { best_run = j - i; best = d[i]; }
        i = j;
    }
    free(d);
    return best;
}

/* a day's weekday, 0 Monday .. 6 Sunday, and a weekday's number among weekdays (1970-01-05,
   day 4, was a Monday): five a week, so business-day steps are differences */
static int64_t gpt2rt__weekday(int64_t day) { return ((day - 4) % 7 + 7) % 7; }
static int64_t gpt2rt__business_day(int64_t day) {
    int64_t w = gpt2rt__weekday(day);
    return (day - 4 - w) / 7 * 5 + w;
}
static int64_t gpt2rt__business_day_inv(int64_t b) {
    int64_t w = (b % 5 + 5) % 5;
    return 4 + (b - w) / 5 * 7 + w;
}

/* a date's day since 1970-01-01 and second of the day, in the file's zone */
static int64_t gpt2rt__date_day(double t, int zone_s, double *sod) {
    double local = t + zone_s, day = floor(local / 86400.0);
    if (sod) *sod = local - day * 86400.0;
    return (int64_t)day;
}

/* info.date_calendar, date_months, date_month_end, season (and date_day) from the dates:
   MONTHS when every step is a whole number of months (the same time of day, the day of
   the month kept, or the month's last when shorter), BUSINESS_DAYS when every date is a
   weekday at the same time of day, mostly one weekday after the last, a weekend skipped
   somewhere; else FIXED at date_step */
static void gpt2rt__series_calendar(gpt2rt_series *s) {
    gpt2rt_series_info *in = &s->info;
    int64_t rows = in->rows;
    double step = in->date_step;
    in->date_calendar = step > 0 ? GPT2RT_SERIES_CALENDAR_FIXED : GPT2RT_SERIES_CALENDAR_NONE;
    in->season = 1;
    if (!in->date_is_calendar || !(step > 0)) return;
    double *idx = (double *)malloc(sizeof(double) * 2 * (size_t)rows), *bidx = idx ? idx + rows : NULL; /* month,
                                                                                     weekday numbers */
    int months = idx != NULL, business = idx != NULL, weekend = 0, month_end = 1, day_max = 0;
    double sod0 = 0;
    for (int64_t t = 0; idx && t < rows; t++) {
        double sod;
        int64_t day = gpt2rt__date_day(s->time[t], s->date_fmt.zone_s, &sod), y;
        int m, d;
        gpt2rt__civil_from_days(day, &y, &m, &d);
        if (!t) sod0 = sod;
        idx[t] = (double)(y * 12 + m - 1);
        bidx[t] = (double)gpt2rt__business_day(day);
        month_end &= d == gpt2rt__month_days(y, m);
        if (d > day_max) day_max = d;
        if (sod != sod0) months = business = 0;
        if (gpt2rt__weekday(day) > 4) business = 0;
        if (t && idx[t] <= idx[t - 1]) months = 0;
        if (t && bidx[t] <= bidx[t - 1]) business = 0;
        if (t && (double)day - floor((s->time[t - 1] + s->date_fmt.zone_s) / 86400.0) > bidx[t] - bidx[t - 1]) weekend = 1;
    }
    for (int64_t t = 0; months && t < rows; t++) { /* the day of the month kept, or the month's last */
        int64_t y;
        int m, d;
        gpt2rt__civil_from_days(gpt2rt__date_day(s->time[t], s->date_fmt.zone_s, NULL), &y, &m, &d);
        int md = gpt2rt__month_days(y, m);
        if (d != (day_max < md ? day_max : md)) months = 0;
    }
    int64_t k = months ? (int64_t)gpt2rt__series_step(idx, rows) : 0;
    if (k >= 1) {
        in->date_calendar = GPT2RT_SERIES_CALENDAR_MONTHS;
        in->date_months = (int)k; /* below 12 * 9999: the dates are in years 1..9999 */
        in->date_month_end = month_end;
        s->date_day = day_max;
        in->season = in->date_months < 12 && 12 % in->date_months == 0 ? 12 / in->date_months : 1;
    } else if (business && weekend && gpt2rt__series_step(bidx, rows) == 1.0) {
        in->date_calendar = GPT2RT_SERIES_CALENDAR_BUSINESS_DAYS;
        in->season = 5;
    } else if (step == 604800.0) in->season = 52;
    else if (step == 86400.0) in->season = 7;
    else if (step >= 1.0 && step <= 43200.0 && fmod(86400.0, step) == 0) in->season = (int)(86400.0 / step);
    free(idx);
}

GPT2RT_DEF gpt2rt_result gpt2rt_series_load_mem(gpt2rt_series **out, const void *data, size_t len, const char *name,
                                                const gpt2rt_series_desc *desc) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    gpt2rt_series *s = (gpt2rt_series *)calloc(1, sizeof(gpt2rt_series));
    *out = s;
    if (!s) return GPT2RT_ERR_OUT_OF_MEMORY;
    if (!name) name = "series";
    if (!desc || (!data && len))
        return gpt2rt__series_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", name,
                                                           desc ? "data" : "desc"));
    if (desc->lookback < 1 || desc->horizon < 1 || (unsigned)desc->borders > GPT2RT_SERIES_BORDERS_NONE ||
        (unsigned)desc->fill > GPT2RT_SERIES_FILL_LINEAR)
        return gpt2rt__series_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: lookback = %d and "
                                                           "horizon = %d must be >= 1, borders = %d in [0, %d], fill = %d "
                                                           "in [0, %d]", name, desc->lookback, desc->horizon,
                                                           (int)desc->borders, (int)GPT2RT_SERIES_BORDERS_NONE,
                                                           (int)desc->fill, (int)GPT2RT_SERIES_FILL_LINEAR));
    if (desc->no_date_column && desc->date_column && desc->date_column[0])
        return gpt2rt__series_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: no_date_column = "
                                                           "%d and date_column = \"%.64s\": set one", name,
                                                           desc->no_date_column, desc->date_column));
    if (desc->target && desc->target[0] && desc->columns && desc->columns[0])
        return gpt2rt__series_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: target (\"%.64s\") "
                                                           "and columns (\"%.64s\") both choose the channels: set one",
                                                           name, desc->target, desc->columns));
    s->desc = *desc;
    s->desc.target = NULL; /* the caller's strings are read while loading only */
    s->desc.columns = NULL;
    const char *p = (const char *)data, *end = p + len;
    if (len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3; /* a UTF-8 byte-order mark */
    /* the header */
    const char *nl; /* the start of the next line */
    const char *he = gpt2rt__csv_eol(p, end, &nl);
    if (p == he)
        return gpt2rt__series_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: line 1 is empty: a CSV "
                                                           "starts with a header (date,column,... or column,...)%s", name,
                                                           len ? "" : " (the file is empty)"));
    int64_t ncol = gpt2rt__csv_split(p, he, NULL, 0);
    /* hdr: the header's fields (kept for messages), f: the current row's */
    gpt2rt__csv_field *hdr = (gpt2rt__csv_field *)malloc(sizeof(gpt2rt__csv_field) * 2 * (size_t)ncol), *f = hdr + ncol;
    int *col = (int *)malloc(sizeof(int) * (size_t)ncol); /* the file column of channel m */
    int *chan = (int *)malloc(sizeof(int) * (size_t)ncol); /* the channel of file column c, -1 if none */
    if (!hdr || !col || !chan) {
        free(hdr); free(col); free(chan);
        return gpt2rt__series_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld "
                                                           "columns", name, (long long)ncol));
    }
    gpt2rt_result r = GPT2RT_OK;
    double *raw = NULL; /* (rows, M) as parsed: the scaler is fit in double, as sklearn's on pandas' float64 */
    int64_t missing = 0;
    gpt2rt__csv_split(p, he, hdr, ncol);
    int64_t M = 0, datec;
    if (!gpt2rt__csv_names_ok(s, name, hdr, ncol)) { r = GPT2RT_ERR_FORMAT; goto done; }
    {
        const char *n2, *re = gpt2rt__csv_eol(nl, end, &n2);
        datec = gpt2rt__csv_date_col(s, name, hdr, ncol, nl, re);
        s->desc.date_column = NULL;
        if (datec == -2 || !gpt2rt__csv_channels(s, desc, name, hdr, ncol, datec, col, &M)) { r = GPT2RT_ERR_FORMAT; goto done; }
    }
    s->info.date_column = (int)datec;
    for (int64_t c = 0; c < ncol; c++) chan[c] = -1;
    for (int64_t m = 0; m < M; m++) chan[col[m]] = (int)m;
    {   /* the names of the channels, then the date column's */
        size_t total = datec >= 0 ? (size_t)(hdr[datec].e - hdr[datec].b) + 1 : 0;
        for (int64_t m = 0; m < M; m++) total += (size_t)(hdr[col[m]].e - hdr[col[m]].b) + 1;
        s->names = (char *)malloc(total ? total : 1);
        s->name = (char **)malloc(sizeof(char *) * (size_t)M);
        if (!s->names || !s->name) { r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", name); goto done; }
        char *q = s->names;
        for (int64_t m = 0; m <= M; m++) {
            int64_t c = m < M ? col[m] : datec;
            if (c < 0) break;
            size_t n = (size_t)(hdr[c].e - hdr[c].b);
            memcpy(q, hdr[c].b, n);
            q[n] = 0;
            if (m < M) s->name[m] = q;
            else s->date_name = q;
            q += n + 1;
        }
    }
    /* the rows: every field but the date's checked (numbers in every column, chosen or not) */
    {
        int64_t rows = 0, cap = 0, line = 1;
        int width_seen[3] = {0, 0, 0}; /* month, day, hour: 1 a leading zero seen, 2 one digit seen */
        int64_t index_base = 0;        /* a skipped index's first row number: 0 or 1 */
        for (p = nl; p < end; p = nl) {
            line++;
            const char *le = gpt2rt__csv_eol(p, end, &nl);
            if (le == p) { /* blank lines may only end the file */
                const char *q = le;
                while (q < end && (*q == '\n' || *q == '\r')) q++;
                if (q == end) break;
                r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: line %lld is empty, but data rows follow it", name,
                                    (long long)line);
                goto done;
            }
            int64_t n = gpt2rt__csv_split(p, le, f, ncol);
            if (n != ncol) {
                r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: line %lld has %lld fields; the header (line 1) has "
                                    "%lld (a ragged row)", name, (long long)line, (long long)n, (long long)ncol);
                goto done;
            }
            if (rows == cap) {
                int64_t nc = cap ? 2 * cap : 1024;
                double *nv = (double *)realloc(raw, sizeof(double) * (size_t)(nc * M));
                double *nt = datec >= 0 ? (double *)realloc(s->time, sizeof(double) * (size_t)nc) : NULL;
                if (nv) raw = nv;
                if (nt) s->time = nt;
                if (!nv || (datec >= 0 && !nt)) {
                    r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld rows", name,
                                        (long long)nc);
                    goto done;
                }
                cap = nc;
            }
            if (s->info.index_column_skipped) { /* the index counts the rows: 0, 1, 2, ... or 1, 2, 3, ... */
                const char *b = f[0].b;
                int64_t v = 0, want = rows + (rows ? index_base : 0);
                int ok = b < f[0].e && (*b != '0' || f[0].e - b == 1) && f[0].e - b <= 18;
                for (; ok && b < f[0].e; b++) {
                    ok = *b >= '0' && *b <= '9';
                    v = v * 10 + (*b - '0');
                }
                if (ok && !rows && (v == 0 || v == 1)) index_base = v, want = v;
                if (!ok || v != want) {
                    char show[40], wants[32];
                    gpt2rt__csv_show(show, f[0].b, f[0].e);
                    snprintf(wants, sizeof wants, rows ? "%lld" : "0 or 1", (long long)want);
                    r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: column 1 of the header (line 1) has no name, "
                                        "and line %lld holds %s there, not %s: an unnamed first column is skipped "
                                        "only as the row index pandas writes (0, 1, 2, ... or 1, 2, 3, ...); every "
                                        "other column needs a name of its own (columns are found by name)", name,
                                        (long long)line, show, wants);
                    goto done;
                }
            }
            for (int64_t c = s->info.index_column_skipped; c < ncol; c++) {
                double v;
                if (c == datec) {
                    gpt2rt__date_fmt fmt;
                    char why[96];
                    int dk = gpt2rt__date_parse(f[c].b, f[c].e, &v, &fmt, why, sizeof why);
                    if (dk < 0) {
                        char show[40], hname[40];
                        gpt2rt__csv_show(show, f[c].b, f[c].e);
                        gpt2rt__csv_show(hname, hdr[c].b, hdr[c].e);
                        r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: line %lld (data row %lld), column %lld "
                                            "(%s): the date %s is not on the calendar: %s", name, (long long)line,
                                            (long long)rows, (long long)(c + 1), hname, show, why);
                        goto done;
                    }
                    if (dk && fmt.form == GPT2RT__DATE_YEAR) { /* a year, or a number: the column decides */
                        s->time_kind |= 8;
                        s->date_fmt = fmt;
                        gpt2rt__csv_number(f[c].b, f[c].e, &v);
                    } else if (dk) {
                        s->time_kind |= 2;
                        s->date_fmt = fmt;
                        for (int k = 0; k < 3; k++) width_seen[k] |= fmt.width[k] == 2 ? 1 : fmt.width[k] == 1 ? 2 : 0;
                    } else if (gpt2rt__csv_number(f[c].b, f[c].e, &v)) s->time_kind |= 1;
                    else { v = NAN; s->time_kind |= 4; }
                    s->time[rows] = v;
                    continue;
                }
                if (!gpt2rt__csv_number(f[c].b, f[c].e, &v)) {
                    char show[40], hname[40];
                    gpt2rt__csv_show(show, f[c].b, f[c].e);
                    gpt2rt__csv_show(hname, hdr[c].b, hdr[c].e);
                    int miss = gpt2rt__csv_missing(f[c].b, f[c].e);
                    if (miss && chan[c] < 0) continue; /* a column not read: nothing to fill */
                    if (miss && desc->fill != GPT2RT_SERIES_FILL_REFUSE) { missing++; v = NAN; }
                    else {
                        r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: line %lld, column %lld (%s): %s is %s", name,
                                            (long long)line, (long long)(c + 1), hname, show,
                                            !miss ? "not a finite number that fits a float"
                                            : f[c].b == f[c].e ? "missing (an empty field); fill = PREVIOUS or LINEAR "
                                                                 "(--fill previous|linear) fills missing values"
                                                               : "a missing value; fill = PREVIOUS or LINEAR (--fill "
                                                                 "previous|linear) fills missing values");
                        goto done;
                    }
                }
                if (chan[c] >= 0) raw[rows * M + chan[c]] = v;
            }
            rows++;
        }
        s->info.rows = rows;
        s->info.channels = (int)M;
        if (rows == 0) {
            r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: no data rows after the header (line 1)", name);
            goto done;
        }
        if (missing && !gpt2rt__series_fill(s, name, raw, rows, M)) { r = GPT2RT_ERR_FORMAT; goto done; }
        s->info.filled = missing;
        /* four-digit numbers alone are years (January 1st); among other numbers, numbers */
        if (s->time_kind == 8)
            for (int64_t t = 0; t < rows; t++) s->time[t] = (double)gpt2rt__days_from_civil((int64_t)s->time[t], 1, 1) * 86400.0;
        s->time_kind = s->time_kind == 8 ? 2 : s->time_kind & 8 ? (s->time_kind & ~8) | 1 : s->time_kind;
        /* dates, or plain numbers, in every row: a step; a mixture or text: none */
        if (s->time_kind != 1 && s->time_kind != 2) s->time_kind = 0;
        {   /* the widths written back: a leading zero anywhere pads the field, one digit
               unpads it; a field always of two digits (a day 10-31) follows the others */
            int unpadded = 0;
            for (int k = 0; k < 3; k++) {
                s->date_fmt.width[k] = width_seen[k] & 1 ? 2 : width_seen[k] & 2 ? 1 : 0;
                unpadded |= s->date_fmt.width[k] == 1;
            }
            for (int k = 0; k < 3; k++)
                if (!s->date_fmt.width[k]) s->date_fmt.width[k] = unpadded ? 1 : 2;
        }
        if (datec >= 0 && s->time_kind) s->info.date_step = gpt2rt__series_step(s->time, rows);
        s->info.date_is_calendar = datec >= 0 && s->time_kind == 2;
        if (datec >= 0) gpt2rt__series_calendar(s);
        else s->info.season = 1;
    }
    /* borders: AUTO reads the name's last path component */
    {
        gpt2rt_series_borders b = desc->borders;
        if (b == GPT2RT_SERIES_BORDERS_AUTO) {
            const char *base = name;
            for (const char *q = name; *q; q++) if (*q == '/' || *q == '\\') base = q + 1;
            b = strncmp(base, "ETTh", 4) == 0 ? GPT2RT_SERIES_BORDERS_ETTH
              : strncmp(base, "ETTm", 4) == 0 ? GPT2RT_SERIES_BORDERS_ETTM : GPT2RT_SERIES_BORDERS_RATIO;
        }
        s->info.borders = b;
        r = gpt2rt__series_borders(s, name, desc->lookback, desc->horizon);
        if (r != GPT2RT_OK) goto done;
    }
    /* StandardScaler on the training rows, fit and applied in double, rounded to
       float once (the Time-Series-Library's float64 arrays become fp32 tensors) */
    s->mean = (double *)calloc((size_t)M, sizeof(double));
    s->std = (double *)calloc((size_t)M, sizeof(double));
    s->values = (float *)malloc(sizeof(float) * (size_t)(s->info.rows * M));
    if (!s->mean || !s->std || !s->values) { r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", name); goto done; }
    {
        int64_t n = s->info.end[GPT2RT_SERIES_TRAIN], rows = s->info.rows;
        for (int64_t m = 0; m < M; m++) {
            double mu = 0.0, var = 0.0;
            for (int64_t t = 0; t < n; t++) mu += raw[t * M + m];
            mu /= (double)n;
            for (int64_t t = 0; t < n; t++) { double c = raw[t * M + m] - mu; var += c * c; }
            var /= (double)n;
            /* sklearn's _handle_zeros_in_scale: a (near-)constant column keeps scale 1 */
            double sd = sqrt(var);
            if (sd < 10.0 * 2.220446049250313e-16 * (fabs(mu) > 1.0 ? fabs(mu) : 1.0)) sd = 1.0;
            if (desc->no_scale) { mu = 0.0; sd = 1.0; }
            s->mean[m] = mu;
            s->std[m] = sd;
            for (int64_t t = 0; t < rows; t++) {
                double z = (raw[t * M + m] - mu) / sd;
                if (!(fabs(z) <= 3.4028234663852886e38)) {
                    r = gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: line %lld, column \"%s\": the scaled value "
                                        "(%g - mean %g) / std %g = %g does not fit a float", name, (long long)t + 2,
                                        s->name[m], raw[t * M + m], mu, sd, z);
                    goto done;
                }
                s->values[t * M + m] = (float)z;
            }
        }
    }
done:
    free(hdr);
    free(col);
    free(chan);
    free(raw);
    return gpt2rt__series_done(out, s, r);
}

GPT2RT_DEF gpt2rt_result gpt2rt_series_load(gpt2rt_series **out, const char *path, const gpt2rt_series_desc *desc) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    unsigned char *buf;
    size_t len;
    char error[512];
    gpt2rt_result r = path ? gpt2rt__tok_read_file(path, &buf, &len, error)
                           : gpt2rt__tok_msg(error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_load: path is NULL");
    if (r != GPT2RT_OK) {
        gpt2rt_series *s = (gpt2rt_series *)calloc(1, sizeof(gpt2rt_series));
        *out = s;
        if (s) { memcpy(s->error, error, sizeof error); s->failed = 1; }
        return r;
    }
    r = gpt2rt_series_load_mem(out, buf, len, path, desc);
    free(buf);
    return r;
}

GPT2RT_DEF void gpt2rt_series_free(gpt2rt_series *s) {
    if (!s) return;
    free(s->values); free(s->mean); free(s->std); free(s->names); free(s->name); free(s->time);
    free(s);
}

GPT2RT_DEF const char *gpt2rt_series_last_error(const gpt2rt_series *s) {
    return s ? s->error : "gpt2rt_series: no series (out of memory)";
}

/* the read-only calls take a const series but still record why they refuse: the
   message is the one field they write (every series is ours, allocated writable) */
#define GPT2RT__SERIES_ERR(s) (((gpt2rt_series *)(s))->error)

GPT2RT_DEF gpt2rt_result gpt2rt_series_info_get(const gpt2rt_series *s, gpt2rt_series_info *info) {
    if (!s) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (s->failed) return GPT2RT_ERR_STATE; /* the message stays the load's */
    GPT2RT__SERIES_ERR(s)[0] = 0; /* the last error is this call's */
    if (!info)
        return gpt2rt__tok_msg(GPT2RT__SERIES_ERR(s), GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_info_get: info is NULL");
    *info = s->info;
    return GPT2RT_OK;
}

GPT2RT_DEF const char *gpt2rt_series_column(const gpt2rt_series *s, int m) {
    return s && !s->failed && m >= 0 && m < s->info.channels ? s->name[m] : NULL;
}

GPT2RT_DEF gpt2rt_result gpt2rt_series_scaler(const gpt2rt_series *s, int m, double *mean, double *std) {
    if (!s) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (s->failed) return GPT2RT_ERR_STATE;
    GPT2RT__SERIES_ERR(s)[0] = 0; /* the last error is this call's */
    if (!mean || !std)
        return gpt2rt__tok_msg(GPT2RT__SERIES_ERR(s), GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_scaler: %s is NULL",
                               !mean ? "mean" : "std");
    if (m < 0 || m >= s->info.channels)
        return gpt2rt__tok_msg(GPT2RT__SERIES_ERR(s), GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_scaler: channel m = %d "
                               "is outside [0, %d)", m, s->info.channels);
    *mean = s->mean[m];
    *std = s->std[m];
    return GPT2RT_OK;
}

GPT2RT_DEF const float *gpt2rt_series_values(const gpt2rt_series *s) { return s && !s->failed ? s->values : NULL; }

GPT2RT_DEF const char *gpt2rt_series_date_column(const gpt2rt_series *s) {
    return s && !s->failed ? s->date_name : NULL;
}

/* t as the file writes its dates (kind 2: fmt, in its zone) or its numbers (kind 1) */
static void gpt2rt__date_format(char *buf, size_t cap, double t, int kind, gpt2rt__date_fmt fmt) {
    if (kind == 1) {
        if (t == floor(t) && fabs(t) < 9e15) snprintf(buf, cap, "%.0f", t);
        else snprintf(buf, cap, "%.15g", t);
        return;
    }
    /* the second of the day in units of the file's last written digit, rounded once */
    int64_t unit = 1;
    for (int k = 0; k < fmt.frac && fmt.parts == 6; k++) unit *= 10;
    t += fmt.zone_s;
    double day = floor(t / 86400.0), sec = t - day * 86400.0;
    int64_t y, u = (int64_t)floor(sec * (double)unit + 0.5);
    int mo, d;
    if (u >= 86400 * unit) { day += 1; u -= 86400 * unit; }
    int64_t isec = u / unit;
    gpt2rt__civil_from_days((int64_t)day, &y, &mo, &d);
    if (fmt.form == GPT2RT__DATE_YEAR) { snprintf(buf, cap, "%04lld", (long long)y); return; }
    if (fmt.form == GPT2RT__DATE_QUARTER) { snprintf(buf, cap, "%04lld%s%d", (long long)y, fmt.qsep, (mo + 2) / 3); return; }
    if (fmt.form == GPT2RT__DATE_MONTH) { snprintf(buf, cap, "%04lld%c%0*d", (long long)y, fmt.dsep, fmt.width[0], mo); return; }
    int n = snprintf(buf, cap, "%04lld%c%0*d%c%0*d", (long long)y, fmt.dsep, fmt.width[0], mo, fmt.dsep, fmt.width[1], d);
    if (fmt.parts >= 5 && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, "%c%0*d:%02d", fmt.tsep, fmt.width[2], (int)(isec / 3600),
                      (int)(isec / 60 % 60));
    if (fmt.parts == 6 && n > 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, ":%02d", (int)(isec % 60));
    if (unit > 1 && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ".%0*lld", fmt.frac, (long long)(u % unit));
    if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "%s", fmt.zone);
}

GPT2RT_DEF gpt2rt_result gpt2rt_series_date(const gpt2rt_series *s, int64_t row, char *buf, size_t cap) {
    if (!s) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (s->failed) return GPT2RT_ERR_STATE;
    GPT2RT__SERIES_ERR(s)[0] = 0; /* the last error is this call's */
    if (!buf || cap < 1 || row < 0)
        return gpt2rt__tok_msg(GPT2RT__SERIES_ERR(s), GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_date: buf %s, cap = "
                               "%zu (>= 1), row = %lld (>= 0)", buf ? "given" : "NULL", cap, (long long)row);
    buf[0] = 0; /* an error leaves an empty string */
    int64_t rows = s->info.rows;
    if (!s->date_name)
        return gpt2rt__tok_msg(GPT2RT__SERIES_ERR(s), GPT2RT_ERR_STATE, "gpt2rt_series_date: the file has no date column");
    if (!s->time_kind)
        return gpt2rt__tok_msg(GPT2RT__SERIES_ERR(s), GPT2RT_ERR_STATE, "gpt2rt_series_date: the date column \"%s\" "
                               "holds text that is neither a date (YYYY-MM-DD[ HH:MM[:SS[.frac]]]) nor a number in "
                               "every row",
                               s->date_name);
    double t = s->time[row < rows ? row : rows - 1];
    const gpt2rt_series_info *in = &s->info;
    char step[48];
    if (in->date_calendar == GPT2RT_SERIES_CALENDAR_MONTHS)
        snprintf(step, sizeof step, "%d month%s", in->date_months, in->date_months > 1 ? "s" : "");
    else if (in->date_calendar == GPT2RT_SERIES_CALENDAR_BUSINESS_DAYS) snprintf(step, sizeof step, "1 weekday");
    else snprintf(step, sizeof step, "%g", in->date_step);
    if (row >= rows) {
        if (!(in->date_step > 0))
            return gpt2rt__tok_msg(GPT2RT__SERIES_ERR(s), GPT2RT_ERR_STATE, "gpt2rt_series_date: row %lld is past the "
                                   "%lld rows and the dates of \"%s\" have no increasing step to continue at",
                                   (long long)row, (long long)rows, s->date_name);
        int64_t n = row - rows + 1; /* steps past the last row, counted from its date: no error accumulates */
        if (in->date_calendar == GPT2RT_SERIES_CALENDAR_MONTHS || in->date_calendar == GPT2RT_SERIES_CALENDAR_BUSINESS_DAYS) {
            double sod;
            int64_t day = gpt2rt__date_day(t, s->date_fmt.zone_s, &sod), y;
            int m, d;
            if (n > (int64_t)12 * 10000 * 31) t = INFINITY; /* past the year 9999 at any step */
            else {
                if (in->date_calendar == GPT2RT_SERIES_CALENDAR_BUSINESS_DAYS)
                    day = gpt2rt__business_day_inv(gpt2rt__business_day(day) + n);
                else {
                    gpt2rt__civil_from_days(day, &y, &m, &d);
                    int64_t mi = y * 12 + (m - 1) + n * in->date_months; /* < 2^33 */
                    y = mi / 12;
                    m = (int)(mi % 12) + 1;
                    int md = gpt2rt__month_days(y, m);
                    day = gpt2rt__days_from_civil(y, m, in->date_month_end || s->date_day > md ? md : s->date_day);
                }
                t = (double)day * 86400.0 + sod - s->date_fmt.zone_s;
            }
        } else t += (double)n * in->date_step;
    }
    /* calendar dates stay in years 1..9999 (four digits); the half second spares the rounding */
    double lo = (double)gpt2rt__days_from_civil(1, 1, 1) * 86400.0, hi = (double)gpt2rt__days_from_civil(10000, 1, 1) * 86400.0;
    if (s->time_kind == 2 ? !(t + s->date_fmt.zone_s >= lo && t + s->date_fmt.zone_s < hi - 0.5) : !(fabs(t) <= 1.7976931348623157e308))
        return gpt2rt__tok_msg(GPT2RT__SERIES_ERR(s), GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_date: row %lld (%lld "
                               "past the last of the %lld rows, at a step of %s) has a date %s", (long long)row,
                               (long long)(row >= rows ? row - rows + 1 : 0), (long long)rows, step,
                               s->time_kind == 2 ? "past the year 9999 (or before the year 1)" : "beyond a double");
    char text[96];
    gpt2rt__date_format(text, sizeof text, t, s->time_kind, s->date_fmt);
    size_t n = strlen(text);
    if (n >= cap)
        return gpt2rt__tok_msg(GPT2RT__SERIES_ERR(s), GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_date: row %lld's date "
                               "\"%s\" needs cap = %zu bytes (with its NUL); cap is %zu", (long long)row, text, n + 1, cap);
    memcpy(buf, text, n + 1);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_series_batch(gpt2rt_series *s, gpt2rt_series_split split, uint64_t seed, int64_t epoch,
                                             int64_t first, int B, float *x, float *y) {
    if (!s) return GPT2RT_ERR_INVALID_ARGUMENT;
    if (s->failed) return GPT2RT_ERR_STATE; /* the message stays the load's */
    s->error[0] = 0;
    if (!x || !y)
        return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_batch: %s is NULL (it receives "
                               "the %s, B x %s x %d floats)", !x ? "x" : "y", !x ? "inputs" : "targets",
                               !x ? "lookback" : "horizon", s->info.channels);
    if ((unsigned)split >= GPT2RT_SERIES_SPLIT_COUNT)
        return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_batch: split = %d must lie in [0, %d)",
                               (int)split, (int)GPT2RT_SERIES_SPLIT_COUNT);
    int64_t n = s->info.windows[split];
    if (B < 1 || first < 0 || epoch < 0 || first > n - B) /* int64 minus an int: cannot overflow */
        return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_series_batch: windows [first, first + B) "
                               "with first = %lld, B = %d must lie in the %s split's [0, %lld) (B >= 1, first >= 0, "
                               "epoch = %lld >= 0)", (long long)first, B,
                               split == GPT2RT_SERIES_TRAIN ? "training" : split == GPT2RT_SERIES_VAL ? "validation" : "test",
                               (long long)n, (long long)epoch);
    int64_t M = s->info.channels, L = s->desc.lookback, H = s->desc.horizon;
    uint64_t st = seed ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ull), key = gpt2rt__rng_next(&st);
    for (int b = 0; b < B; b++) {
        int64_t w = first + b;
        if (split == GPT2RT_SERIES_TRAIN) w = (int64_t)gpt2rt__shard_permute((uint64_t)w, (uint64_t)n, key);
        const float *src = s->values + (s->info.begin[split] + w) * M;
        memcpy(x + (int64_t)b * L * M, src, sizeof(float) * (size_t)(L * M));
        memcpy(y + (int64_t)b * H * M, src + L * M, sizeof(float) * (size_t)(H * M));
    }
    return GPT2RT_OK;
}

#endif /* GPT2RT__SRC_INPUTS_SERIES_H */
