/* tokenizer/encode.h - 5.4 Loading, encoding, decoding
   may call: what its includes name (common/, formats/, tokenizer/) */
#ifndef GPT2RT__SRC_TOKENIZER_ENCODE_H
#define GPT2RT__SRC_TOKENIZER_ENCODE_H
#include "../common/platform.h"
#include "../common/errors.h"
#include "../formats/safetensors_read.h"
#include "common.h"
#include "types.h"
#include "bpe.h"

/* ==== 5.4 Loading, encoding, decoding ==== */

static gpt2rt_tokenizer *gpt2rt__tok_new(void) {
    gpt2rt_tokenizer *t = (gpt2rt_tokenizer *)calloc(1, sizeof(gpt2rt_tokenizer));
    if (t) t->eot = -1;
    return t;
}

/* tables every tokenizer needs; vocabulary size known */
static gpt2rt_result gpt2rt__tok_alloc(gpt2rt_tokenizer *t, int32_t n_vocab, int32_t n_merges, size_t n_bytes) {
    uint32_t slots = 64;
    while (slots < 2u * (uint32_t)n_merges + 2) slots *= 2;
    t->n_vocab = n_vocab;
    t->n_merges = n_merges;
    t->mmask = slots - 1;
    t->tok_off = (uint32_t *)calloc((size_t)n_vocab + 1, sizeof(uint32_t));
    t->tok_bytes = (unsigned char *)malloc(n_bytes ? n_bytes : 1);
    t->merges = (int32_t *)malloc(2 * (size_t)n_merges * sizeof(int32_t) + 1);
    t->mtab = (gpt2rt__tok_merge *)malloc(slots * sizeof(gpt2rt__tok_merge));
    t->cls_bmp = (uint8_t *)malloc(65536);
    t->ucd = (uint32_t *)malloc(GPT2RT__TOK_UCD_COUNT * sizeof(uint32_t));
    t->cache = (gpt2rt__tok_cache_entry *)calloc((size_t)1 << GPT2RT__TOK_CACHE_BITS, sizeof(gpt2rt__tok_cache_entry));
    if (!t->tok_off || !t->tok_bytes || !t->merges || !t->mtab || !t->cls_bmp || !t->ucd || !t->cache)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "tokenizer: out of memory for %d tokens and %d merges",
                               (int)n_vocab, (int)n_merges);
    for (uint32_t i = 0; i < slots; i++) t->mtab[i].left = UINT32_MAX;
    if (!gpt2rt__tok_ucd_decode(t->ucd))
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "tokenizer: the embedded Unicode table is corrupt");
    for (uint32_t cp = 0, k = 0; cp < 65536; cp++) {
        while (k < GPT2RT__TOK_UCD_COUNT && (t->ucd[k] >> 2) <= cp) k++;
        t->cls_bmp[cp] = (uint8_t)(k ? t->ucd[k - 1] & 3 : (uint32_t)GPT2RT__TOK_OTHER);
    }
    return GPT2RT_OK;
}

/* GPT-2's bytes_to_unicode: byte -> the code point that stands for it in the
   vocabulary files; bytes 33..126, 161..172, 174..255 stand for themselves, the
   rest get 256, 257, ... in byte order. The ids of the byte tokens follow the
   same order (the bytes that stand for themselves first). */
static void gpt2rt__tok_byte_order(uint32_t cp_of[256], int order[256]) {
    int k = 0, extra = 0;
    for (int b = 0; b < 256; b++)
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174)) { cp_of[b] = (uint32_t)b; order[k++] = b; }
    for (int b = 0; b < 256; b++)
        if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174))) { cp_of[b] = 256u + (uint32_t)extra++; order[k++] = b; }
}

static void gpt2rt__tok_finish(gpt2rt_tokenizer *t) {
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->tok_off[id + 1] - t->tok_off[id] == 1 && id != t->eot && t->byte_id[t->tok_bytes[t->tok_off[id]]] < 0)
            t->byte_id[t->tok_bytes[t->tok_off[id]]] = id;
}

/* the compact copy: "GPT2RTBP", u32 version 1, u32 merges M, u32 eot id (256 + M,
   or 0xFFFFFFFF: none), then M x (u16 left, u16 right); little endian */
