/* tokenizer/shards.h - 5.5 llm.c token shards
   may call: common/errors.h, tokenizer/common.h, tokenizer/types.h, tokenizer/encode.h */
#ifndef GPT2RT__SRC_TOKENIZER_SHARDS_H
#define GPT2RT__SRC_TOKENIZER_SHARDS_H
#include "../common/errors.h"
#include "common.h"
#include "types.h"
#include "encode.h"

/* ==== 5.5 llm.c token shards ==== */

static gpt2rt_result gpt2rt__shard_done(gpt2rt_shard **out, gpt2rt_shard *s, gpt2rt_result r) {
    if (r != GPT2RT_OK) {
        free(s->tokens);
        s->tokens = NULL;
        s->n = 0;
        s->failed = 1;
    }
    *out = s;
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_shard_load_mem(gpt2rt_shard **out, const void *data, size_t len, const char *name) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    gpt2rt_shard *s = (gpt2rt_shard *)calloc(1, sizeof(gpt2rt_shard));
    *out = s;
    if (!s) return GPT2RT_ERR_OUT_OF_MEMORY;
    const unsigned char *p = (const unsigned char *)data;
    const size_t hb = GPT2RT__SHARD_HEADER * 4;
    if (!name) name = "token shard";
    if (!p && len) return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "%s: data is NULL", name));
    if (len < 12)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: %zu bytes, shorter than the "
                                                          "%zu-byte header of an llm.c token file (truncated?)", name, len, hb));
    int32_t h[3];
    memcpy(h, p, 12);
    if (h[0] != GPT2RT__SHARD_MAGIC)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: magic %d, not llm.c's token "
                                                          "file magic %d (not a token file?)", name, (int)h[0], GPT2RT__SHARD_MAGIC));
    if (h[1] != 1)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: version %d; only version 1 "
                                                          "(uint16 tokens) is read", name, (int)h[1]));
    if (len < hb)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: %zu bytes, shorter than the "
                                                          "%zu-byte header (truncated)", name, len, hb));
    if (h[2] < 0)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: header token count %d is "
                                                          "negative", name, (int)h[2]));
    size_t want = hb + 2 * (size_t)h[2];
    if (len != want)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_FORMAT, "%s: the header says %d tokens = "
                                                          "%zu bytes, the file has %zu (%s)", name, (int)h[2], want, len,
                                                          len < want ? "truncated" : "trailing bytes"));
    s->n = h[2];
    s->tokens = (uint16_t *)malloc(s->n ? 2 * (size_t)s->n : 2);
    if (!s->tokens)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "%s: out of memory for %d "
                                                          "tokens", name, (int)h[2]));
    memcpy(s->tokens, p + hb, 2 * (size_t)s->n);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_shard_load(gpt2rt_shard **out, const char *path) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    unsigned char *buf;
    size_t len;
    char error[512];
    gpt2rt_result r = path ? gpt2rt__tok_read_file(path, &buf, &len, error)
                           : gpt2rt__tok_msg(error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_load: path is NULL");
    if (r != GPT2RT_OK) {
        gpt2rt_shard *s = (gpt2rt_shard *)calloc(1, sizeof(gpt2rt_shard));
        *out = s;
        if (s) { memcpy(s->error, error, sizeof error); s->failed = 1; }
        return r;
    }
    r = gpt2rt_shard_load_mem(out, buf, len, path);
    free(buf);
    return r;
}

