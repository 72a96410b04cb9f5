/* tokenizer/bpe.h - 5.1 Unicode classes; 5.2 Merges: (left, right) -> rank and merged id; 5.3 BPE of one piece
   may call: tokenizer/types.h */
#ifndef GPT2RT__SRC_TOKENIZER_BPE_H
#define GPT2RT__SRC_TOKENIZER_BPE_H
#include "types.h"

/* ==== 5.1 Unicode classes ==== */

static int gpt2rt__tok_ucd_decode(uint32_t *out) {
    int8_t val[128];
    const char *abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    memset(val, -1, sizeof val);
    for (int i = 0; i < 64; i++) val[(int)abc[i]] = (int8_t)i;
    uint32_t cp = 0;
    int n = 0;
    for (const char *p = gpt2rt__tok_ucd; *p && n < GPT2RT__TOK_UCD_COUNT;) {
        uint32_t v = 0;
        int shift = 0, d;
        do {
            if (!*p || shift > 25) return 0;
            d = val[(unsigned char)*p++ & 127];
            if (d < 0) return 0;
            v |= (uint32_t)(d & 31) << shift;
            shift += 5;
        } while (d & 32);
        cp += v >> 2;
        out[n++] = cp << 2 | (v & 3);
    }
    return n == GPT2RT__TOK_UCD_COUNT && cp < 0x110000;
}

static int gpt2rt__tok_ucd_class(const uint32_t *ucd, uint32_t cp) {
    /* the last boundary at or below cp */
    int lo = 0, hi = GPT2RT__TOK_UCD_COUNT; /* ucd[lo-1] <= cp < ucd[hi] in code points */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if ((ucd[mid] >> 2) <= cp) lo = mid + 1;
        else hi = mid;
    }
    return lo ? (int)(ucd[lo - 1] & 3) : (int)GPT2RT__TOK_OTHER;
}

/* the class of the code point at s[0] (n >= 1 bytes left) and its length in
   bytes; a byte that does not start valid UTF-8 is "other", 1 byte long */
static int gpt2rt__tok_class(const gpt2rt_tokenizer *t, const unsigned char *s, size_t n, int *w) {
    uint32_t c = s[0], cp;
    if (c < 0x80) { *w = 1; return t->cls_bmp[c]; }
    *w = 1;
    if (c >= 0xC2 && c <= 0xDF) {
        if (n < 2 || (s[1] & 0xC0) != 0x80) return GPT2RT__TOK_OTHER;
        *w = 2;
        return t->cls_bmp[(c & 31) << 6 | (s[1] & 63)];
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return GPT2RT__TOK_OTHER;
        if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0)) return GPT2RT__TOK_OTHER; /* overlong, surrogate */
        *w = 3;
        return t->cls_bmp[(c & 15) << 12 | (uint32_t)(s[1] & 63) << 6 | (s[2] & 63)];
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return GPT2RT__TOK_OTHER;
        if ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90)) return GPT2RT__TOK_OTHER; /* overlong, > U+10FFFF */
        *w = 4;
        cp = (c & 7) << 18 | (uint32_t)(s[1] & 63) << 12 | (uint32_t)(s[2] & 63) << 6 | (s[3] & 63);
        return gpt2rt__tok_ucd_class(t->ucd, cp);
    }
    return GPT2RT__TOK_OTHER;
}

