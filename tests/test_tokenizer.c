/* tests/test_tokenizer.c - the GPT-2 tokenizer and llm.c token shards.

   References we did not write: tiktoken's ids (tests/fixtures/tokenizer, from
   tools/tok_fixture.py), the Hugging Face-tokenised shards in data/ (decoded and
   encoded again: the same ids), and, where ../shared/data is present, OpenAI's
   encoder.json + vocab.bpe and tinyshakespeare.txt (a check that needs them and
   cannot run prints a line "skip <what>: <file> not found", counted by run.sh).
   encoder.json and vocab.bpe in OpenAI's own format are written from
   data/gpt2_merges.bin, so the loaders of those files and the refusal of a cut
   vocab.bpe run on a fresh clone. Exact properties: decode(encode(x)) == x for any
   bytes, the heap BPE == the textbook quadratic one, shard windows disjoint across
   ranks. Run from the repository root; GPT2RT_TEST_SHARED names another directory
   for ../shared/data. */
#define GPT2RT_IMPLEMENTATION
#include "../gpt2rt.h"
#include "harness.h"

#define FIXTURE "tests/fixtures/tokenizer/gpt2_cases.txt"

static uint64_t rng_state = 42;
static uint32_t rnd(uint32_t n) { return (uint32_t)(gpt2rt__rng_next(&rng_state) % n); }

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* OpenAI's original files: ../shared/data/<name> (or $GPT2RT_TEST_SHARED/<name>) */
static const char *shared(const char *name) {
    static char buf[4][512];
    static int k;
    const char *dir = getenv("GPT2RT_TEST_SHARED");
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir && dir[0] ? dir : "../shared/data", name);
    return buf[k];
}

static size_t put_utf8(unsigned char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { o[0] = (unsigned char)(0xC0 | cp >> 6); o[1] = (unsigned char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12); o[1] = (unsigned char)(0x80 | ((cp >> 6) & 63));
        o[2] = (unsigned char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18); o[1] = (unsigned char)(0x80 | ((cp >> 12) & 63));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 63)); o[3] = (unsigned char)(0x80 | (cp & 63));
    return 4;
}

/* encode, then decode: the same bytes; returns the id count (or -1) */
static int64_t round_trip(gpt2rt_tokenizer *tok, const unsigned char *s, size_t n, gpt2rt_tok_special sp) {
    int32_t *ids = (int32_t *)malloc((n + 1) * sizeof(int32_t));
    unsigned char *back = (unsigned char *)malloc(n + 1);
    size_t k = 0, nb = 0;
    int64_t ret = -1;
    if (gpt2rt_tok_encode(tok, s, n, sp, ids, n + 1, &k) == GPT2RT_OK &&
        gpt2rt_tok_decode(tok, ids, k, back, n + 1, &nb) == GPT2RT_OK && nb == n && !memcmp(back, s, n))
        ret = (int64_t)k;
    free(ids);
    free(back);
    return ret;
}

static int hexval(int c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

/* the tiktoken fixture: every case's ids exactly, and back to the same bytes */
static void test_fixture(gpt2rt_tokenizer *tok, uint64_t *shakespeare_fnv, long *shakespeare_n) {
    size_t len;
    char *fx = (char *)read_all(FIXTURE, &len);
    CHECK(fx != NULL, "%s missing", FIXTURE);
    if (!fx) return;
    fx[len] = 0;
    int cases = 0, exact = 0;
    long n_ids = 0;
    unsigned char *text = NULL;
    size_t tlen = 0;
    gpt2rt_tok_special sp = GPT2RT_TOK_SPECIAL_TEXT;
    for (char *line = strtok(fx, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "text ", 5) || !strncmp(line, "special ", 8)) {
            sp = line[0] == 's' ? GPT2RT_TOK_SPECIAL_ALLOW : GPT2RT_TOK_SPECIAL_TEXT;
            const char *h = line + (line[0] == 's' ? 8 : 5);
            tlen = strlen(h) / 2;
            free(text);
            text = (unsigned char *)malloc(tlen + 1);
            for (size_t i = 0; i < tlen; i++) text[i] = (unsigned char)(hexval(h[2 * i]) * 16 + hexval(h[2 * i + 1]));
        } else if (!strncmp(line, "ids", 3)) {
            int32_t want[20000], got[20000];
            int nw = 0;
            for (char *p = line + 3; *p;) {
                char *e;
                long v = strtol(p, &e, 10);
                if (e == p) break;
                want[nw++] = (int32_t)v;
                p = e;
            }
            size_t ng = 0;
            gpt2rt_result r = gpt2rt_tok_encode(tok, text, tlen, sp, got, 20000, &ng);
            int same = r == GPT2RT_OK && (int)ng == nw && !memcmp(got, want, (size_t)nw * sizeof(int32_t));
            if (!same) {
                int at = 0;
                while (at < nw && at < (int)ng && got[at] == want[at]) at++;
                printf("    case %d (%zu bytes): %zu ids, tiktoken %d; first difference at id %d: %d vs %d\n", cases, tlen,
                       ng, nw, at, at < (int)ng ? got[at] : -1, at < nw ? want[at] : -1);
            }
            CHECK(same, "fixture case %d: ids differ from tiktoken's", cases);
            CHECK(round_trip(tok, text, tlen, sp) == nw, "fixture case %d: decode(encode(x)) != x", cases);
            exact += same;
            cases++;
            n_ids += nw;
        } else if (!strncmp(line, "file tinyshakespeare.txt", 24)) {
            char hex[17];
            if (sscanf(line, "file tinyshakespeare.txt tokens %ld fnv1a64 %16s", shakespeare_n, hex) == 2)
                *shakespeare_fnv = strtoull(hex, NULL, 16);
        }
    }
    printf("    fixture: %d cases, %d exact, %ld ids from tiktoken\n", cases, exact, n_ids);
    CHECK(cases >= 40, "fixture has %d cases", cases);
    free(text);
    free(fx);
}

