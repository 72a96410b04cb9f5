/* tests/fuzz_safetensors.c - libFuzzer target for the safetensors reader: every
   input goes through the weights loader and the training-state loader of one tiny
   context, straight from memory (gpt2rt__weights_load_mem, gpt2rt__state_load_mem).

   Oracles, beyond "no crash, no sanitizer report":
   - a failed load returns GPT2RT_ERR_FORMAT (or OUT_OF_MEMORY), leaves a message
     that names the input, and leaves weights, moments, step and RNG bitwise as
     they were;
   - a successful parse describes only bytes that exist (every tensor's data is
     read, every name and metadata string is NUL-terminated);
   - a successful load leaves a usable context: one forward (with a loss) runs.
   The context is restored to its initial weights before every input, so each
   input behaves the same whatever ran before it.

   Fuzzing (clang, libFuzzer):
     clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined \
           -o build/fuzz_safetensors tests/fuzz_safetensors.c -lm
     ./build/fuzz_safetensors build/fuzz_work tests/fuzz_corpus \
           -dict=tests/fuzz_safetensors.dict -max_len=32768 -rss_limit_mb=2048
   Replay without libFuzzer (any compiler; what `make test` can run under ASan):
     cc -std=c11 -g -O1 -fsanitize=address,undefined -DFUZZ_REPLAY \
        -o build/fuzz_replay tests/fuzz_safetensors.c -lm
     ./build/fuzz_replay tests/fuzz_corpus          (files or directories)
   See tests/FUZZING.md. */
#define _POSIX_C_SOURCE 200809L
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_NAME "fuzz-input"

static gpt2rt_ctx *fz_ctx;
static float *fz_init;      /* params, m, v right after creation */
static float *fz_snap;      /* params, m, v before the load under test */
static uint64_t fz_init_rng;
static gpt2rt_result fz_last[2]; /* weights, state results of the last input (replay -v) */
static int32_t fz_inputs[4] = {1, 5, 9, 15}, fz_targets[4] = {5, 9, 15, -100};

static void fz_die(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_safetensors: %s: %s\n", what, detail ? detail : "");
    abort();
}

static void fz_setup(void) {
    gpt2rt_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = 1; c.n_head = 2; c.n_embd = 8; c.vocab_size = 16; c.max_seq_len = 8;
    c.batch_size = 1; c.seq_len = 4; c.n_threads = 1;
    if (gpt2rt_create(&fz_ctx, &c) != GPT2RT_OK) fz_die("gpt2rt_create", gpt2rt_last_error(fz_ctx));
    size_t n = (size_t)fz_ctx->n_params;
    fz_init = (float *)malloc(3 * n * sizeof(float));
    fz_snap = (float *)malloc(3 * n * sizeof(float));
    if (!fz_init || !fz_snap) fz_die("malloc", "snapshot");
    memcpy(fz_init, fz_ctx->params, n * sizeof(float));
    memcpy(fz_init + n, fz_ctx->m, n * sizeof(float));
    memcpy(fz_init + 2 * n, fz_ctx->v, n * sizeof(float));
    fz_init_rng = fz_ctx->rng;
}

static void fz_restore(void) {
    size_t n = (size_t)fz_ctx->n_params;
    memcpy(fz_ctx->params, fz_init, n * sizeof(float));
    memcpy(fz_ctx->m, fz_init + n, n * sizeof(float));
    memcpy(fz_ctx->v, fz_init + 2 * n, n * sizeof(float));
    fz_ctx->step = 0;
    fz_ctx->rng = fz_init_rng;
}

static void fz_snapshot(float *dst) {
    size_t n = (size_t)fz_ctx->n_params;
    memcpy(dst, fz_ctx->params, n * sizeof(float));
    memcpy(dst + n, fz_ctx->m, n * sizeof(float));
    memcpy(dst + 2 * n, fz_ctx->v, n * sizeof(float));
}

static void fz_check_unchanged(const char *which, int64_t step, uint64_t rng) {
    size_t n = (size_t)fz_ctx->n_params;
    if (memcmp(fz_snap, fz_ctx->params, n * sizeof(float)) || memcmp(fz_snap + n, fz_ctx->m, n * sizeof(float)) ||
        memcmp(fz_snap + 2 * n, fz_ctx->v, n * sizeof(float)) || fz_ctx->step != step || fz_ctx->rng != rng)
        fz_die(which, "a failed load changed the context");
}