/* the end of the piece that starts at s[i], s[0..n) one segment (no special token) */
static size_t gpt2rt__tok_piece_end(const gpt2rt_tokenizer *t, const unsigned char *s, size_t i, size_t n) {
    int w, k;
    if (s[i] == '\'' && i + 1 < n) { /* 's 't 're 've 'm 'll 'd, case-sensitive like GPT-2 */
        unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    size_t j = i;
    k = gpt2rt__tok_class(t, s + i, n - i, &w);
    if (s[i] == ' ' && i + 1 < n) { /* ' ?' before a letter, number or other run */
        int w2, k2 = gpt2rt__tok_class(t, s + i + 1, n - i - 1, &w2);
        if (k2 != GPT2RT__TOK_SPACE) { k = k2; w = w2; j = i + 1; }
    }
    if (k != GPT2RT__TOK_SPACE) {
        j += (size_t)w;
        while (j < n) {
            if (s[j] < 0x80) { /* ASCII without a call */
                if ((int)t->cls_bmp[s[j]] != k) break;
                j++;
                continue;
            }
            if (gpt2rt__tok_class(t, s + j, n - j, &w) != k) break;
            j += (size_t)w;
        }
        return j;
    }
    /* a whitespace run: \s+(?!\S) keeps its last code point for the next piece
       (where " x" takes the space) unless the run ends the text or is 1 long */
    size_t last = i;
    j = i + (size_t)w;
    while (j < n && gpt2rt__tok_class(t, s + j, n - j, &w) == GPT2RT__TOK_SPACE) { last = j; j += (size_t)w; }
    if (j == n || last == i) return j;
    return last;
}

/* ==== 5.2 Merges: (left, right) -> rank and merged id ==== */

static uint32_t gpt2rt__tok_pair_hash(uint32_t a, uint32_t b) {
    uint64_t h = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

static const gpt2rt__tok_merge *gpt2rt__tok_find(const gpt2rt_tokenizer *t, uint32_t a, uint32_t b) {
    for (uint32_t h = gpt2rt__tok_pair_hash(a, b) & t->mmask;; h = (h + 1) & t->mmask) {
        const gpt2rt__tok_merge *m = &t->mtab[h];
        if (m->left == a && m->right == b) return m;
        if (m->left == UINT32_MAX) return NULL;
    }
}

/* 1: added, 0: the pair is already there */
static int gpt2rt__tok_add_merge(gpt2rt_tokenizer *t, uint32_t a, uint32_t b, int32_t rank, int32_t id) {
    uint32_t h = gpt2rt__tok_pair_hash(a, b) & t->mmask;
    while (t->mtab[h].left != UINT32_MAX) {
        if (t->mtab[h].left == a && t->mtab[h].right == b) return 0;
        h = (h + 1) & t->mmask;
    }
    gpt2rt__tok_merge m = {a, b, rank, id};
    t->mtab[h] = m;
    t->merges[2 * rank] = (int32_t)a;
    t->merges[2 * rank + 1] = (int32_t)b;
    return 1;
}

/* ==== 5.3 BPE of one piece ==== */

static int gpt2rt__tok_scratch(gpt2rt_tokenizer *t, size_t n) {
    if (n <= t->cap) return 1;
    size_t c = n < 256 ? 256 : n + n / 2;
    if (c > SIZE_MAX / (3 * sizeof(uint64_t))) return 0;
    int32_t *ids = (int32_t *)realloc(t->ids, c * sizeof(int32_t));
    if (ids) t->ids = ids;
    int32_t *nx = (int32_t *)realloc(t->next, c * sizeof(int32_t));
    if (nx) t->next = nx;
    int32_t *pv = (int32_t *)realloc(t->prev, c * sizeof(int32_t));
    if (pv) t->prev = pv;
    uint64_t *hp = (uint64_t *)realloc(t->heap, 3 * c * sizeof(uint64_t));
    if (hp) t->heap = hp;
    if (!ids || !nx || !pv || !hp) return 0;
    t->cap = c;
    return 1;
}

static void gpt2rt__tok_heap_push(uint64_t *heap, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i && heap[(i - 1) / 2] > v) { heap[i] = heap[(i - 1) / 2]; i = (i - 1) / 2; }
    heap[i] = v;
}

static uint64_t gpt2rt__tok_heap_pop(uint64_t *heap, size_t *n) {
    uint64_t top = heap[0], v = heap[--*n];
    size_t i = 0, m = *n;
    while (2 * i + 1 < m) {
        size_t c = 2 * i + 1;
        if (c + 1 < m && heap[c + 1] < heap[c]) c++;
        if (heap[c] >= v) break;
        heap[i] = heap[c];
        i = c;
    }
    if (m) heap[i] = v;
    return top;
}

/* pushes the pair that starts at node i, if it merges */
static void gpt2rt__tok_push_pair(gpt2rt_tokenizer *t, size_t *hn, int32_t i) {
    if (i < 0 || t->next[i] < 0) return;
    const gpt2rt__tok_merge *m = gpt2rt__tok_find(t, (uint32_t)t->ids[i], (uint32_t)t->ids[t->next[i]]);
    if (m) gpt2rt__tok_heap_push(t->heap, hn, (uint64_t)m->rank << 32 | (uint32_t)i);
}

/* the ids of piece s[0..n), n >= 1, into t->ids (returns how many); -1: no memory.
   Node i starts as byte i; a merge keeps the left node, so node order is text order
   and (rank, left node) orders the heap as GPT-2 chooses: lowest rank, leftmost. */
static int64_t gpt2rt__tok_bpe(gpt2rt_tokenizer *t, const unsigned char *s, size_t n) {
    if (n > INT32_MAX || !gpt2rt__tok_scratch(t, n)) return -1;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        t->ids[i] = t->byte_id[s[i]];
        t->prev[i] = (int32_t)i - 1;
        t->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) gpt2rt__tok_push_pair(t, &hn, (int32_t)i);
    while (hn) {
        uint64_t top = gpt2rt__tok_heap_pop(t->heap, &hn);
        int32_t i = (int32_t)(uint32_t)top, rank = (int32_t)(top >> 32);
        /* stale entries: node i was merged away (ids[i] < 0) or its pair changed */
        if (t->ids[i] < 0 || t->next[i] < 0) continue;
        const gpt2rt__tok_merge *m = gpt2rt__tok_find(t, (uint32_t)t->ids[i], (uint32_t)t->ids[t->next[i]]);
        if (!m || m->rank != rank) continue;
        int32_t j = t->next[i];
        t->ids[i] = m->id;
        t->ids[j] = -1;
        t->next[i] = t->next[j];
        if (t->next[j] >= 0) t->prev[t->next[j]] = i;
        gpt2rt__tok_push_pair(t, &hn, t->prev[i]);
        gpt2rt__tok_push_pair(t, &hn, i);
    }
    int64_t k = 0;
    for (int32_t i = 0; i >= 0; i = t->next[i]) t->ids[k++] = t->ids[i];
    return k;
}

#endif /* GPT2RT__SRC_TOKENIZER_BPE_H */
