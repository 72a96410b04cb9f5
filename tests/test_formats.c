/* tests/test_formats.c - bad files give a clear error and lose nothing.

   A context of the fixture's shape (tests/fixtures/hf_tiny: 2 layers, 4 heads,
   width 64, vocab 1000, 64 positions; B=4, T=32) loads model.safetensors and takes
   one training step. Then, for every malformed, truncated or mismatched file built
   from the fixture's bytes (written under build/tmp_formats/), the loader must
     (a) return the expected result (GPT2RT_ERR_FORMAT, or GPT2RT_ERR_IO when the
         file cannot be read),
     (b) leave a message that names the file and the specifics (tensor name,
         header length and file size, the header byte...),
     (c) leave weights, AdamW moments, step count, RNG and call-order state as
         they were (bitwise),
     (d) leave a usable context: the next forward+backward+update gives bitwise
         the loss and step count it would have given without the failed load
         (checked on the first case of each group and every 4th, since steps are
         most of the run time; TEST_FORMATS_ALL_STEPS=1 checks every case).
   Then the training state (truncated, other shape, weights file as state,
   impossible step/rng metadata), a directory where a file is expected, the saves
   (no partial file, no .tmp left behind) and the good paths (a directory, wpe
   with more positions, F16 and BF16 files). One line per group of cases.
   Build: gcc -std=c11 -O1 -g -fopenmp -Wall -Wextra -Werror -o build/test_formats
          tests/test_formats.c -lm, run from the repository root. */
#define _POSIX_C_SOURCE 200809L
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

#include <dirent.h>
#include <stdarg.h>
#include <sys/stat.h>

#define FIX "tests/fixtures/hf_tiny/"
#define TMP "build/tmp_formats"
#define CASE_FILE TMP "/case.safetensors"

/* Under AddressSanitizer, let a huge malloc return NULL (as the C library does)
   instead of aborting: a loader that asks for absurd sizes must fail cleanly. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static void fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("FATAL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    exit(2);
}

/* ---- the context under test, and its reference behaviour ---- */

static gpt2rt_ctx *ctx;
static unsigned char *fix_buf; /* model.safetensors */
static size_t fix_len;
static gpt2rt__st fix;         /* its parse (owned by ctx): the public API reads only GPT-2 tensors,
                                  the cases below need the file's own entries and offsets */
static char *fix_hdr;          /* its header JSON, NUL-terminated */
static size_t fix_hlen;
static int32_t *in_tok, *tg_tok;
static float *snap, *probe;    /* values, m, v (public order) before a load; the same now */
static int64_t snap_n;
static int64_t n_padded;       /* floats in the weights arena: the state file's 'params' */
static float *logits_buf;      /* (B,T,V) */
static float ref_loss;         /* loss of the second step after prime() */
static float *fix_params;      /* values right after loading the fixture */

static gpt2rt_config fixture_config(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 2; c.n_head = 4; c.n_embd = 64; c.vocab_size = 1000; c.max_seq_len = 64;
    c.batch_size = 4; c.seq_len = 32;
    c.n_threads = 1; /* formats, not threads: one thread stays fast on a busy machine */
    return c;
}

static gpt2rt_ctx *make_ctx(gpt2rt_config c) {
    gpt2rt_ctx *x;
    if (gpt2rt_create(&x, &c) != GPT2RT_OK) fatal("gpt2rt_create: %s", gpt2rt_last_error(x));
    return x;
}

/* The fixture's weights, then one step: step count 1, moments non-zero. Computed
   once and saved; later calls restore that state with gpt2rt_state_load (cheaper than
   a step). */
#define PRIMED "build/test_formats_primed.safetensors"
#define PROBE "build/test_formats_probe.safetensors"
static unsigned char *primed;  /* the primed state file */
static size_t primed_len;
static unsigned long long primed_rng;
static void prime(void) {
    if (primed) {
        if (gpt2rt_state_load(ctx, PRIMED) != GPT2RT_OK) fatal("restoring the primed state: %s", gpt2rt_last_error(ctx));
        return;
    }
    gpt2rt_result r = gpt2rt_weights_load(ctx, FIX "model.safetensors");
    if (r != GPT2RT_OK) fatal("loading the fixture: %s", gpt2rt_last_error(ctx));
    gpt2rt_step_stats st;
    r = gpt2rt_step(ctx, in_tok, tg_tok, &st);
    if (r != GPT2RT_OK || st.step != 1) fatal("first step: %s", gpt2rt_last_error(ctx));
    if (gpt2rt_state_save(ctx, PRIMED) != GPT2RT_OK) fatal("saving the primed state: %s", gpt2rt_last_error(ctx));
    primed = read_all(PRIMED, &primed_len);
    const char *k = primed ? strstr((const char *)primed + 8, "\"rng\":\"") : NULL;
    if (!k) fatal("the primed state has no rng");
    primed_rng = strtoull(k + 7, NULL, 10);
}

/* values, then m, then v of every parameter through gpt2rt_param_read */
static int64_t read_state(float *out) {
    int64_t k = harness_params(ctx, GPT2RT_PARAM_VALUE, out);
    k += harness_params(ctx, GPT2RT_PARAM_ADAM_M, out + k);
    return k + harness_params(ctx, GPT2RT_PARAM_ADAM_V, out + k);
}

static void take_snapshot(void) { snap_n = read_state(snap); }

static int unchanged(void) { return read_state(probe) == snap_n && !memcmp(snap, probe, (size_t)snap_n * 4); }

/* the values equal the first n floats of ref */
static int values_equal(const float *ref) {
    int64_t n = harness_params(ctx, GPT2RT_PARAM_VALUE, probe);
    return !memcmp(ref, probe, (size_t)n * 4);
}

/* the training state is the primed one: gpt2rt_state_save writes the same bytes
   (weights, moments, step, RNG; it refuses while gradients wait for an update),
   and there are no logits (nothing was run) */
static int state_as_primed(void) {
    size_t len = 0;
    if (gpt2rt_state_save(ctx, PROBE) != GPT2RT_OK) return 0;
    unsigned char *b = read_all(PROBE, &len);
    gpt2rt_config c = gpt2rt_config_get(ctx);
    int64_t n = (int64_t)c.batch_size * c.seq_len * c.vocab_size;
    int same = b && len == primed_len && !memcmp(b, primed, len) &&
               gpt2rt_logits(ctx, logits_buf, n) == GPT2RT_ERR_STATE;
    free(b);
    return same;
}

/* ---- groups of cases ---- */

static int all_steps, n_usable; /* cases followed by a whole training step */
static const char *g_name;
static int g_cases, g_fail0;
static double g_t0;

static void group_begin(const char *name) {
    g_name = name;
    g_cases = 0;
    g_fail0 = harness_failed;
    g_t0 = harness_now();
}

static void group_end(void) {
    int bad = harness_failed - g_fail0;
    printf("%-58s %3d cases, %s (%.1f s)\n", g_name, g_cases, bad ? "FAILED" : "all as expected",
           harness_now() - g_t0);
    if (bad) printf("    (%d failed checks above)\n", bad);
}

/* Load `path` (weights or state) into the primed context and check (a)-(d).
   The variable arguments are substrings the message must contain, then NULL. */