static void fz_check_failure(const char *which, gpt2rt_result r) {
    const char *err = gpt2rt_last_error(fz_ctx);
    if (r != GPT2RT_ERR_FORMAT && r != GPT2RT_ERR_OUT_OF_MEMORY) fz_die(which, gpt2rt_result_string(r));
    if (!strstr(err, FZ_NAME)) fz_die("error message does not name the input", err);
}

static void fz_forward(const char *which) {
    float loss = 0;
    gpt2rt_result r = gpt2rt_forward(fz_ctx, fz_inputs, fz_targets, &loss);
    if (r != GPT2RT_OK) fz_die(which, gpt2rt_last_error(fz_ctx));
    (void)loss;
}

/* a parse that succeeds must describe only bytes that exist: touch them all */
static volatile unsigned fz_sink;
static void fz_parse(const uint8_t *data, size_t size) {
    gpt2rt__st st;
    if (gpt2rt__st_parse(fz_ctx, data, size, FZ_NAME, &st) != GPT2RT_OK) return;
    unsigned acc = 0;
    if ((size_t)(st.data - data) + st.data_len != size) fz_die("parse", "data section does not end at the input's end");
    for (int i = 0; i < st.n; i++) {
        const gpt2rt__st_tensor *t = &st.t[i];
        if (t->begin > t->end || t->end > st.data_len) fz_die("parse", "tensor outside the data section");
        if (t->dtype < 0 || t->dtype >= GPT2RT__NDTYPE || t->ndim < 0 || t->ndim > GPT2RT__ST_MAX_DIMS)
            fz_die("parse", "bad dtype or ndim");
        acc += (unsigned)strlen(t->name);
        for (uint64_t b = t->begin; b < t->end; b++) acc += st.data[b];
    }
    for (int i = 0; i < st.n_meta; i++) acc += (unsigned)strlen(st.meta[i]);
    fz_sink = acc;
    gpt2rt__st_release(fz_ctx, &st);
}

/* what a load accepted is usable: every weight and moment finite, adam_v >= 0 */
static void fz_check_finite(const char *which) {
    for (int64_t i = 0; i < fz_ctx->n_params; i++)
        if (!isfinite(fz_ctx->params[i])) fz_die(which, "accepted a non-finite weight");
    for (int64_t i = 0; i < fz_ctx->n_train; i++)
        if (!isfinite(fz_ctx->m[i]) || !isfinite(fz_ctx->v[i]) || fz_ctx->v[i] < 0.0f)
            fz_die(which, "accepted a non-finite moment or a negative adam_v");
}

/* FUZZ_LOADERS: 1 the weights loader, 2 the training-state loader, 3 both (the
   replay in make test); one loader per fuzzing run gives each its own 10 minutes */
#ifndef FUZZ_LOADERS
#define FUZZ_LOADERS 3
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fz_ctx) fz_setup();
    fz_restore();
    fz_parse(data, size);

    fz_snapshot(fz_snap);
    int64_t step = fz_ctx->step;
    uint64_t rng = fz_ctx->rng;
    gpt2rt_result r;
#if FUZZ_LOADERS & 1
    r = gpt2rt__weights_load_mem(fz_ctx, data, size, FZ_NAME);
    fz_last[0] = r;
    if (r == GPT2RT_OK) { fz_check_finite("weights load"); fz_forward("forward after weights load"); }
    else { fz_check_failure("weights load", r); fz_check_unchanged("weights load", step, rng); }
    fz_restore();
    fz_snapshot(fz_snap);
#endif
#if FUZZ_LOADERS & 2
    r = gpt2rt__state_load_mem(fz_ctx, data, size, FZ_NAME);
    fz_last[1] = r;
    if (r == GPT2RT_OK) { fz_check_finite("state load"); fz_forward("forward after state load"); }
    else { fz_check_failure("state load", r); fz_check_unchanged("state load", step, rng); }
#endif
    (void)r;
    return 0;
}

#ifdef FUZZ_REPLAY
/* Replay driver: run every file named on the command line (or every file in a
   named directory) through the target once. */
#include <dirent.h>
#include <sys/stat.h>

static int fz_replayed, fz_verbose;

