/* gpt2rt-tok: the GPT-2 tokenizer of gpt2rt.h on the command line.

     gpt2rt-tok encode [--vocab DIR] [--format text|u16|bin] [--special text|allow|refuse] < in.txt > out
     gpt2rt-tok decode [--vocab DIR] [--format text|u16|bin] < ids > out.txt
     gpt2rt-tok pack --vocab DIR OUT.bin     the compact vocabulary (what data/ ships)

   encode reads UTF-8 (any bytes) on stdin; text writes the ids as decimal numbers
   separated by single spaces (and a final newline), u16 as uint16 little endian,
   bin as an llm.c token file (256 int32 header, uint16 tokens). decode reads the
   same forms and writes the bytes. --vocab holds gpt2_merges.bin, or encoder.json
   + vocab.bpe, or vocab.json + merges.txt; default: the data/ directory of the
   repository (./data, else the one beside this program's directory, found through
   /proc/self/exe, so a copy on PATH or a symlink to it works too).
   --special: what the text "<|endoftext|>" becomes (default: ordinary text).
   --help / -h: the usage on stdout, exit 0.
   Exit status: 0 ok, 1 an error (the message on stderr), 2 a bad argument. */
#define _POSIX_C_SOURCE 200809L /* readlink under -std=c11 */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "usage: gpt2rt-tok encode|decode [--vocab DIR] [--format text|u16|bin] [--special text|allow|refuse]\n" \
              "       gpt2rt-tok pack --vocab DIR OUT.bin\n"                                                        \
              "  encode: UTF-8 on stdin -> ids on stdout; decode: ids on stdin -> bytes; pack: the compact\n"     \
              "  vocabulary data/ ships. --vocab: default the repository's data/ (found from any directory)\n"

static int usage(const char *msg) {
    fprintf(stderr, "gpt2rt-tok: %s\n" USAGE, msg);
    return 2;
}