static gpt2rt_result gpt2rt__tok_load_compact(gpt2rt_tokenizer *t, const unsigned char *p, size_t len) {
    if (len < 20 || memcmp(p, "GPT2RTBP", 8))
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: %zu bytes that do not start with "
                               "\"GPT2RTBP\" (not a file gpt2rt_tok_save wrote)", len);
    uint32_t ver, m, eot;
    memcpy(&ver, p + 8, 4);
    memcpy(&m, p + 12, 4);
    memcpy(&eot, p + 16, 4);
    if (ver != 1) return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: version %u, expected 1", ver);
    if (m > GPT2RT__TOK_MAX_VOCAB - 257)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: %u merges, at most %d fit uint16 ids",
                               m, GPT2RT__TOK_MAX_VOCAB - 257);
    if (len != 20 + 4 * (size_t)m)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: %u merges need %zu bytes, the file has %zu",
                               m, 20 + 4 * (size_t)m, len);
    if (eot != UINT32_MAX && eot != 256 + m)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: <|endoftext|> id %u, expected %u (after "
                               "the %u merged tokens) or none", eot, 256 + m, m);
    int32_t n_vocab = 256 + (int32_t)m + (eot != UINT32_MAX);
    /* token lengths first, to size the byte table */
    uint32_t *lens = (uint32_t *)malloc(((size_t)n_vocab + 1) * sizeof(uint32_t));
    if (!lens) return gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "compact vocabulary: out of memory");
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (i < 256) lens[i] = 1;
        else if (i == (int32_t)eot) lens[i] = (uint32_t)(sizeof(GPT2RT__TOK_EOT_TEXT) - 1);
        else {
            uint16_t a, b;
            memcpy(&a, p + 20 + 4 * (size_t)(i - 256), 2);
            memcpy(&b, p + 22 + 4 * (size_t)(i - 256), 2);
            if (a >= i || b >= i) { /* a merge can only join tokens that exist before it */
                free(lens);
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: merge %d joins tokens %u and %u, "
                                       "but only ids below %d exist before it", (int)(i - 256), a, b, (int)i);
            }
            lens[i] = lens[a] + lens[b];
            if (lens[i] > (1u << 20)) {
                uint32_t l = lens[i];
                free(lens);
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: merge %d makes a token of %u "
                                       "bytes (at most 2^20)", (int)(i - 256), l);
            }
        }
        total += lens[i];
    }
    gpt2rt_result r = total > UINT32_MAX ? gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: tokens of "
                                                           "%zu bytes in all (at most 2^32)", total)
                                         : gpt2rt__tok_alloc(t, n_vocab, (int32_t)m, total);
    if (r != GPT2RT_OK) { free(lens); return r; }
    uint32_t cp_of[256];
    int order[256];
    gpt2rt__tok_byte_order(cp_of, order);
    uint32_t off = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        t->tok_off[i] = off;
        if (i < 256) t->tok_bytes[off] = (unsigned char)order[i];
        else if (i == (int32_t)eot) { t->eot = i; memcpy(t->tok_bytes + off, GPT2RT__TOK_EOT_TEXT, lens[i]); }
        else {
            uint16_t a, b;
            memcpy(&a, p + 20 + 4 * (size_t)(i - 256), 2);
            memcpy(&b, p + 22 + 4 * (size_t)(i - 256), 2);
            memcpy(t->tok_bytes + off, t->tok_bytes + t->tok_off[a], lens[a]);
            memcpy(t->tok_bytes + off + lens[a], t->tok_bytes + t->tok_off[b], lens[b]);
            if (!gpt2rt__tok_add_merge(t, a, b, i - 256, i)) {
                free(lens);
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "compact vocabulary: merge %d repeats the pair "
                                       "(%u, %u)", (int)(i - 256), a, b);
            }
        }
        off += lens[i];
    }
    t->tok_off[n_vocab] = off;
    free(lens);
    gpt2rt__tok_finish(t);
    return GPT2RT_OK;
}

/* one code point of valid UTF-8 at s[0..n): its length, 0 if invalid */
static int gpt2rt__tok_utf8(const unsigned char *s, size_t n, uint32_t *cp) {
    uint32_t c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || n < (size_t)len) return 0;
    uint32_t v = c & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 63);
    }
    if ((len == 3 && (v < 0x800 || (v >= 0xD800 && v < 0xE000))) || (len == 4 && (v < 0x10000 || v > 0x10FFFF))) return 0;
    *cp = v;
    return len;
}