static void fz_replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(2); }
    size_t cap = 4096, len = 0;
    unsigned char *buf = (unsigned char *)malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            unsigned char *nb = (unsigned char *)realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) { fprintf(stderr, "out of memory reading %s\n", path); exit(2); }
    /* an exactly sized copy, so that the sanitizer sees any read past the end */
    unsigned char *exact = (unsigned char *)malloc(len ? len : 1);
    if (!exact) { fprintf(stderr, "out of memory\n"); exit(2); }
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    if (fz_verbose)
        printf("%-60s %6zu bytes  weights: %-16s state: %s\n", path, len, gpt2rt_result_string(fz_last[0]),
               gpt2rt_result_string(fz_last[1]));
    fz_replayed++;
}

static void fz_replay_path(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) { fprintf(stderr, "cannot stat %s\n", path); exit(2); }
    if (!S_ISDIR(sb.st_mode)) { fz_replay_file(path); return; }
    DIR *dir = opendir(path);
    if (!dir) { fprintf(stderr, "cannot open directory %s\n", path); exit(2); }
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        if (de->d_name[0] == '.') continue;
        char full[4096];
        if (snprintf(full, sizeof full, "%s/%s", path, de->d_name) >= (int)sizeof full) continue;
        if (stat(full, &sb) == 0 && S_ISREG(sb.st_mode)) fz_replay_file(full);
    }
    closedir(dir);
}

/* ---- --write-seeds DIR: the seed corpus of tests/fuzz_corpus, regenerated ---- */

typedef struct fz_entry {
    const char *name, *dtype;
    int ndim;
    int64_t shape[4];
    const void *data;
    size_t nbytes;
} fz_entry;

/* a safetensors image of the entries (data in order), header padded to 8 bytes */
static unsigned char *fz_build(const fz_entry *e, int n, const char *meta_json, size_t *out_len) {
    size_t cap = 256 + (meta_json ? strlen(meta_json) : 0), data = 0;
    for (int i = 0; i < n; i++) { cap += strlen(e[i].name) + 160; data += e[i].nbytes; }
    char *h = (char *)malloc(cap);
    if (!h) exit(2);
    size_t hn = (size_t)snprintf(h, cap, "{");
    if (meta_json) hn += (size_t)snprintf(h + hn, cap - hn, "\"__metadata__\":%s", meta_json);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        hn += (size_t)snprintf(h + hn, cap - hn, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", (meta_json || i) ? "," : "",
                               e[i].name, e[i].dtype);
        for (int k = 0; k < e[i].ndim; k++) hn += (size_t)snprintf(h + hn, cap - hn, "%s%lld", k ? "," : "", (long long)e[i].shape[k]);
        hn += (size_t)snprintf(h + hn, cap - hn, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                               (unsigned long long)(off + e[i].nbytes));
        off += e[i].nbytes;
    }
    h[hn++] = '}';
    while (hn % 8) h[hn++] = ' ';
    unsigned char *out = (unsigned char *)malloc(8 + hn + data);
    if (!out) exit(2);
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)hn >> (8 * i));
    memcpy(out + 8, h, hn);
    size_t o = 8 + hn;
    for (int i = 0; i < n; i++) { if (e[i].nbytes) memcpy(out + o, e[i].data, e[i].nbytes); o += e[i].nbytes; }
    free(h);
    *out_len = o;
    return out;
}

/* a raw image: 8-byte length of the JSON text, the text, then `data` zero bytes */
static unsigned char *fz_raw(const char *json, size_t data, size_t *out_len) {
    size_t hn = strlen(json);
    unsigned char *out = (unsigned char *)calloc(1, 8 + hn + data + 1);
    if (!out) exit(2);
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)hn >> (8 * i));
    memcpy(out + 8, json, hn);
    *out_len = 8 + hn + data;
    return out;
}

static void fz_put(const char *dir, const char *name, const void *buf, size_t len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) { fprintf(stderr, "cannot write %s\n", path); exit(2); }
    printf("wrote %s (%zu bytes)\n", path, len);
}