static void expect_reject(int state, const char *label, const char *path, gpt2rt_result want, ...) {
    g_cases++;
    prime();
    take_snapshot();
    gpt2rt_result r = state ? gpt2rt_state_load(ctx, path) : gpt2rt_weights_load(ctx, path);
    const char *err = gpt2rt_last_error(ctx);
    if (r == GPT2RT_OK) { /* accepted: one failure; the message is stale and the state replaced */
        CHECK(0, "%s: %s was accepted (expected '%s')", label, path, gpt2rt_result_string(want));
        return;
    }
    CHECK(r == want, "%s: returned '%s', expected '%s'; message: %s", label, gpt2rt_result_string(r),
          gpt2rt_result_string(want), err);
    va_list ap;
    va_start(ap, want);
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
        CHECK(strstr(err, s) != NULL, "%s: the message lacks \"%s\": %s", label, s, err);
    va_end(ap);
    CHECK(unchanged(), "%s: the failed load changed weights or moments", label);
    CHECK(state_as_primed(),
          "%s: the failed load changed the step count, RNG or call-order state", label);
    /* a whole step (the expensive part) on the first case of each group and on
       every 4th; TEST_FORMATS_ALL_STEPS=1 takes one after every case */
    if (!(g_cases == 1 || g_cases % 4 == 0 || all_steps)) return;
    n_usable++;
    gpt2rt_step_stats st;
    r = gpt2rt_step(ctx, in_tok, tg_tok, &st);
    CHECK(r == GPT2RT_OK, "%s: the context is not usable afterwards: %s", label, gpt2rt_last_error(ctx));
    CHECK(r != GPT2RT_OK || (st.step == 2 && st.loss == ref_loss), "%s: next step is step %lld with loss %.9g, "
          "expected step 2 with loss %.9g", label, (long long)st.step, (double)st.loss, (double)ref_loss);
}

/* ---- building files ---- */

static void mkdirs(const char *path) {
    char p[1024];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') { *s = 0; mkdir(p, 0777); *s = '/'; }
    mkdir(p, 0777);
}

/* remove a file or a directory tree (paths under build/ only) */
static void rm_rf(const char *path) {
    if (strncmp(path, "build/", 6)) fatal("rm_rf outside build/: %s", path);
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
            rm_rf(sub);
        }
        if (d) closedir(d);
    }
    remove(path);
}

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* names in dir that contain ".tmp", comma-separated into out ("" if none) */
static void tmp_files(const char *dir, char *out, size_t cap) {
    out[0] = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        if (strstr(de->d_name, ".tmp")) {
            size_t n = strlen(out);
            snprintf(out + n, cap - n, "%s%s", n ? "," : "", de->d_name);
        }
    if (d) closedir(d);
}

static void put_file(const char *path, const void *buf, size_t len) {
    if (!write_all(path, buf, len)) fatal("cannot write %s", path);
}

/* 8-byte length (hlen_field), the JSON text, then the data */
static unsigned char *image(uint64_t hlen_field, const char *json, size_t jlen, const unsigned char *data, size_t dlen,
                            size_t *len) {
    unsigned char *b = (unsigned char *)malloc(8 + jlen + dlen + 1);
    if (!b) fatal("out of memory");
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hlen_field >> (8 * i));
    memcpy(b + 8, json, jlen);
    if (dlen) memcpy(b + 8 + jlen, data, dlen);
    *len = 8 + jlen + dlen;
    return b;
}

/* the fixture with its header replaced by `json` (true length), data unchanged */
static void write_with_header(const char *json) {
    size_t len, jl = strlen(json);
    unsigned char *b = image(jl, json, jl, fix.data, (size_t)fix.data_len, &len);
    put_file(CASE_FILE, b, len);
    free(b);
}

/* s with the first occurrence of `from` at or after `after` (a substring of s
   that must exist; NULL: the start) replaced by `to`; *pos gets its offset */
static char *replace(const char *s, const char *after, const char *from, const char *to, size_t *pos) {
    const char *a = after ? strstr(s, after) : s;
    if (!a) fatal("test bug: '%s' not in the header", after);
    const char *f = strstr(a, from);
    if (!f) fatal("test bug: '%s' not in the header after '%s'", from, after ? after : "");
    size_t n = strlen(s) - strlen(from) + strlen(to);
    char *o = (char *)malloc(n + 1);
    if (!o) fatal("out of memory");
    size_t k = (size_t)(f - s);
    memcpy(o, s, k);
    memcpy(o + k, to, strlen(to));
    strcpy(o + k + strlen(to), f + strlen(from));
    if (pos) *pos = k;
    return o;
}

/* the header byte where the parser stops, as the message words it */
static const char *at_byte(size_t b) {
    static char s[8][64];
    static int k;
    k = (k + 1) % 8;
    snprintf(s[k], sizeof s[k], "header byte %zu:", b);
    return s[k];
}

static const char *num(unsigned long long v) {
    static char s[16][32];
    static int k;
    k = (k + 1) % 16;
    snprintf(s[k], sizeof s[k], "%llu", v);
    return s[k];
}

/* the "data_offsets":[b,e] text of a tensor in the fixture's header */
static const gpt2rt__st_tensor *fix_tensor(const char *name) {
    const gpt2rt__st_tensor *t = gpt2rt__st_find(&fix, name);
    if (!t) fatal("fixture lacks %s", name);
    return t;
}

static const char *offsets_text(const char *name) {
    static char s[4][96];
    static int k;
    k = (k + 1) % 4;
    const gpt2rt__st_tensor *t = fix_tensor(name);
    snprintf(s[k], sizeof s[k], "\"data_offsets\":[%llu,%llu]", (unsigned long long)t->begin, (unsigned long long)t->end);
    return s[k];
}

static const char *entry_key(const char *name) {
    static char s[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(s[k], sizeof s[k], "\"%s\":{", name);
    return s[k];
}

/* tensors as a list, for files rebuilt from parts */
typedef struct entry {
    char name[96];
    char dtype[16];
    int ndim;
    int64_t shape[GPT2RT__ST_MAX_DIMS];
    const void *data;
    size_t nbytes;
} entry;

static entry *fix_entries(int *n) {
    entry *e = (entry *)calloc((size_t)fix.n, sizeof *e);
    if (!e) fatal("out of memory");
    for (int i = 0; i < fix.n; i++) {
        const gpt2rt__st_tensor *t = &fix.t[i];
        snprintf(e[i].name, sizeof e[i].name, "%s", t->name);
        snprintf(e[i].dtype, sizeof e[i].dtype, "%s", gpt2rt__dtype_names[t->dtype]);
        e[i].ndim = t->ndim;
        for (int k = 0; k < t->ndim; k++) e[i].shape[k] = t->shape[k];
        e[i].data = fix.data + t->begin;
        e[i].nbytes = (size_t)(t->end - t->begin);
    }
    *n = fix.n;
    return e;
}

static entry *find_entry(entry *e, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].name, name)) return &e[i];
    fatal("no entry %s", name);
    return NULL;
}

/* a safetensors file of the entries (n < 0: skip none; skip: a name prefix to leave out) */
static void write_entries(const char *path, const entry *e, int n, const char *skip_prefix) {
    size_t cap = 256 + (size_t)n * 256;
    char *h = (char *)malloc(cap);
    if (!h) fatal("out of memory");
    size_t hn = (size_t)snprintf(h, cap, "{\"__metadata__\":{\"format\":\"pt\"}");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (skip_prefix && !strncmp(e[i].name, skip_prefix, strlen(skip_prefix))) continue;
        hn += (size_t)snprintf(h + hn, cap - hn, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", e[i].name, e[i].dtype);
        for (int k = 0; k < e[i].ndim; k++) hn += (size_t)snprintf(h + hn, cap - hn, "%s%lld", k ? "," : "", (long long)e[i].shape[k]);
        hn += (size_t)snprintf(h + hn, cap - hn, "],\"data_offsets\":[%zu,%zu]}", off, off + e[i].nbytes);
        off += e[i].nbytes;
    }
    h[hn++] = '}';
    while (hn % 8) h[hn++] = ' ';
    unsigned char *b = (unsigned char *)malloc(8 + hn + off + 1);
    if (!b) fatal("out of memory");
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hn >> (8 * i));
    memcpy(b + 8, h, hn);
    size_t o = 8 + hn;
    for (int i = 0; i < n; i++) {
        if (skip_prefix && !strncmp(e[i].name, skip_prefix, strlen(skip_prefix))) continue;
        memcpy(b + o, e[i].data, e[i].nbytes);
        o += e[i].nbytes;
    }
    put_file(path, b, o);
    free(b);
    free(h);
}

