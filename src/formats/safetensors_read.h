/* formats/safetensors_read.h - 4. Formats; 4.1 safetensors: reading
   may call: plan/advisor.h and what it includes */
#ifndef GPT2RT__SRC_FORMATS_SAFETENSORS_READ_H
#define GPT2RT__SRC_FORMATS_SAFETENSORS_READ_H
#include "../plan/advisor.h"

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

typedef struct gpt2rt__json {
    char *p, *begin, *end;
    gpt2rt_ctx *ctx;
    const char *what; /* file name, for messages */
    const char *kind; /* "safetensors header", "config.json" */
} gpt2rt__json;

static gpt2rt_result gpt2rt__json_fail(gpt2rt__json *j, const char *msg) {
    return gpt2rt__fail(j->ctx, GPT2RT_ERR_FORMAT, "%s: %s byte %lld: %s", j->what, j->kind,
                        (long long)(j->p - j->begin), msg);
}

static void gpt2rt__json_ws(gpt2rt__json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int gpt2rt__json_eat(gpt2rt__json *j, char c) {
    gpt2rt__json_ws(j);
    if (j->p < j->end && *j->p == c) { j->p++; return 1; }
    return 0;
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

/* a string, unescaped in place (never longer than its source), NUL-terminated */
static gpt2rt_result gpt2rt__json_string(gpt2rt__json *j, const char **out) {
    if (!gpt2rt__json_eat(j, '"')) return gpt2rt__json_fail(j, "expected a string");
    char *w = j->p, *start = j->p;
    while (1) {
        if (j->p >= j->end) return gpt2rt__json_fail(j, "unterminated string");
        unsigned char c = (unsigned char)*j->p++;
        if (c == '"') break;
        if (c < 0x20) return gpt2rt__json_fail(j, "control character in a string");
        if (c != '\\') { *w++ = (char)c; continue; }
        if (j->p >= j->end) return gpt2rt__json_fail(j, "unterminated escape");
        char e = *j->p++;
        switch (e) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            unsigned u, lo;
            if (!gpt2rt__json_u4(j, &u)) return gpt2rt__json_fail(j, "bad \\u escape");
            if (u >= 0xD800 && u < 0xDC00) {
                if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u') return gpt2rt__json_fail(j, "lone surrogate");
                j->p += 2;
                if (!gpt2rt__json_u4(j, &lo) || lo < 0xDC00 || lo >= 0xE000) return gpt2rt__json_fail(j, "bad surrogate pair");
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            } else if (u >= 0xDC00 && u < 0xE000) return gpt2rt__json_fail(j, "lone surrogate");
            if (u == 0) return gpt2rt__json_fail(j, "NUL character in a string");
            if (u < 0x80) *w++ = (char)u;
            else if (u < 0x800) { *w++ = (char)(0xC0 | (u >> 6)); *w++ = (char)(0x80 | (u & 63)); }
            else if (u < 0x10000) {
                *w++ = (char)(0xE0 | (u >> 12)); *w++ = (char)(0x80 | ((u >> 6) & 63)); *w++ = (char)(0x80 | (u & 63));
            } else {
                *w++ = (char)(0xF0 | (u >> 18)); *w++ = (char)(0x80 | ((u >> 12) & 63));
                *w++ = (char)(0x80 | ((u >> 6) & 63)); *w++ = (char)(0x80 | (u & 63));
            }
            break;
        }
        default: return gpt2rt__json_fail(j, "unknown escape");
        }
    }
    *w = 0; /* w <= the closing quote, which has been read */
    *out = start;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__json_u64(gpt2rt__json *j, uint64_t *out) {
    gpt2rt__json_ws(j);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return gpt2rt__json_fail(j, "expected a non-negative integer");
    uint64_t v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (v > (UINT64_MAX - 9) / 10) return gpt2rt__json_fail(j, "integer too large");
        v = v * 10 + (uint64_t)(*j->p++ - '0');
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return gpt2rt__json_fail(j, "expected an integer, found a fraction");
    *out = v;
    return GPT2RT_OK;
}

/* skip any JSON value (for keys we do not use), nesting at most 32 deep */
static gpt2rt_result gpt2rt__json_skip(gpt2rt__json *j, int depth) {
    if (depth > 32) return gpt2rt__json_fail(j, "nested too deeply");
    gpt2rt__json_ws(j);
    if (j->p >= j->end) return gpt2rt__json_fail(j, "unexpected end of header");
    const char *s;
    char c = *j->p;
    if (c == '"') return gpt2rt__json_string(j, &s);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        if (gpt2rt__json_eat(j, close)) return GPT2RT_OK;
        do {
            gpt2rt_result r;
            if (c == '{') {
                if ((r = gpt2rt__json_string(j, &s)) != GPT2RT_OK) return r;
                if (!gpt2rt__json_eat(j, ':')) return gpt2rt__json_fail(j, "expected ':'");
            }
            if ((r = gpt2rt__json_skip(j, depth + 1)) != GPT2RT_OK) return r;
        } while (gpt2rt__json_eat(j, ','));
        if (!gpt2rt__json_eat(j, close)) return gpt2rt__json_fail(j, c == '{' ? "expected '}'" : "expected ']'");
        return GPT2RT_OK;
    }
    const char *lits[3] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(lits[i]);
        if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, lits[i], n)) { j->p += n; return GPT2RT_OK; }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        j->p++;
        while (j->p < j->end && *j->p && strchr("0123456789.eE+-", *j->p)) j->p++;
        return GPT2RT_OK;
    }
    return gpt2rt__json_fail(j, "unexpected character");
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
    char msg[160];
    int seen_dtype = 0, seen_shape = 0, seen_offsets = 0;
    gpt2rt_result r;
    if (!gpt2rt__json_eat(j, '{')) return gpt2rt__json_fail(j, "expected '{' (a tensor entry)");
    if (gpt2rt__json_eat(j, '}')) return gpt2rt__json_fail(j, "empty tensor entry");
    do {
        const char *key;
        if ((r = gpt2rt__json_string(j, &key)) != GPT2RT_OK) return r;
        if (!gpt2rt__json_eat(j, ':')) return gpt2rt__json_fail(j, "expected ':'");
        if (!strcmp(key, "dtype")) {
            const char *dt;
            if (seen_dtype++) return gpt2rt__json_fail(j, "duplicate \"dtype\"");
            if ((r = gpt2rt__json_string(j, &dt)) != GPT2RT_OK) return r;
            t->dtype = -1;
            for (int i = 0; i < GPT2RT__NDTYPE; i++)
                if (!strcmp(dt, gpt2rt__dtype_names[i])) t->dtype = i;
            if (t->dtype < 0) {
                snprintf(msg, sizeof msg, "tensor '%.60s' has unknown dtype '%.20s'", t->name, dt);
                return gpt2rt__json_fail(j, msg);
            }
        } else if (!strcmp(key, "shape")) {
            if (seen_shape++) return gpt2rt__json_fail(j, "duplicate \"shape\"");
            if (!gpt2rt__json_eat(j, '[')) return gpt2rt__json_fail(j, "expected '[' (shape)");
            t->ndim = 0;
            if (!gpt2rt__json_eat(j, ']')) {
                do {
                    uint64_t v;
                    if (t->ndim == GPT2RT__ST_MAX_DIMS) return gpt2rt__json_fail(j, "more than 8 dimensions");
                    if ((r = gpt2rt__json_u64(j, &v)) != GPT2RT_OK) return r;
                    if (v > ((uint64_t)1 << 40)) return gpt2rt__json_fail(j, "dimension larger than 2^40");
                    t->shape[t->ndim++] = (int64_t)v;
                } while (gpt2rt__json_eat(j, ','));
                if (!gpt2rt__json_eat(j, ']')) return gpt2rt__json_fail(j, "expected ']' (shape)");
            }
        } else if (!strcmp(key, "data_offsets")) {
            if (seen_offsets++) return gpt2rt__json_fail(j, "duplicate \"data_offsets\"");
            if (!gpt2rt__json_eat(j, '[')) return gpt2rt__json_fail(j, "expected '[' (data_offsets)");
            if ((r = gpt2rt__json_u64(j, &t->begin)) != GPT2RT_OK) return r;
            if (!gpt2rt__json_eat(j, ',')) return gpt2rt__json_fail(j, "expected ',' (data_offsets has 2 numbers)");
            if ((r = gpt2rt__json_u64(j, &t->end)) != GPT2RT_OK) return r;
            if (!gpt2rt__json_eat(j, ']')) return gpt2rt__json_fail(j, "expected ']' (data_offsets has 2 numbers)");
        } else if ((r = gpt2rt__json_skip(j, 1)) != GPT2RT_OK) return r;
    } while (gpt2rt__json_eat(j, ','));
    if (!gpt2rt__json_eat(j, '}')) return gpt2rt__json_fail(j, "expected '}' (end of a tensor entry)");
    if (!seen_dtype || !seen_shape || !seen_offsets)
        return gpt2rt__json_fail(j, "tensor entry lacks dtype, shape or data_offsets");
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
    if (hlen > 100000000u || hlen > len - 8)
        return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: header length %llu exceeds the %llu bytes after the length "
                            "field%s", what, (unsigned long long)hlen, (unsigned long long)(len - 8),
                            hlen > 100000000u ? " (and the 100 MB limit)" : " (truncated file?)");
    if (hlen < 2) return gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: header length %llu is too short", what,
                                      (unsigned long long)hlen);
    st->header = (char *)gpt2rt__alloc(&ctx->cfg, (size_t)hlen + 1, GPT2RT_MEM_BOOKKEEPING);
    if (!st->header) return gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: header copy of %llu bytes", what,
                                         (unsigned long long)hlen);
    memcpy(st->header, buf + 8, (size_t)hlen);
    st->header[hlen] = 0;
    st->data = buf + 8 + hlen;
    st->data_len = len - 8 - hlen;
    gpt2rt__json j;
    j.p = j.begin = st->header;
    j.end = st->header + hlen;
    j.ctx = ctx;
    j.what = what;
    j.kind = "safetensors header";
    gpt2rt_result r = GPT2RT_OK;
    if (!gpt2rt__json_eat(&j, '{')) { r = gpt2rt__json_fail(&j, "expected '{' at the start of the header"); goto fail; }
    if (!gpt2rt__json_eat(&j, '}')) {
        do {
            const char *key;
            if ((r = gpt2rt__json_string(&j, &key)) != GPT2RT_OK) goto fail;
            if (!gpt2rt__json_eat(&j, ':')) { r = gpt2rt__json_fail(&j, "expected ':'"); goto fail; }
            if (!strcmp(key, "__metadata__")) {
                if (!gpt2rt__json_eat(&j, '{')) { r = gpt2rt__json_fail(&j, "expected '{' (__metadata__)"); goto fail; }
                if (gpt2rt__json_eat(&j, '}')) continue;
                do {
                    const char *k, *v;
                    if ((r = gpt2rt__json_string(&j, &k)) != GPT2RT_OK) goto fail;
                    if (!gpt2rt__json_eat(&j, ':')) { r = gpt2rt__json_fail(&j, "expected ':'"); goto fail; }
                    if ((r = gpt2rt__json_string(&j, &v)) != GPT2RT_OK) goto fail;
                    if (!gpt2rt__grow(ctx, (void **)&st->meta, &st->cap_meta, st->n_meta + 2, sizeof(char *))) {
                        r = gpt2rt__fail(ctx, GPT2RT_ERR_OUT_OF_MEMORY, "%s: metadata table", what);
                        goto fail;
                    }
                    st->meta[st->n_meta++] = k;
                    st->meta[st->n_meta++] = v;
                } while (gpt2rt__json_eat(&j, ','));
                if (!gpt2rt__json_eat(&j, '}')) { r = gpt2rt__json_fail(&j, "expected '}' (__metadata__)"); goto fail; }
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
        } while (gpt2rt__json_eat(&j, ','));
        if (!gpt2rt__json_eat(&j, '}')) { r = gpt2rt__json_fail(&j, "expected '}' or ','"); goto fail; }
    }
    gpt2rt__json_ws(&j);
    if (j.p != j.end) { r = gpt2rt__json_fail(&j, "trailing bytes after the header object"); goto fail; }
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
