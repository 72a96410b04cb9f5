/* formats/safetensors_read.h - 4. Formats; 4.1 safetensors: reading
   may call: common/threads.h, common/errors.h */
#ifndef GPT2RT__SRC_FORMATS_SAFETENSORS_READ_H
#define GPT2RT__SRC_FORMATS_SAFETENSORS_READ_H
#include "../common/threads.h"
#include "../common/errors.h"

/* ==== 4. Formats ==== */

/* ==== 4.1 safetensors: reading ==== */

/* safetensors: 8-byte little-endian header length N, N bytes of JSON
   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
    "__metadata__": {"key": "value"}}, then the data; offsets count from the data's
   first byte. The parser trusts nothing: every length, offset and count is checked
   against the bytes that exist before use. Little-endian hosts only. */

enum { GPT2RT__F32, GPT2RT__F16, GPT2RT__BF16, GPT2RT__F64, GPT2RT__I64, GPT2RT__I32, GPT2RT__I16, GPT2RT__I8,
       GPT2RT__U8, GPT2RT__U16, GPT2RT__U32, GPT2RT__U64, GPT2RT__BOOL, GPT2RT__F8E4M3, GPT2RT__F8E5M2,
       GPT2RT__NDTYPE };
static const char *gpt2rt__dtype_names[GPT2RT__NDTYPE] = {"F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8",
                                                         "U16", "U32", "U64", "BOOL", "F8_E4M3", "F8_E5M2"};
static const int gpt2rt__dtype_size[GPT2RT__NDTYPE] = {4, 2, 2, 8, 8, 4, 2, 1, 1, 2, 4, 8, 1, 1, 1};

#define GPT2RT__ST_MAX_DIMS 8
typedef struct gpt2rt__st_tensor {
    const char *name; /* points into the parser's header copy */
    int dtype, ndim;
    int64_t shape[GPT2RT__ST_MAX_DIMS];
    uint64_t begin, end; /* bytes, relative to the data section */
} gpt2rt__st_tensor;

typedef struct gpt2rt__st {
    char *header;                   /* copy of the JSON, strings unescaped in place */
    gpt2rt__st_tensor *t;
    int n, cap;
    const char **meta;              /* key, value, key, value ... */
    int n_meta, cap_meta;
    const unsigned char *data;
    uint64_t data_len;
} gpt2rt__st;

/* ---- JSON (RFC 8259): the one reader of every JSON file the runtime takes ----
   The safetensors header, config.json, forecaster.json and the tokenizer's vocabulary
   json. Strict: numbers by the RFC's grammar exactly, strings as valid UTF-8 with
   \uXXXX (surrogate pairs joined) turned into UTF-8 and \u0000 refused, any key of any
   length, values the caller does not use validated and skipped (nesting up to
   GPT2RT__JSON_DEPTH). The text is unescaped in place (a string never grows), so a
   string read stays valid, NUL-terminated, as long as the buffer. The caller walks
   objects with _object_begin / _object_next and arrays with _array_begin / _array_next
   and refuses duplicate keys itself. Errors read "<what>: <kind> byte N: why" and go to
   the context (ctx) or, without one, into err. */

#define GPT2RT__JSON_DEPTH 512
#define GPT2RT__JSON_NUMBER_MAX 512 /* characters; Python's repr of a double takes at most 24 */

typedef struct gpt2rt__json {
    char *p, *begin, *end;     /* the text; *end must be readable as NUL */
    gpt2rt_ctx *ctx;           /* errors go to gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, ...) when non-NULL ... */
    char *err;                 /* ... else are formatted into err (err_cap bytes) */
    size_t err_cap;
    const char *what;          /* file name, for messages (NULL: none) */
    const char *kind;          /* "safetensors header", "config.json", "forecaster.json", "vocabulary json" */
    const char *key;           /* the member being read (set by _object_next), named in messages */
    int first;                 /* the innermost object or array has had no member yet */
} gpt2rt__json;

GPT2RT__MAYBE_UNUSED static void gpt2rt__json_init(gpt2rt__json *j, char *text, size_t len, gpt2rt_ctx *ctx, char *err,
                                                   size_t err_cap, const char *what, const char *kind) {
    memset(j, 0, sizeof *j);
    j->p = j->begin = text;
    j->end = text + len;
    j->ctx = ctx;
    j->err = err;
    j->err_cap = err_cap;
    j->what = what;
    j->kind = kind;
}

