/* tests/fuzz_tokenizer.c - libFuzzer target for the tokenizer and token shards.

   The first byte of an input picks what the rest goes through:
     0  gpt2rt_tok_encode with the shipped vocabulary (data/, loaded once; run from
        the repository root), special mode = second byte % 3
     1  the compact vocabulary loader (gpt2rt_tok_load_mem with vocab_json NULL)
     2  the JSON loader: vocab json before the first NUL byte, merges after it
     3  the llm.c shard reader, then gpt2rt_shard_batch
   Checks beyond "no crash, no sanitizer report" (a failure calls abort()):
     - encode never fails on any bytes except by refusing <|endoftext|>, and then
       only when the text holds it; decode(encode(x)) == x byte for byte;
     - a failed load leaves a non-empty message; a loaded vocabulary round-trips
       the input's own bytes;
     - a loaded shard has exactly (len - 1024) / 2 tokens; batch targets are the
       inputs shifted by one.

   Build: clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -o build/fuzz_tokenizer tests/fuzz_tokenizer.c -lm
   (-DFUZZ_ENCODE_ONLY: every input is kind 0; -DFUZZ_LOADERS_ONLY: kinds 1-3 only)
   Replay (any compiler): cc -DFUZZ_REPLAY ... ; ./build/fuzz_tok_replay tests/fuzz_corpus_tokenizer
   See tests/FUZZING.md. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FZ_CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "fuzz_tokenizer: " __VA_ARGS__); fprintf(stderr, "\n"); abort(); } } while (0)

static gpt2rt_tokenizer *fz_gpt2;

static void fz_round_trip(gpt2rt_tokenizer *t, const unsigned char *s, size_t n, gpt2rt_tok_special sp) {
    int32_t *ids = (int32_t *)malloc((n + 1) * sizeof(int32_t));
    unsigned char *back = (unsigned char *)malloc(n + 1);
    FZ_CHECK(ids && back, "out of memory");
    size_t k = 0, nb = 0;
    gpt2rt_result r = gpt2rt_tok_encode(t, s, n, sp, ids, n + 1, &k);
    int has_eot = 0;
    for (size_t i = 0; i + 13 <= n && !has_eot; i++) has_eot = !memcmp(s + i, "<|endoftext|>", 13);
    if (sp == GPT2RT_TOK_SPECIAL_REFUSE && has_eot) {
        FZ_CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_tok_last_error(t), "refused"), "refusal: %s",
                 gpt2rt_tok_last_error(t));
    } else if (sp == GPT2RT_TOK_SPECIAL_ALLOW && has_eot && gpt2rt_tok_eot(t) < 0) {
        FZ_CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT, "eot without a token: %s", gpt2rt_result_string(r));
    } else {
        FZ_CHECK(r == GPT2RT_OK && k <= n, "encode of %zu bytes: %s (%zu ids)", n, gpt2rt_tok_last_error(t), k);
        r = gpt2rt_tok_decode(t, ids, k, back, n + 1, &nb);
        FZ_CHECK(r == GPT2RT_OK && nb == n && !memcmp(back, s, n), "decode(encode(x)) != x (%zu bytes, %zu back)", n, nb);
    }
    free(ids);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const unsigned char *p = data + 1;
    size_t n = size - 1;
    int kind = data[0] % 4;
#if defined(FUZZ_ENCODE_ONLY)
    kind = 0; /* one run per half: -DFUZZ_ENCODE_ONLY, -DFUZZ_LOADERS_ONLY */
#elif defined(FUZZ_LOADERS_ONLY)
    if (kind == 0) kind = 1 + (data[0] / 4) % 3; /* inputs of kinds 1-3 keep their meaning */
