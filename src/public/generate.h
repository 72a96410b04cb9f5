/* public/generate.h - 11.7 Generation
   may call: common/types.h, common/errors.h, plan/activations.h, backend/driver.h, public/training.h */
#ifndef GPT2RT__SRC_PUBLIC_GENERATE_H
#define GPT2RT__SRC_PUBLIC_GENERATE_H
#include "../common/types.h"
#include "../common/errors.h"
#include "../plan/activations.h"
#include "../backend/driver.h"
#include "training.h"

/* ==== 11.7 Generation ==== */
/* gpt2rt_generate: passes of the CPU decode step (7.3) over the KV cache (3.2), and
   the choice of each new token (infix gpt2rt__gen_). A pass feeds every live row its
   pending tokens (the rest of its prompt, up to GPT2RT__KV_CHUNK at a time, or the
   token it chose last); a row whose pending tokens are all in then chooses the next.
   So rows of different prompt lengths each keep their own positions and stop. */

/* the defaults of a gpt2rt_sample, then its checks (numbers in the message) */
static gpt2rt_result gpt2rt__gen_options(gpt2rt_ctx *ctx, const gpt2rt_sample *in, gpt2rt_sample *o) {
    memset(o, 0, sizeof *o);
    if (in) *o = *in;
    const char *fn = "gpt2rt_generate";
    if (!(o->temperature >= 0.0f) || !isfinite(o->temperature))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: temperature = %g must be >= 0 and finite (0: "
                            "greedy)", fn, (double)o->temperature);
    if (o->top_k < 0)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: top_k = %d must be >= 0 (0: every token)", fn,
                            o->top_k);
    if (!(o->top_p >= 0.0f && o->top_p <= 1.0f))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: top_p = %g must lie in (0, 1] (0: the default, "
                            "1)", fn, (double)o->top_p);
    if (o->max_new_tokens < 0)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: max_new_tokens = %d must be >= 0 (0: until the "
                            "row is full)", fn, o->max_new_tokens);
    if (o->eot >= ctx->d.V)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: eot = %d is outside the vocabulary [0, %lld)", fn,
                            o->eot, (long long)ctx->d.V);
    if (o->top_p == 0.0f) o->top_p = 1.0f;
    if (!o->seed) o->seed = ctx->cfg.seed;
    if (o->eot == 0) o->eot = ctx->d.V > 50256 ? 50256 : -1;
    return GPT2RT_OK;
}

/* candidates: probability descending, then id ascending (a total order: the same
   ids whatever qsort does with equals) */