GPT2RT__MAYBE_UNUSED static gpt2rt_result gpt2rt__json_fail(gpt2rt__json *j, const char *msg) {
    long long at = (long long)(j->p - j->begin);
    const char *w = j->what ? j->what : "", *sep = j->what ? ": " : "", *kind = j->kind ? j->kind : "JSON";
    char key[96] = "";
    if (j->key) snprintf(key, sizeof key, "\"%.60s%s\": ", j->key, strlen(j->key) > 60 ? "..." : "");
    if (j->ctx) return gpt2rt__fail(j->ctx, GPT2RT_ERR_FORMAT, "%s%s%s byte %lld: %s%s", w, sep, kind, at, key, msg);
    if (j->err && j->err_cap) snprintf(j->err, j->err_cap, "%s%s%s byte %lld: %s%s", w, sep, kind, at, key, msg);
    return GPT2RT_ERR_FORMAT;
}

static gpt2rt_result gpt2rt__json_failf(gpt2rt__json *j, const char *fmt, ...) GPT2RT__PRINTF(2, 3);
GPT2RT__MAYBE_UNUSED static gpt2rt_result gpt2rt__json_failf(gpt2rt__json *j, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gpt2rt__json_fail(j, msg);
}

static void gpt2rt__json_ws(gpt2rt__json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

/* skips whitespace, then c */
static int gpt2rt__json_eat(gpt2rt__json *j, char c) {
    gpt2rt__json_ws(j);
    if (j->p < j->end && *j->p == c) { j->p++; return 1; }
    return 0;
}

/* the next non-space byte, -1 at the end */
GPT2RT__MAYBE_UNUSED static int gpt2rt__json_peek(gpt2rt__json *j) {
    gpt2rt__json_ws(j);
    return j->p < j->end ? (unsigned char)*j->p : -1;
}

static int gpt2rt__hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int gpt2rt__json_u4(gpt2rt__json *j, unsigned *u) {
    if (j->end - j->p < 4) return 0;
    *u = 0;
    for (int i = 0; i < 4; i++) {
        int h = gpt2rt__hex(j->p[i]);
        if (h < 0) return 0;
        *u = *u * 16 + (unsigned)h;
    }
    j->p += 4;
    return 1;
}

/* the length (2..4) of the well-formed UTF-8 sequence of a multi-byte character at
   s (n bytes available), 0 when it is not one (overlong, surrogate, above U+10FFFF) */
static int gpt2rt__json_utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    int len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || n < (size_t)len) return 0;
    for (int i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0) || (c == 0xF0 && s[1] < 0x90) ||
        (c == 0xF4 && s[1] >= 0x90))
        return 0;
    return len;
}

/* a string, unescaped in place, NUL-terminated; *n: its length in bytes. Local
   pointers (j->p is set before a message): stores through char * may alias *j. */
static gpt2rt_result gpt2rt__json_string_n(gpt2rt__json *j, const char **out, size_t *n) {
    if (!gpt2rt__json_eat(j, '"')) return gpt2rt__json_fail(j, "expected a string");
    char *p = j->p, *e = j->end, *start = p, *w;
    while (p < e) { /* plain ASCII stays where it is (most keys are nothing else) */
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
        p++;
    }
    w = p;
#define GPT2RT__JSON_SFAIL(...) do { j->p = p; return gpt2rt__json_failf(j, __VA_ARGS__); } while (0)
    while (1) {
        if (p >= e) GPT2RT__JSON_SFAIL("unterminated string");
        unsigned char c = (unsigned char)*p;
        if (c == '"') { p++; break; }
        if (c < 0x20) GPT2RT__JSON_SFAIL("control character 0x%02X in a string (write it as \\u%04X)", c, c);
        if (c >= 0x80) {
            int len = gpt2rt__json_utf8_len((const unsigned char *)p, (size_t)(e - p));
            if (!len) GPT2RT__JSON_SFAIL("invalid UTF-8 (byte 0x%02X) in a string", c);
            for (int i = 0; i < len; i++) *w++ = *p++;
            continue;
        }
        p++;
        if (c != '\\') { *w++ = (char)c; continue; }
        if (p >= e) GPT2RT__JSON_SFAIL("unterminated escape");
        char esc = *p++;
        unsigned u, lo;
        switch (esc) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u':
            j->p = p;
            if (!gpt2rt__json_u4(j, &u)) return gpt2rt__json_fail(j, "bad \\u escape (4 hex digits expected)");
            p = j->p;
            if (u >= 0xD800 && u < 0xDC00) {
                if (e - p < 2 || p[0] != '\\' || p[1] != 'u')
                    GPT2RT__JSON_SFAIL("lone surrogate \\u%04X (a high surrogate needs a low one after it)", u);
                j->p = p + 2;
                if (!gpt2rt__json_u4(j, &lo) || lo < 0xDC00 || lo >= 0xE000)
                    return gpt2rt__json_failf(j, "bad surrogate pair: \\u%04X is not followed by \\uDC00..\\uDFFF", u);
                p = j->p;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            } else if (u >= 0xDC00 && u < 0xE000)
                GPT2RT__JSON_SFAIL("lone surrogate \\u%04X (a low surrogate without a high one)", u);
            if (u == 0) GPT2RT__JSON_SFAIL("\\u0000 (NUL) in a string");
            if (u < 0x80) *w++ = (char)u;
            else if (u < 0x800) { *w++ = (char)(0xC0 | (u >> 6)); *w++ = (char)(0x80 | (u & 63)); }
            else if (u < 0x10000) {
                *w++ = (char)(0xE0 | (u >> 12)); *w++ = (char)(0x80 | ((u >> 6) & 63)); *w++ = (char)(0x80 | (u & 63));
            } else {
                *w++ = (char)(0xF0 | (u >> 18)); *w++ = (char)(0x80 | ((u >> 12) & 63));
                *w++ = (char)(0x80 | ((u >> 6) & 63)); *w++ = (char)(0x80 | (u & 63));
            }
            break;
        default:
            if ((unsigned char)esc < 0x20 || (unsigned char)esc >= 0x7F) GPT2RT__JSON_SFAIL("unknown escape");
            GPT2RT__JSON_SFAIL("unknown escape \\%c", esc);
        }
    }