static uint32_t gpt2rt__tok_hash_bytes(const unsigned char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

/* what the vocabulary files give before the tables are built */
typedef struct gpt2rt__tok_files {
    unsigned char *bytes; /* every entry's bytes, back to back */
    size_t n_bytes, cap_bytes;
    uint32_t *off, *len;  /* per entry */
    int32_t *id;
    int32_t n, cap;
    int32_t *slot;        /* bytes -> entry, open addressing */
    uint32_t smask;
    int byte_of[324];     /* code point of the vocabulary alphabet -> byte, -1: not one */
} gpt2rt__tok_files;

static void gpt2rt__tok_files_free(gpt2rt__tok_files *f) {
    free(f->bytes); free(f->off); free(f->len); free(f->id); free(f->slot);
}

static int gpt2rt__tok_put_byte(gpt2rt__tok_files *f, unsigned char b) {
    if (f->n_bytes == f->cap_bytes) {
        size_t c = f->cap_bytes ? 2 * f->cap_bytes : 4096;
        unsigned char *nb = (unsigned char *)realloc(f->bytes, c);
        if (!nb) return 0;
        f->bytes = nb;
        f->cap_bytes = c;
    }
    f->bytes[f->n_bytes++] = b;
    return 1;
}

/* the entry with these bytes, -1: none */
static int32_t gpt2rt__tok_lookup(const gpt2rt__tok_files *f, const unsigned char *s, size_t n) {
    for (uint32_t h = gpt2rt__tok_hash_bytes(s, n) & f->smask;; h = (h + 1) & f->smask) {
        int32_t e = f->slot[h];
        if (e < 0) return -1;
        if (f->len[e] == n && !memcmp(f->bytes + f->off[e], s, n)) return e;
    }
}

/* encoder.json / vocab.json: {"token": id, ...} with ids 0..n-1, each once; read with
   4.1's JSON reader from a copy (it unescapes in place), each token's characters
   mapped through GPT-2's byte alphabet into f->bytes */
static gpt2rt_result gpt2rt__tok_parse_vocab(gpt2rt_tokenizer *t, gpt2rt__tok_files *f, const unsigned char *vj,
                                             size_t len) {
    char *text = (char *)malloc(len + 1);
    if (!text) return gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "vocabulary json: out of memory for %zu "
                                      "bytes", len);
    if (len) memcpy(text, vj, len);
    text[len] = 0;
    gpt2rt__json j;
    gpt2rt__json_init(&j, text, len, NULL, t->error, 512, NULL, "vocabulary json");
    gpt2rt_result r;
    const char *key;
    if ((r = gpt2rt__json_object_begin(&j)) != GPT2RT_OK) goto out;
    while (gpt2rt__json_object_next(&j, &key, &r)) {
        if (f->n == GPT2RT__TOK_MAX_VOCAB) { r = gpt2rt__json_fail(&j, "more than 65536 tokens (ids must fit uint16)"); goto out; }
        if (f->n == f->cap) {
            int32_t c = f->cap ? 2 * f->cap : 1024;
            uint32_t *o = (uint32_t *)realloc(f->off, (size_t)c * 4);
            if (o) f->off = o;
            uint32_t *l = (uint32_t *)realloc(f->len, (size_t)c * 4);
            if (l) f->len = l;
            int32_t *d = (int32_t *)realloc(f->id, (size_t)c * 4);
            if (d) f->id = d;
            if (!o || !l || !d) { r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "vocabulary json: out of memory"); goto out; }
            f->cap = c;
        }
        size_t start = f->n_bytes;
        for (const unsigned char *q = (const unsigned char *)key; *q;) { /* valid UTF-8: the reader checked it */
            uint32_t cp = *q;
            int w = cp < 0x80 ? 1 : gpt2rt__tok_utf8(q, 4, &cp);
            if (cp >= 324 || f->byte_of[cp] < 0) {
                r = gpt2rt__json_failf(&j, "entry %d: U+%04X is a character outside GPT-2's 256 byte characters",
                                       (int)f->n, (unsigned)cp);
                goto out;
            }
            if (!gpt2rt__tok_put_byte(f, (unsigned char)f->byte_of[cp])) {
                r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "vocabulary json: out of memory");
                goto out;
            }
            q += w;
        }
        if (f->n_bytes == start) { r = gpt2rt__json_failf(&j, "entry %d: an empty token", (int)f->n); goto out; }
        if (f->n_bytes - start > (1u << 20)) {
            r = gpt2rt__json_failf(&j, "entry %d: a token longer than 2^20 bytes", (int)f->n);
            goto out;
        }
        int64_t v;
        if ((r = gpt2rt__json_int(&j, 0, INT64_MAX, &v)) != GPT2RT_OK) goto out;
        f->off[f->n] = (uint32_t)start;
        f->len[f->n] = (uint32_t)(f->n_bytes - start);
        f->id[f->n++] = v < GPT2RT__TOK_MAX_VOCAB ? (int32_t)v : GPT2RT__TOK_MAX_VOCAB;
    }
    if (r == GPT2RT_OK) r = gpt2rt__json_end(&j);
out:
    free(text);
    return r;
}

/* vocab.bpe / merges.txt: an optional "#version" line, then one "left right" per
   line in the alphabet of the vocabulary, rank = line order */
