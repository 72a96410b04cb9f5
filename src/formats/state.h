/* formats/state.h - 4.4 Training state
   may call: formats/hf.h and what it includes */
#ifndef GPT2RT__SRC_FORMATS_STATE_H
#define GPT2RT__SRC_FORMATS_STATE_H
#include "hf.h"

/* ==== 4.4 Training state ==== */

static gpt2rt_result gpt2rt__state_in(gpt2rt_ctx *ctx, const float *m, const float *v); /* 10: the executor's */

/* weights, moments, step and RNG in one safetensors file */

static gpt2rt_result gpt2rt__state_load_mem(gpt2rt_ctx *ctx, const unsigned char *buf, size_t len, const char *what) {
    gpt2rt__st st;
    gpt2rt_result r = gpt2rt__st_parse(ctx, buf, len, what, &st);
    if (r != GPT2RT_OK) return r;
    const gpt2rt__dims *d = &ctx->d;
    const char *fmt = gpt2rt__st_meta(&st, "format");
    /* frozen: the moments cover the trained parameters only (absent: nothing frozen) */
    /* patch models: their shape too (absent in a token state: 0); and their objective:
       head and attn_mask (NEXT_PATCH and PATCH_DECODE have the same tensors, so only these
       tell a stage-1 state from a stage-2 one; absent in states written before them: not
       checked) */
    const char *keys[15] = {"n_layer", "n_head", "n_embd", "vocab_size", "padded_vocab", "max_seq_len", "frozen",
                            "seq_len", "patch_len", "patch_stride", "n_channels", "horizon", "revin_affine",
                            "head", "attn_mask"};
    int64_t want[15] = {d->L, d->NH, d->C, d->V, d->Vp, d->P, (int64_t)ctx->cfg.frozen,
                        d->patches ? ctx->cfg.seq_len : 0, d->PL, d->PS, d->patches ? d->M : 0, d->H, d->affine,
                        (int64_t)ctx->cfg.head, (int64_t)ctx->cfg.attn_mask};
    static const char *const enum_names[2][4] = {{" (LM)", " (REGRESSION)", " (NEXT_PATCH)", " (PATCH_DECODE)"},
                                                 {" (CAUSAL)", " (PLACEHOLDERS)", "", ""}};
    const gpt2rt__st_tensor *e[3] = {gpt2rt__st_find(&st, "params"), gpt2rt__st_find(&st, "adam_m"),
                                     gpt2rt__st_find(&st, "adam_v")};
    const char *step_s = gpt2rt__st_meta(&st, "step"), *rng_s = gpt2rt__st_meta(&st, "rng");
    if (!fmt || strcmp(fmt, "gpt2rt-state-1"))
        r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: not a gpt2rt training state (metadata format is '%s', "
                         "expected 'gpt2rt-state-1')", what, fmt ? fmt : "(none)");
    /* the objective first: a state of the other aLLM4TS stage differs in its shape too
       (horizon, patch_stride), and the head is what says so */
    static const int order[15] = {13, 14, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    for (int k = 0; k < 15 && r == GPT2RT_OK; k++) {
        int i = order[k];
        const char *s = gpt2rt__st_meta(&st, keys[i]);
        if (i >= 13 && !s) continue;
        if (i >= 6 && !s) s = "0";
        long long got = -1; /* read below only when parsed; -1 names nothing */
        int named = i >= 13 && want[i] >= 0 && want[i] < (i == 13 ? 4 : 2);
        if (!gpt2rt__parse_int(s, 0, INT64_MAX, &got) || got != want[i])
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: the state has %s = %s%s, this context has %lld%s%s", what,
                             keys[i], s ? s : "(missing)",
                             named && got >= 0 && got < (i == 13 ? 4 : 2) ? enum_names[i - 13][got] : "",
                             (long long)want[i], named ? enum_names[i - 13][want[i]] : "",
                             i == 13 && got == GPT2RT_HEAD_NEXT_PATCH && want[i] == GPT2RT_HEAD_PATCH_DECODE
                             ? " (a stage-1 state starts stage 2 through the weights: gpt2rt_weights_save it from "
                               "the stage-1 context, gpt2rt_weights_load it here)" : "");
    }
    for (int i = 0; i < 3 && r == GPT2RT_OK; i++)
        if (!e[i] || e[i]->dtype != GPT2RT__F32 || e[i]->ndim != 1 || e[i]->shape[0] != (i ? ctx->n_train : ctx->n_params))
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' must be F32 of shape (%lld)%s", what,
                             i == 0 ? "params" : i == 1 ? "adam_m" : "adam_v",
                             (long long)(i ? ctx->n_train : ctx->n_params), e[i] ? "" : " and is missing");
    /* one bad number here poisons every weight at the next update */
    for (int i = 0; i < 3 && r == GPT2RT_OK; i++) {
        const unsigned char *p = st.data + e[i]->begin;
        for (int64_t j = 0; j < e[i]->shape[0]; j++) {
            float x;
            memcpy(&x, p + 4 * j, 4);
            if (!isfinite(x) || (i == 2 && x < 0.0f)) {
                r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: tensor '%s' element %lld is %g: %s", what,
                                 i == 0 ? "params" : i == 1 ? "adam_m" : "adam_v", (long long)j, (double)x,
                                 i == 2 ? "the second moment must be finite and >= 0" : "it must be finite");
                break;
            }
        }
    }
    long long step = 0;
    uint64_t rng = 0;
    char *end = NULL;
    if (r == GPT2RT_OK && !gpt2rt__parse_int(step_s, 0, (long long)1 << 62, &step))
        r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: metadata step = '%s' is not an integer in [0, 2^62]", what,
                         step_s ? step_s : "(missing)");
    if (r == GPT2RT_OK) {
        errno = 0;
        if (rng_s && *rng_s >= '0' && *rng_s <= '9') rng = strtoull(rng_s, &end, 10);
        if (!rng_s || !end || *end || errno)
            r = gpt2rt__fail(ctx, GPT2RT_ERR_FORMAT, "%s: metadata rng = '%s' is not an unsigned 64-bit integer",
                             what, rng_s ? rng_s : "(missing)");
    }
    if (r == GPT2RT_OK) {
        gpt2rt__reset_training(ctx);
        memcpy(ctx->params, st.data + e[0]->begin, (size_t)ctx->n_params * 4);
        /* every data-parallel rank's (ZeRO-1: each rank its shard; CUDA: on the devices) */
        r = gpt2rt__state_in(ctx, (const float *)(const void *)(st.data + e[1]->begin),
                           (const float *)(const void *)(st.data + e[2]->begin));
        ctx->step = step;
        ctx->rng = rng;
    }
    gpt2rt__st_release(ctx, &st);
    return r;
}

#endif /* GPT2RT__SRC_FORMATS_STATE_H */