#undef GPT2RT__JSON_SFAIL
    j->p = p;
    *w = 0; /* w <= the closing quote, which has been read (an escape is never shorter in the text) */
    *out = start;
    if (n) *n = (size_t)(w - start);
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__json_string(gpt2rt__json *j, const char **out) {
    return gpt2rt__json_string_n(j, out, NULL);
}

/* RFC 8259's number grammar, -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?, at
   j->p: its text [*s, j->p), *integer when it has neither fraction nor exponent */
static gpt2rt_result gpt2rt__json_scan_number(gpt2rt__json *j, const char **s, int *integer) {
    gpt2rt__json_ws(j);
    char *p = j->p, *e = j->end;
    *s = p;
    *integer = 1;
#define GPT2RT__JSON_DIGIT(q) ((q) < e && *(q) >= '0' && *(q) <= '9')
    if (p < e && *p == '-') p++;
    if (!GPT2RT__JSON_DIGIT(p)) {
        if (p < e && (*p == '.' || *p == '+' || *p == 'I' || *p == 'N' || *p == 'i' || *p == 'n'))
            return gpt2rt__json_failf(j, "'%c' cannot start a JSON number (numbers are -?digits[.digits][e[+-]digits], "
                                      "finite)", *p);
        return gpt2rt__json_fail(j, p > j->p ? "'-' without digits" : "expected a number");
    }
    if (*p == '0' && GPT2RT__JSON_DIGIT(p + 1)) {
        j->p = p;
        return gpt2rt__json_fail(j, "a number with a leading zero (JSON numbers have none)");
    }
    while (GPT2RT__JSON_DIGIT(p)) p++;
    if (p < e && *p == '.') {
        *integer = 0;
        if (!GPT2RT__JSON_DIGIT(p + 1)) { j->p = p; return gpt2rt__json_fail(j, "a number's '.' without digits after it"); }
        p++;
        while (GPT2RT__JSON_DIGIT(p)) p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        *integer = 0;
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (!GPT2RT__JSON_DIGIT(p)) { j->p = p; return gpt2rt__json_fail(j, "a number's exponent without digits"); }
        while (GPT2RT__JSON_DIGIT(p)) p++;
    }
#undef GPT2RT__JSON_DIGIT
    if (p < e && (*p == 'x' || *p == 'X' || *p == '.' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) {
        j->p = p;
        return gpt2rt__json_failf(j, "'%c' after a number (JSON numbers are decimal: -?digits[.digits][e[+-]digits])",
                                  *p);
    }
    j->p = p;
    return GPT2RT_OK;
}

/* a number, finite (-0 reads as 0); one longer than GPT2RT__JSON_NUMBER_MAX characters is
   refused as too long, one beyond double's range as out of range */
static gpt2rt_result gpt2rt__json_number(gpt2rt__json *j, double *out) {
    const char *s;
    int integer;
    gpt2rt_result r = gpt2rt__json_scan_number(j, &s, &integer);
    if (r != GPT2RT_OK) return r;
    size_t n = (size_t)(j->p - s);
    if (n > GPT2RT__JSON_NUMBER_MAX) {
        j->p = (char *)s;
        return gpt2rt__json_failf(j, "a number too long (%zu characters; at most %d are read)", n,
                                  GPT2RT__JSON_NUMBER_MAX);
    }
    char buf[GPT2RT__JSON_NUMBER_MAX + 1]; /* strtod on a copy: it would read on past the grammar ("0x1") */
    memcpy(buf, s, n);
    buf[n] = 0;
    double v = strtod(buf, NULL); /* the C locale's '.', like every number the runtime reads */
    if (!isfinite(v)) {
        j->p = (char *)s;
        return gpt2rt__json_failf(j, "%.40s%s is out of range (a double's magnitude is at most 1.8e308)", buf,
                                  n > 40 ? "..." : "");
    }
    *out = v == 0 ? 0.0 : v;
    return GPT2RT_OK;
}

/* [lo, hi] as text, for messages; u64: [0, 2^64) */
static const char *gpt2rt__json_range(char *buf, size_t cap, int64_t lo, int64_t hi, int u64) {
    if (u64) snprintf(buf, cap, "[0, 2^64)");
    else snprintf(buf, cap, "[%lld, %lld]", (long long)lo, (long long)hi);
    return buf;
}

/* an integer written as one (1.0 and 1e2 are refused): *neg and its magnitude *mag,
   *over when that exceeds lim; lo, hi, u64 only name the range in a message */
static gpt2rt_result gpt2rt__json_integer(gpt2rt__json *j, uint64_t lim, int64_t lo, int64_t hi, int u64, int *neg,
                                          uint64_t *mag, int *over, const char **s) {
    int integer;
    gpt2rt_result r = gpt2rt__json_scan_number(j, s, &integer);
    if (r != GPT2RT_OK) return r;
    size_t n = (size_t)(j->p - *s);
    if (!integer) {
        char range[64];
        j->p = (char *)*s;
        return gpt2rt__json_failf(j, "expected an integer in %s, found %.*s%s (integers are written without fraction "
                                  "or exponent)", gpt2rt__json_range(range, sizeof range, lo, hi, u64),
                                  n > 40 ? 40 : (int)n, *s, n > 40 ? "..." : "");
    }
    *neg = **s == '-';
    *mag = 0;
    *over = 0;
    const char *q = *s + *neg;
    if (j->p - q <= 18) { /* below 10^18: no overflow to watch */
        for (; q < j->p; q++) *mag = *mag * 10 + (uint64_t)(*q - '0');
        *over = *mag > lim;
        return GPT2RT_OK;
    }
    for (; q < j->p && !*over; q++) {
        if (*mag > (lim - (uint64_t)(*q - '0')) / 10) *over = 1;
        else *mag = *mag * 10 + (uint64_t)(*q - '0');
    }
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__json_int_range(gpt2rt__json *j, const char *s, int64_t lo, int64_t hi, int u64) {
    char range[64];
    size_t n = (size_t)(j->p - s);
    gpt2rt__json_range(range, sizeof range, lo, hi, u64);
    j->p = (char *)s;
    if (n > 40) return gpt2rt__json_failf(j, "an integer of %zu characters is outside %s", n, range);
    return gpt2rt__json_failf(j, "%.*s is outside %s", (int)n, s, range);
}

/* an integer in [lo, hi], written as one */
static gpt2rt_result gpt2rt__json_int(gpt2rt__json *j, int64_t lo, int64_t hi, int64_t *out) {
    const char *s;
    int neg = 0, over = 0;
    uint64_t v = 0;
    gpt2rt_result r = gpt2rt__json_integer(j, (uint64_t)INT64_MAX + 1, lo, hi, 0, &neg, &v, &over, &s);
    if (r != GPT2RT_OK) return r;
    if (!over && !neg && v > (uint64_t)INT64_MAX) over = 1;
    int64_t x = over ? 0 : neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    if (over || x < lo || x > hi) return gpt2rt__json_int_range(j, s, lo, hi, 0);
    *out = x;
    return GPT2RT_OK;
}

/* an integer in [0, UINT64_MAX] (safetensors' data_offsets) */
static gpt2rt_result gpt2rt__json_u64(gpt2rt__json *j, uint64_t *out) {
    const char *s;
    int neg = 0, over = 0;
    uint64_t v = 0;
    gpt2rt_result r = gpt2rt__json_integer(j, UINT64_MAX, 0, 0, 1, &neg, &v, &over, &s);
    if (r != GPT2RT_OK) return r;
    if (over || (neg && v)) return gpt2rt__json_int_range(j, s, 0, 0, 1);
    *out = v;
    return GPT2RT_OK;
}

static int gpt2rt__json_lit(gpt2rt__json *j, const char *lit) {
    size_t n = strlen(lit);
    gpt2rt__json_ws(j);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n)) return 0;
    j->p += n;
    return 1;
}