GPT2RT_DEF gpt2rt_result gpt2rt_shard_from_tokens(gpt2rt_shard **out, const int32_t *tokens, int64_t n) {
    if (!out) return GPT2RT_ERR_INVALID_ARGUMENT;
    gpt2rt_shard *s = (gpt2rt_shard *)calloc(1, sizeof(gpt2rt_shard));
    *out = s;
    if (!s) return GPT2RT_ERR_OUT_OF_MEMORY;
    if (n < 0 || n > INT32_MAX || (!tokens && n))
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_from_tokens: "
                                                          "n = %lld must lie in [0, 2^31) (the header's int32 count)", (long long)n));
    s->tokens = (uint16_t *)malloc(n ? 2 * (size_t)n : 2);
    if (!s->tokens)
        return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_OUT_OF_MEMORY, "gpt2rt_shard_from_tokens: out "
                                                          "of memory for %lld tokens", (long long)n));
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] > 65535)
            return gpt2rt__shard_done(out, s, gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_from_tokens: "
                                                              "tokens[%lld] = %d does not fit uint16", (long long)i, (int)tokens[i]));
        s->tokens[i] = (uint16_t)tokens[i];
    }
    s->n = n;
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_shard_save(gpt2rt_shard *s, const char *path) {
    if (!s) return GPT2RT_ERR_INVALID_ARGUMENT;
    GPT2RT__CLEAR_ERROR(s);
    if (s->failed) return GPT2RT_ERR_STATE; /* the message stays the load's */
    if (!path) return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_save: path is NULL");
    int32_t h[GPT2RT__SHARD_HEADER];
    memset(h, 0, sizeof h);
    h[0] = GPT2RT__SHARD_MAGIC;
    h[1] = 1;
    h[2] = (int32_t)s->n;
    return gpt2rt__tok_write_file(path, h, sizeof h, s->tokens, 2 * (size_t)s->n, s->error);
}

GPT2RT_DEF void gpt2rt_shard_free(gpt2rt_shard *s) {
    if (!s) return;
    free(s->tokens);
    free(s);
}

GPT2RT_DEF const char *gpt2rt_shard_last_error(const gpt2rt_shard *s) {
    return s ? s->error : "gpt2rt_shard: no shard (out of memory)";
}
GPT2RT_DEF int64_t gpt2rt_shard_count(const gpt2rt_shard *s) { return s && !s->failed ? s->n : 0; }
GPT2RT_DEF const uint16_t *gpt2rt_shard_tokens(const gpt2rt_shard *s) { return s && !s->failed ? s->tokens : NULL; }


GPT2RT_DEF gpt2rt_result gpt2rt_shard_batch(gpt2rt_shard *s, uint64_t seed, int64_t step, int rank, int n_ranks, int B,
                                            int T, int32_t *inputs, int32_t *targets) {
    if (!s) return GPT2RT_ERR_INVALID_ARGUMENT;
    GPT2RT__CLEAR_ERROR(s);
    if (s->failed) return GPT2RT_ERR_STATE;
    if (!inputs || !targets)
        return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_batch: %s is NULL",
                               !inputs ? "inputs" : "targets");
    if (B < 1 || T < 1 || n_ranks < 1 || rank < 0 || rank >= n_ranks || step < 0)
        return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_batch: B = %d and T = %d must be >= 1, "
                               "rank = %d in [0, n_ranks = %d), step = %lld >= 0", B, T, rank, n_ranks, (long long)step);
    int64_t windows = s->n > 0 ? (s->n - 1) / T : 0, per_step = (int64_t)B * n_ranks;
    if (windows < per_step)
        return gpt2rt__tok_msg(s->error, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_shard_batch: %lld tokens make %lld windows of "
                               "T+1 = %lld tokens; a step needs B x n_ranks = %d x %d = %lld", (long long)s->n,
                               (long long)windows, (long long)T + 1, B, n_ranks, (long long)per_step);
    /* whole steps per epoch: the windows left over are skipped in that epoch */
    int64_t steps_per_epoch = windows / per_step, epoch = step / steps_per_epoch;
    uint64_t st = seed ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ull), key = gpt2rt__rng_next(&st);
    for (int b = 0; b < B; b++) {
        int64_t j = (step % steps_per_epoch) * per_step + (int64_t)rank * B + b;
        int64_t w = (int64_t)gpt2rt__shard_permute((uint64_t)j, (uint64_t)windows, key);
        const uint16_t *src = s->tokens + w * T;
        for (int t = 0; t < T; t++) {
            inputs[(int64_t)b * T + t] = src[t];
            targets[(int64_t)b * T + t] = src[t + 1];
        }
    }
    return GPT2RT_OK;
}
#endif /* GPT2RT__SRC_TOKENIZER_SHARDS_H */
