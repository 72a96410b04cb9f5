/* bench_tok: GPT-2 encoding speed of gpt2rt.h on one core, in MB/s of UTF-8 text.

     bench_tok [TEXT_FILE] [--vocab DIR] [--seconds S]

   TEXT_FILE defaults to the text of the repository's data/tinyshakespeare_train.bin
   decoded (found from any directory: ./data, else beside this program's directory);
   --vocab defaults to that data/ too. Each repetition encodes the whole text
   with a freshly loaded tokenizer (its piece cache empty, as tiktoken starts every
   call), timing only the encode; prints the best and the median of the
   repetitions as "encode MB/s: <best>" lines that `make bench` compares with
   tools/bench_tiktoken.py on the same file. */
#define _POSIX_C_SOURCE 200809L /* readlink under -std=c11 */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#define CLI_PROG "bench_tok"
#include "../tools/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(void) {
    printf("usage: bench_tok [TEXT_FILE] [--vocab DIR] [--seconds S]\n"
           "  GPT-2 encoding MB/s on one core; TEXT_FILE defaults to the text of data/tinyshakespeare_train.bin,\n"
           "  --vocab to data/ (both found from any directory), --seconds (3) to repeat for, at least 3 times\n");
}

int main(int argc, char **argv) {
    char vocab_buf[4096], shard_buf[4096];
    const char *path = NULL, *vocab = NULL;
    double seconds = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return 0; }
        if (!strcmp(a, "--vocab") || !strcmp(a, "--seconds")) {
            if (i + 1 >= argc) { fprintf(stderr, "bench_tok: %s needs a value (see --help)\n", a); return 2; }
            const char *v = argv[++i];
            if (a[2] == 'v') { vocab = v; continue; }
            char *end;
            errno = 0;
            seconds = strtod(v, &end);
            if (end == v || *end || errno || !isfinite(seconds) || seconds < 0 || seconds > 86400) {
                fprintf(stderr, "bench_tok: --seconds '%s': expected a number in [0, 86400]\n", v);
                return 2;
            }
        } else if (a[0] == '-' && a[1]) { fprintf(stderr, "bench_tok: unknown option %s (see --help)\n", a); return 2; }
        else if (path) { fprintf(stderr, "bench_tok: one TEXT_FILE only (%s, then %s)\n", path, a); return 2; }
        else path = a;
    }
    if (!vocab) vocab = repo_path("data", vocab_buf, sizeof vocab_buf);
    gpt2rt_tokenizer *tok;
    if (gpt2rt_tok_load(&tok, vocab) != GPT2RT_OK) {
        fprintf(stderr, "bench_tok: %s\n", gpt2rt_tok_last_error(tok));
        return 1;
    }
    unsigned char *text = NULL;
    size_t len = 0;
    char error[512];
    if (path) {
        if (gpt2rt__tok_read_file(path, &text, &len, error) != GPT2RT_OK) { fprintf(stderr, "bench_tok: %s\n", error); return 1; }
    } else {
        const char *shard = repo_path("data/tinyshakespeare_train.bin", shard_buf, sizeof shard_buf);
        path = "data/tinyshakespeare_train.bin (decoded)";
        gpt2rt_shard *s;
        if (gpt2rt_shard_load(&s, shard) != GPT2RT_OK) {
            fprintf(stderr, "bench_tok: %s\n", gpt2rt_shard_last_error(s));
            return 1;
        }
        int64_t n = gpt2rt_shard_count(s);
        int32_t *ids = (int32_t *)malloc((size_t)n * sizeof(int32_t));
        for (int64_t i = 0; i < n; i++) ids[i] = gpt2rt_shard_tokens(s)[i];
        gpt2rt_tok_decode(tok, ids, (size_t)n, NULL, 0, &len);
        text = (unsigned char *)malloc(len);
        gpt2rt_tok_decode(tok, ids, (size_t)n, text, len, &len);
        free(ids);
        gpt2rt_shard_free(s);
    }
    int32_t *ids = (int32_t *)malloc((len + 1) * sizeof(int32_t));
    double times[1000], t_end = gpt2rt__now() + seconds;
    int reps = 0;
    size_t n = 0;
    while (reps < 1000 && (reps < 3 || gpt2rt__now() < t_end)) {
        gpt2rt_tok_free(tok);
        gpt2rt_tok_load(&tok, vocab);
        double t0 = gpt2rt__now();
        if (gpt2rt_tok_encode(tok, text, len, GPT2RT_TOK_SPECIAL_TEXT, ids, len + 1, &n) != GPT2RT_OK) {
            fprintf(stderr, "bench_tok: %s\n", gpt2rt_tok_last_error(tok));
            return 1;
        }
        times[reps++] = gpt2rt__now() - t0;
    }
    qsort(times, (size_t)reps, sizeof(double), cmp_double);
    printf("gpt2rt: %s, %zu bytes -> %zu tokens, %d repetitions, one core, cold cache each\n", path, len, n, reps);
    printf("encode MB/s: %.2f (best), %.2f (median)\n", (double)len / times[0] / 1e6, (double)len / times[reps / 2] / 1e6);
    free(ids);
    free(text);
    gpt2rt_tok_free(tok);
    return 0;
}