/* true or false */
GPT2RT__MAYBE_UNUSED static gpt2rt_result gpt2rt__json_bool(gpt2rt__json *j, int *out) {
    if (gpt2rt__json_lit(j, "true")) { *out = 1; return GPT2RT_OK; }
    if (gpt2rt__json_lit(j, "false")) { *out = 0; return GPT2RT_OK; }
    return gpt2rt__json_fail(j, "expected true or false");
}

/* 1, consumed, when the next value is null */
GPT2RT__MAYBE_UNUSED static int gpt2rt__json_null(gpt2rt__json *j) {
    return gpt2rt__json_lit(j, "null");
}

static gpt2rt_result gpt2rt__json_object_begin(gpt2rt__json *j) {
    if (!gpt2rt__json_eat(j, '{')) return gpt2rt__json_fail(j, "expected '{' (an object)");
    j->first = 1;
    return GPT2RT_OK;
}

/* 1: a member follows, its key in *key and the ':' read; 0: the '}' read, or an error in *r */
static int gpt2rt__json_object_next(gpt2rt__json *j, const char **key, gpt2rt_result *r) {
    *r = GPT2RT_OK;
    int first = j->first;
    j->first = 0;
    j->key = NULL;
    if (gpt2rt__json_eat(j, '}')) return 0;
    if (!first && !gpt2rt__json_eat(j, ',')) {
        *r = gpt2rt__json_fail(j, j->p < j->end ? "expected ',' or '}'" : "unexpected end (an object is not closed)");
        return 0;
    }
    if (!first && gpt2rt__json_peek(j) == '}') { *r = gpt2rt__json_fail(j, "'}' after ',' (no trailing commas)"); return 0; }
    if ((*r = gpt2rt__json_string(j, key)) != GPT2RT_OK) return 0;
    if (!gpt2rt__json_eat(j, ':')) {
        *r = gpt2rt__json_failf(j, "expected ':' after the key \"%.60s\"", *key);
        return 0;
    }
    j->key = *key;
    return 1;
}