#endif
    switch (kind) {
    case 0: {
        if (!fz_gpt2) {
            gpt2rt_result r = gpt2rt_tok_load(&fz_gpt2, "data");
            FZ_CHECK(r == GPT2RT_OK, "%s (run from the repository root)", gpt2rt_tok_last_error(fz_gpt2));
        }
        gpt2rt_tok_special sp = n ? (gpt2rt_tok_special)(p[0] % 3) : GPT2RT_TOK_SPECIAL_TEXT;
        fz_round_trip(fz_gpt2, n ? p + 1 : p, n ? n - 1 : 0, sp);
        break;
    }
    case 1:
    case 2: {
        gpt2rt_tokenizer *t;
        gpt2rt_result r;
        if (kind == 1) r = gpt2rt_tok_load_mem(&t, NULL, 0, p, n);
        else {
            const unsigned char *nul = (const unsigned char *)memchr(p, 0, n);
            size_t vl = nul ? (size_t)(nul - p) : n;
            /* exactly sized copies, so that the sanitizer sees reads past either end */
            unsigned char *v = (unsigned char *)malloc(vl + 1), *m = (unsigned char *)malloc(n - vl + 1);
            FZ_CHECK(v && m, "out of memory");
            memcpy(v, p, vl);
            if (nul) memcpy(m, nul + 1, n - vl - 1);
            r = gpt2rt_tok_load_mem(&t, v, vl, m, nul ? n - vl - 1 : 0);
            free(v);
            free(m);
        }
        FZ_CHECK(t != NULL, "no tokenizer object");
        if (r == GPT2RT_OK) {
            FZ_CHECK(gpt2rt_tok_vocab_size(t) >= 256, "a loaded vocabulary of %d tokens", (int)gpt2rt_tok_vocab_size(t));
            fz_round_trip(t, data, size, GPT2RT_TOK_SPECIAL_ALLOW);
            fz_round_trip(t, (const unsigned char *)"Hello, world! It's 2026.\n\n", 26, GPT2RT_TOK_SPECIAL_TEXT);
        } else
            FZ_CHECK(gpt2rt_tok_last_error(t)[0] && (r == GPT2RT_ERR_FORMAT || r == GPT2RT_ERR_OUT_OF_MEMORY),
                     "failed load: %s, message '%s'", gpt2rt_result_string(r), gpt2rt_tok_last_error(t));
        gpt2rt_tok_free(t);
        break;
    }
    case 3: {
        gpt2rt_shard *s;
        unsigned char *copy = (unsigned char *)malloc(n + 1);
        FZ_CHECK(copy, "out of memory");
        memcpy(copy, p, n);
        gpt2rt_result r = gpt2rt_shard_load_mem(&s, copy, n, "fuzz");
        free(copy);
        FZ_CHECK(s != NULL, "no shard object");
        if (r == GPT2RT_OK) {
            FZ_CHECK(n >= 1024 && (size_t)gpt2rt_shard_count(s) == (n - 1024) / 2, "%zu bytes, %lld tokens", n,
                     (long long)gpt2rt_shard_count(s));
            int32_t in[8], tg[8];
            int T = 2 + (int)(n % 3);
            if (gpt2rt_shard_batch(s, n, (int64_t)(n % 5), 0, 1, 2, T, in, tg) == GPT2RT_OK)
                for (int i = 0; i + 1 < T; i++) FZ_CHECK(tg[i] == in[i + 1] && tg[T + i] == in[T + i + 1], "targets");
        } else
            FZ_CHECK(gpt2rt_shard_last_error(s)[0] && r == GPT2RT_ERR_FORMAT, "failed shard: %s",
                     gpt2rt_result_string(r));
        gpt2rt_shard_free(s);
        break;
    }
    }
    return 0;
}

#ifdef FUZZ_REPLAY
/* Replay driver: every file named on the command line, or in a named directory */
#include <dirent.h>
#include <sys/stat.h>

static int fz_replayed;

static void fz_replay_file(const char *path) {
    size_t len;
    unsigned char *buf;
    char error[512];
    if (gpt2rt__tok_read_file(path, &buf, &len, error) != GPT2RT_OK) { fprintf(stderr, "%s\n", error); exit(2); }
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
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

/* --write-seeds DIR: the hand-made seeds of tests/fuzz_corpus_tokenizer */
static void fz_seed(const char *dir, const char *name, int kind, const void *a, size_t alen, const void *b, size_t blen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) { fprintf(stderr, "cannot write %s\n", path); exit(2); }
    fputc(kind, f);
    fwrite(a, 1, alen, f);
    if (b) { fputc(0, f); fwrite(b, 1, blen, f); }
    fclose(f);
}

