/* cpu/backend.h - 7.4 Backend table
   may call: what its includes name (common/, plan/, formats/, inputs/, optimizer.h, backend/, cpu/) */
#ifndef GPT2RT__SRC_CPU_BACKEND_H
#define GPT2RT__SRC_CPU_BACKEND_H
#include "../common/types.h"
#include "../plan/params.h"
#include "../plan/activations.h"
#include "../formats/hf.h"
#include "../inputs/patches.h"
#include "../optimizer.h"
#include "../backend/interface.h"
#include "../backend/driver.h"
#include "ops.h"
#include "model.h"

/* ==== 7.4 Backend table ==== */
/* The CPU backend's step-level work, the second part of its table (7.3 has the layer
   steps): forwards, backward, update, host copies, data parallel's reductions. */

static gpt2rt_result gpt2rt__cpu_forward(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets, float *loss,
                                         int fuse) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt_result r;
    /* the logits stay, the backward turns them into dlogits; classifier_chunk: fuse runs the
       head's backward here, chunk by chunk, and no logits stay */
    memcpy(ctx->inputs, inputs, (size_t)d->BT * sizeof(int32_t));
    ctx->head_fused = 0;
    if ((r = gpt2rt__model_forward(ctx, ctx->be, ctx)) != GPT2RT_OK) return r;
    ctx->have_logits = d->classifier_chunk == d->BT;
    ctx->have_loss = 0;
    if (targets && d->classifier_chunk < d->BT) {
        memcpy(ctx->targets, targets, (size_t)d->BT * sizeof(int32_t));
        ctx->loss = gpt2rt__cpu_head_chunked_loss(ctx, fuse);
        ctx->have_loss = 1;
    } else if (targets) {
        memcpy(ctx->targets, targets, (size_t)d->BT * sizeof(int32_t));
        GPT2RT__PROF(ctx, GPT2RT__PROF_CE, ctx->loss = gpt2rt__cpu_crossentropy_forward(ctx->losses, ctx->logit_lse,
                     ctx->logits, ctx->targets, d->BT, d->V, d->Vp, &ctx->n_targets, &ctx->loss_sum, d->n_threads));
        ctx->have_loss = 1;
    }
    if (loss) *loss = targets ? ctx->loss : 0.0f;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_forward_series(gpt2rt_ctx *ctx, const float *x, const float *y, float *loss) {
    const gpt2rt__dims *d = &ctx->d;
    gpt2rt_result r;
    gpt2rt__model_params p = gpt2rt__mparams(ctx, ctx->params, 0);
    gpt2rt__ts_revin_patch(ctx->ts_patch, ctx->ts_z, ctx->ts_mean, ctx->ts_std, x, p.revw, p.revb, d);
    ctx->have_pred = 0;
    if ((r = gpt2rt__model_forward(ctx, ctx->be, ctx)) != GPT2RT_OK) return r;
    ctx->have_logits = 1;
    if (d->seqhead == GPT2RT_HEAD_NEXT_PATCH) { /* the loss needs no y: the targets are the lookback's next patches */
        ctx->loss_sum = gpt2rt__ts_next_sum(ctx->logits, ctx->ts_patch, d);
        ctx->n_targets = d->n_out;
        ctx->loss = (float)(ctx->loss_sum / (double)d->n_out);
        ctx->have_loss = 1;
        if (loss) *loss = ctx->loss;
        return GPT2RT_OK;
    }
    gpt2rt__ts_denorm(ctx->ts_pred, gpt2rt__ts_yn(ctx), ctx->ts_mean, ctx->ts_std, p.revw, p.revb, d);
    ctx->have_pred = 1;
    ctx->have_loss = 0;
    if (y) {
        memcpy(ctx->ts_y, y, (size_t)d->n_out * sizeof(float));
        ctx->loss_sum = gpt2rt__ts_mse_sum(ctx->ts_pred, ctx->ts_y, d->n_out);
        ctx->n_targets = d->n_out;
        ctx->loss = (float)(ctx->loss_sum / (double)d->n_out);
        ctx->have_loss = 1;
    }
    if (loss) *loss = y ? ctx->loss : 0.0f;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_backward(gpt2rt_ctx *ctx) {
    return gpt2rt__model_backward(ctx, ctx->be, ctx, 1.0f / (float)(ctx->d.n_out * ctx->cfg.grad_accum));
}

static gpt2rt_result gpt2rt__cpu_zero_grads(gpt2rt_ctx *ctx, int moments) {
    if (!ctx->grads) return GPT2RT_OK; /* a context without arenas (a failed creation) */
    memset(ctx->grads, 0, (size_t)ctx->n_train * sizeof(float));
    if (moments) memset(ctx->m, 0, (size_t)ctx->n_opt * 2 * sizeof(float));
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_logits(gpt2rt_ctx *ctx, float *dst) {
    const gpt2rt__dims *d = &ctx->d;
    for (int64_t i = 0; i < d->BT; i++) memcpy(dst + i * d->V, ctx->logits + i * d->Vp, (size_t)d->V * sizeof(float));
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cpu_predictions(gpt2rt_ctx *ctx, float *dst) {
    memcpy(dst, ctx->ts_pred, (size_t)ctx->d.n_out * sizeof(float));
    return GPT2RT_OK;
}

/* the host's weights are the ones trained */
static gpt2rt_result gpt2rt__cpu_host_weights(gpt2rt_ctx *ctx) {
    (void)ctx;
    return GPT2RT_OK;
}

static void gpt2rt__cpu_allocated(const gpt2rt_ctx *ctx, uint64_t *bytes, uint64_t *overhead) {
    (void)overhead; /* no driver */
    memcpy(bytes, ctx->arena_bytes, GPT2RT_MEM_COUNT * sizeof(uint64_t));
}

static gpt2rt_result gpt2rt__cpu_dp_open(gpt2rt_ctx *ctx) {
    (void)ctx; /* the threads' communicator (10.1) is all the ranks share */
    return GPT2RT_OK;
}

static void gpt2rt__cpu_release(gpt2rt_ctx *ctx) {
    (void)ctx; /* the arenas are the context's (gpt2rt_free) */
}

/* ---- the update and data parallel's entries ---- */

/* the update: data parallel first sums the gradients and the loss over the ranks
   (10.1), and with ZeRO-1 gathers the weights after */
static gpt2rt_result gpt2rt__cpu_update(gpt2rt_ctx *ctx, float lr, gpt2rt__opt_decision *o, float *loss_scale) {
    double sumsq = 0.0;
    int clean = 0;
    if (ctx->comm->size > 1) { /* data parallel: the summed gradient, the global loss and norm */
        gpt2rt_result r = gpt2rt__dp_before_update(ctx, &sumsq);
        if (r != GPT2RT_OK) return r;
    } else GPT2RT__PROF(ctx, GPT2RT__PROF_NORM, sumsq = gpt2rt__opt_sumsq(ctx, ctx->grads, ctx->n_train));
    *o = gpt2rt__opt_policy(ctx, sqrt(sumsq), loss_scale, &clean); /* fp32 on the CPU: the scale stays 1 */
    if (o->skipped) {
        memset(ctx->grads, 0, (size_t)ctx->n_train * sizeof(float));
        return GPT2RT_OK;
    }
    GPT2RT__PROF(ctx, GPT2RT__PROF_ADAMW, gpt2rt__opt_adamw(ctx, lr, o->grad_scale));
    if (gpt2rt__sharded(&ctx->d)) { /* ZeRO-1: this rank updated its shard */
        gpt2rt_result r = gpt2rt__dp_gather_weights(ctx);
        if (r != GPT2RT_OK) return r;
    }
    ctx->step++;
    return GPT2RT_OK;
}

/* data parallel's reduction: the pieces over the ranks' communicator */
static gpt2rt_result gpt2rt__cpu_dp_reduce(gpt2rt_ctx *ctx, const int64_t (*pieces)[2], int scatter) {
    gpt2rt__comm *c = ctx->comm;
    gpt2rt_result r = GPT2RT_OK;
    for (int i = 0; i < 2 && r == GPT2RT_OK; i++)
        if (pieces[i][1] > 0)
            r = scatter ? c->reduce_scatter(c, ctx->grads, gpt2rt__dp_grad_len(ctx))
                        : c->all_reduce(c, ctx->grads + pieces[i][0], pieces[i][1]);
    if (r != GPT2RT_OK) return gpt2rt__dp_comm_fail(ctx, r, "reducing the gradients");
    return GPT2RT_OK;
}

/* the host weights are the trained ones */
static gpt2rt_result gpt2rt__cpu_upload(gpt2rt_ctx *ctx, const float *m, const float *v) {
    size_t bytes = (size_t)(ctx->opt_hi - ctx->opt_lo) * sizeof(float);
    if (m) memcpy(ctx->m, m + ctx->opt_lo, bytes);
    if (v) memcpy(ctx->v, v + ctx->opt_lo, bytes);
    return GPT2RT_OK;
}

/* the gradient by the whole gradient's offsets (the reduce-scatter sums in place), the
   moments from opt_lo */
static gpt2rt_result gpt2rt__cpu_shard_read(gpt2rt_ctx *ctx, gpt2rt_param_what what, int64_t lo, int64_t hi,
                                            double unscale, float *dst) {
    int64_t a = lo > ctx->opt_lo ? lo : ctx->opt_lo, b = hi < ctx->opt_hi ? hi : ctx->opt_hi;
    if (b <= a) return GPT2RT_OK;
    const float *src = what == GPT2RT_PARAM_GRAD ? ctx->grads + a
                     : (what == GPT2RT_PARAM_ADAM_M ? ctx->m : ctx->v) + (a - ctx->opt_lo);
    float k = what == GPT2RT_PARAM_GRAD ? (float)unscale : 1.0f;
    if (k == 1.0f) memcpy(dst + (a - lo), src, (size_t)(b - a) * sizeof(float));
    else for (int64_t i = 0; i < b - a; i++) dst[a - lo + i] = src[i] * k;
    return GPT2RT_OK;
}

/* a tensor's value, gradient (times unscale) or moment */
static gpt2rt_result gpt2rt__cpu_param_read(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, gpt2rt_param_what what,
                                            double unscale, float *dst) {
    const float *base = what == GPT2RT_PARAM_VALUE ? ctx->params : what == GPT2RT_PARAM_GRAD ? ctx->grads
                      : what == GPT2RT_PARAM_ADAM_M ? ctx->m : ctx->v;
    if (what == GPT2RT_PARAM_VALUE && ctx->params16) { /* bf16 weights: widened (exactly) */
        for (int64_t r0 = 0; r0 < t->hf_rows; r0++)
            for (int64_t c = 0; c < t->cols; c++)
                dst[t->transpose ? c * t->rows + r0 : r0 * t->cols + c] = gpt2rt__w_get(ctx, t->off + r0 * t->cols + c);
        return GPT2RT_OK;
    }
    float k = what == GPT2RT_PARAM_GRAD ? (float)unscale : 1.0f;
    gpt2rt__param_out(t, base + (what == GPT2RT_PARAM_VALUE ? t->off : t->goff), k, dst);
    return GPT2RT_OK;
}

/* a CPU data-parallel rank: arenas like rank 0's */
static gpt2rt_result gpt2rt__cpu_dp_rank(gpt2rt_ctx *ctx, gpt2rt_ctx *rc, int r, const gpt2rt_memory_plan *plan) {
    (void)ctx; (void)r;
    return gpt2rt__ctx_alloc(rc, plan);
}

static const gpt2rt__backend gpt2rt__cpu_backend = {
    /* .embed_forward  = */ gpt2rt__cpu_embed_forward,
    /* .layer_forward  = */ gpt2rt__cpu_layer_forward,
    /* .head_forward   = */ gpt2rt__cpu_head_forward,
    /* .head_backward  = */ gpt2rt__cpu_head_backward,
    /* .layer_backward = */ gpt2rt__cpu_layer_backward,
    /* .embed_backward = */ gpt2rt__cpu_embed_backward,
    /* .copy           = */ gpt2rt__cpu_copy,
    /* .forward        = */ gpt2rt__cpu_forward,
    /* .forward_series = */ gpt2rt__cpu_forward_series,
    /* .backward       = */ gpt2rt__cpu_backward,
    /* .update         = */ gpt2rt__cpu_update,
    /* .zero_grads     = */ gpt2rt__cpu_zero_grads,
    /* .logits         = */ gpt2rt__cpu_logits,
    /* .predictions    = */ gpt2rt__cpu_predictions,
    /* .dp_reduce      = */ gpt2rt__cpu_dp_reduce,
    /* .host_weights   = */ gpt2rt__cpu_host_weights,
    /* .upload         = */ gpt2rt__cpu_upload,
    /* .shard_read     = */ gpt2rt__cpu_shard_read,
    /* .param_read     = */ gpt2rt__cpu_param_read,
    /* .allocated      = */ gpt2rt__cpu_allocated,
    /* .dp_rank        = */ gpt2rt__cpu_dp_rank,
    /* .dp_open        = */ gpt2rt__cpu_dp_open,
    /* .release_shared = */ gpt2rt__cpu_release,
    /* .release        = */ gpt2rt__cpu_release,
    /* .decode         = */ gpt2rt__cpu_decode
};

#endif /* GPT2RT__SRC_CPU_BACKEND_H */