static gpt2rt_result gpt2rt__json_array_begin(gpt2rt__json *j) {
    if (!gpt2rt__json_eat(j, '[')) return gpt2rt__json_fail(j, "expected '[' (an array)");
    j->first = 1;
    return GPT2RT_OK;
}

/* 1: a value follows; 0: the ']' read, or an error in *r */
static int gpt2rt__json_array_next(gpt2rt__json *j, gpt2rt_result *r) {
    *r = GPT2RT_OK;
    int first = j->first;
    j->first = 0;
    if (gpt2rt__json_eat(j, ']')) return 0;
    if (!first && !gpt2rt__json_eat(j, ',')) {
        *r = gpt2rt__json_fail(j, j->p < j->end ? "expected ',' or ']'" : "unexpected end (an array is not closed)");
        return 0;
    }
    gpt2rt__json_ws(j);
    if (j->p < j->end && *j->p == ']') { *r = gpt2rt__json_fail(j, "']' after ',' (no trailing commas)"); return 0; }
    return 1;
}

static gpt2rt_result gpt2rt__json_skip_in(gpt2rt__json *j, int depth) {
    if (depth > GPT2RT__JSON_DEPTH) return gpt2rt__json_failf(j, "nested more than %d deep", GPT2RT__JSON_DEPTH);
    int c = gpt2rt__json_peek(j);
    gpt2rt_result r = GPT2RT_OK;
    const char *s;
    if (c < 0) return gpt2rt__json_fail(j, "unexpected end (a value expected)");
    if (c == '"') return gpt2rt__json_string(j, &s);
    if (c == '{') {
        if ((r = gpt2rt__json_object_begin(j)) != GPT2RT_OK) return r;
        while (gpt2rt__json_object_next(j, &s, &r))
            if ((r = gpt2rt__json_skip_in(j, depth + 1)) != GPT2RT_OK) return r;
        return r;
    }
    if (c == '[') {
        if ((r = gpt2rt__json_array_begin(j)) != GPT2RT_OK) return r;
        while (gpt2rt__json_array_next(j, &r))
            if ((r = gpt2rt__json_skip_in(j, depth + 1)) != GPT2RT_OK) return r;
        return r;
    }
    if (gpt2rt__json_lit(j, "true") || gpt2rt__json_lit(j, "false") || gpt2rt__json_lit(j, "null")) return GPT2RT_OK;
    double v;
    if (c == '-' || (c >= '0' && c <= '9') || c == '.' || c == '+' || c == 'I' || c == 'N')
        return gpt2rt__json_number(j, &v); /* the last four: its message says what a number is */
    if (c >= 0x21 && c < 0x7F) return gpt2rt__json_failf(j, "unexpected character '%c' (a value expected)", c);
    return gpt2rt__json_failf(j, "unexpected byte 0x%02X (a value expected)", c);
}