/* the entries of a parsed F32 file, optionally converted to F16/BF16 and renamed */
static void fz_variant(const gpt2rt__st *st, const char *dtype, int strip_prefix, int extra_buffers,
                       const char *dir, const char *out_name) {
    int n = st->n, m = 0;
    fz_entry *e = (fz_entry *)calloc((size_t)n + 2, sizeof *e);
    void **bufs = (void **)calloc((size_t)n, sizeof *bufs);
    char **names = (char **)calloc((size_t)n, sizeof *names);
    static float causal[4 * 4];
    if (!e || !bufs || !names) exit(2);
    for (int i = 0; i < n; i++) {
        const gpt2rt__st_tensor *t = &st->t[i];
        size_t cnt = (size_t)(t->end - t->begin) / 4;
        const char *nm = t->name;
        if (strip_prefix && !strncmp(nm, "transformer.", 12)) nm += 12;
        names[i] = (char *)malloc(strlen(nm) + 1);
        if (!names[i]) exit(2);
        strcpy(names[i], nm);
        e[m].name = names[i];
        e[m].ndim = t->ndim;
        for (int k = 0; k < t->ndim; k++) e[m].shape[k] = t->shape[k];
        if (!strcmp(dtype, "F32")) {
            e[m].dtype = "F32"; e[m].data = st->data + t->begin; e[m].nbytes = cnt * 4;
        } else {
            uint16_t *h = (uint16_t *)malloc(cnt * 2 + 1);
            if (!h) exit(2);
            for (size_t j = 0; j < cnt; j++) {
                float f;
                memcpy(&f, st->data + t->begin + 4 * j, 4);
                h[j] = strcmp(dtype, "F16") ? to_bf16(f) : to_f16(f);
            }
            bufs[i] = h;
            e[m].dtype = dtype; e[m].data = h; e[m].nbytes = cnt * 2;
        }
        m++;
    }
    if (extra_buffers) { /* the original GPT-2 files carry these; the loader skips them */
        e[m].name = "h.0.attn.bias"; e[m].dtype = "F32"; e[m].ndim = 2; e[m].shape[0] = 4; e[m].shape[1] = 4;
        e[m].data = causal; e[m].nbytes = sizeof causal; m++;
        e[m].name = "lm_head.weight"; e[m].dtype = "F32"; e[m].ndim = 2; e[m].shape[0] = 1; e[m].shape[1] = 4;
        e[m].data = causal; e[m].nbytes = 16; m++;
    }
    size_t len;
    unsigned char *img = fz_build(e, m, "{\"format\":\"pt\"}", &len);
    fz_put(dir, out_name, img, len);
    free(img);
    for (int i = 0; i < n; i++) { free(bufs[i]); free(names[i]); }
    free(bufs); free(names); free(e);
}

/* the parsed F32 file as entries (room for 2 more); names point into st */
static int fz_f32_entries(const gpt2rt__st *st, fz_entry *e) {
    for (int i = 0; i < st->n; i++) {
        const gpt2rt__st_tensor *t = &st->t[i];
        e[i].name = t->name;
        e[i].dtype = "F32";
        e[i].ndim = t->ndim;
        for (int k = 0; k < t->ndim && k < 4; k++) e[i].shape[k] = t->shape[k];
        e[i].data = st->data + t->begin;
        e[i].nbytes = (size_t)(t->end - t->begin);
    }
    return st->n;
}

static void fz_put_entries(const char *dir, const char *name, const fz_entry *e, int n) {
    size_t len;
    unsigned char *img = fz_build(e, n, "{\"format\":\"pt\"}", &len);
    fz_put(dir, name, img, len);
    free(img);
}