static uint64_t fnv_u16(const int32_t *ids, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ (uint64_t)(ids[i] & 255)) * 0x100000001B3ull;
        h = (h ^ (uint64_t)(ids[i] >> 8)) * 0x100000001B3ull;
    }
    return h;
}

/* the whole of tinyshakespeare: tiktoken's count and hash, and the Hugging Face
   shards in data/ (train = the first 120,000 tokens, val = the last 32,768) */
static void test_shakespeare(gpt2rt_tokenizer *tok, uint64_t want_fnv, long want_n) {
    size_t len;
    unsigned char *txt = read_all(shared("tinyshakespeare.txt"), &len);
    if (!txt) { printf("skip tinyshakespeare, all of it: %s not found\n", shared("tinyshakespeare.txt")); return; }
    int32_t *ids = (int32_t *)malloc(len * sizeof(int32_t));
    size_t n = 0;
    double t0 = gpt2rt__now();
    gpt2rt_result r = gpt2rt_tok_encode(tok, txt, len, GPT2RT_TOK_SPECIAL_REFUSE, ids, len, &n);
    double dt = gpt2rt__now() - t0;
    CHECK(r == GPT2RT_OK && n == 338025 && (long)n == want_n, "tinyshakespeare: %zu tokens, tiktoken %ld, expected 338025", n, want_n);
    CHECK(fnv_u16(ids, n) == want_fnv, "tinyshakespeare: ids differ from tiktoken's (FNV-1a %016llx vs %016llx)",
          (unsigned long long)fnv_u16(ids, n), (unsigned long long)want_fnv);
    printf("    tinyshakespeare: %zu bytes -> %zu tokens in %.1f ms (cold cache)\n", len, n, dt * 1e3);
    const char *shards[2] = {"data/tinyshakespeare_train.bin", "data/tinyshakespeare_val.bin"};
    for (int i = 0; i < 2; i++) {
        gpt2rt_shard *s;
        CHECK(gpt2rt_shard_load(&s, shards[i]) == GPT2RT_OK, "%s", gpt2rt_shard_last_error(s));
        int64_t m = gpt2rt_shard_count(s), off = i ? (int64_t)n - m : 0, bad = -1;
        const uint16_t *t = gpt2rt_shard_tokens(s);
        for (int64_t j = 0; t && j < m && bad < 0; j++)
            if (t[j] != ids[off + j]) bad = j;
        CHECK(t && m > 1000 && bad < 0, "%s: token %lld differs from ours", shards[i], (long long)bad);
        gpt2rt_shard_free(s);
    }
    CHECK(round_trip(tok, txt, len, GPT2RT_TOK_SPECIAL_TEXT) == 338025, "tinyshakespeare: decode(encode(x)) != x");
    free(ids);
    free(txt);
}

static int same_vocab(const gpt2rt_tokenizer *a, const gpt2rt_tokenizer *b) {
    if (gpt2rt_tok_vocab_size(a) != gpt2rt_tok_vocab_size(b) || gpt2rt_tok_eot(a) != gpt2rt_tok_eot(b) ||
        a->n_merges != b->n_merges)
        return 0;
    for (int32_t id = 0; id < a->n_vocab; id++) {
        size_t la, lb;
        const char *pa = gpt2rt_tok_token(a, id, &la), *pb = gpt2rt_tok_token(b, id, &lb);
        if (la != lb || memcmp(pa, pb, la)) return 0;
    }
    for (int32_t r = 0; r < a->n_merges; r++) {
        const gpt2rt__tok_merge *m = gpt2rt__tok_find(b, (uint32_t)a->merges[2 * r], (uint32_t)a->merges[2 * r + 1]);
        if (!m || m->rank != r || m->id != gpt2rt__tok_find(a, (uint32_t)a->merges[2 * r], (uint32_t)a->merges[2 * r + 1])->id)
            return 0;
    }
    return 1;
}

/* the Hugging Face file names, written from the compact copy with every non-ASCII
   character as a \u escape and CRLF merges: the JSON loader's other dialect */
static int write_hf_dir(const gpt2rt_tokenizer *t, const char *dir) {
    char p[256];
    uint32_t cp_of[256];
    int order[256];
    gpt2rt__tok_byte_order(cp_of, order);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/vocab.json", dir);
    FILE *f = fopen(p, "wb");
    if (!f) return 0;
    fputc('{', f);
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t l;
        const unsigned char *s = (const unsigned char *)gpt2rt_tok_token(t, id, &l);
        fprintf(f, id ? ",\n  \"" : "\"");
        for (size_t i = 0; i < l; i++) {
            uint32_t c = id == t->eot ? s[i] : cp_of[s[i]];
            if (c == '"' || c == '\\') fprintf(f, "\\%c", (char)c);
            else if (c < 0x80) fputc((int)c, f);
            else fprintf(f, "\\u%04x", c);
        }
        fprintf(f, "\": %d", (int)id);
    }
    fputs("}\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/merges.txt", dir);
    f = fopen(p, "wb");
    if (!f) return 0;
    fputs("#version: 0.2\r\n", f);
    for (int32_t r = 0; r < t->n_merges; r++) {
        for (int k = 0; k < 2; k++) {
            size_t l;
            const unsigned char *s = (const unsigned char *)gpt2rt_tok_token(t, t->merges[2 * r + k], &l);
            unsigned char u[4];
            for (size_t i = 0; i < l; i++) fwrite(u, 1, put_utf8(u, cp_of[s[i]]), f);
            fputs(k ? "\r\n" : " ", f);
        }
    }
    fclose(f);
    return 1;
}

