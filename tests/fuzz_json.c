/* tests/fuzz_json.c - libFuzzer target for the JSON reader (gpt2rt.h 4.1) through the
   paths that use it. The first input byte picks the path (b % 4), the rest is the JSON:
   0  config.json: gpt2rt__config_parse_mem, what gpt2rt_config_load runs on the file;
   1  a safetensors header: the bytes after an 8-byte length, then 64 data bytes,
      through gpt2rt__st_parse (what gpt2rt_weights_load / _state_load run);
   2  a vocabulary json (encoder.json) through gpt2rt_tok_load_mem, merges empty;
   3  the reader alone: gpt2rt__json_skip validates the value, a walker copies it out
      canonically (strings re-escaped, numbers as %.17g) and must agree on validity.

   Oracles, beyond "no crash, no sanitizer report":
   - a failure is GPT2RT_ERR_FORMAT (or OUT_OF_MEMORY) and its message names the input;
   - config.json: a failure leaves the config as it was; a success sets the shape to
     values >= 1 and the dropouts to [0, 1);
   - safetensors: a success describes tensors inside the 64 data bytes;
   - the reader: skip and the walker accept the same texts; the walker's output read
     again gives the same output (strings and numbers survive a round trip).

   Fuzzing (clang, libFuzzer), one process on one core: `make fuzz-json`, or
     clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined \
           -o build/fuzz_json tests/fuzz_json.c -lm
     ./build/fuzz_json build/fuzz_json_work tests/fuzz_corpus_json -dict=tests/fuzz_json.dict
   Replay without libFuzzer (what make test runs):
     cc -std=c11 -DFUZZ_REPLAY -o build/fuzz_json_replay tests/fuzz_json.c -lm
     ./build/fuzz_json_replay tests/fuzz_corpus_json
   See tests/FUZZING.md. */
#define _POSIX_C_SOURCE 200809L
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_NAME "fuzz-input.json"

static gpt2rt_ctx *fz_ctx;
static gpt2rt_result fz_last;
static char fz_msg[4096];

static void fz_die(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_json: %s: %s\n", what, detail ? detail : "");
    abort();
}

/* a copy of exactly n bytes plus the NUL the reader may look at */
static char *fz_copy(const uint8_t *p, size_t n) {
    char *b = (char *)malloc(n + 1);
    if (!b) fz_die("malloc", "input");
    if (n) memcpy(b, p, n);
    b[n] = 0;
    return b;
}

static void fz_check_failure(gpt2rt_result r, const char *msg, const char *name) {
    if (r != GPT2RT_ERR_FORMAT && r != GPT2RT_ERR_OUT_OF_MEMORY) fz_die("result", gpt2rt_result_string(r));
    if (name && !strstr(msg, name)) fz_die("error message does not name the input", msg);
    if (!msg[0]) fz_die("empty error message", "");
}

/* ---- path 3: the reader alone ---- */
typedef struct { char *b; size_t n, cap; } fz_out;

static void fz_put(fz_out *o, const char *s, size_t n) {
    if (o->n + n + 1 > o->cap) {
        size_t c = o->cap ? o->cap : 256;
        while (c < o->n + n + 1) c *= 2;
        char *nb = (char *)realloc(o->b, c);
        if (!nb) fz_die("realloc", "output");
        o->b = nb;
        o->cap = c;
    }
    memcpy(o->b + o->n, s, n);
    o->n += n;
    o->b[o->n] = 0;
}

static void fz_put_string(fz_out *o, const char *s, size_t n) {
    fz_put(o, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == '"' || c == '\\') { e[0] = '\\'; e[1] = (char)c; fz_put(o, e, 2); }
        else if (c < 0x20) { snprintf(e, sizeof e, "\\u%04X", c); fz_put(o, e, 6); }
        else fz_put(o, (const char *)&s[i], 1);
    }
    fz_put(o, "\"", 1);
}

