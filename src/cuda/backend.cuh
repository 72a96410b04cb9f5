/* cuda/backend.cuh - 8.8 Backend table
   may call: cuda/stages.cuh and what it includes */
#ifndef GPT2RT__SRC_CUDA_BACKEND_CUH
#define GPT2RT__SRC_CUDA_BACKEND_CUH
#include "stages.cuh"

/* ==== 8.8 Backend table ==== */
/* The CUDA backend's step-level work on ctx->cu, the second part of its table (8.5 has
   the layer steps): the update (after data parallel's agreement, 8.6), the forwards,
   backward, host copies, data parallel's reductions; then gpt2rt_create's entry, which
   opens one device (or a data-parallel rank 0) or the stages of a layer split (8.7). */

/* One AdamW step at learning rate lr (the caller: gpt2rt__opt_lr_at(&ctx->cfg, ctx->step)),
   bias correction for step ctx->step + 1, over the gradients summed since the last update
   (ctx->acc_targets counted targets). *norm: the global gradient norm of the mean loss
   (before clipping, loss scale removed); *skipped: 1 when it is not finite (gradients
   zeroed, weights and moments untouched; fp16: the scale halves); *loss_scale: the scale
   the next backward uses. The caller advances ctx->step when not skipped and resets its
   accumulation counters, as gpt2rt_update does. Waits for the device once (the norm). */