/* OpenAI's two files as its encoder.py release has them, written from a vocabulary:
   encoder.json = json.dumps of {token: id} in id order (", " and ": " separators,
   non-ASCII as lowercase \u escapes, no newline at the end); vocab.bpe = the line
   "#version: 0.2", then "left right" per merge in rank order, each line ending LF */
static int write_openai_dir(const gpt2rt_tokenizer *t, const char *dir) {
    char p[256];
    uint32_t cp_of[256];
    int order[256];
    gpt2rt__tok_byte_order(cp_of, order);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/encoder.json", dir);
    FILE *f = fopen(p, "wb");
    if (!f) return 0;
    fputc('{', f);
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t l;
        const unsigned char *s = (const unsigned char *)gpt2rt_tok_token(t, id, &l);
        fputs(id ? ", \"" : "\"", f);
        for (size_t i = 0; i < l; i++) {
            uint32_t c = id == t->eot ? s[i] : cp_of[s[i]];
            if (c == '"' || c == '\\') fprintf(f, "\\%c", (char)c);
            else if (c < 0x80) fputc((int)c, f);
            else fprintf(f, "\\u%04x", c);
        }
        fprintf(f, "\": %d", (int)id);
    }
    fputc('}', f);
    int ok = fclose(f) == 0;
    snprintf(p, sizeof p, "%s/vocab.bpe", dir);
    f = fopen(p, "wb");
    if (!f) return 0;
    fputs("#version: 0.2\n", f);
    for (int32_t r = 0; r < t->n_merges; r++)
        for (int k = 0; k < 2; k++) {
            size_t l;
            const unsigned char *s = (const unsigned char *)gpt2rt_tok_token(t, t->merges[2 * r + k], &l);
            unsigned char u[4];
            for (size_t i = 0; i < l; i++) fwrite(u, 1, put_utf8(u, cp_of[s[i]]), f);
            fputc(k ? '\n' : ' ', f);
        }
    return (fclose(f) == 0) && ok;
}

static int same_file(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    unsigned char *x = read_all(a, &la), *y = read_all(b, &lb);
    int eq = x && y && la == lb && !memcmp(x, y, la);
    free(x);
    free(y);
    return eq;
}

