/* public/training.h - 11.4 Training
   may call: common/types.h, common/errors.h, config/caps.h, inputs/patches.h, backend/driver.h, context/context.h */
#ifndef GPT2RT__SRC_PUBLIC_TRAINING_H
#define GPT2RT__SRC_PUBLIC_TRAINING_H
#include "../common/types.h"
#include "../common/errors.h"
#include "../config/caps.h"
#include "../inputs/patches.h"
#include "../backend/driver.h"
#include "../context/context.h"

/* ==== 11.4 Training ==== */

/* the training calls on an inference context (config.inference = 1): it holds no
   gradients and no AdamW moments, so fn has nothing to work on */
static gpt2rt_result gpt2rt__training_only(gpt2rt_ctx *ctx, const char *fn, const char *needs) {
    if (!ctx->cfg.inference) return GPT2RT_OK;
    return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "%s: this context was created with config.inference = 1 (weights, "
                        "KV cache and a forward workspace only: 0 bytes of gradients and AdamW moments), and %s "
                        "needs %s; create the context with inference = 0 to train", fn, fn, needs);
}

/* the call fn is made for the context's input kind (series: the _series calls) */
static gpt2rt_result gpt2rt__input_kind(gpt2rt_ctx *ctx, const char *fn, int series) {
    if (ctx->d.patches == series) return GPT2RT_OK;
    return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "%s: this context has input = %s; use %s", fn,
                        ctx->d.patches ? "PATCHES (time series)" : "TOKENS",
                        ctx->d.patches ? "gpt2rt_forward_series / gpt2rt_step_series / gpt2rt_predictions"
                                       : "gpt2rt_forward / gpt2rt_step / gpt2rt_logits");
}

GPT2RT_DEF gpt2rt_result gpt2rt_mode_set(gpt2rt_ctx *ctx, gpt2rt_mode mode) {
    GPT2RT__CHECK_CTX(ctx);
    if ((int)mode < 0 || mode > GPT2RT_MODE_EVAL)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_mode_set: mode = %d is not a gpt2rt_mode "
                            "(GPT2RT_MODE_TRAIN = 0, GPT2RT_MODE_EVAL = 1)", (int)mode);
    ctx->eval = mode == GPT2RT_MODE_EVAL;
    ctx->ex->sync(ctx, GPT2RT__SYNC_SETTINGS);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_mode gpt2rt_mode_get(const gpt2rt_ctx *ctx) {
    return ctx && ctx->eval ? GPT2RT_MODE_EVAL : GPT2RT_MODE_TRAIN;
}

/* every row of a call's `micro` micro-batches of ex->slices B-row slices each, before
   anything runs (a, b: as the executor takes them, 10) */
static gpt2rt_result gpt2rt__rows_check(gpt2rt_ctx *ctx, const char *fn, const void *a, const void *b, int micro) {
    int n = ctx->ex->slices(ctx);
    for (int64_t m = 0; m < (int64_t)micro * n; m++) {
        const void *sa = gpt2rt__slice(ctx, a, m, 0), *sb = gpt2rt__slice(ctx, b, m, 1);
        gpt2rt_result r = ctx->d.patches ? gpt2rt__ts_check(ctx, fn, (const float *)sa, (const float *)sb)
                                         : gpt2rt__input_tokens_check(ctx, fn, (const int32_t *)sa, (const int32_t *)sb);
        if (r == GPT2RT_OK) continue;
        if (n == 1) return r;
        char msg[sizeof ctx->error];
        memcpy(msg, ctx->error, sizeof msg);
        return gpt2rt__fail(ctx, r, "%s (in the rows of data-parallel rank %d, micro-batch %d: indices count from "
                            "that rank's first row)", msg, (int)(m % n), (int)(m / n));
    }
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_forward(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets, float *loss) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__cap_call(ctx, GPT2RT__CAP_CALL_FORWARD, "gpt2rt_forward"));
    if (ctx->d.patches) return gpt2rt__input_kind(ctx, "gpt2rt_forward", 0);
    if (!inputs) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forward: inputs is NULL");
    GPT2RT__TRY(gpt2rt__rows_check(ctx, "gpt2rt_forward", inputs, targets, 1));
    return ctx->ex->forward(ctx, inputs, targets, loss);
}