/* any value, validated as strictly as one that is read */
static gpt2rt_result gpt2rt__json_skip(gpt2rt__json *j) {
    return gpt2rt__json_skip_in(j, 1);
}

/* only whitespace remains */
static gpt2rt_result gpt2rt__json_end(gpt2rt__json *j) {
    gpt2rt__json_ws(j);
    return j->p == j->end ? GPT2RT_OK : gpt2rt__json_fail(j, "text after the JSON value");
}

static int gpt2rt__grow(gpt2rt_ctx *ctx, void **arr, int *cap, int n, size_t elem) {
    if (n < *cap) return 1;
    int nc = *cap ? *cap * 2 : 64;
    void *na = gpt2rt__alloc(&ctx->cfg, (size_t)nc * elem, GPT2RT_MEM_BOOKKEEPING);
    if (!na) return 0;
    if (*arr) memcpy(na, *arr, (size_t)n * elem);
    gpt2rt__free(&ctx->cfg, *arr, GPT2RT_MEM_BOOKKEEPING);
    *arr = na;
    *cap = nc;
    return 1;
}

static void gpt2rt__st_release(gpt2rt_ctx *ctx, gpt2rt__st *st) {
    gpt2rt__free(&ctx->cfg, st->header, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, st->t, GPT2RT_MEM_BOOKKEEPING);
    gpt2rt__free(&ctx->cfg, (void *)st->meta, GPT2RT_MEM_BOOKKEEPING);
    memset(st, 0, sizeof *st);
}

static gpt2rt_result gpt2rt__st_tensor_entry(gpt2rt__json *j, gpt2rt__st_tensor *t) {
    int seen_dtype = 0, seen_shape = 0, seen_offsets = 0;
    gpt2rt_result r;
    const char *key;
    if (gpt2rt__json_peek(j) != '{')
        return gpt2rt__json_failf(j, "tensor '%.60s': expected '{' (a tensor entry)", t->name);
    if ((r = gpt2rt__json_object_begin(j)) != GPT2RT_OK) return r;
    while (gpt2rt__json_object_next(j, &key, &r)) {
        if (!strcmp(key, "dtype")) {
            const char *dt;
            if (seen_dtype++) return gpt2rt__json_failf(j, "tensor '%.60s': duplicate \"dtype\"", t->name);
            if ((r = gpt2rt__json_string(j, &dt)) != GPT2RT_OK) return r;
            t->dtype = -1;
            for (int i = 0; i < GPT2RT__NDTYPE; i++)
                if (!strcmp(dt, gpt2rt__dtype_names[i])) t->dtype = i;
            if (t->dtype < 0) return gpt2rt__json_failf(j, "tensor '%.60s' has unknown dtype '%.20s'", t->name, dt);
        } else if (!strcmp(key, "shape")) {
            if (seen_shape++) return gpt2rt__json_failf(j, "tensor '%.60s': duplicate \"shape\"", t->name);
            if ((r = gpt2rt__json_array_begin(j)) != GPT2RT_OK) return r;
            t->ndim = 0;
            while (gpt2rt__json_array_next(j, &r)) {
                int64_t v = 0;
                if (t->ndim == GPT2RT__ST_MAX_DIMS)
                    return gpt2rt__json_failf(j, "tensor '%.60s' has more than %d dimensions", t->name,
                                              GPT2RT__ST_MAX_DIMS);
                if ((r = gpt2rt__json_int(j, 0, (int64_t)1 << 40, &v)) != GPT2RT_OK) return r;
                t->shape[t->ndim++] = v;
            }
            if (r != GPT2RT_OK) return r;
        } else if (!strcmp(key, "data_offsets")) {
            uint64_t v[2];
            int n = 0;
            if (seen_offsets++) return gpt2rt__json_failf(j, "tensor '%.60s': duplicate \"data_offsets\"", t->name);
            if ((r = gpt2rt__json_array_begin(j)) != GPT2RT_OK) return r;
            while (gpt2rt__json_array_next(j, &r)) {
                if (n == 2) return gpt2rt__json_failf(j, "tensor '%.60s': data_offsets has more than 2 numbers", t->name);
                if ((r = gpt2rt__json_u64(j, &v[n++])) != GPT2RT_OK) return r;
            }
            if (r != GPT2RT_OK) return r;
            if (n != 2) return gpt2rt__json_failf(j, "tensor '%.60s': data_offsets has %d numbers, not 2", t->name, n);
            t->begin = v[0];
            t->end = v[1];
        } else if ((r = gpt2rt__json_skip(j)) != GPT2RT_OK) return r;
    }
    if (r != GPT2RT_OK) return r;
    if (!seen_dtype || !seen_shape || !seen_offsets)
        return gpt2rt__json_failf(j, "tensor '%.60s' lacks %s", t->name,
                                  !seen_dtype ? "dtype" : !seen_shape ? "shape" : "data_offsets");
    return GPT2RT_OK;
}