/* encoder.json + vocab.bpe, as OpenAI ships them and cut short */
static void test_openai_files(gpt2rt_tokenizer *tok) {
    const char *dir = "build/tok_openai";
    CHECK(write_openai_dir(tok, dir), "cannot write %s", dir);
    gpt2rt_tokenizer *oa;
    gpt2rt_result r = gpt2rt_tok_load(&oa, dir); /* no gpt2_merges.bin there: encoder.json + vocab.bpe */
    CHECK(r == GPT2RT_OK && same_vocab(tok, oa), "encoder.json + vocab.bpe written from data/gpt2_merges.bin: %s",
          gpt2rt_tok_last_error(oa));
    gpt2rt_tok_free(oa);
    /* the originals: ours byte for byte, and they load as the compact copy */
    if (file_exists(shared("encoder.json")) && file_exists(shared("vocab.bpe"))) {
        CHECK(same_file("build/tok_openai/encoder.json", shared("encoder.json")),
              "encoder.json written from data/gpt2_merges.bin differs from %s", shared("encoder.json"));
        CHECK(same_file("build/tok_openai/vocab.bpe", shared("vocab.bpe")),
              "vocab.bpe written from data/gpt2_merges.bin differs from %s", shared("vocab.bpe"));
        gpt2rt_tokenizer *orig;
        r = gpt2rt_tok_load_files(&orig, shared("encoder.json"), shared("vocab.bpe"));
        CHECK(r == GPT2RT_OK && same_vocab(tok, orig), "OpenAI's encoder.json + vocab.bpe: %s",
              gpt2rt_tok_last_error(orig));
        printf("    data/gpt2_merges.bin == OpenAI's encoder.json + vocab.bpe (byte for byte as written back): %d "
               "tokens, %d merges\n", (int)gpt2rt_tok_vocab_size(orig), r == GPT2RT_OK ? (int)orig->n_merges : -1);
        gpt2rt_tok_free(orig);
    } else printf("skip OpenAI's encoder.json + vocab.bpe, byte comparison: %s or %s not found\n",
                  shared("encoder.json"), shared("vocab.bpe"));

    /* vocab.bpe cut at a line boundary parses: before the merge count was checked it
       loaded as a 50257-token vocabulary and encoded text to too many, wrong ids.
       Cut at the end of the line that holds byte k/8 of the file (k = 0: the
       version line alone), and the empty file. */
    size_t vlen, jlen;
    unsigned char *vb = read_all("build/tok_openai/vocab.bpe", &vlen), *jb = read_all("build/tok_openai/encoder.json", &jlen);
    CHECK(vb && jb, "cannot read back build/tok_openai");
    if (!vb || !jb) { free(vb); free(jb); return; }
    const int eighths[6] = {0, 3, 4, 5, 7, -1};
    for (int i = 0; i < 6; i++) {
        size_t cut = 0;
        if (eighths[i] >= 0) {
            cut = vlen * (size_t)eighths[i] / 8;
            while (cut < vlen && vb[cut] != '\n') cut++;
            cut++;
        }
        int lines = 0;
        for (size_t k = 0; k < cut; k++) lines += vb[k] == '\n';
        int merges = lines > 0 ? lines - 1 : 0; /* the version line is not a merge */
        char want[160];
        snprintf(want, sizeof want, "merges: %d merges, but the vocabulary's 50257 tokens need 50000 (50257 - 256 byte "
                 "tokens - 1 special)", merges);
        gpt2rt_tokenizer *t;
        r = gpt2rt_tok_load_mem(&t, jb, jlen, vb, cut);
        CHECK(r == GPT2RT_ERR_FORMAT && strstr(gpt2rt_tok_last_error(t), want) && strstr(gpt2rt_tok_last_error(t), "cut short"),
              "vocab.bpe cut to %zu of %zu bytes (%d merges): %s: %s", cut, vlen, merges, gpt2rt_result_string(r),
              gpt2rt_tok_last_error(t));
        CHECK(gpt2rt_tok_vocab_size(t) == 0, "a refused vocabulary reports %d tokens", (int)gpt2rt_tok_vocab_size(t));
        if (i == 1) printf("    vocab.bpe cut at 3/8: %s\n", gpt2rt_tok_last_error(t));
        gpt2rt_tok_free(t);
    }
    /* through the files: the message names both */
    CHECK(write_all("build/tok_openai_cut.bpe", vb, vlen / 2), "cannot write build/tok_openai_cut.bpe");
    gpt2rt_tokenizer *t;
    r = gpt2rt_tok_load_files(&t, "build/tok_openai/encoder.json", "build/tok_openai_cut.bpe");
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(gpt2rt_tok_last_error(t), "build/tok_openai/encoder.json + "
          "build/tok_openai_cut.bpe: merges:") && strstr(gpt2rt_tok_last_error(t), "need 50000"),
          "cut vocab.bpe through load_files: %s", gpt2rt_tok_last_error(t));
    gpt2rt_tok_free(t);
    /* the vocabulary cut instead (the last 1000 ids gone): more merges than it can hold */
    size_t jcut = jlen;
    for (int k = 0; k < 1000; k++) { /* back over 1000 ", " separators */
        while (jcut > 0 && !(jb[jcut - 1] == ',' && jb[jcut] == ' ')) jcut--;
        jcut--;
    }
    unsigned char *jshort = (unsigned char *)malloc(jcut + 1);
    memcpy(jshort, jb, jcut);
    jshort[jcut] = '}';
    r = gpt2rt_tok_load_mem(&t, jshort, jcut + 1, vb, vlen);
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(gpt2rt_tok_last_error(t), "50000 merges for 49257 tokens"),
          "encoder.json of 49257 tokens with 50000 merges: %s: %s", gpt2rt_result_string(r), gpt2rt_tok_last_error(t));
    gpt2rt_tok_free(t);
    free(jshort);
    free(vb);
    free(jb);
}

/* the Hugging Face shards in data/ (tokenised by transformers from the whole text),
   decoded and encoded again: the same ids, with no file from outside the repo. A
   stretch is cut where a line ends (after a "\n" token and before a letter), where
   GPT-2's pre-tokeniser cuts too, so its ids do not depend on the text around it. */
static void test_shards_reencode(gpt2rt_tokenizer *tok) {
    const char *files[2] = {"data/tinyshakespeare_train.bin", "data/tinyshakespeare_val.bin"};
    for (int f = 0; f < 2; f++) {
        gpt2rt_shard *s;
        gpt2rt_result r = gpt2rt_shard_load(&s, files[f]);
        CHECK(r == GPT2RT_OK, "%s: %s", files[f], gpt2rt_shard_last_error(s));
        if (r != GPT2RT_OK) { gpt2rt_shard_free(s); continue; }
        const uint16_t *t = gpt2rt_shard_tokens(s);
        int64_t n = gpt2rt_shard_count(s), a = 0, b = n;
        /* a letter token after a newline token: a line's first word */
#define LINE_START(i) (t[(i) - 1] == 198 && ((const char *)gpt2rt_tok_token(tok, t[i], NULL))[0] >= 'A' && \
                       ((const char *)gpt2rt_tok_token(tok, t[i], NULL))[0] <= 'z')
        if (f == 1) /* the validation shard starts inside the text: from its first line start */
            for (a = 1; a < n && !LINE_START(a); a++) {}
        if (f == 0) /* the training shard ends inside the text: up to its last line start */
            for (b = n - 1; b > 1 && !LINE_START(b); b--) {}
#undef LINE_START
        int32_t *ids = (int32_t *)malloc((size_t)(b - a) * sizeof(int32_t)), *back = NULL;
        for (int64_t i = a; i < b; i++) ids[i - a] = t[i];
        size_t nb = 0, nk = 0;
        gpt2rt_tok_decode(tok, ids, (size_t)(b - a), NULL, 0, &nb);
        unsigned char *text = (unsigned char *)malloc(nb + 1);
        r = gpt2rt_tok_decode(tok, ids, (size_t)(b - a), text, nb, &nb);
        back = (int32_t *)malloc((nb + 1) * sizeof(int32_t));
        if (r == GPT2RT_OK) r = gpt2rt_tok_encode(tok, text, nb, GPT2RT_TOK_SPECIAL_REFUSE, back, nb + 1, &nk);
        int64_t first_diff = -1;
        for (int64_t i = 0; r == GPT2RT_OK && i < b - a && i < (int64_t)nk && first_diff < 0; i++)
            if (back[i] != ids[i]) first_diff = i;
        CHECK(r == GPT2RT_OK && (int64_t)nk == b - a && first_diff < 0 && b - a > 30000,
              "%s tokens [%lld, %lld): %zu bytes encode to %zu ids, transformers gave %lld; first difference at %lld: %s",
              files[f], (long long)a, (long long)b, nb, nk, (long long)(b - a), (long long)first_diff,
              gpt2rt_tok_last_error(tok));
        printf("    %s tokens [%lld, %lld): decoded to %zu bytes, encoded back to the same %zu ids\n", files[f],
               (long long)a, (long long)b, nb, nk);
        free(ids); free(back); free(text);
        gpt2rt_shard_free(s);
    }
}