template <typename X>
static gpt2rt_result gpt2rt__cu_update_t(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float lr, float *norm_out,
                                         int *skipped_out, float *scale_out) {
    const gpt2rt_config *c = &st->cfg;
    cudaStream_t s = st->stream;
    /* the reduction scratch: norm result (2 doubles), then the AdamW table */
    double *d_norm = (double *)(void *)st->red;
    gpt2rt__cu_adamw_tensor *d_tab = (gpt2rt__cu_adamw_tensor *)(void *)((unsigned char *)st->red + 16);
    double sumsq = 0.0;
    if (st->dcomm) /* data parallel (8.6): the summed gradients; global loss, targets, squared norm */
        GPT2RT__TRY(gpt2rt__cu_dp_before_update(ctx, st, &sumsq));
    else {
        GPT2RT__CU_CK(gpt2rt__cu_global_norm(d_norm, NULL, st->grads, st->n_train, st->norm_parts, s));
        GPT2RT__CU_CK(cudaMemcpyAsync(st->h_norm, d_norm, sizeof(double), cudaMemcpyDeviceToHost, s));
        GPT2RT__CU_CK(cudaStreamSynchronize(s));
    }
    /* no counted target: data parallel only (one device skips before calling), every rank alike */
    gpt2rt__opt_decision o = gpt2rt__opt_policy(ctx, st->dcomm ? sqrt(sumsq) : st->h_norm[0], &st->loss_scale,
                                                &st->clean_steps);
    if (o.skipped) GPT2RT__CU_CK(cudaMemsetAsync(st->grads, 0, (size_t)st->n_train * 4, s));
    else {
        GPT2RT__CU_CK(cudaMemcpyAsync(d_tab, st->h_adamw, (size_t)st->n_adamw * sizeof(gpt2rt__cu_adamw_tensor),
                                      cudaMemcpyHostToDevice, s));
        /* the table counts from opt_lo (0 without ZeRO-1), where the master and moments start */
        for (int r = 0; r < st->n_runs; r++) {
            const gpt2rt__cu_adamw_run *run = &st->runs[r];
            float *params = st->master ? st->master : (float *)st->w + run->delta + st->opt_lo;
            X *params_x = st->master ? (X *)st->w + run->delta + st->opt_lo : NULL;
            GPT2RT__CU_CK(gpt2rt__cu_adamw<X>(params, params_x, st->grads + st->opt_lo, st->m, st->v, d_tab + run->i0,
                                              run->n, run->blocks, lr, c->beta1, c->beta2, c->eps, c->weight_decay,
                                              ctx->step + 1, o.grad_scale, s));
        }
        if (st->opt_hi - st->opt_lo < st->n_train) /* ZeRO-1: every rank gets every updated weight */
            GPT2RT__TRY(gpt2rt__cu_dp_gather_weights<X>(ctx, st));
        st->host_stale = 1;
    }
    st->grads_dirty = 0;
    if (norm_out) *norm_out = o.norm;
    if (skipped_out) *skipped_out = o.skipped;
    if (scale_out) *scale_out = st->loss_scale;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_update(gpt2rt_ctx *ctx, gpt2rt__cu_state *st, float lr, float *norm,
                                           int *skipped, float *loss_scale) {
    st->phase = "update";
    st->layer = -1;
    GPT2RT__CU_CK(cudaSetDevice(st->device));
    if (st->xt == CUDA_R_32F) return gpt2rt__cu_update_t<float>(ctx, st, lr, norm, skipped, loss_scale);
    if (st->xt == CUDA_R_16BF) return gpt2rt__cu_update_t<__nv_bfloat16>(ctx, st, lr, norm, skipped, loss_scale);
    return gpt2rt__cu_update_t<__half>(ctx, st, lr, norm, skipped, loss_scale);
}

/* ---- the step-level entries ---- */

static gpt2rt_result gpt2rt__cu_be_forward(gpt2rt_ctx *ctx, const int32_t *inputs, const int32_t *targets, float *loss,
                                           int fuse) {
    ctx->cu->dlogits_in_forward = fuse; /* the classifier writes dlogits in the same pass */
    gpt2rt_result r = gpt2rt__cu_forward(ctx, ctx->cu, inputs, targets, loss);
    ctx->have_logits = r == GPT2RT_OK && !ctx->cu->dlogits_ready;
    ctx->have_loss = r == GPT2RT_OK && targets;
    return r;
}

static gpt2rt_result gpt2rt__cu_be_forward_series(gpt2rt_ctx *ctx, const float *x, const float *y, float *loss) {
    ctx->have_pred = 0;
    gpt2rt_result r = gpt2rt__cu_forward_series(ctx, ctx->cu, x, y, loss);
    ctx->have_logits = r == GPT2RT_OK;
    ctx->have_pred = r == GPT2RT_OK && ctx->d.seqhead != GPT2RT_HEAD_NEXT_PATCH; /* NEXT_PATCH forecasts no horizon */
    ctx->have_loss = r == GPT2RT_OK && (y || ctx->d.seqhead == GPT2RT_HEAD_NEXT_PATCH); /* its targets are in x */
    return r;
}

/* the CPU's scale, times the loss scale */
static gpt2rt_result gpt2rt__cu_be_backward(gpt2rt_ctx *ctx) { return gpt2rt__cu_backward(ctx, ctx->cu); }

/* no counted target on one device: skipped as on the CPU, without a norm; data parallel:
   the ranks decide together (8.6) */
static gpt2rt_result gpt2rt__cu_be_update(gpt2rt_ctx *ctx, float lr, gpt2rt__opt_decision *o, float *loss_scale) {
    gpt2rt_result r;
    if (!ctx->acc_targets && ctx->comm->size == 1) {
        if ((r = gpt2rt__cu_zero(ctx, ctx->cu, 0)) != GPT2RT_OK) return r;
        int clean = 0;
        *loss_scale = ctx->cu->loss_scale;
        *o = gpt2rt__opt_policy(ctx, 0.0, loss_scale, &clean); /* skips and says why; the scale stays */
        return GPT2RT_OK;
    }
    if ((r = gpt2rt__cu_update(ctx, ctx->cu, lr, &o->norm, &o->skipped, loss_scale)) != GPT2RT_OK) return r;
    if (!o->skipped) ctx->step++;
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_be_zero_grads(gpt2rt_ctx *ctx, int moments) {
    return ctx->cu ? gpt2rt__cu_zero(ctx, ctx->cu, moments) : GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_be_logits(gpt2rt_ctx *ctx, float *dst) {
    return gpt2rt__cu_logits(ctx, ctx->cu, dst, ctx->d.BT * ctx->d.V);
}

/* the forward brought them to the host */
static gpt2rt_result gpt2rt__cu_be_predictions(gpt2rt_ctx *ctx, float *dst) {
    memcpy(dst, ctx->cu->h_pred, (size_t)ctx->d.n_out * sizeof(float));
    return GPT2RT_OK;
}

static gpt2rt_result gpt2rt__cu_be_dp_reduce(gpt2rt_ctx *ctx, const int64_t (*pieces)[2], int scatter) {
    return gpt2rt__cu_dp_reduce(ctx, ctx->cu, pieces, 2, scatter);
}

static gpt2rt_result gpt2rt__cu_be_host_weights(gpt2rt_ctx *ctx) { return gpt2rt__cu_host_weights(ctx, ctx->cu); }

static gpt2rt_result gpt2rt__cu_be_upload(gpt2rt_ctx *ctx, const float *m, const float *v) {
    GPT2RT__TRY(gpt2rt__cu_upload_params(ctx, ctx->cu));
    return m || v ? gpt2rt__cu_upload_moments(ctx, ctx->cu, m, v) : GPT2RT_OK;
}

/* the device's raw gradients also carry the loss scale */
static gpt2rt_result gpt2rt__cu_be_shard_read(gpt2rt_ctx *ctx, gpt2rt_param_what what, int64_t lo, int64_t hi,
                                              double unscale, float *dst) {
    float k = what == GPT2RT_PARAM_GRAD ? (float)(unscale / (double)ctx->cu->loss_scale) : 1.0f;
    return gpt2rt__cu_read_shard(ctx, ctx->cu, what, lo, hi, k, dst);
}

static gpt2rt_result gpt2rt__cu_be_param_read(gpt2rt_ctx *ctx, const gpt2rt__tensor *t, gpt2rt_param_what what,
                                              double unscale, float *dst) {
    return gpt2rt__cu_param_read(ctx, ctx->cu, t, what, unscale, dst);
}

/* the device arenas (the host holds the fp32 weights) and the driver's own bytes */
static void gpt2rt__cu_be_allocated(const gpt2rt_ctx *ctx, uint64_t *bytes, uint64_t *overhead) {
    memcpy(bytes, ctx->cu->allocated, GPT2RT_MEM_COUNT * sizeof(uint64_t));
    *overhead = ctx->cu->overhead;
}

static gpt2rt_result gpt2rt__cu_be_dp_rank(gpt2rt_ctx *ctx, gpt2rt_ctx *rc, int r, const gpt2rt_memory_plan *plan) {
    (void)plan; /* the device state plans its own arenas, as rank 0's */
    return gpt2rt__cu_dp_rank(ctx, rc, r);
}

static gpt2rt_result gpt2rt__cu_be_dp_open(gpt2rt_ctx *ctx) { return gpt2rt__cu_dp_open(ctx); }
static void gpt2rt__cu_be_release_shared(gpt2rt_ctx *ctx) { gpt2rt__cu_dp_close(ctx); }
static void gpt2rt__cu_be_release(gpt2rt_ctx *ctx) { gpt2rt__cu_free(ctx->cu); }

static const gpt2rt__backend gpt2rt__cu_backend = {
    /* .embed_forward  = */ gpt2rt__cu_embed_forward,
    /* .layer_forward  = */ gpt2rt__cu_layer_forward_any,
    /* .head_forward   = */ gpt2rt__cu_head_forward,
    /* .head_backward  = */ gpt2rt__cu_head_backward,
    /* .layer_backward = */ gpt2rt__cu_layer_backward,
    /* .embed_backward = */ gpt2rt__cu_embed_backward,
    /* .copy           = */ gpt2rt__cu_copy,
    /* .forward        = */ gpt2rt__cu_be_forward,
    /* .forward_series = */ gpt2rt__cu_be_forward_series,
    /* .backward       = */ gpt2rt__cu_be_backward,
    /* .update         = */ gpt2rt__cu_be_update,
    /* .zero_grads     = */ gpt2rt__cu_be_zero_grads,
    /* .logits         = */ gpt2rt__cu_be_logits,
    /* .predictions    = */ gpt2rt__cu_be_predictions,
    /* .dp_reduce      = */ gpt2rt__cu_be_dp_reduce,
    /* .host_weights   = */ gpt2rt__cu_be_host_weights,
    /* .upload         = */ gpt2rt__cu_be_upload,
    /* .shard_read     = */ gpt2rt__cu_be_shard_read,
    /* .param_read     = */ gpt2rt__cu_be_param_read,
    /* .allocated      = */ gpt2rt__cu_be_allocated,
    /* .dp_rank        = */ gpt2rt__cu_be_dp_rank,
    /* .dp_open        = */ gpt2rt__cu_be_dp_open,
    /* .release_shared = */ gpt2rt__cu_be_release_shared,
    /* .release        = */ gpt2rt__cu_be_release,
    /* .decode         = */ gpt2rt__cu_be_decode
};

/* gpt2rt_create with backend = CUDA: one device (or a data-parallel rank 0), or the
   stages of a layer split (8.7), whose context keeps the host's entries */
static gpt2rt_result gpt2rt__cuda_open(gpt2rt_ctx *ctx, const gpt2rt_memory_plan *plan) {
#ifdef GPT2RT__COMM_THREADS
    if (ctx->cfg.parallel == GPT2RT_PARALLEL_LAYER_SPLIT) return gpt2rt__ls_cu_open(ctx, plan);
#endif
    ctx->be = &gpt2rt__cu_backend; /* before the state exists: gpt2rt_free releases what was made */
    return gpt2rt__cu_open(ctx, plan);
}

#undef GPT2RT__CU_CK

#endif /* GPT2RT__SRC_CUDA_BACKEND_CUH */