static gpt2rt_result fz_walk(gpt2rt__json *j, fz_out *o, int depth) {
    if (depth > GPT2RT__JSON_DEPTH) return gpt2rt__json_fail(j, "nested too deep");
    int c = gpt2rt__json_peek(j);
    gpt2rt_result r = GPT2RT_OK;
    const char *s;
    size_t n;
    if (c == '"') {
        if ((r = gpt2rt__json_string_n(j, &s, &n)) == GPT2RT_OK) {
            if (strlen(s) != n) fz_die("a string's length is not its strlen", s);
            fz_put_string(o, s, n);
        }
        return r;
    }
    if (c == '{' || c == '[') {
        int first = 1;
        fz_put(o, c == '{' ? "{" : "[", 1);
        if (c == '{') {
            if ((r = gpt2rt__json_object_begin(j)) != GPT2RT_OK) return r;
            while (gpt2rt__json_object_next(j, &s, &r)) {
                if (!first) fz_put(o, ",", 1);
                first = 0;
                fz_put_string(o, s, strlen(s));
                fz_put(o, ":", 1);
                if ((r = fz_walk(j, o, depth + 1)) != GPT2RT_OK) return r;
            }
        } else {
            if ((r = gpt2rt__json_array_begin(j)) != GPT2RT_OK) return r;
            while (gpt2rt__json_array_next(j, &r)) {
                if (!first) fz_put(o, ",", 1);
                first = 0;
                if ((r = fz_walk(j, o, depth + 1)) != GPT2RT_OK) return r;
            }
        }
        if (r == GPT2RT_OK) fz_put(o, c == '{' ? "}" : "]", 1);
        return r;
    }
    if (c == 't' || c == 'f') {
        int v = 0;
        if ((r = gpt2rt__json_bool(j, &v)) == GPT2RT_OK) fz_put(o, v ? "true" : "false", v ? 4 : 5);
        return r;
    }
    if (c == 'n' && gpt2rt__json_null(j)) { fz_put(o, "null", 4); return GPT2RT_OK; }
    double v;
    if ((r = gpt2rt__json_number(j, &v)) == GPT2RT_OK) {
        char num[40];
        if (!isfinite(v)) fz_die("a number read as not finite", "");
        if (v == 0 && signbit(v)) fz_die("-0 read as -0", "");
        int k = snprintf(num, sizeof num, "%.17g", v);
        /* %.17g may print "1e+300" or "inf"-free exponents: JSON takes "e+" */
        fz_put(o, num, (size_t)k);
    }
    return r;
}

/* the canonical copy of text (NULL when the walker refuses it) */
static char *fz_canon(const char *text, size_t n, gpt2rt_result *r) {
    char *b = fz_copy((const uint8_t *)text, n);
    gpt2rt__json j;
    gpt2rt__json_init(&j, b, n, NULL, fz_msg, sizeof fz_msg, FZ_NAME, "json");
    fz_out o = {NULL, 0, 0};
    *r = fz_walk(&j, &o, 1);
    if (*r == GPT2RT_OK) *r = gpt2rt__json_end(&j);
    free(b);
    if (*r != GPT2RT_OK) { free(o.b); return NULL; }
    if (!o.b) fz_die("a value gave no output", "");
    return o.b;
}