static void test_loaders(gpt2rt_tokenizer *tok) {
    CHECK(gpt2rt_tok_vocab_size(tok) == 50257 && gpt2rt_tok_eot(tok) == 50256, "vocab %d, eot %d",
          (int)gpt2rt_tok_vocab_size(tok), (int)gpt2rt_tok_eot(tok));

    /* save writes the same bytes as data/ ships */
    CHECK(gpt2rt_tok_save(tok, "build/tok_saved.bin") == GPT2RT_OK, "%s", gpt2rt_tok_last_error(tok));
    size_t la, lb;
    unsigned char *a = read_all("build/tok_saved.bin", &la), *b = read_all("data/gpt2_merges.bin", &lb);
    CHECK(a && b && la == lb && la == 20 + 4 * 50000 && !memcmp(a, b, la), "saved compact copy differs (%zu vs %zu bytes)", la, lb);

    /* vocab.json + merges.txt (escapes, CRLF) through gpt2rt_tok_load(dir) */
    CHECK(write_hf_dir(tok, "build/tok_hf"), "cannot write build/tok_hf");
    gpt2rt_tokenizer *hf;
    gpt2rt_result r = gpt2rt_tok_load(&hf, "build/tok_hf");
    CHECK(r == GPT2RT_OK && same_vocab(tok, hf), "vocab.json + merges.txt: %s", gpt2rt_tok_last_error(hf));
    gpt2rt_tok_free(hf);

    /* bad files: a clear message with the numbers, never a crash */
    struct { const char *json, *merges, *expect; } bad[] = {
        {"{\"a\": 0, \"b\": 0}", "", "both have id 0"},
        {"{\"a\": 0, \"b\": 5}", "", "id 5 is not below the 2 entries"},
        {"{\"a\": 0, \"a\": 1}", "", "are the same bytes"},
        {"{\"\\u00zz\": 0}", "", "bad \\u escape"},
        {"{\"\\ud800\": 0}", "", "lone surrogate"},
        {"{\"\xff\": 0}", "", "invalid UTF-8"},
        {"{\"\\u0100\\u4e00\": 0}", "", "U+4E00 is a character outside"},
        {"{\"a\": 1.5}", "", "\"a\": expected an integer in [0, 9223372036854775807], found 1.5"},
        {"{\"a\": 0", "", "unexpected end (an object is not closed)"},
        {"{\"a\": 0} x", "", "text after the JSON value"},
        {"{\"a\": 0}", "", "byte 0x00 has no token"},
        {"{\"a\": 0, \"b\": 1}", "#version: 0.2\na c\n", "line 2: its second token is not in the vocabulary"},
        {"{\"a\": 0, \"b\": 1}", "a b\n", "merged token is not in the vocabulary"},
        {"{\"a\": 0, \"b\": 1, \"ab\": 2}", "a b\na b\n", "repeats an earlier merge"},
        {"{\"a\": 0, \"b\": 1, \"ab\": 2}", "ab\n", "two tokens separated by one space"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gpt2rt_tokenizer *t;
        r = gpt2rt_tok_load_mem(&t, bad[i].json, strlen(bad[i].json), bad[i].merges, strlen(bad[i].merges));
        CHECK(r == GPT2RT_ERR_FORMAT && strstr(gpt2rt_tok_last_error(t), bad[i].expect), "bad vocabulary %zu: %s -> %s", i,
              gpt2rt_result_string(r), gpt2rt_tok_last_error(t));
        CHECK(gpt2rt_tok_encode(t, "x", 1, GPT2RT_TOK_SPECIAL_TEXT, NULL, 0, &la) == GPT2RT_ERR_STATE, "failed tokenizer encodes");
        gpt2rt_tok_free(t);
    }
    /* compact: wrong magic, truncation, a merge that joins a later token */
    unsigned char c[28];
    memcpy(c, b, 28);
    gpt2rt_tokenizer *t;
    r = gpt2rt_tok_load_mem(&t, NULL, 0, c, 28);
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(t->error, "50000 merges need 200020 bytes, the file has 28"), "%s", t->error);
    gpt2rt_tok_free(t);
    uint32_t two = 2, none = UINT32_MAX;
    memcpy(c + 12, &two, 4);
    memcpy(c + 16, &none, 4);
    uint16_t late = 300;
    memcpy(c + 24, &late, 2);
    r = gpt2rt_tok_load_mem(&t, NULL, 0, c, 28);
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(t->error, "merge 1 joins tokens 300 and"), "%s", t->error);
    gpt2rt_tok_free(t);
    r = gpt2rt_tok_load_mem(&t, NULL, 0, "GPT2RTBX", 8);
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(t->error, "not a file gpt2rt_tok_save wrote"), "%s", t->error);
    gpt2rt_tok_free(t);
    r = gpt2rt_tok_load(&t, "tests");
    CHECK(r == GPT2RT_ERR_IO && strstr(t->error, "no GPT-2 vocabulary here"), "%s", t->error);
    gpt2rt_tok_free(t);
    /* a directory that is not there, or a file, is not "no vocabulary here" */
    r = gpt2rt_tok_load(&t, "build/no_such_tokenizer_dir");
    CHECK(r == GPT2RT_ERR_IO && strstr(t->error, "build/no_such_tokenizer_dir: no such directory") &&
          !strstr(t->error, "no GPT-2 vocabulary here"), "missing directory: %s", t->error);
    gpt2rt_tok_free(t);
    r = gpt2rt_tok_load(&t, "tests/harness.h");
    CHECK(r == GPT2RT_ERR_IO && strstr(t->error, "tests/harness.h: not a directory"), "a file as the directory: %s",
          t->error);
    gpt2rt_tok_free(t);
    free(a);
    free(b);
}