static void fz_write_seeds(const char *dir) {
    const char *texts[][2] = {
        {"ascii", "\x00Hello, world! I'm sure they'LL say it's 1,000,000 -- OK?\n\n  trailing  "},
        {"unicode", "\x01" "caf\xc3\xa9 \xce\x91\xce\xb8\xce\xae\xce\xbd\xce\xb1 \xd0\x9f\xd1\x80\xd0\xb8 \xe4\xbb\x8a\xe6\x97\xa5 "
                    "\xed\x95\x9c\xea\xb5\xad \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9 e\xcc\x81 \xe3\x80\x80\xc2\x85"},
        {"special", "\x01x<|endoftext|>y <|endoftext|><|endoftext|>"},
        {"refuse", "\x02" "a<|endoftext|>"},
        {"broken_utf8", "\x00\xc0\xaf \xe0\x80\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xff\xfe ab\xe4\xb8"},
        {"code", "\x00int main(void) {\n\treturn 0;\n}\n\n\n    x = y ** 2  # c\r\n"},
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "encode_%s", texts[i][0]);
        size_t l = strlen(texts[i][1] + 1) + 1; /* the mode byte may be NUL */
        fz_seed(dir, name, 0, texts[i][1], l, NULL, 0);
    }
    /* a small compact vocabulary: 3 merges, then <|endoftext|> */
    unsigned char c[20 + 12];
    uint32_t head[3] = {1, 3, 259};
    uint16_t mg[6] = {68, 81, 256, 0, 257, 256};
    memcpy(c, "GPT2RTBP", 8);
    memcpy(c + 8, head, 12);
    memcpy(c + 20, mg, 12);
    fz_seed(dir, "compact_small", 1, c, sizeof c, NULL, 0);
    fz_seed(dir, "compact_bad_merge", 1, c, sizeof c - 2, NULL, 0);
    /* a JSON vocabulary of the 256 byte characters and two merges */
    char json[8192];
    size_t jl = 0;
    uint32_t cp_of[256];
    int order[256];
    gpt2rt__tok_byte_order(cp_of, order);
    jl += (size_t)snprintf(json + jl, sizeof json - jl, "{");
    for (int i = 0; i < 256; i++) {
        uint32_t cp = cp_of[order[i]];
        if (cp == '"' || cp == '\\') jl += (size_t)snprintf(json + jl, sizeof json - jl, "\"\\%c\": %d, ", (char)cp, i);
        else if (cp < 0x80) jl += (size_t)snprintf(json + jl, sizeof json - jl, "\"%c\": %d, ", (char)cp, i);
        else jl += (size_t)snprintf(json + jl, sizeof json - jl, "\"\\u%04x\": %d, ", (unsigned)cp, i);
    }
    jl += (size_t)snprintf(json + jl, sizeof json - jl, "\"he\": 256, \"\\u0120he\": 257, \"<|endoftext|>\": 258}");
    const char *merges = "#version: 0.2\nh e\n\xc4\xa0 he\n";
    fz_seed(dir, "json_small", 2, json, jl, merges, strlen(merges));
    fz_seed(dir, "json_bad_merge", 2, json, jl, "h x\n", 4);
    /* the merges cut at a line boundary: 1 merge for 259 tokens, refused by count */
    fz_seed(dir, "json_cut_merges", 2, json, jl, merges, strlen("#version: 0.2\nh e\n"));
    fz_seed(dir, "json_escapes", 2, "{\"\\ud83d\\ude00\": 0, \"\\u0041\\n\": 1}", 33, "", 0);
    /* shards: a valid one, truncated, foreign */
    unsigned char sh[1024 + 40];
    int32_t h[256];
    memset(h, 0, sizeof h);
    h[0] = 20240520; h[1] = 1; h[2] = 20;
    memcpy(sh, h, 1024);
    for (int i = 0; i < 20; i++) { sh[1024 + 2 * i] = (unsigned char)(i * 7); sh[1025 + 2 * i] = (unsigned char)i; }
    fz_seed(dir, "shard_valid", 3, sh, sizeof sh, NULL, 0);
    fz_seed(dir, "shard_truncated", 3, sh, sizeof sh - 5, NULL, 0);
    fz_seed(dir, "shard_foreign", 3, "GPT2RTBP\x01\x00\x00\x00", 12, NULL, 0);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-seeds")) { fz_write_seeds(argv[2]); return 0; }
    for (int i = 1; i < argc; i++) fz_replay_path(argv[i]);
    printf("replayed %d inputs\nRESULT %d 0\n", fz_replayed, fz_replayed);
    gpt2rt_tok_free(fz_gpt2);
    return 0;
}
#endif