static unsigned char *fz_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(2); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = (unsigned char *)malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) exit(2);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static int fz_write_seeds(const char *dir, const char *scratch) {
    fz_setup();
    /* valid files written by the library itself */
    if (gpt2rt_weights_save(fz_ctx, scratch) != GPT2RT_OK) fz_die("weights_save", gpt2rt_last_error(fz_ctx));
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", scratch);
    size_t wlen, slen;
    unsigned char *w = fz_slurp(path, &wlen);
    fz_put(dir, "valid_weights.safetensors", w, wlen);
    snprintf(path, sizeof path, "%s/state.safetensors", scratch);
    if (gpt2rt_state_save(fz_ctx, path) != GPT2RT_OK) fz_die("state_save", gpt2rt_last_error(fz_ctx));
    unsigned char *s = fz_slurp(path, &slen);
    fz_put(dir, "valid_state.safetensors", s, slen);
    /* variants of the valid weights: F16, BF16, the original GPT-2 naming */
    gpt2rt__st st;
    if (gpt2rt__st_parse(fz_ctx, w, wlen, "seed", &st) != GPT2RT_OK) fz_die("parse", gpt2rt_last_error(fz_ctx));
    fz_variant(&st, "F16", 0, 0, dir, "valid_weights_f16.safetensors");
    fz_variant(&st, "BF16", 1, 1, dir, "valid_weights_bf16_gpt2_names.safetensors");
    {
        static const float extra[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        fz_entry *e = (fz_entry *)calloc((size_t)st.n + 2, sizeof *e);
        if (!e) exit(2);
        /* valid, plus a deeper layer (ignored) and an unknown tensor (warned about) */
        int n = fz_f32_entries(&st, e);
        e[n].name = "transformer.h.1.ln_1.weight"; e[n].dtype = "F32"; e[n].ndim = 1; e[n].shape[0] = 8;
        e[n].data = extra; e[n].nbytes = sizeof extra; n++;
        e[n].name = "classifier.weight"; e[n].dtype = "F32"; e[n].ndim = 1; e[n].shape[0] = 2;
        e[n].data = extra; e[n].nbytes = 8; n++;
        fz_put_entries(dir, "valid_weights_extra_layer.safetensors", e, n);
        /* a 1-D tensor of the wrong length */
        n = fz_f32_entries(&st, e);
        for (int i = 0; i < n; i++)
            if (!strcmp(e[i].name, "transformer.ln_f.bias")) { e[i].shape[0] = 4; e[i].nbytes = 16; }
        fz_put_entries(dir, "weights_ln_f_bias_shape_4.safetensors", e, n);
        free(e);
    }
    gpt2rt__st_release(fz_ctx, &st);
    /* a state header with no tensors: reaches the metadata checks */
    struct { const char *name, *json; size_t data; } raw[] = {
        {"state_meta_only.safetensors",
         "{\"__metadata__\":{\"format\":\"gpt2rt-state-1\",\"n_layer\":\"1\",\"n_head\":\"2\",\"n_embd\":\"8\","
         "\"vocab_size\":\"16\",\"padded_vocab\":\"128\",\"max_seq_len\":\"8\",\"step\":\"3\",\"rng\":\"42\"}}", 0},
        {"empty_object.safetensors", "{}", 0},
        {"tensor_odd_keys.safetensors",
         "{\"a\\u00e9\\ud83d\\ude00\\n\":{\"dtype\":\"BF16\",\"shape\":[2,0,3],\"data_offsets\":[0,0],"
         "\"x\":[1,{\"y\":null},true,false,-1.5e3,\"s\\\"\\\\\\/\\b\\f\\r\\t\"]},"
         "\"b\":{\"shape\":[],\"data_offsets\":[0,8],\"dtype\":\"I64\"}}", 8},
        {"bad_offsets.safetensors",
         "{\"transformer.ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[4,36]}}", 16},
        {"deep_nesting.safetensors",
         "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"k\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
         "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}", 1},
        {"trailing_garbage.safetensors", "{\"__metadata__\":{}} x", 0},
        {"shape_2p60_elements.safetensors",
         "{\"t\":{\"dtype\":\"U8\",\"shape\":[1048576,1048576,1048576],\"data_offsets\":[0,0]}}", 0},
    };
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
        size_t len;
        unsigned char *img = fz_raw(raw[i].json, raw[i].data, &len);
        fz_put(dir, raw[i].name, img, len);
        free(img);
    }
    static const unsigned char huge_len[10] = {0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'};
    fz_put(dir, "header_len_2p63.bin", huge_len, sizeof huge_len);
    fz_put(dir, "short7.bin", "\x02\0\0\0\0\0\0", 7);
    free(w);
    free(s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--write-seeds")) return fz_write_seeds(argv[2], argv[3]);
    if (argc < 2) {
        fprintf(stderr, "usage: %s [-v] FILE_OR_DIR...\n       %s --write-seeds OUT_DIR SCRATCH_DIR\n", argv[0], argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) fz_verbose = 1;
        else fz_replay_path(argv[i]);
    }
    printf("replayed %d inputs\n", fz_replayed);
    printf("RESULT %d 0\n", fz_replayed);
    gpt2rt_free(fz_ctx);
    free(fz_init);
    free(fz_snap);
    return 0;
}
#endif