/* special tokens, buffer sizes, bad ids */
static void test_api(gpt2rt_tokenizer *tok) {
    const char *s = "a<|endoftext|>b";
    int32_t ids[32];
    size_t n;
    CHECK(gpt2rt_tok_encode(tok, s, strlen(s), GPT2RT_TOK_SPECIAL_ALLOW, ids, 32, &n) == GPT2RT_OK && n == 3 &&
          ids[1] == 50256, "allow: %zu ids", n);
    CHECK(gpt2rt_tok_encode(tok, s, strlen(s), GPT2RT_TOK_SPECIAL_TEXT, ids, 32, &n) == GPT2RT_OK && n == 9 &&
          ids[1] == 27 && ids[2] == 91, "text: %zu ids", n); /* "<", "|", "endoftext", "|", ">"... as tiktoken */
    gpt2rt_result r = gpt2rt_tok_encode(tok, s, strlen(s), GPT2RT_TOK_SPECIAL_REFUSE, ids, 32, &n);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_tok_last_error(tok), "text byte 1:"), "refuse: %s",
          gpt2rt_tok_last_error(tok));
    r = gpt2rt_tok_encode(tok, "hello world", 11, GPT2RT_TOK_SPECIAL_TEXT, ids, 1, &n);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && n == 2 && strstr(gpt2rt_tok_last_error(tok), "need 2 ids, cap = 1"), "%s",
          gpt2rt_tok_last_error(tok));
    int32_t badid[2] = {15496, 50257};
    char out[64];
    r = gpt2rt_tok_decode(tok, badid, 2, out, sizeof out, &n);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && strstr(gpt2rt_tok_last_error(tok), "ids[1] = 50257 is not in [0, 50257)"),
          "%s", gpt2rt_tok_last_error(tok));
    r = gpt2rt_tok_decode(tok, badid, 1, out, 2, &n);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && n == 5, "decode cap: %zu", n);
    r = gpt2rt_tok_encode(tok, "", 0, GPT2RT_TOK_SPECIAL_TEXT, NULL, 0, &n);
    CHECK(r == GPT2RT_OK && n == 0, "empty text");
    size_t l;
    const char *e = gpt2rt_tok_token(tok, 50256, &l);
    CHECK(e && l == 13 && !memcmp(e, "<|endoftext|>", 13), "token 50256");
    CHECK(gpt2rt_tok_token(tok, -1, &l) == NULL && l == 0, "token -1");
    /* the Unicode classes, spot checks against the standard */
    struct { uint32_t cp; int cls; } uc[] = {
        {'A', 1}, {'z', 1}, {'7', 2}, {' ', 3}, {'\t', 3}, {0x0B, 3}, {0x1C, 0}, {'\'', 0}, {0x85, 3}, {0xA0, 3},
        {0xAA, 1}, {0xB2, 2}, {0xBD, 2}, {0xE9, 1}, {0x301, 0}, {0x663, 2}, {0x1680, 3}, {0x180E, 0}, {0x2028, 3},
        {0x2160, 2}, {0x3000, 3}, {0x3007, 2}, {0x4E00, 1}, {0xAC00, 1}, {0xFEFF, 0}, {0x10400, 1}, {0x1D7CE, 2},
        {0x1F600, 0}, {0x20000, 1}, {0x2A6DF, 1}, {0x2A6E0, 0}, {0x10FFFF, 0}};
    for (size_t i = 0; i < sizeof uc / sizeof uc[0]; i++) {
        unsigned char u[4];
        int w;
        size_t m = put_utf8(u, uc[i].cp);
        int k = gpt2rt__tok_class(tok, u, m, &w);
        CHECK(k == uc[i].cls && w == (int)m, "U+%04X: class %d, expected %d", (unsigned)uc[i].cp, k, uc[i].cls);
    }
}