static int gpt2rt__cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* a whole decimal integer in [lo, hi], nothing else: the only way text becomes a number */
static int gpt2rt__parse_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

/* Parse a whole safetensors file held in memory. On success st describes it and
   must be released with gpt2rt__st_release; on failure nothing is left allocated. */
static gpt2rt_result gpt2rt__st_parse(gpt2rt_ctx *ctx, const unsigned char *buf, size_t len, const char *what,
                                      gpt2rt__st *st) {
    memset(st, 0, sizeof *st);
    if (len < 8)
        return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: %llu bytes, too short for a safetensors file (at least 8)",
                            what, (unsigned long long)len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > len - 8 || hlen < 2 || buf[8] != '{') { /* another kind of file, or a cut one: name its first bytes */
        char hex[3 * 16 + 1], txt[16 + 1];
        size_t k = 0, show = len < 16 ? len : 16;
        for (; k < show; k++) {
            snprintf(hex + (k ? 3 * k - 1 : 0), 4, "%s%02X", k ? " " : "", buf[k]);
            txt[k] = buf[k] >= 0x20 && buf[k] < 0x7F ? (char)buf[k] : '.';
        }
        txt[k] = 0;
        if (hlen > len - 8)
            return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: not a safetensors file (or a truncated one): its first 8 "
                                "bytes, read as the header length, say %llu%s, but only %llu bytes follow; the file "
                                "starts with %s (\"%s\")", what, (unsigned long long)hlen,
                                hlen > 100000000u ? " (above the 100 MB limit too)" : "",
                                (unsigned long long)(len - 8), hex, txt);
        if (hlen < 2)
            return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: not a safetensors file: header length %llu is too short "
                                "(the least is 2, \"{}\"); the file starts with %s (\"%s\")", what,
                                (unsigned long long)hlen, hex, txt);
        return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: not a safetensors file: the header (byte 8) does not start "
                            "with '{'; the file starts with %s (\"%s\")", what, hex, txt);
    }
    if (hlen > 100000000u)
        return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: header length %llu exceeds the 100 MB limit", what,
                            (unsigned long long)hlen);
    st->header = (char *)gpt2rt__alloc(&ctx->cfg, (size_t)hlen + 1, GPT2RT_MEM_BOOKKEEPING);
    if (!st->header) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: header copy of %llu bytes", what,
                                         (unsigned long long)hlen);
    memcpy(st->header, buf + 8, (size_t)hlen);
    st->header[hlen] = 0;
    st->data = buf + 8 + hlen;
    st->data_len = len - 8 - hlen;
    gpt2rt__json j;
    gpt2rt__json_init(&j, st->header, (size_t)hlen, ctx, NULL, 0, what, "safetensors header");
    gpt2rt_result r;
    const char *key;
    int seen_meta = 0;
    if ((r = gpt2rt__json_object_begin(&j)) != GPT2RT_OK) goto fail;
    while (gpt2rt__json_object_next(&j, &key, &r)) {
        if (!strcmp(key, "__metadata__")) {
            const char *k, *v;
            if (seen_meta++) { r = gpt2rt__json_fail(&j, "\"__metadata__\" appears twice"); goto fail; }
            if ((r = gpt2rt__json_object_begin(&j)) != GPT2RT_OK) goto fail;
            while (gpt2rt__json_object_next(&j, &k, &r)) {
                if (gpt2rt__json_peek(&j) != '"') {
                    r = gpt2rt__json_failf(&j, "__metadata__ \"%.60s\": expected a string (metadata values are "
                                           "strings)", k);
                    goto fail;
                }
                if ((r = gpt2rt__json_string(&j, &v)) != GPT2RT_OK) goto fail;
                if (!gpt2rt__grow(ctx, (void **)&st->meta, &st->cap_meta, st->n_meta + 2, sizeof(char *))) {
                    r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: metadata table", what);
                    goto fail;
                }
                st->meta[st->n_meta++] = k;
                st->meta[st->n_meta++] = v;
            }
            if (r != GPT2RT_OK) goto fail;
            continue;
        }
        if (!gpt2rt__grow(ctx, (void **)&st->t, &st->cap, st->n, sizeof(gpt2rt__st_tensor))) {
            r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: tensor table of %d entries", what, st->n);
            goto fail;
        }
        gpt2rt__st_tensor *t = &st->t[st->n];
        memset(t, 0, sizeof *t);
        t->name = key;
        if ((r = gpt2rt__st_tensor_entry(&j, t)) != GPT2RT_OK) goto fail;
        st->n++;
    }
    if (r != GPT2RT_OK || (r = gpt2rt__json_end(&j)) != GPT2RT_OK) goto fail;
    for (int i = 0; i < st->n; i++) {
        gpt2rt__st_tensor *t = &st->t[i];
        uint64_t numel = 1;
        for (int k = 0; k < t->ndim; k++) {
            if (t->shape[k] && numel > ((uint64_t)1 << 50) / (uint64_t)t->shape[k]) {
                r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' has more than 2^50 elements", what, t->name);
                goto fail;
            }
            numel *= (uint64_t)t->shape[k];
        }
        uint64_t bytes = numel * (uint64_t)gpt2rt__dtype_size[t->dtype];
        if (t->end < t->begin || t->end > st->data_len || t->end - t->begin != bytes) {
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' has data_offsets [%llu, %llu] but needs %llu "
                             "bytes (%s, %llu elements) within the %llu data bytes%s", what, t->name,
                             (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)bytes,
                             gpt2rt__dtype_names[t->dtype], (unsigned long long)numel,
                             (unsigned long long)st->data_len, t->end > st->data_len ? " (truncated file?)" : "");
            goto fail;
        }
    }
    if (st->n > 1) { /* duplicate names: sort a copy of the names, compare neighbours */
        const char **names = (const char **)gpt2rt__alloc(&ctx->cfg, (size_t)st->n * sizeof(char *), GPT2RT_MEM_BOOKKEEPING);
        if (!names) { r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: name table", what); goto fail; }
        for (int i = 0; i < st->n; i++) names[i] = st->t[i].name;
        qsort((void *)names, (size_t)st->n, sizeof(char *), gpt2rt__cmp_names);
        for (int i = 1; i < st->n && r == GPT2RT_OK; i++)
            if (!strcmp(names[i - 1], names[i]))
                r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' appears twice", what, names[i]);
        gpt2rt__free(&ctx->cfg, (void *)names, GPT2RT_MEM_BOOKKEEPING);
        if (r != GPT2RT_OK) goto fail;
    }
    return GPT2RT_OK;
fail:
    gpt2rt__st_release(ctx, st);
    return r;
}