static unsigned char *read_stdin(size_t *len) {
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = (unsigned char *)malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, stdin);
        if (n < cap) break;
        unsigned char *nb = (unsigned char *)realloc(buf, cap * 2);
        if (!nb) { free(buf); return NULL; }
        buf = nb;
        cap *= 2;
    }
    if (buf && ferror(stdin)) { free(buf); return NULL; }
    *len = n;
    return buf;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { printf(USAGE); return 0; }
    if (argc < 2) return usage("no command");
    const char *cmd = argv[1], *vocab = NULL, *format = "text", *out_path = NULL;
    gpt2rt_tok_special special = GPT2RT_TOK_SPECIAL_TEXT;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--vocab") && i + 1 < argc) vocab = argv[++i];
        else if (!strcmp(argv[i], "--format") && i + 1 < argc) format = argv[++i];
        else if (!strcmp(argv[i], "--special") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(v, "text")) special = GPT2RT_TOK_SPECIAL_TEXT;
            else if (!strcmp(v, "allow")) special = GPT2RT_TOK_SPECIAL_ALLOW;
            else if (!strcmp(v, "refuse")) special = GPT2RT_TOK_SPECIAL_REFUSE;
            else return usage("--special takes text, allow or refuse");
        } else if (!strcmp(cmd, "pack") && !out_path && argv[i][0] != '-') out_path = argv[i];
        else { fprintf(stderr, "gpt2rt-tok: unknown argument '%s'\n", argv[i]); return usage("bad argument"); }
    }
    if (strcmp(format, "text") && strcmp(format, "u16") && strcmp(format, "bin"))
        return usage("--format takes text, u16 or bin");
    if (strcmp(cmd, "encode") && strcmp(cmd, "decode") && strcmp(cmd, "pack")) return usage("unknown command");
    if (!strcmp(cmd, "pack") && (!vocab || !out_path)) return usage("pack needs --vocab DIR and an output path");

    char fallback[4096], exe[2048];
    if (!vocab) {
        vocab = "data";
        ssize_t n;
        if (!is_dir(vocab) && (n = readlink("/proc/self/exe", exe, sizeof exe - 1)) > 0) {
            /* beside the program: <repo>/build/gpt2rt-tok -> <repo>/data */
            exe[n] = 0;
            char *slash = strrchr(exe, '/');
            if (slash) *slash = 0;
            int len = snprintf(fallback, sizeof fallback, "%s/../data", slash ? exe : ".");
            if (len > 0 && (size_t)len < sizeof fallback) vocab = fallback;
        }
    }
    gpt2rt_tokenizer *tok;
    if (gpt2rt_tok_load(&tok, vocab) != GPT2RT_OK) {
        fprintf(stderr, "gpt2rt-tok: %s\n", gpt2rt_tok_last_error(tok));
        gpt2rt_tok_free(tok);
        return 1;
    }
    if (!strcmp(cmd, "pack")) {
        int rc = 0;
        if (gpt2rt_tok_save(tok, out_path) != GPT2RT_OK) { fprintf(stderr, "gpt2rt-tok: %s\n", gpt2rt_tok_last_error(tok)); rc = 1; }
        gpt2rt_tok_free(tok);
        return rc;
    }

    size_t len;
    unsigned char *in = read_stdin(&len);
    if (!in) { fprintf(stderr, "gpt2rt-tok: reading stdin failed\n"); gpt2rt_tok_free(tok); return 1; }
    int rc = 0;
    if (!strcmp(cmd, "encode")) {
        int32_t *ids = (int32_t *)malloc((len + 1) * sizeof(int32_t));
        size_t n = 0;
        if (!ids) { fprintf(stderr, "gpt2rt-tok: out of memory\n"); rc = 1; }
        else if (gpt2rt_tok_encode(tok, in, len, special, ids, len + 1, &n) != GPT2RT_OK) {
            fprintf(stderr, "gpt2rt-tok: %s\n", gpt2rt_tok_last_error(tok));
            rc = 1;
        } else if (!strcmp(format, "text")) {
            for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
            printf("\n");
        } else if (!strcmp(format, "u16")) {
            for (size_t i = 0; i < n; i++) {
                unsigned char b[2] = {(unsigned char)(ids[i] & 255), (unsigned char)(ids[i] >> 8)};
                fwrite(b, 1, 2, stdout);
            }
        } else { /* bin: llm.c's header, then the tokens (the shard checks they fit uint16) */
            gpt2rt_shard *sh;
            if (gpt2rt_shard_from_tokens(&sh, ids, (int64_t)n) != GPT2RT_OK) {
                fprintf(stderr, "gpt2rt-tok: %s\n", gpt2rt_shard_last_error(sh));
                rc = 1;
            } else {
                int32_t h[256] = {20240520, 1, (int32_t)n};
                fwrite(h, 4, 256, stdout);
                fwrite(gpt2rt_shard_tokens(sh), 2, n, stdout);
            }
            gpt2rt_shard_free(sh);
        }
        free(ids);
    } else { /* decode */
        int32_t *ids = NULL;
        size_t n = 0;
        if (!strcmp(format, "text")) {
            ids = (int32_t *)malloc((len / 2 + 1) * sizeof(int32_t));
            for (size_t i = 0; ids && i < len;) {
                if (in[i] == ' ' || in[i] == '\n' || in[i] == '\t' || in[i] == '\r') { i++; continue; }
                long v = 0;
                size_t start = i;
                while (i < len && in[i] >= '0' && in[i] <= '9' && v < 1000000000) v = v * 10 + (in[i++] - '0');
                if (i == start || (i < len && !strchr(" \n\t\r", in[i]))) {
                    fprintf(stderr, "gpt2rt-tok: input byte %zu: expected a decimal token id\n", i);
                    rc = 1;
                    break;
                }
                ids[n++] = (int32_t)(v > 2147483647L ? 2147483647L : v);
            }
        } else {
            gpt2rt_shard *sh = NULL;
            const unsigned char *body = in;
            size_t count = len / 2;
            if (!strcmp(format, "bin")) {
                if (gpt2rt_shard_load_mem(&sh, in, len, "stdin") != GPT2RT_OK) {
                    fprintf(stderr, "gpt2rt-tok: %s\n", gpt2rt_shard_last_error(sh));
                    rc = 1;
                }
                body = (const unsigned char *)gpt2rt_shard_tokens(sh);
                count = (size_t)gpt2rt_shard_count(sh);
            } else if (len % 2) {
                fprintf(stderr, "gpt2rt-tok: %zu bytes of uint16 ids: an odd count\n", len);
                rc = 1;
            }
            ids = (int32_t *)malloc((count + 1) * sizeof(int32_t));
            for (size_t i = 0; ids && !rc && i < count; i++) ids[n++] = body[2 * i] | body[2 * i + 1] << 8;
            gpt2rt_shard_free(sh);
        }
        size_t nb = 0;
        char *out = NULL;
        if (!rc && ids) {
            gpt2rt_tok_decode(tok, ids, n, NULL, 0, &nb); /* the length */
            out = (char *)malloc(nb + 1);
            if (!out || gpt2rt_tok_decode(tok, ids, n, out, nb, &nb) != GPT2RT_OK) {
                fprintf(stderr, "gpt2rt-tok: %s\n", out ? gpt2rt_tok_last_error(tok) : "out of memory");
                rc = 1;
            } else fwrite(out, 1, nb, stdout);
        } else if (!ids) { fprintf(stderr, "gpt2rt-tok: out of memory\n"); rc = 1; }
        free(out);
        free(ids);
    }
    if (fflush(stdout) != 0) { fprintf(stderr, "gpt2rt-tok: writing stdout failed\n"); rc = 1; }
    free(in);
    gpt2rt_tok_free(tok);
    return rc;
}