static void fz_reader(const uint8_t *data, size_t n) {
    char *a = fz_copy(data, n);
    char skip_msg[600];
    gpt2rt__json j;
    gpt2rt__json_init(&j, a, n, NULL, skip_msg, sizeof skip_msg, FZ_NAME, "json");
    gpt2rt_result ra = gpt2rt__json_skip(&j);
    if (ra == GPT2RT_OK) ra = gpt2rt__json_end(&j);
    free(a);
    gpt2rt_result rb;
    char *c1 = fz_canon((const char *)data, n, &rb);
    fz_last = rb;
    if ((ra == GPT2RT_OK) != (rb == GPT2RT_OK)) fz_die("skip and the walker disagree", ra == GPT2RT_OK ? fz_msg : skip_msg);
    if (ra != GPT2RT_OK) {
        fz_check_failure(ra, skip_msg, FZ_NAME);
        fz_check_failure(rb, fz_msg, FZ_NAME);
        return;
    }
    gpt2rt_result rc;
    char *c2 = fz_canon(c1, strlen(c1), &rc);
    if (rc != GPT2RT_OK) fz_die("the canonical copy is refused", fz_msg);
    if (strcmp(c1, c2)) fz_die("the canonical copy changes when read again", c1);
    free(c1);
    free(c2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!fz_ctx) { /* a context that carries only the message, as gpt2rt_config_load makes */
        fz_ctx = (gpt2rt_ctx *)calloc(1, sizeof(gpt2rt_ctx));
        if (!fz_ctx) fz_die("calloc", "context");
    }
    int mode = data[0] % 4;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    fz_ctx->error[0] = 0;
    fz_msg[0] = 0;
    if (mode == 0) {
        char *buf = fz_copy(p, n);
        gpt2rt_config c, before;
        memset(&c, 0x5A, sizeof c); /* every byte set: a change anywhere shows */
        before = c;
        gpt2rt_result r = gpt2rt__config_parse_mem(fz_ctx, buf, n, FZ_NAME, &c);
        fz_last = r;
        snprintf(fz_msg, sizeof fz_msg, "%s", fz_ctx->error);
        if (r != GPT2RT_OK) {
            fz_check_failure(r, fz_ctx->error, FZ_NAME);
            if (memcmp(&c, &before, sizeof c)) fz_die("a failed parse changed the config", fz_ctx->error);
        } else {
            if (c.n_layer < 1 || c.n_head < 1 || c.n_embd < 1 || c.vocab_size < 1 || c.max_seq_len < 1)
                fz_die("accepted a shape value below 1", "");
            float d[3] = {c.dropout, c.attn_dropout, c.head_dropout}, w[3] = {before.dropout, before.attn_dropout,
                                                                             before.head_dropout};
            for (int i = 0; i < 3; i++)
                if (memcmp(&d[i], &w[i], sizeof(float)) && !(d[i] >= 0.0f && d[i] < 1.0f))
                    fz_die("a dropout outside [0, 1)", "");
        }
        free(buf);
    } else if (mode == 1) {
        size_t len = 8 + n + 64;
        unsigned char *img = (unsigned char *)calloc(1, len); /* exactly the file: ASan sees a read past it */
        if (!img) fz_die("calloc", "image");
        for (int i = 0; i < 8; i++) img[i] = (unsigned char)((uint64_t)n >> (8 * i));
        if (n) memcpy(img + 8, p, n);
        gpt2rt__st st;
        gpt2rt_result r = gpt2rt__st_parse(fz_ctx, img, len, FZ_NAME, &st);
        fz_last = r;
        snprintf(fz_msg, sizeof fz_msg, "%s", fz_ctx->error);
        if (r != GPT2RT_OK) fz_check_failure(r, fz_ctx->error, FZ_NAME);
        else {
            if (st.data_len != 64) fz_die("data length", "");
            for (int i = 0; i < st.n; i++)
                if (!st.t[i].name || st.t[i].begin > st.t[i].end || st.t[i].end > st.data_len)
                    fz_die("a tensor outside the data", st.t[i].name);
            gpt2rt__st_release(fz_ctx, &st);
        }
        free(img);
    } else if (mode == 2) {
        char *buf = fz_copy(p, n);
        gpt2rt_tokenizer *t = NULL;
        gpt2rt_result r = gpt2rt_tok_load_mem(&t, buf, n, "", 0);
        fz_last = r;
        if (!t) fz_die("load returned no object", gpt2rt_result_string(r));
        snprintf(fz_msg, sizeof fz_msg, "%s", gpt2rt_tok_last_error(t));
        if (r != GPT2RT_OK) {
            fz_check_failure(r, fz_msg, NULL);
            if (strncmp(fz_msg, "vocabulary", 10) && strncmp(fz_msg, "merges", 6))
                fz_die("message does not say which file", fz_msg);
            size_t k;
            if (gpt2rt_tok_encode(t, "x", 1, GPT2RT_TOK_SPECIAL_TEXT, NULL, 0, &k) != GPT2RT_ERR_STATE)
                fz_die("a failed tokenizer encodes", fz_msg);
        }
        gpt2rt_tok_free(t);
        free(buf);
    } else fz_reader(p, n);
    return 0;
}

#ifdef FUZZ_REPLAY
static const char *fz_replay_status(void) { return fz_last == GPT2RT_OK ? "ok" : fz_msg; }
static void fz_replay_end(void) { free(fz_ctx); }
#include "fuzz_replay.h"
#endif