/* the textbook rule: scan every adjacent pair, merge the lowest rank (leftmost) */
static int naive_bpe(const gpt2rt_tokenizer *t, const unsigned char *s, size_t n, int32_t *out) {
    int m = (int)n;
    for (int i = 0; i < m; i++) out[i] = t->byte_id[s[i]];
    while (m > 1) {
        int best = -1, at = -1;
        for (int i = 0; i + 1 < m; i++) {
            const gpt2rt__tok_merge *g = gpt2rt__tok_find(t, (uint32_t)out[i], (uint32_t)out[i + 1]);
            if (g && (best < 0 || g->rank < best)) { best = g->rank; at = i; }
        }
        if (at < 0) break;
        out[at] = gpt2rt__tok_find(t, (uint32_t)out[at], (uint32_t)out[at + 1])->id;
        memmove(out + at + 1, out + at + 2, (size_t)(m - at - 2) * sizeof(int32_t));
        m--;
    }
    return m;
}

static void test_properties(gpt2rt_tokenizer *tok) {
    enum { N = 6000 };
    static unsigned char buf[4 * N + 8];
    static int32_t ref[4 * N];
    /* heap BPE == the textbook rule on pieces of letters, bytes, and repeats */
    int bpe_same = 0, trials = 300;
    for (int trial = 0; trial < trials; trial++) {
        size_t n = 2 + rnd(trial < 250 ? 40 : 2000);
        for (size_t i = 0; i < n; i++) {
            int mode = trial % 3;
            buf[i] = mode == 0 ? (unsigned char)("etaoinshrdlu "[rnd(13)]) : mode == 1 ? (unsigned char)rnd(256)
                                                                                       : (unsigned char)"ab"[rnd(2)];
        }
        int m = naive_bpe(tok, buf, n, ref);
        int64_t k = gpt2rt__tok_bpe(tok, buf, n);
        bpe_same += k == m && !memcmp(tok->ids, ref, (size_t)m * sizeof(int32_t));
    }
    CHECK(bpe_same == trials, "heap BPE == quadratic BPE on %d of %d pieces", bpe_same, trials);

    /* round trips: random code points of every length, random bytes, broken UTF-8 */
    int ok_utf8 = 0, ok_bytes = 0, rounds = 200;
    for (int trial = 0; trial < rounds; trial++) {
        size_t n = 0, target = 1 + rnd(N);
        while (n < target) {
            uint32_t k = rnd(10), cp;
            if (k < 3) cp = (uint32_t)" \t\n\r'sldt0"[rnd(11)];
            else if (k < 5) cp = 0x20 + rnd(0x60);
            else if (k < 7) cp = 0x80 + rnd(0x800 - 0x80);
            else if (k < 9) cp = 0x800 + rnd(0x10000 - 0x800);
            else cp = 0x10000 + rnd(0x100000);
            if (cp >= 0xD800 && cp < 0xE000) continue;
            n += put_utf8(buf + n, cp);
        }
        ok_utf8 += round_trip(tok, buf, n, (gpt2rt_tok_special)(trial % 2)) >= 0;
        for (size_t i = 0; i < target; i++) buf[i] = (unsigned char)rnd(256);
        ok_bytes += round_trip(tok, buf, target, GPT2RT_TOK_SPECIAL_TEXT) >= 0;
    }
    CHECK(ok_utf8 == rounds, "random valid UTF-8: %d of %d round trips", ok_utf8, rounds);
    CHECK(ok_bytes == rounds, "random bytes: %d of %d round trips", ok_bytes, rounds);
    const char *broken[] = {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80",
                            "ab\xe4\xb8", "\xe4\xb8 x", "'\xff'", " \x80 \x80", "\xef\xbb\xbf", "caf\xc3"};
    int ok_broken = 0;
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++)
        ok_broken += round_trip(tok, (const unsigned char *)broken[i], strlen(broken[i]), GPT2RT_TOK_SPECIAL_TEXT) >= 0;
    CHECK(ok_broken == (int)(sizeof broken / sizeof broken[0]), "broken UTF-8: %d round trips", ok_broken);

    /* a megabyte without a space: one piece, O(n log n), still exact */
    size_t big = 1 << 20;
    unsigned char *w = (unsigned char *)malloc(big);
    for (size_t i = 0; i < big; i++) w[i] = (unsigned char)"abcdefghij"[rnd(10)];
    double t0 = gpt2rt__now();
    int64_t k = round_trip(tok, w, big, GPT2RT_TOK_SPECIAL_TEXT);
    double dt = gpt2rt__now() - t0;
    CHECK(k > 0 && dt < 20, "1 MiB piece: %lld ids in %.2f s", (long long)k, dt);
    printf("    1 MiB single piece: %lld ids in %.2f s\n", (long long)k, dt);
    free(w);
}

