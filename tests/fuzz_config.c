/* tests/fuzz_config.c - libFuzzer target for the config.json reader
   (gpt2rt__config_parse_mem, what gpt2rt_config_load runs on the file's bytes).

   Oracles, beyond "no crash, no sanitizer report":
   - a failure is GPT2RT_ERR_FORMAT, its message names the input, and the config
     is left exactly as it was;
   - a success sets n_layer, n_head, n_embd, vocab_size, max_seq_len to values in
     [1, 2^31), the dropouts (from the pdrops) to probabilities in [0, 1), and nothing
     else.

   Fuzzing (clang, libFuzzer), one process on one core:
     clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined \
           -o build/fuzz_config tests/fuzz_config.c -lm
     ./build/fuzz_config build/fuzz_c tests/fuzz_corpus_config -dict=tests/fuzz_config.dict
   Replay without libFuzzer (what make test runs):
     cc -std=c11 -DFUZZ_REPLAY -o build/fuzz_config_replay tests/fuzz_config.c -lm
     ./build/fuzz_config_replay tests/fuzz_corpus_config
   See tests/FUZZING.md. */
#define _POSIX_C_SOURCE 200809L
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_NAME "fuzz-config.json"

static gpt2rt_ctx *fz_ctx;
static gpt2rt_result fz_last;

static void fz_die(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_config: %s: %s\n", what, detail ? detail : "");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fz_ctx) { /* a context that carries only the message, as gpt2rt_config_load makes */
        fz_ctx = (gpt2rt_ctx *)calloc(1, sizeof(gpt2rt_ctx));
        if (!fz_ctx) fz_die("calloc", "context");
    }
    /* the reader unescapes in place and expects the NUL that gpt2rt__read_file adds */
    char *buf = (char *)malloc(size + 1);
    if (!buf) fz_die("malloc", "input");
    memcpy(buf, data, size);
    buf[size] = 0;
    gpt2rt_config c, before;
    memset(&c, 0x5A, sizeof c); /* every byte set: a change anywhere shows */
    before = c;
    fz_ctx->error[0] = 0;
    gpt2rt_result r = gpt2rt__config_parse_mem(fz_ctx, buf, size, FZ_NAME, &c);
    fz_last = r;
    if (r != GPT2RT_OK) {
        if (r != GPT2RT_ERR_FORMAT) fz_die("result", gpt2rt_result_string(r));
        if (!strstr(fz_ctx->error, FZ_NAME)) fz_die("error message does not name the input", fz_ctx->error);
        if (memcmp(&c, &before, sizeof c)) fz_die("a failed parse changed the config", fz_ctx->error);
    } else {
        int v[5] = {c.n_layer, c.n_head, c.n_embd, c.vocab_size, c.max_seq_len};
        for (int i = 0; i < 5; i++)
            if (v[i] < 1) fz_die("accepted a shape value below 1", "");
        float p[3] = {c.dropout, c.attn_dropout, c.head_dropout}, was[3] = {before.dropout, before.attn_dropout,
                                                                              before.head_dropout};
        for (int i = 0; i < 3; i++) /* a dropout is left as it was or set to a probability */
            if (memcmp(&p[i], &was[i], sizeof(float)) && !(p[i] >= 0.0f && p[i] < 1.0f))
                fz_die("a dropout outside [0, 1)", "");
        gpt2rt_config rest = c;
        rest.n_layer = before.n_layer; rest.n_head = before.n_head; rest.n_embd = before.n_embd;
        rest.vocab_size = before.vocab_size; rest.max_seq_len = before.max_seq_len;
        rest.dropout = before.dropout; rest.attn_dropout = before.attn_dropout; rest.head_dropout = before.head_dropout;
        if (memcmp(&rest, &before, sizeof c)) fz_die("a parse changed a field outside the shape", "");
    }
    free(buf);
    return 0;
}

#ifdef FUZZ_REPLAY
static const char *fz_replay_status(void) { return fz_last == GPT2RT_OK ? "ok" : fz_ctx->error; }
static void fz_replay_end(void) { free(fz_ctx); }
#include "fuzz_replay.h"
#endif