static const gpt2rt__st_tensor *gpt2rt__st_find(const gpt2rt__st *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->t[i].name, name)) return &st->t[i];
    return NULL;
}

static const char *gpt2rt__st_meta(const gpt2rt__st *st, const char *key) {
    for (int i = 0; i + 1 < st->n_meta; i += 2)
        if (!strcmp(st->meta[i], key)) return st->meta[i + 1];
    return NULL;
}

static float gpt2rt__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023, bits;
    if (exp == 31) bits = sign | 0x7F800000u | (man << 13);
    else if (exp) bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man) bits = sign;
    else { /* subnormal: renormalise */
        exp = 113;
        while (!(man & 1024)) { man <<= 1; exp--; }
        bits = sign | (exp << 23) | ((man & 1023) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* element i of a F32/F16/BF16 tensor in the file, as float */
static float gpt2rt__st_get(const unsigned char *src, int dtype, int64_t i) {
    if (dtype == GPT2RT__F32) { float f; memcpy(&f, src + 4 * i, 4); return f; }
    uint16_t h;
    memcpy(&h, src + 2 * i, 2);
    if (dtype == GPT2RT__F16) return gpt2rt__f16_to_f32(h);
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

#endif /* GPT2RT__SRC_FORMATS_SAFETENSORS_READ_H */