static gpt2rt_result gpt2rt__tok_load_json(gpt2rt_tokenizer *t, const unsigned char *vj, size_t vlen,
                                           const unsigned char *mg, size_t mlen) {
    gpt2rt__tok_files f;
    memset(&f, 0, sizeof f);
    uint32_t cp_of[256];
    int order[256];
    gpt2rt__tok_byte_order(cp_of, order);
    for (int i = 0; i < 324; i++) f.byte_of[i] = -1;
    for (int b = 0; b < 256; b++) f.byte_of[cp_of[b]] = b;
    gpt2rt_result r = gpt2rt__tok_parse_vocab(t, &f, vj, vlen);
    int32_t n = f.n, *by_id = NULL, n_merges = 0, rank = 0, line = 0;
    unsigned char *cat = NULL;
    uint32_t slots = 64, o = 0;
    size_t first = 0;
    if (r != GPT2RT_OK) goto out;
    /* ids dense and unique; bytes unique */
    by_id = (int32_t *)malloc(((size_t)n + 1) * sizeof(int32_t));
    while (slots < 2u * (uint32_t)n) slots *= 2;
    f.slot = (int32_t *)malloc(slots * sizeof(int32_t));
    f.smask = slots - 1;
    if (!by_id || !f.slot) { r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "vocabulary: out of memory"); goto out; }
    for (int32_t i = 0; i < n; i++) by_id[i] = -1;
    for (uint32_t i = 0; i < slots; i++) f.slot[i] = -1;
    for (int32_t e = 0; e < n; e++) {
        if (f.id[e] >= n) {
            r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "vocabulary json entry %d: id %d is not below the %d "
                                "entries (ids must be 0..%d, each once)", (int)e, (int)f.id[e], (int)n, (int)n - 1);
            goto out;
        }
        if (by_id[f.id[e]] >= 0) {
            r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "vocabulary json entries %d and %d both have id %d",
                                (int)by_id[f.id[e]], (int)e, (int)f.id[e]);
            goto out;
        }
        by_id[f.id[e]] = e;
        int32_t other = gpt2rt__tok_lookup(&f, f.bytes + f.off[e], f.len[e]);
        if (other >= 0) {
            r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "vocabulary json entries %d and %d (ids %d and %d) are the "
                                "same bytes", (int)other, (int)e, (int)f.id[other], (int)f.id[e]);
            goto out;
        }
        uint32_t h = gpt2rt__tok_hash_bytes(f.bytes + f.off[e], f.len[e]) & f.smask;
        while (f.slot[h] >= 0) h = (h + 1) & f.smask;
        f.slot[h] = e;
    }
    /* count the merges */
    if (mlen >= 8 && !memcmp(mg, "#version", 8)) {
        while (first < mlen && mg[first] != '\n') first++;
    }
    for (size_t i = first; i < mlen;) {
        size_t e = i;
        while (e < mlen && mg[e] != '\n') e++;
        size_t le = e > i && mg[e - 1] == '\r' ? e - 1 : e;
        if (le > i) n_merges++;
        i = e + 1;
    }
    if (n_merges > n) {
        r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "merges: %d merges for %d tokens (each merge makes a token)",
                            (int)n_merges, (int)n);
        goto out;
    }
    if ((r = gpt2rt__tok_alloc(t, n, n_merges, f.n_bytes)) != GPT2RT_OK) goto out;
    for (int32_t id = 0; id < n; id++) {
        int32_t e = by_id[id];
        t->tok_off[id] = o;
        memcpy(t->tok_bytes + o, f.bytes + f.off[e], f.len[e]);
        o += f.len[e];
        if (f.len[e] == sizeof(GPT2RT__TOK_EOT_TEXT) - 1 && !memcmp(f.bytes + f.off[e], GPT2RT__TOK_EOT_TEXT, f.len[e]))
            t->eot = id;
    }
    t->tok_off[n] = o;
    /* the merges themselves */
    line = first ? 1 : 0;
    for (size_t i = first ? first + 1 : 0; i < mlen && rank < n_merges; line++) {
        size_t e = i;
        while (e < mlen && mg[e] != '\n') e++;
        size_t le = e > i && mg[e - 1] == '\r' ? e - 1 : e;
        if (le > i) {
            int32_t part[2] = {-1, -1}, ids[3];
            size_t sp = i;
            while (sp < le && mg[sp] != ' ') sp++;
            const char *why = NULL;
            uint32_t bad_cp = UINT32_MAX;
            for (int k = 0; k < 2 && !why; k++) {
                const unsigned char *q = mg + (k ? sp + 1 : i), *qe = mg + (k ? le : sp);
                size_t start = f.n_bytes;
                if (k && sp >= le) { why = "expected two tokens separated by one space"; break; }
                while (q < qe && !why) {
                    uint32_t cp;
                    int w = gpt2rt__tok_utf8(q, (size_t)(qe - q), &cp);
                    if (!w) why = "invalid UTF-8";
                    else if (cp >= 324 || f.byte_of[cp] < 0) { why = "a character outside GPT-2's 256 byte characters"; bad_cp = cp; }
                    else if (!gpt2rt__tok_put_byte(&f, (unsigned char)f.byte_of[cp])) why = "out of memory";
                    q += w;
                }
                if (!why && f.n_bytes == start) why = "expected two tokens separated by one space";
                if (!why && (part[k] = gpt2rt__tok_lookup(&f, f.bytes + start, f.n_bytes - start)) < 0)
                    why = k ? "its second token is not in the vocabulary" : "its first token is not in the vocabulary";
                f.n_bytes = start;
            }
            if (!why) {
                ids[0] = f.id[part[0]];
                ids[1] = f.id[part[1]];
                size_t la = f.len[part[0]], lb = f.len[part[1]];
                cat = (unsigned char *)realloc(cat, la + lb);
                if (!cat) why = "out of memory";
                else {
                    memcpy(cat, f.bytes + f.off[part[0]], la);
                    memcpy(cat + la, f.bytes + f.off[part[1]], lb);
                    int32_t res = gpt2rt__tok_lookup(&f, cat, la + lb);
                    if (res < 0) why = "the merged token is not in the vocabulary";
                    else if (!gpt2rt__tok_add_merge(t, (uint32_t)ids[0], (uint32_t)ids[1], rank, f.id[res]))
                        why = "it repeats an earlier merge";
                }
            }
            if (why) {
                r = !strcmp(why, "out of memory")
                        ? gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "merges: out of memory")
                    : bad_cp != UINT32_MAX ? gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "merges line %d: U+%04X is %s", (int)line + 1,
                                               (unsigned)bad_cp, why)
                             : gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "merges line %d: %s", (int)line + 1, why);
                goto out;
            }
            rank++;
        }
        i = e + 1;
    }
    gpt2rt__tok_finish(t);
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0) {
            r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "vocabulary: byte 0x%02X has no token of its own (U+%04X), "
                                "so some text could not be encoded", b, (unsigned)cp_of[b]);
            goto out;
        }
    {   /* Every token but the 256 bytes and <|endoftext|> is made by one merge. A merges
           file cut at a line boundary parses line by line, and would leave tokens no
           merge makes: encoding then gives other ids than GPT-2 (more of them). */
        int32_t special = t->eot >= 0, want = n - 256 - special;
        if (n_merges != want) {
            r = gpt2rt__tok_msg(t->error, GPT2RT_ERR_FORMAT, "merges: %d merges, but the vocabulary's %d tokens need %d "
                                "(%d - 256 byte tokens - %d special): the merges file is %s", (int)n_merges, (int)n,
                                (int)want, (int)n, (int)special, n_merges < want ? "cut short (truncated?) or "
                                "another vocabulary's" : "another vocabulary's");
            goto out;
        }
    }