GPT2RT_DEF gpt2rt_result gpt2rt_forward_series(gpt2rt_ctx *ctx, const float *x, const float *y, float *loss) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__input_kind(ctx, "gpt2rt_forward_series", 1));
    if (!x) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_forward_series: x is NULL");
    if (ctx->d.seqhead == GPT2RT_HEAD_NEXT_PATCH) y = NULL; /* its targets are in x */
    GPT2RT__TRY(gpt2rt__rows_check(ctx, "gpt2rt_forward_series", x, y, 1));
    return ctx->ex->forward(ctx, x, y, loss);
}

GPT2RT_DEF gpt2rt_result gpt2rt_backward(gpt2rt_ctx *ctx) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_backward", "the gradients and the saved activations"));
    GPT2RT__TRY(gpt2rt__cap_call(ctx, GPT2RT__CAP_CALL_BACKWARD, "gpt2rt_backward"));
    if (!ctx->have_loss)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_backward: needs a gpt2rt_forward with targets first "
                            "(and at most one backward per forward)");
    return ctx->ex->backward(ctx);
}

GPT2RT_DEF gpt2rt_result gpt2rt_update(gpt2rt_ctx *ctx, gpt2rt_step_stats *stats) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_update", "the gradients and the AdamW moments"));
    GPT2RT__TRY(gpt2rt__cap_call(ctx, GPT2RT__CAP_CALL_UPDATE, "gpt2rt_update"));
    if (!ctx->grads_pending)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_update: no gradients since the last update "
                            "(call gpt2rt_backward first)");
    return ctx->ex->update(ctx, stats);
}

/* gpt2rt_step and gpt2rt_step_series, a and b not NULL: every micro-batch checked, then the step */
static gpt2rt_result gpt2rt__step_checked(gpt2rt_ctx *ctx, const char *fn, const void *a, const void *b,
                                          gpt2rt_step_stats *stats) {
    if (ctx->grads_pending)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "%s: gradients from an earlier gpt2rt_backward are waiting for "
                            "gpt2rt_update", fn);
    GPT2RT__TRY(gpt2rt__rows_check(ctx, fn, a, b, ctx->cfg.grad_accum));
    return ctx->ex->step(ctx, a, b, stats);
}

GPT2RT_DEF gpt2rt_result gpt2rt_step(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets,
                                     gpt2rt_step_stats *stats) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_step", "the gradients and the AdamW moments"));
    if (ctx->d.patches) return gpt2rt__input_kind(ctx, "gpt2rt_step", 0);
    if (!inputs || !targets)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_step: %s is NULL", inputs ? "targets" : "inputs");
    return gpt2rt__step_checked(ctx, "gpt2rt_step", inputs, targets, stats);
}

GPT2RT_DEF gpt2rt_result gpt2rt_schedule_set(gpt2rt_ctx *ctx, int warmup_steps, int total_steps) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_schedule_set", "an optimizer"));
    if (warmup_steps < 0 || total_steps < 0 || (total_steps && warmup_steps > total_steps))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_schedule_set: warmup_steps = %d, total_steps = "
                            "%d: each must be >= 0 and warmup_steps <= total_steps (total_steps 0: a constant rate "
                            "after the warmup)", warmup_steps, total_steps);
    ctx->cfg.warmup_steps = warmup_steps;
    ctx->cfg.total_steps = total_steps;
    ctx->ex->sync(ctx, GPT2RT__SYNC_SETTINGS);
    return GPT2RT_OK;
}