static void test_shards(void) {
    int32_t toks[1001];
    for (int i = 0; i < 1001; i++) toks[i] = i * 61 % 50257;
    gpt2rt_shard *s, *l;
    CHECK(gpt2rt_shard_from_tokens(&s, toks, 1001) == GPT2RT_OK, "%s", gpt2rt_shard_last_error(s));
    CHECK(gpt2rt_shard_save(s, "build/tok_shard.bin") == GPT2RT_OK, "%s", gpt2rt_shard_last_error(s));
    CHECK(gpt2rt_shard_load(&l, "build/tok_shard.bin") == GPT2RT_OK, "%s", gpt2rt_shard_last_error(l));
    int same = gpt2rt_shard_count(l) == 1001;
    for (int i = 0; same && i < 1001; i++) same = gpt2rt_shard_tokens(l)[i] == toks[i];
    CHECK(same, "shard round trip");
    size_t len;
    unsigned char *f = read_all("build/tok_shard.bin", &len);
    int32_t h[3];
    memcpy(h, f, 12);
    CHECK(len == 1024 + 2002 && h[0] == 20240520 && h[1] == 1 && h[2] == 1001, "shard file: %zu bytes, header %d %d %d",
          len, h[0], h[1], h[2]);
    /* truncated, trailing, foreign, old version, too short */
    gpt2rt_shard *b;
    gpt2rt_result r = gpt2rt_shard_load_mem(&b, f, len - 3, "cut.bin");
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(b->error, "cut.bin: the header says 1001 tokens = 3026 bytes, the file has 3023 (truncated)"),
          "%s", b->error);
    gpt2rt_shard_free(b);
    r = gpt2rt_shard_load_mem(&b, f, 500, "head.bin");
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(b->error, "500 bytes, shorter than the 1024-byte header"), "%s", b->error);
    gpt2rt_shard_free(b);
    r = gpt2rt_shard_load(&b, "data/gpt2_merges.bin");
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(b->error, "not llm.c's token file magic 20240520"), "%s", b->error);
    gpt2rt_shard_free(b);
    h[1] = 2;
    memcpy(f + 4, &h[1], 4);
    r = gpt2rt_shard_load_mem(&b, f, len, "v2.bin");
    CHECK(r == GPT2RT_ERR_FORMAT && strstr(b->error, "version 2"), "%s", b->error);
    gpt2rt_shard_free(b);
    r = gpt2rt_shard_load(&b, "build/no_such_shard.bin");
    CHECK(r == GPT2RT_ERR_IO && strstr(b->error, "no_such_shard.bin"), "%s", b->error);
    gpt2rt_shard_free(b);
    toks[7] = 70000;
    r = gpt2rt_shard_from_tokens(&b, toks, 10);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && strstr(b->error, "tokens[7] = 70000"), "%s", b->error);
    gpt2rt_shard_free(b);
    free(f);

    /* windows: 1001 tokens, T = 10 -> 100 windows; B = 3 x 4 ranks = 12 a step,
       8 steps an epoch; ranks disjoint, an epoch never repeats a window */
    enum { B = 3, T = 10, R = 4 };
    int32_t in[B * T], tg[B * T], in2[B * T], tg2[B * T];
    int seen[100], dup = 0, shift_ok = 1, aligned = 1, determ = 1;
    memset(seen, 0, sizeof seen);
    for (int step = 0; step < 8; step++)
        for (int rank = 0; rank < R; rank++) {
            CHECK(gpt2rt_shard_batch(l, 7, step, rank, R, B, T, in, tg) == GPT2RT_OK, "%s", gpt2rt_shard_last_error(l));
            gpt2rt_shard_batch(l, 7, step, rank, R, B, T, in2, tg2);
            determ &= !memcmp(in, in2, sizeof in) && !memcmp(tg, tg2, sizeof tg);
            for (int bb = 0; bb < B; bb++) {
                int start = -1;
                for (int i = 0; i < 1001 && start < 0; i++) /* i*61 mod 50257 is distinct for i < 1001 */
                    if (in[bb * T] == i * 61 % 50257) start = i;
                aligned &= start >= 0 && start % T == 0;
                if (start < 0) continue;
                dup += seen[start / T]++;
                for (int t = 0; t < T; t++)
                    shift_ok &= in[bb * T + t] == (start + t) * 61 % 50257 && tg[bb * T + t] == (start + t + 1) * 61 % 50257;
            }
        }
    CHECK(determ && aligned && shift_ok, "windows: deterministic %d, aligned %d, targets shifted %d", determ, aligned, shift_ok);
    CHECK(dup == 0, "an epoch repeats %d windows across steps and ranks", dup);
    int covered = 0;
    for (int i = 0; i < 100; i++) covered += seen[i] == 1;
    CHECK(covered == 96, "an epoch of 8 steps x 12 covers %d windows, expected 96", covered);
    gpt2rt_shard_batch(l, 8, 0, 0, R, B, T, in2, tg2);
    CHECK(memcmp(in, in2, sizeof in) != 0, "another seed, the same windows");
    r = gpt2rt_shard_batch(l, 7, 0, 0, 1, 200, T, in, tg);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && strstr(l->error, "1001 tokens make 100 windows of T+1 = 11 tokens; a step needs B x n_ranks = 200 x 1 = 200"),
          "%s", l->error);
    r = gpt2rt_shard_batch(l, 7, 0, 4, 4, B, T, in, tg);
    CHECK(r == GPT2RT_ERR_INVALID_ARGUMENT && strstr(l->error, "rank = 4 in [0, n_ranks = 4)"), "%s", l->error);
    gpt2rt_shard_free(s);
    gpt2rt_shard_free(l);
}

int main(void) {
    gpt2rt_tokenizer *tok;
    gpt2rt_result r = gpt2rt_tok_load(&tok, "data");
    CHECK(r == GPT2RT_OK, "load data/: %s", gpt2rt_tok_last_error(tok));
    if (r != GPT2RT_OK) { gpt2rt_tok_free(tok); return harness_finish(); }
    uint64_t fnv = 0;
    long n = 0;
    test_fixture(tok, &fnv, &n);
    test_shakespeare(tok, fnv, n);
    test_shards_reencode(tok);
    test_openai_files(tok);
    test_loaders(tok);
    test_api(tok);
    test_properties(tok);
    test_shards();
    gpt2rt_tok_free(tok);
    return harness_finish();
}