out:
    free(by_id);
    free(cat);
    gpt2rt__tok_files_free(&f);
    return r;
}

/* write to path.tmp, then rename: never a half-written file at path */
static gpt2rt_result gpt2rt__tok_write_file(const char *path, const void *a, size_t alen, const void *b, size_t blen,
                                            char *error) {
    size_t pl = strlen(path);
    char *tmp = (char *)malloc(pl + 5);
    if (!tmp) return gpt2rt__tok_msg(error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".tmp", 5);
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        gpt2rt_result r = gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: %s", tmp, strerror(errno));
        free(tmp);
        return r;
    }
    int ok = fwrite(a, 1, alen, fp) == alen && (!blen || fwrite(b, 1, blen, fp) == blen);
    ok = (fclose(fp) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        gpt2rt_result r = gpt2rt__tok_msg(error, GPT2RT_ERR_IO, "%s: %s", ok ? path : tmp, strerror(errno));
        remove(tmp);
        free(tmp);
        return r;
    }
    free(tmp);
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__tok_done(gpt2rt_tokenizer **tok, gpt2rt_tokenizer *t, gpt2rt_result r) {
    if (r != GPT2RT_OK) {
        /* keep only the message */
        free(t->tok_off); free(t->tok_bytes); free(t->merges); free(t->mtab); free(t->cls_bmp); free(t->ucd);
        free(t->cache);
        t->tok_off = NULL; t->tok_bytes = NULL; t->merges = NULL; t->mtab = NULL; t->cls_bmp = NULL; t->ucd = NULL;
        t->cache = NULL;
        t->failed = 1;
    }
    *tok = t;
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_load_mem(gpt2rt_tokenizer **tok, const void *vocab_json, size_t vocab_len,
                                             const void *merges, size_t merges_len) {
    if (!tok) return GPT2RT_ERR_INVALID_ARGUMENT;
    gpt2rt_tokenizer *t = gpt2rt__tok_new();
    *tok = t;
    if (!t) return GPT2RT_ERR_OUT_OF_MEMORY;
    if (!merges || (vocab_json == NULL && vocab_len))
        return gpt2rt__tok_done(tok, t, gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT,
                                                        "gpt2rt_tok_load_mem: merges is NULL, or vocab_json is NULL with "
                                                        "vocab_len = %zu", vocab_len));
    gpt2rt_result r = vocab_json ? gpt2rt__tok_load_json(t, (const unsigned char *)vocab_json, vocab_len,
                                                         (const unsigned char *)merges, merges_len)
                                 : gpt2rt__tok_load_compact(t, (const unsigned char *)merges, merges_len);
    return gpt2rt__tok_done(tok, t, r);
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_load_files(gpt2rt_tokenizer **tok, const char *vocab_json, const char *merges) {
    if (!tok) return GPT2RT_ERR_INVALID_ARGUMENT;
    unsigned char *vb = NULL, *mb = NULL;
    size_t vl = 0, ml = 0;
    char error[512];
    gpt2rt_result r = merges ? GPT2RT_OK : gpt2rt__tok_msg(error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_load_files: merges is NULL");
    if (r == GPT2RT_OK && vocab_json) r = gpt2rt__tok_read_file(vocab_json, &vb, &vl, error);
    if (r == GPT2RT_OK) r = gpt2rt__tok_read_file(merges, &mb, &ml, error);
    if (r == GPT2RT_OK) {
        r = gpt2rt_tok_load_mem(tok, vb, vl, mb, ml);
        if (r != GPT2RT_OK && *tok) { /* name the files */
            char msg[512];
            if (vocab_json) gpt2rt__tok_msg(msg, r, "%s + %s: %s", vocab_json, merges, (*tok)->error);
            else gpt2rt__tok_msg(msg, r, "%s: %s", merges, (*tok)->error);
            memcpy((*tok)->error, msg, sizeof msg);
        }
    } else {
        gpt2rt_tokenizer *t = gpt2rt__tok_new();
        *tok = t;
        if (t) { memcpy(t->error, error, sizeof error); t->failed = 1; }
    }
    free(vb);
    free(mb);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_load(gpt2rt_tokenizer **tok, const char *dir) {
    if (!tok) return GPT2RT_ERR_INVALID_ARGUMENT;
    static const char *names[3][2] = {{NULL, "gpt2_merges.bin"}, {"encoder.json", "vocab.bpe"}, {"vocab.json", "merges.txt"}};
    char p[2][1024];
    if (!dir) dir = ".";
    struct stat dst;
    int missing = stat(dir, &dst) != 0, e = errno;
    if (missing || !GPT2RT__IS_DIR(dst.st_mode)) {
        gpt2rt_tokenizer *t = gpt2rt__tok_new();
        *tok = t;
        if (!t) return GPT2RT_ERR_OUT_OF_MEMORY;
        t->failed = 1;
        if (missing)
            return gpt2rt__tok_msg(t->error, GPT2RT_ERR_IO, "%s: %s (gpt2rt_tok_load takes the directory that holds "
                                   "the vocabulary)", dir, e == ENOENT ? "no such directory" : strerror(e));
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_IO, "%s: not a directory (gpt2rt_tok_load takes the directory "
                               "that holds the vocabulary; gpt2rt_tok_load_files takes the files)", dir);
    }
    for (int i = 0; i < 3; i++) {
        struct stat st;
        snprintf(p[1], sizeof p[1], "%s/%s", dir, names[i][1]);
        if (names[i][0]) snprintf(p[0], sizeof p[0], "%s/%s", dir, names[i][0]);
        if (stat(p[1], &st) != 0 || (names[i][0] && stat(p[0], &st) != 0)) continue;
        return gpt2rt_tok_load_files(tok, names[i][0] ? p[0] : NULL, p[1]);
    }
    gpt2rt_tokenizer *t = gpt2rt__tok_new();
    *tok = t;
    if (!t) return GPT2RT_ERR_OUT_OF_MEMORY;
    t->failed = 1;
    return gpt2rt__tok_msg(t->error, GPT2RT_ERR_IO, "%s: no GPT-2 vocabulary here (looked for gpt2_merges.bin, "
                           "encoder.json + vocab.bpe, vocab.json + merges.txt)", dir);
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_save(gpt2rt_tokenizer *t, const char *path) {
    if (!t) return GPT2RT_ERR_INVALID_ARGUMENT;
    GPT2RT__CLEAR_ERROR(t);
    if (t->failed) return GPT2RT_ERR_STATE; /* the message stays the load's: why it failed */
    if (!path) return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_save: path is NULL");
    /* the compact form holds only what follows from the merges: check that it does */
    uint32_t cp_of[256];
    int order[256];
    gpt2rt__tok_byte_order(cp_of, order);
    int ok = t->n_vocab == 256 + t->n_merges + (t->eot >= 0) && (t->eot < 0 || t->eot == 256 + t->n_merges) &&
             t->n_vocab <= GPT2RT__TOK_MAX_VOCAB;
    for (int i = 0; ok && i < 256; i++) ok = t->byte_id[order[i]] == i;
    for (int32_t r = 0; ok && r < t->n_merges; r++) {
        const gpt2rt__tok_merge *m = gpt2rt__tok_find(t, (uint32_t)t->merges[2 * r], (uint32_t)t->merges[2 * r + 1]);
        ok = m && m->id == 256 + r && t->merges[2 * r] < 256 + r && t->merges[2 * r + 1] < 256 + r;
    }
    if (!ok)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: this vocabulary's ids do not follow from its "
                               "merges (byte tokens in GPT-2's order, merge i -> 256 + i, then <|endoftext|>), so the "
                               "compact form cannot hold it", path);
    size_t n = 20 + 4 * (size_t)t->n_merges;
    unsigned char *buf = (unsigned char *)malloc(n);
    if (!buf) return gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    uint32_t head[3] = {1, (uint32_t)t->n_merges, t->eot >= 0 ? (uint32_t)t->eot : UINT32_MAX};
    memcpy(buf, "GPT2RTBP", 8);
    memcpy(buf + 8, head, 12);
    for (int32_t r = 0; r < t->n_merges; r++) {
        uint16_t ab[2] = {(uint16_t)t->merges[2 * r], (uint16_t)t->merges[2 * r + 1]};
        memcpy(buf + 20 + 4 * (size_t)r, ab, 4);
    }
    gpt2rt_result res = gpt2rt__tok_write_file(path, buf, n, NULL, 0, t->error);
    free(buf);
    return res;
}

GPT2RT_DEF void gpt2rt_tok_free(gpt2rt_tokenizer *t) {
    if (!t) return;
    gpt2rt__tok_done(&t, t, GPT2RT_ERR_STATE);
    free(t->ids); free(t->next); free(t->prev); free(t->heap);
    free(t);
}

GPT2RT_DEF const char *gpt2rt_tok_last_error(const gpt2rt_tokenizer *t) {
    return t ? t->error : "gpt2rt_tok: no tokenizer (out of memory)";
}

GPT2RT_DEF int32_t gpt2rt_tok_vocab_size(const gpt2rt_tokenizer *t) { return t && !t->failed ? t->n_vocab : 0; }
GPT2RT_DEF int32_t gpt2rt_tok_eot(const gpt2rt_tokenizer *t) { return t && !t->failed ? t->eot : -1; }

GPT2RT_DEF const char *gpt2rt_tok_token(const gpt2rt_tokenizer *t, int32_t id, size_t *len) {
    if (!t || t->failed || id < 0 || id >= t->n_vocab) { if (len) *len = 0; return NULL; }
    if (len) *len = t->tok_off[id + 1] - t->tok_off[id];
    return (const char *)t->tok_bytes + t->tok_off[id];
}

/* the ids of one piece, through the cache; -1: out of memory */
static int gpt2rt__tok_piece(gpt2rt_tokenizer *t, const unsigned char *s, size_t n, int32_t *ids, size_t cap, size_t *k) {
    if (n == 1) {
        if (*k < cap) ids[*k] = t->byte_id[s[0]];
        (*k)++;
        return 0;
    }
    gpt2rt__tok_cache_entry *e = NULL;
    uint32_t h = 0;
    if (n <= GPT2RT__TOK_CACHE_KEY) {
        h = gpt2rt__tok_hash_bytes(s, n);
        e = &t->cache[h >> (32 - GPT2RT__TOK_CACHE_BITS)];
        if (e->hash == h && e->len == n && !memcmp(e->key, s, n)) {
            for (int i = 0; i < e->n; i++, (*k)++)
                if (*k < cap) ids[*k] = e->ids[i];
            return 0;
        }
    }
    int64_t m = gpt2rt__tok_bpe(t, s, n);
    if (m < 0) return -1;
    for (int64_t i = 0; i < m; i++, (*k)++)
        if (*k < cap) ids[*k] = t->ids[i];
    if (e && m <= GPT2RT__TOK_CACHE_IDS) {
        e->hash = h;
        e->len = (uint8_t)n;
        e->n = (uint8_t)m;
        memcpy(e->key, s, n);
        for (int64_t i = 0; i < m; i++) e->ids[i] = (uint16_t)t->ids[i];
    }
    return 0;
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_encode(gpt2rt_tokenizer *t, const void *text, size_t len,
                                           gpt2rt_tok_special special, int32_t *ids, size_t cap, size_t *n_ids) {
    if (n_ids) *n_ids = 0;
    if (!t) return GPT2RT_ERR_INVALID_ARGUMENT;
    GPT2RT__CLEAR_ERROR(t);
    if (t->failed) return GPT2RT_ERR_STATE;
    if (!n_ids)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_encode: n_ids is NULL (it receives "
                               "the id count)");
    if (!text && len)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_encode: text is NULL with len = %zu",
                               len);
    if (!ids && cap)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_encode: ids is NULL with cap = %zu",
                               cap);
    if ((unsigned)special > GPT2RT_TOK_SPECIAL_REFUSE)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_encode: special = %d is not a "
                               "gpt2rt_tok_special", (int)special);
    const unsigned char *s = (const unsigned char *)text;
    const size_t eot_len = sizeof(GPT2RT__TOK_EOT_TEXT) - 1;
    size_t k = 0, seg = 0;
    while (seg < len) {
        /* the segment up to the next <|endoftext|> (when it is special): tiktoken
           and Hugging Face cut the text there before pre-tokenising */
        size_t end = len, after = len;
        if (special != GPT2RT_TOK_SPECIAL_TEXT) {
            for (const unsigned char *q = s + seg; (q = (const unsigned char *)memchr(q, '<', (size_t)(s + len - q))) != NULL; q++)
                if ((size_t)(s + len - q) >= eot_len && !memcmp(q, GPT2RT__TOK_EOT_TEXT, eot_len)) {
                    end = (size_t)(q - s);
                    after = end + eot_len;
                    break;
                }
            if (end < len && special == GPT2RT_TOK_SPECIAL_REFUSE)
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "text byte %zu: \"<|endoftext|>\" is refused "
                                       "(GPT2RT_TOK_SPECIAL_ALLOW encodes it as id %d, _TEXT as ordinary text)", end, (int)t->eot);
            if (end < len && t->eot < 0)
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "text byte %zu: \"<|endoftext|>\" is allowed, "
                                       "but this vocabulary has no such token", end);
        }
        for (size_t i = seg; i < end;) {
            size_t j = gpt2rt__tok_piece_end(t, s + seg, i - seg, end - seg) + seg;
            if (gpt2rt__tok_piece(t, s + i, j - i, ids, cap, &k) < 0)
                return gpt2rt__tok_msg(t->error, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_tok_encode: out of memory for a piece "
                                       "of %zu bytes at text byte %zu", j - i, i);
            i = j;
        }
        if (after > end) {
            if (k < cap) ids[k] = t->eot;
            k++;
        }
        seg = after;
    }
    *n_ids = k;
    if (k > cap)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_encode: %zu bytes need %zu ids, "
                               "cap = %zu", len, k, cap);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_tok_decode(gpt2rt_tokenizer *t, const int32_t *ids, size_t n, void *out, size_t cap,
                                           size_t *n_bytes) {
    if (n_bytes) *n_bytes = 0;
    if (!t) return GPT2RT_ERR_INVALID_ARGUMENT;
    GPT2RT__CLEAR_ERROR(t);
    if (t->failed) return GPT2RT_ERR_STATE;
    if (!n_bytes)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_decode: n_bytes is NULL (it receives "
                               "the length)");
    if (!ids && n)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_decode: ids is NULL with n = %zu", n);
    if (!out && cap)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_decode: out is NULL with cap = %zu",
                               cap);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_decode: ids[%zu] = %d is not in "
                                   "[0, %d)", i, (int)ids[i], (int)t->n_vocab);
        size_t l = t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
        if (o + l <= cap) memcpy((unsigned char *)out + o, t->tok_bytes + t->tok_off[ids[i]], l);
        o += l;
    }
    *n_bytes = o;
    if (o > cap)
        return gpt2rt__tok_msg(t->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_tok_decode: %zu ids make %zu bytes, "
                               "cap = %zu", n, o, cap);
    return GPT2RT_OK;
}

#endif /* GPT2RT__SRC_TOKENIZER_ENCODE_H */