GPT2RT_DEF gpt2rt_result gpt2rt_step_series(gpt2rt_ctx *ctx, const float *x, const float *y, gpt2rt_step_stats *stats) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__training_only(ctx, "gpt2rt_step_series", "the gradients and the AdamW moments"));
    GPT2RT__TRY(gpt2rt__input_kind(ctx, "gpt2rt_step_series", 1));
    int next_patch = ctx->d.seqhead == GPT2RT_HEAD_NEXT_PATCH; /* its targets are in x */
    if (!x || (!y && !next_patch))
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_step_series: %s is NULL", x ? "y" : "x");
    return gpt2rt__step_checked(ctx, "gpt2rt_step_series", x, next_patch ? NULL : y, stats);
}

/* dst holds count floats: one slice's per of them (made of `what`) for every slice */
static gpt2rt_result gpt2rt__output_count(gpt2rt_ctx *ctx, const char *fn, int64_t count, int64_t per,
                                          const char *what) {
    int n = ctx->ex->slices(ctx);
    if (count == per * n) return GPT2RT_OK;
    if (n > 1)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: dst holds %lld floats, needs n_devices = %d times "
                            "one rank's %lld", fn, (long long)count, n, (long long)per);
    return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "%s: dst holds %lld floats, needs %s = %lld", fn,
                        (long long)count, what, (long long)per);
}

GPT2RT_DEF gpt2rt_result gpt2rt_logits(gpt2rt_ctx *ctx, float *dst, int64_t count) {
    GPT2RT__CHECK_CTX(ctx);
    GPT2RT__TRY(gpt2rt__cap_call(ctx, GPT2RT__CAP_CALL_LOGITS, "gpt2rt_logits"));
    const gpt2rt__dims *d = &ctx->d;
    if (d->patches) return gpt2rt__input_kind(ctx, "gpt2rt_logits", 0);
    if (!dst) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_logits: dst is NULL");
    char what[128];
    snprintf(what, sizeof what, "B*T*vocab = %lld*%lld*%lld", (long long)d->B, (long long)d->T, (long long)d->V);
    GPT2RT__TRY(gpt2rt__output_count(ctx, "gpt2rt_logits", count, d->BT * d->V, what));
    if (d->classifier_chunk < d->BT)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_logits: classifier_chunk = %d holds the logits of %lld "
                            "tokens at a time, never all B*T = %lld; create the context with classifier_chunk = 0 "
                            "to read them", ctx->cfg.classifier_chunk, (long long)d->classifier_chunk, (long long)d->BT);
    if (!ctx->have_logits)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_logits: no logits (call gpt2rt_forward; gpt2rt_backward "
                            "consumes them)");
    return ctx->ex->output(ctx, dst);
}

GPT2RT_DEF gpt2rt_result gpt2rt_predictions(gpt2rt_ctx *ctx, float *dst, int64_t count) {
    GPT2RT__CHECK_CTX(ctx);
    const gpt2rt__dims *d = &ctx->d;
    GPT2RT__TRY(gpt2rt__input_kind(ctx, "gpt2rt_predictions", 1));
    if (!dst) return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_predictions: dst is NULL");
    if (d->seqhead == GPT2RT_HEAD_NEXT_PATCH)
        return gpt2rt__fail(ctx, GPT2RT_ERR_INVALID_ARGUMENT, "gpt2rt_predictions: head = NEXT_PATCH (aLLM4TS's stage "
                            "1) forecasts no horizon; its loss is the next-patch MSE of gpt2rt_forward_series");
    char what[128];
    snprintf(what, sizeof what, "B*horizon*M = %lld*%lld*%lld", (long long)d->Bw, (long long)d->H, (long long)d->M);
    GPT2RT__TRY(gpt2rt__output_count(ctx, "gpt2rt_predictions", count, d->n_out, what));
    if (!ctx->have_pred)
        return gpt2rt__fail(ctx, GPT2RT_ERR_STATE, "gpt2rt_predictions: no predictions (call gpt2rt_forward_series; "
                            "a load or gpt2rt_param_write forgets them)");
    return ctx->ex->output(ctx, dst);
}


#endif /* GPT2RT__SRC_PUBLIC_TRAINING_H */