/* ---- F16 / BF16 ---- */

static float from_f16(uint16_t h) { /* an independent decoder: ldexp */
    int exp = (h >> 10) & 31, man = h & 1023;
    double v = exp ? ldexp(1.0 + man / 1024.0, exp - 15) : ldexp(man / 1024.0, -14);
    return (float)((h & 0x8000) ? -v : v);
}

static float from_bf16(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* the fixture converted to F16 (bf16 = 0) or BF16; checks every parameter */
static void check_half(int bf16) {
    int n;
    entry *e = fix_entries(&n);
    uint16_t **bufs = (uint16_t **)calloc((size_t)n, sizeof *bufs);
    if (!bufs) fatal("out of memory");
    for (int i = 0; i < n; i++) {
        size_t cnt = e[i].nbytes / 4;
        bufs[i] = (uint16_t *)malloc(cnt * 2 + 2);
        if (!bufs[i]) fatal("out of memory");
        for (size_t j = 0; j < cnt; j++) {
            float f;
            memcpy(&f, (const unsigned char *)e[i].data + 4 * j, 4);
            bufs[i][j] = bf16 ? to_bf16(f) : to_f16(f);
        }
        snprintf(e[i].dtype, sizeof e[i].dtype, "%s", bf16 ? "BF16" : "F16");
        e[i].data = bufs[i];
        e[i].nbytes = cnt * 2;
    }
    const char *path = bf16 ? TMP "/model_bf16.safetensors" : TMP "/model_f16.safetensors";
    write_entries(path, e, n, NULL);
    g_cases++;
    prime();
    gpt2rt_result r = gpt2rt_weights_load(ctx, path);
    CHECK(r == GPT2RT_OK, "%s: %s", path, gpt2rt_last_error(ctx));
    double worst = 0, limit = bf16 ? 1e-2 : 1e-3;
    int64_t inexact = 0;
    char worst_name[96] = "";
    for (int i = 0; r == GPT2RT_OK && i < gpt2rt_param_count(ctx); i++) {
        gpt2rt_param_info info;
        gpt2rt_param_info_get(ctx, i, &info);
        float *got = (float *)malloc((size_t)info.numel * 4);
        if (!got) fatal("out of memory");
        CHECK_OK(ctx, gpt2rt_param_read(ctx, info.name, GPT2RT_PARAM_VALUE, got, info.numel));
        const gpt2rt__st_tensor *t = fix_tensor(info.name);
        const float *want = (const float *)(const void *)(fix.data + t->begin);
        float *w = (float *)malloc((size_t)info.numel * 4);
        if (!w) fatal("out of memory");
        memcpy(w, want, (size_t)info.numel * 4);
        double err = rel_err(got, w, info.numel);
        if (err > worst) { worst = err; snprintf(worst_name, sizeof worst_name, "%s", info.name); }
        for (int64_t j = 0; j < info.numel; j++) {
            float x = bf16 ? from_bf16(to_bf16(w[j])) : from_f16(to_f16(w[j]));
            if (memcmp(&x, &got[j], 4)) inexact++;
        }
        free(got);
        free(w);
    }
    CHECK(worst < limit, "%s: worst rel error %.3e (%s), limit %.0e", path, worst, worst_name, limit);
    CHECK(inexact == 0, "%s: %lld values differ from the correctly rounded %s value", path, (long long)inexact,
          bf16 ? "BF16" : "F16");
    printf("    %s: worst rel error %.3e vs F32 (limit %.0e), %lld values not bitwise the rounded value\n",
           bf16 ? "BF16" : "F16 ", worst, limit, (long long)inexact);
    gpt2rt_step_stats st;
    CHECK_OK(ctx, gpt2rt_step(ctx, in_tok, tg_tok, &st));
    CHECK(st.step == 1, "%s: a weights load should restart the step count, step is %lld", path, (long long)st.step);
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(e);
}

/* ---- the groups ---- */

static void files_short_and_truncated(void) {
    group_begin("missing, empty, short and truncated files");
    rm_rf(TMP "/does_not_exist.safetensors");
    expect_reject(0, "missing file", TMP "/does_not_exist.safetensors", GPT2RT_ERR_IO,
                  TMP "/does_not_exist.safetensors", "cannot open", NULL);
    rm_rf(TMP "/no_dir");
    expect_reject(0, "missing directory", TMP "/no_dir", GPT2RT_ERR_IO, TMP "/no_dir/model.safetensors", NULL);
    size_t cuts[40];
    int nc = 0;
    cuts[nc++] = 0;                       /* empty */
    cuts[nc++] = 3;                       /* inside the length field */
    cuts[nc++] = 7;                       /* a 7-byte file */
    cuts[nc++] = 8;                       /* the length field alone */
    cuts[nc++] = 9;                       /* one header byte */
    cuts[nc++] = 8 + fix_hlen / 2;        /* inside the header JSON */
    cuts[nc++] = 8 + fix_hlen - 1;        /* last header byte missing */
    cuts[nc++] = 8 + fix_hlen;            /* header complete, no data */
    for (int k = 1; k < 16; k++) cuts[nc++] = fix_len * (size_t)k / 16; /* inside the data */
    cuts[nc++] = fix_len - 1;             /* the last byte cut */
    for (int i = 0; i < nc; i++) {
        size_t len = cuts[i];
        char label[64];
        snprintf(label, sizeof label, "truncated to %zu bytes", len);
        put_file(CASE_FILE, fix_buf, len);
        if (len < 8) {
            char what[48];
            snprintf(what, sizeof what, "%zu bytes, too short", len);
            expect_reject(0, label, CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, what, NULL);
        } else if (len < 8 + fix_hlen) {
            expect_reject(0, label, CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, num(fix_hlen), num(len - 8), "truncated",
                          NULL);
        } else { /* the first tensor (header order) whose data is cut */
            uint64_t dl = len - 8 - fix_hlen;
            const gpt2rt__st_tensor *t = NULL;
            for (int k = 0; k < fix.n && !t; k++)
                if (fix.t[k].end > dl) t = &fix.t[k];
            char name[128];
            snprintf(name, sizeof name, "'%s'", t->name);
            expect_reject(0, label, CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, name, num(dl), "truncated", NULL);
        }
    }
    group_end();
}

static void header_lengths(void) {
    group_begin("absurd header lengths");
    struct { const char *label; uint64_t hlen; } c[] = {
        {"header length 2^63", (uint64_t)1 << 63},
        {"header length 2^64-1", UINT64_MAX},
        {"header length 2^40", (uint64_t)1 << 40},
        {"header length 100 MB + 1", 100000001u},
        {"header length = file size + 1", fix_len + 1},
        {"header length = bytes after it + 1", fix_len - 8 + 1},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        size_t len;
        unsigned char *b = image(c[i].hlen, fix_hdr, fix_hlen, fix.data, (size_t)fix.data_len, &len);
        put_file(CASE_FILE, b, len);
        free(b);
        if (c[i].hlen > 100000000u)
            expect_reject(0, c[i].label, CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, num(c[i].hlen), num(fix_len - 8),
                          "100 MB", NULL);
        else
            expect_reject(0, c[i].label, CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, num(c[i].hlen), num(fix_len - 8),
                          "not a safetensors file (or a truncated one)", NULL);
    }
    {   /* a text file: its first 8 bytes read as a length of about 7e18; the message says what the file is not
           and shows its first bytes */
        static const char text[] = "{ this is a text file, not a model }\n";
        put_file(CASE_FILE, text, sizeof text - 1);
        expect_reject(0, "a text file", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, "not a safetensors file",
                      "7B 20 74 68 69 73 20 69", "(\"{ this is a text", NULL);
        CHECK(!strstr(gpt2rt_last_error(ctx), "exceeds"), "a text file: %s", gpt2rt_last_error(ctx));
    }
    for (uint64_t h = 0; h < 2; h++) {
        size_t len;
        unsigned char *b = image(h, fix_hdr, fix_hlen, fix.data, (size_t)fix.data_len, &len);
        put_file(CASE_FILE, b, len);
        free(b);
        char what[48];
        snprintf(what, sizeof what, "header length %llu is too short", (unsigned long long)h);
        expect_reject(0, what, CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, what, NULL);
    }
    group_end();
}

/* a header edit: replace `from` (first occurrence after `after`) by `to`; the
   parser must stop at (offset of the edit + delta) with `reason` */
static void json_case(const char *label, const char *after, const char *from, const char *to, size_t delta,
                      const char *reason) {
    size_t pos;
    char *h = replace(fix_hdr, after, from, to, &pos);
    write_with_header(h);
    expect_reject(0, label, CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, at_byte(pos + delta), reason, NULL);
    free(h);
}

static void malformed_json(void) {
    group_begin("malformed header JSON");
    const char *lnfb = entry_key("transformer.ln_f.bias");
    {
        char *h = replace(fix_hdr, NULL, "{", "[", NULL);
        write_with_header(h);
        expect_reject(0, "not starting with '{'", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, "not a safetensors file",
                      "does not start with '{'", NULL);
        free(h);
    }
    json_case("missing ':' after a key", NULL, "\"__metadata__\":", "\"__metadata__\"", 14, "expected ':'");
    json_case("missing ':' in a tensor entry", lnfb, "\"dtype\":", "\"dtype\"", 7, "expected ':'");
    json_case("missing ',' between tensors", NULL, "]},\"transformer.h.0.attn.c_attn.weight\"",
              "]}\"transformer.h.0.attn.c_attn.weight\"", 2, "expected ',' or '}'");
    json_case("missing ',' in a tensor entry", lnfb, "\"F32\",", "\"F32\" ", 6, "expected ',' or '}'");
    json_case("bad escape", NULL, "transformer.ln_f.bias", "transformer.ln_f\\q.bias", 18, "unknown escape");
    json_case("bad \\u escape", NULL, "transformer.ln_f.bias", "transformer.ln_f\\u12g4.bias", 18, "bad \\u escape");
    json_case("lone surrogate", NULL, "transformer.ln_f.bias", "transformer.ln_f\\ud800.bias", 22, "lone surrogate");
    json_case("\\u0000 in a name", NULL, "transformer.ln_f.bias", "transformer.ln_f\\u0000.bias", 22, "\\u0000 (NUL) in a string");
    json_case("control character in a string", NULL, "transformer.ln_f.bias", "transformer.ln_f\001.bias", 16,
              "control character");
    json_case("number where the dtype string is needed", lnfb, "\"F32\"", "32", 0, "expected a string");
    json_case("number where a tensor name is needed", NULL, "\"transformer.ln_f.bias\"", "17", 0, "expected a string");
    json_case("number as a metadata value", NULL, "\"pt\"", "1", 0, "expected a string");
    json_case("number where a tensor entry is needed", NULL, lnfb, "\"transformer.ln_f.bias\":5,\"x\":{", 24,
              "expected '{' (a tensor entry)");
    json_case("negative shape entry", lnfb, "\"shape\":[64]", "\"shape\":[-64]", 9, "-64 is outside [0, 1099511627776]");
    json_case("fractional shape entry", lnfb, "\"shape\":[64]", "\"shape\":[64.5]", 9, "fraction");
    json_case("exponent in a shape entry", lnfb, "\"shape\":[64]", "\"shape\":[64e0]", 9, "fraction");
    json_case("shape not an array", lnfb, "\"shape\":[64]", "\"shape\":64", 8, "expected '[' (an array)");
    json_case("more than 8 dimensions", lnfb, "\"shape\":[64]", "\"shape\":[1,1,1,1,1,1,1,1,64]", 25,
              "more than 8 dimensions");
    json_case("dimension above 2^40", lnfb, "\"shape\":[64]", "\"shape\":[1099511627777]", 9,
              "1099511627777 is outside [0, 1099511627776]");
    {
        char from[96], to[96];
        snprintf(from, sizeof from, "%s", offsets_text("transformer.ln_f.bias"));
        const gpt2rt__st_tensor *t = fix_tensor("transformer.ln_f.bias");
        snprintf(to, sizeof to, "\"data_offsets\":[%llu]", (unsigned long long)t->begin);
        json_case("data_offsets with 1 number", lnfb, from, to, strlen(to), "data_offsets has 1 numbers, not 2");
        snprintf(to, sizeof to, "\"data_offsets\":[%llu,%llu,%llu]", (unsigned long long)t->begin,
                 (unsigned long long)t->end, (unsigned long long)t->end);
        json_case("data_offsets with 3 numbers", lnfb, from, to, strlen(from), "data_offsets has more than 2 numbers");
        json_case("data_offsets with 0 numbers", lnfb, from, "\"data_offsets\":[]", 17, "data_offsets has 0 numbers, not 2");
        snprintf(to, sizeof to, "\"data_offsets\":[%llu,99999999999999999999]", (unsigned long long)t->begin);
        json_case("data_offsets beyond 2^64", lnfb, from, to, strlen(to) - 21, "99999999999999999999 is outside [0, 2^64)");
    }
    json_case("unterminated header object", NULL, "}}     ", "}      ", 7, "unexpected end (an object is not closed)");
    json_case("trailing garbage after the object", NULL, "}}     ", "}}    x", 6, "text after the JSON value");
    json_case("a second object after the first", NULL, "}}     ", "}}{}   ", 2, "text after the JSON value");
    {
        /* the whole ln_f.bias entry emptied: {} */
        const gpt2rt__st_tensor *t = fix_tensor("transformer.ln_f.bias");
        char from[160];
        snprintf(from, sizeof from, "{\"dtype\":\"F32\",\"shape\":[64],%s}", offsets_text(t->name));
        json_case("empty tensor entry {}", lnfb, from, "{}", 2, "tensor 'transformer.ln_f.bias' lacks dtype");
        json_case("tensor entry without data_offsets", lnfb, from, "{\"dtype\":\"F32\",\"shape\":[64]}", 28,
                  "tensor 'transformer.ln_f.bias' lacks data_offsets");
        json_case("duplicate dtype key", lnfb, "\"dtype\":\"F32\"", "\"dtype\":\"F32\",\"dtype\":\"F32\"", 22,
                  "duplicate \"dtype\"");
        json_case("duplicate shape key", lnfb, "\"shape\":[64]", "\"shape\":[64],\"shape\":[64]", 21,
                  "duplicate \"shape\"");
    }
    {
        char deep[1400];
        size_t n = (size_t)snprintf(deep, sizeof deep, "{\"unknown\":");
        for (int i = 0; i < 600; i++) deep[n++] = '[';
        for (int i = 0; i < 600; i++) deep[n++] = ']';
        snprintf(deep + n, sizeof deep - n, ",\"dtype\"");
        /* the skipped value is depth 1; depth 513 (the 513th '[') is refused */
        json_case("nesting 600 deep in an unknown key", lnfb, "{\"dtype\"", deep, 11 + 512, "nested more than 512 deep");
    }
    {
        /* duplicate tensor names: ln_1.bias renamed to ln_2.bias (same length) */
        char *h = replace(fix_hdr, NULL, "\"transformer.h.0.ln_1.bias\"", "\"transformer.h.0.ln_2.bias\"", NULL);
        write_with_header(h);
        expect_reject(0, "duplicate tensor names", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                      "'transformer.h.0.ln_2.bias' appears twice", NULL);
        free(h);
    }
    group_end();
}

static void wrong_dtype(void) {
    group_begin("wrong dtype");
    const char *name = "transformer.h.1.mlp.c_fc.weight";
    char *h = replace(fix_hdr, entry_key(name), "\"F32\"", "\"I32\"", NULL);
    write_with_header(h);
    free(h);
    expect_reject(0, "F32 rewritten as I32", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                  "'transformer.h.1.mlp.c_fc.weight' has dtype I32", "F32, F16 or BF16", NULL);
    h = replace(fix_hdr, entry_key("transformer.wte.weight"), "\"F32\"", "\"U32\"", NULL);
    write_with_header(h);
    free(h);
    expect_reject(0, "F32 rewritten as U32", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                  "'transformer.wte.weight' has dtype U32", NULL);
    size_t pos;
    h = replace(fix_hdr, entry_key(name), "\"F32\"", "\"F33\"", &pos);
    write_with_header(h);
    free(h);
    expect_reject(0, "unknown dtype F33", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, "unknown dtype", at_byte(pos + 5),
                  NULL);
    /* F64 with the same bytes: half the elements, so the shape no longer fits the data */
    h = replace(fix_hdr, entry_key("transformer.ln_f.bias"), "\"F32\"", "\"F64\"", NULL);
    write_with_header(h);
    free(h);
    expect_reject(0, "F32 rewritten as F64 (size mismatch)", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                  "'transformer.ln_f.bias' has data_offsets", "needs 512 bytes (F64, 64 elements)", NULL);
    /* U8 of 4x the elements: offsets consistent, dtype refused */
    h = replace(fix_hdr, entry_key("transformer.ln_f.bias"), "\"dtype\":\"F32\",\"shape\":[64]",
                "\"dtype\":\"U8\",\"shape\":[256]", NULL);
    write_with_header(h);
    free(h);
    expect_reject(0, "U8 of the same bytes", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                  "'transformer.ln_f.bias' has dtype U8", NULL);
    group_end();
}

static void wrong_shape(void) {
    group_begin("wrong shapes");
    /* same header length: (64,192) -> (192,64), the bytes still fit */
    char *h = replace(fix_hdr, entry_key("transformer.h.0.attn.c_attn.weight"), "[64,192]", "[192,64]", NULL);
    write_with_header(h);
    free(h);
    expect_reject(0, "c_attn.weight (192,64) for (64,192)", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                  "'transformer.h.0.attn.c_attn.weight' has shape (192, 64); the config needs (64, 192)", NULL);
    h = replace(fix_hdr, entry_key("transformer.h.0.mlp.c_fc.weight"), "[64,256]", "[64,16,16]", NULL);
    write_with_header(h);
    free(h);
    expect_reject(0, "c_fc.weight 3-D", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                  "'transformer.h.0.mlp.c_fc.weight' has shape (64, 16, 16); the config needs (64, 256)", NULL);
    h = replace(fix_hdr, entry_key("transformer.h.1.ln_1.weight"), "[64]", "[1,64]", NULL);
    write_with_header(h);
    free(h);
    expect_reject(0, "ln_1.weight 2-D", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                  "'transformer.h.1.ln_1.weight' has shape (1, 64); the config needs (64)", NULL);
    /* rebuilt files: the data shrinks with the shape */
    struct { const char *label, *name; int ndim; int64_t s0, s1; const char *msg; } c[] = {
        {"ln_f.bias (32) for (64)", "transformer.ln_f.bias", 1, 32, 0,
         "'transformer.ln_f.bias' has shape (32); the config needs (64)"},
        {"ln_2.bias scalar", "transformer.h.0.ln_2.bias", 0, 0, 0,
         "'transformer.h.0.ln_2.bias' has shape (); the config needs (64)"},
        {"wte (999,64) for (1000,64)", "transformer.wte.weight", 2, 999, 64,
         "'transformer.wte.weight' has shape (999, 64); the config needs (1000, 64)"},
        {"wte (1000,32)", "transformer.wte.weight", 2, 1000, 32,
         "'transformer.wte.weight' has shape (1000, 32); the config needs (1000, 64)"},
        {"wpe (32,64): fewer positions", "transformer.wpe.weight", 2, 32, 64,
         "'transformer.wpe.weight' has shape (32, 64); the config needs (64, 64) (or more positions)"},
        {"c_proj.bias (0)", "transformer.h.1.attn.c_proj.bias", 1, 0, 0,
         "'transformer.h.1.attn.c_proj.bias' has shape (0); the config needs (64)"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        int n;
        entry *e = fix_entries(&n);
        entry *t = find_entry(e, n, c[i].name);
        t->ndim = c[i].ndim;
        t->shape[0] = c[i].s0;
        t->shape[1] = c[i].s1;
        int64_t numel = 1;
        for (int k = 0; k < t->ndim; k++) numel *= t->shape[k];
        t->nbytes = (size_t)numel * 4;
        write_entries(CASE_FILE, e, n, NULL);
        free(e);
        expect_reject(0, c[i].label, CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, c[i].msg, NULL);
    }
    {
        size_t pos;
        char *h2 = replace(fix_hdr, entry_key("transformer.ln_f.bias"), "[64]", "[1048576,1048576,1048576]", &pos);
        write_with_header(h2);
        free(h2);
        expect_reject(0, "shape of 2^60 elements", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                      "'transformer.ln_f.bias' has more than 2^50 elements", NULL);
    }
    group_end();
}

static void missing_tensors(void) {
    group_begin("missing tensors");
    char *h = replace(fix_hdr, NULL, "\"transformer.ln_f.bias\"", "\"transformer.ln_f.bian\"", NULL);
    write_with_header(h);
    free(h);
    char count[32];
    snprintf(count, sizeof count, "the file has %d tensors", fix.n);
    expect_reject(0, "ln_f.bias renamed ln_f.bian", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                  "'transformer.ln_f.bias' (or 'ln_f.bias') is missing", count, NULL);
    h = replace(fix_hdr, NULL, "\"transformer.wte.weight\"", "\"Transformer.wte.weight\"", NULL);
    write_with_header(h);
    free(h);
    expect_reject(0, "wte with a capital T", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                  "'transformer.wte.weight' (or 'wte.weight') is missing", NULL);
    int n;
    entry *e = fix_entries(&n);
    write_entries(CASE_FILE, e, n, "transformer.h.1.");
    expect_reject(0, "a 1-layer file for 2 layers", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                  "'transformer.h.1.ln_1.weight' (or 'h.1.ln_1.weight') is missing", NULL);
    write_entries(CASE_FILE, e, 0, NULL);
    expect_reject(0, "no tensors at all", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                  "'transformer.wte.weight' (or 'wte.weight') is missing; the file has 0 tensors", NULL);
    free(e);
    const char *empty = "{}";
    size_t len;
    unsigned char *b = image(2, empty, 2, NULL, 0, &len);
    put_file(CASE_FILE, b, len);
    free(b);
    expect_reject(0, "header {} and no data", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, "the file has 0 tensors", NULL);
    group_end();
}

static void bad_offsets(void) {
    group_begin("data_offsets out of range or inconsistent");
    struct { const char *label, *name; int64_t db, de; int swap; const char *extra; } c[] = {
        {"last tensor shifted past the end", "transformer.wte.weight", 4, 4, 0, "(truncated file?)"},
        {"end before begin", "transformer.ln_f.bias", 0, 0, 1, "needs 256 bytes"},
        {"4 bytes short", "transformer.ln_f.bias", 0, -4, 0, "needs 256 bytes (F32, 64 elements)"},
        {"4 bytes long", "transformer.h.0.attn.c_attn.bias", 0, 4, 0, "needs 768 bytes (F32, 192 elements)"},
        {"far beyond the data", "transformer.ln_f.bias", 1000000, 1000000, 0, "(truncated file?)"},
        {"begin 0, end = file size", "transformer.ln_f.bias", 0, 0, 2, "(truncated file?)"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const gpt2rt__st_tensor *t = fix_tensor(c[i].name);
        unsigned long long b = t->begin + (uint64_t)c[i].db, e = (unsigned long long)((int64_t)t->end + c[i].de);
        if (c[i].swap == 1) { unsigned long long x = b; b = e; e = x; }
        if (c[i].swap == 2) { b = 0; e = fix_len; }
        char to[96], want[160];
        snprintf(to, sizeof to, "\"data_offsets\":[%llu,%llu]", b, e);
        char *h = replace(fix_hdr, entry_key(c[i].name), offsets_text(c[i].name), to, NULL);
        write_with_header(h);
        free(h);
        snprintf(want, sizeof want, "'%s' has data_offsets [%llu, %llu]", c[i].name, b, e);
        expect_reject(0, c[i].label, CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, want, c[i].extra,
                      num(fix.data_len), NULL);
    }
    {
        /* offsets near 2^64 whose difference is right: no wrap-around */
        const char *to = "\"data_offsets\":[18446744073709551000,18446744073709551256]";
        char *h = replace(fix_hdr, entry_key("transformer.ln_f.bias"), offsets_text("transformer.ln_f.bias"), to, NULL);
        write_with_header(h);
        free(h);
        expect_reject(0, "offsets near 2^64", CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                      "'transformer.ln_f.bias' has data_offsets [18446744073709551000, 18446744073709551256]", NULL);
    }
    group_end();
}

static void state_cases(void) {
    group_begin("training state: good path and rejected files");
    const char *path = TMP "/state.safetensors";
    char tmps[256];
    prime();
    CHECK_OK(ctx, gpt2rt_state_save(ctx, path));
    tmp_files(TMP, tmps, sizeof tmps);
    CHECK(!tmps[0], "state save left %s behind", tmps);
    /* the good path: a step, then load: the same weights and the same next step */
    take_snapshot();
    float *saved = (float *)malloc((size_t)snap_n * 4);
    if (!saved) fatal("out of memory");
    memcpy(saved, snap, (size_t)snap_n * 4);
    gpt2rt_step_stats st1, st2;
    CHECK_OK(ctx, gpt2rt_step(ctx, in_tok, tg_tok, &st1));
    CHECK_OK(ctx, gpt2rt_step(ctx, in_tok, tg_tok, &st2));
    CHECK_OK(ctx, gpt2rt_state_load(ctx, path));
    g_cases++;
    memcpy(snap, saved, (size_t)snap_n * 4);
    CHECK(unchanged(), "state load did not restore weights and moments bitwise");
    gpt2rt_step_stats st3;
    CHECK_OK(ctx, gpt2rt_step(ctx, in_tok, tg_tok, &st3));
    CHECK(st3.step == st1.step && st3.loss == st1.loss && st3.grad_norm == st1.grad_norm,
          "resumed step %lld loss %.9g, original step %lld loss %.9g", (long long)st3.step, (double)st3.loss,
          (long long)st1.step, (double)st1.loss);
    free(saved);

    size_t slen;
    unsigned char *sbuf = read_all(path, &slen);
    if (!sbuf) fatal("cannot read %s", path);
    uint64_t shlen = 0;
    for (int i = 7; i >= 0; i--) shlen = (shlen << 8) | sbuf[i];
    size_t cuts[] = {0, 5, 8 + shlen / 2, 8 + shlen, slen / 2, slen - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char label[64];
        snprintf(label, sizeof label, "state truncated to %zu bytes", cuts[i]);
        put_file(CASE_FILE, sbuf, cuts[i]);
        /* the data holds params, adam_m, adam_v in that order, n_params floats each */
        uint64_t dl = cuts[i] >= 8 + shlen ? cuts[i] - 8 - shlen : 0, nb = (uint64_t)n_padded * 4;
        const char *first_cut = dl < nb ? "'params'" : dl < 2 * nb ? "'adam_m'" : "'adam_v'";
        expect_reject(1, label, CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE,
                      cuts[i] < 8 ? "too short" : cuts[i] < 8 + shlen ? num(shlen) : first_cut, NULL);
    }
    /* another shape */
    gpt2rt_config c1 = fixture_config();
    c1.n_layer = 1;
    gpt2rt_ctx *ctx1 = make_ctx(c1);
    CHECK_OK(ctx1, gpt2rt_state_save(ctx1, TMP "/state_1layer.safetensors"));
    gpt2rt_free(ctx1);
    expect_reject(1, "state of a 1-layer context", TMP "/state_1layer.safetensors", GPT2RT_ERR_FORMAT,
                  "the state has n_layer = 1, this context has 2", NULL);
    c1 = fixture_config();
    c1.max_seq_len = 32;
    ctx1 = make_ctx(c1);
    CHECK_OK(ctx1, gpt2rt_state_save(ctx1, TMP "/state_32pos.safetensors"));
    gpt2rt_free(ctx1);
    expect_reject(1, "state of a 32-position context", TMP "/state_32pos.safetensors", GPT2RT_ERR_FORMAT,
                  "max_seq_len = 32, this context has 64", NULL);
    /* a weights file as state, a state as weights */
    expect_reject(1, "weights file as state", FIX "model.safetensors", GPT2RT_ERR_FORMAT, FIX "model.safetensors",
                  "not a gpt2rt training state", "'pt'", NULL);
    expect_reject(0, "state file as weights", path, GPT2RT_ERR_FORMAT, path,
                  "'transformer.wte.weight' (or 'wte.weight') is missing; the file has 3 tensors, the first is params",
                  NULL);
    /* edits of the state's header (same lengths) */
    struct { const char *label, *from, *to, *msg; } ed[] = {
        {"state without adam_v", "\"adam_v\"", "\"adam_w\"", "'adam_v' must be F32"},
        {"state without step", "\"step\"", "\"stap\"", "metadata step = '(missing)'"},
        {"state with another format", "gpt2rt-state-1", "gpt2rt-state-9", "'gpt2rt-state-9'"},
        {"state params as I32", "\"F32\"", "\"I32\"", "'params' must be F32"},
    };
    char *shdr = (char *)malloc((size_t)shlen + 1);
    if (!shdr) fatal("out of memory");
    memcpy(shdr, sbuf + 8, (size_t)shlen);
    shdr[shlen] = 0;
    for (size_t i = 0; i < sizeof ed / sizeof ed[0]; i++) {
        char *h = replace(shdr, NULL, ed[i].from, ed[i].to, NULL);
        if (strlen(h) != shlen) fatal("test bug: state header edit changed its length");
        memcpy(sbuf + 8, h, (size_t)shlen);
        put_file(CASE_FILE, sbuf, slen);
        memcpy(sbuf + 8, shdr, (size_t)shlen);
        free(h);
        char n_params[64];
        snprintf(n_params, sizeof n_params, "%lld", (long long)n_padded);
        expect_reject(1, ed[i].label, CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, ed[i].msg,
                      strstr(ed[i].msg, "must be F32") ? n_params : NULL, NULL);
    }
    free(shdr);
    free(sbuf);
    rm_rf(TMP "/no_state.safetensors");
    expect_reject(1, "missing state file", TMP "/no_state.safetensors", GPT2RT_ERR_IO, TMP "/no_state.safetensors",
                  NULL);
    group_end();
}

/* metadata the state loader must not take at face value: a negative step makes
   the next learning rate NaN (warmup: lr*(step+1)/warmup... or 0/0), 2^63-1
   overflows the step counter, text is read as 0 */
static void state_values(void) {
    group_begin("training state: impossible step and rng values");
    size_t slen;
    unsigned char *sbuf = read_all(TMP "/state.safetensors", &slen);
    if (!sbuf) fatal("cannot read " TMP "/state.safetensors");
    uint64_t shlen = 0;
    for (int i = 7; i >= 0; i--) shlen = (shlen << 8) | sbuf[i];
    char *shdr = (char *)malloc((size_t)shlen + 1);
    if (!shdr) fatal("out of memory");
    memcpy(shdr, sbuf + 8, (size_t)shlen);
    shdr[shlen] = 0;
    char rng_from[64];
    snprintf(rng_from, sizeof rng_from, "\"rng\":\"%llu\"", (unsigned long long)primed_rng);
    struct { const char *label, *from, *to, *msg1, *msg2; } v[] = {
        {"step -1", "\"step\":\"1\"", "\"step\":\"-1\"", "step", "-1"},
        {"step 2^63-1", "\"step\":\"1\"", "\"step\":\"9223372036854775807\"", "step", "9223372036854775807"},
        {"step 99999999999999999999 (beyond int64)", "\"step\":\"1\"", "\"step\":\"99999999999999999999\"", "step",
         "99999999999999999999"},
        {"step not a number", "\"step\":\"1\"", "\"step\":\"one\"", "step", "one"},
        {"rng not a number", rng_from, "\"rng\":\"seed\"", "rng", "seed"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char *h = replace(shdr, NULL, v[i].from, v[i].to, NULL);
        size_t len, hl = strlen(h);
        unsigned char *b = image(hl, h, hl, sbuf + 8 + shlen, slen - 8 - (size_t)shlen, &len);
        put_file(CASE_FILE, b, len);
        free(b);
        free(h);
        expect_reject(1, v[i].label, CASE_FILE, GPT2RT_ERR_FORMAT, CASE_FILE, v[i].msg1, v[i].msg2, NULL);
    }
    free(shdr);
    free(sbuf);
    group_end();
}

static void directory_as_file(void) {
    /* a directory where a file is expected: must be an I/O error, not a huge
       allocation (fopen succeeds on a directory; its "size" from fseek/ftell is
       LONG_MAX on ext4) */
    group_begin("a directory where a file is expected");
    rm_rf(TMP "/dir.safetensors");
    mkdirs(TMP "/dir.safetensors");
    expect_reject(0, "weights path naming a directory *.safetensors", TMP "/dir.safetensors", GPT2RT_ERR_IO,
                  TMP "/dir.safetensors", NULL);
    expect_reject(1, "state path naming a directory", TMP "/dir.safetensors", GPT2RT_ERR_IO, TMP "/dir.safetensors",
                  NULL);
    group_end();
}

static void saves(void) {
    group_begin("saves: failures leave nothing partial, success no .tmp");
    char tmps[512];
    prime();
    /* a directory that cannot be created */
    rm_rf(TMP "/no");
    gpt2rt_result r = gpt2rt_weights_save(ctx, TMP "/no/such/dir");
    g_cases++;
    CHECK(r == GPT2RT_ERR_IO, "save into a missing parent: %s (%s)", gpt2rt_result_string(r), gpt2rt_last_error(ctx));
    CHECK(strstr(gpt2rt_last_error(ctx), TMP "/no/such/dir") != NULL, "message lacks the path: %s",
          gpt2rt_last_error(ctx));
    CHECK(!exists(TMP "/no"), "save into a missing parent created something");
    /* a regular file where the directory should be */
    put_file(TMP "/a_file", "x", 1);
    r = gpt2rt_weights_save(ctx, TMP "/a_file");
    g_cases++;
    CHECK(r == GPT2RT_ERR_IO, "save into a regular file: %s (%s)", gpt2rt_result_string(r), gpt2rt_last_error(ctx));
    /* the tmp file cannot be written (a non-empty directory of its name), no old file */
    const char *d1 = TMP "/save_blocked";
    rm_rf(d1);
    mkdirs(TMP "/save_blocked/model.safetensors.tmp");
    put_file(TMP "/save_blocked/model.safetensors.tmp/keep", "x", 1);
    r = gpt2rt_weights_save(ctx, d1);
    g_cases++;
    CHECK(r == GPT2RT_ERR_IO, "save with the tmp blocked: %s (%s)", gpt2rt_result_string(r), gpt2rt_last_error(ctx));
    CHECK(strstr(gpt2rt_last_error(ctx), "model.safetensors") != NULL, "message lacks the file: %s",
          gpt2rt_last_error(ctx));
    CHECK(!exists(TMP "/save_blocked/model.safetensors"), "a failed save left a model.safetensors");
    CHECK(!exists(TMP "/save_blocked/config.json") && !exists(TMP "/save_blocked/config.json.tmp"),
          "a failed save left a config.json");
    /* the same with an old model.safetensors in place: it stays as it was */
    put_file(TMP "/save_blocked/model.safetensors", fix_buf, fix_len);
    gpt2rt_step_stats st;
    CHECK_OK(ctx, gpt2rt_step(ctx, in_tok, tg_tok, &st)); /* the weights now differ from the old file */
    take_snapshot();
    r = gpt2rt_weights_save(ctx, d1);
    g_cases++;
    CHECK(r == GPT2RT_ERR_IO, "save over an old file with the tmp blocked: %s", gpt2rt_result_string(r));
    size_t olen;
    unsigned char *old = read_all(TMP "/save_blocked/model.safetensors", &olen);
    CHECK(old && olen == fix_len && !memcmp(old, fix_buf, fix_len), "a failed save changed the old model.safetensors");
    free(old);
    /* config.json.tmp blocked: the model tmp must be removed, nothing renamed */
    const char *d2 = TMP "/save_blocked_config";
    rm_rf(d2);
    mkdirs(TMP "/save_blocked_config/config.json.tmp");
    put_file(TMP "/save_blocked_config/config.json.tmp/keep", "x", 1);
    r = gpt2rt_weights_save(ctx, d2);
    g_cases++;
    CHECK(r == GPT2RT_ERR_IO, "save with config.json.tmp blocked: %s (%s)", gpt2rt_result_string(r),
          gpt2rt_last_error(ctx));
    CHECK(!exists(TMP "/save_blocked_config/model.safetensors") &&
          !exists(TMP "/save_blocked_config/model.safetensors.tmp"),
          "a failed save (config.json) left model.safetensors or its .tmp");
    /* the final name is taken by a non-empty directory: the rename fails */
    const char *d3 = TMP "/save_blocked_rename";
    rm_rf(d3);
    mkdirs(TMP "/save_blocked_rename/model.safetensors");
    put_file(TMP "/save_blocked_rename/model.safetensors/keep", "x", 1);
    r = gpt2rt_weights_save(ctx, d3);
    g_cases++;
    CHECK(r == GPT2RT_ERR_IO, "save with the final name blocked: %s (%s)", gpt2rt_result_string(r),
          gpt2rt_last_error(ctx));
    tmp_files(d3, tmps, sizeof tmps);
    CHECK(!tmps[0], "a failed rename left %s", tmps);
    CHECK(!exists(TMP "/save_blocked_rename/config.json"), "a failed rename still wrote config.json");
    /* state save: tmp blocked, missing directory */
    rm_rf(TMP "/state_blocked.safetensors");
    rm_rf(TMP "/state_blocked.safetensors.tmp");
    mkdirs(TMP "/state_blocked.safetensors.tmp");
    put_file(TMP "/state_blocked.safetensors.tmp/keep", "x", 1);
    r = gpt2rt_state_save(ctx, TMP "/state_blocked.safetensors");
    g_cases++;
    CHECK(r == GPT2RT_ERR_IO, "state save with the tmp blocked: %s", gpt2rt_result_string(r));
    CHECK(!exists(TMP "/state_blocked.safetensors"), "a failed state save left a file");
    r = gpt2rt_state_save(ctx, TMP "/no/such/dir/state.safetensors");
    g_cases++;
    CHECK(r == GPT2RT_ERR_IO, "state save into a missing directory: %s", gpt2rt_result_string(r));
    /* every failure above left the context usable and the weights as they were */
    CHECK(unchanged(), "failed saves changed the weights");
    CHECK_OK(ctx, gpt2rt_step(ctx, in_tok, tg_tok, &st));
    /* success: exactly model.safetensors and config.json, loadable, bitwise the weights */
    const char *d4 = TMP "/save_ok";
    rm_rf(d4);
    prime();
    CHECK_OK(ctx, gpt2rt_weights_save(ctx, d4));
    g_cases++;
    tmp_files(d4, tmps, sizeof tmps);
    CHECK(!tmps[0], "a successful save left %s", tmps);
    CHECK(exists(TMP "/save_ok/model.safetensors") && exists(TMP "/save_ok/config.json"),
          "a successful save lacks model.safetensors or config.json");
    take_snapshot();
    CHECK_OK(ctx, gpt2rt_weights_save(ctx, d4)); /* over an existing save */
    tmp_files(d4, tmps, sizeof tmps);
    CHECK(!tmps[0], "a second save left %s", tmps);
    CHECK_OK(ctx, gpt2rt_weights_load(ctx, d4));
    CHECK(values_equal(snap), "saved and reloaded weights differ");
    group_end();
}

static void good_paths(void) {
    group_begin("good paths: directory, extra positions, F16, BF16");
    /* a directory holding model.safetensors, with and without a trailing slash */
    rm_rf(TMP "/gooddir");
    mkdirs(TMP "/gooddir");
    put_file(TMP "/gooddir/model.safetensors", fix_buf, fix_len);
    const char *dirs[2] = {TMP "/gooddir", TMP "/gooddir/"};
    for (int i = 0; i < 2; i++) {
        g_cases++;
        prime(); /* weights moved by a step */
        CHECK_OK(ctx, gpt2rt_weights_load(ctx, dirs[i]));
        CHECK(values_equal(fix_params), "%s: weights differ from the fixture",
              dirs[i]);
    }
    /* wpe with 128 positions for a 64-position model: the first 64 rows load */
    {
        int n;
        entry *e = fix_entries(&n);
        entry *w = find_entry(e, n, "transformer.wpe.weight");
        float *big = (float *)malloc(128 * 64 * 4);
        if (!big) fatal("out of memory");
        memcpy(big, w->data, 64 * 64 * 4);
        for (int i = 64 * 64; i < 128 * 64; i++) big[i] = 1e30f; /* must not be read */
        w->shape[0] = 128;
        w->data = big;
        w->nbytes = 128 * 64 * 4;
        write_entries(CASE_FILE, e, n, NULL);
        g_cases++;
        prime();
        CHECK_OK(ctx, gpt2rt_weights_load(ctx, CASE_FILE));
        CHECK(values_equal(fix_params), "wpe (128,64): weights differ");
        free(big);
        free(e);
    }
    /* an unknown key nested 32 deep (the parser's limit) is skipped */
    {
        char *h = replace(fix_hdr, entry_key("transformer.ln_f.bias"), "{\"dtype\"",
                          "{\"unknown\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],\"dtype\"", NULL);
        write_with_header(h);
        free(h);
        g_cases++;
        prime();
        CHECK_OK(ctx, gpt2rt_weights_load(ctx, CASE_FILE));
        CHECK(values_equal(fix_params), "32-deep unknown key: weights differ");
    }
    check_half(0);
    check_half(1);
    group_end();
}

int main(void) {
    double t_start = harness_now();
    rm_rf(TMP);
    mkdirs(TMP);
    all_steps = getenv("TEST_FORMATS_ALL_STEPS") && atoi(getenv("TEST_FORMATS_ALL_STEPS"));
    fix_buf = read_all(FIX "model.safetensors", &fix_len);
    if (!fix_buf) fatal("cannot read " FIX "model.safetensors (run from the repo root)");
    ctx = make_ctx(fixture_config());
    if (gpt2rt__st_parse(ctx, fix_buf, fix_len, "fixture", &fix) != GPT2RT_OK) fatal("%s", gpt2rt_last_error(ctx));
    fix_hlen = (size_t)(fix.data - fix_buf) - 8;
    fix_hdr = (char *)malloc(fix_hlen + 1);
    gpt2rt_memory_plan pl;
    if (gpt2rt_plan_allocated(ctx, &pl) != GPT2RT_OK) fatal("plan_allocated");
    n_padded = pl.n_params_padded;
    snap = (float *)malloc((size_t)n_padded * 12);
    probe = (float *)malloc((size_t)n_padded * 12);
    fix_params = (float *)malloc((size_t)n_padded * 4);
    gpt2rt_config c = gpt2rt_config_get(ctx);
    int64_t BT = (int64_t)c.batch_size * c.seq_len;
    in_tok = (int32_t *)malloc((size_t)BT * 4);
    tg_tok = (int32_t *)malloc((size_t)BT * 4);
    logits_buf = (float *)malloc((size_t)BT * (size_t)c.vocab_size * 4);
    if (!fix_hdr || !snap || !probe || !fix_params || !in_tok || !tg_tok || !logits_buf) fatal("out of memory");
    memcpy(fix_hdr, fix_buf + 8, fix_hlen);
    fix_hdr[fix_hlen] = 0;
    uint32_t s = 12345;
    for (int64_t i = 0; i < BT; i++) {
        s = s * 1664525u + 1013904223u;
        in_tok[i] = (int32_t)((s >> 8) % (uint32_t)c.vocab_size);
    }
    for (int64_t i = 0; i < BT; i++) tg_tok[i] = (i + 1) % c.seq_len ? in_tok[i + 1] : -100;
    /* the reference: the loss of the second step after prime() */
    if (gpt2rt_weights_load(ctx, FIX "model.safetensors") != GPT2RT_OK) fatal("%s", gpt2rt_last_error(ctx));
    harness_params(ctx, GPT2RT_PARAM_VALUE, fix_params);
    prime();
    gpt2rt_step_stats st;
    if (gpt2rt_step(ctx, in_tok, tg_tok, &st) != GPT2RT_OK || st.step != 2 || !(st.loss > 0))
        fatal("second step: %s", gpt2rt_last_error(ctx));
    ref_loss = st.loss;
    printf("fixture: %zu bytes, header %zu bytes, %d tensors; reference loss of step 2: %.7f\n", fix_len, fix_hlen,
           fix.n, (double)ref_loss);

    files_short_and_truncated();
    header_lengths();
    malformed_json();
    wrong_dtype();
    wrong_shape();
    missing_tensors();
    bad_offsets();
    state_cases();
    state_values();
    directory_as_file();
    saves();
    good_paths();

    gpt2rt__st_release(ctx, &fix);
    gpt2rt_free(ctx);
    free(fix_buf);
    free(fix_hdr);
    free(snap);
    free(probe);
    free(logits_buf);
    free(fix_params);
    free(in_tok);
    free(tg_tok);
    free(primed);
    printf("%d of the rejected loads were followed by a whole step (TEST_FORMATS_ALL_STEPS=1: all); %.1f s\n",
           n_usable, harness_now() - t_start);
    return harness_finish();
}