static int gpt2rt__gen_cmp(const void *a, const void *b) {
    const gpt2rt__kv_cand *x = (const gpt2rt__kv_cand *)a, *y = (const gpt2rt__kv_cand *)b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The next token from logits (V): greedy, or a draw from *rng among the top_k, then
   the nucleus of top_p, of softmax(logits / temperature). Only the tokens that can
   be in that set are sorted: those at least as likely as a threshold whose set
   already holds top_k tokens, or top_p of the mass; any token below it comes after
   every token above it in the sorted order, so the set is exact. */
static int32_t gpt2rt__gen_choose(gpt2rt__kv *kv, const float *logits, int64_t V, const gpt2rt_sample *o, uint64_t *rng) {
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (o->temperature == 0.0f) return (int32_t)best;
    double mx = logits[best], inv_t = 1.0 / (double)o->temperature, total = 0.0;
    for (int64_t v = 0; v < V; v++) { kv->prob[v] = exp(((double)logits[v] - mx) * inv_t); total += kv->prob[v]; }
    int64_t k = o->top_k > 0 && o->top_k < V ? o->top_k : V, n = 0;
    double u = gpt2rt__rng_uniform(rng);
    if (k == V && o->top_p >= 1.0f) { /* every token: a draw in id order */
        double acc = 0.0, target = u * total;
        for (int64_t v = 0; v < V; v++) { acc += kv->prob[v]; if (acc > target) return (int32_t)v; }
        return (int32_t)best;
    }
    for (double tau = 1.0 / 16.0;; tau /= 16.0) { /* prob[best] = 1 */
        double mass = 0.0;
        n = 0;
        for (int64_t v = 0; v < V; v++)
            if (kv->prob[v] >= tau || tau < 1e-300) { kv->cand[n].p = kv->prob[v]; kv->cand[n].id = (int32_t)v; n++; mass += kv->prob[v]; }
        if (tau < 1e-300 || (k < V ? n >= k : mass >= (double)o->top_p * total)) break;
    }
    qsort(kv->cand, (size_t)n, sizeof *kv->cand, gpt2rt__gen_cmp);
    if (n > k) n = k;
    double kept = 0.0;
    for (int64_t i = 0; i < n; i++) kept += kv->cand[i].p;
    if (o->top_p < 1.0f) { /* the shortest prefix whose share of the kept mass reaches top_p */
        double acc = 0.0, need = (double)o->top_p * kept;
        for (int64_t i = 0; i < n; i++) {
            acc += kv->cand[i].p;
            if (acc >= need) { n = i + 1; break; }
        }
        kept = 0.0;
        for (int64_t i = 0; i < n; i++) kept += kv->cand[i].p;
    }
    double acc = 0.0, target = u * kept;
    for (int64_t i = 0; i < n; i++) { acc += kv->cand[i].p; if (acc > target) return kv->cand[i].id; }
    return kv->cand[n - 1].id;
}

GPT2RT_DEF gpt2rt_result gpt2rt_generate(gpt2rt_ctx *ctx, const gpt2rt_sample *opts, int B, int32_t *tokens,
                                         int64_t row_cap, int64_t *lens) {
    GPT2RT__CHECK_CTX(ctx);
    const gpt2rt__dims *d = &ctx->d;
    const char *fn = "gpt2rt_generate";
    if (d->patches) return gpt2rt__input_kind(ctx, fn, 0);
    if (!d->kv_batch)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "%s: this context has no KV cache: set config.kv_batch (the "
                            "prompts generated at once) before gpt2rt_create", fn);
    if (!tokens || !lens) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: tokens or lens is NULL", fn);
    if (B < 1 || B > d->kv_batch)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: B = %d must lie in [1, kv_batch = %lld] (the "
                            "rows of the KV cache)", fn, B, (long long)d->kv_batch);
    if (row_cap < 1)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: row_cap = %lld must be >= 1", fn, (long long)row_cap);
    gpt2rt_sample o;
    gpt2rt_result r = gpt2rt__gen_options(ctx, opts, &o);
    if (r != GPT2RT_OK) return r;
    int64_t cap = row_cap < d->kv_len ? row_cap : d->kv_len; /* a row's tokens all fit the cache */
    for (int b = 0; b < B; b++) {
        if (lens[b] < 1)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: lens[%d] = %lld: a prompt needs at least one "
                                "token (e.g. <|endoftext|>)", fn, b, (long long)lens[b]);
        if (lens[b] > cap)
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: lens[%d] = %lld: the prompt is longer than "
                                "min(row_cap = %lld, kv_len = %lld) (kv_len <= max_seq_len = %lld)", fn, b,
                                (long long)lens[b], (long long)row_cap, (long long)d->kv_len, (long long)d->P);
        if (o.max_new_tokens > cap - lens[b]) /* asked for more than the row holds: refused, not cut short */
            return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: lens[%d] = %lld + max_new_tokens = %d is %lld "
                                "tokens, more than row %d holds: min(row_cap = %lld, kv_len = %lld) = %lld (kv_len <= "
                                "max_seq_len = %lld); ask for at most %lld new tokens, or max_new_tokens = 0 (until "
                                "the row is full)", fn, b, (long long)lens[b], o.max_new_tokens,
                                (long long)(lens[b] + o.max_new_tokens), b, (long long)row_cap, (long long)d->kv_len,
                                (long long)cap, (long long)d->P, (long long)(cap - lens[b]));
        for (int64_t i = 0; i < lens[b]; i++) {
            int32_t t = tokens[b * row_cap + i];
            if (t < 0 || t >= d->V)
                return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: tokens[%d][%lld] = %d is outside the "
                                    "vocabulary [0, %lld)", fn, b, (long long)i, t, (long long)d->V);
        }
    }
    gpt2rt__kv *kv = &ctx->kv;
    int64_t live = 0;
    for (int b = 0; b < B; b++) {
        int64_t lim = o.max_new_tokens ? lens[b] + o.max_new_tokens : cap; /* <= cap, checked above */
        kv->limit[b] = lim;
        kv->cached[b] = 0;
        kv->done[b] = lens[b] >= lim;
        uint64_t s0 = o.seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(b + 1));
        kv->rng[b] = gpt2rt__rng_next(&s0); /* a hashed start: the rows' streams do not overlap */
        live += !kv->done[b];
    }
    while (live) {
        int64_t n = 0, m = 0;
        for (int b = 0; b < B; b++) {
            if (kv->done[b]) continue;
            int64_t take = lens[b] - kv->cached[b];
            if (take > GPT2RT__KV_CHUNK) take = GPT2RT__KV_CHUNK;
            for (int64_t j = 0; j < take; j++, n++) {
                kv->tok[n] = tokens[b * row_cap + kv->cached[b] + j];
                kv->row[n] = b;
                kv->pos[n] = (int32_t)(kv->cached[b] + j);
            }
            kv->cached[b] += take;
            if (kv->cached[b] == lens[b]) kv->sel[m++] = (int32_t)(n - 1);
        }
        GPT2RT__TRY(ctx->be->decode(ctx, n, m)); /* the CPU's pass (7.3) or the device's (8.5) */
        for (int64_t i = 0; i < m; i++) {
            int b = kv->row[kv->sel[i]];
            const float *lg = kv->logits + i * d->Vp;
            int32_t t = gpt2rt__gen_choose(kv, lg, d->V, &o, &kv->rng[b]);
            tokens[b * row_cap + lens[b]++] = t;
            int stop = t == o.eot || lens[b] >= kv->limit[b];
            if (o.on_token && o.on_token(o.user, b, t, lg, d->V)) stop = 1;
            if (stop) { kv->done[b] = 1; live--; }
        }
    }
    return GPT2RT_OK;
}

#endif /* GPT2RT__SRC_PUBLIC_GENERATE_H */
